//! SPANK plugin `compass` (load it from plugstack.conf:
//! `required /usr/lib/x86_64-linux-gnu/slurm-wlm-compass/compass_spank.so conf=/etc/slurm/compass.conf`).
//!
//! Adds `--min-runtime=DURATION` and `--resumable[=COST]` to sbatch, srun and
//! salloc. Values are validated at submit
//! ([`compass_slurm::config::Config::min_runtime`]: format and site cap;
//! [`compass_slurm::config::Config::migration_cost`]; one-line errors),
//! defaulted from the config file, and stored with the job through
//! `spank_job_control_setenv` as `COMPASS_MIN_RUNTIME` (seconds),
//! `COMPASS_RESUMABLE` (0/1) and, when the job names its migration cost,
//! `COMPASS_MIGRATION_COST` (seconds) ([`compass_slurm::flags`]). slurmctld keeps them in the job's
//! `spank_job_env` (saved state: they survive requeue and restart), where the
//! select plugin reads them; `etc/job_submit.lua` copies them into
//! `AdminComment` for the public API.
//!
//! The options are registered at run time with `spank_option_register` in
//! every context: sbatch and salloc ignore a static `spank_options` table.
//!
//! The plugin is loaded `required`, so a failure here would fail every
//! sbatch and every job step. A bad config file therefore never fails the
//! plugin: unknown sections and keys are ignored with a warning (logged once
//! at slurmd start; `sbatch -v` shows them too), and a file that cannot be
//! read or parsed only makes `--min-runtime` and `--resumable` fail at
//! submit, with the reason; jobs that use neither submit and run as usual
//! (without compass's site defaults), and job steps are never failed.

use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::catch_unwind;
use std::path::Path;
use std::sync::Mutex;

use compass_slurm::config::{Config, DEFAULT_PATH};
use compass_slurm::flags::{ENV_MIGRATION_COST, ENV_MIN_RUNTIME, ENV_RESUMABLE};
use slurm_sys as sys;

#[no_mangle]
#[used]
pub static plugin_name: [u8; 8] = *b"compass\0";
#[no_mangle]
#[used]
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
#[used]
pub static plugin_version: u32 = sys::VERSION_NUMBER;
#[no_mangle]
#[used]
pub static spank_plugin_version: u32 = 1;

const OPT_MIN_RUNTIME: c_int = 1;
const OPT_RESUMABLE: c_int = 2;

/// Per-process state of the plugin (one submit, or one step).
struct State {
    /// The site config, or why it is unusable (a message naming the file).
    config: std::result::Result<Config, String>,
    /// Config warnings for `-v`, logged in `slurm_spank_init_post_opt`.
    warnings: Vec<String>,
    config_path: String,
    min_runtime_s: Option<u64>,
    resumable: bool,
    /// `--resumable=COST`, seconds.
    migration_cost_s: Option<u64>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn log_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: format string and argument are valid NUL-terminated strings.
    unsafe { sys::slurm_error(c"%s".as_ptr(), c.as_ptr()) };
}

fn log_info(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: as above.
    unsafe { sys::slurm_info(c"%s".as_ptr(), c.as_ptr()) };
}

fn log_verbose(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: as above.
    unsafe { sys::slurm_verbose(c"%s".as_ptr(), c.as_ptr()) };
}

fn log_debug(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: as above.
    unsafe { sys::slurm_debug(c"%s".as_ptr(), c.as_ptr()) };
}

/// Runs `f`, turning a panic into a SPANK error (never unwinds into C).
fn guarded(what: &str, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(_) => {
            log_error(&format!("compass: internal error in {what}"));
            -1
        }
    }
}

fn leak(s: &str) -> *mut c_char {
    CString::new(s)
        .expect("static option text has no NUL")
        .into_raw()
}

/// Plugin arguments from plugstack.conf: `conf=PATH`.
///
/// # Safety
/// `av` must point at `ac` valid C strings (as SPANK passes them).
unsafe fn config_path(ac: c_int, av: *mut *mut c_char) -> String {
    let mut path = DEFAULT_PATH.to_string();
    for i in 0..usize::try_from(ac).unwrap_or(0) {
        // SAFETY: caller guarantees av has ac entries.
        let arg = unsafe { *av.add(i) };
        if arg.is_null() {
            continue;
        }
        // SAFETY: non-null C string from Slurm.
        let arg = unsafe { CStr::from_ptr(arg) }.to_string_lossy();
        if let Some(p) = arg.strip_prefix("conf=") {
            path = p.to_string();
        } else {
            log_error(&format!(
                "compass: unknown plugstack.conf argument `{arg}` (expected conf=PATH)"
            ));
        }
    }
    path
}

/// # Safety
/// Called by Slurm with a valid `spank_t` and `ac`/`av` plugin arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    guarded("slurm_spank_init", || {
        if let Err(e) = sys::check_running_release() {
            log_error(&format!("compass: {e}"));
            return -1;
        }
        // SAFETY: forwarded from Slurm.
        let path = unsafe { config_path(ac, av) };
        // SAFETY: plain query.
        let ctx = unsafe { sys::spank_context() };
        // slurmd runs this once at its start: the place to tell the admin.
        // Elsewhere (every submit, every step) only at verbose/debug level;
        // sbatch/srun/salloc raise their level (-v) after this call, so
        // their warnings wait for slurm_spank_init_post_opt.
        let mut deferred = Vec::new();
        let mut warn = |msg: &str| match ctx {
            sys::spank_context_S_CTX_SLURMD => log_info(msg),
            sys::spank_context_S_CTX_ALLOCATOR | sys::spank_context_S_CTX_LOCAL => {
                deferred.push(msg.to_string())
            }
            _ => log_debug(msg),
        };
        let config = match Config::load_with_warnings(Path::new(&path)) {
            Ok((c, warnings)) => {
                for w in warnings {
                    warn(&format!("compass: {w}"));
                }
                Ok(c)
            }
            Err(e) => {
                let msg = format!("compass: {e}");
                if ctx == sys::spank_context_S_CTX_SLURMD {
                    log_error(&format!(
                        "{msg}; --min-runtime and --resumable are refused until it is fixed, other jobs and steps run normally"
                    ));
                } else {
                    warn(&msg);
                }
                Err(e.to_string())
            }
        };
        let (cap, default_cost) = match &config {
            Ok(c) => (
                compass_slurm::duration::format(c.spank.max_min_runtime_s),
                compass_slurm::duration::format(c.select.migration_cost_s),
            ),
            Err(_) => ("unknown: config unusable".into(), "unknown".into()),
        };
        *STATE.lock().unwrap_or_else(|p| p.into_inner()) = Some(State {
            config,
            warnings: deferred,
            config_path: path,
            min_runtime_s: None,
            resumable: false,
            migration_cost_s: None,
        });
        let opts = [
            sys::spank_option {
                name: leak("min-runtime"),
                arginfo: leak("DURATION"),
                usage: leak(&format!(
                    "Protected run time: never preempted or migrated before it (90 = minutes, 4:00:00, 1-0, 30m, 4h; 0 = none; site cap {cap})"
                )),
                has_arg: 1,
                val: OPT_MIN_RUNTIME,
                cb: Some(option_cb),
            },
            sys::spank_option {
                name: leak("resumable"),
                arginfo: leak("COST"),
                usage: leak(&format!(
                    "The job restarts from its own checkpoint: the scheduler may requeue it to defragment GPUs. COST (optional, --resumable=5m): what one requeue and restart costs the job; it is moved only when its time limit leaves enough run to earn that back (default {default_cost})"
                )),
                // optional argument: `--resumable` or `--resumable=COST`
                has_arg: 2,
                val: OPT_RESUMABLE,
                cb: Some(option_cb),
            },
        ];
        for opt in opts {
            // Slurm keeps the pointer: leak the option for the process lifetime.
            let opt = Box::leak(Box::new(opt));
            // SAFETY: sp from Slurm, opt valid forever.
            let rc = unsafe { sys::spank_option_register(sp, opt) };
            if rc != sys::ESPANK_SUCCESS as sys::spank_err_t {
                log_error(&format!("compass: spank_option_register failed ({rc})"));
                return -1;
            }
        }
        0
    })
}

/// What an option given without a value reaches the job as: sbatch
/// exports it as `SLURM_SPANK__SLURM_SPANK_OPTION_compass_resumable=(null)`
/// (`spank_set_job_env` appends a NULL value as that text), and an `sbatch`
/// run inside the job hands it to the callback. It means no value; before,
/// it was refused as a migration cost, and a job could not submit another
/// (a checkpoint chain resubmitting itself).
const NULL_TEXT: &str = "(null)";

unsafe extern "C" fn option_cb(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    guarded("option callback", || {
        let mut guard = STATE.lock().unwrap_or_else(|p| p.into_inner());
        let Some(state) = guard.as_mut() else {
            return -1;
        };
        let arg = if optarg.is_null() {
            None
        } else {
            // SAFETY: option argument from Slurm.
            Some(
                unsafe { CStr::from_ptr(optarg) }
                    .to_string_lossy()
                    .into_owned(),
            )
        }
        .filter(|a| a != NULL_TEXT);
        // The job was accepted at submit when the option reaches a step:
        // in the remote context, or in srun inside the job's allocation (it
        // inherits the option through SLURM_SPANK_* variables). A config
        // changed or broken since must not fail its steps.
        // SAFETY: plain query.
        let step_of_a_job = remote != 0
            || (unsafe { sys::spank_context() } == sys::spank_context_S_CTX_LOCAL
                && std::env::var_os("SLURM_JOB_ID").is_some());
        let config = match &state.config {
            Ok(c) => c,
            Err(why) => {
                if step_of_a_job {
                    log_debug(&format!(
                        "compass: {why} (ignored in a step of an accepted job)"
                    ));
                    return 0;
                }
                let option = if val == OPT_MIN_RUNTIME {
                    "--min-runtime"
                } else {
                    "--resumable"
                };
                log_error(&format!(
                    "compass: {option} cannot be used: the site config is unusable ({why}); submit without it or ask your administrator"
                ));
                return -1;
            }
        };
        match val {
            OPT_MIN_RUNTIME => {
                let arg = arg.unwrap_or_default();
                match config.min_runtime("--min-runtime", &arg, &state.config_path) {
                    Ok(s) => state.min_runtime_s = Some(s),
                    Err(e) => {
                        // Accepted at submit; a changed config must not
                        // kill the step.
                        if step_of_a_job {
                            log_debug(&format!("compass: {e}"));
                            return 0;
                        }
                        log_error(&e.to_string());
                        return -1;
                    }
                }
            }
            OPT_RESUMABLE => {
                state.resumable = true;
                if let Some(arg) = arg.filter(|a| !a.is_empty()) {
                    match config.migration_cost("--resumable", &arg) {
                        Ok(s) => state.migration_cost_s = Some(s),
                        Err(e) => {
                            if step_of_a_job {
                                log_debug(&format!("compass: {e}"));
                                return 0;
                            }
                            log_error(&e.to_string());
                            return -1;
                        }
                    }
                }
            }
            _ => {}
        }
        0
    })
}

/// Stores the (defaulted) values with the job, in allocator and local context.
///
/// # Safety
/// Called by Slurm with a valid `spank_t`.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init_post_opt(
    sp: sys::spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guarded("slurm_spank_init_post_opt", || {
        // SAFETY: plain query.
        let ctx = unsafe { sys::spank_context() };
        if ctx != sys::spank_context_S_CTX_ALLOCATOR && ctx != sys::spank_context_S_CTX_LOCAL {
            return 0;
        }
        let guard = STATE.lock().unwrap_or_else(|p| p.into_inner());
        let Some(state) = guard.as_ref() else {
            return -1;
        };
        for w in &state.warnings {
            log_verbose(w);
        }
        // Unusable config: the job uses neither option (or the callback
        // refused it already): it goes on without compass's values.
        let Ok(config) = &state.config else {
            return 0;
        };
        let min = state
            .min_runtime_s
            .unwrap_or(config.spank.default_min_runtime_s);
        let resumable = state.resumable || config.spank.default_resumable;
        let mut vars = vec![
            (ENV_MIN_RUNTIME, min.to_string()),
            (ENV_RESUMABLE, u8::from(resumable).to_string()),
        ];
        if let Some(cost) = state.migration_cost_s {
            vars.push((ENV_MIGRATION_COST, cost.to_string()));
        }
        for (name, value) in vars {
            let (n, v) = (
                CString::new(name).unwrap_or_default(),
                CString::new(value).unwrap_or_default(),
            );
            // SAFETY: sp from Slurm, NUL-terminated strings.
            let rc = unsafe { sys::spank_job_control_setenv(sp, n.as_ptr(), v.as_ptr(), 1) };
            if rc != sys::ESPANK_SUCCESS as sys::spank_err_t {
                log_error(&format!(
                    "compass: cannot store {name} with the job (spank error {rc})"
                ));
                return -1;
            }
        }
        0
    })
}
