//! Backfill never delays the queue's head, and neither may Compact (issue
//! #11): what a blocked head's reservation is, and which of Compact's moves
//! would push it later.
//!
//! - [`reservation`]: when a blocked job could start by backfill's rule
//!   (Slurm's and the simulator's `QueuePolicy::Backfill`): running jobs free
//!   their GPUs where they are, at their expected ends. Used by the
//!   simulator and by [`hold_for_head`].
//! - [`hold_for_head`]: Compact tried on a fork of a [`PoolSet`] (the Slurm
//!   plugin's engine). A moved job restarts with a new end (a requeue runs
//!   for its whole time limit again) and sits where Compact put it; when
//!   that makes the head's reservation later than with no move, the moved
//!   jobs are held still and the trial repeated: the simulator's departure
//!   guard (`docs/simulator.md`, "Queue policies"), on what the plugin knows
//!   (time limits, not the trace's run times).
//! - [`moves_let_a_job_start`]: the gate `MoveWhen::Starts` (issue #10):
//!   a Compact is made only when its moves give some waiting job room.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::clock::Instant;
use crate::model::{JobId, JobShape, Migration, NodeId};
use crate::placement::compass::{CompassEngine, Veto};
use crate::placement::pools::PoolSet;
use crate::placement::{Occupancy, PlacementPolicy};

/// A blocked job's reservation by backfill's rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reservation {
    /// The earliest instant it fits (`INFINITY`: never, as far as the ends
    /// say).
    pub t_res: f64,
    /// `F(t_res) = sum_n floor(free_n(t_res) / g)` in the best pool (0 when
    /// it never fits).
    pub fit: i64,
}

/// When a `shape` job could start, from `now` on, if the running jobs free
/// their GPUs where they are at `ends` (sorted by end; a job missing from
/// `ends` never frees its GPUs). `pools[p]`: pool `p`'s GPU accounting
/// when it admits the job (`None`: it does not). The job needs
/// `shape.instances` instances of `shape.gpus` GPUs in one pool, each on
/// one node.
pub fn reservation(
    pools: &[Option<&Occupancy>],
    ends: impl IntoIterator<Item = (f64, JobId)>,
    shape: JobShape,
    now: f64,
) -> Reservation {
    let g = shape.gpus.max(1);
    let w = i64::from(shape.instances);
    let mut free: Vec<Vec<u32>> = Vec::with_capacity(pools.len());
    let mut fit: Vec<i64> = Vec::with_capacity(pools.len());
    for occ in pools {
        match occ {
            Some(occ) => {
                let f: Vec<u32> = (0..occ.spec().nodes).map(|n| occ.free(n)).collect();
                fit.push(f.iter().map(|x| i64::from(x / g)).sum());
                free.push(f);
            }
            None => {
                fit.push(i64::MIN);
                free.push(Vec::new());
            }
        }
    }
    let best = |fit: &[i64]| fit.iter().copied().max().unwrap_or(i64::MIN);
    let mut t_res = (best(&fit) >= w).then_some(now);
    for (end, id) in ends {
        if t_res.is_some_and(|tr| end > tr) {
            break;
        }
        for (p, occ) in pools.iter().enumerate() {
            let Some(running) = occ.and_then(|o| o.job(id)) else {
                continue;
            };
            for (&n, &gj) in running.nodes.iter().zip(&running.gpus) {
                let f = &mut free[p][n as usize];
                fit[p] -= i64::from(*f / g);
                *f += gj;
                fit[p] += i64::from(*f / g);
            }
        }
        if t_res.is_none() && best(&fit) >= w {
            t_res = Some(end.max(now));
        }
    }
    Reservation {
        t_res: t_res.unwrap_or(f64::INFINITY),
        fit: best(&fit).max(0),
    }
}

/// The running jobs' expected ends where they are, kept by the caller as
/// jobs start, move and end (the plugin: start plus time limit), and the
/// head's fit over time derived from them ([`hold_for_head`]; issue #11:
/// a guarded Compact costs what it touches). A job without an end (no time
/// limit) never frees its GPUs.
#[derive(Clone, Debug, Default)]
pub struct Ends {
    by_job: FxHashMap<JobId, f64>,
    /// Jobs whose end changed since the fit over time last looked.
    changed: Vec<JobId>,
    /// Too many changes went unseen: rebuild the fit over time.
    stale: bool,
    /// The head's fit over time, per instance size and GPU type, the
    /// latest first.
    timelines: Vec<Timeline>,
    /// The nodes whose fit over time changed, in order, from the first
    /// change a kept timeline has not seen: `log[k]` is change number
    /// `log_base + k` (each timeline has seen the changes before its
    /// `seen`). The head's own timeline sees every change before it is
    /// read; the others at most [`TIMELINE_LAG`] changes late, sooner
    /// when the caller has time ([`Ends::catch_up`]).
    log: Vec<(usize, NodeId)>,
    log_base: usize,
    /// Buffers of [`node_rises`], kept between calls.
    scratch: RisesScratch,
}

impl Ends {
    /// `job` is expected to end at `end` (not finite: never, as far as
    /// anyone knows).
    pub fn set(&mut self, job: JobId, end: f64) {
        self.forget(job);
        if end.is_finite() {
            self.by_job.insert(job, end);
        }
        self.note(job);
    }

    /// `job` ended (or its end is no longer known).
    pub fn remove(&mut self, job: JobId) {
        self.forget(job);
        self.note(job);
    }

    fn forget(&mut self, job: JobId) {
        self.by_job.remove(&job);
    }

    /// Remembers a change for the fit over time, within a bound (a caller
    /// with no waiting head for long: past it, the fit is rebuilt once).
    fn note(&mut self, job: JobId) {
        if self.stale {
            return;
        }
        if self.changed.len() > 4 * self.by_job.len() + 64 {
            self.changed = Vec::new();
            self.stale = true;
        } else {
            self.changed.push(job);
        }
    }

    /// `job`'s expected end (`INFINITY`: none known).
    pub fn get(&self, job: JobId) -> f64 {
        self.by_job.get(&job).copied().unwrap_or(f64::INFINITY)
    }

    pub fn len(&self) -> usize {
        self.by_job.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }

    /// Brings the head's fit over time up to date with `pools` as they are
    /// (no trial open) and returns it: the nodes that changed since the
    /// last call, and those of the jobs whose end changed, are recomputed.
    /// It is kept for the last [`TIMELINES`] heads' instance sizes and GPU
    /// types; for a new one it is built from every node of the pools that
    /// admit it, [`TIMELINE_BUILD_NODES`] per call. Only the head's own is
    /// brought up to date at once; the others at most [`TIMELINE_LAG`]
    /// changes late (issue #11: the four kept up to date at every call were
    /// half of this call's cost, for a head that rarely changes shape).
    fn sync(&mut self, pools: &mut PoolSet, trial: &HeadTrial<'_>) {
        let g = trial.shape.gpus.max(1);
        let sizes: Vec<usize> = pools.pools().map(|p| p.nodes.len()).collect();
        let changed = pools.take_changed();
        let jobs = std::mem::take(&mut self.changed);
        if std::mem::take(&mut self.stale) {
            self.timelines.clear();
        }
        self.timelines.retain(|t| t.sizes == sizes);
        if !self.timelines.is_empty() && (!changed.is_empty() || !jobs.is_empty()) {
            let mut nodes = changed;
            for j in jobs {
                for &p in pools.pools_of_job(j).unwrap_or(&[]) {
                    if let Some(r) = pools.engine(p).and_then(|e| e.occupancy().job(j)) {
                        nodes.extend(r.nodes.iter().map(|&n| (p, n)));
                    }
                }
            }
            nodes.sort_unstable();
            nodes.dedup();
            self.log.extend(nodes);
        }
        let end = self.log_end();
        let gpu_type = trial.gpu_type.map(str::to_string);
        let at = self
            .timelines
            .iter()
            .position(|t| t.g == g && t.gpu_type == gpu_type);
        let mut t = match at {
            Some(i) => self.timelines.remove(i),
            None => {
                let admitted = admitted(pools, trial);
                // built from the pools as they are: no change before is news
                Timeline {
                    g,
                    gpu_type,
                    built: vec![0; admitted.len()],
                    sizes,
                    admitted,
                    seen: end,
                    ..Timeline::default()
                }
            }
        };
        let (log, base) = (&self.log, self.log_base);
        t.advance(pools, &self.by_job, (log, base), end, &mut self.scratch);
        for o in &mut self.timelines {
            if end - o.seen > TIMELINE_LAG {
                o.advance(
                    pools,
                    &self.by_job,
                    (log, base),
                    end - TIMELINE_LAG,
                    &mut self.scratch,
                );
            }
        }
        t.build(pools, &self.by_job, TIMELINE_BUILD_NODES, &mut self.scratch);
        t.base = t
            .admitted
            .iter()
            .enumerate()
            .map(|(p, &ok)| {
                pools
                    .engine(p)
                    .filter(|_| ok)
                    .map(|e| e.occupancy().fit(g) as i64)
            })
            .collect();
        self.timelines.insert(0, t);
        self.timelines.truncate(TIMELINES);
        self.trim_log();
    }

    /// The number of the next change to log.
    fn log_end(&self) -> usize {
        self.log_base + self.log.len()
    }

    /// Forgets the changes every kept timeline has seen.
    fn trim_log(&mut self) {
        let end = self.log_end();
        let seen = self.timelines.iter().map(|t| t.seen).min().unwrap_or(end);
        self.log.drain(..seen - self.log_base);
        self.log_base = seen;
    }

    /// Brings the fit over time of heads other than the last up to date by
    /// at most `budget` changes, the earliest first: for a caller with time
    /// to spare (the select plugin, after a tick that moved nobody), so that
    /// a head of another shape finds its fit over time nearly up to date.
    /// What it decides does not change: a head's own is brought up to date
    /// before it is read.
    pub fn catch_up(&mut self, pools: &PoolSet, budget: usize) {
        let end = self.log_end();
        let (log, base) = (&self.log, self.log_base);
        let mut left = budget;
        for t in self.timelines.iter_mut().skip(1) {
            let to = end.min(t.seen.saturating_add(left));
            left -= to - t.seen;
            t.advance(pools, &self.by_job, (log, base), to, &mut self.scratch);
            if left == 0 {
                break;
            }
        }
        self.trim_log();
    }
}

/// Changes of the fit over time a head's timeline that is not the last
/// head's may be behind at most (each guarded Compact keeps them so): what
/// a head of that shape costs to bring up to date when it comes back (a
/// change is a node's rises recomputed, about 0.2 us at 10,000 nodes).
pub const TIMELINE_LAG: usize = 64;

/// Heads' instance sizes and GPU types whose fit over time [`Ends`] keeps
/// (the last head's up to date, the others at most [`TIMELINE_LAG`]
/// changes late; a new one costs a pass over the pools' nodes, made
/// [`TIMELINE_BUILD_NODES`] at a time).
pub const TIMELINES: usize = 4;

/// Nodes one [`hold_for_head`] adds at most to a head's fit over time that
/// is not built yet (issue #11: built at once, it held the controller's lock
/// 1.6-1.9 ms at 10,000 nodes for each new head shape; 256 at a time, 40-50
/// us, one of the causes of the plugin bench's slowest ticks). Until it is
/// complete, a Compact whose moves lower the head's fit at some instant is
/// taken to delay the head: when in doubt, nothing moves.
pub const TIMELINE_BUILD_NODES: u32 = 64;

/// The head's fit over time in the pools that admit it: `F_p(t) = base_p
/// + #{rises of pool p at or before t}`, where a node's rises are the
/// instants its `floor(free / g)` grows as its jobs end (backfill's walk,
/// [`reservation`], kept per node instead of redone over every job).
#[derive(Clone, Debug, Default)]
struct Timeline {
    /// What it was built for: the head's GPUs per instance, its GPU type,
    /// the pools' sizes.
    g: u32,
    gpu_type: Option<String>,
    sizes: Vec<usize>,
    admitted: Vec<bool>,
    /// Nodes `0..built[p]` of each pool are in `rises` and `order`; the
    /// others are added by [`Timeline::build`].
    built: Vec<NodeId>,
    /// The changes of [`Ends`]'s log before this one are in it.
    seen: usize,
    /// `F_p` now, with no job ended (`None`: the pool does not admit it).
    base: Vec<Option<i64>>,
    /// Each node's rises, by pool and node (issue #11: a map keyed by
    /// both was a fifth of the cost of bringing the fit up to date).
    rises: Vec<Vec<Vec<f64>>>,
    /// Every node's rises by instant: (instant, pool, node) and how many
    /// rises the node has then. A node's change touches only the instants
    /// whose count changes (issue #11: one entry per rise, removed and put
    /// back at every change of the node, was most of the cost of keeping
    /// the fit over time up to date).
    order: BTreeMap<(Instant, usize, NodeId), u32>,
}

impl Timeline {
    /// Takes in the changes of `log` (the log and the number of its first
    /// change) up to change number `to`: each node they name that is built
    /// is recomputed from `pools` as they are now, once.
    fn advance(
        &mut self,
        pools: &PoolSet,
        ends: &FxHashMap<JobId, f64>,
        (log, base): (&[(usize, NodeId)], usize),
        to: usize,
        scratch: &mut RisesScratch,
    ) {
        if to <= self.seen {
            return;
        }
        let mut nodes = log[self.seen - base..to - base].to_vec();
        self.seen = to;
        nodes.sort_unstable();
        nodes.dedup();
        for (p, n) in nodes {
            let built = self.built.get(p).is_some_and(|&b| n < b);
            if let Some(e) = pools.engine(p).filter(|_| self.admitted[p] && built) {
                self.recompute(e, p, n, ends, scratch);
            }
        }
    }

    /// Node `n` of pool `p` (on engine `e`) from the engine as it is now.
    fn recompute(
        &mut self,
        e: &CompassEngine,
        p: usize,
        n: NodeId,
        ends: &FxHashMap<JobId, f64>,
        scratch: &mut RisesScratch,
    ) {
        node_rises(e, n, self.g, ends, scratch);
        self.set_node(p, n, &scratch.rises);
    }

    /// Adds up to `budget` nodes not in it yet, pool by pool.
    fn build(
        &mut self,
        pools: &PoolSet,
        ends: &FxHashMap<JobId, f64>,
        mut budget: u32,
        scratch: &mut RisesScratch,
    ) {
        for p in 0..self.admitted.len() {
            let Some(e) = pools.engine(p).filter(|_| self.admitted[p]) else {
                continue;
            };
            let size = e.occupancy().spec().nodes;
            let from = self.built[p];
            let to = size.min(from.saturating_add(budget));
            for n in from..to {
                self.recompute(e, p, n, ends, scratch);
            }
            self.built[p] = to;
            budget -= to - from;
        }
    }

    /// Is every node of the pools that admit the head in it?
    fn complete(&self, pools: &PoolSet) -> bool {
        (0..self.admitted.len()).all(|p| {
            !self.admitted[p]
                || pools
                    .engine(p)
                    .is_none_or(|e| self.built[p] >= e.occupancy().spec().nodes)
        })
    }

    /// Node `n` of pool `p` now rises at `rises` (sorted): only the
    /// instants whose count of rises changes are touched in `order`.
    fn set_node(&mut self, p: usize, n: NodeId, rises: &[f64]) {
        if self.rises.len() <= p {
            self.rises.resize_with(p + 1, Vec::new);
        }
        let of_pool = &mut self.rises[p];
        if of_pool.len() <= n as usize {
            of_pool.resize_with(n as usize + 1, Vec::new);
        }
        let mut old = std::mem::take(&mut of_pool[n as usize]);
        if old != rises {
            self.update_order(p, n, &old, rises);
            old.clear();
            old.extend_from_slice(rises);
        }
        self.rises[p][n as usize] = old;
    }

    /// Node `n` of pool `p` rose at `old` and now at `new` (both sorted):
    /// the counts in `order` of the instants that differ are set.
    fn update_order(&mut self, p: usize, n: NodeId, old: &[f64], new: &[f64]) {
        let (mut a, mut b) = (counts(old).peekable(), counts(new).peekable());
        loop {
            // the earlier instant of the two lists, with its count in each
            let (t, was, now) = match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(&(t, k)), None) => (t, k, 0),
                (None, Some(&(t, k))) => (t, 0, k),
                (Some(&(ta, ka)), Some(&(tb, kb))) => match ta.total_cmp(&tb) {
                    std::cmp::Ordering::Less => (ta, ka, 0),
                    std::cmp::Ordering::Greater => (tb, 0, kb),
                    std::cmp::Ordering::Equal => (ta, ka, kb),
                },
            };
            if was > 0 {
                a.next();
            }
            if now > 0 {
                b.next();
            }
            if was != now {
                let key = (Instant(t), p, n);
                if now == 0 {
                    self.order.remove(&key);
                } else {
                    self.order.insert(key, now);
                }
            }
        }
    }

    /// The head's reservation: the first instant (from `now`) at which
    /// some pool fits `w` instances, and every pool's fit then.
    fn on_time(&self, w: i64, now: f64) -> OnTime {
        let mut fit = self.base.clone();
        let best = |fit: &[Option<i64>]| fit.iter().flatten().copied().max().unwrap_or(i64::MIN);
        // Fitting now, the fit at `now` still counts the overdue jobs (ends
        // before now) as freed, as the moves' fit does.
        let mut t0 = if best(&fit) >= w { now } else { f64::INFINITY };
        for (&(Instant(e), p, _), &k) in &self.order {
            if e > t0 {
                break;
            }
            if let Some(f) = fit[p].as_mut() {
                *f += i64::from(k);
            }
            if t0.is_infinite() && best(&fit) >= w {
                t0 = e.max(now);
            }
        }
        OnTime { t0, fit }
    }
}

/// The distinct instants of sorted `rises`, each with how many times it
/// comes.
fn counts(rises: &[f64]) -> impl Iterator<Item = (f64, u32)> + '_ {
    rises
        .chunk_by(|x, y| x.total_cmp(y).is_eq())
        .map(|c| (c[0], c.len() as u32))
}

/// [`node_rises`]'s buffers, reused from call to call.
#[derive(Clone, Debug, Default)]
struct RisesScratch {
    instances: Vec<(f64, u32)>,
    /// The last call's answer.
    rises: Vec<f64>,
}

/// The instants node `n`'s `floor(free / g)` grows as its jobs end at their
/// `ends` (one entry per unit; jobs without an end never free), into
/// `out.rises`.
fn node_rises(
    e: &CompassEngine,
    n: NodeId,
    g: u32,
    ends: &FxHashMap<JobId, f64>,
    out: &mut RisesScratch,
) {
    let inst = &mut out.instances;
    inst.clear();
    inst.extend(
        e.node(n)
            .instances()
            .filter_map(|(i, gpus)| ends.get(&i.job).map(|&t| (t, gpus))),
    );
    inst.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let mut free = e.occupancy().free(n);
    out.rises.clear();
    for &(t, gpus) in inst.iter() {
        let before = free / g;
        free += gpus;
        for _ in before..free / g {
            out.rises.push(t);
        }
    }
}

/// The waiting head and what is known of the running jobs, for
/// [`hold_for_head`].
pub struct HeadTrial<'a> {
    /// The head's shape and the GPU type it names (`None`: any).
    pub shape: JobShape,
    pub gpu_type: Option<&'a str>,
    /// Now, seconds (the ends' clock, [`Ends`]).
    pub now: f64,
    /// Its expected end if Compact moves it now (a requeue restarts it).
    pub end_if_moved: &'a dyn Fn(JobId) -> f64,
    /// Trials at most (each holds at least one more job still); past it
    /// the verdict is [`HeadVerdict::Skip`].
    pub max_trials: usize,
    /// Which jobs may move to another node at all, asked by Compact before
    /// each such move, and how many refusals make the trial give up (the
    /// `pays` gate's tidying moves that do not pay; [`Veto`]). `None`:
    /// every job Compact may move.
    pub may_move: Option<(&'a dyn Fn(JobId) -> bool, usize)>,
    /// What the moves must gain to be worth keeping, asked of the engine
    /// after each trial's Compact, before the head is looked at (the
    /// `move_when` gate's trial: some waiting job fits after the moves,
    /// [`Blocked::start_after`]). A trial whose moves gain nothing ends the
    /// guard: nothing moves ([`HeadVerdict::NoGain`]). Holding more jobs
    /// still only takes moves away, so the head's check and the trials
    /// after it are not made for moves that are not kept anyway (issue
    /// #11: on a mixed cluster with a deep queue, up to eight Compacts of
    /// 20 us, each undone, for a trial that then started nobody). `None`:
    /// every move is worth keeping.
    pub gain: Option<&'a dyn Fn(&PoolSet) -> bool>,
}

/// What Compact may do while the head waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeadVerdict {
    /// Its moves do not delay the head (or it makes none): run it.
    Free,
    /// Run it with these jobs held still (their moves would delay the
    /// head; without them it is on time).
    Hold(Vec<JobId>),
    /// No hold found that keeps the head on time: make no move.
    Skip,
    /// [`HeadTrial::may_move`] refused as many jobs as it allows
    /// ([`GuardedCompact::refused`]): nothing moves.
    Refused,
    /// A trial's moves gained nothing ([`HeadTrial::gain`]): nothing moves.
    NoGain,
}

/// A Compact run under [`hold_for_head`].
#[derive(Clone, Debug)]
pub struct GuardedCompact {
    pub verdict: HeadVerdict,
    /// The migrations made (global node ids); none for [`HeadVerdict::Skip`],
    /// [`HeadVerdict::Refused`] and [`HeadVerdict::NoGain`].
    pub migrations: Vec<Migration>,
    /// Whether the head's reservation had to be walked: some trial's moves
    /// lower the head's fit at some instant (otherwise no move can delay
    /// it, and the check cost only what the moves touched).
    pub walked: bool,
    /// The jobs [`HeadTrial::may_move`] refused, each once; they are held
    /// still for tidying in `pools` ([`PoolSet::set_tidy_hold`]).
    pub refused: Vec<JobId>,
}

/// Compact on `pools`, holding still the jobs it must so that its moves do
/// not make the waiting head's reservation ([`reservation`], in the pools
/// that admit the head) later than with no move at all. A job counts as
/// moved when its nodes change (a move inside a node is no requeue); a
/// moved job frees its GPUs at its new nodes at `end_if_moved`. If the
/// unheld trial delays the head, it is undone, the jobs it moved are held
/// still and Compact is tried again, until the head is on time
/// ([`HeadVerdict::Hold`]), or nothing new moves or `max_trials` is reached
/// ([`HeadVerdict::Skip`]: when in doubt, nothing moves, Slurm's own
/// behaviour). Each Compact asks [`HeadTrial::may_move`] before it moves
/// a job to another node; the refused jobs stay held for tidying through
/// the trials that follow, and when they reach its limit nothing moves
/// ([`HeadVerdict::Refused`]). The accepted trial is kept in `pools`;
/// inside a trial the caller opened ([`PoolSet::begin_trial`]) the caller
/// can still undo it.
///
/// Cost (issue #11): each trial is a Compact that can be undone (no copy
/// of the pools). Its moves change the head's fit `F(t) = sum_n
/// floor(free_n(t) / g)` only on the nodes they touch; when they lower it
/// at no instant, the head cannot be later and nothing else is looked at.
/// Otherwise the head's reservation `t0` with no move is read once from the
/// head's fit over time that [`Ends`] keeps per node (its rises up to
/// `t0`), and the trial delays the head iff `F(t0)` after the moves is
/// short of its width.
pub fn hold_for_head(
    pools: &mut PoolSet,
    trial: &HeadTrial<'_>,
    ends: &mut Ends,
) -> GuardedCompact {
    let mut hold: Vec<JobId> = Vec::new();
    let mut on_time: Option<OnTime> = None;
    ends.sync(pools, trial);
    let ends: &Ends = ends;
    let timeline = &ends.timelines[0];
    let mut veto = match trial.may_move {
        Some((may_move, limit)) => Veto::new(may_move, limit),
        None => Veto::none(),
    };
    let mut verdict = HeadVerdict::Skip;
    let mut migrations = Vec::new();
    for _ in 0..trial.max_trials.max(1) {
        for &k in &hold {
            // A held job was movable in the trial that moved it.
            let _ = pools.set_movable(k, false);
        }
        pools.begin_trial();
        let m = pools.compact_vetoed(&mut veto);
        // Moves that gain nothing end the guard, undone, before the head is
        // looked at ([`HeadTrial::gain`]).
        let no_gain = !veto.exhausted() && trial.gain.is_some_and(|gain| !gain(pools));
        let moved = if veto.exhausted() || no_gain {
            BTreeMap::new()
        } else {
            moved_jobs(pools, &m)
        };
        // An exhausted veto ends the trial before the head is looked at.
        let late = veto.exhausted()
            || no_gain
            || (!moved.is_empty()
                && delays_head(pools, trial, ends, &moved, timeline, &mut on_time));
        for &k in &hold {
            let _ = pools.set_movable(k, true);
        }
        if !late {
            pools.keep_trial();
            verdict = if hold.is_empty() {
                HeadVerdict::Free
            } else {
                HeadVerdict::Hold(hold)
            };
            migrations = m;
            break;
        }
        pools.undo_trial();
        // The undo lifted the holds of the refused jobs: they stay held.
        pools.set_tidy_hold(veto.refused(), true);
        if no_gain {
            verdict = HeadVerdict::NoGain;
            break;
        }
        if veto.exhausted() {
            verdict = HeadVerdict::Refused;
            break;
        }
        let before = hold.len();
        for j in moved.keys() {
            if !hold.contains(j) {
                hold.push(*j);
            }
        }
        if hold.len() == before {
            break;
        }
    }
    GuardedCompact {
        verdict,
        migrations,
        walked: on_time.is_some(),
        refused: veto.refused().to_vec(),
    }
}

/// The head's reservation with no move: when it fits (`t0`, `INFINITY`:
/// never) and its fit `F_p(t0)` in each pool then (`None`: the pool does
/// not admit it).
#[derive(Clone, Debug)]
struct OnTime {
    t0: f64,
    fit: Vec<Option<i64>>,
}

/// The jobs a trial's `migrations` moved across nodes, with the global node
/// each moved instance was on before the trial.
fn moved_jobs(pools: &PoolSet, migrations: &[Migration]) -> BTreeMap<JobId, Vec<(u32, NodeId)>> {
    let mut from: BTreeMap<JobId, Vec<(u32, NodeId)>> = BTreeMap::new();
    for m in migrations {
        let v = from.entry(m.job).or_default();
        if !v.iter().any(|(i, _)| *i == m.instance) {
            v.push((m.instance, m.from));
        }
    }
    from.retain(|&j, v| {
        let Some(after) = pools.job(j).map(|r| r.nodes) else {
            return false;
        };
        let mut before = after.clone();
        for &(i, n) in v.iter() {
            if let Some(x) = before.get_mut(i as usize) {
                *x = n;
            }
        }
        let mut after = after;
        before.sort_unstable();
        after.sort_unstable();
        before != after
    });
    from
}

/// The pools that admit the head, by index (`false`: not admitted).
fn admitted(pools: &PoolSet, trial: &HeadTrial<'_>) -> Vec<bool> {
    pools
        .pools()
        .enumerate()
        .map(|(p, spec)| {
            spec.modelled
                && spec.admits(trial.gpu_type, trial.shape.gpus)
                && pools.engine(p).is_some()
        })
        .collect()
}

/// A node's instances: (job, GPUs, the job's end).
type Holding = Vec<(JobId, u32, f64)>;

/// `floor(free / g)` of a node of `cap` GPUs holding `instances` (job,
/// GPUs) at instant `t`: an instance holds its GPUs while its job's end is
/// later than `t`.
fn node_fit(cap: u32, g: u32, instances: &[(JobId, u32, f64)], t: f64) -> i64 {
    let used: u32 = instances
        .iter()
        .filter(|(_, _, e)| *e > t)
        .map(|(_, gpus, _)| gpus)
        .sum();
    i64::from(cap.saturating_sub(used) / g)
}

/// Is the moves' change of the head's fit, `sum_n fit(after_n, t) -
/// fit(before_n, t)` per pool over the touched `nodes` (pool, capacity,
/// instances before and after), below zero at some instant from `now` on:
/// at `now`, or at an instance's end after it (the instants where a fit
/// can change; an end that is not finite never comes)? One sweep over the
/// instances' ends in order, each node's two fits kept as its GPUs free, so
/// the check costs `O(E log E + E * pools)` for `E` instances (issue #11:
/// evaluated afresh at every instant it was quadratic in the nodes a trial
/// touched; the instants are the sorted ends themselves, not a list sorted
/// apart).
fn lowers_fit(nodes: &[(usize, u32, Holding, Holding)], g: u32, pools: usize, now: f64) -> bool {
    // used GPUs before and after, per touched node, all held (an end that
    // is not a number holds nothing, as in `node_fit`)
    let holds = |e: f64| !e.is_nan();
    let mut used: Vec<[u32; 2]> = nodes
        .iter()
        .map(|(_, _, b, a)| [b, a].map(|h| h.iter().filter(|x| holds(x.2)).map(|x| x.1).sum()))
        .collect();
    let fit = |cap: u32, used: u32| i64::from(cap.saturating_sub(used) / g);
    let mut d = vec![0i64; pools];
    for ((p, cap, _, _), u) in nodes.iter().zip(&used) {
        d[*p] += fit(*cap, u[1]) - fit(*cap, u[0]);
    }
    // every instance's end: (end, node, side: 0 before / 1 after, GPUs)
    let mut ends: Vec<(f64, usize, usize, u32)> = Vec::new();
    for (i, (_, _, before, after)) in nodes.iter().enumerate() {
        for (side, h) in [before, after].into_iter().enumerate() {
            ends.extend(
                h.iter()
                    .filter(|x| holds(x.2))
                    .map(|&(_, gpus, e)| (e, i, side, gpus)),
            );
        }
    }
    ends.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let mut next = ends.iter().peekable();
    let mut t = now;
    loop {
        // an instance holds its GPUs while its end is later than `t`
        while let Some(&(_, i, side, gpus)) = next.next_if(|x| x.0 <= t) {
            let (p, cap) = (nodes[i].0, nodes[i].1);
            let sign = if side == 1 { 1 } else { -1 };
            d[p] -= sign * fit(cap, used[i][side]);
            used[i][side] -= gpus;
            d[p] += sign * fit(cap, used[i][side]);
        }
        if d.iter().any(|&x| x < 0) {
            return true;
        }
        // the next instant: the earliest end not come yet (after `t`)
        match next.peek() {
            Some(x) if x.0.is_finite() => t = x.0,
            _ => return false,
        }
    }
}

/// Does the open trial (its moved jobs `moved`) make the head's reservation
/// later than with no move? See [`hold_for_head`] for the method.
fn delays_head(
    pools: &PoolSet,
    trial: &HeadTrial<'_>,
    ends: &Ends,
    moved: &BTreeMap<JobId, Vec<(u32, NodeId)>>,
    timeline: &Timeline,
    on_time: &mut Option<OnTime>,
) -> bool {
    let g = trial.shape.gpus.max(1);
    let w = i64::from(trial.shape.instances);
    let ok = &timeline.admitted;
    // The nodes whose fit the moves can change: every node a moved job is
    // on, before or after (a requeue restarts all its instances).
    let mut touched: Vec<(usize, NodeId)> = Vec::new();
    for (&j, from) in moved {
        let Some(r) = pools.job(j) else { continue };
        for &n in r.nodes.iter().chain(from.iter().map(|(_, n)| n)) {
            if let Some((p, local)) = pools.pool_of(n) {
                if ok[p] {
                    touched.push((p, local));
                }
            }
        }
    }
    touched.sort_unstable();
    touched.dedup();
    let end_after = |j: JobId| {
        if moved.contains_key(&j) {
            (trial.end_if_moved)(j)
        } else {
            ends.get(j)
        }
    };
    // Each touched node's instances before and after, with their ends.
    let mut nodes: Vec<(usize, u32, Holding, Holding)> = Vec::with_capacity(touched.len());
    for &(p, n) in &touched {
        let Some(e) = pools.engine(p) else { continue };
        let before: Holding = e
            .node_before_trial(n)
            .instances()
            .map(|(i, gpus)| (i.job, gpus, ends.get(i.job)))
            .collect();
        let after: Holding = e
            .node(n)
            .instances()
            .map(|(i, gpus)| (i.job, gpus, end_after(i.job)))
            .collect();
        nodes.push((p, e.occupancy().capacity(), before, after));
    }
    let delta = |t: f64| -> Vec<i64> {
        let mut d = vec![0i64; ok.len()];
        for (p, cap, before, after) in &nodes {
            d[*p] += node_fit(*cap, g, after, t) - node_fit(*cap, g, before, t);
        }
        d
    };
    if !lowers_fit(&nodes, g, ok.len(), trial.now) {
        // The moves lower the head's fit at no instant: it cannot be later.
        return false;
    }
    if !timeline.complete(pools) {
        // The head's reservation is not known yet (its fit over time is
        // being built, `TIMELINE_BUILD_NODES` at a time): taken as late.
        return true;
    }
    let at = on_time.get_or_insert_with(|| timeline.on_time(w, trial.now));
    if !at.t0.is_finite() {
        // As far as the known ends say, the head never fits: no move can
        // make it later.
        return false;
    }
    let d = delta(at.t0);
    let best_after = at
        .fit
        .iter()
        .zip(&d)
        .filter_map(|(f, d)| f.map(|f| f + d))
        .max()
        .unwrap_or(i64::MIN);
    best_after < w
}

/// A waiting job as the gate [`MoveWhen::Starts`] sees it: its shape and
/// the GPU type it names (`None`: any).
///
/// [`MoveWhen::Starts`]: crate::placement::worth::MoveWhen::Starts
#[derive(Clone, Copy, Debug)]
pub struct WaitingJob<'a> {
    pub shape: JobShape,
    pub gpu_type: Option<&'a str>,
}

/// Does a `job` fit `pools` now, as Slurm would place it: in one modelled
/// pool that admits it, `instances` nodes each with `gpus` free GPUs
/// (`sum_n floor(free_n / g) >= w`, the physical fit of [`reservation`];
/// `O(G)` per pool, [`Occupancy::fit`]).
pub fn fits_now(pools: &PoolSet, job: &WaitingJob<'_>) -> bool {
    pools.pools().enumerate().any(|(p, spec)| {
        spec.modelled
            && spec.admits(job.gpu_type, job.shape.gpus)
            && pools.engine(p).is_some_and(|e| {
                e.occupancy().fit(job.shape.gpus) >= u64::from(job.shape.instances)
            })
    })
}

/// `waiting`, one per shape and GPU type: the first of each, in order (the
/// jobs [`Blocked::before`] looks at).
pub fn distinct_waiting<'a>(
    waiting: impl IntoIterator<Item = WaitingJob<'a>>,
) -> Vec<WaitingJob<'a>> {
    let mut out: Vec<WaitingJob<'a>> = Vec::new();
    for w in waiting {
        if !out
            .iter()
            .any(|x| x.shape == w.shape && x.gpu_type == w.gpu_type)
        {
            out.push(w);
        }
    }
    out
}

/// The waiting jobs a Compact could help, taken before it: those that do
/// not fit now ([`fits_now`]), one per shape and GPU type
/// ([`distinct_waiting`]).
#[derive(Clone, Debug)]
pub struct Blocked<'a>(Vec<WaitingJob<'a>>);

impl<'a> Blocked<'a> {
    pub fn before(pools: &PoolSet, waiting: impl IntoIterator<Item = WaitingJob<'a>>) -> Self {
        let mut out = distinct_waiting(waiting);
        out.retain(|w| !fits_now(pools, w));
        Self(out)
    }

    /// Could moves start one of these jobs at all? Compact moves instances
    /// inside a pool, so a pool's free GPUs stay as they are, and it moves
    /// only movable jobs off the nodes it may lower at all (never off a full
    /// slotted node without guests): a job needs a pool that admits it with
    /// at least `instances` times `gpus` free GPUs (`floor(free / g) >= w`)
    /// and room for its instances on the GPUs Compact could free
    /// (`sum_n floor(lowerable_n / g) >= w`,
    /// [`CompassEngine::lowerable_fit`]; the jobs held still for tidying
    /// count movable there, as the gate's trial releases them:
    /// [`PoolSet::set_tidy_hold`]). Both bound the fit `sum_n floor(free_n
    /// / g)` whatever the moves, so `false` is exact: no Compact makes
    /// [`Blocked::start_after`] true (checked after every event of the
    /// property test `an_undone_compact_leaves_the_engine_as_it_was`);
    /// `O(G)` per pool and blocked job, no Compact tried (issue #11). In
    /// the plugin bench at 1,000 nodes it lets 74 of the 8,972 trials
    /// through that the GPUs-free-or-movable bound
    /// ([`Occupancy::reach_fit`]) let through, the 47 that started a job
    /// among them.
    ///
    /// [`Occupancy::reach_fit`]: crate::placement::Occupancy::reach_fit
    /// [`CompassEngine::lowerable_fit`]: crate::placement::compass::CompassEngine::lowerable_fit
    pub fn may_start_after_moves(&self, pools: &PoolSet) -> bool {
        !self.chances(pools).is_empty()
    }

    /// The chances [`Blocked::may_start_after_moves`] finds: each blocked
    /// job and pool that admits it where the bound lets moves start it, with
    /// the pool's fit and room for the job's width ([`Chance`]).
    pub fn chances(&self, pools: &PoolSet) -> Vec<Chance> {
        let mut out = Vec::new();
        for w in &self.0 {
            for (p, spec) in pools.pools().enumerate() {
                if !spec.modelled || !spec.admits(w.gpu_type, w.shape.gpus) {
                    continue;
                }
                let Some(e) = pools.engine(p) else { continue };
                let occ = e.occupancy();
                let g = u64::from(w.shape.gpus.max(1));
                let room = (occ.free_gpus() / g).min(e.lowerable_fit(w.shape.gpus));
                if room >= u64::from(w.shape.instances) {
                    out.push(Chance {
                        place: p,
                        shape: w.shape,
                        fit: occ.fit(w.shape.gpus),
                        room,
                    });
                }
            }
        }
        out
    }

    /// The gate [`MoveWhen::Starts`] (issue #10: every move pays for
    /// itself): after Compact's moves, does one of these jobs fit? A
    /// waiting job that already fitted, or still does not, gains nothing
    /// from the moves; a Compact that helps none of them is not made. The
    /// moved jobs count at their new nodes (their old GPUs free once the
    /// requeues land, which the plugin waits for before it places anyone).
    ///
    /// [`MoveWhen::Starts`]: crate::placement::worth::MoveWhen::Starts
    pub fn start_after(&self, pools: &PoolSet) -> bool {
        self.0.iter().any(|w| fits_now(pools, w))
    }
}

/// [`Blocked::start_after`] on two states: do Compact's moves, which took
/// `before` to `after`, give some waiting job room it has not in `before`?
pub fn moves_let_a_job_start(
    before: &PoolSet,
    after: &PoolSet,
    waiting: &[WaitingJob<'_>],
) -> bool {
    Blocked::before(before, waiting.iter().copied()).start_after(after)
}

/// A waiting job that moves might start ([`Blocked::chances`]): the
/// job's shape, the place its bound counts (a pool of the plugin's pool
/// set; the whole cluster in the simulator, whose bound sums its pools),
/// and there, for the job's width `g`, the fit now (`sum_n floor(free_n /
/// g)`) and the room moves could make at most (`min(floor(free / g),
/// sum_n floor(lowerable_n / g))`, at least the job's instances).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chance {
    pub place: usize,
    pub shape: JobShape,
    pub fit: u64,
    pub room: u64,
}

/// How long the gate trusts a trial that started no waiting job
/// ([`TrialMemory`]), seconds.
pub const TRIAL_MEMORY_S: u64 = 60;

/// At most this many failed chances are remembered ([`TrialMemory`]).
pub const TRIAL_MEMORY_LEN: usize = 32;

/// The `pays` gate's memory of its trials that started no waiting job
/// (issue #11). The room bound ([`Blocked::may_start_after_moves`]) is
/// necessary, not sufficient: on a mixed cluster it let through 3,244
/// trials in 20,000 departures of the plugin bench, 92% of them starting
/// nobody, each a Compact of every pool, undone, at 66 us. A chance is
/// not tried again while a trial of the last [`TRIAL_MEMORY_S`] seconds
/// covers it: one that failed for a chance at the same place and width
/// whose job was no wider, with a fit and a room no smaller (so nothing
/// says that there is more to gain now). A trial that starts a job clears
/// the memory. This is not exact (the nodes' layout may change under the
/// same fit and room), so a trial may come up to [`TRIAL_MEMORY_S`]
/// seconds later than without the memory; the simulator keeps the same
/// memory (`Sim::hold_unless_moves_start`), so its figures count that
/// delay. At most [`TRIAL_MEMORY_LEN`] chances are kept (the oldest go
/// first), so the cost is bounded.
#[derive(Clone, Debug, Default)]
pub struct TrialMemory {
    /// The chances of the failed trials, with when they were tried.
    failed: Vec<(u64, Chance)>,
}

impl TrialMemory {
    /// Is one of `chances` worth a trial at `now`: not covered by a failed
    /// one?
    pub fn any_new(&self, chances: &[Chance], now: u64) -> bool {
        chances.iter().any(|c| !self.covers(c, now))
    }

    fn covers(&self, c: &Chance, now: u64) -> bool {
        self.failed.iter().any(|(at, f)| {
            recent(*at, now)
                && f.place == c.place
                && f.shape.gpus == c.shape.gpus
                && f.shape.instances <= c.shape.instances
                && f.fit >= c.fit
                && f.room >= c.room
        })
    }

    /// A trial made for `chances` at `now` started no waiting job.
    pub fn failed(&mut self, chances: &[Chance], now: u64) {
        self.failed.retain(|(at, _)| recent(*at, now));
        for c in chances {
            if !self.covers(c, now) {
                self.failed.push((now, *c));
            }
        }
        let over = self.failed.len().saturating_sub(TRIAL_MEMORY_LEN);
        self.failed.drain(..over);
    }

    /// A trial started a waiting job: every chance is new again.
    pub fn clear(&mut self) {
        self.failed.clear();
    }
}

/// Is a trial made at `at` remembered at `now` ([`TRIAL_MEMORY_S`]; a
/// clock that went back forgets it)?
fn recent(at: u64, now: u64) -> bool {
    (at..at.saturating_add(TRIAL_MEMORY_S)).contains(&now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterSpec, JobRequest};
    use crate::placement::compass::CompassConfig;
    use crate::placement::pools::NodeGpus;

    fn pools(nodes: u32) -> PoolSet {
        let config = CompassConfig {
            compact: false,
            ..CompassConfig::default()
        };
        PoolSet::homogeneous(ClusterSpec::new(nodes, 8).unwrap(), config)
    }

    #[test]
    fn a_failed_trial_covers_no_wider_chances_with_no_more_fit_or_room() {
        let chance = |place, w, g, fit, room| Chance {
            place,
            shape: JobShape::new(w, g),
            fit,
            room,
        };
        let mut memory = TrialMemory::default();
        let failed = chance(0, 2, 8, 1, 2);
        assert!(memory.any_new(&[failed], 100), "nothing remembered yet");
        memory.failed(&[failed], 100);
        // Covered: the same chance, a wider job, less fit or room.
        for c in [
            failed,
            chance(0, 3, 8, 1, 2),
            chance(0, 2, 8, 0, 2),
            chance(0, 4, 8, 0, 1),
        ] {
            assert!(!memory.any_new(&[c], 100 + TRIAL_MEMORY_S - 1), "{c:?}");
        }
        // New: a narrower job, more fit, more room, another width or place,
        // or after TRIAL_MEMORY_S seconds (or a clock that went back).
        for c in [
            chance(0, 1, 8, 1, 2),
            chance(0, 2, 8, 2, 2),
            chance(0, 2, 8, 1, 3),
            chance(0, 2, 4, 1, 2),
            chance(1, 2, 8, 1, 2),
        ] {
            assert!(memory.any_new(&[c], 101), "{c:?}");
            assert!(
                memory.any_new(&[failed, c], 101),
                "one new chance is enough"
            );
        }
        assert!(memory.any_new(&[failed], 100 + TRIAL_MEMORY_S));
        assert!(memory.any_new(&[failed], 99));
        // A trial that starts a job clears the memory.
        memory.clear();
        assert!(memory.any_new(&[failed], 101));
        // Bounded: the oldest chances go first.
        let many: Vec<Chance> = (0..TRIAL_MEMORY_LEN + 5)
            .map(|p| chance(p, 2, 8, 1, 2))
            .collect();
        memory.failed(&many, 200);
        assert_eq!(memory.failed.len(), TRIAL_MEMORY_LEN);
        assert!(memory.any_new(&many[..1], 201));
        assert!(!memory.any_new(&many[many.len() - 1..], 201));
    }

    #[test]
    fn moves_count_only_when_a_waiting_job_gains_room() {
        // n0 and n1 each half used by a 1 x 4 job: a 1 x 8 job does not
        // fit; after a move of job 2 onto n0 it does.
        let mut before = pools(2);
        before.adopt(&JobRequest::new(1, 1, 4), &[0]).unwrap();
        before.adopt(&JobRequest::new(2, 1, 4), &[1]).unwrap();
        let mut after = pools(2);
        after.adopt(&JobRequest::new(1, 1, 4), &[0]).unwrap();
        after.adopt(&JobRequest::new(2, 1, 4), &[0]).unwrap();
        let whole = WaitingJob {
            shape: JobShape::new(1, 8),
            gpu_type: None,
        };
        let half = WaitingJob {
            shape: JobShape::new(1, 4),
            gpu_type: None,
        };
        assert!(!fits_now(&before, &whole));
        assert!(fits_now(&after, &whole));
        assert!(moves_let_a_job_start(&before, &after, &[half, whole]));
        assert!(
            !moves_let_a_job_start(&before, &after, &[half]),
            "a 1 x 4 job fits either way: the move buys it nothing"
        );
        assert!(!moves_let_a_job_start(&before, &after, &[]));
        let two_whole = WaitingJob {
            shape: JobShape::new(2, 8),
            gpu_type: None,
        };
        assert!(
            !moves_let_a_job_start(&before, &after, &[two_whole]),
            "a 2 x 8 job fits neither way"
        );
        // Without trying a Compact: 8 GPUs free in all could give a 1 x 8
        // job room, never a 2 x 8 one; a job that fits now is not blocked.
        let may = |jobs: &[WaitingJob<'_>]| {
            Blocked::before(&before, jobs.iter().copied()).may_start_after_moves(&before)
        };
        assert!(may(&[whole]));
        assert!(!may(&[two_whole]));
        assert!(!may(&[half]), "it fits now: nothing to gain");
        assert!(may(&[two_whole, whole]));
        // The same GPUs free, but job 2 may not move: only moving job 1
        // empties a node. Held still for tidying only, job 1 counts
        // movable (the gate's trial releases it); not movable, no move
        // empties a node, and the bound says so without a trial.
        let mut pinned = pools(2);
        pinned.adopt(&JobRequest::new(1, 1, 4), &[0]).unwrap();
        let mut two = JobRequest::new(2, 1, 4);
        two.movable = false;
        pinned.adopt(&two, &[1]).unwrap();
        pinned.set_tidy_hold(&[JobId(1)], true);
        let blocked = Blocked::before(&pinned, [whole]);
        assert!(
            blocked.may_start_after_moves(&pinned),
            "held for tidying only"
        );
        pinned.set_movable(JobId(1), false).unwrap();
        assert!(!blocked.may_start_after_moves(&pinned));
    }

    #[test]
    fn the_reservation_frees_gpus_where_jobs_run_at_their_ends() {
        // n0: a 1 x 4 job ending at 50; n1: a 1 x 8 job ending at 20.
        let mut p = pools(2);
        p.adopt(&JobRequest::new(1, 1, 4), &[0]).unwrap();
        p.adopt(&JobRequest::new(2, 1, 8), &[1]).unwrap();
        let occ = [p.engine(0).map(|e| e.occupancy())];
        let ends = [(20.0, JobId(2)), (50.0, JobId(1))];
        let at = |w, g| reservation(&occ, ends, JobShape::new(w, g), 10.0);
        assert_eq!(at(1, 4).t_res, 10.0, "n0's free half fits now");
        assert_eq!(at(1, 8).t_res, 20.0);
        assert_eq!(at(2, 8).t_res, 50.0);
        assert_eq!(at(3, 8).t_res, f64::INFINITY);
        // A job missing from the ends never frees its GPUs.
        assert_eq!(
            reservation(&occ, [(20.0, JobId(2))], JobShape::new(2, 8), 10.0).t_res,
            f64::INFINITY
        );
        // A pool that does not admit the head counts for nothing.
        assert_eq!(
            reservation(&[None], ends, JobShape::new(1, 1), 10.0).t_res,
            f64::INFINITY
        );
    }

    #[test]
    fn a_head_that_never_fits_leaves_compact_unguarded() {
        // Mixed pools: the head names a GPU type no pool has; a plain
        // Compact runs (two half-used nodes become one full node).
        let nodes = vec![NodeGpus::new(8, Some("a100")); 2];
        let config = CompassConfig {
            compact: false,
            ..CompassConfig::default()
        };
        let mut p = PoolSet::new(&nodes, config);
        p.adopt(&JobRequest::new(1, 1, 4), &[0]).unwrap();
        p.adopt(&JobRequest::new(2, 1, 4), &[1]).unwrap();
        let mut plain = p.clone();
        let expected = plain.compact();
        assert_eq!(expected.len(), 1);
        let mut ends = Ends::default();
        ends.set(JobId(1), 100.0);
        ends.set(JobId(2), 200.0);
        let later = |_: JobId| 1000.0;
        let trial = HeadTrial {
            shape: JobShape::new(1, 8),
            gpu_type: Some("h100"),
            now: 0.0,
            end_if_moved: &later,
            max_trials: 8,
            may_move: None,
            gain: None,
        };
        let done = hold_for_head(&mut p, &trial, &mut ends);
        assert_eq!(done.verdict, HeadVerdict::Free);
        assert_eq!(done.migrations, expected);
        assert_eq!(p.snapshot(), plain.snapshot());
    }

    /// A waiting head of two whole nodes at time 0, eight trials at most,
    /// every job free to move, every move worth keeping.
    fn two_node_head(end_if_moved: &dyn Fn(JobId) -> f64) -> HeadTrial<'_> {
        HeadTrial {
            shape: JobShape::new(2, 8),
            gpu_type: None,
            now: 0.0,
            end_if_moved,
            max_trials: 8,
            may_move: None,
            gain: None,
        }
    }

    /// n0 and n1 half used (jobs 1 and 2, 1 x 4, ending at 100 and 200),
    /// n2 full (job 3, 1 x 8, ending at 50): Compact empties n0 or n1.
    fn two_half_nodes() -> (PoolSet, Ends) {
        let mut p = pools(3);
        p.adopt(&JobRequest::new(1, 1, 4), &[0]).unwrap();
        p.adopt(&JobRequest::new(2, 1, 4), &[1]).unwrap();
        p.adopt(&JobRequest::new(3, 1, 8), &[2]).unwrap();
        let mut ends = Ends::default();
        for (j, e) in [(1, 100.0), (2, 200.0), (3, 50.0)] {
            ends.set(JobId(j), e);
        }
        (p, ends)
    }

    #[test]
    fn moves_that_gain_nothing_end_the_guard_with_nothing_moved() {
        // Compact empties n0 or n1 (an empty node, where a 1 x 8 waiting job
        // would start). A trial that asks of the moves (`gain`, the gate's
        // "some waiting job starts") what they do not give stops there:
        // nothing moves and the head (2 x 8) is not looked at.
        let build = || two_half_nodes().0;
        let mut ends = two_half_nodes().1;
        let later = |_: JobId| 1000.0;
        let guard = |gain| HeadTrial {
            gain,
            ..two_node_head(&later)
        };
        let mut plain = build();
        let free = hold_for_head(&mut plain, &guard(None), &mut ends.clone());
        assert_eq!(free.verdict, HeadVerdict::Free);
        assert_eq!(free.migrations.len(), 1);
        // Moves that gain what is asked are kept as without the question.
        let empties = |p: &PoolSet| p.engine(0).unwrap().occupancy().fit(8) >= 1;
        let mut p = build();
        let done = hold_for_head(&mut p, &guard(Some(&empties)), &mut ends.clone());
        assert_eq!(done.verdict, HeadVerdict::Free);
        assert_eq!(done.migrations, free.migrations);
        assert_eq!(p.snapshot(), plain.snapshot());
        // Moves that do not: nothing moves, the engine as it was.
        let never = |_: &PoolSet| false;
        let mut p = build();
        let before = p.snapshot();
        let done = hold_for_head(&mut p, &guard(Some(&never)), &mut ends);
        assert_eq!(done.verdict, HeadVerdict::NoGain);
        assert!(done.migrations.is_empty());
        assert!(!done.walked, "the head is not looked at");
        assert_eq!(p.snapshot(), before);
        assert_eq!(p.engine(0).unwrap().open_trials(), 0);
    }

    #[test]
    fn moves_that_only_free_room_for_the_head_need_no_reservation() {
        // Compact empties n0 or n1. A moved job that ends when it would
        // have (here) can only bring a 2 x 8 head forward: the reservation
        // is not walked. One that restarts for longer holds its new node
        // past its old end: then it is.
        let build = || two_half_nodes().0;
        let mut ends = two_half_nodes().1;
        let longer = |_: JobId| 1000.0;
        let mut p = build();
        let trial = two_node_head(&longer);
        let done = hold_for_head(&mut p, &trial, &mut ends);
        assert_eq!(done.verdict, HeadVerdict::Free, "the head still gains");
        assert!(done.walked);
        let mut p = build();
        let known = ends.clone();
        let later = |j: JobId| known.get(j);
        let trial = two_node_head(&later);
        let done = hold_for_head(&mut p, &trial, &mut ends);
        assert_eq!(done.verdict, HeadVerdict::Free);
        assert_eq!(done.migrations.len(), 1);
        assert!(!done.walked);
        assert_eq!(p.engine(0).unwrap().open_trials(), 0);
    }

    #[test]
    fn a_new_heads_fit_over_time_is_built_in_parts_and_nothing_moves_until_it_is() {
        // The first case above, beside 600 full nodes whose jobs end late:
        // the head's fit over time covers 603 nodes, built
        // TIMELINE_BUILD_NODES per guarded Compact. Until it is complete,
        // moves that lower the head's fit at some instant are taken to
        // delay it (its reservation is not known yet): nothing moves. Then
        // the same Compact is free, as with every node known.
        let mut p = pools(603);
        let mut ends = Ends::default();
        for (j, n, e) in [(1, 0, 100.0), (2, 1, 200.0), (3, 2, 50.0)] {
            let g = if j == 3 { 8 } else { 4 };
            p.adopt(&JobRequest::new(j, 1, g), &[n]).unwrap();
            ends.set(JobId(j), e);
        }
        for n in 3..603 {
            let j = 100 + u64::from(n);
            p.adopt(&JobRequest::new(j, 1, 8), &[n]).unwrap();
            ends.set(JobId(j), 10_000.0);
        }
        let longer = |_: JobId| 1000.0;
        let trial = two_node_head(&longer);
        let parts = 603u32.div_ceil(TIMELINE_BUILD_NODES);
        assert!(parts > 1);
        for _ in 1..parts {
            let before = p.snapshot();
            let done = hold_for_head(&mut p, &trial, &mut ends);
            assert!(done.migrations.is_empty(), "{done:?}");
            assert_ne!(done.verdict, HeadVerdict::Free);
            assert_eq!(p.snapshot(), before);
        }
        let done = hold_for_head(&mut p, &trial, &mut ends);
        assert_eq!(done.verdict, HeadVerdict::Free, "the head still gains");
        assert_eq!(done.migrations.len(), 1);
        assert!(done.walked);
        assert_eq!(p.engine(0).unwrap().open_trials(), 0);
    }

    /// A head's fit over time as two lists, to compare two: each node's
    /// rises (pool, node, instants), and each instant's count of a node's
    /// rises then (instant, pool, node, count).
    type FitOverTime = (
        Vec<(usize, NodeId, Vec<f64>)>,
        Vec<(f64, usize, NodeId, u32)>,
    );

    fn fit_over_time(t: &Timeline) -> FitOverTime {
        let mut rises = Vec::new();
        for (p, of_pool) in t.rises.iter().enumerate() {
            for (n, r) in of_pool.iter().enumerate() {
                if !r.is_empty() {
                    rises.push((p, n as NodeId, r.clone()));
                }
            }
        }
        let order = t
            .order
            .iter()
            .map(|(&(Instant(e), p, n), &k)| (e, p, n, k))
            .collect();
        (rises, order)
    }

    #[test]
    fn a_heads_fit_over_time_left_behind_is_brought_up_to_date_when_it_comes_back() {
        // Heads of 1 x 8 and 1 x 4 on 200 nodes: both fits over time are
        // built; then 150 changes while only the 1 x 8 head is asked about.
        // The 1 x 4 head's fit falls at most TIMELINE_LAG changes behind
        // (less with `catch_up`), and when that head comes back it is the
        // fit built afresh on the nodes as they are.
        let mut p = pools(200);
        let mut ends = Ends::default();
        for n in 0..200u32 {
            let j = 1000 + u64::from(n);
            p.adopt(&JobRequest::new(j, 1, 2 + n % 5), &[n]).unwrap();
            ends.set(JobId(j), f64::from(100 + n % 37));
        }
        let never = |_: JobId| f64::INFINITY;
        let head = |g: u32| HeadTrial {
            shape: JobShape::new(1, g),
            ..two_node_head(&never)
        };
        // The guard's calls until the head's fit over time is built.
        let build = |ends: &mut Ends, p: &mut PoolSet, g: u32| {
            ends.sync(p, &head(g));
            while !ends.timelines[0].complete(p) {
                ends.sync(p, &head(g));
            }
        };
        // The head's fit over time built afresh on the pools as they are,
        // and its fit now.
        let afresh = |ends: &Ends, p: &PoolSet, g: u32| {
            let mut fresh = Ends {
                by_job: ends.by_job.clone(),
                ..Ends::default()
            };
            build(&mut fresh, &mut p.clone(), g);
            let t = &fresh.timelines[0];
            (fit_over_time(t), t.base.clone())
        };
        for g in [8, 4] {
            build(&mut ends, &mut p, g);
        }
        // Change `i`: node 7i's job ends, a new one takes it, a
        // neighbour's end moves.
        let change = |p: &mut PoolSet, ends: &mut Ends, i: u32| {
            let n = (i * 7) % 200;
            p.remove(JobId(1000 + u64::from(n))).unwrap();
            let j = 5000 + u64::from(i);
            p.adopt(&JobRequest::new(j, 1, 1 + i % 8), &[n]).unwrap();
            ends.set(JobId(j), f64::from(50 + i % 23));
            ends.set(JobId(1000 + u64::from((n + 1) % 200)), f64::from(400 + i));
        };
        let mut behind = 0;
        for i in 0..150u32 {
            change(&mut p, &mut ends, i);
            ends.sync(&mut p, &head(8));
            let lag = ends.log_end() - ends.timelines[1].seen;
            assert!(lag <= TIMELINE_LAG, "change {i}: {lag} behind");
            behind = behind.max(lag);
            if i % 40 == 39 {
                ends.catch_up(&p, 5);
            }
        }
        assert_eq!(behind, TIMELINE_LAG, "the lag bound was reached");
        assert!(
            ends.log.len() <= TIMELINE_LAG,
            "the log keeps only what is unseen"
        );
        ends.sync(&mut p, &head(4));
        let t = &ends.timelines[0];
        assert_eq!(t.g, 4);
        assert_eq!((fit_over_time(t), t.base.clone()), afresh(&ends, &p, 4));
        // Now the 1 x 8 head's falls behind; `catch_up` brings it up to
        // date in steps, and then it is the fit built afresh too (its fit
        // now is taken when it is the head again).
        for i in 150..170u32 {
            change(&mut p, &mut ends, i);
            ends.sync(&mut p, &head(4));
        }
        let lag = |ends: &Ends| ends.log_end() - ends.timelines[1].seen;
        let before = lag(&ends);
        assert!(before > 7, "{before} behind");
        ends.catch_up(&p, 7);
        assert_eq!(lag(&ends), before - 7);
        assert_eq!(
            ends.log.len(),
            before - 7,
            "what all have seen is forgotten"
        );
        ends.catch_up(&p, usize::MAX);
        assert!(ends.log.is_empty());
        assert_eq!(fit_over_time(&ends.timelines[1]), afresh(&ends, &p, 8).0);
    }

    #[test]
    fn ends_are_kept_and_forgotten() {
        let mut ends = Ends::default();
        ends.set(JobId(1), 30.0);
        ends.set(JobId(2), 10.0);
        ends.set(JobId(3), f64::INFINITY);
        ends.set(JobId(1), 5.0);
        assert_eq!(ends.len(), 2);
        assert_eq!((ends.get(JobId(1)), ends.get(JobId(2))), (5.0, 10.0));
        assert_eq!(ends.get(JobId(3)), f64::INFINITY);
        ends.remove(JobId(1));
        assert_eq!(ends.len(), 1);
        assert_eq!(ends.get(JobId(1)), f64::INFINITY);
    }

    mod sweep {
        use super::super::*;
        use proptest::prelude::*;

        /// One touched node: pool, then instances before and after as (GPUs,
        /// end index into `END_CHOICES`).
        type NodeCase = (usize, Vec<(u32, usize)>, Vec<(u32, usize)>);

        const END_CHOICES: [f64; 6] = [5.0, 10.0, 10.0, 20.0, 35.0, f64::INFINITY];

        fn holding(v: &[(u32, usize)]) -> Holding {
            v.iter()
                .enumerate()
                .map(|(k, &(gpus, e))| (JobId(k as u64), gpus, END_CHOICES[e]))
                .collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]
            /// The sweep answers as `node_fit` evaluated afresh at every
            /// instant (the check `delays_head` made before, issue #11).
            #[test]
            fn lowers_fit_matches_every_instant_afresh(
                g in 1u32..=8,
                now in prop_oneof![Just(0.0), Just(10.0), Just(12.0)],
                cases in proptest::collection::vec(
                    (
                        0usize..3,
                        proptest::collection::vec((1u32..=8, 0usize..6), 0..4),
                        proptest::collection::vec((1u32..=8, 0usize..6), 0..4),
                    ),
                    1..6,
                ),
            ) {
                let cases: Vec<NodeCase> = cases;
                let nodes: Vec<(usize, u32, Holding, Holding)> = cases
                    .iter()
                    .map(|(p, b, a)| (*p, 8, holding(b), holding(a)))
                    .collect();
                let mut times: Vec<f64> = vec![now];
                times.extend(
                    nodes
                        .iter()
                        .flat_map(|(_, _, b, a)| b.iter().chain(a).map(|x| x.2))
                        .filter(|t| t.is_finite() && *t > now),
                );
                times.sort_by(f64::total_cmp);
                times.dedup();
                let afresh = times.iter().any(|&t| {
                    let mut d = [0i64; 3];
                    for (p, cap, before, after) in &nodes {
                        d[*p] += node_fit(*cap, g, after, t) - node_fit(*cap, g, before, t);
                    }
                    d.iter().any(|&x| x < 0)
                });
                prop_assert_eq!(lowers_fit(&nodes, g, 3, now), afresh);
            }
        }
    }
}
