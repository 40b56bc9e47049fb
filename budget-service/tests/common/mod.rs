//! Test helpers: a service state over an in-memory ledger, temporary
//! directories, a private munged, the real compass-budgetd binary.
//! Everything is torn down on drop, even when a test fails.
#![allow(dead_code)]

pub mod lab;

/// The tests' authenticator (refuses every write) and tree nodes (not
/// every test binary uses them).
#[allow(unused_imports)]
pub use lab::{spec, NoAuth};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use compass_budget::auth::Authenticator;
use compass_budget::config::Config;
use compass_budget::db::Db;
use compass_budget::state::{AppState, TestClock};
use compass_core::fairshare::NodeSpec;

/// Takes the credential as the user name (tests only).
pub struct NameAuth;

impl Authenticator for NameAuth {
    fn authenticate(&self, credential: &str, _payload: &[u8]) -> compass_budget::Result<String> {
        if credential.is_empty() {
            return Err(compass_budget::BudgetError::Unauthenticated(
                "empty credential".into(),
            ));
        }
        Ok(credential.to_string())
    }
}

/// A service state for a test: `config` over an in-memory ledger, `auth`,
/// a test clock at `t0`, and `tree` imported at `t0` (nothing when empty).
pub fn test_state(
    config: Config,
    auth: impl Authenticator + 'static,
    t0: i64,
    tree: Vec<NodeSpec>,
) -> (Arc<AppState>, Arc<TestClock>) {
    let clock = Arc::new(TestClock::new(t0));
    let state = AppState::new(
        config,
        Db::open_in_memory().unwrap(),
        Arc::new(auth),
        clock.clone(),
    );
    if !tree.is_empty() {
        state
            .db()
            .edit_tree("root", "import", "test tree", t0, |_| Ok(tree.clone()))
            .unwrap();
    }
    (state, clock)
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let p = std::env::temp_dir().join(format!(
            "compass-budget-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A private munged on a private socket (like the Slurm lab's), killed on drop.
pub struct Munged {
    child: Child,
    pub socket: PathBuf,
    _dir: TempDir,
}

impl Munged {
    pub fn start() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new("munge");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let key = dir.path().join("munge.key");
        let mut bytes = vec![0u8; 1024];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").unwrap(),
            &mut bytes,
        )
        .unwrap();
        std::fs::write(&key, &bytes).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let socket = dir.path().join("munge.socket");
        let child = Command::new("munged")
            .arg("--foreground")
            .arg("--force")
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.path().join("munged.pid").display()))
            .arg(format!("--log-file={}", dir.path().join("munged.log").display()))
            .arg(format!("--seed-file={}", dir.path().join("munged.seed").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .or_else(|_| {
                Command::new("/usr/sbin/munged")
                    .arg("--foreground")
                    .arg("--force")
                    .arg(format!("--key-file={}", key.display()))
                    .arg(format!("--socket={}", socket.display()))
                    .arg(format!("--pid-file={}", dir.path().join("munged.pid").display()))
                    .arg(format!("--log-file={}", dir.path().join("munged.log").display()))
                    .arg(format!("--seed-file={}", dir.path().join("munged.seed").display()))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
            })
            .expect("munged not found: install the Debian package `munge` (see the budget service docs)");
        let m = Munged {
            child,
            socket,
            _dir: dir,
        };
        wait_for("munged socket", Duration::from_secs(10), || {
            m.socket.exists()
        });
        m
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on at the time of the call (for a "service
/// down" URL). Daemons pick their own port: see `Daemon::start`.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The real compass-budgetd, killed on drop.
pub struct Daemon {
    pub child: Child,
    pub url: String,
    /// The daemon's log (stdout and stderr), and where this run's part of
    /// it starts: printed when a test fails with the daemon up.
    log: PathBuf,
    log_from: usize,
}

pub fn write_config(dir: &Path, admins: &[&str], capacity: u32, munge_socket: &Path) -> PathBuf {
    let cfg = dir.join("budgetd.toml");
    let admins: Vec<String> = admins.iter().map(|a| format!("\"{a}\"")).collect();
    std::fs::write(
        &cfg,
        format!(
            "db = \"{}\"\nadmins = [{}]\ncapacity_gpus = {capacity}\nmunge_socket = \"{}\"\nmax_body_bytes = 65536\n",
            dir.join("budget.db").display(),
            admins.join(", "),
            munge_socket.display()
        ),
    )
    .unwrap();
    cfg
}

impl Daemon {
    /// Starts the daemon on a port the kernel picks (`--listen
    /// 127.0.0.1:0`) and reads the bound address from the daemon's own
    /// "listening" log line. No port is chosen before the daemon binds, so
    /// two tests (or a client's ephemeral port) can never share one, and
    /// the address is the daemon's, not whatever else answers there.
    /// Panics with the daemon's log when it exits or never listens.
    pub fn start(config: &Path) -> Self {
        let log_path = config.with_file_name("budgetd.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let from = log.metadata().unwrap().len() as usize;
        let mut child = Command::new(env!("CARGO_BIN_EXE_compass-budgetd"))
            .arg("--config")
            .arg(config)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let start = Instant::now();
        let addr = loop {
            let text = std::fs::read(&log_path).unwrap_or_default();
            let text = String::from_utf8_lossy(&text[from.min(text.len())..]).into_owned();
            if let Some(addr) = listening_addr(&text) {
                break addr;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("compass-budgetd exited ({status}) before listening:\n{text}");
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("compass-budgetd never logged its address in 20 s:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Daemon {
            child,
            url: format!("http://{addr}"),
            log: log_path,
            log_from: from,
        }
    }

    /// SIGKILL, no chance to clean up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait (graceful shutdown).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap()
    }
}

/// The address in the daemon's "compass-budgetd listening addr=..." line.
fn listening_addr(log: &str) -> Option<std::net::SocketAddr> {
    log.lines()
        .filter(|l| l.contains("compass-budgetd listening"))
        .find_map(|l| {
            l.split("addr=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The test failed: say whether the daemon was still up, and
            // what it logged.
            let status = self.child.try_wait().ok().flatten();
            let text = std::fs::read(&self.log).unwrap_or_default();
            eprintln!(
                "compass-budgetd at {} ({}), its log:\n{}",
                self.url,
                status.map_or("still running".to_string(), |s| format!("exited: {s}")),
                String::from_utf8_lossy(&text[self.log_from.min(text.len())..])
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn conn(url: &str, socket: &Path) -> compass_budget::cli::Connection {
    compass_budget::cli::Connection {
        munge_socket: Some(socket.to_path_buf()),
        ..compass_budget::cli::Connection::to(url)
    }
}
