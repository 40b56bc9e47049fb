//! Passes the Slurm release slurm-sys found in the headers
//! (`DEP_SLURM_RELEASE_CFG`, from its `links = "slurm"` metadata) on as a
//! cfg, which picks the module of `src/release/`; and links the plugin
//! with lazy binding.
fn main() {
    // Rust links with `-z now`: the dynamic loader would then refuse a
    // plugin of another release at dlopen with `undefined symbol: ...` (a
    // function that release lacks) before Slurm's plugin loader can read
    // `plugin_version` and say which release the plugin is for. Lazily
    // bound, like Slurm's own plugins, it gets to that check.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,lazy");
    println!("cargo:rustc-check-cfg=cfg(slurm_22_05)");
    println!("cargo:rustc-check-cfg=cfg(slurm_24_11)");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_RELEASE_CFG");
    match std::env::var("DEP_SLURM_RELEASE_CFG") {
        Ok(cfg) => println!("cargo:rustc-cfg={cfg}"),
        Err(_) => panic!("slurm-sys did not report the Slurm release (DEP_SLURM_RELEASE_CFG)"),
    }
}
