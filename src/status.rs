//! `compass status`: a per-node picture of the cluster and the current SIF,
//! from the live state that `select/cons_tres_compass` publishes
//! (`select.state_file` in compass.conf, atomically replaced JSON).

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use compass_slurm::config::{Config, DEFAULT_PATH};
use compass_slurm::state::PublishedState;

use crate::error::{CliError, Result};

/// Show the placement state published by the select plugin.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// compass.conf to find the state file in (`select.state_file`).
    #[arg(long, default_value = DEFAULT_PATH)]
    pub config: PathBuf,
    /// Read this state file instead of the one named in the config.
    #[arg(long)]
    pub state_file: Option<PathBuf>,
    /// Print the published JSON as it is (node types, slots, anchors,
    /// fillers, pool, pending migrations, per-job flags).
    #[arg(long)]
    pub json: bool,
}

/// Prints the state.
pub fn run(args: Args) -> Result<()> {
    print!("{}", render(&args)?);
    Ok(())
}

fn render(args: &Args) -> Result<String> {
    let path = match &args.state_file {
        Some(p) => p.clone(),
        None => PathBuf::from(
            Config::load(&args.config)
                .map_err(|e| CliError::Failed(e.to_string()))?
                .select
                .state_file,
        ),
    };
    let state = PublishedState::read(&path).map_err(|e| {
        CliError::Failed(format!(
            "{e} (is select/cons_tres_compass loaded in slurmctld?)"
        ))
    })?;
    if args.json {
        return serde_json::to_string_pretty(&state)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Failed(e.to_string()));
    }
    check_bars(&state, &path)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(state.render(now))
}

/// The most GPUs of a node the text view draws: its bar has one character
/// per GPU (`[###.....]`). Far above any real node; a state file claiming
/// more is damaged (4e9 GPUs made a 4 GB bar).
pub const MAX_DRAWN_GPUS: u32 = 1024;

/// Refuses to draw a state with a node larger than [`MAX_DRAWN_GPUS`],
/// naming the file, the node and the limit (`--json` still prints it).
fn check_bars(state: &PublishedState, path: &std::path::Path) -> Result<()> {
    match state.nodes.iter().find(|n| n.capacity > MAX_DRAWN_GPUS) {
        Some(n) => Err(CliError::Failed(format!(
            "{}: node `{}` has {} GPUs, more than the {MAX_DRAWN_GPUS} `compass status` draws \
             (is the state file damaged? `--json` prints it as it is)",
            path.display(),
            n.name,
            n.capacity
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use compass_slurm::state::{NodeView, FORMAT};

    #[test]
    fn renders_the_state_file_named_in_the_config() {
        let dir = std::env::temp_dir().join(format!("compass-status-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let state_path = dir.join("state.json");
        let conf = dir.join("compass.conf");
        std::fs::write(
            &conf,
            format!("[select]\nstate_file = \"{}\"\n", state_path.display()),
        )
        .unwrap();
        let state = PublishedState {
            format: FORMAT,
            engine_active: true,
            gpus_per_node: 8,
            nodes: vec![NodeView {
                name: "n1".into(),
                capacity: 8,
                used_gpus: 3,
                jobs: vec![(9, 3)],
            }],
            partial_nodes: 1,
            ..Default::default()
        };
        state.write_atomic(&state_path).unwrap();
        let args = Args {
            config: conf.clone(),
            state_file: None,
            json: false,
        };
        let text = render(&args).unwrap();
        assert!(text.contains("n1          [###.....] 3/8  9:3"), "{text}");
        let json = render(&Args { json: true, ..args }).unwrap();
        assert!(json.contains("\"used_gpus\": 3"), "{json}");
        let missing = Args {
            config: conf,
            state_file: Some(dir.join("nope.json")),
            json: false,
        };
        let err = render(&missing).unwrap_err().to_string();
        assert!(
            err.contains("nope.json") && err.contains("select/cons_tres_compass"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A node of 4e9 GPUs (a damaged state file) made a bar of 4 GB: the
    /// text view refuses nodes of more than MAX_DRAWN_GPUS, naming the
    /// node; `--json` still prints the file.
    #[test]
    fn nodes_too_large_to_draw_are_refused() {
        let dir = std::env::temp_dir().join(format!("compass-status-bars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let state_path = dir.join("state.json");
        let node = |name: &str, capacity: u32| NodeView {
            name: name.into(),
            capacity,
            used_gpus: 1,
            jobs: vec![(9, 1)],
        };
        let mut state = PublishedState {
            format: FORMAT,
            engine_active: true,
            gpus_per_node: 8,
            nodes: vec![node("n1", 8), node("huge", 4_000_000_000)],
            ..Default::default()
        };
        state.write_atomic(&state_path).unwrap();
        let args = Args {
            config: dir.join("unused.conf"),
            state_file: Some(state_path.clone()),
            json: false,
        };
        let err = render(&args).unwrap_err().to_string();
        assert!(
            err.contains("state.json")
                && err.contains("node `huge` has 4000000000 GPUs")
                && err.contains("1024"),
            "{err}"
        );
        let json = render(&Args { json: true, ..args }).unwrap();
        assert!(json.contains("4000000000"), "{json}");
        // The limit itself is drawn.
        state.nodes[1].capacity = MAX_DRAWN_GPUS;
        state.write_atomic(&state_path).unwrap();
        let text = render(&Args {
            config: dir.join("unused.conf"),
            state_file: Some(state_path),
            json: false,
        })
        .unwrap();
        assert!(text.contains(&format!("1/{MAX_DRAWN_GPUS}")), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
