//! A real Slurm 22.05 cluster on this host for the lab tests
//! (`contrib/slurm-lab.sh`: munge, slurmctld, N slurmd with fake GPUs),
//! configured with `etc/slurm-budget.conf` (priority/multifactor, every
//! weight 0: the site factor is the priority). Root only: [`skip_reason`]
//! says why a host cannot run it. `down` on drop, so the cluster is torn
//! down when a test fails too. `COMPASS_LAB_PORT_BASE=B` moves every lab
//! to `B + (its own base mod 1000)` (as the select plugin's lab tests), so
//! several checkouts can run them on one host.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use compass_budget::auth::Authenticator;
use compass_budget::{BudgetError, Result};
use compass_core::fairshare::NodeSpec;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repo root")
}

pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Why this host cannot run a lab test, if it cannot.
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (starts munge, slurmctld and slurmd)".into());
    }
    for bin in ["/usr/sbin/slurmctld-wlm", "/usr/sbin/slurmd-wlm"] {
        if !Path::new(bin).exists() {
            return Some(format!("{bin} missing: run contrib/install-slurm-deps.sh"));
        }
    }
    None
}

/// Refuses every write: the lab tests drive the state directly.
pub struct NoAuth;

impl Authenticator for NoAuth {
    fn authenticate(&self, _c: &str, _p: &[u8]) -> Result<String> {
        Err(BudgetError::Unauthenticated("no writes".into()))
    }
}

pub fn spec(name: &str, parent: Option<&str>, share: f64, account: Option<&str>) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        parent: parent.map(Into::into),
        share,
        managers: vec![],
        account: account.map(Into::into),
    }
}

/// What cluster to start.
pub struct LabSpec {
    /// Names the scratch directory (`<tmp>/<tag>-<pid>`).
    pub tag: &'static str,
    /// slurmctld's port; the slurmd use the next `nodes` ports.
    pub port_base: u32,
    pub nodes: u32,
    pub gpus: u32,
    /// More environment for `slurm-lab.sh` (plugins, compass.conf, ...).
    pub env: Vec<(&'static str, PathBuf)>,
}

/// The lab cluster; `down` on drop.
pub struct Lab {
    pub dir: PathBuf,
    pub conf: PathBuf,
    spec: LabSpec,
}

impl Lab {
    pub fn start(mut spec: LabSpec) -> Lab {
        if let Some(b) = std::env::var("COMPASS_LAB_PORT_BASE")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
        {
            spec.port_base = b + spec.port_base % 1000;
        }
        let dir = std::env::temp_dir().join(format!("{}-{}", spec.tag, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("lab dir");
        // etc/slurm-budget.conf minus MinJobAge (the lab template sets it).
        let budget = std::fs::read_to_string(repo_root().join("etc/slurm-budget.conf"))
            .expect("etc/slurm-budget.conf");
        let extra: String = budget
            .lines()
            .filter(|l| !l.starts_with("MinJobAge"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(dir.join("budget.conf"), extra).expect("write budget.conf");
        let lab = Lab {
            conf: dir.join("etc/slurm.conf"),
            dir,
            spec,
        };
        let out = lab.script("up");
        assert!(
            out.status.success(),
            "lab up failed: {}{}",
            lossy(&out.stdout),
            lossy(&out.stderr)
        );
        lab
    }

    /// `contrib/slurm-lab.sh CMD LAB` with this cluster's settings.
    pub fn script(&self, cmd: &str) -> Output {
        Command::new(repo_root().join("contrib/slurm-lab.sh"))
            .arg(cmd)
            .arg(&self.dir)
            .env("LAB_PORT_BASE", self.spec.port_base.to_string())
            .env("LAB_NODES", self.spec.nodes.to_string())
            .env("LAB_GPUS", self.spec.gpus.to_string())
            .env("LAB_EXTRA_CONF", self.dir.join("budget.conf"))
            .envs(self.spec.env.iter().map(|(k, v)| (*k, v)))
            .output()
            .expect("run contrib/slurm-lab.sh")
    }

    /// A Slurm client command against this cluster.
    pub fn run(&self, prog: &str, args: &[&str]) -> Output {
        Command::new(prog)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"))
    }

    /// [`Lab::run`] that must succeed; its stdout.
    pub fn ok(&self, prog: &str, args: &[&str]) -> String {
        let out = self.run(prog, args);
        assert!(
            out.status.success(),
            "{prog} {args:?}: {}",
            lossy(&out.stderr)
        );
        lossy(&out.stdout)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.script("down");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh service state (in-memory ledger) that reads `lab` through
/// libslurm, with `extra` TOML lines in its config and `tree` imported.
pub fn service_state(
    lab: &Lab,
    extra: &str,
    tree: Vec<NodeSpec>,
) -> std::sync::Arc<compass_budget::state::AppState> {
    use compass_budget::state::{AppState, SystemClock};
    let config = compass_budget::config::Config::parse(
        &format!(
            "db = \":memory:\"\ncapacity_gpus = {}\nwindow_s = 3600\ncycle_s = 1\n\
             slurm = \"libslurm\"\nslurm_conf = \"{}\"\n{extra}",
            lab.spec.nodes * lab.spec.gpus,
            lab.conf.display()
        ),
        "lab",
    )
    .expect("config");
    let state = AppState::new(
        config,
        compass_budget::db::Db::open_in_memory().expect("db"),
        std::sync::Arc::new(NoAuth),
        std::sync::Arc::new(SystemClock),
    );
    let now = state.now();
    state
        .db()
        .edit_tree("root", "import", "lab tree", now, |_| Ok(tree))
        .expect("tree");
    state
}
