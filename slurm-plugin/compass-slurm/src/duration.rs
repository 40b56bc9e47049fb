//! `--min-runtime` durations, in whole seconds.
//!
//! Accepted: Slurm's time formats (`sbatch --time`): `M`, `M:S`, `H:M:S`,
//! `D-H`, `D-H:M`, `D-H:M:S`; plus a number with a unit suffix `s`, `m`,
//! `h` or `d` (`30m`, `4h`). `0` means no protected time (the whole run is
//! preemptible).

use crate::error::{Error, Result};

/// Parses `value` given for `option` (named in the error message).
pub fn parse(option: &str, value: &str) -> Result<u64> {
    let bad = |why: &str| Error::BadDuration {
        option: option.to_string(),
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

/// Formats seconds the way Slurm prints times: `[D-]HH:MM:SS`.
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
        parse("--min-runtime", v)
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
            assert!(err.contains("--min-runtime"), "{err}");
            assert!(err.contains("`4:00:00`") && err.contains("`30m`"), "{err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
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
