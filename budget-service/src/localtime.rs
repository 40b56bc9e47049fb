//! Times as people read them: local date-times, the way Slurm prints them
//! (`2026-11-30T22:45:10`) in text, ISO 8601 with the offset
//! (`2026-11-30T22:45:10+01:00`) where a machine reads them. The time zone
//! is the process's (`TZ`, else /etc/localtime), through `localtime_r(3)`.

/// The broken-down local time of `unix` seconds and its UTC offset in
/// seconds; `None` if the C library cannot represent it.
fn local(unix: i64) -> Option<(libc::tm, i64)> {
    // time_t is i64 on every 64-bit Linux this builds for.
    let t: libc::time_t = unix;
    // SAFETY: an all-zero `tm` is a valid value (integers and a null
    // pointer); localtime_r only writes into it and reads `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers point to live, properly aligned values for the
    // duration of the call; localtime_r is the thread-safe variant.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        return None;
    }
    let off = tm.tm_gmtoff;
    Some((tm, off))
}

fn date_time(tm: &libc::tm) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        i64::from(tm.tm_year) + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// Local date-time as Slurm's tools print it: `2026-11-30T22:45:10`.
pub fn text(unix: i64) -> String {
    match local(unix) {
        Some((tm, _)) => date_time(&tm),
        None => format!("@{unix}"),
    }
}

/// Local date-time in ISO 8601 with the UTC offset: `2026-11-30T22:45:10+01:00`.
pub fn iso(unix: i64) -> String {
    match local(unix) {
        Some((tm, off)) => {
            let sign = if off < 0 { '-' } else { '+' };
            let a = off.unsigned_abs();
            format!(
                "{}{sign}{:02}:{:02}",
                date_time(&tm),
                a / 3600,
                (a % 3600) / 60
            )
        }
        None => format!("@{unix}"),
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm), in
/// `i128`; `None` when that overflows (a year of 33 digits or more: a panic
/// in a debug build before). `m` is 1..=12 and `d` 1..=31.
fn days_from_civil(y: i128, m: i128, d: i128) -> Option<i128> {
    let (y, m) = if m <= 2 {
        (y.checked_sub(1)?, m + 9)
    } else {
        (y, m - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era.checked_mul(146_097)?
        .checked_add(doe)?
        .checked_sub(719_468)
}

/// Days in month `m` of year `y` (proleptic Gregorian).
fn month_days(y: i128, m: i128) -> i128 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Unix seconds of an ISO 8601 date-time with an offset or `Z`
/// (`2026-11-30T22:45:10+01:00`, what [`iso`] writes, also past year 9999);
/// `None` otherwise: a day the month lacks (`2026-02-31`), an offset past
/// `23:59`, or a time past what `i64` seconds hold (issue #11: a year of 15
/// digits overflowed, a panic in a debug build and a wrong date in a
/// release one).
pub fn parse_iso(s: &str) -> Option<i64> {
    // Every form read is ASCII; slicing a zone offset of multi-byte
    // characters by byte panicked (`+0\u{e9}00`: a 500 before).
    if !s.is_ascii() {
        return None;
    }
    let digits = |t: &str, n: usize| -> Option<i128> {
        (t.len() >= n && t.bytes().all(|c| c.is_ascii_digit())).then(|| t.parse().ok())?
    };
    let (date, rest) = s.split_once('T')?;
    let mut d = date.split('-');
    let (y, mo, day) = (
        digits(d.next()?, 4)?,
        digits(d.next()?, 2)?,
        digits(d.next()?, 2)?,
    );
    if d.next().is_some() || rest.len() < 9 || !rest.is_char_boundary(8) {
        return None;
    }
    let (clock, zone) = rest.split_at(8);
    let mut c = clock.split(':');
    let (h, mi, se) = (
        digits(c.next()?, 2)?,
        digits(c.next()?, 2)?,
        digits(c.next()?, 2)?,
    );
    if !(1..=12).contains(&mo)
        || !(1..=month_days(y, mo)).contains(&day)
        || h > 23
        || mi > 59
        || se > 60
    {
        return None;
    }
    let off = match zone {
        "Z" => 0,
        z if z.len() == 6 && z.is_char_boundary(1) && &z[3..4] == ":" => {
            let (oh, om) = (digits(&z[1..3], 2)?, digits(&z[4..6], 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let v = oh * 3600 + om * 60;
            match &z[..1] {
                "+" => v,
                "-" => -v,
                _ => return None,
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, day)?
        .checked_mul(86_400)?
        .checked_add(h * 3600 + mi * 60 + se - off)?;
    i64::try_from(secs).ok()
}

/// A time of the API's JSON: an ISO 8601 string (API version 2), or Unix
/// seconds (version 1).
pub fn from_json(v: &serde_json::Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str().and_then(parse_iso))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_iso_reads_what_iso_writes_and_refuses_the_rest() {
        for unix in [0_i64, 1_795_963_760, 1_700_000_000, 1_719_792_000] {
            assert_eq!(parse_iso(&iso(unix)), Some(unix), "{}", iso(unix));
        }
        assert_eq!(parse_iso("2026-12-01T03:10:00+00:00"), Some(1_796_094_600));
        assert_eq!(parse_iso("2026-12-01T04:10:00+01:00"), Some(1_796_094_600));
        assert_eq!(parse_iso("2026-12-01T03:10:00Z"), Some(1_796_094_600));
        for bad in [
            "",
            "2026-12-01",
            "2026-12-01T03:10:00",
            "2026-13-01T03:10:00Z",
            "2026-12-01T03:10:00+0100",
            "x026-12-01T03:10:00Z",
            // A day the month lacks, an offset no zone has.
            "2026-02-31T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-12-01T03:10:00+99:99",
            "2026-12-01T03:10:00+12:60",
            // Past what i64 seconds hold (a panic in a debug build, a date
            // of 2027 in a release one, before).
            "100000000000000-01-01T00:00:00Z",
            "135616539428921-07-02T00:00:00Z",
            "292277026597-01-01T00:00:00Z",
            "999999999999999999999999999999999999999999-01-01T00:00:00Z",
            // Years whose seconds overflow i128 (a panic in a debug build).
            "100000000000000000000000000000000-01-01T00:00:00Z",
            "170141183460469231731687303715884105727-12-31T23:59:59Z",
            "-01-01T00:00:00Z",
            // Non-ASCII offsets and fields (a panic slicing them, before).
            "2026-01-01T00:00:00+0\u{e9}00",
            "2026-01-01T00:00:00\u{e9}0:00",
            "2026-01-01T00:00:00+\u{e9}:00",
            "2026-01-01T00:00:0\u{e9}Z",
            "2026-0\u{e9}-01T00:00:00Z",
            "\u{1f600}-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_iso(bad), None, "{bad}");
        }
        assert_eq!(parse_iso("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(parse_iso("2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(parse_iso("1900-02-29T00:00:00Z"), None);
        assert_eq!(parse_iso("10000-01-01T00:00:00Z"), Some(253_402_300_800));
        assert_eq!(from_json(&serde_json::json!(5)), Some(5));
        assert_eq!(
            from_json(&serde_json::json!("1970-01-01T00:00:05Z")),
            Some(5)
        );
        assert_eq!(from_json(&serde_json::Value::Null), None);
    }

    /// The offset printed is the one that maps the local fields back to
    /// the same instant, whatever the time zone the test runs in.
    #[test]
    fn iso_round_trips_through_its_offset() {
        for unix in [0_i64, 1_795_963_760, 1_700_000_000, 1_719_792_000] {
            let s = iso(unix);
            assert_eq!(s.len(), 25, "{s}");
            assert!(s.starts_with(&text(unix)), "{s}");
            let f = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap();
            let (y, mo, d, h, mi, se) =
                (f(0, 4), f(5, 7), f(8, 10), f(11, 13), f(14, 16), f(17, 19));
            let off = (f(20, 22) * 3600 + f(23, 25) * 60) * if &s[19..20] == "-" { -1 } else { 1 };
            // Days from the civil date (Howard Hinnant's algorithm).
            let (yy, mm) = if mo <= 2 {
                (y - 1, mo + 9)
            } else {
                (y, mo - 3)
            };
            let era = yy.div_euclid(400);
            let yoe = yy - era * 400;
            let doy = (153 * mm + 2) / 5 + d - 1;
            let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
            let days = era * 146_097 + doe - 719_468;
            assert_eq!(days * 86_400 + h * 3600 + mi * 60 + se - off, unix, "{s}");
        }
    }
}
