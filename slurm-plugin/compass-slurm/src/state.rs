//! The live state the select plugin publishes for humans (`compass status`)
//! and the budget service: an atomically replaced JSON file, written by a
//! plugin thread (never under slurmctld's locks).

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::flags::JobFlags;

/// Version of the file format.
pub const FORMAT: u32 = 1;

/// Everything published, in one JSON document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PublishedState {
    pub format: u32,
    /// Unix seconds of the snapshot.
    pub updated_unix: u64,
    /// `true` while the engine narrows job_test; `false` when disabled by
    /// config or after an engine error (plain cons_tres).
    pub engine_active: bool,
    /// Last engine error, if any.
    pub engine_error: Option<String>,
    /// GPUs per node of a homogeneous cluster (one pool of every node); 0 on
    /// a mixed cluster (see `pools` and each node's `capacity`).
    pub gpus_per_node: u32,
    pub nodes: Vec<NodeView>,
    /// Nodes with some but not all GPUs in use.
    pub partial_nodes: u32,
    /// `Phi*` of the running instances (paper Section 3.2), summed over the
    /// modelled pools.
    pub phi_star: u64,
    /// `N * SIF = partial - Phi*` (paper eq. 2, times N), summed over the
    /// modelled pools.
    pub n_sif: f64,
    /// `SIF = (partial - Phi*) / N`, N the nodes of the modelled pools.
    pub sif: f64,
    /// One entry per pool of interchangeable GPU nodes (issue 12); absent
    /// in files written before pools existed, and when no node has GPUs
    /// (readers then take the whole cluster as one pool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolView>,
    /// Jobs Slurm placed differently from the engine's plan (cumulative).
    pub divergences: u64,
    /// Compact migrations decided but not yet carried out (requeues).
    pub pending_migrations: Vec<PendingMigration>,
    /// Migrations carried out (requeues issued), cumulative.
    pub migrations_done: u64,
    /// Migrations whose requeue Slurm refused (the job stayed where it
    /// was), cumulative.
    #[serde(default)]
    pub migrations_failed: u64,
    /// Engine errors since slurmctld started, cumulative; each one makes
    /// the plugin fall back to plain cons_tres.
    #[serde(default)]
    pub engine_errors: u64,
    /// Running GPU jobs the migration rule keeps still, by reason
    /// (`not-resumable`, `protected`, `starting-up`, `cooling-down`,
    /// `ends-soon`, `names-its-nodes`: a `-w` job, `migrations-off`:
    /// `select.migrate = false`, `no-gain`: `select.move_when` lets nobody move;
    /// `compass_core::placement::worth::KeepReason`).
    #[serde(default)]
    pub kept_still: std::collections::BTreeMap<String, u64>,
    pub jobs: Vec<JobView>,
    /// Time spent in `select_p_job_test` since slurmctld started.
    #[serde(default)]
    pub job_test: JobTestStats,
    /// The engine's own layout snapshot (node types, slots, anchors,
    /// fillers, pool) when the engine provides one.
    #[serde(default)]
    pub layout: Option<serde_json::Value>,
    /// The gate `select.move_when` the plugin runs with (`always`,
    /// `waiting`, `fits`, `starts`), so a replay simulates what ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub move_when: Option<String>,
    /// Its `select.tidy_payback` (with `pays`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tidy_payback: Option<f64>,
    /// Its `select.migration_cost`, seconds: the cost its migration rule
    /// weighs for a job that names none (`--resumable` without a value),
    /// so a replay's simulation decides with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_cost_s: Option<u64>,
}

/// One pool of interchangeable GPU nodes (same GPU count and type) and its
/// fragmentation, from Slurm's allocation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    /// `8xa100`, `4xl40s`, `2xgpu` (untyped GPUs): the `pool` label of the
    /// budget service's metrics.
    pub name: String,
    pub gpus_per_node: u32,
    /// `None` for untyped GPUs.
    pub gpu_type: Option<String>,
    /// Number of nodes.
    pub nodes: u32,
    pub node_names: Vec<String>,
    /// `true`: the pool has an engine; `false`: pass-through (a GPU count
    /// other than 1, 2, 4, 8, or several GPU types per node), cons_tres
    /// places there alone and `phi_star`, `n_sif`, `wcc` are absent.
    pub modelled: bool,
    pub used_gpus: u64,
    pub partial_nodes: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phi_star: Option<u64>,
    /// `partial - Phi*` of this pool: Theorem 1 bounds it by 2 where WCC
    /// holds in the pool and every job there is movable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_sif: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wcc: Option<bool>,
}

/// Cumulative `select_p_job_test` timing: the engine's part (mapping,
/// planning, narrowing) and the stock cons_tres call it wraps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTestStats {
    pub calls: u64,
    pub engine_ns: u64,
    pub stock_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    pub capacity: u32,
    pub used_gpus: u32,
    /// `(job id, GPUs of that job on this node)`.
    pub jobs: Vec<(u64, u32)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    pub id: u64,
    /// `w x g` when in the model, `None` for foreign GPU use.
    pub shape: Option<(u32, u32)>,
    /// Node names of the instances (`nodes[k]` hosts instance `k`), or the
    /// nodes of a foreign job.
    pub nodes: Vec<String>,
    pub flags: JobFlags,
    /// Outside the `w x g` model (immovable).
    pub foreign: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingMigration {
    pub job: u64,
    /// Node names the job will be pinned to at its next job_test.
    pub to_nodes: Vec<String>,
}

impl PublishedState {
    /// Writes the state to `path` atomically (temporary file + rename), so a
    /// reader never sees a partial document.
    pub fn write_atomic(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        write_json_atomic(path, |f| serde_json::to_writer_pretty(f, self))
    }

    /// Reads a published state file.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let s: Self =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if s.format != FORMAT {
            return Err(format!(
                "{}: format {} not supported (expected {FORMAT})",
                path.display(),
                s.format
            ));
        }
        Ok(s)
    }

    /// The engine's kind of node `i` (`empty`, `slotted`, `pool`) from the
    /// layout snapshot, when published.
    fn node_kind(&self, i: usize) -> Option<String> {
        let kind = self.layout.as_ref()?.get("nodes")?.get(i)?.get("kind")?;
        Some(
            kind.as_str()
                .map(str::to_lowercase)
                .unwrap_or_else(|| kind.to_string()),
        )
    }

    /// The per-node picture `compass status` prints. `now_unix` gives the age.
    pub fn render(&self, now_unix: u64) -> String {
        let mut out = String::new();
        let age = now_unix.saturating_sub(self.updated_unix);
        let size = if self.gpus_per_node > 0 {
            format!("{} GPUs", self.gpus_per_node)
        } else {
            format!("{} pools", self.pools.len())
        };
        out.push_str(&format!(
            "compass: {} nodes x {size}, {} partial, N*SIF {:.0} (SIF {:.3}, Phi* {}), divergences {}, migrations done {}, updated {} ago\n",
            self.nodes.len(),
            self.partial_nodes,
            self.n_sif,
            self.sif,
            self.phi_star,
            self.divergences,
            self.migrations_done,
            crate::duration::format(age)
        ));
        if !self.engine_active {
            out.push_str(&format!(
                "engine inactive (plain cons_tres){}\n",
                self.engine_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
        if self.pools.len() > 1 || self.gpus_per_node == 0 {
            for p in &self.pools {
                let frag = match (p.n_sif, p.phi_star) {
                    (Some(n), Some(f)) => format!(
                        "N*SIF {n:.0} (Phi* {f}{})",
                        if p.wcc == Some(true) {
                            ", WCC holds"
                        } else {
                            ""
                        }
                    ),
                    _ => "pass-through (cons_tres places here)".to_string(),
                };
                out.push_str(&format!(
                    "pool {}: {} nodes, {}/{} GPUs used, {} partial, {frag}\n",
                    p.name,
                    p.nodes,
                    p.used_gpus,
                    u64::from(p.nodes) * u64::from(p.gpus_per_node),
                    p.partial_nodes
                ));
            }
        }
        let width = self.nodes.iter().map(|n| n.name.len()).max().unwrap_or(0);
        for (i, n) in self.nodes.iter().enumerate() {
            let bar: String = (0..n.capacity)
                .map(|i| if i < n.used_gpus { '#' } else { '.' })
                .collect();
            let jobs: Vec<String> = n.jobs.iter().map(|(j, g)| format!("{j}:{g}")).collect();
            out.push_str(&format!(
                "{:width$} {:8} [{bar}] {}/{}  {}\n",
                n.name,
                self.node_kind(i).unwrap_or_default(),
                n.used_gpus,
                n.capacity,
                jobs.join(" "),
                width = width
            ));
        }
        if !self.kept_still.is_empty() {
            let why: Vec<String> = self
                .kept_still
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            out.push_str(&format!("kept still: {}\n", why.join(", ")));
        }
        for m in &self.pending_migrations {
            out.push_str(&format!(
                "pending migration: job {} -> {}\n",
                m.job,
                m.to_nodes.join(",")
            ));
        }
        out
    }
}

/// Writes a JSON document to `path` atomically (temporary file, fsync,
/// rename), so a reader never sees a partial document; `write` serialises
/// into the file.
pub fn write_json_atomic(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> serde_json::Result<()>,
) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    write(&mut f).map_err(std::io::Error::other)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PublishedState {
        PublishedState {
            format: FORMAT,
            updated_unix: 100,
            engine_active: true,
            gpus_per_node: 8,
            nodes: vec![
                NodeView {
                    name: "n1".into(),
                    capacity: 8,
                    used_gpus: 5,
                    jobs: vec![(3, 4), (4, 1)],
                },
                NodeView {
                    name: "n10".into(),
                    capacity: 8,
                    used_gpus: 0,
                    jobs: vec![],
                },
            ],
            partial_nodes: 1,
            n_sif: 0.0,
            phi_star: 1,
            layout: Some(serde_json::json!({"nodes": [{"kind": "Slotted"}, {"kind": "Empty"}]})),
            pending_migrations: vec![PendingMigration {
                job: 4,
                to_nodes: vec!["n10".into()],
            }],
            kept_still: [("ends-soon".to_string(), 2), ("protected".to_string(), 1)]
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn render_shows_each_node_and_migrations() {
        let text = sample().render(103);
        assert!(text.contains("2 nodes x 8 GPUs, 1 partial"), "{text}");
        assert!(text.contains("updated 0:00:03 ago"), "{text}");
        assert!(
            text.contains("n1  slotted  [#####...] 5/8  3:4 4:1"),
            "{text}"
        );
        assert!(text.contains("n10 empty    [........] 0/8"), "{text}");
        assert!(text.contains("pending migration: job 4 -> n10"), "{text}");
        assert!(
            text.contains("kept still: ends-soon 2, protected 1"),
            "{text}"
        );
    }

    #[test]
    fn render_lists_pools_on_a_mixed_cluster() {
        let mut st = sample();
        st.gpus_per_node = 0;
        st.pools = vec![
            PoolView {
                name: "8xa100".into(),
                gpus_per_node: 8,
                gpu_type: Some("a100".into()),
                nodes: 2,
                node_names: vec!["n1".into(), "n10".into()],
                modelled: true,
                used_gpus: 5,
                partial_nodes: 1,
                phi_star: Some(1),
                n_sif: Some(0.0),
                wcc: Some(true),
            },
            PoolView {
                name: "6xh100".into(),
                gpus_per_node: 6,
                nodes: 1,
                ..Default::default()
            },
        ];
        let text = st.render(100);
        assert!(text.contains("2 nodes x 2 pools"), "{text}");
        assert!(
            text.contains(
                "pool 8xa100: 2 nodes, 5/16 GPUs used, 1 partial, N*SIF 0 (Phi* 1, WCC holds)"
            ),
            "{text}"
        );
        assert!(
            text.contains("pool 6xh100: 1 nodes, 0/6 GPUs used, 0 partial, pass-through"),
            "{text}"
        );
    }

    #[test]
    fn pass_through_pools_publish_no_fragmentation_figures() {
        let p = PoolView {
            name: "6xh100".into(),
            gpus_per_node: 6,
            nodes: 2,
            ..Default::default()
        };
        let v = serde_json::to_value(&p).unwrap();
        // absent, not null: readers that take a number keep their default
        for key in ["phi_star", "n_sif", "wcc"] {
            assert!(v.get(key).is_none(), "{key} in {v}");
        }
        assert_eq!(serde_json::from_value::<PoolView>(v).unwrap(), p);
    }

    #[test]
    fn files_from_before_pools_still_load() {
        let mut v = serde_json::to_value(sample()).unwrap();
        v.as_object_mut().unwrap().remove("pools");
        let old: PublishedState = serde_json::from_value(v).unwrap();
        assert!(old.pools.is_empty());
    }

    #[test]
    fn atomic_write_round_trips() {
        let dir = std::env::temp_dir().join(format!("compass-state-test-{}", std::process::id()));
        let path = dir.join("state.json");
        sample().write_atomic(&path).unwrap();
        assert_eq!(PublishedState::read(&path).unwrap(), sample());
        let mut bad = sample();
        bad.format = 99;
        bad.write_atomic(&path).unwrap();
        assert!(PublishedState::read(&path)
            .unwrap_err()
            .contains("format 99"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
