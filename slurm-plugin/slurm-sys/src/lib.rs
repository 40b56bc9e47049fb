//! Raw Slurm bindings, generated at build time by bindgen from the headers of
//! the machine (never committed).
//!
//! - Default: the public API of `/usr/include/slurm` (`slurm.h`,
//!   `slurm_errno.h`, `spank.h`): `slurm_load_jobs`, `slurm_load_node`,
//!   `slurm_update_job`, `slurm_requeue`, the `spank_*` calls, ...
//! - Feature `internal`: adds the slurmctld internals a select plugin needs
//!   (`job_record_t`, `node_record_t`, `bitstr_t`, `slurm_select_ops_t`,
//!   `bit_*`, `node_name2bitmap`, the Slurm logger) from the source tree
//!   prepared by `contrib/prepare-slurm-source.sh`. These structs are
//!   ABI-bound to the exact Slurm release: never load such a plugin into
//!   another release (the plugin's `plugin_version` makes Slurm refuse it).
//!
//! Linking: this crate emits no link directive. Plugins resolve the symbols
//! from the Slurm process that loads them; a standalone program using the
//! public API must link libslurm itself (`println!("cargo:rustc-link-lib=slurm")`
//! in its build script).
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// `SLURM_VERSION_NUMBER` of the headers this crate was built against, the
/// value a plugin must export as `plugin_version`.
pub const VERSION_NUMBER: u32 = SLURM_VERSION_NUMBER;

/// The release of the headers this crate was built against ("24.11.5").
pub const RELEASE: &str = env!("SLURM_SYS_RELEASE");
