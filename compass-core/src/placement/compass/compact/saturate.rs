//! Saturation of slot vacancies (Lemma A.2; Place line 9 and Remove's refill).

use std::ops::Bound;

use super::super::{CompassEngine, Dest, MAX_INST, MIN_INST};
use super::Veto;
use crate::model::{InstanceRef, Migration, NodeId};

impl CompassEngine {
    /// Fills every open slot vacancy: first with a 1-GPU guest on the same
    /// node (relabel), then a movable 1-GPU guest elsewhere, then a movable
    /// member of the emptiest pool node (Place line 9, Remove's refill),
    /// then a settled guest of a full node (`compact/fill.rs`).
    ///
    /// Cost: one index lookup per filled vacancy; the pass stops at the first
    /// vacancy no source can fill, because then no movable 1-GPU instance
    /// exists outside a slot (vacancies only index usable nodes, and a
    /// same-node guest is relabelled by `normalize` already).
    pub(in crate::placement::compass) fn saturate(
        &mut self,
        out: &mut Vec<Migration>,
        veto: &mut Veto<'_>,
    ) {
        let mut after: Option<(NodeId, InstanceRef)> = None;
        loop {
            let next = match after {
                None => self.ix.vacant.iter().next(),
                Some(v) => self
                    .ix
                    .vacant
                    .range((Bound::Excluded(v), Bound::Unbounded))
                    .next(),
            };
            let Some(&(n, anchor)) = next else { return };
            match self.filler_source(n) {
                // Refused: held, so the next source is another.
                Some((from, inst)) if from != n && self.refuses(veto, &[(inst.job, n)]) => {
                    if veto.exhausted() {
                        return;
                    }
                }
                Some((from, inst)) => self.migrate(inst, from, Dest::Filler(n, anchor), out),
                None if self.has_filler_source() => after = Some((n, anchor)),
                None => return,
            }
        }
    }

    /// Is there a movable 1-GPU instance outside every slot?
    fn has_filler_source(&self) -> bool {
        !self.ix.ones.is_empty() || !self.ix.settled.is_empty() || self.has_pool_source()
    }

    fn filler_source(&self, n: NodeId) -> Option<(NodeId, InstanceRef)> {
        let is_one = |node: NodeId, inst: InstanceRef| {
            self.nodes[node as usize]
                .guests
                .iter()
                .any(|g| g.instance == inst && g.gpus == 1 && !g.foreign)
        };
        // A 1-GPU guest on the same node: relabel, no migration.
        if let Some(&(_, inst)) = self
            .ix
            .guests
            .range((n, MIN_INST)..=(n, MAX_INST))
            .find(|(m, i)| is_one(*m, *i))
        {
            return Some((n, inst));
        }
        if let Some(&(m, inst)) = self.ix.ones.iter().find(|(m, _)| *m != n) {
            return Some((m, inst));
        }
        for c in 1..=self.cap {
            if let Some(m) = self.ix.pool_sources[c as usize].first() {
                let inst = self.nodes[m as usize]
                    .pool
                    .iter()
                    .rev()
                    .find(|i| self.movable(**i))
                    .copied()?;
                return Some((m, inst));
            }
        }
        // Last, a settled guest (`compact/fill.rs`): it closes its node.
        self.ix.settled.iter().find(|(m, _)| *m != n).copied()
    }
}
