//! The replay plan: which trace jobs, when (compressed), and with which
//! `sbatch` options. Pure: no Slurm, no clock.
//!
//! Rules (documented in `docs/replay.md`):
//! - window: trace jobs sorted by arrival; the window starts `--start` after
//!   the trace's first arrival (and skips `--skip` jobs from there), and ends
//!   after `--jobs K` jobs or `--hours H` of trace time, whichever comes first;
//! - compression (`--speedup X`): a job's wall submit time is its arrival
//!   offset in the window divided by X; its wall run time is its trace
//!   duration divided by X, raised to `--min-run` and cut to `--max-run`;
//! - account, `--min-runtime` and `--resumable`: from
//!   [`compass_core::sim::budgets::assign_venus`] for Venus traces (the
//!   account is the job's virtual cluster, the protected time is compressed
//!   like the run and never longer than it), from the row for canonical
//!   traces.

use compass_core::model::JobShape;
use compass_core::sim::budgets::assign_venus;
use compass_core::trace::{TraceFormat, TraceJob};
use serde::Serialize;

use crate::error::{CliError, Result};

/// Which part of the trace to replay.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowSpec {
    /// Trace seconds after the first arrival where the window opens.
    pub start_s: f64,
    /// Jobs skipped from the opening (in arrival order).
    pub skip: usize,
    /// At most this many jobs.
    pub jobs: Option<usize>,
    /// At most this much trace time (seconds) after the first job taken.
    pub span_s: Option<f64>,
}

/// How trace time becomes wall time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Compression {
    /// Trace seconds per wall second.
    pub speedup: f64,
    /// Shortest wall run time, seconds.
    pub min_run_s: f64,
    /// Longest wall run time, seconds (`None`: no cap).
    pub max_run_s: Option<f64>,
}

/// The cluster the jobs must fit (the smallest of the replayed clusters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Fit {
    pub nodes: u32,
    pub gpus_per_node: u32,
}

/// One job of the replay, identical on every cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedJob {
    /// Position in the plan (0-based), the job's name suffix in Slurm.
    pub index: usize,
    /// The trace's job id.
    pub name: String,
    pub instances: u32,
    pub gpus: u32,
    pub account: Option<String>,
    /// Trace seconds after the window opening.
    pub trace_offset_s: f64,
    pub trace_duration_s: f64,
    /// Wall seconds after the replay start.
    pub submit_s: f64,
    /// Wall run time, seconds (whole milliseconds).
    pub run_s: f64,
    /// Compressed protected time, whole seconds (0 = none).
    pub min_runtime_s: u64,
    pub resumable: bool,
    /// `sbatch --time`, whole minutes.
    pub time_limit_min: u64,
}

/// The tests' job: `index`, `instances` x `gpus` GPUs, submitted at 0 s,
/// 10 s of run (of the trace too), resumable, not protected.
#[cfg(test)]
impl PlannedJob {
    pub(crate) fn example(index: usize, instances: u32, gpus: u32) -> PlannedJob {
        PlannedJob {
            index,
            name: format!("j{index}"),
            instances,
            gpus,
            account: None,
            trace_offset_s: 0.0,
            trace_duration_s: 10.0,
            submit_s: 0.0,
            run_s: 10.0,
            min_runtime_s: 0,
            resumable: true,
            time_limit_min: 2,
        }
    }
}

impl PlannedJob {
    pub fn shape(&self) -> JobShape {
        JobShape::new(self.instances, self.gpus)
    }
    pub fn total_gpus(&self) -> u64 {
        self.shape().total_gpus()
    }
    /// Wall run time in whole milliseconds (what the batch script sleeps).
    pub fn run_ms(&self) -> u64 {
        (self.run_s * 1000.0).round() as u64
    }
}

/// The replay plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub jobs: Vec<PlannedJob>,
    /// Jobs of the window whose `w x g` cannot fit the cluster.
    pub skipped_too_large: u64,
    /// Jobs whose run was raised to `--min-run`.
    pub raised_to_min_run: u64,
    /// Jobs whose run was cut to `--max-run`.
    pub cut_to_max_run: u64,
    /// Trace seconds (since the trace's first arrival) of the window.
    pub window_trace_start_s: f64,
    pub window_trace_end_s: f64,
    pub compression: Compression,
}

/// The tests' plan: `jobs` at `speedup`, nothing skipped, raised or cut,
/// a window of 0 trace seconds, `--min-run 1s`, no `--max-run`.
#[cfg(test)]
impl Plan {
    pub(crate) fn example(jobs: Vec<PlannedJob>, speedup: f64) -> Plan {
        Plan {
            jobs,
            skipped_too_large: 0,
            raised_to_min_run: 0,
            cut_to_max_run: 0,
            window_trace_start_s: 0.0,
            window_trace_end_s: 0.0,
            compression: Compression {
                speedup,
                min_run_s: 1.0,
                max_run_s: None,
            },
        }
    }
}

impl Plan {
    /// The wall time the replay needs with no queueing at all: the latest
    /// `submit + run`.
    pub fn expected_s(&self) -> f64 {
        self.jobs
            .iter()
            .map(|j| j.submit_s + j.run_s)
            .fold(0.0, f64::max)
    }

    /// GPU-seconds of work offered per GPU-second of the cluster over the
    /// submission span (how loaded the window is).
    pub fn offered_load(&self, fit: Fit) -> f64 {
        let work: f64 = self
            .jobs
            .iter()
            .map(|j| j.run_s * j.total_gpus() as f64)
            .sum();
        let span = self.expected_s();
        let cap = f64::from(fit.nodes * fit.gpus_per_node);
        if span > 0.0 && cap > 0.0 {
            work / (span * cap)
        } else {
            0.0
        }
    }
}

/// Account, protected time (trace seconds) and resumable flag of each job.
#[derive(Clone, Debug, PartialEq)]
pub struct Flags {
    pub account: Option<String>,
    pub min_runtime_s: f64,
    pub resumable: bool,
}

/// The flags of `jobs`: Venus rows through `assign_venus` (virtual clusters
/// `vcs`, protected time capped at `min_runtime_cap_s`), canonical rows from
/// their own columns.
pub fn flags(
    format: TraceFormat,
    jobs: &[TraceJob],
    vcs: &[(String, u32)],
    min_runtime_cap_s: f64,
) -> Result<Vec<Flags>> {
    match format {
        TraceFormat::Venus => Ok(assign_venus(jobs, vcs, min_runtime_cap_s)?
            .into_iter()
            .map(|b| Flags {
                account: Some(b.account),
                min_runtime_s: b.min_runtime_s,
                resumable: b.resumable,
            })
            .collect()),
        _ => Ok(jobs
            .iter()
            .map(|j| Flags {
                account: j.account.clone(),
                min_runtime_s: j.min_runtime_s.unwrap_or(0.0).min(min_runtime_cap_s),
                resumable: j.resumable,
            })
            .collect()),
    }
}

/// Makes a `share` (0 to 1) of the jobs not resumable, spread evenly over
/// the window: job `i` when `floor((i + 1) x share) > floor(i x share)`
/// (deterministic; with 0.5, every second job). Returns how many changed.
pub fn make_not_resumable(flags: &mut [Flags], share: f64) -> usize {
    let mut changed = 0;
    for (i, f) in flags.iter_mut().enumerate() {
        let hit = ((i + 1) as f64 * share).floor() > (i as f64 * share).floor();
        if hit && f.resumable {
            f.resumable = false;
            changed += 1;
        }
    }
    changed
}

/// The jobs of the window, in arrival order (ties in file order).
pub fn window(jobs: &[TraceJob], w: &WindowSpec) -> Result<(Vec<TraceJob>, f64, f64)> {
    if !(w.start_s.is_finite() && w.start_s >= 0.0) {
        return Err(CliError::Usage(format!(
            "--start must be a duration >= 0, got {}",
            w.start_s
        )));
    }
    let mut sorted: Vec<&TraceJob> = jobs.iter().collect();
    sorted.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    let Some(first) = sorted.first().map(|j| j.submit_s) else {
        return Err(CliError::Failed("the trace has no jobs".into()));
    };
    let open = first + w.start_s;
    let rest: Vec<&TraceJob> = sorted
        .into_iter()
        .filter(|j| j.submit_s >= open)
        .skip(w.skip)
        .collect();
    let Some(begin) = rest.first().map(|j| j.submit_s) else {
        return Err(CliError::Usage(format!(
            "the window opens after the trace's last job (--start {} s, --skip {})",
            w.start_s, w.skip
        )));
    };
    let mut out = Vec::new();
    for j in rest {
        if w.jobs.is_some_and(|k| out.len() >= k) {
            break;
        }
        if w.span_s.is_some_and(|h| j.submit_s - begin >= h) {
            break;
        }
        out.push(j.clone());
    }
    let end = match w.span_s {
        Some(h) => begin + h,
        None => out.last().map(|j| j.submit_s).unwrap_or(begin),
    };
    Ok((out, begin - first, end - first))
}

/// Builds the plan from the window's jobs and their flags.
pub fn build(
    jobs: &[TraceJob],
    flags: &[Flags],
    window_start_s: f64,
    window_end_s: f64,
    fit: Fit,
    c: &Compression,
) -> Result<Plan> {
    if !(c.speedup.is_finite() && c.speedup > 0.0) {
        return Err(CliError::Usage(format!(
            "--speedup must be a positive number, got {}",
            c.speedup
        )));
    }
    if !(c.min_run_s.is_finite() && c.min_run_s >= 1.0) {
        return Err(CliError::Usage(format!(
            "--min-run must be at least 1 s, got {}",
            c.min_run_s
        )));
    }
    if let Some(m) = c.max_run_s {
        if !(m.is_finite() && m >= c.min_run_s) {
            return Err(CliError::Usage(format!(
                "--max-run ({m} s) must be at least --min-run ({} s)",
                c.min_run_s
            )));
        }
    }
    let begin = jobs.first().map(|j| j.submit_s).unwrap_or(0.0);
    let mut plan = Plan {
        jobs: Vec::new(),
        skipped_too_large: 0,
        raised_to_min_run: 0,
        cut_to_max_run: 0,
        window_trace_start_s: window_start_s,
        window_trace_end_s: window_end_s,
        compression: c.clone(),
    };
    for (j, f) in jobs.iter().zip(flags) {
        let s = j.shape;
        if s.gpus > fit.gpus_per_node || s.instances > fit.nodes {
            plan.skipped_too_large += 1;
            continue;
        }
        let raw = j.duration_s / c.speedup;
        let mut run = raw.max(c.min_run_s);
        if raw < c.min_run_s {
            plan.raised_to_min_run += 1;
        }
        if let Some(m) = c.max_run_s {
            if run > m {
                run = m;
                plan.cut_to_max_run += 1;
            }
        }
        let run = (run * 1000.0).round() / 1000.0;
        let offset = j.submit_s - begin;
        let min_runtime_s = if f.min_runtime_s > 0.0 {
            ((f.min_runtime_s / c.speedup).ceil() as u64).clamp(1, run.ceil() as u64)
        } else {
            0
        };
        plan.jobs.push(PlannedJob {
            index: plan.jobs.len(),
            name: j.name.clone(),
            instances: s.instances,
            gpus: s.gpus,
            account: f.account.clone(),
            trace_offset_s: offset,
            trace_duration_s: j.duration_s,
            submit_s: ((offset / c.speedup) * 1000.0).round() / 1000.0,
            run_s: run,
            min_runtime_s,
            resumable: f.resumable,
            time_limit_min: time_limit_min(run),
        });
    }
    if plan.jobs.is_empty() {
        return Err(CliError::Usage(format!(
            "no job of the window fits {} nodes x {} GPUs ({} too large)",
            fit.nodes, fit.gpus_per_node, plan.skipped_too_large
        )));
    }
    Ok(plan)
}

/// `sbatch --time` for a wall run of `run_s`: twice the run plus a minute
/// (checkpoint losses and restarts after migrations), in whole minutes, at
/// least 2. Backfill plans with it; the job never needs it.
/// (One rule with the simulator's `--remaining-run replay-limit`:
/// [`compass_core::sim::replay_time_limit_for`].)
pub fn time_limit_min(run_s: f64) -> u64 {
    (compass_core::sim::replay_time_limit_for(run_s) / 60.0) as u64
}

/// The `sbatch` arguments of `job` (before the script and its arguments):
/// `-N w --ntasks-per-node=1 --gres=gpu:g`, one instance of `g` GPUs per
/// node (the per-node form the select plugin maps to `w x g`; every Venus
/// job with `w > 1` has `g = G`, so no instance could share a node anyway),
/// the account, and the SPANK options when the cluster has the plugin.
pub fn sbatch_args(job: &PlannedJob, spank: bool, log_dir: &str) -> Vec<String> {
    let mut a = vec![
        "--parsable".to_string(),
        format!("--job-name=replay-{}", job.index),
        format!("--output={log_dir}/slurm-%j.out"),
        format!("--nodes={}", job.instances),
        "--ntasks-per-node=1".to_string(),
        format!("--gres=gpu:{}", job.gpus),
        format!("--time={}", job.time_limit_min),
        "--requeue".to_string(),
    ];
    if let Some(acct) = &job.account {
        a.push(format!("--account={acct}"));
    }
    if spank {
        a.push(format!("--min-runtime={}s", job.min_runtime_s));
        if job.resumable {
            a.push("--resumable".to_string());
        }
    }
    a
}

/// The batch script every replayed job runs: `script RUN_MS CKPT_DIR
/// DONE_LOG`. It "works" for RUN_MS milliseconds of its own run time,
/// appending its progress to `CKPT_DIR/$SLURM_JOB_ID` every second, so a
/// requeued (migrated or preempted) job resumes where its last checkpoint
/// was (losing at most a second). When the work is done it appends its job
/// id to DONE_LOG, unless the id is already there (a job killed after that
/// line and restarted must not complete twice). No fork per step: `read -t`
/// on a private pipe sleeps, `$EPOCHREALTIME` is the clock.
pub const JOB_SCRIPT: &str = r#"#!/bin/bash
# compass replay job: RUN_MS milliseconds of resumable work.
run_ms=$1
ckpt="$2/$SLURM_JOB_ID"
log=$3
done_ms=0
if [ -f "$ckpt" ]; then
    while read -r l; do [ -n "$l" ] && done_ms=$l; done <"$ckpt"
fi
exec 3<> <(:)
base=$done_ms
t0=${EPOCHREALTIME/./}
while [ "$done_ms" -lt "$run_ms" ]; do
    step=$((run_ms - done_ms))
    [ "$step" -gt 1000 ] && step=1000
    printf -v secs '%d.%03d' $((step / 1000)) $((step % 1000))
    read -r -t "$secs" -u 3 _ || true
    now=${EPOCHREALTIME/./}
    done_ms=$((base + (now - t0) / 1000))
    echo "$done_ms" >>"$ckpt"
done
if ! grep -qx "$SLURM_JOB_ID" "$log" 2>/dev/null; then
    echo "$SLURM_JOB_ID" >>"$log"
fi
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_jobs_made_not_resumable_is_spread_evenly() {
        let mut f: Vec<Flags> = (0..10)
            .map(|_| Flags {
                account: None,
                min_runtime_s: 0.0,
                resumable: true,
            })
            .collect();
        f[1].resumable = false;
        assert_eq!(make_not_resumable(&mut f, 0.5), 4, "job 1 already was");
        let r: Vec<bool> = f.iter().map(|x| x.resumable).collect();
        assert_eq!(
            r,
            [true, false, true, false, true, false, true, false, true, false]
        );
        let mut g = f.clone();
        assert_eq!(make_not_resumable(&mut g, 0.0), 0);
        assert_eq!(g, f);
    }

    fn tj(name: &str, submit: f64, dur: f64, w: u32, g: u32) -> TraceJob {
        TraceJob {
            name: name.into(),
            submit_s: submit,
            duration_s: dur,
            shape: JobShape::new(w, g),
            account: Some("a".into()),
            min_runtime_s: Some(dur / 2.0),
            resumable: true,
            line: 2,
        }
    }

    fn plain_flags(jobs: &[TraceJob]) -> Vec<Flags> {
        flags(TraceFormat::Canonical, jobs, &[], 8.0 * 3600.0).unwrap()
    }

    #[test]
    fn window_by_start_jobs_and_hours() {
        let jobs: Vec<TraceJob> = (0..10)
            .map(|i| tj(&format!("j{i}"), 100.0 + 600.0 * f64::from(i), 60.0, 1, 1))
            .rev()
            .collect();
        let w = WindowSpec {
            start_s: 1200.0,
            skip: 1,
            jobs: Some(3),
            span_s: None,
        };
        let (got, s, e) = window(&jobs, &w).unwrap();
        let names: Vec<&str> = got.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["j3", "j4", "j5"]);
        assert_eq!((s, e), (1800.0, 3000.0));
        let w = WindowSpec {
            start_s: 0.0,
            skip: 0,
            jobs: Some(100),
            span_s: Some(1800.0),
        };
        let (got, _, e) = window(&jobs, &w).unwrap();
        assert_eq!(got.len(), 3, "arrivals at 0, 600, 1200 s of the window");
        assert_eq!(e, 1800.0);
        let late = WindowSpec {
            start_s: 1e9,
            skip: 0,
            jobs: None,
            span_s: None,
        };
        assert!(window(&jobs, &late)
            .unwrap_err()
            .to_string()
            .contains("after the trace's last job"));
    }

    #[test]
    fn compression_min_and_max_run_and_fit() {
        let jobs = vec![
            tj("a", 1000.0, 100.0, 1, 1),
            tj("b", 1600.0, 6000.0, 2, 8),
            tj("c", 2000.0, 600_000.0, 1, 4),
            tj("big", 2100.0, 60.0, 3, 8),
        ];
        let c = Compression {
            speedup: 60.0,
            min_run_s: 5.0,
            max_run_s: Some(300.0),
        };
        let fit = Fit {
            nodes: 2,
            gpus_per_node: 8,
        };
        let p = build(&jobs, &plain_flags(&jobs), 0.0, 1100.0, fit, &c).unwrap();
        assert_eq!(p.skipped_too_large, 1, "3 x 8 GPUs on 2 nodes");
        assert_eq!((p.raised_to_min_run, p.cut_to_max_run), (1, 1));
        let a = &p.jobs[0];
        assert_eq!((a.submit_s, a.run_s, a.min_runtime_s), (0.0, 5.0, 1));
        let b = &p.jobs[1];
        assert_eq!((b.submit_s, b.run_s, b.min_runtime_s), (10.0, 100.0, 50));
        assert_eq!(b.time_limit_min, 5);
        let c3 = &p.jobs[2];
        assert_eq!(
            (c3.run_s, c3.min_runtime_s),
            (300.0, 300),
            "protection never exceeds the run"
        );
        assert!((p.expected_s() - (300.0 + 1000.0 / 60.0)).abs() < 1e-3);
        let bad = Compression {
            speedup: 0.0,
            ..c.clone()
        };
        assert!(build(&jobs, &plain_flags(&jobs), 0.0, 1.0, fit, &bad).is_err());
    }

    #[test]
    fn venus_flags_are_deterministic_and_name_based() {
        let jobs = vec![tj("394948#2", 0.0, 600.0, 1, 8), tj("1#1", 5.0, 60.0, 1, 1)];
        let vcs = vec![("vcA".to_string(), 3), ("vcB".to_string(), 1)];
        let f1 = flags(TraceFormat::Venus, &jobs, &vcs, 8.0 * 3600.0).unwrap();
        let rev: Vec<TraceJob> = jobs.iter().rev().cloned().collect();
        let f2 = flags(TraceFormat::Venus, &rev, &vcs, 8.0 * 3600.0).unwrap();
        assert_eq!(f1[0].account, f2[1].account);
        assert_eq!(f1[0].resumable, f2[1].resumable);
        // a debug job (<= 2 GPUs, <= 15 min) protects its whole duration
        assert_eq!(f1[1].min_runtime_s, 60.0);
    }

    #[test]
    fn sbatch_args_per_cluster_kind() {
        let j = PlannedJob {
            index: 7,
            name: "x".into(),
            instances: 2,
            gpus: 8,
            account: Some("vcA".into()),
            trace_offset_s: 0.0,
            trace_duration_s: 60.0,
            submit_s: 0.0,
            run_s: 12.5,
            min_runtime_s: 4,
            resumable: true,
            time_limit_min: 2,
        };
        let with = sbatch_args(&j, true, "/o/logs");
        for want in [
            "--nodes=2",
            "--ntasks-per-node=1",
            "--gres=gpu:8",
            "--account=vcA",
            "--min-runtime=4s",
            "--resumable",
            "--job-name=replay-7",
            "--output=/o/logs/slurm-%j.out",
        ] {
            assert!(with.iter().any(|a| a == want), "{want}: {with:?}");
        }
        let without = sbatch_args(&j, false, "/o/logs");
        assert!(!without
            .iter()
            .any(|a| a.starts_with("--min-runtime") || a == "--resumable"));
        assert_eq!(j.run_ms(), 12_500);
        assert_eq!(time_limit_min(400.0), 15);
    }
}
