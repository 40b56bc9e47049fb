//! Who may read what: Slurm's `PrivateData` applied to the API's reads.
//!
//! compass-budgetd follows the cluster's own rule (slurm.conf `PrivateData`,
//! read at start, on SIGHUP and when the file changes, or `[reads]
//! private_data` of its config):
//!
//! - `jobs`: a user sees only their own jobs in the queue, in
//!   `GET /api/v1/queue/{job}`, in `GET /api/v1/jobs` and in the
//!   enforcement actions (an action shows when its victim or the job it made
//!   room for is theirs); the dashboard likewise.
//! - `accounts`: the audit trail of budget edits is shown to admins and
//!   operators, and to managers for the teams they manage (Slurm shows
//!   account definitions to their coordinators).
//! - `usage`: per-team usage (the tree's and `/api/v1/usage`'s GPU-hours
//!   and ratios, the owed-versus-delivered report, the dashboard's usage)
//!   is shown to admins and operators for every team, to a manager for the
//!   teams they manage and everything below them, and to a user for the
//!   teams of the accounts they have jobs under (pending, running, or in
//!   the ledger with their user); other teams' usage is hidden ([`UsageScope`]).
//!   Slurm hides other users' usage from `sshare` and shows coordinators
//!   their accounts; compass keeps usage per team, not per user.
//!   `/metrics` is not filtered: it is for Prometheus, behind the access
//!   control of the scrape.
//! - Other words (`users`, `nodes`, `events`, ...) guard nothing compass
//!   serves differently.
//!
//! Readers are identified by a MUNGE credential bound to the request (the
//! CLI sends one with every read, see [`crate::auth`]) or, behind a reverse
//! proxy, by the proxy's identity header, trusted only from the configured
//! proxy addresses. Admins (config `admins`), `root`, Slurm's `SlurmUser`
//! and the configured operators see everything. Without an identity a
//! reader is anonymous and sees no one's private data.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::error::{BudgetError, Result};

/// The `PrivateData` words compass applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrivateData {
    pub jobs: bool,
    pub accounts: bool,
    pub usage: bool,
}

impl PrivateData {
    /// Parses a `PrivateData` value as Slurm writes it: comma-separated
    /// words, case-insensitive, `all` for every one; words compass does
    /// not apply are accepted and ignored.
    pub fn parse(value: &str) -> Self {
        let mut p = PrivateData::default();
        for w in value.split(',').map(|w| w.trim().to_ascii_lowercase()) {
            match w.as_str() {
                "all" => {
                    p.jobs = true;
                    p.accounts = true;
                    p.usage = true;
                }
                "jobs" => p.jobs = true,
                "accounts" => p.accounts = true,
                "usage" => p.usage = true,
                _ => {}
            }
        }
        p
    }

    /// The words in force, as Slurm writes them (`none` for nothing).
    pub fn text(&self) -> String {
        let words: Vec<&str> = [
            (self.jobs, "jobs"),
            (self.accounts, "accounts"),
            (self.usage, "usage"),
        ]
        .into_iter()
        .filter_map(|(on, w)| on.then_some(w))
        .collect();
        if words.is_empty() {
            "none".into()
        } else {
            words.join(",")
        }
    }
}

/// What slurm.conf says about reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlurmReadConf {
    pub private: PrivateData,
    /// `SlurmUser` (Slurm's default: root).
    pub slurm_user: Option<String>,
    /// The files read (slurm.conf and its includes) with their modification
    /// times, to notice an edit ([`ReadPolicy::changed`]).
    pub files: Vec<(PathBuf, Option<std::time::SystemTime>)>,
}

fn mtime(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reads `PrivateData` and `SlurmUser` from slurm.conf, following
/// `Include` lines (relative to the file's directory); a later line
/// overrides an earlier one, as in Slurm.
pub fn read_slurm_conf(path: &Path) -> Result<SlurmReadConf> {
    let mut out = SlurmReadConf::default();
    read_conf_into(path, &mut out, 0)?;
    Ok(out)
}

fn read_conf_into(path: &Path, out: &mut SlurmReadConf, depth: u32) -> Result<()> {
    out.files.push((path.to_path_buf(), mtime(path)));
    let text = std::fs::read_to_string(path).map_err(|e| BudgetError::Config {
        path: path.display().to_string(),
        why: format!("reading PrivateData: {e}"),
    })?;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(inc) = line
            .strip_prefix("Include ")
            .or_else(|| line.strip_prefix("include "))
        {
            if depth < 8 {
                let inc = PathBuf::from(inc.trim());
                let inc = if inc.is_relative() {
                    path.parent().unwrap_or(Path::new("/")).join(inc)
                } else {
                    inc
                };
                read_conf_into(&inc, out, depth + 1)?;
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.split_whitespace().next().unwrap_or("");
        match key.trim().to_ascii_lowercase().as_str() {
            "privatedata" => out.private = PrivateData::parse(value),
            "slurmuser" => out.slurm_user = Some(value.to_string()),
            _ => {}
        }
    }
    Ok(())
}

/// The read policy in force: what is private and who sees everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadPolicy {
    pub private: PrivateData,
    pub slurm_user: Option<String>,
    /// Where `private` comes from (for the logs).
    pub source: String,
    /// slurm.conf and its includes as read (empty when set in the config).
    pub files: Vec<(PathBuf, Option<std::time::SystemTime>)>,
}

impl ReadPolicy {
    /// The policy `config` asks for: `[reads] private_data` (a PrivateData
    /// value, or `"slurm"` for slurm.conf's); unset: slurm.conf's with
    /// `slurm = "libslurm"`, nothing private otherwise. A slurm.conf that
    /// cannot be read makes jobs and accounts private (fail closed).
    pub fn load(config: &Config) -> Self {
        let setting = config.reads.private_data.clone().unwrap_or_else(|| {
            if config.slurm == crate::config::SlurmMode::Libslurm {
                "slurm".into()
            } else {
                String::new()
            }
        });
        if setting.trim() != "slurm" {
            return ReadPolicy {
                private: PrivateData::parse(&setting),
                slurm_user: None,
                source: "[reads] private_data".into(),
                files: Vec::new(),
            };
        }
        let path = crate::slurm::libslurm::LibSlurm::new(config.slurm_conf.clone()).conf_path();
        match read_slurm_conf(&path) {
            Ok(c) => ReadPolicy {
                private: c.private,
                slurm_user: c.slurm_user,
                source: path.display().to_string(),
                files: c.files,
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot read PrivateData; jobs, the audit trail and usage are private until it can be read (SIGHUP re-reads)");
                ReadPolicy {
                    private: PrivateData {
                        jobs: true,
                        accounts: true,
                        usage: true,
                    },
                    slurm_user: None,
                    source: format!("{} (unreadable)", path.display()),
                    files: vec![(path.clone(), mtime(&path))],
                }
            }
        }
    }

    /// Has slurm.conf (or an included file) changed since it was read?
    /// The service re-reads it then, so an edit followed by `scontrol
    /// reconfigure` takes effect without a restart.
    pub fn changed(&self) -> bool {
        self.files.iter().any(|(p, t)| mtime(p) != *t)
    }

    /// Does `user` see everything (admins, root, SlurmUser, operators)?
    pub fn sees_all(&self, config: &Config, user: &str) -> bool {
        user == "root"
            || self.slurm_user.as_deref() == Some(user)
            || config.admins.iter().any(|a| a == user)
            || config.reads.operators.iter().any(|a| a == user)
    }
}

/// Who is reading, as far as the service knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Viewer {
    /// `None`: anonymous (no credential, no trusted identity header).
    pub user: Option<String>,
    /// Sees everything: nothing is private, or an admin or operator.
    pub all: bool,
    pub private: PrivateData,
}

impl Viewer {
    /// A viewer who sees everything (nothing is private).
    pub fn everything() -> Self {
        Viewer {
            user: None,
            all: true,
            private: PrivateData::default(),
        }
    }

    /// May this viewer see a job owned by `owner` (`None` or empty:
    /// unknown, seen only by those who see everything)?
    pub fn sees_job(&self, owner: Option<&str>) -> bool {
        if self.all || !self.private.jobs {
            return true;
        }
        match (self.user.as_deref(), owner) {
            (Some(u), Some(o)) => !o.is_empty() && u == o,
            _ => false,
        }
    }

    /// The name to show in refusals.
    pub fn name(&self) -> &str {
        self.user.as_deref().unwrap_or("(anonymous)")
    }
}

/// Whose per-team usage a viewer may see (`PrivateData=usage`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsageScope {
    /// Every team's (nothing private, or an admin or operator).
    All,
    /// Only these teams' (tree node names).
    Teams(std::collections::BTreeSet<String>),
}

impl UsageScope {
    pub fn sees(&self, team: &str) -> bool {
        match self {
            UsageScope::All => true,
            UsageScope::Teams(t) => t.contains(team),
        }
    }

    /// The teams of `tree` whose usage `user` may see: those they manage
    /// (and everything below), and the teams of `accounts` (the accounts
    /// they have jobs under). Ancestors of these stay hidden: their usage
    /// sums other teams'.
    pub fn of_user(
        tree: &compass_core::fairshare::OrgTree,
        user: &str,
        accounts: &std::collections::BTreeSet<String>,
    ) -> Self {
        let teams = (tree.subtree(tree.root()).into_iter())
            .filter(|ix| {
                let n = tree.node(*ix);
                tree.manages(user, *ix)
                    || (n.account.as_ref())
                        .is_some_and(|a| accounts.contains(&a.to_ascii_lowercase()))
            })
            .map(|ix| tree.node(ix).name.clone())
            .collect();
        UsageScope::Teams(teams)
    }
}

/// The identity header's user, if the peer is a trusted proxy and the
/// header is configured and present.
pub fn proxy_user(
    config: &Config,
    peer: Option<SocketAddr>,
    headers: &axum::http::HeaderMap,
) -> Option<String> {
    let header = config.reads.proxy_user_header.as_deref()?;
    let peer: IpAddr = peer?.ip();
    if !config.reads.trusted_proxies.contains(&peer) {
        return None;
    }
    headers
        .get(header)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_words_as_slurm_writes_them() {
        let p = PrivateData::parse("Usage,JOBS ,events");
        assert_eq!(
            p,
            PrivateData {
                jobs: true,
                accounts: false,
                usage: true,
            }
        );
        assert_eq!(PrivateData::parse("all").text(), "jobs,accounts,usage");
        assert_eq!(PrivateData::parse("").text(), "none");
        assert_eq!(PrivateData::parse("cloud,nodes").text(), "none");
    }

    #[test]
    fn slurm_conf_private_data_slurm_user_and_includes() {
        let dir = std::env::temp_dir().join(format!("compass-privacy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("slurm.conf"),
            "ClusterName=x\n# PrivateData=accounts\nSlurmUser=slurm  # the daemons' user\n\
             PrivateData=usage\nInclude extra.conf\n",
        )
        .unwrap();
        std::fs::write(dir.join("extra.conf"), "privatedata=jobs,accounts\n").unwrap();
        let c = read_slurm_conf(&dir.join("slurm.conf")).unwrap();
        assert_eq!(c.private.text(), "jobs,accounts", "the later line wins");
        assert_eq!(c.slurm_user.as_deref(), Some("slurm"));
        assert!(read_slurm_conf(&dir.join("missing.conf")).is_err());
        // An edit of an included file is noticed.
        let config = Config::parse(
            &format!(
                "db = \":memory:\"\ncapacity_gpus = 1\nslurm_conf = \"{}\"\n[reads]\nprivate_data = \"slurm\"\n",
                dir.join("slurm.conf").display()
            ),
            "t",
        )
        .unwrap();
        let p = ReadPolicy::load(&config);
        assert_eq!(
            (p.private.text(), p.files.len(), p.changed()),
            ("jobs,accounts".into(), 2, false)
        );
        let f = std::fs::File::options()
            .append(true)
            .open(dir.join("extra.conf"))
            .unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
        assert!(p.changed());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn jobs_of_others_and_of_unknown_owners_are_hidden_under_private_jobs() {
        let private = PrivateData {
            jobs: true,
            ..PrivateData::default()
        };
        let alice = Viewer {
            user: Some("alice".into()),
            all: false,
            private,
        };
        assert!(alice.sees_job(Some("alice")));
        assert!(!alice.sees_job(Some("bob")));
        assert!(!alice.sees_job(None));
        assert!(!alice.sees_job(Some("")));
        let anon = Viewer {
            user: None,
            ..alice.clone()
        };
        assert!(!anon.sees_job(Some("alice")));
        let open = Viewer {
            private: PrivateData::default(),
            ..anon
        };
        assert!(open.sees_job(Some("bob")));
    }
}
