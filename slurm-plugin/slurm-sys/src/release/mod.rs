//! The names and calls that differ between Slurm releases, one small module
//! per release, chosen by the cfg `build.rs` derives from the headers'
//! `SLURM_VERSION_NUMBER`. Re-exported at the crate root, so users write
//! `slurm_sys::bit_test`, `slurm_sys::List`, `slurm_sys::SHOW_ALL`, ... for
//! every release.

#[cfg(slurm_22_05)]
mod v22_05;
#[cfg(slurm_22_05)]
pub use v22_05::*;

#[cfg(slurm_24_11)]
mod v24_11;
#[cfg(slurm_24_11)]
pub use v24_11::*;
