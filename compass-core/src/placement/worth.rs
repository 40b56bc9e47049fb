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
    /// Only while some job waits in the queue (the Slurm plugin's default,
    /// [`MoveWhen::SELECT_DEFAULT`]): a move made while nobody
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
}

impl MoveWhen {
    /// The Slurm plugin's default (`select.move_when`), chosen by the
    /// simulation of seven Venus windows (docs/results.md, "When to move"):
    /// level with `Always` at a 2 s migration cost, ahead at 4 s and 8 s.
    /// The simulator's own default stays `Always` (the paper's Algorithm 1).
    pub const SELECT_DEFAULT: MoveWhen = MoveWhen::Waiting;

    pub const NAMES: &'static [&'static str] = &["always", "waiting", "fits", "starts"];

    pub fn name(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Waiting => "waiting",
            Self::Fits => "fits",
            Self::Starts => "starts",
        }
    }

    pub fn parse_name(name: &str) -> crate::error::Result<Self> {
        match name {
            "always" => Ok(Self::Always),
            "waiting" => Ok(Self::Waiting),
            "fits" => Ok(Self::Fits),
            "starts" => Ok(Self::Starts),
            other => Err(CoreError::Invalid(format!(
                "unknown move-when `{other}`; expected always, waiting, fits or starts"
            ))),
        }
    }

    /// May any job move now? `waiting_gpus`: the GPUs each waiting job asks
    /// for (all instances); `free_gpus`: the cluster's idle GPUs. The
    /// simulator and the Slurm plugin both ask this before each Compact
    /// (for [`MoveWhen::Starts`], before the trial that decides).
    pub fn allows(self, waiting_gpus: impl IntoIterator<Item = u64>, free_gpus: u64) -> bool {
        let mut waiting = waiting_gpus.into_iter();
        match self {
            Self::Always => true,
            Self::Waiting | Self::Starts => waiting.next().is_some(),
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
}

impl Default for MigrationRule {
    fn default() -> Self {
        Self {
            default_cost_s: 8.0,
            payback: 2.0,
            min_run_s: 0.0,
            cooldown_s: 0.0,
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

    /// Does moving `job` now pay for itself?
    pub fn worth_moving(&self, job: &MoveCandidate) -> bool {
        self.check(job).is_ok()
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
        ] {
            assert_eq!(MoveWhen::parse_name(when.name()).unwrap(), when);
        }
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
