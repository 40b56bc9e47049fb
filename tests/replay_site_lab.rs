//! `compass replay --check` on the site lab (issue 12): a cluster shaped
//! like a real site (`contrib/slurm-lab.sh`, `LAB_LAYOUT=site`: n1-n8
//! `gpu:a100:8`, n9-n12 `gpu:l40s:4`, n13-n14 `gpu:2`, n15-n18 CPU-only;
//! partitions gpu, cpu, debug; socket-bound GRES; CR_Core_Memory) running
//! select/cons_tres_compass with the SPANK plugin, of the release this
//! build is for. A window of 48 jobs of the Venus sample (1, 2, 3, 4 and
//! 8 GPUs, 2 x 8 and 5 x 8 multi-node jobs) goes through real `sbatch`
//! into the default `gpu` partition, and `compass replay --check` asserts,
//! from what Slurm reports:
//!
//! 1. every job completed exactly once (the jobs' own completion logs);
//! 2. no job ran on a node the engine did not choose (each start narrowed
//!    in RUN_NOW mode, none widened), and every run of 12 s or more was
//!    recorded by the engine's published state on Slurm's nodes (shorter
//!    ones may fall between two writes: `RECORD_MIN_RUN_S`);
//! 3. per pool: `N*SIF <= 2` at every settled poll where WCC held in that
//!    pool and the engine kept no job still; the engine active in every
//!    pool jobs ran in; no run spanning two pools.
//!
//! The test then reads report.json: the three pools named as the plugin
//! names them, each with its engine active, jobs placed in more than one
//! pool, the CPU-only nodes in none, and the per-pool figures in report.md.
//! No stock cluster runs beside it (a second 18-node lab would double the
//! load of a 2-core CI machine): the AFR comparison with stock is the
//! homogeneous replay lab's (`tests/replay_lab.rs`). About 2.5 minutes.
//!
//! Port 18700 (slurmd 18701-18718), or `COMPASS_REPLAY_LAB_PORT_BASE + 700`:
//! clear of the other labs. Needs root, like every lab test.

mod replay_common;

use replay_common::{cluster, plan_has, port, Lab, TempDir};

/// The first 48 jobs of `tests/fixtures/venus-window.csv` (the homogeneous
/// replay lab's window), as compressed there. Offered load about 1 on the
/// 8 A100 nodes (the only ones that take 8-GPU jobs): the queue fills, so
/// smaller jobs go to every pool. Measured here: 130 s, 4 migrations.
const WINDOW: &[&str] = &[
    "--start",
    "0",
    "--hours",
    "6",
    "--jobs",
    "48",
    "--speedup",
    "300",
    "--min-run",
    "5s",
    "--max-run",
    "40s",
];

#[test]
fn replay_on_the_site_lab_passes_the_checks_in_every_pool() {
    replay_common::require_lab();
    let out = TempDir::new("compass-replay-site-out");
    let lab = Lab::up("site", port(18_700), true, &[("LAB_LAYOUT", "site")]);
    let compass = lab.cluster_arg("compass", true);
    let (_, report) =
        replay_common::replay_checked(&[compass], WINDOW, "site lab (lab test)", &out.0);

    let jobs = report["plan"]["jobs"].as_array().expect("plan jobs");
    assert_eq!(jobs.len(), 48, "the window's 48 jobs all fit the A100 pool");
    let has = |w: u64, g: u64| plan_has(&report, w, g);
    assert!(
        has(1, 1) && has(1, 2) && has(1, 4) && has(1, 8) && has(2, 8) && has(5, 8),
        "the window mixes 1/2/4/8-GPU and multi-node jobs"
    );

    let c = cluster(&report, "compass");
    assert_eq!(c["completed"], 48, "{c}");
    assert_eq!(c["completion"]["once"], 48, "{c}");
    assert_eq!(c["nodes"], 14, "the CPU-only nodes are in no pool: {c}");
    assert_eq!(c["gpus_per_node"], 0, "a mixed cluster");
    assert!(c["simulated"].is_null() && c["simulated_skipped"].is_string());

    // One engine per pool, each active, named as the plugin names them.
    let pools = c["pools"].as_array().expect("pools");
    let names: Vec<&str> = pools.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["8xa100", "4xl40s", "2xgpu"], "{c}");
    let mut runs_in_pools = 0;
    for p in pools {
        assert_eq!(p["modelled"], true, "{p}");
        assert_eq!(p["engine"], true, "the engine is active in {p}");
        if let Some(n) = p["max_n_sif_under_wcc_settled"].as_u64() {
            assert!(n <= 2, "Theorem 1 in pool {p}");
        }
        runs_in_pools += p["runs"].as_u64().unwrap();
    }
    assert_eq!(pools[0]["nodes"], 8);
    assert!(pools[0]["runs"].as_u64().unwrap() > 0, "{c}");
    assert!(
        pools[1]["runs"].as_u64().unwrap() + pools[2]["runs"].as_u64().unwrap() > 0,
        "smaller jobs also ran outside the A100 pool: {c}"
    );
    assert_eq!(c["runs_across_pools"], 0, "{c}");

    // Every run was recorded by the engine on Slurm's nodes, or was short.
    let nc = &c["node_check"];
    let runs = nc["runs"].as_u64().unwrap();
    assert_eq!(runs_in_pools, runs, "every run lay in one pool: {c}");
    assert_eq!(
        nc["engine_recorded"].as_u64().unwrap() + nc["short_unrecorded"].as_u64().unwrap(),
        runs,
        "{nc}"
    );
    assert!(runs >= 48, "{nc}");

    let md = std::fs::read_to_string(out.0.join("report.md")).expect("report.md");
    for needle in [
        "Configuration: **site lab (lab test)**",
        "## Pools",
        "| compass | 8xa100 | 8 | active |",
        "| compass | 4xl40s | 4 | active |",
        "| compass | 2xgpu | 2 | active |",
    ] {
        assert!(md.contains(needle), "report.md lacks `{needle}`:\n{md}");
    }
}
