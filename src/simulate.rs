//! `compass simulate`: replay a trace under one placement policy.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::builder::PossibleValuesParser;
use compass_core::placement::POLICY_NAMES;
use compass_core::sim::{
    simulate_mixed, JobOutcome, PoolResult, QueuePolicy, Sample, SimConfig, SimResult, Sizing,
};
use serde::Serialize;

use crate::error::{CliError, Result};
use crate::policy::csv_error;
use crate::progress::Progress;
use crate::tracefile::{describe, Loaded, TraceArgs};

/// Replay a trace under one placement policy and print its metrics.
///
/// AFR, AGU and WCC coverage average over the time the queue is non-empty
/// (paper Section 5.5); AJCT includes queueing and migration costs.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub trace: TraceArgs,

    /// Placement policy.
    #[arg(long, default_value = "compass", value_parser = PossibleValuesParser::new(POLICY_NAMES))]
    pub policy: String,

    /// Queue policy: strict FIFO with head-of-line blocking, or FIFO with
    /// backfill that never delays the head's reservation. Not with
    /// --budgets: the policy simulator runs its own queue (fair-share
    /// order, a greedy pass or, with --backfill reserve, Slurm's backfill
    /// reservations in GPU counts; docs/policy-simulator.md).
    #[arg(long, default_value = "fifo", conflicts_with = "budgets",
          value_parser = PossibleValuesParser::new(QueuePolicy::NAMES))]
    pub queue: String,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Write the time series (N*SIF, utilisation, empty nodes, ...) as CSV.
    #[arg(long, value_name = "FILE")]
    pub timeseries: Option<PathBuf>,

    /// Write every job's outcome as CSV, in submission order: submission,
    /// first start, completion, wait, completion time (AJCT is their
    /// mean), shape and migration charges. Compare two policies job by job
    /// by running each with its own file.
    #[arg(long, value_name = "FILE")]
    pub jobs_out: Option<PathBuf>,

    #[command(flatten, next_help_heading = "Policy simulator (with --budgets)")]
    pub budgets: crate::policy::PolicyArgs,
}

/// The JSON object printed by `--json`: the simulator's result plus the run.
#[derive(Serialize)]
pub struct Report<'a> {
    pub trace: &'a str,
    pub format: &'a str,
    pub skipped_rows: u64,
    pub sizing: Option<&'a Sizing>,
    /// Wall-clock seconds of the replay (trace reading excluded).
    pub wall_s: f64,
    #[serde(flatten)]
    pub result: &'a SimResult,
}

/// What a replay keeps beyond its figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct Record {
    /// One sample per event instant ([`SimResult::timeseries`]).
    pub timeseries: bool,
    /// Every job's outcome ([`SimResult::job_outcomes`]).
    pub jobs: bool,
}

/// Replays `loaded` under `policy`, timing it.
pub fn replay(
    loaded: &Loaded,
    args: &TraceArgs,
    policy: &str,
    queue: QueuePolicy,
    record: Record,
) -> Result<(SimResult, f64)> {
    let mut cfg = SimConfig::new(loaded.spec);
    cfg.queue = queue;
    cfg.migration = args.migration()?;
    cfg.backfill_depth = args.backfill_depth;
    cfg.record_timeseries = record.timeseries;
    cfg.record_jobs = record.jobs;
    let label = format!("{policy} ({})", queue.name());
    let mut progress = Progress::new(&label, loaded.trace.jobs.len() as u64, args.quiet);
    let started = Instant::now();
    let result = simulate_mixed(
        policy,
        &loaded.trace.jobs,
        &loaded.nodes,
        &cfg,
        &args.policy_options(),
        &mut progress,
    );
    progress.finish();
    let wall = started.elapsed().as_secs_f64();
    Ok((
        result.map_err(|e| CliError::Failed(format!("policy `{policy}`: {e}")))?,
        wall,
    ))
}

pub fn run(args: Args) -> Result<()> {
    let queue = QueuePolicy::parse_name(&args.queue)?;
    let loaded = args.trace.load()?;
    if args.budgets.budgets.is_some() {
        if loaded.mixed() {
            return Err(CliError::Usage(format!(
                "--budgets replays on identical nodes only; --nodes {} is a mixed cluster",
                loaded.nodes.label()
            )));
        }
        if let Some(flag) = [
            (args.timeseries.is_some(), "--timeseries"),
            (args.jobs_out.is_some(), "--jobs-out"),
        ]
        .iter()
        .find_map(|(given, flag)| given.then_some(*flag))
        {
            return Err(CliError::Usage(format!(
                "{flag} is a placement replay's output; the policy simulator (--budgets) writes its own (--events, --json)"
            )));
        }
        return crate::policy::run(
            &loaded,
            &args.budgets,
            &args.trace,
            &args.policy,
            args.json,
            args.trace.quiet,
        );
    }
    // Opened before the replay, so a bad path fails before a long run (as
    // the policy simulator's --events).
    let jobs_out = match &args.jobs_out {
        Some(path) => Some((
            path,
            csv::Writer::from_path(path).map_err(|e| csv_error(path, e))?,
        )),
        None => None,
    };
    let record = Record {
        timeseries: args.timeseries.is_some(),
        jobs: jobs_out.is_some(),
    };
    let (mut result, wall_s) = replay(&loaded, &args.trace, &args.policy, queue, record)?;
    if let Some(path) = &args.timeseries {
        write_timeseries(path, &result.timeseries)?;
        result.timeseries.clear();
    }
    if let Some((path, out)) = jobs_out {
        write_jobs(path, out, &result.job_outcomes)?;
        result.job_outcomes.clear();
    }
    let report = Report {
        trace: &loaded.path,
        format: loaded.trace.format.name(),
        skipped_rows: loaded.trace.skipped_total(),
        sizing: loaded.sizing.as_ref(),
        wall_s,
        result: &result,
    };
    if args.json {
        let json = serde_json::to_string(&report).map_err(|e| CliError::Failed(e.to_string()))?;
        println!("{json}");
    } else {
        println!("{}", describe(&loaded));
        print!("{}", table(&report));
    }
    Ok(())
}

/// Writes the time series as CSV.
pub fn write_timeseries(path: &PathBuf, samples: &[Sample]) -> Result<()> {
    let mut out = String::from("t_s,n_sif,utilisation,empty_nodes,partial_nodes,queued,running\n");
    for s in samples {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{}",
            s.t_s, s.n_sif, s.utilisation, s.empty_nodes, s.partial_nodes, s.queued, s.running
        );
    }
    std::fs::write(path, out).map_err(|e| CliError::io(path.display(), e))
}

/// Writes every job's outcome as CSV (`--jobs-out`).
fn write_jobs(path: &Path, mut out: csv::Writer<File>, jobs: &[JobOutcome]) -> Result<()> {
    let fail = |e| csv_error(path, e);
    out.write_record([
        "job",
        "submit_s",
        "start_s",
        "end_s",
        "wait_s",
        "completion_s",
        "instances",
        "gpus",
        "migration_charges",
    ])
    .map_err(fail)?;
    for j in jobs {
        out.write_record([
            j.name.clone(),
            j.submit_s.to_string(),
            j.start_s.to_string(),
            j.end_s.to_string(),
            (j.start_s - j.submit_s).to_string(),
            (j.end_s - j.submit_s).to_string(),
            j.instances.to_string(),
            j.gpus.to_string(),
            j.migration_charges.to_string(),
        ])
        .map_err(fail)?;
    }
    out.flush().map_err(|e| CliError::io(path.display(), e))
}

/// The AFR Theorem 1 allows where WCC holds: `2/N`, and on a mixed cluster
/// 2 per pool, `2 P / N`.
pub fn bound_afr(x: &SimResult) -> f64 {
    2.0 * x.pools.len().max(1) as f64 / f64::from(x.nodes)
}

/// The human-readable table of one replay.
pub fn table(r: &Report<'_>) -> String {
    let x = r.result;
    let mut s = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(s, "  {k:<28} {v}");
    };
    row("policy", format!("{} ({} queue)", x.policy, x.queue.name()));
    if x.pools.len() > 1 {
        row(
            "nodes",
            format!(
                "{} ({} nodes, mixed: one engine per pool)",
                x.cluster, x.nodes
            ),
        );
    } else {
        row("nodes", format!("{} x {} GPUs", x.nodes, x.gpus_per_node));
    }
    let unsched = if x.unschedulable > 0 {
        format!(" ({} larger than the cluster, left out)", x.unschedulable)
    } else {
        String::new()
    };
    row("jobs", format!("{}{unsched}", x.jobs));
    row(
        "AFR",
        if x.pools.len() > 1 {
            format!(
                "{:.5} (2 per pool: 2*{}/N = {:.5})",
                x.afr,
                x.pools.len(),
                bound_afr(x)
            )
        } else {
            format!("{:.5} (2/N = {:.5})", x.afr, bound_afr(x))
        },
    );
    row("AJCT", format!("{:.1} s", x.ajct_s));
    row("AGU", format!("{:.4}", x.agu));
    row(
        "metric window",
        format!(
            "{} ({:.0} s queue non-empty of {:.0} s busy)",
            x.metric_window, x.peak_s, x.busy_s
        ),
    );
    let wcc = x
        .max_n_sif_under_wcc
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".into());
    row(
        "max N*SIF",
        format!("{} (under WCC: {wcc}; after every job event)", x.max_n_sif),
    );
    row(
        "over Theorem 1's bound",
        format!(
            "{} events, {:.0} s (WCC held, N*SIF > 2); by choice (cost rule holding jobs): {} events, {:.0} s",
            x.over_bound_events, x.over_bound_s, x.over_bound_events_held, x.over_bound_held_s
        ),
    );
    let rule = if x.payback > 0.0 {
        format!(
            "payback {} on {}, moves {}{}",
            x.payback,
            x.remaining_run.name(),
            x.move_when.name(),
            x.tidy_payback
                .map(|k| format!(" (tidy payback {k})"))
                .unwrap_or_default()
        )
    } else {
        "off (payback 0: move whenever the engine wants)".into()
    };
    row(
        "migration cost",
        format!(
            "{} s {}; cost rule {rule}",
            x.migration_cost_s,
            x.migration_charge.name()
        ),
    );
    row("WCC coverage", format!("{:.4}", x.wcc_coverage));
    row(
        "migrations",
        format!(
            "{} instances, {} costs charged ({}), {:.4} per job, {} jobs moved",
            x.migrations,
            x.migration_charges,
            x.migration_charge.name(),
            x.migrations_per_job,
            x.migrated_jobs
        ),
    );
    if x.queue == QueuePolicy::Backfill {
        row(
            "backfilled",
            format!(
                "{} jobs ({} refused to keep the head's reservation; {} reservation slips, {:.0} s in total)",
                x.backfilled, x.backfill_refused_slip, x.reservation_slips, x.reservation_slip_s
            ),
        );
    }
    row("makespan", format!("{:.0} s", x.makespan_s));
    row("wall time", format!("{:.3} s", r.wall_s));
    if x.pools.len() > 1 {
        pools_text(&mut s, &x.pools);
    }
    let _ = writeln!(
        s,
        "  queue wait (s)               {:>8} {:>10} {:>10} {:>10} {:>10}",
        "jobs", "mean", "p50", "p90", "p99"
    );
    let mut wait = |k: &str, p: &compass_core::sim::Percentiles| {
        let _ = writeln!(
            s,
            "    {k:<26} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            p.count, p.mean, p.p50, p.p90, p.p99
        );
    };
    wait("all", &x.waits.overall);
    wait("whole-node instances", &x.waits.whole_node);
    wait("sub-node instances", &x.waits.sub_node);
    for b in &x.waits.by_size {
        wait(&format!("{} GPUs", b.gpus), &b.waits);
    }
    s
}

/// The columns of the per-pool tables, `compass simulate`'s text and
/// `compass compare`'s markdown: their headers; [`pool_row`] gives a pool's
/// cells in this order. Paper Section 5.5's metrics with `N` the pool's
/// nodes; `2/N_p` is Theorem 1's AFR bound in the pool.
pub(crate) const POOL_COLUMNS: [&str; 11] = [
    "pool",
    "nodes",
    "jobs",
    "AJCT (s)",
    "AFR",
    "2/N_p",
    "AGU",
    "WCC coverage",
    "max N*SIF (under WCC)",
    "over bound events",
    "migrations",
];

/// One pool's cells of the per-pool tables (see [`POOL_COLUMNS`]).
pub(crate) fn pool_row(p: &PoolResult) -> [String; 11] {
    let wcc = p
        .max_n_sif_under_wcc
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".into());
    [
        p.name.clone(),
        p.nodes.to_string(),
        p.jobs.to_string(),
        format!("{:.1}", p.ajct_s),
        format!("{:.5}", p.afr),
        format!("{:.5}", 2.0 / f64::from(p.nodes)),
        format!("{:.4}", p.agu),
        format!("{:.4}", p.wcc_coverage),
        format!("{} ({wcc})", p.max_n_sif),
        p.over_bound_events.to_string(),
        p.migrations.to_string(),
    ]
}

/// The per-pool table of the text output: the pool's name left-aligned,
/// the figures right-aligned, each column as wide as its widest cell.
fn pools_text(s: &mut String, pools: &[PoolResult]) {
    let rows: Vec<[String; 11]> = pools.iter().map(pool_row).collect();
    let widths: Vec<usize> = (0..POOL_COLUMNS.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([POOL_COLUMNS[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    // The header names the table where the names stand, two columns
    // further left (as the queue wait table's).
    let name_w = widths[0].max("per pool".len() - 2);
    let mut line = |first: String, cells: &[&str]| {
        s.push_str(&first);
        for (c, w) in cells.iter().zip(&widths).skip(1) {
            let _ = write!(s, " {c:>w$}");
        }
        s.push('\n');
    };
    line(
        format!("  {:<w$}", "per pool", w = name_w + 2),
        &POOL_COLUMNS,
    );
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(format!("    {:<name_w$}", r[0]), &cells);
    }
}
