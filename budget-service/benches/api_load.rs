//! Load benchmark of the budget service (loopback only, bounded): p50/p99
//! latency of the queue-order and tree endpoints with 10,000 pending jobs and
//! a 501-node tree, plus the time of one ingest -> order -> push cycle.
//!
//! `cargo bench -p compass-budget --bench api_load` (set `BUDGET_BENCH_REQUESTS`
//! to change the requests per endpoint, default 200; 4 concurrent clients).

use compass_budget::auth::Authenticator;
use compass_budget::config::Config;
use compass_budget::cycle::Cycle;
use compass_budget::db::Db;
use compass_budget::slurm::{FakeSlurm, SlurmJob};
use compass_budget::state::{AppState, TestClock};
use compass_budget::{BudgetError, Result};
use compass_core::fairshare::{Interval, Kind, NodeSpec};
use compass_core::model::JobId;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct NoWrites;

impl Authenticator for NoWrites {
    fn authenticate(&self, _c: &str, _p: &[u8]) -> Result<String> {
        Err(BudgetError::Unauthenticated("read-only benchmark".into()))
    }
}

const NOW: i64 = 1_800_000_000;

fn tree() -> (Vec<NodeSpec>, Vec<String>) {
    let mut specs = vec![NodeSpec {
        name: "org".into(),
        parent: None,
        share: 1.0,
        managers: vec![],
        account: None,
    }];
    let mut accounts = Vec::new();
    for p in 0..10 {
        let prog = format!("prog{p}");
        specs.push(NodeSpec {
            name: prog.clone(),
            parent: Some("org".into()),
            share: 0.1,
            managers: vec![],
            account: None,
        });
        for q in 0..7 {
            let proj = format!("{prog}-proj{q}");
            specs.push(NodeSpec {
                name: proj.clone(),
                parent: Some(prog.clone()),
                share: 1.0 / 7.0 - 1e-9,
                managers: vec![],
                account: None,
            });
            for t in 0..6 {
                let acct = format!("acct-{p}-{q}-{t}");
                specs.push(NodeSpec {
                    name: format!("{proj}-team{t}"),
                    parent: Some(proj.clone()),
                    share: 1.0 / 6.0 - 1e-9,
                    managers: vec![],
                    account: Some(acct.clone()),
                });
                accounts.push(acct);
            }
        }
    }
    (specs, accounts)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let requests: usize = std::env::var("BUDGET_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = std::env::temp_dir().join(format!("compass-budget-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (specs, accounts) = tree();
    let config = Config::parse(
        &format!(
            "db = \"{}\"\ncapacity_gpus = 1024\nlisten = \"127.0.0.1:0\"\n",
            dir.join("b.db").display()
        ),
        "bench",
    )
    .unwrap();
    let mut db = Db::open(&config.db).unwrap();
    db.edit_tree("bench", "import", "bench", NOW, |_| Ok(specs.clone()))
        .unwrap();
    let ivs: Vec<Interval> = (0..5000u64)
        .map(|i| Interval {
            job: JobId(1_000_000 + i),
            account: accounts[(i as usize * 7) % accounts.len()].clone(),
            gpus: 1 + (i % 8) as u32,
            start: NOW - 6 * 86400 + (i as i64) * 60,
            end: Some(NOW - 6 * 86400 + (i as i64) * 60 + 3600),
            kind: if i % 5 == 0 {
                Kind::Unallocated
            } else {
                Kind::Allocated
            },
            weight: 1.0,
        })
        .collect();
    db.ingest(&ivs, NOW).unwrap();
    let state = AppState::new(
        config,
        db,
        Arc::new(NoWrites),
        Arc::new(TestClock::new(NOW)),
    );
    let slurm = Arc::new(FakeSlurm::new());
    for i in 0..10_000u64 {
        slurm.put(SlurmJob {
            job: JobId(i + 1),
            account: accounts[(i as usize * 13) % accounts.len()].clone(),
            user: String::new(),
            gpus: 1 << (i % 4),
            min_runtime_s: if i % 6 == 0 { 0 } else { 3600 },
            resumable: true,
            priority: (i % 3) as i64,
            submit: NOW - 10_000 + i as i64,
            start: None,
            end: None,
            alloc: Vec::new(),
            instances: 0,
            eligible: true,
            begin_after: None,
            gpu_types: Default::default(),
            tier: 0,
            qos: String::new(),
            qos_priority: 0,
        });
    }
    let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
    let t = Instant::now();
    let first = cycle.step().unwrap();
    let first_s = t.elapsed();
    let t = Instant::now();
    let again = cycle.step().unwrap();
    let again_s = t.elapsed();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let app = compass_budget::api::router(state.clone());
    rt.spawn(async move { axum::serve(listener, app).await });

    println!(
        "budget service load benchmark: 10,000 pending jobs, {} tree nodes, 5,000 ledger intervals",
        specs.len()
    );
    println!(
        "cycle: first {:.1} ms ({} pending, {} factors pushed), steady {:.1} ms ({} pushed)",
        first_s.as_secs_f64() * 1e3,
        first.pending,
        first.pushed,
        again_s.as_secs_f64() * 1e3,
        again.pushed
    );
    println!(
        "{:<22} {:>9} {:>10} {:>10} {:>10} {:>12}",
        "endpoint", "requests", "p50 ms", "p99 ms", "max ms", "bytes"
    );
    for path in [
        "/api/v1/queue?limit=1000",
        "/api/v1/tree",
        "/api/v1/queue/5000",
        "/healthz",
    ] {
        let clients = 4;
        let per = requests.div_ceil(clients);
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                let url = format!("http://{addr}{path}");
                std::thread::spawn(move || {
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .build()
                        .into();
                    let mut lat = Vec::with_capacity(per);
                    let mut bytes = 0;
                    for _ in 0..per {
                        let t = Instant::now();
                        let mut r = agent.get(&url).call().unwrap();
                        assert!(r.status().is_success(), "{url}: {}", r.status());
                        bytes = r
                            .body_mut()
                            .with_config()
                            .limit(256 << 20)
                            .read_to_vec()
                            .unwrap()
                            .len();
                        lat.push(t.elapsed());
                    }
                    (lat, bytes)
                })
            })
            .collect();
        let mut lat = Vec::new();
        let mut bytes = 0;
        for h in handles {
            let (l, b) = h.join().unwrap();
            lat.extend(l);
            bytes = b;
        }
        lat.sort();
        println!(
            "{:<22} {:>9} {:>10.2} {:>10.2} {:>10.2} {:>12}",
            path,
            lat.len(),
            percentile(&lat, 0.5).as_secs_f64() * 1e3,
            percentile(&lat, 0.99).as_secs_f64() * 1e3,
            lat.last().unwrap().as_secs_f64() * 1e3,
            bytes
        );
    }
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
}
