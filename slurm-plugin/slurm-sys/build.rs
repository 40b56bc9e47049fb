//! Generates the Slurm bindings with bindgen (needs libclang: Debian
//! `libclang-dev`). Public API from /usr/include/slurm (Debian `libslurm-dev`,
//! override the directory with `SLURM_INCLUDE_DIR`); with feature `internal`,
//! also the slurmctld headers of the source tree prepared by
//! `contrib/prepare-slurm-source.sh` (`COMPASS_SLURM_SRC`, default
//! /var/cache/compass/slurm-src, tree in `current/`).
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

    let include =
        PathBuf::from(env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into()));
    if !include.join("slurm/slurm.h").exists() {
        fail(&format!(
            "{}/slurm/slurm.h not found: install the Slurm headers (Debian: run contrib/install-slurm-deps.sh, \
             which installs libslurm-dev) or set SLURM_INCLUDE_DIR",
            include.display()
        ));
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR set by cargo"));

    let internal = env::var_os("CARGO_FEATURE_INTERNAL").is_some();
    let builder = if internal {
        let root = PathBuf::from(
            env::var("COMPASS_SLURM_SRC").unwrap_or_else(|_| "/var/cache/compass/slurm-src".into()),
        )
        .join("current");
        check_tree(&root);
        println!("cargo:rerun-if-changed={}", root.join("config.h").display());
        println!("cargo:rustc-env=SLURM_SYS_SOURCE_TREE={}", root.display());
        bindgen::Builder::default()
            .header("wrapper_internal.h")
            .clang_arg(format!("-I{}", root.display()))
            .clang_arg(format!("-I{}", include.display()))
            .allowlist_type("job_record_t|job_record|node_record_t|node_record|config_record_t|config_record|job_details|job_resources|gres_state_t|gres_job_state_t|slurm_select_ops_t|step_record_t|select_plugindata_info|select_jobdata_type|select_nodedata_type|select_print_mode|resv_desc_msg_t|buf_t|bitstr_t")
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

fn check_tree(root: &Path) {
    for f in [
        "config.h",
        "src/slurmctld/slurmctld.h",
        "src/common/select.h",
    ] {
        if !root.join(f).exists() {
            fail(&format!(
                "{} missing: the select plugin needs the configured Slurm source tree. \
                 Run contrib/prepare-slurm-source.sh (as root; after contrib/install-slurm-deps.sh), \
                 or point COMPASS_SLURM_SRC at the directory it prepared",
                root.join(f).display()
            ));
        }
    }
}
