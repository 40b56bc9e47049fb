//! The one duration parser of compass, and the one duration format.
//!
//! Accepted: Slurm's time formats (`sbatch --time`): `M`, `M:S`, `H:M:S`,
//! `D-H`, `D-H:M`, `D-H:M:S`; plus a whole number with a unit suffix `s`,
//! `m`, `h` or `d` (`30s`, `30m`, `4h`, `2d`). A bare number is minutes, as
//! in Slurm. Used by `sbatch --min-runtime` and `--resumable=COST` (SPANK),
//! `compass.conf`, the budget service's TOML and the `compass simulate` /
//! `compass replay` flags ([`parse_unambiguous`]: there a bare number used to
//! mean seconds, so it is refused rather than silently read as minutes).
//!
//! Printed durations use Slurm's format too ([`format`](fn@format): `4:00:00`,
//! `1-00:00:00`).

use crate::error::{CoreError, Result};

/// What the errors list as accepted.
pub const FORMS: &str = "minutes (`90`), [days-]hours:minutes:seconds (`4:00:00`), minutes:seconds (`90:30`), days-hours[:minutes[:seconds]] (`1-0`), or a whole number with s/m/h/d (`30s`, `30m`, `4h`, `2d`)";

/// Parses a duration in Slurm's formats (a bare number is minutes) into
/// whole seconds.
pub fn parse(value: &str) -> Result<u64> {
    let bad = |why: &str| CoreError::BadDuration {
        value: value.to_string(),
        why: why.to_string(),
    };
    let v = value.trim();
    if v.is_empty() {
        return Err(bad("empty"));
    }
    if let Some(unit) = v.chars().last().filter(|c| c.is_ascii_alphabetic()) {
        let mult = match unit.to_ascii_lowercase() {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad(&format!("unknown unit `{unit}`"))),
        };
        let n =
            number(&v[..v.len() - 1]).ok_or_else(|| bad("not a whole number before the unit"))?;
        return n.checked_mul(mult).ok_or_else(|| bad("too large"));
    }
    let (days, rest) = match v.split_once('-') {
        Some((d, rest)) => (
            Some(number(d).ok_or_else(|| bad("days must be a whole number"))?),
            rest,
        ),
        None => (None, v),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        nums.push(number(p).ok_or_else(|| bad("every field must be a whole number"))?);
    }
    let secs = match (days, nums.as_slice()) {
        (None, [m]) => m.checked_mul(60),
        (None, [m, s]) => sixty(*s).and_then(|s| m.checked_mul(60).and_then(|m| m.checked_add(s))),
        (None, [h, m, s]) => hms(*h, *m, *s),
        (Some(d), [h]) => hms(*h, 0, 0).and_then(|t| add_days(d, t)),
        (Some(d), [h, m]) => hms(*h, *m, 0).and_then(|t| add_days(d, t)),
        (Some(d), [h, m, s]) => hms(*h, *m, *s).and_then(|t| add_days(d, t)),
        _ => return Err(bad("too many `:` fields")),
    };
    secs.ok_or_else(|| bad("minutes and seconds must be below 60, and the total must fit"))
}

/// Like [`parse`], but a bare number other than `0` is an error that names
/// the explicit forms: for flags and keys where a bare number once meant
/// seconds (`compass simulate --cycle 60`, integer `_s` keys of the service's
/// TOML written as strings), so that no value silently changes meaning.
pub fn parse_unambiguous(value: &str) -> Result<u64> {
    let v = value.trim();
    if !v.is_empty() && v != "0" && v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CoreError::AmbiguousDuration(v.to_string()));
    }
    parse(value)
}

/// Formats seconds the way Slurm prints times: `[D-]H:MM:SS`
/// (`4:00:00`, `1-00:00:00`).
pub fn format(secs: u64) -> String {
    let (d, r) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (r / 3600, (r % 3600) / 60, r % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h}:{m:02}:{s:02}")
    }
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn sixty(v: u64) -> Option<u64> {
    (v < 60).then_some(v)
}

fn hms(h: u64, m: u64, s: u64) -> Option<u64> {
    let (m, s) = (sixty(m)?, sixty(s)?);
    h.checked_mul(3600)?.checked_add(m * 60 + s)
}

fn add_days(d: u64, t: u64) -> Option<u64> {
    d.checked_mul(86_400)?.checked_add(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &str) -> Result<u64> {
        parse(v)
    }

    #[test]
    fn slurm_time_formats() {
        assert_eq!(p("90"), Ok(5400));
        assert_eq!(p("0"), Ok(0));
        assert_eq!(p("90:30"), Ok(5430));
        assert_eq!(p("4:00:00"), Ok(14_400));
        assert_eq!(p("1-0"), Ok(86_400));
        assert_eq!(p("1-2:30"), Ok(86_400 + 2 * 3600 + 30 * 60));
        assert_eq!(p("2-01:02:03"), Ok(2 * 86_400 + 3723));
    }

    #[test]
    fn unit_suffixes() {
        assert_eq!(p("30m"), Ok(1800));
        assert_eq!(p("4h"), Ok(14_400));
        assert_eq!(p("45s"), Ok(45));
        assert_eq!(p("2d"), Ok(172_800));
        assert_eq!(p("4H"), Ok(14_400));
    }

    #[test]
    fn bad_values_name_the_option_and_forms() {
        for bad in [
            "",
            "bogus",
            "4x",
            "h",
            "-1",
            "1:60",
            "1:2:3:4",
            "1-",
            "-5",
            "1.5h",
            "4:00:60",
            " m",
            "99999999999999999999",
        ] {
            let err = p(bad).expect_err(bad).to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
            assert!(err.contains("`4:00:00`") && err.contains("`30m`"), "{err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn unambiguous_refuses_bare_numbers_but_not_zero() {
        let err = parse_unambiguous("90").unwrap_err().to_string();
        assert!(err.contains("`90s`") && err.contains("`90m`"), "{err}");
        assert!(
            err.contains("ambiguous") && !err.contains("minutes (`90`)"),
            "{err}"
        );
        assert_eq!(parse_unambiguous("0"), Ok(0));
        assert_eq!(parse_unambiguous("90s"), Ok(90));
        assert_eq!(parse_unambiguous("1:30"), Ok(90));
        assert_eq!(parse_unambiguous("7-0"), Ok(7 * 86_400));
        assert!(parse_unambiguous("x").is_err());
    }

    #[test]
    fn format_round_trips() {
        for s in [0, 59, 5400, 14_400, 86_400, 2 * 86_400 + 3723] {
            assert_eq!(p(&format(s)), Ok(s), "{}", format(s));
        }
        assert_eq!(format(28_800), "8:00:00");
        assert_eq!(format(90_061), "1-01:01:01");
    }
}
