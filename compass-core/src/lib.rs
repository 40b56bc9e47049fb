//! # compass-core
//!
//! The one decision core of compass. Everything here is pure Rust with no I/O
//! and no wall clock: callers inject time ([`clock::Clock`]) and feed events.
//! The same code runs in the trace simulator (`compass simulate`), inside
//! slurmctld (the `select/cons_tres_compass` plugin) and in the budget service.
//!
//! Rooms:
//! - [`model`]: jobs, instances, nodes, migrations: the shared vocabulary.
//! - [`placement`]: the COMPASS-ABS engine (paper Section 4) and the baselines,
//!   all behind [`placement::PlacementPolicy`].
//! - [`metric`]: partial nodes, the exact inherent fragmentation `Phi*` and SIF
//!   (paper Section 3.2, Appendix C).
//! - [`preempt`]: protected and preemptible time: victims, faulty nodes.
//! - [`fairshare`]: org-tree budgets, the occupancy ledger and the fair-share
//!   queue order (budget service, issue 4).
//! - [`gres`]: the one GRES/TRES parser (node GRES, request and TRES
//!   strings; typed, counted, socket-bound).
//! - [`trace`]: trace readers (canonical CSV, Helios Venus, Alibaba PAI 2023).
//! - [`sim`]: the event-driven trace simulator, and in [`sim::budgets`] the
//!   policy simulator (fair share, protection, preemption and placement).
//! - [`duration`]: the one duration parser and format (Slurm's forms).
//! - [`clock`]: the injected clock.

pub mod clock;
pub mod duration;
pub mod error;
pub mod fairshare;
pub mod gres;
pub mod metric;
pub mod model;
pub mod placement;
pub mod preempt;
pub mod sim;
pub mod trace;

pub use error::{CoreError, Result};
