//! Org-tree GPU budgets and hierarchical fair-share ordering (issue 4; see
//! `fair-share-budgets.txt`). Pure: no I/O, time is passed in as Unix
//! seconds by the caller (from its [`crate::clock::Clock`]).
//!
//! - [`tree`]: the org tree, its validation, leaf shares as products.
//! - [`ledger`]: run intervals (allocated / unallocated), idempotent ingest,
//!   usage over a window.
//! - [`order`]: fair-share ratios, the queue order (tree walk), explanations,
//!   Slurm site factors.
//! - [`weights`]: GPU weights by type (`[gpu_weights]`): every charge,
//!   allocation and capacity is in weighted GPU-seconds.

pub mod ledger;
pub mod order;
pub mod tree;
pub mod weights;

pub use ledger::{IngestOutcome, Interval, IntervalKey, Kind, Ledger, UnixSecs, Usage};
pub use order::{
    account_ratios, changed_factors, explain, node_stats, order_queue, order_queue_by, ratio,
    site_factors, sparse_keys, sparse_keys_spaced, sparse_site_factors, sparse_site_factors_spaced,
    stats_at, team_orders, unbudgeted_usage, FreeOrder, LevelPos, NodeStats, PendingJob, Placed,
    QueueOrder, QueueState, RunningGpus, TeamNow, TeamOrder, TeamOrders, DEFAULT_WINDOW_S,
    SITE_FACTOR_BASE, SITE_KEY_MAX, SITE_KEY_MIN, SITE_KEY_MIN_SPACING, SITE_KEY_STRIDE,
};
pub use tree::{diff, NodeIx, NodeSpec, OrgTree, TreeChange};
pub use weights::{GpuWeights, DEFAULT_GPU_WEIGHT};

/// Reads "now" from an injected clock as whole Unix seconds.
pub fn now_secs(clock: &dyn crate::clock::Clock) -> UnixSecs {
    clock.now().floor() as UnixSecs
}
