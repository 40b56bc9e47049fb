//! Place (paper Section 4.3.2, Algorithm 1 lines 3-9): where an arriving
//! instance goes, and the tentative install / rollback of a whole job.

use std::collections::BTreeMap;

use super::{
    CompassEngine, Dest, EndTies, Guest, NodeKind, NodeState, Slot, END_TIE_WINDOW, MAX_INST,
    MIN_INST,
};
use crate::clock::Seconds;
use crate::error::{CoreError, Result};
use crate::model::{slot_width, InstanceRef, JobRequest, NodeId, NodeSet};
use crate::placement::node_bits::NodeBits;

/// Nodes saved before a tentative placement, to roll it back as if it had
/// not been made.
#[derive(Default)]
pub(super) struct Undo {
    /// Each node's state before, and whether the slotted pass had it to
    /// look at then.
    saved: BTreeMap<NodeId, (NodeState, bool)>,
    /// The length of the list of changed nodes before
    /// ([`CompassEngine::take_changed`]).
    changed_len: Option<usize>,
}

impl CompassEngine {
    // ----- Place (Section 4.3.2) -----------------------------------------
    /// Where one arriving instance of `g` GPUs goes (without installing it).
    /// `end`: the job's expected end, for the ties of [`EndTies::CoEnd`].
    pub(super) fn choose(
        &self,
        g: u32,
        movable: bool,
        allowed: Option<&NodeSet>,
        end: Option<Seconds>,
    ) -> Option<Dest> {
        let small = self.small_set(allowed);
        let dest = match small {
            Some(a) => self.choose_among(g, a, end),
            None => self.choose_indexed(g, allowed, end),
        }?;
        if movable
            || !self.config.pinned_fill
            || self.keys[dest.node() as usize].kind != Some(NodeKind::Empty)
        {
            return Some(dest);
        }
        // Correction 5 (immovable jobs): an instance that Compact may not
        // move would open an empty node that no later move can close; it
        // takes physically free GPUs on a partial node instead, best fit.
        let guest = match small {
            Some(a) => self.guest_among(g, a, false, end),
            None => {
                let ok = |n| self.ok_dest(n, allowed);
                self.pick_in(&self.ix.phys, g..self.cap, allowed, ok, end, g)
            }
        };
        Some(guest.map(Dest::Guest).unwrap_or(dest))
    }

    /// `allowed` when it is a small candidate set (a partition, a
    /// feature): Place looks at its nodes rather than skip the rest of the
    /// cluster in the indexes.
    fn small_set<'a>(&self, allowed: Option<&'a NodeSet>) -> Option<&'a NodeSet> {
        allowed.filter(|a| (a.count() as usize) * 8 < self.nodes.len())
    }

    /// The members of a candidate set that are nodes of this engine (a set
    /// sized for a larger cluster names nodes past them: issue #11, an
    /// index out of bounds).
    fn members<'a>(&'a self, a: &'a NodeSet) -> impl Iterator<Item = NodeId> + 'a {
        let n = self.keys.len();
        a.iter().take_while(move |&m| (m as usize) < n)
    }

    /// The expected end of a node's last job (when it would be empty if
    /// nothing else came), over the jobs whose ends the caller gave; `None`
    /// when it knows none of them.
    pub(super) fn node_end(&self, n: NodeId) -> Option<Seconds> {
        let st = &self.nodes[n as usize];
        let slots = st
            .slots
            .iter()
            .flat_map(|s| std::iter::once(s.anchor).chain(s.fillers.iter().copied()));
        let guests = st.guests.iter().map(|g| g.instance);
        slots
            .chain(st.pool.iter().copied())
            .chain(guests)
            .filter_map(|i| self.expected_end.get(&i.job).copied())
            .reduce(f64::max)
    }

    /// Correction 10: of `nodes` (equally good for Place), the one whose
    /// jobs are expected to end closest to `end`; unknown ends last; the
    /// first on ties.
    fn closest_end(&self, nodes: impl Iterator<Item = NodeId>, end: Seconds) -> Option<NodeId> {
        let gap = |n: NodeId| self.node_end(n).map_or(f64::INFINITY, |e| (e - end).abs());
        nodes
            .map(|n| (gap(n), n))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, n)| n)
    }

    /// The tie rule in force for a job expected to end at `end`.
    fn end_rule(&self, end: Option<Seconds>) -> Option<Seconds> {
        end.filter(|_| self.config.end_ties != EndTies::Index)
    }

    /// [`Self::first_in`] with correction 10: at the first level holding a
    /// node that passes `ok`, the closest end among its first
    /// [`END_TIE_WINDOW`] such nodes. With [`EndTies::CoEndWide`], unless
    /// that level is `exact` (the instance fills the node), the candidates
    /// are the first [`END_TIE_WINDOW`] nodes of every partial level from
    /// there on (each keeps the node partial, so each adds the same
    /// `N*SIF`).
    ///
    /// Only members of `mask` are looked at, a word at a time
    /// ([`NodeBits::within`]): nodes outside a job's candidate set cost a
    /// word per 64 of them, not one step each.
    fn pick_in(
        &self,
        index: &[NodeBits],
        levels: impl IntoIterator<Item = u32>,
        mask: Option<&NodeSet>,
        ok: impl Fn(NodeId) -> bool,
        end: Option<Seconds>,
        exact: u32,
    ) -> Option<NodeId> {
        let at = |l: u32| index[l as usize].within(mask).filter(|&n| ok(n));
        let Some(end) = self.end_rule(end) else {
            return levels.into_iter().find_map(|l| at(l).next());
        };
        let levels: Vec<u32> = levels.into_iter().collect();
        let first = levels.iter().position(|&l| at(l).next().is_some())?;
        let top = levels[first];
        if self.config.end_ties != EndTies::CoEndWide || top == exact || top >= self.cap {
            return self.closest_end(at(top).take(END_TIE_WINDOW), end);
        }
        let partial = levels[first..].iter().copied().filter(|&l| l < self.cap);
        self.closest_end(partial.flat_map(at).take(END_TIE_WINDOW), end)
    }

    /// Of `nodes`, those at the lowest `key`, then correction 10's tie.
    fn best_among(
        &self,
        nodes: impl Iterator<Item = NodeId>,
        key: impl Fn(NodeId) -> u32,
        end: Option<Seconds>,
    ) -> Option<NodeId> {
        let nodes: Vec<NodeId> = nodes.collect();
        let best = nodes.iter().map(|&n| key(n)).min()?;
        let at = nodes.into_iter().filter(|&n| key(n) == best);
        match self.end_rule(end) {
            Some(end) => self.closest_end(at, end),
            None => at.min(),
        }
    }

    /// [`Self::choose`] through the indexes.
    pub(super) fn choose_indexed(
        &self,
        g: u32,
        allowed: Option<&NodeSet>,
        end: Option<Seconds>,
    ) -> Option<Dest> {
        let cap = self.cap;
        let ok = |n: NodeId| self.ok_dest(n, allowed);
        let empty = || self.ix.empty.within(allowed).find(|&n| ok(n));
        if g >= 2 {
            // Best fit over slotted nodes with D(n) >= w (Place, lines 4-5),
            // else open an empty node (line 6).
            let w = slot_width(g);
            let slotted = self.pick_in(&self.ix.slotted, w..cap, allowed, ok, end, w);
            if let Some(n) = slotted.or_else(empty) {
                return Some(Dest::NewSlot(n));
            }
        } else {
            // Slot vacancy first (line 11), then the fullest non-full pool
            // node (line 12), then a new pool node (line 13).
            let pick = |vacant: &mut dyn Iterator<Item = &(NodeId, InstanceRef)>| match self
                .end_rule(end)
            {
                None => vacant.next().copied(),
                Some(e) => {
                    let first: Vec<_> = vacant.take(END_TIE_WINDOW).copied().collect();
                    self.closest_end(first.iter().map(|&(n, _)| n), e)
                        .and_then(|n| first.into_iter().find(|&(m, _)| m == n))
                }
            };
            // A large candidate set: its nodes with a vacancy, a word at a
            // time, in the same order (`vacant` is by node, then anchor).
            let vacancy = match allowed {
                None => pick(&mut self.ix.vacant.iter().filter(|(n, _)| ok(*n))),
                Some(a) => pick(
                    &mut (self.ix.vacant_nodes.within(Some(a)))
                        .filter(|&n| ok(n))
                        .flat_map(|n| self.ix.vacant.range((n, MIN_INST)..=(n, MAX_INST))),
                ),
            };
            if let Some((n, a)) = vacancy {
                return Some(Dest::Filler(n, a));
            }
            let pool = self.pick_in(&self.ix.pools, (1..cap).rev(), allowed, ok, end, cap - 1);
            if let Some(n) = pool.or_else(empty) {
                return Some(Dest::Pool(n));
            }
        }
        // Correction 3: any physically free GPUs, best fit.
        self.config
            .overflow
            .then(|| self.pick_in(&self.ix.phys, g..=cap, allowed, ok, end, g))
            .flatten()
            .map(Dest::Guest)
    }

    /// [`Self::choose`] over the nodes of `allowed` only, with the same
    /// rules and ties (the best level, then correction 10, then the lowest
    /// node index).
    pub(super) fn choose_among(
        &self,
        g: u32,
        allowed: &NodeSet,
        end: Option<Seconds>,
    ) -> Option<Dest> {
        let cap = self.cap;
        let nodes = || {
            self.members(allowed)
                .filter(|&n| self.keys[n as usize].usable)
        };
        let kind = |n: NodeId| self.keys[n as usize].kind;
        let level = |n: NodeId| self.keys[n as usize].level;
        let empty = || nodes().find(|&n| kind(n) == Some(NodeKind::Empty));
        if g >= 2 {
            let w = slot_width(g);
            let slotted = self.best_among(
                nodes()
                    .filter(|&n| kind(n) == Some(NodeKind::Slotted))
                    .filter(|&n| (w..cap).contains(&level(n))),
                level,
                end,
            );
            if let Some(n) = slotted.or_else(empty) {
                return Some(Dest::NewSlot(n));
            }
        } else {
            let vacant = nodes().filter(|&n| !self.keys[n as usize].vacant.is_empty());
            let vacancy = self.best_among(vacant, |_| 0, end).and_then(|n| {
                let a = self.keys[n as usize].vacant.iter().min()?;
                Some(Dest::Filler(n, *a))
            });
            if vacancy.is_some() {
                return vacancy;
            }
            let pool = self.best_among(
                nodes()
                    .filter(|&n| kind(n) == Some(NodeKind::Pool))
                    .filter(|&n| (1..cap).contains(&level(n))),
                |n| cap - level(n),
                end,
            );
            if let Some(n) = pool.or_else(empty) {
                return Some(Dest::Pool(n));
            }
        }
        if !self.config.overflow {
            return None;
        }
        self.guest_among(g, allowed, true, end).map(Dest::Guest)
    }

    /// The node of `allowed` with the fewest physically free GPUs that still
    /// fit `g` (correction 10, then the lowest index, on ties); empty nodes
    /// only with `empty_ok`.
    fn guest_among(
        &self,
        g: u32,
        allowed: &NodeSet,
        empty_ok: bool,
        end: Option<Seconds>,
    ) -> Option<NodeId> {
        let free = |n: NodeId| self.keys[n as usize].phys_free;
        let fits = self
            .members(allowed)
            .filter(|&n| self.keys[n as usize].usable)
            .filter(|&n| free(n) >= g && (empty_ok || free(n) < self.cap));
        self.best_among(fits, free, end)
    }

    pub(super) fn save(&self, undo: &mut Undo, n: NodeId) {
        undo.changed_len.get_or_insert(self.changed.len());
        undo.saved
            .entry(n)
            .or_insert_with(|| (self.nodes[n as usize].clone(), self.ix.dirty.contains(&n)));
    }

    pub(super) fn install(&mut self, inst: InstanceRef, g: u32, dest: Dest) -> NodeId {
        let n = dest.node();
        let st = self.node_mut(n);
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
                settled: false,
            }),
        }
        self.reindex(n);
        n
    }

    /// Puts back the nodes `undo` saved: as they were, they are neither
    /// changed for the head's fit over time nor new to the slotted pass
    /// (issue #11: the plan of a 1,001-node head made the next Compact look
    /// at its 1,001 nodes again).
    pub(super) fn rollback(&mut self, undo: Undo) {
        for (n, (st, was_dirty)) in undo.saved {
            self.nodes[n as usize] = st;
            self.shared.forget(n);
            let k = self.keys_of(n);
            self.put_keys(n, k);
            if !was_dirty {
                self.ix.dirty.remove(&n);
            }
        }
        if let Some(len) = undo.changed_len {
            self.unmark_changed_since(len);
        }
    }

    /// Tentatively installs every instance; on failure rolls back and returns None.
    pub(super) fn place_instances(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
        undo: &mut Undo,
    ) -> Option<Vec<NodeId>> {
        let g = job.shape.gpus;
        // Each instance takes `g` physically free GPUs on one node (Place
        // moves nobody): with fewer than `w` such rooms
        // (`sum_n floor(free_n / g)`, `Occupancy::fit`, `O(G)`), it cannot
        // fit, and a wide job that waits is refused at once instead of
        // instance by instance (slurmctld asks for it at every pass; issue
        // #11: a 1,001-node head installed and rolled back at every event).
        if self.occ.fit(g) < u64::from(job.shape.instances) {
            return None;
        }
        let end = self.expected_end.get(&job.id).copied();
        let mut nodes = Vec::with_capacity(job.shape.instances as usize);
        for k in 0..job.shape.instances {
            let dest = self.choose(g, job.movable, allowed, end)?;
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

    pub(super) fn check_new(&self, job: &JobRequest) -> Result<()> {
        self.occ.spec().check_job(job)?;
        if self.meta.contains_key(&job.id) {
            return Err(CoreError::DuplicateJob(job.id));
        }
        Ok(())
    }

    /// Dry run of [`PlacementPolicy::place`] without Compact: the node of each
    /// instance. The state is left exactly as it was.
    ///
    /// [`PlacementPolicy::place`]: crate::placement::PlacementPolicy::place
    pub fn plan(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
    ) -> Result<Option<Vec<NodeId>>> {
        self.check_new(job)?;
        Ok(self
            .plan_whole_nodes(job, allowed)
            .or_else(|| self.plan_instances(job, allowed)))
    }

    /// [`CompassEngine::plan`] instance by instance: each is installed where
    /// Place puts it, then all are rolled back. What the whole-node shortcut
    /// of `plan` must agree with (the property tests compare the two).
    #[doc(hidden)]
    pub fn plan_each(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
    ) -> Result<Option<Vec<NodeId>>> {
        self.check_new(job)?;
        Ok(self.plan_instances(job, allowed))
    }

    /// Installs each instance where Place puts it, then rolls them all back.
    fn plan_instances(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
    ) -> Option<Vec<NodeId>> {
        let mut undo = Undo::default();
        let nodes = self.place_instances(job, allowed, &mut undo);
        self.rollback(undo);
        nodes
    }

    /// Place's nodes for a job of whole-node instances (`g` = the node
    /// size), read off the index: such an instance goes to an empty node,
    /// the lowest index first (Algorithm 1, lines 4-6: no slotted node has
    /// a free slot as wide as the node), and neither correction 5 nor the
    /// overflow of correction 3 finds a partial node with that many GPUs
    /// free. So with `w` usable empty nodes the job may use, the plan is
    /// the first `w` of them. `None`: another shape, or fewer empty nodes
    /// (the plan instance by instance decides). Issue #11: a whole-node
    /// job was installed and rolled back instance by instance at every
    /// `narrow` and again at its start (`adopt`), about 1.1 us an instance
    /// at 10,000 nodes; 1.1 ms for the plugin bench's 1,001-node head.
    fn plan_whole_nodes(&self, job: &JobRequest, allowed: Option<&NodeSet>) -> Option<Vec<NodeId>> {
        // Too few nodes with the room, whatever they are: `O(G)`, as Place
        // refuses it (`place_instances`).
        if job.shape.gpus != self.cap || self.occ.fit(self.cap) < u64::from(job.shape.instances) {
            return None;
        }
        let w = job.shape.instances as usize;
        // As `choose`: a small candidate set is read node by node.
        let nodes: Vec<NodeId> = match self.small_set(allowed) {
            Some(a) => self
                .members(a)
                .filter(|&n| {
                    let k = &self.keys[n as usize];
                    k.usable && k.kind == Some(NodeKind::Empty)
                })
                .take(w)
                .collect(),
            None => self
                .ix
                .empty
                .within(allowed)
                .filter(|&n| self.ok_dest(n, allowed))
                .take(w)
                .collect(),
        };
        (nodes.len() == w).then_some(nodes)
    }
}
