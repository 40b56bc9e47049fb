//! The shared vocabulary: jobs of `w` instances of `g` GPUs, nodes, migrations.
//!
//! Paper Section 3.2: a DLT job `i` is `w_i` homogeneous instances of `g_i`
//! GPUs; each instance must sit on one node (intra-node constraint) and all
//! instances start together (gang scheduling).

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::error::{CoreError, Result};

/// Index of a node in the cluster, `0..nodes`. Ties are always broken by the
/// lower index, which makes every policy deterministic.
pub type NodeId = u32;

/// A job's identity (the Slurm job id inside slurmctld, the trace row in the
/// simulator).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One instance of a job: `(job, index)` with `index < w`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InstanceRef {
    pub job: JobId,
    pub index: u32,
}

/// `w` instances of `g` GPUs each.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobShape {
    /// `w`: number of instances (>= 1).
    pub instances: u32,
    /// `g`: GPUs per instance (>= 1, at most the node capacity).
    pub gpus: u32,
}

impl JobShape {
    pub fn new(instances: u32, gpus: u32) -> Self {
        Self { instances, gpus }
    }
    pub fn total_gpus(&self) -> u64 {
        u64::from(self.instances) * u64::from(self.gpus)
    }
}

/// What a policy is asked to place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRequest {
    pub id: JobId,
    pub shape: JobShape,
    /// May the scheduler migrate this job (Slurm: `--resumable`, so a requeue
    /// restarts it from its checkpoint)? Jobs that are not movable are planned
    /// around as immovable.
    pub movable: bool,
}

impl JobRequest {
    pub fn new(id: u64, instances: u32, gpus: u32) -> Self {
        Self {
            id: JobId(id),
            shape: JobShape::new(instances, gpus),
            movable: true,
        }
    }
    pub fn pinned(mut self) -> Self {
        self.movable = false;
        self
    }
}

/// One instance moved from one node to another. In Slurm a migration is a
/// requeue of the owning job, pinned to its new nodes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    pub job: JobId,
    pub instance: u32,
    pub from: NodeId,
    pub to: NodeId,
}

/// A successful admission: the node of every instance (`nodes[k]` hosts
/// instance `k`) and the migrations of *other* jobs' instances that the policy
/// performed in the same event (fillers drawn, Compact).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    pub nodes: Vec<NodeId>,
    pub migrations: Vec<Migration>,
}

/// A homogeneous cluster: `nodes` nodes of `gpus_per_node` GPUs each.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    pub nodes: u32,
    pub gpus_per_node: u32,
}

impl ClusterSpec {
    /// Refuses capacities other than 1, 2, 4 or 8 (slot widths, eq. 3, are
    /// powers of two that must divide the node) and empty clusters.
    pub fn new(nodes: u32, gpus_per_node: u32) -> Result<Self> {
        if !matches!(gpus_per_node, 1 | 2 | 4 | 8) {
            return Err(CoreError::BadNodeCapacity(gpus_per_node));
        }
        if nodes == 0 {
            return Err(CoreError::NoNodes);
        }
        Ok(Self {
            nodes,
            gpus_per_node,
        })
    }

    pub fn total_gpus(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.gpus_per_node)
    }

    /// Checks that a job can ever run on this cluster (shape only, not room).
    pub fn check_job(&self, job: &JobRequest) -> Result<()> {
        if job.shape.instances == 0 {
            return Err(CoreError::NoInstances(job.id));
        }
        if job.shape.gpus == 0 {
            return Err(CoreError::ZeroGpus { job: job.id });
        }
        if job.shape.gpus > self.gpus_per_node {
            return Err(CoreError::InstanceTooLarge {
                job: job.id,
                gpus: job.shape.gpus,
                capacity: self.gpus_per_node,
            });
        }
        Ok(())
    }

    pub fn check_node(&self, node: NodeId) -> Result<()> {
        if node >= self.nodes {
            return Err(CoreError::UnknownNode {
                node,
                nodes: self.nodes,
            });
        }
        Ok(())
    }
}

/// Slot width `w*(g)` of paper eq. (3): the smallest power of two `>= g`
/// (2 for g = 2, 4 for g in {3, 4}, 8 for g in {5..8}).
pub fn slot_width(g: u32) -> u32 {
    g.next_power_of_two()
}

/// A set of nodes (the candidates Slurm passes to `select_p_job_test`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSet {
    words: Vec<u64>,
    len: u32,
}

impl NodeSet {
    pub fn empty(len: u32) -> Self {
        Self {
            words: vec![0; (len as usize).div_ceil(64)],
            len,
        }
    }
    pub fn full(len: u32) -> Self {
        let mut s = Self::empty(len);
        for n in 0..len {
            s.insert(n);
        }
        s
    }
    pub fn from_nodes(len: u32, nodes: impl IntoIterator<Item = NodeId>) -> Self {
        let mut s = Self::empty(len);
        for n in nodes {
            s.insert(n);
        }
        s
    }
    /// The set whose word `i` (nodes `64 i .. 64 i + 64`) is `word(i)`,
    /// bits past `len` dropped: a bitmap read a word at a time.
    pub fn from_words(len: u32, mut word: impl FnMut(usize) -> u64) -> Self {
        let mut s = Self::empty(len);
        for (i, w) in s.words.iter_mut().enumerate() {
            *w = word(i);
        }
        if !len.is_multiple_of(64) {
            if let Some(last) = s.words.last_mut() {
                *last &= (1u64 << (len % 64)) - 1;
            }
        }
        s
    }
    pub fn len(&self) -> u32 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }
    /// Do the two sets share a member?
    pub fn intersects(&self, other: &NodeSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }
    /// Is every member of `self` a member of `other`?
    pub fn is_subset(&self, other: &NodeSet) -> bool {
        let word = |i: usize| other.words.get(i).copied().unwrap_or(0);
        self.words
            .iter()
            .enumerate()
            .all(|(i, &a)| a & !word(i) == 0)
    }
    /// Members `start..start + len`, renumbered from 0: a word at a time
    /// (a pool of contiguous nodes reads Slurm's candidates this way).
    pub fn slice(&self, start: u32, len: u32) -> Self {
        let shift = start % 64;
        let first = (start / 64) as usize;
        let word = |i: usize| self.words.get(i).copied().unwrap_or(0);
        Self::from_words(len, |i| {
            let lo = word(first + i) >> shift;
            let hi = if shift == 0 {
                0
            } else {
                word(first + i + 1) << (64 - shift)
            };
            lo | hi
        })
    }
    pub fn insert(&mut self, n: NodeId) {
        if n < self.len {
            self.words[(n / 64) as usize] |= 1 << (n % 64);
        }
    }
    pub fn remove(&mut self, n: NodeId) {
        if n < self.len {
            self.words[(n / 64) as usize] &= !(1 << (n % 64));
        }
    }
    pub fn contains(&self, n: NodeId) -> bool {
        n < self.len && self.words[(n / 64) as usize] & (1 << (n % 64)) != 0
    }
    /// Word `i` of the set (nodes `64 i .. 64 i + 64`), 0 past its end:
    /// a bitmap walk can take the set a word at a time
    /// ([`crate::placement::node_bits::NodeBits::within`]).
    pub fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }
    pub fn count(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }
    /// Members in ascending order, a word of 64 nodes at a time.
    pub fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros();
                    w &= w - 1;
                    i as NodeId * 64 + b
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_sets_from_words_compare_word_by_word() {
        let a = NodeSet::from_words(70, |i| if i == 0 { 0b1010 } else { !0 });
        assert_eq!(a.iter().take(2).collect::<Vec<_>>(), vec![1, 3]);
        // the second word holds nodes 64..70 only
        assert_eq!(a.count(), 2 + 6);
        let b = NodeSet::from_nodes(70, [3, 69]);
        assert!(a.intersects(&b) && b.is_subset(&a) && !a.is_subset(&b));
        let c = NodeSet::from_nodes(70, [0, 2]);
        assert!(!a.intersects(&c) && !c.is_subset(&a));
        // a shorter set: its missing words count as empty
        assert!(NodeSet::empty(10).is_subset(&NodeSet::empty(0)));
        assert!(!NodeSet::from_nodes(10, [9]).is_subset(&NodeSet::empty(0)));
    }

    #[test]
    fn slot_widths_follow_eq3() {
        let w: Vec<u32> = (1..=8).map(slot_width).collect();
        assert_eq!(w, vec![1, 2, 4, 4, 8, 8, 8, 8]);
    }

    #[test]
    fn cluster_refuses_bad_capacity() {
        assert_eq!(ClusterSpec::new(4, 6), Err(CoreError::BadNodeCapacity(6)));
        assert_eq!(ClusterSpec::new(0, 8), Err(CoreError::NoNodes));
        assert!(ClusterSpec::new(4, 4).is_ok());
    }

    #[test]
    fn a_slice_of_a_node_set_is_its_members_in_the_range_renumbered() {
        let mut x = 5u64;
        for len in [1u32, 63, 64, 65, 130, 200] {
            for _ in 0..20 {
                let mut s = NodeSet::empty(len);
                for n in 0..len {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    if (x >> 60) & 1 == 1 {
                        s.insert(n);
                    }
                }
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let start = ((x >> 33) % u64::from(len)) as u32;
                let take = len - start - ((x >> 20) % u64::from(len - start)) as u32;
                let expected = NodeSet::from_nodes(
                    take,
                    s.iter()
                        .filter(|&n| n >= start && n < start + take)
                        .map(|n| n - start),
                );
                assert_eq!(
                    s.slice(start, take),
                    expected,
                    "len {len} start {start} take {take}"
                );
            }
        }
    }

    #[test]
    fn nodeset_basics() {
        let mut s = NodeSet::empty(130);
        s.insert(0);
        s.insert(129);
        s.insert(200);
        assert!(s.contains(129) && !s.contains(1) && !s.contains(200));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 129]);
        s.remove(0);
        assert_eq!(s.count(), 1);
    }
}
