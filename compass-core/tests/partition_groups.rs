//! Measurement behind `select.pools_by_partition` (docs/results.md, "Pools
//! per partition group"): on clusters whose partitions share no node, one
//! engine over all nodes with each job kept inside its partition
//! (`set_allowed`, as the select plugin does by default) against one engine
//! per partition group. Random arrivals (1-2 instances of 1, 2, 4 or 8
//! GPUs, each to one partition, all movable) and departures; after every
//! event, per partition: partial nodes, `N * SIF` (partial minus `Phi*` of
//! that partition's instances) and whether it passes Theorem 1's bound of 2
//! while WCC holds there. A job that does not fit is dropped (no queue).
//!
//! ```sh
//! cargo test --release -p compass-core --test partition_groups -- --ignored --nocapture
//! ```
use compass_core::metric::{phi_star, wcc_holds};
use compass_core::model::{JobId, JobRequest, NodeSet};
use compass_core::placement::compass::CompassConfig;
use compass_core::placement::pools::{partition_groups, NodeGpus, PoolSet};
use std::collections::BTreeMap;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default, Debug)]
struct Tally {
    events: u64,
    over: u64,    // events where some group has N*SIF > 2 with WCC in that group
    partial: u64, // sum of partial nodes
    nsif: u64,    // sum over groups of N*SIF
    moves: u64,
    placed: u64,
    tried: u64,
}

fn run(split: bool, sizes: &[u32], seed: u64, steps: usize) -> Tally {
    let total: u32 = sizes.iter().sum();
    let mut parts = Vec::new();
    let mut at = 0;
    for (k, &n) in sizes.iter().enumerate() {
        parts.push((format!("p{k}"), (at..at + n).collect::<Vec<_>>()));
        at += n;
    }
    let groups = partition_groups(total, &parts);
    let nodes: Vec<NodeGpus> = groups
        .iter()
        .map(|g| NodeGpus::new(8, None).in_group(if split { g.as_deref() } else { None }))
        .collect();
    let mut s = PoolSet::new(&nodes, CompassConfig::default());
    let mut rng = Lcg(seed);
    let mut running: BTreeMap<u64, (usize, JobRequest)> = BTreeMap::new();
    let mut t = Tally::default();
    let mut next = 1u64;
    for _ in 0..steps {
        if running.is_empty() || rng.below(5) < 3 {
            let g = rng.below(sizes.len() as u64) as usize;
            let gpus = [1u32, 1, 2, 4, 8][rng.below(5) as usize];
            let w = 1 + rng.below(2) as u32;
            let job = JobRequest::new(next, w, gpus);
            next += 1;
            t.tried += 1;
            let allowed = NodeSet::from_nodes(total, parts[g].1.iter().copied());
            let pool = if split {
                s.pools()
                    .position(|p| p.group.as_deref() == Some(parts[g].0.as_str()))
                    .unwrap()
            } else {
                0
            };
            // As the select plugin does: the engine's plan among the
            // partition's nodes, the start there, the job kept inside its
            // partition, then Compact.
            if let Some(plan) = s.plan_in(pool, &job, Some(&allowed)).unwrap() {
                s.adopt(&job, &plan).unwrap();
                t.placed += 1;
                s.set_allowed(job.id, Some(&allowed)).unwrap();
                t.moves += s.compact().len() as u64;
                running.insert(job.id.0, (g, job));
            }
        } else {
            let k = rng.below(running.len() as u64) as usize;
            let id = *running.keys().nth(k).unwrap();
            running.remove(&id);
            t.moves += s.remove(JobId(id)).unwrap().len() as u64;
        }
        for (id, (g, _)) in &running {
            let r = s.job(JobId(*id)).unwrap();
            assert!(
                r.nodes.iter().all(|n| parts[*g].1.contains(n)),
                "job {id} outside its partition: {:?}",
                r.nodes
            );
        }
        // per group: partial nodes, Phi*
        t.events += 1;
        let mut any_over = false;
        for (g, (_, ns)) in parts.iter().enumerate() {
            let mut counts = [0u64; 9];
            for (gg, j) in running.values() {
                if *gg == g {
                    counts[j.shape.gpus as usize] += u64::from(j.shape.instances);
                }
            }
            let partial = ns
                .iter()
                .filter(|&&n| {
                    let f = s.free_on(n).unwrap();
                    f > 0 && f < 8
                })
                .count() as u64;
            let nsif = partial.saturating_sub(phi_star(&counts, 8));
            t.partial += partial;
            t.nsif += nsif;
            if nsif > 2 && wcc_holds(&counts, 8) {
                any_over = true;
            }
        }
        t.over += u64::from(any_over);
    }
    t
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn one_engine_against_one_per_partition_group() {
    for sizes in [vec![8u32, 8], vec![4, 12], vec![16, 16], vec![6, 6, 6]] {
        for split in [false, true] {
            let mut sum = Tally::default();
            for seed in 0..20 {
                let t = run(split, &sizes, seed, 5000);
                sum.events += t.events;
                sum.over += t.over;
                sum.partial += t.partial;
                sum.nsif += t.nsif;
                sum.moves += t.moves;
                sum.placed += t.placed;
                sum.tried += t.tried;
            }
            println!(
                "{:?} {}: events {} over-bound {} ({:.2}%), mean partial {:.3}, mean N*SIF sum {:.3}, moves/placed {:.3}, placed/tried {:.4}",
                sizes,
                if split { "per group" } else { "one engine" },
                sum.events,
                sum.over,
                100.0 * sum.over as f64 / sum.events as f64,
                sum.partial as f64 / sum.events as f64,
                sum.nsif as f64 / sum.events as f64,
                sum.moves as f64 / sum.placed as f64,
                sum.placed as f64 / sum.tried as f64
            );
        }
    }
}
