//! What a replay observes on one cluster, poll after poll: each job's
//! submit, runs (start, nodes, restarts) and end; the cluster's placement
//! metrics at every poll (`N * SIF` from the observed per-node GPU
//! allocation, WCC, utilisation), integrated over time exactly as the
//! simulator integrates them (`compass_core::sim`, paper eqs. 14-17); and,
//! on the compass cluster, the engine's published state for the node check.
//!
//! On a mixed cluster the figures are kept per pool of interchangeable GPU
//! nodes (same GPU count and type, grouped as the select plugin groups them:
//! `compass_core::placement::pools`; CPU-only nodes in no pool), since
//! Theorem 1 holds per pool (issue 12); the cluster's figures are the sums
//! over the modelled pools. A homogeneous cluster is one pool.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use compass_core::metric::{self, InstanceCounts, PhiStarCache};
use compass_core::placement::compass::CompassConfig;
use compass_core::placement::pools::{NodeGpus, PoolSet};
use compass_slurm::state::PublishedState;
use serde::Serialize;

use super::plan::PlannedJob;
use super::slurm::JobObs;

/// One run of a job (a requeue starts a new one).
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// Slurm's restart count during this run.
    pub restarts: u32,
    /// Wall seconds since the replay start.
    pub start_s: f64,
    pub start_unix: u64,
    /// When the run was seen over (ended or requeued), wall seconds.
    pub end_s: Option<f64>,
    /// GPUs per node as Slurm allocated them.
    pub node_gpus: BTreeMap<String, u32>,
    /// The engine's published state listed this run with the same per-node
    /// GPUs (compass cluster only).
    pub engine_recorded: bool,
    /// Why the published state disagreed, if it did.
    pub mismatch: Option<String>,
}

/// The allocation of a job in `COMPLETING`: its run is over (the script
/// finished, or the job was requeued), its epilog runs, and Slurm still
/// holds its GPUs.
#[derive(Clone, Debug, PartialEq)]
struct Held {
    /// GPUs per node (the last run's, as Slurm allocated them).
    node_gpus: BTreeMap<String, u32>,
    /// Requeued (Slurm counted a restart since the run started): the job
    /// will wait to run again, a migration or preemption in flight.
    requeued: bool,
}

/// One job on one cluster.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobTrack {
    pub slurm_id: Option<u64>,
    pub submit_s: Option<f64>,
    /// `sbatch` refused the job (message).
    pub submit_error: Option<String>,
    pub runs: Vec<Run>,
    pub end_s: Option<f64>,
    /// Slurm's final state (`COMPLETED`, `CANCELLED`, ...; `GONE` when the
    /// job left Slurm's list unseen).
    pub final_state: Option<String>,
    pub restarts: u32,
    /// Cancelled by compass-budgetd under the rules (a preempted job that is
    /// not resumable), as its admin comment says.
    pub preempted_cancel: bool,
    /// Slurm's reason at the last poll (`Reason=`: why a pending job
    /// waits), for [`Sample::fit_waiting_by_reason`].
    #[serde(skip)]
    pub reason: String,
}

/// The reasons Slurm gives a waiting job that [`Sample::fit_waiting_by_reason`]
/// counts apart, in its order; any other reason is counted last.
/// `Priority`: a job of higher priority waits in its partition and this one
/// is left to backfill; `Resources`: Slurm found no room for it (its own
/// view, or backfill's reservations); `BeginTime`: its begin time is ahead
/// (a requeued job, until the budget service or the plugin resets it);
/// `None`: no scheduling pass has looked at it yet.
pub const FIT_WAIT_REASONS: [&str; 5] = ["Priority", "Resources", "BeginTime", "None", "other"];

/// The index of `reason` in [`FIT_WAIT_REASONS`].
pub fn fit_wait_reason(reason: &str) -> usize {
    FIT_WAIT_REASONS[..FIT_WAIT_REASONS.len() - 1]
        .iter()
        .position(|r| *r == reason)
        .unwrap_or(FIT_WAIT_REASONS.len() - 1)
}

impl JobTrack {
    pub fn first_start_s(&self) -> Option<f64> {
        self.runs.first().map(|r| r.start_s)
    }
}

/// The metrics of one poll.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub n_sif: u64,
    pub partial: u32,
    pub phi_star: u64,
    pub wcc: bool,
    pub used_gpus: u64,
    pub utilisation: f64,
    pub pending: u64,
    pub running: u64,
    pub done: u64,
    /// Jobs whose run ended (their script finished, or they were requeued)
    /// while Slurm still holds their GPUs (`COMPLETING`: the epilog runs).
    /// Their GPUs count as allocated (in `used_gpus`, `N*SIF`, the free
    /// GPUs the waiting jobs could fit) and they do not wait: no other
    /// job can have those GPUs yet. A requeued one is a migration in
    /// flight.
    pub completing: u64,
    /// Nothing moved since the previous poll, no job waits to restart after
    /// a requeue and the engine has no migration in flight.
    pub settled: bool,
    /// A migration is in flight: a requeued job waits to restart, or the
    /// engine has decided a migration it has not carried out yet.
    pub in_flight: bool,
    /// Age of the engine's published state at this poll (wall seconds since
    /// its `updated_unix`); compass clusters only.
    pub state_age_s: Option<f64>,
    /// Waiting jobs that would fit the free GPUs as they are at this poll
    /// (`w` nodes with at least `g` free GPUs each), each counted alone.
    pub fit_waiting: u64,
    /// Those jobs by the reason Slurm gave them ([`FIT_WAIT_REASONS`]):
    /// what kept a job waiting that the free GPUs would have held (the
    /// whole cluster's; its pools' are not split).
    pub fit_waiting_by_reason: [u64; FIT_WAIT_REASONS.len()],
    /// The share of the cluster's GPUs those jobs would use (`w x g` of
    /// each, summed, at most the free share): the idle GPUs a start could
    /// have used.
    pub fit_share: f64,
    /// The share of the cluster's GPUs the largest waiting job that the
    /// layout alone kept out would use: one whose `w x g` GPUs the idle
    /// GPUs hold but not as laid out (no `w` nodes with `g` free each), at
    /// most the idle share left by `fit_share`.
    pub layout_share: f64,
    /// Running jobs the engine keeps still by its migration rule (not
    /// resumable, protected, starting up, cooling down, ending soon), from
    /// its published state: Theorem 1's bound is promised only while this
    /// is 0 (issue #10: exceeded by choice, reported, not a failure).
    pub kept_still: u64,
}

/// Time integrals of the metrics over one window (as the simulator's).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Window {
    pub time_s: f64,
    pub sif_s: f64,
    pub util_s: f64,
    pub wcc_s: f64,
    /// Time with a migration in flight ([`Sample::in_flight`]).
    pub in_flight_s: f64,
    /// Time that was not settled ([`Sample::settled`] false).
    pub unsettled_s: f64,
    /// Idle GPU time as a share of the part's GPUs, integrated
    /// (`(1 - utilisation) dt`, so `util_s + idle_s = time_s`): in all,
    /// the part of it waiting jobs that fitted the free GPUs as they were
    /// would have used ([`Sample::fit_share`]: Slurm's cadence and start
    /// latency, jobs held for planned nodes), and all of it while a
    /// migration was in flight. Of the rest, `idle_layout_s` the largest
    /// waiting job the layout alone kept out would have used
    /// ([`Sample::layout_share`]: fragmentation); the remainder no waiting
    /// job needed (jobs larger than all idle GPUs, or nothing waiting).
    pub idle_s: f64,
    pub idle_fit_s: f64,
    pub idle_layout_s: f64,
    pub idle_in_flight_s: f64,
}

/// What one part (the cluster, or one pool) showed at one poll, as the
/// time integrals take it: [`Sample::part`], [`PoolSample::part`].
#[derive(Clone, Copy, Debug)]
struct Part {
    n_sif: u64,
    utilisation: f64,
    wcc: bool,
    fit_waiting: u64,
    fit_share: f64,
    layout_share: f64,
}

impl Window {
    /// The part's `sif` and its poll `part` held for `dt` seconds, with
    /// the cluster's `in_flight` and `settled` of that time.
    fn add(&mut self, dt: f64, sif: f64, part: &Part, s: &Sample) {
        let idle = (1.0 - part.utilisation) * dt;
        let fit = idle.min(part.fit_share * dt);
        self.time_s += dt;
        self.sif_s += sif * dt;
        self.util_s += part.utilisation * dt;
        self.idle_s += idle;
        self.idle_fit_s += fit;
        self.idle_layout_s += (idle - fit).min(part.layout_share * dt);
        if part.wcc {
            self.wcc_s += dt;
        }
        if s.in_flight {
            self.in_flight_s += dt;
            self.idle_in_flight_s += idle;
        }
        if !s.settled {
            self.unsettled_s += dt;
        }
    }
}

/// One pool of interchangeable GPU nodes (same GPU count and type), the
/// unit Theorem 1 is stated for on a mixed cluster (issue 12).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolDef {
    /// `8xa100`, `4xl40s`, `2xgpu` (untyped): the names of the select
    /// plugin's published `pools`.
    pub name: String,
    pub gpus_per_node: u32,
    pub gpu_type: Option<String>,
    pub nodes: Vec<String>,
    /// 1, 2, 4 or 8 GPUs of one type per node: `Phi*`, `N*SIF` and WCC are
    /// defined (the engine's model). Otherwise only utilisation is kept.
    pub modelled: bool,
}

/// The pools of a node table (name, GPUs), grouped exactly as the select
/// plugin groups them ([`PoolSet::new`]), in order of each pool's first node.
pub fn pools_of(nodes: &[(String, NodeGpus)]) -> Vec<PoolDef> {
    let table: Vec<NodeGpus> = nodes.iter().map(|(_, g)| g.clone()).collect();
    let set = PoolSet::new(&table, CompassConfig::default());
    set.pools()
        .map(|p| PoolDef {
            name: p.name.clone(),
            gpus_per_node: p.gpus_per_node,
            gpu_type: p.gpu_type.clone(),
            nodes: p
                .nodes
                .iter()
                .map(|&i| nodes[i as usize].0.clone())
                .collect(),
            modelled: p.modelled,
        })
        .collect()
}

/// One pool at one poll.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PoolSample {
    pub n_sif: u64,
    pub partial: u32,
    pub phi_star: u64,
    /// WCC in this pool (always true in a pool that is not modelled).
    pub wcc: bool,
    pub used_gpus: u64,
    pub utilisation: f64,
    /// Waiting jobs that would fit this pool's free GPUs alone.
    pub fit_waiting: u64,
    /// The share of the pool's GPUs they would use ([`Sample::fit_share`]).
    pub fit_share: f64,
    /// [`Sample::layout_share`] in this pool.
    pub layout_share: f64,
}

/// What the replay observed in one pool, integrated over time as the
/// cluster's figures are.
#[derive(Clone, Debug, Default)]
pub struct PoolTrack {
    pub def: PoolDef,
    /// The pool's figures (`N` its nodes; the maxima only when modelled).
    pub figures: Figures,
    last: Option<PoolSample>,
}

/// What the replay integrates and records, over the whole cluster and in
/// each pool alike (issue 12: Theorem 1 per pool).
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    /// The metrics over `T_peak` (the queue non-empty) and over the busy
    /// time (any job running or waiting).
    pub peak: Window,
    pub busy: Window,
    /// Max `N*SIF` after any poll (migrations in flight included).
    pub max_n_sif: u64,
    /// Max `N*SIF` at polls with no migration in flight
    /// ([`Sample::in_flight`] false): the like of the simulator's maximum,
    /// taken after each policy call, where a migration is instantaneous.
    pub max_n_sif_no_flight: Option<u64>,
    /// Max `N*SIF` at polls where WCC held.
    pub max_n_sif_wcc: Option<u64>,
    /// Max `N*SIF` at polls where WCC held and no migration was in flight.
    pub max_n_sif_wcc_no_flight: Option<u64>,
    /// Max `N*SIF` at settled instants where WCC held and the engine kept
    /// no job still (Theorem 1's bound).
    pub max_n_sif_wcc_settled: Option<u64>,
    /// Max `N*SIF` at settled instants where WCC held while the engine kept
    /// some job still by its migration rule (the bound does not apply).
    pub max_n_sif_wcc_settled_kept: Option<u64>,
    /// Wall seconds with `N*SIF > 2` under WCC while jobs were kept still.
    pub over_bound_by_choice_s: f64,
    /// Job-seconds that waiting jobs spent while they would have fitted the
    /// free GPUs ([`Sample::fit_waiting`] integrated over time).
    pub fit_wait_s: f64,
}

impl Sample {
    /// The whole cluster's part of this poll.
    fn part(&self) -> Part {
        Part {
            n_sif: self.n_sif,
            utilisation: self.utilisation,
            wcc: self.wcc,
            fit_waiting: self.fit_waiting,
            fit_share: self.fit_share,
            layout_share: self.layout_share,
        }
    }
}

impl PoolSample {
    /// This pool's part of its poll.
    fn part(&self) -> Part {
        Part {
            n_sif: self.n_sif,
            utilisation: self.utilisation,
            wcc: self.wcc,
            fit_waiting: self.fit_waiting,
            fit_share: self.fit_share,
            layout_share: self.layout_share,
        }
    }
}

impl Figures {
    /// `dt` seconds in which the cluster's poll `prev` held (its queue,
    /// in-flight and kept-still state), with this part's (the cluster's or
    /// one pool's, of `nodes` nodes) poll `part`. `SIF = N*SIF / N`
    /// (eq. 15).
    fn hold(&mut self, dt: f64, nodes: u32, part: Part, prev: &Sample) {
        let sif = part.n_sif as f64 / f64::from(nodes.max(1));
        if prev.pending > 0 {
            self.peak.add(dt, sif, &part, prev);
        }
        if prev.pending > 0 || prev.running > 0 || prev.completing > 0 {
            self.busy.add(dt, sif, &part, prev);
        }
        self.fit_wait_s += dt * part.fit_waiting as f64;
        if part.wcc && part.n_sif > 2 && prev.kept_still > 0 {
            self.over_bound_by_choice_s += dt;
        }
    }

    /// Updates the maxima of `N*SIF`: at all polls and at polls with no
    /// migration in flight (`in_flight` false), the same under WCC, at
    /// settled instants under WCC with every job movable (Theorem 1's),
    /// and at settled instants under WCC where the engine kept some job
    /// still (`kept_still > 0`).
    fn record(&mut self, n_sif: u64, wcc: bool, s: &Sample) {
        let max = |m: Option<u64>| Some(m.unwrap_or(0).max(n_sif));
        let (settled, kept_still) = (s.settled, s.kept_still);
        self.max_n_sif = self.max_n_sif.max(n_sif);
        if !s.in_flight {
            self.max_n_sif_no_flight = max(self.max_n_sif_no_flight);
        }
        if !wcc {
            return;
        }
        self.max_n_sif_wcc = max(self.max_n_sif_wcc);
        if !s.in_flight {
            self.max_n_sif_wcc_no_flight = max(self.max_n_sif_wcc_no_flight);
        }
        if settled && kept_still == 0 {
            self.max_n_sif_wcc_settled = Some(self.max_n_sif_wcc_settled.unwrap_or(0).max(n_sif));
        } else if settled {
            self.max_n_sif_wcc_settled_kept =
                Some(self.max_n_sif_wcc_settled_kept.unwrap_or(0).max(n_sif));
        }
    }
}

/// Everything observed on one cluster.
pub struct Observer {
    /// The GPU nodes (CPU-only nodes are left out of every figure).
    pub nodes: Vec<String>,
    /// GPUs per node of a homogeneous cluster; 0 on a mixed one (see
    /// `pools`).
    pub gpus_per_node: u32,
    /// One per pool of interchangeable GPU nodes; one on a homogeneous
    /// cluster.
    pub pools: Vec<PoolTrack>,
    /// GPUs of each GPU node, and its pool (index into `pools`).
    node_cap: BTreeMap<String, (u32, usize)>,
    pub state_file: Option<PathBuf>,
    pub jobs: Vec<JobTrack>,
    live: Vec<bool>,
    /// Jobs in `COMPLETING` whose run is over: the GPUs Slurm still holds
    /// for them ([`Sample::completing`]).
    held: Vec<Option<Held>>,
    by_id: BTreeMap<u64, usize>,
    shapes: Vec<(u32, u32)>,
    cache: PhiStarCache,
    last: Option<Sample>,
    last_placement: BTreeMap<u64, BTreeMap<String, u32>>,
    /// The whole cluster's figures (`N` its modelled GPU nodes).
    pub figures: Figures,
    /// Job-seconds waiting jobs spent while they would have fitted the free
    /// GPUs, by Slurm's reason ([`Sample::fit_waiting_by_reason`] integrated
    /// over time; they sum to `figures.fit_wait_s`).
    pub fit_wait_by_reason_s: [f64; FIT_WAIT_REASONS.len()],
    pub samples: Vec<Sample>,
    state_mtime: Option<std::time::SystemTime>,
    pub state: Option<PublishedState>,
    /// `divergences` and `migrations_done` of the first state read.
    pub state_first: Option<(u64, u64)>,
    pub state_errors: Vec<String>,
}

impl Observer {
    /// A homogeneous cluster: `nodes` of `gpus_per_node` untyped GPUs.
    #[cfg(test)]
    pub fn new(
        plan: &[PlannedJob],
        nodes: Vec<String>,
        gpus_per_node: u32,
        state_file: Option<PathBuf>,
    ) -> Self {
        let table: Vec<(String, NodeGpus)> = nodes
            .into_iter()
            .map(|n| (n, NodeGpus::new(gpus_per_node, None)))
            .collect();
        Self::with_nodes(plan, &table, state_file)
    }

    /// Any cluster: every node with its GPUs (CPU-only nodes with 0), as
    /// `Client::shape` reads them.
    pub fn with_nodes(
        plan: &[PlannedJob],
        nodes: &[(String, NodeGpus)],
        state_file: Option<PathBuf>,
    ) -> Self {
        let defs = pools_of(nodes);
        let mut node_cap = BTreeMap::new();
        for (p, d) in defs.iter().enumerate() {
            for n in &d.nodes {
                node_cap.insert(n.clone(), (d.gpus_per_node, p));
            }
        }
        let gpu_nodes: Vec<String> = nodes
            .iter()
            .filter(|(n, _)| node_cap.contains_key(n))
            .map(|(n, _)| n.clone())
            .collect();
        let gpus_per_node = match defs.as_slice() {
            [one] => one.gpus_per_node,
            _ => 0,
        };
        Self {
            nodes: gpu_nodes,
            gpus_per_node,
            pools: defs
                .into_iter()
                .map(|def| PoolTrack {
                    def,
                    ..Default::default()
                })
                .collect(),
            node_cap,
            state_file,
            jobs: vec![JobTrack::default(); plan.len()],
            live: vec![false; plan.len()],
            held: vec![None; plan.len()],
            by_id: BTreeMap::new(),
            shapes: plan.iter().map(|j| (j.instances, j.gpus)).collect(),
            cache: PhiStarCache::new(),
            last: None,
            last_placement: BTreeMap::new(),
            figures: Figures::default(),
            fit_wait_by_reason_s: [0.0; FIT_WAIT_REASONS.len()],
            samples: Vec::new(),
            state_mtime: None,
            state: None,
            state_first: None,
            state_errors: Vec::new(),
        }
    }

    /// `sbatch` returned job `id` for plan job `index` at `t_s`.
    pub fn submitted(&mut self, index: usize, id: u64, t_s: f64) {
        self.jobs[index].slurm_id = Some(id);
        self.jobs[index].submit_s = Some(t_s);
        self.by_id.insert(id, index);
    }

    pub fn submit_failed(&mut self, index: usize, why: String, t_s: f64) {
        let j = &mut self.jobs[index];
        j.submit_error = Some(why);
        j.end_s = Some(t_s);
        j.final_state = Some("NOT_SUBMITTED".into());
    }

    pub fn submitted_count(&self) -> usize {
        self.by_id.len()
    }

    pub fn finished_count(&self) -> usize {
        self.jobs.iter().filter(|j| j.end_s.is_some()).count()
    }

    /// Jobs still to finish among those handed to `sbatch`.
    pub fn unfinished(&self) -> Vec<usize> {
        (0..self.jobs.len())
            .filter(|&i| self.jobs[i].end_s.is_none())
            .collect()
    }

    /// Reads the engine's published state if it changed.
    fn read_state(&mut self) {
        let Some(path) = &self.state_file else { return };
        let Ok(mtime) = std::fs::metadata(path).and_then(|m| m.modified()) else {
            return;
        };
        if self.state_mtime == Some(mtime) {
            return;
        }
        match PublishedState::read(path) {
            Ok(s) => {
                self.state_mtime = Some(mtime);
                self.state_first
                    .get_or_insert((s.divergences, s.migrations_done));
                self.state = Some(s);
            }
            Err(e) => {
                if self.state_errors.len() < 5 {
                    self.state_errors.push(e);
                }
            }
        }
    }

    /// One poll: Slurm's job list `obs` at wall time `t_s` (`now_unix`).
    pub fn poll(&mut self, obs: &[JobObs], t_s: f64, now_unix: u64) -> Sample {
        self.read_state();
        let listed: BTreeSet<u64> = obs.iter().map(|o| o.id).collect();
        for o in obs {
            let Some(&i) = self.by_id.get(&o.id) else {
                continue;
            };
            self.update_job(i, o, t_s, now_unix);
        }
        // Jobs that left Slurm's list before we saw them end.
        for (&id, &i) in &self.by_id {
            if !listed.contains(&id) && self.jobs[i].end_s.is_none() {
                let j = &mut self.jobs[i];
                j.end_s = Some(t_s);
                j.final_state = Some("GONE".into());
                if self.live[i] {
                    if let Some(r) = j.runs.last_mut() {
                        r.end_s = Some(t_s);
                    }
                }
                self.live[i] = false;
                self.held[i] = None;
            }
        }
        self.check_engine_records();
        self.sample(t_s, now_unix)
    }

    fn update_job(&mut self, i: usize, o: &JobObs, t_s: f64, now_unix: u64) {
        let j = &mut self.jobs[i];
        if j.end_s.is_some() {
            return;
        }
        j.restarts = j.restarts.max(o.restarts);
        j.preempted_cancel |= o.preempted_cancel;
        j.reason.clone_from(&o.reason);
        if o.completing() {
            // The run is over but Slurm still holds its GPUs (epilog):
            // they stay allocated, the job does not wait. A requeued job
            // (a restart counted since the run started) shows COMPLETING
            // too before it waits again.
            let last = j.runs.last().map(|r| r.restarts);
            let held = if self.live[i] {
                let r = j.runs.last_mut().expect("a live job has a run");
                r.end_s = Some(t_s);
                Some(r.node_gpus.clone())
            } else {
                // ran unseen between two polls, or still held from before
                self.held[i]
                    .as_ref()
                    .map(|h| h.node_gpus.clone())
                    .or_else(|| Some(o.node_gpus.clone()))
            };
            self.live[i] = false;
            self.held[i] = held.map(|node_gpus| Held {
                node_gpus,
                requeued: o.restarts > last.unwrap_or(0),
            });
            return;
        }
        self.held[i] = None;
        if o.running() && !o.node_gpus.is_empty() {
            let new_run = !self.live[i] || j.runs.last().is_some_and(|r| r.restarts != o.restarts);
            if new_run {
                let back = o.run_time_s as f64;
                let start = (t_s - back).max(j.submit_s.unwrap_or(0.0));
                j.runs.push(Run {
                    restarts: o.restarts,
                    start_s: start,
                    start_unix: now_unix.saturating_sub(o.run_time_s),
                    end_s: None,
                    node_gpus: o.node_gpus.clone(),
                    engine_recorded: false,
                    mismatch: None,
                });
            }
            self.live[i] = true;
            return;
        }
        if self.live[i] {
            if let Some(r) = j.runs.last_mut() {
                r.end_s = Some(t_s);
            }
        }
        self.live[i] = false;
        if o.finished() {
            let end = match j.runs.last() {
                Some(r) if o.restarts == r.restarts => r.start_s + o.run_time_s as f64,
                _ => t_s,
            };
            j.end_s = Some(end.min(t_s));
            if let Some(r) = j.runs.last_mut() {
                r.end_s = Some(end.min(t_s));
            }
            j.final_state = Some(o.state.clone());
        }
    }

    /// Compass cluster: is each live run recorded by the engine, on the
    /// nodes and with the GPUs Slurm allocated?
    fn check_engine_records(&mut self) {
        let Some(state) = &self.state else { return };
        let views: BTreeMap<u64, &compass_slurm::state::JobView> =
            state.jobs.iter().map(|v| (v.id, v)).collect();
        for (&id, &i) in &self.by_id {
            if !self.live[i] {
                continue;
            }
            let runs = &mut self.jobs[i].runs;
            let previous_nodes = runs.len().checked_sub(2).map(|k| runs[k].node_gpus.clone());
            let Some(run) = runs.last_mut() else {
                continue;
            };
            if run.engine_recorded || run.mismatch.is_some() {
                continue;
            }
            // A state written in the second the run started may predate it;
            // a state the next second cannot. Runs are seen to the second,
            // so the first write after a start often falls in its second,
            // and a short run may end before the next one.
            let written_after = state.updated_unix > run.start_unix;
            let Some(v) = views.get(&id) else { continue };
            if v.foreign {
                if written_after {
                    run.mismatch =
                        Some("the engine records it as foreign (outside its model)".into());
                }
                continue;
            }
            let g = v.shape.map(|s| s.1).unwrap_or(0);
            let mut per_node: BTreeMap<String, u32> = BTreeMap::new();
            for n in &v.nodes {
                *per_node.entry(n.clone()).or_default() += g;
            }
            // A record of this job on this run's nodes is of this run when
            // it is written after the start, or when no earlier run of the
            // job sat on those nodes (a first run has no earlier record).
            let of_this_run = written_after || previous_nodes.as_ref() != Some(&run.node_gpus);
            if per_node == run.node_gpus && of_this_run {
                run.engine_recorded = true;
            } else if state.updated_unix >= run.start_unix + 3 {
                run.mismatch = Some(format!(
                    "Slurm runs it on {:?}, the engine records {:?}",
                    run.node_gpus, per_node
                ));
            }
        }
    }

    /// All GPUs of the GPU nodes (every pool, pass-through included): the
    /// denominator of the cluster's utilisation.
    pub fn all_gpus(&self) -> u64 {
        self.node_cap.values().map(|&(c, _)| u64::from(c)).sum()
    }

    /// The nodes of the modelled pools (the `N` of the cluster's SIF).
    pub fn modelled_nodes(&self) -> u32 {
        self.pools
            .iter()
            .filter(|p| p.def.modelled)
            .map(|p| p.def.nodes.len() as u32)
            .sum()
    }

    fn sample(&mut self, t_s: f64, now_unix: u64) -> Sample {
        let mut used: BTreeMap<&str, u32> = BTreeMap::new();
        let mut counts: Vec<InstanceCounts> = vec![[0; 9]; self.pools.len()];
        let mut placement: BTreeMap<u64, BTreeMap<String, u32>> = BTreeMap::new();
        let (mut pending, mut running, mut done, mut requeued_waiting) = (0, 0, 0, false);
        let mut completing = 0;
        // Each waiting job's shape, and Slurm's reason as an index into
        // FIT_WAIT_REASONS.
        let mut waiting: Vec<((u32, u32), usize)> = Vec::new();
        for (i, j) in self.jobs.iter().enumerate() {
            if j.end_s.is_some() {
                done += 1;
                continue;
            }
            let Some(id) = j.slurm_id else { continue };
            // The GPUs Slurm allocates to the job: its live run's, or those
            // it still holds while the job completes (epilog).
            let alloc = if self.live[i] {
                running += 1;
                &j.runs.last().expect("a live job has a run").node_gpus
            } else if let Some(h) = &self.held[i] {
                completing += 1;
                requeued_waiting |= h.requeued;
                &h.node_gpus
            } else {
                pending += 1;
                waiting.push((self.shapes[i], fit_wait_reason(&j.reason)));
                if j.restarts > 0 {
                    requeued_waiting = true;
                }
                continue;
            };
            // One instance per node (`--ntasks-per-node=1`), of the GPUs
            // Slurm allocated there, counted in that node's pool.
            for (n, &g) in alloc {
                *used.entry(n.as_str()).or_default() += g;
                if let Some(&(_, p)) = self.node_cap.get(n) {
                    counts[p][g.min(8) as usize] += 1;
                }
            }
            placement.insert(id, alloc.clone());
        }
        // free GPUs of each GPU node, by pool
        let mut free: Vec<Vec<u32>> = vec![Vec::new(); self.pools.len()];
        for (n, &(cap, p)) in &self.node_cap {
            free[p].push(cap.saturating_sub(used.get(n.as_str()).copied().unwrap_or(0)));
        }
        let fits =
            |free: &[u32], (w, g): (u32, u32)| free.iter().filter(|&&f| f >= g).count() as u32 >= w;
        let all_free: Vec<u32> = free.iter().flatten().copied().collect();
        // The waiting jobs that fit `free` alone: how many, by Slurm's
        // reason, and the GPUs they would use, as a share of `total` (at
        // most the free share); and the GPUs of the largest one the layout
        // alone keeps out (its GPUs are idle, not as it needs them), at
        // most the idle rest.
        let fitting = |free: &[u32], total: u64| -> ([u64; FIT_WAIT_REASONS.len()], f64, f64) {
            let idle: u64 = free.iter().map(|&f| u64::from(f)).sum();
            let mut n = [0u64; FIT_WAIT_REASONS.len()];
            let (mut gpus, mut kept_out) = (0u64, 0u64);
            for &(s, reason) in &waiting {
                let want = u64::from(s.0) * u64::from(s.1);
                if fits(free, s) {
                    n[reason] += 1;
                    gpus += want;
                } else if want <= idle {
                    kept_out = kept_out.max(want);
                }
            }
            let fit = gpus.min(idle);
            let total = total.max(1) as f64;
            (
                n,
                fit as f64 / total,
                kept_out.min(idle - fit) as f64 / total,
            )
        };
        let all_gpus = self.all_gpus();
        let (fit_waiting_by_reason, fit_share, layout_share) = fitting(&all_free, all_gpus);
        let fit_waiting = fit_waiting_by_reason.iter().sum();
        let mut pool_samples = Vec::with_capacity(self.pools.len());
        for (p, track) in self.pools.iter().enumerate() {
            let d = &track.def;
            let cap = d.gpus_per_node;
            let used_p: Vec<u32> = d
                .nodes
                .iter()
                .map(|n| used.get(n.as_str()).copied().unwrap_or(0))
                .collect();
            let partial = used_p.iter().filter(|&&u| u > 0 && u < cap).count() as u32;
            let pool_gpus = d.nodes.len() as u64 * u64::from(cap);
            let pool_fit = fitting(&free[p], pool_gpus);
            let used_gpus: u64 = used_p.iter().map(|&u| u64::from(u)).sum();
            let (phi, wcc) = if d.modelled {
                (
                    self.cache.phi_star(&counts[p], cap),
                    metric::wcc_holds(&counts[p], cap),
                )
            } else {
                (0, true)
            };
            pool_samples.push(PoolSample {
                n_sif: if d.modelled {
                    u64::from(partial).saturating_sub(phi)
                } else {
                    0
                },
                partial,
                phi_star: phi,
                wcc,
                used_gpus,
                utilisation: used_gpus as f64 / (pool_gpus as f64).max(1.0),
                fit_waiting: pool_fit.0.iter().sum(),
                fit_share: pool_fit.1,
                layout_share: pool_fit.2,
            });
        }
        let modelled = |k: usize| self.pools[k].def.modelled;
        let partial: u32 = (0..self.pools.len())
            .filter(|&k| modelled(k))
            .map(|k| pool_samples[k].partial)
            .sum();
        let phi: u64 = (0..self.pools.len())
            .filter(|&k| modelled(k))
            .map(|k| pool_samples[k].phi_star)
            .sum();
        let n_sif: u64 = pool_samples.iter().map(|x| x.n_sif).sum();
        let wcc = pool_samples.iter().all(|x| x.wcc);
        let used_gpus: u64 = pool_samples.iter().map(|x| x.used_gpus).sum();
        let nodes = self.modelled_nodes();
        let utilisation = used_gpus as f64 / (all_gpus as f64).max(1.0);
        let in_flight = self
            .state
            .as_ref()
            .is_some_and(|s| !s.pending_migrations.is_empty());
        let settled = placement == self.last_placement && !requeued_waiting && !in_flight;
        let kept_still: u64 = self
            .state
            .as_ref()
            .map_or(0, |s| s.kept_still.values().sum());
        let state_age_s = self
            .state
            .as_ref()
            .map(|s| now_unix.saturating_sub(s.updated_unix) as f64);
        let s = Sample {
            t_s,
            n_sif,
            partial,
            phi_star: phi,
            wcc,
            used_gpus,
            utilisation,
            pending,
            running,
            done,
            completing,
            settled,
            in_flight: in_flight || requeued_waiting,
            state_age_s,
            fit_waiting,
            fit_waiting_by_reason,
            fit_share,
            layout_share,
            kept_still,
        };
        // the state since the previous poll held until now
        if let Some(prev) = self.last {
            let dt = t_s - prev.t_s;
            if dt > 0.0 {
                self.figures.hold(dt, nodes, prev.part(), &prev);
                for (s, &n) in self
                    .fit_wait_by_reason_s
                    .iter_mut()
                    .zip(&prev.fit_waiting_by_reason)
                {
                    *s += dt * n as f64;
                }
                for track in &mut self.pools {
                    let Some(ps) = track.last else { continue };
                    let n = track.def.nodes.len() as u32;
                    track.figures.hold(dt, n, ps.part(), &prev);
                }
            }
        }
        self.figures.record(n_sif, wcc, &s);
        for (track, ps) in self.pools.iter_mut().zip(pool_samples) {
            if track.def.modelled {
                track.figures.record(ps.n_sif, ps.wcc, &s);
            }
            track.last = Some(ps);
        }
        self.last_placement = placement;
        self.last = Some(s);
        self.samples.push(s);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, state: &str, restarts: u32, run: u64, nodes: &[(&str, u32)]) -> JobObs {
        JobObs {
            id,
            name: String::new(),
            state: state.into(),
            reason: String::new(),
            restarts,
            run_time_s: run,
            node_gpus: nodes.iter().map(|(n, g)| (n.to_string(), *g)).collect(),
            preempted_cancel: false,
        }
    }

    /// Every job of `plan` submitted at 0, Slurm showing `jobs` at polls
    /// 1 s and 3 s: the first poll and the window `T_peak` of the two
    /// seconds between.
    fn held_two_seconds(plan: &[PlannedJob], jobs: &[JobObs]) -> (Sample, Window) {
        let mut o = Observer::new(plan, vec!["n1".into(), "n2".into()], 8, None);
        for i in 0..plan.len() {
            o.submitted(i, i as u64 + 1, 0.0);
        }
        let s = o.poll(jobs, 1.0, 1001);
        o.poll(jobs, 3.0, 1003);
        (s, o.figures.peak)
    }

    #[test]
    fn idle_gpus_count_as_usable_only_as_far_as_the_fitting_jobs_need_them() {
        // n1 half busy, n2 free; a 2-GPU job waits and fits, a 2 x 8 job
        // waits and does not: of the 12 idle GPUs, 2 were usable
        let (s, w) = held_two_seconds(
            &[
                PlannedJob::example(0, 1, 4),
                PlannedJob::example(1, 1, 2),
                PlannedJob::example(2, 2, 8),
            ],
            &[
                job(1, "RUNNING", 0, 0, &[("n1", 4)]),
                job(2, "PENDING", 0, 0, &[]),
                job(3, "PENDING", 0, 0, &[]),
            ],
        );
        assert_eq!(
            (s.fit_waiting, s.fit_share, s.layout_share),
            (1, 0.125, 0.0)
        );
        assert_eq!((w.time_s, w.idle_s, w.idle_fit_s), (2.0, 1.5, 0.25));
        assert_eq!(w.idle_layout_s, 0.0, "16 GPUs are more than the idle 12");
    }

    /// The waiting jobs that fit the free GPUs are counted by the reason
    /// Slurm gave them at the poll, and integrated over time per reason;
    /// a job that does not fit counts under no reason.
    #[test]
    fn jobs_that_wait_while_they_fit_are_counted_by_slurms_reason() {
        let plan = [
            PlannedJob::example(0, 1, 4),
            PlannedJob::example(1, 1, 2),
            PlannedJob::example(2, 1, 2),
            PlannedJob::example(3, 1, 1),
            PlannedJob::example(4, 1, 1),
            PlannedJob::example(5, 2, 8),
        ];
        let pending = |id, reason: &str| JobObs {
            reason: reason.into(),
            ..job(id, "PENDING", 0, 0, &[])
        };
        let mut o = Observer::new(&plan, vec!["n1".into(), "n2".into()], 8, None);
        for i in 0..plan.len() {
            o.submitted(i, i as u64 + 1, 0.0);
        }
        let jobs = [
            job(1, "RUNNING", 0, 0, &[("n1", 4)]),
            pending(2, "Priority"),
            pending(3, "Priority"),
            pending(4, "BeginTime"),
            pending(5, "JobHeldAdmin"),
            pending(6, "Resources"),
        ];
        let s = o.poll(&jobs, 1.0, 1001);
        assert_eq!(s.fit_waiting, 4, "the 2 x 8 job does not fit");
        assert_eq!(s.fit_waiting_by_reason, [2, 0, 1, 0, 1]);
        o.poll(&jobs, 3.5, 1003);
        assert_eq!(o.fit_wait_by_reason_s, [5.0, 0.0, 2.5, 0.0, 2.5]);
        assert_eq!(
            o.fit_wait_by_reason_s.iter().sum::<f64>(),
            o.figures.fit_wait_s,
            "the reasons split the whole"
        );
        assert_eq!(fit_wait_reason("None"), 3);
        assert_eq!(FIT_WAIT_REASONS[fit_wait_reason("")], "other");
    }

    #[test]
    fn idle_gpus_a_job_the_layout_keeps_out_would_use_are_fragmentation() {
        // n1 and n2 half busy: 8 idle GPUs, but a 1 x 8 job fits neither
        // node; a 1 x 2 job fits. Of the 8 idle GPUs, 2 are usable and
        // the other 6 the 1 x 8 job would use if they lay on one node.
        let (s, w) = held_two_seconds(
            &[
                PlannedJob::example(0, 1, 4),
                PlannedJob::example(1, 1, 4),
                PlannedJob::example(2, 1, 2),
                PlannedJob::example(3, 1, 8),
            ],
            &[
                job(1, "RUNNING", 0, 0, &[("n1", 4)]),
                job(2, "RUNNING", 0, 0, &[("n2", 4)]),
                job(3, "PENDING", 0, 0, &[]),
                job(4, "PENDING", 0, 0, &[]),
            ],
        );
        assert_eq!((s.fit_share, s.layout_share), (0.125, 0.375));
        assert_eq!((w.idle_s, w.idle_fit_s, w.idle_layout_s), (1.0, 0.25, 0.75));
    }

    #[test]
    fn runs_requeues_ends_and_the_metrics_of_each_poll() {
        let plan = [
            PlannedJob::example(0, 1, 4),
            PlannedJob::example(1, 1, 4),
            PlannedJob::example(2, 1, 8),
        ];
        let mut o = Observer::new(&plan, vec!["n1".into(), "n2".into()], 8, None);
        o.submitted(0, 1, 0.0);
        o.submitted(1, 2, 0.0);
        // two 4-GPU instances on two nodes: 2 partial nodes, Phi* = 0
        let s = o.poll(
            &[
                job(1, "RUNNING", 0, 0, &[("n1", 4)]),
                job(2, "RUNNING", 0, 0, &[("n2", 4)]),
            ],
            1.0,
            1000,
        );
        assert_eq!((s.n_sif, s.partial, s.phi_star, s.running), (2, 2, 0, 2));
        assert!(
            s.wcc && !s.settled,
            "first sight of a placement is not settled"
        );
        o.submitted(2, 3, 1.5);
        let s = o.poll(
            &[
                job(1, "RUNNING", 0, 1, &[("n1", 4)]),
                job(2, "RUNNING", 0, 1, &[("n2", 4)]),
                job(3, "PENDING", 0, 0, &[]),
            ],
            2.0,
            1001,
        );
        assert!(s.settled && s.pending == 1);
        assert_eq!(s.fit_waiting, 0, "no node has 8 free GPUs");
        // job 2 requeued (a migration): pending again, restarts 1
        let s = o.poll(
            &[
                job(1, "RUNNING", 0, 2, &[("n1", 4)]),
                job(2, "PENDING", 1, 1, &[]),
                job(3, "PENDING", 0, 0, &[]),
            ],
            3.0,
            1002,
        );
        assert_eq!((s.n_sif, s.pending, s.running), (0, 2, 1));
        assert!(!s.settled, "a requeued job waits to restart");
        assert!(s.in_flight, "a requeued job waits to restart");
        assert_eq!(s.fit_waiting, 2, "n2 is free: both waiting jobs would fit");
        let s = o.poll(
            &[
                job(1, "RUNNING", 0, 3, &[("n1", 4)]),
                job(2, "RUNNING", 1, 0, &[("n1", 4)]),
                job(3, "RUNNING", 0, 0, &[("n2", 8)]),
            ],
            4.0,
            1003,
        );
        assert_eq!((s.n_sif, s.partial, s.used_gpus), (0, 0, 16));
        assert_eq!(s.utilisation, 1.0);
        o.poll(
            &[
                job(1, "COMPLETED", 0, 9, &[]),
                job(2, "COMPLETED", 1, 6, &[]),
                job(3, "COMPLETED", 0, 5, &[]),
            ],
            11.0,
            1010,
        );
        assert_eq!(o.finished_count(), 3);
        let j1 = &o.jobs[1];
        assert_eq!(j1.runs.len(), 2);
        assert_eq!(j1.restarts, 1);
        assert_eq!(j1.runs[0].end_s, Some(3.0));
        assert_eq!((j1.runs[1].start_s, j1.end_s), (4.0, Some(10.0)));
        assert_eq!(o.jobs[0].end_s, Some(10.0), "start 1 s + 9 s of run");
        assert_eq!(o.jobs[2].first_start_s(), Some(4.0));
        // T_peak: the queue was non-empty from 2 s to 4 s; SIF was 2/2
        // nodes for the first second, 0 for the second
        assert_eq!(o.figures.peak.time_s, 2.0);
        assert_eq!(o.figures.peak.sif_s, 1.0);
        assert_eq!((o.figures.max_n_sif, o.figures.max_n_sif_wcc), (2, Some(2)));
        assert_eq!(o.figures.max_n_sif_wcc_settled, Some(2));
        // both waiting jobs fitted from 3 s to 4 s
        assert_eq!(o.figures.fit_wait_s, 2.0);
        assert_eq!(o.figures.peak.in_flight_s, 1.0);
        // idle GPUs over T_peak: half the GPUs from 2 s to 3 s (nothing
        // waiting fitted), three quarters from 3 s to 4 s (both waiting
        // jobs fitted, job 2's migration in flight)
        let w = o.figures.peak;
        assert_eq!((w.util_s, w.idle_s), (0.75, 1.25));
        assert_eq!((w.idle_fit_s, w.idle_in_flight_s), (0.75, 0.75));
        // a homogeneous cluster is one pool with the cluster's figures
        assert_eq!(o.pools.len(), 1);
        let p = &o.pools[0];
        assert_eq!((p.def.name.as_str(), p.def.nodes.len()), ("8xgpu", 2));
        assert_eq!(
            (p.figures.max_n_sif, p.figures.max_n_sif_wcc_settled),
            (2, Some(2))
        );
        assert_eq!((p.figures.peak.time_s, p.figures.peak.sif_s), (2.0, 1.0));
        assert_eq!(p.figures.fit_wait_s, 2.0);
    }

    #[test]
    fn a_mixed_cluster_is_measured_per_pool() {
        let nodes: Vec<(String, NodeGpus)> = [
            ("a1", 8, Some("a100")),
            ("a2", 8, Some("a100")),
            ("l1", 4, Some("l40s")),
            ("l2", 4, Some("l40s")),
            ("s1", 6, None),
            ("c1", 0, None),
        ]
        .into_iter()
        .map(|(n, g, t)| (n.to_string(), NodeGpus::new(g, t)))
        .collect();
        let plan = [
            PlannedJob::example(0, 1, 1),
            PlannedJob::example(1, 1, 1),
            PlannedJob::example(2, 1, 2),
            PlannedJob::example(3, 1, 4),
        ];
        let mut o = Observer::with_nodes(&plan, &nodes, None);
        let names: Vec<&str> = o.pools.iter().map(|p| p.def.name.as_str()).collect();
        assert_eq!(names, ["8xa100", "4xl40s", "6xgpu"]);
        assert!(!o.pools[2].def.modelled, "6 GPUs per node: pass-through");
        assert_eq!(
            o.nodes,
            ["a1", "a2", "l1", "l2", "s1"],
            "CPU-only nodes left out"
        );
        assert_eq!(o.gpus_per_node, 0, "mixed");
        for (i, id) in [(0, 1), (1, 2), (2, 3), (3, 4)] {
            o.submitted(i, id, 0.0);
        }
        let s = o.poll(
            &[
                job(1, "RUNNING", 0, 0, &[("a1", 1)]),
                job(2, "RUNNING", 0, 0, &[("a2", 1)]),
                job(3, "RUNNING", 0, 0, &[("l1", 2)]),
                job(4, "PENDING", 0, 0, &[]),
            ],
            1.0,
            1000,
        );
        // a100: 2 partial, Phi* 1 -> 1; l40s: 1 partial, Phi* 1 -> 0; the
        // 6-GPU pool is not modelled
        assert_eq!((s.partial, s.phi_star, s.n_sif), (3, 2, 1));
        // the waiting 4-GPU job fits free GPUs of every pool
        assert_eq!(s.fit_waiting, 1);
        o.poll(
            &[
                job(1, "RUNNING", 0, 1, &[("a1", 1)]),
                job(2, "RUNNING", 0, 1, &[("a2", 1)]),
                job(3, "RUNNING", 0, 1, &[("l1", 2)]),
                job(4, "RUNNING", 0, 0, &[("s1", 4)]),
            ],
            3.0,
            1002,
        );
        let (a, l, x) = (&o.pools[0], &o.pools[1], &o.pools[2]);
        assert_eq!((a.figures.max_n_sif, a.figures.max_n_sif_wcc), (1, Some(1)));
        assert_eq!(
            a.figures.max_n_sif_wcc_settled, None,
            "a job started each poll"
        );
        assert_eq!((l.figures.max_n_sif, l.figures.max_n_sif_wcc), (0, Some(0)));
        assert_eq!(
            x.figures.max_n_sif_wcc, None,
            "no N*SIF in a pass-through pool"
        );
        // the queue waited from 1 s to 3 s; a100's SIF was 1/2 meanwhile
        assert_eq!((a.figures.peak.time_s, a.figures.peak.sif_s), (2.0, 1.0));
        assert_eq!(l.figures.peak.sif_s, 0.0);
        // the l40s pool could have taken the waiting job; the a100 one too
        assert_eq!(
            (
                a.figures.fit_wait_s,
                l.figures.fit_wait_s,
                x.figures.fit_wait_s
            ),
            (2.0, 2.0, 2.0)
        );
        // the cluster's SIF: N*SIF summed over the modelled pools, over
        // their 4 nodes
        assert_eq!(o.figures.peak.sif_s, 2.0 * 1.0 / 4.0);
        assert!((x.figures.peak.util_s - 0.0).abs() < 1e-12);
    }

    fn state_at(updated_unix: u64, id: u64, nodes: &[&str], g: u32) -> PublishedState {
        PublishedState {
            updated_unix,
            jobs: vec![compass_slurm::state::JobView {
                id,
                shape: Some((nodes.len() as u32, g)),
                nodes: nodes.iter().map(|n| n.to_string()).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_run_is_recorded_by_a_state_written_in_its_first_second_unless_an_earlier_run_sat_there() {
        let plan = [PlannedJob::example(0, 1, 4)];
        let mut o = Observer::new(&plan, vec!["n1".into(), "n2".into()], 8, None);
        o.submitted(0, 5, 0.0);
        // the plugin wrote its state in the second the job started, and
        // nothing since: a first run has no earlier record, so it counts
        o.state = Some(state_at(1000, 5, &["n1"], 4));
        o.poll(&[job(5, "RUNNING", 0, 0, &[("n1", 4)])], 1.0, 1000);
        assert!(o.jobs[0].runs[0].engine_recorded);
        // requeued, restarted on the same node: a state of that second may
        // still be the first run's record, so only a later one counts
        o.poll(&[job(5, "PENDING", 1, 0, &[])], 2.0, 1001);
        o.state = Some(state_at(1003, 5, &["n1"], 4));
        o.poll(&[job(5, "RUNNING", 1, 0, &[("n1", 4)])], 3.0, 1003);
        assert!(!o.jobs[0].runs[1].engine_recorded);
        o.state = Some(state_at(1004, 5, &["n1"], 4));
        o.poll(&[job(5, "RUNNING", 1, 1, &[("n1", 4)])], 4.0, 1004);
        assert!(o.jobs[0].runs[1].engine_recorded);
        // a third run elsewhere is told apart by its nodes at once; a wrong
        // record is a mismatch only once it is 3 s younger than the run
        o.poll(&[job(5, "PENDING", 2, 0, &[])], 5.0, 1005);
        o.state = Some(state_at(1006, 5, &["n2"], 4));
        o.poll(&[job(5, "RUNNING", 2, 0, &[("n2", 4)])], 6.0, 1006);
        assert!(o.jobs[0].runs[2].engine_recorded);
        o.poll(&[job(5, "PENDING", 3, 0, &[])], 7.0, 1007);
        o.state = Some(state_at(1009, 5, &["n2"], 4));
        o.poll(&[job(5, "RUNNING", 3, 0, &[("n1", 4)])], 8.0, 1009);
        assert!(o.jobs[0].runs[3].mismatch.is_none());
        o.state = Some(state_at(1012, 5, &["n2"], 4));
        o.poll(&[job(5, "RUNNING", 3, 3, &[("n1", 4)])], 11.0, 1012);
        assert!(o.jobs[0].runs[3].mismatch.is_some());
    }

    /// `COMPLETING`: the run is over, the epilog runs, and Slurm still
    /// holds the job's GPUs, so no waiting job can have them. They count
    /// as allocated (utilisation, `N*SIF`, what a waiting job would fit)
    /// and the job neither waits nor is a migration in flight, unless it
    /// was requeued; its completion is its end as Slurm reports it.
    #[test]
    fn a_completing_job_still_holds_its_gpus_and_does_not_wait() {
        let plan = [
            PlannedJob::example(0, 1, 4),
            PlannedJob::example(1, 1, 4),
            PlannedJob::example(2, 1, 8),
        ];
        let mut o = Observer::new(&plan, vec!["n1".into(), "n2".into()], 8, None);
        for i in 0..3 {
            o.submitted(i, i as u64 + 1, 0.0);
        }
        // job 2 was migrated before (Restarts 1) and runs again on n2
        o.poll(
            &[
                job(1, "RUNNING", 0, 0, &[("n1", 4)]),
                job(2, "RUNNING", 1, 0, &[("n2", 4)]),
                job(3, "PENDING", 0, 0, &[]),
            ],
            1.0,
            1001,
        );
        // both end; the epilogs run
        let s = o.poll(
            &[
                job(1, "COMPLETING", 0, 1, &[("n1", 4)]),
                job(2, "COMPLETING", 1, 1, &[]),
                job(3, "PENDING", 0, 0, &[]),
            ],
            3.0,
            1003,
        );
        assert_eq!((s.used_gpus, s.utilisation), (8, 0.5));
        assert_eq!((s.pending, s.running, s.completing), (1, 0, 2));
        assert_eq!((s.partial, s.n_sif), (2, 2), "the held GPUs are allocated");
        assert_eq!(s.fit_waiting, 0, "no node has 8 free GPUs yet");
        assert!(!s.in_flight, "job 2 finishes: nothing waits to restart");
        assert!(s.settled, "nothing moved: the GPUs are where they were");
        let s = o.poll(
            &[
                job(1, "COMPLETED", 0, 1, &[]),
                job(2, "COMPLETED", 1, 1, &[]),
                job(3, "RUNNING", 0, 0, &[("n1", 8)]),
            ],
            4.0,
            1004,
        );
        assert_eq!((s.used_gpus, s.pending, s.completing), (8, 0, 0));
        // completion as Slurm reports it: start 1 s + 1 s of run
        assert_eq!(
            (o.jobs[0].end_s, o.jobs[0].runs[0].end_s),
            (Some(2.0), Some(2.0))
        );
        assert_eq!(o.jobs[1].runs.len(), 1);
        // T_peak: job 3 waited from 1 s to 4 s, on 8 of 16 GPUs held
        assert_eq!(o.figures.peak.time_s, 3.0);
        assert_eq!(o.figures.peak.util_s, 1.5);
        assert_eq!(o.figures.peak.in_flight_s, 0.0);
        assert_eq!(
            o.figures.fit_wait_s, 0.0,
            "job 3 never fitted the free GPUs"
        );
    }

    /// A requeued job shows `COMPLETING` (Restarts already counted) while
    /// its nodes are released: it holds its GPUs, does not wait yet, and
    /// its migration is in flight; its next start is its second run.
    #[test]
    fn a_requeued_job_completing_holds_its_gpus_and_is_in_flight() {
        let plan = [PlannedJob::example(0, 1, 4)];
        let mut o = Observer::new(&plan, vec!["n1".into(), "n2".into()], 8, None);
        o.submitted(0, 1, 0.0);
        o.poll(&[job(1, "RUNNING", 0, 0, &[("n1", 4)])], 1.0, 1);
        let s = o.poll(&[job(1, "COMPLETING", 1, 1, &[("n1", 4)])], 2.0, 2);
        assert_eq!((s.used_gpus, s.pending, s.completing), (4, 0, 1));
        assert!(s.in_flight && !s.settled, "{s:?}");
        assert_eq!(o.jobs[0].runs[0].end_s, Some(2.0), "the run is over");
        let s = o.poll(&[job(1, "PENDING", 1, 0, &[])], 3.0, 3);
        assert_eq!((s.used_gpus, s.pending, s.completing), (0, 1, 0));
        assert!(s.in_flight);
        o.poll(&[job(1, "RUNNING", 1, 0, &[("n2", 4)])], 4.0, 4);
        assert_eq!(o.jobs[0].runs.len(), 2);
        assert_eq!(o.jobs[0].runs[1].start_s, 4.0);
    }

    #[test]
    fn a_job_gone_from_slurm_is_closed() {
        let plan = [PlannedJob::example(0, 1, 1)];
        let mut o = Observer::new(&plan, vec!["n1".into()], 8, None);
        o.submitted(0, 7, 0.0);
        o.poll(&[job(7, "RUNNING", 0, 0, &[("n1", 1)])], 1.0, 1);
        o.poll(&[], 2.0, 2);
        assert_eq!(o.jobs[0].final_state.as_deref(), Some("GONE"));
        assert_eq!(o.jobs[0].runs[0].end_s, Some(2.0));
        assert!(o.unfinished().is_empty());
    }
}
