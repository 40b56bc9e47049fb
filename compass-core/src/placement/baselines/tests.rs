use super::*;
use crate::placement::{build, PolicyOptions, POLICY_NAMES};
use proptest::prelude::*;

const BASELINES: [&str; 4] = ["best-fit", "first-fit", "fgd", "defrag"];

fn spec(nodes: u32, gpus: u32) -> ClusterSpec {
    ClusterSpec::new(nodes, gpus).unwrap()
}

fn policy(name: &str, nodes: u32, gpus: u32) -> Box<dyn PlacementPolicy> {
    build(name, spec(nodes, gpus), &PolicyOptions::default()).unwrap()
}

/// Places a one-instance job of `g` GPUs pinned to `node`.
fn pin(p: &mut dyn PlacementPolicy, id: u64, g: u32, node: NodeId) {
    let allowed = NodeSet::from_nodes(p.spec().nodes, [node]);
    let a = p
        .place(&JobRequest::new(id, 1, g), Some(&allowed))
        .unwrap()
        .unwrap();
    assert_eq!(a.nodes, vec![node]);
}

fn used(p: &dyn PlacementPolicy) -> Vec<u32> {
    (0..p.spec().nodes).map(|n| p.occupancy().used(n)).collect()
}

/// Recomputes every counter of the accounting from the running jobs.
fn check_accounting(p: &dyn PlacementPolicy) {
    let occ = p.occupancy();
    let cap = occ.capacity();
    let n = p.spec().nodes;
    let mut per_node = vec![0u32; n as usize];
    let mut counts = [0u64; 9];
    for job in occ.jobs() {
        assert_eq!(job.nodes.len(), job.request.shape.instances as usize);
        for (&node, &g) in job.nodes.iter().zip(&job.gpus) {
            assert_eq!(g, job.request.shape.gpus);
            per_node[node as usize] += g;
            counts[g as usize] += 1;
        }
    }
    for node in 0..n {
        assert!(per_node[node as usize] <= cap, "node {node} over capacity");
        assert_eq!(occ.used(node), per_node[node as usize], "node {node}");
    }
    let partial = per_node.iter().filter(|&&u| u > 0 && u < cap).count() as u32;
    let empty = per_node.iter().filter(|&&u| u == 0).count() as u32;
    assert_eq!(occ.partial_nodes(), partial);
    assert_eq!(occ.empty_nodes(), empty);
    assert_eq!(
        occ.used_gpus(),
        per_node.iter().map(|&u| u64::from(u)).sum::<u64>()
    );
    assert_eq!(occ.instance_counts(), &counts);
}

#[test]
fn build_knows_every_baseline() {
    for name in BASELINES {
        assert!(POLICY_NAMES.contains(&name));
        assert_eq!(policy(name, 2, 8).name(), name);
    }
    assert_eq!(policy("defrag", 2, 8).tick_interval(), Some(300.0));
    assert_eq!(policy("best-fit", 2, 8).tick_interval(), None);
}

/// Rounds shorter than `MIN_DEFRAG_INTERVAL_S` (or NaN) are refused: a
/// round of a millisecond made a replay of months run for ever.
#[test]
fn defrag_rounds_are_at_least_a_second() {
    use crate::placement::MIN_DEFRAG_INTERVAL_S;
    for bad in [0.001, 0.0, -5.0, f64::NAN] {
        let opts = PolicyOptions {
            defrag_interval_s: bad,
            ..PolicyOptions::default()
        };
        let e = build("defrag", spec(2, 8), &opts).err().expect("refused");
        assert!(e.to_string().contains("at least 1 s"), "{bad}: {e}");
    }
    let opts = PolicyOptions {
        defrag_interval_s: MIN_DEFRAG_INTERVAL_S,
        ..PolicyOptions::default()
    };
    let p = build("defrag", spec(2, 8), &opts).unwrap();
    assert_eq!(p.tick_interval(), Some(1.0));
}

#[test]
fn admission_example_of_the_abstract() {
    // Free GPUs 3, 5, 2: a job of two 4-GPU instances cannot start.
    for name in BASELINES {
        let mut p = policy(name, 3, 8);
        pin(p.as_mut(), 1, 5, 0);
        pin(p.as_mut(), 2, 3, 1);
        pin(p.as_mut(), 3, 6, 2);
        let before = used(p.as_ref());
        assert_eq!(before, vec![5, 3, 6]);
        assert_eq!(
            p.place(&JobRequest::new(9, 2, 4), None).unwrap(),
            None,
            "{name}"
        );
        assert_eq!(used(p.as_ref()), before, "{name}: state changed");
        assert!(p.occupancy().job(JobId(9)).is_none());
        // One 4-GPU instance fits (on node 1, the only node with 5 free).
        let a = p.place(&JobRequest::new(10, 1, 4), None).unwrap().unwrap();
        assert_eq!(a.nodes, vec![1], "{name}");
        check_accounting(p.as_ref());
    }
}

#[test]
fn all_or_nothing_rollback_after_partial_progress() {
    // Three instances of 4 GPUs; only two fit (node 0 has 4 free, node 1 has 4 free).
    for name in BASELINES {
        let mut p = policy(name, 2, 8);
        pin(p.as_mut(), 1, 4, 0);
        pin(p.as_mut(), 2, 4, 1);
        assert_eq!(
            p.place(&JobRequest::new(3, 3, 4), None).unwrap(),
            None,
            "{name}"
        );
        assert_eq!(used(p.as_ref()), vec![4, 4]);
        assert_eq!(p.occupancy().running_jobs(), 2);
        check_accounting(p.as_ref());
        // Same instance twice on one node is fine when it fits.
        let a = p.place(&JobRequest::new(4, 2, 2), None).unwrap().unwrap();
        assert_eq!(a.nodes, vec![0, 0], "{name}");
    }
}

#[test]
fn bad_requests_are_errors_and_change_nothing() {
    for name in BASELINES {
        let mut p = policy(name, 2, 4);
        assert!(matches!(
            p.place(&JobRequest::new(1, 1, 8), None),
            Err(CoreError::InstanceTooLarge { .. })
        ));
        assert!(matches!(
            p.place(&JobRequest::new(1, 0, 2), None),
            Err(CoreError::NoInstances(_))
        ));
        p.place(&JobRequest::new(1, 1, 2), None).unwrap().unwrap();
        assert_eq!(
            p.place(&JobRequest::new(1, 1, 2), None),
            Err(CoreError::DuplicateJob(JobId(1)))
        );
        assert_eq!(p.remove(JobId(7)), Err(CoreError::UnknownJob(JobId(7))));
        assert_eq!(p.occupancy().used_gpus(), 2);
    }
}

#[test]
fn allowed_set_restricts_candidates() {
    for name in BASELINES {
        let mut p = policy(name, 4, 8);
        let allowed = NodeSet::from_nodes(4, [2, 3]);
        let a = p
            .place(&JobRequest::new(1, 3, 4), Some(&allowed))
            .unwrap()
            .unwrap();
        assert!(
            a.nodes.iter().all(|n| allowed.contains(*n)),
            "{name}: {:?}",
            a.nodes
        );
        // Allowed nodes are now 4 GPUs short of another 8-GPU instance.
        assert_eq!(
            p.place(&JobRequest::new(2, 1, 8), Some(&allowed)).unwrap(),
            None,
            "{name}"
        );
        let a = p.place(&JobRequest::new(3, 1, 8), None).unwrap().unwrap();
        assert!(a.nodes[0] < 2, "{name}");
        assert_eq!(
            p.place(&JobRequest::new(4, 1, 1), Some(&NodeSet::empty(4)))
                .unwrap(),
            None
        );
    }
}

#[test]
fn best_fit_takes_fewest_free_then_lowest_index() {
    let mut p = policy("best-fit", 4, 8);
    pin(p.as_mut(), 1, 2, 0); // free 6
    pin(p.as_mut(), 2, 5, 1); // free 3
    pin(p.as_mut(), 3, 5, 2); // free 3
    let a = p.place(&JobRequest::new(4, 1, 3), None).unwrap().unwrap();
    assert_eq!(a.nodes, vec![1]);
    let a = p.place(&JobRequest::new(5, 2, 3), None).unwrap().unwrap();
    // Node 2 (free 3), then node 0 (free 6) over empty node 3.
    assert_eq!(a.nodes, vec![2, 0]);
}

#[test]
fn first_fit_takes_lowest_index() {
    let mut p = policy("first-fit", 4, 8);
    pin(p.as_mut(), 1, 2, 0); // free 6
    pin(p.as_mut(), 2, 5, 1); // free 3
    let a = p.place(&JobRequest::new(3, 3, 2), None).unwrap().unwrap();
    assert_eq!(a.nodes, vec![0, 0, 0]);
    let a = p.place(&JobRequest::new(4, 1, 3), None).unwrap().unwrap();
    assert_eq!(a.nodes, vec![1]);
    let a = p.place(&JobRequest::new(5, 1, 8), None).unwrap().unwrap();
    assert_eq!(a.nodes, vec![2]);
}

#[test]
fn fgd_follows_the_fragmentation_gradient() {
    // Workload of 4-GPU jobs. Node 0 has 4 free, node 1 has 5 free. A 1-GPU
    // instance on node 0 would strand 3 GPUs no 4-GPU task can use
    // (gradient 3); on node 1 it leaves 4 (gradient 0). Best fit picks node 0.
    let mut fgd = policy("fgd", 3, 8);
    let mut bf = policy("best-fit", 3, 8);
    for p in [&mut fgd, &mut bf] {
        for id in 0..20 {
            let a = p
                .place(&JobRequest::new(100 + id, 1, 4), None)
                .unwrap()
                .unwrap();
            p.remove(JobId(100 + id)).unwrap();
            assert_eq!(a.nodes.len(), 1);
        }
        pin(p.as_mut(), 1, 4, 0);
        pin(p.as_mut(), 2, 3, 1);
    }
    assert_eq!(
        fgd.place(&JobRequest::new(3, 1, 1), None)
            .unwrap()
            .unwrap()
            .nodes,
        vec![1]
    );
    assert_eq!(
        bf.place(&JobRequest::new(3, 1, 1), None)
            .unwrap()
            .unwrap()
            .nodes,
        vec![0]
    );
}

#[test]
fn fgd_window_forgets_old_jobs_and_counts_retries_once() {
    let mut f = Fgd::new(spec(2, 8), 3);
    for id in 0..3 {
        f.place(&JobRequest::new(id, 1, 8), None).unwrap();
    }
    // Node 1 and 0 full; a blocked 2-GPU job retried many times counts once.
    for _ in 0..10 {
        assert_eq!(f.place(&JobRequest::new(50, 1, 2), None).unwrap(), None);
    }
    assert_eq!(f.hist[8], 2);
    assert_eq!(f.hist[2], 1);
    assert_eq!(f.recent.len(), 3);
    let t = f.fragmentation_table();
    // F(1) = 1 * P(g > 1) = 1; F(4) = 4 * P(g > 4) = 4 * 2/3.
    assert!((t[1] - 1.0).abs() < 1e-12 && (t[4] - 8.0 / 3.0).abs() < 1e-12);
}

#[test]
fn defrag_empties_the_least_used_node() {
    let mut p = policy("defrag", 3, 8);
    pin(p.as_mut(), 1, 6, 0);
    pin(p.as_mut(), 2, 2, 1);
    pin(p.as_mut(), 3, 4, 2);
    // Node 1 (2 used) is drained onto node 0 (most used that fits).
    let m = p.tick(300.0);
    assert_eq!(
        m,
        vec![Migration {
            job: JobId(2),
            instance: 0,
            from: 1,
            to: 0
        }]
    );
    assert_eq!(used(p.as_ref()), vec![8, 0, 4]);
    assert_eq!(p.occupancy().job(JobId(2)).unwrap().nodes, vec![0]);
    check_accounting(p.as_ref());
    // One partial node left: nothing to do.
    assert!(p.tick(600.0).is_empty());
    // Departures keep the per-node index right.
    p.remove(JobId(2)).unwrap();
    p.remove(JobId(1)).unwrap();
    check_accounting(p.as_ref());
}

#[test]
fn defrag_never_moves_pinned_jobs() {
    let mut p = Defrag::new(spec(3, 8), DefragConfig::default());
    for (id, g, node) in [(1, 6, 0), (2, 2, 1)] {
        let allowed = NodeSet::from_nodes(3, [node]);
        p.place(&JobRequest::new(id, 1, g).pinned(), Some(&allowed))
            .unwrap()
            .unwrap();
    }
    // Either drain would empty a node, but both jobs are not movable.
    assert!(p.tick(300.0).is_empty());
    assert_eq!(used(&p), vec![6, 2, 0]);
}

#[test]
fn defrag_never_half_drains_a_node() {
    let mut p = Defrag::new(spec(2, 8), DefragConfig::default());
    pin(&mut p, 1, 3, 0);
    pin(&mut p, 2, 3, 0);
    pin(&mut p, 3, 5, 1);
    // Node 1's 5 does not fit node 0 (2 free); node 0's two 3s need 6 of
    // node 1's 3 free: only one would move, so nothing moves.
    assert!(p.tick(300.0).is_empty());
    assert_eq!(used(&p), vec![6, 5]);
    check_accounting(&p);
}

#[test]
fn defrag_respects_the_migration_budget() {
    let config = DefragConfig {
        interval_s: 60.0,
        max_migrations_per_round: 1,
    };
    let mut p = Defrag::new(spec(4, 8), config);
    pin(&mut p, 1, 6, 0);
    pin(&mut p, 2, 1, 1);
    pin(&mut p, 3, 1, 1);
    pin(&mut p, 4, 1, 2);
    // Node 1 needs 2 migrations (over budget); node 2 needs 1.
    let m = p.tick(60.0);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].from, 2);
    assert_eq!(p.tick_interval(), Some(60.0));
}

#[derive(Clone, Debug)]
enum Op {
    Arrive {
        w: u32,
        g: u32,
        movable: bool,
        restrict: Option<u32>,
    },
    Depart(usize),
    Tick,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u32..=4, 1u32..=8, any::<bool>(), proptest::option::of(0u32..6))
            .prop_map(|(w, g, movable, restrict)| Op::Arrive { w, g, movable, restrict }),
        3 => (0usize..64).prop_map(Op::Depart),
        2 => Just(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn accounting_stays_exact_for_every_baseline(
        ops in proptest::collection::vec(op_strategy(), 1..120),
        gpus in prop::sample::select(vec![1u32, 2, 4, 8]),
    ) {
        for name in BASELINES {
            let nodes = 6;
            let mut p = policy(name, nodes, gpus);
            let mut running: Vec<JobId> = Vec::new();
            let mut pinned: BTreeMap<JobId, Vec<NodeId>> = BTreeMap::new();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    Op::Arrive { w, g, movable, restrict } => {
                        let g = (*g).min(gpus);
                        let mut job = JobRequest::new(i as u64, *w, g);
                        job.movable = *movable;
                        let allowed = restrict.map(|r| NodeSet::from_nodes(nodes, (0..nodes).filter(|n| n % 3 != r % 3)));
                        let before = used(p.as_ref());
                        match p.place(&job, allowed.as_ref()).unwrap() {
                            Some(a) => {
                                prop_assert_eq!(a.nodes.len(), *w as usize);
                                if let Some(al) = &allowed {
                                    prop_assert!(a.nodes.iter().all(|n| al.contains(*n)));
                                }
                                running.push(job.id);
                                if !*movable {
                                    pinned.insert(job.id, a.nodes.clone());
                                }
                            }
                            None => prop_assert_eq!(used(p.as_ref()), before, "{} changed on refusal", name),
                        }
                    }
                    Op::Depart(k) => {
                        if !running.is_empty() {
                            let id = running.remove(k % running.len());
                            pinned.remove(&id);
                            prop_assert!(p.remove(id).unwrap().is_empty());
                        }
                    }
                    Op::Tick => {
                        let partial_before = p.occupancy().partial_nodes();
                        let migrations = p.tick(i as f64);
                        prop_assert!(migrations.iter().all(|m| !pinned.contains_key(&m.job)));
                        prop_assert!(p.occupancy().partial_nodes() <= partial_before);
                        for m in &migrations {
                            prop_assert_eq!(p.occupancy().used(m.from), 0, "{:?} left its node non-empty", m);
                        }
                    }
                }
                check_accounting(p.as_ref());
                for (id, nodes) in &pinned {
                    prop_assert_eq!(&p.occupancy().job(*id).unwrap().nodes, nodes);
                }
            }
        }
    }
}
