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
//!    node or fills one, until at most one is left. It moves guests too, so
//!    the bound holds with guests (issue 11).
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
//! Cost: every query goes through indexes (`state::Index`, BTree sets kept
//! by `reindex` on every change), so Place is `O(G log N)` per instance and
//! Compact costs what it touches: each pass starts from an index of what it
//! could move (movable guests, pool nodes with a movable member, nodes
//! changed since the slotted pass last ran), never from a scan of nodes
//! that pinned jobs keep open (docs/compass-corrections.md, section 7).
//!
//! Where things are: `state` (per-node structure and its indexes),
//! `place` (Place, Section 4.3.2), `remove` (Remove, Section 4.3.3),
//! `adopt` (recording what Slurm did), `compact` (Compact, Section
//! 4.3.4, one module per pass) and `observe` (snapshot, invariants).

mod adopt;
mod compact;
mod observe;
mod place;
mod remove;
mod state;
mod trial;

pub use compact::Veto;
pub use observe::{LayoutSnapshot, NodePart, NodeView};
pub use state::{Guest, NodeKind, NodeState, Slot};

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::error::{CoreError, Result};
use crate::model::{
    Admission, ClusterSpec, InstanceRef, JobId, JobRequest, Migration, NodeId, NodeSet,
};
use crate::placement::{Occupancy, PlacementPolicy};
use place::Undo;
use state::{Index, Keys};

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
    /// Place an immovable instance as a guest on a partial node (best fit)
    /// rather than open an empty node for it (correction 5).
    pub pinned_fill: bool,
    /// How Place breaks ties between nodes that take an instance equally
    /// well (correction 10): by node index (the paper), or by the expected
    /// ends of the jobs already there ([`CompassEngine::set_expected_end`]).
    #[serde(default)]
    pub end_ties: EndTies,
    /// Correction 12: a job that finds no room although its GPUs are free
    /// in total moves movable instances of the least-used nodes aside, as
    /// guests on other partial nodes, when that lets it fit. Off by
    /// default: it shortens waits under a FIFO queue and lengthens them
    /// under backfill (docs/results.md, "Room for the waiting job").
    #[serde(default)]
    pub make_room: bool,
}

/// How Place breaks ties between equally good nodes (correction 10, beyond
/// the paper). Place picks the best level first (Section 4.3.2: best fit
/// over `D(n)`, the fullest pool node, any vacancy, the fewest free GPUs for
/// a guest); every node at that level adds the same `N*SIF` (eq. 2).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndTies {
    /// The lowest node index (the paper's order; the default, chosen by
    /// measurement: docs/compass-corrections.md, section 10).
    #[default]
    Index,
    /// The node whose jobs are expected to end closest to the new job's
    /// expected end (co-termination), so whole nodes free together; nodes
    /// whose jobs' ends are unknown come last, then the lowest index. Acts
    /// only when the caller gave expected ends; without them it is `Index`.
    CoEnd,
    /// As `CoEnd`, over every partial level that fits rather than the best
    /// one alone, unless the best level fills the node (measured, see
    /// docs/results.md).
    CoEndWide,
}

/// How many equally good candidates Place compares by expected end, so an
/// arrival's cost stays bounded on large clusters (docs/compass-corrections.md,
/// section 7).
pub const END_TIE_WINDOW: usize = 16;

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
            pinned_fill: true,
            end_ties: EndTies::Index,
            make_room: false,
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

#[derive(Clone, Debug)]
struct JobMeta {
    gpus: u32,
    /// The job's own movability ([`CompassEngine::set_movable`]), as the
    /// occupancy counts it.
    movable: bool,
    /// Held still for Compact for now ([`CompassEngine::set_tidy_hold`]).
    tidy_held: bool,
    foreign: bool,
}

/// The COMPASS-ABS engine.
#[derive(Clone, Debug)]
pub struct CompassEngine {
    cap: u32,
    config: CompassConfig,
    occ: Occupancy,
    nodes: Vec<NodeState>,
    /// Copies of the nodes' states the layouts taken share, until the node
    /// changes ([`CompassEngine::layout_parts`]).
    shared: observe::SharedNodes,
    keys: Vec<Keys>,
    /// By job id (never iterated: any hash order does).
    meta: FxHashMap<JobId, JobMeta>,
    /// Nodes that may receive instances (not down, drained or faulty).
    usable: NodeSet,
    /// Every index (state.rs).
    ix: Index,
    /// Instance migrations performed so far.
    migrations_total: u64,
    /// Role changes inside a node (a guest becomes a filler) so far:
    /// Compact's rounds go on after a round that made one
    /// (`compact_passes`).
    role_changes: u64,
    /// Compacts whose rounds reached their limit while still changing the
    /// layout ([`CompassEngine::unsettled_compacts`]). Not undone with a
    /// trial: it counts runs.
    unsettled_compacts: u64,
    /// Admissions that the resource manager placed differently from the plan.
    divergences: u64,
    /// Jobs the resource manager may run only on part of this engine's
    /// nodes (a partition, `--exclude`, features covering part of the
    /// pool), with those nodes: Compact never leaves a job outside its set
    /// ([`CompassEngine::compact`]). Empty in the common case.
    restricted: BTreeMap<JobId, NodeSet>,
    /// Restricted jobs the last Compact held still because a step would
    /// have moved them outside their nodes (`compact::refuses`).
    held_last: Vec<JobId>,
    /// Expected end of each job the caller told ([`CompassEngine::set_expected_end`]).
    expected_end: FxHashMap<JobId, Seconds>,
    /// Open trials, innermost last ([`CompassEngine::begin_trial`]).
    journal: Vec<trial::Journal>,
    /// Nodes whose instances may have changed since the last
    /// [`CompassEngine::take_changed`] (every node whose state was opened
    /// for a change, or put back by an undo), and their flags.
    changed: Vec<NodeId>,
    changed_flag: Vec<bool>,
}

impl CompassEngine {
    pub fn new(spec: ClusterSpec, config: CompassConfig) -> Self {
        let cap = spec.gpus_per_node;
        let mut e = Self {
            cap,
            config,
            occ: Occupancy::new(spec),
            nodes: vec![NodeState::default(); spec.nodes as usize],
            shared: observe::SharedNodes::new(spec.nodes as usize),
            keys: vec![Keys::default(); spec.nodes as usize],
            meta: FxHashMap::default(),
            usable: NodeSet::full(spec.nodes),
            ix: Index::new(cap),
            migrations_total: 0,
            role_changes: 0,
            unsettled_compacts: 0,
            divergences: 0,
            restricted: BTreeMap::new(),
            held_last: Vec::new(),
            expected_end: FxHashMap::default(),
            journal: Vec::new(),
            // a new engine: every node is new to whoever watches
            changed: (0..spec.nodes).collect(),
            changed_flag: vec![true; spec.nodes as usize],
        };
        for n in 0..spec.nodes {
            e.reindex(n);
        }
        e
    }

    pub fn config(&self) -> &CompassConfig {
        &self.config
    }

    /// The nodes whose instances may have changed since the last call,
    /// each once (a change of movability alone is not one): for callers
    /// that keep something
    /// derived from the nodes up to date (the head's fit over time,
    /// `placement::head::Ends`) at the cost of what changed.
    pub fn take_changed(&mut self) -> Vec<NodeId> {
        for &n in &self.changed {
            self.changed_flag[n as usize] = false;
        }
        self.journal_changed_taken();
        std::mem::take(&mut self.changed)
    }

    /// The structural state of one node.
    ///
    /// # Panics
    ///
    /// When `n` is not a node of the cluster (`n >= spec().nodes`): callers
    /// take ids from the engine's own layout or check them
    /// (`ClusterSpec::check_node`); every entry point that takes ids from
    /// outside (Place's candidate sets, adoption) checks or ignores them.
    pub fn node(&self, n: NodeId) -> &NodeState {
        &self.nodes[n as usize]
    }

    /// Instance migrations performed since start.
    pub fn migrations_total(&self) -> u64 {
        self.migrations_total
    }

    /// Compacts that stopped at their round limit with the layout still
    /// changing: 0 unless a pass undoes another's work (a bug). The next
    /// Compact goes on from where that one stopped.
    pub fn unsettled_compacts(&self) -> u64 {
        self.unsettled_compacts
    }

    /// Admissions the resource manager placed differently from the plan.
    pub fn divergences(&self) -> u64 {
        self.divergences
    }

    /// Number of guests (instances outside the ABS, Section 4.2).
    pub fn guest_count(&self) -> usize {
        self.ix.guests.len()
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
        self.keep_all_trials();
        if usable {
            self.usable.insert(n);
        } else {
            self.usable.remove(n);
        }
        // Its part of the published layout changed.
        self.shared.forget(n);
        self.reindex(n);
        Ok(())
    }

    /// Marks a running job movable or not (cool-down, not resumable).
    pub fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        let meta = self.meta.get_mut(&job).ok_or(CoreError::UnknownJob(job))?;
        if meta.foreign {
            return Ok(());
        }
        let was = std::mem::replace(&mut meta.movable, movable);
        self.occ.set_movable(job, movable)?;
        // Kept by an undo, which marks the job's nodes for the slotted pass
        // if its movability differs then (issue #11: an undone trial forgot
        // the marks, and no later Compact looked at the job's nodes again;
        // a hold lifted inside the trial leaves none).
        self.journal_movable(job, was);
        let nodes = self.reindex_job(job);
        for &n in &nodes {
            self.journal_keys_afresh(n);
        }
        Ok(())
    }

    /// Holds `jobs` still for Compact (`held`), or lets them move again as
    /// far as their own movability allows, each node re-indexed once
    /// however many of them it holds (unknown and foreign jobs are
    /// skipped): the select plugin's hold for tidying (`pays`: a move that
    /// starts nobody and does not pay for itself is not tried again).
    /// Unlike [`CompassEngine::set_movable`], the occupancy still counts a
    /// held job movable (its reach, [`Occupancy::reach_fit`]), as the
    /// gate's trial, which releases every hold, needs: the gate's bound
    /// reads it without a list of the held jobs, and a hold or release
    /// changes only the Compact's indexes (issue #11).
    pub fn set_tidy_hold(&mut self, jobs: &[JobId], held: bool) {
        let mut nodes: Vec<NodeId> = Vec::new();
        for job in jobs {
            let Some(meta) = self.meta.get_mut(job).filter(|m| !m.foreign) else {
                continue;
            };
            if meta.tidy_held == held {
                continue;
            }
            meta.tidy_held = held;
            if let Some(j) = self.journal.last_mut() {
                j.log_tidy(*job, !held);
            }
            // A job that may not move anyway looks the same to Compact.
            if meta.movable {
                if let Some(r) = self.occ.job(*job) {
                    nodes.extend_from_slice(&r.nodes);
                }
            }
        }
        nodes.sort_unstable();
        nodes.dedup();
        for n in nodes {
            self.reindex(n);
        }
    }

    /// An upper bound on how many instances of `g` GPUs could fit after any
    /// Compact (issue #11: the gate's test that no move can start a
    /// waiting job, `placement::head::Blocked::may_start_after_moves`):
    /// `sum_n floor(lowerable_n / g)`, where `lowerable_n` counts the GPUs
    /// Compact could free on node `n`: none on a full slotted node without
    /// guests (no pass takes an instance from one, and it cannot become a
    /// source in the same Compact), else the GPUs free or held by jobs
    /// free to move by their own verdict (the jobs held for tidying count
    /// free to move, as the gate's trial releases them). Every Compact,
    /// held, guarded or restricted, only moves fewer jobs, so the fit after
    /// it never exceeds this. Tighter than [`Occupancy::reach_fit`], which
    /// counts full nodes of movable jobs too (docs/compass-corrections.md,
    /// section 9, "The room bound of the gate"). `O(G)` (an index of
    /// nodes by `lowerable_n`, kept with the other keys).
    pub fn lowerable_fit(&self, g: u32) -> u64 {
        let g = g.max(1);
        (g..=self.cap)
            .map(|r| self.ix.lowerable[r as usize].len() as u64 * u64::from(r / g))
            .sum()
    }

    /// [`CompassEngine::lowerable_fit`] as if the running jobs `gone` had
    /// left (the simulator's gate before a departure): each of their nodes
    /// counts as a node Compact may empty down to its other jobs that may
    /// not move. Jobs not running here change nothing. `O(G + their
    /// instances)`.
    pub fn lowerable_fit_with(&self, g: u32, gone: &[JobId]) -> u64 {
        let g = g.max(1);
        let mut fit = self.lowerable_fit(g);
        let mut freed: BTreeMap<NodeId, u32> = BTreeMap::new();
        for j in gone {
            let Some(r) = self.occ.job(*j) else { continue };
            let fixed = !r.request.movable;
            for (&n, &k) in r.nodes.iter().zip(&r.gpus) {
                *freed.entry(n).or_default() += if fixed { k } else { 0 };
            }
        }
        for (n, unfixed) in freed {
            let before = self.keys[n as usize].lowerable;
            let after = (self.occ.reach(n) + unfixed).min(self.cap);
            fit = fit + u64::from(after / g) - u64::from(before / g);
        }
        fit
    }

    /// Remembers the nodes a running job may use when they are fewer than
    /// the engine's (`None`, or a set with every node: no restriction), so
    /// Compact moves it only inside them; the plugin passes the candidate
    /// nodes Slurm gave at placement (partition, exclusions, features).
    pub fn set_allowed(&mut self, job: JobId, allowed: Option<&NodeSet>) -> Result<()> {
        match self.meta.get(&job) {
            None => return Err(CoreError::UnknownJob(job)),
            // foreign use never moves
            Some(m) if m.foreign => return Ok(()),
            Some(_) => {}
        }
        // Not journaled: a trial open now cannot be undone past it
        // (issue #11: the undo left the restriction in place while saying
        // the engine was as it was).
        self.keep_all_trials();
        match allowed.filter(|a| a.count() < self.occ.spec().nodes) {
            Some(a) => {
                self.restricted.insert(job, a.clone());
            }
            None => {
                self.restricted.remove(&job);
            }
        }
        Ok(())
    }

    /// The restricted jobs the last Compact held still (a step would have
    /// moved them outside their nodes): that Compact ran on as if they were
    /// pinned, so Theorem 1's bound is promised only over the movable part
    /// then (docs/compass-corrections.md, restricted jobs). Empty after a
    /// Compact that held none. They may move again in the next Compact.
    pub fn held_in_last_compact(&self) -> &[JobId] {
        &self.held_last
    }

    /// Records when `job` is expected to end, in the caller's clock (Slurm:
    /// its start plus its time limit), for Place's ties
    /// ([`EndTies::CoEnd`]). May be called before the job is placed (its
    /// own placement then uses it) and again when the estimate changes; the
    /// engine forgets it when the job departs, or when given a non-finite
    /// end (a job that will not be placed after all).
    pub fn set_expected_end(&mut self, job: JobId, end_s: Seconds) {
        if end_s.is_finite() {
            self.expected_end.insert(job, end_s);
        } else {
            self.expected_end.remove(&job);
        }
    }

    /// The expected end the caller gave for `job`, if any.
    pub fn expected_end(&self, job: JobId) -> Option<Seconds> {
        self.expected_end.get(&job).copied()
    }

    /// A job the engine holds as foreign GPU use (outside the model).
    pub fn is_foreign(&self, job: JobId) -> bool {
        self.meta.get(&job).is_some_and(|m| m.foreign)
    }

    /// The running jobs restricted to part of the engine's nodes: Compact
    /// keeps each inside its set, which can keep it from Theorem 1's bound
    /// (docs/compass-corrections.md, correction on restricted jobs).
    pub fn restricted_jobs(&self) -> impl Iterator<Item = (JobId, &NodeSet)> {
        self.restricted.iter().map(|(&j, s)| (j, s))
    }

    /// Re-indexes every node of `job` (its movability changed), each once;
    /// returns them.
    fn reindex_job(&mut self, job: JobId) -> Vec<NodeId> {
        let mut nodes = self
            .occ
            .job(job)
            .map(|j| j.nodes.clone())
            .unwrap_or_default();
        nodes.sort_unstable();
        nodes.dedup();
        for &n in &nodes {
            self.reindex(n);
        }
        nodes
    }

    /// [`PlacementPolicy::place`] for a job that may only ever run within
    /// `allowed` (its partition, exclusions, features): it is placed there
    /// and every Compact from this one on keeps it there
    /// ([`CompassEngine::set_allowed`]).
    pub fn place_within(
        &mut self,
        job: &JobRequest,
        allowed: &NodeSet,
    ) -> Result<Option<Admission>> {
        self.place_impl(job, Some(allowed), true)
    }

    /// Records a job of ours on `nodes` (one per instance): its occupancy
    /// and metadata (placed by the engine, or adopted where Slurm put it).
    fn record_job(&mut self, job: &JobRequest, nodes: Vec<NodeId>) -> Result<()> {
        self.occ.add(job, nodes)?;
        self.meta.insert(
            job.id,
            JobMeta {
                gpus: job.shape.gpus,
                movable: job.movable,
                tidy_held: false,
                foreign: false,
            },
        );
        Ok(())
    }

    fn place_impl(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
        keep_within: bool,
    ) -> Result<Option<Admission>> {
        self.check_new(job)?;
        self.keep_all_trials();
        let mut undo = Undo::default();
        let (nodes, room) = match self.place_instances(job, allowed, &mut undo) {
            Some(nodes) => (nodes, Vec::new()),
            None => {
                self.rollback(undo);
                match self.place_making_room(job, allowed) {
                    Some(placed) => placed,
                    None => return Ok(None),
                }
            }
        };
        self.record_job(job, nodes.clone())?;
        self.reindex_job(job.id);
        if keep_within {
            self.set_allowed(job.id, allowed)?;
        }
        let mut migrations = room;
        migrations.extend(if self.config.compact {
            self.compact()
        } else {
            Vec::new()
        });
        // Compact may move the new job's own instances too.
        let nodes = self
            .occ
            .job(job.id)
            .map(|j| j.nodes.clone())
            .unwrap_or(nodes);
        Ok(Some(Admission { nodes, migrations }))
    }

    /// Correction 12 (`CompassConfig::make_room`, off by default): a job
    /// Place found no room for moves others aside as guests
    /// ([`CompassEngine::make_room`]) and is placed; `None`, with nothing
    /// changed, when that does not let it fit, or when it is restricted to
    /// `allowed` (correction 12 leaves such jobs to Place as it is).
    /// Returns its nodes and the moves.
    fn place_making_room(
        &mut self,
        job: &JobRequest,
        allowed: Option<&NodeSet>,
    ) -> Option<(Vec<NodeId>, Vec<Migration>)> {
        if !self.config.make_room || !self.config.overflow || allowed.is_some() {
            return None;
        }
        self.begin_trial();
        let Some(moves) = self.make_room(job.shape.instances, job.shape.gpus) else {
            self.undo_trial();
            return None;
        };
        let mut undo = Undo::default();
        let Some(nodes) = self.place_instances(job, None, &mut undo) else {
            self.rollback(undo);
            self.undo_trial();
            return None;
        };
        self.keep_trial();
        Some((nodes, moves))
    }

    fn movable(&self, inst: InstanceRef) -> bool {
        self.meta
            .get(&inst.job)
            .is_some_and(|m| m.movable && !m.tidy_held)
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

impl PlacementPolicy for CompassEngine {
    fn name(&self) -> &'static str {
        "compass"
    }

    fn spec(&self) -> ClusterSpec {
        self.occ.spec()
    }

    /// Algorithm 1, lines 3-9: Place every instance (all-or-nothing), then
    /// Compact. `allowed` only narrows this placement (callers pass
    /// transient limits too, such as nodes held for a draining job); to keep
    /// the job there through later Compacts, [`CompassEngine::place_within`].
    fn place(&mut self, job: &JobRequest, allowed: Option<&NodeSet>) -> Result<Option<Admission>> {
        self.place_impl(job, allowed, false)
    }

    /// Algorithm 1, lines 10-16: Remove every instance, then Compact.
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        self.keep_all_trials();
        self.detach_job(job)?;
        Ok(if self.config.compact {
            self.compact()
        } else {
            Vec::new()
        })
    }

    /// Algorithm 1's Compact on its own (line 16 without a departure): a
    /// running job the cost rule held still may move now.
    fn compact_now(&mut self) -> Vec<Migration> {
        self.keep_all_trials();
        if self.config.compact {
            self.compact()
        } else {
            Vec::new()
        }
    }

    /// Removes the victims without Compact: the next `place` (the pending
    /// job's, Algorithm 1 line 9) compacts after the job has its room.
    fn remove_for_room(&mut self, jobs: &[JobId]) -> Result<Vec<Migration>> {
        self.keep_all_trials();
        for &job in jobs {
            self.detach_job(job)?;
        }
        Ok(Vec::new())
    }

    fn occupancy(&self) -> &Occupancy {
        &self.occ
    }

    fn fit_after_moves_with(&self, g: u32, gone: &[JobId]) -> u64 {
        self.lowerable_fit_with(g, gone)
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

    fn set_expected_end(&mut self, job: JobId, end_s: Seconds) {
        CompassEngine::set_expected_end(self, job, end_s)
    }
}

#[cfg(test)]
mod tests;
