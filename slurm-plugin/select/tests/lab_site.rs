//! The select plugin on a cluster shaped like a real site (issue 12):
//! `contrib/slurm-lab.sh` with `LAB_LAYOUT=site` (n1-n8 `gpu:a100:8`, of
//! which n5-n8 have feature `nvme`, n9-n12 `gpu:l40s:4`, n13-n14 `gpu:2`,
//! n15-n18 CPU-only; partitions gpu, cpu and debug; socket-bound GRES) with
//! `select/cons_tres_compass`.
//!
//! 1. The engine is active in each GPU pool: the published state lists the
//!    pools 8xa100 (8 nodes), 4xl40s (4) and 2xgpu (2), CPU-only nodes in
//!    none.
//! 2. Jobs in every form users write all run and complete: `--gres=gpu:N`,
//!    `--gres=gpu:a100:N`, `--gpus=N`, `--gpus-per-node` with `-N`,
//!    `--gpus-per-task` with `--ntasks`, `--constraint`, `--exclude`, `-w`,
//!    `--exclusive`, a CPU-only job, a job array, a heterogeneous job, the
//!    debug partition, and a job outside the model (`--gpus=3` that may
//!    spread over nodes).
//! 3. Where they run, read from Slurm (squeue), not from the plugin: typed
//!    jobs on nodes of their type, constraints, exclusions and `-w` honoured;
//!    the model's jobs started on the nodes the engine planned (their
//!    RUN_NOW `job_test` narrowed and accepted there), recorded in the
//!    model, each inside one pool; CPU-only, `-w` and out-of-model jobs
//!    never narrowed, the out-of-model one recorded as foreign GPU use.
//! 4. `scontrol reconfigure` rebuilds the same pools from the node table.
//! 5. Compact migrates `--resumable` jobs inside each pool, never across.
//! 6. Compact keeps a `--constraint` job on nodes with its features, also
//!    after a slurmctld restart.
//!
//! Ports 20500-20578 (`COMPASS_LAB_PORT_BASE`, unless set; 20 per lab):
//! clear of the other labs (17100-17900, 18300-18500, 19100-19500, the
//! budget service's site lab 20100-20118). Needs root, like every lab test.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Lab, LabOptions, LAB_CONF};

const SITE: LabOptions = LabOptions {
    compass: true,
    nodes: 18,
    conf: LAB_CONF,
    env: &[("LAB_LAYOUT", "site")],
};

/// Node number of `n12` -> 12.
fn num(node: &str) -> u32 {
    node.trim_start_matches('n').parse().unwrap_or(0)
}

/// Every node of a Slurm host list (`n[9-10,13]`), through scontrol.
fn hosts(lab: &Lab, list: &str) -> Vec<u32> {
    if list.is_empty() {
        return vec![];
    }
    let out = common::lossy(&lab.run("scontrol", &["show", "hostnames", list]).stdout);
    out.lines().map(num).collect()
}

#[test]
fn site_lab_one_engine_per_pool_and_every_job_form_runs() {
    if std::env::var_os("COMPASS_LAB_PORT_BASE").is_none() {
        std::env::set_var("COMPASS_LAB_PORT_BASE", "20500");
    }
    let lab = Lab::start("site", SITE);

    // --- 1. pools in the published state ---------------------------------
    lab.wait_until(
        "the state file lists the pools",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(lab.dir.join("run/compass-state.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|s| s["pools"].as_array().is_some_and(|p| p.len() == 3))
        },
    );
    let state = lab.state_json();
    assert_eq!(state["engine_active"], true, "{state}");
    let pools: Vec<(String, u64, Option<String>, u64, bool)> = state["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["gpus_per_node"].as_u64().unwrap(),
                p["gpu_type"].as_str().map(str::to_string),
                p["nodes"].as_u64().unwrap(),
                p["modelled"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pools,
        vec![
            ("8xa100".into(), 8, Some("a100".into()), 8, true),
            ("4xl40s".into(), 4, Some("l40s".into()), 4, true),
            ("2xgpu".into(), 2, None, 2, true),
        ]
    );
    for p in state["pools"].as_array().unwrap() {
        for key in ["partial_nodes", "n_sif", "node_names"] {
            assert!(!p[key].is_null(), "{key} in {p}");
        }
    }
    let log = lab.ctld_log();
    assert!(
        log.contains("one engine per pool: 8xa100 (8 nodes), 4xl40s (4 nodes), 2xgpu (2 nodes)"),
        "{}",
        lab.debug()
    );

    // --- 2. every job form ----------------------------------------------
    // Each job writes the node it ran on and its GPUs, then sleeps so that
    // they all run at once.
    let wrap = "echo ok $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES; sleep 40";
    let out = |name: &str| lab.dir.join(format!("{name}.out")).display().to_string();
    let mut jobs: BTreeMap<&str, u32> = BTreeMap::new();
    // (`-w n13` first: later untyped jobs may fill the 2-GPU nodes)
    let forms: Vec<(&str, Vec<&str>)> = vec![
        ("nodelist", vec!["-w", "n13", "--gres=gpu:1"]),
        ("gres-untyped", vec!["--gres=gpu:2"]),
        ("gres-a100", vec!["--gres=gpu:a100:4"]),
        ("gpus-n1", vec!["-N1", "--gpus=2"]),
        (
            "per-node-constraint-exclude",
            vec![
                "-N2",
                "--gpus-per-node=4",
                "--constraint=l40s",
                "--exclude=n9,n10",
            ],
        ),
        ("per-task", vec!["--ntasks=2", "--gpus-per-task=1"]),
        ("exclude", vec!["--exclude=n1", "--gres=gpu:a100:8"]),
        ("exclusive", vec!["--exclusive", "--gres=gpu:a100:8"]),
        ("debug", vec!["-p", "debug", "--gres=gpu:l40s:2"]),
        ("cpu", vec!["-p", "cpu", "-n", "4"]),
        ("outside", vec!["--gpus=3"]),
    ];
    for (name, args) in &forms {
        let o = out(name);
        let mut a: Vec<&str> = vec!["-o", &o];
        a.extend(args.iter().copied());
        let id = lab
            .sbatch(&a, wrap)
            .unwrap_or_else(|e| panic!("{name} {args:?}: {e}"));
        jobs.insert(name, id);
    }
    // a job array of four 1-GPU tasks
    let array_out = lab.dir.join("array-%a.out").display().to_string();
    let array = lab
        .sbatch(&["-o", &array_out, "--array=1-4", "--gres=gpu:1"], wrap)
        .expect("array");
    // a heterogeneous job: one GPU component, one CPU-only component
    let het_script = lab.dir.join("het.sh");
    std::fs::write(&het_script, format!("#!/bin/sh\n{wrap}\n")).unwrap();
    let het_out = out("het");
    let het = common::lossy(
        &lab.run(
            "sbatch",
            &[
                "--parsable",
                "-o",
                &het_out,
                "-n1",
                "--gres=gpu:1",
                ":",
                "-p",
                "cpu",
                "-n1",
                het_script.to_str().unwrap(),
            ],
        )
        .stdout,
    )
    .trim()
    .split(';')
    .next()
    .unwrap()
    .parse::<u32>()
    .unwrap_or_else(|_| panic!("hetjob not submitted\n{}", lab.debug()));

    // --- 3. where they run -----------------------------------------------
    // Every job starts (not necessarily all at once: they compete for
    // nodes); its nodes are read from squeue while it runs.
    let all: Vec<u32> = jobs.values().copied().collect();
    let mut nodes_of: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    lab.wait_until("every job started", Duration::from_secs(120), || {
        for &id in &all {
            if let std::collections::btree_map::Entry::Vacant(e) = nodes_of.entry(id) {
                let (st, nodes) = lab.job(id);
                if st == "RUNNING" {
                    e.insert(hosts(&lab, &nodes));
                }
            }
        }
        nodes_of.len() == all.len()
    });
    let on = |name: &str| nodes_of[&jobs[name]].clone();
    let in_range = |nodes: &[u32], lo: u32, hi: u32| {
        !nodes.is_empty() && nodes.iter().all(|n| (lo..=hi).contains(n))
    };
    assert!(in_range(&on("gres-a100"), 1, 8), "{}", lab.debug());
    assert!(in_range(&on("exclusive"), 1, 8), "{}", lab.debug());
    assert!(in_range(&on("exclude"), 2, 8), "{}", lab.debug());
    assert_eq!(
        on("per-node-constraint-exclude"),
        vec![11, 12],
        "{}",
        lab.debug()
    );
    assert_eq!(on("nodelist"), vec![13], "{}", lab.debug());
    assert!(
        on("debug").iter().all(|n| [9, 10].contains(n)),
        "{}",
        lab.debug()
    );
    assert!(in_range(&on("cpu"), 15, 18), "{}", lab.debug());
    // untyped GPU jobs: in one pool, never on a CPU-only node
    for name in ["gres-untyped", "gpus-n1", "per-task", "outside"] {
        assert!(in_range(&on(name), 1, 14), "{name}: {}", lab.debug());
    }
    // The published state: the model's jobs are the engine's (adopted in
    // the model where it planned them), the out-of-model job is foreign.
    lab.wait_until(
        "the state file shows the running jobs",
        Duration::from_secs(15),
        || {
            let s = lab.state_json();
            let known: Vec<u64> = s["jobs"]
                .as_array()
                .map(|j| j.iter().filter_map(|x| x["id"].as_u64()).collect())
                .unwrap_or_default();
            all.iter().all(|id| known.contains(&u64::from(*id)))
        },
    );
    let state = lab.state_json();
    let job_view = |id: u32| {
        state["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"].as_u64() == Some(u64::from(id)))
            .cloned()
            .unwrap_or_else(|| panic!("job {id} not in {state}"))
    };
    for name in [
        "gres-untyped",
        "gres-a100",
        "gpus-n1",
        "per-node-constraint-exclude",
        "per-task",
        "exclude",
        "nodelist",
        "exclusive",
        "debug",
    ] {
        let v = job_view(jobs[name]);
        assert_eq!(v["foreign"], false, "{name}: {v}");
        assert!(!v["shape"].is_null(), "{name}: in the model: {v}");
        // each instance inside one pool
        let nodes: Vec<u32> = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| num(n.as_str().unwrap()))
            .collect();
        let pool = |n: u32| match n {
            1..=8 => 0,
            9..=12 => 1,
            13..=14 => 2,
            _ => 9,
        };
        assert!(
            nodes
                .iter()
                .all(|&n| pool(n) == pool(nodes[0]) && pool(n) < 9),
            "{name}: {v}"
        );
    }
    let outside = job_view(jobs["outside"]);
    assert!(outside["shape"].is_null(), "{outside}");
    // Each of the model's jobs started inside the nodes the engine
    // planned: its RUN_NOW job_test was narrowed to the plan and cons_tres
    // accepted it there (the log line is written only on success).
    // (Array tasks are planned under the array's id; `-w` jobs are left to
    // cons_tres, see docs/admin-guide.md "Mixed clusters".)
    let log = lab.ctld_log();
    for name in [
        "gres-untyped",
        "gres-a100",
        "gpus-n1",
        "per-node-constraint-exclude",
        "per-task",
        "exclude",
        "exclusive",
        "debug",
    ] {
        let line = format!("job_test job {} mode 0: narrowed", jobs[name]);
        assert!(log.contains(&line), "{name}: no `{line}`\n{}", lab.debug());
    }
    for name in ["cpu", "outside", "nodelist"] {
        let line = format!("job_test job {} mode 0: narrowed", jobs[name]);
        assert!(!log.contains(&line), "{name} was narrowed\n{}", lab.debug());
    }
    // The array's tasks and the heterogeneous job are not among the jobs
    // waited for above: their starts may come later (a CI run once
    // asserted the het job's line before its test).
    for (what, id) in [("array", array), ("hetjob", het)] {
        let line = format!("job_test job {id} mode 0: narrowed");
        lab.wait_until(
            &format!("the {what}'s start narrowed"),
            Duration::from_secs(120),
            || lab.ctld_log().contains(&line),
        );
    }
    // per-pool GPU use in the published state matches Slurm's own count
    // (sinfo), both read again until the state file caught up
    let per_pool = |st: &serde_json::Value| -> Vec<Option<u64>> {
        (0..3)
            .map(|k| st["pools"][k]["used_gpus"].as_u64())
            .collect()
    };
    let slurm_per_pool = || -> Vec<Option<u64>> {
        let used = lab.gpus_used();
        [(1u32, 8u32), (9, 12), (13, 14)]
            .into_iter()
            .map(|(lo, hi)| {
                Some(
                    used.iter()
                        .filter(|(n, _)| (lo..=hi).contains(&num(n)))
                        .map(|(_, g)| u64::from(*g))
                        .sum(),
                )
            })
            .collect()
    };
    lab.wait_until(
        "per-pool GPU use in the state file = Slurm's",
        Duration::from_secs(15),
        || {
            let s = slurm_per_pool();
            per_pool(&lab.state_json()) == s && s.iter().all(|g| g.unwrap_or(0) > 0)
        },
    );

    // What `compass status` prints now (docs/admin-guide.md, "Mixed
    // clusters"): one line per pool.
    let published =
        compass_slurm::state::PublishedState::read(&lab.dir.join("run/compass-state.json"))
            .expect("state file");
    let status = published.render(published.updated_unix);
    eprintln!("{status}");
    for pool in [
        "pool 8xa100: 8 nodes",
        "pool 4xl40s: 4 nodes",
        "pool 2xgpu: 2 nodes",
    ] {
        assert!(status.contains(pool), "{status}");
    }

    // --- 4. reconfigure rebuilds the same pools --------------------------
    let rebuilt = |log: &str| {
        log.matches("pools: 8xa100 (8 nodes), 4xl40s (4 nodes), 2xgpu (2 nodes)")
            .count()
    };
    let before = rebuilt(&lab.ctld_log());
    assert!(lab.run("scontrol", &["reconfigure"]).status.success());
    lab.wait_until(
        "pools rebuilt at reconfigure",
        Duration::from_secs(20),
        || rebuilt(&lab.ctld_log()) > before,
    );

    // --- 2 (end). everything completes -----------------------------------
    let mut every: Vec<u32> = all.clone();
    every.push(het);
    lab.wait_until("every job completed", Duration::from_secs(180), || {
        every.iter().all(|&j| lab.job(j).0 == "GONE")
            && common::lossy(&lab.run("squeue", &["-h", "-j", &array.to_string()]).stdout)
                .trim()
                .is_empty()
    });
    let ran = |path: &str| {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .starts_with("ok n")
    };
    for name in jobs.keys() {
        assert!(
            ran(&out(name)),
            "{name} did not run: {:?}",
            std::fs::read_to_string(out(name))
        );
    }
    assert!(
        ran(&het_out),
        "hetjob: {:?}",
        std::fs::read_to_string(&het_out)
    );
    for a in 1..=4 {
        let p = lab.dir.join(format!("array-{a}.out")).display().to_string();
        assert!(ran(&p), "array task {a}: {:?}", std::fs::read_to_string(&p));
    }
    // CPU-only job on a CPU node, typed GPU jobs with GPUs of their nodes
    let text = std::fs::read_to_string(out("cpu")).unwrap();
    assert!(
        in_range(&[num(text.split_whitespace().nth(1).unwrap())], 15, 18),
        "{text}"
    );
    assert_eq!(
        lab.run("squeue", &["-h"]).stdout.len(),
        0,
        "{}",
        lab.debug()
    );
}

/// Compact runs in each pool on its own: in the a100 pool and, at the same
/// time, in the l40s nodes of the debug partition, three `--resumable`
/// jobs, two sharing a node; one of the pair ends. Each pool then moves
/// one job onto the other's node, inside the pool (never across), and no
/// partial node is left in either.
#[test]
fn site_lab_compact_migrates_inside_each_pool() {
    if std::env::var_os("COMPASS_LAB_PORT_BASE").is_none() {
        std::env::set_var("COMPASS_LAB_PORT_BASE", "20500");
    }
    let lab = Lab::start("site-migrate", SITE);
    let a100 = ["--resumable", "--gres=gpu:a100:4"];
    let l40s = ["--resumable", "-p", "debug", "--gres=gpu:l40s:2"];
    let trio = |args: &[&str]| -> Vec<u32> { (0..3).map(|_| lab.submit(args)).collect() };
    let ja = trio(&a100);
    let jl = trio(&l40s);
    let every: Vec<u32> = ja.iter().chain(&jl).copied().collect();
    lab.wait_running(&every, Duration::from_secs(30));
    for (jobs, lo, hi) in [(&ja, 1, 8), (&jl, 9, 10)] {
        let at: Vec<Vec<u32>> = jobs.iter().map(|&j| hosts(&lab, &lab.job(j).1)).collect();
        assert_eq!(
            at[0],
            at[1],
            "the engine pairs the first two\n{}",
            lab.debug()
        );
        assert_ne!(at[1], at[2], "{}", lab.debug());
        assert!(at.iter().flatten().all(|n| (lo..=hi).contains(n)), "{at:?}");
    }
    for j in [ja[0], jl[0]] {
        assert!(lab.run("scancel", &[&j.to_string()]).status.success());
    }
    lab.wait_until(
        "in each pool the two remaining jobs share one node",
        Duration::from_secs(30),
        || {
            [&ja, &jl].iter().all(|jobs| {
                let (s1, x1) = lab.job(jobs[1]);
                let (s2, x2) = lab.job(jobs[2]);
                s1 == "RUNNING" && s2 == "RUNNING" && x1 == x2
            })
        },
    );
    for (jobs, lo, hi) in [(&ja, 1, 8), (&jl, 9, 10)] {
        let n = hosts(&lab, &lab.job(jobs[1]).1);
        assert!(
            n.iter().all(|n| (lo..=hi).contains(n)),
            "moved out of its pool: {n:?}"
        );
        let restarts = jobs[1..]
            .iter()
            .filter(|&&j| lab.show_job(j).contains("Restarts=1"))
            .count();
        assert_eq!(restarts, 1, "one migration per pool\n{}", lab.debug());
    }
    lab.wait_until(
        "the state file shows no partial node in either pool",
        Duration::from_secs(15),
        || {
            let s = lab.state_json();
            (0..2).all(|k| s["pools"][k]["partial_nodes"].as_u64() == Some(0))
                && s["pools"][0]["used_gpus"].as_u64() == Some(8)
                && s["pools"][1]["used_gpus"].as_u64() == Some(4)
        },
    );
}

/// Compact keeps a job inside its `--constraint` features, and still does
/// after a slurmctld restart (docs/compass-corrections.md, section 8). The
/// site lab gives `nvme` to n5-n8 only, part of the a100 pool. Two jobs
/// that never move (not resumable, `-w`) hold half of n1 and of n2; a
/// `--resumable --constraint=nvme` job starts beside a third one on n5,
/// which then ends. Three half-used nodes are more than Theorem 1 allows,
/// and only the constrained job may move: a Compact that ignores its
/// features pins it onto n1 or n2, where Slurm never starts it. Checked:
/// with the features not read, this test fails at its first check (the
/// job requeued, pinned to n1); with the restriction given at the job's
/// start only (before this test), after the restart. Each check waits
/// until the plugin has run two rounds (1 s each) with the job adopted,
/// read from the state file's clock.
#[test]
fn site_lab_compact_keeps_constraint_features_across_a_restart() {
    if std::env::var_os("COMPASS_LAB_PORT_BASE").is_none() {
        std::env::set_var("COMPASS_LAB_PORT_BASE", "20500");
    }
    let lab = Lab::start("site-features", SITE);
    let still: Vec<u32> = ["n1", "n2"]
        .iter()
        .map(|n| lab.submit(&["--gres=gpu:a100:4", "-w", n]))
        .collect();
    lab.wait_running(&still, Duration::from_secs(30));
    let partner = lab.submit(&["--gres=gpu:a100:4", "-w", "n5"]);
    lab.wait_running(&[partner], Duration::from_secs(30));
    let held = lab.submit(&["--resumable", "--gres=gpu:a100:4", "--constraint=nvme"]);
    lab.wait_running(&[held], Duration::from_secs(30));
    let home = lab.job(held).1;
    assert_eq!(home, "n5", "planned beside its partner\n{}", lab.debug());
    assert!(lab.run("scancel", &[&partner.to_string()]).status.success());
    lab.wait_until("the partner ended", Duration::from_secs(30), || {
        lab.job(partner).0 == "GONE"
    });
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let check = |when: &str| {
        let since = unix();
        lab.wait_until(
            &format!("{when}: the plugin ran two rounds with job {held} adopted"),
            Duration::from_secs(40),
            || {
                let s = lab.state_json();
                s["updated_unix"].as_u64().is_some_and(|t| t >= since + 2)
                    && s["jobs"]
                        .as_array()
                        .is_some_and(|j| j.iter().any(|j| j["id"] == u64::from(held)))
            },
        );
        let (state, at) = lab.job(held);
        assert_eq!(
            (state.as_str(), at.as_str()),
            ("RUNNING", home.as_str()),
            "{when}: the nvme job left its node\n{}",
            lab.debug()
        );
        assert!((5..=8).contains(&num(&at)), "{when}: on {at}, without nvme");
        assert!(
            lab.show_job(held).contains("Restarts=0"),
            "{when}: the nvme job was requeued\n{}",
            lab.show_job(held)
        );
        let s = lab.state_json();
        assert_eq!(
            s["pending_migrations"],
            serde_json::json!([]),
            "{when}: {s}"
        );
        assert_eq!(s["pools"][0]["partial_nodes"], 3, "{when}: {s}");
    };
    check("after its start");
    let rebuilt = |log: &str| log.matches("engine rebuilt from").count();
    let before = rebuilt(&lab.ctld_log());
    lab.restart_ctld();
    lab.wait_until(
        "the engine rebuilt after the restart",
        Duration::from_secs(60),
        || rebuilt(&lab.ctld_log()) > before,
    );
    check("after a slurmctld restart");
    lab.wait_running(&still, Duration::from_secs(5));
}
