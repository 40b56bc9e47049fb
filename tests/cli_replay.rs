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

/// Clusters whose GPU nodes differ are refused before anything is
/// submitted (a usage error): each is simulated at its own size and all
/// get the same jobs, so their figures would not compare. Stand-in `sinfo`
/// and `sbatch` on PATH answer for two slurm.conf files.
#[test]
fn clusters_with_different_gpu_nodes_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("compass-cli-replay-{}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // 16 x 8 GPUs on `big`, 15 x 8 on `small`
    let sinfo = "#!/bin/sh\nn=16\ncase \"$SLURM_CONF\" in *small*) n=15;; esac\ni=1\nwhile [ $i -le $n ]; do echo \"n$i gpu:8(S:0)\"; i=$((i+1)); done\n";
    for (name, text) in [
        ("bin/sinfo", sinfo),
        ("bin/sbatch", "#!/bin/sh\necho usage\n"),
    ] {
        let p = write(name, text);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let big = write("big.conf", "");
    let small = write("small.conf", "");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |b: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_compass"))
            .env("PATH", &path)
            .args([
                "replay",
                "--jobs",
                "5",
                "--dry-run",
                "--trace",
                "/nonexistent.csv",
            ])
            .arg("--cluster")
            .arg(format!("a={}", big.display()))
            .arg("--cluster")
            .arg(format!("b={}", b.display()))
            .output()
            .expect("run compass")
    };
    let out = run(&small);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "clusters `a` (16 nodes x 8 GPUs) and `b` (15 nodes x 8 GPUs) have different GPU nodes"
        ),
        "{err}"
    );
    // the same nodes pass that check (and stop at the missing trace)
    let out = run(&big);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("different GPU nodes") && err.contains("/nonexistent.csv"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
