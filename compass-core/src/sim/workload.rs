//! A workload shaped like the published budget design's cluster (issue 15;
//! `fair-share-budgets.txt`): about 15 teams with budgets of 2-25% each,
//! demand 2-3x capacity, jobs mostly whole 8-GPU nodes and multiples, debug
//! jobs, and about a fifth of the *delivered* GPU-time unallocated (min
//! runtime 0; calibrated through [`WorkloadConfig::allocated_demand`]).
//! Generated deterministically from a seed (SplitMix64); no I/O: the CLI
//! (`compass workload`) writes it as a canonical trace and a budget tree.
//!
//! The generator, step by step (`docs/policy-simulator.md`):
//! 1. **Budgets**: `teams` weights drawn log-uniform in [1, 12.5], normalised;
//!    redrawn until every share lies in [2%, 25%].
//! 2. **Team demand**: each team's share of the offered work is its budget
//!    times a factor log-uniform in [0.5, 2] (some teams ask for less than
//!    they are owed, some for far more), normalised.
//! 3. **Jobs**, Poisson arrivals over `days`, the rate set so the offered
//!    GPU-time is `demand` x capacity:
//!    - 30% **debug**: 1 or 2 GPUs, 2-15 minutes, min runtime = duration;
//!    - the rest **whole nodes**: 1, 2, 4, 8, 16 or 32 nodes of 8 GPUs
//!      (weights 45, 25, 15, 9, 4, 2; never more than a quarter of the
//!      cluster), duration log-normal (median 3 h, sigma 1.2) within
//!      [10 min, 72 h]; a fraction `1 - allocated_demand / demand` of them
//!      is **unallocated** (min runtime 0), the others ask
//!      `min(duration, 8 h)`, so the allocated work offered is about
//!      `allocated_demand` x capacity (default 0.8, see the field).
//!    - nine in ten jobs are resumable.

use crate::fairshare::tree::NodeSpec;
use crate::model::{JobId, JobShape};
use crate::sim::budgets::BudgetJob;

/// Settings of [`generate`].
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadConfig {
    pub seed: u64,
    pub teams: usize,
    /// Cluster size the demand is set for (8-GPU nodes).
    pub nodes: u32,
    pub days: f64,
    /// Offered GPU-time / capacity.
    pub demand: f64,
    /// Offered *allocated* GPU-time (min runtime > 0) / capacity; the rest
    /// of `demand` is unallocated whole-node work. Calibrated on the
    /// published figures (`fair-share-budgets.txt`): occupancy 98% with 18%
    /// of delivered time unallocated, so allocated work filled about
    /// 0.98 x 0.82 = 0.80 of capacity; allocated work is served before
    /// unallocated, so what is delivered of it is about what is offered
    /// when that is below capacity. 2.5 x 0.75 = 1.875 gives the first
    /// calibration (one whole-node job in four unallocated).
    pub allocated_demand: f64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            teams: 15,
            nodes: 125,
            days: 30.0,
            demand: 2.5,
            allocated_demand: 0.8,
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, fast, and the same on every
/// platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + self.unit() * (hi.ln() - lo.ln())).exp()
    }
    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(1e-300);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    fn pick(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }
}

/// A generated workload: the budget tree and the jobs (ids from 1, submit
/// times from 0).
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub tree: Vec<NodeSpec>,
    pub jobs: Vec<BudgetJob>,
}

/// Generates the workload of `cfg` (see the module doc).
pub fn generate(cfg: &WorkloadConfig) -> Workload {
    let mut rng = Rng(cfg.seed);
    let n = cfg.teams.max(1);
    let shares: Vec<f64> = loop {
        let w: Vec<f64> = (0..n).map(|_| rng.log_uniform(1.0, 12.5)).collect();
        let total: f64 = w.iter().sum();
        let s: Vec<f64> = w.iter().map(|x| x / total).collect();
        if n < 5 || s.iter().all(|&x| (0.02..=0.25).contains(&x)) {
            break s;
        }
    };
    let names: Vec<String> = (1..=n).map(|i| format!("t{i:02}")).collect();
    let mut tree = vec![NodeSpec {
        name: "org".into(),
        parent: None,
        share: 1.0,
        managers: vec!["admin".into()],
        account: None,
    }];
    for (name, share) in names.iter().zip(&shares) {
        tree.push(NodeSpec {
            name: format!("team-{name}"),
            parent: Some("org".into()),
            // Rounded down so the shares never sum above 1.
            share: (share * 1e6).floor() / 1e6,
            managers: vec![],
            account: Some(name.clone()),
        });
    }
    let pull: Vec<f64> = shares
        .iter()
        .map(|s| s * rng.log_uniform(0.5, 2.0))
        .collect();

    const NODE_COUNTS: [u32; 6] = [1, 2, 4, 8, 16, 32];
    const NODE_WEIGHTS: [f64; 6] = [45.0, 25.0, 15.0, 9.0, 4.0, 2.0];
    let max_nodes = (cfg.nodes / 4).max(1);
    let weights: Vec<f64> = NODE_COUNTS
        .iter()
        .zip(NODE_WEIGHTS)
        .map(|(&c, w)| if c <= max_nodes { w } else { 0.0 })
        .collect();
    let span = cfg.days * 86400.0;
    let target = cfg.demand * f64::from(cfg.nodes) * 8.0 * span;
    // Draw job bodies until their GPU-time reaches the target, then spread
    // the arrivals as a Poisson process over the span.
    // Debug jobs (allocated) are a negligible part of the GPU-time.
    let p_unallocated = (1.0 - cfg.allocated_demand / cfg.demand).clamp(0.0, 1.0);
    let mut bodies: Vec<(usize, f64, JobShape, f64, bool)> = Vec::new();
    let mut offered = 0.0;
    while offered < target {
        let team = rng.pick(&pull);
        let resumable = rng.unit() < 0.9;
        let (dur, shape, min_rt) = if rng.unit() < 0.3 {
            let gpus = if rng.unit() < 0.5 { 1 } else { 2 };
            let dur = (120.0 + rng.unit() * 780.0).round();
            (dur, JobShape::new(1, gpus), dur)
        } else {
            let nodes = NODE_COUNTS[rng.pick(&weights)];
            let dur = (3.0 * 3600.0 * (1.2 * rng.normal()).exp())
                .clamp(600.0, 72.0 * 3600.0)
                .round();
            let unallocated = rng.unit() < p_unallocated;
            let min_rt = if unallocated {
                0.0
            } else {
                dur.min(8.0 * 3600.0)
            };
            (dur, JobShape::new(nodes, 8), min_rt)
        };
        offered += dur * shape.total_gpus() as f64;
        bodies.push((team, dur, shape, min_rt, resumable));
    }
    let rate = bodies.len() as f64 / span;
    let mut t: f64 = 0.0;
    let jobs = bodies
        .into_iter()
        .enumerate()
        .map(|(i, (team, dur, shape, min_rt, resumable))| {
            let job = BudgetJob {
                id: JobId(i as u64 + 1),
                account: names[team].clone(),
                submit_s: t.round(),
                duration_s: dur,
                shape,
                min_runtime_s: min_rt,
                resumable,
                priority: 0,
            };
            t += -(1.0 - rng.unit()).ln() / rate;
            job
        })
        .collect();
    Workload { tree, jobs }
}

/// The jobs as a canonical trace
/// (`job_id,submit_s,duration_s,num_inst,gpus_per_inst,account,min_runtime_s,resumable`).
pub fn to_canonical_csv(jobs: &[BudgetJob]) -> String {
    let mut out = String::from(
        "job_id,submit_s,duration_s,num_inst,gpus_per_inst,account,min_runtime_s,resumable\n",
    );
    for j in jobs {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            j.id.0,
            j.submit_s,
            j.duration_s,
            j.shape.instances,
            j.shape.gpus,
            j.account,
            j.min_runtime_s,
            j.resumable
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairshare::tree::OrgTree;
    use crate::trace::{read_str, ReadOptions};

    #[test]
    fn same_seed_same_workload_and_shaped_as_documented() {
        let cfg = WorkloadConfig {
            nodes: 32,
            days: 7.0,
            ..WorkloadConfig::default()
        };
        let a = generate(&cfg);
        assert_eq!(a, generate(&cfg));
        assert_ne!(
            a.jobs,
            generate(&WorkloadConfig {
                seed: 2,
                ..cfg.clone()
            })
            .jobs
        );
        let tree = OrgTree::build(&a.tree).unwrap();
        assert_eq!(a.tree.len(), 16);
        for s in &a.tree[1..] {
            assert!((0.0199..=0.2501).contains(&s.share), "{}", s.share);
        }
        let gpu_s = |f: &dyn Fn(&BudgetJob) -> bool| -> f64 {
            a.jobs
                .iter()
                .filter(|j| f(j))
                .map(|j| j.duration_s * j.shape.total_gpus() as f64)
                .sum()
        };
        let all = gpu_s(&|_| true);
        let demand = all / (32.0 * 8.0 * 7.0 * 86400.0);
        assert!((2.5..2.6).contains(&demand), "{demand}");
        // Allocated work offered at about `allocated_demand` x capacity
        // (each job drawn independently, so a week on 32 nodes, with jobs
        // of up to 8 nodes x 72 h, strays further than the default month:
        // 0.69 here, 0.76 there).
        let alloc = gpu_s(&|j| j.min_runtime_s > 0.0) / (32.0 * 8.0 * 7.0 * 86400.0);
        assert!((0.6..1.0).contains(&alloc), "{alloc}");
        let month = generate(&WorkloadConfig::default());
        let cap = 125.0 * 8.0 * 30.0 * 86400.0;
        let month_alloc: f64 = month
            .jobs
            .iter()
            .filter(|j| j.min_runtime_s > 0.0)
            .map(|j| j.duration_s * j.shape.total_gpus() as f64)
            .sum::<f64>()
            / cap;
        assert!((0.72..0.88).contains(&month_alloc), "{month_alloc}");
        // The first calibration: one whole-node job in four unallocated.
        let first = generate(&WorkloadConfig {
            allocated_demand: 2.5 * 0.75,
            ..cfg.clone()
        });
        let unalloc = first
            .jobs
            .iter()
            .filter(|j| j.min_runtime_s == 0.0)
            .map(|j| j.duration_s * j.shape.total_gpus() as f64)
            .sum::<f64>()
            / first
                .jobs
                .iter()
                .map(|j| j.duration_s * j.shape.total_gpus() as f64)
                .sum::<f64>();
        assert!((0.15..0.35).contains(&unalloc), "{unalloc}");
        let whole = a.jobs.iter().filter(|j| j.shape.gpus == 8).count();
        assert!(whole * 10 > a.jobs.len() * 6, "mostly whole nodes");
        assert!(a
            .jobs
            .iter()
            .all(|j| tree.leaf_for_account(&j.account).is_ok()));
        // The canonical CSV reads back to the same jobs.
        let csv = to_canonical_csv(&a.jobs);
        let t = read_str(&csv, "gen.csv", &ReadOptions::default()).unwrap();
        let back = crate::sim::budgets::from_canonical(&t.jobs, "gen.csv").unwrap();
        assert_eq!(back, a.jobs);
    }
}
