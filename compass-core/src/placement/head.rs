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

use crate::model::{JobId, JobShape, Migration, NodeId};
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

/// A Compact run under [`hold_for_head`].
#[derive(Clone, Debug)]
pub struct GuardedCompact {
    pub verdict: HeadVerdict,
    /// The pools after the Compact the verdict allows (held jobs movable
    /// again), to replace the caller's. `None` for [`HeadVerdict::Skip`],
    /// and for [`HeadVerdict::Free`] when nothing was tried (the head never
    /// fits as far as the ends say): the caller runs Compact itself.
    pub compacted: Option<PoolSet>,
    /// Its migrations (global node ids).
    pub migrations: Vec<Migration>,
}

/// Compact on a copy of `pools`, holding still the jobs it must so that
/// its moves do not make the waiting head's reservation ([`reservation`],
/// in the pools that admit the head) later than with no move at all. A job
/// counts as moved when its nodes change (a move inside a node is no
/// requeue); a moved job frees its GPUs at its new nodes at
/// `end_if_moved`. If the unheld trial delays the head, the jobs it moved
/// are held still and Compact is tried again on a new copy, until the head
/// is on time ([`HeadVerdict::Hold`]), or nothing new moves or
/// `max_trials` is reached ([`HeadVerdict::Skip`]: when in doubt, nothing
/// moves, Slurm's own behaviour). The accepted trial is returned, so the
/// caller runs no Compact of its own.
pub fn hold_for_head(pools: &PoolSet, trial: &HeadTrial<'_>) -> GuardedCompact {
    let on_time = head_start(pools, trial, &[]);
    if on_time.is_infinite() {
        // As far as the known ends say, the head never fits: no move can
        // make it later, and nothing is tried.
        return GuardedCompact {
            verdict: HeadVerdict::Free,
            compacted: None,
            migrations: Vec::new(),
        };
    }
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
            for &k in &hold {
                let _ = fork.set_movable(k, true);
            }
            return GuardedCompact {
                verdict: if hold.is_empty() {
                    HeadVerdict::Free
                } else {
                    HeadVerdict::Hold(hold)
                },
                compacted: Some(fork),
                migrations,
            };
        }
        let before = hold.len();
        for j in moved {
            if !hold.contains(&j) {
                hold.push(j);
            }
        }
        if hold.len() == before {
            break;
        }
    }
    GuardedCompact {
        verdict: HeadVerdict::Skip,
        compacted: None,
        migrations: Vec::new(),
    }
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
/// (`sum_n floor(free_n / g) >= w`, the physical fit of [`reservation`]).
pub fn fits_now(pools: &PoolSet, job: &WaitingJob<'_>) -> bool {
    let g = job.shape.gpus.max(1);
    pools.pools().enumerate().any(|(p, spec)| {
        spec.modelled
            && spec.admits(job.gpu_type, job.shape.gpus)
            && pools.engine(p).is_some_and(|e| {
                let occ = e.occupancy();
                let fit: u64 = (0..occ.spec().nodes)
                    .map(|n| u64::from(occ.free(n) / g))
                    .sum();
                fit >= u64::from(job.shape.instances)
            })
    })
}

/// The gate [`MoveWhen::Starts`] (issue #10: every move pays for itself):
/// do Compact's moves, which took `before` to `after`, let some waiting
/// job start, that is, give one room ([`fits_now`]) it has not in
/// `before`? A waiting job that already fits, or still does not, gains
/// nothing from the moves; a Compact that helps none of them is not made.
/// The moved jobs count at their new nodes (their old GPUs free once the
/// requeues land, which the plugin waits for before it places anyone).
///
/// [`MoveWhen::Starts`]: crate::placement::worth::MoveWhen::Starts
pub fn moves_let_a_job_start(
    before: &PoolSet,
    after: &PoolSet,
    waiting: &[WaitingJob<'_>],
) -> bool {
    waiting
        .iter()
        .any(|w| !fits_now(before, w) && fits_now(after, w))
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
        // Mixed pools: the head names a GPU type no pool has.
        let nodes = vec![NodeGpus::new(8, Some("a100")); 2];
        let p = PoolSet::new(&nodes, CompassConfig::default());
        let end = |_: JobId| 100.0;
        let trial = HeadTrial {
            shape: JobShape::new(1, 8),
            gpu_type: Some("h100"),
            now: 0.0,
            end: &end,
            end_if_moved: &end,
            max_trials: 8,
        };
        let done = hold_for_head(&p, &trial);
        assert_eq!(done.verdict, HeadVerdict::Free);
        assert!(done.compacted.is_none() && done.migrations.is_empty());
    }
}
