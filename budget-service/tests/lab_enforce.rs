//! Enforcement of protected and preemptible time on a real Slurm 22.05
//! cluster on this host (`contrib/slurm-lab.sh`: munge, slurmctld, 2 slurmd
//! x 8 fake GPUs, `etc/slurm-budget.conf`, the compass SPANK plugin and
//! `etc/job_submit.lua`: jobs are submitted with `sbatch --min-runtime=...
//! [--resumable]`), through libslurm. Root only;
//! skipped with a message otherwise. The cluster is always torn down (Drop
//! runs on panic too). The cycle is stepped explicitly, about twice a second.
//!
//! 1. Unallocated jobs hold both nodes (one resumable, one not); an
//!    allocated 2 x 8-GPU job arrives: within one cycle the resumable one is
//!    requeued (and starts again within seconds of room appearing, not after
//!    Slurm's 121 s begin-time delay) and the other is cancelled with the
//!    reason in its admin comment, never requeued.
//! 2. A job of an over-served team with a 20 s min runtime is never
//!    preempted before its 20 s, even with an under-served team's job
//!    waiting for its node, and is preempted within a couple of cycles after.
//! 3. A node marked faulty is `draining` at once; its unallocated job is
//!    preempted at the next cycle, its protected job when its 20 s end; the
//!    node is then `drained`; `repaired` returns it. An unknown node is
//!    refused.
//!
//! 4. The real `compass-budgetd` (`slurm = "libslurm"`, cycle every second)
//!    with the lab's munged: `compass node fault|repaired` through the CLI
//!    code (MUNGE-authenticated, admin) drains and resumes a node, refuses
//!    an unknown one; the daemon preempts an unallocated job on its own and
//!    `GET /api/v1/queue/{job}` (what `compass why` prints) says why.
//!
//! 5. The livelock of issue 11, and its cause removed (issue 12): a
//!    pending allocated job in a partition that holds only n1 (busy with a
//!    protected job) cannot use n2, where an unallocated resumable job runs.
//!    The planner reads the job's partition and n2's through libslurm, so
//!    the job on n2 is never preempted for it (before issue 12 it was
//!    requeued once and the preemption marked fruitless; before issue 11,
//!    every cycle). The fruitless path itself is unit-tested in
//!    `src/enforce.rs`.
//!
//! One cluster for all sections (libslurm is initialised once per process).
//! Ports 16930-16932 (LAB_PORT_BASE=16930); the daemon listens on a free
//! loopback port.

use compass_budget::cycle::Cycle;
use compass_budget::db::{ActionRow, Db};
use compass_budget::enforce;
use compass_budget::slurm::libslurm::LibSlurm;
use compass_budget::slurm::SlurmSource;
use compass_budget::state::AppState;
use compass_budget::BudgetError;
use compass_core::fairshare::{Interval, Kind};
use compass_core::model::JobId;
mod common;
mod prom;

use common::lab::{repo_root, service_state, skip_reason, spec, step_until, Lab, LabSpec};
use compass_lab_support::artifact;

use compass_budget::cli::{run_node, NodeArgs, NodeCmd};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PORT_BASE: u32 = 16_930;
const NODES: u32 = 2;
const GPUS: u32 = 8;
const RICH: &str = "team-rich";
const POOR: &str = "team-poor";
/// Min runtime of the protected jobs, seconds.
const PROTECT_S: i64 = 20;

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Lab {
    /// Submits a job the way users do: `--min-runtime` and `--resumable`
    /// go through the compass SPANK plugin and etc/job_submit.lua into the
    /// job's AdminComment, where the service reads them.
    fn submit(
        &self,
        account: &str,
        gres: &str,
        min_s: i64,
        resumable: bool,
        extra: &[&str],
    ) -> u64 {
        let min = format!("--min-runtime={min_s}s");
        let mut args = vec!["--parsable", "-o", "/dev/null", "-A", account, gres, &min];
        if resumable {
            args.push("--resumable");
        }
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--wrap", "sleep 600"]);
        let out = self.ok("sbatch", &args);
        let id: u64 = out.trim().parse().expect("sbatch job id");
        let tag = self.job_field(id, "AdminComment");
        assert!(
            tag.starts_with(&format!(
                "compass:min_runtime={min_s},resumable={}",
                u8::from(resumable)
            )),
            "job {id}: SPANK + job_submit.lua tag: {tag}"
        );
        id
    }

    /// `scontrol show job -o ID` (one line).
    fn show(&self, id: u64) -> String {
        self.ok("scontrol", &["show", "job", "-o", &id.to_string()])
    }

    fn job_state(&self, id: u64) -> String {
        self.job_field(id, "JobState")
    }

    fn node_state(&self, node: &str) -> String {
        self.ok("sinfo", &["-h", "-N", "-n", node, "-o", "%T"])
            .trim()
            .to_string()
    }

    fn clear(&self) {
        self.ok("scancel", &["--full", "-u", "root"]);
        let start = Instant::now();
        while !self.ok("squeue", &["-h", "-o", "%i"]).trim().is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "queue not empty: {}",
                self.squeue()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The lab cluster with the compass SPANK plugin and job_submit.lua.
fn start_lab(tag: &'static str, port_base: u32) -> Lab {
    Lab::start(LabSpec {
        tag,
        port_base,
        nodes: NODES,
        gpus: GPUS,
        env: vec![
            ("COMPASS_SPANK_SO", artifact("libcompass_spank.so")),
            (
                "COMPASS_JOB_SUBMIT_LUA",
                repo_root().join("etc/job_submit.lua"),
            ),
            (
                "COMPASS_CONF",
                repo_root().join("slurm-plugin/tests/lab-compass.conf"),
            ),
        ],
        ..LabSpec::default()
    })
}

/// A fresh service (in-memory database): rich 30%, poor 70%.
fn service(lab: &Lab) -> Arc<AppState> {
    service_state(
        lab,
        "admins = [\"root\"]\n[protection]\nenforce = true\n",
        vec![
            spec("org", None, 1.0, None),
            spec("rich", Some("org"), 0.3, Some(RICH)),
            spec("poor", Some("org"), 0.7, Some(POOR)),
        ],
    )
}

fn actions_on(state: &AppState, job: u64) -> Vec<ActionRow> {
    state
        .db()
        .actions(Some(job), 100)
        .expect("actions")
        .into_iter()
        .filter(|a| a.job == Some(job))
        .collect()
}

#[test]
fn lab_enforcement_preempts_protects_and_drains() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED lab_enforcement_preempts_protects_and_drains: {why}");
        return;
    }
    let lab = start_lab("compass-enforce-lab", PORT_BASE);
    let slurm = Arc::new(LibSlurm::new(Some(lab.conf.clone())));

    // --- 1. Unallocated victims: requeue the resumable, cancel the other ---
    {
        let state = service(&lab);
        let mut cycle =
            Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
        let u = lab.submit(RICH, "--gres=gpu:8", 0, true, &["-w", "n1"]);
        let n = lab.submit(RICH, "--gres=gpu:8", 0, false, &["-w", "n2"]);
        step_until(
            &lab,
            &mut cycle,
            "both unallocated jobs to run",
            Duration::from_secs(30),
            || lab.job_state(u) == "RUNNING" && lab.job_state(n) == "RUNNING",
        );
        let rep = cycle.step().expect("cycle");
        assert_eq!(
            rep.enforced,
            Default::default(),
            "nothing to do yet: {rep:?}"
        );

        let a = lab.submit(POOR, "--gres=gpu:8", 600, true, &["-N", "2"]);
        // One cycle once Slurm lists the job as pending.
        std::thread::sleep(Duration::from_millis(300));
        let rep = cycle.step().expect("cycle");
        assert_eq!(
            (rep.enforced.requeued, rep.enforced.cancelled),
            (1, 1),
            "one cycle preempts both unallocated jobs: {rep:?}\n{}",
            lab.squeue()
        );
        let ua = actions_on(&state, u);
        assert_eq!(ua.len(), 1, "{ua:?}");
        assert_eq!(
            (
                ua[0].action.as_str(),
                ua[0].cause_job,
                ua[0].rule.as_deref(),
                ua[0].ok
            ),
            ("requeue", Some(a), Some("unallocated"), true)
        );
        let na = actions_on(&state, n);
        assert_eq!(na.len(), 1, "{na:?}");
        assert_eq!(
            (
                na[0].action.as_str(),
                na[0].cause_job,
                na[0].rule.as_deref()
            ),
            ("cancel", Some(a), Some("unallocated"))
        );
        step_until(
            &lab,
            &mut cycle,
            "the allocated job to run",
            Duration::from_secs(30),
            || lab.job_state(a) == "RUNNING",
        );
        // The service counts a start at its first snapshot showing the job
        // running, which may come after the squeue above (it failed once
        // on 24.11 with the count still 0): one more cycle sees it.
        cycle.step().expect("cycle");
        // /metrics: both preemptions by rule and outcome, and the wait of
        // job a (16 GPUs) from submit to start.
        let m = prom::parse(&compass_budget::metrics::encode(&state).expect("metrics"));
        let pre = |action| {
            m.value(
                "compass_preemptions_total",
                &[
                    ("rule", "unallocated"),
                    ("action", action),
                    ("outcome", "ok"),
                ],
            )
        };
        assert_eq!((pre("requeue"), pre("cancel")), (Some(1.0), Some(1.0)));
        assert_eq!(
            m.value("compass_job_wait_seconds_count", &[("job_gpus", "16")]),
            Some(1.0)
        );
        // The non-resumable victim was cancelled, never requeued, and says why.
        let shown = lab.show(n);
        assert!(shown.contains("JobState=CANCELLED"), "{shown}");
        assert!(shown.contains("Restarts=0"), "{shown}");
        assert!(
            shown.contains("preempted: job") && shown.contains("cancelled (not resumable)"),
            "reason in the record: {shown}"
        );
        assert!(
            shown.contains("compass:min_runtime=0,resumable=0"),
            "tag kept: {shown}"
        );
        // The resumable one waits, eligible now (not held 121 s for BeginTime).
        assert_eq!(lab.job_state(u), "PENDING");
        step_until(
            &lab,
            &mut cycle,
            "the requeued job to lose its 121 s begin time",
            Duration::from_secs(10),
            || {
                // Slurm's Reason may stay `BeginTime` until its next pass
                // over the job: check the begin time itself.
                let snap = slurm.snapshot().expect("snapshot");
                snap.pending
                    .iter()
                    .find(|j| j.job.0 == u)
                    .is_some_and(|j| j.begin_after.is_none_or(|b| b <= unix_now() + 5))
            },
        );
        let eligible = lab.job_field(u, "EligibleTime");
        // Never acted on twice, even with the victims still listed.
        for _ in 0..3 {
            cycle.step().expect("cycle");
        }
        assert_eq!(actions_on(&state, u).len(), 1);
        assert_eq!(actions_on(&state, n).len(), 1);
        // Room appears: the requeued job starts again within seconds.
        lab.ok("scancel", &[&a.to_string()]);
        let t = Instant::now();
        step_until(
            &lab,
            &mut cycle,
            "the requeued job to restart",
            Duration::from_secs(30),
            || lab.job_state(u) == "RUNNING",
        );
        eprintln!(
            "requeued job restarted {:.1}s after room appeared (EligibleTime {eligible})",
            t.elapsed().as_secs_f64()
        );
        assert!(t.elapsed() < Duration::from_secs(30));
        assert_eq!(lab.job_field(u, "Restarts"), "1");
        lab.clear();
    }

    // --- 2. Protected until its min runtime, preempted right after --------
    {
        let state = service(&lab);
        // The rich team already used 8 GPUs for most of the window.
        let now = state.now();
        state
            .db()
            .ingest(
                &[Interval {
                    job: JobId(999_999),
                    account: RICH.into(),
                    gpus: 8,
                    start: now - 3000,
                    end: Some(now - 100),
                    kind: Kind::Allocated,
                    weight: 1.0,
                }],
                now,
            )
            .expect("seed usage");
        let mut cycle =
            Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
        let r = lab.submit(RICH, "--gres=gpu:8", PROTECT_S, true, &["-w", "n1"]);
        let p = lab.submit(POOR, "--gres=gpu:8", 3600, false, &["-w", "n2"]);
        step_until(
            &lab,
            &mut cycle,
            "both teams' jobs to run",
            Duration::from_secs(30),
            || lab.job_state(r) == "RUNNING" && lab.job_state(p) == "RUNNING",
        );
        cycle.step().expect("cycle"); // the snapshot that shows it running
        let started = state
            .running_job(r)
            .and_then(|j| j.start)
            .expect("start of r");
        let q = lab.submit(POOR, "--gres=gpu:8", 600, true, &[]);
        let mut preempted_at = None;
        let begin = Instant::now();
        while preempted_at.is_none() {
            cycle.step().expect("cycle");
            let acts = actions_on(&state, r);
            if let Some(a) = acts.first() {
                preempted_at = Some(a.at);
                assert_eq!(
                    (a.action.as_str(), a.cause_job, a.rule.as_deref()),
                    ("requeue", Some(q), Some("over_served")),
                    "{a:?}"
                );
            } else {
                assert_eq!(
                    lab.job_state(r),
                    "RUNNING",
                    "never preempted while protected"
                );
                assert!(
                    begin.elapsed() < Duration::from_secs(60),
                    "not preempted after its protection: {}",
                    lab.squeue()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let at = preempted_at.unwrap_or_default();
        eprintln!("protected job started {started}, preempted at {at} (min runtime {PROTECT_S} s)");
        assert!(
            at >= started + PROTECT_S,
            "preempted at {at}, protected until {}",
            started + PROTECT_S
        );
        assert!(
            at <= started + PROTECT_S + 3,
            "preempted at {at}: more than a cycle or two late"
        );
        assert!(unix_now() >= started + PROTECT_S);
        step_until(
            &lab,
            &mut cycle,
            "the under-served team's job to run",
            Duration::from_secs(30),
            || lab.job_state(q) == "RUNNING",
        );
        assert_eq!(
            lab.job_state(p),
            "RUNNING",
            "the poor team's protected job is untouched"
        );
        lab.clear();
    }

    // --- 3. Faulty node: draining, emptied as protections end, drained ---
    {
        let state = service(&lab);
        let mut cycle =
            Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
        let f1 = lab.submit(RICH, "--gres=gpu:4", PROTECT_S, true, &["-w", "n1"]);
        let f2 = lab.submit(RICH, "--gres=gpu:4", 0, true, &["-w", "n1"]);
        step_until(
            &lab,
            &mut cycle,
            "both jobs on n1 to run",
            Duration::from_secs(30),
            || lab.job_state(f1) == "RUNNING" && lab.job_state(f2) == "RUNNING",
        );
        cycle.step().expect("cycle"); // the snapshot that shows it running
        let started = state
            .running_job(f1)
            .and_then(|j| j.start)
            .expect("start of f1");
        let e = enforce::mark_faulty(&state, "n9", "typo", "root").expect_err("unknown node");
        assert!(matches!(e, BudgetError::NotFound(_)), "{e}");
        enforce::mark_faulty(&state, "n1", "ECC errors", "root").expect("fault n1");
        assert_eq!(
            lab.node_state("n1"),
            "draining",
            "DRAIN at once, jobs still running"
        );
        let reason = lab.ok("sinfo", &["-h", "-N", "-n", "n1", "-o", "%E"]);
        assert!(reason.contains("ECC errors"), "{reason}");
        // The unallocated job goes at the next cycle; the protected one stays.
        cycle.step().expect("cycle");
        let a2 = actions_on(&state, f2);
        assert_eq!(a2.len(), 1, "{a2:?}");
        assert_eq!(
            (
                a2[0].action.as_str(),
                a2[0].rule.as_deref(),
                a2[0].node.as_deref()
            ),
            ("requeue", Some("faulty_node"), Some("n1"))
        );
        let mut f1_at = None;
        let begin = Instant::now();
        while f1_at.is_none() {
            cycle.step().expect("cycle");
            match actions_on(&state, f1).first() {
                Some(a) => {
                    assert_eq!(a.rule.as_deref(), Some("faulty_node"));
                    f1_at = Some(a.at);
                }
                None => {
                    assert_eq!(lab.job_state(f1), "RUNNING", "protected job kept");
                    assert_eq!(
                        lab.node_state("n1"),
                        "draining",
                        "not drained before its protection ends"
                    );
                    assert!(
                        begin.elapsed() < Duration::from_secs(60),
                        "{}",
                        lab.squeue()
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let at = f1_at.unwrap_or_default();
        assert!(
            at >= started + PROTECT_S,
            "evicted at {at} before {}",
            started + PROTECT_S
        );
        assert!(at <= started + PROTECT_S + 3, "evicted at {at}: late");
        step_until(
            &lab,
            &mut cycle,
            "n1 to be drained",
            Duration::from_secs(15),
            || lab.node_state("n1") == "drained",
        );
        let faulty = state.db().faulty().expect("faulty");
        assert_eq!(faulty.len(), 1);
        enforce::mark_repaired(&state, "n1", "root").expect("repaired");
        let st = lab.node_state("n1");
        assert!(!st.starts_with("drain"), "n1 back in service: {st}");
        assert!(state.db().faulty().expect("faulty").is_empty());
        let e = enforce::mark_repaired(&state, "n1", "root").expect_err("not faulty any more");
        assert!(matches!(e, BudgetError::NotFound(_)), "{e}");
    }

    // --- 4. The daemon, the CLI and MUNGE -----------------------------------
    {
        lab.clear();
        let dir = common::TempDir::new("lab-enforce-daemon");
        let db_path = dir.path().join("budget.db");
        {
            let mut db = Db::open(&db_path).expect("daemon db");
            db.edit_tree("root", "import", "30/70", unix_now(), |_| {
                Ok(vec![
                    spec("org", None, 1.0, None),
                    spec("rich", Some("org"), 0.3, Some(RICH)),
                    spec("poor", Some("org"), 0.7, Some(POOR)),
                ])
            })
            .expect("daemon tree");
        }
        let socket = lab.dir.join("munge/munge.socket.2");
        let cfg = dir.path().join("budgetd.toml");
        std::fs::write(
            &cfg,
            format!(
                "db = \"{}\"\nadmins = [\"root\"]\ncapacity_gpus = {}\nwindow_s = 3600\ncycle_s = 1\n\
                 munge_socket = \"{}\"\nslurm = \"libslurm\"\nslurm_conf = \"{}\"\n\
                 [protection]\n",
                db_path.display(),
                NODES * GPUS,
                socket.display(),
                lab.conf.display()
            ),
        )
        .expect("daemon config");
        let daemon = common::Daemon::start(&cfg);
        let get = |path: &str| -> serde_json::Value {
            ureq::get(&format!("{}{path}", daemon.url))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default()
        };
        let wait = |what: &str, mut ok: Box<dyn FnMut() -> bool + '_>| {
            let start = Instant::now();
            while !ok() {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "timed out waiting for {what}; squeue:\n{}",
                    lab.squeue()
                );
                std::thread::sleep(Duration::from_millis(300));
            }
        };
        wait(
            "the daemon's first cycle",
            Box::new(|| get("/api/v1/hosts")["nodes"].as_array().map_or(0, Vec::len) == 2),
        );
        let node = |cmd: NodeCmd| {
            run_node(&NodeArgs {
                conn: common::conn(&daemon.url, &socket),
                cmd,
            })
        };
        node(NodeCmd::Fault {
            node: "n2".into(),
            reason: "PSU".into(),
        })
        .expect("compass node fault n2");
        assert_eq!(lab.node_state("n2"), "drained", "empty: drained at once");
        let e = node(NodeCmd::Fault {
            node: "n7".into(),
            reason: "typo".into(),
        })
        .expect_err("unknown node");
        assert!(e.to_string().contains("404"), "{e}");
        assert_eq!(get("/api/v1/hosts")["faulty"][0]["by"], "root");
        node(NodeCmd::Repaired { node: "n2".into() }).expect("compass node repaired n2");
        // Slurm marks a resumed node not responding (`idle*`) until its
        // next ping.
        wait(
            "n2 back in service",
            Box::new(|| lab.node_state("n2") == "idle"),
        );

        // The daemon preempts on its own; `why` explains it.
        let u = lab.submit(RICH, "--gres=gpu:8", 0, true, &["-w", "n1"]);
        let v = lab.submit(RICH, "--gres=gpu:8", 3600, false, &["-w", "n2"]);
        wait(
            "both jobs to run",
            Box::new(|| lab.job_state(u) == "RUNNING" && lab.job_state(v) == "RUNNING"),
        );
        let a = lab.submit(POOR, "--gres=gpu:8", 600, true, &[]);
        wait(
            "the daemon to make room",
            Box::new(|| lab.job_state(a) == "RUNNING"),
        );
        let why = get(&format!("/api/v1/queue/{u}"));
        let text = why["enforcement"].as_str().unwrap_or_default().to_string();
        assert!(
            text.contains(&format!("requeue this job (unallocated) for job {a}")),
            "why {u}: {why}"
        );
        assert_eq!(lab.job_state(v), "RUNNING", "the protected job stays");
    }

    // --- 5. A job that cannot use the room: its victim is never taken ---
    livelock(&lab, &slurm);
}

/// Section 5: the livelock of issue 11 (see the module doc).
fn livelock(lab: &Lab, slurm: &Arc<LibSlurm>) {
    lab.clear();
    // A partition the planner does not see: only n1.
    lab.ok(
        "scontrol",
        &["create", "PartitionName=only1", "Nodes=n1", "State=UP"],
    );
    let state = service_state(
        lab,
        "[protection]\nenforce = true\nstart_grace_s = 8\n\
         fruitless_retry_after_s = 3600\n",
        vec![
            spec("org", None, 1.0, None),
            spec("rich", Some("org"), 0.3, Some(RICH)),
            spec("poor", Some("org"), 0.7, Some(POOR)),
        ],
    );
    let mut cycle =
        Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
    // n1: a protected job of the poor team; n2: an unallocated resumable job.
    let p = lab.submit(POOR, "--gres=gpu:8", 3600, true, &["-w", "n1"]);
    let v = lab.submit(RICH, "--gres=gpu:8", 0, true, &["-w", "n2"]);
    step_until(
        lab,
        &mut cycle,
        "both jobs to run",
        Duration::from_secs(30),
        || lab.job_state(p) == "RUNNING" && lab.job_state(v) == "RUNNING",
    );
    // The poor team's job that can only run on n1.
    let j = lab.submit(POOR, "--gres=gpu:8", 60, true, &["-p", "only1"]);
    // The planner sees the job's partition and the nodes' partitions.
    let snap = slurm.snapshot().expect("snapshot");
    let needs = snap
        .job_needs
        .iter()
        .find(|n| n.job.0 == j)
        .expect("needs of the pending job");
    assert_eq!(needs.needs.partitions, ["only1"], "{needs:?}");
    let n1 = snap.nodes.iter().find(|n| n.name == "n1").expect("n1");
    let n2 = snap.nodes.iter().find(|n| n.name == "n2").expect("n2");
    assert!(n1
        .traits
        .as_ref()
        .expect("n1 traits")
        .partitions
        .contains("only1"));
    assert!(!n2
        .traits
        .as_ref()
        .expect("n2 traits")
        .partitions
        .contains("only1"));
    // 20 s of cycles, twice a second: the job on n2 runs on, untouched.
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        cycle.step().expect("cycle against the lab");
        std::thread::sleep(Duration::from_millis(500));
    }
    let acts = actions_on(&state, v);
    assert!(
        acts.is_empty(),
        "a job outside the waiting job's partition was preempted: {acts:?}\n{}",
        lab.squeue()
    );
    assert_eq!(lab.job_field(v, "Restarts"), "0", "{}", lab.show(v));
    assert_eq!(lab.job_state(v), "RUNNING", "{}", lab.squeue());
    assert_eq!(lab.job_state(j), "PENDING", "{}", lab.squeue());
    lab.clear();
}
