//! `compass workload` and the Fair Tree anchors of the policy simulator
//! (issue 15), through the built binary.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A scratch directory removed on drop, even when the test fails.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("compass-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn compass(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_compass"))
        .args(args)
        .output()
        .expect("run compass")
}

/// `compass workload` writes the same trace and budget tree for the same
/// seed, and the policy simulator replays it under the Fair Tree anchors:
/// without preemption nothing is preempted.
#[test]
fn workload_is_seeded_and_replays_under_the_fair_tree_anchors() {
    let dir = Scratch::new("workload");
    let p = |n: &str| dir.0.join(n).to_string_lossy().into_owned();
    for (t, b) in [("a.csv", "a.toml"), ("b.csv", "b.toml")] {
        let out = compass(&[
            "workload",
            "--seed",
            "7",
            "--nodes",
            "8",
            "--days",
            "2",
            "--trace",
            &p(t),
            "--budgets",
            &p(b),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let read = |n: &str| std::fs::read_to_string(dir.0.join(n)).unwrap();
    assert_eq!(read("a.csv"), read("b.csv"));
    assert_eq!(read("a.toml"), read("b.toml"));
    for preempt in ["none", "scavenger"] {
        let out = compass(&[
            "simulate",
            "--trace",
            &p("a.csv"),
            "--budgets",
            &p("a.toml"),
            "--nodes",
            "8",
            "--order",
            "fair-tree",
            "--preempt",
            preempt,
            "--json",
            "-q",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(r["owed_delivered"].as_f64().unwrap() > 0.0);
        if preempt == "none" {
            assert_eq!(r["preemptions"], 0);
        }
    }
}

/// `--allocated-demand` above `--demand` is refused with a message naming
/// both; a valid one writes the calibration into the budget tree's header,
/// and the simulator replays the workload with `--free-order
/// under-total-first`, reporting the allocated-only owed figures.
#[test]
fn allocated_demand_is_checked_and_free_order_replays() {
    let dir = Scratch::new("alloc-demand");
    let p = |n: &str| dir.0.join(n).to_string_lossy().into_owned();
    let base = |alloc: &str| {
        compass(&[
            "workload",
            "--seed",
            "3",
            "--nodes",
            "8",
            "--days",
            "2",
            "--demand",
            "2",
            "--allocated-demand",
            alloc,
            "--trace",
            &p("w.csv"),
            "--budgets",
            &p("w.toml"),
        ])
    };
    let bad = base("3");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--allocated-demand") && err.contains("--demand"),
        "{err}"
    );
    let good = base("0.5");
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let toml = std::fs::read_to_string(dir.0.join("w.toml")).unwrap();
    assert!(toml.contains("--allocated-demand 0.5"), "{toml}");
    let out = compass(&[
        "simulate",
        "--trace",
        &p("w.csv"),
        "--budgets",
        &p("w.toml"),
        "--nodes",
        "8",
        "--free-order",
        "under-total-first",
        "--json",
        "-q",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let owed = r["owed_allocated_delivered"].as_f64().unwrap();
    assert!(owed > 0.0 && owed <= 1.0, "{owed}");
    assert!(r["largest_allocated_jobs"].as_u64().is_some());
}

/// Options that made `compass workload` run for ever (more teams than can
/// each get 2%) or exhaust memory (an infinite or vast demand) are usage
/// errors naming the option.
#[test]
fn workloads_that_could_not_be_drawn_are_refused() {
    let dir = Scratch::new("workload-bounds");
    let p = |n: &str| dir.0.join(n).to_string_lossy().into_owned();
    let run = |extra: &[&str]| {
        let (t, b) = (p("w.csv"), p("w.toml"));
        let mut a = vec!["workload", "--trace", &t, "--budgets", &b];
        a.extend_from_slice(extra);
        compass(&a)
    };
    for (extra, want) in [
        (&["--teams", "28"][..], "--teams 28: at most 25"),
        (&["--demand", "inf"][..], "node-days of work"),
        (&["--nodes", "1000000"][..], "node-days of work"),
        (
            &["--days", "100000", "--nodes", "1", "--demand", "0.01"][..],
            "--days 100000: at most 57870",
        ),
    ] {
        let out = run(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "a usage error: {extra:?}: {err}"
        );
        assert!(err.contains(want), "{extra:?}: {err}");
    }
    let out = run(&["--teams", "25", "--nodes", "8", "--days", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
