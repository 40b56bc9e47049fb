//! Every call into libslurm of the budget service, behind safe wrappers
//! (the only `unsafe` of this crate's Slurm I/O). Public API only
//! (`slurm.h` through `slurm-sys`): `slurm_init`, `slurm_load_jobs`,
//! `slurm_update_job`. Everything libslurm allocates is copied into owned
//! Rust values and freed before returning; errors become
//! [`BudgetError::Slurm`] with libslurm's own message.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use slurm_sys as sys;

use crate::error::{BudgetError, Result};

// The service is a standalone program: it links libslurm itself (the
// `slurm-sys` crate never does, plugins get the symbols from slurmctld).
#[link(name = "slurm")]
extern "C" {}

/// Slurm stores nice and site factor values shifted by this offset
/// (`NICE_OFFSET` in slurm.h; not exported by the bindings' allowlist).
pub const NICE_OFFSET: u32 = 0x8000_0000;

/// One job of `slurm_load_jobs`, copied out of libslurm's message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawJob {
    pub job_id: u32,
    /// `job_state & JOB_STATE_BASE` (`enum job_states`: 0 pending, 1 running,
    /// 2 suspended, 3.. ended).
    pub state: u32,
    pub account: String,
    pub user_id: u32,
    pub user_name: String,
    pub submit_time: i64,
    pub start_time: i64,
    pub end_time: i64,
    /// Raw `nice` (with [`NICE_OFFSET`]).
    pub nice: u32,
    pub priority: u32,
    pub num_nodes: u32,
    pub num_tasks: u32,
    pub admin_comment: String,
    pub tres_per_job: String,
    pub tres_per_node: String,
    pub tres_per_task: String,
    pub tres_req_str: String,
    pub tres_alloc_str: String,
}

/// libslurm keeps one global configuration per process: the first
/// successful [`init`] fixes it. `None` inside: `SLURM_CONF` or the default.
static INIT: OnceLock<Option<PathBuf>> = OnceLock::new();
/// libslurm's API calls are not all thread-safe; one call at a time.
static CALL: Mutex<()> = Mutex::new(());

fn call_lock() -> std::sync::MutexGuard<'static, ()> {
    CALL.lock().unwrap_or_else(|e| e.into_inner())
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: a non-null NUL-terminated string owned by a libslurm
        // message that outlives this call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// libslurm's message for its last error of this thread.
fn last_error() -> (i32, String) {
    // SAFETY: plain getters; slurm_strerror returns a static string.
    unsafe {
        let errno = sys::slurm_get_errno();
        (errno, text(sys::slurm_strerror(errno)))
    }
}

/// The slurm.conf libslurm will read: `conf`, else `$SLURM_CONF`, else the
/// Debian default.
pub fn conf_path(conf: Option<&Path>) -> PathBuf {
    conf.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"))
}

/// Loads the Slurm configuration once per process (`slurm_init`). Refuses
/// a missing file and a second, different configuration. libslurm itself
/// ends the process (`fatal`) on a file it cannot parse, as Slurm's own
/// commands do, and on a missing one it would try DNS SRV look-ups first:
/// hence the check here. It also calls setenv(3), so call it before other
/// threads start (the daemon does, in `server::run`).
pub fn init(conf: Option<&Path>) -> Result<()> {
    if let Some(done) = INIT.get() {
        return if done.as_deref() == conf {
            Ok(())
        } else {
            Err(BudgetError::Slurm(format!(
                "libslurm is already initialised with {} in this process; cannot switch to {}",
                conf_path(done.as_deref()).display(),
                conf_path(conf).display()
            )))
        };
    }
    let path = conf_path(conf);
    if let Err(e) = std::fs::File::open(&path) {
        return Err(BudgetError::Slurm(format!(
            "slurm.conf {}: {e} (set slurm_conf in the config or SLURM_CONF)",
            path.display()
        )));
    }
    let _g = call_lock();
    if INIT.get().is_some() {
        drop(_g);
        return init(conf);
    }
    let c = match conf {
        Some(p) => Some(CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| {
            BudgetError::Slurm(format!("slurm.conf path {} contains NUL", p.display()))
        })?),
        None => None,
    };
    // SAFETY: slurm_init reads the file named by a valid C string (or, for
    // NULL, SLURM_CONF / the default); called once per process.
    unsafe { sys::slurm_init(c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())) };
    let _ = INIT.set(conf.map(Path::to_path_buf));
    Ok(())
}

/// Owns a `job_info_msg_t` and frees it on drop.
struct JobMsg(*mut sys::job_info_msg_t);

impl Drop for JobMsg {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by slurm_load_jobs, freed exactly once.
            unsafe { sys::slurm_free_job_info_msg(self.0) };
        }
    }
}

/// Every job slurmctld reports (`slurm_load_jobs(0, .., SHOW_ALL |
/// SHOW_DETAIL)`), copied out.
pub fn load_jobs() -> Result<Vec<RawJob>> {
    let _g = call_lock();
    let mut msg = JobMsg(std::ptr::null_mut());
    // SAFETY: libslurm fills `msg.0` with a message we own (freed by JobMsg).
    let rc =
        unsafe { sys::slurm_load_jobs(0, &mut msg.0, (sys::SHOW_ALL | sys::SHOW_DETAIL) as u16) };
    if rc != 0 || msg.0.is_null() {
        let (errno, why) = last_error();
        return Err(BudgetError::Slurm(format!(
            "slurm_load_jobs failed: {why} (errno {errno}; is slurmctld up?)"
        )));
    }
    // SAFETY: a valid message: `record_count` records at `job_array`.
    let m = unsafe { &*msg.0 };
    let records: &[sys::slurm_job_info_t] = if m.job_array.is_null() || m.record_count == 0 {
        &[]
    } else {
        // SAFETY: as above; the slice does not outlive `msg`.
        unsafe { std::slice::from_raw_parts(m.job_array, m.record_count as usize) }
    };
    Ok(records
        .iter()
        .map(|j| RawJob {
            job_id: j.job_id,
            state: j.job_state & sys::JOB_STATE_BASE,
            account: text(j.account),
            user_id: j.user_id,
            user_name: text(j.user_name),
            submit_time: j.submit_time,
            start_time: j.start_time,
            end_time: j.end_time,
            nice: j.nice,
            priority: j.priority,
            num_nodes: j.num_nodes,
            num_tasks: j.num_tasks,
            admin_comment: text(j.admin_comment),
            tres_per_job: text(j.tres_per_job),
            tres_per_node: text(j.tres_per_node),
            tres_per_task: text(j.tres_per_task),
            tres_req_str: text(j.tres_req_str),
            tres_alloc_str: text(j.tres_alloc_str),
        })
        .collect())
}

struct NodeMsg(*mut sys::node_info_msg_t);

impl Drop for NodeMsg {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by slurm_load_node, freed exactly once.
            unsafe { sys::slurm_free_node_info_msg(self.0) };
        }
    }
}

/// The configured `Gres=` string of every node (`slurm_load_node(0, ..,
/// SHOW_ALL)`), copied out.
pub fn load_node_gres() -> Result<Vec<String>> {
    let _g = call_lock();
    let mut msg = NodeMsg(std::ptr::null_mut());
    // SAFETY: libslurm fills `msg.0` with a message we own (freed by NodeMsg).
    let rc = unsafe { sys::slurm_load_node(0, &mut msg.0, sys::SHOW_ALL as u16) };
    if rc != 0 || msg.0.is_null() {
        let (errno, why) = last_error();
        return Err(BudgetError::Slurm(format!(
            "slurm_load_node failed: {why} (errno {errno}; is slurmctld up?)"
        )));
    }
    // SAFETY: a valid message: `record_count` records at `node_array`.
    let m = unsafe { &*msg.0 };
    let records: &[sys::node_info_t] = if m.node_array.is_null() || m.record_count == 0 {
        &[]
    } else {
        // SAFETY: as above; the slice does not outlive `msg`.
        unsafe { std::slice::from_raw_parts(m.node_array, m.record_count as usize) }
    };
    Ok(records.iter().map(|n| text(n.gres)).collect())
}

/// Why one `slurm_update_job` failed.
#[derive(Debug)]
pub enum UpdateError {
    /// The job is gone or already finished (nothing to order any more).
    Gone,
    Other(String),
}

/// Sets one job's site factor (`slurm_update_job` with `site_factor`; the
/// wire value carries [`NICE_OFFSET`], as `scontrol update SiteFactor=`
/// sends it). Needs an operator or admin (SlurmUser, root).
pub fn set_site_factor(job_id: u32, factor: u32) -> std::result::Result<(), UpdateError> {
    let _g = call_lock();
    let mut desc = sys::job_desc_msg_t::default();
    // SAFETY: initialises a stack descriptor; slurm_update_job only reads it.
    let rc = unsafe {
        sys::slurm_init_job_desc_msg(&mut desc);
        desc.job_id = job_id;
        desc.site_factor = NICE_OFFSET.saturating_add(factor);
        sys::slurm_update_job(&mut desc)
    };
    if rc == 0 {
        return Ok(());
    }
    let (errno, why) = last_error();
    if errno == sys::slurm_err_t_ESLURM_INVALID_JOB_ID as i32
        || errno == sys::slurm_err_t_ESLURM_ALREADY_DONE as i32
    {
        Err(UpdateError::Gone)
    } else {
        Err(UpdateError::Other(format!(
            "slurm_update_job {job_id} site_factor={factor}: {why} (errno {errno})"
        )))
    }
}
