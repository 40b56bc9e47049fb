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
    /// Jobs retried on all of Slurm's candidates, or sent to plain cons_tres.
    pub widened: BTreeSet<u64>,
}

impl LogFacts {
    /// Reads the log from byte `from` (its size when the replay started).
    pub fn read(path: &Path, from: u64, ours: &BTreeSet<u64>) -> Self {
        let mut f = LogFacts {
            path: Some(path.to_path_buf()),
            ..Default::default()
        };
        let text = read_from(path, from);
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
                if rest.contains(" mode 0: narrowed") {
                    *f.narrowed_run_now.entry(id).or_default() += 1;
                } else if rest.contains("retried on all candidates (rc 0)") {
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
    /// Average GPU Utilisation (eq. 17) over the metric window.
    pub agu: f64,
    /// Average Job Completion Time (eq. 16): mean of completion -
    /// submission, wall seconds; `ajct_trace_s` times the speedup.
    pub ajct_s: f64,
    pub ajct_trace_s: f64,
    /// First submission to last completion, wall seconds.
    pub makespan_s: f64,
    pub max_n_sif: u64,
    /// Largest `N * SIF` at polls where WCC held (Theorem 1: at most 2).
    pub max_n_sif_under_wcc: Option<u64>,
    /// The same over settled polls only (nothing moved since the previous
    /// poll, no migration or restart in flight).
    pub max_n_sif_under_wcc_settled: Option<u64>,
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
}

/// Computes a cluster's figures.
pub fn summarise(plan: &Plan, obs: &Observer, info: &ClusterInfo<'_>) -> ClusterResult {
    let speedup = plan.compression.speedup;
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
        completion: Completion::read(info.completion_log, &submitted, &preempted_cancel),
        ..Default::default()
    };
    let (window, name) = if obs.peak.time_s > 0.0 {
        (obs.peak, "peak")
    } else {
        (obs.busy, "busy")
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
    r.peak_s = obs.peak.time_s;
    r.busy_s = obs.busy.time_s;
    r.max_n_sif = obs.max_n_sif;
    r.max_n_sif_under_wcc = obs.max_n_sif_wcc;
    r.max_n_sif_under_wcc_settled = obs.max_n_sif_wcc_settled;

    let mut jct = Vec::new();
    let mut waits = Vec::new();
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
                jct.push(end - sub);
            }
            first_submit = first_submit.min(sub);
            last_end = last_end.max(end);
        }
        if let (Some(sub), Some(start)) = (j.submit_s, j.first_start_s()) {
            waits.push((plan.jobs[i].total_gpus(), start - sub));
        }
    }
    r.ajct_s = if jct.is_empty() {
        0.0
    } else {
        jct.iter().sum::<f64>() / jct.len() as f64
    };
    r.ajct_trace_s = r.ajct_s * speedup;
    r.makespan_s = if last_end > first_submit {
        last_end - first_submit
    } else {
        0.0
    };
    r.waits = Percentiles::of(waits.iter().map(|w| w.1).collect());
    r.largest = largest_waits(&plan_gpus(plan), &waits);

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
    if obs.state_file.is_some() {
        r.node_check = Some(node_check(obs, info.log.as_ref(), &ours));
    }
    r
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
            let narrowed = l.narrowed_run_now.get(&id).copied().unwrap_or(0) as usize;
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
            if let Some(n) = r.max_n_sif_under_wcc_settled.filter(|&n| n > 2) {
                f.push(format!(
                    "{}: N*SIF reached {n} > 2 at a settled instant where WCC held",
                    r.name
                ));
            }
        }
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
    row("max N*SIF", &|r| r.max_n_sif.to_string());
    row("max N*SIF while WCC held", &|r| opt(r.max_n_sif_under_wcc));
    row("  (settled instants)", &|r| {
        opt(r.max_n_sif_under_wcc_settled)
    });
    row("AJCT (wall s / trace h)", &|r| {
        format!("{:.1} / {:.2}", r.ajct_s, r.ajct_s * speedup / 3600.0)
    });
    row("AGU", &|r| format!("{:.1}%", 100.0 * r.agu));
    row("migrations (jobs)", &|r| {
        format!("{} ({})", r.migrations, r.migrated_jobs)
    });
    row("preemptions", &|r| r.preemptions.to_string());
    row("wait p50 / p90, all (wall s)", &|r| {
        format!("{:.1} / {:.1}", r.waits.p50, r.waits.p90)
    });
    row("wait p50 / p90, largest (wall s)", &|r| {
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

/// The JSON report.
#[derive(Serialize)]
pub struct Report<'a> {
    pub trace: &'a str,
    pub plan: &'a Plan,
    pub clusters: &'a [ClusterResult],
    pub checks: Vec<String>,
    pub wall_s: f64,
}

/// `report.md`.
pub fn markdown(
    trace: &str,
    plan: &Plan,
    results: &[ClusterResult],
    checks: &[String],
    wall_s: f64,
) -> String {
    let c = &plan.compression;
    let mut s = String::new();
    let _ = writeln!(s, "# compass replay\n");
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
    s.push_str(&table(results, c.speedup));
    s.push('\n');
    if checks.is_empty() {
        s.push_str("Checks: all passed (every job completed exactly once, or was cancelled by compass-budgetd as a non-resumable preemption victim; compass jobs ran only on the engine's nodes; N*SIF <= 2 while WCC held; compass AFR below stock).\n\n");
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

/// How each figure is defined (the simulator's definitions:
/// `compass-core/src/sim/mod.rs` `SimResult`, `compass-core/src/sim/stats.rs`).
pub const DEFINITIONS: &str = "## Definitions

Same definitions as the simulator (`compass-core/src/sim/mod.rs`, `SimResult`; paper Section 5.5), on observed Slurm state polled about once a second (the state seen at a poll holds until the next):

- **N*SIF** = `Phi_pi - Phi*` (eq. 2 times N): partial nodes (some but not all GPUs allocated, from `scontrol show job -d`) minus `Phi*`, the fewest partial nodes any packing of the running instances could have (`compass_core::metric::phi_star`, exact).
- **AFR** (eq. 15): time average of `SIF = N*SIF / N` over `T_peak`, the time at least one replayed job waits in the queue (eq. 14); over the time any job runs or waits when the queue never was non-empty (`metric window`).
- **AGU** (eq. 17): time average of allocated GPUs / all GPUs over the same window.
- **AJCT** (eq. 16): mean of completion minus submission over completed jobs, wall seconds (times the speedup: trace time). Queueing, restarts and checkpoint losses are included, as migrations are charged in the simulator.
- **max N*SIF while WCC held**: over polls where the Workload Composition Condition (eq. 9, `compass_core::metric::wcc_holds`) held for the running instances; Theorem 1 promises at most 2. *Settled* polls: nothing moved since the previous poll and no migration or requeued job is in flight (the paper's instants are after Compact).
- **migrations**: requeues the select plugin carried out (its `migration of job N: requeued` log lines); **preemptions**: the other requeues Slurm counted (`Restarts`), i.e. by the budget service.
- **waits**: first start minus submission; percentiles nearest-rank (`compass-core/src/sim/stats.rs`); *largest*: the top 5% of jobs by total GPUs `w x g` (ties included).
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
[t] select/cons_tres_compass: job_test job 99 mode 0: narrowed 16 -> 1 nodes\n",
        )
        .unwrap();
        let f = LogFacts::read(&p, 0, &BTreeSet::from([5, 6, 7]));
        assert_eq!(f.narrowed_run_now, BTreeMap::from([(5, 1)]));
        assert_eq!(f.migrations, BTreeMap::from([(5, 1)]));
        assert_eq!(f.widened, BTreeSet::from([6, 7]));
        std::fs::remove_dir_all(&dir).unwrap();
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
}
