//! Unit tests of the COMPASS-ABS engine: the paper's examples and our
//! corrections. Property tests live in `tests/compass_props.rs`.

use super::*;

fn engine(nodes: u32) -> CompassEngine {
    CompassEngine::new(
        ClusterSpec::new(nodes, 8).unwrap(),
        CompassConfig::default(),
    )
}

fn paper_engine(nodes: u32) -> CompassEngine {
    let config = CompassConfig {
        slotted_pass: SlottedPass::Paper,
        ..CompassConfig::default()
    };
    CompassEngine::new(ClusterSpec::new(nodes, 8).unwrap(), config)
}

/// Places single-instance jobs of the given sizes, ids from `first`.
fn arrive(e: &mut CompassEngine, first: u64, sizes: &[u32]) {
    for (k, &g) in sizes.iter().enumerate() {
        let adm = e
            .place(&JobRequest::new(first + k as u64, 1, g), None)
            .unwrap();
        assert!(adm.is_some(), "job of {g} GPUs should fit");
        e.check_invariants().unwrap();
    }
}

fn used(e: &CompassEngine) -> Vec<u32> {
    (0..e.spec().nodes).map(|n| e.occupancy().used(n)).collect()
}

/// The counter-example: 1,1,1 / 2,2,2 / 1,1,1 / 4 on empty nodes.
/// The paper's Compact ends with three partial nodes (pool 6, {2,2,2}, {4});
/// ours with at most one non-full slotted and one non-full pool node.
#[test]
fn corrected_compact_holds_theorem1_where_the_papers_fails() {
    let sizes = [1, 1, 1, 2, 2, 2, 1, 1, 1, 4];

    let mut paper = paper_engine(6);
    arrive(&mut paper, 1, &sizes);
    assert_eq!(paper.occupancy().partial_nodes(), 3);
    assert_eq!(paper.non_full_by_kind(), (2, 1));

    let mut ours = engine(6);
    arrive(&mut ours, 1, &sizes);
    assert_eq!(ours.non_full_by_kind(), (1, 1));
    let snap = ours.snapshot();
    assert_eq!(snap.phi_star, 0);
    assert!(snap.n_sif <= 2, "N*SIF = {}", snap.n_sif);
    // The cheapest repair moves two 2-GPU slots onto the {4} node.
    assert_eq!(ours.migrations_total(), 2);
    let mut u = used(&ours);
    u.sort_unstable();
    assert_eq!(u, vec![0, 0, 0, 2, 6, 8]);
}

/// Appendix A's tightness example: a node holding {4, 2} and a job of three
/// 4-GPU instances. Best fit leaves free spaces {2, 4}; Theorem 1 (Compact
/// on arrival) promises one non-full slotted node; the paper's pass leaves two.
#[test]
fn tightness_example_of_appendix_a_is_compacted() {
    for (mut e, expected_slotted) in [(paper_engine(4), 2), (engine(4), 1)] {
        arrive(&mut e, 1, &[4, 2]);
        e.place(&JobRequest::new(10, 3, 4), None).unwrap().unwrap();
        e.check_invariants().unwrap();
        assert_eq!(e.non_full_by_kind(), (expected_slotted, 0));
    }
}

/// The abstract's admission example: under first fit the arrivals below
/// leave free GPUs 3, 5 and 2 on three nodes and a job of two 4-GPU instances
/// cannot start; under COMPASS the same history leaves room for it.
#[test]
fn admission_example_of_the_abstract() {
    let spec = ClusterSpec::new(3, 8).unwrap();
    let sizes = [4, 1, 2, 1, 2, 1, 4, 4, 2];
    let departures = [JobId(3), JobId(4), JobId(7)];

    let mut ff = Occupancy::new(spec);
    for (k, &g) in sizes.iter().enumerate() {
        let n = ff.first_fit(g, None).unwrap();
        ff.add(&JobRequest::new(k as u64 + 1, 1, g), vec![n])
            .unwrap();
    }
    for j in departures {
        ff.remove(j).unwrap();
    }
    assert_eq!(
        (0..3).map(|n| ff.free(n)).collect::<Vec<_>>(),
        vec![3, 5, 2]
    );
    assert!(ff.best_fit(4, None).is_some(), "one 4-GPU instance fits");
    let big = JobRequest::new(100, 2, 4);
    let fits_two = (0..3).filter(|&n| ff.free(n) >= 4).count() >= 2;
    assert!(!fits_two, "first fit cannot start the 2 x 4 job");

    let mut e = CompassEngine::new(spec, CompassConfig::default());
    arrive(&mut e, 1, &sizes);
    for j in departures {
        e.remove(j).unwrap();
        e.check_invariants().unwrap();
    }
    let adm = e.place(&big, None).unwrap();
    assert!(
        adm.is_some(),
        "COMPASS admits the 2 x 4 job; free GPUs were {:?}",
        used(&e)
    );
    e.check_invariants().unwrap();
}

#[test]
fn admission_is_all_or_nothing() {
    let mut e = engine(2);
    arrive(&mut e, 1, &[8, 4]);
    let before = e.snapshot();
    // Three 4-GPU instances need two free halves plus one more: only one free half.
    assert_eq!(e.place(&JobRequest::new(9, 3, 4), None).unwrap(), None);
    assert_eq!(e.snapshot(), before);
    assert_eq!(
        e.plan(&JobRequest::new(9, 1, 4), None).unwrap(),
        Some(vec![1])
    );
    assert_eq!(e.snapshot(), before, "plan is a dry run");
}

#[test]
fn refuses_bad_shapes_and_duplicates() {
    let mut e = CompassEngine::new(ClusterSpec::new(2, 4).unwrap(), CompassConfig::default());
    assert!(matches!(
        e.place(&JobRequest::new(1, 1, 8), None),
        Err(CoreError::InstanceTooLarge { .. })
    ));
    assert!(matches!(
        e.place(&JobRequest::new(1, 0, 2), None),
        Err(CoreError::NoInstances(_))
    ));
    assert!(matches!(
        e.place(&JobRequest::new(1, 1, 0), None),
        Err(CoreError::ZeroGpus { .. })
    ));
    e.place(&JobRequest::new(1, 1, 3), None).unwrap().unwrap();
    assert!(matches!(
        e.place(&JobRequest::new(1, 1, 1), None),
        Err(CoreError::DuplicateJob(_))
    ));
    assert!(matches!(e.remove(JobId(7)), Err(CoreError::UnknownJob(_))));
    // On 4-GPU nodes a 3-GPU instance anchors a 4-wide slot (eq. 3).
    assert_eq!(e.node(0).slots[0].width, 4);
}

#[test]
fn allowed_nodes_are_honoured() {
    let mut e = engine(4);
    let allowed = NodeSet::from_nodes(4, [2, 3]);
    let adm = e
        .place(&JobRequest::new(1, 2, 4), Some(&allowed))
        .unwrap()
        .unwrap();
    assert!(
        adm.nodes.iter().all(|n| allowed.contains(*n)),
        "{:?}",
        adm.nodes
    );
    let only_one = NodeSet::from_nodes(4, [0]);
    assert_eq!(
        e.place(&JobRequest::new(2, 2, 8), Some(&only_one)).unwrap(),
        None
    );
}

#[test]
fn fuf_anchor_draws_fillers_from_the_pool() {
    let mut e = engine(4);
    arrive(&mut e, 1, &[1, 1, 1, 1]);
    arrive(&mut e, 10, &[5]);
    e.check_invariants().unwrap();
    // 5 GPUs anchor an 8-wide slot; three 1-GPU instances fill its vacancy.
    let slotted = (0..4).find(|&n| !e.node(n).slots.is_empty()).unwrap();
    let slot = &e.node(slotted).slots[0];
    assert_eq!((slot.width, slot.fillers.len()), (8, 3));
    assert_eq!(e.occupancy().used(slotted), 8);
    assert_eq!(
        e.occupancy().partial_nodes(),
        1,
        "one 1-GPU instance left in the pool"
    );
}

#[test]
fn departing_anchor_never_loses_its_fillers() {
    // Two nodes: one 8-wide slot (5 GPUs + 3 fillers), one full pool node.
    let mut e = engine(2);
    arrive(&mut e, 1, &[1, 1, 1]);
    arrive(&mut e, 10, &[5]);
    arrive(&mut e, 20, &[1; 8]);
    e.check_invariants().unwrap();
    assert_eq!(e.occupancy().used_gpus(), 16);
    e.remove(JobId(10)).unwrap();
    e.check_invariants().unwrap();
    // No vacancy, no pool room, no empty node: the fillers stay where they are.
    assert_eq!(e.occupancy().used_gpus(), 11);
    for j in 1..=3 {
        assert!(e.occupancy().job(JobId(j)).is_some());
    }
    assert_eq!(e.occupancy().partial_nodes(), 1);
}

/// The counter-example's history on 6 nodes, with the 2-GPU jobs 4-6
/// pinned and placed in slots as the paper does (no correction 5).
fn counter_example_with_pinned_slots() -> CompassEngine {
    let config = CompassConfig {
        pinned_fill: false,
        ..CompassConfig::default()
    };
    let mut e = CompassEngine::new(ClusterSpec::new(6, 8).unwrap(), config);
    arrive(&mut e, 1, &[1, 1, 1]);
    for id in 4..=6 {
        e.place(&JobRequest::new(id, 1, 2).pinned(), None)
            .unwrap()
            .unwrap();
    }
    arrive(&mut e, 7, &[1, 1, 1]);
    e
}

#[test]
fn immovable_jobs_are_never_migrated() {
    let mut e = counter_example_with_pinned_slots();
    let adm = e.place(&JobRequest::new(10, 1, 4), None).unwrap().unwrap();
    e.check_invariants().unwrap();
    // The only repair moves two pinned 2-GPU slots: the engine plans around
    // them and accepts one more open slotted node (Theorem 1 needs movable
    // jobs; docs/compass-corrections.md).
    assert!(adm.migrations.is_empty(), "{:?}", adm.migrations);
    assert_eq!(e.non_full_by_kind(), (2, 1));
    // Once they are resumable again, the next Compact repairs it.
    for id in 4..=6 {
        e.set_movable(JobId(id), true).unwrap();
    }
    let moves = e.compact();
    assert_eq!(moves.len(), 2);
    assert_eq!(e.non_full_by_kind(), (1, 1));
    e.check_invariants().unwrap();
}

#[test]
fn a_tidy_hold_keeps_jobs_from_compact_but_not_from_the_reach() {
    // The history above: two pinned 2-GPU slots left open beside a 4-GPU
    // job. Resumable but held still for tidying, they stay put, while the
    // occupancy still counts them free to move (the gate's bound).
    let mut e = counter_example_with_pinned_slots();
    e.place(&JobRequest::new(10, 1, 4), None).unwrap().unwrap();
    let still = e.occupancy().reach_fit(8);
    let held: Vec<JobId> = (4..=6).map(JobId).collect();
    e.set_tidy_hold(&held, true);
    for id in 4..=6 {
        e.set_movable(JobId(id), true).unwrap();
    }
    let reach = e.occupancy().reach_fit(8);
    assert!(reach > still, "held jobs count movable in the reach");
    assert!(e.compact().is_empty(), "held jobs are not moved");
    assert_eq!(e.non_full_by_kind(), (2, 1));
    e.check_invariants().unwrap();
    // Released, they move as their own movability allows.
    e.set_tidy_hold(&held, false);
    assert_eq!(e.occupancy().reach_fit(8), reach);
    assert_eq!(e.compact().len(), 2);
    assert_eq!(e.non_full_by_kind(), (1, 1));
    e.check_invariants().unwrap();
}

/// [`counter_example_with_pinned_slots`] with a 1 x 4 job placed and its
/// three 2-GPU slots movable but held for tidying (returned): released,
/// Compact moves two of them.
fn slots_held_for_tidying() -> (CompassEngine, Vec<JobId>) {
    let mut e = counter_example_with_pinned_slots();
    e.place(&JobRequest::new(10, 1, 4), None).unwrap().unwrap();
    let held: Vec<JobId> = (4..=6).map(JobId).collect();
    e.set_tidy_hold(&held, true);
    for id in 4..=6 {
        e.set_movable(JobId(id), true).unwrap();
    }
    (e, held)
}

#[test]
fn undoing_a_trial_puts_back_the_tidy_holds_it_lifted_and_their_keys() {
    // The gate's trial (issue #11): the release of the jobs held for
    // tidying is a trial of its own, and its undo holds them again.
    let (mut e, held) = slots_held_for_tidying();
    e.check_invariants().unwrap();
    let nodes: Vec<NodeState> = (0..e.occupancy().spec().nodes)
        .map(|n| e.node(n).clone())
        .collect();
    e.begin_trial();
    e.set_tidy_hold(&held, false);
    e.begin_trial();
    assert_eq!(e.compact().len(), 2, "released, they move");
    // a change of movability inside the trial is kept by the undo
    e.set_movable(JobId(10), false).unwrap();
    e.undo_trial();
    e.undo_trial();
    e.check_invariants().unwrap();
    let after: Vec<NodeState> = (0..e.occupancy().spec().nodes)
        .map(|n| e.node(n).clone())
        .collect();
    assert_eq!(after, nodes);
    assert!(e.compact().is_empty(), "held again, they stay put");
    e.check_invariants().unwrap();
    e.set_movable(JobId(10), true).unwrap();
    e.set_tidy_hold(&held, false);
    assert_eq!(e.compact().len(), 2);
    e.check_invariants().unwrap();
}

#[test]
fn an_undone_trial_reports_no_changed_node_unless_its_changes_were_taken() {
    // The head's fit over time (`placement::head::Ends`) re-reads the nodes
    // `take_changed` names. An undone trial leaves its nodes as they were:
    // it names none of them again, unless the list was taken while the
    // trial's moves were in place (issue #11: a tidying Compact undoes up
    // to eight trials).
    let (mut e, held) = slots_held_for_tidying();
    e.set_tidy_hold(&held, false);
    let _ = e.take_changed();
    e.begin_trial();
    let _ = e.take_changed(); // nothing changed yet: the trial stays clean
    e.begin_trial();
    assert!(!e.compact().is_empty());
    e.undo_trial();
    e.undo_trial();
    assert_eq!(e.take_changed(), Vec::<NodeId>::new());
    // Taken with the moves in place: the undo names the nodes again.
    e.begin_trial();
    assert!(!e.compact().is_empty());
    let mut moved = e.take_changed();
    assert!(!moved.is_empty());
    e.undo_trial();
    let mut again = e.take_changed();
    moved.sort_unstable();
    again.sort_unstable();
    assert_eq!(again, moved);
    e.check_invariants().unwrap();
}

#[test]
fn one_gpu_jobs_overflow_into_slotted_room_on_small_clusters() {
    // Two nodes: a full pool node and a slotted node with 4 free GPUs.
    let mut e = engine(2);
    arrive(&mut e, 1, &[1; 8]);
    arrive(&mut e, 20, &[4]);
    // The paper's Place would make this job wait; ours uses the free GPUs.
    let adm = e.place(&JobRequest::new(30, 1, 1), None).unwrap();
    assert!(adm.is_some());
    assert_eq!(e.guest_count(), 1);
    e.check_invariants().unwrap();
    // When pool room appears, Compact brings the guest home.
    e.remove(JobId(1)).unwrap();
    e.check_invariants().unwrap();
    assert_eq!(e.guest_count(), 0);
    assert_eq!(used(&e), vec![8, 4]);
}

#[test]
fn adopted_layouts_converge_through_compact() {
    // Slurm placed these before the plugin was installed: four 2-GPU jobs on
    // four different nodes and 1-GPU jobs scattered.
    let mut e = engine(6);
    for (id, node) in [(1u64, 0u32), (2, 1), (3, 2), (4, 3)] {
        e.adopt(&JobRequest::new(id, 1, 2), &[node]).unwrap();
    }
    e.adopt(&JobRequest::new(5, 1, 1), &[0]).unwrap();
    e.adopt(&JobRequest::new(6, 1, 1), &[4]).unwrap();
    e.adopt_foreign(JobId(7), &[(5, 3)]).unwrap();
    e.check_invariants().unwrap();
    assert!(e.guest_count() >= 1);
    let moves = e.compact();
    e.check_invariants().unwrap();
    assert!(
        !moves.iter().any(|m| m.job == JobId(7)),
        "foreign jobs never move"
    );
    let (slotted, pool) = e.non_full_by_kind();
    // The foreign node is a non-full "slotted" node of its own.
    assert!(
        slotted <= 2 && pool <= 1,
        "{slotted} {pool}: {:?}",
        used(&e)
    );
}

#[test]
fn adopt_reports_divergence_from_the_plan() {
    let mut e = engine(4);
    let job = JobRequest::new(1, 1, 4);
    assert_eq!(e.adopt(&job, &[0]).unwrap(), AdoptOutcome::Matched);
    // The plan for the next 4-GPU instance is node 0 (best fit); Slurm chose 3.
    assert_eq!(
        e.adopt(&JobRequest::new(2, 1, 4), &[3]).unwrap(),
        AdoptOutcome::Diverged
    );
    assert_eq!(e.divergences(), 1);
    assert!(matches!(
        e.adopt(&JobRequest::new(3, 1, 8), &[0]),
        Err(CoreError::Overcommit { .. })
    ));
    e.check_invariants().unwrap();
}

#[test]
fn replay_is_deterministic() {
    let run = || {
        let mut e = engine(8);
        let mut next = 1u64;
        for round in 0..20u32 {
            for g in [1, 2, 4, 1, 3, 1, 8, 2] {
                let _ = e
                    .place(&JobRequest::new(next, 1 + round % 2, g), None)
                    .unwrap();
                next += 1;
            }
            for j in (next.saturating_sub(8)..next).step_by(3) {
                let _ = e.remove(JobId(j));
            }
        }
        (e.snapshot(), e.migrations_total())
    };
    assert_eq!(run(), run());
}

/// Adopts single-instance jobs, `layout[n]` listing the sizes on node `n`.
fn adopt_layout(e: &mut CompassEngine, layout: &[&[u32]]) {
    let mut id = 1u64;
    for (n, sizes) in layout.iter().enumerate() {
        for &g in sizes.iter() {
            e.adopt(&JobRequest::new(id, 1, g), &[n as NodeId]).unwrap();
            id += 1;
        }
    }
    e.check_invariants().unwrap();
}

/// Issue 11's counter-example to Theorem 1 with a guest: a 5-GPU guest
/// beside a 2-GPU slot (room 1, odd), every job movable, WCC holds and
/// `Phi* = 0`. The old Compact left three partial nodes (`N*SIF = 3`) and
/// made no move on a second call: `dissolve` refused the guest's node,
/// `top_up` cannot fill an odd room, and the guest had no pool or empty node.
#[test]
fn theorem1_holds_with_a_guest_beside_a_slot() {
    let mut e = engine(8);
    adopt_layout(
        &mut e,
        &[
            &[1; 8],
            &[1; 5],
            &[1; 8],
            &[2, 5],
            &[2, 2],
            &[4, 4],
            &[4, 2, 2],
            &[2, 2, 2, 2],
        ],
    );
    assert_eq!(e.guest_count(), 1, "the 5-GPU job is a guest");
    let snap = e.snapshot();
    assert!(snap.wcc);
    assert_eq!(snap.phi_star, 0);
    e.compact();
    e.check_invariants().unwrap();
    let (slotted, pool) = e.non_full_by_kind();
    assert!(
        slotted <= 1 && pool <= 1,
        "{slotted} slotted, {pool} pool non-full: {:?}",
        used(&e)
    );
    assert!(e.snapshot().n_sif <= 2, "N*SIF = {}", e.snapshot().n_sif);
    assert!(
        e.compact().is_empty(),
        "a second Compact finds nothing to do"
    );
}

/// Issue 11: 24 pinned `{4,2}` nodes, 24 pinned `{2}` nodes and two movable
/// `{4}` nodes. The old pass looked only at the 24 emptiest and 24 fullest
/// open nodes, all pinned, and left 50 nodes open; the two movable `{4}`s
/// must meet whatever the number of pinned open nodes.
#[test]
fn pinned_open_nodes_do_not_hide_a_movable_pair() {
    let mut e = engine(60);
    let mut id = 1u64;
    let mut put = |e: &mut CompassEngine, g: u32, n: NodeId, pinned: bool| {
        let mut job = JobRequest::new(id, 1, g);
        job.movable = !pinned;
        e.adopt(&job, &[n]).unwrap();
        id += 1;
    };
    for n in 0..24 {
        put(&mut e, 4, n, true);
        put(&mut e, 2, n, true);
    }
    for n in 24..48 {
        put(&mut e, 2, n, true);
    }
    put(&mut e, 4, 48, false);
    put(&mut e, 4, 49, false);
    e.check_invariants().unwrap();
    assert_eq!(e.occupancy().partial_nodes(), 50);
    let moves = e.compact();
    e.check_invariants().unwrap();
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert!(moves[0].from >= 48 && moves[0].to >= 48, "{moves:?}");
    assert_eq!(e.occupancy().partial_nodes(), 48);
}

/// Place over a small candidate set looks at its nodes only; it must pick
/// exactly what the index scan picks (same rules, same ties).
#[test]
fn small_candidate_sets_choose_like_the_indexes() {
    let mut e = engine(40);
    let mut id = 1u64;
    let mut x = 12345u64;
    let mut rnd = |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    for round in 0..300 {
        let g = [1, 1, 1, 2, 3, 4, 5, 8][rnd(8) as usize];
        let _ = e.place(&JobRequest::new(id, 1 + rnd(2) as u32, g), None);
        id += 1;
        if round % 3 == 0 && id > 5 {
            let _ = e.remove(JobId(rnd(id)));
        }
        if round % 17 == 0 {
            e.set_node_usable(rnd(40) as NodeId, rnd(4) != 0).unwrap();
        }
        let allowed = NodeSet::from_nodes(40, (0..4).map(|_| rnd(40) as NodeId));
        for g in [1, 2, 3, 4, 5, 8] {
            assert_eq!(
                e.choose_among(g, &allowed, None),
                e.choose_indexed(g, Some(&allowed), None),
                "round {round}, {g} GPUs, allowed {:?}",
                allowed.iter().collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn an_immovable_job_fills_a_partial_node_rather_than_open_an_empty_one() {
    // Node 0: a pool node with three 1-GPU jobs (5 GPUs free). A pinned
    // 4-GPU job would open an empty node in the paper's Place, which no
    // Compact could close while it runs; correction 5 seats it as a guest
    // on node 0 instead. A movable one still opens its own slotted node.
    let mut e = engine(3);
    arrive(&mut e, 1, &[1, 1, 1]);
    let adm = e
        .place(&JobRequest::new(10, 1, 4).pinned(), None)
        .unwrap()
        .unwrap();
    assert_eq!(adm.nodes, vec![0]);
    assert_eq!(used(&e), vec![7, 0, 0]);
    e.check_invariants().unwrap();
    let adm = e.place(&JobRequest::new(11, 1, 4), None).unwrap().unwrap();
    assert_eq!(adm.nodes, vec![1]);
    // No partial node has room for a pinned 8-GPU job: an empty one opens.
    let adm = e
        .place(&JobRequest::new(12, 1, 8).pinned(), None)
        .unwrap()
        .unwrap();
    assert_eq!(adm.nodes, vec![2]);
    e.check_invariants().unwrap();
    // Off, the paper's Place: the pinned job opens an empty node.
    let config = CompassConfig {
        pinned_fill: false,
        ..CompassConfig::default()
    };
    let mut p = CompassEngine::new(ClusterSpec::new(3, 8).unwrap(), config);
    arrive(&mut p, 1, &[1, 1, 1]);
    let adm = p
        .place(&JobRequest::new(10, 1, 4).pinned(), None)
        .unwrap()
        .unwrap();
    assert_eq!(adm.nodes, vec![1]);
}

/// A job restricted to half the nodes (a partition over part of the pool)
/// never ends a Compact outside them, under random arrivals and departures
/// of unrestricted jobs and of other restricted ones; the invariants hold
/// throughout, and restricted jobs still move inside their half.
#[test]
fn compact_keeps_restricted_jobs_inside_their_nodes_under_churn() {
    let half = NodeSet::from_nodes(8, 0..4);
    let mut moved_inside = 0;
    for seed in 1..=40u64 {
        let mut e = engine(8);
        let mut x = seed;
        let mut rnd = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut live: Vec<(u64, bool)> = Vec::new();
        for id in 1..=120u64 {
            let g = [1, 1, 1, 2, 2, 4, 3, 8][rnd(8) as usize];
            let restricted = rnd(3) == 0;
            let req = JobRequest::new(id, 1, g);
            // (the plugin's path: adopt, then set_allowed, then Compact)
            let placed = if restricted {
                e.place_within(&req, &half)
            } else {
                e.place(&req, None)
            };
            if let Ok(Some(_)) = placed {
                live.push((id, restricted));
            }
            if rnd(2) == 0 && !live.is_empty() {
                let (gone, _) = live.remove(rnd(live.len() as u64) as usize);
                e.remove(JobId(gone)).unwrap();
            }
            e.check_invariants().unwrap();
            for &(j, r) in &live {
                let nodes = &e.occupancy().job(JobId(j)).unwrap().nodes;
                if r {
                    assert!(
                        nodes.iter().all(|&n| half.contains(n)),
                        "seed {seed}, after job {id}: restricted job {j} on {nodes:?}"
                    );
                }
            }
            assert_eq!(
                e.restricted_jobs().count(),
                live.iter().filter(|l| l.1).count(),
                "a departed job's restriction is forgotten"
            );
        }
        moved_inside += e.migrations_total();
    }
    assert!(moved_inside > 0, "Compact still migrates");
}

#[test]
fn a_restriction_to_every_node_is_none() {
    let mut e = engine(4);
    arrive(&mut e, 1, &[2]);
    e.set_allowed(JobId(1), Some(&NodeSet::full(4))).unwrap();
    assert_eq!(e.restricted_jobs().count(), 0);
    e.set_allowed(JobId(1), Some(&NodeSet::from_nodes(4, [0, 1])))
        .unwrap();
    assert_eq!(e.restricted_jobs().count(), 1);
    e.set_allowed(JobId(1), None).unwrap();
    assert_eq!(e.restricted_jobs().count(), 0);
    assert!(e.set_allowed(JobId(9), None).is_err(), "unknown job");
}

/// An engine without Compact (Place alone decides) with the given ties.
fn place_only(nodes: u32, end_ties: EndTies) -> CompassEngine {
    let config = CompassConfig {
        compact: false,
        end_ties,
        ..CompassConfig::default()
    };
    CompassEngine::new(ClusterSpec::new(nodes, 8).unwrap(), config)
}

/// Places job `id` (one instance of `g` GPUs) on node `n`, ending at `end`.
fn seat(e: &mut CompassEngine, id: u64, g: u32, n: NodeId, end: Seconds) {
    e.set_expected_end(JobId(id), end);
    let only = NodeSet::from_nodes(e.spec().nodes, [n]);
    let adm = e.place(&JobRequest::new(id, 1, g), Some(&only)).unwrap();
    assert_eq!(adm.unwrap().nodes, vec![n]);
}

/// The node a new single-instance job of `g` GPUs ending at `end` lands on.
fn lands(e: &mut CompassEngine, id: u64, g: u32, end: Option<Seconds>) -> NodeId {
    if let Some(end) = end {
        e.set_expected_end(JobId(id), end);
    }
    let adm = e.place(&JobRequest::new(id, 1, g), None).unwrap();
    adm.unwrap().nodes[0]
}

/// Correction 10: two slotted nodes with the same room `D(n) = 4`; the new
/// 2-GPU job goes where the jobs end closest to its own end (co-termination),
/// and by node index when ends are off or unknown.
#[test]
fn co_end_ties_pick_the_node_whose_jobs_end_closest() {
    for (ties, end, want) in [
        (EndTies::CoEnd, Some(950.0), 1),
        (EndTies::CoEnd, Some(120.0), 0),
        (EndTies::CoEnd, None, 0),
        (EndTies::Index, Some(950.0), 0),
    ] {
        let mut e = place_only(4, ties);
        seat(&mut e, 1, 4, 0, 100.0);
        seat(&mut e, 2, 4, 1, 1000.0);
        assert_eq!(lands(&mut e, 3, 2, end), want, "{ties:?}, end {end:?}");
        e.check_invariants().unwrap();
    }
}

/// The tie stays inside the best level: a node with more room is not taken
/// even when its jobs end closer (`CoEnd`), unless the tie is wide
/// (`CoEndWide`: both nodes stay partial, so both add the same `N*SIF`).
/// A slot that fills its node exactly is always taken.
#[test]
fn co_end_ties_keep_the_best_level_unless_wide() {
    for (ties, want) in [(EndTies::CoEnd, 0), (EndTies::CoEndWide, 1)] {
        let mut e = place_only(4, ties);
        seat(&mut e, 1, 4, 0, 100.0); // D = 4
        seat(&mut e, 2, 2, 1, 1000.0); // D = 6
        assert_eq!(lands(&mut e, 3, 2, Some(990.0)), want, "{ties:?}");
        // n0 has D = 4 (or 2): a 4-GPU slot there fills it when D = 4.
        let mut f = place_only(4, ties);
        seat(&mut f, 1, 4, 0, 100.0);
        seat(&mut f, 2, 2, 1, 1000.0);
        assert_eq!(lands(&mut f, 3, 4, Some(990.0)), 0, "{ties:?} exact fill");
    }
}

/// 1-GPU jobs: two pool nodes equally full; the filler goes to the one whose
/// members end closest to it. The candidate-set path (a few allowed nodes of
/// a large cluster) breaks the tie the same way.
#[test]
fn co_end_ties_apply_to_pool_nodes_and_small_candidate_sets() {
    for (end, want) in [(4000.0, 3), (600.0, 2)] {
        let mut e = place_only(4, EndTies::CoEnd);
        seat(&mut e, 1, 1, 2, 500.0);
        seat(&mut e, 2, 1, 3, 5000.0);
        assert_eq!(lands(&mut e, 3, 1, Some(end)), want, "end {end}");
    }

    let mut big = place_only(40, EndTies::CoEnd);
    seat(&mut big, 1, 4, 5, 100.0);
    seat(&mut big, 2, 4, 9, 1000.0);
    let among = NodeSet::from_nodes(40, [5, 9]);
    big.set_expected_end(JobId(3), 900.0);
    let adm = big.place(&JobRequest::new(3, 1, 2), Some(&among)).unwrap();
    assert_eq!(adm.unwrap().nodes, vec![9]);
}

/// The engine forgets a job's expected end when it departs or is told an
/// infinite one.
#[test]
fn expected_ends_are_forgotten_on_departure() {
    let mut e = place_only(4, EndTies::CoEnd);
    seat(&mut e, 1, 4, 0, 100.0);
    assert_eq!(e.expected_end(JobId(1)), Some(100.0));
    e.remove(JobId(1)).unwrap();
    assert_eq!(e.expected_end(JobId(1)), None);
    // A job that will not be placed after all.
    e.set_expected_end(JobId(2), 50.0);
    e.set_expected_end(JobId(2), f64::INFINITY);
    assert_eq!(e.expected_end(JobId(2)), None);
}

/// A drained node gives units but never takes any: when the slotted pass
/// fills a node that just came back with a drained node's slot, the 1-GPU
/// guest it evicts goes elsewhere, not into the drained donor's free GPUs
/// (found by `compass_props::pinned_foreign_and_drained`).
#[test]
fn a_top_up_never_evicts_onto_a_drained_donor() {
    let spec = ClusterSpec::new(3, 4).unwrap();
    let mut e = CompassEngine::new(spec, CompassConfig::default());
    let mut full = JobRequest::new(1, 1, 4);
    full.movable = false;
    e.adopt(&full, &[0]).unwrap();
    e.set_node_usable(1, false).unwrap();
    e.set_node_usable(2, false).unwrap();
    e.adopt_foreign(JobId(2), &[(1, 2)]).unwrap();
    e.adopt(&JobRequest::new(3, 1, 1), &[1]).unwrap();
    e.adopt(&JobRequest::new(4, 1, 2), &[2]).unwrap();
    e.set_node_usable(1, true).unwrap();
    let moves = e.compact();
    assert!(moves.iter().all(|m| m.to != 2), "{moves:?}");
    e.check_invariants().unwrap();
}

/// The partial invariant check (issue #11: the plugin checks a part of the
/// nodes at a time, under its lock): the parts pass on a sound layout, and
/// a stale index entry of one node is found by the part that holds it and
/// by the whole check, not by the others.
#[test]
fn a_partial_check_finds_a_stale_index_entry_in_its_own_part_only() {
    let mut e = engine(8);
    arrive(&mut e, 1, &[1, 1, 2, 4, 8, 2, 1]);
    for part in [0..4, 4..8, 0..8] {
        assert_eq!(e.check_invariants_of(part), Ok(()));
    }
    let stale = e.ix.empty.last().expect("an empty node");
    assert!(stale >= 4, "the empty nodes are the last ones");
    e.ix.empty.remove(stale);
    assert_eq!(e.check_invariants_of(0..4), Ok(()));
    assert!(e.check_invariants_of(4..8).is_err());
    assert!(e.check_invariants().is_err());
    e.ix.empty.insert(stale);
    assert_eq!(e.check_invariants(), Ok(()));
}

/// Correction 12: the layout a small-cluster trace kept for 84,000 s
/// under FIFO (docs/results.md, "Room for the waiting job"). A 2x4 job
/// fills node 0, a 4x2 job node 3, a lone 1-GPU job sits on pool node 1
/// and node 2 holds a 2- and a 4-GPU job: 13 GPUs free, and an 8-GPU job
/// waits. The ABS breaks no rule here (one non-full slotted and one
/// non-full pool node), so Compact moves nothing; with `make_room` the
/// 1-GPU job goes to node 2 as a guest and the waiting job starts on
/// node 1.
fn blocked_head_layout(make_room: bool) -> CompassEngine {
    let config = CompassConfig {
        make_room,
        ..CompassConfig::default()
    };
    let mut e = CompassEngine::new(ClusterSpec::new(4, 8).unwrap(), config);
    e.adopt(&JobRequest::new(1, 2, 4), &[0, 0]).unwrap();
    e.adopt(&JobRequest::new(2, 1, 1), &[1]).unwrap();
    e.adopt(&JobRequest::new(3, 1, 2), &[2]).unwrap();
    e.adopt(&JobRequest::new(4, 1, 4), &[2]).unwrap();
    e.adopt(&JobRequest::new(5, 4, 2), &[3, 3, 3, 3]).unwrap();
    assert!(e.compact().is_empty(), "the ABS has nothing to repair");
    assert_eq!(used(&e), vec![8, 1, 6, 8]);
    e
}

#[test]
fn make_room_moves_the_lone_one_gpu_job_aside_for_a_waiting_job() {
    let head = JobRequest::new(9, 1, 8);
    let mut off = blocked_head_layout(false);
    assert!(off.place(&head, None).unwrap().is_none());
    assert_eq!(used(&off), vec![8, 1, 6, 8]);

    let mut on = blocked_head_layout(true);
    let adm = on.place(&head, None).unwrap().expect("room was made");
    assert_eq!(adm.nodes, vec![1]);
    assert_eq!(
        adm.migrations,
        vec![Migration {
            job: JobId(2),
            instance: 0,
            from: 1,
            to: 2
        }]
    );
    assert_eq!(used(&on), vec![8, 8, 7, 8]);
    on.check_invariants().unwrap();
}

#[test]
fn make_room_changes_nothing_when_it_cannot_make_enough() {
    // With the 1-GPU job pinned, node 2 is emptied onto node 1 instead.
    let mut e = blocked_head_layout(true);
    e.set_movable(JobId(2), false).unwrap();
    let adm = e.place(&JobRequest::new(9, 1, 8), None).unwrap().unwrap();
    assert_eq!(adm.nodes, vec![2]);
    assert_eq!(used(&e), vec![8, 7, 8, 8]);
    // With nodes 1 and 2 pinned too, no source can be emptied.
    let mut e = blocked_head_layout(true);
    for j in [2, 3, 4] {
        e.set_movable(JobId(j), false).unwrap();
    }
    let before = e.snapshot();
    assert!(e.place(&JobRequest::new(9, 1, 8), None).unwrap().is_none());
    assert_eq!(e.snapshot(), before);
    // Two whole nodes asked, 13 GPUs free: too few in total, nothing tried.
    let mut e = blocked_head_layout(true);
    let before = e.snapshot();
    assert!(e.place(&JobRequest::new(9, 2, 8), None).unwrap().is_none());
    assert_eq!(e.snapshot(), before);
    // A job restricted to part of the nodes is left to Slurm's own order.
    let mut e = blocked_head_layout(true);
    let before = e.snapshot();
    let all = NodeSet::from_nodes(4, 0..4);
    assert!(e
        .place_within(&JobRequest::new(9, 1, 8), &all)
        .unwrap()
        .is_none());
    assert_eq!(e.snapshot(), before);
}
