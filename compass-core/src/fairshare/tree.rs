//! The org tree of GPU budgets.
//!
//! Each node holds a share of its parent's budget; siblings' shares sum to at
//! most 1 (the rest is unbudgeted). A leaf's share of total capacity is the
//! product of the shares down the path from the root, so it is fixed
//! regardless of other queues (fair-share-budgets.txt, "Budgets"). Leaves map
//! to Slurm accounts (`sbatch -A`).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

use crate::error::{CoreError, Result};

/// Tolerance when checking that siblings sum to at most 1, so that e.g.
/// `0.7 + 0.2 + 0.1` passes despite rounding.
pub const SHARE_EPSILON: f64 = 1e-9;

/// One node as written by a manager (TOML import, API, database row).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Unique name of the node (e.g. `research/nlp/team-a`-style or plain).
    pub name: String,
    /// Name of the parent; `None` for the single root.
    pub parent: Option<String>,
    /// Fraction of the parent's budget, in `[0, 1]`. The root's share is the
    /// fraction of the cluster the whole tree distributes (usually 1).
    pub share: f64,
    /// Users who may edit this node's subtree.
    #[serde(default)]
    pub managers: Vec<String>,
    /// Slurm account of a leaf. Only leaves may carry one.
    #[serde(default)]
    pub account: Option<String>,
}

/// Index of a node inside an [`OrgTree`].
pub type NodeIx = usize;

/// A validated node.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub parent: Option<NodeIx>,
    /// Children sorted by name (deterministic walks).
    pub children: Vec<NodeIx>,
    pub share: f64,
    pub managers: Vec<String>,
    pub account: Option<String>,
    /// Product of the shares from the root down to this node: its fixed share
    /// of total capacity.
    pub abs_share: f64,
    /// Distance from the root (root = 0).
    pub depth: usize,
}

/// A validated org tree: one root, no cycles, every parent known, shares in
/// `[0, 1]`, siblings summing to at most 1, accounts only on leaves and unique.
#[derive(Clone, Debug, PartialEq)]
pub struct OrgTree {
    nodes: Vec<Node>,
    root: NodeIx,
    by_name: HashMap<String, NodeIx>,
    by_account: HashMap<String, NodeIx>,
}

fn bad(node: &str, field: &str, why: impl Into<String>) -> CoreError {
    CoreError::Budget {
        node: node.to_string(),
        field: field.to_string(),
        why: why.into(),
    }
}

/// Checks one share value on its own (finite, within `[0, 1]`).
pub fn check_share(node: &str, share: f64) -> Result<()> {
    if !share.is_finite() {
        return Err(bad(
            node,
            "share",
            format!("must be a finite number, got {share}"),
        ));
    }
    if !(0.0..=1.0).contains(&share) {
        return Err(bad(
            node,
            "share",
            format!("must be between 0 and 1, got {share}"),
        ));
    }
    Ok(())
}

/// Checks a node or account name: non-empty, at most 128 characters, no
/// control characters or whitespace.
pub fn check_name(node: &str, field: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(bad(node, field, "must not be empty"));
    }
    if name.chars().count() > 128 {
        return Err(bad(node, field, "must be at most 128 characters"));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad(
            node,
            field,
            format!("`{name}` must not contain whitespace or control characters"),
        ));
    }
    Ok(())
}

impl OrgTree {
    /// Builds and validates a tree from node specs (any order).
    pub fn build(specs: &[NodeSpec]) -> Result<Self> {
        let mut by_name: HashMap<String, NodeIx> = HashMap::new();
        for (i, s) in specs.iter().enumerate() {
            check_name(&s.name, "name", &s.name)?;
            check_share(&s.name, s.share)?;
            if let Some(p) = &s.parent {
                check_name(&s.name, "parent", p)?;
            }
            for m in &s.managers {
                check_name(&s.name, "managers", m)?;
            }
            if let Some(a) = &s.account {
                check_name(&s.name, "account", a)?;
            }
            if by_name.insert(s.name.clone(), i).is_some() {
                return Err(bad(&s.name, "name", "duplicate node name"));
            }
        }
        let roots: Vec<&NodeSpec> = specs.iter().filter(|s| s.parent.is_none()).collect();
        let root = match roots.as_slice() {
            [r] => by_name[&r.name],
            [] => {
                return Err(bad(
                    specs.first().map_or("", |s| s.name.as_str()),
                    "parent",
                    "the tree has no root (every node has a parent, so there is a cycle)",
                ))
            }
            [_, second, ..] => {
                return Err(bad(
                    &second.name,
                    "parent",
                    format!("a second root (the first is `{}`)", roots[0].name),
                ))
            }
        };
        let mut parent_ix: Vec<Option<NodeIx>> = Vec::with_capacity(specs.len());
        for s in specs {
            parent_ix.push(match &s.parent {
                None => None,
                Some(p) => match by_name.get(p) {
                    Some(&ix) => Some(ix),
                    None => return Err(bad(&s.name, "parent", format!("unknown parent `{p}`"))),
                },
            });
        }
        // Cycle check: every node must reach the root within `len` steps.
        for (i, s) in specs.iter().enumerate() {
            let mut cur = i;
            let mut steps = 0;
            while let Some(p) = parent_ix[cur] {
                cur = p;
                steps += 1;
                if steps > specs.len() {
                    return Err(bad(&s.name, "parent", "the parent chain forms a cycle"));
                }
            }
            if cur != root {
                return Err(bad(&s.name, "parent", "the parent chain forms a cycle"));
            }
        }
        let mut children: Vec<Vec<NodeIx>> = vec![Vec::new(); specs.len()];
        for (i, p) in parent_ix.iter().enumerate() {
            if let Some(p) = p {
                children[*p].push(i);
            }
        }
        for c in &mut children {
            c.sort_by(|a, b| specs[*a].name.cmp(&specs[*b].name));
        }
        for (i, kids) in children.iter().enumerate() {
            let sum: f64 = kids.iter().map(|k| specs[*k].share).sum();
            if sum > 1.0 + SHARE_EPSILON {
                let last = kids
                    .iter()
                    .max_by(|a, b| specs[**a].share.total_cmp(&specs[**b].share))
                    .copied()
                    .unwrap_or(i);
                return Err(bad(
                    &specs[last].name,
                    "share",
                    format!(
                        "the children of `{}` would sum to {sum:.6} (more than 1)",
                        specs[i].name
                    ),
                ));
            }
            if !kids.is_empty() {
                if let Some(_acc) = &specs[i].account {
                    return Err(bad(
                        &specs[i].name,
                        "account",
                        "only leaves may map to a Slurm account",
                    ));
                }
            }
        }
        let mut by_account = HashMap::new();
        for (i, s) in specs.iter().enumerate() {
            if let Some(a) = &s.account {
                if let Some(prev) = by_account.insert(a.clone(), i) {
                    return Err(bad(
                        &s.name,
                        "account",
                        format!("account `{a}` is already mapped to `{}`", specs[prev].name),
                    ));
                }
            }
        }
        // abs_share and depth by walking from the root.
        let mut nodes: Vec<Node> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| Node {
                name: s.name.clone(),
                parent: parent_ix[i],
                children: children[i].clone(),
                share: s.share,
                managers: s.managers.clone(),
                account: s.account.clone(),
                abs_share: 0.0,
                depth: 0,
            })
            .collect();
        let mut stack = vec![root];
        nodes[root].abs_share = nodes[root].share;
        while let Some(n) = stack.pop() {
            let (abs, depth) = (nodes[n].abs_share, nodes[n].depth);
            for c in nodes[n].children.clone() {
                nodes[c].abs_share = abs * nodes[c].share;
                nodes[c].depth = depth + 1;
                stack.push(c);
            }
        }
        Ok(Self {
            nodes,
            root,
            by_name,
            by_account,
        })
    }

    pub fn root(&self) -> NodeIx {
        self.root
    }
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    pub fn node(&self, ix: NodeIx) -> &Node {
        &self.nodes[ix]
    }
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    pub fn find(&self, name: &str) -> Option<NodeIx> {
        self.by_name.get(name).copied()
    }
    /// The leaf mapped to a Slurm account.
    pub fn leaf_for_account(&self, account: &str) -> Result<NodeIx> {
        self.by_account
            .get(account)
            .copied()
            .ok_or_else(|| CoreError::UnknownAccount(account.to_string()))
    }
    /// Node and its ancestors, root last.
    pub fn ancestors(&self, ix: NodeIx) -> Vec<NodeIx> {
        let mut out = vec![ix];
        let mut cur = ix;
        while let Some(p) = self.nodes[cur].parent {
            out.push(p);
            cur = p;
        }
        out
    }
    /// Is `ix` inside the subtree rooted at `top` (inclusive)?
    pub fn is_within(&self, ix: NodeIx, top: NodeIx) -> bool {
        self.ancestors(ix).contains(&top)
    }
    /// Pre-order walk of the subtree at `top` (children by name).
    pub fn subtree(&self, top: NodeIx) -> Vec<NodeIx> {
        let mut out = Vec::new();
        let mut stack = vec![top];
        while let Some(n) = stack.pop() {
            out.push(n);
            stack.extend(self.nodes[n].children.iter().rev());
        }
        out
    }
    /// May `user` edit node `ix`? True if `user` manages it or any ancestor.
    pub fn manages(&self, user: &str, ix: NodeIx) -> bool {
        self.ancestors(ix)
            .iter()
            .any(|a| self.nodes[*a].managers.iter().any(|m| m == user))
    }
    /// Back to specs, in pre-order from the root (stable export order).
    pub fn to_specs(&self) -> Vec<NodeSpec> {
        self.subtree(self.root)
            .into_iter()
            .map(|i| {
                let n = &self.nodes[i];
                NodeSpec {
                    name: n.name.clone(),
                    parent: n.parent.map(|p| self.nodes[p].name.clone()),
                    share: n.share,
                    managers: n.managers.clone(),
                    account: n.account.clone(),
                }
            })
            .collect()
    }
    /// Accounts of the leaves under `top`.
    pub fn accounts_under(&self, top: NodeIx) -> Vec<String> {
        self.subtree(top)
            .into_iter()
            .filter_map(|i| self.nodes[i].account.clone())
            .collect()
    }
}

/// One change between two trees, for the dry-run diff of an import.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum TreeChange {
    Add { node: NodeSpec },
    Remove { node: NodeSpec },
    Modify { old: NodeSpec, new: NodeSpec },
}

impl std::fmt::Display for TreeChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TreeChange::Add { node } => write!(
                f,
                "+ add    {} (parent {}, share {}, account {})",
                node.name,
                node.parent.as_deref().unwrap_or("-"),
                node.share,
                node.account.as_deref().unwrap_or("-")
            ),
            TreeChange::Remove { node } => write!(f, "- remove {}", node.name),
            TreeChange::Modify { old, new } => {
                write!(f, "~ modify {}:", new.name)?;
                if old.parent != new.parent {
                    write!(
                        f,
                        " parent {} -> {}",
                        old.parent.as_deref().unwrap_or("-"),
                        new.parent.as_deref().unwrap_or("-")
                    )?;
                }
                if old.share != new.share {
                    write!(f, " share {} -> {}", old.share, new.share)?;
                }
                if old.account != new.account {
                    write!(
                        f,
                        " account {} -> {}",
                        old.account.as_deref().unwrap_or("-"),
                        new.account.as_deref().unwrap_or("-")
                    )?;
                }
                if old.managers != new.managers {
                    write!(f, " managers {:?} -> {:?}", old.managers, new.managers)?;
                }
                Ok(())
            }
        }
    }
}

/// The changes that turn `old` into `new`, sorted by node name.
pub fn diff(old: &[NodeSpec], new: &[NodeSpec]) -> Vec<TreeChange> {
    let o: BTreeMap<&str, &NodeSpec> = old.iter().map(|s| (s.name.as_str(), s)).collect();
    let n: BTreeMap<&str, &NodeSpec> = new.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut out = Vec::new();
    let mut names: Vec<&str> = o.keys().chain(n.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        match (o.get(name), n.get(name)) {
            (Some(a), Some(b)) if a != b => out.push(TreeChange::Modify {
                old: (*a).clone(),
                new: (*b).clone(),
            }),
            (Some(_), Some(_)) => {}
            (Some(a), None) => out.push(TreeChange::Remove { node: (*a).clone() }),
            (None, Some(b)) => out.push(TreeChange::Add { node: (*b).clone() }),
            (None, None) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spec(
        name: &str,
        parent: Option<&str>,
        share: f64,
        account: Option<&str>,
    ) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            share,
            managers: vec![],
            account: account.map(Into::into),
        }
    }

    fn sample() -> Vec<NodeSpec> {
        vec![
            spec("org", None, 1.0, None),
            spec("prog", Some("org"), 0.7, None),
            spec("other", Some("org"), 0.3, Some("acct-other")),
            spec("team-a", Some("prog"), 0.5, Some("acct-a")),
            spec("team-b", Some("prog"), 0.5, Some("acct-b")),
        ]
    }

    #[test]
    fn leaf_share_is_product_down_the_tree() {
        let t = OrgTree::build(&sample()).unwrap();
        let a = t.find("team-a").unwrap();
        assert!((t.node(a).abs_share - 0.35).abs() < 1e-12);
        assert_eq!(
            t.leaf_for_account("acct-b").unwrap(),
            t.find("team-b").unwrap()
        );
        assert_eq!(t.node(a).depth, 2);
    }

    #[test]
    fn rejects_sum_above_one_naming_the_field() {
        let mut s = sample();
        s[2].share = 0.31;
        match OrgTree::build(&s).unwrap_err() {
            CoreError::Budget { field, why, .. } => {
                assert_eq!(field, "share");
                assert!(why.contains("more than 1"), "{why}");
            }
            e => panic!("unexpected {e}"),
        }
    }

    #[test]
    fn rejects_nan_negative_and_above_one() {
        for bad_share in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
            let mut s = sample();
            s[3].share = bad_share;
            let e = OrgTree::build(&s).unwrap_err();
            assert!(
                matches!(&e, CoreError::Budget { field, node, .. } if field == "share" && node == "team-a"),
                "{e}"
            );
        }
    }

    #[test]
    fn rejects_cycles_unknown_parents_two_roots_duplicates() {
        let mut s = sample();
        s[1].parent = Some("team-a".into()); // prog -> team-a -> prog
        assert!(OrgTree::build(&s)
            .unwrap_err()
            .to_string()
            .contains("cycle"));
        let mut s = sample();
        s[4].parent = Some("nope".into());
        assert!(OrgTree::build(&s)
            .unwrap_err()
            .to_string()
            .contains("unknown parent `nope`"));
        let mut s = sample();
        s[2].parent = None;
        assert!(OrgTree::build(&s)
            .unwrap_err()
            .to_string()
            .contains("second root"));
        let mut s = sample();
        s.push(spec("team-a", Some("org"), 0.0, None));
        assert!(OrgTree::build(&s)
            .unwrap_err()
            .to_string()
            .contains("duplicate"));
        let mut s = sample();
        s[0].parent = Some("org".into());
        assert!(OrgTree::build(&s).is_err());
    }

    #[test]
    fn accounts_only_on_leaves_and_unique() {
        let mut s = sample();
        s[1].account = Some("x".into());
        assert!(OrgTree::build(&s)
            .unwrap_err()
            .to_string()
            .contains("only leaves"));
        let mut s = sample();
        s[4].account = Some("acct-a".into());
        assert!(OrgTree::build(&s)
            .unwrap_err()
            .to_string()
            .contains("already mapped"));
        let t = OrgTree::build(&sample()).unwrap();
        assert_eq!(
            t.leaf_for_account("zzz").unwrap_err(),
            CoreError::UnknownAccount("zzz".into())
        );
    }

    #[test]
    fn managers_cover_their_subtree_only() {
        let mut s = sample();
        s[1].managers = vec!["pat".into()];
        let t = OrgTree::build(&s).unwrap();
        assert!(t.manages("pat", t.find("team-a").unwrap()));
        assert!(t.manages("pat", t.find("prog").unwrap()));
        assert!(!t.manages("pat", t.find("other").unwrap()));
        assert!(!t.manages("pat", t.root()));
    }

    #[test]
    fn export_roundtrip_and_diff() {
        let t = OrgTree::build(&sample()).unwrap();
        let specs = t.to_specs();
        assert_eq!(specs[0].name, "org");
        let t2 = OrgTree::build(&specs).unwrap();
        assert_eq!(t2.to_specs(), specs);
        let mut changed = specs.clone();
        assert_eq!(changed[2].name, "prog");
        changed[2].share = 0.6;
        changed.retain(|s| s.name != "team-b");
        changed.push(spec("team-c", Some("prog"), 0.2, Some("acct-c")));
        let d = diff(&specs, &changed);
        assert_eq!(d.len(), 3);
        assert!(d
            .iter()
            .any(|c| matches!(c, TreeChange::Remove { node } if node.name == "team-b")));
        assert!(d
            .iter()
            .any(|c| matches!(c, TreeChange::Add { node } if node.name == "team-c")));
        assert!(d.iter().any(|c| c.to_string().contains("share 0.7 -> 0.6")));
        assert!(diff(&specs, &specs).is_empty());
    }
}
