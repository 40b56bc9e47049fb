//! Every call into libslurm of the budget service, behind safe wrappers
//! (the only `unsafe` of this crate's Slurm I/O). Public API only
//! (`slurm.h` through `slurm-sys`): `slurm_init`, `slurm_load_jobs`,
//! `slurm_load_node` with `slurm_load_partitions` (node partitions),
//! `slurm_load_ctl_conf` (priority weights, `PreemptType`),
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
    /// Raw `site_factor` (with [`NICE_OFFSET`]).
    pub site_factor: u32,
    pub priority: u32,
    pub num_nodes: u32,
    pub num_tasks: u32,
    pub admin_comment: String,
    pub tres_per_job: String,
    pub tres_per_node: String,
    pub tres_per_task: String,
    pub tres_req_str: String,
    pub tres_alloc_str: String,
    /// Allocated node names, expanded from `nodes` (`n[1-2]` -> n1, n2).
    pub nodes: Vec<String>,
    /// `gres_detail_str[i]`: the GRES of the job on node `i`
    /// (`gpu:4(IDX:0-3)`; filled with SHOW_DETAIL).
    pub gres_detail: Vec<String>,
    /// `state_reason` (`enum job_state_reason`: 0 none, 1 priority,
    /// 3 resources, 8 held, 9 begin time, ...).
    pub state_reason: u32,
    pub eligible_time: i64,
    pub restart_cnt: u32,
    /// `req_nodes`: nodes the job requires (`-w`), empty if none.
    pub req_nodes: String,
    /// `partition`: the partition(s), comma separated (`gpu,debug`).
    pub partition: String,
    /// `features`: the `--constraint` expression, empty if none.
    pub features: String,
    /// `exc_nodes` expanded (`--exclude`).
    pub exc_nodes: Vec<String>,
    pub tres_per_socket: String,
    /// `num_cpus`: CPUs the job asks for (pending) or holds (running).
    pub num_cpus: u32,
    /// `pn_min_cpus`: minimum CPUs per node.
    pub pn_min_cpus: u32,
    /// `pn_min_memory`: MB per node, or per CPU with the `MEM_PER_CPU` bit.
    pub pn_min_memory: u64,
    /// `qos`: the job's QOS name (empty without one).
    pub qos: String,
}

/// `MEM_PER_CPU` of slurm.h: `pn_min_memory` is per CPU when set.
pub const MEM_PER_CPU: u64 = 0x8000_0000_0000_0000;

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
            site_factor: j.site_factor,
            priority: j.priority,
            num_nodes: j.num_nodes,
            num_tasks: j.num_tasks,
            admin_comment: text(j.admin_comment),
            tres_per_job: text(j.tres_per_job),
            tres_per_node: text(j.tres_per_node),
            tres_per_task: text(j.tres_per_task),
            tres_req_str: text(j.tres_req_str),
            tres_alloc_str: text(j.tres_alloc_str),
            nodes: expand_hostlist(&text(j.nodes)),
            gres_detail: if j.gres_detail_str.is_null() {
                Vec::new()
            } else {
                // SAFETY: `gres_detail_cnt` C strings at `gres_detail_str`,
                // owned by the message.
                unsafe { std::slice::from_raw_parts(j.gres_detail_str, j.gres_detail_cnt as usize) }
                    .iter()
                    .map(|p| text(*p))
                    .collect()
            },
            state_reason: sys::job_state_reason(j),
            eligible_time: j.eligible_time,
            restart_cnt: u32::from(j.restart_cnt),
            req_nodes: text(j.req_nodes),
            partition: text(j.partition),
            features: text(j.features),
            exc_nodes: expand_hostlist(&text(j.exc_nodes)),
            tres_per_socket: text(j.tres_per_socket),
            num_cpus: j.num_cpus,
            pn_min_cpus: u32::from(j.pn_min_cpus),
            pn_min_memory: j.pn_min_memory,
            qos: text(j.qos),
        })
        .collect())
}

struct ConfMsg(*mut sys::slurm_conf_t);

impl Drop for ConfMsg {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by slurm_load_ctl_conf, freed exactly once.
            unsafe { sys::slurm_free_ctl_conf(self.0) };
        }
    }
}

/// slurmctld's priority and preemption settings (`slurm_load_ctl_conf`):
/// what compass's order must live beside (issue 12).
pub fn load_priority_conf() -> Result<super::priority::PriorityConf> {
    let _g = call_lock();
    let mut msg = ConfMsg(std::ptr::null_mut());
    // SAFETY: libslurm fills `msg.0` with a message we own (freed by ConfMsg).
    let rc = unsafe { sys::slurm_load_ctl_conf(0, &mut msg.0) };
    if rc != 0 || msg.0.is_null() {
        let (errno, why) = last_error();
        return Err(BudgetError::Slurm(format!(
            "slurm_load_ctl_conf failed: {why} (errno {errno}; is slurmctld up?)"
        )));
    }
    // SAFETY: a valid message, read before it is freed.
    let c = unsafe { &*msg.0 };
    Ok(super::priority::PriorityConf {
        priority_type: text(c.priority_type),
        weight_age: c.priority_weight_age,
        weight_assoc: c.priority_weight_assoc,
        weight_fairshare: c.priority_weight_fs,
        weight_job_size: c.priority_weight_js,
        weight_partition: c.priority_weight_part,
        weight_qos: c.priority_weight_qos,
        weight_tres: text(c.priority_weight_tres),
        flags: c.priority_flags,
        preempt_type: text(c.preempt_type),
        accounting_storage_type: text(c.accounting_storage_type),
    })
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

struct PartMsg(*mut sys::partition_info_msg_t);

impl Drop for PartMsg {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by slurm_load_partitions, freed exactly once.
            unsafe { sys::slurm_free_partition_info_msg(self.0) };
        }
    }
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

// ---- Enforcement (issue 5): nodes, allocations, requeue, cancel, drain ----

/// `NODE_STATE_*` flag bits of slurm.h (`SLURM_BIT(n)` macros, which the
/// bindings do not export).
pub const NODE_STATE_BASE: u32 = 0x0f;
pub const NODE_STATE_DRAIN: u32 = 1 << 9;
pub const NODE_RESUME: u32 = 1 << 8;
pub const NODE_STATE_FAIL: u32 = 1 << 13;

/// One node of `slurm_load_node`, copied out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawNode {
    pub name: String,
    /// Configured `Gres=` (`gpu:8`).
    pub gres: String,
    /// `node_state` with its flag bits.
    pub state: u32,
    pub reason: String,
    /// `partitions`: the partitions containing the node.
    pub partitions: Vec<String>,
    /// Active features (`features_act`, else `features`), comma separated.
    pub features: String,
    pub cpus: u32,
    /// `real_memory` (MB).
    pub real_memory_mb: u64,
    /// Allocated CPUs and memory (MB), from the select plugin's node info
    /// (what `sinfo -o %C,%e` shows).
    pub alloc_cpus: u32,
    pub alloc_mem_mb: u64,
}

/// Expands a Slurm host list expression (`n[1-3],m2`) with libslurm's
/// hostlist functions.
pub fn expand_hostlist(expr: &str) -> Vec<String> {
    if expr.is_empty() {
        return Vec::new();
    }
    let Ok(c) = CString::new(expr) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // SAFETY: hostlist_create copies the string; every shifted name is a
    // malloc'd C string we free; the list is destroyed once.
    unsafe {
        let hl = sys::slurm_hostlist_create(c.as_ptr());
        if hl.is_null() {
            return out;
        }
        loop {
            let p = sys::slurm_hostlist_shift(hl);
            if p.is_null() {
                break;
            }
            out.push(text(p));
            libc::free(p.cast());
        }
        sys::slurm_hostlist_destroy(hl);
    }
    out
}

/// Partition name -> `PriorityTier`.
pub type PartitionTiers = Vec<(String, u16)>;

/// Every node (`slurm_load_node(0, .., SHOW_ALL)`), copied out, and every
/// partition's `PriorityTier` (`slurm_load_partitions`), by name.
pub fn load_nodes() -> Result<(Vec<RawNode>, PartitionTiers)> {
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
    // A node's `partitions` is not sent by slurmctld: it is filled from the
    // partition table, as scontrol does (slurm_populate_node_partitions).
    let mut parts = PartMsg(std::ptr::null_mut());
    // SAFETY: libslurm fills `parts.0` with a message we own (freed by PartMsg).
    let rc = unsafe { sys::slurm_load_partitions(0, &mut parts.0, sys::SHOW_ALL as u16) };
    if rc != 0 || parts.0.is_null() {
        let (errno, why) = last_error();
        return Err(BudgetError::Slurm(format!(
            "slurm_load_partitions failed: {why} (errno {errno}; is slurmctld up?)"
        )));
    }
    // SAFETY: both messages are valid and owned here; the strings it sets
    // on each node are freed with the node message.
    unsafe { sys::slurm_populate_node_partitions(msg.0, parts.0) };
    // SAFETY: a valid message: `record_count` records at `partition_array`.
    let pm = unsafe { &*parts.0 };
    let part_records: &[sys::partition_info_t] =
        if pm.partition_array.is_null() || pm.record_count == 0 {
            &[]
        } else {
            // SAFETY: as above; the slice does not outlive `parts`.
            unsafe { std::slice::from_raw_parts(pm.partition_array, pm.record_count as usize) }
        };
    let tiers: Vec<(String, u16)> = part_records
        .iter()
        .filter(|p| !p.name.is_null())
        .map(|p| (text(p.name), p.priority_tier))
        .collect();
    // SAFETY: a valid message: `record_count` records at `node_array`.
    let m = unsafe { &*msg.0 };
    let records: &[sys::node_info_t] = if m.node_array.is_null() || m.record_count == 0 {
        &[]
    } else {
        // SAFETY: as above; the slice does not outlive `msg`.
        unsafe { std::slice::from_raw_parts(m.node_array, m.record_count as usize) }
    };
    let nodes = records
        .iter()
        .filter(|n| !n.name.is_null())
        .map(|n| {
            let (alloc_cpus, alloc_mem_mb) = node_alloc(n);
            let active = text(n.features_act);
            RawNode {
                name: text(n.name),
                gres: text(n.gres),
                state: n.node_state,
                reason: text(n.reason),
                partitions: text(n.partitions)
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
                features: if active.is_empty() {
                    text(n.features)
                } else {
                    active
                },
                cpus: u32::from(n.cpus),
                real_memory_mb: n.real_memory,
                alloc_cpus,
                alloc_mem_mb,
            }
        })
        .collect();
    Ok((nodes, tiers))
}

/// Allocated CPUs and memory of a node, as sinfo reads them
/// (`SELECT_NODEDATA_SUBCNT` for `NODE_STATE_ALLOCATED`, and
/// `SELECT_NODEDATA_MEM_ALLOC`); 0 when the select plugin does not say.
fn node_alloc(n: &sys::node_info_t) -> (u32, u64) {
    if n.select_nodeinfo.is_null() {
        return (0, 0);
    }
    let mut cpus: u16 = 0;
    let mut mem: u64 = 0;
    // SAFETY: `select_nodeinfo` belongs to the node message, alive during
    // this call (the caller holds the call lock); the data pointers have
    // the types slurm.h documents for these two queries (uint16_t and
    // uint64_t, as sinfo uses them).
    unsafe {
        if sys::slurm_get_select_nodeinfo(
            n.select_nodeinfo,
            sys::select_nodedata_type_SELECT_NODEDATA_SUBCNT,
            sys::node_states_NODE_STATE_ALLOCATED,
            (&mut cpus as *mut u16).cast(),
        ) != 0
        {
            cpus = 0;
        }
        if sys::slurm_get_select_nodeinfo(
            n.select_nodeinfo,
            sys::select_nodedata_type_SELECT_NODEDATA_MEM_ALLOC,
            sys::node_states_NODE_STATE_ALLOCATED,
            (&mut mem as *mut u64).cast(),
        ) != 0
        {
            mem = 0;
        }
    }
    (u32::from(cpus), mem)
}

fn update_error(what: String) -> UpdateError {
    let (errno, why) = last_error();
    if errno == sys::slurm_err_t_ESLURM_INVALID_JOB_ID as i32
        || errno == sys::slurm_err_t_ESLURM_ALREADY_DONE as i32
    {
        UpdateError::Gone
    } else {
        UpdateError::Other(format!("{what}: {why} (errno {errno})"))
    }
}

/// Requeues a running job (`slurm_requeue(id, 0)`, as `scontrol requeue`).
pub fn requeue(job_id: u32) -> std::result::Result<(), UpdateError> {
    let _g = call_lock();
    // SAFETY: plain RPC with scalar arguments.
    let rc = unsafe { sys::slurm_requeue(job_id, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(update_error(format!("slurm_requeue {job_id}")))
    }
}

/// Sets a pending job's begin time (`slurm_update_job` with `begin_time`,
/// as `scontrol update JobId=J StartTime=now`): a requeued job otherwise
/// waits `cred_expire + 1` s (121 s by default).
pub fn set_begin_time(job_id: u32, at: i64) -> std::result::Result<(), UpdateError> {
    let _g = call_lock();
    let mut desc = sys::job_desc_msg_t::default();
    // SAFETY: initialises a stack descriptor; slurm_update_job only reads it.
    let rc = unsafe {
        sys::slurm_init_job_desc_msg(&mut desc);
        desc.job_id = job_id;
        desc.begin_time = at;
        sys::slurm_update_job(&mut desc)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(update_error(format!(
            "slurm_update_job {job_id} begin_time"
        )))
    }
}

/// Sets a job's admin comment (`scontrol update JobId=J AdminComment=...`).
pub fn set_admin_comment(job_id: u32, comment: &str) -> std::result::Result<(), UpdateError> {
    let c =
        CString::new(comment.replace('\0', " ")).map_err(|e| UpdateError::Other(e.to_string()))?;
    let _g = call_lock();
    let mut desc = sys::job_desc_msg_t::default();
    // SAFETY: as in set_begin_time; `c` outlives the call, which only reads it.
    let rc = unsafe {
        sys::slurm_init_job_desc_msg(&mut desc);
        desc.job_id = job_id;
        desc.admin_comment = c.as_ptr().cast_mut();
        sys::slurm_update_job(&mut desc)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(update_error(format!(
            "slurm_update_job {job_id} admin_comment"
        )))
    }
}

/// Cancels a job (`slurm_kill_job(id, SIGKILL, 0)`, as `scancel`).
pub fn kill_job(job_id: u32) -> std::result::Result<(), UpdateError> {
    let _g = call_lock();
    // SAFETY: plain RPC with scalar arguments.
    let rc = unsafe { sys::slurm_kill_job(job_id, libc::SIGKILL as u16, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(update_error(format!("slurm_kill_job {job_id}")))
    }
}

/// Drains (`drain = true`, with `reason`) or resumes a node
/// (`slurm_update_node`, as `scontrol update NodeName=N State=DRAIN|RESUME`).
pub fn update_node(node: &str, drain: bool, reason: &str) -> Result<()> {
    let name =
        CString::new(node).map_err(|_| BudgetError::field("node", "node name contains NUL"))?;
    let why = CString::new(reason.replace('\0', " "))
        .map_err(|_| BudgetError::field("reason", "reason contains NUL"))?;
    let _g = call_lock();
    let mut msg = sys::update_node_msg_t::default();
    // SAFETY: initialises a stack message; the strings outlive the call,
    // which only reads them.
    let rc = unsafe {
        sys::slurm_init_update_node_msg(&mut msg);
        msg.node_names = name.as_ptr().cast_mut();
        if drain {
            msg.node_state = NODE_STATE_DRAIN;
            msg.reason = why.as_ptr().cast_mut();
            msg.reason_uid = libc::getuid();
        } else {
            msg.node_state = NODE_RESUME;
        }
        sys::slurm_update_node(&mut msg)
    };
    if rc == 0 {
        return Ok(());
    }
    let (errno, text) = last_error();
    if errno == sys::slurm_err_t_ESLURM_INVALID_NODE_NAME as i32 {
        return Err(BudgetError::NotFound(format!("Slurm has no node `{node}`")));
    }
    Err(BudgetError::Slurm(format!(
        "slurm_update_node {node} {}: {text} (errno {errno})",
        if drain { "DRAIN" } else { "RESUME" }
    )))
}
