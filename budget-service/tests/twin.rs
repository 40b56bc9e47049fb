//! The live service stays the simulator's twin (issue 15): for one state
//! (tree, usage, running jobs, pending jobs), the order in which the policy
//! simulator starts the pending jobs and the queue order the service pushes
//! to (fake) Slurm are the same list, for every team order the service runs.
//!
//! The state: 5 nodes of 4 GPUs, teams `a` and `b` with half each (an
//! allocation of 10 GPUs). `b` ran 20 GPUs for 1000 s, then `a` 20 GPUs for
//! 200 s: `a` has the lower lookback ratio, but it still runs 12 allocated
//! GPUs, over its allocation, while `b` runs none. Four 2-GPU jobs wait (one
//! allocated and one free per team) and 8 GPUs free up at once.

mod common;

use common::{test_state, NoAuth};
use compass_budget::config::Config;
use compass_budget::cycle::Cycle;
use compass_budget::slurm::{FakeSlurm, SlurmJob};
use compass_core::fairshare::{FreeOrder, NodeSpec, OrgTree, QueueOrder, TeamOrder};
use compass_core::model::{ClusterSpec, JobId, JobShape};
use compass_core::sim::budgets::{run_budgets, BudgetJob, BudgetSimConfig, Record, SimEvent};
use std::sync::Arc;

const T0: i64 = 1_800_000_000;
/// When the 8-GPU job of `a` ends and the pending jobs are ordered.
const FREE_AT: i64 = 1201;

fn specs() -> Vec<NodeSpec> {
    let spec = |name: &str, parent: Option<&str>, account: Option<&str>| NodeSpec {
        name: name.into(),
        parent: parent.map(Into::into),
        share: if parent.is_some() { 0.5 } else { 1.0 },
        managers: vec![],
        account: account.map(Into::into),
    };
    vec![
        spec("org", None, None),
        spec("team-a", Some("org"), Some("a")),
        spec("team-b", Some("org"), Some("b")),
    ]
}

/// (id, account, submit, duration, instances, GPUs per instance, min runtime)
type Row = (u64, &'static str, i64, i64, u32, u32, u64);

fn workload() -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for id in 1..=5 {
        rows.push((id, "b", 0, 1000, 1, 4, 600));
    }
    for id in 11..=13 {
        rows.push((id, "a", 1001, 50_000, 1, 4, 20_000));
    }
    rows.push((14, "a", 1001, FREE_AT - 1001, 2, 4, 200));
    // The pending jobs: allocated and free, one of each per team.
    rows.push((21, "a", 1100, 10_000, 1, 2, 600));
    rows.push((22, "a", 1100, 10_000, 1, 2, 0));
    rows.push((23, "b", 1100, 10_000, 1, 2, 600));
    rows.push((24, "b", 1100, 10_000, 1, 2, 0));
    rows
}

/// The pending jobs in the order the simulator starts them at `FREE_AT`.
fn simulator_order(order: QueueOrder) -> Vec<u64> {
    let tree = OrgTree::build(&specs()).unwrap();
    let jobs: Vec<BudgetJob> = workload()
        .into_iter()
        .map(|(id, account, submit, dur, w, g, min)| BudgetJob {
            id: JobId(id),
            account: account.into(),
            submit_s: submit as f64,
            duration_s: dur as f64,
            shape: JobShape::new(w, g),
            min_runtime_s: min as f64,
            resumable: true,
            priority: 0,
        })
        .collect();
    let mut cfg = BudgetSimConfig::new(ClusterSpec::new(5, 4).unwrap());
    cfg.record = Record::Events;
    cfg.team_order = order.team_order;
    cfg.free_order = order.free_order;
    cfg.horizon_s = Some(FREE_AT as f64 + 1.0);
    let rep = run_budgets(&jobs, &tree, &cfg).unwrap();
    // Nothing is preempted: every running job is protected.
    assert!(!rep
        .events
        .iter()
        .any(|e| matches!(e, SimEvent::Preempt { .. })));
    rep.events
        .iter()
        .filter_map(|e| match e {
            SimEvent::Start { t, job } if *t == FREE_AT as f64 => Some(job.0),
            _ => None,
        })
        .collect()
}

/// The queue order the service computes and pushes at `FREE_AT`, after
/// ingesting the same history from the fake Slurm.
fn service_order(order: QueueOrder) -> (Vec<u64>, Vec<u64>) {
    let mut config = Config::parse("db = \":memory:\"\ncapacity_gpus = 1\n", "twin").unwrap();
    // The defaults are the simulator's (config's own tests); set both.
    config.order = order;
    let (state, clock) = test_state(config, NoAuth, T0, specs());
    let slurm = Arc::new(FakeSlurm::new());
    for n in 1..=5 {
        slurm.add_node(&format!("n{n}"), 4);
    }
    let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
    let rows = workload();
    // Every time something happens, the service runs a cycle.
    let mut times: Vec<i64> = rows
        .iter()
        .flat_map(|r| [r.2, r.2 + r.3])
        .filter(|t| *t <= FREE_AT)
        .collect();
    times.sort();
    times.dedup();
    for t in times {
        clock.set(T0 + t);
        slurm.set_now(T0 + t);
        for &(id, account, submit, dur, w, g, min) in &rows {
            if submit == t {
                let mut j = SlurmJob::basic(JobId(id), account, w * g, min, true, 0, T0 + submit);
                j.instances = w;
                slurm.put(j);
                // The jobs that are not pending at FREE_AT start at once (the
                // cluster has room for them then).
                if id < 20 {
                    slurm.start(JobId(id), T0 + submit);
                }
            }
            if submit + dur == t && id < 20 {
                slurm.end(JobId(id), T0 + t);
            }
        }
        cycle.step().unwrap();
    }
    assert_eq!(state.capacity(), 20.0);
    let order: Vec<u64> = state.queue().order.iter().map(|p| p.job.job.0).collect();
    let pushed: Vec<u64> = slurm.pending_order().into_iter().map(|j| j.0).collect();
    (order, pushed)
}

#[test]
fn simulator_and_service_order_the_same_state_the_same_way() {
    let cases = [
        // The defaults (under-allocation-first, under-total-first): b is
        // under its allocation now, a is over it: b's jobs go first in both
        // queues, although a has the better lookback ratio.
        (QueueOrder::default(), vec![23, 21, 24, 22]),
        // The tree walk by ratio alone: a first, in both queues.
        (QueueOrder::RATIO, vec![21, 23, 22, 24]),
        // Ratio for allocated work, under-total-first for free work.
        (
            QueueOrder {
                team_order: TeamOrder::Ratio,
                free_order: FreeOrder::UnderTotalFirst,
            },
            vec![21, 23, 24, 22],
        ),
    ];
    for (order, want) in cases {
        let sim = simulator_order(order);
        assert_eq!(sim, want, "simulator, {order:?}");
        let (service, pushed) = service_order(order);
        assert_eq!(service, sim, "service, {order:?}");
        assert_eq!(pushed, sim, "pushed to Slurm, {order:?}");
    }
}
