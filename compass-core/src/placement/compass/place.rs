//! Place (paper Section 4.3.2, Algorithm 1 lines 3-9): where an arriving
//! instance goes, and the tentative install / rollback of a whole job.

use std::collections::BTreeMap;

use super::{CompassEngine, Dest, Guest, NodeKind, NodeState, Slot};
use crate::error::{CoreError, Result};
use crate::model::{slot_width, InstanceRef, JobRequest, NodeId, NodeSet};

/// Nodes saved before a tentative placement, to roll it back.
#[derive(Default)]
pub(super) struct Undo {
    pub(super) saved: BTreeMap<NodeId, NodeState>,
}

impl CompassEngine {
    // ----- Place (Section 4.3.2) -----------------------------------------
    /// Where one arriving instance of `g` GPUs goes (without installing it).
    pub(super) fn choose(&self, g: u32, movable: bool, allowed: Option<&NodeSet>) -> Option<Dest> {
        // A small candidate set (a partition, a feature): look at its nodes
        // rather than skip the rest of the cluster in the indexes.
        let small = allowed.filter(|a| (a.count() as usize) * 8 < self.nodes.len());
        let dest = match small {
            Some(a) => self.choose_among(g, a),
            None => self.choose_indexed(g, allowed),
        }?;
        if movable
            || !self.config.pinned_fill
            || self.keys[dest.node() as usize].kind != Some(NodeKind::Empty)
        {
            return Some(dest);
        }
        // Correction 5 (immovable jobs): an instance that Compact may not
        // move would open an empty node that no later move can close; it
        // takes physically free GPUs on a partial node instead, best fit.
        let guest = match small {
            Some(a) => self.guest_among(g, a, false),
            None => Self::first_in(&self.ix.phys, g..self.cap, |n| self.ok_dest(n, allowed)),
        };
        Some(guest.map(Dest::Guest).unwrap_or(dest))
    }

    /// [`Self::choose`] through the indexes.
    pub(super) fn choose_indexed(&self, g: u32, allowed: Option<&NodeSet>) -> Option<Dest> {
        let cap = self.cap;
        let ok = |n: NodeId| self.ok_dest(n, allowed);
        let empty = || self.ix.empty.iter().copied().find(|&n| ok(n));
        if g >= 2 {
            // Best fit over slotted nodes with D(n) >= w (Place, lines 4-5),
            // else open an empty node (line 6).
            let slotted = Self::first_in(&self.ix.slotted, slot_width(g)..cap, ok);
            if let Some(n) = slotted.or_else(empty) {
                return Some(Dest::NewSlot(n));
            }
        } else {
            // Slot vacancy first (line 11), then the fullest non-full pool
            // node (line 12), then a new pool node (line 13).
            if let Some(&(n, a)) = self.ix.vacant.iter().find(|(n, _)| ok(*n)) {
                return Some(Dest::Filler(n, a));
            }
            if let Some(n) = Self::first_in(&self.ix.pools, (1..cap).rev(), ok).or_else(empty) {
                return Some(Dest::Pool(n));
            }
        }
        // Correction 3: any physically free GPUs, best fit.
        self.config
            .overflow
            .then(|| Self::first_in(&self.ix.phys, g..=cap, ok))
            .flatten()
            .map(Dest::Guest)
    }

    /// [`Self::choose`] over the nodes of `allowed` only, with the same
    /// rules and ties (lowest node index at the best level).
    pub(super) fn choose_among(&self, g: u32, allowed: &NodeSet) -> Option<Dest> {
        let cap = self.cap;
        let nodes = || allowed.iter().filter(|&n| self.keys[n as usize].usable);
        let kind = |n: NodeId| self.keys[n as usize].kind;
        let level = |n: NodeId| self.keys[n as usize].level;
        let empty = || nodes().find(|&n| kind(n) == Some(NodeKind::Empty));
        if g >= 2 {
            let w = slot_width(g);
            let slotted = nodes()
                .filter(|&n| kind(n) == Some(NodeKind::Slotted))
                .filter(|&n| (w..cap).contains(&level(n)))
                .min_by_key(|&n| (level(n), n));
            if let Some(n) = slotted.or_else(empty) {
                return Some(Dest::NewSlot(n));
            }
        } else {
            let vacancy = nodes().find_map(|n| {
                self.keys[n as usize]
                    .vacant
                    .iter()
                    .min()
                    .map(|&a| Dest::Filler(n, a))
            });
            if vacancy.is_some() {
                return vacancy;
            }
            let pool = nodes()
                .filter(|&n| kind(n) == Some(NodeKind::Pool))
                .filter(|&n| (1..cap).contains(&level(n)))
                .min_by_key(|&n| (std::cmp::Reverse(level(n)), n));
            if let Some(n) = pool.or_else(empty) {
                return Some(Dest::Pool(n));
            }
        }
        if !self.config.overflow {
            return None;
        }
        self.guest_among(g, allowed, true).map(Dest::Guest)
    }

    /// The node of `allowed` with the fewest physically free GPUs that still
    /// fit `g` (lowest index on ties); empty nodes only with `empty_ok`.
    fn guest_among(&self, g: u32, allowed: &NodeSet, empty_ok: bool) -> Option<NodeId> {
        let free = |n: NodeId| self.keys[n as usize].phys_free;
        allowed
            .iter()
            .filter(|&n| self.keys[n as usize].usable)
            .filter(|&n| free(n) >= g && (empty_ok || free(n) < self.cap))
            .min_by_key(|&n| (free(n), n))
    }

    pub(super) fn save(&self, undo: &mut Undo, n: NodeId) {
        undo.saved
            .entry(n)
            .or_insert_with(|| self.nodes[n as usize].clone());
    }

    pub(super) fn install(&mut self, inst: InstanceRef, g: u32, dest: Dest) -> NodeId {
        let n = dest.node();
        let st = &mut self.nodes[n as usize];
        match dest {
            Dest::NewSlot(_) => {
                st.slots.push(Slot {
                    width: slot_width(g),
                    anchor: inst,
                    anchor_gpus: g,
                    fillers: Vec::new(),
                });
            }
            Dest::Filler(_, a) => {
                if let Some(s) = st.slots.iter_mut().find(|s| s.anchor == a) {
                    s.fillers.push(inst);
                }
            }
            Dest::Pool(_) => st.pool.push(inst),
            Dest::Guest(_) => st.guests.push(Guest {
                instance: inst,
                gpus: g,
                foreign: false,
            }),
        }
        self.reindex(n);
        n
    }

    pub(super) fn rollback(&mut self, undo: Undo) {
        for (n, st) in undo.saved {
            self.nodes[n as usize] = st;
            self.reindex(n);
        }
    }

    /// Tentatively installs every instance; on failure rolls back and returns None.
    pub(super) fn place_instances(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
        undo: &mut Undo,
    ) -> Option<Vec<NodeId>> {
        let g = job.shape.gpus;
        let mut nodes = Vec::with_capacity(job.shape.instances as usize);
        for k in 0..job.shape.instances {
            let dest = self.choose(g, job.movable, allowed)?;
            self.save(undo, dest.node());
            nodes.push(self.install(
                InstanceRef {
                    job: job.id,
                    index: k,
                },
                g,
                dest,
            ));
        }
        Some(nodes)
    }

    pub(super) fn check_new(&self, job: &JobRequest) -> Result<()> {
        self.occ.spec().check_job(job)?;
        if self.meta.contains_key(&job.id) {
            return Err(CoreError::DuplicateJob(job.id));
        }
        Ok(())
    }

    /// Dry run of [`PlacementPolicy::place`] without Compact: the node of each
    /// instance. The state is left exactly as it was.
    pub fn plan(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
    ) -> Result<Option<Vec<NodeId>>> {
        self.check_new(job)?;
        let mut undo = Undo::default();
        let nodes = self.place_instances(job, allowed, &mut undo);
        self.rollback(undo);
        Ok(nodes)
    }
}
