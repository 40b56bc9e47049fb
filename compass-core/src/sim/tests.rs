//! Hand-checked replays on tiny traces, with a test policy whose decisions
//! are obvious (spread: most free node first, ties to the lower index).

use super::*;
use crate::model::{JobShape, NodeId, NodeSet};
use crate::placement::worth::{RunHistory, TRIAL_RELEASES};
use crate::placement::{Occupancy, POLICY_NAMES};

/// Places each instance on the node with the most free GPUs (lowest index on
/// ties), which fragments on purpose. Optionally, after every departure,
/// moves each instance of the highest-index non-empty node to the
/// lowest-index node with room; and counts ticks. Forkable on request.
#[derive(Clone)]
struct Spread {
    occ: Occupancy,
    compact_on_remove: bool,
    /// Skip jobs marked not movable (a well-behaved policy); `false` makes
    /// a buggy one, to test that the simulator catches it.
    respect_movable: bool,
    tick_every: Option<Seconds>,
    ticks: Vec<Seconds>,
    forkable: bool,
}

impl Spread {
    fn new(nodes: u32) -> Self {
        let spec = ClusterSpec::new(nodes, 8).unwrap();
        Self {
            occ: Occupancy::new(spec),
            compact_on_remove: false,
            respect_movable: true,
            tick_every: None,
            ticks: Vec::new(),
            forkable: false,
        }
    }
}

impl PlacementPolicy for Spread {
    fn name(&self) -> &'static str {
        "test-spread"
    }
    fn spec(&self) -> ClusterSpec {
        self.occ.spec()
    }
    fn place(&mut self, job: &JobRequest, _allowed: Option<&NodeSet>) -> Result<Option<Admission>> {
        self.occ.spec().check_job(job)?;
        let n = self.occ.spec().nodes;
        let mut free: Vec<u32> = (0..n).map(|k| self.occ.free(k)).collect();
        let mut nodes = Vec::new();
        for _ in 0..job.shape.instances {
            let best = (0..n)
                .filter(|&k| free[k as usize] >= job.shape.gpus)
                .max_by_key(|&k| (free[k as usize], Reverse(k)));
            let Some(k) = best else { return Ok(None) };
            free[k as usize] -= job.shape.gpus;
            nodes.push(k);
        }
        self.occ.add(job, nodes.clone())?;
        Ok(Some(Admission {
            nodes,
            migrations: Vec::new(),
        }))
    }
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        self.occ.remove(job)?;
        let mut migrations = Vec::new();
        if !self.compact_on_remove {
            return Ok(migrations);
        }
        let n = self.occ.spec().nodes;
        let Some(top) = (0..n).rev().find(|&k| self.occ.used(k) > 0) else {
            return Ok(migrations);
        };
        let on_top: Vec<(JobId, u32, u32)> = self
            .occ
            .jobs()
            .flat_map(|r| {
                r.nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, &k)| k == top)
                    .map(|(i, _)| (r.request.id, i as u32, r.request.shape.gpus))
            })
            .collect();
        for (id, instance, g) in on_top {
            if self.respect_movable && !self.occ.job(id).is_some_and(|r| r.request.movable) {
                continue;
            }
            if let Some(to) = (0..top).find(|&k| self.occ.free(k) >= g) {
                let from: NodeId = self.occ.move_instance(id, instance, to)?;
                migrations.push(Migration {
                    job: id,
                    instance,
                    from,
                    to,
                });
            }
        }
        Ok(migrations)
    }
    fn tick_interval(&self) -> Option<Seconds> {
        self.tick_every
    }
    fn tick(&mut self, now: Seconds) -> Vec<Migration> {
        self.ticks.push(now);
        Vec::new()
    }
    fn occupancy(&self) -> &Occupancy {
        &self.occ
    }
    fn set_movable(&mut self, job: JobId, movable: bool) -> Result<()> {
        self.occ.set_movable(job, movable)
    }
    fn honours_movable(&self) -> bool {
        true
    }
    fn fork(&self) -> Option<Box<dyn PlacementPolicy>> {
        self.forkable
            .then(|| Box::new(self.clone()) as Box<dyn PlacementPolicy>)
    }
}

/// Places each job on the nodes its script names (`Ok(None)` when they lack
/// room) and, when it places job `trigger`, first moves one instance of
/// another job to a node, if that node has room. Forkable, so backfill can
/// try a start on a copy.
#[derive(Clone)]
struct Scripted {
    occ: Occupancy,
    at: BTreeMap<u64, Vec<NodeId>>,
    /// `trigger -> (job, instance, to)`.
    moves: BTreeMap<u64, (u64, u32, NodeId)>,
}

impl PlacementPolicy for Scripted {
    fn name(&self) -> &'static str {
        "test-scripted"
    }
    fn spec(&self) -> ClusterSpec {
        self.occ.spec()
    }
    fn place(&mut self, job: &JobRequest, _allowed: Option<&NodeSet>) -> Result<Option<Admission>> {
        let mut trial = self.occ.clone();
        let mut migrations = Vec::new();
        if let Some(&(j, instance, to)) = self.moves.get(&job.id.0) {
            let id = JobId(j);
            let g = trial.job(id).map(|r| r.request.shape.gpus);
            if g.is_some_and(|g| trial.free(to) >= g) {
                let from = trial.move_instance(id, instance, to)?;
                migrations.push(Migration {
                    job: id,
                    instance,
                    from,
                    to,
                });
            }
        }
        let nodes = self.at[&job.id.0].clone();
        let mut need = BTreeMap::new();
        for &n in &nodes {
            *need.entry(n).or_insert(0) += job.shape.gpus;
        }
        if need.iter().any(|(&n, &g)| trial.free(n) < g) {
            return Ok(None);
        }
        trial.add(job, nodes.clone())?;
        self.occ = trial;
        Ok(Some(Admission { nodes, migrations }))
    }
    fn remove(&mut self, job: JobId) -> Result<Vec<Migration>> {
        self.occ.remove(job)?;
        Ok(Vec::new())
    }
    fn occupancy(&self) -> &Occupancy {
        &self.occ
    }
    fn fork(&self) -> Option<Box<dyn PlacementPolicy>> {
        Some(Box::new(self.clone()))
    }
}

fn job(name: &str, submit: f64, dur: f64, w: u32, g: u32) -> TraceJob {
    TraceJob {
        name: name.into(),
        submit_s: submit,
        duration_s: dur,
        shape: JobShape::new(w, g),
        account: None,
        min_runtime_s: None,
        resumable: true,
        line: 0,
    }
}

fn config(nodes: u32, queue: QueuePolicy) -> SimConfig {
    let mut cfg = SimConfig::new(ClusterSpec::new(nodes, 8).unwrap());
    cfg.queue = queue;
    cfg
}

/// Replays and returns the result plus the start time of every job.
fn run(
    policy: &mut dyn PlacementPolicy,
    jobs: &[TraceJob],
    cfg: &SimConfig,
) -> (SimResult, BTreeMap<u64, f64>) {
    let mut starts = BTreeMap::new();
    let mut obs = FnObserver(|e: &Event<'_>, _p: &dyn PlacementPolicy| {
        if e.kind == EventKind::Start {
            starts.insert(e.job.unwrap().0, e.time);
        }
    });
    let r = simulate(jobs, policy, cfg, &mut obs).unwrap();
    (r, starts)
}

/// One 8-GPU node: A (6 GPUs, 0-10) runs; B (4 GPUs) arrives at 1 and
/// blocks; C (2 GPUs, 5 s) arrives at 2 and fits the 2 free GPUs.
fn hol_trace() -> Vec<TraceJob> {
    vec![
        job("A", 0.0, 10.0, 1, 6),
        job("B", 1.0, 10.0, 1, 4),
        job("C", 2.0, 5.0, 1, 2),
    ]
}

#[test]
fn fifo_blocks_behind_the_head() {
    let (r, starts) = run(
        &mut Spread::new(1),
        &hol_trace(),
        &config(1, QueuePolicy::Fifo),
    );
    // C waits behind B although it fits: both start when A ends at 10.
    assert_eq!(starts, BTreeMap::from([(0, 0.0), (1, 10.0), (2, 10.0)]));
    assert_eq!(r.jobs, 3);
    // JCTs 10, 19, 13.
    assert_eq!(r.ajct_s, 14.0);
    assert_eq!((r.waits.overall.max, r.waits.overall.p50), (9.0, 8.0));
    // Queue non-empty on [1, 10) with 6 of 8 GPUs used.
    assert_eq!(
        (r.peak_s, r.agu, r.metric_window.as_str()),
        (9.0, 0.75, "peak")
    );
    assert_eq!(r.backfilled, 0);
    assert_eq!(r.makespan_s, 20.0);
}

#[test]
fn backfill_starts_a_job_that_ends_before_the_reservation() {
    let (r, starts) = run(
        &mut Spread::new(1),
        &hol_trace(),
        &config(1, QueuePolicy::Backfill),
    );
    // C ends at 7 <= B's reservation at 10: it starts at once; B still at 10.
    assert_eq!(starts, BTreeMap::from([(0, 0.0), (1, 10.0), (2, 2.0)]));
    assert_eq!(r.ajct_s, 34.0 / 3.0);
    assert_eq!(r.backfilled, 1);
    assert_eq!(r.reservation_slips, 0);
    // [1,2): 6/8, [2,7): 8/8, [7,10): 6/8.
    assert_eq!(r.peak_s, 9.0);
    assert!((r.agu - 8.0 / 9.0).abs() < 1e-12);
}

#[test]
fn backfill_never_delays_the_head() {
    // Two nodes. A (8 GPUs, 0-10) on node 0, X (4 GPUs, 0-100) on node 1.
    // Head B (8 GPUs) arrives at 1: reservation t=10, when A ends.
    // C (4 GPUs, 50 s) fits node 1 now but runs past 10 and the reservation
    // has no spare whole node: it must wait. D (4 GPUs, 5 s) ends at 7: it
    // backfills.
    let jobs = vec![
        job("A", 0.0, 10.0, 1, 8),
        job("X", 0.0, 100.0, 1, 4),
        job("B", 1.0, 10.0, 1, 8),
        job("C", 2.0, 50.0, 1, 4),
        job("D", 2.0, 5.0, 1, 4),
    ];
    let (fifo, s_fifo) = run(&mut Spread::new(2), &jobs, &config(2, QueuePolicy::Fifo));
    let (bf, s_bf) = run(
        &mut Spread::new(2),
        &jobs,
        &config(2, QueuePolicy::Backfill),
    );
    assert_eq!(s_fifo[&2], 10.0);
    assert_eq!(
        s_bf[&2], 10.0,
        "the head starts exactly when it would without backfill"
    );
    assert_eq!(s_bf[&3], 10.0, "C would have run past the reservation");
    assert_eq!(s_bf[&4], 2.0, "D ends before the reservation");
    assert_eq!(s_fifo[&4], 20.0, "under FIFO D waits for B to end");
    assert_eq!((bf.backfilled, bf.reservation_slips), (1, 0));
    assert!(bf.ajct_s < fifo.ajct_s);
}

#[test]
fn backfill_uses_spare_capacity_at_the_reservation() {
    // One node: A (6, 0-10); head B (4) at 1; C (2 GPUs, 20 s) at 2 runs
    // past B's reservation at 10, but at 10 the node has room for two
    // 4-GPU instances, and C takes at most one of them: it may start.
    let jobs = vec![
        job("A", 0.0, 10.0, 1, 6),
        job("B", 1.0, 10.0, 1, 4),
        job("C", 2.0, 20.0, 1, 2),
    ];
    let (r, starts) = run(
        &mut Spread::new(1),
        &jobs,
        &config(1, QueuePolicy::Backfill),
    );
    assert_eq!(starts, BTreeMap::from([(0, 0.0), (1, 10.0), (2, 2.0)]));
    assert_eq!(r.backfilled, 1);
}

#[test]
fn job_outcomes_are_each_jobs_wait_and_completion_in_submission_order() {
    // One node: A (4 GPUs) and B (4 GPUs) run at once, C (8 GPUs) waits
    // for both to end (A at 30, B at 100); D (8 GPUs) after C.
    let jobs = vec![
        job("A", 0.0, 30.0, 1, 4),
        job("B", 0.0, 100.0, 1, 4),
        job("C", 10.0, 10.0, 1, 8),
        job("D", 20.0, 5.0, 1, 8),
    ];
    let mut cfg = config(1, QueuePolicy::Fifo);
    let (r, _) = run(&mut Spread::new(1), &jobs, &cfg);
    assert!(r.job_outcomes.is_empty(), "kept only when asked");
    cfg.record_jobs = true;
    let (r, starts) = run(&mut Spread::new(1), &jobs, &cfg);
    let got: Vec<(&str, Seconds, Seconds, Seconds, u32, u32)> = r
        .job_outcomes
        .iter()
        .map(|o| {
            (
                o.name.as_str(),
                o.submit_s,
                o.start_s,
                o.end_s,
                o.instances,
                o.gpus,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("A", 0.0, 0.0, 30.0, 1, 4),
            ("B", 0.0, 0.0, 100.0, 1, 4),
            ("C", 10.0, 100.0, 110.0, 1, 8),
            ("D", 20.0, 110.0, 115.0, 1, 8),
        ]
    );
    for (i, o) in r.job_outcomes.iter().enumerate() {
        assert_eq!(o.start_s, starts[&(i as u64)]);
        assert_eq!(o.migration_charges, 0);
    }
    // AJCT (eq. 16) is their mean completion time.
    let mean = r
        .job_outcomes
        .iter()
        .map(|o| o.end_s - o.submit_s)
        .sum::<f64>()
        / 4.0;
    assert_eq!(r.ajct_s, mean);
}

#[test]
fn afr_and_agu_average_only_while_the_queue_is_non_empty() {
    // Two nodes; spread puts A and B (4 GPUs each) on different nodes:
    // 2 partial nodes where one packing has none, N*SIF = 2, SIF = 1.
    // C (8 GPUs) arrives at 10 and waits until A ends at 30.
    let jobs = vec![
        job("A", 0.0, 30.0, 1, 4),
        job("B", 0.0, 100.0, 1, 4),
        job("C", 10.0, 10.0, 1, 8),
    ];
    let mut cfg = config(2, QueuePolicy::Fifo);
    cfg.record_timeseries = true;
    let (r, starts) = run(&mut Spread::new(2), &jobs, &cfg);
    assert_eq!(starts[&2], 30.0);
    assert_eq!((r.peak_s, r.busy_s), (20.0, 100.0));
    assert_eq!(r.afr, 1.0);
    assert_eq!(r.agu, 0.5);
    assert_eq!(r.wcc_coverage, 1.0);
    assert_eq!((r.max_n_sif, r.max_n_sif_under_wcc), (2, Some(2)));
    assert_eq!(r.ajct_s, 160.0 / 3.0);
    assert_eq!(
        (r.waits.whole_node.count, r.waits.whole_node.p50),
        (1, 20.0)
    );
    assert_eq!((r.waits.sub_node.count, r.waits.sub_node.max), (2, 0.0));
    let by: Vec<&str> = r.waits.by_size.iter().map(|s| s.gpus.as_str()).collect();
    assert_eq!(by, vec!["3-4", "5-8"]);
    let ts: Vec<(f64, u64, f64, u32)> = r
        .timeseries
        .iter()
        .map(|s| (s.t_s, s.n_sif, s.utilisation, s.empty_nodes))
        .collect();
    assert_eq!(
        ts,
        vec![
            (0.0, 2, 0.5, 0),
            (10.0, 2, 0.5, 0),
            (30.0, 0, 0.75, 0),
            (40.0, 0, 0.25, 1),
            (100.0, 0, 0.0, 2)
        ]
    );
}

#[test]
fn migration_cost_is_charged_per_migrated_instance_or_per_job() {
    // A (4 GPUs, 0-10) on node 0; B (2 x 2 GPUs, 0-100) spread onto node 1.
    // When A ends, both of B's instances move to node 0: 2 migrations. Per
    // instance (the paper's `c` per migration, the default): 2 charges of
    // c = 8 s, B completes at 116. Per job: one charge, B completes at 108.
    let jobs = vec![job("A", 0.0, 10.0, 1, 4), job("B", 0.0, 100.0, 2, 2)];
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    let mut migrated = Vec::new();
    let mut obs = FnObserver(|e: &Event<'_>, p: &dyn PlacementPolicy| {
        if !e.migrations.is_empty() {
            migrated.push((e.time, e.migrations.len(), p.occupancy().used(0)));
        }
    });
    let r = simulate(&jobs, &mut p, &config(2, QueuePolicy::Fifo), &mut obs).unwrap();
    assert_eq!(migrated, vec![(10.0, 2, 4)]);
    assert_eq!(r.migration_charge, MigrationCharge::PerInstance);
    assert_eq!(
        (r.migrations, r.migration_charges, r.migrated_jobs),
        (2, 2, 1)
    );
    assert_eq!(r.ajct_s, (10.0 + 116.0) / 2.0);
    assert_eq!(r.makespan_s, 116.0);
    assert_eq!(r.migrations_per_job, 1.0);

    let mut cfg = config(2, QueuePolicy::Fifo);
    cfg.migration.charge = MigrationCharge::PerJob;
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    let r = simulate(&jobs, &mut p, &cfg, &mut NoObserver).unwrap();
    assert_eq!(
        (r.migrations, r.migration_charges, r.migrated_jobs),
        (2, 1, 1)
    );
    assert_eq!(r.ajct_s, (10.0 + 108.0) / 2.0);
    assert_eq!(r.makespan_s, 108.0);

    let mut cfg = config(2, QueuePolicy::Fifo);
    cfg.migration.migration_cost_s = 0.0;
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    let r = simulate(&jobs, &mut p, &cfg, &mut NoObserver).unwrap();
    assert_eq!((r.ajct_s, r.migration_charges), (55.0, 2));
}

#[test]
fn migrating_a_non_resumable_job_is_an_error() {
    let mut jobs = vec![job("A", 0.0, 10.0, 1, 4), job("B", 0.0, 100.0, 2, 2)];
    jobs[1].resumable = false;
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    p.respect_movable = false;
    let e = simulate(
        &jobs,
        &mut p,
        &config(2, QueuePolicy::Fifo),
        &mut NoObserver,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not resumable"), "{e}");
}

#[test]
fn migrating_a_job_the_cost_rule_holds_is_an_error() {
    // B has 90 s left at 10; with c = 40 s its move would not pay, so the
    // rule holds it; a policy that moves it anyway is caught.
    let jobs = vec![job("A", 0.0, 10.0, 1, 4), job("B", 0.0, 100.0, 2, 2)];
    let mut cfg = config(2, QueuePolicy::Fifo);
    cfg.migration.migration_cost_s = 40.0;
    cfg.migration.remaining = RemainingRun::Oracle;
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    p.respect_movable = false;
    let e = simulate(&jobs, &mut p, &cfg, &mut NoObserver).unwrap_err();
    assert!(e.to_string().contains("holds still"), "{e}");
}

#[test]
fn ticks_only_while_jobs_run() {
    let jobs = vec![job("A", 0.0, 12.0, 1, 1), job("B", 100.0, 3.0, 1, 1)];
    let mut p = Spread::new(1);
    p.tick_every = Some(5.0);
    simulate(
        &jobs,
        &mut p,
        &config(1, QueuePolicy::Fifo),
        &mut NoObserver,
    )
    .unwrap();
    assert_eq!(p.ticks, vec![5.0, 10.0]);
}

/// A replay runs at most `max_ticks` rounds of the policy's tick, then
/// stops with an error naming the policy, the limit and the round.
#[test]
fn ticks_are_bounded() {
    let jobs = vec![job("A", 0.0, 1000.0, 1, 1)];
    let mut cfg = config(1, QueuePolicy::Fifo);
    cfg.max_ticks = 100;
    let mut p = Spread::new(1);
    p.tick_every = Some(5.0);
    let e = simulate(&jobs, &mut p, &cfg, &mut NoObserver).unwrap_err();
    assert_eq!(p.ticks.len(), 100);
    let e = e.to_string();
    assert!(e.contains("more than 100 rounds of 5 s"), "{e}");
    // Exactly the limit still replays.
    let jobs = vec![job("A", 0.0, 500.0, 1, 1)];
    let mut p = Spread::new(1);
    p.tick_every = Some(5.0);
    simulate(&jobs, &mut p, &cfg, &mut NoObserver).unwrap();
    assert_eq!(p.ticks.len(), 100);
    assert_eq!(
        SimConfig::new(ClusterSpec::new(1, 8).unwrap()).max_ticks,
        MAX_TICKS
    );
}

/// Times far beyond any trace are refused (the trace readers refuse them
/// too): at 1e19 s a round of 300 s is lost in the rounding of the clock
/// and the replay never ended.
#[test]
fn times_past_the_trace_limit_are_refused() {
    for (submit, duration) in [(1e19, 1e5), (0.0, 2e10), (f64::NAN, 1.0), (0.0, -1.0)] {
        let jobs = vec![job("A", 0.0, 10.0, 1, 1), job("B", submit, duration, 1, 1)];
        let mut p = Spread::new(1);
        p.tick_every = Some(300.0);
        let e = simulate(
            &jobs,
            &mut p,
            &config(1, QueuePolicy::Fifo),
            &mut NoObserver,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("job `B`") && e.contains("1e10"), "{e}");
    }
    // The limit itself replays.
    let jobs = vec![job("A", MAX_TRACE_S, MAX_TRACE_S, 1, 1)];
    let mut p = Spread::new(1);
    p.tick_every = Some(1e9);
    simulate(
        &jobs,
        &mut p,
        &config(1, QueuePolicy::Fifo),
        &mut NoObserver,
    )
    .unwrap();
    assert_eq!(p.ticks.len(), 10);
}

#[test]
fn jobs_larger_than_the_cluster_are_counted_not_replayed() {
    let jobs = vec![job("A", 0.0, 1.0, 3, 8), job("B", 0.0, 1.0, 1, 8)];
    let r = simulate(
        &jobs,
        &mut Spread::new(2),
        &config(2, QueuePolicy::Fifo),
        &mut NoObserver,
    )
    .unwrap();
    assert_eq!((r.jobs, r.unschedulable), (1, 1));
    // An instance larger than a node is a clear error.
    let jobs = vec![job("A", 0.0, 1.0, 1, 9)];
    assert!(simulate(
        &jobs,
        &mut Spread::new(2),
        &config(2, QueuePolicy::Fifo),
        &mut NoObserver
    )
    .is_err());
}

#[test]
fn a_policy_that_never_places_is_reported() {
    struct Never(Occupancy);
    impl PlacementPolicy for Never {
        fn name(&self) -> &'static str {
            "never"
        }
        fn spec(&self) -> ClusterSpec {
            self.0.spec()
        }
        fn place(&mut self, _: &JobRequest, _: Option<&NodeSet>) -> Result<Option<Admission>> {
            Ok(None)
        }
        fn remove(&mut self, _: JobId) -> Result<Vec<Migration>> {
            Ok(Vec::new())
        }
        fn occupancy(&self) -> &Occupancy {
            &self.0
        }
    }
    let mut p = Never(Occupancy::new(ClusterSpec::new(1, 8).unwrap()));
    let e = simulate(
        &[job("A", 0.0, 1.0, 1, 1)],
        &mut p,
        &config(1, QueuePolicy::Fifo),
        &mut NoObserver,
    )
    .unwrap_err();
    assert!(e.to_string().contains("idle cluster"), "{e}");
}

/// A random-ish but fixed trace (LCG) with every instance size.
fn mixed_trace(n: usize) -> Vec<TraceJob> {
    let mut x: u64 = 42;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    (0..n)
        .map(|i| {
            let g = [1, 1, 1, 2, 4, 8, 3, 1, 8, 6][(next() % 10) as usize];
            let w = if g == 8 {
                1 + (next() % 3) as u32
            } else {
                1 + (next() % 2) as u32
            };
            job(
                &format!("j{i}"),
                (i as f64) * 7.0 + (next() % 5) as f64,
                20.0 + (next() % 200) as f64,
                w,
                g,
            )
        })
        .collect()
}

#[test]
fn every_built_policy_replays_deterministically() {
    let jobs = mixed_trace(300);
    let mut exercised = 0;
    for name in POLICY_NAMES {
        for queue in [QueuePolicy::Fifo, QueuePolicy::Backfill] {
            let cfg = config(6, queue);
            let opts = PolicyOptions::default();
            if placement::build(name, cfg.spec, &opts).is_err() {
                continue; // not on this branch yet
            }
            let mut check = |e: &Event<'_>, p: &dyn PlacementPolicy| {
                let occ = p.occupancy();
                assert_eq!(occ.running_jobs(), e.running, "{name}: running jobs");
                assert!(occ.used_gpus() <= occ.spec().total_gpus());
            };
            let first = simulate_named(name, &jobs, &cfg, &opts, &mut FnObserver(&mut check))
                .unwrap_or_else(|e| panic!("{name} ({queue:?}): {e}"));
            let again = simulate_named(name, &jobs, &cfg, &opts, &mut NoObserver).unwrap();
            assert_eq!(
                serde_json::to_string(&first).unwrap(),
                serde_json::to_string(&again).unwrap()
            );
            assert_eq!(first.jobs, 300, "{name}");
            assert!(first.agu > 0.0 && first.agu <= 1.0, "{name}");
            assert!(first.afr >= 0.0 && first.waits.overall.p99 >= first.waits.overall.p50);
            exercised += 1;
        }
    }
    assert!(exercised >= 2, "at least compass under both queue policies");
}

#[test]
fn same_input_gives_bit_identical_output() {
    let jobs = mixed_trace(400);
    for queue in [QueuePolicy::Fifo, QueuePolicy::Backfill] {
        let mut cfg = config(5, queue);
        cfg.record_timeseries = true;
        let mut a = Spread::new(5);
        a.compact_on_remove = true;
        let mut b = Spread::new(5);
        b.compact_on_remove = true;
        let ra = simulate(&jobs, &mut a, &cfg, &mut NoObserver).unwrap();
        let rb = simulate(&jobs, &mut b, &cfg, &mut NoObserver).unwrap();
        assert_eq!(
            serde_json::to_vec(&ra).unwrap(),
            serde_json::to_vec(&rb).unwrap()
        );
        assert_eq!(ra.jobs, 400);
        assert!(ra.migrations > 0);
    }
}

#[test]
fn backfill_without_migrations_never_slips_a_reservation() {
    // Over many mixed traces and cluster sizes, a policy that never migrates
    // must never see a backfilled start move the head's reservation later.
    let mut backfilled = 0;
    for (n, jobs) in [(3, 250), (5, 400), (8, 600)] {
        let trace = mixed_trace(jobs);
        let cfg = config(n, QueuePolicy::Backfill);
        let r = simulate(&trace, &mut Spread::new(n), &cfg, &mut NoObserver).unwrap();
        assert_eq!(r.reservation_slips, 0, "{n} nodes");
        assert_eq!(r.migrations, 0);
        backfilled += r.backfilled;
    }
    assert!(backfilled > 0, "the traces exercise backfill");
}

#[test]
fn gpu_time_is_conserved_under_every_policy() {
    // The integral of used GPUs over the replay equals the sum over jobs of
    // w * g * (duration + c * charges): completions, migration charges and
    // GPU accounting agree, for every policy and queue.
    for name in POLICY_NAMES {
        for (nodes, queue) in [
            (4, QueuePolicy::Fifo),
            (6, QueuePolicy::Backfill),
            (9, QueuePolicy::Fifo),
        ] {
            let jobs = mixed_trace(250);
            let mut cfg = config(nodes, queue);
            cfg.record_timeseries = true;
            let opts = PolicyOptions {
                defrag_interval_s: 60.0,
                ..PolicyOptions::default()
            };
            let Ok(mut policy) = placement::build(name, cfg.spec, &opts) else {
                continue;
            };
            let mut charges = vec![0u64; jobs.len()];
            let mut obs = FnObserver(|e: &Event<'_>, _: &dyn PlacementPolicy| {
                // One charge per migrated instance (the default).
                let mut moved: Vec<(u64, u32)> =
                    e.migrations.iter().map(|m| (m.job.0, m.instance)).collect();
                moved.sort_unstable();
                moved.dedup();
                for (j, _) in moved {
                    if !(e.kind == EventKind::Start && e.job == Some(JobId(j))) {
                        charges[j as usize] += 1;
                    }
                }
            });
            let r = simulate(&jobs, policy.as_mut(), &cfg, &mut obs).unwrap();
            let expected: f64 = jobs
                .iter()
                .zip(&charges)
                .map(|(j, &c)| {
                    j.shape.total_gpus() as f64
                        * (j.duration_s + cfg.migration.migration_cost_s * c as f64)
                })
                .sum();
            let total = cfg.spec.total_gpus() as f64;
            let used: f64 = r
                .timeseries
                .windows(2)
                .map(|w| w[0].utilisation * total * (w[1].t_s - w[0].t_s))
                .sum();
            assert!(
                (used - expected).abs() <= 1e-9 * expected,
                "{name} {queue:?}: {used} vs {expected}"
            );
            assert_eq!(charges.iter().sum::<u64>(), r.migration_charges, "{name}");
            assert_eq!(
                r.timeseries.last().map(|s| (s.running, s.queued)),
                Some((0, 0))
            );
        }
    }
}

#[test]
fn the_cost_rule_holds_a_job_whose_move_would_not_pay_for_itself() {
    // A (4 GPUs, 0-10) on node 0; B (2 x 2 GPUs, 0-100) spread onto node 1.
    // At 10 Spread would move both of B's instances to node 0. With c = 40 s
    // and payback 2, B has 90 s left (oracle): 90 - 40 = 50 < 2 x 40, so the
    // rule holds it still and it ends at 100 unmoved.
    let jobs = vec![job("A", 0.0, 10.0, 1, 4), job("B", 0.0, 100.0, 2, 2)];
    let replay = |payback: f64, remaining: RemainingRun| {
        let mut cfg = config(2, QueuePolicy::Fifo);
        cfg.migration.migration_cost_s = 40.0;
        cfg.migration.payback = payback;
        cfg.migration.remaining = remaining;
        let mut p = Spread::new(2);
        p.compact_on_remove = true;
        simulate(&jobs, &mut p, &cfg, &mut NoObserver).unwrap()
    };
    let held = replay(2.0, RemainingRun::Oracle);
    assert_eq!((held.migrations, held.makespan_s), (0, 100.0));
    assert_eq!(held.remaining_run, RemainingRun::Oracle);
    // Just enough: payback 1.25 needs 90 - 40 >= 50.
    let moved = replay(1.25, RemainingRun::Oracle);
    assert_eq!((moved.migrations, moved.makespan_s), (2, 180.0));
    // Payback 0: the paper's behaviour, every move.
    let always = replay(0.0, RemainingRun::Oracle);
    assert_eq!((always.migrations, always.makespan_s), (2, 180.0));
    // From its time limit (100 s rounds up to 15 min) B looks long: moved.
    let limit = replay(2.0, RemainingRun::TimeLimit);
    assert_eq!((limit.migrations, limit.makespan_s), (2, 180.0));
    assert_eq!(time_limit_for(100.0), 900.0);
    assert_eq!(time_limit_for(900.0), 900.0);
    assert_eq!(time_limit_for(901.0), 1800.0);
    assert_eq!(time_limit_for(700_000.0), 1_209_600.0);
}

#[test]
fn the_rule_decides_with_its_own_cost_and_completions_pay_the_charged_one() {
    // The setting above (payback 2, B has 90 s left at 10 s, oracle). The
    // rule weighs `rule_cost_s` when given, the completion pays `c`: a
    // live plugin decides with its configured cost, a requeue costs what
    // it costs.
    let jobs = vec![job("A", 0.0, 10.0, 1, 4), job("B", 0.0, 100.0, 2, 2)];
    let replay = |charged: f64, rule: Option<f64>| {
        let mut cfg = config(2, QueuePolicy::Fifo);
        cfg.migration.migration_cost_s = charged;
        cfg.migration.rule_cost_s = rule;
        cfg.migration.payback = 2.0;
        cfg.migration.remaining = RemainingRun::Oracle;
        let mut p = Spread::new(2);
        p.compact_on_remove = true;
        simulate(&jobs, &mut p, &cfg, &mut NoObserver)
    };
    // Weighed at 10 s the move pays (90 - 10 >= 2 x 10); each of B's two
    // instances is charged 40 s.
    let moved = replay(40.0, Some(10.0)).unwrap();
    assert_eq!((moved.migrations, moved.makespan_s), (2, 180.0));
    assert_eq!(
        (moved.migration_cost_s, moved.rule_cost_s),
        (40.0, Some(10.0))
    );
    // Weighed at 40 s it does not (90 - 40 < 2 x 40), whatever it costs.
    let held = replay(1.0, Some(40.0)).unwrap();
    assert_eq!((held.migrations, held.makespan_s), (0, 100.0));
    // No rule cost: the rule weighs `c`, as before.
    let same = replay(40.0, None).unwrap();
    assert_eq!((same.migrations, same.rule_cost_s), (0, None));
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let e = replay(40.0, Some(bad)).unwrap_err();
        assert!(e.to_string().contains("cost rule"), "{e}");
    }
}

#[test]
fn the_cost_rule_never_moves_a_job_inside_its_protected_time() {
    // The setting above, where B is moved at 10 s when nothing else holds
    // it; with `--min-runtime` of 20 s B is protected at 10 s, as the Slurm
    // plugin keeps it (protection counts from the last start), so it ends
    // at 100 unmoved. With 5 s of protection it is past it and moves.
    let replay = |min_runtime_s: f64| {
        let mut b = job("B", 0.0, 100.0, 2, 2);
        b.min_runtime_s = Some(min_runtime_s);
        let jobs = vec![job("A", 0.0, 10.0, 1, 4), b];
        let mut cfg = config(2, QueuePolicy::Fifo);
        cfg.migration.migration_cost_s = 40.0;
        cfg.migration.payback = 1.25;
        cfg.migration.remaining = RemainingRun::Oracle;
        let mut p = Spread::new(2);
        p.compact_on_remove = true;
        simulate(&jobs, &mut p, &cfg, &mut NoObserver).unwrap()
    };
    let protected = replay(20.0);
    assert_eq!((protected.migrations, protected.makespan_s), (0, 100.0));
    let past = replay(5.0);
    assert_eq!((past.migrations, past.makespan_s), (2, 180.0));
}

#[test]
fn a_payback_below_one_is_refused_with_a_clear_error() {
    let jobs = vec![job("A", 0.0, 10.0, 1, 4)];
    for bad in [0.5, -1.0, f64::NAN, f64::INFINITY] {
        let mut cfg = config(1, QueuePolicy::Fifo);
        cfg.migration.payback = bad;
        let e = simulate(&jobs, &mut Spread::new(1), &cfg, &mut NoObserver).unwrap_err();
        assert!(e.to_string().contains("payback"), "{e}");
    }
}

#[test]
fn every_compass_migration_pays_for_itself() {
    // On a mixed trace, every job compass moves (outside its own placement)
    // had, at that event, an expected remaining run of at least payback x c
    // after the move; with the rule off (payback 0) some moves do not.
    let jobs = mixed_trace(300);
    let check = |payback: f64, remaining: RemainingRun| -> (u64, u64) {
        let mut cfg = config(5, QueuePolicy::Backfill);
        cfg.migration.migration_cost_s = 60.0;
        cfg.migration.payback = payback;
        cfg.migration.remaining = remaining;
        let mut starts: BTreeMap<u64, f64> = BTreeMap::new();
        let mut charged: BTreeMap<u64, f64> = BTreeMap::new();
        let (mut moves, mut unpaid) = (0, 0);
        let mut obs = FnObserver(|e: &Event<'_>, _: &dyn PlacementPolicy| {
            if e.kind == EventKind::Start {
                starts.insert(e.job.unwrap().0, e.time);
            }
            let mut moved: Vec<(u64, u32)> =
                e.migrations.iter().map(|m| (m.job.0, m.instance)).collect();
            moved.sort_unstable();
            moved.dedup();
            let mut seen = BTreeSet::new();
            for (j, _) in moved {
                if e.kind == EventKind::Start && e.job == Some(JobId(j)) {
                    continue;
                }
                let costs = charged.get(&j).copied().unwrap_or(0.0);
                if seen.insert(j) {
                    moves += 1;
                    let d = jobs[j as usize].duration_s;
                    let d = match remaining {
                        RemainingRun::Oracle => d,
                        RemainingRun::TimeLimit => time_limit_for(d),
                        RemainingRun::ReplayLimit => replay_time_limit_for(d),
                    };
                    let left = starts[&j] + d + costs - e.time;
                    if left - 60.0 < payback.max(1.0) * 60.0 {
                        unpaid += 1;
                    }
                }
                *charged.entry(j).or_default() += 60.0;
            }
        });
        let r =
            simulate_named("compass", &jobs, &cfg, &PolicyOptions::default(), &mut obs).unwrap();
        assert!(r.migrations > 0);
        (moves, unpaid)
    };
    for remaining in [RemainingRun::Oracle, RemainingRun::TimeLimit] {
        let (moves, unpaid) = check(2.0, remaining);
        assert!(moves > 0, "{remaining:?}");
        assert_eq!(
            unpaid, 0,
            "{remaining:?}: {unpaid} of {moves} moves did not pay"
        );
    }
    let (_, unpaid) = check(0.0, RemainingRun::Oracle);
    assert!(unpaid > 0, "the trace must exercise the rule");
}

#[test]
fn max_n_sif_is_checked_after_every_job_event_not_once_per_instant() {
    // Four nodes filled by eight 4-GPU jobs (Spread: A-D one per node, then
    // E-H on top). A-D end at 10: after the fourth removal every node is
    // half full (4 partial nodes, Phi* = 0: N*SIF = 4, WCC holds). I-L
    // arriving at 10 fill the nodes back (N*SIF = 0 at the end of the
    // instant). At 100 the pairs leave node by node (E, I on node 0 first):
    // never more than one partial node. Theorem 1 is stated per event: max
    // N*SIF is 4, and two events were over the bound: D's start at 0 (A-D
    // one per node, before E-H fill them) and D's end at 10.
    let mut jobs: Vec<TraceJob> = ["A", "B", "C", "D"]
        .iter()
        .map(|n| job(n, 0.0, 10.0, 1, 4))
        .collect();
    for (early, late) in [("E", "I"), ("F", "J"), ("G", "K"), ("H", "L")] {
        jobs.push(job(early, 0.0, 100.0, 1, 4));
        jobs.push(job(late, 10.0, 90.0, 1, 4));
    }
    let mut cfg = config(4, QueuePolicy::Fifo);
    cfg.record_timeseries = true;
    let r = simulate(&jobs, &mut Spread::new(4), &cfg, &mut NoObserver).unwrap();
    let at_instants = r.timeseries.iter().map(|s| s.n_sif).max().unwrap();
    assert_eq!(at_instants, 0);
    assert_eq!(r.max_n_sif, 4);
    assert_eq!(r.max_n_sif_under_wcc, Some(4));
    assert_eq!(r.over_bound_events, 2);
    // No seconds over the bound: the instant ended at 0.
    assert_eq!(r.over_bound_s, 0.0);
    assert_eq!(r.over_bound_events_held, 0);
}

#[test]
fn backfill_refuses_a_start_whose_migrations_would_delay_the_head() {
    // Two nodes of 8. S (4 GPUs, 0-20) on node 0; L (4, 0-100) and
    // M (4, 0-50) on node 1. Head H (8 GPUs) arrives at 1: its reservation
    // is 20, when S ends and node 0 is empty. B (2 GPUs, 5 s) arrives at 1
    // and would end by then, but placing B first moves M onto node 0: node
    // 0 would then be free only at 58 (M's end plus its 8 s migration).
    // Backfill must refuse B then; H starts at 20.
    let jobs = vec![
        job("S", 0.0, 20.0, 1, 4),
        job("L", 0.0, 100.0, 1, 4),
        job("M", 0.0, 50.0, 1, 4),
        job("H", 1.0, 10.0, 1, 8),
        job("B", 1.0, 5.0, 1, 2),
    ];
    let mut p = Scripted {
        occ: Occupancy::new(ClusterSpec::new(2, 8).unwrap()),
        at: BTreeMap::from([
            (0, vec![0]),
            (1, vec![1]),
            (2, vec![1]),
            (3, vec![0]),
            (4, vec![1]),
        ]),
        moves: BTreeMap::from([(4, (2, 0, 0))]),
    };
    let (r, starts) = run(&mut p, &jobs, &config(2, QueuePolicy::Backfill));
    assert_eq!(r.reservation_slips, 0);
    assert_eq!(r.backfill_refused_slip, 1);
    assert_eq!(starts[&3], 20.0, "the head starts at its reservation");
    // At 30 H ends and B, now the head, starts (moving M to node 0).
    assert_eq!(starts[&4], 30.0);
    assert_eq!(r.migrations, 1);
}

#[test]
fn with_move_when_waiting_jobs_move_only_while_a_job_waits() {
    // A (4 GPUs, 0-10) on node 0; B (2 x 2 GPUs, 0-100) on node 1. When A
    // ends, Spread would move B to node 0. With `MoveWhen::Waiting` it does
    // only if a job waits: C (8 GPUs) arriving at 5 does, and starts at 10
    // on the node B left; without C, B stays.
    let mut jobs = vec![job("A", 0.0, 10.0, 1, 4), job("B", 0.0, 100.0, 2, 2)];
    let replay = |jobs: &[TraceJob], when: MoveWhen| {
        let mut cfg = config(2, QueuePolicy::Fifo);
        cfg.migration.move_when = when;
        let mut p = Spread::new(2);
        p.compact_on_remove = true;
        run(&mut p, jobs, &cfg)
    };
    let (r, _) = replay(&jobs, MoveWhen::Waiting);
    assert_eq!((r.migrations, r.move_when), (0, MoveWhen::Waiting));
    let (r, _) = replay(&jobs, MoveWhen::Always);
    assert_eq!(r.migrations, 2);
    jobs.push(job("C", 5.0, 10.0, 1, 8));
    let (r, starts) = replay(&jobs, MoveWhen::Waiting);
    assert_eq!(r.migrations, 2);
    assert_eq!(starts[&2], 10.0);
}

#[test]
fn with_move_when_starts_jobs_move_only_when_a_waiting_job_gains_room() {
    // X, Y (4 GPUs, 0-100) on nodes 0 and 1; A (4 GPUs, 0-10) joins X on
    // node 0; H arrives at 5. When A ends, Spread moves Y onto node 0,
    // which empties node 1.
    let trace = |h: JobShape| {
        vec![
            job("X", 0.0, 100.0, 1, 4),
            job("Y", 0.0, 100.0, 1, 4),
            job("A", 0.0, 10.0, 1, 4),
            job("H", 5.0, 10.0, h.instances, h.gpus),
        ]
    };
    let replay = |jobs: &[TraceJob], when: MoveWhen| {
        let mut cfg = config(2, QueuePolicy::Fifo);
        cfg.migration.move_when = when;
        let mut p = Spread::new(2);
        p.compact_on_remove = true;
        p.forkable = true;
        run(&mut p, jobs, &cfg)
    };
    // H (6 GPUs) fits only on the node the move empties: the move is made.
    let (r, starts) = replay(&trace(JobShape::new(1, 6)), MoveWhen::Starts);
    assert_eq!((r.migrations, starts[&3], r.compact_no_gain), (1, 10.0, 0));
    // H (2 x 8) fits neither way until X and Y end: no move is made, at
    // A's departure nor at X's (Y would move onto node 0 with Y still
    // running: one whole node, H needs two).
    let (r, starts) = replay(&trace(JobShape::new(2, 8)), MoveWhen::Starts);
    assert_eq!((r.migrations, starts[&3], r.compact_no_gain), (0, 100.0, 2));
    // `waiting` makes it, for less than nothing: the move costs Y its
    // migration (8 s), and H waits for Y.
    let (r, starts) = replay(&trace(JobShape::new(2, 8)), MoveWhen::Waiting);
    assert_eq!((r.migrations, starts[&3]), (1, 108.0));
}

#[test]
fn with_move_when_pays_tidying_moves_wait_for_runs_that_pay_for_them() {
    // The trace of the test above, from 10,000 s, with H (2 x 8) that no
    // move starts: `starts` moves nobody. Under `pays` the tidying move of
    // Y is made when Y is expected to run long enough after it (21 x 8 s),
    // and not when the jobs that ended before say it will not.
    let trace = |history_run: Option<f64>| {
        let mut jobs: Vec<TraceJob> = match history_run {
            // One run in 20 five times as long.
            Some(run) => (0..RunHistory::MIN_RUNS)
                .map(|i| {
                    let r = if i == 0 { 5.0 * run } else { run };
                    TraceJob {
                        resumable: false, // they never move
                        ..job(&format!("S{i}"), i as f64 * 40.0, r, 1, 1)
                    }
                })
                .collect(),
            None => Vec::new(),
        };
        // After every earlier job has ended.
        let t0 = 10_000.0;
        jobs.extend([
            job("X", t0, 100.0, 1, 4),
            job("Y", t0, 100.0, 1, 4),
            job("A", t0, 10.0, 1, 4),
            job("H", t0 + 5.0, 10.0, 2, 8),
        ]);
        jobs
    };
    let replay = |jobs: &[TraceJob], when: MoveWhen, tidy: f64| {
        let mut cfg = config(2, QueuePolicy::Fifo);
        cfg.migration.move_when = when;
        cfg.migration.tidy_payback = tidy;
        let mut p = Spread::new(2);
        p.compact_on_remove = true;
        p.forkable = true;
        run(&mut p, jobs, &cfg).0
    };
    // No run has ended: Y's time limit (15 min) says it runs long.
    let r = replay(&trace(None), MoveWhen::Pays, 20.0);
    assert_eq!((r.migrations, r.move_when), (1, MoveWhen::Pays));
    assert_eq!(replay(&trace(None), MoveWhen::Starts, 20.0).migrations, 0);
    assert_eq!(
        replay(&trace(None), MoveWhen::Pays, f64::INFINITY).migrations,
        0,
        "an infinite tidy payback never tidies: `starts`"
    );
    // The jobs that ended ran 30 s (one 150 s): Y, 10 s old, has 26 s
    // left by them, short of 8 + 20 x 8 s: held for tidying; at X's end,
    // 100 s old, 50 s: still held, so no trial moves it and the gate does
    // not close on a move again.
    let r = replay(&trace(Some(30.0)), MoveWhen::Pays, 20.0);
    assert_eq!((r.migrations, r.compact_no_gain), (0, 1));
    // They ran 1,000 s (one 5,000 s): Y is expected to run 1,190 s more,
    // and moves.
    assert_eq!(
        replay(&trace(Some(1000.0)), MoveWhen::Pays, 20.0).migrations,
        1
    );
    let mut bad = config(2, QueuePolicy::Fifo);
    bad.migration.tidy_payback = -1.0;
    assert!(simulate(&trace(None), &mut Spread::new(2), &bad, &mut NoObserver).is_err());
}

#[test]
fn with_move_when_pays_only_the_moved_jobs_that_do_not_pay_are_held() {
    // Three nodes of 8: A (1 x 8, long) on node 0, B (1 x 8, 0-100) on
    // node 1, U and P (1 x 4) on node 2; H (2 x 8) waits. At B's end
    // Spread's Compact moves U and P onto node 1, which starts nobody. At
    // 60 s a move, U's time limit (15 min) leaves 800 s, short of 60 s +
    // 20 x 60 s: its tidying move does not pay; P's (1 h) does. The first
    // trial moves both; U is held and the second moves P alone (as the
    // plugin's `Controller::compact_tidying` does).
    let mut jobs = vec![
        job("A", 0.0, 5000.0, 1, 8),
        job("B", 0.0, 100.0, 1, 8),
        job("U", 0.0, 800.0, 1, 4),
        job("P", 0.0, 3000.0, 1, 4),
        job("H", 1.0, 10.0, 2, 8),
    ];
    jobs[0].resumable = false;
    jobs[4].resumable = false;
    let replay = |when: MoveWhen| {
        let mut cfg = config(3, QueuePolicy::Fifo);
        cfg.migration.move_when = when;
        cfg.migration.migration_cost_s = 60.0;
        let mut p = Spread::new(3);
        p.compact_on_remove = true;
        p.forkable = true;
        let mut moved = BTreeMap::new();
        let mut obs = FnObserver(|e: &Event<'_>, _p: &dyn PlacementPolicy| {
            for m in e.migrations {
                moved.entry(m.job.0).or_insert_with(Vec::new).push(e.time);
            }
        });
        let r = simulate(&jobs, &mut p, &cfg, &mut obs).unwrap();
        (r.migrations, moved)
    };
    // P moves at B's end, not later (at U's, when U's room is free anyway).
    assert_eq!(
        replay(MoveWhen::Pays),
        (1, BTreeMap::from([(3, vec![100.0])]))
    );
    assert_eq!(replay(MoveWhen::Starts).0, 0);
    assert_eq!(replay(MoveWhen::Waiting).0, 2);
}

/// Two nodes of 8. A (8 GPUs, 0-10) on node 0; B (4 GPUs, not resumable)
/// and C (2 GPUs, resumable), both 0-100, on node 1. The head H (8 GPUs)
/// arrives at 1; its reservation is 10, when A ends and node 0 is empty.
/// When A departs, Spread's compact moves C onto node 0 (it cannot move B,
/// so node 1 stays open). H is not resumable, so nothing moves it.
fn departure_trace() -> Vec<TraceJob> {
    let mut jobs = vec![
        job("A", 0.0, 10.0, 1, 8),
        job("B", 0.0, 100.0, 1, 4),
        job("C", 0.0, 100.0, 1, 2),
        job("H", 1.0, 10.0, 1, 8),
    ];
    jobs[1].resumable = false;
    jobs[3].resumable = false;
    jobs
}

#[test]
fn a_departure_compact_that_delays_the_head_is_counted_late() {
    // A policy that cannot be forked: C moves at 10 and H fits only when B
    // ends at 100, 90 s after its reservation.
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    let (r, starts) = run(
        &mut p,
        &departure_trace(),
        &config(2, QueuePolicy::Backfill),
    );
    assert_eq!(starts[&3], 100.0);
    assert_eq!(r.migrations, 1);
    assert_eq!((r.heads_late, r.heads_late_s), (1, 90.0));
    assert_eq!(r.compact_held_for_head, 0);
    // No backfilled start moved the reservation: the old count missed it.
    assert_eq!(r.reservation_slips, 0);
}

#[test]
fn a_departure_compact_never_delays_the_head() {
    // Forkable: the departure is tried on a fork first; its move would
    // delay H to 100, holding still keeps 10, so every job is held for that
    // departure and H starts at its reservation.
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    p.forkable = true;
    let (r, starts) = run(
        &mut p,
        &departure_trace(),
        &config(2, QueuePolicy::Backfill),
    );
    assert_eq!(starts[&3], 10.0);
    assert_eq!(r.compact_held_for_head, 1);
    // C moves only when H has ended at 20 and nobody waits.
    assert_eq!(r.migrations, 1);
    assert_eq!((r.heads_late, r.heads_late_s), (0, 0.0));
    // Under FIFO there is no reservation to keep: the move happens.
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    p.forkable = true;
    let (r, starts) = run(&mut p, &departure_trace(), &config(2, QueuePolicy::Fifo));
    assert_eq!(
        (starts[&3], r.migrations, r.compact_held_for_head),
        (100.0, 1, 0)
    );
}

// ---- Mixed clusters (issue 12) ----

/// The site lab's GPU nodes: 8 x 8 A100, 4 x 4 L40S, 2 x 2 untyped.
fn site() -> ClusterNodes {
    ClusterNodes::parse("8x8:a100,4x4:l40s,2x2", 8).unwrap()
}

#[test]
fn node_specs_parse_and_bad_specs_are_refused_with_the_item_named() {
    let s = site();
    assert_eq!(s.label(), "8x8:a100,4x4:l40s,2x2");
    assert_eq!((s.nodes(), s.total_gpus(), s.max_gpus()), (14, 84, 8));
    assert_eq!(s.as_homogeneous(), None);
    let table = s.node_table();
    assert_eq!(table.len(), 14);
    assert_eq!(table[8].gpus, 4);
    assert_eq!(table[8].gpu_type.as_deref(), Some("l40s"));
    // a bare count keeps its meaning: nodes of the default size
    let bare = ClusterNodes::parse("6", 4).unwrap();
    assert_eq!(bare.as_homogeneous(), Some(ClusterSpec::new(6, 4).unwrap()));
    assert_eq!(bare.label(), "6x4");
    // alike items are one pool, replayed as a homogeneous cluster
    assert_eq!(
        ClusterNodes::parse("2x8, 3X8", 8).unwrap().as_homogeneous(),
        Some(ClusterSpec::new(5, 8).unwrap())
    );
    for (bad, says) in [
        ("", "empty"),
        ("8x8,", "empty item"),
        ("0x8", "node count of 0"),
        ("ax8", "not a node count"),
        ("8x", "not a number of GPUs"),
        ("8x6:h100", "6 GPUs per node"),
        ("8x16", "16 GPUs per node"),
        ("8x8:", "not a GPU type"),
        ("8x8:a 100", "not a GPU type"),
        ("8:a100", "needs COUNTxGPUS"),
        ("-1x8", "not a node count"),
        ("4000000x8", "more than"),
    ] {
        let e = ClusterNodes::parse(bad, 8).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("COUNTxGPUS"), "{bad}: {e}");
    }
}

#[test]
fn every_policy_completes_every_job_on_a_mixed_cluster() {
    let jobs = mixed_trace(300);
    for name in POLICY_NAMES {
        for queue in [QueuePolicy::Fifo, QueuePolicy::Backfill] {
            let cfg = config(1, queue);
            let opts = PolicyOptions::default();
            let mut check = |e: &Event<'_>, c: &dyn ClusterPolicy| {
                assert!(c.as_single().is_none());
                let running: usize = (0..3).map(|p| c.pool_occupancy(p).running_jobs()).sum();
                assert_eq!(running, e.running, "{name}: running jobs");
                // a job's instances stay in the pool it was placed in, and
                // that pool's nodes hold them
                for p in 0..3 {
                    let occ = c.pool_occupancy(p);
                    for j in occ.jobs() {
                        assert_eq!(c.job_pool(j.request.id), Some(p));
                        assert!(j.request.shape.gpus <= occ.capacity());
                    }
                }
            };
            let r = simulate_mixed(
                name,
                &jobs,
                &site(),
                &cfg,
                &opts,
                &mut FnObserver2(&mut check),
            )
            .unwrap_or_else(|e| panic!("{name} ({queue:?}): {e}"));
            assert_eq!((r.jobs, r.unschedulable), (300, 0), "{name}");
            assert_eq!((r.nodes, r.gpus_per_node), (14, 8));
            assert_eq!(r.cluster, "8x8:a100,4x4:l40s,2x2");
            let names: Vec<&str> = r.pools.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, ["8xa100", "4xl40s", "2xgpu"]);
            assert_eq!(r.pools.iter().map(|p| p.jobs).sum::<u64>(), 300, "{name}");
            assert!(
                r.pools.iter().all(|p| p.jobs > 0),
                "{name} ({queue:?}): every pool takes some jobs: {:?}",
                r.pools
            );
            assert_eq!(
                r.pools.iter().map(|p| p.migrations).sum::<u64>(),
                r.migrations
            );
            // N*SIF is summed over pools: the largest sum is at least the
            // largest of any pool and at most their sum.
            let max_pool = r.pools.iter().map(|p| p.max_n_sif).max().unwrap();
            let sum_pool: u64 = r.pools.iter().map(|p| p.max_n_sif).sum();
            assert!(r.max_n_sif >= max_pool && r.max_n_sif <= sum_pool, "{r:?}");
            assert!(r.agu > 0.0 && r.agu <= 1.0);
            let again = simulate_mixed(name, &jobs, &site(), &cfg, &opts, &mut NoObserver).unwrap();
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                serde_json::to_string(&again).unwrap(),
                "{name}: deterministic"
            );
        }
    }
}

/// Wraps a closure as an [`Observer`] of cluster events.
struct FnObserver2<F>(F);
impl<F: FnMut(&Event<'_>, &dyn ClusterPolicy)> Observer for FnObserver2<F> {
    fn after_cluster_event(&mut self, event: &Event<'_>, cluster: &dyn ClusterPolicy) {
        (self.0)(event, cluster)
    }
}

/// Theorem 1 in each pool of a mixed cluster under compass: after every
/// job event, `N_p * SIF_p <= 2` in every pool where WCC holds and every
/// running job is movable. The one exemption: a pool that holds a running
/// job that may not move (submitted not resumable) is not checked, as
/// Theorem 1 assumes every instance movable (paper Section 4.4; the bound
/// over the movable part is `compass-core/tests/compass_props.rs`'s). The
/// cost rule is off (`payback 0`) and the queue FIFO, so nothing else holds
/// a job still. The test counts the checked and exempt events so neither
/// side is empty.
#[test]
fn theorem1_holds_in_each_pool_of_a_mixed_cluster() {
    for pinned_every in [0usize, 7] {
        let mut jobs = mixed_trace(600);
        if pinned_every > 0 {
            for (i, j) in jobs.iter_mut().enumerate() {
                j.resumable = i % pinned_every != 0;
            }
        }
        let mut cfg = config(1, QueuePolicy::Fifo);
        cfg.migration.payback = 0.0;
        let (mut checked, mut exempt, mut under_wcc_over_0) = (0u64, 0u64, 0u64);
        let mut check = |e: &Event<'_>, c: &dyn ClusterPolicy| {
            for p in 0..3 {
                let occ = c.pool_occupancy(p);
                let cap = occ.capacity();
                let counts = *occ.instance_counts();
                let phi = crate::metric::phi_star(&counts, cap);
                let n_sif = u64::from(occ.partial_nodes()).saturating_sub(phi);
                if !crate::metric::wcc_holds(&counts, cap) {
                    continue;
                }
                if occ.jobs().any(|j| !j.request.movable) {
                    exempt += 1;
                    continue;
                }
                checked += 1;
                under_wcc_over_0 += u64::from(n_sif > 0);
                assert!(
                    n_sif <= 2,
                    "t {}: pool {p}: N*SIF = {n_sif} > 2 under WCC with every job movable",
                    e.time
                );
            }
        };
        let r = simulate_mixed(
            "compass",
            &jobs,
            &site(),
            &cfg,
            &PolicyOptions::default(),
            &mut FnObserver2(&mut check),
        )
        .unwrap();
        assert_eq!(r.jobs, 600);
        assert!(checked > 1000, "checked {checked}");
        assert!(
            under_wcc_over_0 > 0,
            "some checked state is fragmented at all"
        );
        if pinned_every == 0 {
            assert_eq!(exempt, 0);
            // what the result reports agrees
            for p in &r.pools {
                assert!(p.max_n_sif_under_wcc.unwrap_or(0) <= 2, "{p:?}");
                assert_eq!(p.over_bound_events, 0, "{p:?}");
            }
            assert_eq!(r.over_bound_events, 0);
        } else {
            assert!(exempt > 0, "the pinned jobs exempt some states");
        }
    }
}

#[test]
fn best_fit_takes_the_tightest_node_of_the_whole_mixed_cluster() {
    // A (6 GPUs) can go only to the 8-GPU node, leaving 2 free; B (2 GPUs)
    // then fits the 8-GPU node (2 free) more tightly than the empty 4-GPU
    // node: best-fit over every node puts it there. C (4) fills the
    // 4-GPU node.
    let nodes = ClusterNodes::parse("1x8,1x4", 8).unwrap();
    let jobs = vec![
        job("A", 0.0, 100.0, 1, 6),
        job("B", 1.0, 100.0, 1, 2),
        job("C", 2.0, 100.0, 1, 4),
    ];
    let mut pools_of = BTreeMap::new();
    let mut see = |e: &Event<'_>, c: &dyn ClusterPolicy| {
        if e.kind == EventKind::Start {
            let j = e.job.unwrap();
            pools_of.insert(j.0, c.job_pool(j).unwrap());
        }
    };
    let cfg = config(1, QueuePolicy::Fifo);
    let r = simulate_mixed(
        "best-fit",
        &jobs,
        &nodes,
        &cfg,
        &PolicyOptions::default(),
        &mut FnObserver2(&mut see),
    )
    .unwrap();
    assert_eq!(pools_of, BTreeMap::from([(0, 0), (1, 0), (2, 1)]));
    assert_eq!(r.waits.overall.max, 0.0, "no job waits");
    assert_eq!((r.pools[0].jobs, r.pools[1].jobs), (2, 1));
}

#[test]
fn jobs_no_pool_can_hold_are_counted_and_oversized_instances_refused() {
    // 3 x 4 GPUs needs three 4-GPU nodes (or two 8-GPU nodes): neither pool
    // has them, so it is left out and counted; 1 x 4 runs.
    let nodes = ClusterNodes::parse("1x8,2x4", 8).unwrap();
    let jobs = vec![job("big", 0.0, 10.0, 3, 4), job("ok", 0.0, 10.0, 1, 4)];
    let cfg = config(1, QueuePolicy::Fifo);
    let opts = PolicyOptions::default();
    for name in ["compass", "best-fit"] {
        let r = simulate_mixed(name, &jobs, &nodes, &cfg, &opts, &mut NoObserver).unwrap();
        assert_eq!((r.jobs, r.unschedulable), (1, 1), "{name}");
    }
    // one typed pool: replayed as identical nodes, named as the plugin does
    let one = ClusterNodes::parse("3x8:h100", 8).unwrap();
    let r = simulate_mixed("compass", &jobs, &one, &cfg, &opts, &mut NoObserver).unwrap();
    assert_eq!((r.cluster.as_str(), r.pools.len()), ("3x8:h100", 1));
    assert_eq!((r.pools[0].name.as_str(), r.jobs), ("8xh100", 2));
    // an instance larger than every node: a clear error naming the job
    let small = ClusterNodes::parse("2x4,1x2", 8).unwrap();
    let e = simulate_mixed(
        "compass",
        &[job("huge", 0.0, 10.0, 1, 8)],
        &small,
        &cfg,
        &opts,
        &mut NoObserver,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("job `huge`") && e.contains('8'), "{e}");
}

/// `compass replay`'s `sbatch --time` rule, in seconds: twice the run plus a
/// minute, whole minutes, at least 2 (the live runs' limits).
#[test]
fn replay_time_limits_match_the_replays_sbatch_time() {
    assert_eq!(replay_time_limit_for(5.0), 120.0);
    assert_eq!(replay_time_limit_for(90.0), 240.0);
    assert_eq!(replay_time_limit_for(400.0), 900.0);
    assert_eq!(
        RemainingRun::parse_name("replay-limit").unwrap(),
        RemainingRun::ReplayLimit
    );
}

#[test]
fn a_job_whose_protection_ends_moves_then_not_at_the_next_event() {
    // Two nodes of 8. F1 (1 x 8, 0-50) on one; R and S (1 x 2) and F2
    // (1 x 4, 0-100) fill the other; none of them resumable. Q (1 x 2,
    // resumable, protected 300 s) arrives at 60 onto F1's empty node. At
    // F2's end (100) Compact cannot move Q next to R and S; H (1 x 8)
    // arrives at 110 and waits. When Q's protection ends (360) a Compact
    // moves it, with no arrival or departure then, and H starts; before,
    // H waited for the next departure (R and S at 1,000).
    let mut jobs = vec![
        job("F1", 0.0, 50.0, 1, 8),
        job("R", 0.0, 1000.0, 1, 2),
        job("S", 0.0, 1000.0, 1, 2),
        job("F2", 0.0, 100.0, 1, 4),
        job("Q", 60.0, 2000.0, 1, 2),
        job("H", 110.0, 10.0, 1, 8),
    ];
    for (i, j) in jobs.iter_mut().enumerate() {
        j.resumable = i == 4;
    }
    jobs[4].min_runtime_s = Some(300.0);
    for when in [MoveWhen::Pays, MoveWhen::Starts, MoveWhen::Always] {
        let mut cfg = config(2, QueuePolicy::Backfill);
        cfg.migration.move_when = when;
        cfg.migration.migration_cost_s = 60.0;
        let mut starts = BTreeMap::new();
        let mut moves = Vec::new();
        let mut obs = FnObserver(|e: &Event<'_>, _p: &dyn PlacementPolicy| {
            if e.kind == EventKind::Start {
                starts.insert(e.job.unwrap().0, e.time);
            }
            moves.extend(e.migrations.iter().map(|m| (e.time, e.kind, m.job.0)));
        });
        let r =
            simulate_named("compass", &jobs, &cfg, &PolicyOptions::default(), &mut obs).unwrap();
        assert_eq!(starts[&4], 60.0, "{when:?}");
        assert_eq!(moves, vec![(360.0, EventKind::Compact, 4)], "{when:?}");
        assert_eq!(starts[&5], 360.0, "{when:?}");
        assert_eq!(r.migrations, 1, "{when:?}");
    }
}

#[test]
fn with_move_when_pays_jobs_held_for_tidying_stay_held_while_the_queue_is_empty() {
    // Two nodes of 8, after 20 runs of 30 s (one 150 s) that say a job
    // 10-20 s old has under 8 + 20 x 8 s left. X (not resumable), Y and A
    // (1 x 4) start at t0; Q (3 x 2) waits. At A's end Spread's Compact
    // would move Y next to X, which starts nobody Q could not start
    // anyway: Y is held for tidying, and Q starts. E (1 x 1) comes and goes
    // while nothing waits; H (2 x 8) waits from t0 + 15. At Q's end Y is
    // still held, as in the select plugin, which tries no Compact while no
    // job waits: no trial moves it, and the gate does not close on a move
    // again (the simulator used to forget the held jobs at E's end).
    let mut jobs: Vec<TraceJob> = (0..RunHistory::MIN_RUNS)
        .map(|i| {
            let r = if i == 0 { 150.0 } else { 30.0 };
            TraceJob {
                resumable: false,
                ..job(&format!("S{i}"), i as f64 * 40.0, r, 1, 1)
            }
        })
        .collect();
    let t0 = 10_000.0;
    jobs.extend([
        job("X", t0, 100.0, 1, 4),
        job("Y", t0, 100.0, 1, 4),
        job("A", t0, 10.0, 1, 4),
        job("Q", t0 + 5.0, 10.0, 3, 2),
        job("E", t0 + 12.0, 1.0, 1, 1),
        job("H", t0 + 15.0, 10.0, 2, 8),
    ]);
    let x = RunHistory::MIN_RUNS;
    jobs[x].resumable = false;
    jobs[x + 5].resumable = false;
    let mut cfg = config(2, QueuePolicy::Fifo);
    cfg.migration.move_when = MoveWhen::Pays;
    let mut p = Spread::new(2);
    p.compact_on_remove = true;
    p.forkable = true;
    let (r, starts) = run(&mut p, &jobs, &cfg);
    assert_eq!(starts[&(x as u64 + 3)], t0 + 10.0, "Q starts at A's end");
    assert_eq!(
        starts[&(x as u64 + 4)],
        t0 + 12.0,
        "E runs while nothing waits"
    );
    assert_eq!((r.migrations, r.compact_no_gain), (0, 1));
}

#[test]
fn with_move_when_pays_a_trial_releases_a_bounded_turn_of_the_held_jobs() {
    // Three nodes of 8, backfill. B and C (1 x 4, long, not resumable) on
    // nodes 0 and 1, U (1 x 1) and X (1 x 2) on node 2 with D (1 x 1, to
    // 50); E (to 200) on node 0 and F (to 300) on node 1 (1 x 1, not
    // resumable). Q (2 x 8) waits for B and C. At D's end Spread's Compact
    // would move U and X onto node 0, which starts nobody and does not
    // pay (their time limit, 15 min, leaves 850 s, short of 60 s + 20 x
    // 60 s): both are held for tidying. W (1 x 7) comes at 100 and starts
    // once X leaves node 2. At E's end the gate's trial releases the held
    // jobs: all of them by default (both move, W starts at 200); one per
    // trial with `trial_releases` 1 (the plugin's `TRIAL_RELEASES` made
    // small): U moves alone and W cannot start, so nothing moves; at F's
    // end, the failed trial's memory lapsed, the next turn releases X,
    // which moves alone (U held still, as in the trial), and W starts at
    // 300.
    let mut jobs = vec![
        job("B", 0.0, 10_000.0, 1, 4),
        job("C", 0.0, 10_000.0, 1, 4),
        job("U", 0.0, 800.0, 1, 1),
        job("X", 0.0, 800.0, 1, 2),
        job("D", 0.0, 50.0, 1, 1),
        job("E", 0.0, 200.0, 1, 1),
        job("F", 0.0, 300.0, 1, 1),
        job("Q", 1.0, 10.0, 2, 8),
        job("W", 100.0, 10.0, 1, 7),
    ];
    for j in &mut jobs {
        j.resumable = j.name == "U" || j.name == "X";
    }
    let replay = |releases: usize| {
        let mut cfg = config(3, QueuePolicy::Backfill);
        cfg.migration.move_when = MoveWhen::Pays;
        cfg.migration.migration_cost_s = 60.0;
        cfg.migration.trial_releases = releases;
        let mut p = Spread::new(3);
        p.compact_on_remove = true;
        p.forkable = true;
        let mut moved = Vec::new();
        let mut starts = BTreeMap::new();
        let mut obs = FnObserver(|e: &Event<'_>, _p: &dyn PlacementPolicy| {
            moved.extend(e.migrations.iter().map(|m| (e.time, m.job.0)));
            if e.kind == EventKind::Start {
                starts.insert(e.job.unwrap().0, e.time);
            }
        });
        simulate(&jobs, &mut p, &cfg, &mut obs).unwrap();
        (moved, starts[&8])
    };
    let (u, x) = (2, 3);
    assert_eq!(
        replay(TRIAL_RELEASES),
        (vec![(200.0, x), (200.0, u)], 200.0)
    );
    assert_eq!(replay(1), (vec![(300.0, x)], 300.0));
}

#[test]
fn with_move_when_pays_a_trial_that_started_nobody_is_not_repeated_for_the_same_chances() {
    // COMPASS under `pays` on mixed traces: the gate makes first trials,
    // and skips those a failed trial of the last TRIAL_MEMORY_S seconds
    // covers (the select plugin's memory, `placement::head::TrialMemory`).
    let mut remembered = 0;
    for queue in [QueuePolicy::Fifo, QueuePolicy::Backfill] {
        let mut cfg = config(6, queue);
        cfg.migration.move_when = MoveWhen::Pays;
        let opts = PolicyOptions::default();
        let r = simulate_named("compass", &mixed_trace(600), &cfg, &opts, &mut NoObserver).unwrap();
        assert!(r.gate_trials > 0, "{queue:?}");
        remembered += r.gate_trials_remembered;
        // Under `starts` nothing is remembered: every first trial is made.
        cfg.migration.move_when = MoveWhen::Starts;
        let r = simulate_named("compass", &mixed_trace(600), &cfg, &opts, &mut NoObserver).unwrap();
        assert_eq!(r.gate_trials_remembered, 0, "{queue:?}");
    }
    assert!(remembered > 0);
}
