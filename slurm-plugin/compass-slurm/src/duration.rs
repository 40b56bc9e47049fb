//! `--min-runtime` and `--resumable=COST` durations, in whole seconds:
//! [`compass_core::duration`] (Slurm's forms, a bare number is minutes),
//! with errors that name the option. `0` means no protected time (the whole
//! run is preemptible).

use crate::error::{Error, Result};
use compass_core::CoreError;

pub use compass_core::duration::format;

/// Parses `value` given for `option` (named in the error message).
pub fn parse(option: &str, value: &str) -> Result<u64> {
    compass_core::duration::parse(value).map_err(|e| match e {
        CoreError::BadDuration { value, why } => Error::BadDuration {
            option: option.to_string(),
            value,
            why,
        },
        other => Error::Invalid(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_by_default_and_errors_name_the_option() {
        assert_eq!(parse("--min-runtime", "90"), Ok(5400));
        assert_eq!(parse("--min-runtime", "4h"), Ok(14_400));
        let err = parse("--min-runtime", "4x").unwrap_err().to_string();
        assert!(err.starts_with("invalid --min-runtime value `4x`"), "{err}");
        assert!(err.contains("`4:00:00`") && err.contains("`30m`"), "{err}");
        assert!(err.contains("`0` means no protected time"), "{err}");
    }
}
