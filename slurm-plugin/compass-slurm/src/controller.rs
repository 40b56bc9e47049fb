//! The select plugin's brain, without Slurm: what `select_p_job_test`,
//! `select_p_job_begin`, `select_p_job_fini` and the plugin's own thread do
//! with the COMPASS engine (paper Section 4, Algorithm 1). The plugin reads
//! Slurm's structs into plain values and calls these methods under its own
//! mutex; nothing here blocks or does I/O.
//!
//! - [`Controller::narrow`]: the nodes the engine plans for a pending job
//!   among the candidates Slurm passes (or the pinned target of a migration);
//!   `None` means "do not narrow" (no GPUs, outside the model, engine off or
//!   erring, engine has no plan).
//! - [`Controller::begin`] / [`Controller::fini`]: the engine adopts what
//!   Slurm actually allocated; a departure runs Compact, whose migrations
//!   become [`MigrationOrder`]s (requeue + pin) for the plugin thread.
//! - [`Controller::tick`]: each job's movability by the rule shared with
//!   the simulator, `compass_core::placement::worth` (resumable, past its
//!   `--min-runtime` protection and the first minutes of run time, outside
//!   the cool-down), and expiry of stale pins.
//!
//! On a mixed cluster the engine is a [`PoolSet`]: one COMPASS engine per
//! pool of interchangeable nodes (same GPU count and type, issue 12). A job
//! is planned in one pool among those its candidate nodes and its GPU type
//! allow; a job no modelled pool admits is left to cons_tres.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use compass_core::metric;
use compass_core::model::{ClusterSpec, JobId, JobRequest, JobShape, Migration, NodeId, NodeSet};
use compass_core::placement::compass::{AdoptOutcome, CompassConfig, NodePart, Veto};
use compass_core::placement::head::{
    hold_for_head, Blocked, Ends, HeadTrial, HeadVerdict, TrialMemory, WaitingJob,
};
use compass_core::placement::pools::{NodeGpus, PoolSet, PoolsLayoutParts};
use compass_core::placement::worth::{
    release_turn, tidy_turn, KeepReason, MigrationRule, MoveCandidate, MoveWhen, RunHistory,
    TIDY_TRIALS, TRIAL_RELEASES,
};
use compass_core::placement::PlacementPolicy;

use crate::config::SelectConfig;
use crate::flags::JobFlags;
use crate::persist::{Saved, SavedMigration, FORMAT as SAVED_FORMAT};
use crate::queue::{Queue, Waiting};
use crate::shape::{instances_from_alloc, Mapping};
use crate::state::{JobView, NodeView, PendingMigration, PoolView, PublishedState, FORMAT};

/// Plans of pending jobs kept for the divergence count at most (cancelled
/// jobs never start; the map is cleared when it reaches this size).
const MAX_PLANS_KEPT: usize = 100_000;

/// A pin older than this is dropped (the job plans normally again), seconds.
pub const PIN_TIMEOUT_S: u64 = 60;

/// A job that `job_test` keeps from starting because its planned nodes are
/// not free yet (migrations in flight, or its own pinned target) waits at
/// most this long, counted from the first refusal, seconds. Then the hold
/// is dropped and Slurm's own placement (cons_tres) takes over, away from
/// the targets of the other migrations in flight ([`Controller::hold`];
/// issue 10: "held for a migration target").
pub const HOLD_LIMIT_S: u64 = 10;

/// A pending GPU job that Slurm has not offered to `narrow` for this long
/// no longer counts as waiting for `select.move_when` (it was cancelled, or
/// is held), seconds. Slurm tries every pending job at each backfill pass
/// (`bf_interval`, 30 s by default).
pub const WAITING_TTL_S: u64 = 120;

/// Nodes kept for one waiting job at most ([`Controller::keep_for_waiting`]):
/// a `-w` list longer than this keeps its first nodes only.
pub const KEPT_NODES_PER_JOB: usize = 64;

/// Waiting jobs nodes are kept for at most; a job past them is not kept
/// for (counted in `Counters::keeps_over_limit`) until one of them starts
/// or stops waiting.
pub const KEPT_JOBS: usize = 64;

/// Which nodes [`Controller::keep_for_waiting`] is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepNodes {
    /// The nodes the job names (`-w`): kept exactly.
    Named,
    /// Where Slurm plans to start it now: added to those kept for it
    /// before. Slurm's plan moves from node to node as the jobs there come
    /// and go (or move); kept, each stays kept until the job starts or
    /// stops waiting, so Compact does not fill the node the plan left a
    /// moment ago (Slurm's testsuite run: an `--exclusive -C` job's plan
    /// went back and forth between two nodes at every backfill pass).
    Planned,
}

/// The nodes kept for a waiting job were set or changed, for Slurm's log
/// ([`Controller::keep_for_waiting`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptLine {
    /// The job had none kept before.
    pub first: bool,
    pub line: String,
}

/// Nodes kept for a pending job the engine does not place
/// ([`Controller::keep_for_waiting`]).
#[derive(Clone, Debug)]
struct Kept {
    /// Sorted, GPU nodes only.
    nodes: Vec<NodeId>,
    /// The last `job_test` of the job.
    seen: u64,
}

/// Compact trials at most per guarded Compact
/// ([`compass_core::placement::head::hold_for_head`]).
const HEAD_TRIALS: usize = 8;

/// What the plugin knows about a job when it asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub id: u64,
    pub mapping: Mapping,
    /// From the SPANK env; `None` for jobs submitted without the plugin.
    pub flags: Option<JobFlags>,
    /// Slurm's time limit of the job, seconds; `None`: none (infinite).
    pub time_limit_s: Option<u64>,
    /// The GPU type the job names (`--gres=gpu:a100:2`); `None`: any.
    pub gpu_type: Option<String>,
    /// The job names nodes it must include (`-w`): Slurm's candidates are
    /// not the nodes it may choose among, so the plan is not enforced
    /// (cons_tres places it; the engine adopts where it runs).
    pub required_nodes: bool,
}

/// A requeue to carry out: the job restarts pinned to `to_nodes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationOrder {
    pub job: u64,
    /// `to_nodes[k]` hosts instance `k`.
    pub to_nodes: Vec<NodeId>,
}

#[derive(Clone, Debug)]
struct JobRec {
    shape: Option<JobShape>,
    /// GPUs per node as Slurm allocated them (shared with the published
    /// state's copies, [`JobCopy`]).
    per_node: Arc<[(NodeId, u32)]>,
    flags: JobFlags,
    time_limit_s: Option<u64>,
    start: u64,
    /// It names its nodes (`-w`): never moved ([`KeepReason::NamesItsNodes`]).
    named: bool,
    movable: bool,
    /// Why the migration rule keeps this job still (its own verdict; while
    /// the gate `select.move_when` is closed, an eligible job counts as
    /// `no-gain` in the published state).
    keep: Option<KeepReason>,
    in_engine: bool,
    /// Its entry in `recheck` (`Controller::recheck`): the next instant
    /// its verdict can change.
    check_at: Option<u64>,
}

#[derive(Clone, Debug)]
struct Pin {
    nodes: Vec<NodeId>,
    since: u64,
}

/// A job `job_test` keeps from starting (its planned nodes are not free).
#[derive(Clone, Copy, Debug)]
struct HoldRec {
    /// The first refusal of this episode.
    since: u64,
    /// The last refusal: a gap longer than [`HOLD_LIMIT_S`] starts a new
    /// episode.
    last: u64,
    /// When the limit passed: from then on Slurm places the job, for
    /// [`WAITING_TTL_S`] or until it starts.
    released: Option<u64>,
}

/// What `job_test` does with a job whose narrowed nodes cons_tres refused
/// while migrations are in flight ([`Controller::hold`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Wait for the migrations in flight to land (within [`HOLD_LIMIT_S`]).
    Wait,
    /// The hold is over: Slurm places the job among its own candidates less
    /// `keep_off` (the targets of the other migrations in flight).
    Release { keep_off: Vec<NodeId> },
}

/// A hold that reached [`HOLD_LIMIT_S`], for the plugin's log
/// ([`Controller::take_releases`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    pub job: u64,
    /// Seconds from the first refusal to the release.
    pub held_s: u64,
    /// The job's own migration could not land: its pin was dropped.
    pub pin_dropped: bool,
}

/// Counters of what happened, for the published state and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub narrowed: u64,
    pub divergences: u64,
    pub migrations_ordered: u64,
    pub migrations_done: u64,
    pub migrations_failed: u64,
    pub engine_errors: u64,
    /// Compacts run with jobs held still, or not run, so that their moves
    /// would not delay the waiting head (`Controller::compact_sparing_head`).
    pub compacts_held_for_head: u64,
    /// Trials of the gate `select.move_when` (`"starts"`, `"pays"`): a
    /// Compact with every job its verdict allows free to move, made to see
    /// whether its moves let a waiting job start
    /// (`Controller::compact_if_it_starts_a_job`).
    pub gate_trials: u64,
    /// Under `"pays"`, trials not made because a trial that started
    /// nobody covers their chances ([`TrialMemory`]); not the tick after
    /// such a trial, which tidies without a look at the chances
    /// (`tidies_deferred`).
    pub gate_trials_remembered: u64,
    /// Under `"pays"`, tidying Compacts left to the next tick by a trial
    /// that started nobody (`Controller::tidy_next_tick`).
    pub tidies_deferred: u64,
    /// Compacts tried and not made under `select.move_when = "starts"`:
    /// their moves let no waiting job start
    /// (`Controller::compact_if_it_starts_a_job`).
    pub compacts_no_gain: u64,
    /// Of those, under `"pays"`, Compacts made with only the moves of jobs
    /// whose tidying move pays for itself, that requeued some
    /// (`Controller::compact_tidying`).
    pub compacts_tidying: u64,
    /// Migrations in flight whose pins were dropped because Slurm started
    /// another job on their targets (`Controller::yield_targets`).
    pub targets_yielded: u64,
    /// Pending jobs the engine does not place that nodes were kept for,
    /// off Compact's targets and new instances
    /// (`Controller::keep_for_waiting`).
    pub kept_for_waiting: u64,
    /// Of those, jobs not kept for because [`KEPT_JOBS`] already were.
    pub keeps_over_limit: u64,
}

/// One Compact the head's guard restrained, for Slurm's log
/// ([`Controller::take_head_hold`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadHold {
    /// The waiting head.
    pub head: u64,
    /// The jobs held still; empty: Compact made no move at all.
    pub held: Vec<u64>,
}

pub struct Controller {
    config: SelectConfig,
    node_names: Arc<[String]>,
    /// GPUs of each node (0: CPU-only), in Slurm's node index order.
    node_gpus: Vec<u32>,
    /// The nodes with GPUs ([`Controller::gpu_node_set`]).
    gpu_set: NodeSet,
    engine: PoolSet,
    engine_error: Option<String>,
    /// The running jobs Slurm reported, by job id (hashed: looked up
    /// several times per event; the published state sorts them).
    jobs: FxHashMap<u64, JobRec>,
    /// The running jobs' expected ends (start plus time limit), in order,
    /// kept with `jobs` ([`Controller::put_job`]), for the head's guard.
    ends: Ends,
    /// When a running job's verdict ([`Controller::eligible`]) can change
    /// next, (instant, job): the tick re-checks only the jobs due, not
    /// every job. One entry per job (`JobRec::check_at`), the next of its
    /// instants ([`Controller::next_change`]); the re-check at the tick
    /// puts in the one after. Its start, its end and a migration each cost
    /// one insertion or removal, not one per instant (issue #11: the plugin
    /// mix's departures and their requeues).
    recheck: BTreeSet<(u64, u64)>,
    pins: BTreeMap<u64, Pin>,
    /// Jobs requeued for a migration, not yet restarted.
    migrating: BTreeSet<u64>,
    last_migrated: BTreeMap<u64, u64>,
    /// `last_migrated` by instant, (t, job), so the tick drops the
    /// cool-downs that ended without a pass over all of them.
    cooldowns: BTreeSet<(u64, u64)>,
    /// Shapes of in-flight migrations restored by [`Controller::restore`],
    /// until [`Controller::adopt_in_flight`].
    restored_shapes: BTreeMap<u64, JobShape>,
    orders: VecDeque<MigrationOrder>,
    /// Nodes Slurm reports down/drained/failing.
    unusable: BTreeSet<NodeId>,
    /// Nodes kept for pending jobs the engine does not place, by job
    /// ([`Controller::keep_for_waiting`]); with `unusable`, what the engine
    /// counts unusable ([`Controller::sync_usable`]).
    kept: BTreeMap<u64, Kept>,
    /// How many of `kept`'s jobs keep each node.
    kept_nodes: BTreeMap<NodeId, u32>,
    /// An arrival or departure happened since the last Compact.
    compact_due: bool,
    /// The last plan `narrow` gave each pending job (instance nodes,
    /// sorted): Slurm's allocation is compared with it when the job
    /// starts, so a plan made among restricted candidates (partition,
    /// `--exclude`) is not counted as a divergence.
    planned: BTreeMap<u64, Vec<NodeId>>,
    /// Pending GPU jobs Slurm offered to `narrow` lately, for the gate
    /// `select.move_when` ([`compass_core::placement::worth::MoveWhen`]).
    waiting: Queue,
    /// Whether the gate let jobs move at the last tick.
    gate_open: bool,
    /// Jobs `job_test` holds back for planned nodes not yet free.
    holds: BTreeMap<u64, HoldRec>,
    /// Holds released since the last [`Controller::take_releases`].
    releases: Vec<Released>,
    /// The last Compact the head's guard restrained, until taken.
    head_hold: Option<HeadHold>,
    /// The runs of the GPU jobs that ended (since their last start), for
    /// `select.move_when = "pays"`.
    runs: RunHistory,
    /// Under `"pays"`, the jobs whose tidying move did not pay: held still
    /// in the engine (their records keep their own verdicts) until a
    /// Compact could start a waiting job, they pay, or they end
    /// ([`Controller::compact_tidying`]).
    tidy_held: BTreeSet<u64>,
    /// The held job re-judged last ([`Controller::recheck_tidy_held`]).
    tidy_cursor: Option<u64>,
    /// The held job the gate's last trial released last
    /// ([`Controller::compact_if_it_starts_a_job`]).
    release_cursor: Option<u64>,
    /// Under `"pays"`, the gate's trials that started no waiting job, not
    /// made again for the same chances for a while
    /// ([`Controller::compact_if_it_starts_a_job`]).
    trial_memory: TrialMemory,
    /// A trial that started nobody left its tidying Compact to the next
    /// tick ([`Controller::tidy_next_tick`]): the next Compact tidies and
    /// makes no trial.
    tidy_waits: bool,
    /// The part of the nodes the next [`Controller::self_check`] checks.
    check_part: u32,
    /// The running jobs whose published record changed since the last
    /// [`Controller::snapshot_parts`] (started, re-judged or ended), and
    /// whether that one must copy every job instead (`true` until the
    /// first: a new controller's jobs replace whatever was published).
    snap_changed: FxHashSet<u64>,
    snap_full: bool,
    pub counters: Counters,
}

/// Nodes one [`Controller::self_check`] checks at most: the plugin thread
/// runs it under the controller's lock, which slurmctld's callbacks wait
/// for. The whole check costs about 12 ms at 10,000 nodes (`compass bench
/// --mix plugin`); a part of 256 nodes costs about 0.2-0.4 ms there.
pub const SELF_CHECK_NODES: u32 = 256;

/// Verdicts one turn of [`Controller::recheck_due`] re-checks at most
/// (about 0.6 us each on average at 10,000 nodes in the plugin bench; a
/// turn's p99 is 12-16 us there, its max 0.1-0.25 ms; turns of 32 were no
/// shorter at their max).
pub const RECHECKS_PER_TURN: usize = 64;

/// Changes of the fit over time of heads of other shapes than the last a
/// tick that moved nobody takes in ([`Ends::catch_up`]; about 0.2 us each
/// at 10,000 nodes).
const CATCH_UP_PER_TICK: usize = 32;

impl Controller {
    /// A homogeneous cluster: `spec.nodes` nodes of `spec.gpus_per_node`
    /// untyped GPUs (one pool).
    pub fn new(config: SelectConfig, spec: ClusterSpec, node_names: Vec<String>) -> Self {
        let nodes = vec![NodeGpus::new(spec.gpus_per_node, None); spec.nodes as usize];
        Self::with_nodes(config, &nodes, node_names)
    }

    /// Any cluster, from its node table: one engine per pool of
    /// interchangeable GPU nodes ([`PoolSet`]).
    pub fn with_nodes(config: SelectConfig, nodes: &[NodeGpus], node_names: Vec<String>) -> Self {
        Self {
            // Compact runs from tick(), never while migrations are in flight
            // (it would move jobs the engine already placed at their targets).
            engine: PoolSet::new(
                nodes,
                CompassConfig {
                    compact: false,
                    ..CompassConfig::default()
                },
            ),
            config,
            node_gpus: nodes.iter().map(|n| n.gpus).collect(),
            gpu_set: NodeSet::from_nodes(
                nodes.len() as u32,
                (0..nodes.len() as NodeId).filter(|&n| nodes[n as usize].gpus > 0),
            ),
            node_names: node_names.into(),
            engine_error: None,
            jobs: FxHashMap::default(),
            ends: Ends::default(),
            recheck: BTreeSet::new(),
            pins: BTreeMap::new(),
            migrating: BTreeSet::new(),
            last_migrated: BTreeMap::new(),
            cooldowns: BTreeSet::new(),
            restored_shapes: BTreeMap::new(),
            orders: VecDeque::new(),
            unusable: BTreeSet::new(),
            kept: BTreeMap::new(),
            kept_nodes: BTreeMap::new(),
            compact_due: false,
            planned: BTreeMap::new(),
            waiting: Queue::default(),
            gate_open: true,
            holds: BTreeMap::new(),
            releases: Vec::new(),
            head_hold: None,
            tidy_held: BTreeSet::new(),
            trial_memory: TrialMemory::default(),
            tidy_waits: false,
            tidy_cursor: None,
            release_cursor: None,
            check_part: 0,
            snap_changed: FxHashSet::default(),
            snap_full: true,
            runs: RunHistory::default(),
            counters: Counters::default(),
        }
    }

    /// Nodes of the cluster (GPU and CPU-only).
    pub fn node_count(&self) -> u32 {
        self.engine.node_count()
    }

    /// The largest GPU count of a node (what a request is mapped against;
    /// each pool then admits the instances that fit its nodes).
    pub fn max_gpus_per_node(&self) -> u32 {
        self.node_gpus.iter().copied().max().unwrap_or(0)
    }

    /// The pools (tests, logs).
    pub fn pools(&self) -> &PoolSet {
        &self.engine
    }

    fn note_error(&mut self, what: &str, e: impl std::fmt::Display) -> String {
        let msg = format!("{what}: {e}");
        self.counters.engine_errors += 1;
        self.engine_error = Some(msg.clone());
        msg
    }

    /// The site's migration rule, shared with the simulator
    /// ([`compass_core::placement::worth`]).
    fn rule(&self) -> MigrationRule {
        MigrationRule {
            default_cost_s: self.config.migration_cost_s as f64,
            payback: self.config.payback,
            min_run_s: self.config.min_run_before_migration_s as f64,
            cooldown_s: self.config.migration_cooldown_s as f64,
            tidy_payback: self.config.tidy_payback,
        }
    }

    /// What the rule needs to know about a running job at `now`.
    fn candidate(&self, id: u64, rec: &JobRec, now: u64) -> MoveCandidate {
        candidate_of(rec, self.last_migrated.get(&id).copied(), now)
    }

    /// Will Compact be free to move `job` soon after it starts? No when it
    /// is not resumable, protected, or too short to pay for a move: the plan
    /// then seats it as immovable (the engine's pinned fill), as the
    /// simulator does.
    fn movable_after_start(&self, job: &JobInfo) -> bool {
        if !self.config.migrate || job.required_nodes {
            return false;
        }
        let flags = job.flags.unwrap_or_default();
        let start = MoveCandidate {
            resumable: flags.resumable,
            cost_s: flags.migration_cost_s.map(|c| c as f64),
            running_for_s: 0.0,
            remaining_s: job.time_limit_s.map(|l| l as f64),
            protected_for_s: flags.min_runtime_s as f64,
            since_migrated_s: None,
        };
        !self.rule().holds_at_start(&start)
    }

    /// May Compact move this job now? `Err` says why not. Never with
    /// `select.migrate = false` (issue #11: Compact's moves were made in the
    /// engine and not ordered, so its layout drifted from Slurm's), nor a
    /// job that names its nodes (`-w`; issue #11: Compact gathered such a
    /// job's instances onto one of its nodes). These two verdicts hold for
    /// the job's whole run ([`Controller::next_change`]).
    fn eligible(&self, id: u64, rec: &JobRec, now: u64) -> Result<(), KeepReason> {
        if let Some(r) = Self::never_moves(&self.config, rec) {
            return Err(r);
        }
        self.rule().check(&self.candidate(id, rec, now))
    }

    /// Why a job is never moved whatever the time: migrations are off, or
    /// it names its nodes.
    fn never_moves(config: &SelectConfig, rec: &JobRec) -> Option<KeepReason> {
        if !config.migrate {
            Some(KeepReason::MigrationsOff)
        } else if rec.named {
            Some(KeepReason::NamesItsNodes)
        } else {
            None
        }
    }

    /// Nodes to narrow `select_p_job_test` to, or `None` to leave Slurm's
    /// candidates alone. `Err` carries a message for Slurm's log (then
    /// nothing is narrowed either).
    pub fn narrow(
        &mut self,
        job: &JobInfo,
        candidates: &NodeSet,
    ) -> Result<Option<NodeSet>, String> {
        if !self.config.enabled {
            return Ok(None);
        }
        if let Some(pin) = self.pins.get(&job.id) {
            // A migrating job restarts on its planned target only: while no
            // target node is among Slurm's candidates it waits (an empty
            // set), until the pin expires after PIN_TIMEOUT_S.
            let set = NodeSet::from_nodes(
                candidates.len(),
                pin.nodes
                    .iter()
                    .copied()
                    .filter(|n| candidates.contains(*n)),
            );
            return Ok(Some(set));
        }
        let Mapping::Model {
            shape,
            distinct_nodes,
        } = job.mapping
        else {
            return Ok(None);
        };
        if self.jobs.contains_key(&job.id) || self.migrating.contains(&job.id) {
            return Ok(None);
        }
        // It waits (until it starts) for the gate `select.move_when`. Under
        // `"starts"` a job that newly waits may be the one a Compact lets
        // start: try one at the next tick.
        if self.config.move_when.tries_first() && !self.waiting.contains(job.id) {
            self.compact_due = true;
        }
        self.waiting
            .offer(job.id, Waiting::offered(shape, job.gpu_type.clone()));
        if job.required_nodes {
            return Ok(None);
        }
        if let Some(keep_off) = self.released_keep_off(job.id) {
            // Held past HOLD_LIMIT_S: Slurm places it, off the targets of
            // the migrations in flight. No plan of it stands (nor its
            // spread, `plan_spread`, nor a divergence from it).
            self.planned.remove(&job.id);
            if keep_off.iter().all(|n| !candidates.contains(*n)) {
                return Ok(None);
            }
            let mut set = candidates.clone();
            for n in keep_off {
                set.remove(n);
            }
            return Ok(Some(set));
        }
        // Slurm offers only nodes that can take work now: a candidate marked
        // unusable by the last (5 s old) node poll was resumed since.
        let back: Vec<NodeId> = self
            .unusable
            .iter()
            .copied()
            .filter(|n| candidates.contains(*n))
            .collect();
        for n in back {
            self.unusable.remove(&n);
            self.sync_usable(n);
        }
        let req = JobRequest {
            id: JobId(job.id),
            shape,
            movable: self.movable_after_start(job),
        };
        // The pools this job may use: an engine, its GPU type, instances
        // that fit the nodes, and a node among Slurm's candidates (which
        // already reflect partition, features, exclusions).
        let want = job.gpu_type.as_deref();
        let options: Vec<(usize, JobRequest)> = self
            .engine
            .pools()
            .enumerate()
            .filter(|(p, spec)| {
                spec.modelled
                    && spec.admits(want, shape.gpus)
                    && self.engine.touches(*p, candidates)
            })
            .map(|(p, _)| (p, req.clone()))
            .collect();
        if options.is_empty() {
            return Ok(None);
        }
        match self.engine.choose(&options, Some(candidates)) {
            Ok(Some((pool, nodes))) => {
                let mut set = NodeSet::from_nodes(candidates.len(), nodes.iter().copied());
                let mut instances = nodes;
                if distinct_nodes && set.count() < shape.instances {
                    // Slurm needs one node per instance (`-N n` forms): plan
                    // the instances one at a time, each away from the nodes
                    // chosen for the others.
                    match self.plan_distinct(pool, &req, candidates) {
                        Ok(Some(s)) => set = s,
                        other => return other,
                    }
                    instances = set.iter().collect();
                }
                if self.planned.len() >= MAX_PLANS_KEPT {
                    self.planned.clear();
                }
                instances.sort_unstable();
                self.planned.insert(job.id, instances);
                self.counters.narrowed += 1;
                Ok(Some(set))
            }
            // No room in the engine while migrations are in flight: it
            // counts GPUs the requeues are about to free and the migrating
            // jobs' targets, which Slurm may still show free. The job waits
            // for them to land rather than let cons_tres take those GPUs.
            Ok(None) if self.in_flight() => Ok(Some(NodeSet::empty(candidates.len()))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.note_error(&format!("plan for job {}", job.id), e)),
        }
    }

    fn plan_distinct(
        &mut self,
        pool: usize,
        req: &JobRequest,
        candidates: &NodeSet,
    ) -> Result<Option<NodeSet>, String> {
        let mut allowed = candidates.clone();
        let mut chosen = NodeSet::empty(candidates.len());
        let one = JobRequest {
            shape: JobShape::new(1, req.shape.gpus),
            ..req.clone()
        };
        for _ in 0..req.shape.instances {
            match self.engine.plan_in(pool, &one, Some(&allowed)) {
                Ok(Some(nodes)) => {
                    for n in nodes {
                        chosen.insert(n);
                        allowed.remove(n);
                    }
                }
                Ok(None) => return Ok(None),
                Err(e) => return Err(self.note_error(&format!("plan for job {}", req.id), e)),
            }
        }
        Ok(Some(chosen))
    }

    /// Slurm started `job` with `per_node` GPUs (node, count): the engine
    /// adopts it, and Compact is due (Algorithm 1, line 9; it also corrects a
    /// layout Slurm chose differently from the plan). Returns a log message
    /// when the engine could not record it as planned.
    pub fn begin(&mut self, job: &JobInfo, per_node: &[(NodeId, u32)], now: u64) -> Option<String> {
        self.begin_within(job, per_node, None, now)
    }

    /// [`Controller::begin`] for a job that may only run on `allowed`
    /// (its partition's nodes less `--exclude`, with its `--constraint`
    /// features: [`crate::restriction::allowed_nodes`]): when that covers
    /// part of its pool, the engine remembers it, so Compact never migrates
    /// the job to a node Slurm could not start it on
    /// (`CompassEngine::set_allowed`, docs/compass-corrections.md section
    /// 8). `None`: no restriction.
    pub fn begin_within(
        &mut self,
        job: &JobInfo,
        per_node: &[(NodeId, u32)],
        allowed: Option<&NodeSet>,
        now: u64,
    ) -> Option<String> {
        let log = self.adopt_running_within(job, per_node, allowed, now);
        self.compact();
        log
    }

    /// [`Controller::adopt_running`] for a job that may only run on
    /// `allowed`, as [`Controller::begin_within`] restricts it: the rebuild
    /// after a slurmctld restart or a reconfigure gives each running job
    /// the restriction its job record says, as at its start.
    pub fn adopt_running_within(
        &mut self,
        job: &JobInfo,
        per_node: &[(NodeId, u32)],
        allowed: Option<&NodeSet>,
        now: u64,
    ) -> Option<String> {
        let log = self.adopt_running(job, per_node, now);
        if allowed.is_some() && self.engine.job(JobId(job.id)).is_some() {
            // A job in the model; foreign use never moves.
            let _ = self.engine.set_allowed(JobId(job.id), allowed);
        }
        log
    }

    /// Records a running job without running Compact: for the rebuild after
    /// a (re)start, where Compact must wait until every running job is known
    /// (it would otherwise move instances onto GPUs that jobs not yet
    /// adopted really use). Call [`Controller::compact`] after the last one.
    pub fn adopt_running(
        &mut self,
        job: &JobInfo,
        per_node: &[(NodeId, u32)],
        now: u64,
    ) -> Option<String> {
        self.pins.remove(&job.id);
        self.waiting.remove(job.id);
        self.holds.remove(&job.id);
        self.unkeep(job.id);
        let mut log = None;
        let shape = match job.mapping {
            Mapping::Model { shape, .. } => Some(shape),
            _ => None,
        };
        let mut rec = JobRec {
            shape,
            per_node: per_node.into(),
            flags: job.flags.unwrap_or_default(),
            time_limit_s: job.time_limit_s,
            start: now,
            named: job.required_nodes,
            movable: false,
            keep: None,
            in_engine: false,
            check_at: None,
        };
        if self.migrating.remove(&job.id) {
            self.note_migrated(job.id, now);
            self.counters.migrations_done += 1;
            // The engine recorded the job at its target already.
            let planned = self
                .engine
                .job(JobId(job.id))
                .map(|r| per_node_of(r.nodes.iter().copied(), r.request.shape.gpus));
            if planned.as_deref() == Some(&sorted(per_node)[..]) {
                rec.in_engine = true;
                // Its verdict as the rule gives it: the cool-down starts
                // now, and so does the start-up grace (the rule names the
                // first reason that holds).
                self.set_verdict(job.id, &mut rec, now);
                if !rec.movable {
                    // The engine still holds the job as movable (it was
                    // when it was chosen).
                    let _ = self.engine.set_movable(JobId(job.id), false);
                }
                self.put_job(job.id, rec);
                return None;
            }
            if planned.is_some() {
                let _ = self
                    .engine
                    .remove(JobId(job.id))
                    .map(|m| self.order_migrations(&m));
            }
        }
        let yielded = self.yield_targets(job.id, per_node, now);
        if !yielded.is_empty() {
            log = Some(format!(
                "job {} started where the engine held room for migrating job(s) {yielded:?}: their pins are dropped, Slurm's placement stands",
                job.id
            ));
        }
        let gpus: u32 = per_node.iter().map(|(_, g)| g).sum();
        if gpus == 0 {
            self.put_job(job.id, rec);
            return None;
        }
        let planned = self.planned.remove(&job.id);
        self.set_verdict(job.id, &mut rec, now);
        // In the model when its instances are all in one modelled pool; GPUs
        // elsewhere (pass-through pools, spread over pools) are foreign.
        let adopted = match shape
            .and_then(|s| instances_from_alloc(s, per_node).map(|n| (s, n)))
            .filter(|(_, nodes)| self.engine.modelled_pool_of_all(nodes).is_some())
        {
            Some((s, nodes)) => {
                let req = JobRequest {
                    id: JobId(job.id),
                    shape: s,
                    movable: rec.movable,
                };
                match self.engine.adopt(&req, &nodes) {
                    Ok(AdoptOutcome::Matched) => true,
                    Ok(AdoptOutcome::Diverged) => {
                        // The engine compares with its plan among all the
                        // pool's nodes; what counts is the plan narrow gave
                        // among Slurm's candidates. A `-w` job was never
                        // planned: nothing diverged.
                        let mut at = nodes.clone();
                        at.sort_unstable();
                        if !job.required_nodes && planned.as_ref() != Some(&at) {
                            self.counters.divergences += 1;
                        }
                        true
                    }
                    Err(e) => {
                        log = Some(self.note_error(&format!("adopt job {}", job.id), e));
                        false
                    }
                }
            }
            None => false,
        };
        if !adopted {
            match self.engine.adopt_foreign(JobId(job.id), per_node) {
                Ok(()) => rec.in_engine = true,
                Err(e) => log = Some(self.note_error(&format!("adopt_foreign job {}", job.id), e)),
            }
        }
        if adopted {
            rec.in_engine = true;
        }
        self.put_job(job.id, rec);
        log
    }

    /// Slurm started job `id` with `per_node` GPUs. Where the engine has
    /// less room on one of those nodes than Slurm gave the job, the room is
    /// held for migrations in flight (jobs recorded at their targets, not
    /// restarted there yet), and Slurm's placement stands: those
    /// migrations lose their pins until the job fits. A job already
    /// requeued plans anew and its cool-down starts
    /// ([`Controller::drop_pin`]); one whose requeue has not reached Slurm
    /// yet goes back to where Slurm runs it in the engine
    /// ([`Controller::back_to_slurm`]), and its requeue, which the plugin's
    /// thread is about to make, is then a plain end. Slurm places jobs
    /// the plugin does not narrow (no GPUs but `--exclusive`, outside the
    /// model, `-w`) on such nodes; before, the engine then refused to record
    /// the job (`adopt_foreign job N: ... would put 10 GPUs on a node of 8`,
    /// Slurm's testsuite run, issue #11 defect 4), did not count its GPUs
    /// until it ended, and the pinned job waited for room that was not
    /// coming. Returns the jobs whose pins were dropped.
    fn yield_targets(&mut self, id: u64, per_node: &[(NodeId, u32)], now: u64) -> Vec<u64> {
        let mut dropped = Vec::new();
        for &(n, g) in per_node {
            let short = |c: &Self| c.engine.free_on(n).is_some_and(|f| f < g);
            if self.migrating.is_empty() || !short(self) {
                continue;
            }
            let held: Vec<u64> = self
                .migrating
                .iter()
                .copied()
                .filter(|&m| m != id)
                .filter(|&m| {
                    self.engine
                        .job_nodes(JobId(m))
                        .is_some_and(|(_, mut at)| at.any(|x| x == n))
                })
                .collect();
            for m in held {
                if !short(self) {
                    break;
                }
                if self.jobs.contains_key(&m) {
                    // Not requeued yet: the plugin's thread will not
                    // requeue it ([`Controller::still_ordered`]), unless
                    // the requeue is under way; its cool-down starts
                    // either way, as for a move (issue #11: a requeue
                    // under way restarted it with no cool-down).
                    let _ = self.back_to_slurm(m, now);
                    self.note_migrated(m, now);
                } else {
                    self.drop_pin(m, now);
                }
                self.counters.targets_yielded += 1;
                dropped.push(m);
            }
        }
        dropped
    }

    /// Job `id`'s verdict ([`Controller::eligible`]) at `now`, into its
    /// record (a record not yet in `jobs`).
    fn set_verdict(&self, id: u64, rec: &mut JobRec, now: u64) {
        let verdict = self.eligible(id, rec, now);
        rec.movable = verdict.is_ok();
        rec.keep = verdict.err();
    }

    /// Records a running job, its expected end for the head's guard, and
    /// when its verdict can change next (its first instant, even one
    /// already past: then it is re-checked at the next tick).
    fn put_job(&mut self, id: u64, mut rec: JobRec) {
        let end = rec
            .time_limit_s
            .map_or(f64::INFINITY, |l| rec.start.saturating_add(l) as f64);
        self.ends.set(JobId(id), end);
        let at = self.next_change(id, &rec, None);
        // The entry of a record it replaces is moved, not left behind.
        rec.check_at = self.jobs.get(&id).and_then(|old| old.check_at);
        self.jobs.insert(id, rec);
        self.snap_changed.insert(id);
        self.recheck_at(id, at);
    }

    /// The first instant after `after` (`None`: the first) at which job
    /// `id`'s verdict ([`Controller::eligible`]) can change, by
    /// [`MigrationRule::check`]: the ends of its protection
    /// (`--min-runtime`), of the start-up grace
    /// (`select.min_run_before_migration`) and of its cool-down (whole
    /// seconds compared with whole seconds: the verdict changes at the
    /// instant itself), and the instant its time limit leaves too little
    /// run to pay for a move (floored from a product of floats: also a
    /// second later, against rounding). Between them the verdict holds, so
    /// the tick need not look at the job. A job that is not resumable has
    /// none: its verdict (`NotResumable`, the rule's first test) never
    /// changes while it runs (issue #11: half of the re-checks in the plugin
    /// bench, and most jobs on a real cluster, where resumable is opt-in).
    fn next_change(&self, id: u64, rec: &JobRec, after: Option<u64>) -> Option<u64> {
        if !rec.flags.resumable || Self::never_moves(&self.config, rec).is_some() {
            return None;
        }
        let cooldown_end = self
            .last_migrated
            .get(&id)
            .map(|t| t.saturating_add(self.config.migration_cooldown_s));
        let exact = [
            Some(rec.start.saturating_add(rec.flags.min_runtime_s)),
            Some(
                rec.start
                    .saturating_add(self.config.min_run_before_migration_s),
            ),
            cooldown_end,
        ];
        let limit = self.limit_change(id, rec).map(|t| [t, t.saturating_add(1)]);
        exact
            .into_iter()
            .flatten()
            .chain(limit.into_iter().flatten())
            .filter(|&t| after.is_none_or(|a| t > a))
            .min()
    }

    /// The instant job `id`'s time limit leaves too little run to pay for
    /// a move ([`Controller::next_change`]); `None` without a time limit.
    fn limit_change(&self, id: u64, rec: &JobRec) -> Option<u64> {
        let limit = rec.time_limit_s?;
        let rule = self.rule();
        let cost = rule.cost_of(&self.candidate(id, rec, rec.start));
        let t = (rec.start as f64) + (limit as f64) - (1.0 + rule.payback.max(1.0)) * cost;
        (t.is_finite() && t > 0.0).then(|| t.floor() as u64)
    }

    /// Moves running job `id`'s entry in `recheck` to `at`.
    fn recheck_at(&mut self, id: u64, at: Option<u64>) {
        let Some(rec) = self.jobs.get_mut(&id) else {
            return;
        };
        let old = std::mem::replace(&mut rec.check_at, at);
        if old == at {
            return;
        }
        if let Some(t) = old {
            self.recheck.remove(&(t, id));
        }
        if let Some(t) = at {
            self.recheck.insert((t, id));
        }
    }

    /// Starts `job`'s cool-down at `t` (its migration landed, or did not):
    /// a running job's verdict is re-checked at `t`, and then when the
    /// cool-down ends ([`Controller::next_change`]). A job not running
    /// gets its instants when it starts ([`Controller::put_job`]).
    fn note_migrated(&mut self, job: u64, t: u64) {
        if let Some(old) = self.last_migrated.insert(job, t) {
            self.cooldowns.remove(&(old, job));
        }
        self.cooldowns.insert((t, job));
        let at = self
            .jobs
            .get(&job)
            .map(|r| r.check_at.map_or(t, |c| c.min(t)));
        self.recheck_at(job, at);
    }

    /// Re-checks a running job's verdict now, and tells the engine when its
    /// movability changes.
    fn refresh(&mut self, id: u64, now: u64) {
        let Some(rec) = self.jobs.get(&id) else {
            return;
        };
        if !rec.in_engine || rec.shape.is_none() {
            return;
        }
        // Its next instant replaces the one due now.
        let next = self.next_change(id, rec, Some(now));
        let verdict = self.eligible(id, rec, now);
        let want = verdict.is_ok();
        // A job held still for tidying stays still for Compact; the engine
        // keeps its own verdict (the reach counts it) for when it is
        // released.
        let held = self.tidy_held.contains(&id);
        let freed = want && !rec.movable && !held;
        let moved_ok = want == rec.movable || self.engine.set_movable(JobId(id), want).is_ok();
        if let Some(r) = self.jobs.get_mut(&id) {
            if moved_ok {
                r.movable = want;
            }
            if r.keep != verdict.err() {
                self.snap_changed.insert(id);
            }
            r.keep = verdict.err();
            // The tick took out the entry due (one still ahead is moved).
            r.check_at = r.check_at.filter(|&t| t > now);
        }
        self.recheck_at(id, next);
        // A job that may move now (its protection, first minutes or
        // cool-down are over) can be what a waiting job needs moved: Compact
        // at this tick, not at the next arrival or departure, which on a
        // full cluster of long jobs may be minutes away (issue #10: a
        // protected 2-GPU job alone on a node kept 8-GPU jobs waiting 30 s
        // past its protection on the live demo window).
        if freed && moved_ok {
            self.compact_due = true;
        }
    }

    /// Slurm ended (or requeued) `job` at `now`.
    pub fn fini(&mut self, job: u64, now: u64) -> Option<String> {
        self.unkeep(job);
        self.planned.remove(&job);
        self.waiting.remove(job);
        self.holds.remove(&job);
        self.tidy_held.remove(&job);
        let rec = self.jobs.remove(&job);
        if rec.is_some() {
            self.snap_changed.insert(job);
        }
        self.ends.remove(JobId(job));
        if let Some(t) = rec.as_ref().and_then(|r| r.check_at) {
            self.recheck.remove(&(t, job));
        }
        if self.migrating.contains(&job) {
            return None; // requeued by us: the engine keeps it at its target
        }
        // Its cool-down stays until it ends by time (`tick`): a job
        // requeued for another reason (a preemption, a node failure) runs
        // again under the same id, and is not migrated again within the
        // cool-down (issue #11: the end dropped it, and the job was ordered
        // again 300 s after its migration). Bounded: an entry lives one
        // cool-down.
        if let Some(r) = rec.as_ref().filter(|r| r.shape.is_some()) {
            // A GPU job's run since its last start (a preemption's requeue
            // counts as the end of a run too).
            self.runs.record(now.saturating_sub(r.start) as f64);
        }
        if !rec.is_some_and(|r| r.in_engine) {
            return None;
        }
        match self.engine.remove(JobId(job)) {
            Ok(migrations) => {
                self.order_migrations(&migrations);
                self.compact_due = true;
                None
            }
            Err(e) => Some(self.note_error(&format!("remove job {job}"), e)),
        }
    }

    /// Slurm took `node` out of running job `job` (`scontrol update job=J
    /// NumNodes=` shrinking it, or a failed node under `--no-kill`:
    /// `excise_node_from_job`, then `select_p_job_resized`). The engine
    /// records the job on the nodes it keeps (`relayout` below).
    /// Before, it kept the job's GPUs on the node taken out until the job
    /// ended, and planned around room Slurm had freed. Returns a message
    /// for Slurm's log when the engine could not record the job.
    pub fn resized(
        &mut self,
        job: u64,
        node: NodeId,
        allowed: Option<&NodeSet>,
        now: u64,
    ) -> Option<String> {
        let rec = self.jobs.get(&job)?;
        if !rec.per_node.iter().any(|&(n, _)| n == node) {
            return None;
        }
        let shape = rec.shape;
        let per_node: Vec<(NodeId, u32)> = rec
            .per_node
            .iter()
            .copied()
            .filter(|&(n, _)| n != node)
            .collect();
        if per_node.is_empty() {
            return self.fini(job, now);
        }
        self.relayout(job, shape, per_node, allowed, now)
    }

    /// Records running job `job` anew on `per_node` (node, GPUs): in the
    /// model as instances of `shape`'s GPUs where they divide each node's
    /// count and the nodes are one modelled pool, else as foreign use;
    /// `allowed` as at its start. Its start, protection and cool-down stay;
    /// a migration ordered for it but not made yet is given up (its target
    /// was planned for its old layout; the plugin's thread then does not
    /// requeue it, [`Controller::still_ordered`]), and its cool-down
    /// starts, as for a move. Compact is due.
    fn relayout(
        &mut self,
        job: u64,
        shape: Option<JobShape>,
        per_node: Vec<(NodeId, u32)>,
        allowed: Option<&NodeSet>,
        now: u64,
    ) -> Option<String> {
        self.orders.retain(|o| o.job != job);
        if self.migrating.contains(&job) {
            let _ = self.back_to_slurm(job, now);
            self.note_migrated(job, now);
        }
        let mut rec = self.jobs.get(&job)?.clone();
        let gpus: u32 = per_node.iter().map(|&(_, g)| g).sum();
        rec.shape = shape
            .filter(|s| gpus.is_multiple_of(s.gpus))
            .map(|s| JobShape::new(gpus / s.gpus, s.gpus));
        rec.per_node = per_node.into();
        if rec.in_engine {
            let _ = self.engine.remove(JobId(job));
        }
        rec.in_engine = false;
        if gpus == 0 {
            // No GPUs: never in the engine ([`Controller::adopt_running`]).
            self.put_job(job, rec);
            return None;
        }
        let log = match self.record_as_slurm_runs(job, rec.shape, &rec.per_node, rec.movable) {
            Ok(in_model) => {
                rec.in_engine = true;
                if in_model && allowed.is_some() {
                    let _ = self.engine.set_allowed(JobId(job), allowed);
                }
                None
            }
            Err(why) => Some(self.note_error(&format!("job {job} resized"), why)),
        };
        self.set_verdict(job, &mut rec, now);
        if rec.in_engine {
            let _ = self.engine.set_movable(JobId(job), rec.movable);
        }
        self.put_job(job, rec);
        self.compact_due = true;
        log
    }

    fn order_migrations(&mut self, migrations: &[Migration]) {
        if !self.config.migrate {
            return;
        }
        let jobs: BTreeSet<u64> = migrations.iter().map(|m| m.job.0).collect();
        for j in jobs {
            let Some(running) = self.engine.job(JobId(j)) else {
                continue;
            };
            self.orders.retain(|o| o.job != j);
            if !self.needs_requeue(j) {
                continue;
            }
            self.orders.push_back(MigrationOrder {
                job: j,
                to_nodes: running.nodes,
            });
            self.counters.migrations_ordered += 1;
        }
    }

    /// Does the engine now have job `j` on other GPUs per node than Slurm
    /// gave it? Moves inside a node (a role change in the engine) leave
    /// Slurm's allocation as it is: nothing to requeue.
    fn needs_requeue(&self, j: u64) -> bool {
        needs_requeue(&self.engine, &self.jobs, j)
    }

    /// Runs Compact now (after a rebuild) and orders its migrations.
    /// Asks for Compact at the next [`Controller::tick`] with no migration
    /// in flight (Algorithm 1, lines 9 and 16, deferred by at most a tick).
    pub fn compact(&mut self) {
        self.compact_due = true;
    }

    fn in_flight(&self) -> bool {
        !self.pins.is_empty() || !self.orders.is_empty() || !self.migrating.is_empty()
    }

    /// Periodic work of the plugin thread: movability, stale pins, and the
    /// Compact due since the last arrival/departure once no migration is in
    /// flight.
    /// Returns the migration orders to carry out now, already marked in
    /// flight (pinned); the caller reports a failed requeue with
    /// [`Controller::requeue_failed`].
    pub fn tick(&mut self, now: u64) -> Vec<MigrationOrder> {
        let open = self.gate(now);
        if open && !self.gate_open {
            // A job waits again: Compact repairs the layout the closed
            // gate let drift (as the simulator does at its next event).
            self.compact_due = true;
        }
        self.gate_open = open;
        // Cool-downs past their end are dropped, in order of their start
        // (issue #11: not a pass over every cool-down at every tick), also
        // those of jobs that ended or were requeued (`fini` keeps them). (A
        // job whose migration did not land keeps its cool-down while it
        // waits to restart elsewhere: `drop_pin`.)
        let cooldown = self.config.migration_cooldown_s;
        while let Some(&(t, j)) = self.cooldowns.first() {
            if now.saturating_sub(t) < cooldown {
                break;
            }
            self.cooldowns.pop_first();
            if self.last_migrated.get(&j) == Some(&t) {
                self.last_migrated.remove(&j);
            }
        }
        let stale: Vec<u64> = self
            .pins
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.since) > PIN_TIMEOUT_S)
            .map(|(j, _)| *j)
            .collect();
        for j in stale {
            self.drop_pin(j, now);
        }
        self.expire_holds(now);
        let gone: Vec<u64> = self
            .kept
            .iter()
            .filter(|(_, k)| now.saturating_sub(k.seen) > WAITING_TTL_S)
            .map(|(j, _)| *j)
            .collect();
        for j in gone {
            self.unkeep(j);
        }
        // Only the jobs whose verdict can have changed since the last tick
        // (issue #11: a tick costs what changed, not the number of jobs).
        self.recheck_due(now, usize::MAX);
        // While the gate is closed no job may move: Compact waits until it
        // opens (it is due then anyway).
        let mut idle = true;
        if self.compact_due && open && !self.in_flight() {
            self.compact_due = false;
            let trials = self.counters.gate_trials;
            let m = self.compact_if_it_starts_a_job(now);
            self.order_migrations(&m);
            idle = m.is_empty() && self.counters.gate_trials == trials;
        }
        if idle {
            // A tick that moved nobody and made no trial has time for the
            // fit over time of heads of other shapes (`Ends::catch_up`).
            self.ends.catch_up(&self.engine, CATCH_UP_PER_TICK);
        }
        let orders: Vec<MigrationOrder> = self.orders.drain(..).collect();
        for o in &orders {
            self.mark_migrating(o, now);
        }
        orders
    }

    /// The first part of [`Controller::tick`], in turns the plugin thread
    /// takes the controller's lock for one at a time ([`RECHECKS_PER_TURN`]
    /// verdicts each), so that slurmctld's callbacks are not kept waiting
    /// while many verdicts come due at once: at most `limit` of the
    /// verdicts due at `now` are re-checked, in order of their instants.
    /// Returns how many: fewer than `limit`, none is due any more;
    /// [`Controller::tick`] re-checks any left. The tick decides as it
    /// would alone: what it does before its re-checks (the gate, pins and
    /// holds past their limits, the cool-downs ended, which keep no job
    /// still once over: the rule compares the time since the migration)
    /// changes no verdict due, and a verdict a pin's end brings due is
    /// re-checked by the tick (issue #11: after a restart every adopted
    /// job's verdict is due at the first tick; in the plugin bench about
    /// 9,000 at 10,000 nodes took 5.8-8.5 ms under one hold).
    pub fn recheck_due(&mut self, now: u64, limit: usize) -> usize {
        for done in 0..limit {
            match self.recheck.first() {
                Some(&(t, id)) if t <= now => {
                    self.recheck.pop_first();
                    self.refresh(id, now);
                }
                _ => return done,
            }
        }
        limit
    }

    /// The gate `select.move_when` at `now` ([`MoveWhen::allows`], the
    /// simulator's `--move-when`): may any job move? Waiting jobs are the
    /// pending GPU jobs Slurm offered to `narrow` within [`WAITING_TTL_S`];
    /// free GPUs are those of the modelled pools. Nothing here blocks.
    ///
    /// [`MoveWhen::allows`]: compass_core::placement::worth::MoveWhen::allows
    fn gate(&mut self, now: u64) -> bool {
        self.waiting.expire(now, WAITING_TTL_S);
        let free: u64 = (0..self.engine.pools().count())
            .filter_map(|p| Some(self.engine.engine(p)?.occupancy().free_gpus()))
            .sum();
        self.config
            .move_when
            .allows(self.waiting.least_gpus(), free)
    }

    /// Slurm's priority of a pending job `narrow` just saw (the plugin
    /// calls it after [`Controller::narrow`]): the waiting job of highest
    /// priority is the head the Compact guard keeps on time.
    pub fn note_priority(&mut self, job: u64, priority: u32) {
        self.waiting.set_priority(job, priority);
    }

    /// The waiting GPU job Slurm starts first: highest priority, then the
    /// lowest job id (Slurm's order of equal priorities by submission).
    fn head(&self) -> Option<(u64, &Waiting)> {
        self.waiting.head()
    }

    /// Compact, unless its moves would delay the waiting head (issue #11;
    /// the simulator's departure guard, `docs/simulator.md`, "Queue
    /// policies"). Backfill never delays the head: Slurm reserves nodes for
    /// it assuming the running jobs end where they are at their time limits,
    /// and a migration (a requeue pinned to new nodes) both takes GPUs and
    /// restarts the job with a new end. So the Compact is a trial that can
    /// be undone ([`hold_for_head`]); jobs whose moves would make the head's
    /// reservation later than with no move are held still for this Compact,
    /// and if no hold keeps the head on time, nothing moves. Its cost is
    /// what the Compact touches, plus, only when its moves lower the head's
    /// fit at some instant, reading the head's reservation from its fit over
    /// time ([`Ends`], the rises up to it), never a copy of the engine.
    fn compact_sparing_head(&mut self, now: u64) -> Vec<Migration> {
        self.compact_vetoed(now, None, None).0.unwrap_or_default()
    }

    /// [`Controller::compact_sparing_head`], under the `pays` gate's rule
    /// when `tidy` is given: then Compact moves no job to another node
    /// whose tidying move does not pay ([`TidyJudge::pays`], asked before
    /// each such move, [`Veto`]); it holds such a job still for tidying in
    /// the engine and goes on without it (issue #11: one question where a
    /// whole Compact used to be undone and tried again). Returns the
    /// migrations, `None` when [`TIDY_TRIALS`] jobs were refused or, with
    /// `gain` given and a head waiting, when the moves of the head guard's
    /// trial gain nothing ([`HeadTrial::gain`]; then nothing moves: the
    /// caller undoes the trial it opened, [`PoolSet::begin_trial`]), and
    /// the refused jobs.
    fn compact_vetoed(
        &mut self,
        now: u64,
        tidy: Option<MigrationRule>,
        gain: Option<&dyn Fn(&PoolSet) -> bool>,
    ) -> (Option<Vec<Migration>>, Vec<JobId>) {
        let judge = tidy.map(|rule| TidyJudge {
            jobs: &self.jobs,
            last_migrated: &self.last_migrated,
            runs: &self.runs,
            rule,
            now,
        });
        let pays = |j: JobId| judge.as_ref().is_none_or(|t| t.pays(j.0));
        let may_move = judge
            .is_some()
            .then_some((&pays as &dyn Fn(JobId) -> bool, TIDY_TRIALS));
        let head = self
            .head()
            .filter(|_| self.config.migrate)
            .map(|(id, w)| (id, w.shape, w.gpu_type.clone()));
        let Some((head, shape, gpu_type)) = head else {
            let mut veto = match may_move {
                Some((f, limit)) => Veto::new(f, limit),
                None => Veto::none(),
            };
            let m = self.engine.compact_vetoed(&mut veto);
            return ((!veto.exhausted()).then_some(m), veto.refused().to_vec());
        };
        let jobs = &self.jobs;
        let cost = self.config.migration_cost_s;
        let end_if_moved = |j: JobId| -> f64 {
            jobs.get(&j.0)
                .and_then(|r| {
                    let c = r.flags.migration_cost_s.unwrap_or(cost);
                    r.time_limit_s
                        .map(|l| now.saturating_add(c).saturating_add(l) as f64)
                })
                .unwrap_or(f64::INFINITY)
        };
        let trial = HeadTrial {
            shape,
            gpu_type: gpu_type.as_deref(),
            now: now as f64,
            end_if_moved: &end_if_moved,
            max_trials: HEAD_TRIALS,
            may_move,
            gain,
        };
        let done = hold_for_head(&mut self.engine, &trial, &mut self.ends);
        match done.verdict {
            HeadVerdict::Free => {}
            HeadVerdict::Hold(held) => {
                self.counters.compacts_held_for_head += 1;
                self.head_hold = Some(HeadHold {
                    head,
                    held: held.iter().map(|j| j.0).collect(),
                });
            }
            HeadVerdict::Skip => {
                self.counters.compacts_held_for_head += 1;
                self.head_hold = Some(HeadHold { head, held: vec![] });
            }
            HeadVerdict::Refused | HeadVerdict::NoGain => return (None, done.refused),
        }
        (Some(done.migrations), done.refused)
    }

    /// Compact ([`Controller::compact_sparing_head`]) under the gate
    /// `select.move_when`: with `"starts"` ([`MoveWhen::Starts`]) it is
    /// tried, and its requeues are ordered only when they let a waiting job
    /// start ([`Blocked::start_after`]: some waiting job has room after
    /// the moves that it has not before); else the gate is closed (counted
    /// in `Counters::compacts_no_gain`) and the trial is undone, so nothing
    /// moves, or, with `"pays"` ([`MoveWhen::Pays`]), only the moves that
    /// pay for themselves are made: the trial's own when each pays
    /// ([`Controller::keep_paid_trial`]), else a tidying Compact's at the
    /// next tick ([`Controller::compact_tidying`]). A
    /// Compact whose moves stay inside nodes costs no requeue and is always
    /// kept. Under `"pays"`, no trial is made (the tidying Compact at
    /// once) when no waiting job could start whatever moves
    /// ([`Blocked::may_start_after_moves`]: too few free GPUs, or too few
    /// nodes that moves of the jobs free to move could clear), or when a
    /// trial that started nobody in the last [`TRIAL_MEMORY_S`] seconds
    /// covers every chance ([`TrialMemory`]: the same pool and width, a
    /// job no wider, no more fit or room; counted in
    /// `Counters::gate_trials_remembered`), or when the last trial started
    /// nobody and left its tidying to this Compact
    /// ([`Controller::tidy_next_tick`]). A trial that moves no job to
    /// another node started nobody either and is remembered so. Of the
    /// jobs held for tidying, a trial releases at most [`TRIAL_RELEASES`],
    /// the next in rotation by job id ([`release_turn`]); the others stay
    /// held through it, and after it when it is kept (issue #11: a trial
    /// that released every held job cost in proportion to them). Under
    /// `"pays"` the head's guard stops at the first trial Compact whose
    /// moves start nobody ([`HeadTrial::gain`]): they would be undone
    /// anyway, so the holds that would keep the head on time are not
    /// looked for (issue #11: up to eight Compacts per trial).
    ///
    /// [`TRIAL_MEMORY_S`]: compass_core::placement::head::TRIAL_MEMORY_S
    /// [`MoveWhen::Starts`]: compass_core::placement::worth::MoveWhen::Starts
    fn compact_if_it_starts_a_job(&mut self, now: u64) -> Vec<Migration> {
        if !self.config.move_when.tries_first() || !self.config.migrate {
            return self.compact_sparing_head(now);
        }
        let pays = self.config.move_when == MoveWhen::Pays;
        if pays {
            self.recheck_tidy_held(now);
        }
        if std::mem::take(&mut self.tidy_waits) && pays {
            // The last trial started nobody and left its tidying to this
            // tick: tidy at once, the jobs held for tidying still held,
            // without looking at the waiting jobs' chances again (whatever
            // they are, this tick makes no trial).
            return self.compact_tidying(now);
        }
        // Copied out of `self.waiting` (the trial below needs `&mut self`),
        // one per shape and GPU type, as `Blocked::before` keeps them, so
        // that a deep queue costs no copy of each job's GPU type.
        let waiting: Vec<(JobShape, Option<String>)> = self
            .waiting
            .distinct()
            .into_iter()
            .map(|w| (w.shape, w.gpu_type.map(str::to_string)))
            .collect();
        let blocked = Blocked::before(
            &self.engine,
            waiting.iter().map(|(shape, gpu_type)| WaitingJob {
                shape: *shape,
                gpu_type: gpu_type.as_deref(),
            }),
        );
        // Could moves start anyone, with the jobs held for tidying that the
        // trial below releases counted movable (the engine's reach counts
        // them so)? And has no trial that started nobody lately had the
        // same chances (`trial_memory`)?
        let chances = blocked.chances(&self.engine);
        let may_gain = !chances.is_empty();
        let worth_a_trial = may_gain && self.trial_memory.any_new(&chances, now);
        if pays && !worth_a_trial {
            // No move can start anyone, or the same chances failed lately:
            // tidy at once, the jobs held for tidying still held.
            self.counters.gate_trials_remembered += u64::from(may_gain);
            return self.compact_tidying(now);
        }
        self.counters.gate_trials += 1;
        // Every job its own verdict allows may move in the trial, but of
        // the jobs held for tidying only a bounded turn (`release_turn`):
        // the others stay held, so the trial costs what it releases, not
        // every job held (issue #11). The release is a trial of its own, so
        // that holding them again below is its undo: it puts back the index
        // entries the release changed rather than computing them again.
        let released = release_turn(&self.tidy_held, self.release_cursor, TRIAL_RELEASES);
        self.release_cursor = released.last().copied().or(self.release_cursor);
        for id in &released {
            self.tidy_held.remove(id);
        }
        let release_trial = !released.is_empty();
        if release_trial {
            self.engine.begin_trial();
            self.release_movable(&released);
        }
        self.engine.begin_trial();
        // Under `pays` the head's guard stops at moves that start nobody
        // (`HeadTrial::gain`; `None` back): they are not kept anyway.
        let gain = |pools: &PoolSet| blocked.start_after(pools);
        let gain = pays.then_some(&gain as &dyn Fn(&PoolSet) -> bool);
        let kept = self.compact_vetoed(now, None, gain).0;
        let requeues = kept
            .as_ref()
            .is_some_and(|m| m.iter().any(|x| self.needs_requeue(x.job.0)));
        let starts = requeues && may_gain && blocked.start_after(&self.engine);
        // A trial that moves jobs only inside nodes starts nobody either
        // (each node's free GPUs stay as they were): remembered as failed.
        if starts {
            self.trial_memory.clear();
        } else if worth_a_trial {
            self.trial_memory.failed(&chances, now);
        }
        let m = match kept {
            Some(m) if !requeues || starts => {
                self.engine.keep_trial();
                if release_trial {
                    self.engine.keep_trial();
                }
                return m;
            }
            Some(m) => Some(m),
            None => {
                // Nothing moved in the trial: it is closed here, and the
                // tidying Compact below makes its own.
                self.engine.undo_trial();
                None
            }
        };
        if !pays {
            self.counters.compacts_no_gain += 1;
            if m.is_some() {
                self.engine.undo_trial();
            }
            if release_trial {
                self.engine.keep_trial();
            }
            self.head_hold = None;
            return Vec::new();
        }
        if !release_trial {
            return self.keep_paid_trial(now, m);
        }
        // The jobs held for tidying held again (the release's undo, which
        // marks their nodes for the slotted pass as a hold does), and the
        // tidying left to the next tick.
        if m.is_some() {
            self.engine.undo_trial();
        }
        self.engine.undo_trial();
        self.head_hold = None;
        self.tidy_held.extend(released);
        self.tidy_next_tick();
        Vec::new()
    }

    /// Under `"pays"`, after a trial that started nobody and released no
    /// held job (`first`: its moves, still open; `None`: it moved no job):
    /// when every job it moves to another node pays for its tidying move
    /// ([`TidyJudge::pays`]), its moves are kept as a tidying Compact's;
    /// else it is undone, the jobs that do not pay are held still for
    /// tidying, and the tidying Compact is left to the next tick
    /// ([`Controller::tidy_next_tick`]).
    fn keep_paid_trial(&mut self, now: u64, first: Option<Vec<Migration>>) -> Vec<Migration> {
        if let Some(m) = first {
            let unpaid = self.judge(self.rule(), now).unpaid(&self.engine, &m);
            if unpaid.is_empty() {
                let requeues = m.iter().any(|x| self.needs_requeue(x.job.0));
                self.engine.keep_trial();
                self.counters.compacts_tidying += u64::from(requeues);
                self.counters.compacts_no_gain += u64::from(requeues);
                return m;
            }
            self.engine.undo_trial();
            self.head_hold = None;
            self.hold_for_tidying(&unpaid);
            self.counters.compacts_no_gain += 1;
        }
        self.tidy_next_tick();
        Vec::new()
    }

    /// A trial that started nobody leaves the tidying Compact that follows
    /// it to the next tick, which makes no trial: one Compact per tick,
    /// each its own hold of the controller's lock (issue #11: a trial and a
    /// tidying Compact in one tick were the slowest ticks, 1.5-2 times
    /// either). The tidying waits a tick, a second; the simulator makes
    /// both at the same event (`Sim::hold_unless_moves_start`).
    fn tidy_next_tick(&mut self) {
        self.compact_due = true;
        self.tidy_waits = true;
        self.counters.tidies_deferred += 1;
    }

    /// Holds `jobs` still for tidying (`tidy_held`), in the engine's
    /// Compact too ([`PoolSet::set_tidy_hold`]).
    fn hold_for_tidying(&mut self, jobs: &[JobId]) {
        self.engine.set_tidy_hold(jobs, true);
        self.tidy_held.extend(jobs.iter().map(|j| j.0));
    }

    /// Lets the engine move `ids` again as far as their own verdicts allow
    /// (after a hold for tidying).
    fn release_movable(&mut self, ids: &[u64]) {
        let free: Vec<JobId> = ids.iter().map(|id| JobId(*id)).collect();
        self.engine.set_tidy_hold(&free, false);
    }

    /// Does a tidying move of running job `id` at `now` pay for itself
    /// ([`TidyJudge::pays`])?
    fn pays_for_tidying(&self, rule: &MigrationRule, id: u64, now: u64) -> bool {
        self.judge(*rule, now).pays(id)
    }

    fn judge(&self, rule: MigrationRule, now: u64) -> TidyJudge<'_> {
        TidyJudge {
            jobs: &self.jobs,
            last_migrated: &self.last_migrated,
            runs: &self.runs,
            rule,
            now,
        }
    }

    /// The jobs held still for tidying whose tidying move pays now are
    /// released ([`Controller::compact_tidying`]): at most
    /// [`TIDY_RECHECKS`] of them are re-judged, in rotation by job id
    /// ([`tidy_turn`]), so the cost is bounded whatever the jobs held; no
    /// Compact.
    ///
    /// [`TIDY_RECHECKS`]: compass_core::placement::worth::TIDY_RECHECKS
    fn recheck_tidy_held(&mut self, now: u64) {
        if self.tidy_held.is_empty() {
            return;
        }
        let rule = self.rule();
        let turn = tidy_turn(&self.tidy_held, self.tidy_cursor);
        self.tidy_cursor = turn.last().copied();
        let pay: Vec<u64> = turn
            .into_iter()
            .filter(|&id| self.pays_for_tidying(&rule, id, now))
            .collect();
        for id in &pay {
            self.tidy_held.remove(id);
        }
        self.release_movable(&pay);
    }

    /// Under `select.move_when = "pays"` ([`MoveWhen::Pays`]), a Compact
    /// that lets no waiting job start moves to another node only jobs whose
    /// tidying move pays for itself ([`TidyJudge::pays`]). Compact asks
    /// before each move to another node ([`Controller::compact_vetoed`]):
    /// a job whose move does not pay is held still and Compact goes on
    /// without it, still sparing the head; when [`TIDY_TRIALS`] jobs were
    /// refused, nothing moves. The held jobs stay held for the next
    /// Compacts (`tidy_held`), until one could start a waiting job
    /// ([`Blocked::may_start_after_moves`]), their move pays
    /// ([`Controller::recheck_tidy_held`]) or they end, so the Compacts
    /// that follow do not ask again. Its cost is what the Compact touches:
    /// only the jobs it would move are judged (issue #11; before, every
    /// movable job was, O(jobs) per tick, and later each refusal undid the
    /// Compact and ran it again). The simulator's twin is
    /// `Sim::hold_unless_moves_start`, which finds the same jobs by trying
    /// the event again with the refused jobs held (docs/simulator.md). A
    /// trial already made is kept or undone by
    /// [`Controller::keep_paid_trial`].
    fn compact_tidying(&mut self, now: u64) -> Vec<Migration> {
        let rule = self.rule();
        self.engine.begin_trial();
        let (trial, refused) = self.compact_vetoed(now, Some(rule), None);
        // Did it requeue anyone, or would it have (it met a job whose move
        // does not pay)?
        let mut gated = !refused.is_empty();
        let kept = match trial {
            Some(m) => {
                let requeues = m.iter().any(|x| self.needs_requeue(x.job.0));
                gated |= requeues;
                self.engine.keep_trial();
                self.counters.compacts_tidying += u64::from(requeues);
                m
            }
            None => {
                self.engine.undo_trial();
                self.head_hold = None;
                Vec::new()
            }
        };
        // Held in the engine already, unless the undo lifted them.
        self.hold_for_tidying(&refused);
        self.counters.compacts_no_gain += u64::from(gated);
        kept
    }

    /// The last Compact the head's guard restrained since the last call
    /// (for Slurm's log).
    pub fn take_head_hold(&mut self) -> Option<HeadHold> {
        self.head_hold.take()
    }

    /// Marks an order in flight as [`Controller::tick`] hands it out, before
    /// the requeue RPC (the requeue's `job_fini` must find the job marked, and
    /// no other job may widen onto GPUs the engine counts on): pin the job to
    /// its target.
    fn mark_migrating(&mut self, order: &MigrationOrder, now: u64) {
        self.migrating.insert(order.job);
        self.pins.insert(
            order.job,
            Pin {
                nodes: order.to_nodes.clone(),
                since: now,
            },
        );
    }

    /// The requeue failed (the job ended meanwhile, or refused): the engine
    /// goes back to what Slurm really runs.
    pub fn requeue_failed(&mut self, order: &MigrationOrder, now: u64) -> Option<String> {
        self.counters.migrations_failed += 1;
        self.back_to_slurm(order.job, now)
    }

    /// Is `job`'s migration still to be carried out? The plugin's thread
    /// asks before it requeues the job: a migration given up since the
    /// order was handed out (its target went to a job Slurm started
    /// there) is not requeued for nothing.
    pub fn still_ordered(&self, job: u64) -> bool {
        self.migrating.contains(&job) && self.jobs.contains_key(&job)
    }

    /// Records running job `job` in the engine on `per_node` (node, GPUs),
    /// as Slurm runs it: in the model as instances of `shape` where they
    /// fit its layout and the nodes are one modelled pool (`Ok(true)`),
    /// else as foreign use (`Ok(false)`); why neither took it otherwise.
    /// The job must not be in the engine.
    fn record_as_slurm_runs(
        &mut self,
        job: u64,
        shape: Option<JobShape>,
        per_node: &[(NodeId, u32)],
        movable: bool,
    ) -> Result<bool, String> {
        let mut why = None;
        if let Some(shape) = shape {
            if let Some(nodes) = instances_from_alloc(shape, per_node)
                .filter(|n| self.engine.modelled_pool_of_all(n).is_some())
            {
                let req = JobRequest {
                    id: JobId(job),
                    shape,
                    movable,
                };
                match self.engine.adopt(&req, &nodes) {
                    Ok(_) => return Ok(true),
                    Err(e) => why = Some(e.to_string()),
                }
            }
        }
        match self.engine.adopt_foreign(JobId(job), per_node) {
            Ok(()) => Ok(false),
            Err(e) => Err(why.map_or(e.to_string(), |w| format!("{w}; {e}"))),
        }
    }

    /// A migration given up before its requeue reached Slurm (the requeue
    /// failed, or Slurm gave its target to another job,
    /// [`Controller::yield_targets`]): no pin, and the engine goes back to
    /// what Slurm really runs. Where other migrations in flight hold the
    /// room the job still uses (a move into the GPUs it was to leave), they
    /// give it back first, as to a job Slurm started there (issue #11: the
    /// engine refused the job and forgot it, silently, until it ended).
    /// Returns a message for Slurm's log if the job could not be recorded.
    fn back_to_slurm(&mut self, job: u64, now: u64) -> Option<String> {
        self.migrating.remove(&job);
        self.pins.remove(&job);
        let Some(rec) = self.jobs.get(&job).cloned() else {
            let _ = self.engine.remove(JobId(job));
            return None;
        };
        let _ = self.engine.remove(JobId(job));
        self.yield_targets(job, &rec.per_node, now);
        match self.record_as_slurm_runs(job, rec.shape, &rec.per_node, false) {
            Ok(_) => None,
            Err(e) => {
                if let Some(r) = self.jobs.get_mut(&job) {
                    r.in_engine = false;
                }
                Some(self.note_error(&format!("job {job} back where Slurm runs it"), e))
            }
        }
    }

    /// May `job_test` retry a job on all of Slurm's candidates after cons_tres
    /// refused the narrowed nodes? Not while migrations are in flight: the
    /// engine's plan then counts on GPUs that requeues are about to free (or
    /// on a migrating job's pinned target), and widening would take them.
    pub fn may_widen(&self, job: u64) -> bool {
        self.pins.is_empty() && self.orders.is_empty() && !self.migrating.contains(&job)
    }

    /// `job_test` could not start `job` on its narrowed nodes and
    /// [`Controller::may_widen`] said no: wait for the migrations in flight,
    /// but for at most [`HOLD_LIMIT_S`] from the first refusal (checked here
    /// and at each [`Controller::tick`]). Then the hold is released: Slurm
    /// places the job (cons_tres) among its candidates less the targets of
    /// the other migrations in flight, in `job_test` and in
    /// [`Controller::narrow`] (backfill too); a migrating job whose pinned
    /// target is still not free loses its pin (the engine drops it from the
    /// target, its cool-down starts as for a move). A target can stay busy
    /// for reasons the engine does not model (CPUs or memory taken on the
    /// node, a chain of moves not landed, a job started there by hand), and
    /// a held job first in the queue holds the queue: nothing waits
    /// unboundedly.
    pub fn hold(&mut self, job: u64, now: u64) -> Hold {
        let h = self.holds.entry(job).or_insert(HoldRec {
            since: now,
            last: now,
            released: None,
        });
        if h.released.is_none() && now.saturating_sub(h.last) > HOLD_LIMIT_S {
            h.since = now;
        }
        h.last = now;
        if h.released.is_none() && now.saturating_sub(h.since) >= HOLD_LIMIT_S {
            self.release(job, now);
        }
        match self.released_keep_off(job) {
            Some(keep_off) => Hold::Release { keep_off },
            None => Hold::Wait,
        }
    }

    /// Releases every hold past [`HOLD_LIMIT_S`] (from [`Controller::tick`]:
    /// a held job may not be offered to a RUN_NOW test again, backfill only
    /// plans it on its narrowed nodes), and forgets holds that ended.
    fn expire_holds(&mut self, now: u64) {
        let due: Vec<u64> = self
            .holds
            .iter()
            .filter(|(_, h)| h.released.is_none() && now.saturating_sub(h.since) >= HOLD_LIMIT_S)
            .map(|(j, _)| *j)
            .collect();
        for j in due {
            self.release(j, now);
        }
        self.holds.retain(|_, h| match h.released {
            None => now.saturating_sub(h.last) <= HOLD_LIMIT_S,
            Some(t) => now.saturating_sub(t) <= WAITING_TTL_S,
        });
    }

    fn release(&mut self, job: u64, now: u64) {
        let Some(h) = self.holds.get_mut(&job) else {
            return;
        };
        h.released = Some(now);
        let held_s = now.saturating_sub(h.since);
        let pin_dropped = self.drop_pin(job, now);
        self.releases.push(Released {
            job,
            held_s,
            pin_dropped,
        });
    }

    /// For a job whose hold was released: the nodes it must stay off (the
    /// targets of the migrations in flight); `None` when it is not released.
    fn released_keep_off(&self, job: u64) -> Option<Vec<NodeId>> {
        self.holds.get(&job)?.released?;
        let keep_off: BTreeSet<NodeId> = self
            .pins
            .iter()
            .filter(|(j, _)| **j != job)
            .flat_map(|(_, p)| p.nodes.iter().copied())
            .collect();
        Some(keep_off.into_iter().collect())
    }

    /// Whether `job`'s hold was released (Slurm places it).
    pub fn released(&self, job: u64) -> bool {
        self.holds.get(&job).is_some_and(|h| h.released.is_some())
    }

    /// How many nodes cons_tres must use for `job`'s plan, when narrowing
    /// to the planned nodes is not enough to say it: `Some(k)` for a job
    /// whose instances may share a node (`--ntasks=w --gpus-per-task=g`,
    /// [`Mapping::Model`] with `distinct_nodes` false, paper Section 3.2's
    /// `w x g`) planned or pinned on `k > 1` nodes. Given only the `k`
    /// nodes, cons_tres packs such a job on as few of them as it can (a
    /// node with room for two instances takes both), so a migration moved
    /// toward its plan landed back on the node it left and Compact moved it
    /// again (issue #11, defect 2 of Slurm's testsuite run): the select
    /// plugin passes `k` as cons_tres's node count, and with exactly `k`
    /// candidates each gets an instance. `None` for every other job (`-N n`
    /// forms are spread by Slurm itself; a plan of one node is the
    /// narrowing).
    pub fn plan_spread(&self, job: &JobInfo) -> Option<u32> {
        let Mapping::Model {
            shape,
            distinct_nodes: false,
        } = job.mapping
        else {
            return None;
        };
        if shape.instances < 2 {
            return None;
        }
        // The plan `narrow` gave last: a hold released drops it.
        let nodes = match self.pins.get(&job.id) {
            Some(pin) => &pin.nodes,
            None => self.planned.get(&job.id)?,
        };
        let k = nodes.iter().collect::<BTreeSet<_>>().len() as u32;
        (k > 1).then_some(k)
    }

    /// Holds released since the last call, for the plugin's log.
    pub fn take_releases(&mut self) -> Vec<Released> {
        std::mem::take(&mut self.releases)
    }

    /// Drops `job`'s pin; a migration in flight that did not land leaves the
    /// engine (the job plans normally again) and starts its cool-down, as
    /// a move does. Returns whether there was a pin.
    fn drop_pin(&mut self, job: u64, now: u64) -> bool {
        let pinned = self.pins.remove(&job).is_some();
        if self.migrating.remove(&job) {
            let _ = self.engine.remove(JobId(job));
            self.note_migrated(job, now);
        }
        pinned
    }

    /// The engine's structural invariants (paper Proposition 1 and the GPU
    /// accounting); a message for Slurm's log when one is violated. Each
    /// call checks one part of about [`SELF_CHECK_NODES`] nodes, in
    /// rotation, so every node is checked within `ceil(nodes /
    /// SELF_CHECK_NODES)` calls (on a cluster of at most that many nodes,
    /// every call checks them all).
    pub fn self_check(&mut self) -> Option<String> {
        let parts = (self.node_gpus.len() as u32)
            .div_ceil(SELF_CHECK_NODES)
            .max(1);
        let part = self.check_part % parts;
        self.check_part = (part + 1) % parts;
        match self.engine.check_invariants_part(part, parts) {
            Ok(()) => None,
            Err(why) => Some(self.note_error("engine invariant violated", why)),
        }
    }

    /// Marks nodes usable or not for new instances and Compact targets
    /// (Slurm: down, drained, failing, not responding), by name. Returns the
    /// names whose state changed.
    pub fn set_usable_nodes(&mut self, usable: &[(String, bool)]) -> Vec<String> {
        let mut changed = Vec::new();
        for (name, ok) in usable {
            let Some(n) = self.node_id(name) else {
                continue;
            };
            if self.unusable.contains(&n) != *ok {
                continue;
            }
            if *ok {
                self.unusable.remove(&n);
            } else {
                self.unusable.insert(n);
            }
            self.sync_usable(n);
            changed.push(name.clone());
        }
        changed
    }

    /// Tells the engine whether node `n` takes new instances and Compact's
    /// moves: not while Slurm reports it unusable, nor while it is kept for
    /// a waiting job ([`Controller::keep_for_waiting`]). Its jobs may still
    /// move away.
    fn sync_usable(&mut self, n: NodeId) {
        let usable = !self.unusable.contains(&n) && !self.kept_nodes.contains_key(&n);
        // Only a node id past the node table fails; `n` comes from it.
        let _ = self.engine.set_node_usable(n, usable);
    }

    /// A pending job the engine does not place (no GPUs, out of the model,
    /// or a GPU job with `-w`) waits for `nodes` (GPU nodes of the pools
    /// count, others are ignored): the nodes it names with `-w` (the plugin
    /// gives them at each `select_p_job_test` that does not start it), or,
    /// for a `--exclusive` job that may use only part of the GPU nodes
    /// (`--constraint`, `--exclude`, its partition), the nodes Slurm plans
    /// to start it on (backfill's "when and where" test). While it waits
    /// they take no Compact move and no new instance (their own jobs may
    /// still move away): a migration is a requeue that restarts first in
    /// the queue, so a job moved onto such a node would take it ahead of
    /// the waiting job, as no job of lower priority can in Slurm (issue
    /// #11: Slurm's test1.84, `srun --exclusive -w n3`, waited 120 s while
    /// Compact moved five jobs onto n3; test17.12, `--exclusive -C feat1`,
    /// 135 s while three moved onto its node). A `--exclusive` job that may
    /// use any GPU node is not kept for: a move that fills one node empties
    /// or frees another it may take (the lab test
    /// `a_waiting_exclusive_job_takes_the_node_a_migration_empties`). Kept
    /// until the job starts or ends, or goes [`WAITING_TTL_S`] without a
    /// test ([`Controller::still_waiting`]); at most [`KEPT_NODES_PER_JOB`]
    /// nodes each, for at most [`KEPT_JOBS`] jobs. Returns a line for
    /// Slurm's log when the nodes kept for the job are set or change.
    pub fn keep_for_waiting(
        &mut self,
        job: u64,
        nodes: &[NodeId],
        how: KeepNodes,
        now: u64,
    ) -> Option<KeptLine> {
        if self.jobs.contains_key(&job) {
            return None;
        }
        let before = match (how, self.kept.get(&job)) {
            (KeepNodes::Planned, Some(k)) => &k.nodes[..],
            _ => &[],
        };
        let mut nodes: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|&n| self.node_gpus.get(n as usize).is_some_and(|&g| g > 0))
            .chain(before.iter().copied())
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.truncate(KEPT_NODES_PER_JOB);
        let old = self.kept.remove(&job);
        let first = old.is_none();
        match &old {
            Some(k) if k.nodes == nodes => {
                self.kept.insert(job, Kept { nodes, seen: now });
                return None;
            }
            Some(_) => {}
            None if nodes.is_empty() => return None,
            None if self.kept.len() >= KEPT_JOBS => {
                self.counters.keeps_over_limit += 1;
                return None;
            }
            None => self.counters.kept_for_waiting += 1,
        }
        // The new nodes first: a node kept before and now stays unusable
        // throughout.
        for &n in &nodes {
            let c = self.kept_nodes.entry(n).or_insert(0);
            *c += 1;
            if *c == 1 {
                self.sync_usable(n);
            }
        }
        if let Some(k) = old {
            self.release_kept(k.nodes);
        }
        if nodes.is_empty() {
            return None;
        }
        let line = format!(
            "job {job} waits for node(s) {}: no migration onto them and no new GPU job placed there while it waits",
            self.node_list(&nodes)
        );
        self.kept.insert(job, Kept { nodes, seen: now });
        Some(KeptLine { first, line })
    }

    /// The nodes kept for `job` (tests, logs).
    pub fn kept_for(&self, job: u64) -> Option<&[NodeId]> {
        self.kept.get(&job).map(|k| &k.nodes[..])
    }

    /// `job` was tested again while waiting: the nodes kept for it stay
    /// kept ([`Controller::keep_for_waiting`]).
    pub fn still_waiting(&mut self, job: u64, now: u64) {
        if let Some(k) = self.kept.get_mut(&job) {
            k.seen = now;
        }
    }

    /// The GPU nodes (of any pool), in order.
    pub fn gpu_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.node_gpus.len() as NodeId).filter(|&n| self.node_gpus[n as usize] > 0)
    }

    /// The GPU nodes (of any pool) as a set: whether a partition holds
    /// some and lacks some is two word-by-word comparisons.
    pub fn gpu_node_set(&self) -> &NodeSet {
        &self.gpu_set
    }

    /// Stops keeping nodes for `job` (it started, ended or stopped
    /// waiting); a node no other job keeps takes moves again, and Compact
    /// is due to use it.
    fn unkeep(&mut self, job: u64) {
        if let Some(k) = self.kept.remove(&job) {
            self.release_kept(k.nodes);
        }
    }

    /// One keep of each of `nodes` ends; a node no job keeps any more takes
    /// moves again, and Compact is due to use it.
    fn release_kept(&mut self, nodes: Vec<NodeId>) {
        for n in nodes {
            let Some(c) = self.kept_nodes.get_mut(&n) else {
                continue;
            };
            *c -= 1;
            if *c == 0 {
                self.kept_nodes.remove(&n);
                self.sync_usable(n);
                self.compact_due = true;
            }
        }
    }

    /// What must survive a reconfigure or restart ([`crate::persist`]):
    /// cool-downs still running and migrations in flight.
    pub fn saved(&self, now: u64) -> Saved {
        Saved {
            format: SAVED_FORMAT,
            last_migrated: self
                .last_migrated
                .iter()
                .filter(|(_, t)| now.saturating_sub(**t) < self.config.migration_cooldown_s)
                .map(|(j, t)| (*j, *t))
                .collect(),
            in_flight: self
                .pins
                .iter()
                .filter(|(j, _)| self.migrating.contains(j))
                .map(|(j, p)| SavedMigration {
                    job: *j,
                    to_nodes: p.nodes.iter().map(|n| self.name(*n)).collect(),
                    since: p.since,
                    shape: self
                        .engine
                        .job(JobId(*j))
                        .map(|r| (r.request.shape.instances, r.request.shape.gpus)),
                })
                .collect(),
            runs: self.runs.runs().map(|r| r as u64).collect(),
            kept: self
                .kept
                .iter()
                .map(|(j, k)| (*j, k.nodes.iter().map(|n| self.name(*n)).collect()))
                .collect(),
            // The plugin's thread keeps the raised jobs and adds them.
            raised: Vec::new(),
        }
    }

    /// Takes back what [`Controller::saved`] kept, into a fresh controller,
    /// before the running jobs are adopted: cool-downs still running, and
    /// in-flight migrations whose pin has not expired and whose target
    /// nodes still exist. Call [`Controller::adopt_in_flight`] after the
    /// last running job is adopted.
    pub fn restore(&mut self, saved: &Saved, now: u64) {
        for &r in &saved.runs {
            self.runs.record(r as f64);
        }
        // Nodes kept for waiting jobs, with a fresh WAITING_TTL_S: the
        // Compact after the rebuild must not fill them before the jobs'
        // next tests (a job that started since is dropped when adopted).
        for (job, names) in &saved.kept {
            let nodes: Vec<NodeId> = names.iter().filter_map(|name| self.node_id(name)).collect();
            self.keep_for_waiting(*job, &nodes, KeepNodes::Named, now);
        }
        // Instants saved ahead of `now` (the clock stepped back since) are
        // taken as `now`: a cool-down restarts, a pin counts from now
        // (issue #11: a cool-down stamped ahead was dropped, a pin stamped
        // ahead outlived its time-out by the step).
        for &(j, t) in &saved.last_migrated {
            let t = t.min(now);
            if now - t < self.config.migration_cooldown_s {
                self.note_migrated(j, t);
            }
        }
        for m in &saved.in_flight {
            let since = m.since.min(now);
            let nodes: Option<Vec<NodeId>> =
                m.to_nodes.iter().map(|name| self.node_id(name)).collect();
            let Some(nodes) = nodes.filter(|_| now - since <= PIN_TIMEOUT_S) else {
                // Its pin ran out, or a target node is gone: the job was
                // requeued for a move all the same, so its cool-down
                // starts, as when a pin is dropped (`drop_pin`).
                self.note_migrated(m.job, now);
                continue;
            };
            self.migrating.insert(m.job);
            self.pins.insert(m.job, Pin { nodes, since });
            if let Some((w, g)) = m.shape {
                self.restored_shapes.insert(m.job, JobShape::new(w, g));
            }
        }
    }

    /// After a rebuild: the engine holds each restored in-flight migration
    /// whose job has not restarted yet at its target (as it did before), so
    /// nothing else is planned onto GPUs promised to it. One that cannot be
    /// held there is dropped (the job then plans normally).
    pub fn adopt_in_flight(&mut self) {
        let shapes = std::mem::take(&mut self.restored_shapes);
        let waiting: Vec<u64> = self
            .migrating
            .iter()
            .copied()
            .filter(|j| !self.jobs.contains_key(j))
            .collect();
        for j in waiting {
            let held = match (shapes.get(&j), self.pins.get(&j)) {
                (Some(&shape), Some(pin)) if pin.nodes.len() == shape.instances as usize => {
                    let req = JobRequest {
                        id: JobId(j),
                        shape,
                        movable: false,
                    };
                    let nodes = pin.nodes.clone();
                    self.engine.adopt(&req, &nodes).is_ok()
                }
                _ => false,
            };
            if !held {
                // Requeued for a move that cannot be held now: it plans
                // anew, and its cool-down starts (`drop_pin`).
                self.migrating.remove(&j);
                if let Some(p) = self.pins.remove(&j) {
                    self.note_migrated(j, p.since);
                }
            }
        }
    }

    /// Node names, in Slurm's node index order.
    pub fn node_names(&self) -> &[String] {
        &self.node_names
    }

    /// The node of that name (a name Slurm no longer has: `None`).
    fn node_id(&self, name: &str) -> Option<NodeId> {
        self.node_names
            .iter()
            .position(|x| x == name)
            .map(|n| n as NodeId)
    }

    /// `nodes` by name, each once, in node order (`n1,n3`), for logs.
    pub fn node_list(&self, nodes: &[NodeId]) -> String {
        let mut nodes = nodes.to_vec();
        nodes.sort_unstable();
        nodes.dedup();
        let names: Vec<String> = nodes.iter().map(|&n| self.name(n)).collect();
        names.join(",")
    }

    /// Whether the controller has recorded this running job.
    pub fn knows(&self, job: u64) -> bool {
        self.jobs.contains_key(&job)
    }

    /// Whether a job has a pending pin (tests, status).
    pub fn pinned(&self, job: u64) -> Option<&[NodeId]> {
        self.pins.get(&job).map(|p| &p.nodes[..])
    }

    /// The live state to publish (Slurm's actual allocation, engine flags).
    /// Every job is copied: it needs no [`Published`] kept between
    /// calls (the plugin thread's rounds use [`Controller::snapshot_parts`]).
    pub fn snapshot(&self, now: u64, engine_active: bool) -> PublishedState {
        let (jobs, layout) = self.copy_all();
        self.snapshot_with(now, engine_active, jobs, true, layout)
            .finish(&mut Published::default())
    }

    /// [`Controller::snapshot`] as the plugin thread takes it under the
    /// controller's lock every round: a copy of what the published state is
    /// made of (the records of the running jobs that changed since the last
    /// call, the jobs held for tidying, the parts of the engine's layout of
    /// the nodes that changed, each node's state shared, not copied,
    /// [`PoolSet::layout_changes`], the counters). The state itself (node
    /// and job views with their names, Phi* and SIF per pool, the layout as
    /// JSON) is built by [`Snapshot::finish`], which needs no lock, from the
    /// caller's copy of every job's record and node's part ([`Published`])
    /// brought up to date. Issue #11: built under the lock, it held it 2.4
    /// ms at 1,000 nodes and 31 ms at 10,000 in the plugin bench, every
    /// second, while slurmctld's callbacks waited; copying every running
    /// job's record and a part of every node still held it 0.2-0.5 ms at
    /// 10,000 nodes. The first call of a controller copies every job and
    /// node ([`PoolSet::layout_parts`]).
    pub fn snapshot_parts(&mut self, now: u64, engine_active: bool) -> Snapshot {
        let full = std::mem::take(&mut self.snap_full);
        let changed = std::mem::take(&mut self.snap_changed);
        let (jobs, layout) = if full {
            self.copy_all()
        } else {
            let jobs = changed
                .into_iter()
                .map(|id| (id, self.job_copy(id)))
                .collect();
            (jobs, (None, self.engine.layout_changes()))
        };
        self.snapshot_with(now, engine_active, jobs, full, layout)
    }

    /// Every running job's record and every node's part of the layout, as
    /// a full snapshot publishes them.
    fn copy_all(&self) -> (Vec<(u64, Option<JobCopy>)>, LayoutCopy) {
        let jobs = self
            .jobs
            .keys()
            .map(|&id| (id, self.job_copy(id)))
            .collect();
        (jobs, (Some(self.engine.layout_parts()), Vec::new()))
    }

    /// Job `id`'s record as the published state needs it (`None`: not
    /// running).
    fn job_copy(&self, id: u64) -> Option<JobCopy> {
        let rec = self.jobs.get(&id)?;
        Some(JobCopy {
            shape: rec.shape,
            flags: rec.flags,
            keep: rec.keep,
            counted: rec.in_engine && rec.shape.is_some(),
            per_node: Arc::clone(&rec.per_node),
        })
    }

    /// The parts of a snapshot with `jobs` the records to publish (`full`:
    /// every running job's, else those that changed) and `layout` the
    /// engine's (every node's parts, else those of the nodes that changed).
    fn snapshot_with(
        &self,
        now: u64,
        engine_active: bool,
        jobs: Vec<(u64, Option<JobCopy>)>,
        full: bool,
        layout: LayoutCopy,
    ) -> Snapshot {
        let pending = self
            .pins
            .iter()
            .map(|(j, p)| (*j, p.nodes.clone()))
            .chain(self.orders.iter().map(|o| (o.job, o.to_nodes.clone())))
            .collect();
        Snapshot {
            now,
            engine_active: engine_active && self.config.enabled,
            engine_error: self.engine_error.clone(),
            node_names: Arc::clone(&self.node_names),
            node_gpus: self.node_gpus.clone(),
            gate_open: self.gate_open,
            tidy_held: self.tidy_held.iter().copied().collect(),
            jobs,
            full,
            pending,
            counters: self.counters.clone(),
            move_when: self.config.move_when,
            tidy_payback: self.config.tidy_payback,
            migration_cost_s: self.config.migration_cost_s,
            layout: layout.0,
            layout_changes: layout.1,
        }
    }

    fn name(&self, n: NodeId) -> String {
        node_name(&self.node_names, n)
    }
}

/// What the published state is made of, copied under the controller's lock
/// ([`Controller::snapshot_parts`]); [`Snapshot::finish`] builds the state.
pub struct Snapshot {
    now: u64,
    engine_active: bool,
    engine_error: Option<String>,
    node_names: Arc<[String]>,
    node_gpus: Vec<u32>,
    gate_open: bool,
    /// Ascending.
    tidy_held: Vec<u64>,
    /// The records of the running jobs to publish (`None`: it ended): every
    /// one when `full`, else those that changed since the last snapshot.
    jobs: Vec<(u64, Option<JobCopy>)>,
    full: bool,
    /// Pinned jobs and orders handed out: the nodes they go to.
    pending: Vec<(u64, Vec<NodeId>)>,
    counters: Counters,
    move_when: MoveWhen,
    tidy_payback: f64,
    migration_cost_s: u64,
    /// Each node's state shared with the engine, copied in
    /// [`Snapshot::finish`]; the pools with it. `None`: the parts of the
    /// nodes that changed only, `layout_changes`
    /// ([`PoolSet::layout_changes`]).
    layout: Option<PoolsLayoutParts>,
    layout_changes: Vec<(usize, NodeId, NodePart)>,
}

/// The engine's layout as a snapshot copies it: every node's parts, or the
/// parts of the nodes that changed since the last snapshot.
type LayoutCopy = (Option<PoolsLayoutParts>, Vec<(usize, NodeId, NodePart)>);

/// A running job's record as [`Snapshot`] copies it.
#[derive(Clone, Debug, PartialEq)]
struct JobCopy {
    shape: Option<JobShape>,
    flags: JobFlags,
    keep: Option<KeepReason>,
    /// In the engine's model: counted among the jobs kept still or not.
    counted: bool,
    /// Its GPUs per node (the record's, shared).
    per_node: Arc<[(NodeId, u32)]>,
}

/// The running jobs' records and the engine's layout as last published,
/// by job id and node: kept by the caller of
/// [`Controller::snapshot_parts`] between its rounds, outside the
/// controller's lock, and brought up to date by each [`Snapshot`]
/// ([`Snapshot::finish`], [`Published::absorb`]).
#[derive(Default)]
pub struct Published {
    jobs: BTreeMap<u64, JobCopy>,
    layout: Option<PoolsLayoutParts>,
}

impl Published {
    /// Takes in `snapshot`'s job records and layout without building its
    /// state (a snapshot that will not be published: another follows).
    pub fn absorb(&mut self, mut snapshot: Snapshot) {
        self.update(&mut snapshot);
    }

    fn update(&mut self, s: &mut Snapshot) {
        if s.full {
            self.jobs.clear();
        }
        for (id, rec) in std::mem::take(&mut s.jobs) {
            match rec {
                Some(r) => self.jobs.insert(id, r),
                None => self.jobs.remove(&id),
            };
        }
        if let Some(layout) = s.layout.take() {
            self.layout = Some(layout);
        }
        if let Some(layout) = self.layout.as_mut() {
            layout.apply(std::mem::take(&mut s.layout_changes));
        }
    }
}

impl Snapshot {
    fn name(&self, n: NodeId) -> String {
        node_name(&self.node_names, n)
    }

    /// The state to publish, the engine's layout in it as JSON
    /// ([`PublishedState::layout`]), with `published` (the job records of
    /// the snapshots before) brought up to date first.
    pub fn finish(mut self, published: &mut Published) -> PublishedState {
        published.update(&mut self);
        let pool_specs = published.layout.as_ref().map_or(&[][..], |l| l.pools());
        let node_count = self.node_gpus.len();
        let mut nodes: Vec<NodeView> = (0..node_count as NodeId)
            .map(|n| NodeView {
                name: self.name(n),
                capacity: self.node_gpus[n as usize],
                used_gpus: 0,
                jobs: vec![],
            })
            .collect();
        // Running instances by size, per pool (Slurm's allocation).
        let pool_count = pool_specs.len();
        let mut counts = vec![[0u64; 9]; pool_count];
        let mut pool_at: Vec<Option<usize>> = vec![None; node_count];
        for (p, spec) in pool_specs.iter().enumerate() {
            for &n in &spec.nodes {
                if let Some(x) = pool_at.get_mut(n as usize) {
                    *x = Some(p);
                }
            }
        }
        let pool_of = |n: NodeId| pool_at.get(n as usize).copied().flatten();
        let mut jobs = Vec::with_capacity(published.jobs.len());
        let mut kept_still: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (&id, rec) in &published.jobs {
            let per_node = &rec.per_node[..];
            if rec.counted {
                // Held by the gate, or for tidying (its move would start
                // nobody and does not pay).
                let closed = (!self.gate_open || self.tidy_held.binary_search(&id).is_ok())
                    .then_some(KeepReason::NoGain);
                if let Some(why) = rec.keep.or(closed) {
                    *kept_still.entry(why.as_str()).or_default() += 1;
                }
            }
            for &(n, g) in per_node.iter().filter(|(_, g)| *g > 0) {
                if let Some(v) = nodes.get_mut(n as usize) {
                    v.used_gpus += g;
                    v.jobs.push((id, g));
                }
            }
            let instances = rec
                .shape
                .and_then(|s| instances_from_alloc(s, per_node).map(|i| (s, i)));
            match &instances {
                Some((s, inst)) => {
                    for &n in inst {
                        if let Some(p) = pool_of(n) {
                            counts[p][s.gpus.min(8) as usize] += 1;
                        }
                    }
                }
                None => {
                    for &(n, g) in per_node {
                        if let (true, Some(p)) = (g > 0, pool_of(n)) {
                            counts[p][g.min(8) as usize] += 1;
                        }
                    }
                }
            }
            let names = match &instances {
                Some((_, inst)) => inst.iter().map(|n| self.name(*n)).collect(),
                None => per_node.iter().map(|(n, _)| self.name(*n)).collect(),
            };
            jobs.push(JobView {
                id,
                shape: rec.shape.map(|s| (s.instances, s.gpus)),
                nodes: names,
                flags: rec.flags,
                // No shape, or an allocation that is not its instances.
                foreign: per_node.iter().any(|(_, g)| *g > 0) && instances.is_none(),
            });
        }
        let partial_of = |n: &NodeView| n.used_gpus > 0 && n.used_gpus < n.capacity;
        let partial = nodes.iter().filter(|n| partial_of(n)).count() as u32;
        // Per pool (issue 12): Theorem 1 bounds N*SIF in each pool.
        let mut pools = Vec::with_capacity(pool_count);
        let (mut phi, mut n_sif, mut modelled_nodes) = (0u64, 0.0f64, 0u32);
        for (p, spec) in pool_specs.iter().enumerate() {
            let part = spec
                .nodes
                .iter()
                .filter(|&&n| partial_of(&nodes[n as usize]))
                .count() as u32;
            let used: u64 = spec
                .nodes
                .iter()
                .map(|&n| u64::from(nodes[n as usize].used_gpus))
                .sum();
            let (p_phi, p_nsif) = if spec.modelled {
                let f = metric::phi_star(&counts[p], spec.gpus_per_node);
                let v = (f64::from(part) - f as f64).max(0.0);
                phi += f;
                n_sif += v;
                modelled_nodes += spec.nodes.len() as u32;
                (Some(f), Some(v))
            } else {
                (None, None)
            };
            pools.push(PoolView {
                name: spec.name.clone(),
                gpus_per_node: spec.gpus_per_node,
                gpu_type: spec.gpu_type.clone(),
                nodes: spec.nodes.len() as u32,
                node_names: spec.nodes.iter().map(|&n| self.name(n)).collect(),
                modelled: spec.modelled,
                used_gpus: used,
                partial_nodes: part,
                phi_star: p_phi,
                n_sif: p_nsif,
                wcc: spec
                    .modelled
                    .then(|| metric::wcc_holds(&counts[p], spec.gpus_per_node)),
            });
        }
        // One pool of every node: the homogeneous cluster's one capacity.
        let gpus_per_node = match &pools[..] {
            [one] if one.nodes as usize == node_count => one.gpus_per_node,
            _ => 0,
        };
        let pending_migrations = self
            .pending
            .iter()
            .map(|(job, to)| PendingMigration {
                job: *job,
                to_nodes: to.iter().map(|n| self.name(*n)).collect(),
            })
            .collect();
        PublishedState {
            format: FORMAT,
            updated_unix: self.now,
            engine_active: self.engine_active,
            engine_error: self.engine_error,
            gpus_per_node,
            nodes,
            partial_nodes: partial,
            phi_star: phi,
            n_sif,
            sif: if modelled_nodes == 0 {
                0.0
            } else {
                n_sif / f64::from(modelled_nodes)
            },
            pools,
            divergences: self.counters.divergences,
            pending_migrations,
            migrations_done: self.counters.migrations_done,
            migrations_failed: self.counters.migrations_failed,
            engine_errors: self.counters.engine_errors,
            kept_still: kept_still
                .into_iter()
                .map(|(why, n)| (why.to_string(), n))
                .collect(),
            jobs,
            job_test: Default::default(),
            layout: published
                .layout
                .as_ref()
                .and_then(|l| serde_json::to_value(l.finish()).ok()),
            move_when: Some(self.move_when.name().to_string()),
            tidy_payback: (self.move_when == MoveWhen::Pays).then_some(self.tidy_payback),
            migration_cost_s: Some(self.migration_cost_s),
        }
    }
}

/// Node `n`'s name in Slurm's node index order (`#n` past the end).
fn node_name(names: &[String], n: NodeId) -> String {
    names
        .get(n as usize)
        .cloned()
        .unwrap_or_else(|| format!("#{n}"))
}

/// What the rule needs to know about a running job at `now`
/// (`last_migrated`: when it last landed from a migration).
fn candidate_of(rec: &JobRec, last_migrated: Option<u64>, now: u64) -> MoveCandidate {
    let running = now.saturating_sub(rec.start);
    MoveCandidate {
        resumable: rec.flags.resumable,
        cost_s: rec.flags.migration_cost_s.map(|c| c as f64),
        running_for_s: running as f64,
        // Slurm's limit counts from the (re)start: a requeued job gets
        // its whole limit again.
        remaining_s: rec
            .time_limit_s
            .map(|limit| limit.saturating_sub(running) as f64),
        protected_for_s: rec.flags.min_runtime_s.saturating_sub(running) as f64,
        since_migrated_s: last_migrated.map(|t| now.saturating_sub(t) as f64),
    }
}

/// The `pays` gate's judge of a tidying trial's moves
/// ([`Controller::compact_tidying`]), borrowed apart from the engine so
/// that the head's guard can ask it inside the trial
/// ([`HeadTrial::refuse`]).
struct TidyJudge<'a> {
    jobs: &'a FxHashMap<u64, JobRec>,
    last_migrated: &'a BTreeMap<u64, u64>,
    runs: &'a RunHistory,
    rule: MigrationRule,
    now: u64,
}

impl TidyJudge<'_> {
    /// Does a tidying move of running job `id` pay for itself
    /// ([`MigrationRule::pays_for_tidying`], its expected remaining run
    /// from the runs of the jobs that ended lately,
    /// [`RunHistory::expected_remaining`], by the time since its start)?
    fn pays(&self, id: u64) -> bool {
        self.jobs.get(&id).is_some_and(|r| {
            let age = self.now.saturating_sub(r.start) as f64;
            let c = candidate_of(r, self.last_migrated.get(&id).copied(), self.now);
            self.rule
                .pays_for_tidying(&c, self.runs.expected_remaining(age))
        })
    }

    /// The jobs the migrations `m` requeue (read on `engine` after them)
    /// whose tidying move does not pay, each once.
    fn unpaid(&self, engine: &PoolSet, m: &[Migration]) -> Vec<JobId> {
        let mut out: Vec<JobId> = Vec::new();
        for x in m {
            if !out.contains(&x.job)
                && needs_requeue(engine, self.jobs, x.job.0)
                && !self.pays(x.job.0)
            {
                out.push(x.job);
            }
        }
        out
    }
}

/// Does the engine's placement of job `j` (after a Compact) differ from
/// where Slurm runs it, so that its move is a requeue? (No copy of the
/// job: a tidying Compact asks it of each move.)
fn needs_requeue(engine: &PoolSet, jobs: &FxHashMap<u64, JobRec>, j: u64) -> bool {
    let Some((g, nodes)) = engine.job_nodes(JobId(j)) else {
        return false;
    };
    jobs.get(&j)
        .is_none_or(|r| sorted(&r.per_node) != per_node_of(nodes, g))
}

/// GPUs per node of instances of `g` GPUs on `nodes`, by node.
fn per_node_of(nodes: impl IntoIterator<Item = NodeId>, g: u32) -> Vec<(NodeId, u32)> {
    let mut v: Vec<(NodeId, u32)> = nodes.into_iter().map(|n| (n, g)).collect();
    merge_per_node(&mut v);
    v
}

/// `per_node` by node, the entries of a node added up, empty ones left out.
fn sorted(per_node: &[(NodeId, u32)]) -> Vec<(NodeId, u32)> {
    let mut v: Vec<(NodeId, u32)> = per_node.iter().copied().filter(|x| x.1 > 0).collect();
    merge_per_node(&mut v);
    v
}

/// Sorts GPUs per node by node and adds up the entries of a node.
fn merge_per_node(v: &mut Vec<(NodeId, u32)>) {
    v.sort_unstable();
    v.dedup_by(|b, a| {
        let same = a.0 == b.0;
        if same {
            a.1 += b.1;
        }
        same
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use compass_core::placement::head::TRIAL_MEMORY_S;

    mod hostile;

    /// The site defaults, but jobs move whenever a move pays (most tests
    /// exercise Compact with no job waiting).
    fn always() -> SelectConfig {
        SelectConfig {
            move_when: MoveWhen::Always,
            ..Config::default().select
        }
    }

    fn ctl() -> Controller {
        ctl_with(always())
    }

    fn ctl_with(config: SelectConfig) -> Controller {
        ctl_on(config, 4)
    }

    /// `nodes` nodes of 8 GPUs, named n1, n2, ...
    fn ctl_on(config: SelectConfig, nodes: u32) -> Controller {
        let names = (1..=nodes).map(|i| format!("n{i}")).collect();
        Controller::new(config, ClusterSpec::new(nodes, 8).unwrap(), names)
    }

    /// The site defaults: `select.move_when = "pays"`.
    fn pays() -> SelectConfig {
        SelectConfig {
            move_when: MoveWhen::Pays,
            ..Config::default().select
        }
    }

    fn job(id: u64, w: u32, g: u32) -> JobInfo {
        JobInfo {
            id,
            mapping: Mapping::Model {
                shape: JobShape::new(w, g),
                distinct_nodes: false,
            },
            flags: Some(JobFlags {
                min_runtime_s: 0,
                resumable: true,
                migration_cost_s: None,
            }),
            time_limit_s: None,
            gpu_type: None,
            required_nodes: false,
        }
    }

    /// A job the plugin does not narrow (no GPUs, outside the model),
    /// submitted without the SPANK plugin's values.
    fn unmodelled(id: u64, mapping: Mapping) -> JobInfo {
        JobInfo {
            id,
            mapping,
            flags: None,
            time_limit_s: None,
            gpu_type: None,
            required_nodes: false,
        }
    }

    #[test]
    fn jobs_without_gpus_or_outside_the_model_are_never_narrowed() {
        let mut c = ctl();
        let all = NodeSet::full(4);
        let no_gpu = unmodelled(1, Mapping::NoGpu);
        assert_eq!(c.narrow(&no_gpu, &all), Ok(None));
        let outside = unmodelled(2, Mapping::Outside("x".into()));
        assert_eq!(c.narrow(&outside, &all), Ok(None));
    }

    #[test]
    fn disabled_controller_never_narrows() {
        let mut cfg = Config::default().select;
        cfg.enabled = false;
        let mut c = Controller::new(cfg, ClusterSpec::new(4, 8).unwrap(), vec![]);
        assert_eq!(c.narrow(&job(1, 1, 1), &NodeSet::full(4)), Ok(None));
    }

    #[test]
    fn pins_narrow_within_candidates_only() {
        let mut c = ctl();
        assert!(c.may_widen(7));
        c.mark_migrating(
            &MigrationOrder {
                job: 7,
                to_nodes: vec![2, 3],
            },
            100,
        );
        assert!(
            !c.may_widen(7) && !c.may_widen(8),
            "no widening while a migration is in flight"
        );
        let cand = NodeSet::from_nodes(4, [0, 1, 2]);
        assert_eq!(
            c.narrow(&job(7, 2, 4), &cand),
            Ok(Some(NodeSet::from_nodes(4, [2])))
        );
        // a pin outside every candidate: the job waits for its target
        let cand = NodeSet::from_nodes(4, [0]);
        assert_eq!(c.narrow(&job(7, 2, 4), &cand), Ok(Some(NodeSet::empty(4))));
        // stale pins expire
        c.tick(100 + PIN_TIMEOUT_S + 1);
        assert_eq!(c.pinned(7), None);
        assert!(c.may_widen(8));
    }

    #[test]
    fn a_plan_over_several_nodes_of_a_job_whose_tasks_may_share_one_is_spread() {
        let mut c = ctl();
        let all = NodeSet::full(4);
        // Two 4-GPU jobs fill n1 and n2 by halves: a 2 x 4 job is planned on
        // the two halves left.
        for (id, n) in [(1, 0), (2, 1)] {
            c.narrow(&job(id, 1, 4), &all).unwrap();
            assert_eq!(c.begin(&job(id, 1, 4), &[(n, 4)], 0), None);
        }
        let plan = c.narrow(&job(3, 2, 4), &all).unwrap().unwrap();
        assert_eq!(plan, NodeSet::from_nodes(4, [0, 1]), "{plan:?}");
        assert_eq!(c.plan_spread(&job(3, 2, 4)), Some(2));
        // A plan of one node is the narrowing itself.
        c.narrow(&job(4, 2, 2), &NodeSet::from_nodes(4, [2]))
            .unwrap();
        assert_eq!(c.plan_spread(&job(4, 2, 2)), None);
        // `-N 2` forms: Slurm spreads them itself.
        let mut n2 = job(3, 2, 4);
        n2.mapping = Mapping::Model {
            shape: JobShape::new(2, 4),
            distinct_nodes: true,
        };
        assert_eq!(c.plan_spread(&n2), None);
        // A pin of two instances on two nodes: spread over both, whatever
        // Slurm's candidates are (a pin never narrows past its target).
        c.mark_migrating(
            &MigrationOrder {
                job: 7,
                to_nodes: vec![3, 2],
            },
            100,
        );
        assert_eq!(c.plan_spread(&job(7, 2, 2)), Some(2));
        c.mark_migrating(
            &MigrationOrder {
                job: 8,
                to_nodes: vec![3, 3],
            },
            100,
        );
        assert_eq!(c.plan_spread(&job(8, 2, 2)), None);
        // One instance, or no plan: nothing to spread.
        assert_eq!(c.plan_spread(&job(9, 1, 8)), None);
        assert_eq!(c.plan_spread(&job(10, 2, 2)), None);
    }

    #[test]
    fn a_job_held_still_from_its_start_is_planned_into_a_partial_node() {
        // n1 is a pool node with three 1-GPU jobs. A resumable 4-GPU job
        // opens a slotted node (Compact can move it later); a protected or
        // not resumable one fills n1's free GPUs instead, as the simulator
        // plans it (the engine's pinned fill).
        let mut c = ctl();
        for id in 1..=3 {
            assert_eq!(run(&mut c, &job(id, 1, 1), 100), vec![0]);
        }
        let all = NodeSet::full(4);
        let planned = |c: &mut Controller, j: &JobInfo| -> Vec<NodeId> {
            c.narrow(j, &all)
                .unwrap()
                .expect("planned")
                .iter()
                .collect()
        };
        assert_eq!(planned(&mut c, &job(4, 1, 4)), vec![1], "its own slot");
        let mut protected = job(5, 1, 4);
        protected.flags = Some(JobFlags {
            min_runtime_s: 3600,
            ..protected.flags.unwrap()
        });
        assert_eq!(planned(&mut c, &protected), vec![0]);
        let mut pinned = job(6, 1, 4);
        pinned.flags = None;
        assert_eq!(planned(&mut c, &pinned), vec![0]);
    }

    #[test]
    fn no_room_while_migrations_are_in_flight_means_wait() {
        let mut c = ctl();
        for id in 1..=4 {
            run(&mut c, &job(id, 1, 8), 100);
        }
        let all = NodeSet::full(4);
        assert_eq!(
            c.narrow(&job(9, 1, 8), &all),
            Ok(None),
            "full: cons_tres decides"
        );
        c.mark_migrating(
            &MigrationOrder {
                job: 1,
                to_nodes: vec![0],
            },
            100,
        );
        assert_eq!(
            c.narrow(&job(9, 1, 8), &all),
            Ok(Some(NodeSet::empty(4))),
            "the engine's GPUs are promised to a migration: wait"
        );
    }

    /// Four nodes full of 1 x 8 jobs 1-4 (started at 100); job 1's
    /// migration to node 0 is in flight since 100.
    fn full_with_job_1_moving_to_node_0() -> Controller {
        let mut c = ctl();
        for id in 1..=4 {
            run(&mut c, &job(id, 1, 8), 100);
        }
        c.mark_migrating(
            &MigrationOrder {
                job: 1,
                to_nodes: vec![0],
            },
            100,
        );
        c
    }

    #[test]
    fn a_job_held_for_a_migration_is_released_to_slurm_after_the_limit() {
        // The cluster is full; job 1's migration to n1 is in flight. Job 9
        // is narrowed to nothing (the engine's GPUs are promised): it waits
        // HOLD_LIMIT_S from its first refusal, then Slurm places it, away
        // from the migration's target.
        let mut c = full_with_job_1_moving_to_node_0();
        let all = NodeSet::full(4);
        assert_eq!(c.narrow(&job(9, 1, 8), &all), Ok(Some(NodeSet::empty(4))));
        assert!(!c.may_widen(9));
        assert_eq!(c.hold(9, 101), Hold::Wait);
        assert_eq!(c.hold(9, 101 + HOLD_LIMIT_S - 1), Hold::Wait);
        assert!(c.take_releases().is_empty() && !c.released(9));
        let released = Hold::Release { keep_off: vec![0] };
        assert_eq!(c.hold(9, 101 + HOLD_LIMIT_S), released);
        assert_eq!(
            c.take_releases(),
            vec![Released {
                job: 9,
                held_s: HOLD_LIMIT_S,
                pin_dropped: false
            }]
        );
        assert!(c.released(9));
        // Released once: later refusals and plans leave it to Slurm, off
        // the migration's target (backfill's plans too), and a plan made
        // before does not stand (no spread, no divergence from it).
        assert_eq!(c.hold(9, 102 + HOLD_LIMIT_S), released);
        assert!(c.take_releases().is_empty());
        c.planned.insert(9, vec![1, 2]);
        assert_eq!(c.plan_spread(&job(9, 2, 4)), Some(2));
        assert_eq!(
            c.narrow(&job(9, 1, 8), &all),
            Ok(Some(NodeSet::from_nodes(4, [1, 2, 3])))
        );
        assert_eq!(c.plan_spread(&job(9, 2, 4)), None);
        assert_eq!(c.pinned(1), Some(&[0][..]), "the migration keeps its pin");
        // Starting ends it: a new refusal is a new episode.
        c.begin(&job(9, 1, 8), &[(3, 8)], 200);
        assert_eq!(c.hold(9, 200), Hold::Wait);
    }

    #[test]
    fn a_hold_is_released_by_the_clock_even_if_slurm_does_not_ask_again() {
        // Refused once at a RUN_NOW test, then only planned by backfill on
        // its narrowed nodes (which it sees free later): the tick releases it.
        let mut c = full_with_job_1_moving_to_node_0();
        let all = NodeSet::full(4);
        assert_eq!(c.hold(9, 101), Hold::Wait);
        c.tick(100 + HOLD_LIMIT_S);
        assert_eq!(c.narrow(&job(9, 1, 8), &all), Ok(Some(NodeSet::empty(4))));
        c.tick(101 + HOLD_LIMIT_S);
        assert_eq!(c.take_releases().len(), 1);
        assert_eq!(
            c.narrow(&job(9, 1, 8), &all),
            Ok(Some(NodeSet::from_nodes(4, [1, 2, 3])))
        );
        // A release lasts WAITING_TTL_S: then the job is narrowed again.
        let later = 102 + HOLD_LIMIT_S + WAITING_TTL_S;
        c.tick(later);
        c.mark_migrating(
            &MigrationOrder {
                job: 1,
                to_nodes: vec![0],
            },
            later,
        );
        assert_ne!(
            c.narrow(&job(9, 1, 8), &all),
            Ok(Some(NodeSet::from_nodes(4, [1, 2, 3])))
        );
        assert_eq!(c.hold(9, later), Hold::Wait);
    }

    #[test]
    fn a_migration_whose_target_stays_busy_loses_its_pin_after_the_limit() {
        // Jobs 1-3 (4 GPUs each); 1 ends, Compact moves one of the others.
        // Slurm cannot start it on its target (taken by what the engine does
        // not model: CPUs, memory, a job started by hand): after HOLD_LIMIT_S
        // the pin goes, the engine forgets the target, and the job restarts
        // where Slurm puts it, cooling down like a moved job.
        let mut c = one_move_due(SelectConfig {
            min_run_before_migration_s: 0,
            ..always()
        });
        let orders = c.tick(1000);
        assert_eq!(orders.len(), 1, "{orders:?}");
        let moved = orders[0].job;
        c.fini(moved, 1000); // the requeue
        assert!(c.pinned(moved).is_some());
        assert_eq!(c.hold(moved, 1003), Hold::Wait);
        c.tick(1003 + HOLD_LIMIT_S);
        assert_eq!(
            c.take_releases(),
            vec![Released {
                job: moved,
                held_s: HOLD_LIMIT_S,
                pin_dropped: true
            }]
        );
        assert_eq!(c.pinned(moved), None);
        assert!(c.may_widen(moved) && c.may_widen(99), "nothing in flight");
        assert!(c.pools().job(JobId(moved)).is_none(), "target forgotten");
        assert_eq!(c.self_check(), None);
        // Slurm places it (no narrowing) and it restarts on an empty node.
        assert_eq!(c.narrow(&job(moved, 1, 4), &NodeSet::full(4)), Ok(None));
        assert_eq!(c.hold(moved, 1014), Hold::Release { keep_off: vec![] });
        assert_eq!(c.begin(&job(moved, 1, 4), &[(3, 4)], 1015), None);
        let orders = c.tick(1016);
        assert!(
            orders.iter().all(|o| o.job != moved),
            "cooling down: {orders:?}"
        );
        let s = c.snapshot(1016, true);
        assert_eq!(
            s.kept_still.get("cooling-down"),
            Some(&1),
            "{}",
            s.render(1016)
        );
        assert_eq!(c.self_check(), None);
    }

    /// Submit through the controller as the plugin does: narrow, then Slurm
    /// allocates on the narrowed nodes (here: exactly the plan), then begin.
    fn run(c: &mut Controller, j: &JobInfo, now: u64) -> Vec<NodeId> {
        let all = NodeSet::full(c.node_count());
        let set = c.narrow(j, &all).unwrap().expect("engine plans the job");
        let Mapping::Model { shape, .. } = j.mapping else {
            panic!()
        };
        let nodes: Vec<NodeId> = set.iter().collect();
        // spread instances over the narrowed nodes by free room, like cons_tres
        let mut per_node = Vec::new();
        let mut left = shape.instances;
        for n in nodes {
            let room = (8 - c.snapshot(now, true).nodes[n as usize].used_gpus) / shape.gpus;
            let k = room.min(left);
            if k > 0 {
                per_node.push((n, k * shape.gpus));
                left -= k;
            }
        }
        assert_eq!(left, 0, "narrowed nodes hold the job");
        assert_eq!(c.begin(j, &per_node, now), None);
        per_node.iter().map(|(n, _)| *n).collect()
    }

    #[test]
    fn distinct_node_jobs_get_one_planned_node_per_instance() {
        let mut c = ctl();
        let j = JobInfo {
            id: 1,
            mapping: Mapping::Model {
                shape: JobShape::new(2, 4),
                distinct_nodes: true,
            },
            flags: None,
            time_limit_s: None,
            gpu_type: None,
            required_nodes: false,
        };
        let set = c.narrow(&j, &NodeSet::full(4)).unwrap().expect("planned");
        assert_eq!(set.count(), 2, "{set:?}");
        // only one candidate node: no plan can give two distinct nodes
        assert_eq!(c.narrow(&j, &NodeSet::from_nodes(4, [3])), Ok(None));
    }

    #[test]
    fn plans_are_followed_without_divergence() {
        let mut c = ctl();
        for (id, w, g) in [(1, 1, 4), (2, 2, 2), (3, 1, 1), (4, 3, 1), (5, 1, 8)] {
            run(&mut c, &job(id, w, g), 0);
        }
        assert_eq!(c.counters.divergences, 0);
        assert_eq!(c.counters.narrowed, 5);
        assert_eq!(c.self_check(), None);
        let s = c.snapshot(1, true);
        // 4+4+1+3 = 12 GPUs on one full node plus one 4-GPU node, 8 on a third
        assert!(s.partial_nodes <= 1, "{}", s.render(1));
        assert_eq!(s.n_sif, 0.0);
    }

    #[test]
    fn a_refused_requeue_counts_as_a_failed_migration() {
        let mut c = ctl();
        let mk = |id| JobInfo {
            flags: Some(JobFlags {
                min_runtime_s: 0,
                resumable: true,
                migration_cost_s: None,
            }),
            ..job(id, 1, 4)
        };
        for id in 1..=3 {
            run(&mut c, &mk(id), 0);
        }
        assert!(c.tick(1000).is_empty());
        c.fini(1, 1000);
        let orders = c.tick(1000);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!(c.requeue_failed(&orders[0], 1000), None);
        let s = c.snapshot(1000, true);
        assert_eq!((s.migrations_failed, s.migrations_done), (1, 0));
        assert!(s.pending_migrations.is_empty(), "{s:?}");
    }

    /// Jobs 1, 2 (4 GPUs each) share a node and 3 (4 GPUs) sits alone;
    /// job 1 ends at 1000: Compact would move 2 or 3 next to the other.
    fn one_move_due(config: SelectConfig) -> Controller {
        let mut c = ctl_with(config);
        for id in 1..=3 {
            run(&mut c, &job(id, 1, 4), 0);
        }
        assert!(c.tick(1000).is_empty());
        c.fini(1, 1000);
        c
    }

    #[test]
    fn move_when_waiting_moves_nobody_while_no_job_waits() {
        let waiting = SelectConfig {
            move_when: MoveWhen::Waiting,
            ..Config::default().select
        };
        assert_eq!(
            Config::default().select.move_when,
            MoveWhen::Pays,
            "the site default"
        );
        let mut c = one_move_due(waiting.clone());
        assert!(c.tick(1000).is_empty(), "nobody waits: no move pays");
        let s = c.snapshot(1000, true);
        assert_eq!(s.kept_still.get("no-gain"), Some(&2), "{}", s.render(1000));
        assert_eq!(s.partial_nodes, 2);
        // The same departure with `always` moves job 3.
        assert_eq!(one_move_due(always()).tick(1000).len(), 1);

        // A 32-GPU job waits (Slurm offered it to narrow; no room): the gate
        // opens and Compact, due again, makes the move.
        let mut c = one_move_due(waiting.clone());
        assert!(c.tick(1000).is_empty());
        let all = NodeSet::full(4);
        assert_eq!(c.narrow(&job(9, 4, 8), &all), Ok(None), "no room for 4 x 8");
        let orders = c.tick(1001);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert!([2, 3].contains(&orders[0].job), "{orders:?}");
    }

    #[test]
    fn a_job_slurm_starts_on_a_migrations_target_takes_the_room_from_it() {
        // Jobs 2 and 3 (4 GPUs each) on two nodes once job 1 left: Compact
        // moves one onto the other's node. It is requeued; before it
        // restarts, Slurm starts a job the plugin does not narrow on the
        // GPUs it sees free there (outside the model: `--gpus=4` that may
        // spread; in Slurm's testsuite also `-w` jobs and GPU-less
        // `--exclusive` jobs, which cons_tres gives every GPU of a node).
        let mut c = one_move_due(always());
        let orders = c.tick(1000);
        assert_eq!(orders.len(), 1, "{orders:?}");
        let moved = orders[0].job;
        let target = orders[0].to_nodes[0];
        assert_eq!(c.fini(moved, 1001), None, "the requeue");
        let outside = unmodelled(9, Mapping::Outside("--gpus=4".into()));
        let log = c.begin(&outside, &[(target, 4)], 1002);
        assert!(
            log.as_deref()
                .is_some_and(|l| l.contains(&format!("migrating job(s) [{moved}]"))),
            "{log:?}"
        );
        assert_eq!(c.counters.engine_errors, 0, "the engine records job 9");
        assert_eq!(c.counters.targets_yielded, 1);
        assert_eq!(c.pinned(moved), None, "the moved job plans anew");
        assert_eq!(
            c.engine.free_on(target),
            Some(0),
            "job 9's 4 GPUs and the other job's 4"
        );
        // When it restarts elsewhere, it is a plain start, its cool-down
        // running since its pin was dropped.
        let other = (0..4).find(|&n| c.engine.free_on(n) == Some(8)).unwrap();
        assert_eq!(c.begin(&job(moved, 1, 4), &[(other, 4)], 1003), None);
        assert_eq!(c.counters.migrations_done, 0);
        c.engine.check_invariants().unwrap();

        // The same start a moment earlier, between the order and its
        // requeue (the plugin's thread has not made it yet): the moved job
        // goes back to where Slurm still runs it, and the requeue that
        // follows is a plain end.
        let mut c = one_move_due(always());
        let orders = c.tick(1000);
        let (moved, target) = (orders[0].job, orders[0].to_nodes[0]);
        let from = c.jobs[&moved].per_node[0].0;
        let log = c.begin(&outside, &[(target, 4)], 1001);
        assert!(log.is_some_and(|l| l.contains("migrating job(s)")));
        assert_eq!(c.counters.engine_errors, 0, "the engine records job 9");
        assert_eq!(c.pinned(moved), None);
        assert_eq!(c.engine.free_on(from), Some(4), "back where it runs");
        assert_eq!(c.fini(moved, 1002), None, "the requeue");
        assert_eq!(c.engine.free_on(from), Some(8));
        assert_eq!(c.counters.engine_errors, 0);
        c.engine.check_invariants().unwrap();
    }

    #[test]
    fn a_waiting_job_stops_counting_when_it_starts_or_is_not_offered_again() {
        let mut c = one_move_due(Config::default().select);
        let all = NodeSet::full(4);
        // The waiting job starts: nobody waits again.
        let small = job(8, 1, 8);
        assert!(c.narrow(&small, &all).unwrap().is_some());
        let n = c
            .narrow(&small, &all)
            .unwrap()
            .unwrap()
            .iter()
            .next()
            .unwrap();
        assert_eq!(c.begin(&small, &[(n, 8)], 1000), None);
        assert!(c.tick(1000).is_empty(), "the only waiting job started");
        // One offered at 1000 and never again stops counting after the TTL.
        assert_eq!(c.narrow(&job(9, 4, 8), &all), Ok(None));
        let mut c2 = one_move_due(Config::default().select);
        assert_eq!(c2.narrow(&job(9, 4, 8), &all), Ok(None));
        assert!(c2.gate(1000));
        assert!(c2.gate(1000 + WAITING_TTL_S));
        assert!(!c2.gate(1001 + WAITING_TTL_S), "not offered for too long");
    }

    #[test]
    fn move_when_fits_moves_only_for_a_job_the_free_gpus_could_hold() {
        let fits = SelectConfig {
            move_when: MoveWhen::Fits,
            ..Config::default().select
        };
        let all = NodeSet::full(4);
        // 20 GPUs free after the departure: a 4 x 8 job waits on capacity,
        // which no move repairs.
        let mut c = one_move_due(fits.clone());
        assert_eq!(c.narrow(&job(9, 4, 8), &all), Ok(None));
        assert!(c.tick(1000).is_empty());
        // A 2 x 8 job could use the 20 free GPUs if they were whole nodes.
        assert_eq!(c.narrow(&job(10, 3, 8), &all), Ok(None));
        assert_eq!(c.tick(1001).len(), 1);
    }

    #[test]
    fn move_when_starts_moves_only_when_a_waiting_job_gains_room() {
        let starts = SelectConfig {
            move_when: MoveWhen::Starts,
            ..Config::default().select
        };
        let all = NodeSet::full(4);
        // After the departure two nodes are empty and two half full: a
        // 2 x 8 job fits already, a 4 x 8 job fits neither way. The move
        // would start neither: it is not made.
        let mut c = one_move_due(starts.clone());
        assert!(c.narrow(&job(9, 2, 8), &all).unwrap().is_some());
        assert_eq!(c.narrow(&job(10, 4, 8), &all), Ok(None));
        assert!(c.tick(1000).is_empty());
        assert_eq!(c.counters.compacts_no_gain, 1);
        let state = c.snapshot(1000, true);
        assert_eq!(state.partial_nodes, 2, "the engine is as before");
        assert_eq!(
            state.move_when.as_deref(),
            Some("starts"),
            "published for replays"
        );
        // A 3 x 8 job newly waits: one move makes a third whole node.
        assert_eq!(c.narrow(&job(11, 3, 8), &all), Ok(None));
        let orders = c.tick(1001);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert!([2, 3].contains(&orders[0].job), "{orders:?}");
        assert_eq!(c.counters.compacts_no_gain, 1);
    }

    #[test]
    fn move_when_pays_holds_only_the_moved_jobs_that_do_not_pay() {
        let pays = pays();
        // Jobs 2 and 3 (1 x 4) on two nodes at 1,000 s, a 4 x 8 job waits
        // (no move starts it). `limits`: their time limits; 1,600 s leaves
        // 600 s, worth a move at all (payback 2) but short of 60 s + 20 x
        // 60 s for a tidying one; none is taken as long. Compact
        // moves one of them next to the other, whichever it picks first:
        // if that one does not pay, it is held and the other moves. Job 4
        // (1 x 8, not resumable, no limit) keeps the head from any
        // reservation, so the head's guard holds nobody.
        let tidy = |limits: [Option<u64>; 2]| {
            let mut c = ctl_with(pays.clone());
            run(&mut c, &job(1, 1, 4), 0);
            let pinned = JobInfo {
                flags: None,
                ..job(4, 1, 8)
            };
            run(&mut c, &pinned, 0);
            for (id, limit) in [(2, limits[0]), (3, limits[1])] {
                let j = JobInfo {
                    time_limit_s: limit,
                    ..job(id, 1, 4)
                };
                run(&mut c, &j, 0);
            }
            assert!(c.tick(1000).is_empty());
            c.fini(1, 1000);
            assert_eq!(c.narrow(&job(10, 4, 8), &NodeSet::full(4)), Ok(None));
            let orders: Vec<u64> = c.tick(1000).iter().map(|o| o.job).collect();
            let counts = (c.counters.compacts_no_gain, c.counters.compacts_tidying);
            (c, orders, counts)
        };
        let result = |(_, orders, counts)| (orders, counts);
        assert_eq!(result(tidy([Some(1600), None])), (vec![3], (1, 1)));
        assert_eq!(result(tidy([None, Some(1600)])), (vec![2], (1, 1)));
        let (_, both, _) = tidy([None, None]);
        assert_eq!(both.len(), 1, "either pays: one move");
        // Neither pays: both stay held for the next Compacts, which no
        // longer try them.
        let (mut c, orders, counts) = tidy([Some(1600), Some(1600)]);
        assert_eq!((orders, counts), (vec![], (1, 0)));
        assert_eq!(c.tidy_held, BTreeSet::from([2, 3]));
        let kept = c.snapshot(1000, true).kept_still;
        assert_eq!(kept.get("no-gain"), Some(&2), "{kept:?}");
        c.compact_due = true;
        assert!(c.tick(1001).is_empty());
        assert_eq!(c.counters.compacts_no_gain, 1, "nothing tried again");
        // A 2 x 8 job waits, which one move starts: they are free to move.
        assert_eq!(c.narrow(&job(11, 2, 8), &NodeSet::full(4)), Ok(None));
        let orders = c.tick(1002);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert!(c.tidy_held.is_empty());
    }

    #[test]
    fn a_tidying_compact_that_meets_too_many_unpaid_jobs_moves_nothing() {
        // Twelve nodes; ten 1-GPU jobs, each alone on a node (Slurm put
        // them there). Jobs 3 to 10 have 1,600 s limits, which leave 600 s
        // at 1,000 s: their tidying moves do not pay; jobs 1 and 2 have no
        // limit and are taken as long. A 12 x 8 job waits, which no move
        // starts. The pool pass offers the emptiest-last nodes first (jobs
        // 10, 9, ...): each is refused and held, one question each, and at
        // the eighth refusal (TIDY_TRIALS) the Compact gives up before it
        // reaches job 2, whose move would pay: nothing moves.
        assert_eq!(TIDY_TRIALS, 8);
        let mut c = ctl_on(pays(), 12);
        for id in 1..=10 {
            let j = JobInfo {
                time_limit_s: (id > 2).then_some(1600),
                ..job(id, 1, 1)
            };
            assert_eq!(c.begin(&j, &[(id as NodeId - 1, 1)], 0), None);
        }
        assert!(c.tick(0).is_empty(), "nobody waits");
        let before = c.snapshot(1000, true).partial_nodes;
        assert_eq!(before, 10);
        assert_eq!(c.narrow(&job(20, 12, 8), &NodeSet::full(12)), Ok(None));
        assert!(c.tick(1000).is_empty());
        assert_eq!(c.tidy_held, (3..=10).collect::<BTreeSet<u64>>());
        assert_eq!(
            (c.counters.compacts_no_gain, c.counters.compacts_tidying),
            (1, 0)
        );
        assert_eq!(
            c.snapshot(1000, true).partial_nodes,
            before,
            "nothing moved"
        );
        assert_eq!(c.self_check(), None);
        // The next Compact does not ask about them again: job 2's move,
        // which pays, is made.
        c.compact_due = true;
        let orders: Vec<u64> = c.tick(1001).iter().map(|o| o.job).collect();
        assert_eq!(orders, vec![2]);
    }

    #[test]
    fn a_trial_that_started_nobody_is_not_made_again_for_the_same_chances() {
        // Five nodes, Slurm's own layout: n1 holds job 1 (1 x 4); n2 and n3
        // each a 1 x 4 and a 1 x 2 job, not resumable, and two free GPUs;
        // n4 and n5 each a 1-GPU job (jobs 3 and 4) beside six 1-GPU jobs
        // not resumable. Ten GPUs are free and n1 could be emptied as far
        // as the bound counts (`Blocked::may_start_after_moves`), so a
        // waiting 1 x 8 job makes the gate try a Compact. It moves job 3
        // or 4 onto the other pool node, which starts nobody (job 1's four
        // GPUs fit on no other node). Jobs 1, 3 and 4 have 1,600 s limits:
        // at 1,000 s their tidying moves do not pay, so nothing moves.
        let mut c = ctl_on(pays(), 5);
        let limited = |id, g| JobInfo {
            time_limit_s: Some(1600),
            ..job(id, 1, g)
        };
        let pinned = |id, g| JobInfo {
            flags: None,
            ..job(id, 1, g)
        };
        let mut layout = vec![
            (limited(1, 4), 0, 4),
            (pinned(5, 4), 1, 4),
            (pinned(6, 2), 1, 2),
            (pinned(7, 4), 2, 4),
            (pinned(8, 2), 2, 2),
            (limited(3, 1), 3, 1),
            (limited(4, 1), 4, 1),
        ];
        for k in 0..12 {
            layout.push((pinned(10 + k, 1), 3 + k as NodeId / 6, 1));
        }
        for (j, n, g) in &layout {
            assert_eq!(c.begin(j, &[(*n, *g)], 0), None);
        }
        assert!(c.tick(0).is_empty(), "nobody waits");
        assert_eq!(c.narrow(&job(30, 1, 8), &NodeSet::full(5)), Ok(None));
        let before = c.snapshot(1000, true).nodes;
        assert!(c.tick(1000).is_empty());
        assert_eq!(c.counters.gate_trials, 1, "the bound lets a trial through");
        assert_eq!(c.snapshot(1000, true).nodes, before, "nothing moved");
        assert_eq!(
            (c.counters.tidies_deferred, c.counters.compacts_no_gain),
            (1, 0),
            "its tidying Compact is left to the next tick"
        );
        // The next tick makes the tidying Compact the trial left to it,
        // without a look at the chances: job 3's or 4's move does not pay.
        assert!(c.tick(1001).is_empty());
        assert_eq!(
            (c.counters.gate_trials, c.counters.gate_trials_remembered),
            (1, 0)
        );
        assert_eq!(c.counters.compacts_no_gain, 1, "the tidying Compact ran");
        assert_eq!(c.snapshot(1001, true).nodes, before, "nothing moved");
        // The same chances at the next Compact: the failed trial covers
        // them, and the tick tidies again.
        c.compact_due = true;
        assert!(c.tick(1002).is_empty());
        assert_eq!(
            (c.counters.gate_trials, c.counters.gate_trials_remembered),
            (1, 1)
        );
        assert_eq!(c.snapshot(1002, true).nodes, before, "nothing moved");
        // Remembered for TRIAL_MEMORY_S seconds only.
        c.compact_due = true;
        assert!(c.tick(1000 + TRIAL_MEMORY_S - 1).is_empty());
        assert_eq!(c.counters.gate_trials, 1);
        c.compact_due = true;
        assert!(c.tick(1000 + TRIAL_MEMORY_S).is_empty());
        assert_eq!(c.counters.gate_trials, 2, "tried again");
        // A chance of another width is new: a 2 x 4 job waits. The tick
        // after a trial that started nobody tidies and makes no trial; the
        // one after it tries.
        assert_eq!(c.narrow(&job(31, 2, 4), &NodeSet::full(5)), Ok(None));
        assert!(c.tick(1000 + TRIAL_MEMORY_S + 1).is_empty());
        assert_eq!(c.counters.gate_trials, 2, "the deferred tidying first");
        assert_eq!(c.counters.tidies_deferred, 2);
        c.compact_due = true;
        c.tick(1000 + TRIAL_MEMORY_S + 2);
        assert_eq!(c.counters.gate_trials, 3);
        assert_eq!(c.self_check(), None);
    }

    #[test]
    fn a_trial_that_moves_nothing_is_remembered_as_failed() {
        // Three nodes: n1 holds job 1 (1 x 4, free to move), n2 and n3 a
        // 1 x 6 job each, not resumable. Eight GPUs are free and n1 could
        // be emptied as far as the bound counts, so a waiting 1 x 8 job
        // makes the gate try a Compact; job 1 fits on no other node, so
        // the trial moves nothing and starts nobody. It is remembered as a
        // failed one: the same chances a second later make no trial.
        let mut c = ctl_on(pays(), 3);
        let pinned = |id, g| JobInfo {
            flags: None,
            ..job(id, 1, g)
        };
        assert_eq!(c.begin(&job(1, 1, 4), &[(0, 4)], 0), None);
        assert_eq!(c.begin(&pinned(2, 6), &[(1, 6)], 0), None);
        assert_eq!(c.begin(&pinned(3, 6), &[(2, 6)], 0), None);
        assert!(c.tick(0).is_empty(), "nobody waits");
        assert_eq!(c.narrow(&job(30, 1, 8), &NodeSet::full(3)), Ok(None));
        let before = c.snapshot(1000, true).nodes;
        assert!(c.tick(1000).is_empty());
        assert_eq!(c.counters.gate_trials, 1, "the bound lets a trial through");
        assert_eq!(c.snapshot(1000, true).nodes, before, "nothing moved");
        // The next tick tidies, as after any trial that started nobody;
        // the one after has the same chances and makes no trial.
        assert!(c.tick(1001).is_empty());
        assert_eq!(
            (c.counters.gate_trials, c.counters.gate_trials_remembered),
            (1, 0)
        );
        c.compact_due = true;
        assert!(c.tick(1002).is_empty());
        assert_eq!(
            (c.counters.gate_trials, c.counters.gate_trials_remembered),
            (1, 1),
            "the trial that moved nothing covers the same chances"
        );
        assert_eq!(c.self_check(), None);
    }

    #[test]
    fn a_trial_releases_a_bounded_turn_of_the_held_jobs() {
        // n0 holds seven pinned 1-GPU jobs and a free GPU, n1 job X (1 GPU)
        // alone, and the nodes after it TRIAL_RELEASES 1-GPU jobs, eight
        // each. Every resumable job is held for tidying (its move would not
        // pay: 500 s left of 1,500). A waiting 1 x 8 job starts if X moves
        // into n0's free GPU, but X has the highest id: the gate's first
        // trial releases the first TRIAL_RELEASES held jobs only, and X
        // stays held. The next trial (once the memory of the failed one
        // lapses) releases the next turn, X with it, and X moves.
        assert_eq!(TRIAL_RELEASES % 8, 0, "the nodes after n1 are full");
        let nodes = 2 + (TRIAL_RELEASES / 8) as u32;
        let mut c = ctl_on(pays(), nodes);
        let short = |id| JobInfo {
            time_limit_s: Some(1500),
            ..job(id, 1, 1)
        };
        for id in 1..=7 {
            let pinned = JobInfo {
                flags: None,
                ..job(id, 1, 1)
            };
            assert_eq!(c.begin(&pinned, &[(0, 1)], 0), None);
        }
        let x = 1000;
        assert_eq!(c.begin(&short(x), &[(1, 1)], 0), None);
        let mut held = vec![JobId(x)];
        for (k, id) in (8..8 + TRIAL_RELEASES as u64).enumerate() {
            let node = 2 + k as u32 / 8;
            assert_eq!(c.begin(&short(id), &[(node, 1)], 0), None);
            held.push(JobId(id));
        }
        assert!(c.tick(0).is_empty(), "nobody waits");
        c.hold_for_tidying(&held);
        let wide = job(2000, 1, 8);
        assert_eq!(c.narrow(&wide, &NodeSet::full(nodes)), Ok(None));
        c.compact_due = true;
        assert!(c.tick(1000).is_empty(), "X was not released");
        assert_eq!(c.counters.gate_trials, 1);
        assert!(c.tidy_held.contains(&x), "X is still held");
        assert_eq!(c.tidy_held.len(), held.len(), "every job held again");
        // The tidying Compact the failed trial left to the next tick: no
        // held job's move pays, nothing moves.
        assert!(c.tick(1001).is_empty());
        assert_eq!(c.counters.tidies_deferred, 1);
        assert_eq!(c.tidy_held.len(), held.len());
        let t = 1000 + TRIAL_MEMORY_S + 1;
        assert_eq!(c.narrow(&wide, &NodeSet::full(nodes)), Ok(None));
        c.compact_due = true;
        let orders = c.tick(t);
        assert_eq!(c.counters.gate_trials, 2);
        assert_eq!(
            orders,
            vec![MigrationOrder {
                job: x,
                to_nodes: vec![0]
            }]
        );
        assert!(!c.tidy_held.contains(&x), "released by the trial kept");
        assert_eq!(c.tidy_held.len(), held.len() - TRIAL_RELEASES);
        assert_eq!(c.self_check(), None);
    }

    #[test]
    fn move_when_pays_tidies_only_with_jobs_expected_to_run_long_enough() {
        let pays = pays();
        // One move due (jobs 2 and 3, 1 x 4, started at 0, on two nodes);
        // a 4 x 8 job waits, which no move lets start. `runs`: the runs of
        // jobs that ended before (restored, as after a restart).
        let due = |runs: Vec<u64>| {
            let mut c = ctl_with(pays.clone());
            c.restore(
                &Saved {
                    format: SAVED_FORMAT,
                    runs,
                    ..Saved::default()
                },
                0,
            );
            for id in 1..=3 {
                run(&mut c, &job(id, 1, 4), 0);
            }
            assert!(c.tick(1000).is_empty());
            c.fini(1, 1000);
            let all = NodeSet::full(4);
            assert_eq!(c.narrow(&job(10, 4, 8), &all), Ok(None));
            c
        };
        // Jobs that ended ran 1,100 s: at 1,000 s, jobs 2 and 3 have about
        // 100 s left, short of 60 s + 20 x 60 s. No move.
        let mut c = due(vec![1100; RunHistory::MIN_RUNS]);
        assert!(c.tick(1000).is_empty());
        assert_eq!(
            (c.counters.compacts_no_gain, c.counters.compacts_tidying),
            (1, 0)
        );
        assert!(
            c.saved(1000).runs.ends_with(&[1000]),
            "job 1's run is recorded"
        );
        // They ran 5,000 s: about 4,000 s left, enough: one tidying move.
        let mut c = due(vec![5000; RunHistory::MIN_RUNS]);
        let orders = c.tick(1000);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!(
            (c.counters.compacts_no_gain, c.counters.compacts_tidying),
            (1, 1)
        );
        // Too few runs to say, and no time limit: taken as long.
        let mut c = due(vec![1100; RunHistory::MIN_RUNS - 2]);
        assert_eq!(c.tick(1000).len(), 1);
        // `starts` never tidies.
        let mut c = one_move_due(SelectConfig {
            move_when: MoveWhen::Starts,
            ..pays.clone()
        });
        assert_eq!(c.narrow(&job(10, 4, 8), &NodeSet::full(4)), Ok(None));
        assert!(c.tick(1000).is_empty());
    }

    #[test]
    fn a_node_taken_out_of_a_running_job_is_free_in_the_engine() {
        let mut c = ctl();
        let all = NodeSet::full(4);
        // Job 1 (2 x 4) on n1 and n2, 8-GPU jobs on n3 and n4.
        let mut wide = job(1, 2, 4);
        wide.mapping = Mapping::Model {
            shape: JobShape::new(2, 4),
            distinct_nodes: true,
        };
        assert_eq!(c.begin(&wide, &[(0, 4), (1, 4)], 100), None);
        for (id, n) in [(2, 2), (3, 3)] {
            assert_eq!(c.begin(&job(id, 1, 8), &[(n, 8)], 100), None);
        }
        let start = c.jobs[&1].start;
        // Slurm shrinks job 1 to n1 (`scontrol update NumNodes=1`).
        assert_eq!(c.resized(1, 1, None, 500), None);
        let rec = c.engine.job(JobId(1)).unwrap();
        assert_eq!(rec.request.shape, JobShape::new(1, 4));
        assert_eq!(rec.nodes, vec![0]);
        assert_eq!(c.engine.free_on(1), Some(8));
        assert_eq!(c.jobs[&1].start, start, "its start (protection) stands");
        assert_eq!(&c.jobs[&1].per_node[..], &[(0, 4)]);
        // An 8-GPU job is planned on the node freed (before: no plan).
        assert_eq!(
            c.narrow(&job(4, 1, 8), &all),
            Ok(Some(NodeSet::from_nodes(4, [1])))
        );
        assert_eq!(c.self_check(), None);
        // A node the job does not hold, an unknown job: nothing changes.
        assert_eq!(c.resized(1, 3, None, 500), None);
        assert_eq!(c.resized(99, 0, None, 500), None);
        assert_eq!(c.engine.job(JobId(1)).unwrap().nodes, vec![0]);
        // Its last node taken out: it ends in the engine.
        assert_eq!(c.resized(1, 0, None, 500), None);
        assert!(!c.knows(1));
        assert_eq!(c.engine.free_on(0), Some(8));
    }

    #[test]
    fn a_migrating_job_that_is_resized_gives_its_migration_up() {
        let mut c = full_with_job_1_moving_to_node_0();
        // Job 1 also holds n2 (id 1) in Slurm's record: a 2 x 8 job.
        c.fini(2, 100);
        let mut wide = job(1, 2, 8);
        wide.mapping = Mapping::Model {
            shape: JobShape::new(2, 8),
            distinct_nodes: true,
        };
        c.migrating.remove(&1);
        c.pins.remove(&1);
        c.fini(1, 100);
        assert_eq!(c.begin(&wide, &[(0, 8), (1, 8)], 100), None);
        c.mark_migrating(
            &MigrationOrder {
                job: 1,
                to_nodes: vec![0, 1],
            },
            200,
        );
        assert!(c.still_ordered(1));
        assert_eq!(c.resized(1, 0, None, 300), None);
        assert!(!c.still_ordered(1), "the requeue is not made");
        assert_eq!(c.pinned(1), None);
        assert_eq!(c.engine.job(JobId(1)).unwrap().nodes, vec![1]);
        assert_eq!(c.engine.free_on(0), Some(8));
        assert_eq!(c.self_check(), None);
    }

    #[test]
    fn departure_migrates_resumable_jobs_only() {
        for resumable in [true, false] {
            let mut c = ctl();
            let mk = |id| JobInfo {
                flags: Some(JobFlags {
                    min_runtime_s: 0,
                    resumable,
                    migration_cost_s: None,
                }),
                ..job(id, 1, 4)
            };
            let n1 = run(&mut c, &mk(1), 0);
            let n2 = run(&mut c, &mk(2), 0);
            let n3 = run(&mut c, &mk(3), 0);
            assert_eq!(n1, n2, "two 4-GPU instances share a node");
            assert_ne!(n1, n3);
            // past the first minutes of run time: resumable jobs become movable
            assert!(c.tick(1000).is_empty());
            c.fini(1, 1000);
            let orders = c.tick(1000);
            if !resumable {
                assert!(
                    orders.is_empty(),
                    "non-resumable jobs are never migrated: {orders:?}"
                );
                assert_eq!(c.snapshot(1000, true).partial_nodes, 2);
                continue;
            }
            assert_eq!(orders.len(), 1, "{orders:?}");
            let o = &orders[0];
            // handed out pinned; the requeue: fini (kept in the engine), then restart on the target
            assert_eq!(c.pinned(o.job), Some(&o.to_nodes[..]));
            assert!(!c.may_widen(99));
            c.fini(o.job, 1000);
            let cand = NodeSet::full(4);
            let pinned = c.narrow(&mk(o.job), &cand).unwrap().unwrap();
            assert_eq!(pinned.iter().collect::<Vec<_>>(), o.to_nodes);
            c.begin(&mk(o.job), &[(o.to_nodes[0], 4)], 1001);
            assert_eq!(c.counters.migrations_done, 1);
            assert_eq!(c.snapshot(1001, true).partial_nodes, 0);
            // cool-down: the same job is not movable again for 10 minutes,
            // in the engine too (it was movable when it was chosen)
            let rec = c.engine.job(JobId(o.job)).unwrap();
            assert!(!rec.request.movable, "migrated job left movable");
            c.fini(if o.job == 2 { 3 } else { 2 }, 1000);
            assert!(c.tick(1002).is_empty());
        }
    }

    /// Jobs 1 and 2 (1 x 4, not resumable) on one node, job 3 (1 x 2,
    /// resumable) on another; `keep` is called with the first node before
    /// job 1 ends. Returns the controller, the two nodes and the orders of
    /// the tick after job 1's end.
    fn a_node_kept_or_not(
        keep: impl FnOnce(&mut Controller, NodeId),
    ) -> (Controller, NodeId, NodeId, Vec<MigrationOrder>) {
        let mut c = ctl();
        let pinned = |id| JobInfo {
            flags: Some(JobFlags {
                min_runtime_s: 0,
                resumable: false,
                migration_cost_s: None,
            }),
            ..job(id, 1, 4)
        };
        let full = run(&mut c, &pinned(1), 0);
        assert_eq!(run(&mut c, &pinned(2), 0), full);
        let other = run(&mut c, &job(3, 1, 2), 0);
        assert_ne!(other, full);
        assert!(c.tick(1000).is_empty());
        keep(&mut c, full[0]);
        c.fini(1, 1000);
        let orders = c.tick(1000);
        (c, full[0], other[0], orders)
    }

    #[test]
    fn a_node_a_waiting_job_needs_takes_no_migration_while_it_waits() {
        // Slurm's test1.84 under compass (issue #11): `srun --exclusive -w
        // n3` waited while Compact moved jobs onto n3, each restarting
        // first in the queue. Unkept, job 1's end moves job 3 onto the
        // node of job 2; kept for waiting job 99 (no GPUs), nothing moves
        // there.
        let (_, full, _, orders) = a_node_kept_or_not(|_, _| ());
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!((orders[0].job, &orders[0].to_nodes[..]), (3, &[full][..]));

        let (mut c, full, other, orders) = a_node_kept_or_not(|c, n| {
            let kept = c.keep_for_waiting(99, &[n], KeepNodes::Named, 1000);
            let kept = kept.expect("newly kept");
            assert!(kept.first);
            assert!(kept
                .line
                .contains(&format!("job 99 waits for node(s) n{}", n + 1)));
        });
        assert!(orders.is_empty(), "a move onto a kept node: {orders:?}");
        assert_eq!(c.kept_for(99), Some(&[full][..]));
        assert_eq!(c.counters.kept_for_waiting, 1);
        // No new instance goes there either while another node has room.
        let all = NodeSet::full(4);
        let plan = c.narrow(&job(4, 1, 4), &all).unwrap().unwrap();
        assert!(
            !plan.contains(full),
            "{:?}",
            plan.iter().collect::<Vec<_>>()
        );
        c.planned.remove(&4);
        c.waiting.remove(4);
        // Tested again while it waits: the same nodes, no new line.
        assert_eq!(
            c.keep_for_waiting(99, &[full], KeepNodes::Named, 1100),
            None
        );
        c.still_waiting(99, 1200);
        assert!(c.tick(1200 + WAITING_TTL_S).is_empty(), "kept still");
        // Not tested for longer than WAITING_TTL_S (cancelled or held):
        // the node takes the move again.
        let orders = c.tick(1201 + WAITING_TTL_S);
        assert_eq!(c.kept_for(99), None);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!((orders[0].job, &orders[0].to_nodes[..]), (3, &[full][..]));
        assert_ne!(other, full);

        // The job starts (on its node, no GPUs): nothing is kept for it.
        let (mut c, full, _, _) = a_node_kept_or_not(|c, n| {
            c.keep_for_waiting(99, &[n], KeepNodes::Named, 1000);
        });
        c.begin(&unmodelled(99, Mapping::NoGpu), &[(full, 0)], 1001);
        assert_eq!(c.kept_for(99), None);
        // A node Slurm reports drained stays unusable when the job that
        // kept it stops waiting, and a kept node stays unusable when Slurm
        // resumes it.
        let usable =
            |c: &Controller, n: usize| c.pools().engine(0).unwrap().snapshot().nodes[n].usable;
        let mut c = ctl();
        c.keep_for_waiting(7, &[0, 1], KeepNodes::Named, 0);
        assert_eq!(c.set_usable_nodes(&[("n1".into(), false)]), vec!["n1"]);
        c.fini(7, 1);
        assert!(!usable(&c, 0));
        assert!(usable(&c, 1));
        c.keep_for_waiting(8, &[0], KeepNodes::Named, 2);
        c.set_usable_nodes(&[("n1".into(), true)]);
        assert!(!usable(&c, 0));
        // The nodes a job names change (`scontrol update job NodeList=`): a
        // node in both stays kept, the one left behind takes moves again.
        let mut c = ctl();
        c.keep_for_waiting(9, &[1, 2], KeepNodes::Named, 0);
        let kept = c.keep_for_waiting(9, &[3, 2], KeepNodes::Named, 1);
        let kept = kept.expect("changed");
        assert!(!kept.first);
        assert!(kept.line.contains("node(s) n3,n4:"), "{}", kept.line);
        assert_eq!(
            (0..4).map(|n| usable(&c, n)).collect::<Vec<_>>(),
            [true, true, false, false]
        );
        assert_eq!(c.counters.kept_for_waiting, 1);
        // Slurm's plan for a restricted `--exclusive` job moves: every node
        // it was planned on stays kept, and a plan on kept nodes only says
        // nothing new.
        let mut c = ctl();
        c.keep_for_waiting(9, &[1], KeepNodes::Planned, 0);
        let kept = c.keep_for_waiting(9, &[2], KeepNodes::Planned, 1);
        assert!(kept.expect("grew").line.contains("node(s) n2,n3:"));
        assert_eq!(c.keep_for_waiting(9, &[1], KeepNodes::Planned, 2), None);
        assert_eq!(c.kept_for(9), Some(&[1, 2][..]));
        assert!(!usable(&c, 1) && !usable(&c, 2));
        // Bounded: KEPT_JOBS jobs at most, KEPT_NODES_PER_JOB nodes each.
        let mut c = ctl_on(always(), 100);
        let all: Vec<NodeId> = (0..100).collect();
        c.keep_for_waiting(1, &all, KeepNodes::Named, 0);
        assert_eq!(c.kept_for(1).map(<[_]>::len), Some(KEPT_NODES_PER_JOB));
        for j in 2..=KEPT_JOBS as u64 {
            assert!(c.keep_for_waiting(j, &[0], KeepNodes::Named, 0).is_some());
        }
        assert_eq!(c.keep_for_waiting(1000, &[99], KeepNodes::Named, 0), None);
        assert_eq!(c.counters.keeps_over_limit, 1);
        assert!(usable(&c, 99));
    }

    #[test]
    fn a_job_restricted_to_part_of_the_pool_is_never_migrated_outside_it() {
        // Two resumable 1x4 jobs on n1 and n2: Compact merges them onto one
        // node. Whichever node the engine would empty, the job restricted
        // to its own node (its partition) is never the one sent away; the
        // other one moves to it. Unrestricted, the same layout migrates the
        // job on n1 to n2 (the control): restricting that job to n1 is the
        // case the guard decides.
        for restricted in [None, Some(0), Some(1)] {
            let mut c = ctl();
            for (id, node) in [(1u64, 0), (2, 1)] {
                let allowed = (restricted == Some(node)).then(|| NodeSet::from_nodes(4, [node]));
                c.begin_within(&job(id, 1, 4), &[(node, 4)], allowed.as_ref(), 0);
            }
            let orders = c.tick(1000);
            assert_eq!(orders.len(), 1, "{restricted:?}: {orders:?}");
            let o = &orders[0];
            match restricted {
                Some(node) => {
                    let kept = u64::from(node) + 1;
                    assert_ne!(o.job, kept, "{orders:?}");
                    assert_eq!(o.to_nodes, vec![node], "{orders:?}");
                }
                None => assert_eq!((o.job, &o.to_nodes[..]), (1, &[1][..]), "{orders:?}"),
            }
        }
    }

    #[test]
    fn a_rebuild_keeps_each_adopted_job_inside_its_nodes() {
        // After a slurmctld restart (or a reconfigure) the plugin adopts the
        // running jobs into a fresh controller. Two resumable 1x4 jobs on n1
        // and n2; the job on n1 may only use n1 (its constraint's nodes).
        // Adopted without its restriction (as before this was read at the
        // rebuild), Compact sends it to n2; adopted with it, the job on n2
        // comes to n1 instead.
        for restrict in [false, true] {
            let mut c = ctl();
            let only_n1 = NodeSet::from_nodes(4, [0]);
            let allowed = restrict.then_some(&only_n1);
            assert_eq!(
                c.adopt_running_within(&job(1, 1, 4), &[(0, 4)], allowed, 0),
                None
            );
            assert_eq!(
                c.adopt_running_within(&job(2, 1, 4), &[(1, 4)], None, 0),
                None
            );
            c.compact();
            let orders = c.tick(1000);
            let moves: Vec<(u64, Vec<NodeId>)> =
                orders.iter().map(|o| (o.job, o.to_nodes.clone())).collect();
            let want = if restrict { (2, vec![0]) } else { (1, vec![1]) };
            assert_eq!(moves, vec![want], "restricted: {restrict}");
        }
    }

    #[test]
    fn protected_jobs_are_never_migrated_before_their_min_runtime() {
        // Three 1x4 jobs, one protected for an hour: the departure of a
        // partner leaves a lone instance, but the protected job must stay.
        let mut c = ctl();
        let protected = |id| JobInfo {
            flags: Some(JobFlags {
                min_runtime_s: 3600,
                resumable: true,
                migration_cost_s: None,
            }),
            ..job(id, 1, 4)
        };
        let n1 = run(&mut c, &protected(1), 0);
        let n2 = run(&mut c, &protected(2), 0);
        let n3 = run(&mut c, &protected(3), 0);
        assert_eq!(n1, n2);
        assert_ne!(n1, n3);
        c.fini(1, 1000);
        // past min_run_before_migration (5 min), inside the protection
        assert!(c.tick(1000).is_empty(), "protected jobs moved");
        assert!(c.tick(1001).is_empty(), "protected jobs moved");
        assert!(c.tick(3599).is_empty(), "protected jobs moved");
        // once the protection ends, that tick's Compact moves the lone
        // instance to the other, with no arrival or departure to ask for it
        let orders = c.tick(3600);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!(c.counters.migrations_ordered, 1);
    }

    #[test]
    fn a_job_about_to_end_is_not_moved_while_a_long_one_is() {
        // A and B share a node, C is alone; A ends at t=1000. C's time
        // limit (1100 s) leaves it 100 s: less than its 60 s migration cost
        // plus twice that earned back. B has no limit (unknown: long).
        let mut c = ctl();
        let limited = |id, limit| JobInfo {
            time_limit_s: limit,
            ..job(id, 1, 4)
        };
        let na = run(&mut c, &limited(1, None), 0);
        let nb = run(&mut c, &limited(2, None), 0);
        let nc = run(&mut c, &limited(3, Some(1100)), 0);
        assert_eq!(na, nb);
        assert_ne!(nb, nc);
        c.fini(1, 1000);
        let orders = c.tick(1000);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!(orders[0].job, 2, "the long job moves, not the ending one");
        assert_eq!(orders[0].to_nodes, nc);
        let s = c.snapshot(1000, true);
        assert_eq!(
            s.kept_still.get("ends-soon"),
            Some(&1),
            "{:?}",
            s.kept_still
        );
    }

    #[test]
    fn a_job_names_its_own_migration_cost() {
        // Both lone jobs have an hour's limit; at t=1000 2600 s are left.
        // At the 60 s site default they would move; at 30 min each, a move
        // would not pay (2600 - 1800 < 2 x 1800): nothing moves.
        for (cost, moves) in [(None, true), (Some(1800), false)] {
            let mut c = ctl();
            let mk = |id| JobInfo {
                time_limit_s: Some(3600),
                flags: Some(JobFlags {
                    min_runtime_s: 0,
                    resumable: true,
                    migration_cost_s: cost,
                }),
                ..job(id, 1, 4)
            };
            for id in 1..=3 {
                run(&mut c, &mk(id), 0);
            }
            c.fini(1, 1000);
            let orders = c.tick(1000);
            assert_eq!(!orders.is_empty(), moves, "cost {cost:?}: {orders:?}");
            if !moves {
                let s = c.snapshot(1000, true);
                assert_eq!(
                    s.kept_still.get("ends-soon"),
                    Some(&2),
                    "{:?}",
                    s.kept_still
                );
                assert!(s.render(1000).contains("kept still: ends-soon 2"));
            }
        }
    }

    #[test]
    fn a_rebuild_keeps_in_flight_migrations_and_cool_downs() {
        // Jobs 1 and 2 share a node, 3 is alone; 1 ends and Compact orders
        // one move. The requeue is done (fini) when slurmctld reconfigures.
        let mut c = ctl();
        let mut alloc = BTreeMap::new();
        for id in 1..=3 {
            alloc.insert(id, run(&mut c, &job(id, 1, 4), 0)[0]);
        }
        assert!(c.tick(1000).is_empty());
        c.fini(1, 1000);
        let orders = c.tick(1000);
        assert_eq!(orders.len(), 1, "{orders:?}");
        let (x, target) = (orders[0].job, orders[0].to_nodes.clone());
        let y = if x == 2 { 3 } else { 2 };
        c.fini(x, 1000);
        let saved = c.saved(1001);
        assert_eq!(saved.in_flight.len(), 1, "{saved:?}");
        assert_eq!(saved.in_flight[0].shape, Some((1, 4)));

        // reconfigure: a fresh controller, as select_p_job_init builds it
        let rebuild = |saved: &Saved, running: &[(u64, NodeId, u64)], now| {
            let mut c2 = ctl();
            c2.restore(saved, now);
            for &(j, n, start) in running {
                assert_eq!(c2.adopt_running(&job(j, 1, 4), &[(n, 4)], start), None);
            }
            c2.adopt_in_flight();
            c2.compact();
            c2
        };
        let mut c2 = rebuild(&saved, &[(y, alloc[&y], 0)], 1002);
        assert_eq!(c2.pinned(x), Some(&target[..]), "the pin survives");
        assert!(
            c2.tick(1003).is_empty(),
            "no new move while one is in flight"
        );
        let cand = NodeSet::full(4);
        let pinned = c2.narrow(&job(x, 1, 4), &cand).unwrap().unwrap();
        assert_eq!(pinned.iter().collect::<Vec<_>>(), target);
        c2.begin(&job(x, 1, 4), &[(target[0], 4)], 1004);
        assert_eq!(c2.counters.migrations_done, 1);
        assert_eq!(c2.snapshot(1004, true).partial_nodes, 0);
        assert_eq!(c2.self_check(), None);

        // another reconfigure within the cool-down: x stays still
        let saved = c2.saved(1010);
        assert_eq!(saved.last_migrated, vec![(x, 1004)]);
        let mut c3 = rebuild(&saved, &[(y, alloc[&y], 0), (x, target[0], 1004)], 1010);
        // (past the 5-minute start-up grace, inside the 10-minute cool-down)
        c3.tick(1400);
        assert_eq!(c3.jobs[&x].keep, Some(KeepReason::CoolingDown));
        assert_eq!(c3.jobs[&y].keep, None, "y was never migrated");
        // without the saved state x would be movable at once
        let mut fresh = rebuild(
            &Saved::default(),
            &[(y, alloc[&y], 0), (x, target[0], 1004)],
            1010,
        );
        fresh.tick(1400);
        assert_eq!(fresh.jobs[&x].keep, None);

        // pruning: past the cool-down, also for a job that ended (a job
        // requeued for another reason runs again under its id: its
        // cool-down stays until it ends by time)
        c2.tick(1004 + 600);
        assert!(c2.last_migrated.is_empty(), "{:?}", c2.last_migrated);
        c3.fini(x, 1401);
        c3.tick(1401);
        let saved = c3.saved(1401);
        assert_eq!(saved.last_migrated, vec![(x, 1004)]);
        assert!(saved.in_flight.is_empty());
        c3.tick(1004 + 600);
        assert!(c3.last_migrated.is_empty(), "{:?}", c3.last_migrated);
        assert!(
            saved.runs.ends_with(&[1401 - 1004]),
            "x's run since its restart: {:?}",
            saved.runs
        );
    }

    #[test]
    fn stale_or_unknown_saved_migrations_are_dropped() {
        let mut c = ctl();
        let saved = Saved {
            format: SAVED_FORMAT,
            last_migrated: vec![(5, 100), (6, 2000)],
            in_flight: vec![
                SavedMigration {
                    job: 7,
                    to_nodes: vec!["n1".into()],
                    since: 100,
                    shape: Some((1, 4)),
                },
                SavedMigration {
                    job: 8,
                    to_nodes: vec!["n99".into()],
                    since: 1990,
                    shape: Some((1, 4)),
                },
                SavedMigration {
                    job: 9,
                    to_nodes: vec!["n2".into()],
                    since: 1990,
                    shape: Some((1, 4)),
                },
            ],
            runs: vec![60, 120],
            kept: vec![
                (11, vec!["n3".into(), "n99".into()]),
                (12, vec!["n2".into()]),
            ],
            raised: Vec::new(),
        };
        c.restore(&saved, 2000);
        c.adopt_in_flight();
        // 5's cool-down is over; 7 and 8 were requeued for moves that
        // cannot be kept (pin expired, node gone): their cool-downs start.
        assert_eq!(c.last_migrated.keys().collect::<Vec<_>>(), vec![&6, &7, &8]);
        assert_eq!(c.saved(2000).runs, vec![60, 120], "the runs survive");
        assert_eq!(c.pinned(7), None, "expired pin");
        assert_eq!(c.pinned(8), None, "node gone");
        assert_eq!(c.pinned(9), Some(&[1][..]));
        // Nodes kept for waiting jobs survive (a node gone is dropped), for
        // WAITING_TTL_S from the rebuild; a job that started is dropped.
        assert_eq!(c.kept_for(11), Some(&[2][..]));
        assert_eq!(c.kept_for(12), Some(&[1][..]));
        c.adopt_running(&unmodelled(12, Mapping::NoGpu), &[(1, 0)], 2000);
        assert_eq!(c.kept_for(12), None);
        assert_eq!(c.saved(2000).kept, vec![(11, vec!["n3".to_string()])]);
        c.tick(2000 + WAITING_TTL_S);
        assert_eq!(c.kept_for(11), Some(&[2][..]));
        c.tick(2001 + WAITING_TTL_S);
        assert_eq!(c.kept_for(11), None);
    }

    #[test]
    fn unusable_nodes_are_never_planned() {
        let mut c = ctl();
        let changed = c.set_usable_nodes(&[
            ("n1".into(), false),
            ("n2".into(), false),
            ("n9".into(), false),
        ]);
        assert_eq!(changed, vec!["n1", "n2"]);
        assert!(
            c.set_usable_nodes(&[("n1".into(), false)]).is_empty(),
            "no change, no report"
        );
        for id in 1..=2 {
            // Slurm does not offer drained nodes
            let plan = c
                .narrow(&job(id, 1, 8), &NodeSet::from_nodes(4, [2, 3]))
                .unwrap()
                .unwrap();
            assert!(!plan.contains(0) && !plan.contains(1), "{plan:?}");
            let n = plan.iter().next().unwrap();
            c.begin(&job(id, 1, 8), &[(n, 8)], 0);
        }
        // n3 and n4 are full and n1, n2 unusable: no plan, so no narrowing
        assert_eq!(
            c.narrow(&job(3, 1, 8), &NodeSet::from_nodes(4, [2, 3])),
            Ok(None)
        );
        assert_eq!(c.set_usable_nodes(&[("n1".into(), true)]), vec!["n1"]);
        let plan = c
            .narrow(&job(3, 1, 8), &NodeSet::from_nodes(4, [0, 2, 3]))
            .unwrap()
            .unwrap();
        assert_eq!(plan.iter().collect::<Vec<_>>(), vec![0]);
        c.begin(&job(3, 1, 8), &[(0, 8)], 0);
        // a candidate Slurm offers is usable, whatever the last poll said
        let plan = c.narrow(&job(4, 1, 8), &NodeSet::full(4)).unwrap().unwrap();
        assert_eq!(plan.iter().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn rebuild_adopts_every_job_before_compacting() {
        // Slurm runs one 4-GPU job alone on each of four nodes (placed before
        // the plugin): adopting them one by one with Compact in between
        // would plan moves onto nodes whose jobs are not adopted yet.
        let mut c = ctl();
        assert!(c.tick(1000).is_empty());
        for n in 0..4 {
            assert_eq!(
                c.adopt_running(&job(u64::from(n) + 1, 1, 4), &[(n, 4)], 0),
                None
            );
        }
        assert_eq!(c.counters.engine_errors, 0);
        // The first tick finds them past their first minutes, free to move
        // now: it compacts, with every job adopted (as after the rebuild's
        // own `compact()`).
        let orders = c.tick(1000);
        assert_eq!(
            orders.len(),
            2,
            "two lone instances join the other two: {orders:?}"
        );
        let s = c.snapshot(1000, true);
        assert_eq!(s.engine_error, None);
    }

    #[test]
    fn snapshot_counts_slurm_allocation() {
        let mut c = ctl();
        c.begin(&job(1, 2, 4), &[(0, 8)], 10);
        c.begin(&job(2, 1, 3), &[(1, 3)], 10);
        c.begin(&unmodelled(3, Mapping::NoGpu), &[(2, 0)], 10);
        let s = c.snapshot(20, true);
        assert_eq!(s.nodes[0].used_gpus, 8);
        assert_eq!(s.nodes[1].used_gpus, 3);
        assert_eq!(s.partial_nodes, 1);
        assert_eq!(s.jobs.len(), 3);
        assert_eq!(s.jobs[0].nodes, vec!["n1", "n1"]);
        assert!(!s.jobs[0].foreign && !s.jobs[2].foreign);
        assert_eq!(s.nodes[2].jobs, vec![]);
        c.fini(2, 1000);
        assert_eq!(c.snapshot(21, true).partial_nodes, 0);
    }

    #[test]
    fn a_snapshot_of_the_records_that_changed_publishes_what_a_full_one_does() {
        // The plugin thread's rounds copy under the lock only the job
        // records that changed since the last round (issue #11: a copy of
        // every running job held the lock about 0.2 ms at 10,000 nodes)
        // and keep the rest themselves. After each step the state so built
        // is the one a copy of every job gives: jobs that start, whose
        // verdict changes at a tick (the start-up grace, then a
        // protection, end), that end or move (the engine's layout), nodes
        // drained, and a new controller's jobs, which replace the old ones.
        let mut published = Published::default();
        let mut check = |c: &mut Controller, now: u64| {
            let from_changes = c.snapshot_parts(now, true).finish(&mut published);
            assert_eq!(from_changes, c.snapshot(now, true), "at {now}");
        };
        let mut c = ctl();
        check(&mut c, 0);
        let protected = JobInfo {
            flags: Some(JobFlags {
                min_runtime_s: 600,
                resumable: true,
                migration_cost_s: None,
            }),
            ..job(1, 1, 4)
        };
        run(&mut c, &protected, 0);
        run(&mut c, &job(2, 1, 4), 0);
        run(&mut c, &job(3, 2, 2), 0);
        check(&mut c, 1);
        let kept = |c: &Controller, now| c.snapshot(now, true).kept_still;
        let before = kept(&c, 1);
        for now in [299, 301, 599, 601] {
            let _ = c.tick(now);
            check(&mut c, now);
        }
        assert_ne!(kept(&c, 601), before, "no verdict changed");
        c.fini(2, 700);
        let moved = c.tick(700);
        assert!(!moved.is_empty(), "Compact moved nothing");
        check(&mut c, 700);
        // A node drained, then back: the layout's nodes say so.
        for usable in [false, true] {
            let _ = c.set_usable_nodes(&[("n4".to_string(), usable)]);
            check(&mut c, 701);
        }
        let mut d = ctl();
        run(&mut d, &job(4, 1, 8), 0);
        check(&mut d, 1);
        assert_eq!(published.jobs.keys().copied().collect::<Vec<_>>(), vec![4]);
    }

    /// The site lab's node table (contrib/lab/slurm-site-nodes.conf.in):
    /// n1-n8 8xa100, n9-n12 4xl40s, n13-n14 2xgpu, n15-n18 CPU-only.
    fn site() -> Controller {
        let mut nodes = Vec::new();
        for i in 1..=18 {
            nodes.push(match i {
                1..=8 => NodeGpus::new(8, Some("a100")),
                9..=12 => NodeGpus::new(4, Some("l40s")),
                13..=14 => NodeGpus::new(2, None),
                _ => NodeGpus::new(0, None),
            });
        }
        let names = (1..=18).map(|i| format!("n{i}")).collect();
        Controller::with_nodes(always(), &nodes, names)
    }

    fn typed(id: u64, w: u32, g: u32, t: Option<&str>) -> JobInfo {
        JobInfo {
            gpu_type: t.map(str::to_string),
            ..job(id, w, g)
        }
    }

    fn plan(c: &mut Controller, j: &JobInfo, cand: &[NodeId]) -> Option<Vec<NodeId>> {
        let set = NodeSet::from_nodes(18, cand.iter().copied());
        c.narrow(j, &set).unwrap().map(|s| s.iter().collect())
    }

    #[test]
    fn mixed_cluster_jobs_are_planned_in_one_allowed_pool() {
        let mut c = site();
        let all: Vec<NodeId> = (0..18).collect();
        let gpu_partition: Vec<NodeId> = (0..14).collect();
        // GPU type decides the pool
        let p = plan(&mut c, &typed(1, 1, 2, Some("a100")), &all).unwrap();
        assert!(p.iter().all(|&n| n < 8), "{p:?}");
        let p = plan(&mut c, &typed(2, 2, 2, Some("l40s")), &all).unwrap();
        assert!(p.iter().all(|&n| (8..12).contains(&n)), "{p:?}");
        // no pool of that type, or candidates in no pool: cons_tres decides
        assert_eq!(plan(&mut c, &typed(3, 1, 1, Some("h100")), &all), None);
        assert_eq!(plan(&mut c, &job(4, 1, 1), &[14, 15, 16, 17]), None);
        // instances larger than a pool's nodes go where they fit
        let p = plan(&mut c, &job(5, 1, 8), &gpu_partition).unwrap();
        assert!(p.iter().all(|&n| n < 8), "{p:?}");
        let p = plan(&mut c, &job(6, 1, 4), &[8, 9, 12, 13]).unwrap();
        assert!(p.iter().all(|&n| (8..10).contains(&n)), "{p:?}");
        // the candidates (partition, --exclude) restrict the pool's nodes
        let p = plan(&mut c, &job(7, 1, 2), &[13]).unwrap();
        assert_eq!(p, vec![13]);
        // `-w`: the candidates are not a choice, cons_tres places the job
        let w = JobInfo {
            required_nodes: true,
            ..job(9, 1, 1)
        };
        assert_eq!(plan(&mut c, &w, &all), None);
        assert_eq!(plan(&mut c, &job(8, 1, 4), &[12, 13]), None, "4 > 2");
        assert_eq!(c.counters.engine_errors, 0);
    }

    #[test]
    fn mixed_cluster_state_is_published_per_pool() {
        let mut c = site();
        // an a100 job as planned; an l40s job that Slurm put on two nodes;
        // a CPU-only job; a 6-GPU job spread over a100 and l40s (foreign)
        let p = plan(
            &mut c,
            &typed(1, 1, 4, Some("a100")),
            &(0..18).collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(
            c.begin(&typed(1, 1, 4, Some("a100")), &[(p[0], 4)], 0),
            None
        );
        assert_eq!(
            c.begin(&typed(2, 2, 2, Some("l40s")), &[(8, 2), (9, 2)], 0),
            None
        );
        let cpu = JobInfo {
            mapping: Mapping::NoGpu,
            ..job(3, 1, 1)
        };
        assert_eq!(c.begin(&cpu, &[(15, 0)], 0), None);
        let spread = JobInfo {
            mapping: Mapping::Outside("x".into()),
            ..job(4, 1, 1)
        };
        assert_eq!(c.begin(&spread, &[(7, 4), (11, 2)], 0), None);
        assert_eq!(c.counters.engine_errors, 0);
        let st = c.snapshot(1, true);
        assert_eq!(st.gpus_per_node, 0, "mixed");
        let pools: Vec<(&str, u32, u32, u32)> = st
            .pools
            .iter()
            .map(|p| (p.name.as_str(), p.gpus_per_node, p.nodes, p.partial_nodes))
            .collect();
        assert_eq!(
            pools,
            vec![("8xa100", 8, 8, 2), ("4xl40s", 4, 4, 3), ("2xgpu", 2, 2, 0)]
        );
        // a100: {4} and a foreign 4 on two nodes: Phi* 0 -> N*SIF 2;
        // l40s: 2, 2, foreign 2 on three nodes: Phi* 1 -> N*SIF 2
        assert_eq!(st.pools[0].n_sif, Some(2.0));
        assert_eq!(st.pools[1].n_sif, Some(2.0));
        assert_eq!(st.n_sif, 4.0);
        assert_eq!(st.nodes[15].capacity, 0);
        assert!(st
            .render(1)
            .contains("pool 4xl40s: 4 nodes, 6/16 GPUs used, 3 partial"));
        // Compact in each pool (the jobs are resumable and past their first
        // minutes at t=1000): job 1 joins the foreign 4 GPUs on n8, job 2's
        // two lone instances meet on one l40s node.
        let orders = c.tick(1000);
        assert_eq!(
            orders,
            vec![
                MigrationOrder {
                    job: 1,
                    to_nodes: vec![7]
                },
                MigrationOrder {
                    job: 2,
                    to_nodes: vec![9, 9]
                }
            ]
        );
        assert_eq!(c.self_check(), None);
    }

    #[test]
    fn divergence_is_counted_against_the_plan_among_the_candidates() {
        let mut c = ctl();
        // --exclude=n1,n2: the engine's plan is n3; its own plan among all
        // nodes would be n1. Slurm follows the narrowed plan: no divergence.
        let p = c.narrow(&job(1, 1, 8), &NodeSet::from_nodes(4, [2, 3]));
        assert_eq!(p, Ok(Some(NodeSet::from_nodes(4, [2]))));
        assert_eq!(c.begin(&job(1, 1, 8), &[(2, 8)], 0), None);
        assert_eq!(c.counters.divergences, 0);
        // Slurm puts the next one elsewhere than planned: one divergence.
        let p = c.narrow(&job(2, 1, 4), &NodeSet::full(4)).unwrap().unwrap();
        let elsewhere = (0..4).find(|n| !p.contains(*n) && *n != 2).unwrap();
        assert_eq!(c.begin(&job(2, 1, 4), &[(elsewhere, 4)], 0), None);
        assert_eq!(c.counters.divergences, 1);
    }

    #[test]
    fn pass_through_pools_are_left_to_cons_tres() {
        // two 6-GPU nodes and two 8-GPU nodes
        let nodes = [
            NodeGpus::new(6, Some("h100")),
            NodeGpus::new(6, Some("h100")),
            NodeGpus::new(8, None),
            NodeGpus::new(8, None),
        ];
        let names = (1..=4).map(|i| format!("n{i}")).collect();
        let mut c = Controller::with_nodes(always(), &nodes, names);
        let all = NodeSet::full(4);
        assert_eq!(c.narrow(&typed(1, 1, 2, Some("h100")), &all), Ok(None));
        assert_eq!(
            c.narrow(&job(2, 1, 2), &NodeSet::from_nodes(4, [0, 1])),
            Ok(None)
        );
        let p = c.narrow(&job(3, 1, 2), &all).unwrap().unwrap();
        assert!(p.iter().all(|n| n >= 2), "{p:?}");
        // a job Slurm ran there is recorded, not an engine error
        assert_eq!(c.begin(&typed(1, 1, 2, Some("h100")), &[(0, 2)], 0), None);
        assert_eq!(c.counters.engine_errors, 0);
        let st = c.snapshot(1, true);
        assert!(!st.pools[0].modelled && st.pools[0].n_sif.is_none());
        assert_eq!(st.pools[0].partial_nodes, 1);
        assert_eq!(c.fini(1, 1000), None);
    }

    /// The issue #11 case, live: n1 holds a 4-GPU and a 2-GPU job that
    /// never move and a resumable 1-GPU guest in its last free GPUs; a
    /// 3 x 8 job fills n2-n4. A 3 x 8 head waits (Slurm offered it to
    /// `narrow`: no room). Returns the controller just after the 3 x 8 job
    /// ended at 1000, freeing exactly what the head needs.
    fn head_waits_for_a_departure(config: SelectConfig) -> Controller {
        let mut c = ctl_with(config);
        let still = |id, w, g| JobInfo {
            flags: None,
            time_limit_s: Some(86_400),
            ..job(id, w, g)
        };
        assert_eq!(run(&mut c, &still(1, 1, 4), 0), vec![0]);
        assert_eq!(run(&mut c, &still(2, 1, 2), 0), vec![0]);
        assert_eq!(run(&mut c, &still(3, 3, 8), 0), vec![1, 2, 3]);
        let guest = JobInfo {
            time_limit_s: Some(86_400),
            ..job(4, 1, 1)
        };
        assert_eq!(run(&mut c, &guest, 0), vec![0], "the only free GPUs");
        assert!(c.tick(10).is_empty(), "a full cluster: no move");
        let head = still(5, 3, 8);
        assert_eq!(c.narrow(&head, &NodeSet::full(4)), Ok(None), "no room");
        c.note_priority(5, 100);
        assert!(c.tick(900).is_empty(), "nothing departed yet");
        assert_eq!(c.fini(3, 1000), None);
        c
    }

    #[test]
    fn a_departure_compact_never_takes_the_room_the_waiting_head_needs() {
        // The same departure with nobody waiting: Compact's guest repair
        // moves the guest (job 4) off n1 into an emptied node.
        let mut idle = ctl();
        for (id, w, g) in [(1, 1, 4), (2, 1, 2), (3, 3, 8)] {
            let j = JobInfo {
                flags: None,
                time_limit_s: Some(86_400),
                ..job(id, w, g)
            };
            run(&mut idle, &j, 0);
        }
        let guest = JobInfo {
            time_limit_s: Some(86_400),
            ..job(4, 1, 1)
        };
        run(&mut idle, &guest, 0);
        idle.tick(900);
        idle.fini(3, 1000);
        let orders = idle.tick(1000);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!(orders[0].job, 4);
        assert_ne!(orders[0].to_nodes, vec![0], "{orders:?}");

        // With the 3 x 8 head waiting (the site default gate opens for it),
        // that move would leave it two empty nodes: the guest is held
        // still, no migration is ordered and the head gets n2-n4.
        let mut c = head_waits_for_a_departure(Config::default().select);
        assert!(c.tick(1000).is_empty(), "no migration for the head's room");
        assert_eq!(c.counters.compacts_held_for_head, 1);
        assert_eq!(
            c.take_head_hold(),
            Some(HeadHold {
                head: 5,
                held: vec![4]
            })
        );
        let head = JobInfo {
            flags: None,
            time_limit_s: Some(86_400),
            ..job(5, 3, 8)
        };
        let planned: Vec<NodeId> = c
            .narrow(&head, &NodeSet::full(4))
            .unwrap()
            .expect("the head is planned")
            .iter()
            .collect();
        assert_eq!(planned, vec![1, 2, 3]);
        assert_eq!(c.begin(&head, &[(1, 8), (2, 8), (3, 8)], 1001), None);
        assert_eq!(c.counters.migrations_ordered, 0);
        assert_eq!(c.self_check(), None);
    }

    #[test]
    fn a_compact_that_makes_room_for_the_waiting_head_still_moves() {
        // Three 1 x 4 jobs (limits of a day), job 1 ends: n1 and n2 hold one
        // each. A 3 x 8 head waits: with no move it starts when one of them
        // ends; merging them empties a third node and it starts now.
        let mut c = ctl_with(Config::default().select);
        let day = |id| JobInfo {
            time_limit_s: Some(86_400),
            ..job(id, 1, 4)
        };
        for id in 1..=3 {
            run(&mut c, &day(id), 0);
        }
        assert!(c.tick(900).is_empty());
        c.fini(1, 1000);
        let head = JobInfo {
            flags: None,
            ..job(9, 3, 8)
        };
        assert_eq!(c.narrow(&head, &NodeSet::full(4)), Ok(None));
        let orders = c.tick(1000);
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!(c.counters.compacts_held_for_head, 0);
        assert_eq!(c.take_head_hold(), None);
    }

    /// The tick re-checks only the jobs whose verdict can have changed
    /// (issue #11): after every tick, every running job's verdict and the
    /// engine's movability are what a check of every job would give.
    #[test]
    fn the_tick_keeps_every_verdict_as_a_full_check_would() {
        // Without orders, and with every order carried out at once (the
        // requeue's `fini`, then its start on the target nodes: the
        // cool-down's instants come from the migration).
        for migrate in [false, true] {
            let migrated = tick_keeps_verdicts(migrate, None).len();
            assert_eq!(migrated > 10, migrate, "{migrated} migrations");
        }
    }

    #[test]
    fn rechecks_in_turns_before_the_tick_decide_as_the_tick_alone() {
        // The plugin thread re-checks the verdicts due in turns of at most
        // RECHECKS_PER_TURN, taking the lock for each (issue #11), then
        // ticks: every verdict is as a full check would have it, and the
        // same migrations are ordered, at the same instants, to the same
        // nodes, as with the tick alone (turns of one verdict, the most
        // turns).
        let alone = tick_keeps_verdicts(true, None);
        assert!(alone.len() > 10, "{} migrations", alone.len());
        assert_eq!(tick_keeps_verdicts(true, Some(1)), alone);
        assert_eq!(tick_keeps_verdicts(true, Some(RECHECKS_PER_TURN)), alone);
    }

    /// [`the_tick_keeps_every_verdict_as_a_full_check_would`] with
    /// `select.migrate = migrate`, the verdicts due re-checked first in
    /// turns of `turn` ([`Controller::recheck_due`]) when given; returns
    /// the migrations carried out (instant, job, target nodes).
    fn tick_keeps_verdicts(migrate: bool, turn: Option<usize>) -> Vec<(u64, u64, Vec<NodeId>)> {
        let cfg = SelectConfig {
            min_run_before_migration_s: 30,
            migration_cooldown_s: 100,
            migration_cost_s: 20,
            payback: 2.0,
            migrate,
            ..always()
        };
        let names = (0..16).map(|i| format!("n{i}")).collect();
        let mut c = Controller::new(cfg, ClusterSpec::new(16, 8).unwrap(), names);
        let mut x = 7u64;
        let mut draw = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut running: BTreeMap<u64, JobInfo> = BTreeMap::new();
        let mut next = 1u64;
        let mut migrated = Vec::new();
        for now in 0..1500u64 {
            if draw(4) == 0 && running.len() < 30 {
                let mut j = job(next, 1, 1 + draw(4) as u32);
                let flags = j.flags.as_mut().unwrap();
                flags.resumable = draw(5) != 0;
                flags.min_runtime_s = [0, 0, 45, 300][draw(4) as usize];
                flags.migration_cost_s = [None, Some(5), Some(60)][draw(3) as usize];
                j.time_limit_s = [None, Some(120), Some(400), Some(3600)][draw(4) as usize];
                let node = draw(16) as u32;
                let g = match j.mapping {
                    Mapping::Model { shape, .. } => shape.gpus,
                    _ => unreachable!(),
                };
                if c.begin(&j, &[(node, g)], now).is_none() && c.knows(next) {
                    running.insert(next, j);
                }
                next += 1;
            }
            if draw(6) == 0 && !running.is_empty() {
                let k = draw(running.len() as u64) as usize;
                let j = *running.keys().nth(k).unwrap();
                running.remove(&j);
                c.fini(j, now);
            }
            if now == 700 {
                // A restart: cool-downs of two running jobs come back.
                let saved = Saved {
                    last_migrated: running.keys().take(2).map(|&j| (j, now - 10)).collect(),
                    ..Saved::default()
                };
                c.restore(&saved, now);
            }
            if let Some(n) = turn {
                loop {
                    let due = c.recheck.iter().take_while(|(t, _)| *t <= now).count();
                    let done = c.recheck_due(now, n);
                    let left = c.recheck.iter().take_while(|(t, _)| *t <= now).count();
                    // A re-check puts in the job's next instant, later.
                    assert_eq!((done, left), (due.min(n), due - due.min(n)));
                    if done < n {
                        break;
                    }
                }
            }
            for order in c.tick(now) {
                let j = running[&order.job].clone();
                let g = match j.mapping {
                    Mapping::Model { shape, .. } => shape.gpus,
                    _ => unreachable!(),
                };
                c.fini(order.job, now);
                let per_node = per_node_of(order.to_nodes.iter().copied(), g);
                assert!(c.begin(&j, &per_node, now).is_none());
                migrated.push((now, order.job, order.to_nodes));
            }
            for (&id, rec) in &c.jobs {
                if !rec.in_engine || rec.shape.is_none() {
                    continue;
                }
                let full = c.eligible(id, rec, now);
                assert_eq!(rec.keep, full.err(), "job {id} at {now}");
                assert_eq!(rec.movable, full.is_ok(), "job {id} at {now}");
                // A job that cannot be requeued is never re-checked: its
                // verdict cannot change.
                if !rec.flags.resumable {
                    assert_eq!(rec.check_at, None, "job {id} at {now}");
                }
            }
        }
        assert!(next > 200, "{next} jobs");
        migrated
    }
}
