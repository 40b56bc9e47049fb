//! The injected clock. The core never reads the wall clock: drivers pass a
//! [`Clock`] (the simulator's virtual time, slurmctld's `time(NULL)`, a test's
//! [`ManualClock`]).

use std::cell::Cell;

/// Seconds since the Unix epoch (or since the start of a trace), as `f64` so the
/// simulator can use fractional event times.
pub type Seconds = f64;

pub trait Clock {
    fn now(&self) -> Seconds;
}

/// A clock that only moves when told to. For tests and the simulator.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Cell<Seconds>,
}

impl ManualClock {
    pub fn new(start: Seconds) -> Self {
        Self {
            now: Cell::new(start),
        }
    }
    pub fn set(&self, t: Seconds) {
        self.now.set(t);
    }
    pub fn advance(&self, dt: Seconds) {
        self.now.set(self.now.get() + dt);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Seconds {
        self.now.get()
    }
}

/// An instant with a total order (`f64::total_cmp`), for heaps and ordered
/// sets of event times (the simulator's queue, the head's fit over time).
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct Instant(pub Seconds);

impl Eq for Instant {}
impl PartialOrd for Instant {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Instant {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}
