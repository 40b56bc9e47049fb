//! Slurm I/O behind traits, so the cycle runs the same against real Slurm and
//! against the in-memory [`FakeSlurm`] of the tests.
//!
//! Sources: [`libslurm::LibSlurm`] (`slurm = "libslurm"`: the real
//! controller through libslurm), [`FileSlurm`] (`slurm = "file"`: demos and
//! browser tests) and none (`slurm = "none"`: API and ledger ingest endpoint
//! only).

use compass_core::fairshare::{GpuWeights, Interval, Kind, OrgTree, PendingJob, UnixSecs};
use compass_core::gres::GpuCounts;
use compass_core::model::JobId;
use compass_core::preempt::{NodeNeeds, NodeTraits};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::error::{BudgetError, Result};

mod ffi;
pub mod libslurm;
pub mod priority;

pub use priority::PriorityConf;

/// State of one job as the service needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub job: JobId,
    pub account: String,
    /// The job's owner: Slurm's user name (from its `user_id` when Slurm
    /// sends no name); empty when the source does not say. PrivateData
    /// filters and `compass why --me` read it.
    #[serde(default)]
    pub user: String,
    /// Total GPUs of the job.
    pub gpus: u32,
    /// From the SPANK `--min-runtime` option (0: unallocated time).
    pub min_runtime_s: u64,
    /// From the SPANK `--resumable` option.
    pub resumable: bool,
    /// Job priority within its team: minus Slurm's nice value.
    pub priority: i64,
    pub submit: UnixSecs,
    /// Start of the current run (running and ended jobs).
    pub start: Option<UnixSecs>,
    /// End of the run (ended jobs still reported by Slurm).
    pub end: Option<UnixSecs>,
    /// Running jobs: GPUs held on each node, by node name (empty when the
    /// source does not say; enforcement then leaves the job alone).
    #[serde(default)]
    pub alloc: Vec<(String, u32)>,
    /// Pending jobs: instances `w` of the request (`gpus / w` GPUs each, one
    /// node per instance); 0 when unknown (one instance of `gpus`).
    #[serde(default)]
    pub instances: u32,
    /// Pending jobs: could start now if there were room (not held, not
    /// waiting for a dependency or a begin time). Only eligible jobs may
    /// cause preemptions.
    #[serde(default = "yes")]
    pub eligible: bool,
    /// Pending jobs: the begin time Slurm waits for, if it is in the future
    /// (a requeued job waits `cred_expire + 1` s unless it is reset).
    #[serde(default)]
    pub begin_after: Option<UnixSecs>,
    /// Typed GPUs among `gpus`, type -> count: what a running or ended job
    /// holds (`gres_detail_str`, else the types of its nodes), what a
    /// pending job asks for (`--gres=gpu:a100:2`). Empty: untyped. Prices
    /// the job with `[gpu_weights]` ([`SlurmJob::weight`]).
    #[serde(default)]
    pub gpu_types: BTreeMap<String, u32>,
    /// Pending jobs: the partition `PriorityTier` (the highest of the job's
    /// partitions'; 0 when unknown). The order is by tier first, as Slurm
    /// schedules, and by fair share within a tier.
    #[serde(default)]
    pub tier: u16,
    /// The job's QOS name (empty: none or unknown).
    #[serde(default)]
    pub qos: String,
    /// Pending jobs: the priority of its QOS when the site weighs QOS
    /// (`PriorityWeightQOS` > 0), else 0; set by the cycle from
    /// [`SlurmSnapshot::qos_priorities`]. Within a tier the order is by QOS
    /// priority, then fair share.
    #[serde(default)]
    pub qos_priority: u32,
}

fn yes() -> bool {
    true
}

impl SlurmJob {
    /// The kind of the job's time under `tree` ([`Kind::of_job`]):
    /// allocated only when its account is in the tree and its min runtime
    /// is > 0. The ledger, the queue order, enforcement and `compass why`
    /// all classify through it.
    pub fn kind_in(&self, tree: Option<&OrgTree>) -> Kind {
        Kind::of_job(tree, &self.account, self.min_runtime_s)
    }

    /// A job with only the fields every source knows; the enforcement fields
    /// take their defaults (no allocation, one instance, eligible).
    pub fn basic(
        job: JobId,
        account: &str,
        gpus: u32,
        min_runtime_s: u64,
        resumable: bool,
        priority: i64,
        submit: UnixSecs,
    ) -> Self {
        SlurmJob {
            job,
            account: account.to_string(),
            user: String::new(),
            gpus,
            min_runtime_s,
            resumable,
            priority,
            submit,
            start: None,
            end: None,
            alloc: Vec::new(),
            instances: 0,
            eligible: true,
            begin_after: None,
            gpu_types: BTreeMap::new(),
            tier: 0,
            qos: String::new(),
            qos_priority: 0,
        }
    }

    /// The job's GPUs by type (typed ones from `gpu_types`, the rest
    /// untyped).
    pub fn gpu_counts(&self) -> GpuCounts {
        GpuCounts {
            untyped: u64::from(self.gpus),
            by_type: self
                .gpu_types
                .iter()
                .map(|(t, n)| (t.clone(), u64::from(*n)))
                .collect(),
        }
    }

    /// Mean weight of the job's GPUs under `[gpu_weights]` (1.0 untyped).
    pub fn weight(&self, w: &GpuWeights) -> f64 {
        w.mean_weight(&self.gpu_counts())
    }

    /// Weighted GPUs: what one second of this job costs its budget.
    pub fn charge_rate(&self, w: &GpuWeights) -> f64 {
        f64::from(self.gpus) * self.weight(w)
    }

    /// The request as `w` instances of `g` GPUs (one node per instance):
    /// `instances` when known, else one instance of all its GPUs.
    pub fn shape(&self) -> (u32, u32) {
        let w = self.instances.max(1);
        if self.gpus == 0 {
            return (w, 0);
        }
        if self.gpus.is_multiple_of(w) {
            (w, self.gpus / w)
        } else {
            (1, self.gpus)
        }
    }

    pub fn as_pending(&self) -> PendingJob {
        PendingJob {
            job: self.job,
            account: self.account.clone(),
            gpus: self.gpus,
            min_runtime_s: self.min_runtime_s,
            priority: self.priority,
            submit: self.submit,
            tier: self.tier,
            qos_priority: self.qos_priority,
        }
    }

    /// The ledger interval of a running or ended job, priced with `w`, its
    /// kind decided under `tree` ([`SlurmJob::kind_in`]: an account outside
    /// the tree runs unallocated time, whatever its min runtime).
    pub fn as_interval(&self, w: &GpuWeights, tree: Option<&OrgTree>) -> Option<Interval> {
        Some(Interval {
            job: self.job,
            account: self.account.clone(),
            gpus: self.gpus,
            start: self.start?,
            end: self.end,
            kind: self.kind_in(tree),
            weight: self.weight(w),
        })
    }
}

/// One read of the controller's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmSnapshot {
    pub pending: Vec<SlurmJob>,
    pub running: Vec<SlurmJob>,
    /// Jobs that ended recently and are still reported (with `end`).
    pub ended: Vec<SlurmJob>,
    /// GPUs of every node (`Gres=gpu:N` summed), when the source knows them;
    /// otherwise the config's `capacity_gpus` is the cluster's capacity.
    #[serde(default)]
    pub capacity_gpus: Option<u32>,
    /// Every node with its GPUs and state, when the source knows them
    /// (libslurm does); without nodes the cycle enforces nothing.
    #[serde(default)]
    pub nodes: Vec<SlurmNode>,
    /// Pending jobs: the site factor Slurm holds, as compass's factor (the
    /// wire value minus the job's nice), when the source knows it. The
    /// cycle keys the next order on these, so a restart of the service, or
    /// a factor changed behind its back, costs no needless updates.
    #[serde(default)]
    pub site_factors: Vec<(JobId, u32)>,
    /// What pending jobs need of a node and what running jobs hold on each
    /// of theirs, besides GPUs, when the source knows it (libslurm does;
    /// issue 12). A job without an entry needs nothing more and holds
    /// nothing the planner counts.
    #[serde(default)]
    pub job_needs: Vec<JobNeeds>,
    /// Pending jobs whose Slurm priority is not compass's factor: what
    /// Slurm adds (`PriorityWeight*` other than 0), when the source knows
    /// it. The cycle warns: such weights reorder compass's queue.
    #[serde(default)]
    pub priority_offsets: Vec<(JobId, i64)>,
    /// Pending jobs: Slurm's priority (held jobs, priority 0, are left
    /// out), when the source knows it. The cycle checks it follows
    /// compass's order ([`priority::inversions`]).
    #[serde(default)]
    pub priorities: Vec<(JobId, u32)>,
    /// slurm.conf's priority weights and `PreemptType`, when the source
    /// knows them (libslurm does). `None`: the site factors are one apart
    /// (all other weights taken as 0) and enforcement is not held.
    #[serde(default)]
    pub priority_conf: Option<PriorityConf>,
    /// QOS priorities by QOS name, and where they came from.
    #[serde(default)]
    pub qos_priorities: priority::QosPriorities,
}

impl SlurmSnapshot {
    /// The cluster's capacity in weighted GPUs: the nodes' GPUs each at its
    /// type's weight, when the source reports nodes; else `capacity_gpus`
    /// (untyped); `None` when neither is known or it is 0.
    pub fn weighted_capacity(&self, w: &GpuWeights) -> Option<f64> {
        let c = if self.nodes.is_empty() {
            f64::from(self.capacity_gpus?)
        } else {
            self.nodes.iter().map(|n| w.weighted(&n.gpu_counts())).sum()
        };
        (c > 0.0).then_some(c)
    }
}

/// One job's needs (pending) or holdings (running) besides GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobNeeds {
    pub job: JobId,
    /// Pending jobs: partitions, constraint, excluded nodes, GPU type, CPUs
    /// and memory per node.
    #[serde(default)]
    pub needs: NodeNeeds,
    /// Running jobs: CPUs and memory (MB) held on each of their nodes.
    #[serde(default)]
    pub cpus_per_node: u32,
    #[serde(default)]
    pub mem_per_node_mb: u64,
}

/// Whether a node takes new jobs, as Slurm reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Takes jobs (idle, mixed or allocated).
    #[default]
    Up,
    /// DRAIN set, jobs still running (`draining` in sinfo).
    Draining,
    /// DRAIN set and empty (`drained`).
    Drained,
    /// Down, failed or not responding: takes no jobs.
    Down,
}

/// One node as enforcement needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmNode {
    pub name: String,
    /// GPUs of the node (`Gres=gpu:N`).
    pub gpus: u32,
    #[serde(default)]
    pub state: NodeState,
    /// Slurm's reason for a drained or down node.
    #[serde(default)]
    pub reason: String,
    /// Partitions, features, GPU types, free CPUs and memory, when the
    /// source knows them (libslurm does); `None`: the planner counts the
    /// node as eligible for every job.
    #[serde(default)]
    pub traits: Option<NodeTraits>,
    /// Typed GPUs of the node, type -> count (`gpu:a100:4,gpu:h100:4`);
    /// empty: untyped, or the one type of `traits` for all of them.
    #[serde(default)]
    pub gpus_by_type: BTreeMap<String, u32>,
}

impl SlurmNode {
    /// The node's GPUs by type: `gpus_by_type`, else all `gpus` of the one
    /// type its traits name, else untyped.
    pub fn gpu_counts(&self) -> GpuCounts {
        let mut by_type: BTreeMap<String, u64> = self
            .gpus_by_type
            .iter()
            .map(|(t, n)| (t.clone(), u64::from(*n)))
            .collect();
        if by_type.is_empty() {
            if let Some(t) = self.traits.as_ref().filter(|t| t.gpu_types.len() == 1) {
                by_type.extend(
                    t.gpu_types
                        .iter()
                        .map(|ty| (ty.clone(), u64::from(self.gpus))),
                );
            }
        }
        GpuCounts {
            untyped: u64::from(self.gpus),
            by_type,
        }
    }
}

impl NodeState {
    /// DRAIN is set (draining or drained).
    pub fn drain_set(self) -> bool {
        matches!(self, NodeState::Draining | NodeState::Drained)
    }
}

/// Reads jobs from Slurm.
pub trait SlurmSource: Send + Sync {
    fn snapshot(&self) -> Result<SlurmSnapshot>;
}

/// Writes the order into Slurm.
pub trait SlurmSink: Send + Sync {
    /// Sets the site factor of the given jobs (only those that changed).
    fn set_site_factors(&self, factors: &[(JobId, u32)]) -> Result<()>;
}

/// Acts on Slurm for enforcement (issue 5): preemptions and node drains.
pub trait SlurmActions: Send + Sync {
    /// Requeues a running job and resets its begin time to now, so it can
    /// start again at once (Slurm otherwise waits `cred_expire + 1` s).
    fn requeue(&self, job: JobId) -> Result<()>;
    /// Resets a pending job's begin time to now (a requeued job whose begin
    /// time could not be reset at requeue time).
    fn start_now(&self, job: JobId) -> Result<()>;
    /// Writes `reason` into the job's record (admin comment) and cancels it.
    fn cancel(&self, job: JobId, reason: &str) -> Result<()>;
    /// Sets DRAIN on a node with a reason (running jobs continue).
    /// [`BudgetError::NotFound`] for a node Slurm does not know.
    fn drain(&self, node: &str, reason: &str) -> Result<()>;
    /// Returns a drained node to service (`State=RESUME`).
    fn resume(&self, node: &str) -> Result<()>;
}

/// One action the fake received, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FakeAction {
    Requeue(JobId),
    StartNow(JobId),
    Cancel(JobId, String),
    Drain(String, String),
    Resume(String),
}

/// An in-memory Slurm: jobs submitted, started and ended by the test, and a
/// record of every site-factor update pushed to it.
#[derive(Default)]
pub struct FakeSlurm {
    inner: Mutex<FakeInner>,
}

#[derive(Default)]
struct FakeInner {
    jobs: BTreeMap<JobId, SlurmJob>,
    down: bool,
    factors: HashMap<JobId, u32>,
    pushes: Vec<Vec<(JobId, u32)>>,
    /// Nodes `(name, gpus, drain set, down)`; empty: the fake reports none.
    nodes: Vec<(String, u32, bool, bool)>,
    actions: Vec<FakeAction>,
    /// Admin comment of each job (cancel reasons land here).
    comments: HashMap<JobId, String>,
    now: UnixSecs,
    /// Node traits by name (reported only when every node has them).
    traits: HashMap<String, NodeTraits>,
    /// Needs and holdings by job.
    needs: BTreeMap<JobId, JobNeeds>,
    /// What slurm.conf's other priority terms add to each pending job
    /// (age, job size, QOS...; issue 12).
    extra: HashMap<JobId, i64>,
    /// slurm.conf's priority settings, reported when set.
    conf: Option<PriorityConf>,
    /// QOS priorities by name.
    qos: BTreeMap<String, u32>,
}

impl FakeSlurm {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces a job.
    pub fn put(&self, job: SlurmJob) {
        self.lock().jobs.insert(job.job, job);
    }
    pub fn start(&self, job: JobId, at: UnixSecs) {
        if let Some(j) = self.lock().jobs.get_mut(&job) {
            j.start = Some(at);
            j.end = None;
        }
    }
    pub fn end(&self, job: JobId, at: UnixSecs) {
        if let Some(j) = self.lock().jobs.get_mut(&job) {
            j.end = Some(at);
        }
    }
    /// Starts a job on nodes: `alloc` = GPUs per node name.
    pub fn start_on(&self, job: JobId, at: UnixSecs, alloc: &[(&str, u32)]) {
        if let Some(j) = self.lock().jobs.get_mut(&job) {
            j.start = Some(at);
            j.end = None;
            j.begin_after = None;
            j.alloc = alloc.iter().map(|(n, g)| (n.to_string(), *g)).collect();
        }
    }
    /// Adds a node with `gpus` GPUs (up).
    pub fn add_node(&self, name: &str, gpus: u32) {
        self.lock()
            .nodes
            .push((name.to_string(), gpus, false, false));
    }
    /// Gives a node partitions, features, GPU types, CPUs and memory.
    pub fn set_traits(&self, traits: NodeTraits) {
        self.lock().traits.insert(traits.name.clone(), traits);
    }
    /// What a job needs (pending) or holds (running) besides GPUs.
    pub fn set_needs(&self, needs: JobNeeds) {
        self.lock().needs.insert(needs.job, needs);
    }
    /// The priority settings the fake reports (`None`: none, as before
    /// issue 12).
    pub fn set_priority_conf(&self, conf: Option<PriorityConf>) {
        self.lock().conf = conf;
    }
    /// QOS priorities by QOS name, as sacctmgr would report them.
    pub fn set_qos_priorities(&self, qos: &[(&str, u32)]) {
        self.lock().qos = qos.iter().map(|(n, p)| (n.to_string(), *p)).collect();
    }
    /// What the other priority terms add to a job's Slurm priority.
    pub fn set_extra_priority(&self, job: JobId, extra: i64) {
        self.lock().extra.insert(job, extra);
    }
    /// Marks a node down (or up again).
    pub fn set_node_down(&self, name: &str, down: bool) {
        if let Some(n) = self.lock().nodes.iter_mut().find(|n| n.0 == name) {
            n.3 = down;
        }
    }
    /// The fake's clock: cancels end jobs at this time, requeues set begin
    /// times relative to it.
    pub fn set_now(&self, now: UnixSecs) {
        self.lock().now = now;
    }
    /// Every action received, in order.
    pub fn actions(&self) -> Vec<FakeAction> {
        self.lock().actions.clone()
    }
    /// A job as the fake holds it.
    pub fn job(&self, job: JobId) -> Option<SlurmJob> {
        self.lock().jobs.get(&job).cloned()
    }
    /// The admin comment of a job.
    pub fn comment(&self, job: JobId) -> Option<String> {
        self.lock().comments.get(&job).cloned()
    }
    /// Forgets a job (as Slurm does after MinJobAge).
    pub fn purge(&self, job: JobId) {
        self.lock().jobs.remove(&job);
    }
    /// Simulates a controller that does not answer.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }
    /// The current site factor of every job.
    pub fn factors(&self) -> HashMap<JobId, u32> {
        self.lock().factors.clone()
    }
    /// Every push, in order.
    pub fn pushes(&self) -> Vec<Vec<(JobId, u32)>> {
        self.lock().pushes.clone()
    }
    /// Pending jobs as Slurm would order them: by site factor, descending,
    /// then job id (what `squeue --sort=-p` shows with all other weights 0).
    pub fn pending_order(&self) -> Vec<JobId> {
        let g = self.lock();
        let mut v: Vec<(u32, JobId)> = g
            .jobs
            .values()
            .filter(|j| j.start.is_none())
            .map(|j| (g.factors.get(&j.job).copied().unwrap_or(0), j.job))
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v.into_iter().map(|(_, j)| j).collect()
    }
    /// A pending job's Slurm priority: its factor plus what the other terms
    /// add ([`Self::set_extra_priority`]), floored at 1 as Slurm does.
    fn slurm_priority(g: &FakeInner, job: JobId) -> u32 {
        let p = i64::from(g.factors.get(&job).copied().unwrap_or(0))
            + g.extra.get(&job).copied().unwrap_or(0);
        p.clamp(1, i64::from(u32::MAX)) as u32
    }
    /// Pending jobs in the order Slurm's scheduler takes them: partition
    /// tier first, then priority (factor plus the other terms), then job
    /// id.
    pub fn scheduling_order(&self) -> Vec<JobId> {
        let g = self.lock();
        let mut v: Vec<(u16, u32, JobId)> = g
            .jobs
            .values()
            .filter(|j| j.start.is_none())
            .map(|j| (j.tier, Self::slurm_priority(&g, j.job), j.job))
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        v.into_iter().map(|(_, _, j)| j).collect()
    }
}

impl SlurmSource for FakeSlurm {
    fn snapshot(&self) -> Result<SlurmSnapshot> {
        let g = self.lock();
        if g.down {
            return Err(BudgetError::Slurm(
                "slurmctld is not responding (fake)".into(),
            ));
        }
        let mut s = SlurmSnapshot::default();
        for j in g.jobs.values() {
            match (j.start, j.end) {
                (None, _) => s.pending.push(j.clone()),
                (Some(_), None) => s.running.push(j.clone()),
                (Some(_), Some(_)) => s.ended.push(j.clone()),
            }
        }
        for (name, gpus, drain, down) in &g.nodes {
            let busy = s
                .running
                .iter()
                .any(|j| j.alloc.iter().any(|(n, _)| n == name));
            let state = match (down, drain, busy) {
                (true, _, _) => NodeState::Down,
                (false, true, true) => NodeState::Draining,
                (false, true, false) => NodeState::Drained,
                (false, false, _) => NodeState::Up,
            };
            s.nodes.push(SlurmNode {
                name: name.clone(),
                gpus: *gpus,
                state,
                reason: String::new(),
                traits: g.traits.get(name).cloned(),
                gpus_by_type: BTreeMap::new(),
            });
        }
        if !g.nodes.is_empty() {
            s.capacity_gpus = Some(g.nodes.iter().map(|n| n.1).sum());
        }
        s.site_factors = s
            .pending
            .iter()
            .filter_map(|j| g.factors.get(&j.job).map(|f| (j.job, *f)))
            .collect();
        s.job_needs = g
            .needs
            .values()
            .filter(|n| g.jobs.contains_key(&n.job))
            .cloned()
            .collect();
        s.priorities = s
            .pending
            .iter()
            .map(|j| (j.job, Self::slurm_priority(&g, j.job)))
            .collect();
        s.priority_offsets = s
            .pending
            .iter()
            .filter(|j| g.factors.contains_key(&j.job))
            .filter_map(|j| {
                let x = g.extra.get(&j.job).copied().unwrap_or(0);
                (x.abs() > 1).then_some((j.job, x))
            })
            .collect();
        s.priority_conf = g.conf.clone();
        if g.conf.is_some() {
            s.qos_priorities = priority::QosPriorities {
                by_name: g.qos.clone(),
                source: "fake".into(),
            };
        }
        Ok(s)
    }
}

impl SlurmSink for FakeSlurm {
    fn set_site_factors(&self, factors: &[(JobId, u32)]) -> Result<()> {
        let mut g = self.lock();
        if g.down {
            return Err(BudgetError::Slurm(
                "slurmctld is not responding (fake)".into(),
            ));
        }
        for (j, f) in factors {
            g.factors.insert(*j, *f);
        }
        g.pushes.push(factors.to_vec());
        Ok(())
    }
}

impl SlurmActions for FakeSlurm {
    fn requeue(&self, job: JobId) -> Result<()> {
        let mut g = self.lock();
        let now = g.now;
        let j = g
            .jobs
            .get_mut(&job)
            .filter(|j| j.start.is_some() && j.end.is_none())
            .ok_or_else(|| BudgetError::Slurm(format!("job {} is not running (fake)", job.0)))?;
        j.start = None;
        j.alloc.clear();
        j.begin_after = None;
        // As Slurm does (job_mgr.c, `_job_requeue_op`).
        j.submit = now;
        g.actions.push(FakeAction::Requeue(job));
        Ok(())
    }
    fn start_now(&self, job: JobId) -> Result<()> {
        let mut g = self.lock();
        if let Some(j) = g.jobs.get_mut(&job) {
            j.begin_after = None;
        }
        g.actions.push(FakeAction::StartNow(job));
        Ok(())
    }
    fn cancel(&self, job: JobId, reason: &str) -> Result<()> {
        let mut g = self.lock();
        let now = g.now;
        let j = g
            .jobs
            .get_mut(&job)
            .filter(|j| j.end.is_none())
            .ok_or_else(|| BudgetError::Slurm(format!("job {} already ended (fake)", job.0)))?;
        match j.start {
            Some(s) => j.end = Some(now.max(s)),
            None => {
                j.start = Some(now);
                j.end = Some(now);
            }
        }
        g.comments.insert(job, reason.to_string());
        g.actions.push(FakeAction::Cancel(job, reason.to_string()));
        Ok(())
    }
    fn drain(&self, node: &str, reason: &str) -> Result<()> {
        let mut g = self.lock();
        let n = g
            .nodes
            .iter_mut()
            .find(|n| n.0 == node)
            .ok_or_else(|| BudgetError::NotFound(format!("Slurm has no node `{node}`")))?;
        n.2 = true;
        g.actions
            .push(FakeAction::Drain(node.to_string(), reason.to_string()));
        Ok(())
    }
    fn resume(&self, node: &str) -> Result<()> {
        let mut g = self.lock();
        let n = g
            .nodes
            .iter_mut()
            .find(|n| n.0 == node)
            .ok_or_else(|| BudgetError::NotFound(format!("Slurm has no node `{node}`")))?;
        n.2 = false;
        g.actions.push(FakeAction::Resume(node.to_string()));
        Ok(())
    }
}

/// A Slurm stand-in backed by files, for demos and browser tests: each
/// snapshot is read from a JSON file ([`SlurmSnapshot`]); pushed site factors
/// are merged into `<file>.factors.json`.
pub struct FileSlurm {
    pub path: std::path::PathBuf,
}

impl FileSlurm {
    fn factors_path(&self) -> std::path::PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".factors.json");
        p.into()
    }
}

impl SlurmSource for FileSlurm {
    fn snapshot(&self) -> Result<SlurmSnapshot> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| BudgetError::Slurm(format!("{}: {e}", self.path.display())))?;
        serde_json::from_str(&text)
            .map_err(|e| BudgetError::Slurm(format!("{}: {e}", self.path.display())))
    }
}

impl SlurmSink for FileSlurm {
    fn set_site_factors(&self, factors: &[(JobId, u32)]) -> Result<()> {
        let p = self.factors_path();
        let mut all: BTreeMap<u64, u32> = std::fs::read_to_string(&p)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        for (j, f) in factors {
            all.insert(j.0, *f);
        }
        let text = serde_json::to_string(&all).map_err(|e| BudgetError::Slurm(e.to_string()))?;
        std::fs::write(&p, text).map_err(|e| BudgetError::Slurm(format!("{}: {e}", p.display())))
    }
}
