//! Open slotted nodes filled with pool members (issue #11: Theorem 1 with
//! guests; docs/compass-corrections.md, "Odd rooms filled from the pool").
//!
//! The slotted pass closes a pair of open slotted nodes with units of
//! slotted nodes only. On adopted layouts an open slotted node can be left
//! with a room no such unit fits (one free GPU beside a 5-GPU guest), and
//! only a 1-GPU instance could fill it; pool members were no donors, and
//! the guest repair sent a 1-GPU guest back to the pool. This pass moves
//! movable pool members, or movable 1-GPU guests of other nodes, into such
//! rooms, as guests, when that leaves fewer open nodes. The 1-GPU guests
//! of a node so filled are *settled* while it is full: the guest repair
//! does not move them, and they are no donors of a top-up
//! (`Keys::settled`).

use super::super::{CompassEngine, Dest};
use super::Veto;
use crate::model::{InstanceRef, Migration, NodeId};

/// At most this many open slotted nodes are looked at per pass (fewest
/// free GPUs first), so the cost is bounded whatever the cluster's size.
pub(in crate::placement::compass) const FILL_TARGETS: usize = 8;

impl CompassEngine {
    /// Fills open slotted nodes with movable members of pool nodes, or
    /// movable 1-GPU guests of other nodes, when two or more usable
    /// slotted nodes whose every unit is movable stay open after the other
    /// passes (more than Theorem 1 allows; a node open because of a job
    /// that may not move is no target, as the theorem exempts it). Targets
    /// are taken fewest free GPUs first; instances come from the sources
    /// in `fill_sources`' order, each only onto a node its job may use.
    /// The shortest prefix of targets that leaves the fewest open nodes
    /// (targets filled, sources opened or emptied) is made, and only when
    /// it leaves strictly fewer: the pass never opens more than it closes.
    pub(in crate::placement::compass) fn fill_from_pool(
        &mut self,
        out: &mut Vec<Migration>,
        veto: &mut Veto<'_>,
    ) {
        let cap = self.cap;
        let mut targets: Vec<(u32, NodeId)> = Vec::new();
        'levels: for s in 1..=cap {
            for n in self.ix.dissolvable[s as usize].iter() {
                if targets.len() == FILL_TARGETS {
                    break 'levels;
                }
                if self.usable.contains(n) {
                    targets.push((self.occ.free(n), n));
                }
            }
        }
        if targets.len() < 2 || (!self.has_pool_source() && self.ix.ones.is_empty()) {
            return;
        }
        targets.sort_unstable();
        let Some(plan) = self.fill_plan(&targets) else {
            return;
        };
        let moves: Vec<_> = plan.iter().map(|&(_, inst, to)| (inst.job, to)).collect();
        if self.refuses(veto, &moves) {
            return;
        }
        let mut filled: Vec<NodeId> = Vec::new();
        for (from, inst, to) in plan {
            self.migrate(inst, from, Dest::Guest(to), out);
            if filled.last() != Some(&to) {
                filled.push(to);
            }
        }
        for n in filled {
            self.settle(n);
        }
    }

    /// Marks the movable 1-GPU guests of node `n`, which a fill (or a step
    /// of the slotted pass) closed, settled ([`Guest::settled`]): together
    /// they close it, and the guest repair would open it again by moving
    /// one (issue #11: the repair and this pass took turns on a node until
    /// Compact's rounds ran out).
    ///
    /// [`Guest::settled`]: super::super::Guest::settled
    pub(in crate::placement::compass) fn settle(&mut self, n: NodeId) {
        let settle: Vec<InstanceRef> = (self.nodes[n as usize].guests.iter())
            .filter(|g| g.gpus == 1 && !g.foreign && !g.settled && self.movable(g.instance))
            .map(|g| g.instance)
            .collect();
        if settle.is_empty() {
            return;
        }
        for g in &mut self.node_mut(n).guests {
            if settle.contains(&g.instance) {
                g.settled = true;
            }
        }
        self.reindex(n);
    }

    /// The moves `(source node, instance, target)` of the best prefix of
    /// `targets` (free GPUs, node), or `None` when no prefix leaves fewer
    /// open nodes.
    fn fill_plan(&self, targets: &[(u32, NodeId)]) -> Option<Vec<(NodeId, InstanceRef, NodeId)>> {
        let cap = self.cap;
        let mut sources = self.fill_sources(targets);
        let mut moves = Vec::new();
        let mut best: Option<(i64, usize)> = None;
        let mut delta: i64 = 0;
        for &(free, x) in targets {
            let mut left = free;
            let mut taken: Vec<(usize, InstanceRef)> = Vec::new();
            for (i, source) in sources.iter_mut().enumerate() {
                let allowed = |inst: &InstanceRef| {
                    self.restricted.get(&inst.job).is_none_or(|a| a.contains(x))
                };
                while left > 0 {
                    let Some(pos) = source.2.iter().position(allowed) else {
                        break;
                    };
                    taken.push((i, source.2.remove(pos)));
                    left -= 1;
                }
                if left == 0 {
                    break;
                }
            }
            if left > 0 {
                break;
            }
            // The target closes; each source that gave opens if it was full
            // and closes if it empties.
            delta -= 1;
            for &(s, inst) in &taken {
                let (p, used, _) = &mut sources[s];
                if *used == cap {
                    delta += 1;
                }
                *used -= 1;
                if *used == 0 {
                    delta -= 1;
                }
                moves.push((*p, inst, x));
            }
            if best.is_none_or(|(d, _)| delta < d) {
                best = Some((delta, moves.len()));
            }
        }
        let (d, len) = best?;
        if d >= 0 {
            return None;
        }
        moves.truncate(len);
        Some(moves)
    }

    /// The nodes a fill of `targets` may take 1-GPU instances from, as
    /// `(node, used GPUs, its movable instances)`: pool nodes with a
    /// movable member, then nodes other than the targets with a movable
    /// 1-GPU guest (issue #11: two odd rooms beside a full node of 1-GPU
    /// guests and no pool node), at most `targets x cap` of each. Ordered
    /// so that a fill opens as few nodes as it can: open nodes first
    /// (taking from one opens nothing; emptiest first, as it may empty),
    /// then full ones with the most movable instances first (a fill from a
    /// full node opens it once, however many it takes; issue #11: two
    /// rooms taken from two full pool nodes, one member each, closed two
    /// nodes and opened two).
    fn fill_sources(&self, targets: &[(u32, NodeId)]) -> Vec<(NodeId, u32, Vec<InstanceRef>)> {
        let cap = self.cap;
        let bound = targets.len() * cap as usize;
        let mut sources: Vec<(NodeId, u32, Vec<InstanceRef>)> = Vec::new();
        'levels: for c in 1..=cap {
            for p in self.ix.pool_sources[c as usize].iter() {
                if sources.len() == bound {
                    break 'levels;
                }
                let members: Vec<InstanceRef> = (self.nodes[p as usize].pool.iter().rev())
                    .copied()
                    .filter(|i| self.movable(*i))
                    .collect();
                sources.push((p, self.occ.used(p), members));
            }
        }
        let pools = sources.len();
        for &(n, inst) in self.ix.ones.iter() {
            if targets.iter().any(|&(_, t)| t == n) {
                continue;
            }
            let len = sources.len();
            match sources.last_mut() {
                Some(last) if len > pools && last.0 == n => last.2.push(inst),
                _ if len - pools == bound => break,
                _ => sources.push((n, self.occ.used(n), vec![inst])),
            }
        }
        sources.sort_by_key(|(n, used, inst)| {
            if *used < cap {
                (false, *used as usize, *n)
            } else {
                (true, usize::MAX - inst.len(), *n)
            }
        });
        sources
    }
}
