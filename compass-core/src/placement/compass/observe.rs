//! Observation: the serialisable layout and the invariant check.

use std::ops::Range;

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub node: NodeId,
    pub kind: NodeKind,
    pub used: u32,
    pub capacity: u32,
    pub usable: bool,
    pub state: NodeState,
}
