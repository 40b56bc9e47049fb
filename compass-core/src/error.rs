//! The one error type of the core crate.

use crate::model::{JobId, NodeId};

/// Everything the core can refuse. Every variant names what was wrong, so a
/// driver can print it to an admin or a user as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error("GPUs per node must be one of 1, 2, 4 or 8, got {0}")]
    BadNodeCapacity(u32),
    #[error("a cluster needs at least one node")]
    NoNodes,
    #[error("a job needs at least one instance, got 0 (job {0})")]
    NoInstances(JobId),
    #[error("job {job}: {gpus} GPUs per instance cannot fit a node of {capacity} GPUs")]
    InstanceTooLarge {
        job: JobId,
        gpus: u32,
        capacity: u32,
    },
    #[error("job {job}: GPUs per instance must be at least 1")]
    ZeroGpus { job: JobId },
    #[error("job {0} is already placed")]
    DuplicateJob(JobId),
    #[error("job {0} is not placed")]
    UnknownJob(JobId),
    #[error("node {node} does not exist (cluster has {nodes} nodes)")]
    UnknownNode { node: NodeId, nodes: u32 },
    #[error("job {job}: layout does not match the job shape: {why}")]
    BadLayout { job: JobId, why: String },
    #[error("node {node}: adopting job {job} would put {used} GPUs on a node of {capacity}")]
    Overcommit {
        job: JobId,
        node: NodeId,
        used: u32,
        capacity: u32,
    },
    #[error("{file}:{line}: field `{field}`: {why}")]
    Trace {
        file: String,
        line: u64,
        field: String,
        why: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("GRES/TRES `{input}`: {why}")]
    Gres { input: String, why: String },
    #[error("budget tree: team `{node}`, field `{field}`: {why}")]
    Budget {
        node: String,
        field: String,
        why: String,
    },
    #[error("invalid duration `{value}`: {why}; accepted forms: {forms}", forms = crate::duration::FORMS)]
    BadDuration { value: String, why: String },
    #[error("invalid duration `{0}`: a bare number is ambiguous here (Slurm reads minutes, compass used to read seconds): write `{0}s`, `{0}m` or `{0}h`, or Slurm's `H:MM:SS`")]
    AmbiguousDuration(String),
    #[error("account `{0}` is not mapped to any leaf of the budget tree")]
    UnknownAccount(String),
}

pub type Result<T> = std::result::Result<T, CoreError>;
