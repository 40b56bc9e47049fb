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
}

impl CliError {
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_string(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, CliError>;
