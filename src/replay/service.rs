//! `--service-config FILE`: the budget service (compass-budgetd) the
//! replayed clusters run, read with the service's own parser and turned
//! into the policy simulator's settings ([`PolicySettings`]). With it, each
//! cluster's simulated columns come from the policy simulator (fair-share
//! order, protected time, preemption, the same placement policies and move
//! rule: `compass simulate --budgets`) instead of the placement simulator,
//! so a live run with the service is set beside a simulation of the same
//! configuration rather than of placement alone.
//!
//! What the simulation takes from the file: `window_s`, `cycle_s`,
//! `[order]`, and from `[protection]` `enforce` (`true`: preemption by the
//! protected-time rules; `false` and `"dry-run"`, which decides but acts on
//! nothing: queue order only), `preempt_margin`, `exact_search_limit` and
//! `max_actions_per_cycle` and `checkpoint_interval_s` (what the victim
//! planner assumes of the jobs, as the service's planner does). Not from
//! it: the cap on protected time (the service reads it from compass.conf;
//! here the cap the replay's plan applied, [`cap_s`]) and what a victim
//! really loses (the replay's job script, [`JOB_CHECKPOINT_S`],
//! [`RESTART_COST_S`]). Not from the service either: backfill
//! reservations, which the replayed clusters' Slurm makes
//! (`SchedulerType=sched/backfill`). The simulation does not make them
//! ([`Backfill::Off`]): on the stop-54 runs they brought the simulated
//! AJCT nearer live but halved its preemptions, which live did not show
//! (docs/policy-simulator.md, "Backfill reservations"); the printed
//! command says `--backfill off`, so either can be rerun. Everything else is what
//! `compass simulate --budgets` uses by default, so the command the report
//! prints reproduces the simulation.

use std::path::{Path, PathBuf};

use compass_budget::config::{Config, EnforceMode};
use compass_core::fairshare::tree::OrgTree;
use compass_core::preempt::ProtectionConfig;
use compass_core::sim::budgets::{Backfill, Preemption};
use serde::Serialize;

use super::plan::Plan;
use crate::error::{CliError, Result};
use crate::policy::PolicySettings;

/// How often the replay's job script checkpoints, seconds: it appends its
/// progress every second of its run and resumes from the last line
/// ([`super::plan`]'s `JOB_SCRIPT`), so a victim loses its run since its
/// last checkpoint, less than a second. The simulation's victims
/// checkpoint as often (`--job-checkpoint-interval`): the loss it charges
/// is the loss live, while its planner chooses victims by the service's
/// `checkpoint_interval_s`, as the service did.
pub const JOB_CHECKPOINT_S: f64 = 1.0;

/// Seconds the simulation adds to a preempted job's run when it restarts:
/// none. The job script resumes from its checkpoint at once (nothing to
/// restore), so a live restart costs the progress lost since the last
/// checkpoint (charged through [`JOB_CHECKPOINT_S`]) and a start-up like
/// any job's; the wait in the queue before the restart is simulated as a
/// wait. (The replay measures the rest per requeue as `lost_mean_s`, about
/// half a second: the mean loss within a 1 s checkpoint.)
pub const RESTART_COST_S: f64 = 0.0;

/// The budget service of the replayed clusters as the simulation models it
/// (`report.json`: `simulated.service`).
#[derive(Clone, Debug, Serialize)]
pub struct ServiceModel {
    /// The service's configuration file, as given.
    pub config: PathBuf,
    /// The budget tree the services charge (`--budgets`), absolute when it
    /// resolves: the printed `compass simulate` command names it.
    pub budgets: PathBuf,
    /// `[protection] enforce`: `true`, `false` or `dry-run`.
    pub enforce: String,
    /// Whether the file weighs GPU types (`[gpu_weights]`): the policy
    /// simulator weighs every GPU 1.
    pub gpu_weights: bool,
    /// The policy simulator's settings.
    pub settings: PolicySettings,
}

/// The model and the budget tree it charges.
pub struct Service {
    pub model: ServiceModel,
    pub tree: OrgTree,
}

/// The largest protected time the replay's plan gives a job, in wall
/// seconds: `--min-runtime-cap` (trace seconds) divided by `--speedup`,
/// rounded up to whole seconds as the plan rounds each job's compressed
/// protected time (`plan::build`). The plan already capped every job's, so
/// at this cap the simulation cuts none, as the live services cut none
/// (their cap is compass.conf's `spank.max_min_runtime`, which sbatch's
/// SPANK plugin held every submitted `--min-runtime` to).
pub fn cap_s(min_runtime_cap_s: f64, speedup: f64) -> f64 {
    (min_runtime_cap_s / speedup).ceil().max(1.0)
}

/// Reads the service's configuration at `path` with the service's own
/// parser ([`Config::parse`], which validates it as the service does and
/// reads no compass.conf), and the budget tree at `budgets`. A bad file is
/// an error naming it, before anything is submitted.
pub fn load(path: &Path, budgets: &Path, min_runtime_cap_s: f64, speedup: f64) -> Result<Service> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::io(path.display(), e))?;
    let config = Config::parse(&text, &path.display().to_string())
        .map_err(|e| CliError::Failed(format!("--service-config: {e}")))?;
    let tree = crate::policy::load_tree(budgets)?;
    let model = ServiceModel {
        config: path.to_path_buf(),
        budgets: budgets
            .canonicalize()
            .unwrap_or_else(|_| budgets.to_path_buf()),
        enforce: match config.protection.enforce {
            EnforceMode::On => "true",
            EnforceMode::Off => "false",
            EnforceMode::DryRun => "dry-run",
        }
        .into(),
        gpu_weights: !config.gpu_weights.is_empty(),
        settings: settings(&config, cap_s(min_runtime_cap_s, speedup)),
    };
    if model.gpu_weights {
        eprintln!(
            "warning: --service-config {}: [gpu_weights] is not modelled: the simulation weighs every GPU 1",
            path.display()
        );
    }
    Ok(Service { model, tree })
}

/// The policy simulator's settings of the service `c`, protected time
/// capped at `cap_s` (wall seconds), without backfill reservations (see
/// the module's documentation).
fn settings(c: &Config, cap_s: f64) -> PolicySettings {
    let p = &c.protection;
    PolicySettings {
        window_s: c.window_s as f64,
        cycle_s: c.cycle_s as f64,
        order: c.order,
        // `false` orders the queue only; `"dry-run"` decides and logs but
        // acts on nothing, so Slurm sees the order only as well.
        preemption: if p.enforce == EnforceMode::On {
            Preemption::Compass
        } else {
            Preemption::None
        },
        protection: ProtectionConfig {
            min_runtime_cap_s: cap_s,
            checkpoint_interval_s: p.checkpoint_interval_s,
            exact_search_limit: p.exact_search_limit,
            preempt_margin: p.preempt_margin,
            max_preemptions_per_cycle: p.max_actions_per_cycle,
        },
        job_checkpoint_s: Some(JOB_CHECKPOINT_S),
        restart_cost_s: RESTART_COST_S,
        backfill: Backfill::Off,
    }
}

/// The policy simulator needs every job's account (its team): a usage
/// error before anything is submitted when a job of the plan has none (a
/// canonical trace without an `account` column).
pub fn check_plan(plan: &Plan) -> Result<()> {
    match plan.jobs.iter().find(|j| j.account.is_none()) {
        Some(j) => Err(CliError::Usage(format!(
            "--service-config: job {} of the window has no account, and the policy simulator needs one on every job (a canonical trace's `account` column)",
            j.name
        ))),
        None => Ok(()),
    }
}

impl ServiceModel {
    /// What the simulated columns model, in one paragraph of the report
    /// (with the values it ran with), in place of the placement-only one.
    pub fn scope(&self) -> String {
        let s = &self.settings;
        let p = &s.protection;
        let (team, free) = s.order_names();
        let enforcement = match self.enforce.as_str() {
            "true" => format!(
                "enforcement (`enforce = true`: jobs preempted by the protected-time rules, at most {} victims a cycle, margin {}, exact victim search up to {} candidates)",
                p.max_preemptions_per_cycle, p.preempt_margin, p.exact_search_limit
            ),
            "false" => "queue order only (`enforce = false`: no preemption)".into(),
            _ => "queue order only (`enforce = \"dry-run\"`: the service decides and logs but acts on nothing, so no preemption)".into(),
        };
        let mut text = format!(
            "The simulation is the **policy simulator** (`compass simulate --budgets`: fair-share order, protected time and preemption, with the same placement policies and move rule), run with the budget service's own settings (`{}`): a {} s cycle, a fair-share window of {} s, the team order `{team}` (unallocated work `{free}`), and {enforcement}. Protected time is capped at {} s (`--min-runtime-cap` / `--speedup`, rounded up to whole seconds as the plan rounds each job's, so no submitted protection is cut). A preempted job loses its run since its last checkpoint, every {} s as the replay's job script writes them, and restarts at no further cost (`--restart-cost {}s`).",
            self.config.display(),
            s.cycle_s,
            s.window_s,
            p.min_runtime_cap_s,
            s.job_checkpoint_s.unwrap_or(p.checkpoint_interval_s),
            s.restart_cost_s
        );
        text.push_str(match s.backfill {
            Backfill::Reserve => " Its scheduling passes make backfill reservations as the clusters' Slurm does (`sched/backfill`; `--backfill reserve`): a waiting job that cannot start holds the GPUs it needs from the earliest time the running jobs' time limits free them, for its own time limit, and a later job starts only if it delays no such reservation (in GPU counts, not nodes, and in every pass).",
            Backfill::Off => " Its scheduling passes start every job that fits, in queue order, with no backfill reservation (`--backfill off`; the clusters' Slurm makes them, and `--backfill reserve` models them in GPU counts: nearer live's completion times, further from its preemptions on the runs measured).",
        });
        if s.preemption != Preemption::None {
            text.push_str(&format!(
                " Victims are chosen assuming a checkpoint every {} s, the service's `checkpoint_interval_s`, as the service chose them.",
                p.checkpoint_interval_s
            ));
        }
        if self.gpu_weights {
            text.push_str(" The service's `[gpu_weights]` are not modelled (every GPU weighs 1).");
        }
        text.push_str(" The simulator restarts a requeued victim as soon as it finds room (live, the service sets its begin time 2 s ahead), and models neither Slurm's start latency and scheduling passes nor the service's guards against fruitless preemption (`start_grace_s`, and sparing a victim restarted while the job it made room for still waits). Live and simulated compare completion times, waits and preemptions as well as the fragmentation figures.\n\n");
        text
    }
}

/// A service file of the demo's form (contrib/demo.sh's, ports and paths
/// aside), with `extra` appended to its `[protection]` table.
#[cfg(test)]
pub(crate) fn demo_toml(enforce: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:18080\"\ndb = \"/tmp/budget.db\"\ncapacity_gpus = 128\ncycle_s = 2\nwindow_s = 2520\nslurm = \"libslurm\"\n\n[protection]\nenforce = {enforce}\n{extra}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use compass_core::fairshare::{FreeOrder, TeamOrder};

    fn parse(text: &str) -> Config {
        Config::parse(text, "t.toml").unwrap()
    }

    #[test]
    fn the_demo_service_maps_onto_the_policy_simulator() {
        let s = settings(&parse(&demo_toml("true", "")), cap_s(8.0 * 3600.0, 240.0));
        assert_eq!((s.window_s, s.cycle_s), (2520.0, 2.0));
        assert_eq!(
            s.backfill,
            Backfill::Off,
            "reservations measured nearer live's AJCT, further from its preemptions: not the default"
        );
        assert_eq!(s.preemption, Preemption::Compass);
        assert_eq!(
            (s.order.team_order, s.order.free_order),
            (TeamOrder::UnderAllocationFirst, FreeOrder::UnderTotalFirst)
        );
        let core = ProtectionConfig::default();
        assert_eq!(
            s.protection,
            ProtectionConfig {
                min_runtime_cap_s: 120.0,
                ..core
            },
            "the service's defaults and the plan's cap"
        );
        assert_eq!(
            (s.job_checkpoint_s, s.restart_cost_s),
            (Some(1.0), 0.0),
            "the job script's checkpoints, restarts at once"
        );
        // queue order only: no preemption, whether off or a dry run
        for off in ["false", "\"dry-run\""] {
            let s = settings(&parse(&demo_toml(off, "")), 120.0);
            assert_eq!(s.preemption, Preemption::None, "{off}");
        }
        // the service's [protection] and [order] are taken over
        let c = parse(&format!(
            "{}[order]\nteam_order = \"ratio\"\nfree_order = \"same-as-allocated\"\n",
            demo_toml(
                "true",
                "preempt_margin = 0.2\nexact_search_limit = 4\nmax_actions_per_cycle = 3\ncheckpoint_interval_s = \"30s\"\n"
            )
        ));
        let s = settings(&c, 60.0);
        assert_eq!(
            (s.order.team_order, s.order.free_order),
            (TeamOrder::Ratio, FreeOrder::SameAsAllocated)
        );
        let p = &s.protection;
        assert_eq!(
            (
                p.preempt_margin,
                p.exact_search_limit,
                p.max_preemptions_per_cycle,
                p.checkpoint_interval_s
            ),
            (0.2, 4, 3, 30.0),
            "what the service's planner assumed"
        );
        assert_eq!(s.job_checkpoint_s, Some(1.0));
    }

    #[test]
    fn the_cap_is_the_plans_rounded_up() {
        assert_eq!(cap_s(8.0 * 3600.0, 240.0), 120.0);
        assert_eq!(cap_s(8.0 * 3600.0, 7.0), 4115.0, "28800 / 7 = 4114.3");
        assert_eq!(cap_s(60.0, 240.0), 1.0, "at least the plan's 1 s");
    }

    #[test]
    fn a_bad_file_is_refused_with_its_name() {
        let dir = std::env::temp_dir().join(format!("compass-service-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let budgets = dir.join("b.toml");
        std::fs::write(
            &budgets,
            "[[node]]\nname = \"org\"\nshare = 1.0\n[[node]]\nname = \"a\"\nparent = \"org\"\nshare = 1.0\naccount = \"a\"\n",
        )
        .unwrap();
        let bad = |text: &str| {
            let f = dir.join("s.toml");
            std::fs::write(&f, text).unwrap();
            match load(&f, &budgets, 28800.0, 240.0) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("accepted: {text}"),
            }
        };
        let e = bad(&demo_toml("\"maybe\"", ""));
        assert!(
            e.starts_with("--service-config: config ")
                && e.contains("s.toml")
                && e.contains("enforce"),
            "{e}"
        );
        let e = bad(&demo_toml("true", "exact_search_limit = 40\n"));
        assert!(e.contains("exact_search_limit must be at most 16"), "{e}");
        let e = bad(&demo_toml("true", "no_such_key = 1\n"));
        assert!(e.contains("no_such_key"), "{e}");
        let missing = load(&dir.join("none.toml"), &budgets, 28800.0, 240.0);
        assert!(missing.is_err_and(|e| e.to_string().contains("none.toml")));
        let f = dir.join("s.toml");
        std::fs::write(&f, demo_toml("true", "")).unwrap();
        let s = load(&f, &budgets, 28800.0, 240.0).unwrap();
        assert_eq!(
            (s.model.enforce.as_str(), s.model.gpu_weights),
            ("true", false)
        );
        assert!(s.model.budgets.is_absolute());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
