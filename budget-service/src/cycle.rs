//! The ingest -> order -> push -> enforce cycle (every `cycle_s`, default
//! 10 s). Enforcement ([`crate::enforce`]) runs when the cycle has Slurm
//! actions ([`Cycle::with_actions`]) and `[protection] enforce` is on.
//!
//! Each step reads Slurm, merges running and ended jobs into the ledger
//! (idempotent), closes intervals of jobs Slurm no longer reports, records
//! demand, orders the pending jobs by fair share and pushes the site factors
//! of the jobs whose place among the others changed (sparse keys,
//! [`fairshare::sparse_site_factors`]: one new job costs one
//! `slurm_update_job`, not one per job behind it). If Slurm does not answer, reads keep being
//! served from the last state and the cycle retries with exponential back-off
//! (capped at 5 minutes); Slurm keeps scheduling on the last pushed order.

use compass_core::fairshare::{self, IntervalKey, Kind, OrgTree};
use compass_core::model::JobId;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::slurm::priority::{self, Margin};
use crate::slurm::{SlurmActions, SlurmSink, SlurmSnapshot, SlurmSource};
use crate::state::{AppState, QueueView, Seen};
use compass_core::preempt::TeamTable;

/// The `team` label of usage by an account no team holds.
pub const UNBUDGETED: &str = "(unbudgeted)";

/// Longest wait between retries when Slurm is down.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How far past the service's last cycle the clock may read before the
/// cycle holds pruning ([`prune_held`]): a day.
pub const PRUNE_HOLD_AFTER_S: i64 = 86_400;

/// What one step did.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct StepReport {
    pub ingested: usize,
    pub closed: usize,
    pub pending: usize,
    pub pushed: usize,
    /// Pending jobs whose Slurm priority is not compass's factor (what the
    /// site's other `PriorityWeight*` add; expected when they are not 0).
    pub priority_offsets: usize,
    /// Pending jobs Slurm's priorities put out of compass's order
    /// ([`crate::slurm::priority::inversions`]): should be 0.
    pub priority_inversions: usize,
    /// The spacing of the pushed site factors, and how it was found.
    pub margin: Margin,
    /// Where QOS priorities came from (empty: the source says nothing).
    pub qos_priorities: String,
    /// Slurm's own `PreemptType`, when it is not `preempt/none`.
    pub slurm_preemption: Option<String>,
    /// Why compass preempted no one this cycle although enforcement is on.
    pub enforcement_held: Option<String>,
    /// What enforcement did (all zero when it is off or has no actions).
    pub enforced: crate::enforce::EnforceReport,
    /// Runs of running or ended jobs left out of the ledger this cycle
    /// because their interval does not validate (a job without an account:
    /// `sbatch` without `-A`, `AccountingStorageType=accounting_storage/none`).
    pub skipped_runs: usize,
    /// Why the cycle prunes nothing (the clock jumped ahead; [`prune_held`]).
    pub pruning_held: Option<String>,
}

/// Why pruning is held at `now`, if it is: the clock reads more than
/// [`PRUNE_HOLD_AFTER_S`] past `reference`, the service's last cycle (at
/// start-up, its newest cycle-history sample not later than `now`), so
/// `retain_days` counted from `now` could delete rows that are not old (a
/// clock stepped forward past `retain_days` deleted the whole ledger).
/// `held_for`: how long the hold has lasted by the monotonic clock; after
/// [`PRUNE_HOLD_AFTER_S`] of it the clock is believed (a real downtime of
/// more than a day, or a step nobody corrected). `None`: prune as usual.
pub fn prune_held(reference: Option<i64>, now: i64, held_for: Option<Duration>) -> Option<String> {
    let reference = reference?;
    let ahead = now.saturating_sub(reference);
    if ahead <= PRUNE_HOLD_AFTER_S
        || held_for.is_some_and(|d| d.as_secs() >= PRUNE_HOLD_AFTER_S as u64)
    {
        return None;
    }
    Some(format!(
        "the clock reads {} past the service's last cycle at {}: nothing is pruned (retain_days) \
         until the clock is back within a day of it, or the service has run a day with it",
        compass_core::duration::format(ahead.unsigned_abs()),
        crate::localtime::text(reference)
    ))
}

/// The wait before the next step: the period after a success; after the
/// `k`-th failure in a row, `period x 2^k`, capped at [`MAX_BACKOFF`].
pub fn next_wait(period: Duration, failures_in_a_row: u32) -> Duration {
    if failures_in_a_row == 0 {
        return period;
    }
    let factor = 1u32
        .checked_shl(failures_in_a_row.min(31))
        .unwrap_or(u32::MAX);
    period.saturating_mul(factor).min(MAX_BACKOFF).max(period)
}

/// GPUs each account runs now (weighted, as charged), allocated and in
/// total: what the team order of `[order]` compares with allocations.
pub fn running_gpus(
    running: &[crate::slurm::SlurmJob],
    weights: &fairshare::GpuWeights,
    tree: Option<&OrgTree>,
) -> HashMap<String, fairshare::RunningGpus> {
    let mut out: HashMap<String, fairshare::RunningGpus> = HashMap::new();
    for j in running {
        let rate = j.charge_rate(weights);
        let r = out.entry(j.account.clone()).or_default();
        r.total += rate;
        if j.kind_in(tree) == Kind::Allocated {
            r.allocated += rate;
        }
    }
    out
}

pub struct Cycle {
    state: Arc<AppState>,
    source: Arc<dyn SlurmSource>,
    sink: Arc<dyn SlurmSink>,
    /// Acts on Slurm for enforcement (`None`: order only).
    actions: Option<Arc<dyn SlurmActions>>,
    /// Site factors Slurm holds, as far as we know (the keys the next
    /// order reuses; see [`fairshare::sparse_site_factors`]).
    pushed: HashMap<JobId, u32>,
    /// A push failed part-way: Slurm may hold other factors than `pushed`,
    /// so the next push sends every factor (the keys themselves stay).
    resync: bool,
    last_ok: Option<i64>,
    last_prune: Option<i64>,
    /// The time of the last cycle whose clock reading pruning trusts
    /// (`None`: not known yet; read from the cycle history at the first
    /// step).
    clock_trusted: Option<i64>,
    /// Why pruning is held, and since when (monotonic clock).
    pruning_held: Option<(String, Instant)>,
    /// Runs left out of the ledger that were already warned about (those
    /// still reported; a run is warned about once).
    skip_warned: HashSet<IntervalKey>,
    /// Pending jobs of the last snapshot (their start gives a wait time).
    was_pending: HashSet<JobId>,
}

impl Cycle {
    pub fn new(
        state: Arc<AppState>,
        source: Arc<dyn SlurmSource>,
        sink: Arc<dyn SlurmSink>,
    ) -> Self {
        Self {
            state,
            source,
            sink,
            actions: None,
            pushed: HashMap::new(),
            resync: false,
            last_ok: None,
            last_prune: None,
            clock_trusted: None,
            pruning_held: None,
            skip_warned: HashSet::new(),
            was_pending: HashSet::new(),
        }
    }

    /// Enforces protected and preemptible time through `actions` each step
    /// (when `[protection] enforce` is on); also lets `compass node
    /// fault|repaired` act on Slurm.
    pub fn with_actions(mut self, actions: Arc<dyn SlurmActions>) -> Self {
        let _ = self.state.slurm_actions.set(actions.clone());
        self.actions = Some(actions);
        self
    }

    /// One ingest -> order -> push -> enforce step.
    pub fn step(&mut self) -> Result<StepReport> {
        let t0 = std::time::Instant::now();
        let res = self.try_step();
        let m = &self.state.metrics;
        m.cycle(res.is_ok(), t0.elapsed().as_secs_f64());
        if let Ok(r) = &res {
            m.site_factor_updates.inc_by(r.pushed as u64);
        }
        let mut st = self.state.status();
        match &res {
            Ok(r) => {
                if r.priority_inversions > 0 && st.priority_inversion_jobs == 0 {
                    tracing::warn!(
                        jobs = r.priority_inversions,
                        margin = r.margin.spacing,
                        "Slurm's priorities put pending jobs out of compass's order within a partition tier \
                         (a priority set by hand, or a PriorityFlags=NO_NORMAL_* term above the margin; docs/admin-guide.md)"
                    );
                }
                if r.enforcement_held.is_some() && st.enforcement_held.is_none() {
                    tracing::warn!(
                        why = r.enforcement_held.as_deref().unwrap_or_default(),
                        "compass preempts for no waiting job beside Slurm's own preemption"
                    );
                }
                st.skipped_runs = r.skipped_runs as u64;
                st.priority_offset_jobs = r.priority_offsets as u64;
                st.priority_inversion_jobs = r.priority_inversions as u64;
                st.priority_margin = r.margin.clone();
                st.qos_priorities = r.qos_priorities.clone();
                st.slurm_preemption = r.slurm_preemption.clone();
                st.enforcement_held = r.enforcement_held.clone();
                st.pruning_held = r.pruning_held.clone();
                st.slurm_connected = true;
                st.last_ok = Some(self.state.now());
                st.last_error = None;
                st.cycles_ok += 1;
                st.factors_pushed += r.pushed as u64;
                st.requeued += r.enforced.requeued as u64;
                st.cancelled += r.enforced.cancelled as u64;
                st.drained += r.enforced.drained as u64;
                st.actions_failed += r.enforced.failed as u64;
            }
            Err(e) => {
                st.pruning_held = self.pruning_held.as_ref().map(|h| h.0.clone());
                st.slurm_connected = false;
                st.last_error = Some(e.to_string());
                st.cycles_failed += 1;
            }
        }
        res
    }

    fn try_step(&mut self) -> Result<StepReport> {
        // Nothing is ingested or enforced into a database file that was
        // removed or replaced (it would be lost at the next start).
        self.state.db().check_file()?;
        // Before Slurm is asked: a cycle that fails (Slurm down) still
        // tells the clock's time, so an outage holds no pruning.
        self.check_clock()?;
        let snap = self.source.snapshot().inspect_err(|_| {
            self.state.metrics.slurm_rpc_error("snapshot");
        })?;
        let now = self.state.now();
        let mut rep = StepReport::default();
        // `[gpu_weights]`: every charge, demand, load and capacity below is
        // in weighted GPUs, priced here and only here.
        let weights = self.state.config.weights();
        // The tree of this cycle: it decides which runs are allocated
        // (`Kind::of_job`) in the ledger, the order and enforcement alike.
        let tree = self.state.db().load_tree()?;
        let observed = self.valid_runs(&snap, &weights, tree.as_ref());
        rep.skipped_runs = self.skip_warned.len();
        let running: Vec<(JobId, i64)> = snap
            .running
            .iter()
            .filter_map(|j| j.start.map(|s| (j.job, s)))
            .collect();
        let window = self.state.config.window_s;
        let capacity = snap
            .weighted_capacity(&weights)
            .unwrap_or(f64::from(self.state.config.capacity_gpus));
        let elapsed = match self.last_ok {
            Some(t) => (now - t).clamp(0, 3 * self.state.config.cycle_s as i64),
            None => self.state.config.cycle_s as i64,
        } as f64;
        let mut demand: HashMap<String, f64> = HashMap::new();
        for j in snap
            .running
            .iter()
            .chain(snap.pending.iter())
            .filter(|j| j.kind_in(tree.as_ref()) == Kind::Allocated)
        {
            *demand.entry(j.account.clone()).or_default() += j.charge_rate(&weights) * elapsed;
        }
        let usage = {
            let mut db = self.state.db();
            let r = db.ingest_observed(&observed, now)?;
            db.record_job_users(&run_users(&snap))?;
            rep.ingested = r.inserted;
            rep.closed = r.closed + db.close_vanished(&running, now)?;
            let mut d: Vec<(String, f64)> = demand.into_iter().collect();
            d.sort_by(|a, b| a.0.cmp(&b.0));
            db.add_demand(now, &d)?;
            rep.pruning_held = self.pruning_held.as_ref().map(|h| h.0.clone());
            if rep.pruning_held.is_none()
                && self.last_prune.is_none_or(|t| now < t || now - t >= 3600)
            {
                db.prune_before(now - self.state.config.retain_days * 86400)?;
                db.prune_actions_before(now - self.state.config.retain_days * 86400)?;
                self.last_prune = Some(now);
            }
            db.usage_between(now - window, now)?
        };
        // Issue 12: within a tier, QOS priority bands (when the site weighs
        // QOS), then fair share; site factors spaced by the margin so the
        // site's other priority terms cannot reorder them.
        let conf = snap.priority_conf.as_ref();
        let qos_weighted = conf.is_some_and(|c| c.qos_weighted());
        let qos = &snap.qos_priorities;
        let pending: Vec<_> = snap
            .pending
            .iter()
            .map(|j| {
                let mut p = j.as_pending();
                p.qos_priority = if qos_weighted {
                    qos.by_name.get(&j.qos).copied().unwrap_or(0)
                } else {
                    0
                };
                p
            })
            .collect();
        rep.pending = pending.len();
        rep.priority_offsets = snap.priority_offsets.len();
        rep.margin = match conf {
            Some(c) => c.margin(
                qos.by_name.values().copied().max().unwrap_or(0),
                snap.priority_offsets.iter().map(|o| o.1).max().unwrap_or(0),
            ),
            None => Margin {
                spacing: 1,
                ..Margin::default()
            },
        };
        rep.qos_priorities = qos.source.clone();
        rep.slurm_preemption = conf.and_then(|c| c.slurm_preemption()).map(str::to_string);
        let mut ratios = TeamTable::default();
        let order = match &tree {
            Some(tree) => {
                let stats = fairshare::node_stats(tree, &usage, capacity, window);
                ratios =
                    crate::enforce::team_table(tree, &stats, &snap.running, capacity, &weights);
                let run = running_gpus(&snap.running, &weights, Some(tree));
                let now = fairshare::QueueState {
                    capacity_gpus: capacity,
                    running: &run,
                };
                fairshare::order_queue_by(tree, &stats, &now, self.state.config.order, &pending)
            }
            None => {
                let empty = compass_core::fairshare::OrgTree::build(&[
                    compass_core::fairshare::NodeSpec {
                        name: "(none)".into(),
                        parent: None,
                        share: 1.0,
                        managers: vec![],
                        account: None,
                    },
                ])?;
                let stats = fairshare::node_stats(&empty, &usage, capacity, window);
                fairshare::order_queue(&empty, &stats, &pending)
            }
        };
        // Sparse keys: a job's factor changes only when its place among the
        // others really changed, so a cycle sends few slurm_update_job.
        // What Slurm holds is the truth when the source reports it (after a
        // restart, or a factor set behind our back); else what we pushed.
        let mut held = std::mem::take(&mut self.pushed);
        held.extend(snap.site_factors.iter().copied());
        let factors = fairshare::sparse_site_factors_spaced(&held, &order, rep.margin.spacing);
        let changed = if self.resync {
            factors.clone()
        } else {
            fairshare::changed_factors(&held, &factors)
        };
        let factor_map: HashMap<JobId, u32> = factors.into_iter().collect();
        if !changed.is_empty() {
            if let Err(e) = self.sink.set_site_factors(&changed) {
                self.state.metrics.slurm_rpc_error("update_job");
                // Part of the push may have landed: keep these keys, and
                // send all of them on the next successful cycle.
                self.pushed = factor_map;
                self.resync = true;
                return Err(e);
            }
        }
        rep.pushed = changed.len();
        rep.priority_inversions = priority::inversions(
            &order,
            &snap.site_factors.iter().copied().collect(),
            &factor_map,
            &snap.priorities.iter().copied().collect(),
        )
        .len();
        self.resync = false;
        self.pushed = factor_map.clone();
        self.state.set_capacity(capacity);
        self.state.set_seen(Seen {
            nodes: snap.nodes.clone(),
            running: snap.running.iter().map(|j| (j.job.0, j.clone())).collect(),
        });
        let prot = &self.state.config.protection;
        if let (true, Some(actions)) = (prot.enforce.runs(), &self.actions) {
            // Slurm preempting on its own beside compass: two rules would
            // pick victims for the same waiting jobs. compass then frees
            // room for no one (an empty queue) unless the site opted in;
            // faulty nodes are still drained.
            rep.enforcement_held = match (&rep.slurm_preemption, prot.beside_slurm_preemption) {
                (Some(t), false) => Some(format!(
                    "PreemptType={t}: Slurm preempts on its own, so compass preempts for no waiting job \
                     (set [protection] beside_slurm_preemption = true to preempt as well)"
                )),
                _ => None,
            };
            let queue: &[fairshare::Placed] = if rep.enforcement_held.is_some() {
                &[]
            } else {
                &order
            };
            rep.enforced = crate::enforce::enforce(
                &self.state,
                actions.as_ref(),
                &snap,
                queue,
                tree.as_ref(),
                &ratios,
                &prot.core(),
            )?;
        }
        let job_weights = snap
            .pending
            .iter()
            .map(|j| (j.job, j.weight(&weights)))
            .collect();
        self.state.set_queue(QueueView {
            at: now,
            order,
            factors: factor_map,
            weights: job_weights,
            weighted: !weights.is_uniform(),
            users: (snap.pending.iter())
                .map(|j| (j.job, j.user.clone()))
                .collect(),
            ..QueueView::default()
        });
        let started_waits = self.observe(&snap, tree.as_ref(), elapsed);
        self.record_sample(&snap, now, capacity, &weights, started_waits);
        self.last_ok = Some(now);
        Ok(rep)
    }

    /// The ledger intervals of the snapshot's running and ended jobs that
    /// validate. One that does not (a job without an account: `sbatch`
    /// without `-A`, or `AccountingStorageType=accounting_storage/none`,
    /// which libslurm reads as "") is left out, with a warning the first
    /// time the run is seen: the ledger writes a cycle's runs in one
    /// transaction, and one refused run failed every cycle (no ledger, no
    /// order pushed, no enforcement). Such a job charges no team; it is
    /// ordered and enforced on as an account outside the tree.
    fn valid_runs(
        &mut self,
        snap: &SlurmSnapshot,
        weights: &fairshare::GpuWeights,
        tree: Option<&OrgTree>,
    ) -> Vec<fairshare::Interval> {
        let mut skipped = HashSet::new();
        let mut valid = Vec::new();
        for j in snap.running.iter().chain(snap.ended.iter()) {
            let Some(iv) = j.as_interval(weights, tree) else {
                continue;
            };
            match iv.validate() {
                Ok(()) => valid.push(iv),
                Err(e) => {
                    if !self.skip_warned.contains(&iv.key()) {
                        tracing::warn!(
                            job = j.job.0,
                            start = iv.start,
                            account = %j.account,
                            user = %j.user,
                            error = %e,
                            "run left out of the ledger: it charges no team (a job without an account: \
                             sbatch without -A, or AccountingStorageType=accounting_storage/none); \
                             the other jobs are ingested, ordered and enforced as usual"
                        );
                    }
                    skipped.insert(iv.key());
                }
            }
        }
        self.skip_warned = skipped;
        valid
    }

    /// Reads the clock and decides whether pruning is held
    /// ([`prune_held`]); the time becomes the reference of the next cycle
    /// unless it is held.
    fn check_clock(&mut self) -> Result<()> {
        let now = self.state.now();
        if self.clock_trusted.is_none() {
            // Once: what the database knows (the samples this process
            // writes while the clock is ahead are not a reference).
            self.clock_trusted = self.state.db().last_cycle_at(now)?;
        }
        let reference = self.clock_trusted;
        let held_for = self.pruning_held.as_ref().map(|h| h.1.elapsed());
        match prune_held(reference, now, held_for) {
            Some(why) => {
                if self.pruning_held.is_none() {
                    tracing::warn!(
                        why = %why,
                        "the clock jumped ahead: pruning held (check the host's clock and NTP)"
                    );
                    self.pruning_held = Some((why, Instant::now()));
                } else if let Some(h) = self.pruning_held.as_mut() {
                    h.0 = why;
                }
            }
            None => {
                if self.pruning_held.take().is_some() {
                    tracing::info!(
                        "pruning resumed: the clock is back, or has been believed for a day"
                    );
                }
                self.clock_trusted = Some(now);
            }
        }
        Ok(())
    }

    /// Counts for `/metrics` what this snapshot shows: the GPU-seconds of
    /// each team's running jobs over the last `elapsed` seconds, and the
    /// wait of each job seen pending last time and started since.
    /// Returns the waits (seconds) of the jobs started since.
    fn observe(&mut self, snap: &SlurmSnapshot, tree: Option<&OrgTree>, elapsed: f64) -> Vec<f64> {
        let m = &self.state.metrics;
        let mut waits = Vec::new();
        for j in &snap.running {
            let team = tree
                .and_then(|t| Some(t.node(t.leaf_for_account(&j.account).ok()?).name.clone()))
                .unwrap_or_else(|| UNBUDGETED.to_string());
            m.team_usage(&team, j.kind_in(tree), f64::from(j.gpus) * elapsed);
        }
        for j in snap.running.iter().chain(snap.ended.iter()) {
            if let (true, Some(start)) = (self.was_pending.contains(&j.job), j.start) {
                m.job_started(j.gpus, (start - j.submit) as f64);
                waits.push((start - j.submit).max(0) as f64);
            }
        }
        self.was_pending = snap.pending.iter().map(|j| j.job).collect();
        waits
    }

    /// Records this cycle's cluster-wide figures in the cycle history
    /// (issue 14: the dashboard's occupancy, wait and fragmentation
    /// charts): GPUs allocated against capacity, pending jobs, the longest
    /// wait so far, the median wait of `started_waits`, and the select
    /// plugin's N*SIF and partial nodes when its state file is read. A
    /// failed write is logged, never fails the cycle.
    fn record_sample(
        &self,
        snap: &SlurmSnapshot,
        now: i64,
        capacity: f64,
        weights: &fairshare::GpuWeights,
        started_waits: Vec<f64>,
    ) {
        let select = self.state.select_read().state.map(|s| {
            let pools = s.pools();
            (
                pools.iter().map(|p| p.n_sif).sum::<f64>(),
                pools
                    .iter()
                    .map(|p| f64::from(p.partial_nodes))
                    .sum::<f64>(),
            )
        });
        let sample = crate::db::CycleSample {
            at: now,
            gpus_allocated: snap.running.iter().map(|j| j.charge_rate(weights)).sum(),
            capacity_gpus: capacity,
            pending_jobs: snap.pending.len() as f64,
            longest_wait_s: (snap.pending.iter())
                .map(|j| (now - j.submit).max(0) as f64)
                .reduce(f64::max),
            median_wait_s: median(started_waits),
            n_sif: select.map(|s| s.0),
            partial_nodes: select.map(|s| s.1),
        };
        if let Err(e) = self.state.db().record_cycle_sample(&sample) {
            tracing::warn!(error = %e, "cannot record the cycle history sample");
        }
    }

    /// Runs [`Cycle::run`] on its own thread.
    pub fn spawn(self, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || self.run(stop))
    }

    /// Runs steps every `cycle_s` until `stop` is set, backing off
    /// exponentially while Slurm fails. Blocking: run it on its own thread.
    pub fn run(mut self, stop: Arc<AtomicBool>) {
        let period = Duration::from_secs(self.state.config.cycle_s);
        let mut failures = 0u32;
        while !stop.load(Ordering::SeqCst) {
            match self.step() {
                Ok(r) => {
                    tracing::debug!(?r, "cycle ok");
                    failures = 0;
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(
                        error = %e,
                        retry_in_s = next_wait(period, failures).as_secs(),
                        "cycle failed; serving reads from the last state"
                    );
                }
            }
            let wait = next_wait(period, failures);
            let until = std::time::Instant::now() + wait;
            while !stop.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// `(job, run start, user)` of the snapshot's runs, for the ledger (who may
/// read a job after it has ended under `PrivateData=jobs`).
fn run_users(snap: &crate::slurm::SlurmSnapshot) -> Vec<(JobId, i64, String)> {
    (snap.running.iter().chain(snap.ended.iter()))
        .filter_map(|j| j.start.map(|s| (j.job, s, j.user.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Authenticator;
    use crate::config::Config;
    use crate::db::Db;
    use crate::error::BudgetError;
    use crate::slurm::{FakeSlurm, SlurmJob};
    use crate::state::TestClock;
    use compass_core::fairshare::NodeSpec;
    use compass_core::preempt::NodeTraits;

    struct NoAuth;
    impl Authenticator for NoAuth {
        fn authenticate(&self, _c: &str, _p: &[u8]) -> Result<String> {
            Err(BudgetError::Unauthenticated("tests".into()))
        }
    }

    /// `[gpu_weights] a100 = 2, l40s = 1`: an a100 job is charged twice what
    /// an l40s job of the same GPUs and time is; capacity, allocations,
    /// demand and `compass why` are in weighted GPUs.
    #[test]
    fn jobs_are_charged_per_gpu_weight() {
        let t0 = 1_000_000;
        let config = Config::parse(
            "db = \":memory:\"\ncapacity_gpus = 99\nwindow_s = 3600\n\
             [gpu_weights]\na100 = 2.0\nl40s = 1.0\n",
            "t",
        )
        .unwrap();
        let clock = Arc::new(TestClock::new(t0));
        let state = AppState::new(
            config,
            Db::open_in_memory().unwrap(),
            Arc::new(NoAuth),
            clock.clone(),
        );
        let spec = |name: &str, parent: Option<&str>, share: f64| NodeSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            share,
            managers: vec![],
            account: parent.map(|_| name.to_string()),
        };
        state
            .db()
            .edit_tree("root", "import", "halves", t0, |_| {
                Ok(vec![
                    spec("org", None, 1.0),
                    spec("ta", Some("org"), 0.5),
                    spec("tb", Some("org"), 0.5),
                ])
            })
            .unwrap();
        let slurm = Arc::new(FakeSlurm::new());
        // One a100 node of 8 (16 weighted GPUs), one l40s node of 4 (4) and
        // one untyped node of 2 (2): capacity 22.
        for (name, gpus, ty) in [
            ("a1", 8, Some("a100")),
            ("l1", 4, Some("l40s")),
            ("u1", 2, None),
        ] {
            slurm.add_node(name, gpus);
            slurm.set_traits(NodeTraits {
                name: name.into(),
                gpus,
                gpu_types: ty.into_iter().map(str::to_string).collect(),
                ..NodeTraits::default()
            });
        }
        // 4 a100 GPUs for team ta, 4 l40s GPUs for team tb, for 100 s each.
        let mut a = SlurmJob::basic(JobId(1), "ta", 4, 600, true, 0, t0);
        a.gpu_types.insert("a100".into(), 4);
        a.start = Some(t0);
        a.alloc = vec![("a1".into(), 4)];
        slurm.put(a);
        let mut b = SlurmJob::basic(JobId(2), "tb", 4, 600, true, 0, t0);
        b.gpu_types.insert("l40s".into(), 4);
        b.start = Some(t0);
        b.alloc = vec![("l1".into(), 4)];
        slurm.put(b);
        // A pending a100 request, for the queue's weight.
        let mut p = SlurmJob::basic(JobId(3), "tb", 2, 600, true, 0, t0);
        p.gpu_types.insert("a100".into(), 2);
        slurm.put(p);
        let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
        cycle.step().unwrap();
        clock.set(t0 + 100);
        slurm.end(JobId(1), t0 + 100);
        slurm.end(JobId(2), t0 + 100);
        cycle.step().unwrap();

        assert_eq!(state.capacity(), 8.0 * 2.0 + 4.0 + 2.0);
        let usage = state.db().usage_between(t0, t0 + 100).unwrap();
        assert_eq!(usage["ta"].charged_gpu_s, 4.0 * 2.0 * 100.0);
        assert_eq!(usage["tb"].charged_gpu_s, 4.0 * 1.0 * 100.0);
        let view = state.tree_view(t0, t0 + 100).unwrap();
        let ta = view.iter().find(|n| n.name == "ta").unwrap();
        assert_eq!(ta.allocation_gpus, 11.0);
        assert!((ta.charged_gpu_hours - 800.0 / 3600.0).abs() < 1e-12);
        // Same GPUs and time, twice the charge: ta is the more served team.
        let tb = view.iter().find(|n| n.name == "tb").unwrap();
        assert!((ta.ratio.unwrap() - 2.0 * tb.ratio.unwrap()).abs() < 1e-12);
        assert_eq!(
            state
                .db()
                .latest_interval(JobId(1))
                .unwrap()
                .unwrap()
                .weight,
            2.0
        );
        // The pending a100 request shows its weight.
        let q = state.queue();
        assert_eq!(q.weights[&JobId(3)], 2.0);
        assert!(q.weighted);
    }

    /// A state with teams `ta` and `tb` (halves) whose `ta` has used 8 GPUs
    /// for 1000 s (over-served), and its clock.
    fn two_teams(config: &str) -> (Arc<AppState>, Arc<TestClock>) {
        let t0 = 1_000_000;
        let config = Config::parse(config, "t").unwrap();
        let clock = Arc::new(TestClock::new(t0));
        let state = AppState::new(
            config,
            Db::open_in_memory().unwrap(),
            Arc::new(NoAuth),
            clock.clone(),
        );
        let spec = |name: &str, parent: Option<&str>| NodeSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            share: if parent.is_some() { 0.5 } else { 1.0 },
            managers: vec![],
            account: parent.map(|_| name.to_string()),
        };
        state
            .db()
            .edit_tree("root", "import", "halves", t0, |_| {
                Ok(vec![
                    spec("org", None),
                    spec("ta", Some("org")),
                    spec("tb", Some("org")),
                ])
            })
            .unwrap();
        state
            .db()
            .ingest_observed(
                &[compass_core::fairshare::Interval {
                    job: JobId(999),
                    account: "ta".into(),
                    gpus: 8,
                    start: t0 - 1000,
                    end: Some(t0),
                    kind: Kind::Allocated,
                    weight: 1.0,
                }],
                t0,
            )
            .unwrap();
        (state, clock)
    }

    fn weights(qos: u32) -> crate::slurm::PriorityConf {
        crate::slurm::PriorityConf {
            priority_type: "priority/multifactor".into(),
            weight_age: 5000,
            weight_job_size: 3000,
            weight_qos: qos,
            preempt_type: "preempt/none".into(),
            accounting_storage_type: "accounting_storage/slurmdbd".into(),
            ..Default::default()
        }
    }

    fn pending(id: u64, account: &str, tier: u16, qos: &str, submit: i64) -> SlurmJob {
        let mut j = SlurmJob::basic(JobId(id), account, 1, 3600, true, 0, submit);
        j.tier = tier;
        j.qos = qos.into();
        j
    }

    /// Issue 12: with non-zero age and job-size weights, jobs in two
    /// partition tiers and three QOS, Slurm's scheduling order (tier, then
    /// priority = site factor + what the other terms add) is compass's
    /// order: tier, then QOS priority, then fair share. The new jobs land
    /// between two old ones again and again, so their keys would end up
    /// closer than the 8,100 an old job's age and size add (checked: with
    /// keys one apart, as before the margin, job 5 passes the new jobs).
    #[test]
    fn slurm_order_is_tier_then_qos_then_fair_share_with_nonzero_weights() {
        let (state, _clock) = two_teams("db = \":memory:\"\ncapacity_gpus = 8\n");
        let t0 = 1_000_000;
        let slurm = Arc::new(FakeSlurm::new());
        slurm.set_priority_conf(Some(weights(1000)));
        slurm.set_qos_priorities(&[("high", 100), ("normal", 10), ("scavenger", 0)]);
        for j in [
            pending(1, "ta", 1, "normal", t0 - 500),
            pending(2, "tb", 1, "normal", t0 - 400),
            pending(3, "ta", 0, "high", t0 - 300),
            pending(4, "tb", 0, "normal", t0 - 200),
            pending(5, "ta", 0, "normal", t0 - 100),
            pending(6, "tb", 0, "scavenger", t0 - 50),
        ] {
            slurm.put(j);
        }
        // Job 5 is old and large: age and job size add 5000 + 3000 and
        // its QOS 10/100 x 1000; the others add little.
        slurm.set_extra_priority(JobId(5), 8100);
        let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
        let ids = |state: &AppState| -> Vec<u64> {
            state.queue().order.iter().map(|p| p.job.job.0).collect()
        };
        cycle.step().unwrap();
        // Tier 1 (tb before the over-served ta); tier 0: QOS high (even of
        // ta), normal (tb before ta), scavenger.
        assert_eq!(ids(&state), [2, 1, 3, 4, 5, 6]);
        // New tb jobs of QOS normal go between 4 and 5, one per cycle.
        for k in 0..8 {
            let id = 10 + k;
            slurm.put(pending(id, "tb", 0, "normal", t0 + k as i64));
            cycle.step().unwrap();
            let slurm_order: Vec<u64> = slurm.scheduling_order().iter().map(|j| j.0).collect();
            assert_eq!(slurm_order, ids(&state), "after job {id}");
        }
        assert_eq!(&ids(&state)[..5], [2, 1, 3, 4, 10]);
        assert_eq!(&ids(&state)[12..], [5, 6]);
        let st = state.status();
        assert_eq!(st.priority_inversion_jobs, 0);
        assert_eq!(st.priority_offset_jobs, 1);
        assert_eq!(st.priority_margin.spacing, 16_384);
        assert_eq!(st.qos_priorities, "fake");
        // The keys really are a margin apart.
        let f = slurm.factors();
        let order = state.queue().order.clone();
        for w in order.windows(2) {
            assert!(f[&w[0].job.job] >= f[&w[1].job.job] + 16_384, "{w:?}");
        }
    }

    /// A site that does not weigh QOS (`PriorityWeightQOS=0`): QOS
    /// priorities do not order jobs, in Slurm or in compass.
    #[test]
    fn qos_does_not_order_jobs_when_the_site_does_not_weigh_it() {
        let (state, _clock) = two_teams("db = \":memory:\"\ncapacity_gpus = 8\n");
        let t0 = 1_000_000;
        let slurm = Arc::new(FakeSlurm::new());
        slurm.set_priority_conf(Some(weights(0)));
        slurm.set_qos_priorities(&[("high", 100)]);
        slurm.put(pending(3, "ta", 0, "high", t0 - 300));
        slurm.put(pending(4, "tb", 0, "normal", t0 - 200));
        let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
        cycle.step().unwrap();
        let ids: Vec<u64> = state.queue().order.iter().map(|p| p.job.job.0).collect();
        assert_eq!(ids, [4, 3]);
        assert_eq!(state.status().priority_margin.spacing, 8192);
    }

    /// A job whose priority an admin set by hand sits out of compass's
    /// order: it is counted in `priority_inversion_jobs`.
    #[test]
    fn jobs_out_of_compass_order_in_slurm_are_counted() {
        let (state, _clock) = two_teams("db = \":memory:\"\ncapacity_gpus = 8\n");
        let t0 = 1_000_000;
        let slurm = Arc::new(FakeSlurm::new());
        slurm.set_priority_conf(Some(weights(0)));
        slurm.put(pending(1, "tb", 0, "", t0));
        slurm.put(pending(2, "ta", 0, "", t0));
        let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
        cycle.step().unwrap();
        cycle.step().unwrap();
        assert_eq!(state.status().priority_inversion_jobs, 0);
        slurm.set_extra_priority(JobId(2), 1_500_000_000);
        cycle.step().unwrap();
        assert_eq!(state.status().priority_inversion_jobs, 1);
    }

    /// `PreemptType=preempt/qos` beside compass: compass preempts for no
    /// waiting job (and says why) unless `beside_slurm_preemption` is set.
    #[test]
    fn slurm_preemption_holds_compass_preemptions_unless_the_site_opts_in() {
        for (opt_in, preempt) in [
            (false, "preempt/qos"),
            (true, "preempt/qos"),
            (false, "preempt/none"),
        ] {
            let config = format!(
                "db = \":memory:\"\ncapacity_gpus = 8\n[protection]\nbeside_slurm_preemption = {opt_in}\n"
            );
            let (state, clock) = two_teams(&config);
            let t0 = 1_000_000;
            let slurm = Arc::new(FakeSlurm::new());
            slurm.set_now(t0);
            slurm.set_priority_conf(Some(crate::slurm::PriorityConf {
                preempt_type: preempt.into(),
                ..weights(0)
            }));
            slurm.add_node("n1", 8);
            // tb's unallocated job holds the node; ta's allocated job waits.
            let mut free = SlurmJob::basic(JobId(1), "tb", 8, 0, true, 0, t0 - 100);
            free.start = Some(t0 - 100);
            free.alloc = vec![("n1".into(), 8)];
            slurm.put(free);
            slurm.put(SlurmJob::basic(JobId(2), "ta", 8, 3600, true, 0, t0));
            let mut cycle =
                Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
            clock.set(t0 + 10);
            cycle.step().unwrap();
            let held = state.status().enforcement_held.clone();
            let requeued = slurm
                .actions()
                .contains(&crate::slurm::FakeAction::Requeue(JobId(1)));
            if preempt == "preempt/qos" && !opt_in {
                assert!(
                    held.as_deref()
                        .is_some_and(|h| h.contains("PreemptType=preempt/qos")),
                    "{held:?}"
                );
                assert!(!requeued, "{:?}", slurm.actions());
                assert_eq!(
                    state.status().slurm_preemption.as_deref(),
                    Some("preempt/qos")
                );
            } else {
                assert_eq!(held, None);
                assert!(requeued, "{preempt} opt-in {opt_in}: {:?}", slurm.actions());
            }
        }
    }

    /// Issue 14: each cycle records one sample of the cycle history (GPUs
    /// allocated, capacity, pending jobs, longest and median wait, the
    /// select plugin's N*SIF); a later cycle of the same minute replaces
    /// the earlier one; samples older than `retain_days` are pruned.
    #[test]
    fn cycles_record_history_one_row_per_minute_pruned_with_retention() {
        let (state, clock) = two_teams("db = \":memory:\"\ncapacity_gpus = 8\nretain_days = 366\n");
        // t0 = 1_000_000 is 40 s into its minute.
        let t0 = 1_000_000;
        let slurm = Arc::new(FakeSlurm::new());
        slurm.add_node("n1", 8);
        slurm.put(SlurmJob::basic(JobId(1), "ta", 2, 600, true, 0, t0 - 600));
        slurm.put(SlurmJob::basic(JobId(2), "tb", 1, 600, true, 0, t0 - 300));
        let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
        let history = |from: i64, to: i64| state.db().history(from, to).unwrap().0;
        cycle.step().unwrap();
        let h = history(t0 - 60, t0 + 60);
        assert_eq!(h.len(), 1);
        assert_eq!(
            (h[0].gpus_allocated, h[0].capacity_gpus, h[0].pending_jobs),
            (0.0, 8.0, 2.0)
        );
        assert_eq!(
            (h[0].longest_wait_s, h[0].median_wait_s),
            (Some(600.0), None)
        );
        assert_eq!((h[0].n_sif, h[0].partial_nodes), (None, None));
        // Same minute: job 1 started at t0 + 5 (waited 605 s); the row is
        // replaced by this cycle's values.
        clock.set(t0 + 10);
        slurm.start_on(JobId(1), t0 + 5, &[("n1", 2)]);
        cycle.step().unwrap();
        let h = history(t0 - 60, t0 + 60);
        assert_eq!(h.len(), 1, "one row per minute: {h:?}");
        assert_eq!((h[0].gpus_allocated, h[0].pending_jobs), (2.0, 1.0));
        assert_eq!(
            (h[0].longest_wait_s, h[0].median_wait_s),
            (Some(310.0), Some(605.0))
        );
        assert_eq!(state.db().cycle_history_rows().unwrap(), 1);
        // The next minute, with the select plugin's state read: a second row.
        state.set_select_read(crate::select_state::SelectRead {
            state: Some(crate::select_state::SelectFigures {
                format: crate::select_state::FORMAT,
                gpus_per_node: 8,
                partial_nodes: 1,
                n_sif: 1.0,
                ..Default::default()
            }),
            error: None,
        });
        clock.set(t0 + 30);
        cycle.step().unwrap();
        let h = history(t0 - 60, t0 + 120);
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!((h[1].n_sif, h[1].partial_nodes), (Some(1.0), Some(1.0)));
        assert_eq!(h[1].median_wait_s, None, "no job started since");
        // 367 days later, a cycle a day: the old rows are pruned
        // (retain_days = 366). A jump of 367 days at once would hold
        // pruning (`prune_held`).
        let later = t0 + 367 * 86400;
        for day in 1..367 {
            clock.set(t0 + 30 + day * 86400);
            cycle.step().unwrap();
            assert_eq!(state.status().pruning_held, None, "day {day}");
        }
        clock.set(later);
        cycle.step().unwrap();
        assert!(history(t0 - 60, t0 + 120).is_empty());
        assert_eq!(history(later - 60, later + 60).len(), 1);
    }

    /// Pruning is held while the clock reads more than a day past the
    /// last cycle, until it is back or the hold has lasted a day.
    #[test]
    fn pruning_is_held_after_a_jump_of_more_than_a_day() {
        let day = PRUNE_HOLD_AFTER_S;
        assert_eq!(
            prune_held(None, 5 * day, None),
            None,
            "nothing to compare with"
        );
        assert_eq!(prune_held(Some(0), day, None), None);
        assert_eq!(prune_held(Some(5 * day), 0, None), None, "a step back");
        let why = prune_held(Some(0), day + 1, None).unwrap();
        assert!(why.contains("past the service's last cycle"), "{why}");
        let held = Some(Duration::from_secs(3600));
        assert!(prune_held(Some(0), 400 * day, held).is_some());
        let a_day = Some(Duration::from_secs(day as u64));
        assert_eq!(
            prune_held(Some(0), 400 * day, a_day),
            None,
            "believed after a day"
        );
    }

    #[test]
    fn median_of_waits() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![5.0]), Some(5.0));
        assert_eq!(median(vec![9.0, 1.0, 4.0]), Some(4.0));
        assert_eq!(median(vec![9.0, 1.0, 4.0, 2.0]), Some(3.0));
    }

    #[test]
    fn back_off_doubles_and_caps() {
        let p = Duration::from_secs(10);
        let waits: Vec<u64> = (0..8).map(|k| next_wait(p, k).as_secs()).collect();
        assert_eq!(waits, vec![10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(next_wait(p, u32::MAX), MAX_BACKOFF);
        // A period longer than the cap is never shortened.
        assert_eq!(
            next_wait(Duration::from_secs(600), 3),
            Duration::from_secs(600)
        );
    }
}
