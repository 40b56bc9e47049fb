//! One COMPASS-ABS engine per pool of interchangeable GPU nodes (issue 12):
//! the paper's model (Section 3.2) is a cluster of identical nodes, so a
//! mixed cluster is split into *pools* of nodes with the same GPU count and
//! the same GPU type, and each pool gets its own [`CompassEngine`]. Theorem 1
//! then holds per pool: `N * SIF <= 2` in each pool wherever WCC holds in
//! that pool (`compass-core/tests/compass_props.rs`).
//!
//! - Nodes without GPUs belong to no pool: jobs there are Slurm's alone.
//! - Nodes that share no partition, directly or through other partitions,
//!   never hold instances of one job: each such *partition group*
//!   ([`partition_groups`]) gets its own pools, so Theorem 1's bound holds
//!   in each (`N * SIF <= 2` per partition group and kind of node) where
//!   one engine over both would hold every job inside its partition and
//!   promise nothing. Partitions that overlap (a `gpu` partition over all
//!   GPU nodes and a `debug` one over some) make one group: there the
//!   engine keeps a job inside its partition's nodes instead
//!   (docs/compass-corrections.md, section 8). A pool split so is named
//!   with its group (`8xa100@gpu-a`).
//! - A pool whose nodes hold a GPU count other than 1, 2, 4 or 8 (3, 6,
//!   10, ...), or several GPU types on one node, is **pass-through**: it is
//!   listed (so status shows it) but has no engine; the slot widths of the
//!   ABS (eq. 3) are powers of two that must divide the node. Jobs there
//!   are placed by Slurm's own `cons_tres` (docs/admin-guide.md, "Mixed
//!   clusters").
//! - A job is placed in one pool among those the caller allows
//!   ([`PoolSet::choose`]); when several can take it now, the one left with
//!   the least fragmentation after the placement its engine plans wins: the
//!   least `N * SIF` added, then the pool of the smallest nodes, then the
//!   pool the caller lists first.
//!
//! Node ids here are the cluster's (global) ids; each engine works on its
//! own local ids `0..pool size`, translated at this boundary.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, Result};
use crate::metric::{phi_star, wcc_holds};
use crate::model::{
    Admission, ClusterSpec, JobId, JobRequest, JobShape, Migration, NodeId, NodeSet,
};
use crate::placement::compass::{
    AdoptOutcome, CompassConfig, CompassEngine, NodePart, NodeView, Veto,
};
use crate::placement::PlacementPolicy;

/// The GPUs of one node of the cluster, as the resource manager reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeGpus {
    pub gpus: u32,
    /// `a100` for `gpu:a100:8`; `None` when untyped. Several types on one
    /// node are joined with `+` (`a100+h100`): such a node is pass-through.
    pub gpu_type: Option<String>,
    /// The node's partition group: nodes that share no partition, directly
    /// or through other partitions, can never hold instances of one job,
    /// so each group gets its own pools (`None`: no partitions known, or a
    /// node in none; the simulator's clusters). The label names the group
    /// (the smallest partition name in it).
    pub group: Option<String>,
}

impl NodeGpus {
    pub fn new(gpus: u32, gpu_type: Option<&str>) -> Self {
        Self {
            gpus,
            gpu_type: gpu_type.map(str::to_string),
            group: None,
        }
    }

    /// The same node in partition group `group`.
    pub fn in_group(self, group: Option<&str>) -> Self {
        Self {
            group: group.map(str::to_string),
            ..self
        }
    }
}

/// Partition groups of a cluster's nodes, for [`NodeGpus::group`]: nodes
/// joined by a partition that holds both, directly or through a chain of
/// partitions, are in one group, labelled with the smallest partition name
/// in it; a node in no partition has none. `partitions`: (name, global
/// node ids); ids at or past `nodes` are ignored.
pub fn partition_groups(nodes: u32, partitions: &[(String, Vec<NodeId>)]) -> Vec<Option<String>> {
    // Union-find over nodes; each partition joins its nodes.
    let mut parent: Vec<u32> = (0..nodes).collect();
    fn root(parent: &mut [u32], mut x: u32) -> u32 {
        while parent[x as usize] != x {
            let up = parent[parent[x as usize] as usize];
            parent[x as usize] = up;
            x = up;
        }
        x
    }
    let mut member = vec![false; nodes as usize];
    for (_, ns) in partitions {
        let mut first: Option<u32> = None;
        for &n in ns.iter().filter(|&&n| n < nodes) {
            member[n as usize] = true;
            match first {
                None => first = Some(n),
                Some(f) => {
                    let (a, b) = (root(&mut parent, f), root(&mut parent, n));
                    if a != b {
                        parent[a.max(b) as usize] = a.min(b);
                    }
                }
            }
        }
    }
    // Label of each root: the smallest name of a partition in its group.
    let mut label: BTreeMap<u32, &str> = BTreeMap::new();
    for (name, ns) in partitions {
        if let Some(&n) = ns.iter().find(|&&n| n < nodes) {
            let r = root(&mut parent, n);
            let l = label.entry(r).or_insert(name.as_str());
            if name.as_str() < *l {
                *l = name.as_str();
            }
        }
    }
    (0..nodes)
        .map(|n| {
            member[n as usize]
                .then(|| label.get(&root(&mut parent, n)).map(|l| l.to_string()))
                .flatten()
        })
        .collect()
}

/// One pool: interchangeable nodes (same GPU count, same type).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpec {
    /// `8xa100`, `4xl40s`, `2xgpu` (untyped): GPUs per node and type, the
    /// `pool` label of the budget service's metrics.
    pub name: String,
    pub gpus_per_node: u32,
    pub gpu_type: Option<String>,
    /// Global node ids, ascending; local id `k` is `nodes[k]`.
    pub nodes: Vec<NodeId>,
    /// Has an engine (capacity 1, 2, 4 or 8 and a single GPU type); `false`:
    /// pass-through, Slurm places there alone.
    pub modelled: bool,
    /// The partition group ([`NodeGpus::group`]) of the pool's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

impl PoolSpec {
    /// Can a job asking for GPU type `want` (`None`: any) and `gpus` GPUs
    /// per instance use this pool's nodes at all?
    pub fn admits(&self, want: Option<&str>, gpus: u32) -> bool {
        gpus <= self.gpus_per_node
            && match want {
                None => true,
                Some(t) => self.gpu_type.as_deref() == Some(t),
            }
    }
}

/// A job the pool set holds, in global node ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PooledJob {
    pub pool: usize,
    pub request: JobRequest,
    /// `nodes[k]` hosts instance `k`.
    pub nodes: Vec<NodeId>,
}

/// Fragmentation of one pool now.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolStats {
    pub partial_nodes: u32,
    pub phi_star: u64,
    /// `Phi_pi - Phi*` (clamped at 0).
    pub n_sif: u64,
    pub wcc: bool,
}

/// The layout of every pool, by global node id (`nodes[i]` is `None` for a
/// node in no modelled pool), for the published state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolsLayout {
    pub nodes: Vec<Option<NodeView>>,
    pub pools: Vec<PoolSpec>,
}

/// What a [`PoolsLayout`] is made of, taken at the cost of a few words per
/// node ([`PoolSet::layout_parts`]); [`PoolsLayoutParts::finish`] builds
/// it, copying the nodes' states (issue #11: the select plugin takes the
/// parts under its lock and builds the layout after).
#[derive(Clone, Debug)]
pub struct PoolsLayoutParts {
    nodes: u32,
    pools: Vec<PoolSpec>,
    /// Each modelled pool's nodes, by local id.
    parts: Vec<(usize, Vec<NodePart>)>,
}

impl PoolsLayoutParts {
    /// The pools, as [`PoolSet::pools`] gave them.
    pub fn pools(&self) -> &[PoolSpec] {
        &self.pools
    }

    /// The layout, by global node id.
    pub fn finish(&self) -> PoolsLayout {
        let mut nodes = vec![None; self.nodes as usize];
        for (p, parts) in &self.parts {
            let spec = &self.pools[*p];
            for (local, part) in parts.iter().enumerate() {
                let g = spec.nodes[local];
                nodes[g as usize] = Some(part.view(g));
            }
        }
        PoolsLayout {
            nodes,
            pools: self.pools.clone(),
        }
    }

    /// Brings the parts up to date with `changes` (from
    /// [`PoolSet::layout_changes`] on the pool set these parts were taken
    /// of): (pool, local id, part). A change of a pool or node these parts
    /// do not hold is left out.
    pub fn apply(&mut self, changes: Vec<(usize, NodeId, NodePart)>) {
        for (p, n, part) in changes {
            let at = self.parts.iter_mut().find(|(q, _)| *q == p);
            if let Some(slot) = at.and_then(|(_, parts)| parts.get_mut(n as usize)) {
                *slot = part;
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Pool {
    spec: PoolSpec,
    engine: Option<CompassEngine>,
    /// The first node when the pool's nodes are contiguous global ids
    /// (every homogeneous cluster): Slurm's candidates are then read a word
    /// at a time, not node by node.
    start: Option<NodeId>,
}

/// One engine per pool (see the module docs).
#[derive(Clone, Debug)]
pub struct PoolSet {
    nodes: u32,
    pools: Vec<Pool>,
    /// Global node -> (pool, local id).
    at: Vec<Option<(usize, NodeId)>>,
    /// Pools each job holds GPUs in (several only for jobs outside the
    /// model that Slurm spread over pools).
    /// (Hashed: looked up at every event, never iterated.)
    jobs: FxHashMap<JobId, Vec<usize>>,
}

impl PoolSet {
    /// Groups `nodes` (index = global node id) into pools, in order of each
    /// pool's first node. Every engine gets `config`.
    pub fn new(nodes: &[NodeGpus], config: CompassConfig) -> Self {
        type Key = (u32, Option<String>, Option<String>);
        let mut key_of: BTreeMap<Key, usize> = BTreeMap::new();
        let mut specs: Vec<PoolSpec> = Vec::new();
        let mut at = vec![None; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            if n.gpus == 0 {
                continue;
            }
            let key = (n.gpus, n.gpu_type.clone(), n.group.clone());
            let p = *key_of.entry(key).or_insert_with(|| {
                let modelled = ClusterSpec::new(1, n.gpus).is_ok()
                    && !n.gpu_type.as_deref().is_some_and(|t| t.contains('+'));
                specs.push(PoolSpec {
                    name: format!("{}x{}", n.gpus, n.gpu_type.as_deref().unwrap_or("gpu")),
                    gpus_per_node: n.gpus,
                    gpu_type: n.gpu_type.clone(),
                    nodes: Vec::new(),
                    modelled,
                    group: n.group.clone(),
                });
                specs.len() - 1
            });
            at[i] = Some((p, specs[p].nodes.len() as NodeId));
            specs[p].nodes.push(i as NodeId);
        }
        // Nodes of one kind split over partition groups: each pool's name
        // says its group (`8xa100@gpu-a`), so names stay unique.
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for s in &specs {
            *kinds.entry(s.name.clone()).or_default() += 1;
        }
        for s in &mut specs {
            if let (Some(g), Some(&k)) = (&s.group, kinds.get(&s.name)) {
                if k > 1 {
                    s.name = format!("{}@{g}", s.name);
                }
            }
        }
        let pools = specs
            .into_iter()
            .map(|spec| {
                let engine = spec.modelled.then(|| {
                    let cs = ClusterSpec::new(spec.nodes.len() as u32, spec.gpus_per_node)
                        .expect("modelled pools have a valid capacity and >= 1 node");
                    CompassEngine::new(cs, config.clone())
                });
                let start = spec.nodes.first().copied().filter(|&a| {
                    spec.nodes
                        .iter()
                        .enumerate()
                        .all(|(k, &n)| n == a + k as NodeId)
                });
                Pool {
                    spec,
                    engine,
                    start,
                }
            })
            .collect();
        Self {
            nodes: nodes.len() as u32,
            pools,
            at,
            jobs: FxHashMap::default(),
        }
    }

    /// A homogeneous cluster as one pool (the CLI's `--nodes N --gpus G`).
    pub fn homogeneous(spec: ClusterSpec, config: CompassConfig) -> Self {
        Self::new(
            &vec![NodeGpus::new(spec.gpus_per_node, None); spec.nodes as usize],
            config,
        )
    }

    /// The node table the set was built from (what [`PoolSet::new`] takes).
    pub fn node_table(&self) -> Vec<NodeGpus> {
        (0..self.nodes)
            .map(|n| match self.pool_of(n) {
                Some((p, _)) => NodeGpus {
                    gpus: self.pools[p].spec.gpus_per_node,
                    gpu_type: self.pools[p].spec.gpu_type.clone(),
                    group: self.pools[p].spec.group.clone(),
                },
                None => NodeGpus::default(),
            })
            .collect()
    }

    /// Nodes of the whole cluster (pools, pass-through and CPU-only).
    pub fn node_count(&self) -> u32 {
        self.nodes
    }

    pub fn pools(&self) -> impl Iterator<Item = &PoolSpec> {
        self.pools.iter().map(|p| &p.spec)
    }

    pub fn pool(&self, p: usize) -> Option<&PoolSpec> {
        self.pools.get(p).map(|p| &p.spec)
    }

    /// The engine of pool `p` (`None`: pass-through or no such pool).
    pub fn engine(&self, p: usize) -> Option<&CompassEngine> {
        self.pools.get(p).and_then(|p| p.engine.as_ref())
    }

    /// The pool of a node and its local id there.
    pub fn pool_of(&self, n: NodeId) -> Option<(usize, NodeId)> {
        self.at.get(n as usize).copied().flatten()
    }

    /// Free GPUs of node `n` (global id) in its pool's engine; `None` on
    /// pass-through and CPU-only nodes (no engine counts them).
    pub fn free_on(&self, n: NodeId) -> Option<u32> {
        let (p, l) = self.pool_of(n)?;
        Some(self.engine(p)?.occupancy().free(l))
    }

    /// The modelled pool holding every one of `nodes` (global ids), if one
    /// does: where a job Slurm placed on them can be adopted in the model.
    pub fn modelled_pool_of_all(&self, nodes: &[NodeId]) -> Option<usize> {
        let mut pool = None;
        for &n in nodes {
            let (p, _) = self.pool_of(n)?;
            if pool.is_some_and(|q| q != p) {
                return None;
            }
            pool = Some(p);
        }
        pool.filter(|&p| self.pools[p].engine.is_some())
    }

    /// Pools holding GPUs of `job`.
    pub fn pools_of_job(&self, job: JobId) -> Option<&[usize]> {
        self.jobs.get(&job).map(Vec::as_slice)
    }

    fn engine_mut(&mut self, p: usize) -> Result<&mut CompassEngine> {
        let name = self.pools.get(p).map(|x| x.spec.name.clone());
        self.pools
            .get_mut(p)
            .and_then(|x| x.engine.as_mut())
            .ok_or_else(|| {
                CoreError::Invalid(match name {
                    Some(n) => format!("pool {n} is pass-through (no engine)"),
                    None => format!("no pool {p}"),
                })
            })
    }

    /// `allowed` (global) restricted to pool `p`, in local ids.
    fn local_set(&self, p: usize, allowed: &NodeSet) -> NodeSet {
        let nodes = &self.pools[p].spec.nodes;
        if let Some(a) = self.pools[p].start {
            return allowed.slice(a, nodes.len() as u32);
        }
        NodeSet::from_nodes(
            nodes.len() as u32,
            nodes
                .iter()
                .enumerate()
                .filter(|(_, &g)| allowed.contains(g))
                .map(|(k, _)| k as NodeId),
        )
    }

    fn global(&self, p: usize, local: NodeId) -> NodeId {
        self.pools[p].spec.nodes[local as usize]
    }

    fn globalise(&self, p: usize, moves: Vec<Migration>) -> Vec<Migration> {
        moves
            .into_iter()
            .map(|m| Migration {
                from: self.global(p, m.from),
                to: self.global(p, m.to),
                ..m
            })
            .collect()
    }

    /// Does pool `p` have a node among `allowed`?
    pub fn touches(&self, p: usize, allowed: &NodeSet) -> bool {
        self.pools.get(p).is_some_and(|x| match x.start {
            Some(a) => !allowed.slice(a, x.spec.nodes.len() as u32).is_empty(),
            None => x.spec.nodes.iter().any(|&n| allowed.contains(n)),
        })
    }

    /// Marks a node usable or not (Slurm: drained, down). Nodes in no
    /// modelled pool: nothing to do.
    pub fn set_node_usable(&mut self, n: NodeId, usable: bool) -> Result<()> {
        self.check_node(n)?;
        match self.pool_of(n) {
            Some((p, local)) if self.pools[p].engine.is_some() => {
                self.engine_mut(p)?.set_node_usable(local, usable)
            }
            _ => Ok(()),
        }
    }

    fn check_node(&self, n: NodeId) -> Result<()> {
        if n >= self.nodes {
            return Err(CoreError::UnknownNode {
                node: n,
                nodes: self.nodes,
            });
        }
        Ok(())
    }

    /// The plan of pool `p`'s engine for `job` among `allowed` (global ids),
    /// without changing anything: the node of each instance.
    pub fn plan_in(
        &mut self,
        p: usize,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
    ) -> Result<Option<Vec<NodeId>>> {
        let local = allowed.map(|a| self.local_set(p, a));
        let plan = self.engine_mut(p)?.plan(job, local.as_ref())?;
        Ok(plan.map(|nodes| nodes.into_iter().map(|n| self.global(p, n)).collect()))
    }

    /// The pool for `job` among `options` (pool, request in that pool's
    /// terms) and its plan there, among `allowed` nodes (global ids):
    /// every option whose engine can place the job now is scored by the
    /// fragmentation its plan leaves in that pool (`stats_after`: the
    /// pool's state right after Place, before the Compact that follows in
    /// either pool); the least `N * SIF` added wins, then the pool of the
    /// smallest nodes (what sites ask of Slurm with node `Weight`: a small
    /// job on a small node keeps the large nodes for the jobs only they
    /// can hold; measured in docs/results.md, "Mixed clusters in the
    /// simulator"), then the first option.
    ///
    /// The trial is computed from the plan, not on a copy of the engine:
    /// a copy costs the pool's size on every `select_p_job_test` call
    /// (22 ms p99 at 10,000 nodes in `compass bench --mix mixed`), and Place
    /// changes nothing but the planned nodes. `Ok(None)`: no option can take it now.
    pub fn choose(
        &mut self,
        options: &[(usize, JobRequest)],
        allowed: Option<&NodeSet>,
    ) -> Result<Option<(usize, Vec<NodeId>)>> {
        let mut plans = Vec::new();
        for (p, job) in options {
            if let Some(nodes) = self.plan_in(*p, job, allowed)? {
                plans.push((*p, job, nodes));
            }
        }
        if plans.len() <= 1 {
            return Ok(plans.pop().map(|(p, _, nodes)| (p, nodes)));
        }
        let mut best: Option<((i64, i64), usize)> = None;
        for (k, (p, job, nodes)) in plans.iter().enumerate() {
            let engine = self
                .engine(*p)
                .ok_or_else(|| CoreError::Invalid(format!("pool {p}")))?;
            let local: Vec<NodeId> = nodes
                .iter()
                .filter_map(|&n| self.pool_of(n).map(|(_, l)| l))
                .collect();
            let before = stats_of(engine);
            let after = stats_after(engine, &local, job.shape.gpus);
            let added = (
                after.n_sif as i64 - before.n_sif as i64,
                i64::from(self.pools[*p].spec.gpus_per_node),
            );
            if best.is_none_or(|(b, _)| added < b) {
                best = Some((added, k));
            }
        }
        Ok(best.map(|(_, k)| {
            let (p, _, nodes) = plans.swap_remove(k);
            (p, nodes)
        }))
    }

    /// Places `job` in the pool [`PoolSet::choose`] picks among `options`
    /// (Algorithm 1, lines 3-9, in that pool's engine; its Compact when the
    /// config compacts). Returns the pool and the admission, global ids.
    pub fn place(
        &mut self,
        options: &[(usize, JobRequest)],
        allowed: Option<&NodeSet>,
    ) -> Result<Option<(usize, Admission)>> {
        let Some((p, _)) = self.choose(options, allowed)? else {
            return self.place_making_room(options, allowed);
        };
        let job = options
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, j)| j.clone())
            .ok_or_else(|| CoreError::Invalid(format!("pool {p} not among the options")))?;
        if self.jobs.contains_key(&job.id) {
            return Err(CoreError::DuplicateJob(job.id));
        }
        let local = allowed.map(|a| self.local_set(p, a));
        let Some(adm) = self.engine_mut(p)?.place(&job, local.as_ref())? else {
            return Ok(None);
        };
        Ok(Some(self.admitted(p, job.id, adm)))
    }

    /// Pool `p`'s engine admitted `job` (`adm`, its own ids): the job is
    /// recorded in `p`, and the admission returned in global ids.
    fn admitted(&mut self, p: usize, job: JobId, adm: Admission) -> (usize, Admission) {
        self.jobs.insert(job, vec![p]);
        let adm = Admission {
            nodes: adm.nodes.iter().map(|&n| self.global(p, n)).collect(),
            migrations: self.globalise(p, adm.migrations),
        };
        (p, adm)
    }

    /// No pool has room for the job as the nodes are: with correction 12
    /// on (`CompassConfig::make_room`), the first pool of `options` whose
    /// engine can make room for it by moving others aside places it there
    /// (a pool that cannot changes nothing). Off, or with `allowed`: `None`.
    fn place_making_room(
        &mut self,
        options: &[(usize, JobRequest)],
        allowed: Option<&NodeSet>,
    ) -> Result<Option<(usize, Admission)>> {
        if allowed.is_some() {
            return Ok(None);
        }
        for (p, job) in options {
            let p = *p;
            let Some(engine) = self.pools.get_mut(p).and_then(|x| x.engine.as_mut()) else {
                continue;
            };
            if !engine.config().make_room {
                return Ok(None);
            }
            if self.jobs.contains_key(&job.id) {
                return Err(CoreError::DuplicateJob(job.id));
            }
            if let Some(adm) = engine.place(job, None)? {
                return Ok(Some(self.admitted(p, job.id, adm)));
            }
        }
        Ok(None)
    }

    /// Slurm placed `job` itself on `nodes` (global ids, one per instance),
    /// all in one modelled pool: that engine adopts it.
    pub fn adopt(&mut self, job: &JobRequest, nodes: &[NodeId]) -> Result<AdoptOutcome> {
        let mut pool = None;
        let mut local = Vec::with_capacity(nodes.len());
        for &n in nodes {
            self.check_node(n)?;
            let Some((p, l)) = self.pool_of(n) else {
                return Err(CoreError::BadLayout {
                    job: job.id,
                    why: format!("node {n} is in no GPU pool"),
                });
            };
            if pool.is_some_and(|q| q != p) {
                return Err(CoreError::BadLayout {
                    job: job.id,
                    why: "instances span several pools".into(),
                });
            }
            pool = Some(p);
            local.push(l);
        }
        let p = pool.ok_or(CoreError::NoInstances(job.id))?;
        if self.jobs.contains_key(&job.id) {
            return Err(CoreError::DuplicateJob(job.id));
        }
        let out = self.engine_mut(p)?.adopt(job, &local)?;
        self.jobs.insert(job.id, vec![p]);
        Ok(out)
    }

    /// GPUs of a job outside the model (`(node, GPUs)`, global ids): each
    /// modelled pool it touches records its part as foreign, immovable use.
    /// GPUs on pass-through or CPU-only nodes are Slurm's alone.
    pub fn adopt_foreign(&mut self, job: JobId, per_node_gpus: &[(NodeId, u32)]) -> Result<()> {
        if self.jobs.contains_key(&job) {
            return Err(CoreError::DuplicateJob(job));
        }
        let mut by_pool: BTreeMap<usize, Vec<(NodeId, u32)>> = BTreeMap::new();
        for &(n, g) in per_node_gpus {
            self.check_node(n)?;
            if g == 0 {
                continue;
            }
            if let Some((p, l)) = self.pool_of(n) {
                if self.pools[p].engine.is_some() {
                    by_pool.entry(p).or_default().push((l, g));
                }
            }
        }
        // Every pool is checked before any adopts: a refusal changes
        // nothing (issue #11: the pools adopted before were rolled back by a
        // removal, whose Compact moved jobs and reported none of it).
        for (&p, chunks) in &by_pool {
            let Some(e) = self.engine(p) else { continue };
            let occ = e.occupancy();
            let mut add: BTreeMap<NodeId, u64> = BTreeMap::new();
            for &(l, g) in chunks {
                *add.entry(l).or_default() += u64::from(g);
            }
            for (l, g) in add {
                let used = u64::from(occ.used(l)) + g;
                if used > u64::from(occ.capacity()) {
                    return Err(CoreError::Overcommit {
                        job,
                        node: self.global(p, l),
                        used: u32::try_from(used).unwrap_or(u32::MAX),
                        capacity: occ.capacity(),
                    });
                }
            }
        }
        let mut done = Vec::new();
        for (p, chunks) in &by_pool {
            if let Err(e) = self.engine_mut(*p)?.adopt_foreign(job, chunks) {
                for q in done {
                    let _ = self.engine_mut(q)?.remove(job);
                }
                return Err(e);
            }
            done.push(*p);
        }
        self.jobs.insert(job, done);
        Ok(())
    }

    /// The job departs from every pool it holds; returns the migrations of
    /// the Compacts that follow, when the engines' config compacts.
    pub fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        let pools = self.jobs.remove(&job).ok_or(CoreError::UnknownJob(job))?;
        let mut out = Vec::new();
        for p in pools {
            let moves = self.engine_mut(p)?.remove(job)?;
            out.extend(self.globalise(p, moves));
        }
        Ok(out)
    }

    /// Marks a job movable or not (in the model: its pool's engine).
    pub fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        let pools = self
            .jobs
            .get(&job)
            .ok_or(CoreError::UnknownJob(job))?
            .clone();
        for p in pools {
            self.engine_mut(p)?.set_movable(job, movable)?;
        }
        Ok(())
    }

    /// Holds `jobs` still for Compact, or releases them, in every engine
    /// that runs them, its occupancy untouched
    /// ([`CompassEngine::set_tidy_hold`]).
    pub fn set_tidy_hold(&mut self, jobs: &[JobId], held: bool) {
        // Each engine is handed its own jobs only (issue #11: the gate's
        // trial releases every held job, and each engine looked up every
        // one of them).
        let mut of_pool: Vec<Vec<JobId>> = vec![Vec::new(); self.pools.len()];
        for j in jobs {
            for &p in self.jobs.get(j).map_or(&[][..], Vec::as_slice) {
                of_pool[p].push(*j);
            }
        }
        for (pool, mine) in self.pools.iter_mut().zip(of_pool) {
            if let Some(e) = pool.engine.as_mut().filter(|_| !mine.is_empty()) {
                e.set_tidy_hold(&mine, held);
            }
        }
    }

    /// Remembers the nodes (global ids) a job in the model may use, when
    /// Slurm's candidates for it cover only part of its pool (a partition,
    /// `--exclude`, features): Compact then keeps it inside them
    /// ([`CompassEngine::set_allowed`]). `None`: any node of its pool. Jobs
    /// outside the model (or in a pass-through pool) never move: no-op.
    pub fn set_allowed(&mut self, job: JobId, allowed: Option<&NodeSet>) -> Result<()> {
        let pools = self.jobs.get(&job).ok_or(CoreError::UnknownJob(job))?;
        let &[p] = pools.as_slice() else {
            return Ok(());
        };
        let local = allowed.map(|a| self.local_set(p, a));
        match self.pools[p].engine.as_mut() {
            Some(e) if !e.is_foreign(job) => e.set_allowed(job, local.as_ref()),
            _ => Ok(()),
        }
    }

    /// A job in the model as its pool holds it (global ids).
    pub fn job(&self, job: JobId) -> Option<PooledJob> {
        let &[p] = self.jobs.get(&job)?.as_slice() else {
            return None;
        };
        let r = self.engine(p)?.occupancy().job(job)?;
        Some(PooledJob {
            pool: p,
            request: r.request.clone(),
            nodes: r.nodes.iter().map(|&n| self.global(p, n)).collect(),
        })
    }

    /// Where a running job of one pool is, without a copy
    /// ([`PoolSet::job`]): its GPUs per instance and each instance's node
    /// (global ids).
    pub fn job_nodes(&self, job: JobId) -> Option<(u32, impl Iterator<Item = NodeId> + '_)> {
        let &[p] = self.jobs.get(&job)?.as_slice() else {
            return None;
        };
        let r = self.engine(p)?.occupancy().job(job)?;
        Some((
            r.request.shape.gpus,
            r.nodes.iter().map(move |&n| self.global(p, n)),
        ))
    }

    /// Compact in every pool (Algorithm 1, lines 9 and 16), global ids.
    pub fn compact(&mut self) -> Vec<Migration> {
        self.compact_vetoed(&mut Veto::none())
    }

    /// Compact in every pool, asking `veto` before each move of a job to
    /// another node ([`CompassEngine::compact_vetoed`]); the pools after
    /// the veto is exhausted are not compacted.
    pub fn compact_vetoed(&mut self, veto: &mut Veto<'_>) -> Vec<Migration> {
        let mut out = Vec::new();
        for p in 0..self.pools.len() {
            if veto.exhausted() {
                break;
            }
            let moves = match self.pools[p].engine.as_mut() {
                Some(e) => e.compact_vetoed(veto),
                None => continue,
            };
            out.extend(self.globalise(p, moves));
        }
        out
    }

    /// Opens a trial in every engine ([`CompassEngine::begin_trial`]):
    /// what Compact changes from now on can be undone, at the cost of what
    /// it touches.
    pub fn begin_trial(&mut self) {
        for e in self.pools.iter_mut().filter_map(|p| p.engine.as_mut()) {
            e.begin_trial();
        }
    }

    /// The nodes (pool, local id) whose state may have changed since the
    /// last call ([`CompassEngine::take_changed`]).
    pub fn take_changed(&mut self) -> Vec<(usize, NodeId)> {
        let mut out = Vec::new();
        for (p, pool) in self.pools.iter_mut().enumerate() {
            if let Some(e) = pool.engine.as_mut() {
                out.extend(e.take_changed().into_iter().map(|n| (p, n)));
            }
        }
        out
    }

    /// Keeps the innermost trial of every engine ([`CompassEngine::keep_trial`]).
    pub fn keep_trial(&mut self) {
        for e in self.pools.iter_mut().filter_map(|p| p.engine.as_mut()) {
            e.keep_trial();
        }
    }

    /// Undoes the innermost trial of every engine ([`CompassEngine::undo_trial`]).
    pub fn undo_trial(&mut self) {
        for e in self.pools.iter_mut().filter_map(|p| p.engine.as_mut()) {
            e.undo_trial();
        }
    }

    /// Every engine's structural invariants (Proposition 1, accounting).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.check_invariants_part(0, 1)
    }

    /// Part `part` of `parts` of [`PoolSet::check_invariants`]: in each
    /// engine, the `part`-th of `parts` equal runs of its nodes
    /// ([`CompassEngine::check_invariants_of`]). Parts `0..parts` together
    /// check every node.
    pub fn check_invariants_part(&self, part: u32, parts: u32) -> std::result::Result<(), String> {
        let parts = u64::from(parts.max(1));
        let part = u64::from(part) % parts;
        for pool in &self.pools {
            if let Some(e) = &pool.engine {
                let len = pool.spec.nodes.len() as u64;
                let at = |k: u64| (len * k / parts) as NodeId;
                e.check_invariants_of(at(part)..at(part + 1))
                    .map_err(|why| format!("pool {}: {why}", pool.spec.name))?;
            }
        }
        Ok(())
    }

    /// Fragmentation of pool `p` as its engine holds it (`None`:
    /// pass-through).
    pub fn stats(&self, p: usize) -> Option<PoolStats> {
        self.engine(p).map(stats_of)
    }

    /// Every modelled pool's layout, by global node id (every node's
    /// state copied).
    pub fn snapshot(&self) -> PoolsLayout {
        let mut nodes = vec![None; self.nodes as usize];
        for pool in &self.pools {
            let Some(e) = &pool.engine else { continue };
            for mut v in e.snapshot().nodes {
                let g = pool.spec.nodes[v.node as usize];
                v.node = g;
                nodes[g as usize] = Some(v);
            }
        }
        PoolsLayout {
            nodes,
            pools: self.pools().cloned().collect(),
        }
    }

    /// The parts of the nodes that changed since the last call, (pool,
    /// local id, part), for [`PoolsLayoutParts::apply`] on parts taken of
    /// this pool set before ([`CompassEngine::layout_changes`]); the cost
    /// is that of the nodes changed.
    pub fn layout_changes(&self) -> Vec<(usize, NodeId, NodePart)> {
        let mut out = Vec::new();
        for (p, pool) in self.pools.iter().enumerate() {
            if let Some(e) = pool.engine.as_ref() {
                out.extend(e.layout_changes().into_iter().map(|(n, part)| (p, n, part)));
            }
        }
        out
    }

    /// [`PoolSet::snapshot`]'s parts, each node's state shared with a copy
    /// the engine keeps until the node changes, so only the nodes changed
    /// since the last call are copied ([`CompassEngine::layout_parts`]).
    pub fn layout_parts(&self) -> PoolsLayoutParts {
        PoolsLayoutParts {
            nodes: self.nodes,
            pools: self.pools().cloned().collect(),
            parts: self
                .pools
                .iter()
                .enumerate()
                .filter_map(|(p, pool)| Some((p, pool.engine.as_ref()?.layout_parts())))
                .collect(),
        }
    }

    /// Shape of a job in pool terms: `w x g` (for callers that build the
    /// per-pool requests of [`PoolSet::choose`]).
    pub fn request(id: u64, shape: JobShape, movable: bool) -> JobRequest {
        JobRequest {
            id: JobId(id),
            shape,
            movable,
        }
    }
}

/// The fragmentation of `e`'s pool once instances of `gpus` GPUs are added
/// on `nodes` (local ids, one entry per instance), computed without
/// changing anything: the used GPUs of the planned nodes change, and the
/// instance counts that `Phi*` is taken over.
fn stats_after(e: &CompassEngine, nodes: &[NodeId], gpus: u32) -> PoolStats {
    let occ = e.occupancy();
    let cap = occ.capacity();
    let mut counts = *occ.instance_counts();
    counts[gpus.min(8) as usize] += nodes.len() as u64;
    let mut added: BTreeMap<NodeId, u32> = BTreeMap::new();
    for &n in nodes {
        *added.entry(n).or_default() += gpus;
    }
    let partial_of = |used: u32| used > 0 && used < cap;
    let mut partial = i64::from(occ.partial_nodes());
    for (&n, &g) in &added {
        let used = occ.used(n);
        partial += i64::from(partial_of(used + g)) - i64::from(partial_of(used));
    }
    let partial = u32::try_from(partial.max(0)).unwrap_or(u32::MAX);
    let phi = phi_star(&counts, cap);
    PoolStats {
        partial_nodes: partial,
        phi_star: phi,
        n_sif: u64::from(partial).saturating_sub(phi),
        wcc: wcc_holds(&counts, cap),
    }
}

fn stats_of(e: &CompassEngine) -> PoolStats {
    let occ = e.occupancy();
    let cap = occ.capacity();
    let counts = *occ.instance_counts();
    let phi = phi_star(&counts, cap);
    PoolStats {
        partial_nodes: occ.partial_nodes(),
        phi_star: phi,
        n_sif: u64::from(occ.partial_nodes()).saturating_sub(phi),
        wcc: wcc_holds(&counts, cap),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Vec<NodeGpus> {
        let mut v = Vec::new();
        v.extend((0..8).map(|_| NodeGpus::new(8, Some("a100"))));
        v.extend((0..4).map(|_| NodeGpus::new(4, Some("l40s"))));
        v.extend((0..2).map(|_| NodeGpus::new(2, None)));
        v.extend((0..4).map(|_| NodeGpus::new(0, None)));
        v
    }

    fn req(id: u64, w: u32, g: u32) -> JobRequest {
        JobRequest::new(id, w, g)
    }

    #[test]
    fn layout_parts_keep_the_layout_as_it_was_when_taken() {
        // The select plugin takes the parts under its lock and builds the
        // layout after, while the engine changes: the layout built is the
        // one of the instant the parts were taken, in every pool.
        let mut s = PoolSet::new(&site(), CompassConfig::default());
        s.adopt(&req(1, 1, 4), &[0]).unwrap();
        s.adopt(&req(2, 1, 2), &[8]).unwrap();
        let parts = s.layout_parts();
        let then = s.snapshot();
        s.adopt(&req(3, 2, 8), &[1, 2]).unwrap();
        s.remove(JobId(2)).unwrap();
        s.adopt(&req(4, 1, 1), &[0]).unwrap();
        let now = s.snapshot();
        assert_ne!(now, then);
        assert_eq!(parts.finish(), then);
        // Parts taken now are the layout now (`snapshot` copies every
        // node afresh), also after a trial undone, which puts nodes back
        // behind the copies, and one kept. (Every event of the property
        // tests checks the same, `compass_props`.)
        assert_eq!(s.layout_parts().finish(), now);
        assert_eq!(now.nodes[1].as_ref().map(|v| v.used), Some(8));
        assert_eq!(then.nodes[1].as_ref().map(|v| v.used), Some(0));
        s.adopt(&req(5, 1, 4), &[3]).unwrap();
        s.begin_trial();
        assert!(!s.compact().is_empty(), "the trial moves a job");
        s.undo_trial();
        assert_eq!(s.layout_parts().finish(), s.snapshot());
        s.begin_trial();
        s.compact();
        s.keep_trial();
        assert_eq!(s.layout_parts().finish(), s.snapshot());
    }

    #[test]
    fn pools_group_interchangeable_nodes_and_skip_cpu_nodes() {
        let s = PoolSet::new(&site(), CompassConfig::default());
        let pools: Vec<(String, usize, bool)> = s
            .pools()
            .map(|p| (p.name.clone(), p.nodes.len(), p.modelled))
            .collect();
        assert_eq!(
            pools,
            vec![
                ("8xa100".into(), 8, true),
                ("4xl40s".into(), 4, true),
                ("2xgpu".into(), 2, true)
            ]
        );
        assert_eq!(s.pool_of(9), Some((1, 1)));
        assert_eq!(s.pool_of(15), None, "CPU-only nodes are in no pool");
        assert_eq!(s.node_count(), 18);
        assert_eq!(s.node_table(), site());
    }

    #[test]
    fn partitions_joined_directly_or_through_others_make_one_group() {
        let parts = |v: &[(&str, &[NodeId])]| -> Vec<(String, Vec<NodeId>)> {
            v.iter()
                .map(|(n, ns)| (n.to_string(), ns.to_vec()))
                .collect()
        };
        let g = |v: &[Option<&str>]| -> Vec<Option<String>> {
            v.iter().map(|x| x.map(str::to_string)).collect()
        };
        // Disjoint: one group each, named by its partition; node 8 in none;
        // an id past the table is ignored.
        let groups = partition_groups(
            9,
            &parts(&[("b", &[4, 5, 6, 7]), ("a", &[0, 1, 2, 3, 40]), ("a2", &[3])]),
        );
        let (a, b) = (Some("a"), Some("b"));
        assert_eq!(groups, g(&[a, a, a, a, b, b, b, b, None]));
        // Overlapping (the site lab's `gpu` and `debug`), and a chain
        // (`x` joins `gpu` to `y`): one group, the smallest name.
        let groups = partition_groups(
            8,
            &parts(&[
                ("gpu", &[0, 1, 2, 3]),
                ("debug", &[2, 3]),
                ("y", &[5, 6]),
                ("x", &[3, 5]),
                ("cpu", &[7]),
            ]),
        );
        let d = Some("debug");
        assert_eq!(groups, g(&[d, d, d, d, None, d, d, Some("cpu")]));
        assert_eq!(partition_groups(3, &[]), g(&[None, None, None]));
    }

    #[test]
    fn disjoint_partitions_get_one_engine_each() {
        let groups = partition_groups(
            9,
            &[
                ("gpu-b".to_string(), vec![4, 5, 6, 7]),
                ("gpu-a".to_string(), vec![0, 1, 2, 3]),
            ],
        );
        let mut nodes: Vec<NodeGpus> = groups
            .iter()
            .map(|g| NodeGpus::new(8, None).in_group(g.as_deref()))
            .collect();
        nodes.push(NodeGpus::new(4, Some("l40s")).in_group(Some("gpu-a")));
        let mut s = PoolSet::new(&nodes, CompassConfig::default());
        let pools: Vec<(String, Vec<NodeId>, Option<String>)> = s
            .pools()
            .map(|p| (p.name.clone(), p.nodes.clone(), p.group.clone()))
            .collect();
        let a = Some("gpu-a".to_string());
        assert_eq!(
            pools,
            vec![
                ("8xgpu@gpu-a".into(), vec![0, 1, 2, 3], a.clone()),
                ("8xgpu@gpu-b".into(), vec![4, 5, 6, 7], Some("gpu-b".into())),
                // node 8, in no partition, and a kind in one group only:
                // their names as without partitions
                ("8xgpu".into(), vec![8], None),
                ("4xl40s".into(), vec![9], a),
            ]
        );
        assert_eq!(s.node_table(), nodes);
        // Each partition's jobs fill its own pool's nodes, as one engine
        // per pool packs them: 1-GPU jobs share one pool node in each.
        let part = |r: std::ops::Range<NodeId>| NodeSet::from_nodes(10, r);
        for id in 0..3 {
            let (p, adm) = s
                .place(&[(0, req(id, 1, 1))], Some(&part(0..4)))
                .unwrap()
                .unwrap();
            assert_eq!((p, adm.nodes.len()), (0, 1));
            assert!(adm.nodes[0] < 4, "{:?}", adm.nodes);
            let (p, adm) = s
                .place(&[(1, req(10 + id, 1, 1))], Some(&part(4..8)))
                .unwrap()
                .unwrap();
            assert_eq!(p, 1);
            assert!((4..8).contains(&adm.nodes[0]), "{:?}", adm.nodes);
        }
        for p in [0, 1] {
            let st = s.stats(p).unwrap();
            assert_eq!((st.partial_nodes, st.n_sif), (1, 0), "pool {p}: {st:?}");
        }
    }

    #[test]
    fn other_gpu_counts_and_multi_type_nodes_are_pass_through() {
        let nodes = vec![
            NodeGpus::new(6, Some("h100")),
            NodeGpus::new(6, Some("h100")),
            NodeGpus::new(3, None),
            NodeGpus::new(8, Some("a100+h100")),
            NodeGpus::new(8, Some("a100")),
        ];
        let mut s = PoolSet::new(&nodes, CompassConfig::default());
        let modelled: Vec<(String, bool)> =
            s.pools().map(|p| (p.name.clone(), p.modelled)).collect();
        assert_eq!(
            modelled,
            vec![
                ("6xh100".into(), false),
                ("3xgpu".into(), false),
                ("8xa100+h100".into(), false),
                ("8xa100".into(), true)
            ]
        );
        assert!(s.engine(0).is_none() && s.stats(0).is_none());
        assert!(s.plan_in(0, &req(1, 1, 2), None).is_err());
        // a job Slurm ran on a pass-through node is Slurm's alone; its GPUs
        // on a modelled node are recorded there
        s.adopt_foreign(JobId(2), &[(0, 6), (4, 2)]).unwrap();
        assert_eq!(s.pools_of_job(JobId(2)), Some(&[3][..]));
        assert_eq!(s.engine(3).unwrap().occupancy().used(0), 2);
        assert!(s.adopt(&req(3, 1, 2), &[1]).is_err(), "no engine there");
        s.remove(JobId(2)).unwrap();
        assert_eq!(s.engine(3).unwrap().occupancy().used(0), 0);
        // draining a pass-through node is not an error
        s.set_node_usable(0, false).unwrap();
        assert!(s.set_node_usable(9, false).is_err());
    }

    #[test]
    fn plans_stay_inside_the_pool_and_allowed_nodes() {
        let mut s = PoolSet::new(&site(), CompassConfig::default());
        let allowed = NodeSet::from_nodes(18, [10, 11, 12]);
        let plan = s
            .plan_in(1, &req(1, 2, 4), Some(&allowed))
            .unwrap()
            .unwrap();
        assert_eq!(plan, vec![10, 11]);
        // (the engine's own unrestricted plan would be n8, n9: Diverged)
        s.adopt(&req(1, 2, 4), &plan).unwrap();
        assert_eq!(
            s.job(JobId(1)).unwrap().nodes,
            vec![10, 11],
            "global ids out"
        );
        assert!(s.adopt(&req(2, 2, 1), &[0, 9]).is_err(), "spans two pools");
        assert!(s.adopt(&req(3, 1, 1), &[15]).is_err(), "CPU-only node");
    }

    #[test]
    fn choose_prefers_the_least_fragmentation_then_the_smallest_nodes() {
        let mut s = PoolSet::new(&site(), CompassConfig::default());
        // a100 pool: one node holds a 4-GPU job (4 free); l40s: empty.
        s.adopt(&req(1, 1, 4), &[0]).unwrap();
        // A 4-GPU job closes the open a100 node or fills an l40s node
        // exactly: N*SIF stays 0 in both, so the smaller nodes win (the
        // a100 node's 4 free GPUs stay for a job only it can take),
        // whatever the order of the options.
        for options in [
            vec![(1, req(2, 1, 4)), (0, req(2, 1, 4))],
            vec![(0, req(2, 1, 4)), (1, req(2, 1, 4))],
        ] {
            let (p, _) = s.choose(&options, None).unwrap().unwrap();
            assert_eq!(p, 1, "{options:?}");
        }
        // An 8-GPU job has one pool that can hold it: a100, on an empty node.
        let (p, nodes) = s.choose(&[(0, req(3, 1, 8))], None).unwrap().unwrap();
        assert_eq!(p, 0);
        assert_ne!(nodes, vec![0], "node 0 holds a 4-GPU job");
        // the smaller nodes win whatever the order of the options
        let mut t = PoolSet::new(&site(), CompassConfig::default());
        for options in [
            vec![(2, req(5, 1, 2)), (1, req(5, 1, 2))],
            vec![(1, req(5, 1, 2)), (2, req(5, 1, 2))],
        ] {
            let (p, _) = t.choose(&options, None).unwrap().unwrap();
            assert_eq!(p, 2, "{options:?}");
        }
        // ties (same fragmentation, same node size) go to the first option
        let two_types: Vec<NodeGpus> = (0..4)
            .map(|i| NodeGpus::new(8, Some(if i < 2 { "a100" } else { "h100" })))
            .collect();
        let mut t = PoolSet::new(&two_types, CompassConfig::default());
        for first in [0, 1] {
            let options = [(first, req(6, 1, 4)), (1 - first, req(6, 1, 4))];
            let (p, _) = t.choose(&options, None).unwrap().unwrap();
            assert_eq!(p, first);
        }
        // nothing fits: None, state unchanged
        let full = NodeSet::from_nodes(18, [15, 16]);
        assert_eq!(s.choose(&[(0, req(6, 1, 1))], Some(&full)).unwrap(), None);
    }

    #[test]
    fn the_trial_from_the_plan_is_the_state_after_place() {
        // Random arrivals and departures: before each arrival, what
        // stats_after predicts from the plan equals the engine's state
        // after the same Place (without Compact).
        let cfg = CompassConfig {
            compact: false,
            ..CompassConfig::default()
        };
        let mut s = PoolSet::new(&site(), cfg);
        let mut x = 11u64;
        let mut running = Vec::new();
        for id in 0..400u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if (x >> 40).is_multiple_of(3) && !running.is_empty() {
                let j = running.swap_remove((x >> 20) as usize % running.len());
                s.remove(j).unwrap();
                continue;
            }
            let g = [1, 1, 1, 2, 3, 4, 5, 8][(x >> 33) as usize % 8];
            let w = 1 + (x >> 50) as u32 % 2;
            let job = req(id, w, g);
            let Some(plan) = s.plan_in(0, &job, None).unwrap() else {
                continue;
            };
            let local: Vec<NodeId> = plan.iter().map(|&n| s.pool_of(n).unwrap().1).collect();
            let predicted = stats_after(s.engine(0).unwrap(), &local, g);
            let (p, adm) = s.place(&[(0, job.clone())], None).unwrap().unwrap();
            assert_eq!((p, adm.nodes), (0, plan));
            assert_eq!(predicted, s.stats(0).unwrap(), "job {id}");
            running.push(job.id);
        }
    }

    #[test]
    fn migrations_come_out_in_global_ids() {
        let cfg = CompassConfig {
            compact: false,
            ..CompassConfig::default()
        };
        let mut s = PoolSet::new(&site(), cfg);
        // two lone 2-GPU instances on two l40s nodes: Compact joins them
        s.adopt(&req(1, 1, 2), &[8]).unwrap();
        s.adopt(&req(2, 1, 2), &[9]).unwrap();
        let moves = s.compact();
        assert_eq!(moves.len(), 1, "{moves:?}");
        let m = moves[0];
        assert!(
            (8..12).contains(&m.from) && (8..12).contains(&m.to),
            "{m:?}"
        );
        assert_eq!(s.stats(1).unwrap().partial_nodes, 0);
        assert_eq!(s.check_invariants(), Ok(()));
        let layout = s.snapshot();
        assert!(layout.nodes[0].is_some() && layout.nodes[15].is_none());
        assert_eq!(layout.nodes[m.to as usize].as_ref().unwrap().used, 4);
    }

    #[test]
    fn a_pool_makes_room_when_correction_12_is_on() {
        // Two CPU-only nodes, then 4 a100 nodes and 2 l40s nodes: in the
        // a100 pool (global 2-5) a 2x4 job fills node 2, a 4x2 job node
        // 5, a lone 1-GPU job sits on node 3 and node 4 holds 2 + 4 GPUs.
        // An 8-GPU a100 job finds no room; with `make_room` the 1-GPU job
        // moves to node 4 and it starts on node 3.
        let mut nodes = vec![NodeGpus::new(0, None); 2];
        nodes.extend((0..4).map(|_| NodeGpus::new(8, Some("a100"))));
        nodes.extend((0..2).map(|_| NodeGpus::new(4, Some("l40s"))));
        let blocked = |make_room: bool| {
            let cfg = CompassConfig {
                make_room,
                ..CompassConfig::default()
            };
            let mut s = PoolSet::new(&nodes, cfg);
            for (job, at) in [
                (req(1, 2, 4), vec![2, 2]),
                (req(2, 1, 1), vec![3]),
                (req(3, 1, 2), vec![4]),
                (req(4, 1, 4), vec![4]),
                (req(5, 4, 2), vec![5, 5, 5, 5]),
            ] {
                s.adopt(&job, &at).unwrap();
            }
            assert!(s.compact().is_empty());
            s
        };
        let head = [(0, req(9, 1, 8))];
        assert_eq!(blocked(false).place(&head, None).unwrap(), None);
        let (p, adm) = blocked(true).place(&head, None).unwrap().unwrap();
        assert_eq!((p, adm.nodes), (0, vec![3]));
        assert_eq!(
            adm.migrations,
            vec![Migration {
                job: JobId(2),
                instance: 0,
                from: 3,
                to: 4
            }]
        );
        // Restricted to part of the nodes, a job makes no room.
        let all = NodeSet::from_nodes(8, 0..8);
        assert_eq!(blocked(true).place(&head, Some(&all)).unwrap(), None);
    }
}
