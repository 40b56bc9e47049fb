//! The service's configuration file (`etc/compass-budgetd.toml`).

use compass_core::fairshare::{GpuWeights, QueueOrder, TeamOrder};
use compass_core::preempt::ProtectionConfig;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::error::{BudgetError, Result};

/// Default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8642";

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// HTTP listen address (`--listen` overrides). Loopback by default.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// SQLite database path (`--db` overrides).
    pub db: PathBuf,
    /// Users who may edit the whole tree.
    #[serde(default)]
    pub admins: Vec<String>,
    /// Total GPUs of the cluster (the `capacity` in share x capacity x
    /// window) when Slurm does not report its nodes; with `slurm =
    /// "libslurm"` the nodes' GPUs, weighted by `[gpu_weights]`, are used.
    pub capacity_gpus: u32,
    /// Fair-share lookback window in seconds (default 7 days). Every `_s`
    /// key takes integer seconds or a duration string in Slurm's forms
    /// (`"7-0"`, `"4:00:00"`, `"30s"`; [`compass_core::duration`]).
    #[serde(default = "default_window", deserialize_with = "secs::i64")]
    pub window_s: i64,
    /// Ledger and demand rows older than this many days are pruned (default
    /// 400; must cover the fair-share window and the reports, at most 366 days).
    #[serde(default = "default_retain")]
    pub retain_days: i64,
    /// Seconds between ingest/order/push cycles (default 10).
    #[serde(default = "default_cycle", deserialize_with = "secs::u64")]
    pub cycle_s: u64,
    /// Largest accepted request body in bytes (default 1 MiB).
    #[serde(default = "default_body")]
    pub max_body_bytes: usize,
    /// Longest time a request may take, in seconds (default 15). A request
    /// stuck on munged, the passwd database, SQLite or slurmctld answers 503
    /// after this; `/healthz` and reads never wait for it.
    #[serde(default = "default_request_timeout", deserialize_with = "secs::f64")]
    pub request_timeout_s: f64,
    /// MUNGE socket (default: libmunge's default socket).
    #[serde(default)]
    pub munge_socket: Option<PathBuf>,
    /// Where Slurm state comes from: `none` (API and ledger ingest only),
    /// `libslurm` (the controller of `slurm_conf`, through libslurm) or
    /// `file` (a JSON snapshot at `slurm_file`, for demos and tests).
    #[serde(default)]
    pub slurm: SlurmMode,
    /// The snapshot file of `slurm = "file"`.
    #[serde(default)]
    pub slurm_file: Option<PathBuf>,
    /// slurm.conf of `slurm = "libslurm"` (default: `$SLURM_CONF`, else
    /// /etc/slurm/slurm.conf).
    #[serde(default)]
    pub slurm_conf: Option<PathBuf>,
    /// compass.conf, the Slurm plugins' config: the service reads the cap
    /// on protected time from it (`spank.max_min_runtime`, one key for both).
    /// Default: `$COMPASS_CONF`, else /etc/slurm/compass.conf, as for the
    /// plugins. A missing file means the plugins' defaults (8 h).
    #[serde(default)]
    pub compass_conf: Option<PathBuf>,
    /// Enforcement of protected and preemptible time (`[protection]`).
    #[serde(default)]
    pub protection: Protection,
    /// `[gpu_weights]`: GPU type -> weight (`a100 = 2.0`); untyped GPUs and
    /// types not named weigh 1.0. Charges, allocations and capacity are in
    /// weighted GPU-hours ([`compass_core::fairshare::weights`]).
    #[serde(default)]
    pub gpu_weights: BTreeMap<String, f64>,
    /// The select plugin's state file (`select.state_file` of compass.conf,
    /// e.g. `/run/compass/state.json`): read every few seconds and exported
    /// by `/metrics` (`compass_select_*`). Unset: not read.
    #[serde(default)]
    pub select_state_file: Option<PathBuf>,
    /// `[reads]`: who may read other users' jobs and the audit trail
    /// (Slurm's `PrivateData`, [`crate::privacy`]).
    #[serde(default)]
    pub reads: Reads,
    /// `[order]`: how teams are ordered in the queue, the same settings and
    /// defaults as the policy simulator's `--team-order`/`--free-order`
    /// ([`compass_core::fairshare::QueueOrder`]).
    #[serde(default)]
    pub order: QueueOrder,
}

/// `[reads]`: Slurm's `PrivateData` for the API's reads ([`crate::privacy`]).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Reads {
    /// A `PrivateData` value (`"jobs,accounts"`, `""` for none), or
    /// `"slurm"`: slurm.conf's, read at start and on SIGHUP. Unset:
    /// `"slurm"` with `slurm = "libslurm"`, `""` otherwise.
    pub private_data: Option<String>,
    /// Users who may read everything (as admins do) but edit nothing.
    pub operators: Vec<String>,
    /// Addresses of reverse proxies whose identity header is trusted.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// The proxy's header naming the authenticated user (`X-Remote-User`);
    /// read only on connections from `trusted_proxies`.
    pub proxy_user_header: Option<String>,
}

/// `[protection]`: how the cycle enforces protected and preemptible time
/// on Slurm (fair-share-budgets.txt; the rules are
/// [`compass_core::preempt`]). Maps onto [`ProtectionConfig`].
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Protection {
    /// `true` (default): preempt, cancel and drain on Slurm. `false`: the
    /// cycle only orders the queue. `"dry-run"`: decide as `true` would, log
    /// and record each action (`dry_run` in the action log) but never act
    /// on Slurm.
    pub enforce: EnforceMode,
    /// Longest protected time a job can buy, in seconds: `spank.max_min_runtime`
    /// of compass.conf ([`Config::load`] reads it; 8 h by default).
    #[serde(skip)]
    pub min_runtime_cap_s: f64,
    /// Deprecated `min_runtime_cap_s` of older configs: still accepted, but
    /// [`Config::load`] refuses it unless it equals compass.conf's cap.
    #[serde(rename = "min_runtime_cap_s", deserialize_with = "secs::opt_f64")]
    pub legacy_min_runtime_cap_s: Option<f64>,
    /// Resumable jobs checkpoint this often; a victim loses its run time
    /// since its last checkpoint (default 600 s). Used to pick the victims
    /// that lose the least.
    #[serde(deserialize_with = "secs::f64")]
    pub checkpoint_interval_s: f64,
    /// An allocated victim's team must be this much more over-served than
    /// the requester's (default 0.05: 5%), for accounts whose running load
    /// is unknown only: for budgeted teams, running above against below the
    /// allocation decides alone (`compass_core::preempt`, issue 15).
    pub preempt_margin: f64,
    /// Exhaustive victim search up to this many candidates, greedy above
    /// (default 10, at most 16).
    pub exact_search_limit: usize,
    /// At most this many requeues and cancels per cycle (default 16); the
    /// queue's later jobs wait for the next cycle.
    pub max_actions_per_cycle: usize,
    /// A job room was freed for by preemption must start within this many
    /// seconds (default 120); otherwise the preemption was fruitless and
    /// the job preempts no one again until its request or the cluster's
    /// nodes change, or `fruitless_retry_after_s` passes. Until it starts
    /// or this time passes it preempts no one either.
    #[serde(deserialize_with = "secs::i64")]
    pub start_grace_s: i64,
    /// How long a job whose preemption was fruitless stays barred from
    /// preempting when nothing changes (default 1800 s).
    #[serde(deserialize_with = "secs::i64")]
    pub fruitless_retry_after_s: i64,
    /// When Slurm refuses to requeue a resumable victim, retry each cycle for
    /// this many seconds from the first refusal (default 60) before
    /// cancelling it instead.
    #[serde(deserialize_with = "secs::i64")]
    pub requeue_retry_for_s: i64,
    /// Preempt even though slurm.conf's `PreemptType` is not
    /// `preempt/none` (default `false`: with Slurm preempting on its own,
    /// compass preempts for no waiting job, reports why in `/healthz`
    /// `cycle.enforcement_held`, and still drains faulty nodes). Both then
    /// preempt, each by its own rule (`docs/admin-guide.md`, "Living with
    /// the site's Slurm setup").
    pub beside_slurm_preemption: bool,
}

/// `[protection] enforce`: `true`, `false` or `"dry-run"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnforceMode {
    Off,
    On,
    DryRun,
}

impl EnforceMode {
    /// Does the cycle run enforcement (for real or as a dry run)?
    pub fn runs(self) -> bool {
        self != EnforceMode::Off
    }
    pub fn dry_run(self) -> bool {
        self == EnforceMode::DryRun
    }
}

impl<'de> Deserialize<'de> for EnforceMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(EnforceMode::On),
            Raw::Bool(false) => Ok(EnforceMode::Off),
            Raw::Text(t) if t == "dry-run" => Ok(EnforceMode::DryRun),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "enforce must be true, false or \"dry-run\", not \"{t}\""
            ))),
        }
    }
}

impl Default for Protection {
    fn default() -> Self {
        let c = ProtectionConfig::default();
        Self {
            enforce: EnforceMode::On,
            min_runtime_cap_s: c.min_runtime_cap_s,
            legacy_min_runtime_cap_s: None,
            checkpoint_interval_s: c.checkpoint_interval_s,
            preempt_margin: c.preempt_margin,
            exact_search_limit: c.exact_search_limit,
            max_actions_per_cycle: c.max_preemptions_per_cycle,
            start_grace_s: 120,
            fruitless_retry_after_s: 1800,
            requeue_retry_for_s: 60,
            beside_slurm_preemption: false,
        }
    }
}

impl Protection {
    /// The core's settings.
    pub fn core(&self) -> ProtectionConfig {
        ProtectionConfig {
            min_runtime_cap_s: self.min_runtime_cap_s,
            checkpoint_interval_s: self.checkpoint_interval_s,
            exact_search_limit: self.exact_search_limit,
            preempt_margin: self.preempt_margin,
            max_preemptions_per_cycle: self.max_actions_per_cycle,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SlurmMode {
    #[default]
    None,
    File,
    Libslurm,
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN.parse().expect("constant address parses")
}
fn default_window() -> i64 {
    compass_core::fairshare::DEFAULT_WINDOW_S
}
fn default_retain() -> i64 {
    400
}
fn default_cycle() -> u64 {
    10
}
fn default_request_timeout() -> f64 {
    15.0
}
fn default_body() -> usize {
    1 << 20
}

impl Config {
    pub fn parse(text: &str, path: &str) -> Result<Self> {
        let mut c: Config = toml::from_str(text).map_err(|e| BudgetError::Config {
            path: path.to_string(),
            why: e.to_string(),
        })?;
        if let Some(cap) = c.protection.legacy_min_runtime_cap_s {
            c.protection.min_runtime_cap_s = cap;
        }
        c.validate(path)?;
        Ok(c)
    }

    /// The compass.conf this service reads the cap from ([`Config::compass_conf`]).
    pub fn compass_conf_path(&self) -> PathBuf {
        if let Some(p) = &self.compass_conf {
            return p.clone();
        }
        match std::env::var_os("COMPASS_CONF") {
            Some(p) => PathBuf::from(p),
            None => PathBuf::from(compass_slurm::config::DEFAULT_PATH),
        }
    }

    /// Takes the cap on protected time from compass.conf (`path`), the one
    /// key the SPANK plugin checks `--min-runtime` against. A deprecated
    /// `protection.min_runtime_cap_s` must agree with it.
    pub fn apply_compass_conf(&mut self, config_path: &str, path: &Path) -> Result<()> {
        let (conf, warnings) =
            compass_slurm::config::Config::load_with_warnings(path).map_err(|e| {
                BudgetError::Config {
                    path: config_path.to_string(),
                    why: format!("reading the cap on protected time from compass.conf: {e}"),
                }
            })?;
        for w in warnings {
            tracing::warn!("{w}");
        }
        let cap = conf.spank.max_min_runtime_s as f64;
        if let Some(old) = self.protection.legacy_min_runtime_cap_s {
            if old != cap {
                return Err(BudgetError::Config {
                    path: config_path.to_string(),
                    why: format!(
                        "protection.min_runtime_cap_s ({}) differs from spank.max_min_runtime in {} ({}): \
                         the cap is set once, in compass.conf; remove min_runtime_cap_s",
                        compass_core::duration::format(old.round() as u64),
                        path.display(),
                        compass_core::duration::format(conf.spank.max_min_runtime_s)
                    ),
                });
            }
            tracing::warn!(
                config = config_path,
                "protection.min_runtime_cap_s is deprecated: the cap is spank.max_min_runtime in compass.conf; remove it"
            );
        }
        self.protection.min_runtime_cap_s = cap;
        tracing::info!(
            compass_conf = %path.display(),
            cap = %compass_core::duration::format(conf.spank.max_min_runtime_s),
            "protected time capped by spank.max_min_runtime"
        );
        Ok(())
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| BudgetError::Config {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        let name = path.display().to_string();
        let mut c = Self::parse(&text, &name)?;
        let conf = c.compass_conf_path();
        c.apply_compass_conf(&name, &conf)?;
        Ok(c)
    }

    fn validate(&self, path: &str) -> Result<()> {
        let bad = |why: &str| {
            Err(BudgetError::Config {
                path: path.to_string(),
                why: why.to_string(),
            })
        };
        if self.capacity_gpus == 0 {
            return bad("capacity_gpus must be at least 1");
        }
        if self.window_s <= 0 {
            return bad("window_s must be positive");
        }
        if self.retain_days * 86400 < self.window_s.max(366 * 86400) {
            return bad("retain_days must cover the window and 366 days of reports");
        }
        if self.cycle_s == 0 {
            return bad("cycle_s must be at least 1");
        }
        if self.reads.proxy_user_header.is_some() == self.reads.trusted_proxies.is_empty() {
            return bad(
                "[reads] proxy_user_header and trusted_proxies go together: the header is \
                 trusted only on connections from those addresses",
            );
        }
        if let Some(h) = &self.reads.proxy_user_header {
            if axum::http::HeaderName::try_from(h.as_str()).is_err() {
                return bad("[reads] proxy_user_header is not a valid HTTP header name");
            }
        }
        if self.slurm == SlurmMode::File && self.slurm_file.is_none() {
            return bad("slurm = \"file\" needs slurm_file");
        }
        let p = &self.protection;
        if !(p.min_runtime_cap_s.is_finite() && p.min_runtime_cap_s > 0.0) {
            return bad("protection.min_runtime_cap_s must be a positive duration");
        }
        if !(p.checkpoint_interval_s.is_finite() && p.checkpoint_interval_s >= 0.0) {
            return bad("protection.checkpoint_interval_s must be >= 0");
        }
        if !(p.preempt_margin.is_finite() && p.preempt_margin >= 0.0) {
            return bad("protection.preempt_margin must be >= 0");
        }
        if p.exact_search_limit > 16 {
            return bad("protection.exact_search_limit must be at most 16 (2^n victim sets)");
        }
        if p.max_actions_per_cycle == 0 {
            return bad("protection.max_actions_per_cycle must be at least 1 (use enforce = false to act on nothing)");
        }
        if p.start_grace_s <= 0 || p.fruitless_retry_after_s <= 0 || p.requeue_retry_for_s < 0 {
            return bad("protection.start_grace_s and fruitless_retry_after_s must be positive, requeue_retry_for_s >= 0 (seconds)");
        }
        if !(self.request_timeout_s.is_finite()
            && self.request_timeout_s > 0.0
            && self.request_timeout_s <= 3600.0)
        {
            return bad("request_timeout_s must be a number of seconds in (0, 3600]");
        }
        if self.max_body_bytes < 1024 {
            return bad("max_body_bytes must be at least 1024");
        }
        if self.order.team_order == TeamOrder::FairTree {
            return bad(
                "order.team_order = \"fair-tree\" is Slurm's own order (priority/multifactor \
                 with PriorityFlags=FAIR_TREE), a baseline of the policy simulator; the service \
                 runs \"under-allocation-first\" (default) or \"ratio\"",
            );
        }
        if let Err(e) = self.try_weights() {
            return bad(&e.to_string());
        }
        Ok(())
    }

    fn try_weights(&self) -> compass_core::error::Result<GpuWeights> {
        GpuWeights::new(self.gpu_weights.iter().map(|(t, w)| (t.as_str(), *w)))
    }

    /// `[gpu_weights]` (checked when the file was read).
    pub fn weights(&self) -> GpuWeights {
        self.try_weights().unwrap_or_default()
    }

    /// [`Config::request_timeout_s`] as a duration.
    pub fn request_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.request_timeout_s)
    }

    pub fn is_admin(&self, user: &str) -> bool {
        self.admins.iter().any(|a| a == user)
    }
}

/// Durations of the TOML: integer (or fractional, where the key allows it)
/// seconds as before, or a string in Slurm's forms. A string that is a bare
/// number is refused ([`compass_core::duration::parse_unambiguous`]): Slurm
/// reads it as minutes, the key's `_s` says seconds.
mod secs {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(i64),
        Float(f64),
        Text(String),
    }

    fn text<E: serde::de::Error>(t: &str) -> Result<u64, E> {
        compass_core::duration::parse_unambiguous(t).map_err(E::custom)
    }

    pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(v),
            Raw::Float(v) => Err(serde::de::Error::custom(format!(
                "{v}: whole seconds or a duration string (\"30s\", \"4:00:00\")"
            ))),
            Raw::Text(t) => {
                let v = text(&t)?;
                i64::try_from(v).map_err(|_| serde::de::Error::custom("duration too large"))
            }
        }
    }

    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let v = i64(d)?;
        u64::try_from(v).map_err(|_| serde::de::Error::custom(format!("{v}: must not be negative")))
    }

    pub fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Int(v) => Ok(v as f64),
            Raw::Float(v) => Ok(v),
            Raw::Text(t) => text(&t).map(|v| v as f64),
        }
    }

    pub fn opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        f64(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_section_defaults_to_the_simulators_and_refuses_fair_tree() {
        use compass_core::fairshare::FreeOrder;
        let c = Config::parse("db = \"x.db\"\ncapacity_gpus = 8\n", "t").unwrap();
        assert_eq!(c.order, QueueOrder::default());
        // The simulator's defaults (one pair of defaults for both).
        let sim = compass_core::sim::budgets::BudgetSimConfig::new(
            compass_core::model::ClusterSpec::new(1, 8).unwrap(),
        );
        assert_eq!(c.order.team_order, sim.team_order);
        assert_eq!(c.order.free_order, sim.free_order);
        let ex = Config::parse(include_str!("../../etc/compass-budgetd.toml"), "example").unwrap();
        assert_eq!(ex.order, QueueOrder::default());
        let c = Config::parse(
            "db = \"x.db\"\ncapacity_gpus = 8\n[order]\nteam_order = \"ratio\"\nfree_order = \"under-total-first\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.order.team_order, TeamOrder::Ratio);
        assert_eq!(c.order.free_order, FreeOrder::UnderTotalFirst);
        for (bad, why) in [
            ("team_order = \"fair-tree\"", "Slurm's own order"),
            ("team_order = \"fifo\"", "unknown variant"),
            ("free_ordr = \"same\"", "unknown field"),
        ] {
            let text = format!("db = \"x.db\"\ncapacity_gpus = 8\n[order]\n{bad}\n");
            let e = Config::parse(&text, "t").unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn parses_example_and_defaults() {
        let c = Config::parse(include_str!("../../etc/compass-budgetd.toml"), "example").unwrap();
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(c.window_s, 7 * 24 * 3600);
        assert_eq!(c.cycle_s, 10);
        let c = Config::parse("db = \"x.db\"\ncapacity_gpus = 8\n", "t").unwrap();
        assert!(c.listen.ip().is_loopback());
        assert!(Config::parse("db = \"x.db\"\ncapacity_gpus = 0\n", "t").is_err());
        let c = Config::parse(
            "db = \"x.db\"\ncapacity_gpus = 8\nslurm = \"libslurm\"\nslurm_conf = \"/etc/slurm/slurm.conf\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.slurm, SlurmMode::Libslurm);
        assert_eq!(
            c.slurm_conf.as_deref(),
            Some(Path::new("/etc/slurm/slurm.conf"))
        );
        assert!(Config::parse(
            "db = \"x.db\"\ncapacity_gpus = 8\nslurm = \"slurmrestd\"\n",
            "t"
        )
        .is_err());
        assert_eq!(c.protection.enforce, EnforceMode::On);
        assert_eq!(c.protection.core(), ProtectionConfig::default());
        let c = Config::parse(
            "db = \"x.db\"\ncapacity_gpus = 8\n[protection]\nenforce = false\nmin_runtime_cap_s = 3600\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.protection.enforce, EnforceMode::Off);
        assert_eq!(c.protection.core().min_runtime_cap_s, 3600.0);
        let c = Config::parse(
            "db = \"x.db\"\ncapacity_gpus = 8\n[protection]\nenforce = \"dry-run\"\nmax_actions_per_cycle = 3\nstart_grace_s = 30\n",
            "t",
        )
        .unwrap();
        assert!(c.protection.enforce.dry_run() && c.protection.enforce.runs());
        assert_eq!(c.protection.core().max_preemptions_per_cycle, 3);
        assert_eq!(c.protection.start_grace_s, 30);
        assert_eq!(c.protection.preempt_margin, 0.05);
        for bad in [
            "min_runtime_cap_s = 0",
            "preempt_margin = -1",
            "exact_search_limit = 40",
            "enforec = true",
            "enforce = \"dryrun\"",
            "enforce = 1",
            "max_actions_per_cycle = 0",
            "start_grace_s = 0",
            "fruitless_retry_after_s = -5",
            "requeue_retry_for_s = -1",
        ] {
            let text = format!("db = \"x.db\"\ncapacity_gpus = 8\n[protection]\n{bad}\n");
            assert!(Config::parse(&text, "t").is_err(), "{bad}");
        }
        assert_eq!(c.request_timeout_s, 15.0);
        for bad in ["0", "-1", "nan", "inf", "4000"] {
            let text = format!("db = \"x.db\"\ncapacity_gpus = 8\nrequest_timeout_s = {bad}\n");
            assert!(
                Config::parse(&text, "t").is_err(),
                "request_timeout_s = {bad}"
            );
        }
        let c = Config::parse(
            "db = \"x.db\"\ncapacity_gpus = 8\n[gpu_weights]\na100 = 2.0\nl40s = 1\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.weights().weight(Some("a100")), 2.0);
        assert_eq!(c.weights().weight(Some("l40s")), 1.0);
        assert_eq!(c.weights().weight(None), 1.0);
        for (bad, why) in [
            ("a100 = 0", "(0, 1000]"),
            ("a100 = -2.5", "(0, 1000]"),
            ("a100 = \"2\"", "invalid type"),
            ("\"gpu:a100\" = 2", "not a GPU type"),
            ("a100 = 2\nA100 = 3", "twice"),
        ] {
            let text = format!("db = \"x.db\"\ncapacity_gpus = 8\n[gpu_weights]\n{bad}\n");
            let e = Config::parse(&text, "t").unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(
            Config::parse("db = \"x.db\"\ncapacity_gpus = 8\nbogus = 1\n", "t")
                .unwrap_err()
                .to_string()
                .contains("bogus")
        );
    }

    #[test]
    fn durations_take_integer_seconds_or_slurm_strings() {
        let base = "db = \"x.db\"\ncapacity_gpus = 8\n";
        // Integer seconds, as existing configs have them.
        let c = Config::parse(
            &format!("{base}window_s = 604800\ncycle_s = 10\nrequest_timeout_s = 2.5\n[protection]\nstart_grace_s = 120\ncheckpoint_interval_s = 600\n"),
            "t",
        )
        .unwrap();
        assert_eq!(
            (c.window_s, c.cycle_s, c.request_timeout_s),
            (604_800, 10, 2.5)
        );
        assert_eq!(c.protection.start_grace_s, 120);
        // The same in Slurm's forms.
        let c = Config::parse(
            &format!("{base}window_s = \"7-0\"\ncycle_s = \"10s\"\nrequest_timeout_s = \"0:15\"\n[protection]\nstart_grace_s = \"2:00\"\ncheckpoint_interval_s = \"10m\"\nfruitless_retry_after_s = \"0:30:00\"\nrequeue_retry_for_s = \"1m\"\n"),
            "t",
        )
        .unwrap();
        assert_eq!(
            (c.window_s, c.cycle_s, c.request_timeout_s),
            (604_800, 10, 15.0)
        );
        let p = &c.protection;
        assert_eq!(
            (
                p.start_grace_s,
                p.checkpoint_interval_s,
                p.fruitless_retry_after_s,
                p.requeue_retry_for_s
            ),
            (120, 600.0, 1800, 60)
        );
        // A bare number in a string is ambiguous (minutes in Slurm, seconds by the key).
        let e = Config::parse(&format!("{base}cycle_s = \"10\"\n"), "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ambiguous") && e.contains("`10s`") && e.contains("cycle_s"),
            "{e}"
        );
        let e = Config::parse(&format!("{base}window_s = \"a week\"\n"), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("window_s") && e.contains("`4:00:00`"), "{e}");
        assert!(Config::parse(&format!("{base}window_s = 1.5\n"), "t").is_err());
        assert!(Config::parse(&format!("{base}cycle_s = -1\n"), "t").is_err());
    }

    #[test]
    fn the_cap_comes_from_compass_conf() {
        let dir = std::env::temp_dir().join(format!("compass-budget-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("compass.conf");
        std::fs::write(&conf, "[spank]\nmax_min_runtime = \"2h\"\n").unwrap();
        let budgetd = dir.join("compass-budgetd.toml");
        let write = |extra: &str| {
            std::fs::write(
                &budgetd,
                format!(
                    "db = \"x.db\"\ncapacity_gpus = 8\ncompass_conf = \"{}\"\n{extra}",
                    conf.display()
                ),
            )
            .unwrap()
        };
        write("");
        let c = Config::load(&budgetd).unwrap();
        assert_eq!(c.compass_conf_path(), conf);
        assert_eq!(c.protection.min_runtime_cap_s, 7200.0);
        assert_eq!(c.protection.core().min_runtime_cap_s, 7200.0);
        // The deprecated key still loads when it agrees ...
        write("[protection]\nmin_runtime_cap_s = 7200\n");
        assert_eq!(
            Config::load(&budgetd).unwrap().protection.min_runtime_cap_s,
            7200.0
        );
        // ... and is refused, naming both, when it does not.
        write("[protection]\nmin_runtime_cap_s = 28800\n");
        let e = Config::load(&budgetd).unwrap_err().to_string();
        assert!(
            e.contains("min_runtime_cap_s (8:00:00)")
                && e.contains("(2:00:00)")
                && e.contains("compass.conf"),
            "{e}"
        );
        // No compass.conf: the plugins' default, 8 h.
        std::fs::remove_file(&conf).unwrap();
        write("");
        assert_eq!(
            Config::load(&budgetd).unwrap().protection.min_runtime_cap_s,
            28_800.0
        );
        // A broken compass.conf is an error of the service's config.
        std::fs::write(&conf, "[spank]\nmax_min_runtime = \"soon\"\n").unwrap();
        let e = Config::load(&budgetd).unwrap_err().to_string();
        assert!(
            e.contains("compass-budgetd.toml") && e.contains("spank.max_min_runtime"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
