//! Cluster sizing `N(eta)`, paper Section 5.2, eqs. (12)-(13).

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, Result};
use crate::trace::TraceJob;

/// How a cluster was sized for a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sizing {
    pub eta: f64,
    /// `p_eta`: the smallest GPU level the concurrent demand `D(t)` stays at
    /// or below for at least an `eta` fraction of its support.
    pub p_eta_gpus: u64,
    /// `N_maxjob`: nodes needed to host the largest single job.
    pub n_maxjob: u32,
    /// `N(eta) = max(ceil(p_eta / G), N_maxjob)`.
    pub nodes: u32,
}

/// Nodes of `gpus_per_node` needed to host one job of `w` instances of `g`
/// GPUs (intra-node constraint, gang scheduling): `ceil(w / floor(G / g))`.
pub fn nodes_for_job(instances: u32, gpus: u32, gpus_per_node: u32) -> u32 {
    let per_node = (gpus_per_node / gpus.max(1)).max(1);
    instances.div_ceil(per_node)
}

/// Sizes the cluster for `jobs` as paper eqs. (12)-(13).
///
/// `D(t) = sum_j G_j 1[a_j <= t < a_j + tau_j]` (eq. 12) with `G_j = w_j g_j`
/// and `tau_j` the job's duration, i.e. the demand as if every job started on
/// arrival. Its *support* is the time where `D(t) > 0`. `p_eta` is the
/// smallest level `l` with `|{t : 0 < D(t) <= l}| >= eta |support|`, and
/// `N(eta) = max(ceil(p_eta / G), N_maxjob)` (eq. 13, `G = 8` in the paper).
pub fn size_cluster(jobs: &[TraceJob], eta: f64, gpus_per_node: u32) -> Result<Sizing> {
    if !(eta > 0.0 && eta <= 1.0) {
        return Err(CoreError::Invalid(format!(
            "eta must be in (0, 1], got {eta}"
        )));
    }
    if jobs.is_empty() {
        return Err(CoreError::Invalid(
            "cannot size a cluster for an empty trace".into(),
        ));
    }
    // Demand changes: +G at arrival, -G at arrival + duration.
    let mut steps: Vec<(f64, i64)> = Vec::with_capacity(jobs.len() * 2);
    let mut n_maxjob = 1;
    for j in jobs {
        let g = j.shape.total_gpus() as i64;
        n_maxjob = n_maxjob.max(nodes_for_job(
            j.shape.instances,
            j.shape.gpus,
            gpus_per_node,
        ));
        if j.duration_s > 0.0 {
            steps.push((j.submit_s, g));
            steps.push((j.submit_s + j.duration_s, -g));
        }
    }
    steps.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // Time spent at each positive demand level.
    let mut at_level: std::collections::BTreeMap<u64, f64> = std::collections::BTreeMap::new();
    let mut level: i64 = 0;
    let mut last = steps.first().map(|s| s.0).unwrap_or(0.0);
    for (t, delta) in steps {
        if level > 0 && t > last {
            *at_level.entry(level as u64).or_default() += t - last;
        }
        level += delta;
        last = t;
    }
    let support: f64 = at_level.values().sum();
    let mut p_eta = 0;
    if support > 0.0 {
        let need = eta * support;
        let mut acc = 0.0;
        for (&l, &dt) in &at_level {
            acc += dt;
            p_eta = l;
            if acc >= need * (1.0 - 1e-12) {
                break;
            }
        }
    }
    let by_demand = u32::try_from(p_eta.div_ceil(u64::from(gpus_per_node)))
        .map_err(|_| CoreError::Invalid("cluster size overflows".into()))?;
    let nodes = by_demand.max(n_maxjob).max(1);
    // The limit of `--nodes` (the engine's state grows with the nodes: a
    // trace with a job of millions of GPUs ran out of memory here).
    if u64::from(nodes) > crate::sim::cluster::MAX_NODES {
        return Err(CoreError::Invalid(format!(
            "sized by eta {eta}, the cluster would have {nodes} nodes of {gpus_per_node} GPUs \
             ({n_maxjob} for the largest job): more than {} nodes",
            crate::sim::cluster::MAX_NODES
        )));
    }
    Ok(Sizing {
        eta,
        p_eta_gpus: p_eta,
        n_maxjob,
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobShape;

    #[test]
    fn a_cluster_sized_past_the_node_limit_is_refused() {
        // One job of 10 million 8-GPU instances: its nodes alone.
        let e = size_cluster(&[job(0.0, 10.0, 10_000_000, 8)], 0.9, 8).unwrap_err();
        assert!(e.to_string().contains("more than 1000000 nodes"), "{e}");
        assert_eq!(
            size_cluster(&[job(0.0, 10.0, 1_000_000, 8)], 0.9, 8).map(|s| s.nodes),
            Ok(1_000_000)
        );
    }

    fn job(submit: f64, dur: f64, w: u32, g: u32) -> TraceJob {
        TraceJob {
            name: String::new(),
            submit_s: submit,
            duration_s: dur,
            shape: JobShape::new(w, g),
            account: None,
            min_runtime_s: None,
            resumable: true,
            line: 0,
        }
    }

    #[test]
    fn percentile_of_demand_follows_eq13() {
        // D = 8 on [0,90), 40 on [90,100): support 100 s.
        let jobs = vec![job(0.0, 100.0, 1, 8), job(90.0, 10.0, 4, 8)];
        let s = size_cluster(&jobs, 0.9, 8).unwrap();
        assert_eq!((s.p_eta_gpus, s.n_maxjob, s.nodes), (8, 4, 4));
        let s = size_cluster(&jobs, 0.95, 8).unwrap();
        assert_eq!((s.p_eta_gpus, s.nodes), (40, 5));
        // Idle gaps are not part of the support.
        let jobs = vec![job(0.0, 10.0, 1, 2), job(1000.0, 10.0, 1, 2)];
        assert_eq!(size_cluster(&jobs, 0.9, 8).unwrap().p_eta_gpus, 2);
    }

    #[test]
    fn largest_job_sets_a_floor() {
        assert_eq!(nodes_for_job(3, 4, 8), 2);
        assert_eq!(nodes_for_job(5, 3, 8), 3);
        let jobs = vec![job(0.0, 10.0, 3, 4)];
        assert_eq!(size_cluster(&jobs, 0.9, 8).unwrap().nodes, 2);
        assert!(size_cluster(&jobs, 0.0, 8).is_err());
        assert!(size_cluster(&[], 0.9, 8).is_err());
    }
}
