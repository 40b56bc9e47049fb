//! Generates the Slurm bindings with bindgen (needs libclang: Debian
//! `libclang-dev`). Public API from /usr/include/slurm (Debian `libslurm-dev`,
//! override the directory with `SLURM_INCLUDE_DIR`); with feature `internal`,
//! also the slurmctld headers of the source tree prepared by
//! `contrib/prepare-slurm-source.sh` (`COMPASS_SLURM_SRC`, default
//! /var/cache/compass/slurm-src, tree in `current/`).
//!
//! Another release: `COMPASS_SLURM_PREFIX=/opt/slurm-24.11` (built by
//! `contrib/build-slurm.sh 24.11`) takes the headers from
//! `$COMPASS_SLURM_PREFIX/include` and the internal ones from the tree that
//! script built, `$COMPASS_SLURM_SRC/<release>` (or `COMPASS_SLURM_TREE`).
//!
//! The select plugin's default `stock_plugin` is the cons_tres in
//! `COMPASS_STOCK_PLUGIN_DIR` when set (where the Slurm that will load the
//! plugin keeps its plugins: a package for Debian 13 built against
//! /opt/slurm-24.11 sets Debian's /usr/lib/x86_64-linux-gnu/slurm-wlm), else
//! `$COMPASS_SLURM_PREFIX/lib/slurm`, else Debian's directory.
//!
//! The release is read from `SLURM_VERSION_NUMBER` in `slurm_version.h` and
//! exposed as a cfg (`slurm_22_05`, `slurm_24_11`) to this crate, as
//! `SLURM_SYS_RELEASE` (e.g. "24.11.5") to its code, and as the `links`
//! metadata `DEP_SLURM_RELEASE_CFG` to dependents' build scripts.
//!
//! This crate never links libslurm: plugins get the symbols from the Slurm
//! process that loads them. Programs using the public API (the budget
//! service) add `cargo:rustc-link-lib=slurm` in their own build script.

use std::env;
use std::path::{Path, PathBuf};

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    panic!("slurm-sys: {msg}");
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper_public.h");
    println!("cargo:rerun-if-changed=wrapper_internal.h");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=COMPASS_SLURM_SRC");
    println!("cargo:rerun-if-env-changed=COMPASS_SLURM_PREFIX");
    println!("cargo:rerun-if-env-changed=COMPASS_SLURM_TREE");
    println!("cargo:rerun-if-env-changed=COMPASS_STOCK_PLUGIN_DIR");
    println!("cargo:rustc-check-cfg=cfg(slurm_22_05)");
    println!("cargo:rustc-check-cfg=cfg(slurm_24_11)");

    let prefix = env::var_os("COMPASS_SLURM_PREFIX")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let include = match (env::var_os("SLURM_INCLUDE_DIR"), &prefix) {
        (Some(d), _) => PathBuf::from(d),
        (None, Some(p)) => p.join("include"),
        (None, None) => PathBuf::from("/usr/include"),
    };
    if !include.join("slurm/slurm.h").exists() {
        fail(&format!(
            "{}/slurm/slurm.h not found: install the Slurm headers (Debian: run contrib/install-slurm-deps.sh, \
             which installs libslurm-dev) or set SLURM_INCLUDE_DIR",
            include.display()
        ));
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR set by cargo"));
    let version_h = include.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", version_h.display());
    let number = read_version(&version_h);
    let (major, minor, micro) = (number >> 16, (number >> 8) & 0xff, number & 0xff);
    let release = format!("{major}.{minor:02}");
    let cfg = match release.as_str() {
        "22.05" => "slurm_22_05",
        "24.11" => "slurm_24_11",
        other => fail(&format!(
            "Slurm {other} ({}) is not a supported release (22.05, 24.11); see docs/admin-guide.md",
            version_h.display()
        )),
    };
    // libslurm's API "current" of each release (SLURM_API_VERSION >> 16 in
    // the configured tree's config.h; libslurm.so.<current>): what
    // `slurm_api_version()` of the running Slurm returns.
    let api_current: u32 = match cfg {
        "slurm_22_05" => 38,
        _ => 42,
    };
    println!("cargo:rustc-env=SLURM_SYS_API_CURRENT={api_current}");
    println!("cargo:rustc-cfg={cfg}");
    println!("cargo:rustc-env=SLURM_SYS_RELEASE={major}.{minor:02}.{micro}");
    println!("cargo:rustc-env=SLURM_SYS_INCLUDE={}", include.display());
    // Where that Slurm's own plugins are (the select plugin's default
    // `stock_plugin` is the cons_tres there): named for the hosts the build
    // is for, or those of the prefix built against.
    let stock_dir = match (
        env::var_os("COMPASS_STOCK_PLUGIN_DIR").filter(|d| !d.is_empty()),
        &prefix,
    ) {
        (Some(d), _) => PathBuf::from(d),
        (None, Some(p)) => p.join("lib/slurm"),
        (None, None) => PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm"),
    };
    println!(
        "cargo:rustc-env=SLURM_SYS_STOCK_DIR={}",
        stock_dir.display()
    );
    println!("cargo:release_cfg={cfg}");
    println!("cargo:release={major}.{minor:02}.{micro}");
    if let Some(p) = &prefix {
        println!("cargo:prefix={}", p.display());
        // For programs linking libslurm (the budget service); plugins link
        // nothing. At run time they need the prefix's lib in their rpath or
        // LD_LIBRARY_PATH (docs/admin-guide.md).
        println!("cargo:rustc-link-search=native={}", p.join("lib").display());
    }

    let internal = env::var_os("CARGO_FEATURE_INTERNAL").is_some();
    let builder = if internal {
        let src = PathBuf::from(
            env::var("COMPASS_SLURM_SRC").unwrap_or_else(|_| "/var/cache/compass/slurm-src".into()),
        );
        let root = match (env::var_os("COMPASS_SLURM_TREE"), &prefix) {
            (Some(t), _) => PathBuf::from(t),
            (None, Some(_)) => src.join(&release),
            (None, None) => src.join("current"),
        };
        check_tree(&root, cfg);
        let tree_number = read_version(&root.join("slurm/slurm_version.h"));
        if tree_number != number {
            fail(&format!(
                "the source tree {} is Slurm {:#x}, the headers {} are {number:#x}: \
                 the internal structs must come from the same release",
                root.display(),
                tree_number,
                include.display()
            ));
        }
        println!("cargo:rerun-if-changed={}", root.join("config.h").display());
        println!("cargo:rustc-env=SLURM_SYS_SOURCE_TREE={}", root.display());
        bindgen::Builder::default()
            .header("wrapper_internal.h")
            .clang_arg(format!("-I{}", root.display()))
            .clang_arg(format!("-I{}", include.display()))
            .allowlist_type("job_record_t|job_record|part_record_t|part_record|node_record_t|node_record|config_record_t|config_record|job_details|job_resources|gres_state_t|gres_job_state_t|slurm_select_ops_t|step_record_t|select_plugindata_info|select_jobdata_type|select_nodedata_type|select_print_mode|resv_desc_msg_t|buf_t|bitstr_t")
            .allowlist_function("bit_.*|node_name2bitmap|bitmap2node_name|slurm_(info|error|verbose|debug|debug2)|list_.*|xfree_ptr|slurm_xfree")
            .allowlist_function("slurm_.*|spank_.*")
            .allowlist_var("node_record_table_ptr|node_record_count|SLURM_.*|SELECT_.*|ESPANK_.*|ESLURM_.*|NO_VAL.*|INFINITE.*|JOB_.*|GRES_STATE_.*|slurm_conf")
            .allowlist_type("slurm_.*|spank_.*|job_info_t|job_info_msg_t|node_info_t|node_info_msg_t|job_desc_msg_t|slurm_job_info_t|update_node_msg_t|partition_info_msg_t")
            .allowlist_var("SHOW_.*|WAIT_.*|NODE_STATE_.*|S_CTX_.*|S_JOB_.*|SPANK_.*")
    } else {
        bindgen::Builder::default()
            .header("wrapper_public.h")
            .clang_arg(format!("-I{}", include.display()))
            .allowlist_function("slurm_.*|spank_.*")
            .allowlist_type("slurm_.*|spank_.*|job_info_t|job_info_msg_t|node_info_t|node_info_msg_t|job_desc_msg_t|update_node_msg_t|partition_info_msg_t")
            .allowlist_var("SLURM_.*|SHOW_.*|ESPANK_.*|ESLURM_.*|NO_VAL.*|INFINITE.*|JOB_.*|NODE_STATE_.*|S_CTX_.*|S_JOB_.*|SPANK_.*|WAIT_.*")
    };
    let bindings = builder
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen failed on the Slurm headers: {e}")));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("cannot write bindings: {e}")));
}

/// `SLURM_VERSION_NUMBER` (0xMMmmuu) of a `slurm_version.h`.
fn read_version(h: &Path) -> u32 {
    let text = std::fs::read_to_string(h)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", h.display())));
    text.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next()) {
                (Some("#define"), Some("SLURM_VERSION_NUMBER"), Some(v)) => {
                    u32::from_str_radix(v.trim_start_matches("0x"), 16).ok()
                }
                _ => None,
            }
        })
        .unwrap_or_else(|| fail(&format!("no SLURM_VERSION_NUMBER in {}", h.display())))
}

fn check_tree(root: &Path, cfg: &str) {
    // 23.02 moved the plugin interfaces from src/common to src/interfaces.
    let select_h = if cfg == "slurm_22_05" {
        "src/common/select.h"
    } else {
        "src/interfaces/select.h"
    };
    let how = if cfg == "slurm_22_05" {
        "Run contrib/prepare-slurm-source.sh (as root; after contrib/install-slurm-deps.sh)"
    } else {
        "Run contrib/build-slurm.sh <release> (as root)"
    };
    for f in ["config.h", "src/slurmctld/slurmctld.h", select_h] {
        if !root.join(f).exists() {
            fail(&format!(
                "{} missing: the select plugin needs the configured Slurm source tree. \
                 {how}, or point COMPASS_SLURM_SRC at the directory it prepared",
                root.join(f).display()
            ));
        }
    }
}
