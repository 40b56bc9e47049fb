//! The budget service on a cluster shaped like a real site (issue 12):
//! `contrib/slurm-lab.sh` with `LAB_LAYOUT=site` (8 x `gpu:a100:8`,
//! 4 x `gpu:l40s:4`, 2 x `gpu:2`, 4 CPU-only nodes; partitions gpu, cpu and
//! debug; `Cores=` in gres.conf, so slurmctld reports socket-bound GRES).
//! Read through libslurm ([`LibSlurm`]), as the service does. Root only;
//! skipped with a message otherwise. The cluster is always torn down.
//!
//! 1. `sinfo` shows every GPU node's GRES socket-bound (`(S:0-1)`).
//! 2. The service reads every node kind's GPUs right (a100 8, l40s 4,
//!    2-GPU 2, CPU-only 0) and the cluster's capacity (84).
//! 3. Running jobs in the forms users write (`--gres=gpu:a100:N`,
//!    `-p debug --gres=gpu:l40s:N`, `--gpus=N`, a CPU-only job) are read with
//!    their GPUs and where they hold them.
//! 4. Enforcement frees only room the waiting job can use: an allocated
//!    job of partition `debug` asking for `gpu:l40s:4` waits while
//!    unallocated jobs fill the debug L40S nodes n9 and n10 and an A100
//!    node (the cheapest victim, outside debug and of the wrong type). The
//!    service cancels one job on n9 or n10, never the A100 one, and the
//!    waiting job then starts on the node it freed.
//!
//! libslurm is initialised once per process: one test in this file.
//! Ports 20100-20118: clear of the other labs (17100-17900, 18300-18500,
//! 19100-19500) and of slurm-lab.sh's default.

mod common;

use common::lab::{lossy, skip_reason, Lab, LabSpec};

use common::lab::{service_state, spec, step_until};
use compass_budget::cycle::Cycle;
use compass_budget::slurm::libslurm::LibSlurm;
use compass_budget::slurm::SlurmSource;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PORT_BASE: u32 = 20_100;

fn wait(lab: &Lab, what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < timeout,
            "timed out waiting for {what}; squeue:\n{}",
            lossy(&lab.run("squeue", &["-o", "%i %P %T %r %N %b"]).stdout)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn start_site_lab(tag: &'static str) -> Lab {
    Lab::start(LabSpec {
        tag,
        port_base: PORT_BASE,
        nodes: 18,
        gpus: 8,
        env: vec![("LAB_LAYOUT", PathBuf::from("site"))],
        ..LabSpec::default()
    })
}

#[test]
fn lab_site_layout_capacities_and_jobs_through_libslurm() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED lab_site_layout_capacities_and_jobs_through_libslurm: {why}");
        return;
    }
    let lab = start_site_lab("compass-budget-site");
    let slurm = Arc::new(LibSlurm::new(Some(lab.conf.clone())));

    // --- 1. sinfo: GRES socket-bound on every GPU node --------------------
    let want = |i: u32| match i {
        1..=8 => "gpu:a100:8(S:0-1)",
        9..=12 => "gpu:l40s:4(S:0-1)",
        13..=14 => "gpu:2(S:0-1)",
        _ => "(null)",
    };
    let read_gres = || {
        let sinfo = lab.ok("sinfo", &["-h", "-N", "-p", "gpu,cpu", "-o", "%N %G"]);
        let gres: std::collections::BTreeMap<String, String> = sinfo
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, g)| (n.to_string(), g.trim().to_string()))
            .collect();
        (sinfo, gres)
    };
    // A slurmd's socket-bound GRES shows once it has registered; on a
    // loaded host the last of 18 may take a while after the lab is up.
    let t0 = std::time::Instant::now();
    let (sinfo, gres) = loop {
        let (sinfo, gres) = read_gres();
        let all = (1..=18).all(|i| gres.get(&format!("n{i}")).map(String::as_str) == Some(want(i)));
        if all || t0.elapsed() > std::time::Duration::from_secs(60) {
            break (sinfo, gres);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    };
    assert_eq!(gres.len(), 18, "{sinfo}");
    for i in 1..=18 {
        assert_eq!(gres[&format!("n{i}")], want(i), "n{i}: {sinfo}");
    }
    let parts = lab.ok("sinfo", &["-h", "-o", "%P %N"]);
    assert!(parts.contains("gpu* n[1-14]"), "{parts}");
    assert!(parts.contains("cpu n[15-18]"), "{parts}");
    assert!(parts.contains("debug n[9-10,13-14]"), "{parts}");

    // --- 2. The service's reader: GPUs of every node kind ------------------
    let snap = slurm.snapshot().expect("snapshot of the site lab");
    assert_eq!(snap.nodes.len(), 18, "{:?}", snap.nodes);
    for n in &snap.nodes {
        let i: u32 = n.name[1..].parse().expect("node number");
        let want = match i {
            1..=8 => 8,
            9..=12 => 4,
            13..=14 => 2,
            _ => 0,
        };
        assert_eq!(n.gpus, want, "{n:?}");
    }
    assert_eq!(snap.capacity_gpus, Some(8 * 8 + 4 * 4 + 2 * 2));

    // --- 3. Jobs in the forms users write ----------------------------------
    let a100 = lab.sbatch("team-a", &["--gres=gpu:a100:3"]);
    let l40s = lab.sbatch("team-a", &["-p", "debug", "--gres=gpu:l40s:2"]);
    let gpus = lab.sbatch("team-a", &["-w", "n13", "--gpus=2"]);
    let cpu = lab.sbatch("team-a", &["-p", "cpu", "-c", "8"]);
    wait(
        &lab,
        "the four jobs to run",
        Duration::from_secs(30),
        || {
            lab.ok("squeue", &["-h", "-t", "R", "-o", "%i"])
                .lines()
                .count()
                == 4
        },
    );
    let snap = slurm.snapshot().expect("snapshot with jobs");
    let job = |id: u64| {
        snap.running
            .iter()
            .find(|j| j.job.0 == id)
            .unwrap_or_else(|| panic!("job {id} not running: {:?}", snap.running))
    };
    let on = |id: u64| {
        job(id)
            .alloc
            .iter()
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(job(a100).gpus, 3);
    let n: u32 = on(a100)[0][1..].parse().unwrap();
    assert!((1..=8).contains(&n), "a100 job on {:?}", on(a100));
    assert_eq!(job(a100).alloc[0].1, 3);
    assert_eq!(job(l40s).gpus, 2);
    assert!(
        on(l40s) == ["n9"] || on(l40s) == ["n10"],
        "debug l40s job on {:?}",
        on(l40s)
    );
    assert_eq!((job(gpus).gpus, on(gpus)), (2, vec!["n13".to_string()]));
    assert_eq!((job(cpu).gpus, job(cpu).alloc.len()), (0, 0));
    lab.ok("scancel", &["--full", "-u", "root"]);
    wait(&lab, "an empty queue", Duration::from_secs(30), || {
        lab.ok("squeue", &["-h", "-o", "%i"]).trim().is_empty()
    });

    // --- 4. Enforcement frees only room the waiting job can use -----------
    let state = service_state(
        &lab,
        "[protection]\nenforce = true\n",
        vec![
            spec("org", None, 1.0, None),
            spec("rich", Some("org"), 0.3, Some("rich")),
            spec("poor", Some("org"), 0.7, Some("poor")),
        ],
    );
    let mut cycle =
        Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
    // Unallocated fillers: the debug L40S nodes first (they will have run
    // longer, so they lose more when preempted), then one A100 node.
    let f9 = lab.tagged("rich", 0, false, &["-w", "n9", "--gres=gpu:l40s:4"]);
    let f10 = lab.tagged("rich", 0, false, &["-w", "n10", "--gres=gpu:l40s:4"]);
    wait(&lab, "the l40s fillers", Duration::from_secs(30), || {
        lab.job_field(f9, "JobState") == "RUNNING" && lab.job_field(f10, "JobState") == "RUNNING"
    });
    std::thread::sleep(Duration::from_secs(5));
    let fa = lab.tagged("rich", 0, false, &["-w", "n1", "--gres=gpu:a100:8"]);
    wait(&lab, "the a100 filler", Duration::from_secs(30), || {
        lab.job_field(fa, "JobState") == "RUNNING"
    });
    let j = lab.tagged("poor", 3600, false, &["-p", "debug", "--gres=gpu:l40s:4"]);
    step_until(
        &lab,
        &mut cycle,
        "the debug job to start",
        Duration::from_secs(40),
        || lab.job_field(j, "JobState") == "RUNNING",
    );
    let states: Vec<String> = [f9, f10, fa]
        .iter()
        .map(|&id| lab.job_field(id, "JobState"))
        .collect();
    assert_eq!(
        states[2], "RUNNING",
        "the a100 filler is never a victim: {states:?}"
    );
    let gone: Vec<usize> = (0..2).filter(|&i| states[i] != "RUNNING").collect();
    assert_eq!(
        gone.len(),
        1,
        "exactly one debug filler preempted: {states:?}"
    );
    let freed = ["n9", "n10"][gone[0]];
    assert_eq!(
        lab.job_field(j, "NodeList"),
        freed,
        "the job runs where room was freed"
    );
    let acts = state.db().actions(None, 100).expect("actions");
    let cancels: Vec<_> = acts.iter().filter(|a| a.action == "cancel").collect();
    assert_eq!(cancels.len(), 1, "{acts:?}");
    assert_eq!(cancels[0].cause_job, Some(j), "{acts:?}");
}
