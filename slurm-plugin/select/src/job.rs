//! The entry points that do more than forward: `select_p_job_init`,
//! `select_p_job_test`, `select_p_job_begin`, `select_p_job_fini`; and the
//! readers of `job_record_t` / `node_record_t` (layout from the bindgen
//! bindings of the same Slurm release).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use compass_core::model::{NodeId, NodeSet};
use compass_core::placement::pools::{partition_groups, NodeGpus};
use compass_slurm::controller::{Controller, Hold, JobInfo, KeepNodes};
use compass_slurm::flags;
use compass_slurm::persist::{Saved, FILE_NAME};
use compass_slurm::restriction::{allowed_nodes as allowed_nodes_among, Constraint, JobPlaces};
use compass_slurm::shape::{map_request, node_gpus, requested_gpu_type, SlurmRequest};
use slurm_sys as sys;

use crate::forward::stock;
use crate::{guard, in_slurmctld, log, now_unix, worker, PLUGIN, SLURM_ERROR, SLURM_SUCCESS};

const JOB_STATE_BASE: u32 = 0xff;
const JOB_RUNNING: u32 = 1;
const JOB_SUSPENDED: u32 = 2;
/// `select_p_job_test` modes (src/common/select.h): the low byte is the
/// mode, the high byte flags. RUN_NOW (0): allocate now; TEST_ONLY (1): could
/// the job ever run on these nodes (asked at submit time and when a job cannot
/// start at once); WILL_RUN (2) and RESV (4): when and where could it run.
const SELECT_MODE_BASE: u16 = 0x00ff;
const SELECT_MODE_TEST_ONLY: u16 = 0x0001;

/// How `select_p_job_test` treats the engine's plan in a given mode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum ModeRule {
    /// Allocate now: narrow to the plan (widen only when the plan may).
    RunNow,
    /// "Could it ever run?": never narrowed. The plan is about where the job
    /// goes now; narrowing this test to it declared valid jobs unrunnable at
    /// submit ("Requested node configuration is not available", found by
    /// Slurm's own test39.15 under `contrib/slurm-testsuite.sh`).
    TestOnly,
    /// When and where could it run (backfill, reservations): the plan first,
    /// then Slurm's own candidates, so the plan never makes a job unrunnable.
    Plan,
}

/// The stock `select_p_job_test` with Slurm's other arguments, given the
/// candidate bitmap and, for a plan spread over `k` nodes
/// ([`Controller::plan_spread`]), `Some(k)` ([`node_counts`]).
pub(crate) type Call<'a> = dyn Fn(*mut sys::bitstr_t, Option<u32>) -> c_int + 'a;

/// The engine's plan for one `select_p_job_test`.
struct Narrowed {
    /// The planned nodes among Slurm's candidates.
    nodes: NodeSet,
    /// May the test go on to Slurm's own candidates when cons_tres refuses
    /// the plan ([`Controller::may_widen`])?
    may_widen: bool,
    /// Nodes the plan spreads over that cons_tres must use
    /// ([`Controller::plan_spread`]).
    spread: Option<u32>,
}

/// cons_tres's `(min_nodes, req_nodes)` for a test on a plan spread over
/// `spread` nodes: both raised to it when it is more than Slurm asked for
/// and within the job's `max_nodes` (0 is no limit), so that cons_tres
/// uses every planned node (with exactly those nodes as candidates, one
/// instance or more on each) instead of packing the instances on the
/// fewest; otherwise Slurm's own counts.
pub(crate) fn node_counts(spread: Option<u32>, min: u32, max: u32, req: u32) -> (u32, u32) {
    match spread {
        Some(k) if k > min && (max == 0 || k <= max) => (k, k),
        _ => (min, req),
    }
}

/// What a test of a pending job the engine does not place keeps for it
/// while it waits ([`Controller::keep_for_waiting`]).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Keep {
    Nothing,
    /// The nodes it names with `-w`: it needs each of them.
    Named(Vec<NodeId>),
    /// A `--exclusive` job that may use only part of the GPU nodes
    /// ([`restricted`]): the nodes Slurm plans to start it on, read after a
    /// successful "when and where" test (backfill's).
    Planned,
}

/// `WHOLE_NODE_REQUIRED` of `job_details.whole_node` (slurmctld.h in 22.05,
/// job_record.h in 24.11): `--exclusive`.
const WHOLE_NODE_REQUIRED: u8 = 0x01;

/// The nodes to keep for a waiting job after its test ended with `ok` in a
/// mode of `rule`: the nodes it names after every test that does not start
/// it; for [`Keep::Planned`], `planned()` (what cons_tres left in the
/// bitmap) after a successful "when and where" test. `None`: nothing new
/// (what is kept for it stays while it is tested again,
/// [`Controller::still_waiting`]).
fn kept_nodes(
    keep: Keep,
    rule: ModeRule,
    ok: bool,
    planned: impl FnOnce() -> Vec<NodeId>,
) -> Option<(Vec<NodeId>, KeepNodes)> {
    match keep {
        Keep::Nothing => None,
        _ if rule == ModeRule::RunNow && ok => None,
        Keep::Named(nodes) => Some((nodes, KeepNodes::Named)),
        Keep::Planned if rule == ModeRule::Plan && ok => Some((planned(), KeepNodes::Planned)),
        Keep::Planned => None,
    }
}

/// What to keep for `job`, a pending job the engine does not place, tested
/// in a mode of `rule`: the nodes it names (`required`: `-w`), or for a
/// `--exclusive` job that may use only part of the GPU nodes, in a "when
/// and where" test, the nodes Slurm plans for it. A `--exclusive` job that
/// may use any GPU node is not kept for: a move that fills one node
/// empties or frees another it may take.
///
/// # Safety
/// `job` is a live job record (its `details` and `part_ptr` NULL or
/// valid).
unsafe fn keep_of(
    job: &sys::job_record_t,
    required: bool,
    rule: ModeRule,
    ctl: &Controller,
) -> Keep {
    // SAFETY: NULL or valid details; its bitmap is set when `required`.
    let Some(d) = (unsafe { job.details.as_ref() }) else {
        return Keep::Nothing;
    };
    if required {
        return Keep::Named(unsafe { bits(d.req_node_bitmap) });
    }
    if rule != ModeRule::Plan || d.whole_node & WHOLE_NODE_REQUIRED == 0 {
        return Keep::Nothing;
    }
    if unsafe { restricted(job, ctl) } {
        Keep::Planned
    } else {
        Keep::Nothing
    }
}

/// May the job use some of the GPU nodes but not all? Its partition holds
/// some GPU node (a CPU-only partition: Compact never moves a job onto its
/// nodes), and it names a `--constraint` or an `--exclude` (whatever they
/// name: read as restricting) or the partition lacks some GPU node.
///
/// # Safety
/// As [`keep_of`].
unsafe fn restricted(job: &sys::job_record_t, ctl: &Controller) -> bool {
    // SAFETY: NULL or NUL-terminated strings.
    let given = |p: *mut c_char| !p.is_null() && unsafe { *p } != 0;
    let narrowed_by_job =
        unsafe { job.details.as_ref() }.is_some_and(|d| given(d.features) || given(d.exc_nodes));
    // SAFETY: NULL or a valid partition record and bitmap.
    let Some(part) = (unsafe { job.part_ptr.as_ref() }).filter(|p| !p.node_bitmap.is_null()) else {
        return narrowed_by_job;
    };
    let part = unsafe { members(part.node_bitmap) };
    let gpu = ctl.gpu_node_set();
    let inside = gpu.intersects(&part);
    inside && (narrowed_by_job || !gpu.is_subset(&part))
}

fn mode_rule(mode: u16) -> ModeRule {
    if mode & SELECT_MODE_TEST_ONLY != 0 {
        ModeRule::TestOnly
    } else if mode & SELECT_MODE_BASE == 0 {
        ModeRule::RunNow
    } else {
        ModeRule::Plan
    }
}
/// `gres_build_id("gpu")` (src/common/gres.c): the `plugin_id` of GPU GRES.
const GPU_PLUGIN_ID: u32 = b'g' as u32 + ((b'p' as u32) << 8) + ((b'u' as u32) << 16);

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        // SAFETY: caller contract.
        unsafe { CStr::from_ptr(p) }.to_str().ok()
    }
}

/// A C string as text, bytes that are not UTF-8 replaced by U+FFFD (which
/// no `--constraint` reading accepts); `None` for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn lossy_str(p: *const c_char) -> Option<String> {
    // SAFETY: caller contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `last_part_update` when [`cluster`] last read the partitions: after it
/// moved, the next `select_p_job_test` checks whether the partition groups
/// changed ([`follow_partition_changes`]).
static PARTS_SEEN: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(i64::MIN);

/// The address of a global of slurmctld's own (`part_list`, `job_list`,
/// `last_part_update`), looked up in the running process once and kept in
/// `cell` (`select_p_job_test` asks at every call): slurmd loads this
/// plugin too and has none of them, so linking them would fail its
/// `dlopen` ("undefined symbol"). `None` outside slurmctld.
fn ctld_global(cell: &'static OnceLock<usize>, name: &CStr) -> Option<*mut c_void> {
    // An address as an integer: a raw pointer is not Sync.
    let at = *cell.get_or_init(|| {
        // SAFETY: a NUL-terminated symbol name; RTLD_DEFAULT searches the
        // process's global symbols.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
    });
    (at != 0).then_some(at as *mut c_void)
}

static PART_LIST: OnceLock<usize> = OnceLock::new();
static JOB_LIST: OnceLock<usize> = OnceLock::new();
static LAST_PART_UPDATE: OnceLock<usize> = OnceLock::new();

/// slurmctld's `last_part_update` (0 outside slurmctld).
///
/// # Safety
/// Read where slurmctld holds its partition lock.
unsafe fn last_part_update() -> i64 {
    match ctld_global(&LAST_PART_UPDATE, c"last_part_update") {
        // SAFETY: slurmctld's `time_t last_part_update` (64 bits on every
        // target the plugin builds for).
        Some(p) => unsafe { *(p as *const i64) },
        None => 0,
    }
}

/// Each partition's name and nodes, from slurmctld's partition list.
///
/// # Safety
/// Under slurmctld's partition lock (read), or where nothing changes the
/// list (its configuration write lock in `read_slurm_conf`).
unsafe fn partitions() -> Vec<(String, Vec<NodeId>)> {
    // SAFETY: slurmctld globals, caller contract.
    PARTS_SEEN.store(
        unsafe { last_part_update() },
        std::sync::atomic::Ordering::Relaxed,
    );
    let Some(at) = ctld_global(&PART_LIST, c"part_list") else {
        return Vec::new();
    };
    // SAFETY: slurmctld's `List part_list`.
    let list = unsafe { *(at as *const sys::List) };
    if list.is_null() {
        return Vec::new();
    }
    let mut out = Vec::new();
    // SAFETY: a Slurm List of part_record_t.
    unsafe {
        let it = sys::list_iterator_create(list);
        loop {
            let p = sys::list_next(it) as *mut sys::part_record_t;
            let Some(part) = p.as_ref() else {
                break;
            };
            out.push((
                lossy_str(part.name).unwrap_or_default(),
                bits(part.node_bitmap),
            ));
        }
        sys::list_iterator_destroy(it);
    }
    out
}

/// Node names and each node's GPUs (count, type and, with
/// `select.pools_by_partition`, partition group), from slurmctld's node
/// table and partitions: the pools of interchangeable nodes are built from
/// it (issue 12; `compass_core::placement::pools`).
unsafe fn cluster() -> Result<(Vec<NodeGpus>, Vec<String>), String> {
    // SAFETY: slurmctld globals, read under its config lock by the caller.
    let (table, count) = unsafe { (sys::node_record_table_ptr, sys::node_record_count) };
    if table.is_null() || count <= 0 {
        return Err("no nodes configured".into());
    }
    let mut names = Vec::with_capacity(count as usize);
    let mut gpus = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        // SAFETY: table has node_record_count entries (holes are NULL).
        let node = unsafe { *table.add(i) };
        if node.is_null() {
            names.push(format!("#{i}"));
            gpus.push(NodeGpus::default());
            continue;
        }
        // SAFETY: live node record.
        let n = unsafe { &*node };
        names.push(unsafe { opt_str(n.name) }.unwrap_or("?").to_string());
        // Configured GRES (slurm.conf) first: node gres is only set once
        // its slurmd registered.
        let conf = unsafe { n.config_ptr.as_ref() }.and_then(|c| unsafe { opt_str(c.gres) });
        gpus.push(node_gpus(conf.or(unsafe { opt_str(n.gres) }).unwrap_or("")));
    }
    let by_partition = PLUGIN
        .get()
        .is_some_and(|p| p.config.select.pools_by_partition);
    if !by_partition {
        return Ok((gpus, names));
    }
    // SAFETY: the caller's locks cover the partitions too.
    let groups = partition_groups(count as u32, &unsafe { partitions() });
    let gpus = gpus
        .into_iter()
        .zip(groups)
        .map(|(g, group)| g.in_group(group.as_deref()))
        .collect();
    Ok((gpus, names))
}

/// One log line naming the pools (`8xa100 (8 nodes), 6xgpu (2 nodes, pass-through)`).
fn pools_line(ctl: &Controller) -> String {
    let pools: Vec<String> = ctl
        .pools()
        .pools()
        .map(|p| {
            format!(
                "{} ({} nodes{})",
                p.name,
                p.nodes.len(),
                if p.modelled { "" } else { ", pass-through" }
            )
        })
        .collect();
    if pools.is_empty() {
        "no GPU nodes".into()
    } else {
        pools.join(", ")
    }
}

/// Bits set in a Slurm bitmap.
unsafe fn bits(b: *mut sys::bitstr_t) -> Vec<NodeId> {
    // SAFETY: caller contract.
    unsafe { members(b) }.iter().collect()
}

/// The members of a Slurm bitmap (empty for NULL), read 64 nodes at a
/// time ([`read_word`]): a `select_p_job_test` reads its candidates this
/// way, one call per 64 nodes where they are all free or all taken rather
/// than one per node (issue #11: a test cost `O(nodes)` calls into
/// slurmctld).
///
/// # Safety
/// `b` is NULL or a valid bitmap.
unsafe fn members(b: *mut sys::bitstr_t) -> NodeSet {
    if b.is_null() {
        return NodeSet::empty(0);
    }
    // SAFETY: valid bitmap; `read_word` asks for ranges and bits inside it.
    let size = u32::try_from(unsafe { sys::bit_size(b) }).unwrap_or(0);
    let count = |start: u32, end: u32| {
        let n = unsafe { sys::bit_set_count_range(b, start as i32, end as i32) };
        u32::try_from(n).unwrap_or(0)
    };
    let test = |n: u32| unsafe { sys::bit_test(b, sys::bitoff_t::from(n)) } != 0;
    NodeSet::from_words(size, |i| read_word(i, size, count, test))
}

/// Word `i` (nodes `64 i .. 64 i + 64`) of a bitmap of `size` bits: the
/// count of its set bits first (`count(start, end)`, Slurm's
/// `bit_set_count_range` over `[start, end)`, a popcount); each bit is
/// read (`test`) only when some but not all are set.
fn read_word(
    i: usize,
    size: u32,
    count: impl Fn(u32, u32) -> u32,
    test: impl Fn(u32) -> bool,
) -> u64 {
    let start = (i as u64 * 64).min(u64::from(size)) as u32;
    let end = start.saturating_add(64).min(size);
    let width = end - start;
    if width == 0 {
        return 0;
    }
    match count(start, end) {
        0 => 0,
        c if c == width && width == 64 => !0,
        c if c == width => (1u64 << width) - 1,
        _ => (0..width)
            .filter(|&k| test(start + k))
            .fold(0, |w, k| w | 1 << k),
    }
}

/// Node indices of a Slurm host list (`n[1-3]`).
unsafe fn nodes_from_names(names: *mut c_char) -> Vec<NodeId> {
    if names.is_null() {
        return vec![];
    }
    let mut b: *mut sys::bitstr_t = std::ptr::null_mut();
    // SAFETY: valid C string; the bitmap is allocated by Slurm and freed here.
    unsafe {
        sys::node_names_to_bitmap(names, true, &mut b);
        let out = bits(b);
        if !b.is_null() {
            sys::slurm_bit_free(&mut b);
        }
        out
    }
}

/// Does the job name nodes (`-w`/`--nodelist`: `req_node_bitmap` set)?
///
/// # Safety
/// `job` is a live job record (its `details` and their bitmap NULL or
/// valid).
unsafe fn names_nodes(job: &sys::job_record_t) -> bool {
    // SAFETY: caller contract.
    unsafe { job.details.as_ref() }.is_some_and(|d| {
        !d.req_node_bitmap.is_null() && unsafe { sys::bit_set_count(d.req_node_bitmap) } > 0
    })
}

/// What the controller needs to know about a job; `capacity`: the largest
/// GPU count of a node (each pool then admits what fits its nodes).
unsafe fn job_info(job: &sys::job_record_t, capacity: u32) -> JobInfo {
    // SAFETY: details is NULL or valid.
    let d = unsafe { job.details.as_ref() };
    let req = SlurmRequest {
        num_tasks: d.map_or(0, |d| d.num_tasks),
        min_nodes: d.map_or(1, |d| d.min_nodes),
        max_nodes: d.map_or(0, |d| d.max_nodes),
        ntasks_per_node: d.map_or(0, |d| u32::from(d.ntasks_per_node)),
        tres_per_task: unsafe { opt_str(job.tres_per_task) },
        tres_per_node: unsafe { opt_str(job.tres_per_node) },
        tres_per_job: unsafe { opt_str(job.tres_per_job) },
    };
    let mut env = Vec::new();
    if !job.spank_job_env.is_null() {
        for i in 0..job.spank_job_env_size as usize {
            // SAFETY: spank_job_env has spank_job_env_size entries.
            if let Some(s) = unsafe { opt_str(*job.spank_job_env.add(i)) } {
                env.push(s);
            }
        }
    }
    JobInfo {
        id: u64::from(job.job_id),
        mapping: map_request(&req, capacity),
        gpu_type: requested_gpu_type(&req),
        required_nodes: unsafe { names_nodes(job) },
        flags: flags::from_spank_env(env),
        time_limit_s: time_limit_s(job.time_limit),
    }
}

/// The nodes a running job may ever use, from its job record
/// ([`compass_slurm::restriction::allowed_nodes`]): the nodes of the
/// partition it runs in (`part_ptr`), less its `--exclude` (`exc_nodes`,
/// read by name: after a restart slurmctld rebuilds `exc_node_bitmap` only
/// after `select_p_job_init`), among those whose active features
/// (`features_act`, else `features`) satisfy its `--constraint`
/// (`details->features`); for a constraint form not read, the nodes it
/// runs on (held still, logged). `None`: nothing restricts it. Compact
/// keeps the job inside them (`Controller::begin_within`).
///
/// # Safety
/// `job` is a live job record (its `part_ptr` and `details` NULL or
/// valid); slurmctld's node table is live.
unsafe fn allowed_nodes(job: &sys::job_record_t, current: &[NodeId]) -> Option<NodeSet> {
    // SAFETY: NULL or a valid partition record / details.
    let part = unsafe { job.part_ptr.as_ref() }.filter(|p| !p.node_bitmap.is_null());
    let d = unsafe { job.details.as_ref() };
    // The user's --exclude by name, never `exc_node_bitmap`: backfill's
    // `_start_job` ORs into it, for the call that starts the job, every
    // node reserved for other jobs or lacking the job's features right
    // then (sched/backfill/backfill.c), which would hold the job still on
    // what was free at that instant; and after a restart slurmctld
    // rebuilds the bitmap only after `select_p_job_init`.
    let excluded = match d {
        Some(d) => unsafe { nodes_from_names(d.exc_nodes) },
        None => vec![],
    };
    let features = d.and_then(|d| unsafe { lossy_str(d.features) });
    let places = JobPlaces {
        partition: part.map(|p| unsafe { bits(p.node_bitmap) }),
        excluded,
        features: features.as_deref(),
        named: unsafe { names_nodes(job) },
        current: current.to_vec(),
    };
    if let Constraint::Unread(expr) = Constraint::parse(places.features) {
        log::verbose(&format!(
            "job {}: constraint {expr} is not read (counts, brackets, parentheses, & with |): Compact holds it on its nodes",
            job.job_id
        ));
    }
    // SAFETY: slurmctld globals, read under its locks by the caller.
    let (table, count) = unsafe { (sys::node_record_table_ptr, sys::node_record_count) };
    if table.is_null() || count <= 0 {
        return None;
    }
    allowed_nodes_among(&places, count as u32, |n| {
        // SAFETY: n < node_record_count; holes are NULL.
        let node = unsafe { (*table.add(n as usize)).as_ref() }?;
        unsafe { opt_str(node.features_act).or_else(|| opt_str(node.features)) }
    })
}

/// What [`allowed_nodes`] reads besides the job's own nodes (partition,
/// `--exclude`, `--constraint`): jobs with the same key have the same
/// allowed nodes. `None` for a constraint form not read or a job that
/// names nodes (its nodes are the job's own).
///
/// # Safety
/// As [`allowed_nodes`].
unsafe fn restriction_key(job: &sys::job_record_t) -> Option<(usize, String, String)> {
    // SAFETY: NULL or valid details; NULL or NUL-terminated strings.
    let d = unsafe { job.details.as_ref() };
    let text = |p: *mut c_char| unsafe { lossy_str(p) }.unwrap_or_default();
    let features = d.map_or(String::new(), |d| text(d.features));
    if let Constraint::Unread(_) = Constraint::parse(Some(&features)) {
        return None;
    }
    if unsafe { names_nodes(job) } {
        return None;
    }
    let excluded = d.map_or(String::new(), |d| text(d.exc_nodes));
    Some((job.part_ptr as usize, excluded, features))
}

/// Slurm's `time_limit` (minutes; INFINITE or NO_VAL: none) in seconds.
fn time_limit_s(minutes: u32) -> Option<u64> {
    const NO_VAL: u32 = 0xffff_fffe;
    const INFINITE: u32 = 0xffff_ffff;
    (minutes != NO_VAL && minutes != INFINITE).then(|| u64::from(minutes) * 60)
}

/// GPUs Slurm allocated to the job per node (from `gres_list_alloc`; the
/// k-th entry belongs to the k-th node of the job's node bitmap).
unsafe fn allocated_gpus(job: &sys::job_record_t) -> Vec<(NodeId, u32)> {
    let nodes = if !job.node_bitmap.is_null() {
        unsafe { bits(job.node_bitmap) }
    } else {
        // select_p_job_init after a restart runs before slurmctld rebuilds
        // node_bitmap from the saved node list.
        unsafe { nodes_from_names(job.nodes) }
    };
    let mut gpus = vec![0u32; nodes.len()];
    if !job.gres_list_alloc.is_null() {
        // SAFETY: Slurm List of gres_state_t.
        let it = unsafe { sys::list_iterator_create(job.gres_list_alloc) };
        loop {
            let p = unsafe { sys::list_next(it) } as *mut sys::gres_state_t;
            if p.is_null() {
                break;
            }
            let gs = unsafe { &*p };
            let is_gpu =
                gs.plugin_id == GPU_PLUGIN_ID || unsafe { opt_str(gs.gres_name) } == Some("gpu");
            if !is_gpu || gs.gres_data.is_null() {
                continue;
            }
            let js = unsafe { &*(gs.gres_data as *mut sys::gres_job_state_t) };
            for (k, slot) in gpus.iter_mut().enumerate().take(js.node_cnt as usize) {
                let n = if !js.gres_cnt_node_alloc.is_null() {
                    unsafe { *js.gres_cnt_node_alloc.add(k) }
                } else if !js.gres_bit_alloc.is_null() {
                    let b = unsafe { *js.gres_bit_alloc.add(k) };
                    if b.is_null() {
                        0
                    } else {
                        (unsafe { sys::bit_set_count(b) }) as u64
                    }
                } else {
                    0
                };
                *slot += n as u32;
            }
        }
        unsafe { sys::list_iterator_destroy(it) };
    }
    nodes.into_iter().zip(gpus).collect()
}

/// Runs `f` on the controller, building it first if needed (slurmctld only,
/// engine enabled). `None` when there is no controller.
fn with_ctl<R>(f: impl FnOnce(&mut Controller) -> R) -> Option<R> {
    let plugin = PLUGIN.get()?;
    if !plugin.config.select.enabled || !in_slurmctld() || worker::dead() {
        return None;
    }
    let mut guard = plugin.ctl.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        // SAFETY: called from slurmctld entry points, node table is live.
        match unsafe { cluster() } {
            Ok((gpus, names)) => {
                let ctl = Controller::with_nodes(plugin.config.select.clone(), &gpus, names);
                log::info(&format!(
                    "engine on {} nodes, one engine per pool: {}",
                    ctl.node_count(),
                    pools_line(&ctl)
                ));
                *guard = Some(ctl);
                worker::start();
            }
            Err(e) => {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| log::error(&format!("engine disabled: {e}")));
                return None;
            }
        }
    }
    guard.as_mut().map(f)
}

/// Slurm's `StateSaveLocation` (from `select_p_state_restore`), where the
/// plugin thread keeps [`compass_slurm::persist`]'s file.
pub(crate) static STATE_DIR: std::sync::Mutex<Option<std::path::PathBuf>> =
    std::sync::Mutex::new(None);
/// What the file held at slurmctld's start, until the first rebuild.
static SAVED_AT_START: std::sync::Mutex<Option<Saved>> = std::sync::Mutex::new(None);

/// Forwarded; slurmctld calls it at start and at every reconfigure, just
/// before `select_p_job_init`, with its `StateSaveLocation`. The first time
/// the plugin reads back what its thread saved there (cool-downs and
/// in-flight migrations). A small local file, read once, as Slurm reads its
/// own state files here; an unreadable one is logged and ignored.
///
/// # Safety
/// Called by Slurm with a NUL-terminated directory name (or NULL).
#[no_mangle]
pub unsafe extern "C" fn select_p_state_restore(dir_name: *mut c_char) -> c_int {
    // SAFETY: forwarded unchanged.
    let rc = guard("select_p_state_restore", SLURM_ERROR, || unsafe {
        (stock().select_p_state_restore)(dir_name)
    });
    guard("select_p_state_restore (engine)", (), || {
        // SAFETY: Slurm's string or NULL.
        let Some(dir) = (unsafe { opt_str(dir_name) }) else {
            return;
        };
        if !in_slurmctld() {
            return;
        }
        let dir = std::path::PathBuf::from(dir);
        let mut known = STATE_DIR.lock().unwrap_or_else(|p| p.into_inner());
        if known.is_none() {
            match Saved::read(&dir.join(FILE_NAME)) {
                Ok(saved) => {
                    // The jobs raised until they restart: the plugin thread
                    // gives their priority back (it starts later).
                    if let Some(s) = &saved {
                        crate::worker::RAISED_AT_START
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .clone_from(&s.raised);
                    }
                    *SAVED_AT_START.lock().unwrap_or_else(|p| p.into_inner()) = saved
                }
                Err(e) => log::error(&format!(
                    "{e}; cool-downs and in-flight migrations from before the restart are lost"
                )),
            }
        }
        *known = Some(dir);
    });
    rc
}

/// Rebuilds the engine from the running jobs (start, controller restart,
/// reconfigure), then lets Compact converge.
///
/// # Safety
/// Called by Slurm with its job list.
#[no_mangle]
pub unsafe extern "C" fn select_p_job_init(job_list: *mut c_void) -> c_int {
    // SAFETY: forwarded unchanged.
    let rc = guard("select_p_job_init", SLURM_ERROR, || unsafe {
        (stock().select_p_job_init)(job_list)
    });
    guard("select_p_job_init (engine)", (), || {
        // SAFETY: Slurm's job list, under its locks.
        if let Some(n) = unsafe { rebuild(job_list) } {
            log::info(&format!("engine rebuilt from {n} running jobs"));
        }
    });
    rc
}

/// With `select.pools_by_partition`: when slurmctld's partitions changed
/// since the pools were built
/// (`scontrol update PartitionName=... Nodes=...`, a partition created or
/// deleted: `last_part_update` moved) and with them the partition groups,
/// the engine is rebuilt from the running jobs as at a reconfigure, so each
/// group keeps its own pools. Called at the start of `select_p_job_test`,
/// where slurmctld's scheduler holds the job and node write locks and the
/// partition read lock (`select_p_reconfigure`, which `update_part` calls,
/// is also called where no job lock is held).
///
/// # Safety
/// Under slurmctld's job write, node write and partition read locks.
unsafe fn follow_partition_changes() {
    if !PLUGIN
        .get()
        .is_some_and(|p| p.config.select.pools_by_partition)
    {
        return;
    }
    // SAFETY: under the partition lock.
    let now = unsafe { last_part_update() };
    if PARTS_SEEN.load(std::sync::atomic::Ordering::Relaxed) == now {
        return;
    }
    let changed = with_ctl(|ctl| {
        // SAFETY: caller contract.
        let table = unsafe { cluster() }.ok()?.0;
        (table != ctl.pools().node_table()).then_some(())
    });
    if changed.flatten().is_none() {
        return;
    }
    let Some(at) = ctld_global(&JOB_LIST, c"job_list") else {
        return;
    };
    // SAFETY: slurmctld's `List job_list`, under its job write lock.
    let list = unsafe { *(at as *const sys::List) } as *mut c_void;
    if let Some(n) = unsafe { rebuild(list) } {
        log::info(&format!(
            "partition groups changed: engine rebuilt from {n} running jobs; pools: {}",
            with_ctl(|ctl| pools_line(ctl)).unwrap_or_default()
        ));
    }
}

/// The engine built again from the node table, the partitions and the
/// running jobs of `job_list`; the number of running jobs adopted (`None`:
/// no engine).
///
/// # Safety
/// `job_list` is NULL or slurmctld's job list, under its job lock.
unsafe fn rebuild(job_list: *mut c_void) -> Option<usize> {
    if job_list.is_null() {
        return None;
    }
    let now = now_unix();
    let mut jobs = Vec::new();
    // SAFETY: Slurm List of job_record_t.
    unsafe {
        let it = sys::list_iterator_create(job_list as sys::List);
        loop {
            let p = sys::list_next(it) as *mut sys::job_record_t;
            if p.is_null() {
                break;
            }
            let state = (*p).job_state & JOB_STATE_BASE;
            if (state == JOB_RUNNING || state == JOB_SUSPENDED)
                && (!(*p).node_bitmap.is_null() || !(*p).nodes.is_null())
            {
                jobs.push(p);
            }
        }
        sys::list_iterator_destroy(it);
    }
    let done = with_ctl(|ctl| {
        let plugin = PLUGIN.get().expect("plugin initialised");
        // What must survive: from the file at start, else (reconfigure)
        // from the controller being replaced.
        let saved = SAVED_AT_START
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| ctl.saved(now));
        // The pools from the node table as it is now (nodes or GRES may
        // have changed at `scontrol reconfigure`); the last ones when it
        // cannot be read.
        let (gpus, names) = match unsafe { cluster() } {
            Ok(t) => t,
            Err(e) => {
                log::error(&format!("{e}; keeping the previous pools"));
                (ctl.pools().node_table(), ctl_names(ctl))
            }
        };
        *ctl = Controller::with_nodes(plugin.config.select.clone(), &gpus, names);
        log::info(&format!("pools: {}", pools_line(ctl)));
        ctl.restore(&saved, now);
        let cap = ctl.max_gpus_per_node();
        // Jobs of one partition, --exclude and --constraint share their
        // nodes: computed once (O(nodes) each) rather than per job.
        let mut allowed_by_key = std::collections::HashMap::new();
        for &p in &jobs {
            // SAFETY: live job records under slurmctld's job lock.
            let job = unsafe { &*p };
            let info = unsafe { job_info(job, cap) };
            let alloc = unsafe { allocated_gpus(job) };
            let start = u64::try_from(job.start_time).unwrap_or(now);
            // The same restriction as at its start (partition,
            // --exclude, --constraint), from the job record.
            let on: Vec<NodeId> = alloc.iter().map(|&(n, _)| n).collect();
            let allowed = match unsafe { restriction_key(job) } {
                Some(key) => allowed_by_key
                    .entry(key)
                    .or_insert_with(|| unsafe { allowed_nodes(job, &on) })
                    .clone(),
                None => unsafe { allowed_nodes(job, &on) },
            };
            if let Some(msg) = ctl.adopt_running_within(&info, &alloc, allowed.as_ref(), start) {
                log::verbose(&msg);
            }
        }
        ctl.adopt_in_flight();
        ctl.compact();
        jobs.len()
    });
    done
}

fn ctl_names(ctl: &Controller) -> Vec<String> {
    ctl.node_names().to_vec()
}

/// Narrows the candidate nodes to the engine's plan, then forwards through
/// `call` (the stock `select_p_job_test` with Slurm's other arguments; its
/// signature is release-specific, see `crate::release`). In RUN_NOW mode, if
/// cons_tres cannot place the job on the narrowed nodes (e.g. CPUs or memory
/// the engine does not model), it is retried on Slurm's own candidates: the
/// plugin only ever narrows.
pub(crate) fn job_test(
    job_ptr: *mut sys::job_record_t,
    bitmap: *mut sys::bitstr_t,
    mode: u16,
    call: &Call,
) -> c_int {
    let t_engine = std::time::Instant::now();
    // The engine's plan, whether the job's hold was released
    // (`Controller::hold`: Slurm places it), and what to keep for it if it
    // waits (a job the engine does not place).
    type Decision = (Option<Narrowed>, bool, Keep);
    let nothing = || (None, false, Keep::Nothing);
    let decision: Decision = guard("select_p_job_test (engine)", nothing(), || {
        if job_ptr.is_null() || bitmap.is_null() {
            return nothing();
        }
        // SAFETY: the scheduler's locks (job and node write, partition read).
        unsafe { follow_partition_changes() };
        // SAFETY: live job record and bitmap.
        let (job, size) = unsafe { (&*job_ptr, sys::bit_size(bitmap)) };
        let candidates = NodeSet::from_nodes(size as u32, unsafe { bits(bitmap) });
        with_ctl(|ctl| {
            let info = unsafe { job_info(job, ctl.max_gpus_per_node()) };
            let planned = ctl.narrow(&info, &candidates);
            // Which waiting job is the head Compact must not delay.
            ctl.note_priority(info.id, job.priority);
            let narrowed = match planned {
                Ok(n) => n.map(|nodes| Narrowed {
                    nodes,
                    may_widen: ctl.may_widen(info.id),
                    spread: ctl.plan_spread(&info),
                }),
                Err(msg) => {
                    log::error(&format!("{msg}; job {} goes to plain cons_tres", info.id));
                    None
                }
            };
            let keep = match narrowed {
                Some(_) => Keep::Nothing,
                None => {
                    // Tested again: what is kept for it stays.
                    ctl.still_waiting(info.id, now_unix());
                    unsafe { keep_of(job, info.required_nodes, mode_rule(mode), ctl) }
                }
            };
            (narrowed, ctl.released(info.id), keep)
        })
        .unwrap_or_else(nothing)
    });
    let (narrowed, released, keep) = decision;
    let engine_ns = t_engine.elapsed().as_nanos() as u64;
    let t_stock = std::time::Instant::now();
    let rc = select_p_job_test_narrowed(narrowed, bitmap, job_ptr, mode, call);
    crate::stats::record_job_test(engine_ns, t_stock.elapsed().as_nanos() as u64);
    if keep != Keep::Nothing {
        guard("select_p_job_test (keep)", (), || {
            // SAFETY: both non-null when `keep` is set; in a "when and
            // where" test the bitmap holds the nodes cons_tres planned.
            let nodes = kept_nodes(keep, mode_rule(mode), rc == SLURM_SUCCESS, || unsafe {
                bits(bitmap)
            });
            let Some((nodes, how)) = nodes else {
                return;
            };
            let id = u64::from(unsafe { (*job_ptr).job_id });
            let kept = with_ctl(|ctl| ctl.keep_for_waiting(id, &nodes, how, now_unix()));
            match kept.flatten() {
                Some(k) if k.first => log::info(&k.line),
                Some(k) => log::detail(&k.line),
                None => {}
            }
        });
    }
    if released && rc == SLURM_SUCCESS && mode_rule(mode) == ModeRule::RunNow {
        // SAFETY: job_ptr is non-null when `released` is set.
        let id = unsafe { (*job_ptr).job_id };
        log::detail(&format!(
            "job_test job {id} mode {mode}: hold released, placed by Slurm"
        ));
    }
    rc
}

/// The forwarding half of `select_p_job_test` (timed as "stock" by the
/// benchmark counters; the bitmap edits are negligible next to cons_tres).
fn select_p_job_test_narrowed(
    narrowed: Option<Narrowed>,
    bitmap: *mut sys::bitstr_t,
    job_ptr: *mut sys::job_record_t,
    mode: u16,
    call: &Call,
) -> c_int {
    let rule = mode_rule(mode);
    let Some(Narrowed {
        nodes: want,
        may_widen,
        spread,
    }) = narrowed.filter(|_| rule != ModeRule::TestOnly)
    else {
        return guard("select_p_job_test", SLURM_ERROR, || call(bitmap, None));
    };
    // An empty plan (the job waits for migrations to land) only holds the
    // job back from starting now: backfill's planning sees Slurm's own
    // candidates.
    if want.count() == 0 && rule != ModeRule::RunNow {
        return guard("select_p_job_test", SLURM_ERROR, || call(bitmap, None));
    }
    guard("select_p_job_test", SLURM_ERROR, || {
        // SAFETY: bitmap valid; copy freed below.
        let orig = unsafe { sys::bit_copy(bitmap) };
        // The candidates left: those of Slurm's that the plan names (a
        // call per planned node, not per node of the cluster).
        let size = unsafe { sys::bit_size(bitmap) };
        unsafe { sys::bit_clear_all(bitmap) };
        for n in want.iter().map(sys::bitoff_t::from) {
            if n < size && unsafe { sys::bit_test(orig, n) } != 0 {
                unsafe { sys::bit_set(bitmap, n) };
            }
        }
        let mut rc = call(bitmap, spread);
        // SAFETY: job_ptr checked non-null above.
        let id = unsafe { (*job_ptr).job_id };
        if rc == SLURM_SUCCESS {
            log::detail(&format!(
                "job_test job {id} mode {mode}: narrowed {} -> {} nodes{}",
                bits_count(orig),
                want.count(),
                spread.map_or(String::new(), |k| format!(", spread over {k}"))
            ));
        } else if rule == ModeRule::RunNow && !may_widen {
            rc = hold_or_release(id, orig, bitmap, call);
        } else {
            unsafe { sys::bit_copybits(bitmap, orig) };
            rc = call(bitmap, None);
            log::detail(&format!("job_test job {id} mode {mode}: planned nodes refused by cons_tres, retried on all candidates (rc {rc})"));
        }
        let mut o = orig;
        unsafe { sys::slurm_bit_free(&mut o) };
        rc
    })
}

/// A RUN_NOW test refused on the planned nodes while migrations are in
/// flight: the job waits for them ([`Controller::hold`]), at most
/// `HOLD_LIMIT_S`; then Slurm's candidates (`orig`) less the other
/// migrations' targets are tried, and cons_tres places the job (the
/// plugin's thread logs the release). Returns the test's result.
fn hold_or_release(
    id: u32,
    orig: *mut sys::bitstr_t,
    bitmap: *mut sys::bitstr_t,
    call: &Call,
) -> c_int {
    // A panic in the engine here gives the job to plain cons_tres on
    // Slurm's own candidates (the bitmap is restored below), not a wait.
    let verdict = guard("select_p_job_test (hold)", Some(None), || {
        with_ctl(|ctl| ctl.hold(u64::from(id), now_unix())).map(Some)
    });
    let keep_off = match verdict {
        Some(Some(Hold::Release { keep_off })) => keep_off,
        Some(None) => Vec::new(),
        _ => {
            log::detail(&format!(
                "job_test job {id}: planned nodes not free yet (migrations in flight); job waits"
            ));
            return SLURM_ERROR;
        }
    };
    // SAFETY: both bitmaps valid and of the same size.
    unsafe { sys::bit_copybits(bitmap, orig) };
    let size = unsafe { sys::bit_size(bitmap) };
    for n in keep_off.into_iter().map(sys::bitoff_t::from) {
        if n < size {
            unsafe { sys::bit_clear(bitmap, n) };
        }
    }
    let rc = call(bitmap, None);
    log::detail(&format!(
        "job_test job {id}: hold released, tried on Slurm's candidates (rc {rc})"
    ));
    rc
}

fn bits_count(b: *mut sys::bitstr_t) -> i32 {
    // SAFETY: valid bitmap.
    unsafe { sys::bit_set_count(b) }
}

/// Forwarded; then, for a running job the engine does not know yet, the
/// engine adopts what Slurm allocated. This (not `select_p_job_begin`) is
/// where cons_tres allocates the job's GRES (`job_res_add_job`), so the
/// per-node GPU counts are only readable after it.
///
/// # Safety
/// Called by Slurm with a live job record.
#[no_mangle]
pub unsafe extern "C" fn select_p_select_nodeinfo_set(job_ptr: *mut sys::job_record_t) -> c_int {
    // SAFETY: forwarded unchanged.
    let rc = guard("select_p_select_nodeinfo_set", SLURM_ERROR, || unsafe {
        (stock().select_p_select_nodeinfo_set)(job_ptr)
    });
    guard("select_p_select_nodeinfo_set (engine)", (), || {
        if job_ptr.is_null() {
            return;
        }
        // SAFETY: live job record.
        let job = unsafe { &*job_ptr };
        let state = job.job_state & JOB_STATE_BASE;
        if state != JOB_RUNNING && state != JOB_SUSPENDED {
            return;
        }
        let msg = with_ctl(|ctl| {
            if ctl.knows(u64::from(job.job_id)) {
                return None;
            }
            let info = unsafe { job_info(job, ctl.max_gpus_per_node()) };
            let alloc = unsafe { allocated_gpus(job) };
            let on: Vec<NodeId> = alloc.iter().map(|&(n, _)| n).collect();
            let allowed = unsafe { allowed_nodes(job, &on) };
            ctl.begin_within(&info, &alloc, allowed.as_ref(), now_unix())
        });
        if let Some(Some(m)) = msg {
            log::verbose(&m);
        }
    });
    rc
}

/// Forwarded; then the engine takes the job's instances off the node Slurm
/// took out of it (`scontrol update job=J NumNodes=`, or a failed node
/// under `--no-kill`: `excise_node_from_job`), [`Controller::resized`].
/// Before, only forwarded: the engine counted those GPUs as the job's until
/// it ended.
///
/// # Safety
/// Called by Slurm with a live job record and node record.
#[no_mangle]
pub unsafe extern "C" fn select_p_job_resized(
    job_ptr: *mut sys::job_record_t,
    node_ptr: *mut c_void,
) -> c_int {
    // SAFETY: forwarded unchanged.
    let rc = guard("select_p_job_resized", SLURM_ERROR, || unsafe {
        (stock().select_p_job_resized)(job_ptr, node_ptr)
    });
    guard("select_p_job_resized (engine)", (), || {
        if job_ptr.is_null() || node_ptr.is_null() {
            return;
        }
        // SAFETY: live job and node records.
        let job = unsafe { &*job_ptr };
        let node = unsafe { (*(node_ptr as *mut sys::node_record_t)).index } as NodeId;
        let id = u64::from(job.job_id);
        // Its nodes now (Slurm cleared the node from the bitmap first).
        let on: Vec<NodeId> = if job.node_bitmap.is_null() {
            Vec::new()
        } else {
            unsafe { bits(job.node_bitmap) }
        };
        let msg = with_ctl(|ctl| {
            if !ctl.knows(id) {
                return None;
            }
            let allowed = unsafe { allowed_nodes(job, &on) };
            let name = ctl.node_list(&[node]);
            let err = ctl.resized(id, node, allowed.as_ref(), now_unix());
            Some(err.unwrap_or_else(|| format!("job {id}: {name} taken out of it by Slurm")))
        });
        if let Some(Some(m)) = msg {
            log::verbose(&m);
        }
    });
    rc
}

/// # Safety
/// Called by Slurm with a live job record.
#[no_mangle]
pub unsafe extern "C" fn select_p_job_fini(job_ptr: *mut sys::job_record_t) -> c_int {
    // SAFETY: forwarded unchanged.
    let rc = guard("select_p_job_fini", SLURM_ERROR, || unsafe {
        (stock().select_p_job_fini)(job_ptr)
    });
    guard("select_p_job_fini (engine)", (), || {
        if job_ptr.is_null() {
            return;
        }
        // SAFETY: live job record.
        let id = u64::from(unsafe { (*job_ptr).job_id });
        if let Some(Some(m)) = with_ctl(|ctl| ctl.fini(id, now_unix())) {
            log::verbose(&m);
        }
    });
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bitmap_is_read_a_word_at_a_time_with_bits_only_where_words_are_mixed() {
        use std::cell::Cell;
        // 200 bits: word 0 empty, word 1 full, word 2 mixed, word 3 the
        // last 8 bits, full.
        let set: Vec<bool> = (0..200u32)
            .map(|n| (64..128).contains(&n) || [130, 191].contains(&n) || n >= 192)
            .collect();
        let tests = Cell::new(0);
        let count = |s: u32, e: u32| (s..e).filter(|&n| set[n as usize]).count() as u32;
        let test = |n: u32| {
            tests.set(tests.get() + 1);
            set[n as usize]
        };
        let read = NodeSet::from_words(200, |i| read_word(i, 200, count, test));
        let want: Vec<NodeId> = (0..200).filter(|&n| set[n as usize]).collect();
        assert_eq!(read.iter().collect::<Vec<_>>(), want);
        assert_eq!(
            tests.get(),
            64,
            "only the mixed word's bits are read one by one"
        );
        // a size that is a multiple of 64, and none at all
        let full = NodeSet::from_words(128, |i| read_word(i, 128, |s, e| e - s, |_| true));
        assert_eq!(full.count(), 128);
        assert_eq!(
            read_word(0, 0, |_, _| unreachable!(), |_| unreachable!()),
            0
        );
    }

    #[test]
    fn modes_are_read_from_the_low_byte_and_test_only_is_never_narrowed() {
        assert_eq!(mode_rule(0), ModeRule::RunNow);
        assert_eq!(mode_rule(1), ModeRule::TestOnly);
        assert_eq!(mode_rule(2), ModeRule::Plan);
        assert_eq!(mode_rule(4), ModeRule::Plan);
        // SELECT_MODE_PREEMPT_FLAG | SELECT_MODE_CHECK_FULL with RUN_NOW, and
        // SELECT_MODE_IGN_ERR with TEST_ONLY.
        assert_eq!(mode_rule(0x0300), ModeRule::RunNow);
        assert_eq!(mode_rule(0x0401), ModeRule::TestOnly);
    }

    #[test]
    fn a_waiting_job_keeps_its_named_nodes_or_slurms_planned_ones() {
        let planned = || vec![4, 5];
        let named = || Keep::Named(vec![2]);
        // `-w`: kept after every test that does not start it.
        for (rule, ok) in [
            (ModeRule::RunNow, false),
            (ModeRule::TestOnly, true),
            (ModeRule::TestOnly, false),
            (ModeRule::Plan, true),
            (ModeRule::Plan, false),
        ] {
            assert_eq!(
                kept_nodes(named(), rule, ok, planned),
                Some((vec![2], KeepNodes::Named))
            );
        }
        assert_eq!(kept_nodes(named(), ModeRule::RunNow, true, planned), None);
        // A restricted `--exclusive` job: Slurm's plan, from a successful
        // "when and where".
        assert_eq!(
            kept_nodes(Keep::Planned, ModeRule::Plan, true, planned),
            Some((vec![4, 5], KeepNodes::Planned))
        );
        for (rule, ok) in [
            (ModeRule::Plan, false),
            (ModeRule::RunNow, false),
            (ModeRule::RunNow, true),
            (ModeRule::TestOnly, true),
        ] {
            assert_eq!(kept_nodes(Keep::Planned, rule, ok, planned), None);
        }
        assert_eq!(
            kept_nodes(Keep::Nothing, ModeRule::Plan, true, planned),
            None
        );
    }

    #[test]
    fn a_spread_plan_raises_the_node_counts_within_the_jobs_maximum() {
        // Slurm's own counts without a spread, or when it asks for as many.
        assert_eq!(node_counts(None, 1, 500_000, 1), (1, 1));
        assert_eq!(node_counts(Some(2), 2, 2, 2), (2, 2));
        assert_eq!(node_counts(Some(2), 3, 4, 3), (3, 3));
        // `--ntasks=2 --gpus-per-task=2` planned on two nodes.
        assert_eq!(node_counts(Some(2), 1, 500_000, 1), (2, 2));
        assert_eq!(node_counts(Some(3), 1, 0, 2), (3, 3));
        // Never past the job's maximum (`-N 1-2`).
        assert_eq!(node_counts(Some(3), 1, 2, 1), (1, 1));
    }
}
