//! MUNGE authentication and the manager CLI against the real
//! `compass-budgetd` binary and a private munged (Debian `munge`).

mod common;

use common::{conn, free_port, write_config, Daemon, Munged, TempDir};
use compass_budget::auth::{
    munge_decode_cred, munge_encode_payload, request_payload, Authenticator, MungeAuth,
};
use compass_budget::cli::{
    exit, parse_budgets_toml, run_budget, run_why, BudgetArgs, BudgetCmd, Client, Connection,
    WhyArgs,
};
use std::path::PathBuf;
use std::process::Command;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../etc/budgets.example.toml")
}

#[test]
fn munge_roundtrip_binds_payload_and_refuses_replay() {
    let m = Munged::start();
    let payload = request_payload("PATCH", "/api/v1/nodes/a", b"{\"share\":0.5}");
    let cred = munge_encode_payload(Some(&m.socket), &payload).unwrap();
    let auth = MungeAuth {
        socket: Some(m.socket.clone()),
    };
    assert_eq!(auth.authenticate(&cred, &payload).unwrap(), "root");
    // The same credential again is a replay.
    let e = auth.authenticate(&cred, &payload).unwrap_err().to_string();
    assert!(
        e.contains("not authenticated") && e.to_lowercase().contains("replay"),
        "{e}"
    );
    // A credential for another request.
    let cred = munge_encode_payload(Some(&m.socket), &payload).unwrap();
    let e = auth
        .authenticate(&cred, &request_payload("PATCH", "/api/v1/nodes/b", b"{}"))
        .unwrap_err();
    assert!(e.to_string().contains("different request"), "{e}");
    // Garbage.
    assert!(munge_decode_cred(Some(&m.socket), "MUNGE:garbage:").is_err());
}

/// A dry-run PATCH through the client, for its JSON answer.
fn c_write_dry(client: &Client) -> serde_json::Value {
    client
        .write(
            "PATCH",
            "/api/v1/nodes/team-nlp-a",
            &serde_json::json!({ "share": 0.6, "why": "rebalance", "dry_run": true }),
        )
        .unwrap()
}

fn budget(c: &compass_budget::cli::Connection, cmd: BudgetCmd) -> compass_budget::Result<()> {
    run_budget(&BudgetArgs {
        conn: c.clone(),
        cmd,
    })
}

#[test]
fn cli_manages_the_tree_through_the_daemon() {
    let m = Munged::start();
    let dir = TempDir::new("cli");
    let cfg = write_config(dir.path(), &["root"], 64, &m.socket);
    let mut d = Daemon::start(&cfg);
    let c = conn(&d.url, &m.socket);
    let client = Client::new(&c).unwrap();

    // Import: without --yes only the diff is shown.
    budget(
        &c,
        BudgetCmd::Import {
            file: Some(example()),
            from_sacctmgr: None,
            why: "initial".into(),
            yes: false,
        },
    )
    .unwrap();
    assert!(client.get("/api/v1/export").unwrap()["nodes"]
        .as_array()
        .unwrap()
        .is_empty());
    budget(
        &c,
        BudgetCmd::Import {
            file: Some(example()),
            from_sacctmgr: None,
            why: "initial".into(),
            yes: true,
        },
    )
    .unwrap();
    let nodes = client.get("/api/v1/export").unwrap()["nodes"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        nodes,
        parse_budgets_toml(&std::fs::read_to_string(example()).unwrap())
            .unwrap()
            .nodes
            .len()
    );

    // Dry runs check everything and write nothing, not even the audit trail.
    let tree_before = client.get("/api/v1/export").unwrap();
    let audit_before = client.get("/api/v1/audit").unwrap()["rows"]
        .as_array()
        .unwrap()
        .len();
    for cmd in [
        BudgetCmd::SetShare {
            node: "team-nlp-a".into(),
            share: 0.6,
            why: "rebalance".into(),
            dry_run: true,
        },
        BudgetCmd::Remove {
            node: "team-nlp-b".into(),
            why: "gone".into(),
            dry_run: true,
        },
        BudgetCmd::Add {
            name: "team-nlp-d".into(),
            parent: "nlp".into(),
            share: 0.0,
            account: None,
            managers: vec![],
            why: "try".into(),
            dry_run: true,
        },
    ] {
        budget(&c, cmd).unwrap();
    }
    let e = budget(
        &c,
        BudgetCmd::SetShare {
            node: "vision".into(),
            share: 0.9,
            why: "x".into(),
            dry_run: true,
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("422"),
        "a dry run checks the tree: {e}"
    );
    let e = budget(
        &c,
        BudgetCmd::Move {
            node: "nope".into(),
            to: "research".into(),
            why: "x".into(),
            dry_run: true,
        },
    )
    .unwrap_err();
    assert_eq!(e.exit_code(), exit::NOT_FOUND, "{e}");
    let dry = c_write_dry(&client);
    assert_eq!(dry["applied"], false, "{dry}");
    assert_eq!(dry["summary"].as_array().unwrap().len(), 1, "{dry}");
    assert_eq!(client.get("/api/v1/export").unwrap(), tree_before);
    assert_eq!(
        client.get("/api/v1/audit").unwrap()["rows"]
            .as_array()
            .unwrap()
            .len(),
        audit_before
    );
    budget(
        &c,
        BudgetCmd::SetShare {
            node: "team-nlp-a".into(),
            share: 0.6,
            why: "rebalance".into(),
            dry_run: false,
        },
    )
    .unwrap();
    budget(
        &c,
        BudgetCmd::Add {
            name: "team-nlp-c".into(),
            parent: "nlp".into(),
            share: 0.1,
            account: Some("nlp-c".into()),
            managers: vec!["lead-c".into()],
            why: "new team".into(),
            dry_run: false,
        },
    )
    .unwrap();
    budget(
        &c,
        BudgetCmd::Move {
            node: "team-nlp-c".into(),
            to: "research".into(),
            why: "reorg".into(),
            dry_run: false,
        },
    )
    .unwrap_err(); // research's children would sum to 1.1
    budget(
        &c,
        BudgetCmd::SetShare {
            node: "team-nlp-c".into(),
            share: 0.0,
            why: "park".into(),
            dry_run: false,
        },
    )
    .unwrap();
    budget(
        &c,
        BudgetCmd::Move {
            node: "team-nlp-c".into(),
            to: "research".into(),
            why: "reorg".into(),
            dry_run: false,
        },
    )
    .unwrap();
    let e = budget(
        &c,
        BudgetCmd::SetShare {
            node: "vision".into(),
            share: 0.9,
            why: "x".into(),
            dry_run: false,
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("422") && e.to_string().contains("more than 1"),
        "{e}"
    );
    assert_eq!(e.exit_code(), exit::FAILURE, "{e}");
    budget(
        &c,
        BudgetCmd::Remove {
            node: "team-nlp-c".into(),
            why: "done".into(),
            dry_run: false,
        },
    )
    .unwrap();
    budget(
        &c,
        BudgetCmd::Show {
            days: Some(7.0),
            json: false,
        },
    )
    .unwrap();

    let tree = client.get("/api/v1/tree").unwrap();
    let a = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "team-nlp-a")
        .unwrap()
        .clone();
    assert!(
        (a["abs_share"].as_f64().unwrap() - 0.6 * 0.5 * 0.6).abs() < 1e-9,
        "{a}"
    );
    let audit = client.get("/api/v1/audit").unwrap();
    let rows = audit["rows"].as_array().unwrap();
    assert_eq!(rows[0]["action"], "delete");
    assert_eq!(rows[0]["who"], "root");
    assert_eq!(rows[0]["why"], "done");

    // Export to TOML and re-import: no changes.
    let out = dir.path().join("export.toml");
    budget(
        &c,
        BudgetCmd::Export {
            output: Some(out.clone()),
            json: false,
        },
    )
    .unwrap();
    let exported = parse_budgets_toml(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(
        serde_json::to_value(&exported.nodes).unwrap(),
        client.get("/api/v1/export").unwrap()["nodes"]
    );

    // `compass why` for a job that is not pending says so.
    let e = run_why(&WhyArgs {
        conn: c.clone(),
        job: Some(42),
        me: false,
        user: None,
        json: false,
    })
    .unwrap_err();
    assert!(e.to_string().contains("404"), "{e}");
    assert_eq!(e.exit_code(), exit::NOT_FOUND, "{e}");

    // Another user (nobody) manages nothing: refused, with what and why.
    let body = br#"{"share":0.1,"why":"grab"}"#;
    let cred = nobody_credential(
        &m.socket,
        dir.path(),
        &request_payload("PATCH", "/api/v1/nodes/platform", body),
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .patch(format!("{}/api/v1/nodes/platform", d.url))
        .header("Authorization", format!("MUNGE {cred}"))
        .header("Content-Type", "application/json")
        .send(&body[..])
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let text = resp.body_mut().read_to_string().unwrap();
    assert!(
        text.contains("user `nobody` editing team `platform`"),
        "{text}"
    );

    // Graceful shutdown on SIGTERM.
    assert!(d.terminate().success());
}

/// `compass budget import --from-sacctmgr FILE` (issue 12): a site's
/// account hierarchy (realistic `sacctmgr -P -n show assoc
/// format=Account,ParentName,User,Fairshare` output) is shown as a diff and
/// applied only with --yes; bad output is refused with its line.
#[test]
fn cli_imports_a_first_tree_from_sacctmgr_output() {
    let m = Munged::start();
    let dir = TempDir::new("cli-sacctmgr");
    let cfg = write_config(dir.path(), &["root"], 64, &m.socket);
    let mut d = Daemon::start(&cfg);
    let c = conn(&d.url, &m.socket);
    let client = Client::new(&c).unwrap();
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sacctmgr-site-tree.txt");
    let import = |yes: bool, from: PathBuf| {
        budget(
            &c,
            BudgetCmd::Import {
                file: None,
                from_sacctmgr: Some(Some(from)),
                why: "from sacctmgr".into(),
                yes,
            },
        )
    };
    import(false, fixture.clone()).unwrap();
    assert!(client.get("/api/v1/export").unwrap()["nodes"]
        .as_array()
        .unwrap()
        .is_empty());
    import(true, fixture.clone()).unwrap();
    let want =
        compass_budget::sacctmgr::tree_from_sacctmgr(&std::fs::read_to_string(&fixture).unwrap())
            .unwrap()
            .nodes;
    let mut got: Vec<compass_core::fairshare::NodeSpec> =
        serde_json::from_value(client.get("/api/v1/export").unwrap()["nodes"].clone()).unwrap();
    let mut want = want;
    got.sort_by(|a, b| a.name.cmp(&b.name));
    want.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(got, want);
    let audit = client.get("/api/v1/audit").unwrap();
    assert_eq!(audit["rows"][0]["why"], "from sacctmgr");
    // Importing the same again changes nothing; bad output changes nothing.
    import(true, fixture).unwrap();
    let bad = dir.path().join("bad.txt");
    std::fs::write(
        &bad,
        "root|||1
physics|root||forty
",
    )
    .unwrap();
    let e = import(true, bad).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("forty"), "{e}");
    let e = import(true, dir.path().join("missing.txt"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.txt"), "{e}");
    assert_eq!(
        serde_json::from_value::<Vec<compass_core::fairshare::NodeSpec>>(
            client.get("/api/v1/export").unwrap()["nodes"].clone()
        )
        .unwrap()
        .len(),
        got.len()
    );
    assert!(d.terminate().success());
}

/// An HTTP agent that reports every status (no error on 4xx/5xx).
fn agent(timeout: std::time::Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// A munged that accepts connections and never answers: every write hangs
/// in `munge_decode`. With more stuck writes than the runtime has threads
/// (2), `/healthz` and reads must still answer while the writes are stuck,
/// and every stuck write must end in 503 after `request_timeout_s` (issue
/// 11: blocking work on the async runtime).
#[test]
fn a_hung_munged_never_stalls_healthz_and_stuck_writes_get_503() {
    use std::io::Read;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    let dir = TempDir::new("hung-munge");
    let sock = dir.path().join("hung.socket");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = held.clone();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            h.lock().unwrap().push(c); // keep it open, never answer
        }
    });
    let cfg = write_config(dir.path(), &["root"], 64, &sock);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("request_timeout_s = 5\n");
    std::fs::write(&cfg, text).unwrap();
    let d = Daemon::start(&cfg);

    let writers: Vec<_> = (0..6)
        .map(|i| {
            let url = format!("{}/api/v1/nodes", d.url);
            std::thread::spawn(move || {
                let mut resp = agent(Duration::from_secs(60))
                    .post(&url)
                    .header("Authorization", "MUNGE MUNGE:AAAAAAAA:")
                    .header("Content-Type", "application/json")
                    .send(format!(
                        "{{\"name\":\"n{i}\",\"share\":1.0,\"why\":\"stuck\"}}"
                    ))
                    .unwrap();
                let status = resp.status().as_u16();
                let mut body = String::new();
                resp.body_mut()
                    .as_reader()
                    .read_to_string(&mut body)
                    .unwrap();
                (status, body, Instant::now())
            })
        })
        .collect();
    // Wait until the writes are stuck in munged (all connected to it).
    let t0 = Instant::now();
    while held.lock().unwrap().len() < 6 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        held.lock().unwrap().len() >= 2,
        "the writes never reached the MUNGE socket"
    );
    // Health and reads answer while the writes are stuck.
    for path in ["/healthz", "/api/v1/tree", "/api/v1/queue", "/metrics"] {
        let resp = agent(Duration::from_secs(20))
            .get(&format!("{}{path}", d.url))
            .call()
            .unwrap_or_else(|e| panic!("{path} stalled behind the stuck writes: {e}"));
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
    let reads_end = Instant::now();
    for w in writers {
        let (status, body, at) = w.join().unwrap();
        // The reads were served while the writes were still stuck, and
        // every stuck write ended with a 503 that says why.
        assert!(
            at > reads_end,
            "the reads waited for a stuck write to end ({status}: {body})"
        );
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("request_timeout_s"), "{body}");
    }
}

/// `compass node fault 'n[1-64]'` through the CLI code, real munged and the
/// real daemon (issue 11): refused with a clear error, nothing recorded; a
/// single name is accepted.
#[test]
fn cli_node_fault_refuses_a_host_list() {
    use compass_budget::cli::{run_node, NodeArgs, NodeCmd};
    let m = Munged::start();
    let dir = TempDir::new("node-list");
    let cfg = write_config(dir.path(), &["root"], 64, &m.socket);
    let d = Daemon::start(&cfg);
    let c = conn(&d.url, &m.socket);
    let fault = |node: &str| {
        run_node(&NodeArgs {
            conn: c.clone(),
            cmd: NodeCmd::Fault {
                node: node.into(),
                reason: "fans".into(),
            },
        })
        .map_err(|e| e.to_string())
    };
    for bad in ["n[1-64]", "n1,n2", "n[1-2],n3"] {
        let e = fault(bad).unwrap_err();
        assert!(
            e.contains("not a single node name") && e.contains("n[1-64]"),
            "{bad}: {e}"
        );
    }
    let hosts = Client::new(&c).unwrap().get("/api/v1/hosts").unwrap();
    assert!(hosts["faulty"].as_array().unwrap().is_empty(), "{hosts}");
    // slurm = "none": a single name is recorded (nothing sent to Slurm).
    fault("n7").unwrap();
    let hosts = Client::new(&c).unwrap().get("/api/v1/hosts").unwrap();
    assert_eq!(hosts["faulty"][0]["node"], "n7", "{hosts}");
}

#[test]
fn version_names_the_slurm_release_the_daemon_is_built_for() {
    let out = Command::new(env!("CARGO_BIN_EXE_compass-budgetd"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!(
            "compass-budgetd {} (Slurm {})",
            env!("CARGO_PKG_VERSION"),
            slurm_sys::RELEASE
        )
    );
}

/// The CLI's errors carry exit statuses that tell "not found", "not
/// allowed" and "service down" apart: real daemon, real munged.
#[test]
fn cli_errors_tell_not_found_not_allowed_and_service_down() {
    let m = Munged::start();
    let other = Munged::start();
    let dir = TempDir::new("exit-codes");
    // No admins: root manages nothing.
    let cfg = write_config(dir.path(), &[], 64, &m.socket);
    let d = Daemon::start(&cfg);
    let c = conn(&d.url, &m.socket);
    let import = |c: &Connection| {
        budget(
            c,
            BudgetCmd::Import {
                file: Some(example()),
                from_sacctmgr: None,
                why: "initial".into(),
                yes: true,
            },
        )
        .unwrap_err()
    };
    // Authenticated, not permitted: 403.
    let e = import(&c);
    assert!(e.to_string().starts_with("403 "), "{e}");
    assert_eq!(e.exit_code(), exit::NOT_ALLOWED, "{e}");
    // A credential of another MUNGE realm (another key): 401.
    let e = import(&conn(&d.url, &other.socket));
    assert!(e.to_string().starts_with("401 "), "{e}");
    assert_eq!(e.exit_code(), exit::NOT_ALLOWED, "{e}");
    // No such job: 404.
    let why = |c: &Connection, job: u64| {
        run_why(&WhyArgs {
            conn: c.clone(),
            job: Some(job),
            me: false,
            user: None,
            json: true,
        })
    };
    let e = why(&c, 7).unwrap_err();
    assert_eq!(e.exit_code(), exit::NOT_FOUND, "{e}");
    // Nothing listens: service down, the message names the URL.
    let down = Connection::to(&format!("http://127.0.0.1:{}", free_port()));
    let e = why(&down, 7).unwrap_err();
    assert_eq!(e.exit_code(), exit::SERVICE_DOWN, "{e}");
    assert!(
        e.to_string()
            .starts_with("cannot reach compass-budgetd at http://127.0.0.1:"),
        "{e}"
    );
}

/// A credential of user `nobody` (65534) for `payload`, from the `munge`
/// command run through `setpriv` (Debian util-linux, munge).
fn nobody_credential(socket: &std::path::Path, dir: &std::path::Path, payload: &[u8]) -> String {
    let file = dir.join("nobody-payload");
    std::fs::write(&file, payload).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "munge",
            "-S",
        ])
        .arg(socket)
        .arg("-i")
        .arg(&file)
        .output()
        .expect("setpriv and munge");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `compass why --me` (issue 14) against the real daemon with a
/// file-backed Slurm: the jobs' users come in with the snapshot, the CLI's
/// reads are signed with MUNGE, and with `PrivateData=jobs` another user
/// (nobody) sees only their own job and is refused root's.
#[test]
fn why_me_lists_own_jobs_and_private_data_hides_others() {
    use compass_budget::slurm::{SlurmJob, SlurmSnapshot};
    use compass_core::model::JobId;
    let m = Munged::start();
    let dir = TempDir::new("why-me");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    {
        let mut db = compass_budget::db::Db::open(&dir.path().join("budget.db")).unwrap();
        let doc = parse_budgets_toml(&std::fs::read_to_string(example()).unwrap()).unwrap();
        db.edit_tree("root", "import", "seed", now, |_| Ok(doc.nodes.clone()))
            .unwrap();
    }
    let job = |id: u64, user: &str| SlurmJob {
        user: user.into(),
        ..SlurmJob::basic(JobId(id), "nlp-a", 1, 600, true, 0, now - 100)
    };
    let running = SlurmJob {
        start: Some(now - 60),
        ..job(103, "root")
    };
    let snap = SlurmSnapshot {
        pending: vec![job(101, "root"), job(102, "nobody")],
        running: vec![running],
        ..SlurmSnapshot::default()
    };
    let snap_path = dir.path().join("slurm.json");
    std::fs::write(&snap_path, serde_json::to_string(&snap).unwrap()).unwrap();
    let cfg = write_config(dir.path(), &["root"], 64, &m.socket);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "slurm = \"file\"\nslurm_file = \"{}\"\ncycle_s = 1\n[protection]\nenforce = false\n\
         [reads]\nprivate_data = \"jobs\"\n",
        snap_path.display()
    ));
    std::fs::write(&cfg, text).unwrap();
    let d = Daemon::start(&cfg);
    let c = conn(&d.url, &m.socket);
    let client = Client::new(&c).unwrap();
    let start = std::time::Instant::now();
    while client.get("/api/v1/queue").unwrap()["total"] != 2 {
        assert!(start.elapsed().as_secs() < 20, "no cycle ran");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let why = |me: bool, user: Option<&str>| {
        compass_budget::cli::why_output(&WhyArgs {
            conn: c.clone(),
            job: None,
            me,
            user: user.map(Into::into),
            json: false,
        })
    };
    // root's own jobs: 101 pending, 103 running and protected; not 102.
    let out = why(true, None).unwrap();
    assert!(out.contains("Pending jobs of root (1)"), "{out}");
    assert!(out.contains("job 101 (1 GPUs, account nlp-a)"), "{out}");
    assert!(out.contains("Running jobs of root (1)"), "{out}");
    assert!(
        out.contains("job 103") && out.contains("protected from preemption until"),
        "{out}"
    );
    assert!(!out.contains("job 102"), "{out}");
    // An admin may look at another user's jobs.
    let out = why(false, Some("nobody")).unwrap();
    assert!(
        out.contains("Pending jobs of nobody (1)") && out.contains("job 102"),
        "{out}"
    );

    // nobody, identified by MUNGE, sees only job 102 and is refused 101.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let get_as_nobody = |path: &str| {
        let cred = nobody_credential(&m.socket, dir.path(), &request_payload("GET", path, b""));
        let mut r = agent
            .get(format!("{}{path}", d.url))
            .header("Authorization", format!("MUNGE {cred}"))
            .call()
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        (r.status().as_u16(), v)
    };
    let (st, v) = get_as_nobody("/api/v1/queue");
    assert_eq!(st, 200, "{v}");
    let ids: Vec<u64> = (v["jobs"].as_array().unwrap().iter())
        .map(|j| j["job"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [102]);
    assert_eq!(get_as_nobody("/api/v1/queue/101").0, 403);
    assert_eq!(get_as_nobody("/api/v1/jobs?user=root").0, 403);
    // Anonymous: nothing.
    let v: serde_json::Value = serde_json::from_str(
        &agent
            .get(format!("{}/api/v1/queue", d.url))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(v["total"], 0, "{v}");
}

/// `private_data = "slurm"`: the daemon follows slurm.conf's PrivateData,
/// and re-reads it on SIGHUP (`systemctl reload`): jobs visible to an
/// anonymous reader become private without a restart.
#[test]
fn private_data_from_slurm_conf_is_reread_on_sighup() {
    use compass_budget::slurm::{SlurmJob, SlurmSnapshot};
    use compass_core::model::JobId;
    let dir = TempDir::new("reads-hup");
    let snap = SlurmSnapshot {
        pending: vec![SlurmJob {
            user: "alice".into(),
            ..SlurmJob::basic(JobId(7), "acct", 1, 600, false, 0, 1)
        }],
        ..SlurmSnapshot::default()
    };
    std::fs::write(
        dir.path().join("slurm.json"),
        serde_json::to_string(&snap).unwrap(),
    )
    .unwrap();
    let slurm_conf = dir.path().join("slurm.conf");
    std::fs::write(&slurm_conf, "ClusterName=lab\nPrivateData=usage\n").unwrap();
    let cfg = dir.path().join("budgetd.toml");
    std::fs::write(
        &cfg,
        format!(
            "db = \"{}\"\ncapacity_gpus = 8\nslurm = \"file\"\nslurm_file = \"{}\"\ncycle_s = 1\n\
             slurm_conf = \"{}\"\n[protection]\nenforce = false\n[reads]\nprivate_data = \"slurm\"\n",
            dir.path().join("budget.db").display(),
            dir.path().join("slurm.json").display(),
            slurm_conf.display()
        ),
    )
    .unwrap();
    let mut d = Daemon::start(&cfg);
    let total = || -> serde_json::Value {
        let body = ureq::get(&format!("{}/api/v1/queue", d.url))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["total"].clone()
    };
    let wait = |want: u64, what: &str| {
        let start = std::time::Instant::now();
        while total() != want {
            assert!(start.elapsed().as_secs() < 20, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    wait(1, "PrivateData=usage: an anonymous reader sees the job");
    std::fs::write(&slurm_conf, "ClusterName=lab\nPrivateData=usage,jobs\n").unwrap();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGHUP) };
    wait(0, "after SIGHUP, PrivateData=jobs hides it");
    assert!(d.terminate().success(), "SIGHUP did not stop the daemon");
}
