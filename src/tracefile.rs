//! Options shared by the replay subcommands, and trace loading.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use compass_core::model::ClusterSpec;
use compass_core::placement::compass::{EndTies, SlottedPass};
use compass_core::placement::{PolicyOptions, MIN_DEFRAG_INTERVAL_S};
use compass_core::sim::{
    size_cluster, ClusterNodes, MigrationCharge, MigrationSettings, MoveWhen, RemainingRun, Sizing,
};
use compass_core::trace::{self, ReadOptions, Trace, TraceFormat};

use crate::error::{CliError, Result};

/// How to read a trace and size the cluster it replays on.
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// Trace file (CSV): canonical, Helios/Venus, or Alibaba PAI 2023 pod list.
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,

    /// Trace format; detected from the header line when omitted.
    #[arg(long, value_parser = PossibleValuesParser::new(TraceFormat::NAMES))]
    pub format: Option<String>,

    /// Size the cluster as paper eqs. 12-13: the smallest GPU level the
    /// trace's concurrent demand stays at or below for an ETA fraction of the
    /// time, in nodes, and at least the largest job.
    #[arg(long, default_value_t = 0.9, conflicts_with = "nodes", value_parser = parse_eta)]
    pub eta: f64,

    /// Use exactly these nodes instead of sizing by --eta: a node count N
    /// (N nodes of --gpus-per-node GPUs), or a mixed cluster as
    /// `COUNTxGPUS[:TYPE]` items, comma separated, e.g. 8x8:a100,4x4:l40s,2x2
    /// (8 nodes of 8 A100s, 4 of 4 L40S, 2 untyped 2-GPU nodes; GPUs per
    /// node 1, 2, 4 or 8). Each GPU count and type is a pool with its own
    /// engine, as in the select plugin; jobs are cut into instances of at
    /// most the largest node and go to any pool whose nodes hold an
    /// instance (docs/simulator.md, "Mixed clusters").
    #[arg(long, value_name = "N|SPEC", value_parser = parse_nodes)]
    pub nodes: Option<String>,

    /// GPUs per node: 1, 2, 4 or 8 (for --eta sizing and a bare --nodes N).
    #[arg(long, default_value_t = 8, value_parser = parse_gpus_per_node)]
    pub gpus_per_node: u32,

    /// Cost of one migration, added to the job's completion: a whole number
    /// with s, m, h or d (8s, 60s, 5m), a decimal number of seconds (2.5s:
    /// the costs `compass replay` measures), or a Slurm time (`M:SS`,
    /// `H:MM:SS`, `D-H[:MM[:SS]]`); 0 for none. Charged per migrated instance
    /// (the paper) unless --migration-charge per-job.
    #[arg(long, default_value = "8s", value_name = "DURATION", value_parser = parse_cost)]
    pub migration_cost: f64,

    /// The cost the cost rule weighs (--payback, --tidy-payback), when it
    /// is not --migration-cost: a live select plugin decides with its
    /// configured `select.migration_cost`, while a replay measures what a
    /// requeue really cost (its report's commands pass both). Same forms
    /// as --migration-cost.
    #[arg(long, value_name = "DURATION", value_parser = parse_cost)]
    pub rule_cost: Option<f64>,

    /// Charge --migration-cost per migrated instance (the paper's `c` per
    /// migration) or once per moved job per event (one Slurm requeue).
    #[arg(long, default_value = "per-instance", value_parser = PossibleValuesParser::new(MigrationCharge::NAMES))]
    pub migration_charge: String,

    /// A running job may be migrated only when its expected remaining run is
    /// at least PAYBACK times the migration cost after the move (the cost
    /// rule, docs/simulator.md). 0 = move whenever the engine wants (the
    /// paper's behaviour); otherwise at least 1.
    #[arg(long, default_value_t = 2.0, value_name = "PAYBACK", value_parser = parse_payback)]
    pub payback: f64,

    /// What the cost rule takes as a job's remaining run: its time limit
    /// (duration rounded up to 15m, 30m, 1h, 2h, 4h, 8h, 12h, 1d, 2d, 3d,
    /// 7d) minus its run so far, as a scheduler would know it; `oracle`,
    /// the true remaining run from the trace; or `replay-limit`, the limit
    /// `compass replay` submits with (twice the run plus a minute, whole
    /// minutes), for a replay's `jobs.csv`. Also the expected ends of
    /// --compass-end-ties.
    #[arg(long, default_value = "time-limit", value_parser = PossibleValuesParser::new(RemainingRun::NAMES))]
    pub remaining_run: String,

    /// With the cost rule on: move jobs whenever a move pays (`always`), or
    /// only while some job waits in the queue (`waiting`: a move when nobody
    /// waits lets no job start sooner; Compact repairs the layout at the
    /// next event with a waiting job), or only
    /// while a waiting job asks for no more GPUs than are free (`fits`), or
    /// only when the moves let a waiting job start (`starts`: each Compact
    /// is tried on a copy first, and made only if afterwards some queued
    /// job fits the free GPUs that did not before), or as `starts` but with
    /// tidying moves of the jobs that pay for them (`pays`: a Compact that
    /// starts nobody still moves the jobs expected, by the runs of the jobs
    /// finished so far, to run at least --tidy-payback times the migration
    /// cost after the move; the Slurm plugin's default).
    #[arg(long, default_value = "always", value_parser = PossibleValuesParser::new(MoveWhen::NAMES))]
    pub move_when: String,

    /// With --move-when pays: a move that lets no queued job start is made
    /// only for a job expected to run at least TIDY times the migration
    /// cost after it (its mean residual run over the last 1,000 finished
    /// jobs' runs, capped by its time limit).
    #[arg(long, default_value_t = compass_core::placement::worth::DEFAULT_TIDY_PAYBACK, value_name = "TIDY",
          value_parser = parse_tidy_payback)]
    pub tidy_payback: f64,

    /// With backfill: waiting jobs examined behind the blocked head per pass.
    #[arg(long, default_value_t = 1000, value_name = "JOBS")]
    pub backfill_depth: usize,

    /// Round length of the `defrag` baseline, seconds: at least 1. A
    /// replay runs at most 10,000,000 rounds (one every SECONDS while jobs
    /// run); one that needs more stops with an error.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS", value_parser = parse_defrag_interval)]
    pub defrag_interval: f64,

    /// COMPASS experiments: never let an instance overflow outside its ABS
    /// place (the paper's design; 1-GPU jobs may then wait on small clusters).
    #[arg(long)]
    pub compass_no_overflow: bool,

    /// COMPASS: a job that finds no room although its GPUs are free in
    /// total moves movable jobs of the least-used nodes aside onto other
    /// partial nodes when that lets it start (correction 12). Shortens
    /// waits under --queue fifo, lengthens them under backfill (measured:
    /// docs/results.md, "Room for the waiting job"); not in the select
    /// plugin yet.
    #[arg(long)]
    pub compass_make_room: bool,

    /// COMPASS experiments: run the paper's literal slotted pass of Compact
    /// (Section 4.3.4) instead of our correction.
    #[arg(long)]
    pub compass_paper_compact: bool,

    /// COMPASS experiments: open an empty node for an immovable job as the
    /// paper does, instead of fitting it into a partial node (correction 5).
    #[arg(long)]
    pub compass_no_pinned_fill: bool,

    /// COMPASS experiments: break Place's ties between equally good nodes by
    /// the jobs' expected ends (co-termination, correction 10; the ends are
    /// start plus time limit, or the true end with --remaining-run oracle)
    /// instead of by node index (the paper, the default).
    #[arg(long)]
    pub compass_end_ties: bool,

    /// COMPASS experiments: as --compass-end-ties, over every partial level
    /// that fits, not only the best one (unless the best fills the node).
    #[arg(long, conflicts_with = "compass_end_ties")]
    pub compass_wide_end_ties: bool,

    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A loaded trace with the cluster to replay it on.
pub struct Loaded {
    pub path: String,
    pub trace: Trace,
    /// The cluster when its nodes are alike; on a mixed cluster, all its
    /// nodes at the largest node's size (only the placement replays, which
    /// take `nodes`, run on a mixed cluster: see [`Loaded::mixed`]).
    pub spec: ClusterSpec,
    /// The cluster's nodes, pool by pool.
    pub nodes: ClusterNodes,
    pub sizing: Option<Sizing>,
}

impl Loaded {
    /// Is the cluster mixed (several pools)?
    pub fn mixed(&self) -> bool {
        self.nodes.as_homogeneous().is_none()
    }
}

impl TraceArgs {
    pub fn policy_options(&self) -> PolicyOptions {
        let mut opts = PolicyOptions {
            defrag_interval_s: self.defrag_interval,
            ..PolicyOptions::default()
        };
        opts.compass.overflow = !self.compass_no_overflow;
        opts.compass.pinned_fill = !self.compass_no_pinned_fill;
        opts.compass.make_room = self.compass_make_room;
        if self.compass_end_ties {
            opts.compass.end_ties = EndTies::CoEnd;
        }
        if self.compass_wide_end_ties {
            opts.compass.end_ties = EndTies::CoEndWide;
        }
        if self.compass_paper_compact {
            opts.compass.slotted_pass = SlottedPass::Paper;
        }
        opts
    }

    /// The migration flags, as both simulators take them
    /// ([`MigrationSettings`]; defaults `--migration-cost 8s`,
    /// `--migration-charge per-instance`, `--payback 2`, `--remaining-run
    /// time-limit`, `--move-when always`, `--tidy-payback 20`): what a
    /// migration costs, the cost rule and the gate `move_when`
    /// ([`compass_core::placement::worth`]).
    pub fn migration(&self) -> Result<MigrationSettings> {
        Ok(MigrationSettings {
            migration_cost_s: self.migration_cost,
            rule_cost_s: self.rule_cost,
            charge: MigrationCharge::parse_name(&self.migration_charge)?,
            payback: self.payback,
            remaining: RemainingRun::parse_name(&self.remaining_run)?,
            move_when: MoveWhen::parse_name(&self.move_when)?,
            tidy_payback: self.tidy_payback,
            ..MigrationSettings::default()
        })
    }

    pub fn load(&self) -> Result<Loaded> {
        let path = self.trace.display().to_string();
        let format = self
            .format
            .as_deref()
            .map(TraceFormat::parse_name)
            .transpose()?;
        let given = self
            .nodes
            .as_deref()
            .map(|n| ClusterNodes::parse(n, self.gpus_per_node))
            .transpose()?;
        let file = File::open(&self.trace).map_err(|e| CliError::io(&path, e))?;
        // Jobs are cut into instances of at most the largest node.
        let opts = ReadOptions {
            format,
            gpus_per_node: given
                .as_ref()
                .map_or(self.gpus_per_node, ClusterNodes::max_gpus),
        };
        let trace = trace::read(BufReader::new(file), &path, &opts)?;
        if trace.jobs.is_empty() {
            return Err(CliError::Failed(format!(
                "{path}: the trace has no jobs to replay"
            )));
        }
        let (nodes, sizing) = match given {
            Some(n) => (n, None),
            None => {
                let s = size_cluster(&trace.jobs, self.eta, self.gpus_per_node)?;
                let spec = ClusterSpec::new(s.nodes, self.gpus_per_node)?;
                (ClusterNodes::homogeneous(spec), Some(s))
            }
        };
        let spec = match nodes.as_homogeneous() {
            Some(spec) => spec,
            None => ClusterSpec::new(nodes.nodes(), nodes.max_gpus())?,
        };
        tracing::info!(
            trace = %path,
            format = trace.format.name(),
            jobs = trace.jobs.len(),
            skipped = trace.skipped_total(),
            nodes = %nodes.label(),
            "trace loaded"
        );
        Ok(Loaded {
            path,
            trace,
            spec,
            nodes,
            sizing,
        })
    }
}

/// One line describing the trace and the cluster.
pub fn describe(l: &Loaded) -> String {
    let mut s = format!(
        "{}: {} format, {} jobs",
        l.path,
        l.trace.format.name(),
        l.trace.jobs.len()
    );
    if l.trace.skipped_total() > 0 {
        let why: Vec<String> = l
            .trace
            .skipped
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        s.push_str(&format!(
            " ({} rows skipped: {})",
            l.trace.skipped_total(),
            why.join(", ")
        ));
    }
    match &l.sizing {
        None if l.mixed() => s.push_str(&format!(
            "; mixed cluster {} ({} nodes, {} GPUs, given)",
            l.nodes.label(),
            l.nodes.nodes(),
            l.nodes.total_gpus()
        )),
        Some(z) => s.push_str(&format!(
            "; cluster {} x {} GPUs sized by eta {} (p_eta {} GPUs, largest job {} nodes)",
            l.spec.nodes, l.spec.gpus_per_node, z.eta, z.p_eta_gpus, z.n_maxjob
        )),
        None => s.push_str(&format!(
            "; cluster {} x {} GPUs (given)",
            l.spec.nodes, l.spec.gpus_per_node
        )),
    }
    s
}

/// A number option's value: a finite decimal number.
fn number(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(format!("`{s}` is not a finite number")),
    }
}

/// `--eta`: a fraction in (0, 1] (checked here, so a bad one is a usage
/// error, exit 2, as every option below).
fn parse_eta(s: &str) -> std::result::Result<f64, String> {
    let x = number(s)?;
    if !(x > 0.0 && x <= 1.0) {
        return Err(format!("eta must be in (0, 1], got {x}"));
    }
    Ok(x)
}

/// `--gpus-per-node`: 1, 2, 4 or 8.
fn parse_gpus_per_node(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(g @ (1 | 2 | 4 | 8)) => Ok(g),
        _ => Err(format!(
            "GPUs per node must be one of 1, 2, 4 or 8, got `{s}`"
        )),
    }
}

/// `--payback`: 0 (always move) or at least 1.
fn parse_payback(s: &str) -> std::result::Result<f64, String> {
    let x = number(s)?;
    if !(x == 0.0 || x >= 1.0) {
        return Err(format!(
            "payback must be 0 (always move) or at least 1, got {x}"
        ));
    }
    Ok(x)
}

/// `--tidy-payback`: at least 0, `inf` for never tidy.
fn parse_tidy_payback(s: &str) -> std::result::Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if x.is_nan() || x < 0.0 {
        return Err(format!(
            "tidy payback must be >= 0 (inf: never tidy), got {x}"
        ));
    }
    Ok(x)
}

/// `--defrag-interval`: seconds, at least
/// [`compass_core::placement::MIN_DEFRAG_INTERVAL_S`].
fn parse_defrag_interval(s: &str) -> std::result::Result<f64, String> {
    let x = number(s)?;
    if x < MIN_DEFRAG_INTERVAL_S {
        return Err(format!(
            "the defrag round must be at least {MIN_DEFRAG_INTERVAL_S} s, got {x} s"
        ));
    }
    Ok(x)
}

/// `--nodes`: checked here so a bad spec is a usage error (exit 2); kept
/// as text, read with `--gpus-per-node` by [`TraceArgs::load`].
pub fn parse_nodes(s: &str) -> std::result::Result<String, String> {
    ClusterNodes::parse(s, 8)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// A migration cost in seconds, `0` allowed: Slurm's forms through
/// [`compass_core::duration::parse_unambiguous`] (`8s`, `5m`, `05:00`,
/// `1-02:03`), or a decimal number of seconds (`2.5s`, as a replay's
/// report gives its measured cost); a bare number other than 0, which
/// meant seconds here before, is refused with the explicit forms.
pub fn parse_cost(s: &str) -> std::result::Result<f64, String> {
    if let Some(secs) = decimal_seconds(s) {
        return Ok(secs);
    }
    compass_core::duration::parse_unambiguous(s)
        .map(|v| v as f64)
        .map_err(|e| {
            if s.contains('.') {
                format!("{e}; a decimal is taken in seconds only (`2.5s`)")
            } else {
                e.to_string()
            }
        })
}

/// `2.5s`: digits, a point, digits, then `s`.
fn decimal_seconds(s: &str) -> Option<f64> {
    let number = s.trim().strip_suffix('s')?;
    let (whole, fraction) = number.split_once('.')?;
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !(digits(whole) && digits(fraction)) {
        return None;
    }
    number.parse::<f64>().ok().filter(|x| x.is_finite())
}

#[cfg(test)]
mod tests {
    use super::parse_cost;

    #[test]
    fn migration_costs_parse_like_slurm_times() {
        for (text, secs) in [
            ("0", 0.0),
            ("8s", 8.0),
            ("60s", 60.0),
            ("5m", 300.0),
            ("90m", 5400.0),
            ("1d", 86_400.0),
            ("05:00", 300.0),
            ("01:00:00", 3600.0),
            ("1-00", 86_400.0),
            ("1-02:03", 86_400.0 + 7200.0 + 180.0),
            ("1-02:03:04", 86_400.0 + 7200.0 + 180.0 + 4.0),
            ("2.5s", 2.5),
            ("0.25s", 0.25),
            ("2.1016s", 2.1016),
        ] {
            assert_eq!(parse_cost(text), Ok(secs), "{text}");
        }
        assert!(parse_cost("1.5h").unwrap_err().contains("`2.5s`"));
        for bad in [
            "", "-5", "5x", "1:2:3:4", "abc", "inf", "NaN", "1.5h", "8", "2.5", ".5s", "2.s",
            "-2.5s", "1e3s", "2.5.1s",
        ] {
            assert!(parse_cost(bad).is_err(), "{bad}");
        }
    }
}
