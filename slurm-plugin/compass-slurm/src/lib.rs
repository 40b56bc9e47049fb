//! Pure Rust logic shared by the compass Slurm plugins, the `compass status`
//! CLI and the budget service. Nothing here touches Slurm: the plugins
//! (`slurm-plugin/spank`, `slurm-plugin/select`) feed it strings and numbers
//! read from Slurm and act on its answers, so all of it is unit tested
//! without daemons.
//!
//! - [`duration`]: `--min-runtime` values (Slurm time formats plus `30m`/`4h`).
//! - [`config`]: the site config file (`etc/compass.conf`).
//! - [`flags`]: how min-runtime/resumable travel with a job (SPANK job
//!   control env, `AdminComment`).
//! - [`shape`]: mapping a Slurm GPU request onto the `w x g` model.
//! - [`state`]: the live state the select plugin publishes.
//! - [`persist`]: what the select plugin keeps across reconfigure and restart.
//! - [`restriction`]: the nodes a job may ever use (partition, `--exclude`,
//!   `--constraint`), which Compact keeps it inside.
//! - [`wait`]: sleeps and polls a stop request ends promptly.

pub mod config;
pub mod controller;
pub mod duration;
pub mod error;
pub mod flags;
pub mod persist;
mod queue;
pub mod restriction;
pub mod shape;
pub mod state;
pub mod wait;

pub use error::{Error, Result};
