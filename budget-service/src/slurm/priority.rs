//! How compass's order lives beside the site's Slurm priority setup
//! (issue 12, `docs/admin-guide.md`, "Living with the site's Slurm setup").
//!
//! Slurm 22.05's multifactor priority (`priority_multifactor.c`,
//! `_get_priority_internal`) of a pending job is
//!
//! ```text
//! priority = w_age * age + w_assoc * assoc + w_fs * fs + w_js * js
//!          + w_part * part + w_qos * qos + sum_t w_tres[t] * tres[t]
//!          + site_factor - nice                (floored at 1)
//! ```
//!
//! where every factor is normalised to `[0, 1]` (the QOS factor is the QOS
//! priority over the highest QOS priority, the partition factor its
//! `PriorityJobFactor` over the highest, a TRES factor the job's count over
//! the partition's) unless `PriorityFlags=NO_NORMAL_*` says otherwise.
//! Partition `PriorityTier` is not a term: the scheduler takes higher tiers
//! first whatever the priorities.
//!
//! So every term besides the site factor lies in `[0, W]` with `W` the sum
//! of the weights: when compass's site factors are more than `W` apart
//! (the *margin*, [`PriorityConf::margin`]), no term can move a job past
//! another, and Slurm's priority order is compass's order whatever the
//! site's weights. compass's order is by tier, then QOS priority (when
//! `PriorityWeightQOS` > 0, the site weighs QOS), then fair share.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

use compass_core::fairshare::Placed;
use compass_core::model::JobId;

use crate::error::{BudgetError, Result};

/// `PRIORITY_FLAGS_NO_NORMAL_*` of slurm.h: the factor is not normalised.
pub const NO_NORMAL_ASSOC: u16 = 1 << 7;
pub const NO_NORMAL_PART: u16 = 1 << 8;
pub const NO_NORMAL_QOS: u16 = 1 << 9;
pub const NO_NORMAL_TRES: u16 = 1 << 10;

/// The priority and preemption settings of slurm.conf that compass's order
/// depends on (`slurm_load_ctl_conf`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityConf {
    /// `PriorityType` (`priority/multifactor` is needed for site factors).
    pub priority_type: String,
    pub weight_age: u32,
    pub weight_assoc: u32,
    pub weight_fairshare: u32,
    pub weight_job_size: u32,
    pub weight_partition: u32,
    pub weight_qos: u32,
    /// `PriorityWeightTRES` as written (`CPU=1000,Mem=2000,GRES/gpu=3000`).
    pub weight_tres: String,
    /// `PriorityFlags` bits.
    pub flags: u16,
    /// `PreemptType` (`preempt/none`, `preempt/qos`, `preempt/partition_prio`).
    pub preempt_type: String,
    /// `AccountingStorageType` (QOS priorities live in slurmdbd).
    pub accounting_storage_type: String,
}

/// The spacing of compass's site factors, and how it was found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Margin {
    /// Site factors of consecutive jobs are at least this far apart: a
    /// power of two above the largest sum the other terms can reach.
    pub spacing: u32,
    /// The bound on the other terms, from the weights (and measured
    /// offsets where a `NO_NORMAL_*` flag leaves a term unbounded).
    pub bound: u64,
    /// A term has no bound from the weights alone (`NO_NORMAL_ASSOC`,
    /// `NO_NORMAL_PART`, `NO_NORMAL_TRES`): the bound includes twice the
    /// largest offset measured on pending jobs, and can be exceeded.
    pub measured: bool,
}

impl PriorityConf {
    /// The sum of `PriorityWeightTRES`'s weights (`None`: unparsable).
    pub fn tres_weight_sum(&self) -> Option<f64> {
        let mut sum = 0.0;
        for part in self.weight_tres.split(',').filter(|p| !p.trim().is_empty()) {
            let (_, w) = part.split_once('=')?;
            let w: f64 = w.trim().parse().ok()?;
            if !w.is_finite() || w < 0.0 {
                return None;
            }
            sum += w;
        }
        Some(sum)
    }

    /// Does the site weigh QOS priorities (`PriorityWeightQOS` > 0)? Only
    /// then does a QOS priority order jobs, in Slurm as in compass.
    pub fn qos_weighted(&self) -> bool {
        self.weight_qos > 0
    }

    /// Slurm's own preemption, when `PreemptType` is not `preempt/none`.
    pub fn slurm_preemption(&self) -> Option<&str> {
        let t = self.preempt_type.trim();
        (!t.is_empty() && t != "preempt/none").then_some(t)
    }

    /// Is there an accounting database (where QOS priorities live)?
    pub fn has_slurmdbd(&self) -> bool {
        self.accounting_storage_type.contains("slurmdbd")
    }

    /// The spacing compass's site factors need so that no other term of
    /// the multifactor sum reorders them (module doc). `max_qos_priority`:
    /// the highest QOS priority (for `NO_NORMAL_QOS`); `max_offset`: the
    /// largest offset Slurm adds to a pending job now (for terms the
    /// weights do not bound).
    pub fn margin(&self, max_qos_priority: u32, max_offset: i64) -> Margin {
        let mut bound = u64::from(self.weight_age)
            + u64::from(self.weight_fairshare)
            + u64::from(self.weight_job_size);
        let mut measured = false;
        if self.flags & NO_NORMAL_ASSOC != 0 {
            measured = true;
        } else {
            bound += u64::from(self.weight_assoc);
        }
        if self.flags & NO_NORMAL_PART != 0 {
            measured = true;
        } else {
            bound += u64::from(self.weight_partition);
        }
        bound += if self.flags & NO_NORMAL_QOS != 0 {
            u64::from(self.weight_qos) * u64::from(max_qos_priority)
        } else {
            u64::from(self.weight_qos)
        };
        match self.tres_weight_sum() {
            Some(s) if self.flags & NO_NORMAL_TRES == 0 => bound += s.ceil() as u64,
            _ => measured = true,
        }
        if measured {
            bound = bound.max(2 * max_offset.max(0) as u64);
        }
        // A power of two: the spacing stays put while measured offsets
        // move, so keys are not renumbered every cycle.
        let spacing = (bound + 1)
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX)
            .min(u64::from(u32::MAX / 2)) as u32;
        Margin {
            spacing,
            bound,
            measured,
        }
    }
}

/// QOS priorities by QOS name, and where they came from (shown in
/// `/healthz` as `cycle.qos_priorities`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosPriorities {
    pub by_name: BTreeMap<String, u32>,
    /// `not weighed (PriorityWeightQOS=0)`, `none: no accounting database
    /// ...`, `sacctmgr`, or why sacctmgr failed.
    pub source: String,
}

/// Reads `sacctmgr show qos format=name,priority -P -n` output
/// (`normal|0`, one QOS a line).
pub fn parse_qos_priorities(text: &str) -> Result<BTreeMap<String, u32>> {
    let mut m = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, prio) = line.split_once('|').ok_or_else(|| {
            BudgetError::Slurm(format!("sacctmgr: expected `name|priority`, got `{line}`"))
        })?;
        let prio = prio.trim_end_matches('|');
        let p: u32 = if prio.is_empty() {
            0
        } else {
            prio.parse().map_err(|_| {
                BudgetError::Slurm(format!("sacctmgr: QOS `{name}` has priority `{prio}`"))
            })?
        };
        m.insert(name.to_string(), p);
    }
    Ok(m)
}

/// Jobs that Slurm's priorities put out of compass's order: walking
/// `order`, within each partition tier, a job whose Slurm priority is not
/// below the priority of the job before it. Only jobs whose factor did not
/// change this cycle (`held == pushed`) and with a priority are compared
/// (the others' priorities reflect a factor that is being replaced). A job
/// given a priority by hand (`scontrol update Priority=`) shows here.
pub fn inversions(
    order: &[Placed],
    held: &HashMap<JobId, u32>,
    pushed: &HashMap<JobId, u32>,
    slurm_priority: &HashMap<JobId, u32>,
) -> Vec<JobId> {
    let mut out = Vec::new();
    let mut prev: Option<(u16, u32)> = None;
    for p in order {
        let j = p.job.job;
        let settled = held.get(&j).is_some() && held.get(&j) == pushed.get(&j);
        let Some(&prio) = slurm_priority.get(&j).filter(|_| settled) else {
            continue;
        };
        if let Some((tier, before)) = prev {
            if tier == p.job.tier && prio >= before {
                out.push(j);
            }
        }
        prev = Some((p.job.tier, prio));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf() -> PriorityConf {
        PriorityConf {
            priority_type: "priority/multifactor".into(),
            weight_age: 1000,
            weight_job_size: 2000,
            weight_qos: 10_000,
            weight_tres: "CPU=100,Mem=0.5,GRES/gpu=300".into(),
            preempt_type: "preempt/none".into(),
            ..PriorityConf::default()
        }
    }

    #[test]
    fn the_margin_bounds_every_other_term() {
        let m = conf().margin(0, 0);
        assert_eq!(m.bound, 1000 + 2000 + 10_000 + 401);
        assert_eq!(m.spacing, 16_384);
        assert!(!m.measured);
        // All weights 0: one apart, as before issue 12.
        assert_eq!(PriorityConf::default().margin(0, 0).spacing, 1);
        // NO_NORMAL_QOS: the raw QOS priority times its weight.
        let mut c = conf();
        c.flags = NO_NORMAL_QOS;
        assert_eq!(c.margin(50, 0).bound, 3000 + 401 + 500_000);
        // NO_NORMAL_TRES: no bound from weights; twice the offset measured.
        c.flags = NO_NORMAL_TRES;
        let m = c.margin(0, 40_000);
        assert!(m.measured);
        assert_eq!(m.bound, 80_000);
        assert_eq!(m.spacing, 131_072);
        // An unparsable TRES weight counts as unbounded too.
        c.flags = 0;
        c.weight_tres = "CPU=lots".into();
        assert!(c.margin(0, 0).measured);
    }

    #[test]
    fn preemption_and_accounting_are_read_from_the_names() {
        let mut c = conf();
        assert_eq!(c.slurm_preemption(), None);
        c.preempt_type = "preempt/qos".into();
        assert_eq!(c.slurm_preemption(), Some("preempt/qos"));
        c.preempt_type = String::new();
        assert_eq!(c.slurm_preemption(), None);
        assert!(!c.has_slurmdbd());
        c.accounting_storage_type = "accounting_storage/slurmdbd".into();
        assert!(c.has_slurmdbd());
        assert!(c.qos_weighted());
    }

    #[test]
    fn sacctmgr_qos_lines_are_parsed_and_bad_ones_refused() {
        let m = parse_qos_priorities("normal|0\nhigh|100\nscavenger|\n\n").unwrap();
        assert_eq!(m["high"], 100);
        assert_eq!(m["scavenger"], 0);
        assert_eq!(m.len(), 3);
        assert!(parse_qos_priorities("normal 0").is_err());
        assert!(parse_qos_priorities("high|-3").is_err());
    }
}
