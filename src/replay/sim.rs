//! The simulation of what a replay submitted: the plan's jobs (the rows of
//! `OUT/jobs.csv`, wall seconds) through the event-driven simulator on the
//! cluster's size, with the migration cost measured on the live run, so the
//! report can set each live cluster beside its own model:
//! compass -> the `compass` policy, stock -> `best-fit` (the closest model
//! of cons_tres's node choice: it packs a job onto the nodes with the
//! fewest free resources that fit). Both under backfill, as Slurm's
//! sched/backfill. A migration is charged once per moved job
//! ([`MigrationCharge::PerJob`]: one Slurm requeue restarts the whole job),
//! and counted so, as the live plugin's requeues are.
//!
//! With `--service-config` (the clusters ran a budget service,
//! [`super::service`]) the same jobs go through the policy simulator
//! instead ([`simulate_policy`]): the service's fair-share order and
//! preemptions, with the same placement policies, move rule and costs.

use compass_core::model::{ClusterSpec, JobId};
use compass_core::placement::worth::DEFAULT_TIDY_PAYBACK;
use compass_core::placement::{PlacementPolicy, PolicyOptions};
use compass_core::sim::budgets::{
    from_canonical, run_budgets, BudgetReport, BudgetSimConfig, Record, SimEvent,
};
use compass_core::sim::{
    self, EventKind, MigrationCharge, MigrationSettings, MoveWhen, Percentiles, QueuePolicy,
    RemainingRun, SimConfig,
};
use compass_core::trace::TraceJob;
use serde::Serialize;

use super::plan::Plan;
use super::report::{largest_waits, LargestWaits};
use super::service::{Service, ServiceModel};
use crate::error::{CliError, Result};

/// The simulated figures of one cluster, beside its live ones.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Simulated {
    /// `compass` or `best-fit`.
    pub policy: String,
    /// `backfill` (the placement simulator), or `fair-share` (the policy
    /// simulator's queue, with `--service-config`).
    pub queue: String,
    /// Wall seconds added to a job's completion per migration event.
    pub migration_cost_s: f64,
    /// How that cost is charged: `per-job`, once per moved job per policy
    /// call, as one Slurm requeue costs (the live plugin requeues a job
    /// once however many of its instances move).
    pub migration_charge: String,
    /// Where that cost comes from (measured on the live run, or assumed).
    pub migration_cost_source: String,
    /// The cost the simulated cost rule weighed instead (the plugin's
    /// published `select.migration_cost`); absent: the cost above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_cost_s: Option<f64>,
    /// The gate the simulated compass moved jobs under (`--move-when`):
    /// the live plugin's published `select.move_when`.
    pub move_when: String,
    /// With `pays`: the plugin's `select.tidy_payback`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tidy_payback: Option<f64>,
    pub afr: f64,
    pub max_n_sif: u64,
    /// Absent from the policy simulator, which does not measure it.
    pub max_n_sif_under_wcc: Option<u64>,
    /// The policy simulator reports the utilisation while jobs wait
    /// (`occupancy`), which is AGU when that is its metric window (some job
    /// waited); absent otherwise.
    pub agu: Option<f64>,
    /// AJCT over the jobs compared with the live clusters (`ajct_jobs` of
    /// them: those completed on every live cluster,
    /// [`super::report::compare`]), wall seconds (the plan's time
    /// scale); over every job until compared.
    pub ajct_s: f64,
    pub ajct_jobs: u64,
    /// The simulator's own AJCT, over every submitted job (`compass
    /// simulate`'s `ajct_s`).
    pub ajct_all_s: f64,
    /// Waits (first start minus submission) over the same jobs as `ajct_s`.
    pub waits: Percentiles,
    pub largest: LargestWaits,
    /// Migrations: moved jobs per policy call (a job moved in one policy
    /// call counts once, however many of its instances moved: one Slurm
    /// requeue), the simulator's `migration_charges` under
    /// [`MigrationCharge::PerJob`].
    pub migrations: u64,
    pub migrated_jobs: u64,
    /// Jobs the simulated backfill started ahead of a blocked head (absent
    /// from the policy simulator, whose queue is no backfill).
    pub backfilled: Option<u64>,
    pub makespan_s: f64,
    /// The policy simulator's preemptions (victims requeued or cancelled),
    /// beside the live budget service's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<u64>,
    /// Of those, victims cancelled (not resumable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<u64>,
    /// The budget service the policy simulator modelled
    /// (`--service-config`); absent: the placement simulator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceModel>,
    /// With the policy simulator: the arguments of `compass simulate` that
    /// give these figures from the replay's `jobs.csv` (run in its output
    /// directory), built from the very configuration simulated
    /// ([`rerun_args`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Per plan job: completion minus submission, and first start minus
    /// submission (wall seconds), for [`super::report::compare`].
    #[serde(skip)]
    pub job_jct_s: Vec<Option<f64>>,
    #[serde(skip)]
    pub job_wait_s: Vec<Option<f64>>,
}

/// The simulator's model of a live cluster: `compass` for a compass
/// cluster, `best-fit` for stock cons_tres.
pub fn model_of(is_compass: bool) -> &'static str {
    if is_compass {
        "compass"
    } else {
        "best-fit"
    }
}

/// The plan's jobs as the simulator's trace (job `k` is plan job `k`).
pub fn trace_jobs(plan: &Plan) -> Vec<TraceJob> {
    plan.jobs
        .iter()
        .map(|j| TraceJob {
            name: j.index.to_string(),
            submit_s: j.submit_s,
            duration_s: j.run_s,
            shape: j.shape(),
            account: j.account.clone(),
            min_runtime_s: Some(j.min_runtime_s as f64),
            resumable: j.resumable,
            line: j.index as u64 + 2,
        })
        .collect()
}

/// First start of each job, from the simulator's events.
struct Starts(Vec<Option<f64>>);

impl sim::Observer for Starts {
    fn after_event(&mut self, e: &sim::Event<'_>, _p: &dyn PlacementPolicy) {
        if let (EventKind::Start, Some(JobId(k))) = (e.kind, e.job) {
            if let Some(slot) = self.0.get_mut(k as usize) {
                slot.get_or_insert(e.time);
            }
        }
    }
}

/// When the live select plugin lets jobs move (its published
/// `select.move_when` and `select.tidy_payback`), for its simulation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gate {
    pub move_when: MoveWhen,
    pub tidy_payback: f64,
    /// The cost its rule weighs (`select.migration_cost`; `None`: the
    /// measured cost, as for a plugin that publishes none).
    pub rule_cost_s: Option<f64>,
}

impl Default for Gate {
    /// The plugin's defaults (for a plugin that publishes neither).
    fn default() -> Self {
        Self {
            move_when: MoveWhen::SELECT_DEFAULT,
            tidy_payback: DEFAULT_TIDY_PAYBACK,
            rule_cost_s: None,
        }
    }
}

/// The simulator's settings for a replay on `nodes x gpus_per_node`: only
/// those the comparison fixes (backfill, the cost `cost_s` charged once
/// per moved job as one requeue costs, the live plugin's `gate`, remaining
/// runs from the replay's time limits, each job's outcome kept); every
/// other one (and any the simulator gains later) keeps its default.
pub fn config(nodes: u32, gpus_per_node: u32, cost_s: f64, gate: Gate) -> SimConfig {
    SimConfig {
        queue: QueuePolicy::Backfill,
        migration: MigrationSettings {
            migration_cost_s: cost_s,
            charge: MigrationCharge::PerJob,
            rule_cost_s: gate.rule_cost_s,
            move_when: gate.move_when,
            tidy_payback: gate.tidy_payback,
            remaining: RemainingRun::ReplayLimit,
            ..MigrationSettings::default()
        },
        record_jobs: true,
        ..SimConfig::new(ClusterSpec {
            nodes,
            gpus_per_node,
        })
    }
}

/// Simulates the plan on `nodes x gpus_per_node` with `policy`, a
/// migration cost of `cost_s` wall seconds per moved job and the live
/// plugin's `gate`, under backfill ([`config`]). Remaining runs are taken
/// from the time limits the replay submitted (`--remaining-run
/// replay-limit`), as the plugin knows them.
pub fn simulate(
    plan: &Plan,
    nodes: u32,
    gpus_per_node: u32,
    policy: &str,
    cost_s: f64,
    gate: Gate,
) -> Result<Simulated> {
    let jobs = trace_jobs(plan);
    let cfg = config(nodes, gpus_per_node, cost_s, gate);
    let mut starts = Starts(vec![None; jobs.len()]);
    let r = sim::simulate_named(policy, &jobs, &cfg, &PolicyOptions::default(), &mut starts)
        .map_err(|e| CliError::Failed(format!("simulating the submitted jobs ({policy}): {e}")))?;
    let mut job_jct_s = vec![None; jobs.len()];
    for o in &r.job_outcomes {
        if let Some(slot) = o
            .name
            .parse::<usize>()
            .ok()
            .and_then(|k| job_jct_s.get_mut(k))
        {
            *slot = Some(o.end_s - o.submit_s);
        }
    }
    let (waits, largest, job_wait_s) = wait_figures(&jobs, &starts.0);
    Ok(Simulated {
        policy: policy.to_string(),
        queue: cfg.queue.name().to_string(),
        migration_cost_s: cost_s,
        migration_charge: cfg.migration.charge.name().to_string(),
        migration_cost_source: String::new(),
        rule_cost_s: gate.rule_cost_s,
        move_when: gate.move_when.name().to_string(),
        tidy_payback: r.tidy_payback,
        afr: r.afr,
        max_n_sif: r.max_n_sif,
        max_n_sif_under_wcc: r.max_n_sif_under_wcc,
        agu: Some(r.agu),
        ajct_s: r.ajct_s,
        ajct_jobs: r.jobs,
        ajct_all_s: r.ajct_s,
        waits,
        largest,
        migrations: r.migration_charges,
        migrated_jobs: r.migrated_jobs,
        backfilled: Some(r.backfilled),
        makespan_s: r.makespan_s,
        preemptions: None,
        cancelled: None,
        service: None,
        command: None,
        job_jct_s,
        job_wait_s,
    })
}

/// The waits of `jobs` (first start minus submission, from `starts`): their
/// percentiles, those of the largest jobs, and each job's.
fn wait_figures(
    jobs: &[TraceJob],
    starts: &[Option<f64>],
) -> (Percentiles, LargestWaits, Vec<Option<f64>>) {
    let job_wait_s: Vec<Option<f64>> = jobs
        .iter()
        .zip(starts)
        .map(|(j, s)| s.map(|s| s - j.submit_s))
        .collect();
    let waits: Vec<(u64, f64)> = jobs
        .iter()
        .zip(&job_wait_s)
        .filter_map(|(j, w)| w.map(|w| (j.shape.total_gpus(), w)))
        .collect();
    let all: Vec<u64> = jobs.iter().map(|j| j.shape.total_gpus()).collect();
    (
        Percentiles::of(waits.iter().map(|w| w.1).collect()),
        largest_waits(&all, &waits),
        job_wait_s,
    )
}

/// The policy simulator's settings for a replay on `nodes x gpus_per_node`
/// whose clusters ran the budget service `service` (`--service-config`):
/// `policy`, exactly the migrations of the placement simulation
/// ([`config`]: the cost `cost_s` charged per moved job, the live plugin's
/// `gate`, remaining runs from the replay's limits), the service's settings
/// ([`crate::policy::PolicySettings::apply`]), the event log kept (each
/// job's starts and finishes), and every other setting what `compass
/// simulate --budgets` uses by default ([`BudgetSimConfig::new`]).
pub fn policy_config(
    nodes: u32,
    gpus_per_node: u32,
    policy: &str,
    cost_s: f64,
    gate: Gate,
    service: &ServiceModel,
) -> BudgetSimConfig {
    let mut cfg = BudgetSimConfig::new(ClusterSpec {
        nodes,
        gpus_per_node,
    });
    cfg.policy = policy.to_string();
    cfg.migration = config(nodes, gpus_per_node, cost_s, gate).migration;
    service.settings.apply(&mut cfg);
    cfg.record = Record::Events;
    cfg
}

/// Simulates the plan as [`simulate`] does, through the policy simulator
/// with the budget service `service` ([`policy_config`]): the figures the
/// policy simulator has ([`BudgetReport`]), each job's wait and completion
/// from its event log (job `k` is plan job `k`), and none it does not
/// measure (max `N*SIF` under WCC, backfilled jobs).
pub fn simulate_policy(
    plan: &Plan,
    nodes: u32,
    gpus_per_node: u32,
    policy: &str,
    cost_s: f64,
    gate: Gate,
    service: &Service,
) -> Result<Simulated> {
    let trace = trace_jobs(plan);
    let jobs = from_canonical(&trace, "jobs.csv")?;
    let cfg = policy_config(nodes, gpus_per_node, policy, cost_s, gate, &service.model);
    let r = run_budgets(&jobs, &service.tree, &cfg)
        .map_err(|e| CliError::Failed(format!("simulating the submitted jobs ({policy}): {e}")))?;
    let (starts, ends) = outcomes(&r.events, jobs.len());
    let (waits, largest, job_wait_s) = wait_figures(&trace, &starts);
    let job_jct_s: Vec<Option<f64>> = trace
        .iter()
        .zip(&ends)
        .map(|(j, e)| e.map(|e| e - j.submit_s))
        .collect();
    // As the placement simulator's: the last completion after the first
    // submission.
    let first_submit = trace
        .iter()
        .map(|j| j.submit_s)
        .fold(f64::INFINITY, f64::min);
    let last_end = ends
        .iter()
        .flatten()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let makespan_s = if last_end > first_submit {
        last_end - first_submit
    } else {
        0.0
    };
    Ok(Simulated {
        policy: policy.to_string(),
        queue: "fair-share".into(),
        migration_cost_s: cost_s,
        migration_charge: r.migration_charge.name().to_string(),
        migration_cost_source: String::new(),
        rule_cost_s: r.rule_cost_s,
        move_when: r.move_when.name().to_string(),
        tidy_payback: r.tidy_payback,
        afr: r.afr,
        max_n_sif: r.max_n_sif,
        max_n_sif_under_wcc: None,
        agu: agu(&r),
        ajct_s: r.ajct_s,
        ajct_jobs: r.completed as u64,
        ajct_all_s: r.ajct_s,
        waits,
        largest,
        migrations: r.migration_charges,
        migrated_jobs: r.migrated_jobs,
        backfilled: None,
        makespan_s,
        preemptions: Some(r.preemptions),
        cancelled: Some(r.cancelled as u64),
        service: Some(service.model.clone()),
        command: Some(rerun_args(&cfg, &service.model).join(" ")),
        job_jct_s,
        job_wait_s,
    })
}

/// The `compass simulate --budgets` arguments that give the policy
/// simulation `cfg` of the budget service `service` from the replay's
/// `jobs.csv`: the cluster, the policy, the service's settings
/// ([`crate::policy::PolicySettings::flags`]) and every migration setting
/// of `cfg` spelled out (the cost to the last digit, as decimal seconds);
/// the rest is the command's defaults, as in [`policy_config`]. The budget
/// tree is quoted for the shell when it needs it.
pub fn rerun_args(cfg: &BudgetSimConfig, service: &ServiceModel) -> Vec<String> {
    let m = &cfg.migration;
    let mut a: Vec<String> = vec![
        "--trace".into(),
        "jobs.csv".into(),
        "--budgets".into(),
        shell_word(&service.budgets.display().to_string()),
        "--nodes".into(),
        cfg.spec.nodes.to_string(),
        "--gpus-per-node".into(),
        cfg.spec.gpus_per_node.to_string(),
        "--policy".into(),
        cfg.policy.clone(),
    ];
    a.extend(service.settings.flags());
    a.extend(
        [
            ("--migration-cost", format!("{}s", m.migration_cost_s)),
            ("--migration-charge", m.charge.name().to_string()),
            ("--payback", m.payback.to_string()),
            ("--remaining-run", m.remaining.name().to_string()),
            ("--move-when", m.move_when.name().to_string()),
            ("--tidy-payback", m.tidy_payback.to_string()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value]),
    );
    if let Some(c) = m.rule_cost_s {
        a.extend(["--rule-cost".to_string(), format!("{c}s")]);
    }
    a
}

/// `s` as one shell word: as it is when it holds only characters the shell
/// leaves alone, single-quoted otherwise.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// AGU (eq. 17: allocated over all GPUs, averaged over the metric window)
/// from the policy simulator's report: its `occupancy` averages the same
/// over the time some job waits, which is the metric window whenever a job
/// waited (`metric_window` `peak`); over the busy time it reports none.
fn agu(r: &BudgetReport) -> Option<f64> {
    (r.metric_window == "peak").then_some(r.occupancy)
}

/// Each job's first start and its completion (none for a job cancelled as
/// a victim), from the policy simulator's event log; job ids are 1-based
/// positions ([`from_canonical`]).
fn outcomes(events: &[SimEvent], n: usize) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let (mut starts, mut ends) = (vec![None; n], vec![None; n]);
    let index = |job: JobId| usize::try_from(job.0).ok()?.checked_sub(1);
    for e in events {
        match *e {
            SimEvent::Start { t, job } => {
                if let Some(k) = index(job).filter(|&k| k < n) {
                    starts[k].get_or_insert(t);
                }
            }
            SimEvent::Finish { t, job } => {
                if let Some(k) = index(job).filter(|&k| k < n) {
                    ends[k] = Some(t);
                }
            }
            SimEvent::Preempt { .. } => {}
        }
    }
    (starts, ends)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySettings;
    use crate::replay::plan::PlannedJob;
    use crate::replay::service::{Service, ServiceModel};
    use compass_core::fairshare::{FreeOrder, QueueOrder, TeamOrder};
    use compass_core::preempt::ProtectionConfig;
    use compass_core::sim::budgets::{Backfill, Preemption};
    use std::path::{Path, PathBuf};

    fn job(index: usize, submit_s: f64, run_s: f64, w: u32, g: u32) -> PlannedJob {
        PlannedJob {
            trace_offset_s: submit_s,
            trace_duration_s: run_s,
            submit_s,
            run_s,
            ..PlannedJob::example(index, w, g)
        }
    }

    #[test]
    fn the_submitted_jobs_simulate_with_their_waits() {
        // two whole-node jobs on one node: the second waits for the first
        let plan = Plan {
            window_trace_end_s: 1.0,
            ..Plan::example(vec![job(0, 0.0, 10.0, 1, 8), job(1, 1.0, 10.0, 1, 8)], 1.0)
        };
        let s = simulate(&plan, 1, 8, "best-fit", 5.0, Gate::default()).unwrap();
        assert_eq!(s.policy, "best-fit");
        assert_eq!(s.migrations, 0);
        assert_eq!(s.waits.max, 9.0, "job 1 starts when job 0 ends at 10 s");
        assert_eq!(s.ajct_s, (10.0 + 19.0) / 2.0);
        assert_eq!(s.largest.jobs, 2);
        let c = simulate(&plan, 1, 8, "compass", 5.0, Gate::default()).unwrap();
        assert_eq!(
            (c.policy.as_str(), c.move_when.as_str(), c.tidy_payback),
            ("compass", "pays", Some(20.0))
        );
        assert_eq!(c.rule_cost_s, None, "no published cost: the measured one");
        let decided = Gate {
            rule_cost_s: Some(60.0),
            ..Gate::default()
        };
        let d = simulate(&plan, 1, 8, "compass", 5.0, decided).unwrap();
        assert_eq!((d.migration_cost_s, d.rule_cost_s), (5.0, Some(60.0)));
        let starts = Gate {
            move_when: MoveWhen::Starts,
            ..Gate::default()
        };
        let c = simulate(&plan, 1, 8, "compass", 5.0, starts).unwrap();
        assert_eq!(
            (c.move_when.as_str(), c.tidy_payback),
            ("starts", None),
            "the live plugin's gate"
        );
        assert!(simulate(&plan, 1, 8, "no-such-policy", 5.0, Gate::default()).is_err());
    }

    /// A migration is one Slurm requeue of the whole job live, so the
    /// replay's simulation charges and counts it once per moved job: here
    /// compass moves both instances of job 1 (2 x 2 GPUs) in one policy
    /// call, which is one migration (the paper's per-instance charge would
    /// count and charge 2).
    #[test]
    fn a_moved_job_is_one_migration_charged_once_as_one_requeue() {
        let plan = Plan::example(
            vec![
                job(0, 1.0, 13.0, 1, 4),
                job(1, 2.0, 63.0, 2, 2),
                job(2, 7.0, 43.0, 1, 4),
                job(3, 9.0, 14.0, 1, 8),
                job(4, 15.0, 36.0, 1, 2),
                job(5, 16.0, 45.0, 2, 2),
            ],
            1.0,
        );
        assert_eq!(
            config(3, 8, 2.0, Gate::default()).migration.charge,
            MigrationCharge::PerJob
        );
        let s = simulate(&plan, 3, 8, "compass", 2.0, Gate::default()).unwrap();
        assert_eq!(s.migration_charge, "per-job");
        assert_eq!((s.migrations, s.migrated_jobs), (1, 1), "{s:?}");
        // the simulator's own result, with the same settings
        let cfg = config(3, 8, 2.0, Gate::default());
        let r = sim::simulate_named(
            "compass",
            &trace_jobs(&plan),
            &cfg,
            &PolicyOptions::default(),
            &mut sim::NoObserver,
        )
        .unwrap();
        assert_eq!(
            (r.migrations, r.migration_charges),
            (2, 1),
            "2 instances, 1 job moved"
        );
        assert_eq!(
            (s.ajct_s, s.ajct_all_s, s.ajct_jobs),
            (r.ajct_s, r.ajct_s, 6)
        );
        assert!(s.job_jct_s.iter().all(Option::is_some) && s.job_wait_s.len() == 6);
    }

    /// A scratch directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let d = std::env::temp_dir().join(format!("compass-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Self(d)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Two teams of half the cluster each: `a` and `b`.
    fn service(dir: &Path, settings: PolicySettings) -> Service {
        let budgets = dir.join("b.toml");
        std::fs::write(
            &budgets,
            "[[node]]\nname = \"org\"\nshare = 1.0\n\
             [[node]]\nname = \"ta\"\nparent = \"org\"\nshare = 0.5\naccount = \"a\"\n\
             [[node]]\nname = \"tb\"\nparent = \"org\"\nshare = 0.5\naccount = \"b\"\n",
        )
        .unwrap();
        Service {
            tree: crate::policy::load_tree(&budgets).unwrap(),
            model: ServiceModel {
                config: "svc.toml".into(),
                budgets,
                enforce: "true".into(),
                gpu_weights: false,
                settings,
            },
        }
    }

    /// Team `a`'s unprotected jobs fill both nodes (one not resumable),
    /// team `b`'s protected ones arrive and preempt them.
    fn contended_plan() -> Plan {
        let j =
            |index, submit_s, run_s, w, g, account: &str, min_runtime_s, resumable| PlannedJob {
                account: Some(account.into()),
                min_runtime_s,
                resumable,
                ..job(index, submit_s, run_s, w, g)
            };
        Plan::example(
            vec![
                j(0, 0.0, 200.0, 1, 8, "a", 0, true),
                j(1, 1.0, 200.0, 1, 8, "a", 0, false),
                j(2, 5.0, 50.0, 1, 8, "b", 50, true),
                j(3, 6.0, 50.0, 1, 4, "b", 20, true),
                j(4, 7.0, 30.0, 1, 2, "a", 0, true),
                j(5, 8.0, 40.0, 2, 4, "b", 40, true),
                j(6, 9.0, 60.0, 1, 2, "b", 10, true),
            ],
            1.0,
        )
    }

    /// `compass simulate` as the CLI parses it.
    #[derive(clap::Parser)]
    struct Simulate {
        #[command(flatten)]
        args: crate::simulate::Args,
    }

    /// The command the report prints for a policy simulation
    /// ([`Simulated::command`]), parsed by the CLI's own parser and run as
    /// `compass simulate --budgets` runs it ([`crate::policy::prepare`]) on
    /// the `jobs.csv` the replay writes, gives the replay's simulation:
    /// the same configuration (every setting off its default, so a setting
    /// dropped on either side fails), the same jobs, and the same AFR,
    /// AJCT, preemptions and migrations.
    #[test]
    fn the_printed_command_reruns_the_policy_simulation() {
        let dir = Scratch::new("replay-policy-sim");
        let settings = PolicySettings {
            window_s: 3000.0,
            cycle_s: 3.0,
            order: QueueOrder {
                team_order: TeamOrder::Ratio,
                free_order: FreeOrder::SameAsAllocated,
            },
            preemption: Preemption::Compass,
            protection: ProtectionConfig {
                min_runtime_cap_s: 45.0,
                checkpoint_interval_s: 1.5,
                exact_search_limit: 6,
                preempt_margin: 0.1,
                max_preemptions_per_cycle: 5,
            },
            job_checkpoint_s: Some(0.75),
            restart_cost_s: 0.5,
            backfill: Backfill::Reserve,
        };
        let svc = service(&dir.0, settings);
        let plan = contended_plan();
        let gate = Gate {
            move_when: MoveWhen::Starts,
            tidy_payback: 7.0,
            rule_cost_s: Some(4.0),
        };
        let cost = 2.2591761635786014;
        let s = simulate_policy(&plan, 2, 8, "compass", cost, gate, &svc).unwrap();
        assert!(
            s.preemptions.unwrap() >= 2 && s.cancelled == Some(1),
            "the plan preempts, and cancels the job that cannot resume: {s:?}"
        );
        let jobs_csv = dir.0.join("jobs.csv");
        std::fs::write(&jobs_csv, crate::replay::canonical_csv(&plan)).unwrap();
        let line = s.command.clone().unwrap();
        let argv =
            std::iter::once("simulate".to_string()).chain(line.split_whitespace().map(|a| {
                if a == "jobs.csv" {
                    jobs_csv.display().to_string()
                } else {
                    a.to_string()
                }
            }));
        let a = <Simulate as clap::Parser>::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .args;
        let loaded = a.trace.load().unwrap();
        let (jobs, tree, mut cfg) =
            crate::policy::prepare(&loaded, &a.budgets, &a.trace, &a.policy).unwrap();
        let ours = policy_config(2, 8, "compass", cost, gate, &svc.model);
        cfg.record = ours.record;
        assert_eq!(cfg, ours, "{line}");
        assert_eq!(
            jobs,
            from_canonical(&trace_jobs(&plan), "jobs.csv").unwrap()
        );
        let r = run_budgets(&jobs, &tree, &cfg).unwrap();
        assert_eq!(
            (
                r.afr,
                r.ajct_s,
                r.preemptions,
                r.cancelled as u64,
                r.migration_charges
            ),
            (
                s.afr,
                s.ajct_all_s,
                s.preemptions.unwrap(),
                s.cancelled.unwrap(),
                s.migrations
            ),
            "{line}"
        );
        assert_eq!(Some(r.occupancy), s.agu);
        // each job's completion, from the event log, averages to AJCT
        let done: Vec<f64> = s.job_jct_s.iter().flatten().copied().collect();
        assert_eq!(done.len(), r.completed);
        assert!((done.iter().sum::<f64>() / done.len() as f64 - s.ajct_all_s).abs() < 1e-9);
        assert_eq!(s.job_jct_s[1], None, "cancelled as a victim");
        assert_eq!(
            (s.max_n_sif_under_wcc, s.backfilled, s.queue.as_str()),
            (None, None, "fair-share"),
            "nothing the policy simulator does not measure"
        );
    }

    /// Queue order only (`enforce = false`): no preemption, and the
    /// printed command says so.
    #[test]
    fn queue_order_only_preempts_nobody() {
        let dir = Scratch::new("replay-policy-order");
        let mut svc = service(
            &dir.0,
            PolicySettings {
                window_s: 2520.0,
                cycle_s: 2.0,
                order: QueueOrder::default(),
                preemption: Preemption::None,
                protection: ProtectionConfig {
                    min_runtime_cap_s: 120.0,
                    ..ProtectionConfig::default()
                },
                job_checkpoint_s: Some(1.0),
                restart_cost_s: 0.0,
                backfill: Backfill::Off,
            },
        );
        svc.model.enforce = "false".into();
        let s = simulate_policy(
            &contended_plan(),
            2,
            8,
            "best-fit",
            5.0,
            Gate::default(),
            &svc,
        )
        .unwrap();
        assert_eq!((s.preemptions, s.cancelled), (Some(0), Some(0)));
        let line = s.command.unwrap();
        assert!(
            line.contains(" --preempt none ")
                && line.contains(" --policy best-fit ")
                && line.contains(" --backfill off "),
            "{line}"
        );
        assert!(s.job_jct_s.iter().all(Option::is_some));
    }
}
