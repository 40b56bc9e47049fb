//! The site config file shared by both plugins (`etc/compass.conf`, TOML).
//! Every key is optional; a missing file means all defaults.
//!
//! ```toml
//! [spank]
//! max_min_runtime = "8h"       # site cap on --min-runtime
//! default_min_runtime = "0"    # jobs without --min-runtime
//! default_resumable = false    # jobs without --resumable
//!
//! [select]
//! enabled = true               # false: plain cons_tres (narrows nothing)
//! state_file = "/run/compass/state.json"
//! stock_plugin = "/usr/lib/x86_64-linux-gnu/slurm-wlm/select_cons_tres.so"
//! migrate = true               # run Compact migrations (requeues)
//! migration_cooldown = "10m"   # never migrate a job twice within this
//! min_run_before_migration = "5m"  # nor during its first minutes
//! migration_cost = "1m"        # one migration of a job that names no cost
//!                              # (`--resumable` without a value)
//! payback = 2                  # move a job only if its remaining run
//!                              # (time limit) is >= payback x its cost
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::duration;
use crate::error::{Error, Result};

/// Default path of the config file (next to slurm.conf).
pub const DEFAULT_PATH: &str = "/etc/slurm/compass.conf";

/// Parsed and validated site config.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub spank: SpankConfig,
    pub select: SelectConfig,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SpankConfig {
    /// Site cap on `--min-runtime`, seconds (default 8 h).
    pub max_min_runtime_s: u64,
    /// Min runtime of jobs that do not give `--min-runtime`, seconds.
    pub default_min_runtime_s: u64,
    /// Whether jobs without `--resumable` are resumable.
    pub default_resumable: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SelectConfig {
    pub enabled: bool,
    pub state_file: String,
    pub stock_plugin: String,
    pub migrate: bool,
    pub migration_cooldown_s: u64,
    pub min_run_before_migration_s: u64,
    /// Cost of one migration of a job that names none, seconds (default 60).
    pub migration_cost_s: u64,
    /// A job moves only when its expected remaining run after the move is
    /// at least `payback` times its migration cost (default 2, `>= 1`).
    pub payback: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            spank: SpankConfig {
                max_min_runtime_s: 8 * 3600,
                default_min_runtime_s: 0,
                default_resumable: false,
            },
            select: SelectConfig {
                enabled: true,
                state_file: "/run/compass/state.json".into(),
                stock_plugin: "/usr/lib/x86_64-linux-gnu/slurm-wlm/select_cons_tres.so".into(),
                migrate: true,
                migration_cooldown_s: 600,
                min_run_before_migration_s: 300,
                migration_cost_s: 60,
                payback: 2.0,
            },
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    spank: RawSpank,
    #[serde(default)]
    select: RawSelect,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSpank {
    max_min_runtime: Option<String>,
    default_min_runtime: Option<String>,
    default_resumable: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSelect {
    enabled: Option<bool>,
    state_file: Option<String>,
    stock_plugin: Option<String>,
    migrate: Option<bool>,
    migration_cooldown: Option<String>,
    min_run_before_migration: Option<String>,
    migration_cost: Option<String>,
    payback: Option<f64>,
}

impl Config {
    /// Reads `path`; a file that does not exist gives the defaults.
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&path.display().to_string(), &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(Error::Config {
                path: path.display().to_string(),
                why: e.to_string(),
            }),
        }
    }

    /// Parses the text of a config file; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Self> {
        let cfg_err = |why: String| Error::Config {
            path: origin.to_string(),
            why: why.replace('\n', " "),
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| cfg_err(e.message().to_string()))?;
        let mut c = Self::default();
        let dur = |key: &str, v: &Option<String>, into: &mut u64| -> Result<()> {
            if let Some(v) = v {
                *into = duration::parse(key, v).map_err(|e| cfg_err(e.to_string()))?;
            }
            Ok(())
        };
        dur(
            "spank.max_min_runtime",
            &raw.spank.max_min_runtime,
            &mut c.spank.max_min_runtime_s,
        )?;
        dur(
            "spank.default_min_runtime",
            &raw.spank.default_min_runtime,
            &mut c.spank.default_min_runtime_s,
        )?;
        if let Some(b) = raw.spank.default_resumable {
            c.spank.default_resumable = b;
        }
        if c.spank.default_min_runtime_s > c.spank.max_min_runtime_s {
            return Err(cfg_err(format!(
                "spank.default_min_runtime ({}) is above spank.max_min_runtime ({})",
                duration::format(c.spank.default_min_runtime_s),
                duration::format(c.spank.max_min_runtime_s)
            )));
        }
        let s = raw.select;
        if let Some(b) = s.enabled {
            c.select.enabled = b;
        }
        if let Some(p) = s.state_file {
            c.select.state_file = p;
        }
        if let Some(p) = s.stock_plugin {
            c.select.stock_plugin = p;
        }
        if let Some(b) = s.migrate {
            c.select.migrate = b;
        }
        dur(
            "select.migration_cooldown",
            &s.migration_cooldown,
            &mut c.select.migration_cooldown_s,
        )?;
        dur(
            "select.min_run_before_migration",
            &s.min_run_before_migration,
            &mut c.select.min_run_before_migration_s,
        )?;
        dur(
            "select.migration_cost",
            &s.migration_cost,
            &mut c.select.migration_cost_s,
        )?;
        if let Some(p) = s.payback {
            if !(p.is_finite() && p >= 1.0) {
                return Err(cfg_err(format!(
                    "select.payback = {p}: must be a number >= 1 (a move must earn back at least its cost)"
                )));
            }
            c.select.payback = p;
        }
        Ok(c)
    }

    /// Validates a user's `--resumable=COST` value: a duration (same forms
    /// as `--min-runtime`), seconds.
    pub fn migration_cost(&self, option: &str, value: &str) -> Result<u64> {
        duration::parse(option, value).map_err(|e| match e {
            Error::BadDuration { value, why, .. } => Error::Invalid(format!(
                "invalid {option} value `{value}`: {why}; give what one requeue and restart costs the job, e.g. `--resumable=5m` (`90` = minutes, `30s`, `1:30:00`), or plain `--resumable` for the site default"
            )),
            other => other,
        })
    }

    /// Validates a user's `--min-runtime` value against the site cap.
    pub fn min_runtime(&self, option: &str, value: &str, config_path: &str) -> Result<u64> {
        let secs = duration::parse(option, value)?;
        if secs > self.spank.max_min_runtime_s {
            return Err(Error::AboveCap {
                option: option.to_string(),
                value: value.to_string(),
                cap: duration::format(self.spank.max_min_runtime_s),
                config: config_path.to_string(),
            });
        }
        Ok(secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("x", "").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.spank.max_min_runtime_s, 28_800);
        assert_eq!(c.select.migration_cooldown_s, 600);
    }

    #[test]
    fn keys_are_read() {
        let c = Config::parse(
            "x",
            "[spank]\nmax_min_runtime = \"2-0\"\ndefault_min_runtime = \"30m\"\ndefault_resumable = true\n\
             [select]\nenabled = false\nstate_file = \"/tmp/s.json\"\nmigration_cooldown = \"1m\"\nmin_run_before_migration = \"0\"\n",
        )
        .unwrap();
        assert_eq!(c.spank.max_min_runtime_s, 172_800);
        assert_eq!(c.spank.default_min_runtime_s, 1800);
        assert!(c.spank.default_resumable);
        assert!(!c.select.enabled);
        assert_eq!(c.select.state_file, "/tmp/s.json");
        assert_eq!(c.select.migration_cooldown_s, 60);
        assert_eq!(c.select.min_run_before_migration_s, 0);
        assert_eq!(c.select.migration_cost_s, 60);
        assert_eq!(c.select.payback, 2.0);
        let c = Config::parse("x", "[select]\nmigration_cost = \"5m\"\npayback = 3.5\n").unwrap();
        assert_eq!(c.select.migration_cost_s, 300);
        assert_eq!(c.select.payback, 3.5);
    }

    #[test]
    fn bad_migration_costs_are_refused() {
        let e = Config::parse("c", "[select]\npayback = 0.5\n").unwrap_err();
        assert!(e.to_string().contains("select.payback"), "{e}");
        let e = Config::parse("c", "[select]\nmigration_cost = \"cheap\"\n").unwrap_err();
        assert!(e.to_string().contains("select.migration_cost"), "{e}");
        let c = Config::default();
        assert_eq!(c.migration_cost("--resumable", "5m"), Ok(300));
        assert_eq!(c.migration_cost("--resumable", "2"), Ok(120));
        let e = c
            .migration_cost("--resumable", "soon")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid --resumable value `soon`") && e.contains("--resumable=5m"),
            "{e}"
        );
    }

    #[test]
    fn bad_files_are_refused_with_the_key() {
        let e = Config::parse("/etc/c.conf", "[spank]\nmax_min_runtime = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/etc/c.conf: ") && e.contains("spank.max_min_runtime"),
            "{e}"
        );
        let e = Config::parse("/etc/c.conf", "[spank]\nmax_runtime = \"1h\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_runtime"), "{e}");
        let e = Config::parse(
            "c",
            "[spank]\nmax_min_runtime = \"1h\"\ndefault_min_runtime = \"2h\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("above"), "{e}");
    }

    #[test]
    fn cap_is_enforced_and_named() {
        let c = Config::default();
        assert_eq!(
            c.min_runtime("--min-runtime", "8h", "/etc/slurm/compass.conf"),
            Ok(28_800)
        );
        let e = c
            .min_runtime("--min-runtime", "8:00:01", "/etc/slurm/compass.conf")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--min-runtime=8:00:01 exceeds the site cap of 8:00:00 (set max_min_runtime in /etc/slurm/compass.conf)"
        );
    }

    #[test]
    fn missing_file_is_defaults() {
        let c = Config::load(Path::new("/nonexistent/compass.conf")).unwrap();
        assert_eq!(c, Config::default());
    }
}
