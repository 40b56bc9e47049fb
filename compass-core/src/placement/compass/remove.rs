//! Remove (paper Section 4.3.3, Algorithm 1 lines 10-15): detaching
//! instances, and relabelling what stays on a node (lazy fillers, correction 2).

use std::collections::BTreeSet;

use super::{CompassEngine, Guest, NodeKind, Slot};
use crate::error::Result;
use crate::model::{slot_width, InstanceRef, JobId, NodeId};

impl CompassEngine {
    // ----- Remove (Section 4.3.3) ----------------------------------------

    /// Detaches one instance from node `n`. An anchor's slot is dissolved and
    /// its fillers stay on the node as guests (correction 2: no migration
    /// here; `normalize` and Compact decide).
    pub(super) fn detach(&mut self, n: NodeId, inst: InstanceRef) {
        let st = self.node_mut(n);
        if let Some(i) = st.slots.iter().position(|s| s.anchor == inst) {
            let slot = st.slots.remove(i);
            for f in slot.fillers {
                st.guests.push(Guest {
                    instance: f,
                    gpus: 1,
                    foreign: false,
                    settled: false,
                });
            }
        } else if let Some(s) = st.slots.iter_mut().find(|s| s.fillers.contains(&inst)) {
            s.fillers.retain(|f| *f != inst);
        } else if let Some(i) = st.pool.iter().position(|p| *p == inst) {
            st.pool.remove(i);
        } else if let Some(i) = st.guests.iter().position(|g| g.instance == inst) {
            st.guests.remove(i);
        }
    }

    /// Relabels instances on `n` into their best ABS roles without moving
    /// anything: guests become fillers, anchors or pool members where the node
    /// allows it; a node left with only 1-GPU instances becomes a pool node.
    pub(super) fn normalize(&mut self, n: NodeId) {
        let cap = self.cap;
        let st = self.node_mut(n);
        if st.slots.is_empty() && st.pool.is_empty() {
            // Only guests (or nothing): rebuild the node's type from them.
            let mut guests = std::mem::take(&mut st.guests);
            guests.sort_by(|a, b| b.gpus.cmp(&a.gpus).then(a.instance.cmp(&b.instance)));
            let only_ones = guests.iter().all(|g| g.gpus == 1 && !g.foreign);
            if only_ones {
                st.pool = guests.into_iter().map(|g| g.instance).collect();
                st.pool.sort();
            } else {
                st.guests = guests;
            }
        }
        if st.kind() == NodeKind::Pool {
            // 1-GPU guests on a pool node are pool members.
            let (ones, rest): (Vec<Guest>, Vec<Guest>) = std::mem::take(&mut st.guests)
                .into_iter()
                .partition(|g| g.gpus == 1 && !g.foreign);
            st.pool.extend(ones.into_iter().map(|g| g.instance));
            st.guests = rest;
        }
        if st.pool.is_empty() {
            // Slotted (or only guests): multi-GPU guests become anchors while
            // room allows, largest first; then 1-GPU guests fill vacancies.
            let mut i = 0;
            st.guests
                .sort_by(|a, b| b.gpus.cmp(&a.gpus).then(a.instance.cmp(&b.instance)));
            while i < st.guests.len() {
                let g = &st.guests[i];
                if g.foreign || g.gpus < 2 {
                    i += 1;
                    continue;
                }
                let w = slot_width(g.gpus);
                let widths: u32 = st.slots.iter().map(|s| s.width).sum();
                let room = i64::from(cap) - i64::from(widths) - i64::from(st.guest_gpus())
                    + i64::from(g.gpus);
                if room >= i64::from(w) {
                    let g = st.guests.remove(i);
                    st.slots.push(Slot {
                        width: w,
                        anchor: g.instance,
                        anchor_gpus: g.gpus,
                        fillers: Vec::new(),
                    });
                } else {
                    i += 1;
                }
            }
            let mut i = 0;
            while i < st.guests.len() {
                let g = &st.guests[i];
                if g.foreign || g.gpus != 1 {
                    i += 1;
                    continue;
                }
                if let Some(s) = st.slots.iter_mut().find(|s| s.vacancy() > 0) {
                    s.fillers.push(g.instance);
                    st.guests.remove(i);
                } else {
                    i += 1;
                }
            }
        }
        self.reindex(n);
    }

    /// Algorithm 1, lines 10-15: every instance of `job` leaves its node.
    pub(super) fn detach_job(&mut self, job: JobId) -> Result<()> {
        let running = self.occ.remove(job)?;
        self.meta.remove(&job);
        self.restricted.remove(&job);
        self.expected_end.remove(&job);
        let mut touched = BTreeSet::new();
        for (k, &n) in running.nodes.iter().enumerate() {
            self.detach(
                n,
                InstanceRef {
                    job,
                    index: k as u32,
                },
            );
            touched.insert(n);
        }
        for n in touched {
            self.normalize(n);
        }
        Ok(())
    }
}
