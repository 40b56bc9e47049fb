//! Links the SPANK plugin with lazy binding. Rust links with `-z now`: the
//! dynamic loader would then refuse a plugin built for another Slurm
//! release at dlopen with `undefined symbol: ...` (a function that release
//! lacks), before Slurm's plugin loader reads `plugin_version` and says
//! which release the plugin is for (`Incompatible plugin version`). Lazily
//! bound, like Slurm's own plugins, it always gets to that check.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,lazy");
}
