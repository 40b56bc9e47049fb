//! The one error type of this crate.

/// Everything this crate refuses; messages are shown to users as they are
/// (one line, naming the option or file and what is accepted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid {option} value `{value}`: {why}; accepted forms: minutes (`90`), [days-]hours:minutes:seconds (`4:00:00`), minutes:seconds (`90:30`), days-hours[:minutes[:seconds]] (`1-0`), or a number with s/m/h/d (`30m`, `4h`); `0` means no protected time")]
    BadDuration {
        option: String,
        value: String,
        why: String,
    },
    #[error("{option}={value} exceeds the site cap of {cap} (set max_min_runtime in {config})")]
    AboveCap {
        option: String,
        value: String,
        cap: String,
        config: String,
    },
    #[error("{path}: {why}")]
    Config { path: String, why: String },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, Error>;
