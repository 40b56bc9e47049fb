//! Event-driven trace simulator (paper Section 5; `docs/simulator.md`).
//!
//! Replays a trace of jobs through any [`PlacementPolicy`] on virtual time:
//! the clock jumps from one event (arrival, completion, policy tick) to the
//! next, so idle time costs nothing. Periodic policy ticks are events only
//! while jobs run. The same input gives bit-identical output.
//!
//! Queue policies ([`QueuePolicy`]): FIFO with head-of-line blocking (the
//! paper's setting) and backfill (later jobs may start when the head cannot,
//! without delaying the head's reservation; see [`QueuePolicy::Backfill`]).
//!
//! Metrics follow paper Section 5.5 (eqs. 14-17): AFR and AGU are time
//! averages over `T_peak`, the time the waiting queue is non-empty; AJCT is the
//! mean of completion minus submission, where completion includes `c` seconds
//! per migrated instance of the job (paper Section 6.5: `c` is the
//! per-migration cost, and a migration moves one instance, Section 4.3.1;
//! [`MigrationCharge`]).
//!
//! Beyond the paper (issue #10): before every policy call, the cost rule of
//! [`crate::placement::worth`] decides which running jobs may be moved
//! ([`MigrationSettings::payback`]); Theorem 1's bound is checked after every job
//! event, and the events and seconds over it are reported.

pub mod budgets;
pub mod cluster;
mod free_profile;
mod gate;
mod migration;
pub mod sizing;
pub mod stats;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use serde::{Deserialize, Serialize};

use crate::clock::{Instant as T, Seconds};
use crate::error::{CoreError, Result};
use crate::metric;
use crate::model::{Admission, ClusterSpec, JobId, JobRequest, Migration};
use crate::placement::head::Chance;
use crate::placement::pools::PoolSpec;
pub use crate::placement::worth::MoveWhen;
use crate::placement::worth::{MigrationRule, MoveCandidate};
use crate::placement::{self, PlacementPolicy, PolicyOptions};
use crate::trace::{TraceJob, MAX_TRACE_S};
use gate::{Gate, GateEvent, GateState};

pub use cluster::{build_mixed, ClusterNodes, ClusterPolicy, NodeClass, PooledPolicy, Single};
pub use migration::MigrationSettings;
pub use sizing::{nodes_for_job, size_cluster, Sizing};
pub use stats::{size_class, Percentiles, SizeWaits, WaitStats, SIZE_CLASSES};

/// Most rounds of a policy's periodic tick (the `defrag` baseline's
/// rounds) one replay runs by default ([`SimConfig::max_ticks`]); a replay
/// that would run more stops with an error. Ten million rounds are seconds
/// of replay and half a gigabyte of time series (`compass compare`); the
/// Venus sample at the default 300 s round runs about 54,000.
pub const MAX_TICKS: u64 = 10_000_000;

/// How the waiting queue is served.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueuePolicy {
    /// Strict FIFO with head-of-line blocking: only the oldest waiting job may
    /// start; when it does not fit, everything behind it waits (paper §5).
    #[default]
    Fifo,
    /// FIFO plus backfill. When the head cannot start, its *reservation* is
    /// the earliest projected completion time `t_res` at which it fits
    /// physically: running jobs end at their projected ends (start, plus
    /// duration, plus migration costs so far) and free their GPUs on their current nodes,
    /// and the head fits when `sum_n floor(free_n / g_h) >= w_h`. A later job
    /// `j` (at most [`SimConfig::backfill_depth`] of them, in queue order) may
    /// start now if the policy places it and either it ends by then
    /// (`now + duration_j <= t_res`), or the head still fits at `t_res` however
    /// `j`'s instances are laid out:
    /// `F(t_res) - w_j * ceil(g_j / g_h) >= w_h`, where `F(t_res)` is the
    /// head's fit count at `t_res` (one instance of `g_j` GPUs removes at most
    /// `ceil(g_j / g_h)` head instances from a node). The reservation is
    /// recomputed after each backfilled start. For a policy that can be
    /// forked, neither a backfilled start (tried on a fork first) nor the
    /// Compact of a departure (held back when it would delay the head,
    /// [`SimResult::compact_held_for_head`]) moves the head's start past its
    /// reservation when that can be avoided (`docs/simulator.md`).
    Backfill,
}

impl QueuePolicy {
    pub const NAMES: &'static [&'static str] = &["fifo", "backfill"];

    pub fn name(self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::Backfill => "backfill",
        }
    }

    pub fn parse_name(name: &str) -> Result<Self> {
        match name {
            "fifo" => Ok(Self::Fifo),
            "backfill" => Ok(Self::Backfill),
            other => Err(CoreError::Invalid(format!(
                "unknown queue policy `{other}`; expected fifo or backfill"
            ))),
        }
    }
}

/// How migration cost `c` is charged.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationCharge {
    /// `c` per migrated instance (the paper: Section 6.5 sweeps "the
    /// per-migration cost `c`", and a migration is one instance moved to a
    /// destination, Section 4.3.1). An instance moved more than once within
    /// one policy call pays once (it travels from where it was to where it
    /// ends up).
    #[default]
    PerInstance,
    /// `c` once per job per policy call, however many of its instances move
    /// (what a Slurm requeue costs: the whole job checkpoints and restarts
    /// once).
    PerJob,
}

impl MigrationCharge {
    pub const NAMES: &'static [&'static str] = &["per-instance", "per-job"];

    pub fn name(self) -> &'static str {
        match self {
            Self::PerInstance => "per-instance",
            Self::PerJob => "per-job",
        }
    }

    pub fn parse_name(name: &str) -> Result<Self> {
        match name {
            "per-instance" => Ok(Self::PerInstance),
            "per-job" => Ok(Self::PerJob),
            other => Err(CoreError::Invalid(format!(
                "unknown migration charge `{other}`; expected per-instance or per-job"
            ))),
        }
    }
}

/// What the cost rule takes as a running job's expected remaining run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemainingRun {
    /// What a scheduler can know: the job's time limit minus its elapsed
    /// run. Traces carry no limits, so the limit is the duration rounded up
    /// to the next of the limits users typically ask for
    /// ([`TIME_LIMIT_LADDER_S`]: 15 m, 30 m, 1, 2, 4, 8, 12 h, 1, 2, 3, 7 d,
    /// then whole weeks), plus the migration costs charged so far.
    #[default]
    TimeLimit,
    /// An oracle: the job's true remaining run (duration from the trace).
    Oracle,
    /// The time limit `compass replay` gives each job it submits
    /// ([`replay_time_limit_for`]: twice the run plus a minute, in whole
    /// minutes, at least 2), minus its elapsed run: what the live plugin
    /// sees when the replay's `jobs.csv` runs on Slurm. For simulating a
    /// compressed replay, whose runs of seconds the ladder of `TimeLimit`
    /// rounds up to 15 minutes.
    ReplayLimit,
}

impl RemainingRun {
    pub const NAMES: &'static [&'static str] = &["time-limit", "oracle", "replay-limit"];

    pub fn name(self) -> &'static str {
        match self {
            Self::TimeLimit => "time-limit",
            Self::Oracle => "oracle",
            Self::ReplayLimit => "replay-limit",
        }
    }

    pub fn parse_name(name: &str) -> Result<Self> {
        match name {
            "time-limit" => Ok(Self::TimeLimit),
            "oracle" => Ok(Self::Oracle),
            "replay-limit" => Ok(Self::ReplayLimit),
            other => Err(CoreError::Invalid(format!(
                "unknown remaining-run estimate `{other}`; expected time-limit, oracle or replay-limit"
            ))),
        }
    }
}

/// The time limits a job of some duration is assumed to have asked for
/// ([`RemainingRun::TimeLimit`]), seconds.
pub const TIME_LIMIT_LADDER_S: &[Seconds] = &[
    900.0, 1800.0, 3600.0, 7200.0, 14_400.0, 28_800.0, 43_200.0, 86_400.0, 172_800.0, 259_200.0,
    604_800.0,
];

/// The time limit assumed for a job of `duration_s` seconds: the smallest
/// rung of [`TIME_LIMIT_LADDER_S`] at or above it, else whole weeks.
pub fn time_limit_for(duration_s: Seconds) -> Seconds {
    const WEEK: Seconds = 604_800.0;
    TIME_LIMIT_LADDER_S
        .iter()
        .copied()
        .find(|&l| duration_s <= l)
        .unwrap_or_else(|| (duration_s / WEEK).ceil() * WEEK)
}

/// The time limit `compass replay` gives a job of `duration_s` wall
/// seconds ([`RemainingRun::ReplayLimit`]; `sbatch --time` of the replay's
/// plan, `time_limit_min` in `src/replay/plan.rs`): twice the run plus a
/// minute, in whole minutes, at least 2.
pub fn replay_time_limit_for(duration_s: Seconds) -> Seconds {
    ((2.0 * duration_s + 60.0) / 60.0).ceil().max(2.0) * 60.0
}

/// Simulation settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The cluster of a homogeneous replay ([`simulate`]). A mixed replay
    /// ([`simulate_mixed`]) takes its nodes from its [`ClusterPolicy`] and
    /// does not use this.
    pub spec: ClusterSpec,
    pub queue: QueuePolicy,
    /// What a migration costs, the cost rule and the gate `move_when`
    /// ([`MigrationSettings`], shared with the policy simulator).
    pub migration: MigrationSettings,
    /// With backfill: how many waiting jobs behind the head are examined per
    /// scheduling pass (Slurm's `bf_max_job_test`).
    pub backfill_depth: usize,
    /// Keep one [`Sample`] per event time in [`SimResult::timeseries`].
    pub record_timeseries: bool,
    /// Keep each job's outcome in [`SimResult::job_outcomes`].
    pub record_jobs: bool,
    /// Most rounds of the policy's periodic tick the replay runs before it
    /// is refused ([`MAX_TICKS`]; smaller in tests).
    pub max_ticks: u64,
}

impl SimConfig {
    /// FIFO, the default migration settings ([`MigrationSettings::default`]:
    /// `c = 8` s per instance, payback 2 on time limits), backfill depth
    /// 1000, no time series, at most [`MAX_TICKS`] ticks.
    pub fn new(spec: ClusterSpec) -> Self {
        Self {
            spec,
            queue: QueuePolicy::Fifo,
            migration: MigrationSettings::default(),
            backfill_depth: 1000,
            record_timeseries: false,
            record_jobs: false,
            max_ticks: MAX_TICKS,
        }
    }
}

/// What just happened, passed to an [`Observer`] after each policy call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A job was placed and started (`place` returned an admission).
    Start,
    /// A job completed and was removed (`remove`).
    Finish,
    /// The policy's periodic `tick` ran.
    Tick,
    /// A Compact with no arrival or departure: a running job may move again
    /// (its protection, first minutes or cool-down ended), as the select
    /// plugin compacts at its next tick then.
    Compact,
}

#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    pub time: Seconds,
    pub kind: EventKind,
    /// The job started or finished (`None` for ticks).
    pub job: Option<JobId>,
    /// Migrations the policy returned in this call.
    pub migrations: &'a [Migration],
    /// Jobs waiting and running after the call.
    pub queued: usize,
    pub running: usize,
}

/// Hooks into a replay: property tests check the policy after every event;
/// the CLI draws a progress bar.
pub trait Observer {
    /// Called after every policy call that changed its state, on a
    /// homogeneous cluster (one policy).
    fn after_event(&mut self, _event: &Event<'_>, _policy: &dyn PlacementPolicy) {}
    /// Called after every policy call that changed its state, on any
    /// cluster (after [`Observer::after_event`] on a homogeneous one): each
    /// pool's state is `cluster.pool_occupancy(p)`.
    fn after_cluster_event(&mut self, _event: &Event<'_>, _cluster: &dyn ClusterPolicy) {}
    /// Called after each batch of simultaneous events.
    fn progress(&mut self, _finished_jobs: u64, _total_jobs: u64) {}
}

/// Observes nothing.
pub struct NoObserver;
impl Observer for NoObserver {}

/// Wraps a closure as an [`Observer`] of events.
pub struct FnObserver<F>(pub F);
impl<F: FnMut(&Event<'_>, &dyn PlacementPolicy)> Observer for FnObserver<F> {
    fn after_event(&mut self, event: &Event<'_>, policy: &dyn PlacementPolicy) {
        (self.0)(event, policy)
    }
}

/// The cluster state after the events at one instant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub t_s: Seconds,
    /// `N * SIF = Phi_pi - Phi*` (eq. 2).
    pub n_sif: u64,
    /// Used GPUs / total GPUs.
    pub utilisation: f64,
    pub empty_nodes: u32,
    pub partial_nodes: u32,
    pub queued: u64,
    pub running: u64,
}

/// Everything a replay measured. Serialisable; the CLI prints it as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    pub policy: String,
    pub queue: QueuePolicy,
    /// Nodes of the whole cluster.
    pub nodes: u32,
    /// GPUs per node; on a mixed cluster, of its largest nodes.
    pub gpus_per_node: u32,
    /// The cluster as a node-spec list: `51x8`, `8x8:a100,4x4:l40s,2x2`.
    #[serde(default)]
    pub cluster: String,
    pub migration_cost_s: Seconds,
    /// The cost the cost rule weighed, when not `migration_cost_s`
    /// ([`MigrationSettings::rule_cost_s`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_cost_s: Option<Seconds>,
    /// How `c` was charged.
    #[serde(default)]
    pub migration_charge: MigrationCharge,
    /// The cost rule's payback factor as configured (`0`: rule off, the
    /// paper's behaviour). The rule acts only on policies that honour
    /// movability ([`PlacementPolicy::honours_movable`]: COMPASS).
    #[serde(default)]
    pub payback: f64,
    /// What the cost rule took as a job's remaining run.
    #[serde(default)]
    pub remaining_run: RemainingRun,
    /// When the cost rule lets jobs move.
    #[serde(default)]
    pub move_when: MoveWhen,
    /// Under [`MoveWhen::Pays`], [`MigrationSettings::tidy_payback`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tidy_payback: Option<f64>,
    /// Jobs replayed (all completed).
    pub jobs: u64,
    /// Jobs left out because they can never fit the cluster (more instances
    /// than the whole cluster holds; only possible with a fixed node count).
    pub unschedulable: u64,
    /// Average Fragmentation Rate (eq. 15): time-average of SIF over the
    /// metric window.
    pub afr: f64,
    /// Average Job Completion Time (eq. 16): mean of completion - submission.
    pub ajct_s: Seconds,
    /// Average GPU Utilisation (eq. 17) over the metric window.
    pub agu: f64,
    /// `peak`: AFR, AGU and WCC coverage average over `T_peak` (queue
    /// non-empty, eq. 14). `busy` when the queue was never non-empty for a
    /// positive time: they then average over the time any job ran.
    pub metric_window: String,
    /// `|T_peak|`: seconds with a non-empty queue.
    pub peak_s: Seconds,
    /// Seconds with any job running or waiting.
    pub busy_s: Seconds,
    /// First submission to last completion.
    pub makespan_s: Seconds,
    /// Largest `N * SIF = Phi_pi - Phi*` after any job event (every policy
    /// call that changed the state, not only at the end of an instant:
    /// Theorem 1 is stated per event).
    pub max_n_sif: u64,
    /// Largest `N * SIF` after job events where WCC held (Theorem 1
    /// promises at most 2); `None` if WCC never held.
    pub max_n_sif_under_wcc: Option<u64>,
    /// Job events after which WCC held and `N * SIF > 2` (Theorem 1's bound
    /// exceeded).
    #[serde(default)]
    pub over_bound_events: u64,
    /// Of those, events while the cost rule held at least one resumable
    /// running job still: the bound exceeded by choice.
    #[serde(default)]
    pub over_bound_events_held: u64,
    /// Seconds (while any job ran or waited) with WCC holding and
    /// `N * SIF > 2` after the last event of an instant.
    #[serde(default)]
    pub over_bound_s: Seconds,
    /// Of those, seconds while the cost rule held a resumable job still.
    #[serde(default)]
    pub over_bound_held_s: Seconds,
    /// Instances moved, in total.
    pub migrations: u64,
    /// Migration costs charged (`c` each): one per migrated instance, or one
    /// per moved job per policy call ([`MigrationCharge`]).
    pub migration_charges: u64,
    /// Jobs migrated at least once.
    pub migrated_jobs: u64,
    /// `migration_charges / jobs`.
    pub migrations_per_job: f64,
    /// Fraction of the metric window where WCC (eq. 9) held.
    pub wcc_coverage: f64,
    /// Jobs started by backfill ahead of a blocked head.
    pub backfilled: u64,
    /// Backfill starts refused because the policy's migrations in a trial
    /// of the start (on a fork of the policy) would have moved the head's
    /// reservation later.
    #[serde(default)]
    pub backfill_refused_slip: u64,
    /// Departures for which jobs were held still (for that one event)
    /// because, tried on a fork, their moves in the departure's Compact
    /// would have put the blocked head's start past its reservation. Only
    /// for policies that can be forked.
    #[serde(default)]
    pub compact_held_for_head: u64,
    /// Events whose Compact was not made under `--move-when starts`: its
    /// moves let no queued job start ([`MoveWhen::Starts`]; under
    /// [`MoveWhen::Pays`], made with the jobs that pay for tidying only).
    #[serde(default)]
    pub compact_no_gain: u64,
    /// Events at which the gate (`--move-when starts` or `pays`) made its
    /// first trial: every job free to move, to see whether the moves let a
    /// queued job start.
    #[serde(default)]
    pub gate_trials: u64,
    /// Under `--move-when pays`, events whose first trial was not made
    /// because a trial that started nobody in the last
    /// [`crate::placement::head::TRIAL_MEMORY_S`] seconds covers its
    /// chances ([`TrialMemory`](crate::placement::head::TrialMemory), as the select plugin keeps it).
    #[serde(default)]
    pub gate_trials_remembered: u64,
    /// Heads of a backfill queue that started later than the reservation
    /// first computed for them (for any reason: a backfilled start, a
    /// departure's Compact, migration costs added to running jobs, or a
    /// policy that cannot place the head when it physically fits).
    #[serde(default)]
    pub heads_late: u64,
    /// Total seconds those heads started after their first reservation.
    #[serde(default)]
    pub heads_late_s: Seconds,
    /// Times a backfilled start moved the head's reservation later. 0 when
    /// the policy can be forked (the trial refuses such starts) or does not
    /// migrate on placement.
    pub reservation_slips: u64,
    /// Total seconds those slips moved reservations later.
    pub reservation_slip_s: Seconds,
    pub waits: WaitStats,
    /// The figures of each pool of interchangeable nodes (one for a
    /// homogeneous cluster). On a mixed cluster the cluster-wide figures
    /// above combine them: `N * SIF` is the sum over pools and AFR its time
    /// average divided by all `N` nodes; AGU is over all GPUs; WCC holds
    /// when it holds in every pool; `max_n_sif_under_wcc` is the largest
    /// sum at events where every pool has WCC; an event or second is over
    /// Theorem 1's bound when some pool has WCC and `N_p * SIF_p > 2`
    /// (Theorem 1 per pool).
    #[serde(default)]
    pub pools: Vec<PoolResult>,
    /// One sample per event instant when [`SimConfig::record_timeseries`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeseries: Vec<Sample>,
    /// Every job's submission, first start and completion, in submission
    /// order, when [`SimConfig::record_jobs`]: where a policy's AJCT goes,
    /// job by job (`compass simulate --jobs-out`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_outcomes: Vec<JobOutcome>,
}

/// One job's outcome in a replay ([`SimResult::job_outcomes`]). Its
/// completion time (eq. 16's term) is `end_s - submit_s`; its wait,
/// `start_s - submit_s`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// The job's name in the trace.
    pub name: String,
    pub submit_s: Seconds,
    /// Its first start (its submission when it never started).
    pub start_s: Seconds,
    /// Its completion, migration costs included.
    pub end_s: Seconds,
    pub instances: u32,
    pub gpus: u32,
    /// Migration costs charged to it (per instance or per job, as
    /// [`MigrationSettings::charge`] says).
    pub migration_charges: u64,
}

/// One pool's figures (issue 12): paper Section 5.5's metrics with `N` the
/// pool's nodes, and Theorem 1 checked in the pool alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolResult {
    /// `8xa100`, `2xgpu` (GPUs per node and type, untyped: `gpu`).
    pub name: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Jobs that ran in the pool.
    pub jobs: u64,
    /// Their mean completion time (0 when none).
    pub ajct_s: Seconds,
    /// Time average of `SIF_p = (Phi_pi - Phi*)_p / N_p` over the replay's
    /// metric window (eq. 15 in the pool).
    pub afr: f64,
    /// Used / total GPUs of the pool, time average over the metric window.
    pub agu: f64,
    /// Fraction of the metric window with WCC (eq. 9) holding in the pool.
    pub wcc_coverage: f64,
    /// Largest `N_p * SIF_p` after any job event.
    pub max_n_sif: u64,
    /// Largest `N_p * SIF_p` after job events where WCC held in the pool.
    pub max_n_sif_under_wcc: Option<u64>,
    /// Job events after which WCC held in the pool and `N_p * SIF_p > 2`.
    pub over_bound_events: u64,
    /// Of those, while the cost rule held a resumable job still.
    pub over_bound_events_held: u64,
    /// Seconds (any job running or waiting) with WCC holding in the pool
    /// and `N_p * SIF_p > 2`.
    pub over_bound_s: Seconds,
    /// Instances moved in the pool.
    pub migrations: u64,
}

/// Builds the policy `name` (see [`placement::POLICY_NAMES`]) and replays.
pub fn simulate_named(
    name: &str,
    jobs: &[TraceJob],
    cfg: &SimConfig,
    opts: &PolicyOptions,
    obs: &mut dyn Observer,
) -> Result<SimResult> {
    let mut policy = placement::build(name, cfg.spec, opts)?;
    simulate(jobs, policy.as_mut(), cfg, obs)
}

/// Replays `jobs` under the policy `name` on the cluster `nodes`, mixed or
/// not (issue 12). A cluster of alike nodes is replayed exactly as
/// [`simulate_named`] on its [`ClusterSpec`]; otherwise `compass` runs as a
/// [`crate::placement::pools::PoolSet`] (the select plugin's code) and a
/// baseline once per pool ([`cluster`] says how a pool is chosen).
/// `cfg.spec` is not used. Jobs are cut into instances of at most the
/// largest node's GPUs by the trace reader; a job goes to any pool whose
/// nodes hold one of its instances.
pub fn simulate_mixed(
    name: &str,
    jobs: &[TraceJob],
    nodes: &ClusterNodes,
    cfg: &SimConfig,
    opts: &PolicyOptions,
    obs: &mut dyn Observer,
) -> Result<SimResult> {
    if let Some(spec) = nodes.as_homogeneous() {
        let cfg = SimConfig {
            spec,
            ..cfg.clone()
        };
        let mut r = simulate_named(name, jobs, &cfg, opts, obs)?;
        r.cluster = nodes.label();
        // the pool's name as the select plugin names it (`8xa100`)
        if let (Some(pool), Some(class)) = (r.pools.first_mut(), nodes.classes.first()) {
            pool.name = format!(
                "{}x{}",
                class.gpus,
                class.gpu_type.as_deref().unwrap_or("gpu")
            );
        }
        return Ok(r);
    }
    let mut policy = build_mixed(name, nodes, opts)?;
    let mut r = simulate_cluster(jobs, policy.as_mut(), cfg, obs)?;
    r.cluster = nodes.label();
    Ok(r)
}

/// Replays `jobs` (any order; replayed by submission time, ties in slice
/// order) through `policy`, a fresh policy on `cfg.spec`. Job `k` of the
/// slice is `JobId(k)` for the policy.
pub fn simulate(
    jobs: &[TraceJob],
    policy: &mut dyn PlacementPolicy,
    cfg: &SimConfig,
    obs: &mut dyn Observer,
) -> Result<SimResult> {
    if policy.spec() != cfg.spec {
        return Err(CoreError::Invalid(format!(
            "policy is for {} nodes of {} GPUs, the simulation for {} of {}",
            policy.spec().nodes,
            policy.spec().gpus_per_node,
            cfg.spec.nodes,
            cfg.spec.gpus_per_node
        )));
    }
    let mut r = simulate_cluster(jobs, &mut Single::new(policy), cfg, obs)?;
    r.cluster = format!("{}x{}", cfg.spec.nodes, cfg.spec.gpus_per_node);
    Ok(r)
}

/// Replays `jobs` through `cluster`, a fresh policy over a homogeneous or
/// mixed cluster (its pools give the nodes; `cfg.spec` is not used). Job
/// `k` of the slice is `JobId(k)` for the policy.
pub fn simulate_cluster(
    jobs: &[TraceJob],
    cluster: &mut dyn ClusterPolicy,
    cfg: &SimConfig,
    obs: &mut dyn Observer,
) -> Result<SimResult> {
    let pools = cluster.pools();
    if pools.is_empty() {
        return Err(CoreError::NoNodes);
    }
    if (0..pools.len()).any(|p| cluster.pool_occupancy(p).running_jobs() != 0) {
        return Err(CoreError::Invalid(
            "the policy must start on an empty cluster".into(),
        ));
    }
    cfg.migration.validate()?;
    let mut sim = Sim::new(jobs, cluster, pools, cfg)?;
    sim.run(obs)?;
    Ok(sim.finish())
}

#[derive(Clone, Debug, Default)]
struct JobState {
    start: Option<Seconds>,
    end: Seconds,
    running: bool,
    charges: u64,
    /// The movability last given to the policy.
    movable: bool,
    /// Time of the last migration.
    last_moved: Option<Seconds>,
}

/// The state after the last batch, integrated until the next one.
#[derive(Clone, Copy, Debug, Default)]
struct Snapshot {
    sif: f64,
    utilisation: f64,
    wcc: bool,
    /// WCC holds and `N * SIF > 2`.
    over_bound: bool,
    /// ... while the cost rule holds a resumable job still.
    over_bound_held: bool,
}

/// Time integrals of the metrics over one window.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    time: f64,
    sif: f64,
    util: f64,
    wcc: f64,
    over_bound: f64,
    over_bound_held: f64,
}

impl Window {
    /// The window AFR, AGU and WCC coverage average over, with its name:
    /// `T_peak` (eq. 14, the time the queue is non-empty), or, when the
    /// queue was never non-empty for a positive time, the time any job ran
    /// or waited ([`SimResult::metric_window`]). The policy simulator
    /// ([`budgets`]) chooses its window by this rule too.
    fn metric(peak: Window, busy: Window) -> (Window, &'static str) {
        if peak.time > 0.0 {
            (peak, "peak")
        } else {
            (busy, "busy")
        }
    }

    /// `x`, an integral over this window, as a time average (0 for an
    /// empty window): with `x = self.sif`, AFR (eq. 15).
    fn avg(&self, x: f64) -> f64 {
        if self.time > 0.0 {
            x / self.time
        } else {
            0.0
        }
    }

    fn add(&mut self, dt: f64, s: &Snapshot) {
        self.time += dt;
        self.sif += s.sif * dt;
        self.util += s.utilisation * dt;
        if s.wcc {
            self.wcc += dt;
        }
        if s.over_bound {
            self.over_bound += dt;
        }
        if s.over_bound_held {
            self.over_bound_held += dt;
        }
    }
}

/// The fragmentation state after one policy call.
#[derive(Clone, Copy, Debug, Default)]
struct EventState {
    n_sif: u64,
    partial: u32,
    phi: u64,
    wcc: bool,
}

/// The instance counts `Phi*` was last computed for, and that `Phi*`.
type PhiCache = Option<([u64; 9], u64)>;

impl EventState {
    /// Measures one pool of identical nodes: `N * SIF = Phi_pi - Phi*`
    /// (eq. 2; `Phi_pi` the partial nodes, `Phi*` the fewest partial nodes
    /// any packing of the running instances could have,
    /// [`metric::phi_star`], exact) and WCC (eq. 9). `last` keeps the counts
    /// `Phi*` was computed for: it is recomputed only when they change.
    /// Used by this simulator after every policy call and by the policy
    /// simulator ([`budgets`]) after every start, end and preemption.
    fn measure(occ: &placement::Occupancy, gpus_per_node: u32, last: &mut PhiCache) -> Self {
        let counts = *occ.instance_counts();
        let phi = match *last {
            Some((c, phi)) if c == counts => phi,
            _ => metric::phi_star(&counts, gpus_per_node),
        };
        *last = Some((counts, phi));
        let partial = occ.partial_nodes();
        Self {
            n_sif: u64::from(partial).saturating_sub(phi),
            partial,
            phi,
            wcc: metric::wcc_holds(&counts, gpus_per_node),
        }
    }
}

/// One pool's fragmentation and metric integrals.
#[derive(Clone, Debug, Default)]
struct PoolTrack {
    nodes: u32,
    gpus_per_node: u32,
    total_gpus: u64,
    last_phi: PhiCache,
    /// The state after the last policy call.
    now: EventState,
    snap: Snapshot,
    peak: Window,
    busy: Window,
    max_n_sif: u64,
    max_n_sif_wcc: Option<u64>,
    over_events: u64,
    over_events_held: u64,
    migrations: u64,
}

// A blocked head's reservation (see [`QueuePolicy::Backfill`]): the rule is
// shared with the Slurm plugin's departure guard (`placement::head`).
use crate::placement::head::Reservation;

struct Sim<'a> {
    jobs: &'a [TraceJob],
    policy: &'a mut dyn ClusterPolicy,
    cfg: &'a SimConfig,
    /// The pools of the cluster (one when homogeneous) and their tracks.
    pools: Vec<PoolSpec>,
    tracks: Vec<PoolTrack>,
    nodes: u32,
    total_gpus: u64,
    /// GPUs of the largest node.
    max_gpus: u32,
    /// The pool each job ran in.
    job_pool: Vec<Option<usize>>,
    /// Job indices by (submission, index).
    order: Vec<usize>,
    /// Queue of waiting jobs, as positions in `order` (FIFO order).
    queue: BTreeSet<usize>,
    state: Vec<JobState>,
    /// Completion events; stale entries (end moved by a migration) skipped.
    ends: BinaryHeap<Reverse<(T, usize)>>,
    /// When a running job's verdict may turn movable (its `--min-runtime`
    /// protection, the rule's first minutes or cool-down end): a Compact is
    /// tried then ([`Sim::compact_on_wake`]). Stale entries are skipped.
    wakes: BinaryHeap<Reverse<(T, usize)>>,
    /// Running jobs by projected end, for reservations.
    by_end: BTreeSet<(T, usize)>,
    next_arrival: usize,
    next_tick: Option<Seconds>,
    /// Ticks run so far (at most [`MAX_TICKS`]).
    ticks: u64,
    running: usize,
    finished: u64,
    schedulable: u64,
    unschedulable: u64,
    last_t: Seconds,
    first_submit: Seconds,
    snap: Snapshot,
    /// The state after the last policy call, summed over pools (WCC: in
    /// every pool).
    now: EventState,
    /// The cost rule; `None` when off (`payback = 0`) or when the policy
    /// does not act on movability (it then never migrates a job held still
    /// by choice, and none is counted as held).
    rule: Option<MigrationRule>,
    /// Resumable running jobs the rule holds still.
    held: usize,
    /// The gate `move_when`'s state between events ([`gate::decide`]):
    /// the jobs held for tidying, the memory of failed trials, the runs of
    /// the finished jobs, its counters.
    gate: GateState,
    over_events: u64,
    over_events_held: u64,
    refused_slip: u64,
    /// See [`SimResult::compact_held_for_head`].
    compact_held: u64,
    /// The last policy call was a departure with jobs held still for the
    /// head: until the next call (which compacts again) the bound may be
    /// exceeded by choice.
    holding_for_head: bool,
    /// The blocked head of a backfill queue and its current reservation.
    reserved: Option<(usize, Seconds)>,
    /// Blocked heads and the reservation first computed for each.
    first_reservation: BTreeMap<usize, Seconds>,
    heads_late: u64,
    heads_late_s: Seconds,
    /// The policy can be forked (departures are then tried on a fork).
    forkable: bool,
    peak: Window,
    busy: Window,
    max_n_sif: u64,
    max_n_sif_wcc: Option<u64>,
    migrations: u64,
    charges: u64,
    backfilled: u64,
    slips: u64,
    slip_s: Seconds,
    timeseries: Vec<Sample>,
}

impl<'a> Sim<'a> {
    fn new(
        jobs: &'a [TraceJob],
        policy: &'a mut dyn ClusterPolicy,
        pools: Vec<PoolSpec>,
        cfg: &'a SimConfig,
    ) -> Result<Self> {
        let honours_movable = policy.honours_movable();
        let forkable = policy.fork().is_some();
        let nodes: u32 = pools.iter().map(|p| p.nodes.len() as u32).sum();
        // Global node id -> pool: each node in exactly one pool.
        let mut node_pool = vec![usize::MAX; nodes as usize];
        let mut tracks = Vec::with_capacity(pools.len());
        for (p, pool) in pools.iter().enumerate() {
            for &n in &pool.nodes {
                match node_pool.get_mut(n as usize) {
                    Some(slot) if *slot == usize::MAX => *slot = p,
                    _ => {
                        return Err(CoreError::Invalid(format!(
                            "pool {}: node {n} is not a node of the cluster or is in two pools",
                            pool.name
                        )))
                    }
                }
            }
            let spec = ClusterSpec::new(pool.nodes.len() as u32, pool.gpus_per_node)?;
            tracks.push(PoolTrack {
                nodes: spec.nodes,
                gpus_per_node: spec.gpus_per_node,
                total_gpus: spec.total_gpus(),
                ..PoolTrack::default()
            });
        }
        let max_gpus = pools.iter().map(|p| p.gpus_per_node).max().unwrap_or(0);
        // The shape check of the largest node: a job whose instances need
        // more GPUs than any node has is refused with the job named.
        let largest = ClusterSpec::new(1, max_gpus)?;
        let mut order: Vec<usize> = Vec::with_capacity(jobs.len());
        let mut unschedulable = 0;
        for (i, j) in jobs.iter().enumerate() {
            // Bounded as the trace readers bound them: far beyond, the
            // clock's steps (a round of ticks, a short run) are lost in the
            // rounding of the times and the replay never ends.
            if !(j.submit_s.abs() <= MAX_TRACE_S && (0.0..=MAX_TRACE_S).contains(&j.duration_s)) {
                return Err(CoreError::Invalid(format!(
                    "job `{}` (line {}): submission {} s and duration {} s must be finite \
                     and at most {MAX_TRACE_S:e} s (the duration at least 0)",
                    j.name, j.line, j.submit_s, j.duration_s
                )));
            }
            largest.check_job(&request(i, j)).map_err(|e| {
                CoreError::Invalid(format!("job `{}` (line {}): {e}", j.name, j.line))
            })?;
            // Some pool must hold every instance at once.
            let fits = pools.iter().any(|p| {
                p.admits(None, j.shape.gpus)
                    && nodes_for_job(j.shape.instances, j.shape.gpus, p.gpus_per_node)
                        <= p.nodes.len() as u32
            });
            if fits {
                order.push(i);
            } else {
                unschedulable += 1;
            }
        }
        order.sort_by(|&a, &b| {
            jobs[a]
                .submit_s
                .total_cmp(&jobs[b].submit_s)
                .then(a.cmp(&b))
        });
        let first_submit = order.first().map(|&i| jobs[i].submit_s).unwrap_or(0.0);
        let total_gpus = tracks.iter().map(|t| t.total_gpus).sum();
        Ok(Self {
            jobs,
            policy,
            cfg,
            pools,
            tracks,
            nodes,
            total_gpus,
            max_gpus,
            job_pool: vec![None; jobs.len()],
            schedulable: order.len() as u64,
            order,
            queue: BTreeSet::new(),
            state: vec![JobState::default(); jobs.len()],
            ends: BinaryHeap::new(),
            wakes: BinaryHeap::new(),
            by_end: BTreeSet::new(),
            next_arrival: 0,
            next_tick: None,
            ticks: 0,
            running: 0,
            finished: 0,
            unschedulable,
            last_t: first_submit,
            first_submit,
            snap: Snapshot::default(),
            now: EventState::default(),
            rule: (cfg.migration.payback > 0.0 && honours_movable).then_some(MigrationRule {
                default_cost_s: cfg.migration.rule_cost(),
                payback: cfg.migration.payback,
                tidy_payback: cfg.migration.tidy_payback,
                ..MigrationRule::default()
            }),
            held: 0,
            gate: GateState::default(),
            over_events: 0,
            over_events_held: 0,
            refused_slip: 0,
            compact_held: 0,
            holding_for_head: false,
            reserved: None,
            first_reservation: BTreeMap::new(),
            heads_late: 0,
            heads_late_s: 0.0,
            forkable,
            peak: Window::default(),
            busy: Window::default(),
            max_n_sif: 0,
            max_n_sif_wcc: None,
            migrations: 0,
            charges: 0,
            backfilled: 0,
            slips: 0,
            slip_s: 0.0,
            timeseries: Vec::new(),
        })
    }

    /// Earliest valid completion event, dropping stale ones.
    fn peek_end(&mut self) -> Option<Seconds> {
        while let Some(Reverse((t, j))) = self.ends.peek().copied() {
            let s = &self.state[j];
            if s.running && s.end == t.0 {
                return Some(t.0);
            }
            self.ends.pop();
        }
        None
    }

    fn run(&mut self, obs: &mut dyn Observer) -> Result<()> {
        let total = self.schedulable;
        loop {
            let arrival = self
                .order
                .get(self.next_arrival)
                .map(|&i| self.jobs[i].submit_s);
            let wake = self.wakes.peek().map(|Reverse((T(w), _))| *w);
            let t = [arrival, self.peek_end(), self.next_tick, wake]
                .into_iter()
                .flatten()
                .min_by(f64::total_cmp);
            let Some(t) = t else { break };
            self.integrate(t);
            // Completions first: they free GPUs for the jobs arriving now.
            while self.peek_end() == Some(t) {
                let Some(Reverse((_, j))) = self.ends.pop() else {
                    break;
                };
                self.finish_job(j, t, obs)?;
            }
            while let Some(&i) = self.order.get(self.next_arrival) {
                if self.jobs[i].submit_s != t {
                    break;
                }
                self.queue.insert(self.next_arrival);
                self.next_arrival += 1;
            }
            let ticked = self.next_tick == Some(t);
            if ticked {
                self.ticks += 1;
                if self.ticks > self.cfg.max_ticks {
                    // No policy name: the drivers prefix their errors with it.
                    return Err(CoreError::Invalid(format!(
                        "more than {} rounds of {} s while jobs run (at {t} s of the trace); \
                         a longer round replays this trace",
                        self.cfg.max_ticks,
                        self.policy.tick_interval().unwrap_or(0.0)
                    )));
                }
                self.apply_rule(t, 0)?;
                let migrations = self.policy.tick(t);
                self.charge(&migrations, None, t)?;
                self.holding_for_head = false;
                self.notify(obs, t, EventKind::Tick, None, &migrations);
            }
            let mut woke = false;
            while let Some(&Reverse((T(w), k))) = self.wakes.peek() {
                if w > t {
                    break;
                }
                self.wakes.pop();
                woke |= self.state[k].running;
            }
            if woke {
                self.compact_on_wake(t, obs)?;
            }
            self.schedule(t, obs)?;
            self.plan_tick(t);
            self.snapshot(t);
            obs.progress(self.finished, total);
        }
        if let Some(&r) = self.queue.first() {
            let j = &self.jobs[self.order[r]];
            return Err(CoreError::Invalid(format!(
                "policy `{}` left {} job(s) waiting on an idle cluster; the first, `{}` ({} x {} GPUs, line {}), \
                 fits the cluster but was never placed",
                self.policy.name(),
                self.queue.len(),
                j.name,
                j.shape.instances,
                j.shape.gpus,
                j.line
            )));
        }
        Ok(())
    }

    fn plan_tick(&mut self, t: Seconds) {
        let interval = self
            .policy
            .tick_interval()
            .filter(|i| i.is_finite() && *i > 0.0);
        match interval {
            Some(iv) if self.running > 0 => {
                if self.next_tick.is_none_or(|n| n <= t) {
                    let mut next = ((t / iv).floor() + 1.0) * iv;
                    if next <= t {
                        next += iv;
                    }
                    self.next_tick = Some(next);
                }
            }
            _ => self.next_tick = None,
        }
    }

    fn integrate(&mut self, t: Seconds) {
        let dt = t - self.last_t;
        if dt > 0.0 {
            let waiting = !self.queue.is_empty();
            let busy = waiting || self.running > 0;
            if waiting {
                self.peak.add(dt, &self.snap);
            }
            if busy {
                self.busy.add(dt, &self.snap);
            }
            for tr in &mut self.tracks {
                if waiting {
                    tr.peak.add(dt, &tr.snap);
                }
                if busy {
                    tr.busy.add(dt, &tr.snap);
                }
            }
        }
        self.last_t = t;
    }

    /// Measures the state after a policy call: `N * SIF` and WCC, per event
    /// (Theorem 1 is stated per event, not per instant), in each pool and
    /// summed (see [`SimResult::pools`]).
    fn measure_event(&mut self) {
        let held = self.held > 0 || self.holding_for_head;
        let mut sum = EventState {
            wcc: true,
            ..EventState::default()
        };
        let mut over = false;
        for (p, tr) in self.tracks.iter_mut().enumerate() {
            let occ = self.policy.pool_occupancy(p);
            tr.now = EventState::measure(occ, tr.gpus_per_node, &mut tr.last_phi);
            let EventState {
                n_sif,
                partial,
                phi,
                wcc,
            } = tr.now;
            tr.max_n_sif = tr.max_n_sif.max(n_sif);
            if wcc {
                tr.max_n_sif_wcc = Some(tr.max_n_sif_wcc.unwrap_or(0).max(n_sif));
                if n_sif > 2 {
                    over = true;
                    tr.over_events += 1;
                    if held {
                        tr.over_events_held += 1;
                    }
                }
            }
            sum.n_sif += n_sif;
            sum.partial += partial;
            sum.phi += phi;
            sum.wcc &= wcc;
        }
        self.now = sum;
        self.max_n_sif = self.max_n_sif.max(sum.n_sif);
        if sum.wcc {
            self.max_n_sif_wcc = Some(self.max_n_sif_wcc.unwrap_or(0).max(sum.n_sif));
        }
        if over {
            self.over_events += 1;
            if held {
                self.over_events_held += 1;
            }
        }
    }

    /// The state after the last event of instant `t`, held until the next.
    fn snapshot(&mut self, t: Seconds) {
        let held = self.held > 0 || self.holding_for_head;
        let mut used = 0;
        let mut empty = 0;
        let mut any_over = false;
        for (p, tr) in self.tracks.iter_mut().enumerate() {
            let occ = self.policy.pool_occupancy(p);
            let now = tr.now;
            let over_bound = now.wcc && now.n_sif > 2;
            any_over |= over_bound;
            tr.snap = Snapshot {
                sif: now.n_sif as f64 / f64::from(tr.nodes),
                utilisation: occ.used_gpus() as f64 / tr.total_gpus as f64,
                wcc: now.wcc,
                over_bound,
                over_bound_held: over_bound && held,
            };
            used += occ.used_gpus();
            empty += occ.empty_nodes();
        }
        let EventState {
            n_sif,
            partial,
            wcc,
            ..
        } = self.now;
        self.snap = Snapshot {
            sif: n_sif as f64 / f64::from(self.nodes),
            utilisation: used as f64 / self.total_gpus as f64,
            wcc,
            over_bound: any_over,
            over_bound_held: any_over && held,
        };
        if self.cfg.record_timeseries {
            let sample = Sample {
                t_s: t,
                n_sif,
                utilisation: self.snap.utilisation,
                empty_nodes: empty,
                partial_nodes: partial,
                queued: self.queue.len() as u64,
                running: self.running as u64,
            };
            match self.timeseries.last_mut() {
                Some(last) if last.t_s == t => *last = sample,
                _ => self.timeseries.push(sample),
            }
        }
    }

    /// Applies the cost rule ([`MigrationRule::worth_moving`]) to every
    /// running resumable job at time `t`, telling the policy of each change.
    /// `freeing`: GPUs of a job departing now (free when Compact runs).
    fn apply_rule(&mut self, t: Seconds, freeing: u64) -> Result<Vec<usize>> {
        let Some(rule) = self.rule else {
            return Ok(Vec::new());
        };
        // The gate ([`MoveWhen::allows`]): e.g. no job waits, so no move can
        // let one start.
        let free = self.free_gpus_of(&*self.policy) + freeing;
        let waiting = self
            .queue
            .iter()
            .map(|&r| self.jobs[self.order[r]].shape.total_gpus());
        let idle = !self.cfg.migration.move_when.allows(waiting, free);
        let mut changes = Vec::new();
        let mut held = 0;
        for &(_, j) in &self.by_end {
            let job = &self.jobs[j];
            if !job.resumable {
                continue;
            }
            let s = &self.state[j];
            let worth = !idle && rule.worth_moving(&self.candidate(j, t));
            if worth != s.movable {
                changes.push((j, worth));
            }
            held += usize::from(!worth);
        }
        let mut freed = Vec::new();
        for (j, worth) in changes {
            self.policy.set_movable(JobId(j as u64), worth)?;
            self.state[j].movable = worth;
            if worth {
                freed.push(j);
            }
        }
        self.held = held;
        Ok(freed)
    }

    /// When running job `k`, (re)started at `t`, may turn movable: the end
    /// of its `--min-runtime` protection and of the rule's first minutes,
    /// and after a migration (`moved`) of its cool-down.
    fn note_wakes(&mut self, k: usize, t: Seconds, moved: bool) {
        let Some(rule) = self.rule else {
            return;
        };
        for d in rule.wakes(self.jobs[k].min_runtime_s.unwrap_or(0.0), moved) {
            self.wakes.push(Reverse((T(t + d), k)));
        }
    }

    /// A Compact at `t` with no arrival or departure, when a running job
    /// the rule held still may move now (and is not held for tidying): the
    /// select plugin's `Controller::refresh` asks for one at its next tick
    /// (issue #10: a protected job alone on a node kept whole-node jobs
    /// waiting past its protection until some job ended). The Compact is
    /// guarded as a departure's is: the head's guard
    /// ([`Sim::hold_for_head`]) and the gate `move_when`
    /// ([`Sim::hold_unless_moves_start`]).
    fn compact_on_wake(&mut self, t: Seconds, obs: &mut dyn Observer) -> Result<()> {
        let freed = self.apply_rule(t, 0)?;
        if !freed.iter().any(|k| !self.gate.tidy_held.contains(k)) {
            return Ok(());
        }
        let migrations = self.guarded(t, None, &|p| p.compact_now())?;
        self.charge(&migrations, None, t)?;
        self.notify(obs, t, EventKind::Compact, None, &migrations);
        Ok(())
    }

    /// Carries out `act` (a departure of `gone`, or a Compact with no
    /// event) on the policy with the jobs held still that would delay the
    /// head ([`Sim::hold_for_head`]) or that the gate `move_when` holds
    /// ([`Sim::hold_unless_moves_start`]), for this one event. Returns the
    /// migrations it made.
    fn guarded(
        &mut self,
        t: Seconds,
        gone: Option<usize>,
        act: &dyn Fn(&mut dyn ClusterPolicy) -> Result<Vec<Migration>>,
    ) -> Result<Vec<Migration>> {
        let mut hold = self.hold_for_head(t, gone, act)?;
        if !hold.is_empty() {
            self.compact_held += 1;
        }
        let gate = self.hold_unless_moves_start(t, &hold, gone, act)?;
        if let Some(all) = self.gate.keep(gate) {
            hold = all;
        }
        for &k in &hold {
            self.policy.set_movable(JobId(k as u64), false)?;
        }
        let migrations = act(&mut *self.policy)?;
        for &k in &hold {
            self.policy.set_movable(JobId(k as u64), true)?;
        }
        self.holding_for_head = !hold.is_empty();
        Ok(migrations)
    }

    /// What the rule knows of job `j` at time `t` (running, or starting now).
    fn candidate(&self, j: usize, t: Seconds) -> MoveCandidate {
        let job = &self.jobs[j];
        let s = &self.state[j];
        let (start, end) = if s.running {
            (s.start.unwrap_or(t), s.end)
        } else {
            (t, t + job.duration_s)
        };
        // As the Slurm plugin counts it: protected time (`--min-runtime`)
        // runs from the job's last (re)start, so a migrated job is
        // protected again after it lands.
        gate::move_candidate(
            self.cfg.migration.remaining,
            job.resumable,
            job.duration_s,
            s.last_moved.unwrap_or(start),
            end,
            t,
            job.min_runtime_s.unwrap_or(0.0),
            s.last_moved,
        )
    }

    fn notify(
        &mut self,
        obs: &mut dyn Observer,
        t: Seconds,
        kind: EventKind,
        job: Option<usize>,
        m: &[Migration],
    ) {
        self.measure_event();
        let event = Event {
            time: t,
            kind,
            job: job.map(|j| JobId(j as u64)),
            migrations: m,
            queued: self.queue.len(),
            running: self.running,
        };
        if let Some(policy) = self.policy.as_single() {
            obs.after_event(&event, policy);
        }
        obs.after_cluster_event(&event, &*self.policy);
    }

    fn finish_job(&mut self, j: usize, t: Seconds, obs: &mut dyn Observer) -> Result<()> {
        self.apply_rule(t, self.jobs[j].shape.total_gpus())?;
        // Backfill never delays the head, and neither does the Compact that
        // follows a departure: the jobs whose moves would are held still for
        // this one event.
        let gone = JobId(j as u64);
        let migrations = self.guarded(t, Some(j), &|p| p.remove(gone))?;
        let s = &mut self.state[j];
        s.running = false;
        let end = s.end;
        self.by_end.remove(&(T(end), j));
        self.running -= 1;
        self.finished += 1;
        self.gate.runs.record(self.jobs[j].duration_s);
        self.charge(&migrations, None, t)?;
        self.notify(obs, t, EventKind::Finish, Some(j), &migrations);
        Ok(())
    }

    /// The running jobs to hold still during job `j`'s departure at `t` so
    /// that the Compact that follows it does not delay the blocked head of a
    /// backfill queue (empty: nothing to hold). The departure is tried on a
    /// fork of the policy; on it, the head's start counts as the later of
    /// its projected start ([`Sim::projected_start`]) and its reservation
    /// recomputed on the fork ([`reservation_in`]: backfill goes by the
    /// reservation, so a move that keeps the projection on time but moves
    /// the reservation later lets backfilled jobs take the head's room). If
    /// that start is later than the current reservation, the jobs the trial
    /// moved are held still and the departure is tried again, until the
    /// head is on time or nothing moves; the hold is kept only if it makes
    /// the head's start earlier than no hold. (Issue #11: on small clusters
    /// Compact's guest repair moved a 1-GPU guest into the node a departure
    /// had just emptied for a 3 x 8 head, which then waited a day longer
    /// than its reservation.)
    ///
    /// `act` is the event on a fork (`gone`: the departing job, if it is a
    /// departure); a Compact with no event ([`Sim::compact_on_wake`]) is
    /// guarded the same way.
    fn hold_for_head(
        &self,
        t: Seconds,
        gone: Option<usize>,
        act: &dyn Fn(&mut dyn ClusterPolicy) -> Result<Vec<Migration>>,
    ) -> Result<Vec<usize>> {
        if self.cfg.queue != QueuePolicy::Backfill || !self.forkable {
            return Ok(Vec::new());
        }
        let Some(&head_pos) = self.queue.first() else {
            return Ok(Vec::new());
        };
        let head = self.order[head_pos];
        let Some((reserved_head, t_res)) = self.reserved else {
            return Ok(Vec::new());
        };
        if reserved_head != head {
            return Ok(Vec::new());
        }
        let shape = self.jobs[head].shape;
        let mut hold: Vec<usize> = Vec::new();
        let mut unheld = None;
        loop {
            let Some(mut fork) = self.policy.fork() else {
                return Ok(Vec::new());
            };
            for &k in &hold {
                fork.set_movable(JobId(k as u64), false)?;
            }
            let migrations = act(&mut *fork)?;
            for &k in &hold {
                fork.set_movable(JobId(k as u64), true)?;
            }
            let charges = self.charges_of(&migrations, None);
            let ends = self.ends_with(&charges, gone);
            let start = self
                .projected_start(&*fork, &ends, head, t)?
                .max(self.reservation_in(&*fork, &ends, shape, t).t_res);
            let unheld = *unheld.get_or_insert(start);
            if charges.is_empty() || start <= t_res {
                return Ok(if start < unheld { hold } else { Vec::new() });
            }
            let before = hold.len();
            for (k, _) in charges {
                if !hold.contains(&k) {
                    hold.push(k);
                }
            }
            if hold.len() == before {
                // The policy moved only jobs it was told to hold still.
                return Ok(Vec::new());
            }
        }
    }

    /// The gate `move_when` for one event of job `event_job` (`act`: its
    /// departure or its start, run on forks of the policy, with `hold` held
    /// still as the event will be): [`gate::decide`], the decision both
    /// simulators share, on this simulator's queue (the first
    /// `backfill_depth` waiting jobs), its running movable jobs (by
    /// projected end), and its policy's forks. A job fits when its
    /// instances fit the nodes' free GPUs now
    /// ([`crate::placement::head::reservation`] with no ends), as the
    /// plugin's [`crate::placement::head::fits_now`] counts it.
    fn hold_unless_moves_start(
        &self,
        t: Seconds,
        hold: &[usize],
        event_job: Option<usize>,
        act: &dyn Fn(&mut dyn ClusterPolicy) -> Result<Vec<Migration>>,
    ) -> Result<Gate> {
        if !gate::tries(self.cfg.migration.move_when, !self.queue.is_empty()) {
            return Ok(Gate::untried());
        }
        // The tidying moves of the jobs that pay for them are made. With the
        // cost rule off (payback 0), the site's cost `c` all the same (not
        // the rule's 8 s default).
        let rule = self.rule.unwrap_or(MigrationRule {
            default_cost_s: self.cfg.migration.rule_cost(),
            tidy_payback: self.cfg.migration.tidy_payback,
            ..MigrationRule::default()
        });
        let movable: Vec<usize> = self
            .by_end
            .iter()
            .map(|&(_, k)| k)
            .filter(|&k| self.state[k].movable)
            .collect();
        let queued: Vec<usize> = self
            .queue
            .iter()
            .take(self.cfg.backfill_depth.max(1))
            .map(|&r| self.order[r])
            .collect();
        let ev = GateEvent {
            move_when: self.cfg.migration.move_when,
            trial_releases: self.cfg.migration.trial_releases,
            t,
            hold,
            event_job,
            waiting: true,
            queued: &queued,
            movable: &movable,
        };
        type Fork = Box<dyn ClusterPolicy>;
        let trial = |still: &[usize]| -> Result<Option<(Fork, Vec<usize>)>> {
            let Some(mut fork) = self.policy.fork() else {
                return Ok(None);
            };
            for &k in still {
                fork.set_movable(JobId(k as u64), false)?;
            }
            let m = act(&mut *fork)?;
            let moved = self
                .charges_of(&m, event_job)
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            Ok(Some((fork, moved)))
        };
        let fits =
            |p: &Fork, j: usize| self.reservation_in(&**p, &[], self.jobs[j].shape, t).t_res <= t;
        gate::decide(
            &self.gate,
            &ev,
            |k| self.pays_for_tidying(&rule, k, t),
            || self.gate_chances(event_job, &queued),
            trial,
            fits,
        )
    }

    /// Could moves start a queued job within the backfill depth (other than
    /// `event_job`) at all? [`gate::chances`] over the pools: moves keep the
    /// cluster's free GPUs as they are (with `event_job`'s GPUs counted free
    /// when it is running: its departure frees them), and they take
    /// instances only from the nodes Compact may lower (not a full slotted
    /// node without guests) and move only movable jobs
    /// ([`PlacementPolicy::fit_after_moves_with`], summed over the pools:
    /// COMPASS's [`CompassEngine::lowerable_fit_with`], with `event_job`'s
    /// nodes counted lowerable and its GPUs free; the jobs held for tidying
    /// count as movable, as the plugin's trial releases them). An arrival's
    /// Place uses only nodes with a free GPU, which count lowerable
    /// already. None is exact (issue #11: no trial that could start a job
    /// is skipped). The place of a chance is the whole cluster (the bound
    /// sums the pools), its fit `sum_n floor(free_n / g)` over the pools
    /// before the event.
    ///
    /// [`PlacementPolicy::fit_after_moves_with`]: crate::placement::PlacementPolicy::fit_after_moves_with
    /// [`CompassEngine::lowerable_fit_with`]: crate::placement::compass::CompassEngine::lowerable_fit_with
    fn gate_chances(&self, event_job: Option<usize>, queued: &[usize]) -> Vec<Chance> {
        let leaving = match event_job {
            Some(j) if self.state[j].running => self.jobs[j].shape.total_gpus(),
            _ => 0,
        };
        let free = self.free_gpus_of(&*self.policy) + leaving;
        let gone: Vec<JobId> = event_job.map(|j| JobId(j as u64)).into_iter().collect();
        let policy = &*self.policy;
        gate::chances(
            queued,
            event_job,
            free,
            |q| self.jobs[q].shape,
            |g| {
                (0..self.tracks.len())
                    .map(|p| policy.pool_fit_after_moves_with(p, g, &gone))
                    .sum()
            },
            |g| {
                (0..self.tracks.len())
                    .map(|p| policy.pool_occupancy(p).fit(g))
                    .sum()
            },
        )
    }

    /// Under [`MoveWhen::Pays`]: does a tidying move of running job `k` at
    /// `t` pay for itself ([`GateState::pays_for_tidying`], by its age
    /// since it first started)?
    fn pays_for_tidying(&self, rule: &MigrationRule, k: usize, t: Seconds) -> bool {
        let age = t - self.state[k].start.unwrap_or(t);
        self.gate.pays_for_tidying(rule, &self.candidate(k, t), age)
    }

    /// The running jobs' projected ends, sorted, with `charges` (jobs moved
    /// in a trial, `c` per charge) added and `gone` (the job departing in
    /// the trial) left out.
    fn ends_with(&self, charges: &[(usize, u64)], gone: Option<usize>) -> Vec<(T, usize)> {
        let c = self.cfg.migration.migration_cost_s;
        let mut ends: Vec<(T, usize)> = self
            .by_end
            .iter()
            .copied()
            .filter(|&(_, k)| Some(k) != gone && !charges.iter().any(|&(m, _)| m == k))
            .collect();
        for &(k, n) in charges {
            ends.push((T(self.state[k].end + c * n as f64), k));
        }
        ends.sort_unstable();
        ends
    }

    /// When `policy` itself would start `head`, from `t` on: on a fork the
    /// running jobs depart at their projected `ends` (jobs ending together
    /// depart together, through the policy's own Remove and its Compact),
    /// and the head is tried now and after each departure. Tried twice:
    /// with the policy free to migrate, and with every running job held
    /// still (what the departure guard can enforce); the earlier counts.
    /// Unlike [`reservation_in`] (running jobs free their GPUs where they
    /// are), this sees what Compact's moves make possible and what they take
    /// away. Migrations made in the projection add no cost to the ends; the
    /// cost rule's movability is taken as it is now. `INFINITY` if the head
    /// never fits.
    fn projected_start(
        &self,
        policy: &dyn ClusterPolicy,
        ends: &[(T, usize)],
        head: usize,
        t: Seconds,
    ) -> Result<Seconds> {
        let free = self.project(policy, ends, head, t, false)?;
        Ok(free.min(self.project(policy, ends, head, t, true)?))
    }

    /// One projection of [`Sim::projected_start`]; `frozen`: no running job
    /// moves in it.
    fn project(
        &self,
        policy: &dyn ClusterPolicy,
        ends: &[(T, usize)],
        head: usize,
        t: Seconds,
        frozen: bool,
    ) -> Result<Seconds> {
        let Some(mut fork) = policy.fork() else {
            return Ok(f64::INFINITY);
        };
        if frozen {
            for &(_, k) in ends {
                fork.set_movable(JobId(k as u64), false)?;
            }
        }
        let req = self.request_now(head, t);
        let need = self.jobs[head].shape.total_gpus();
        let mut at = t;
        let mut i = 0;
        loop {
            let free = self.free_gpus_of(&*fork);
            let end = self.expected_end(head, at + self.jobs[head].duration_s);
            fork.set_expected_end(req.id, end);
            if free >= need && fork.place(&req)?.is_some() {
                return Ok(at);
            }
            let Some(&(T(e), _)) = ends.get(i) else {
                return Ok(f64::INFINITY);
            };
            while let Some(&(T(x), k)) = ends.get(i) {
                if x != e {
                    break;
                }
                fork.remove(JobId(k as u64))?;
                i += 1;
            }
            at = e.max(t);
        }
    }

    /// The charges one policy call's migrations make, by job index (this
    /// simulator's job ids are its indexes): [`MigrationSettings::charges`].
    fn charges_of(&self, migrations: &[Migration], starting: Option<usize>) -> Vec<(usize, u64)> {
        self.cfg
            .migration
            .charges(migrations, |id| Some(id.0 as usize), starting)
    }

    /// Charges `c` to the running jobs moved in one policy call at `t`.
    fn charge(
        &mut self,
        migrations: &[Migration],
        starting: Option<usize>,
        t: Seconds,
    ) -> Result<()> {
        if migrations.is_empty() {
            return Ok(());
        }
        self.migrations += migrations.len() as u64;
        for m in migrations {
            if let Some(p) = self.policy.job_pool(m.job) {
                self.tracks[p].migrations += 1;
            }
        }
        for (j, count) in self.charges_of(migrations, starting) {
            let name = self.policy.name();
            let Some(s) = self.state.get(j).filter(|s| s.running) else {
                return Err(CoreError::Invalid(format!(
                    "policy `{name}` migrated job {j}, which is not running"
                )));
            };
            if !self.jobs[j].resumable {
                return Err(CoreError::Invalid(format!(
                    "policy `{name}` migrated job `{}`, which is not resumable",
                    self.jobs[j].name
                )));
            }
            if self.rule.is_some() && !s.movable {
                return Err(CoreError::Invalid(format!(
                    "policy `{name}` migrated job `{}`, which the cost rule holds still",
                    self.jobs[j].name
                )));
            }
            let old = s.end;
            let new = old + self.cfg.migration.migration_cost_s * count as f64;
            let s = &mut self.state[j];
            s.charges += count;
            s.end = new;
            s.last_moved = Some(t);
            self.charges += count;
            if new != old {
                self.by_end.remove(&(T(old), j));
                self.by_end.insert((T(new), j));
                self.ends.push(Reverse((T(new), j)));
                let e = self.expected_end(j, new);
                self.policy.set_expected_end(JobId(j as u64), e);
            }
            self.note_wakes(j, t, true);
        }
        Ok(())
    }

    /// Could job `j` fit in the free GPUs at all? (No policy could place it
    /// otherwise.)
    fn has_room(&self, j: usize) -> bool {
        self.free_gpus_of(&*self.policy) >= self.jobs[j].shape.total_gpus()
    }

    /// GPUs free on `policy` (the simulated policy or a fork of it), all
    /// pools together.
    fn free_gpus_of(&self, policy: &dyn ClusterPolicy) -> u64 {
        (0..self.tracks.len())
            .map(|p| policy.pool_occupancy(p).free_gpus())
            .sum()
    }

    /// The request for job `j` starting at `t`: movable when resumable and,
    /// with the cost rule on, worth moving.
    fn request_now(&self, j: usize, t: Seconds) -> JobRequest {
        let mut r = request(j, &self.jobs[j]);
        if let Some(rule) = self.rule {
            r.movable = r.movable && rule.worth_moving(&self.candidate(j, t));
        }
        r
    }

    /// When job `j`, ending in truth at `end`, is expected to end as a
    /// scheduler sees it ([`MigrationSettings::remaining`]: its start plus its time
    /// limit, or the oracle's true end): what the policy's Place ties use
    /// ([`PlacementPolicy::set_expected_end`]).
    fn expected_end(&self, j: usize, end: Seconds) -> Seconds {
        let d = self.jobs[j].duration_s;
        match self.cfg.migration.remaining {
            RemainingRun::Oracle => end,
            RemainingRun::TimeLimit => end + time_limit_for(d) - d,
            RemainingRun::ReplayLimit => end + replay_time_limit_for(d) - d,
        }
    }

    /// Tries to start job `j` now. `Ok(false)`: the policy has no room.
    fn try_start(&mut self, j: usize, t: Seconds, obs: &mut dyn Observer) -> Result<bool> {
        if !self.has_room(j) {
            return Ok(false);
        }
        self.apply_rule(t, 0)?;
        let req = self.request_now(j, t);
        let e = self.expected_end(j, t + self.jobs[j].duration_s);
        self.policy.set_expected_end(req.id, e);
        let gate = self.hold_unless_moves_start(t, &[], Some(j), &|p| {
            Ok(p.place(&req)?.map(|a| a.migrations).unwrap_or_default())
        })?;
        let hold = self.gate.keep(gate).unwrap_or_default();
        for &k in &hold {
            self.policy.set_movable(JobId(k as u64), false)?;
        }
        let placed = self.policy.place(&req);
        for &k in &hold {
            self.policy.set_movable(JobId(k as u64), true)?;
        }
        let Some(Admission { migrations, .. }) = placed? else {
            self.policy.set_expected_end(req.id, f64::INFINITY);
            return Ok(false);
        };
        self.job_pool[j] = self.policy.job_pool(req.id);
        let end = t + self.jobs[j].duration_s;
        self.state[j] = JobState {
            start: Some(t),
            end,
            running: true,
            charges: 0,
            movable: req.movable,
            last_moved: None,
        };
        if self.jobs[j].resumable && !req.movable {
            self.held += 1;
        }
        self.running += 1;
        if let Some(first) = self.first_reservation.remove(&j) {
            if t > first {
                self.heads_late += 1;
                self.heads_late_s += t - first;
            }
        }
        self.ends.push(Reverse((T(end), j)));
        self.by_end.insert((T(end), j));
        self.note_wakes(j, t, false);
        self.charge(&migrations, Some(j), t)?;
        self.holding_for_head = false;
        self.notify(obs, t, EventKind::Start, Some(j), &migrations);
        Ok(true)
    }

    /// Tries the start of job `j` on a fork of the policy: would its
    /// migrations move the head's reservation later than `res`? `None`: the
    /// policy cannot be forked. `Some(false)` also when the policy would not
    /// place `j` (the real try then refuses it too).
    fn slips_in_trial(
        &mut self,
        j: usize,
        t: Seconds,
        head: usize,
        res: &Reservation,
    ) -> Result<Option<bool>> {
        self.apply_rule(t, 0)?;
        let Some(mut trial) = self.policy.fork() else {
            return Ok(None);
        };
        let req = self.request_now(j, t);
        trial.set_expected_end(req.id, self.expected_end(j, t + self.jobs[j].duration_s));
        let Some(admission) = trial.place(&req)? else {
            return Ok(Some(false));
        };
        let charges = self.charges_of(&admission.migrations, Some(j));
        if charges.is_empty() {
            // No running job moved: `j`'s own layout cannot delay the head
            // (see QueuePolicy::Backfill).
            return Ok(Some(false));
        }
        let c = self.cfg.migration.migration_cost_s;
        let mut ends: Vec<(T, usize)> = self
            .by_end
            .iter()
            .copied()
            .filter(|(_, k)| !charges.iter().any(|(m, _)| m == k))
            .collect();
        for &(k, n) in &charges {
            ends.push((T(self.state[k].end + c * n as f64), k));
        }
        ends.push((T(t + self.jobs[j].duration_s), j));
        ends.sort_unstable();
        let next = self.reservation_in(&*trial, &ends, self.jobs[head].shape, t);
        Ok(Some(next.t_res > res.t_res))
    }

    fn schedule(&mut self, t: Seconds, obs: &mut dyn Observer) -> Result<()> {
        // Start heads while they fit (both queue policies).
        while let Some(&r) = self.queue.first() {
            let j = self.order[r];
            if !self.try_start(j, t, obs)? {
                break;
            }
            self.queue.remove(&r);
        }
        if self.cfg.queue == QueuePolicy::Fifo {
            return Ok(());
        }
        let Some(&head_pos) = self.queue.first() else {
            return Ok(());
        };
        let head = self.order[head_pos];
        let mut res = self.reservation(head, t);
        self.first_reservation.entry(head).or_insert(res.t_res);
        self.reserved = Some((head, res.t_res));
        if self.queue.len() < 2 {
            return Ok(());
        }
        let candidates: Vec<usize> = self
            .queue
            .iter()
            .skip(1)
            .take(self.cfg.backfill_depth)
            .copied()
            .collect();
        // Shapes the policy refused since the state last changed.
        let mut refused: BTreeSet<(u32, u32)> = BTreeSet::new();
        let (wh, gh) = (
            i64::from(self.jobs[head].shape.instances),
            self.jobs[head].shape.gpus,
        );
        for r in candidates {
            let j = self.order[r];
            let job = &self.jobs[j];
            let shape = (job.shape.instances, job.shape.gpus);
            if refused.contains(&shape) {
                continue;
            }
            let ends_in_time = t + job.duration_s <= res.t_res;
            let blocks = i64::from(job.shape.instances) * i64::from(job.shape.gpus.div_ceil(gh));
            let spare = res.fit - blocks >= wh;
            if !(ends_in_time || spare) || !self.has_room(j) {
                continue;
            }
            // Backfill never delays the head: a start whose migrations
            // would move the reservation later is refused (tried first on a
            // fork of the policy).
            if self.slips_in_trial(j, t, head, &res)? == Some(true) {
                self.refused_slip += 1;
                // A job that ends by the reservation frees its GPUs in the
                // projection, so another of its shape may pass; one that does
                // not end in time slips like any other of its shape.
                if !ends_in_time {
                    refused.insert(shape);
                }
                continue;
            }
            if self.try_start(j, t, obs)? {
                self.queue.remove(&r);
                self.backfilled += 1;
                refused.clear();
                let next = self.reservation(head, t);
                if next.t_res > res.t_res {
                    self.slips += 1;
                    self.slip_s += next.t_res - res.t_res;
                }
                res = next;
                self.reserved = Some((head, res.t_res));
            } else {
                refused.insert(shape);
            }
        }
        Ok(())
    }

    /// The head's reservation: the earliest projected time it fits
    /// physically, with its fit count then.
    fn reservation(&self, head: usize, t: Seconds) -> Reservation {
        let ends: Vec<(T, usize)> = self.by_end.iter().copied().collect();
        self.reservation_in(&*self.policy, &ends, self.jobs[head].shape, t)
    }

    fn finish(self) -> SimResult {
        let mut jct = 0.0;
        let mut pool_jct: Vec<(u64, f64)> = vec![(0, 0.0); self.tracks.len()];
        let mut all = Vec::new();
        let mut whole = Vec::new();
        let mut sub = Vec::new();
        let mut by_size: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        let mut last_end = self.first_submit;
        let mut migrated_jobs = 0;
        let mut job_outcomes = Vec::new();
        for &i in &self.order {
            let (job, s) = (&self.jobs[i], &self.state[i]);
            let start = s.start.unwrap_or(job.submit_s);
            let wait = start - job.submit_s;
            jct += s.end - job.submit_s;
            if self.cfg.record_jobs {
                job_outcomes.push(JobOutcome {
                    name: job.name.clone(),
                    submit_s: job.submit_s,
                    start_s: start,
                    end_s: s.end,
                    instances: job.shape.instances,
                    gpus: job.shape.gpus,
                    migration_charges: s.charges,
                });
            }
            if let Some(p) = self.job_pool[i] {
                pool_jct[p].0 += 1;
                pool_jct[p].1 += s.end - job.submit_s;
            }
            last_end = last_end.max(s.end);
            all.push(wait);
            if job.shape.gpus == self.max_gpus {
                whole.push(wait);
            } else {
                sub.push(wait);
            }
            let gpus = job.shape.total_gpus();
            let class = SIZE_CLASSES
                .iter()
                .position(|(lo, hi, _)| (*lo..=*hi).contains(&gpus))
                .unwrap_or(0);
            by_size.entry(class).or_default().push(wait);
            migrated_jobs += u64::from(s.charges > 0);
        }
        let n = self.order.len();
        let (window, name) = Window::metric(self.peak, self.busy);
        let avg = |x: f64| window.avg(x);
        let peak = self.peak.time > 0.0;
        let pools = self
            .pools
            .iter()
            .zip(&self.tracks)
            .zip(pool_jct)
            .map(|((spec, tr), (jobs, jct))| {
                let w = if peak { tr.peak } else { tr.busy };
                PoolResult {
                    name: spec.name.clone(),
                    nodes: tr.nodes,
                    gpus_per_node: tr.gpus_per_node,
                    jobs,
                    ajct_s: if jobs > 0 { jct / jobs as f64 } else { 0.0 },
                    afr: avg(w.sif),
                    agu: avg(w.util),
                    wcc_coverage: avg(w.wcc),
                    max_n_sif: tr.max_n_sif,
                    max_n_sif_under_wcc: tr.max_n_sif_wcc,
                    over_bound_events: tr.over_events,
                    over_bound_events_held: tr.over_events_held,
                    over_bound_s: tr.busy.over_bound,
                    migrations: tr.migrations,
                }
            })
            .collect();
        SimResult {
            policy: self.policy.name().to_string(),
            queue: self.cfg.queue,
            nodes: self.nodes,
            gpus_per_node: self.max_gpus,
            cluster: String::new(),
            migration_cost_s: self.cfg.migration.migration_cost_s,
            rule_cost_s: self.cfg.migration.rule_cost_s,
            migration_charge: self.cfg.migration.charge,
            payback: self.cfg.migration.payback,
            remaining_run: self.cfg.migration.remaining,
            move_when: self.cfg.migration.move_when,
            tidy_payback: (self.cfg.migration.move_when == MoveWhen::Pays)
                .then_some(self.cfg.migration.tidy_payback),
            jobs: n as u64,
            unschedulable: self.unschedulable,
            afr: avg(window.sif),
            ajct_s: if n > 0 { jct / n as f64 } else { 0.0 },
            agu: avg(window.util),
            metric_window: name.to_string(),
            peak_s: self.peak.time,
            busy_s: self.busy.time,
            makespan_s: last_end - self.first_submit,
            max_n_sif: self.max_n_sif,
            max_n_sif_under_wcc: self.max_n_sif_wcc,
            over_bound_events: self.over_events,
            over_bound_events_held: self.over_events_held,
            over_bound_s: self.busy.over_bound,
            over_bound_held_s: self.busy.over_bound_held,
            migrations: self.migrations,
            migration_charges: self.charges,
            migrated_jobs,
            migrations_per_job: if n > 0 {
                self.charges as f64 / n as f64
            } else {
                0.0
            },
            wcc_coverage: avg(window.wcc),
            backfilled: self.backfilled,
            backfill_refused_slip: self.refused_slip,
            compact_held_for_head: self.compact_held,
            compact_no_gain: self.gate.no_gain,
            gate_trials: self.gate.trials.get(),
            gate_trials_remembered: self.gate.remembered.get(),
            heads_late: self.heads_late,
            heads_late_s: self.heads_late_s,
            reservation_slips: self.slips,
            reservation_slip_s: self.slip_s,
            waits: WaitStats {
                overall: Percentiles::of(all),
                whole_node: Percentiles::of(whole),
                sub_node: Percentiles::of(sub),
                by_size: by_size
                    .into_iter()
                    .map(|(c, w)| SizeWaits {
                        gpus: SIZE_CLASSES[c].2.to_string(),
                        waits: Percentiles::of(w),
                    })
                    .collect(),
            },
            pools,
            timeseries: self.timeseries,
            job_outcomes,
        }
    }

    /// The reservation of a head of `shape` at `t` on `cluster` (see
    /// [`QueuePolicy::Backfill`]): running jobs end at the times given by
    /// `ends` (sorted) and free their GPUs on their current nodes. On a
    /// mixed cluster the head fits when one pool that admits its instances
    /// holds all of them (a job runs in one pool); `fit` is the largest fit
    /// count of such a pool then.
    fn reservation_in(
        &self,
        cluster: &dyn ClusterPolicy,
        ends: &[(T, usize)],
        shape: crate::model::JobShape,
        t: Seconds,
    ) -> Reservation {
        let pools: Vec<Option<&crate::placement::Occupancy>> = (0..self.tracks.len())
            .map(|p| {
                self.pools[p]
                    .admits(None, shape.gpus)
                    .then(|| cluster.pool_occupancy(p))
            })
            .collect();
        let ends = ends.iter().map(|&(T(e), j)| (e, JobId(j as u64)));
        crate::placement::head::reservation(&pools, ends, shape, t)
    }
}

/// The policy request for job `i` of a trace.
fn request(i: usize, job: &TraceJob) -> JobRequest {
    JobRequest {
        id: JobId(i as u64),
        shape: job.shape,
        movable: job.resumable,
    }
}

#[cfg(test)]
mod tests;
