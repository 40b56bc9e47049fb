//! `compass-budgetd` (and this crate's tests) link libslurm. Built for a
//! Slurm in a private prefix (`COMPASS_SLURM_PREFIX=/opt/slurm-24.11`, read
//! by slurm-sys, which passes it on as `DEP_SLURM_PREFIX`), the programs
//! record `<prefix>/lib` as their run path, so they find that release's
//! `libslurm.so` without `LD_LIBRARY_PATH`. Debian's 22.05 needs nothing.
//!
//! Also passes the release (`DEP_SLURM_RELEASE`, "24.11.5") on to the code,
//! for `compass-budgetd --version`.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SLURM_PREFIX");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_RELEASE");
    let release = std::env::var("DEP_SLURM_RELEASE").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=COMPASS_BUDGET_SLURM_RELEASE={release}");
    if let Ok(prefix) = std::env::var("DEP_SLURM_PREFIX") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{prefix}/lib");
    }
}
