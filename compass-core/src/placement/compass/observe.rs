//! Observation: the serialisable layout and the invariant check.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::{CompassEngine, NodeKind, NodeState};
use crate::model::{slot_width, NodeId};

impl CompassEngine {
    // ----- observation ---------------------------------------------------

    /// A serialisable picture of the layout, for `compass status` and the
    /// plugin's published state.
    pub fn snapshot(&self) -> LayoutSnapshot {
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(n, st)| NodeView {
                node: n as NodeId,
                kind: st.kind(),
                used: self.occ.used(n as NodeId),
                capacity: self.cap,
                usable: self.usable.contains(n as NodeId),
                state: st.clone(),
            })
            .collect();
        let counts = self.occ.instance_counts();
        let phi_star = crate::metric::phi_star(counts, self.cap);
        let partial = self.occ.partial_nodes();
        LayoutSnapshot {
            nodes,
            partial_nodes: partial,
            phi_star,
            n_sif: i64::from(partial) - phi_star as i64,
            wcc: crate::metric::wcc_holds(counts, self.cap),
            guests: self.ix.guests.len() as u32,
            migrations_total: self.migrations_total,
            divergences: self.divergences,
        }
    }

    /// Each node's part of the layout, by local id, at the cost of a few
    /// words per node: its state is shared with a copy the engine keeps
    /// until the node changes (`SharedNodes`), so only the nodes changed
    /// since the last call are copied.
    /// [`NodePart::view`] makes the [`NodeView`] from it later, outside the
    /// select plugin's lock (issue #11: copying every node's slots under
    /// the lock took most of the plugin thread's 0.75-1.45 ms snapshot at
    /// 10,000 nodes).
    pub fn layout_parts(&self) -> Vec<NodePart> {
        let mut shared = self.shared.lock();
        (0..self.nodes.len() as NodeId)
            .map(|n| self.part(&mut shared, n))
            .collect()
    }

    /// The parts ([`CompassEngine::layout_parts`]) of the nodes that changed
    /// since the last call, by local id, at the cost of those nodes (issue
    /// #11: a part of every node cost about 50 us at 10,000 nodes, every
    /// second, under the select plugin's lock). A node counts as changed
    /// from the first change after a layout took its copy, so the caller
    /// must hold every node's part from one [`CompassEngine::layout_parts`]
    /// taken before.
    pub fn layout_changes(&self) -> Vec<(NodeId, NodePart)> {
        let mut shared = self.shared.lock();
        let mut changed = std::mem::take(&mut shared.changed);
        changed.sort_unstable();
        for &n in &changed {
            shared.noted[n as usize] = false;
        }
        changed
            .into_iter()
            .map(|n| (n, self.part(&mut shared, n)))
            .collect()
    }

    /// Node `n`'s part, its copy made when it has none.
    fn part(&self, shared: &mut Copies, n: NodeId) -> NodePart {
        let copy = &mut shared.nodes[n as usize];
        let st = &self.nodes[n as usize];
        NodePart {
            used: self.occ.used(n),
            capacity: self.cap,
            usable: self.usable.contains(n),
            state: Arc::clone(copy.get_or_insert_with(|| Arc::new(st.clone()))),
        }
    }

    /// Checks every structural invariant (Proposition 1 and the accounting).
    /// Returns a description of the first violation. Used by tests after
    /// every event; the plugin's self-check checks a part of the nodes at a
    /// time ([`CompassEngine::check_invariants_of`]).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.check_invariants_of(0..self.nodes.len() as NodeId)
    }

    /// [`CompassEngine::check_invariants`] for the nodes in `nodes` only
    /// (clamped to the cluster): each node's own invariants (its GPUs
    /// against the accounting's, each of its instances accounted on it)
    /// and its index entries against ones built afresh. The cluster-wide
    /// count of instances against the accounted jobs is made only when
    /// `nodes` covers the cluster. The cost is that of the nodes checked,
    /// so a caller under a lock can bound it (issue #11: at 10,000 nodes
    /// the whole check costs about 12 ms).
    pub fn check_invariants_of(&self, nodes: Range<NodeId>) -> std::result::Result<(), String> {
        let cap = self.cap;
        let all = self.nodes.len() as NodeId;
        let nodes = nodes.start.min(all)..nodes.end.min(all);
        for n in nodes.clone() {
            let st = &self.nodes[n as usize];
            if st.used() != self.occ.used(n) {
                return Err(format!(
                    "node {n}: structure holds {} GPUs, accounting {}",
                    st.used(),
                    self.occ.used(n)
                ));
            }
            if st.used() > cap {
                return Err(format!(
                    "node {n}: {} GPUs used on a node of {cap}",
                    st.used()
                ));
            }
            let widths: u32 = st.slots.iter().map(|s| s.width).sum();
            if widths > cap {
                return Err(format!("node {n}: slots take {widths} GPUs of {cap}"));
            }
            if !st.slots.is_empty() && !st.pool.is_empty() {
                return Err(format!("node {n}: both slots and pool members"));
            }
            for s in &st.slots {
                if s.width != slot_width(s.anchor_gpus) || s.anchor_gpus < 2 {
                    return Err(format!(
                        "node {n}: slot of width {} anchors {} GPUs (eq. 3)",
                        s.width, s.anchor_gpus
                    ));
                }
                if s.anchor_gpus + s.fillers.len() as u32 > s.width {
                    return Err(format!("node {n}: slot over capacity (eq. 4)"));
                }
            }
            if self.keys[n as usize] != self.keys_of(n) {
                return Err(format!("node {n}: stale index entry"));
            }
            let instances = st
                .slots
                .iter()
                .flat_map(|s| std::iter::once(s.anchor).chain(s.fillers.iter().copied()));
            for inst in instances
                .chain(st.pool.iter().copied())
                .chain(st.guests.iter().map(|g| g.instance))
            {
                let at = self
                    .occ
                    .job(inst.job)
                    .and_then(|j| j.nodes.get(inst.index as usize))
                    .copied();
                if at != Some(n) {
                    return Err(format!(
                        "instance {inst:?} is on node {n} but accounted on {at:?}"
                    ));
                }
            }
        }
        if self.ix.restricted(nodes.clone()) != self.index_afresh(nodes.clone()) {
            return Err("an index differs from the one built afresh from the nodes".into());
        }
        if nodes != (0..all) {
            return Ok(());
        }
        let placed: usize = self
            .nodes
            .iter()
            .map(|st| {
                st.slots.iter().map(|s| 1 + s.fillers.len()).sum::<usize>()
                    + st.pool.len()
                    + st.guests.len()
            })
            .sum();
        let accounted: usize = self.occ.jobs().map(|j| j.nodes.len()).sum();
        if placed != accounted {
            return Err(format!(
                "{placed} instances in the structure, {accounted} accounted"
            ));
        }
        Ok(())
    }
}

/// Serialisable layout of the whole cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayoutSnapshot {
    pub nodes: Vec<NodeView>,
    /// `Phi_pi`.
    pub partial_nodes: u32,
    /// `Phi*`.
    pub phi_star: u64,
    /// `N * SIF = Phi_pi - Phi*`.
    pub n_sif: i64,
    /// Does the Workload Composition Condition (eq. 9) hold now?
    pub wcc: bool,
    pub guests: u32,
    pub migrations_total: u64,
    pub divergences: u64,
}

/// The copies of the nodes' states the layouts share
/// ([`CompassEngine::layout_parts`]): `None`, the node changed since the
/// last layout (forgotten by every change of a node: `node_mut` and the
/// two undos that put a node back; and `set_node_usable`). A lock, not a
/// cell, so that the engine stays `Sync`; only `layout_parts` and
/// `layout_changes` take it, and every change goes through `&mut` without
/// it.
#[derive(Debug, Default)]
pub(super) struct SharedNodes(Mutex<Copies>);

/// What [`SharedNodes`] keeps: each node's copy, and the nodes whose copy
/// was forgotten since the last [`CompassEngine::layout_changes`], each
/// once (`noted`).
#[derive(Clone, Debug, Default)]
struct Copies {
    nodes: Vec<Option<Arc<NodeState>>>,
    changed: Vec<NodeId>,
    noted: Vec<bool>,
}

impl SharedNodes {
    pub(super) fn new(nodes: usize) -> Self {
        Self(Mutex::new(Copies {
            nodes: vec![None; nodes],
            changed: Vec::new(),
            noted: vec![false; nodes],
        }))
    }

    /// Node `n` changes: the layouts taken keep their copy, the next one
    /// makes a new one. A node whose copy was taken is noted changed (a
    /// node with none is new to every layout anyway), so an engine no
    /// layout is taken of (the simulator's) notes nothing.
    pub(super) fn forget(&mut self, n: NodeId) {
        let copies = self.0.get_mut().unwrap_or_else(|e| e.into_inner());
        let Some(c) = copies.nodes.get_mut(n as usize) else {
            return;
        };
        if c.take().is_some() && !copies.noted[n as usize] {
            copies.noted[n as usize] = true;
            copies.changed.push(n);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Copies> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clone for SharedNodes {
    fn clone(&self) -> Self {
        Self(Mutex::new(self.lock().clone()))
    }
}

/// A node of a layout as [`CompassEngine::layout_parts`] takes it.
#[derive(Clone, Debug)]
pub struct NodePart {
    pub used: u32,
    pub capacity: u32,
    pub usable: bool,
    pub state: Arc<NodeState>,
}

impl NodePart {
    /// The node's view, numbered `node` (its state copied).
    pub fn view(&self, node: NodeId) -> NodeView {
        NodeView {
            node,
            kind: self.state.kind(),
            used: self.used,
            capacity: self.capacity,
            usable: self.usable,
            state: NodeState::clone(&self.state),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub node: NodeId,
    pub kind: NodeKind,
    pub used: u32,
    pub capacity: u32,
    pub usable: bool,
    pub state: NodeState,
}
