//! The slotted pass of Compact: ours (Lemma A.4 as it should be, with
//! guests, pinned jobs and drained nodes) and the paper's literal
//! `BestFitDrain`, kept to show where it fails.
//!
//! Our pass works on *units* (a slot with its fillers, or a guest) and on
//! the room `D(n)` they take. While some node changed since it was last
//! looked at (`dirty`), it looks for a step involving that node, each found
//! by index lookups (`state::Index`), never by a scan of the open nodes:
//!
//! - **dissolve** `x`: every unit of a fully movable open node moves into
//!   other open nodes, best fit, largest first (closes `x`);
//! - **dissolve into** `x`: a fully movable open node whose units fit in
//!   `D(x)` moves there (closes it, and `x` if that fills it);
//! - **top up** `x`: movable units of one other node taking exactly the room
//!   that fills `x`, after moving out `x`'s movable 1-GPU guests when the
//!   room is odd (closes `x`); or `x` as the donor of such a top-up;
//! - **home** a multi-GPU guest of `x` in place: move out the cheapest set
//!   of `x`'s other units that leaves room for the guest's slot, into one
//!   open node (or `x` as that node). Taken only when no closing step exists.
//!
//! Each closing step closes a node and adds no guest; each homing step
//! removes a guest and opens no node, so the pass ends. Between any two
//! open nodes whose units are all movable one of these steps exists
//! (docs/compass-corrections.md), and both nodes of a pair are looked at
//! whenever either changes, so no such pair survives the pass.

use std::collections::BTreeMap;

use super::super::state::{bits, Item, Unit};
use super::super::{CompassEngine, NodeKind, Slot};
use super::Veto;
use crate::model::{InstanceRef, JobId, Migration, NodeId};

/// Candidates looked at per index level: any node of a level fits the
/// lookup, so two (one may be the node itself) are enough.
const PER_LEVEL: usize = 2;

impl CompassEngine {
    /// Corrected slotted pass (docs/compass-corrections.md, section 1).
    pub(in crate::placement::compass) fn compact_slotted(
        &mut self,
        out: &mut Vec<Migration>,
        veto: &mut Veto<'_>,
    ) {
        // Every step closes a node or homes a guest; the guard only protects
        // slurmctld from a bug, it never binds on a correct state.
        let mut guard = 4 * (self.nodes.len() + self.ix.guests.len()) + 64;
        while let Some(x) = self.ix.dirty.pop_first() {
            let Some(step) = self.step_for(x) else {
                continue;
            };
            // A step is made whole or not at all: a refused job is held
            // (its nodes look different now) and `x` is looked at again.
            let moves: Vec<(JobId, NodeId)> = step
                .moves
                .iter()
                .filter(|(from, _, to)| from != to)
                .flat_map(|&(from, unit, to)| {
                    let jobs = match unit {
                        Unit::Slot(anchor) => self.jobs_of_slot(from, anchor),
                        Unit::Guest(inst) => vec![inst.job],
                    };
                    jobs.into_iter().map(move |j| (j, to))
                })
                .collect();
            if self.refuses(veto, &moves) {
                if veto.exhausted() {
                    return;
                }
            } else {
                let mut got_guests: Vec<NodeId> = Vec::new();
                for (from, unit, to) in step.moves {
                    self.move_unit(from, unit, to, out);
                    if matches!(unit, Unit::Guest(_)) && !got_guests.contains(&to) {
                        got_guests.push(to);
                    }
                }
                // A node a step filled with guests keeps its 1-GPU ones
                // (settled, as the fill pass does): the guest repair would
                // send one to the pool and open the node again, and the
                // next top-up fill it with another (issue #11: the two
                // took turns until Compact's rounds ran out, and the next
                // Compact went on moving).
                for n in got_guests {
                    if self.occ.free(n) == 0 {
                        self.settle(n);
                    }
                }
            }
            // The step may not have involved `x` (a better home for a
            // partner): look at `x` again.
            self.ix.dirty.insert(x);
            guard -= 1;
            if guard == 0 {
                return;
            }
        }
    }

    pub(in crate::placement::compass) fn slot_movable(&self, s: &Slot) -> bool {
        self.movable(s.anchor) && s.fillers.iter().all(|f| self.movable(*f)) && s.width < self.cap
    }

    /// Moves one unit; a guest becomes an anchor where its slot fits, a pool
    /// member on a pool node, a guest elsewhere.
    fn move_unit(&mut self, from: NodeId, unit: Unit, to: NodeId, out: &mut Vec<Migration>) {
        match unit {
            Unit::Slot(anchor) => self.move_slot(from, anchor, to, out),
            Unit::Guest(inst) => {
                let g = self.meta.get(&inst.job).map_or(1, |m| m.gpus);
                let st = &self.nodes[to as usize];
                let dest = if g >= 2 && st.unprofiled(self.cap) >= crate::model::slot_width(g) {
                    super::super::Dest::NewSlot(to)
                } else if g == 1 && st.kind() == NodeKind::Pool {
                    super::super::Dest::Pool(to)
                } else {
                    super::super::Dest::Guest(to)
                };
                self.migrate(inst, from, dest, out);
            }
        }
    }

    fn room(&self, n: NodeId) -> u32 {
        self.keys[n as usize].level
    }

    /// The best step involving node `x`, if any.
    fn step_for(&self, x: NodeId) -> Option<Step> {
        let k = &self.keys[x as usize];
        if k.kind != Some(NodeKind::Slotted) {
            return None;
        }
        let d = k.level;
        let mut best: Option<Step> = None;
        let consider = |best: &mut Option<Step>, s: Option<Step>| {
            if let Some(s) = s {
                if best.as_ref().is_none_or(|b| s.better_than(b)) {
                    *best = Some(s);
                }
            }
        };
        if k.dissolvable.is_some() {
            consider(&mut best, self.dissolve(x));
        }
        if k.usable && d > 0 {
            for s in (1..=d).rev() {
                for a in self.ix.dissolvable[s as usize].iter().take(PER_LEVEL) {
                    if a != x {
                        // `a` may have a better home than `x` (one it fills).
                        consider(&mut best, self.dissolve_into(a, x));
                        consider(&mut best, self.dissolve(a));
                    }
                }
            }
        }
        for v in bits(k.accepts) {
            for a in self.ix.gives[v as usize].iter().take(PER_LEVEL) {
                if a != x {
                    consider(&mut best, self.top_up(x, a, v));
                }
            }
        }
        for v in bits(k.gives) {
            for b in self.ix.accepts[v as usize].iter().take(PER_LEVEL) {
                if b != x {
                    consider(&mut best, self.top_up(b, x, v));
                }
            }
        }
        if best.is_some() {
            return best;
        }
        // No node can close: bring a guest home in place.
        if let Some(s) = k.home_need {
            let dst = Self::first_in(&self.ix.slotted, s..=self.cap, |m| m != x);
            consider(&mut best, dst.and_then(|dst| self.home(x, s, dst)));
        }
        if k.usable && d > 0 {
            for s in 1..=d {
                for a in self.ix.home_need[s as usize].iter().take(PER_LEVEL) {
                    if a != x {
                        consider(&mut best, self.home(a, s, x));
                    }
                }
            }
        }
        best
    }

    /// The usable open node other than `x` with the least room `>= size`,
    /// with `overlay` holding the room left on nodes already planned into.
    fn best_fit(&self, size: u32, x: NodeId, overlay: &BTreeMap<NodeId, u32>) -> Option<NodeId> {
        let planned = overlay
            .iter()
            .filter(|(_, &r)| r >= size)
            .map(|(&n, &r)| (r, n))
            .min();
        let indexed = (size..self.cap).find_map(|d| {
            self.ix.slotted[d as usize]
                .iter()
                .find(|&n| n != x && !overlay.contains_key(&n))
                .map(|n| (d, n))
        });
        planned.into_iter().chain(indexed).min().map(|(_, n)| n)
    }

    /// Empties the fully movable open node `x` into other open nodes,
    /// largest unit first, each best fit.
    fn dissolve(&self, x: NodeId) -> Option<Step> {
        let (mut items, all) = self.units(x);
        if !all || items.is_empty() {
            return None;
        }
        items.sort_by(|a, b| b.size.cmp(&a.size).then(a.unit.cmp(&b.unit)));
        let mut overlay: BTreeMap<NodeId, u32> = BTreeMap::new();
        let mut moves = Vec::new();
        let mut cost = 0;
        for it in &items {
            let to = self.best_fit(it.size, x, &overlay)?;
            let left = overlay.get(&to).copied().unwrap_or_else(|| self.room(to)) - it.size;
            overlay.insert(to, left);
            moves.push((x, it.unit, to));
            cost += it.cost;
        }
        let filled = overlay.values().filter(|r| **r == 0).count() as u32;
        Some(Step {
            moves,
            cost,
            gain: 1 + filled,
        })
    }

    /// Every unit of the fully movable node `a` into `x`.
    fn dissolve_into(&self, a: NodeId, x: NodeId) -> Option<Step> {
        let (items, all) = self.units(a);
        let size: u32 = items.iter().map(|i| i.size).sum();
        if !all || items.is_empty() || size > self.room(x) {
            return None;
        }
        Some(Step {
            moves: items.iter().map(|i| (a, i.unit, x)).collect(),
            cost: items.iter().map(|i| i.cost).sum(),
            gain: 1 + u32::from(size == self.room(x)),
        })
    }

    /// Fills `dst` with movable units of `donor` taking exactly `v` GPUs of
    /// room, after moving `v - D(dst)` of `dst`'s movable 1-GPU guests out
    /// (to the donor when it has free GPUs and may receive instances, else
    /// best fit elsewhere: a drained donor gives units but takes none).
    fn top_up(&self, dst: NodeId, donor: NodeId, v: u32) -> Option<Step> {
        let d = self.room(dst);
        let evict = v.checked_sub(d)?;
        let ones = &self.keys[dst as usize].ones;
        if ones.len() < evict as usize {
            return None;
        }
        let (items, all) = self.units(donor);
        let (cost, picked) = cheapest_subset(&items, v)?;
        let mut moves = Vec::new();
        let mut donor_free = if self.usable.contains(donor) {
            self.occ.free(donor)
        } else {
            0
        };
        let mut landed_on_donor = false;
        let mut overlay: BTreeMap<NodeId, u32> = BTreeMap::new();
        for &g in &ones[..evict as usize] {
            let to = if donor_free > 0 {
                donor_free -= 1;
                landed_on_donor = true;
                donor
            } else {
                self.spare_gpu(dst, &mut overlay)?
            };
            moves.push((dst, Unit::Guest(g), to));
        }
        let emptied = all && picked.len() == items.len() && !landed_on_donor;
        moves.extend(picked.iter().map(|i| (donor, i.unit, dst)));
        Some(Step {
            moves,
            cost: cost + evict,
            gain: 1 + u32::from(emptied),
        })
    }

    /// A usable, non-empty node other than `x` with a free GPU (fullest
    /// first), counting GPUs already planned in `overlay`.
    fn spare_gpu(&self, x: NodeId, overlay: &mut BTreeMap<NodeId, u32>) -> Option<NodeId> {
        let to = (1..self.cap).find_map(|f| {
            self.ix.phys[f as usize]
                .iter()
                .find(|&n| n != x && overlay.get(&n).copied().unwrap_or(0) < f)
        })?;
        *overlay.entry(to).or_default() += 1;
        Some(to)
    }

    /// Moves out of `x` the cheapest set of its movable units taking `s`
    /// GPUs of room, none of them the guest to bring home, into `dst`.
    fn home(&self, x: NodeId, s: u32, dst: NodeId) -> Option<Step> {
        if self.room(dst) < s || dst == x {
            return None;
        }
        let k = &self.keys[x as usize];
        let homing: Vec<InstanceRef> = k.multi.iter().map(|m| m.1).collect();
        let (items, _) = self.units(x);
        // Try each guest: the units that may leave are the others.
        let mut best: Option<(u32, Vec<Item>)> = None;
        for g in homing {
            let others: Vec<Item> = items
                .iter()
                .copied()
                .filter(|i| i.unit != Unit::Guest(g))
                .collect();
            if let Some(c) = cheapest_subset(&others, s) {
                if best.as_ref().is_none_or(|b| c.0 < b.0) {
                    best = Some(c);
                }
            }
        }
        let (cost, picked) = best?;
        Some(Step {
            moves: picked.iter().map(|i| (x, i.unit, dst)).collect(),
            cost,
            gain: 1,
        })
    }

    /// The paper's `BestFitDrain` for slot class `width` (Section 4.3.4
    /// pseudocode, lines 3-15), literally: hosts are slotted nodes with
    /// `0 < count_C(n) < cap_C(n)`, `room_C(n) = floor(D(n) / width)`.
    pub(in crate::placement::compass) fn paper_best_fit_drain(
        &mut self,
        width: u32,
        out: &mut Vec<Migration>,
        veto: &mut Veto<'_>,
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
                .filter(|s| s.width == width && self.slot_movable(s))
                .map(|s| s.anchor)
                .collect();
            for a in items {
                let dst = hosts[1..]
                    .iter()
                    .copied()
                    .filter(|&n| room(self, n) >= 1)
                    .min_by_key(|&n| (room(self, n), n));
                let Some(dst) = dst else { break };
                let moves: Vec<(JobId, NodeId)> = self
                    .jobs_of_slot(src, a)
                    .into_iter()
                    .map(|j| (j, dst))
                    .collect();
                if self.refuses(veto, &moves) {
                    if veto.exhausted() {
                        return;
                    }
                    continue;
                }
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
}

/// The cheapest subset of `items` (in migrations) whose sizes sum to exactly
/// `v`; ties keep the earlier items.
fn cheapest_subset(items: &[Item], v: u32) -> Option<(u32, Vec<Item>)> {
    let v = v as usize;
    let mut best: Vec<Option<(u32, Vec<usize>)>> = vec![None; v + 1];
    best[0] = Some((0, Vec::new()));
    for (i, it) in items.iter().enumerate() {
        let size = it.size as usize;
        for s in (size..=v).rev() {
            let Some((c, set)) = &best[s - size] else {
                continue;
            };
            let cost = c + it.cost;
            if best[s].as_ref().is_none_or(|(bc, _)| cost < *bc) {
                let mut set = set.clone();
                set.push(i);
                best[s] = Some((cost, set));
            }
        }
    }
    let (cost, set) = best[v].take()?;
    Some((cost, set.into_iter().map(|i| items[i]).collect()))
}

/// One step of the slotted pass: units moved `(from, unit, to)`, in order.
#[derive(Clone, Debug)]
struct Step {
    moves: Vec<(NodeId, Unit, NodeId)>,
    /// Instance migrations.
    cost: u32,
    /// Open nodes closed (emptied or filled), or guests brought home.
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
