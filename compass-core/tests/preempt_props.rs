//! Property tests of the victim planner: every victim set it returns is
//! legal (rules of protected and preemptible time), makes the pending job
//! placeable node by node, and is minimal (dropping any victim breaks it).

use std::collections::{BTreeMap, BTreeSet};

use compass_core::model::{JobId, JobShape, NodeSet};
use compass_core::preempt::{
    plan_room, NodeRoom, NodeTraits, PendingJob, ProtectionConfig, RunningJob, VictimRule,
};
use proptest::prelude::*;

const ACCOUNTS: [&str; 3] = ["a", "b", "c"];

fn scenario() -> impl Strategy<Value = (Vec<RunningJob>, PendingJob, Vec<f64>)> {
    let job = (
        0usize..3,
        0u32..6,
        1u32..=8,
        prop_oneof![Just(0.0), 1.0f64..4.0],
        0.0f64..5.0,
        any::<bool>(),
    );
    (
        proptest::collection::vec(job, 0..10),
        (
            0usize..3,
            1u32..=3,
            prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        ),
        proptest::collection::vec(0.0f64..2.0, 3),
    )
        .prop_map(|(jobs, (acct, w, g), ratios)| {
            let mut free = [8u32; 6];
            let mut running = Vec::new();
            for (i, (a, node, gpus, min_h, start_h, resumable)) in jobs.into_iter().enumerate() {
                let gpus = gpus.min(free[node as usize]);
                if gpus == 0 {
                    continue;
                }
                free[node as usize] -= gpus;
                running.push(RunningJob {
                    id: JobId(i as u64 + 1),
                    account: ACCOUNTS[a].into(),
                    gpus_on: vec![(node, gpus)],
                    min_runtime_s: min_h * 3600.0,
                    started_s: start_h * 3600.0,
                    resumable,
                    cpus_per_node: 0,
                    mem_per_node_mb: 0,
                    weight: 1.0,
                });
            }
            let pending = PendingJob {
                id: JobId(100),
                account: ACCOUNTS[acct].into(),
                shape: JobShape::new(w, g),
                min_runtime_s: 3600.0,
                preempted_by: None,
                owes_min_runtime: false,
                room_given: false,
                needs: Default::default(),
                weight: 1.0,
            };
            (running, pending, ratios)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn victim_sets_are_legal_sufficient_and_minimal((running, pending, r) in scenario()) {
        let cfg = ProtectionConfig::default();
        let now = 5.0 * 3600.0;
        let ratios: BTreeMap<String, f64> = ACCOUNTS.iter().map(|a| a.to_string()).zip(r).collect();
        let mut free = vec![8u32; 6];
        for j in &running {
            for &(n, g) in &j.gpus_on {
                free[n as usize] -= g;
            }
        }
        let room = NodeRoom { capacity: 8, free: free.clone(), usable: NodeSet::full(6), traits: Vec::new() };
        let fits = |victims: &BTreeSet<JobId>| {
            let mut f = free.clone();
            for j in running.iter().filter(|j| victims.contains(&j.id)) {
                for &(n, g) in &j.gpus_on {
                    f[n as usize] += g;
                }
            }
            f.iter().map(|x| x / pending.shape.gpus).sum::<u32>() >= pending.shape.instances
        };
        let plan = plan_room(&pending, &running, &room, &ratios, now, &cfg, &BTreeSet::new());
        // Traits that admit every job and never run short of CPUs or memory
        // decide exactly as no traits (issue 12: the policy simulator's case).
        let permissive = NodeRoom {
            traits: (0..6)
                .map(|n| NodeTraits {
                    name: format!("n{n}"),
                    gpus: 8,
                    free_cpus: 1_000,
                    free_mem_mb: 1_000_000,
                    ..NodeTraits::default()
                })
                .collect(),
            ..room.clone()
        };
        let mut needy = pending.clone();
        needy.needs.cpus_per_node = 1;
        needy.needs.mem_per_node_mb = 1;
        prop_assert_eq!(
            &plan_room(&needy, &running, &permissive, &ratios, now, &cfg, &BTreeSet::new()),
            &plan
        );
        let Some(plan) = plan else {
            return Ok(());
        };
        let victims: BTreeSet<JobId> = plan.iter().map(|p| p.victim).collect();
        prop_assert!(fits(&victims), "victims do not make room");
        for p in &plan {
            let v = running.iter().find(|j| j.id == p.victim).unwrap();
            prop_assert!(!v.protected(now, &cfg), "protected victim {}", v.id);
            match &p.rule {
                VictimRule::Unallocated => prop_assert!(!v.allocated()),
                VictimRule::OverServed { .. } => {
                    prop_assert!(v.allocated());
                    prop_assert!(ratios[&v.account] > ratios[&pending.account] * (1.0 + cfg.preempt_margin));
                }
                VictimRule::FaultyNode { .. } => prop_assert!(false, "no faulty nodes here"),
            }
            let mut fewer = victims.clone();
            fewer.remove(&p.victim);
            prop_assert!(!fits(&fewer), "victim {} was not needed", p.victim);
        }
    }
}
