//! Waits that a stop request ends promptly: the select plugin's thread
//! sleeps and polls only through [`poll_until`], so `fini` (slurmctld
//! shutting down) never waits for a whole migration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited<T> {
    /// `check` answered.
    Done(T),
    /// The stop flag was raised.
    Stopped,
    /// `timeout` passed first.
    TimedOut,
}

/// Calls `check` every `step` until it answers `Some`, `stop` is raised or
/// `timeout` passes. The flag is looked at before every call and at least
/// every 50 ms while sleeping.
pub fn poll_until<T>(
    stop: &AtomicBool,
    timeout: Duration,
    step: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Waited<T> {
    let t0 = Instant::now();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Waited::Stopped;
        }
        if let Some(v) = check() {
            return Waited::Done(v);
        }
        if t0.elapsed() >= timeout {
            return Waited::TimedOut;
        }
        if sleep(stop, step.min(timeout.saturating_sub(t0.elapsed()))) {
            return Waited::Stopped;
        }
    }
}

/// Sleeps `d`, waking at least every 50 ms to look at `stop`; `true` when
/// it was raised.
pub fn sleep(stop: &AtomicBool, d: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < d {
        if stop.load(Ordering::SeqCst) {
            return true;
        }
        std::thread::sleep((d - t0.elapsed()).min(Duration::from_millis(50)));
    }
    stop.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn answers_times_out_and_stops() {
        let stop = AtomicBool::new(false);
        let mut n = 0;
        let r = poll_until(
            &stop,
            Duration::from_secs(5),
            Duration::from_millis(1),
            || {
                n += 1;
                (n == 3).then_some(n)
            },
        );
        assert_eq!(r, Waited::Done(3));
        let r: Waited<()> = poll_until(
            &stop,
            Duration::from_millis(30),
            Duration::from_millis(10),
            || None,
        );
        assert_eq!(r, Waited::TimedOut);
        stop.store(true, Ordering::SeqCst);
        let r = poll_until(
            &stop,
            Duration::from_secs(5),
            Duration::from_millis(1),
            || Some(1),
        );
        assert_eq!(r, Waited::Stopped, "a raised flag wins over an answer");
    }

    #[test]
    fn a_stop_request_ends_a_long_wait_promptly() {
        // A 10-minute wait, stopped from another thread after 100 ms, ends
        // far sooner than the wait (5 s: a loose bound, the machine is shared).
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = Arc::clone(&stop);
        let raiser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            s2.store(true, Ordering::SeqCst);
        });
        let t0 = Instant::now();
        let r: Waited<()> = poll_until(
            &stop,
            Duration::from_secs(600),
            Duration::from_secs(60),
            || None,
        );
        assert_eq!(r, Waited::Stopped);
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        raiser.join().unwrap();
        stop.store(false, Ordering::SeqCst);
        let s3 = Arc::clone(&stop);
        let raiser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            s3.store(true, Ordering::SeqCst);
        });
        let t0 = Instant::now();
        assert!(sleep(&stop, Duration::from_secs(600)));
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        raiser.join().unwrap();
    }
}
