//! Slurm select plugin `select/cons_tres_compass` (plugin id 109, the id of
//! cons_tres): the stock `select/cons_tres`, loaded with
//! `dlopen(RTLD_LAZY|RTLD_LOCAL)`, with every `select_p_*` call forwarded to
//! it, except that `select_p_job_test` first narrows the candidate node
//! bitmap to the nodes the COMPASS engine plans for the job (paper Section 4)
//! and `select_p_select_nodeinfo_set`/`select_p_job_fini`/`select_p_job_init` keep the
//! engine in step with what Slurm actually allocated
//! ([`compass_slurm::controller`]).
//!
//! Safety inside slurmctld: every entry point runs under `catch_unwind`; an
//! engine error is logged through Slurm's logger and the job goes to plain
//! cons_tres. The controller mutex is only held for in-memory work; requeues
//! and the state file are handled by the plugin's own thread
//! (`worker`), outside Slurm's locks.
//!
//! Runs from a private PluginDir without `select_cons_tres.so`
//! (`contrib/install-select-plugin.sh`): slurmctld loads every select plugin
//! of its PluginDir and refuses two with one id.

#[macro_use]
mod forward;
mod job;
mod log;
mod release;
mod stats;
mod worker;

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use compass_slurm::config::{Config, DEFAULT_PATH};
use compass_slurm::controller::Controller;
use slurm_sys as sys;

pub use forward::*;

#[no_mangle]
#[used]
pub static plugin_name: [u8; 49] = *b"COMPASS GPU placement over cons_tres (forwarder)\0";
#[no_mangle]
#[used]
pub static plugin_type: [u8; 25] = *b"select/cons_tres_compass\0";
/// Must equal cons_tres's id: slurmctld compares it with
/// SELECT_PLUGIN_CONS_TRES in several places.
#[no_mangle]
#[used]
pub static plugin_id: u32 = 109;
/// From the headers this was built against: another Slurm release refuses
/// to load the plugin instead of misreading `job_record_t`.
#[no_mangle]
#[used]
pub static plugin_version: u32 = sys::VERSION_NUMBER;

/// Everything the plugin holds.
pub(crate) struct Plugin {
    pub config: Config,
    pub state_file: PathBuf,
    pub ctl: Mutex<Option<Controller>>,
}

pub(crate) static PLUGIN: OnceLock<Plugin> = OnceLock::new();

pub(crate) const SLURM_SUCCESS: c_int = 0;
pub(crate) const SLURM_ERROR: c_int = -1;

fn guard<R>(what: &str, on_panic: R, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log::error(&format!(
                "{what}: internal error (panic: {msg}); using plain cons_tres"
            ));
            on_panic
        }
    }
}

/// Called by Slurm's plugin loader after dlopen.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    guard("init", SLURM_ERROR, || {
        if let Err(e) = sys::check_running_release() {
            log::error(&e);
            return SLURM_ERROR;
        }
        let path = std::env::var("COMPASS_CONF").unwrap_or_else(|_| DEFAULT_PATH.to_string());
        let config = match Config::load_with_warnings(std::path::Path::new(&path)) {
            Ok((c, warnings)) => {
                if in_slurmctld() {
                    for w in warnings {
                        log::info(&w);
                    }
                }
                c
            }
            Err(e) => {
                log::error(&format!(
                    "{e}; the compass engine is disabled (plain cons_tres)"
                ));
                let mut c = Config::default();
                c.select.enabled = false;
                // The cons_tres the admin named, even from a file that does
                // not load (the default is Debian's 22.05 one).
                c.select.stock_plugin = Config::stock_plugin_of(std::path::Path::new(&path));
                c
            }
        };
        let stock = config
            .select
            .stock_plugin
            .clone()
            .unwrap_or_else(|| format!("{}/select_cons_tres.so", sys::STOCK_PLUGIN_DIR));
        if let Err(e) = forward::load_stock(&stock) {
            log::error(&e);
            return SLURM_ERROR;
        }
        let state_file = PathBuf::from(&config.select.state_file);
        let _ = PLUGIN.set(Plugin {
            config,
            state_file,
            ctl: Mutex::new(None),
        });
        // SAFETY: stock init, loaded above.
        unsafe { (forward::stock().init)() }
    })
}

#[no_mangle]
pub extern "C" fn fini() -> c_int {
    guard("fini", SLURM_ERROR, || {
        worker::stop();
        // SAFETY: stock fini.
        unsafe { (forward::stock().fini)() }
    })
}

/// Only in slurmctld do we run the engine (slurmd and clients load select
/// plugins too, and only need the forwarding).
pub(crate) fn in_slurmctld() -> bool {
    static IS: OnceLock<bool> = OnceLock::new();
    *IS.get_or_init(|| {
        std::fs::read_to_string("/proc/self/comm")
            .map(|c| c.trim() == "slurmctld")
            .unwrap_or(false)
    })
}

pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Unused-type silencer for pointer aliases used by the macros.
#[allow(dead_code)]
type Opaque = *mut c_void;
#[allow(dead_code)]
type CStrPtr = *mut c_char;
