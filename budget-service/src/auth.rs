//! Authentication (MUNGE) and authorisation (managers and admins).
//!
//! The CLI encodes a MUNGE credential whose payload binds it to one request
//! (`METHOD PATH\n` + body) and sends it as `Authorization: MUNGE <cred>`.
//! The service decodes it through munged (which also refuses replays and
//! expired credentials), checks the payload against the request and maps the
//! credential's UID to a user name. Authorisation: admins (config) may edit
//! everything; a manager of a node may edit the nodes strictly below it.

use compass_core::fairshare::OrgTree;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use crate::error::{BudgetError, Result};

/// Header scheme of MUNGE credentials.
pub const SCHEME: &str = "MUNGE";

/// The payload a credential must carry for a request.
pub fn request_payload(method: &str, path_and_query: &str, body: &[u8]) -> Vec<u8> {
    let mut p = format!("compass-budget {method} {path_and_query}\n").into_bytes();
    p.extend_from_slice(body);
    p
}

/// Turns a request credential into a user name.
pub trait Authenticator: Send + Sync {
    /// `credential` is the header value after the scheme; `payload` what
    /// [`request_payload`] gives for the request.
    fn authenticate(&self, credential: &str, payload: &[u8]) -> Result<String>;
}

#[repr(C)]
struct MungeCtx {
    _private: [u8; 0],
}

const MUNGE_OPT_SOCKET: c_int = 8;

#[link(name = "munge")]
extern "C" {
    fn munge_ctx_create() -> *mut MungeCtx;
    fn munge_ctx_destroy(ctx: *mut MungeCtx);
    fn munge_ctx_set(ctx: *mut MungeCtx, opt: c_int, ...) -> c_int;
    fn munge_encode(
        cred: *mut *mut c_char,
        ctx: *mut MungeCtx,
        buf: *const c_void,
        len: c_int,
    ) -> c_int;
    fn munge_decode(
        cred: *const c_char,
        ctx: *mut MungeCtx,
        buf: *mut *mut c_void,
        len: *mut c_int,
        uid: *mut libc::uid_t,
        gid: *mut libc::gid_t,
    ) -> c_int;
    fn munge_strerror(e: c_int) -> *const c_char;
}

fn munge_err(code: c_int) -> BudgetError {
    // SAFETY: munge_strerror returns a static NUL-terminated string for any code.
    let msg = unsafe { CStr::from_ptr(munge_strerror(code)) }
        .to_string_lossy()
        .into_owned();
    BudgetError::Munge(msg)
}

/// A MUNGE context with an optional private socket; destroyed on drop.
struct Ctx(*mut MungeCtx);

impl Ctx {
    fn new(socket: Option<&Path>) -> Result<Self> {
        // SAFETY: plain constructor; NULL is checked below.
        let ctx = unsafe { munge_ctx_create() };
        if ctx.is_null() {
            return Err(BudgetError::Munge("cannot create a MUNGE context".into()));
        }
        let ctx = Ctx(ctx);
        if let Some(sock) = socket {
            let s = CString::new(sock.as_os_str().as_encoded_bytes())
                .map_err(|_| BudgetError::Munge("socket path contains NUL".into()))?;
            // SAFETY: MUNGE_OPT_SOCKET takes a `char *`, copied by libmunge.
            let rc = unsafe { munge_ctx_set(ctx.0, MUNGE_OPT_SOCKET, s.as_ptr()) };
            if rc != 0 {
                return Err(munge_err(rc));
            }
        }
        Ok(ctx)
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: created by munge_ctx_create and destroyed once.
        unsafe { munge_ctx_destroy(self.0) }
    }
}

/// Encodes a credential carrying `payload` (CLI side).
pub fn munge_encode_payload(socket: Option<&Path>, payload: &[u8]) -> Result<String> {
    let ctx = Ctx::new(socket)?;
    let len = c_int::try_from(payload.len())
        .map_err(|_| BudgetError::Munge("payload too large".into()))?;
    let mut cred: *mut c_char = std::ptr::null_mut();
    // SAFETY: buf/len describe a live slice; cred is set to a malloc'd string.
    let rc = unsafe { munge_encode(&mut cred, ctx.0, payload.as_ptr().cast(), len) };
    if rc != 0 {
        return Err(munge_err(rc));
    }
    // SAFETY: on success cred is a NUL-terminated malloc'd string we own.
    let s = unsafe { CStr::from_ptr(cred) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: freeing memory allocated by libmunge with malloc.
    unsafe { libc::free(cred.cast()) };
    Ok(s)
}

/// Decodes a credential: `(payload, uid)` (service side).
pub fn munge_decode_cred(socket: Option<&Path>, cred: &str) -> Result<(Vec<u8>, u32)> {
    let ctx = Ctx::new(socket)?;
    let c = CString::new(cred)
        .map_err(|_| BudgetError::Unauthenticated("credential contains NUL".into()))?;
    let mut buf: *mut c_void = std::ptr::null_mut();
    let mut len: c_int = 0;
    let mut uid: libc::uid_t = 0;
    let mut gid: libc::gid_t = 0;
    // SAFETY: all out-pointers are valid; buf is malloc'd by libmunge.
    let rc = unsafe { munge_decode(c.as_ptr(), ctx.0, &mut buf, &mut len, &mut uid, &mut gid) };
    let payload = if buf.is_null() || len <= 0 {
        Vec::new()
    } else {
        // SAFETY: libmunge set buf to `len` readable bytes.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len as usize) }.to_vec()
    };
    if !buf.is_null() {
        // SAFETY: freeing the payload allocated by libmunge.
        unsafe { libc::free(buf) };
    }
    if rc != 0 {
        return Err(BudgetError::Unauthenticated(format!(
            "MUNGE credential refused: {}",
            munge_err(rc)
        )));
    }
    Ok((payload, uid))
}

/// The user name of a UID (from the passwd database), or the number.
pub fn user_name(uid: u32) -> String {
    let mut buf = vec![0 as c_char; 16384];
    // SAFETY: zeroed passwd is a valid out-parameter for getpwuid_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers are valid for the stated lengths.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc == 0 && !out.is_null() && !pw.pw_name.is_null() {
        // SAFETY: pw_name points into `buf`, NUL-terminated.
        return unsafe { CStr::from_ptr(pw.pw_name) }
            .to_string_lossy()
            .into_owned();
    }
    uid.to_string()
}

/// The current process's user name (for CLI messages).
pub fn current_user() -> String {
    // SAFETY: getuid cannot fail.
    user_name(unsafe { libc::getuid() })
}

/// Production authenticator: MUNGE through munged.
pub struct MungeAuth {
    pub socket: Option<PathBuf>,
}

impl Authenticator for MungeAuth {
    fn authenticate(&self, credential: &str, payload: &[u8]) -> Result<String> {
        let (got, uid) = munge_decode_cred(self.socket.as_deref(), credential.trim())?;
        if got != payload {
            return Err(BudgetError::Unauthenticated(
                "the MUNGE credential was made for a different request (method, path or body differ)".into(),
            ));
        }
        Ok(user_name(uid))
    }
}

/// Who may do what.
pub struct Policy<'a> {
    pub admins: &'a [String],
}

impl Policy<'_> {
    pub fn is_admin(&self, user: &str) -> bool {
        self.admins.iter().any(|a| a == user)
    }

    /// May `user` change node `name` of `tree` (its share, managers, account,
    /// place, existence)? Admins: always. Others: if they manage a strict
    /// ancestor of the node.
    pub fn check_edit(&self, user: &str, tree: Option<&OrgTree>, name: &str) -> Result<()> {
        if self.is_admin(user) {
            return Ok(());
        }
        let tree = tree.ok_or_else(|| {
            self.refuse(
                user,
                name,
                "the tree is empty; only admins may create the root",
            )
        })?;
        let ix = tree
            .find(name)
            .ok_or_else(|| BudgetError::NotFound(format!("team `{name}`")))?;
        match tree.node(ix).parent {
            Some(p) if tree.manages(user, p) => Ok(()),
            Some(_) => Err(self.refuse(user, name, "you do not manage any team above it")),
            None => Err(self.refuse(user, name, "it is the root; only admins may edit it")),
        }
    }

    /// May `user` put a (new or moved) child under `parent`?
    pub fn check_place_under(
        &self,
        user: &str,
        tree: Option<&OrgTree>,
        parent: Option<&str>,
    ) -> Result<()> {
        if self.is_admin(user) {
            return Ok(());
        }
        let Some(parent) = parent else {
            return Err(self.refuse(user, "(root)", "only admins may create a root"));
        };
        let tree = tree.ok_or_else(|| self.refuse(user, parent, "the tree is empty"))?;
        let ix = tree
            .find(parent)
            .ok_or_else(|| BudgetError::field("parent", format!("unknown team `{parent}`")))?;
        if tree.manages(user, ix) {
            Ok(())
        } else {
            Err(self.refuse(
                user,
                parent,
                "you do not manage it or any team above it, so you cannot add children there",
            ))
        }
    }

    /// Checks every change of a whole-tree import.
    pub fn check_import(
        &self,
        user: &str,
        old: Option<&OrgTree>,
        changes: &[compass_core::fairshare::TreeChange],
    ) -> Result<()> {
        use compass_core::fairshare::TreeChange;
        if self.is_admin(user) {
            return Ok(());
        }
        for c in changes {
            match c {
                TreeChange::Add { node } => {
                    self.check_place_under(user, old, node.parent.as_deref())?
                }
                TreeChange::Remove { node } => self.check_edit(user, old, &node.name)?,
                TreeChange::Modify { old: o, new } => {
                    self.check_edit(user, old, &o.name)?;
                    if o.parent != new.parent {
                        self.check_place_under(user, old, new.parent.as_deref())?;
                    }
                }
            }
        }
        Ok(())
    }

    fn refuse(&self, user: &str, node: &str, why: &str) -> BudgetError {
        BudgetError::Forbidden {
            what: format!("user `{user}` editing team `{node}`"),
            why: why.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use compass_core::fairshare::NodeSpec;

    fn tree() -> OrgTree {
        let s = |n: &str, p: Option<&str>, sh: f64, m: &[&str]| NodeSpec {
            name: n.into(),
            parent: p.map(Into::into),
            share: sh,
            managers: m.iter().map(|x| x.to_string()).collect(),
            account: None,
        };
        OrgTree::build(&[
            s("org", None, 1.0, &["ceo"]),
            s("prog", Some("org"), 0.5, &["pi"]),
            s("team", Some("prog"), 0.5, &["lead"]),
            s("other", Some("org"), 0.5, &[]),
        ])
        .unwrap()
    }

    #[test]
    fn managers_edit_only_below_what_they_manage() {
        let admins = vec!["root".to_string()];
        let p = Policy { admins: &admins };
        let t = tree();
        assert!(p.check_edit("pi", Some(&t), "team").is_ok());
        let e = p
            .check_edit("pi", Some(&t), "prog")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("user `pi` editing team `prog`") && e.contains("do not manage"),
            "{e}"
        );
        assert!(p.check_edit("pi", Some(&t), "other").is_err());
        assert!(p.check_edit("ceo", Some(&t), "team").is_ok());
        assert!(p
            .check_edit("ceo", Some(&t), "org")
            .unwrap_err()
            .to_string()
            .contains("root"));
        assert!(p.check_edit("root", Some(&t), "org").is_ok());
        assert!(p.check_place_under("lead", Some(&t), Some("team")).is_ok());
        assert!(p.check_place_under("lead", Some(&t), Some("prog")).is_err());
        assert!(p.check_place_under("lead", None, None).is_err());
    }

    #[test]
    fn payload_binds_method_path_and_body() {
        assert_ne!(
            request_payload("POST", "/a", b"x"),
            request_payload("POST", "/b", b"x")
        );
        assert_ne!(
            request_payload("POST", "/a", b"x"),
            request_payload("PATCH", "/a", b"x")
        );
        assert_ne!(
            request_payload("POST", "/a", b"x"),
            request_payload("POST", "/a", b"y")
        );
    }
}
