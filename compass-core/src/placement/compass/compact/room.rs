//! Room for a job that finds none (correction 12 of
//! docs/compass-corrections.md; off by default).

use std::collections::BTreeSet;

use super::super::{CompassEngine, Dest};
use crate::model::{InstanceRef, Migration, NodeId};

/// At most this many nodes are tried as sources, so the cost is bounded
/// whatever the cluster's size.
pub(in crate::placement::compass) const ROOM_SOURCES: usize = 8;

impl CompassEngine {
    /// Makes room for `w` instances of `g` GPUs when their GPUs are free in
    /// total but not on enough nodes (`Occupancy::fit` < `w`): the
    /// least-used usable nodes whose instances may all move (at most
    /// [`ROOM_SOURCES`] of them, fewest GPUs used first) are emptied one by
    /// one onto other partial nodes, each instance as a guest on the node
    /// with the fewest free GPUs that take it (best fit; never an empty
    /// node, never a node emptied here, and for a job restricted to part
    /// of the nodes, one of them). A node that cannot be emptied
    /// whole is left as it was. It stops as soon as the instances fit.
    ///
    /// Returns the migrations, or `None` when the instances already fit,
    /// the free GPUs are too few, or the sources do not make room. Run it
    /// inside a trial ([`CompassEngine::begin_trial`]) and undo that on
    /// `None` (the sources emptied are kept in it), so giving up costs
    /// what was tried; `place_making_room` does.
    ///
    /// Under a FIFO queue this is what the `defrag` baseline's rounds do
    /// for the blocked head; Compact alone does not, since a lone 1-GPU job
    /// on a pool node beside a slotted node with room breaks no rule of the
    /// ABS (docs/results.md, "Room for the waiting job").
    pub(in crate::placement::compass) fn make_room(
        &mut self,
        w: u32,
        g: u32,
    ) -> Option<Vec<Migration>> {
        let need = u64::from(w);
        if self.occ.fit(g) >= need || self.occ.free_gpus() < need * u64::from(g) {
            return None;
        }
        let cap = self.cap;
        // Least used first: an index lookup (`Index::room_sources`), so the
        // cost is the sources taken, however many nodes hold a job that may
        // not move (issue #11: a walk of every node at each free level cost
        // 132-184 us at 10,000 nodes of pinned jobs).
        let sources: Vec<NodeId> = (1..cap)
            .rev()
            .flat_map(|free| self.ix.room_sources[free as usize].iter())
            .take(ROOM_SOURCES)
            .collect();
        let mut out = Vec::new();
        // Emptied here, or given guests here: neither is a source or a
        // destination again.
        let mut emptied: BTreeSet<NodeId> = BTreeSet::new();
        let mut received: BTreeSet<NodeId> = BTreeSet::new();
        for s in sources {
            if received.contains(&s) {
                continue;
            }
            let mut items: Vec<(InstanceRef, u32)> = self.nodes[s as usize].instances().collect();
            items.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            self.begin_trial();
            let before = out.len();
            let mut got = Vec::new();
            let mut whole = true;
            for (inst, gi) in items {
                // A job restricted to part of the nodes stays inside them.
                let allowed = self.restricted.get(&inst.job);
                let dest = (gi..cap).find_map(|f| {
                    self.occ.nodes_with_free(f).find(|&m| {
                        m != s
                            && !emptied.contains(&m)
                            && self.usable.contains(m)
                            && allowed.is_none_or(|a| a.contains(m))
                    })
                });
                let Some(d) = dest else {
                    whole = false;
                    break;
                };
                self.migrate(inst, s, Dest::Guest(d), &mut out);
                got.push(d);
            }
            if !whole {
                self.undo_trial();
                out.truncate(before);
                continue;
            }
            self.keep_trial();
            emptied.insert(s);
            received.extend(got);
            if self.occ.fit(g) >= need {
                return Some(out);
            }
        }
        None
    }
}
