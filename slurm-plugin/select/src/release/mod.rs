//! What differs between the Slurm releases in the select plugin API, one
//! small module per release, chosen at build time from the headers'
//! `SLURM_VERSION_NUMBER` (cfg `slurm_22_05` / `slurm_24_11`, set by
//! `build.rs` from slurm-sys). Everything else is common (`forward.rs`).
//!
//! Each module exports `select_p_job_test` with its release's signature and
//! the entry points only that release has, and declares them in
//! `StockRelease` (loaded from the stock cons_tres next to `Stock`).

#[cfg(slurm_22_05)]
mod v22_05;
#[cfg(slurm_22_05)]
pub use v22_05::*;

#[cfg(slurm_24_11)]
mod v24_11;
#[cfg(slurm_24_11)]
pub use v24_11::*;
