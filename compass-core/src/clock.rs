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
