//! Physical GPU accounting shared by every policy: used GPUs per node, where
//! each running instance sits, and incremental counts of partial and empty
//! nodes (paper Section 3.1: a *partial* node is non-empty with fewer GPUs in
//! use than its capacity).
//!
//! Nodes are also indexed by free GPUs, so best-fit queries cost `O(G log N)`.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::error::{CoreError, Result};
use crate::model::{ClusterSpec, JobId, JobRequest, NodeId, NodeSet};
use crate::placement::node_bits::NodeBits;

/// A running job: its request and the node of each instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningJob {
    pub request: JobRequest,
    /// `nodes[k]` hosts instance `k`.
    pub nodes: Vec<NodeId>,
    /// GPUs of instance `k`: all `g` for a `w x g` job; per-node amounts for
    /// a job outside the model (see [`Occupancy::add_foreign`]).
    pub gpus: Vec<u32>,
}

#[derive(Clone, Debug)]
pub struct Occupancy {
    spec: ClusterSpec,
    used: Vec<u32>,
    /// `by_free[f]`: nodes with exactly `f` free GPUs.
    by_free: Vec<NodeBits>,
    /// Hashed: looked up at every event; never iterated in an order that
    /// decides anything ([`Occupancy::jobs`]).
    jobs: FxHashMap<JobId, RunningJob>,
    partial: u32,
    empty: u32,
    used_total: u64,
    /// Running instances by GPUs per instance: `counts[g]`.
    counts: [u64; 9],
    /// GPUs per node held by jobs that may not move (not movable, or
    /// outside the model): no Compact frees them.
    fixed: Vec<u32>,
    /// `by_reach[r]`: how many nodes have `r = capacity - fixed` GPUs that
    /// moves could make free ([`Occupancy::reach_fit`]).
    by_reach: Vec<u64>,
}

impl Occupancy {
    pub fn new(spec: ClusterSpec) -> Self {
        let g = spec.gpus_per_node as usize;
        let mut by_free = vec![NodeBits::new(); g + 1];
        by_free[g] = (0..spec.nodes).collect();
        Self {
            spec,
            used: vec![0; spec.nodes as usize],
            by_free,
            jobs: FxHashMap::default(),
            partial: 0,
            empty: spec.nodes,
            used_total: 0,
            counts: [0; 9],
            fixed: vec![0; spec.nodes as usize],
            by_reach: {
                let mut r = vec![0; g + 1];
                r[g] = u64::from(spec.nodes);
                r
            },
        }
    }

    pub fn spec(&self) -> ClusterSpec {
        self.spec
    }
    pub fn capacity(&self) -> u32 {
        self.spec.gpus_per_node
    }
    /// GPUs in use on `node`.
    ///
    /// # Panics
    ///
    /// When `node` is not a node of the cluster, as [`Occupancy::free`].
    pub fn used(&self, node: NodeId) -> u32 {
        self.used[node as usize]
    }
    /// Free GPUs on `node`.
    ///
    /// # Panics
    ///
    /// When `node` is not a node of the cluster (`node >= spec().nodes`):
    /// a precondition of every caller, which takes ids from the layout or
    /// checks them (`ClusterSpec::check_node`).
    pub fn free(&self, node: NodeId) -> u32 {
        self.capacity() - self.used[node as usize]
    }
    /// `Phi_pi`: the number of partial nodes.
    pub fn partial_nodes(&self) -> u32 {
        self.partial
    }
    pub fn empty_nodes(&self) -> u32 {
        self.empty
    }
    pub fn used_gpus(&self) -> u64 {
        self.used_total
    }
    /// GPUs free on all nodes together.
    pub fn free_gpus(&self) -> u64 {
        self.spec.total_gpus().saturating_sub(self.used_total)
    }
    /// Running instances by GPUs per instance (`[g]`, index 0 unused).
    pub fn instance_counts(&self) -> &[u64; 9] {
        &self.counts
    }
    pub fn job(&self, job: JobId) -> Option<&RunningJob> {
        self.jobs.get(&job)
    }
    /// The running jobs, in no particular order (sort them where the
    /// order decides anything).
    pub fn jobs(&self) -> impl Iterator<Item = &RunningJob> {
        self.jobs.values()
    }
    pub fn running_jobs(&self) -> usize {
        self.jobs.len()
    }
    /// `sum_n floor(free_n / g)`: how many instances of `g` GPUs fit on
    /// the free GPUs as they are, one node each; `O(G)`, from the index by
    /// free GPUs (the head's reservation and `fits_now`, issue #11).
    pub fn fit(&self, g: u32) -> u64 {
        let g = g.max(1);
        (g..=self.capacity())
            .map(|f| self.by_free[f as usize].len() as u64 * u64::from(f / g))
            .sum()
    }

    /// `sum_n floor(reach_n / g)`, where `reach_n` is node `n`'s capacity
    /// less the GPUs of jobs that may not move there: how many instances of
    /// `g` GPUs could fit after any moves of the movable jobs, one node
    /// each. An upper bound of [`Occupancy::fit`] after every Compact (a
    /// move frees at most the movable jobs' GPUs of a node); `O(G)`, from
    /// the index by reach (issue #11: the gate closes without a trial when
    /// this bound already says no waiting job can start).
    pub fn reach_fit(&self, g: u32) -> u64 {
        let g = g.max(1);
        (g..=self.capacity())
            .map(|r| self.by_reach[r as usize] * u64::from(r / g))
            .sum()
    }

    /// Node `n`'s reach: its capacity less the GPUs of jobs that may not
    /// move there (not movable by their own verdict, or outside the
    /// model), kept as jobs start, end, move and change movability.
    pub fn reach(&self, n: NodeId) -> u32 {
        self.capacity() - self.fixed[n as usize]
    }

    /// [`Occupancy::reach_fit`] as if the jobs `movable` could move (held
    /// still now, but free to move in the trial the bound stands for: the
    /// controller's jobs held for tidying, which the gate's trial releases,
    /// or the simulator's departing job); jobs outside the model, unknown
    /// or already movable change nothing. `O(G + instances of movable)`.
    pub fn reach_fit_with(&self, g: u32, movable: &[JobId]) -> u64 {
        let g = g.max(1);
        let cap = self.capacity();
        let mut fit = self.reach_fit(g);
        let mut freed: BTreeMap<NodeId, u32> = BTreeMap::new();
        for j in movable {
            let Some(r) = self.jobs.get(j) else { continue };
            if r.request.movable || r.request.shape.gpus == 0 {
                continue;
            }
            for (&n, &k) in r.nodes.iter().zip(&r.gpus) {
                *freed.entry(n).or_default() += k;
            }
        }
        for (n, k) in freed {
            // (`k <= fixed`: the job's GPUs are among the node's fixed
            // ones, unless a job is listed twice)
            let reach = self.reach(n);
            fit = fit + u64::from((reach + k).min(cap) / g) - u64::from(reach / g);
        }
        fit
    }

    /// Nodes with exactly `free` free GPUs, lowest index first.
    pub fn nodes_with_free(&self, free: u32) -> impl Iterator<Item = NodeId> + '_ {
        self.by_free[free as usize].iter()
    }

    /// Best fit: the allowed node whose free GPUs are the fewest that still fit
    /// `g` (lowest index on ties).
    pub fn best_fit(&self, g: u32, allowed: Option<&NodeSet>) -> Option<NodeId> {
        (g..=self.capacity()).find_map(|f| {
            self.by_free[f as usize]
                .iter()
                .find(|n| allowed.is_none_or(|a| a.contains(*n)))
        })
    }

    /// First fit: the lowest-index allowed node with at least `g` free GPUs
    /// (Slurm's default node order).
    pub fn first_fit(&self, g: u32, allowed: Option<&NodeSet>) -> Option<NodeId> {
        (g..=self.capacity())
            .filter_map(|f| {
                self.by_free[f as usize]
                    .iter()
                    .find(|n| allowed.is_none_or(|a| a.contains(*n)))
            })
            .min()
    }

    fn adjust(&mut self, node: NodeId, delta: i64) {
        let cap = self.capacity();
        let before = self.used[node as usize];
        let after = (i64::from(before) + delta) as u32;
        debug_assert!(after <= cap);
        let class = |u: u32| (u == 0, u > 0 && u < cap);
        let (e0, p0) = class(before);
        let (e1, p1) = class(after);
        self.empty = self.empty + u32::from(e1) - u32::from(e0);
        self.partial = self.partial + u32::from(p1) - u32::from(p0);
        self.by_free[(cap - before) as usize].remove(node);
        self.by_free[(cap - after) as usize].insert(node);
        self.used[node as usize] = after;
        self.used_total = (self.used_total as i64 + delta) as u64;
    }

    /// Adds `delta` GPUs that may not move to `node` (its reach falls).
    fn adjust_fixed(&mut self, node: NodeId, delta: i64) {
        let cap = self.capacity();
        shift_fixed(&mut self.fixed, &mut self.by_reach, cap, node, delta);
    }

    /// Sets the movable flag of a running job.
    pub fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        let r = self.jobs.get_mut(&job).ok_or(CoreError::UnknownJob(job))?;
        if r.request.movable == movable {
            return Ok(());
        }
        r.request.movable = movable;
        let sign = if movable { -1 } else { 1 };
        let cap = self.spec.gpus_per_node;
        for (&n, &g) in r.nodes.iter().zip(&r.gpus) {
            shift_fixed(
                &mut self.fixed,
                &mut self.by_reach,
                cap,
                n,
                sign * i64::from(g),
            );
        }
        Ok(())
    }

    /// Records a running job on `nodes` (one entry per instance). Checks the
    /// shape and that no node is over-committed; on error nothing changes.
    pub fn add(&mut self, request: &JobRequest, nodes: Vec<NodeId>) -> Result<()> {
        self.spec.check_job(request)?;
        if self.jobs.contains_key(&request.id) {
            return Err(CoreError::DuplicateJob(request.id));
        }
        if nodes.len() != request.shape.instances as usize {
            return Err(CoreError::BadLayout {
                job: request.id,
                why: format!(
                    "{} nodes given for {} instances",
                    nodes.len(),
                    request.shape.instances
                ),
            });
        }
        let g = request.shape.gpus;
        let mut extra: BTreeMap<NodeId, u32> = BTreeMap::new();
        for &n in &nodes {
            self.spec.check_node(n)?;
            *extra.entry(n).or_default() += g;
        }
        for (&n, &add) in &extra {
            let used = self.used(n) + add;
            if used > self.capacity() {
                return Err(CoreError::Overcommit {
                    job: request.id,
                    node: n,
                    used,
                    capacity: self.capacity(),
                });
            }
        }
        for (&n, &add) in &extra {
            self.adjust(n, i64::from(add));
            if !request.movable {
                self.adjust_fixed(n, i64::from(add));
            }
        }
        self.counts[g as usize] += u64::from(request.shape.instances);
        let gpus = vec![g; nodes.len()];
        self.jobs.insert(
            request.id,
            RunningJob {
                request: request.clone(),
                nodes,
                gpus,
            },
        );
        Ok(())
    }

    /// Records GPUs held by a job outside the `w x g` model (Slurm's
    /// `--gpus=3` spread over nodes): one chunk per node, never movable. For
    /// `Phi*` each chunk counts as an instance of its size.
    pub fn add_foreign(&mut self, job: JobId, chunks: &[(NodeId, u32)]) -> Result<()> {
        if self.jobs.contains_key(&job) {
            return Err(CoreError::DuplicateJob(job));
        }
        if chunks.is_empty() || chunks.iter().any(|c| c.1 == 0) {
            return Err(CoreError::BadLayout {
                job,
                why: "no GPUs in the chunks".into(),
            });
        }
        // In u64: counts near u32::MAX overflowed (issue #11: a panic in a
        // debug build, a wrapped count accepted in a release one).
        let mut extra: BTreeMap<NodeId, u64> = BTreeMap::new();
        for &(n, g) in chunks {
            self.spec.check_node(n)?;
            *extra.entry(n).or_default() += u64::from(g);
        }
        for (&n, &add) in &extra {
            let used = u64::from(self.used(n)) + add;
            if used > u64::from(self.capacity()) {
                let used = u32::try_from(used).unwrap_or(u32::MAX);
                return Err(CoreError::Overcommit {
                    job,
                    node: n,
                    used,
                    capacity: self.capacity(),
                });
            }
        }
        // Each within the node's capacity now.
        let extra: BTreeMap<NodeId, u32> = extra
            .into_iter()
            .map(|(n, g)| (n, u32::try_from(g).unwrap_or(u32::MAX)))
            .collect();
        for (&n, &add) in &extra {
            self.adjust(n, i64::from(add));
            self.adjust_fixed(n, i64::from(add));
            self.counts[add.min(8) as usize] += 1;
        }
        let request = JobRequest {
            id: job,
            shape: crate::model::JobShape::new(extra.len() as u32, 0),
            movable: false,
        };
        self.jobs.insert(
            job,
            RunningJob {
                request,
                nodes: extra.keys().copied().collect(),
                gpus: extra.values().copied().collect(),
            },
        );
        Ok(())
    }

    /// Forgets a running job and frees its GPUs.
    pub fn remove(&mut self, job: JobId) -> Result<RunningJob> {
        let running = self.jobs.remove(&job).ok_or(CoreError::UnknownJob(job))?;
        for (&n, &g) in running.nodes.iter().zip(&running.gpus) {
            self.adjust(n, -i64::from(g));
            if !running.request.movable {
                self.adjust_fixed(n, -i64::from(g));
            }
            self.counts[g.min(8) as usize] -= 1;
        }
        Ok(running)
    }

    /// Moves one instance. The caller guarantees room on `to`.
    pub fn move_instance(&mut self, job: JobId, instance: u32, to: NodeId) -> Result<NodeId> {
        let running = self.jobs.get(&job).ok_or(CoreError::UnknownJob(job))?;
        let g = running.gpus.get(instance as usize).copied().unwrap_or(0);
        let from = *running
            .nodes
            .get(instance as usize)
            .ok_or_else(|| CoreError::Invalid(format!("job {job} has no instance {instance}")))?;
        self.spec.check_node(to)?;
        if from == to {
            return Ok(from);
        }
        if self.free(to) < g {
            return Err(CoreError::Overcommit {
                job,
                node: to,
                used: self.used(to) + g,
                capacity: self.capacity(),
            });
        }
        let movable = running.request.movable;
        self.adjust(from, -i64::from(g));
        self.adjust(to, i64::from(g));
        if !movable {
            // (an undone trial moves a job home that was held still since)
            self.adjust_fixed(from, -i64::from(g));
            self.adjust_fixed(to, i64::from(g));
        }
        if let Some(r) = self.jobs.get_mut(&job) {
            r.nodes[instance as usize] = to;
        }
        Ok(from)
    }
}

/// Adds `delta` GPUs that may not move to `node` in `fixed`, and moves the
/// node between the levels of `by_reach` ([`Occupancy`]'s two fields, apart
/// so a caller can hold a job's record meanwhile).
fn shift_fixed(fixed: &mut [u32], by_reach: &mut [u64], cap: u32, node: NodeId, delta: i64) {
    let before = fixed[node as usize];
    let after = (i64::from(before) + delta) as u32;
    debug_assert!(after <= cap);
    by_reach[(cap - before) as usize] -= 1;
    by_reach[(cap - after) as usize] += 1;
    fixed[node as usize] = after;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_partial_and_empty_nodes() {
        let spec = ClusterSpec::new(3, 8).unwrap();
        let mut o = Occupancy::new(spec);
        o.add(&JobRequest::new(1, 2, 4), vec![0, 0]).unwrap();
        o.add(&JobRequest::new(2, 1, 3), vec![1]).unwrap();
        assert_eq!(
            (o.partial_nodes(), o.empty_nodes(), o.used_gpus()),
            (1, 1, 11)
        );
        assert_eq!(o.best_fit(2, None), Some(1));
        assert_eq!(o.first_fit(6, None), Some(2));
        assert!(matches!(
            o.add(&JobRequest::new(3, 1, 6), vec![1]),
            Err(CoreError::Overcommit { .. })
        ));
        o.move_instance(JobId(2), 0, 2).unwrap();
        assert_eq!(o.used(1), 0);
        o.remove(JobId(1)).unwrap();
        assert_eq!(
            (o.partial_nodes(), o.empty_nodes(), o.used_gpus()),
            (1, 2, 3)
        );
        assert_eq!(o.instance_counts()[4], 0);
    }

    #[test]
    fn reach_counts_the_gpus_moves_could_free() {
        // n0: a movable 1 x 4 job; n1: a pinned 1 x 4 job; n2: foreign 2.
        let mut o = Occupancy::new(ClusterSpec::new(3, 8).unwrap());
        o.add(&JobRequest::new(1, 1, 4), vec![0]).unwrap();
        let mut pinned = JobRequest::new(2, 1, 4);
        pinned.movable = false;
        o.add(&pinned, vec![1]).unwrap();
        o.add_foreign(JobId(3), &[(2, 2)]).unwrap();
        // Physically one 8-GPU room is missing everywhere; moves could
        // clear n0 only.
        assert_eq!((o.fit(8), o.reach_fit(8)), (0, 1));
        assert_eq!((o.fit(4), o.reach_fit(4)), (3, 4));
        assert_eq!(o.reach_fit_with(8, &[JobId(2)]), 2, "job 2 counted movable");
        assert_eq!(o.reach_fit_with(8, &[JobId(1), JobId(3), JobId(9)]), 1);
        o.set_movable(JobId(2), true).unwrap();
        assert_eq!(o.reach_fit(8), 2);
        o.set_movable(JobId(1), false).unwrap();
        o.set_movable(JobId(1), false).unwrap();
        assert_eq!(o.reach_fit(8), 1);
        // A pinned job moved (an undone trial) takes its reach along.
        o.move_instance(JobId(1), 0, 2).unwrap();
        assert_eq!((o.reach_fit(8), o.reach_fit(2)), (2, 4 + 4 + 1));
        o.remove(JobId(1)).unwrap();
        o.remove(JobId(3)).unwrap();
        assert_eq!(o.reach_fit(8), 3);
    }
}
