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
