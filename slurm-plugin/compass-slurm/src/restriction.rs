//! The nodes a running job may ever use, from what Slurm's job record says
//! for good: the nodes of the partition it runs in, less its `--exclude`,
//! among those whose features satisfy its `--constraint`. Compact keeps a
//! job inside them (`Controller::begin_within`, `CompassEngine::set_allowed`;
//! docs/compass-corrections.md, section 8), at its start and when the
//! plugin adopts it again after a slurmctld restart or a reconfigure.
//!
//! The select plugin reads the strings and bitmaps from `job_record_t` and
//! `node_record_t`; everything here is pure.
//!
//! Only the common `--constraint` forms are read: one feature (`nvme`),
//! features that must all be on a node (`a100&ib`; Slurm turns `a100,ib`
//! into it), and alternatives of which a node needs one (`a100|l40s`:
//! without brackets, each node on its own). Anything else (counts
//! `nvme*2`, brackets `[a|b]` that make all nodes match the same one,
//! parentheses, `&` mixed with `|`, `!`, blanks, bytes that are not UTF-8)
//! is [`Constraint::Unread`]: the job is then restricted to the nodes it
//! runs on, so Compact holds it still rather than guess where Slurm would
//! start it.

use compass_core::model::{NodeId, NodeSet};

/// A job's `--constraint` (`details->features`) as far as it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constraint {
    /// No constraint.
    None,
    /// Each node has every one of these features (`a`, `a&b`, `a,b`).
    All(Vec<String>),
    /// Each node has at least one of these features (`a|b`).
    Any(Vec<String>),
    /// A form not read (the expression as Slurm holds it).
    Unread(String),
}

impl Constraint {
    /// Reads Slurm's feature expression (`None` or empty: no constraint).
    pub fn parse(expr: Option<&str>) -> Self {
        let Some(expr) = expr.filter(|e| !e.is_empty()) else {
            return Constraint::None;
        };
        let unread = || Constraint::Unread(expr.to_string());
        // U+FFFD: the plugin read bytes that were not UTF-8.
        if expr
            .chars()
            .any(|c| c.is_whitespace() || "[]()*!\u{fffd}".contains(c))
        {
            return unread();
        }
        let and = expr.contains(['&', ',']);
        let or = expr.contains('|');
        let names: Vec<String> = match (and, or) {
            (true, true) => return unread(),
            (true, false) => expr.split(['&', ',']).map(str::to_string).collect(),
            (false, true) => expr.split('|').map(str::to_string).collect(),
            (false, false) => vec![expr.to_string()],
        };
        if names.iter().any(String::is_empty) {
            return unread();
        }
        if or {
            Constraint::Any(names)
        } else {
            Constraint::All(names)
        }
    }

    /// Whether a node with `features` (Slurm's comma-separated list; `None`:
    /// none) satisfies the constraint; `None` for [`Constraint::Unread`].
    pub fn admits(&self, features: Option<&str>) -> Option<bool> {
        let has = |f: &String| features.is_some_and(|l| l.split(',').any(|x| x == f));
        match self {
            Constraint::None => Some(true),
            Constraint::All(names) => Some(names.iter().all(has)),
            Constraint::Any(names) => Some(names.iter().any(has)),
            Constraint::Unread(_) => None,
        }
    }
}

/// What the job record says about where a running job may run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobPlaces<'a> {
    /// Nodes of the partition it runs in; `None`: not known (every node).
    pub partition: Option<Vec<NodeId>>,
    /// Its `--exclude` nodes.
    pub excluded: Vec<NodeId>,
    /// Its `--constraint` (`details->features`).
    pub features: Option<&'a str>,
    /// It names nodes (`-w`/`--nodelist`, `details->req_node_bitmap`):
    /// requeued, it restarts only on a set of nodes that includes them.
    pub named: bool,
    /// The nodes it runs on now.
    pub current: Vec<NodeId>,
}

/// The nodes the job may ever use among `node_count` nodes, each node's
/// active features given by `node_features`; `None` when nothing restricts
/// it (no partition known, no exclusion, no constraint). An unread
/// constraint, or nodes it names (`-w`), give the nodes it runs on now:
/// Compact holds it still (a `-w` job moved off its named nodes could not
/// restart on its planned target; Slurm would start it on its named nodes
/// again after the hold, a requeue for nothing).
pub fn allowed_nodes<'n>(
    job: &JobPlaces,
    node_count: u32,
    node_features: impl Fn(NodeId) -> Option<&'n str>,
) -> Option<NodeSet> {
    let constraint = Constraint::parse(job.features);
    if job.named || matches!(constraint, Constraint::Unread(_)) {
        return Some(NodeSet::from_nodes(node_count, job.current.iter().copied()));
    }
    if job.partition.is_none() && job.excluded.is_empty() && constraint == Constraint::None {
        return None;
    }
    let mut set = match &job.partition {
        Some(nodes) => NodeSet::from_nodes(node_count, nodes.iter().copied()),
        None => NodeSet::full(node_count),
    };
    for &n in &job.excluded {
        set.remove(n);
    }
    if constraint != Constraint::None {
        let lacking: Vec<NodeId> = set
            .iter()
            .filter(|&n| constraint.admits(node_features(n)) != Some(true))
            .collect();
        for n in lacking {
            set.remove(n);
        }
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_common_forms_are_read_and_the_others_are_not() {
        assert_eq!(Constraint::parse(None), Constraint::None);
        assert_eq!(Constraint::parse(Some("")), Constraint::None);
        assert_eq!(
            Constraint::parse(Some("nvme")),
            Constraint::All(names(&["nvme"]))
        );
        assert_eq!(
            Constraint::parse(Some("a100&ib")),
            Constraint::All(names(&["a100", "ib"]))
        );
        assert_eq!(
            Constraint::parse(Some("a100,ib")),
            Constraint::All(names(&["a100", "ib"]))
        );
        assert_eq!(
            Constraint::parse(Some("a100|l40s|h100")),
            Constraint::Any(names(&["a100", "l40s", "h100"]))
        );
        for unread in [
            "nvme*2",
            "[a100|l40s]",
            "[rack1*2&rack2*4]",
            "(a100|l40s)&ib",
            "a100&ib|l40s",
            "a100|ib&l40s",
            "a100&",
            "|a100",
            "a100||ib",
            "!nvme",
            "a100 & ib",
            "nv\u{fffd}me",
        ] {
            assert_eq!(
                Constraint::parse(Some(unread)),
                Constraint::Unread(unread.into()),
                "{unread}"
            );
        }
    }

    #[test]
    fn nodes_are_admitted_by_their_features() {
        let node = Some("a100,ib,nvme");
        let c = |e: &str| Constraint::parse(Some(e));
        assert_eq!(c("nvme").admits(node), Some(true));
        assert_eq!(c("a100&nvme").admits(node), Some(true));
        assert_eq!(c("a100&l40s").admits(node), Some(false));
        assert_eq!(c("l40s|nvme").admits(node), Some(true));
        assert_eq!(c("l40s|h100").admits(node), Some(false));
        // whole names only
        assert_eq!(c("nvm").admits(node), Some(false));
        assert_eq!(c("a100").admits(None), Some(false));
        assert_eq!(Constraint::None.admits(None), Some(true));
        assert_eq!(c("[a100|l40s]").admits(node), None);
    }

    /// The site lab's a100 pool: n1-n4 `a100,ib`, n5-n8 `a100,ib,nvme`
    /// (ids 0-7), then n9-n12 `l40s` (ids 8-11).
    fn site_features(n: NodeId) -> Option<&'static str> {
        match n {
            0..=3 => Some("a100,ib"),
            4..=7 => Some("a100,ib,nvme"),
            8..=11 => Some("l40s"),
            _ => None,
        }
    }

    fn allowed(job: &JobPlaces) -> Option<Vec<NodeId>> {
        allowed_nodes(job, 12, site_features).map(|s| s.iter().collect())
    }

    #[test]
    fn the_allowed_set_is_partition_less_exclusions_with_the_features() {
        let gpu: Vec<NodeId> = (0..12).collect();
        let base = JobPlaces {
            partition: Some(gpu.clone()),
            current: vec![5],
            ..Default::default()
        };
        // partition alone: every node of it
        assert_eq!(allowed(&base), Some(gpu.clone()));
        // nothing known: no restriction
        assert_eq!(
            allowed(&JobPlaces {
                current: vec![5],
                ..Default::default()
            }),
            None
        );
        let with = |features: Option<&'static str>, excluded: Vec<NodeId>| JobPlaces {
            features,
            excluded,
            ..base.clone()
        };
        assert_eq!(allowed(&with(Some("nvme"), vec![])), Some(vec![4, 5, 6, 7]));
        assert_eq!(allowed(&with(Some("nvme"), vec![6])), Some(vec![4, 5, 7]));
        assert_eq!(
            allowed(&with(Some("a100&ib"), vec![0])),
            Some((1..8).collect())
        );
        assert_eq!(
            allowed(&with(Some("nvme|l40s"), vec![])),
            Some((4..12).collect())
        );
        assert_eq!(allowed(&with(Some("h100"), vec![])), Some(vec![]));
        // a constraint without a partition: among every node
        assert_eq!(
            allowed(&JobPlaces {
                partition: None,
                ..with(Some("nvme"), vec![])
            }),
            Some(vec![4, 5, 6, 7])
        );
        // not read: held on the nodes it runs on
        assert_eq!(allowed(&with(Some("nvme*2"), vec![])), Some(vec![5]));
        // nodes named with -w: held on the nodes it runs on
        let named = JobPlaces {
            named: true,
            current: vec![2, 3],
            ..Default::default()
        };
        assert_eq!(allowed(&named), Some(vec![2, 3]));
        assert_eq!(
            allowed(&JobPlaces {
                named: true,
                ..with(Some("nvme"), vec![])
            }),
            Some(vec![5])
        );
        assert_eq!(
            allowed(&JobPlaces {
                current: vec![4, 6],
                ..with(Some("[nvme|l40s]"), vec![])
            }),
            Some(vec![4, 6])
        );
    }
}
