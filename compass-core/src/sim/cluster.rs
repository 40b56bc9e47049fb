//! The cluster a replay places on (issue 12): homogeneous, one
//! [`PlacementPolicy`] over identical nodes (the paper's model, Section 3.2),
//! or mixed, one policy per *pool* of interchangeable nodes (same GPU count
//! and type, [`crate::placement::pools`]). The simulator drives either
//! through [`ClusterPolicy`].
//!
//! - `compass` on a mixed cluster is a [`PoolSet`], the same code the select
//!   plugin runs in slurmctld: one COMPASS-ABS engine per pool, and the pool
//!   of a job chosen by [`PoolSet::choose`] (among the pools that admit its
//!   instances, the least `N * SIF` added, then the pool of the smallest
//!   nodes, then the pool listed first).
//! - The baselines on a mixed cluster ([`PooledPolicy`]) run one instance
//!   of the baseline per pool, and a job goes to the pool holding the
//!   tightest node for one of its instances (the fewest free GPUs that still
//!   fit it, then the pool listed first) among those with room for all its
//!   instances: best-fit's own rule over every node of the cluster, so
//!   best-fit keeps its natural mixed form; the others get the same pool
//!   choice.
//!
//! Traces carry no GPU types: a job may go to any pool whose nodes hold one
//! of its instances (`g <= G_p`); a job's instances stay in one pool.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::error::{CoreError, Result};
use crate::model::{Admission, ClusterSpec, JobId, JobRequest, Migration, NodeId};
use crate::placement::pools::{NodeGpus, PoolSet, PoolSpec};
use crate::placement::{self, Occupancy, PlacementPolicy, PolicyOptions};

/// Most nodes a node-spec list may describe (a guard against typos such
/// as `80000000x8`, which would allocate per-node state for nothing).
pub const MAX_NODES: u64 = 1_000_000;

/// One item of a node-spec list: `count` nodes of `gpus` GPUs of `gpu_type`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeClass {
    pub count: u32,
    pub gpus: u32,
    /// `a100` in `8x8:a100`; `None` when untyped.
    pub gpu_type: Option<String>,
}

/// A cluster as a list of node classes (`8x8:a100,4x4:l40s,2x2`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNodes {
    pub classes: Vec<NodeClass>,
}

impl ClusterNodes {
    /// Parses a node-spec list: items `COUNTxGPUS[:TYPE]`, comma separated;
    /// a bare `COUNT` is `COUNT` nodes of `default_gpus` GPUs, untyped (the
    /// CLI's `--nodes N` with `--gpus-per-node`). GPUs per node must be 1,
    /// 2, 4 or 8 (the slot widths of the ABS, eq. 3, must divide the node);
    /// a type is letters, digits, `-`, `_` or `.`. Errors name the item.
    pub fn parse(text: &str, default_gpus: u32) -> Result<Self> {
        let bad = |item: &str, why: String| {
            CoreError::Invalid(format!("node spec `{item}`: {why} (expected COUNTxGPUS[:TYPE] items, comma separated, e.g. 8x8:a100,4x4:l40s,2x2, or a bare node count)"))
        };
        if text.trim().is_empty() {
            return Err(bad(text, "empty".into()));
        }
        let mut classes = Vec::new();
        let mut total: u64 = 0;
        for raw in text.split(',') {
            let item = raw.trim();
            if item.is_empty() {
                return Err(bad(text, "an empty item".into()));
            }
            let (shape, gpu_type) = match item.split_once(':') {
                Some((s, t)) => (s, Some(t)),
                None => (item, None),
            };
            let (count, gpus) = match shape.split_once(['x', 'X']) {
                Some((c, g)) => (c, Some(g)),
                None => (shape, None),
            };
            let count: u32 = count
                .parse()
                .map_err(|_| bad(item, format!("`{count}` is not a node count")))?;
            if count == 0 {
                return Err(bad(item, "a node count of 0".into()));
            }
            let gpus = match gpus {
                Some(g) => g
                    .parse::<u32>()
                    .map_err(|_| bad(item, format!("`{g}` is not a number of GPUs")))?,
                None if gpu_type.is_some() => {
                    return Err(bad(item, "a GPU type needs COUNTxGPUS before it".into()))
                }
                None => default_gpus,
            };
            if !matches!(gpus, 1 | 2 | 4 | 8) {
                return Err(bad(
                    item,
                    format!(
                        "{gpus} GPUs per node; the simulator models nodes of 1, 2, 4 or 8 GPUs \
                         (the select plugin leaves other counts to cons_tres)"
                    ),
                ));
            }
            let gpu_type = match gpu_type {
                None => None,
                Some(t)
                    if !t.is_empty()
                        && t.chars()
                            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
                {
                    Some(t.to_string())
                }
                Some(t) => return Err(bad(item, format!("`{t}` is not a GPU type"))),
            };
            total += u64::from(count);
            if total > MAX_NODES {
                return Err(bad(text, format!("more than {MAX_NODES} nodes")));
            }
            classes.push(NodeClass {
                count,
                gpus,
                gpu_type,
            });
        }
        Ok(Self { classes })
    }

    /// `spec`'s identical, untyped nodes.
    pub fn homogeneous(spec: ClusterSpec) -> Self {
        Self {
            classes: vec![NodeClass {
                count: spec.nodes,
                gpus: spec.gpus_per_node,
                gpu_type: None,
            }],
        }
    }

    /// The cluster as one [`ClusterSpec`] when every node is alike (one
    /// pool): it is then replayed exactly as `--nodes N --gpus-per-node G`.
    pub fn as_homogeneous(&self) -> Option<ClusterSpec> {
        let first = self.classes.first()?;
        let alike = self
            .classes
            .iter()
            .all(|c| c.gpus == first.gpus && c.gpu_type == first.gpu_type);
        if !alike {
            return None;
        }
        ClusterSpec::new(self.nodes(), first.gpus).ok()
    }

    /// Every node, in order (index = global node id).
    pub fn node_table(&self) -> Vec<NodeGpus> {
        self.classes
            .iter()
            .flat_map(|c| (0..c.count).map(move |_| NodeGpus::new(c.gpus, c.gpu_type.as_deref())))
            .collect()
    }

    pub fn nodes(&self) -> u32 {
        self.classes.iter().map(|c| c.count).sum()
    }

    pub fn total_gpus(&self) -> u64 {
        self.classes
            .iter()
            .map(|c| u64::from(c.count) * u64::from(c.gpus))
            .sum()
    }

    /// GPUs of the largest node (how a trace's jobs are cut into instances).
    pub fn max_gpus(&self) -> u32 {
        self.classes.iter().map(|c| c.gpus).max().unwrap_or(0)
    }

    /// The list in its canonical form: `8x8:a100,4x4:l40s,2x2`.
    pub fn label(&self) -> String {
        self.classes
            .iter()
            .map(|c| match &c.gpu_type {
                Some(t) => format!("{}x{}:{t}", c.count, c.gpus),
                None => format!("{}x{}", c.count, c.gpus),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What the simulator drives: a placement policy over the whole cluster,
/// node ids global. Each pool's [`Occupancy`] uses the pool's own node ids
/// `0..pool size`: local id `k` of pool `p` is `pools()[p].nodes[k]`.
pub trait ClusterPolicy {
    /// CLI name of the policy.
    fn name(&self) -> &'static str;

    /// The pools, in order of their first node.
    fn pools(&self) -> Vec<PoolSpec>;

    /// GPU accounting of pool `p`, in its local node ids.
    fn pool_occupancy(&self, p: usize) -> &Occupancy;

    /// [`PlacementPolicy::fit_after_moves_with`] of pool `p`: at most how
    /// many instances of `g` GPUs fit there after any migrations, with the
    /// running jobs `gone` left.
    fn pool_fit_after_moves_with(&self, p: usize, g: u32, gone: &[JobId]) -> u64;

    /// The pool job `job` runs in.
    fn job_pool(&self, job: JobId) -> Option<usize>;

    /// Admits `job` in one pool, all or nothing (see
    /// [`PlacementPolicy::place`]); node ids global.
    fn place(&mut self, job: &JobRequest) -> Result<Option<Admission>>;

    /// See [`PlacementPolicy::remove`].
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>>;

    fn tick_interval(&self) -> Option<Seconds> {
        None
    }

    fn tick(&mut self, _now: Seconds) -> Vec<Migration> {
        Vec::new()
    }

    /// See [`PlacementPolicy::compact_now`].
    fn compact_now(&mut self) -> Result<Vec<Migration>> {
        Ok(Vec::new())
    }

    fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()>;

    /// See [`PlacementPolicy::set_expected_end`]; ignored by default (mixed
    /// clusters).
    fn set_expected_end(&mut self, _job: JobId, _end_s: Seconds) {}

    fn honours_movable(&self) -> bool;

    /// An independent copy in the current state (`None`: cannot be copied).
    fn fork(&self) -> Option<Box<dyn ClusterPolicy>>;

    /// The one policy of a homogeneous cluster (for observers that take a
    /// [`PlacementPolicy`]); `None` on a mixed cluster.
    fn as_single(&self) -> Option<&dyn PlacementPolicy>;
}

/// A homogeneous cluster: one policy, one pool of every node.
pub struct Single<'a> {
    policy: SinglePolicy<'a>,
}

enum SinglePolicy<'a> {
    Borrowed(&'a mut dyn PlacementPolicy),
    Owned(Box<dyn PlacementPolicy>),
}

impl<'a> Single<'a> {
    pub fn new(policy: &'a mut dyn PlacementPolicy) -> Self {
        Self {
            policy: SinglePolicy::Borrowed(policy),
        }
    }

    fn get(&self) -> &dyn PlacementPolicy {
        match &self.policy {
            SinglePolicy::Borrowed(p) => &**p,
            SinglePolicy::Owned(p) => p.as_ref(),
        }
    }

    fn get_mut(&mut self) -> &mut dyn PlacementPolicy {
        match &mut self.policy {
            SinglePolicy::Borrowed(p) => &mut **p,
            SinglePolicy::Owned(p) => p.as_mut(),
        }
    }
}

impl ClusterPolicy for Single<'_> {
    fn name(&self) -> &'static str {
        self.get().name()
    }

    fn pools(&self) -> Vec<PoolSpec> {
        let spec = self.get().spec();
        vec![PoolSpec {
            name: format!("{}xgpu", spec.gpus_per_node),
            gpus_per_node: spec.gpus_per_node,
            gpu_type: None,
            nodes: (0..spec.nodes).collect(),
            modelled: true,
            group: None,
        }]
    }

    fn pool_occupancy(&self, _p: usize) -> &Occupancy {
        self.get().occupancy()
    }

    fn pool_fit_after_moves_with(&self, _p: usize, g: u32, gone: &[JobId]) -> u64 {
        self.get().fit_after_moves_with(g, gone)
    }

    fn job_pool(&self, job: JobId) -> Option<usize> {
        self.get().occupancy().job(job).map(|_| 0)
    }

    fn place(&mut self, job: &JobRequest) -> Result<Option<Admission>> {
        self.get_mut().place(job, None)
    }

    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        self.get_mut().remove(job)
    }

    fn compact_now(&mut self) -> Result<Vec<Migration>> {
        Ok(self.get_mut().compact_now())
    }

    fn tick_interval(&self) -> Option<Seconds> {
        self.get().tick_interval()
    }

    fn tick(&mut self, now: Seconds) -> Vec<Migration> {
        self.get_mut().tick(now)
    }

    fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        self.get_mut().set_movable(job, movable)
    }

    fn set_expected_end(&mut self, job: JobId, end_s: Seconds) {
        self.get_mut().set_expected_end(job, end_s)
    }

    fn honours_movable(&self) -> bool {
        self.get().honours_movable()
    }

    fn fork(&self) -> Option<Box<dyn ClusterPolicy>> {
        let p = self.get().fork()?;
        Some(Box::new(Single {
            policy: SinglePolicy::Owned(p),
        }))
    }

    fn as_single(&self) -> Option<&dyn PlacementPolicy> {
        Some(self.get())
    }
}

/// The pools of `set` that admit instances of `gpus` GPUs, each with the
/// request in that pool's terms (the same request: traces carry no types).
fn options(set: &PoolSet, job: &JobRequest) -> Vec<(usize, JobRequest)> {
    set.pools()
        .enumerate()
        .filter(|(_, p)| p.modelled && p.admits(None, job.shape.gpus))
        .map(|(i, _)| (i, job.clone()))
        .collect()
}

/// COMPASS on a mixed cluster: the select plugin's [`PoolSet`].
impl ClusterPolicy for PoolSet {
    fn name(&self) -> &'static str {
        "compass"
    }

    fn pools(&self) -> Vec<PoolSpec> {
        PoolSet::pools(self).cloned().collect()
    }

    fn pool_occupancy(&self, p: usize) -> &Occupancy {
        self.engine(p)
            .expect("the simulator builds only modelled pools")
            .occupancy()
    }

    fn pool_fit_after_moves_with(&self, p: usize, g: u32, gone: &[JobId]) -> u64 {
        self.engine(p)
            .expect("the simulator builds only modelled pools")
            .lowerable_fit_with(g, gone)
    }

    fn job_pool(&self, job: JobId) -> Option<usize> {
        self.pools_of_job(job).and_then(|p| p.first().copied())
    }

    fn place(&mut self, job: &JobRequest) -> Result<Option<Admission>> {
        let options = options(self, job);
        Ok(PoolSet::place(self, &options, None)?.map(|(_, adm)| adm))
    }

    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        PoolSet::remove(self, job)
    }

    fn compact_now(&mut self) -> Result<Vec<Migration>> {
        Ok(PoolSet::compact(self))
    }

    fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        PoolSet::set_movable(self, job, movable)
    }

    fn honours_movable(&self) -> bool {
        true
    }

    fn fork(&self) -> Option<Box<dyn ClusterPolicy>> {
        Some(Box::new(self.clone()))
    }

    fn as_single(&self) -> Option<&dyn PlacementPolicy> {
        None
    }
}

/// A baseline on a mixed cluster: one instance of it per pool (see the
/// module docs for the choice of pool).
pub struct PooledPolicy {
    name: &'static str,
    pools: Vec<PoolSpec>,
    policies: Vec<Box<dyn PlacementPolicy>>,
    jobs: BTreeMap<JobId, usize>,
}

impl PooledPolicy {
    /// The baseline `name` on every pool of `nodes` (pools grouped as
    /// [`PoolSet::new`] groups them).
    pub fn new(name: &str, nodes: &[NodeGpus], opts: &PolicyOptions) -> Result<Self> {
        let pools: Vec<PoolSpec> = PoolSet::new(nodes, opts.compass.clone())
            .pools()
            .cloned()
            .collect();
        let mut policies = Vec::with_capacity(pools.len());
        for p in &pools {
            let spec = ClusterSpec::new(p.nodes.len() as u32, p.gpus_per_node)?;
            policies.push(placement::build(name, spec, opts)?);
        }
        let name = policies
            .first()
            .map(|p| p.name())
            .ok_or(CoreError::NoNodes)?;
        Ok(Self {
            name,
            pools,
            policies,
            jobs: BTreeMap::new(),
        })
    }

    fn globalise(&self, p: usize, moves: Vec<Migration>) -> Vec<Migration> {
        let nodes = &self.pools[p].nodes;
        moves
            .into_iter()
            .map(|m| Migration {
                from: nodes[m.from as usize],
                to: nodes[m.to as usize],
                ..m
            })
            .collect()
    }

    /// Pools that could take `job` now, tightest first: `(free GPUs of the
    /// pool's tightest node for one instance, pool)`.
    fn candidates(&self, job: &JobRequest) -> Vec<(u32, usize)> {
        let (w, g) = (job.shape.instances, job.shape.gpus);
        let mut out = Vec::new();
        for (p, spec) in self.pools.iter().enumerate() {
            if !spec.admits(None, g) {
                continue;
            }
            let occ = self.policies[p].occupancy();
            let Some(tightest) = occ.best_fit(g, None) else {
                continue;
            };
            let room: u64 = (0..spec.nodes.len() as NodeId)
                .map(|n| u64::from(occ.free(n) / g))
                .sum();
            if room >= u64::from(w) {
                out.push((occ.free(tightest), p));
            }
        }
        out.sort_unstable();
        out
    }
}

impl ClusterPolicy for PooledPolicy {
    fn name(&self) -> &'static str {
        self.name
    }

    fn pools(&self) -> Vec<PoolSpec> {
        self.pools.clone()
    }

    fn pool_occupancy(&self, p: usize) -> &Occupancy {
        self.policies[p].occupancy()
    }

    fn pool_fit_after_moves_with(&self, p: usize, g: u32, gone: &[JobId]) -> u64 {
        self.policies[p].fit_after_moves_with(g, gone)
    }

    fn job_pool(&self, job: JobId) -> Option<usize> {
        self.jobs.get(&job).copied()
    }

    fn place(&mut self, job: &JobRequest) -> Result<Option<Admission>> {
        if self.jobs.contains_key(&job.id) {
            return Err(CoreError::DuplicateJob(job.id));
        }
        for (_, p) in self.candidates(job) {
            if let Some(adm) = self.policies[p].place(job, None)? {
                self.jobs.insert(job.id, p);
                let nodes = adm
                    .nodes
                    .iter()
                    .map(|&n| self.pools[p].nodes[n as usize])
                    .collect();
                return Ok(Some(Admission {
                    nodes,
                    migrations: self.globalise(p, adm.migrations),
                }));
            }
        }
        Ok(None)
    }

    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        let p = self.jobs.remove(&job).ok_or(CoreError::UnknownJob(job))?;
        let moves = self.policies[p].remove(job)?;
        Ok(self.globalise(p, moves))
    }

    fn tick_interval(&self) -> Option<Seconds> {
        self.policies
            .iter()
            .filter_map(|p| p.tick_interval())
            .min_by(f64::total_cmp)
    }

    fn tick(&mut self, now: Seconds) -> Vec<Migration> {
        let mut out = Vec::new();
        for p in 0..self.policies.len() {
            let moves = self.policies[p].tick(now);
            out.extend(self.globalise(p, moves));
        }
        out
    }

    fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        let p = *self.jobs.get(&job).ok_or(CoreError::UnknownJob(job))?;
        self.policies[p].set_movable(job, movable)
    }

    fn honours_movable(&self) -> bool {
        self.policies.iter().any(|p| p.honours_movable())
    }

    fn fork(&self) -> Option<Box<dyn ClusterPolicy>> {
        let policies = self
            .policies
            .iter()
            .map(|p| p.fork())
            .collect::<Option<Vec<_>>>()?;
        Some(Box::new(Self {
            name: self.name,
            pools: self.pools.clone(),
            policies,
            jobs: self.jobs.clone(),
        }))
    }

    fn as_single(&self) -> Option<&dyn PlacementPolicy> {
        None
    }
}

/// The policy `name` on the mixed cluster `nodes`: a [`PoolSet`] for
/// `compass`, a [`PooledPolicy`] for a baseline. Every pool must be
/// modelled (1, 2, 4 or 8 GPUs per node, one type: what
/// [`ClusterNodes::parse`] accepts).
pub fn build_mixed(
    name: &str,
    nodes: &ClusterNodes,
    opts: &PolicyOptions,
) -> Result<Box<dyn ClusterPolicy>> {
    let table = nodes.node_table();
    if table.is_empty() {
        return Err(CoreError::NoNodes);
    }
    if name == "compass" {
        let set = PoolSet::new(&table, opts.compass.clone());
        if let Some(p) = PoolSet::pools(&set).find(|p| !p.modelled) {
            return Err(CoreError::Invalid(format!(
                "pool {} has no engine: the simulator models nodes of 1, 2, 4 or 8 GPUs of one type",
                p.name
            )));
        }
        return Ok(Box::new(set));
    }
    Ok(Box::new(PooledPolicy::new(name, &table, opts)?))
}
