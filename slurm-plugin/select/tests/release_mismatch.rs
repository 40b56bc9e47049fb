//! Plugins of the wrong Slurm release, on a real lab cluster of this
//! build's release: the select plugin and the SPANK plugin built for the
//! *other* supported release (22.05 <-> 24.11) are refused with one clear
//! line, and nothing crashes.
//!
//! - select: slurmctld's plugin loader compares the plugin's
//!   `plugin_version` with its own `SLURM_VERSION_NUMBER` and logs
//!   `Incompatible Slurm plugin .../select_cons_tres_compass.so version
//!   (<other release>)` (a 24.11 plugin in 22.05), or the dynamic loader
//!   refuses it first, `dlopen(...): undefined symbol: bit_test` (a 22.05
//!   plugin in 24.11: Rust binds every imported function at load time);
//!   with no select plugin left for its `SelectType`, slurmctld stops with
//!   `fatal: Can't find plugin for select/cons_tres_compass`: an orderly
//!   exit, never a crash, and never a run with misread structs.
//! - SPANK (`required` in plugstack.conf): slurmd logs `Incompatible Slurm
//!   plugin .../libcompass_spank.so version (<other release>)` and refuses
//!   to start (`slurmd initialization failed`); slurmctld runs on; every
//!   `sbatch` is refused with Slurm's `Incompatible plugin version` line,
//!   and nothing is queued.
//!
//! Needs the plugins built for the other release, in the directory named by
//! `COMPASS_OTHER_RELEASE_PLUGINS` (its `debug/deps` as `cargo test` leaves
//! it, e.g. `target/slurm-24.11/debug/deps`): `contrib/test.sh` builds both
//! releases and runs this with `--ignored` in both directions. Root only.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{lossy, release, repo_root, slurm};

/// The plugins of the other release, or a panic saying how to get them.
fn other_plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("COMPASS_OTHER_RELEASE_PLUGINS").unwrap_or_else(|| {
        panic!(
            "COMPASS_OTHER_RELEASE_PLUGINS is not set: build the plugins for the other release \
             (contrib/test.sh does) and name their directory"
        )
    });
    let p = Path::new(&dir).join(name);
    assert!(p.exists(), "{} missing", p.display());
    p
}

fn other_release() -> &'static str {
    if release() == "22.05" {
        "24.11"
    } else {
        "22.05"
    }
}

/// Ports past those of lab.rs (`COMPASS_LAB_PORT_BASE` + 0..790).
fn port_base(offset: u32) -> u32 {
    std::env::var("COMPASS_LAB_PORT_BASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(17_100)
        + 800
        + offset
}

/// A lab directory, always `down`ed and removed on drop.
struct Scratch {
    dir: PathBuf,
    port: u32,
}

impl Scratch {
    fn new(name: &str, port: u32) -> Scratch {
        assert!(
            compass_lab_support::is_root(),
            "lab tests need root (they start munge, slurmctld and slurmd)"
        );
        let dir =
            std::env::temp_dir().join(format!("compass-mismatch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("lab dir");
        Scratch { dir, port }
    }

    fn lab(&self, cmd: &str, env: &[(&str, PathBuf)]) -> Output {
        let mut all: Vec<(&str, PathBuf)> = vec![
            ("LAB_PORT_BASE", self.port.to_string().into()),
            ("LAB_NODES", "2".into()),
            (
                "COMPASS_CONF",
                repo_root().join("slurm-plugin/tests/lab-compass.conf"),
            ),
        ];
        all.extend_from_slice(env);
        slurm().slurm_lab(cmd, &self.dir, all)
    }

    fn ctld_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/slurmctld.log")).unwrap_or_default()
    }

    fn ctld_alive(&self) -> bool {
        std::fs::read_to_string(self.dir.join("run/slurmctld.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        slurm().down(&self.dir);
    }
}

#[test]
#[ignore = "needs the plugins of the other Slurm release: COMPASS_OTHER_RELEASE_PLUGINS (contrib/test.sh)"]
fn a_select_plugin_of_another_release_is_refused_and_slurmctld_stops_cleanly() {
    let so = other_plugin("libselect_cons_tres_compass.so");
    let lab = Scratch::new("select", port_base(0));
    let up = lab.lab("up", &[("COMPASS_SELECT_SO", so)]);
    assert!(
        !up.status.success(),
        "a lab with the {} select plugin in Slurm {} came up: {}",
        other_release(),
        release(),
        lossy(&up.stdout)
    );
    // slurmctld exits by itself (fatal); give it a moment.
    let t0 = Instant::now();
    while lab.ctld_alive() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = lab.ctld_log();
    assert!(!lab.ctld_alive(), "slurmctld still runs:\n{log}");
    // Either Slurm's version check names the plugin's release, or (a
    // 22.05 plugin in 24.11) the dynamic loader refuses it first, naming a
    // function of 22.05 that 24.11 no longer has (`bit_test`).
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("select_cons_tres_compass.so")
                && ((l.contains("Incompatible Slurm plugin")
                    && l.contains(&format!("version ({}.", other_release())))
                    || (l.contains("dlopen(") && l.contains("undefined symbol")))
        })
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one line refusing the plugin of Slurm {}:\n{log}",
        other_release()
    );
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(
        last.contains("fatal: Can't find plugin for select/cons_tres_compass"),
        "slurmctld stops with Slurm's own fatal line, not a crash; last line: {last}\n{log}"
    );
    for crash in ["Segmentation", "Aborted", "panicked", "core dumped"] {
        assert!(!log.contains(crash), "{crash} in slurmctld.log:\n{log}");
    }
}

#[test]
#[ignore = "needs the plugins of the other Slurm release: COMPASS_OTHER_RELEASE_PLUGINS (contrib/test.sh)"]
fn a_spank_plugin_of_another_release_is_refused_by_slurmd_and_sbatch_and_slurmctld_runs_on() {
    let so = other_plugin("libcompass_spank.so");
    let lab = Scratch::new("spank", port_base(20));
    // plugstack.conf names the plugin `required`: slurmd refuses to start
    // (the lab does not come up), slurmctld (which loads no SPANK plugin)
    // runs on.
    let up = lab.lab("up", &[("COMPASS_SPANK_SO", so)]);
    assert!(
        !up.status.success(),
        "slurmd started with a SPANK plugin of Slurm {}: {}",
        other_release(),
        lossy(&up.stdout)
    );
    let slurmd_log = std::fs::read_to_string(lab.dir.join("log/slurmd.n1.log")).unwrap_or_default();
    let refused: Vec<&str> = slurmd_log
        .lines()
        .filter(|l| {
            l.contains("Incompatible Slurm plugin")
                && l.contains("libcompass_spank.so")
                && l.contains(&format!("version ({}.", other_release()))
        })
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one line naming the plugin and its release {}:\n{slurmd_log}",
        other_release()
    );
    assert!(
        slurmd_log.contains("slurmd initialization failed"),
        "slurmd stops by itself:\n{slurmd_log}"
    );
    for crash in ["Segmentation", "Aborted", "panicked", "core dumped"] {
        assert!(
            !slurmd_log.contains(crash),
            "{crash} in slurmd.log:\n{slurmd_log}"
        );
    }
    assert!(
        lab.ctld_alive(),
        "slurmctld keeps running:\n{}",
        lab.ctld_log()
    );

    // sbatch loads the same plugstack.conf: every submit is refused.
    let conf = lab.dir.join("etc/slurm.conf");
    let out = Command::new(common::client("sbatch"))
        .args(["--parsable", "-o", "/dev/null", "--wrap", "true"])
        .env("SLURM_CONF", &conf)
        .output()
        .expect("run sbatch");
    let err = lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "sbatch accepted a job: {}",
        lossy(&out.stdout)
    );
    assert!(
        err.contains("libcompass_spank.so") && err.contains("Incompatible plugin version"),
        "sbatch names the plugin and why: {err}"
    );
    let queue = Command::new(common::client("squeue"))
        .args(["-h", "-o", "%i"])
        .env("SLURM_CONF", &conf)
        .output()
        .expect("run squeue");
    assert!(queue.status.success(), "squeue: {}", lossy(&queue.stderr));
    assert_eq!(lossy(&queue.stdout).trim(), "", "nothing was queued");
}
