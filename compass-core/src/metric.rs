//! Fragmentation metrics (paper Section 3.2, Appendix C).
//!
//! Interim closed form only; the exact `Phi*` lands with the metric work.

/// Running instances by GPUs per instance: `counts[g]` for `g` in `1..=8`
/// (index 0 unused).
pub type InstanceCounts = [u64; 9];

/// Workload Composition Condition, paper eq. (9), in its slot-vacancy form
/// (Lemma A.1): the 1-GPU instances can fill every vacancy `w*(g) - g` of the
/// fragmentation-unfriendly anchors on nodes of `capacity` GPUs.
pub fn wcc_holds(counts: &InstanceCounts, capacity: u32) -> bool {
    let vacancy: u64 = (2..=capacity.min(8))
        .map(|g| u64::from(crate::model::slot_width(g) - g) * counts[g as usize])
        .sum();
    counts[1] >= vacancy
}

/// `Phi*`: the fewest partial nodes over all packings of the running
/// instances (Section 3.2). Interim: closed form of eq. (21).
pub fn phi_star(counts: &InstanceCounts, capacity: u32) -> u64 {
    let total: u64 = (1..=8).map(|g| g as u64 * counts[g]).sum();
    u64::from(!total.is_multiple_of(u64::from(capacity)))
}

/// `SIF = (Phi_pi - Phi*) / N` (eq. 2).
pub fn sif(partial: u32, phi_star: u64, nodes: u32) -> f64 {
    (f64::from(partial) - phi_star as f64).max(0.0) / f64::from(nodes)
}
