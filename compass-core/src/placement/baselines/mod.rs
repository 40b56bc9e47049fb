//! The baselines COMPASS-ABS must beat (paper Section 5.4), behind the same
//! [`PlacementPolicy`] interface:
//!
//! - [`Greedy`] with [`Fit::Best`] (`best-fit`): GFS-style best fit.
//! - [`Greedy`] with [`Fit::First`] (`first-fit`): Slurm's lowest-index order.
//! - [`Fgd`] (`fgd`): Fragmentation Gradient Descent (Weng et al., ATC'23).
//! - [`Defrag`] (`defrag`): round-based defragmenter in the spirit of FFT
//!   (Mo et al. 2025) and DRR (Wu et al. 2025).
//!
//! All of them admit a job all-or-nothing: the node of every instance is
//! chosen on a tentative view first (`Tentative`) and the job is recorded
//! only if every instance found a node, so `Ok(None)` leaves the state exactly
//! as before. Ties are always broken by the lowest node index and only
//! `BTree*` collections are used, so every run is deterministic.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::clock::Seconds;
use crate::error::{CoreError, Result};
use crate::model::{Admission, ClusterSpec, JobId, JobRequest, Migration, NodeId, NodeSet};
use crate::placement::{Occupancy, PlacementPolicy};

/// The cluster as it would be after the instances chosen so far for one job
/// (or one defragmentation move), without touching the real accounting.
struct Tentative<'a> {
    occ: &'a Occupancy,
    allowed: Option<&'a NodeSet>,
    /// Nodes that may not be chosen (defrag: the node being drained).
    excluded: &'a BTreeSet<NodeId>,
    /// GPUs taken on each node by the instances chosen so far.
    extra: BTreeMap<NodeId, u32>,
}

impl<'a> Tentative<'a> {
    fn new(
        occ: &'a Occupancy,
        allowed: Option<&'a NodeSet>,
        excluded: &'a BTreeSet<NodeId>,
    ) -> Self {
        Self {
            occ,
            allowed,
            excluded,
            extra: BTreeMap::new(),
        }
    }

    fn free(&self, node: NodeId) -> u32 {
        self.occ.free(node) - self.extra.get(&node).copied().unwrap_or(0)
    }

    fn candidate(&self, node: NodeId) -> bool {
        self.allowed.is_none_or(|a| a.contains(node)) && !self.excluded.contains(&node)
    }

    /// The lowest-index candidate node with exactly `free` free GPUs in the
    /// tentative state. Costs `O(log N)` plus the nodes skipped.
    fn first_with_free(&self, free: u32) -> Option<NodeId> {
        let untouched = self
            .occ
            .nodes_with_free(free)
            .find(|n| !self.extra.contains_key(n) && self.candidate(*n));
        let touched = self.extra.keys().copied().find(|&n| self.free(n) == free);
        match (untouched, touched) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn take(&mut self, node: NodeId, gpus: u32) {
        *self.extra.entry(node).or_default() += gpus;
    }

    /// Best fit: the candidate with the fewest free GPUs that still fit `g`,
    /// among nodes with at most `max_free` free GPUs.
    fn best_fit(&self, g: u32, max_free: u32) -> Option<NodeId> {
        (g..=max_free).find_map(|f| self.first_with_free(f))
    }

    /// First fit: the lowest-index candidate with at least `g` free GPUs.
    fn first_fit(&self, g: u32) -> Option<NodeId> {
        (g..=self.occ.capacity())
            .filter_map(|f| self.first_with_free(f))
            .min()
    }
}

/// Checks the request, then picks a node per instance on a tentative view with
/// `pick(view, g)`; records the job only if every instance got a node.
fn admit(
    occ: &mut Occupancy,
    job: &JobRequest,
    allowed: Option<&NodeSet>,
    mut pick: impl FnMut(&Tentative<'_>, u32) -> Option<NodeId>,
) -> Result<Option<Admission>> {
    occ.spec().check_job(job)?;
    if occ.job(job.id).is_some() {
        return Err(CoreError::DuplicateJob(job.id));
    }
    let g = job.shape.gpus;
    let none = BTreeSet::new();
    let mut view = Tentative::new(occ, allowed, &none);
    let mut nodes = Vec::with_capacity(job.shape.instances as usize);
    for _ in 0..job.shape.instances {
        let Some(node) = pick(&view, g) else {
            return Ok(None);
        };
        view.take(node, g);
        nodes.push(node);
    }
    occ.add(job, nodes.clone())?;
    Ok(Some(Admission {
        nodes,
        migrations: Vec::new(),
    }))
}

/// Which node a greedy baseline ([`Greedy`]) takes for each instance.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fit {
    /// `best-fit`: the allowed node leaving the fewest free GPUs, ties by the
    /// lowest node index. This is the GFS policy the paper compares against
    /// (Section 5.4: "places each job's instances on the nodes whose remaining
    /// GPU capacity most closely matches the per-instance demand"; GFS: Duan
    /// et al. 2026) and the policy of ElasticFlow-style bin packing.
    Best,
    /// `first-fit`: the lowest-index allowed node with enough free GPUs:
    /// Slurm's `select/cons_tres` with equal node weights walks its node bitmap
    /// in index order and takes the first nodes that fit. A scheduler with no
    /// fragmentation awareness at all.
    First,
}

/// `best-fit` and `first-fit`: place each instance by a [`Fit`] rule, never
/// migrate.
#[derive(Clone, Debug)]
pub struct Greedy {
    occ: Occupancy,
    fit: Fit,
}

impl Greedy {
    pub fn new(spec: ClusterSpec, fit: Fit) -> Self {
        Self {
            occ: Occupancy::new(spec),
            fit,
        }
    }
}

impl PlacementPolicy for Greedy {
    fn name(&self) -> &'static str {
        match self.fit {
            Fit::Best => "best-fit",
            Fit::First => "first-fit",
        }
    }
    fn spec(&self) -> ClusterSpec {
        self.occ.spec()
    }
    fn place(&mut self, job: &JobRequest, allowed: Option<&NodeSet>) -> Result<Option<Admission>> {
        let cap = self.occ.capacity();
        match self.fit {
            Fit::Best => admit(&mut self.occ, job, allowed, |v, g| v.best_fit(g, cap)),
            Fit::First => admit(&mut self.occ, job, allowed, |v, g| v.first_fit(g)),
        }
    }
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        self.occ.remove(job)?;
        Ok(Vec::new())
    }
    fn occupancy(&self) -> &Occupancy {
        &self.occ
    }
}

/// `fgd`: Fragmentation Gradient Descent (Weng et al., "Beware of
/// Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
/// Descent", USENIX ATC'23), for whole GPUs.
///
/// FGD measures the fragmentation of a node *relative to the workload*: for a
/// task `m` that cannot fit the node's free GPUs, all of them are fragmented;
/// for a task that fits, none are (with whole GPUs there are no partially free
/// GPUs, FGD's other case). The node's fragmentation is the expectation over
/// the workload distribution, `F(f) = f * P(g_m > f)` for `f` free GPUs. Each
/// instance goes to the node that minimises the increase `F(f - g) - F(f)`
/// (the fragmentation gradient), ties to the node with fewer free GPUs, then
/// the lowest index.
///
/// Workload distribution (our choice, as the paper's traces have no task
/// catalogue): the GPUs-per-instance of the last `window` distinct jobs
/// passed to `place`, one vote per job, the arriving job included (so the
/// distribution is never empty). A job retried while blocked is counted once
/// while it stays in the window.
#[derive(Clone, Debug)]
pub struct Fgd {
    occ: Occupancy,
    window: usize,
    recent: VecDeque<(JobId, u32)>,
    in_window: BTreeSet<JobId>,
    /// `hist[g]`: jobs in the window with `g` GPUs per instance.
    hist: [u64; 9],
}

impl Fgd {
    pub fn new(spec: ClusterSpec, window: usize) -> Self {
        Self {
            occ: Occupancy::new(spec),
            window: window.max(1),
            recent: VecDeque::new(),
            in_window: BTreeSet::new(),
            hist: [0; 9],
        }
    }

    fn observe(&mut self, job: &JobRequest) {
        if self.in_window.contains(&job.id) {
            return;
        }
        let g = job.shape.gpus.min(8);
        self.recent.push_back((job.id, g));
        self.in_window.insert(job.id);
        self.hist[g as usize] += 1;
        while self.recent.len() > self.window {
            if let Some((id, old)) = self.recent.pop_front() {
                self.in_window.remove(&id);
                self.hist[old as usize] -= 1;
            }
        }
    }

    /// `F(f)` for `f` in `0..=G`: expected free GPUs unusable by a task drawn
    /// from the window.
    fn fragmentation_table(&self) -> [f64; 9] {
        let total: u64 = self.hist.iter().sum();
        let mut table = [0.0; 9];
        if total == 0 {
            return table;
        }
        for (f, entry) in table
            .iter_mut()
            .enumerate()
            .take(self.occ.capacity() as usize + 1)
        {
            let larger: u64 = self.hist[(f + 1).min(9)..].iter().sum();
            *entry = f as f64 * larger as f64 / total as f64;
        }
        table
    }
}

impl PlacementPolicy for Fgd {
    fn name(&self) -> &'static str {
        "fgd"
    }
    fn spec(&self) -> ClusterSpec {
        self.occ.spec()
    }
    fn place(&mut self, job: &JobRequest, allowed: Option<&NodeSet>) -> Result<Option<Admission>> {
        self.occ.spec().check_job(job)?;
        self.observe(job);
        let frag = self.fragmentation_table();
        let cap = self.occ.capacity();
        admit(&mut self.occ, job, allowed, |v, g| {
            let mut best: Option<(f64, u32, NodeId)> = None;
            for f in g..=cap {
                let Some(node) = v.first_with_free(f) else {
                    continue;
                };
                let delta = frag[(f - g) as usize] - frag[f as usize];
                // Levels are visited by increasing f, so `<` keeps the fewer
                // free GPUs on equal gradients.
                if best.is_none_or(|(d, _, _)| delta < d) {
                    best = Some((delta, f, node));
                }
            }
            best.map(|(_, _, node)| node)
        })
    }
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        self.occ.remove(job)?;
        Ok(Vec::new())
    }
    fn occupancy(&self) -> &Occupancy {
        &self.occ
    }
}

/// Tunables of [`Defrag`].
#[derive(Clone, Debug, PartialEq)]
pub struct DefragConfig {
    /// Round length `T`, seconds.
    pub interval_s: Seconds,
    /// At most this many instance migrations per round.
    pub max_migrations_per_round: usize,
}

impl Default for DefragConfig {
    fn default() -> Self {
        Self {
            interval_s: 300.0,
            max_migrations_per_round: 64,
        }
    }
}

/// `defrag`: a round-based defragmenter in the spirit of FFT (Mo et al. 2025,
/// which re-plans all running jobs at the start of each round and places
/// arrivals by best fit within a round) and DRR (Wu et al. 2025, which at the
/// start of each reschedule cycle migrates the jobs on the lowest-utilisation
/// nodes onto high-utilisation nodes); paper Section 5.4.
///
/// Arrivals are placed by best fit. Every `T` seconds ([`Self::tick`]) the
/// partial nodes are visited from the least used (ties: lowest index); for
/// each, the instances on it are planned, largest first, onto the most-used
/// other non-empty nodes that fit (best fit; never onto an empty node, never
/// onto a node drained this round). The plan is applied only if it empties the
/// node, no instance on it belongs to a job that is not movable, and the
/// round's migration budget allows it. Nodes that received instances are not
/// drained in the same round. Like FFT/DRR, fragmentation created within a
/// round waits for the next round.
#[derive(Clone, Debug)]
pub struct Defrag {
    occ: Occupancy,
    config: DefragConfig,
    /// Instances `(job, index)` on each node.
    on_node: Vec<BTreeSet<(JobId, u32)>>,
    /// The last round found nothing to move and no job arrived or left
    /// since: the next round would find nothing either.
    settled: bool,
}

impl Defrag {
    pub fn new(spec: ClusterSpec, config: DefragConfig) -> Self {
        Self {
            occ: Occupancy::new(spec),
            config,
            on_node: vec![BTreeSet::new(); spec.nodes as usize],
            settled: false,
        }
    }

    /// Plans moving every instance off `src`; `None` if one cannot move.
    fn plan_drain(&self, src: NodeId, drained: &BTreeSet<NodeId>) -> Option<Vec<Migration>> {
        let mut instances = Vec::new();
        for &(job, index) in &self.on_node[src as usize] {
            let running = self.occ.job(job)?;
            if !running.request.movable {
                return None;
            }
            instances.push((running.gpus[index as usize], job, index));
        }
        // Largest first, then by (job, index) for determinism.
        instances.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
        let mut excluded = drained.clone();
        excluded.insert(src);
        let mut view = Tentative::new(&self.occ, None, &excluded);
        let below_empty = self.occ.capacity() - 1;
        let mut plan = Vec::with_capacity(instances.len());
        for (g, job, instance) in instances {
            let to = view.best_fit(g, below_empty)?;
            view.take(to, g);
            plan.push(Migration {
                job,
                instance,
                from: src,
                to,
            });
        }
        Some(plan)
    }
}

impl PlacementPolicy for Defrag {
    fn name(&self) -> &'static str {
        "defrag"
    }
    fn spec(&self) -> ClusterSpec {
        self.occ.spec()
    }
    fn place(&mut self, job: &JobRequest, allowed: Option<&NodeSet>) -> Result<Option<Admission>> {
        let cap = self.occ.capacity();
        let admission = admit(&mut self.occ, job, allowed, |v, g| v.best_fit(g, cap))?;
        if let Some(a) = &admission {
            self.settled = false;
            for (k, &n) in a.nodes.iter().enumerate() {
                self.on_node[n as usize].insert((job.id, k as u32));
            }
        }
        Ok(admission)
    }
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        let running = self.occ.remove(job)?;
        self.settled = false;
        for (k, &n) in running.nodes.iter().enumerate() {
            self.on_node[n as usize].remove(&(job, k as u32));
        }
        Ok(Vec::new())
    }
    fn tick_interval(&self) -> Option<Seconds> {
        Some(self.config.interval_s)
    }
    fn tick(&mut self, _now: Seconds) -> Vec<Migration> {
        let mut migrations = Vec::new();
        if self.settled || self.occ.partial_nodes() < 2 {
            return migrations;
        }
        let cap = self.occ.capacity();
        // Least used first: most free GPUs first, then lowest index.
        let sources: Vec<NodeId> = (1..cap)
            .rev()
            .flat_map(|f| self.occ.nodes_with_free(f))
            .collect();
        let mut drained = BTreeSet::new();
        let mut receivers = BTreeSet::new();
        for src in sources {
            if receivers.contains(&src) || self.occ.used(src) == 0 {
                continue;
            }
            let Some(plan) = self.plan_drain(src, &drained) else {
                continue;
            };
            if migrations.len() + plan.len() > self.config.max_migrations_per_round {
                if migrations.len() >= self.config.max_migrations_per_round {
                    break;
                }
                continue;
            }
            for m in &plan {
                // The plan was made on a tentative view of this exact state.
                if self.occ.move_instance(m.job, m.instance, m.to).is_err() {
                    debug_assert!(false, "planned migration {m:?} failed");
                    continue;
                }
                self.on_node[m.from as usize].remove(&(m.job, m.instance));
                self.on_node[m.to as usize].insert((m.job, m.instance));
                receivers.insert(m.to);
            }
            drained.insert(src);
            migrations.extend(plan);
        }
        self.settled = migrations.is_empty();
        migrations
    }
    fn occupancy(&self) -> &Occupancy {
        &self.occ
    }
}

#[cfg(test)]
mod tests;
