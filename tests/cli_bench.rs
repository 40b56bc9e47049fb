//! `compass bench` on tiny sizes: the homogeneous and the mixed latency
//! mixes run through the same churn loop and report the same fields.
//! (Counts only: timings are never asserted.)

use std::process::Command;

#[test]
fn bench_latency_covers_homogeneous_and_mixed_clusters() {
    let out = Command::new(env!("CARGO_BIN_EXE_compass"))
        .args([
            "bench",
            "--nodes",
            "36",
            "--events",
            "300",
            "--mix",
            "venus,pinned,mixed",
            "--policies",
            "compass,best-fit",
            "--no-replay",
            "--no-policy-replay",
            "--json",
            "-q",
        ])
        .output()
        .expect("run compass");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["latency"].as_array().unwrap();
    let keys: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["policy"].as_str().unwrap(), r["mix"].as_str().unwrap()))
        .collect();
    // the mixed mix runs the pool set, which holds COMPASS engines only
    assert_eq!(
        keys,
        [
            ("compass", "venus"),
            ("compass", "pinned"),
            ("compass", "mixed"),
            ("best-fit", "venus"),
            ("best-fit", "pinned"),
        ]
    );
    for r in rows {
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["nodes"], 36);
        assert_eq!(r["remove"]["calls"], 300, "{r}");
        assert!(r["place"]["calls"].as_u64().unwrap() >= 300, "{r}");
        for k in ["p50_us", "p99_us", "max_us"] {
            assert!(r["place"][k].as_f64().is_some(), "{r}");
        }
    }
    // COMPASS migrates in its Compacts, on identical nodes and per pool
    for r in rows.iter().filter(|r| r["policy"] == "compass") {
        assert!(r["migrations"].as_u64().unwrap() > 0, "{r}");
    }
    for r in rows.iter().filter(|r| r["policy"] == "best-fit") {
        assert_eq!(r["migrations"], 0, "{r}");
    }
}
