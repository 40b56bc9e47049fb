//! Compressed run of the whole loop (ingest -> order -> push) against the
//! fake Slurm, with a minimal priority scheduler standing in for slurmctld:
//! two teams with 70/30 budgets both submit more than the cluster holds; the
//! 70% team must receive 70% +- 5% of the charged GPU-time. (The same check
//! against the real local Slurm cluster is in `tests/lab_slurm.rs`.)

mod common;

use common::{spec, test_state, NoAuth};
use compass_budget::config::Config;
use compass_budget::cycle::Cycle;
use compass_budget::slurm::{FakeSlurm, SlurmJob, SlurmSource};
use compass_core::model::JobId;
use std::collections::HashMap;
use std::sync::Arc;

const T0: i64 = 1_800_000_000;
const CAPACITY: u32 = 10;
const STEP: i64 = 60;
const JOB_S: i64 = 1800;

#[test]
fn seventy_thirty_budgets_get_seventy_thirty_of_charged_time() {
    let config = Config::parse(
        &format!(
            "db = \":memory:\"\ncapacity_gpus = {CAPACITY}\nwindow_s = {}\ncycle_s = {STEP}\n",
            6 * 3600
        ),
        "fairness",
    )
    .unwrap();
    let (state, clock) = test_state(
        config,
        NoAuth,
        T0,
        vec![
            spec("org", None, 1.0, None),
            spec("big", Some("org"), 0.7, Some("acct-big")),
            spec("small", Some("org"), 0.3, Some("acct-small")),
        ],
    );
    let slurm = Arc::new(FakeSlurm::new());
    let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
    let mut next_id = 1u64;
    let mut ends: HashMap<JobId, i64> = HashMap::new();
    let hours = 36;
    for step in 0..(hours * 3600 / STEP) {
        let now = T0 + step * STEP;
        clock.set(now);
        // Jobs that ran their course end (and Slurm forgets them a step later).
        let snap = slurm.snapshot().unwrap();
        for j in &snap.ended {
            slurm.purge(j.job);
        }
        for j in &snap.running {
            if ends[&j.job] <= now {
                slurm.end(j.job, ends[&j.job]);
            }
        }
        // Both teams keep 12 jobs pending: together far more than 10 GPUs.
        let snap = slurm.snapshot().unwrap();
        for acct in ["acct-big", "acct-small"] {
            let pending = snap.pending.iter().filter(|j| j.account == acct).count();
            for _ in pending..12 {
                slurm.put(SlurmJob {
                    job: JobId(next_id),
                    account: acct.into(),
                    user: String::new(),
                    gpus: 1,
                    min_runtime_s: 600,
                    resumable: true,
                    priority: 0,
                    submit: now,
                    start: None,
                    end: None,
                    alloc: Vec::new(),
                    instances: 0,
                    eligible: true,
                    begin_after: None,
                    gpu_types: Default::default(),
                    tier: 0,
                    qos: String::new(),
                    qos_priority: 0,
                });
                next_id += 1;
            }
        }
        cycle.step().unwrap();
        // "slurmctld": start pending jobs by site factor while GPUs are free.
        let busy: u32 = slurm
            .snapshot()
            .unwrap()
            .running
            .iter()
            .map(|j| j.gpus)
            .sum();
        for job in slurm
            .pending_order()
            .into_iter()
            .take((CAPACITY - busy) as usize)
        {
            slurm.start(job, now);
            ends.insert(job, now + JOB_S);
        }
    }
    // Charged GPU-time over the second half (after the first window filled).
    let end = T0 + hours * 3600;
    let from = T0 + hours * 3600 / 2;
    let usage = state
        .db()
        .ledger_between(from, end)
        .unwrap()
        .usage(from, end);
    let big = usage["acct-big"].charged_gpu_s;
    let small = usage["acct-small"].charged_gpu_s;
    let share = big / (big + small);
    eprintln!("big team: {share:.4} of charged GPU-time");
    assert!(
        (big + small) / (f64::from(CAPACITY) * (end - from) as f64) > 0.95,
        "the cluster stayed full"
    );
    assert!(
        (share - 0.7).abs() <= 0.05,
        "big team got {:.3} of charged GPU-time (want 0.70 +- 0.05)",
        share
    );
}
