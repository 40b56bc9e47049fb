//! Fair-share ratios and the queue order.
//!
//! fair-share-budgets.txt, "Fair-share ordering": jobs are sorted by the
//! ratio of actual occupancy to allocated time over a lookback window
//! (7 days by default); under-served allocations go first. The order is a
//! tree walk in the spirit of Slurm's Fair Tree, with budgets as weights: at
//! each level the sibling with the lowest ratio goes first and all of its
//! jobs precede all of its later siblings' jobs. Within a team the job's own
//! priority only reorders that team's jobs ("Workload priority"). Unallocated
//! jobs (min runtime 0) sort after every allocated job.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use super::ledger::{Kind, Ledger, UnixSecs, Usage};
use super::tree::{NodeIx, OrgTree};
use crate::model::JobId;

/// Default lookback window: 7 days.
pub const DEFAULT_WINDOW_S: i64 = 7 * 24 * 3600;

/// Usage and fair-share ratio of one tree node over a window.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeStats {
    /// Usage of every leaf under the node.
    pub usage: Usage,
    /// The node's fixed share of total capacity.
    pub abs_share: f64,
    /// `abs_share x capacity x window`, in GPU-seconds.
    pub budget_gpu_s: f64,
    /// `charged GPU-time / budget`. Infinite for a zero budget (such nodes
    /// always go last).
    pub ratio: f64,
}

/// Fair-share ratio = charged GPU-time over the window / (share x capacity x
/// window). A zero budget gives `+inf`. Charges and capacity are in
/// weighted GPUs ([`super::weights`]; plain GPUs when no type is weighted).
pub fn ratio(charged_gpu_s: f64, abs_share: f64, capacity_gpus: f64, window_s: i64) -> f64 {
    let budget = abs_share * capacity_gpus.max(0.0) * window_s.max(0) as f64;
    if budget > 0.0 {
        charged_gpu_s / budget
    } else {
        f64::INFINITY
    }
}

/// Per-node stats of the whole tree, indexed by [`NodeIx`], from usage per
/// account (accounts not in the tree are ignored here; see
/// [`unbudgeted_usage`]). `capacity_gpus` is the cluster's weighted GPUs
/// ([`super::GpuWeights::weighted`] summed over its nodes).
pub fn node_stats(
    tree: &OrgTree,
    usage_by_account: &HashMap<String, Usage>,
    capacity_gpus: f64,
    window_s: i64,
) -> Vec<NodeStats> {
    let mut usage = vec![Usage::default(); tree.len()];
    for (acct, u) in usage_by_account {
        if let Ok(leaf) = tree.leaf_for_account(acct) {
            for a in tree.ancestors(leaf) {
                usage[a].add(u);
            }
        }
    }
    tree.nodes()
        .iter()
        .zip(usage)
        .map(|(n, u)| {
            let budget = n.abs_share * capacity_gpus.max(0.0) * window_s.max(0) as f64;
            NodeStats {
                usage: u,
                abs_share: n.abs_share,
                budget_gpu_s: budget,
                ratio: ratio(u.charged_gpu_s, n.abs_share, capacity_gpus, window_s),
            }
        })
        .collect()
}

/// Usage of accounts that map to no leaf.
pub fn unbudgeted_usage(tree: &OrgTree, usage_by_account: &HashMap<String, Usage>) -> Usage {
    let mut u = Usage::default();
    for (acct, x) in usage_by_account {
        if tree.leaf_for_account(acct).is_err() {
            u.add(x);
        }
    }
    u
}

/// Convenience: stats over `[now - window, now)` straight from a ledger.
pub fn stats_at(
    tree: &OrgTree,
    ledger: &Ledger,
    now: UnixSecs,
    window_s: i64,
    capacity_gpus: f64,
) -> Vec<NodeStats> {
    node_stats(
        tree,
        &ledger.usage(now - window_s, now),
        capacity_gpus,
        window_s,
    )
}

/// Each account's fair-share ratio (its leaf's), for the preemption rules of
/// [`crate::preempt`] (`BTreeMap<String, f64>` implements its `Ratios`;
/// accounts missing from the map count as infinitely over-served there).
pub fn account_ratios(
    tree: &OrgTree,
    stats: &[NodeStats],
) -> std::collections::BTreeMap<String, f64> {
    tree.nodes()
        .iter()
        .enumerate()
        .filter_map(|(ix, n)| n.account.as_ref().map(|a| (a.clone(), stats[ix].ratio)))
        .collect()
}

/// A pending job as the ordering sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingJob {
    pub job: JobId,
    pub account: String,
    pub gpus: u32,
    /// 0 selects unallocated (free) time.
    pub min_runtime_s: u64,
    /// Higher goes first within the team (Slurm: minus the nice value).
    pub priority: i64,
    pub submit: UnixSecs,
    /// Slurm's partition `PriorityTier` of the job (the highest of its
    /// partitions'; 0 without). Slurm starts jobs of a higher tier first
    /// whatever their priority, so the order is by tier first and compass's
    /// order holds within each tier.
    #[serde(default)]
    pub tier: u16,
    /// Priority of the job's QOS (`sacctmgr show qos format=name,priority`)
    /// when the site weighs QOS (`PriorityWeightQOS` > 0), else 0. Within a
    /// tier, a job of a higher QOS priority goes before every job of a lower
    /// one; compass's fair-share order holds within a (tier, QOS) band
    /// (`docs/admin-guide.md`, "Living with the site's Slurm setup").
    #[serde(default)]
    pub qos_priority: u32,
}

/// One level of the tree walk that placed a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelPos {
    /// The node on the job's path at this level.
    pub node: String,
    pub ratio: f64,
    /// 0-based position among its siblings (by ratio, then name).
    pub position: usize,
    pub siblings: usize,
}

/// A job's place in the queue and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placed {
    pub job: PendingJob,
    /// 0-based rank in the queue.
    pub rank: usize,
    pub kind: Kind,
    /// The leaf (team) of the job's account, if the account is in the tree.
    pub team: Option<String>,
    /// The walk from the root's children down to the team.
    pub path: Vec<LevelPos>,
    /// 0-based position among the team's jobs of the same kind.
    pub team_position: usize,
    pub team_jobs: usize,
    /// GPUs requested by the jobs ahead of this one.
    pub gpus_ahead: u64,
    /// Whether the team ran below its allocation when the queue was ordered
    /// (allocated GPUs for allocated jobs, all GPUs for unallocated ones
    /// under [`FreeOrder::UnderTotalFirst`]); `None` when the team order
    /// does not look at it ([`TeamOrder::Ratio`], or no team).
    #[serde(default)]
    pub under_allocation: Option<bool>,
}

/// The queue order: see the module doc; jobs of a higher partition
/// `PriorityTier` go before every job of a lower one, as Slurm schedules
/// them; within a tier, jobs of a higher QOS priority go before every job
/// of a lower one ([`PendingJob::qos_priority`]), and the fair-share order
/// holds within each (tier, QOS priority) band. Deterministic: ties between siblings
/// of equal ratio go by name; ties between jobs of equal priority by submit
/// time, then job id. `stats` comes from [`node_stats`] for the same tree.
///
/// This is the tree walk by ratio alone ([`TeamOrder::Ratio`]); the budget
/// service and the policy simulator order by [`order_queue_by`].
pub fn order_queue(tree: &OrgTree, stats: &[NodeStats], jobs: &[PendingJob]) -> Vec<Placed> {
    let now = QueueState {
        capacity_gpus: 0.0,
        running: &HashMap::new(),
    };
    order_queue_by(tree, stats, &now, QueueOrder::RATIO, jobs)
}

/// How teams are ordered for allocated work: the simulator's
/// `--team-order`, the budget service's `[order] team_order`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TeamOrder {
    /// The published design: the fair-share tree walk by lookback ratio.
    Ratio,
    /// Ours: teams running less allocated time than their allocation right
    /// now go first (in ratio order), then the others (in ratio order). The
    /// lookback ratio alone hands all freed capacity to one team at a time,
    /// so a team's hourly use swings around its budget; this keeps each team
    /// near its allocation hour by hour, which is what "owed GPU-hours" counts.
    #[default]
    UnderAllocationFirst,
    /// Slurm's Fair Tree (`priority/multifactor`, `PriorityFlags=FAIR_TREE`,
    /// [`crate::sim::budgets::fair_tree`]): teams by Level Fairshare of usage
    /// decayed with `PriorityDecayHalfLife`, from the root down; fair share
    /// dominant, age (submit time) the tie-breaker within a team. An anchor
    /// of the policy simulator (issue 15): the simulator passes its Fair Tree
    /// rank as the base order of [`team_orders`]; the budget service does not
    /// run it (Slurm does, with `priority/multifactor`).
    FairTree,
}

impl TeamOrder {
    /// Does preemption follow this order's test alone (a team above its
    /// allocation now yields to one below its own, whatever the lookback
    /// ratios; [`crate::preempt::TeamTable::loads_decide`])? Yes for
    /// `UnderAllocationFirst` (issue 15), so the order and the preemption
    /// rule agree; the simulator and the budget service both ask here.
    pub fn preempts_by_load(self) -> bool {
        matches!(self, TeamOrder::UnderAllocationFirst)
    }
}

/// The team order of the unallocated queue. It applies under any
/// [`TeamOrder`] (in the simulator, not in the one queue of Fair Tree
/// without preemption). The default, `UnderTotalFirst`, is the one measured
/// better (docs/results.md, issue 15 section); the simulator and the budget
/// service both take it from here.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FreeOrder {
    /// The order of allocated work ([`TeamOrder`]): with
    /// under-allocation-first, "under" counts allocated GPUs only, so a team
    /// that already fills its allocation with free work still goes first.
    #[serde(alias = "same")]
    SameAsAllocated,
    /// Teams whose running GPUs, allocated and free together, are below
    /// their allocation first (in the order of allocated work), then the
    /// others: free capacity goes to the teams furthest from their share.
    #[default]
    UnderTotalFirst,
}

/// The team orders of the queue: one setting shared by the policy simulator
/// and the budget service, so the live service runs the order the simulator
/// measured.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueOrder {
    pub team_order: TeamOrder,
    pub free_order: FreeOrder,
}

impl QueueOrder {
    /// The tree walk by ratio alone, for allocated and unallocated work.
    pub const RATIO: QueueOrder = QueueOrder {
        team_order: TeamOrder::Ratio,
        free_order: FreeOrder::SameAsAllocated,
    };
}

/// What one team runs right now against its allocation, in (weighted) GPUs.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct TeamNow {
    /// `abs_share x capacity`.
    pub allocation_gpus: f64,
    /// GPUs of its running allocated jobs (min runtime > 0).
    pub running_allocated_gpus: f64,
    /// GPUs of all its running jobs, allocated and unallocated.
    pub running_total_gpus: f64,
}

impl TeamNow {
    fn under_allocated(&self) -> bool {
        self.running_allocated_gpus < self.allocation_gpus
    }
    fn under_total(&self) -> bool {
        self.running_total_gpus < self.allocation_gpus
    }
}

/// Teams in the order their allocated and their unallocated jobs are served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TeamOrders<T> {
    pub allocated: Vec<T>,
    pub free: Vec<T>,
}

/// The team orders of [`QueueOrder`] from `base`, the teams in fair-share
/// order (the ratio walk; Slurm's Fair Tree rank for [`TeamOrder::FairTree`]):
/// - allocated work: `base` for `Ratio` and `FairTree`; for
///   `UnderAllocationFirst` the teams whose running allocated GPUs are below
///   their allocation first, then the others, each part in `base` order;
/// - unallocated work: the allocated order for `SameAsAllocated`; for
///   `UnderTotalFirst` the teams whose running GPUs (all kinds) are below
///   their allocation first, then the others, each part in the allocated
///   order.
///
/// The one implementation of these rules: the policy simulator calls it per
/// scheduling pass, [`order_queue_by`] per cycle of the budget service.
pub fn team_orders<T: Copy>(
    base: &[T],
    now: impl Fn(T) -> TeamNow,
    cfg: QueueOrder,
) -> TeamOrders<T> {
    let allocated: Vec<T> = match cfg.team_order {
        TeamOrder::Ratio | TeamOrder::FairTree => base.to_vec(),
        TeamOrder::UnderAllocationFirst => {
            let (under, over): (Vec<T>, Vec<T>) =
                base.iter().partition(|&&t| now(t).under_allocated());
            under.into_iter().chain(over).collect()
        }
    };
    let free = match cfg.free_order {
        FreeOrder::SameAsAllocated => allocated.clone(),
        FreeOrder::UnderTotalFirst => {
            let (under, over): (Vec<T>, Vec<T>) =
                allocated.iter().partition(|&&t| now(t).under_total());
            under.into_iter().chain(over).collect()
        }
    };
    TeamOrders { allocated, free }
}

/// GPUs an account runs right now (weighted, as its charges).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct RunningGpus {
    /// Of its allocated jobs (min runtime > 0).
    pub allocated: f64,
    /// Of all its jobs.
    pub total: f64,
}

/// What the queue order needs besides the ratios: the cluster's capacity
/// (weighted GPUs) and the GPUs each account runs now.
#[derive(Copy, Clone, Debug)]
pub struct QueueState<'a> {
    pub capacity_gpus: f64,
    pub running: &'a HashMap<String, RunningGpus>,
}

/// The queue order of the budget service (and of `order_queue` with
/// [`QueueOrder::RATIO`]): by partition tier (higher first), then QOS
/// priority (higher first, [`PendingJob::qos_priority`]), then allocated
/// before unallocated jobs ([`Kind::of_job`]: a job of an account outside
/// the tree is unallocated whatever its min runtime), budgeted teams before accounts outside the tree,
/// teams in the order of [`team_orders`] (base: the tree walk with siblings
/// by (ratio, name)), then job priority (higher first), submit time, job id.
/// A team's allocation is `abs_share x now.capacity_gpus`; its running GPUs
/// are summed over the accounts of `now.running` that map to it.
/// [`TeamOrder::FairTree`] orders like `Ratio` here (the base is the ratio
/// walk); the simulator passes its own Fair Tree rank to [`team_orders`].
pub fn order_queue_by(
    tree: &OrgTree,
    stats: &[NodeStats],
    now: &QueueState<'_>,
    cfg: QueueOrder,
    jobs: &[PendingJob],
) -> Vec<Placed> {
    // Position of every node among its siblings, and a DFS index of leaves
    // with siblings visited in (ratio, name) order.
    let mut level_pos: Vec<(usize, usize)> = vec![(0, 1); tree.len()];
    let mut dfs_index: Vec<usize> = vec![usize::MAX; tree.len()];
    let mut next = 0usize;
    let mut stack: Vec<NodeIx> = vec![tree.root()];
    while let Some(n) = stack.pop() {
        dfs_index[n] = next;
        next += 1;
        let mut kids = tree.node(n).children.clone();
        kids.sort_by(|a, b| {
            stats[*a]
                .ratio
                .total_cmp(&stats[*b].ratio)
                .then_with(|| tree.node(*a).name.cmp(&tree.node(*b).name))
        });
        for (i, k) in kids.iter().enumerate() {
            level_pos[*k] = (i, kids.len());
        }
        stack.extend(kids.iter().rev());
    }
    // Every node in walk order (accounts may sit on inner nodes too).
    let mut leaves: Vec<NodeIx> = (0..tree.len()).collect();
    leaves.sort_by_key(|&n| dfs_index[n]);
    let mut team_now = vec![TeamNow::default(); tree.len()];
    for &l in &leaves {
        team_now[l].allocation_gpus = tree.node(l).abs_share * now.capacity_gpus.max(0.0);
    }
    for (acct, r) in now.running {
        if let Ok(l) = tree.leaf_for_account(acct) {
            team_now[l].running_allocated_gpus += r.allocated;
            team_now[l].running_total_gpus += r.total;
        }
    }
    let orders = team_orders(&leaves, |l| team_now[l], cfg);
    let mut alloc_pos = vec![usize::MAX; tree.len()];
    let mut free_pos = vec![usize::MAX; tree.len()];
    for (i, &l) in orders.allocated.iter().enumerate() {
        alloc_pos[l] = i;
    }
    for (i, &l) in orders.free.iter().enumerate() {
        free_pos[l] = i;
    }
    let under = |leaf: Option<NodeIx>, kind: Kind| -> Option<bool> {
        let l = leaf?;
        match (kind, cfg.team_order, cfg.free_order) {
            (Kind::Unallocated, _, FreeOrder::UnderTotalFirst) => Some(team_now[l].under_total()),
            (_, TeamOrder::UnderAllocationFirst, _) => Some(team_now[l].under_allocated()),
            _ => None,
        }
    };
    let team_pos = |leaf: Option<NodeIx>, kind: Kind| -> usize {
        match (leaf, kind) {
            (None, _) => 0,
            (Some(l), Kind::Allocated) => alloc_pos[l],
            (Some(l), Kind::Unallocated) => free_pos[l],
        }
    };
    struct Keyed<'a> {
        job: &'a PendingJob,
        kind: Kind,
        leaf: Option<NodeIx>,
    }
    let mut keyed: Vec<Keyed> = jobs
        .iter()
        .map(|j| Keyed {
            job: j,
            // An account outside the tree runs unallocated time whatever
            // its min runtime (as enforcement and the ledger read it).
            kind: Kind::of_job(Some(tree), &j.account, j.min_runtime_s),
            leaf: tree.leaf_for_account(&j.account).ok(),
        })
        .collect();
    keyed.sort_by(|a, b| {
        let ka = (
            a.kind == Kind::Unallocated,
            a.leaf.is_none(),
            team_pos(a.leaf, a.kind),
        );
        let kb = (
            b.kind == Kind::Unallocated,
            b.leaf.is_none(),
            team_pos(b.leaf, b.kind),
        );
        b.job
            .tier
            .cmp(&a.job.tier)
            .then_with(|| b.job.qos_priority.cmp(&a.job.qos_priority))
            .then_with(|| ka.cmp(&kb))
            .then_with(|| b.job.priority.cmp(&a.job.priority))
            .then_with(|| a.job.submit.cmp(&b.job.submit))
            .then_with(|| a.job.job.cmp(&b.job.job))
            .then_with(|| a.job.account.cmp(&b.job.account))
    });
    // Team positions.
    let mut team_total: HashMap<(Option<NodeIx>, Kind), usize> = HashMap::new();
    for k in &keyed {
        *team_total.entry((k.leaf, k.kind)).or_default() += 1;
    }
    let mut team_seen: HashMap<(Option<NodeIx>, Kind), usize> = HashMap::new();
    let mut gpus_ahead = 0u64;
    keyed
        .iter()
        .enumerate()
        .map(|(rank, k)| {
            let seen = team_seen.entry((k.leaf, k.kind)).or_default();
            let team_position = *seen;
            *seen += 1;
            let path = match k.leaf {
                None => Vec::new(),
                Some(leaf) => {
                    let mut p: Vec<LevelPos> = tree
                        .ancestors(leaf)
                        .into_iter()
                        .filter(|n| *n != tree.root())
                        .map(|n| LevelPos {
                            node: tree.node(n).name.clone(),
                            ratio: stats[n].ratio,
                            position: level_pos[n].0,
                            siblings: level_pos[n].1,
                        })
                        .collect();
                    p.reverse();
                    p
                }
            };
            let placed = Placed {
                job: k.job.clone(),
                rank,
                kind: k.kind,
                team: k.leaf.map(|l| tree.node(l).name.clone()),
                path,
                team_position,
                team_jobs: team_total[&(k.leaf, k.kind)],
                gpus_ahead,
                under_allocation: under(k.leaf, k.kind),
            };
            gpus_ahead += u64::from(k.job.gpus);
            placed
        })
        .collect()
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn fmt_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.3}")
    } else {
        "infinite (no budget)".to_string()
    }
}

/// A job's place in plain words (for `compass why JOBID`).
pub fn explain(p: &Placed, queue_len: usize) -> String {
    let mut s = format!(
        "Job {} is {} of {} pending jobs (account {}, {} GPUs).\n",
        p.job.job,
        ordinal(p.rank + 1),
        queue_len,
        p.job.account,
        p.job.gpus
    );
    if p.job.tier > 0 {
        s.push_str(&format!(
            "Its partition has PriorityTier {}: Slurm starts jobs of higher tiers first, whatever their budget; the order below holds among the jobs of its tier.\n",
            p.job.tier
        ));
    }
    if p.job.qos_priority > 0 {
        s.push_str(&format!(
            "Its QOS has priority {}: it goes before every job of its tier with a lower QOS priority, whatever their budget; the order below holds among the jobs of its tier and QOS priority.\n",
            p.job.qos_priority
        ));
    }
    match p.kind {
        Kind::Allocated => s.push_str(&format!(
            "It asks for allocated time (min runtime {}): it is charged to its budget and sorts before all unallocated jobs.\n",
            crate::duration::format(p.job.min_runtime_s)
        )),
        Kind::Unallocated if p.job.min_runtime_s > 0 => s.push_str(&format!(
            "It asks for a min runtime of {}, but its account has no budget in the tree: its time is unallocated \
             (free, never protected from preemption, whatever its --min-runtime) and it sorts after every allocated job.\n",
            crate::duration::format(p.job.min_runtime_s)
        )),
        Kind::Unallocated => s.push_str(
            "It asks for unallocated time (min runtime 0): it is free and sorts after every allocated job.\n",
        ),
    }
    match &p.team {
        None => s.push_str(&format!(
            "Its account `{}` is not in the budget tree, so it sorts after every budgeted job of its kind.\n",
            p.job.account
        )),
        Some(team) => {
            for l in &p.path {
                s.push_str(&format!(
                    "- `{}` has fair-share ratio {} and goes {} of {} among its siblings.\n",
                    l.node,
                    fmt_ratio(l.ratio),
                    ordinal(l.position + 1),
                    l.siblings
                ));
            }
            if let Some(under) = p.under_allocation {
                let what = match p.kind {
                    Kind::Allocated => "allocated GPUs",
                    Kind::Unallocated => "GPUs (allocated and free)",
                };
                s.push_str(&if under {
                    format!("- `{team}` runs fewer {what} than its allocation right now, so it goes ahead of every team at or over its allocation.\n")
                } else {
                    format!("- `{team}` runs at least its allocation in {what} right now, so it goes after every team under its allocation.\n")
                });
            }
            s.push_str(&format!(
                "Within team `{team}` it is {} of {} by job priority ({}; higher first, then earlier submit).\n",
                ordinal(p.team_position + 1),
                p.team_jobs,
                p.job.priority
            ));
        }
    }
    s.push_str(&format!(
        "Jobs ahead of it ask for {} GPUs in total; it waits for those and for {} free GPUs.\n",
        p.gpus_ahead, p.job.gpus
    ));
    s
}

/// Base of the Slurm site factor: `site_factor = SITE_FACTOR_BASE - rank`, so
/// the first job has the highest priority (with `PriorityType=
/// priority/multifactor` and all other weights 0, the site factor is the
/// priority). A constant base means appending jobs at the end of the queue
/// changes no other job's factor.
pub const SITE_FACTOR_BASE: u32 = 100_000_000;

/// The site factor of every job in an order.
pub fn site_factors(order: &[Placed]) -> Vec<(JobId, u32)> {
    order
        .iter()
        .map(|p| {
            let rank = u32::try_from(p.rank)
                .unwrap_or(SITE_FACTOR_BASE - 1)
                .min(SITE_FACTOR_BASE - 1);
            (p.job.job, SITE_FACTOR_BASE - rank)
        })
        .collect()
}

/// Lowest site factor of the sparse keys ([`sparse_site_factors`]).
pub const SITE_KEY_MIN: u32 = 1_000_000;
/// Highest site factor of the sparse keys: below Slurm's limit for a site
/// factor (`i32::MAX - 2`) with room for nice values.
pub const SITE_KEY_MAX: u32 = 2_000_000_000;
/// Spacing of the keys of a fresh queue and of jobs added at either end.
pub const SITE_KEY_STRIDE: u32 = 1 << 16;
/// When a gap holds no more keys, the renumbered window grows until its keys
/// are at least this far apart.
pub const SITE_KEY_MIN_SPACING: i64 = 1 << 10;

/// Sparse site factors: strictly decreasing along `order` (the first job has
/// the highest), in `[SITE_KEY_MIN, SITE_KEY_MAX]`, and reusing `previous`
/// (what Slurm holds) wherever that keeps them decreasing, so that a change
/// of the order changes the keys of few jobs, not of every job behind it
/// (dense ranks [`site_factors`] renumber the whole tail on one insertion).
///
/// The jobs that keep their key are a longest subsequence of the order whose
/// previous keys already decrease; every other job (new, or moved) gets a
/// key in the gap between its kept neighbours: spread evenly in the gap, or
/// [`SITE_KEY_STRIDE`] apart at either end of the queue. Only when a gap
/// has fewer free keys than jobs to place does the window around it grow
/// (doubling, up to the next kept job) until its keys can be at least
/// [`SITE_KEY_MIN_SPACING`] apart, and that window is renumbered.
///
/// Common cases (tested in `sparse_keys_*`):
/// - the same order again, or jobs leaving: no key changes;
/// - one job added anywhere: only its key is new; one job moved (priority
///   or nice change): one key changes (its own, or that of the neighbour
///   it swapped with); both while the gap has a free key (a fresh
///   queue of up to 30,000 jobs leaves 16 insertions at any one place);
/// - a team's block of jobs moving past other teams (its ratio crossed
///   theirs): at most the smaller side changes (the moved block, or the
///   jobs it jumped over);
/// - the first cycle after a restart (`previous` empty): every job.
///
/// More than `SITE_KEY_MAX - SITE_KEY_MIN` jobs cannot have distinct keys;
/// past that the last keys repeat [`SITE_KEY_MIN`] (never reached: Slurm's
/// `MaxJobCount` is far smaller).
pub fn sparse_site_factors(previous: &HashMap<JobId, u32>, order: &[Placed]) -> Vec<(JobId, u32)> {
    sparse_site_factors_spaced(previous, order, 1)
}

/// [`sparse_site_factors`] with consecutive keys at least `spacing` apart
/// (a previous key is kept only where that holds). Slurm adds the other
/// multifactor terms to the site factor; each lies in `[0, weight]`, so
/// with `spacing` above the sum of those weights (the *margin*, see
/// `compass-budgetd`'s cycle) no other factor can move a job past another:
/// Slurm's priority order is the keys' order whatever the age, job size or
/// QOS terms are. The lowest key is at least `spacing` as well, so a job
/// Slurm holds no key for sorts below every keyed one. Past
/// `(SITE_KEY_MAX - SITE_KEY_MIN) / spacing` jobs the keys no longer fit
/// and the tail repeats the lowest key.
pub fn sparse_site_factors_spaced(
    previous: &HashMap<JobId, u32>,
    order: &[Placed],
    spacing: u32,
) -> Vec<(JobId, u32)> {
    let prev: Vec<Option<u32>> = order
        .iter()
        .map(|p| previous.get(&p.job.job).copied())
        .collect();
    order
        .iter()
        .zip(sparse_keys_spaced(&prev, spacing))
        .map(|(p, k)| (p.job.job, k))
        .collect()
}

/// The keys of [`sparse_site_factors`] for a queue whose `i`-th job held
/// `prev[i]` (`None`: new, or unknown).
pub fn sparse_keys(prev: &[Option<u32>]) -> Vec<u32> {
    sparse_keys_spaced(prev, 1)
}

/// [`sparse_keys`] with consecutive keys at least `spacing` apart (see
/// [`sparse_site_factors_spaced`]).
pub fn sparse_keys_spaced(prev: &[Option<u32>], spacing: u32) -> Vec<u32> {
    let s = i64::from(spacing.max(1));
    // Keys of a fresh queue and of jobs added at either end: STRIDE
    // spacings apart, so a gap takes 16 insertions at any spacing.
    let stride = i64::from(SITE_KEY_STRIDE).saturating_mul(s);
    let n = prev.len();
    // The lowest key is at least the spacing too: a job Slurm has no key
    // for yet (priority: the other terms only, below the spacing) never
    // passes a keyed job.
    let (lo_key, hi_key) = (i64::from(SITE_KEY_MIN).max(s), i64::from(SITE_KEY_MAX));
    let prev: Vec<Option<i64>> = prev
        .iter()
        .map(|k| k.map(i64::from).filter(|k| (lo_key..=hi_key).contains(k)))
        .collect();
    // Keep a longest subsequence of the known keys decreasing by at least
    // `s` at each step (patience sorting: `tails[l]` ends the chain of
    // length l + 1 with the highest last key).
    let known: Vec<usize> = (0..n).filter(|&i| prev[i].is_some()).collect();
    let key = |p: usize| prev[known[p]].unwrap_or(0);
    let mut tails: Vec<usize> = Vec::new();
    let mut parent: Vec<Option<usize>> = vec![None; known.len()];
    for (p, up) in parent.iter_mut().enumerate() {
        let v = key(p);
        let at = tails.partition_point(|&t| key(t) >= v + s);
        *up = at.checked_sub(1).map(|a| tails[a]);
        if at == tails.len() {
            tails.push(p);
        } else if v > key(tails[at]) {
            tails[at] = p;
        }
    }
    let mut kept = vec![false; n];
    let mut cur = tails.last().copied();
    while let Some(p) = cur {
        kept[known[p]] = true;
        cur = parent[p];
    }
    let mut keys: Vec<i64> = (0..n)
        .map(|i| if kept[i] { prev[i].unwrap_or(0) } else { 0 })
        .collect();
    let next_kept = |from: usize| (from..n).find(|&j| kept[j]).unwrap_or(n);
    let mut i = 0;
    while i < n {
        if kept[i] {
            i += 1;
            continue;
        }
        // Window [a, b): a - 1 is final (kept or already placed), b is kept.
        let (mut a, mut b) = (i, next_kept(i));
        let mut min_spacing = s;
        loop {
            let hi = a.checked_sub(1).map(|x| keys[x]);
            let lo = (b < n).then(|| keys[b]);
            let whole = a == 0 && b == n;
            let spacing = if whole { s } else { min_spacing };
            if let Some(k) = fill_gap(lo, hi, b - a, spacing, stride, lo_key) {
                keys[a..b].copy_from_slice(&k);
                break;
            }
            if whole {
                // More jobs than keys: dense from the top, saturating.
                for (r, k) in keys.iter_mut().enumerate() {
                    *k = (hi_key - (r as i64).saturating_mul(s)).max(lo_key);
                }
                break;
            }
            let grow = (b - a).max(1);
            a = a.saturating_sub(grow);
            b = next_kept((b + grow).min(n));
            min_spacing = SITE_KEY_MIN_SPACING.max(s);
        }
        i = b;
    }
    keys.into_iter().map(|k| k as u32).collect()
}

/// `len` keys, strictly decreasing, strictly between `lo` and `hi` (`None`:
/// the end of the key range, `floor` ..= [`SITE_KEY_MAX`]), at least
/// `min_spacing` apart (and from `lo` and `hi`), at most `stride` apart
/// where a side is open; `None` if they do not fit.
fn fill_gap(
    lo: Option<i64>,
    hi: Option<i64>,
    len: usize,
    min_spacing: i64,
    stride: i64,
    floor: i64,
) -> Option<Vec<i64>> {
    let top = hi.unwrap_or(i64::from(SITE_KEY_MAX) + 1);
    let bottom = lo.unwrap_or(floor - 1);
    let len_i = i64::try_from(len).ok()?;
    let even = (top - bottom) / (len_i + 1);
    if even < min_spacing.max(1) {
        return None;
    }
    let stride = even.min(stride.max(min_spacing));
    let first = match (lo, hi) {
        (Some(_), Some(_)) => top - even,
        (None, Some(_)) => top - stride,
        (Some(_), None) => bottom + stride * len_i,
        // A fresh queue: centred in the range.
        (None, None) => bottom + (top - bottom - stride * (len_i - 1)) / 2 + stride * (len_i - 1),
    };
    let step = if lo.is_some() && hi.is_some() {
        even
    } else {
        stride
    };
    Some((0..len_i).map(|k| first - step * k).collect())
}

/// Only the factors that differ from what was pushed last time.
pub fn changed_factors(previous: &HashMap<JobId, u32>, now: &[(JobId, u32)]) -> Vec<(JobId, u32)> {
    now.iter()
        .filter(|(j, f)| previous.get(j) != Some(f))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::ledger::Interval;
    use super::super::tree::NodeSpec;
    use super::*;
    use proptest::prelude::*;

    fn spec(name: &str, parent: Option<&str>, share: f64, account: Option<&str>) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            share,
            managers: vec![],
            account: account.map(Into::into),
        }
    }

    fn job(id: u64, acct: &str, min_rt: u64, prio: i64, submit: i64) -> PendingJob {
        PendingJob {
            job: JobId(id),
            account: acct.into(),
            gpus: 1,
            min_runtime_s: min_rt,
            priority: prio,
            submit,
            tier: 0,
            qos_priority: 0,
        }
    }

    fn two_teams() -> OrgTree {
        OrgTree::build(&[
            spec("org", None, 1.0, None),
            spec("a", Some("org"), 0.7, Some("acct-a")),
            spec("b", Some("org"), 0.3, Some("acct-b")),
        ])
        .unwrap()
    }

    #[test]
    fn ratio_is_charged_over_share_capacity_window() {
        let t = two_teams();
        let mut l = Ledger::new();
        // 10 GPUs, window 1000 s. a used 7000 GPU-s of 7000 budget; b 1500 of 3000.
        l.ingest(Interval {
            job: JobId(1),
            account: "acct-a".into(),
            gpus: 7,
            start: 0,
            end: Some(1000),
            kind: Kind::Allocated,
            weight: 1.0,
        })
        .unwrap();
        l.ingest(Interval {
            job: JobId(2),
            account: "acct-b".into(),
            gpus: 3,
            start: 500,
            end: None,
            kind: Kind::Allocated,
            weight: 1.0,
        })
        .unwrap();
        l.ingest(Interval {
            job: JobId(3),
            account: "acct-b".into(),
            gpus: 3,
            start: 0,
            end: Some(1000),
            kind: Kind::Unallocated,
            weight: 1.0,
        })
        .unwrap();
        let s = stats_at(&t, &l, 1000, 1000, 10.0);
        let a = t.find("a").unwrap();
        let b = t.find("b").unwrap();
        assert!((s[a].ratio - 1.0).abs() < 1e-12);
        assert!((s[b].ratio - 0.5).abs() < 1e-12);
        assert_eq!(s[b].usage.free_gpu_s, 3000.0);
        assert!((s[t.root()].ratio - 0.85).abs() < 1e-12);
        let by_account = account_ratios(&t, &s);
        assert_eq!(by_account.len(), 2);
        assert!((by_account["acct-b"] - 0.5).abs() < 1e-12);
        assert!((crate::preempt::Ratios::ratio(&by_account, "acct-a") - 1.0).abs() < 1e-12);
        // b is under-served: its job goes first even with lower priority.
        let jobs = vec![
            job(10, "acct-a", 60, 100, 0),
            job(11, "acct-b", 60, -100, 5),
        ];
        let o = order_queue(&t, &s, &jobs);
        assert_eq!(o[0].job.job, JobId(11));
        assert_eq!(o[0].path[0].node, "b");
        let why = explain(&o[1], o.len());
        assert!(why.contains("2nd of 2"), "{why}");
        assert!(why.contains("ratio 1.000"), "{why}");
    }

    #[test]
    fn higher_partition_tiers_go_first_and_fair_share_holds_within_a_tier() {
        let t = two_teams();
        let mut l = Ledger::new();
        // acct-a is over-served, acct-b is not: b's jobs go first in a tier.
        l.ingest(Interval {
            job: JobId(99),
            account: "acct-a".into(),
            gpus: 8,
            start: 0,
            end: Some(100),
            kind: Kind::Allocated,
            weight: 1.0,
        })
        .unwrap();
        let s = stats_at(&t, &l, 100, 100, 10.0);
        let tiered = |id, acct: &str, min_rt, tier| PendingJob {
            tier,
            ..job(id, acct, min_rt, 0, id as i64)
        };
        let jobs = vec![
            tiered(1, "acct-b", 60, 0),
            tiered(2, "acct-a", 60, 10),
            tiered(3, "acct-a", 60, 0),
            tiered(4, "acct-b", 60, 10),
            tiered(5, "acct-b", 0, 10),
            tiered(6, "nobody", 60, 20),
        ];
        let o = order_queue(&t, &s, &jobs);
        let ids: Vec<u64> = o.iter().map(|p| p.job.job.0).collect();
        // Tier 20 (even unbudgeted), then tier 10 (b before a, unallocated
        // last), then tier 0 (b before a).
        assert_eq!(ids, vec![6, 4, 2, 5, 1, 3]);
        let why = explain(&o[1], o.len());
        assert!(why.contains("PriorityTier 10"), "{why}");
        assert!(!explain(&o[4], o.len()).contains("PriorityTier"));
    }

    #[test]
    fn higher_qos_priorities_go_first_within_a_tier_and_fair_share_within_a_band() {
        let t = two_teams();
        let mut l = Ledger::new();
        // acct-a is over-served, acct-b is not.
        l.ingest(Interval {
            job: JobId(99),
            account: "acct-a".into(),
            gpus: 8,
            start: 0,
            end: Some(100),
            kind: Kind::Allocated,
            weight: 1.0,
        })
        .unwrap();
        let s = stats_at(&t, &l, 100, 100, 10.0);
        let j = |id, acct: &str, min_rt, tier, qos_priority| PendingJob {
            tier,
            qos_priority,
            ..job(id, acct, min_rt, 0, id as i64)
        };
        let jobs = vec![
            j(1, "acct-b", 60, 0, 0),
            j(2, "acct-a", 60, 0, 100),
            j(3, "acct-a", 0, 0, 100),
            j(4, "acct-b", 60, 0, 100),
            j(5, "acct-a", 60, 1, 0),
            j(6, "acct-b", 60, 0, 10),
            j(7, "acct-a", 60, 0, 10),
        ];
        let o = order_queue(&t, &s, &jobs);
        let ids: Vec<u64> = o.iter().map(|p| p.job.job.0).collect();
        // Tier 1 first, whatever its QOS; then in tier 0 the QOS-100 band
        // (b before a, unallocated last), the QOS-10 band (b before a),
        // and QOS 0.
        assert_eq!(ids, vec![5, 4, 2, 3, 6, 7, 1]);
        let why = explain(&o[2], o.len());
        assert!(why.contains("QOS has priority 100"), "{why}");
        assert!(!explain(&o[0], o.len()).contains("QOS"));
    }

    #[test]
    fn spaced_keys_keep_the_spacing_and_reuse_what_they_can() {
        let spacing = 50_000u32;
        let ok = |k: &[u32]| k.windows(2).all(|w| w[0] >= w[1] + spacing);
        let fresh = sparse_keys_spaced(&vec![None; 1_000], spacing);
        assert!(ok(&fresh));
        // Keys pushed with spacing 1 (before the weights were raised) that
        // are too close are renumbered; far enough ones are kept.
        let close: Vec<Option<u32>> = (0..10).map(|i| Some(2_000_000 - i * 10)).collect();
        let k = sparse_keys_spaced(&close, spacing);
        assert!(ok(&k), "{k:?}");
        assert_eq!(k.iter().filter(|x| close.contains(&Some(**x))).count(), 1);
        // The same queue again changes nothing; an insertion only its key.
        let prev: Vec<Option<u32>> = fresh.iter().copied().map(Some).collect();
        assert_eq!(sparse_keys_spaced(&prev, spacing), fresh);
        let mut with_new = prev.clone();
        with_new.insert(500, None);
        let k = sparse_keys_spaced(&with_new, spacing);
        assert!(ok(&k));
        let changed = with_new
            .iter()
            .zip(&k)
            .filter(|(p, n)| p.is_some_and(|p| p != **n))
            .count();
        assert_eq!(changed, 0);
        // More jobs than fit at this spacing: still decreasing, floored at
        // the spacing (above what an unkeyed job's priority can reach).
        let huge = sparse_keys_spaced(&vec![None; 100], 100_000_000);
        assert!(huge.windows(2).all(|w| w[0] >= w[1]));
        assert_eq!(*huge.last().unwrap(), 100_000_000);
        let wide = sparse_keys_spaced(&[None; 3], 4_000_000);
        assert!(wide.iter().all(|k| *k >= 4_000_000), "{wide:?}");
    }

    #[test]
    fn unallocated_after_allocated_unknown_after_known() {
        let t = two_teams();
        let s = node_stats(&t, &HashMap::new(), 8.0, 100);
        let jobs = vec![
            job(1, "acct-a", 0, 1000, 0),
            job(2, "nobody", 60, 0, 0),
            job(3, "acct-b", 60, 0, 0),
            job(4, "nobody", 0, 0, 0),
            job(5, "acct-a", 60, 0, 9),
        ];
        let o = order_queue(&t, &s, &jobs);
        let ids: Vec<u64> = o.iter().map(|p| p.job.job.0).collect();
        // Equal ratios (0): a before b by name. Job 2 asks a min runtime,
        // but its account is outside the tree: unallocated time, as
        // enforcement and the ledger read it, so after every budgeted
        // team's unallocated job (it used to sort among allocated jobs,
        // ahead of job 1).
        assert_eq!(ids, vec![5, 3, 1, 2, 4]);
        assert_eq!(o[3].kind, Kind::Unallocated);
        let why = explain(&o[3], 5);
        assert!(why.contains("not in the budget tree"), "{why}");
        assert!(
            why.contains("no budget in the tree: its time is unallocated"),
            "{why}"
        );
        assert!(!why.contains("charged to its budget"), "{why}");
        assert_eq!(o[4].gpus_ahead, 4);
    }

    #[test]
    fn priority_only_reorders_within_team() {
        let t = two_teams();
        let s = node_stats(&t, &HashMap::new(), 8.0, 100);
        let jobs = vec![
            job(1, "acct-a", 60, 0, 0),
            job(2, "acct-b", 60, 999, 0),
            job(3, "acct-a", 60, 5, 1),
        ];
        let o = order_queue(&t, &s, &jobs);
        let ids: Vec<u64> = o.iter().map(|p| p.job.job.0).collect();
        assert_eq!(ids, vec![3, 1, 2]);
        assert_eq!((o[1].team_position, o[1].team_jobs), (1, 2));
    }

    /// Two teams of 4 of 8 GPUs; `acct-a` has the lower lookback ratio.
    fn a_ahead_by_ratio() -> (OrgTree, Vec<NodeStats>) {
        let t = OrgTree::build(&[
            spec("org", None, 1.0, None),
            spec("a", Some("org"), 0.5, Some("acct-a")),
            spec("b", Some("org"), 0.5, Some("acct-b")),
        ])
        .unwrap();
        let usage: HashMap<String, Usage> = [("acct-a", 100.0), ("acct-b", 300.0)]
            .into_iter()
            .map(|(a, c)| {
                (
                    a.to_string(),
                    Usage {
                        charged_gpu_s: c,
                        free_gpu_s: 0.0,
                    },
                )
            })
            .collect();
        let s = node_stats(&t, &usage, 8.0, 100);
        assert!(s[1].ratio < s[2].ratio);
        (t, s)
    }

    fn running(rows: &[(&str, f64, f64)]) -> HashMap<String, RunningGpus> {
        rows.iter()
            .map(|(a, alloc, total)| {
                (
                    a.to_string(),
                    RunningGpus {
                        allocated: *alloc,
                        total: *total,
                    },
                )
            })
            .collect()
    }

    fn ids(o: &[Placed]) -> Vec<u64> {
        o.iter().map(|p| p.job.job.0).collect()
    }

    #[test]
    fn under_allocation_first_puts_a_team_under_its_allocation_now_ahead() {
        let (t, s) = a_ahead_by_ratio();
        // a runs 6 allocated GPUs (allocation 4), b none.
        let run = running(&[("acct-a", 6.0, 6.0)]);
        let now = QueueState {
            capacity_gpus: 8.0,
            running: &run,
        };
        let jobs = vec![job(1, "acct-a", 60, 0, 0), job(2, "acct-b", 60, 0, 0)];
        let by_ratio = order_queue_by(&t, &s, &now, QueueOrder::RATIO, &jobs);
        assert_eq!(ids(&by_ratio), vec![1, 2]);
        assert_eq!(by_ratio, order_queue(&t, &s, &jobs));
        let uaf = order_queue_by(&t, &s, &now, QueueOrder::default(), &jobs);
        assert_eq!(ids(&uaf), vec![2, 1]);
        assert_eq!(uaf[0].under_allocation, Some(true));
        assert_eq!(uaf[1].under_allocation, Some(false));
        assert!(explain(&uaf[1], 2).contains("goes after every team under its allocation"));
        // Exactly at the allocation is not under: a at 4 of 4 stays behind b.
        let run = running(&[("acct-a", 4.0, 4.0), ("acct-b", 3.0, 3.0)]);
        let now = QueueState {
            capacity_gpus: 8.0,
            running: &run,
        };
        let o = order_queue_by(&t, &s, &now, QueueOrder::default(), &jobs);
        assert_eq!(ids(&o), vec![2, 1]);
        // Both under: ratio order again.
        let run = running(&[("acct-a", 3.0, 3.0)]);
        let now = QueueState {
            capacity_gpus: 8.0,
            running: &run,
        };
        let o = order_queue_by(&t, &s, &now, QueueOrder::default(), &jobs);
        assert_eq!(ids(&o), vec![1, 2]);
    }

    /// The 2-team lab of `budget-service/tests/lab_slurm.rs`, section 4: a
    /// 70/30 budget of 16 GPUs (allocations 11.2 and 4.8 GPUs), 2-GPU
    /// allocated jobs. The team whose head goes first when `team-big` runs
    /// `b` jobs and `team-small` `s`, with `team-big` behind (`true`) or
    /// ahead (`false`) of its share on the lookback ratio.
    fn lab_first(cfg: QueueOrder, b: u32, s: u32, big_behind: bool) -> &'static str {
        let t = OrgTree::build(&[
            spec("org", None, 1.0, None),
            spec("big", Some("org"), 0.7, Some("team-big")),
            spec("small", Some("org"), 0.3, Some("team-small")),
        ])
        .unwrap();
        // Charged GPU-s: 60/40 (big behind its 70%) or 80/20 (ahead).
        let (cb, cs) = if big_behind {
            (600.0, 400.0)
        } else {
            (800.0, 200.0)
        };
        let usage: HashMap<String, Usage> = [("team-big", cb), ("team-small", cs)]
            .into_iter()
            .map(|(a, c)| {
                let u = Usage {
                    charged_gpu_s: c,
                    free_gpu_s: 0.0,
                };
                (a.to_string(), u)
            })
            .collect();
        let stats = node_stats(&t, &usage, 16.0, 3600);
        assert_eq!(stats[1].ratio < stats[2].ratio, big_behind);
        let (gb, gs) = (f64::from(2 * b), f64::from(2 * s));
        let run = running(&[("team-big", gb, gb), ("team-small", gs, gs)]);
        let now = QueueState {
            capacity_gpus: 16.0,
            running: &run,
        };
        let mut jobs = vec![
            job(1, "team-big", 3600, 0, 0),
            job(2, "team-small", 3600, 0, 0),
        ];
        for j in &mut jobs {
            j.gpus = 2;
        }
        let o = order_queue_by(&t, &stats, &now, cfg, &jobs);
        if o[0].job.account == "team-big" {
            "big"
        } else {
            "small"
        }
    }

    /// The long-run share of `team-big` in the lab when the order is
    /// computed on a full cluster (8 jobs) and every job that ends hands its
    /// 2 GPUs to the team that goes first (`big_first(b)`, `b` big jobs
    /// running), as Slurm does between two cycles of the service: a
    /// birth-death chain over `b` (each running job ends at the same rate).
    /// It settles on the two states `k`, `k + 1` where the first team
    /// changes from big to small: `b` rises at rate `8 - k` from `k` and
    /// falls at rate `k + 1` from `k + 1`.
    fn lab_stale_share(big_first: impl Fn(u32) -> bool) -> f64 {
        let k = (0..8)
            .find(|&b| big_first(b) && !big_first(b + 1))
            .expect("the first team changes from big to small");
        assert!((0..=k).all(&big_first) && (k + 1..=8).all(|b| !big_first(b)));
        let (up, down) = (f64::from(8 - k), f64::from(k + 1));
        let p_k = down / (up + down);
        (p_k * f64::from(2 * k) + (1.0 - p_k) * f64::from(2 * (k + 1))) / 16.0
    }

    /// Issue 15, why the default order delivered 0.60-0.72 to the 70% team
    /// in the lab: the service orders the queue once a cycle, on a full
    /// cluster, and every GPU freed before the next cycle goes to the first
    /// team. On a full cluster one team is always under its allocation and
    /// the other over (big runs <= 10 GPUs and small >= 6, or big >= 12 and
    /// small <= 4), so the lookback never decides: big goes first at <= 5
    /// jobs, small at >= 6, whatever the ratios. Big stays at 5 jobs until
    /// one of small's 3 ends, at 6 until one of its own 6 ends: it spends
    /// two thirds of the time at 10 GPUs, one third at 12, and gets 2/3 of
    /// the cluster, not 0.7, with no feedback to catch up. (When one job
    /// has ended and the order is computed then, at 14 GPUs, as the
    /// simulator does, both teams are under at 5 + 2 and the lookback
    /// decides there.)
    #[test]
    fn lab_two_teams_default_order_at_a_full_cluster() {
        let d = QueueOrder::default();
        for big_behind in [true, false] {
            for b in 0..=8 {
                let want = if b <= 5 { "big" } else { "small" };
                assert_eq!(lab_first(d, b, 8 - b, big_behind), want, "{b} big jobs");
            }
            let share = lab_stale_share(|b| lab_first(d, b, 8 - b, big_behind) == "big");
            assert!((share - 2.0 / 3.0).abs() < 1e-9, "{share}");
        }
        // At 14 GPUs (one job ended): the lookback decides at 5 + 2 only.
        for big_behind in [true, false] {
            let want = if big_behind { "big" } else { "small" };
            assert_eq!(lab_first(d, 5, 2, big_behind), want);
            assert_eq!(lab_first(d, 4, 3, big_behind), "big");
            assert_eq!(lab_first(d, 6, 1, big_behind), "small");
        }
        // The ratio order: the lookback decides at every level.
        for b in 0..=8 {
            assert_eq!(lab_first(QueueOrder::RATIO, b, 8 - b, true), "big");
            assert_eq!(lab_first(QueueOrder::RATIO, b, 8 - b, false), "small");
        }
    }

    #[test]
    fn free_order_under_total_first_counts_free_gpus_too() {
        let (t, s) = a_ahead_by_ratio();
        // a: no allocated GPUs but 6 free ones; b: 2 allocated.
        let run = running(&[("acct-a", 0.0, 6.0), ("acct-b", 2.0, 2.0)]);
        let now = QueueState {
            capacity_gpus: 8.0,
            running: &run,
        };
        let jobs = vec![
            job(1, "acct-a", 0, 0, 0),
            job(2, "acct-b", 0, 0, 0),
            job(3, "acct-a", 60, 0, 0),
            job(4, "acct-b", 60, 0, 0),
        ];
        let same = QueueOrder {
            team_order: TeamOrder::UnderAllocationFirst,
            free_order: FreeOrder::SameAsAllocated,
        };
        assert_eq!(
            ids(&order_queue_by(&t, &s, &now, same, &jobs)),
            vec![3, 4, 1, 2]
        );
        let total = QueueOrder {
            free_order: FreeOrder::UnderTotalFirst,
            ..same
        };
        let o = order_queue_by(&t, &s, &now, total, &jobs);
        assert_eq!(ids(&o), vec![3, 4, 2, 1]);
        assert_eq!(o[3].under_allocation, Some(false));
    }

    #[test]
    fn team_orders_partition_keeps_the_base_order() {
        let base = [0usize, 1, 2, 3];
        let now = |t: usize| TeamNow {
            allocation_gpus: 2.0,
            running_allocated_gpus: [3.0, 0.0, 2.0, 1.0][t],
            running_total_gpus: [3.0, 4.0, 2.0, 1.0][t],
        };
        let o = team_orders(&base, now, QueueOrder::RATIO);
        assert_eq!(
            (o.allocated.clone(), o.free),
            (base.to_vec(), base.to_vec())
        );
        let cfg = QueueOrder {
            team_order: TeamOrder::UnderAllocationFirst,
            free_order: FreeOrder::UnderTotalFirst,
        };
        let o = team_orders(&base, now, cfg);
        assert_eq!(o.allocated, vec![1, 3, 0, 2]);
        assert_eq!(o.free, vec![3, 1, 0, 2]);
        let fair_tree = QueueOrder {
            team_order: TeamOrder::FairTree,
            ..cfg
        };
        assert_eq!(team_orders(&base, now, fair_tree).allocated, base.to_vec());
    }

    #[test]
    fn site_factors_push_only_changes() {
        let t = two_teams();
        let s = node_stats(&t, &HashMap::new(), 8.0, 100);
        let o1 = order_queue(
            &t,
            &s,
            &[job(1, "acct-a", 60, 0, 0), job(2, "acct-a", 60, 0, 1)],
        );
        let f1 = site_factors(&o1);
        assert_eq!(
            f1,
            vec![
                (JobId(1), SITE_FACTOR_BASE),
                (JobId(2), SITE_FACTOR_BASE - 1)
            ]
        );
        let prev: HashMap<JobId, u32> = f1.into_iter().collect();
        let o2 = order_queue(
            &t,
            &s,
            &[
                job(1, "acct-a", 60, 0, 0),
                job(2, "acct-a", 60, 0, 1),
                job(3, "acct-a", 60, 0, 2),
            ],
        );
        assert_eq!(
            changed_factors(&prev, &site_factors(&o2)),
            vec![(JobId(3), SITE_FACTOR_BASE - 2)]
        );
    }

    /// Keys of `ids` given the previous keys by id; checks they follow the
    /// order and stay in range; returns them with the ids of the jobs
    /// present before whose key changed.
    fn step_keys(prev: &HashMap<u64, u32>, ids: &[u64]) -> (HashMap<u64, u32>, Vec<u64>) {
        let keys = sparse_keys(&ids.iter().map(|i| prev.get(i).copied()).collect::<Vec<_>>());
        assert_eq!(keys.len(), ids.len());
        for w in keys.windows(2) {
            assert!(w[0] > w[1], "keys do not follow the order: {keys:?}");
        }
        assert!(keys
            .iter()
            .all(|k| (SITE_KEY_MIN..=SITE_KEY_MAX).contains(k)));
        let now: HashMap<u64, u32> = ids.iter().copied().zip(keys).collect();
        let changed = ids
            .iter()
            .filter(|i| prev.get(i).is_some_and(|k| now[i] != *k))
            .copied()
            .collect();
        (now, changed)
    }

    /// Free keys between the jobs at `pos - 1` and `pos` of `ids`.
    fn room(prev: &HashMap<u64, u32>, ids: &[u64], pos: usize) -> i64 {
        let hi = pos
            .checked_sub(1)
            .map_or(i64::from(SITE_KEY_MAX) + 1, |p| i64::from(prev[&ids[p]]));
        let lo = ids
            .get(pos)
            .map_or(i64::from(SITE_KEY_MIN) - 1, |j| i64::from(prev[j]));
        hi - lo - 1
    }

    #[test]
    fn sparse_keys_fresh_queue_takes_sixteen_insertions_at_one_place() {
        for n in [1usize, 2, 10, 10_000, 30_000] {
            let mut ids: Vec<u64> = (0..n as u64).collect();
            let (mut keys, changed) = step_keys(&HashMap::new(), &ids);
            assert!(changed.is_empty());
            let mut next = n as u64;
            // At the head, in the middle (right after job n/2, the same
            // gap each time), at the tail.
            for place in [0usize, 1 + n / 2, usize::MAX] {
                for _ in 0..16 {
                    let at = place.min(ids.len());
                    ids.insert(at, next);
                    next += 1;
                    let (k, changed) = step_keys(&keys, &ids);
                    assert_eq!(changed, Vec::<u64>::new(), "n {n}, insertion at {at}");
                    keys = k;
                }
            }
            // Removals change nothing.
            ids.retain(|i| i % 3 != 0);
            let (k, changed) = step_keys(&keys, &ids);
            assert!(changed.is_empty());
            assert!(ids.iter().all(|i| k[i] == keys[i]));
        }
    }

    #[test]
    fn sparse_keys_many_insertions_at_one_place_stay_cheap() {
        // 1,000 jobs inserted one by one right behind the same job of a
        // 2,000-job queue: dense ranks would change 1,000 or more keys each
        // time (over a million updates); the sparse keys renumber small
        // windows now and then (measured: 2,302 changes in all).
        let mut keys = sparse_keys(&vec![None; 2_000]);
        let mut total = 0usize;
        for _ in 0..1_000 {
            let mut prev: Vec<Option<u32>> = keys.iter().copied().map(Some).collect();
            prev.insert(1_001, None);
            let now = sparse_keys(&prev);
            assert!(now.windows(2).all(|w| w[0] > w[1]));
            total += prev
                .iter()
                .zip(&now)
                .filter(|(p, n)| p.is_some_and(|p| p != **n))
                .count();
            keys = now;
        }
        assert!(
            total <= 1_000 * 16,
            "{total} key changes for 1,000 insertions"
        );
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(usize),
        Remove(usize),
        Move(usize, usize),
        Block(usize, usize, usize),
    }

    fn arb_ops() -> impl Strategy<Value = (usize, Vec<Op>)> {
        let op = prop_oneof![
            (0usize..1000).prop_map(Op::Insert),
            (0usize..1000).prop_map(Op::Remove),
            (0usize..1000, 0usize..1000).prop_map(|(a, b)| Op::Move(a, b)),
            (0usize..1000, 1usize..40, 0usize..1000).prop_map(|(a, m, b)| Op::Block(a, m, b)),
        ];
        (0usize..300, proptest::collection::vec(op, 1..60))
    }

    proptest! {
        /// The keys always follow the order; a job added, removed or moved
        /// changes no other job's key while its gap has a free key; a block
        /// of `m` jobs moved (a team passing others) changes at most
        /// `min(m, n - m)` keys, from a fresh queue.
        #[test]
        fn sparse_keys_follow_the_order_and_change_little((n0, ops) in arb_ops()) {
            let mut ids: Vec<u64> = (0..n0 as u64).collect();
            let (mut keys, _) = step_keys(&HashMap::new(), &ids);
            let mut next = 1_000_000u64;
            for op in ops {
                let n = ids.len();
                match op {
                    Op::Insert(at) => {
                        let at = at % (n + 1);
                        let free = room(&keys, &ids, at);
                        ids.insert(at, next);
                        next += 1;
                        let (k, changed) = step_keys(&keys, &ids);
                        if free >= 1 {
                            prop_assert!(changed.is_empty(), "insert at {} with {} free keys changed {:?}", at, free, changed);
                        }
                        keys = k;
                    }
                    Op::Remove(at) if n > 0 => {
                        ids.remove(at % n);
                        let (k, changed) = step_keys(&keys, &ids);
                        prop_assert!(changed.is_empty());
                        keys = k;
                    }
                    Op::Move(from, to) if n > 1 => {
                        let j = ids.remove(from % n);
                        let to = to % n;
                        let free = room(&keys, &ids, to);
                        ids.insert(to, j);
                        let (k, changed) = step_keys(&keys, &ids);
                        // One key changes: the moved job's, or (a swap of
                        // neighbours) the other one's.
                        if free >= 1 {
                            prop_assert!(changed.len() <= 1, "move of {} changed {:?}", j, changed);
                        }
                        keys = k;
                    }
                    Op::Block(from, m, to) if n > 1 => {
                        // From a fresh queue (as after a restart).
                        keys = step_keys(&HashMap::new(), &ids).0;
                        let from = from % n;
                        let m = m.min(n - from);
                        let block: Vec<u64> = ids.drain(from..from + m).collect();
                        let to = to % (ids.len() + 1);
                        for (k, b) in block.iter().enumerate() {
                            ids.insert(to + k, *b);
                        }
                        let (k, changed) = step_keys(&keys, &ids);
                        prop_assert!(changed.len() <= m.min(n - m), "block of {} in {}: {} changed", m, n, changed.len());
                        keys = k;
                    }
                    _ => {}
                }
            }
        }
    }

    proptest! {
        /// With a spacing, the keys of any queue built from any previous
        /// keys are at least that far apart (while they fit: at most
        /// 300 jobs here, far below (max - min) / spacing).
        #[test]
        fn spaced_keys_are_always_spaced(
            prev in proptest::collection::vec(proptest::option::of(SITE_KEY_MIN - 10..SITE_KEY_MAX + 10), 0..300),
            spacing in 1u32..2_000_000,
        ) {
            let k = sparse_keys_spaced(&prev, spacing);
            prop_assert_eq!(k.len(), prev.len());
            for w in k.windows(2) {
                prop_assert!(u64::from(w[0]) >= u64::from(w[1]) + u64::from(spacing), "{:?}", w);
            }
            prop_assert!(k.iter().all(|x| (SITE_KEY_MIN.max(spacing)..=SITE_KEY_MAX).contains(x)));
        }
    }

    #[test]
    fn sparse_site_factors_follow_order_queue() {
        // A new job of the under-served team goes to the head of the queue:
        // only its key is new.
        let t = two_teams();
        let mut usage = HashMap::new();
        usage.insert(
            "acct-a".to_string(),
            Usage {
                charged_gpu_s: 500.0,
                free_gpu_s: 0.0,
            },
        );
        let s = node_stats(&t, &usage, 8.0, 100);
        let mut jobs: Vec<PendingJob> =
            (0..50).map(|i| job(i, "acct-a", 60, 0, i as i64)).collect();
        let o1 = order_queue(&t, &s, &jobs);
        let f1 = sparse_site_factors(&HashMap::new(), &o1);
        let prev: HashMap<JobId, u32> = f1.iter().copied().collect();
        jobs.push(job(99, "acct-b", 60, 0, 100));
        let o2 = order_queue(&t, &s, &jobs);
        assert_eq!(o2[0].job.job, JobId(99));
        let f2 = sparse_site_factors(&prev, &o2);
        assert_eq!(f2.len(), 51);
        assert!(f2.windows(2).all(|w| w[0].1 > w[1].1));
        assert_eq!(changed_factors(&prev, &f2).len(), 1);
        assert_eq!(changed_factors(&prev, &f2)[0].0, JobId(99));
    }

    /// A random 3-level tree: root > `p` programs > 1..4 teams each, with
    /// shares normalised to sum <= 1, plus random usage and jobs.
    fn arb_case() -> impl Strategy<Value = (Vec<NodeSpec>, HashMap<String, Usage>, Vec<PendingJob>)>
    {
        proptest::collection::vec(proptest::collection::vec(1u32..10, 1..4), 1..4).prop_flat_map(
            |programs| {
                let mut specs = vec![spec("root", None, 1.0, None)];
                let mut accounts = Vec::new();
                let ptotal: u32 = programs.iter().map(|t| t.iter().sum::<u32>()).sum();
                for (pi, teams) in programs.iter().enumerate() {
                    let pname = format!("p{pi}");
                    let psum: u32 = teams.iter().sum();
                    specs.push(spec(
                        &pname,
                        Some("root"),
                        f64::from(psum) / f64::from(ptotal),
                        None,
                    ));
                    for (ti, w) in teams.iter().enumerate() {
                        let acct = format!("acct-{pi}-{ti}");
                        specs.push(spec(
                            &format!("t{pi}-{ti}"),
                            Some(&pname),
                            f64::from(*w) / f64::from(psum),
                            Some(&acct),
                        ));
                        accounts.push(acct);
                    }
                }
                let n = accounts.len();
                let usage = proptest::collection::vec(0u32..5000, n);
                let jobs = proptest::collection::vec((0..n + 1, 0u64..3, -3i64..3, 0i64..5), 0..30);
                (Just(specs), Just(accounts), usage, jobs).prop_map(
                    |(specs, accounts, usage, jobs)| {
                        let u: HashMap<String, Usage> = accounts
                            .iter()
                            .zip(usage)
                            .map(|(a, x)| {
                                (
                                    a.clone(),
                                    Usage {
                                        charged_gpu_s: f64::from(x),
                                        free_gpu_s: 0.0,
                                    },
                                )
                            })
                            .collect();
                        let jobs = jobs
                            .into_iter()
                            .enumerate()
                            .map(|(i, (a, mr, prio, submit))| PendingJob {
                                job: JobId(i as u64),
                                account: accounts
                                    .get(a)
                                    .cloned()
                                    .unwrap_or_else(|| "stranger".into()),
                                gpus: 1,
                                min_runtime_s: mr * 60,
                                priority: prio,
                                submit,
                                tier: 0,
                                qos_priority: 0,
                            })
                            .collect();
                        (specs, u, jobs)
                    },
                )
            },
        )
    }

    proptest! {
        #[test]
        fn ordering_invariants((specs, usage, jobs) in arb_case()) {
            let tree = OrgTree::build(&specs).unwrap();
            let stats = node_stats(&tree, &usage, 16.0, 3600);
            let o = order_queue(&tree, &stats, &jobs);
            // A permutation of the input, ranks 0..n.
            let mut ids: Vec<JobId> = o.iter().map(|p| p.job.job).collect();
            ids.sort();
            let mut want: Vec<JobId> = jobs.iter().map(|j| j.job).collect();
            want.sort();
            prop_assert_eq!(ids, want);
            prop_assert!(o.iter().enumerate().all(|(i, p)| p.rank == i));
            // Deterministic: same input, same order; input order does not matter.
            let mut rev = jobs.clone();
            rev.reverse();
            let o2 = order_queue(&tree, &stats, &rev);
            prop_assert_eq!(&o, &o2);
            // Unallocated never precedes allocated.
            for w in o.windows(2) {
                prop_assert!(!(w[0].kind == Kind::Unallocated && w[1].kind == Kind::Allocated));
            }
            // Leaf share = product down the tree.
            for n in tree.nodes() {
                let prod: f64 = specs.iter().find(|s| s.name == n.name).map(|_| {
                    let ix = tree.find(&n.name).unwrap();
                    tree.ancestors(ix).iter().map(|a| tree.node(*a).share).product()
                }).unwrap();
                prop_assert!((n.abs_share - prod).abs() < 1e-12);
            }
            // Siblings A, B with ratio(A) < ratio(B): every budgeted job of A's
            // subtree precedes every job of B's subtree of the same kind.
            for (i, p) in o.iter().enumerate() {
                for q in &o[i + 1..] {
                    if p.kind != q.kind { continue; }
                    let (Some(tp), Some(tq)) = (&p.team, &q.team) else { continue };
                    let ap = tree.ancestors(tree.find(tp).unwrap());
                    let aq = tree.ancestors(tree.find(tq).unwrap());
                    // Find the children of the lowest common ancestor.
                    for x in &ap {
                        if let Some(y) = aq.iter().find(|y| tree.node(**y).parent.is_some() && tree.node(**y).parent == tree.node(*x).parent && *y != x) {
                            prop_assert!(stats[*x].ratio <= stats[*y].ratio,
                                "job {} of {} (ratio {}) went before job {} of {} (ratio {})",
                                p.job.job, tree.node(*x).name, stats[*x].ratio, q.job.job, tree.node(*y).name, stats[*y].ratio);
                        }
                    }
                }
            }
        }
    }
}
