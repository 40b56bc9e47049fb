//! The gate `move_when` (`--move-when`, the select plugin's
//! `select.move_when`) as both simulators apply it: the placement simulator
//! ([`super::simulate`]) and the policy simulator
//! ([`super::budgets::run_budgets`]). The rule itself (which running job
//! may move, and whether a tidying move pays) is
//! [`crate::placement::worth`]; this module holds the decision made at one
//! event on top of it ([`decide`]: the `starts` / `pays` trial on forks of
//! the policy, with the jobs held for tidying) and the state the gate keeps
//! between events ([`GateState`]), so that the two simulators decide alike.
//! Each simulator supplies what only it knows: its waiting jobs, its running
//! movable jobs, its policy's forks and what a job's move is worth.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use crate::clock::Seconds;
use crate::error::Result;
use crate::placement::head::{Chance, TrialMemory};
use crate::placement::worth::{
    release_turn, tidy_turn, MigrationRule, MoveCandidate, MoveWhen, RunHistory, TIDY_TRIALS,
};

use super::{replay_time_limit_for, time_limit_for, RemainingRun};

/// What the gate decided for one event ([`decide`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Gate {
    /// The jobs to hold still for the event (`None`: only the caller's).
    pub hold: Option<Vec<usize>>,
    /// The gate closed on moves (counted in `compact_no_gain`).
    pub no_gain: bool,
    /// Under [`MoveWhen::Pays`], the jobs held for tidying from now on
    /// (`None`: as they are).
    pub tidy_held: Option<Vec<usize>>,
}

impl Gate {
    /// No trial was made: nothing more is held for the event, and the jobs
    /// held for tidying stay held (the plugin tries no Compact while the
    /// gate is closed, and keeps them).
    pub fn untried() -> Self {
        Self::default()
    }
}

/// Does the gate try an event's Compact first ([`decide`])? Only under
/// [`MoveWhen::Starts`] and [`MoveWhen::Pays`], and only while some job
/// waits (`waiting`, the event's own starting job included).
pub(crate) fn tries(move_when: MoveWhen, waiting: bool) -> bool {
    move_when.tries_first() && waiting
}

/// What the gate keeps from one event to the next: the jobs held for
/// tidying, the rotations through them, the memory of failed trials, the
/// runs of the finished jobs, and its counters. Cells, as the decision
/// ([`decide`]) only reads the simulator it is part of.
#[derive(Debug, Default)]
pub(crate) struct GateState {
    /// Under [`MoveWhen::Pays`], the running jobs whose tidying move did
    /// not pay, held still at the events that follow until a move could
    /// start a queued job, they pay, or they end.
    pub tidy_held: BTreeSet<usize>,
    /// The held job re-judged last ([`tidy_turn`]).
    tidy_cursor: Cell<Option<usize>>,
    /// The held job the last trial released last ([`release_turn`]).
    release_cursor: Cell<Option<usize>>,
    /// Under [`MoveWhen::Pays`], the trials that started nobody
    /// ([`TrialMemory`], as the plugin keeps them).
    trial_memory: RefCell<TrialMemory>,
    /// The runs of the jobs that finished ([`MoveWhen::Pays`]).
    pub runs: RunHistory,
    /// First trials made (`gate_trials`) ...
    pub trials: Cell<u64>,
    /// ... and skipped by the memory of failed ones
    /// (`gate_trials_remembered`).
    pub remembered: Cell<u64>,
    /// Events at which the gate closed on moves (`compact_no_gain`).
    pub no_gain: u64,
}

impl GateState {
    /// Records what the gate decided ([`decide`]): counts a closed gate,
    /// keeps the jobs held for tidying, and returns the jobs to hold still
    /// for the event.
    pub fn keep(&mut self, gate: Gate) -> Option<Vec<usize>> {
        self.no_gain += u64::from(gate.no_gain);
        if let Some(held) = gate.tidy_held {
            self.tidy_held = held.into_iter().collect();
        }
        gate.hold
    }

    /// Under [`MoveWhen::Pays`]: does a tidying move of a job with this
    /// `candidate`, running `age_s` since it first started, pay for itself
    /// ([`MigrationRule::pays_for_tidying`], its expected remaining run by
    /// the runs finished so far)?
    pub fn pays_for_tidying(
        &self,
        rule: &MigrationRule,
        candidate: &MoveCandidate,
        age_s: Seconds,
    ) -> bool {
        rule.pays_for_tidying(candidate, self.runs.expected_remaining(age_s))
    }
}

/// One event as the gate sees it.
pub(crate) struct GateEvent<'a> {
    pub move_when: MoveWhen,
    /// Held jobs one first trial releases at most
    /// ([`crate::placement::worth::TRIAL_RELEASES`]).
    pub trial_releases: usize,
    pub t: Seconds,
    /// The jobs the caller holds still for the event already (the head's
    /// guard of the placement simulator's backfill).
    pub hold: &'a [usize],
    /// The job the event is of (its start or its departure), if any.
    pub event_job: Option<usize>,
    /// Does any job wait (the event's own starting job included)?
    pub waiting: bool,
    /// The first waiting jobs (the gate's depth), in queue order; the
    /// event's own job may be among them (the gate leaves it out).
    pub queued: &'a [usize],
    /// The running jobs movable now, in the simulator's order (by
    /// projected end); the event's job and `hold` may be among them.
    pub movable: &'a [usize],
}

/// The gate [`MoveWhen::Starts`] for one event of job `event_job` (`trial`:
/// its departure, its start or a Compact alone, run on a fork of the policy
/// with the given jobs held still and `hold` with them, returning the fork
/// and the running jobs the event moved other than `event_job`, sorted):
/// every other movable running job is held still for this event when the
/// event's Compact would move running jobs and no queued job within the
/// depth (other than `event_job`) fits after the moves (`fits`) that does
/// not fit after the same event with every running job held still.
///
/// Under [`MoveWhen::Pays`] only the moves that pay for themselves (`pays`,
/// [`GateState::pays_for_tidying`]) are made: the jobs a trial moves that do
/// not pay are held still and the event is tried again, until every moved
/// job pays or [`TIDY_TRIALS`] trials were made (then nothing moves). The
/// jobs so held stay held at the events that follow (`tidy_held`, re-judged
/// at each, at most [`TIDY_RECHECKS`] of them in rotation ([`tidy_turn`]),
/// and kept through the events that try nothing: an empty queue, no movable
/// job) until a queued job could start after moves at all (`chances`, the
/// room bound; then every job may move in the first trial, but of the held
/// jobs only a turn of [`GateEvent::trial_releases`], [`release_turn`]; a
/// first trial kept is the event, with the others held still), they pay,
/// or they end; with none held and no queued job that could start, no first
/// trial is made; and a first trial that started nobody is not made again
/// for the same chances for a while ([`TrialMemory`]).
///
/// The select plugin's `Controller::compact_if_it_starts_a_job` and
/// `compact_tidying` follow the same rule. Under the other values of
/// [`MoveWhen`] nothing is tried (the caller holds jobs by
/// [`MoveWhen::allows`] before the event).
///
/// [`TIDY_RECHECKS`]: crate::placement::worth::TIDY_RECHECKS
pub(crate) fn decide<F>(
    state: &GateState,
    ev: &GateEvent<'_>,
    pays: impl Fn(usize) -> bool,
    chances: impl FnOnce() -> Vec<Chance>,
    trial: impl Fn(&[usize]) -> Result<Option<(F, Vec<usize>)>>,
    fits: impl Fn(&F, usize) -> bool,
) -> Result<Gate> {
    let t = ev.t;
    let hold = ev.hold;
    let event_job = ev.event_job;
    let open = Gate {
        hold: None,
        no_gain: false,
        tidy_held: Some(Vec::new()),
    };
    let untried = Gate::untried();
    if !tries(ev.move_when, ev.waiting) {
        return Ok(untried);
    }
    let is_pays = ev.move_when == MoveWhen::Pays;
    let movable: Vec<usize> = ev
        .movable
        .iter()
        .copied()
        .filter(|&k| Some(k) != event_job && !hold.contains(&k))
        .collect();
    if movable.is_empty() {
        return Ok(untried);
    }
    // Re-judged now: a bounded turn of the held jobs (every one when
    // they are few); the others stay held unjudged.
    let turn = tidy_turn(&state.tidy_held, state.tidy_cursor.get());
    if let Some(&last) = turn.last() {
        state.tidy_cursor.set(Some(last));
    }
    let kept_held: BTreeSet<usize> = state
        .tidy_held
        .iter()
        .copied()
        .filter(|k| !(turn.contains(k) && pays(*k)))
        .collect();
    let sticky: Vec<usize> = movable
        .iter()
        .copied()
        .filter(|k| kept_held.contains(k))
        .collect();
    let all: Vec<usize> = hold.iter().copied().chain(movable).collect();
    let mut first = None;
    let chances = chances();
    let worth_a_trial =
        !chances.is_empty() && state.trial_memory.borrow().any_new(&chances, t as u64);
    if is_pays && !chances.is_empty() && !worth_a_trial {
        state.remembered.set(state.remembered.get() + 1);
    }
    if !is_pays || worth_a_trial {
        // The trial releases a bounded turn of the held jobs (the
        // plugin's `compact_if_it_starts_a_job`); the others stay held
        // in it, and stay held after it whatever it does.
        let released = release_turn(&kept_held, state.release_cursor.get(), ev.trial_releases);
        if let Some(&last) = released.last() {
            state.release_cursor.set(Some(last));
        }
        let unreleased: Vec<usize> = hold
            .iter()
            .copied()
            .chain(sticky.iter().copied().filter(|k| !released.contains(k)))
            .collect();
        // A trial kept is the event: the jobs it held stay still in it
        // (none but the caller's when every held job was released).
        let still = unreleased.len() > hold.len();
        let open = Gate {
            hold: still.then(|| unreleased.clone()),
            no_gain: false,
            tidy_held: Some(
                kept_held
                    .iter()
                    .copied()
                    .filter(|k| !released.contains(k))
                    .collect(),
            ),
        };
        let Some((moved, charges)) = trial(&unreleased)? else {
            return Ok(open);
        };
        state.trials.set(state.trials.get() + 1);
        if charges.is_empty() {
            // Moves only inside nodes start nobody: a failed trial.
            if worth_a_trial {
                state.trial_memory.borrow_mut().failed(&chances, t as u64);
            }
            return Ok(open);
        }
        let Some((frozen, _)) = trial(&all)? else {
            return Ok(open);
        };
        let gains = ev
            .queued
            .iter()
            .copied()
            .filter(|&q| Some(q) != event_job)
            .any(|q| fits(&moved, q) && !fits(&frozen, q));
        if gains {
            state.trial_memory.borrow_mut().clear();
            return Ok(open);
        }
        if worth_a_trial {
            state.trial_memory.borrow_mut().failed(&chances, t as u64);
        }
        if !is_pays {
            return Ok(Gate {
                hold: Some(all),
                no_gain: true,
                tidy_held: None,
            });
        }
        if sticky.is_empty() {
            first = Some(charges);
        }
    }
    let mut held: Vec<usize> = hold.iter().copied().chain(sticky).collect();
    let mut charges = match first {
        Some(c) => c,
        None => match trial(&held)? {
            Some((_, c)) => c,
            None => return Ok(open),
        },
    };
    let mut tries = 1;
    let mut gated = false;
    let moves = loop {
        gated |= !charges.is_empty();
        let unpaid: Vec<usize> = charges.iter().copied().filter(|&k| !pays(k)).collect();
        if unpaid.is_empty() {
            break true;
        }
        let before = held.len();
        for k in unpaid {
            if !held.contains(&k) {
                held.push(k);
            }
        }
        // Out of trials, or the policy moved only jobs it was told to
        // hold still: nothing moves.
        if held.len() == before || tries == TIDY_TRIALS {
            break false;
        }
        let Some((_, next)) = trial(&held)? else {
            break false;
        };
        charges = next;
        tries += 1;
    };
    let tidy_held = held.iter().copied().filter(|k| !hold.contains(k)).collect();
    Ok(Gate {
        hold: Some(if moves { held } else { all }),
        no_gain: gated,
        tidy_held: Some(tidy_held),
    })
}

/// The room bound of the gate's first trial: of the `queued` jobs (the
/// event's own job left out), those that moves could start at all, as
/// [`Chance`]s for the memory of failed trials ([`TrialMemory`]). Moves
/// keep the free GPUs (`free`, with a departing job's counted free) as they
/// are, so a job of `w x g` needs `floor(free / g) >= w`, and
/// `reach(g) >= w` (`reach`: the instances of `g` GPUs that could fit after
/// any moves, [`crate::placement::PlacementPolicy::fit_after_moves_with`]);
/// `fit(g)`: the instances of `g` that fit now. `shape`: a job's shape.
/// The plugin's twin is [`crate::placement::head::Blocked::chances`].
pub(crate) fn chances(
    queued: &[usize],
    event_job: Option<usize>,
    free: u64,
    shape: impl Fn(usize) -> crate::model::JobShape,
    reach: impl Fn(u32) -> u64,
    fit: impl Fn(u32) -> u64,
) -> Vec<Chance> {
    queued
        .iter()
        .copied()
        .filter(|&q| Some(q) != event_job)
        .filter_map(|q| {
            let shape = shape(q);
            let room = (free / u64::from(shape.gpus.max(1))).min(reach(shape.gpus));
            (room >= u64::from(shape.instances)).then(|| Chance {
                place: 0,
                shape,
                fit: fit(shape.gpus),
                room,
            })
        })
        .collect()
}

/// What the cost rule knows of one job at time `t`, in either simulator:
/// `duration_s` its run in the trace, `restarted` its last (re)start or
/// move (protected time runs from it: a migrated job is protected again
/// after it lands, as the Slurm plugin counts it), `end` its projected end
/// (migration and restart costs included), `min_runtime_s` its protected
/// time, `last_moved` its last migration. The remaining run is
/// `remaining`'s estimate: the true one, or the time limit's slack on top.
#[allow(clippy::too_many_arguments)]
pub(crate) fn move_candidate(
    remaining: RemainingRun,
    resumable: bool,
    duration_s: Seconds,
    restarted: Seconds,
    end: Seconds,
    t: Seconds,
    min_runtime_s: Seconds,
    last_moved: Option<Seconds>,
) -> MoveCandidate {
    let remaining = match remaining {
        RemainingRun::Oracle => end - t,
        RemainingRun::TimeLimit => end - t + time_limit_for(duration_s) - duration_s,
        RemainingRun::ReplayLimit => end - t + replay_time_limit_for(duration_s) - duration_s,
    };
    MoveCandidate {
        resumable,
        cost_s: None,
        running_for_s: t - restarted,
        remaining_s: Some(remaining),
        protected_for_s: (min_runtime_s - (t - restarted)).max(0.0),
        since_migrated_s: last_moved.map(|m| t - m),
    }
}
