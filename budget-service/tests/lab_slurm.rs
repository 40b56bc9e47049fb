//! The budget service against a real Slurm 22.05 cluster on this host
//! (`contrib/slurm-lab.sh`: munge, slurmctld, 2 slurmd x 8 fake GPUs),
//! configured with `etc/slurm-budget.conf` (priority/multifactor, every
//! weight 0: the site factor is the priority), read and written through
//! libslurm ([`LibSlurm`]). Root only; skipped with a message otherwise.
//! The cluster is always torn down (Drop runs on panic too).
//!
//! 1. Two teams with 70/30 budgets fill the cluster and queue more; after one
//!    cycle the pending order of `squeue` (sorted by priority) is the
//!    service's order and every job's Slurm priority is its site factor
//!    (also for a job with `--nice`).
//! 2. slurmctld stopped: the cycle fails, the last order is still served;
//!    restarted: the cycle succeeds again.
//! 3. The real `compass-budgetd` with `slurm = "libslurm"`: the order of its
//!    `GET /api/v1/queue` is the order and priorities `squeue` shows.
//! 4. Compressed run: 2-GPU jobs of 5 s from both teams, a cycle every
//!    second for 90 s, the ratio order: the 70% team receives 70% +- 5% of
//!    the charged GPU-time in the ledger (`COMPASS_LAB_ORDER=default`: the
//!    default order, its share printed, not held to the band).
//!
//! Ports 16900-16902: clear of the select plugin's lab tests (17100 and up)
//! and of slurm-lab.sh's default (16817-16825).

mod common;
mod prom;

use common::lab::{lossy, service_state, skip_reason, spec, Lab, LabSpec};

use compass_budget::cycle::Cycle;
use compass_budget::db::Db;
use compass_budget::slurm::libslurm::LibSlurm;
use compass_budget::slurm::SlurmSource;
use compass_budget::state::AppState;
use compass_budget::BudgetError;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PORT_BASE: u32 = 16_900;
const NODES: u32 = 2;
const GPUS: u32 = 8;
const BIG: &str = "team-big";
const SMALL: &str = "team-small";
/// The accounts of section 4's 70/30 teams.
const BIG_RUN: &str = "team-big-run";
const SMALL_RUN: &str = "team-small-run";
const TAG: &str = "AdminComment=compass:min_runtime=3600,resumable=0";

impl Lab {
    /// Submits a held job (`sbatch -H`) and tags it as allocated time
    /// (what job_submit.lua writes for `--min-runtime`).
    fn submit_held(&self, account: &str, gpus: u32, nice: i32, secs: u32) -> u32 {
        let gres = format!("--gres=gpu:{gpus}");
        let nice = format!("--nice={nice}");
        let wrap = format!("sleep {secs}");
        let out = self.ok(
            "sbatch",
            &[
                "--parsable",
                "-H",
                "-o",
                "/dev/null",
                "-A",
                account,
                &gres,
                &nice,
                "--wrap",
                &wrap,
            ],
        );
        let id: u32 = out.trim().parse().expect("sbatch job id");
        self.ok("scontrol", &["update", &format!("JobId={id}"), TAG]);
        id
    }

    fn release(&self, ids: &[u32]) {
        for chunk in ids.chunks(50) {
            let list: Vec<String> = chunk.iter().map(u32::to_string).collect();
            self.ok("scontrol", &["release", &list.join(",")]);
        }
    }

    /// Pending jobs as Slurm orders them: `(job, priority)`, highest first.
    fn pending_by_priority(&self) -> Vec<(u64, u64)> {
        self.ok("squeue", &["-h", "-t", "PD", "--sort=-p,i", "-o", "%i %Q"])
            .lines()
            .map(|l| {
                let mut it = l.split_whitespace();
                let id = it.next().and_then(|s| s.parse().ok()).expect("job id");
                let p = it.next().and_then(|s| s.parse().ok()).expect("priority");
                (id, p)
            })
            .collect()
    }

    fn count(&self, state: &str) -> usize {
        self.ok("squeue", &["-h", "-t", state, "-o", "%i"])
            .lines()
            .count()
    }

    fn wait(&self, what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ok() {
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what}; squeue:\n{}",
                lossy(&self.run("squeue", &["-o", "%i %a %T %r %Q"]).stdout)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A fresh service state (in-memory ledger) with the 70/30 tree.
fn service(lab: &Lab) -> Arc<AppState> {
    service_state(
        lab,
        "",
        vec![
            spec("org", None, 1.0, None),
            spec("big", Some("org"), 0.7, Some(BIG)),
            spec("small", Some("org"), 0.3, Some(SMALL)),
        ],
    )
}

#[test]
fn lab_cluster_order_outage_and_seventy_thirty() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED lab_cluster_order_outage_and_seventy_thirty: {why}");
        return;
    }
    let lab = Lab::start(LabSpec {
        tag: "compass-budget-lab",
        port_base: PORT_BASE,
        nodes: NODES,
        gpus: GPUS,
        ..LabSpec::default()
    });
    let slurm = Arc::new(LibSlurm::new(Some(lab.conf.clone())));

    // --- 1. Pending order after one cycle ---------------------------------
    let state = service(&lab);
    let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
    let blockers = [
        lab.submit_held(BIG, GPUS, 0, 600),
        lab.submit_held(SMALL, GPUS, 0, 600),
    ];
    lab.release(&blockers);
    lab.wait("the blockers to run", Duration::from_secs(30), || {
        lab.count("R") == 2
    });
    let mut queued = Vec::new();
    for i in 0..12 {
        let account = if i % 2 == 0 { BIG } else { SMALL };
        // One job of the big team asks to go later within its team.
        let nice = if i == 4 { 3 } else { 0 };
        queued.push(lab.submit_held(account, 4, nice, 600));
    }
    lab.release(&queued);

    let snap = slurm.snapshot().expect("snapshot");
    // Capacity comes from the nodes' Gres= through libslurm.
    assert_eq!(snap.capacity_gpus, Some(NODES * GPUS));
    assert_eq!(snap.running.len(), 2, "{snap:?}");
    assert_eq!(snap.pending.len(), 12, "{snap:?}");
    for j in &snap.running {
        assert_eq!(j.gpus, GPUS);
        assert!(j.start.is_some());
        assert_eq!(j.min_runtime_s, 3600);
    }
    for j in &snap.pending {
        assert_eq!((j.gpus, j.min_runtime_s, j.resumable), (4, 3600, false));
        assert!(j.account == BIG || j.account == SMALL);
        // The job's owner, from libslurm's job info (issue 14).
        assert_eq!(j.user, "root", "{j:?}");
    }
    let nice_job = snap
        .pending
        .iter()
        .find(|j| j.job.0 == u64::from(queued[4]))
        .expect("nice job pending");
    assert_eq!(nice_job.priority, -3);

    let rep = cycle.step().expect("cycle against the lab");
    assert_eq!((rep.pending, rep.pushed), (12, 12), "{rep:?}");
    assert_eq!(rep.ingested, 2, "{rep:?}");
    let order = state.queue().order.clone();
    let factors = state.queue().factors.clone();
    let ours: Vec<(u64, u64)> = order
        .iter()
        .map(|p| (p.job.job.0, u64::from(factors[&p.job.job])))
        .collect();
    let theirs = lab.pending_by_priority();
    assert_eq!(
        theirs, ours,
        "squeue (job, priority) by priority vs the service's (job, site factor)"
    );
    assert!(order.iter().any(|p| p.job.account == BIG));
    assert!(order.iter().any(|p| p.job.account == SMALL));

    // --- 2. slurmctld down: reads keep the last order; back up: recovers ---
    let pid: i32 = std::fs::read_to_string(lab.dir.join("run/slurmctld.pid"))
        .expect("slurmctld pid")
        .trim()
        .parse()
        .expect("pid");
    // SAFETY: plain kill(2) of the slurmctld this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    lab.wait("slurmctld to stop", Duration::from_secs(20), || {
        // SAFETY: signal 0 only probes the process.
        let probe = unsafe { libc::kill(pid, 0) };
        probe != 0
    });
    let err = cycle.step().expect_err("cycle with slurmctld down");
    assert!(matches!(err, BudgetError::Slurm(_)), "{err}");
    {
        let st = state.status();
        assert!(!st.slurm_connected);
        assert!(st
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("slurm_load_jobs"));
    }
    assert_eq!(state.queue().order.len(), 12, "last order still served");
    // /metrics says so: Slurm down, one failed snapshot call.
    let m = prom::parse(&compass_budget::metrics::encode(&state).expect("metrics"));
    assert_eq!(m.value("compass_slurm_up", &[]), Some(0.0));
    assert_eq!(
        m.value(
            "compass_slurm_rpc_errors_total",
            &[("operation", "snapshot")]
        ),
        Some(1.0)
    );
    assert_eq!(
        m.value("compass_cycles_total", &[("outcome", "failed")]),
        Some(1.0)
    );
    let out = lab.script("restart-ctld");
    assert!(out.status.success(), "{}", lossy(&out.stderr));
    let start = Instant::now();
    loop {
        match cycle.step() {
            Ok(_) => break,
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(60),
                "no recovery after restart: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(state.status().slurm_connected);
    assert_eq!(lab.pending_by_priority().len(), 12);

    // --- 3. The daemon, wired with slurm = "libslurm" ----------------------
    {
        let dir = common::TempDir::new("lab-daemon");
        let db_path = dir.path().join("budget.db");
        {
            let mut db = Db::open(&db_path).expect("daemon db");
            let now = state.now();
            db.edit_tree("root", "import", "70/30", now, |_| {
                Ok(vec![
                    spec("org", None, 1.0, None),
                    spec("big", Some("org"), 0.7, Some(BIG)),
                    spec("small", Some("org"), 0.3, Some(SMALL)),
                ])
            })
            .expect("daemon tree");
        }
        let cfg = dir.path().join("budgetd.toml");
        std::fs::write(
            &cfg,
            format!(
                "db = \"{}\"\ncapacity_gpus = {}\nwindow_s = 3600\ncycle_s = 1\n\
                 slurm = \"libslurm\"\nslurm_conf = \"{}\"\n",
                db_path.display(),
                NODES * GPUS,
                lab.conf.display()
            ),
        )
        .expect("daemon config");
        let daemon = common::Daemon::start(&cfg);
        let daemon_order = || -> Vec<(u64, u64)> {
            let body: serde_json::Value = ureq::get(&format!("{}/api/v1/queue", daemon.url))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            body["jobs"]
                .as_array()
                .map(|jobs| {
                    jobs.iter()
                        .map(|j| {
                            (
                                j["job"].as_u64().unwrap_or(0),
                                j["site_factor"].as_u64().unwrap_or(0),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        // The daemon's cycle runs every second: compare once it has pushed.
        let start = Instant::now();
        let (mut ours, mut theirs) = (daemon_order(), lab.pending_by_priority());
        while (ours.len() != 12 || ours != theirs) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(500));
            ours = daemon_order();
            theirs = lab.pending_by_priority();
        }
        assert_eq!(ours.len(), 12, "daemon queue: {ours:?}");
        assert_eq!(
            theirs, ours,
            "squeue (job, priority) vs compass-budgetd's /api/v1/queue (job, site factor)"
        );
        // Its /metrics, from the real cluster: 12 pending, both nodes full
        // (the blockers), each team's GPU-seconds counted.
        let mut resp = ureq::get(&format!("{}/metrics", daemon.url))
            .call()
            .expect("scrape");
        let text = resp.body_mut().read_to_string().expect("body");
        let m = prom::parse(&text);
        assert_eq!(
            m.value("compass_queue_pending_jobs", &[]),
            Some(12.0),
            "{text}"
        );
        assert_eq!(m.value("compass_slurm_up", &[]), Some(1.0), "{text}");
        let pool = format!("{GPUS}xgpu");
        assert_eq!(
            m.value("compass_nodes", &[("pool", &pool), ("occupancy", "full")]),
            Some(f64::from(NODES)),
            "{text}"
        );
        assert_eq!(
            m.value("compass_pool_gpus_allocated", &[("pool", &pool)]),
            Some(f64::from(NODES * GPUS)),
            "{text}"
        );
        for team in ["big", "small"] {
            let used = m
                .value(
                    "compass_team_gpu_seconds_total",
                    &[("team", team), ("kind", "allocated")],
                )
                .unwrap_or(0.0);
            assert!(used >= f64::from(GPUS), "{team}: {used}\n{text}");
        }
    }

    // --- 4. Compressed run: 70% +- 5% of the charged GPU-time -------------
    lab.ok("scancel", &["--full", "-u", "root"]);
    lab.wait("the queue to drain", Duration::from_secs(60), || {
        lab.ok("squeue", &["-h", "-o", "%i"]).trim().is_empty()
    });
    // Two accounts of their own: the jobs of sections 1-3 (cancelled above,
    // still in slurmctld's memory) are ingested by the first cycle; charged
    // to the 70/30 teams they made both teams' lookback equal (112 GPU-s
    // each in one run), which moves the ratio order's split towards 0.75
    // (it measured 0.754 and 0.770 so).
    // The published design's order (teams by lookback ratio alone): over
    // 90 s it must converge to the shares. COMPASS_LAB_ORDER=default
    // runs the default order instead (under-allocation-first, issue 15),
    // prints its share and, each cycle, whether each team is under its
    // allocation and its ratio, and does not hold it to the band: it
    // delivers 0.60-0.72 to the 70% team here. The jobs run in step (8
    // start together and end together 5 s later), so each batch goes to
    // the one team under its allocation, which then runs all 8 and is
    // over: the lookback never decides (docs/results.md, issue 15). The
    // twin test holds the default to the simulator's order.
    let default_order = std::env::var("COMPASS_LAB_ORDER").as_deref() == Ok("default");
    let order = if default_order {
        ""
    } else {
        "[order]\nteam_order = \"ratio\"\nfree_order = \"same-as-allocated\"\n"
    };
    let state = service_state(
        &lab,
        order,
        vec![
            spec("org", None, 1.0, None),
            spec("big", Some("org"), 0.7, Some(BIG_RUN)),
            spec("small", Some("org"), 0.3, Some(SMALL_RUN)),
        ],
    );
    let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
    let mut jobs = Vec::new();
    for i in 0..180 {
        // Both teams keep a backlog for the whole run (8 slots x 18 x 5 s).
        let account = if i % 3 == 0 { SMALL_RUN } else { BIG_RUN };
        jobs.push(lab.submit_held(account, 2, 0, 5));
    }
    cycle.step().expect("first cycle");
    let t0 = state.now();
    lab.release(&jobs);
    // 90 s: each 5 s batch of 8 goes to one team or the other, so the
    // share moves in steps; over 60 s it once measured 0.648.
    let run = Duration::from_secs(90);
    let begin = Instant::now();
    let mut cycles = 0;
    while begin.elapsed() < run {
        cycle.step().expect("cycle during the run");
        cycles += 1;
        if default_order {
            // Each team in the pushed order: under its allocation, ratio.
            let q = state.queue();
            let mut seen: Vec<String> = Vec::new();
            for p in &q.order {
                if !seen.contains(&p.job.account) {
                    seen.push(p.job.account.clone());
                    eprint!(
                        "{} under {:?} ratio {:.4} | ",
                        p.job.account,
                        p.under_allocation,
                        p.path.last().map_or(0.0, |l| l.ratio)
                    );
                }
            }
            eprintln!("t {}", state.now() - t0);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    cycle.step().expect("last cycle");
    let t1 = state.now();
    let backlog: Vec<String> = lab
        .ok("squeue", &["-h", "-t", "PD", "-o", "%a"])
        .lines()
        .map(str::to_string)
        .collect();
    assert!(
        backlog.iter().any(|a| a == BIG_RUN) && backlog.iter().any(|a| a == SMALL_RUN),
        "both teams must still wait at the end, else the split says nothing: {backlog:?}"
    );
    let usage = state.db().usage_between(t0, t1).expect("usage");
    // Charged to the run's accounts before the run: none (sections 1-3's
    // jobs, which the first cycle ingests, ran under other accounts).
    let before = state.db().usage_between(t0 - 3600, t0).expect("usage");
    let charged_before = |a: &str| before.get(a).map_or(0.0, |u| u.charged_gpu_s);
    let big = usage.get(BIG_RUN).map_or(0.0, |u| u.charged_gpu_s);
    let small = usage.get(SMALL_RUN).map_or(0.0, |u| u.charged_gpu_s);
    let total = big + small;
    let capacity = f64::from(NODES * GPUS) * (t1 - t0) as f64;
    eprintln!(
        "compressed run ({} order): {}s, {cycles} cycles, big {big} GPU-s, small {small} GPU-s, share {:.3}, utilisation {:.2}; charged before the run: big {} GPU-s, small {} GPU-s",
        if default_order { "default" } else { "ratio" },
        t1 - t0,
        big / total,
        total / capacity,
        charged_before(BIG_RUN),
        charged_before(SMALL_RUN)
    );
    assert!(
        total > 0.5 * capacity,
        "cluster mostly idle: {total} of {capacity} GPU-s"
    );
    let share = big / total;
    if default_order {
        return;
    }
    assert!(
        (0.65..=0.75).contains(&share),
        "team-big got {share:.3} of the charged GPU-time (big {big}, small {small})"
    );
}
