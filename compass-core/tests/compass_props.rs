//! Property tests of the COMPASS-ABS engine over random arrival/departure
//! sequences: the state stays inside the ABS (Proposition 1), GPU accounting
//! is exact, nothing is lost, and Theorem 1's bound (at most one non-full
//! slotted node and one non-full pool node, so `N * SIF <= 2`) holds after
//! every event where the Workload Composition Condition (eq. 9) holds.

use std::collections::BTreeMap;

use compass_core::metric::{phi_star, wcc_holds};
use compass_core::model::{ClusterSpec, JobId, JobRequest};
use compass_core::placement::compass::{CompassConfig, CompassEngine};
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
}

fn gpus() -> impl Strategy<Value = u32> {
    // Mostly the sizes real traces have (paper Table 1), some unfriendly ones.
    prop_oneof![6 => Just(1u32), 2 => Just(2u32), 2 => Just(4u32), 2 => Just(8u32), 1 => 3u32..=3, 1 => 5u32..=7]
}

fn events(pinned_share: f64) -> impl Strategy<Value = Vec<Event>> {
    let arrive = (gpus(), 1u32..=3, proptest::bool::weighted(pinned_share)).prop_map(
        |(gpus, instances, pinned)| Event::Arrive {
            gpus,
            instances,
            pinned,
        },
    );
    let depart = (0usize..64).prop_map(Event::Depart);
    proptest::collection::vec(prop_oneof![3 => arrive, 2 => depart], 1..120)
}

/// One line per non-empty node: used GPUs, slots (width:anchor GPUs+fillers), pool, guests.
fn layout(e: &CompassEngine) -> String {
    let mut out = String::new();
    for v in e.snapshot().nodes.iter().filter(|v| v.used > 0) {
        let slots: Vec<String> = v
            .state
            .slots
            .iter()
            .map(|s| format!("{}:{}+{}", s.width, s.anchor_gpus, s.fillers.len()))
            .collect();
        let guests: Vec<u32> = v.state.guests.iter().map(|g| g.gpus).collect();
        out += &format!(
            "\n  n{} used {} slots [{}] pool {} guests {:?}",
            v.node,
            v.used,
            slots.join(" "),
            v.state.pool.len(),
            guests
        );
    }
    out
}

/// Replays `events`, checking every property after every event.
fn replay(nodes: u32, events: &[Event]) -> std::result::Result<(), TestCaseError> {
    let spec = ClusterSpec::new(nodes, 8).unwrap();
    let mut e = CompassEngine::new(spec, CompassConfig::default());
    let mut running: BTreeMap<JobId, JobRequest> = BTreeMap::new();
    let mut next = 1u64;
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
                        for m in &adm.migrations {
                            let owner = running.get(&m.job).unwrap_or(&job);
                            prop_assert!(
                                owner.movable,
                                "step {}: pinned job {} migrated",
                                step,
                                m.job
                            );
                        }
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
                if running.is_empty() {
                    continue;
                }
                let id = *running.keys().nth(k % running.len()).unwrap();
                let migrations = e.remove(id).unwrap();
                running.remove(&id);
                for m in &migrations {
                    prop_assert!(
                        running[&m.job].movable,
                        "step {}: pinned job {} migrated",
                        step,
                        m.job
                    );
                }
            }
        }
        // Proposition 1 and exact accounting.
        if let Err(why) = e.check_invariants() {
            return Err(TestCaseError::fail(format!("step {step}: {why}")));
        }
        let expected: u64 = running.values().map(|j| j.shape.total_gpus()).sum();
        prop_assert_eq!(e.occupancy().used_gpus(), expected);
        prop_assert_eq!(e.occupancy().running_jobs(), running.len());
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
        // Movable guests (instances outside the ABS) exist only while no room does.
        let snap = e.snapshot();
        let movable_guests = snap
            .nodes
            .iter()
            .flat_map(|n| n.state.guests.iter())
            .filter(|g| running.get(&g.instance.job).is_some_and(|j| j.movable))
            .count();
        if movable_guests > 0 {
            prop_assert_eq!(
                e.occupancy().empty_nodes(),
                0,
                "step {}: guest left with empty nodes: {}",
                step,
                layout(&e)
            );
        }
        // Theorem 1 when every job is movable, WCC holds and nothing overflowed.
        let counts = *e.occupancy().instance_counts();
        let all_movable = running.values().all(|j| j.movable);
        if all_movable && wcc_holds(&counts, 8) && e.guest_count() == 0 {
            let (slotted, pool) = e.non_full_by_kind();
            prop_assert!(
                slotted <= 1 && pool <= 1,
                "step {}: {} slotted and {} pool nodes non-full: {}",
                step,
                slotted,
                pool,
                layout(&e)
            );
            let n_sif = i64::from(e.occupancy().partial_nodes()) - phi_star(&counts, 8) as i64;
            prop_assert!(n_sif <= 2, "step {}: N*SIF = {}", step, n_sif);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Roomy cluster, every job resumable: Theorem 1 must hold whenever WCC does.
    #[test]
    fn theorem1_holds_on_a_roomy_cluster(evs in events(0.0)) {
        replay(96, &evs)?;
    }

    /// Small, often full cluster: overflow and stranded fillers happen;
    /// nothing is lost and the state stays consistent.
    #[test]
    fn small_clusters_stay_consistent(evs in events(0.0)) {
        replay(4, &evs)?;
    }

    /// Some jobs are not resumable: they are never migrated.
    #[test]
    fn pinned_jobs_are_never_migrated(evs in events(0.3)) {
        replay(12, &evs)?;
    }
}
