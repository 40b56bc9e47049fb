//! Slurm's logger (`slurm_info`, `slurm_error`, ... from libslurmfull,
//! resolved in the loading process). Lines are prefixed `compass: `.

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
    let m = c(msg);
    // SAFETY: as above.
    unsafe { sys::slurm_verbose(c"%s".as_ptr(), m.as_ptr()) }
}
