//! Slurm 24.11 (`src/interfaces/select.h`, ops in `select.c`): 31
//! `select_p_*` calls. Against 22.05: `job_test` ends with
//! `resv_exc_t *resv_exc_ptr, will_run_data_t *will_run_ptr` instead of
//! `bitstr_t *exc_core_bitmap`; `job_signal`, `select_jobinfo_sprint`,
//! `select_jobinfo_xstrdup`, `update_node_config` and `resv_test` are gone.

use std::ffi::c_int;

use crate::forward::{Bitmap, JobPtr, P};

select_ops! {
    struct StockRelease;
    custom fn select_p_job_test(job_ptr: JobPtr, bitmap: Bitmap, min_nodes: u32, max_nodes: u32, req_nodes: u32,
        mode: u16, preemptee_candidates: P, preemptee_job_list: *mut P, resv_exc_ptr: P, will_run_ptr: P) -> c_int = crate::SLURM_ERROR;
}

/// `select_g_job_test` of 24.11: narrowed by the engine, then cons_tres.
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
    resv_exc_ptr: P,
    will_run_ptr: P,
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
            resv_exc_ptr,
            will_run_ptr,
        )
    };
    crate::job::job_test(job_ptr, bitmap, mode, &call)
}
