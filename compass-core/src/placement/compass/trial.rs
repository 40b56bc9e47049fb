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
//! Only Compact (and [`CompassEngine::set_movable`], which changes no node)
//! may run inside a trial: Place, Remove, adoption and node usability
//! changes add or drop jobs, which the journal does not log, so they keep
//! every open trial first (the trial then cannot be undone).

use std::collections::{BTreeMap, BTreeSet};

use super::{CompassEngine, NodeState};
use crate::model::{JobId, NodeId};

/// What an open trial must restore.
#[derive(Clone, Debug)]
pub(super) struct Journal {
    /// Each changed node's state before its first change in this trial.
    nodes: BTreeMap<NodeId, NodeState>,
    /// Instance migrations in order: (job, instance, node it left).
    moves: Vec<(JobId, u32, NodeId)>,
    /// Nodes the slotted pass had still to look at.
    dirty: BTreeSet<NodeId>,
    migrations_total: u64,
    held_last: Vec<JobId>,
}

impl CompassEngine {
    /// Opens a trial: everything Compact changes from now on can be put
    /// back by [`CompassEngine::undo_trial`]. Costs a copy of the few nodes
    /// changed since the last Compact (the slotted pass's to-do set).
    pub fn begin_trial(&mut self) {
        self.journal.push(Journal {
            nodes: BTreeMap::new(),
            moves: Vec::new(),
            dirty: self.ix.dirty.clone(),
            migrations_total: self.migrations_total,
            held_last: self.held_last.clone(),
        });
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
        for (n, st) in j.nodes {
            self.nodes[n as usize] = st;
            self.mark_changed(n);
            self.reindex(n);
        }
        self.ix.dirty = j.dirty;
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
        if let Some(j) = self.journal.last_mut() {
            j.nodes
                .entry(n)
                .or_insert_with(|| self.nodes[n as usize].clone());
        }
        &mut self.nodes[n as usize]
    }

    /// Notes that node `n`'s instances may change
    /// ([`CompassEngine::take_changed`]).
    fn mark_changed(&mut self, n: NodeId) {
        if !self.changed_flag[n as usize] {
            self.changed_flag[n as usize] = true;
            self.changed.push(n);
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
