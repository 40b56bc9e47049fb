//! Compact (paper Section 4.3.4, corrected; docs/compass-corrections.md):
//! the rounds of passes, and the two migration primitives they share.

mod guests;
mod pool;
mod saturate;
mod slotted;

use super::{CompassEngine, Dest, SlottedPass};
use crate::model::{InstanceRef, Migration, NodeId};

impl CompassEngine {
    // ----- Compact (Section 4.3.4, corrected) ----------------------------

    /// Runs Compact now and returns the migrations it applied: bring guests
    /// home, saturate slot vacancies (Lemma A.2), the pool pass (Lemma A.3)
    /// and the corrected slotted pass (Lemma A.4 as it should be).
    pub fn compact(&mut self) -> Vec<Migration> {
        let mut out = Vec::new();
        // A pass can enable an earlier one (the pool pass empties a node a
        // guest can use, or turns a guest into an anchor with a vacancy): run
        // rounds until one migrates nothing. Every pass only moves towards
        // fewer guests, open vacancies or open nodes, so this ends quickly.
        for _round in 0..6 {
            let before = out.len();
            self.repair_guests(&mut out);
            self.saturate(&mut out);
            self.compact_pool(&mut out);
            match self.config.slotted_pass {
                SlottedPass::Corrected => self.compact_slotted(&mut out),
                SlottedPass::Paper => {
                    self.paper_best_fit_drain(4, &mut out);
                    self.paper_best_fit_drain(2, &mut out);
                }
            }
            if out.len() == before {
                break;
            }
        }
        out
    }

    // ----- migrations ----------------------------------------------------

    /// Moves one instance to `to` in role `dest`, updating the accounting.
    pub(super) fn migrate(
        &mut self,
        inst: InstanceRef,
        from: NodeId,
        dest: Dest,
        out: &mut Vec<Migration>,
    ) {
        let to = dest.node();
        let g = self.meta.get(&inst.job).map_or(1, |m| m.gpus);
        self.detach(from, inst);
        self.install(inst, g, dest);
        if from != to {
            self.occ
                .move_instance(inst.job, inst.index, to)
                .expect("migration target has room");
            out.push(Migration {
                job: inst.job,
                instance: inst.index,
                from,
                to,
            });
            self.migrations_total += 1;
        }
        self.normalize(from);
    }

    /// Moves a whole slot (anchor and fillers) from `from` to `to`.
    pub(super) fn move_slot(
        &mut self,
        from: NodeId,
        anchor: InstanceRef,
        to: NodeId,
        out: &mut Vec<Migration>,
    ) {
        let st = &mut self.nodes[from as usize];
        let Some(i) = st.slots.iter().position(|s| s.anchor == anchor) else {
            return;
        };
        let slot = st.slots.remove(i);
        self.reindex(from);
        for inst in std::iter::once(slot.anchor).chain(slot.fillers.iter().copied()) {
            self.occ
                .move_instance(inst.job, inst.index, to)
                .expect("slot target has room");
            out.push(Migration {
                job: inst.job,
                instance: inst.index,
                from,
                to,
            });
            self.migrations_total += 1;
        }
        self.nodes[to as usize].slots.push(slot);
        self.reindex(to);
        self.normalize(from);
    }
}
