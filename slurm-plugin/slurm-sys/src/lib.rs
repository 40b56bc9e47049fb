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

mod release;
#[allow(unused_imports)]
pub use release::*;

/// `SLURM_VERSION_NUMBER` of the headers this crate was built against, the
/// value a plugin must export as `plugin_version`.
pub const VERSION_NUMBER: u32 = SLURM_VERSION_NUMBER;

/// The release of the headers this crate was built against ("24.11.5").
pub const RELEASE: &str = env!("SLURM_SYS_RELEASE");

/// The plugin directory of the Slurm this crate was built against:
/// Debian's `/usr/lib/x86_64-linux-gnu/slurm-wlm`, or
/// `$COMPASS_SLURM_PREFIX/lib/slurm`.
pub const STOCK_PLUGIN_DIR: &str = env!("SLURM_SYS_STOCK_DIR");

/// libslurm's API "current" of that release (`SLURM_API_VERSION >> 16`:
/// 38 for 22.05, 42 for 24.11).
pub const API_CURRENT: u32 = parse_u32(env!("SLURM_SYS_API_CURRENT"));

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

/// Checks, from inside a Slurm process (plugins only: the symbol comes
/// from the process), that the running Slurm is the release these bindings
/// were built for. Slurm itself already refuses a plugin whose
/// `plugin_version` differs (select plugins: major.minor.micro, SPANK:
/// major.minor); this is the second line of defence before any struct of
/// the process is read. `Err` is one log line naming both releases.
pub fn check_running_release() -> Result<(), String> {
    // SAFETY: no arguments; present in libslurm of every release.
    let running = unsafe { slurm_api_version() } as u64;
    let current = (running >> 16) as u32;
    if current == API_CURRENT {
        Ok(())
    } else {
        Err(format!(
            "built for Slurm {RELEASE} (API {API_CURRENT}) but the running Slurm has API {current}: \
             refusing to load; install the build for this release (docs/admin-guide.md)"
        ))
    }
}
