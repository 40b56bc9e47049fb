//! Fragmentation metrics (paper Section 3.2, Appendix C).
//!
//! - `Phi_pi`: the number of partial nodes of a placement (non-empty, not
//!   full), kept incrementally by [`crate::placement::Occupancy`].
//! - `Phi*` ([`phi_star`]): the fewest partial nodes over **all** feasible
//!   packings of the running instances. Appendix C of the paper computes it
//!   with a heuristic; ours is exact: the closed form of eq. (21) when the
//!   Workload Composition Condition holds, and otherwise an exact structured
//!   search over the residual (see [`exact`] and `docs/metric.md` for the
//!   proofs).
//! - `SIF = (Phi_pi - Phi*) / N` ([`sif`], eq. 2).
//!
//! [`PhiStarCache`] memoises the search for replays that ask after every event.

mod exact;
mod reference;

use std::collections::HashMap;

/// Running instances by GPUs per instance: `counts[g]` for `g` in `1..=8`
/// (index 0 unused).
pub type InstanceCounts = [u64; 9];

/// Total GPUs demanded by the running instances, `T` of eq. (20).
pub fn total_gpus(counts: &InstanceCounts) -> u64 {
    (1..=8).map(|g| g as u64 * counts[g]).sum()
}

/// Workload Composition Condition, paper eq. (9), in its slot-vacancy form
/// (Lemma A.1), generalised to nodes of `capacity` GPUs: the 1-GPU instances
/// can fill every vacancy `w*(g) - g` of the fragmentation-unfriendly anchors,
/// `n_1 >= sum_g (w*(g) - g) n_g` with `w*` the slot width of eq. (3). For
/// `capacity = 8` this is `n1 >= n3 + 3 n5 + 2 n6 + n7`.
pub fn wcc_holds(counts: &InstanceCounts, capacity: u32) -> bool {
    let vacancy: u64 = (2..=capacity.min(8))
        .map(|g| u64::from(crate::model::slot_width(g) - g) * counts[g as usize])
        .sum();
    counts[1] >= vacancy
}

/// `Phi*` (Section 3.2): the minimum number of partial nodes over all packings
/// of the running instances into nodes of `capacity` GPUs, each instance whole
/// inside one node. Exact, not the heuristic of Appendix C:
///
/// - when WCC holds it is `1` if `T mod capacity != 0` else `0` (eq. 21);
/// - otherwise an exact structured search whose cost grows linearly in the
///   counts (hundreds of instances per size answer in microseconds).
///
/// Inputs outside the model (a capacity other than 1, 2, 4, 8, or instances
/// larger than the capacity) never panic: they are answered by a plain
/// exhaustive search in which an instance larger than a node counts as one
/// partial node of its own. That search is exponential, so drivers must
/// validate the cluster first ([`crate::model::ClusterSpec::new`]).
pub fn phi_star(counts: &InstanceCounts, capacity: u32) -> u64 {
    match exact::phi_star(counts, capacity) {
        Some(v) => v,
        None => reference::phi_star(counts, capacity),
    }
}

/// `SIF = (Phi_pi - Phi*) / N` (eq. 2), clamped at 0 (a placement can never
/// beat `Phi*`; the clamp only guards callers that pass stale counts).
pub fn sif(partial: u32, phi_star: u64, nodes: u32) -> f64 {
    (f64::from(partial) - phi_star as f64).max(0.0) / f64::from(nodes)
}

/// Memoised [`phi_star`] for trace replays, which ask after every event.
///
/// The closed form is answered without touching the map. Otherwise the key is
/// the *reduced* residual (after the exact reductions of [`exact`]: full
/// nodes of `G`-GPU instances, pairs of `G/2` instances, `{5,3}` pairs), so
/// states that differ only by such full nodes share one entry. The map is
/// cleared when it exceeds `max_entries` so a long replay cannot grow it
/// without bound.
#[derive(Debug, Clone)]
pub struct PhiStarCache {
    map: HashMap<(u32, InstanceCounts), u64>,
    max_entries: usize,
    hits: u64,
    misses: u64,
    closed_form: u64,
}

impl Default for PhiStarCache {
    fn default() -> Self {
        Self::new()
    }
}

impl PhiStarCache {
    /// A cache of at most one million residual states.
    pub fn new() -> Self {
        Self::with_capacity_limit(1 << 20)
    }

    pub fn with_capacity_limit(max_entries: usize) -> Self {
        Self { map: HashMap::new(), max_entries: max_entries.max(1), hits: 0, misses: 0, closed_form: 0 }
    }

    /// Same value as [`phi_star`].
    pub fn phi_star(&mut self, counts: &InstanceCounts, capacity: u32) -> u64 {
        let Some(reduced) = exact::reduce(counts, capacity) else {
            return reference::phi_star(counts, capacity);
        };
        if let Some(v) = exact::closed_form(&reduced, capacity) {
            self.closed_form += 1;
            return v;
        }
        let key = (capacity, reduced);
        if let Some(&v) = self.map.get(&key) {
            self.hits += 1;
            return v;
        }
        self.misses += 1;
        let v = exact::search(&reduced, capacity);
        if self.map.len() >= self.max_entries {
            self.map.clear();
        }
        self.map.insert(key, v);
        v
    }

    /// Residual states stored.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Searches answered from the map.
    pub fn hits(&self) -> u64 {
        self.hits
    }
    /// Searches computed.
    pub fn misses(&self) -> u64 {
        self.misses
    }
    /// Queries answered by the closed form (eq. 21) without a search.
    pub fn closed_form_answers(&self) -> u64 {
        self.closed_form
    }
}

#[cfg(test)]
mod tests;
