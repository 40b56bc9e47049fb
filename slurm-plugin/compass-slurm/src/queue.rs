//! The pending GPU jobs `narrow` saw lately ([`crate::controller::Controller`]'s
//! gate `select.move_when` and the head's guard). Slurm offers each
//! pending job again at every scheduling pass, so an offer of a job already
//! waiting only marks it seen again; the jobs' shapes are indexed as jobs
//! come and go, and a tick reads the distinct shapes from that index
//! rather than comparing every waiting job with every shape found (issue
//! #11: with 100 jobs waiting, a sixteenth of a departure's cost in the
//! plugin bench). The tick's other reads (the offers too old, the head by
//! priority, which an offer resets) stay one pass over the jobs.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use compass_core::model::JobShape;
use compass_core::placement::head::WaitingJob;

/// A pending GPU job as `narrow` last saw it.
#[derive(Clone, Debug)]
pub(crate) struct Waiting {
    /// Its shape and the GPU type it names.
    pub shape: JobShape,
    pub gpu_type: Option<String>,
    /// Slurm's priority ([`Queue::set_priority`]; 0 until known).
    pub priority: u32,
    /// The tick that first saw this offer (`None`: since the last tick).
    pub seen: Option<u64>,
}

impl Waiting {
    /// A job just offered: priority not known yet, not seen by a tick.
    pub fn offered(shape: JobShape, gpu_type: Option<String>) -> Self {
        Self {
            shape,
            gpu_type,
            priority: 0,
            seen: None,
        }
    }
}

/// The waiting jobs by id, and by shape and GPU type.
#[derive(Clone, Debug, Default)]
pub(crate) struct Queue {
    jobs: BTreeMap<u64, Waiting>,
    /// The waiting jobs of each shape and GPU type (changed when a job
    /// comes or goes, not at each offer).
    by_kind: FxHashMap<(JobShape, Option<String>), BTreeSet<u64>>,
}

impl Queue {
    pub fn contains(&self, id: u64) -> bool {
        self.jobs.contains_key(&id)
    }

    /// `id` is offered as `w`: it waits, its priority not known again and
    /// its offer not seen by a tick yet. A job already waiting with the
    /// same shape and GPU type is only marked so (no index changes).
    pub fn offer(&mut self, id: u64, w: Waiting) {
        if let Some(old) = self.jobs.get_mut(&id) {
            if old.shape == w.shape && old.gpu_type == w.gpu_type {
                *old = w;
                return;
            }
            self.remove(id);
        }
        self.by_kind
            .entry((w.shape, w.gpu_type.clone()))
            .or_default()
            .insert(id);
        self.jobs.insert(id, w);
    }

    /// `id` waits no more (it started or ended, or its offer is too old).
    pub fn remove(&mut self, id: u64) -> Option<Waiting> {
        let w = self.jobs.remove(&id)?;
        let key = (w.shape, w.gpu_type.clone());
        if let Some(ids) = self.by_kind.get_mut(&key) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_kind.remove(&key);
            }
        }
        Some(w)
    }

    /// Slurm's priority of waiting job `id`.
    pub fn set_priority(&mut self, id: u64, priority: u32) {
        if let Some(w) = self.jobs.get_mut(&id) {
            w.priority = priority;
        }
    }

    /// The tick at `now`: the jobs offered since the last tick are seen
    /// now, and those whose offer was seen more than `ttl` ago leave.
    pub fn expire(&mut self, now: u64, ttl: u64) {
        let mut gone = Vec::new();
        for (&id, w) in &mut self.jobs {
            let seen = *w.seen.get_or_insert(now);
            if now.saturating_sub(seen) > ttl {
                gone.push(id);
            }
        }
        for id in gone {
            self.remove(id);
        }
    }

    /// The fewest GPUs a waiting job asks for: the least of the shapes
    /// waiting (a few, however many jobs wait).
    pub fn least_gpus(&self) -> Option<u64> {
        self.by_kind.keys().map(|(s, _)| s.total_gpus()).min()
    }

    /// The waiting GPU job Slurm starts first: highest priority, then the
    /// lowest job id (Slurm's order of equal priorities by submission).
    pub fn head(&self) -> Option<(u64, &Waiting)> {
        self.jobs
            .iter()
            .max_by(|a, b| a.1.priority.cmp(&b.1.priority).then(b.0.cmp(a.0)))
            .map(|(id, w)| (*id, w))
    }

    /// One job per shape and GPU type, the lowest id of each, in order of
    /// those ids: [`compass_core::placement::head::distinct_waiting`] of
    /// every waiting job in order of id.
    pub fn distinct(&self) -> Vec<WaitingJob<'_>> {
        let mut out: Vec<(u64, WaitingJob<'_>)> = self
            .by_kind
            .iter()
            .filter_map(|((shape, gpu_type), ids)| {
                Some((
                    *ids.first()?,
                    WaitingJob {
                        shape: *shape,
                        gpu_type: gpu_type.as_deref(),
                    },
                ))
            })
            .collect();
        out.sort_unstable_by_key(|(id, _)| *id);
        out.into_iter().map(|(_, w)| w).collect()
    }

    /// Every waiting job, by id (tests, checks).
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Waiting)> {
        self.jobs.iter().map(|(&id, w)| (id, w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use compass_core::placement::head::distinct_waiting;
    use proptest::prelude::*;

    /// The head's id, the fewest GPUs and the distinct shapes.
    type Answers = (Option<u64>, Option<u64>, Vec<(JobShape, Option<String>)>);

    /// What each index answers, computed by scanning every job as the
    /// controller did before the indexes.
    fn scanned(q: &Queue) -> Answers {
        let head = q
            .iter()
            .max_by(|a, b| a.1.priority.cmp(&b.1.priority).then(b.0.cmp(&a.0)))
            .map(|(id, _)| id);
        let least = q.iter().map(|(_, w)| w.shape.total_gpus()).min();
        let distinct = distinct_waiting(q.iter().map(|(_, w)| WaitingJob {
            shape: w.shape,
            gpu_type: w.gpu_type.as_deref(),
        }))
        .into_iter()
        .map(|w| (w.shape, w.gpu_type.map(str::to_string)))
        .collect();
        (head, least, distinct)
    }

    fn indexed(q: &Queue) -> Answers {
        let distinct = q
            .distinct()
            .into_iter()
            .map(|w| (w.shape, w.gpu_type.map(str::to_string)))
            .collect();
        (q.head().map(|(id, _)| id), q.least_gpus(), distinct)
    }

    #[derive(Clone, Debug)]
    enum Op {
        Offer {
            id: u64,
            w: u32,
            g: u32,
            typed: bool,
        },
        Priority {
            id: u64,
            p: u32,
        },
        Remove {
            id: u64,
        },
        Tick {
            advance: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..40, 1u32..3, 1u32..4, any::<bool>()).prop_map(|(id, w, g, typed)| Op::Offer {
                id,
                w,
                g,
                typed
            }),
            (0u64..40, 0u32..4).prop_map(|(id, p)| Op::Priority { id, p }),
            (0u64..40).prop_map(|id| Op::Remove { id }),
            (0u64..80).prop_map(|advance| Op::Tick { advance }),
        ]
    }

    proptest! {
        /// The head, the fewest GPUs and the distinct shapes, read from the
        /// indexes, equal a scan of every job after any sequence of offers,
        /// priorities, removals and ticks; a tick drops exactly the jobs
        /// whose offer it (or an earlier tick) saw more than the TTL ago.
        #[test]
        fn the_queues_indexes_answer_as_a_scan_of_every_job(
            ops in prop::collection::vec(op(), 1..200),
        ) {
            const TTL: u64 = 100;
            let mut q = Queue::default();
            let mut now = 0;
            for op in ops {
                match op {
                    Op::Offer { id, w, g, typed } => {
                        let t = typed.then(|| "a100".to_string());
                        q.offer(id, Waiting::offered(JobShape::new(w, g), t));
                    }
                    Op::Priority { id, p } => q.set_priority(id, p),
                    Op::Remove { id } => {
                        q.remove(id);
                    }
                    Op::Tick { advance } => {
                        now += advance;
                        let before: Vec<(u64, Option<u64>)> =
                            q.iter().map(|(id, w)| (id, w.seen)).collect();
                        q.expire(now, TTL);
                        for (id, seen) in before {
                            let stays = now - seen.unwrap_or(now) <= TTL;
                            prop_assert_eq!(q.contains(id), stays, "job {}", id);
                        }
                        prop_assert!(q.iter().all(|(_, w)| w.seen.is_some()));
                    }
                }
                prop_assert_eq!(indexed(&q), scanned(&q));
            }
        }
    }
}
