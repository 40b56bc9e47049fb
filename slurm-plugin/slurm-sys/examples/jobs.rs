//! Lists the jobs of the cluster in `$SLURM_CONF` through the public API
//! alone (`slurm_load_jobs`), with the compass flags from `AdminComment`:
//! what the budget service does. Shows how a standalone program links
//! libslurm: one `#[link(name = "slurm")]` block, no build script.
//!
//! ```sh
//! SLURM_CONF=/path/to/slurm.conf cargo run -p slurm-sys --example jobs
//! ```

use std::ffi::CStr;

use slurm_sys as sys;

#[link(name = "slurm")]
extern "C" {}

fn text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: NUL-terminated string owned by the job info message.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn main() {
    // SAFETY: documented libslurm calls; the message is freed below.
    unsafe {
        sys::slurm_init(std::ptr::null());
        let mut msg: *mut sys::job_info_msg_t = std::ptr::null_mut();
        if sys::slurm_load_jobs(0, &mut msg, (sys::SHOW_ALL | sys::SHOW_DETAIL) as u16) != 0
            || msg.is_null()
        {
            eprintln!("slurm_load_jobs failed (is SLURM_CONF set and slurmctld up?)");
            std::process::exit(1);
        }
        let m = &*msg;
        for i in 0..m.record_count as usize {
            let j = &*m.job_array.add(i);
            println!(
                "{} state={} nodes={} tres_per_task={} admin_comment={}",
                j.job_id,
                j.job_state & 0xff,
                text(j.nodes),
                text(j.tres_per_task),
                text(j.admin_comment)
            );
        }
        sys::slurm_free_job_info_msg(msg);
        sys::slurm_fini();
    }
}
