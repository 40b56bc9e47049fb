//! What the replay lab tests share (`tests/replay_lab.rs`, the homogeneous
//! lab; `tests/replay_site_lab.rs`, the site lab): the Slurm release of this
//! build, the plugin libraries it built, lab clusters started by
//! `contrib/slurm-lab.sh` and torn down when dropped, and one
//! `compass replay` run with its report.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use compass_lab_support::Release;
pub use compass_lab_support::{artifact, keep, repo_root};
use serde_json::Value;

/// `default`, or `COMPASS_REPLAY_LAB_PORT_BASE + default % 1000` when set
/// (e.g. 23000: 23300 and 23400), for a machine where the defaults are taken.
pub fn port(default: u32) -> u32 {
    std::env::var("COMPASS_REPLAY_LAB_PORT_BASE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(default, |b| b + default % 1000)
}

/// The Slurm release this build is for (build.rs reads it from the
/// headers); the labs run it.
fn slurm() -> Release {
    Release::of(env!("COMPASS_SLURM_VERSION"))
}

/// That release's name ("22.05", "24.11").
pub fn release() -> &'static str {
    slurm().name()
}

/// Panics with what to run when the test cannot start a lab: not root, or
/// the release not installed.
pub fn require_lab() {
    if let Some(why) = slurm().unavailable() {
        panic!("the replay lab tests cannot run: {why}");
    }
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
        let mut all: Vec<(&str, PathBuf)> = vec![("LAB_PORT_BASE", port_base.to_string().into())];
        all.extend(env.iter().map(|(k, v)| (*k, PathBuf::from(v))));
        if compass {
            all.extend([
                (
                    "COMPASS_SELECT_SO",
                    artifact("libselect_cons_tres_compass.so"),
                ),
                ("COMPASS_SPANK_SO", artifact("libcompass_spank.so")),
                ("COMPASS_JOB_SUBMIT_LUA", root.join("etc/job_submit.lua")),
                ("COMPASS_CONF", root.join("tests/replay-compass.conf")),
            ]);
        }
        let out = slurm().slurm_lab("up", &lab.dir, all);
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

    /// `compass replay --cluster` for this lab: `name=slurm.conf`, with
    /// `:state file` on a compass cluster.
    pub fn cluster_arg(&self, name: &str, compass: bool) -> String {
        let mut arg = format!("{name}={}", self.conf().display());
        if compass {
            arg.push_str(&format!(":{}", self.state_file().display()));
        }
        arg
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        slurm().down(&self.dir);
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

/// `compass replay` with `args`, on PATH the release's clients; asserts it
/// succeeded (stdout and the tail of stderr otherwise) and returns stdout
/// and `OUT/report.json`.
pub fn replay(args: &[std::ffi::OsString], out: &Path) -> (String, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compass"));
    if let Some(p) = slurm().prefix() {
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

/// Whether the report's plan has a job of `instances` x `gpus` GPUs.
pub fn plan_has(report: &Value, instances: u64, gpus: u64) -> bool {
    report["plan"]["jobs"]
        .as_array()
        .expect("plan jobs")
        .iter()
        .any(|j| j["instances"].as_u64() == Some(instances) && j["gpus"].as_u64() == Some(gpus))
}

/// One cluster's `samples.csv` (one row per poll), each row by column name.
pub fn samples(cluster_dir: &Path) -> Vec<std::collections::BTreeMap<String, f64>> {
    let text = std::fs::read_to_string(cluster_dir.join("samples.csv")).expect("samples.csv");
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().expect("header").split(',').collect();
    lines
        .map(|l| {
            head.iter()
                .zip(l.split(','))
                .map(|(k, v)| (k.to_string(), v.parse::<f64>().expect(v)))
                .collect()
        })
        .collect()
}

/// The figures of a homogeneous cluster of `nodes` nodes recomputed from
/// its raw polls (`samples.csv`), independently of the replay's
/// integration: each poll's state held until the next poll, over `T_peak`
/// (a replayed job waiting) or, when the queue never waited, the busy time.
#[derive(Debug, Default)]
pub struct FromPolls {
    pub window_s: f64,
    pub afr: f64,
    pub mean_n_sif: f64,
    pub agu: f64,
    /// Job-seconds waiting jobs would have fitted the free GPUs (all polls).
    pub fit_wait_s: f64,
    pub max_n_sif: f64,
    /// Over the polls with no migration in flight.
    pub max_n_sif_no_flight: f64,
}

pub fn from_polls(rows: &[std::collections::BTreeMap<String, f64>], nodes: f64) -> FromPolls {
    let mut f = FromPolls::default();
    let integrate = |take: &dyn Fn(&std::collections::BTreeMap<String, f64>) -> bool| {
        let (mut time, mut sif, mut util) = (0.0, 0.0, 0.0);
        for w in rows.windows(2) {
            let dt = w[1]["t_s"] - w[0]["t_s"];
            if dt > 0.0 && take(&w[0]) {
                time += dt;
                sif += w[0]["n_sif"] * dt;
                util += w[0]["utilisation"] * dt;
            }
        }
        (time, sif, util)
    };
    let mut w = integrate(&|r| r["pending"] > 0.0);
    if w.0 == 0.0 {
        w = integrate(&|r| r["pending"] + r["running"] + r["completing"] > 0.0);
    }
    f.window_s = w.0;
    f.mean_n_sif = w.1 / w.0;
    f.afr = f.mean_n_sif / nodes;
    f.agu = w.2 / w.0;
    f.fit_wait_s = rows
        .windows(2)
        .map(|w| (w[1]["t_s"] - w[0]["t_s"]).max(0.0) * w[0]["fit_waiting"])
        .sum();
    f.max_n_sif = rows.iter().map(|r| r["n_sif"]).fold(0.0, f64::max);
    f.max_n_sif_no_flight = rows
        .iter()
        .filter(|r| r["in_flight"] == 0.0)
        .map(|r| r["n_sif"])
        .fold(0.0, f64::max);
    f
}

/// The idle time between a requeue and the next start, per requeue, from
/// one cluster's `runs.csv` (each run's start and end): the mean and the
/// number of requeues seen.
pub fn requeue_idle_from_runs(cluster_dir: &Path) -> (f64, u64) {
    let text = std::fs::read_to_string(cluster_dir.join("runs.csv")).expect("runs.csv");
    let mut by_job: std::collections::BTreeMap<String, Vec<(f64, Option<f64>)>> =
        std::collections::BTreeMap::new();
    for l in text.lines().skip(1) {
        // job,slurm_id,submit_s,run,start_s,end_s,nodes
        let f: Vec<&str> = l.split(',').collect();
        by_job
            .entry(f[0].to_string())
            .or_default()
            .push((f[4].parse().unwrap(), f[5].parse().ok()));
    }
    let (mut idle, mut n) = (0.0, 0u64);
    for runs in by_job.values() {
        for w in runs.windows(2) {
            n += 1;
            if let Some(end) = w[0].1 {
                idle += (w[1].0 - end).max(0.0);
            }
        }
    }
    (if n > 0 { idle / n as f64 } else { 0.0 }, n)
}
