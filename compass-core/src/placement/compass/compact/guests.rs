//! Bringing guests home (corrections 3 and 4 of docs/compass-corrections.md).

use super::super::{CompassEngine, Dest};
use crate::model::{slot_width, InstanceRef, Migration, NodeId};

impl CompassEngine {
    /// Moves movable guests back into the ABS by the rules of Place: 1-GPU
    /// guests into the fullest non-full pool node, else a new pool node;
    /// multi-GPU guests into the best-fit slotted node, else an empty node.
    /// A guest stays only while the cluster has no such room.
    pub(in crate::placement::compass) fn repair_guests(&mut self, out: &mut Vec<Migration>) {
        let guests: Vec<(NodeId, InstanceRef)> = self.guests.iter().copied().collect();
        for (n, inst) in guests {
            let Some(g) = self.nodes[n as usize]
                .guests
                .iter()
                .find(|g| g.instance == inst)
                .cloned()
            else {
                continue;
            };
            if g.foreign || !self.movable(inst) {
                continue;
            }
            let fits = |m: NodeId| m != n && self.ok_dest(m, None);
            let empty = || self.empty.iter().copied().find(|&m| fits(m));
            let dest = if g.gpus == 1 {
                Self::first_in(&self.pools, (1..self.cap).rev(), fits)
                    .or_else(empty)
                    .map(Dest::Pool)
            } else {
                Self::first_in(&self.slotted, slot_width(g.gpus)..self.cap, fits)
                    .or_else(empty)
                    .map(Dest::NewSlot)
            };
            if let Some(dest) = dest {
                self.migrate(inst, n, dest, out);
            }
        }
    }
}
