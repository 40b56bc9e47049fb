//! COMPASS-ABS engine (paper Section 4), with our corrections (docs/compass-corrections.md).
//!
//! API skeleton: the bodies land with the engine work. Drivers code against
//! these signatures.

use crate::error::Result;
use crate::model::{Admission, ClusterSpec, JobId, JobRequest, Migration, NodeId, NodeSet};
use crate::placement::{Occupancy, PlacementPolicy};

/// Tunables of the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct CompassConfig {
    /// Let an instance overflow into physically free GPUs outside its ABS
    /// place when the structured placement finds no room (small clusters).
    pub overflow: bool,
}

impl Default for CompassConfig {
    fn default() -> Self {
        Self { overflow: true }
    }
}

/// What `adopt` found when comparing Slurm's allocation with the engine's plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AdoptOutcome {
    /// Slurm placed every instance where the engine planned it.
    Matched,
    /// Slurm placed the job elsewhere; the engine adopted Slurm's layout.
    Diverged,
}

pub struct CompassEngine {
    occ: Occupancy,
    #[allow(dead_code)]
    config: CompassConfig,
}

impl CompassEngine {
    pub fn new(spec: ClusterSpec, config: CompassConfig) -> Self {
        Self { occ: Occupancy::new(spec), config }
    }

    /// Dry run of [`PlacementPolicy::place`]: the node of each instance, state unchanged.
    pub fn plan(&mut self, _job: &JobRequest, _allowed: Option<&NodeSet>) -> Result<Option<Vec<NodeId>>> {
        Err(crate::CoreError::Invalid("engine not yet implemented".into()))
    }

    /// Records a job exactly where the resource manager put it (`nodes[k]`
    /// hosts instance `k`), whether or not the engine planned it so.
    pub fn adopt(&mut self, _job: &JobRequest, _nodes: &[NodeId]) -> Result<AdoptOutcome> {
        Err(crate::CoreError::Invalid("engine not yet implemented".into()))
    }

    /// Records GPUs used by a job outside the `w x g` model (e.g. `--gpus=3`
    /// spread over nodes): immovable, never migrated.
    pub fn adopt_foreign(&mut self, _job: JobId, _per_node_gpus: &[(NodeId, u32)]) -> Result<()> {
        Err(crate::CoreError::Invalid("engine not yet implemented".into()))
    }

    /// Marks a running job movable or not (cool-down, not resumable).
    pub fn set_movable(&mut self, _job: JobId, _movable: bool) -> Result<()> {
        Err(crate::CoreError::Invalid("engine not yet implemented".into()))
    }

    /// Runs Compact now and returns the migrations it applied.
    pub fn compact(&mut self) -> Vec<Migration> {
        Vec::new()
    }
}

impl PlacementPolicy for CompassEngine {
    fn name(&self) -> &'static str {
        "compass"
    }
    fn spec(&self) -> ClusterSpec {
        self.occ.spec()
    }
    fn place(&mut self, _job: &JobRequest, _allowed: Option<&NodeSet>) -> Result<Option<Admission>> {
        Err(crate::CoreError::Invalid("engine not yet implemented".into()))
    }
    fn remove(&mut self, _job: JobId) -> Result<Vec<Migration>> {
        Err(crate::CoreError::Invalid("engine not yet implemented".into()))
    }
    fn occupancy(&self) -> &Occupancy {
        &self.occ
    }
}
