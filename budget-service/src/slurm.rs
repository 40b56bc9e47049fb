//! Slurm I/O behind traits, so the cycle runs the same against real Slurm and
//! against the in-memory [`FakeSlurm`] of the tests.
//!
//! Sources: [`libslurm::LibSlurm`] (`slurm = "libslurm"`: the real
//! controller through libslurm), [`FileSlurm`] (`slurm = "file"`: demos and
//! browser tests) and none (`slurm = "none"`: API and ledger ingest endpoint
//! only).

use compass_core::fairshare::{Interval, Kind, PendingJob, UnixSecs};
use compass_core::model::JobId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::error::{BudgetError, Result};

mod ffi;
pub mod libslurm;

/// State of one job as the service needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub job: JobId,
    pub account: String,
    /// Total GPUs of the job.
    pub gpus: u32,
    /// From the SPANK `--min-runtime` option (0: unallocated time).
    pub min_runtime_s: u64,
    /// From the SPANK `--resumable` option.
    pub resumable: bool,
    /// Job priority within its team: minus Slurm's nice value.
    pub priority: i64,
    pub submit: UnixSecs,
    /// Start of the current run (running and ended jobs).
    pub start: Option<UnixSecs>,
    /// End of the run (ended jobs still reported by Slurm).
    pub end: Option<UnixSecs>,
}

impl SlurmJob {
    pub fn kind(&self) -> Kind {
        Kind::from_min_runtime(self.min_runtime_s)
    }

    pub fn as_pending(&self) -> PendingJob {
        PendingJob {
            job: self.job,
            account: self.account.clone(),
            gpus: self.gpus,
            min_runtime_s: self.min_runtime_s,
            priority: self.priority,
            submit: self.submit,
        }
    }

    /// The ledger interval of a running or ended job.
    pub fn as_interval(&self) -> Option<Interval> {
        Some(Interval {
            job: self.job,
            account: self.account.clone(),
            gpus: self.gpus,
            start: self.start?,
            end: self.end,
            kind: self.kind(),
        })
    }
}

/// One read of the controller's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmSnapshot {
    pub pending: Vec<SlurmJob>,
    pub running: Vec<SlurmJob>,
    /// Jobs that ended recently and are still reported (with `end`).
    pub ended: Vec<SlurmJob>,
    /// GPUs of every node (`Gres=gpu:N` summed), when the source knows them;
    /// otherwise the config's `capacity_gpus` is the cluster's capacity.
    #[serde(default)]
    pub capacity_gpus: Option<u32>,
}

/// Reads jobs from Slurm.
pub trait SlurmSource: Send + Sync {
    fn snapshot(&self) -> Result<SlurmSnapshot>;
}

/// Writes the order into Slurm.
pub trait SlurmSink: Send + Sync {
    /// Sets the site factor of the given jobs (only those that changed).
    fn set_site_factors(&self, factors: &[(JobId, u32)]) -> Result<()>;
}

/// An in-memory Slurm: jobs submitted, started and ended by the test, and a
/// record of every site-factor update pushed to it.
#[derive(Default)]
pub struct FakeSlurm {
    inner: Mutex<FakeInner>,
}

#[derive(Default)]
struct FakeInner {
    jobs: BTreeMap<JobId, SlurmJob>,
    down: bool,
    factors: HashMap<JobId, u32>,
    pushes: Vec<Vec<(JobId, u32)>>,
}

impl FakeSlurm {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces a job.
    pub fn put(&self, job: SlurmJob) {
        self.lock().jobs.insert(job.job, job);
    }
    pub fn start(&self, job: JobId, at: UnixSecs) {
        if let Some(j) = self.lock().jobs.get_mut(&job) {
            j.start = Some(at);
            j.end = None;
        }
    }
    pub fn end(&self, job: JobId, at: UnixSecs) {
        if let Some(j) = self.lock().jobs.get_mut(&job) {
            j.end = Some(at);
        }
    }
    /// Forgets a job (as Slurm does after MinJobAge).
    pub fn purge(&self, job: JobId) {
        self.lock().jobs.remove(&job);
    }
    /// Simulates a controller that does not answer.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }
    /// The current site factor of every job.
    pub fn factors(&self) -> HashMap<JobId, u32> {
        self.lock().factors.clone()
    }
    /// Every push, in order.
    pub fn pushes(&self) -> Vec<Vec<(JobId, u32)>> {
        self.lock().pushes.clone()
    }
    /// Pending jobs as Slurm would order them: by site factor, descending,
    /// then job id (what `squeue --sort=-p` shows with all other weights 0).
    pub fn pending_order(&self) -> Vec<JobId> {
        let g = self.lock();
        let mut v: Vec<(u32, JobId)> = g
            .jobs
            .values()
            .filter(|j| j.start.is_none())
            .map(|j| (g.factors.get(&j.job).copied().unwrap_or(0), j.job))
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v.into_iter().map(|(_, j)| j).collect()
    }
}

impl SlurmSource for FakeSlurm {
    fn snapshot(&self) -> Result<SlurmSnapshot> {
        let g = self.lock();
        if g.down {
            return Err(BudgetError::Slurm(
                "slurmctld is not responding (fake)".into(),
            ));
        }
        let mut s = SlurmSnapshot::default();
        for j in g.jobs.values() {
            match (j.start, j.end) {
                (None, _) => s.pending.push(j.clone()),
                (Some(_), None) => s.running.push(j.clone()),
                (Some(_), Some(_)) => s.ended.push(j.clone()),
            }
        }
        Ok(s)
    }
}

impl SlurmSink for FakeSlurm {
    fn set_site_factors(&self, factors: &[(JobId, u32)]) -> Result<()> {
        let mut g = self.lock();
        if g.down {
            return Err(BudgetError::Slurm(
                "slurmctld is not responding (fake)".into(),
            ));
        }
        for (j, f) in factors {
            g.factors.insert(*j, *f);
        }
        g.pushes.push(factors.to_vec());
        Ok(())
    }
}

/// A Slurm stand-in backed by files, for demos and browser tests: each
/// snapshot is read from a JSON file ([`SlurmSnapshot`]); pushed site factors
/// are merged into `<file>.factors.json`.
pub struct FileSlurm {
    pub path: std::path::PathBuf,
}

impl FileSlurm {
    fn factors_path(&self) -> std::path::PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(".factors.json");
        p.into()
    }
}

impl SlurmSource for FileSlurm {
    fn snapshot(&self) -> Result<SlurmSnapshot> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| BudgetError::Slurm(format!("{}: {e}", self.path.display())))?;
        serde_json::from_str(&text)
            .map_err(|e| BudgetError::Slurm(format!("{}: {e}", self.path.display())))
    }
}

impl SlurmSink for FileSlurm {
    fn set_site_factors(&self, factors: &[(JobId, u32)]) -> Result<()> {
        let p = self.factors_path();
        let mut all: BTreeMap<u64, u32> = std::fs::read_to_string(&p)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        for (j, f) in factors {
            all.insert(j.0, *f);
        }
        let text = serde_json::to_string(&all).map_err(|e| BudgetError::Slurm(e.to_string()))?;
        std::fs::write(&p, text).map_err(|e| BudgetError::Slurm(format!("{}: {e}", p.display())))
    }
}
