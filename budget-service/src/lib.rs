//! # compass-budget
//!
//! The budget service: managers split GPU time down their org tree; the
//! service keeps an occupancy ledger, orders Slurm's queue by who is
//! under-served (7-day fair share, see `fair-share-budgets.txt`) and pushes
//! that order into Slurm. The decision logic lives in
//! [`compass_core::fairshare`]; this crate adds storage, Slurm I/O, the API,
//! the CLI and the dashboard. One module per concern:
//!
//! - [`config`]: the configuration file.
//! - [`db`]: SQLite storage, schema migrations from `sql/`, audit trail.
//! - [`auth`]: MUNGE authentication, manager/admin authorisation.
//! - [`slurm`]: Slurm I/O traits and the in-memory fake.
//! - [`cycle`]: the ingest -> order -> push -> enforce loop with back-off.
//! - [`enforce`]: protected/preemptible time and faulty nodes on Slurm.
//! - [`state`]: shared state and read-side computations.
//! - [`api`]: the REST API, health, OpenAPI.
//! - [`metrics`]: `/metrics` (Prometheus) and the counters behind it.
//! - [`select_state`]: the select plugin's published state, for `/metrics`.
//! - [`dashboard`]: the web page.
//! - [`logging`]: log lines for the journal (priorities) or a terminal.
//! - [`server`]: start-up and graceful shutdown of `compass-budgetd`.
//! - [`cli`]: `compass budget ...` and `compass why JOBID`.
//! - [`localtime`]: times printed as local date-times.

pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub mod cycle;
pub mod dashboard;
pub mod db;
pub mod enforce;
pub mod error;
pub mod localtime;
pub mod logging;
pub mod metrics;
pub mod privacy;
pub mod sacctmgr;
pub mod select_state;
pub mod server;
pub mod slurm;
pub mod state;

pub use error::{BudgetError, Result};
