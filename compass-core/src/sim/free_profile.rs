//! Free GPUs over time, in counts: the profile one backfill pass of the
//! policy simulator keeps ([`crate::sim::budgets::Backfill::Reserve`]).
//! Running jobs give their GPUs back at their expected ends; every job the
//! pass starts or reserves for takes its GPUs over its expected run. A job
//! may start now only when its GPUs stay free over its whole run, so it
//! delays no reservation made before it (Slurm's sched/backfill rule, in
//! GPU counts rather than nodes).

use crate::clock::Seconds;

/// Free GPUs as a step function of time from `now` on: `free` GPUs from
/// each step's time until the next step's (the last step's for ever).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FreeProfile {
    /// `(from, free)`, by increasing `from`; the first step is `now`.
    steps: Vec<(Seconds, u64)>,
}

impl FreeProfile {
    /// `free_now` GPUs free at `now`, and `gpus` more free from each
    /// `(end, gpus)` of `returns` on (the running jobs' expected ends). An
    /// end at or before `now` (a job whose end is due at this instant but
    /// not yet processed) frees its GPUs just after `now`, never at `now`:
    /// they are busy now.
    pub(crate) fn new(
        now: Seconds,
        free_now: u64,
        returns: impl IntoIterator<Item = (Seconds, u64)>,
    ) -> Self {
        let mut returns: Vec<(Seconds, u64)> = returns
            .into_iter()
            .map(|(end, gpus)| (if end > now { end } else { now.next_up() }, gpus))
            .collect();
        returns.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut steps = vec![(now, free_now)];
        for (end, gpus) in returns {
            let (last_from, last_free) = steps[steps.len() - 1];
            if end == last_from {
                steps.last_mut().expect("the first step").1 += gpus;
            } else {
                steps.push((end, last_free + gpus));
            }
        }
        Self { steps }
    }

    /// The earliest step time from which `gpus` GPUs stay free for `run`
    /// seconds (now, if they are free now until `now + run`); `None` when
    /// they never are (more GPUs than ever come free).
    pub(crate) fn earliest(&self, gpus: u64, run: Seconds) -> Option<Seconds> {
        self.earliest_from(0, gpus, run)
    }

    /// As [`Self::earliest`], but at a step after now: where a job that
    /// fits now in GPU counts but could not be placed (its nodes are
    /// fragmented) could start next.
    pub(crate) fn earliest_later(&self, gpus: u64, run: Seconds) -> Option<Seconds> {
        self.earliest_from(1, gpus, run)
    }

    fn earliest_from(&self, first: usize, gpus: u64, run: Seconds) -> Option<Seconds> {
        let steps = &self.steps;
        let mut k = first;
        while let Some(&(start, free)) = steps.get(k) {
            if free < gpus {
                k += 1;
                continue;
            }
            // The first later step within the run with too few GPUs.
            let short = (k + 1..steps.len())
                .take_while(|&j| steps[j].0 < start + run)
                .find(|&j| steps[j].1 < gpus);
            match short {
                None => return Some(start),
                Some(j) => k = j + 1,
            }
        }
        None
    }

    /// Takes `gpus` GPUs over `[from, from + run)`: a job started now, or
    /// a reservation. The caller takes only GPUs that [`Self::earliest`]
    /// found free there.
    pub(crate) fn take(&mut self, from: Seconds, run: Seconds, gpus: u64) {
        if run.is_nan() || run <= 0.0 || gpus == 0 {
            return;
        }
        let a = self.split(from);
        let b = self.split(from + run);
        for step in &mut self.steps[a..b] {
            debug_assert!(step.1 >= gpus, "taking GPUs that are not free");
            step.1 = step.1.saturating_sub(gpus);
        }
        // A step that now frees as many GPUs as the one before it is merged
        // into it (a job that fits from the later one fits from the earlier
        // one too), so reservations stacked end to end keep the profile
        // short; now stays a step of its own ([`Self::earliest_later`]).
        if b >= 2 && b < self.steps.len() && self.steps[b].1 == self.steps[b - 1].1 {
            self.steps.remove(b);
        }
        if a >= 2 && self.steps[a].1 == self.steps[a - 1].1 {
            self.steps.remove(a);
        }
    }

    /// The index of the step that starts at `t` (at or after now), made
    /// if needed by splitting the step that holds `t`.
    fn split(&mut self, t: Seconds) -> usize {
        let k = self.steps.partition_point(|s| s.0 <= t);
        // `k >= 1`: the first step is now, and `t` is not before it.
        if self.steps[k - 1].0 == t {
            return k - 1;
        }
        let free = self.steps[k - 1].1;
        self.steps.insert(k, (t, free));
        k
    }

    /// Free GPUs at time `t` (at or after now).
    #[cfg(test)]
    fn at(&self, t: Seconds) -> u64 {
        let k = self.steps.partition_point(|s| s.0 <= t);
        self.steps[k.max(1) - 1].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 8 GPUs: 2 free at 100 s, 4 more back at 200 s, 2 more at 300 s.
    fn profile() -> FreeProfile {
        FreeProfile::new(100.0, 2, [(300.0, 2), (200.0, 4)])
    }

    #[test]
    fn running_jobs_give_their_gpus_back_at_their_ends() {
        let p = profile();
        assert_eq!(
            (p.at(100.0), p.at(199.0), p.at(200.0), p.at(1e9)),
            (2, 2, 6, 8)
        );
        assert_eq!(p.earliest(2, 1e6), Some(100.0), "fits now, for ever");
        assert_eq!(p.earliest(3, 10.0), Some(200.0));
        assert_eq!(p.earliest(8, 10.0), Some(300.0));
        assert_eq!(p.earliest(9, 10.0), None, "more than the cluster");
        assert_eq!(p.earliest_later(2, 10.0), Some(200.0), "after now");
    }

    #[test]
    fn ends_that_are_due_free_gpus_just_after_now() {
        let p = FreeProfile::new(100.0, 0, [(100.0, 4), (50.0, 4)]);
        assert_eq!(p.at(100.0), 0, "busy now");
        assert_eq!(p.earliest(8, 10.0), Some(100.0f64.next_up()));
    }

    /// Backfill's rule: a job may go ahead of a reservation only when it
    /// ends before the reservation starts, or the reservation leaves it
    /// room.
    #[test]
    fn a_reservation_lets_short_jobs_pass_and_holds_long_ones() {
        let mut p = profile();
        // a 6-GPU job reserves [200, 260)
        assert_eq!(p.earliest(6, 60.0), Some(200.0));
        p.take(200.0, 60.0, 6);
        assert_eq!(
            (p.at(199.0), p.at(200.0), p.at(260.0), p.at(300.0)),
            (2, 0, 6, 8)
        );
        assert_eq!(p.earliest(2, 100.0), Some(100.0), "ends by 200 s");
        assert_eq!(
            p.earliest(2, 101.0),
            Some(260.0),
            "would hold 2 GPUs the reservation needs at 200 s"
        );
        assert_eq!(p.earliest(8, 10.0), Some(300.0));
    }

    /// What a pass has done to a profile, kept plainly: the free GPUs now,
    /// the running jobs' returns and the GPUs taken over each interval.
    struct Plain {
        now: f64,
        free_now: u64,
        returns: Vec<(f64, u64)>,
        taken: Vec<(f64, f64, u64)>,
    }

    impl Plain {
        fn free(&self, t: f64) -> u64 {
            let back: u64 = self.returns.iter().filter(|r| r.0 <= t).map(|r| r.1).sum();
            let taken: u64 = self
                .taken
                .iter()
                .filter(|k| k.0 <= t && t < k.1)
                .map(|k| k.2)
                .sum();
            self.free_now + back - taken
        }

        /// Every time at which the free GPUs may change, now first.
        fn times(&self) -> Vec<f64> {
            let mut times: Vec<f64> = std::iter::once(self.now)
                .chain(self.returns.iter().map(|r| r.0))
                .chain(self.taken.iter().flat_map(|k| [k.0, k.1]))
                .collect();
            times.sort_by(f64::total_cmp);
            times.dedup();
            times
        }

        /// [`FreeProfile::earliest`] by its definition (after now: `later`).
        fn earliest(&self, later: bool, gpus: u64, run: f64) -> Option<f64> {
            let times = self.times();
            times
                .iter()
                .copied()
                .filter(|&t| !later || t > self.now)
                .find(|&t| {
                    times
                        .iter()
                        .filter(|&&u| u >= t && u < t + run)
                        .all(|&u| self.free(u) >= gpus)
                })
        }
    }

    /// A pass's worth of reservations and starts, each where the profile
    /// says (its steps merged as they level): every answer is the
    /// definition's, and the profile's free GPUs are the plain count's at
    /// every time.
    #[test]
    fn searches_agree_with_the_definition_through_a_pass() {
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for _ in 0..50 {
            let returns: Vec<(f64, u64)> = (0..next(12))
                .map(|_| (110.0 + 10.0 * next(30) as f64, 1 + next(8)))
                .collect();
            let total: u64 = returns.iter().map(|r| r.1).sum::<u64>() + 4;
            let mut p = FreeProfile::new(100.0, 4, returns.clone());
            let mut plain = Plain {
                now: 100.0,
                free_now: 4,
                returns,
                taken: Vec::new(),
            };
            for _ in 0..40 {
                // runs of whole 10 s, as the returns: ends meet steps
                let (gpus, run) = (1 + next(total + 1), 10.0 + 10.0 * next(20) as f64);
                let later = next(4) == 0;
                let got = if later {
                    p.earliest_later(gpus, run)
                } else {
                    p.earliest(gpus, run)
                };
                let want = plain.earliest(later, gpus, run);
                assert_eq!(got, want, "{gpus} GPUs for {run} s, later {later}: {p:?}");
                if let Some(t) = got {
                    p.take(t, run, gpus);
                    plain.taken.push((t, t + run, gpus));
                }
                assert!(p.steps.windows(2).all(|w| w[0].0 < w[1].0), "{p:?}");
                for t in plain.times() {
                    assert_eq!(p.at(t), plain.free(t), "at {t}: {p:?}");
                }
            }
        }
    }

    /// A step left level with now by a start is no step merged into now:
    /// a job that could not be placed now is reserved for from there.
    #[test]
    fn now_stays_a_step_of_its_own() {
        let mut p = FreeProfile::new(100.0, 8, [(200.0, 4)]);
        p.take(200.0, 100.0, 8);
        p.take(100.0, 100.0, 4);
        assert_eq!(p.steps, vec![(100.0, 4), (200.0, 4), (300.0, 12)]);
        assert_eq!(p.earliest_later(4, 50.0), Some(200.0));
        p.take(300.0, 50.0, 8);
        assert_eq!(
            p.steps,
            vec![(100.0, 4), (200.0, 4), (350.0, 12)],
            "a step after now left level with the one before is merged into it"
        );
    }

    #[test]
    fn taking_splits_steps_and_subtracts_only_within_the_run() {
        let mut p = profile();
        p.take(100.0, 150.0, 2);
        assert_eq!(
            p.steps,
            vec![(100.0, 0), (200.0, 4), (250.0, 6), (300.0, 8)]
        );
        p.take(260.0, 0.0, 4);
        assert_eq!(p.steps.len(), 4, "a run of no time takes nothing");
        p.take(260.0, 1e9, 6);
        assert_eq!(p.at(259.0), 6);
        assert_eq!(p.at(260.0), 0);
        assert_eq!(p.at(300.0), 2);
        assert_eq!(p.at(260.0 + 1e9), 8);
    }
}
