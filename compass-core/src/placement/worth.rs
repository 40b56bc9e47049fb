//! When a migration pays for itself (issue #10; beyond the paper).
//!
//! The paper (Section 5.1) charges every migration a fixed 8 s and lets
//! Compact move any running instance. On a real cluster a requeue and
//! restart costs a job its start-up and the work since its last checkpoint,
//! often minutes, and Slurm knows each job's time limit. Moving a job that is
//! about to end costs more than the fragmentation it removes: the moved job
//! pays the cost, while the room it frees would have been free soon anyway.
//!
//! [`MigrationRule::worth_moving`] is the one rule the simulator and the
//! Slurm plugin apply before each Compact (through
//! [`crate::placement::compass::CompassEngine::set_movable`]): a job is
//! movable only when it is resumable, past its protection and start-up
//! grace, outside its cool-down, and expected to run at least `payback`
//! times its migration cost after the move. Jobs the rule keeps still are
//! planned around as immovable, so Theorem 1's bound may be exceeded by
//! choice; the drivers report how often and for how long.

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::error::CoreError;

/// When the rule lets any job move at all (the gate before
/// [`MigrationRule::worth_moving`]; `select.move_when` in the plugin,
/// `--move-when` in the simulator). Beyond the paper: Algorithm 1 runs
/// Compact after every event, which keeps Theorem 1's bound but pays for
/// moves that let no job start sooner.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoveWhen {
    /// Whenever the move pays for itself (Compact after every event keeps
    /// Theorem 1's bound for the movable jobs).
    #[default]
    Always,
    /// Only while some job waits in the queue: a move made while nobody
    /// waits lets no job start sooner, so it is deferred to the first event
    /// with a waiting job (Compact then repairs the layout). The bound is
    /// then exceeded by choice while the queue is empty.
    Waiting,
    /// Only while some waiting job asks for no more GPUs than are free: it
    /// waits on fragmentation, which moves can repair, not on capacity,
    /// which they cannot. The bound is exceeded by choice while every
    /// waiting job is larger than the free GPUs (or none waits).
    Fits,
    /// Only when the moves let a waiting job start: while some job waits
    /// (as [`MoveWhen::Waiting`]), Compact is tried first, and its moves
    /// are made only if afterwards some waiting job has room it has not
    /// now ([`crate::placement::head::moves_let_a_job_start`] in the
    /// select plugin, the same test in the simulator); else no job moves.
    /// A move that only tidies the layout for a later job is never made,
    /// so Theorem 1's bound is exceeded by choice whenever tidying would
    /// start nobody.
    Starts,
    /// As [`MoveWhen::Starts`], but a Compact that starts nobody is still
    /// made with the jobs that pay for a tidying move: those expected to
    /// run at least [`MigrationRule::tidy_payback`] times their migration
    /// cost after it, by the runs of the jobs that ended recently
    /// ([`RunHistory::expected_remaining`], capped by the time limit).
    /// Where moves are cheap against the runs (a site whose jobs run for
    /// hours) this tidies as [`MoveWhen::Waiting`] does; where they are
    /// dear (a replay compressed 240x, where a 3 s requeue weighs like 12
    /// trace minutes) it moves only jobs that start another, as
    /// [`MoveWhen::Starts`]. The Slurm plugin's default
    /// ([`MoveWhen::SELECT_DEFAULT`]).
    Pays,
}

impl MoveWhen {
    /// The Slurm plugin's default (`select.move_when`), chosen by
    /// simulation at both time scales (docs/results.md, "Moves that pay"):
    /// on seven 120-job Venus windows compressed 240x (a move weighing like
    /// 8-32 trace minutes) it fragments less than `Waiting` and `Starts`
    /// and completes jobs sooner than `Waiting`; on the Venus sample at its
    /// own time scale it completes jobs as soon as `Waiting` or sooner at
    /// 8 s to 5 min a move, where `Starts` loses 1-1.5% to best-fit.
    /// The simulator's own default stays `Always` (the paper's Algorithm 1).
    pub const SELECT_DEFAULT: MoveWhen = MoveWhen::Pays;

    pub const NAMES: &'static [&'static str] = &["always", "waiting", "fits", "starts", "pays"];

    pub fn name(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Waiting => "waiting",
            Self::Fits => "fits",
            Self::Starts => "starts",
            Self::Pays => "pays",
        }
    }

    pub fn parse_name(name: &str) -> crate::error::Result<Self> {
        match name {
            "always" => Ok(Self::Always),
            "waiting" => Ok(Self::Waiting),
            "fits" => Ok(Self::Fits),
            "starts" => Ok(Self::Starts),
            "pays" => Ok(Self::Pays),
            other => Err(CoreError::Invalid(format!(
                "unknown move-when `{other}`; expected always, waiting, fits, starts or pays"
            ))),
        }
    }

    /// Is a Compact tried on a copy first, its moves made only when they let
    /// a waiting job start (the others as the gate says)?
    pub fn tries_first(self) -> bool {
        matches!(self, Self::Starts | Self::Pays)
    }

    /// May any job move now? `waiting_gpus`: the GPUs each waiting job asks
    /// for (all instances); `free_gpus`: the cluster's idle GPUs. The
    /// simulator and the Slurm plugin both ask this before each Compact
    /// (for [`MoveWhen::Starts`], before the trial that decides).
    pub fn allows(self, waiting_gpus: impl IntoIterator<Item = u64>, free_gpus: u64) -> bool {
        let mut waiting = waiting_gpus.into_iter();
        match self {
            Self::Always => true,
            Self::Waiting | Self::Starts | Self::Pays => waiting.next().is_some(),
            Self::Fits => waiting.any(|g| g <= free_gpus),
        }
    }
}

/// The site's migration policy.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrationRule {
    /// Cost of one migration of a job that names none (`--resumable` without
    /// a value): requeue, restart, and the work lost since the last
    /// checkpoint, seconds.
    pub default_cost_s: Seconds,
    /// A job moves only when its expected remaining run is at least this
    /// many times its migration cost (`>= 1`; 2 by default: the move must
    /// buy at least as much packed time as it costs, twice over, because the
    /// remaining run is an upper bound taken from the time limit).
    pub payback: f64,
    /// Never move a job within this long of its start (its first checkpoint
    /// is not written yet), seconds.
    pub min_run_s: Seconds,
    /// Never move the same job twice within this long, seconds.
    pub cooldown_s: Seconds,
    /// Under [`MoveWhen::Pays`], a move that lets no waiting job start
    /// (it only tidies the layout) is made only for a job expected to run
    /// at least this many times its migration cost after the move
    /// ([`MigrationRule::pays_for_tidying`]).
    #[serde(default = "default_tidy_payback")]
    pub tidy_payback: f64,
}

/// [`MigrationRule::tidy_payback`]'s default, chosen by simulation
/// (docs/results.md, "Moves that pay: `--move-when pays`").
pub const DEFAULT_TIDY_PAYBACK: f64 = 20.0;

/// Under [`MoveWhen::Pays`], how many jobs whose move does not pay one
/// tidying Compact may meet before it gives up (then nothing moves). The
/// simulator's gate tries the event again, holding the jobs each trial
/// moved that do not pay, at most this many trials; the select plugin's
/// `Controller::compact_tidying` asks before each move instead and stops
/// after this many refused jobs ([`crate::placement::compass::Veto`]).
pub const TIDY_TRIALS: usize = 8;

/// Under [`MoveWhen::Pays`], the jobs held still for tidying that one
/// Compact re-judges (does their move pay now?): at most this many, in
/// rotation ([`tidy_turn`]), so a Compact's cost does not grow with the
/// jobs held (issue #11: 320 held at 10,000 nodes in the plugin bench
/// mix). With fewer held, each Compact re-judges every one.
pub const TIDY_RECHECKS: usize = 32;

/// The held jobs one Compact re-judges: at most [`TIDY_RECHECKS`] of
/// `held`, those after `after` (the last one re-judged before) in order,
/// wrapping around; every one when they are fewer. The select plugin's
/// `Controller::recheck_tidy_held` and the simulator's gate alike.
pub fn tidy_turn<T: Ord + Copy>(held: &std::collections::BTreeSet<T>, after: Option<T>) -> Vec<T> {
    turn(held, after, TIDY_RECHECKS)
}

/// Under [`MoveWhen::Pays`], the jobs held still for tidying that the
/// gate's trial (a Compact made to see whether moves start a waiting job)
/// lets move: at most this many, in rotation ([`release_turn`]); the others
/// stay held in it. Releasing a held job and holding it again after a
/// trial that started nobody re-indexes its nodes twice, and the trial's
/// Compact has more to move, so a trial that released every held job cost
/// in proportion to them (issue #11: with 365 held at 10,000 nodes, in one
/// course of the plugin bench, 110 us to release them, 131 us of Compact
/// and 74 us of undo in one tick). Eight, not the 32 of the twenty-fourth
/// round: a failed trial of 32 still took about 60 us on a mixed cluster
/// of 1,000 nodes, most of it the trial's Compact with more jobs free and
/// its undo (docs/results.md, "Eight held jobs per trial").
pub const TRIAL_RELEASES: usize = 8;

/// The held jobs the gate's next trial releases: at most `releases` of
/// `held` ([`TRIAL_RELEASES`] in the select plugin and by default in the
/// simulator), those after `after` (the last one released before) in
/// order, wrapping around; every one when they are fewer. The select
/// plugin's `Controller::compact_if_it_starts_a_job` and the simulator's
/// gate alike.
pub fn release_turn<T: Ord + Copy>(
    held: &std::collections::BTreeSet<T>,
    after: Option<T>,
    releases: usize,
) -> Vec<T> {
    turn(held, after, releases)
}

/// At most `n` of `held`, those after `after` in order, wrapping around.
fn turn<T: Ord + Copy>(held: &std::collections::BTreeSet<T>, after: Option<T>, n: usize) -> Vec<T> {
    use std::ops::Bound::{Excluded, Unbounded};
    let Some(a) = after else {
        return held.iter().copied().take(n).collect();
    };
    held.range((Excluded(a), Unbounded))
        .chain(held.range(..=a))
        .copied()
        .take(n)
        .collect()
}

fn default_tidy_payback() -> f64 {
    DEFAULT_TIDY_PAYBACK
}

impl Default for MigrationRule {
    fn default() -> Self {
        Self {
            default_cost_s: 8.0,
            payback: 2.0,
            min_run_s: 0.0,
            cooldown_s: 0.0,
            tidy_payback: DEFAULT_TIDY_PAYBACK,
        }
    }
}

/// What the rule needs to know about one running job, at time `now`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoveCandidate {
    /// Submitted `--resumable` (a requeue restarts it from a checkpoint).
    pub resumable: bool,
    /// The job's own migration cost (`--resumable=5m`), seconds; `None`:
    /// the site default.
    pub cost_s: Option<Seconds>,
    /// Seconds since the job (re)started.
    pub running_for_s: Seconds,
    /// Expected seconds left to run (time limit minus elapsed run); `None`
    /// when unknown (no time limit): treated as long.
    pub remaining_s: Option<Seconds>,
    /// Seconds of protected time left (`--min-runtime`): a protected job is
    /// never preempted or migrated before its min runtime ends.
    pub protected_for_s: Seconds,
    /// Seconds since the job was last migrated; `None`: never.
    pub since_migrated_s: Option<Seconds>,
}

/// Why a job is kept still (for logs, `compass status` and reports).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeepReason {
    NotResumable,
    Protected,
    StartingUp,
    CoolingDown,
    EndsSoon,
    /// The gate [`MoveWhen`] is closed: no waiting job would gain.
    NoGain,
    /// The job names its nodes (`-w`): the select plugin never moves it
    /// (issue #11: Compact gathered a `-w` job's instances onto one of
    /// its nodes, a requeue the user never agreed to).
    NamesItsNodes,
    /// `select.migrate = false`: no job moves.
    MigrationsOff,
}

impl KeepReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotResumable => "not-resumable",
            Self::Protected => "protected",
            Self::StartingUp => "starting-up",
            Self::CoolingDown => "cooling-down",
            Self::EndsSoon => "ends-soon",
            Self::NoGain => "no-gain",
            Self::NamesItsNodes => "names-its-nodes",
            Self::MigrationsOff => "migrations-off",
        }
    }
}

impl MigrationRule {
    /// The migration cost the rule charges `job`, seconds.
    pub fn cost_of(&self, job: &MoveCandidate) -> Seconds {
        job.cost_s.unwrap_or(self.default_cost_s).max(0.0)
    }

    /// `Ok(())` when moving `job` now pays for itself, else why not.
    pub fn check(&self, job: &MoveCandidate) -> Result<(), KeepReason> {
        if !job.resumable {
            return Err(KeepReason::NotResumable);
        }
        if job.protected_for_s > 0.0 {
            return Err(KeepReason::Protected);
        }
        if job.running_for_s < self.min_run_s {
            return Err(KeepReason::StartingUp);
        }
        if job.since_migrated_s.is_some_and(|s| s < self.cooldown_s) {
            return Err(KeepReason::CoolingDown);
        }
        let cost = self.cost_of(job);
        if job
            .remaining_s
            .is_some_and(|left| left - cost < self.payback.max(1.0) * cost)
        {
            return Err(KeepReason::EndsSoon);
        }
        Ok(())
    }

    /// The delays after a job's (re)start, or after a move of it
    /// (`moved`), at which [`MigrationRule::check`]'s time-bound reasons
    /// end for a job protected for `protection_s`: its protection, its
    /// start-up ([`MigrationRule::min_run_s`]) and, after a move, its
    /// cool-down; only those that are positive and finite. The simulators
    /// look at the job again then (a Compact at the instant it may move).
    pub fn wakes(&self, protection_s: Seconds, moved: bool) -> impl Iterator<Item = Seconds> {
        let cooldown = if moved { self.cooldown_s } else { 0.0 };
        [protection_s, self.min_run_s, cooldown]
            .into_iter()
            .filter(|d| *d > 0.0 && d.is_finite())
    }

    /// Does moving `job` now pay for itself?
    pub fn worth_moving(&self, job: &MoveCandidate) -> bool {
        self.check(job).is_ok()
    }

    /// Under [`MoveWhen::Pays`], does a move of `job` that lets no waiting
    /// job start still pay for itself? It must be worth moving at all
    /// ([`MigrationRule::check`]) and expected to run at least
    /// `tidy_payback` times its cost after the move: `expected_s` is its
    /// expected remaining run by the recent runs
    /// ([`RunHistory::expected_remaining`]; `None`: unknown, taken as
    /// long), capped by what its time limit leaves.
    pub fn pays_for_tidying(&self, job: &MoveCandidate, expected_s: Option<Seconds>) -> bool {
        if !self.worth_moving(job) {
            return false;
        }
        let left = match (expected_s, job.remaining_s) {
            (Some(e), Some(l)) => e.min(l),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => return true,
        };
        let cost = self.cost_of(job);
        left - cost >= self.tidy_payback.max(0.0) * cost
    }

    /// Will the rule hold a job that starts now still for long: not
    /// resumable, protected, or too short ever to pay for a move? Place
    /// seats such a job as immovable (the pinned fill,
    /// docs/compass-corrections.md section 5). The brief start-up grace and
    /// a cool-down do not count: Compact may move the job soon after.
    pub fn holds_at_start(&self, job: &MoveCandidate) -> bool {
        let later = MigrationRule {
            min_run_s: 0.0,
            cooldown_s: 0.0,
            ..*self
        };
        !later.worth_moving(job)
    }
}

/// The runs of the jobs that ended most recently, to estimate how long a
/// running job has left ([`MoveWhen::Pays`]): the mean residual run
/// `E[R - a | R > a]` of a job that has run `a` seconds, over the last
/// [`RunHistory::CAPACITY`] runs. Time limits are a poor guide to it (a
/// site's are often days, a replay's 15 minutes for runs of seconds); the
/// runs that just ended are what the workload is now. The simulator records
/// each finished job's run; the select plugin the run of each job that ends
/// (since its last start).
#[derive(Clone, Debug, Default)]
pub struct RunHistory {
    /// The runs in the order they ended (the oldest first).
    recent: std::collections::VecDeque<Seconds>,
    /// The same runs, ascending.
    sorted: Vec<Seconds>,
    /// `suffix[i] = sum(sorted[i..])`, summed from the last, brought up
    /// to date at the first estimate after a change (issue #11: not at
    /// every job end, where it was most of the select plugin's `job_fini`;
    /// an estimate is asked only of a tidying move).
    suffix: std::cell::RefCell<Suffix>,
}

/// [`RunHistory`]'s suffix sums: `sums[i]` is `sum(sorted[i..])` for `i >=
/// stale`; those below are to be summed again. A run recorded or dropped
/// at rank `r` leaves the sums above `r` as they were (they add the same
/// runs in the same order), so only the ranks up to the highest change are
/// summed again, each as `sums[i + 1] + sorted[i]`: the same additions in
/// the same order as a sum of the whole list from the last, to the bit
/// (issue #11: summed whole at the first estimate after every job end, a
/// thousand dependent additions, it was most of a tidying Compact's
/// re-check of the jobs it holds).
#[derive(Clone, Debug, Default)]
struct Suffix {
    sums: Vec<Seconds>,
    stale: usize,
}

impl Suffix {
    /// The run at rank `r` was dropped.
    fn removed(&mut self, r: usize) {
        self.sums.remove(r);
        self.stale = if r < self.stale { self.stale - 1 } else { r };
    }

    /// A run was put at rank `r`.
    fn inserted(&mut self, r: usize) {
        self.sums.insert(r, 0.0);
        self.stale = if r < self.stale {
            self.stale + 1
        } else {
            r + 1
        };
    }

    /// `sum(sorted[i..])`, the stale sums brought up to date first.
    fn at(&mut self, sorted: &[Seconds], i: usize) -> Seconds {
        let mut acc = self.sums.get(self.stale).copied().unwrap_or(0.0);
        for (sum, run) in self.sums[..self.stale].iter_mut().zip(sorted).rev() {
            acc += run;
            *sum = acc;
        }
        self.stale = 0;
        self.sums[i]
    }
}

impl RunHistory {
    /// Runs kept (a new one pushes out the oldest).
    pub const CAPACITY: usize = 1000;
    /// Runs needed before any estimate (fewer: `None`).
    pub const MIN_RUNS: usize = 20;

    /// Records a job's run that ended (seconds; a non-finite or negative
    /// run is ignored).
    pub fn record(&mut self, run_s: Seconds) {
        if !run_s.is_finite() || run_s < 0.0 {
            return;
        }
        let suffix = self.suffix.get_mut();
        if self.recent.len() == Self::CAPACITY {
            if let Some(old) = self.recent.pop_front() {
                let i = self.sorted.partition_point(|&x| x < old);
                self.sorted.remove(i);
                suffix.removed(i);
            }
        }
        self.recent.push_back(run_s);
        let i = self.sorted.partition_point(|&x| x < run_s);
        self.sorted.insert(i, run_s);
        suffix.inserted(i);
    }

    /// The runs kept, in the order they ended (the oldest first).
    pub fn runs(&self) -> impl Iterator<Item = Seconds> + '_ {
        self.recent.iter().copied()
    }

    /// Runs recorded (at most [`RunHistory::CAPACITY`]).
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// A job that has run `age_s` seconds: how long it is expected to run
    /// still, the mean of `r - age_s` over the recorded runs `r > age_s`.
    /// `None` with fewer than [`RunHistory::MIN_RUNS`] runs, or when no
    /// recorded run was longer (the job is older than all of them: long,
    /// as far as they say).
    pub fn expected_remaining(&self, age_s: Seconds) -> Option<Seconds> {
        if self.sorted.len() < Self::MIN_RUNS {
            return None;
        }
        let i = self.sorted.partition_point(|&x| x <= age_s);
        let n = self.sorted.len() - i;
        (n > 0).then(|| self.suffix.borrow_mut().at(&self.sorted, i) / n as f64 - age_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_when_gates_every_move_on_the_queue() {
        for when in [
            MoveWhen::Always,
            MoveWhen::Waiting,
            MoveWhen::Fits,
            MoveWhen::Starts,
            MoveWhen::Pays,
        ] {
            assert_eq!(MoveWhen::parse_name(when.name()).unwrap(), when);
            assert!(MoveWhen::NAMES.contains(&when.name()));
        }
        assert!(MoveWhen::Pays.allows([16], 12));
        assert!(!MoveWhen::Pays.allows(none_yet(), 64));
        assert!(MoveWhen::Pays.tries_first() && MoveWhen::Starts.tries_first());
        assert!(!MoveWhen::Waiting.tries_first());
        assert!(MoveWhen::parse_name("never").is_err());
        let none: [u64; 0] = [];
        assert!(MoveWhen::Always.allows(none, 0));
        assert!(!MoveWhen::Waiting.allows(none, 64));
        assert!(!MoveWhen::Fits.allows(none, 64));
        assert!(!MoveWhen::Starts.allows(none, 64));
        // `starts` opens for any waiting job; its trial decides.
        assert!(MoveWhen::Starts.allows([16], 12));
        // A 16-GPU job waits with 12 GPUs free: no move lets it start.
        assert!(MoveWhen::Waiting.allows([16], 12));
        assert!(!MoveWhen::Fits.allows([16], 12));
        // With 16 free (scattered) it waits on fragmentation: moves may help.
        assert!(MoveWhen::Fits.allows([16], 16));
        assert!(MoveWhen::Fits.allows([32, 8], 12));
    }

    fn none_yet() -> [u64; 0] {
        []
    }

    #[test]
    fn run_history_sums_only_what_changed_to_the_same_bits() {
        // The mean residual run from the runs kept, summed whole from the
        // last, as the estimate must be to the bit.
        fn whole(runs: &[f64], age: f64) -> Option<f64> {
            let mut sorted = runs.to_vec();
            sorted.sort_by(f64::total_cmp);
            let i = sorted.partition_point(|&x| x <= age);
            let n = sorted.len() - i;
            let mut acc = 0.0;
            for x in sorted[i..].iter().rev() {
                acc += x;
            }
            (sorted.len() >= RunHistory::MIN_RUNS && n > 0).then(|| acc / n as f64 - age)
        }
        let mut h = RunHistory::default();
        let mut kept: std::collections::VecDeque<f64> = Default::default();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..3 * RunHistory::CAPACITY {
            // runs with many bits, so that a sum in another order differs
            let run = (next() % 1_000_000) as f64 / 7.0 + 0.1;
            h.record(run);
            kept.push_back(run);
            if kept.len() > RunHistory::CAPACITY {
                kept.pop_front();
            }
            // estimates after one record, or after several
            if step % 3 != 1 {
                let runs: Vec<f64> = kept.iter().copied().collect();
                for age in [0.0, (next() % 150_000) as f64, 140_000.0] {
                    let got = h.expected_remaining(age).map(f64::to_bits);
                    assert_eq!(
                        got,
                        whole(&runs, age).map(f64::to_bits),
                        "step {step}, age {age}"
                    );
                }
            }
        }
    }

    #[test]
    fn run_history_gives_the_mean_residual_run() {
        let mut h = RunHistory::default();
        for r in 1..RunHistory::MIN_RUNS {
            h.record(r as f64 * 10.0);
        }
        assert_eq!(h.expected_remaining(0.0), None, "too few runs");
        h.record(200.0);
        h.record(f64::NAN);
        h.record(-1.0);
        assert_eq!(h.len(), RunHistory::MIN_RUNS, "bad runs are ignored");
        // Runs 10, 20, ..., 190, 200: mean 105.
        assert_eq!(h.expected_remaining(0.0), Some(105.0));
        // Older than 150 s: the runs 160..200 (mean 180) are left.
        assert_eq!(h.expected_remaining(150.0), Some(30.0));
        assert_eq!(h.expected_remaining(200.0), None, "older than every run");
        // The oldest runs leave first.
        for _ in 0..RunHistory::CAPACITY {
            h.record(1000.0);
        }
        assert_eq!(h.len(), RunHistory::CAPACITY);
        assert_eq!(h.expected_remaining(10.0), Some(990.0));
    }

    #[test]
    fn a_compact_rejudges_a_bounded_turn_of_the_held_jobs_in_rotation() {
        let few: std::collections::BTreeSet<u32> = (1..=5).collect();
        assert_eq!(tidy_turn(&few, None), vec![1, 2, 3, 4, 5]);
        assert_eq!(
            tidy_turn(&few, Some(3)),
            vec![4, 5, 1, 2, 3],
            "all, when few"
        );
        let many: std::collections::BTreeSet<u32> = (0..100).collect();
        let first = tidy_turn(&many, None);
        assert_eq!(first, (0..32).collect::<Vec<_>>());
        let mut seen = std::collections::BTreeSet::new();
        let mut after = None;
        for _ in 0..4 {
            let turn = tidy_turn(&many, after);
            assert_eq!(turn.len(), TIDY_RECHECKS);
            after = turn.last().copied();
            seen.extend(turn);
        }
        assert_eq!(
            seen, many,
            "every held job is re-judged within ceil(100 / 32) turns"
        );
        // The job after which the turn starts may have ended meanwhile.
        assert_eq!(tidy_turn(&few, Some(9)), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_tidying_move_pays_only_for_long_expected_runs() {
        let rule = MigrationRule {
            default_cost_s: 10.0,
            tidy_payback: 20.0,
            ..MigrationRule::default()
        };
        let job = long_job();
        // 10 s a move: it must be expected to run 10 + 20 x 10 = 210 s more.
        assert!(rule.pays_for_tidying(&job, Some(210.0)));
        assert!(!rule.pays_for_tidying(&job, Some(209.0)));
        assert!(rule.pays_for_tidying(&job, None), "unknown: long");
        // The time limit caps the estimate.
        let ends = MoveCandidate {
            remaining_s: Some(100.0),
            ..job
        };
        assert!(!rule.pays_for_tidying(&ends, Some(10_000.0)));
        assert!(!rule.pays_for_tidying(&ends, None));
        let unknown = MoveCandidate {
            remaining_s: None,
            ..job
        };
        assert!(rule.pays_for_tidying(&unknown, None));
        // A job not worth moving at all does not pay for tidying either.
        let pinned = MoveCandidate {
            resumable: false,
            ..job
        };
        assert!(!rule.pays_for_tidying(&pinned, None));
    }

    fn long_job() -> MoveCandidate {
        MoveCandidate {
            resumable: true,
            running_for_s: 3600.0,
            remaining_s: Some(36_000.0),
            ..MoveCandidate::default()
        }
    }

    #[test]
    fn a_long_resumable_job_is_worth_moving() {
        assert_eq!(MigrationRule::default().check(&long_job()), Ok(()));
        let unknown_end = MoveCandidate {
            remaining_s: None,
            ..long_job()
        };
        assert!(MigrationRule::default().worth_moving(&unknown_end));
    }

    #[test]
    fn each_reason_keeps_a_job_still() {
        let rule = MigrationRule {
            default_cost_s: 60.0,
            payback: 2.0,
            min_run_s: 300.0,
            cooldown_s: 600.0,
            ..MigrationRule::default()
        };
        let cases = [
            (
                MoveCandidate {
                    resumable: false,
                    ..long_job()
                },
                KeepReason::NotResumable,
            ),
            (
                MoveCandidate {
                    protected_for_s: 1.0,
                    ..long_job()
                },
                KeepReason::Protected,
            ),
            (
                MoveCandidate {
                    running_for_s: 299.0,
                    ..long_job()
                },
                KeepReason::StartingUp,
            ),
            (
                MoveCandidate {
                    since_migrated_s: Some(599.0),
                    ..long_job()
                },
                KeepReason::CoolingDown,
            ),
            (
                // 60 s cost: after the move 179 - 60 = 119 s left < 2 x 60.
                MoveCandidate {
                    remaining_s: Some(179.0),
                    ..long_job()
                },
                KeepReason::EndsSoon,
            ),
        ];
        for (job, why) in cases {
            assert_eq!(rule.check(&job), Err(why), "{job:?}");
        }
        let just_enough = MoveCandidate {
            remaining_s: Some(180.0),
            since_migrated_s: Some(600.0),
            ..long_job()
        };
        assert_eq!(rule.check(&just_enough), Ok(()));
    }

    #[test]
    fn a_job_names_its_own_cost() {
        let rule = MigrationRule::default();
        let job = MoveCandidate {
            cost_s: Some(300.0),
            remaining_s: Some(800.0),
            ..long_job()
        };
        assert_eq!(rule.cost_of(&job), 300.0);
        // 800 - 300 = 500 < 2 x 300: kept, where the 8 s default would move it.
        assert_eq!(rule.check(&job), Err(KeepReason::EndsSoon));
        assert!(rule.worth_moving(&MoveCandidate {
            cost_s: None,
            ..job
        }));
    }

    #[test]
    fn held_at_start_only_for_long_holds() {
        let rule = MigrationRule {
            min_run_s: 300.0,
            cooldown_s: 600.0,
            ..MigrationRule::default()
        };
        let starting = MoveCandidate {
            running_for_s: 0.0,
            ..long_job()
        };
        // Only the start-up grace holds it: Compact may move it later.
        assert_eq!(rule.check(&starting), Err(KeepReason::StartingUp));
        assert!(!rule.holds_at_start(&starting));
        let not_resumable = MoveCandidate {
            resumable: false,
            ..starting
        };
        let protected = MoveCandidate {
            protected_for_s: 60.0,
            ..starting
        };
        let short = MoveCandidate {
            remaining_s: Some(20.0),
            ..starting
        };
        for held in [not_resumable, protected, short] {
            assert!(rule.holds_at_start(&held), "{held:?}");
        }
    }
}
