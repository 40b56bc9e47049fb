//! The plugin's own thread (slurmctld only): once a second it updates
//! movability, carries out migration orders (requeue + begin time now,
//! through the public API, i.e. RPCs to slurmctld, never under its locks)
//! and publishes the live state file atomically.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use compass_slurm::controller::MigrationOrder;
use slurm_sys as sys;

use crate::{log, now_unix, PLUGIN};

static STOP: AtomicBool = AtomicBool::new(false);
static HANDLE: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// Starts the thread once.
pub fn start() {
    let mut h = HANDLE.lock().unwrap_or_else(|p| p.into_inner());
    if h.is_some() {
        return;
    }
    STOP.store(false, Ordering::SeqCst);
    match std::thread::Builder::new()
        .name("compass".into())
        .spawn(run)
    {
        Ok(j) => *h = Some(j),
        Err(e) => log::error(&format!("cannot start the compass thread: {e}")),
    }
}

/// Stops and joins the thread (plugin fini).
pub fn stop() {
    STOP.store(true, Ordering::SeqCst);
    if let Some(j) = HANDLE.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = j.join();
    }
}

fn run() {
    let Some(plugin) = PLUGIN.get() else { return };
    let mut last_written = String::new();
    let mut round: u64 = 0;
    while !STOP.load(Ordering::SeqCst) {
        let now = now_unix();
        // Node states through the public API (an RPC to slurmctld, outside
        // its locks), every 5 s: down/drained nodes are no Compact targets.
        if round.is_multiple_of(5) {
            if let Some(states) = node_usability() {
                if let Some(ctl) = plugin
                    .ctl
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_mut()
                {
                    for name in ctl.set_usable_nodes(&states) {
                        let ok = states.iter().any(|(n, ok)| *n == name && *ok);
                        log::info(&format!(
                            "node {name}: {} for placement and migrations",
                            if ok {
                                "usable again"
                            } else {
                                "not usable (down/drained)"
                            }
                        ));
                    }
                }
            }
        }
        if round.is_multiple_of(10) {
            if let Some(ctl) = plugin
                .ctl
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                if let Some(msg) = ctl.self_check() {
                    log::error(&msg);
                }
            }
        }
        round += 1;
        let (orders, snapshot) = {
            let mut g = plugin.ctl.lock().unwrap_or_else(|p| p.into_inner());
            match g.as_mut() {
                Some(ctl) => (ctl.tick(now), Some(ctl.snapshot(now, true))),
                None => (vec![], None),
            }
        };
        for order in orders {
            migrate(&order);
        }
        if let Some(mut s) = snapshot {
            s.job_test = crate::stats::job_test();
            let mut key = s.clone();
            key.updated_unix = 0;
            key.job_test = Default::default();
            let key = serde_json_key(&key);
            // Rewrite on change, and every 10 s so readers see it is alive.
            if key != last_written || now.is_multiple_of(10) {
                if let Err(e) = s.write_atomic(&plugin.state_file) {
                    log::error(&format!(
                        "cannot write {}: {e}",
                        plugin.state_file.display()
                    ));
                }
                last_written = key;
            }
        }
        for _ in 0..10 {
            if STOP.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn serde_json_key(s: &compass_slurm::state::PublishedState) -> String {
    format!("{s:?}")
}

/// Requeue + pin + begin time now (a plain requeue waits cred_expire + 1 s).
fn migrate(order: &MigrationOrder) {
    let Some(plugin) = PLUGIN.get() else { return };
    // tick() marked the order in flight (pinned) before handing it out.
    let id = order.job as u32;
    // A job that is ending (cancelled, completing) must not be requeued: that
    // would start it again. Small race left between this check and the RPC.
    let rc = if job_running(id) {
        // SAFETY: public API call, no locks of ours held.
        unsafe { sys::slurm_requeue(id, 0) }
    } else {
        -1
    };
    if rc != 0 {
        log::error(&format!(
            "migration of job {id}: requeue failed (rc {rc}); left in place"
        ));
        if let Some(ctl) = plugin
            .ctl
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            ctl.requeue_failed(order);
        }
        return;
    }
    // slurmd revoked the job's credential at the requeue; a new one created
    // in the same second is refused ("Job credential revoked") and the job
    // is killed, so the restart is never earlier than 2 s after the requeue.
    let begin = now_unix() + 2;
    // The job is COMPLETING, then PENDING with begin time = requeue +
    // cred_expire + 1; an update made while it completes is overwritten, so
    // wait until it is PENDING, then set the begin time and check it stuck.
    for _ in 0..100 {
        match job_pending_since(id) {
            Some(eligible) if eligible <= begin as i64 => {
                log::info(&format!(
                    "migration of job {id}: requeued, pinned to its planned nodes, eligible now"
                ));
                return;
            }
            Some(_) => {
                // SAFETY: zeroed then initialised by Slurm's own initialiser.
                unsafe {
                    let mut desc: sys::job_desc_msg_t = std::mem::zeroed();
                    sys::slurm_init_job_desc_msg(&mut desc);
                    desc.job_id = id;
                    desc.begin_time = begin as sys::time_t;
                    sys::slurm_update_job(&mut desc);
                }
            }
            None => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    log::error(&format!(
        "migration of job {id}: could not reset its begin time (it starts after cred_expire)"
    ));
}

const JOB_PENDING: u32 = 0;
const JOB_RUNNING: u32 = 1;
const JOB_STATE_BASE: u32 = 0xff;
const JOB_COMPLETING: u32 = 1 << 15;

/// The job's `job_state` and `eligible_time` from slurmctld.
fn load_job(id: u32) -> Option<(u32, i64)> {
    let mut msg: *mut sys::job_info_msg_t = std::ptr::null_mut();
    // SAFETY: public API; the message is freed below.
    unsafe {
        if sys::slurm_load_job(&mut msg, id, 0) != 0 || msg.is_null() {
            return None;
        }
        let m = &*msg;
        let out = if m.record_count >= 1 && !m.job_array.is_null() {
            let j = &*m.job_array;
            Some((j.job_state, j.eligible_time))
        } else {
            None
        };
        sys::slurm_free_job_info_msg(msg);
        out
    }
}

/// `Some(eligible_time)` once the job is plainly PENDING (not completing).
fn job_pending_since(id: u32) -> Option<i64> {
    let (state, eligible) = load_job(id)?;
    (state & JOB_STATE_BASE == JOB_PENDING && state & JOB_COMPLETING == 0).then_some(eligible)
}

/// Running and not completing (not being cancelled).
fn job_running(id: u32) -> bool {
    load_job(id).is_some_and(|(state, _)| {
        state & JOB_STATE_BASE == JOB_RUNNING && state & JOB_COMPLETING == 0
    })
}

/// `(node name, usable)` for every node: not down, drained, failing, not
/// responding, powered down or in maintenance.
fn node_usability() -> Option<Vec<(String, bool)>> {
    const BASE: u32 = 0xf;
    const DOWN: u32 = 1;
    const FUTURE: u32 = 6;
    const BAD: u32 = (1 << 9) | (1 << 11) | (1 << 12) | (1 << 13) | (1 << 15);
    let mut msg: *mut sys::node_info_msg_t = std::ptr::null_mut();
    // SAFETY: public API; the message is freed below.
    unsafe {
        if sys::slurm_load_node(0, &mut msg, sys::SHOW_ALL as u16) != 0 || msg.is_null() {
            return None;
        }
        let m = &*msg;
        let mut out = Vec::with_capacity(m.record_count as usize);
        for i in 0..m.record_count as usize {
            let n = &*m.node_array.add(i);
            if n.name.is_null() {
                continue;
            }
            let name = std::ffi::CStr::from_ptr(n.name)
                .to_string_lossy()
                .into_owned();
            let base = n.node_state & BASE;
            out.push((
                name,
                base != DOWN && base != FUTURE && n.node_state & BAD == 0,
            ));
        }
        sys::slurm_free_node_info_msg(msg);
        Some(out)
    }
}
