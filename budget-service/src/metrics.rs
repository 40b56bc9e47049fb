//! `GET /metrics`: the service's figures in the Prometheus/OpenMetrics text
//! format, through the `prometheus-client` crate.
//!
//! Two kinds of figures:
//! - events the cycle counts as they happen ([`Metrics`], kept in
//!   [`AppState`]): cycles and their outcome, cycle latency, Slurm RPC
//!   errors, site-factor updates, preemptions by rule, node drains, wait
//!   times by job size, GPU-seconds used per team;
//! - the state at scrape time ([`encode`]): queue length, per-team
//!   allocation and fair-share figures over the window, nodes and GPUs per
//!   pool from the last Slurm snapshot, and the select plugin's published
//!   state ([`crate::select_state`]).
//!
//! Conventions (Prometheus naming): base units (`_seconds`, GPU counts),
//! `_total` on counters, HELP on every metric, outcomes in an `outcome`
//! label, org units in a `team` label, and a figure the service does not
//! know is absent, never a sentinel. The list of metrics is in
//! `docs/admin-guide.md` ("Monitoring"), checked against a real scrape by
//! `tests/metrics_scrape.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;

use compass_core::fairshare::Kind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::config::SlurmMode;
use crate::error::{BudgetError, Result};
use crate::select_state::SelectRead;
use crate::state::AppState;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A float gauge.
type FGauge = Gauge<f64, AtomicU64>;
/// A float counter.
type FCounter = Counter<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptionLabels {
    pub rule: String,
    pub action: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SizeLabels {
    pub job_gpus: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TeamLabels {
    pub team: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TeamKindLabels {
    pub team: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolOccupancyLabels {
    pub pool: String,
    pub occupancy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartLabels {
    pub part: String,
}

fn cycle_histogram() -> Histogram {
    // 5 ms .. 41 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Bucket bounds of the wait-time histograms, seconds: 10 s .. 7 days.
pub const WAIT_BUCKETS_S: [f64; 14] = [
    10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0, 172800.0,
    345600.0, 604800.0,
];

fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS_S)
}

/// The `job_gpus` label of a job with `gpus` GPUs: the smallest of 0, 1,
/// 2, 4, ..., 64 that holds it, else `more` (`4` = 3 or 4 GPUs).
pub fn size_class(gpus: u32) -> String {
    match gpus {
        0 => "0".into(),
        g if g <= 64 => g.next_power_of_two().to_string(),
        _ => "more".into(),
    }
}

/// The `kind` label of a ledger kind.
pub fn kind_label(k: Kind) -> &'static str {
    match k {
        Kind::Allocated => "allocated",
        Kind::Unallocated => "unallocated",
    }
}

/// The events the service counts since it started.
pub struct Metrics {
    pub cycles: Family<OutcomeLabels, Counter>,
    pub cycle_duration: Histogram,
    pub slurm_rpc_errors: Family<OperationLabels, Counter>,
    pub site_factor_updates: Counter,
    pub preemptions: Family<PreemptionLabels, Counter>,
    pub node_drains: Family<OutcomeLabels, Counter>,
    pub job_wait: Family<SizeLabels, Histogram, fn() -> Histogram>,
    pub team_gpu_seconds: Family<TeamKindLabels, FCounter>,
}

/// The operations of `compass_slurm_rpc_errors_total`.
pub const RPC_OPERATIONS: [&str; 6] = [
    "snapshot",
    "update_job",
    "requeue",
    "cancel",
    "drain",
    "start_now",
];

/// The `job_gpus` classes of [`size_class`].
pub const SIZE_CLASSES: [&str; 9] = ["0", "1", "2", "4", "8", "16", "32", "64", "more"];

impl Default for Metrics {
    /// Every known label combination starts at zero, so each series exists
    /// from the first scrape (rate() and alerts need no special case).
    fn default() -> Self {
        let m = Self {
            cycles: Family::default(),
            cycle_duration: cycle_histogram(),
            slurm_rpc_errors: Family::default(),
            site_factor_updates: Counter::default(),
            preemptions: Family::default(),
            node_drains: Family::default(),
            job_wait: Family::new_with_constructor(wait_histogram as fn() -> Histogram),
            team_gpu_seconds: Family::default(),
        };
        for outcome in ["ok", "failed"] {
            let l = OutcomeLabels {
                outcome: outcome.into(),
            };
            let _ = m.cycles.get_or_create(&l);
            let _ = m.node_drains.get_or_create(&l);
        }
        for op in RPC_OPERATIONS {
            let _ = m.slurm_rpc_errors.get_or_create(&OperationLabels {
                operation: op.into(),
            });
        }
        for rule in ["unallocated", "over_served", "faulty_node"] {
            for action in ["requeue", "cancel"] {
                for outcome in ["ok", "failed", "dry_run"] {
                    let _ = m.preemptions.get_or_create(&PreemptionLabels {
                        rule: rule.into(),
                        action: action.into(),
                        outcome: outcome.into(),
                    });
                }
            }
        }
        for c in SIZE_CLASSES {
            let _ = m.job_wait.get_or_create(&SizeLabels { job_gpus: c.into() });
        }
        m
    }
}

impl Metrics {
    /// One cycle ended after `seconds`.
    pub fn cycle(&self, ok: bool, seconds: f64) {
        self.cycles
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "ok" } else { "failed" }.into(),
            })
            .inc();
        self.cycle_duration.observe(seconds);
    }

    /// A call into Slurm (`snapshot`, `update_job`, `requeue`, `cancel`,
    /// `drain`, `start_now`, ...) failed.
    pub fn slurm_rpc_error(&self, operation: &str) {
        self.slurm_rpc_errors
            .get_or_create(&OperationLabels {
                operation: operation.into(),
            })
            .inc();
    }

    /// A preemption decided by `rule`, done by `action` (`requeue`,
    /// `cancel`), with `outcome` `ok`, `failed` or `dry_run`.
    pub fn preemption(&self, rule: &str, action: &str, outcome: &str) {
        self.preemptions
            .get_or_create(&PreemptionLabels {
                rule: rule.into(),
                action: action.into(),
                outcome: outcome.into(),
            })
            .inc();
    }

    /// A faulty node drained by the cycle (`ok`) or refused by Slurm.
    pub fn node_drain(&self, ok: bool) {
        self.node_drains
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "ok" } else { "failed" }.into(),
            })
            .inc();
    }

    /// A job of `gpus` GPUs started after waiting `seconds`.
    pub fn job_started(&self, gpus: u32, seconds: f64) {
        self.job_wait
            .get_or_create(&SizeLabels {
                job_gpus: size_class(gpus),
            })
            .observe(seconds.max(0.0));
    }

    /// `team` used `gpu_seconds` of `kind` GPU time.
    pub fn team_usage(&self, team: &str, kind: Kind, gpu_seconds: f64) {
        self.team_gpu_seconds
            .get_or_create(&TeamKindLabels {
                team: team.into(),
                kind: kind_label(kind).into(),
            })
            .inc_by(gpu_seconds);
    }
}

/// The pool of a node: its GPU count and type (`8xa100`; `8xgpu` when the
/// GPUs are untyped).
pub fn pool_name(gpus: u32, gpu_type: Option<&str>) -> String {
    format!("{gpus}x{}", gpu_type.unwrap_or("gpu"))
}

/// Family constructors, so a scrape-time family is one line.
fn fam<L, M: Default>() -> Family<L, M>
where
    L: Clone + std::hash::Hash + Eq,
{
    Family::default()
}

/// The whole exposition at `now` (Unix seconds). Reads the database (tree
/// and window usage): run it off the async runtime.
pub fn encode(state: &AppState) -> Result<String> {
    let now = state.now();
    let m = &state.metrics;
    let mut reg = Registry::with_prefix("compass");

    // The cycle.
    reg.register(
        "cycles",
        "Ingest, order, push and enforce cycles run against Slurm, by outcome",
        m.cycles.clone(),
    );
    reg.register_with_unit(
        "cycle_duration",
        "Time one cycle took (read Slurm, update the ledger, order, push, enforce)",
        Unit::Seconds,
        m.cycle_duration.clone(),
    );
    reg.register(
        "slurm_rpc_errors",
        "Calls into Slurm that failed, by operation (snapshot: reading jobs and nodes; update_job: pushing site factors; requeue, cancel, drain, start_now: enforcement)",
        m.slurm_rpc_errors.clone(),
    );
    reg.register(
        "site_factor_updates",
        "Site factors pushed into Slurm (one per job whose place in the order changed)",
        m.site_factor_updates.clone(),
    );
    reg.register(
        "preemptions",
        "Preemptions decided by the cycle, by victim rule (unallocated, over_served, faulty_node), action (requeue, cancel) and outcome (ok, failed, dry_run)",
        m.preemptions.clone(),
    );
    reg.register(
        "node_drains",
        "Faulty nodes the cycle set to DRAIN in Slurm, by outcome",
        m.node_drains.clone(),
    );
    reg.register_with_unit(
        "job_wait",
        "Time from submit to start of the jobs the cycle saw pending and then running, by job size (job_gpus: the job's GPUs rounded up to a power of two, 0 for CPU jobs, more above 64)",
        Unit::Seconds,
        m.job_wait.clone(),
    );
    reg.register(
        "team_gpu_seconds",
        "GPU-seconds used by each team's running jobs as the cycle observed them, by kind (allocated: charged to the budget; unallocated: free, preemptible); compare rate() with compass_team_allocation_gpus",
        m.team_gpu_seconds.clone(),
    );

    let st = state.status().clone();
    if state.config.slurm != SlurmMode::None || st.cycles_ok + st.cycles_failed > 0 {
        let up: Gauge = Gauge::default();
        up.set(i64::from(st.slurm_connected));
        reg.register(
            "slurm_up",
            "1 when the last cycle read Slurm, 0 when it failed",
            up,
        );
        if let Some(t) = st.last_ok {
            let g: Gauge = Gauge::default();
            g.set(t);
            reg.register_with_unit(
                "slurm_last_success_timestamp",
                "Unix time of the last cycle that read Slurm (absent until one did)",
                Unit::Seconds,
                g,
            );
        }
    }

    // The queue.
    let q = state.queue();
    let pending: Gauge = Gauge::default();
    pending.set(q.order.len() as i64);
    reg.register(
        "queue_pending_jobs",
        "Pending jobs in the last computed fair-share order",
        pending,
    );

    // Teams over the fair-share window.
    let nodes = state.tree_view(now - state.config.window_s, now)?;
    let window: FGauge = Gauge::default();
    window.set(state.config.window_s as f64);
    reg.register_with_unit(
        "fairshare_window",
        "Length of the fair-share window the team_window figures cover",
        Unit::Seconds,
        window,
    );
    let alloc: Family<TeamLabels, FGauge> = fam();
    let ratio: Family<TeamLabels, FGauge> = fam();
    let used: Family<TeamKindLabels, FGauge> = fam();
    for n in &nodes {
        let team = TeamLabels {
            team: n.name.clone(),
        };
        alloc.get_or_create(&team).set(n.allocation_gpus);
        if let Some(r) = n.ratio {
            ratio.get_or_create(&team).set(r);
        }
        for (kind, hours) in [
            (Kind::Allocated, n.charged_gpu_hours),
            (Kind::Unallocated, n.free_gpu_hours),
        ] {
            used.get_or_create(&TeamKindLabels {
                team: n.name.clone(),
                kind: kind_label(kind).into(),
            })
            .set(hours * 3600.0);
        }
    }
    reg.register(
        "team_allocation_gpus",
        "GPUs each team (org unit) is allocated: its absolute share times the cluster's GPUs",
        alloc,
    );
    reg.register(
        "team_fairshare_ratio",
        "Fair-share ratio of each team over the window: allocated usage over budget (absent for a team without a budget)",
        ratio,
    );
    reg.register_with_unit(
        "team_window_usage_gpu",
        "GPU-seconds each team used over the fair-share window, by kind",
        Unit::Seconds,
        used,
    );

    // Nodes and GPUs per pool, from the last Slurm snapshot.
    let seen = state.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if !seen.nodes.is_empty() {
        let mut used_on: HashMap<&str, u32> = HashMap::new();
        for j in seen.running.values() {
            for (node, g) in &j.alloc {
                *used_on.entry(node.as_str()).or_default() += g;
            }
        }
        let count: Family<PoolOccupancyLabels, Gauge> = fam();
        let gpus: Family<PoolLabels, Gauge> = fam();
        let allocated: Family<PoolLabels, Gauge> = fam();
        for n in seen.nodes.iter().filter(|n| n.gpus > 0) {
            let ty = n
                .traits
                .as_ref()
                .and_then(|t| t.gpu_types.iter().next().map(String::as_str));
            let pool = pool_name(n.gpus, ty);
            let u = used_on
                .get(n.name.as_str())
                .copied()
                .unwrap_or(0)
                .min(n.gpus);
            let occupancy = match u {
                0 => "empty",
                u if u < n.gpus => "partial",
                _ => "full",
            };
            for o in ["empty", "partial", "full"] {
                count
                    .get_or_create(&PoolOccupancyLabels {
                        pool: pool.clone(),
                        occupancy: o.into(),
                    })
                    .inc_by(i64::from(o == occupancy));
            }
            let p = PoolLabels { pool };
            gpus.get_or_create(&p).inc_by(i64::from(n.gpus));
            allocated.get_or_create(&p).inc_by(i64::from(u));
        }
        reg.register(
            "nodes",
            "GPU nodes per pool (GPU count and type) by occupancy: empty, partial (some GPUs allocated), full",
            count,
        );
        reg.register("pool_gpus", "GPUs per pool", gpus);
        reg.register(
            "pool_gpus_allocated",
            "GPUs allocated to running jobs per pool",
            allocated,
        );
    }

    if state.config.select_state_file.is_some() {
        encode_select(&mut reg, &state.select_read(), now);
    }

    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg)
        .map_err(|e| BudgetError::Http(format!("encoding /metrics: {e}")))?;
    Ok(out)
}

/// The select plugin's figures (`select.state_file`), when read.
fn encode_select(reg: &mut Registry, read: &SelectRead, now: i64) {
    let up: Gauge = Gauge::default();
    up.set(i64::from(read.state.is_some()));
    reg.register(
        "select_state_up",
        "1 when the select plugin's state file (select_state_file) was read and parsed at the last try, 0 when it is missing or unreadable",
        up,
    );
    let Some(s) = &read.state else { return };
    let age: Gauge = Gauge::default();
    age.set((now - s.updated_unix as i64).max(0));
    reg.register_with_unit(
        "select_state_age",
        "Age of the select plugin's published state (now minus its updated_unix); it rewrites the file every few seconds while slurmctld runs",
        Unit::Seconds,
        age,
    );
    let active: Gauge = Gauge::default();
    active.set(i64::from(s.engine_active));
    reg.register(
        "select_engine_active",
        "1 while the placement engine narrows job_test, 0 when the plugin falls back to plain cons_tres (disabled, or after an engine error)",
        active,
    );
    let errors: Counter = Counter::default();
    errors.inc_by(s.engine_errors);
    reg.register(
        "select_engine_errors",
        "Engine errors since slurmctld started; each one falls back to plain cons_tres",
        errors,
    );
    let n_sif: Family<PoolLabels, FGauge> = fam();
    let partial: Family<PoolLabels, Gauge> = fam();
    let nodes: Family<PoolLabels, Gauge> = fam();
    for p in s.pools() {
        let l = PoolLabels { pool: p.name };
        n_sif.get_or_create(&l).set(p.n_sif);
        partial.get_or_create(&l).set(i64::from(p.partial_nodes));
        nodes.get_or_create(&l).set(i64::from(p.nodes));
    }
    reg.register(
        "select_n_sif",
        "N times SIF per pool (partial nodes minus Phi*): the fragmentation compass keeps at or below 2",
        n_sif,
    );
    reg.register(
        "select_partial_nodes",
        "Nodes with some but not all GPUs in use, per pool, as the select plugin sees them",
        partial,
    );
    reg.register(
        "select_nodes",
        "Nodes per pool, as the select plugin sees them",
        nodes,
    );
    let migrations: Family<OutcomeLabels, Counter> = fam();
    for (outcome, n) in [("done", s.migrations_done), ("failed", s.migrations_failed)] {
        migrations
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc_by(n);
    }
    reg.register(
        "select_migrations",
        "Compact migrations since slurmctld started, by outcome (done: the job restarted on its new nodes; failed: Slurm refused the requeue, the job stayed)",
        migrations,
    );
    let pending: Gauge = Gauge::default();
    pending.set(s.pending_migrations.len() as i64);
    reg.register(
        "select_migrations_pending",
        "Migrations decided and not yet carried out",
        pending,
    );
    let divergences: Counter = Counter::default();
    divergences.inc_by(s.divergences);
    reg.register(
        "select_divergences",
        "Jobs Slurm placed differently from the engine's plan since slurmctld started",
        divergences,
    );
    let kept: Family<ReasonLabels, Gauge> = fam();
    let reasons: BTreeMap<&str, u64> = s.kept_still.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    for (reason, n) in reasons {
        kept.get_or_create(&ReasonLabels {
            reason: reason.into(),
        })
        .set(n as i64);
    }
    reg.register(
        "select_jobs_kept_still",
        "Running GPU jobs the migration rule keeps in place now, by reason (not-resumable, protected, starting-up, cooling-down, ends-soon, names-its-nodes, migrations-off, no-gain: no GPU job waits under select.move_when)",
        kept,
    );
    let calls: Counter = Counter::default();
    calls.inc_by(s.job_test.calls);
    reg.register(
        "select_job_test_calls",
        "select_p_job_test calls since slurmctld started",
        calls,
    );
    let time: Family<PartLabels, FCounter> = fam();
    for (part, ns) in [
        ("engine", s.job_test.engine_ns),
        ("stock", s.job_test.stock_ns),
    ] {
        time.get_or_create(&PartLabels { part: part.into() })
            .inc_by(ns as f64 / 1e9);
    }
    reg.register_with_unit(
        "select_job_test",
        "Time spent in select_p_job_test since slurmctld started, by part (engine: compass's mapping and planning; stock: the cons_tres call it wraps)",
        Unit::Seconds,
        time,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_to_powers_of_two() {
        let got: Vec<String> = [0, 1, 2, 3, 4, 5, 8, 9, 64, 65, 1000]
            .into_iter()
            .map(size_class)
            .collect();
        assert_eq!(
            got,
            ["0", "1", "2", "4", "4", "8", "8", "16", "64", "more", "more"]
        );
        for g in [0, 1, 3, 7, 33, 64, 500] {
            assert!(SIZE_CLASSES.contains(&size_class(g).as_str()), "{g}");
        }
        assert_eq!(pool_name(8, Some("a100")), "8xa100");
        assert_eq!(pool_name(4, None), "4xgpu");
    }
}
