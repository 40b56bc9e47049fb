//! The ABS state of one node (eq. 7) and the indexes that answer every
//! best-fit query of the engine.

use std::collections::BTreeSet;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::CompassEngine;
use crate::model::{slot_width, InstanceRef, JobId, NodeId, NodeSet};
use crate::placement::node_bits::NodeBits;

/// Node types of Section 4.2: empty, pool (1-GPU instances only) or slotted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Empty,
    Pool,
    Slotted,
}

/// A slot (Definition 1): a block of `width` GPUs holding one anchor
/// (Definition 2) and up to `width - g` 1-GPU fillers (Definition 3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub width: u32,
    pub anchor: InstanceRef,
    pub anchor_gpus: u32,
    pub fillers: Vec<InstanceRef>,
}

impl Slot {
    pub(super) fn vacancy(&self) -> u32 {
        self.width - self.anchor_gpus - self.fillers.len() as u32
    }
}

/// An instance outside its ABS place (overflow, stranded filler, or GPUs of a
/// job outside the model when `foreign`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guest {
    pub instance: InstanceRef,
    pub gpus: u32,
    pub foreign: bool,
    /// A 1-GPU guest of a node that pool members were moved into to close
    /// it (`compact/fill.rs`): while its node is full the guest repair
    /// does not move it (issue #11: the repair sent the members back).
    #[serde(default)]
    pub settled: bool,
}

/// The internal state `sigma_n` of one node (eq. 7).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    pub slots: Vec<Slot>,
    /// `P(n)`: 1-GPU instances of a pool node.
    pub pool: Vec<InstanceRef>,
    pub guests: Vec<Guest>,
}

impl NodeState {
    pub fn kind(&self) -> NodeKind {
        if !self.slots.is_empty() || (self.pool.is_empty() && !self.guests.is_empty()) {
            NodeKind::Slotted
        } else if !self.pool.is_empty() {
            NodeKind::Pool
        } else {
            NodeKind::Empty
        }
    }
    /// Every instance on the node with its GPUs: anchors, fillers, pool
    /// members and guests (foreign GPU use too).
    pub fn instances(&self) -> impl Iterator<Item = (InstanceRef, u32)> + '_ {
        self.slots
            .iter()
            .flat_map(|s| {
                std::iter::once((s.anchor, s.anchor_gpus)).chain(s.fillers.iter().map(|f| (*f, 1)))
            })
            .chain(self.pool.iter().map(|p| (*p, 1)))
            .chain(self.guests.iter().map(|g| (g.instance, g.gpus)))
    }
    pub(super) fn guest_gpus(&self) -> u32 {
        self.guests.iter().map(|g| g.gpus).sum()
    }
    /// GPUs in use on the node.
    pub fn used_gpus(&self) -> u32 {
        self.used()
    }
    pub(super) fn used(&self) -> u32 {
        self.slots
            .iter()
            .map(|s| s.anchor_gpus + s.fillers.len() as u32)
            .sum::<u32>()
            + self.pool.len() as u32
            + self.guest_gpus()
    }
    /// `D(n)`: GPUs not profiled as any slot and not held by a guest.
    pub(super) fn unprofiled(&self, cap: u32) -> u32 {
        let widths: u32 = self.slots.iter().map(|s| s.width).sum();
        cap.saturating_sub(widths + self.guest_gpus())
    }
}

/// What Compact moves off a slotted node as one unit: a whole slot (anchor
/// and fillers) or a guest.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Unit {
    Slot(InstanceRef),
    Guest(InstanceRef),
}

/// A movable unit of a node: the room it takes (`size`: slot width or guest
/// GPUs) and its cost in instance migrations.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Item {
    pub(super) unit: Unit,
    pub(super) size: u32,
    pub(super) cost: u32,
}

/// Where a node sits in the indexes (so it can be taken out again).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Keys {
    pub(super) kind: Option<NodeKind>,
    /// Slotted: unprofiled room `D(n)`; pool: member count.
    pub(super) level: u32,
    pub(super) usable: bool,
    pub(super) phys_free: u32,
    pub(super) vacant: Vec<InstanceRef>,
    pub(super) guests: Vec<InstanceRef>,
    /// Movable 1-GPU guests, but settled ones of a full node.
    pub(super) ones: Vec<InstanceRef>,
    /// Movable settled 1-GPU guests of a full node ([`Guest::settled`]).
    pub(super) settled: Vec<InstanceRef>,
    /// Movable multi-GPU guests, with their slot width.
    pub(super) multi: Vec<(u32, InstanceRef)>,
    /// Pool node with at least one movable member.
    pub(super) pool_source: bool,
    /// Open slotted node whose every unit is movable: the room its units take.
    pub(super) dissolvable: Option<u32>,
    /// Open slotted node: bit `v` set when some of its movable units take
    /// exactly `v` GPUs of room (a top-up donor of `v`).
    pub(super) gives: u32,
    /// Usable open slotted node: bit `v` set when receiving units of exactly
    /// `v` GPUs fills it (after evicting `v - D(n)` movable 1-GPU guests).
    pub(super) accepts: u32,
    /// Slotted node with a movable multi-GPU guest that becomes an anchor in
    /// place once movable units of this much room leave the node.
    pub(super) home_need: Option<u32>,
    /// The GPUs Compact could free on the node: those free or held by jobs
    /// free to move by their own verdict (a hold for tidying counts free,
    /// as the gate's trial lifts it) when Compact may take anything off the
    /// node at all, 0 on a full slotted node without guests, which no pass
    /// takes an instance from (`CompassEngine::lowerable_fit`).
    pub(super) lowerable: u32,
    /// A source `make_room` may empty (`compact/room.rs`): a usable node
    /// neither empty nor full whose every instance may move, by its free
    /// GPUs. Kept only with `CompassConfig::make_room`.
    pub(super) room_source: Option<u32>,
}

/// Subset sums (bit `v`) of the sizes of `items`, capped at `cap`.
pub(super) fn subset_sums(items: impl IntoIterator<Item = u32>, cap: u32) -> u32 {
    let mask = (1u32 << (cap + 1)) - 1;
    let mut sums = 1u32; // the empty subset
    for size in items {
        sums |= (sums << size) & mask;
    }
    sums & !1
}

impl CompassEngine {
    // ----- indexes -------------------------------------------------------

    /// The movable units of a slotted node (slots narrower than the node
    /// whose anchor and fillers are all movable; movable, non-foreign guests)
    /// and whether every unit of the node is movable.
    pub(super) fn units(&self, n: NodeId) -> (Vec<Item>, bool) {
        let st = &self.nodes[n as usize];
        let mut items = Vec::new();
        let mut all = true;
        for s in &st.slots {
            let movable = self.movable(s.anchor) && s.fillers.iter().all(|f| self.movable(*f));
            if movable && s.width < self.cap {
                items.push(Item {
                    unit: Unit::Slot(s.anchor),
                    size: s.width,
                    cost: 1 + s.fillers.len() as u32,
                });
            } else {
                all = false;
            }
        }
        for g in &st.guests {
            if !g.foreign && self.movable(g.instance) {
                items.push(Item {
                    unit: Unit::Guest(g.instance),
                    size: g.gpus,
                    cost: 1,
                });
            } else {
                all = false;
            }
        }
        (items, all)
    }

    pub(super) fn keys_of(&self, n: NodeId) -> Keys {
        let cap = self.cap;
        let st = &self.nodes[n as usize];
        let kind = st.kind();
        let used = st.used();
        let usable = self.usable.contains(n);
        let level = match kind {
            NodeKind::Slotted => st.unprofiled(cap),
            NodeKind::Pool => used,
            NodeKind::Empty => 0,
        };
        // A guest may sit in a slot's vacancy (adopted layouts): a vacancy is
        // open only while the node has a physically free GPU.
        let vacant = if used < cap && usable {
            st.slots
                .iter()
                .filter(|s| s.vacancy() > 0)
                .map(|s| s.anchor)
                .collect()
        } else {
            Vec::new()
        };
        let movable_guest = |g: &&Guest| !g.foreign && self.movable(g.instance);
        // A settled 1-GPU guest of a full node closes it (`compact/fill.rs`):
        // it is indexed apart, no donor of a top-up, and the guest repair
        // leaves it (saturate may still take it for a vacancy).
        let (mut ones, mut settled) = (Vec::new(), Vec::new());
        for g in st
            .guests
            .iter()
            .filter(movable_guest)
            .filter(|g| g.gpus == 1)
        {
            if g.settled && used == cap {
                settled.push(g.instance);
            } else {
                ones.push(g.instance);
            }
        }
        let multi = st
            .guests
            .iter()
            .filter(movable_guest)
            .filter(|g| g.gpus >= 2)
            .map(|g| (slot_width(g.gpus), g.instance))
            .collect::<Vec<_>>();
        let mut keys = Keys {
            kind: Some(kind),
            level,
            usable,
            phys_free: cap - used,
            vacant,
            guests: st.guests.iter().map(|g| g.instance).collect(),
            pool_source: kind == NodeKind::Pool && st.pool.iter().any(|i| self.movable(*i)),
            ..Keys::default()
        };
        if kind == NodeKind::Slotted {
            let (items, all) = self.units(n);
            let open = level > 0;
            if open && !items.is_empty() {
                keys.gives = subset_sums(items.iter().map(|i| i.size), cap);
                if all {
                    keys.dissolvable = Some(items.iter().map(|i| i.size).sum());
                }
            }
            if open && usable {
                for v in level..=(level + ones.len() as u32).min(cap) {
                    keys.accepts |= 1 << v;
                }
            }
            // A multi-GPU guest becomes an anchor in place when the node's
            // other units leave room for its slot (see `normalize`).
            let taken = cap - level;
            for &(w, g) in &multi {
                let gpus = st
                    .guests
                    .iter()
                    .find(|x| x.instance == g)
                    .map_or(0, |x| x.gpus);
                let need = (taken - gpus).saturating_sub(cap - w);
                let others = items
                    .iter()
                    .filter(|i| i.unit != Unit::Guest(g))
                    .map(|i| i.size);
                let sums = subset_sums(others, cap);
                if need > 0 {
                    if let Some(s) = (need..=cap).find(|s| sums & (1 << s) != 0) {
                        keys.home_need = Some(keys.home_need.map_or(s, |h: u32| h.min(s)));
                    }
                }
            }
        }
        keys.ones = ones;
        keys.settled = settled;
        keys.multi = multi;
        keys.lowerable = self.lowerable_of(n);
        if self.config.make_room
            && usable
            && used > 0
            && used < cap
            && st.instances().all(|(i, _)| self.movable(i))
        {
            keys.room_source = Some(cap - used);
        }
        keys
    }

    /// Node `n`'s [`Keys::lowerable`]. Compact takes instances only from
    /// pool nodes, guests, and open slotted nodes (unprofiled room `D(n) >
    /// 0`, so a free GPU); a slotted node whose every GPU is in use and
    /// that holds no guest gives nothing, and cannot become a source in the
    /// same Compact (with no free GPU it receives nothing, so it stays
    /// full and guest-free). Every other node may be emptied down to the
    /// GPUs of jobs that may not move by their own verdict: its reach in
    /// the occupancy ([`Occupancy::reach`], where holds for tidying do not
    /// count).
    ///
    /// [`Occupancy::reach`]: crate::placement::Occupancy::reach
    pub(super) fn lowerable_of(&self, n: NodeId) -> u32 {
        let st = &self.nodes[n as usize];
        if st.kind() == NodeKind::Slotted && st.guests.is_empty() && st.used() >= self.cap {
            return 0;
        }
        self.occ.reach(n)
    }

    /// Puts node `n` in the indexes by its current state, and marks it for
    /// the slotted pass. Destination indexes (`empty`, `slotted`, `pools`,
    /// `phys`, `vacant`, `accepts`) hold usable nodes only; source indexes
    /// hold every node (moving off a drained node is allowed). Only the
    /// parts of the node's keys that changed are touched ([`Index::update`]):
    /// a job held still or released (`set_movable`) often changes none of
    /// them (issue #11: the gate's trial releases and holds again hundreds
    /// of jobs held for tidying).
    ///
    /// Inside a trial, the node's keys before are journaled, so an undo
    /// puts them back as they were (`trial.rs`).
    pub(super) fn reindex(&mut self, n: NodeId) {
        let new = self.keys_of(n);
        let old = std::mem::replace(&mut self.keys[n as usize], new);
        self.ix.update(n, &old, &self.keys[n as usize]);
        self.ix.dirty.insert(n);
        self.journal_keys(n, old);
    }

    /// Gives node `n` the keys `new` in the indexes, unjournaled and
    /// unmarked for the slotted pass (an undo putting a node back).
    pub(super) fn put_keys(&mut self, n: NodeId, new: Keys) {
        let old = std::mem::replace(&mut self.keys[n as usize], new);
        self.ix.update(n, &old, &self.keys[n as usize]);
    }

    /// The indexes of the nodes in `nodes` as built afresh from their keys
    /// (the invariant check compares them with [`Index::restricted`] to the
    /// same nodes), the to-do set of the slotted pass copied.
    pub(super) fn index_afresh(&self, nodes: Range<NodeId>) -> Index {
        let mut ix = Index::new(self.cap);
        let none = Keys::default();
        for n in nodes.clone() {
            ix.update(n, &none, &self.keys[n as usize]);
        }
        ix.dirty = self.ix.dirty.range(nodes).copied().collect();
        ix
    }

    pub(super) fn ok_dest(&self, n: NodeId, allowed: Option<&NodeSet>) -> bool {
        self.usable.contains(n) && allowed.is_none_or(|a| a.contains(n))
    }

    /// The lowest-index node passing `ok` in the first level of `index`, in
    /// the order of `levels`: every best-fit query of the engine.
    pub(super) fn first_in(
        index: &[NodeBits],
        levels: impl IntoIterator<Item = u32>,
        ok: impl Fn(NodeId) -> bool,
    ) -> Option<NodeId> {
        levels
            .into_iter()
            .find_map(|l| index[l as usize].iter().find(|&n| ok(n)))
    }
}

/// Replaces a node's entries `old` by `new` in `index` (each made an
/// entry by `entry`), when they differ.
fn update_entries<K: PartialEq, E: Ord>(
    index: &mut BTreeSet<E>,
    old: &[K],
    new: &[K],
    entry: impl Fn(&K) -> E,
) {
    if old != new {
        for k in old {
            index.remove(&entry(k));
        }
        index.extend(new.iter().map(entry));
    }
}

/// Moves `n` in a by-level index from the levels set in mask `old` to
/// those set in mask `new`.
fn update_bits(index: &mut [NodeBits], n: NodeId, old: u32, new: u32) {
    for v in bits(old & !new) {
        index[v as usize].remove(n);
    }
    for v in bits(new & !old) {
        index[v as usize].insert(n);
    }
}

/// Moves `n` in a by-level index from level `old` to level `new` (`None`:
/// not in the index).
fn update_level(index: &mut [NodeBits], n: NodeId, old: Option<u32>, new: Option<u32>) {
    if old != new {
        if let Some(l) = old {
            index[l as usize].remove(n);
        }
        if let Some(l) = new {
            index[l as usize].insert(n);
        }
    }
}

/// The set bits of `mask`, lowest first (one step per set bit: every
/// re-indexing walks several masks, issue #11).
pub(super) fn bits(mut mask: u32) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let b = mask.trailing_zeros();
            mask &= mask - 1;
            b
        })
    })
}

/// Every index of the engine. Each query of Place and Compact is a lookup
/// here, so an event costs what it touches, not the cluster size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Index {
    /// Usable empty nodes.
    pub(super) empty: NodeBits,
    /// Usable slotted nodes by `D(n)`.
    pub(super) slotted: Vec<NodeBits>,
    /// Usable pool nodes by used GPUs (members and guests).
    pub(super) pools: Vec<NodeBits>,
    /// Usable nodes by physically free GPUs (overflow).
    pub(super) phys: Vec<NodeBits>,
    /// Open slot vacancies on usable nodes, by (node, anchor).
    pub(super) vacant: BTreeSet<(NodeId, InstanceRef)>,
    /// The nodes of `vacant`: a Place restricted to a large candidate set
    /// walks them a word at a time ([`NodeBits::within`]).
    pub(super) vacant_nodes: NodeBits,
    /// Every guest, by (node, instance).
    pub(super) guests: BTreeSet<(NodeId, InstanceRef)>,
    /// Movable 1-GPU guests, but settled ones of full nodes.
    pub(super) ones: BTreeSet<(NodeId, InstanceRef)>,
    /// Movable settled 1-GPU guests of full nodes ([`Guest::settled`]).
    pub(super) settled: BTreeSet<(NodeId, InstanceRef)>,
    /// Movable multi-GPU guests by (slot width, node, instance).
    pub(super) multi: BTreeSet<(u32, NodeId, InstanceRef)>,
    /// Pool nodes with a movable member, by used GPUs.
    pub(super) pool_sources: Vec<NodeBits>,
    /// Fully movable open slotted nodes by the room their units take.
    pub(super) dissolvable: Vec<NodeBits>,
    /// Open slotted nodes by each room their movable units can give.
    pub(super) gives: Vec<NodeBits>,
    /// Usable open slotted nodes by each room that fills them.
    pub(super) accepts: Vec<NodeBits>,
    /// Nodes whose multi-GPU guest gets home once this much room leaves.
    pub(super) home_need: Vec<NodeBits>,
    /// Nodes by the GPUs Compact could free on them (`Keys::lowerable`;
    /// 0 not indexed).
    pub(super) lowerable: Vec<NodeBits>,
    /// The sources `make_room` may empty, by free GPUs (`Keys::room_source`).
    pub(super) room_sources: Vec<NodeBits>,
    /// Nodes changed since the slotted pass last looked at them.
    pub(super) dirty: BTreeSet<NodeId>,
}

impl Index {
    /// Moves node `n`'s entries from its `old` keys to its `new` ones,
    /// touching only the parts that differ (`old` is `Keys::default()` for
    /// a node not indexed yet: it holds no entry).
    pub(super) fn update(&mut self, n: NodeId, old: &Keys, new: &Keys) {
        let place = |k: &Keys| (k.usable, k.kind, k.level, k.phys_free);
        if place(old) != place(new) {
            if old.usable {
                self.kind_set(old).remove(n);
                self.phys[old.phys_free as usize].remove(n);
            }
            if new.usable {
                self.kind_set(new).insert(n);
                self.phys[new.phys_free as usize].insert(n);
            }
        }
        let at = |a: &InstanceRef| (n, *a);
        update_entries(&mut self.vacant, &old.vacant, &new.vacant, at);
        if old.vacant.is_empty() != new.vacant.is_empty() {
            if new.vacant.is_empty() {
                self.vacant_nodes.remove(n);
            } else {
                self.vacant_nodes.insert(n);
            }
        }
        update_entries(&mut self.guests, &old.guests, &new.guests, at);
        update_entries(&mut self.ones, &old.ones, &new.ones, at);
        update_entries(&mut self.settled, &old.settled, &new.settled, at);
        update_entries(&mut self.multi, &old.multi, &new.multi, |&(w, g)| (w, n, g));
        let source = |k: &Keys| k.pool_source.then_some(k.level);
        update_level(&mut self.pool_sources, n, source(old), source(new));
        update_level(&mut self.dissolvable, n, old.dissolvable, new.dissolvable);
        update_level(&mut self.home_need, n, old.home_need, new.home_need);
        let lowerable = |k: &Keys| (k.lowerable > 0).then_some(k.lowerable);
        update_level(&mut self.lowerable, n, lowerable(old), lowerable(new));
        update_level(&mut self.room_sources, n, old.room_source, new.room_source);
        update_bits(&mut self.gives, n, old.gives, new.gives);
        update_bits(&mut self.accepts, n, old.accepts, new.accepts);
    }

    /// The entries of the nodes in `nodes` only: what a partial invariant
    /// check compares with the same nodes' index built afresh. Each set is
    /// read by range, so the cost is the entries of those nodes (and the
    /// levels), not the cluster's.
    pub(super) fn restricted(&self, nodes: Range<NodeId>) -> Index {
        let by_node = |s: &NodeBits| s.range(nodes.clone()).collect();
        let levels = |v: &[NodeBits]| v.iter().map(by_node).collect::<Vec<_>>();
        let first = InstanceRef {
            job: JobId(0),
            index: 0,
        };
        let pairs = |s: &BTreeSet<(NodeId, InstanceRef)>| {
            s.range((nodes.start, first)..(nodes.end, first))
                .copied()
                .collect::<BTreeSet<_>>()
        };
        // slot widths are at most the node's GPUs: one level each
        let multi = (0..self.slotted.len() as u32)
            .flat_map(|w| {
                self.multi
                    .range((w, nodes.start, first)..(w, nodes.end, first))
            })
            .copied()
            .collect();
        Index {
            empty: by_node(&self.empty),
            slotted: levels(&self.slotted),
            pools: levels(&self.pools),
            phys: levels(&self.phys),
            vacant: pairs(&self.vacant),
            vacant_nodes: by_node(&self.vacant_nodes),
            guests: pairs(&self.guests),
            ones: pairs(&self.ones),
            settled: pairs(&self.settled),
            multi,
            pool_sources: levels(&self.pool_sources),
            dissolvable: levels(&self.dissolvable),
            gives: levels(&self.gives),
            accepts: levels(&self.accepts),
            home_need: levels(&self.home_need),
            lowerable: levels(&self.lowerable),
            room_sources: levels(&self.room_sources),
            dirty: self.dirty.range(nodes.clone()).copied().collect(),
        }
    }

    /// The destination index of a usable node's kind and level.
    fn kind_set(&mut self, k: &Keys) -> &mut NodeBits {
        match k.kind.expect("a usable node's keys have a kind") {
            NodeKind::Empty => &mut self.empty,
            NodeKind::Slotted => &mut self.slotted[k.level as usize],
            NodeKind::Pool => &mut self.pools[k.level as usize],
        }
    }

    pub(super) fn new(cap: u32) -> Self {
        let levels = vec![NodeBits::new(); cap as usize + 1];
        Self {
            empty: NodeBits::new(),
            slotted: levels.clone(),
            pools: levels.clone(),
            phys: levels.clone(),
            vacant: BTreeSet::new(),
            vacant_nodes: NodeBits::new(),
            guests: BTreeSet::new(),
            ones: BTreeSet::new(),
            settled: BTreeSet::new(),
            multi: BTreeSet::new(),
            pool_sources: levels.clone(),
            dissolvable: levels.clone(),
            gives: levels.clone(),
            accepts: levels.clone(),
            home_need: levels.clone(),
            lowerable: levels.clone(),
            room_sources: levels,
            dirty: BTreeSet::new(),
        }
    }
}
