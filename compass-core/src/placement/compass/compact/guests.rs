//! Bringing guests home (corrections 3 and 4 of docs/compass-corrections.md).

use std::ops::Bound;

use super::super::{CompassEngine, Dest, MAX_INST};
use super::Veto;
use crate::model::{InstanceRef, Migration, NodeId};

impl CompassEngine {
    /// Moves movable guests back into the ABS by the rules of Place: 1-GPU
    /// guests into the fullest non-full pool node, else a new pool node
    /// (not a settled one of a full node: `compact/fill.rs`);
    /// multi-GPU guests into the best-fit slotted node, else an empty node.
    /// A guest stays only while the cluster has no such room. (A guest whose
    /// own node can make room for its slot is homed by the slotted pass.)
    ///
    /// Cost: only movable guests are looked at (`ones`, `multi`), and a
    /// class of guests with no home anywhere is skipped in one lookup.
    pub(in crate::placement::compass) fn repair_guests(
        &mut self,
        out: &mut Vec<Migration>,
        veto: &mut Veto<'_>,
    ) {
        let cap = self.cap;
        // 1-GPU guests: a guest never sits on a pool node (it would be a
        // member), so a home found for one is a home for every one.
        while let Some(&(n, inst)) = self.ix.ones.iter().next() {
            let fits = |m: NodeId| m != n;
            let dest = Self::first_in(&self.ix.pools, (1..cap).rev(), fits)
                .or_else(|| self.ix.empty.iter().find(|&m| fits(m)));
            let Some(dest) = dest else { break };
            if self.refuses(veto, &[(inst.job, dest)]) {
                if veto.exhausted() {
                    return;
                }
                continue;
            }
            self.migrate(inst, n, Dest::Pool(dest), out);
        }
        // Multi-GPU guests, one slot width at a time.
        let mut w = 2;
        while w <= cap {
            let mut after: Option<(u32, NodeId, InstanceRef)> = None;
            loop {
                let has_home = !self.ix.empty.is_empty()
                    || (w..cap).any(|d| !self.ix.slotted[d as usize].is_empty());
                if !has_home {
                    break;
                }
                let lo = after.map_or(Bound::Included((w, 0, super::super::MIN_INST)), |a| {
                    Bound::Excluded(a)
                });
                let Some(&(gw, n, inst)) = self
                    .ix
                    .multi
                    .range((lo, Bound::Included((w, NodeId::MAX, MAX_INST))))
                    .next()
                else {
                    break;
                };
                let fits = |m: NodeId| m != n;
                let dest = Self::first_in(&self.ix.slotted, gw..cap, fits)
                    .or_else(|| self.ix.empty.iter().find(|&m| fits(m)));
                match dest {
                    Some(dest) if self.refuses(veto, &[(inst.job, dest)]) => {
                        if veto.exhausted() {
                            return;
                        }
                    }
                    Some(dest) => self.migrate(inst, n, Dest::NewSlot(dest), out),
                    None => after = Some((gw, n, inst)),
                }
            }
            w *= 2;
        }
    }
}
