//! Compacts that can be taken back (issue #11: a trial costs what Compact
//! touches, not a copy of the engine).
//!
//! [`CompassEngine::begin_trial`] opens a journal; from then on the first
//! change to a node saves that node's state, and every instance migration
//! is logged. [`CompassEngine::undo_trial`] puts back the saved nodes and
//! moves the instances home in reverse order, so the engine is as it was
//! when the trial began (checked against a copy in the tests);
//! [`CompassEngine::keep_trial`] drops the journal. Trials nest: a trial
//! kept inside another joins it, so undoing the outer one undoes both.
//!
//! The journal also keeps each re-indexed node's index keys as they were
//! (`state::Keys`), so an undo puts them back instead of computing them
//! again, and the holds for tidying set or lifted in the trial
//! ([`CompassEngine::set_tidy_hold`]), which the undo lifts or sets again
//! (issue #11: the gate's trial that releases every job held for tidying
//! is undone at the cost of the index entries it changed). A change of a
//! job's own movability ([`CompassEngine::set_movable`]) inside a trial is
//! not undone; its nodes' keys are computed afresh at the undo instead.
//!
//! Only Compact, [`CompassEngine::set_movable`] and
//! [`CompassEngine::set_tidy_hold`] may run inside a trial: Place, Remove,
//! adoption, node usability and restriction changes
//! ([`CompassEngine::set_allowed`]) are not logged, so they keep every open
//! trial first (the trial then cannot be undone).

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use super::state::Keys;
use super::{CompassEngine, NodeState};
use crate::model::{JobId, NodeId};

/// What an open trial must restore.
#[derive(Clone, Debug)]
pub(super) struct Journal {
    /// Each changed node's state before its first change in this trial.
    nodes: BTreeMap<NodeId, NodeState>,
    /// Instance migrations in order: (job, instance, node it left).
    moves: Vec<(JobId, u32, NodeId)>,
    /// Each re-indexed node's keys before its first re-indexing in this
    /// trial; `None`: computed afresh at the undo (a job's own movability
    /// changed there, which the undo keeps).
    keys: FxHashMap<NodeId, Option<Keys>>,
    /// Holds for tidying changed in this trial, in order: (job, its hold
    /// before).
    tidy: Vec<(JobId, bool)>,
    /// Each job whose own movability changed in this trial, with its
    /// movability when the trial began ([`CompassEngine::set_movable`],
    /// which the undo keeps): a job whose movability differs at the undo
    /// has its nodes marked for the slotted pass; one set back as it was
    /// (a hold lifted inside the trial) leaves no mark, so the undo is
    /// exact (issue #11).
    movable: BTreeMap<JobId, bool>,
    /// Nodes the slotted pass had still to look at.
    dirty: BTreeSet<NodeId>,
    migrations_total: u64,
    held_last: Vec<JobId>,
    /// The length of the engine's list of changed nodes when the trial
    /// began, while the list was not taken since with the trial's changes
    /// in it ([`CompassEngine::take_changed`]): the undo then shortens the
    /// list back, since every node it added is as it was ([`Ends`] need
    /// not look at it again; issue #11, a tidying Compact undoes up to
    /// eight trials). `None`: the undo marks the nodes it puts back.
    ///
    /// [`Ends`]: crate::placement::head::Ends
    changed_len: Option<usize>,
}

impl Journal {
    /// Logs that `job`'s hold for tidying was `held` before a change.
    pub(super) fn log_tidy(&mut self, job: JobId, held: bool) {
        self.tidy.push((job, held));
    }
}

impl CompassEngine {
    /// Opens a trial: everything Compact changes from now on can be put
    /// back by [`CompassEngine::undo_trial`]. Costs a copy of the few nodes
    /// changed since the last Compact (the slotted pass's to-do set).
    pub fn begin_trial(&mut self) {
        self.journal.push(Journal {
            nodes: BTreeMap::new(),
            moves: Vec::new(),
            keys: FxHashMap::default(),
            tidy: Vec::new(),
            movable: BTreeMap::new(),
            dirty: self.ix.dirty.clone(),
            migrations_total: self.migrations_total,
            held_last: self.held_last.clone(),
            changed_len: Some(self.changed.len()),
        });
    }

    /// The list of changed nodes was taken ([`CompassEngine::take_changed`]):
    /// while no open trial has changed a node, each trial's nodes are those
    /// added from now on; else the undo must mark what it puts back.
    pub(super) fn journal_changed_taken(&mut self) {
        let clean = self.journal.iter().all(|j| j.nodes.is_empty());
        for j in &mut self.journal {
            j.changed_len = clean.then_some(0);
        }
    }

    /// Closes the innermost trial and keeps what it changed (inside an
    /// outer trial, which can still undo it). `false`: no trial was open.
    pub fn keep_trial(&mut self) -> bool {
        let Some(inner) = self.journal.pop() else {
            return false;
        };
        if let Some(outer) = self.journal.last_mut() {
            for (n, st) in inner.nodes {
                outer.nodes.entry(n).or_insert(st);
            }
            outer.moves.extend(inner.moves);
            for (n, k) in inner.keys {
                outer.keys.entry(n).or_insert(k);
            }
            outer.tidy.extend(inner.tidy);
            for (job, was) in inner.movable {
                outer.movable.entry(job).or_insert(was);
            }
        }
        true
    }

    /// Closes the innermost trial and puts the engine back as it was when
    /// the trial began. `false`: no trial was open (nothing changes).
    pub fn undo_trial(&mut self) -> bool {
        let Some(j) = self.journal.pop() else {
            return false;
        };
        for &(job, instance, from) in j.moves.iter().rev() {
            self.occ
                .move_instance(job, instance, from)
                .expect("undoing a migration: its old node had room");
        }
        for &(job, held) in j.tidy.iter().rev() {
            if let Some(m) = self.meta.get_mut(&job) {
                m.tidy_held = held;
            }
        }
        let mut afresh: Vec<NodeId> = Vec::new();
        for (n, st) in j.nodes {
            self.nodes[n as usize] = st;
            self.shared.forget(n);
            if j.changed_len.is_none() {
                self.mark_changed(n);
            }
            if !j.keys.contains_key(&n) {
                afresh.push(n);
            }
        }
        if let Some(len) = j.changed_len {
            self.unmark_changed_since(len);
        }
        // Not journaled again: an outer trial that has no keys of a node
        // saw them as they are put back here.
        for (n, k) in j.keys {
            match k {
                Some(k) => self.put_keys(n, k),
                None => afresh.push(n),
            }
        }
        for n in afresh {
            let k = self.keys_of(n);
            self.put_keys(n, k);
        }
        self.ix.dirty = j.dirty;
        // A hold for tidying put back marks its nodes for the slotted pass,
        // as setting it does ([`CompassEngine::set_tidy_hold`]).
        for &(job, held) in &j.tidy {
            let marks = held
                && self
                    .meta
                    .get(&job)
                    .is_some_and(|m| m.tidy_held && m.movable && !m.foreign);
            if let Some(r) = self.occ.job(job).filter(|_| marks) {
                self.ix.dirty.extend(r.nodes.iter().copied());
            }
        }
        // A job's own movability changed for good (kept by the undo):
        // Compact must look at its nodes again, as outside a trial.
        for (job, was) in &j.movable {
            let now = self.meta.get(job).map(|m| m.movable);
            if now.is_some_and(|m| m != *was) {
                if let Some(r) = self.occ.job(*job) {
                    self.ix.dirty.extend(r.nodes.iter().copied());
                }
            }
        }
        self.migrations_total = j.migrations_total;
        self.held_last = j.held_last;
        true
    }

    /// Open trials (nested).
    pub fn open_trials(&self) -> usize {
        self.journal.len()
    }

    /// Keeps every open trial: called by the operations a journal does not
    /// log (Place, Remove, adoption, node usability).
    pub(super) fn keep_all_trials(&mut self) {
        self.journal.clear();
    }

    /// Node `n`'s state, to change it: saved first when a trial is open.
    pub(super) fn node_mut(&mut self, n: NodeId) -> &mut NodeState {
        self.mark_changed(n);
        self.shared.forget(n);
        if let Some(j) = self.journal.last_mut() {
            j.nodes
                .entry(n)
                .or_insert_with(|| self.nodes[n as usize].clone());
        }
        &mut self.nodes[n as usize]
    }

    /// Forgets the nodes marked changed after the first `len` (put back as
    /// they were since, and the list not taken meanwhile).
    pub(super) fn unmark_changed_since(&mut self, len: usize) {
        for n in self.changed.drain(len.min(self.changed.len())..) {
            self.changed_flag[n as usize] = false;
        }
    }

    /// Notes that node `n`'s instances may change
    /// ([`CompassEngine::take_changed`]).
    fn mark_changed(&mut self, n: NodeId) {
        if !self.changed_flag[n as usize] {
            self.changed_flag[n as usize] = true;
            self.changed.push(n);
        }
    }

    /// Keeps node `n`'s keys before their first change in the innermost
    /// open trial (`old`: its keys as they were until now).
    pub(super) fn journal_keys(&mut self, n: NodeId, old: Keys) {
        if let Some(j) = self.journal.last_mut() {
            j.keys.entry(n).or_insert(Some(old));
        }
    }

    /// Notes that `job`'s own movability was `was` before a change in
    /// every open trial that has not seen it change yet.
    pub(super) fn journal_movable(&mut self, job: JobId, was: bool) {
        for j in &mut self.journal {
            j.movable.entry(job).or_insert(was);
        }
    }

    /// Node `n`'s keys are computed afresh if any open trial is undone (a
    /// change the undo keeps, [`CompassEngine::set_movable`], re-indexed
    /// it): every open trial that keeps its keys forgets them.
    pub(super) fn journal_keys_afresh(&mut self, n: NodeId) {
        for j in &mut self.journal {
            if let Some(k) = j.keys.get_mut(&n) {
                *k = None;
            }
        }
    }

    /// Logs an instance migration off `from` (after the occupancy moved it).
    pub(super) fn log_move(&mut self, job: JobId, instance: u32, from: NodeId) {
        if let Some(j) = self.journal.last_mut() {
            j.moves.push((job, instance, from));
        }
    }

    /// Node `n` as it was when the innermost open trial began (its state
    /// now when the trial has not changed it, or no trial is open).
    pub fn node_before_trial(&self, n: NodeId) -> &NodeState {
        self.journal
            .last()
            .and_then(|j| j.nodes.get(&n))
            .unwrap_or(&self.nodes[n as usize])
    }
}
