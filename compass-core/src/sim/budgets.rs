//! Policy simulator (issue 5): replays a trace with accounts, min runtimes and
//! resumable flags through the whole decision core: fair-share ordering
//! ([`crate::fairshare`]), protected and preemptible time
//! ([`crate::preempt`]) and a placement policy (COMPASS or a baseline). Event
//! driven, skipping idle time: the clock jumps between arrivals, completions
//! and enforcement cycles, and cycles run only while jobs wait.
//!
//! Figures reported are those of the published budget design
//! (`fair-share-budgets.txt`), so both can be read side by side: owed
//! GPU-hours delivered (owed = allocation capped hourly at actual demand),
//! occupancy, the unallocated share of delivered time, debug-job p90 wait,
//! waits of the largest jobs, preemptions and GPU-time lost to them. Beside
//! them, the placement simulator's fragmentation figures (paper Section 5.5:
//! AFR, eq. 15, over `T_peak`, eq. 14; `N * SIF`, eq. 2), measured by its
//! own code (`sim::EventState::measure`, `sim::Window`) after every
//! start, end and preemption, so a replay with preemptions reads against a
//! placement-only one. Definitions: `docs/policy-simulator.md`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::ops::Bound::{Excluded, Unbounded};

use serde::{Deserialize, Serialize};

use crate::clock::Instant as T;
use crate::clock::Seconds;
use crate::error::{CoreError, Result};
use crate::fairshare::ledger::Usage;
use crate::fairshare::order::{node_stats, team_orders, QueueOrder, TeamNow, TeamOrders};
use crate::fairshare::tree::{NodeIx, OrgTree};
use crate::model::{ClusterSpec, JobId, JobRequest, JobShape, Migration, NodeSet};
use crate::placement::head::Chance;
use crate::placement::worth::{MigrationRule, MoveCandidate, MoveWhen};
use crate::placement::{self, PlacementPolicy, PolicyOptions};
use crate::preempt::{
    later_job_may_preempt, plan_drain, plan_room, NodeRoom, PendingJob, ProtectionConfig, Ratios,
    RunningJob, TeamLoad, TeamTable,
};
use crate::sim::free_profile::FreeProfile;
use crate::sim::gate::{self, Gate, GateEvent, GateState};
use crate::sim::stats::Percentiles;
use crate::sim::{
    EventState, MigrationCharge, MigrationSettings, PhiCache, RemainingRun, Snapshot, Window,
};
use crate::trace::{TraceJob, MAX_TRACE_S};

/// A job of the policy simulator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetJob {
    pub id: JobId,
    pub account: String,
    pub submit_s: Seconds,
    pub duration_s: Seconds,
    pub shape: JobShape,
    /// 0 = unallocated (free, preemptible) time.
    pub min_runtime_s: Seconds,
    pub resumable: bool,
    /// Reorders the job within its team only (Slurm: minus `--nice`).
    pub priority: i64,
}

/// Settings of a policy replay.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetSimConfig {
    pub spec: ClusterSpec,
    /// Placement policy (`compass`, `best-fit`, ...).
    pub policy: String,
    pub policy_options: PolicyOptions,
    /// Fair-share lookback window (the published design: 7 days).
    pub window_s: Seconds,
    pub protection: ProtectionConfig,
    /// Enforcement cycle: ratios, order and preemption are refreshed this often
    /// while jobs wait (the budget service's default is 10 s).
    pub cycle_s: Seconds,
    /// How often the jobs really checkpoint, seconds: what a preempted
    /// resumable job loses (its run since its last checkpoint). `None`:
    /// `protection.checkpoint_interval_s`, which is what the victim planner
    /// assumes when it chooses victims, as the budget service does from its
    /// own `checkpoint_interval_s`; a replay whose jobs checkpoint every
    /// second sets this apart from the service's assumption.
    pub job_checkpoint_s: Option<Seconds>,
    /// Seconds added to a job each time it restarts after a preemption
    /// (checkpoint restore). A migration costs
    /// [`MigrationSettings::migration_cost_s`].
    pub restart_cost_s: Seconds,
    /// What a Compact migration costs, the cost rule and the gate
    /// `move_when` ([`MigrationSettings`]), as in the placement simulator
    /// ([`crate::sim::SimConfig::migration`]; the gate's code is shared:
    /// `sim::gate`).
    pub migration: MigrationSettings,
    /// How many waiting jobs (oldest submission first) the gate looks at
    /// for one that moves would let start (the placement simulator's
    /// `backfill_depth`, which its gate reads the same way).
    pub gate_depth: usize,
    /// Start attempts per scheduling pass (Slurm's queue depth): jobs that
    /// need more GPUs than are free are skipped without an attempt.
    pub queue_depth: usize,
    /// Waiting jobs looked at per scheduling pass.
    pub scan_limit: usize,
    /// Teams whose head allocated job may preempt per cycle, in queue order
    /// ([`team_orders`], as the live service's queue).
    pub preempt_depth: usize,
    /// Stop at this simulated time (seconds after the first submission).
    pub horizon_s: Option<Seconds>,
    /// Debug jobs: at most this many GPUs ...
    pub debug_max_gpus: u32,
    /// ... and a min runtime in `(0, this]`.
    pub debug_max_min_runtime_s: Seconds,
    /// Keep a log of every start, preemption and completion in the report.
    pub record: Record,
    /// How teams are ordered when capacity frees up.
    pub team_order: TeamOrder,
    /// Drains for blocked jobs ([`crate::preempt::plan_drain`]): at most this
    /// many head jobs at a time hold nodes that no new protected work may
    /// take; 0 turns drains off (every job then only gets room that is free
    /// or legally preemptible at one instant, and the largest jobs starve).
    pub max_drains: usize,
    /// A blocked head job gets a drain only after waiting this long since
    /// submission: most blocked jobs start within minutes as other jobs end,
    /// and a drain costs the held nodes' protected work meanwhile.
    pub drain_after_s: Seconds,
    /// Only jobs of at least this many GPUs get drains (0: any job). Smaller
    /// jobs find room as other jobs end; every drain costs the held nodes'
    /// protected work meanwhile.
    pub drain_min_gpus: u64,
    /// How a drain picks its job and nodes and takes them ([`DrainRule`]).
    pub drain_rule: DrainRule,
    /// Which jobs may get a reservation ([`DrainRule::Reserve`] only).
    pub reserve_for: ReserveFor,
    /// Who may preempt whom in the enforcement cycle ([`Preemption`]).
    pub preemption: Preemption,
    /// `PreemptExemptTime` of the scavenger QOS ([`Preemption::Scavenger`]):
    /// a scavenger job is no victim before it has run this long.
    pub preempt_exempt_s: Seconds,
    /// `PriorityDecayHalfLife` of [`TeamOrder::FairTree`].
    pub decay_half_life_s: Seconds,
    /// How teams are ordered for unallocated (free) work ([`FreeOrder`]);
    /// allocated work always follows `team_order`.
    pub free_order: FreeOrder,
    /// Decompose each team's owed (allocated) shortfall by cause
    /// ([`Shortfall`], `compass simulate --shortfall`); off by default: it
    /// asks the victim planner up to five questions per short team and cycle.
    pub shortfall: bool,
    /// Head first (with [`TeamOrder::UnderAllocationFirst`]): in a
    /// scheduling pass, once a team below its allocation is left with
    /// allocated jobs waiting that the pass could not start, teams at or
    /// above their allocation start no allocated job protected longer than
    /// `debug_max_min_runtime_s` in that pass; free work still fills the
    /// room (it is a legal victim of the head at the next cycle). Slurm's
    /// backfill gives the head of the pushed order a reservation in the same
    /// way (`docs/policy-simulator.md`).
    pub head_first: bool,
    /// Whether a scheduling pass gives the jobs it cannot start
    /// reservations that later jobs may not delay, as Slurm's
    /// sched/backfill does ([`Backfill`]).
    pub backfill: Backfill,
}

/// How a scheduling pass treats the waiting jobs it cannot start.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backfill {
    /// Every job that fits starts, in queue order: a job that cannot start
    /// holds nothing back, and a smaller one behind it takes the room it
    /// waits for.
    #[default]
    Off,
    /// Slurm's `SchedulerType=sched/backfill`, in GPU counts: the pass
    /// walks the waiting jobs in queue order, keeping the free GPUs over
    /// time (running jobs give theirs back at their expected ends as the
    /// scheduler sees them: their time limits,
    /// [`crate::sim::RemainingRun`]). A job starts only when its GPUs stay
    /// free over its whole expected run; one that cannot start gets a
    /// reservation, its GPUs taken from the earliest time they are free
    /// for its expected run, so no later job in the pass delays it. Slurm
    /// does the same for every pending job it tests, up to
    /// `bf_max_job_test` of them (default [`MAX_RESERVATIONS`]), and
    /// starts a lower-priority job only when it delays no higher one's
    /// expected start. Not modelled: which nodes a reservation holds (GPU
    /// counts only; a job the nodes cannot take now is reserved for at the
    /// next time the counts change), `bf_resolution`, `bf_window` and
    /// `bf_interval` (the reservations hold in every pass), and the main
    /// scheduler's stop at the first blocked job of a partition
    /// (`docs/policy-simulator.md`).
    Reserve,
}

/// The most reservations one scheduling pass makes
/// ([`Backfill::Reserve`]): Slurm's `bf_max_job_test` default, the pending
/// jobs one backfill pass tests.
pub const MAX_RESERVATIONS: usize = 500;

/// Preemption rules of the enforcement cycle.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preemption {
    /// Ours (`crate::preempt`): protected time, "still prioritised".
    #[default]
    Compass,
    /// No preemption at all (Slurm `PreemptType=preempt/none`). With
    /// [`TeamOrder::FairTree`] there is one QOS: allocated and unallocated
    /// jobs share one queue and all usage counts.
    None,
    /// Slurm `PreemptType=preempt/qos`: unallocated jobs (min runtime 0) run
    /// in a scavenger QOS (lower priority, `UsageFactor=0`) that every
    /// normal-QOS (allocated) job may preempt (`PreemptMode=REQUEUE`, or
    /// cancel when not resumable) once the scavenger job has run
    /// `PreemptExemptTime`; normal jobs are never preempted.
    Scavenger,
}

pub use crate::fairshare::order::{FreeOrder, TeamOrder};

/// How a drain ([`BudgetSimConfig::max_drains`]) picks its job and its nodes,
/// and how the job takes them (issue 15: the largest jobs within a bounded
/// wait; measured in `docs/results.md`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainRule {
    /// Issue 5's drain: the first unplaceable team heads, in team order,
    /// hold the nodes of [`plan_drain`] (nodes with an unprotected job that
    /// is no legal victim are never chosen) and take them through
    /// [`plan_room`] (legal victims only); a drain whose nodes are due but
    /// still hold such a job is planned again.
    #[default]
    Hold,
    /// A reservation in time, one job at a time by age: the oldest waiting
    /// allocated job of at least `drain_min_gpus` GPUs that has waited
    /// `drain_after_s` holds the nodes whose jobs stop being protected
    /// soonest ([`reserve_nodes`]: any job, unprotected ones count as now).
    /// Until then only work that will be unprotected by the reservation
    /// time (unallocated jobs, short protected ones) is placed there; at the
    /// reservation time every job left on those nodes is preempted for it,
    /// whatever its team. So its wait after the reservation is at most one
    /// protected period (the cap) plus a cycle.
    Reserve,
}

/// Which waiting jobs may get a reservation ([`DrainRule::Reserve`]),
/// besides size and age: a job larger than its team's allocation runs on
/// other teams' owed hours, which is what a reservation costs (issue 15:
/// "without giving up more than one point of owed delivered").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReserveFor {
    /// Every job of at least `drain_min_gpus` GPUs.
    #[default]
    Any,
    /// Only jobs of at most their team's allocation (share x capacity GPUs).
    WithinAllocation,
    /// Only jobs whose team used less than its share over the lookback
    /// window (fair-share ratio below 1).
    UnderShare,
}

/// Whether the report carries the event log.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Record {
    #[default]
    Summary,
    Events,
}

/// One entry of the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SimEvent {
    Start {
        t: Seconds,
        job: JobId,
    },
    Preempt {
        t: Seconds,
        job: JobId,
        for_job: JobId,
        requeued: bool,
    },
    Finish {
        t: Seconds,
        job: JobId,
    },
}

impl BudgetSimConfig {
    /// The published design's settings (7-day window, 60 s cycle, 8 h cap),
    /// and the placement simulator's defaults for migrations
    /// ([`MigrationSettings::default`]: `c = 8` s per instance, payback 2
    /// on time limits, `move_when = always`, tidy payback 20; gate depth
    /// 1000).
    pub fn new(spec: ClusterSpec) -> Self {
        Self {
            spec,
            policy: "compass".into(),
            policy_options: PolicyOptions::default(),
            window_s: 7.0 * 86400.0,
            protection: ProtectionConfig::default(),
            cycle_s: 60.0,
            restart_cost_s: 8.0,
            job_checkpoint_s: None,
            migration: MigrationSettings::default(),
            gate_depth: 1000,
            queue_depth: 200,
            scan_limit: 5000,
            preempt_depth: 16,
            horizon_s: None,
            debug_max_gpus: 2,
            debug_max_min_runtime_s: 900.0,
            record: Record::Summary,
            team_order: TeamOrder::default(),
            max_drains: 0,
            drain_after_s: 2.0 * 3600.0,
            drain_min_gpus: 0,
            drain_rule: DrainRule::default(),
            reserve_for: ReserveFor::default(),
            preemption: Preemption::default(),
            preempt_exempt_s: 600.0,
            decay_half_life_s: fair_tree::DEFAULT_HALF_LIFE_S,
            free_order: FreeOrder::default(),
            shortfall: false,
            head_first: false,
            backfill: Backfill::Off,
        }
    }
}

/// Per-team figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeamReport {
    pub account: String,
    /// Fixed share of total capacity.
    pub share: f64,
    pub jobs: usize,
    /// Allocation capped hourly at the team's demand, GPU-hours.
    pub owed_gpu_h: f64,
    /// Owed GPU-hours the team actually received.
    pub delivered_gpu_h: f64,
    /// `delivered / owed` (1 when nothing was owed).
    pub owed_delivered: f64,
    /// Allocation capped hourly at the team's *allocated* demand (jobs with
    /// min runtime > 0), GPU-hours.
    #[serde(default)]
    pub owed_allocated_gpu_h: f64,
    /// Of those, what its allocated (charged) jobs received.
    #[serde(default)]
    pub delivered_allocated_gpu_h: f64,
    /// All GPU-hours the team used (charged and free).
    pub used_gpu_h: f64,
    pub charged_gpu_h: f64,
    /// Owed (allocated) GPU-hours not delivered, by cause
    /// ([`BudgetSimConfig::shortfall`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<Shortfall>,
}

/// Why a team's owed (allocated) GPU-hours were not delivered
/// (`--shortfall`; `docs/policy-simulator.md`, "Where the shortfall goes").
/// After every enforcement cycle, each team running fewer allocated GPUs
/// than `min(allocation, allocated demand)` is sampled: its gap (that
/// difference) is put on the first cause below that holds, for the cycle's
/// length. Each hour's actual shortfall (owed minus delivered, allocated
/// reading) is then split over the causes in proportion to the hour's
/// sampled gaps; hours with a shortfall but no sampled gap go to
/// `between_cycles`. The fields sum to the team's shortfall, in GPU-hours.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Shortfall {
    /// Its head job (the one that asks for room) could start now, in free
    /// room or with legal victims, but was not started in this cycle (other
    /// teams' jobs came first, or it was past `preempt_depth`).
    pub order: f64,
    /// Its head job cannot be placed even with every legal victim, but
    /// another of its waiting allocated jobs could: only the head asks for
    /// room.
    pub head_blocked: f64,
    /// Only jobs that were preempted and have not yet run their min runtime
    /// could be placed with legal victims (the no-loop rule).
    pub loop_rule: f64,
    /// Placeable only if unprotected allocated jobs of teams above their
    /// allocation were victims whatever the lookback ratios (the
    /// `preempt_margin` ratio test of `preempt::team_rule`).
    pub ratio_rule: f64,
    /// None of its jobs is placeable so (even without the ratio test), but
    /// a job of the size of its gap would be (whole 8-GPU nodes, or one
    /// node's part below 8 GPUs): its jobs are larger than what it is owed
    /// (job granularity against its share).
    pub granularity: f64,
    /// Placeable only if protected jobs of teams above their allocation were
    /// victims too: waiting behind their protected time.
    pub protected_over: f64,
    /// Not placeable even then: the room left by its own running jobs and by
    /// teams at or below their allocation does not hold its jobs.
    #[serde(default)]
    pub no_room: f64,
    /// Hours short with no gap seen at any cycle end (a gap that opened and
    /// closed between cycles).
    pub between_cycles: f64,
}

/// Causes of [`Shortfall`], in the order they are tested.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Cause {
    Order,
    HeadBlocked,
    LoopRule,
    RatioRule,
    Granularity,
    ProtectedOver,
    NoRoom,
}

const CAUSES: usize = 7;

impl Shortfall {
    fn add(&mut self, k: usize, gpu_h: f64) {
        match k {
            0 => self.order += gpu_h,
            1 => self.head_blocked += gpu_h,
            2 => self.loop_rule += gpu_h,
            3 => self.ratio_rule += gpu_h,
            4 => self.granularity += gpu_h,
            5 => self.protected_over += gpu_h,
            6 => self.no_room += gpu_h,
            _ => self.between_cycles += gpu_h,
        }
    }
}

/// [`Ratios`] without the ratio test: `requester` is less served than every
/// other team, loads as in `table` (for [`Cause::RatioRule`]).
struct NoRatioTest<'a> {
    table: &'a TeamTable,
    requester: &'a str,
}

impl Ratios for NoRatioTest<'_> {
    fn ratio(&self, account: &str) -> f64 {
        if account == self.requester {
            0.0
        } else {
            f64::INFINITY
        }
    }
    fn allocation(&self, account: &str) -> Option<TeamLoad> {
        self.table.allocation(account)
    }
}

/// Result of a policy replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetReport {
    pub policy: String,
    pub nodes: u32,
    pub gpus: u64,
    pub jobs: usize,
    pub completed: usize,
    /// Non-resumable victims, cancelled.
    pub cancelled: usize,
    /// Not finished at the horizon.
    pub unfinished: usize,
    pub simulated_s: Seconds,
    pub window_s: Seconds,
    pub min_runtime_cap_s: Seconds,
    /// Overall owed GPU-hours delivered.
    pub owed_delivered: f64,
    pub worst_team_owed_delivered: f64,
    /// Teams owed anything that received at least 95% of it.
    pub teams_at_95: usize,
    pub teams_owed: usize,
    /// The same three figures for allocated work only: owed = allocation
    /// capped hourly at the team's allocated demand, delivered = its
    /// charged use (unallocated time delivers nothing owed).
    #[serde(default)]
    pub owed_allocated_delivered: f64,
    #[serde(default)]
    pub worst_team_owed_allocated_delivered: f64,
    #[serde(default)]
    pub teams_at_95_allocated: usize,
    /// Used GPU-time over capacity while jobs were waiting.
    pub occupancy: f64,
    /// Unallocated share of the delivered GPU-time.
    pub unallocated_share: f64,
    pub debug_jobs: usize,
    pub debug_p90_wait_s: f64,
    /// Largest jobs: GPU count at or above the 99th percentile.
    pub largest_min_gpus: u32,
    pub largest_jobs: usize,
    /// Largest jobs submitted by the horizon that started by then.
    #[serde(default)]
    pub largest_started: usize,
    pub largest_p50_wait_s: f64,
    pub largest_p90_wait_s: f64,
    /// The same for the largest jobs that ask protected time (min runtime
    /// > 0): unallocated ones get no promise, by design.
    #[serde(default)]
    pub largest_allocated_jobs: usize,
    #[serde(default)]
    pub largest_allocated_started: usize,
    #[serde(default)]
    pub largest_allocated_p50_wait_s: f64,
    #[serde(default)]
    pub largest_allocated_p90_wait_s: f64,
    pub wait: Percentiles,
    pub preemptions: u64,
    pub preemptions_per_job: f64,
    pub lost_gpu_h: f64,
    /// Instances moved by Compact, in total.
    pub migrations: u64,
    /// Migration costs charged (`c` each): one per migrated instance, or one
    /// per moved job per policy call ([`MigrationCharge`]), as the placement
    /// simulator counts them.
    #[serde(default)]
    pub migration_charges: u64,
    /// Jobs migrated at least once.
    #[serde(default)]
    pub migrated_jobs: u64,
    /// `c`, seconds ([`MigrationSettings::migration_cost_s`]).
    #[serde(default)]
    pub migration_cost_s: Seconds,
    /// The cost the rule weighed, when not `c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_cost_s: Option<Seconds>,
    /// How `c` was charged.
    #[serde(default)]
    pub migration_charge: MigrationCharge,
    /// The cost rule's payback as configured (`0`: off). It acts only on
    /// policies that honour movability (COMPASS).
    #[serde(default)]
    pub payback: f64,
    /// What the cost rule took as a job's remaining run.
    #[serde(default)]
    pub remaining_run: RemainingRun,
    /// The move rule that ran: when the cost rule lets jobs move.
    #[serde(default)]
    pub move_when: MoveWhen,
    /// Under [`MoveWhen::Pays`], [`MigrationSettings::tidy_payback`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tidy_payback: Option<f64>,
    /// Events at which the gate ([`MoveWhen::Starts`], [`MoveWhen::Pays`])
    /// held moves still because none let a waiting job start (as
    /// [`crate::sim::SimResult::compact_no_gain`]).
    #[serde(default)]
    pub compact_no_gain: u64,
    /// The gate's first trials made, and those its memory of failed trials
    /// skipped ([`crate::sim::SimResult::gate_trials`]).
    #[serde(default)]
    pub gate_trials: u64,
    #[serde(default)]
    pub gate_trials_remembered: u64,
    /// Jobs started after a drain held nodes for them (`max_drains`).
    #[serde(default)]
    pub drained_starts: u64,
    /// Drains planned (first plans and plans made again).
    #[serde(default)]
    pub drains_planned: u64,
    /// Of those, plans made again because the nodes were due but a job
    /// there ran on past its protection and was no legal victim
    /// ([`DrainRule::Hold`]).
    #[serde(default)]
    pub drains_replanned: u64,
    /// Cycles in which a job that qualified for a drain got none because too
    /// few nodes could be promised ([`plan_drain`] or [`reserve_nodes`]
    /// found none).
    #[serde(default)]
    pub drains_refused: u64,
    /// GPU-hours left idle on held nodes while drains waited (free GPUs of
    /// held nodes, integrated over time).
    #[serde(default)]
    pub drain_idle_gpu_h: f64,
    /// Preemptions made by reservations taking their nodes
    /// ([`DrainRule::Reserve`]; included in `preemptions`).
    #[serde(default)]
    pub reserve_preemptions: u64,
    /// Victim sets preempted for a job that then did not start (the
    /// placement policy refused the room the planner counted).
    #[serde(default)]
    pub room_unused: u64,
    /// Average Fragmentation Rate (paper eq. 15), as the placement
    /// simulator defines it ([`crate::sim::SimResult::afr`]): the time
    /// average of `SIF = N * SIF / N` over the metric window, `T_peak`
    /// (eq. 14: the time at least one job waits, requeued victims
    /// included). `N * SIF = Phi_pi - Phi*` (eq. 2) is measured after every
    /// start, end and preemption (a start's or an end's Compact migrations
    /// included) and held until the next.
    #[serde(default)]
    pub afr: f64,
    /// The time average of `N * SIF` over the same window: `AFR x N`.
    #[serde(default)]
    pub mean_n_sif: f64,
    /// Largest `N * SIF` after any start, end or preemption (the victims of
    /// one preemption leave together, so the state between their departure
    /// and the start of the job they made room for counts too).
    #[serde(default)]
    pub max_n_sif: u64,
    /// `peak` (AFR over `T_peak`), or `busy` when no job ever waited for a
    /// positive time: AFR then averages over the time any job ran
    /// ([`crate::sim::SimResult::metric_window`]).
    #[serde(default)]
    pub metric_window: String,
    /// `|T_peak|`: seconds with at least one job waiting.
    #[serde(default)]
    pub peak_s: Seconds,
    /// Seconds with any job running or waiting.
    #[serde(default)]
    pub busy_s: Seconds,
    /// Average Job Completion Time (paper eq. 16) of the completed jobs:
    /// mean of completion minus submission, restart and migration costs
    /// included; cancelled and unfinished jobs are left out.
    #[serde(default)]
    pub ajct_s: Seconds,
    pub teams: Vec<TeamReport>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub events: Vec<SimEvent>,
}

/// Scales arrival times so that offered GPU-time equals `demand` times the
/// cluster's capacity over the (scaled) arrival span.
pub fn scale_demand(jobs: &mut [BudgetJob], capacity_gpus: u64, demand: f64) -> Result<()> {
    if !(demand.is_finite() && demand > 0.0) {
        return Err(CoreError::Invalid(format!(
            "demand must be a positive number, got {demand}"
        )));
    }
    let first = jobs
        .iter()
        .map(|j| j.submit_s)
        .fold(f64::INFINITY, f64::min);
    let last = jobs
        .iter()
        .map(|j| j.submit_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let work: f64 = jobs
        .iter()
        .map(|j| j.duration_s * j.shape.total_gpus() as f64)
        .sum();
    if jobs.is_empty() || last <= first || work <= 0.0 {
        return Ok(());
    }
    // Offered load over the span: work / (capacity * span). Compress or
    // stretch the span so it equals `demand`.
    let span = work / (capacity_gpus as f64 * demand);
    let factor = span / (last - first);
    for j in jobs.iter_mut() {
        j.submit_s = (j.submit_s - first) * factor;
    }
    Ok(())
}

/// The accounts of `jobs` that are no leaf account of `tree`, with their
/// numbers of jobs. The policy simulator replays such jobs as unallocated
/// time (never protected, never preempting), as the budget service runs
/// them; it refuses a trace none of whose accounts is in the tree.
pub fn accounts_outside(jobs: &[BudgetJob], tree: &OrgTree) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for j in jobs {
        if tree.leaf_for_account(&j.account).is_err() {
            *out.entry(j.account.clone()).or_insert(0) += 1;
        }
    }
    out
}

/// The first few of `names`, comma separated, and how many more.
pub fn first_names<'n>(names: impl Iterator<Item = &'n str>) -> String {
    const SHOWN: usize = 5;
    let names: Vec<&str> = names.collect();
    let mut s = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    if names.is_empty() {
        s.push_str("none");
    }
    s
}

/// FNV-1a, for deterministic assignments that do not depend on row order.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Turns Venus rows (no accounts, no min runtimes) into policy-simulator
/// jobs, deterministically (`docs/policy-simulator.md`):
/// - account: the job id's FNV-1a hash modulo the total node count of
///   `vcs`, mapped onto the virtual clusters by cumulative node counts, so a
///   VC's expected share of jobs is proportional to its size;
/// - debug jobs (at most 2 GPUs, at most 15 minutes) ask their duration as
///   min runtime and priority 1 (first in their team); of the others one in five (by hash) is unallocated
///   (min runtime 0) and the rest ask `min(duration, cap)`;
/// - nine in ten (by hash) are resumable.
pub fn assign_venus(
    jobs: &[TraceJob],
    vcs: &[(String, u32)],
    min_runtime_cap_s: Seconds,
) -> Result<Vec<BudgetJob>> {
    let total: u64 = vcs.iter().map(|(_, n)| u64::from(*n)).sum();
    if total == 0 {
        return Err(CoreError::Invalid("virtual clusters have no nodes".into()));
    }
    Ok(jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let h = fnv(&j.name);
            let mut slot = h % total;
            let account = vcs
                .iter()
                .find(|(_, n)| {
                    if slot < u64::from(*n) {
                        true
                    } else {
                        slot -= u64::from(*n);
                        false
                    }
                })
                .map(|(name, _)| name.clone())
                .expect("slot below the total");
            let gpus = j.shape.total_gpus();
            let debug = gpus <= 2 && j.duration_s <= 900.0;
            let min_runtime_s = if debug {
                j.duration_s.max(1.0)
            } else if (h >> 20).is_multiple_of(5) {
                0.0
            } else {
                j.duration_s.min(min_runtime_cap_s).max(1.0)
            };
            BudgetJob {
                id: JobId(i as u64 + 1),
                account,
                submit_s: j.submit_s,
                duration_s: j.duration_s,
                shape: j.shape,
                min_runtime_s,
                resumable: !(h >> 40).is_multiple_of(10),
                priority: i64::from(debug),
            }
        })
        .collect())
}

/// Converts canonical-trace rows (which may carry account, min runtime and
/// resumable) into policy-simulator jobs; rows without an account are refused.
pub fn from_canonical(jobs: &[TraceJob], file: &str) -> Result<Vec<BudgetJob>> {
    jobs.iter()
        .enumerate()
        .map(|(i, j)| {
            let account = j.account.clone().ok_or_else(|| CoreError::Trace {
                file: file.into(),
                line: j.line,
                field: "account".into(),
                why: "the policy simulator needs an account on every row".into(),
            })?;
            Ok(BudgetJob {
                id: JobId(i as u64 + 1),
                account,
                submit_s: j.submit_s,
                duration_s: j.duration_s,
                shape: j.shape,
                min_runtime_s: j.min_runtime_s.unwrap_or(0.0),
                resumable: j.resumable,
                priority: 0,
            })
        })
        .collect()
}

/// Cumulative GPU-seconds of one team as a piecewise-linear function of time,
/// with the breakpoints still inside the lookback window.
#[derive(Clone, Debug, Default)]
struct Cumulative {
    value: f64,
    rate: f64,
    last: f64,
    /// `(time, value at time, rate after time)`.
    hist: VecDeque<(f64, f64, f64)>,
}

impl Cumulative {
    fn advance(&mut self, t: f64) {
        self.value += self.rate * (t - self.last);
        self.last = t;
    }
    fn add_rate(&mut self, t: f64, delta: f64) {
        self.advance(t);
        self.rate += delta;
        self.hist.push_back((t, self.value, self.rate));
    }
    /// Value at `t <= last`; forgets breakpoints before `t` (queries only move forward).
    fn at(&mut self, t: f64) -> f64 {
        while self.hist.len() >= 2 && self.hist[1].0 <= t {
            self.hist.pop_front();
        }
        match self.hist.front() {
            Some(&(t0, v0, r)) if t >= t0 => v0 + r * (t - t0),
            _ => 0.0,
        }
    }
}

/// Per-team live accounting.
#[derive(Clone, Debug, Default)]
struct Team {
    account: String,
    share: f64,
    leaf: Option<NodeIx>,
    charged: Cumulative,
    /// Usage decayed with `PriorityDecayHalfLife` ([`TeamOrder::FairTree`]).
    decayed: fair_tree::DecayedUsage,
    /// GPUs of the team's running jobs, by kind.
    run_charged: u64,
    run_free: u64,
    /// GPUs of the team's jobs waiting or running: all, allocated.
    demand: u64,
    demand_alloc: u64,
    /// Hourly integrals: demand, use, allocated demand, charged use
    /// (GPU-seconds).
    demand_h: Vec<f64>,
    used_h: Vec<f64>,
    demand_alloc_h: Vec<f64>,
    charged_h: Vec<f64>,
    charged_total: f64,
    free_total: f64,
    /// Sampled gaps by [`Cause`], GPU-seconds per hour (`shortfall` only).
    gap_h: Vec<[f64; CAUSES]>,
    jobs: usize,
    /// Waiting jobs by (submit, index): allocated and unallocated.
    wait_alloc: Waiting,
    wait_free: Waiting,
}

/// Each hour's owed (allocated) shortfall split over the causes sampled in
/// that hour ([`Shortfall`]), in GPU-hours.
fn shortfall_of(
    alloc_h: f64,
    demand_h: &[f64],
    charged_h: &[f64],
    gap_h: &[[f64; CAUSES]],
) -> Shortfall {
    let mut out = Shortfall::default();
    for (h, d) in demand_h.iter().enumerate() {
        let owed = alloc_h.min(*d);
        let short = owed - charged_h.get(h).copied().unwrap_or(0.0).min(owed);
        if short <= 0.0 {
            continue;
        }
        let gaps = gap_h.get(h).copied().unwrap_or_default();
        let sum: f64 = gaps.iter().sum();
        if sum > 0.0 {
            for (k, g) in gaps.iter().enumerate() {
                out.add(k, short * g / sum / 3600.0);
            }
        } else {
            out.add(CAUSES, short / 3600.0);
        }
    }
    out
}

fn add_hourly(buckets: &mut Vec<f64>, from: f64, to: f64, rate: f64) {
    if rate == 0.0 || to <= from {
        return;
    }
    let mut t = from;
    while t < to {
        let h = (t / 3600.0).floor();
        let end = ((h + 1.0) * 3600.0).min(to);
        let h = h as usize;
        if buckets.len() <= h {
            buckets.resize(h + 1, 0.0);
        }
        buckets[h] += rate * (end - t);
        t = end;
    }
}

/// A waiting job's place in its team's queue: higher priority first, then
/// submit time, then index.
type WaitKey = (Reverse<i64>, u64, usize);

/// A team's waiting jobs of one kind, bucketed by shape `(gpus, instances)`:
/// a scheduling pass looks only at shapes that fit the free GPUs and that
/// are not at least as large as a shape that just failed to place.
type Waiting = BTreeMap<(u32, u32), BTreeSet<WaitKey>>;

/// Is `job`'s protection, once started, at most
/// `debug_max_min_runtime_s` ([`BudgetSimConfig::head_first`])?
fn protected_briefly(job: &BudgetJob, cfg: &BudgetSimConfig) -> bool {
    job.min_runtime_s.min(cfg.protection.min_runtime_cap_s) <= cfg.debug_max_min_runtime_s
}

/// The waiting jobs of `w` whose protection, once started, lasts at most
/// `debug_max_min_runtime_s` ([`BudgetSimConfig::head_first`]).
fn short_protected(w: &Waiting, jobs: &[BudgetJob], cfg: &BudgetSimConfig) -> Waiting {
    let mut out = Waiting::new();
    for (shape, set) in w {
        let short: BTreeSet<WaitKey> = set
            .iter()
            .copied()
            .filter(|k| protected_briefly(&jobs[k.2], cfg))
            .collect();
        if !short.is_empty() {
            out.insert(*shape, short);
        }
    }
    out
}

/// The first job, in queue order, of a shape worth trying.
fn first_fitting(
    w: &Waiting,
    free: u64,
    failed: &[(u32, u32)],
    team_failed: &[(u32, u32)],
) -> Option<WaitKey> {
    w.iter()
        .filter(|((g, n), _)| u64::from(*g) * u64::from(*n) <= free)
        .filter(|((g, n), _)| {
            !failed
                .iter()
                .chain(team_failed)
                .any(|(fg, fn_)| g >= fg && n >= fn_)
        })
        .filter_map(|(_, set)| set.first().copied())
        .min()
}

/// A team's waiting jobs of one kind (or of both, in one queue) in queue
/// order, one at a time, while the pass starts some of them
/// ([`Sim::schedule_reserving`]): per shape, the next job not yet walked
/// (a job started leaves its shape's set; the walk keeps keys, not
/// references, so it does not hold the team).
struct TeamWalk {
    /// (allocated, shape, the next job of that shape).
    heads: Vec<(bool, (u32, u32), WaitKey)>,
}

impl TeamWalk {
    fn new(team: &Team, kind: Option<bool>) -> Self {
        let kinds: &[bool] = match kind {
            Some(alloc) => &[alloc][..],
            None => &[true, false],
        };
        let heads = kinds
            .iter()
            .flat_map(|&alloc| {
                let w = if alloc {
                    &team.wait_alloc
                } else {
                    &team.wait_free
                };
                w.iter()
                    .filter_map(move |(&shape, set)| Some((alloc, shape, *set.first()?)))
            })
            .collect();
        Self { heads }
    }

    /// The team's next waiting job in queue order.
    fn next(&mut self, team: &Team) -> Option<WaitKey> {
        let (k, &(alloc, shape, key)) = self.heads.iter().enumerate().min_by_key(|h| h.1 .2)?;
        let w = if alloc {
            &team.wait_alloc
        } else {
            &team.wait_free
        };
        let after = w
            .get(&shape)
            .and_then(|set| set.range((Excluded(key), Unbounded)).next());
        match after {
            Some(&n) => self.heads[k].2 = n,
            None => {
                self.heads.swap_remove(k);
            }
        }
        Some(key)
    }
}

/// The teams of one scheduling pass in order ([`Sim::schedule`],
/// [`Sim::schedule_reserving`]): allocated work of every team in team
/// order, then unallocated work in the free order; or every team's jobs
/// of both kinds in one queue. Tracks [`BudgetSimConfig::head_first`]:
/// once a team below its allocation is left with allocated jobs waiting,
/// the teams after it at or above theirs are `held` (only briefly
/// protected jobs of theirs may start).
struct PassOrder {
    /// (kind: allocated, unallocated or both, team), in pass order.
    teams: VecDeque<(Option<bool>, usize)>,
    head_first: bool,
    /// A team below its allocation whose head job was left waiting in
    /// this pass.
    head_left: bool,
}

impl PassOrder {
    fn new(sim: &Sim<'_>) -> Self {
        let TeamOrders { allocated, free } = sim.team_orders();
        let teams = if sim.one_queue() {
            allocated.iter().map(|&t| (None, t)).collect()
        } else {
            let alloc = allocated.iter().map(|&t| (Some(true), t));
            alloc
                .chain(free.iter().map(|&t| (Some(false), t)))
                .collect()
        };
        Self {
            teams,
            head_first: sim.cfg.head_first && sim.cfg.team_order == TeamOrder::UnderAllocationFirst,
            head_left: false,
        }
    }

    /// The next team: (kind, team, held).
    fn next(&mut self, sim: &Sim<'_>) -> Option<(Option<bool>, usize, bool)> {
        let (kind, t) = self.teams.pop_front()?;
        let held =
            self.head_first && kind == Some(true) && self.head_left && !sim.below_allocation(t);
        Some((kind, t, held))
    }

    /// The pass is done with team `t`'s jobs of `kind`.
    fn team_done(&mut self, sim: &Sim<'_>, kind: Option<bool>, t: usize) {
        if self.head_first && kind == Some(true) && sim.below_allocation(t) {
            self.head_left |= !sim.teams[t].wait_alloc.is_empty();
        }
    }
}

/// Live state of one job.
#[derive(Clone, Debug, Default)]
struct Live {
    team: usize,
    progress_s: f64,
    run_start: Option<f64>,
    first_start: Option<f64>,
    /// Preempted, and not yet run its (capped) min runtime since its
    /// restart ([`Sim::owes_min_runtime`]).
    owes: bool,
    /// Restart and migration overheads of the current run.
    extra_s: f64,
    /// The placement policy may move it now (the cost rule's verdict, as
    /// the policy was told; resumable jobs only).
    movable: bool,
    /// Its last migration in the current run.
    last_moved: Option<f64>,
    /// Migration costs charged to it (`c` each), over all its runs.
    charges: u64,
    gen: u64,
    preempted_by: Option<JobId>,
    preemptions: u32,
    waiting: bool,
    done: bool,
    cancelled: bool,
    /// When it completed (not when cancelled).
    end_s: Option<f64>,
}

/// The fragmentation of a replay ([`BudgetReport::afr`]), measured and
/// integrated by the placement simulator's code: [`EventState::measure`]
/// after every policy call that changes the layout, the state held until
/// the next, integrated over [`Window`]s and averaged over the one
/// [`Window::metric`] picks.
#[derive(Clone, Debug, Default)]
struct Frag {
    last_phi: PhiCache,
    /// The state after the last start, end or preemption.
    now: EventState,
    /// Integrals while a job waits (`T_peak`, eq. 14) ...
    peak: Window,
    /// ... and while any job runs or waits.
    busy: Window,
    max_n_sif: u64,
}

impl Frag {
    /// After a policy call: `N * SIF` of the layout now.
    fn measure(&mut self, occ: &placement::Occupancy, gpus_per_node: u32) {
        self.now = EventState::measure(occ, gpus_per_node, &mut self.last_phi);
        self.max_n_sif = self.max_n_sif.max(self.now.n_sif);
    }

    /// Integrates the state since the last policy call over `dt` seconds.
    fn add(&mut self, dt: f64, waiting: bool, running: bool, nodes: u32, utilisation: f64) {
        let snap = Snapshot {
            sif: self.now.n_sif as f64 / f64::from(nodes),
            utilisation,
            wcc: self.now.wcc,
            ..Snapshot::default()
        };
        if waiting {
            self.peak.add(dt, &snap);
        }
        if waiting || running {
            self.busy.add(dt, &snap);
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Finish(usize, u64),
    Arrive(usize),
    /// A running job's verdict may turn movable (its protection ended):
    /// a Compact is tried ([`Sim::compact_on_wake`]).
    Wake(usize),
    Cycle,
}

/// Replays `jobs` (submit times from 0) through ordering, protection,
/// preemption and placement.
pub fn run_budgets(
    jobs: &[BudgetJob],
    tree: &OrgTree,
    cfg: &BudgetSimConfig,
) -> Result<BudgetReport> {
    Sim::new(jobs, tree, cfg)?.run()
}

struct Sim<'a> {
    jobs: &'a [BudgetJob],
    tree: &'a OrgTree,
    cfg: &'a BudgetSimConfig,
    policy: Box<dyn PlacementPolicy>,
    teams: Vec<Team>,
    live: Vec<Live>,
    heap: BinaryHeap<Reverse<(u64, Ev, u64)>>,
    seq: u64,
    now: f64,
    cycle_pending: bool,
    /// Teams in fair-share order (allocated jobs of the first team first).
    order: Vec<usize>,
    ratios: TeamTable,
    /// The team of each entry of `ratios.load`, in its order
    /// ([`Sim::refresh_loads`]).
    load_teams: Vec<usize>,
    capacity: u64,
    waiting: usize,
    peak_used_gpu_s: f64,
    peak_s: f64,
    preemptions: u64,
    lost_gpu_s: f64,
    migrations: u64,
    events: Vec<SimEvent>,
    /// Nodes held for blocked jobs ([`plan_drain`]).
    drains: Vec<Drain>,
    /// Union of the drains' nodes.
    held: NodeSet,
    drains_started: u64,
    drains_planned: u64,
    drains_replanned: u64,
    drains_refused: u64,
    drain_idle_gpu_s: f64,
    reserve_preemptions: u64,
    room_unused: u64,
    /// Jobs moved by Compact since the victim planner last looked.
    moved: Vec<JobId>,
    frag: Frag,
    /// The cost rule; `None` when off (`payback = 0`) or when the policy
    /// does not act on movability (it then never migrates a job held
    /// still), as in the placement simulator.
    rule: Option<MigrationRule>,
    /// The gate `move_when`'s state between events (shared with the
    /// placement simulator: [`gate::decide`]).
    gate: GateState,
    /// Waiting jobs by (submission, index): the queue the gate looks at.
    queue: BTreeSet<(T, usize)>,
    /// Running jobs, by index.
    running: BTreeSet<usize>,
    /// Migration costs charged, in total.
    charges: u64,
}

/// Nodes held for one blocked job.
#[derive(Clone, Debug)]
struct Drain {
    job: usize,
    nodes: NodeSet,
    ready_s: f64,
}

impl<'a> Sim<'a> {
    fn log(&mut self, e: SimEvent) {
        if self.cfg.record == Record::Events {
            self.events.push(e);
        }
    }

    fn new(jobs: &'a [BudgetJob], tree: &'a OrgTree, cfg: &'a BudgetSimConfig) -> Result<Self> {
        if !(cfg.window_s > 0.0 && cfg.cycle_s > 0.0) {
            return Err(CoreError::Invalid(
                "window and cycle must be positive".into(),
            ));
        }
        let policy = placement::build(&cfg.policy, cfg.spec, &cfg.policy_options)?;
        if policy.tick_interval().is_some() {
            // Refused rather than run without the rounds that make the
            // policy what it is (it used to, silently).
            return Err(CoreError::Invalid(format!(
                "policy `{}` runs periodic rounds, which the policy simulator does not run; \
                 simulate it without --budgets",
                cfg.policy
            )));
        }
        let honours_movable = policy.honours_movable();
        cfg.migration.validate()?;
        let mut teams: Vec<Team> = Vec::new();
        let mut by_account: HashMap<&str, usize> = HashMap::new();
        let mut live = Vec::with_capacity(jobs.len());
        for j in jobs {
            cfg.spec.check_job(&JobRequest {
                id: j.id,
                shape: j.shape,
                movable: true,
            })?;
            if !(j.submit_s >= 0.0 && j.duration_s >= 0.0 && j.min_runtime_s >= 0.0) {
                return Err(CoreError::Invalid(format!(
                    "job {}: negative or NaN times",
                    j.id
                )));
            }
            // The report keeps hourly buckets up to the last end: a time of
            // centuries would allocate gigabytes (and inf, without end).
            let end = j.submit_s + j.duration_s;
            if !end.is_finite() || end > MAX_TRACE_S {
                return Err(CoreError::Invalid(format!(
                    "job {}: submitted at {} s and running {} s: ends past {MAX_TRACE_S:e} s \
                     (about 317 years), beyond what the policy simulator replays",
                    j.id, j.submit_s, j.duration_s
                )));
            }
            // A job needing more nodes than the cluster has would wait for
            // good, and the enforcement cycle with it (the run never ended).
            let need = crate::sim::sizing::nodes_for_job(
                j.shape.instances,
                j.shape.gpus,
                cfg.spec.gpus_per_node,
            );
            if need > cfg.spec.nodes {
                return Err(CoreError::Invalid(format!(
                    "job {} ({} x {} GPUs) needs {need} nodes of {} GPUs; the cluster has {}: \
                     it could never start (a larger --nodes, or leave the job out)",
                    j.id, j.shape.instances, j.shape.gpus, cfg.spec.gpus_per_node, cfg.spec.nodes
                )));
            }
            let t = *by_account.entry(j.account.as_str()).or_insert_with(|| {
                let leaf = tree.leaf_for_account(&j.account).ok();
                teams.push(Team {
                    account: j.account.clone(),
                    share: leaf.map_or(0.0, |l| tree.node(l).abs_share),
                    leaf,
                    ..Team::default()
                });
                teams.len() - 1
            });
            teams[t].jobs += 1;
            live.push(Live {
                team: t,
                ..Live::default()
            });
        }
        // Jobs of accounts outside the tree are unallocated time, as in the
        // live service; but when no account is in the tree, every job is:
        // the replay would measure no budget at all (a tree for another
        // trace, or accounts spelled otherwise).
        if !teams.is_empty() && teams.iter().all(|t| t.leaf.is_none()) {
            let outside = accounts_outside(jobs, tree);
            let tree_accounts: Vec<&str> = tree
                .nodes()
                .iter()
                .filter_map(|n| n.account.as_deref())
                .collect();
            return Err(CoreError::Invalid(format!(
                "no account of the trace is a leaf account of the budget tree: every job would \
                 run outside it, unbudgeted; the trace's {} account(s): {}; the tree's {}: {}",
                outside.len(),
                first_names(outside.keys().map(String::as_str)),
                tree_accounts.len(),
                first_names(tree_accounts.iter().copied())
            )));
        }
        // One team per account: the load table's entries, in its order
        // (by account), and the team of each ([`Sim::refresh_loads`]).
        let mut load_teams: Vec<usize> = (0..teams.len()).collect();
        load_teams.sort_by(|&a, &b| teams[a].account.cmp(&teams[b].account));
        let ratios = TeamTable {
            load: load_teams
                .iter()
                .map(|&t| {
                    let load = TeamLoad {
                        running_gpus: 0.0,
                        allocation_gpus: teams[t].share * cfg.spec.total_gpus() as f64,
                    };
                    (teams[t].account.clone(), load)
                })
                .collect(),
            ..TeamTable::default()
        };
        let mut sim = Self {
            jobs,
            tree,
            cfg,
            policy,
            teams,
            live,
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0.0,
            cycle_pending: false,
            order: Vec::new(),
            ratios,
            load_teams,
            capacity: cfg.spec.total_gpus(),
            waiting: 0,
            peak_used_gpu_s: 0.0,
            peak_s: 0.0,
            preemptions: 0,
            lost_gpu_s: 0.0,
            migrations: 0,
            events: Vec::new(),
            drains: Vec::new(),
            held: NodeSet::empty(cfg.spec.nodes),
            drains_started: 0,
            drains_planned: 0,
            drains_replanned: 0,
            drains_refused: 0,
            drain_idle_gpu_s: 0.0,
            reserve_preemptions: 0,
            room_unused: 0,
            moved: Vec::new(),
            frag: Frag::default(),
            rule: (cfg.migration.payback > 0.0 && honours_movable).then_some(MigrationRule {
                default_cost_s: cfg.migration.rule_cost(),
                payback: cfg.migration.payback,
                tidy_payback: cfg.migration.tidy_payback,
                ..MigrationRule::default()
            }),
            gate: GateState::default(),
            queue: BTreeSet::new(),
            running: BTreeSet::new(),
            charges: 0,
        };
        for (i, j) in jobs.iter().enumerate() {
            sim.push(j.submit_s, Ev::Arrive(i));
        }
        sim.refresh_order();
        Ok(sim)
    }

    fn push(&mut self, t: f64, ev: Ev) {
        self.seq += 1;
        self.heap
            .push(Reverse((t.max(0.0).to_bits(), ev, self.seq)));
    }

    fn gpus(&self, i: usize) -> u64 {
        self.jobs[i].shape.total_gpus()
    }

    /// Allocated time: a min runtime > 0 and an account in the budget tree
    /// (`fairshare::Kind::of_job`, as the live service classifies it: an
    /// account outside the tree runs unallocated time, queued, counted and
    /// never protected as such).
    fn allocated(&self, i: usize) -> bool {
        self.planner_min_runtime(i) > 0.0
    }

    /// The min runtime the victim planner sees: 0 (unallocated: never
    /// protected, never preempting) for accounts outside the budget tree, as
    /// in the live service (`budget-service/src/enforce.rs`).
    fn planner_min_runtime(&self, i: usize) -> Seconds {
        if self.teams[self.live[i].team].leaf.is_some() {
            self.jobs[i].min_runtime_s
        } else {
            0.0
        }
    }

    /// Integrates every rate up to `t`.
    fn advance(&mut self, t: f64) {
        let from = self.now;
        if t <= from {
            return;
        }
        let occ = self.policy.occupancy();
        let used = occ.used_gpus() as f64;
        let idle_held: u64 = self.held.iter().map(|n| u64::from(occ.free(n))).sum();
        self.drain_idle_gpu_s += idle_held as f64 * (t - from);
        if self.waiting > 0 {
            self.peak_s += t - from;
            self.peak_used_gpu_s += used * (t - from);
        }
        self.frag.add(
            t - from,
            self.waiting > 0,
            occ.used_gpus() > 0,
            self.cfg.spec.nodes,
            used / self.capacity as f64,
        );
        for team in &mut self.teams {
            add_hourly(&mut team.demand_h, from, t, team.demand as f64);
            let run = (team.run_charged + team.run_free) as f64;
            add_hourly(&mut team.used_h, from, t, run);
            add_hourly(&mut team.demand_alloc_h, from, t, team.demand_alloc as f64);
            add_hourly(&mut team.charged_h, from, t, team.run_charged as f64);
            team.charged_total += team.run_charged as f64 * (t - from);
            team.free_total += team.run_free as f64 * (t - from);
        }
        self.now = t;
    }

    fn run(mut self) -> Result<BudgetReport> {
        while let Some(Reverse((bits, ev, _))) = self.heap.pop() {
            let t = f64::from_bits(bits);
            if self.cfg.horizon_s.is_some_and(|h| t > h) {
                self.advance(self.cfg.horizon_s.unwrap_or(t));
                break;
            }
            self.advance(t);
            match ev {
                Ev::Arrive(i) => {
                    self.enqueue(i);
                    self.add_demand(i, true);
                    if !self.cycle_pending {
                        self.cycle_pending = true;
                        self.push(t + self.cfg.cycle_s, Ev::Cycle);
                    }
                    self.schedule()?;
                }
                Ev::Finish(i, gen) => {
                    if self.live[i].gen != gen
                        || self.live[i].done
                        || self.live[i].run_start.is_none()
                    {
                        continue;
                    }
                    self.finish(i)?;
                    self.schedule()?;
                }
                Ev::Wake(i) => {
                    if self.live[i].run_start.is_some() && self.compact_on_wake()? {
                        self.schedule()?;
                    }
                }
                Ev::Cycle => {
                    self.cycle_pending = false;
                    self.refresh_order();
                    self.preempt_for_blocked()?;
                    self.schedule()?;
                    if self.cfg.shortfall {
                        self.sample_shortfall();
                    }
                    if self.waiting > 0 {
                        self.cycle_pending = true;
                        self.push(t + self.cfg.cycle_s, Ev::Cycle);
                    }
                }
            }
        }
        Ok(self.report())
    }

    fn enqueue(&mut self, i: usize) {
        let key = (
            Reverse(self.jobs[i].priority),
            self.jobs[i].submit_s.to_bits(),
            i,
        );
        let alloc = self.allocated(i);
        let shape = (self.jobs[i].shape.gpus, self.jobs[i].shape.instances);
        let team = &mut self.teams[self.live[i].team];
        let w = if alloc {
            &mut team.wait_alloc
        } else {
            &mut team.wait_free
        };
        w.entry(shape).or_default().insert(key);
        self.live[i].waiting = true;
        self.waiting += 1;
        self.queue.insert((T(self.jobs[i].submit_s), i));
    }

    fn dequeue(&mut self, i: usize) {
        let key = (
            Reverse(self.jobs[i].priority),
            self.jobs[i].submit_s.to_bits(),
            i,
        );
        let shape = (self.jobs[i].shape.gpus, self.jobs[i].shape.instances);
        let team = &mut self.teams[self.live[i].team];
        for w in [&mut team.wait_alloc, &mut team.wait_free] {
            if let Some(set) = w.get_mut(&shape) {
                set.remove(&key);
                if set.is_empty() {
                    w.remove(&shape);
                }
            }
        }
        self.live[i].waiting = false;
        self.waiting -= 1;
        self.queue.remove(&(T(self.jobs[i].submit_s), i));
    }

    /// Fair-share order of the teams: a walk of the tree with siblings by
    /// (ratio, name), as [`crate::fairshare::order::order_queue`] does;
    /// accounts outside the tree go last.
    fn refresh_order(&mut self) {
        let now = self.now;
        let window_start = now - self.cfg.window_s;
        let mut usage: HashMap<String, Usage> = HashMap::new();
        for team in &mut self.teams {
            team.charged.advance(now);
            let charged = team.charged.value - team.charged.at(window_start.max(0.0));
            usage.insert(
                team.account.clone(),
                Usage {
                    charged_gpu_s: charged,
                    free_gpu_s: 0.0,
                },
            );
        }
        let stats = node_stats(
            self.tree,
            &usage,
            self.capacity as f64,
            self.cfg.window_s as i64,
        );
        let mut rank: HashMap<NodeIx, usize> = HashMap::new();
        let mut stack = vec![self.tree.root()];
        let mut next = 0;
        while let Some(n) = stack.pop() {
            rank.insert(n, next);
            next += 1;
            let mut kids = self.tree.node(n).children.clone();
            kids.sort_by(|a, b| {
                stats[*a]
                    .ratio
                    .total_cmp(&stats[*b].ratio)
                    .then_with(|| self.tree.node(*a).name.cmp(&self.tree.node(*b).name))
            });
            stack.extend(kids.into_iter().rev());
        }
        let mut order: Vec<usize> = (0..self.teams.len()).collect();
        order.sort_by_key(|&t| {
            (
                self.teams[t]
                    .leaf
                    .and_then(|l| rank.get(&l).copied())
                    .unwrap_or(usize::MAX),
                t,
            )
        });
        self.order = order;
        if self.cfg.team_order == TeamOrder::FairTree {
            self.order = self.fair_tree_order();
        }
        self.ratios.ratio = self
            .teams
            .iter()
            .map(|t| {
                (
                    t.account.clone(),
                    t.leaf.map_or(f64::INFINITY, |l| stats[l].ratio),
                )
            })
            .collect();
        self.refresh_loads();
    }

    /// Teams by Slurm's Fair Tree rank of their decayed usage
    /// ([`fair_tree::fair_tree_rank`]); accounts outside the tree last.
    fn fair_tree_order(&self) -> Vec<usize> {
        let mut usage = vec![0.0; self.tree.len()];
        for team in &self.teams {
            if let Some(l) = team.leaf {
                usage[l] += team.decayed.at(self.now, self.cfg.decay_half_life_s);
            }
        }
        let rank = fair_tree::fair_tree_rank(self.tree, &usage);
        let mut order: Vec<usize> = (0..self.teams.len()).collect();
        order.sort_by_key(|&t| (self.teams[t].leaf.map_or(usize::MAX, |l| rank[l]), t));
        order
    }

    /// Allocated GPUs each team runs now against its allocation.
    ///
    /// The table is keyed by account, one entry per team ([`Sim::new`]);
    /// each entry is updated in place from its team, in the table's order (the
    /// preemption pass asks for this before every job it plans for;
    /// rebuilding the table, an account name copied and compared per team,
    /// was a quarter of the 30-day replay).
    fn refresh_loads(&mut self) {
        let cap = self.capacity as f64;
        self.ratios.loads_decide = self.cfg.team_order.preempts_by_load();
        let load = |t: &Team| TeamLoad {
            running_gpus: t.run_charged as f64,
            allocation_gpus: t.share * cap,
        };
        for (l, &t) in self.ratios.load.values_mut().zip(&self.load_teams) {
            *l = load(&self.teams[t]);
        }
    }

    /// Teams in the order their allocated and their unallocated jobs are
    /// served now ([`TeamOrder`], [`FreeOrder`]): the rules of
    /// [`crate::fairshare::order::team_orders`], which the budget service
    /// runs too, over the fair-share order of [`Self::refresh_order`].
    fn team_orders(&self) -> TeamOrders<usize> {
        let cap = self.capacity as f64;
        let cfg = QueueOrder {
            team_order: self.cfg.team_order,
            free_order: self.cfg.free_order,
        };
        team_orders(
            &self.order,
            |t| {
                let team = &self.teams[t];
                TeamNow {
                    allocation_gpus: team.share * cap,
                    running_allocated_gpus: team.run_charged as f64,
                    running_total_gpus: (team.run_charged + team.run_free) as f64,
                }
            },
            cfg,
        )
    }

    /// One scheduling pass: waiting jobs in queue order (every allocated job,
    /// teams in [`Self::team_orders`], priority then FIFO within a team; then
    /// every unallocated job) are started while they fit. Jobs needing more
    /// GPUs than are free are skipped without an attempt; at most
    /// `queue_depth` start attempts per pass. With [`Backfill::Reserve`],
    /// [`Self::schedule_reserving`] instead.
    fn schedule(&mut self) -> Result<()> {
        if self.cfg.backfill == Backfill::Reserve {
            return self.schedule_reserving();
        }
        let mut free = self.capacity - self.policy.occupancy().used_gpus();
        let mut attempts = 0;
        // Shapes that failed to place since the last start: any job at least
        // as large in both GPUs and instances fails too.
        let mut failed: Vec<(u32, u32)> = Vec::new();
        let mut pass = PassOrder::new(self);
        while let Some((kind, t, held)) = pass.next(self) {
            // Shapes of this team that failed only because drains held
            // nodes (other teams' jobs may be allowed there).
            let mut team_failed: Vec<(u32, u32)> = Vec::new();
            loop {
                if free == 0 || attempts == self.cfg.queue_depth {
                    return Ok(());
                }
                let team = &self.teams[t];
                let head = |w: &Waiting| first_fitting(w, free, &failed, &team_failed);
                let next = match kind {
                    Some(true) if held => first_fitting(
                        &short_protected(&team.wait_alloc, self.jobs, self.cfg),
                        free,
                        &failed,
                        &team_failed,
                    ),
                    Some(true) => head(&team.wait_alloc),
                    Some(false) => head(&team.wait_free),
                    None => head(&team.wait_alloc)
                        .into_iter()
                        .chain(head(&team.wait_free))
                        .min(),
                };
                let Some((_, _, i)) = next else {
                    break;
                };
                attempts += 1;
                let restricted = self.held_from(i);
                if self.try_start(i)? {
                    free = self.capacity - self.policy.occupancy().used_gpus();
                    failed.clear();
                    team_failed.clear();
                } else if restricted {
                    team_failed.push((self.jobs[i].shape.gpus, self.jobs[i].shape.instances));
                } else {
                    failed.push((self.jobs[i].shape.gpus, self.jobs[i].shape.instances));
                }
            }
            pass.team_done(self, kind, t);
        }
        Ok(())
    }

    /// One scheduling pass with backfill reservations ([`Backfill::Reserve`]):
    /// the waiting jobs in the order of [`Self::schedule`]'s pass (teams in
    /// [`Self::team_orders`], allocated work first unless one queue; within
    /// a team, priority then submission), each looked at once, against a
    /// [`FreeProfile`] of the free GPUs over time, in which running jobs
    /// give theirs back at their expected ends ([`Self::expected_end`]).
    /// A job whose GPUs are free now for its whole expected run is tried
    /// now and, once started, takes them until its expected end; a job
    /// that cannot start (too few GPUs for long enough, or none of its
    /// nodes free) takes them from the earliest later time they are free
    /// for its run: its reservation, which no later job in the pass may
    /// delay. Jobs that can never fit get none. The pass stops once no GPU
    /// is free (nothing more can start), or after `scan_limit` jobs,
    /// `queue_depth` start attempts or [`MAX_RESERVATIONS`] reservations.
    /// Under `head_first` a held team's jobs protected longer than
    /// `debug_max_min_runtime_s` are passed over, as in [`Self::schedule`];
    /// a job of a shape that failed to place since the last start is not
    /// tried again (it would fail too) but is reserved for. The profile
    /// does not follow the moves of the Compacts a start makes (a moved
    /// job's end is `c` later).
    fn schedule_reserving(&mut self) -> Result<()> {
        let now = self.now;
        let ends: Vec<(Seconds, u64)> = self
            .running
            .iter()
            .map(|&i| (self.expected_end(i, self.projected_end(i)), self.gpus(i)))
            .collect();
        let free_now = |sim: &Self| sim.capacity - sim.policy.occupancy().used_gpus();
        let mut profile = FreeProfile::new(now, free_now(self), ends);
        let (mut looked, mut attempts, mut reserved) = (0, 0, 0);
        // Shapes that failed to place since the last start (on every node).
        let mut failed: Vec<(u32, u32)> = Vec::new();
        let mut pass = PassOrder::new(self);
        while let Some((kind, t, held)) = pass.next(self) {
            let mut walk = TeamWalk::new(&self.teams[t], kind);
            while let Some(key) = walk.next(&self.teams[t]) {
                if free_now(self) == 0
                    || looked == self.cfg.scan_limit
                    || attempts == self.cfg.queue_depth
                    || reserved == MAX_RESERVATIONS
                {
                    return Ok(());
                }
                looked += 1;
                let i = key.2;
                if held && !protected_briefly(&self.jobs[i], self.cfg) {
                    continue;
                }
                let gpus = self.gpus(i);
                let run = self.expected_end(i, self.projected_end(i)) - now;
                let Some(fits) = profile.earliest(gpus, run) else {
                    continue;
                };
                let reserve_at = if fits > now {
                    Some(fits)
                } else {
                    let shape = (self.jobs[i].shape.gpus, self.jobs[i].shape.instances);
                    let fails_as = |(fg, fn_): &(u32, u32)| shape.0 >= *fg && shape.1 >= *fn_;
                    if !failed.iter().any(fails_as) {
                        attempts += 1;
                        let restricted = self.held_from(i);
                        if self.try_start(i)? {
                            profile.take(now, run, gpus);
                            failed.clear();
                            continue;
                        }
                        if !restricted {
                            failed.push(shape);
                        }
                    }
                    profile.earliest_later(gpus, run)
                };
                if let Some(at) = reserve_at {
                    profile.take(at, run, gpus);
                    reserved += 1;
                }
            }
            pass.team_done(self, kind, t);
        }
        Ok(())
    }

    /// The request for job `i` starting now: movable when resumable and,
    /// with the cost rule on, worth moving (as the placement simulator's).
    fn request(&self, i: usize) -> JobRequest {
        let resumable = self.jobs[i].resumable;
        JobRequest {
            id: self.jobs[i].id,
            shape: self.jobs[i].shape,
            movable: resumable
                && self
                    .rule
                    .is_none_or(|rule| rule.worth_moving(&self.candidate(i))),
        }
    }

    /// The job of a policy's job id (ids are trace rows from 1).
    fn index_of(&self, job: JobId) -> Option<usize> {
        let i = usize::try_from(job.0).ok()?.checked_sub(1)?;
        (i < self.jobs.len()).then_some(i)
    }

    /// What the cost rule knows of job `i` now (running, or starting now):
    /// its remaining work, plus the restart cost when it restarts after a
    /// preemption, plus the migration costs of its current run, as the
    /// placement simulator's candidate ([`gate::move_candidate`]). Its
    /// protection is its min runtime, capped, from its last (re)start or
    /// move.
    fn candidate(&self, i: usize) -> MoveCandidate {
        let (job, l, now) = (&self.jobs[i], &self.live[i], self.now);
        gate::move_candidate(
            self.cfg.migration.remaining,
            job.resumable,
            job.duration_s,
            l.last_moved.or(l.run_start).unwrap_or(now),
            self.projected_end(i),
            now,
            self.min_runtime_capped(i),
            l.last_moved,
        )
    }

    /// When job `i` ends in truth (running, or starting now): its remaining
    /// work after its current run's start, plus the costs of that run (a
    /// restart after a preemption, migrations).
    fn projected_end(&self, i: usize) -> Seconds {
        let l = &self.live[i];
        let left = (self.jobs[i].duration_s - l.progress_s).max(0.0);
        match l.run_start {
            Some(s) => s + left + l.extra_s,
            None if l.first_start.is_some() => self.now + left + self.cfg.restart_cost_s,
            None => self.now + left,
        }
    }

    /// When job `i`, ending in truth at `end`, is expected to end as a
    /// scheduler sees it (the placement simulator's estimate): what
    /// COMPASS's Place ties use with `--compass-end-ties`.
    fn expected_end(&self, i: usize, end: Seconds) -> Seconds {
        let d = self.jobs[i].duration_s;
        match self.cfg.migration.remaining {
            RemainingRun::Oracle => end,
            RemainingRun::TimeLimit => end + crate::sim::time_limit_for(d) - d,
            RemainingRun::ReplayLimit => end + crate::sim::replay_time_limit_for(d) - d,
        }
    }

    /// Applies the cost rule ([`MigrationRule::worth_moving`]) to every
    /// running resumable job now, telling the policy of each change, behind
    /// the gate [`MoveWhen::allows`] (e.g. no job waits, so no move can let
    /// one start): the placement simulator's rule, before every policy
    /// call. `freeing`: GPUs of a job departing now (free when Compact
    /// runs). Returns the jobs that turned movable.
    fn apply_rule(&mut self, freeing: u64) -> Result<Vec<usize>> {
        let Some(rule) = self.rule else {
            return Ok(Vec::new());
        };
        let free = self.capacity - self.policy.occupancy().used_gpus() + freeing;
        let waiting = self.queue.iter().map(|&(_, q)| self.gpus(q));
        let idle = !self.cfg.migration.move_when.allows(waiting, free);
        let changes: Vec<(usize, bool)> = self
            .running
            .iter()
            .copied()
            .filter(|&j| self.jobs[j].resumable)
            .filter_map(|j| {
                let worth = !idle && rule.worth_moving(&self.candidate(j));
                (worth != self.live[j].movable).then_some((j, worth))
            })
            .collect();
        let mut freed = Vec::new();
        for (j, worth) in changes {
            self.policy.set_movable(self.jobs[j].id, worth)?;
            self.live[j].movable = worth;
            if worth {
                freed.push(j);
            }
        }
        Ok(freed)
    }

    /// When running job `i`, (re)started or moved (`moved`) now, may turn
    /// movable: the end of its protection (capped min runtime), of the
    /// rule's first minutes, and after a move of its cool-down. A Compact
    /// is tried then ([`Self::compact_on_wake`]). Only with the cost rule
    /// on, as in the placement simulator.
    fn note_wakes(&mut self, i: usize, moved: bool) {
        let Some(rule) = self.rule else {
            return;
        };
        for d in rule.wakes(self.min_runtime_capped(i), moved) {
            self.push(self.now + d, Ev::Wake(i));
        }
    }

    /// A Compact with no arrival or departure, when a running job the rule
    /// held still may move now (and is not held for tidying), guarded by
    /// the gate as a departure's is: the placement simulator's
    /// `compact_on_wake`, and the select plugin's Compact at the tick a
    /// verdict changes. Returns whether a Compact ran.
    fn compact_on_wake(&mut self) -> Result<bool> {
        let freed = self.apply_rule(0)?;
        if !freed.iter().any(|k| !self.gate.tidy_held.contains(k)) {
            return Ok(false);
        }
        let migrations = self.guarded(None, 0, &|p| Ok(p.compact_now()))?;
        self.measure_frag();
        self.charge(&migrations, None)?;
        Ok(true)
    }

    /// Carries out `act` (a departure of `gone`, whose `leaving` GPUs it
    /// frees, or a Compact with no event) on the policy with the jobs the
    /// gate `move_when` holds ([`Self::hold_unless_moves_start`]) held
    /// still for this one event. Returns the migrations it made. (No head
    /// guard: this simulator's queue is a greedy pass with no backfill
    /// reservation.)
    fn guarded(
        &mut self,
        gone: Option<usize>,
        leaving: u64,
        act: &dyn Fn(&mut dyn PlacementPolicy) -> Result<Vec<Migration>>,
    ) -> Result<Vec<Migration>> {
        let gate = self.hold_unless_moves_start(gone, leaving, act)?;
        let hold = self.gate.keep(gate).unwrap_or_default();
        self.set_held(&hold, false)?;
        let migrations = act(&mut *self.policy);
        self.set_held(&hold, true)?;
        migrations
    }

    /// Holds `jobs` still (`movable = false`) for one event, or lets them
    /// move again after it.
    fn set_held(&mut self, jobs: &[usize], movable: bool) -> Result<()> {
        for &k in jobs {
            self.policy.set_movable(self.jobs[k].id, movable)?;
        }
        Ok(())
    }

    /// The gate `move_when` for one event of job `event_job` (`act`: its
    /// start or its departure, `leaving` the GPUs a departure frees; run on
    /// forks of the policy): [`gate::decide`], the decision the placement
    /// simulator makes, on this simulator's waiting jobs (the first
    /// `gate_depth` by submission), its running movable jobs and its
    /// policy's forks. A waiting job fits when its instances fit the
    /// nodes' free GPUs now (`Occupancy::fit`), as the plugin's
    /// `head::fits_now` counts it.
    fn hold_unless_moves_start(
        &self,
        event_job: Option<usize>,
        leaving: u64,
        act: &dyn Fn(&mut dyn PlacementPolicy) -> Result<Vec<Migration>>,
    ) -> Result<Gate> {
        if !gate::tries(self.cfg.migration.move_when, !self.queue.is_empty()) {
            return Ok(Gate::untried());
        }
        // With the cost rule off (payback 0), tidying moves are judged at
        // the site's cost all the same (as in the placement simulator).
        let rule = self.rule.unwrap_or(MigrationRule {
            default_cost_s: self.cfg.migration.rule_cost(),
            tidy_payback: self.cfg.migration.tidy_payback,
            ..MigrationRule::default()
        });
        let movable: Vec<usize> = self
            .running
            .iter()
            .copied()
            .filter(|&k| self.live[k].movable)
            .collect();
        let queued: Vec<usize> = self
            .queue
            .iter()
            .take(self.cfg.gate_depth.max(1))
            .map(|&(_, q)| q)
            .collect();
        let ev = GateEvent {
            move_when: self.cfg.migration.move_when,
            trial_releases: self.cfg.migration.trial_releases,
            t: self.now,
            hold: &[],
            event_job,
            waiting: true,
            queued: &queued,
            movable: &movable,
        };
        type Fork = Box<dyn PlacementPolicy>;
        let trial = |still: &[usize]| -> Result<Option<(Fork, Vec<usize>)>> {
            let Some(mut fork) = self.policy.fork() else {
                return Ok(None);
            };
            for &k in still {
                fork.set_movable(self.jobs[k].id, false)?;
            }
            let m = act(&mut *fork)?;
            let moved = self
                .cfg
                .migration
                .charges(&m, |id| self.index_of(id), event_job)
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            Ok(Some((fork, moved)))
        };
        let fits = |p: &Fork, j: usize| {
            let shape = self.jobs[j].shape;
            p.occupancy().fit(shape.gpus) >= u64::from(shape.instances)
        };
        let pays = |k: usize| {
            let l = &self.live[k];
            let age = l.progress_s + (self.now - l.run_start.unwrap_or(self.now));
            self.gate.pays_for_tidying(&rule, &self.candidate(k), age)
        };
        gate::decide(
            &self.gate,
            &ev,
            pays,
            || self.gate_chances(event_job, leaving, &queued),
            trial,
            fits,
        )
    }

    /// Could moves start one of the `queued` jobs (other than `event_job`)
    /// at all? [`gate::chances`] on this simulator's one pool: the free
    /// GPUs (with a departing job's `leaving` GPUs), the instances that
    /// could fit after any moves ([`PlacementPolicy::fit_after_moves_with`],
    /// the event's job gone) and those that fit now.
    fn gate_chances(
        &self,
        event_job: Option<usize>,
        leaving: u64,
        queued: &[usize],
    ) -> Vec<Chance> {
        let occ = self.policy.occupancy();
        let free = self.capacity - occ.used_gpus() + leaving;
        let gone: Vec<JobId> = event_job.map(|j| self.jobs[j].id).into_iter().collect();
        gate::chances(
            queued,
            event_job,
            free,
            |q| self.jobs[q].shape,
            |g| self.policy.fit_after_moves_with(g, &gone),
            |g| occ.fit(g),
        )
    }

    /// The room the victim planner sees now: every node's free GPUs, on
    /// `usable` nodes (all of them when `None`).
    fn room(&self, usable: Option<NodeSet>) -> NodeRoom {
        let occ = self.policy.occupancy();
        NodeRoom {
            capacity: self.cfg.spec.gpus_per_node,
            free: (0..self.cfg.spec.nodes).map(|n| occ.free(n)).collect(),
            usable: usable.unwrap_or_else(|| NodeSet::full(self.cfg.spec.nodes)),
            traits: Vec::new(),
        }
    }

    /// Where job `i` may start now: anywhere, unless drains hold nodes and
    /// the job would still be protected when the earliest of them is due (an
    /// unallocated job, or one protected only until then, is no obstacle: it
    /// will be a legal victim or gone). The drained job itself goes anywhere.
    fn allowed_for(&self, i: usize) -> Option<NodeSet> {
        if !self.held_from(i) {
            return None;
        }
        let until = self.protected_until_if_started(i);
        let mut allowed = NodeSet::full(self.cfg.spec.nodes);
        for d in self.drains.iter().filter(|d| until > d.ready_s) {
            for n in d.nodes.iter() {
                allowed.remove(n);
            }
        }
        Some(allowed)
    }

    /// Is job `i` kept off some drained nodes ([`Self::allowed_for`])?
    fn held_from(&self, i: usize) -> bool {
        if self.drains.is_empty() || !self.allocated(i) || self.drains.iter().any(|d| d.job == i) {
            return false;
        }
        let until = self.protected_until_if_started(i);
        self.drains.iter().any(|d| until > d.ready_s)
    }

    fn protected_until_if_started(&self, i: usize) -> f64 {
        self.now
            + self.jobs[i]
                .min_runtime_s
                .min(self.cfg.protection.min_runtime_cap_s)
    }

    fn refresh_held(&mut self) {
        let mut held = NodeSet::empty(self.cfg.spec.nodes);
        for d in &self.drains {
            for n in d.nodes.iter() {
                held.insert(n);
            }
        }
        self.held = held;
    }

    /// Tries to start job `i` now, behind the gate `move_when` (the
    /// placement simulator's `try_start`: the rule applied, the request
    /// movable by its verdict, the placement's Compact held by the gate).
    fn try_start(&mut self, i: usize) -> Result<bool> {
        let allowed = self.allowed_for(i);
        self.apply_rule(0)?;
        self.live[i].last_moved = None;
        let req = self.request(i);
        let end = self.expected_end(i, self.projected_end(i));
        self.policy.set_expected_end(req.id, end);
        let place = |p: &mut dyn PlacementPolicy| {
            Ok(p.place(&req, allowed.as_ref())?
                .map(|a| a.migrations)
                .unwrap_or_default())
        };
        let gate = self.hold_unless_moves_start(Some(i), 0, &place)?;
        let hold = self.gate.keep(gate).unwrap_or_default();
        self.set_held(&hold, false)?;
        let placed = self.policy.place(&req, allowed.as_ref());
        self.set_held(&hold, true)?;
        let Some(adm) = placed? else {
            self.policy.set_expected_end(req.id, f64::INFINITY);
            return Ok(false);
        };
        self.measure_frag();
        if let Some(k) = self.drains.iter().position(|d| d.job == i) {
            self.drains.remove(k);
            self.refresh_held();
            self.drains_started += 1;
        }
        self.dequeue(i);
        let now = self.now;
        let gpus = self.gpus(i);
        let alloc = self.allocated(i);
        self.accrue_decayed(i, gpus as f64);
        let team = &mut self.teams[self.live[i].team];
        if alloc {
            team.run_charged += gpus;
            team.charged.add_rate(now, gpus as f64);
        } else {
            team.run_free += gpus;
        }
        let restart = self.live[i].first_start.is_some();
        let l = &mut self.live[i];
        l.first_start.get_or_insert(now);
        l.run_start = Some(now);
        l.extra_s = if restart {
            self.cfg.restart_cost_s
        } else {
            0.0
        };
        l.movable = req.movable;
        self.running.insert(i);
        self.schedule_finish(i);
        self.note_wakes(i, false);
        self.charge(&adm.migrations, Some(i))?;
        self.log(SimEvent::Start {
            t: now,
            job: self.jobs[i].id,
        });
        Ok(true)
    }

    fn schedule_finish(&mut self, i: usize) {
        let l = &mut self.live[i];
        l.gen += 1;
        let end = l.run_start.unwrap_or(self.now)
            + (self.jobs[i].duration_s - l.progress_s).max(0.0)
            + l.extra_s;
        let gen = l.gen;
        self.push(end, Ev::Finish(i, gen));
    }

    /// Charges `c` ([`MigrationSettings::migration_cost_s`]) to the running
    /// jobs moved in one policy call, per instance or per job
    /// ([`MigrationSettings::charges`]; `starting`: the job the call admitted, whose
    /// own moves cost nothing), as the placement simulator charges them. A
    /// move of a job that is not running, not resumable, or held still by
    /// the cost rule is a policy bug and fails the replay.
    fn charge(&mut self, migrations: &[Migration], starting: Option<usize>) -> Result<()> {
        if migrations.is_empty() {
            return Ok(());
        }
        self.migrations += migrations.len() as u64;
        let moved: BTreeSet<JobId> = migrations.iter().map(|m| m.job).collect();
        self.moved.extend(moved.iter().copied());
        let name = self.policy.name();
        for (i, count) in self
            .cfg
            .migration
            .charges(migrations, |id| self.index_of(id), starting)
        {
            let job = &self.jobs[i];
            if self.live[i].run_start.is_none() {
                return Err(CoreError::Invalid(format!(
                    "policy `{name}` migrated job {}, which is not running",
                    job.id
                )));
            }
            if !job.resumable {
                return Err(CoreError::Invalid(format!(
                    "policy `{name}` migrated job {}, which is not resumable",
                    job.id
                )));
            }
            if self.rule.is_some() && !self.live[i].movable {
                return Err(CoreError::Invalid(format!(
                    "policy `{name}` migrated job {}, which the cost rule holds still",
                    job.id
                )));
            }
            let l = &mut self.live[i];
            l.extra_s += self.cfg.migration.migration_cost_s * count as f64;
            l.charges += count;
            l.last_moved = Some(self.now);
            self.charges += count;
            self.schedule_finish(i);
            let e = self.expected_end(i, self.projected_end(i));
            self.policy.set_expected_end(self.jobs[i].id, e);
            self.note_wakes(i, true);
        }
        Ok(())
    }

    /// Stops job `i`'s current run (completion or preemption).
    /// `release`: remove the job from the placement policy too (victims of
    /// one preemption are removed together, [`Self::preempt`]).
    fn stop_run(&mut self, i: usize, release: bool) -> Result<f64> {
        let now = self.now;
        self.running.remove(&i);
        let start = self.live[i].run_start.take().unwrap_or(now);
        self.live[i].last_moved = None;
        let gpus = self.gpus(i);
        let alloc = self.allocated(i);
        self.accrue_decayed(i, -(gpus as f64));
        let team = &mut self.teams[self.live[i].team];
        if alloc {
            team.run_charged -= gpus;
            team.charged.add_rate(now, -(gpus as f64));
        } else {
            team.run_free -= gpus;
        }
        let run = (now - start).max(0.0);
        // A run of its min runtime since its restart settles what a
        // preemption left owed ([`Self::owes_min_runtime`]).
        if run >= self.min_runtime_capped(i) {
            self.live[i].owes = false;
        }
        self.live[i].gen += 1;
        if release {
            // The departure's Compact, behind the rule and the gate (the
            // placement simulator's `finish_job`).
            self.apply_rule(gpus)?;
            let id = self.jobs[i].id;
            let migrations = self.guarded(Some(i), gpus, &|p| p.remove(id))?;
            self.measure_frag();
            self.charge(&migrations, None)?;
        }
        Ok(run)
    }

    /// After a policy call that changed the layout (a start, an end, the
    /// victims of a preemption leaving): [`Frag::measure`].
    fn measure_frag(&mut self) {
        self.frag
            .measure(self.policy.occupancy(), self.cfg.spec.gpus_per_node);
    }

    /// Fair Tree usage ([`TeamOrder::FairTree`] only): every job's GPU-time
    /// counts, except scavenger jobs' (`UsageFactor=0`,
    /// [`Preemption::Scavenger`]).
    fn accrue_decayed(&mut self, i: usize, delta: f64) {
        if self.cfg.team_order != TeamOrder::FairTree
            || (self.cfg.preemption == Preemption::Scavenger && !self.allocated(i))
        {
            return;
        }
        let (now, h) = (self.now, self.cfg.decay_half_life_s);
        self.teams[self.live[i].team]
            .decayed
            .add_rate(now, delta, h);
    }

    /// One queue for all jobs (no scavenger QOS): Fair Tree without
    /// preemption, as a site with a single QOS would run it.
    /// Does team `t` run less allocated work than its allocation?
    fn below_allocation(&self, t: usize) -> bool {
        let team = &self.teams[t];
        (team.run_charged as f64) < team.share * self.capacity as f64
    }

    fn one_queue(&self) -> bool {
        self.cfg.team_order == TeamOrder::FairTree && self.cfg.preemption == Preemption::None
    }

    fn finish(&mut self, i: usize) -> Result<()> {
        self.stop_run(i, true)?;
        self.gate.runs.record(self.jobs[i].duration_s);
        self.log(SimEvent::Finish {
            t: self.now,
            job: self.jobs[i].id,
        });
        self.live[i].done = true;
        self.live[i].end_s = Some(self.now);
        self.add_demand(i, false);
        Ok(())
    }

    /// A job joins (`true`) or leaves its team's demand.
    fn add_demand(&mut self, i: usize, joins: bool) {
        let gpus = self.gpus(i);
        let alloc = self.allocated(i);
        let team = &mut self.teams[self.live[i].team];
        if joins {
            team.demand += gpus;
            if alloc {
                team.demand_alloc += gpus;
            }
        } else {
            team.demand -= gpus;
            if alloc {
                team.demand_alloc -= gpus;
            }
        }
    }

    /// Preempts `victims` for `for_job`: they leave the placement policy
    /// together ([`PlacementPolicy::remove_for_room`]), so the room they free
    /// is still there when `for_job` is placed right after.
    fn preempt(&mut self, victims: &[usize], for_job: JobId) -> Result<()> {
        for &i in victims {
            self.preempt_one(i, for_job)?;
        }
        let ids: Vec<JobId> = victims.iter().map(|&i| self.jobs[i].id).collect();
        // COMPASS defers its Compact to the placement that follows (which
        // the gate guards); a policy that moves jobs here is told the
        // rule's verdicts first.
        self.apply_rule(0)?;
        let migrations = self.policy.remove_for_room(&ids)?;
        self.measure_frag();
        self.charge(&migrations, None)?;
        Ok(())
    }

    fn preempt_one(&mut self, i: usize, for_job: JobId) -> Result<()> {
        let run = self.stop_run(i, false)?;
        let job = &self.jobs[i];
        let requeued = job.resumable;
        self.log(SimEvent::Preempt {
            t: self.now,
            job: job.id,
            for_job,
            requeued,
        });
        let job = &self.jobs[i];
        let every = self
            .cfg
            .job_checkpoint_s
            .unwrap_or(self.cfg.protection.checkpoint_interval_s);
        let lost = crate::preempt::lost_run_every(run, job.resumable, every);
        self.lost_gpu_s += lost * job.shape.total_gpus() as f64;
        self.preemptions += 1;
        let l = &mut self.live[i];
        l.preemptions += 1;
        l.owes = true;
        l.preempted_by = Some(for_job);
        if job.resumable {
            l.progress_s = (l.progress_s + run - lost - l.extra_s).clamp(0.0, job.duration_s);
            self.enqueue(i);
        } else {
            l.done = true;
            l.cancelled = true;
            self.add_demand(i, false);
        }
        Ok(())
    }

    /// Running jobs that may be victims now, as the victim planner sees them.
    /// `with_protected`: also the protected jobs (for [`plan_drain`]).
    fn running_view(&self, with_protected: bool) -> Vec<RunningJob> {
        // By job id: the planner breaks ties in this order.
        let mut running: Vec<_> = self.policy.occupancy().jobs().collect();
        running.sort_unstable_by_key(|r| r.request.id);
        running
            .into_iter()
            .filter_map(|r| {
                let i = (r.request.id.0 - 1) as usize;
                // A move is a requeue and a restart on a live cluster: the
                // service sees the job start again then, protects it again
                // for its min runtime and counts its loss from there (as
                // the move rule does, `Self::candidate`).
                let l = self.live.get(i)?;
                let start = l.last_moved.or(l.run_start)?;
                let mut on: BTreeMap<u32, u32> = BTreeMap::new();
                for (&n, &g) in r.nodes.iter().zip(&r.gpus) {
                    *on.entry(n).or_default() += g;
                }
                let j = &self.jobs[i];
                let min_runtime_s = self.planner_min_runtime(i);
                // Protected jobs are never victims: leave them out up front.
                let protected_until =
                    start + min_runtime_s.min(self.cfg.protection.min_runtime_cap_s);
                if !with_protected && min_runtime_s > 0.0 && self.now < protected_until {
                    return None;
                }
                Some(RunningJob {
                    id: j.id,
                    account: j.account.clone(),
                    gpus_on: on.into_iter().collect(),
                    min_runtime_s,
                    started_s: start,
                    resumable: j.resumable,
                    cpus_per_node: 0,
                    mem_per_node_mb: 0,
                    // The simulator's GPUs are unweighted.
                    weight: 1.0,
                })
            })
            .collect()
    }

    /// The enforcement step of a cycle: the head allocated job of each team
    /// (at most `preempt_depth` teams, in queue order: [`Self::team_orders`])
    /// preempts what it needs ([`plan_room`]); when no legal victims can place the head, the
    /// team's next shapes ask in turn (oldest first) until one is placed,
    /// each taking unallocated victims only and only while the team, with
    /// it, stays within its allocation ([`later_job_may_preempt`]), as in
    /// the live service ([`crate::preempt::plan_cycle`]).
    fn preempt_for_blocked(&mut self) -> Result<()> {
        match self.cfg.preemption {
            Preemption::Compass => {}
            Preemption::None => return Ok(()),
            Preemption::Scavenger => return self.preempt_scavengers(),
        }
        if self.cfg.drain_rule == DrainRule::Reserve && self.cfg.max_drains > 0 {
            self.take_reservations()?;
            self.update_reservations();
        }
        // The first waiting allocated job of each team, teams in queue
        // order ([`Self::team_orders`]: under-allocation-first puts the teams
        // below their allocation ahead, as the live service's queue does,
        // `preempt::plan_cycle` following it): a team below its allocation
        // must be able to reclaim it even when another team sorts ahead of
        // it by the lookback ratio.
        // Only unallocated jobs, or allocated jobs of teams over their
        // allocation for a team under its own, can be victims: skip the teams
        // that could not take anything.
        let cap = self.capacity as f64;
        let free_running: u64 = self.teams.iter().map(|t| t.run_free).sum();
        let idle = self.capacity - self.policy.occupancy().used_gpus();
        // Jobs holding drained nodes ask first, whatever their team's load:
        // the unallocated work let onto their nodes is theirs to take.
        let drained: Vec<usize> = self.drains.iter().map(|d| d.job).collect();
        // Each team's asking jobs: its head (its oldest waiting allocated
        // job), then the first job of each other shape, oldest first; the
        // first of them that legal victims can place is served. The later
        // ones take unallocated victims only, within the team's allocation
        // (checked below, on the loads of the moment), as in the live service
        // (`preempt::plan_cycle`).
        let team_order = self.team_orders().allocated;
        let heads: Vec<Vec<(usize, bool)>> = team_order
            .iter()
            .filter(|&&t| {
                free_running > 0 || (self.teams[t].run_charged as f64) < self.teams[t].share * cap
            })
            .filter_map(|&t| {
                let mut heads: Vec<WaitKey> = self.teams[t]
                    .wait_alloc
                    .values()
                    .filter_map(|set| set.iter().find(|k| !self.owes_min_runtime(k.2)).copied())
                    .collect();
                heads.sort();
                // A team at its allocation can only take unallocated jobs.
                let under = (self.teams[t].run_charged as f64) < self.teams[t].share * cap;
                let head = heads.first()?.2;
                if drained.contains(&head) {
                    return None;
                }
                // (job, is the team's head): only a head gets a drain.
                let asks: Vec<(usize, bool)> = heads
                    .into_iter()
                    .map(|k| (k.2, k.2 == head))
                    .filter(|&(i, _)| under || self.gpus(i) <= idle + free_running)
                    .collect();
                (!asks.is_empty()).then_some(asks)
            })
            .take(self.cfg.preempt_depth)
            .collect();
        let blocked: Vec<Vec<(usize, bool)>> = drained
            .iter()
            .map(|&i| vec![(i, true)])
            .chain(heads)
            .collect();
        if blocked.is_empty() {
            return Ok(());
        }
        let mut running = self.running_view(false);
        self.moved.clear();
        // Heads that no legal victim set can place now.
        let mut unplaceable: Vec<usize> = Vec::new();
        let mut started_team: BTreeSet<usize> = BTreeSet::new();
        let mut excluded: BTreeSet<JobId> = BTreeSet::new();
        for (k, (i, is_head)) in blocked
            .iter()
            .flat_map(|asks| asks.iter().copied().enumerate())
        {
            // A later job of a team whose earlier one started asks no more.
            if k > 0 && (!self.live[i].waiting || started_team.contains(&self.live[i].team)) {
                continue;
            }
            self.refresh_loads();
            let account = &self.jobs[i].account;
            // A later job takes unallocated victims only, within the
            // team's allocation.
            let later_victims: Vec<RunningJob>;
            let candidates: &[RunningJob] = if is_head {
                &running
            } else if later_job_may_preempt(self.ratios.allocation(account), self.gpus(i) as f64) {
                later_victims = running.iter().filter(|r| !r.allocated()).cloned().collect();
                &later_victims
            } else {
                continue;
            };
            // Nodes drained for another job are no room for this one.
            let room = self.room(self.allowed_for(i));
            let pending = self.pending_view(i);
            let plan = plan_room(
                &pending,
                candidates,
                &room,
                &self.ratios,
                self.now,
                &self.cfg.protection,
                &excluded,
            );
            let Some(victims) = plan else {
                if is_head {
                    unplaceable.push(i);
                }
                continue;
            };
            self.start_with_victims(i, pending.id, &victims, &mut excluded, &mut running)?;
            started_team.insert(self.live[i].team);
        }
        self.update_drains(&unplaceable);
        Ok(())
    }

    /// Slurm's QOS preemption ([`Preemption::Scavenger`]): waiting
    /// allocated (normal-QOS) jobs, in priority order (teams in queue order,
    /// then age), up to `preempt_depth` of them, each preempt the scavenger
    /// jobs that have run at least `PreemptExemptTime` and make it
    /// placeable ([`plan_room`] with only those jobs as candidates: an
    /// unallocated job is a legal victim of any allocated request).
    fn preempt_scavengers(&mut self) -> Result<()> {
        let exempt = self.cfg.preempt_exempt_s;
        let now = self.now;
        let mut running: Vec<RunningJob> = self
            .running_view(false)
            .into_iter()
            .filter(|r| r.min_runtime_s == 0.0 && now - r.started_s >= exempt)
            .collect();
        if running.is_empty() {
            return Ok(());
        }
        let mut pending: Vec<usize> = Vec::new();
        for &t in &self.team_orders().allocated {
            let mut keys: Vec<WaitKey> = self.teams[t]
                .wait_alloc
                .values()
                .flat_map(|set| set.iter().copied())
                .collect();
            keys.sort();
            let room = self.cfg.preempt_depth - pending.len();
            pending.extend(keys.into_iter().take(room).map(|k| k.2));
            if pending.len() == self.cfg.preempt_depth {
                break;
            }
        }
        self.moved.clear();
        let mut excluded: BTreeSet<JobId> = BTreeSet::new();
        for i in pending {
            if running.is_empty() {
                break;
            }
            let room = self.room(None);
            let pending = self.pending_view(i);
            let Some(victims) = plan_room(
                &pending,
                &running,
                &room,
                &self.ratios,
                self.now,
                &self.cfg.protection,
                &excluded,
            ) else {
                continue;
            };
            self.start_with_victims(i, pending.id, &victims, &mut excluded, &mut running)?;
        }
        Ok(())
    }

    /// Drains ([`plan_drain`]): a drained job whose nodes were due but that
    /// still cannot be placed gets its drain planned again (a job there ran on
    /// past its protection without being a legal victim); then the first
    /// `unplaceable` heads, in order, get drains while fewer than
    /// `max_drains` exist.
    fn update_drains(&mut self, unplaceable: &[usize]) {
        if self.cfg.drain_rule == DrainRule::Reserve {
            return;
        }
        let stale: Vec<usize> = self
            .drains
            .iter()
            .filter(|d| d.ready_s < self.now && unplaceable.contains(&d.job))
            .map(|d| d.job)
            .collect();
        let fresh: Vec<usize> = unplaceable
            .iter()
            .copied()
            .filter(|i| !self.drains.iter().any(|d| d.job == *i))
            .filter(|&i| self.now - self.jobs[i].submit_s >= self.cfg.drain_after_s)
            .filter(|&i| self.gpus(i) >= self.cfg.drain_min_gpus)
            .filter(|i| self.pending_view(*i).may_preempt())
            .take(self.cfg.max_drains.saturating_sub(self.drains.len()))
            .collect();
        if stale.is_empty() && fresh.is_empty() {
            return;
        }
        self.drains_replanned += stale.len() as u64;
        self.refresh_loads();
        let running = self.running_view(true);
        let room = self.room(None);
        for i in stale.into_iter().chain(fresh) {
            self.drains.retain(|d| d.job != i);
            self.refresh_held();
            let plan = plan_drain(
                &self.pending_view(i),
                &running,
                &room,
                &self.ratios,
                self.now,
                &self.cfg.protection,
                &self.held,
            );
            if let Some(p) = plan {
                self.drains_planned += 1;
                self.drains.push(Drain {
                    job: i,
                    nodes: NodeSet::from_nodes(self.cfg.spec.nodes, p.nodes),
                    ready_s: p.ready_s,
                });
                self.refresh_held();
            } else {
                self.drains_refused += 1;
            }
        }
    }

    /// Reservations ([`DrainRule::Reserve`]) that are due: every job left on
    /// their nodes is unprotected by now (work that would still be protected
    /// was kept off them), so all of them are preempted, whatever their
    /// team, and the job starts. A reservation whose nodes still hold a
    /// protected job (one Compact moved there) or whose job cannot be placed
    /// is dropped and planned again ([`Self::update_reservations`]).
    fn take_reservations(&mut self) -> Result<()> {
        let due: Vec<(usize, NodeSet)> = self
            .drains
            .iter()
            .filter(|d| d.ready_s <= self.now)
            .map(|d| (d.job, d.nodes.clone()))
            .collect();
        for (i, nodes) in due {
            let running = self.running_view(true);
            let on_nodes = running
                .iter()
                .filter(|r| r.gpus_on.iter().any(|&(n, _)| nodes.contains(n)));
            let mut victims: Vec<usize> = Vec::new();
            let mut protected = false;
            for r in on_nodes {
                if r.protected(self.now, &self.cfg.protection) {
                    protected = true;
                    break;
                }
                victims.push((r.id.0 - 1) as usize);
            }
            if !self.live[i].waiting || protected {
                if protected {
                    self.drains_replanned += 1;
                }
                self.drains.retain(|d| d.job != i);
                self.refresh_held();
                continue;
            }
            if !victims.is_empty() {
                self.reserve_preemptions += victims.len() as u64;
                self.preempt(&victims, self.jobs[i].id)?;
            }
            self.moved.clear();
            if !self.try_start(i)? {
                if !victims.is_empty() {
                    self.room_unused += 1;
                }
                self.drains.retain(|d| d.job != i);
                self.refresh_held();
            }
        }
        Ok(())
    }

    /// New reservations ([`DrainRule::Reserve`]) while fewer than
    /// `max_drains` exist: the oldest waiting allocated jobs of at least
    /// `drain_min_gpus` GPUs that have waited `drain_after_s` and may
    /// preempt, each on the nodes of [`reserve_nodes`].
    fn update_reservations(&mut self) {
        while self.drains.len() < self.cfg.max_drains {
            let mut best: Option<(u64, usize)> = None;
            for team in &self.teams {
                for (&(g, n), set) in &team.wait_alloc {
                    if u64::from(g) * u64::from(n) < self.cfg.drain_min_gpus {
                        continue;
                    }
                    for &(_, submit, i) in set {
                        let waited = self.now - self.jobs[i].submit_s >= self.cfg.drain_after_s;
                        if waited
                            && self.may_reserve(i)
                            && best.is_none_or(|b| (submit, i) < b)
                            && !self.drains.iter().any(|d| d.job == i)
                            && !self.owes_min_runtime(i)
                            && self.pending_view(i).may_preempt()
                        {
                            best = Some((submit, i));
                        }
                    }
                }
            }
            let Some((_, i)) = best else {
                return;
            };
            let running = self.running_view(true);
            let room = self.room(None);
            let Some((nodes, ready_s)) = reserve_nodes(
                self.jobs[i].shape,
                &running,
                &room,
                &self.held,
                self.now,
                &self.cfg.protection,
            ) else {
                self.drains_refused += 1;
                return;
            };
            self.drains_planned += 1;
            self.drains.push(Drain {
                job: i,
                nodes: NodeSet::from_nodes(self.cfg.spec.nodes, nodes),
                ready_s,
            });
            self.refresh_held();
        }
    }

    /// May job `i` get a reservation ([`ReserveFor`])?
    fn may_reserve(&self, i: usize) -> bool {
        let team = &self.teams[self.live[i].team];
        match self.cfg.reserve_for {
            ReserveFor::Any => true,
            ReserveFor::WithinAllocation => {
                self.gpus(i) as f64 <= team.share * self.capacity as f64
            }
            ReserveFor::UnderShare => self
                .ratios
                .ratio
                .get(&team.account)
                .is_some_and(|&r| r < 1.0),
        }
    }

    /// Preempts `victims` for pending job `i` (`by`), starts it, and takes
    /// the victims out of the `running` view the next plans see: the step
    /// both preemption passes share.
    fn start_with_victims(
        &mut self,
        i: usize,
        by: JobId,
        victims: &[crate::preempt::Preemption],
        excluded: &mut BTreeSet<JobId>,
        running: &mut Vec<RunningJob>,
    ) -> Result<()> {
        for v in victims {
            excluded.insert(v.victim);
        }
        if !victims.is_empty() {
            let ids: Vec<usize> = victims.iter().map(|v| (v.victim.0 - 1) as usize).collect();
            self.preempt(&ids, by)?;
        }
        if !self.try_start(i)? && !victims.is_empty() {
            self.room_unused += 1;
        }
        running.retain(|r| !excluded.contains(&r.id));
        self.relocate(running);
        Ok(())
    }

    /// Compact moved some running jobs ([`Self::moved`]): the victim planner
    /// must see where they are now, or it frees the wrong nodes.
    fn relocate(&mut self, running: &mut [RunningJob]) {
        if self.moved.is_empty() {
            return;
        }
        let moved: BTreeSet<JobId> = self.moved.drain(..).collect();
        let occ = self.policy.occupancy();
        for r in running.iter_mut().filter(|r| moved.contains(&r.id)) {
            if let Some(j) = occ.job(r.id) {
                let mut on: BTreeMap<u32, u32> = BTreeMap::new();
                for (&n, &g) in j.nodes.iter().zip(&j.gpus) {
                    *on.entry(n).or_default() += g;
                }
                r.gpus_on = on.into_iter().collect();
            }
        }
    }

    /// Samples every short team's gap and its cause ([`Shortfall`]), after
    /// a cycle's preemptions and scheduling pass; the sample stands for the
    /// next `cycle_s`.
    fn sample_shortfall(&mut self) {
        self.refresh_loads();
        let cap = self.capacity as f64;
        let short: Vec<(usize, f64)> = (0..self.teams.len())
            .filter_map(|t| {
                let team = &self.teams[t];
                team.leaf?;
                let owed = (team.share * cap).min(team.demand_alloc as f64);
                let gap = owed - team.run_charged as f64;
                (gap > 0.0 && !team.wait_alloc.is_empty()).then_some((t, gap))
            })
            .collect();
        if short.is_empty() {
            return;
        }
        let now = self.now;
        let room = self.room(None);
        let legal = self.running_view(false);
        // Every running job, with the protected ones of teams above their
        // allocation made unprotected ([`Cause::ProtectedOver`]).
        let over: BTreeSet<&str> = self
            .ratios
            .load
            .iter()
            .filter(|(_, l)| l.running_gpus > l.allocation_gpus)
            .map(|(a, _)| a.as_str())
            .collect();
        let cap_s = self.cfg.protection.min_runtime_cap_s;
        let unshielded: Vec<RunningJob> = self
            .running_view(true)
            .into_iter()
            .map(|mut r| {
                if r.allocated() && over.contains(r.account.as_str()) {
                    r.started_s = r.started_s.min(now - cap_s - 1.0);
                }
                r
            })
            .collect();
        let none = BTreeSet::new();
        let cfg = &self.cfg.protection;
        let fits = |p: &PendingJob, running: &[RunningJob], ratios: &dyn Ratios| {
            plan_room(p, running, &room, ratios, now, cfg, &none).is_some()
        };
        let mut samples: Vec<(usize, f64, usize)> = Vec::new();
        for (t, gap) in short {
            let team = &self.teams[t];
            // The first job of each waiting shape, in queue order; a shape
            // at least as large as a smaller one is not asked again when the
            // smaller fails (it cannot fit where the smaller does not).
            let mut firsts: Vec<WaitKey> = team
                .wait_alloc
                .values()
                .filter_map(|set| set.first().copied())
                .collect();
            firsts.sort();
            let head = team
                .wait_alloc
                .values()
                .filter_map(|set| set.iter().find(|k| !self.owes_min_runtime(k.2)).copied())
                .min()
                .map(|k| k.2);
            let mut by_size: Vec<usize> = firsts.iter().map(|k| k.2).collect();
            by_size.sort_by_key(|&i| (self.jobs[i].shape.instances, self.jobs[i].shape.gpus, i));
            let any = |pred: &dyn Fn(&PendingJob) -> bool, skip_owing: bool| {
                let mut failed: Vec<(u32, u32)> = Vec::new();
                by_size.iter().any(|&i| {
                    if skip_owing && self.owes_min_runtime(i) {
                        return false;
                    }
                    let s = (self.jobs[i].shape.gpus, self.jobs[i].shape.instances);
                    if failed.iter().any(|f| s.0 >= f.0 && s.1 >= f.1) {
                        return false;
                    }
                    let ok = pred(&self.pending_view(i));
                    if !ok {
                        failed.push(s);
                    }
                    ok
                })
            };
            let account = team.account.as_str();
            let no_test = NoRatioTest {
                table: &self.ratios,
                requester: account,
            };
            let cause = if head.is_some_and(|i| fits(&self.pending_view(i), &legal, &self.ratios)) {
                Cause::Order
            } else if any(&|p| fits(p, &legal, &self.ratios), true) {
                Cause::HeadBlocked
            } else if any(&|p| fits(p, &legal, &self.ratios), false) {
                Cause::LoopRule
            } else if any(&|p| fits(p, &legal, &no_test), false) {
                Cause::RatioRule
            } else if by_size.first().is_some_and(|&i| {
                let mut p = self.pending_view(i);
                let g = self.cfg.spec.gpus_per_node;
                let want = gap.ceil() as u32;
                p.shape = if want >= g {
                    JobShape::new(want.div_ceil(g), g)
                } else {
                    JobShape::new(1, want.max(1))
                };
                fits(&p, &legal, &no_test)
            }) {
                Cause::Granularity
            } else if any(&|p| fits(p, &unshielded, &no_test), false) {
                Cause::ProtectedOver
            } else {
                Cause::NoRoom
            };
            samples.push((t, gap, cause as usize));
        }
        let (from, to) = (now, now + self.cfg.cycle_s);
        for (t, gap, k) in samples {
            let buckets = &mut self.teams[t].gap_h;
            let mut at = from;
            while at < to {
                let h = (at / 3600.0).floor();
                let end = ((h + 1.0) * 3600.0).min(to);
                let h = h as usize;
                if buckets.len() <= h {
                    buckets.resize(h + 1, [0.0; CAUSES]);
                }
                buckets[h][k] += gap * (end - at);
                at = end;
            }
        }
    }

    /// Job `i` as the victim planner sees a pending job.
    fn pending_view(&self, i: usize) -> PendingJob {
        PendingJob {
            id: self.jobs[i].id,
            account: self.jobs[i].account.clone(),
            shape: self.jobs[i].shape,
            min_runtime_s: self.planner_min_runtime(i),
            preempted_by: self.live[i].preempted_by,
            owes_min_runtime: false,
            room_given: false,
            needs: Default::default(),
            weight: 1.0,
        }
    }

    /// The "no loop" rule, as in the live service
    /// (`budget-service/src/enforce.rs`: a victim's preemption record is
    /// settled only once its restarted run is no longer protected): a
    /// preempted job may not preempt until it has run its (capped) min
    /// runtime since its restart. Its run time before the preemption does
    /// not count (it always covers the min runtime: protected jobs are no
    /// victims), so a requeued victim waiting again always owes.
    fn owes_min_runtime(&self, i: usize) -> bool {
        let l = &self.live[i];
        let need = self.min_runtime_capped(i);
        l.owes && !l.run_start.is_some_and(|s| self.now - s >= need)
    }

    /// Job `i`'s min runtime, capped at the protection cap.
    fn min_runtime_capped(&self, i: usize) -> Seconds {
        self.jobs[i]
            .min_runtime_s
            .min(self.cfg.protection.min_runtime_cap_s)
    }

    fn report(self) -> BudgetReport {
        let hour = 3600.0;
        let cap = self.capacity as f64;
        let mut teams = Vec::new();
        let (mut owed_all, mut delivered_all) = (0.0, 0.0);
        let (mut owed_alloc_all, mut delivered_alloc_all) = (0.0, 0.0);
        // Sum over hours of min(used, min(allocation, demand)).
        let owed_of = |alloc_h: f64, demand_h: &[f64], used_h: &[f64]| {
            let (mut owed, mut delivered) = (0.0, 0.0);
            for (h, d) in demand_h.iter().enumerate() {
                let o = alloc_h.min(*d);
                owed += o;
                delivered += used_h.get(h).copied().unwrap_or(0.0).min(o);
            }
            (owed, delivered)
        };
        for t in &self.teams {
            let alloc_h = t.share * cap * hour;
            let (owed, delivered) = owed_of(alloc_h, &t.demand_h, &t.used_h);
            let (owed_a, delivered_a) = owed_of(alloc_h, &t.demand_alloc_h, &t.charged_h);
            let shortfall = self
                .cfg
                .shortfall
                .then(|| shortfall_of(alloc_h, &t.demand_alloc_h, &t.charged_h, &t.gap_h));
            owed_all += owed;
            delivered_all += delivered;
            owed_alloc_all += owed_a;
            delivered_alloc_all += delivered_a;
            teams.push(TeamReport {
                account: t.account.clone(),
                share: t.share,
                jobs: t.jobs,
                owed_gpu_h: owed / hour,
                delivered_gpu_h: delivered / hour,
                owed_delivered: if owed > 0.0 { delivered / owed } else { 1.0 },
                owed_allocated_gpu_h: owed_a / hour,
                delivered_allocated_gpu_h: delivered_a / hour,
                used_gpu_h: t.used_h.iter().sum::<f64>() / hour,
                charged_gpu_h: t.charged_total / hour,
                shortfall,
            });
        }
        teams.sort_by(|a, b| a.account.cmp(&b.account));
        let owed_teams: Vec<&TeamReport> = teams.iter().filter(|t| t.owed_gpu_h > 0.0).collect();
        let alloc_ratios: Vec<f64> = teams
            .iter()
            .filter(|t| t.owed_allocated_gpu_h > 0.0)
            .map(|t| t.delivered_allocated_gpu_h / t.owed_allocated_gpu_h)
            .collect();
        let charged: f64 = self.teams.iter().map(|t| t.charged_total).sum();
        let free: f64 = self.teams.iter().map(|t| t.free_total).sum();

        let end = self.now;
        let wait_of = |i: usize| self.live[i].first_start.unwrap_or(end) - self.jobs[i].submit_s;
        let all: Vec<f64> = (0..self.jobs.len())
            .filter(|&i| self.jobs[i].submit_s <= end)
            .map(wait_of)
            .collect();
        let debug: Vec<f64> = (0..self.jobs.len())
            .filter(|&i| {
                let j = &self.jobs[i];
                j.submit_s <= end
                    && j.shape.total_gpus() <= u64::from(self.cfg.debug_max_gpus)
                    && j.min_runtime_s > 0.0
                    && j.min_runtime_s <= self.cfg.debug_max_min_runtime_s
            })
            .map(wait_of)
            .collect();
        let mut sizes: Vec<u64> = self.jobs.iter().map(|j| j.shape.total_gpus()).collect();
        sizes.sort_unstable();
        let largest_min = sizes
            .get(sizes.len().saturating_sub(1) * 99 / 100)
            .copied()
            .unwrap_or(0);
        let largest_ix: Vec<usize> = (0..self.jobs.len())
            .filter(|&i| {
                self.jobs[i].submit_s <= end && self.jobs[i].shape.total_gpus() >= largest_min
            })
            .collect();
        let largest_started = largest_ix
            .iter()
            .filter(|&&i| self.live[i].first_start.is_some())
            .count();
        let largest_alloc_ix: Vec<usize> = largest_ix
            .iter()
            .copied()
            .filter(|&i| self.allocated(i))
            .collect();
        let largest_allocated_started = largest_alloc_ix
            .iter()
            .filter(|&&i| self.live[i].first_start.is_some())
            .count();
        let largest_alloc: Vec<f64> = largest_alloc_ix.into_iter().map(wait_of).collect();
        let largest_alloc_n = largest_alloc.len();
        let largest_alloc = Percentiles::of(largest_alloc);
        let largest: Vec<f64> = largest_ix.into_iter().map(wait_of).collect();
        let debug = Percentiles::of(debug);
        let largest_n = largest.len();
        let largest = Percentiles::of(largest);
        let completed = self.live.iter().filter(|l| l.done && !l.cancelled).count();
        let cancelled = self.live.iter().filter(|l| l.cancelled).count();
        let jct: f64 = (0..self.jobs.len())
            .filter_map(|i| Some(self.live[i].end_s? - self.jobs[i].submit_s))
            .sum();
        // AFR as the placement simulator averages it ([`Window::metric`]).
        let (window, metric_window) = Window::metric(self.frag.peak, self.frag.busy);
        let afr = window.avg(window.sif);
        BudgetReport {
            policy: self.cfg.policy.clone(),
            nodes: self.cfg.spec.nodes,
            gpus: self.capacity,
            jobs: self.jobs.len(),
            completed,
            cancelled,
            unfinished: self.jobs.len() - completed - cancelled,
            simulated_s: end,
            window_s: self.cfg.window_s,
            min_runtime_cap_s: self.cfg.protection.min_runtime_cap_s,
            owed_delivered: if owed_all > 0.0 {
                delivered_all / owed_all
            } else {
                1.0
            },
            worst_team_owed_delivered: owed_teams
                .iter()
                .map(|t| t.owed_delivered)
                .fold(1.0, f64::min),
            teams_at_95: owed_teams
                .iter()
                .filter(|t| t.owed_delivered >= 0.95)
                .count(),
            teams_owed: owed_teams.len(),
            owed_allocated_delivered: if owed_alloc_all > 0.0 {
                delivered_alloc_all / owed_alloc_all
            } else {
                1.0
            },
            worst_team_owed_allocated_delivered: alloc_ratios.iter().copied().fold(1.0, f64::min),
            teams_at_95_allocated: alloc_ratios.iter().filter(|&&r| r >= 0.95).count(),
            occupancy: if self.peak_s > 0.0 {
                self.peak_used_gpu_s / (cap * self.peak_s)
            } else {
                0.0
            },
            unallocated_share: if charged + free > 0.0 {
                free / (charged + free)
            } else {
                0.0
            },
            debug_jobs: debug.count as usize,
            debug_p90_wait_s: debug.p90,
            largest_min_gpus: largest_min as u32,
            largest_jobs: largest_n,
            largest_started,
            largest_p50_wait_s: largest.p50,
            largest_p90_wait_s: largest.p90,
            largest_allocated_jobs: largest_alloc_n,
            largest_allocated_started,
            largest_allocated_p50_wait_s: largest_alloc.p50,
            largest_allocated_p90_wait_s: largest_alloc.p90,
            wait: Percentiles::of(all),
            preemptions: self.preemptions,
            preemptions_per_job: self.preemptions as f64 / self.jobs.len().max(1) as f64,
            lost_gpu_h: self.lost_gpu_s / hour,
            migrations: self.migrations,
            migration_charges: self.charges,
            migrated_jobs: self.live.iter().filter(|l| l.charges > 0).count() as u64,
            migration_cost_s: self.cfg.migration.migration_cost_s,
            rule_cost_s: self.cfg.migration.rule_cost_s,
            migration_charge: self.cfg.migration.charge,
            payback: self.cfg.migration.payback,
            remaining_run: self.cfg.migration.remaining,
            move_when: self.cfg.migration.move_when,
            tidy_payback: (self.cfg.migration.move_when == MoveWhen::Pays)
                .then_some(self.cfg.migration.tidy_payback),
            compact_no_gain: self.gate.no_gain,
            gate_trials: self.gate.trials.get(),
            gate_trials_remembered: self.gate.remembered.get(),
            drained_starts: self.drains_started,
            drains_planned: self.drains_planned,
            drains_replanned: self.drains_replanned,
            drains_refused: self.drains_refused,
            drain_idle_gpu_h: self.drain_idle_gpu_s / hour,
            reserve_preemptions: self.reserve_preemptions,
            room_unused: self.room_unused,
            afr,
            mean_n_sif: afr * f64::from(self.cfg.spec.nodes),
            max_n_sif: self.frag.max_n_sif,
            metric_window: metric_window.to_string(),
            peak_s: self.frag.peak.time,
            busy_s: self.frag.busy.time,
            ajct_s: if completed > 0 {
                jct / completed as f64
            } else {
                0.0
            },
            teams,
            events: self.events,
        }
    }
}

/// The nodes of a reservation ([`DrainRule::Reserve`]) for a job of `shape`:
/// each node is ready when the last protection of the jobs on it ends (now
/// if none is protected: at the reservation time every job there is
/// preempted, whatever its team); nodes are taken by ready time, then the
/// least GPU-time their jobs would lose if preempted then
/// ([`crate::preempt::lost_run_s`]: a non-resumable job loses its whole
/// run), then fewest busy GPUs (COMPASS keeps job sizes apart, so a node of
/// one whole-node job is as cheap as an empty one), then index, as many as the job's instances
/// need (`capacity / gpus` instances per emptied node). Nodes in `held`
/// (held for another job) and unusable ones are skipped. Returns the nodes
/// and the reservation time (the latest of their ready times), or `None`
/// when too few nodes exist.
pub fn reserve_nodes(
    shape: JobShape,
    running: &[RunningJob],
    room: &NodeRoom,
    held: &NodeSet,
    now: Seconds,
    cfg: &ProtectionConfig,
) -> Option<(Vec<crate::model::NodeId>, Seconds)> {
    let g = shape.gpus;
    if g == 0 || g > room.capacity {
        return None;
    }
    let per_node = u64::from(room.capacity / g);
    let need = u64::from(shape.instances).div_ceil(per_node) as usize;
    let mut ready = vec![now; room.free.len()];
    for r in running.iter().filter(|r| r.protected(now, cfg)) {
        let until = r.protected_until(cfg).unwrap_or(now);
        for &(n, _) in &r.gpus_on {
            if let Some(slot) = ready.get_mut(n as usize) {
                *slot = slot.max(until);
            }
        }
    }
    // GPU-seconds lost on each node if its jobs are preempted when it is ready.
    let mut lost = vec![0.0; room.free.len()];
    for r in running {
        for &(n, gpus) in &r.gpus_on {
            if let (Some(l), Some(t)) = (lost.get_mut(n as usize), ready.get(n as usize)) {
                *l +=
                    crate::preempt::lost_run_s(t - r.started_s, r.resumable, cfg) * f64::from(gpus);
            }
        }
    }
    let mut cands: Vec<(Seconds, f64, u32, u32)> = (0..room.free.len() as u32)
        .filter(|&n| room.usable.contains(n) && !held.contains(n))
        .map(|n| {
            let free = room.free[n as usize].min(room.capacity);
            (ready[n as usize], lost[n as usize], room.capacity - free, n)
        })
        .collect();
    if cands.len() < need {
        return None;
    }
    cands.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    cands.truncate(need);
    let ready_s = cands.iter().map(|c| c.0).fold(now, f64::max);
    Some((cands.into_iter().map(|c| c.3).collect(), ready_s))
}

#[path = "fair_tree.rs"]
pub mod fair_tree;

#[path = "workload.rs"]
pub mod workload;

#[cfg(test)]
#[path = "budgets_tests.rs"]
mod tests;
