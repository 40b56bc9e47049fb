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

use crate::model::{JobId, JobShape, NodeId};
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

/// The waiting head and what is known of the running jobs, for
/// [`hold_for_head`].
pub struct HeadTrial<'a> {
    /// The head's shape and the GPU type it names (`None`: any).
    pub shape: JobShape,
    pub gpu_type: Option<&'a str>,
    /// Now, seconds (the ends' clock).
    pub now: f64,
    /// A running job's expected end where it is (`INFINITY`: unknown, no
    /// time limit).
    pub end: &'a dyn Fn(JobId) -> f64,
    /// Its expected end if Compact moves it now (a requeue restarts it).
    pub end_if_moved: &'a dyn Fn(JobId) -> f64,
    /// Trials at most (each holds at least one more job still); past it
    /// the verdict is [`HeadVerdict::Skip`].
    pub max_trials: usize,
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
}

/// Which jobs Compact must hold still so that its moves do not make the
/// waiting head's reservation ([`reservation`], in the pools that admit the
/// head) later than with no move at all. Compact runs on clones of `pools`
/// only. A job counts as moved when its nodes change (a move inside a node
/// is no requeue); a moved job frees its GPUs at its new nodes at
/// `end_if_moved`. If the unheld trial delays the head, the jobs it moved
/// are held still and Compact is tried again, until the head is on time
/// ([`HeadVerdict::Hold`]), or nothing new moves or `max_trials` is reached
/// ([`HeadVerdict::Skip`]: when in doubt, nothing moves, Slurm's own
/// behaviour).
pub fn hold_for_head(pools: &PoolSet, trial: &HeadTrial<'_>) -> HeadVerdict {
    let on_time = head_start(pools, trial, &[]);
    let mut hold: Vec<JobId> = Vec::new();
    for _ in 0..trial.max_trials.max(1) {
        let mut fork = pools.clone();
        for &k in &hold {
            // A held job was movable in the trial that moved it.
            let _ = fork.set_movable(k, false);
        }
        let migrations = fork.compact();
        let mut moved: Vec<JobId> = migrations.iter().map(|m| m.job).collect();
        moved.sort_unstable();
        moved.dedup();
        moved.retain(|&j| nodes_of(pools, j) != nodes_of(&fork, j));
        if moved.is_empty() || head_start(&fork, trial, &moved) <= on_time {
            return if hold.is_empty() {
                HeadVerdict::Free
            } else {
                HeadVerdict::Hold(hold)
            };
        }
        let before = hold.len();
        for j in moved {
            if !hold.contains(&j) {
                hold.push(j);
            }
        }
        if hold.len() == before {
            return HeadVerdict::Skip;
        }
    }
    HeadVerdict::Skip
}

/// A job's instance nodes (global ids, sorted); empty when not in the model.
fn nodes_of(pools: &PoolSet, job: JobId) -> Vec<NodeId> {
    let mut n = pools.job(job).map(|r| r.nodes).unwrap_or_default();
    n.sort_unstable();
    n
}

/// The head's reservation in `pools`, with `moved` jobs ending at
/// `end_if_moved`.
fn head_start(pools: &PoolSet, trial: &HeadTrial<'_>, moved: &[JobId]) -> f64 {
    let occ: Vec<Option<&Occupancy>> = pools
        .pools()
        .enumerate()
        .map(|(p, spec)| {
            (spec.modelled && spec.admits(trial.gpu_type, trial.shape.gpus))
                .then(|| pools.engine(p).map(|e| e.occupancy()))
                .flatten()
        })
        .collect();
    let mut ends: Vec<(f64, JobId)> = occ
        .iter()
        .flatten()
        .flat_map(|o| o.jobs().map(|r| r.request.id))
        .map(|j| {
            let e = if moved.contains(&j) {
                (trial.end_if_moved)(j)
            } else {
                (trial.end)(j)
            };
            (e, j)
        })
        .filter(|(e, _)| e.is_finite())
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    ends.dedup_by_key(|x| x.1);
    reservation(&occ, ends, trial.shape, trial.now).t_res
}
