//! The `compass` binary reaching compass-budgetd: exit statuses against the
//! real service (run in this process, on a thread), the client config file
//! and its overrides, and HTTPS against a local TLS endpoint whose CA and
//! certificate the test makes with rcgen (trusted through `ca_file` or
//! `SSL_CERT_FILE`, refused otherwise).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// This helper's lab ports (24100-24990): the service, the TLS endpoint and
/// a port where nothing listens.
const SERVICE_PORT: u16 = 24_131;
const TLS_PORT: u16 = 24_132;
const DEAD_PORT: u16 = 24_133;

/// A scratch directory for this test binary, in cargo's target/tmp (the
/// service thread outlives every test, so it is emptied at the next run).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-service");
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fn wait_listening(port: u16) {
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The real service (slurm = "none", no admins), once per test binary.
fn service_url() -> String {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let dir = scratch().join("service");
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("compass-budgetd.toml");
        std::fs::write(
            &cfg,
            format!(
                "db = \"{}\"\ncapacity_gpus = 8\ncompass_conf = \"{}\"\n",
                dir.join("budget.db").display(),
                dir.join("compass.conf").display()
            ),
        )
        .unwrap();
        let args = compass_budget::server::DaemonArgs {
            config: cfg,
            db: None,
            listen: Some(([127, 0, 0, 1], SERVICE_PORT).into()),
        };
        std::thread::spawn(move || compass_budget::server::run(args).unwrap());
        wait_listening(SERVICE_PORT);
    });
    format!("http://127.0.0.1:{SERVICE_PORT}")
}

/// The test CA (PEM) and a TLS endpoint for `localhost` signed by it, which
/// answers `GET /api/v1/hosts` with one node and anything else with 404.
fn tls_endpoint() -> &'static Path {
    static CA: OnceLock<PathBuf> = OnceLock::new();
    CA.get_or_init(|| {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "compass test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let ca_pem = scratch().join("ca.pem");
        std::fs::write(&ca_pem, ca.pem()).unwrap();

        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
                )
                .unwrap(),
        );
        let listener = TcpListener::bind(("127.0.0.1", TLS_PORT)).unwrap();
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let config = config.clone();
                std::thread::spawn(move || serve_one(config, tcp));
            }
        });
        ca_pem
    })
}

/// One HTTPS exchange: read the request head, answer, close.
fn serve_one(config: Arc<rustls::ServerConfig>, tcp: TcpStream) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let conn = rustls::ServerConnection::new(config).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => return, // the client refused our certificate
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let (status, body) = if head.starts_with("GET /api/v1/hosts HTTP/1.1\r\n") {
        (
            "200 OK",
            r#"{"nodes":[{"name":"tls-node-1","gpus":8,"state":"up","reason":"","faulty":null}],"faulty":[]}"#,
        )
    } else {
        ("404 Not Found", r#"{"error":"not found: over TLS"}"#)
    };
    let _ = write!(
        tls,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// Runs `compass` with a clean environment for the connection settings.
fn compass(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_compass"));
    c.args(args);
    for v in [
        "COMPASS_BUDGET_URL",
        "COMPASS_CONFIG",
        "COMPASS_CA_FILE",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    ] {
        c.env_remove(v);
    }
    // No client config of this host: an empty one unless a test names its own.
    let empty = scratch().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    c.env("COMPASS_CONFIG", &empty);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run compass")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn exit_statuses_tell_not_found_service_down_and_usage_apart() {
    let url = service_url();
    // Found: the hosts list (empty with slurm = "none"), table and JSON.
    let out = compass(&["node", "list", "--url", &url], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("node"), "{}", stdout(&out));
    let out = compass(&["node", "list", "--json", "--url", &url], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["nodes"].as_array().is_some(), "{v}");
    // Not found: 3.
    let out = compass(&["why", "4242", "--url", &url], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("compass: 404 not found: job 4242"),
        "{}",
        stderr(&out)
    );
    // Service down: 5, naming the URL.
    let dead = format!("http://127.0.0.1:{DEAD_PORT}");
    let out = compass(&["budget", "show", "--url", &dead], &[]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("cannot reach compass-budgetd at {dead}")),
        "{}",
        stderr(&out)
    );
    // Usage errors stay clap's 2; --help documents the statuses.
    let out = compass(&["why", "not-a-job"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = compass(&["why", "--help"], &[]);
    assert!(
        stdout(&out).contains("3 not found") && stdout(&out).contains("5 service down"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn the_url_comes_from_flag_then_environment_then_client_config() {
    let url = service_url();
    let dir = scratch();
    let cfg = dir.join("client-dead.toml");
    std::fs::write(&cfg, format!("url = \"http://127.0.0.1:{DEAD_PORT}\"\n")).unwrap();
    // The config file alone: its (dead) URL.
    let out = compass(&["node", "list"], &[("COMPASS_CONFIG", &cfg)]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    // The environment overrides the file, the flag overrides both.
    let env_url = PathBuf::from(&url);
    let out = compass(
        &["node", "list"],
        &[("COMPASS_CONFIG", &cfg), ("COMPASS_BUDGET_URL", &env_url)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = compass(&["node", "list", "--url", &url, "--client-config"], &[]);
    assert_eq!(out.status.code(), Some(2), "--client-config needs a value");
    let out = compass(
        &[
            "node",
            "list",
            "--url",
            &url,
            "--client-config",
            cfg.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // A named config that does not exist, or an unknown key, is an error.
    let out = compass(
        &["node", "list"],
        &[("COMPASS_CONFIG", &dir.join("missing.toml"))],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("missing.toml"), "{}", stderr(&out));
    let bad = dir.join("client-bad.toml");
    std::fs::write(&bad, "uri = \"http://x\"\n").unwrap();
    let out = compass(&["node", "list"], &[("COMPASS_CONFIG", &bad)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("uri"), "{}", stderr(&out));
    let out = compass(&["node", "list", "--url", "127.0.0.1:8642"], &[]);
    assert!(
        stderr(&out).contains("must start with http:// or https://"),
        "{}",
        stderr(&out)
    );
    // Bad option values found after parsing are usage errors (exit 2, as
    // `compass --help` says); the same value in the client config is bad
    // input (exit 1, naming the file).
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    for args in [
        &["node", "list", "--url", &url, "--timeout", "0"][..],
        &["why", "--url", &url],
        &["budget", "show", "--url", &url, "--days", "0"],
    ] {
        let out = compass(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let bad_url = dir.join("client-bad-url.toml");
    std::fs::write(&bad_url, "url = \"127.0.0.1:8642\"\n").unwrap();
    let out = compass(&["node", "list"], &[("COMPASS_CONFIG", &bad_url)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("client-bad-url.toml"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn https_with_the_ca_from_the_client_config_or_the_system_store() {
    let ca = tls_endpoint();
    let dir = scratch();
    let https = format!("https://localhost:{TLS_PORT}");
    // `url` and `ca_file` in the client config.
    let cfg = dir.join("client-tls.toml");
    std::fs::write(
        &cfg,
        format!("url = \"{https}\"\nca_file = \"{}\"\n", ca.display()),
    )
    .unwrap();
    let out = compass(&["node", "list"], &[("COMPASS_CONFIG", &cfg)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("tls-node-1"), "{}", stdout(&out));
    // Over TLS too, a 404 is "not found".
    let out = compass(&["why", "7"], &[("COMPASS_CONFIG", &cfg)]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("over TLS"), "{}", stderr(&out));
    // The system store (rustls-platform-verifier) honours SSL_CERT_FILE.
    let out = compass(&["node", "list", "--url", &https], &[("SSL_CERT_FILE", ca)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("tls-node-1"), "{}", stdout(&out));
    // Without the CA the certificate is refused: no answer is read.
    let out = compass(&["node", "list", "--url", &https], &[]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot reach compass-budgetd")
            && stderr(&out).to_lowercase().contains("certificate"),
        "{}",
        stderr(&out)
    );
    // A CA file that is not PEM is a clear error.
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let out = compass(
        &[
            "node",
            "list",
            "--url",
            &https,
            "--ca-file",
            junk.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("junk.pem"), "{}", stderr(&out));
}
