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
    /// A bad option value or combination of options found after clap's
    /// parsing: exit 2, as clap's own usage errors (`compass --help`).
    #[error("{0}")]
    Usage(String),
    /// Anything else: bad input data (a trace, a budget tree, a state
    /// file), a failed run. Exit 1.
    #[error("{0}")]
    Failed(String),
    /// A command that talks to compass-budgetd failed; carries its exit
    /// status ([`compass_budget::cli::exit`]).
    #[error(transparent)]
    Service(#[from] compass_budget::BudgetError),
}

impl CliError {
    /// The process exit status, as `compass --help` gives them
    /// ([`compass_budget::cli::EXIT_HELP`]): 2 for a usage error, the
    /// service command's own (3 not found, 4 not allowed, 5 service down),
    /// else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => compass_budget::cli::exit::USAGE,
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
