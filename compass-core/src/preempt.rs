//! Protected and preemptible time (`fair-share-budgets.txt`; issue 5): who
//! may be preempted, for whom, and which victims free room a pending job can
//! actually use under the one-node-per-instance rule.
//!
//! Rules, all decided here with the clock injected:
//! - A job with `min_runtime > 0` is *allocated* time: charged, and
//!   **protected** until it has run `min(min_runtime, cap)` since its last
//!   (re)start. A job with `min_runtime = 0` is *unallocated*: free, never
//!   protected.
//! - A pending allocated job that cannot start may preempt, in this order of
//!   preference, unallocated jobs, then unprotected allocated jobs of teams
//!   that run more allocated GPUs than their allocation, while the
//!   requester's team runs less than its own; under the ratio order (and
//!   without loads) the victim's fair-share ratio must also be higher than
//!   the requester's by a hysteresis margin ([`TeamTable::loads_decide`]);
//!   under the under-allocation-first order either that holds or the
//!   victim's team, without the victim, still runs at least its allocation
//!   (`job_yields`). A team's head (its first job that may preempt) may
//!   take any of these; its later jobs only unallocated jobs, and only while
//!   the team, with them, stays within its allocation
//!   ([`later_job_may_preempt`]). Unallocated requests never preempt.
//! - The victim set must make the job placeable: enough nodes with `g` free
//!   GPUs for its `w` instances, counted node by node (free GPUs spread over
//!   many nodes are not room for an 8-GPU instance), and only on nodes the
//!   job could run on ([`PendingJob::needs`] against [`NodeRoom::traits`]:
//!   partitions, constraint, excluded nodes, GPU type) with its CPUs and
//!   memory free there once the victims leave. Without traits (the policy
//!   simulator) every node is eligible and CPUs and memory are not counted.
//!   A victim only on nodes the job cannot use is never taken. Among such
//!   sets we take the one that loses the least allocated GPU-time, then
//!   the least unallocated GPU-time, then has the fewest victims, then
//!   leaves the fewest partial nodes.
//! - **No preemption loop.** A job never preempts the job that preempted it
//!   last, and a job that was preempted cannot preempt again until it has run
//!   its min runtime since its restart. So every preemption of a job `J` is
//!   preceded by `J` completing a protected period, and a chain
//!   `A -> B -> A` needs `A` to have run its min runtime in between: a job is
//!   preempted at most once per protected period it completes.
//! - **Room is given once.** A job for which room was freed by preemption
//!   and that has not started since (`PendingJob::room_given`: the driver
//!   knows whether the room was used) takes free room but preempts no one:
//!   a job that cannot use the room (a limit the planner does not see:
//!   licences, reservations, free GPUs per type on a multi-type node)
//!   would otherwise take the same victim every cycle.
//! - At most `max_preemptions_per_cycle` victims per [`plan_cycle`] (or the
//!   first job's, if it needs more); the queue's later jobs wait for the
//!   next cycle (`CyclePlan::held_back`).
//! - Faulty nodes take no new jobs; each job on one is preempted as soon as its
//!   protection ends; an empty faulty node is drained for repair.
//! - **Drains** ([`plan_drain`]), for a job no legal victim set can place now:
//!   the nodes that become room soonest are held, so no new work that would
//!   still be protected then lands on them; the job then takes them through
//!   [`plan_room`]. Drivers decide when to ask (the simulator: opt-in).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::model::{JobId, JobShape, NodeId, NodeSet};

/// Site settings of protection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProtectionConfig {
    /// Longest protected time a job can buy (the published design: 8 h).
    pub min_runtime_cap_s: Seconds,
    /// Resumable jobs checkpoint this often from the start of each run; a
    /// resumable victim loses its run time since its last checkpoint
    /// (non-resumable victims lose all their run time).
    pub checkpoint_interval_s: Seconds,
    /// Exhaustive victim search up to this many candidates; greedy with
    /// pruning above.
    pub exact_search_limit: usize,
    /// Hysteresis: an allocated victim's team ratio must exceed the
    /// requester's by this fraction (0.05: 5% more over-served), so two teams
    /// close to their budgets do not take turns preempting each other. Not
    /// applied when loads decide ([`TeamTable::loads_decide`]).
    pub preempt_margin: f64,
    /// At most this many victims per [`plan_cycle`] (faulty-node evictions
    /// included); a pending job whose victims would pass the limit, and every
    /// job after it in the queue, preempts no one this cycle. The first
    /// job's victims are always allowed, so a job that needs more victims
    /// than the limit is still served (alone in its cycle).
    #[serde(default = "default_max_preemptions")]
    pub max_preemptions_per_cycle: usize,
}

/// Default of [`ProtectionConfig::max_preemptions_per_cycle`].
pub const DEFAULT_MAX_PREEMPTIONS_PER_CYCLE: usize = 16;

fn default_max_preemptions() -> usize {
    DEFAULT_MAX_PREEMPTIONS_PER_CYCLE
}

impl Default for ProtectionConfig {
    fn default() -> Self {
        Self {
            min_runtime_cap_s: 8.0 * 3600.0,
            checkpoint_interval_s: 600.0,
            exact_search_limit: 10,
            preempt_margin: 0.05,
            max_preemptions_per_cycle: DEFAULT_MAX_PREEMPTIONS_PER_CYCLE,
        }
    }
}

/// A running job as the planner sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningJob {
    pub id: JobId,
    /// Team (Slurm account, a leaf of the budget tree).
    pub account: String,
    /// GPUs held on each node.
    pub gpus_on: Vec<(NodeId, u32)>,
    pub min_runtime_s: Seconds,
    /// Start of the current run (after the last requeue).
    pub started_s: Seconds,
    pub resumable: bool,
    /// CPUs the job holds on each of its nodes (0: unknown; its CPUs are
    /// then not counted as freed by its preemption).
    #[serde(default)]
    pub cpus_per_node: u32,
    /// Memory (MB) the job holds on each of its nodes (0: unknown).
    #[serde(default)]
    pub mem_per_node_mb: u64,
    /// Mean `[gpu_weights]` weight of its GPUs
    /// ([`crate::fairshare::GpuWeights::mean_weight`]; 1.0 untyped): its
    /// GPUs count `gpus x weight` in every team load ([`Self::charge`]).
    #[serde(default = "unit_weight")]
    pub weight: f64,
}

/// The weight of a job whose GPU types are unknown or unweighted.
fn unit_weight() -> f64 {
    crate::fairshare::DEFAULT_GPU_WEIGHT
}

impl RunningJob {
    pub fn allocated(&self) -> bool {
        self.min_runtime_s > 0.0
    }
    pub fn gpus(&self) -> u32 {
        self.gpus_on.iter().map(|(_, g)| g).sum()
    }
    /// Weighted GPUs (`gpus x weight`): what the job adds to its team's
    /// load, in the unit of [`TeamLoad`] (team loads and allocations are
    /// weighted GPUs; the plain count is only right without weights).
    pub fn charge(&self) -> f64 {
        f64::from(self.gpus()) * self.weight
    }
    /// Protected at `now`: allocated and still inside `min(min_runtime, cap)`.
    pub fn protected(&self, now: Seconds, cfg: &ProtectionConfig) -> bool {
        self.allocated() && now - self.started_s < self.min_runtime_s.min(cfg.min_runtime_cap_s)
    }
    /// When protection ends (`None` for unallocated jobs).
    pub fn protected_until(&self, cfg: &ProtectionConfig) -> Option<Seconds> {
        self.allocated()
            .then(|| self.started_s + self.min_runtime_s.min(cfg.min_runtime_cap_s))
    }
    /// GPU-seconds lost if preempted at `now`.
    pub fn loss(&self, now: Seconds, cfg: &ProtectionConfig) -> f64 {
        let run = (now - self.started_s).max(0.0);
        let lost = lost_run_s(run, self.resumable, cfg);
        lost * f64::from(self.gpus())
    }
}

/// Seconds of a run of `run` seconds that a preemption throws away: since the
/// last checkpoint for resumable jobs, all of it otherwise.
pub fn lost_run_s(run: Seconds, resumable: bool, cfg: &ProtectionConfig) -> Seconds {
    lost_run_every(run, resumable, cfg.checkpoint_interval_s)
}

/// [`lost_run_s`] for jobs that checkpoint every `interval_s` seconds (0:
/// a resumable job loses nothing).
pub fn lost_run_every(run: Seconds, resumable: bool, interval_s: Seconds) -> Seconds {
    let run = run.max(0.0);
    if !resumable {
        run
    } else if interval_s > 0.0 {
        run % interval_s
    } else {
        0.0
    }
}

/// A pending job asking for room.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingJob {
    pub id: JobId,
    pub account: String,
    pub shape: JobShape,
    pub min_runtime_s: Seconds,
    /// The job that preempted this one last, if any.
    pub preempted_by: Option<JobId>,
    /// Was this job preempted and has not yet run its min runtime since?
    pub owes_min_runtime: bool,
    /// Room was already freed for this job by preemption and it has not
    /// started since (the driver decides for how long this holds: while the
    /// job may still start, and after that until its request or the nodes
    /// change or a time-out passes). It may take free room, never a victim.
    #[serde(default)]
    pub room_given: bool,
    /// What the job needs of a node besides GPUs (partitions, features,
    /// excluded nodes, GPU type, CPUs and memory). The default asks
    /// nothing: every node is eligible.
    #[serde(default)]
    pub needs: NodeNeeds,
    /// Mean `[gpu_weights]` weight of the GPUs it asks for (1.0 untyped):
    /// once started it adds `GPUs x weight` to its team's load
    /// ([`Self::charge`]).
    #[serde(default = "unit_weight")]
    pub weight: f64,
}

/// What a pending job needs of each node it runs on, besides GPUs (issue
/// 12). Checked only against nodes whose [`NodeTraits`] are known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeNeeds {
    /// Partitions the job may run in (any of them); empty: any.
    #[serde(default)]
    pub partitions: Vec<String>,
    /// The `--constraint` expression: `a100`, `a100&ib`, `a100|l40s`
    /// (`&` binds looser than `|`; brackets and `*count` are ignored); empty:
    /// any.
    #[serde(default)]
    pub constraint: String,
    /// Node names the job excludes (`--exclude`).
    #[serde(default)]
    pub excluded: BTreeSet<String>,
    /// GPU type asked for (`--gres=gpu:a100:N`); `None`: any.
    #[serde(default)]
    pub gpu_type: Option<String>,
    /// CPUs needed on each node (per instance); 0: not counted.
    #[serde(default)]
    pub cpus_per_node: u32,
    /// Memory (MB) needed on each node (per instance); 0: not counted.
    #[serde(default)]
    pub mem_per_node_mb: u64,
}

/// What a node offers besides free GPUs, as the driver reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeTraits {
    pub name: String,
    /// GPUs of the node (its own capacity; nodes of a site differ).
    pub gpus: u32,
    pub partitions: BTreeSet<String>,
    /// Active features.
    pub features: BTreeSet<String>,
    /// GPU types of the node (`a100`); empty: untyped GPUs.
    pub gpu_types: BTreeSet<String>,
    /// CPUs not allocated now.
    pub free_cpus: u32,
    /// Memory (MB) not allocated now.
    pub free_mem_mb: u64,
}

impl NodeTraits {
    /// Can a job with `needs` run here at all (ignoring what is free)?
    pub fn admits(&self, needs: &NodeNeeds) -> bool {
        (needs.partitions.is_empty()
            || needs.partitions.iter().any(|p| self.partitions.contains(p)))
            && !needs.excluded.contains(&self.name)
            && needs
                .gpu_type
                .as_ref()
                .is_none_or(|t| self.gpu_types.contains(t))
            && constraint_holds(&needs.constraint, &self.features)
    }
}

/// Whether `features` satisfy a `--constraint` expression: terms joined by
/// `&` (or `,`) must all hold, a term is alternatives joined by `|`;
/// brackets, parentheses and `*count` suffixes are ignored (a node has or
/// lacks a feature). An empty expression always holds.
pub fn constraint_holds(constraint: &str, features: &BTreeSet<String>) -> bool {
    let clean: String = constraint
        .chars()
        .filter(|c| !matches!(c, '[' | ']' | '(' | ')'))
        .collect();
    clean.split(['&', ',']).all(|term| {
        let term = term.trim();
        term.is_empty()
            || term.split('|').any(|alt| {
                let name = alt.split('*').next().unwrap_or("").trim();
                name.is_empty() || features.contains(name)
            })
    })
}

impl PendingJob {
    /// Weighted GPUs (`GPUs x weight`) the job adds to its team's load
    /// once it runs, in the unit of [`TeamLoad`].
    pub fn charge(&self) -> f64 {
        self.shape.total_gpus() as f64 * self.weight
    }

    /// May this job preempt anyone (allocated, not a recent victim, and no
    /// room already given to it in vain)?
    pub fn may_preempt(&self) -> bool {
        self.min_runtime_s > 0.0 && !self.owes_min_runtime && !self.room_given
    }
}

/// Why a job may be a victim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum VictimRule {
    /// Unallocated (min runtime 0): preemptible by any allocated request.
    Unallocated,
    /// Allocated, past its protection, and its team is over-served: it runs
    /// above its allocation while the requester's team runs below its own
    /// (when loads are known) and, unless loads decide, its ratio exceeds
    /// the requester's by the margin.
    OverServed {
        victim_ratio: f64,
        requester_ratio: f64,
    },
    /// On a faulty node and past its protection.
    FaultyNode { node: NodeId },
}

/// One decided preemption, with its cause.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preemption {
    pub victim: JobId,
    /// The pending job that needed the room (`None` for faulty nodes).
    pub for_job: Option<JobId>,
    pub rule: VictimRule,
    /// Requeue (resumable) or cancel (not resumable).
    pub requeue: bool,
    /// GPU-seconds lost.
    pub lost_gpu_s: f64,
}

/// The fair-share ratio of an account (usage over allocation; higher = more
/// over-served). Accounts without a budget count as infinitely over-served.
pub trait Ratios {
    fn ratio(&self, account: &str) -> f64;

    /// The account's allocated GPUs running now and its allocation in GPUs
    /// (`share x capacity`), when known. See [`victim_rule`].
    fn allocation(&self, _account: &str) -> Option<TeamLoad> {
        None
    }

    /// Do the loads decide the team rule alone (no ratio test) when known?
    /// See [`TeamTable::loads_decide`].
    fn loads_decide(&self) -> bool {
        false
    }
}

/// A team's allocated GPUs running now against its allocation, both in
/// weighted GPUs (`[gpu_weights]`; plain GPUs without weights): a job
/// counts in it with its [`RunningJob::charge`] / [`PendingJob::charge`],
/// never its plain GPU count.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeamLoad {
    pub running_gpus: f64,
    pub allocation_gpus: f64,
}

/// Ratios and loads of every team, for drivers that know both.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TeamTable {
    pub ratio: BTreeMap<String, f64>,
    pub load: BTreeMap<String, TeamLoad>,
    /// With loads known, "above against below its allocation" decides the
    /// team rule alone, without the lookback ratio test: set by drivers
    /// whose queue runs under-allocation-first
    /// ([`crate::fairshare::TeamOrder::preempts_by_load`]), so preemption and
    /// the order agree. False: the ratio test applies too (the published
    /// ratio order).
    pub loads_decide: bool,
}

impl Ratios for TeamTable {
    fn ratio(&self, account: &str) -> f64 {
        self.ratio.ratio(account)
    }
    fn allocation(&self, account: &str) -> Option<TeamLoad> {
        self.load.get(account).copied()
    }
    fn loads_decide(&self) -> bool {
        self.loads_decide
    }
}

impl Ratios for BTreeMap<String, f64> {
    fn ratio(&self, account: &str) -> f64 {
        self.get(account).copied().unwrap_or(f64::INFINITY)
    }
}

/// Free GPUs per node, as the placement engine sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRoom {
    pub capacity: u32,
    /// Free GPUs of each node.
    pub free: Vec<u32>,
    /// Nodes that may take new jobs (not faulty, down or drained).
    pub usable: NodeSet,
    /// Each node's partitions, features, GPU types, GPUs, free CPUs and
    /// memory, index by index with `free` (issue 12). Empty: every node is
    /// eligible for every job and CPUs and memory are not counted (the
    /// policy simulator's cluster).
    pub traits: Vec<NodeTraits>,
}

/// What preempting some jobs frees on one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Freed {
    gpus: u32,
    cpus: u32,
    mem_mb: u64,
}

impl Freed {
    fn of(v: &RunningJob, gpus: u32) -> Freed {
        Freed {
            gpus,
            cpus: v.cpus_per_node,
            mem_mb: v.mem_per_node_mb,
        }
    }
    fn add(&mut self, o: Freed) {
        self.gpus += o.gpus;
        self.cpus = self.cpus.saturating_add(o.cpus);
        self.mem_mb = self.mem_mb.saturating_add(o.mem_mb);
    }
}

type FreedMap = BTreeMap<NodeId, Freed>;

impl NodeRoom {
    /// GPUs of node `n` (its own count when its traits are known).
    fn cap(&self, n: usize) -> u32 {
        self.traits.get(n).map_or(self.capacity, |t| t.gpus)
    }

    /// May a job with `needs` use node `n` (usable, and admitted by its
    /// traits when they are known)?
    pub fn eligible(&self, n: NodeId, needs: &NodeNeeds) -> bool {
        self.usable.contains(n) && self.traits.get(n as usize).is_none_or(|t| t.admits(needs))
    }

    /// How many `g`-GPU instances with `needs` fit on node `n` with `extra`
    /// freed there: by GPUs, and by CPUs and memory when both the node's
    /// and the job's are known.
    fn instances_on(&self, n: usize, g: u32, needs: &NodeNeeds, extra: Freed) -> u64 {
        if !self.eligible(n as NodeId, needs) {
            return 0;
        }
        let f = self.free.get(n).copied().unwrap_or(0);
        let mut k = u64::from((f + extra.gpus).min(self.cap(n)) / g);
        if let Some(t) = self.traits.get(n) {
            let cpus = t.free_cpus.saturating_add(extra.cpus);
            if let Some(by_cpus) = cpus.checked_div(needs.cpus_per_node) {
                k = k.min(u64::from(by_cpus));
            }
            let mem = t.free_mem_mb.saturating_add(extra.mem_mb);
            if let Some(by_mem) = mem.checked_div(needs.mem_per_node_mb) {
                k = k.min(by_mem);
            }
        }
        k
    }

    /// How many `g`-GPU instances fit, node by node, with `extra` freed.
    fn instances_fitting(&self, g: u32, needs: &NodeNeeds, extra: &FreedMap) -> u64 {
        (0..self.free.len())
            .map(|n| {
                let e = extra.get(&(n as NodeId)).copied().unwrap_or_default();
                self.instances_on(n, g, needs, e)
            })
            .sum()
    }

    fn partial_after(&self, extra: &FreedMap) -> usize {
        self.free
            .iter()
            .enumerate()
            .filter(|(n, f)| {
                let free = *f + extra.get(&(*n as NodeId)).map_or(0, |e| e.gpus);
                free > 0 && free < self.cap(*n)
            })
            .count()
    }

    /// Takes `g` GPUs and the job's CPUs and memory off node `n`.
    fn take(&mut self, n: usize, g: u32, needs: &NodeNeeds) {
        self.free[n] -= g;
        if let Some(t) = self.traits.get_mut(n) {
            t.free_cpus = t.free_cpus.saturating_sub(needs.cpus_per_node);
            t.free_mem_mb = t.free_mem_mb.saturating_sub(needs.mem_per_node_mb);
        }
    }

    /// Gives back what `v` holds (it was preempted).
    fn release(&mut self, v: &RunningJob) {
        for &(n, g) in &v.gpus_on {
            let cap = self.cap(n as usize);
            if let Some(f) = self.free.get_mut(n as usize) {
                *f = (*f + g).min(cap);
            }
            if let Some(t) = self.traits.get_mut(n as usize) {
                t.free_cpus = t.free_cpus.saturating_add(v.cpus_per_node);
                t.free_mem_mb = t.free_mem_mb.saturating_add(v.mem_per_node_mb);
            }
        }
    }
}

/// The rule that makes `victim` preemptible for `pending`, if any.
pub fn victim_rule(
    victim: &RunningJob,
    pending: &PendingJob,
    ratios: &dyn Ratios,
    now: Seconds,
    cfg: &ProtectionConfig,
) -> Option<VictimRule> {
    if !pending.may_preempt()
        || victim.protected(now, cfg)
        || pending.preempted_by == Some(victim.id)
    {
        return None;
    }
    if !victim.allocated() {
        return Some(VictimRule::Unallocated);
    }
    team_rule(&victim.account, pending, ratios, cfg)
        .filter(|_| job_yields(victim, pending, ratios, cfg))
}

/// The job half of the team rule when loads decide
/// ([`TeamTable::loads_decide`]): either the victim's team, without this
/// job, still runs at least its allocation (a team above its allocation
/// yields only GPUs it runs beyond it), or the ratio test holds (the
/// victim's ratio above the requester's by the margin: the rule before
/// issue 15, so every preemption it allowed still is).
///
/// The first is the hysteresis of the load case: a load-based preemption
/// never takes a team below its allocation, so it never turns its victim's
/// team into a requester, and it cannot be undone by load. The requester
/// may end above its allocation (a whole-node job of a small team); it then
/// yields, in turn, only what it runs beyond it (its new job being
/// protected). The second round of issue 15 replaced "the victim's team,
/// without the job, ends less short of its allocation than the requester's
/// team is now": that test let a whole-node job push its team far above
/// its allocation and took teams below theirs (with only heads asking, the
/// Venus sample at 125 nodes lost 23,684 GPU-hours under it, 15,450 under
/// this test, 5,542 under the ratio test alone; owed (allocated) 85.7%,
/// 88.8%, 88.8%: docs/results.md, "The preemption rule, second round").
/// Checked per victim here; [`plan_room`] also bounds the victims it takes
/// together by the load test alone ([`Teams::load_budget`]: two of them may not
/// together take a team below its allocation), and [`plan_cycle`] counts
/// the victims and admissions of its earlier plans in the loads.
fn job_yields(
    victim: &RunningJob,
    pending: &PendingJob,
    ratios: &dyn Ratios,
    cfg: &ProtectionConfig,
) -> bool {
    let teams = Teams {
        victim: TeamView::of(ratios, &victim.account),
        pending: TeamView::of(ratios, &pending.account),
        loads_decide: ratios.loads_decide(),
    };
    teams.job_yields(victim, cfg)
}

/// A team's ratio and load, looked up once ([`plan_room`] asks them for
/// every victim of the team, and a driver's table is keyed by account
/// name).
#[derive(Clone, Copy, Debug)]
struct TeamView {
    ratio: f64,
    load: Option<TeamLoad>,
}

impl TeamView {
    fn of(ratios: &dyn Ratios, account: &str) -> Self {
        Self {
            ratio: ratios.ratio(account),
            load: ratios.allocation(account),
        }
    }
}

/// The victim's team and the requester's, as [`job_yields`] and
/// [`Teams::load_budget`] read them.
#[derive(Clone, Copy, Debug)]
struct Teams {
    victim: TeamView,
    pending: TeamView,
    loads_decide: bool,
}

impl Teams {
    /// [`job_yields`] on looked-up teams.
    fn job_yields(&self, victim: &RunningJob, cfg: &ProtectionConfig) -> bool {
        if !self.loads_decide {
            return true;
        }
        let (Some(v), Some(_)) = (self.victim.load, self.pending.load) else {
            return true;
        };
        v.running_gpus - victim.charge() >= v.allocation_gpus
            || self.victim.ratio > self.pending.ratio * (1.0 + cfg.preempt_margin)
    }

    /// How many of `victim`'s GPUs count against its team's budget in one
    /// plan ([`plan_room`]): an allocated victim that yields by the load test
    /// alone ([`job_yields`]: its team runs above its allocation, and the
    /// ratio test does not hold) spends its GPUs from the team's excess over
    /// its allocation; `None` for a victim the ratio test (or no known load)
    /// makes legal whatever else is taken. With the team's excess
    /// (`running - allocation`), as `(account, gpus, excess)`.
    fn load_budget<'a>(
        &self,
        victim: &'a RunningJob,
        cfg: &ProtectionConfig,
    ) -> Option<(&'a str, f64, f64)> {
        if !victim.allocated() || !self.loads_decide {
            return None;
        }
        let v = self.victim.load?;
        self.pending.load?;
        let by_ratio = self.victim.ratio > self.pending.ratio * (1.0 + cfg.preempt_margin);
        (!by_ratio).then(|| {
            (
                victim.account.as_str(),
                victim.charge(),
                v.running_gpus - v.allocation_gpus,
            )
        })
    }
}

/// May a team's job other than its head (its first waiting allocated job
/// that may preempt) preempt? Only while its team, with it, stays within
/// its allocation: `running + job GPUs <= allocation`, `load` being the
/// team's allocated GPUs running now (plus what this cycle already
/// admitted for it) against its allocation, and `job_gpus` the job's
/// weighted GPUs ([`PendingJob::charge`], the unit of the load); and then only unallocated
/// jobs (the drivers pass it no allocated candidate). A team's head may
/// take any legal victim (the team rule decides). Without a known load a
/// later job may take unallocated jobs.
///
/// Why (issue 15, second round): when a team's head cannot be placed even
/// with legal victims (a large job), its smaller jobs may still bring the
/// team up to its allocation, but not past it, and by free work only:
/// beyond its allocation a team's extra jobs add nothing owed, and a later
/// job taking allocated work took it for a job its own team does not put
/// first. With every later job asking for any legal victim (the first
/// round's asking, with this round's load test), the Venus sample (125 and
/// 64 nodes) preempted 1.3-1.5 times as often as under this rule and
/// delivered 1.1-2.7 points less owed (allocated) (docs/results.md, "The
/// preemption rule, second round"). The budget service ([`plan_cycle`])
/// and the policy simulator apply the same rule.
pub fn later_job_may_preempt(load: Option<TeamLoad>, job_gpus: f64) -> bool {
    load.is_none_or(|l| l.running_gpus + job_gpus <= l.allocation_gpus)
}

/// The team half of [`victim_rule`]: may `pending` take an unprotected
/// allocated job of `account`?
fn team_rule(
    account: &str,
    pending: &PendingJob,
    ratios: &dyn Ratios,
    cfg: &ProtectionConfig,
) -> Option<VictimRule> {
    let victim_ratio = ratios.ratio(account);
    let requester_ratio = ratios.ratio(&pending.account);
    let rule = VictimRule::OverServed {
        victim_ratio,
        requester_ratio,
    };
    // "Still prioritised": when loads are known, a team running within its
    // allocation keeps its jobs, and a team already at its allocation takes
    // no allocated job from another. Under the under-allocation-first order
    // (`loads_decide`) that is the whole rule, as the order itself decides
    // by "under its allocation now" (`fairshare::team_orders`): the lookback
    // ratio no longer vetoes it (issue 15: at 64 nodes the veto was 13% of
    // the owed (allocated) shortfall of the published-like workload,
    // measured with `compass simulate --shortfall`, docs/results.md).
    // Otherwise, and without loads, the ratio must also exceed the
    // requester's by the hysteresis margin.
    if let (Some(v), Some(r)) = (
        ratios.allocation(account),
        ratios.allocation(&pending.account),
    ) {
        if v.running_gpus <= v.allocation_gpus || r.running_gpus >= r.allocation_gpus {
            return None;
        }
        if ratios.loads_decide() {
            return Some(rule);
        }
    }
    (victim_ratio > requester_ratio * (1.0 + cfg.preempt_margin)).then_some(rule)
}

/// A legal victim of [`plan_room`]: the job, the rule that lets it be
/// taken, and its team as looked up (allocated jobs only).
type Candidate<'a> = (&'a RunningJob, VictimRule, Option<Teams>);

/// Chooses the victims that make `pending` placeable, or `None` if no legal
/// set does. `Some(vec![])` means it fits already. `excluded` jobs (already
/// chosen this cycle) are not considered.
pub fn plan_room(
    pending: &PendingJob,
    running: &[RunningJob],
    room: &NodeRoom,
    ratios: &dyn Ratios,
    now: Seconds,
    cfg: &ProtectionConfig,
    excluded: &BTreeSet<JobId>,
) -> Option<Vec<Preemption>> {
    let g = pending.shape.gpus;
    let w = u64::from(pending.shape.instances);
    let needs = &pending.needs;
    if g == 0 || g > room.capacity {
        return None;
    }
    let base_fit = room.instances_fitting(g, needs, &BTreeMap::new());
    if base_fit >= w {
        return Some(Vec::new());
    }
    if !pending.may_preempt() {
        return None;
    }
    // The team rule depends on the account only: decide it once per account,
    // and look the team up once (its ratio and load, for each of its jobs).
    let pending_team = TeamView::of(ratios, &pending.account);
    let loads_decide = ratios.loads_decide();
    let mut by_team: HashMap<&str, (Option<VictimRule>, Teams), BuildHasherDefault<Fnv>> =
        HashMap::default();
    let cands: Vec<Candidate<'_>> = running
        .iter()
        .filter(|v| !v.protected(now, cfg) && !excluded.contains(&v.id))
        .filter(|v| pending.preempted_by != Some(v.id))
        // Only jobs on nodes the pending job could run on free room for it.
        .filter(|v| v.gpus_on.iter().any(|(n, _)| room.eligible(*n, needs)))
        .filter_map(|v| {
            if !v.allocated() {
                return Some((v, VictimRule::Unallocated, None));
            }
            let (rule, teams) = by_team.entry(v.account.as_str()).or_insert_with(|| {
                let teams = Teams {
                    victim: TeamView::of(ratios, &v.account),
                    pending: pending_team,
                    loads_decide,
                };
                (team_rule(&v.account, pending, ratios, cfg), teams)
            });
            let teams = *teams;
            let rule = rule.clone().filter(|_| teams.job_yields(v, cfg))?;
            Some((v, rule, Some(teams)))
        })
        .collect();
    // Instances that fit with `extra` freed, counting only touched nodes.
    let fit_with = |extra: &FreedMap| {
        base_fit
            + extra
                .iter()
                .map(|(&n, &e)| {
                    let n = n as usize;
                    room.instances_on(n, g, needs, e)
                        - room.instances_on(n, g, needs, Freed::default())
                })
                .sum::<u64>()
    };
    let mut all: FreedMap = BTreeMap::new();
    for (v, _, _) in &cands {
        for &(n, gpus) in &v.gpus_on {
            all.entry(n).or_default().add(Freed::of(v, gpus));
        }
    }
    if fit_with(&all) < w {
        // Even every legal victim together does not make room.
        return None;
    }
    // Cheapest first: unallocated before allocated, then by loss, then id
    // (a stable sort on keys computed once per candidate).
    let mut keyed: Vec<_> = cands
        .into_iter()
        .map(|c| ((c.0.allocated(), c.0.loss(now, cfg), c.0.id), c))
        .collect();
    keyed.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    let (losses, cands): (Vec<f64>, Vec<Candidate<'_>>) =
        keyed.into_iter().map(|(k, c)| (k.1, c)).unzip();

    let freed = |set: &[usize]| {
        let mut extra: FreedMap = BTreeMap::new();
        for &i in set {
            let v = cands[i].0;
            for &(n, gpus) in &v.gpus_on {
                extra.entry(n).or_default().add(Freed::of(v, gpus));
            }
        }
        extra
    };
    // Victims taken by the load test alone, per team, stay within the
    // team's excess over its allocation ([`Teams::load_budget`]).
    // Each budgeted victim's team as an index into `budgeted`, so that a
    // set's spending per team is a few slots of a vector rather than a map
    // keyed by account name: the exact search asks for up to 1,023 sets and
    // the greedy one for every candidate at every step (the policy
    // simulator's 30-day replay spent most of its time here).
    let mut budgeted: Vec<&str> = Vec::new();
    let budgets: Vec<Option<(usize, f64, f64)>> = cands
        .iter()
        .map(|(v, _, looked)| {
            let (team, gpus, excess) = looked.as_ref()?.load_budget(v, cfg)?;
            let k = budgeted.iter().position(|&t| t == team).unwrap_or_else(|| {
                budgeted.push(team);
                budgeted.len() - 1
            });
            Some((k, gpus, excess))
        })
        .collect();
    let within_budget = |set: &[usize]| {
        let mut spent = vec![0.0; budgeted.len()];
        set.iter()
            .filter_map(|&i| budgets[i])
            .all(|(k, gpus, excess)| {
                spent[k] += gpus;
                spent[k] <= excess
            })
    };
    let feasible = |set: &[usize]| fit_with(&freed(set)) >= w && within_budget(set);
    let cost = |set: &[usize]| {
        let (mut alloc, mut unalloc) = (0.0, 0.0);
        for &i in set {
            if cands[i].0.allocated() {
                alloc += losses[i];
            } else {
                unalloc += losses[i];
            }
        }
        (
            alloc,
            unalloc,
            set.len(),
            room.partial_after(&freed(set)),
            set.to_vec(),
        )
    };
    type Cost = (f64, f64, usize, usize, Vec<usize>);
    let better = |a: &Cost, b: &Cost| {
        (a.0, a.1, a.2, a.3)
            .partial_cmp(&(b.0, b.1, b.2, b.3))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.4.cmp(&b.4))
            == std::cmp::Ordering::Less
    };

    let chosen: Vec<usize> = if cands.len() <= cfg.exact_search_limit {
        let mut best: Option<Cost> = None;
        for mask in 1u32..(1u32 << cands.len()) {
            let set: Vec<usize> = (0..cands.len()).filter(|i| mask & (1 << i) != 0).collect();
            if !feasible(&set) {
                continue;
            }
            let c = cost(&set);
            if best.as_ref().is_none_or(|b| better(&c, b)) {
                best = Some(c);
            }
        }
        best?.4
    } else {
        // Greedy: add the candidate that makes the most instances fit per
        // GPU-second lost, then drop any victim that is not needed.
        let mut set: Vec<usize> = Vec::new();
        let mut extra: FreedMap = BTreeMap::new();
        // What `set` holds and spends per team, kept as it grows: a
        // candidate is within budget when adding it is (every earlier
        // victim passed the same test, so `within_budget(set + [i])`).
        let mut in_set = vec![false; cands.len()];
        let mut spent = vec![0.0; budgeted.len()];
        while fit_with(&extra) < w {
            let next = (0..cands.len())
                .filter(|&i| !in_set[i])
                .filter(|&i| budgets[i].is_none_or(|(k, gpus, excess)| spent[k] + gpus <= excess))
                .max_by(|&a, &b| {
                    // Extra instances candidate `i` makes fit, from its nodes only.
                    let score = |i: usize| {
                        let v = cands[i].0;
                        let gain: u64 = v
                            .gpus_on
                            .iter()
                            .map(|&(n, gpus)| {
                                let before = extra.get(&n).copied().unwrap_or_default();
                                let mut after = before;
                                after.add(Freed::of(v, gpus));
                                let n = n as usize;
                                room.instances_on(n, g, needs, after)
                                    .saturating_sub(room.instances_on(n, g, needs, before))
                            })
                            .sum();
                        let weight = if v.allocated() { 1e6 } else { 1.0 };
                        gain as f64 / (1.0 + weight * losses[i])
                    };
                    score(a)
                        .partial_cmp(&score(b))
                        .unwrap_or(std::cmp::Ordering::Equal)
                        .then(b.cmp(&a))
                })?;
            let v = cands[next].0;
            for &(n, gpus) in &v.gpus_on {
                extra.entry(n).or_default().add(Freed::of(v, gpus));
            }
            if let Some((k, gpus, _)) = budgets[next] {
                spent[k] += gpus;
            }
            in_set[next] = true;
            set.push(next);
        }
        for i in (0..set.len()).rev() {
            let mut s = set.clone();
            s.remove(i);
            if feasible(&s) {
                set = s;
            }
        }
        set
    };
    Some(
        chosen
            .into_iter()
            .map(|i| {
                let (v, rule, _) = &cands[i];
                Preemption {
                    victim: v.id,
                    for_job: Some(pending.id),
                    rule: rule.clone(),
                    requeue: v.resumable,
                    lost_gpu_s: v.loss(now, cfg),
                }
            })
            .collect(),
    )
}

/// Nodes held for a pending job that no legal victim set can place now
/// ([`plan_drain`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DrainPlan {
    pub job: JobId,
    /// The nodes to hold, best first.
    pub nodes: Vec<NodeId>,
    /// When every job now on those nodes is expected to be a legal victim or
    /// gone: the latest protection end among them (`now` for jobs that are
    /// legal victims already).
    pub ready_s: Seconds,
}

/// Drain for a large job (issue 5: "the largest jobs may wait longer because
/// fewer running jobs can be interrupted at once"). When [`plan_room`] finds no
/// legal victim set for `pending` (allocated jobs are protected for their min
/// runtime, so room for a job of many whole nodes rarely exists at one
/// instant), choose the nodes that become room soonest and hold them: the
/// driver stops placing work on them that would still be protected at
/// `ready_s` (unallocated jobs stay welcome: they are legal victims at any
/// time), and the job takes them through [`plan_room`] once the protections
/// there have ended. Nodes are taken by expected ready time (below), then
/// fewest busy GPUs, then index; each held node is counted as
/// `capacity / g` instances once emptied. `running` must hold every running
/// job, protected or not; `held` nodes (held for other jobs) are skipped.
/// `None`: the job may not preempt, or not enough nodes can ever be promised.
pub fn plan_drain(
    pending: &PendingJob,
    running: &[RunningJob],
    room: &NodeRoom,
    ratios: &dyn Ratios,
    now: Seconds,
    cfg: &ProtectionConfig,
    held: &NodeSet,
) -> Option<DrainPlan> {
    let g = pending.shape.gpus;
    if g == 0 || g > room.capacity || !pending.may_preempt() {
        return None;
    }
    let per_node = u64::from(room.capacity / g);
    let need = u64::from(pending.shape.instances).div_ceil(per_node);
    // When each node is expected to be room: `now` if every job on it is a
    // legal victim now ([`victim_rule`]), else the latest protection end among
    // the others; never (`None`) if a job on it is unprotected yet not a legal
    // victim (it may run on while its team stays within its allocation, so no
    // time can be promised).
    let mut ready: Vec<Option<Seconds>> = vec![Some(now); room.free.len()];
    let mut by_team: HashMap<&str, bool, BuildHasherDefault<Fnv>> = HashMap::default();
    for r in running {
        let legal = pending.preempted_by != Some(r.id)
            && !r.protected(now, cfg)
            && (!r.allocated()
                || *by_team
                    .entry(r.account.as_str())
                    .or_insert_with(|| team_rule(&r.account, pending, ratios, cfg).is_some()));
        if legal {
            continue;
        }
        // A protected job is room at its protection's end, capped at
        // `min_runtime_cap_s` whatever min runtime it asked for (a job that
        // asked for more is unprotected from the cap on, like any other).
        let until = if r.protected(now, cfg) {
            r.protected_until(cfg)
        } else {
            None
        };
        for &(n, _) in &r.gpus_on {
            if let Some(slot) = ready.get_mut(n as usize) {
                *slot = match (*slot, until) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
        }
    }
    let mut cands: Vec<(Seconds, u32, NodeId)> = (0..room.free.len())
        .filter(|&n| room.eligible(n as NodeId, &pending.needs) && !held.contains(n as NodeId))
        .filter_map(|n| {
            let busy = room.cap(n) - room.free[n].min(room.cap(n));
            Some((ready[n]?, busy, n as NodeId))
        })
        .collect();
    if (cands.len() as u64) < need {
        return None;
    }
    cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    cands.truncate(need as usize);
    Some(DrainPlan {
        job: pending.id,
        ready_s: cands.iter().map(|c| c.0).fold(now, f64::max),
        nodes: cands.into_iter().map(|c| c.2).collect(),
    })
}

/// FNV-1a: account names are short, and SipHash dominated the victim search.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        if self.0 == 0 {
            self.0 = 0xcbf2_9ce4_8422_2325;
        }
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// What one enforcement cycle decides.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CyclePlan {
    pub preemptions: Vec<Preemption>,
    /// Faulty nodes that are empty now (or after this cycle's preemptions):
    /// drain them for repair.
    pub drain: Vec<NodeId>,
    /// Pending jobs that were given room this cycle, in queue order.
    pub admitted: Vec<JobId>,
    /// Pending jobs that needed victims but were not given them because of
    /// `max_preemptions_per_cycle`, in queue order.
    pub held_back: Vec<JobId>,
}

/// The loads [`plan_cycle`]'s later plans see: each team's allocated GPUs
/// running, less its allocated victims already taken this cycle, plus its
/// allocated jobs already admitted (the policy simulator refreshes its
/// loads between plans the same way, from the jobs it preempted and
/// started). Ratios are the lookback's, unchanged within a cycle.
struct CycleLoads<'a> {
    inner: &'a dyn Ratios,
    delta: BTreeMap<String, f64>,
}

impl Ratios for CycleLoads<'_> {
    fn ratio(&self, account: &str) -> f64 {
        self.inner.ratio(account)
    }

    fn allocation(&self, account: &str) -> Option<TeamLoad> {
        self.inner.allocation(account).map(|l| TeamLoad {
            running_gpus: l.running_gpus + self.delta.get(account).copied().unwrap_or(0.0),
            ..l
        })
    }

    fn loads_decide(&self) -> bool {
        self.inner.loads_decide()
    }
}

/// One cycle: faulty-node evictions, then pending jobs in fair-share order
/// (`queue` is already ordered), each taking room from free GPUs first and
/// from legal victims otherwise. Room given to an earlier job is not given
/// again to a later one. A team's first job that may preempt (its head)
/// may take any legal victims; its later jobs only unallocated ones, and
/// only while the team, with each, stays within its allocation
/// ([`later_job_may_preempt`]). The loads count this cycle's earlier
/// admissions and allocated victims (`CycleLoads`), so two plans never
/// together take a team below its allocation by the load test. At most `cfg.max_preemptions_per_cycle` victims
/// (or the first job's, if it needs more): once a job's victims would pass
/// the limit, no later job preempts either (they may still take free room).
/// The `spared` jobs are no pending job's victims this cycle (the budget
/// service: a victim restarted while the job it made room for still waits,
/// issue #11); a faulty node still evicts them.
#[allow(clippy::too_many_arguments)]
pub fn plan_cycle(
    queue: &[PendingJob],
    running: &[RunningJob],
    room: &NodeRoom,
    faulty: &BTreeSet<NodeId>,
    spared: &BTreeSet<JobId>,
    ratios: &dyn Ratios,
    now: Seconds,
    cfg: &ProtectionConfig,
) -> CyclePlan {
    let mut plan = CyclePlan::default();
    let mut room = room.clone();
    for n in faulty {
        room.usable.remove(*n);
    }
    let mut gone: BTreeSet<JobId> = BTreeSet::new();
    let release = |room: &mut NodeRoom, v: &RunningJob| room.release(v);
    // Faulty nodes: evict each job as soon as its protection has ended.
    let limit = cfg.max_preemptions_per_cycle;
    for v in running {
        let on_faulty = v.gpus_on.iter().find(|(n, _)| faulty.contains(n));
        if let Some(&(node, _)) = on_faulty {
            if !v.protected(now, cfg) && plan.preemptions.len() < limit {
                plan.preemptions.push(Preemption {
                    victim: v.id,
                    for_job: None,
                    rule: VictimRule::FaultyNode { node },
                    requeue: v.resumable,
                    lost_gpu_s: v.loss(now, cfg),
                });
                gone.insert(v.id);
                release(&mut room, v);
            }
        }
    }
    let still_on = |n: NodeId, gone: &BTreeSet<JobId>| {
        running
            .iter()
            .any(|v| !gone.contains(&v.id) && v.gpus_on.iter().any(|(m, _)| *m == n))
    };
    plan.drain = faulty
        .iter()
        .copied()
        .filter(|n| !still_on(*n, &gone))
        .collect();
    // From here `gone` is what no pending job may take.
    gone.extend(spared);

    let mut limited = false;
    // Teams whose head has asked, the loads with this cycle's earlier plans
    // counted in, and the only victims a team's later jobs may take.
    let mut asked: BTreeSet<&str> = BTreeSet::new();
    let mut loads = CycleLoads {
        inner: ratios,
        delta: BTreeMap::new(),
    };
    let unallocated: Vec<RunningJob> = running.iter().filter(|r| !r.allocated()).cloned().collect();
    for p in queue {
        let account = p.account.as_str();
        // Weighted, as the loads are ([`TeamLoad`]).
        let gpus = p.charge();
        let is_head = !p.may_preempt() || asked.insert(account);
        let candidates: &[RunningJob] = if is_head {
            running
        } else if later_job_may_preempt(loads.allocation(account), gpus) {
            &unallocated
        } else {
            &[]
        };
        let Some(victims) = plan_room(p, candidates, &room, &loads, now, cfg, &gone) else {
            continue;
        };
        if p.min_runtime_s > 0.0 {
            *loads.delta.entry(account.to_string()).or_default() += gpus;
        }
        // The first job's victims are always allowed (a job needing more
        // victims than the limit would otherwise never be served).
        let over = plan.preemptions.len() + victims.len() > limit && !plan.preemptions.is_empty();
        if !victims.is_empty() && (limited || over) {
            limited = true;
            plan.held_back.push(p.id);
            continue;
        }
        for v in &victims {
            gone.insert(v.victim);
            if let Some(r) = running.iter().find(|r| r.id == v.victim) {
                release(&mut room, r);
                if r.allocated() {
                    *loads.delta.entry(r.account.clone()).or_default() -= r.charge();
                }
            }
        }
        plan.preemptions.extend(victims);
        // Reserve the job's room: take its instances from the best-fit nodes.
        let g = p.shape.gpus;
        for _ in 0..p.shape.instances {
            let best = (0..room.free.len())
                .filter(|&n| room.instances_on(n, g, &p.needs, Freed::default()) > 0)
                .min_by_key(|&n| (room.free[n], n));
            if let Some(n) = best {
                room.take(n, g, &p.needs);
            }
        }
        plan.admitted.push(p.id);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: f64 = 3600.0;

    /// [`plan_cycle`] with no faulty node and no job spared.
    fn plan_plain(
        queue: &[PendingJob],
        running: &[RunningJob],
        room: &NodeRoom,
        ratios: &dyn Ratios,
        now: Seconds,
        cfg: &ProtectionConfig,
    ) -> CyclePlan {
        plan_cycle(
            queue,
            running,
            room,
            &BTreeSet::new(),
            &BTreeSet::new(),
            ratios,
            now,
            cfg,
        )
    }

    fn cfg() -> ProtectionConfig {
        ProtectionConfig::default()
    }

    fn running(
        id: u64,
        account: &str,
        gpus_on: &[(NodeId, u32)],
        min_h: f64,
        started_h: f64,
    ) -> RunningJob {
        RunningJob {
            id: JobId(id),
            account: account.into(),
            gpus_on: gpus_on.to_vec(),
            min_runtime_s: min_h * H,
            started_s: started_h * H,
            resumable: true,
            cpus_per_node: 0,
            mem_per_node_mb: 0,
            weight: 1.0,
        }
    }

    fn pending(id: u64, account: &str, w: u32, g: u32) -> PendingJob {
        PendingJob {
            id: JobId(id),
            account: account.into(),
            shape: JobShape::new(w, g),
            min_runtime_s: 2.0 * H,
            preempted_by: None,
            owes_min_runtime: false,
            room_given: false,
            needs: NodeNeeds::default(),
            weight: 1.0,
        }
    }

    fn room_of(nodes: u32, running: &[RunningJob]) -> NodeRoom {
        let mut free = vec![8; nodes as usize];
        for r in running {
            for &(n, g) in &r.gpus_on {
                free[n as usize] -= g;
            }
        }
        NodeRoom {
            capacity: 8,
            free,
            usable: NodeSet::full(nodes),
            traits: Vec::new(),
        }
    }

    fn ratios(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(a, r)| (a.to_string(), *r)).collect()
    }

    #[test]
    fn protection_lasts_min_runtime_capped() {
        let j = running(1, "a", &[(0, 8)], 10.0, 0.0);
        assert!(j.protected(7.9 * H, &cfg()));
        assert!(!j.protected(8.0 * H, &cfg()), "capped at 8 h");
        let free = running(2, "a", &[(0, 8)], 0.0, 0.0);
        assert!(!free.protected(0.0, &cfg()));
        assert_eq!(free.protected_until(&cfg()), None);
    }

    #[test]
    fn frees_room_the_job_can_use_not_just_gpu_count() {
        // 14 free GPUs (4 + 4 + 6) but no free node: a count of free GPUs says
        // the 8-GPU instance fits; it does not. Emptying node 2 costs 2
        // GPU-hours (job 3), node 1 costs 4 (job 2), node 0 costs 24 (job 1).
        let mut run = vec![
            running(1, "x", &[(0, 4)], 0.0, 0.0),
            running(2, "x", &[(1, 4)], 0.0, 5.0),
            running(3, "x", &[(2, 2)], 0.0, 5.0),
        ];
        for r in &mut run {
            r.resumable = false; // a victim loses all its run time
        }
        let room = room_of(3, &run);
        let p = pending(9, "a", 1, 8);
        let got = plan_room(
            &p,
            &run,
            &room,
            &ratios(&[]),
            6.0 * H,
            &cfg(),
            &BTreeSet::new(),
        )
        .unwrap();
        let victims: Vec<u64> = got.iter().map(|v| v.victim.0).collect();
        assert_eq!(victims, vec![3]);
        assert!(got.iter().all(|v| v.rule == VictimRule::Unallocated));
    }

    #[test]
    fn unallocated_first_then_over_served_teams_only() {
        let run = vec![
            running(1, "rich", &[(0, 8)], 1.0, 0.0), // allocated, unprotected, over-served
            running(2, "poor", &[(1, 8)], 1.0, 0.0), // allocated, team less served than requester
            running(3, "any", &[(2, 4)], 0.0, 0.0),  // unallocated, only 4 GPUs
        ];
        let r = ratios(&[("rich", 2.0), ("poor", 0.1), ("mid", 0.5), ("any", 1.0)]);
        let room = room_of(3, &run);
        let now = 3.0 * H;
        // 4 GPUs: the unallocated job's node has 4 free already... needs 8:
        // unallocated alone frees node 2 entirely.
        let got = plan_room(
            &pending(9, "mid", 1, 8),
            &run,
            &room,
            &r,
            now,
            &cfg(),
            &BTreeSet::new(),
        )
        .unwrap();
        assert_eq!(got.iter().map(|v| v.victim.0).collect::<Vec<_>>(), vec![3]);
        // Two 8-GPU instances: also needs the over-served team's job, never the poorer team's.
        let got = plan_room(
            &pending(9, "mid", 2, 8),
            &run,
            &room,
            &r,
            now,
            &cfg(),
            &BTreeSet::new(),
        )
        .unwrap();
        let mut v: Vec<u64> = got.iter().map(|v| v.victim.0).collect();
        v.sort_unstable();
        assert_eq!(v, vec![1, 3]);
        // Three: impossible without the poorer team's job.
        assert_eq!(
            plan_room(
                &pending(9, "mid", 3, 8),
                &run,
                &room,
                &r,
                now,
                &cfg(),
                &BTreeSet::new()
            ),
            None
        );
    }

    /// With loads known and deciding (the under-allocation-first order), a
    /// team above its allocation yields an unprotected job to a team below
    /// its own even when the requester's lookback ratio is the higher one
    /// (it used more over the window); a team within its allocation still
    /// keeps its jobs. (Before issue 15's change the ratio test vetoed the
    /// first case.)
    #[test]
    fn below_its_allocation_takes_from_above_whatever_the_ratios() {
        let run = vec![
            running(1, "over", &[(0, 8)], 1.0, 0.0), // unprotected at 2 h
            running(2, "over", &[(1, 8)], 1.0, 0.0),
        ];
        let room = room_of(2, &run);
        let load = |running_gpus: f64, allocation_gpus: f64| TeamLoad {
            running_gpus,
            allocation_gpus,
        };
        let mut table = TeamTable {
            ratio: ratios(&[("over", 0.5), ("under", 2.0)]),
            load: BTreeMap::new(),
            loads_decide: true,
        };
        table.load.insert("over".into(), load(16.0, 8.0));
        table.load.insert("under".into(), load(0.0, 8.0));
        let p = pending(9, "under", 1, 8);
        let got = plan_room(&p, &run, &room, &table, 2.0 * H, &cfg(), &BTreeSet::new())
            .expect("the team above its allocation yields");
        assert_eq!(got.len(), 1);
        assert!(matches!(
            got[0].rule,
            VictimRule::OverServed { victim_ratio, requester_ratio }
                if victim_ratio == 0.5 && requester_ratio == 2.0
        ));
        // "over" runs 10 of 8: yielding an 8-GPU job would take it below its
        // allocation.
        table.load.insert("over".into(), load(10.0, 8.0));
        table.load.insert("under".into(), load(4.0, 8.0));
        assert_eq!(
            plan_room(&p, &run, &room, &table, 2.0 * H, &cfg(), &BTreeSet::new()),
            None
        );
        table.load.insert("under".into(), load(0.0, 8.0));
        // At its allocation, "over" keeps its jobs.
        table.load.insert("over".into(), load(8.0, 8.0));
        assert_eq!(
            plan_room(
                &p,
                &run[..1],
                &room_of(1, &run[..1]),
                &table,
                2.0 * H,
                &cfg(),
                &BTreeSet::new()
            ),
            None
        );
        // Without loads, or under the ratio order, the ratio still decides.
        assert_eq!(
            plan_room(
                &p,
                &run,
                &room,
                &table.ratio,
                2.0 * H,
                &cfg(),
                &BTreeSet::new()
            ),
            None
        );
        table.load.insert("over".into(), load(16.0, 8.0));
        table.loads_decide = false;
        assert_eq!(
            plan_room(&p, &run, &room, &table, 2.0 * H, &cfg(), &BTreeSet::new()),
            None
        );
    }

    /// "over" runs 16 GPUs against an allocation of 8: by the load test it
    /// may yield 8 of them, one of its two 8-GPU jobs, and no more, whether
    /// one request asks for both (2 x 8, [`plan_room`]) or two requests ask
    /// for one each in one cycle ([`plan_cycle`]). (Before, each victim was
    /// checked alone against the team's load before the cycle: both went.)
    #[test]
    fn the_load_test_never_takes_a_team_below_its_allocation_in_one_cycle() {
        let run = vec![
            running(1, "over", &[(0, 8)], 1.0, 0.0),
            running(2, "over", &[(1, 8)], 1.0, 0.0),
        ];
        let room = room_of(2, &run);
        let load = |running_gpus: f64, allocation_gpus: f64| TeamLoad {
            running_gpus,
            allocation_gpus,
        };
        let mut table = TeamTable {
            ratio: ratios(&[("over", 0.5), ("under", 2.0), ("other", 2.0)]),
            load: BTreeMap::new(),
            loads_decide: true,
        };
        table.load.insert("over".into(), load(16.0, 8.0));
        table.load.insert("under".into(), load(0.0, 16.0));
        table.load.insert("other".into(), load(0.0, 16.0));
        let now = 2.0 * H;
        let none = BTreeSet::new();
        let both = pending(9, "under", 2, 8);
        assert_eq!(
            plan_room(&both, &run, &room, &table, now, &cfg(), &none),
            None
        );
        let one = pending(9, "under", 1, 8);
        let got = plan_room(&one, &run, &room, &table, now, &cfg(), &none).unwrap();
        assert_eq!(got.len(), 1);
        // Two teams' heads in one cycle: the first takes one node, the
        // second finds "over" at its allocation.
        let queue = [one.clone(), pending(10, "other", 1, 8)];
        let plan = plan_plain(&queue, &run, &room, &table, now, &cfg());
        assert_eq!(plan.preemptions.len(), 1, "{plan:?}");
        assert_eq!(plan.admitted, vec![JobId(9)]);
        // By the ratio test (over's ratio above the requester's) one request
        // takes both; a later plan of the cycle then finds "over" at its
        // allocation, where a team keeps its jobs whatever the ratios (the
        // team rule), as the simulator, whose loads are refreshed between
        // plans, finds it.
        table.ratio = ratios(&[("over", 3.0), ("under", 1.0), ("other", 1.0)]);
        let got = plan_room(&both, &run, &room, &table, now, &cfg(), &none).unwrap();
        assert_eq!(got.len(), 2);
        let plan = plan_plain(&queue, &run, &room, &table, now, &cfg());
        assert_eq!(plan.preemptions.len(), 1, "{plan:?}");
    }

    /// Runs `hours` hourly cycles of [`plan_cycle`] on `nodes` 8-GPU nodes
    /// under the under-allocation-first rule (loads decide, recomputed each
    /// cycle from the running jobs; fixed lookback ratios): victims go back
    /// to the queue, admitted jobs start at once on an empty node. Jobs never
    /// end; each is protected for 1 h. Returns the preemptions.
    fn preemptions_over(
        nodes: u32,
        allocation: &[(&str, f64)],
        ratio: &[(&str, f64)],
        mut run: Vec<RunningJob>,
        mut queue: Vec<PendingJob>,
        hours: u32,
    ) -> usize {
        let mut count = 0;
        for h in 0..hours {
            let now = f64::from(h) * H;
            let mut table = TeamTable {
                ratio: ratios(ratio),
                load: BTreeMap::new(),
                loads_decide: true,
            };
            for &(team, allocation_gpus) in allocation {
                let running_gpus = run
                    .iter()
                    .filter(|r| r.account == team)
                    .map(|r| f64::from(r.gpus()))
                    .sum();
                let load = TeamLoad {
                    running_gpus,
                    allocation_gpus,
                };
                table.load.insert(team.into(), load);
            }
            let room = room_of(nodes, &run);
            let plan = plan_plain(&queue, &run, &room, &table, now, &cfg());
            count += plan.preemptions.len();
            for p in &plan.preemptions {
                let at = run.iter().position(|r| r.id == p.victim).unwrap();
                let v = run.remove(at);
                let mut back = pending(v.id.0, &v.account, 1, 8);
                back.preempted_by = p.for_job;
                back.owes_min_runtime = true;
                queue.push(back);
            }
            for id in &plan.admitted {
                let at = queue.iter().position(|p| p.id == *id).unwrap();
                let p = queue.remove(at);
                let free = room_of(nodes, &run).free;
                let n = free.iter().position(|&f| f == 8).unwrap() as NodeId;
                run.push(running(p.id.0, &p.account, &[(n, 8)], 1.0, now / H));
            }
        }
        count
    }

    /// Issue 15, second round: two teams with whole-node jobs must not take
    /// turns preempting each other. "small" (allocation 4 GPUs, but the
    /// higher lookback ratio) waits while "big" (allocation 12) runs both
    /// nodes. Under the first round's load test ("big", without a job,
    /// is less short than "small" is now) "small" took "big"'s nodes, which
    /// left "big" below its allocation and "small" above its own; "big" took
    /// them back by the ratio test once their protection ended, and so on
    /// (12 preemptions in 12 cycles). Now a load-based preemption never
    /// takes a team below its allocation: none.
    #[test]
    fn two_teams_near_their_allocations_do_not_take_turns() {
        let run = vec![
            running(1, "big", &[(0, 8)], 1.0, -2.0),
            running(2, "big", &[(1, 8)], 1.0, -2.0),
        ];
        let queue: Vec<PendingJob> = (11..17)
            .map(|i| pending(i, "small", 1, 8))
            .chain((21..27).map(|i| pending(i, "big", 1, 8)))
            .collect();
        let alloc = [("small", 4.0), ("big", 12.0)];
        let ratio = [("small", 2.0), ("big", 1.0)];
        assert_eq!(preemptions_over(2, &alloc, &ratio, run, queue, 12), 0);
    }

    /// A team's later jobs preempt only within its allocation, counting the
    /// jobs admitted earlier in the cycle. "small" (allocation 8 of 24 GPUs)
    /// takes one of the three nodes "big" (allocation 16) runs and then
    /// stops: one preemption. Under the first round's rule (every queued job
    /// asking, the load test of [`job_yields`] before its second round)
    /// the two teams took nodes from each other: 12 preemptions in 12
    /// cycles.
    #[test]
    fn later_jobs_preempt_only_within_the_allocation() {
        let run = vec![
            running(1, "big", &[(0, 8)], 1.0, -2.0),
            running(2, "big", &[(1, 8)], 1.0, -2.0),
            running(3, "big", &[(2, 8)], 1.0, -2.0),
        ];
        let queue: Vec<PendingJob> = (11..17)
            .map(|i| pending(i, "small", 1, 8))
            .chain((21..27).map(|i| pending(i, "big", 1, 8)))
            .collect();
        let alloc = [("small", 8.0), ("big", 16.0)];
        let ratio = [("small", 1.0), ("big", 1.0)];
        assert_eq!(preemptions_over(3, &alloc, &ratio, run, queue, 12), 1);
        assert!(later_job_may_preempt(None, 8.0));
        let load = |running_gpus| {
            Some(TeamLoad {
                running_gpus,
                allocation_gpus: 8.0,
            })
        };
        assert!(later_job_may_preempt(load(0.0), 8.0));
        assert!(!later_job_may_preempt(load(1.0), 8.0));
    }

    #[test]
    fn protected_jobs_are_never_victims() {
        let run = vec![running(1, "rich", &[(0, 8)], 4.0, 0.0)];
        let r = ratios(&[("rich", 9.0), ("poor", 0.0)]);
        let room = room_of(1, &run);
        let p = pending(2, "poor", 1, 8);
        assert_eq!(
            plan_room(&p, &run, &room, &r, 3.9 * H, &cfg(), &BTreeSet::new()),
            None
        );
        let got = plan_room(&p, &run, &room, &r, 4.0 * H, &cfg(), &BTreeSet::new()).unwrap();
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn unallocated_requests_never_preempt_and_no_ping_pong() {
        let run = vec![running(1, "x", &[(0, 8)], 0.0, 0.0)];
        let room = room_of(1, &run);
        let mut p = pending(2, "a", 1, 8);
        p.min_runtime_s = 0.0;
        assert_eq!(
            plan_room(&p, &run, &room, &ratios(&[]), H, &cfg(), &BTreeSet::new()),
            None
        );
        // A job never preempts the job that preempted it.
        let mut p = pending(2, "a", 1, 8);
        p.preempted_by = Some(JobId(1));
        assert_eq!(
            plan_room(&p, &run, &room, &ratios(&[]), H, &cfg(), &BTreeSet::new()),
            None
        );
        // A victim that has not yet re-run its min runtime cannot preempt.
        let mut p = pending(3, "a", 1, 8);
        p.owes_min_runtime = true;
        assert_eq!(
            plan_room(&p, &run, &room, &ratios(&[]), H, &cfg(), &BTreeSet::new()),
            None
        );
    }

    #[test]
    fn faulty_nodes_empty_as_protections_end_then_drain() {
        let run = vec![
            running(1, "a", &[(0, 4)], 2.0, 0.0),
            running(2, "a", &[(0, 4)], 0.0, 0.0),
        ];
        let room = room_of(2, &run);
        let faulty: BTreeSet<NodeId> = [0].into();
        let plan = plan_cycle(
            &[],
            &run,
            &room,
            &faulty,
            &BTreeSet::new(),
            &ratios(&[]),
            H,
            &cfg(),
        );
        assert_eq!(
            plan.preemptions
                .iter()
                .map(|p| p.victim.0)
                .collect::<Vec<_>>(),
            vec![2]
        );
        assert!(plan.drain.is_empty(), "job 1 is still protected");
        let plan = plan_cycle(
            &[],
            &run,
            &room,
            &faulty,
            &BTreeSet::new(),
            &ratios(&[]),
            2.0 * H,
            &cfg(),
        );
        assert_eq!(plan.preemptions.len(), 2);
        assert_eq!(plan.drain, vec![0]);
    }

    #[test]
    fn drain_holds_the_nodes_that_become_room_soonest() {
        // 4 nodes, a 2-node job of team "poor" (under-served). Node 0: an
        // unallocated job (a legal victim now). Node 1: protected until 5 h.
        // Node 2: protected until 2 h. Node 3: unprotected allocated job of a
        // team less served than "poor" (no legal victim, no promised end).
        let run = vec![
            running(1, "x", &[(0, 8)], 0.0, 0.0),
            running(2, "x", &[(1, 8)], 4.0, 1.0),
            running(3, "x", &[(2, 8)], 1.5, 0.5),
            running(4, "rich", &[(3, 8)], 1.0, 0.0),
        ];
        let r = ratios(&[("x", 0.1), ("rich", 0.1), ("poor", 0.5)]);
        let room = room_of(4, &run);
        let now = 1.5 * H;
        let p = pending(9, "poor", 2, 8);
        assert_eq!(
            plan_room(&p, &run, &room, &r, now, &cfg(), &BTreeSet::new()),
            None,
            "no legal victim set places it now"
        );
        let held = NodeSet::empty(4);
        let d = plan_drain(&p, &run, &room, &r, now, &cfg(), &held).unwrap();
        assert_eq!(d.nodes, vec![0, 2]);
        assert_eq!(d.ready_s, 2.0 * H);
        // Nodes held for another job are not offered again.
        let held = NodeSet::from_nodes(4, [0]);
        let d = plan_drain(&p, &run, &room, &r, now, &cfg(), &held).unwrap();
        assert_eq!(d.nodes, vec![2, 1]);
        assert_eq!(d.ready_s, 5.0 * H);
        // Four nodes cannot be promised (node 3 may run on indefinitely).
        assert_eq!(
            plan_drain(
                &pending(9, "poor", 4, 8),
                &run,
                &room,
                &r,
                now,
                &cfg(),
                &held
            ),
            None
        );
        // Unallocated requests never drain.
        let mut free = p.clone();
        free.min_runtime_s = 0.0;
        assert_eq!(
            plan_drain(&free, &run, &room, &r, now, &cfg(), &NodeSet::empty(4)),
            None
        );
    }

    #[test]
    fn cycle_does_not_give_the_same_room_twice() {
        // One unallocated 8-GPU job; two allocated 8-GPU requests: only the
        // first (queue order) gets it, the second finds no other victim.
        let run = vec![running(1, "x", &[(0, 8)], 0.0, 0.0)];
        let room = room_of(1, &run);
        let queue = vec![pending(2, "a", 1, 8), pending(3, "b", 1, 8)];
        let plan = plan_plain(&queue, &run, &room, &ratios(&[]), H, &cfg());
        assert_eq!(plan.admitted, vec![JobId(2)]);
        assert_eq!(plan.preemptions.len(), 1);
    }

    #[test]
    fn a_spared_job_is_no_victim_but_leaves_a_faulty_node() {
        // Job 1 would be the victim; spared, the job waits (no other room).
        let run = vec![running(1, "x", &[(0, 8)], 0.0, 0.0)];
        let room = room_of(1, &run);
        let p = pending(2, "a", 1, 8);
        let spared = BTreeSet::from([JobId(1)]);
        let plan = |spared: &BTreeSet<JobId>, faulty: &BTreeSet<NodeId>| {
            plan_cycle(
                std::slice::from_ref(&p),
                &run,
                &room,
                faulty,
                spared,
                &ratios(&[]),
                H,
                &cfg(),
            )
        };
        assert_eq!(
            plan(&BTreeSet::new(), &BTreeSet::new()).preemptions.len(),
            1
        );
        let got = plan(&spared, &BTreeSet::new());
        assert!(
            got.preemptions.is_empty() && got.admitted.is_empty(),
            "{got:?}"
        );
        // A faulty node still evicts it, and is drained once it leaves.
        let got = plan(&spared, &BTreeSet::from([0]));
        assert_eq!(got.preemptions.len(), 1, "{got:?}");
        assert!(matches!(
            got.preemptions[0].rule,
            VictimRule::FaultyNode { node: 0 }
        ));
        assert_eq!(got.drain, vec![0]);
    }

    #[test]
    fn room_given_in_vain_takes_free_room_but_no_victim() {
        // The livelock: the same unallocated job is the victim every cycle
        // for a job that never uses the room. Once the driver says room was
        // given, the job preempts no one.
        let run = vec![running(1, "x", &[(0, 8)], 0.0, 0.0)];
        let room = room_of(2, &run);
        let mut p = pending(2, "a", 2, 8);
        let plan = |p: &PendingJob, room: &NodeRoom| {
            plan_plain(std::slice::from_ref(p), &run, room, &ratios(&[]), H, &cfg())
        };
        assert_eq!(plan(&p, &room).preemptions.len(), 1);
        p.room_given = true;
        assert!(!p.may_preempt());
        let got = plan(&p, &room);
        assert!(got.preemptions.is_empty(), "{got:?}");
        assert!(got.admitted.is_empty());
        // It still takes room that is free.
        let free = room_of(2, &[]);
        assert_eq!(plan(&p, &free).admitted, vec![JobId(2)]);
    }

    #[test]
    fn preemptions_per_cycle_are_limited_in_queue_order() {
        // Four unallocated 8-GPU jobs; three allocated requests needing one,
        // two and one victims. With a limit of 2: the first job takes one,
        // the second would pass the limit and is held back, and so is the
        // third (no jumping the queue); a job that fits in free room is
        // still admitted.
        let run: Vec<RunningJob> = (0..4)
            .map(|i| running(i + 1, "x", &[(i as NodeId, 8)], 0.0, 0.0))
            .collect();
        let mut room = room_of(5, &run);
        room.free[4] = 4;
        let queue = vec![
            pending(10, "a", 1, 8),
            pending(11, "a", 2, 8),
            pending(12, "a", 1, 8),
            pending(13, "a", 1, 4),
        ];
        let cfg = ProtectionConfig {
            max_preemptions_per_cycle: 2,
            ..cfg()
        };
        let plan = plan_plain(&queue, &run, &room, &ratios(&[]), H, &cfg);
        assert_eq!(plan.preemptions.len(), 1, "{plan:?}");
        assert_eq!(plan.admitted, vec![JobId(10), JobId(13)]);
        assert_eq!(plan.held_back, vec![JobId(11), JobId(12)]);
        // Faulty-node evictions count too.
        let faulty: BTreeSet<NodeId> = [0, 1, 2].into();
        let plan = plan_cycle(
            &[],
            &run,
            &room,
            &faulty,
            &BTreeSet::new(),
            &ratios(&[]),
            H,
            &cfg,
        );
        assert_eq!(plan.preemptions.len(), 2);
        assert!(plan.drain.len() <= 2);
        // A job needing more victims than the limit is served alone.
        let cfg = ProtectionConfig {
            max_preemptions_per_cycle: 1,
            ..cfg
        };
        let plan = plan_plain(&queue[1..], &run, &room, &ratios(&[]), H, &cfg);
        assert_eq!(plan.preemptions.len(), 2, "{plan:?}");
        assert_eq!(plan.admitted, vec![JobId(11), JobId(13)]);
        assert_eq!(plan.held_back, vec![JobId(12)]);
    }

    /// A site: nodes 0-1 `a100` x 8 GPUs, 64 CPUs, partition `gpu`; nodes
    /// 2-3 `l40s` x 4 GPUs, 32 CPUs, partitions `gpu` and `debug`. Free
    /// CPUs and memory: the node's minus what `running` holds.
    fn site_room(running: &[RunningJob]) -> NodeRoom {
        let node = |i: u32| {
            let a100 = i < 2;
            NodeTraits {
                name: format!("n{}", i + 1),
                gpus: if a100 { 8 } else { 4 },
                partitions: if a100 {
                    ["gpu".to_string()].into()
                } else {
                    ["gpu".to_string(), "debug".to_string()].into()
                },
                features: [if a100 { "a100" } else { "l40s" }.to_string()].into(),
                gpu_types: [if a100 { "a100" } else { "l40s" }.to_string()].into(),
                free_cpus: if a100 { 64 } else { 32 },
                free_mem_mb: 256_000,
            }
        };
        let mut traits: Vec<NodeTraits> = (0..4).map(node).collect();
        let mut free: Vec<u32> = traits.iter().map(|t| t.gpus).collect();
        for r in running {
            for &(n, g) in &r.gpus_on {
                free[n as usize] -= g;
                let t = &mut traits[n as usize];
                t.free_cpus -= r.cpus_per_node;
                t.free_mem_mb -= r.mem_per_node_mb;
            }
        }
        NodeRoom {
            capacity: 8,
            free,
            usable: NodeSet::full(4),
            traits,
        }
    }

    fn victims_of(p: &PendingJob, run: &[RunningJob], room: &NodeRoom) -> Option<Vec<u64>> {
        plan_room(
            p,
            run,
            room,
            &ratios(&[]),
            6.0 * H,
            &cfg(),
            &BTreeSet::new(),
        )
        .map(|v| v.iter().map(|p| p.victim.0).collect())
    }

    #[test]
    fn a_debug_job_never_preempts_outside_debug() {
        // Unallocated jobs fill every node; the cheapest victims (started
        // last) are on the a100 nodes, outside `debug`.
        let mut run = vec![
            running(1, "x", &[(0, 8)], 0.0, 5.9),
            running(2, "x", &[(1, 8)], 0.0, 5.9),
            running(3, "x", &[(2, 4)], 0.0, 1.0),
            running(4, "x", &[(3, 4)], 0.0, 2.0),
        ];
        for r in &mut run {
            r.resumable = false;
        }
        let mut p = pending(9, "a", 1, 4);
        // Anywhere: the cheapest victim, on an a100 node.
        assert_eq!(victims_of(&p, &run, &site_room(&run)), Some(vec![1]));
        p.needs.partitions = vec!["debug".into()];
        assert_eq!(victims_of(&p, &run, &site_room(&run)), Some(vec![4]));
        // Debug's jobs protected: no victim at all, never one outside debug.
        run[2].min_runtime_s = 10.0 * H;
        run[3].min_runtime_s = 10.0 * H;
        assert_eq!(victims_of(&p, &run, &site_room(&run)), None);
        // An excluded node is no room either.
        run[3].min_runtime_s = 0.0;
        p.needs.excluded = ["n4".to_string()].into();
        assert_eq!(victims_of(&p, &run, &site_room(&run)), None);
        // The cycle reserves room only where the job can run: with n3 free
        // and n4 excluded, nothing is preempted and the job is admitted.
        let empty_l40s = vec![run[0].clone(), run[1].clone(), run[3].clone()];
        let plan = plan_cycle(
            std::slice::from_ref(&p),
            &empty_l40s,
            &site_room(&empty_l40s),
            &BTreeSet::new(),
            &BTreeSet::new(),
            &ratios(&[]),
            6.0 * H,
            &cfg(),
        );
        assert_eq!((plan.preemptions.len(), plan.admitted), (0, vec![JobId(9)]));
    }

    #[test]
    fn a_typed_gpu_job_never_preempts_on_other_gpu_types() {
        let mut run = vec![
            running(1, "x", &[(0, 8)], 0.0, 1.0),
            running(2, "x", &[(1, 8)], 0.0, 2.0),
            running(3, "x", &[(2, 4)], 0.0, 5.9),
            running(4, "x", &[(3, 4)], 0.0, 5.9),
        ];
        for r in &mut run {
            r.resumable = false;
        }
        let mut p = pending(9, "a", 1, 4);
        assert_eq!(victims_of(&p, &run, &site_room(&run)), Some(vec![3]));
        p.needs.gpu_type = Some("a100".into());
        assert_eq!(victims_of(&p, &run, &site_room(&run)), Some(vec![2]));
        // The a100 jobs protected: none, even though l40s victims exist.
        run[0].min_runtime_s = 10.0 * H;
        run[1].min_runtime_s = 10.0 * H;
        assert_eq!(victims_of(&p, &run, &site_room(&run)), None);
        // The same through a feature constraint.
        p.needs.gpu_type = None;
        p.needs.constraint = "a100&[x|y]".into();
        assert_eq!(victims_of(&p, &run, &site_room(&run)), None);
        p.needs.constraint = "a100|l40s".into();
        assert_eq!(victims_of(&p, &run, &site_room(&run)), Some(vec![3]));
    }

    #[test]
    fn a_cpu_hungry_job_does_not_free_a_node_whose_other_jobs_keep_the_cpus() {
        // n1: a cheap victim (4 GPUs, 4 CPUs) beside a protected job that
        // holds 56 CPUs; n2: a dearer victim holding 8 GPUs and 16 CPUs.
        let mut run = vec![
            running(1, "x", &[(0, 4)], 0.0, 5.9),
            running(2, "y", &[(0, 4)], 10.0, 5.0),
            running(3, "x", &[(1, 8)], 0.0, 3.0),
            running(4, "x", &[(2, 4)], 10.0, 5.0),
            running(5, "x", &[(3, 4)], 10.0, 5.0),
        ];
        for (r, cpus) in run.iter_mut().zip([4, 56, 16, 8, 8]) {
            r.resumable = false;
            r.cpus_per_node = cpus;
        }
        let mut p = pending(9, "a", 1, 4);
        // CPUs not counted: the cheap victim on n1.
        assert_eq!(victims_of(&p, &run, &site_room(&run)), Some(vec![1]));
        p.needs.cpus_per_node = 64;
        assert_eq!(victims_of(&p, &run, &site_room(&run)), Some(vec![3]));
        // Memory the same way: n2's victim holds none of it, so freeing n2
        // leaves too little; n1 never has the CPUs.
        run[2].mem_per_node_mb = 0;
        let mut room = site_room(&run);
        room.traits[1].free_mem_mb = 100_000;
        p.needs.mem_per_node_mb = 200_000;
        assert_eq!(victims_of(&p, &run, &room), None);
    }

    #[test]
    fn constraints_read_as_slurm_writes_them() {
        let f: BTreeSet<String> = ["a100".to_string(), "ib".to_string()].into();
        assert!(constraint_holds("", &f));
        assert!(constraint_holds("a100", &f));
        assert!(constraint_holds("a100&ib", &f));
        assert!(constraint_holds("[l40s|a100]", &f));
        assert!(constraint_holds("a100*2", &f));
        assert!(!constraint_holds("a100&nvlink", &f));
        assert!(!constraint_holds("l40s", &f));
    }

    /// A load table with `loads_decide` and ratios under which the ratio
    /// test never holds (the load test alone decides).
    fn weighted_table(loads: &[(&str, f64, f64)]) -> TeamTable {
        let mut table = TeamTable {
            ratio: loads.iter().map(|(a, _, _)| (a.to_string(), 1.0)).collect(),
            load: BTreeMap::new(),
            loads_decide: true,
        };
        for &(a, running_gpus, allocation_gpus) in loads {
            table.load.insert(
                a.into(),
                TeamLoad {
                    running_gpus,
                    allocation_gpus,
                },
            );
        }
        table
    }

    /// `[gpu_weights]`: team loads and allocations are weighted GPUs, so a
    /// victim leaves its team's load by its weighted GPUs, never its plain
    /// count. Weight 2: team x (allocation 20) runs two 8-GPU a100 jobs,
    /// load 32; taking one leaves 16 < 20, so y's 8-GPU job may not take it
    /// (32 - 8 = 24 said it could: x was taken below its allocation).
    #[test]
    fn a_weighted_victim_leaves_its_team_by_its_weighted_gpus() {
        let mut run = vec![
            running(1, "x", &[(0, 8)], 1.0, 0.0),
            running(2, "x", &[(1, 8)], 1.0, 0.0),
        ];
        for r in &mut run {
            r.weight = 2.0;
            assert_eq!(r.charge(), 16.0);
        }
        let room = room_of(2, &run);
        let table = weighted_table(&[("x", 32.0, 20.0), ("y", 0.0, 20.0)]);
        let p = pending(9, "y", 1, 8);
        let none = BTreeSet::new();
        assert_eq!(
            plan_room(&p, &run, &room, &table, 2.0 * H, &cfg(), &none),
            None,
            "x would end at 16 weighted GPUs, below its allocation of 20"
        );
        // With 40 (allocation 20) one job may go (40 - 16 = 24), not both.
        let table = weighted_table(&[("x", 40.0, 20.0), ("y", 0.0, 20.0)]);
        let got = plan_room(
            &pending(9, "y", 2, 8),
            &run,
            &room,
            &table,
            2.0 * H,
            &cfg(),
            &none,
        );
        assert_eq!(got, None, "two victims would take x to 8 of 20");
        let got = plan_room(&p, &run, &room, &table, 2.0 * H, &cfg(), &none).unwrap();
        assert_eq!(got.len(), 1);
    }

    /// Weight below 1 (0.25): team x (allocation 4) runs three 8-GPU jobs,
    /// load 6 weighted GPUs; one job is 2 of them, so x may yield one and
    /// stays at its allocation (the plain count, 8, refused every victim),
    /// but not two.
    #[test]
    fn a_light_victim_is_legal_when_its_weighted_gpus_leave_the_allocation() {
        let mut run = vec![
            running(1, "x", &[(0, 8)], 1.0, 0.0),
            running(2, "x", &[(1, 8)], 1.0, 0.0),
            running(3, "x", &[(2, 8)], 1.0, 0.0),
        ];
        for r in &mut run {
            r.weight = 0.25;
        }
        let room = room_of(3, &run);
        let table = weighted_table(&[("x", 6.0, 4.0), ("y", 0.0, 20.0)]);
        let none = BTreeSet::new();
        let got = plan_room(
            &pending(9, "y", 1, 8),
            &run,
            &room,
            &table,
            2.0 * H,
            &cfg(),
            &none,
        )
        .expect("x yields one job: 6 - 2 = 4, its allocation");
        assert_eq!(got.len(), 1);
        assert_eq!(
            plan_room(
                &pending(9, "y", 2, 8),
                &run,
                &room,
                &table,
                2.0 * H,
                &cfg(),
                &none
            ),
            None,
            "two would take x to 2 of 4"
        );
    }

    /// [`plan_cycle`] counts its earlier plans in the loads by weighted GPUs
    /// too: an admitted job adds its charge to its team, a victim takes its
    /// own from its team.
    #[test]
    fn a_cycle_counts_its_plans_in_weighted_gpus() {
        // Admissions: y (allocation 20) starts an 8-GPU a100 job (16) in
        // free room; its next one (16 more) would take it past 20, so it
        // may not preempt the unallocated job on node 1.
        let run = vec![running(1, "z", &[(1, 8)], 0.0, 0.0)];
        let room = room_of(2, &run);
        let table = weighted_table(&[("y", 0.0, 20.0), ("z", 0.0, 0.0)]);
        let mut a = pending(2, "y", 1, 8);
        a.weight = 2.0;
        let mut b = pending(3, "y", 1, 8);
        b.weight = 2.0;
        let plan = plan_plain(&[a.clone(), b.clone()], &run, &room, &table, H, &cfg());
        assert_eq!(plan.admitted, vec![JobId(2)], "{plan:?}");
        assert!(plan.preemptions.is_empty(), "{plan:?}");
        // At weight 1 (8 + 8 <= 20) the later job takes it.
        a.weight = 1.0;
        b.weight = 1.0;
        let plan = plan_plain(&[a, b], &run, &room, &table, H, &cfg());
        assert_eq!(plan.admitted, vec![JobId(2), JobId(3)]);
        // Victims: x (allocation 20) runs three a100 jobs (48). y's head
        // takes one (48 - 16 = 32); w's head may not take another
        // (32 - 16 = 16 < 20).
        let mut run = vec![
            running(1, "x", &[(0, 8)], 1.0, 0.0),
            running(2, "x", &[(1, 8)], 1.0, 0.0),
            running(3, "x", &[(2, 8)], 1.0, 0.0),
        ];
        for r in &mut run {
            r.weight = 2.0;
        }
        let room = room_of(3, &run);
        let table = weighted_table(&[("x", 48.0, 20.0), ("y", 0.0, 20.0), ("w", 0.0, 20.0)]);
        let queue = vec![pending(8, "y", 1, 8), pending(9, "w", 1, 8)];
        let plan = plan_plain(&queue, &run, &room, &table, 2.0 * H, &cfg());
        assert_eq!(plan.admitted, vec![JobId(8)], "{plan:?}");
        assert_eq!(plan.preemptions.len(), 1, "{plan:?}");
    }

    /// A job that asked for more than the cap is protected until the cap
    /// only: its node is room then, as any other protected node (a drain
    /// counted it as never becoming room).
    #[test]
    fn a_drain_counts_a_job_protected_past_the_cap_as_room_at_the_cap() {
        let run = vec![
            running(1, "x", &[(0, 8)], 10.0, 0.0), // asks 10 h: protected to 8 h
            running(2, "x", &[(1, 8)], 6.0, 0.0),
        ];
        let room = room_of(2, &run);
        let r = ratios(&[("x", 0.1), ("poor", 0.5)]);
        let p = pending(9, "poor", 2, 8);
        let d = plan_drain(&p, &run, &room, &r, H, &cfg(), &NodeSet::empty(2))
            .expect("both nodes are room by the cap");
        assert_eq!(d.nodes, vec![1, 0]);
        assert_eq!(d.ready_s, 8.0 * H);
        assert_eq!(run[0].protected_until(&cfg()), Some(8.0 * H));
    }
}
