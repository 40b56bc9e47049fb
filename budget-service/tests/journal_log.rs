//! The real compass-budgetd's log lines as the journal gets them: with
//! `JOURNAL_STREAM` naming its stdout (what systemd sets), every line
//! starts with its syslog priority (`<3>` errors, `<4>` warnings, `<6>`
//! info) and carries no timestamp of its own; without it (or when the
//! variable names another stream) lines are timestamped and unprefixed.

mod common;

use common::TempDir;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn has_timestamp(line: &str) -> bool {
    let b = line.as_bytes();
    (0..b.len().saturating_sub(10)).any(|i| {
        b[i..i + 4].iter().all(u8::is_ascii_digit)
            && b[i + 4] == b'-'
            && b[i + 7] == b'-'
            && b[i + 10] == b'T'
    })
}

/// Runs the daemon with stdout to `out` (JOURNAL_STREAM = its device and
/// inode when `journal`, a wrong one when `Some(false)`), until its output
/// contains `until`, then stops it with SIGTERM.
fn run(dir: &Path, name: &str, journal: Option<bool>, args: &[&str], until: &str) -> String {
    let out = dir.join(name);
    let f = std::fs::File::create(&out).unwrap();
    let meta = f.metadata().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compass-budgetd"));
    cmd.args(args)
        .stdout(f)
        .stderr(Stdio::null())
        .env_remove("JOURNAL_STREAM")
        .env("RUST_LOG", "info");
    match journal {
        Some(true) => {
            cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
        }
        Some(false) => {
            cmd.env(
                "JOURNAL_STREAM",
                format!("{}:{}", meta.dev(), meta.ino() + 1),
            );
        }
        None => {}
    }
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(&out).unwrap();
        if text.contains(until) {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            assert!(!st.success(), "exited early: {text}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no `{until}` in:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    std::fs::read_to_string(&out).unwrap()
}

#[test]
fn journal_lines_carry_priorities_and_no_timestamps() {
    let dir = TempDir::new("journal");
    let cfg = dir.path().join("budgetd.toml");
    // A Slurm snapshot file that does not exist: every cycle fails (warning).
    std::fs::write(
        &cfg,
        format!(
            "db = \"{}\"\ncapacity_gpus = 8\ncycle_s = 1\nslurm = \"file\"\nslurm_file = \"{}\"\n",
            dir.path().join("budget.db").display(),
            dir.path().join("missing.json").display()
        ),
    )
    .unwrap();
    // Port 0: the kernel picks a free one (nothing here connects to it).
    let args = ["--config", cfg.to_str().unwrap(), "--listen", "127.0.0.1:0"];

    let text = run(dir.path(), "journal.out", Some(true), &args, "cycle failed");
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let p = l.as_bytes();
        assert!(
            p.len() > 3 && p[0] == b'<' && (b'0'..=b'7').contains(&p[1]) && p[2] == b'>',
            "no priority prefix: {l}"
        );
        assert!(!has_timestamp(l), "timestamp under the journal: {l}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<6>") && l.contains("listening")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<4>") && l.contains("cycle failed")),
        "{text}"
    );

    // Not the journal (no variable, or one naming another stream): plain
    // timestamped lines.
    for (name, journal) in [("plain.out", None), ("other.out", Some(false))] {
        let text = run(dir.path(), name, journal, &args, "cycle failed");
        for l in text.lines() {
            assert!(!l.starts_with('<'), "{name}: {l}");
            assert!(has_timestamp(l), "{name}: no timestamp: {l}");
        }
    }

    // A fatal error at start-up reaches the journal as an error.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "db = \"x.db\"\ncapacity_gpus = 0\n").unwrap();
    let text = run(
        dir.path(),
        "fatal.out",
        Some(true),
        &["--config", bad.to_str().unwrap(), "--listen", "127.0.0.1:0"],
        "<3>",
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("<3>") && l.contains("capacity_gpus must be at least 1")),
        "{text}"
    );
}
