//! Compact (paper Section 4.3.4, corrected; docs/compass-corrections.md):
//! the rounds of passes, and the two migration primitives they share.

mod fill;
mod guests;
mod pool;
mod room;
mod saturate;
mod slotted;

use super::{CompassEngine, Dest, Guest, SlottedPass};
use crate::model::{InstanceRef, JobId, Migration, NodeId};

/// Compact's rounds of passes at most (`compact_passes`): far above the
/// eight the passes have needed, a guard against a cycle, never a budget.
const COMPACT_ROUND_LIMIT: u32 = 64;

impl CompassEngine {
    // ----- Compact (Section 4.3.4, corrected) ----------------------------

    /// Runs Compact now and returns the migrations it applied: bring guests
    /// home, saturate slot vacancies (Lemma A.2), the pool pass (Lemma A.3)
    /// and the corrected slotted pass (Lemma A.4 as it should be).
    ///
    /// Jobs restricted to part of the nodes ([`CompassEngine::set_allowed`])
    /// end every Compact inside their set: a step that would move one to a
    /// node outside it is not taken, and that job is held still for the
    /// rest of this Compact, as if pinned ([`CompassEngine::held_in_last_compact`]);
    /// the passes look for another step without it. One run of the passes
    /// (issue #11: they used to ignore restrictions, and a Compact that
    /// left a job outside was undone and run again with it held, once per
    /// such job: 3.3 runs per Compact on the `partitions` bench mix, up to
    /// 56). When no job is restricted, the common case, the test costs one
    /// emptiness check per move. A restricted job may still move inside
    /// its set.
    pub fn compact(&mut self) -> Vec<Migration> {
        self.compact_vetoed(&mut Veto::none())
    }

    /// [`CompassEngine::compact`], asking `veto` before each move of a job
    /// to another node ([`Veto`]): a refused job is held still for tidying
    /// and the passes go on without it. Once the veto is exhausted the
    /// passes stop where they are (the caller undoes the trial it opened).
    /// The refused jobs are held at the end.
    pub fn compact_vetoed(&mut self, veto: &mut Veto<'_>) -> Vec<Migration> {
        self.held_last.clear();
        let out = self.compact_passes(veto);
        // The jobs held for their restriction may move again next time.
        let held = self.held_last.clone();
        self.set_tidy_hold(&held, false);
        debug_assert!(out.iter().all(|m| self.inside_allowed(m.job)));
        out
    }

    /// Is any of `moves` (a job, the node it would move to) refused? A job
    /// restricted to nodes without its destination is held still for the
    /// rest of this Compact ([`CompassEngine::set_tidy_hold`], named in
    /// `held_last`), as if pinned: the passes never take a job outside its
    /// set, and look for another step without it. Otherwise `veto` is asked
    /// about every job; each refused one is held still for tidying, so that
    /// no pass offers it again, and named in the veto.
    pub(super) fn refuses(&mut self, veto: &mut Veto<'_>, moves: &[(JobId, NodeId)]) -> bool {
        let mut refused = false;
        if !self.restricted.is_empty() {
            for &(j, to) in moves {
                if self.restricted.get(&j).is_some_and(|set| !set.contains(to)) {
                    // A held job is offered no more, so only a step that
                    // names it twice (a slot's anchor and filler of one
                    // job) finds it held already.
                    if !self.meta.get(&j).is_some_and(|m| m.tidy_held) {
                        self.held_last.push(j);
                        self.set_tidy_hold(&[j], true);
                    }
                    refused = true;
                }
            }
            if refused {
                return true;
            }
        }
        for &(j, _) in moves {
            if !(veto.may_move)(j) {
                if !veto.refused.contains(&j) {
                    veto.refused.push(j);
                }
                self.set_tidy_hold(&[j], true);
                refused = true;
            }
        }
        refused
    }

    /// The jobs of the instances a unit on node `from` moves: a slot's
    /// anchor and fillers, or a guest.
    pub(super) fn jobs_of_slot(&self, from: NodeId, anchor: InstanceRef) -> Vec<JobId> {
        let mut jobs = vec![anchor.job];
        if let Some(s) = self.nodes[from as usize]
            .slots
            .iter()
            .find(|s| s.anchor == anchor)
        {
            jobs.extend(s.fillers.iter().map(|f| f.job));
        }
        jobs
    }

    /// Every instance of `job` sits on a node it may use.
    fn inside_allowed(&self, job: JobId) -> bool {
        let (Some(set), Some(run)) = (self.restricted.get(&job), self.occ.job(job)) else {
            return true;
        };
        run.nodes.iter().all(|&n| set.contains(n))
    }

    /// The passes of [`CompassEngine::compact`], with no regard to
    /// restrictions.
    fn compact_passes(&mut self, veto: &mut Veto<'_>) -> Vec<Migration> {
        let mut out = Vec::new();
        // A pass can enable an earlier one (the pool pass empties a node a
        // guest can use, or turns a guest into an anchor with a vacancy; a
        // guest that fills a vacancy of its own node frees room a guest
        // elsewhere can use): run rounds until one changes nothing (issue
        // #11: the rounds stopped at the first with no migration, and a
        // movable guest stayed beside the room such a role change freed;
        // then at six rounds, and a departure on 5 nodes that took eight
        // left a Compact for the next one to finish, found by the fixpoint
        // property of `compass_props`). Every pass only moves towards fewer
        // guests, open vacancies or open nodes, so this ends quickly: at
        // most 8 rounds over hundreds of thousands of random layouts. The
        // limit only guards slurmctld against a pass that would undo
        // another's work; a Compact that reaches it is counted
        // ([`CompassEngine::unsettled_compacts`]).
        let mut rounds = 0;
        loop {
            let before = (out.len(), self.role_changes);
            self.repair_guests(&mut out, veto);
            self.saturate(&mut out, veto);
            self.compact_pool(&mut out, veto);
            match self.config.slotted_pass {
                SlottedPass::Corrected => {
                    self.compact_slotted(&mut out, veto);
                    self.fill_from_pool(&mut out, veto);
                }
                SlottedPass::Paper => {
                    self.paper_best_fit_drain(4, &mut out, veto);
                    self.paper_best_fit_drain(2, &mut out, veto);
                }
            }
            if (out.len(), self.role_changes) == before || veto.exhausted() {
                break;
            }
            rounds += 1;
            if rounds == COMPACT_ROUND_LIMIT {
                self.unsettled_compacts += 1;
                break;
            }
        }
        out
    }

    // ----- migrations ----------------------------------------------------

    /// Moves one instance to `to` in role `dest`, updating the accounting.
    pub(super) fn migrate(
        &mut self,
        inst: InstanceRef,
        from: NodeId,
        dest: Dest,
        out: &mut Vec<Migration>,
    ) {
        let to = dest.node();
        let g = self.meta.get(&inst.job).map_or(1, |m| m.gpus);
        self.detach(from, inst);
        self.install(inst, g, dest);
        if from != to {
            self.occ
                .move_instance(inst.job, inst.index, to)
                .expect("migration target has room");
            self.log_move(inst.job, inst.index, from);
            out.push(Migration {
                job: inst.job,
                instance: inst.index,
                from,
                to,
            });
            self.migrations_total += 1;
        } else {
            self.role_changes += 1;
        }
        self.normalize(from);
    }

    /// Moves a whole slot (anchor and fillers) from `from` to `to`.
    pub(super) fn move_slot(
        &mut self,
        from: NodeId,
        anchor: InstanceRef,
        to: NodeId,
        out: &mut Vec<Migration>,
    ) {
        let Some(i) = self.nodes[from as usize]
            .slots
            .iter()
            .position(|s| s.anchor == anchor)
        else {
            return;
        };
        // A filler that may not move stays, as a guest: the slot's
        // movability was judged when its step was planned, and `normalize`
        // may have put a pinned 1-GPU guest of `from` into its vacancy
        // since (a step that empties `from` moves its units one by one).
        let stay: Vec<InstanceRef> = self.nodes[from as usize].slots[i]
            .fillers
            .iter()
            .copied()
            .filter(|f| !self.movable(*f))
            .collect();
        let st = self.node_mut(from);
        let mut slot = st.slots.remove(i);
        slot.fillers.retain(|f| !stay.contains(f));
        st.guests.extend(stay.iter().map(|&instance| Guest {
            instance,
            gpus: 1,
            foreign: false,
            settled: false,
        }));
        self.reindex(from);
        for inst in std::iter::once(slot.anchor).chain(slot.fillers.iter().copied()) {
            self.occ
                .move_instance(inst.job, inst.index, to)
                .expect("slot target has room");
            self.log_move(inst.job, inst.index, from);
            out.push(Migration {
                job: inst.job,
                instance: inst.index,
                from,
                to,
            });
            self.migrations_total += 1;
        }
        let cap = self.cap;
        let dst = self.node_mut(to);
        if dst.unprofiled(cap) >= slot.width {
            dst.slots.push(slot);
            self.reindex(to);
        } else {
            // The step planned on `to`'s room as it was; a move of the same
            // step off `to` may have let `normalize` turn a guest there into
            // an anchor whose slot takes that room (issue #11: a node's
            // slots then took 10 GPUs of 8). The instances have the GPUs
            // (the step counted them): they land as guests, and `to` is
            // relabelled.
            let g = slot.anchor_gpus;
            dst.guests.push(Guest {
                instance: slot.anchor,
                gpus: g,
                foreign: false,
                settled: false,
            });
            dst.guests
                .extend(slot.fillers.iter().map(|&instance| Guest {
                    instance,
                    gpus: 1,
                    foreign: false,
                    settled: false,
                }));
            self.normalize(to);
        }
        self.normalize(from);
    }
}

/// Which jobs Compact may move to another node, asked before each such
/// move ([`CompassEngine::compact_vetoed`]; the select plugin's `pays`
/// gate: a tidying move that does not pay for itself is not made, issue
/// #11). A refused job is held still for tidying
/// ([`CompassEngine::set_tidy_hold`]) and the passes go on without it: one
/// question where the gate used to undo the whole Compact and try it again.
/// After `limit` refused jobs the veto is exhausted and the passes stop (a
/// step of the slotted pass that moves several jobs asks about them all
/// at once, so it may refuse more).
pub struct Veto<'a> {
    may_move: &'a dyn Fn(JobId) -> bool,
    limit: usize,
    refused: Vec<JobId>,
}

impl<'a> Veto<'a> {
    /// Asks `may_move` (`true`: the job may move); exhausted after `limit`
    /// refused jobs.
    pub fn new(may_move: &'a dyn Fn(JobId) -> bool, limit: usize) -> Self {
        Self {
            may_move,
            limit,
            refused: Vec::new(),
        }
    }

    /// Every job may move: a plain Compact.
    pub fn none() -> Veto<'static> {
        fn anyone(_: JobId) -> bool {
            true
        }
        Veto::new(&anyone, usize::MAX)
    }

    /// The jobs refused so far, in order, each once.
    pub fn refused(&self) -> &[JobId] {
        &self.refused
    }

    /// Were `limit` jobs refused?
    pub fn exhausted(&self) -> bool {
        self.refused.len() >= self.limit
    }
}
