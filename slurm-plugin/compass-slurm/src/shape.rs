//! Mapping a Slurm GPU request onto the `w x g` model (paper Section 3.2: a
//! job is `w` instances of `g` GPUs, each instance on one node).
//!
//! - `--ntasks=w --gpus-per-task=g`: `w` instances of `g` (instances may
//!   share a node).
//! - `-N n --gres=gpu:g` / `--gpus-per-node=g` (with or without
//!   `--ntasks-per-node`): `n` instances of `g`, one per node (Slurm needs `n`
//!   distinct nodes).
//! - `-N n --ntasks-per-node=k --gpus-per-task=g`: `n` instances of `k*g`,
//!   one per node.
//! - `-N 1 --gpus=g`: one instance of `g`.
//! - Anything else with GPUs (`--gpus=3` that may spread, node ranges, mixed
//!   per-task and per-node GPUs) is outside the model: Slurm places it alone
//!   and the engine records it as foreign, immovable GPU use.

use compass_core::gres;
use compass_core::model::{JobShape, NodeId};
use compass_core::placement::pools::NodeGpus;

/// The GPU-related fields of a Slurm job (from `job_record_t` and its details).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlurmRequest<'a> {
    /// `details->num_tasks` (0 when unset).
    pub num_tasks: u32,
    /// `details->min_nodes`.
    pub min_nodes: u32,
    /// `details->max_nodes` (0 = no limit).
    pub max_nodes: u32,
    /// `details->ntasks_per_node` (0 = unset).
    pub ntasks_per_node: u32,
    pub tres_per_task: Option<&'a str>,
    pub tres_per_node: Option<&'a str>,
    pub tres_per_job: Option<&'a str>,
}

/// Where a Slurm job falls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// Requests no GPU: plain cons_tres, the engine is not involved.
    NoGpu,
    /// In the model. `distinct_nodes`: Slurm puts each instance on its own
    /// node (`-N n` forms), so a plan sharing a node cannot be enforced.
    Model {
        shape: JobShape,
        distinct_nodes: bool,
    },
    /// Uses GPUs outside the model; the reason is logged.
    Outside(String),
}

/// GPUs in a TRES request string such as `gres:gpu:4`, `gres:gpu:a100:4`,
/// `gres/gpu:4`, `gres/gpu=4` or `gres/gpu=4,gres/gpu:a100=4` (comma
/// separated with other TRES), read by the project's one parser
/// ([`compass_core::gres`]). `None` when no GPU is requested; `Some(Err)` on
/// a string we cannot read.
pub fn gpus_in_tres(tres: &str) -> Option<Result<u32, String>> {
    match gres::gpus_named(tres) {
        Ok(None) => None,
        Ok(Some(g)) => Some(Ok(g.total_u32())),
        Err(e) => Some(Err(e.to_string())),
    }
}

/// GPUs of a node from its `Gres=` string (`gpu:8`, `gpu:a100:4(S:0-1)`,
/// several types added up); 0 for CPU-only nodes and unreadable strings.
pub fn gpus_in_node_gres(node_gres: &str) -> u32 {
    gres::gpus(node_gres).map(|g| g.total_u32()).unwrap_or(0)
}

/// A node's GPUs and their type from its `Gres=` string, for the pools of
/// [`compass_core::placement::pools`]: `gpu:a100:8(S:0-1)` is 8 of type
/// `a100`, `gpu:2` is 2 untyped, several types are joined with `+`
/// (`a100+h100`: a pass-through pool); unreadable strings and CPU-only nodes
/// are 0 GPUs.
pub fn node_gpus(node_gres: &str) -> NodeGpus {
    let Ok(g) = gres::gpus(node_gres) else {
        return NodeGpus::default();
    };
    let gpu_type = match g.by_type.len() {
        0 => None,
        _ => Some(g.by_type.keys().cloned().collect::<Vec<_>>().join("+")),
    };
    NodeGpus {
        gpus: g.total_u32(),
        gpu_type,
        group: None,
    }
}

/// The one GPU type a request names (`--gres=gpu:a100:2` gives
/// `gres:gpu:a100:2`, `--gpus=l40s:4` gives `gres:gpu:l40s:4`); `None` when
/// it names none (any pool) or several.
pub fn requested_gpu_type(r: &SlurmRequest<'_>) -> Option<String> {
    let mut types = std::collections::BTreeSet::new();
    for t in [r.tres_per_task, r.tres_per_node, r.tres_per_job]
        .into_iter()
        .flatten()
    {
        if let Ok(g) = gres::gpus(t) {
            types.extend(g.by_type.into_keys());
        }
    }
    match types.len() {
        1 => types.pop_first(),
        _ => None,
    }
}

/// Maps a Slurm request onto the model, for nodes of `capacity` GPUs.
pub fn map_request(r: &SlurmRequest<'_>, capacity: u32) -> Mapping {
    let read = |t: Option<&str>| match t.and_then(gpus_in_tres) {
        None => Ok(None),
        Some(Ok(0)) => Ok(None),
        Some(Ok(n)) => Ok(Some(n)),
        Some(Err(e)) => Err(e),
    };
    let (per_task, per_node, per_job) = match (
        read(r.tres_per_task),
        read(r.tres_per_node),
        read(r.tres_per_job),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Mapping::Outside(e),
    };
    let fixed_nodes = r.max_nodes == 0 || r.max_nodes == r.min_nodes.max(1);
    let (shape, distinct_nodes) = match (per_task, per_node, per_job) {
        (None, None, None) => return Mapping::NoGpu,
        (Some(g), None, None) => {
            let k = r.ntasks_per_node;
            if k > 1 {
                // -N n --ntasks-per-node=k --gpus-per-task=g: one instance
                // of k*g GPUs on each of n nodes.
                let n = r.min_nodes.max(1);
                if !fixed_nodes || r.num_tasks != n * k {
                    return Mapping::Outside(format!(
                        "--ntasks-per-node={k} with {} tasks on {}-{} nodes",
                        r.num_tasks, r.min_nodes, r.max_nodes
                    ));
                }
                (JobShape::new(n, k * g), true)
            } else {
                (JobShape::new(r.num_tasks.max(1), g), false)
            }
        }
        (None, Some(g), None) => {
            if !fixed_nodes {
                return Mapping::Outside(format!(
                    "node range {}-{} with GPUs per node",
                    r.min_nodes, r.max_nodes
                ));
            }
            (JobShape::new(r.min_nodes.max(1), g), true)
        }
        (None, None, Some(g)) => {
            if r.max_nodes != 1 {
                return Mapping::Outside(format!("--gpus={g} without -N 1 may spread over nodes"));
            }
            (JobShape::new(1, g), false)
        }
        _ => {
            return Mapping::Outside(
                "GPUs requested per task, per node and/or per job at once".into(),
            )
        }
    };
    if shape.gpus > capacity {
        return Mapping::Outside(format!(
            "{} GPUs per instance exceed the node capacity {capacity}",
            shape.gpus
        ));
    }
    Mapping::Model {
        shape,
        distinct_nodes,
    }
}

/// The node of each instance (`nodes[k]` hosts instance `k`), from the GPUs
/// Slurm allocated per node, or `None` when the allocation cannot be read as
/// `w` instances of `g` (then the job is recorded as foreign GPU use).
pub fn instances_from_alloc(
    shape: JobShape,
    per_node_gpus: &[(NodeId, u32)],
) -> Option<Vec<NodeId>> {
    let mut nodes = Vec::with_capacity(shape.instances as usize);
    for &(node, gpus) in per_node_gpus {
        if gpus % shape.gpus != 0 {
            return None;
        }
        nodes.extend(std::iter::repeat_n(node, (gpus / shape.gpus) as usize));
    }
    (nodes.len() == shape.instances as usize).then_some(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(
        tasks: u32,
        min: u32,
        max: u32,
        tpt: Option<&'a str>,
        tpn: Option<&'a str>,
        tpj: Option<&'a str>,
    ) -> SlurmRequest<'a> {
        SlurmRequest {
            num_tasks: tasks,
            min_nodes: min,
            max_nodes: max,
            ntasks_per_node: 0,
            tres_per_task: tpt,
            tres_per_node: tpn,
            tres_per_job: tpj,
        }
    }

    #[test]
    fn tres_strings() {
        assert_eq!(gpus_in_tres("gres:gpu:4"), Some(Ok(4)));
        assert_eq!(gpus_in_tres("cpu:2,gres:gpu:a100:2"), Some(Ok(2)));
        assert_eq!(gpus_in_tres("gres/gpu=3"), Some(Ok(3)));
        assert_eq!(gpus_in_tres("gres:gpu"), Some(Ok(1)));
        assert_eq!(gpus_in_tres("gres:mps:100"), None);
        // `gpu:x` is Slurm's form for one GPU of type `x`.
        assert_eq!(gpus_in_tres("gres:gpu:x"), Some(Ok(1)));
        assert!(matches!(gpus_in_tres("gres:gpu:a100:x"), Some(Err(_))));
        assert!(matches!(gpus_in_tres("gres/gpu=-2"), Some(Err(_))));
    }

    #[test]
    fn node_gres() {
        assert_eq!(gpus_in_node_gres("gpu:8"), 8);
        assert_eq!(gpus_in_node_gres("gpu:a100:4(S:0-1),gpu:v100:2"), 6);
        assert_eq!(gpus_in_node_gres("(null)"), 0);
        assert_eq!(gpus_in_node_gres("mps:100"), 0);
        // What slurmctld reports once gres.conf has `Cores=`, and a node of
        // two types (issue 12): the shared parser reads both right.
        assert_eq!(gpus_in_node_gres("gpu:a100:8(S:0-1)"), 8);
        assert_eq!(gpus_in_node_gres("gpu:a100:4(S:0),gpu:h100:4(S:1)"), 8);
    }

    #[test]
    fn node_pools_and_requested_types() {
        assert_eq!(
            node_gpus("gpu:a100:8(S:0-1)"),
            NodeGpus::new(8, Some("a100"))
        );
        assert_eq!(node_gpus("gpu:2(S:0-1)"), NodeGpus::new(2, None));
        assert_eq!(node_gpus("(null)"), NodeGpus::new(0, None));
        assert_eq!(
            node_gpus("gpu:a100:4(S:0),gpu:h100:4(S:1)"),
            NodeGpus::new(8, Some("a100+h100"))
        );
        let typed = req(1, 1, 1, None, Some("gres:gpu:a100:2"), None);
        assert_eq!(requested_gpu_type(&typed).as_deref(), Some("a100"));
        let typed = req(1, 1, 1, None, None, Some("gres/gpu:l40s=4"));
        assert_eq!(requested_gpu_type(&typed).as_deref(), Some("l40s"));
        let any = req(2, 1, 0, Some("gres:gpu:1"), None, None);
        assert_eq!(requested_gpu_type(&any), None);
    }

    #[test]
    fn a_typed_and_untyped_tres_pair_is_not_counted_twice() {
        // Slurm's TRES strings name a typed request twice: once untyped.
        assert_eq!(gpus_in_tres("gres/gpu=8,gres/gpu:a100=8"), Some(Ok(8)));
        assert_eq!(gpus_in_tres("gres:gpu:a100"), Some(Ok(1)));
    }

    #[test]
    fn per_task_form() {
        let m = map_request(&req(4, 1, 0, Some("gres:gpu:2"), None, None), 8);
        assert_eq!(
            m,
            Mapping::Model {
                shape: JobShape::new(4, 2),
                distinct_nodes: false
            }
        );
    }

    #[test]
    fn tasks_per_node_form_is_one_instance_per_node() {
        let mut r = req(4, 2, 2, Some("gres:gpu:2"), None, None);
        r.ntasks_per_node = 2;
        assert_eq!(
            map_request(&r, 8),
            Mapping::Model {
                shape: JobShape::new(2, 4),
                distinct_nodes: true
            }
        );
    }

    #[test]
    fn per_node_form_is_one_instance_per_node() {
        let mut r = req(2, 2, 2, None, Some("gres:gpu:8"), None);
        r.ntasks_per_node = 1;
        assert_eq!(
            map_request(&r, 8),
            Mapping::Model {
                shape: JobShape::new(2, 8),
                distinct_nodes: true
            }
        );
        assert!(matches!(
            map_request(&req(1, 2, 4, None, Some("gres:gpu:8"), None), 8),
            Mapping::Outside(_)
        ));
    }

    #[test]
    fn per_job_form() {
        assert_eq!(
            map_request(&req(1, 1, 1, None, None, Some("gres:gpu:3")), 8),
            Mapping::Model {
                shape: JobShape::new(1, 3),
                distinct_nodes: false
            }
        );
        assert!(matches!(
            map_request(&req(1, 1, 0, None, None, Some("gres:gpu:3")), 8),
            Mapping::Outside(_)
        ));
    }

    #[test]
    fn outside_and_no_gpu() {
        assert_eq!(
            map_request(&req(4, 1, 0, None, None, None), 8),
            Mapping::NoGpu
        );
        assert_eq!(
            map_request(&req(1, 1, 0, Some("cpu:2"), None, None), 8),
            Mapping::NoGpu
        );
        assert!(matches!(
            map_request(&req(1, 1, 0, Some("gres:gpu:16"), None, None), 8),
            Mapping::Outside(_)
        ));
        assert!(matches!(
            map_request(
                &req(2, 1, 0, Some("gres:gpu:1"), Some("gres:gpu:2"), None),
                8
            ),
            Mapping::Outside(_)
        ));
        let mut r = req(4, 2, 0, Some("gres:gpu:1"), None, None);
        r.ntasks_per_node = 3;
        assert!(
            matches!(map_request(&r, 8), Mapping::Outside(_)),
            "4 tasks cannot be 3 per node on 2 nodes"
        );
        let mut r = req(4, 2, 2, Some("gres:gpu:8"), None, None);
        r.ntasks_per_node = 2;
        assert!(
            matches!(map_request(&r, 8), Mapping::Outside(_)),
            "16 GPUs per node"
        );
    }

    #[test]
    fn allocation_to_instances() {
        let s = JobShape::new(3, 4);
        assert_eq!(
            instances_from_alloc(s, &[(5, 8), (6, 4)]),
            Some(vec![5, 5, 6])
        );
        assert_eq!(instances_from_alloc(s, &[(5, 8)]), None);
        assert_eq!(instances_from_alloc(s, &[(5, 6), (6, 6)]), None);
        assert_eq!(
            instances_from_alloc(JobShape::new(2, 2), &[(0, 4)]),
            Some(vec![0, 0])
        );
    }
}
