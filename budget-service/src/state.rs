//! Shared service state and the read-side computations behind the API, the
//! dashboard and the metrics (tree with usage and ratios, owed vs delivered).

use compass_core::clock::Clock;
use compass_core::fairshare::{self, OrgTree, Placed, UnixSecs, Usage};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use crate::auth::Authenticator;
use crate::config::Config;
use crate::db::Db;
use crate::error::Result;
use crate::slurm::{SlurmActions, SlurmJob, SlurmNode};

/// A clock the service threads can share.
pub type SharedClock = Arc<dyn Clock + Send + Sync>;

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> f64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    }
}

/// A settable clock for tests (whole seconds).
#[derive(Default)]
pub struct TestClock(pub AtomicI64);

impl TestClock {
    pub fn new(t: i64) -> Self {
        Self(AtomicI64::new(t))
    }
    pub fn set(&self, t: i64) {
        self.0.store(t, Ordering::SeqCst);
    }
    pub fn advance(&self, dt: i64) {
        self.0.fetch_add(dt, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now(&self) -> f64 {
        self.0.load(Ordering::SeqCst) as f64
    }
}

/// The queue order of the last successful cycle, shared read-only (`Arc`)
/// with the request handlers.
#[derive(Debug, Default, Serialize)]
pub struct QueueView {
    /// When it was computed (Unix seconds); 0: never.
    pub at: UnixSecs,
    pub order: Vec<Placed>,
    /// The site factor pushed to Slurm for each job of `order`.
    #[serde(skip)]
    pub factors: HashMap<compass_core::model::JobId, u32>,
    /// The mean GPU weight (`[gpu_weights]`) of each job of `order`.
    #[serde(skip)]
    pub weights: HashMap<compass_core::model::JobId, f64>,
    /// The owner of each job of `order` (empty: unknown).
    #[serde(skip)]
    pub users: HashMap<compass_core::model::JobId, String>,
    /// `[gpu_weights]` weighs some type other than 1.0.
    #[serde(skip)]
    pub weighted: bool,
    /// The serialized `GET /api/v1/queue` body, built on first request.
    #[serde(skip)]
    pub json: std::sync::OnceLock<axum::body::Bytes>,
}

/// Health of the Slurm cycle.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CycleStatus {
    pub slurm_connected: bool,
    pub last_ok: Option<UnixSecs>,
    pub last_error: Option<String>,
    pub cycles_ok: u64,
    pub cycles_failed: u64,
    pub factors_pushed: u64,
    /// Enforcement actions since start-up: requeued and cancelled victims,
    /// faulty nodes drained by the cycle, failed actions.
    pub requeued: u64,
    pub cancelled: u64,
    pub drained: u64,
    pub actions_failed: u64,
    /// Pending jobs of the last cycle whose Slurm priority is not compass's
    /// factor (slurm.conf's other `PriorityWeight*` are not 0: expected,
    /// the margin keeps the order).
    pub priority_offset_jobs: u64,
    /// Pending jobs of the last cycle that Slurm's priorities put out of
    /// compass's order within their tier (should be 0; issue 12).
    pub priority_inversion_jobs: u64,
    /// The spacing of compass's site factors: above what slurm.conf's
    /// other priority terms can add.
    pub priority_margin: crate::slurm::priority::Margin,
    /// Where the QOS priorities of the order came from.
    pub qos_priorities: String,
    /// slurm.conf's `PreemptType` when it is not `preempt/none`.
    pub slurm_preemption: Option<String>,
    /// Why compass preempted no one in the last cycle although enforcement
    /// is on (Slurm preempts on its own).
    pub enforcement_held: Option<String>,
    /// Runs of the last cycle left out of the ledger (their interval does
    /// not validate: a job without an account); each is warned about once.
    pub skipped_runs: u64,
    /// Why the cycle prunes nothing (`retain_days`): the clock reads more
    /// than a day past the service's last cycle.
    pub pruning_held: Option<String>,
}

pub struct AppState {
    pub config: Config,
    pub db: Mutex<Db>,
    pub auth: Arc<dyn Authenticator>,
    pub clock: SharedClock,
    pub queue: RwLock<Arc<QueueView>>,
    pub status: Mutex<CycleStatus>,
    /// Slurm actions for enforcement and `compass node fault|repaired`; set
    /// once at start-up when the service acts on Slurm.
    pub slurm_actions: OnceLock<Arc<dyn SlurmActions>>,
    /// Nodes and running jobs of the last snapshot (node commands check
    /// names against them; `compass why` shows protections).
    pub seen: Mutex<Seen>,
    /// Bounds the requests doing blocking work at once (MUNGE, passwd,
    /// SQLite, Slurm actions): each holds a slot while its work runs on
    /// tokio's blocking pool, so a hung dependency ties up at most
    /// [`BLOCKING_SLOTS`] threads and later requests get a quick 503.
    pub blocking_slots: Arc<tokio::sync::Semaphore>,
    /// The cluster's weighted capacity of the last cycle ([`Self::capacity`]).
    pub capacity: Mutex<Option<f64>>,
    /// Events counted for `/metrics`.
    pub metrics: crate::metrics::Metrics,
    /// The last read of the select plugin's state file.
    pub select: Mutex<crate::select_state::SelectRead>,
    /// Who may read what (Slurm's `PrivateData`; [`crate::privacy`]).
    pub reads: RwLock<crate::privacy::ReadPolicy>,
}

/// Requests that may do blocking work at the same time.
pub const BLOCKING_SLOTS: usize = 32;

/// What the last snapshot showed, for the node commands and `compass why`.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub nodes: Vec<SlurmNode>,
    pub running: HashMap<u64, SlurmJob>,
}

/// Tree, usage per account and per-node stats over one window.
pub type WindowStats = (OrgTree, HashMap<String, Usage>, Vec<fairshare::NodeStats>);

/// One node of the tree with its numbers over a window.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub parent: Option<String>,
    pub share: f64,
    pub abs_share: f64,
    /// `abs_share x capacity`, in weighted GPUs (`[gpu_weights]`).
    pub allocation_gpus: f64,
    pub account: Option<String>,
    pub managers: Vec<String>,
    pub depth: usize,
    pub charged_gpu_hours: f64,
    pub free_gpu_hours: f64,
    /// `None` when the node has no budget (infinite ratio).
    pub ratio: Option<f64>,
}

/// Owed vs delivered GPU-hours of one team.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OwedRow {
    pub team: String,
    pub account: String,
    pub owed_gpu_hours: f64,
    pub delivered_gpu_hours: f64,
    /// Delivered capped hourly at owed, over owed (1.0 when nothing was owed).
    pub delivered_fraction: f64,
}

impl AppState {
    pub fn new(
        config: Config,
        db: Db,
        auth: Arc<dyn Authenticator>,
        clock: SharedClock,
    ) -> Arc<Self> {
        let reads = crate::privacy::ReadPolicy::load(&config);
        tracing::info!(private_data = %reads.private.text(), source = %reads.source, "PrivateData for reads");
        Arc::new(Self {
            reads: RwLock::new(reads),
            config,
            db: Mutex::new(db),
            auth,
            clock,
            queue: RwLock::new(Arc::new(QueueView::default())),
            status: Mutex::new(CycleStatus::default()),
            slurm_actions: OnceLock::new(),
            seen: Mutex::new(Seen::default()),
            blocking_slots: Arc::new(tokio::sync::Semaphore::new(BLOCKING_SLOTS)),
            capacity: Mutex::new(None),
            metrics: crate::metrics::Metrics::default(),
            select: Mutex::new(crate::select_state::SelectRead::default()),
        })
    }

    /// The read policy in force.
    pub fn read_policy(&self) -> crate::privacy::ReadPolicy {
        self.reads.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Re-reads `PrivateData` (SIGHUP, after Slurm's reconfigure).
    pub fn reload_reads(&self) {
        let new = crate::privacy::ReadPolicy::load(&self.config);
        tracing::info!(private_data = %new.private.text(), source = %new.source, "PrivateData re-read");
        *self.reads.write().unwrap_or_else(|e| e.into_inner()) = new;
    }

    /// The Slurm actions, if this service acts on Slurm.
    pub fn actions(&self) -> Option<Arc<dyn SlurmActions>> {
        self.slurm_actions.get().cloned()
    }

    /// Nodes of the last snapshot (empty: unknown).
    pub fn nodes(&self) -> Vec<SlurmNode> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .nodes
            .clone()
    }

    /// A running job of the last snapshot.
    pub fn running_job(&self, job: u64) -> Option<SlurmJob> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .running
            .get(&job)
            .cloned()
    }

    /// The cluster's capacity in weighted GPUs (`[gpu_weights]`): the
    /// nodes' of the last cycle, else the config's `capacity_gpus`.
    pub fn capacity(&self) -> f64 {
        self.capacity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or(f64::from(self.config.capacity_gpus))
    }

    pub fn set_capacity(&self, c: f64) {
        *self.capacity.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
    }

    /// The last read of the select plugin's state file.
    pub fn select_read(&self) -> crate::select_state::SelectRead {
        self.select
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_select_read(&self, read: crate::select_state::SelectRead) {
        *self.select.lock().unwrap_or_else(|e| e.into_inner()) = read;
    }

    pub fn set_seen(&self, seen: Seen) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen;
    }

    pub fn now(&self) -> UnixSecs {
        fairshare::now_secs(self.clock.as_ref())
    }

    pub fn db(&self) -> MutexGuard<'_, Db> {
        self.db.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn status(&self) -> MutexGuard<'_, CycleStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn queue(&self) -> Arc<QueueView> {
        self.queue.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_queue(&self, q: QueueView) {
        *self.queue.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(q);
    }

    /// Tree, usage per account over `[from, to)` and node stats.
    pub fn stats(&self, from: UnixSecs, to: UnixSecs) -> Result<Option<WindowStats>> {
        let db = self.db();
        let Some(tree) = db.load_tree()? else {
            return Ok(None);
        };
        let usage = db.usage_between(from, to)?;
        drop(db);
        let stats = fairshare::node_stats(&tree, &usage, self.capacity(), to - from);
        Ok(Some((tree, usage, stats)))
    }

    /// Every node with allocation, usage and ratio over `[from, to)`, in
    /// pre-order from the root.
    pub fn tree_view(&self, from: UnixSecs, to: UnixSecs) -> Result<Vec<NodeView>> {
        let Some((tree, _usage, stats)) = self.stats(from, to)? else {
            return Ok(Vec::new());
        };
        let capacity = self.capacity();
        Ok(tree
            .subtree(tree.root())
            .into_iter()
            .map(|ix| {
                let n = tree.node(ix);
                let s = &stats[ix];
                NodeView {
                    name: n.name.clone(),
                    parent: n.parent.map(|p| tree.node(p).name.clone()),
                    share: n.share,
                    abs_share: n.abs_share,
                    allocation_gpus: n.abs_share * capacity,
                    account: n.account.clone(),
                    managers: n.managers.clone(),
                    depth: n.depth,
                    charged_gpu_hours: s.usage.charged_gpu_s / 3600.0,
                    free_gpu_hours: s.usage.free_gpu_s / 3600.0,
                    ratio: s.ratio.is_finite().then_some(s.ratio),
                }
            })
            .collect())
    }

    /// Owed vs delivered GPU-hours per team over `[from, to)`, hour by hour:
    /// owed = allocation capped at the team's demand in that hour; delivered
    /// = charged GPU-time (fair-share-budgets.txt, "Evidence").
    pub fn owed_report(&self, from: UnixSecs, to: UnixSecs) -> Result<Vec<OwedRow>> {
        let db = self.db();
        let Some(tree) = db.load_tree()? else {
            return Ok(Vec::new());
        };
        let ledger = db.ledger_between(from, to)?;
        let demand = db.demand_between(from, to)?;
        drop(db);
        let mut demand_h: HashMap<(i64, String), f64> = HashMap::new();
        for (h, a, g) in demand {
            *demand_h.entry((h, a)).or_default() += g;
        }
        let mut delivered_h: HashMap<(i64, String), f64> = HashMap::new();
        for iv in ledger
            .iter()
            .filter(|i| i.kind == fairshare::Kind::Allocated)
        {
            let end = iv.end.unwrap_or(to).min(to);
            let mut t = iv.start.max(from);
            while t < end {
                let h = t.div_euclid(3600);
                let next = ((h + 1) * 3600).min(end);
                *delivered_h.entry((h, iv.account.clone())).or_default() +=
                    (next - t) as f64 * iv.charge_rate();
                t = next;
            }
        }
        let capacity = self.capacity();
        let mut rows = Vec::new();
        for ix in tree.subtree(tree.root()) {
            let n = tree.node(ix);
            let Some(acct) = &n.account else { continue };
            let alloc_per_hour = n.abs_share * capacity * 3600.0;
            let (mut owed, mut delivered, mut capped) = (0.0, 0.0, 0.0);
            for h in from.div_euclid(3600)..to.div_euclid(3600).max(from.div_euclid(3600) + 1) {
                let key = (h, acct.clone());
                let d = demand_h.get(&key).copied().unwrap_or(0.0);
                let got = delivered_h.get(&key).copied().unwrap_or(0.0);
                let o = alloc_per_hour.min(d);
                owed += o;
                delivered += got;
                capped += got.min(o);
            }
            rows.push(OwedRow {
                team: n.name.clone(),
                account: acct.clone(),
                owed_gpu_hours: owed / 3600.0,
                delivered_gpu_hours: delivered / 3600.0,
                delivered_fraction: if owed > 0.0 { capped / owed } else { 1.0 },
            });
        }
        Ok(rows)
    }
}
