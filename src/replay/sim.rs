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

use compass_core::model::{ClusterSpec, JobId};
use compass_core::placement::worth::DEFAULT_TIDY_PAYBACK;
use compass_core::placement::{PlacementPolicy, PolicyOptions};
use compass_core::sim::{
    self, EventKind, MigrationCharge, MigrationSettings, MoveWhen, Percentiles, QueuePolicy,
    RemainingRun, SimConfig,
};
use compass_core::trace::TraceJob;
use serde::Serialize;

use super::plan::Plan;
use super::report::{largest_waits, LargestWaits};
use crate::error::{CliError, Result};

/// The simulated figures of one cluster, beside its live ones.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Simulated {
    /// `compass` or `best-fit`.
    pub policy: String,
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
    pub max_n_sif_under_wcc: Option<u64>,
    pub agu: f64,
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
    /// Jobs the simulated backfill started ahead of a blocked head.
    pub backfilled: u64,
    pub makespan_s: f64,
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
    let waits: Vec<(u64, f64)> = jobs
        .iter()
        .zip(&starts.0)
        .filter_map(|(j, s)| s.map(|s| (j.shape.total_gpus(), s - j.submit_s)))
        .collect();
    let all: Vec<u64> = jobs.iter().map(|j| j.shape.total_gpus()).collect();
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
    let job_wait_s: Vec<Option<f64>> = jobs
        .iter()
        .zip(&starts.0)
        .map(|(j, s)| s.map(|s| s - j.submit_s))
        .collect();
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
        agu: r.agu,
        ajct_s: r.ajct_s,
        ajct_jobs: r.jobs,
        ajct_all_s: r.ajct_s,
        waits: Percentiles::of(waits.iter().map(|w| w.1).collect()),
        largest: largest_waits(&all, &waits),
        migrations: r.migration_charges,
        migrated_jobs: r.migrated_jobs,
        backfilled: r.backfilled,
        makespan_s: r.makespan_s,
        job_jct_s,
        job_wait_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::plan::PlannedJob;

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
}
