//! The pool pass of Compact (Lemma A.3).

use super::super::{CompassEngine, Dest};
use super::Veto;
use crate::model::Migration;

impl CompassEngine {
    /// Is there a pool node with a movable member (`Index::pool_sources`)?
    pub(in crate::placement::compass) fn has_pool_source(&self) -> bool {
        self.ix.pool_sources.iter().any(|l| !l.is_empty())
    }

    /// Pool pass (Lemma A.3): drain the emptiest non-full pool node with a
    /// movable member into the fullest other non-full usable one, one 1-GPU
    /// instance at a time, until no such pair is left (at most one pool node
    /// with a movable member stays non-full, or only emptier destinations are
    /// left). Both ends are index lookups (`pool_sources`, `pools`), so the
    /// pass costs its migrations, however many pool nodes hold only pinned
    /// members.
    pub(in crate::placement::compass) fn compact_pool(
        &mut self,
        out: &mut Vec<Migration>,
        veto: &mut Veto<'_>,
    ) {
        loop {
            // Source: fewest members (ties: highest index), with a movable member.
            let Some(src) = (1..self.cap).find_map(|c| self.ix.pool_sources[c as usize].last())
            else {
                return;
            };
            // Destination: fullest other non-full usable pool node (ties: lowest index).
            let Some(dst) = (1..self.cap)
                .rev()
                .find_map(|c| self.ix.pools[c as usize].iter().find(|&m| m != src))
            else {
                return;
            };
            if self.keys[dst as usize].level < self.keys[src as usize].level {
                // Only emptier destinations are left: moving would not help,
                // and every other source is at least as full.
                return;
            }
            let Some(&inst) = self.nodes[src as usize]
                .pool
                .iter()
                .rev()
                .find(|i| self.movable(**i))
            else {
                return;
            };
            if self.refuses(veto, &[(inst.job, dst)]) {
                if veto.exhausted() {
                    return;
                }
                continue;
            }
            self.migrate(inst, src, Dest::Pool(dst), out);
        }
    }
}
