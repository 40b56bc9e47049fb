//! The ABS state of one node (eq. 7) and the indexes that answer every
//! best-fit query of the engine.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::CompassEngine;
use crate::model::{InstanceRef, NodeId, NodeSet};

/// Node types of Section 4.2: empty, pool (1-GPU instances only) or slotted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Empty,
    Pool,
    Slotted,
}

/// A slot (Definition 1): a block of `width` GPUs holding one anchor
/// (Definition 2) and up to `width - g` 1-GPU fillers (Definition 3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub width: u32,
    pub anchor: InstanceRef,
    pub anchor_gpus: u32,
    pub fillers: Vec<InstanceRef>,
}

impl Slot {
    pub(super) fn vacancy(&self) -> u32 {
        self.width - self.anchor_gpus - self.fillers.len() as u32
    }
}

/// An instance outside its ABS place (overflow, stranded filler, or GPUs of a
/// job outside the model when `foreign`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guest {
    pub instance: InstanceRef,
    pub gpus: u32,
    pub foreign: bool,
}

/// The internal state `sigma_n` of one node (eq. 7).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    pub slots: Vec<Slot>,
    /// `P(n)`: 1-GPU instances of a pool node.
    pub pool: Vec<InstanceRef>,
    pub guests: Vec<Guest>,
}

impl NodeState {
    pub fn kind(&self) -> NodeKind {
        if !self.slots.is_empty() || (self.pool.is_empty() && !self.guests.is_empty()) {
            NodeKind::Slotted
        } else if !self.pool.is_empty() {
            NodeKind::Pool
        } else {
            NodeKind::Empty
        }
    }
    pub(super) fn guest_gpus(&self) -> u32 {
        self.guests.iter().map(|g| g.gpus).sum()
    }
    pub(super) fn used(&self) -> u32 {
        self.slots
            .iter()
            .map(|s| s.anchor_gpus + s.fillers.len() as u32)
            .sum::<u32>()
            + self.pool.len() as u32
            + self.guest_gpus()
    }
    /// `D(n)`: GPUs not profiled as any slot and not held by a guest.
    pub(super) fn unprofiled(&self, cap: u32) -> u32 {
        let widths: u32 = self.slots.iter().map(|s| s.width).sum();
        cap.saturating_sub(widths + self.guest_gpus())
    }
}

/// Where a node sits in the indexes (so it can be taken out again).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Keys {
    pub(super) kind: Option<NodeKind>,
    /// Slotted: unprofiled room `D(n)`; pool: member count.
    pub(super) level: u32,
    pub(super) phys_free: u32,
    pub(super) vacant: Vec<InstanceRef>,
    pub(super) guests: Vec<InstanceRef>,
}

impl CompassEngine {
    // ----- indexes -------------------------------------------------------

    pub(super) fn keys_of(&self, n: NodeId) -> Keys {
        let st = &self.nodes[n as usize];
        let kind = st.kind();
        let used = st.used();
        let level = match kind {
            NodeKind::Slotted => st.unprofiled(self.cap),
            NodeKind::Pool => used,
            NodeKind::Empty => 0,
        };
        // A guest may sit in a slot's vacancy (adopted layouts): a vacancy is
        // open only while the node has a physically free GPU.
        let vacant = if used < self.cap {
            st.slots
                .iter()
                .filter(|s| s.vacancy() > 0)
                .map(|s| s.anchor)
                .collect()
        } else {
            Vec::new()
        };
        Keys {
            kind: Some(kind),
            level,
            phys_free: self.cap - used,
            vacant,
            guests: st.guests.iter().map(|g| g.instance).collect(),
        }
    }

    /// Takes node `n` out of every index and puts it back by its current state.
    pub(super) fn reindex(&mut self, n: NodeId) {
        let old = std::mem::take(&mut self.keys[n as usize]);
        if let Some(kind) = old.kind {
            match kind {
                NodeKind::Empty => self.empty.remove(&n),
                NodeKind::Slotted => self.slotted[old.level as usize].remove(&n),
                NodeKind::Pool => self.pools[old.level as usize].remove(&n),
            };
            self.phys[old.phys_free as usize].remove(&n);
            for a in &old.vacant {
                self.vacant.remove(&(n, *a));
            }
            for g in &old.guests {
                self.guests.remove(&(n, *g));
            }
        }
        let new = self.keys_of(n);
        match new.kind.expect("keys_of sets kind") {
            NodeKind::Empty => self.empty.insert(n),
            NodeKind::Slotted => self.slotted[new.level as usize].insert(n),
            NodeKind::Pool => self.pools[new.level as usize].insert(n),
        };
        self.phys[new.phys_free as usize].insert(n);
        for a in &new.vacant {
            self.vacant.insert((n, *a));
        }
        for g in &new.guests {
            self.guests.insert((n, *g));
        }
        self.keys[n as usize] = new;
    }

    pub(super) fn ok_dest(&self, n: NodeId, allowed: Option<&NodeSet>) -> bool {
        self.usable.contains(n) && allowed.is_none_or(|a| a.contains(n))
    }

    /// The lowest-index node passing `ok` in the first level of `index`, in
    /// the order of `levels`: every best-fit query of the engine.
    pub(super) fn first_in(
        index: &[BTreeSet<NodeId>],
        levels: impl IntoIterator<Item = u32>,
        ok: impl Fn(NodeId) -> bool,
    ) -> Option<NodeId> {
        levels
            .into_iter()
            .find_map(|l| index[l as usize].iter().copied().find(|&n| ok(n)))
    }
}
