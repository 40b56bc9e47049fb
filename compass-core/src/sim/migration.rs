//! The migration settings both simulators share: what a Compact migration
//! costs and how it is charged, the cost rule that decides which running
//! jobs may move, and the gate `move_when` ([`crate::placement::worth`],
//! `sim::gate`). The placement simulator ([`crate::sim::SimConfig`]) and
//! the policy simulator ([`crate::sim::budgets::BudgetSimConfig`]) each
//! embed one as their `migration` field.

use crate::clock::Seconds;
use crate::error::{CoreError, Result};
use crate::model::{JobId, Migration};
use crate::placement::worth::{MigrationRule, MoveWhen, DEFAULT_TIDY_PAYBACK, TRIAL_RELEASES};
use crate::sim::{MigrationCharge, RemainingRun};

/// What a migration costs, the cost rule and the gate, as both simulators
/// apply them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MigrationSettings {
    /// `c`: seconds added to a moved job's completion per migration,
    /// charged as [`MigrationSettings::charge`] says. Also the cost the rule
    /// weighs, unless [`MigrationSettings::rule_cost_s`] says otherwise.
    pub migration_cost_s: Seconds,
    /// The cost the cost rule weighs (its payback and tidying tests,
    /// [`MigrationRule::default_cost_s`]) when it is not `c`: a live
    /// select plugin decides with its configured `select.migration_cost`,
    /// while what a requeue really cost is measured afterwards, so the
    /// simulation of a live run decides with the one and charges the other
    /// (`compass replay`'s simulated columns; `--rule-cost`). `None`: `c`.
    pub rule_cost_s: Option<Seconds>,
    /// `c` per migrated instance (the paper) or per moved job per policy
    /// call (one Slurm requeue).
    pub charge: MigrationCharge,
    /// The cost rule ([`MigrationRule::payback`]): a running job may be
    /// moved only when its expected remaining run is at least `payback`
    /// times `c` after the move. `0` turns the rule off: every resumable job
    /// is always movable (the paper's behaviour). Otherwise at least 1. It
    /// acts on policies that honour movability (COMPASS).
    pub payback: f64,
    /// What the rule takes as a job's remaining run.
    pub remaining: RemainingRun,
    /// When any job may move ([`MoveWhen`]; the gate, shared code:
    /// `sim::gate`).
    pub move_when: MoveWhen,
    /// Under [`MoveWhen::Pays`]: a tidying move (one that lets no queued
    /// job start) is made only for a job expected, by the runs of the jobs
    /// that ended recently, to run at least this many times `c` after it
    /// ([`MigrationRule::tidy_payback`]).
    pub tidy_payback: f64,
    /// Under [`MoveWhen::Pays`]: the jobs held for tidying that one trial
    /// of the gate releases at most ([`TRIAL_RELEASES`], as the select
    /// plugin; smaller in tests, to exercise the bound on a few jobs).
    pub trial_releases: usize,
}

impl Default for MigrationSettings {
    /// `c = 8` s per instance, payback 2 on time limits, `move_when =
    /// always`, tidy payback [`DEFAULT_TIDY_PAYBACK`], at most
    /// [`TRIAL_RELEASES`] releases per trial.
    fn default() -> Self {
        Self {
            migration_cost_s: 8.0,
            rule_cost_s: None,
            charge: MigrationCharge::PerInstance,
            payback: MigrationRule::default().payback,
            remaining: RemainingRun::TimeLimit,
            move_when: MoveWhen::Always,
            tidy_payback: DEFAULT_TIDY_PAYBACK,
            trial_releases: TRIAL_RELEASES,
        }
    }
}

impl MigrationSettings {
    /// The cost the cost rule weighs ([`MigrationSettings::rule_cost_s`],
    /// else `c`).
    pub fn rule_cost(&self) -> Seconds {
        self.rule_cost_s.unwrap_or(self.migration_cost_s)
    }

    /// The charges one policy call's migrations make: `(job, count)` per
    /// moved job, by the simulator's job index (`index` of a policy's job
    /// id; ids it does not know are left out), `count` costs of `c` each
    /// ([`MigrationSettings::charge`]: one per migrated instance, or one per
    /// moved job). `starting` is the job admitted in this call: moving it
    /// costs nothing.
    pub(crate) fn charges(
        &self,
        migrations: &[Migration],
        index: impl Fn(JobId) -> Option<usize>,
        starting: Option<usize>,
    ) -> Vec<(usize, u64)> {
        let mut moved: Vec<(usize, u32)> = migrations
            .iter()
            .filter_map(|m| Some((index(m.job)?, m.instance)))
            .filter(|&(j, _)| Some(j) != starting)
            .collect();
        moved.sort_unstable();
        moved.dedup();
        let mut out: Vec<(usize, u64)> = Vec::new();
        for (j, _) in moved {
            match out.last_mut() {
                Some((last, n)) if *last == j => {
                    if self.charge == MigrationCharge::PerInstance {
                        *n += 1;
                    }
                }
                _ => out.push((j, 1)),
            }
        }
        out
    }

    /// Refuses settings no replay can run with: costs must be finite and at
    /// least 0, the payback 0 (always move) or a finite number at least 1,
    /// the tidy payback at least 0 (`inf`: never tidy).
    pub fn validate(&self) -> Result<()> {
        let cost_ok = |c: Seconds| c.is_finite() && c >= 0.0;
        if !cost_ok(self.migration_cost_s) {
            return Err(CoreError::Invalid(format!(
                "migration cost must be >= 0, got {}",
                self.migration_cost_s
            )));
        }
        if let Some(c) = self.rule_cost_s.filter(|&c| !cost_ok(c)) {
            return Err(CoreError::Invalid(format!(
                "the cost rule's migration cost must be >= 0, got {c}"
            )));
        }
        if !(self.payback == 0.0 || (self.payback.is_finite() && self.payback >= 1.0)) {
            return Err(CoreError::Invalid(format!(
                "payback must be 0 (always move) or at least 1, got {}",
                self.payback
            )));
        }
        if self.tidy_payback.is_nan() || self.tidy_payback < 0.0 {
            return Err(CoreError::Invalid(format!(
                "tidy payback must be >= 0 (inf: never tidy), got {}",
                self.tidy_payback
            )));
        }
        Ok(())
    }
}
