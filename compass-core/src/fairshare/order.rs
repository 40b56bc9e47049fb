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
/// window). A zero budget gives `+inf`.
pub fn ratio(charged_gpu_s: f64, abs_share: f64, capacity_gpus: u32, window_s: i64) -> f64 {
    let budget = abs_share * f64::from(capacity_gpus) * window_s.max(0) as f64;
    if budget > 0.0 {
        charged_gpu_s / budget
    } else {
        f64::INFINITY
    }
}

/// Per-node stats of the whole tree, indexed by [`NodeIx`], from usage per
/// account (accounts not in the tree are ignored here; see
/// [`unbudgeted_usage`]).
pub fn node_stats(
    tree: &OrgTree,
    usage_by_account: &HashMap<String, Usage>,
    capacity_gpus: u32,
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
            let budget = n.abs_share * f64::from(capacity_gpus) * window_s.max(0) as f64;
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
    capacity_gpus: u32,
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
}

/// The queue order: see the module doc. Deterministic: ties between siblings
/// of equal ratio go by name; ties between jobs of equal priority by submit
/// time, then job id. `stats` comes from [`node_stats`] for the same tree.
pub fn order_queue(tree: &OrgTree, stats: &[NodeStats], jobs: &[PendingJob]) -> Vec<Placed> {
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
    struct Keyed<'a> {
        job: &'a PendingJob,
        kind: Kind,
        leaf: Option<NodeIx>,
    }
    let mut keyed: Vec<Keyed> = jobs
        .iter()
        .map(|j| Keyed {
            job: j,
            kind: Kind::from_min_runtime(j.min_runtime_s),
            leaf: tree.leaf_for_account(&j.account).ok(),
        })
        .collect();
    keyed.sort_by(|a, b| {
        let ka = (
            a.kind == Kind::Unallocated,
            a.leaf.is_none(),
            a.leaf.map_or(0, |l| dfs_index[l]),
        );
        let kb = (
            b.kind == Kind::Unallocated,
            b.leaf.is_none(),
            b.leaf.map_or(0, |l| dfs_index[l]),
        );
        ka.cmp(&kb)
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
    match p.kind {
        Kind::Allocated => s.push_str(&format!(
            "It asks for allocated time (min runtime {} s): it is charged to its budget and sorts before all unallocated jobs.\n",
            p.job.min_runtime_s
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
        })
        .unwrap();
        l.ingest(Interval {
            job: JobId(2),
            account: "acct-b".into(),
            gpus: 3,
            start: 500,
            end: None,
            kind: Kind::Allocated,
        })
        .unwrap();
        l.ingest(Interval {
            job: JobId(3),
            account: "acct-b".into(),
            gpus: 3,
            start: 0,
            end: Some(1000),
            kind: Kind::Unallocated,
        })
        .unwrap();
        let s = stats_at(&t, &l, 1000, 1000, 10);
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
    fn unallocated_after_allocated_unknown_after_known() {
        let t = two_teams();
        let s = node_stats(&t, &HashMap::new(), 8, 100);
        let jobs = vec![
            job(1, "acct-a", 0, 1000, 0),
            job(2, "nobody", 60, 0, 0),
            job(3, "acct-b", 60, 0, 0),
            job(4, "nobody", 0, 0, 0),
            job(5, "acct-a", 60, 0, 9),
        ];
        let o = order_queue(&t, &s, &jobs);
        let ids: Vec<u64> = o.iter().map(|p| p.job.job.0).collect();
        // Equal ratios (0): a before b by name.
        assert_eq!(ids, vec![5, 3, 2, 1, 4]);
        assert!(explain(&o[2], 5).contains("not in the budget tree"));
        assert_eq!(o[4].gpus_ahead, 4);
    }

    #[test]
    fn priority_only_reorders_within_team() {
        let t = two_teams();
        let s = node_stats(&t, &HashMap::new(), 8, 100);
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

    #[test]
    fn site_factors_push_only_changes() {
        let t = two_teams();
        let s = node_stats(&t, &HashMap::new(), 8, 100);
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
            let stats = node_stats(&tree, &usage, 16, 3600);
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
