//! The pool pass of Compact (Lemma A.3).

use std::collections::BTreeSet;

use super::super::{CompassEngine, Dest};
use crate::model::{Migration, NodeId};

impl CompassEngine {
    /// Pool pass (Lemma A.3): drain the emptiest non-full pool node into the
    /// fullest one, one 1-GPU instance at a time, until at most one pool node
    /// is non-full (or only immovable members are left to move).
    pub(in crate::placement::compass) fn compact_pool(&mut self, out: &mut Vec<Migration>) {
        let mut stuck: BTreeSet<NodeId> = BTreeSet::new();
        loop {
            let partial: Vec<NodeId> = (1..self.cap)
                .flat_map(|c| self.pools[c as usize].iter().copied())
                .collect();
            if partial.len() < 2 {
                return;
            }
            // Source: fewest members (ties: highest index), with a movable member.
            let src = (1..self.cap).find_map(|c| {
                self.pools[c as usize]
                    .iter()
                    .rev()
                    .find(|n| !stuck.contains(n))
                    .copied()
            });
            let Some(src) = src else { return };
            let Some(&inst) = self.nodes[src as usize]
                .pool
                .iter()
                .rev()
                .find(|i| self.movable(**i))
            else {
                stuck.insert(src);
                continue;
            };
            // Destination: fullest other non-full pool node (ties: lowest index).
            let dst = (1..self.cap).rev().find_map(|c| {
                self.pools[c as usize]
                    .iter()
                    .find(|&&m| m != src && self.ok_dest(m, None))
                    .copied()
            });
            let Some(dst) = dst else {
                stuck.insert(src);
                continue;
            };
            if self.keys[dst as usize].level < self.keys[src as usize].level {
                // Only emptier destinations are left: moving would not help.
                stuck.insert(src);
                continue;
            }
            self.migrate(inst, src, Dest::Pool(dst), out);
        }
    }
}
