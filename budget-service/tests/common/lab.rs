//! A real Slurm cluster on this host for the lab tests, of the release
//! this build links ([`release`]: Debian 12's 22.05, or 24.11 from
//! `/opt/slurm-24.11` when built with `COMPASS_SLURM_PREFIX`)
//! (`contrib/slurm-lab.sh`: munge, slurmctld, N slurmd with fake GPUs),
//! configured with `etc/slurm-budget.conf` (priority/multifactor, every
//! weight 0: the site factor is the priority). Root only: [`skip_reason`]
//! says why a host cannot run it. `down` on drop, so the cluster is torn
//! down when a test fails too. `COMPASS_LAB_PORT_BASE=B` moves every lab
//! to `B + (its own base mod 1000)` (as the select plugin's lab tests), so
//! several checkouts can run them on one host.

use std::path::PathBuf;
use std::process::{Command, Output};

use compass_budget::auth::Authenticator;
use compass_budget::{BudgetError, Result};
use compass_core::fairshare::NodeSpec;
use compass_lab_support::Release;
pub use compass_lab_support::{lossy, repo_root};

/// The Slurm release this build links; the lab runs it.
fn slurm() -> Release {
    Release::of(slurm_sys::RELEASE)
}

/// The Slurm release ("22.05", "24.11") this build links.
pub fn release() -> &'static str {
    slurm().name()
}

/// A Slurm client (`sbatch`, `squeue`, ...) of that release.
pub fn client(prog: &str) -> PathBuf {
    slurm().client(prog)
}

/// Why this host cannot run a lab test, if it cannot.
pub fn skip_reason() -> Option<String> {
    slurm().unavailable()
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

/// Why this host cannot run `test`, printed as `SKIPPED test: why`; false
/// when it can.
pub fn skipped(test: &str) -> bool {
    match skip_reason() {
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            true
        }
        None => false,
    }
}

/// What cluster to start.
#[derive(Default)]
pub struct LabSpec {
    /// Names the scratch directory (`<tmp>/<tag>-<pid>`).
    pub tag: &'static str,
    /// slurmctld's port; the slurmd use the next `nodes` ports.
    pub port_base: u32,
    pub nodes: u32,
    pub gpus: u32,
    /// More environment for `slurm-lab.sh` (plugins, compass.conf, ...).
    pub env: Vec<(&'static str, PathBuf)>,
    /// Lines of `etc/slurm-budget.conf` replaced for this cluster: (the
    /// whole line, what stands in its place). Each line must be there.
    pub conf_replace: Vec<(&'static str, &'static str)>,
    /// slurm.conf lines after `etc/slurm-budget.conf`'s (a partition,
    /// `PreemptType`, ...).
    pub conf_extra: &'static str,
}

/// `etc/slurm-budget.conf` minus MinJobAge (the lab template sets it),
/// with `spec`'s replacements and extra lines: the cluster's
/// `LAB_EXTRA_CONF`.
fn extra_conf(spec: &LabSpec) -> String {
    let budget = std::fs::read_to_string(repo_root().join("etc/slurm-budget.conf"))
        .expect("etc/slurm-budget.conf");
    for (line, _) in &spec.conf_replace {
        assert!(
            budget.lines().any(|l| l == *line),
            "etc/slurm-budget.conf has no line {line}"
        );
    }
    let mut extra: String = budget
        .lines()
        .filter(|l| !l.starts_with("MinJobAge"))
        .map(|l| {
            let l = spec
                .conf_replace
                .iter()
                .find(|(line, _)| *line == l)
                .map_or(l, |(_, to)| *to);
            format!("{l}\n")
        })
        .collect();
    extra.push_str(spec.conf_extra);
    extra
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
        std::fs::write(dir.join("budget.conf"), extra_conf(&spec)).expect("write budget.conf");
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
        let mut env = vec![
            ("LAB_PORT_BASE", self.spec.port_base.to_string().into()),
            ("LAB_NODES", self.spec.nodes.to_string().into()),
            ("LAB_GPUS", self.spec.gpus.to_string().into()),
            ("LAB_EXTRA_CONF", self.dir.join("budget.conf")),
        ];
        env.extend(self.spec.env.iter().cloned());
        slurm().slurm_lab(cmd, &self.dir, env)
    }

    /// A Slurm client command against this cluster.
    pub fn run(&self, prog: &str, args: &[&str]) -> Output {
        Command::new(client(prog))
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

    /// One `KEY=value` field of `scontrol show job` (empty when absent).
    pub fn job_field(&self, id: u64, key: &str) -> String {
        let show = self.ok("scontrol", &["-o", "show", "job", &id.to_string()]);
        let pat = format!(" {key}=");
        show.find(&pat)
            .map(|i| {
                show[i + pat.len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default()
    }

    /// Diagnostics for a failed wait: the queue, every job Slurm still
    /// knows and the controller's log lines about jobs.
    pub fn squeue(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("log/slurmctld.log")).unwrap_or_default();
        let tail: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("JobId=") || l.contains("requeue"))
            .collect();
        format!(
            "{}\n{}\nslurmctld.log (jobs):\n{}",
            lossy(
                &self
                    .run("squeue", &["-o", "%i %a %P %T %r %N %b %Q"])
                    .stdout
            ),
            lossy(&self.run("scontrol", &["show", "job", "-o"]).stdout),
            tail[tail.len().saturating_sub(60)..].join("\n")
        )
    }

    /// `sbatch` of a `sleep 600` job of `account` with `args`; its id.
    pub fn sbatch(&self, account: &str, args: &[&str]) -> u64 {
        let mut all = vec!["--parsable", "-o", "/dev/null", "-A", account];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--wrap", "sleep 600"]);
        self.ok("sbatch", &all).trim().parse().expect("job id")
    }

    /// A held job tagged with `min_runtime` and `resumable` (what
    /// job_submit.lua writes for `--min-runtime` and `--resumable`), then
    /// released.
    pub fn tagged(&self, account: &str, min_runtime: u32, resumable: bool, args: &[&str]) -> u64 {
        let mut all = vec!["-H"];
        all.extend_from_slice(args);
        let id = self.sbatch(account, &all);
        let tag = format!(
            "AdminComment=compass:min_runtime={min_runtime},resumable={}",
            u8::from(resumable)
        );
        self.ok("scontrol", &["update", &format!("JobId={id}"), &tag]);
        self.ok("scontrol", &["release", &id.to_string()]);
        id
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        slurm().down(&self.dir);
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

/// A tree of one root, `org`, over `teams` (name and share; each team's
/// Slurm account is its name).
pub fn org_tree(teams: &[(&str, f64)]) -> Vec<NodeSpec> {
    std::iter::once(spec("org", None, 1.0, None))
        .chain(
            teams
                .iter()
                .map(|(team, share)| spec(team, Some("org"), *share, Some(team))),
        )
        .collect()
}

/// The service a lab test runs beside its cluster.
pub struct ServiceSpec {
    /// More TOML lines for its config (see [`service_state`]).
    pub config: &'static str,
    pub tree: Vec<NodeSpec>,
    /// Whether the cycle requeues and cancels through libslurm
    /// (`Cycle::with_actions`), or only reads and pushes priorities.
    pub act: bool,
}

/// The service reading a lab through libslurm: its reader, state and
/// cycle (not stepped yet).
pub struct Service {
    pub slurm: std::sync::Arc<compass_budget::slurm::libslurm::LibSlurm>,
    pub state: std::sync::Arc<compass_budget::state::AppState>,
    pub cycle: compass_budget::cycle::Cycle,
}

impl Lab {
    /// A fresh [`Service`] on this cluster. libslurm is initialised once
    /// per process: one call per test binary.
    pub fn service(&self, spec: ServiceSpec) -> Service {
        use compass_budget::cycle::Cycle;
        use compass_budget::slurm::libslurm::LibSlurm;
        let slurm = std::sync::Arc::new(LibSlurm::new(Some(self.conf.clone())));
        let state = service_state(self, spec.config, spec.tree);
        let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
        if spec.act {
            cycle = cycle.with_actions(slurm.clone());
        }
        Service {
            slurm,
            state,
            cycle,
        }
    }
}

/// Steps `cycle` until `ok` holds (about twice a second); fails with the
/// lab's diagnostics after `timeout`.
pub fn step_until(
    lab: &Lab,
    cycle: &mut compass_budget::cycle::Cycle,
    what: &str,
    timeout: std::time::Duration,
    mut ok: impl FnMut() -> bool,
) {
    let start = std::time::Instant::now();
    loop {
        cycle.step().expect("cycle against the lab");
        if ok() {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out waiting for {what}; squeue:\n{}",
            lab.squeue()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}
