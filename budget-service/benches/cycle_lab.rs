//! One compass-budgetd cycle at 10,000 pending jobs against a real slurmctld
//! (`contrib/slurm-lab.sh`, 2 slurmd x 8 fake GPUs, `etc/slurm-budget.conf`
//! plus `MaxJobCount=50000`; root only): how many `slurm_update_job` RPCs a
//! cycle sends with the dense ranks of before issue 11
//! (`fairshare::site_factors`, pushed through the same `LibSlurm` sink) and
//! with the sparse keys the cycle pushes now (`Cycle::step`), and what
//! slurmctld's `sdiag` counted for them (`sdiag -r` before each cycle).
//!
//! Pending jobs are made cheaply: submitted through libslurm
//! (`slurm_submit_batch_job`) with a begin time a day ahead, so they stay
//! pending (reason BeginTime) and get a priority. Ten teams of equal share
//! with different past usage; between cycles 10 jobs arrive (5 for the most
//! under-served team, so they go to the head of the queue, 5 for other
//! teams) and 5 pending jobs are cancelled. After the sparse cycles the
//! bench checks that `squeue` (by priority) shows the service's order, then
//! runs one cycle of a new `Cycle` (a restarted service), which reads the
//! factors Slurm holds.
//!
//! `cargo bench -p compass-budget --bench cycle_lab [-- JOBS CYCLES]`
//! (defaults 10000 and 5). Times are wall-clock on a shared machine: noisy.

#[path = "../tests/common/lab.rs"]
#[allow(dead_code)]
mod lab;

use compass_budget::cycle::Cycle;
use compass_budget::slurm::libslurm::LibSlurm;
use compass_budget::slurm::{SlurmSink, SlurmSource};
use compass_budget::state::AppState;
use compass_core::fairshare::{self, Interval, Kind};
use compass_core::model::JobId;
use lab::{service_state, skip_reason, spec, Lab, LabSpec};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;
use std::time::Instant;

const TEAMS: usize = 10;
const TAG: &str = "compass:min_runtime=3600,resumable=0";

/// Submits one pending job (begin time a day ahead) through libslurm.
fn submit(account: &str, begin: i64) -> u32 {
    let script = CString::new("#!/bin/sh\nsleep 60\n").unwrap();
    let name = CString::new("bench").unwrap();
    let acct = CString::new(account).unwrap();
    let comment = CString::new(TAG).unwrap();
    let gres = CString::new("gres:gpu:1").unwrap();
    let dir = CString::new("/tmp").unwrap();
    let out = CString::new("/dev/null").unwrap();
    let env0 = CString::new("PATH=/usr/bin:/bin").unwrap();
    let mut env = [env0.as_ptr() as *mut std::os::raw::c_char];
    let mut desc = slurm_sys::job_desc_msg_t::default();
    let mut resp: *mut slurm_sys::submit_response_msg_t = std::ptr::null_mut();
    // SAFETY: a stack descriptor initialised by libslurm; every pointer
    // outlives the call, which only reads them.
    let rc = unsafe {
        slurm_sys::slurm_init_job_desc_msg(&mut desc);
        desc.script = script.as_ptr() as *mut _;
        desc.name = name.as_ptr() as *mut _;
        desc.account = acct.as_ptr() as *mut _;
        desc.admin_comment = comment.as_ptr() as *mut _;
        desc.tres_per_node = gres.as_ptr() as *mut _;
        desc.work_dir = dir.as_ptr() as *mut _;
        desc.std_out = out.as_ptr() as *mut _;
        desc.environment = env.as_mut_ptr();
        desc.env_size = 1;
        desc.user_id = libc::getuid();
        desc.group_id = libc::getgid();
        desc.min_nodes = 1;
        desc.num_tasks = 1;
        desc.time_limit = 10;
        desc.begin_time = begin;
        slurm_sys::slurm_submit_batch_job(&mut desc, &mut resp)
    };
    assert!(rc == 0 && !resp.is_null(), "slurm_submit_batch_job failed");
    // SAFETY: a response allocated by libslurm, freed once.
    let id = unsafe { (*resp).job_id };
    unsafe { slurm_sys::slurm_free_submit_response_response_msg(resp) };
    id
}

fn cancel(job: u32) {
    // SAFETY: plain RPC.
    unsafe { slurm_sys::slurm_kill_job(job, 9, 0) };
}

/// `(count, total_time_us)` of one RPC type in `sdiag`'s output.
fn sdiag_rpc(out: &str, rpc: &str) -> (u64, u64) {
    for l in out.lines() {
        let l = l.trim();
        if !l.starts_with(&format!("{rpc} ")) {
            continue;
        }
        let field = |k: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(k).and_then(|v| v.parse().ok()))
                .unwrap_or(0)
        };
        return (field("count:"), field("total_time:"));
    }
    (0, 0)
}

/// The dense ranks of before issue 11, pushed like the old cycle did.
struct Dense {
    pushed: HashMap<JobId, u32>,
}

impl Dense {
    fn step(&mut self, state: &AppState, slurm: &LibSlurm) -> usize {
        let snap = slurm.snapshot().expect("snapshot");
        let now = state.now();
        let w = state.config.window_s;
        let (tree, usage) = {
            let db = state.db();
            (
                db.load_tree().unwrap().unwrap(),
                db.usage_between(now - w, now).unwrap(),
            )
        };
        let stats = fairshare::node_stats(&tree, &usage, state.capacity(), w);
        let pending: Vec<_> = snap.pending.iter().map(|j| j.as_pending()).collect();
        let order = fairshare::order_queue(&tree, &stats, &pending);
        let factors = fairshare::site_factors(&order);
        let changed = fairshare::changed_factors(&self.pushed, &factors);
        if !changed.is_empty() {
            slurm.set_site_factors(&changed).expect("push");
        }
        self.pushed = factors.into_iter().collect();
        changed.len()
    }
}

struct Row {
    variant: &'static str,
    cycle: usize,
    pending: usize,
    rpcs: usize,
    sdiag_update: (u64, u64),
    secs: f64,
}

fn main() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED cycle_lab: {why}");
        return;
    }
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let jobs = args.first().copied().unwrap_or(10_000);
    let cycles = args.get(1).copied().unwrap_or(5);
    let extra =
        std::env::temp_dir().join(format!("compass-cycle-bench-{}.conf", std::process::id()));
    let budget = std::fs::read_to_string(lab::repo_root().join("etc/slurm-budget.conf")).unwrap();
    std::fs::write(&extra, format!("{budget}\nMaxJobCount=50000\n")).unwrap();
    let lab = Lab::start(LabSpec {
        tag: "compass-cycle-bench",
        port_base: 16_960,
        nodes: 2,
        gpus: 8,
        env: vec![("LAB_EXTRA_CONF", extra.clone())],
        ..LabSpec::default()
    });
    let slurm = Arc::new(LibSlurm::new(Some(lab.conf.clone())));
    slurm.init().expect("libslurm");
    let teams: Vec<String> = (0..TEAMS).map(|t| format!("team-{t}")).collect();
    let mut tree = vec![spec("org", None, 1.0, None)];
    for t in &teams {
        tree.push(spec(t, Some("org"), 1.0 / TEAMS as f64, Some(t)));
    }
    let begin = lab_now() + 86_400;
    let t0 = Instant::now();
    let mut pending: Vec<u32> = (0..jobs)
        .map(|i| submit(&teams[i % TEAMS], begin))
        .collect();
    eprintln!(
        "submitted {jobs} pending jobs in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let mut rng = 12345u64;
    let mut next = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) as usize
    };
    let mut rows = Vec::new();
    // Sparse first: its first cycle starts from Slurm's default factors
    // (the dense run would leave its keys behind for the sparse cycle to
    // reuse).
    for variant in ["sparse keys (now)", "dense ranks (before)"] {
        let state = service_state(&lab, "", tree.clone());
        // Past usage: team-0 used least (head of the queue), team-9 most.
        let now = state.now();
        let ivs: Vec<Interval> = (0..TEAMS)
            .map(|t| Interval {
                job: JobId(9_000_000 + t as u64),
                account: teams[t].clone(),
                gpus: 1 + t as u32,
                start: now - 1800,
                end: Some(now - 60),
                kind: Kind::Allocated,
                weight: 1.0,
            })
            .collect();
        state.db().ingest(&ivs, now).unwrap();
        let mut dense = Dense {
            pushed: HashMap::new(),
        };
        let mut cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
        for c in 0..=cycles {
            if c > 0 {
                for k in 0..10 {
                    let team = if k < 5 { 0 } else { 1 + next() % (TEAMS - 1) };
                    pending.push(submit(&teams[team], begin));
                }
                for _ in 0..5 {
                    let i = next() % pending.len();
                    cancel(pending.swap_remove(i));
                }
            }
            lab.ok("sdiag", &["-r"]);
            let t = Instant::now();
            let rpcs = if variant.starts_with("dense") {
                dense.step(&state, &slurm)
            } else {
                cycle.step().expect("cycle").pushed
            };
            let secs = t.elapsed().as_secs_f64();
            let sd = lab.ok("sdiag", &[]);
            let row = Row {
                variant,
                cycle: c,
                pending: pending.len(),
                rpcs,
                sdiag_update: sdiag_rpc(&sd, "REQUEST_UPDATE_JOB"),
                secs,
            };
            eprintln!(
                "{:<22} cycle {} pending {:>6} update RPCs {:>6} sdiag REQUEST_UPDATE_JOB count {:>6} total {:>9} us  cycle {:.2} s",
                row.variant, row.cycle, row.pending, row.rpcs, row.sdiag_update.0, row.sdiag_update.1, row.secs
            );
            rows.push(row);
        }
        if variant.starts_with("sparse") {
            check_squeue(&lab, &state);
            // The service restarts: a new cycle keys the order on the
            // factors Slurm holds, so it has nothing to push.
            let mut restarted = Cycle::new(state.clone(), slurm.clone(), slurm.clone());
            lab.ok("sdiag", &["-r"]);
            let t = Instant::now();
            let rpcs = restarted.step().expect("cycle").pushed;
            let secs = t.elapsed().as_secs_f64();
            let sd = lab.ok("sdiag", &[]);
            rows.push(Row {
                variant: "sparse keys, restarted",
                cycle: 1,
                pending: pending.len(),
                rpcs,
                sdiag_update: sdiag_rpc(&sd, "REQUEST_UPDATE_JOB"),
                secs,
            });
        }
    }
    println!("\n| variant | cycle | pending jobs | slurm_update_job RPCs | sdiag REQUEST_UPDATE_JOB count | sdiag total time (ms) | cycle wall time (s) |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.2} |",
            r.variant,
            if r.cycle == 0 {
                "first (all jobs)".to_string()
            } else if r.variant.contains("restarted") {
                "first after a restart".to_string()
            } else {
                r.cycle.to_string()
            },
            r.pending,
            r.rpcs,
            r.sdiag_update.0,
            r.sdiag_update.1 as f64 / 1000.0,
            r.secs
        );
    }
    for variant in ["dense ranks (before)", "sparse keys (now)"] {
        let steady: Vec<&Row> = rows
            .iter()
            .filter(|r| r.variant == variant && r.cycle > 0)
            .collect();
        let n = steady.len().max(1) as f64;
        println!(
            "{variant}: mean over {} churn cycles: {:.0} RPCs per cycle ({:.1} per second at 10 s cycles), sdiag {:.0} ms of slurmctld RPC time per cycle",
            steady.len(),
            steady.iter().map(|r| r.rpcs as f64).sum::<f64>() / n,
            steady.iter().map(|r| r.rpcs as f64).sum::<f64>() / n / 10.0,
            steady.iter().map(|r| r.sdiag_update.1 as f64).sum::<f64>() / n / 1000.0
        );
    }
    let _ = std::fs::remove_file(&extra);
}

fn lab_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `squeue`'s pending jobs by priority must be the service's order, with
/// each job's priority its pushed factor.
fn check_squeue(lab: &Lab, state: &AppState) {
    let out = lab.ok("squeue", &["-h", "-t", "PD", "--sort=-p,i", "-o", "%i %Q"]);
    let theirs: Vec<(u64, u64)> = out
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    let q = state.queue();
    let ours: Vec<(u64, u64)> = q
        .order
        .iter()
        .map(|p| (p.job.job.0, u64::from(q.factors[&p.job.job])))
        .collect();
    if theirs == ours {
        println!(
            "squeue order check: the {} pending jobs of squeue (by priority) are the service's order, priorities equal to the pushed keys",
            ours.len()
        );
    } else {
        let first = theirs.iter().zip(&ours).position(|(a, b)| a != b);
        eprintln!(
            "squeue order MISMATCH: {} vs {} jobs, first difference at {first:?}: {:?} vs {:?}",
            theirs.len(),
            ours.len(),
            first.map(|i| theirs[i]),
            first.map(|i| ours[i]),
        );
        std::process::exit(1);
    }
}
