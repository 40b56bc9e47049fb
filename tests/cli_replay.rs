//! `compass replay` refuses bad input with clear messages before it
//! touches any cluster (the end-to-end run is tests/replay_lab.rs).

use std::process::Command;

fn replay(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_compass"))
        .arg("replay")
        .args(args)
        .output()
        .expect("run compass");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_window_needs_a_size() {
    let (ok, err) = replay(&["--cluster", "a=/etc/hostname"]);
    assert!(!ok);
    assert!(err.contains("--jobs K and/or --hours H"), "{err}");
}

#[test]
fn cluster_arguments_are_checked() {
    let (ok, err) = replay(&["--jobs", "5", "--cluster", "nope"]);
    assert!(
        !ok && err.contains("expected NAME=SLURM_CONF[:STATE_FILE]"),
        "{err}"
    );
    let (ok, err) = replay(&["--jobs", "5", "--cluster", "a=/nonexistent/slurm.conf"]);
    assert!(
        !ok && err.contains("/nonexistent/slurm.conf is not a file"),
        "{err}"
    );
    let (ok, err) = replay(&[
        "--jobs",
        "5",
        "--cluster",
        "a=/etc/hostname",
        "--cluster",
        "a=/etc/hostname",
    ]);
    assert!(!ok && err.contains("given twice"), "{err}");
}

#[test]
fn bad_numbers_are_refused() {
    let (ok, err) = replay(&["--jobs", "0", "--cluster", "a=/etc/hostname"]);
    assert!(!ok && err.contains("--jobs must be at least 1"), "{err}");
    let (ok, err) = replay(&[
        "--hours",
        "2",
        "--speedup=-3",
        "--cluster",
        "a=/etc/hostname",
    ]);
    assert!(
        !ok && err.contains("--speedup must be a positive number"),
        "{err}"
    );
    let (ok, err) = replay(&[
        "--hours",
        "2",
        "--max-run",
        "soon",
        "--cluster",
        "a=/etc/hostname",
    ]);
    assert!(
        !ok && err.contains("invalid value 'soon' for '--max-run"),
        "{err}"
    );
}
