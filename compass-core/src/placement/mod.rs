//! Placement policies: the COMPASS-ABS engine and the baselines it must beat,
//! all behind one interface, [`PlacementPolicy`], so the simulator, the Slurm
//! plugin and the benchmarks can swap any of them in.
//!
//! - [`compass`]: COMPASS-ABS (paper Section 4), with our corrections.
//! - [`occupancy`]: the physical GPU accounting every policy shares.
//! - [`pools`]: one COMPASS engine per pool of interchangeable nodes (mixed clusters).
//! - [`head`]: a blocked head's reservation, and Compact's moves that would delay it.
//! - [`baselines`]: best-fit, first-fit, FGD and a round-based defragmenter.
//! - [`worth`]: when a migration pays for itself (cost-aware movability).

pub mod baselines;
pub mod compass;
pub mod head;
pub mod node_bits;
pub mod occupancy;
pub mod pools;
pub mod worth;

use crate::clock::Seconds;
use crate::error::Result;
use crate::model::{Admission, ClusterSpec, JobId, JobRequest, Migration, NodeSet};

pub use occupancy::Occupancy;

use crate::error::CoreError;
use compass::{CompassConfig, CompassEngine};

/// CLI names of every policy, ours first.
pub const POLICY_NAMES: &[&str] = &["compass", "best-fit", "first-fit", "fgd", "defrag"];

/// The shortest round `T` of the `defrag` baseline, seconds. A round is an
/// event of the simulator while jobs run: rounds of a millisecond over a
/// trace of months are billions of events (the replay never ends), and
/// rounds shorter than a second model no scheduler.
pub const MIN_DEFRAG_INTERVAL_S: Seconds = 1.0;

/// Options of every policy, so one struct configures any of them.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyOptions {
    pub compass: CompassConfig,
    /// Round length `T` of the `defrag` baseline, seconds.
    pub defrag_interval_s: Seconds,
    /// How many recent jobs form FGD's workload distribution.
    pub fgd_window: usize,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        Self {
            compass: CompassConfig::default(),
            defrag_interval_s: 300.0,
            fgd_window: 1000,
        }
    }
}

/// Builds a policy by its CLI name.
pub fn build(
    name: &str,
    spec: ClusterSpec,
    opts: &PolicyOptions,
) -> Result<Box<dyn PlacementPolicy>> {
    match name {
        "compass" => Ok(Box::new(CompassEngine::new(spec, opts.compass.clone()))),
        "best-fit" => Ok(Box::new(baselines::Greedy::new(spec, baselines::Fit::Best))),
        "first-fit" => Ok(Box::new(baselines::Greedy::new(
            spec,
            baselines::Fit::First,
        ))),
        "fgd" => Ok(Box::new(baselines::Fgd::new(spec, opts.fgd_window))),
        "defrag"
            if opts.defrag_interval_s.is_nan()
                || opts.defrag_interval_s < MIN_DEFRAG_INTERVAL_S =>
        {
            Err(CoreError::Invalid(format!(
                "the defrag round must be at least {MIN_DEFRAG_INTERVAL_S} s, got {} s",
                opts.defrag_interval_s
            )))
        }
        "defrag" => Ok(Box::new(baselines::Defrag::new(
            spec,
            baselines::DefragConfig {
                interval_s: opts.defrag_interval_s,
                ..Default::default()
            },
        ))),
        other => Err(CoreError::Invalid(format!(
            "unknown policy `{other}`; expected one of: {}",
            POLICY_NAMES.join(", ")
        ))),
    }
}

/// One placement policy. Every operator is pure state transition: it returns
/// the decisions (nodes, migrations) as data and performs no I/O.
///
/// Migrations returned by any call have already been applied to the policy's
/// own state: the caller only has to carry them out (the simulator charges
/// their cost; the Slurm plugin requeues the owning jobs).
pub trait PlacementPolicy {
    /// CLI name (`compass`, `best-fit`, `first-fit`, `fgd`, `defrag`).
    fn name(&self) -> &'static str;

    /// The cluster this policy places on.
    fn spec(&self) -> ClusterSpec;

    /// Admits `job` all-or-nothing, choosing only among `allowed` nodes when
    /// given. `Ok(None)` means "not now" and leaves the state exactly as it
    /// was. `Err` means the request can never be valid (bad shape, duplicate).
    fn place(&mut self, job: &JobRequest, allowed: Option<&NodeSet>) -> Result<Option<Admission>>;

    /// The job departs. Returns migrations of other jobs made as a
    /// consequence (for COMPASS: the Compact of Algorithm 1, line 16).
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>>;

    /// Victims of a preemption depart together, to make room for a pending
    /// job that is placed right after. A policy that compacts on departure
    /// (COMPASS) defers its Compact to that placement, so migrations do not
    /// fill the room just freed (issue 5: the victim set is chosen for the
    /// pending job, node by node). Returns the migrations made now.
    fn remove_for_room(&mut self, jobs: &[JobId]) -> Result<Vec<Migration>> {
        let mut out = Vec::new();
        for &job in jobs {
            out.extend(self.remove(job)?);
        }
        Ok(out)
    }

    /// Compacts with no arrival or departure, when a running job may move
    /// again (its protection or cool-down ended). Returns the migrations;
    /// policies that never migrate make none (the default).
    fn compact_now(&mut self) -> Vec<Migration> {
        Vec::new()
    }

    /// Seconds between periodic ticks, for round-based policies.
    fn tick_interval(&self) -> Option<Seconds> {
        None
    }

    /// Periodic hook (round-based defragmentation). Returns migrations.
    fn tick(&mut self, _now: Seconds) -> Vec<Migration> {
        Vec::new()
    }

    /// The physical GPU accounting (used GPUs per node, partial/empty counts,
    /// where each running instance is).
    fn occupancy(&self) -> &Occupancy;

    /// An upper bound on the instances of `g` GPUs that could fit after
    /// any migrations of this policy, with the running jobs `gone` left
    /// (the gate's test that no move can start a waiting job). The default
    /// counts the GPUs free or held by movable jobs
    /// ([`Occupancy::reach_fit_with`]); COMPASS bounds it by the nodes its
    /// Compact can take instances from
    /// ([`compass::CompassEngine::lowerable_fit_with`]).
    fn fit_after_moves_with(&self, g: u32, gone: &[JobId]) -> u64 {
        self.occupancy().reach_fit_with(g, gone)
    }

    /// Marks a running job movable or not by later migrations (the
    /// cost-aware rule of [`worth`], applied by the simulator before each
    /// event). Policies that never migrate ignore it (the default); a job
    /// submitted not resumable must never be made movable by the caller.
    fn set_movable(&mut self, _job: JobId, _movable: bool) -> Result<()> {
        Ok(())
    }

    /// Does the policy act on [`PlacementPolicy::set_movable`]? (`false`,
    /// the default: it ignores it, and callers skip the cost rule.)
    fn honours_movable(&self) -> bool {
        false
    }

    /// An independent copy of the policy in its current state, to try a
    /// decision without committing to it (backfill refuses a start whose
    /// migrations would delay the head's reservation). `None` (the default):
    /// the policy cannot be copied; callers then decide without a trial.
    fn fork(&self) -> Option<Box<dyn PlacementPolicy>> {
        None
    }

    /// When `job` (running, or about to be placed) is expected to end, in
    /// the caller's clock: Slurm's start plus time limit. COMPASS breaks
    /// Place's ties by it ([`compass::EndTies`]); a non-finite end forgets
    /// it (a job that will not be placed). The default ignores it.
    fn set_expected_end(&mut self, _job: JobId, _end_s: Seconds) {}
}
