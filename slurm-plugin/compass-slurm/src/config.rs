//! The site config file shared by both plugins (`etc/compass.conf`, TOML).
//! Every key is optional; a missing file means all defaults. Unknown
//! sections and keys are ignored with a warning
//! ([`Config::load_with_warnings`]): a typo, or a key of a newer release,
//! must not stop sbatch on every node. A file that cannot be read or parsed,
//! or a value of the wrong type or out of range, is an error.
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
//! # stock_plugin: the cons_tres forwarded to; default: that of the Slurm
//! # the plugin was built against (Debian's: /usr/lib/x86_64-linux-gnu/
//! # slurm-wlm/select_cons_tres.so; COMPASS_SLURM_PREFIX=P: P/lib/slurm/...)
//! stock_plugin = "/opt/slurm-24.11/lib/slurm/select_cons_tres.so"
//! migrate = true               # run Compact migrations (requeues)
//! migration_cooldown = "10m"   # never migrate a job twice within this
//! min_run_before_migration = "5m"  # nor during its first minutes
//! migration_cost = "1m"        # one migration of a job that names no cost
//!                              # (`--resumable` without a value)
//! payback = 2                  # move a job only if its remaining run
//!                              # (time limit) is >= payback x its cost
//! move_when = "pays"           # move jobs when the moves start a waiting
//!                              # GPU job, or pay for themselves (always |
//!                              # waiting | fits | starts | pays)
//! tidy_payback = 20            # pays: a move that starts nobody only for
//!                              # jobs expected (by recent runs) to run
//!                              # >= tidy_payback x their cost after it
//! log_decisions = false        # each job_test decision at verbose level
//!                              # without DebugFlags=SelectType
//! pools_by_partition = true    # one engine per group of partitions that
//!                              # share no node
//! ```

use std::path::Path;

use compass_core::placement::worth::MoveWhen;
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
    /// The stock cons_tres forwarded to; `None`: the one of the Slurm the
    /// select plugin was built against (the plugin knows where it is).
    pub stock_plugin: Option<String>,
    pub migrate: bool,
    pub migration_cooldown_s: u64,
    pub min_run_before_migration_s: u64,
    /// Cost of one migration of a job that names none, seconds (default 60).
    pub migration_cost_s: u64,
    /// A job moves only when its expected remaining run after the move is
    /// at least `payback` times its migration cost (default 2, `>= 1`).
    pub payback: f64,
    /// When any job may move at all ([`MoveWhen::allows`], the simulator's
    /// `--move-when`): default [`MoveWhen::SELECT_DEFAULT`] (`pays`: when
    /// the moves let a waiting GPU job start, or pay for themselves).
    pub move_when: MoveWhen,
    /// Under `move_when = "pays"`: a move that lets no waiting job start is
    /// made only for a job expected to run at least this many times its
    /// cost after it ([`compass_core::placement::worth::MigrationRule::tidy_payback`]).
    pub tidy_payback: f64,
    /// Log each job_test decision at verbose level even without
    /// `DebugFlags=SelectType` (which also turns on cons_tres's own, far
    /// more numerous lines). Default false; the lab clusters and the demo
    /// set it (their reports read these lines).
    pub log_decisions: bool,
    /// One set of pools per partition group (partitions that share no
    /// node; `compass_core::placement::pools::partition_groups`): Theorem
    /// 1's bound then holds per group with no job held, and the layout is
    /// less fragmented on average than with one engine holding each job
    /// inside its partition, for a few more migrations (docs/results.md,
    /// "Pools per partition group"). Default true; false: one engine per
    /// kind of node over every partition.
    pub pools_by_partition: bool,
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
                stock_plugin: None,
                migrate: true,
                migration_cooldown_s: 600,
                min_run_before_migration_s: 300,
                migration_cost_s: 60,
                payback: 2.0,
                move_when: MoveWhen::SELECT_DEFAULT,
                tidy_payback: compass_core::placement::worth::DEFAULT_TIDY_PAYBACK,
                log_decisions: false,
                pools_by_partition: true,
            },
        }
    }
}

/// Sections and keys of the file (others are ignored with a warning).
const KNOWN: &[(&str, &[&str])] = &[
    (
        "spank",
        &[
            "max_min_runtime",
            "default_min_runtime",
            "default_resumable",
        ],
    ),
    (
        "select",
        &[
            "enabled",
            "state_file",
            "stock_plugin",
            "migrate",
            "migration_cooldown",
            "min_run_before_migration",
            "migration_cost",
            "payback",
            "move_when",
            "tidy_payback",
            "log_decisions",
            "pools_by_partition",
        ],
    ),
];

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
    move_when: Option<String>,
    tidy_payback: Option<f64>,
    log_decisions: Option<bool>,
    pools_by_partition: Option<bool>,
}

impl Config {
    /// Reads `path`; a file that does not exist gives the defaults.
    /// Unknown sections and keys are ignored (see
    /// [`Config::load_with_warnings`] to report them).
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_with_warnings(path).map(|(c, _)| c)
    }

    /// Reads `path` like [`Config::load`], and returns one warning per
    /// unknown section or key (`PATH: unknown key `spank.x` ignored`).
    pub fn load_with_warnings(path: &Path) -> Result<(Self, Vec<String>)> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse_with_warnings(&path.display().to_string(), &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Self::default(), vec![])),
            Err(e) => Err(Error::Config {
                path: path.display().to_string(),
                why: e.to_string(),
            }),
        }
    }

    /// `select.stock_plugin` of the file at `path`, read even when the file
    /// does not load as a whole (a bad value elsewhere, or a TOML syntax
    /// error on another line): the select plugin falls back to plain
    /// cons_tres on such a file, and must then forward to the cons_tres the
    /// admin named (the default is Debian's 22.05 one, whose entry points
    /// another release must never call). `None`: not set, or unreadable.
    pub fn stock_plugin_of(path: &Path) -> Option<String> {
        Self::stock_plugin_in(&std::fs::read_to_string(path).ok()?)
    }

    /// [`Config::stock_plugin_of`] on the text of a config file.
    pub fn stock_plugin_in(text: &str) -> Option<String> {
        let value = |t: &toml::Table| {
            t.get("select")?
                .get("stock_plugin")?
                .as_str()
                .map(str::to_string)
        };
        if let Ok(t) = toml::from_str::<toml::Table>(text) {
            return value(&t);
        }
        // Line by line: section headers, and the one key in `[select]`.
        let mut section = "";
        for line in text.lines().map(str::trim) {
            if let Some(h) = line.strip_prefix('[') {
                section = h.split(']').next().unwrap_or("").trim();
            } else if section == "select" && line.starts_with("stock_plugin") {
                if let Ok(v) = toml::from_str::<toml::Table>(line) {
                    return v.get("stock_plugin")?.as_str().map(str::to_string);
                }
            }
        }
        None
    }

    /// Parses the text of a config file; `origin` names it in errors.
    /// Unknown sections and keys are ignored.
    pub fn parse(origin: &str, text: &str) -> Result<Self> {
        Self::parse_with_warnings(origin, text).map(|(c, _)| c)
    }

    /// Parses like [`Config::parse`], with the warnings for unknown
    /// sections and keys.
    pub fn parse_with_warnings(origin: &str, text: &str) -> Result<(Self, Vec<String>)> {
        let cfg_err = |why: String| Error::Config {
            path: origin.to_string(),
            why: why.replace('\n', " "),
        };
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| cfg_err(e.message().to_string()))?;
        let mut warnings = Vec::new();
        table.retain(|section, value| {
            let Some(known) = KNOWN.iter().find(|(s, _)| *s == section).map(|(_, k)| k) else {
                warnings.push(format!("{origin}: unknown section `{section}` ignored"));
                return false;
            };
            if let toml::Value::Table(t) = value {
                t.retain(|key, _| {
                    let ok = known.contains(&key);
                    if !ok {
                        warnings.push(format!("{origin}: unknown key `{section}.{key}` ignored"));
                    }
                    ok
                });
            }
            true
        });
        let raw: RawConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| cfg_err(e.message().to_string()))?;
        Self::from_raw(raw, cfg_err).map(|c| (c, warnings))
    }

    fn from_raw(raw: RawConfig, cfg_err: impl Fn(String) -> Error) -> Result<Self> {
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
            c.select.stock_plugin = Some(p);
        }
        if let Some(b) = s.migrate {
            c.select.migrate = b;
        }
        if let Some(b) = s.log_decisions {
            c.select.log_decisions = b;
        }
        if let Some(b) = s.pools_by_partition {
            c.select.pools_by_partition = b;
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
        if let Some(w) = s.move_when {
            c.select.move_when = MoveWhen::parse_name(&w).map_err(|_| {
                cfg_err(format!(
                    "select.move_when = \"{w}\": expected \"always\" (whenever a move pays), \"waiting\" (only while a GPU job waits), \"fits\" (only while a waiting job asks for no more GPUs than are free), \"starts\" (only when the moves let a waiting job start) or \"pays\" (as starts, and tidying moves of jobs expected to run long enough)"
                ))
            })?;
        }
        if let Some(p) = s.tidy_payback {
            if p.is_nan() || p < 0.0 {
                return Err(cfg_err(format!(
                    "select.tidy_payback = {p}: must be a number >= 0 (a move that starts nobody is made for jobs expected to run at least this many times their cost after it)"
                )));
            }
            c.select.tidy_payback = p;
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
        assert_eq!(c.select.move_when, MoveWhen::Pays);
        assert_eq!(c.select.tidy_payback, 20.0);
        let c = Config::parse("x", "[select]\nmove_when = \"always\"\n").unwrap();
        assert_eq!(c.select.move_when, MoveWhen::Always);
    }

    #[test]
    fn a_bad_move_when_is_refused() {
        let e = Config::parse("c", "[select]\nmove_when = \"sometimes\"\n").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("select.move_when") && msg.contains("\"waiting\""),
            "{msg}"
        );
        assert!(Config::parse("c", "[select]\nmove_when = 1\n").is_err());
        let c = Config::parse("c", "[select]\nmove_when = \"pays\"\ntidy_payback = 5\n").unwrap();
        assert_eq!(
            (c.select.move_when, c.select.tidy_payback),
            (MoveWhen::Pays, 5.0)
        );
        let e = Config::parse("c", "[select]\ntidy_payback = -1\n").unwrap_err();
        assert!(e.to_string().contains("select.tidy_payback"), "{e}");
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
        let e = Config::parse("/etc/c.conf", "[spank]\nmax_min_runtime = [\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/etc/c.conf: "), "{e}");
        let e = Config::parse("c", "[select]\nenabled = \"yes\"\n").unwrap_err();
        assert!(e.to_string().starts_with("c: "), "{e}");
        let e = Config::parse(
            "c",
            "[spank]\nmax_min_runtime = \"1h\"\ndefault_min_runtime = \"2h\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("above"), "{e}");
    }

    #[test]
    fn unknown_sections_and_keys_warn_and_are_ignored() {
        let (c, w) = Config::parse_with_warnings(
            "/etc/c.conf",
            "[spank]\nmax_runtime = \"1h\"\nmax_min_runtime = \"2h\"\n[budget]\nx = 1\n[select]\nmigrate = false\n",
        )
        .unwrap();
        assert_eq!(c.spank.max_min_runtime_s, 7200, "known keys still apply");
        assert!(!c.select.migrate);
        assert!(!c.select.log_decisions, "off by default");
        let c = Config::parse("t", "[select]\nlog_decisions = true\n").unwrap();
        assert!(c.select.log_decisions);
        assert!(Config::parse("t", "[select]\nlog_decisions = \"yes\"\n").is_err());
        assert!(Config::default().select.pools_by_partition, "on by default");
        let c = Config::parse("t", "[select]\npools_by_partition = false\n").unwrap();
        assert!(!c.select.pools_by_partition);
        assert!(Config::parse("t", "[select]\npools_by_partition = 1\n").is_err());
        assert_eq!(
            w,
            vec![
                "/etc/c.conf: unknown section `budget` ignored",
                "/etc/c.conf: unknown key `spank.max_runtime` ignored",
            ]
        );
        let (_, w) = Config::parse_with_warnings(
            "c",
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../etc/compass.conf"
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            w,
            Vec::<String>::new(),
            "the shipped example has no unknown key"
        );
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

    #[test]
    fn the_stock_plugin_is_read_from_a_file_that_does_not_load() {
        let ours = "/opt/slurm-24.11/lib/slurm/select_cons_tres.so";
        // a bad value elsewhere: the file does not load, its TOML does
        let bad_value =
            format!("[spank]\nmax_min_runtime = \"soon\"\n[select]\nstock_plugin = \"{ours}\"\n");
        assert!(Config::parse("x", &bad_value).is_err());
        assert_eq!(Config::stock_plugin_in(&bad_value).as_deref(), Some(ours));
        // a TOML syntax error on another line, and a comment after the value
        let bad_syntax = format!(
            "[select]\nmigrate = yes please\nstock_plugin = \"{ours}\"  # 24.11\n[spank]\nstock_plugin = \"/not/this\"\n"
        );
        assert!(Config::parse("x", &bad_syntax).is_err());
        assert_eq!(Config::stock_plugin_in(&bad_syntax).as_deref(), Some(ours));
        // only `[select]`'s key counts; none set: None (the default applies)
        assert_eq!(
            Config::stock_plugin_in("[spank]\nstock_plugin = \"/x\"\nbad = = 1\n"),
            None
        );
        assert_eq!(Config::stock_plugin_in("[select]\nmigrate = false\n"), None);
        assert_eq!(
            Config::stock_plugin_of(Path::new("/nonexistent/compass.conf")),
            None
        );
    }
}
