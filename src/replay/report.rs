//! The replay's figures per cluster, defined as the simulator defines them
//! (`compass_core::sim::SimResult`, paper Section 5.5), the checks of
//! `--check`, and `report.md` / `report.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use compass_core::sim::Percentiles;
use serde::Serialize;

use super::observe::Observer;
use super::plan::Plan;
use super::service::ServiceModel;

/// Runs at least this long (wall seconds) must appear in the engine's
/// published state. The plugin thread publishes at most once a second and
/// is busy for up to 10 s while it carries out a migration (it waits for
/// the requeued job to be pending, slurm-plugin/select/src/worker.rs), so a
/// shorter run may start and end between two writes.
pub const RECORD_MIN_RUN_S: f64 = 12.0;

/// Share of the jobs, by total GPUs, whose waits are reported as "largest".
pub const LARGEST_SHARE: f64 = 0.05;

/// What the select plugin wrote to the slurmctld log during the replay,
/// for our jobs (compass cluster).
#[derive(Clone, Debug, Default, Serialize)]
pub struct LogFacts {
    pub path: Option<PathBuf>,
    /// `migration of job N: requeued` lines, by job.
    pub migrations: BTreeMap<u64, u32>,
    /// `job_test job N mode 0: narrowed` lines (RUN_NOW on the engine's nodes), by job.
    pub narrowed_run_now: BTreeMap<u64, u32>,
    /// `job_test job N mode 0: hold released` lines: started where Slurm
    /// put it after the plugin held it `HOLD_LIMIT_S` (by design), by job.
    pub released_run_now: BTreeMap<u64, u32>,
    /// Jobs started on all of Slurm's candidates (a RUN_NOW retry, `mode 0`),
    /// or sent to plain cons_tres.
    pub widened: BTreeSet<u64>,
    /// `job_test job N: planned nodes not free yet (migrations in flight)`
    /// lines, by job: the plugin held the job for a migration target.
    pub held_tests: BTreeMap<u64, u32>,
    /// Wall seconds jobs were held so: from the first such line to the
    /// job's next start (`mode 0: narrowed`) or to the hold's release
    /// (`hold released, tried on Slurm's candidates`), whichever comes
    /// first, summed (from the log's timestamps; a hold never followed by
    /// a start or a release is not counted).
    pub held_s: f64,
    /// Wall seconds from a hold's release to the job's start, summed: the
    /// plugin no longer held the job, Slurm's own candidates had no room
    /// for it either (cons_tres refused it; a release followed by a start
    /// in the same second adds nothing).
    pub no_room_s: f64,
}

/// Seconds of the day of a slurmctld log line's `[YYYY-MM-DDTHH:MM:SS.mmm]`
/// timestamp.
fn log_time(line: &str) -> Option<f64> {
    let ts = line.strip_prefix('[')?.split(']').next()?;
    let time = ts.split('T').nth(1)?;
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let sec: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + sec)
}

impl LogFacts {
    /// Reads the log from byte `from` (its size when the replay started).
    pub fn read(path: &Path, from: u64, ours: &BTreeSet<u64>) -> Self {
        let mut f = LogFacts {
            path: Some(path.to_path_buf()),
            ..Default::default()
        };
        let text = read_from(path, from);
        let mut held_since: BTreeMap<u64, f64> = BTreeMap::new();
        let mut released_since: BTreeMap<u64, f64> = BTreeMap::new();
        // Seconds from `t0` to `t`; across midnight the clock wraps once.
        let span = |t0: f64, t: f64| if t >= t0 { t - t0 } else { t + 86_400.0 - t0 };
        for line in text.lines() {
            if let Some(rest) = line.split("migration of job ").nth(1) {
                if let Some((id, tail)) = rest.split_once(':') {
                    if tail.trim_start().starts_with("requeued") {
                        if let Ok(id) = id.trim().parse::<u64>() {
                            if ours.contains(&id) {
                                *f.migrations.entry(id).or_default() += 1;
                            }
                        }
                    }
                }
            }
            if let Some(rest) = line.split("job_test job ").nth(1) {
                let id = rest
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|s| s.parse::<u64>().ok());
                let Some(id) = id.filter(|i| ours.contains(i)) else {
                    continue;
                };
                let started =
                    rest.contains(" mode 0: hold released") || rest.contains(" mode 0: narrowed");
                if started {
                    if rest.contains(" mode 0: hold released") {
                        *f.released_run_now.entry(id).or_default() += 1;
                    } else {
                        *f.narrowed_run_now.entry(id).or_default() += 1;
                    }
                    if let Some(t) = log_time(line) {
                        if let Some(t0) = held_since.remove(&id) {
                            f.held_s += span(t0, t);
                        }
                        if let Some(t0) = released_since.remove(&id) {
                            f.no_room_s += span(t0, t);
                        }
                    }
                } else if rest.contains("planned nodes not free yet") {
                    *f.held_tests.entry(id).or_default() += 1;
                    if let Some(t) = log_time(line) {
                        held_since.entry(id).or_insert(t);
                    }
                } else if rest.contains(": hold released, tried on Slurm's candidates") {
                    if let Some(t) = log_time(line) {
                        if let Some(t0) = held_since.remove(&id) {
                            f.held_s += span(t0, t);
                        }
                        released_since.entry(id).or_insert(t);
                    }
                } else if rest.contains("retried on all candidates (rc 0)") && !projection(rest) {
                    f.widened.insert(id);
                }
            }
            if let Some(rest) = line.split(" goes to plain cons_tres").next() {
                if line.contains(" goes to plain cons_tres") {
                    if let Some(id) = rest
                        .rsplit("job ")
                        .next()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                    {
                        if ours.contains(&id) {
                            f.widened.insert(id);
                        }
                    }
                }
            }
        }
        f
    }
}

/// Is this `job_test job N mode M: ...` line (`rest`: after `job_test job
/// `) a test that allocates nothing: `mode 1` (TEST_ONLY) or `mode 2`
/// (WILL_RUN, backfill's projection)? Only `mode 0` (RUN_NOW) places a
/// job; a line without a mode (older plugins) counts as one that may.
fn projection(rest: &str) -> bool {
    let after_id = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    after_id
        .strip_prefix(" mode ")
        .and_then(|m| m.split(':').next())
        .is_some_and(|m| m.trim() != "0")
}

fn read_from(path: &Path, from: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_ok() {
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The completion log of a cluster against the jobs submitted there.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Completion {
    /// Submitted jobs whose id is in the log exactly once.
    pub once: u64,
    /// Submitted jobs missing from the log.
    pub missing: Vec<u64>,
    /// Ids in the log more than once.
    pub duplicated: Vec<u64>,
    /// Ids in the log that were not submitted by this replay.
    pub unknown: Vec<u64>,
    /// Submitted jobs missing from the log because compass-budgetd cancelled
    /// them under the rules (preempted and not resumable): expected, not a
    /// failure.
    pub preempted_cancelled: Vec<u64>,
}

impl Completion {
    /// `preempted_cancel`: jobs compass-budgetd cancelled as non-resumable
    /// preemption victims.
    pub fn read(log: &Path, submitted: &[u64], preempted_cancel: &BTreeSet<u64>) -> Self {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
        for l in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Ok(id) = l.trim().parse::<u64>() {
                *seen.entry(id).or_default() += 1;
            }
        }
        let ours: BTreeSet<u64> = submitted.iter().copied().collect();
        let mut c = Completion::default();
        for id in submitted {
            match seen.get(id) {
                Some(1) => c.once += 1,
                Some(_) => c.duplicated.push(*id),
                None if preempted_cancel.contains(id) => c.preempted_cancelled.push(*id),
                None => c.missing.push(*id),
            }
        }
        c.unknown = seen.keys().filter(|k| !ours.contains(k)).copied().collect();
        c
    }
}

/// The node check of the compass cluster.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NodeCheck {
    /// Job runs (starts) observed.
    pub runs: u64,
    /// Runs the engine's published state recorded on Slurm's nodes.
    pub engine_recorded: u64,
    /// Runs where the published state disagreed with Slurm.
    pub mismatches: Vec<String>,
    /// Runs of at least [`RECORD_MIN_RUN_S`] the published state never
    /// listed while they ran.
    pub unrecorded: Vec<String>,
    /// Shorter runs the state never listed (they may fall between two
    /// writes); their narrowing is still checked in the log.
    pub short_unrecorded: u64,
    /// Increase of the engine's `divergences` counter over the replay:
    /// allocations that differ from the engine's unrestricted plan at
    /// adoption time (informational: a job narrowed to nodes among Slurm's
    /// candidates may differ from a plan over all nodes).
    pub divergences: Option<u64>,
    /// Runs without a matching `job_test ... mode 0: narrowed` log line.
    pub not_narrowed: Vec<u64>,
    /// Jobs the plugin let cons_tres place on any node (a successful retry
    /// on all candidates, or an engine error).
    pub widened: Vec<u64>,
    /// Whether the slurmctld log could be read.
    pub log_read: bool,
}

impl NodeCheck {
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if !self.mismatches.is_empty() {
            f.push(format!(
                "engine state disagrees with Slurm: {}",
                self.mismatches.join("; ")
            ));
        }
        if !self.unrecorded.is_empty() {
            f.push(format!(
                "runs never recorded by the engine: {}",
                self.unrecorded.join(", ")
            ));
        }
        if self.divergences.is_none() {
            f.push("the engine's published state was never read".into());
        }
        if !self.log_read {
            f.push("the slurmctld log could not be read (SlurmctldLogFile)".into());
        }
        if !self.not_narrowed.is_empty() {
            f.push(format!(
                "job(s) started without being narrowed to the engine's nodes: {:?}",
                self.not_narrowed
            ));
        }
        if !self.widened.is_empty() {
            f.push(format!(
                "job(s) placed by plain cons_tres on any node: {:?}",
                self.widened
            ));
        }
        f
    }
}

/// Waits of the largest jobs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LargestWaits {
    /// Jobs of at least this many GPUs (the top [`LARGEST_SHARE`]).
    pub min_gpus: u64,
    pub jobs: u64,
    /// Wall seconds.
    pub waits: Percentiles,
}

/// What a requeue (a migration, or a preemption) cost on the live cluster,
/// measured from the observed runs of the jobs that completed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RequeueCost {
    /// Requeues observed (a run ended and the job ran again).
    pub requeues: u64,
    /// Of those, requeues of jobs whose every requeue was a migration of
    /// the select plugin (the cost below is measured on these when there
    /// are any, on all requeues otherwise).
    pub migration_requeues: u64,
    /// Idle wall seconds between a run's end (the requeue) and the next
    /// run's start: mean, max and total.
    pub idle_mean_s: f64,
    pub idle_max_s: f64,
    pub idle_total_s: f64,
    /// Wall seconds lost per requeue besides the idle time (progress lost
    /// since the last checkpoint, start-up): `(end - first start - run -
    /// idle)` of a requeued job, less the same overhead of jobs never
    /// requeued (poll and start-up bias), per requeue.
    pub lost_mean_s: f64,
    /// `idle_mean_s + lost_mean_s`: the wall cost of one requeue.
    pub wall_cost_s: f64,
    /// `wall_cost_s` times the speedup: what it costs in trace time.
    pub trace_cost_s: f64,
}

/// Where the live plugin can lose against its simulation, measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LossCauses {
    /// Jobs the plugin held because their planned nodes were not free yet
    /// (migrations in flight), the job_test calls that held them, and the
    /// wall seconds from the first hold to the job's start, summed.
    pub held_jobs: u64,
    pub held_tests: u64,
    pub held_s: f64,
    /// Wall seconds from the release of such a hold (after `HOLD_LIMIT_S`)
    /// to the job's start, summed: time with no room on Slurm's own
    /// candidates either, which no shorter hold would have saved.
    pub no_room_s: f64,
    /// Jobs started while an earlier-submitted job still waited (backfill
    /// and priority order, by more than one poll).
    pub started_ahead: u64,
    /// Job-seconds waiting jobs spent while they would have fitted the
    /// free GPUs as polled (each job counted alone, so two jobs competing
    /// for the same room both count): Slurm's scheduling cadence and start
    /// latency on both clusters, plus on compass jobs narrowed to nodes
    /// that were not free. Also per job.
    pub fit_wait_s: f64,
    pub fit_wait_per_job_s: f64,
    /// `fit_wait_per_job_s` by the reason Slurm gave the waiting job
    /// ([`super::observe::FIT_WAIT_REASONS`], in its order): whether its
    /// priority, Slurm's view of room, a begin time ahead or no scheduling
    /// pass yet kept it out.
    pub fit_wait_per_job_by_reason_s: Vec<(String, f64)>,
    /// Share of the metric window with a migration in flight (a requeued
    /// job waiting to restart, or a migration decided and not carried out).
    pub in_flight_share: f64,
    /// Where the GPUs the AGU misses went, as shares of the metric
    /// window's GPU time (`idle_share = 1 - AGU`): the idle GPUs that
    /// waiting jobs which fitted the free GPUs as they were would have
    /// used (Slurm's cadence and start latency; on compass also jobs held
    /// for planned nodes), and the idle GPUs while a migration was in
    /// flight (overlapping both others). Of the rest, `idle_layout_share`
    /// the largest waiting job that the layout alone kept out would have
    /// used (its GPUs were idle, not on `w` nodes with `g` free each:
    /// fragmentation); the remainder no waiting job needed.
    pub idle_share: f64,
    pub idle_fit_share: f64,
    pub idle_layout_share: f64,
    pub idle_in_flight_share: f64,
    /// Age of the engine's published state at the polls (wall seconds):
    /// mean and max. The plugin rewrites it on change, at most once a second.
    pub state_age_mean_s: Option<f64>,
    pub state_age_max_s: Option<f64>,
}

impl LossCauses {
    /// The idle share no waiting job needed: what is left of
    /// `idle_share` after the usable part and the part the layout kept out.
    pub fn idle_not_needed_share(&self) -> f64 {
        self.idle_share - self.idle_fit_share - self.idle_layout_share
    }
}

/// Every figure of one cluster.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterResult {
    pub name: String,
    pub slurm_conf: PathBuf,
    pub state_file: Option<PathBuf>,
    /// `sbatch` knows `--min-runtime`/`--resumable`.
    pub spank: bool,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub jobs: u64,
    pub submitted: u64,
    /// Slurm's final state COMPLETED.
    pub completed: u64,
    pub completion: Completion,
    /// Jobs that did not finish (timeout), or finished otherwise than
    /// COMPLETED: `index (Slurm id): state`.
    pub problems: Vec<String>,
    /// Average Fragmentation Rate (eq. 15): time-average of
    /// `SIF = (Phi_pi - Phi*) / N` over the metric window.
    pub afr: f64,
    /// `peak` (queue non-empty, eq. 14) or `busy` (any job running or
    /// waiting) when the queue was never non-empty.
    pub metric_window: String,
    pub peak_s: f64,
    pub busy_s: f64,
    /// Average GPU Utilisation (eq. 17) over the metric window (this
    /// cluster's own `T_peak`).
    pub agu: f64,
    /// All GPUs of the cluster's GPU nodes (pass-through pools included).
    pub gpus: u64,
    /// GPU utilisation over one window common to every cluster of the
    /// replay ([`compare`]): set once the clusters are compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_window: Option<CommonWindow>,
    /// Average Job Completion Time (eq. 16): mean of completion -
    /// submission, wall seconds, over the `ajct_jobs` jobs that completed
    /// on every cluster of the replay ([`compare`]; before it, over this
    /// cluster's completed jobs), so clusters (and the simulation) are
    /// compared on the same jobs. `ajct_trace_s` is it times the speedup:
    /// the wall AJCT scaled back by the speedup, not the trace's AJCT
    /// (runs were raised to `--min-run` or cut to `--max-run`, and the
    /// jobs queued at compressed times).
    pub ajct_s: f64,
    pub ajct_jobs: u64,
    pub ajct_trace_s: f64,
    /// AJCT over this cluster's own completed jobs (`completed` of them).
    pub ajct_own_s: f64,
    /// Per plan job: completion minus submission when it completed here,
    /// and first start minus submission when it started.
    #[serde(skip)]
    pub job_jct_s: Vec<Option<f64>>,
    #[serde(skip)]
    pub job_wait_s: Vec<Option<f64>>,
    /// GPUs allocated at each poll (wall seconds, GPUs), for the common
    /// window; first submission and last end here.
    #[serde(skip)]
    pub used_gpus_series: Vec<(f64, u64)>,
    #[serde(skip)]
    pub first_submit_s: Option<f64>,
    #[serde(skip)]
    pub last_end_s: Option<f64>,
    /// Jobs not submitted by this replay that were on the cluster (not
    /// finished) when the run started, `id (STATE)`: the observer sees
    /// only the replay's own jobs (by the ids `sbatch` returned), so GPUs
    /// they hold count as idle and their queue position is not seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign_jobs_at_start: Vec<String>,
    /// First submission to last completion, wall seconds.
    pub makespan_s: f64,
    /// Largest `N * SIF` at any poll, migrations in flight included.
    pub max_n_sif: u64,
    /// Largest `N * SIF` at polls with no migration in flight (no requeued
    /// job waiting or completing, no migration decided and not carried
    /// out): like the simulator's maximum, which it takes after each
    /// policy call, where a migration is instantaneous.
    pub max_n_sif_no_flight: Option<u64>,
    /// Largest `N * SIF` at polls where WCC held (Theorem 1: at most 2).
    pub max_n_sif_under_wcc: Option<u64>,
    /// The same at polls with no migration in flight.
    pub max_n_sif_under_wcc_no_flight: Option<u64>,
    /// The same over settled polls only (nothing moved since the previous
    /// poll, no migration or restart in flight) where the engine kept no
    /// job still by its migration rule: where Theorem 1 is promised.
    pub max_n_sif_under_wcc_settled: Option<u64>,
    /// Settled polls where WCC held but the engine kept jobs still (not
    /// resumable, protected, ending soon...): the bound may be exceeded
    /// there by choice (issue #10), so this is a figure, not a check.
    #[serde(default)]
    pub max_n_sif_under_wcc_settled_kept: Option<u64>,
    /// Wall seconds with `N * SIF > 2` under WCC while jobs were kept still.
    #[serde(default)]
    pub over_bound_by_choice_s: f64,
    /// Time average of `N * SIF` over the metric window (all instants):
    /// `AFR x N`, `N` the nodes of the modelled pools (those `N*SIF` is
    /// summed over).
    pub mean_n_sif: f64,
    /// Share of the metric window that was not settled (something moved,
    /// or a migration was in flight): the time the settled line leaves out.
    pub unsettled_share: f64,
    pub wcc_coverage: f64,
    /// Requeues the select plugin carried out (Compact migrations).
    pub migrations: u64,
    pub migrations_source: String,
    pub migrated_jobs: u64,
    /// All requeues Slurm counted (restarts) of the replayed jobs.
    pub requeues: u64,
    /// Requeues that were not migrations (the budget service preempting).
    pub preemptions: u64,
    pub waits: Percentiles,
    pub largest: LargestWaits,
    pub polls: u64,
    pub poll_errors: u64,
    pub node_check: Option<NodeCheck>,
    pub requeue_cost: RequeueCost,
    pub causes: LossCauses,
    /// The simulator on the jobs this replay submitted (`jobs.csv`), with
    /// the migration cost measured on the live compass cluster.
    pub simulated: Option<super::sim::Simulated>,
    /// The select plugin's `select.move_when`, from its published state
    /// (compass clusters; the simulation runs with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub move_when: Option<String>,
    /// Its `select.tidy_payback`, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tidy_payback: Option<f64>,
    /// Its `select.migration_cost` in seconds, likewise: the cost its
    /// migration rule weighs (the simulation decides with it and charges
    /// the measured cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_cost_s: Option<f64>,
    /// Why there is no simulation (a mixed cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated_skipped: Option<String>,
    /// The figures of each pool of interchangeable GPU nodes (one on a
    /// homogeneous cluster): Theorem 1 is checked per pool (issue 12).
    pub pools: Vec<PoolResult>,
    /// Runs whose nodes lie in more than one pool (cons_tres may spread a
    /// job so; compass places each job in one pool).
    pub runs_across_pools: u64,
}

/// One pool's figures, defined as the cluster's over the same metric
/// window, with `N` the pool's nodes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PoolResult {
    /// `8xa100`, `4xl40s`, `2xgpu`: as the select plugin names its pools.
    pub name: String,
    pub gpus_per_node: u32,
    pub gpu_type: Option<String>,
    pub nodes: u32,
    pub node_names: Vec<String>,
    /// 1, 2, 4 or 8 GPUs of one type per node; otherwise pass-through and
    /// the `N*SIF` figures are absent.
    pub modelled: bool,
    /// Compass clusters: the engine's last published state lists this pool
    /// on the same nodes, with an engine, and the engine is active.
    pub engine: Option<bool>,
    /// Why `engine` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_note: Option<String>,
    /// Runs (starts) whose every node lies in this pool.
    pub runs: u64,
    pub afr: Option<f64>,
    pub mean_n_sif: Option<f64>,
    pub agu: f64,
    pub wcc_coverage: Option<f64>,
    pub max_n_sif: Option<u64>,
    pub max_n_sif_no_flight: Option<u64>,
    pub max_n_sif_under_wcc: Option<u64>,
    pub max_n_sif_under_wcc_no_flight: Option<u64>,
    /// Settled instants where WCC held in this pool and the engine kept no
    /// job still: Theorem 1 promises at most 2 (checked on compass).
    pub max_n_sif_under_wcc_settled: Option<u64>,
    pub max_n_sif_under_wcc_settled_kept: Option<u64>,
    pub over_bound_by_choice_s: f64,
    /// Job-seconds waiting jobs would have fitted this pool's free GPUs.
    pub fit_wait_s: f64,
}

impl ClusterResult {
    pub fn is_compass(&self) -> bool {
        self.state_file.is_some()
    }
}

/// Inputs of [`summarise`] besides the observations.
pub struct ClusterInfo<'a> {
    pub name: &'a str,
    pub slurm_conf: &'a Path,
    pub spank: bool,
    pub completion_log: &'a Path,
    pub log: Option<LogFacts>,
    /// Polls where `scontrol` failed (the cluster's state was not seen).
    pub poll_errors: u64,
    /// Jobs not the replay's own found on the cluster at the start
    /// ([`ClusterResult::foreign_jobs_at_start`]).
    pub foreign_at_start: Vec<String>,
}

/// Computes a cluster's figures.
pub fn summarise(plan: &Plan, obs: &Observer, info: &ClusterInfo<'_>) -> ClusterResult {
    let submitted: Vec<u64> = obs.jobs.iter().filter_map(|j| j.slurm_id).collect();
    let preempted_cancel: BTreeSet<u64> = obs
        .jobs
        .iter()
        .filter(|j| j.preempted_cancel)
        .filter_map(|j| j.slurm_id)
        .collect();
    let mut r = ClusterResult {
        name: info.name.to_string(),
        slurm_conf: info.slurm_conf.to_path_buf(),
        state_file: obs.state_file.clone(),
        spank: info.spank,
        nodes: obs.nodes.len() as u32,
        gpus_per_node: obs.gpus_per_node,
        jobs: plan.jobs.len() as u64,
        submitted: submitted.len() as u64,
        polls: obs.samples.len() as u64,
        poll_errors: info.poll_errors,
        foreign_jobs_at_start: info.foreign_at_start.clone(),
        gpus: obs.all_gpus(),
        used_gpus_series: obs.samples.iter().map(|x| (x.t_s, x.used_gpus)).collect(),
        completion: Completion::read(info.completion_log, &submitted, &preempted_cancel),
        move_when: obs.state.as_ref().and_then(|s| s.move_when.clone()),
        tidy_payback: obs.state.as_ref().and_then(|s| s.tidy_payback),
        rule_cost_s: obs
            .state
            .as_ref()
            .and_then(|s| s.migration_cost_s)
            .map(|c| c as f64),
        ..Default::default()
    };
    let (window, name) = if obs.figures.peak.time_s > 0.0 {
        (obs.figures.peak, "peak")
    } else {
        (obs.figures.busy, "busy")
    };
    let avg = |x: f64| {
        if window.time_s > 0.0 {
            x / window.time_s
        } else {
            0.0
        }
    };
    r.afr = avg(window.sif_s);
    r.agu = avg(window.util_s);
    r.wcc_coverage = avg(window.wcc_s);
    r.metric_window = name.into();
    r.peak_s = obs.figures.peak.time_s;
    r.busy_s = obs.figures.busy.time_s;
    r.max_n_sif = obs.figures.max_n_sif;
    r.max_n_sif_no_flight = obs.figures.max_n_sif_no_flight;
    r.max_n_sif_under_wcc = obs.figures.max_n_sif_wcc;
    r.max_n_sif_under_wcc_no_flight = obs.figures.max_n_sif_wcc_no_flight;
    r.max_n_sif_under_wcc_settled = obs.figures.max_n_sif_wcc_settled;
    r.max_n_sif_under_wcc_settled_kept = obs.figures.max_n_sif_wcc_settled_kept;
    r.over_bound_by_choice_s = obs.figures.over_bound_by_choice_s;
    // SIF divides the modelled pools' N*SIF by their nodes (pass-through
    // pools have no N*SIF), so N*SIF is AFR times those nodes
    r.mean_n_sif = r.afr * f64::from(obs.modelled_nodes());
    r.unsettled_share = avg(window.unsettled_s);
    r.causes.in_flight_share = avg(window.in_flight_s);
    r.causes.idle_share = avg(window.idle_s);
    r.causes.idle_fit_share = avg(window.idle_fit_s);
    r.causes.idle_layout_share = avg(window.idle_layout_s);
    r.causes.idle_in_flight_share = avg(window.idle_in_flight_s);
    let ages: Vec<f64> = obs.samples.iter().filter_map(|x| x.state_age_s).collect();
    if !ages.is_empty() {
        r.causes.state_age_mean_s = Some(ages.iter().sum::<f64>() / ages.len() as f64);
        r.causes.state_age_max_s = Some(ages.iter().copied().fold(0.0, f64::max));
    }

    r.job_jct_s = vec![None; obs.jobs.len()];
    r.job_wait_s = vec![None; obs.jobs.len()];
    let (mut first_submit, mut last_end) = (f64::INFINITY, 0.0f64);
    for (i, j) in obs.jobs.iter().enumerate() {
        let label = format!(
            "job {i} ({})",
            j.slurm_id
                .map(|s| format!("Slurm {s}"))
                .unwrap_or("not submitted".into())
        );
        r.requeues += u64::from(j.restarts);
        match (&j.final_state, j.end_s) {
            (Some(s), Some(_)) if s == "COMPLETED" => r.completed += 1,
            // cancelled under the rules: counted in `completion`, not a problem
            (Some(s), _) if s == "CANCELLED" && j.preempted_cancel => {}
            (Some(s), _) => r.problems.push(format!(
                "{label}: {s}{}",
                j.submit_error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            )),
            (None, _) => r.problems.push(format!("{label}: did not finish")),
        }
        if let (Some(sub), Some(end)) = (j.submit_s, j.end_s) {
            if j.final_state.as_deref() == Some("COMPLETED") {
                r.job_jct_s[i] = Some(end - sub);
            }
            first_submit = first_submit.min(sub);
            last_end = last_end.max(end);
        }
        if let (Some(sub), Some(start)) = (j.submit_s, j.first_start_s()) {
            r.job_wait_s[i] = Some(start - sub);
        }
    }
    r.makespan_s = if last_end > first_submit {
        last_end - first_submit
    } else {
        0.0
    };
    r.first_submit_s = first_submit.is_finite().then_some(first_submit);
    r.last_end_s = (last_end > 0.0).then_some(last_end);
    // this cluster's own jobs until compared with the others ([`compare`])
    let own: Vec<bool> = r.job_jct_s.iter().map(Option::is_some).collect();
    set_job_figures(plan, &mut r, &own);
    r.ajct_own_s = r.ajct_s;

    let ours: BTreeSet<u64> = submitted.iter().copied().collect();
    match &info.log {
        Some(facts) if facts.path.is_some() => {
            r.migrations = facts.migrations.values().map(|&v| u64::from(v)).sum();
            r.migrated_jobs = facts.migrations.len() as u64;
            r.migrations_source = "slurmctld log (`migration of job N: requeued`)".into();
        }
        _ => match (&obs.state, obs.state_first) {
            (Some(s), Some((_, m0))) => {
                r.migrations = s.migrations_done.saturating_sub(m0);
                r.migrations_source = "published state (migrations_done)".into();
            }
            _ => r.migrations_source = "none (stock plugin)".into(),
        },
    }
    r.preemptions = r.requeues.saturating_sub(r.migrations);
    let migrated = info.log.as_ref().map(|l| &l.migrations);
    r.requeue_cost = requeue_cost(plan, obs, migrated);
    r.causes.started_ahead = started_ahead(obs);
    r.causes.fit_wait_s = obs.figures.fit_wait_s;
    r.causes.fit_wait_per_job_s = obs.figures.fit_wait_s / (r.jobs.max(1) as f64);
    r.causes.fit_wait_per_job_by_reason_s = super::observe::FIT_WAIT_REASONS
        .iter()
        .zip(obs.fit_wait_by_reason_s)
        .map(|(reason, s)| (reason.to_string(), s / (r.jobs.max(1) as f64)))
        .collect();
    if let Some(l) = &info.log {
        r.causes.held_jobs = l.held_tests.len() as u64;
        r.causes.held_tests = l.held_tests.values().map(|&v| u64::from(v)).sum();
        r.causes.held_s = l.held_s;
        r.causes.no_room_s = l.no_room_s;
    }
    if obs.state_file.is_some() {
        r.node_check = Some(node_check(obs, info.log.as_ref(), &ours));
    }
    (r.pools, r.runs_across_pools) = pool_results(obs, name == "peak");
    r
}

/// GPU utilisation over one window common to every cluster of a replay:
/// from the first submission to the last job end on any of them, so that
/// clusters whose `T_peak` differ are compared over the same time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CommonWindow {
    /// Wall seconds since the replay start.
    pub from_s: f64,
    pub to_s: f64,
    /// GPU-seconds allocated within the window (each poll's allocated GPUs
    /// held until the next poll).
    pub gpu_s: f64,
    /// `gpu_s / (gpus x (to_s - from_s))`.
    pub utilisation: f64,
}

/// AJCT and the waits of `r` (live) over the plan jobs where `keep` is
/// true (those with a completion time here), AJCT also times the speedup.
fn set_job_figures(plan: &Plan, r: &mut ClusterResult, keep: &[bool]) {
    let jct: Vec<f64> = r
        .job_jct_s
        .iter()
        .zip(keep)
        .filter_map(|(j, &k)| j.filter(|_| k))
        .collect();
    r.ajct_jobs = jct.len() as u64;
    r.ajct_s = mean(&jct);
    r.ajct_trace_s = r.ajct_s * plan.compression.speedup;
    (r.waits, r.largest) = waits_of(plan, &r.job_wait_s, keep);
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Percentiles of the waits `wait` (per plan job) of the jobs `keep`, and
/// those of the largest jobs among them.
fn waits_of(plan: &Plan, wait: &[Option<f64>], keep: &[bool]) -> (Percentiles, LargestWaits) {
    let waits: Vec<(u64, f64)> = wait
        .iter()
        .zip(keep)
        .enumerate()
        .filter(|(_, (_, &k))| k)
        .filter_map(|(i, (w, _))| Some((plan.jobs[i].total_gpus(), (*w)?)))
        .collect();
    (
        Percentiles::of(waits.iter().map(|w| w.1).collect()),
        largest_waits(&plan_gpus(plan), &waits),
    )
}

/// Sets every cluster beside the others, on the same jobs and the same
/// time: AJCT and the waits (live and simulated) over the jobs that
/// completed on every cluster (a job cancelled, failed or timed out on one
/// of them is left out of all, so no cluster's average drops a job the
/// others keep; each cluster's own `completed` and `ajct_own_s` stay), and
/// the GPU utilisation over the window from the first submission to the
/// last job end on any cluster ([`CommonWindow`]).
pub fn compare(plan: &Plan, results: &mut [ClusterResult]) {
    let n = plan.jobs.len();
    let everywhere: Vec<bool> = (0..n)
        .map(|i| {
            !results.is_empty()
                && results
                    .iter()
                    .all(|r| r.job_jct_s.get(i).is_some_and(Option::is_some))
        })
        .collect();
    for r in results.iter_mut() {
        set_job_figures(plan, r, &everywhere);
        if let Some(s) = r.simulated.as_mut() {
            let jct: Vec<f64> = s
                .job_jct_s
                .iter()
                .zip(&everywhere)
                .filter_map(|(j, &k)| j.filter(|_| k))
                .collect();
            s.ajct_jobs = jct.len() as u64;
            s.ajct_s = mean(&jct);
            (s.waits, s.largest) = waits_of(plan, &s.job_wait_s, &everywhere);
        }
    }
    let from = results
        .iter()
        .filter_map(|r| r.first_submit_s)
        .fold(f64::INFINITY, f64::min);
    let to = results
        .iter()
        .filter_map(|r| r.last_end_s)
        .fold(f64::NEG_INFINITY, f64::max);
    if !(from.is_finite() && to > from) {
        return;
    }
    for r in results.iter_mut() {
        let gpu_s = gpu_seconds(&r.used_gpus_series, from, to);
        r.common_window = Some(CommonWindow {
            from_s: from,
            to_s: to,
            gpu_s,
            utilisation: gpu_s / (r.gpus.max(1) as f64 * (to - from)),
        });
    }
}

/// GPU-seconds allocated from `from` to `to`: each poll's `(t, GPUs)` held
/// until the next poll (nothing before the first; the last poll's until
/// `to`).
fn gpu_seconds(series: &[(f64, u64)], from: f64, to: f64) -> f64 {
    let mut sum = 0.0;
    for (k, &(t, g)) in series.iter().enumerate() {
        let next = series.get(k + 1).map_or(to, |x| x.0);
        let (a, b) = (t.max(from), next.min(to));
        if b > a {
            sum += g as f64 * (b - a);
        }
    }
    sum
}

/// Each pool's figures, and the runs that spanned pools. `peak`: the
/// cluster's metric window is `T_peak` (else busy time).
fn pool_results(obs: &Observer, peak: bool) -> (Vec<PoolResult>, u64) {
    let pool_of: BTreeMap<&str, usize> = obs
        .pools
        .iter()
        .enumerate()
        .flat_map(|(p, t)| t.def.nodes.iter().map(move |n| (n.as_str(), p)))
        .collect();
    let mut runs = vec![0u64; obs.pools.len()];
    let mut across = 0;
    for run in obs.jobs.iter().flat_map(|j| &j.runs) {
        let pools: BTreeSet<usize> = run
            .node_gpus
            .keys()
            .filter_map(|n| pool_of.get(n.as_str()).copied())
            .collect();
        match pools.len() {
            0 => {}
            1 => runs[*pools.iter().next().expect("one pool")] += 1,
            _ => across += 1,
        }
    }
    let out = obs
        .pools
        .iter()
        .zip(runs)
        .map(|(t, runs)| {
            let d = &t.def;
            let w = if peak { t.figures.peak } else { t.figures.busy };
            let avg = |x: f64| if w.time_s > 0.0 { x / w.time_s } else { 0.0 };
            let m = d.modelled;
            let afr = avg(w.sif_s);
            let (engine, engine_note) = engine_in_pool(obs, d);
            PoolResult {
                name: d.name.clone(),
                gpus_per_node: d.gpus_per_node,
                gpu_type: d.gpu_type.clone(),
                nodes: d.nodes.len() as u32,
                node_names: d.nodes.clone(),
                modelled: m,
                engine,
                engine_note,
                runs,
                afr: m.then_some(afr),
                mean_n_sif: m.then_some(afr * d.nodes.len() as f64),
                agu: avg(w.util_s),
                wcc_coverage: m.then(|| avg(w.wcc_s)),
                max_n_sif: m.then_some(t.figures.max_n_sif),
                max_n_sif_no_flight: t.figures.max_n_sif_no_flight.filter(|_| m),
                max_n_sif_under_wcc: t.figures.max_n_sif_wcc,
                max_n_sif_under_wcc_no_flight: t.figures.max_n_sif_wcc_no_flight,
                max_n_sif_under_wcc_settled: t.figures.max_n_sif_wcc_settled,
                max_n_sif_under_wcc_settled_kept: t.figures.max_n_sif_wcc_settled_kept,
                over_bound_by_choice_s: t.figures.over_bound_by_choice_s,
                fit_wait_s: t.figures.fit_wait_s,
            }
        })
        .collect();
    (out, across)
}

/// Compass clusters: is the engine active in pool `d`, per its last
/// published state (the pool listed on the same nodes, with an engine)?
fn engine_in_pool(obs: &Observer, d: &super::observe::PoolDef) -> (Option<bool>, Option<String>) {
    if obs.state_file.is_none() {
        return (None, None);
    }
    let Some(st) = &obs.state else {
        return (
            Some(false),
            Some("the engine's published state was never read".into()),
        );
    };
    let note = if !st.engine_active {
        Some(format!(
            "the engine is inactive (plain cons_tres){}",
            st.engine_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ))
    } else {
        match st.pools.iter().find(|p| p.name == d.name) {
            None => Some(format!(
                "the engine publishes no pool {} (its pools: {:?})",
                d.name,
                st.pools.iter().map(|p| p.name.as_str()).collect::<Vec<_>>()
            )),
            Some(p) if p.node_names != d.nodes => Some(format!(
                "the engine's pool {} has the nodes {:?}, Slurm's node table {:?}",
                d.name, p.node_names, d.nodes
            )),
            Some(p) if !p.modelled => Some(format!("pool {} is pass-through", d.name)),
            Some(_) => None,
        }
    };
    (Some(note.is_none()), note)
}

/// The requeue cost of [`RequeueCost`], from the observed runs. `migrated`:
/// the plugin's migrations by Slurm job id (compass clusters).
pub fn requeue_cost(
    plan: &Plan,
    obs: &Observer,
    migrated: Option<&BTreeMap<u64, u32>>,
) -> RequeueCost {
    // (requeues, idle seconds, overhead seconds, all requeues were migrations)
    let mut requeued: Vec<(u64, Vec<f64>, f64, bool)> = Vec::new();
    let mut plain_overhead = Vec::new();
    for (i, j) in obs.jobs.iter().enumerate() {
        let (Some(end), Some(first)) = (j.end_s, j.first_start_s()) else {
            continue;
        };
        if j.final_state.as_deref() != Some("COMPLETED") {
            continue;
        }
        let overhead = end - first - plan.jobs[i].run_s;
        if j.runs.len() < 2 {
            plain_overhead.push(overhead);
            continue;
        }
        let idle: Vec<f64> = j
            .runs
            .windows(2)
            .filter_map(|w| w[0].end_s.map(|e| (w[1].start_s - e).max(0.0)))
            .collect();
        let n = (j.runs.len() - 1) as u64;
        let all_migrations = j
            .slurm_id
            .and_then(|id| migrated.and_then(|m| m.get(&id)))
            .is_some_and(|&m| u64::from(m) >= n);
        requeued.push((n, idle, overhead, all_migrations));
    }
    let base = if plain_overhead.is_empty() {
        0.0
    } else {
        plain_overhead.iter().sum::<f64>() / plain_overhead.len() as f64
    };
    let migration_requeues: u64 = requeued.iter().filter(|r| r.3).map(|r| r.0).sum();
    let use_migrations = migration_requeues > 0;
    let chosen: Vec<&(u64, Vec<f64>, f64, bool)> =
        requeued.iter().filter(|r| !use_migrations || r.3).collect();
    let mut c = RequeueCost {
        requeues: requeued.iter().map(|r| r.0).sum(),
        migration_requeues,
        ..Default::default()
    };
    let n: u64 = chosen.iter().map(|r| r.0).sum();
    if n == 0 {
        return c;
    }
    let idle: Vec<f64> = chosen.iter().flat_map(|r| r.1.iter().copied()).collect();
    c.idle_total_s = idle.iter().sum();
    c.idle_max_s = idle.iter().copied().fold(0.0, f64::max);
    c.idle_mean_s = c.idle_total_s / n as f64;
    let lost: f64 = chosen
        .iter()
        .map(|r| r.2 - r.1.iter().sum::<f64>() - base)
        .sum();
    c.lost_mean_s = (lost / n as f64).max(0.0);
    c.wall_cost_s = c.idle_mean_s + c.lost_mean_s;
    c.trace_cost_s = c.wall_cost_s * plan.compression.speedup;
    c
}

/// Jobs that started while a job submitted before them still waited, by
/// more than the polling tolerance (a second).
fn started_ahead(obs: &Observer) -> u64 {
    let seen: Vec<(f64, f64)> = obs
        .jobs
        .iter()
        .filter_map(|j| Some((j.submit_s?, j.first_start_s()?)))
        .collect();
    seen.iter()
        .filter(|(sub, start)| seen.iter().any(|(s2, st2)| s2 < sub && *st2 > start + 1.0))
        .count() as u64
}

fn plan_gpus(plan: &Plan) -> Vec<u64> {
    plan.jobs.iter().map(|j| j.total_gpus()).collect()
}

/// Waits of the top [`LARGEST_SHARE`] of jobs by total GPUs (at least one
/// job; every job as large as the smallest of them is included).
pub fn largest_waits(all_gpus: &[u64], waits: &[(u64, f64)]) -> LargestWaits {
    let mut sizes = all_gpus.to_vec();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let k = ((sizes.len() as f64 * LARGEST_SHARE).ceil() as usize).clamp(1, sizes.len().max(1));
    let min_gpus = sizes.get(k - 1).copied().unwrap_or(0);
    let w: Vec<f64> = waits
        .iter()
        .filter(|(g, _)| *g >= min_gpus)
        .map(|w| w.1)
        .collect();
    LargestWaits {
        min_gpus,
        jobs: w.len() as u64,
        waits: Percentiles::of(w),
    }
}

fn node_check(obs: &Observer, log: Option<&LogFacts>, ours: &BTreeSet<u64>) -> NodeCheck {
    let mut c = NodeCheck {
        log_read: log.is_some_and(|l| l.path.is_some()),
        ..Default::default()
    };
    for (i, j) in obs.jobs.iter().enumerate() {
        let Some(id) = j.slurm_id else { continue };
        for (k, run) in j.runs.iter().enumerate() {
            c.runs += 1;
            if run.engine_recorded {
                c.engine_recorded += 1;
            } else if let Some(m) = &run.mismatch {
                c.mismatches
                    .push(format!("job {i} (Slurm {id}) run {k}: {m}"));
            } else if run
                .end_s
                .is_some_and(|e| e - run.start_s < RECORD_MIN_RUN_S)
            {
                c.short_unrecorded += 1;
            } else {
                c.unrecorded.push(format!("job {i} (Slurm {id}) run {k}"));
            }
        }
        if let Some(l) = log.filter(|l| l.path.is_some()) {
            let narrowed = l.narrowed_run_now.get(&id).copied().unwrap_or(0) as usize
                + l.released_run_now.get(&id).copied().unwrap_or(0) as usize;
            if narrowed < j.runs.len() {
                c.not_narrowed.push(id);
            }
        }
    }
    if let Some(l) = log {
        c.widened = l
            .widened
            .iter()
            .filter(|i| ours.contains(i))
            .copied()
            .collect();
    }
    c.divergences = match (&obs.state, obs.state_first) {
        (Some(s), Some((d0, _))) => Some(s.divergences.saturating_sub(d0)),
        _ => None,
    };
    c
}

/// Is "compass's AFR below stock's" one of the checks? Not when the
/// clusters' budget service preempts (`[protection] enforce = true`):
/// jobs protected by `--min-runtime` are never moved and preemptions
/// reshape the layout, so compass's AFR is then level with best-fit's on
/// average, lower on some windows and higher on others, live and
/// simulated alike (docs/results.md, "The default configuration on two
/// more windows, and over 42 simulated"): a figure to read, not a promise.
pub fn afr_checked(results: &[ClusterResult]) -> bool {
    !results
        .iter()
        .filter_map(|r| r.simulated.as_ref())
        .filter_map(|s| s.service.as_ref())
        .any(|m| m.enforce == "true")
}

/// The checks of `--check`; each failure is one message.
pub fn check(results: &[ClusterResult]) -> Vec<String> {
    let mut f = Vec::new();
    for r in results {
        let c = &r.completion;
        if r.submitted < r.jobs {
            f.push(format!(
                "{}: {} of {} jobs were not submitted",
                r.name,
                r.jobs - r.submitted,
                r.jobs
            ));
        }
        if !c.missing.is_empty() || !c.duplicated.is_empty() || !c.unknown.is_empty() {
            f.push(format!(
                "{}: completion log: {} job(s) never completed {:?}, {} completed more than once {:?}, {} unknown {:?}",
                r.name,
                c.missing.len(),
                c.missing,
                c.duplicated.len(),
                c.duplicated,
                c.unknown.len(),
                c.unknown
            ));
        }
        if let Some(nc) = &r.node_check {
            for m in nc.failures() {
                f.push(format!("{}: {m}", r.name));
            }
        }
        if r.is_compass() {
            // Theorem 1 per pool (issue 12): N*SIF <= 2 in each pool at
            // settled instants where WCC held in that pool.
            if r.pools.is_empty() {
                if let Some(n) = r.max_n_sif_under_wcc_settled.filter(|&n| n > 2) {
                    f.push(format!(
                        "{}: N*SIF reached {n} > 2 at a settled instant where WCC held and every job was movable",
                        r.name
                    ));
                }
            }
            for p in &r.pools {
                if let Some(n) = p.max_n_sif_under_wcc_settled.filter(|&n| n > 2) {
                    f.push(format!(
                        "{}: pool {}: N*SIF reached {n} > 2 at a settled instant where WCC held in the pool and every job was movable",
                        r.name, p.name
                    ));
                }
                if p.modelled && p.runs > 0 && p.engine == Some(false) {
                    f.push(format!(
                        "{}: pool {}: jobs ran there but the engine is not active in it: {}",
                        r.name,
                        p.name,
                        p.engine_note.as_deref().unwrap_or("")
                    ));
                }
            }
            if r.runs_across_pools > 0 {
                f.push(format!(
                    "{}: {} run(s) spanned several pools (the engine places each job in one pool)",
                    r.name, r.runs_across_pools
                ));
            }
        }
    }
    if !afr_checked(results) {
        return f;
    }
    let compass: Vec<&ClusterResult> = results.iter().filter(|r| r.is_compass()).collect();
    let stock: Vec<&ClusterResult> = results.iter().filter(|r| !r.is_compass()).collect();
    for c in &compass {
        for s in &stock {
            if c.afr >= s.afr {
                f.push(format!(
                    "AFR of {} ({:.4}) is not below AFR of {} ({:.4})",
                    c.name, c.afr, s.name, s.afr
                ));
            }
        }
    }
    f
}

/// The side-by-side table (markdown).
pub fn table(results: &[ClusterResult], speedup: f64) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&ClusterResult) -> String| {
        rows.push((label.to_string(), results.iter().map(f).collect()));
    };
    let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or("-".into());
    row("jobs completed / submitted", &|r| {
        format!("{} / {}", r.completed, r.submitted)
    });
    row("cancelled by compass-budgetd (not resumable)", &|r| {
        r.completion.preempted_cancelled.len().to_string()
    });
    row("AFR (mean SIF over T_peak)", &|r| format!("{:.4}", r.afr));
    row("N*SIF, time average (all instants)", &|r| {
        format!("{:.2}", r.mean_n_sif)
    });
    row(
        "max N*SIF (every poll, migrations in flight included)",
        &|r| r.max_n_sif.to_string(),
    );
    row("  (polls with no migration in flight)", &|r| {
        opt(r.max_n_sif_no_flight)
    });
    row("max N*SIF while WCC held (every poll)", &|r| {
        opt(r.max_n_sif_under_wcc)
    });
    row("  (polls with no migration in flight)", &|r| {
        opt(r.max_n_sif_under_wcc_no_flight)
    });
    row("  (settled, every job movable: Theorem 1)", &|r| {
        opt(r.max_n_sif_under_wcc_settled)
    });
    row("  (settled, jobs kept still by the cost rule)", &|r| {
        opt(r.max_n_sif_under_wcc_settled_kept)
    });
    row("time over the bound by choice (wall s)", &|r| {
        format!("{:.0}", r.over_bound_by_choice_s)
    });
    row("time not settled / with a migration in flight", &|r| {
        format!(
            "{:.0}% / {:.0}%",
            100.0 * r.unsettled_share,
            100.0 * r.causes.in_flight_share
        )
    });
    row(
        "AJCT over the jobs completed on every cluster (wall s / scaled back by the speedup, h)",
        &|r| {
            format!(
                "{:.1} / {:.2} ({} jobs)",
                r.ajct_s,
                r.ajct_s * speedup / 3600.0,
                r.ajct_jobs
            )
        },
    );
    if results.iter().any(|r| r.completed != r.ajct_jobs) {
        row("AJCT over its own completed jobs (wall s)", &|r| {
            format!("{:.1} ({} jobs)", r.ajct_own_s, r.completed)
        });
    }
    row("AGU (over its own metric window)", &|r| {
        format!("{:.1}%", 100.0 * r.agu)
    });
    row(
        "GPU utilisation over the common window (first submission to last end on any cluster)",
        &|r| match &r.common_window {
            Some(w) => format!("{:.1}% ({:.0} s)", 100.0 * w.utilisation, w.to_s - w.from_s),
            None => "-".into(),
        },
    );
    row(
        "idle GPUs: all / usable by waiting jobs that fit / kept from a waiting job by the layout / not needed / migration in flight",
        &|r| {
            let c = &r.causes;
            format!(
                "{:.1}% / {:.1}% / {:.1}% / {:.1}% / {:.1}%",
                100.0 * c.idle_share,
                100.0 * c.idle_fit_share,
                100.0 * c.idle_layout_share,
                100.0 * c.idle_not_needed_share(),
                100.0 * c.idle_in_flight_share
            )
        },
    );
    row("migrations (jobs)", &|r| {
        format!("{} ({})", r.migrations, r.migrated_jobs)
    });
    row("preemptions", &|r| r.preemptions.to_string());
    row("requeue -> restart idle, mean / max (wall s)", &|r| {
        if r.requeue_cost.requeues == 0 {
            "-".into()
        } else {
            format!(
                "{:.1} / {:.1}",
                r.requeue_cost.idle_mean_s, r.requeue_cost.idle_max_s
            )
        }
    });
    row("cost of one requeue (wall s / trace min)", &|r| {
        if r.requeue_cost.requeues == 0 {
            "-".into()
        } else {
            format!(
                "{:.1} / {:.1}",
                r.requeue_cost.wall_cost_s,
                r.requeue_cost.trace_cost_s / 60.0
            )
        }
    });
    row("held for a migration target (jobs / wall s)", &|r| {
        if r.is_compass() {
            format!("{} / {:.0}", r.causes.held_jobs, r.causes.held_s)
        } else {
            "-".into()
        }
    });
    row("then no room after the hold's release (wall s)", &|r| {
        if r.is_compass() {
            format!("{:.0}", r.causes.no_room_s)
        } else {
            "-".into()
        }
    });
    row(
        "waited while it fit the free GPUs (job-s / per job)",
        &|r| {
            format!(
                "{:.0} / {:.1}",
                r.causes.fit_wait_s, r.causes.fit_wait_per_job_s
            )
        },
    );
    row("of which by Slurm's reason (per job, wall s)", &|r| {
        r.causes
            .fit_wait_per_job_by_reason_s
            .iter()
            .map(|(reason, s)| format!("{reason} {s:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    row("started ahead of an earlier job", &|r| {
        r.causes.started_ahead.to_string()
    });
    row("published state age, mean / max (s)", &|r| match (
        r.causes.state_age_mean_s,
        r.causes.state_age_max_s,
    ) {
        (Some(m), Some(x)) => format!("{m:.1} / {x:.0}"),
        _ => "-".into(),
    });
    row(
        "wait p50 / p90, jobs completed on every cluster (wall s)",
        &|r| format!("{:.1} / {:.1}", r.waits.p50, r.waits.p90),
    );
    row("wait p50 / p90, largest of those (wall s)", &|r| {
        format!(
            "{:.1} / {:.1} ({} jobs >= {} GPUs)",
            r.largest.waits.p50, r.largest.waits.p90, r.largest.jobs, r.largest.min_gpus
        )
    });
    row("metric window (T_peak / busy s)", &|r| {
        format!("{} ({:.0} / {:.0})", r.metric_window, r.peak_s, r.busy_s)
    });
    row("makespan (wall s)", &|r| format!("{:.0}", r.makespan_s));
    let mut out = String::new();
    let _ = write!(out, "| |");
    for r in results {
        let _ = write!(out, " {} |", r.name);
    }
    out.push('\n');
    out.push_str("|---|");
    for _ in results {
        out.push_str("---|");
    }
    out.push('\n');
    for (label, cells) in rows {
        let _ = writeln!(out, "| {label} | {} |", cells.join(" | "));
    }
    out
}

/// One row per cluster and pool (markdown).
pub fn pool_table(results: &[ClusterResult]) -> String {
    let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or("-".into());
    let mut out = String::from(
        "| cluster | pool | nodes | engine | runs | AFR | N*SIF, time average | max N*SIF | max N*SIF while WCC held (all / settled, every job movable) | WCC coverage | AGU | waited while it fit (job-s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        for p in &r.pools {
            let _ = writeln!(
                out,
                "| {} | {}{} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {:.1}% | {:.0} |",
                r.name,
                p.name,
                if p.modelled { "" } else { " (pass-through)" },
                p.nodes,
                match p.engine {
                    Some(true) => "active",
                    Some(false) => "NOT active",
                    None => "-",
                },
                p.runs,
                p.afr.map(|a| format!("{a:.4}")).unwrap_or("-".into()),
                p.mean_n_sif
                    .map(|a| format!("{a:.2}"))
                    .unwrap_or("-".into()),
                opt(p.max_n_sif),
                opt(p.max_n_sif_under_wcc),
                opt(p.max_n_sif_under_wcc_settled),
                p.wcc_coverage
                    .map(|w| format!("{:.0}%", 100.0 * w))
                    .unwrap_or("-".into()),
                100.0 * p.agu,
                p.fit_wait_s
            );
        }
        if r.runs_across_pools > 0 {
            let _ = writeln!(
                out,
                "| {} | (across pools) | | | {} | | | | | | | |",
                r.name, r.runs_across_pools
            );
        }
    }
    out
}

/// Live against simulated, per cluster: the simulator on the jobs this
/// replay submitted (markdown).
pub fn sim_table(results: &[ClusterResult]) -> String {
    let mut head = String::from("| |");
    let mut rule = String::from("|---|");
    for r in results {
        let model = r
            .simulated
            .as_ref()
            .map(|s| s.policy.as_str())
            .unwrap_or("-");
        let _ = write!(head, " {} live | {} simulated ({model}) |", r.name, r.name);
        rule.push_str("---|---|");
    }
    let mut out = format!("{head}\n{rule}\n");
    let mut row = |label: &str,
                   live: &dyn Fn(&ClusterResult) -> String,
                   sim: &dyn Fn(&super::sim::Simulated) -> String| {
        let _ = write!(out, "| {label} |");
        for r in results {
            let s = r.simulated.as_ref().map(sim).unwrap_or("-".into());
            let _ = write!(out, " {} | {s} |", live(r));
        }
        out.push('\n');
    };
    let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or("-".into());
    row("AFR", &|r| format!("{:.4}", r.afr), &|s| {
        format!("{:.4}", s.afr)
    });
    row(
        "max N*SIF (live: every poll, migrations in flight included; sim: after every policy call)",
        &|r| r.max_n_sif.to_string(),
        &|s| s.max_n_sif.to_string(),
    );
    row(
        "max N*SIF, no migration in flight (live: polls with none; sim: after every policy call)",
        &|r| opt(r.max_n_sif_no_flight),
        &|s| s.max_n_sif.to_string(),
    );
    row(
        "max N*SIF while WCC held (live: every poll; sim: after every policy call)",
        &|r| opt(r.max_n_sif_under_wcc),
        &|s| opt(s.max_n_sif_under_wcc),
    );
    row(
        "max N*SIF while WCC held, no migration in flight (live: polls with none; sim: after every policy call)",
        &|r| opt(r.max_n_sif_under_wcc_no_flight),
        &|s| opt(s.max_n_sif_under_wcc),
    );
    row(
        "AGU (each over its own metric window)",
        &|r| format!("{:.1}%", 100.0 * r.agu),
        &|s| s.agu.map_or("-".into(), |a| format!("{:.1}%", 100.0 * a)),
    );
    row(
        "AJCT over the jobs completed on every live cluster (wall s)",
        &|r| format!("{:.1} ({} jobs)", r.ajct_s, r.ajct_jobs),
        &|s| format!("{:.1} ({} jobs)", s.ajct_s, s.ajct_jobs),
    );
    if results.iter().any(|r| {
        r.completed != r.ajct_jobs || r.simulated.as_ref().is_some_and(|s| s.ajct_jobs != r.jobs)
    }) {
        row(
            "AJCT over its own completed jobs (wall s)",
            &|r| format!("{:.1} ({} jobs)", r.ajct_own_s, r.completed),
            &|s| format!("{:.1} (all {} jobs)", s.ajct_all_s, s.job_jct_s.len()),
        );
    }
    row(
        "wait p50 / p90, jobs completed on every live cluster (wall s)",
        &|r| format!("{:.1} / {:.1}", r.waits.p50, r.waits.p90),
        &|s| format!("{:.1} / {:.1}", s.waits.p50, s.waits.p90),
    );
    row(
        "wait p50 / p90, largest of those (wall s)",
        &|r| format!("{:.1} / {:.1}", r.largest.waits.p50, r.largest.waits.p90),
        &|s| format!("{:.1} / {:.1}", s.largest.waits.p50, s.largest.waits.p90),
    );
    row(
        "migrations: requeues (live) / moved jobs per policy call (sim) (jobs)",
        &|r| format!("{} ({})", r.migrations, r.migrated_jobs),
        &|s| format!("{} ({})", s.migrations, s.migrated_jobs),
    );
    if results.iter().any(|r| {
        r.simulated
            .as_ref()
            .is_some_and(|s| s.preemptions.is_some())
    }) {
        row(
            "preemptions: victims requeued / cancelled (live: by the budget service; sim: the policy simulator's)",
            &|r| {
                format!(
                    "{} / {}",
                    r.preemptions,
                    r.completion.preempted_cancelled.len()
                )
            },
            &|s| match (s.preemptions, s.cancelled) {
                (Some(p), Some(c)) => format!("{} / {c}", p.saturating_sub(c)),
                _ => "-".into(),
            },
        );
    }
    row(
        "started ahead (live) / backfilled (sim)",
        &|r| r.causes.started_ahead.to_string(),
        &|s| opt(s.backfilled),
    );
    row(
        "makespan (wall s)",
        &|r| format!("{:.0}", r.makespan_s),
        &|s| format!("{:.0}", s.makespan_s),
    );
    out
}

/// The JSON report.
#[derive(Serialize)]
pub struct Report<'a> {
    pub trace: &'a str,
    /// The configuration (`--label`), e.g. "placement only".
    pub label: &'a str,
    pub plan: &'a Plan,
    pub clusters: &'a [ClusterResult],
    pub checks: Vec<String>,
    pub wall_s: f64,
}

/// `report.md`.
pub fn markdown(
    trace: &str,
    label: &str,
    plan: &Plan,
    results: &[ClusterResult],
    checks: &[String],
    wall_s: f64,
) -> String {
    let c = &plan.compression;
    let mut s = String::new();
    let _ = writeln!(s, "# compass replay\n");
    if !label.is_empty() {
        let _ = writeln!(s, "Configuration: **{label}**.\n");
    }
    let _ = writeln!(
        s,
        "Trace `{trace}`, window {:.2} h to {:.2} h after its first arrival: {} jobs replayed ({} left out: larger than the cluster).",
        plan.window_trace_start_s / 3600.0,
        plan.window_trace_end_s / 3600.0,
        plan.jobs.len(),
        plan.skipped_too_large
    );
    let _ = writeln!(
        s,
        "Speedup {} (trace seconds per wall second); runs raised to {} s: {}, cut to {}: {}. Wall time {:.0} s.\n",
        c.speedup,
        c.min_run_s,
        plan.raised_to_min_run,
        c.max_run_s.map(|m| format!("{m} s")).unwrap_or("(no cap)".into()),
        plan.cut_to_max_run,
        wall_s
    );
    for r in results {
        if let Some(w) = foreign_note(r) {
            let _ = writeln!(s, "**Warning**: {w}\n");
        }
    }
    s.push_str(&table(results, c.speedup));
    s.push('\n');
    if results.iter().any(|r| r.pools.len() > 1) {
        let _ = writeln!(
            s,
            "## Pools\n\nEach pool of interchangeable GPU nodes (same GPU count and type) on its own, `N` its nodes, over the cluster's metric window; the cluster's N*SIF above is the sum over the modelled pools. Theorem 1 is per pool: `N*SIF <= 2` where WCC held in the pool (checked on compass clusters at settled instants).\n"
        );
        s.push_str(&pool_table(results));
        s.push('\n');
    }
    if let Some(sim) = results.iter().find_map(|r| r.simulated.as_ref()) {
        let compass_sim = results
            .iter()
            .filter(|r| r.is_compass())
            .find_map(|r| r.simulated.as_ref());
        let service = sim.service.as_ref();
        let _ = writeln!(
            s,
            "## Live against simulated\n\nThe simulator on the jobs this replay submitted (`jobs.csv`, wall seconds), same cluster size, {}, a migration costing {:.1} wall s = {:.1} trace min at speedup {} ({}), charged once per moved job as one Slurm requeue costs. Compass clusters are simulated with the `compass` policy, moving jobs under the plugin's `select.move_when` (`{}`, from its published state; the default when it publishes none) with remaining runs from the time limits submitted{}; stock clusters with `best-fit`, the closest model of cons_tres (it packs onto the fullest nodes that fit; Slurm's start latency, its scheduling passes and its backfill window are not modelled).\n",
            if service.is_some() {
                "the budget service's fair-share queue (below)"
            } else {
                "backfill queue"
            },
            sim.migration_cost_s,
            sim.migration_cost_s * c.speedup / 60.0,
            c.speedup,
            sim.migration_cost_source,
            compass_sim.map_or("-".to_string(), |s| match s.tidy_payback {
                Some(k) => format!("{}, tidy payback {k}", s.move_when),
                None => s.move_when.clone(),
            }),
            compass_sim
                .and_then(|s| s.rule_cost_s)
                .map_or(String::new(), |c| format!(
                    ", its cost rule weighing the {c} s the plugin decides with (`select.migration_cost`) while completions pay the measured cost"
                ))
        );
        s.push_str(&sim_scope(
            service,
            results.iter().map(|r| {
                (
                    r.name.as_str(),
                    r.preemptions,
                    r.completion.preempted_cancelled.len() as u64,
                )
            }),
        ));
        s.push_str(&sim_table(results));
        s.push('\n');
        s.push_str(SIM_FOOTNOTE);
        s.push_str(&sim_commands(results));
    }
    if checks.is_empty() {
        let afr = if afr_checked(results) {
            "; compass AFR below stock)."
        } else {
            "). AFR is compared above, not checked: the budget service preempts here, protected jobs are never moved, and compass's AFR is then level with best-fit's on average (docs/results.md)."
        };
        let _ = writeln!(
            s,
            "Checks: all passed (every job completed exactly once, or was cancelled by compass-budgetd as a non-resumable preemption victim; compass jobs ran only on the engine's nodes; N*SIF <= 2 in each pool while WCC held there{afr}\n"
        );
    } else {
        s.push_str("Checks FAILED:\n");
        for c in checks {
            let _ = writeln!(s, "- {c}");
        }
        s.push('\n');
    }
    for r in results {
        if !r.problems.is_empty() {
            let _ = writeln!(s, "{}: {} job(s) with problems:", r.name, r.problems.len());
            for p in r.problems.iter().take(50) {
                let _ = writeln!(s, "- {p}");
            }
            s.push('\n');
        }
    }
    s.push_str(DEFINITIONS);
    s
}

/// Below the live-against-simulated table: what its rows measure on each
/// side where the two differ by definition.
pub const SIM_FOOTNOTE: &str = "Live and simulated differ by definition here: the simulator takes max `N*SIF` after every policy call, where a migration is instantaneous, so its like is the live maximum over polls with no migration in flight (the live maximum over every poll also counts the instants while a requeued job waits or completes). A migration costs the simulated job its cost as a longer run, its GPUs busy meanwhile; live, the requeued job gives its GPUs back and waits to restart, so the same cost shows live as idle GPUs (lower AGU, `idle GPUs ... migration in flight`) and simulated as longer runs (higher AGU). Migrations count moved jobs on both sides (one Slurm requeue per moved job live; the simulation charges the cost once per moved job, `--migration-charge per-job`). AJCT and the waits are over the jobs that completed on every live cluster, the simulated columns over the same jobs.\n\n";

/// The warning about jobs not the replay's own on cluster `r` at the
/// start of the run, if any.
pub fn foreign_note(r: &ClusterResult) -> Option<String> {
    let f = &r.foreign_jobs_at_start;
    if f.is_empty() {
        return None;
    }
    Some(format!(
        "{}: {} job(s) not submitted by this replay were on the cluster when it started ({}); the replay observes only its own jobs, so the GPUs those held count as idle here.",
        r.name,
        f.len(),
        f.join(", ")
    ))
}

/// What the simulated columns model, in one paragraph. With the budget
/// service the clusters ran (`service`, `--service-config`): the policy
/// simulator with the service's settings, named with their values
/// ([`ServiceModel::scope`]), a simulation of the live configuration.
/// Otherwise placement only (the simulator's FIFO queue with backfill, by
/// submission), never a budget service's fair-share order or its
/// preemptions: when the live clusters preempted (`clusters`: name,
/// preemption requeues, victims cancelled as not resumable, summed over
/// the runs the text speaks for), it says so, and that only the
/// fragmentation figures compare: the live completion times and
/// utilisation are those of another configuration than the simulation's
/// (issue 10: a live run with enforcement against a placement-only
/// simulation).
pub fn sim_scope<'a>(
    service: Option<&ServiceModel>,
    clusters: impl IntoIterator<Item = (&'a str, u64, u64)>,
) -> String {
    if let Some(service) = service {
        return service.scope();
    }
    let mut s = String::from(
        "The simulation is **placement only**: its queue is first-come first-served with backfill, in submission order; a budget service's fair-share order and its preemptions are not simulated.",
    );
    let preempting: Vec<String> = clusters
        .into_iter()
        .filter(|&(_, requeued, cancelled)| requeued + cancelled > 0)
        .map(|(name, requeued, cancelled)| {
            format!("{name} {requeued} requeued and {cancelled} cancelled")
        })
        .collect();
    if !preempting.is_empty() {
        let _ = write!(
            s,
            " Here the live clusters preempted jobs ({}), which the simulation does not: live against simulated compares the fragmentation figures (AFR, max `N*SIF`), not completion times, waits or utilisation.",
            preempting.join("; ")
        );
    }
    s.push_str("\n\n");
    s
}

/// The `compass simulate` commands that give the report's simulated
/// columns, one per simulated cluster (on the replay's `jobs.csv`), so
/// that a figure can be rerun and taken apart job by job (`--jobs-out`).
fn sim_commands(results: &[ClusterResult]) -> String {
    let policy = results
        .iter()
        .any(|r| r.simulated.as_ref().is_some_and(|s| s.command.is_some()));
    let mut s = String::from(if policy {
        "To rerun the simulated columns (`jobs.csv` of this replay's output directory; add `--json` for every figure, `--events FILE` for every start, preemption and completion):\n\n```sh\n"
    } else {
        "To rerun the simulated columns (`jobs.csv` of this replay's output directory; add `--jobs-out FILE` for each job's wait and completion):\n\n```sh\n"
    });
    for r in results {
        let Some(sim) = r.simulated.as_ref() else {
            continue;
        };
        if let Some(args) = &sim.command {
            // The policy simulator's, built from the configuration it ran.
            let _ = writeln!(s, "compass simulate {args}   # {}", r.name);
            continue;
        }
        let mut gate = match (r.is_compass(), sim.tidy_payback) {
            (false, _) => String::new(),
            (true, Some(k)) => format!(" --move-when {} --tidy-payback {k}", sim.move_when),
            (true, None) => format!(" --move-when {}", sim.move_when),
        };
        if let Some(c) = sim.rule_cost_s {
            let _ = write!(gate, " --rule-cost {c}s");
        }
        let _ = writeln!(
            s,
            "compass simulate --trace jobs.csv --nodes {} --gpus-per-node {} --queue {} --remaining-run replay-limit --migration-cost {}s --migration-charge {} --policy {}{gate}   # {}",
            r.nodes, r.gpus_per_node, sim.queue, sim.migration_cost_s, sim.migration_charge, sim.policy, r.name
        );
    }
    s.push_str("```\n\n");
    s
}

/// How each figure is defined (the simulator's definitions:
/// `compass-core/src/sim/mod.rs` `SimResult`, `compass-core/src/sim/stats.rs`).
pub const DEFINITIONS: &str = "## Definitions

Same definitions as the simulator (`compass-core/src/sim/mod.rs`, `SimResult`; paper Section 5.5), on observed Slurm state polled about once a second (the state seen at a poll holds until the next):

- **N*SIF** = `Phi_pi - Phi*` (eq. 2 times N): partial nodes (some but not all GPUs allocated, from `scontrol show job -d`) minus `Phi*`, the fewest partial nodes any packing of the running instances could have (`compass_core::metric::phi_star`, exact).
- **AFR** (eq. 15): time average of `SIF = N*SIF / N` over `T_peak`, the time at least one replayed job waits in the queue (eq. 14); over the time any job runs or waits when the queue never was non-empty (`metric window`).
- **AGU** (eq. 17): time average of allocated GPUs / all GPUs over the same window (each cluster's own). A job's GPUs count as allocated from its start until Slurm releases them: while it is `COMPLETING` (epilog) no other job can have them. **GPU utilisation over the common window**: GPU-seconds allocated / (all GPUs x the window), the window the same for every cluster: from the first submission to the last job end on any of them.
- **AJCT** (eq. 16): mean of completion (the job's end as Slurm reports it) minus submission, wall seconds, over the jobs that completed on every cluster of the replay (their count beside it; each cluster's own completed count is the first row), so that no cluster's average leaves out a job the others keep; the simulated AJCT is over the same jobs. *Scaled back by the speedup*: the wall AJCT times the speedup, in hours; not the trace's own AJCT (runs were raised to `--min-run` or cut to `--max-run`, and the jobs queued at compressed times). Queueing, restarts and checkpoint losses are included, as migrations are charged in the simulator.
- **max N*SIF**: over every poll, migrations in flight included; *with no migration in flight*: over the polls where no requeued job waited or completed and the engine had no migration decided and not carried out: the like of the simulator's maximum, taken after every policy call (a simulated migration is instantaneous).
- **max N*SIF while WCC held**: over polls where the Workload Composition Condition (eq. 9, `compass_core::metric::wcc_holds`) held for the running instances; Theorem 1 promises at most 2. *Settled* polls: nothing moved since the previous poll and no migration or requeued job is in flight (the paper's instants are after Compact).
- **N*SIF, time average (all instants)**: `AFR x N` (`N` the nodes of the modelled pools), every poll of the window counted, migrations in flight included. **Time not settled / with a migration in flight**: shares of the window the settled line leaves out / where a requeued job waits to restart or the engine has a migration decided and not carried out.
- **requeue -> restart idle**: from a run's end (the requeue) to the next run's start, over the requeues of completed jobs (on a compass cluster, of jobs whose every requeue was a migration). **Cost of one requeue**: that idle time plus the progress lost and the start-up (the job's end minus first start minus its run, less the idle time and less the same overhead of jobs never requeued), in wall seconds, and times the speedup in trace time. The compass cluster's figure is the migration cost of the simulation (8 s, the paper's, when no migration was measured).
- **held for a migration target**: jobs the plugin kept from starting because their planned nodes were not free yet (`planned nodes not free yet` log lines), and the wall seconds from the first such line to the job's start or to the hold's release after `HOLD_LIMIT_S` (10 s), whichever came first, summed. **Then no room after the hold's release**: wall seconds from that release (`hold released, tried on Slurm's candidates`) to the job's start: cons_tres found no room on Slurm's own candidates either, so no shorter hold would have started the job sooner. **Waited while it fit**: at each poll, every waiting job that would fit the free GPUs as they are (`w` nodes with `g` free GPUs each, each job counted alone) adds the time to the next poll: Slurm's scheduling cadence and start latency on both clusters, and on compass also jobs narrowed to planned nodes that were not free. **Started ahead of an earlier job**: jobs that started more than a second before a job submitted earlier (backfill, priority order); the simulator's *backfilled* counts its backfill starts. **Published state age**: seconds since the engine's state file was written, at each poll.
- **migrations**: requeues the select plugin carried out (its `migration of job N: requeued` log lines), one per moved job; the simulated count is moved jobs per policy call (the simulator's `migration_charges` under `--migration-charge per-job`), not moved instances. A simulated migration lengthens the job's run by the cost with its GPUs busy; live the requeued job releases its GPUs and waits. **preemptions**: the other requeues Slurm counted (`Restarts`), i.e. by the budget service.
- **waits**: first start minus submission, over the jobs that completed on every cluster; percentiles nearest-rank (`compass-core/src/sim/stats.rs`); *largest*: the top 5% of jobs by total GPUs `w x g` (ties included).
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_share_includes_ties_and_at_least_one_job() {
        let gpus: Vec<u64> = (1..=40).collect();
        let waits: Vec<(u64, f64)> = gpus.iter().map(|&g| (g, g as f64)).collect();
        let l = largest_waits(&gpus, &waits);
        assert_eq!((l.min_gpus, l.jobs), (39, 2));
        assert_eq!(l.waits.p50, 39.0);
        let l = largest_waits(&[8, 8, 1], &[(8, 3.0), (8, 5.0), (1, 0.0)]);
        assert_eq!((l.min_gpus, l.jobs), (8, 2));
    }

    #[test]
    fn completion_log_exactly_once() {
        let dir = std::env::temp_dir().join(format!("compass-replay-done-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("completed.log");
        std::fs::write(&p, "1\n2\n2\n9\n").unwrap();
        let c = Completion::read(&p, &[1, 2, 3, 4], &BTreeSet::from([4]));
        assert_eq!(c.once, 1);
        assert_eq!(c.duplicated, vec![2]);
        assert_eq!(c.missing, vec![3]);
        assert_eq!(c.unknown, vec![9]);
        assert_eq!(c.preempted_cancelled, vec![4], "cancelled under the rules");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn log_facts_for_our_jobs_only() {
        let dir = std::env::temp_dir().join(format!("compass-replay-facts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("slurmctld.log");
        std::fs::write(
            &p,
            "[t] select/cons_tres_compass: job_test job 5 mode 0: narrowed 16 -> 1 nodes\n\
[t] select/cons_tres_compass: job_test job 5 mode 1: narrowed 16 -> 1 nodes\n\
[t] select/cons_tres_compass: job_test job 6: planned nodes refused by cons_tres, retried on all candidates (rc 0)\n\
[t] select/cons_tres_compass: job_test job 5: planned nodes refused by cons_tres, retried on all candidates (rc -1)\n\
[t] select/cons_tres_compass: migration of job 5: requeued, pinned to its planned nodes, eligible now\n\
[t] select/cons_tres_compass: plan for job 7: boom; job 7 goes to plain cons_tres\n\
[t] select/cons_tres_compass: job_test job 99 mode 0: narrowed 16 -> 1 nodes\n\
[t] select/cons_tres_compass: job_test job 8 mode 2: planned nodes refused by cons_tres, retried on all candidates (rc 0)\n\
[t] select/cons_tres_compass: job_test job 8 mode 1: planned nodes refused by cons_tres, retried on all candidates (rc 0)\n\
[t] select/cons_tres_compass: job_test job 10 mode 0: planned nodes refused by cons_tres, retried on all candidates (rc 0)\n",
        )
        .unwrap();
        let f = LogFacts::read(&p, 0, &BTreeSet::from([5, 6, 7, 8, 10]));
        assert_eq!(f.narrowed_run_now, BTreeMap::from([(5, 1)]));
        assert_eq!(f.migrations, BTreeMap::from([(5, 1)]));
        assert_eq!(
            f.widened,
            BTreeSet::from([6, 7, 10]),
            "a WILL_RUN or TEST_ONLY retry on all candidates places nothing"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn held_jobs_from_the_log_timestamps() {
        let dir = std::env::temp_dir().join(format!("compass-replay-held-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("slurmctld.log");
        std::fs::write(
            &p,
            "[2026-11-30T10:00:01.500] compass: job_test job 5: planned nodes not free yet (migrations in flight); job waits\n\
[2026-11-30T10:00:03.000] compass: job_test job 5: planned nodes not free yet (migrations in flight); job waits\n\
[2026-11-30T10:00:04.000] compass: job_test job 6: planned nodes not free yet (migrations in flight); job waits\n\
[2026-11-30T10:00:05.500] compass: job_test job 5 mode 0: narrowed 16 -> 1 nodes\n\
[2026-11-30T10:00:06.000] compass: job_test job 7: planned nodes not free yet (migrations in flight); job waits\n\
[2026-11-30T10:00:16.000] compass: job_test job 7: hold released, tried on Slurm's candidates (rc -1)\n\
[2026-11-30T10:00:47.000] compass: job_test job 7 mode 0: hold released, placed by Slurm\n",
        )
        .unwrap();
        let f = LogFacts::read(&p, 0, &BTreeSet::from([5, 6, 7]));
        assert_eq!(f.held_tests, BTreeMap::from([(5, 2), (6, 1), (7, 1)]));
        assert_eq!(
            f.held_s, 14.0,
            "job 5 from 10:00:01.5 to its start, job 7 until its hold was released; job 6 never started"
        );
        assert_eq!(
            f.no_room_s, 31.0,
            "job 7 from its release until Slurm found room for it"
        );
        assert_eq!(f.released_run_now, BTreeMap::from([(7, 1)]));
        assert!(!f.narrowed_run_now.contains_key(&7));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn requeue_cost_from_the_runs() {
        use super::super::plan::PlannedJob;
        use super::super::slurm::JobObs;
        let planned = |index: usize| PlannedJob::example(index, 1, 4);
        let plan = Plan::example(vec![planned(0), planned(1)], 60.0);
        let obs = |id, state: &str, restarts, run, node: &str| JobObs {
            id,
            name: String::new(),
            state: state.into(),
            reason: String::new(),
            restarts,
            run_time_s: run,
            node_gpus: if node.is_empty() {
                BTreeMap::new()
            } else {
                BTreeMap::from([(node.to_string(), 4)])
            },
            preempted_cancel: false,
        };
        let mut o = Observer::new(&plan.jobs, vec!["n1".into(), "n2".into()], 8, None);
        o.submitted(0, 1, 0.0);
        o.submitted(1, 2, 0.0);
        // job 1 runs 10 s undisturbed (1 s of bias); job 2 runs 4 s, is
        // requeued, waits 3 s, runs 8 s more (2 s of progress lost)
        o.poll(
            &[obs(1, "RUNNING", 0, 0, "n1"), obs(2, "RUNNING", 0, 0, "n2")],
            1.0,
            1,
        );
        o.poll(
            &[obs(1, "RUNNING", 0, 4, "n1"), obs(2, "PENDING", 1, 4, "")],
            5.0,
            5,
        );
        o.poll(
            &[obs(1, "RUNNING", 0, 7, "n1"), obs(2, "RUNNING", 1, 0, "n1")],
            8.0,
            8,
        );
        o.poll(
            &[
                obs(1, "COMPLETED", 0, 11, ""),
                obs(2, "RUNNING", 1, 8, "n1"),
            ],
            16.0,
            16,
        );
        o.poll(
            &[
                obs(1, "COMPLETED", 0, 11, ""),
                obs(2, "COMPLETED", 1, 9, ""),
            ],
            17.0,
            17,
        );
        let c = requeue_cost(&plan, &o, Some(&BTreeMap::from([(2, 1)])));
        assert_eq!((c.requeues, c.migration_requeues), (1, 1));
        assert_eq!((c.idle_mean_s, c.idle_max_s), (3.0, 3.0));
        // job 2: end 17 - first start 1 - run 10 - idle 3 = 3, less 1 s bias
        assert_eq!(c.lost_mean_s, 2.0);
        assert_eq!(c.wall_cost_s, 5.0);
        assert_eq!(c.trace_cost_s, 300.0);
        assert_eq!(started_ahead(&o), 0);
    }

    #[test]
    fn the_bound_is_checked_per_pool_and_names_the_pool_that_broke_it() {
        use super::super::plan::PlannedJob;
        use super::super::slurm::JobObs;
        use compass_core::placement::pools::NodeGpus;
        use compass_slurm::state::{PoolView, PublishedState};
        let planned = |index: usize, g: u32| PlannedJob::example(index, 1, g);
        // four 1-GPU jobs on four a100 nodes (partial 4, Phi* 1: N*SIF 3
        // under WCC); two 2-GPU jobs on two l40s nodes (partial 2, Phi* 0:
        // N*SIF 2, the bound)
        let plan = Plan::example(
            (0..4)
                .map(|i| planned(i, 1))
                .chain((4..6).map(|i| planned(i, 2)))
                .collect(),
            60.0,
        );
        let mut nodes: Vec<(String, NodeGpus)> = (1..=4)
            .map(|k| (format!("a{k}"), NodeGpus::new(8, Some("a100"))))
            .collect();
        nodes.extend((1..=3).map(|k| (format!("l{k}"), NodeGpus::new(4, Some("l40s")))));
        nodes.push(("c1".into(), NodeGpus::new(0, None)));
        let dir = std::env::temp_dir().join(format!("compass-replay-pools-{}", std::process::id()));
        let mut o = Observer::with_nodes(&plan.jobs, &nodes, Some(dir.join("state.json")));
        let pool_view = |name: &str, g: u32, names: &[&str]| PoolView {
            name: name.into(),
            gpus_per_node: g,
            nodes: names.len() as u32,
            node_names: names.iter().map(|n| n.to_string()).collect(),
            modelled: true,
            ..Default::default()
        };
        o.state = Some(PublishedState {
            engine_active: true,
            pools: vec![
                pool_view("8xa100", 8, &["a1", "a2", "a3", "a4"]),
                pool_view("4xl40s", 4, &["l1", "l2", "l3"]),
            ],
            ..Default::default()
        });
        let at = ["a1", "a2", "a3", "a4", "l1", "l2"];
        for (i, _) in at.iter().enumerate() {
            o.submitted(i, i as u64 + 1, 0.0);
        }
        let running = |run: u64| -> Vec<JobObs> {
            at.iter()
                .enumerate()
                .map(|(i, n)| JobObs {
                    id: i as u64 + 1,
                    state: "RUNNING".into(),
                    run_time_s: run,
                    node_gpus: BTreeMap::from([(n.to_string(), plan.jobs[i].gpus)]),
                    ..Default::default()
                })
                .collect()
        };
        // the second poll sees the same placement: settled
        o.poll(&running(0), 1.0, 1);
        o.poll(&running(1), 2.0, 2);
        let r = summarise(
            &plan,
            &o,
            &ClusterInfo {
                name: "compass",
                slurm_conf: Path::new("/nonexistent/slurm.conf"),
                spank: true,
                completion_log: &dir.join("completed.log"),
                log: None,
                poll_errors: 0,
                foreign_at_start: Vec::new(),
            },
        );
        let names: Vec<&str> = r.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["8xa100", "4xl40s"]);
        assert_eq!(r.pools[0].max_n_sif_under_wcc_settled, Some(3));
        assert_eq!(r.pools[1].max_n_sif_under_wcc_settled, Some(2));
        assert_eq!((r.pools[0].runs, r.pools[1].runs), (4, 2));
        assert!(
            r.pools.iter().all(|p| p.engine == Some(true)),
            "{:?}",
            r.pools
        );
        let f = check(std::slice::from_ref(&r));
        let bound: Vec<&String> = f.iter().filter(|m| m.contains("N*SIF reached")).collect();
        assert_eq!(bound.len(), 1, "{f:?}");
        assert!(
            bound[0].starts_with("compass: pool 8xa100: N*SIF reached 3 > 2"),
            "{f:?}"
        );
        let md = markdown("t", "", &plan, std::slice::from_ref(&r), &f, 1.0);
        assert!(md.contains("## Pools"), "{md}");
        assert!(md.contains("| compass | 8xa100 | 4 | active | 4 |"), "{md}");
        // 8 of 44 GPUs busy, nobody waiting: all the idle time is idle that
        // no waiting job could use
        assert!(
            md.contains("| idle GPUs: all / usable by waiting jobs that fit / kept from a waiting job by the layout / not needed / migration in flight | 81.8% / 0.0% / 0.0% / 81.8% / 0.0% |"),
            "{md}"
        );
    }

    #[test]
    fn the_simulation_says_it_is_placement_only_and_when_the_live_run_preempted() {
        let quiet = sim_scope(None, [("compass", 0, 0), ("stock", 0, 0)]);
        assert!(quiet.contains("**placement only**"), "{quiet}");
        assert!(
            !quiet.contains("preempted"),
            "no preemption, no caveat: {quiet}"
        );
        let enforced = sim_scope(None, [("compass", 14, 1), ("stock", 0, 0), ("other", 0, 2)]);
        assert!(enforced.contains("**placement only**"), "{enforced}");
        assert!(
            enforced.contains(
                "(compass 14 requeued and 1 cancelled; other 0 requeued and 2 cancelled)"
            ),
            "every preempting cluster named, the quiet one not: {enforced}"
        );
        assert!(enforced.contains("not completion times"), "{enforced}");
        assert!(enforced.ends_with("\n\n"));
    }

    /// The budget service of the demo's enforcement as the replay models it.
    fn demo_service() -> ServiceModel {
        use compass_core::preempt::ProtectionConfig;
        use compass_core::sim::budgets::Preemption;
        ServiceModel {
            config: "/d/budget/compass-budgetd.toml".into(),
            budgets: "/r/etc/budgets.venus.toml".into(),
            enforce: "true".into(),
            gpu_weights: false,
            settings: crate::policy::PolicySettings {
                window_s: 2520.0,
                cycle_s: 2.0,
                order: Default::default(),
                preemption: Preemption::Compass,
                protection: ProtectionConfig {
                    min_runtime_cap_s: 120.0,
                    ..ProtectionConfig::default()
                },
                job_checkpoint_s: Some(1.0),
                restart_cost_s: 0.0,
                backfill: compass_core::sim::budgets::Backfill::Reserve,
            },
        }
    }

    /// With `--service-config` the paragraph names the policy simulator
    /// and the service's settings with their values, and the live run's
    /// preemptions are no caveat (the simulation has them too).
    #[test]
    fn with_the_service_the_simulation_is_the_policy_simulators() {
        let mut model = demo_service();
        let text = sim_scope(Some(&model), [("compass", 14, 1), ("stock", 9, 0)]);
        for needle in [
            "**policy simulator**",
            "(`/d/budget/compass-budgetd.toml`)",
            "a 2 s cycle, a fair-share window of 2520 s",
            "the team order `under-allocation-first` (unallocated work `under-total-first`)",
            "enforcement (`enforce = true`: jobs preempted by the protected-time rules, at most 16 victims a cycle, margin 0.05, exact victim search up to 10 candidates)",
            "capped at 120 s",
            "every 1 s as the replay's job script writes them",
            "`--restart-cost 0s`",
            "assuming a checkpoint every 600 s, the service's `checkpoint_interval_s`",
            "make backfill reservations as the clusters' Slurm does (`sched/backfill`; `--backfill reserve`)",
        ] {
            assert!(text.contains(needle), "lacks `{needle}`: {text}");
        }
        assert!(
            !text.contains("placement only") && !text.contains("not completion times"),
            "{text}"
        );
        assert!(text.ends_with("\n\n"));
        model.enforce = "false".into();
        model.settings.preemption = compass_core::sim::budgets::Preemption::None;
        let text = sim_scope(Some(&model), [("compass", 0, 0)]);
        assert!(
            text.contains("queue order only (`enforce = false`: no preemption)")
                && !text.contains("assuming a checkpoint"),
            "{text}"
        );
        model.enforce = "dry-run".into();
        let text = sim_scope(Some(&model), [("compass", 0, 0)]);
        assert!(text.contains("`enforce = \"dry-run\"`"), "{text}");
    }

    /// The policy simulation's rows: its preemptions beside the live ones,
    /// `-` for what it does not measure; its command as it was built.
    #[test]
    fn the_policy_simulation_has_preemptions_and_no_invented_figures() {
        use crate::replay::sim::Simulated;
        let sim = Simulated {
            policy: "compass".into(),
            queue: "fair-share".into(),
            agu: None,
            backfilled: None,
            preemptions: Some(5),
            cancelled: Some(1),
            service: Some(demo_service()),
            command: Some("--trace jobs.csv --budgets /r/b.toml --policy compass".into()),
            ..Default::default()
        };
        let mut live = ClusterResult {
            name: "compass".into(),
            state_file: Some("/s".into()),
            nodes: 16,
            gpus_per_node: 8,
            preemptions: 7,
            simulated: Some(sim),
            ..Default::default()
        };
        live.completion.preempted_cancelled = vec![11, 12];
        let table = sim_table(std::slice::from_ref(&live));
        assert!(
            table.contains("| preemptions: victims requeued / cancelled (live: by the budget service; sim: the policy simulator's) | 7 / 2 | 4 / 1 |"),
            "{table}"
        );
        assert!(
            table.contains("| AGU (each over its own metric window) | 0.0% | - |"),
            "{table}"
        );
        assert!(
            table.contains("| started ahead (live) / backfilled (sim) | 0 | - |"),
            "{table}"
        );
        let text = sim_commands(std::slice::from_ref(&live));
        assert!(
            text.contains("compass simulate --trace jobs.csv --budgets /r/b.toml --policy compass   # compass\n")
                && text.contains("`--events FILE`"),
            "{text}"
        );
        // placement only: no preemptions row
        live.simulated = Some(Simulated::default());
        assert!(!sim_table(&[live]).contains("preemptions"));
    }

    #[test]
    fn sim_commands_give_each_simulated_column_with_the_exact_cost() {
        use crate::replay::sim::Simulated;
        let cost = 2.1015802534482813;
        let sim = |policy: &str, tidy: Option<f64>, rule: Option<f64>| Simulated {
            policy: policy.into(),
            queue: "backfill".into(),
            migration_cost_s: cost,
            migration_charge: "per-job".into(),
            rule_cost_s: rule,
            move_when: "pays".into(),
            tidy_payback: tidy,
            ..Default::default()
        };
        let compass = ClusterResult {
            name: "compass".into(),
            state_file: Some("/s".into()),
            nodes: 16,
            gpus_per_node: 8,
            simulated: Some(sim("compass", Some(20.0), Some(5.0))),
            ..Default::default()
        };
        let stock = ClusterResult {
            name: "stock".into(),
            nodes: 16,
            gpus_per_node: 8,
            simulated: Some(sim("best-fit", None, None)),
            ..Default::default()
        };
        let text = sim_commands(&[compass, stock]);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("compass simulate"))
            .collect();
        let common = "compass simulate --trace jobs.csv --nodes 16 --gpus-per-node 8 --queue backfill --remaining-run replay-limit --migration-cost 2.1015802534482813s --migration-charge per-job";
        assert_eq!(
            lines,
            vec![
                format!(
                    "{common} --policy compass --move-when pays --tidy-payback 20 --rule-cost 5s   # compass"
                ),
                format!("{common} --policy best-fit   # stock"),
            ]
        );
        // the cost as printed parses back to the same number
        assert_eq!(
            crate::tracefile::parse_cost("2.1015802534482813s"),
            Ok(cost)
        );
        assert_eq!(crate::tracefile::parse_cost("8s"), Ok(8.0));
        assert_eq!(
            format!("{}s", 8.0_f64),
            "8s",
            "a whole cost prints as Slurm's form"
        );
    }

    #[test]
    fn afr_check_compares_compass_with_stock() {
        let compass = ClusterResult {
            name: "compass".into(),
            state_file: Some("/s".into()),
            afr: 0.01,
            jobs: 1,
            submitted: 1,
            max_n_sif_under_wcc_settled: Some(3),
            node_check: Some(NodeCheck {
                divergences: Some(0),
                log_read: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let stock = ClusterResult {
            name: "stock".into(),
            afr: 0.01,
            jobs: 1,
            submitted: 1,
            ..Default::default()
        };
        let f = check(&[compass.clone(), stock.clone()]);
        assert!(f.iter().any(|m| m.contains("AFR of compass")), "{f:?}");
        assert!(f.iter().any(|m| m.contains("N*SIF reached 3")), "{f:?}");
        let good = ClusterResult {
            afr: 0.001,
            max_n_sif_under_wcc_settled: Some(2),
            ..compass
        };
        assert!(check(&[good, stock]).is_empty());
    }

    /// With the budget service preempting, compass's AFR above stock's is
    /// a figure, not a failed check (it is not promised there); every
    /// other check stands, and without preemption the AFR is checked.
    #[test]
    fn afr_is_checked_only_without_preemption() {
        let with = |enforce: &str| {
            Some(crate::replay::sim::Simulated {
                service: Some(ServiceModel {
                    enforce: enforce.into(),
                    ..demo_service()
                }),
                ..Default::default()
            })
        };
        let compass = |enforce: &str, n_sif: u64| ClusterResult {
            name: "compass".into(),
            state_file: Some("/s".into()),
            afr: 0.1,
            jobs: 1,
            submitted: 1,
            max_n_sif_under_wcc_settled: Some(n_sif),
            node_check: Some(NodeCheck {
                divergences: Some(0),
                log_read: true,
                ..Default::default()
            }),
            simulated: with(enforce),
            ..Default::default()
        };
        let stock = |enforce: &str| ClusterResult {
            name: "stock".into(),
            afr: 0.01,
            jobs: 1,
            submitted: 1,
            simulated: with(enforce),
            ..Default::default()
        };
        let enforced = [compass("true", 2), stock("true")];
        assert!(!afr_checked(&enforced));
        assert!(check(&enforced).is_empty(), "{:?}", check(&enforced));
        let plan = Plan::example(
            (0..1)
                .map(|i| super::super::plan::PlannedJob::example(i, 1, 1))
                .collect(),
            1.0,
        );
        let md = markdown("t", "", &plan, &enforced, &[], 1.0);
        assert!(md.contains("AFR is compared above, not checked"), "{md}");
        let f = check(&[compass("true", 3), stock("true")]);
        assert!(f.iter().any(|m| m.contains("N*SIF reached 3")), "{f:?}");
        for enforce in ["false", "dry-run"] {
            let f = check(&[compass(enforce, 2), stock(enforce)]);
            assert!(
                f.iter().any(|m| m.contains("AFR of compass")),
                "{enforce}: {f:?}"
            );
        }
        let placement = [
            ClusterResult {
                simulated: None,
                ..compass("true", 2)
            },
            ClusterResult {
                simulated: None,
                ..stock("true")
            },
        ];
        assert!(check(&placement)
            .iter()
            .any(|m| m.contains("AFR of compass")));
    }

    fn info<'a>(name: &'a str, log: &'a Path) -> ClusterInfo<'a> {
        ClusterInfo {
            name,
            slurm_conf: Path::new("/nonexistent/slurm.conf"),
            spank: false,
            completion_log: log,
            log: None,
            poll_errors: 0,
            foreign_at_start: Vec::new(),
        }
    }

    fn running(id: u64, node: &str, g: u32) -> super::super::slurm::JobObs {
        super::super::slurm::JobObs {
            id,
            state: "RUNNING".into(),
            node_gpus: BTreeMap::from([(node.to_string(), g)]),
            ..Default::default()
        }
    }

    fn ended(id: u64, state: &str, run: u64) -> super::super::slurm::JobObs {
        super::super::slurm::JobObs {
            id,
            state: state.into(),
            run_time_s: run,
            ..Default::default()
        }
    }

    /// `N*SIF` is summed over the modelled pools and SIF divides it by
    /// their nodes, so its time average is AFR times those nodes, not
    /// times every GPU node: a pass-through pool has no `N*SIF`.
    #[test]
    fn mean_n_sif_counts_the_modelled_nodes_only() {
        use super::super::plan::PlannedJob;
        use compass_core::placement::pools::NodeGpus;
        let plan = Plan::example(
            vec![
                PlannedJob::example(0, 1, 1),
                PlannedJob::example(1, 1, 1),
                PlannedJob::example(2, 1, 8),
            ],
            1.0,
        );
        // two 8-GPU a100 nodes (modelled) and one 6-GPU node (pass-through)
        let nodes: Vec<(String, NodeGpus)> = [("a1", 8), ("a2", 8), ("s1", 6)]
            .into_iter()
            .map(|(n, g)| {
                let t = (g == 8).then_some("a100");
                (n.to_string(), NodeGpus::new(g, t))
            })
            .collect();
        let mut o = Observer::with_nodes(&plan.jobs, &nodes, None);
        assert!(!o.pools[1].def.modelled);
        for i in 0..3 {
            o.submitted(i, i as u64 + 1, 0.0);
        }
        // one GPU on each a100 node: 2 partial, Phi* 1, N*SIF 1; the 8-GPU
        // job waits (no node has 8 free GPUs)
        let polled = [
            running(1, "a1", 1),
            running(2, "a2", 1),
            ended(3, "PENDING", 0),
        ];
        o.poll(&polled, 1.0, 1);
        o.poll(&polled, 3.0, 3);
        let dir = std::env::temp_dir();
        let r = summarise(&plan, &o, &info("c", &dir.join("none.log")));
        assert_eq!(r.nodes, 3);
        assert_eq!(r.afr, 0.5, "N*SIF 1 over the 2 modelled nodes");
        assert_eq!(r.mean_n_sif, 1.0, "N*SIF was 1 all along");
        assert_eq!(r.gpus, 22);
    }

    /// A job that did not complete on one cluster (cancelled, failed,
    /// timed out) is left out of every cluster's AJCT and waits, and of
    /// the simulated ones: the clusters are compared on the same jobs,
    /// with their count, and each keeps its own completed count. The
    /// utilisation over the common window takes one window for all.
    #[test]
    fn clusters_are_compared_on_the_jobs_completed_everywhere_and_one_window() {
        use super::super::plan::PlannedJob;
        let mut jobs: Vec<PlannedJob> = (0..3).map(|i| PlannedJob::example(i, 1, 8)).collect();
        jobs[2].run_s = 40.0;
        let plan = Plan::example(jobs, 60.0);
        let dir = std::env::temp_dir();
        let log = dir.join("compass-replay-no-such.log");
        // cluster a: jobs 0 and 1 run 10 s from 1 s; job 2 fails at 2 s
        let mut a = Observer::new(
            &plan.jobs,
            vec!["n1".into(), "n2".into(), "n3".into()],
            8,
            None,
        );
        // cluster b: jobs 0 and 1 run 20 s, job 2 30 s: all complete
        let mut b = Observer::new(
            &plan.jobs,
            vec!["n1".into(), "n2".into(), "n3".into()],
            8,
            None,
        );
        for o in [&mut a, &mut b] {
            for i in 0..3 {
                o.submitted(i, i as u64 + 1, 0.0);
            }
            o.poll(
                &[
                    running(1, "n1", 8),
                    running(2, "n2", 8),
                    running(3, "n3", 8),
                ],
                1.0,
                1,
            );
        }
        a.poll(
            &[
                running(1, "n1", 8),
                running(2, "n2", 8),
                ended(3, "FAILED", 1),
            ],
            2.0,
            2,
        );
        a.poll(
            &[
                ended(1, "COMPLETED", 10),
                ended(2, "COMPLETED", 10),
                ended(3, "FAILED", 1),
            ],
            12.0,
            12,
        );
        b.poll(
            &[
                ended(1, "COMPLETED", 20),
                ended(2, "COMPLETED", 20),
                running(3, "n3", 8),
            ],
            22.0,
            22,
        );
        b.poll(
            &[
                ended(1, "COMPLETED", 20),
                ended(2, "COMPLETED", 20),
                ended(3, "COMPLETED", 30),
            ],
            32.0,
            32,
        );
        let mut rs = vec![
            summarise(&plan, &a, &info("a", &log)),
            summarise(&plan, &b, &info("b", &log)),
        ];
        rs[1].simulated = Some(
            super::super::sim::simulate(&plan, 3, 8, "best-fit", 5.0, Default::default()).unwrap(),
        );
        // alone, each over its own completed jobs
        assert_eq!((rs[0].ajct_s, rs[0].ajct_jobs), (11.0, 2));
        assert_eq!(rs[0].largest.waits.max, 1.0);
        compare(&plan, &mut rs);
        for r in &rs {
            assert_eq!(r.ajct_jobs, 2, "{}: jobs 0 and 1 completed on both", r.name);
        }
        assert_eq!(
            (rs[0].ajct_s, rs[0].ajct_own_s, rs[0].completed),
            (11.0, 11.0, 2)
        );
        assert_eq!(rs[1].ajct_s, 21.0, "job 2 is left out on b too");
        assert_eq!((rs[1].ajct_own_s, rs[1].completed), (73.0 / 3.0, 3));
        assert_eq!(rs[1].ajct_trace_s, 21.0 * 60.0);
        assert_eq!((rs[1].waits.max, rs[1].largest.jobs), (1.0, 2));
        let s = rs[1].simulated.as_ref().unwrap();
        assert_eq!((s.ajct_s, s.ajct_jobs, s.ajct_all_s), (10.0, 2, 20.0));
        assert_eq!(s.largest.jobs, 2);
        // one window, 0 s (first submission) to 31 s (b's last end): a
        // held 24 GPUs from its poll at 1 s, 16 from its poll at 2 s to the
        // one at 12 s; b 24 GPUs from 1 s to 22 s, then 8 to the window's
        // end, of 24
        let (wa, wb) = (
            rs[0].common_window.clone().unwrap(),
            rs[1].common_window.clone().unwrap(),
        );
        assert_eq!((wa.from_s, wa.to_s), (0.0, 31.0));
        assert_eq!(wa.gpu_s, 24.0 + 16.0 * 10.0);
        assert_eq!(wb.gpu_s, 24.0 * 21.0 + 8.0 * 9.0);
        assert_eq!(wb.utilisation, 576.0 / (24.0 * 31.0));
        let t = table(&rs, 60.0);
        assert!(
            t.contains("| AJCT over the jobs completed on every cluster (wall s / scaled back by the speedup, h) | 11.0 / 0.18 (2 jobs) | 21.0 / 0.35 (2 jobs) |"),
            "{t}"
        );
        assert!(
            t.contains(
                "| AJCT over its own completed jobs (wall s) | 11.0 (2 jobs) | 24.3 (3 jobs) |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| jobs completed / submitted | 2 / 3 | 3 / 3 |"),
            "{t}"
        );
        assert!(t.contains("| GPU utilisation over the common window (first submission to last end on any cluster) | 24.7% (31 s) | 77.4% (31 s) |"), "{t}");
        let st = sim_table(&rs);
        assert!(
            st.contains("| AJCT over the jobs completed on every live cluster (wall s) | 11.0 (2 jobs) | - | 21.0 (2 jobs) | 10.0 (2 jobs) |"),
            "{st}"
        );
    }

    /// The simulator takes max `N*SIF` after each policy call, where a
    /// migration is instantaneous; the live maximum over every poll also
    /// counts polls with a migration in flight, so the report gives the
    /// live maximum over the polls with none too, and says which is which.
    #[test]
    fn max_n_sif_is_also_given_without_migrations_in_flight() {
        use super::super::plan::PlannedJob;
        use super::super::slurm::JobObs;
        let plan = Plan::example((0..5).map(|i| PlannedJob::example(i, 1, 1)).collect(), 1.0);
        let nodes: Vec<String> = (1..=4).map(|k| format!("n{k}")).collect();
        let mut o = Observer::new(&plan.jobs, nodes, 8, None);
        for i in 0..5 {
            o.submitted(i, i as u64 + 1, 0.0);
        }
        let requeued = |id, node: Option<&str>| JobObs {
            restarts: 1,
            ..match node {
                Some(n) => running(id, n, 1),
                None => ended(id, "PENDING", 0),
            }
        };
        // 1-GPU jobs on two nodes: partial 2, Phi* 1
        let s = o.poll(
            &[
                running(1, "n1", 1),
                running(2, "n2", 1),
                ended(3, "PENDING", 0),
                ended(4, "PENDING", 0),
                ended(5, "PENDING", 0),
            ],
            1.0,
            1,
        );
        assert_eq!((s.n_sif, s.in_flight), (1, false));
        // four nodes partial while job 5 waits to restart: N*SIF 3
        let s = o.poll(
            &[
                running(1, "n1", 1),
                running(2, "n2", 1),
                running(3, "n3", 1),
                running(4, "n4", 1),
                requeued(5, None),
            ],
            2.0,
            2,
        );
        assert_eq!((s.n_sif, s.in_flight), (3, true));
        let s = o.poll(
            &[
                running(1, "n1", 1),
                running(2, "n2", 1),
                ended(3, "COMPLETED", 1),
                ended(4, "COMPLETED", 1),
                requeued(5, Some("n1")),
            ],
            3.0,
            3,
        );
        assert_eq!((s.n_sif, s.in_flight), (1, false));
        let dir = std::env::temp_dir();
        let r = summarise(&plan, &o, &info("c", &dir.join("none.log")));
        assert_eq!((r.max_n_sif, r.max_n_sif_no_flight), (3, Some(1)));
        assert_eq!(
            (r.max_n_sif_under_wcc, r.max_n_sif_under_wcc_no_flight),
            (Some(3), Some(1))
        );
        let t = table(std::slice::from_ref(&r), 1.0);
        assert!(
            t.contains("| max N*SIF (every poll, migrations in flight included) | 3 |\n|   (polls with no migration in flight) | 1 |\n| max N*SIF while WCC held (every poll) | 3 |\n|   (polls with no migration in flight) | 1 |"),
            "{t}"
        );
        let sim = super::super::sim::Simulated {
            max_n_sif: 2,
            max_n_sif_under_wcc: Some(2),
            ..Default::default()
        };
        let st = sim_table(&[ClusterResult {
            simulated: Some(sim),
            ..r
        }]);
        assert!(
            st.contains("| max N*SIF, no migration in flight (live: polls with none; sim: after every policy call) | 1 | 2 |"),
            "{st}"
        );
        assert!(!st.contains("(all instants)"), "{st}");
    }
}
