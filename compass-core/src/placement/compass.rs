//! The COMPASS-ABS engine: the Anchor-Based Space of paper Section 4.2 kept
//! compact by the Place, Remove and Compact operators of Section 4.3 and
//! Algorithm 1, with the corrections described in `docs/compass-corrections.md`:
//!
//! 1. **Slotted Compact that really holds Theorem 1.** The paper's width-4 and
//!    width-2 `BestFitDrain` passes only consider nodes that already hold an
//!    item of the pass's class, so `{2,2,2}` and `{4}` (or `{4,2}` and `{4}`,
//!    the tightness example of Appendix A) stay two partial slotted nodes.
//!    Our slotted pass reduces the set of open slotted nodes pairwise, by the
//!    cheapest move set (fewest instance migrations) that empties one open
//!    node or fills one, until at most one is left.
//! 2. **Lazy fillers.** When an anchor leaves, its fillers stay where they are
//!    (relabelled, no migration) and the saturation step of Compact decides
//!    where they go; nothing is ever dropped, even when no vacancy, pool room
//!    or empty node exists.
//! 3. **Overflow (small clusters).** When the structured Place finds no room,
//!    an instance may sit in any physically free GPUs as a *guest*; Compact
//!    moves guests back into the ABS as soon as that costs no new node.
//! 4. **Immovable jobs.** Jobs that are not movable (not `--resumable`, in a
//!    cool-down, or outside the `w x g` model) are never migrated; the passes
//!    plan around them.
//!
//! Cost: every query goes through indexes keyed by free room (BTree sets), so
//! Place and Remove are `O(G log N)` per instance and Compact touches only the
//! open (non-full) nodes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, Result};
use crate::model::{
    slot_width, Admission, ClusterSpec, InstanceRef, JobId, JobRequest, Migration, NodeId, NodeSet,
};
use crate::placement::{Occupancy, PlacementPolicy};

/// Tunables of the engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompassConfig {
    /// Let an instance overflow into physically free GPUs outside its ABS
    /// place when the structured placement finds no room (small clusters).
    pub overflow: bool,
    /// Run Compact after every arrival and departure (Algorithm 1, lines 9
    /// and 16). Off only for experiments.
    pub compact: bool,
    /// Which slotted pass Compact runs: ours, or the paper's literal
    /// width-4/width-2 `BestFitDrain` (kept to show where it fails).
    pub slotted_pass: SlottedPass,
}

/// The slotted pass of Compact.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlottedPass {
    /// Pairwise reduction of open slotted nodes (docs/compass-corrections.md).
    #[default]
    Corrected,
    /// Section 4.3.4 as printed: `BestFitDrain` over width 4, then width 2,
    /// among nodes that already hold an item of the class.
    Paper,
}

impl Default for CompassConfig {
    fn default() -> Self {
        Self {
            overflow: true,
            compact: true,
            slotted_pass: SlottedPass::Corrected,
        }
    }
}

/// What `adopt` found when comparing the resource manager's allocation with
/// the engine's own plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdoptOutcome {
    /// Every instance landed where the engine would have put it.
    Matched,
    /// The job landed elsewhere; the engine adopted that layout as it is.
    Diverged,
}

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
    fn vacancy(&self) -> u32 {
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
    fn guest_gpus(&self) -> u32 {
        self.guests.iter().map(|g| g.gpus).sum()
    }
    fn used(&self) -> u32 {
        self.slots
            .iter()
            .map(|s| s.anchor_gpus + s.fillers.len() as u32)
            .sum::<u32>()
            + self.pool.len() as u32
            + self.guest_gpus()
    }
    /// `D(n)`: GPUs not profiled as any slot and not held by a guest.
    fn unprofiled(&self, cap: u32) -> u32 {
        let widths: u32 = self.slots.iter().map(|s| s.width).sum();
        cap.saturating_sub(widths + self.guest_gpus())
    }
}

/// Where a node sits in the indexes (so it can be taken out again).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Keys {
    kind: Option<NodeKind>,
    /// Slotted: unprofiled room `D(n)`; pool: member count.
    level: u32,
    phys_free: u32,
    vacant: Vec<InstanceRef>,
    guests: Vec<InstanceRef>,
}

#[derive(Clone, Debug)]
struct JobMeta {
    gpus: u32,
    movable: bool,
    foreign: bool,
}

/// Nodes saved before a tentative placement, to roll it back.
#[derive(Default)]
struct Undo {
    saved: BTreeMap<NodeId, NodeState>,
}

/// The COMPASS-ABS engine.
#[derive(Clone, Debug)]
pub struct CompassEngine {
    cap: u32,
    config: CompassConfig,
    occ: Occupancy,
    nodes: Vec<NodeState>,
    keys: Vec<Keys>,
    meta: HashMap<JobId, JobMeta>,
    /// Nodes that may receive instances (not down, drained or faulty).
    usable: NodeSet,
    empty: BTreeSet<NodeId>,
    /// Slotted nodes by `D(n)`.
    slotted: Vec<BTreeSet<NodeId>>,
    /// Pool nodes by used GPUs (members and guests).
    pools: Vec<BTreeSet<NodeId>>,
    /// Nodes by physically free GPUs (overflow).
    phys: Vec<BTreeSet<NodeId>>,
    /// Slots with an open vacancy, by (node, anchor).
    vacant: BTreeSet<(NodeId, InstanceRef)>,
    /// Guests by (node, instance).
    guests: BTreeSet<(NodeId, InstanceRef)>,
    /// Instance migrations performed so far.
    migrations_total: u64,
    /// Admissions that the resource manager placed differently from the plan.
    divergences: u64,
}

impl CompassEngine {
    pub fn new(spec: ClusterSpec, config: CompassConfig) -> Self {
        let cap = spec.gpus_per_node;
        let levels = cap as usize + 1;
        let mut e = Self {
            cap,
            config,
            occ: Occupancy::new(spec),
            nodes: vec![NodeState::default(); spec.nodes as usize],
            keys: vec![Keys::default(); spec.nodes as usize],
            meta: HashMap::new(),
            usable: NodeSet::full(spec.nodes),
            empty: BTreeSet::new(),
            slotted: vec![BTreeSet::new(); levels],
            pools: vec![BTreeSet::new(); levels],
            phys: vec![BTreeSet::new(); levels],
            vacant: BTreeSet::new(),
            guests: BTreeSet::new(),
            migrations_total: 0,
            divergences: 0,
        };
        for n in 0..spec.nodes {
            e.reindex(n);
        }
        e
    }

    pub fn config(&self) -> &CompassConfig {
        &self.config
    }

    /// The structural state of one node.
    pub fn node(&self, n: NodeId) -> &NodeState {
        &self.nodes[n as usize]
    }

    /// Instance migrations performed since start.
    pub fn migrations_total(&self) -> u64 {
        self.migrations_total
    }

    /// Admissions the resource manager placed differently from the plan.
    pub fn divergences(&self) -> u64 {
        self.divergences
    }

    /// Number of guests (instances outside the ABS, Section 4.2).
    pub fn guest_count(&self) -> usize {
        self.guests.len()
    }

    /// Non-full slotted and pool nodes: the two counts Theorem 1 bounds by 1.
    pub fn non_full_by_kind(&self) -> (u32, u32) {
        let mut slotted = 0;
        let mut pool = 0;
        for (n, st) in self.nodes.iter().enumerate() {
            if self.occ.used(n as NodeId) == self.cap {
                continue;
            }
            match st.kind() {
                NodeKind::Slotted => slotted += 1,
                NodeKind::Pool => pool += 1,
                NodeKind::Empty => {}
            }
        }
        (slotted, pool)
    }

    /// Marks a node usable or not for new instances and migrations (Slurm:
    /// down, drained, faulty). Running instances stay where they are.
    pub fn set_node_usable(&mut self, n: NodeId, usable: bool) -> Result<()> {
        self.occ.spec().check_node(n)?;
        if usable {
            self.usable.insert(n);
        } else {
            self.usable.remove(n);
        }
        Ok(())
    }

    /// Marks a running job movable or not (cool-down, not resumable).
    pub fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        let meta = self.meta.get_mut(&job).ok_or(CoreError::UnknownJob(job))?;
        if meta.foreign {
            return Ok(());
        }
        meta.movable = movable;
        self.occ.set_movable(job, movable)
    }

    fn movable(&self, inst: InstanceRef) -> bool {
        self.meta.get(&inst.job).is_some_and(|m| m.movable)
    }

    // ----- indexes -------------------------------------------------------

    fn keys_of(&self, n: NodeId) -> Keys {
        let st = &self.nodes[n as usize];
        let kind = st.kind();
        let used = st.used();
        let level = match kind {
            NodeKind::Slotted => st.unprofiled(self.cap),
            NodeKind::Pool => used,
            NodeKind::Empty => 0,
        };
        // A guest may sit in a slot's vacancy (adopted layouts): a vacancy is
        // open only while the node has a physically free GPU.
        let vacant = if used < self.cap {
            st.slots
                .iter()
                .filter(|s| s.vacancy() > 0)
                .map(|s| s.anchor)
                .collect()
        } else {
            Vec::new()
        };
        Keys {
            kind: Some(kind),
            level,
            phys_free: self.cap - used,
            vacant,
            guests: st.guests.iter().map(|g| g.instance).collect(),
        }
    }

    /// Takes node `n` out of every index and puts it back by its current state.
    fn reindex(&mut self, n: NodeId) {
        let old = std::mem::take(&mut self.keys[n as usize]);
        if let Some(kind) = old.kind {
            match kind {
                NodeKind::Empty => self.empty.remove(&n),
                NodeKind::Slotted => self.slotted[old.level as usize].remove(&n),
                NodeKind::Pool => self.pools[old.level as usize].remove(&n),
            };
            self.phys[old.phys_free as usize].remove(&n);
            for a in &old.vacant {
                self.vacant.remove(&(n, *a));
            }
            for g in &old.guests {
                self.guests.remove(&(n, *g));
            }
        }
        let new = self.keys_of(n);
        match new.kind.expect("keys_of sets kind") {
            NodeKind::Empty => self.empty.insert(n),
            NodeKind::Slotted => self.slotted[new.level as usize].insert(n),
            NodeKind::Pool => self.pools[new.level as usize].insert(n),
        };
        self.phys[new.phys_free as usize].insert(n);
        for a in &new.vacant {
            self.vacant.insert((n, *a));
        }
        for g in &new.guests {
            self.guests.insert((n, *g));
        }
        self.keys[n as usize] = new;
    }

    fn ok_dest(&self, n: NodeId, allowed: Option<&NodeSet>) -> bool {
        self.usable.contains(n) && allowed.is_none_or(|a| a.contains(n))
    }

    // ----- Place (Section 4.3.2) -----------------------------------------

    /// The lowest-index node passing `ok` in the first level of `index`, in
    /// the order of `levels`: every best-fit query of the engine.
    fn first_in(
        index: &[BTreeSet<NodeId>],
        levels: impl IntoIterator<Item = u32>,
        ok: impl Fn(NodeId) -> bool,
    ) -> Option<NodeId> {
        levels
            .into_iter()
            .find_map(|l| index[l as usize].iter().copied().find(|&n| ok(n)))
    }

    /// Where one arriving instance of `g` GPUs goes (without installing it).
    fn choose(&self, g: u32, allowed: Option<&NodeSet>) -> Option<Dest> {
        let cap = self.cap;
        let ok = |n: NodeId| self.ok_dest(n, allowed);
        let empty = || self.empty.iter().copied().find(|&n| ok(n));
        if g >= 2 {
            // Best fit over slotted nodes with D(n) >= w (Place, lines 4-5),
            // else open an empty node (line 6).
            let slotted = Self::first_in(&self.slotted, slot_width(g)..cap, ok);
            if let Some(n) = slotted.or_else(empty) {
                return Some(Dest::NewSlot(n));
            }
        } else {
            // Slot vacancy first (line 11), then the fullest non-full pool
            // node (line 12), then a new pool node (line 13).
            if let Some(&(n, a)) = self.vacant.iter().find(|(n, _)| ok(*n)) {
                return Some(Dest::Filler(n, a));
            }
            if let Some(n) = Self::first_in(&self.pools, (1..cap).rev(), ok).or_else(empty) {
                return Some(Dest::Pool(n));
            }
        }
        // Correction 3: any physically free GPUs, best fit.
        self.config
            .overflow
            .then(|| Self::first_in(&self.phys, g..=cap, ok))
            .flatten()
            .map(Dest::Guest)
    }

    fn save(&self, undo: &mut Undo, n: NodeId) {
        undo.saved
            .entry(n)
            .or_insert_with(|| self.nodes[n as usize].clone());
    }

    fn install(&mut self, inst: InstanceRef, g: u32, dest: Dest) -> NodeId {
        let n = dest.node();
        let st = &mut self.nodes[n as usize];
        match dest {
            Dest::NewSlot(_) => {
                st.slots.push(Slot {
                    width: slot_width(g),
                    anchor: inst,
                    anchor_gpus: g,
                    fillers: Vec::new(),
                });
            }
            Dest::Filler(_, a) => {
                if let Some(s) = st.slots.iter_mut().find(|s| s.anchor == a) {
                    s.fillers.push(inst);
                }
            }
            Dest::Pool(_) => st.pool.push(inst),
            Dest::Guest(_) => st.guests.push(Guest {
                instance: inst,
                gpus: g,
                foreign: false,
            }),
        }
        self.reindex(n);
        n
    }

    fn rollback(&mut self, undo: Undo) {
        for (n, st) in undo.saved {
            self.nodes[n as usize] = st;
            self.reindex(n);
        }
    }

    /// Tentatively installs every instance; on failure rolls back and returns None.
    fn place_instances(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
        undo: &mut Undo,
    ) -> Option<Vec<NodeId>> {
        let g = job.shape.gpus;
        let mut nodes = Vec::with_capacity(job.shape.instances as usize);
        for k in 0..job.shape.instances {
            let dest = self.choose(g, allowed)?;
            self.save(undo, dest.node());
            nodes.push(self.install(
                InstanceRef {
                    job: job.id,
                    index: k,
                },
                g,
                dest,
            ));
        }
        Some(nodes)
    }

    fn check_new(&self, job: &JobRequest) -> Result<()> {
        self.occ.spec().check_job(job)?;
        if self.meta.contains_key(&job.id) {
            return Err(CoreError::DuplicateJob(job.id));
        }
        Ok(())
    }

    /// Dry run of [`PlacementPolicy::place`] without Compact: the node of each
    /// instance. The state is left exactly as it was.
    pub fn plan(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
    ) -> Result<Option<Vec<NodeId>>> {
        self.check_new(job)?;
        let mut undo = Undo::default();
        let nodes = self.place_instances(job, allowed, &mut undo);
        self.rollback(undo);
        Ok(nodes)
    }

    // ----- adopting what the resource manager did -------------------------

    /// Records a job exactly where the resource manager put it (`nodes[k]`
    /// hosts instance `k`), whether or not the engine planned it so. Each
    /// instance takes its ABS role on that node when it can (anchor, filler,
    /// pool member) and is a guest otherwise. Does not run Compact.
    pub fn adopt(&mut self, job: &JobRequest, nodes: &[NodeId]) -> Result<AdoptOutcome> {
        self.check_new(job)?;
        if nodes.len() != job.shape.instances as usize {
            return Err(CoreError::BadLayout {
                job: job.id,
                why: format!(
                    "{} nodes given for {} instances",
                    nodes.len(),
                    job.shape.instances
                ),
            });
        }
        let planned = self.plan(job, None)?;
        self.occ.add(job, nodes.to_vec())?;
        let g = job.shape.gpus;
        for (k, &n) in nodes.iter().enumerate() {
            let inst = InstanceRef {
                job: job.id,
                index: k as u32,
            };
            let dest = self.role_on(n, g);
            self.install(inst, g, dest);
        }
        self.meta.insert(
            job.id,
            JobMeta {
                gpus: g,
                movable: job.movable,
                foreign: false,
            },
        );
        let matched = planned.is_some_and(|mut p| {
            let mut a = nodes.to_vec();
            p.sort_unstable();
            a.sort_unstable();
            p == a
        });
        if matched {
            Ok(AdoptOutcome::Matched)
        } else {
            self.divergences += 1;
            Ok(AdoptOutcome::Diverged)
        }
    }

    /// The best ABS role for an instance of `g` GPUs that must sit on `n`.
    fn role_on(&self, n: NodeId, g: u32) -> Dest {
        let st = &self.nodes[n as usize];
        match (st.kind(), g >= 2) {
            (NodeKind::Empty, true) => Dest::NewSlot(n),
            (NodeKind::Empty, false) => Dest::Pool(n),
            (NodeKind::Slotted, true) if st.unprofiled(self.cap) >= slot_width(g) => {
                Dest::NewSlot(n)
            }
            (NodeKind::Slotted, false) => match st.slots.iter().find(|s| s.vacancy() > 0) {
                Some(s) => Dest::Filler(n, s.anchor),
                None => Dest::Guest(n),
            },
            (NodeKind::Pool, false) => Dest::Pool(n),
            _ => Dest::Guest(n),
        }
    }

    /// Records GPUs used by a job outside the `w x g` model (e.g. `--gpus=3`
    /// spread over nodes): immovable guests, never migrated.
    pub fn adopt_foreign(&mut self, job: JobId, per_node_gpus: &[(NodeId, u32)]) -> Result<()> {
        if self.meta.contains_key(&job) {
            return Err(CoreError::DuplicateJob(job));
        }
        self.occ.add_foreign(job, per_node_gpus)?;
        let running = self.occ.job(job).expect("just added").clone();
        for (k, (&n, &g)) in running.nodes.iter().zip(&running.gpus).enumerate() {
            let inst = InstanceRef {
                job,
                index: k as u32,
            };
            self.nodes[n as usize].guests.push(Guest {
                instance: inst,
                gpus: g,
                foreign: true,
            });
            self.reindex(n);
        }
        self.meta.insert(
            job,
            JobMeta {
                gpus: 0,
                movable: false,
                foreign: true,
            },
        );
        Ok(())
    }

    // ----- Remove (Section 4.3.3) ----------------------------------------

    /// Detaches one instance from node `n`. An anchor's slot is dissolved and
    /// its fillers stay on the node as guests (correction 2: no migration
    /// here; `normalize` and Compact decide).
    fn detach(&mut self, n: NodeId, inst: InstanceRef) {
        let st = &mut self.nodes[n as usize];
        if let Some(i) = st.slots.iter().position(|s| s.anchor == inst) {
            let slot = st.slots.remove(i);
            for f in slot.fillers {
                st.guests.push(Guest {
                    instance: f,
                    gpus: 1,
                    foreign: false,
                });
            }
        } else if let Some(s) = st.slots.iter_mut().find(|s| s.fillers.contains(&inst)) {
            s.fillers.retain(|f| *f != inst);
        } else if let Some(i) = st.pool.iter().position(|p| *p == inst) {
            st.pool.remove(i);
        } else if let Some(i) = st.guests.iter().position(|g| g.instance == inst) {
            st.guests.remove(i);
        }
    }

    /// Relabels instances on `n` into their best ABS roles without moving
    /// anything: guests become fillers, anchors or pool members where the node
    /// allows it; a node left with only 1-GPU instances becomes a pool node.
    fn normalize(&mut self, n: NodeId) {
        let cap = self.cap;
        let st = &mut self.nodes[n as usize];
        if st.slots.is_empty() && st.pool.is_empty() {
            // Only guests (or nothing): rebuild the node's type from them.
            let mut guests = std::mem::take(&mut st.guests);
            guests.sort_by(|a, b| b.gpus.cmp(&a.gpus).then(a.instance.cmp(&b.instance)));
            let only_ones = guests.iter().all(|g| g.gpus == 1 && !g.foreign);
            if only_ones {
                st.pool = guests.into_iter().map(|g| g.instance).collect();
                st.pool.sort();
            } else {
                st.guests = guests;
            }
        }
        if st.kind() == NodeKind::Pool {
            // 1-GPU guests on a pool node are pool members.
            let (ones, rest): (Vec<Guest>, Vec<Guest>) = std::mem::take(&mut st.guests)
                .into_iter()
                .partition(|g| g.gpus == 1 && !g.foreign);
            st.pool.extend(ones.into_iter().map(|g| g.instance));
            st.guests = rest;
        }
        if st.pool.is_empty() {
            // Slotted (or only guests): multi-GPU guests become anchors while
            // room allows, largest first; then 1-GPU guests fill vacancies.
            let mut i = 0;
            st.guests
                .sort_by(|a, b| b.gpus.cmp(&a.gpus).then(a.instance.cmp(&b.instance)));
            while i < st.guests.len() {
                let g = &st.guests[i];
                if g.foreign || g.gpus < 2 {
                    i += 1;
                    continue;
                }
                let w = slot_width(g.gpus);
                let widths: u32 = st.slots.iter().map(|s| s.width).sum();
                let room = i64::from(cap) - i64::from(widths) - i64::from(st.guest_gpus())
                    + i64::from(g.gpus);
                if room >= i64::from(w) {
                    let g = st.guests.remove(i);
                    st.slots.push(Slot {
                        width: w,
                        anchor: g.instance,
                        anchor_gpus: g.gpus,
                        fillers: Vec::new(),
                    });
                } else {
                    i += 1;
                }
            }
            let mut i = 0;
            while i < st.guests.len() {
                let g = &st.guests[i];
                if g.foreign || g.gpus != 1 {
                    i += 1;
                    continue;
                }
                if let Some(s) = st.slots.iter_mut().find(|s| s.vacancy() > 0) {
                    s.fillers.push(g.instance);
                    st.guests.remove(i);
                } else {
                    i += 1;
                }
            }
        }
        self.reindex(n);
    }

    // ----- migrations ----------------------------------------------------

    /// Moves one instance to `to` in role `dest`, updating the accounting.
    fn migrate(&mut self, inst: InstanceRef, from: NodeId, dest: Dest, out: &mut Vec<Migration>) {
        let to = dest.node();
        let g = self.meta.get(&inst.job).map_or(1, |m| m.gpus);
        self.detach(from, inst);
        self.install(inst, g, dest);
        if from != to {
            self.occ
                .move_instance(inst.job, inst.index, to)
                .expect("migration target has room");
            out.push(Migration {
                job: inst.job,
                instance: inst.index,
                from,
                to,
            });
            self.migrations_total += 1;
        }
        self.normalize(from);
    }

    /// Moves a whole slot (anchor and fillers) from `from` to `to`.
    fn move_slot(
        &mut self,
        from: NodeId,
        anchor: InstanceRef,
        to: NodeId,
        out: &mut Vec<Migration>,
    ) {
        let st = &mut self.nodes[from as usize];
        let Some(i) = st.slots.iter().position(|s| s.anchor == anchor) else {
            return;
        };
        let slot = st.slots.remove(i);
        self.reindex(from);
        for inst in std::iter::once(slot.anchor).chain(slot.fillers.iter().copied()) {
            self.occ
                .move_instance(inst.job, inst.index, to)
                .expect("slot target has room");
            out.push(Migration {
                job: inst.job,
                instance: inst.index,
                from,
                to,
            });
            self.migrations_total += 1;
        }
        self.nodes[to as usize].slots.push(slot);
        self.reindex(to);
        self.normalize(from);
    }

    // ----- Compact (Section 4.3.4, corrected) ----------------------------

    /// Runs Compact now and returns the migrations it applied: bring guests
    /// home, saturate slot vacancies (Lemma A.2), the pool pass (Lemma A.3)
    /// and the corrected slotted pass (Lemma A.4 as it should be).
    pub fn compact(&mut self) -> Vec<Migration> {
        let mut out = Vec::new();
        // A pass can enable an earlier one (the pool pass empties a node a
        // guest can use, or turns a guest into an anchor with a vacancy): run
        // rounds until one migrates nothing. Every pass only moves towards
        // fewer guests, open vacancies or open nodes, so this ends quickly.
        for _round in 0..6 {
            let before = out.len();
            self.repair_guests(&mut out);
            self.saturate(&mut out);
            self.compact_pool(&mut out);
            match self.config.slotted_pass {
                SlottedPass::Corrected => self.compact_slotted(&mut out),
                SlottedPass::Paper => {
                    self.paper_best_fit_drain(4, &mut out);
                    self.paper_best_fit_drain(2, &mut out);
                }
            }
            if out.len() == before {
                break;
            }
        }
        out
    }

    /// Fills every open slot vacancy: first with a 1-GPU guest on the same
    /// node (relabel), then a movable 1-GPU guest elsewhere, then a movable
    /// member of the emptiest pool node (Place line 9, Remove's refill).
    fn saturate(&mut self, out: &mut Vec<Migration>) {
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

    /// Moves movable guests back into the ABS by the rules of Place: 1-GPU
    /// guests into the fullest non-full pool node, else a new pool node;
    /// multi-GPU guests into the best-fit slotted node, else an empty node.
    /// A guest stays only while the cluster has no such room.
    fn repair_guests(&mut self, out: &mut Vec<Migration>) {
        let guests: Vec<(NodeId, InstanceRef)> = self.guests.iter().copied().collect();
        for (n, inst) in guests {
            let Some(g) = self.nodes[n as usize]
                .guests
                .iter()
                .find(|g| g.instance == inst)
                .cloned()
            else {
                continue;
            };
            if g.foreign || !self.movable(inst) {
                continue;
            }
            let fits = |m: NodeId| m != n && self.ok_dest(m, None);
            let empty = || self.empty.iter().copied().find(|&m| fits(m));
            let dest = if g.gpus == 1 {
                Self::first_in(&self.pools, (1..self.cap).rev(), fits)
                    .or_else(empty)
                    .map(Dest::Pool)
            } else {
                Self::first_in(&self.slotted, slot_width(g.gpus)..self.cap, fits)
                    .or_else(empty)
                    .map(Dest::NewSlot)
            };
            if let Some(dest) = dest {
                self.migrate(inst, n, dest, out);
            }
        }
    }

    /// Pool pass (Lemma A.3): drain the emptiest non-full pool node into the
    /// fullest one, one 1-GPU instance at a time, until at most one pool node
    /// is non-full (or only immovable members are left to move).
    fn compact_pool(&mut self, out: &mut Vec<Migration>) {
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
    fn compact_slotted(&mut self, out: &mut Vec<Migration>) {
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
    fn paper_best_fit_drain(&mut self, width: u32, out: &mut Vec<Migration>) {
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

    // ----- observation ---------------------------------------------------

    /// A serialisable picture of the layout, for `compass status` and the
    /// plugin's published state.
    pub fn snapshot(&self) -> LayoutSnapshot {
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(n, st)| NodeView {
                node: n as NodeId,
                kind: st.kind(),
                used: self.occ.used(n as NodeId),
                capacity: self.cap,
                usable: self.usable.contains(n as NodeId),
                state: st.clone(),
            })
            .collect();
        let counts = self.occ.instance_counts();
        let phi_star = crate::metric::phi_star(counts, self.cap);
        let partial = self.occ.partial_nodes();
        LayoutSnapshot {
            nodes,
            partial_nodes: partial,
            phi_star,
            n_sif: i64::from(partial) - phi_star as i64,
            wcc: crate::metric::wcc_holds(counts, self.cap),
            guests: self.guests.len() as u32,
            migrations_total: self.migrations_total,
            divergences: self.divergences,
        }
    }

    /// Checks every structural invariant (Proposition 1 and the accounting).
    /// Returns a description of the first violation. Used by tests and by the
    /// plugin's self-check.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let cap = self.cap;
        for (n, st) in self.nodes.iter().enumerate() {
            let n = n as NodeId;
            if st.used() != self.occ.used(n) {
                return Err(format!(
                    "node {n}: structure holds {} GPUs, accounting {}",
                    st.used(),
                    self.occ.used(n)
                ));
            }
            if st.used() > cap {
                return Err(format!(
                    "node {n}: {} GPUs used on a node of {cap}",
                    st.used()
                ));
            }
            let widths: u32 = st.slots.iter().map(|s| s.width).sum();
            if widths > cap {
                return Err(format!("node {n}: slots take {widths} GPUs of {cap}"));
            }
            if !st.slots.is_empty() && !st.pool.is_empty() {
                return Err(format!("node {n}: both slots and pool members"));
            }
            for s in &st.slots {
                if s.width != slot_width(s.anchor_gpus) || s.anchor_gpus < 2 {
                    return Err(format!(
                        "node {n}: slot of width {} anchors {} GPUs (eq. 3)",
                        s.width, s.anchor_gpus
                    ));
                }
                if s.anchor_gpus + s.fillers.len() as u32 > s.width {
                    return Err(format!("node {n}: slot over capacity (eq. 4)"));
                }
            }
            if self.keys[n as usize] != self.keys_of(n) {
                return Err(format!("node {n}: stale index entry"));
            }
            let instances = st
                .slots
                .iter()
                .flat_map(|s| std::iter::once(s.anchor).chain(s.fillers.iter().copied()));
            for inst in instances
                .chain(st.pool.iter().copied())
                .chain(st.guests.iter().map(|g| g.instance))
            {
                let at = self
                    .occ
                    .job(inst.job)
                    .and_then(|j| j.nodes.get(inst.index as usize))
                    .copied();
                if at != Some(n) {
                    return Err(format!(
                        "instance {inst:?} is on node {n} but accounted on {at:?}"
                    ));
                }
            }
        }
        let placed: usize = self
            .nodes
            .iter()
            .map(|st| {
                st.slots.iter().map(|s| 1 + s.fillers.len()).sum::<usize>()
                    + st.pool.len()
                    + st.guests.len()
            })
            .sum();
        let accounted: usize = self.occ.jobs().map(|j| j.nodes.len()).sum();
        if placed != accounted {
            return Err(format!(
                "{placed} instances in the structure, {accounted} accounted"
            ));
        }
        Ok(())
    }
}

const MIN_INST: InstanceRef = InstanceRef {
    job: JobId(0),
    index: 0,
};
const MAX_INST: InstanceRef = InstanceRef {
    job: JobId(u64::MAX),
    index: u32::MAX,
};

/// Where one instance goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Dest {
    /// Anchor of a new slot on this node.
    NewSlot(NodeId),
    /// Filler of the slot anchored by this instance.
    Filler(NodeId, InstanceRef),
    /// Member of this pool node (opens it if empty).
    Pool(NodeId),
    /// Guest in physically free GPUs (correction 3).
    Guest(NodeId),
}

impl Dest {
    fn node(self) -> NodeId {
        match self {
            Dest::NewSlot(n) | Dest::Filler(n, _) | Dest::Pool(n) | Dest::Guest(n) => n,
        }
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

/// Serialisable layout of the whole cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayoutSnapshot {
    pub nodes: Vec<NodeView>,
    /// `Phi_pi`.
    pub partial_nodes: u32,
    /// `Phi*`.
    pub phi_star: u64,
    /// `N * SIF = Phi_pi - Phi*`.
    pub n_sif: i64,
    /// Does the Workload Composition Condition (eq. 9) hold now?
    pub wcc: bool,
    pub guests: u32,
    pub migrations_total: u64,
    pub divergences: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub node: NodeId,
    pub kind: NodeKind,
    pub used: u32,
    pub capacity: u32,
    pub usable: bool,
    pub state: NodeState,
}

impl PlacementPolicy for CompassEngine {
    fn name(&self) -> &'static str {
        "compass"
    }

    fn spec(&self) -> ClusterSpec {
        self.occ.spec()
    }

    /// Algorithm 1, lines 3-9: Place every instance (all-or-nothing), then
    /// Compact.
    fn place(&mut self, job: &JobRequest, allowed: Option<&NodeSet>) -> Result<Option<Admission>> {
        self.check_new(job)?;
        let mut undo = Undo::default();
        let Some(nodes) = self.place_instances(job, allowed, &mut undo) else {
            self.rollback(undo);
            return Ok(None);
        };
        self.occ.add(job, nodes.clone())?;
        self.meta.insert(
            job.id,
            JobMeta {
                gpus: job.shape.gpus,
                movable: job.movable,
                foreign: false,
            },
        );
        let migrations = if self.config.compact {
            self.compact()
        } else {
            Vec::new()
        };
        // Compact may move the new job's own instances too.
        let nodes = self
            .occ
            .job(job.id)
            .map(|j| j.nodes.clone())
            .unwrap_or(nodes);
        Ok(Some(Admission { nodes, migrations }))
    }

    /// Algorithm 1, lines 10-16: Remove every instance, then Compact.
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        self.detach_job(job)?;
        Ok(if self.config.compact {
            self.compact()
        } else {
            Vec::new()
        })
    }

    /// Removes the victims without Compact: the next `place` (the pending
    /// job's, Algorithm 1 line 9) compacts after the job has its room.
    fn remove_for_room(&mut self, jobs: &[JobId]) -> Result<Vec<Migration>> {
        for &job in jobs {
            self.detach_job(job)?;
        }
        Ok(Vec::new())
    }

    fn occupancy(&self) -> &Occupancy {
        &self.occ
    }

    fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        CompassEngine::set_movable(self, job, movable)
    }

    fn honours_movable(&self) -> bool {
        true
    }

    fn fork(&self) -> Option<Box<dyn PlacementPolicy>> {
        Some(Box::new(self.clone()))
    }
}

impl CompassEngine {
    /// Algorithm 1, lines 10-15: every instance of `job` leaves its node.
    fn detach_job(&mut self, job: JobId) -> Result<()> {
        let running = self.occ.remove(job)?;
        self.meta.remove(&job);
        let mut touched = BTreeSet::new();
        for (k, &n) in running.nodes.iter().enumerate() {
            self.detach(
                n,
                InstanceRef {
                    job,
                    index: k as u32,
                },
            );
            touched.insert(n);
        }
        for n in touched {
            self.normalize(n);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "compass_tests.rs"]
mod tests;
