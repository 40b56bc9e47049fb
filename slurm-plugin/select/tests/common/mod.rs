//! Harness of the lab-cluster tests: a real Slurm cluster (munge,
//! slurmctld, N slurmd with fake GPUs) on this host, started by
//! `contrib/slurm-lab.sh` with the plugins of this build, and always torn
//! down (Drop runs on panic too). Needs root and the packages of
//! `contrib/install-slurm-deps.sh`.
//!
//! The lab runs the release the plugins were built for (slurm-sys's
//! headers: 22.05 from Debian 12, or 24.11 from `/opt/slurm-24.11` when
//! built with `COMPASS_SLURM_PREFIX=/opt/slurm-24.11`). `COMPASS_LAB_PORT_BASE`
//! moves the ports (default 17100..17900).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use compass_lab_support::Release;
pub use compass_lab_support::{artifact, lossy, repo_root};

/// One lab at a time per test binary (they share CPU and munge load).
static SERIAL: Mutex<()> = Mutex::new(());
static NEXT: AtomicU32 = AtomicU32::new(0);

/// The Slurm release the plugins of this build are for; the lab runs it.
pub fn slurm() -> Release {
    Release::of(slurm_sys::RELEASE)
}

/// That release's name ("22.05", "24.11").
pub fn release() -> &'static str {
    slurm().name()
}

/// A Slurm client (`sbatch`, `squeue`, ...) of that release.
pub fn client(prog: &str) -> PathBuf {
    slurm().client(prog)
}

/// Once per process: for a release built into a prefix, its clients
/// (sbatch, scontrol, ...) first in PATH.
fn select_release() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        if let Some(prefix) = slurm().prefix() {
            let path = std::env::var("PATH").unwrap_or_default();
            std::env::set_var("PATH", format!("{}/bin:{path}", prefix.display()));
        }
    });
}

#[derive(Clone, Copy, Debug)]
pub struct LabOptions {
    /// Run select/cons_tres_compass (else stock select/cons_tres).
    pub compass: bool,
    pub nodes: u32,
    /// compass.conf under slurm-plugin/tests/.
    pub conf: &'static str,
    /// Extra environment of the daemons (test-only hooks).
    pub env: &'static [(&'static str, &'static str)],
}

impl Default for LabOptions {
    fn default() -> Self {
        Self {
            compass: true,
            nodes: 8,
            conf: LAB_CONF,
            env: &[],
        }
    }
}

/// The compass.conf of the lab tests.
pub const LAB_CONF: &str = "lab-compass.conf";

pub struct Lab {
    pub dir: PathBuf,
    conf: PathBuf,
    port_base: u32,
    nodes: u32,
    compass_conf: &'static str,
    _serial: MutexGuard<'static, ()>,
}

impl Lab {
    pub fn start(name: &str, opts: LabOptions) -> Lab {
        if let Some(why) = slurm().unavailable() {
            panic!("lab-cluster tests cannot run: {why}");
        }
        select_release();
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let k = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("compass-lab-{}-{}-{name}", std::process::id(), k));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("lab dir");
        let root = repo_root();
        let base: u32 = std::env::var("COMPASS_LAB_PORT_BASE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(17_100);
        let port_base = base + 20 * (k % 40);
        let lab = Lab {
            conf: dir.join("etc/slurm.conf"),
            dir,
            port_base,
            nodes: opts.nodes,
            compass_conf: opts.conf,
            _serial: serial,
        };
        let mut env: Vec<(&str, PathBuf)> = vec![
            ("LAB_PORT_BASE", port_base.to_string().into()),
            ("LAB_NODES", opts.nodes.to_string().into()),
            ("COMPASS_SPANK_SO", artifact("libcompass_spank.so")),
            ("COMPASS_JOB_SUBMIT_LUA", root.join("etc/job_submit.lua")),
            (
                "COMPASS_CONF",
                root.join("slurm-plugin/tests").join(opts.conf),
            ),
        ];
        env.extend(opts.env.iter().map(|(k, v)| (*k, PathBuf::from(v))));
        if opts.compass {
            env.push((
                "COMPASS_SELECT_SO",
                artifact("libselect_cons_tres_compass.so"),
            ));
        }
        let out = slurm().slurm_lab("up", &lab.dir, env);
        assert!(
            out.status.success(),
            "lab up failed: {}{}",
            lossy(&out.stdout),
            lossy(&out.stderr)
        );
        lab
    }

    /// Runs a Slurm client against this lab.
    pub fn run(&self, prog: &str, args: &[&str]) -> Output {
        Command::new(prog)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"))
    }

    /// `sbatch --parsable -o /dev/null ARGS --wrap CMD`: job id or stderr.
    pub fn sbatch(&self, args: &[&str], wrap: &str) -> Result<u32, String> {
        let mut a = vec!["--parsable", "-o", "/dev/null"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--wrap", wrap]);
        let out = self.run("sbatch", &a);
        if !out.status.success() {
            return Err(lossy(&out.stderr));
        }
        let s = lossy(&out.stdout);
        s.trim()
            .split(';')
            .next()
            .unwrap_or("")
            .parse()
            .map_err(|_| format!("sbatch printed {s}"))
    }

    pub fn submit(&self, args: &[&str]) -> u32 {
        self.sbatch(args, "sleep 600")
            .unwrap_or_else(|e| panic!("sbatch {args:?}: {e}"))
    }

    /// `(state, node list)` of a job from squeue ("" nodes while pending).
    pub fn job(&self, id: u32) -> (String, String) {
        let out = lossy(
            &self
                .run("squeue", &["-h", "-j", &id.to_string(), "-o", "%T %N"])
                .stdout,
        );
        let mut it = out.split_whitespace();
        (
            it.next().unwrap_or("GONE").to_string(),
            it.next().unwrap_or("").to_string(),
        )
    }

    pub fn show_job(&self, id: u32) -> String {
        lossy(
            &self
                .run("scontrol", &["show", "job", "-d", &id.to_string()])
                .stdout,
        )
    }

    /// Per-node GPUs in use, from Slurm (`sinfo GresUsed`), by node name.
    pub fn gpus_used(&self) -> Vec<(String, u32)> {
        let out = lossy(
            &self
                .run("sinfo", &["-h", "-N", "-O", "NodeList:12,GresUsed:60"])
                .stdout,
        );
        let mut v: Vec<(String, u32)> = out
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let node = it.next()?.to_string();
                // `gpu:4(IDX:0-3)`, or typed on the site lab:
                // `gpu:a100:4(IDX:0-3)`; `gpu:0` and `(null)` are 0. An
                // untyped GPU beside typed ones may read `gpu:(null):2(..)`.
                let used = it.next().unwrap_or("gpu:0").replace("(null):", "");
                let n = compass_core::gres::gpus(&used)
                    .unwrap_or_else(|e| panic!("sinfo GresUsed `{l}`: {e}"))
                    .total_u32();
                Some((node, n))
            })
            .collect();
        v.sort_by_key(|(n, _)| n[1..].parse::<u32>().unwrap_or(0));
        v.dedup();
        v
    }

    pub fn partial_nodes(&self, cap: u32) -> usize {
        self.gpus_used()
            .iter()
            .filter(|(_, u)| *u > 0 && *u < cap)
            .count()
    }

    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut ok: impl FnMut() -> bool,
    ) -> Duration {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if ok() {
                return t0.elapsed();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "timed out after {timeout:?} waiting for {what}\n{}",
            self.debug()
        );
    }

    pub fn wait_running(&self, ids: &[u32], timeout: Duration) {
        self.wait_until(&format!("jobs {ids:?} RUNNING"), timeout, || {
            ids.iter().all(|&j| self.job(j).0 == "RUNNING")
        });
    }

    /// The published state. The plugin writes it atomically at its first
    /// tick and after, so a lab that has just started may not have it yet:
    /// this waits up to 20 s for the file to appear (CI saw a wait loop read
    /// it before the first tick), then panics with the error.
    pub fn state_json(&self) -> serde_json::Value {
        let p = self.dir.join("run/compass-state.json");
        let t0 = Instant::now();
        let text = loop {
            match std::fs::read_to_string(&p) {
                Ok(text) => break text,
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        && t0.elapsed() < Duration::from_secs(20) =>
                {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => panic!("{}: {e}\n{}", p.display(), self.debug()),
            }
        };
        serde_json::from_str(&text).expect("state JSON")
    }

    pub fn ctld_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/slurmctld.log")).unwrap_or_default()
    }

    pub fn restart_ctld(&self) {
        let out = slurm().slurm_lab("restart-ctld", &self.dir, [] as [(&str, &str); 0]);
        assert!(out.status.success(), "restart-ctld: {}", lossy(&out.stderr));
    }

    /// Installs select/cons_tres_compass under the running jobs (new
    /// slurm.conf, slurmctld restarted), as an admin would.
    pub fn switch_to_compass(&self) {
        let root = repo_root();
        let out = slurm().slurm_lab(
            "switch",
            &self.dir,
            [
                ("LAB_PORT_BASE", self.port_base.to_string().into()),
                ("LAB_NODES", self.nodes.to_string().into()),
                ("COMPASS_SPANK_SO", artifact("libcompass_spank.so")),
                ("COMPASS_JOB_SUBMIT_LUA", root.join("etc/job_submit.lua")),
                (
                    "COMPASS_CONF",
                    root.join("slurm-plugin/tests").join(self.compass_conf),
                ),
                (
                    "COMPASS_SELECT_SO",
                    artifact("libselect_cons_tres_compass.so"),
                ),
            ] as [(&str, PathBuf); 6],
        );
        assert!(out.status.success(), "switch: {}", lossy(&out.stderr));
    }

    pub fn debug(&self) -> String {
        let q = lossy(&self.run("squeue", &["-o", "%i %T %N %r %b"]).stdout);
        let log = self.ctld_log();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        format!(
            "squeue:\n{q}\nGPUs used: {:?}\nslurmctld.log (last lines):\n{}",
            self.gpus_used(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        slurm().down(&self.dir);
    }
}
