//! What the select plugin keeps across `scontrol reconfigure` and slurmctld
//! restarts: the cool-downs of recently migrated jobs and the migrations in
//! flight (requeued, pinned to their target, not yet restarted). Without
//! them a rebuild would move the same jobs again at once.
//!
//! On reconfigure the plugin carries them over in memory; for a restart the
//! plugin thread writes them to [`FILE_NAME`] in Slurm's
//! `StateSaveLocation` (atomically, off Slurm's locks, when they change) and
//! `select_p_state_restore` reads them back.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// File name inside `StateSaveLocation`.
pub const FILE_NAME: &str = "compass_select_state.json";
/// Version of the file format.
pub const FORMAT: u32 = 1;

/// The state that survives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    pub format: u32,
    /// `(job id, unix time its last migration restarted it)`, only entries
    /// still inside the cool-down.
    pub last_migrated: Vec<(u64, u64)>,
    /// Migrations requeued and not yet restarted.
    pub in_flight: Vec<SavedMigration>,
    /// The runs of the GPU jobs that ended lately, seconds, the oldest
    /// first (`select.move_when = "pays"` estimates remaining runs from
    /// them). Absent in files of earlier versions.
    #[serde(default)]
    pub runs: Vec<u64>,
    /// Nodes kept for waiting jobs (`Controller::keep_for_waiting`), by
    /// name; restored with a fresh `WAITING_TTL_S` (their last test is not
    /// kept: it changes at every test, and the file would be rewritten at
    /// every round).
    #[serde(default)]
    pub kept: Vec<(u64, Vec<String>)>,
    /// Migrated jobs whose priority the select plugin's thread raised to
    /// the top until they restart: after a restart of slurmctld the thread
    /// still gives each its computed priority and nice back. Absent in
    /// files of earlier versions.
    #[serde(default)]
    pub raised: Vec<SavedRaised>,
}

/// A migrated job at the top of the queue until it restarts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedRaised {
    pub job: u64,
    /// Unix time its priority was raised.
    pub since: u64,
    /// The nice it had (Slurm's stored form, `NICE_OFFSET` for 0).
    pub nice: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedMigration {
    pub job: u64,
    /// Node names of the target, one per instance.
    pub to_nodes: Vec<String>,
    /// Unix time the order was handed out (its pin expires from there).
    pub since: u64,
    /// `(instances, GPUs per instance)` when in the model.
    pub shape: Option<(u32, u32)>,
}

impl Saved {
    /// Nothing to keep.
    pub fn is_empty(&self) -> bool {
        self.last_migrated.is_empty()
            && self.in_flight.is_empty()
            && self.runs.is_empty()
            && self.kept.is_empty()
            && self.raised.is_empty()
    }

    /// Writes `path` atomically (temporary file, fsync, rename).
    pub fn write_atomic(&self, path: &Path) -> std::io::Result<()> {
        crate::state::write_json_atomic(path, |f| serde_json::to_writer(f, self))
    }

    /// Reads `path`; a missing file is `Ok(None)` (first start).
    pub fn read(path: &Path) -> Result<Option<Self>, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let s: Self =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if s.format != FORMAT {
            return Err(format!(
                "{}: format {} not supported (expected {FORMAT})",
                path.display(),
                s.format
            ));
        }
        Ok(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_file() {
        let dir = std::env::temp_dir().join(format!("compass-persist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE_NAME);
        assert_eq!(Saved::read(&path), Ok(None), "first start: no file");
        let s = Saved {
            format: FORMAT,
            last_migrated: vec![(7, 1000)],
            in_flight: vec![SavedMigration {
                job: 9,
                to_nodes: vec!["n2".into()],
                since: 990,
                shape: Some((1, 4)),
            }],
            runs: vec![30, 7200],
            kept: vec![(11, vec!["n3".into()])],
            raised: vec![SavedRaised {
                job: 12,
                since: 995,
                nice: 0x8000_0000,
            }],
        };
        s.write_atomic(&path).unwrap();
        assert_eq!(Saved::read(&path), Ok(Some(s)));
        std::fs::write(&path, "{not json").unwrap();
        assert!(Saved::read(&path).unwrap_err().contains(FILE_NAME));
        // A file of an earlier version, without runs.
        std::fs::write(&path, r#"{"format":1,"last_migrated":[],"in_flight":[]}"#).unwrap();
        assert_eq!(Saved::read(&path).unwrap().unwrap().runs, Vec::<u64>::new());
        assert!(Saved::read(&path).unwrap().unwrap().kept.is_empty());
        assert!(Saved::read(&path).unwrap().unwrap().raised.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
