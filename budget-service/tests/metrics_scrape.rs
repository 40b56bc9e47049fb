//! `/metrics` of the real compass-budgetd binary, scraped over HTTP and
//! parsed strictly (`prom`): a file-backed Slurm snapshot and a select
//! plugin state file written by the plugin's own writer
//! (`compass_slurm::state::PublishedState`). Checks the figures, that the
//! Grafana dashboard in `contrib/grafana/` queries only metrics the service
//! exports, and that the metric list in `docs/admin-guide.md` is exactly
//! what the service exports.

mod common;
mod prom;

use common::{Daemon, TempDir};
use compass_budget::cli::parse_budgets_toml;
use compass_budget::db::Db;
use compass_budget::slurm::{SlurmJob, SlurmNode, SlurmSnapshot};
use compass_core::model::JobId;
use compass_slurm::state::{NodeView, PublishedState, FORMAT};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn scrape(url: &str) -> (String, String) {
    let mut resp = ureq::get(format!("{url}/metrics")).call().unwrap();
    let ct = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    (ct, resp.body_mut().read_to_string().unwrap())
}

/// Scrapes until `ok` holds (the cycle and the state reader run on their
/// own threads), returning the parsed exposition.
fn scrape_until(url: &str, what: &str, ok: impl Fn(&prom::Exposition) -> bool) -> prom::Exposition {
    let start = Instant::now();
    loop {
        let (_, text) = scrape(url);
        let e = prom::parse(&text);
        if ok(&e) {
            return e;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn job(id: u64, acct: &str, gpus: u32, submit: i64) -> SlurmJob {
    SlurmJob::basic(JobId(id), acct, gpus, 600, true, 0, submit)
}

fn node(name: &str) -> SlurmNode {
    SlurmNode {
        name: name.into(),
        gpus: 8,
        state: Default::default(),
        reason: String::new(),
        traits: None,
        gpus_by_type: Default::default(),
    }
}

fn write_snapshot(path: &Path, snap: &SlurmSnapshot) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string(snap).unwrap()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The metric names a PromQL expression uses (every `compass_*` token).
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(off) = expr[i..].find("compass_") {
        let s = i + off;
        let word_start = s == 0 || !(b[s - 1].is_ascii_alphanumeric() || b[s - 1] == b'_');
        let mut e = s;
        while e < b.len() && (b[e].is_ascii_alphanumeric() || b[e] == b'_') {
            e += 1;
        }
        if word_start {
            out.push(expr[s..e].to_string());
        }
        i = e;
    }
    out
}

/// Every `expr` in the dashboard's panels.
fn dashboard_exprs(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in v["panels"].as_array().expect("panels") {
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
        for t in p["targets"].as_array().expect("targets") {
            out.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    out
}

/// `(metric, type)` of each row of the admin guide's "Monitoring" table
/// (counters by their `_total` name, as queries use them).
fn documented_metrics(guide: &str) -> BTreeSet<(String, String)> {
    let start = guide
        .find("\n## Monitoring\n")
        .expect("a Monitoring section");
    let section = &guide[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    section[..end]
        .lines()
        .filter(|l| l.starts_with("| `compass_"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect()
}

#[test]
fn metrics_of_the_real_daemon_parse_strictly_and_match_dashboard_and_docs() {
    let dir = TempDir::new("metrics");
    let t = now();
    {
        let mut db = Db::open(&dir.path().join("budget.db")).unwrap();
        let doc = parse_budgets_toml(include_str!("../../etc/budgets.example.toml")).unwrap();
        db.edit_tree("root", "import", "seed", t, |_| Ok(doc.nodes.clone()))
            .unwrap();
    }
    // n1 full (job 1, platform, 8 GPUs), n2 empty; jobs 2 (4 GPUs) and 3
    // (1 GPU) pending, submitted 100 s ago.
    let mut running = job(1, "platform", 8, t - 500);
    running.start = Some(t - 400);
    running.alloc = vec![("n1".into(), 8)];
    let mut snap = SlurmSnapshot {
        pending: vec![job(2, "nlp-a", 4, t - 100), job(3, "vision", 1, t - 100)],
        running: vec![running.clone()],
        nodes: vec![node("n1"), node("n2")],
        ..Default::default()
    };
    let snap_path = dir.path().join("slurm.json");
    write_snapshot(&snap_path, &snap);
    // The select plugin's state, written by its own writer.
    let state_path = dir.path().join("compass-state.json");
    let published = PublishedState {
        format: FORMAT,
        updated_unix: t as u64,
        engine_active: true,
        gpus_per_node: 8,
        nodes: vec![
            NodeView {
                name: "n1".into(),
                capacity: 8,
                used_gpus: 8,
                jobs: vec![(1, 8)],
            },
            NodeView {
                name: "n2".into(),
                capacity: 8,
                used_gpus: 0,
                jobs: vec![],
            },
        ],
        partial_nodes: 0,
        n_sif: 0.0,
        migrations_done: 3,
        migrations_failed: 1,
        engine_errors: 2,
        divergences: 5,
        kept_still: [("protected".to_string(), 1)].into_iter().collect(),
        job_test: compass_slurm::state::JobTestStats {
            calls: 10,
            engine_ns: 2_000_000_000,
            stock_ns: 500_000_000,
        },
        ..Default::default()
    };
    published.write_atomic(&state_path).unwrap();
    let cfg = dir.path().join("budgetd.toml");
    std::fs::write(
        &cfg,
        format!(
            "db = \"{}\"\ncapacity_gpus = 16\ncycle_s = 1\nslurm = \"file\"\nslurm_file = \"{}\"\nselect_state_file = \"{}\"\n",
            dir.path().join("budget.db").display(),
            snap_path.display(),
            state_path.display()
        ),
    )
    .unwrap();
    let d = Daemon::start(&cfg);

    let (ct, _) = scrape(&d.url);
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let m = scrape_until(&d.url, "a cycle and a read of the state file", |m| {
        m.value("compass_cycles_total", &[("outcome", "ok")]) >= Some(1.0)
            && m.value("compass_select_state_up", &[]) == Some(1.0)
    });
    assert_eq!(m.value("compass_queue_pending_jobs", &[]), Some(2.0));
    assert_eq!(m.value("compass_slurm_up", &[]), Some(1.0));
    let pool = [("pool", "8xgpu")];
    let occ = |o| m.value("compass_nodes", &[("pool", "8xgpu"), ("occupancy", o)]);
    assert_eq!(
        (occ("full"), occ("partial"), occ("empty")),
        (Some(1.0), Some(0.0), Some(1.0))
    );
    assert_eq!(m.value("compass_pool_gpus", &pool), Some(16.0));
    assert_eq!(m.value("compass_pool_gpus_allocated", &pool), Some(8.0));
    // Allocation: platform's share of 16 GPUs (org 1.0 x platform 0.3).
    let platform = [("team", "platform")];
    let alloc = m.value("compass_team_allocation_gpus", &platform).unwrap();
    assert!((alloc - 4.8).abs() < 1e-9, "{alloc}");
    // GPU-seconds counted per team: 8 GPUs x the cycles' elapsed time.
    let used = m
        .value(
            "compass_team_gpu_seconds_total",
            &[("team", "platform"), ("kind", "allocated")],
        )
        .unwrap();
    assert!(used >= 8.0 && used % 8.0 == 0.0, "{used}");
    // The select plugin's figures, one pool (no `pools` in the file).
    assert_eq!(m.value("compass_select_n_sif", &pool), Some(0.0));
    assert_eq!(m.value("compass_select_nodes", &pool), Some(2.0));
    assert_eq!(m.value("compass_select_partial_nodes", &pool), Some(0.0));
    assert_eq!(
        m.value("compass_select_migrations_total", &[("outcome", "done")]),
        Some(3.0)
    );
    assert_eq!(
        m.value("compass_select_migrations_total", &[("outcome", "failed")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("compass_select_engine_errors_total", &[]),
        Some(2.0)
    );
    assert_eq!(m.value("compass_select_divergences_total", &[]), Some(5.0));
    assert_eq!(
        m.value("compass_select_jobs_kept_still", &[("reason", "protected")]),
        Some(1.0)
    );
    assert_eq!(
        m.value(
            "compass_select_job_test_seconds_total",
            &[("part", "engine")]
        ),
        Some(2.0)
    );
    assert_eq!(
        m.value("compass_select_job_test_calls_total", &[]),
        Some(10.0)
    );
    let age = m.value("compass_select_state_age_seconds", &[]).unwrap();
    assert!((0.0..60.0).contains(&age), "{age}");
    // No sentinels: every figure is a real count, time or ratio.
    for s in &m.samples {
        assert!(s.value >= 0.0, "negative sample {s:?}");
    }

    // Job 2 (4 GPUs) starts 90 s after its submit: one wait of 90 s in the
    // job_gpus="4" histogram.
    let mut started = snap.pending.remove(0);
    started.start = Some(t - 10);
    started.alloc = vec![("n2".into(), 4)];
    snap.running.push(started);
    write_snapshot(&snap_path, &snap);
    let m = scrape_until(&d.url, "the wait of job 2", |m| {
        m.value("compass_job_wait_seconds_count", &[("job_gpus", "4")]) == Some(1.0)
    });
    assert_eq!(
        m.value("compass_job_wait_seconds_sum", &[("job_gpus", "4")]),
        Some(90.0)
    );
    assert_eq!(
        m.value(
            "compass_job_wait_seconds_bucket",
            &[("job_gpus", "4"), ("le", "60.0")]
        ),
        Some(0.0)
    );
    assert_eq!(
        m.value(
            "compass_job_wait_seconds_bucket",
            &[("job_gpus", "4"), ("le", "300.0")]
        ),
        Some(1.0)
    );
    assert_eq!(
        m.value("compass_job_wait_seconds_count", &[("job_gpus", "1")]),
        Some(0.0)
    );
    let occ = |o| m.value("compass_nodes", &[("pool", "8xgpu"), ("occupancy", o)]);
    assert_eq!((occ("full"), occ("partial")), (Some(1.0), Some(1.0)));

    // Every metric the dashboard queries is exported.
    let exported = m.queryable_names();
    let dash: serde_json::Value =
        serde_json::from_str(include_str!("../../contrib/grafana/compass-dashboard.json")).unwrap();
    let exprs = dashboard_exprs(&dash);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut queried = BTreeSet::new();
    for e in &exprs {
        let names = metric_names(e);
        assert!(!names.is_empty(), "a query without a compass metric: {e}");
        for n in names {
            assert!(
                exported.contains(&n),
                "the dashboard queries `{n}`, which /metrics does not export ({e})"
            );
            queried.insert(n);
        }
    }
    // The admin guide lists exactly the exported families.
    let documented = documented_metrics(include_str!("../../docs/admin-guide.md"));
    let exported: BTreeSet<(String, String)> = m
        .families
        .iter()
        .map(|(name, f)| {
            let name = if f.kind == "counter" {
                format!("{name}_total")
            } else {
                name.clone()
            };
            (name, f.kind.clone())
        })
        .collect();
    assert_eq!(
        documented, exported,
        "docs/admin-guide.md Monitoring table vs /metrics"
    );
    // Every metric the dashboard queries is documented too (same set).
    for n in &queried {
        let base = n
            .trim_end_matches("_bucket")
            .trim_end_matches("_count")
            .trim_end_matches("_sum");
        assert!(
            documented.iter().any(|(d, _)| d == n || d == base),
            "{n} is not in the admin guide"
        );
    }

    // The state file goes away: up 0, no age (absent, not a sentinel).
    std::fs::remove_file(&state_path).unwrap();
    let m = scrape_until(&d.url, "the state file to be missed", |m| {
        m.value("compass_select_state_up", &[]) == Some(0.0)
    });
    assert_eq!(m.value("compass_select_state_age_seconds", &[]), None);
    assert_eq!(m.value("compass_select_n_sif", &pool), None);
}

/// The select plugin's own logic (`compass_slurm::controller::Controller`,
/// what the plugin runs inside slurmctld) places jobs on 4 nodes x 8 GPUs,
/// orders a Compact migration whose requeue Slurm refuses, and publishes
/// its state with the plugin's writer; the daemon's `compass_select_*`
/// figures are the published ones.
#[test]
fn select_figures_are_what_the_plugin_logic_publishes() {
    use compass_core::model::{ClusterSpec, JobShape, NodeId, NodeSet};
    use compass_slurm::controller::{Controller, JobInfo};
    use compass_slurm::flags::JobFlags;
    use compass_slurm::shape::Mapping;

    let names: Vec<String> = (1..=4).map(|i| format!("n{i}")).collect();
    let mut config = compass_slurm::config::Config::default().select;
    config.min_run_before_migration_s = 0;
    // Compact after a departure with no job waiting: the paper's rule (the
    // plugin's default moves nobody then, `select.move_when = waiting`).
    config.move_when = compass_core::placement::worth::MoveWhen::Always;
    let mut ctl = Controller::new(config, ClusterSpec::new(4, 8).unwrap(), names);
    let job = |id: u64, g: u32| JobInfo {
        id,
        mapping: Mapping::Model {
            shape: JobShape::new(1, g),
            distinct_nodes: false,
        },
        flags: Some(JobFlags {
            min_runtime_s: 0,
            resumable: true,
            migration_cost_s: None,
        }),
        time_limit_s: None,
        gpu_type: None,
        required_nodes: false,
    };
    let t = now() as u64;
    // As cons_tres would: the job on the first narrowed node with room.
    let mut used = [0u32; 4];
    for (id, g) in [(1, 4), (2, 4), (3, 4), (4, 2)] {
        let j = job(id, g);
        let set = ctl
            .narrow(&j, &NodeSet::full(4))
            .unwrap()
            .expect("the engine plans the job");
        let n: NodeId = set
            .iter()
            .find(|n| used[*n as usize] + g <= 8)
            .expect("room on a narrowed node");
        used[n as usize] += g;
        assert_eq!(ctl.begin(&j, &[(n, g)], t), None);
    }
    assert!(ctl.tick(t + 1000).is_empty());
    ctl.fini(1, t + 1000);
    let orders = ctl.tick(t + 1000);
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(ctl.requeue_failed(&orders[0], t + 1000), None);
    let published = ctl.snapshot(t, true);
    assert_eq!(published.migrations_failed, 1);

    let dir = TempDir::new("metrics-plugin");
    let state_path = dir.path().join("state.json");
    published.write_atomic(&state_path).unwrap();
    let cfg = dir.path().join("budgetd.toml");
    std::fs::write(
        &cfg,
        format!(
            "db = \"{}\"\ncapacity_gpus = 32\nselect_state_file = \"{}\"\n",
            dir.path().join("budget.db").display(),
            state_path.display()
        ),
    )
    .unwrap();
    let d = Daemon::start(&cfg);
    let m = scrape_until(&d.url, "a read of the state file", |m| {
        m.value("compass_select_state_up", &[]) == Some(1.0)
    });
    let pool = [("pool", "8xgpu")];
    assert_eq!(
        m.value("compass_select_n_sif", &pool),
        Some(published.n_sif)
    );
    assert_eq!(
        m.value("compass_select_partial_nodes", &pool),
        Some(f64::from(published.partial_nodes))
    );
    assert_eq!(m.value("compass_select_nodes", &pool), Some(4.0));
    assert_eq!(
        m.value("compass_select_migrations_total", &[("outcome", "failed")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("compass_select_migrations_total", &[("outcome", "done")]),
        Some(0.0)
    );
    assert_eq!(
        m.value("compass_select_migrations_pending", &[]),
        Some(published.pending_migrations.len() as f64)
    );
    assert_eq!(m.value("compass_select_engine_active", &[]), Some(1.0));
    // slurm = "none": no Slurm figures, no pools from a snapshot.
    assert_eq!(m.value("compass_slurm_up", &[]), None);
    assert!(!m.families.contains_key("compass_nodes"));
}
