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

/// Stand-in `sinfo` (16 nodes of 8 GPUs) and `sbatch` on PATH, in a
/// scratch directory removed on drop, for replays that stop before
/// submitting (`--dry-run`, refusals).
struct StandIn {
    dir: std::path::PathBuf,
    path: String,
}

impl StandIn {
    fn new(name: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("compass-cli-{name}-{}", std::process::id()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for (file, text) in [
            (
                "sinfo",
                "#!/bin/sh\ni=1\nwhile [ $i -le 16 ]; do echo \"n$i gpu:8(S:0)\"; i=$((i+1)); done\n",
            ),
            ("sbatch", "#!/bin/sh\necho usage\n"),
        ] {
            let p = bin.join(file);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(dir.join("slurm.conf"), "").unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Self { dir, path }
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    /// `compass replay ARGS --cluster c=<its slurm.conf>`: (exit status,
    /// stdout, stderr).
    fn replay(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_compass"))
            .env("PATH", &self.path)
            .arg("replay")
            .args(args)
            .arg("--cluster")
            .arg(format!("c={}", self.dir.join("slurm.conf").display()))
            .output()
            .expect("run compass");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The budget service of the demo (contrib/demo.sh writes it so), with
/// `enforce`.
fn service_toml(enforce: &str) -> String {
    format!(
        "listen = \"127.0.0.1:18080\"\ndb = \"/tmp/budget.db\"\nadmins = [\"root\"]\ncapacity_gpus = 128\ncycle_s = 2\nwindow_s = 2520\nslurm = \"libslurm\"\nslurm_conf = \"/tmp/slurm-client.conf\"\n\n[protection]\nenforce = {enforce}\n"
    )
}

const BUDGETS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/etc/budgets.venus.toml");
const WINDOW: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/venus-window.csv"
);

/// `--service-config` names the budget service's file: it needs the tree
/// the service charges, and a bad file is refused, naming it and the
/// service's own reason, before any cluster is asked (here the cluster's
/// slurm.conf does not even exist).
#[test]
fn a_bad_service_config_is_refused_before_any_cluster_is_asked() {
    let s = StandIn::new("replay-service-bad");
    let good = s.file("good.toml", &service_toml("true"));
    let (code, _, err) = s.replay(&["--jobs", "5", "--service-config", &good]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--budgets"), "{err}");
    let bad = s.file("bad.toml", &service_toml("\"maybe\""));
    let (ok, err) = replay(&[
        "--jobs",
        "5",
        "--budgets",
        BUDGETS,
        "--service-config",
        &bad,
        "--cluster",
        "a=/nonexistent/slurm.conf",
    ]);
    assert!(!ok);
    assert!(
        err.contains(&format!("--service-config: config {bad}:"))
            && err.contains("enforce must be true, false or \"dry-run\""),
        "{err}"
    );
    assert!(!err.contains("is not a file"), "refused first: {err}");
    let (ok, err) = replay(&[
        "--jobs",
        "5",
        "--budgets",
        BUDGETS,
        "--service-config",
        "/nonexistent/compass-budgetd.toml",
        "--cluster",
        "a=/nonexistent/slurm.conf",
    ]);
    assert!(
        !ok && err.contains("/nonexistent/compass-budgetd.toml"),
        "{err}"
    );
}

/// A good file passes (here a dry run, which submits nothing); a window
/// whose jobs have no account cannot be simulated with the service's
/// fair-share order, and is refused before anything is submitted.
#[test]
fn a_service_config_needs_accounts_on_every_job() {
    let s = StandIn::new("replay-service-plan");
    let toml = s.file("svc.toml", &service_toml("\"dry-run\""));
    let out = s.dir.join("out").display().to_string();
    let (code, stdout, err) = s.replay(&[
        "--trace",
        WINDOW,
        "--start",
        "0",
        "--jobs",
        "5",
        "--budgets",
        BUDGETS,
        "--service-config",
        &toml,
        "--dry-run",
        "--out",
        &out,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(stdout.lines().count(), 5, "{stdout}");
    let trace = s.file(
        "no-accounts.csv",
        "job_id,submit_s,duration_s,num_inst,gpus_per_inst\nA,0,100,1,8\nB,10,100,1,4\n",
    );
    let (code, _, err) = s.replay(&[
        "--trace",
        &trace,
        "--start",
        "0",
        "--jobs",
        "5",
        "--budgets",
        BUDGETS,
        "--service-config",
        &toml,
        "--dry-run",
        "--out",
        &out,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--service-config: job A of the window has no account"),
        "{err}"
    );
}

/// `--dry-run --nodes 16x8` plans without asking any cluster, and plans
/// what a cluster of that shape gets (the stand-in's `sinfo` reports 16
/// nodes of 8 GPUs): the same `jobs.csv` and `plan.json`. `--nodes` is
/// for dry runs only, in place of `--cluster`, and its shape is checked.
#[test]
fn a_dry_run_plans_for_nodes_given_as_for_a_cluster_of_that_shape() {
    let s = StandIn::new("replay-dry-nodes");
    let dir = |name: &str| s.dir.join(name).display().to_string();
    let window = [
        "--trace",
        WINDOW,
        "--start",
        "0",
        "--jobs",
        "40",
        "--dry-run",
    ];
    let (code, _, err) = s.replay(&[&window[..], &["--out", &dir("cluster")]].concat());
    assert_eq!(code, Some(0), "{err}");
    let nodes = dir("nodes");
    let given = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_compass"))
            .arg("replay")
            .args(window)
            .args(extra)
            .output()
            .expect("run compass");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // no PATH change: no sinfo of the stand-in, and no cluster named
    let (code, err) = given(&["--nodes", "16x8", "--out", &nodes]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("40 jobs") && err.contains("16 x 8 GPUs"),
        "{err}"
    );
    for file in ["jobs.csv", "plan.json"] {
        let read = |d: &str| std::fs::read_to_string(format!("{d}/{file}")).unwrap();
        assert_eq!(read(&dir("cluster")), read(&nodes), "{file}");
    }
    let (code, err) = given(&["--nodes", "4x8", "--out", &dir("small")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("4 x 8 GPUs"), "{err}");
    for (extra, why) in [
        (&["--nodes", "16x3"][..], "1, 2, 4 or 8 GPUs"),
        (&["--nodes", "0x8"][..], "at least 1 node"),
        (&["--nodes", "sixteen"][..], "NODESxGPUS"),
        (
            &["--nodes", "16x8", "--cluster", "a=/etc/hostname"][..],
            "cannot be used with",
        ),
    ] {
        let (code, err) = given(extra);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(err.contains(why), "{extra:?}: {err}");
    }
    // a live replay needs clusters: --nodes only with --dry-run
    let out = Command::new(env!("CARGO_BIN_EXE_compass"))
        .args([
            "replay", "--trace", WINDOW, "--jobs", "5", "--nodes", "16x8",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--dry-run"), "{err}");
}
