//! Budgets on the site lab (issue 12): GPU weights and partition tiers,
//! on `contrib/slurm-lab.sh` with `LAB_LAYOUT=site` (8 x `gpu:a100:8`,
//! 4 x `gpu:l40s:4`, 2 x `gpu:2`, 4 CPU-only nodes; partitions gpu, cpu and
//! `debug` over n9, n10, n13, n14 with `PriorityTier=10`), read through
//! libslurm as the service does. Root only; skipped with a message
//! otherwise. The cluster is always torn down.
//!
//! With `[gpu_weights] a100 = 2.0, l40s = 1.0`:
//! 1. The capacity is in weighted GPUs: 8 x 8 x 2 + 4 x 4 x 1 + 2 x 2 = 148.
//! 2. Partition tiers: with n9-n12 (every L40S node) busy, three allocated
//!    jobs wait for `gpu:l40s:4`: G1 (partition gpu, over-served team ta,
//!    submitted first), G2 (gpu, under-served team tb), D (partition
//!    `debug`, team ta). The service orders D first (its tier), then G2
//!    before G1 (fair share within the tier). Freeing n9 (in both
//!    partitions) starts D; freeing n11 (gpu only) then starts G2, not the
//!    older G1.
//!    Slurm's priorities are compass's factors (no offset reported); a
//!    priority set by hand is reported as one.
//! 3. Charges: every run is priced at its GPUs' weight: the a100 job's
//!    interval has weight 2, the l40s jobs' weight 1, and each team's
//!    charged usage is the sum of GPUs x weight x run time.
//!
//! libslurm is initialised once per process: one test in this file.
//! Ports 25100-25118: clear of the other labs.

mod common;

use common::lab::{org_tree, skipped, step_until, Lab, LabSpec, Service, ServiceSpec};
use compass_core::model::JobId;
use std::path::PathBuf;
use std::time::Duration;

const PORT_BASE: u32 = 25_100;

#[test]
fn lab_site_gpu_weights_and_partition_tiers() {
    if skipped("lab_site_gpu_weights_and_partition_tiers") {
        return;
    }
    let lab = Lab::start(LabSpec {
        tag: "compass-budget-site-weights",
        port_base: PORT_BASE,
        nodes: 18,
        gpus: 8,
        env: vec![("LAB_LAYOUT", PathBuf::from("site"))],
        ..LabSpec::default()
    });
    let Service {
        slurm,
        state,
        mut cycle,
    } = lab.service(ServiceSpec {
        config: "[protection]\nenforce = false\n[gpu_weights]\na100 = 2.0\nl40s = 1.0\n",
        tree: org_tree(&[("ta", 0.5), ("tb", 0.5)]),
        act: false,
    });

    // --- 1. Weighted capacity -----------------------------------------
    cycle.step().expect("first cycle");
    assert_eq!(state.capacity(), 8.0 * 8.0 * 2.0 + 4.0 * 4.0 + 2.0 * 2.0);

    // Team ta runs 2 a100 GPUs: over-served from now on (tb uses nothing).
    let a = lab.tagged("ta", 600, true, &["--gres=gpu:a100:2"]);
    // Every L40S node busy (unbudgeted blockers).
    let blockers: Vec<u64> = ["n9", "n10", "n11", "n12"]
        .iter()
        .map(|n| lab.sbatch("other", &["-w", n, "--gres=gpu:l40s:4"]))
        .collect();
    step_until(
        &lab,
        &mut cycle,
        "the a100 job and the blockers to run",
        Duration::from_secs(60),
        || {
            std::iter::once(&a)
                .chain(&blockers)
                .all(|&j| lab.job_field(j, "JobState") == "RUNNING")
        },
    );
    std::thread::sleep(Duration::from_secs(3));

    // --- 2. Tiers first, fair share within a tier ----------------------
    let g1 = lab.tagged("ta", 600, true, &["--gres=gpu:l40s:4"]);
    std::thread::sleep(Duration::from_secs(1));
    let g2 = lab.tagged("tb", 600, true, &["--gres=gpu:l40s:4"]);
    let d = lab.tagged("ta", 600, true, &["-p", "debug", "--gres=gpu:l40s:4"]);
    let rank = |q: &compass_budget::state::QueueView, j: u64| {
        q.order
            .iter()
            .position(|p| p.job.job == JobId(j))
            .unwrap_or(usize::MAX)
    };
    step_until(
        &lab,
        &mut cycle,
        "the three jobs in the service's order",
        Duration::from_secs(30),
        || {
            let q = state.queue();
            [g1, g2, d].iter().all(|&j| rank(&q, j) < usize::MAX)
        },
    );
    let q = state.queue();
    assert!(
        rank(&q, d) < rank(&q, g2) && rank(&q, g2) < rank(&q, g1),
        "D (debug tier), then G2 (under-served), then G1: {:?}",
        q.order
            .iter()
            .map(|p| (p.job.job.0, p.job.tier, p.job.account.clone()))
            .collect::<Vec<_>>()
    );
    let dp = &q.order[rank(&q, d)];
    assert_eq!(dp.job.tier, 10);
    let why = compass_core::fairshare::explain(dp, q.order.len());
    assert!(why.contains("PriorityTier 10"), "{why}");
    // Slurm holds the pushed order: G2's priority above G1's.
    let prio = |j: u64| -> u64 { lab.job_field(j, "Priority").parse().expect("priority") };
    assert!(prio(g2) > prio(g1), "G2 {} G1 {}", prio(g2), prio(g1));
    // With every other PriorityWeight at 0 (etc/slurm-budget.conf), Slurm's
    // priority is compass's factor: no offsets. A priority set by hand on
    // G1 (`scontrol update Priority=`) is one, and is reported.
    use compass_budget::slurm::SlurmSource;
    assert_eq!(slurm.snapshot().expect("snapshot").priority_offsets, []);
    lab.ok(
        "scontrol",
        &["update", &format!("JobId={g1}"), "Priority=2"],
    );
    let offs = slurm.snapshot().expect("snapshot").priority_offsets;
    assert_eq!(
        offs.iter().map(|o| o.0 .0).collect::<Vec<_>>(),
        [g1],
        "{offs:?}"
    );
    cycle.step().expect("cycle");
    assert_eq!(state.status().priority_offset_jobs, 1);

    // Free n9 (gpu and debug): the debug job starts there.
    lab.ok("scancel", &[&blockers[0].to_string()]);
    step_until(
        &lab,
        &mut cycle,
        "the debug job to start",
        Duration::from_secs(60),
        || lab.job_field(d, "JobState") == "RUNNING",
    );
    assert_eq!(lab.job_field(d, "NodeList"), "n9");
    assert_eq!(lab.job_field(g1, "JobState"), "PENDING");
    assert_eq!(lab.job_field(g2, "JobState"), "PENDING");
    // Free n11 (gpu only): G2 starts, not the older G1.
    lab.ok("scancel", &[&blockers[2].to_string()]);
    step_until(
        &lab,
        &mut cycle,
        "G2 to start",
        Duration::from_secs(60),
        || lab.job_field(g2, "JobState") == "RUNNING",
    );
    assert_eq!(lab.job_field(g2, "NodeList"), "n11");
    assert_eq!(lab.job_field(g1, "JobState"), "PENDING");

    // --- 3. Charges per GPU weight --------------------------------------
    std::thread::sleep(Duration::from_secs(3));
    cycle.step().expect("cycle");
    lab.ok("scancel", &["--full", "-u", "root"]);
    step_until(
        &lab,
        &mut cycle,
        "every run closed in the ledger",
        Duration::from_secs(60),
        || {
            [a, d, g2].iter().all(|&j| {
                state
                    .db()
                    .latest_interval(JobId(j))
                    .expect("ledger")
                    .is_some_and(|iv| iv.end.is_some())
            })
        },
    );
    let iv = |j: u64| {
        state
            .db()
            .latest_interval(JobId(j))
            .expect("ledger")
            .expect("interval")
    };
    let (ia, id, ig) = (iv(a), iv(d), iv(g2));
    assert_eq!((ia.gpus, ia.weight), (2, 2.0), "{ia:?}");
    assert_eq!((id.gpus, id.weight), (4, 1.0), "{id:?}");
    assert_eq!((ig.gpus, ig.weight), (4, 1.0), "{ig:?}");
    let secs = |i: &compass_core::fairshare::Interval| (i.end.unwrap() - i.start) as f64;
    assert!(secs(&ia) > 0.0 && secs(&ig) > 0.0, "{ia:?} {ig:?}");
    let now = state.now();
    let usage = state
        .db()
        .usage_between(now - 3600, now + 1)
        .expect("usage");
    assert_eq!(
        usage["ta"].charged_gpu_s,
        2.0 * 2.0 * secs(&ia) + 4.0 * secs(&id),
        "ta: a100 x 2 at weight 2, l40s x 4 at weight 1"
    );
    assert_eq!(usage["tb"].charged_gpu_s, 4.0 * secs(&ig));
}
