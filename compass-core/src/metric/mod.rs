//! Fragmentation metrics (paper Section 3.2, Appendix C).
//!
//! - `Phi_pi`: the number of partial nodes of a placement (non-empty, not
//!   full), kept incrementally by [`crate::placement::Occupancy`].
//! - `Phi*` ([`phi_star`]): the fewest partial nodes over **all** feasible
//!   packings of the running instances. Appendix C of the paper computes it
//!   with a heuristic; ours is exact: the closed form of eq. (21) when the
//!   Workload Composition Condition holds, and otherwise an exact structured
//!   search over the residual (see `exact` and `docs/metric.md` for the
//!   proofs).
//! - `SIF = (Phi_pi - Phi*) / N` ([`sif`], eq. 2).
//!
//! [`PhiStarCache`] memoises the search for replays that ask after every event.

mod exact;
mod reference;

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
/// The closed form (eq. 21) is answered without a lookup. Otherwise the key
/// is the *reduced* residual (after the exact reductions R1-R3 of `exact`:
/// full nodes of `G`-GPU instances, pairs of `G/2` instances, `{5,3}` pairs),
/// so states that differ only by such full nodes share one entry. The memo is
/// a fixed-size direct-mapped table (a slot per hash, the newest state wins):
/// constant memory, no allocation after construction, and a lookup cheaper
/// than the search it saves even when most states never recur.
#[derive(Debug, Clone)]
pub struct PhiStarCache {
    slots: Vec<Option<(u32, InstanceCounts, u64)>>,
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
    /// A table of 4,096 slots.
    pub fn new() -> Self {
        Self::with_slots(1 << 12)
    }

    /// A table of `slots` slots, rounded up to a power of two (at least 1).
    pub fn with_slots(slots: usize) -> Self {
        Self {
            slots: vec![None; slots.max(1).next_power_of_two()],
            hits: 0,
            misses: 0,
            closed_form: 0,
        }
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
        let slot = (slot_hash(capacity, &reduced) as usize) & (self.slots.len() - 1);
        if let Some((cap, key, v)) = &self.slots[slot] {
            if *cap == capacity && *key == reduced {
                self.hits += 1;
                return *v;
            }
        }
        self.misses += 1;
        let v = exact::search(&reduced, capacity);
        self.slots[slot] = Some((capacity, reduced, v));
        v
    }

    /// Residual states currently stored.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }
    /// Searches answered from the table.
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

/// Multiply-rotate over the counts, then the splitmix64 finaliser so every
/// slot bit depends on every count.
fn slot_hash(capacity: u32, counts: &InstanceCounts) -> u64 {
    let mut h = u64::from(capacity);
    for &c in counts {
        h = (h.rotate_left(5) ^ c).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests;
