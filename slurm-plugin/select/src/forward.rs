//! The stock cons_tres, loaded by its full path with
//! `dlopen(RTLD_LAZY|RTLD_LOCAL)` (RTLD_NOW fails in slurmd: cons_tres
//! references symbols that only slurmctld has), and the exported
//! `select_p_*` entry points that forward to it. The five that do more
//! (`state_restore`, `job_init`, `job_test`, `select_nodeinfo_set`,
//! `job_fini`) are in `job.rs`.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};

use slurm_sys as sys;

use crate::{guard, SLURM_ERROR};

pub(crate) type JobPtr = *mut sys::job_record_t;
pub(crate) type Bitmap = *mut sys::bitstr_t;
pub(crate) type P = *mut c_void;

/// Declares the `select_p_*` entry points a stock select plugin has: a
/// struct `$stock` of function pointers, loaded by dlsym and kept in a
/// static (`$stock::get()`), and for each `plain` entry an exported
/// `#[no_mangle]` function that forwards to it (`custom` ones are written by
/// hand). The common entries are below; those of one release only, and the
/// changed signatures, are in `crate::release`.
macro_rules! select_ops {
    (struct $stock:ident; $( $kind:ident fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty = $err:expr; )*) => {
        /// Entry points of the stock plugin.
        pub struct $stock {
            $( pub $name: unsafe extern "C" fn($($ty),*) -> $ret, )*
        }

        impl $stock {
            fn cell() -> &'static std::sync::OnceLock<$stock> {
                static CELL: std::sync::OnceLock<$stock> = std::sync::OnceLock::new();
                &CELL
            }

            /// The loaded entry points (init() loaded them before any other call).
            pub fn get() -> &'static $stock {
                Self::cell().get().expect("stock cons_tres loaded by init()")
            }

            /// # Safety
            /// `lib` is a live dlopen handle of a Slurm select plugin.
            pub(crate) unsafe fn install(lib: *mut std::ffi::c_void, path: &str) -> Result<(), String> {
                // SAFETY: forwarded contract.
                let sym = |name: &str| -> Result<*mut std::ffi::c_void, String> {
                    let c = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
                    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
                    if p.is_null() {
                        Err(format!("{path}: symbol {name} missing: not a select plugin of Slurm {}", slurm_sys::RELEASE))
                    } else {
                        Ok(p)
                    }
                };
                // SAFETY: each symbol has the C signature declared in
                // select.h/select.c of the same release.
                let s = unsafe {
                    $stock {
                        $( $name: std::mem::transmute::<*mut std::ffi::c_void, unsafe extern "C" fn($($ty),*) -> $ret>(sym(stringify!($name))?), )*
                    }
                };
                let _ = Self::cell().set(s);
                Ok(())
            }
        }

        $( select_ops!(@export $stock $kind $name ($($arg : $ty),*) -> $ret = $err); )*
    };
    (@export $stock:ident plain $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty = $err:expr) => {
        /// Forwarded to the stock cons_tres.
        ///
        /// # Safety
        /// Called by Slurm with the arguments of `src/common/select.h`.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: same arguments, same signature.
            guard(stringify!($name), $err, || unsafe { ($stock::get().$name)($($arg),*) })
        }
    };
    (@export $stock:ident custom $($rest:tt)*) => {};
}

select_ops! {
    struct Stock;
    custom fn init() -> c_int = SLURM_ERROR;
    custom fn fini() -> c_int = SLURM_ERROR;
    plain fn select_p_state_save(dir_name: *mut c_char) -> c_int = SLURM_ERROR;
    custom fn select_p_state_restore(dir_name: *mut c_char) -> c_int = SLURM_ERROR;
    custom fn select_p_job_init(job_list: P) -> c_int = SLURM_ERROR;
    plain fn select_p_node_init() -> c_int = SLURM_ERROR;
    plain fn select_p_job_begin(job_ptr: JobPtr) -> c_int = SLURM_ERROR;
    plain fn select_p_job_ready(job_ptr: JobPtr) -> c_int = SLURM_ERROR;
    plain fn select_p_job_expand(from_job_ptr: JobPtr, to_job_ptr: JobPtr) -> c_int = SLURM_ERROR;
    custom fn select_p_job_resized(job_ptr: JobPtr, node_ptr: P) -> c_int = SLURM_ERROR;
    custom fn select_p_job_fini(job_ptr: JobPtr) -> c_int = SLURM_ERROR;
    plain fn select_p_job_suspend(job_ptr: JobPtr, indf_susp: bool) -> c_int = SLURM_ERROR;
    plain fn select_p_job_resume(job_ptr: JobPtr, indf_susp: bool) -> c_int = SLURM_ERROR;
    plain fn select_p_step_pick_nodes(job_ptr: JobPtr, step_jobinfo: P, node_count: u32, avail_nodes: *mut Bitmap) -> Bitmap = std::ptr::null_mut();
    plain fn select_p_step_start(step_ptr: P) -> c_int = SLURM_ERROR;
    plain fn select_p_step_finish(step_ptr: P, killing_step: bool) -> c_int = SLURM_ERROR;
    plain fn select_p_select_nodeinfo_pack(nodeinfo: P, buffer: P, protocol_version: u16) -> c_int = SLURM_ERROR;
    plain fn select_p_select_nodeinfo_unpack(nodeinfo: *mut P, buffer: P, protocol_version: u16) -> c_int = SLURM_ERROR;
    plain fn select_p_select_nodeinfo_alloc() -> P = std::ptr::null_mut();
    plain fn select_p_select_nodeinfo_free(nodeinfo: P) -> c_int = SLURM_ERROR;
    plain fn select_p_select_nodeinfo_set_all() -> c_int = SLURM_ERROR;
    custom fn select_p_select_nodeinfo_set(job_ptr: JobPtr) -> c_int = SLURM_ERROR;
    plain fn select_p_select_nodeinfo_get(nodeinfo: P, dinfo: c_uint, state: c_uint, data: P) -> c_int = SLURM_ERROR;
    plain fn select_p_select_jobinfo_alloc() -> P = std::ptr::null_mut();
    plain fn select_p_select_jobinfo_free(jobinfo: P) -> c_int = SLURM_ERROR;
    plain fn select_p_select_jobinfo_set(jobinfo: P, data_type: c_uint, data: P) -> c_int = SLURM_ERROR;
    plain fn select_p_select_jobinfo_get(jobinfo: P, data_type: c_uint, data: P) -> c_int = SLURM_ERROR;
    plain fn select_p_select_jobinfo_copy(jobinfo: P) -> P = std::ptr::null_mut();
    plain fn select_p_select_jobinfo_pack(jobinfo: P, buffer: P, protocol_version: u16) -> c_int = SLURM_ERROR;
    plain fn select_p_select_jobinfo_unpack(jobinfo_pptr: *mut P, buffer: P, protocol_version: u16) -> c_int = SLURM_ERROR;
    plain fn select_p_get_info_from_plugin(dinfo: c_uint, job_ptr: JobPtr, data: P) -> c_int = SLURM_ERROR;
    plain fn select_p_reconfigure() -> c_int = SLURM_ERROR;
}

/// Loads the stock plugin once (idempotent).
pub fn load_stock(path: &str) -> Result<(), String> {
    if Stock::cell().get().is_some() {
        return Ok(());
    }
    let c = CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: plain dlopen of a path.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if lib.is_null() {
        // SAFETY: dlerror returns a static string or NULL.
        let err = unsafe { libc::dlerror() };
        let why = if err.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: non-null C string.
            unsafe { std::ffi::CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(format!(
            "cannot load the stock cons_tres {path}: {why} (select.stock_plugin in compass.conf)"
        ));
    }
    // The stock plugin must be of the release this plugin was built for
    // (and, by `sys::check_running_release`, the release running): its
    // entry points are called with this release's structs. Slurm checks
    // `plugin_version` of the plugins it loads itself; this one it never
    // sees.
    let version = {
        let name = CString::new("plugin_version").map_err(|e| e.to_string())?;
        // SAFETY: live handle, NUL-terminated name.
        let p = unsafe { libc::dlsym(lib, name.as_ptr()) } as *const u32;
        // SAFETY: Slurm plugins export `const uint32_t plugin_version`.
        (!p.is_null()).then(|| unsafe { p.read() })
    };
    if let Err(e) = stock_release_matches(path, version, sys::VERSION_NUMBER) {
        // SAFETY: the handle dlopen returned, not used again.
        unsafe { libc::dlclose(lib) };
        return Err(e);
    }
    // SAFETY: live handle.
    unsafe {
        Stock::install(lib, path)?;
        crate::release::StockRelease::install(lib, path)
    }
}

/// `Err` (one log line) unless the stock plugin at `path` exports a
/// `plugin_version` equal to `built` (`SLURM_VERSION_NUMBER` of this
/// build: major, minor and micro, as Slurm compares select plugins).
fn stock_release_matches(path: &str, found: Option<u32>, built: u32) -> Result<(), String> {
    let release = |v: u32| format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff);
    match found {
        Some(v) if v == built => Ok(()),
        Some(v) => Err(format!(
            "the stock cons_tres {path} is of Slurm {}, this plugin was built for Slurm {}: \
             refusing to load it (select.stock_plugin in compass.conf names the cons_tres of the \
             running release)",
            release(v),
            release(built)
        )),
        None => Err(format!(
            "{path} has no plugin_version: not a Slurm plugin (select.stock_plugin in compass.conf)"
        )),
    }
}

/// The loaded stock plugin (init() loaded it before any other call).
pub fn stock() -> &'static Stock {
    Stock::get()
}

#[cfg(test)]
mod tests {
    use super::stock_release_matches;

    #[test]
    fn a_stock_cons_tres_of_another_release_is_refused() {
        // 22.05.8 and 24.11.5 as SLURM_VERSION_NUMBER packs them.
        let v22 = (22 << 16) | (5 << 8) | 8;
        let v24 = (24 << 16) | (11 << 8) | 5;
        assert!(stock_release_matches("/x.so", Some(v22), v22).is_ok());
        let e = stock_release_matches("/deb/select_cons_tres.so", Some(v22), v24).unwrap_err();
        assert!(
            e.contains("/deb/select_cons_tres.so is of Slurm 22.05.8")
                && e.contains("built for Slurm 24.11.5"),
            "{e}"
        );
        // another micro release: Slurm refuses such plugins too
        assert!(stock_release_matches("/x.so", Some(v22 + 1), v22).is_err());
        let e = stock_release_matches("/lib/libc.so.6", None, v22).unwrap_err();
        assert!(e.contains("no plugin_version"), "{e}");
    }
}
