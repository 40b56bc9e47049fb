//! What the replay lab tests share (`tests/replay_lab.rs`, the homogeneous
//! lab; `tests/replay_site_lab.rs`, the site lab): the Slurm release of this
//! build, the plugin libraries it built, lab clusters started by
//! `contrib/slurm-lab.sh` and torn down when dropped, and one
//! `compass replay` run with its report.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// `default`, or `COMPASS_REPLAY_LAB_PORT_BASE + default % 1000` when set
/// (e.g. 23000: 23300 and 23400), for a machine where the defaults are taken.
pub fn port(default: u32) -> u32 {
    std::env::var("COMPASS_REPLAY_LAB_PORT_BASE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(default, |b| b + default % 1000)
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Slurm release this build is for ("22.05", "24.11"; build.rs reads
/// it from the headers): the labs run it (`LAB_SLURM`).
pub fn release() -> &'static str {
    let v = env!("COMPASS_SLURM_VERSION");
    v.get(..5).unwrap_or(v)
}

/// Where that release is installed: `None` for Debian 12's 22.05 (`/usr`),
/// else `LAB_SLURM_PREFIX` or `/opt/slurm-<release>` (contrib/build-slurm.sh).
pub fn prefix() -> Option<PathBuf> {
    (release() != "22.05").then(|| {
        std::env::var_os("LAB_SLURM_PREFIX")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(format!("/opt/slurm-{}", release())))
    })
}

/// Panics with what to run when the test cannot start a lab: not root, or
/// the release not installed.
pub fn require_lab() {
    assert!(
        geteuid() == 0,
        "the replay lab tests need root (they start munge, slurmctld and slurmd)"
    );
    match prefix() {
        None => assert!(
            Path::new("/usr/sbin/slurmctld-wlm").exists(),
            "Slurm is not installed: run contrib/install-slurm-deps.sh"
        ),
        Some(p) => assert!(
            p.join("sbin/slurmctld").exists(),
            "Slurm {} is not in {}: run contrib/build-slurm.sh {}",
            release(),
            p.display(),
            release()
        ),
    }
}

/// A plugin library built by this cargo invocation: the newest copy next to
/// the test executable (deps/ or the profile directory).
pub fn artifact(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    let deps = exe.parent().expect("deps dir");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = [
        deps.to_path_buf(),
        deps.parent().expect("profile dir").to_path_buf(),
    ]
    .into_iter()
    .map(|d| d.join(name))
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .collect();
    found.sort();
    found.pop().map(|(_, p)| p).unwrap_or_else(|| {
        panic!(
            "{name} is not built next to {}: run `cargo build -p compass-select -p compass-spank` \
             (cargo test --workspace builds it)",
            exe.display()
        )
    })
}

/// One lab cluster; `slurm-lab.sh down` when dropped (panics included).
pub struct Lab {
    pub dir: PathBuf,
}

impl Lab {
    /// Starts lab `name` on ports `port_base`..: with the compass plugins
    /// (select, SPANK, job_submit.lua, tests/replay-compass.conf) when
    /// `compass`; `env` adds slurm-lab.sh variables (`LAB_LAYOUT`, `LAB_NODES`...).
    pub fn up(name: &str, port_base: u32, compass: bool, env: &[(&str, &str)]) -> Lab {
        let dir =
            std::env::temp_dir().join(format!("compass-replay-lab-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("lab dir");
        let lab = Lab { dir };
        let root = repo_root();
        let mut cmd = Command::new(root.join("contrib/slurm-lab.sh"));
        cmd.arg("up")
            .arg(&lab.dir)
            .env("LAB_SLURM", release())
            .env("LAB_PORT_BASE", port_base.to_string())
            .envs(env.iter().copied());
        if compass {
            cmd.env(
                "COMPASS_SELECT_SO",
                artifact("libselect_cons_tres_compass.so"),
            )
            .env("COMPASS_SPANK_SO", artifact("libcompass_spank.so"))
            .env("COMPASS_JOB_SUBMIT_LUA", root.join("etc/job_submit.lua"))
            .env("COMPASS_CONF", root.join("tests/replay-compass.conf"));
        }
        let out = cmd.output().expect("run contrib/slurm-lab.sh");
        assert!(
            out.status.success(),
            "lab {name} up failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        lab
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.join("etc/slurm.conf")
    }

    /// The select plugin's published state file (tests/replay-compass.conf).
    pub fn state_file(&self) -> PathBuf {
        self.dir.join("run/compass-state.json")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let out = Command::new(repo_root().join("contrib/slurm-lab.sh"))
            .arg("down")
            .arg(&self.dir)
            .output();
        if let Ok(o) = &out {
            if !o.status.success() {
                eprintln!("lab down: {}", String::from_utf8_lossy(&o.stderr));
            }
        }
        if keep() {
            eprintln!("lab kept (COMPASS_KEEP_LAB): {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Keep the labs and the replay's output: `COMPASS_KEEP_LAB=1` when the
/// test fails, `COMPASS_KEEP_LAB=always` also when it passes.
pub fn keep() -> bool {
    match std::env::var("COMPASS_KEEP_LAB") {
        Ok(v) => v == "always" || std::thread::panicking(),
        Err(_) => false,
    }
}

/// Removes a directory when dropped unless [`keep`] says to keep it.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        TempDir(std::env::temp_dir().join(format!("{name}-{}", std::process::id())))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if keep() {
            eprintln!("replay output kept: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn geteuid() -> u32 {
    extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() }
}

/// `compass replay` with `args`, on PATH the release's clients; asserts it
/// succeeded (stdout and the tail of stderr otherwise) and returns stdout
/// and `OUT/report.json`.
pub fn replay(args: &[std::ffi::OsString], out: &Path) -> (String, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compass"));
    if let Some(p) = prefix() {
        // `compass replay` runs sbatch, squeue, ... of the release's prefix.
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", p.join("bin").display()));
    }
    cmd.arg("replay").args(args).arg("--out").arg(out);
    let run = cmd.output().expect("run compass replay");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
    assert!(
        run.status.success(),
        "compass replay failed\nstdout:\n{stdout}\nstderr (tail):\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("report.json")).expect("report.json"),
    )
    .expect("report.json is JSON");
    (stdout, report)
}

/// `compass replay --check` of the Venus window fixture (`WINDOW` args
/// pick the jobs) on `clusters` (`name=slurm.conf[:state file]`), labelled
/// `label`: every check must pass. Returns stdout and report.json.
pub fn replay_checked(
    clusters: &[String],
    window: &[&str],
    label: &str,
    out: &Path,
) -> (String, Value) {
    let mut args: Vec<std::ffi::OsString> = vec![
        "--trace".into(),
        repo_root().join("tests/fixtures/venus-window.csv").into(),
        "--budgets".into(),
        repo_root().join("etc/budgets.venus.toml").into(),
    ];
    for c in clusters {
        args.extend(["--cluster".into(), c.into()]);
    }
    args.extend(window.iter().map(Into::into));
    args.extend(["--label", label, "--timeout", "6m", "--check"].map(Into::into));
    let (stdout, report) = replay(&args, out);
    assert!(stdout.contains("--check: all checks passed"), "{stdout}");
    assert!(report["checks"].as_array().is_some_and(|c| c.is_empty()));
    (stdout, report)
}

/// The cluster `name` of a report.
pub fn cluster<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("cluster {name} in report.json"))
}
