//! The controller's promises under hostile callback sequences (issue #11):
//! each test is a sequence that broke a promise of the user or admin guide
//! before its fix (found by a randomised driver of the callbacks: jobs
//! requeued for other reasons, rebuilds that lose what was in flight, a
//! clock that steps back, refused requeues, `-w` jobs, migrations off).

use super::*;
use proptest::prelude::*;

fn cfg() -> SelectConfig {
    always()
}

/// A job of `g` GPUs that is not resumable.
fn still(id: u64, g: u32) -> JobInfo {
    let mut j = job(id, 1, g);
    j.flags = Some(JobFlags {
        resumable: false,
        ..JobFlags::default()
    });
    j
}

/// Jobs 1 and 2 on n1, 3 on n2 (4 GPUs each, started at 0); job 1 ends at
/// 1000 and the tick orders one move (2 or 3 next to the other).
fn one_order() -> (Controller, MigrationOrder) {
    let mut c = ctl();
    for (id, n) in [(1u64, 0), (2, 0), (3, 1)] {
        c.begin(&job(id, 1, 4), &[(n, 4)], 0);
    }
    assert!(c.tick(1000).is_empty());
    c.fini(1, 1000);
    let orders = c.tick(1000);
    assert_eq!(orders.len(), 1, "{orders:?}");
    (c, orders[0].clone())
}

/// Any order for `job` among `orders`?
fn ordered(orders: &[MigrationOrder], job: u64) -> bool {
    orders.iter().any(|o| o.job == job)
}

#[test]
fn a_job_spread_over_the_nodes_it_names_is_never_migrated() {
    // `-w n1,n2`, one instance on each: Compact gathered both onto one of
    // them (inside its nodes, so its restriction allowed it), a requeue.
    let mut c = ctl();
    let mut w = job(1, 2, 4);
    w.required_nodes = true;
    let named = NodeSet::from_nodes(4, [0, 1]);
    c.begin_within(&w, &[(0, 4), (1, 4)], Some(&named), 0);
    let orders = c.tick(1000);
    assert!(orders.is_empty(), "{orders:?}");
    assert_eq!(c.jobs[&1].keep, Some(KeepReason::NamesItsNodes));
    // Its verdict never changes: nothing to re-check.
    assert_eq!(c.jobs[&1].check_at, None);
}

#[test]
fn a_migrated_job_requeued_for_another_reason_keeps_its_cool_down() {
    let (mut c, o) = one_order();
    let x = o.job;
    c.fini(x, 1000); // the migration's requeue
    c.begin(&job(x, 1, 4), &[(o.to_nodes[0], 4)], 1002); // lands
    c.fini(x, 1010); // requeued again: a preemption, a node failure
    c.begin(&job(x, 1, 4), &[(3, 4)], 1012); // restarts on n4
    let y = if x == 2 { 3 } else { 2 };
    c.fini(y, 1012);
    c.begin(&still(9, 4), &[(o.to_nodes[0], 4)], 1012);
    // Past the start-up grace, 310 s after the migration: before, the end
    // had dropped the cool-down and the job was ordered again.
    assert!(!ordered(&c.tick(1312), x));
    // After the cool-down it may move again.
    assert!(ordered(&c.tick(1002 + 600), x));
}

#[test]
fn a_migration_a_restart_cannot_keep_in_flight_starts_the_cool_down() {
    let (mut c, o) = one_order();
    let x = o.job;
    let y = if x == 2 { 3 } else { 2 };
    c.fini(x, 1000); // requeued, pinned to its target
    let saved = c.saved(1000);
    assert_eq!(saved.in_flight.len(), 1);
    // Three ways to lose it at the rebuild: its pin ran out before the
    // restart, its target node is gone, or its target cannot be held.
    let late = 1000 + PIN_TIMEOUT_S + 1;
    let mut renamed: Vec<String> = (1..=4).map(|i| format!("n{i}")).collect();
    renamed[o.to_nodes[0] as usize] = "gone".into();
    let cases: Vec<(&str, Controller, u64)> = vec![
        ("pin ran out", ctl(), late),
        (
            "target gone",
            Controller::new(cfg(), ClusterSpec::new(4, 8).unwrap(), renamed),
            1001,
        ),
        ("target taken", ctl(), 1001),
    ];
    for (case, mut c2, now) in cases {
        c2.restore(&saved, now);
        c2.adopt_running(&still(y, 4), &[(y as NodeId - 2, 4)], 0);
        if case == "target taken" {
            c2.adopt_running(&still(8, 8), &[(o.to_nodes[0], 4), (3, 4)], 0);
        }
        c2.adopt_in_flight();
        assert_eq!(c2.pinned(x), None, "{case}");
        c2.compact();
        c2.tick(now);
        c2.begin(&job(x, 1, 4), &[(2, 4)], now + 1);
        let orders = c2.tick(now + 301);
        assert!(!ordered(&orders, x), "{case}: {orders:?}");
    }
}

#[test]
fn a_migration_whose_target_slurm_gives_away_is_withdrawn_with_a_cool_down() {
    let (mut c, o) = one_order();
    let x = o.job;
    assert!(c.still_ordered(x));
    // Before the plugin's thread requeues x, Slurm starts a `-w` job on
    // x's target: the migration loses its pin and is withdrawn.
    let mut w = still(8, 4);
    w.required_nodes = true;
    c.begin(&w, &[(o.to_nodes[0], 4)], 1000);
    assert_eq!(c.pinned(x), None);
    assert!(!c.still_ordered(x), "the thread does not requeue it");
    // Had the requeue been under way, the restart keeps the cool-down.
    c.fini(x, 1000);
    c.begin(&job(x, 1, 4), &[(2, 4)], 1003);
    c.begin(&still(9, 4), &[(3, 4)], 1003);
    assert!(!ordered(&c.tick(1303), x));
}

#[test]
fn a_refused_requeue_leaves_the_job_where_slurm_runs_it() {
    // n1: 2 (still), 5; n2: 6; n3: 1 (still), 3, 4 (still). Job 4 ends:
    // Compact moves 3 to n2 and 6 to n3, into the room 3 leaves.
    let mut c = ctl_on(cfg(), 3);
    c.begin(&still(1, 4), &[(2, 4)], 0);
    c.begin(&still(2, 4), &[(0, 4)], 0);
    c.begin(&job(3, 1, 1), &[(2, 1)], 0);
    c.begin(&still(4, 1), &[(2, 1)], 0);
    c.begin(&job(5, 1, 4), &[(0, 4)], 0);
    c.begin(&job(6, 1, 4), &[(1, 4)], 0);
    c.tick(1000);
    c.fini(4, 1000);
    let orders = c.tick(1000);
    assert_eq!(
        orders,
        vec![
            MigrationOrder {
                job: 3,
                to_nodes: vec![1]
            },
            MigrationOrder {
                job: 6,
                to_nodes: vec![2]
            },
        ]
    );
    // Job 3's requeue is refused: it still runs on n3, so job 6's move
    // into its room is withdrawn (not requeued yet), and the engine holds
    // 3 on n3 (before: the engine refused it, silently, and forgot it).
    assert_eq!(c.requeue_failed(&orders[0], 1000), None);
    assert_eq!(c.pools().job(JobId(3)).map(|r| r.nodes), Some(vec![2]));
    assert!(!c.still_ordered(6));
    assert_eq!(c.pools().job(JobId(6)).map(|r| r.nodes), Some(vec![1]));
    assert_eq!(c.counters.engine_errors, 0);
    assert_eq!(c.self_check(), None);
    assert_eq!(c.fini(3, 2000), None, "its end is recorded");
}

#[test]
fn with_migrations_off_the_engine_keeps_what_slurm_runs() {
    let config = SelectConfig {
        migrate: false,
        ..cfg()
    };
    let mut c = ctl_on(config, 4);
    for (id, n) in [(1u64, 0), (2, 0), (3, 1)] {
        c.begin(&job(id, 1, 4), &[(n, 4)], 0);
    }
    assert!(c.tick(1000).is_empty());
    c.fini(1, 1000);
    assert!(c.tick(1000).is_empty());
    // Before, Compact's move was made in the engine and never ordered:
    // job 2 sat on n2 in the engine while Slurm ran it on n1.
    for (j, n) in [(2u64, 0), (3, 1)] {
        assert_eq!(c.pools().job(JobId(j)).unwrap().nodes, vec![n]);
        assert_eq!(c.jobs[&j].keep, Some(KeepReason::MigrationsOff));
    }
    // An 8-GPU job is planned on an empty node, not on the half-full n1.
    let plan = c.narrow(&job(4, 1, 8), &NodeSet::full(4)).unwrap().unwrap();
    assert!(
        plan.iter().all(|n| n >= 2),
        "{:?}",
        plan.iter().collect::<Vec<_>>()
    );
}

#[test]
fn a_restart_after_the_clock_stepped_back_keeps_the_cool_down() {
    let (mut c, o) = one_order();
    let x = o.job;
    c.fini(x, 1000);
    c.begin(&job(x, 1, 4), &[(o.to_nodes[0], 4)], 1002); // landed at 1002
    let saved = c.saved(1005);
    assert_eq!(saved.last_migrated, vec![(x, 1002)]);
    // slurmctld restarts; the clock stepped back 5 s meanwhile.
    let mut c2 = ctl();
    c2.restore(&saved, 1000);
    c2.adopt_running(&still(9, 4), &[(3, 4)], 0);
    c2.adopt_running(&job(x, 1, 4), &[(o.to_nodes[0], 4)], 1002);
    c2.adopt_in_flight();
    c2.compact();
    assert!(!ordered(&c2.tick(1302), x));
}

#[test]
fn a_pin_saved_ahead_of_the_clock_times_out_after_the_restart() {
    // Saved while the clock ran an hour ahead.
    let mut c = ctl();
    let saved = Saved {
        format: 1,
        in_flight: vec![SavedMigration {
            job: 7,
            to_nodes: vec!["n2".into()],
            since: 1000 + 3600,
            shape: Some((1, 4)),
        }],
        ..Saved::default()
    };
    c.restore(&saved, 1000);
    c.adopt_in_flight();
    assert!(c.pinned(7).is_some());
    for t in 1000..=1000 + PIN_TIMEOUT_S + 1 {
        c.tick(t);
    }
    assert_eq!(c.pinned(7), None);
    assert!(c.may_widen(8));
}

/// A step of the randomised driver below, as slurmctld and the plugin's
/// thread would call the controller.
#[derive(Clone, Debug)]
enum Op {
    /// A job is submitted: `w` instances of `g` GPUs, resumable or not,
    /// with a min runtime, naming its nodes (`-w`) or not.
    Submit {
        w: u32,
        g: u32,
        resumable: bool,
        min_runtime_s: u64,
        named: bool,
    },
    /// Slurm tries every pending job (narrowed as the plugin says; a job
    /// that does not fit waits, held as the plugin's `job_test` would).
    Schedule,
    /// The `k`-th running job ends.
    End(usize),
    /// The `k`-th running job is requeued by someone else (a preemption,
    /// a node failure): it ends and waits again under its id.
    Requeue(usize),
    /// Time passes by `dt` seconds and the plugin's thread ticks; each
    /// order is carried out, or its requeue refused when `refuse`.
    Tick { dt: u64, refuse: bool },
    /// The clock steps back `s` seconds (NTP).
    ClockBack(u64),
    /// slurmctld restarts or reconfigures: a new controller from the saved
    /// state and the running jobs.
    Rebuild,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u32..=2, prop::sample::select(vec![1u32, 2, 4, 8]), any::<bool>(),
              prop::sample::select(vec![0u64, 400, 2000]), prop::bool::weighted(0.15))
            .prop_map(|(w, g, resumable, min_runtime_s, named)| Op::Submit {
                w, g, resumable, min_runtime_s, named
            }),
        3 => Just(Op::Schedule),
        3 => (0usize..16).prop_map(Op::End),
        1 => (0usize..16).prop_map(Op::Requeue),
        5 => (prop::sample::select(vec![0u64, 1, 30, 70, 320, 700]), prop::bool::weighted(0.2))
            .prop_map(|(dt, refuse)| Op::Tick { dt, refuse }),
        1 => (1u64..=4).prop_map(Op::ClockBack),
        1 => Just(Op::Rebuild),
    ]
}

/// A running job as Slurm sees it: the job, its GPUs per node, its start.
type Run = (JobInfo, Vec<(NodeId, u32)>, u64);

/// Slurm's side: what runs where, what waits, and the clock.
struct Slurm {
    c: Controller,
    now: u64,
    next_id: u64,
    /// Running jobs: the job, its GPUs per node, its start.
    running: BTreeMap<u64, Run>,
    pending: BTreeMap<u64, JobInfo>,
    /// When each job was last requeued for a migration.
    migrated_at: BTreeMap<u64, u64>,
    /// Seconds the clock stepped back in all (the promises' slack).
    back: u64,
}

const NODES: u32 = 5;

impl Slurm {
    fn used(&self, n: NodeId) -> u32 {
        self.running
            .values()
            .flat_map(|(_, per, _)| per.iter())
            .filter(|(m, _)| *m == n)
            .map(|(_, g)| g)
            .sum()
    }

    /// First fit of the job's instances on `nodes` (cons_tres's way, in
    /// node order), or `None` if they do not all fit.
    fn fit(&self, j: &JobInfo, nodes: impl Iterator<Item = NodeId>) -> Option<Vec<(NodeId, u32)>> {
        let Mapping::Model { shape, .. } = j.mapping else {
            return None;
        };
        let mut left = shape.instances;
        let mut per = Vec::new();
        for n in nodes {
            let k = ((8 - self.used(n)) / shape.gpus).min(left);
            if k > 0 {
                per.push((n, k * shape.gpus));
                left -= k;
            }
        }
        (left == 0).then_some(per)
    }

    fn named_set(j: &JobInfo) -> NodeSet {
        NodeSet::from_nodes(
            NODES,
            [j.id as NodeId % NODES, (j.id as NodeId + 1) % NODES],
        )
    }

    fn schedule(&mut self) {
        let all = NodeSet::full(NODES);
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        for id in ids {
            let j = self.pending[&id].clone();
            let narrowed = self.c.narrow(&j, &all).expect("narrow");
            let was_narrowed = narrowed.is_some();
            let set = if j.required_nodes {
                Self::named_set(&j)
            } else {
                narrowed.unwrap_or_else(|| all.clone())
            };
            let Some(per) = self.fit(&j, set.iter()) else {
                if !j.required_nodes && was_narrowed && !self.c.may_widen(id) {
                    let _ = self.c.hold(id, self.now);
                }
                continue;
            };
            self.pending.remove(&id);
            let named = j.required_nodes.then(|| Self::named_set(&j));
            let _ = self.c.begin_within(&j, &per, named.as_ref(), self.now);
            self.running.insert(id, (j, per, self.now));
        }
    }

    fn nth_running(&self, k: usize) -> Option<u64> {
        let n = self.running.len();
        (n > 0).then(|| *self.running.keys().nth(k % n).unwrap())
    }

    /// Every order of a tick: each must be a promise kept.
    fn check_orders(&self, orders: &[MigrationOrder]) {
        let cfg = &self.c.config;
        let slack = self.back;
        for o in orders {
            let (j, _, start) = self
                .running
                .get(&o.job)
                .unwrap_or_else(|| panic!("order for a job not running: {o:?}"));
            let flags = j.flags.unwrap_or_default();
            assert!(flags.resumable, "not resumable: {o:?}");
            assert!(!j.required_nodes, "names its nodes: {o:?}");
            let ran = (self.now + slack).saturating_sub(*start);
            assert!(ran >= flags.min_runtime_s, "inside its min runtime: {o:?}");
            assert!(
                ran >= cfg.min_run_before_migration_s,
                "in its first minutes: {o:?}"
            );
            if let Some(&t) = self.migrated_at.get(&o.job) {
                assert!(
                    self.now + slack >= t + cfg.migration_cooldown_s,
                    "job {} requeued for a move at {t}, ordered again at {}",
                    o.job,
                    self.now
                );
            }
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Submit {
                w,
                g,
                resumable,
                min_runtime_s,
                named,
            } => {
                self.next_id += 1;
                let mut j = job(self.next_id, w, g);
                j.flags = Some(JobFlags {
                    min_runtime_s,
                    resumable,
                    migration_cost_s: None,
                });
                j.required_nodes = named;
                self.pending.insert(j.id, j);
            }
            Op::Schedule => self.schedule(),
            Op::End(k) => {
                if let Some(id) = self.nth_running(k) {
                    self.running.remove(&id);
                    let _ = self.c.fini(id, self.now);
                }
            }
            Op::Requeue(k) => {
                if let Some(id) = self.nth_running(k) {
                    let (j, _, _) = self.running.remove(&id).unwrap();
                    let _ = self.c.fini(id, self.now);
                    self.pending.insert(id, j);
                }
            }
            Op::Tick { dt, refuse } => {
                self.now += dt;
                let orders = self.c.tick(self.now);
                self.check_orders(&orders);
                for o in orders {
                    if refuse || !self.c.still_ordered(o.job) {
                        if refuse {
                            let _ = self.c.requeue_failed(&o, self.now);
                        }
                        continue;
                    }
                    let (j, _, _) = self.running.remove(&o.job).unwrap();
                    let _ = self.c.fini(o.job, self.now);
                    self.migrated_at.insert(o.job, self.now);
                    self.pending.insert(o.job, j);
                }
            }
            Op::ClockBack(s) => {
                self.now = self.now.saturating_sub(s);
                self.back += s;
            }
            Op::Rebuild => {
                let saved = self.c.saved(self.now);
                let mut c = ctl_on(always(), NODES);
                c.restore(&saved, self.now);
                for (j, per, start) in self.running.values() {
                    let named = j.required_nodes.then(|| Self::named_set(j));
                    let _ = c.adopt_running_within(j, per, named.as_ref(), *start);
                }
                c.adopt_in_flight();
                c.compact();
                self.c = c;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random sequences of slurmctld's callbacks and the plugin thread's
    /// ticks, with refused requeues, requeues for other reasons, rebuilds
    /// and a clock that jumps or steps back: no order ever breaks a
    /// promise of the user guide (resumable only, never a `-w` job, never
    /// inside the min runtime or the first minutes, never twice within the
    /// cool-down), the engine's invariants hold, and once every job has
    /// ended nothing is left in flight, held, pinned or cooling down.
    #[test]
    fn random_callback_sequences_keep_every_promise(ops in prop::collection::vec(op(), 1..300)) {
        let mut s = Slurm {
            c: ctl_on(always(), NODES),
            now: 10_000,
            next_id: 0,
            running: BTreeMap::new(),
            pending: BTreeMap::new(),
            migrated_at: BTreeMap::new(),
            back: 0,
        };
        for op in &ops {
            s.apply(op);
            prop_assert_eq!(s.c.self_check(), None, "after {:?}", op);
        }
        // Everything ends; the pending jobs are cancelled (never offered
        // again); time passes past every bound.
        let ids: Vec<u64> = s.running.keys().copied().collect();
        for id in ids {
            s.running.remove(&id);
            let _ = s.c.fini(id, s.now);
        }
        s.pending.clear();
        for _ in 0..150 {
            s.now += 10;
            let orders = s.c.tick(s.now);
            prop_assert!(orders.is_empty(), "{:?}", orders);
        }
        prop_assert!(s.c.pins.is_empty() && s.c.migrating.is_empty() && s.c.orders.is_empty());
        prop_assert!(s.c.holds.is_empty(), "{:?}", s.c.holds.keys().collect::<Vec<_>>());
        prop_assert!(s.c.last_migrated.is_empty() && s.c.cooldowns.is_empty());
        prop_assert!(s.c.kept.is_empty() && s.c.jobs.is_empty());
        prop_assert!(s.c.snapshot(s.now, true).nodes.iter().all(|n| n.used_gpus == 0));
    }
}
