//! Physical GPU accounting shared by every policy: used GPUs per node, where
//! each running instance sits, and incremental counts of partial and empty
//! nodes (paper Section 3.1: a *partial* node is non-empty with fewer GPUs in
//! use than its capacity).
//!
//! Nodes are also indexed by free GPUs, so best-fit queries cost `O(G log N)`.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{CoreError, Result};
use crate::model::{ClusterSpec, JobId, JobRequest, NodeId, NodeSet};

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
    by_free: Vec<BTreeSet<NodeId>>,
    jobs: BTreeMap<JobId, RunningJob>,
    partial: u32,
    empty: u32,
    used_total: u64,
    /// Running instances by GPUs per instance: `counts[g]`.
    counts: [u64; 9],
}

impl Occupancy {
    pub fn new(spec: ClusterSpec) -> Self {
        let g = spec.gpus_per_node as usize;
        let mut by_free = vec![BTreeSet::new(); g + 1];
        by_free[g] = (0..spec.nodes).collect();
        Self {
            spec,
            used: vec![0; spec.nodes as usize],
            by_free,
            jobs: BTreeMap::new(),
            partial: 0,
            empty: spec.nodes,
            used_total: 0,
            counts: [0; 9],
        }
    }

    pub fn spec(&self) -> ClusterSpec {
        self.spec
    }
    pub fn capacity(&self) -> u32 {
        self.spec.gpus_per_node
    }
    pub fn used(&self, node: NodeId) -> u32 {
        self.used[node as usize]
    }
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

    /// Nodes with exactly `free` free GPUs, lowest index first.
    pub fn nodes_with_free(&self, free: u32) -> impl Iterator<Item = NodeId> + '_ {
        self.by_free[free as usize].iter().copied()
    }

    /// Best fit: the allowed node whose free GPUs are the fewest that still fit
    /// `g` (lowest index on ties).
    pub fn best_fit(&self, g: u32, allowed: Option<&NodeSet>) -> Option<NodeId> {
        (g..=self.capacity()).find_map(|f| {
            self.by_free[f as usize]
                .iter()
                .copied()
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
                    .copied()
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
        self.by_free[(cap - before) as usize].remove(&node);
        self.by_free[(cap - after) as usize].insert(node);
        self.used[node as usize] = after;
        self.used_total = (self.used_total as i64 + delta) as u64;
    }

    /// Sets the movable flag of a running job.
    pub fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        let r = self.jobs.get_mut(&job).ok_or(CoreError::UnknownJob(job))?;
        r.request.movable = movable;
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
        let mut extra: BTreeMap<NodeId, u32> = BTreeMap::new();
        for &(n, g) in chunks {
            self.spec.check_node(n)?;
            *extra.entry(n).or_default() += g;
        }
        for (&n, &add) in &extra {
            let used = self.used(n) + add;
            if used > self.capacity() {
                return Err(CoreError::Overcommit {
                    job,
                    node: n,
                    used,
                    capacity: self.capacity(),
                });
            }
        }
        for (&n, &add) in &extra {
            self.adjust(n, i64::from(add));
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
        self.adjust(from, -i64::from(g));
        self.adjust(to, i64::from(g));
        if let Some(r) = self.jobs.get_mut(&job) {
            r.nodes[instance as usize] = to;
        }
        Ok(from)
    }
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
}
