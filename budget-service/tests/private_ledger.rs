//! The job's user in the ledger (schema 5, issue 14): under
//! `PrivateData=jobs` the owner of a job that has ended can still read it
//! (`GET /api/v1/queue/{job}`, `GET /api/v1/jobs`), across a `kill -9` and
//! a restart of the real daemon on a real SQLite file; others cannot, and
//! runs recorded without a user stay admin-only.

mod common;

use common::{write_config, Daemon, Munged, TempDir};
use compass_budget::slurm::{SlurmJob, SlurmSnapshot};
use compass_core::fairshare::{Interval, Kind};
use compass_core::model::JobId;
use std::time::{Duration, Instant};

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `GET path` as `user` (the trusted proxy's identity header), or
/// anonymous: status and JSON body.
fn get_as(url: &str, path: &str, user: Option<&str>) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.get(format!("{url}{path}"));
    if let Some(u) = user {
        req = req.header("X-Remote-User", u);
    }
    let mut r = req.call().unwrap();
    let body = r.body_mut().read_to_string().unwrap();
    let v = serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body));
    (r.status().as_u16(), v)
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn owner_reads_ended_job_after_restart_and_old_rows_stay_admin_only() {
    let m = Munged::start();
    let dir = TempDir::new("private-ledger");
    let t = now();
    // A run recorded without its user (as before schema 5, or through the
    // admin ingest endpoint): job 300, ended.
    {
        let mut db = compass_budget::db::Db::open(&dir.path().join("budget.db")).unwrap();
        db.ingest(
            &[Interval {
                job: JobId(300),
                account: "nlp-a".into(),
                gpus: 1,
                start: t - 600,
                end: Some(t - 300),
                kind: Kind::Unallocated,
                weight: 1.0,
            }],
            t - 300,
        )
        .unwrap();
    }
    // Slurm (file-backed) reports alice's job 201 running.
    let running = SlurmJob {
        user: "alice".into(),
        start: Some(t - 120),
        ..SlurmJob::basic(JobId(201), "nlp-a", 2, 0, true, 0, t - 200)
    };
    let snap_path = dir.path().join("slurm.json");
    let write_snap = |snap: &SlurmSnapshot| {
        let tmp = dir.path().join("slurm.json.tmp");
        std::fs::write(&tmp, serde_json::to_string(snap).unwrap()).unwrap();
        std::fs::rename(&tmp, &snap_path).unwrap();
    };
    write_snap(&SlurmSnapshot {
        running: vec![running],
        ..SlurmSnapshot::default()
    });
    let cfg = write_config(dir.path(), &["root"], 8, &m.socket);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "slurm = \"file\"\nslurm_file = \"{}\"\ncycle_s = 1\n[protection]\nenforce = false\n\
         [reads]\nprivate_data = \"jobs\"\ntrusted_proxies = [\"127.0.0.1\"]\n\
         proxy_user_header = \"X-Remote-User\"\n",
        snap_path.display()
    ));
    std::fs::write(&cfg, text).unwrap();

    let mut d = Daemon::start(&cfg);
    wait_until("job 201 in the ledger", || {
        get_as(&d.url, "/api/v1/queue/201", Some("root")).1["state"] == "running"
    });
    // The job ends: Slurm no longer reports it; the next cycle closes it.
    write_snap(&SlurmSnapshot::default());
    wait_until("job 201 ended", || {
        get_as(&d.url, "/api/v1/queue/201", Some("root")).1["state"] == "ended"
    });
    d.kill9();

    // After a kill -9 and a restart, from the SQLite file alone.
    let d = Daemon::start(&cfg);
    let (st, v) = get_as(&d.url, "/api/v1/queue/201", Some("alice"));
    assert_eq!(st, 200, "the owner reads their ended job: {v}");
    assert_eq!(v["state"], "ended", "{v}");
    assert_eq!(v["interval"]["job"], 201, "{v}");
    assert_eq!(get_as(&d.url, "/api/v1/queue/201", Some("bob")).0, 403);
    assert_eq!(get_as(&d.url, "/api/v1/queue/201", None).0, 403);
    assert_eq!(get_as(&d.url, "/api/v1/queue/201", Some("root")).0, 200);

    // `compass why --me`'s endpoint lists it among alice's ended runs.
    let (st, v) = get_as(&d.url, "/api/v1/jobs?user=alice", Some("alice"));
    assert_eq!(st, 200, "{v}");
    let ended: Vec<u64> = (v["ended"].as_array().unwrap().iter())
        .map(|j| j["job"].as_u64().unwrap())
        .collect();
    assert_eq!(ended, [201], "{v}");
    assert_eq!(v["ended"][0]["gpus"], 2, "{v}");
    assert!(v["ended"][0]["end"].is_string(), "ISO 8601 time: {v}");
    // As `compass why --me` prints it.
    let text = compass_budget::cli::render_user_jobs(&v);
    assert!(text.contains("Ended jobs of alice (1):"), "{text}");
    assert!(text.contains("job 201 (2 GPUs, account nlp-a): "), "{text}");
    assert_eq!(
        get_as(&d.url, "/api/v1/jobs?user=alice", Some("bob")).0,
        403
    );

    // A run stored without its user: admins only.
    assert_eq!(get_as(&d.url, "/api/v1/queue/300", Some("alice")).0, 403);
    let (st, v) = get_as(&d.url, "/api/v1/queue/300", Some("root"));
    assert_eq!((st, &v["state"]), (200, &serde_json::json!("ended")), "{v}");

    // The schema is the newest (5 added the job user) and the user is in
    // the file.
    drop(d);
    let db = compass_budget::db::Db::open(&dir.path().join("budget.db")).unwrap();
    assert_eq!(db.version().unwrap(), compass_budget::db::known_version());
    assert_eq!(db.job_user(JobId(201)).unwrap().as_deref(), Some("alice"));
    assert_eq!(db.job_user(JobId(300)).unwrap(), None);
}
