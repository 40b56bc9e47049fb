//! Logging of `compass-budgetd` (`tracing`).
//!
//! Under systemd the output goes to the journal (`JOURNAL_STREAM` names the
//! stream, see systemd.exec(5)). There each line starts with its syslog
//! priority in sd-daemon(3) form (`<3>` error, `<4>` warning, `<6>` info,
//! `<7>` debug and trace), so `journalctl -p err -u compass-budgetd` finds
//! the errors, and carries no timestamp of its own (the journal stamps every
//! line; a second one would only be noise). Anywhere else (a terminal, a
//! file): timestamped lines as before, ANSI colours on a terminal only.

use std::fmt;
use std::io::IsTerminal;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The sd-daemon(3) priority prefix of a level.
pub fn priority(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "<3>",
        Level::WARN => "<4>",
        Level::INFO => "<6>",
        _ => "<7>",
    }
}

/// Is standard output the journal stream systemd connected? `JOURNAL_STREAM`
/// is `DEVICE:INODE` of that stream; it must match stdout's (a child started
/// from a journal-connected shell inherits the variable, not the stream).
pub fn stdout_is_journal() -> bool {
    let Ok(v) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `struct stat` into valid memory.
    if unsafe { libc::fstat(libc::STDOUT_FILENO, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, the struct is initialised.
    let st = unsafe { st.assume_init() };
    st.st_dev == dev && st.st_ino == ino
}

/// Prefixes each event with its [`priority`].
pub struct JournalPriority<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for JournalPriority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writer.write_str(priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// Installs the global subscriber on stdout: journal form when stdout is
/// the journal, else timestamped lines. Level filter: `RUST_LOG` (default
/// `info`). Returns whether the journal form is on.
pub fn init() -> bool {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let journal = stdout_is_journal();
    if journal {
        let format = tracing_subscriber::fmt::format()
            .without_time()
            .with_ansi(false);
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .event_format(JournalPriority(format))
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::stdout().is_terminal())
            .init();
    }
    journal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_follow_syslog() {
        assert_eq!(priority(&Level::ERROR), "<3>");
        assert_eq!(priority(&Level::WARN), "<4>");
        assert_eq!(priority(&Level::INFO), "<6>");
        assert_eq!(priority(&Level::DEBUG), "<7>");
        assert_eq!(priority(&Level::TRACE), "<7>");
    }
}
