//! Build script of the `compass` binary: records the Slurm version the
//! plugins are built for, from `slurm_version.h`, so `compass --version` can
//! name it. Never fails: without Slurm headers the version is "none".

use std::path::Path;

fn main() {
    // Same choice as slurm-plugin/slurm-sys: SLURM_INCLUDE_DIR, else
    // COMPASS_SLURM_PREFIX/include (another release, contrib/build-slurm.sh).
    let header = std::env::var("SLURM_INCLUDE_DIR")
        .or_else(|_| std::env::var("COMPASS_SLURM_PREFIX").map(|p| format!("{p}/include")))
        .map(|d| format!("{d}/slurm/slurm_version.h"))
        .unwrap_or_else(|_| "/usr/include/slurm/slurm_version.h".to_string());
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=COMPASS_SLURM_PREFIX");
    println!("cargo:rerun-if-changed={header}");
    let version = slurm_version(Path::new(&header)).unwrap_or_else(|| "none".to_string());
    println!("cargo:rustc-env=COMPASS_SLURM_VERSION={version}");
    // `compass` links libslurm (through compass-budget): built for a Slurm
    // in a private prefix, find its libslurm.so there at run time.
    // (slurm-sys adds `<prefix>/lib` to the link search path the same way).
    if let Ok(prefix) = std::env::var("COMPASS_SLURM_PREFIX") {
        if !prefix.is_empty() {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{prefix}/lib");
        }
    }
}

/// The Slurm version of a `slurm_version.h`: its `SLURM_VERSION_STRING` when
/// present, else decoded from `SLURM_VERSION_NUMBER` (`0x160508` -> `22.05.8`).
fn slurm_version(header: &Path) -> Option<String> {
    let text = std::fs::read_to_string(header).ok()?;
    let define = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.trim().strip_prefix("#define")?.trim_start();
            let value = rest.strip_prefix(name)?;
            value
                .starts_with([' ', '\t'])
                .then(|| value.trim().trim_matches('"').to_string())
        })
    };
    if let Some(v) = define("SLURM_VERSION_STRING") {
        if !v.is_empty()
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
        {
            return Some(v);
        }
    }
    let n = define("SLURM_VERSION_NUMBER")?;
    let n = u32::from_str_radix(n.trim_start_matches("0x").trim_start_matches("0X"), 16).ok()?;
    Some(format!(
        "{}.{:02}.{}",
        (n >> 16) & 0xff,
        (n >> 8) & 0xff,
        n & 0xff
    ))
}
