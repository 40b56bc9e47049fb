//! The one error type of the budget service.

use compass_core::CoreError;

/// Everything the service, its storage, its Slurm I/O and the CLI can refuse.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// Bad input in a named field (HTTP 422).
    #[error("field `{field}`: {why}")]
    Field { field: String, why: String },
    /// The tree maths refused (HTTP 422; names the node and field).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Malformed request body or file (HTTP 400).
    #[error("malformed input{}: {why}", field.as_deref().map(|f| format!(" at `{f}`")).unwrap_or_default())]
    Malformed { field: Option<String>, why: String },
    #[error("request body larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    #[error("refused: {what}: {why}")]
    Forbidden { what: String, why: String },
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    /// The stored tree fails validation (a hand-edited database, or a rule
    /// added by an upgrade); HTTP 409, saying how to repair it.
    #[error(
        "the stored budget tree is invalid: {0}. An admin can repair it: import a whole valid \
         tree (`compass budget import FILE --why ... --yes`, POST /api/v1/import), or edit or remove \
         the node named (`compass budget set-share|move|remove`, PATCH or DELETE /api/v1/nodes/NAME)"
    )]
    InvalidStoredTree(String),
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error(
        "database schema version {found} is newer than this build knows ({known}); refusing to run"
    )]
    SchemaTooNew { found: i64, known: i64 },
    #[error("config {path}: {why}")]
    Config { path: String, why: String },
    #[error("slurm: {0}")]
    Slurm(String),
    #[error("munge: {0}")]
    Munge(String),
    #[error("http: {0}")]
    Http(String),
    /// A dependency (munged, the passwd database, SQLite, slurmctld) did not
    /// answer within the request timeout, or too many requests already wait
    /// on it (HTTP 503). The request may still complete in the background.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The service answered with an error status (the CLI's view of it).
    #[error("{status} {message}")]
    Api { status: u16, message: String },
    /// The service could not be reached (connection refused, DNS, TLS).
    #[error("cannot reach compass-budgetd at {url}: {why}")]
    Unreachable { url: String, why: String },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A bad option value or a missing argument found by the CLI after
    /// clap's parsing (exit 2, as clap's own usage errors).
    #[error("{0}")]
    Usage(String),
}

pub type Result<T> = std::result::Result<T, BudgetError>;

impl BudgetError {
    pub fn field(field: &str, why: impl Into<String>) -> Self {
        BudgetError::Field {
            field: field.to_string(),
            why: why.into(),
        }
    }
}
