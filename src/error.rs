//! The one error type of the `compass` binary.

use compass_core::CoreError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("chart {path}: {why}")]
    Chart { path: String, why: String },
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
    /// A command that talks to compass-budgetd failed; carries its exit
    /// status ([`compass_budget::cli::exit`]).
    #[error(transparent)]
    Service(#[from] compass_budget::BudgetError),
}

impl CliError {
    /// The process exit status: 1, or the service command's own
    /// (3 not found, 4 not allowed, 5 service down).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Service(e) => e.exit_code(),
            _ => compass_budget::cli::exit::FAILURE,
        }
    }

    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_string(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, CliError>;
