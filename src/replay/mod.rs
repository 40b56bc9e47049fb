//! `compass replay`: replays a window of a trace through real `sbatch` on
//! one or more live Slurm clusters at once (the same jobs at the same
//! compressed times on each), watches them, and reports AFR, `N*SIF`, AJCT,
//! AGU, migrations, preemptions and the waits of the largest jobs side by
//! side (`docs/replay.md`).
//!
//! - [`plan`]: the window, the compression and the `sbatch` options (pure);
//! - [`slurm`]: the clusters and the Slurm clients' output;
//! - [`observe`]: what each poll saw, integrated like the simulator;
//! - [`report`]: the figures, the `--check` assertions, report.md/json;
//! - [`sim`]: the simulation of the submitted jobs beside the live run,
//!   with the budget service of [`service`] when `--service-config` names it.

pub mod observe;
pub mod plan;
pub mod repeat;
pub mod report;
pub mod service;
pub mod sim;
pub mod slurm;

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufReader, IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::builder::PossibleValuesParser;
use compass_core::placement::pools::NodeGpus;
use compass_core::placement::worth::MoveWhen;
use compass_core::trace::{self, ReadOptions, TraceFormat};

use crate::error::{CliError, Result};
use observe::Observer;
use plan::{Compression, Fit, Plan, WindowSpec};
use report::{ClusterInfo, ClusterResult, LogFacts};
use slurm::{Client, ClusterArg};

/// The Venus sample of the shared traces (the default trace).
pub const DEFAULT_TRACE: &str = "../shared/traces/venus/venus_sample.csv";

/// Replay a trace window through real sbatch on live Slurm clusters, side by side.
///
/// Every cluster receives the same jobs at the same compressed times:
/// submit and run times are trace times divided by --speedup. Each job is
/// `sbatch -N w --ntasks-per-node=1 --gres=gpu:g` with an account, a time
/// limit and (where sbatch knows them) --min-runtime and --resumable; its
/// script sleeps the compressed run time resumably (checkpoints under
/// --out) and logs its completion once. The live status shows one line per
/// cluster; the report compares AFR, N*SIF, AJCT, AGU, migrations,
/// preemptions and the waits of the largest jobs, defined as the simulator
/// defines them. A cluster may mix GPU nodes: the figures are then kept per
/// pool of identical GPU nodes (same count and type), as the select plugin
/// groups them.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace file (CSV): Helios/Venus sample or canonical.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_TRACE)]
    pub trace: PathBuf,

    /// Trace format; detected from the header line when omitted.
    #[arg(long, value_parser = PossibleValuesParser::new(["venus", "canonical"]))]
    pub format: Option<String>,

    /// Virtual clusters of a Venus trace (`name,nodes` CSV) that give each
    /// job its account; by default vc_config.csv beside the trace.
    #[arg(long, value_name = "FILE")]
    pub vc_config: Option<PathBuf>,

    /// Budget tree (TOML, e.g. etc/budgets.venus.toml): every job's account
    /// must be a leaf account of it (the budget service charges it there).
    #[arg(long, value_name = "FILE")]
    pub budgets: Option<PathBuf>,

    /// Where the window opens: trace time after the first arrival (e.g. 30d,
    /// 12h, 0). The default opens on a busy stretch of the Venus sample
    /// with mixed 1/2/4/8-GPU and multi-node jobs (the sample's first week
    /// is nearly empty).
    #[arg(long, default_value = "204h", value_name = "DURATION", value_parser = parse_offset)]
    pub start: f64,

    /// Jobs to skip after --start (in arrival order).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub skip: usize,

    /// At most K jobs (with --hours: whichever ends the window first).
    #[arg(long, value_name = "K")]
    pub jobs: Option<usize>,

    /// At most H hours of trace time, from the first job of the window.
    #[arg(long, value_name = "H")]
    pub hours: Option<f64>,

    /// Trace seconds per wall second: arrivals and run times are divided by X.
    #[arg(long, default_value_t = 240.0, value_name = "X")]
    pub speedup: f64,

    /// Shortest wall run time of a job (shorter compressed runs are raised).
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = crate::policy::parse_duration)]
    pub min_run: f64,

    /// Longest wall run time of a job (longer compressed runs are cut, so
    /// a two-day job does not hold the replay for its whole compressed
    /// length); `none` for no cap.
    #[arg(long, default_value = "3m", value_name = "DURATION", value_parser = parse_cap)]
    pub max_run: Cap,

    /// Site cap of --min-runtime, in trace time (as `compass simulate`'s
    /// policy mode), before compression.
    #[arg(long, default_value = "8h", value_name = "DURATION", value_parser = crate::policy::parse_duration)]
    pub min_runtime_cap: f64,

    /// The configuration of the budget service (compass-budgetd) the
    /// replayed clusters run, in the service's own TOML
    /// (etc/compass-budgetd.toml; contrib/demo.sh writes
    /// $DEMO/budget/compass-budgetd.toml, the same on both clusters but for
    /// ports and paths). Read with the service's parser and checked before
    /// anything is submitted; compass.conf is not read. With it, each
    /// cluster's simulated columns come from the policy simulator
    /// (`compass simulate --budgets`: fair-share order and preemption, the
    /// same placement policy, move rule and costs) with the service's
    /// window_s, cycle_s, `[order]` and `[protection]`: enforce = true preempts
    /// by the protected-time rules (preempt_margin, exact_search_limit,
    /// max_actions_per_cycle, and checkpoint_interval_s as what the
    /// planner assumes of the jobs); false and "dry-run" (which acts on
    /// nothing) order the queue only. Protected time is capped at
    /// --min-runtime-cap / --speedup in wall seconds, rounded up to whole
    /// seconds as the plan rounds each job's (so no submitted protection is
    /// cut, as none is live), not at compass.conf's cap. A victim loses its
    /// run since its last checkpoint, every 1 s as the replay's job script
    /// writes them, and restarts at no further cost
    /// (--job-checkpoint-interval 1s --restart-cost 0s). The report prints
    /// the `compass simulate --budgets` command that gives each simulated
    /// column. Needs --budgets (the tree the services charge).
    #[arg(long, value_name = "FILE", requires = "budgets")]
    pub service_config: Option<PathBuf>,

    /// A cluster to replay on, repeatable: `NAME=SLURM_CONF[:STATE_FILE]`. The
    /// STATE_FILE (select.state_file of compass.conf) marks the compass
    /// cluster: its published placement is checked against Slurm's.
    #[arg(long = "cluster", value_name = "NAME=SLURM_CONF[:STATE_FILE]", value_parser = slurm::parse_cluster, required_unless_present = "nodes")]
    pub clusters: Vec<ClusterArg>,

    /// Output directory: report.md, report.json, plan.json, jobs.csv and
    /// per cluster the job script, checkpoints, Slurm logs, completion log,
    /// samples.csv, runs.csv (each run's start, end and nodes) and the
    /// slurmctld log of the replay (the cluster subdirectories are emptied
    /// first).
    #[arg(long, value_name = "DIR", default_value = "out/replay")]
    pub out: PathBuf,

    /// Time between two polls of each cluster.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = crate::policy::parse_duration)]
    pub poll: f64,

    /// Give up after this wall time (unfinished jobs are listed and
    /// cancelled); default: 3 x the expected time + 5 minutes.
    #[arg(long, value_name = "DURATION", value_parser = crate::policy::parse_duration)]
    pub timeout: Option<f64>,

    /// Assert: every job completed exactly once (jobs compass-budgetd
    /// cancelled as non-resumable preemption victims are counted apart);
    /// on compass clusters no job ran on a node the engine did not choose,
    /// and in each pool of identical GPU nodes N*SIF <= 2 whenever WCC held
    /// in that pool (settled instants), the engine active in every pool
    /// jobs ran in, no run across pools; compass's AFR below every stock
    /// cluster's. Exit non-zero with the reasons otherwise.
    #[arg(long)]
    pub check: bool,

    /// Make this share of the jobs (0 to 1) not resumable, spread evenly
    /// over the window (0.5: every second job), so placement is measured
    /// when jobs cannot move. Only where sbatch knows --resumable.
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    pub not_resumable: f64,

    /// Replay the same window R times in a row (every cluster at once in
    /// each run): OUT/run-1 ... OUT/run-R hold each run's report, and
    /// OUT/summary.md / summary.json the mean, sd, min and max of every
    /// figure, live and simulated. Needs the clusters idle between runs
    /// (the replay waits for its own jobs).
    #[arg(long, default_value_t = 1, value_name = "R")]
    pub repeat: usize,

    /// What configuration the clusters run, written at the top of every
    /// report (e.g. "placement only", "order only: compass-budgetd with
    /// enforce = false on both").
    #[arg(long, default_value = "", value_name = "TEXT")]
    pub label: String,

    /// Print the plan (and write plan.json, jobs.csv) without submitting.
    #[arg(long)]
    pub dry_run: bool,

    /// With --dry-run, in place of --cluster: plan for NODES nodes of GPUS
    /// GPUs each (`16x8`; GPUS 1, 2, 4 or 8) without asking any cluster,
    /// e.g. to make many windows' jobs.csv for `compass simulate`. The
    /// plan is the one a cluster of that shape would get.
    #[arg(long, value_name = "NODESxGPUS", requires = "dry_run", conflicts_with = "clusters", value_parser = parse_nodes)]
    pub nodes: Option<Fit>,

    /// Without a terminal: time between two status prints.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = crate::policy::parse_duration)]
    pub status_every: f64,

    /// No live status line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// An optional cap (seconds); `None` for `none`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cap(pub Option<f64>);

/// A duration, or `none`.
fn parse_cap(s: &str) -> std::result::Result<Cap, String> {
    if s.trim() == "none" {
        return Ok(Cap(None));
    }
    crate::policy::parse_duration(s).map(|v| Cap(Some(v)))
}

/// `--nodes NODESxGPUS`: at least one node of 1, 2, 4 or 8 GPUs (the
/// shapes the replay plans for).
fn parse_nodes(s: &str) -> std::result::Result<Fit, String> {
    let bad =
        || format!("`{s}`: NODESxGPUS, e.g. 16x8 (at least 1 node; 1, 2, 4 or 8 GPUs a node)");
    let (n, g) = s.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let nodes: u32 = n.trim().parse().map_err(|_| bad())?;
    let gpus_per_node: u32 = g.trim().parse().map_err(|_| bad())?;
    if nodes == 0 || !matches!(gpus_per_node, 1 | 2 | 4 | 8) {
        return Err(bad());
    }
    Ok(Fit {
        nodes,
        gpus_per_node,
    })
}

/// `0` or a positive duration.
fn parse_offset(s: &str) -> std::result::Result<f64, String> {
    if s.trim() == "0" {
        return Ok(0.0);
    }
    crate::policy::parse_duration(s)
}

fn io(path: &Path, e: std::io::Error) -> CliError {
    CliError::io(path.display(), e)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| io(path, e))
}

/// The plan of `args` for clusters that can all hold `fit`.
pub fn make_plan(args: &Args, fit: Fit) -> Result<Plan> {
    check_window_args(args)?;
    plan_window(args, fit)
}

/// Usage errors of the window flags, found before any cluster is asked.
fn check_window_args(args: &Args) -> Result<()> {
    if args.jobs.is_none() && args.hours.is_none() {
        return Err(CliError::Usage(
            "give the window's size: --jobs K and/or --hours H".into(),
        ));
    }
    if let Some(h) = args.hours {
        if !(h.is_finite() && h > 0.0) {
            return Err(CliError::Usage(format!(
                "--hours must be positive, got {h}"
            )));
        }
    }
    if args.jobs == Some(0) {
        return Err(CliError::Usage("--jobs must be at least 1".into()));
    }
    if !(0.0..=1.0).contains(&args.not_resumable) {
        return Err(CliError::Usage(format!(
            "--not-resumable is a share from 0 to 1, got {}",
            args.not_resumable
        )));
    }
    if args.repeat == 0 {
        return Err(CliError::Usage("--repeat must be at least 1".into()));
    }
    if !(args.speedup.is_finite() && args.speedup > 0.0) {
        return Err(CliError::Usage(format!(
            "--speedup must be a positive number, got {}",
            args.speedup
        )));
    }
    Ok(())
}

fn plan_window(args: &Args, fit: Fit) -> Result<Plan> {
    let path = args.trace.display().to_string();
    let format = args
        .format
        .as_deref()
        .map(TraceFormat::parse_name)
        .transpose()?;
    let file = File::open(&args.trace).map_err(|e| {
        CliError::Usage(format!(
            "{path}: {e} (give the trace with --trace; the default is the Venus sample of ../shared/traces)"
        ))
    })?;
    let tr = trace::read(
        BufReader::new(file),
        &path,
        &ReadOptions {
            format,
            gpus_per_node: fit.gpus_per_node,
        },
    )?;
    let w = WindowSpec {
        start_s: args.start,
        skip: args.skip,
        jobs: args.jobs,
        span_s: args.hours.map(|h| h * 3600.0),
    };
    let (jobs, ws, we) = plan::window(&tr.jobs, &w)?;
    let vcs = match tr.format {
        TraceFormat::Venus => {
            let vc = args
                .vc_config
                .clone()
                .unwrap_or_else(|| args.trace.with_file_name("vc_config.csv"));
            crate::policy::load_vcs(&vc)?
        }
        _ => Vec::new(),
    };
    let mut flags = plan::flags(tr.format, &jobs, &vcs, args.min_runtime_cap)?;
    plan::make_not_resumable(&mut flags, args.not_resumable);
    if let Some(b) = &args.budgets {
        check_accounts(b, &flags)?;
    }
    plan::build(
        &jobs,
        &flags,
        ws,
        we,
        fit,
        &Compression {
            speedup: args.speedup,
            min_run_s: args.min_run,
            max_run_s: args.max_run.0,
        },
    )
}

/// The budget tree must be valid, as the budget service and the policy
/// simulator validate it ([`crate::policy::load_tree`]), and every account
/// a leaf account of it.
fn check_accounts(budgets: &Path, flags: &[plan::Flags]) -> Result<()> {
    let tree = crate::policy::load_tree(budgets)?;
    // Leaves only: the tree refuses an account on an inner node.
    let known: BTreeSet<String> = tree
        .nodes()
        .iter()
        .filter_map(|n| n.account.as_ref().map(|a| a.to_lowercase()))
        .collect();
    let missing: BTreeSet<&str> = flags
        .iter()
        .filter_map(|f| f.account.as_deref())
        .filter(|a| !known.contains(&a.to_lowercase()))
        .collect();
    if !missing.is_empty() {
        return Err(CliError::Failed(format!(
            "{}: no leaf of the budget tree has the account(s) {:?} the replayed jobs use",
            budgets.display(),
            missing
        )));
    }
    Ok(())
}

/// `jobs.csv`: the replayed jobs as a canonical trace in wall seconds, so
/// `compass simulate --trace OUT/jobs.csv --nodes N` simulates exactly what
/// was submitted.
pub(crate) fn canonical_csv(plan: &Plan) -> String {
    let mut s = String::from(
        "job_id,submit_s,duration_s,num_inst,gpus_per_inst,account,min_runtime_s,resumable\n",
    );
    for j in &plan.jobs {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            j.index,
            j.submit_s,
            j.run_s,
            j.instances,
            j.gpus,
            j.account.as_deref().unwrap_or(""),
            j.min_runtime_s,
            j.resumable
        ));
    }
    s
}

/// One cluster during the replay.
struct Live {
    arg: ClusterArg,
    client: Client,
    spank: bool,
    dir: PathBuf,
    obs: Observer,
    ctld_log: Option<(PathBuf, u64)>,
    poll_errors: u64,
    /// Jobs not the replay's own found on the cluster as the run started.
    foreign_at_start: Vec<String>,
}

impl Live {
    fn completion_log(&self) -> PathBuf {
        self.dir.join("completed.log")
    }
}

/// Messages from the submitter threads.
enum Submitted {
    Ok {
        cluster: usize,
        index: usize,
        id: u64,
        t_s: f64,
    },
    Err {
        cluster: usize,
        index: usize,
        why: String,
        t_s: f64,
    },
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A cluster as found at the start: its nodes with their GPUs (CPU-only
/// nodes with 0) and SPANK support.
#[derive(Clone)]
struct Connected {
    arg: ClusterArg,
    client: Client,
    nodes: Vec<(String, NodeGpus)>,
    spank: bool,
}

impl Connected {
    /// The plan's fit on this cluster: the GPUs per node of its largest GPU
    /// nodes and how many nodes have that many (on a mixed cluster a job
    /// larger than the largest pool's nodes would never start).
    fn fit(&self) -> Fit {
        let max = self.nodes.iter().map(|(_, g)| g.gpus).max().unwrap_or(0);
        Fit {
            nodes: self.nodes.iter().filter(|(_, g)| g.gpus == max).count() as u32,
            gpus_per_node: max,
        }
    }

    /// `16 nodes x 8 GPUs`, or the pools of a mixed cluster
    /// (`8xa100: 8 nodes, 4xl40s: 4 nodes, ...`).
    fn describe(&self) -> String {
        let pools = observe::pools_of(&self.nodes);
        let cpu_only = self.nodes.iter().filter(|(_, g)| g.gpus == 0).count();
        match pools.as_slice() {
            [p] if cpu_only == 0 && p.gpu_type.is_none() => {
                format!("{} nodes x {} GPUs", p.nodes.len(), p.gpus_per_node)
            }
            _ => {
                let mut parts: Vec<String> = pools
                    .iter()
                    .map(|p| {
                        format!(
                            "pool {}: {} nodes{}",
                            p.name,
                            p.nodes.len(),
                            if p.modelled { "" } else { " (pass-through)" }
                        )
                    })
                    .collect();
                if cpu_only > 0 {
                    parts.push(format!("{cpu_only} CPU-only nodes"));
                }
                parts.join(", ")
            }
        }
    }
}

/// The GPU node table of a cluster as the comparison needs it equal: each
/// pool's GPUs per node, node count and whether it is modelled, sorted
/// (pool names and GPU types aside: the figures depend on the shapes).
fn gpu_table(c: &Connected) -> Vec<(u32, usize, bool)> {
    let mut t: Vec<(u32, usize, bool)> = observe::pools_of(&c.nodes)
        .iter()
        .map(|p| (p.gpus_per_node, p.nodes.len(), p.modelled))
        .collect();
    t.sort_unstable();
    t
}

/// The clusters must have the same GPU nodes (as many, with as many GPUs
/// each, grouped into the same pools): every cluster gets the same jobs
/// and its figures are set beside the others', and each is simulated at
/// its own size, so clusters of different sizes would compare different
/// experiments (the plan fits the smallest). A usage error otherwise.
fn check_comparable(clusters: &[Connected]) -> Result<()> {
    let Some(first) = clusters.first() else {
        return Ok(());
    };
    let want = gpu_table(first);
    for c in &clusters[1..] {
        if gpu_table(c) != want {
            return Err(CliError::Usage(format!(
                "clusters `{}` ({}) and `{}` ({}) have different GPU nodes: the replay compares clusters with the same GPU nodes (as many nodes, with as many GPUs each)",
                first.arg.name,
                first.describe(),
                c.arg.name,
                c.describe()
            )));
        }
    }
    Ok(())
}

/// Connects to every cluster.
fn connect(args: &Args) -> Result<Vec<Connected>> {
    let mut names = BTreeSet::new();
    for c in &args.clusters {
        if !names.insert(c.name.clone()) {
            return Err(CliError::Usage(format!(
                "cluster name `{}` given twice",
                c.name
            )));
        }
    }
    let mut out = Vec::new();
    for c in &args.clusters {
        if !c.slurm_conf.is_file() {
            return Err(CliError::Usage(format!(
                "--cluster {}: {} is not a file (the cluster's slurm.conf)",
                c.name,
                c.slurm_conf.display()
            )));
        }
        let client = Client {
            conf: c.slurm_conf.clone(),
        };
        let nodes = client.shape()?;
        let spank = client.has_spank()?;
        out.push(Connected {
            arg: c.clone(),
            client,
            nodes,
            spank,
        });
    }
    Ok(out)
}

/// The budget service of `--service-config` (with the tree of
/// `--budgets`), read before any cluster is asked.
fn load_service(args: &Args) -> Result<Option<service::Service>> {
    let (Some(config), Some(budgets)) = (&args.service_config, &args.budgets) else {
        return Ok(None);
    };
    service::load(config, budgets, args.min_runtime_cap, args.speedup).map(Some)
}

pub fn run(args: Args) -> Result<()> {
    let t_wall = Instant::now();
    check_window_args(&args)?;
    let service = load_service(&args)?;
    // `--nodes` (dry runs only): the shape given, no cluster asked.
    let clusters = match args.nodes {
        Some(_) => Vec::new(),
        None => connect(&args)?,
    };
    check_comparable(&clusters)?;
    let fits: Vec<Fit> = clusters.iter().map(Connected::fit).collect();
    let fit = args.nodes.unwrap_or(Fit {
        nodes: fits.iter().map(|f| f.nodes).min().unwrap_or(0),
        gpus_per_node: fits.iter().map(|f| f.gpus_per_node).min().unwrap_or(8),
    });
    if !matches!(fit.gpus_per_node, 1 | 2 | 4 | 8) {
        return Err(CliError::Failed(format!(
            "nodes with {} GPUs: the replay needs 1, 2, 4 or 8 GPUs per node",
            fit.gpus_per_node
        )));
    }
    let plan = make_plan(&args, fit)?;
    if service.is_some() {
        service::check_plan(&plan)?;
    }
    std::fs::create_dir_all(&args.out).map_err(|e| io(&args.out, e))?;
    let out = args.out.canonicalize().map_err(|e| io(&args.out, e))?;
    write(
        &out.join("plan.json"),
        &serde_json::to_string_pretty(&plan).map_err(|e| CliError::Failed(e.to_string()))?,
    )?;
    write(&out.join("jobs.csv"), &canonical_csv(&plan))?;
    let trace_name = args.trace.display().to_string();
    let summary = format!(
        "{trace_name}: {} jobs ({} too large for {} x {} GPUs left out), speedup {}, expected {:.0} s of wall time without queueing, offered load {:.2}",
        plan.jobs.len(),
        plan.skipped_too_large,
        fit.nodes,
        fit.gpus_per_node,
        plan.compression.speedup,
        plan.expected_s(),
        plan.offered_load(fit)
    );
    eprintln!("{summary}");
    for cl in &clusters {
        let (c, spank) = (&cl.arg, &cl.spank);
        eprintln!(
            "  cluster {}: {}, SLURM_CONF={}, SPANK options {}, {}",
            c.name,
            cl.describe(),
            c.slurm_conf.display(),
            if *spank { "yes" } else { "no" },
            match &c.state_file {
                Some(s) => format!("engine state {}", s.display()),
                None => "stock (no engine state)".into(),
            }
        );
    }
    if args.dry_run {
        for j in &plan.jobs {
            println!(
                "{:4} {:>12} {}x{} submit {:8.1} s run {:7.1} s account {} min-runtime {} s resumable {}",
                j.index,
                j.name,
                j.instances,
                j.gpus,
                j.submit_s,
                j.run_s,
                j.account.as_deref().unwrap_or("-"),
                j.min_runtime_s,
                j.resumable
            );
        }
        return Ok(());
    }

    let mut runs: Vec<repeat::RunResults> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut findings: Vec<String> = Vec::new();
    for k in 1..=args.repeat {
        let dir = if args.repeat == 1 {
            out.clone()
        } else {
            let d = out.join(format!("run-{k}"));
            std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
            eprintln!("run {k} of {}: {}", args.repeat, d.display());
            d
        };
        let once = replay_once(
            &args,
            &plan,
            clusters.clone(),
            &dir,
            &trace_name,
            service.as_ref(),
        )?;
        if args.repeat > 1 {
            for m in &once.failures {
                failures.push(format!("run {k}: {m}"));
            }
            for m in &once.checks {
                findings.push(format!("run {k}: {m}"));
            }
        } else {
            failures = once.failures;
        }
        runs.push(repeat::RunResults {
            run: k,
            results: once.results,
            timed_out: once.timed_out,
        });
        if once.timed_out {
            break;
        }
    }
    if args.repeat > 1 {
        write_summary(&out, &args, &trace_name, &plan, &runs, &failures, &findings)?;
    }
    if !failures.is_empty() {
        return Err(CliError::Failed(format!(
            "{}:\n- {}",
            if args.check {
                "--check failed"
            } else {
                "the replay failed"
            },
            failures.join("\n- ")
        )));
    }
    if args.check {
        println!("--check: all checks passed");
    }
    println!("total {:.0} s", t_wall.elapsed().as_secs_f64());
    Ok(())
}

/// What one run of the window gave.
struct Once {
    results: Vec<ClusterResult>,
    /// Timeouts, and with --check the failed checks.
    failures: Vec<String>,
    /// The checks that did not hold (whether or not --check asked).
    checks: Vec<String>,
    timed_out: bool,
}

/// The jobs of `jobs` (Slurm's list) that are not finished and not in
/// `ours` (the replay's own, by the ids sbatch returned), as `id (STATE)`.
fn foreign_jobs(jobs: &[slurm::JobObs], ours: &BTreeSet<u64>) -> Vec<String> {
    jobs.iter()
        .filter(|j| !ours.contains(&j.id) && !j.finished())
        .map(|j| format!("{} ({})", j.id, j.state))
        .collect()
}

/// The warning line for jobs on cluster `name` that are not the replay's.
fn foreign_warning(name: &str, foreign: &[String]) -> Option<String> {
    if foreign.is_empty() {
        return None;
    }
    let shown: Vec<&str> = foreign.iter().take(10).map(String::as_str).collect();
    Some(format!(
        "warning: {name}: {} job(s) not submitted by this replay are on the cluster: {}{}; the replay observes only its own jobs, so the GPUs these hold count as idle and the figures of {name} are not comparable",
        foreign.len(),
        shown.join(", "),
        if foreign.len() > shown.len() { ", ..." } else { "" }
    ))
}

/// One replay of the window on every cluster at once, its report in `out`.
fn replay_once(
    args: &Args,
    plan: &Plan,
    clusters: Vec<Connected>,
    out: &Path,
    trace_name: &str,
    service: Option<&service::Service>,
) -> Result<Once> {
    let t_run = Instant::now();
    let mut live = prepare(out, plan, clusters)?;
    for l in &mut live {
        // Nothing is submitted yet: every job Slurm lists unfinished is
        // another's, and the observer (which knows the replay's jobs by the
        // ids sbatch returns) will not see its GPUs.
        match l.client.jobs() {
            Ok(jobs) => {
                l.foreign_at_start = foreign_jobs(&jobs, &BTreeSet::new());
                if let Some(w) = foreign_warning(&l.arg.name, &l.foreign_at_start) {
                    eprintln!("{w}");
                }
            }
            Err(e) => eprintln!("warning: {}: cannot list its jobs: {e}", l.arg.name),
        }
    }
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let mut handles = Vec::new();
    for (k, l) in live.iter().enumerate() {
        let jobs = plan.jobs.clone();
        let client = l.client.clone();
        let spank = l.spank;
        let dir = l.dir.clone();
        let tx = tx.clone();
        let stop = stop.clone();
        handles.push(std::thread::spawn(move || {
            submitter(k, &jobs, &client, spank, &dir, t0, &tx, &stop)
        }));
    }
    drop(tx);
    let timeout = args.timeout.unwrap_or(3.0 * plan.expected_s() + 300.0);
    let timed_out = watch(&mut live, plan, args, t0, &rx, timeout);
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
    let unfinished_msgs = if timed_out {
        cancel_unfinished(&live)
    } else {
        Vec::new()
    };
    let wall_s = t0.elapsed().as_secs_f64();
    if !args.quiet {
        eprintln!("simulating the submitted jobs (jobs.csv) for the live-against-simulated table");
    }
    let results = summarise_all(plan, &live, service)?;
    let mut checks = report::check(&results);
    checks.splice(0..0, unfinished_msgs.iter().cloned());
    let md = report::markdown(trace_name, &args.label, plan, &results, &checks, wall_s);
    write(&out.join("report.md"), &md)?;
    let json = serde_json::to_string_pretty(&report::Report {
        trace: trace_name,
        label: &args.label,
        plan,
        clusters: &results,
        checks: checks.clone(),
        wall_s,
    })
    .map_err(|e| CliError::Failed(e.to_string()))?;
    write(&out.join("report.json"), &(json + "\n"))?;
    println!("{}", report::table(&results, plan.compression.speedup));
    if results.iter().any(|r| r.simulated.is_some()) {
        println!("{}", report::sim_table(&results));
    }
    println!(
        "report: {} and report.json ({:.0} s)",
        out.join("report.md").display(),
        t_run.elapsed().as_secs_f64()
    );
    let mut failures = Vec::new();
    let found = checks.clone();
    if timed_out {
        failures.push(format!(
            "timed out after {timeout:.0} s:\n{}",
            unfinished_msgs.join("\n")
        ));
    } else if args.check {
        failures = checks;
    }
    Ok(Once {
        results,
        failures,
        checks: found,
        timed_out,
    })
}

/// `summary.md` / `summary.json` of a repeated replay.
fn write_summary(
    out: &Path,
    args: &Args,
    trace_name: &str,
    plan: &Plan,
    runs: &[repeat::RunResults],
    failures: &[String],
    findings: &[String],
) -> Result<()> {
    let (md, spreads, table) = summary_md(args, trace_name, plan, runs, failures, findings);
    write(&out.join("summary.md"), &md)?;
    #[derive(serde::Serialize)]
    struct Summary<'a> {
        trace: &'a str,
        label: &'a str,
        repeats: usize,
        runs_done: usize,
        /// Runs that hit `--timeout`: left out of `clusters`' figures.
        timed_out_runs: Vec<usize>,
        not_resumable: f64,
        clusters: &'a [repeat::ClusterSpread],
        failures: &'a [String],
        checks_not_held: &'a [String],
    }
    let json = serde_json::to_string_pretty(&Summary {
        trace: trace_name,
        label: &args.label,
        repeats: args.repeat,
        runs_done: runs.len(),
        timed_out_runs: repeat::timed_out(runs),
        not_resumable: args.not_resumable,
        clusters: &spreads,
        failures,
        checks_not_held: findings,
    })
    .map_err(|e| CliError::Failed(e.to_string()))?;
    write(&out.join("summary.json"), &(json + "\n"))?;
    println!("\n{table}");
    println!(
        "summary: {} and summary.json",
        out.join("summary.md").display()
    );
    Ok(())
}

/// The text of `summary.md`, the spreads and the table: the figures over
/// the runs that finished; a run that hit `--timeout` (its jobs did not
/// all finish, so its figures are of another experiment) is left out of
/// them and named apart.
fn summary_md(
    args: &Args,
    trace_name: &str,
    plan: &Plan,
    runs: &[repeat::RunResults],
    failures: &[String],
    findings: &[String],
) -> (String, Vec<repeat::ClusterSpread>, String) {
    let counted = repeat::counted(runs);
    let timed_out = repeat::timed_out(runs);
    let spreads = repeat::spreads(&counted);
    let table = repeat::table(&spreads);
    let mut md = String::from("# compass replay, repeated\n\n");
    if !args.label.is_empty() {
        md.push_str(&format!("Configuration: **{}**.\n\n", args.label));
    }
    md.push_str(&format!(
        "Trace `{trace_name}`, window {:.2} h to {:.2} h after its first arrival, {} jobs, speedup {}, {} of {} runs done (run-1 ... run-{}: each run's report.md); {:.0}% of the jobs made not resumable. Each cell: mean ± sample sd [min, max] (n runs with the figure), over the {} run(s) that finished. `sim:` rows are the simulator on the submitted jobs, with each run's measured migration cost.\n\n",
        plan.window_trace_start_s / 3600.0,
        plan.window_trace_end_s / 3600.0,
        plan.jobs.len(),
        plan.compression.speedup,
        runs.len(),
        args.repeat,
        runs.len(),
        100.0 * args.not_resumable,
        counted.len()
    ));
    if !timed_out.is_empty() {
        let names: Vec<String> = timed_out.iter().map(|k| format!("run {k}")).collect();
        md.push_str(&format!(
            "**Timed out** (`--timeout`; the jobs that did not finish were cancelled, see its report.md): {}. Left out of every figure below: its figures are those of a run that did not finish.\n\n",
            names.join(", ")
        ));
    }
    md.push_str(&table);
    if counted.iter().flatten().any(|r| r.simulated.is_some()) {
        md.push('\n');
        // The runs share one service model (the same file, read once).
        let service = counted
            .iter()
            .flatten()
            .find_map(|r| r.simulated.as_ref()?.service.as_ref());
        let scope = report::sim_scope(
            service,
            spreads.iter().map(|c| {
                let sum = |f: &dyn Fn(&ClusterResult) -> u64| {
                    counted
                        .iter()
                        .flatten()
                        .filter(|r| r.name == c.name)
                        .map(f)
                        .sum::<u64>()
                };
                (
                    c.name.as_str(),
                    sum(&|r| r.preemptions),
                    sum(&|r| r.completion.preempted_cancelled.len() as u64),
                )
            }),
        );
        md.push_str(scope.trim_end());
        md.push('\n');
    }
    if failures.is_empty() {
        md.push_str(if args.check {
            "\nNo run failed (timeouts and --check).\n"
        } else {
            "\nNo run timed out (--check was not given: the checks below are informational).\n"
        });
    } else {
        md.push_str("\nFailures:\n");
        for f in failures {
            md.push_str(&format!("- {f}\n"));
        }
    }
    if findings.is_empty() {
        md.push_str("\nEvery check of every run held.\n");
    } else {
        md.push_str("\nChecks that did not hold:\n");
        for f in findings {
            md.push_str(&format!("- {f}\n"));
        }
    }
    (md, spreads, table)
}

/// Empties each cluster's output directory and writes its job script.
fn prepare(out: &Path, plan: &Plan, clusters: Vec<Connected>) -> Result<Vec<Live>> {
    let mut live = Vec::new();
    for Connected {
        arg,
        client,
        nodes,
        spank,
    } in clusters
    {
        let dir = out.join(&arg.name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| io(&dir, e))?;
        }
        for sub in ["ckpt", "logs"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| io(&dir, e))?;
        }
        let script = dir.join("job.sh");
        write(&script, plan::JOB_SCRIPT)?;
        set_executable(&script)?;
        let ctld_log = client.ctld_log().map(|p| {
            let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            (p, len)
        });
        live.push(Live {
            obs: Observer::with_nodes(&plan.jobs, &nodes, arg.state_file.clone()),
            arg,
            client,
            spank,
            dir,
            ctld_log,
            poll_errors: 0,
            foreign_at_start: Vec::new(),
        });
    }
    Ok(live)
}

/// Polls every cluster until every job finished everywhere (`false`) or
/// `timeout` wall seconds passed (`true`), showing the status lines.
fn watch(
    live: &mut [Live],
    plan: &Plan,
    args: &Args,
    t0: Instant,
    rx: &mpsc::Receiver<Submitted>,
    timeout: f64,
) -> bool {
    let expected = plan.expected_s();
    let total = plan.jobs.len();
    let mut status = Status::new(args.quiet, args.status_every);
    let poll = Duration::from_secs_f64(args.poll.max(0.2));
    loop {
        let tick = Instant::now();
        while let Ok(m) = rx.try_recv() {
            match m {
                Submitted::Ok {
                    cluster,
                    index,
                    id,
                    t_s,
                } => live[cluster].obs.submitted(index, id, t_s),
                Submitted::Err {
                    cluster,
                    index,
                    why,
                    t_s,
                } => live[cluster].obs.submit_failed(index, why, t_s),
            }
        }
        let clock_now = || (t0.elapsed().as_secs_f64(), unix_now());
        let lines: Vec<String> = live
            .iter_mut()
            .map(|l| {
                let client = l.client.clone();
                let (t, polled) = poll_one(&mut l.obs, || client.jobs(), clock_now);
                let head = format!("{:>10} {} / {}", l.arg.name, clock(t), clock(expected));
                match polled {
                    Ok(s) => {
                        format!(
                            "{head}  done {}/{}/{total}  queue {}  running {}  N*SIF {}{}  GPUs {:.0}%",
                            s.done,
                            l.obs.submitted_count(),
                            s.pending,
                            s.running,
                            s.n_sif,
                            if s.wcc { " (WCC)" } else { "" },
                            100.0 * s.utilisation
                        )
                    }
                    Err(e) => {
                        l.poll_errors += 1;
                        tracing::warn!(cluster = %l.arg.name, "poll failed: {e}");
                        format!("{head}  poll failed: {e}")
                    }
                }
            })
            .collect();
        status.show(&lines);
        if live.iter().all(|l| l.obs.finished_count() == total) {
            return false;
        }
        if t0.elapsed().as_secs_f64() > timeout {
            return true;
        }
        let spent = tick.elapsed();
        if spent < poll {
            std::thread::sleep(poll - spent);
        }
    }
}

/// One poll of one cluster: `query` lists its jobs (`scontrol`), then
/// `clock` gives the time of the poll (wall seconds since the replay start,
/// Unix seconds), read right after that cluster's own query returned:
/// Slurm's run times are as of that query and starts are back-dated from
/// them (`t - RunTime`), so a time read before the query, or shared with
/// a cluster polled before it, would shift this cluster's starts and ends
/// by the other queries' duration. Returns that time and the sample.
fn poll_one(
    obs: &mut Observer,
    query: impl FnOnce() -> Result<Vec<slurm::JobObs>>,
    clock: impl FnOnce() -> (f64, u64),
) -> (f64, Result<observe::Sample>) {
    let listed = query();
    let (t, now) = clock();
    (t, listed.map(|jobs| obs.poll(&jobs, t, now)))
}

/// After a timeout: one message per cluster listing the jobs that did not
/// finish; those are cancelled.
fn cancel_unfinished(live: &[Live]) -> Vec<String> {
    let mut msgs = Vec::new();
    for l in live {
        let left = l.obs.unfinished();
        if left.is_empty() {
            continue;
        }
        let ids: Vec<String> = left
            .iter()
            .filter_map(|&i| l.obs.jobs[i].slurm_id)
            .map(|id| id.to_string())
            .collect();
        let named: Vec<String> = left
            .iter()
            .map(|&i| {
                let j = &l.obs.jobs[i];
                match j.slurm_id {
                    Some(id) => format!("{i} (Slurm {id}, {} run(s))", j.runs.len()),
                    None => format!("{i} (not submitted)"),
                }
            })
            .collect();
        msgs.push(format!(
            "{}: {} job(s) did not finish: {}",
            l.arg.name,
            left.len(),
            named.join(", ")
        ));
        if !ids.is_empty() {
            let mut a = vec!["--quiet".to_string()];
            a.extend(ids);
            let _ = l.client.run("scancel", &a);
        }
    }
    msgs
}

/// Every cluster's figures (and its samples.csv).
fn summarise_all(
    plan: &Plan,
    live: &[Live],
    service: Option<&service::Service>,
) -> Result<Vec<ClusterResult>> {
    let mut results = Vec::new();
    for l in live {
        let ours: BTreeSet<u64> = l.obs.jobs.iter().filter_map(|j| j.slurm_id).collect();
        let log = match (&l.arg.state_file, &l.ctld_log) {
            (Some(_), Some((p, from))) => Some(LogFacts::read(p, *from, &ours)),
            (Some(_), None) => Some(LogFacts::default()),
            _ => None,
        };
        write_samples(&l.dir.join("samples.csv"), &l.obs)?;
        write_runs(&l.dir.join("runs.csv"), &l.obs)?;
        if let Some((p, from)) = &l.ctld_log {
            copy_log_tail(p, *from, &l.dir.join("slurmctld.log"));
        }
        results.push(report::summarise(
            plan,
            &l.obs,
            &ClusterInfo {
                name: &l.arg.name,
                slurm_conf: &l.arg.slurm_conf,
                spank: l.spank,
                completion_log: &l.completion_log(),
                log,
                poll_errors: l.poll_errors,
                foreign_at_start: l.foreign_at_start.clone(),
            },
        ));
    }
    attach_simulations(plan, &mut results, service);
    report::compare(plan, &mut results);
    Ok(results)
}

/// The paper's migration cost (wall seconds), used in the simulation when
/// the live run completed no migrated job to measure one on.
pub const ASSUMED_MIGRATION_COST_S: f64 = 8.0;

/// Simulates the submitted jobs for each cluster (compass -> `compass`,
/// stock -> `best-fit`), with the migration cost measured on the (first)
/// compass cluster: through the placement simulator, or the policy
/// simulator with the budget service the clusters ran (`service`).
fn attach_simulations(
    plan: &Plan,
    results: &mut [ClusterResult],
    service: Option<&service::Service>,
) {
    let measured = results
        .iter()
        .find(|r| r.is_compass() && r.requeue_cost.migration_requeues > 0)
        .map(|r| (r.name.clone(), r.requeue_cost.clone()));
    let (cost, source) = match measured {
        Some((name, c)) => (
            c.wall_cost_s,
            format!(
                "measured on {name}: {} migrations, {:.1} s idle between requeue and restart + {:.1} s lost, on average",
                c.migration_requeues, c.idle_mean_s, c.lost_mean_s
            ),
        ),
        None => (
            ASSUMED_MIGRATION_COST_S,
            "not measured (no completed job was migrated): the paper's 8 s".into(),
        ),
    };
    for r in results.iter_mut() {
        if r.gpus_per_node == 0 {
            // The simulator models one pool of identical nodes.
            r.simulated_skipped =
                Some("a mixed cluster: the simulator models one pool of identical nodes".into());
            continue;
        }
        let policy = sim::model_of(r.is_compass());
        // What the plugin published; the defaults where it published
        // nothing (a plugin before it, or stock).
        let mut gate = sim::Gate::default();
        if let Some(Ok(w)) = r.move_when.as_deref().map(MoveWhen::parse_name) {
            gate.move_when = w;
        }
        if let Some(k) = r.tidy_payback {
            gate.tidy_payback = k;
        }
        gate.rule_cost_s = r.rule_cost_s;
        let simulated = match service {
            Some(svc) => {
                sim::simulate_policy(plan, r.nodes, r.gpus_per_node, policy, cost, gate, svc)
            }
            None => sim::simulate(plan, r.nodes, r.gpus_per_node, policy, cost, gate),
        };
        match simulated {
            Ok(mut s) => {
                s.migration_cost_source = source.clone();
                r.simulated = Some(s);
            }
            Err(e) => eprintln!("{}: {e}", r.name),
        }
    }
}

/// Submits the plan's jobs to one cluster at their compressed times.
#[allow(clippy::too_many_arguments)]
fn submitter(
    cluster: usize,
    jobs: &[plan::PlannedJob],
    client: &Client,
    spank: bool,
    dir: &Path,
    t0: Instant,
    tx: &mpsc::Sender<Submitted>,
    stop: &AtomicBool,
) {
    let logs = dir.join("logs").display().to_string();
    let script = dir.join("job.sh").display().to_string();
    let ckpt = dir.join("ckpt").display().to_string();
    let done = dir.join("completed.log").display().to_string();
    for j in jobs {
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let left = j.submit_s - t0.elapsed().as_secs_f64();
            if left <= 0.0 {
                break;
            }
            std::thread::sleep(Duration::from_secs_f64(left.min(0.2)));
        }
        let t_s = t0.elapsed().as_secs_f64();
        let mut a = plan::sbatch_args(j, spank, &logs);
        a.extend([
            script.clone(),
            j.run_ms().to_string(),
            ckpt.clone(),
            done.clone(),
        ]);
        let msg = match client.run("sbatch", &a) {
            Ok(o) if o.status.success() => {
                let text = String::from_utf8_lossy(&o.stdout);
                match text.trim().split(';').next().unwrap_or("").parse::<u64>() {
                    Ok(id) => Submitted::Ok {
                        cluster,
                        index: j.index,
                        id,
                        t_s,
                    },
                    Err(_) => Submitted::Err {
                        cluster,
                        index: j.index,
                        why: format!("sbatch printed `{}`", text.trim()),
                        t_s,
                    },
                }
            }
            Ok(o) => Submitted::Err {
                cluster,
                index: j.index,
                why: String::from_utf8_lossy(&o.stderr).trim().to_string(),
                t_s,
            },
            Err(e) => Submitted::Err {
                cluster,
                index: j.index,
                why: e.to_string(),
                t_s,
            },
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
}

fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|e| io(path, e))
}

fn write_samples(path: &Path, obs: &Observer) -> Result<()> {
    let mut s = String::from(
        "t_s,n_sif,partial,phi_star,wcc,settled,used_gpus,utilisation,pending,running,done,completing,in_flight,fit_waiting\n",
    );
    for x in &obs.samples {
        s.push_str(&format!(
            "{:.3},{},{},{},{},{},{},{:.4},{},{},{},{},{},{}\n",
            x.t_s,
            x.n_sif,
            x.partial,
            x.phi_star,
            u8::from(x.wcc),
            u8::from(x.settled),
            x.used_gpus,
            x.utilisation,
            x.pending,
            x.running,
            x.done,
            x.completing,
            u8::from(x.in_flight),
            x.fit_waiting
        ));
    }
    write(path, &s)
}

/// One line per run of each job (a requeue starts a new run): where and
/// when it ran, to compare two replays job by job.
fn write_runs(path: &Path, obs: &Observer) -> Result<()> {
    let mut s = String::from("job,slurm_id,submit_s,run,start_s,end_s,nodes\n");
    for (i, j) in obs.jobs.iter().enumerate() {
        let id = j.slurm_id.map(|x| x.to_string()).unwrap_or_default();
        let submit = j.submit_s.map(|x| format!("{x:.2}")).unwrap_or_default();
        for (k, r) in j.runs.iter().enumerate() {
            let nodes: Vec<String> = r
                .node_gpus
                .iter()
                .map(|(n, g)| format!("{n}:{g}"))
                .collect();
            let end = r.end_s.map(|x| format!("{x:.2}")).unwrap_or_default();
            s.push_str(&format!(
                "{i},{id},{submit},{k},{:.2},{end},{}\n",
                r.start_s,
                nodes.join(";")
            ));
        }
    }
    write(path, &s)
}

/// Copies what slurmctld logged during the replay (from byte `from` on) next
/// to the cluster's other outputs. Best effort: the report reads the log
/// itself, and an unreadable log is reported there.
fn copy_log_tail(log: &Path, from: u64, to: &Path) {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = Vec::new();
    let read = std::fs::File::open(log).and_then(|mut f| {
        f.seek(SeekFrom::Start(from))?;
        f.read_to_end(&mut text)
    });
    if read.is_ok() {
        let _ = std::fs::write(to, text);
    }
}

fn clock(s: f64) -> String {
    let s = s.max(0.0) as u64;
    format!("{:02}:{:02}", s / 60, s % 60)
}

/// The live status: one line per cluster, redrawn in place on a terminal,
/// printed every `every` seconds otherwise.
struct Status {
    quiet: bool,
    tty: bool,
    every: f64,
    last: Option<Instant>,
    drawn: usize,
}

impl Status {
    fn new(quiet: bool, every: f64) -> Self {
        Self {
            quiet,
            tty: std::io::stderr().is_terminal(),
            every,
            last: None,
            drawn: 0,
        }
    }

    fn show(&mut self, lines: &[String]) {
        if self.quiet {
            return;
        }
        let mut err = std::io::stderr().lock();
        if self.tty {
            if self.drawn > 0 {
                let _ = write!(err, "\x1b[{}A", self.drawn);
            }
            for l in lines {
                let _ = writeln!(err, "\r\x1b[2K{l}");
            }
            self.drawn = lines.len();
        } else if self
            .last
            .is_none_or(|t| t.elapsed().as_secs_f64() >= self.every)
        {
            for l in lines {
                let _ = writeln!(err, "{l}");
            }
            self.last = Some(Instant::now());
        }
        let _ = err.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--budgets` is validated as the budget service and the policy
    /// simulator validate a tree (`OrgTree::build`), not only searched for
    /// the jobs' accounts: a tree with two roots, or children whose shares
    /// sum to more than their parent's, is refused although it holds every
    /// account.
    #[test]
    fn budgets_must_be_a_valid_tree_holding_every_account() {
        let dir =
            std::env::temp_dir().join(format!("compass-replay-budgets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let flags = |accounts: &[&str]| -> Vec<plan::Flags> {
            accounts
                .iter()
                .map(|a| plan::Flags {
                    account: Some(a.to_string()),
                    min_runtime_s: 0.0,
                    resumable: true,
                })
                .collect()
        };
        let leaf = |name: &str, share: f64| {
            format!(
                "[[node]]\nname = \"{name}\"\nparent = \"org\"\nshare = {share}\naccount = \"{name}\"\n\n"
            )
        };
        let root = "[[node]]\nname = \"org\"\nshare = 1.0\n\n";
        let jobs = flags(&["physics", "Chem"]);
        for (name, text, says) in [
            (
                "two-roots.toml",
                format!(
                    "{root}{}[[node]]\nname = \"physics\"\nshare = 0.5\naccount = \"physics\"\n",
                    leaf("chem", 0.5)
                ),
                "a second root",
            ),
            (
                "shares.toml",
                format!("{root}{}{}", leaf("physics", 0.7), leaf("chem", 0.6)),
                "would sum to 1.3",
            ),
        ] {
            let path = write(name, &text);
            let e = check_accounts(&path, &jobs).unwrap_err();
            assert_eq!(e.exit_code(), 1, "{e}");
            let e = e.to_string();
            assert!(e.contains(name) && e.contains(says), "{name}: {e}");
        }
        let good = write(
            "good.toml",
            &format!("{root}{}{}", leaf("physics", 0.5), leaf("chem", 0.5)),
        );
        check_accounts(&good, &jobs).unwrap();
        let e = check_accounts(&good, &flags(&["physics", "bio"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"bio\"") && e.contains("good.toml"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn cluster(name: &str, nodes: &[(u32, Option<&str>)]) -> Connected {
        Connected {
            arg: ClusterArg {
                name: name.into(),
                slurm_conf: PathBuf::from("/nonexistent/slurm.conf"),
                state_file: None,
            },
            client: Client {
                conf: PathBuf::from("/nonexistent/slurm.conf"),
            },
            nodes: nodes
                .iter()
                .enumerate()
                .map(|(k, &(g, t))| (format!("n{}", k + 1), NodeGpus::new(g, t)))
                .collect(),
            spank: false,
        }
    }

    /// The clusters get the same jobs and are set side by side, each
    /// simulated at its own size: they must have the same GPU nodes.
    #[test]
    fn clusters_with_different_gpu_nodes_are_refused() {
        let homog = |n: usize, g: u32| vec![(g, None); n];
        let a = cluster("compass", &homog(16, 8));
        check_comparable(&[a.clone(), cluster("stock", &homog(16, 8))]).unwrap();
        // CPU-only nodes and GPU types aside, the same GPU nodes
        let mut with_cpu = homog(16, 8);
        with_cpu.push((0, None));
        check_comparable(&[a.clone(), cluster("stock", &with_cpu)]).unwrap();
        let typed = vec![(8, Some("a100")); 16];
        check_comparable(&[a.clone(), cluster("stock", &typed)]).unwrap();
        for other in [homog(15, 8), homog(16, 4), {
            let mut m = homog(15, 8);
            m.push((4, None));
            m
        }] {
            let e = check_comparable(&[a.clone(), cluster("stock", &other)]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "a usage error: {e}");
            let e = e.to_string();
            assert!(
                e.contains("`compass` (16 nodes x 8 GPUs)") && e.contains("different GPU nodes"),
                "{e}"
            );
        }
    }

    /// Jobs on a cluster that are not the replay's own are invisible to
    /// the observer (it follows the ids sbatch returned): the run warns.
    #[test]
    fn jobs_that_are_not_the_replays_own_are_named_in_a_warning() {
        let job = |id: u64, state: &str| slurm::JobObs {
            id,
            state: state.into(),
            ..Default::default()
        };
        let listed = [
            job(3, "RUNNING"),
            job(4, "COMPLETED"),
            job(5, "PENDING"),
            job(6, "COMPLETING"),
            job(7, "RUNNING"),
        ];
        let f = foreign_jobs(&listed, &BTreeSet::from([7]));
        assert_eq!(f, ["3 (RUNNING)", "5 (PENDING)", "6 (COMPLETING)"]);
        let w = foreign_warning("stock", &f).unwrap();
        assert!(
            w.starts_with("warning: stock: 3 job(s) not submitted by this replay are on the cluster: 3 (RUNNING), 5 (PENDING), 6 (COMPLETING);"),
            "{w}"
        );
        assert!(w.contains("count as idle"), "{w}");
        assert_eq!(foreign_warning("stock", &[]), None);
        assert!(foreign_jobs(&[job(4, "CANCELLED")], &BTreeSet::new()).is_empty());
    }

    /// Each cluster's time is read right after its own `scontrol`
    /// returned, not once for every cluster before them: a cluster polled
    /// after a slow one would otherwise have its starts (`t - RunTime`)
    /// and ends shifted by the first one's query.
    #[test]
    fn each_cluster_is_timed_after_its_own_query() {
        use std::cell::Cell;
        let plan = [plan::PlannedJob::example(0, 1, 8)];
        let mut obs: Vec<Observer> = (0..2)
            .map(|_| Observer::new(&plan, vec!["n1".into()], 8, None))
            .collect();
        for o in &mut obs {
            o.submitted(0, 1, 0.0);
        }
        // the wall clock: each query takes 3 s
        let now = Cell::new(10.0);
        let running = || {
            vec![slurm::JobObs {
                id: 1,
                state: "RUNNING".into(),
                run_time_s: 4,
                node_gpus: [("n1".to_string(), 8)].into(),
                ..Default::default()
            }]
        };
        let mut times = Vec::new();
        for o in &mut obs {
            let query = || {
                now.set(now.get() + 3.0);
                Ok(running())
            };
            let (t, s) = poll_one(o, query, || (now.get(), now.get() as u64));
            times.push((t, s.unwrap().t_s));
        }
        assert_eq!(times, [(13.0, 13.0), (16.0, 16.0)]);
        // each started 4 s before its own query returned
        assert_eq!(obs[0].jobs[0].runs[0].start_s, 9.0);
        assert_eq!(obs[1].jobs[0].runs[0].start_s, 12.0);
        let e = poll_one(
            &mut obs[0],
            || Err(CliError::Failed("down".into())),
            || (20.0, 20),
        );
        assert_eq!(e.0, 20.0);
        assert!(e.1.is_err());
    }

    /// A run that hit `--timeout` is left out of the repeated figures
    /// (means, sd, min, max) and named apart.
    #[test]
    fn a_timed_out_run_is_left_out_of_the_summary() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let args = Cli::parse_from(["t", "--cluster", "a=/x", "--jobs", "1", "--repeat", "3"]).args;
        let plan = Plan::example(vec![plan::PlannedJob::example(0, 1, 8)], 60.0);
        let run = |k: usize, afr: f64, timed_out: bool| repeat::RunResults {
            run: k,
            results: vec![ClusterResult {
                name: "compass".into(),
                afr,
                ..Default::default()
            }],
            timed_out,
        };
        let runs = [run(1, 0.02, false), run(2, 0.04, false), run(3, 0.9, true)];
        let fails = ["run 3: timed out".to_string()];
        let (md, spreads, table) = summary_md(&args, "t.csv", &plan, &runs, &fails, &[]);
        let afr = &spreads[0]
            .figures
            .iter()
            .find(|(k, _)| k == "AFR")
            .unwrap()
            .1;
        assert_eq!((afr.n, afr.max), (2, 0.04), "run 3 is not in the figures");
        assert!(
            table.contains("| AFR | 0.0300 ± 0.0141 [0.0200, 0.0400] (n=2) |"),
            "{table}"
        );
        assert!(md.contains("3 of 3 runs done"), "{md}");
        assert!(md.contains("over the 2 run(s) that finished"), "{md}");
        assert!(md.contains("**Timed out** (`--timeout`"), "{md}");
        assert!(
            md.contains(": run 3. Left out of every figure below"),
            "{md}"
        );
        assert_eq!(repeat::timed_out(&runs), [3]);
    }
}
