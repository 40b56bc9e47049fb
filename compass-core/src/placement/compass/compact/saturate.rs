//! Saturation of slot vacancies (Lemma A.2; Place line 9 and Remove's refill).

use std::collections::BTreeSet;

use super::super::{CompassEngine, Dest, MAX_INST, MIN_INST};
use crate::model::{InstanceRef, Migration, NodeId};

impl CompassEngine {
    /// Fills every open slot vacancy: first with a 1-GPU guest on the same
    /// node (relabel), then a movable 1-GPU guest elsewhere, then a movable
    /// member of the emptiest pool node (Place line 9, Remove's refill).
    pub(in crate::placement::compass) fn saturate(&mut self, out: &mut Vec<Migration>) {
        let mut skip: BTreeSet<(NodeId, InstanceRef)> = BTreeSet::new();
        while let Some(&(n, anchor)) = self.vacant.iter().find(|v| !skip.contains(v)) {
            if let Some((from, inst)) = self.filler_source(n) {
                self.migrate(inst, from, Dest::Filler(n, anchor), out);
            } else {
                skip.insert((n, anchor));
            }
        }
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
            .guests
            .range((n, MIN_INST)..=(n, MAX_INST))
            .find(|(m, i)| is_one(*m, *i))
        {
            return Some((n, inst));
        }
        if !self.usable.contains(n) {
            return None;
        }
        if let Some(&(m, inst)) = self
            .guests
            .iter()
            .find(|(m, i)| *m != n && is_one(*m, *i) && self.movable(*i))
        {
            return Some((m, inst));
        }
        for c in 1..=self.cap {
            for &m in &self.pools[c as usize] {
                if let Some(&inst) = self.nodes[m as usize]
                    .pool
                    .iter()
                    .rev()
                    .find(|i| self.movable(**i))
                {
                    return Some((m, inst));
                }
            }
        }
        None
    }
}
