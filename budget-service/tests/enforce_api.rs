//! The enforcement endpoints in-process (tower `oneshot`) with a stand-in
//! authenticator and the cycle against `FakeSlurm` with nodes: node fault
//! and repaired (admin only, unknown node refused), the actions log, and
//! `GET /api/v1/queue/{job}` explaining what enforcement did to a job.

mod prom;

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use common::{spec, test_state, NameAuth};
use compass_budget::config::Config;
use compass_budget::cycle::Cycle;
use compass_budget::slurm::{FakeAction, FakeSlurm, SlurmJob};
use compass_budget::state::{AppState, TestClock};
use compass_core::model::JobId;
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

const T0: i64 = 1_800_000_000;

async fn call(
    router: &Router,
    method: &str,
    path: &str,
    user: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(u) = user {
        req = req.header("Authorization", format!("MUNGE {u}"));
    }
    let req = req
        .header("Content-Type", "application/json")
        .body(
            body.map(|b| Body::from(serde_json::to_vec(&b).unwrap()))
                .unwrap_or_else(Body::empty),
        )
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 10 << 20)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v)
}

/// Teams `a` and `b` (half each, accounts `acct-a` and `acct-b`) on two
/// nodes of 8 GPUs in `FakeSlurm` at `T0`, the service configured with
/// `extra` after the common settings, a cycle that acts, and the API.
struct World {
    state: Arc<AppState>,
    clock: Arc<TestClock>,
    slurm: Arc<FakeSlurm>,
    cycle: Cycle,
    router: Router,
}

fn two_teams(extra: &str) -> World {
    let config = Config::parse(
        &format!(
            "db = \":memory:\"\nadmins = [\"root\"]\ncapacity_gpus = 16\nwindow_s = 3600\n{extra}"
        ),
        "test",
    )
    .unwrap();
    let (state, clock) = test_state(
        config,
        NameAuth,
        T0,
        vec![
            spec("org", None, 1.0, None),
            spec("a", Some("org"), 0.5, Some("acct-a")),
            spec("b", Some("org"), 0.5, Some("acct-b")),
        ],
    );
    let slurm = Arc::new(FakeSlurm::new());
    slurm.add_node("n1", 8);
    slurm.add_node("n2", 8);
    slurm.set_now(T0);
    let cycle = Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
    let router = compass_budget::api::router(state.clone());
    World {
        state,
        clock,
        slurm,
        cycle,
        router,
    }
}

#[tokio::test]
async fn node_fault_repaired_actions_and_why() {
    let World {
        state,
        clock,
        slurm,
        mut cycle,
        router,
    } = two_teams("");

    // Job 1: unallocated on n1; job 2: protected (600 s) on n2.
    slurm.put(SlurmJob::basic(JobId(1), "acct-a", 8, 0, true, 0, T0 - 100));
    slurm.start_on(JobId(1), T0 - 50, &[("n1", 8)]);
    slurm.put(SlurmJob::basic(
        JobId(2),
        "acct-a",
        8,
        600,
        false,
        0,
        T0 - 100,
    ));
    slurm.start_on(JobId(2), T0 - 50, &[("n2", 8)]);
    cycle.step().unwrap();

    // A running protected job: `why` says until when.
    let (st, v) = call(&router, "GET", "/api/v1/queue/2", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let text = v["enforcement"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "protected from preemption until {} (min runtime 0:10:00).",
            compass_budget::localtime::text(T0 - 50 + 600)
        )),
        "{text}"
    );

    // Writes: admin only, authenticated, reason required, node known.
    let (st, _) = call(
        &router,
        "POST",
        "/api/v1/hosts/n2/fault",
        None,
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (st, v) = call(
        &router,
        "POST",
        "/api/v1/hosts/n2/fault",
        Some("pi"),
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{v}");
    let (st, v) = call(
        &router,
        "POST",
        "/api/v1/hosts/n2/fault",
        Some("root"),
        Some(json!({"reason": ""})),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["field"], "reason");
    let (st, v) = call(
        &router,
        "POST",
        "/api/v1/hosts/n7/fault",
        Some("root"),
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    assert!(v["error"].as_str().unwrap().contains("n1, n2"), "{v}");
    let (st, v) = call(
        &router,
        "POST",
        "/api/v1/hosts/n2/repaired",
        Some("root"),
        Some(json!({})),
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "not faulty: {v}");
    assert!(slurm.actions().is_empty(), "refusals change nothing");

    let (st, v) = call(
        &router,
        "POST",
        "/api/v1/hosts/n2/fault",
        Some("root"),
        Some(json!({"reason": "fans"})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["faulty"], true);
    assert_eq!(
        slurm.actions(),
        vec![FakeAction::Drain(
            "n2".into(),
            "compass faulty: fans (by root)".into()
        )]
    );
    let (_, v) = call(&router, "GET", "/api/v1/hosts", None, None).await;
    assert_eq!(v["faulty"][0]["node"], "n2");
    assert_eq!(v["faulty"][0]["by"], "root");

    // An allocated job of the other team arrives: job 1 is requeued for it.
    slurm.put(SlurmJob::basic(JobId(3), "acct-b", 8, 600, true, 0, T0));
    clock.set(T0 + 1);
    cycle.step().unwrap();
    assert_eq!(slurm.actions().last(), Some(&FakeAction::Requeue(JobId(1))));
    let (_, v) = call(&router, "GET", "/api/v1/hosts", None, None).await;
    let n2 = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n2")
        .unwrap()
        .clone();
    assert_eq!(n2["state"], "draining", "{n2}");

    let (st, v) = call(&router, "GET", "/api/v1/actions?job=1", None, None).await;
    assert_eq!(st, StatusCode::OK);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["action"], "requeue");
    assert_eq!(rows[0]["cause_job"], 3);
    assert_eq!(rows[0]["rule"], "unallocated");
    let (_, v) = call(&router, "GET", "/api/v1/actions", None, None).await;
    let kinds: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["requeue", "drain"]);
    let (st, _) = call(&router, "GET", "/api/v1/actions?limit=0", None, None).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);

    // `why` of the victim (pending again) and of the job it made room for.
    let (st, v) = call(&router, "GET", "/api/v1/queue/1", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let text = v["enforcement"].as_str().unwrap();
    assert!(
        text.contains("requeue this job (unallocated) for job 3"),
        "{text}"
    );
    let (_, v) = call(&router, "GET", "/api/v1/queue/3", None, None).await;
    let text = v["enforcement"].as_str().unwrap();
    assert!(
        text.contains("requeue job 1 (unallocated) to make room for this job"),
        "{text}"
    );

    let (_, m) = call(&router, "GET", "/metrics", None, None).await;
    let m = prom::parse(m.as_str().unwrap());
    assert_eq!(
        m.value(
            "compass_preemptions_total",
            &[
                ("rule", "unallocated"),
                ("action", "requeue"),
                ("outcome", "ok")
            ]
        ),
        Some(1.0)
    );
    // n2 was drained by the fault command, not by the cycle.
    assert_eq!(
        m.value("compass_node_drains_total", &[("outcome", "ok")]),
        Some(0.0)
    );

    // The dashboard embeds the latest actions.
    let (st, page) = call(&router, "GET", "/", None, None).await;
    assert_eq!(st, StatusCode::OK);
    let page = page.as_str().unwrap();
    assert!(page.contains("actions-table"), "table present");
    assert!(
        page.contains("\"action\":\"requeue\"") && page.contains("\"cause_job\":3"),
        "data embedded"
    );

    // Repaired: resumed in Slurm, record cleared.
    let (st, v) = call(
        &router,
        "POST",
        "/api/v1/hosts/n2/repaired",
        Some("root"),
        Some(json!({})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        slurm.actions().last(),
        Some(&FakeAction::Resume("n2".into()))
    );
    assert!(state.db().faulty().unwrap().is_empty());
}

/// `enforce = "dry-run"`: the cycle sends nothing to Slurm, and
/// `GET /api/v1/actions` and `GET /api/v1/queue/{job}` (what `compass why`
/// prints) show what it would have done, marked as a dry run. A job of an
/// account outside the tree is not called protected.
#[tokio::test]
async fn dry_run_actions_and_accounts_outside_the_tree_in_the_api() {
    let World {
        clock,
        slurm,
        mut cycle,
        router,
        ..
    } = two_teams("[protection]\nenforce = \"dry-run\"\n");

    // Job 1: unallocated on n1; job 2: account `ghost` (not in the tree),
    // min runtime 600 s, on n2.
    slurm.put(SlurmJob::basic(JobId(1), "acct-a", 8, 0, true, 0, T0 - 100));
    slurm.start_on(JobId(1), T0 - 50, &[("n1", 8)]);
    slurm.put(SlurmJob::basic(JobId(2), "ghost", 8, 600, true, 0, T0 - 90));
    slurm.start_on(JobId(2), T0 - 50, &[("n2", 8)]);
    cycle.step().unwrap();
    let (st, v) = call(&router, "GET", "/api/v1/queue/2", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let text = v["enforcement"].as_str().unwrap();
    assert!(text.contains("no budget in the tree"), "{text}");
    assert!(!text.contains("protected from preemption until"), "{text}");

    // Job 3 of acct-b needs both nodes.
    let mut j = SlurmJob::basic(JobId(3), "acct-b", 16, 600, true, 0, T0);
    j.instances = 2;
    slurm.put(j);
    clock.set(T0 + 1);
    slurm.set_now(T0 + 1);
    let rep = cycle.step().unwrap();
    assert_eq!(rep.enforced.dry_run, 2, "{rep:?}");
    assert!(slurm.actions().is_empty(), "{:?}", slurm.actions());

    let (st, v) = call(&router, "GET", "/api/v1/actions", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        assert_eq!(r["dry_run"], json!(true), "{r}");
        assert_eq!(r["action"], json!("requeue"), "{r}");
        assert_eq!(r["cause_job"], json!(3), "{r}");
    }
    let ghost = rows.iter().find(|r| r["job"] == json!(2)).unwrap();
    assert_eq!(
        ghost["submit"],
        json!(compass_budget::localtime::iso(T0 - 90))
    );
    assert_eq!(ghost["rule"], json!("unallocated"));
    let (_, v) = call(&router, "GET", "/api/v1/queue/1", None, None).await;
    let text = v["enforcement"].as_str().unwrap();
    assert!(
        text.contains("requeue this job (unallocated) for job 3")
            && text.contains("dry run, not done"),
        "{text}"
    );
}

/// slurmctld reuses job ids after a cold start: `why` of a new job with an
/// old job's id shows none of the old job's actions, as victim or as the
/// job room was made for (issue #11: it told the new job 1 it had been
/// requeued). The old job's rows stay in the log.
#[tokio::test]
async fn why_of_a_reused_job_id_shows_only_its_own_actions() {
    let World {
        clock,
        slurm,
        mut cycle,
        router,
        ..
    } = two_teams("");
    // Job 1 (unallocated) is requeued for job 3; job 2 is protected.
    slurm.put(SlurmJob::basic(JobId(1), "acct-a", 8, 0, true, 0, T0 - 100));
    slurm.start_on(JobId(1), T0 - 50, &[("n1", 8)]);
    slurm.put(SlurmJob::basic(
        JobId(2),
        "acct-a",
        8,
        3600,
        false,
        0,
        T0 - 100,
    ));
    slurm.start_on(JobId(2), T0 - 50, &[("n2", 8)]);
    slurm.put(SlurmJob::basic(
        JobId(3),
        "acct-b",
        8,
        600,
        false,
        0,
        T0 - 10,
    ));
    cycle.step().unwrap();
    assert!(slurm.actions().contains(&FakeAction::Requeue(JobId(1))));
    let why = |v: &Value| v["enforcement"].as_str().unwrap_or("").to_string();
    let (st, v) = call(&router, "GET", "/api/v1/queue/1", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(why(&v).contains("requeue this job"), "{v}");
    let (_, v) = call(&router, "GET", "/api/v1/queue/3", None, None).await;
    assert_eq!(v["actions"].as_array().map(Vec::len), Some(1), "{v}");
    // A day later, after a cold start: every job gone, ids 1 and 3 reused.
    let later = T0 + 86_400;
    clock.set(later);
    slurm.set_now(later);
    for id in [1, 2, 3] {
        slurm.purge(JobId(id));
    }
    slurm.put(SlurmJob::basic(
        JobId(1),
        "acct-b",
        1,
        600,
        true,
        0,
        later - 20,
    ));
    slurm.start_on(JobId(1), later - 10, &[("n2", 1)]);
    slurm.put(SlurmJob::basic(
        JobId(3),
        "acct-b",
        8,
        600,
        false,
        0,
        later - 20,
    ));
    slurm.put(SlurmJob::basic(
        JobId(4),
        "acct-a",
        8,
        3600,
        false,
        0,
        later - 20,
    ));
    slurm.start_on(JobId(4), later - 10, &[("n1", 8)]);
    cycle.step().unwrap();
    let (st, v) = call(&router, "GET", "/api/v1/queue/1", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(!why(&v).contains("requeue"), "{v}");
    assert_eq!(v["actions"], json!([]), "{v}");
    let (st, v) = call(&router, "GET", "/api/v1/queue/3", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["actions"], json!([]), "{v}");
    // The log keeps the old job's row.
    let (_, v) = call(&router, "GET", "/api/v1/actions", Some("root"), None).await;
    assert!(v.to_string().contains("requeue"), "{v}");
}

/// `GET /api/v1/queue/{job}` of an ended job whose id slurmctld used
/// before (ids are reused after a cold start): only the actions on this
/// job's runs in the ledger, or made for it while it waited, and under
/// `PrivateData=jobs` only those `GET /api/v1/actions` shows the reader.
/// Before, every row of the id: alice read bob's old requeue, detail and
/// all.
#[tokio::test]
async fn why_of_an_ended_reused_job_id_shows_only_its_own_visible_actions() {
    use compass_budget::db::ActionRow;
    use compass_core::fairshare::{Interval, Kind};
    let World {
        state,
        clock,
        slurm,
        mut cycle,
        router,
    } = two_teams("[reads]\nprivate_data = \"jobs\"\n");
    let action =
        |at: i64, job: u64, run_start: i64, user: &str, cause: u64, cause_user: &str| ActionRow {
            job: Some(job),
            run_start: Some(run_start),
            user: Some(user.into()),
            cause_job: Some(cause),
            cause_user: Some(cause_user.into()),
            submit: Some(run_start - 100),
            ..ActionRow::on_node(
                at,
                "requeue",
                "n1",
                "unallocated",
                true,
                format!("job {job} requeued for job {cause} of team secret-{user}"),
            )
        };
    // Before the cold start: bob's job 42 ran from T0 - 4000, was requeued
    // for carol's job 43; room was made for it by requeuing job 61.
    {
        let mut db = state.db();
        db.ingest(
            &[Interval {
                job: JobId(42),
                account: "acct-b".into(),
                gpus: 1,
                start: T0 - 4000,
                end: Some(T0 - 3000),
                kind: Kind::Allocated,
                weight: 1.0,
            }],
            T0 - 3000,
        )
        .unwrap();
        db.record_job_users(&[(JobId(42), T0 - 4000, "bob".into())])
            .unwrap();
        db.log_action(&action(T0 - 4100, 61, T0 - 4500, "erin", 42, "bob"))
            .unwrap();
        db.log_action(&action(T0 - 3000, 42, T0 - 4000, "bob", 43, "carol"))
            .unwrap();
    }
    // Now id 42 is alice's: it runs from T0 - 90, is requeued for dave's
    // job 50, room is made for it (erin's job 60), it runs again and ends.
    let mut j = SlurmJob::basic(JobId(42), "acct-a", 1, 600, true, 0, T0 - 100);
    j.user = "alice".into();
    j.start = Some(T0 - 90);
    slurm.put(j.clone());
    cycle.step().unwrap();
    let own = [
        action(T0 + 5, 42, T0 - 90, "alice", 50, "dave"),
        action(T0 + 6, 60, T0 - 200, "erin", 42, "alice"),
    ];
    for a in &own {
        state.db().log_action(a).unwrap();
    }
    clock.set(T0 + 10);
    j.start = Some(T0 + 8);
    slurm.put(j);
    cycle.step().unwrap();
    clock.set(T0 + 20);
    slurm.end(JobId(42), T0 + 15);
    cycle.step().unwrap();
    slurm.purge(JobId(42));
    clock.set(T0 + 30);
    cycle.step().unwrap();
    let ids = |v: &Value, key: &str| -> Vec<(u64, u64)> {
        (v[key].as_array().unwrap().iter())
            .map(|a| (a["job"].as_u64().unwrap(), a["cause_job"].as_u64().unwrap()))
            .collect()
    };
    let mine = vec![(60, 42), (42, 50)];
    for who in ["alice", "root"] {
        let (st, v) = call(&router, "GET", "/api/v1/queue/42", Some(who), None).await;
        assert_eq!(st, StatusCode::OK, "{who}: {v}");
        assert_eq!(v["state"], "ended", "{v}");
        assert_eq!(ids(&v, "actions"), mine, "{who}: {v}");
        assert!(!v.to_string().contains("secret-bob"), "{who}: {v}");
    }
    // `GET /api/v1/actions?job=42` shows alice the same rows; root every
    // row of the id.
    let (_, v) = call(
        &router,
        "GET",
        "/api/v1/actions?job=42",
        Some("alice"),
        None,
    )
    .await;
    assert_eq!(ids(&v, "rows"), mine, "{v}");
    let (_, v) = call(&router, "GET", "/api/v1/actions?job=42", Some("root"), None).await;
    assert_eq!(ids(&v, "rows").len(), 4, "{v}");
    // Bob may not read alice's job.
    let (st, _) = call(&router, "GET", "/api/v1/queue/42", Some("bob"), None).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
}
