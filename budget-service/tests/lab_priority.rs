//! compass's order beside a site's own Slurm priority weights (issue 12,
//! "Living with the site's existing Slurm setup"), on a real slurmctld:
//! `contrib/slurm-lab.sh` with 2 nodes x 8 GPUs, `etc/slurm-budget.conf`
//! but with `PriorityWeightAge=100000` (`PriorityMaxAge=5:00`) and
//! `PriorityWeightJobSize=1000000`, and a second partition `prio` over the
//! same nodes with `PriorityTier=10`. No slurmdbd: every QOS has priority
//! 0 (the service says so in `/healthz`). Read through libslurm as the
//! service does. Root only; skipped with a message otherwise. The cluster
//! is always torn down.
//!
//! With both nodes held by an unbudgeted blocker, team `ta` (over-served)
//! and `tb` queue: a small `ta` job in `prio`, four 1-CPU `tb` jobs and
//! one `ta` job of 2 nodes x 32 CPUs (job size factor 1.0: Slurm adds
//! 1,000,000 to it, about 740,000 more than to a 1-CPU job). compass's
//! order is the `prio` job (its tier), the four `tb` jobs, then the big
//! `ta` job; Slurm's own (tier, then `squeue -o %Q`) must be the same.
//! With keys one apart (as before the margin) the big job's size alone
//! put it ahead of the `tb` jobs (checked by hand: the keys of a fresh
//! queue are 65,536 apart, so it passed all four).
//!
//! libslurm is initialised once per process: one test in this file.
//! Ports 25450-25452: clear of the other labs.

mod common;

use common::lab::{org_tree, skipped, step_until, Lab, LabSpec, Service, ServiceSpec};
use compass_budget::slurm::SlurmSource;
use compass_core::fairshare::{Interval, Kind};
use compass_core::model::JobId;
use std::collections::HashMap;
use std::time::Duration;

const PORT_BASE: u32 = 25_450;

#[test]
fn lab_slurm_priority_order_is_compass_order_with_site_weights() {
    if skipped("lab_slurm_priority_order_is_compass_order_with_site_weights") {
        return;
    }
    // Non-zero age and job-size weights, and the `prio` partition.
    let lab = Lab::start(LabSpec {
        tag: "compass-budget-priority",
        port_base: PORT_BASE,
        nodes: 2,
        gpus: 8,
        conf_replace: vec![
            (
                "PriorityWeightAge=0",
                "PriorityWeightAge=100000\nPriorityMaxAge=0-0:05:00",
            ),
            ("PriorityWeightJobSize=0", "PriorityWeightJobSize=1000000"),
        ],
        conf_extra: "PartitionName=prio Nodes=n[1-2] MaxTime=INFINITE DefaultTime=01:00:00 State=UP PriorityTier=10\n",
        ..LabSpec::default()
    });
    let Service {
        slurm,
        state,
        mut cycle,
    } = lab.service(ServiceSpec {
        config: "[protection]\nenforce = false\n",
        tree: org_tree(&[("ta", 0.5), ("tb", 0.5)]),
        act: false,
    });
    // Team ta has used 8 GPUs for the last 10 minutes: over-served.
    let now = state.now();
    state
        .db()
        .ingest_observed(
            &[Interval {
                job: JobId(1_000_000),
                account: "ta".into(),
                gpus: 8,
                start: now - 600,
                end: Some(now),
                kind: Kind::Allocated,
                weight: 1.0,
            }],
            now,
        )
        .expect("usage");
    cycle.step().expect("first cycle");

    // Both nodes busy with an unbudgeted blocker.
    let blocker = lab.sbatch("other", &["-N", "2", "--exclusive", "--gres=gpu:8"]);
    step_until(
        &lab,
        &mut cycle,
        "the blocker to run",
        Duration::from_secs(60),
        || lab.job_field(blocker, "JobState") == "RUNNING",
    );
    let big = lab.tagged("ta", 600, true, &["-N", "2", "--ntasks=64", "--gres=gpu:1"]);
    let small: Vec<u64> = (0..4)
        .map(|_| lab.tagged("tb", 600, true, &["--gres=gpu:1"]))
        .collect();
    let tiered = lab.tagged("ta", 600, true, &["-p", "prio", "--gres=gpu:1"]);
    let mut expected = vec![tiered];
    expected.extend(&small);
    expected.push(big);

    // Slurm's scheduling order: partition tier first, then priority, then
    // job id.
    let slurm_order = || -> Vec<u64> {
        let out = lab.ok("squeue", &["-h", "-t", "PD", "-o", "%i|%Q|%P"]);
        let mut v: Vec<(u32, u64, u64)> = out
            .lines()
            .filter_map(|l| {
                let mut f = l.split('|');
                let id: u64 = f.next()?.trim().parse().ok()?;
                let prio: u64 = f.next()?.trim().parse().ok()?;
                let tier = if f.next()?.trim() == "prio" { 10 } else { 1 };
                Some((tier, prio, id))
            })
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        v.into_iter().map(|x| x.2).collect()
    };
    let compass_order = |state: &compass_budget::state::AppState| -> Vec<u64> {
        state.queue().order.iter().map(|p| p.job.job.0).collect()
    };
    step_until(
        &lab,
        &mut cycle,
        "compass's order of the six jobs",
        Duration::from_secs(60),
        || compass_order(&state) == expected,
    );
    step_until(
        &lab,
        &mut cycle,
        "Slurm's priority order to be compass's",
        Duration::from_secs(60),
        || slurm_order() == expected,
    );
    // Two more cycles: the order holds and nothing is pushed again.
    for _ in 0..2 {
        let rep = cycle.step().expect("cycle");
        assert_eq!(rep.pushed, 0, "{rep:?}");
        assert_eq!(rep.priority_inversions, 0, "{rep:?}");
    }
    assert_eq!(slurm_order(), expected, "squeue:\n{}", lab.squeue());

    // The weights are live (Slurm adds the job size to every job, most to
    // the big one), the margin is above their sum, and the service says
    // where QOS priorities came from.
    let snap = slurm.snapshot().expect("snapshot");
    let offsets: HashMap<u64, i64> = snap
        .priority_offsets
        .iter()
        .map(|o| (o.0 .0, o.1))
        .collect();
    assert!(
        offsets.get(&big).copied().unwrap_or(0) >= 900_000,
        "{offsets:?}"
    );
    assert!(
        small
            .iter()
            .all(|j| offsets.get(j).copied().unwrap_or(0) < 400_000),
        "{offsets:?}"
    );
    let conf = snap.priority_conf.expect("priority settings");
    assert_eq!(
        (conf.weight_age, conf.weight_job_size),
        (100_000, 1_000_000)
    );
    assert_eq!(conf.slurm_preemption(), None);
    let st = state.status().clone();
    assert_eq!(st.priority_margin.spacing, 1 << 21);
    assert_eq!(st.priority_inversion_jobs, 0);
    assert!(st.priority_offset_jobs >= 5, "{st:?}");
    assert_eq!(
        st.qos_priorities,
        "not weighed (PriorityWeightQOS=0): QOS does not order jobs"
    );
}
