//! Property tests of the policy simulator: over random workloads, with or
//! without drains, no protected job is preempted, no job preempts the job
//! that preempted it, a non-resumable victim never restarts, every
//! preemption starts the job it was for, and every job is accounted for.

use std::collections::{BTreeMap, BTreeSet};

use compass_core::fairshare::tree::{NodeSpec, OrgTree};
use compass_core::model::{ClusterSpec, JobId, JobShape};
use compass_core::sim::budgets::{run_budgets, BudgetJob, BudgetSimConfig, Record, SimEvent};
use proptest::prelude::*;

const ACCOUNTS: [&str; 3] = ["a", "b", "c"];

fn tree() -> OrgTree {
    let mut specs = vec![NodeSpec {
        name: "org".into(),
        parent: None,
        share: 1.0,
        managers: vec![],
        account: None,
    }];
    for (a, share) in ACCOUNTS.iter().zip([0.5, 0.3, 0.2]) {
        specs.push(NodeSpec {
            name: format!("team-{a}"),
            parent: Some("org".into()),
            share,
            managers: vec![],
            account: Some(a.to_string()),
        });
    }
    OrgTree::build(&specs).unwrap()
}

fn workload() -> impl Strategy<Value = Vec<BudgetJob>> {
    let job = (
        0usize..3,
        0.0f64..20.0,
        0.1f64..6.0,
        1u32..=2,
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        prop_oneof![Just(0.0), 0.25f64..3.0],
        proptest::bool::weighted(0.8),
    );
    proptest::collection::vec(job, 1..60).prop_map(|jobs| {
        jobs.into_iter()
            .enumerate()
            .map(
                |(k, (a, submit_h, dur_h, w, g, min_h, resumable))| BudgetJob {
                    id: JobId(k as u64 + 1),
                    account: ACCOUNTS[a].into(),
                    submit_s: submit_h * 3600.0,
                    duration_s: dur_h * 3600.0,
                    shape: JobShape::new(w, g),
                    min_runtime_s: min_h * 3600.0,
                    resumable,
                    priority: 0,
                },
            )
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn preemption_follows_the_rules(jobs in workload(), drains in 0usize..=2) {
        let mut cfg = BudgetSimConfig::new(ClusterSpec::new(3, 8).unwrap());
        cfg.record = Record::Events;
        cfg.window_s = 6.0 * 3600.0;
        // Drains hold nodes for blocked jobs; the rules hold either way.
        cfg.max_drains = drains;
        cfg.drain_after_s = 1800.0;
        let cap = cfg.protection.min_runtime_cap_s;
        let r = run_budgets(&jobs, &tree(), &cfg).unwrap();
        let by_id: BTreeMap<JobId, &BudgetJob> = jobs.iter().map(|j| (j.id, j)).collect();
        let mut started: BTreeMap<JobId, f64> = BTreeMap::new();
        let mut preempted_by: BTreeMap<JobId, JobId> = BTreeMap::new();
        let mut cancelled: BTreeSet<JobId> = BTreeSet::new();
        for e in &r.events {
            match e {
                SimEvent::Start { t, job } => {
                    prop_assert!(!cancelled.contains(job), "cancelled job {} restarted", job);
                    started.insert(*job, *t);
                }
                SimEvent::Preempt { t, job, for_job, requeued } => {
                    let j = by_id[job];
                    let ran = t - started[job];
                    prop_assert!(
                        ran + 1e-6 >= j.min_runtime_s.min(cap),
                        "job {} preempted after {} s of protected {} s", job, ran, j.min_runtime_s
                    );
                    prop_assert!(by_id[for_job].min_runtime_s > 0.0, "unallocated job {} preempted", for_job);
                    prop_assert!(preempted_by.get(for_job) != Some(job), "job {} preempted its own preemptor {}", for_job, job);
                    // No loop, as in the live service: a preempted job
                    // preempts no one before it has run its min runtime
                    // since its restart, and it is preempted again only
                    // after that; so, waiting again, it never preempts.
                    prop_assert!(
                        !preempted_by.contains_key(for_job),
                        "job {} preempted job {} while it owed its min runtime after its own preemption",
                        for_job, job
                    );
                    prop_assert_eq!(*requeued, j.resumable);
                    preempted_by.insert(*job, *for_job);
                    if !requeued {
                        cancelled.insert(*job);
                    }
                }
                SimEvent::Finish { job, .. } => {
                    prop_assert!(!cancelled.contains(job));
                }
            }
        }
        // Every preemption makes room the job it was for then uses at once.
        for (k, e) in r.events.iter().enumerate() {
            if let SimEvent::Preempt { t, for_job, .. } = e {
                let started = r.events[k..].iter().any(|s| {
                    matches!(s, SimEvent::Start { t: ts, job } if job == for_job && ts == t)
                });
                prop_assert!(started, "job {} preempted for at {} s but did not start", for_job, t);
            }
        }
        prop_assert_eq!(r.completed + r.cancelled + r.unfinished, jobs.len());
        prop_assert_eq!(r.cancelled, cancelled.len());
        prop_assert_eq!(r.unfinished, 0, "no horizon: every job ends");
    }
}
