//! The plugin's own thread (slurmctld only): once a second it updates
//! movability, carries out migration orders (requeue + begin time now,
//! through the public API, i.e. RPCs to slurmctld, never under its locks)
//! and publishes the live state file atomically.
//!
//! The thread never dies of a panic: each round and each migration order
//! runs under `catch_unwind`. A failed round is logged and the next one
//! runs; after [`MAX_FAILED_ROUNDS`] failed rounds in a row the thread gives
//! up for good and the plugin falls back to plain cons_tres
//! ([`fall_back`]: no narrowing, pins and in-flight orders cleared, one
//! line in slurmctld's log). Every wait looks at the stop flag at least
//! every 50 ms, so `fini` never waits for a migration.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use compass_slurm::controller::{MigrationOrder, RECHECKS_PER_TURN};
use compass_slurm::persist::SavedRaised;
use compass_slurm::wait::{poll_until, sleep, Waited};
use slurm_sys as sys;

use crate::{log, now_unix, Plugin, PLUGIN};

static STOP: AtomicBool = AtomicBool::new(false);
/// Set once the thread gave up: the plugin is plain cons_tres from then on.
static DEAD: AtomicBool = AtomicBool::new(false);
static HANDLE: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// Failed (panicking) rounds in a row after which the thread gives up.
pub const MAX_FAILED_ROUNDS: u32 = 3;

/// Whether the thread gave up (then nothing is narrowed or migrated).
pub fn dead() -> bool {
    DEAD.load(Ordering::SeqCst)
}

/// Starts the thread once.
pub fn start() {
    let mut h = HANDLE.lock().unwrap_or_else(|p| p.into_inner());
    if h.is_some() || dead() {
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

/// Stops and joins the thread (plugin fini): it notices within 50 ms,
/// whatever it is waiting for.
pub fn stop() {
    STOP.store(true, Ordering::SeqCst);
    if let Some(j) = HANDLE.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = j.join();
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Test-only hook (debug builds): `COMPASS_TEST_WORKER_PANIC=always` in
/// slurmctld's environment makes every round panic, `once` the first one.
#[cfg(debug_assertions)]
fn injected_panic(round: u64) {
    match std::env::var("COMPASS_TEST_WORKER_PANIC").as_deref() {
        Ok("always") => panic!("injected panic (COMPASS_TEST_WORKER_PANIC=always)"),
        Ok("once") if round == 0 => panic!("injected panic (COMPASS_TEST_WORKER_PANIC=once)"),
        _ => {}
    }
}

#[cfg(not(debug_assertions))]
fn injected_panic(_round: u64) {}

/// What the thread carries from round to round.
#[derive(Default)]
struct Rounds {
    round: u64,
    last_written: String,
    /// Last state written to StateSaveLocation.
    last_saved: Option<compass_slurm::persist::Saved>,
    /// Migrated jobs whose priority was raised to the top until they
    /// restart ([`raise_priority`]), with when and the nice they had.
    raised: std::collections::BTreeMap<u32, Raised>,
    /// The running jobs' records and the engine's layout as last
    /// published: each round's snapshot brings only what changed, taken in
    /// outside the controller's lock.
    published: compass_slurm::controller::Published,
}

/// A migrated job at the top of the queue until it restarts.
#[derive(Clone, Copy, Debug)]
struct Raised {
    since: u64,
    nice: u32,
    /// Its begin time: once past, the job is updated once more
    /// ([`poke_past_begin`]), which queues a scheduling pass.
    poke_after: Option<u64>,
}

/// The raised jobs the state file held at slurmctld's start
/// (`select_p_state_restore`), taken in by the thread's first round.
pub(crate) static RAISED_AT_START: Mutex<Vec<SavedRaised>> = Mutex::new(Vec::new());

/// How long a raised job slurmctld does not answer for (an RPC failure,
/// or a job purged meanwhile) is asked about again, each round, before it
/// is forgotten.
const RAISED_LOOKUP_S: u64 = 3600;

/// Priority of a migrated job until it restarts: above any computed
/// priority, below Slurm's `NO_VAL`/`INFINITE`.
const MIGRATION_PRIORITY: u32 = 0xffff_ff00;
/// `INFINITE` in an update: "compute the priority again" (job_mgr.c).
const PRIORITY_RECOMPUTE: u32 = u32::MAX;
/// Slurm's `NICE_OFFSET`: a job's nice as stored, for `--nice=0`.
const NICE_OFFSET: u32 = 0x8000_0000;

fn run() {
    let Some(plugin) = PLUGIN.get() else { return };
    let mut rounds = Rounds::default();
    let mut failed = 0u32;
    while !STOP.load(Ordering::SeqCst) {
        match catch_unwind(AssertUnwindSafe(|| one_round(plugin, &mut rounds))) {
            Ok(()) => failed = 0,
            Err(p) => {
                failed += 1;
                let why = panic_text(&*p);
                if failed >= MAX_FAILED_ROUNDS {
                    fall_back(
                        plugin,
                        &mut rounds.raised,
                        &format!("the compass thread failed {failed} rounds in a row (last: panic: {why})"),
                    );
                    return;
                }
                log::error(&format!(
                    "compass thread: round failed (panic: {why}); retrying"
                ));
            }
        }
        rounds.round += 1;
        if sleep(&STOP, Duration::from_secs(1)) {
            return;
        }
    }
}

/// The thread gives up for good: the engine is dropped (pins and in-flight
/// orders with it), `with_ctl` answers `None` from now on, so every entry
/// point forwards to cons_tres unchanged; the state file says so.
fn fall_back(plugin: &Plugin, raised: &mut std::collections::BTreeMap<u32, Raised>, why: &str) {
    DEAD.store(true, Ordering::SeqCst);
    // Nobody gives the raised jobs their priority back after this: now,
    // whether they restarted or not (their pins are dropped with the
    // engine).
    for (id, r) in std::mem::take(raised) {
        let pending_or_running = matches!(
            settle(lookup_job(id), r.since, now_unix()),
            Settle::Keep | Settle::GiveBack
        );
        if pending_or_running
            && update_job(id, |d| d.priority = PRIORITY_RECOMPUTE) == 0
            && r.nice != NICE_OFFSET
        {
            update_job(id, |d| d.nice = r.nice);
        }
    }
    let last = plugin
        .ctl
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .map(|ctl| ctl.snapshot(now_unix(), false));
    log::error(&format!(
        "{why}; falling back to plain cons_tres until slurmctld restarts (no narrowing, no migrations, pins cleared)"
    ));
    if let Some(mut s) = last {
        s.engine_active = false;
        s.engine_error = Some(why.to_string());
        s.pending_migrations.clear();
        let _ = s.write_atomic(&plugin.state_file);
    }
}

fn one_round(plugin: &Plugin, rounds: &mut Rounds) {
    let now = now_unix();
    injected_panic(rounds.round);
    let at_start = std::mem::take(&mut *RAISED_AT_START.lock().unwrap_or_else(|p| p.into_inner()));
    for r in at_start {
        rounds.raised.entry(r.job as u32).or_insert(Raised {
            since: r.since,
            nice: r.nice,
            poke_after: None,
        });
    }
    let round = rounds.round;
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
    // The verdicts due are re-checked in turns, the lock taken for each
    // (issue #11: after a restart every adopted job's verdict is due at
    // once): slurmctld's callbacks wait for one turn at most. The tick
    // re-checks any left.
    loop {
        let done = plugin
            .ctl
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .map_or(0, |ctl| ctl.recheck_due(now, RECHECKS_PER_TURN));
        if done < RECHECKS_PER_TURN || STOP.load(Ordering::SeqCst) {
            break;
        }
    }
    let (orders, snapshot, released, head_hold) = {
        let mut g = plugin.ctl.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_mut() {
            Some(ctl) => {
                let orders = ctl.tick(now);
                (
                    orders,
                    Some(ctl.snapshot_parts(now, true)),
                    ctl.take_releases(),
                    ctl.take_head_hold(),
                )
            }
            None => (vec![], None, vec![], None),
        }
    };
    if let Some(h) = head_hold {
        log::info(&head_hold_line(&h));
    }
    for r in released {
        log::info(&format!(
            "job {}: held {} s for planned nodes that are not free; hold dropped{}, Slurm places it",
            r.job,
            r.held_s,
            if r.pin_dropped {
                " with its migration's pin"
            } else {
                ""
            }
        ));
    }
    // Handed-out orders are in flight (pinned) now: save before requeueing.
    save_state(plugin, rounds, now);
    let carried_out = !orders.is_empty();
    let mut orders = orders.into_iter();
    for order in orders.by_ref() {
        if STOP.load(Ordering::SeqCst) {
            not_carried_out(plugin, &order);
            break;
        }
        match catch_unwind(AssertUnwindSafe(|| migrate(plugin, &order))) {
            Ok(Some(raised)) => {
                rounds.raised.insert(order.job as u32, raised);
            }
            Ok(None) => {}
            Err(p) => {
                log::error(&format!(
                    "migration of job {}: internal error (panic: {}); left in place",
                    order.job,
                    panic_text(&*p)
                ));
                not_carried_out(plugin, &order);
            }
        }
    }
    // Orders left when a stop came: never requeued, the job runs on.
    for order in orders {
        not_carried_out(plugin, &order);
    }
    let now = now_unix();
    poke_past_begin(&mut rounds.raised, now);
    lower_restarted(&mut rounds.raised, now);
    if carried_out {
        // The jobs just raised survive a restart from now on.
        save_state(plugin, rounds, now);
    }
    // Migrations take seconds (requeue, wait for PENDING): publish what the
    // engine holds now, not what it held before them, so jobs that started
    // meanwhile are in the state file at once.
    let snapshot = if carried_out {
        // The first snapshot's job records and layout are taken in: the
        // second brings only what changed since it.
        if let Some(first) = snapshot {
            rounds.published.absorb(first);
        }
        plugin
            .ctl
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .map(|ctl| ctl.snapshot_parts(now, true))
    } else {
        snapshot
    };
    // The state is built here from the copy, with no lock held.
    if let Some(mut s) = snapshot.map(|s| s.finish(&mut rounds.published)) {
        s.job_test = crate::stats::job_test();
        let mut key = s.clone();
        key.updated_unix = 0;
        key.job_test = Default::default();
        let key = serde_json_key(&key);
        // Rewrite on change, and every 10 s so readers see it is alive.
        if key != rounds.last_written || now.is_multiple_of(10) {
            if let Err(e) = s.write_atomic(&plugin.state_file) {
                log::error(&format!(
                    "cannot write {}: {e}",
                    plugin.state_file.display()
                ));
            }
            rounds.last_written = key;
        }
    }
    // With the state published, poke each migrated job the moment its
    // begin time passes (2 s after its requeue at most).
    if rounds.raised.values().any(|r| r.poke_after.is_some()) {
        let _ = poll_until(
            &STOP,
            Duration::from_secs(5),
            Duration::from_millis(100),
            || {
                poke_past_begin(&mut rounds.raised, now_unix());
                rounds
                    .raised
                    .values()
                    .all(|r| r.poke_after.is_none())
                    .then_some(())
            },
        );
    }
}

/// Slurm's log line for a Compact the waiting head's guard restrained.
fn head_hold_line(h: &compass_slurm::controller::HeadHold) -> String {
    if h.held.is_empty() {
        format!(
            "Compact skipped: its moves would delay the waiting head, job {}",
            h.head
        )
    } else {
        let held: Vec<String> = h.held.iter().map(|j| j.to_string()).collect();
        format!(
            "Compact held job(s) {} still: moving them would delay the waiting head, job {}",
            held.join(","),
            h.head
        )
    }
}

/// Writes what must survive a restart ([`compass_slurm::persist`]) to
/// StateSaveLocation when it changed: atomically, from this thread, with
/// no lock of ours or Slurm's held during the I/O.
fn save_state(plugin: &Plugin, rounds: &mut Rounds, now: u64) {
    let Some(dir) = crate::job::STATE_DIR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    else {
        return;
    };
    let Some(mut saved) = plugin
        .ctl
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|c| c.saved(now))
    else {
        return;
    };
    saved.raised = rounds
        .raised
        .iter()
        .map(|(&job, r)| SavedRaised {
            job: u64::from(job),
            since: r.since,
            nice: r.nice,
        })
        .collect();
    if rounds.last_saved.as_ref() == Some(&saved) {
        return;
    }
    let path = dir.join(compass_slurm::persist::FILE_NAME);
    match saved.write_atomic(&path) {
        Ok(()) => rounds.last_saved = Some(saved),
        Err(e) => log::error(&format!("cannot write {}: {e}", path.display())),
    }
}

/// An order handed out but not carried out: if the controller still
/// records the job as running (no requeue reached Slurm), the engine goes
/// back to what Slurm runs; a requeued job keeps its pin until it expires.
fn not_carried_out(plugin: &Plugin, order: &MigrationOrder) {
    if let Some(ctl) = plugin
        .ctl
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_mut()
    {
        if ctl.knows(order.job) {
            if let Some(e) = ctl.requeue_failed(order, now_unix()) {
                log::error(&format!("compass: {e}"));
            }
        }
    }
}

fn serde_json_key(s: &compass_slurm::state::PublishedState) -> String {
    format!("{s:?}")
}

/// The names of a migration's target nodes, for the log (`n1,n3`).
fn target_names(plugin: &Plugin, order: &MigrationOrder) -> String {
    let ctl = plugin.ctl.lock().unwrap_or_else(|p| p.into_inner());
    ctl.as_ref()
        .map_or_else(|| "?".into(), |c| c.node_list(&order.to_nodes))
}

/// Requeue + pin + begin time now (a plain requeue waits cred_expire + 1 s).
fn migrate(plugin: &Plugin, order: &MigrationOrder) -> Option<Raised> {
    // tick() marked the order in flight (pinned) before handing it out.
    let id = order.job as u32;
    // Given up since it was handed out (its target went to a job Slurm
    // started there): no requeue for nothing.
    let wanted = (plugin.ctl.lock().unwrap_or_else(|p| p.into_inner()))
        .as_ref()
        .is_none_or(|c| c.still_ordered(order.job));
    if !wanted {
        log::info(&format!(
            "migration of job {id}: withdrawn before its requeue (its target was taken); left in place"
        ));
        return None;
    }
    let target = target_names(plugin, order);
    let nice = load_job(id).map_or(NICE_OFFSET, |j| j.nice);
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
            if let Some(e) = ctl.requeue_failed(order, now_unix()) {
                log::error(&format!("compass: {e}"));
            }
        }
        return None;
    }
    // slurmd revoked the job's credential at the requeue; a new one created
    // in the same second is refused ("Job credential revoked") and the job
    // is killed, so the restart is never earlier than 2 s after the requeue.
    let begin = now_unix() + 2;
    // The job is COMPLETING, then PENDING with begin time = requeue +
    // cred_expire + 1; an update made while it completes is overwritten, so
    // wait until it is PENDING, then set the begin time and check it stuck.
    // (The wait is long enough for a loaded slurmctld; a stop ends it.)
    let waited = poll_until(
        &STOP,
        Duration::from_secs(30),
        Duration::from_millis(100),
        || match job_pending_since(id) {
            Some(eligible) if eligible <= begin as i64 => Some(()),
            Some(_) => {
                update_job(id, |d| d.begin_time = begin as sys::time_t);
                None
            }
            None => None,
        },
    );
    match waited {
        Waited::Done(()) => {
            let raised = raise_priority(id);
            log::info(&format!(
                "migration of job {id}: requeued, pinned to its planned nodes, eligible now{}; target {target}",
                if raised {
                    ", first in the queue until it restarts"
                } else {
                    ""
                }
            ));
            // The poke after the begin time comes at the end of the round
            // ([`poke_past_begin`]): waiting here kept the worker from
            // publishing its state for seconds per migration.
            raised.then_some(Raised {
                since: now_unix(),
                nice,
                poke_after: Some(begin),
            })
        }
        Waited::Stopped => {
            log::info(&format!(
                "migration of job {id}: requeued; stopping before its begin time was reset"
            ));
            None
        }
        Waited::TimedOut => {
            log::error(&format!(
                "migration of job {id}: could not reset its begin time (it starts after cred_expire)"
            ));
            None
        }
    }
}

/// Puts a migrated job first in the queue until it restarts. Without it the
/// engine held the queue's head for the migration's target while Slurm,
/// in priority order, would not start the (lower-priority) migrated job
/// there: backfill even reserved the target for the head, and the whole
/// queue stalled with GPUs free until the pin expired (issue #10, measured
/// by `compass replay`: holds of 8-620 s per run).
fn raise_priority(id: u32) -> bool {
    update_job(id, |d| d.priority = MIGRATION_PRIORITY) == 0
}

/// Slurm starts a job whose begin time has passed only at its next
/// scheduling pass (up to `sched_interval` later); a successful job update
/// queues a pass at once (`_slurm_rpc_update_job`). So each migrated job
/// still pending is raised once more as soon as its begin time has passed
/// (polled at the end of the round that migrated it, after the state is
/// published), and restarts then.
fn poke_past_begin(raised: &mut std::collections::BTreeMap<u32, Raised>, now: u64) {
    for (id, r) in raised.iter_mut() {
        if r.poke_after.is_some_and(|begin| now > begin) {
            r.poke_after = None;
            if job_pending_since(*id).is_some() {
                raise_priority(*id);
            }
        }
    }
}

/// Gives every raised job that restarted (or waited longer than a pin
/// lives) its computed priority back, and the nice it had (Slurm's
/// recompute resets nice to 0); forgets those that ended.
fn lower_restarted(raised: &mut std::collections::BTreeMap<u32, Raised>, now: u64) {
    let ids: Vec<u32> = raised.keys().copied().collect();
    for id in ids {
        let r = raised[&id];
        match settle(lookup_job(id), r.since, now) {
            Settle::Keep => {}
            Settle::Forget => {
                raised.remove(&id);
            }
            Settle::GiveBack => {
                // One attempt: a refused update is logged once, not every
                // round.
                raised.remove(&id);
                let rc = update_job(id, |d| d.priority = PRIORITY_RECOMPUTE);
                if rc == 0 && r.nice != NICE_OFFSET {
                    update_job(id, |d| d.nice = r.nice);
                }
                if rc != 0 {
                    log::error(&format!(
                        "migration of job {id}: could not give back its computed priority (rc {rc})"
                    ));
                }
            }
        }
    }
}

/// What slurmctld says of a job: its record, or that it has none (ended
/// and purged), or no answer.
#[derive(Clone, Copy, Debug)]
enum Lookup {
    Found(JobNow),
    NoSuchJob,
    NoAnswer,
}

/// What to do with a raised job ([`lower_restarted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settle {
    /// Still pending within a pin's life, or no answer yet: ask again.
    Keep,
    /// Restarted, or pending longer than a pin lives: give back.
    GiveBack,
    /// Ended: a finished job has no priority to give back, and Slurm
    /// refuses the update.
    Forget,
}

fn settle(job: Lookup, since: u64, now: u64) -> Settle {
    let waited = now.saturating_sub(since);
    match job {
        Lookup::NoSuchJob => Settle::Forget,
        // A failed RPC is not a restart (it used to be taken for one, and
        // the job kept the top priority for good).
        Lookup::NoAnswer if waited > RAISED_LOOKUP_S => Settle::Forget,
        Lookup::NoAnswer => Settle::Keep,
        Lookup::Found(j) if j.state & JOB_STATE_BASE > JOB_SUSPENDED => Settle::Forget,
        Lookup::Found(j)
            if j.state & JOB_STATE_BASE == JOB_PENDING
                && j.state & JOB_COMPLETING == 0
                && waited <= compass_slurm::controller::PIN_TIMEOUT_S =>
        {
            Settle::Keep
        }
        Lookup::Found(_) => Settle::GiveBack,
    }
}

/// One `slurm_update_job` with the fields `set` fills in.
fn update_job(id: u32, set: impl FnOnce(&mut sys::job_desc_msg_t)) -> i32 {
    // SAFETY: zeroed then initialised by Slurm's own initialiser; public API.
    unsafe {
        let mut desc: sys::job_desc_msg_t = std::mem::zeroed();
        sys::slurm_init_job_desc_msg(&mut desc);
        desc.job_id = id;
        set(&mut desc);
        sys::slurm_update_job(&mut desc)
    }
}

const JOB_PENDING: u32 = 0;
const JOB_RUNNING: u32 = 1;
/// Slurm's job states up to this one are not finished (`job_states`).
const JOB_SUSPENDED: u32 = 2;
const JOB_STATE_BASE: u32 = 0xff;
const JOB_COMPLETING: u32 = 1 << 15;

/// What the worker reads of a job from slurmctld.
#[derive(Clone, Copy, Debug)]
struct JobNow {
    state: u32,
    eligible: i64,
    nice: u32,
}

/// The job's state, eligible time and nice from slurmctld.
fn load_job(id: u32) -> Option<JobNow> {
    match lookup_job(id) {
        Lookup::Found(j) => Some(j),
        Lookup::NoSuchJob | Lookup::NoAnswer => None,
    }
}

/// The job's record from slurmctld ([`Lookup`]).
fn lookup_job(id: u32) -> Lookup {
    let mut msg: *mut sys::job_info_msg_t = std::ptr::null_mut();
    // SAFETY: public API; the message is freed below.
    unsafe {
        if sys::slurm_load_job(&mut msg, id, 0) != 0 || msg.is_null() {
            return if sys::slurm_get_errno() == sys::slurm_err_t_ESLURM_INVALID_JOB_ID as i32 {
                Lookup::NoSuchJob
            } else {
                Lookup::NoAnswer
            };
        }
        let m = &*msg;
        let out = if m.record_count >= 1 && !m.job_array.is_null() {
            let j = &*m.job_array;
            Lookup::Found(JobNow {
                state: j.job_state,
                eligible: j.eligible_time,
                nice: j.nice,
            })
        } else {
            Lookup::NoSuchJob
        };
        sys::slurm_free_job_info_msg(msg);
        out
    }
}

/// `Some(eligible_time)` once the job is plainly PENDING (not completing).
fn job_pending_since(id: u32) -> Option<i64> {
    let j = load_job(id)?;
    (j.state & JOB_STATE_BASE == JOB_PENDING && j.state & JOB_COMPLETING == 0).then_some(j.eligible)
}

/// Running and not completing (not being cancelled).
fn job_running(id: u32) -> bool {
    load_job(id)
        .is_some_and(|j| j.state & JOB_STATE_BASE == JOB_RUNNING && j.state & JOB_COMPLETING == 0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_job_gets_its_priority_back_once_it_restarted_and_never_on_a_failed_lookup() {
        let job = |state| {
            Lookup::Found(JobNow {
                state,
                eligible: 0,
                nice: NICE_OFFSET,
            })
        };
        let pin = compass_slurm::controller::PIN_TIMEOUT_S;
        // pending within a pin's life: still raised; running again: given back
        assert_eq!(settle(job(JOB_PENDING), 100, 110), Settle::Keep);
        assert_eq!(settle(job(JOB_RUNNING), 100, 110), Settle::GiveBack);
        // pending longer than a pin lives: given back; completing: given back
        assert_eq!(settle(job(JOB_PENDING), 100, 101 + pin), Settle::GiveBack);
        assert_eq!(
            settle(job(JOB_PENDING | JOB_COMPLETING), 100, 110),
            Settle::GiveBack
        );
        // ended (state above SUSPENDED: COMPLETE = 3) or purged: forgotten
        assert_eq!(settle(job(3), 100, 110), Settle::Forget);
        assert_eq!(settle(Lookup::NoSuchJob, 100, 110), Settle::Forget);
        // slurmctld did not answer: asked again (it used to count as a
        // restart, and the job was forgotten with the top priority), for
        // at most RAISED_LOOKUP_S
        assert_eq!(settle(Lookup::NoAnswer, 100, 110), Settle::Keep);
        assert_eq!(
            settle(Lookup::NoAnswer, 100, 101 + RAISED_LOOKUP_S),
            Settle::Forget
        );
    }
}
