//! The slotted pass of Compact: ours (Lemma A.4 as it should be) and the
//! paper's literal `BestFitDrain`, kept to show where it fails.

use std::collections::BTreeMap;

use super::super::{CompassEngine, Slot};
use crate::model::{InstanceRef, Migration, NodeId};

impl CompassEngine {
    /// Open slotted nodes: slotted with unprofiled room `D(n) > 0`.
    fn open_slotted(&self) -> Vec<NodeId> {
        (1..=self.cap)
            .flat_map(|d| self.slotted[d as usize].iter().copied())
            .collect()
    }

    /// Corrected slotted pass (docs/compass-corrections.md). While two or more
    /// slotted nodes have unprofiled room, apply the cheapest move set, in
    /// instance migrations, that either empties one open node into the
    /// others ("dissolve") or fills one open node exactly from the others
    /// ("top up"). Each step closes at least one open node, so the pass ends
    /// with at most one. With slot widths in {2, 4} on open
    /// nodes, any two open nodes admit such a step of at most two slots, so
    /// when every slot is movable the pass always reaches one open node.
    pub(in crate::placement::compass) fn compact_slotted(&mut self, out: &mut Vec<Migration>) {
        loop {
            let open = self.open_slotted();
            if open.len() < 2 {
                return;
            }
            let window = self.window(&open);
            let best = self.best_step(&window);
            let Some(step) = best else { return };
            for (from, anchor, to) in step.moves {
                self.move_slot(from, anchor, to, out);
            }
        }
    }

    /// The paper's `BestFitDrain` for slot class `width` (Section 4.3.4
    /// pseudocode, lines 3-15), literally: hosts are slotted nodes with
    /// `0 < count_C(n) < cap_C(n)`, `room_C(n) = floor(D(n) / width)`.
    pub(in crate::placement::compass) fn paper_best_fit_drain(
        &mut self,
        width: u32,
        out: &mut Vec<Migration>,
    ) {
        let count = |e: &Self, n: NodeId| {
            e.nodes[n as usize]
                .slots
                .iter()
                .filter(|s| s.width == width)
                .count() as u32
        };
        let room = |e: &Self, n: NodeId| e.nodes[n as usize].unprofiled(e.cap) / width;
        let mut hosts: Vec<NodeId> = (0..self.nodes.len() as NodeId)
            .filter(|&n| count(self, n) > 0 && room(self, n) > 0)
            .collect();
        hosts.sort_by_key(|&n| (std::cmp::Reverse(room(self, n)), n));
        while hosts.len() >= 2 {
            let src = hosts[0];
            let mut progress = false;
            let items: Vec<InstanceRef> = self.nodes[src as usize]
                .slots
                .iter()
                .filter(|s| s.width == width && self.slot_cost(s).is_some())
                .map(|s| s.anchor)
                .collect();
            for a in items {
                let dst = hosts[1..]
                    .iter()
                    .copied()
                    .filter(|&n| room(self, n) >= 1)
                    .min_by_key(|&n| (room(self, n), n));
                let Some(dst) = dst else { break };
                self.move_slot(src, a, dst, out);
                progress = true;
            }
            if count(self, src) == 0 {
                hosts.remove(0);
            }
            hosts.retain(|&n| count(self, n) > 0 && room(self, n) > 0);
            if !progress {
                break;
            }
        }
    }

    /// The open nodes worth considering: all of them when few, else the 24
    /// emptiest and the 24 fullest (keeps a pass linear in open nodes).
    fn window(&self, open: &[NodeId]) -> Vec<NodeId> {
        const HALF: usize = 24;
        if open.len() <= 2 * HALF {
            return open.to_vec();
        }
        // `open` is sorted by D ascending (fullest first).
        let mut w: Vec<NodeId> = open[..HALF].to_vec();
        w.extend_from_slice(&open[open.len() - HALF..]);
        w
    }

    fn slot_cost(&self, s: &Slot) -> Option<u32> {
        let movable = self.movable(s.anchor) && s.fillers.iter().all(|f| self.movable(*f));
        (movable && s.width < self.cap).then(|| 1 + s.fillers.len() as u32)
    }

    fn best_step(&self, window: &[NodeId]) -> Option<Step> {
        let room: BTreeMap<NodeId, u32> = window
            .iter()
            .map(|&n| (n, self.nodes[n as usize].unprofiled(self.cap)))
            .collect();
        let mut best: Option<Step> = None;
        let mut consider = |s: Step| {
            if best.as_ref().is_none_or(|b| s.better_than(b)) {
                best = Some(s);
            }
        };
        for &src in window {
            if let Some(s) = self.dissolve(src, &room) {
                consider(s);
            }
        }
        for &dst in window {
            if let Some(s) = self.top_up(dst, &room) {
                consider(s);
            }
        }
        best
    }

    /// Empties `src` into the other open nodes, largest slot first, each into
    /// the open node with the least room that fits (best fit).
    fn dissolve(&self, src: NodeId, room: &BTreeMap<NodeId, u32>) -> Option<Step> {
        let st = &self.nodes[src as usize];
        if !st.guests.is_empty() || st.slots.is_empty() {
            return None;
        }
        let mut slots: Vec<&Slot> = st.slots.iter().collect();
        slots.sort_by(|a, b| b.width.cmp(&a.width).then(a.anchor.cmp(&b.anchor)));
        let mut room = room.clone();
        room.remove(&src);
        let mut moves = Vec::new();
        let mut cost = 0;
        for s in slots {
            cost += self.slot_cost(s)?;
            let (&to, _) = room
                .iter()
                .filter(|(&n, &r)| r >= s.width && self.ok_dest(n, None))
                .min_by_key(|(&n, &r)| (r, n))?;
            *room.get_mut(&to).expect("present") -= s.width;
            moves.push((src, s.anchor, to));
        }
        let filled = room.values().filter(|r| **r == 0).count() as u32;
        Some(Step {
            moves,
            cost,
            gain: 1 + filled,
        })
    }

    /// Fills `dst` exactly with slots taken from the other open nodes:
    /// cheapest slots first, from the emptiest donors. Open nodes hold slots
    /// of width 2 and 4 only (a full-width slot fills its node), so the
    /// choices are `k4` slots of 4 and `(need - 4 k4) / 2` slots of 2.
    fn top_up(&self, dst: NodeId, room: &BTreeMap<NodeId, u32>) -> Option<Step> {
        if !self.ok_dest(dst, None) {
            return None;
        }
        let need = room[&dst];
        // (cost, emptiest donor first, node, anchor) per width.
        type Cand = (u32, std::cmp::Reverse<u32>, NodeId, InstanceRef);
        let mut by_width: BTreeMap<u32, Vec<Cand>> = BTreeMap::new();
        for (&n, &r) in room {
            if n == dst {
                continue;
            }
            for s in &self.nodes[n as usize].slots {
                if let Some(c) = self.slot_cost(s) {
                    by_width.entry(s.width).or_default().push((
                        c,
                        std::cmp::Reverse(r),
                        n,
                        s.anchor,
                    ));
                }
            }
        }
        for v in by_width.values_mut() {
            v.sort();
        }
        let none = Vec::new();
        let twos = by_width.get(&2).unwrap_or(&none);
        let fours = by_width.get(&4).unwrap_or(&none);
        type Pick = (NodeId, InstanceRef, u32);
        let mut best: Option<(u32, Vec<Pick>)> = None;
        for k4 in 0..=need / 4 {
            let rest = need - 4 * k4;
            if !rest.is_multiple_of(2) {
                continue;
            }
            let k2 = (rest / 2) as usize;
            if fours.len() < k4 as usize || twos.len() < k2 {
                continue;
            }
            let picked: Vec<(u32, NodeId, InstanceRef, u32)> = fours[..k4 as usize]
                .iter()
                .map(|c| (c.0, c.2, c.3, 4))
                .chain(twos[..k2].iter().map(|c| (c.0, c.2, c.3, 2)))
                .collect();
            let cost: u32 = picked.iter().map(|p| p.0).sum();
            if best.as_ref().is_none_or(|(c, _)| cost < *c) {
                best = Some((cost, picked.into_iter().map(|p| (p.1, p.2, p.3)).collect()));
            }
        }
        let (cost, picked) = best?;
        let moves: Vec<(NodeId, InstanceRef, NodeId)> =
            picked.iter().map(|p| (p.0, p.1, dst)).collect();
        // Donors emptied by the move add to the gain.
        let mut taken: BTreeMap<NodeId, u32> = BTreeMap::new();
        for p in &picked {
            *taken.entry(p.0).or_default() += p.2;
        }
        let emptied = taken
            .iter()
            .filter(|(&n, &w)| {
                let st = &self.nodes[n as usize];
                st.guests.is_empty() && st.slots.iter().map(|s| s.width).sum::<u32>() == w
            })
            .count() as u32;
        Some(Step {
            moves,
            cost,
            gain: 1 + emptied,
        })
    }
}

/// One reduction step of the slotted pass: slot moves `(from, anchor, to)`.
#[derive(Clone, Debug)]
struct Step {
    moves: Vec<(NodeId, InstanceRef, NodeId)>,
    /// Instance migrations.
    cost: u32,
    /// Open nodes closed (emptied or filled).
    gain: u32,
}

impl Step {
    /// Fewer migrations per closed node first, then more closed nodes, then
    /// the lexicographically smaller move list (determinism).
    fn better_than(&self, other: &Step) -> bool {
        let a = u64::from(self.cost) * u64::from(other.gain);
        let b = u64::from(other.cost) * u64::from(self.gain);
        a < b
            || (a == b
                && (self.gain > other.gain
                    || (self.gain == other.gain && self.moves < other.moves)))
    }
}
