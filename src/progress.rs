//! A progress bar on stderr for replays longer than about a second; hidden
//! when stderr is not a terminal or with `--quiet`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use compass_core::placement::PlacementPolicy;
use compass_core::sim::{Event, Observer};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    enabled: bool,
    shown: bool,
    calls: u64,
}

impl Progress {
    pub fn new(label: &str, total: u64, quiet: bool) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        if let Ok(style) =
            ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} jobs ({eta})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_string());
        Self {
            bar,
            started: Instant::now(),
            enabled: !quiet && std::io::stderr().is_terminal(),
            shown: false,
            calls: 0,
        }
    }

    pub fn finish(&self) {
        if self.shown {
            self.bar.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn after_event(&mut self, _event: &Event<'_>, _policy: &dyn PlacementPolicy) {}

    fn progress(&mut self, finished: u64, _total: u64) {
        self.calls += 1;
        if self.calls & 255 != 0 || !self.enabled {
            return;
        }
        if !self.shown && self.started.elapsed() > Duration::from_secs(1) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        if self.shown {
            self.bar.set_position(finished);
        }
    }
}
