//! Options shared by the replay subcommands, and trace loading.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use compass_core::model::ClusterSpec;
use compass_core::placement::compass::SlottedPass;
use compass_core::placement::PolicyOptions;
use compass_core::sim::{size_cluster, Sizing};
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
    #[arg(long, default_value_t = 0.9, conflicts_with = "nodes")]
    pub eta: f64,

    /// Use exactly N nodes instead of sizing by --eta.
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,

    /// GPUs per node: 1, 2, 4 or 8.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,

    /// Seconds added to a job's completion each time it is migrated (once per
    /// scheduling event, however many of its instances move).
    #[arg(long, default_value_t = 8.0, value_name = "SECONDS")]
    pub migration_cost: f64,

    /// With backfill: waiting jobs examined behind the blocked head per pass.
    #[arg(long, default_value_t = 1000, value_name = "JOBS")]
    pub backfill_depth: usize,

    /// Round length of the `defrag` baseline, seconds.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub defrag_interval: f64,

    /// COMPASS experiments: never let an instance overflow outside its ABS
    /// place (the paper's design; 1-GPU jobs may then wait on small clusters).
    #[arg(long)]
    pub compass_no_overflow: bool,

    /// COMPASS experiments: run the paper's literal slotted pass of Compact
    /// (Section 4.3.4) instead of our correction.
    #[arg(long)]
    pub compass_paper_compact: bool,

    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A loaded trace with the cluster to replay it on.
pub struct Loaded {
    pub path: String,
    pub trace: Trace,
    pub spec: ClusterSpec,
    pub sizing: Option<Sizing>,
}

impl TraceArgs {
    pub fn policy_options(&self) -> PolicyOptions {
        let mut opts = PolicyOptions {
            defrag_interval_s: self.defrag_interval,
            ..PolicyOptions::default()
        };
        opts.compass.overflow = !self.compass_no_overflow;
        if self.compass_paper_compact {
            opts.compass.slotted_pass = SlottedPass::Paper;
        }
        opts
    }

    pub fn load(&self) -> Result<Loaded> {
        let path = self.trace.display().to_string();
        let format = self
            .format
            .as_deref()
            .map(TraceFormat::parse_name)
            .transpose()?;
        let file = File::open(&self.trace).map_err(|e| CliError::io(&path, e))?;
        let opts = ReadOptions {
            format,
            gpus_per_node: self.gpus_per_node,
        };
        let trace = trace::read(BufReader::new(file), &path, &opts)?;
        if trace.jobs.is_empty() {
            return Err(CliError::Usage(format!(
                "{path}: the trace has no jobs to replay"
            )));
        }
        let (nodes, sizing) = match self.nodes {
            Some(n) => (n, None),
            None => {
                let s = size_cluster(&trace.jobs, self.eta, self.gpus_per_node)?;
                (s.nodes, Some(s))
            }
        };
        let spec = ClusterSpec::new(nodes, self.gpus_per_node)?;
        tracing::info!(
            trace = %path,
            format = trace.format.name(),
            jobs = trace.jobs.len(),
            skipped = trace.skipped_total(),
            nodes,
            "trace loaded"
        );
        Ok(Loaded {
            path,
            trace,
            spec,
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
