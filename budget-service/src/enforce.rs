//! Enforcement of protected and preemptible time on live Slurm (issue 5,
//! "Enforcement on real Slurm"; rules of `fair-share-budgets.txt`).
//!
//! Every cycle, after the queue is ordered, [`enforce`] turns the snapshot
//! into the inputs of the pure planner [`compass_core::preempt::plan_cycle`]
//! (running jobs with their GPUs, CPUs and memory per node, free GPUs per
//! node and, when the source knows them for every node, each node's
//! partitions, features, GPU types, free CPUs and memory; faulty nodes,
//! team ratios and loads, the eligible pending jobs in fair-share order with
//! what they need of a node: issue 12) and carries out its plan through
//! [`SlurmActions`]:
//! - a resumable victim is requeued and its begin time reset to now (Slurm
//!   would otherwise hold it `cred_expire + 1` = 121 s);
//! - a non-resumable victim is cancelled, with the reason written into its
//!   admin comment first (visible in `scontrol show job`);
//! - a faulty node is set to DRAIN at once; Slurm shows it `draining` while
//!   protected jobs finish their min runtime and `drained` once it is empty.
//!
//! Idempotence: an action ends one *run* of a job (job id + start time), and
//! is logged in the `actions` table; a run already ended by a successful
//! action is never acted on again (it may still be reported running while
//! Slurm completes it; its GPUs then count as free). The no-ping-pong record
//! (`preemptions`) survives restarts.
//!
//! Issue 11, "never loops and keeps its word":
//! - Room is given once: the room freed for a pending job is recorded
//!   (`room_given`); the job preempts no one while it may still start
//!   (`[protection] start_grace_s`), and if it has not started by then the
//!   preemption is *fruitless* (noted on the action rows) and it preempts no
//!   one until its [`request_key`] or the [`nodes_key`] changes or
//!   `fruitless_retry_after_s` passes. At most `max_actions_per_cycle`
//!   victims per cycle (the core's limit).
//! - A requeue Slurm refuses is retried every cycle for
//!   `requeue_retry_for_s` from the first refusal; only then is the victim
//!   cancelled. A job one of whose victims was refused is not given its
//!   room yet.
//! - Jobs of accounts outside the budget tree are unallocated here (never
//!   protected, never preempting).
//! - Records apply to one job, not one job id ([`same_job`]): slurmctld
//!   reuses ids after a cold start.
//! - `enforce = "dry-run"`: the same decisions, recorded with `dry_run`,
//!   nothing sent to Slurm; runs it would have ended count as ended for it.

use compass_core::fairshare::{self, Kind, NodeStats, OrgTree, Placed};
use compass_core::model::{JobId, JobShape, NodeId, NodeSet};
use compass_core::preempt::{
    plan_cycle, NodeNeeds, NodeRoom, PendingJob, Preemption, ProtectionConfig, RunningJob,
    TeamLoad, TeamTable, VictimRule,
};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};

use crate::db::{ActionRow, FaultyNode, RoomGiven};
use crate::error::{BudgetError, Result};
use crate::slurm::{JobNeeds, NodeState, SlurmActions, SlurmJob, SlurmNode, SlurmSnapshot};
use crate::state::AppState;

/// A requeued job whose begin time is at most this far ahead is left alone
/// (the real sink restarts victims 2 s after now, see
/// [`crate::slurm::libslurm::RESTART_DELAY_S`]); further ahead it is Slurm's
/// 121 s hold and is reset; one that has passed while Slurm still shows the
/// job waiting for it is updated again (a scheduling pass looks at it).
pub const RESTART_SLACK_S: i64 = 5;

/// What one enforcement pass did.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct EnforceReport {
    pub requeued: usize,
    pub cancelled: usize,
    /// Faulty nodes set to DRAIN in Slurm this pass.
    pub drained: usize,
    /// Requeued jobs whose begin time was reset this pass.
    pub restarted: usize,
    pub failed: usize,
    /// Requeues and cancels decided but not done (`enforce = "dry-run"`).
    pub dry_run: usize,
}

/// The rule name stored in the action log.
pub fn rule_name(rule: &VictimRule) -> &'static str {
    match rule {
        VictimRule::Unallocated => "unallocated",
        VictimRule::OverServed { .. } => "over_served",
        VictimRule::FaultyNode { .. } => "faulty_node",
    }
}

/// Team ratios (the leaf's fair-share ratio over the window) and loads
/// (allocated GPUs running now against `abs_share x capacity`, both in
/// weighted GPUs), for the
/// "still prioritised" test of [`compass_core::preempt::victim_rule`].
pub fn team_table(
    tree: &OrgTree,
    stats: &[NodeStats],
    running: &[SlurmJob],
    capacity_gpus: f64,
    weights: &compass_core::fairshare::GpuWeights,
) -> TeamTable {
    let mut running_gpus: HashMap<&str, f64> = HashMap::new();
    for j in running
        .iter()
        .filter(|j| j.kind_in(Some(tree)) == Kind::Allocated)
    {
        *running_gpus.entry(j.account.as_str()).or_default() += j.charge_rate(weights);
    }
    let mut t = TeamTable {
        ratio: fairshare::account_ratios(tree, stats),
        ..TeamTable::default()
    };
    for n in tree.nodes() {
        if let Some(a) = &n.account {
            t.load.insert(
                a.clone(),
                TeamLoad {
                    running_gpus: running_gpus.get(a.as_str()).copied().unwrap_or(0.0),
                    allocation_gpus: n.abs_share * capacity_gpus,
                },
            );
        }
    }
    t
}

/// The reason written to the log, the action row and (for a cancel) the
/// job's admin comment.
pub fn explain_preemption(p: &Preemption, victim: &SlurmJob, cause: Option<&SlurmJob>) -> String {
    let verb = if p.requeue {
        "requeued (resumable)"
    } else {
        "cancelled (not resumable)"
    };
    let cause_txt = match (p.for_job, cause) {
        (Some(c), Some(cj)) => format!(
            "pending job {} of account {} ({} GPUs, allocated time) needed its GPUs",
            c.0, cj.account, cj.gpus
        ),
        (Some(c), None) => format!("pending job {} needed its GPUs", c.0),
        (None, _) => String::new(),
    };
    match &p.rule {
        VictimRule::Unallocated if victim.min_runtime_s > 0 => format!(
            "job {} {verb} by compass-budgetd: its account {} has no budget in the tree, so its time is \
             unallocated (never protected, whatever its --min-runtime) and {cause_txt}",
            victim.job.0, victim.account
        ),
        VictimRule::Unallocated => format!(
            "job {} {verb} by compass-budgetd: it ran unallocated time (min runtime 0, never protected) and {cause_txt}",
            victim.job.0
        ),
        VictimRule::OverServed {
            victim_ratio,
            requester_ratio,
        } => format!(
            "job {} {verb} by compass-budgetd: its protected min runtime had ended and its team {} is over-served \
             (running above its allocation; fair-share ratio {victim_ratio:.3}) while {cause_txt} \
             (its team below its allocation; ratio {requester_ratio:.3})",
            victim.job.0, victim.account
        ),
        VictimRule::FaultyNode { .. } => format!(
            "job {} {verb} by compass-budgetd: it ran on a node marked faulty and its protected min runtime had ended",
            victim.job.0
        ),
    }
}

/// How far a requeued victim's submit time may lie after the preemption
/// and still be the victim's: Slurm sets a requeued job's submit time to
/// the time of the requeue (job_mgr.c, `_job_requeue_op`), on slurmctld's
/// clock.
pub const IDENTITY_SLACK_S: i64 = 5;

/// Is a job submitted at `submit` the one a record made at `at` for a job
/// submitted at `rec_submit` is about? Slurm reuses job ids after a cold
/// start, so the id alone is not enough: the submit time must be the one
/// recorded, or a later one from our own requeue at `at` (`rec_submit` 0:
/// a record from before schema 3, identity unknown: any job of that id
/// submitted no later than the requeue). A job requeued again later (a
/// migration, another preemption) is no longer recognised.
pub fn same_job(rec_submit: i64, rec_at: i64, submit: i64) -> bool {
    submit == rec_submit || (rec_submit <= submit && submit <= rec_at + IDENTITY_SLACK_S)
}

/// What a pending job asks for, as the planner sees it; a change lets a job
/// whose preemption was fruitless preempt again.
pub fn request_key(j: &SlurmJob, needs: Option<&NodeNeeds>) -> String {
    let (w, g) = j.shape();
    let mut key = format!(
        "account={} min_runtime_s={} instances={w} gpus_per_instance={g}",
        j.account, j.min_runtime_s
    );
    // What the job needs of a node (issue 12), when the source says: a
    // change of partition, constraint, excluded nodes, GPU type, CPUs or
    // memory (`scontrol update`) is a new request.
    if let Some(n) = needs.filter(|n| **n != NodeNeeds::default()) {
        key.push_str(&format!(
            " partitions={} constraint={} excluded={} gpu_type={} cpus={} mem_mb={}",
            n.partitions.join(","),
            n.constraint,
            n.excluded.iter().cloned().collect::<Vec<_>>().join(","),
            n.gpu_type.as_deref().unwrap_or(""),
            n.cpus_per_node,
            n.mem_per_node_mb
        ));
    }
    key
}

/// The cluster's nodes as the planner sees them (name, GPUs, usable, and
/// when known partitions, features and GPU types); a change lets a job
/// whose preemption was fruitless preempt again.
pub fn nodes_key(nodes: &[SlurmNode]) -> String {
    let mut v: Vec<String> = nodes
        .iter()
        .map(|n| {
            let mut k = format!(
                "{}:{}:{}",
                n.name,
                n.gpus,
                if n.state == NodeState::Up {
                    "up"
                } else {
                    "out"
                }
            );
            // Partitions, features and GPU types, when known (issue 12);
            // not free CPUs or memory, which change with every job.
            if let Some(t) = &n.traits {
                let join = |s: &std::collections::BTreeSet<String>| {
                    s.iter().cloned().collect::<Vec<_>>().join("+")
                };
                k.push_str(&format!(
                    ":{}:{}:{}",
                    join(&t.partitions),
                    join(&t.features),
                    join(&t.gpu_types)
                ));
            }
            k
        })
        .collect();
    v.sort();
    v.join(",")
}

/// The min runtime the planner sees for `j`: its own when its time is
/// allocated ([`SlurmJob::kind_in`]: its account in the tree and a min
/// runtime > 0), else 0 (unallocated: never protected, never preempting).
fn planner_min_runtime(j: &SlurmJob, tree: Option<&OrgTree>) -> f64 {
    match j.kind_in(tree) {
        Kind::Allocated => j.min_runtime_s as f64,
        Kind::Unallocated => 0.0,
    }
}

/// One enforcement pass over a snapshot. `order` is the fair-share order of
/// this cycle; `tree` the budget tree it was ordered under (it decides
/// which jobs run allocated time); `ratios` the teams' ratios and loads.
/// Does nothing when the source reports no nodes. The service settings not
/// in `cfg` (dry run, start grace, requeue retries) come from
/// `state.config.protection`.
pub fn enforce(
    state: &AppState,
    actions: &dyn SlurmActions,
    snap: &SlurmSnapshot,
    order: &[Placed],
    tree: Option<&OrgTree>,
    ratios: &TeamTable,
    cfg: &ProtectionConfig,
) -> Result<EnforceReport> {
    let mut rep = EnforceReport::default();
    if snap.nodes.is_empty() {
        return Ok(rep);
    }
    let prot = &state.config.protection;
    let dry = prot.enforce.dry_run();
    let now = state.now();
    let (faulty_rows, history, rooms) = {
        let db = state.db();
        (db.faulty()?, db.preemptions()?, db.rooms_given()?)
    };
    // Accounts outside the budget tree have no budget: their jobs are
    // unallocated time (never protected, preemptible) and never preempt
    // ([`planner_min_runtime`]).
    // `[gpu_weights]`: every job counts in its team's load by its weighted
    // GPUs, as `team_table` counts the loads.
    let weights = state.config.weights();
    let index: HashMap<&str, NodeId> = snap
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i as NodeId))
        .collect();
    let len = snap.nodes.len() as u32;

    // Faulty nodes: DRAIN at once (again, if someone resumed the node).
    let mut faulty: BTreeSet<NodeId> = BTreeSet::new();
    for f in &faulty_rows {
        let Some(&ix) = index.get(f.node.as_str()) else {
            tracing::warn!(node = %f.node, "faulty node unknown to Slurm; ignored");
            continue;
        };
        faulty.insert(ix);
        let node = &snap.nodes[ix as usize];
        if !node.state.drain_set() && node.state != NodeState::Down {
            let reason = drain_reason(f);
            if dry {
                // Logged once by `compass node fault`; not every cycle.
                tracing::debug!(node = %f.node, "dry run: would drain the faulty node");
                continue;
            }
            let res = actions.drain(&f.node, &reason);
            state.metrics.node_drain(res.is_ok());
            if res.is_err() {
                state.metrics.slurm_rpc_error("drain");
            }
            rep.drained += usize::from(res.is_ok());
            rep.failed += usize::from(res.is_err());
            log(
                state,
                ActionRow::on_node(
                    now,
                    "drain",
                    &f.node,
                    "faulty_node",
                    res.is_ok(),
                    match &res {
                        Ok(()) => reason,
                        Err(e) => format!("drain failed: {e}"),
                    },
                ),
            )?;
        }
    }

    // Running jobs with known placements; runs we already ended are gone
    // (in a dry run, so are the runs it would have ended).
    let mut used = vec![0u32; snap.nodes.len()];
    // What jobs need (pending) or hold (running) besides GPUs (issue 12).
    let job_needs: HashMap<JobId, &JobNeeds> = snap.job_needs.iter().map(|n| (n.job, n)).collect();
    let mut running: Vec<RunningJob> = Vec::new();
    let mut by_id: HashMap<JobId, &SlurmJob> = HashMap::new();
    for j in &snap.running {
        let Some(start) = j.start else { continue };
        if j.alloc.is_empty() {
            continue;
        }
        if state.db().run_ended_by_us(j.job.0, start, dry)? {
            continue;
        }
        let gpus_on: Vec<(NodeId, u32)> = j
            .alloc
            .iter()
            .filter_map(|(n, g)| index.get(n.as_str()).map(|&ix| (ix, *g)))
            .collect();
        for &(ix, g) in &gpus_on {
            used[ix as usize] += g;
        }
        if by_id.contains_key(&j.job) {
            // Slurm should not report a job twice; if it does, the job is
            // one victim on the nodes of both records, acted on once.
            tracing::warn!(
                job = j.job.0,
                "job reported running twice; read as one job on the nodes of both"
            );
            if let Some(r) = running.iter_mut().find(|r| r.id == j.job) {
                r.gpus_on.extend(gpus_on);
            }
            continue;
        }
        let r = RunningJob {
            id: j.job,
            account: j.account.clone(),
            gpus_on,
            min_runtime_s: planner_min_runtime(j, tree),
            started_s: start as f64,
            resumable: j.resumable,
            cpus_per_node: job_needs.get(&j.job).map_or(0, |n| n.cpus_per_node),
            mem_per_node_mb: job_needs.get(&j.job).map_or(0, |n| n.mem_per_node_mb),
            weight: j.weight(&weights),
        };
        // A victim that has run its min runtime since its restart may
        // preempt again.
        if let Some(h) = history.get(&j.job.0) {
            if h.owes
                && same_job(h.victim_submit, h.at, j.submit)
                && start >= h.at
                && !r.protected(now as f64, cfg)
            {
                state.db().settle_preemption(j.job.0)?;
            }
        }
        by_id.insert(j.job, j);
        running.push(r);
    }
    let capacity = snap.nodes.iter().map(|n| n.gpus).max().unwrap_or(0);
    let room = NodeRoom {
        capacity,
        free: snap
            .nodes
            .iter()
            .zip(&used)
            .map(|(n, u)| n.gpus.saturating_sub(*u))
            .collect(),
        usable: NodeSet::from_nodes(
            len,
            snap.nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.state == NodeState::Up && n.gpus > 0)
                .map(|(i, _)| i as NodeId),
        ),
        // Partitions, features, GPU types, CPUs and memory: only when the
        // source knows them for every node (else every node is eligible).
        traits: snap
            .nodes
            .iter()
            .map(|n| n.traits.clone())
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default(),
    };

    // Room given by earlier preemptions: a job that started used it; one that
    // did not within the start grace was given it in vain, and preempts no
    // one until its request or the nodes change or the time-out passes.
    let pending: HashMap<JobId, &SlurmJob> = snap.pending.iter().map(|j| (j.job, j)).collect();
    let nodes_now = nodes_key(&snap.nodes);
    let mut room_given: BTreeSet<JobId> = BTreeSet::new();
    for g in rooms.values() {
        let job = JobId(g.job);
        let Some(j) = pending.get(&job).filter(|j| j.submit == g.submit) else {
            // Started (or ended, or a new job with a reused id).
            state.db().forget_room(g.job)?;
            continue;
        };
        if g.dry_run != dry {
            state.db().forget_room(g.job)?;
            continue;
        }
        let fruitless_at = match g.fruitless_at {
            Some(t) => t,
            None if now - g.at < prot.start_grace_s => {
                room_given.insert(job);
                continue;
            }
            None => {
                let note = format!(
                    "fruitless: job {} did not start within {} s of the room freed for it \
                     (it may need a partition, feature or memory the victims' nodes lack); \
                     it preempts no one until its request or the nodes change, or for {} s",
                    g.job, prot.start_grace_s, prot.fruitless_retry_after_s
                );
                tracing::warn!(job = g.job, since = g.at, "{note}");
                let mut db = state.db();
                db.room_fruitless(g.job, now)?;
                db.note_on_actions_for(g.job, g.at, &note)?;
                now
            }
        };
        let changed = g.request != request_key(j, job_needs.get(&job).map(|n| &n.needs))
            || g.nodes != nodes_now;
        if changed || now - fruitless_at >= prot.fruitless_retry_after_s {
            tracing::info!(
                job = g.job,
                request_or_nodes_changed = changed,
                "a job whose preemption was fruitless may preempt again"
            );
            state.db().forget_room(g.job)?;
        } else {
            room_given.insert(job);
        }
    }

    // A victim restarted while the job it was requeued for still waits with
    // that room given (in its start grace, or fruitless): Slurm gave the
    // room back to the victim, and requeuing it again for the team's next
    // job would most likely end the same way (issue #11: one victim was
    // requeued once per pending job that could not use its node). It is
    // no victim until that job starts or its room is forgotten; a faulty
    // node still evicts it.
    let spared: BTreeSet<JobId> = running
        .iter()
        .filter(|r| {
            let (Some(h), Some(j)) = (history.get(&r.id.0), by_id.get(&r.id)) else {
                return false;
            };
            let Some(by) = h.by_job.map(JobId) else {
                return false;
            };
            let restarted =
                same_job(h.victim_submit, h.at, j.submit) && j.start.is_some_and(|s| s >= h.at);
            let waits = room_given.contains(&by)
                && pending
                    .get(&by)
                    .is_some_and(|p| h.by_submit.is_none_or(|s| s == p.submit));
            restarted && waits
        })
        .map(|r| r.id)
        .collect();
    if !spared.is_empty() {
        tracing::debug!(
            spared = ?spared.iter().map(|j| j.0).collect::<Vec<_>>(),
            "victims restarted while the job they made room for waits: not preempted again"
        );
    }

    // Eligible pending jobs in fair-share order.
    let queue: Vec<PendingJob> = order
        .iter()
        .filter_map(|p| pending.get(&p.job.job).copied())
        .filter(|j| j.eligible)
        .map(|j| {
            let (w, g) = j.shape();
            let h = history
                .get(&j.job.0)
                .filter(|h| same_job(h.victim_submit, h.at, j.submit));
            // The job that preempted it, if it is still that job.
            let preempted_by = h.and_then(|h| {
                let by = JobId(h.by_job?);
                let same = match (by_id.get(&by), h.by_submit) {
                    (Some(r), Some(s)) => same_job(s, h.at, r.submit),
                    _ => true,
                };
                same.then_some(by)
            });
            PendingJob {
                id: j.job,
                account: j.account.clone(),
                shape: JobShape::new(w, g),
                min_runtime_s: planner_min_runtime(j, tree),
                preempted_by,
                owes_min_runtime: h.is_some_and(|h| h.owes),
                room_given: room_given.contains(&j.job),
                needs: job_needs
                    .get(&j.job)
                    .map(|n| n.needs.clone())
                    .unwrap_or_default(),
                // The types it asks for (`--gres=gpu:a100:8`); an untyped
                // request counts at weight 1, as `compass why` prices it.
                weight: j.weight(&weights),
            }
        })
        .collect();

    // Preemption follows the queue's team order (issue 15): under
    // under-allocation-first, loads alone decide, as in the simulator.
    let ratios = &TeamTable {
        loads_decide: state.config.order.team_order.preempts_by_load(),
        ..ratios.clone()
    };
    let plan = plan_cycle(
        &queue, &running, &room, &faulty, &spared, ratios, now as f64, cfg,
    );
    if !plan.held_back.is_empty() {
        tracing::info!(
            limit = cfg.max_preemptions_per_cycle,
            held_back = ?plan.held_back.iter().map(|j| j.0).collect::<Vec<_>>(),
            "preemption limit of this cycle reached; the rest waits for the next cycle"
        );
    }
    // Jobs given room this cycle, and jobs one of whose victims Slurm
    // refused (they are not given room yet: the refused victim is retried).
    let mut fed: BTreeSet<JobId> = BTreeSet::new();
    let mut short: BTreeSet<JobId> = BTreeSet::new();
    for p in &plan.preemptions {
        let Some(victim) = by_id.get(&p.victim).copied() else {
            continue;
        };
        let cause = p.for_job.and_then(|c| pending.get(&c).copied());
        let node = match &p.rule {
            VictimRule::FaultyNode { node } => {
                snap.nodes.get(*node as usize).map(|n| n.name.clone())
            }
            _ => None,
        };
        let mut reason = explain_preemption(p, victim, cause);
        if let Some(n) = &node {
            reason.push_str(&format!(" (node {n} is drained for repair)"));
        }
        // Slurm refused to requeue this run before: retry for
        // `requeue_retry_for_s` from the first refusal of those in a row
        // (each within the retry time, or two cycles, of the next and of
        // now), then cancel.
        let first_refusal = match (p.requeue, victim.start) {
            (true, Some(st)) => state.db().requeue_refused_since(
                victim.job.0,
                st,
                now,
                refusal_gap(prot.requeue_retry_for_s, state.config.cycle_s),
            )?,
            _ => None,
        };
        let refused_for = first_refusal.map(|t| now - t);
        let give_up = refused_for.is_some_and(|s| s >= prot.requeue_retry_for_s);
        let (action, res) = if p.requeue && !give_up {
            ("requeue", (!dry).then(|| actions.requeue(victim.job)))
        } else if p.requeue {
            // e.g. `--no-requeue`: the job must still give the room back.
            reason = format!(
                "{reason}; Slurm refused to requeue it for {} s, cancelled instead",
                refused_for.unwrap_or(0)
            );
            (
                "cancel",
                (!dry).then(|| actions.cancel(victim.job, &reason)),
            )
        } else {
            (
                "cancel",
                (!dry).then(|| actions.cancel(victim.job, &reason)),
            )
        };
        let res = res.unwrap_or(Ok(()));
        let rule = rule_name(&p.rule);
        match &res {
            Ok(()) if dry => {
                rep.dry_run += 1;
                state.metrics.preemption(rule, action, "dry_run");
                if let Some(c) = p.for_job {
                    fed.insert(c);
                }
                tracing::info!(
                    action,
                    job = victim.job.0,
                    cause = ?p.for_job.map(|c| c.0),
                    rule,
                    node = ?node,
                    lost_gpu_s = p.lost_gpu_s,
                    "dry run, not done: {reason}"
                );
            }
            Ok(()) => {
                state.metrics.preemption(rule, action, "ok");
                if action == "requeue" {
                    rep.requeued += 1;
                } else {
                    rep.cancelled += 1;
                }
                if let Some(c) = p.for_job {
                    fed.insert(c);
                }
                state.db().record_preemption(
                    (victim.job.0, victim.submit),
                    cause.map(|c| (c.job.0, c.submit)),
                    now,
                )?;
                tracing::info!(
                    action,
                    job = victim.job.0,
                    cause = ?p.for_job.map(|c| c.0),
                    rule,
                    node = ?node,
                    lost_gpu_s = p.lost_gpu_s,
                    "{reason}"
                );
            }
            Err(e) => {
                rep.failed += 1;
                state.metrics.preemption(rule, action, "failed");
                state.metrics.slurm_rpc_error(action);
                if let Some(c) = p.for_job {
                    short.insert(c);
                }
                tracing::warn!(
                    action,
                    job = victim.job.0,
                    cause = ?p.for_job.map(|c| c.0),
                    rule,
                    error = %e,
                    "preemption failed; retried next cycle"
                );
            }
        }
        log(
            state,
            ActionRow {
                id: 0,
                at: now,
                action: action.into(),
                job: Some(victim.job.0),
                run_start: victim.start,
                node,
                cause_job: p.for_job.map(|c| c.0),
                rule: Some(rule.into()),
                lost_gpu_s: p.lost_gpu_s,
                ok: res.is_ok(),
                detail: match &res {
                    Ok(()) if dry => format!("dry run, not done: {reason}"),
                    Ok(()) => reason,
                    Err(e) => format!("{reason}; FAILED: {e}"),
                },
                submit: Some(victim.submit),
                dry_run: dry,
                user: Some(victim.user.clone()),
                cause_user: cause.map(|c| c.user.clone()),
            },
        )?;
    }
    // Room was given to these jobs: they must now start within the grace.
    for c in fed.difference(&short) {
        if let Some(j) = pending.get(c) {
            state.db().record_room_given(&RoomGiven {
                job: c.0,
                submit: j.submit,
                at: now,
                request: request_key(j, job_needs.get(c).map(|n| &n.needs)),
                nodes: nodes_now.clone(),
                fruitless_at: None,
                dry_run: dry,
            })?;
        }
    }
    for ix in &plan.drain {
        if let Some(n) = snap.nodes.get(*ix as usize) {
            tracing::debug!(node = %n.name, state = ?n.state, "faulty node empty: drained for repair");
        }
    }

    // Requeued victims still waiting for Slurm's begin time: start them now.
    // Two cases: Slurm's own 121 s hold (reset it), and a begin time that
    // has passed while Slurm still shows the job waiting for it (`BeginTime`):
    // Slurm looks at it again only at its next scheduling pass, which
    // nothing may trigger for up to `sched_interval` (a lab test waited 30 s
    // on 24.11). A successful update queues a pass at once, as the select
    // plugin does after a migration; once Slurm has looked, the job waits
    // for another reason (or runs) and is no longer touched.
    for j in snap.pending.iter().filter(|_| !dry) {
        let Some(begin) = j.begin_after else { continue };
        let stale = begin <= now;
        let ours = history.get(&j.job.0).is_some_and(|h| {
            same_job(h.victim_submit, h.at, j.submit)
                && now - h.at <= 600
                && (begin > now + RESTART_SLACK_S || stale)
        });
        if ours {
            match actions.start_now(j.job) {
                Ok(()) => {
                    rep.restarted += 1;
                    tracing::info!(
                        job = j.job.0,
                        begin,
                        "{}",
                        if stale {
                            "updated a requeued job whose begin time has passed, so Slurm schedules it now"
                        } else {
                            "reset the begin time of a requeued job to now"
                        }
                    );
                }
                Err(e) => {
                    state.metrics.slurm_rpc_error("start_now");
                    tracing::warn!(job = j.job.0, error = %e, "could not reset the begin time")
                }
            }
        }
    }
    Ok(rep)
}

/// How far apart two refusals to requeue a run may be and still count as
/// in a row: the retry time, or two cycles when that is longer (the
/// service tries again each cycle while it keeps the run as its victim).
fn refusal_gap(retry_for_s: i64, cycle_s: u64) -> i64 {
    retry_for_s.max(2 * i64::try_from(cycle_s).unwrap_or(i64::MAX / 2))
}

fn log(state: &AppState, row: ActionRow) -> Result<()> {
    state.db().log_action(&row)?;
    Ok(())
}

/// The DRAIN reason Slurm shows for a faulty node.
pub fn drain_reason(f: &FaultyNode) -> String {
    format!("compass faulty: {} (by {})", f.reason, f.by)
}

/// What `compass node fault|repaired` did.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct NodeChange {
    pub node: String,
    pub faulty: bool,
    /// The node's state in Slurm as last seen (`up`, `draining`, ...), if known.
    pub slurm_state: Option<NodeState>,
    pub detail: String,
}

fn known_node(state: &AppState, node: &str) -> Option<SlurmNode> {
    state.nodes().into_iter().find(|n| n.name == node)
}

/// Marks `node` faulty: records it and drains it in Slurm at once (when the
/// service acts on Slurm). An unknown node is refused.
pub fn mark_faulty(state: &AppState, node: &str, reason: &str, who: &str) -> Result<NodeChange> {
    if node.trim().is_empty() {
        return Err(BudgetError::field("node", "a node name is required"));
    }
    if reason.trim().is_empty() {
        return Err(BudgetError::field(
            "reason",
            "say why the node is faulty (kept with the record and in Slurm's node reason)",
        ));
    }
    let known = state.nodes();
    if !known.is_empty() && !known.iter().any(|n| n.name == node) {
        return Err(BudgetError::NotFound(format!(
            "Slurm has no node `{node}` (known: {})",
            known
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let now = state.now();
    let f = FaultyNode {
        node: node.to_string(),
        reason: reason.to_string(),
        since: now,
        by: who.to_string(),
    };
    let detail = match state.actions() {
        Some(_) if state.config.protection.enforce.dry_run() => {
            let why = drain_reason(&f);
            let mut row = ActionRow::on_node(
                now,
                "drain",
                node,
                "admin",
                true,
                format!("dry run, not done: {why}"),
            );
            row.dry_run = true;
            state.db().log_action(&row)?;
            tracing::info!(
                node,
                who,
                reason,
                "node marked faulty; dry run: not drained"
            );
            format!("recorded; enforce = \"dry-run\": not drained in Slurm (would be: {why})")
        }
        Some(a) => {
            let why = drain_reason(&f);
            a.drain(node, &why)?;
            state.db().log_action(&ActionRow::on_node(
                now,
                "drain",
                node,
                "admin",
                true,
                why.clone(),
            ))?;
            tracing::info!(node, who, reason, "node marked faulty and set to DRAIN");
            format!(
                "set to DRAIN in Slurm ({why}); its jobs are preempted as their protections end"
            )
        }
        None => {
            tracing::info!(
                node,
                who,
                reason,
                "node marked faulty (no Slurm actions configured)"
            );
            "recorded; this service does not act on Slurm (slurm is not \"libslurm\")".to_string()
        }
    };
    state.db().set_faulty(&f)?;
    Ok(NodeChange {
        node: node.to_string(),
        faulty: true,
        slurm_state: known_node(state, node).map(|n| n.state),
        detail,
    })
}

/// Returns a repaired node: resumes it in Slurm and clears the record.
pub fn mark_repaired(state: &AppState, node: &str, who: &str) -> Result<NodeChange> {
    let is_faulty = state.db().faulty()?.iter().any(|f| f.node == node);
    if !is_faulty {
        return Err(BudgetError::NotFound(format!(
            "node `{node}` is not marked faulty (see `compass node list`)"
        )));
    }
    let now = state.now();
    let detail = match state.actions() {
        Some(_) if state.config.protection.enforce.dry_run() => {
            let mut row = ActionRow::on_node(
                now,
                "resume",
                node,
                "admin",
                true,
                format!("dry run, not done: repaired (by {who}): resume in Slurm"),
            );
            row.dry_run = true;
            state.db().log_action(&row)?;
            "record cleared; enforce = \"dry-run\": not resumed in Slurm".to_string()
        }
        Some(a) => {
            let res = a.resume(node);
            if let Err(BudgetError::NotFound(m)) = &res {
                return Err(BudgetError::NotFound(m.clone()));
            }
            state.db().log_action(&ActionRow::on_node(
                now,
                "resume",
                node,
                "admin",
                res.is_ok(),
                match &res {
                    Ok(()) => format!("repaired (by {who}): resumed in Slurm"),
                    Err(e) => format!("repaired (by {who}); resume refused by Slurm: {e}"),
                },
            ))?;
            match res {
                Ok(()) => "resumed in Slurm".to_string(),
                Err(e) => format!("record cleared; Slurm refused the resume: {e}"),
            }
        }
        None => "record cleared".to_string(),
    };
    state.db().clear_faulty(node)?;
    tracing::info!(node, who, "node repaired");
    Ok(NodeChange {
        node: node.to_string(),
        faulty: false,
        slurm_state: known_node(state, node).map(|n| n.state),
        detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Authenticator;
    use crate::config::Config;
    use crate::cycle::Cycle;
    use crate::db::Db;
    use crate::slurm::{FakeAction, FakeSlurm};
    use crate::state::TestClock;
    use compass_core::fairshare::{Interval, Kind, NodeSpec};
    use compass_core::preempt::{NodeNeeds, NodeTraits};
    use std::sync::Arc;

    const T0: i64 = 1_800_000_000;

    struct NoAuth;
    impl Authenticator for NoAuth {
        fn authenticate(&self, _c: &str, _p: &[u8]) -> Result<String> {
            Err(BudgetError::Unauthenticated("tests".into()))
        }
    }

    struct World {
        state: Arc<AppState>,
        clock: Arc<TestClock>,
        slurm: Arc<FakeSlurm>,
        cycle: Cycle,
    }

    impl World {
        fn new(extra: &str, db: Db) -> World {
            let config = Config::parse(
                &format!("db = \":memory:\"\ncapacity_gpus = 16\nwindow_s = 3600\n{extra}"),
                "t",
            )
            .unwrap();
            let clock = Arc::new(TestClock::new(T0));
            let state = AppState::new(config, db, Arc::new(NoAuth), clock.clone());
            state
                .db()
                .edit_tree("root", "import", "30/70", T0, |_| {
                    Ok(vec![
                        spec("org", None, 1.0, None),
                        spec("rich", Some("org"), 0.3, Some("rich")),
                        spec("poor", Some("org"), 0.7, Some("poor")),
                    ])
                })
                .unwrap();
            let slurm = Arc::new(FakeSlurm::new());
            slurm.add_node("n1", 8);
            slurm.add_node("n2", 8);
            slurm.set_now(T0);
            let cycle =
                Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
            World {
                state,
                clock,
                slurm,
                cycle,
            }
        }
        fn plain() -> World {
            World::new("", Db::open_in_memory().unwrap())
        }
        fn at(&mut self, t: i64) -> EnforceReport {
            self.clock.set(t);
            self.slurm.set_now(t);
            self.cycle.step().unwrap().enforced
        }
        /// A job running since `start` on `node` with `gpus` GPUs.
        #[allow(clippy::too_many_arguments)]
        fn run(
            &self,
            id: u64,
            account: &str,
            node: &str,
            gpus: u32,
            min: u64,
            res: bool,
            start: i64,
        ) {
            self.slurm.put(SlurmJob::basic(
                JobId(id),
                account,
                gpus,
                min,
                res,
                0,
                start - 10,
            ));
            self.slurm.start_on(JobId(id), start, &[(node, gpus)]);
        }
        fn pend(&self, id: u64, account: &str, w: u32, g: u32, min: u64) {
            let mut j = SlurmJob::basic(JobId(id), account, w * g, min, true, 0, T0);
            j.instances = w;
            self.slurm.put(j);
        }
        fn acts(&self, job: u64) -> Vec<ActionRow> {
            self.state.db().actions(Some(job), 100).unwrap()
        }
        fn seed_rich_usage(&self) {
            self.seed_usage("rich", 8);
        }
        /// `account` ran `gpus` GPUs for most of the lookback window (job
        /// 999, ended 100 s before T0).
        fn seed_usage(&self, account: &str, gpus: u32) {
            self.state
                .db()
                .ingest(
                    &[Interval {
                        job: JobId(999),
                        account: account.into(),
                        gpus,
                        start: T0 - 3000,
                        end: Some(T0 - 100),
                        kind: Kind::Allocated,
                        weight: 1.0,
                    }],
                    T0,
                )
                .unwrap();
        }
    }

    fn spec(name: &str, parent: Option<&str>, share: f64, account: Option<&str>) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            share,
            managers: vec![],
            account: account.map(Into::into),
        }
    }

    #[test]
    fn unallocated_job_requeued_within_one_cycle_and_only_once() {
        let mut w = World::plain();
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 3600, false, T0 - 100);
        assert_eq!(w.at(T0), EnforceReport::default());
        w.pend(3, "poor", 1, 8, 600);
        let rep = w.at(T0 + 1);
        assert_eq!(rep.requeued, 1, "{rep:?}");
        assert_eq!(w.slurm.actions(), vec![FakeAction::Requeue(JobId(1))]);
        let a = &w.acts(1)[0];
        assert_eq!(
            (
                a.action.as_str(),
                a.cause_job,
                a.rule.as_deref(),
                a.run_start
            ),
            ("requeue", Some(3), Some("unallocated"), Some(T0 - 100))
        );
        assert!(a.detail.contains("unallocated time"), "{}", a.detail);
        // Slurm still lists the run (completing): never acted on twice.
        w.slurm.start_on(JobId(1), T0 - 100, &[("n1", 8)]);
        assert_eq!(w.at(T0 + 2), EnforceReport::default());
        assert_eq!(w.acts(1).len(), 1);
    }

    #[test]
    fn non_resumable_victim_is_cancelled_with_its_reason() {
        let mut w = World::plain();
        w.run(1, "rich", "n1", 8, 0, false, T0 - 100);
        w.run(2, "rich", "n2", 8, 0, true, T0 - 50);
        w.pend(3, "poor", 2, 8, 600);
        let rep = w.at(T0);
        assert_eq!((rep.requeued, rep.cancelled), (1, 1), "{rep:?}");
        let acts = w.slurm.actions();
        assert!(acts.contains(&FakeAction::Requeue(JobId(2))), "{acts:?}");
        assert!(!acts.contains(&FakeAction::Requeue(JobId(1))), "{acts:?}");
        let reason = w.slurm.comment(JobId(1)).expect("cancel reason");
        assert!(reason.contains("cancelled (not resumable)"), "{reason}");
        assert!(reason.contains("pending job 3"), "{reason}");
        assert!(w.slurm.job(JobId(1)).unwrap().end.is_some());
    }

    #[test]
    fn protected_job_kept_until_its_min_runtime_then_preempted() {
        let mut w = World::plain();
        w.seed_rich_usage();
        w.run(1, "rich", "n1", 8, 20, true, T0);
        w.run(2, "poor", "n2", 8, 3600, true, T0);
        w.pend(3, "poor", 1, 8, 600);
        for t in [T0, T0 + 10, T0 + 19] {
            assert_eq!(w.at(t), EnforceReport::default(), "protected at {t}");
        }
        let rep = w.at(T0 + 20);
        assert_eq!(rep.requeued, 1);
        let a = &w.acts(1)[0];
        assert_eq!(
            (a.cause_job, a.rule.as_deref(), a.at),
            (Some(3), Some("over_served"), T0 + 20)
        );
        // The poorer team's protected job is never a victim.
        assert!(w.acts(2).is_empty());
    }

    #[test]
    fn a_job_of_one_partition_preempts_only_inside_it() {
        // n1 (gpu) runs the cheap victim, n2 (gpu, debug) the dearer one;
        // the pending job may run in `debug` only.
        let site = |w: &World| {
            for (name, parts) in [("n1", vec!["gpu"]), ("n2", vec!["gpu", "debug"])] {
                w.slurm.set_traits(NodeTraits {
                    name: name.into(),
                    gpus: 8,
                    partitions: parts.into_iter().map(String::from).collect(),
                    free_cpus: 32,
                    free_mem_mb: 256_000,
                    ..NodeTraits::default()
                });
            }
        };
        let setup = |w: &World| {
            w.run(1, "rich", "n1", 8, 0, true, T0 + 50);
            w.run(2, "rich", "n2", 8, 0, false, T0);
            w.pend(3, "poor", 1, 8, 600);
        };
        // Without partitions: the cheap victim on n1.
        let mut w = World::plain();
        setup(&w);
        w.at(T0 + 100);
        assert_eq!(w.slurm.actions(), vec![FakeAction::Requeue(JobId(1))]);
        // In `debug`: only n2's job, never n1's.
        let mut w = World::plain();
        site(&w);
        setup(&w);
        w.slurm.set_needs(JobNeeds {
            job: JobId(3),
            needs: NodeNeeds {
                partitions: vec!["debug".into()],
                ..NodeNeeds::default()
            },
            cpus_per_node: 0,
            mem_per_node_mb: 0,
        });
        w.at(T0 + 100);
        let acts = w.slurm.actions();
        assert_eq!(acts.len(), 1, "{acts:?}");
        assert!(
            matches!(&acts[0], FakeAction::Cancel(j, _) if *j == JobId(2)),
            "{acts:?}"
        );
    }

    #[test]
    fn team_within_its_allocation_keeps_its_jobs() {
        // rich runs 4 GPUs (allocation 4.8): still prioritised.
        let mut w = World::plain();
        w.seed_rich_usage();
        w.run(1, "rich", "n1", 4, 20, true, T0);
        w.run(2, "poor", "n1", 4, 3600, true, T0);
        w.run(4, "poor", "n2", 8, 3600, true, T0);
        w.pend(3, "poor", 1, 8, 600);
        assert_eq!(w.at(T0 + 100), EnforceReport::default());
    }

    /// Issue 15, the simulator's rule (`TeamOrder::preempts_by_load`): under
    /// the default order a team far below its allocation takes an
    /// unprotected job of a team above its own even though its lookback
    /// ratio is the higher one; under `[order] team_order = "ratio"` the
    /// ratio still vetoes it.
    #[test]
    fn the_team_furthest_below_its_allocation_preempts_whatever_the_ratios() {
        for (extra, preempts) in [("", true), ("[order]\nteam_order = \"ratio\"\n", false)] {
            let mut w = World::new(extra, Db::open_in_memory().unwrap());
            // poor used 16 GPUs for most of the window: the higher ratio.
            w.seed_usage("poor", 16);
            // rich runs 16 GPUs (allocation 4.8); job 1 unprotected after 20 s.
            w.run(1, "rich", "n1", 8, 20, true, T0);
            w.run(2, "rich", "n2", 8, 3600, true, T0);
            w.pend(3, "poor", 1, 8, 600);
            let rep = w.at(T0 + 30);
            assert_eq!(rep.requeued, usize::from(preempts), "order {extra:?}");
            if preempts {
                let a = &w.acts(1)[0];
                assert_eq!(
                    (a.cause_job, a.rule.as_deref()),
                    (Some(3), Some("over_served"))
                );
            }
        }
    }

    #[test]
    fn faulty_node_drains_at_once_and_empties_as_protections_end() {
        let mut w = World::plain();
        w.run(1, "rich", "n1", 4, 20, true, T0);
        w.run(2, "rich", "n1", 4, 0, true, T0);
        w.at(T0);
        let e = mark_faulty(&w.state, "n9", "typo", "root").unwrap_err();
        assert!(matches!(e, BudgetError::NotFound(_)), "{e}");
        assert!(mark_faulty(&w.state, "n1", " ", "root").is_err());
        mark_faulty(&w.state, "n1", "ECC errors", "root").unwrap();
        assert_eq!(
            w.slurm.actions()[0],
            FakeAction::Drain("n1".into(), "compass faulty: ECC errors (by root)".into())
        );
        let rep = w.at(T0 + 1);
        assert_eq!(rep.requeued, 1, "the unallocated job goes at once");
        assert_eq!(w.acts(2)[0].rule.as_deref(), Some("faulty_node"));
        assert_eq!(w.acts(2)[0].node.as_deref(), Some("n1"));
        assert_eq!(w.state.nodes()[0].state, NodeState::Draining);
        assert_eq!(w.at(T0 + 19).requeued, 0, "protected until T0+20");
        assert_eq!(w.at(T0 + 20).requeued, 1);
        w.at(T0 + 21);
        assert_eq!(w.state.nodes()[0].state, NodeState::Drained);
        // Requeued jobs do not go back to the faulty node: no room there.
        mark_repaired(&w.state, "n1", "root").unwrap();
        assert_eq!(
            w.slurm.actions().last(),
            Some(&FakeAction::Resume("n1".into()))
        );
        assert!(w.state.db().faulty().unwrap().is_empty());
        assert!(matches!(
            mark_repaired(&w.state, "n1", "root"),
            Err(BudgetError::NotFound(_))
        ));
        let kinds: Vec<String> = w
            .state
            .db()
            .actions(None, 100)
            .unwrap()
            .into_iter()
            .map(|a| a.action)
            .collect();
        assert_eq!(kinds, ["resume", "requeue", "requeue", "drain"]);
    }

    #[test]
    fn a_resumed_faulty_node_is_drained_again_by_the_cycle() {
        let mut w = World::plain();
        w.at(T0);
        mark_faulty(&w.state, "n2", "fans", "root").unwrap();
        // Someone resumes it behind compass's back.
        w.slurm.resume("n2").unwrap();
        let rep = w.at(T0 + 1);
        assert_eq!(rep.drained, 1);
        assert_eq!(w.at(T0 + 2).drained, 0);
        assert_eq!(w.state.nodes()[1].state, NodeState::Drained);
    }

    #[test]
    fn a_schema_2_record_still_guards_its_victim_but_not_a_reused_id() {
        let dir = std::env::temp_dir().join(format!("compass-enforce-v2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.db");
        {
            // A database of schema 2 with a preemption of job 1 for job 3.
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch(crate::db::MIGRATIONS[0]).unwrap();
            c.execute_batch(crate::db::MIGRATIONS[1]).unwrap();
            c.execute_batch("PRAGMA user_version=2").unwrap();
            c.execute(
                "INSERT INTO preemptions (victim, by_job, at, owes) VALUES (1, 3, ?1, 1)",
                [T0],
            )
            .unwrap();
        }
        let db = Db::open(&path).unwrap();
        assert_eq!(db.version().unwrap(), crate::db::known_version());
        let h = db.preemptions().unwrap()[&1];
        assert_eq!((h.victim_submit, h.by_submit, h.owes), (0, None, true));
        // Job 1 as requeued at T0 (Slurm set its submit time to T0): still
        // owes its min runtime, may not preempt.
        let mut w = World::new("", db);
        let mut j = SlurmJob::basic(JobId(1), "poor", 8, 600, true, 0, T0);
        j.instances = 1;
        w.slurm.put(j);
        w.run(5, "rich", "n1", 8, 0, true, T0 + 5);
        w.run(2, "rich", "n2", 8, 3600, false, T0);
        assert_eq!(w.at(T0 + 10), EnforceReport::default());
        // A new job 1 (submitted after a cold start) owes nothing.
        w.slurm.purge(JobId(1));
        let mut j = SlurmJob::basic(JobId(1), "poor", 8, 600, true, 0, T0 + 300);
        j.instances = 1;
        w.slurm.put(j);
        assert_eq!(w.at(T0 + 310).requeued, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_ping_pong_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("compass-enforce-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("b.db");
        {
            let mut w = World::new("", Db::open(&path).unwrap());
            w.seed_rich_usage();
            w.run(1, "rich", "n1", 8, 600, true, T0 - 1000);
            w.run(2, "poor", "n2", 8, 3600, true, T0);
            w.pend(3, "poor", 1, 8, 600);
            assert_eq!(w.at(T0).requeued, 1);
        }
        // A new service on the same database: job 1 (pending again, owes its
        // min runtime) may not preempt, even an unallocated job.
        let mut w = World::new("", Db::open(&path).unwrap());
        let mut j = SlurmJob::basic(JobId(1), "rich", 8, 600, true, 0, T0);
        j.instances = 1;
        w.slurm.put(j);
        w.run(5, "poor", "n1", 8, 0, true, T0 + 5);
        w.run(2, "poor", "n2", 8, 3600, true, T0);
        assert_eq!(w.at(T0 + 10), EnforceReport::default());
        let h = w.state.db().preemptions().unwrap();
        assert_eq!(h[&1].by_job, Some(3));
        assert!(h[&1].owes);
        // Once it has run its min runtime again, it may.
        w.slurm.purge(JobId(5));
        w.slurm.start_on(JobId(1), T0 + 20, &[("n1", 8)]);
        w.at(T0 + 700);
        assert!(!w.state.db().preemptions().unwrap()[&1].owes);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn requeued_job_waiting_for_its_begin_time_is_started_now() {
        let mut w = World::plain();
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 3600, true, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        w.at(T0);
        // Slurm kept the 121 s begin time.
        let mut j = w.slurm.job(JobId(1)).unwrap();
        j.begin_after = Some(T0 + 121);
        w.slurm.put(j);
        assert_eq!(w.at(T0 + 1).restarted, 1);
        assert_eq!(
            w.slurm.actions().last(),
            Some(&FakeAction::StartNow(JobId(1)))
        );
    }

    #[test]
    fn requeued_job_still_shown_waiting_for_a_passed_begin_time_is_updated_again() {
        let mut w = World::plain();
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 3600, true, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        w.at(T0);
        // Our own 2 s begin time, still ahead: left alone.
        let mut j = w.slurm.job(JobId(1)).unwrap();
        j.begin_after = Some(T0 + 2);
        w.slurm.put(j.clone());
        assert_eq!(w.at(T0 + 1).restarted, 0);
        // Passed, but Slurm has not looked at the job since (its reason is
        // still BeginTime): updated again, which queues a scheduling pass.
        assert_eq!(w.at(T0 + 3).restarted, 1);
        assert_eq!(
            w.slurm.actions().last(),
            Some(&FakeAction::StartNow(JobId(1)))
        );
        // Slurm looked (the job waits for room now): not touched again.
        assert_eq!(w.at(T0 + 4).restarted, 0);
        // Someone else's job waiting for a passed begin time: never touched.
        let mut other = w.slurm.job(JobId(3)).unwrap();
        other.begin_after = Some(T0 + 1);
        w.slurm.put(other);
        assert_eq!(w.at(T0 + 5).restarted, 0);
    }

    /// Slurm refuses the first `refusals` requeues (of job `only`, if set),
    /// then accepts.
    struct FlakyRequeue {
        fake: Arc<FakeSlurm>,
        refusals: std::sync::Mutex<u32>,
        only: Option<JobId>,
    }
    impl SlurmActions for FlakyRequeue {
        fn requeue(&self, job: JobId) -> Result<()> {
            let mut left = self.refusals.lock().unwrap();
            if *left > 0 && self.only.is_none_or(|o| o == job) {
                *left -= 1;
                return Err(BudgetError::Slurm(format!(
                    "requeue job {}: Resource temporarily unavailable",
                    job.0
                )));
            }
            self.fake.requeue(job)
        }
        fn start_now(&self, job: JobId) -> Result<()> {
            self.fake.start_now(job)
        }
        fn cancel(&self, job: JobId, reason: &str) -> Result<()> {
            self.fake.cancel(job, reason)
        }
        fn drain(&self, node: &str, reason: &str) -> Result<()> {
            self.fake.drain(node, reason)
        }
        fn resume(&self, node: &str) -> Result<()> {
            self.fake.resume(node)
        }
    }

    fn flaky(w: &mut World, refusals: u32) {
        flaky_for(w, refusals, None);
    }

    fn flaky_for(w: &mut World, refusals: u32, only: Option<JobId>) {
        w.cycle = Cycle::new(w.state.clone(), w.slurm.clone(), w.slurm.clone()).with_actions(
            Arc::new(FlakyRequeue {
                fake: w.slurm.clone(),
                refusals: std::sync::Mutex::new(refusals),
                only,
            }),
        );
    }

    #[test]
    fn a_refused_victim_is_retried_though_its_partner_was_requeued() {
        // Job 3 needs both nodes; Slurm refuses job 2's requeue once. Job 3
        // was not given its room yet: job 2 is retried next cycle.
        let mut w = World::plain();
        flaky_for(&mut w, 1, Some(JobId(2)));
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 0, true, T0 - 100);
        w.pend(3, "poor", 2, 8, 600);
        let rep = w.at(T0);
        assert_eq!((rep.requeued, rep.failed), (1, 1), "{rep:?}");
        assert!(w.state.db().rooms_given().unwrap().is_empty());
        let rep = w.at(T0 + 10);
        assert_eq!((rep.requeued, rep.failed), (1, 0), "{rep:?}");
        assert_eq!(
            w.slurm.actions(),
            vec![FakeAction::Requeue(JobId(1)), FakeAction::Requeue(JobId(2))]
        );
        assert!(w.state.db().rooms_given().unwrap().contains_key(&3));
    }

    #[test]
    fn a_transient_requeue_refusal_is_retried_not_cancelled() {
        let mut w = World::plain();
        flaky(&mut w, 1);
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 3600, false, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        let rep = w.at(T0);
        assert_eq!((rep.requeued, rep.cancelled, rep.failed), (0, 0, 1));
        let rep = w.at(T0 + 10);
        assert_eq!(
            (rep.requeued, rep.cancelled, rep.failed),
            (1, 0, 0),
            "{rep:?}"
        );
        assert!(
            w.slurm.job(JobId(1)).unwrap().end.is_none(),
            "not cancelled"
        );
        assert_eq!(w.slurm.actions(), vec![FakeAction::Requeue(JobId(1))]);
        let acts: Vec<(String, bool)> = w.acts(1).into_iter().map(|a| (a.action, a.ok)).collect();
        assert_eq!(
            acts,
            [
                ("requeue".to_string(), true),
                ("requeue".to_string(), false)
            ]
        );
    }

    #[test]
    fn a_persistent_requeue_refusal_cancels_after_the_retry_time() {
        let mut w = World::plain();
        flaky(&mut w, u32::MAX);
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 3600, false, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        // Default requeue_retry_for_s = 60: retried every cycle for 60 s.
        for t in [T0, T0 + 10, T0 + 30, T0 + 59] {
            let rep = w.at(t);
            assert_eq!((rep.cancelled, rep.failed), (0, 1), "at {t}: {rep:?}");
            assert!(w.slurm.job(JobId(1)).unwrap().end.is_none());
        }
        let rep = w.at(T0 + 60);
        assert_eq!((rep.cancelled, rep.failed), (1, 0));
        let reason = w.slurm.comment(JobId(1)).unwrap();
        assert!(
            reason.contains("refused to requeue it for 60 s"),
            "{reason}"
        );
        let acts: Vec<String> = w.acts(1).into_iter().map(|a| a.action).collect();
        assert_eq!(acts, ["cancel", "requeue", "requeue", "requeue", "requeue"]);
    }

    #[test]
    fn an_old_refusal_does_not_turn_a_later_requeue_into_a_cancel() {
        // Slurm refuses job 1's requeue once; the room comes from job 2's
        // end instead. An hour later job 1 is a victim again: Slurm is
        // asked again, not told to cancel it (issue #11: the refusal an
        // hour old counted as one an hour long).
        let mut w = World::plain();
        flaky_for(&mut w, 1, Some(JobId(1)));
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 3600, false, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        let rep = w.at(T0);
        assert_eq!((rep.requeued, rep.cancelled, rep.failed), (0, 0, 1));
        w.slurm.end(JobId(2), T0 + 5);
        w.slurm.start_on(JobId(3), T0 + 6, &[("n2", 8)]);
        w.at(T0 + 10);
        w.pend(4, "poor", 1, 8, 600);
        let rep = w.at(T0 + 3600);
        assert_eq!(
            (rep.requeued, rep.cancelled, rep.failed),
            (1, 0, 0),
            "{rep:?}"
        );
        assert_eq!(
            w.slurm.actions(),
            vec![FakeAction::Requeue(JobId(1))],
            "asked again, not cancelled"
        );
    }

    #[test]
    fn a_victim_given_back_its_room_is_not_requeued_for_the_next_job() {
        // Six jobs of one team that cannot run on n1 (what the planner does
        // not see); Slurm restarts the victim there after each requeue.
        // Before: each job in turn became the team's head and requeued it
        // (six requeues in a minute, issue #11). Now it is requeued once,
        // and again only after the first job's room is forgotten
        // (`fruitless_retry_after_s`).
        let mut w = World::plain();
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 3600, false, T0 - 100);
        for id in 10..16 {
            w.pend(id, "poor", 1, 8, 600);
        }
        let requeues = |w: &World| {
            w.slurm
                .actions()
                .iter()
                .filter(|a| **a == FakeAction::Requeue(JobId(1)))
                .count()
        };
        let retry = w.state.config.protection.fruitless_retry_after_s;
        let mut t = T0;
        while t < T0 + retry {
            w.at(t);
            if w.slurm.job(JobId(1)).unwrap().start.is_none() {
                w.slurm.start_on(JobId(1), t + 3, &[("n1", 8)]);
            }
            t += 10;
        }
        assert_eq!(requeues(&w), 1, "{:?}", w.slurm.actions());
        // The room is forgotten (its grace and the retry time after it
        // pass): one more requeue, then spared again.
        let grace = w.state.config.protection.start_grace_s;
        for _ in 0..(grace / 10 + 6) {
            w.at(t);
            if w.slurm.job(JobId(1)).unwrap().start.is_none() {
                w.slurm.start_on(JobId(1), t + 3, &[("n1", 8)]);
            }
            t += 10;
        }
        assert_eq!(requeues(&w), 2, "{:?}", w.slurm.actions());
        // Once the job it was requeued for starts elsewhere, it is a victim
        // like any other again.
        w.slurm.end(JobId(2), t);
        let waiting: Vec<u64> = (10..16)
            .filter(|&id| w.slurm.job(JobId(id)).unwrap().start.is_none())
            .collect();
        assert!(!waiting.is_empty());
        let rooms = w.state.db().rooms_given().unwrap();
        let fed = *rooms.keys().next().expect("a job holds the room");
        w.slurm.start_on(JobId(fed), t + 1, &[("n2", 8)]);
        w.at(t + 10);
        assert_eq!(requeues(&w), 3, "{:?}", w.slurm.actions());
    }

    #[test]
    fn a_job_reported_running_twice_is_acted_on_once() {
        // A source that reports job 1 twice (on n1 and on n2).
        struct Twice(Arc<FakeSlurm>);
        impl crate::slurm::SlurmSource for Twice {
            fn snapshot(&self) -> Result<crate::slurm::SlurmSnapshot> {
                let mut s = self.0.snapshot()?;
                if let Some(j) = s.running.iter().find(|j| j.job == JobId(1)).cloned() {
                    s.running.push(SlurmJob {
                        alloc: vec![("n2".into(), 8)],
                        ..j
                    });
                }
                Ok(s)
            }
        }
        let mut w = World::plain();
        w.cycle = Cycle::new(
            w.state.clone(),
            Arc::new(Twice(w.slurm.clone())),
            w.slurm.clone(),
        )
        .with_actions(w.slurm.clone());
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.pend(3, "poor", 2, 8, 600);
        let rep = w.at(T0);
        assert_eq!((rep.requeued, rep.failed), (1, 0), "{rep:?}");
        assert_eq!(w.acts(1).len(), 1, "{:?}", w.acts(1));
    }

    #[test]
    fn a_job_that_cannot_use_the_room_preempts_once_not_every_cycle() {
        // Job 3 cannot run on n2 (a partition or feature the planner does
        // not see): Slurm restarts the victim there and job 3 stays pending.
        let mut w = World::plain();
        w.run(1, "rich", "n2", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n1", 8, 7200, false, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        let requeues = |w: &World| {
            w.slurm
                .actions()
                .iter()
                .filter(|a| **a == FakeAction::Requeue(JobId(1)))
                .count()
        };
        assert_eq!(w.at(T0).requeued, 1);
        let mut t = T0;
        while t < T0 + 600 {
            t += 10;
            if w.slurm.job(JobId(1)).unwrap().start.is_none() {
                w.slurm.start_on(JobId(1), t, &[("n2", 8)]);
            }
            w.at(t);
        }
        assert_eq!(requeues(&w), 1, "{:?}", w.slurm.actions());
        // The preemption is marked fruitless where `compass why` shows it.
        let a = &w.acts(1)[0];
        assert!(a.detail.contains("fruitless"), "{}", a.detail);
        // The time-out (default 1800 s after it was found fruitless): it
        // may try again, once.
        while t < T0 + 120 + 1800 + 100 {
            t += 10;
            if w.slurm.job(JobId(1)).unwrap().start.is_none() {
                w.slurm.start_on(JobId(1), t, &[("n2", 8)]);
            }
            w.at(t);
        }
        assert_eq!(requeues(&w), 2, "{:?}", w.slurm.actions());
    }

    #[test]
    fn a_fruitless_job_preempts_again_when_its_request_changes() {
        let mut w = World::plain();
        w.run(1, "rich", "n2", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n1", 8, 7200, false, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        assert_eq!(w.at(T0).requeued, 1);
        w.slurm.start_on(JobId(1), T0 + 3, &[("n2", 8)]);
        for t in [T0 + 10, T0 + 200, T0 + 300] {
            assert_eq!(w.at(t).requeued, 0, "at {t}");
        }
        // The user asks for something else (two 4-GPU instances).
        let mut j = w.slurm.job(JobId(3)).unwrap();
        j.instances = 2;
        w.slurm.put(j);
        assert_eq!(w.at(T0 + 310).requeued, 1);
    }

    #[test]
    fn a_fruitless_job_preempts_again_when_its_partition_changes() {
        let mut w = World::plain();
        w.run(1, "rich", "n2", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n1", 8, 7200, false, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        let needs = |parts: &[&str]| JobNeeds {
            job: JobId(3),
            needs: NodeNeeds {
                partitions: parts.iter().map(|p| p.to_string()).collect(),
                ..NodeNeeds::default()
            },
            cpus_per_node: 0,
            mem_per_node_mb: 0,
        };
        w.slurm.set_needs(needs(&["only1"]));
        assert_eq!(w.at(T0).requeued, 1);
        w.slurm.start_on(JobId(1), T0 + 3, &[("n2", 8)]);
        for t in [T0 + 10, T0 + 200, T0 + 300] {
            assert_eq!(w.at(t).requeued, 0, "at {t}");
        }
        // The admin moves the job (`scontrol update Partition=gpu`).
        w.slurm.set_needs(needs(&["gpu"]));
        assert_eq!(w.at(T0 + 310).requeued, 1);
    }

    #[test]
    fn a_job_that_starts_in_its_room_leaves_no_record() {
        let mut w = World::plain();
        w.run(1, "rich", "n2", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n1", 8, 7200, false, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        assert_eq!(w.at(T0).requeued, 1);
        assert!(w.state.db().rooms_given().unwrap().contains_key(&3));
        w.slurm.start_on(JobId(3), T0 + 3, &[("n2", 8)]);
        w.at(T0 + 10);
        assert!(w.state.db().rooms_given().unwrap().is_empty());
        assert!(!w.acts(1)[0].detail.contains("fruitless"));
    }

    #[test]
    fn max_actions_per_cycle_spreads_preemptions_over_cycles() {
        let mut w = World::new(
            "[protection]\nmax_actions_per_cycle = 2\n",
            Db::open_in_memory().unwrap(),
        );
        w.slurm.add_node("n3", 8);
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 0, true, T0 - 100);
        w.run(4, "rich", "n3", 8, 0, true, T0 - 100);
        for id in [5, 6, 7] {
            w.pend(id, "poor", 1, 8, 600);
        }
        let rep = w.at(T0);
        assert_eq!(rep.requeued, 2, "{rep:?}");
        let rep = w.at(T0 + 10);
        assert_eq!(rep.requeued, 1, "{rep:?}");
    }

    #[test]
    fn dry_run_records_what_it_would_do_and_touches_nothing() {
        let mut w = World::new(
            "[protection]\nenforce = \"dry-run\"\n",
            Db::open_in_memory().unwrap(),
        );
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 0, false, T0 - 100);
        w.pend(3, "poor", 2, 8, 600);
        let rep = w.at(T0);
        assert_eq!(
            (rep.requeued, rep.cancelled, rep.dry_run),
            (0, 0, 2),
            "{rep:?}"
        );
        assert!(w.slurm.actions().is_empty(), "{:?}", w.slurm.actions());
        let a = &w.acts(1)[0];
        assert!(a.dry_run && a.ok && a.action == "requeue", "{a:?}");
        assert!(a.detail.starts_with("dry run, not done:"), "{}", a.detail);
        assert_eq!(w.acts(2)[0].action, "cancel");
        // Recorded once, as the real mode would act once.
        for t in [T0 + 10, T0 + 200, T0 + 2000] {
            assert_eq!(w.at(t), EnforceReport::default(), "at {t}");
        }
        assert_eq!(w.state.db().actions(None, 100).unwrap().len(), 2);
        // Node faults: recorded, not drained.
        let c = mark_faulty(&w.state, "n1", "fans", "root").unwrap();
        assert!(c.detail.contains("dry-run"), "{}", c.detail);
        w.at(T0 + 2010);
        mark_repaired(&w.state, "n1", "root").unwrap();
        assert!(w.slurm.actions().is_empty(), "{:?}", w.slurm.actions());
        assert!(w.slurm.comment(JobId(2)).is_none());
    }

    #[test]
    fn accounts_outside_the_tree_get_no_protection_and_never_preempt() {
        let mut w = World::plain();
        // A protected-looking job of an account the tree does not know.
        w.run(1, "ghost", "n1", 8, 3600, true, T0);
        w.run(2, "poor", "n2", 8, 3600, true, T0);
        w.pend(3, "poor", 1, 8, 600);
        let rep = w.at(T0 + 1);
        assert_eq!(rep.requeued, 1, "{rep:?}");
        let a = &w.acts(1)[0];
        assert_eq!(a.rule.as_deref(), Some("unallocated"));
        assert!(a.detail.contains("no budget in the tree"), "{}", a.detail);
        // And its pending jobs never preempt, whatever their --min-runtime.
        let mut w = World::plain();
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 0, true, T0 - 100);
        w.pend(3, "ghost", 1, 8, 3600);
        assert_eq!(w.at(T0), EnforceReport::default());
        assert!(w.slurm.actions().is_empty());
    }

    #[test]
    fn a_reused_job_id_inherits_no_preemption_record() {
        let mut w = World::plain();
        w.seed_rich_usage();
        w.run(1, "rich", "n1", 8, 600, true, T0 - 1000);
        w.run(2, "poor", "n2", 8, 3600, true, T0);
        w.pend(3, "poor", 1, 8, 600);
        assert_eq!(w.at(T0).requeued, 1);
        assert!(w.state.db().preemptions().unwrap()[&1].owes);
        // slurmctld loses its state (cold start): ids restart, and a new
        // job 1 (another submit time) is pending; job 5 runs unallocated.
        for id in [1, 2, 3] {
            w.slurm.purge(JobId(id));
        }
        w.run(5, "poor", "n1", 8, 0, true, T0 + 400);
        w.run(6, "poor", "n2", 8, 3600, true, T0 + 400);
        let mut j = SlurmJob::basic(JobId(1), "rich", 8, 600, true, 0, T0 + 500);
        j.instances = 1;
        w.slurm.put(j);
        let rep = w.at(T0 + 510);
        assert_eq!(rep.requeued, 1, "the new job 1 owes nothing: {rep:?}");
        assert_eq!(w.acts(5)[0].cause_job, Some(1));
        // The requeued victim itself is still recognised (Slurm resets its
        // submit time to the requeue time): see no_ping_pong_survives_a_restart.
    }

    #[test]
    fn enforcement_off_only_orders() {
        let mut w = World::new(
            "[protection]\nenforce = false\n",
            Db::open_in_memory().unwrap(),
        );
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 0, true, T0 - 100);
        w.pend(3, "poor", 1, 8, 600);
        assert_eq!(w.at(T0), EnforceReport::default());
        assert!(w.slurm.actions().is_empty());
    }

    #[test]
    fn held_jobs_cause_no_preemption() {
        let mut w = World::plain();
        w.run(1, "rich", "n1", 8, 0, true, T0 - 100);
        w.run(2, "rich", "n2", 8, 0, true, T0 - 100);
        let mut j = SlurmJob::basic(JobId(3), "poor", 8, 600, true, 0, T0);
        j.eligible = false;
        w.slurm.put(j);
        assert_eq!(w.at(T0), EnforceReport::default());
    }

    /// Replaces the tree by two teams `x` and `y` with these shares.
    fn teams_x_y(w: &World, x: f64, y: f64) {
        w.state
            .db()
            .edit_tree("root", "import", "x/y", T0, |_| {
                Ok(vec![
                    spec("org", None, 1.0, None),
                    spec("x", Some("org"), x, Some("x")),
                    spec("y", Some("org"), y, Some("y")),
                ])
            })
            .unwrap();
    }

    /// Nodes `names` of 8 GPUs of type `ty`.
    fn typed_nodes(w: &World, names: &[&str], ty: &str) {
        for name in names {
            w.slurm.set_traits(NodeTraits {
                name: name.to_string(),
                gpus: 8,
                gpu_types: [ty.to_string()].into(),
                ..NodeTraits::default()
            });
        }
    }

    /// A job of 8 GPUs of type `ty`: running on `node` since T0 (min
    /// runtime 20 s), or pending (min runtime 600 s) without a node.
    fn typed_job(w: &World, id: u64, account: &str, ty: &str, node: Option<&str>) {
        let min = if node.is_some() { 20 } else { 600 };
        let mut j = SlurmJob::basic(JobId(id), account, 8, min, true, 0, T0 - 10);
        j.instances = 1;
        j.gpu_types.insert(ty.into(), 8);
        w.slurm.put(j);
        if let Some(n) = node {
            w.slurm.start_on(JobId(id), T0, &[(n, 8)]);
        }
    }

    /// `[gpu_weights]`: loads and allocations are weighted GPUs, and so is
    /// what a victim takes from its team's load. Weight 2: x (allocation 20
    /// of 32 weighted GPUs) runs two 8-GPU a100 jobs (32); taking one
    /// leaves 16, below its allocation, so y's job waits (with plain counts,
    /// 32 - 8 = 24, it was requeued). Weight 0.25: x (allocation 3 of 6)
    /// runs three 8-GPU l40s jobs (6); one is 2 of them (6 - 2 = 4 >= 3),
    /// so y's job takes one (with plain counts, 6 - 8, none was legal).
    #[test]
    fn weighted_gpus_count_in_every_team_load() {
        let weights = "[gpu_weights]\na100 = 2.0\nl40s = 0.25\n";
        let mut w = World::new(weights, Db::open_in_memory().unwrap());
        teams_x_y(&w, 0.625, 0.375);
        typed_nodes(&w, &["n1", "n2"], "a100");
        // y used its budget many times over: the ratio test never holds.
        w.seed_usage("y", 16);
        typed_job(&w, 1, "x", "a100", Some("n1"));
        typed_job(&w, 2, "x", "a100", Some("n2"));
        typed_job(&w, 3, "y", "a100", None);
        assert_eq!(w.at(T0 + 30), EnforceReport::default());
        assert!(w.slurm.actions().is_empty(), "{:?}", w.slurm.actions());

        let mut w = World::new(weights, Db::open_in_memory().unwrap());
        teams_x_y(&w, 0.5, 0.5);
        w.slurm.add_node("n3", 8);
        typed_nodes(&w, &["n1", "n2", "n3"], "l40s");
        w.seed_usage("y", 16);
        typed_job(&w, 1, "x", "l40s", Some("n1"));
        typed_job(&w, 2, "x", "l40s", Some("n2"));
        typed_job(&w, 4, "x", "l40s", Some("n3"));
        typed_job(&w, 3, "y", "l40s", None);
        let rep = w.at(T0 + 30);
        assert_eq!(rep.requeued, 1, "{rep:?}");
        let acts = w.state.db().actions(None, 100).unwrap();
        assert_eq!(acts.len(), 1, "{acts:?}");
        assert_eq!(
            (acts[0].cause_job, acts[0].rule.as_deref()),
            (Some(3), Some("over_served"))
        );
    }

    /// Preemption follows the queue (issue 15's order): the team below its
    /// allocation is served first though its lookback ratio is the higher.
    /// rich (allocation 4.8, low ratio) runs 8 protected allocated GPUs;
    /// poor (allocation 11.2, high ratio) none; both wait with an 8-GPU
    /// job and one unallocated job can be taken. Under the default order
    /// poor's job takes it; under `team_order = "ratio"`, rich's. The
    /// policy simulator does the same (`preemption_serves_teams_in_queue_order`).
    #[test]
    fn preemption_follows_the_queue_order() {
        for (extra, served) in [("", 4), ("[order]\nteam_order = \"ratio\"\n", 3)] {
            let mut w = World::new(extra, Db::open_in_memory().unwrap());
            w.seed_usage("poor", 16);
            w.run(1, "rich", "n1", 8, 3600, true, T0);
            w.run(2, "rich", "n2", 8, 0, true, T0);
            w.pend(3, "rich", 1, 8, 600);
            w.pend(4, "poor", 1, 8, 600);
            let rep = w.at(T0 + 30);
            assert_eq!(rep.requeued, 1, "order {extra:?}: {rep:?}");
            let a = &w.acts(2)[0];
            assert_eq!(
                (a.cause_job, a.rule.as_deref()),
                (Some(served), Some("unallocated")),
                "order {extra:?}"
            );
        }
    }

    /// A job of an account outside the tree runs unallocated time whatever
    /// its --min-runtime, for the ledger and the queue order as for
    /// enforcement (`Kind::of_job`): its run is recorded free, and pending
    /// it sorts after a budgeted team's unallocated job.
    #[test]
    fn an_account_outside_the_tree_is_unallocated_in_the_ledger_and_the_order() {
        let mut w = World::plain();
        w.run(1, "ghost", "n1", 8, 3600, true, T0);
        w.pend(2, "ghost", 1, 8, 600);
        w.pend(3, "rich", 1, 8, 0);
        w.at(T0 + 10);
        let iv = w.state.db().latest_interval(JobId(1)).unwrap().unwrap();
        assert_eq!(iv.kind, Kind::Unallocated);
        let usage = w.state.db().usage_between(T0 - 100, T0 + 10).unwrap();
        assert_eq!(usage["ghost"].charged_gpu_s, 0.0, "{usage:?}");
        let q = w.state.queue();
        let ids: Vec<u64> = q.order.iter().map(|p| p.job.job.0).collect();
        assert_eq!(ids, vec![3, 2]);
        assert_eq!(q.order[1].kind, Kind::Unallocated);
        let why = fairshare::explain(&q.order[1], 2);
        assert!(!why.contains("charged to its budget"), "{why}");
        assert!(why.contains("its time is unallocated"), "{why}");
    }
}
