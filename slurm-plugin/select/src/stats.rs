//! Counters of the time `select_p_job_test` spends in the engine (planning,
//! narrowing) and in the stock cons_tres it wraps, for the overhead
//! benchmark (`examples/job_test_overhead.rs`). Published in the state file.

use std::sync::atomic::{AtomicU64, Ordering};

use compass_slurm::state::JobTestStats;

static CALLS: AtomicU64 = AtomicU64::new(0);
static ENGINE_NS: AtomicU64 = AtomicU64::new(0);
static STOCK_NS: AtomicU64 = AtomicU64::new(0);

pub fn record_job_test(engine_ns: u64, stock_ns: u64) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    ENGINE_NS.fetch_add(engine_ns, Ordering::Relaxed);
    STOCK_NS.fetch_add(stock_ns, Ordering::Relaxed);
}

pub fn job_test() -> JobTestStats {
    JobTestStats {
        calls: CALLS.load(Ordering::Relaxed),
        engine_ns: ENGINE_NS.load(Ordering::Relaxed),
        stock_ns: STOCK_NS.load(Ordering::Relaxed),
    }
}
