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

#[cfg(test)]
mod tests {
    use super::*;

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
