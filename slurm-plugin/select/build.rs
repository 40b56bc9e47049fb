//! Passes the Slurm release slurm-sys found in the headers
//! (`DEP_SLURM_RELEASE_CFG`, from its `links = "slurm"` metadata) on as a
//! cfg, which picks the module of `src/release/`.
fn main() {
    println!("cargo:rustc-check-cfg=cfg(slurm_22_05)");
    println!("cargo:rustc-check-cfg=cfg(slurm_24_11)");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_RELEASE_CFG");
    match std::env::var("DEP_SLURM_RELEASE_CFG") {
        Ok(cfg) => println!("cargo:rustc-cfg={cfg}"),
        Err(_) => panic!("slurm-sys did not report the Slurm release (DEP_SLURM_RELEASE_CFG)"),
    }
}
