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
    pub fn start(config: &Path, port: u16) -> Self {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(config.with_file_name("budgetd.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_compass-budgetd"))
            .arg("--config")
            .arg(config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let d = Daemon {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        wait_for("compass-budgetd /healthz", Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        d
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

impl Drop for Daemon {
    fn drop(&mut self) {
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
