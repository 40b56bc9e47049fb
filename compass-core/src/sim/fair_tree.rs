//! Slurm's Fair Tree fair share, as an anchor for the policy simulator
//! (issue 15): what a site running `PriorityType=priority/multifactor` with
//! `PriorityFlags=FAIR_TREE` (the default since Slurm 19.05) would get on the
//! same budget tree.
//!
//! Follows <https://slurm.schedmd.com/fair_tree.html> and
//! <https://slurm.schedmd.com/priority_multifactor.html>:
//! - **Usage decays** with `PriorityDecayHalfLife` (7 days here): usage
//!   accrued `h` half-lives ago counts `2^-h`. Slurm applies the decay every
//!   `PriorityCalcPeriod` (5 min); we decay continuously (exactly, between
//!   rate changes), which differs by at most one period's decay.
//! - **Level Fairshare** of an account among its siblings is `LF = S / U`,
//!   `S` = its shares over the sum of its siblings' (and its own) shares,
//!   `U` = its subtree's usage over the sum of its siblings' (and its own)
//!   subtree usage. The tree is walked from the root down; at each level the
//!   children are visited in decreasing `LF`, depth first, so every
//!   association under a better account ranks above every association under
//!   a worse one. The leaves (our teams, Slurm's users) get the fair-share
//!   factor `rank / leaves` in visit order.
//! - Not modelled: Slurm merges siblings with exactly equal `LF` into one
//!   group and ranks their children together; we break ties by share
//!   (larger first) then name. `PriorityUsageResetPeriod`, `PriorityMaxAge`
//!   and `TRESBillingWeights` are left at their neutral defaults (GPUs are
//!   the only billed resource).

use crate::fairshare::tree::{NodeIx, OrgTree};

/// `PriorityDecayHalfLife` in Slurm's default configuration: 7 days.
pub const DEFAULT_HALF_LIFE_S: f64 = 7.0 * 86400.0;

/// One account's usage, decayed with a half-life, as a function of time:
/// `value` at `t`, accruing `rate` GPU-seconds per second since.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecayedUsage {
    value: f64,
    t: f64,
    rate: f64,
}

impl DecayedUsage {
    /// Usage at time `t >= self.t` under half-life `half_life_s`:
    /// `u(t) = u0 e^{-k dt} + rate (1 - e^{-k dt}) / k`, `k = ln 2 / half-life`.
    pub fn at(&self, t: f64, half_life_s: f64) -> f64 {
        let dt = (t - self.t).max(0.0);
        let k = std::f64::consts::LN_2 / half_life_s;
        let e = (-k * dt).exp();
        self.value * e + self.rate * (1.0 - e) / k
    }

    /// Changes the accrual rate (GPUs running) by `delta` at time `t`.
    pub fn add_rate(&mut self, t: f64, delta: f64, half_life_s: f64) {
        self.value = self.at(t, half_life_s);
        self.t = t.max(self.t);
        self.rate = (self.rate + delta).max(0.0);
    }
}

/// Fair Tree order of the tree's nodes: `rank[node]` is its place in the
/// depth-first walk that visits siblings by decreasing Level Fairshare.
/// `usage[node]` is the decayed usage charged directly to a node (leaves);
/// subtree sums are taken here.
pub fn fair_tree_rank(tree: &OrgTree, usage: &[f64]) -> Vec<usize> {
    let n = tree.len();
    // Subtree usage: children have larger indices than their parents only if
    // the tree was built that way, so sum by walking each node's ancestors.
    let mut subtree = vec![0.0; n];
    for (ix, &u) in usage.iter().enumerate().take(n) {
        subtree[ix] += u;
        for a in tree.ancestors(ix) {
            if a != ix {
                subtree[a] += u;
            }
        }
    }
    let mut rank = vec![usize::MAX; n];
    let mut next = 0;
    let mut stack = vec![tree.root()];
    while let Some(node) = stack.pop() {
        rank[node] = next;
        next += 1;
        let kids = &tree.node(node).children;
        let shares: f64 = kids.iter().map(|&k| tree.node(k).share).sum();
        let used: f64 = kids.iter().map(|&k| subtree[k]).sum();
        let level_fs = |k: NodeIx| -> f64 {
            let s = if shares > 0.0 {
                tree.node(k).share / shares
            } else {
                0.0
            };
            let u = if used > 0.0 { subtree[k] / used } else { 0.0 };
            if u > 0.0 {
                s / u
            } else {
                f64::INFINITY
            }
        };
        let mut kids = kids.clone();
        kids.sort_by(|&a, &b| {
            level_fs(b)
                .total_cmp(&level_fs(a))
                .then_with(|| tree.node(b).share.total_cmp(&tree.node(a).share))
                .then_with(|| tree.node(a).name.cmp(&tree.node(b).name))
        });
        stack.extend(kids.into_iter().rev());
    }
    rank
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairshare::tree::NodeSpec;

    fn spec(name: &str, parent: Option<&str>, share: f64, account: Option<&str>) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            share,
            managers: vec![],
            account: account.map(Into::into),
        }
    }

    /// PriorityDecayHalfLife: usage stops accruing, and 7 days later half is
    /// left; 14 days later a quarter.
    #[test]
    fn decay_halves_usage_in_a_half_life() {
        let mut u = DecayedUsage::default();
        let h = DEFAULT_HALF_LIFE_S;
        u.add_rate(0.0, 8.0, h);
        u.add_rate(3600.0, -8.0, h);
        let v0 = u.at(3600.0, h);
        // An hour of accrual already decays by 2^(-1/168), about 0.2%.
        assert!((v0 - 8.0 * 3600.0).abs() / v0 < 1e-2, "{v0}");
        assert!((u.at(3600.0 + h, h) / v0 - 0.5).abs() < 1e-9);
        assert!((u.at(3600.0 + 2.0 * h, h) / v0 - 0.25).abs() < 1e-9);
    }

    /// Fair Tree ranks by Level Fairshare from the root down: account A
    /// (half the shares, a fifth of the usage) ranks above B (half the
    /// shares, four fifths of the usage), and every team under A above every
    /// team under B, even a team under B with no usage at all.
    #[test]
    fn sibling_under_its_share_ranks_above_one_over_it() {
        let tree = OrgTree::build(&[
            spec("org", None, 1.0, None),
            spec("A", Some("org"), 0.5, None),
            spec("B", Some("org"), 0.5, None),
            spec("a1", Some("A"), 0.5, Some("a1")),
            spec("a2", Some("A"), 0.5, Some("a2")),
            spec("b1", Some("B"), 0.5, Some("b1")),
            spec("b2", Some("B"), 0.5, Some("b2")),
        ])
        .unwrap();
        let ix = |n: &str| tree.find(n).unwrap();
        let mut usage = vec![0.0; tree.len()];
        usage[ix("a1")] = 10.0;
        usage[ix("a2")] = 10.0;
        usage[ix("b1")] = 80.0;
        usage[ix("b2")] = 0.0;
        let rank = fair_tree_rank(&tree, &usage);
        assert!(rank[ix("A")] < rank[ix("B")]);
        for a in ["a1", "a2"] {
            for b in ["b1", "b2"] {
                assert!(rank[ix(a)] < rank[ix(b)], "{a} before {b}");
            }
        }
        // Within B, the unused b2 goes first.
        assert!(rank[ix("b2")] < rank[ix("b1")]);
        // Shares count: with equal usage, the larger share ranks first.
        let tree2 = OrgTree::build(&[
            spec("org", None, 1.0, None),
            spec("x", Some("org"), 0.25, Some("x")),
            spec("y", Some("org"), 0.75, Some("y")),
        ])
        .unwrap();
        let mut u2 = vec![0.0; tree2.len()];
        u2[tree2.find("x").unwrap()] = 30.0;
        u2[tree2.find("y").unwrap()] = 70.0;
        let r2 = fair_tree_rank(&tree2, &u2);
        // x: S/U = 0.25/0.3 < 1; y: 0.75/0.7 > 1.
        assert!(r2[tree2.find("y").unwrap()] < r2[tree2.find("x").unwrap()]);
    }
}
