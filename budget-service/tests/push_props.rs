//! Property: pushing only the site factors that changed keeps Slurm's view of
//! the order identical to the service's, over any sequence of submissions,
//! starts, ends and Slurm outages.

mod common;

use common::{spec, test_state, NoAuth};
use compass_budget::config::Config;
use compass_budget::cycle::Cycle;
use compass_budget::slurm::{FakeSlurm, SlurmJob};
use compass_core::model::JobId;
use proptest::prelude::*;
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Event {
    Submit {
        account: usize,
        min_rt: bool,
        prio: i64,
    },
    StartHead,
    EndOldest,
    Outage(bool),
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0usize..4, any::<bool>(), -2i64..3).prop_map(|(account, min_rt, prio)| Event::Submit { account, min_rt, prio }),
        2 => Just(Event::StartHead),
        1 => Just(Event::EndOldest),
        1 => any::<bool>().prop_map(Event::Outage),
    ]
}

const ACCOUNTS: [&str; 4] = ["acct-a", "acct-b", "acct-c", "stranger"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn slurm_order_equals_service_order(events in prop::collection::vec(arb_event(), 1..60)) {
        let t0 = 1_800_000_000;
        let config = Config::parse("db = \":memory:\"\ncapacity_gpus = 8\nwindow_s = 3600\n", "p").unwrap();
        let (state, clock) = test_state(config, NoAuth, t0, vec![
            spec("org", None, 1.0, None),
            spec("x", Some("org"), 0.6, None),
            spec("a", Some("x"), 0.5, Some("acct-a")),
            spec("b", Some("x"), 0.5, Some("acct-b")),
            spec("c", Some("org"), 0.4, Some("acct-c")),
        ]);
        let slurm = Arc::new(FakeSlurm::new());
        let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
        let mut next = 1u64;
        let mut running: Vec<JobId> = Vec::new();
        let mut down = false;
        for ev in events {
            clock.advance(30);
            let now = t0 + 30 * next as i64;
            match ev {
                Event::Submit { account, min_rt, prio } => {
                    slurm.put(SlurmJob {
                        job: JobId(next), account: ACCOUNTS[account].into(), user: String::new(), gpus: 1 + (next % 4) as u32,
                        min_runtime_s: if min_rt { 600 } else { 0 }, resumable: true, priority: prio,
                        submit: now, start: None, end: None,
 alloc: Vec::new(), instances: 0, eligible: true, begin_after: None, gpu_types: Default::default(), tier: 0, qos: String::new(), qos_priority: 0,
                    });
                    next += 1;
                }
                Event::StartHead => {
                    if let Some(j) = slurm.pending_order().first().copied() {
                        slurm.start(j, now);
                        running.push(j);
                    }
                }
                Event::EndOldest => {
                    if !running.is_empty() {
                        let j = running.remove(0);
                        slurm.end(j, now);
                    }
                }
                Event::Outage(d) => {
                    down = d;
                    slurm.set_down(d);
                }
            }
            let ok = cycle.step().is_ok();
            prop_assert_eq!(ok, !down);
            if ok {
                let service: Vec<JobId> = state.queue().order.iter().map(|p| p.job.job).collect();
                prop_assert_eq!(slurm.pending_order(), service);
            }
        }
    }
}
