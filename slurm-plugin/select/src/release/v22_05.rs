//! Slurm 22.05 (`src/common/select.h`): 36 `select_p_*` calls; `job_test`
//! ends with `bitstr_t *exc_core_bitmap`.

use std::ffi::{c_char, c_int};

use crate::forward::{Bitmap, JobPtr, P};
use crate::{guard, SLURM_ERROR};

select_ops! {
    struct StockRelease;
    custom fn select_p_job_test(job_ptr: JobPtr, bitmap: Bitmap, min_nodes: u32, max_nodes: u32, req_nodes: u32,
        mode: u16, preemptee_candidates: P, preemptee_job_list: *mut P, exc_core_bitmap: Bitmap) -> c_int = SLURM_ERROR;
    plain fn select_p_job_signal(job_ptr: JobPtr, signal: c_int) -> c_int = SLURM_ERROR;
    plain fn select_p_select_jobinfo_sprint(jobinfo: P, buf: *mut c_char, size: usize, mode: c_int) -> *mut c_char = std::ptr::null_mut();
    plain fn select_p_select_jobinfo_xstrdup(jobinfo: P, mode: c_int) -> *mut c_char = std::ptr::null_mut();
    plain fn select_p_update_node_config(index: c_int) -> c_int = SLURM_ERROR;
    plain fn select_p_resv_test(resv_desc_ptr: P, node_cnt: u32, avail_bitmap: Bitmap, core_bitmap: *mut Bitmap) -> Bitmap = std::ptr::null_mut();
}

/// `select_g_job_test` of 22.05: narrowed by the engine, then cons_tres.
///
/// # Safety
/// Called by Slurm with the arguments of `select_g_job_test`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn select_p_job_test(
    job_ptr: JobPtr,
    bitmap: Bitmap,
    min_nodes: u32,
    max_nodes: u32,
    req_nodes: u32,
    mode: u16,
    preemptee_candidates: P,
    preemptee_job_list: *mut P,
    exc_core_bitmap: Bitmap,
) -> c_int {
    // SAFETY: all pointers from Slurm, forwarded unchanged (the node counts
    // raised for a spread plan, `crate::job::node_counts`).
    let call = |b: Bitmap, spread: Option<u32>| unsafe {
        let (min_nodes, req_nodes) =
            crate::job::node_counts(spread, min_nodes, max_nodes, req_nodes);
        (StockRelease::get().select_p_job_test)(
            job_ptr,
            b,
            min_nodes,
            max_nodes,
            req_nodes,
            mode,
            preemptee_candidates,
            preemptee_job_list,
            exc_core_bitmap,
        )
    };
    crate::job::job_test(job_ptr, bitmap, mode, &call)
}
