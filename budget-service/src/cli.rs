//! The manager CLI: `compass budget show|set-share|add|move|remove|import|export|audit`,
//! `compass why JOBID` and `compass node fault|repaired|list`. It talks to the service over
//! HTTP or HTTPS (rustls; the system's CA store or `ca_file`), found through flags, the
//! environment or the client config (`/etc/compass/compass.toml`); writes carry a MUNGE
//! credential bound to the request (see [`crate::auth`]). Errors map to exit statuses
//! ([`exit`]).

use compass_core::fairshare::NodeSpec;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::auth::{munge_encode_payload, request_payload, SCHEME};
use crate::error::{BudgetError, Result};

/// Default service URL (the service's default listen address).
pub const DEFAULT_URL: &str = "http://127.0.0.1:8642";

/// Default client config file.
pub const DEFAULT_CLIENT_CONFIG: &str = "/etc/compass/compass.toml";

/// Exit statuses of the `compass` commands that talk to the service
/// (clap's usage errors exit with 2).
pub mod exit {
    /// Any other failure (bad input, a refused edit, a local error).
    pub const FAILURE: u8 = 1;
    /// Usage error (clap).
    pub const USAGE: u8 = 2;
    /// The job, node or team asked about does not exist (HTTP 404).
    pub const NOT_FOUND: u8 = 3;
    /// Not allowed: not authenticated or not permitted (HTTP 401, 403).
    pub const NOT_ALLOWED: u8 = 4;
    /// The service is down: unreachable (connection, TLS) or unavailable
    /// (HTTP 502, 503, 504).
    pub const SERVICE_DOWN: u8 = 5;
}

/// What `compass --help` says about exit statuses.
pub const EXIT_HELP: &str = "Exit status: 0 success, 1 failure, 2 usage error, \
3 not found (no such job, node or team), 4 not allowed (not authenticated or not permitted), \
5 service down (compass-budgetd unreachable or unavailable).";

impl BudgetError {
    /// The exit status of a command that failed with this error ([`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            BudgetError::NotFound(_) => exit::NOT_FOUND,
            BudgetError::Unauthenticated(_) | BudgetError::Forbidden { .. } => exit::NOT_ALLOWED,
            BudgetError::Unavailable(_) | BudgetError::Unreachable { .. } => exit::SERVICE_DOWN,
            BudgetError::Usage(_) => exit::USAGE,
            BudgetError::Api { status, .. } => match status {
                404 => exit::NOT_FOUND,
                401 | 403 => exit::NOT_ALLOWED,
                502..=504 => exit::SERVICE_DOWN,
                _ => exit::FAILURE,
            },
            _ => exit::FAILURE,
        }
    }
}

/// How to reach the service: flag, else environment, else the client config
/// file, else [`DEFAULT_URL`].
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Connection {
    /// URL of compass-budgetd, `http://` or `https://` (default: `url` in
    /// the client config, else http://127.0.0.1:8642).
    #[arg(long, global = true, env = "COMPASS_BUDGET_URL", value_name = "URL")]
    pub url: Option<String>,
    /// MUNGE socket (default: `munge_socket` in the client config, else
    /// libmunge's default).
    #[arg(long, global = true, env = "COMPASS_MUNGE_SOCKET", value_name = "PATH")]
    pub munge_socket: Option<PathBuf>,
    /// PEM file of the CA(s) that sign the service's certificate, trusted
    /// instead of the system's CA store (default: `ca_file` in the client
    /// config, else the system store, which honours `SSL_CERT_FILE`).
    #[arg(long, global = true, env = "COMPASS_CA_FILE", value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Seconds to wait for each answer of the service, connecting included
    /// (default: `timeout_s` in the client config, else 60); the service
    /// itself answers 503 after its `request_timeout_s` (15).
    #[arg(
        long,
        global = true,
        env = "COMPASS_CLIENT_TIMEOUT",
        value_name = "SECONDS"
    )]
    pub timeout: Option<u64>,
    /// Client config file (TOML: `url`, `ca_file`, `munge_socket`,
    /// `timeout_s`); a missing default file is fine.
    #[arg(long = "client-config", global = true, env = "COMPASS_CONFIG", value_name = "FILE", default_value = DEFAULT_CLIENT_CONFIG)]
    pub config: PathBuf,
}

/// The client config file (`/etc/compass/compass.toml`, `$COMPASS_CONFIG`).
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// URL of compass-budgetd (e.g. `https://compass.example.org`).
    pub url: Option<String>,
    /// PEM CA file trusted for `https` URLs instead of the system store.
    pub ca_file: Option<PathBuf>,
    /// MUNGE socket for writes.
    pub munge_socket: Option<PathBuf>,
    /// Seconds to wait for each answer of the service (default 60).
    pub timeout_s: Option<u64>,
}

/// Seconds the CLI waits for an answer of the service by default.
pub const DEFAULT_CLIENT_TIMEOUT_S: u64 = 60;

impl ClientConfig {
    /// Parses the client config (no I/O); `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| BudgetError::Config {
            path: origin.to_string(),
            why: e.to_string(),
        })
    }

    /// Reads `path`; a missing file is an empty config only when it is the
    /// default path (a file named by flag or `$COMPASS_CONFIG` must exist).
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&path.display().to_string(), &text),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && path == Path::new(DEFAULT_CLIENT_CONFIG) =>
            {
                Ok(Self::default())
            }
            Err(e) => Err(BudgetError::Config {
                path: path.display().to_string(),
                why: e.to_string(),
            }),
        }
    }
}

/// Where and how the CLI reaches the service, all sources applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub url: String,
    pub ca_file: Option<PathBuf>,
    pub munge_socket: Option<PathBuf>,
    /// Seconds to wait for each answer (>= 1).
    pub timeout_s: u64,
}

impl Connection {
    /// A connection to `url` (tests, tools).
    pub fn to(url: &str) -> Self {
        Connection {
            url: Some(url.to_string()),
            config: PathBuf::from(DEFAULT_CLIENT_CONFIG),
            ..Default::default()
        }
    }

    /// Flags and environment first, then the client config, then defaults.
    pub fn resolve(&self) -> Result<Resolved> {
        let file = ClientConfig::load(&self.config)?;
        let url = self
            .url
            .clone()
            .or(file.url)
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            let why = format!("`{url}` must start with http:// or https://");
            return Err(match &self.url {
                Some(_) => BudgetError::Usage(format!("--url: {why}")),
                None => BudgetError::Config {
                    path: self.config.display().to_string(),
                    why: format!("url: {why}"),
                },
            });
        }
        let timeout_s = self
            .timeout
            .or(file.timeout_s)
            .unwrap_or(DEFAULT_CLIENT_TIMEOUT_S);
        if timeout_s == 0 {
            let why = "must be at least 1 second".to_string();
            return Err(match self.timeout {
                Some(_) => BudgetError::Usage(format!("--timeout: {why}")),
                None => BudgetError::Config {
                    path: self.config.display().to_string(),
                    why: format!("timeout_s: {why}"),
                },
            });
        }
        Ok(Resolved {
            url: url.trim_end_matches('/').to_string(),
            ca_file: self.ca_file.clone().or(file.ca_file),
            munge_socket: self.munge_socket.clone().or(file.munge_socket),
            timeout_s,
        })
    }
}

/// `compass budget ...`
#[derive(clap::Args, Debug, Clone)]
pub struct BudgetArgs {
    #[command(flatten)]
    pub conn: Connection,
    #[command(subcommand)]
    pub cmd: BudgetCmd,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum BudgetCmd {
    /// Show the tree with shares, allocations, usage over the window and ratios.
    Show {
        /// Window in days (default: the service's, 7).
        #[arg(long)]
        days: Option<f64>,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Set a team's (or group's) share of its parent's budget (0..=1).
    SetShare {
        /// Team or group of the budget tree.
        #[arg(value_name = "TEAM")]
        node: String,
        share: f64,
        /// Reason, kept in the audit trail.
        #[arg(long)]
        why: String,
        /// Check the edit and show its changes; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Add a team or group under a parent.
    Add {
        #[arg(value_name = "TEAM")]
        name: String,
        #[arg(long)]
        parent: String,
        #[arg(long)]
        share: f64,
        /// Slurm account (leaves only).
        #[arg(long)]
        account: Option<String>,
        /// Manager of the new team (repeatable).
        #[arg(long = "manager")]
        managers: Vec<String>,
        #[arg(long)]
        why: String,
        /// Check the edit and show its changes; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Move a team or group under another parent.
    Move {
        #[arg(value_name = "TEAM")]
        node: String,
        #[arg(long)]
        to: String,
        #[arg(long)]
        why: String,
        /// Check the edit and show its changes; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove a team (a leaf of the budget tree).
    Remove {
        #[arg(value_name = "TEAM")]
        node: String,
        #[arg(long)]
        why: String,
        /// Check the edit and show its changes; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Import the whole tree from TOML, or build it from Slurm's account
    /// hierarchy (--from-sacctmgr): prints the diff; applies only with --yes.
    Import {
        /// Budgets TOML file (`compass budget export`'s format).
        #[arg(
            required_unless_present = "from_sacctmgr",
            conflicts_with = "from_sacctmgr"
        )]
        file: Option<PathBuf>,
        /// Build the tree from the output of `sacctmgr -P -n show assoc
        /// format=Account,ParentName,User,Fairshare` in FILE (`-`: stdin);
        /// without FILE, runs that sacctmgr command (needs slurmdbd).
        /// Accounts become nodes, shares are the fair-share numbers
        /// normalised among siblings; users are folded into their account.
        #[arg(long, value_name = "FILE", num_args = 0..=1)]
        from_sacctmgr: Option<Option<PathBuf>>,
        #[arg(long)]
        why: String,
        /// Apply the changes after showing them.
        #[arg(long)]
        yes: bool,
    },
    /// Export the whole tree as TOML (stdout or --output).
    Export {
        #[arg(long)]
        output: Option<PathBuf>,
        /// Print the API's JSON instead of TOML.
        #[arg(long, conflicts_with = "output")]
        json: bool,
    },
    /// Show the audit trail of budget edits, newest first (who, when, why,
    /// old and new values).
    Audit {
        /// At most this many edits (1..=10000).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `compass why JOBID`, `compass why --me`
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["job", "me", "user"])))]
pub struct WhyArgs {
    #[command(flatten)]
    pub conn: Connection,
    /// Slurm job id.
    pub job: Option<u64>,
    /// All your own jobs: why each pending one waits, and whether each
    /// running one is protected or may be preempted.
    #[arg(long)]
    pub me: bool,
    /// The jobs of another user, as --me shows yours (with Slurm's
    /// `PrivateData=jobs`: admins and operators only).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Print the API's JSON instead of the explanation.
    #[arg(long)]
    pub json: bool,
}

/// `compass node ...`: faulty nodes (admins only for writes).
#[derive(clap::Args, Debug, Clone)]
pub struct NodeArgs {
    #[command(flatten)]
    pub conn: Connection,
    #[command(subcommand)]
    pub cmd: NodeCmd,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum NodeCmd {
    /// Mark a Slurm node faulty: DRAIN at once (no new jobs); each job on it
    /// is preempted as soon as its protection ends; then it is drained.
    Fault {
        node: String,
        /// Why (kept with the record and shown as Slurm's node reason).
        #[arg(long)]
        reason: String,
    },
    /// Return a repaired node to service (RESUME in Slurm).
    Repaired { node: String },
    /// List the nodes with their Slurm state and faulty records.
    List {
        #[arg(long)]
        json: bool,
    },
}

/// The TOML file format of import/export (`etc/budgets.example.toml`): one
/// `[[team]]` table per team or group of the tree. `[[node]]`, the first
/// name of these tables, is still read ("node" means a host to Slurm users,
/// so it is no longer written).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BudgetsToml {
    #[serde(default, rename = "team", alias = "node")]
    pub nodes: Vec<NodeSpec>,
}

/// Parses a budgets TOML file (no I/O): malformed TOML and unknown keys are
/// errors; the tree itself is validated by the service (and
/// [`compass_core::fairshare::OrgTree::build`]).
pub fn parse_budgets_toml(text: &str) -> Result<BudgetsToml> {
    toml::from_str(text).map_err(|e| BudgetError::Malformed {
        field: None,
        why: e.to_string(),
    })
}

/// Renders a tree as budgets TOML.
pub fn budgets_to_toml(nodes: &[NodeSpec]) -> Result<String> {
    toml::to_string(&BudgetsToml {
        nodes: nodes.to_vec(),
    })
    .map_err(|e| BudgetError::Malformed {
        field: None,
        why: e.to_string(),
    })
}

/// A small HTTP(S) client of the service; writes carry a MUNGE credential.
pub struct Client {
    base: String,
    socket: Option<PathBuf>,
    agent: ureq::Agent,
}

/// The TLS settings: the CAs of `ca_file`, else the system's CA store
/// (rustls-platform-verifier: /etc/ssl/certs, `SSL_CERT_FILE`, `SSL_CERT_DIR`).
fn tls_config(ca_file: Option<&Path>) -> Result<ureq::tls::TlsConfig> {
    use ureq::tls::{PemItem, RootCerts, TlsConfig};
    let roots = match ca_file {
        None => RootCerts::PlatformVerifier,
        Some(p) => {
            let pem = std::fs::read(p).map_err(|e| BudgetError::Config {
                path: p.display().to_string(),
                why: format!("ca_file: {e}"),
            })?;
            let mut certs = Vec::new();
            for item in ureq::tls::parse_pem(&pem) {
                match item {
                    Ok(PemItem::Certificate(c)) => certs.push(c),
                    Ok(_) => {}
                    Err(e) => {
                        return Err(BudgetError::Config {
                            path: p.display().to_string(),
                            why: format!("ca_file: not PEM: {e}"),
                        })
                    }
                }
            }
            if certs.is_empty() {
                return Err(BudgetError::Config {
                    path: p.display().to_string(),
                    why: "ca_file: no certificate in the file".into(),
                });
            }
            RootCerts::new_with_certs(&certs)
        }
    };
    Ok(TlsConfig::builder().root_certs(roots).build())
}

impl Client {
    /// A client of the service `conn` resolves to ([`Connection::resolve`]).
    pub fn new(conn: &Connection) -> Result<Self> {
        let r = conn.resolve()?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // A service that accepts and never answers must not hang the
            // CLI (it waited until the server closed the connection).
            .timeout_global(Some(std::time::Duration::from_secs(r.timeout_s)))
            .tls_config(tls_config(r.ca_file.as_deref())?)
            .build()
            .into();
        Ok(Client {
            base: r.url,
            socket: r.munge_socket,
            agent,
        })
    }

    /// The service's base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    fn finish(
        &self,
        resp: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value> {
        let mut resp = resp.map_err(|e| BudgetError::Unreachable {
            url: self.base.clone(),
            why: e.to_string(),
        })?;
        let status = resp.status();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| BudgetError::Unreachable {
                url: self.base.clone(),
                why: format!("reading the answer: {e}"),
            })?;
        let json = serde_json::from_str::<Value>(&text);
        if status.is_success() {
            // Every endpoint the CLI calls answers JSON: anything else (an
            // HTML page of another server, a truncated answer) is an error,
            // not an empty report.
            return json.map_err(|e| BudgetError::Unreachable {
                url: self.base.clone(),
                why: format!(
                    "the answer (HTTP {}) is not the service's JSON ({e}): {:?}; is the URL \
                     the compass budget service?",
                    status.as_u16(),
                    text.chars().take(80).collect::<String>()
                ),
            });
        }
        let v: Value = json.unwrap_or(Value::String(text));
        {
            let msg = v
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| match &v {
                    Value::String(t) if t.trim().is_empty() => {
                        status.canonical_reason().unwrap_or("").to_string()
                    }
                    Value::String(t) => t.trim().to_string(),
                    other => other.to_string(),
                });
            Err(BudgetError::Api {
                status: status.as_u16(),
                message: msg,
            })
        }
    }

    /// `GET path`; non-2xx statuses become errors carrying the API's message.
    /// Signed with a MUNGE credential when munged's socket is there, so
    /// that a service applying Slurm's `PrivateData` knows who reads;
    /// anonymous otherwise.
    pub fn get(&self, path: &str) -> Result<Value> {
        let mut req = self.agent.get(format!("{}{path}", self.base));
        let socket = (self.socket.as_deref()).unwrap_or(Path::new(DEFAULT_MUNGE_SOCKET));
        if socket.exists() {
            match munge_encode_payload(Some(socket), &request_payload("GET", path, b"")) {
                Ok(cred) => req = req.header("Authorization", &format!("{SCHEME} {cred}")),
                Err(e) => tracing::debug!(error = %e, "reading anonymously"),
            }
        }
        self.finish(req.call())
    }

    /// An authenticated `POST`, `PATCH` or `DELETE` with a JSON body.
    pub fn write(&self, method: &str, path: &str, body: &Value) -> Result<Value> {
        let bytes = serde_json::to_vec(body).map_err(|e| BudgetError::Http(e.to_string()))?;
        let cred = munge_encode_payload(
            self.socket.as_deref(),
            &request_payload(method, path, &bytes),
        )?;
        let url = format!("{}{path}", self.base);
        let auth = format!("{SCHEME} {cred}");
        let r = match method {
            "POST" => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .header("Content-Type", "application/json")
                .send(&bytes[..]),
            "PATCH" => self
                .agent
                .patch(&url)
                .header("Authorization", &auth)
                .header("Content-Type", "application/json")
                .send(&bytes[..]),
            "DELETE" => self
                .agent
                .delete(&url)
                .header("Authorization", &auth)
                .header("Content-Type", "application/json")
                .force_send_body()
                .send(&bytes[..]),
            m => return Err(BudgetError::Http(format!("unsupported method {m}"))),
        };
        self.finish(r)
    }
}

fn path_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn fmt_opt(v: &Value, digits: usize) -> String {
    v.as_f64()
        .map_or("-".to_string(), |x| format!("{x:.digits$}"))
}

/// Renders the tree response as a table.
pub fn render_tree(v: &Value) -> String {
    let mut out = format!(
        "{:<32} {:>7} {:>8} {:>9} {:>11} {:>9} {:>7}\n",
        "team", "share", "cluster", "alloc GPU", "charged GPUh", "free GPUh", "ratio"
    );
    for n in v["nodes"].as_array().into_iter().flatten() {
        let depth = n["depth"].as_u64().unwrap_or(0) as usize;
        let mut name = format!(
            "{}{}",
            "  ".repeat(depth),
            n["name"].as_str().unwrap_or("?")
        );
        if let Some(a) = n["account"].as_str() {
            name.push_str(&format!(" [{a}]"));
        }
        out.push_str(&format!(
            "{:<32} {:>7} {:>7.1}% {:>9} {:>11} {:>9} {:>7}\n",
            name,
            fmt_opt(&n["share"], 3),
            n["abs_share"].as_f64().unwrap_or(0.0) * 100.0,
            fmt_opt(&n["allocation_gpus"], 2),
            fmt_opt(&n["charged_gpu_hours"], 1),
            fmt_opt(&n["free_gpu_hours"], 1),
            fmt_opt(&n["ratio"], 3),
        ));
    }
    out.push_str(&weights_line(v));
    out
}

/// Under `compass budget show`: where fair share lives under compass.
pub const SSHARE_NOTE: &str = "\nThis is the fair share compass orders the queue by (ratio = charged usage / allocation over the window).\n\
Slurm's sshare and sprio fair-share columns are not used; sprio's SITE column is compass's order.\n\
Why one job waits: compass why JOBID; all of yours: compass why --me.\n";

/// Under the tree table, when `[gpu_weights]` is set: GPU-hours and GPUs
/// are weighted, and by what.
fn weights_line(v: &Value) -> String {
    let Some(w) = v["gpu_weights"].as_object().filter(|w| !w.is_empty()) else {
        return String::new();
    };
    let list: Vec<String> = w
        .iter()
        .map(|(t, x)| format!("{t} x{}", x.as_f64().unwrap_or(1.0)))
        .collect();
    format!(
        "GPUs and GPU-hours are weighted ([gpu_weights]: {}; other GPUs x1); capacity {} weighted GPUs\n",
        list.join(", "),
        fmt_opt(&v["capacity_gpus"], 1)
    )
}

/// Prints the changes of an edit; for a dry run, says nothing was applied.
fn print_edit(v: &Value, dry_run: bool) {
    if dry_run {
        println!("dry run: the changes this edit would make:");
    }
    print_changes(v);
    if dry_run {
        println!("(not applied; run again without --dry-run to apply)");
    }
}

/// Renders `GET /api/v1/audit` as text: one line per edit, then what changed.
pub fn render_audit(v: &Value) -> String {
    let mut out = String::new();
    for r in v["rows"].as_array().into_iter().flatten() {
        let desc = |x: &Value| -> String {
            if x.is_null() {
                return "-".to_string();
            }
            let mut parts = vec![];
            if let Some(p) = x["parent"].as_str() {
                parts.push(format!("parent {p}"));
            }
            if let Some(sh) = x["share"].as_f64() {
                parts.push(format!("share {sh}"));
            }
            if let Some(a) = x["account"].as_str() {
                parts.push(format!("account {a}"));
            }
            if let Some(m) = x["managers"].as_array().filter(|m| !m.is_empty()) {
                let m: Vec<&str> = m.iter().filter_map(Value::as_str).collect();
                parts.push(format!("managers {}", m.join(",")));
            }
            parts.join(", ")
        };
        out.push_str(&format!(
            "{}  {:<8} {:<24} by {}: {}\n    before: {}\n    after:  {}\n",
            crate::localtime::text(crate::localtime::from_json(&r["at"]).unwrap_or(0)),
            r["action"].as_str().unwrap_or("?"),
            r["node"].as_str().unwrap_or("?"),
            r["who"].as_str().unwrap_or("?"),
            r["why"].as_str().unwrap_or(""),
            desc(&r["old"]),
            desc(&r["new"]),
        ));
    }
    if out.is_empty() {
        out.push_str("no budget edits yet\n");
    }
    out
}

fn print_changes(v: &Value) {
    let summary = v["summary"].as_array().cloned().unwrap_or_default();
    if summary.is_empty() {
        println!("no changes");
    }
    for s in summary {
        println!("{}", s.as_str().unwrap_or_default());
    }
}

fn read_file(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).map_err(|e| BudgetError::Config {
        path: p.display().to_string(),
        why: e.to_string(),
    })
}

/// Runs `compass budget ...`.
pub fn run_budget(args: &BudgetArgs) -> Result<()> {
    let c = Client::new(&args.conn)?;
    match &args.cmd {
        BudgetCmd::Show { days, json } => {
            let path = match days {
                Some(d) if d.is_finite() && *d > 0.0 => {
                    format!("/api/v1/tree?window_s={}", (d * 86400.0) as i64)
                }
                Some(_) => {
                    return Err(BudgetError::Usage(
                        "--days: must be a positive number".into(),
                    ))
                }
                None => "/api/v1/tree".to_string(),
            };
            let v = c.get(&path)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}{SSHARE_NOTE}", render_tree(&v));
            }
        }
        BudgetCmd::SetShare {
            node,
            share,
            why,
            dry_run,
        } => {
            let v = c.write(
                "PATCH",
                &format!("/api/v1/teams/{}", path_escape(node)),
                &json!({ "share": share, "why": why, "dry_run": dry_run }),
            )?;
            print_edit(&v, *dry_run);
        }
        BudgetCmd::Add {
            name,
            parent,
            share,
            account,
            managers,
            why,
            dry_run,
        } => {
            let v = c.write(
                "POST",
                "/api/v1/teams",
                &json!({ "name": name, "parent": parent, "share": share, "account": account,
                         "managers": managers, "why": why, "dry_run": dry_run }),
            )?;
            print_edit(&v, *dry_run);
        }
        BudgetCmd::Move {
            node,
            to,
            why,
            dry_run,
        } => {
            let v = c.write(
                "PATCH",
                &format!("/api/v1/teams/{}", path_escape(node)),
                &json!({ "parent": to, "why": why, "dry_run": dry_run }),
            )?;
            print_edit(&v, *dry_run);
        }
        BudgetCmd::Remove { node, why, dry_run } => {
            let v = c.write(
                "DELETE",
                &format!("/api/v1/teams/{}", path_escape(node)),
                &json!({ "why": why, "dry_run": dry_run }),
            )?;
            print_edit(&v, *dry_run);
        }
        BudgetCmd::Import {
            file,
            from_sacctmgr,
            why,
            yes,
        } => {
            let (nodes, from) = match (file, from_sacctmgr) {
                (_, Some(src)) => {
                    let (text, from) = crate::sacctmgr::read_source(src.as_deref())?;
                    let imported = crate::sacctmgr::tree_from_sacctmgr(&text)?;
                    for n in &imported.notes {
                        println!("note: {n}");
                    }
                    (imported.nodes, from)
                }
                (Some(file), None) => (
                    parse_budgets_toml(&read_file(file)?)?.nodes,
                    file.display().to_string(),
                ),
                (None, None) => {
                    return Err(BudgetError::Usage(
                        "give a budgets TOML file or --from-sacctmgr".into(),
                    ))
                }
            };
            let body = |dry: bool| json!({ "nodes": nodes, "why": why, "dry_run": dry });
            println!("dry run: changes from {from}:");
            print_changes(&c.write("POST", "/api/v1/import", &body(true))?);
            if *yes {
                let v = c.write("POST", "/api/v1/import", &body(false))?;
                println!(
                    "applied {} change(s)",
                    v["changes"].as_array().map_or(0, Vec::len)
                );
            } else {
                println!("(not applied; run again with --yes to apply)");
            }
        }
        BudgetCmd::Export { output, json } => {
            let v = c.get("/api/v1/export")?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                return Ok(());
            }
            let nodes: Vec<NodeSpec> = serde_json::from_value(v["nodes"].clone())
                .map_err(|e| BudgetError::Http(format!("unexpected export: {e}")))?;
            let text = budgets_to_toml(&nodes)?;
            match output {
                Some(p) => std::fs::write(p, text)?,
                None => print!("{text}"),
            }
        }
        BudgetCmd::Audit { limit, json } => {
            let v = c.get(&format!("/api/v1/audit?limit={limit}"))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}", render_audit(&v));
            }
        }
    }
    Ok(())
}

/// libmunge's default socket.
const DEFAULT_MUNGE_SOCKET: &str = "/run/munge/munge.socket.2";

/// Runs `compass why JOBID`: its place in the queue (or its last run) and
/// what enforcement did to it or for it; `compass why --me`: the same for
/// each of the user's own pending and running jobs.
pub fn run_why(args: &WhyArgs) -> Result<()> {
    print!("{}", why_output(args)?);
    Ok(())
}

/// What `compass why` prints.
pub fn why_output(args: &WhyArgs) -> Result<String> {
    let c = Client::new(&args.conn)?;
    let user = match (&args.user, args.me) {
        (Some(u), _) => Some(u.clone()),
        (None, true) => Some(crate::auth::current_user()),
        (None, false) => None,
    };
    let v = match (user, args.job) {
        (Some(u), _) => c.get(&format!("/api/v1/jobs?user={}", path_escape(&u)))?,
        (None, Some(job)) => c.get(&format!("/api/v1/queue/{job}"))?,
        (None, None) => {
            return Err(BudgetError::Usage(
                "give a job id, --me or --user USER".into(),
            ))
        }
    };
    if args.json {
        return Ok(serde_json::to_string_pretty(&v).unwrap_or_default() + "\n");
    }
    if v.get("pending").is_some() {
        return Ok(render_user_jobs(&v));
    }
    let mut out = (v["row"]["why"].as_str())
        .unwrap_or("no explanation returned\n")
        .to_string();
    if let Some(t) = v["enforcement"].as_str().filter(|t| !t.is_empty()) {
        out.push_str(t);
    }
    Ok(out)
}

/// Renders `GET /api/v1/jobs?user=` (`compass why --me`): each pending job
/// with why it waits, each running job with its protection, then the runs
/// that ended within the usage window.
pub fn render_user_jobs(v: &Value) -> String {
    let user = v["user"].as_str().unwrap_or("?");
    let pending = v["pending"].as_array().cloned().unwrap_or_default();
    let running = v["running"].as_array().cloned().unwrap_or_default();
    let ended = v["ended"].as_array().cloned().unwrap_or_default();
    if pending.is_empty() && running.is_empty() && ended.is_empty() {
        return format!("{user} has no pending or running jobs.\n");
    }
    let mut out = String::new();
    if !pending.is_empty() {
        out.push_str(&format!(
            "Pending jobs of {user} ({}), in the order of {}:\n",
            pending.len(),
            crate::localtime::text(crate::localtime::from_json(&v["at"]).unwrap_or(0))
        ));
        for p in &pending {
            out.push_str(&format!(
                "\njob {} ({} GPUs, account {}):\n{}",
                p["job"],
                p["gpus"],
                p["account"].as_str().unwrap_or("?"),
                p["why"].as_str().unwrap_or("")
            ));
        }
    }
    if !running.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("Running jobs of {user} ({}):\n", running.len()));
        for r in &running {
            let since =
                crate::localtime::from_json(&r["start"]).map_or("?".into(), crate::localtime::text);
            out.push_str(&format!(
                "\njob {} ({} GPUs, account {}), running since {since}:\n{}",
                r["job"],
                r["gpus"],
                r["account"].as_str().unwrap_or("?"),
                r["enforcement"].as_str().unwrap_or("")
            ));
        }
    }
    if !ended.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("Ended jobs of {user} ({}):\n", ended.len()));
        let t =
            |x: &Value| crate::localtime::from_json(x).map_or("?".into(), crate::localtime::text);
        for r in &ended {
            out.push_str(&format!(
                "job {} ({} GPUs, account {}): {} to {}\n",
                r["job"],
                r["gpus"],
                r["account"].as_str().unwrap_or("?"),
                t(&r["start"]),
                t(&r["end"])
            ));
        }
    }
    out
}

/// Renders `GET /api/v1/hosts` as a table.
pub fn render_hosts(v: &Value) -> String {
    let mut out = format!("{:<16} {:>4} {:<9} {}\n", "node", "gpus", "state", "faulty");
    for n in v["nodes"].as_array().into_iter().flatten() {
        let faulty = match n["faulty"].as_object() {
            Some(f) => format!(
                "since {} by {}: {}",
                crate::localtime::text(
                    f.get("since")
                        .and_then(crate::localtime::from_json)
                        .unwrap_or(0)
                ),
                f.get("by").and_then(Value::as_str).unwrap_or("?"),
                f.get("reason").and_then(Value::as_str).unwrap_or("")
            ),
            None => "-".to_string(),
        };
        out.push_str(&format!(
            "{:<16} {:>4} {:<9} {}\n",
            n["name"].as_str().unwrap_or("?"),
            n["gpus"].as_u64().unwrap_or(0),
            n["state"].as_str().unwrap_or("?"),
            faulty
        ));
    }
    // Faulty records of nodes the last cycle did not see.
    let seen: Vec<&str> = v["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["name"].as_str())
        .collect();
    for f in v["faulty"].as_array().into_iter().flatten() {
        let name = f["node"].as_str().unwrap_or("?");
        if !seen.contains(&name) {
            out.push_str(&format!(
                "{:<16} {:>4} {:<9} since {} by {}: {}\n",
                name,
                "-",
                "unknown",
                crate::localtime::text(crate::localtime::from_json(&f["since"]).unwrap_or(0)),
                f["by"].as_str().unwrap_or("?"),
                f["reason"].as_str().unwrap_or("")
            ));
        }
    }
    out
}

/// Runs `compass node ...`.
pub fn run_node(args: &NodeArgs) -> Result<()> {
    let c = Client::new(&args.conn)?;
    match &args.cmd {
        NodeCmd::Fault { node, reason } => {
            let v = c.write(
                "POST",
                &format!("/api/v1/hosts/{}/fault", path_escape(node)),
                &json!({ "reason": reason }),
            )?;
            println!(
                "node {node} marked faulty: {}",
                v["detail"].as_str().unwrap_or_default()
            );
        }
        NodeCmd::Repaired { node } => {
            let v = c.write(
                "POST",
                &format!("/api/v1/hosts/{}/repaired", path_escape(node)),
                &json!({}),
            )?;
            println!(
                "node {node} repaired: {}",
                v["detail"].as_str().unwrap_or_default()
            );
        }
        NodeCmd::List { json } => {
            let v = c.get("/api/v1/hosts")?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}", render_hosts(&v));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local server that accepts connections and answers each with
    /// `answer` (`None`: never answers, holding the connection).
    fn server(answer: Option<&'static str>) -> String {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for mut c in l.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf);
                if let Some(a) = answer {
                    let _ = c.write_all(a.as_bytes());
                } else {
                    held.push(c);
                }
            }
        });
        url
    }

    fn client(url: &str, timeout: u64) -> Client {
        Client::new(&Connection {
            timeout: Some(timeout),
            ..Connection::to(url)
        })
        .unwrap()
    }

    #[test]
    fn a_service_that_never_answers_times_out() {
        let url = server(None);
        let t = std::time::Instant::now();
        let e = client(&url, 1).get("/api/v1/tree").unwrap_err();
        assert!(matches!(e, BudgetError::Unreachable { .. }), "{e}");
        // It waited until the server closed (never, here) before.
        assert!(t.elapsed() < std::time::Duration::from_secs(20), "{e}");
        let zero = Client::new(&Connection {
            timeout: Some(0),
            ..Connection::to(&url)
        });
        assert!(zero.is_err());
    }

    #[test]
    fn an_answer_that_is_not_json_is_an_error_not_an_empty_report() {
        let url = server(Some(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 15\r\nConnection: close\r\n\r\n<html>hi</html>",
        ));
        let e = client(&url, 10).get("/api/v1/audit?limit=5").unwrap_err();
        assert!(
            e.to_string().contains("is not the service's JSON") && e.to_string().contains("<html>"),
            "{e}"
        );
    }

    #[test]
    fn example_toml_parses_and_validates() {
        let doc = parse_budgets_toml(include_str!("../../etc/budgets.example.toml")).unwrap();
        let tree = compass_core::fairshare::OrgTree::build(&doc.nodes).unwrap();
        assert!(tree.len() >= 5);
        let back = parse_budgets_toml(&budgets_to_toml(&tree.to_specs()).unwrap()).unwrap();
        assert_eq!(back.nodes, tree.to_specs());
    }

    #[test]
    fn tree_table_shows_shares_usage_and_ratios() {
        let v = json!({ "nodes": [
            { "name": "org", "depth": 0, "share": 1.0, "abs_share": 1.0, "allocation_gpus": 64.0,
              "charged_gpu_hours": 424.0, "free_gpu_hours": 40.0, "ratio": 0.0394, "account": null },
            { "name": "team-a", "depth": 1, "share": 0.7, "abs_share": 0.21, "allocation_gpus": 13.44,
              "charged_gpu_hours": 376.0, "free_gpu_hours": 0.0, "ratio": null, "account": "nlp-a" },
        ]});
        let out = render_tree(&v);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("team "));
        let cols: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            cols,
            ["team-a", "[nlp-a]", "0.700", "21.0%", "13.44", "376.0", "0.0", "-"]
        );
        assert!(lines[1].split_whitespace().last() == Some("0.039"));
        // With `[gpu_weights]`, a line says what the numbers are in.
        let mut w = v.clone();
        w["gpu_weights"] = json!({ "a100": 2.0, "l40s": 1.0 });
        w["capacity_gpus"] = json!(148.0);
        let out = render_tree(&w);
        assert_eq!(
            out.lines().last(),
            Some("GPUs and GPU-hours are weighted ([gpu_weights]: a100 x2, l40s x1; other GPUs x1); capacity 148.0 weighted GPUs")
        );
    }

    #[test]
    fn hosts_table_shows_state_and_faulty_records() {
        let v = json!({
            "nodes": [
                { "name": "n1", "gpus": 8, "state": "up", "reason": "", "faulty": null },
                { "name": "n2", "gpus": 8, "state": "draining", "reason": "compass faulty: ECC",
                  "faulty": { "node": "n2", "reason": "ECC", "since": 100, "by": "root" } },
            ],
            "faulty": [
                { "node": "n2", "reason": "ECC", "since": 100, "by": "root" },
                { "node": "gone", "reason": "old", "since": 50, "by": "ops" },
            ],
        });
        let out = render_hosts(&v);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["n1", "8", "up", "-"]
        );
        assert!(lines[2].starts_with("n2") && lines[2].contains("draining"));
        assert!(
            lines[2].ends_with(&format!(
                "since {} by root: ECC",
                crate::localtime::text(100)
            )),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with("gone") && lines[3].contains("unknown"),
            "{}",
            lines[3]
        );
    }

    #[test]
    fn audit_shows_when_who_why_and_the_values_before_and_after() {
        let v = json!({ "rows": [
            // API version 2: ISO 8601 with the service's offset, shown in
            // the reader's local time; version 1's Unix seconds still read.
            { "id": 2, "at": "2026-11-29T19:49:20+05:00", "action": "update", "node": "team-a", "who": "lead-a",
              "why": "rebalance",
              "old": { "name": "team-a", "parent": "org", "share": 0.7, "account": "a", "managers": ["lead-a"] },
              "new": { "name": "team-a", "parent": "org", "share": 0.6, "account": "a", "managers": ["lead-a"] } },
            { "id": 1, "at": 1_795_963_000_i64, "action": "create", "node": "team-a", "who": "root",
              "why": "new team", "old": null,
              "new": { "name": "team-a", "parent": "org", "share": 0.7, "account": null, "managers": [] } },
        ]});
        let out = render_audit(&v);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 6, "{out}");
        assert_eq!(
            lines[0],
            format!(
                "{}  update   team-a                   by lead-a: rebalance",
                crate::localtime::text(1_795_963_760)
            )
        );
        assert_eq!(
            lines[1],
            "    before: parent org, share 0.7, account a, managers lead-a"
        );
        assert_eq!(
            lines[2],
            "    after:  parent org, share 0.6, account a, managers lead-a"
        );
        assert_eq!(lines[4], "    before: -");
        assert_eq!(lines[5], "    after:  parent org, share 0.7");
        assert_eq!(
            render_audit(&json!({ "rows": [] })),
            "no budget edits yet\n"
        );
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(path_escape("team a/b"), "team%20a%2Fb");
        assert_eq!(path_escape("nlp-a_1.x~"), "nlp-a_1.x~");
    }

    #[test]
    fn malformed_toml_and_unknown_keys_are_errors() {
        assert!(parse_budgets_toml("[[node]]\nname = \"x\"\nshare = ").is_err());
        // [[team]] is the name written; [[node]], the first one, is read too.
        let team = parse_budgets_toml("[[team]]\nname = \"x\"\nshare = 1.0\n").unwrap();
        let node = parse_budgets_toml("[[node]]\nname = \"x\"\nshare = 1.0\n").unwrap();
        assert_eq!(team, node);
        assert_eq!(team.nodes.len(), 1);
        assert!(budgets_to_toml(&team.nodes).unwrap().contains("[[team]]"));
        let e = parse_budgets_toml("[[node]]\nname = \"x\"\nshare = 1.0\nacount = \"a\"\n")
            .unwrap_err();
        assert!(e.to_string().contains("acount"), "{e}");
    }
}
