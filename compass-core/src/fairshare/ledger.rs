//! The occupancy ledger: one record per job run interval.
//!
//! fair-share-budgets.txt, "Two kinds of occupancy": *allocated* time (min
//! runtime > 0) is charged to the account's budget; *unallocated* time (min
//! runtime 0) is free. Ingest is idempotent: the key is `(job id, start)`, so
//! replaying the same Slurm state twice, or restarting the service, never
//! double-counts. A requeued job that runs again gets a second interval with a
//! new start.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

use super::tree::OrgTree;
use crate::error::{CoreError, Result};
use crate::model::JobId;

/// Unix seconds, as Slurm reports them.
pub type UnixSecs = i64;

/// Charged or free occupancy.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Min runtime > 0: charged to the budget.
    Allocated,
    /// Min runtime 0: free, never protected.
    Unallocated,
}

impl Kind {
    /// The kind of a job's time: the one classification the ledger, the
    /// queue order, enforcement and `compass why` share. *Allocated*
    /// (charged to its team's budget, protected for its min runtime, may
    /// preempt) only when its account is in the budget tree and its min
    /// runtime is > 0; *unallocated* (free, never protected, never
    /// preempting) otherwise, whatever its `--min-runtime`: an account
    /// outside the tree has no budget to charge. Without a tree every job
    /// is unallocated.
    pub fn of_job(tree: Option<&OrgTree>, account: &str, min_runtime_s: u64) -> Self {
        match tree {
            Some(t) if t.leaf_for_account(account).is_ok() => Self::from_min_runtime(min_runtime_s),
            _ => Kind::Unallocated,
        }
    }

    /// The kind a job's min runtime selects, its account aside (see
    /// [`Kind::of_job`], which also asks the tree).
    pub fn from_min_runtime(min_runtime_s: u64) -> Self {
        if min_runtime_s > 0 {
            Kind::Allocated
        } else {
            Kind::Unallocated
        }
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Kind::Allocated => "allocated",
            Kind::Unallocated => "unallocated",
        }
    }
}

/// The identity of a run interval.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IntervalKey {
    pub job: JobId,
    pub start: UnixSecs,
}

/// One run of one job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub job: JobId,
    pub account: String,
    pub gpus: u32,
    pub start: UnixSecs,
    /// `None` while the job still runs (counted up to "now").
    pub end: Option<UnixSecs>,
    pub kind: Kind,
    /// Mean GPU weight of its GPUs ([`super::weights`]), fixed when the run
    /// is first seen: its usage is `gpus x weight x time`. 1.0 by default.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

fn default_weight() -> f64 {
    super::weights::DEFAULT_GPU_WEIGHT
}

impl Interval {
    pub fn key(&self) -> IntervalKey {
        IntervalKey {
            job: self.job,
            start: self.start,
        }
    }

    /// Checks an observed interval on its own.
    pub fn validate(&self) -> Result<()> {
        if self.account.is_empty() {
            return Err(CoreError::Invalid(format!(
                "job {}: field `account`: must not be empty",
                self.job
            )));
        }
        if let Some(end) = self.end {
            if end < self.start {
                return Err(CoreError::Invalid(format!(
                    "job {}: field `end`: {end} is before start {}",
                    self.job, self.start
                )));
            }
        }
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return Err(CoreError::Invalid(format!(
                "job {}: field `weight`: must be a number > 0, got {}",
                self.job, self.weight
            )));
        }
        Ok(())
    }

    /// Weighted GPUs: `gpus x weight`, what one second of this run costs.
    pub fn charge_rate(&self) -> f64 {
        f64::from(self.gpus) * self.weight
    }

    /// Weighted GPU-seconds of this interval inside `[from, to)`, with an
    /// open end counted up to `to`.
    pub fn gpu_seconds_within(&self, from: UnixSecs, to: UnixSecs) -> f64 {
        let end = self.end.unwrap_or(to).min(to);
        let start = self.start.max(from);
        if end <= start {
            return 0.0;
        }
        (end - start) as f64 * self.charge_rate()
    }
}

/// What one ingest did to the ledger.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IngestOutcome {
    /// A new interval.
    Inserted,
    /// A known open interval got its end.
    Closed,
    /// Nothing new (a replay).
    Unchanged,
}

/// All run intervals, keyed by `(job, start)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ledger {
    intervals: BTreeMap<IntervalKey, Interval>,
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.intervals.len()
    }
    pub fn is_empty(&self) -> bool {
        self.intervals.is_empty()
    }
    pub fn get(&self, key: &IntervalKey) -> Option<&Interval> {
        self.intervals.get(key)
    }
    pub fn iter(&self) -> impl Iterator<Item = &Interval> {
        self.intervals.values()
    }

    /// Merges one observation, idempotently. The same interval seen again is
    /// a no-op; an open interval seen closed gets its end; a closed interval is
    /// never reopened or shortened by a stale observation (a later end wins).
    /// An observation whose account, GPUs or kind disagree with the stored
    /// interval of the same key is refused; the weight of the first
    /// observation stays (a run is priced once).
    pub fn ingest(&mut self, obs: Interval) -> Result<IngestOutcome> {
        obs.validate()?;
        match self.intervals.get_mut(&obs.key()) {
            None => {
                self.intervals.insert(obs.key(), obs);
                Ok(IngestOutcome::Inserted)
            }
            Some(cur) => {
                if cur.account != obs.account || cur.gpus != obs.gpus || cur.kind != obs.kind {
                    return Err(CoreError::Invalid(format!(
                        "job {} started at {}: observed account/gpus/kind {}/{}/{} but the ledger has {}/{}/{}",
                        obs.job,
                        obs.start,
                        obs.account,
                        obs.gpus,
                        obs.kind.as_str(),
                        cur.account,
                        cur.gpus,
                        cur.kind.as_str()
                    )));
                }
                match (cur.end, obs.end) {
                    (None, Some(e)) => {
                        cur.end = Some(e);
                        Ok(IngestOutcome::Closed)
                    }
                    (Some(a), Some(b)) if b > a => {
                        cur.end = Some(b);
                        Ok(IngestOutcome::Closed)
                    }
                    _ => Ok(IngestOutcome::Unchanged),
                }
            }
        }
    }

    /// Drops intervals that ended before `cutoff` (they cannot count in any
    /// window that starts at or after it).
    pub fn prune_before(&mut self, cutoff: UnixSecs) {
        self.intervals
            .retain(|_, iv| !matches!(iv.end, Some(e) if e < cutoff));
    }

    /// GPU-seconds per account in `[from, to)`, split by kind.
    pub fn usage(&self, from: UnixSecs, to: UnixSecs) -> HashMap<String, Usage> {
        let mut out: HashMap<String, Usage> = HashMap::new();
        for iv in self.intervals.values() {
            let s = iv.gpu_seconds_within(from, to);
            if s > 0.0 {
                let u = out.entry(iv.account.clone()).or_default();
                match iv.kind {
                    Kind::Allocated => u.charged_gpu_s += s,
                    Kind::Unallocated => u.free_gpu_s += s,
                }
            }
        }
        out
    }
}

/// GPU-seconds of one account (or node) over a window.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Allocated time: charged to the budget.
    pub charged_gpu_s: f64,
    /// Unallocated time: free.
    pub free_gpu_s: f64,
}

impl Usage {
    pub fn add(&mut self, o: &Usage) {
        self.charged_gpu_s += o.charged_gpu_s;
        self.free_gpu_s += o.free_gpu_s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Allocated only for an account in the tree with a min runtime > 0.
    #[test]
    fn a_job_is_allocated_only_in_the_tree_and_with_a_min_runtime() {
        use crate::fairshare::tree::NodeSpec;
        let spec = |name: &str, parent: Option<&str>, account: Option<&str>| NodeSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            share: 1.0,
            managers: vec![],
            account: account.map(Into::into),
        };
        let tree =
            OrgTree::build(&[spec("org", None, None), spec("a", Some("org"), Some("a"))]).unwrap();
        let t = Some(&tree);
        assert_eq!(Kind::of_job(t, "a", 600), Kind::Allocated);
        assert_eq!(Kind::of_job(t, "a", 0), Kind::Unallocated);
        assert_eq!(Kind::of_job(t, "ghost", 600), Kind::Unallocated);
        assert_eq!(Kind::of_job(None, "a", 600), Kind::Unallocated);
    }

    fn iv(job: u64, acct: &str, gpus: u32, start: i64, end: Option<i64>, kind: Kind) -> Interval {
        Interval {
            job: JobId(job),
            account: acct.into(),
            gpus,
            start,
            end,
            kind,
            weight: 1.0,
        }
    }

    #[test]
    fn ingest_is_idempotent_and_closes_open_intervals() {
        let mut l = Ledger::new();
        assert_eq!(
            l.ingest(iv(1, "a", 4, 100, None, Kind::Allocated)).unwrap(),
            IngestOutcome::Inserted
        );
        assert_eq!(
            l.ingest(iv(1, "a", 4, 100, None, Kind::Allocated)).unwrap(),
            IngestOutcome::Unchanged
        );
        assert_eq!(
            l.ingest(iv(1, "a", 4, 100, Some(200), Kind::Allocated))
                .unwrap(),
            IngestOutcome::Closed
        );
        // A stale replay of the running state does not reopen it.
        assert_eq!(
            l.ingest(iv(1, "a", 4, 100, None, Kind::Allocated)).unwrap(),
            IngestOutcome::Unchanged
        );
        assert_eq!(l.len(), 1);
        // A requeued run is a second interval.
        assert_eq!(
            l.ingest(iv(1, "a", 4, 300, None, Kind::Allocated)).unwrap(),
            IngestOutcome::Inserted
        );
        let u = l.usage(0, 400);
        assert_eq!(u["a"].charged_gpu_s, 4.0 * 100.0 + 4.0 * 100.0);
    }

    #[test]
    fn conflicting_observation_is_refused() {
        let mut l = Ledger::new();
        l.ingest(iv(1, "a", 4, 100, None, Kind::Allocated)).unwrap();
        assert!(l.ingest(iv(1, "b", 4, 100, None, Kind::Allocated)).is_err());
        assert!(l
            .ingest(iv(2, "a", 4, 100, Some(50), Kind::Allocated))
            .unwrap_err()
            .to_string()
            .contains("`end`"));
        assert!(l.ingest(iv(2, "", 4, 100, None, Kind::Allocated)).is_err());
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn usage_clips_to_window_and_splits_kinds() {
        let mut l = Ledger::new();
        l.ingest(iv(1, "a", 2, 0, Some(100), Kind::Allocated))
            .unwrap();
        l.ingest(iv(2, "a", 8, 50, Some(150), Kind::Unallocated))
            .unwrap();
        l.ingest(iv(3, "b", 1, 90, None, Kind::Allocated)).unwrap();
        let u = l.usage(60, 120);
        assert_eq!(u["a"].charged_gpu_s, 2.0 * 40.0);
        assert_eq!(u["a"].free_gpu_s, 8.0 * 60.0);
        assert_eq!(u["b"].charged_gpu_s, 30.0);
        l.prune_before(120);
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn weighted_runs_are_charged_gpus_times_weight_times_time() {
        let mut l = Ledger::new();
        // 2 a100 GPUs at weight 2 for 100 s, 4 l40s GPUs at weight 1 for 100 s.
        let mut a = iv(1, "a", 2, 0, Some(100), Kind::Allocated);
        a.weight = 2.0;
        l.ingest(a.clone()).unwrap();
        l.ingest(iv(2, "b", 4, 0, Some(100), Kind::Allocated))
            .unwrap();
        let u = l.usage(0, 100);
        assert_eq!(u["a"].charged_gpu_s, 2.0 * 2.0 * 100.0);
        assert_eq!(u["b"].charged_gpu_s, 4.0 * 100.0);
        // The run keeps its first price.
        a.weight = 5.0;
        assert_eq!(l.ingest(a.clone()).unwrap(), IngestOutcome::Unchanged);
        assert_eq!(l.usage(0, 100)["a"].charged_gpu_s, 400.0);
        a.weight = 0.0;
        a.job = JobId(9);
        assert!(l.ingest(a).unwrap_err().to_string().contains("`weight`"));
    }

    fn arb_interval() -> impl Strategy<Value = Interval> {
        (
            0u64..20,
            0usize..3,
            1u32..9,
            0i64..1000,
            proptest::option::of(0i64..500),
            any::<bool>(),
        )
            .prop_map(|(job, a, gpus, start, dur, alloc)| {
                iv(
                    job,
                    ["a", "b", "c"][a],
                    gpus,
                    start,
                    dur.map(|d| start + d),
                    if alloc {
                        Kind::Allocated
                    } else {
                        Kind::Unallocated
                    },
                )
            })
    }

    proptest! {
        /// Replaying any stream of observations a second time changes nothing.
        #[test]
        fn replay_never_double_counts(obs in proptest::collection::vec(arb_interval(), 0..40)) {
            let mut once = Ledger::new();
            for o in &obs { let _ = once.ingest(o.clone()); }
            let mut twice = once.clone();
            for o in &obs { let _ = twice.ingest(o.clone()); }
            prop_assert_eq!(&once, &twice);
            // Usage is bounded by GPUs x window for every account.
            let total_gpus: u32 = once.iter().map(|i| i.gpus).sum();
            for u in once.usage(100, 600).values() {
                prop_assert!(u.charged_gpu_s + u.free_gpu_s <= f64::from(total_gpus) * 500.0 + 1e-6);
            }
        }
    }
}
