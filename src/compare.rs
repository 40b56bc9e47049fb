//! `compass compare`: every policy side by side on one trace.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use compass_core::placement::POLICY_NAMES;
use compass_core::sim::{QueuePolicy, SimResult};
use serde::Serialize;

use crate::chart::{self, Series};
use crate::error::{CliError, Result};
use crate::simulate::{pool_row, replay, Record, POOL_COLUMNS};
use crate::tracefile::{describe, TraceArgs};

/// Replay a trace under every policy side by side; print and write a
/// markdown table, a JSON file of all results and a PNG chart of N*SIF and
/// utilisation over time per queue policy.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub trace: TraceArgs,

    /// Policies to compare (comma-separated); all by default.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(POLICY_NAMES))]
    pub policies: Vec<String>,

    /// Queue policies to run (comma-separated), one table and chart each.
    #[arg(long, value_delimiter = ',', default_value = "fifo", value_parser = PossibleValuesParser::new(QueuePolicy::NAMES))]
    pub queue: Vec<String>,

    /// Directory for compare.md, compare.json and `timeseries-<queue>.png`.
    #[arg(long, default_value = "compass-compare", value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Serialize)]
struct Outcome {
    policy: String,
    queue: QueuePolicy,
    wall_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<SimResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = args.trace.load()?;
    let policies: Vec<String> = if args.policies.is_empty() {
        POLICY_NAMES.iter().map(|s| s.to_string()).collect()
    } else {
        args.policies.clone()
    };
    let queues: Vec<QueuePolicy> = args
        .queue
        .iter()
        .map(|q| QueuePolicy::parse_name(q))
        .collect::<std::result::Result<_, _>>()?;
    std::fs::create_dir_all(&args.out).map_err(|e| CliError::io(args.out.display(), e))?;
    let header = describe(&loaded);
    eprintln!("{header}");
    let mut outcomes = Vec::new();
    let mut md = format!("# compass compare\n\n{header}\n\n");
    let mut charts = Vec::new();
    for &queue in &queues {
        let mut series = Vec::new();
        let mut rows = Vec::new();
        for policy in &policies {
            match replay(
                &loaded,
                &args.trace,
                policy,
                queue,
                Record {
                    timeseries: true,
                    jobs: false,
                },
            ) {
                Ok((mut r, wall_s)) => {
                    series.push(Series::from_samples(policy, &r.timeseries));
                    r.timeseries.clear();
                    rows.push((policy.clone(), Ok((r.clone(), wall_s))));
                    outcomes.push(Outcome {
                        policy: policy.clone(),
                        queue,
                        wall_s,
                        result: Some(r),
                        error: None,
                    });
                }
                Err(e) => {
                    tracing::info!(policy = %policy, error = %e, "policy failed");
                    rows.push((policy.clone(), Err(e.to_string())));
                    outcomes.push(Outcome {
                        policy: policy.clone(),
                        queue,
                        wall_s: 0.0,
                        result: None,
                        error: Some(e.to_string()),
                    });
                }
            }
        }
        let table = markdown(queue, &rows);
        println!("{table}");
        md.push_str(&table);
        let png = args.out.join(format!("timeseries-{}.png", queue.name()));
        if !series.is_empty() {
            let file = args
                .trace
                .trace
                .file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let title = format!(
                "{file} ({} queue, {} nodes)",
                queue.name(),
                loaded.nodes.label()
            );
            let labelled = chart::draw(&png, &title, &series)?;
            let name = png
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let _ = writeln!(
                md,
                "![N*SIF and utilisation over time, {} queue]({name})\n",
                queue.name()
            );
            if !labelled {
                let _ = writeln!(md, "{}\n", chart::legend_text(&series));
            }
            charts.push(png);
        }
    }
    let md_path = args.out.join("compare.md");
    std::fs::write(&md_path, &md).map_err(|e| CliError::io(md_path.display(), e))?;
    let json_path = args.out.join("compare.json");
    let json =
        serde_json::to_string_pretty(&outcomes).map_err(|e| CliError::Failed(e.to_string()))?;
    std::fs::write(&json_path, json).map_err(|e| CliError::io(json_path.display(), e))?;
    eprintln!(
        "wrote {}, {} and {} chart(s) in {}",
        md_path.display(),
        json_path.display(),
        charts.len(),
        args.out.display()
    );
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.error.is_some()).collect();
    if !failed.is_empty() {
        let names: Vec<String> = failed
            .iter()
            .map(|o| format!("{} ({})", o.policy, o.queue.name()))
            .collect();
        return Err(CliError::Failed(format!(
            "{} run(s) failed: {}",
            failed.len(),
            names.join(", ")
        )));
    }
    Ok(())
}

type Row = (String, std::result::Result<(SimResult, f64), String>);

/// On a mixed cluster: each policy's figures per pool.
fn pools_markdown(s: &mut String, rows: &[Row]) {
    if !rows
        .iter()
        .any(|(_, r)| r.as_ref().is_ok_and(|(x, _)| x.pools.len() > 1))
    {
        return;
    }
    let _ = writeln!(
        s,
        "Per pool:\n\n| policy | {} |\n|---|---|{}",
        POOL_COLUMNS.join(" | "),
        "---:|".repeat(POOL_COLUMNS.len() - 1)
    );
    for (policy, r) in rows {
        let Ok((x, _)) = r else { continue };
        for p in &x.pools {
            let _ = writeln!(s, "| {policy} | {} |", pool_row(p).join(" | "));
        }
    }
    s.push('\n');
}

/// The markdown table of one queue policy. AJCT gain is relative to
/// best-fit when it ran.
fn markdown(queue: QueuePolicy, rows: &[Row]) -> String {
    let base = rows.iter().find_map(|(p, r)| match r {
        Ok((x, _)) if p == "best-fit" => Some(x.ajct_s),
        _ => None,
    });
    let mut s = format!("## {} queue\n\n", queue.name());
    s.push_str(
        "| policy | nodes | jobs | AFR | 2/N | AJCT (s) | AJCT vs best-fit | AGU | max N*SIF | max N*SIF under WCC | \
         over bound: events, s (by choice) | WCC coverage | migrations/job | wait p50 (s) | wait p99 (s) | whole-node wait p50 (s) | whole-node wait p99 (s) | backfilled | wall (s) |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (policy, r) in rows {
        match r {
            Ok((x, wall)) => {
                let gain = match base {
                    Some(b) if b > 0.0 => format!("{:+.2}%", (b - x.ajct_s) / b * 100.0),
                    _ => "-".into(),
                };
                let wcc = x
                    .max_n_sif_under_wcc
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into());
                let over = format!(
                    "{}, {:.0} ({}, {:.0})",
                    x.over_bound_events,
                    x.over_bound_s,
                    x.over_bound_events_held,
                    x.over_bound_held_s
                );
                let _ = writeln!(
                    s,
                    "| {policy} | {} | {} | {:.5} | {:.5} | {:.1} | {gain} | {:.4} | {} | {wcc} | {over} | {:.4} | {:.4} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {:.2} |",
                    x.nodes,
                    x.jobs,
                    x.afr,
                    crate::simulate::bound_afr(x),
                    x.ajct_s,
                    x.agu,
                    x.max_n_sif,
                    x.wcc_coverage,
                    x.migrations_per_job,
                    x.waits.overall.p50,
                    x.waits.overall.p99,
                    x.waits.whole_node.p50,
                    x.waits.whole_node.p99,
                    x.backfilled,
                    wall
                );
            }
            Err(e) => {
                let _ = writeln!(
                    s,
                    "| {policy} | failed: {} ||||||||||||||||||",
                    e.replace('|', "/")
                );
            }
        }
    }
    s.push_str(
        "\nAJCT vs best-fit: positive = shorter mean completion than best-fit. \
         2/N: the AFR Theorem 1 allows under WCC (2 per pool on a mixed cluster: 2P/N).\n\n",
    );
    pools_markdown(&mut s, rows);
    s
}
