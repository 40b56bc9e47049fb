//! Property tests of the COMPASS-ABS engine over random arrival/departure
//! sequences: the state stays inside the ABS (Proposition 1), GPU accounting
//! is exact, nothing is lost, and Theorem 1's bound (at most one non-full
//! slotted node and one non-full pool node, so `N * SIF <= 2`) holds after
//! every event where the Workload Composition Condition (eq. 9) holds, guests
//! or not. Where jobs are pinned or foreign, or nodes drained, the bound is
//! checked over the movable part (see [`check_theorem1`]), never skipped.

use std::collections::{BTreeMap, BTreeSet};

use compass_core::metric::{phi_star, wcc_holds};
use compass_core::model::{ClusterSpec, JobId, JobRequest, NodeId};
use compass_core::placement::compass::{
    CompassConfig, CompassEngine, NodeKind, NodePart, NodeView, Veto,
};
use compass_core::placement::PlacementPolicy;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Event {
    Arrive {
        gpus: u32,
        instances: u32,
        pinned: bool,
    },
    /// Departure of the running job at this position (modulo running count).
    Depart(usize),
    /// Slurm placed a job itself: `adopt` on nodes picked by `seed` among
    /// those with room, then Compact (what the plugin does on job begin).
    Adopt {
        gpus: u32,
        instances: u32,
        pinned: bool,
        seed: u64,
    },
    /// GPUs of a job outside the model (`adopt_foreign`), then Compact.
    Foreign { gpus: u32, seed: u64 },
    /// A node drained (or resumed), then Compact.
    Usable { node: u32, usable: bool },
    /// A job that may run only on the first half of the nodes (a partition
    /// over part of the pool): `place_within`.
    Within { gpus: u32, instances: u32 },
}

/// Sizes the trace mix has (paper Table 1), scaled to nodes of `cap` GPUs.
fn gpus(cap: u32) -> BoxedStrategy<u32> {
    match cap {
        2 => prop_oneof![3 => Just(1u32), 1 => Just(2u32)].boxed(),
        4 => prop_oneof![6 => Just(1u32), 2 => Just(2u32), 2 => Just(4u32), 1 => Just(3u32)].boxed(),
        _ => prop_oneof![6 => Just(1u32), 2 => Just(2u32), 2 => Just(4u32), 2 => Just(8u32), 1 => 3u32..=3, 1 => 5u32..=7].boxed(),
    }
}

/// What may happen besides plain arrivals and departures.
#[derive(Clone, Copy, Debug, Default)]
struct Mix {
    /// Share of pinned (not resumable) jobs.
    pinned: f64,
    adopt: bool,
    foreign: bool,
    drain: bool,
    /// Jobs restricted to half the nodes (`Event::Within`).
    within: bool,
}

fn events(cap: u32, nodes: u32, mix: Mix) -> impl Strategy<Value = Vec<Event>> {
    events_of(cap, nodes, mix, 1..150)
}

/// [`events`], as many as `len` says.
fn events_of(
    cap: u32,
    nodes: u32,
    mix: Mix,
    len: std::ops::Range<usize>,
) -> impl Strategy<Value = Vec<Event>> {
    let arrive = (gpus(cap), 1u32..=3, proptest::bool::weighted(mix.pinned)).prop_map(
        |(gpus, instances, pinned)| Event::Arrive {
            gpus,
            instances,
            pinned,
        },
    );
    let adopt = (
        gpus(cap),
        1u32..=3,
        proptest::bool::weighted(mix.pinned),
        any::<u64>(),
    )
        .prop_map(|(gpus, instances, pinned, seed)| Event::Adopt {
            gpus,
            instances,
            pinned,
            seed,
        });
    let foreign = (1..=cap, any::<u64>()).prop_map(|(gpus, seed)| Event::Foreign { gpus, seed });
    let usable = (0..nodes, proptest::bool::weighted(0.6))
        .prop_map(|(node, usable)| Event::Usable { node, usable });
    let depart = (0usize..64).prop_map(Event::Depart);
    let within =
        (gpus(cap), 1u32..=2).prop_map(|(gpus, instances)| Event::Within { gpus, instances });
    let w = |on: bool| if on { 1 } else { 0 };
    proptest::collection::vec(
        prop_oneof![
            3 => arrive,
            2 => depart,
            w(mix.adopt) => adopt,
            w(mix.foreign) => foreign,
            w(mix.drain) => usable,
            w(mix.within) => within,
        ],
        len,
    )
}

/// One line per non-empty node: used GPUs, slots (width:anchor GPUs+fillers), pool, guests.
fn layout(e: &CompassEngine) -> String {
    let mut out = String::new();
    for v in e
        .snapshot()
        .nodes
        .iter()
        .filter(|v| v.used > 0 || !v.usable)
    {
        let slots: Vec<String> = v
            .state
            .slots
            .iter()
            .map(|s| format!("{}:{}+{}", s.width, s.anchor_gpus, s.fillers.len()))
            .collect();
        let guests: Vec<String> = v
            .state
            .guests
            .iter()
            .map(|g| format!("{}{}", g.gpus, if g.foreign { "f" } else { "" }))
            .collect();
        out += &format!(
            "\n  n{}{} used {} slots [{}] pool {} guests [{}]",
            v.node,
            if v.usable { "" } else { " (drained)" },
            v.used,
            slots.join(" "),
            v.state.pool.len(),
            guests.join(" ")
        );
    }
    out
}

/// `k` distinct nodes, each with `g` free GPUs, picked from `seed`.
fn pick_nodes(e: &CompassEngine, g: u32, k: u32, seed: u64) -> Option<Vec<NodeId>> {
    let occ = e.occupancy();
    // Several instances may share a node, as Slurm places them (issue #11:
    // with one node per instance, layouts that broke Theorem 1 came about
    // once in a thousand long runs).
    let mut free: Vec<u32> = (0..occ.spec().nodes).map(|n| occ.free(n)).collect();
    let mut x = seed;
    let mut out = Vec::new();
    for _ in 0..k {
        let fits: Vec<NodeId> = (0..free.len() as NodeId)
            .filter(|&n| free[n as usize] >= g)
            .collect();
        if fits.is_empty() {
            return None;
        }
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n = fits[(x >> 33) as usize % fits.len()];
        free[n as usize] -= g;
        out.push(n);
    }
    Some(out)
}

/// The whole-node shortcut of `CompassEngine::plan` gives the nodes the
/// plan instance by instance gives (`plan_each`), and neither changes the
/// engine: jobs of node-sized instances, 1, 2, half and all the nodes
/// wide, movable or not, anywhere, on the first half, or on one node (a
/// candidate set small enough to be read node by node).
fn check_whole_node_plans(
    e: &mut CompassEngine,
    half: &compass_core::model::NodeSet,
    step: usize,
) -> Result<(), TestCaseError> {
    let spec = e.occupancy().spec();
    let (nodes, cap) = (spec.nodes, spec.gpus_per_node);
    let one = compass_core::model::NodeSet::from_nodes(nodes, [step as u32 % nodes]);
    let before = e.snapshot();
    let mut widths = vec![1, 2, nodes / 2, nodes];
    widths.retain(|&w| w >= 1 && w <= nodes);
    widths.dedup();
    for w in widths {
        for movable in [true, false] {
            for allowed in [None, Some(half), Some(&one)] {
                let mut job = JobRequest::new(u64::MAX - 1, w, cap);
                job.movable = movable;
                let fast = e.plan(&job, allowed).unwrap();
                let each = e.plan_each(&job, allowed).unwrap();
                prop_assert_eq!(
                    &fast,
                    &each,
                    "step {}: {} x {} (movable {}, allowed {:?}) planned apart: {}",
                    step,
                    w,
                    cap,
                    movable,
                    allowed.map(|a| a.iter().collect::<Vec<_>>()),
                    layout(e)
                );
            }
        }
    }
    prop_assert_eq!(
        e.snapshot(),
        before,
        "step {}: a plan changed the engine",
        step
    );
    Ok(())
}

/// The layout's parts ([`CompassEngine::layout_parts`], each node's state
/// shared with a copy the engine forgets when the node changes) give the
/// layout as it was when they were taken: those of the step before against
/// the copy taken then, and new ones against a copy of every node now; and
/// the parts of the step before brought up to date with the nodes changed
/// since ([`CompassEngine::layout_changes`], as the select plugin's thread
/// keeps its published layout) against the same copy.
/// Returns the parts and the layout of this step.
fn check_layout_parts(
    e: &CompassEngine,
    before: Option<(Vec<NodePart>, Vec<NodeView>)>,
    step: usize,
) -> Result<(Vec<NodePart>, Vec<NodeView>), TestCaseError> {
    let views = |parts: &[NodePart]| -> Vec<NodeView> {
        parts
            .iter()
            .enumerate()
            .map(|(n, p)| p.view(n as NodeId))
            .collect()
    };
    let now = e.snapshot().nodes;
    if let Some((mut parts, then)) = before {
        prop_assert!(
            views(&parts) == then,
            "step {}: earlier parts changed",
            step
        );
        for (n, part) in e.layout_changes() {
            parts[n as usize] = part;
        }
        prop_assert!(
            views(&parts) == now,
            "step {}: earlier parts with the changes are not the layout",
            step
        );
    }
    let parts = e.layout_parts();
    prop_assert!(
        views(&parts) == now,
        "step {}: parts are not the layout",
        step
    );
    Ok((parts, now))
}

/// The index by reach is exact (`Occupancy::reach_fit` against the jobs'
/// GPUs that may not move, counted node by node) and bounds the physical
/// fit, for every instance size.
fn check_reach(e: &CompassEngine, step: usize) -> Result<(), TestCaseError> {
    let occ = e.occupancy();
    let cap = occ.capacity();
    let mut fixed = vec![0u32; occ.spec().nodes as usize];
    for r in occ.jobs().filter(|r| !r.request.movable) {
        for (&n, &g) in r.nodes.iter().zip(&r.gpus) {
            fixed[n as usize] += g;
        }
    }
    for g in 1..=cap {
        let brute: u64 = fixed.iter().map(|f| u64::from((cap - f) / g)).sum();
        prop_assert_eq!(
            occ.reach_fit(g),
            brute,
            "step {}: reach fit of {} GPUs",
            step,
            g
        );
        prop_assert!(
            occ.reach_fit(g) >= occ.fit(g),
            "step {}: reach below the fit",
            step
        );
    }
    Ok(())
}

/// The gate's bound (`CompassEngine::lowerable_fit`, issue #11) is exact
/// as a refusal: no Compact, with the jobs held for tidying released as the
/// gate's trial releases them, fits more instances of any size than it
/// says; nor does a departure followed by Compact exceed
/// `lowerable_fit_with` of the departing job, nor an arrival's Place and
/// Compact the bound before it. It is never looser than the reach bound
/// and never below the fit as it is, holds for tidying do not change it,
/// and it equals a brute count (a full slotted node without guests gives
/// nothing, every other node its GPUs less those of jobs that may not
/// move).
fn check_gate_bound(
    e: &CompassEngine,
    running: &[JobId],
    arrival: &JobRequest,
    step: usize,
) -> Result<(), TestCaseError> {
    let occ = e.occupancy();
    let cap = occ.capacity();
    let own_movable = |j: JobId| !e.is_foreign(j) && occ.job(j).is_some_and(|r| r.request.movable);
    let brute = |g: u32| -> u64 {
        e.snapshot()
            .nodes
            .iter()
            .map(|v| {
                let full_slotted =
                    v.kind == NodeKind::Slotted && v.state.guests.is_empty() && v.used >= cap;
                if full_slotted {
                    return 0;
                }
                let fixed: u32 = v
                    .state
                    .instances()
                    .filter(|(i, _)| !own_movable(i.job))
                    .map(|(_, k)| k)
                    .sum();
                u64::from((cap - fixed.min(cap)) / g)
            })
            .sum()
    };
    let bound: Vec<u64> = (1..=cap).map(|g| e.lowerable_fit(g)).collect();
    for g in 1..=cap {
        let b = bound[g as usize - 1];
        prop_assert_eq!(b, brute(g), "step {}: lowerable fit of {} GPUs", step, g);
        prop_assert!(
            b <= occ.reach_fit(g),
            "step {}: looser than the reach",
            step
        );
        prop_assert!(b >= occ.fit(g), "step {}: below the fit as it is", step);
    }
    // Every other movable job held for tidying: the bound is the same, and
    // the trial that releases them fits no more than it says.
    let mut held = e.clone();
    let tidy: Vec<JobId> = running.iter().copied().step_by(2).collect();
    held.set_tidy_hold(&tidy, true);
    for g in 1..=cap {
        prop_assert_eq!(
            held.lowerable_fit(g),
            bound[g as usize - 1],
            "step {}: a hold changed it",
            step
        );
    }
    // No instance size fits more after `what` than `bound` says.
    let within = |after: &CompassEngine, bound: &[u64], what: String| {
        for g in 1..=cap {
            let fit = after.occupancy().fit(g);
            let b = bound[g as usize - 1];
            prop_assert!(
                fit <= b,
                "step {}: after {}, {} instances of {} GPUs fit, the bound said {}",
                step,
                what,
                fit,
                g,
                b
            );
        }
        Ok(())
    };
    held.begin_trial();
    held.set_tidy_hold(&tidy, false);
    let moves = held.compact();
    within(&held, &bound, format!("Compact ({moves:?})"))?;
    // A departure, then Compact.
    if let Some(&gone) = running.first() {
        let with: Vec<u64> = (1..=cap)
            .map(|g| e.lowerable_fit_with(g, &[gone]))
            .collect();
        let mut after = e.clone();
        after.remove(gone).unwrap();
        let moves = after.compact();
        within(
            &after,
            &with,
            format!("job {gone:?} left and Compact ({moves:?})"),
        )?;
    }
    // An arrival's Place, then Compact.
    let mut after = e.clone();
    if after.place(arrival, None).unwrap().is_some() {
        let moves = after.compact();
        within(
            &after,
            &bound,
            format!("an arrival and Compact ({moves:?})"),
        )?;
    }
    Ok(())
}

/// Room a node's slots and guests leave unprofiled: `D(n)`.
fn room(v: &NodeView) -> u32 {
    let taken: u32 = v.state.slots.iter().map(|s| s.width).sum::<u32>()
        + v.state.guests.iter().map(|g| g.gpus).sum::<u32>();
    v.capacity.saturating_sub(taken)
}

/// Sizes of the units Compact may move off a node (slots narrower than the
/// node with every instance movable, movable guests), and whether every
/// instance of the node is movable.
fn movable_units(v: &NodeView, movable: &dyn Fn(JobId) -> bool) -> (Vec<u32>, bool) {
    let mut units = Vec::new();
    let mut all = true;
    for s in &v.state.slots {
        let m = movable(s.anchor.job) && s.fillers.iter().all(|f| movable(f.job));
        if m && s.width < v.capacity {
            units.push(s.width);
        } else {
            all = false;
        }
    }
    for g in &v.state.guests {
        if !g.foreign && movable(g.instance.job) {
            units.push(g.gpus);
        } else {
            all = false;
        }
    }
    all &= v.state.pool.iter().all(|p| movable(p.job));
    (units, all)
}

fn subset_sums(units: &[u32]) -> std::collections::BTreeSet<u32> {
    let mut sums = std::collections::BTreeSet::from([0u32]);
    for &u in units {
        let next: Vec<u32> = sums.iter().map(|s| s + u).collect();
        sums.extend(next);
    }
    sums.remove(&0);
    sums
}

/// Theorem 1, checked after every event where WCC holds.
///
/// - Every job movable, none foreign, every node usable: at most one
///   non-full slotted and one non-full pool node, and `N * SIF <= 2`,
///   guests or not (the paper's statement).
/// - Otherwise (docs/compass-corrections.md, section 5), exactly:
///   (a) among usable nodes whose every instance is movable, at most one
///   slotted node with unprofiled room and one non-full pool node, and a
///   slot vacancy stays open only while no movable 1-GPU instance sits
///   outside a slot (Lemma A.2 over the movable part); (b) no two open slotted
///   nodes are left that one move set would close: the movable units of an
///   open node never fit together into another usable open node when all
///   of the first node's instances are movable, and no subset of them takes
///   exactly the room of another usable open node. Nodes holding pinned or
///   foreign GPUs, and drained nodes, may stay open beside them: what they
///   hold cannot move, or nothing may move onto them.
fn check_theorem1(
    e: &CompassEngine,
    running: &BTreeMap<JobId, JobRequest>,
    any_foreign: bool,
    step: usize,
) -> std::result::Result<(), TestCaseError> {
    let cap = e.spec().gpus_per_node;
    let counts = *e.occupancy().instance_counts();
    if !wcc_holds(&counts, cap) {
        return Ok(());
    }
    let snap = e.snapshot();
    // Restricted jobs the last Compact held still (it would have moved them
    // outside their nodes) were pinned for it: exactly those are exempt.
    let held = e.held_in_last_compact();
    let all_movable = running.values().all(|j| j.movable)
        && held.is_empty()
        && !any_foreign
        && snap.nodes.iter().all(|v| v.usable);
    if all_movable {
        let (slotted, pool) = e.non_full_by_kind();
        prop_assert!(
            slotted <= 1 && pool <= 1,
            "step {}: {} slotted and {} pool nodes non-full: {}",
            step,
            slotted,
            pool,
            layout(e)
        );
        let n_sif = i64::from(e.occupancy().partial_nodes()) - phi_star(&counts, cap) as i64;
        prop_assert!(n_sif <= 2, "step {}: N*SIF = {}", step, n_sif);
        return Ok(());
    }
    let movable = |j: JobId| running.get(&j).is_some_and(|r| r.movable) && !held.contains(&j);
    let (mut slotted, mut pool) = (0, 0);
    for v in &snap.nodes {
        let (_, all) = movable_units(v, &movable);
        if v.used == cap || !v.usable || !all {
            continue;
        }
        match v.kind {
            NodeKind::Slotted if room(v) > 0 => slotted += 1,
            NodeKind::Pool => pool += 1,
            _ => {}
        }
    }
    // Lemma A.2 over the movable part: a vacancy stays open on a usable node
    // only while no movable 1-GPU instance sits outside a slot.
    let vacancy = snap.nodes.iter().any(|v| {
        v.usable
            && v.used < cap
            && v.state
                .slots
                .iter()
                .any(|s| s.anchor_gpus + (s.fillers.len() as u32) < s.width)
    });
    if vacancy {
        let source = snap.nodes.iter().any(|v| {
            v.state.pool.iter().any(|p| movable(p.job))
                || v.state
                    .guests
                    .iter()
                    .any(|g| g.gpus == 1 && !g.foreign && movable(g.instance.job))
        });
        prop_assert!(
            !source,
            "step {}: a vacancy stays open beside a movable 1-GPU instance: {}",
            step,
            layout(e)
        );
    }
    prop_assert!(
        slotted <= 1 && pool <= 1,
        "step {}: {} slotted and {} pool nodes non-full and fully movable: {}",
        step,
        slotted,
        pool,
        layout(e)
    );
    let open: Vec<&NodeView> = snap
        .nodes
        .iter()
        .filter(|v| v.kind == NodeKind::Slotted && room(v) > 0)
        .collect();
    for x in &open {
        let (units, all) = movable_units(x, &movable);
        if units.is_empty() {
            continue;
        }
        let sums = subset_sums(&units);
        let total: u32 = units.iter().sum();
        for y in open.iter().filter(|y| y.node != x.node && y.usable) {
            prop_assert!(
                !(all && total <= room(y)),
                "step {}: n{} fits into n{}: {}",
                step,
                x.node,
                y.node,
                layout(e)
            );
            prop_assert!(
                !sums.contains(&room(y)),
                "step {}: units of n{} fill n{}: {}",
                step,
                x.node,
                y.node,
                layout(e)
            );
        }
    }
    Ok(())
}

/// Replays `events`, checking every property after every event.
fn replay(nodes: u32, cap: u32, events: &[Event]) -> std::result::Result<(), TestCaseError> {
    replay_with(nodes, cap, events, CompassConfig::default())
}

/// [`replay`] with an engine of `config`.
fn replay_with(
    nodes: u32,
    cap: u32,
    events: &[Event],
    config: CompassConfig,
) -> std::result::Result<(), TestCaseError> {
    let spec = ClusterSpec::new(nodes, cap).unwrap();
    let mut e = CompassEngine::new(spec, config);
    let mut running: BTreeMap<JobId, JobRequest> = BTreeMap::new();
    let mut foreign: Vec<JobId> = Vec::new();
    let mut within: std::collections::BTreeSet<JobId> = Default::default();
    let half = compass_core::model::NodeSet::from_nodes(nodes, 0..nodes.div_ceil(2));
    let mut next = 1u64;
    let mut parts = None;
    let check_moves = |moves: &[compass_core::model::Migration],
                       running: &BTreeMap<JobId, JobRequest>,
                       new: Option<&JobRequest>,
                       step: usize|
     -> std::result::Result<(), TestCaseError> {
        for m in moves {
            let owner = running.get(&m.job).or(new.filter(|j| j.id == m.job));
            prop_assert!(
                owner.is_some_and(|j| j.movable),
                "step {}: pinned or foreign job {} migrated",
                step,
                m.job
            );
        }
        Ok(())
    };
    for (step, ev) in events.iter().enumerate() {
        match *ev {
            Event::Arrive {
                gpus,
                instances,
                pinned,
            } => {
                let mut job = JobRequest::new(next, instances, gpus);
                job.movable = !pinned;
                next += 1;
                let before = e.snapshot();
                match e.place(&job, None).unwrap() {
                    Some(adm) => {
                        prop_assert_eq!(adm.nodes.len(), instances as usize);
                        check_moves(&adm.migrations, &running, Some(&job), step)?;
                        running.insert(job.id, job);
                    }
                    None => prop_assert_eq!(
                        e.snapshot(),
                        before,
                        "step {}: failed admission changed state",
                        step
                    ),
                }
            }
            Event::Adopt {
                gpus,
                instances,
                pinned,
                seed,
            } => {
                let Some(at) = pick_nodes(&e, gpus, instances, seed) else {
                    continue;
                };
                let mut job = JobRequest::new(next, instances, gpus);
                job.movable = !pinned;
                next += 1;
                e.adopt(&job, &at).unwrap();
                running.insert(job.id, job);
                let moves = e.compact();
                check_moves(&moves, &running, None, step)?;
            }
            Event::Foreign { gpus, seed } => {
                let Some(at) = pick_nodes(&e, gpus, 1, seed) else {
                    continue;
                };
                let id = JobId(next);
                next += 1;
                e.adopt_foreign(id, &[(at[0], gpus)]).unwrap();
                foreign.push(id);
                let moves = e.compact();
                check_moves(&moves, &running, None, step)?;
            }
            Event::Usable { node, usable } => {
                e.set_node_usable(node % nodes, usable).unwrap();
                let moves = e.compact();
                check_moves(&moves, &running, None, step)?;
                for m in &moves {
                    prop_assert!(
                        e.snapshot().nodes[m.to as usize].usable,
                        "step {}: migration onto drained node {}",
                        step,
                        m.to
                    );
                }
            }
            Event::Within { gpus, instances } => {
                let job = JobRequest::new(next, instances, gpus);
                next += 1;
                let before = e.snapshot();
                match e.place_within(&job, &half).unwrap() {
                    Some(adm) => {
                        check_moves(&adm.migrations, &running, Some(&job), step)?;
                        within.insert(job.id);
                        running.insert(job.id, job);
                    }
                    None => prop_assert_eq!(
                        e.snapshot(),
                        before,
                        "step {}: failed admission changed state",
                        step
                    ),
                }
            }
            Event::Depart(k) => {
                let total = running.len() + foreign.len();
                if total == 0 {
                    continue;
                }
                let k = k % total;
                let id = if k < running.len() {
                    let id = *running.keys().nth(k).unwrap();
                    running.remove(&id);
                    id
                } else {
                    foreign.remove(k - running.len())
                };
                within.remove(&id);
                let migrations = e.remove(id).unwrap();
                check_moves(&migrations, &running, None, step)?;
            }
        }
        // Restricted jobs never leave their nodes.
        for j in &within {
            let nodes = &e.occupancy().job(*j).expect("running").nodes;
            prop_assert!(
                nodes.iter().all(|&n| half.contains(n)),
                "step {}: job {} restricted to the first half runs on {:?}: {}",
                step,
                j,
                nodes,
                layout(&e)
            );
        }
        // Proposition 1 and exact accounting.
        if let Err(why) = e.check_invariants() {
            return Err(TestCaseError::fail(format!("step {step}: {why}")));
        }
        parts = Some(check_layout_parts(&e, parts, step)?);
        let expected: u64 = running.values().map(|j| j.shape.total_gpus()).sum();
        let foreign_gpus: u64 = foreign
            .iter()
            .map(|j| {
                e.occupancy()
                    .job(*j)
                    .map_or(0, |r| r.gpus.iter().map(|&g| u64::from(g)).sum())
            })
            .sum();
        prop_assert_eq!(e.occupancy().used_gpus(), expected + foreign_gpus);
        prop_assert_eq!(e.occupancy().running_jobs(), running.len() + foreign.len());
        check_reach(&e, step)?;
        check_whole_node_plans(&mut e, &half, step)?;
        for j in running.values() {
            let placed = e.occupancy().job(j.id).map(|r| r.nodes.len());
            prop_assert_eq!(
                placed,
                Some(j.shape.instances as usize),
                "step {}: job {} lost",
                step,
                j.id
            );
        }
        // Movable guests (instances outside the ABS) exist only while no
        // usable empty node does. A restricted job the last Compact held
        // still (its home would be outside its nodes) counts as pinned. A
        // settled 1-GPU guest of a full node (`compact/fill.rs`) closes its
        // node: moving it to an empty node would open two, so it is exempt,
        // exactly.
        let snap = e.snapshot();
        let held = e.held_in_last_compact();
        let movable_guests = snap
            .nodes
            .iter()
            .flat_map(|n| {
                let full = n.used == n.capacity;
                n.state.guests.iter().filter(move |g| !(full && g.settled))
            })
            .filter(|g| {
                running.get(&g.instance.job).is_some_and(|j| j.movable)
                    && !held.contains(&g.instance.job)
            })
            .count();
        if movable_guests > 0 {
            let usable_empty = snap
                .nodes
                .iter()
                .filter(|v| v.used == 0 && v.usable)
                .count();
            prop_assert_eq!(
                usable_empty,
                0,
                "step {}: guest left with empty nodes (held {:?}, restricted {:?}): {}",
                step,
                held,
                within,
                layout(&e)
            );
        }
        check_theorem1(&e, &running, !foreign.is_empty(), step)?;
        check_compacts_settle(&e, step)?;
    }
    Ok(())
}

/// Compacts run one after the other, with no event between, on a copy of
/// `e`: where the last Compact held no job at a step
/// (`held_in_last_compact` empty), the next moves nothing; where it held
/// restricted jobs, whose holds are lifted at the end of each Compact, the
/// passes take other steps around them again, and at most
/// [`SETTLING_COMPACTS`] more Compacts move anything, none back to a
/// layout seen before (no back-and-forth; docs/compass-corrections.md
/// section 8).
fn check_compacts_settle(e: &CompassEngine, step: usize) -> Result<(), TestCaseError> {
    let held = !e.held_in_last_compact().is_empty();
    let mut probe = e.clone();
    let mut seen = std::collections::HashSet::from([layout(&probe)]);
    for round in 1..=SETTLING_COMPACTS + 1 {
        let moves = probe.compact();
        if moves.is_empty() {
            return Ok(());
        }
        prop_assert!(
            held && round <= SETTLING_COMPACTS,
            "step {}: Compact {} after the event's moved {:?} (held by the last: {:?}): {}",
            step,
            round,
            moves,
            e.held_in_last_compact(),
            layout(e)
        );
        prop_assert!(
            seen.insert(layout(&probe)),
            "step {}: Compact {} after the event's came back to an earlier layout: {}",
            step,
            round,
            layout(e)
        );
    }
    Ok(())
}

/// How many Compacts after one that held restricted jobs may still move
/// (measured: 2, in 300,000 events on 8-128 nodes and every property
/// run here).
const SETTLING_COMPACTS: usize = 2;

/// Compact as a trial (`CompassEngine::begin_trial`), on an engine that
/// does not compact by itself, after every event: undone, the engine is its
/// copy from before the trial (layout, and the same next Compact); kept, it
/// is what a plain Compact makes. Every third step nests the trial inside
/// an outer one that is undone.
fn replay_trials(nodes: u32, cap: u32, events: &[Event]) -> std::result::Result<(), TestCaseError> {
    let spec = ClusterSpec::new(nodes, cap).unwrap();
    let config = CompassConfig {
        compact: false,
        ..CompassConfig::default()
    };
    let mut e = CompassEngine::new(spec, config);
    let mut running: Vec<JobId> = Vec::new();
    let half = compass_core::model::NodeSet::from_nodes(nodes, 0..nodes.div_ceil(2));
    let mut parts = None;
    for (step, ev) in events.iter().enumerate() {
        let id = JobId(1 + step as u64);
        match *ev {
            Event::Arrive {
                gpus,
                instances,
                pinned,
            } => {
                let mut job = JobRequest::new(id.0, instances, gpus);
                job.movable = !pinned;
                if e.place(&job, None).unwrap().is_some() {
                    running.push(id);
                }
            }
            Event::Adopt {
                gpus,
                instances,
                pinned,
                seed,
            } => {
                if let Some(at) = pick_nodes(&e, gpus, instances, seed) {
                    let mut job = JobRequest::new(id.0, instances, gpus);
                    job.movable = !pinned;
                    e.adopt(&job, &at).unwrap();
                    running.push(id);
                }
            }
            Event::Foreign { gpus, seed } => {
                if let Some(at) = pick_nodes(&e, gpus, 1, seed) {
                    e.adopt_foreign(id, &[(at[0], gpus)]).unwrap();
                    running.push(id);
                }
            }
            Event::Usable { node, usable } => e.set_node_usable(node % nodes, usable).unwrap(),
            Event::Within { gpus, instances } => {
                let job = JobRequest::new(id.0, instances, gpus);
                if e.place_within(&job, &half).unwrap().is_some() {
                    running.push(id);
                }
            }
            Event::Depart(k) => {
                if !running.is_empty() {
                    let id = running.remove(k % running.len());
                    e.remove(id).unwrap();
                }
            }
        }
        let arrival = JobRequest::new(
            10_000 + step as u64,
            1 + (step as u32 % 2),
            1 + (step as u32 % cap),
        );
        check_gate_bound(&e, &running, &arrival, step)?;
        check_veto(&e, step)?;
        let copy = e.clone();
        let nested = step % 3 == 0;
        if nested {
            e.begin_trial();
            // A hold inside the outer trial, lifted before it is undone (as
            // the head's guard holds jobs).
            if let Some(&j) = running.first() {
                let _ = e.set_movable(j, false);
            }
        }
        e.begin_trial();
        let tried = e.compact();
        // Parts taken inside the trial share the trial's nodes, which the
        // undo below must forget.
        drop(e.layout_parts());
        if nested {
            prop_assert!(e.keep_trial());
            if let Some(&j) = running.first() {
                let _ = e.set_movable(
                    j,
                    copy.occupancy().job(j).is_some_and(|r| r.request.movable),
                );
            }
        }
        prop_assert!(e.undo_trial());
        prop_assert_eq!(e.open_trials(), 0);
        prop_assert_eq!(
            e.snapshot(),
            copy.snapshot(),
            "step {}: undone trial of {:?} left a change: {}",
            step,
            tried,
            layout(&e)
        );
        if let Err(why) = e.check_invariants() {
            return Err(TestCaseError::fail(format!(
                "step {step}: after undo: {why}"
            )));
        }
        parts = Some(check_layout_parts(&e, parts, step)?);
        check_reach(&e, step)?;
        let mut copy = copy;
        let again = copy.compact();
        if step % 2 == 0 {
            e.begin_trial();
            prop_assert_eq!(e.compact(), again.clone(), "step {}", step);
            prop_assert!(e.keep_trial());
        } else {
            prop_assert_eq!(
                e.compact(),
                again.clone(),
                "step {}: the Compact after an undo differs",
                step
            );
        }
        prop_assert_eq!(e.snapshot(), copy.snapshot(), "step {}", step);
        if !nested && step % 2 == 1 {
            prop_assert_eq!(tried, again, "step {}: Compact is not deterministic", step);
        }
    }
    Ok(())
}

/// Compact with a veto (the `pays` gate asks before each move to another
/// node; issue #11), on a copy of `e`: every third job may not move. No
/// refused job moves to another node, each is held for tidying afterwards
/// (neither a second vetoed Compact nor a plain one moves it), the engine
/// stays consistent, and an exhausted veto refused at least its limit.
fn check_veto(e: &CompassEngine, step: usize) -> Result<(), TestCaseError> {
    let may_move = |j: JobId| j.0 % 3 != step as u64 % 3;
    for limit in [usize::MAX, 1 + step % 3] {
        let mut c = e.clone();
        let mut veto = Veto::new(&may_move, limit);
        let m = c.compact_vetoed(&mut veto);
        let refused = veto.refused().to_vec();
        for x in &m {
            prop_assert!(
                x.from == x.to || may_move(x.job),
                "step {}: {:?} moved though refused",
                step,
                x
            );
        }
        for j in &refused {
            prop_assert!(!may_move(*j), "step {}: {:?} refused", step, j);
        }
        if let Err(why) = c.check_invariants() {
            return Err(TestCaseError::fail(format!(
                "step {step}: after a vetoed Compact: {why}"
            )));
        }
        if veto.exhausted() {
            // A step of the slotted pass may refuse several jobs at once.
            prop_assert!(refused.len() >= limit, "step {}", step);
            continue;
        }
        // Held: a second vetoed Compact does not ask about them again.
        let mut again = Veto::new(&may_move, usize::MAX);
        let _ = c.clone().compact_vetoed(&mut again);
        prop_assert!(
            again.refused().iter().all(|j| !refused.contains(j)),
            "step {}: asked again about {:?}",
            step,
            again.refused()
        );
        for x in c.compact() {
            prop_assert!(
                x.from == x.to || !refused.contains(&x.job),
                "step {}: a held job moved: {:?}",
                step,
                x
            );
        }
    }
    Ok(())
}

/// Events per long run (`theorem1_holds_over_long_runs_of_adopted_layouts`).
const LONG_RUNS: std::ops::Range<usize> = 1500..2500;

fn cluster() -> impl Strategy<Value = (u32, u32)> {
    (8u32..=24, prop_oneof![Just(2u32), Just(4u32), Just(8u32)])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Roomy cluster, every job resumable: Theorem 1 must hold whenever WCC does.
    #[test]
    fn theorem1_holds_on_a_roomy_cluster(evs in events(8, 96, Mix::default())) {
        replay(96, 8, &evs)?;
    }

    /// 8-24 nodes of 2, 4 or 8 GPUs, often full: overflow guests and lazy
    /// fillers happen, and Theorem 1 still holds with them.
    #[test]
    fn theorem1_holds_with_guests_on_small_clusters(
        (nodes, cap, evs) in cluster().prop_flat_map(|(n, c)| (Just(n), Just(c), events(c, n, Mix::default())))
    ) {
        replay(nodes, cap, &evs)?;
    }

    /// The same with layouts Slurm chose (`adopt`): guests everywhere.
    #[test]
    fn theorem1_holds_with_adopted_layouts(
        (nodes, cap, evs) in cluster().prop_flat_map(|(n, c)| (Just(n), Just(c), events(c, n, Mix { adopt: true, ..Mix::default() })))
    ) {
        replay(nodes, cap, &evs)?;
    }

    /// Small, often full cluster: nothing is lost and the state stays consistent.
    #[test]
    fn small_clusters_stay_consistent(evs in events(8, 4, Mix::default())) {
        replay(4, 8, &evs)?;
    }

    /// Pinned jobs, foreign GPUs and drained nodes: pinned and foreign jobs
    /// never move, nothing moves onto a drained node, and the bound holds
    /// over the movable part.
    #[test]
    fn pinned_foreign_and_drained(
        (nodes, cap, evs) in cluster().prop_flat_map(|(n, c)| (Just(n), Just(c), events(c, n, Mix { pinned: 0.3, adopt: true, foreign: true, drain: true, within: false })))
    ) {
        replay(nodes, cap, &evs)?;
    }

    /// Correction 12 (`make_room`) on, with every kind of event: a job
    /// that makes room moves only movable jobs, never onto a drained node,
    /// a refused one leaves the state as it was, and every check above
    /// holds (Theorem 1 with guests included).
    #[test]
    fn making_room_keeps_every_promise(
        (nodes, cap, evs) in cluster().prop_flat_map(|(n, c)| (Just(n), Just(c), events(c, n, Mix { pinned: 0.3, adopt: true, foreign: true, drain: true, within: true })))
    ) {
        let config = CompassConfig { make_room: true, ..CompassConfig::default() };
        replay_with(nodes, cap, &evs, config)?;
    }

    /// The same on the small, often full cluster, every job resumable.
    #[test]
    fn making_room_on_a_small_cluster(evs in events(8, 4, Mix::default())) {
        let config = CompassConfig { make_room: true, ..CompassConfig::default() };
        replay_with(4, 8, &evs, config)?;
    }

    /// Compact as a trial, undone or kept, nested or not, with every kind
    /// of event: undoing restores the engine exactly (issue #11: the
    /// head's guard tries Compact without copying the engine).
    #[test]
    fn an_undone_compact_leaves_the_engine_as_it_was(
        (nodes, cap, evs) in cluster().prop_flat_map(|(n, c)| (Just(n), Just(c), events(c, n, Mix { pinned: 0.3, adopt: true, foreign: true, drain: true, within: true })))
    ) {
        replay_trials(nodes, cap, &evs)?;
    }

    /// Jobs restricted to half the nodes (a partition over part of the
    /// pool), with every other kind of event: they never leave their half,
    /// and the bound holds exactly where the last Compact held none of them
    /// still (over the movable part otherwise).
    #[test]
    fn restricted_jobs_stay_inside_their_nodes(
        (nodes, cap, evs) in cluster().prop_flat_map(|(n, c)| (Just(n), Just(c), events(c, n, Mix { within: true, adopt: true, ..Mix::default() })))
    ) {
        replay(nodes, cap, &evs)?;
    }
}

// ---------------------------------------------------------------------------
// Mixed clusters: one engine per pool (compass_core::placement::pools).

use compass_core::model::NodeSet;
use compass_core::placement::pools::{NodeGpus, PoolSet};

#[derive(Clone, Debug)]
enum PoolEvent {
    /// A job of `instances x gpus`; `typed`: it names the GPU type of the
    /// pool at this position (modulo pool count), else any pool admits it.
    Arrive {
        gpus: u32,
        instances: u32,
        pinned: bool,
        typed: Option<usize>,
    },
    Depart(usize),
    /// GPUs of a job outside the model on some node (CPU-only nodes too).
    Foreign {
        gpus: u32,
        seed: u64,
    },
    Usable {
        node: u32,
        usable: bool,
    },
}

const TYPES: [&str; 2] = ["a100", "l40s"];

/// `nodes` in an order drawn from `seed` (a seeded Fisher-Yates shuffle).
fn shuffled(mut nodes: Vec<NodeGpus>, seed: u64) -> Vec<NodeGpus> {
    let mut x = seed;
    for i in (1..nodes.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        nodes.swap(i, (x >> 33) as usize % (i + 1));
    }
    nodes
}

/// Pools `(nodes, GPUs per node, type)` and CPU-only nodes, interleaved by
/// `seed` into one node table.
fn mixed_cluster() -> impl Strategy<Value = Vec<NodeGpus>> {
    (
        proptest::collection::vec(
            (
                2u32..=8,
                prop_oneof![3 => Just(2u32), 3 => Just(4u32), 3 => Just(8u32), 1 => Just(6u32)],
                0usize..3,
            ),
            1..=3,
        ),
        0u32..=3,
        any::<u64>(),
    )
        .prop_map(|(pools, cpu, seed)| {
            let mut nodes: Vec<NodeGpus> = Vec::new();
            for (n, cap, t) in pools {
                for _ in 0..n {
                    nodes.push(NodeGpus::new(cap, TYPES.get(t).copied()));
                }
            }
            for _ in 0..cpu {
                nodes.push(NodeGpus::new(0, None));
            }
            shuffled(nodes, seed)
        })
}

/// Clusters of 2-3 partition groups (partitions that share no node), each
/// of 2-8 nodes of one kind, the same kind in several groups more often
/// than not (untyped 8-GPU nodes), interleaved by `seed`: one pool per
/// group and kind ([`compass_core::placement::pools::partition_groups`]).
fn partitioned_cluster() -> impl Strategy<Value = Vec<NodeGpus>> {
    (
        proptest::collection::vec(
            (
                2u32..=8,
                prop_oneof![1 => Just(2u32), 1 => Just(4u32), 4 => Just(8u32)],
            ),
            2..=3,
        ),
        any::<u64>(),
    )
        .prop_map(|(groups, seed)| {
            let mut nodes: Vec<NodeGpus> = Vec::new();
            for (k, (n, cap)) in groups.into_iter().enumerate() {
                let name = format!("p{k}");
                for _ in 0..n {
                    nodes.push(NodeGpus::new(cap, None).in_group(Some(&name)));
                }
            }
            shuffled(nodes, seed)
        })
}

fn pool_events(nodes: u32, mix: Mix) -> impl Strategy<Value = Vec<PoolEvent>> {
    let arrive = (
        gpus(8),
        1u32..=3,
        proptest::bool::weighted(mix.pinned),
        proptest::option::of(0usize..4),
    )
        .prop_map(|(gpus, instances, pinned, typed)| PoolEvent::Arrive {
            gpus,
            instances,
            pinned,
            typed,
        });
    let foreign =
        (1u32..=8, any::<u64>()).prop_map(|(gpus, seed)| PoolEvent::Foreign { gpus, seed });
    let usable = (0..nodes, proptest::bool::weighted(0.6))
        .prop_map(|(node, usable)| PoolEvent::Usable { node, usable });
    let w = |on: bool| if on { 1 } else { 0 };
    proptest::collection::vec(
        prop_oneof![
            3 => arrive,
            2 => (0usize..64).prop_map(PoolEvent::Depart),
            w(mix.foreign) => foreign,
            w(mix.drain) => usable,
        ],
        1..150,
    )
}

/// Replays `events` on a pool set, checking after every event, in every
/// pool: the engine's invariants, exact accounting, that a job stays in the
/// one pool it was placed in and only in pools its request admits, and
/// Theorem 1 ([`check_theorem1`], with its exact exemptions) wherever WCC
/// holds in that pool. On a cluster of several partition groups each job
/// is submitted to one group's partition (by its id): only that group's
/// pools and nodes are offered, as Slurm offers a partition's nodes.
fn replay_pools(
    nodes: &[NodeGpus],
    events: &[PoolEvent],
) -> std::result::Result<(), TestCaseError> {
    replay_pools_with(nodes, events, CompassConfig::default())
}

/// [`replay_pools`] with engines of `config`.
fn replay_pools_with(
    nodes: &[NodeGpus],
    events: &[PoolEvent],
    config: CompassConfig,
) -> std::result::Result<(), TestCaseError> {
    let mut s = PoolSet::new(nodes, config);
    let pools: Vec<_> = s.pools().cloned().collect();
    let total = nodes.len() as u32;
    let groups: Vec<Option<String>> = nodes
        .iter()
        .map(|n| n.group.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut running: BTreeMap<JobId, (usize, JobRequest)> = BTreeMap::new();
    // Each job's partition group, where the cluster has several.
    let mut group_of: BTreeMap<JobId, Option<String>> = BTreeMap::new();
    let mut foreign: BTreeMap<JobId, Vec<(NodeId, u32)>> = BTreeMap::new();
    let mut next = 1u64;
    for (step, ev) in events.iter().enumerate() {
        match *ev {
            PoolEvent::Arrive {
                gpus,
                instances,
                pinned,
                typed,
            } => {
                let want = typed.and_then(|k| pools.get(k % pools.len().max(1))?.gpu_type.clone());
                let mut job = JobRequest::new(next, instances, gpus);
                job.movable = !pinned;
                let group = &groups[next as usize % groups.len()];
                next += 1;
                let options: Vec<(usize, JobRequest)> = pools
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.modelled && p.admits(want.as_deref(), gpus))
                    .filter(|(_, p)| groups.len() == 1 || &p.group == group)
                    .map(|(k, _)| (k, job.clone()))
                    .collect();
                let partition = NodeSet::from_nodes(
                    total,
                    (0..total).filter(|&n| groups.len() == 1 || &nodes[n as usize].group == group),
                );
                if let Some((p, adm)) = s.place(&options, Some(&partition)).unwrap() {
                    prop_assert!(
                        options.iter().any(|(q, _)| *q == p),
                        "step {}: pool {} not allowed",
                        step,
                        p
                    );
                    prop_assert_eq!(adm.nodes.len(), instances as usize);
                    for n in &adm.nodes {
                        prop_assert_eq!(
                            s.pool_of(*n).map(|x| x.0),
                            Some(p),
                            "step {}: node {} outside pool {}",
                            step,
                            n,
                            p
                        );
                    }
                    for m in &adm.migrations {
                        let owner = running
                            .get(&m.job)
                            .map(|r| &r.1)
                            .or((m.job == job.id).then_some(&job));
                        prop_assert!(
                            owner.is_some_and(|j| j.movable),
                            "step {}: pinned or foreign job {} migrated",
                            step,
                            m.job
                        );
                    }
                    if groups.len() > 1 {
                        group_of.insert(job.id, group.clone());
                    }
                    running.insert(job.id, (p, job));
                }
            }
            PoolEvent::Depart(k) => {
                let n = running.len() + foreign.len();
                if n == 0 {
                    continue;
                }
                let k = k % n;
                let id = if k < running.len() {
                    let id = *running.keys().nth(k).unwrap();
                    running.remove(&id);
                    id
                } else {
                    let id = *foreign.keys().nth(k - running.len()).unwrap();
                    foreign.remove(&id);
                    id
                };
                for m in s.remove(id).unwrap() {
                    prop_assert!(
                        running.get(&m.job).is_some_and(|r| r.1.movable),
                        "step {}: job {} migrated",
                        step,
                        m.job
                    );
                }
            }
            PoolEvent::Foreign { gpus, seed } => {
                // a node with room, as Slurm would pick one
                let fits: Vec<NodeId> = (0..total)
                    .filter(|&n| match s.pool_of(n) {
                        Some((p, l)) => s.engine(p).is_none_or(|e| e.occupancy().free(l) >= gpus),
                        None => true,
                    })
                    .collect();
                if fits.is_empty() {
                    continue;
                }
                let n = fits[(seed % fits.len() as u64) as usize];
                let id = JobId(next);
                next += 1;
                let g = match s.pool_of(n) {
                    Some((p, _)) => gpus.min(pools[p].gpus_per_node),
                    None => gpus,
                };
                s.adopt_foreign(id, &[(n, g)]).unwrap();
                foreign.insert(id, vec![(n, g)]);
                for m in s.compact() {
                    prop_assert!(
                        running.get(&m.job).is_some_and(|r| r.1.movable),
                        "step {}: job {} migrated",
                        step,
                        m.job
                    );
                }
            }
            PoolEvent::Usable { node, usable } => {
                s.set_node_usable(node % total, usable).unwrap();
                for m in s.compact() {
                    prop_assert!(
                        running.get(&m.job).is_some_and(|r| r.1.movable),
                        "step {}: job {} migrated",
                        step,
                        m.job
                    );
                    let (p, l) = s.pool_of(m.to).unwrap();
                    prop_assert!(
                        s.engine(p).unwrap().snapshot().nodes[l as usize].usable,
                        "step {}: move onto drained node {}",
                        step,
                        m.to
                    );
                }
            }
        }
        if let Err(why) = s.check_invariants() {
            return Err(TestCaseError::fail(format!("step {step}: {why}")));
        }
        for (p, spec) in pools.iter().enumerate() {
            let Some(e) = s.engine(p) else {
                prop_assert!(!spec.modelled);
                continue;
            };
            let in_pool: BTreeMap<JobId, JobRequest> = running
                .iter()
                .filter(|(_, (q, _))| *q == p)
                .map(|(id, (_, j))| (*id, j.clone()))
                .collect();
            let foreign_gpus: u64 = foreign
                .values()
                .flatten()
                .filter(|(n, _)| s.pool_of(*n).map(|x| x.0) == Some(p))
                .map(|(_, g)| u64::from(*g))
                .sum();
            let expected: u64 = in_pool.values().map(|j| j.shape.total_gpus()).sum();
            prop_assert_eq!(
                e.occupancy().used_gpus(),
                expected + foreign_gpus,
                "step {}: pool {}",
                step,
                spec.name.clone()
            );
            for j in in_pool.values() {
                prop_assert_eq!(
                    s.job(j.id).map(|r| (r.pool, r.nodes.len())),
                    Some((p, j.shape.instances as usize)),
                    "step {}: job {} lost",
                    step,
                    j.id
                );
                // Never outside its partition's nodes, Compact included.
                if let (Some(g), Some(r)) = (group_of.get(&j.id), s.job(j.id)) {
                    prop_assert!(
                        r.nodes.iter().all(|&n| &nodes[n as usize].group == g),
                        "step {}: job {} on {:?}, outside partition group {:?}",
                        step,
                        j.id,
                        r.nodes,
                        g
                    );
                }
            }
            let any_foreign = foreign_gpus > 0;
            check_theorem1(e, &in_pool, any_foreign, step)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random mixed clusters (1-3 pools of 2, 4 or 8 GPUs, typed or not, now
    /// and then a pass-through pool of 6, CPU-only nodes between them), every job resumable: Theorem 1 holds
    /// in each pool wherever WCC holds in that pool.
    #[test]
    fn theorem1_holds_per_pool_on_mixed_clusters(
        (nodes, evs) in mixed_cluster().prop_flat_map(|n| { let len = n.len() as u32; (Just(n), pool_events(len, Mix::default())) })
    ) {
        replay_pools(&nodes, &evs)?;
    }

    /// The same with pinned jobs, foreign GPUs (on any node, CPU-only ones
    /// too) and drained nodes: the exact exemptions of check_theorem1, per
    /// pool.
    #[test]
    fn theorem1_holds_per_pool_with_pinned_foreign_and_drained(
        (nodes, evs) in mixed_cluster().prop_flat_map(|n| { let len = n.len() as u32; (Just(n), pool_events(len, Mix { pinned: 0.3, adopt: false, foreign: true, drain: true, within: false })) })
    ) {
        replay_pools(&nodes, &evs)?;
    }

    /// Partitions that share no node (2-3 groups, the same kind of node in
    /// several): one pool per group and kind, each job offered its own
    /// group's nodes only. Every job movable: Theorem 1 holds in each pool
    /// with no job held (one engine over all of them would hold every job
    /// inside its partition and promise nothing).
    #[test]
    fn theorem1_holds_per_partition_group(
        (nodes, evs) in partitioned_cluster().prop_flat_map(|n| { let len = n.len() as u32; (Just(n), pool_events(len, Mix::default())) })
    ) {
        replay_pools(&nodes, &evs)?;
    }

    /// The same with pinned jobs, foreign GPUs and drained nodes.
    #[test]
    fn theorem1_holds_per_partition_group_with_pinned_foreign_and_drained(
        (nodes, evs) in partitioned_cluster().prop_flat_map(|n| { let len = n.len() as u32; (Just(n), pool_events(len, Mix { pinned: 0.3, adopt: false, foreign: true, drain: true, within: false })) })
    ) {
        replay_pools(&nodes, &evs)?;
    }

    /// The same with correction 12 (`make_room`) on in every pool.
    #[test]
    fn making_room_per_pool_on_mixed_clusters(
        (nodes, evs) in mixed_cluster().prop_flat_map(|n| { let len = n.len() as u32; (Just(n), pool_events(len, Mix { pinned: 0.3, adopt: false, foreign: true, drain: true, within: false })) })
    ) {
        let config = CompassConfig { make_room: true, ..CompassConfig::default() };
        replay_pools_with(&nodes, &evs, config)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: LONG_RUN_CASES, ..ProptestConfig::default() })]

    /// Long runs on 3-12 nodes with layouts Slurm chose, every job
    /// movable (issue #11: runs of 5,000 events found two adopted layouts
    /// where the bound failed, which runs of 150 never reached). These
    /// runs reach such layouts rarely (about once in a thousand runs of
    /// 5,000 events, with the fill pass off);
    /// `theorem1_holds_after_adopted_layouts_empty_out` reaches them within
    /// a few hundred cases, and `engine_hostile.rs` reproduces each.
    #[test]
    fn theorem1_holds_over_long_runs_of_adopted_layouts(
        (nodes, cap, evs) in (prop_oneof![Just(3u32), Just(6u32), Just(12u32)], prop_oneof![Just(4u32), Just(8u32)])
            .prop_flat_map(|(n, c)| (Just(n), Just(c), events_of(c, n, Mix { adopt: true, ..Mix::default() }, LONG_RUNS)))
    ) {
        replay(nodes, cap, &evs)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: LONG_RUN_CASES, ..ProptestConfig::default() })]

    /// Long runs on 16-64 nodes with jobs restricted to half of them and
    /// layouts Slurm chose: the states where a Compact holds a restricted
    /// job and the next one still moves (`check_compacts_settle`) come
    /// about once in 200 events here (once in 500 in the short runs on
    /// 8-24 nodes of `restricted_jobs_stay_inside_their_nodes`).
    #[test]
    fn compacts_settle_with_restricted_jobs_over_long_runs(
        (nodes, evs) in prop_oneof![Just(16u32), Just(32u32), Just(64u32)]
            .prop_flat_map(|n| (Just(n), events_of(8, n, Mix { within: true, adopt: true, ..Mix::default() }, LONG_RUNS)))
    ) {
        replay(nodes, 8, &evs)?;
    }
}

/// Cases of the long runs (each 1,500-2,500 events).
const LONG_RUN_CASES: u32 = 12;

/// A case CI's random run found (stop 47): after an undone Compact and a
/// hold lifted inside the outer trial, the engine's Compact moved two jobs
/// that the copy taken before the trial did not move.
#[test]
fn an_undone_compact_with_a_lifted_hold_compacts_as_before() {
    let evs = [
        Event::Arrive {
            gpus: 3,
            instances: 1,
            pinned: false,
        },
        Event::Arrive {
            gpus: 1,
            instances: 1,
            pinned: false,
        },
        Event::Within {
            gpus: 4,
            instances: 2,
        },
        Event::Arrive {
            gpus: 4,
            instances: 1,
            pinned: false,
        },
        Event::Arrive {
            gpus: 4,
            instances: 1,
            pinned: false,
        },
        Event::Arrive {
            gpus: 2,
            instances: 3,
            pinned: false,
        },
        Event::Depart(20),
        Event::Within {
            gpus: 4,
            instances: 1,
        },
        Event::Foreign {
            gpus: 3,
            seed: 6396934134986046162,
        },
        Event::Foreign {
            gpus: 1,
            seed: 11080390620692602174,
        },
    ];
    replay_trials(9, 8, &evs).unwrap();
}

/// A Compact right after the one a departure ran moves nothing: that one
/// ran its rounds to the end (issue #11: the guest repair and the slotted
/// pass's top-up took turns with a node's 1-GPU guests until the rounds
/// ran out, and the next Compact went on).
fn check_fixpoint(e: &mut CompassEngine, step: usize) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        e.unsettled_compacts(),
        0,
        "step {}: a Compact reached its round limit",
        step
    );
    let before = layout(e);
    let again = e.compact();
    prop_assert!(
        again.is_empty(),
        "step {}: a second Compact moved {:?}: {}",
        step,
        again,
        before
    );
    Ok(())
}

/// Compacts an adopted layout, then removes its jobs (`running`) and
/// foreign GPU uses (`foreign`) one at a time in an order drawn from
/// `order`: Theorem 1 holds (`check_theorem1`) after the first Compact and
/// after each departure, and a second Compact after each departure moves
/// nothing (`check_fixpoint`).
fn compact_then_empty_out(
    e: &mut CompassEngine,
    mut running: BTreeMap<JobId, JobRequest>,
    mut foreign: Vec<JobId>,
    order: u64,
) -> Result<(), TestCaseError> {
    let _ = e.compact();
    check_theorem1(e, &running, !foreign.is_empty(), 0)?;
    let mut x = order;
    let mut step = 0;
    while !running.is_empty() || !foreign.is_empty() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = (x >> 33) as usize % (running.len() + foreign.len());
        let id = if k < running.len() {
            let id = *running.keys().nth(k).unwrap();
            running.remove(&id);
            id
        } else {
            foreign.remove(k - running.len())
        };
        let _ = e.remove(id).unwrap();
        step += 1;
        check_theorem1(e, &running, !foreign.is_empty(), step)?;
        check_fixpoint(e, step)?;
    }
    Ok(())
}

/// A layout Slurm chose, adopted on `nodes` nodes of 8 GPUs: each
/// `(g, k, seed)` a job of `g` GPUs per instance (`k` instances of 1 GPU,
/// or `ceil(k / 3)` of more) on nodes drawn from `seed` (`pick_nodes`;
/// several instances may share a node), skipped when none fit; every job
/// movable, numbered from 1 in the order adopted.
fn adopted_layout(
    nodes: u32,
    jobs: &[(u32, u32, u64)],
) -> (CompassEngine, BTreeMap<JobId, JobRequest>) {
    let mut e = CompassEngine::new(
        ClusterSpec::new(nodes, 8).unwrap(),
        CompassConfig::default(),
    );
    let mut running: BTreeMap<JobId, JobRequest> = BTreeMap::new();
    for &(g, k, seed) in jobs {
        let k = if g == 1 { k } else { k.div_ceil(3) };
        if let Some(at) = pick_nodes(&e, g, k, seed) {
            let job = JobRequest::new(running.len() as u64 + 1, k, g);
            e.adopt(&job, &at).unwrap();
            running.insert(job.id, job);
        }
    }
    (e, running)
}

/// Cases of `theorem1_holds_after_adopted_layouts_empty_out` (each a
/// layout of up to 40 jobs, emptied one by one).
const ADOPTED_LAYOUT_CASES: u32 = 10_000;

proptest! {
    #![proptest_config(ProptestConfig { cases: ADOPTED_LAYOUT_CASES, ..ProptestConfig::default() })]

    /// Layouts Slurm chose (`adopt`, several instances of a job may share
    /// a node) on 3-5 nodes of 8 GPUs, every job movable, no event but
    /// departures: Theorem 1 holds, with no guest exemption, after a
    /// Compact of the layout and after each departure, in a random order,
    /// and a second Compact after each departure moves nothing
    /// (issue #11: the long event runs above reach such layouts about once
    /// in a thousand cases; this reaches the two counterexamples of
    /// `engine_hostile.rs` within a few hundred, and found two more:
    /// `theorem1_with_two_odd_rooms_beside_a_full_node_of_one_gpu_guests`,
    /// `theorem1_with_two_odd_rooms_filled_from_one_full_pool_node`).
    #[test]
    fn theorem1_holds_after_adopted_layouts_empty_out(
        nodes in 3u32..=5,
        jobs in proptest::collection::vec((prop_oneof![6 => Just(1u32), 3 => Just(2u32), 2 => Just(3u32), 2 => Just(4u32), 2 => Just(5u32), 1 => 6u32..=8], 1u32..=6, any::<u64>()), 4..40),
        order in any::<u64>(),
    ) {
        let (mut e, running) = adopted_layout(nodes, &jobs);
        compact_then_empty_out(&mut e, running, Vec::new(), order)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: ADOPTED_LAYOUT_CASES, ..ProptestConfig::default() })]

    /// [`theorem1_holds_after_adopted_layouts_empty_out`] on nodes of 2, 4
    /// and 8 GPUs with what sites have besides: pinned jobs, foreign GPU
    /// use and drained nodes. The bound is checked over the movable part
    /// (`check_theorem1`'s exact exemption) after the Compact of the layout
    /// and after each departure.
    #[test]
    fn theorem1_holds_after_hostile_adopted_layouts_empty_out(
        (nodes, cap) in (3u32..=8, prop_oneof![Just(2u32), Just(4u32), Just(8u32)]),
        jobs in proptest::collection::vec((1u32..=8, 1u32..=6, any::<u64>(), 0u32..10), 4..48),
        drained in proptest::collection::vec(0u32..8, 0..3),
        order in any::<u64>(),
    ) {
        let mut e = CompassEngine::new(ClusterSpec::new(nodes, cap).unwrap(), CompassConfig::default());
        let mut running: BTreeMap<JobId, JobRequest> = BTreeMap::new();
        let mut foreign: Vec<JobId> = Vec::new();
        for (i, (g, k, seed, kind)) in jobs.into_iter().enumerate() {
            let g = 1 + (g - 1) % cap;
            let id = JobId(i as u64 + 1);
            if kind == 0 {
                if let Some(at) = pick_nodes(&e, g, 1, seed) {
                    e.adopt_foreign(id, &[(at[0], g)]).unwrap();
                    foreign.push(id);
                }
                continue;
            }
            let k = if g == 1 { k } else { k.div_ceil(3) };
            if let Some(at) = pick_nodes(&e, g, k, seed) {
                let mut job = JobRequest::new(id.0, k, g);
                job.movable = kind > 3;
                e.adopt(&job, &at).unwrap();
                running.insert(job.id, job);
            }
        }
        for n in drained {
            e.set_node_usable(n % nodes, false).unwrap();
        }
        compact_then_empty_out(&mut e, running, foreign, order)?;
    }
}

/// The case CI found (stop 52): on 5 nodes, the departure of a job of two
/// 2-GPU instances takes a Compact of eight rounds (16 moves, seven rounds
/// that change the layout); Compact stopped at six and left four 1-GPU
/// guests on a slotted node beside a pool node with room, for the next
/// Compact to move.
#[test]
fn a_departure_whose_compact_needs_eight_rounds_settles_in_one() {
    let jobs: [(u32, u32, u64); 13] = [
        (2, 4, 3888867756018214359),
        (1, 3, 15534343950422871980),
        (1, 3, 5614330315859948878),
        (2, 1, 10313930226657126208),
        (2, 1, 10994332908267882642),
        (3, 1, 12203894183354028246),
        (4, 1, 591160822049002964),
        (1, 2, 2954926877170548105),
        (4, 1, 9971810096661205654),
        (2, 4, 2060137094682036312),
        (1, 6, 0),
        (1, 1, 0),
        (1, 2, 0),
    ];
    let (mut e, running) = adopted_layout(5, &jobs);
    compact_then_empty_out(&mut e, running, Vec::new(), 3668669155000307688).unwrap();
}
