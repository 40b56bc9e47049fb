//! Slurm 24.11 against 22.05, for what compass uses:
//! - `List` is gone (23.02: `list_t *`).
//! - `bit_test` is a macro for the exported `slurm_bit_test`.
//! - `node_name2bitmap` takes a fourth argument, `hostlist_t
//!   **invalid_hostlist` (may be NULL).
//! - `SHOW_*` are `SLURM_BIT(n)` macros, which bindgen cannot evaluate.
//! - `slurm_get_errno()` is gone from libslurm: Slurm sets `errno` itself.
//! - `slurm_job_info_t.state_reason` is `uint32_t` (was `uint16_t`).

#[cfg(feature = "internal")]
use std::ffi::{c_char, c_int};

/// 22.05's `List` (a pointer to the opaque list).
#[cfg(feature = "internal")]
pub type List = *mut crate::list_t;

#[cfg(feature = "internal")]
pub use crate::slurm_bit_test as bit_test;

/// `SHOW_ALL` of slurm.h (`SLURM_BIT(0)`).
pub const SHOW_ALL: u32 = 1 << 0;
/// `SHOW_DETAIL` of slurm.h (`SLURM_BIT(1)`).
pub const SHOW_DETAIL: u32 = 1 << 1;

/// `node_name2bitmap(names, best_effort, bitmap, NULL)`: the node names to a
/// new bitmap (invalid names ignored when `best_effort`).
///
/// # Safety
/// In slurmctld, under its node read lock; `names` a C string.
#[cfg(feature = "internal")]
pub unsafe fn node_names_to_bitmap(
    names: *mut c_char,
    best_effort: bool,
    bitmap: *mut *mut crate::bitstr_t,
) -> c_int {
    // SAFETY: forwarded contract; NULL: no list of invalid names wanted.
    unsafe { crate::node_name2bitmap(names, best_effort, bitmap, std::ptr::null_mut()) }
}

/// 22.05's `slurm_get_errno()`: the calling thread's `errno`, where 24.11's
/// libslurm leaves its error code.
///
/// # Safety
/// None (unsafe only to match the 22.05 binding at call sites).
pub unsafe fn slurm_get_errno() -> std::ffi::c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `state_reason` of a job record (`enum job_state_reason`; `uint32_t`
/// since 23.02, `uint16_t` in 22.05).
pub fn job_state_reason(job: &crate::slurm_job_info_t) -> u32 {
    job.state_reason
}
