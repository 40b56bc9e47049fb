//! Slurm's logger (`slurm_info`, `slurm_error`, ... from libslurmfull,
//! resolved in the loading process). Lines are prefixed `compass: `.
//!
//! The detailed lines ([`detail`]: each job_test decision, several per job
//! and scheduling pass) follow Slurm's own `log_flag(SELECT_TYPE,
//! ...)`: written only while `DebugFlags` has `SelectType` (slurm.conf, or
//! `scontrol setdebugflags +SelectType` at run time), at `verbose` level,
//! prefixed `SelectType: `. Slurm 22.05 and 24.11 have no flag bit of their
//! own for third-party plugins. As that flag also turns on cons_tres's own,
//! far more numerous lines, `select.log_decisions = true` in compass.conf
//! writes ours alone (as `compass: ...`): the labs and the demo use it.

use std::ffi::CString;

use slurm_sys as sys;

fn c(msg: &str) -> CString {
    CString::new(format!("compass: {}", msg.replace('\0', " "))).unwrap_or_default()
}

pub fn info(msg: &str) {
    let m = c(msg);
    // SAFETY: "%s" with a valid C string.
    unsafe { sys::slurm_info(c"%s".as_ptr(), m.as_ptr()) }
}

pub fn error(msg: &str) {
    let m = c(msg);
    // SAFETY: as above.
    unsafe { sys::slurm_error(c"%s".as_ptr(), m.as_ptr()) }
}

pub fn verbose(msg: &str) {
    verbose_raw(&format!("compass: {msg}"));
}

/// `DEBUG_FLAG_SELECT_TYPE` of slurm.h (`SLURM_BIT(0)` in 22.05 and
/// 24.11; bindgen cannot expand the macro).
pub const DEBUG_FLAG_SELECT_TYPE: u64 = 1 << 0;

/// Is `DebugFlags=SelectType` set now? Read on every call, so `scontrol
/// setdebugflags` takes effect at once.
pub fn select_type_flag() -> bool {
    // SAFETY: `slurm_conf` is libslurmfull's configuration, initialised
    // before any plugin is loaded; a u64 read of its flags (Slurm's own
    // `log_flag` reads it the same way, without a lock).
    let flags = unsafe { (*std::ptr::addr_of!(sys::slurm_conf)).debug_flags };
    flags & DEBUG_FLAG_SELECT_TYPE != 0
}

/// A detailed line: with `DebugFlags=SelectType` at verbose level as
/// `SelectType: compass: ...` (Slurm's `log_flag` form); else, with
/// `select.log_decisions = true` in compass.conf, as `compass: ...`; else
/// not at all.
pub fn detail(msg: &str) {
    if select_type_flag() {
        verbose_raw(&format!("SelectType: compass: {msg}"));
    } else if crate::PLUGIN
        .get()
        .is_some_and(|p| p.config.select.log_decisions)
    {
        verbose(msg);
    }
}

fn verbose_raw(msg: &str) {
    let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: "%s" with a valid C string.
    unsafe { sys::slurm_verbose(c"%s".as_ptr(), m.as_ptr()) }
}
