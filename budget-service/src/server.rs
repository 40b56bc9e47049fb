//! Start-up and graceful shutdown of `compass-budgetd`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::auth::MungeAuth;
use crate::config::{Config, SlurmMode};
use crate::db::Db;
use crate::error::{BudgetError, Result};
use crate::state::{AppState, SystemClock};

/// `--version`: the crate version and the Slurm release whose libslurm the
/// daemon is built against (a libslurm of another release will not load:
/// its soname differs, `libslurm.so.38` for 22.05, `.42` for 24.11).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (Slurm ",
    env!("COMPASS_BUDGET_SLURM_RELEASE"),
    ")"
);

/// Command line of `compass-budgetd`.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "compass-budgetd",
    version = VERSION,
    about = "compass budget service: org-tree GPU budgets and fair-share queue order"
)]
pub struct DaemonArgs {
    /// Configuration file (see etc/compass-budgetd.toml).
    #[arg(long)]
    pub config: PathBuf,
    /// Database path (overrides `db` in the config).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Listen address (overrides `listen` in the config).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
}

/// Loads the config with the command-line overrides applied.
pub fn load_config(args: &DaemonArgs) -> Result<Config> {
    let mut c = Config::load(&args.config)?;
    if let Some(db) = &args.db {
        c.db = db.clone();
    }
    if let Some(l) = args.listen {
        c.listen = l;
    }
    Ok(c)
}

/// Runs the service until SIGINT or SIGTERM.
pub fn run(args: DaemonArgs) -> Result<()> {
    let config = load_config(&args)?;
    if config.slurm == SlurmMode::Libslurm {
        // Reads slurm.conf while the process has one thread: libslurm sets
        // SLURM_CONF with setenv(3). Contacts no daemon.
        crate::slurm::libslurm::LibSlurm::new(config.slurm_conf.clone()).init()?;
    }
    let db = Db::open(&config.db)?;
    let auth = Arc::new(MungeAuth {
        socket: config.munge_socket.clone(),
    });
    let state = AppState::new(config, db, auth, Arc::new(SystemClock));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(state))
}

/// Binds, serves and shuts down gracefully on SIGINT/SIGTERM.
pub async fn serve(state: Arc<AppState>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(state.config.listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, db = %state.config.db.display(), "compass-budgetd listening");
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "listening beyond loopback; reads are open to anyone unless PrivateData applies ([reads])");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let cycle: Option<std::thread::JoinHandle<()>> = match state.config.slurm {
        SlurmMode::None => {
            tracing::info!(
                "slurm = \"none\": no Slurm cycle; the ledger is fed through POST /api/v1/ledger"
            );
            None
        }
        SlurmMode::File => {
            let path = state.config.slurm_file.clone().unwrap_or_default();
            tracing::info!(file = %path.display(), "slurm = \"file\": reading snapshots from a file");
            let fs = Arc::new(crate::slurm::FileSlurm { path });
            Some(crate::cycle::Cycle::new(state.clone(), fs.clone(), fs).spawn(stop.clone()))
        }
        SlurmMode::Libslurm => {
            let ls = Arc::new(crate::slurm::libslurm::LibSlurm::new(
                state.config.slurm_conf.clone(),
            ));
            tracing::info!(conf = %ls.conf_path().display(), "slurm = \"libslurm\": reading and ordering the controller's queue");
            Some(
                crate::cycle::Cycle::new(state.clone(), ls.clone(), ls.clone())
                    .with_actions(ls)
                    .spawn(stop.clone()),
            )
        }
    };
    let select = state
        .config
        .select_state_file
        .is_some()
        .then(|| crate::select_state::spawn_reader(state.clone(), stop.clone()));
    let app = crate::api::router(state.clone());
    tokio::spawn(reload_on_sighup(state.clone()));
    // The peer address identifies trusted reverse proxies ([reads]).
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(BudgetError::Io)?;
    stop.store(true, Ordering::SeqCst);
    for h in [cycle, select].into_iter().flatten() {
        let _ = h.join();
    }
    tracing::info!("compass-budgetd stopped");
    Ok(())
}

/// Re-reads slurm.conf's `PrivateData` on SIGHUP (`systemctl reload
/// compass-budgetd`) and when slurm.conf or an included file changes
/// (checked every [`READS_POLL`]), off the runtime.
async fn reload_on_sighup(state: Arc<AppState>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup()).ok();
    let mut tick = tokio::time::interval(READS_POLL);
    loop {
        let forced = tokio::select! {
            Some(()) = async { hup.as_mut()?.recv().await } => true,
            _ = tick.tick() => false,
        };
        let st = state.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if forced || st.read_policy().changed() {
                st.reload_reads();
            }
        })
        .await;
    }
}

/// How often slurm.conf's modification time is checked for `PrivateData`.
const READS_POLL: std::time::Duration = std::time::Duration::from_secs(30);

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested");
}
