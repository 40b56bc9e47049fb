//! `compass bench` on tiny sizes: the homogeneous, the mixed, the
//! head-guard and the WCC-failing latency mixes run through the same churn
//! loop and report the same fields. (Counts only: timings are never
//! asserted.)

use std::process::Command;

/// Runs `compass bench` with `args`; its stdout (the command must succeed).
fn bench(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_compass"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run compass");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The latency rows of `compass bench ARGS` (no replay, JSON).
fn latency_rows(args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = args.to_vec();
    all.extend(["--no-replay", "--no-policy-replay", "--json", "-q"]);
    let v: serde_json::Value = serde_json::from_slice(&bench(&all)).unwrap();
    v["latency"].as_array().unwrap().clone()
}

#[test]
fn bench_latency_covers_homogeneous_and_mixed_clusters() {
    let rows = latency_rows(&[
        "--nodes",
        "36",
        "--events",
        "300",
        "--mix",
        "venus,pinned,mixed,head-guard,wcc-fails,pinned-wcc-fails,partitions,make-room",
        "--policies",
        "compass,best-fit",
    ]);
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
            ("compass", "head-guard"),
            ("compass", "wcc-fails"),
            ("compass", "pinned-wcc-fails"),
            ("compass", "partitions"),
            ("compass", "make-room"),
            ("best-fit", "venus"),
            ("best-fit", "pinned"),
            ("best-fit", "wcc-fails"),
            ("best-fit", "pinned-wcc-fails"),
        ]
    );
    for r in &rows {
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
    // Only the head-guard mix guards its Compacts: one after every
    // admission (the first fill's too) and departure, each with one
    // verdict; the head is wider than the free nodes, and some moves
    // (restarted jobs hold their new nodes longer) lower its fit, so its
    // reservation is walked.
    for r in &rows {
        assert_eq!(r["head"].is_null(), r["mix"] != "head-guard", "{r}");
    }
    let r = &rows[3];
    let h = &r["head"];
    let n = |k: &str| h[k].as_u64().unwrap();
    assert!(n("compacts") > 300, "{r}");
    assert_eq!(n("compacts"), n("free") + n("held") + n("skipped"), "{r}");
    assert!(n("walked") > 0 && n("walked") <= n("compacts"), "{r}");
}

/// The table names the head-guard row and its verdicts.
#[test]
fn bench_table_prints_the_head_guard_row() {
    let stdout = bench(&[
        "--nodes",
        "20",
        "--events",
        "200",
        "--mix",
        "head-guard",
        "--no-replay",
        "--no-policy-replay",
        "-q",
    ]);
    let text = String::from_utf8_lossy(&stdout);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("head-guard"))
        .collect();
    // compass only, whatever --policies (all by default)
    assert_eq!(rows.len(), 1, "{text}");
    assert!(rows[0].starts_with("compass "), "{text}");
    assert!(!rows[0].contains("unavailable"), "{text}");
    assert!(text.contains("Head guard at 20 nodes: "), "{text}");
}

/// The `plugin` mix drives the select plugin's controller (compass only):
/// arrivals and departures reach it, its tick orders requeues that are
/// carried out, and the row reports the same fields as the others. The
/// `plugin-mixed` mix does the same on a mixed cluster (a100, l40s, small
/// untyped and CPU-only nodes, jobs naming GPU types).
#[test]
fn bench_plugin_mix_drives_the_controller() {
    for mix in ["plugin", "plugin-mixed"] {
        let rows = latency_rows(&["--nodes", "100", "--events", "1000", "--mix", mix]);
        assert_eq!(rows.len(), 1, "{rows:?}");
        let r = &rows[0];
        assert_eq!(
            (r["policy"].as_str(), r["mix"].as_str()),
            (Some("compass"), Some(mix))
        );
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["remove"]["calls"], 1000, "{r}");
        assert!(r["place"]["calls"].as_u64().unwrap() >= 800, "{r}");
        assert!(r["migrations"].as_u64().unwrap() > 0, "{r}");
        // Each callback timed on its own: every arrival (a new job, or a
        // waiting one that starts when offered again), every departure (the
        // waiting head) and every offer of a waiting job that finds no room
        // again is narrowed once, every departure is a `fini`, and a tick
        // follows each departure and each admitted arrival.
        let calls = |k: &str| r["callbacks"][k]["calls"].as_u64().unwrap();
        let queue = |k: &str| r["callbacks"][k].as_u64().unwrap();
        let (place, remove) = (
            r["place"]["calls"].as_u64().unwrap(),
            r["remove"]["calls"].as_u64().unwrap(),
        );
        assert_eq!(
            calls("narrow"),
            place + remove + queue("offers_refused"),
            "{mix}: {r}"
        );
        // On the mixed cluster jobs wait for their GPU type, and Slurm's
        // queue offers them again until they start.
        if mix == "plugin-mixed" {
            assert!(queue("started_after_waiting") > 0, "{r}");
            assert!(queue("offers_refused") > 0, "{r}");
        }
        assert!(calls("fini") >= remove, "{mix}: {r}");
        assert!(calls("begin") > 0, "{mix}: {r}");
        assert!(
            (remove..=place + remove).contains(&calls("tick")),
            "{mix}: {r}"
        );
        // The waiting head keeps the `pays` gate open: it makes trials,
        // and counts those its memory of failed trials skipped.
        let gate = |k: &str| r["callbacks"][k].as_u64();
        assert!(gate("gate_trials").is_some_and(|n| n > 0), "{mix}: {r}");
        assert!(gate("gate_trials_remembered").is_some(), "{mix}: {r}");
        // What the plugin thread's snapshot of the state costs under the
        // controller's lock, a round after each of 200 more departures.
        assert_eq!(r["snapshot"]["calls"], 200, "{mix}: {r}");
    }
}

/// `--repeat`: every run of a row replays the same events and decides
/// alike, and each event's time is the least of its runs' (so no
/// percentile of the row exceeds that of any run, and each callback is
/// combined the same way). Timings are compared with each other only.
#[test]
fn bench_repeat_takes_each_events_least_time_over_identical_runs() {
    let one = latency_rows(&["--nodes", "100", "--events", "500", "--mix", "plugin"]);
    let three = latency_rows(&[
        "--nodes",
        "100",
        "--events",
        "500",
        "--mix",
        "plugin,venus",
        "--policies",
        "compass",
        "--repeat",
        "3",
    ]);
    assert_eq!(three.len(), 2, "{three:?}");
    for r in &three {
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["runs"], 3, "{r}");
        let runs = r["run_p99_us"].as_array().unwrap();
        assert_eq!(runs.len(), 3, "{r}");
        for (k, op) in ["place", "remove"].iter().enumerate() {
            let row = r[op]["p99_us"].as_f64().unwrap();
            for run in runs {
                let p99 = run[k].as_f64().unwrap();
                assert!(row <= p99, "{op}: least {row} over a run's {p99}: {r}");
            }
        }
    }
    // The same decisions as one run: the runs are the same churn.
    let plugin = &three[0];
    assert_eq!(plugin["mix"], "plugin");
    assert_eq!(plugin["migrations"], one[0]["migrations"]);
    assert_eq!(plugin["remove"]["calls"], one[0]["remove"]["calls"]);
    assert_eq!(plugin["place"]["calls"], one[0]["place"]["calls"]);
    for k in ["narrow", "begin", "fini", "tick"] {
        assert_eq!(
            plugin["callbacks"][k]["calls"], one[0]["callbacks"][k]["calls"],
            "{k}"
        );
    }
    assert_eq!(one[0]["runs"], 1);
    assert!(one[0].get("run_p99_us").is_none(), "{:?}", one[0]);
    // Out of range.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_compass"))
        .args([
            "bench",
            "--repeat",
            "0",
            "--no-replay",
            "--no-policy-replay",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A load that keeps no GPU in use (`--load 0`, or too small for the
/// smallest cluster of --nodes) measured no event at all, and its p99 of 0
/// met the target: a usage error (exit 2) naming the options, as are a
/// load above 1 and `--events 0`.
#[test]
fn loads_that_measure_nothing_are_usage_errors() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_compass"))
            .arg("bench")
            .args(args)
            .args(["--no-replay", "--no-policy-replay", "-q"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, says) in [
        (&["--load", "0"][..], "above 0 and at most 1"),
        (&["--load=-0.5"][..], "above 0 and at most 1"),
        (&["--load", "1.5"][..], "above 0 and at most 1"),
        (&["--load", "nan"][..], "above 0 and at most 1"),
        (&["--events", "0"][..], "at least 1 departure"),
        (
            &["--load", "0.01", "--nodes", "100,10", "--mix", "venus"][..],
            "--load 0.01 keeps no GPU in use on the venus mix's cluster of --nodes 10 (80 GPUs)",
        ),
        (
            &["--load", "0.05", "--nodes", "4", "--mix", "mixed"][..],
            "mixed mix's cluster of --nodes 4 (14 GPUs)",
        ),
    ] {
        let (code, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // One GPU in use is enough to measure.
    let rows = latency_rows(&[
        "--load",
        "0.0125",
        "--nodes",
        "10",
        "--events",
        "20",
        "--mix",
        "venus",
        "--policies",
        "best-fit",
    ]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["remove"]["calls"], 20, "{:?}", rows[0]);
}
