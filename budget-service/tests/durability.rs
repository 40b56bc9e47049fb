//! Durability: `kill -9` the real daemon in the middle of a stream of budget
//! edits and ledger ingests; after a restart every acknowledged edit is there,
//! every ingest batch is all-or-nothing (no torn batch), the ledger has no
//! duplicate or half-written interval, and the database passes its integrity
//! check.

mod common;

use common::{conn, write_config, Daemon, Munged, TempDir};
use compass_budget::cli::Client;
use compass_budget::db::Db;
use serde_json::json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BATCH: u64 = 4;

#[derive(Default)]
struct Acked {
    nodes: Vec<String>,
    batches: Vec<u64>,
    closed_batches: Vec<u64>,
}

#[test]
fn kill_9_mid_stream_loses_no_acknowledged_write() {
    let m = Munged::start();
    let dir = TempDir::new("durability");
    let cfg = write_config(dir.path(), &["root"], 64, &m.socket);
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut next_node = 0u64;
    let mut next_batch = 0u64;
    let mut root_made = false;
    let mut cuts = 0;

    for round in 0..3 {
        let mut d = Daemon::start(&cfg);
        let c = conn(&d.url, &m.socket);
        if !root_made {
            Client::new(&c)
                .unwrap()
                .write(
                    "POST",
                    "/api/v1/nodes",
                    &json!({ "name": "org", "parent": null, "share": 1.0, "why": "root" }),
                )
                .unwrap();
            root_made = true;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (acked, stop, c) = (acked.clone(), stop.clone(), c.clone());
            let (mut node, mut batch) = (next_node, next_batch);
            std::thread::spawn(move || {
                let client = Client::new(&c).unwrap();
                let mut cut = false;
                while !stop.load(Ordering::SeqCst) {
                    // A budget edit.
                    let name = format!("team-{node}");
                    let r = client.write(
                        "POST",
                        "/api/v1/nodes",
                        &json!({ "name": name, "parent": "org", "share": 0.001, "account": format!("acct-{node}"), "why": "stream" }),
                    );
                    node += 1;
                    match r {
                        Ok(_) => acked.lock().unwrap().nodes.push(name),
                        Err(_) => {
                            cut = true;
                            break;
                        }
                    }
                    // An ingest batch of BATCH open intervals, then the same batch closed.
                    let ivs = |end: Option<i64>| {
                        (0..BATCH)
                            .map(|k| json!({ "job": batch * 100 + k, "account": format!("acct-{}", node - 1), "gpus": 1 + k, "start": 1000 + batch as i64, "end": end, "kind": "allocated" }))
                            .collect::<Vec<_>>()
                    };
                    match client.write("POST", "/api/v1/ledger", &json!({ "intervals": ivs(None) }))
                    {
                        Ok(_) => acked.lock().unwrap().batches.push(batch),
                        Err(_) => {
                            cut = true;
                            break;
                        }
                    }
                    match client.write(
                        "POST",
                        "/api/v1/ledger",
                        &json!({ "intervals": ivs(Some(5000 + batch as i64)) }),
                    ) {
                        Ok(_) => acked.lock().unwrap().closed_batches.push(batch),
                        Err(_) => {
                            cut = true;
                            break;
                        }
                    }
                    batch += 1;
                }
                (node, batch, cut)
            })
        };
        // Let some writes through, then kill -9 while the stream runs.
        let start = Instant::now();
        let target = 15 * (round + 1);
        while acked.lock().unwrap().nodes.len() < target
            && start.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        d.kill9();
        stop.store(true, Ordering::SeqCst);
        let (n, b, cut) = writer.join().unwrap();
        cuts += usize::from(cut);
        // Skip names/ids possibly used by an in-flight, unacknowledged write.
        next_node = n + 1;
        next_batch = b + 1;
    }

    assert!(
        cuts >= 2,
        "kill -9 landed mid-stream in only {cuts} of 3 rounds"
    );
    let a = acked.lock().unwrap();
    assert!(
        a.nodes.len() >= 45,
        "stream made progress: {}",
        a.nodes.len()
    );
    // Check the files directly (no daemon running) ...
    let db = Db::open(&dir.path().join("budget.db")).unwrap();
    assert!(db.integrity_ok().unwrap());
    let names: HashSet<String> = db
        .load_specs()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    for n in &a.nodes {
        assert!(names.contains(n), "acknowledged node {n} lost");
    }
    let audit = db.audit(100_000).unwrap();
    for n in &a.nodes {
        assert_eq!(
            audit.iter().filter(|r| &r.node == n).count(),
            1,
            "exactly one audit row for {n}"
        );
    }
    let ledger = db.ledger_between(0, 1_000_000).unwrap();
    let mut per_batch: std::collections::HashMap<u64, Vec<_>> = std::collections::HashMap::new();
    for iv in ledger.iter() {
        per_batch
            .entry(iv.job.0 / 100)
            .or_default()
            .push(iv.clone());
    }
    for (b, ivs) in &per_batch {
        assert_eq!(
            ivs.len() as u64,
            BATCH,
            "batch {b} is torn: {} of {BATCH} intervals",
            ivs.len()
        );
        let ends: HashSet<Option<i64>> = ivs.iter().map(|i| i.end).collect();
        assert_eq!(ends.len(), 1, "batch {b} half closed: {ends:?}");
        for iv in ivs {
            assert_eq!(
                u64::from(iv.gpus),
                1 + iv.job.0 % 100,
                "interval {iv:?} corrupted"
            );
            assert_eq!(iv.start, 1000 + *b as i64);
        }
    }
    for b in &a.batches {
        assert!(per_batch.contains_key(b), "acknowledged batch {b} lost");
    }
    for b in &a.closed_batches {
        assert_eq!(
            per_batch[b][0].end,
            Some(5000 + *b as i64),
            "acknowledged close of batch {b} lost"
        );
    }
    assert_eq!(
        db.interval_count().unwrap() as usize,
        ledger.len(),
        "no duplicate intervals"
    );
    drop(db);
    // ... and the restarted daemon serves them.
    let d = Daemon::start(&cfg);
    let v = Client::new(&conn(&d.url, &m.socket))
        .unwrap()
        .get("/api/v1/export")
        .unwrap();
    assert_eq!(v["nodes"].as_array().unwrap().len(), names.len());
}
