//! Slurm 22.05: the reference; the bindings already have every name.

#[cfg(feature = "internal")]
use std::ffi::{c_char, c_int};

/// `node_name2bitmap(names, best_effort, bitmap)`: the node names to a new
/// bitmap (invalid names ignored when `best_effort`).
///
/// # Safety
/// In slurmctld, under its node read lock; `names` a C string.
#[cfg(feature = "internal")]
pub unsafe fn node_names_to_bitmap(
    names: *mut c_char,
    best_effort: bool,
    bitmap: *mut *mut crate::bitstr_t,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { crate::node_name2bitmap(names, best_effort, bitmap) }
}

/// `state_reason` of a job record (`enum job_state_reason`), widened to the
/// `u32` that 24.11 stores (22.05: `uint16_t`).
pub fn job_state_reason(job: &crate::slurm_job_info_t) -> u32 {
    u32::from(job.state_reason)
}
