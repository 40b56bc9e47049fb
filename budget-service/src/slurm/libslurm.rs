//! The real Slurm source and sink: [`LibSlurm`] reads jobs with
//! `slurm_load_jobs` and pushes site factors with `slurm_update_job`, through
//! the safe wrappers of `super::ffi` (config `slurm = "libslurm"`).
//!
//! What is read from each `slurm_job_info_t`:
//! - state (`job_state & JOB_STATE_BASE`): PENDING -> pending; RUNNING and
//!   SUSPENDED -> running; any ended state -> ended, but only when the job
//!   was allocated (a non-empty `tres_alloc_str`; a job cancelled while
//!   pending never ran and is dropped);
//! - `job_id`, `account` (the leaf of the org tree), `submit_time`,
//!   `start_time` (running and ended jobs only: for a pending job it is
//!   Slurm's start estimate), `end_time` (ended jobs only);
//! - GPUs (every GRES and TRES string is read by [`compass_core::gres`]:
//!   typed, socket-bound, several types per node): running and ended jobs:
//!   the GPUs of `tres_alloc_str` (what was allocated); pending jobs: those
//!   of `tres_req_str`; when that string has no GPU entry, the request from
//!   `tres_per_job` (`gres:gpu:N`),
//!   else `tres_per_node` x `num_nodes`, else `tres_per_task` x `num_tasks`;
//! - priority within the team: minus the job's nice value (`sbatch --nice`);
//! - min runtime and resumable flag: the `compass:` tag that
//!   `etc/job_submit.lua` writes into `admin_comment`
//!   ([`compass_slurm::flags::parse_admin_comment`]); no tag: min runtime 0
//!   (unallocated time), not resumable.
//!
//! The user (`user_name`/`user_id`) is read but not used: the ledger is kept
//! per account.
//!
//! Writing: Slurm's multifactor priority is `site_factor - nice` (plus the
//! other factors, all weighted 0 by `etc/slurm-budget.conf`). The nice value
//! already placed the job inside its team, so the sink adds it back: the
//! wire site factor is `factor + nice` and the job's Slurm priority equals
//! compass's factor exactly, whatever the nice values. The nice values are
//! those of the last snapshot; a job whose nice changes while its rank does
//! not is corrected at its next rank change.

use compass_core::model::JobId;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;

use super::ffi::{self, RawJob, RawNode, UpdateError, MEM_PER_CPU, NICE_OFFSET};
use super::priority::{parse_qos_priorities, PriorityConf, QosPriorities};
use super::{
    JobNeeds, NodeState, SlurmActions, SlurmJob, SlurmNode, SlurmSink, SlurmSnapshot, SlurmSource,
};
use crate::error::{BudgetError, Result};
use compass_core::preempt::{NodeNeeds, NodeTraits};

/// `enum job_states` values of slurm.h used here.
const JOB_PENDING: u32 = 0;
const JOB_RUNNING: u32 = 1;
const JOB_SUSPENDED: u32 = 2;
/// `enum job_state_reason` values: a pending job with one of these could
/// start if there were room.
const WAIT_NO_REASON: u32 = 0;
const WAIT_PRIORITY: u32 = 1;
const WAIT_RESOURCES: u32 = 3;
/// Waiting for its begin time (a requeued job: `cred_expire + 1` s).
const WAIT_TIME: u32 = 9;
/// `enum node_states` values.
const NODE_STATE_DOWN: u32 = 1;
const NODE_STATE_ALLOCATED: u32 = 3;
const NODE_STATE_MIXED: u32 = 5;
const NODE_STATE_FUTURE: u32 = 6;
const NODE_STATE_COMPLETING: u32 = 1 << 10;

/// Slurm through libslurm. `conf`: the slurm.conf to use (`None`:
/// `SLURM_CONF` or /etc/slurm/slurm.conf); libslurm keeps one per process.
pub struct LibSlurm {
    conf: Option<PathBuf>,
    /// Nice value (without offset) of every pending job of the last snapshot.
    nice: Mutex<HashMap<JobId, i64>>,
    /// Admin comment of every job of the last snapshot (a cancel appends
    /// its reason to it, keeping the compass tag).
    comments: Mutex<HashMap<JobId, String>>,
    /// QOS priorities read from sacctmgr.
    qos: Mutex<QosCache>,
    /// The sacctmgr program (`sacctmgr` on the `PATH`).
    sacctmgr: String,
}

/// The last read of QOS priorities, and the last attempt.
#[derive(Default)]
struct QosCache {
    /// The last successful read, and when.
    read: Option<(std::time::Instant, BTreeMap<String, u32>)>,
    /// The last attempt, and its error if it failed: a failing sacctmgr is
    /// tried again only after [`QOS_REFRESH`], not every cycle.
    tried: Option<(std::time::Instant, Option<String>)>,
}

/// How often QOS priorities are read again from sacctmgr (they change only
/// with `sacctmgr modify qos`).
pub const QOS_REFRESH: std::time::Duration = std::time::Duration::from_secs(300);
/// How long one `sacctmgr show qos` may take on the cycle's thread.
pub const QOS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl LibSlurm {
    pub fn new(conf: Option<PathBuf>) -> Self {
        Self {
            conf,
            nice: Mutex::new(HashMap::new()),
            comments: Mutex::new(HashMap::new()),
            qos: Mutex::new(QosCache::default()),
            sacctmgr: "sacctmgr".into(),
        }
    }

    /// Reads QOS priorities with `program` instead of `sacctmgr`.
    pub fn with_sacctmgr(mut self, program: &str) -> Self {
        self.sacctmgr = program.into();
        self
    }

    /// QOS priorities for the order (issue 12). Only read when the site
    /// weighs QOS; they live in slurmdbd, so without an accounting database
    /// every QOS has priority 0 (Slurm's own view then, too). Read with
    /// `sacctmgr show qos format=name,priority -P -n` every [`QOS_REFRESH`]
    /// on the cycle's thread (never the async runtime's), stopped after
    /// [`QOS_TIMEOUT`]; on failure the last read is kept, and the next
    /// attempt waits [`QOS_REFRESH`] too.
    fn qos_priorities(&self, conf: &PriorityConf) -> QosPriorities {
        if !conf.qos_weighted() {
            return QosPriorities {
                by_name: BTreeMap::new(),
                source: "not weighed (PriorityWeightQOS=0): QOS does not order jobs".into(),
            };
        }
        if !conf.has_slurmdbd() {
            return QosPriorities {
                by_name: BTreeMap::new(),
                source: format!(
                    "none: no accounting database (AccountingStorageType={}), every QOS has priority 0",
                    conf.accounting_storage_type
                ),
            };
        }
        let mut cache = self.qos.lock().unwrap_or_else(|e| e.into_inner());
        let due = cache
            .tried
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= QOS_REFRESH);
        if due {
            let read = crate::sacctmgr::run_sacctmgr(
                &self.sacctmgr,
                &["show", "qos", "format=name,priority", "-P", "-n"],
                QOS_TIMEOUT,
            )
            .and_then(|(text, _)| parse_qos_priorities(&text));
            let now = std::time::Instant::now();
            match read {
                Ok(m) => {
                    cache.read = Some((now, m));
                    cache.tried = Some((now, None));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read QOS priorities from sacctmgr");
                    cache.tried = Some((now, Some(e.to_string())));
                }
            }
        }
        let failed = cache.tried.as_ref().and_then(|(_, e)| e.clone());
        match (&cache.read, failed) {
            (Some((at, m)), None) => QosPriorities {
                by_name: m.clone(),
                source: format!("sacctmgr, read {} s ago", at.elapsed().as_secs()),
            },
            (Some((at, m)), Some(e)) => QosPriorities {
                by_name: m.clone(),
                source: format!(
                    "sacctmgr failed ({e}); using its read of {} s ago",
                    at.elapsed().as_secs()
                ),
            },
            (None, e) => QosPriorities {
                by_name: BTreeMap::new(),
                source: format!(
                    "sacctmgr failed ({}); every QOS taken as priority 0",
                    e.unwrap_or_default()
                ),
            },
        }
    }

    /// Loads slurm.conf into libslurm (once per process; contacts no
    /// daemon). Done by the first snapshot otherwise; the daemon calls it at
    /// start-up, before any other thread exists.
    pub fn init(&self) -> Result<()> {
        ffi::init(self.conf.as_deref())
    }

    /// The slurm.conf this source reads.
    pub fn conf_path(&self) -> PathBuf {
        ffi::conf_path(self.conf.as_deref())
    }
}

impl SlurmSource for LibSlurm {
    fn snapshot(&self) -> Result<SlurmSnapshot> {
        ffi::init(self.conf.as_deref())?;
        let jobs = ffi::load_jobs()?;
        let mut snap = snapshot_of(&jobs);
        let (nodes, tiers) = ffi::load_nodes()?;
        snap.nodes = nodes.iter().map(node_of).collect();
        set_tiers(&mut snap, &tiers);
        types_from_nodes(&mut snap);
        let conf = ffi::load_priority_conf()?;
        snap.qos_priorities = self.qos_priorities(&conf);
        snap.priority_conf = Some(conf);
        snap.capacity_gpus = Some(snap.nodes.iter().map(|n| n.gpus).sum());
        *self.comments.lock().unwrap_or_else(|e| e.into_inner()) = jobs
            .iter()
            .map(|j| (JobId(u64::from(j.job_id)), j.admin_comment.clone()))
            .collect();
        *self.nice.lock().unwrap_or_else(|e| e.into_inner()) =
            snap.pending.iter().map(|j| (j.job, -j.priority)).collect();
        Ok(snap)
    }
}

impl SlurmSink for LibSlurm {
    /// One `slurm_update_job` per changed job. Jobs that ended or vanished
    /// meanwhile are skipped; any other failure is reported after trying
    /// the rest (the cycle then re-pushes everything on its next success).
    fn set_site_factors(&self, factors: &[(JobId, u32)]) -> Result<()> {
        ffi::init(self.conf.as_deref())?;
        let nice = self.nice.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut failed: Vec<String> = Vec::new();
        for &(job, factor) in factors {
            let factor = wire_factor(factor, nice.get(&job).copied().unwrap_or(0));
            let Ok(id) = u32::try_from(job.0) else {
                failed.push(format!("job id {} does not fit Slurm's 32 bits", job.0));
                continue;
            };
            match ffi::set_site_factor(id, factor) {
                Ok(()) => {}
                Err(UpdateError::Gone) => {
                    tracing::debug!(job = id, "job ended before its site factor was set")
                }
                Err(UpdateError::Other(why)) => failed.push(why),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            let n = failed.len();
            failed.truncate(3);
            Err(BudgetError::Slurm(format!(
                "{n} of {} site factor updates failed: {}",
                factors.len(),
                failed.join("; ")
            )))
        }
    }
}

fn job_id32(job: JobId) -> Result<u32> {
    u32::try_from(job.0)
        .map_err(|_| BudgetError::Slurm(format!("job id {} does not fit Slurm's 32 bits", job.0)))
}

fn acted(what: &str, job: JobId, r: std::result::Result<(), UpdateError>) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(UpdateError::Gone) => Err(BudgetError::Slurm(format!(
            "{what} job {}: the job is gone or already finished",
            job.0
        ))),
        Err(UpdateError::Other(why)) => Err(BudgetError::Slurm(why)),
    }
}

impl SlurmActions for LibSlurm {
    /// `slurm_requeue`, then `begin_time = now + RESTART_DELAY_S` (best
    /// effort: Slurm sets the 121 s begin time when the old run has
    /// completed, which may come after this; the cycle then resets it with
    /// [`SlurmActions::start_now`]).
    fn requeue(&self, job: JobId) -> Result<()> {
        ffi::init(self.conf.as_deref())?;
        let id = job_id32(job)?;
        acted("requeue", job, ffi::requeue(id))?;
        if let Err(e) = ffi::set_begin_time(id, unix_now() + RESTART_DELAY_S) {
            tracing::debug!(job = id, error = ?e, "begin time not reset at requeue; the next cycle retries");
        }
        Ok(())
    }

    fn start_now(&self, job: JobId) -> Result<()> {
        ffi::init(self.conf.as_deref())?;
        let id = job_id32(job)?;
        acted(
            "reset the begin time of",
            job,
            ffi::set_begin_time(id, unix_now()),
        )
    }

    /// Appends `reason` to the admin comment (after the compass tag, which
    /// stays parseable), then `slurm_kill_job(SIGKILL)`.
    fn cancel(&self, job: JobId, reason: &str) -> Result<()> {
        ffi::init(self.conf.as_deref())?;
        let id = job_id32(job)?;
        let old = self
            .comments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&job)
            .cloned()
            .unwrap_or_default();
        let comment = cancel_comment(&old, reason);
        if let Err(e) = ffi::set_admin_comment(id, &comment) {
            tracing::warn!(job = id, error = ?e, "could not record the cancel reason in the admin comment");
        }
        acted("cancel", job, ffi::kill_job(id))
    }

    fn drain(&self, node: &str, reason: &str) -> Result<()> {
        ffi::init(self.conf.as_deref())?;
        ffi::update_node(node, true, reason)
    }

    fn resume(&self, node: &str) -> Result<()> {
        ffi::init(self.conf.as_deref())?;
        ffi::update_node(node, false, "")
    }
}

/// Seconds between a requeue and the earliest restart. Slurm holds a
/// requeued job `cred_expire + 1` (121) s because slurmd refuses any
/// credential of the job created in or before the second its old run was
/// revoked: a restart within that same second fails the job ("Killing
/// non-startable batch job: Job credential revoked", seen on the lab
/// cluster). Two seconds clear it.
pub const RESTART_DELAY_S: i64 = 2;

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The admin comment of a cancelled job: the old one (with its compass
/// tag) and `preempted: <reason>`. `compass:` inside the reason is
/// rewritten so the tag stays the only match of the flag parser.
pub fn cancel_comment(old: &str, reason: &str) -> String {
    let reason = reason.replace("compass:", "compass ");
    let note = format!("preempted: {reason}");
    if old.is_empty() {
        note
    } else {
        format!("{old};{note}")
    }
}

/// A node of `slurm_load_node` as enforcement sees it.
pub fn node_of(n: &RawNode) -> SlurmNode {
    let base = n.state & ffi::NODE_STATE_BASE;
    let drain = n.state & ffi::NODE_STATE_DRAIN != 0;
    let busy = base == NODE_STATE_ALLOCATED
        || base == NODE_STATE_MIXED
        || n.state & NODE_STATE_COMPLETING != 0;
    let down =
        base == NODE_STATE_DOWN || base == NODE_STATE_FUTURE || n.state & ffi::NODE_STATE_FAIL != 0;
    let state = match (down, drain, busy) {
        (true, _, _) => NodeState::Down,
        (false, true, true) => NodeState::Draining,
        (false, true, false) => NodeState::Drained,
        (false, false, _) => NodeState::Up,
    };
    let gpus = named_gpus(&n.gres);
    let total = gpus.as_ref().map_or(0, |g| g.total_u32());
    let gpus_by_type = gpus
        .as_ref()
        .map(|g| {
            g.by_type
                .iter()
                .map(|(t, c)| (t.clone(), u32::try_from(*c).unwrap_or(u32::MAX)))
                .collect()
        })
        .unwrap_or_default();
    let split = |s: &str| -> std::collections::BTreeSet<String> {
        s.split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty() && *f != "(null)")
            .map(str::to_string)
            .collect()
    };
    SlurmNode {
        name: n.name.clone(),
        gpus: total,
        state,
        reason: n.reason.clone(),
        traits: Some(NodeTraits {
            name: n.name.clone(),
            gpus: total,
            partitions: n.partitions.iter().cloned().collect(),
            features: split(&n.features),
            gpu_types: gpus
                .map(|g| g.by_type.into_keys().collect())
                .unwrap_or_default(),
            free_cpus: n.cpus.saturating_sub(n.alloc_cpus),
            free_mem_mb: n.real_memory_mb.saturating_sub(n.alloc_mem_mb),
        }),
        gpus_by_type,
    }
}

/// Typed GPUs a running or ended job holds: summed over its
/// `gres_detail_str` entries (`gpu:a100:2(IDX:0-1)`), else the typed
/// entries of its `tres_alloc_str` (`gres/gpu:a100=2`); empty when neither
/// names a type ([`LibSlurm`]'s snapshot then takes its nodes' types).
pub fn held_types(r: &RawJob) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    for d in &r.gres_detail {
        if let Some(g) = named_gpus(d) {
            for (t, c) in g.by_type {
                let v = out.entry(t).or_default();
                *v = v.saturating_add(u32::try_from(c).unwrap_or(u32::MAX));
            }
        }
    }
    if out.is_empty() {
        if let Some(g) = named_gpus(&r.tres_alloc_str) {
            out = g
                .by_type
                .into_iter()
                .map(|(t, c)| (t, u32::try_from(c).unwrap_or(u32::MAX)))
                .collect();
        }
    }
    out
}

/// Each pending job's partition `PriorityTier`: the highest of its
/// partitions' (`-p debug,gpu`), from `tiers` (partition name -> tier).
pub fn set_tiers(snap: &mut SlurmSnapshot, tiers: &[(String, u16)]) {
    let tier: HashMap<&str, u16> = tiers.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    let parts: HashMap<JobId, &Vec<String>> = snap
        .job_needs
        .iter()
        .map(|n| (n.job, &n.needs.partitions))
        .collect();
    for j in snap.pending.iter_mut() {
        j.tier = parts
            .get(&j.job)
            .into_iter()
            .flat_map(|ps| ps.iter())
            .filter_map(|p| tier.get(p.as_str()).copied())
            .max()
            .unwrap_or(0);
    }
}

/// Running jobs without typed GPUs (untyped `gres_detail_str`): their GPUs
/// on each node of one GPU type are of that type.
pub fn types_from_nodes(snap: &mut SlurmSnapshot) {
    let node_type: HashMap<&str, &str> = snap
        .nodes
        .iter()
        .filter_map(|n| {
            let t = n.traits.as_ref()?;
            let ty = t.gpu_types.iter().next()?;
            (t.gpu_types.len() == 1).then_some((n.name.as_str(), ty.as_str()))
        })
        .collect();
    for j in snap.running.iter_mut().filter(|j| j.gpu_types.is_empty()) {
        for (node, g) in &j.alloc {
            if let Some(t) = node_type.get(node.as_str()) {
                *j.gpu_types.entry(t.to_string()).or_default() += g;
            }
        }
    }
}

/// What a pending job needs of each node besides GPUs: its partitions,
/// `--constraint`, `--exclude`, GPU type (the one type its GPU request
/// names), and per instance (`instances`) the larger of `pn_min_cpus` and
/// its CPUs split over its instances, and the memory per node
/// (`pn_min_memory`, times those CPUs when it is per CPU).
pub fn needs_of(r: &RawJob, instances: u32) -> NodeNeeds {
    let gpu_type = [
        &r.tres_per_node,
        &r.tres_per_job,
        &r.tres_per_task,
        &r.tres_per_socket,
        &r.tres_req_str,
    ]
    .iter()
    .find_map(|s| named_gpus(s).and_then(|g| g.single_type().map(str::to_string)));
    let cpus = r.pn_min_cpus.max(r.num_cpus.div_ceil(instances.max(1)));
    let mem = if r.pn_min_memory & MEM_PER_CPU != 0 {
        (r.pn_min_memory & !MEM_PER_CPU).saturating_mul(u64::from(cpus.max(1)))
    } else {
        r.pn_min_memory
    };
    NodeNeeds {
        partitions: r
            .partition
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect(),
        constraint: if r.features == "(null)" {
            String::new()
        } else {
            r.features.clone()
        },
        excluded: r.exc_nodes.iter().cloned().collect(),
        gpu_type,
        cpus_per_node: cpus,
        mem_per_node_mb: mem,
    }
}

/// CPUs and memory (MB) a running job holds on each of its nodes: its
/// `tres_alloc_str` (`cpu=16,mem=64000M,node=2`) split evenly over its
/// nodes; 0 when unreadable.
pub fn holdings_of(r: &RawJob) -> (u32, u64) {
    let Ok(t) = compass_core::gres::Gres::parse(&r.tres_alloc_str) else {
        return (0, 0);
    };
    let nodes = t.tres("node").unwrap_or(1).max(1);
    let cpus = t.tres("cpu").unwrap_or(0).div_ceil(nodes);
    let mem = t.tres("mem").unwrap_or(0).div_ceil(nodes);
    (u32::try_from(cpus).unwrap_or(u32::MAX), mem)
}

/// GPUs of each node of a running job: `gres_detail_str[i]` of node `i`
/// (`gpu:4(IDX:0-3)`); without details, the job's GPUs split evenly.
pub fn alloc_of(r: &RawJob, gpus: u32) -> Vec<(String, u32)> {
    if r.nodes.is_empty() {
        return Vec::new();
    }
    if r.gres_detail.len() == r.nodes.len() {
        return r
            .nodes
            .iter()
            .zip(&r.gres_detail)
            .map(|(n, d)| (n.clone(), detail_gpus(d)))
            .filter(|(_, g)| *g > 0)
            .collect();
    }
    let k = r.nodes.len() as u32;
    r.nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), gpus / k + u32::from((i as u32) < gpus % k)))
        .filter(|(_, g)| *g > 0)
        .collect()
}

/// GPUs in one `gres_detail_str` entry (`gpu:4(IDX:0-3)`,
/// `gpu:a100:2(IDX:0,2),mps:0(...)`).
pub fn detail_gpus(detail: &str) -> u32 {
    gres_gpus(detail).unwrap_or(0)
}

/// Instances `w` of a pending request: tasks for `--gpus-per-task`, nodes for
/// `--gres`/`--gpus-per-node`, else one.
fn instances_of(r: &RawJob) -> u32 {
    if gres_gpus(&r.tres_per_task).is_some() {
        r.num_tasks.max(1)
    } else if gres_gpus(&r.tres_per_node).is_some() {
        r.num_nodes.max(1)
    } else {
        1
    }
}

/// The site factor to send so that Slurm's `site_factor - nice` equals
/// `factor` (clamped to Slurm's non-negative range).
pub fn wire_factor(factor: u32, nice: i64) -> u32 {
    (i64::from(factor) + nice).clamp(0, i64::from(i32::MAX) - 2) as u32
}

/// The factor compass would have pushed for Slurm's `site_factor` of a job:
/// the inverse of [`wire_factor`] (`site_factor - nice`, offsets removed);
/// `None` when it is out of range (never set by compass: Slurm's default is
/// 0).
pub fn held_factor(r: &RawJob) -> Option<u32> {
    let f = i64::from(r.site_factor) - i64::from(r.nice);
    u32::try_from(f).ok().filter(|f| *f > 0)
}

/// What Slurm adds to a pending job's priority beyond compass's factor:
/// `priority - (site_factor - nice)`, which is 0 when every other
/// `PriorityWeight*` is 0 (the multifactor sum is then the site factor
/// minus nice). `None` for a job compass set no factor on, or whose
/// priority is 0 (held) or Slurm's floor of 1; differences of 1 are
/// rounding.
pub fn priority_offset(r: &RawJob) -> Option<i64> {
    let f = held_factor(r)?;
    if r.state != JOB_PENDING || r.priority <= 1 {
        return None;
    }
    let extra = i64::from(r.priority) - i64::from(f);
    (extra.abs() > 1).then_some(extra)
}

/// The owner of a job: Slurm's `user_name` when it sends one, else the
/// passwd name of `user_id` (looked up once per UID per snapshot).
fn job_user(r: &RawJob, names: &mut HashMap<u32, String>) -> String {
    if !r.user_name.is_empty() {
        return r.user_name.clone();
    }
    names
        .entry(r.user_id)
        .or_insert_with(|| crate::auth::user_name(r.user_id))
        .clone()
}

/// Sorts the jobs of one `slurm_load_jobs` into pending, running and ended.
pub fn snapshot_of(jobs: &[RawJob]) -> SlurmSnapshot {
    let mut s = SlurmSnapshot::default();
    let mut names = HashMap::new();
    for r in jobs {
        let pending = r.state == JOB_PENDING;
        let running = r.state == JOB_RUNNING || r.state == JOB_SUSPENDED;
        if !pending && !running && r.tres_alloc_str.is_empty() {
            continue; // ended without ever running
        }
        let gpus = if pending {
            tres_gpus(&r.tres_req_str).unwrap_or_else(|| requested_gpus(r))
        } else {
            tres_gpus(&r.tres_alloc_str)
                .or_else(|| tres_gpus(&r.tres_req_str))
                .unwrap_or_else(|| requested_gpus(r))
        };
        let flags = compass_slurm::flags::parse_admin_comment(&r.admin_comment).unwrap_or_default();
        let has_start = !pending && r.start_time > 0;
        // Jobs pinned to nodes (`-w`) cause no preemption: the planner
        // would free room anywhere, maybe where they cannot run.
        let eligible = pending
            && r.priority != 0
            && r.req_nodes.is_empty()
            && matches!(
                r.state_reason,
                WAIT_NO_REASON | WAIT_PRIORITY | WAIT_RESOURCES
            );
        let id = JobId(u64::from(r.job_id));
        if pending {
            s.job_needs.push(JobNeeds {
                job: id,
                needs: needs_of(r, instances_of(r)),
                cpus_per_node: 0,
                mem_per_node_mb: 0,
            });
        } else if running {
            let (cpus, mem) = holdings_of(r);
            s.job_needs.push(JobNeeds {
                job: id,
                needs: NodeNeeds::default(),
                cpus_per_node: cpus,
                mem_per_node_mb: mem,
            });
        }
        let gpu_types = if pending {
            s.job_needs
                .last()
                .and_then(|n| n.needs.gpu_type.clone())
                .map(|t| BTreeMap::from([(t, gpus)]))
                .unwrap_or_default()
        } else {
            held_types(r)
        };
        let job = SlurmJob {
            job: id,
            gpu_types,
            tier: 0,
            qos: r.qos.clone(),
            qos_priority: 0,
            account: r.account.clone(),
            user: job_user(r, &mut names),
            gpus,
            min_runtime_s: flags.min_runtime_s,
            resumable: flags.resumable,
            priority: -(i64::from(r.nice) - i64::from(NICE_OFFSET)),
            submit: r.submit_time,
            start: has_start.then_some(r.start_time),
            end: (!pending && !running && r.end_time > 0).then_some(r.end_time.max(r.start_time)),
            alloc: if running {
                alloc_of(r, gpus)
            } else {
                Vec::new()
            },
            instances: if pending { instances_of(r) } else { 0 },
            eligible,
            begin_after: (pending && r.state_reason == WAIT_TIME && r.eligible_time > 0)
                .then_some(r.eligible_time),
        };
        if pending {
            if let Some(f) = held_factor(r) {
                s.site_factors.push((job.job, f));
            }
            if let Some(x) = priority_offset(r) {
                s.priority_offsets.push((job.job, x));
            }
            if r.priority > 0 {
                s.priorities.push((job.job, r.priority));
            }
            s.pending.push(job);
        } else if job.start.is_none() {
            continue; // allocated but no start time: nothing to charge yet
        } else if running {
            s.running.push(job);
        } else {
            s.ended.push(job);
        }
    }
    s
}

/// GPUs of a TRES string (`cpu=4,mem=1G,node=1,gres/gpu=8`,
/// `gres/gpu:a100=2`), by [`compass_core::gres`]; `None` when it names no
/// GPU or is malformed (logged).
pub fn tres_gpus(tres: &str) -> Option<u32> {
    named_gpus(tres).map(|g| g.total_u32())
}

/// GPUs in a GRES list: a request (`gres:gpu:4`, `gres/gpu:a100:2`,
/// `gres:gpu` = 1) or a node's `Gres=` (`gpu:a100:8(S:0-1)`,
/// `gpu:a100:4,gpu:h100:4`), by [`compass_core::gres`]; `None` when it
/// names no GPU or is malformed (logged).
pub fn gres_gpus(list: &str) -> Option<u32> {
    named_gpus(list).map(|g| g.total_u32())
}

/// GPUs by type of a GRES list or TRES string; `None` when it names no
/// GPU, or is malformed (logged once per call: a Slurm string compass
/// cannot read is a bug to report, not a reason to stop the cycle).
pub fn named_gpus(s: &str) -> Option<compass_core::gres::GpuCounts> {
    match compass_core::gres::gpus_named(s) {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e, "unreadable GRES/TRES string from Slurm; counted as no GPU");
            None
        }
    }
}

fn requested_gpus(r: &RawJob) -> u32 {
    if let Some(n) = gres_gpus(&r.tres_per_job) {
        return n;
    }
    if let Some(n) = gres_gpus(&r.tres_per_node) {
        return n.saturating_mul(r.num_nodes.max(1));
    }
    if let Some(n) = gres_gpus(&r.tres_per_task) {
        return n.saturating_mul(r.num_tasks.max(1));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(id: u32, state: u32) -> RawJob {
        RawJob {
            job_id: id,
            state,
            account: "acct-a".into(),
            submit_time: 100,
            start_time: 0,
            nice: NICE_OFFSET,
            num_nodes: 1,
            num_tasks: 1,
            ..RawJob::default()
        }
    }

    #[test]
    fn missing_slurm_conf_is_an_error_not_a_crash() {
        let s = LibSlurm::new(Some("/nonexistent/compass/slurm.conf".into()));
        let e = s.snapshot().unwrap_err();
        assert!(matches!(e, BudgetError::Slurm(_)), "{e}");
        assert!(
            e.to_string().contains("/nonexistent/compass/slurm.conf"),
            "{e}"
        );
        assert!(s.set_site_factors(&[(JobId(1), 5)]).is_err());
    }

    #[test]
    fn gpu_types_of_jobs_for_their_weight() {
        // Running on a typed node: the types of its GRES detail.
        let mut run = raw(1, JOB_RUNNING);
        run.start_time = 200;
        run.nodes = vec!["a1".into(), "h1".into()];
        run.gres_detail = vec![
            "gpu:a100:2(IDX:0-1)".into(),
            "gpu:a100:1(IDX:4),gpu:h100:2(IDX:0-1)".into(),
        ];
        run.tres_alloc_str = "cpu=4,node=2,gres/gpu=5".into();
        // Running with an untyped detail on an l40s node: its node's type.
        let mut plain = raw(2, JOB_RUNNING);
        plain.start_time = 200;
        plain.nodes = vec!["l1".into()];
        plain.gres_detail = vec!["gpu:4(IDX:0-3)".into()];
        plain.tres_alloc_str = "cpu=4,node=1,gres/gpu=4".into();
        // Pending, asking for a type.
        let mut pend = raw(3, JOB_PENDING);
        pend.tres_per_node = "gres:gpu:a100:2".into();
        pend.tres_req_str = "cpu=1,node=1,gres/gpu=2".into();
        let mut snap = snapshot_of(&[run, plain, pend]);
        snap.nodes = [("a1", "gpu:a100:8(S:0-1)"), ("l1", "gpu:l40s:4")]
            .iter()
            .map(|(n, g)| {
                node_of(&RawNode {
                    name: n.to_string(),
                    gres: g.to_string(),
                    ..RawNode::default()
                })
            })
            .collect();
        types_from_nodes(&mut snap);
        let types = |j: &SlurmJob| j.gpu_types.clone().into_iter().collect::<Vec<_>>();
        assert_eq!(
            types(&snap.running[0]),
            [("a100".to_string(), 3), ("h100".to_string(), 2)]
        );
        assert_eq!(types(&snap.running[1]), [("l40s".to_string(), 4)]);
        assert_eq!(types(&snap.pending[0]), [("a100".to_string(), 2)]);
        assert_eq!(snap.nodes[0].gpus_by_type["a100"], 8);
        let w = compass_core::fairshare::GpuWeights::new([("a100", 2.0), ("h100", 4.0)]).unwrap();
        assert_eq!(snap.running[0].charge_rate(&w), 3.0 * 2.0 + 2.0 * 4.0);
        assert_eq!(snap.running[1].charge_rate(&w), 4.0);
        assert_eq!(snap.weighted_capacity(&w), Some(8.0 * 2.0 + 4.0));
    }

    #[test]
    fn pending_jobs_take_the_highest_tier_of_their_partitions() {
        let mut a = raw(1, JOB_PENDING);
        a.partition = "gpu,debug".into();
        let mut b = raw(2, JOB_PENDING);
        b.partition = "gpu".into();
        let mut c = raw(3, JOB_PENDING);
        c.partition = "gone".into();
        let mut snap = snapshot_of(&[a, b, c]);
        set_tiers(
            &mut snap,
            &[("gpu".into(), 1), ("debug".into(), 10), ("cpu".into(), 1)],
        );
        let tiers: Vec<u16> = snap.pending.iter().map(|j| j.tier).collect();
        assert_eq!(tiers, [10, 1, 0]);
        assert_eq!(snap.pending[0].as_pending().tier, 10);
    }

    #[test]
    fn priority_beyond_the_site_factor_is_reported() {
        // All other weights 0: priority = site factor - nice.
        let mut r = RawJob {
            site_factor: NICE_OFFSET + wire_factor(5000, 3),
            nice: NICE_OFFSET + 3,
            priority: 5000,
            ..raw(1, JOB_PENDING)
        };
        assert_eq!(priority_offset(&r), None);
        r.priority = 5001; // rounding
        assert_eq!(priority_offset(&r), None);
        // PriorityWeightQOS (or Age, ...) left on: 1200 more.
        r.priority = 6200;
        assert_eq!(priority_offset(&r), Some(1200));
        assert_eq!(
            snapshot_of(&[r.clone()]).priority_offsets,
            [(JobId(1), 1200)]
        );
        // Held (priority 0) or never given a factor by compass: nothing.
        r.priority = 0;
        assert_eq!(priority_offset(&r), None);
        let fresh = RawJob {
            site_factor: NICE_OFFSET,
            priority: 777,
            ..raw(2, JOB_PENDING)
        };
        assert_eq!(priority_offset(&fresh), None);
    }

    #[test]
    fn wire_factor_cancels_nice() {
        assert_eq!(wire_factor(1000, 0), 1000);
        assert_eq!(wire_factor(1000, 5), 1005);
        assert_eq!(wire_factor(1000, -7), 993);
        assert_eq!(wire_factor(3, -10), 0);
        assert_eq!(wire_factor(u32::MAX, 10), i32::MAX as u32 - 2);
    }

    #[test]
    fn held_factor_inverts_the_wire_factor() {
        // What compass pushed for factor 1000 on a job with nice 5 (and -7)
        // reads back as 1000.
        for nice in [5i64, -7, 0] {
            let r = RawJob {
                site_factor: NICE_OFFSET + wire_factor(1000, nice),
                nice: (i64::from(NICE_OFFSET) + nice) as u32,
                ..raw(1, JOB_PENDING)
            };
            assert_eq!(held_factor(&r), Some(1000), "nice {nice}");
        }
        // Slurm's default site factor (0) is no compass factor.
        let r = RawJob {
            site_factor: NICE_OFFSET,
            ..raw(2, JOB_PENDING)
        };
        assert_eq!(held_factor(&r), None);
        let s = snapshot_of(&[
            RawJob {
                site_factor: NICE_OFFSET + 77,
                ..raw(3, JOB_PENDING)
            },
            r,
        ]);
        assert_eq!(s.site_factors, vec![(JobId(3), 77)]);
        assert!(s.priority_offsets.is_empty());
    }

    #[test]
    fn gpu_counts_from_tres_strings() {
        assert_eq!(
            tres_gpus("cpu=4,mem=1000M,node=1,billing=4,gres/gpu=8"),
            Some(8)
        );
        assert_eq!(tres_gpus("cpu=4,gres/gpu:a100=2,gres/gpu=2"), Some(2));
        assert_eq!(tres_gpus("cpu=4,node=1"), None);
        assert_eq!(tres_gpus(""), None);
        assert_eq!(gres_gpus("gres:gpu:4"), Some(4));
        assert_eq!(gres_gpus("gres/gpu:a100:2"), Some(2));
        assert_eq!(gres_gpus("gres:gpu"), Some(1));
        assert_eq!(gres_gpus("gres:gpu:a100"), Some(1));
        assert_eq!(gres_gpus("gres:mps:100,gres:gpu:3"), Some(3));
        assert_eq!(gres_gpus("gres:mps:100"), None);
        assert_eq!(gres_gpus(""), None);
    }

    #[test]
    fn node_gpus_of_socket_bound_typed_and_multi_type_gres() {
        for (gres, gpus) in [
            ("gpu:8", 8),
            ("gpu:8(S:0-1)", 8),
            ("gpu:a100:8(S:0-1)", 8),
            ("gpu:a100:4,gpu:h100:4", 8),
            ("gpu:a100:4(S:0),gpu:h100:4(S:1),shard:8(S:0-1)", 8),
            ("shard:8", 0),
            ("(null)", 0),
            ("", 0),
        ] {
            let n = node_of(&RawNode {
                name: "n1".into(),
                gres: gres.into(),
                ..RawNode::default()
            });
            assert_eq!(n.gpus, gpus, "{gres}");
        }
        // A TRES string naming only the typed entry, and a typed request.
        assert_eq!(tres_gpus("cpu=2,gres/gpu:a100=2"), Some(2));
        assert_eq!(gres_gpus("gres:gpu:a100:2,gres:gpu:h100:2"), Some(4));
        assert_eq!(detail_gpus("gpu:a100:2(IDX:0-1),gpu:h100:1(IDX:4)"), 3);
    }

    #[test]
    fn site_needs_and_node_traits_for_the_planner() {
        // An a100 node of the site lab, half its CPUs and some memory taken.
        let n = node_of(&RawNode {
            name: "n3".into(),
            gres: "gpu:a100:8(S:0-1)".into(),
            state: 5,
            partitions: vec!["gpu".into()],
            features: "a100,ib".into(),
            cpus: 64,
            real_memory_mb: 512_000,
            alloc_cpus: 32,
            alloc_mem_mb: 12_000,
            ..RawNode::default()
        });
        let t = n.traits.expect("libslurm nodes carry traits");
        assert_eq!((t.gpus, t.free_cpus, t.free_mem_mb), (8, 32, 500_000));
        assert_eq!(t.gpu_types.iter().collect::<Vec<_>>(), ["a100"]);
        assert!(t.features.contains("ib") && t.partitions.contains("gpu"));
        // A CPU-only node: no GPU type, no GPUs.
        let c = node_of(&RawNode {
            name: "n15".into(),
            gres: "(null)".into(),
            cpus: 64,
            ..RawNode::default()
        });
        assert_eq!((c.gpus, c.traits.unwrap().gpu_types.len()), (0, 0));

        // A pending job: `-p debug,gpu --gres=gpu:l40s:2 -C l40s -x n9
        // -c 16 --mem-per-cpu=2000` on one node.
        let mut r = raw(8, JOB_PENDING);
        r.partition = "debug,gpu".into();
        r.features = "l40s".into();
        r.exc_nodes = vec!["n9".into()];
        r.tres_per_node = "gres:gpu:l40s:2".into();
        r.num_cpus = 16;
        r.pn_min_cpus = 16;
        r.pn_min_memory = 2000 | MEM_PER_CPU;
        let s = snapshot_of(&[r.clone()]);
        let need = &s.job_needs[0];
        assert_eq!(need.job, JobId(8));
        let n = &need.needs;
        assert_eq!(n.partitions, ["debug", "gpu"]);
        assert_eq!(
            (n.constraint.as_str(), n.gpu_type.as_deref()),
            ("l40s", Some("l40s"))
        );
        assert!(n.excluded.contains("n9"));
        assert_eq!((n.cpus_per_node, n.mem_per_node_mb), (16, 32_000));
        // Per task: CPUs split over the instances; memory per node as is.
        r.tres_per_node.clear();
        r.tres_per_task = "gres:gpu:1".into();
        r.num_tasks = 4;
        r.pn_min_cpus = 1;
        r.pn_min_memory = 8000;
        let n = needs_of(&r, instances_of(&r));
        assert_eq!(
            (n.gpu_type, n.cpus_per_node, n.mem_per_node_mb),
            (None, 4, 8000)
        );

        // A running job holds its allocation's CPUs and memory per node.
        let mut run = raw(9, JOB_RUNNING);
        run.start_time = 100;
        run.tres_alloc_str = "cpu=32,mem=64000M,node=2,billing=32,gres/gpu=8".into();
        run.nodes = vec!["n1".into(), "n2".into()];
        assert_eq!(holdings_of(&run), (16, 32_000));
        let s = snapshot_of(&[run]);
        assert_eq!(
            (s.job_needs[0].cpus_per_node, s.job_needs[0].mem_per_node_mb),
            (16, 32_000)
        );
    }

    /// QOS priorities: read only when weighted and with slurmdbd; a failing
    /// sacctmgr is not run again every cycle, and the last read is kept.
    #[test]
    fn qos_priorities_come_from_sacctmgr_only_when_they_matter() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("compass-qos-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let calls = dir.join("calls");
        let script = dir.join("sacctmgr");
        let write = |body: &str| {
            std::fs::write(
                &script,
                format!("#!/bin/sh\necho x >> {}\n{body}\n", calls.display()),
            )
            .unwrap();
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        let count = || {
            std::fs::read_to_string(&calls)
                .unwrap_or_default()
                .lines()
                .count()
        };
        write("printf 'normal|0\\nhigh|100\\n'");
        let s = LibSlurm::new(None).with_sacctmgr(script.to_str().unwrap());
        let mut conf = PriorityConf {
            weight_qos: 0,
            accounting_storage_type: "accounting_storage/slurmdbd".into(),
            ..PriorityConf::default()
        };
        assert!(s.qos_priorities(&conf).source.starts_with("not weighed"));
        conf.weight_qos = 1000;
        conf.accounting_storage_type = "accounting_storage/none".into();
        assert!(s
            .qos_priorities(&conf)
            .source
            .starts_with("none: no accounting database"));
        assert_eq!(count(), 0);
        conf.accounting_storage_type = "accounting_storage/slurmdbd".into();
        let q = s.qos_priorities(&conf);
        assert_eq!(q.by_name["high"], 100);
        assert!(q.source.starts_with("sacctmgr, read"), "{}", q.source);
        // Cached: not run again within QOS_REFRESH.
        s.qos_priorities(&conf);
        assert_eq!(count(), 1);
        // A failing sacctmgr (forced due now): the last read is kept, and it
        // is not run again on the next cycle.
        write("echo 'sacctmgr: error: slurmdbd: no connection' >&2; exit 1");
        s.qos.lock().unwrap().tried = None;
        let q = s.qos_priorities(&conf);
        assert_eq!(q.by_name["high"], 100);
        assert!(q.source.contains("sacctmgr failed"), "{}", q.source);
        assert!(q.source.contains("no connection"), "{}", q.source);
        s.qos_priorities(&conf);
        assert_eq!(count(), 2);
        // Never read: every QOS at 0, and why.
        let fresh = LibSlurm::new(None).with_sacctmgr(script.to_str().unwrap());
        let q = fresh.qos_priorities(&conf);
        assert!(q.by_name.is_empty());
        assert!(
            q.source.contains("every QOS taken as priority 0"),
            "{}",
            q.source
        );
        // ... and a failing sacctmgr is not run every cycle.
        fresh.qos_priorities(&conf);
        assert_eq!(count(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pending_job_reads_request_flags_and_nice() {
        let mut r = raw(7, JOB_PENDING);
        r.start_time = 999; // Slurm's estimate: must not become a run start
        r.nice = NICE_OFFSET + 10;
        r.tres_per_node = "gres:gpu:2".into();
        r.num_nodes = 3;
        r.admin_comment = "hello;compass:min_runtime=5400,resumable=1".into();
        r.qos = "high".into();
        r.priority = 123_456;
        let s = snapshot_of(&[r.clone()]);
        assert_eq!(s.pending.len(), 1);
        // Its QOS name and Slurm priority, for the QOS bands and the check
        // that Slurm follows compass's order (issue 12).
        assert_eq!(s.pending[0].qos, "high");
        assert_eq!(s.priorities, [(JobId(7), 123_456)]);
        let j = &s.pending[0];
        assert_eq!((j.job, j.gpus, j.start, j.end), (JobId(7), 6, None, None));
        assert_eq!(
            (j.min_runtime_s, j.resumable, j.priority),
            (5400, true, -10)
        );
        assert_eq!(j.account, "acct-a");
        // tres_req_str wins when it names GPUs.
        r.tres_req_str = "cpu=1,node=3,gres/gpu=4".into();
        assert_eq!(snapshot_of(&[r]).pending[0].gpus, 4);
    }

    #[test]
    fn the_jobs_user_is_slurms_name_else_the_passwd_name_of_its_uid() {
        let mut named = raw(1, JOB_PENDING);
        (named.user_id, named.user_name) = (4242, "alice".into());
        // 22.05 sends no user_name: the passwd name of user_id (0 is root).
        let mut root = raw(2, JOB_PENDING);
        root.user_id = 0;
        let s = snapshot_of(&[named, root]);
        let users: Vec<&str> = s.pending.iter().map(|j| j.user.as_str()).collect();
        assert_eq!(users, ["alice", "root"]);
    }

    #[test]
    fn running_and_ended_jobs_use_allocation() {
        let mut run = raw(1, JOB_RUNNING);
        run.start_time = 200;
        run.end_time = 4000; // expected end: ignored while running
        run.tres_alloc_str = "cpu=2,node=1,gres/gpu=8".into();
        run.tres_per_task = "gres:gpu:1".into();
        let mut done = raw(2, 3);
        done.start_time = 200;
        done.end_time = 300;
        done.tres_alloc_str = "cpu=2,node=1,gres/gpu=1".into();
        let mut never_ran = raw(3, 4);
        never_ran.start_time = 250;
        never_ran.end_time = 250;
        let s = snapshot_of(&[run, done, never_ran]);
        assert_eq!(s.running.len(), 1);
        assert_eq!(
            (s.running[0].gpus, s.running[0].start, s.running[0].end),
            (8, Some(200), None)
        );
        assert_eq!(s.ended.len(), 1);
        assert_eq!(
            (s.ended[0].job, s.ended[0].start, s.ended[0].end),
            (JobId(2), Some(200), Some(300))
        );
        assert_eq!(s.ended[0].min_runtime_s, 0);
        assert!(s.pending.is_empty());
    }

    #[test]
    fn allocations_eligibility_and_nodes_for_enforcement() {
        assert_eq!(detail_gpus("gpu:4(IDX:0-3)"), 4);
        assert_eq!(detail_gpus("gpu:a100:3(IDX:0,2-3),mps:0(0/100)"), 3);
        assert_eq!(detail_gpus("mps:50(0/100)"), 0);
        let mut run = raw(5, JOB_RUNNING);
        run.start_time = 100;
        run.tres_per_node = "gres:gpu:8".into();
        run.num_nodes = 2;
        run.nodes = vec!["n1".into(), "n2".into()];
        run.gres_detail = vec!["gpu:8(IDX:0-7)".into(), "gpu:6(IDX:0-5)".into()];
        let s = snapshot_of(&[run.clone()]);
        assert_eq!(
            s.running[0].alloc,
            vec![("n1".to_string(), 8), ("n2".to_string(), 6)]
        );
        // Without details: the GPUs split over the nodes.
        run.gres_detail.clear();
        assert_eq!(
            alloc_of(&run, 5),
            vec![("n1".to_string(), 3), ("n2".to_string(), 2)]
        );

        let mut p = raw(6, JOB_PENDING);
        p.priority = 100;
        p.tres_per_task = "gres:gpu:4".into();
        p.num_tasks = 2;
        p.state_reason = WAIT_RESOURCES;
        let j = &snapshot_of(&[p.clone()]).pending[0];
        assert_eq!(
            (j.instances, j.gpus, j.shape(), j.eligible),
            (2, 8, (2, 4), true)
        );
        for (reason, prio, req, ok) in [
            (8, 100, "", false),   // held
            (9, 100, "", false),   // begin time
            (2, 100, "", false),   // dependency
            (1, 0, "", false),     // priority 0: held
            (1, 100, "n1", false), // pinned with -w
            (0, 100, "", true),
        ] {
            p.state_reason = reason;
            p.priority = prio;
            p.req_nodes = req.into();
            p.eligible_time = 5000;
            let j = &snapshot_of(&[p.clone()]).pending[0];
            assert_eq!(j.eligible, ok, "reason {reason} prio {prio} req {req}");
            assert_eq!(j.begin_after, (reason == 9).then_some(5000));
        }

        let node = |state: u32| {
            node_of(&RawNode {
                name: "n1".into(),
                gres: "gpu:8".into(),
                state,
                reason: String::new(),
                ..RawNode::default()
            })
        };
        assert_eq!(node(2).state, NodeState::Up); // idle
        assert_eq!(node(5).gpus, 8);
        assert_eq!(node(3 | ffi::NODE_STATE_DRAIN).state, NodeState::Draining);
        assert_eq!(node(2 | ffi::NODE_STATE_DRAIN).state, NodeState::Drained);
        assert_eq!(node(1 | ffi::NODE_STATE_DRAIN).state, NodeState::Down);
        assert_eq!(node(2 | ffi::NODE_STATE_FAIL).state, NodeState::Down);

        let c = cancel_comment("compass:min_runtime=0,resumable=0", "job 5 compass: x");
        assert_eq!(
            c,
            "compass:min_runtime=0,resumable=0;preempted: job 5 compass  x"
        );
        let f = compass_slurm::flags::parse_admin_comment(&c).unwrap();
        assert_eq!((f.min_runtime_s, f.resumable), (0, false));
        assert_eq!(cancel_comment("", "why"), "preempted: why");
    }
}
