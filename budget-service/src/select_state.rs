//! The select plugin's published state (`select.state_file` of
//! compass.conf, `select_state_file` here), read for `/metrics`.
//!
//! The plugin rewrites the file atomically every few seconds from a thread
//! of slurmctld. The service reads it on a thread of its own
//! ([`spawn_reader`]), never on the runtime's async threads, so a slow or
//! hung file system stalls no request; `/metrics` exports what the last
//! read found, with its age. A missing or unreadable file is tolerated
//! (`compass_select_state_up 0`, the error logged once per change).
//!
//! Only the figures `/metrics` needs are parsed, each with a default, and
//! unknown fields are ignored, so the plugin may add fields freely. A
//! `pools` array (per pool: `name`, `gpus_per_node`, `gpu_type`, `nodes`,
//! `partial_nodes`, `n_sif`) gives per-pool figures; without it the whole
//! cluster is one pool.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::state::AppState;

/// The file format this reader understands (`format` in the file).
pub const FORMAT: u32 = 1;

/// How often the reader thread reads the file.
pub const READ_EVERY: Duration = Duration::from_secs(5);

/// The figures of the state file that `/metrics` exports.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct SelectFigures {
    pub format: u32,
    pub updated_unix: u64,
    pub engine_active: bool,
    pub engine_errors: u64,
    pub gpus_per_node: u32,
    pub nodes: Vec<NodeFigures>,
    pub partial_nodes: u32,
    pub n_sif: f64,
    pub divergences: u64,
    pub pending_migrations: Vec<serde_json::Value>,
    pub migrations_done: u64,
    pub migrations_failed: u64,
    pub kept_still: BTreeMap<String, u64>,
    pub job_test: JobTestFigures,
    /// Per-pool figures, when the plugin publishes them.
    pub pools: Option<Vec<PoolFigures>>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct NodeFigures {
    pub capacity: u32,
    pub used_gpus: u32,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct JobTestFigures {
    pub calls: u64,
    pub engine_ns: u64,
    pub stock_ns: u64,
}

/// One pool (nodes of one GPU count and type).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct PoolFigures {
    pub name: String,
    pub gpus_per_node: u32,
    pub gpu_type: Option<String>,
    pub nodes: u32,
    pub partial_nodes: u32,
    pub n_sif: f64,
}

impl SelectFigures {
    /// Parses the file's text; a format other than [`FORMAT`] is an error.
    pub fn parse(text: &str) -> Result<Self, String> {
        let s: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if s.format != FORMAT {
            return Err(format!(
                "format {} not supported (expected {FORMAT})",
                s.format
            ));
        }
        Ok(s)
    }

    /// The pools: the published `pools`, else the whole cluster as one pool
    /// named by [`crate::metrics::pool_name`] (untyped GPUs).
    pub fn pools(&self) -> Vec<PoolFigures> {
        if let Some(p) = &self.pools {
            return p
                .iter()
                .map(|p| PoolFigures {
                    name: if p.name.is_empty() {
                        crate::metrics::pool_name(p.gpus_per_node, p.gpu_type.as_deref())
                    } else {
                        p.name.clone()
                    },
                    ..p.clone()
                })
                .collect();
        }
        vec![PoolFigures {
            name: crate::metrics::pool_name(self.gpus_per_node, None),
            gpus_per_node: self.gpus_per_node,
            gpu_type: None,
            nodes: self.nodes.len() as u32,
            partial_nodes: self.partial_nodes,
            n_sif: self.n_sif,
        }]
    }
}

/// What the last read found.
#[derive(Clone, Debug, Default)]
pub struct SelectRead {
    /// The parsed state; `None` when the last read failed (or none ran yet).
    pub state: Option<SelectFigures>,
    /// Why the last read failed.
    pub error: Option<String>,
}

/// Reads and parses the file at `path`.
pub fn read(path: &Path) -> SelectRead {
    let res = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| SelectFigures::parse(&t));
    match res {
        Ok(s) => SelectRead {
            state: Some(s),
            error: None,
        },
        Err(e) => SelectRead {
            state: None,
            error: Some(format!("{}: {e}", path.display())),
        },
    }
}

/// Reads the configured file once into the state (blocking: call it off the
/// async runtime). Logs a change between readable and not.
pub fn refresh(state: &AppState) {
    let Some(path) = &state.config.select_state_file else {
        return;
    };
    let new = read(path);
    let old_error = state.select_read().error;
    match (&old_error, &new.error) {
        (_, Some(e)) if old_error.as_ref() != Some(e) => {
            tracing::warn!(error = %e, "cannot read the select plugin's state file; /metrics exports compass_select_state_up 0")
        }
        (Some(_), None) => {
            tracing::info!(file = %path.display(), "select plugin's state file readable again")
        }
        _ => {}
    }
    state.set_select_read(new);
}

/// Reads the file every [`READ_EVERY`] on its own thread until `stop`.
pub fn spawn_reader(state: Arc<AppState>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            refresh(&state);
            let until = Instant::now() + READ_EVERY;
            while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_plugins_file_and_tolerates_unknown_fields() {
        let s = SelectFigures::parse(
            r#"{"format":1,"updated_unix":100,"engine_active":true,"gpus_per_node":8,
                "nodes":[{"name":"n1","capacity":8,"used_gpus":3,"jobs":[[1,3]]},{"name":"n2","capacity":8,"used_gpus":0,"jobs":[]}],
                "partial_nodes":1,"phi_star":0,"n_sif":1.0,"migrations_done":4,
                "kept_still":{"protected":2},"future_field":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(s.migrations_done, 4);
        assert_eq!(s.kept_still["protected"], 2);
        let pools = s.pools();
        assert_eq!(pools.len(), 1);
        assert_eq!(
            (
                pools[0].name.as_str(),
                pools[0].nodes,
                pools[0].partial_nodes,
                pools[0].n_sif
            ),
            ("8xgpu", 2, 1, 1.0)
        );
        let s = SelectFigures::parse(
            r#"{"format":1,"pools":[{"name":"a100","gpus_per_node":8,"gpu_type":"a100","nodes":4,"partial_nodes":2,"n_sif":2.0,"extra":1},
                {"gpus_per_node":4,"gpu_type":"v100","nodes":2,"partial_nodes":0,"n_sif":0.0}]}"#,
        )
        .unwrap();
        let names: Vec<String> = s.pools().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["a100", "4xv100"]);
        assert!(SelectFigures::parse(r#"{"format":2}"#)
            .unwrap_err()
            .contains("format 2"));
        assert!(SelectFigures::parse("{").is_err());
        let missing = read(Path::new("/nonexistent/compass-state.json"));
        assert!(missing.state.is_none());
        assert!(missing
            .error
            .unwrap()
            .contains("/nonexistent/compass-state.json"));
    }
}
