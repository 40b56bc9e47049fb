//! The REST API in-process (tower `oneshot`), with a stand-in authenticator
//! (the MUNGE one is tested against a real munged in `munge_cli.rs`), and the
//! ingest -> order -> push cycle against the in-memory fake Slurm.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use compass_budget::config::Config;
use compass_budget::cycle::Cycle;
use compass_budget::db::Db;
use compass_budget::slurm::{FakeSlurm, SlurmJob};
use compass_budget::state::{AppState, TestClock};
use compass_core::model::JobId;
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

mod common;
use common::{test_state, NameAuth};

mod prom;

const T0: i64 = 1_800_000_000;

fn clock_now(s: &AppState) -> i64 {
    s.now()
}

/// `extra`: more config (e.g. a `[reads]` section).
fn setup_with(extra: &str) -> (Arc<AppState>, Arc<TestClock>, Router) {
    let config = Config::parse(
        &format!("db = \":memory:\"\nadmins = [\"root\"]\ncapacity_gpus = 10\nwindow_s = 3600\nmax_body_bytes = 4096\n{extra}"),
        "test",
    )
    .unwrap();
    let (state, clock) = test_state(config, NameAuth, T0, vec![]);
    let router = compass_budget::api::router(state.clone());
    (state, clock, router)
}

async fn call(
    router: &Router,
    method: &str,
    path: &str,
    user: Option<&str>,
    body: Option<Vec<u8>>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(u) = user {
        req = req.header("Authorization", format!("MUNGE {u}"));
    }
    let req = req
        .header("Content-Type", "application/json")
        .body(body.map(Body::from).unwrap_or_else(Body::empty))
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

fn j(v: Value) -> Option<Vec<u8>> {
    Some(serde_json::to_vec(&v).unwrap())
}

fn tree_doc() -> Value {
    json!({ "why": "initial budgets", "nodes": [
        { "name": "org", "share": 1.0, "managers": ["ceo"] },
        { "name": "research", "parent": "org", "share": 0.8, "managers": ["pi"] },
        { "name": "team-a", "parent": "research", "share": 0.7, "account": "acct-a" },
        { "name": "team-b", "parent": "research", "share": 0.3, "account": "acct-b" },
        { "name": "ops", "parent": "org", "share": 0.2, "account": "acct-ops" },
    ]})
}

async fn seeded() -> (Arc<AppState>, Arc<TestClock>, Router) {
    seeded_with("").await
}

async fn seeded_with(extra: &str) -> (Arc<AppState>, Arc<TestClock>, Router) {
    let (s, c, r) = setup_with(extra);
    let mut dry = tree_doc();
    dry["dry_run"] = json!(true);
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(dry)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["applied"], false);
    assert_eq!(v["changes"].as_array().unwrap().len(), 5);
    assert!(
        s.db().load_tree().unwrap().is_none(),
        "a dry run changes nothing"
    );
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["applied"], true);
    (s, c, r)
}

async fn audit_len(r: &Router) -> usize {
    call(r, "GET", "/api/v1/audit?limit=1000", None, None)
        .await
        .1["rows"]
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test]
async fn tree_shows_products_and_usage_over_any_window() {
    let (_s, _c, r) = seeded().await;
    // team-a ran 7 GPUs for the last 30 minutes (allocated), ops 2 GPUs free.
    let ivs = json!({ "intervals": [
        { "job": 1, "account": "acct-a", "gpus": 7, "start": T0 - 1800, "end": null, "kind": "allocated" },
        { "job": 2, "account": "acct-ops", "gpus": 2, "start": T0 - 3600, "end": T0, "kind": "unallocated" },
    ]});
    let (st, v) = call(&r, "POST", "/api/v1/ledger", Some("root"), j(ivs.clone())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["inserted"], 2);
    // Idempotent replay.
    let (_, v) = call(&r, "POST", "/api/v1/ledger", Some("root"), j(ivs)).await;
    assert_eq!(
        (v["inserted"].as_u64(), v["unchanged"].as_u64()),
        (Some(0), Some(2))
    );
    let (st, v) = call(&r, "GET", "/api/v1/tree", None, None).await;
    assert_eq!(st, StatusCode::OK);
    let node = |name: &str| {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap()
            .clone()
    };
    let a = node("team-a");
    assert!((a["abs_share"].as_f64().unwrap() - 0.56).abs() < 1e-9);
    assert!((a["allocation_gpus"].as_f64().unwrap() - 5.6).abs() < 1e-9);
    assert!((a["charged_gpu_hours"].as_f64().unwrap() - 3.5).abs() < 1e-9);
    // ratio = 3.5 GPU-h / (0.56 x 10 GPUs x 1 h) = 0.625
    assert!((a["ratio"].as_f64().unwrap() - 0.625).abs() < 1e-9);
    assert!((node("ops")["free_gpu_hours"].as_f64().unwrap() - 2.0).abs() < 1e-9);
    assert_eq!(node("ops")["ratio"], 0.0);
    // A 10-minute window.
    let (_, v) = call(
        &r,
        "GET",
        &format!("/api/v1/usage?node=team-a&from={}&to={}", T0 - 600, T0),
        None,
        None,
    )
    .await;
    assert!(
        (v["nodes"][0]["charged_gpu_hours"].as_f64().unwrap() - 7.0 / 6.0).abs() < 1e-9,
        "{v}"
    );
    let (st, v) = call(&r, "GET", "/api/v1/usage?account=nope", None, None).await;
    assert_eq!(
        (st, v["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("account")),
        "{v}"
    );
    // A query parameter that is not a whole number is a 400 naming it.
    let (st, v) = call(&r, "GET", "/api/v1/tree?window_s=abc", None, None).await;
    assert_eq!(
        (st, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("window_s"))
    );
}

#[tokio::test]
async fn managers_edit_only_their_subtree_and_refusals_say_why() {
    let (s, _c, r) = seeded().await;
    let before = audit_len(&r).await;
    // pi manages research: may re-share team-a/team-b, not research itself nor ops.
    // Teams live at /api/v1/teams (and /api/v1/nodes, their first name).
    let (st, v) = call(
        &r,
        "PATCH",
        "/api/v1/teams/team-a",
        Some("pi"),
        j(json!({ "share": 0.6, "why": "rebalance" })),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, by_team) = call(&r, "GET", "/api/v1/teams/team-a", None, None).await;
    assert_eq!(st, StatusCode::OK, "{by_team}");
    let (_, by_node) = call(&r, "GET", "/api/v1/nodes/team-a", None, None).await;
    assert_eq!(by_team, by_node);
    let (st, u) = call(&r, "GET", "/api/v1/usage?team=team-a", None, None).await;
    assert_eq!(st, StatusCode::OK, "{u}");
    assert_eq!(u["nodes"].as_array().map(Vec::len), Some(1), "{u}");
    assert_eq!(v["summary"][0], "~ modify team-a: share 0.7 -> 0.6");
    let (st, v) = call(
        &r,
        "PATCH",
        "/api/v1/nodes/ops",
        Some("pi"),
        j(json!({ "share": 0.1, "why": "grab" })),
    )
    .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("user `pi` editing team `ops`") && msg.contains("do not manage"),
        "{msg}"
    );
    let (st, _) = call(
        &r,
        "PATCH",
        "/api/v1/nodes/research",
        Some("pi"),
        j(json!({ "share": 0.9, "why": "grab" })),
    )
    .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    // Adding under a node they manage is fine; under ops is not.
    let body = json!({ "name": "team-c", "parent": "research", "share": 0.1, "account": "acct-c", "why": "new team" });
    assert_eq!(
        call(&r, "POST", "/api/v1/teams", Some("pi"), j(body))
            .await
            .0,
        StatusCode::CREATED
    );
    let body = json!({ "name": "x", "parent": "ops", "share": 0.1, "why": "nope" });
    assert_eq!(
        call(&r, "POST", "/api/v1/nodes", Some("pi"), j(body))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    // No credential at all.
    let (st, v) = call(
        &r,
        "PATCH",
        "/api/v1/nodes/team-a",
        None,
        j(json!({ "share": 0.5, "why": "x" })),
    )
    .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert!(v["error"].as_str().unwrap().contains("Authorization"));
    assert_eq!(audit_len(&r).await, before + 2);
    let t = s.db().load_tree().unwrap().unwrap();
    assert_eq!(t.node(t.find("ops").unwrap()).share, 0.2);
}

#[tokio::test]
async fn bad_input_is_4xx_naming_the_field_and_changes_nothing() {
    let (s, _c, r) = seeded().await;
    let before = s.db().load_specs().unwrap();
    let n_audit = audit_len(&r).await;
    type Case = (
        &'static str,
        &'static str,
        Vec<u8>,
        StatusCode,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        // Siblings above 1.
        ("PATCH", "/api/v1/nodes/team-b", serde_json::to_vec(&json!({"share": 0.5, "why": "x"})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("share")),
        // Negative, above 1.
        ("PATCH", "/api/v1/nodes/team-b", serde_json::to_vec(&json!({"share": -0.1, "why": "x"})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("share")),
        ("PATCH", "/api/v1/nodes/team-b", serde_json::to_vec(&json!({"share": 1.5, "why": "x"})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("share")),
        // NaN is not JSON; a string is the wrong type.
        ("PATCH", "/api/v1/nodes/team-b", br#"{"share": NaN, "why": "x"}"#.to_vec(), StatusCode::BAD_REQUEST, None),
        ("PATCH", "/api/v1/nodes/team-b", br#"{"share": "NaN", "why": "x"}"#.to_vec(), StatusCode::BAD_REQUEST, Some("share")),
        // A cycle: research under its own child.
        ("PATCH", "/api/v1/nodes/research", serde_json::to_vec(&json!({"parent": "team-a", "why": "x"})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("parent")),
        // Unknown parent, unknown field, missing reason.
        ("POST", "/api/v1/nodes", serde_json::to_vec(&json!({"name": "z", "parent": "nope", "share": 0.0, "why": "x"})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("parent")),
        ("PATCH", "/api/v1/nodes/team-b", serde_json::to_vec(&json!({"shares": 0.1, "why": "x"})).unwrap(), StatusCode::BAD_REQUEST, None),
        ("PATCH", "/api/v1/nodes/team-b", serde_json::to_vec(&json!({"share": 0.1, "why": ""})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("why")),
        // Account on an inner node; duplicate account.
        ("PATCH", "/api/v1/nodes/research", serde_json::to_vec(&json!({"account": "r", "why": "x"})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("account")),
        ("PATCH", "/api/v1/nodes/team-b", serde_json::to_vec(&json!({"account": "acct-a", "why": "x"})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("account")),
        // Deleting an inner node; unknown node.
        ("DELETE", "/api/v1/nodes/research", serde_json::to_vec(&json!({"why": "x"})).unwrap(), StatusCode::CONFLICT, None),
        ("PATCH", "/api/v1/nodes/ghost", serde_json::to_vec(&json!({"share": 0.1, "why": "x"})).unwrap(), StatusCode::NOT_FOUND, None),
        // Malformed JSON, oversized body.
        ("POST", "/api/v1/import", b"{\"nodes\": [".to_vec(), StatusCode::BAD_REQUEST, None),
        ("POST", "/api/v1/import", vec![b' '; 10_000], StatusCode::PAYLOAD_TOO_LARGE, Some("body")),
        // Ledger: end before start.
        ("POST", "/api/v1/ledger", serde_json::to_vec(&json!({"intervals": [{"job": 1, "account": "a", "gpus": 1, "start": 10, "end": 5, "kind": "allocated"}]})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("intervals[0]")),
        // Ledger: times no query can name, a weight whose sums overflow.
        ("POST", "/api/v1/ledger", serde_json::to_vec(&json!({"intervals": [{"job": 1, "account": "a", "gpus": 1, "start": i64::MIN, "end": 5, "kind": "allocated"}]})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("intervals[0].start")),
        ("POST", "/api/v1/ledger", serde_json::to_vec(&json!({"intervals": [{"job": 1, "account": "a", "gpus": 1, "start": 0, "end": i64::MAX, "kind": "allocated"}]})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("intervals[0].end")),
        ("POST", "/api/v1/ledger", serde_json::to_vec(&json!({"intervals": [{"job": 1, "account": "a", "gpus": 1, "start": 0, "end": 5, "kind": "allocated", "weight": 1e308}]})).unwrap(), StatusCode::UNPROCESSABLE_ENTITY, Some("intervals[0].weight")),
    ];
    for (m, p, body, want, field) in cases {
        let (st, v) = call(&r, m, p, Some("root"), Some(body.clone())).await;
        assert_eq!(
            st,
            want,
            "{m} {p} {} -> {v}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
        assert!(
            v["error"].is_string(),
            "error body is JSON with a message: {v}"
        );
        if let Some(f) = field {
            assert_eq!(v["field"].as_str(), Some(f), "{m} {p}: {v}");
        }
    }
    assert_eq!(s.db().load_specs().unwrap(), before);
    assert_eq!(audit_len(&r).await, n_audit);
}

#[tokio::test]
async fn move_and_remove_with_checks() {
    let (s, _c, r) = seeded().await;
    let (st, v) = call(
        &r,
        "PATCH",
        "/api/v1/nodes/ops",
        Some("root"),
        j(json!({"parent": "research", "share": 0.0, "why": "reorg"})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let t = s.db().load_tree().unwrap().unwrap();
    assert_eq!(
        t.node(t.node(t.find("ops").unwrap()).parent.unwrap()).name,
        "research"
    );
    let (st, _) = call(
        &r,
        "DELETE",
        "/api/v1/nodes/ops",
        Some("root"),
        j(json!({"why": "gone"})),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert!(s.db().load_tree().unwrap().unwrap().find("ops").is_none());
    let rows = call(&r, "GET", "/api/v1/audit?limit=1", None, None).await.1;
    assert_eq!(rows["rows"][0]["action"], "delete");
    assert_eq!(rows["rows"][0]["who"], "root");
    assert_eq!(rows["rows"][0]["why"], "gone");
    assert_eq!(rows["rows"][0]["old"]["name"], "ops");
    // Export round-trips.
    let (_, v) = call(&r, "GET", "/api/v1/export", None, None).await;
    assert_eq!(v["nodes"].as_array().unwrap().len(), 4);
}

fn sjob(id: u64, acct: &str, gpus: u32, min_rt: u64, prio: i64, submit: i64) -> SlurmJob {
    SlurmJob {
        job: JobId(id),
        account: acct.into(),
        user: String::new(),
        gpus,
        min_runtime_s: min_rt,
        resumable: true,
        priority: prio,
        submit,
        start: None,
        end: None,
        alloc: Vec::new(),
        instances: 0,
        eligible: true,
        begin_after: None,
        gpu_types: Default::default(),
        tier: 0,
        qos: String::new(),
        qos_priority: 0,
    }
}

#[tokio::test]
async fn cycle_orders_pushes_only_changes_and_survives_slurm_outage() {
    let (s, clock, r) = seeded().await;
    let slurm = Arc::new(FakeSlurm::new());
    // team-a has used its budget (ratio 1), team-b nothing.
    slurm.put(SlurmJob {
        start: Some(T0 - 3600),
        ..sjob(1, "acct-a", 5, 600, 0, T0 - 4000)
    });
    slurm.put(sjob(10, "acct-a", 1, 600, 5, T0 - 100));
    slurm.put(sjob(11, "acct-a", 1, 600, 0, T0 - 90));
    slurm.put(sjob(20, "acct-b", 1, 600, -5, T0 - 50));
    slurm.put(sjob(30, "acct-b", 1, 0, 100, T0 - 40)); // unallocated
    slurm.put(sjob(40, "stranger", 1, 600, 0, T0 - 30));
    let mut cycle = Cycle::new(s.clone(), slurm.clone(), slurm.clone());
    let rep = cycle.step().unwrap();
    assert_eq!((rep.ingested, rep.pending, rep.pushed), (1, 5, 5));
    // Under-served team-b first; team-a's jobs by their priority; then
    // unallocated work: budgeted teams' (30), then the account outside the
    // tree, whose time is unallocated whatever its min runtime (40; it used
    // to sort among allocated jobs, ahead of 30).
    let want: Vec<JobId> = [20, 10, 11, 30, 40].into_iter().map(JobId).collect();
    assert_eq!(slurm.pending_order(), want);
    let q = call(&r, "GET", "/api/v1/queue", None, None).await.1;
    let ids: Vec<u64> = q["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![20, 10, 11, 30, 40]);
    let top = call(&r, "GET", "/api/v1/queue?limit=2", None, None).await.1;
    assert_eq!(top["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(top["jobs"][1]["job"], 10);
    // The factor shown is the one Slurm holds.
    assert_eq!(top["jobs"][1]["site_factor"], slurm.factors()[&JobId(10)]);
    // Pages: rows offset..offset+limit, the total and the next offset
    // (null on the last page); a bounded page size.
    assert_eq!(
        (q["total"].as_u64(), q["offset"].as_u64()),
        (Some(5), Some(0))
    );
    assert_eq!(
        q["next_offset"],
        serde_json::Value::Null,
        "one default page"
    );
    assert_eq!(
        (top["total"].as_u64(), top["next_offset"].as_u64()),
        (Some(5), Some(2))
    );
    let page_ids = |v: &serde_json::Value| -> Vec<u64> {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["job"].as_u64().unwrap())
            .collect()
    };
    let p2 = call(&r, "GET", "/api/v1/queue?limit=2&offset=2", None, None)
        .await
        .1;
    assert_eq!(page_ids(&p2), vec![11, 30]);
    assert_eq!(
        (p2["next_offset"].as_u64(), p2["limit"].as_u64()),
        (Some(4), Some(2))
    );
    let p3 = call(&r, "GET", "/api/v1/queue?limit=2&offset=4", None, None)
        .await
        .1;
    assert_eq!(page_ids(&p3), vec![40]);
    assert_eq!(p3["next_offset"], serde_json::Value::Null);
    let past = call(&r, "GET", "/api/v1/queue?offset=99", None, None)
        .await
        .1;
    assert_eq!(
        (page_ids(&past).len(), past["total"].as_u64()),
        (0, Some(5))
    );
    for (bad, field, status) in [
        ("limit=0", "limit", StatusCode::UNPROCESSABLE_ENTITY),
        ("limit=1001", "limit", StatusCode::UNPROCESSABLE_ENTITY),
        ("limit=-1", "limit", StatusCode::UNPROCESSABLE_ENTITY),
        ("offset=-1", "offset", StatusCode::UNPROCESSABLE_ENTITY),
        ("offset=x", "offset", StatusCode::BAD_REQUEST),
    ] {
        let (st, v) = call(&r, "GET", &format!("/api/v1/queue?{bad}"), None, None).await;
        assert_eq!(
            (st, v["field"].as_str()),
            (status, Some(field)),
            "{bad}: {v}"
        );
    }
    let max = call(&r, "GET", "/api/v1/queue?limit=1000", None, None).await;
    assert_eq!(max.0, StatusCode::OK);
    let why = call(&r, "GET", "/api/v1/queue/11", None, None).await.1;
    let text = why["row"]["why"].as_str().unwrap();
    assert!(text.contains("Job 11 is 3rd of 5"), "{text}");
    assert!(text.contains("`team-a` has fair-share ratio"), "{text}");
    assert!(text.contains("2nd of 2 by job priority"), "{text}");
    assert_eq!(
        call(&r, "GET", "/api/v1/queue/999", None, None).await.0,
        StatusCode::NOT_FOUND
    );
    let running = call(&r, "GET", "/api/v1/queue/1", None, None).await.1;
    assert_eq!(running["state"], "running");
    let text = running["row"]["why"].as_str().unwrap();
    assert!(
        text.contains("running since") && text.contains("acct-a"),
        "{text}"
    );
    assert_eq!(
        call(&r, "GET", "/api/v1/queue/abc", None, None).await.1["field"],
        "job"
    );

    // Nothing changed: nothing pushed.
    clock.advance(10);
    assert_eq!(cycle.step().unwrap().pushed, 0);
    // A restarted service (a new cycle, nothing pushed yet) keys the order
    // on the factors Slurm holds: nothing to push either.
    let mut restarted = Cycle::new(s.clone(), slurm.clone(), slurm.clone());
    assert_eq!(restarted.step().unwrap().pushed, 0);
    // A new job in the middle (behind 11, ahead of 30 and 40) changes only
    // its own factor: sparse keys, not ranks (issue 11).
    let before = slurm.factors();
    slurm.put(sjob(12, "acct-a", 1, 600, -9, T0));
    clock.advance(10);
    let rep = cycle.step().unwrap();
    assert_eq!(rep.pushed, 1, "only job 12: {:?}", slurm.pushes().last());
    let want: Vec<JobId> = [20, 10, 11, 12, 30, 40].into_iter().map(JobId).collect();
    assert_eq!(slurm.pending_order(), want);
    let after = slurm.factors();
    assert!(before.iter().all(|(j, f)| after[j] == *f));

    // Slurm goes down: the step fails, reads keep working from the last state.
    slurm.set_down(true);
    clock.advance(10);
    assert!(cycle.step().is_err());
    assert_eq!(
        call(&r, "GET", "/api/v1/queue", None, None).await.1["jobs"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    let h = call(&r, "GET", "/healthz", None, None).await.1;
    assert_eq!(h["cycle"]["slurm_connected"], false);
    let m = call(&r, "GET", "/metrics", None, None).await.1;
    let m = prom::parse(m.as_str().unwrap());
    assert_eq!(m.value("compass_queue_pending_jobs", &[]), Some(6.0));
    assert_eq!(
        m.value("compass_cycles_total", &[("outcome", "failed")]),
        Some(1.0)
    );
    assert_eq!(m.value("compass_slurm_up", &[]), Some(0.0));
    assert_eq!(
        m.value("compass_slurm_last_success_timestamp_seconds", &[]),
        Some((clock_now(&s) - 10) as f64)
    );
    assert!(m
        .value("compass_team_fairshare_ratio", &[("team", "team-a")])
        .is_some());
    assert_eq!(
        m.value("compass_cycle_duration_seconds_count", &[]),
        m.value("compass_cycles_total", &[("outcome", "ok")])
            .map(|ok| ok + 1.0)
    );
    slurm.set_down(false);
    // Job 1 ended while we were not looking; Slurm forgot it.
    slurm.purge(JobId(1));
    clock.advance(10);
    let rep = cycle.step().unwrap();
    assert_eq!(rep.closed, 1);
    let l = s.db().ledger_between(0, T0 + 100).unwrap();
    let iv = l.iter().next().unwrap();
    assert_eq!(iv.end, Some(T0 + 20), "closed at the last time it was seen");
}

#[tokio::test]
async fn owed_vs_delivered_caps_owed_at_demand() {
    let (s, clock, r) = seeded().await;
    let slurm = Arc::new(FakeSlurm::new());
    // team-b (allocation 0.24 x 10 = 2.4 GPUs) demands and gets 1 GPU for one hour.
    slurm.put(SlurmJob {
        start: Some(T0),
        ..sjob(1, "acct-b", 1, 600, 0, T0)
    });
    let mut cycle = Cycle::new(s.clone(), slurm.clone(), slurm.clone());
    for _ in 0..360 {
        cycle.step().unwrap();
        clock.advance(10);
    }
    let v = call(&r, "GET", "/api/v1/reports/owed?days=1", None, None)
        .await
        .1;
    let b = v["teams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "team-b")
        .unwrap()
        .clone();
    let owed = b["owed_gpu_hours"].as_f64().unwrap();
    let delivered = b["delivered_gpu_hours"].as_f64().unwrap();
    assert!(
        (owed - 1.0).abs() < 0.02,
        "owed = min(2.4 GPUs, 1 GPU demand) x 1 h: {b}"
    );
    assert!((delivered - 1.0).abs() < 0.02, "{b}");
    assert!(b["delivered_fraction"].as_f64().unwrap() > 0.97, "{b}");
    let a = v["teams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "team-a")
        .unwrap()
        .clone();
    assert_eq!(a["owed_gpu_hours"], 0.0, "no demand, nothing owed");
    assert_eq!(
        call(&r, "GET", "/api/v1/reports/owed?days=0", None, None)
            .await
            .1["field"],
        "days"
    );
}

#[tokio::test]
async fn openapi_documents_every_route_and_dashboard_renders_data() {
    let (_s, _c, r) = seeded().await;
    let (st, doc) = call(&r, "GET", "/openapi.json", None, None).await;
    assert_eq!(st, StatusCode::OK);
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/",
        "/dashboard.js",
        "/healthz",
        "/metrics",
        "/openapi.json",
        "/api/v1/tree",
        "/api/v1/usage",
        "/api/v1/teams",
        "/api/v1/teams/{name}",
        "/api/v1/nodes",
        "/api/v1/nodes/{name}",
        "/api/v1/export",
        "/api/v1/import",
        "/api/v1/queue",
        "/api/v1/queue/{job}",
        "/api/v1/jobs",
        "/api/v1/reports/owed",
        "/api/v1/audit",
        "/api/v1/ledger",
        "/api/v1/actions",
        "/api/v1/history",
        "/api/v1/hosts",
        "/api/v1/hosts/{node}/fault",
        "/api/v1/hosts/{node}/repaired",
    ] {
        assert!(
            paths.contains_key(p),
            "{p} missing from the OpenAPI document"
        );
        // And the route exists (not 404 for GET where documented).
        if paths[p].get("get").is_some() {
            let concrete = p.replace("{name}", "team-a").replace("{job}", "1");
            let st = call(&r, "GET", &concrete, None, None).await.0;
            assert!(
                st != StatusCode::NOT_FOUND || concrete.contains("queue/1"),
                "{p} -> {st}"
            );
        }
    }
    let (st, page) = call(&r, "GET", "/", None, None).await;
    assert_eq!(st, StatusCode::OK);
    let page = page.as_str().unwrap();
    assert!(page.contains("\"name\":\"team-a\""), "page embeds the data");
    assert!(!page.contains("__DATA__"));
}

/// Account names differ by case only: one account (Slurm stores them in
/// lower case). An import written in upper case changes nothing, its dry
/// run says so, and a manager importing a file that changes only teams
/// below them is not refused for a team above whose account is in another
/// case (issue #11: the dry run and the manager check compared the names
/// before the tree lowered them).
#[tokio::test]
async fn an_import_reads_accounts_in_any_case_as_one() {
    let (_s, _c, r) = seeded().await;
    let upper = |doc: &mut Value| {
        doc["nodes"][4]["account"] = json!("ACCT-OPS");
    };
    let mut dry = tree_doc();
    upper(&mut dry);
    dry["dry_run"] = json!(true);
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(dry)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["changes"], json!([]), "{v}");
    let mut real = tree_doc();
    upper(&mut real);
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(real)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["changes"], json!([]), "{v}");
    // pi manages research: team-a and team-b change, ops is written in
    // upper case.
    let mut doc = tree_doc();
    upper(&mut doc);
    doc["nodes"][2]["share"] = json!(0.6);
    doc["nodes"][3]["share"] = json!(0.4);
    for dry_run in [true, false] {
        doc["dry_run"] = json!(dry_run);
        let (st, v) = call(&r, "POST", "/api/v1/import", Some("pi"), j(doc.clone())).await;
        assert_eq!(st, StatusCode::OK, "dry run {dry_run}: {v}");
        assert_eq!(v["changes"].as_array().unwrap().len(), 2, "{v}");
    }
}

/// Query windows at the edges of i64 (issue 11): a 400 naming the
/// parameter, never a panic (overflow in `to - from`) or a wrong answer.
#[tokio::test]
async fn query_windows_out_of_range_are_400_never_a_panic() {
    use compass_budget::api::MAX_QUERY_TIME;
    use compass_budget::localtime::iso;
    let (_s, _c, r) = seeded().await;
    let (min, max) = (i64::MIN, i64::MAX);
    let cases: Vec<(String, &str)> = vec![
        (format!("from={min}"), "from"),
        (format!("from={min}&to=0"), "from"),
        (format!("from={}", min + 1), "from"),
        ("from=-1".into(), "from"),
        (format!("to={min}"), "to"),
        (format!("to={max}"), "to"),
        (format!("from=0&to={}", MAX_QUERY_TIME + 1), "to"),
        (format!("window_s={max}"), "window_s"),
        (format!("to={max}&window_s={max}"), "to"),
        ("to=5&window_s=6".into(), "window_s"),
        (format!("window_s={min}"), "window_s"),
        ("from=99999999999999999999".into(), "from"),
        (format!("from={max}"), "from"),
        // ISO dates past i64 seconds: refused, not an overflow (a panic in
        // a debug build, a date of 2027 in a release one, before).
        ("from=100000000000000-01-01T00:00:00Z".into(), "from"),
        ("from=135616539428921-07-02T00:00:00Z".into(), "from"),
        ("to=135616539428921-07-02T00:00:00Z".into(), "to"),
        ("from=2026-02-31T00:00:00Z".into(), "from"),
        ("to=0".into(), "from"),
    ];
    for path in ["/api/v1/tree", "/api/v1/usage"] {
        for (q, field) in &cases {
            let (st, v) = call(&r, "GET", &format!("{path}?{q}"), None, None).await;
            assert_eq!(
                (st, v["field"].as_str()),
                (StatusCode::BAD_REQUEST, Some(*field)),
                "{path}?{q}: {v}"
            );
        }
        // The widest window allowed is answered.
        let (st, v) = call(
            &r,
            "GET",
            &format!("{path}?from=0&to={MAX_QUERY_TIME}"),
            None,
            None,
        )
        .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(
            (v["from"].as_str(), v["to"].as_str()),
            (Some(iso(0).as_str()), Some(iso(MAX_QUERY_TIME).as_str()))
        );
        // The default window near 1970 starts at 1970, not before.
        let (st, v) = call(&r, "GET", &format!("{path}?to=5"), None, None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(v["from"].as_str(), Some(iso(0).as_str()), "{v}");
    }
}

/// `compass node fault` names one node (issue 11): host lists and ranges
/// are refused, and before the first cycle (node list unknown) nothing
/// reaches Slurm.
#[tokio::test]
async fn node_fault_refuses_host_lists_and_unknown_node_lists() {
    use compass_budget::slurm::FakeAction;
    let (s, clock, r) = seeded().await;
    let slurm = Arc::new(FakeSlurm::new());
    slurm.add_node("n1", 8);
    slurm.add_node("n2", 8);
    slurm.set_now(T0);
    let mut cycle = Cycle::new(s.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
    let body = j(json!({ "reason": "fans" }));
    // Before the first cycle: host lists are refused by name, single names
    // because Slurm's node list is not known yet.
    for bad in ["n%5B1-64%5D", "n1,n2", "n%5B1-2%5D,n3", "n1%20n2", "*"] {
        let (st, v) = call(
            &r,
            "POST",
            &format!("/api/v1/hosts/{bad}/fault"),
            Some("root"),
            body.clone(),
        )
        .await;
        assert_eq!(
            (st, v["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("node")),
            "{bad}: {v}"
        );
        assert!(
            v["error"].as_str().unwrap().contains("single node name"),
            "{v}"
        );
    }
    let (st, v) = call(
        &r,
        "POST",
        "/api/v1/hosts/n1/fault",
        Some("root"),
        body.clone(),
    )
    .await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(v["error"].as_str().unwrap().contains("first cycle"), "{v}");
    assert!(
        slurm.actions().is_empty(),
        "nothing reached Slurm: {:?}",
        slurm.actions()
    );
    assert!(s.db().faulty().unwrap().is_empty());
    // After a cycle: a known node is drained; lists and unknown names not.
    cycle.step().unwrap();
    clock.advance(10);
    let (st, v) = call(
        &r,
        "POST",
        "/api/v1/hosts/n%5B1-2%5D/fault",
        Some("root"),
        body.clone(),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = call(
        &r,
        "POST",
        "/api/v1/hosts/n9/fault",
        Some("root"),
        body.clone(),
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    let (st, v) = call(&r, "POST", "/api/v1/hosts/n1/fault", Some("root"), body).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        slurm.actions(),
        vec![FakeAction::Drain("n1".into(), slurm_drain_reason(&slurm))]
    );
    let (st, v) = call(
        &r,
        "POST",
        "/api/v1/hosts/n%5B1-2%5D/repaired",
        Some("root"),
        j(json!({})),
    )
    .await;
    assert_eq!(
        (st, v["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("node")),
        "{v}"
    );
}

/// The reason of the one drain the fake Slurm saw.
fn slurm_drain_reason(slurm: &FakeSlurm) -> String {
    use compass_budget::slurm::FakeAction;
    slurm
        .actions()
        .into_iter()
        .find_map(|a| match a {
            FakeAction::Drain(_, why) => Some(why),
            _ => None,
        })
        .unwrap_or_default()
}

/// A fresh directory with the database file `budget.db` the service opens
/// (admin `root`), its state and router.
fn on_a_file(
    name: &str,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    Arc<AppState>,
    Router,
) {
    let (dir, path, state, _clock, r) = on_a_file_with(name, "");
    (dir, path, state, r)
}

/// [`on_a_file`] with more config (`extra`), and the service's clock.
fn on_a_file_with(
    name: &str,
    extra: &str,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    Arc<AppState>,
    Arc<TestClock>,
    Router,
) {
    let dir = std::env::temp_dir().join(format!("compass-api-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("budget.db");
    let (state, clock) = state_on(&path, extra, T0);
    let r = compass_budget::api::router(state.clone());
    (dir, path, state, clock, r)
}

/// The service's state over the database file `path` (opened, or created),
/// with more config (`extra`) and a test clock at `t0`: what a (re)start of
/// the service sees.
fn state_on(path: &std::path::Path, extra: &str, t0: i64) -> (Arc<AppState>, Arc<TestClock>) {
    let config = Config::parse(
        &format!(
            "db = \"unused\"\nadmins = [\"root\"]\ncapacity_gpus = 10\nwindow_s = 3600\n{extra}"
        ),
        "test",
    )
    .unwrap();
    let clock = Arc::new(TestClock::new(t0));
    let state = AppState::new(
        config,
        Db::open(path).unwrap(),
        Arc::new(NameAuth),
        clock.clone(),
    );
    (state, clock)
}

/// The database file removed (or replaced) while the service runs: SQLite
/// would go on writing to the removed file, and every edit acknowledged
/// since would be gone at the next start (issue #11). Now every request is
/// a 503 naming the file, `/healthz` is 503 `db-error` with the same
/// message, and the file put back makes everything answer again.
#[tokio::test]
async fn a_database_file_removed_under_the_service_refuses_writes_and_fails_healthz() {
    let (dir, path, state, r) = on_a_file("removed");
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = call(&r, "GET", "/healthz", None, None).await;
    assert_eq!(
        (st, v["status"].as_str()),
        (StatusCode::OK, Some("ok")),
        "{v}"
    );
    // Moved away (as `rm` would, but kept to be put back).
    let aside = dir.join("aside.db");
    std::fs::rename(&path, &aside).unwrap();
    let team = json!({ "name": "team-c", "parent": "research", "share": 0.0,
                       "account": "acct-c", "why": "new team" });
    let (st, v) = call(&r, "POST", "/api/v1/teams", Some("root"), j(team.clone())).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("removed or replaced"),
        "{v}"
    );
    let (st, v) = call(&r, "GET", "/api/v1/tree", None, None).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    let (st, v) = call(&r, "GET", "/healthz", None, None).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["status"], "db-error", "{v}");
    assert!(
        v["db_error"]
            .as_str()
            .unwrap()
            .contains("removed or replaced"),
        "{v}"
    );
    // A new file at the path is not the one the service has open either.
    std::fs::write(&path, b"").unwrap();
    let (st, _) = call(&r, "POST", "/api/v1/teams", Some("root"), j(team.clone())).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
    // The file put back: writes work and are in it.
    std::fs::rename(&aside, &path).unwrap();
    let (st, v) = call(&r, "POST", "/api/v1/teams", Some("root"), j(team)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = call(&r, "GET", "/healthz", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    drop(r);
    drop(state);
    let names: Vec<String> = Db::open(&path)
        .unwrap()
        .load_specs()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert!(names.contains(&"team-c".to_string()), "{names:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `chattr FLAG FILES...`: did it succeed? (Not on tmpfs or overlay file
/// systems.)
fn chattr(flag: &str, files: &[std::path::PathBuf]) -> bool {
    std::process::Command::new("chattr")
        .arg(flag)
        .args(files)
        .status()
        .is_ok_and(|s| s.success())
}

/// The file system refuses writes (here `chattr +i` on the database and its
/// WAL): an edit is a 503 (a dependency failed; it was a 500), `/healthz`
/// is 503 `db-error` (it was `ok`: it only read), and once writes are
/// allowed again both recover with nothing lost. Skipped, saying so, where
/// `chattr +i` is not supported (tmpfs, overlay file systems).
#[tokio::test]
async fn a_database_the_file_system_will_not_write_is_a_503_and_fails_healthz() {
    let (dir, path, _state, r) = on_a_file("immutable");
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let files = [path.clone(), dir.join("budget.db-wal")];
    let chattr = |flag: &str| chattr(flag, &files);
    if !chattr("+i") {
        eprintln!("skipped: `chattr +i` is not supported here");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let team = json!({ "name": "team-c", "parent": "research", "share": 0.0,
                       "account": "acct-c", "why": "new team" });
    let (st, v) = call(&r, "POST", "/api/v1/teams", Some("root"), j(team.clone())).await;
    let (st_h, h) = call(&r, "GET", "/healthz", None, None).await;
    assert!(chattr("-i"), "chattr -i");
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(
        (st_h, h["status"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("db-error")),
        "{h}"
    );
    let (st, v) = call(&r, "POST", "/api/v1/teams", Some("root"), j(team)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = call(&r, "GET", "/healthz", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// SQLite maps the database's `-shm` file and writes through the map: made
/// immutable under the running service, the next write killed the whole
/// process with SIGBUS (issue #11; this test's process died). Now every
/// request and `/healthz` check the file's flags first: an edit is a 503
/// naming the file, `/healthz` is 503 `db-error`, and once the flag is
/// lifted both recover with nothing lost. Skipped, saying so, where
/// `chattr +i` is not supported.
#[tokio::test]
async fn an_immutable_shared_memory_file_is_a_503_not_a_crash() {
    let (dir, _path, _state, r) = on_a_file("immutable-shm");
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let shm = dir.join("budget.db-shm");
    assert!(shm.exists(), "WAL mode keeps a -shm file while open");
    let chattr = |flag: &str| chattr(flag, std::slice::from_ref(&shm));
    if !chattr("+i") {
        eprintln!("skipped: `chattr +i` is not supported here");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let team = |name: &str| {
        json!({ "name": name, "parent": "research", "share": 0.0,
                "account": format!("acct-{name}"), "why": "new team" })
    };
    // Several edits: the first write after the flag may land on a page
    // still writable in the map; a later one faults.
    let mut refused = Vec::new();
    for k in 0..20 {
        let (st, v) = call(
            &r,
            "POST",
            "/api/v1/teams",
            Some("root"),
            j(team(&format!("t{k}"))),
        )
        .await;
        refused.push((st, v));
    }
    let (st_h, h) = call(&r, "GET", "/healthz", None, None).await;
    assert!(chattr("-i"), "chattr -i");
    for (st, v) in &refused {
        assert_eq!(*st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        assert!(v.to_string().contains("budget.db-shm"), "{v}");
    }
    assert_eq!(
        (st_h, h["status"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("db-error")),
        "{h}"
    );
    let (st, v) = call(&r, "POST", "/api/v1/teams", Some("root"), j(team("t0"))).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = call(&r, "GET", "/healthz", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stored tree that fails validation (here: a hand edit of the database
/// that puts siblings above 1) can be repaired through the API (issue 11):
/// reads and non-admin edits say how; an admin edit or import that makes it
/// valid is accepted.
#[tokio::test]
async fn an_invalid_stored_tree_is_repairable_through_the_api() {
    let (dir, path, state, r) = on_a_file("invalid");
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // Behind the service's back: team-a 0.9 + team-b 0.3 > 1.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE nodes SET share = 0.9 WHERE name = 'team-a'", [])
        .unwrap();
    let (st, v) = call(&r, "GET", "/api/v1/tree", None, None).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("stored budget tree is invalid") && e.contains("POST /api/v1/import"),
        "{e}"
    );
    // A manager cannot fix it (their checks need the tree): told who can.
    let fix = j(json!({ "share": 0.7, "why": "repair" }));
    let (st, v) = call(&r, "PATCH", "/api/v1/nodes/team-a", Some("pi"), fix.clone()).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("An admin can repair it"),
        "{v}"
    );
    // An admin edit that leaves it invalid is refused, naming the field.
    let (st, v) = call(
        &r,
        "PATCH",
        "/api/v1/nodes/team-b",
        Some("root"),
        j(json!({ "share": 0.2, "why": "x" })),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    // An admin edit that makes it valid is accepted, and reads work again.
    let (st, v) = call(&r, "PATCH", "/api/v1/nodes/team-a", Some("root"), fix).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = call(&r, "GET", "/api/v1/tree", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // Broken again: a whole-tree import by an admin repairs it too.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE nodes SET share = 0.9 WHERE name = 'team-b'", [])
        .unwrap();
    let (st, v) = call(&r, "GET", "/api/v1/export", None, None).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    let mut dry = tree_doc();
    dry["dry_run"] = json!(true);
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(dry)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["applied"], false);
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = call(&r, "GET", "/api/v1/export", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["nodes"].as_array().unwrap().len(), 5);
    drop(r);
    drop(state);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SQLite stuck (here: a statement holding the database for as long as the
/// test wants) on the real 2-thread server (issue 11): `/healthz` answers
/// 503 `db-stalled` instead of hanging, reads that need the database answer
/// 503 after `request_timeout_s`, the queue (in memory) answers at once; once
/// the database is free again, everything is 200.
#[test]
fn a_stuck_database_never_hangs_healthz_or_the_server() {
    use std::time::Duration;
    let config = Config::parse(
        "db = \":memory:\"\nadmins = [\"root\"]\ncapacity_gpus = 10\nwindow_s = 3600\nrequest_timeout_s = 6\n",
        "test",
    )
    .unwrap();
    let (state, _) = test_state(config, NameAuth, T0, vec![]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = compass_budget::api::router(state.clone());
    rt.spawn(async move { axum::serve(listener, app).await });
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let get = |path: &str| -> (u16, String) {
        let mut r = agent.get(&format!("{url}{path}")).call().unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    };
    assert_eq!(get("/healthz").0, 200);

    // Hold the database from another thread, as a stuck statement would.
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let st = state.clone();
    let holder = std::thread::spawn(move || {
        let _db = st.db();
        held_tx.send(()).unwrap();
        let _ = hold_rx.recv();
    });
    held_rx.recv().unwrap();
    // Three reads stuck on the database at once (more than the 2 threads).
    let stuck: Vec<_> = (0..3)
        .map(|_| {
            let (agent, url) = (agent.clone(), url.clone());
            std::thread::spawn(move || {
                let mut r = agent.get(&format!("{url}/api/v1/tree")).call().unwrap();
                (
                    r.status().as_u16(),
                    r.body_mut().read_to_string().unwrap(),
                    std::time::Instant::now(),
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let (st_h, body) = get("/healthz");
    assert_eq!(st_h, 503, "{body}");
    assert!(body.contains("db-stalled"), "{body}");
    let (st_q, body) = get("/api/v1/queue");
    assert_eq!(st_q, 200, "{body}");
    let served = std::time::Instant::now();
    for t in stuck {
        let (code, body, at) = t.join().unwrap();
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("request_timeout_s"), "{body}");
        assert!(at > served, "health and queue waited for the stuck reads");
    }
    hold_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(get("/healthz").0, 200);
    assert_eq!(get("/api/v1/tree").0, 200);
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// Jobs of alice and bob, ordered by one cycle: alice 10 and 11 pending,
/// bob 20 pending and 2 running; an action requeued bob's 3 for alice's 10.
async fn two_users(extra: &str) -> (Arc<AppState>, Router) {
    let (s, _clock, r) = seeded_with(extra).await;
    let slurm = Arc::new(FakeSlurm::new());
    let owned = |user: &str, job: SlurmJob| SlurmJob {
        user: user.into(),
        ..job
    };
    slurm.put(owned("alice", sjob(10, "acct-a", 1, 600, 0, T0 - 100)));
    slurm.put(owned("alice", sjob(11, "acct-a", 1, 600, 0, T0 - 90)));
    slurm.put(owned("bob", sjob(20, "acct-b", 1, 600, 0, T0 - 80)));
    slurm.put(SlurmJob {
        start: Some(T0 - 60),
        ..owned("bob", sjob(2, "acct-b", 1, 600, 0, T0 - 100))
    });
    Cycle::new(s.clone(), slurm.clone(), slurm.clone())
        .step()
        .unwrap();
    s.db()
        .log_action(&compass_budget::db::ActionRow {
            id: 0,
            at: T0,
            action: "requeue".into(),
            job: Some(3),
            run_start: Some(T0 - 500),
            node: Some("n1".into()),
            cause_job: Some(10),
            rule: Some("unallocated".into()),
            lost_gpu_s: 10.0,
            ok: true,
            detail: String::new(),
            submit: None,
            dry_run: false,
            user: None,
            cause_user: None,
        })
        .unwrap();
    (s, r)
}

/// `PrivateData=jobs` and reused job ids (issue #11): an action records
/// the owners of its jobs when it is taken, so after a cold start of
/// slurmctld the new owner of a reused id does not see the old job's
/// action, and the old owner still does. Before, the id's owner today
/// decided: bob saw carol's requeue because job 20 is his now.
#[tokio::test]
async fn an_action_on_a_reused_job_id_is_shown_to_its_owner_then() {
    let (s, r) = two_users("[reads]\nprivate_data = \"jobs\"\n").await;
    s.db()
        .log_action(&compass_budget::db::ActionRow {
            job: Some(20),
            cause_job: Some(21),
            user: Some("carol".into()),
            cause_user: Some("dave".into()),
            submit: Some(T0 - 5000),
            ..compass_budget::db::ActionRow::on_node(
                T0,
                "requeue",
                "n1",
                "unallocated",
                true,
                String::new(),
            )
        })
        .unwrap();
    let jobs_seen = |v: Value| -> Vec<u64> {
        (v["rows"].as_array().unwrap().iter())
            .filter_map(|a| a["job"].as_u64())
            .collect()
    };
    for (who, want) in [
        ("bob", vec![]),
        ("carol", vec![20]),
        ("dave", vec![20]),
        ("alice", vec![3]),
    ] {
        let (st, v) = call(&r, "GET", "/api/v1/actions", Some(who), None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(jobs_seen(v), want, "{who}");
    }
    // The owners are stored (schema 8), not part of the API's rows.
    let stored = s.db().actions(Some(20), 10).unwrap();
    assert_eq!(stored[0].user.as_deref(), Some("carol"));
    let (_, v) = call(&r, "GET", "/api/v1/actions", Some("root"), None).await;
    assert!(v["rows"][0].get("user").is_none(), "{v}");
}

/// Job ids of a queue page, as `GET /api/v1/queue` returns them to `user`.
async fn queue_as(r: &Router, user: Option<&str>) -> Vec<u64> {
    let (st, v) = call(r, "GET", "/api/v1/queue", user, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let ids: Vec<u64> = (v["jobs"].as_array().unwrap().iter())
        .map(|j| j["job"].as_u64().unwrap())
        .collect();
    assert_eq!(v["total"].as_u64(), Some(ids.len() as u64), "{v}");
    ids
}

/// Slurm's `PrivateData=jobs` for reads (issue 14): users see their own
/// jobs only; admins, operators and root see all; without PrivateData
/// everyone sees everything. `accounts`: the audit trail goes to admins
/// and to managers for their teams.
#[tokio::test]
async fn private_data_jobs_hides_other_users_jobs_from_reads() {
    let (_s, open) = two_users("").await;
    for who in [Some("alice"), Some("bob"), None] {
        let mut ids = queue_as(&open, who).await;
        ids.sort();
        assert_eq!(ids, vec![10, 11, 20], "no PrivateData: {who:?} sees all");
    }
    assert_eq!(
        call(&open, "GET", "/api/v1/queue/20", Some("alice"), None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        audit_len(&open).await,
        5,
        "no PrivateData: the audit is open"
    );

    let (_s, r) =
        two_users("[reads]\nprivate_data = \"jobs,accounts\"\noperators = [\"ops\"]\n").await;
    let mut alice = queue_as(&r, Some("alice")).await;
    alice.sort();
    assert_eq!(alice, vec![10, 11]);
    assert_eq!(queue_as(&r, Some("bob")).await, vec![20]);
    assert_eq!(queue_as(&r, None).await, Vec::<u64>::new(), "anonymous");
    for who in ["root", "ops"] {
        assert_eq!(queue_as(&r, Some(who)).await.len(), 3, "{who} sees all");
    }
    // Rows carry their owner.
    let (_, v) = call(&r, "GET", "/api/v1/queue", Some("bob"), None).await;
    assert_eq!(v["jobs"][0]["user"], "bob");
    // One job: pending (20) and running (2) jobs of bob refused to alice.
    for job in [20, 2] {
        let (st, v) = call(
            &r,
            "GET",
            &format!("/api/v1/queue/{job}"),
            Some("alice"),
            None,
        )
        .await;
        assert_eq!(st, StatusCode::FORBIDDEN, "{job}: {v}");
        assert!(
            v["error"].as_str().unwrap().contains("PrivateData=jobs"),
            "{v}"
        );
        let (st, v) = call(
            &r,
            "GET",
            &format!("/api/v1/queue/{job}"),
            Some("bob"),
            None,
        )
        .await;
        assert_eq!(st, StatusCode::OK, "{job}: {v}");
    }
    // A user's jobs: their own, or anyone's for admins.
    let (st, _) = call(&r, "GET", "/api/v1/jobs?user=bob", Some("alice"), None).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (st, v) = call(&r, "GET", "/api/v1/jobs?user=bob", Some("root"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (
            v["pending"][0]["job"].as_u64(),
            v["running"][0]["job"].as_u64()
        ),
        (Some(20), Some(2))
    );
    // Actions: the requeue of job 3 made room for alice's 10.
    let actions = |v: Value| v["rows"].as_array().unwrap().len();
    assert_eq!(
        actions(
            call(&r, "GET", "/api/v1/actions", Some("alice"), None)
                .await
                .1
        ),
        1
    );
    assert_eq!(
        actions(
            call(&r, "GET", "/api/v1/actions", Some("bob"), None)
                .await
                .1
        ),
        0
    );
    // The dashboard page embeds only what its reader may see.
    let (_, page) = call(&r, "GET", "/", Some("bob"), None).await;
    let page = page.as_str().unwrap();
    assert!(
        page.contains("\"job\":20") && !page.contains("\"job\":10"),
        "bob's page"
    );
    // accounts: the audit trail to admins, and to `pi` for research and
    // the teams under it; not to users nor to anonymous readers.
    let audit_nodes = |v: Value| -> Vec<String> {
        let mut n: Vec<String> = (v["rows"].as_array().unwrap().iter())
            .map(|r| r["node"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    assert_eq!(
        audit_nodes(call(&r, "GET", "/api/v1/audit", Some("root"), None).await.1).len(),
        5
    );
    assert_eq!(
        audit_nodes(call(&r, "GET", "/api/v1/audit", Some("pi"), None).await.1),
        ["research", "team-a", "team-b"]
    );
    assert!(audit_nodes(
        call(&r, "GET", "/api/v1/audit", Some("alice"), None)
            .await
            .1
    )
    .is_empty());
    assert!(audit_nodes(call(&r, "GET", "/api/v1/audit", None, None).await.1).is_empty());
}

/// Behind a reverse proxy: its identity header counts only on connections
/// from `trusted_proxies`.
#[tokio::test]
async fn proxy_identity_header_is_trusted_only_from_trusted_proxies() {
    let (_s, r) = two_users(
        "[reads]\nprivate_data = \"jobs\"\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_user_header = \"X-Remote-User\"\n",
    )
    .await;
    let from = |peer: &str| {
        let mut req = Request::builder()
            .uri("/api/v1/queue")
            .header("X-Remote-User", "bob")
            .body(Body::empty())
            .unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo::<std::net::SocketAddr>(
                peer.parse().unwrap(),
            ));
        req
    };
    for (peer, want) in [("127.0.0.1:40000", vec![20]), ("10.0.0.9:40000", vec![])] {
        let resp = r.clone().oneshot(from(peer)).await.unwrap();
        let v: Value = serde_json::from_slice(
            &axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap(),
        )
        .unwrap();
        let ids: Vec<u64> = (v["jobs"].as_array().unwrap().iter())
            .map(|j| j["job"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, want, "from {peer}");
    }
    // The two settings go together.
    let e = Config::parse(
        "db = \":memory:\"\ncapacity_gpus = 1\n[reads]\nproxy_user_header = \"X-Remote-User\"\n",
        "t",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("trusted_proxies"), "{e}");
}

/// API version 2 (issue 14): every time in a response is an ISO 8601 local
/// date-time with its offset, durations are seconds in `_s` keys; query
/// windows take either form.
#[tokio::test]
async fn times_in_responses_are_iso_8601_with_offset() {
    use compass_budget::localtime::{iso, parse_iso};
    let is_iso = |v: &Value| -> bool {
        let Some(s) = v.as_str() else { return false };
        let b = s.as_bytes();
        s.len() == 25
            && [4, 7].iter().all(|&i| b[i] == b'-')
            && b[10] == b'T'
            && [13, 16, 22].iter().all(|&i| b[i] == b':')
            && (b[19] == b'+' || b[19] == b'-')
            && parse_iso(s).is_some()
    };
    let (s, r) = two_users("").await;
    let (_, doc) = call(&r, "GET", "/openapi.json", None, None).await;
    assert_eq!(doc["info"]["version"], "2");
    let q = call(&r, "GET", "/api/v1/queue", None, None).await.1;
    assert!(is_iso(&q["at"]), "{q}");
    assert_eq!(q["at"], iso(clock_now(&s)));
    let t = call(&r, "GET", "/api/v1/tree", None, None).await.1;
    assert!(is_iso(&t["from"]) && is_iso(&t["to"]), "{t}");
    assert_eq!(t["window_s"], 3600, "durations: seconds in `_s` keys");
    let u = call(&r, "GET", "/api/v1/usage", None, None).await.1;
    assert!(is_iso(&u["from"]) && is_iso(&u["to"]), "{u}");
    let a = call(&r, "GET", "/api/v1/audit", None, None).await.1;
    assert!(is_iso(&a["rows"][0]["at"]), "{a}");
    let act = call(&r, "GET", "/api/v1/actions", None, None).await.1;
    let row = &act["rows"][0];
    assert!(is_iso(&row["at"]) && is_iso(&row["run_start"]), "{act}");
    assert_eq!(row["lost_gpu_s"], 10.0);
    let jobs = call(&r, "GET", "/api/v1/jobs?user=bob", None, None).await.1;
    assert!(
        is_iso(&jobs["at"]) && is_iso(&jobs["running"][0]["start"]),
        "{jobs}"
    );
    assert_eq!(jobs["running"][0]["min_runtime_s"], 600);
    let why = call(&r, "GET", "/api/v1/queue/2", None, None).await.1;
    assert!(is_iso(&why["at"]), "{why}");
    let owed = call(&r, "GET", "/api/v1/reports/owed?days=1", None, None)
        .await
        .1;
    assert!(is_iso(&owed["from"]) && is_iso(&owed["to"]), "{owed}");
    let h = call(&r, "GET", "/healthz", None, None).await.1;
    assert!(is_iso(&h["cycle"]["last_ok"]), "{h}");
    // Query windows: Unix seconds or ISO 8601 (`+` escaped or not).
    let now = clock_now(&s);
    let from = iso(now - 1800);
    for f in [from.clone(), from.replace('+', "%2B")] {
        let (st, v) = call(&r, "GET", &format!("/api/v1/tree?from={f}"), None, None).await;
        assert_eq!(
            (st, v["window_s"].as_i64()),
            (StatusCode::OK, Some(1800)),
            "{f}: {v}"
        );
    }
    let (st, v) = call(&r, "GET", "/api/v1/tree?from=yesterday", None, None).await;
    assert_eq!(
        (st, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("from"))
    );
}

/// The teams whose usage `user` sees: in `/api/v1/tree` (usage not
/// hidden), `/api/v1/usage` and the owed report.
async fn usage_teams(r: &Router, user: Option<&str>) -> [Vec<String>; 3] {
    let names = |v: &Value, list: &str, key: &str| -> Vec<String> {
        let mut n: Vec<String> = (v[list].as_array().unwrap().iter())
            .filter(|n| n["usage_hidden"] != json!(true))
            .map(|n| n[key].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    let (st, tree) = call(r, "GET", "/api/v1/tree", user, None).await;
    assert_eq!(st, StatusCode::OK, "{tree}");
    for n in tree["nodes"].as_array().unwrap() {
        if n["usage_hidden"] == json!(true) {
            assert!(
                n["charged_gpu_hours"].is_null() && n["ratio"].is_null(),
                "{n}"
            );
        }
    }
    let (st, usage) = call(r, "GET", "/api/v1/usage", user, None).await;
    assert_eq!(st, StatusCode::OK, "{usage}");
    let (st, owed) = call(r, "GET", "/api/v1/reports/owed", user, None).await;
    assert_eq!(st, StatusCode::OK, "{owed}");
    [
        names(&tree, "nodes", "name"),
        names(&usage, "nodes", "node"),
        names(&owed, "teams", "team"),
    ]
}

/// Slurm's `PrivateData=usage` (issue 14): admins, root and operators see
/// every team's usage; a manager the teams they manage (and below); a user
/// the teams of the accounts they have jobs under (pending, running, or
/// ended with their user in the ledger); anonymous none. Without it
/// everyone sees all.
#[tokio::test]
async fn private_data_usage_shows_teams_to_their_users_managers_and_admins() {
    use compass_core::fairshare::{Interval, Kind};
    use compass_core::model::JobId;
    let all: Vec<String> = ["ops", "org", "research", "team-a", "team-b"]
        .map(String::from)
        .to_vec();
    let leaves = vec!["ops".to_string(), "team-a".into(), "team-b".into()];
    let (_s, open) = two_users("").await;
    for who in [Some("alice"), None] {
        let [tree, usage, owed] = usage_teams(&open, who).await;
        assert_eq!(
            (tree, usage, &owed),
            (all.clone(), all.clone(), &leaves),
            "{who:?}"
        );
    }

    let (s, r) = two_users("[reads]\nprivate_data = \"usage\"\noperators = [\"helpdesk\"]\n").await;
    // carol's run under acct-ops has ended: the ledger keeps her user.
    {
        let mut db = s.db();
        let iv = Interval {
            job: JobId(40),
            account: "acct-ops".into(),
            gpus: 1,
            start: T0 - 900,
            end: Some(T0 - 300),
            kind: Kind::Allocated,
            weight: 1.0,
        };
        db.ingest(&[iv], T0 - 300).unwrap();
        db.record_job_users(&[(JobId(40), T0 - 900, "carol".into())])
            .unwrap();
    }
    let teams = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases: [(Option<&str>, Vec<String>); 8] = [
        (Some("root"), all.clone()),
        (Some("helpdesk"), all.clone()),
        (Some("ceo"), all.clone()),
        (Some("pi"), teams(&["research", "team-a", "team-b"])),
        (Some("alice"), teams(&["team-a"])),
        (Some("bob"), teams(&["team-b"])),
        (Some("carol"), teams(&["ops"])),
        (None, vec![]),
    ];
    for (who, want) in cases {
        let [tree, usage, owed] = usage_teams(&r, who).await;
        assert_eq!(tree, want, "tree for {who:?}");
        assert_eq!(usage, want, "usage for {who:?}");
        let want_leaves: Vec<String> = want
            .iter()
            .filter(|t| leaves.contains(t))
            .cloned()
            .collect();
        assert_eq!(owed, want_leaves, "owed for {who:?}");
    }
    // Asking by name for a team one may not see is refused; one's own is not.
    let (st, v) = call(&r, "GET", "/api/v1/usage?node=team-b", Some("alice"), None).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("PrivateData=usage"),
        "{v}"
    );
    let (st, v) = call(
        &r,
        "GET",
        "/api/v1/usage?account=acct-a",
        Some("alice"),
        None,
    )
    .await;
    assert_eq!(
        (st, v["nodes"][0]["node"].as_str()),
        (StatusCode::OK, Some("team-a")),
        "{v}"
    );
    // Unbudgeted usage is everyone's: only for those who see all.
    let (_, v) = call(&r, "GET", "/api/v1/usage", Some("alice"), None).await;
    assert!(v["unbudgeted"].is_null(), "{v}");
    let (_, v) = call(&r, "GET", "/api/v1/usage", Some("root"), None).await;
    assert!(v["unbudgeted"]["charged_gpu_hours"].is_number(), "{v}");
    // One team: its budget, not its usage.
    let (st, v) = call(&r, "GET", "/api/v1/nodes/team-b", Some("alice"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(
        v["charged_gpu_hours"].is_null() && v["allocation_gpus"].is_number(),
        "{v}"
    );
    let (_, v) = call(&r, "GET", "/api/v1/nodes/team-b", Some("bob"), None).await;
    assert!(v["charged_gpu_hours"].is_number(), "{v}");
    // The dashboard's data likewise.
    let alice = compass_budget::privacy::Viewer {
        user: Some("alice".into()),
        all: false,
        private: s.read_policy().private,
    };
    let d = compass_budget::dashboard::data(&s, &alice);
    let shown: Vec<&str> = (d["tree"].as_array().unwrap().iter())
        .filter(|n| n["usage_hidden"] != json!(true))
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(shown, ["team-a"], "{d}");
    let owed: Vec<&str> = (d["owed"].as_array().unwrap().iter())
        .map(|t| t["team"].as_str().unwrap())
        .collect();
    assert_eq!(owed, ["team-a"]);
    for day in d["usage_days"].as_array().unwrap() {
        for n in day["nodes"].as_array().unwrap() {
            assert_eq!(n["node"], "team-a", "{day}");
        }
    }
}

/// Issue 14: `GET /api/v1/history` returns the cycle history over the
/// window, at most 500 points (buckets of at least a minute: averages,
/// the longest wait their maximum), times in ISO 8601, to anyone.
#[tokio::test]
async fn history_is_bounded_aggregated_and_public() {
    use compass_budget::db::CycleSample;
    let (s, _c, r) = setup_with("");
    // 2000 samples, one a minute from T0 (a multiple of 300 s).
    assert_eq!(T0 % 300, 0);
    for k in 0..2000i64 {
        s.db()
            .record_cycle_sample(&CycleSample {
                at: T0 + k * 60,
                gpus_allocated: (k % 5) as f64,
                capacity_gpus: 10.0,
                pending_jobs: 3.0,
                longest_wait_s: Some(k as f64),
                median_wait_s: None,
                n_sif: (k % 2 == 0).then_some(2.0),
                partial_nodes: None,
            })
            .unwrap();
    }
    // The whole span: 120,000 s / 499 = 241 s, in buckets of whole
    // minutes: 300 s (5 samples each, T0 is a multiple of 300).
    let to = T0 + 2000 * 60;
    let (st, v) = call(
        &r,
        "GET",
        &format!("/api/v1/history?from={T0}&to={to}"),
        None,
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["bucket_s"], 300);
    let p = v["points"].as_array().unwrap();
    assert_eq!(p.len(), 400);
    // Each bucket: allocated 0,1,2,3,4 -> 2; waits k..k+4 -> max k+4.
    assert_eq!(p[0]["gpus_allocated"], 2.0);
    assert_eq!(p[0]["capacity_gpus"], 10.0);
    assert_eq!(p[0]["pending_jobs"], 3.0);
    assert_eq!(p[0]["longest_wait_s"], 4.0);
    assert_eq!(p[399]["longest_wait_s"], 1999.0);
    assert_eq!(p[0]["n_sif"], 2.0, "NULL samples are left out of the mean");
    assert_eq!(p[0]["median_wait_s"], Value::Null);
    assert_eq!(
        p[1]["at"],
        json!(compass_budget::localtime::iso(T0 + 300)),
        "a point is its bucket's start, in ISO 8601"
    );
    // A 10-minute window, ISO bounds: buckets of a minute, the samples as stored.
    let (st, v) = call(
        &r,
        "GET",
        &format!(
            "/api/v1/history?from={}&to={}",
            compass_budget::localtime::iso(T0 + 60).replace('+', "%2B"),
            T0 + 660
        ),
        None,
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["bucket_s"], 60);
    let waits: Vec<f64> = (v["points"].as_array().unwrap().iter())
        .map(|p| p["longest_wait_s"].as_f64().unwrap())
        .collect();
    assert_eq!(waits, (1..=10).map(f64::from).collect::<Vec<_>>());
    // A year of history: still at most 500 points.
    let (st, v) = call(
        &r,
        "GET",
        &format!("/api/v1/history?from={}&to={to}", to - 366 * 86400),
        None,
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(
        v["points"].as_array().unwrap().len() <= 500,
        "{}",
        v["points"].as_array().unwrap().len()
    );
    // A bad window is a 400 naming the parameter.
    let (st, v) = call(
        &r,
        "GET",
        &format!("/api/v1/history?from={to}&to={T0}"),
        None,
        None,
    )
    .await;
    assert_eq!(
        (st, &v["field"]),
        (StatusCode::BAD_REQUEST, &json!("from")),
        "{v}"
    );
}

/// A running job without an account (`sbatch` without `-A`, or
/// `AccountingStorageType=accounting_storage/none`: libslurm reads it as
/// "") is left out of the ledger, counted in `/healthz` (`cycle.skipped_runs`)
/// and warned about; every other run is written, and the queue (where such a
/// job is an account outside the tree) ordered and pushed. Before, the ledger
/// refused the cycle's whole batch: every cycle failed.
#[tokio::test]
async fn a_job_without_an_account_does_not_stop_the_cycle() {
    let (dir, _path, s, clock, r) = on_a_file_with("no-account", "");
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let slurm = Arc::new(FakeSlurm::new());
    let running = |id: u64, acct: &str, start: i64| SlurmJob {
        start: Some(start),
        ..sjob(id, acct, 1, 600, 0, start - 10)
    };
    slurm.put(running(1, "acct-a", T0 - 100));
    slurm.put(running(2, "", T0 - 60));
    slurm.put(sjob(3, "acct-b", 1, 600, 0, T0 - 50));
    slurm.put(sjob(4, "", 1, 600, 0, T0 - 40));
    slurm.put(sjob(5, "acct-a", 1, 600, 0, T0 - 30));
    let mut cycle = Cycle::new(s.clone(), slurm.clone(), slurm.clone());
    for k in 0..3 {
        clock.set(T0 + 10 * k);
        if k == 2 {
            slurm.end(JobId(2), T0 + 15);
        }
        let rep = cycle.step().expect("the cycle goes on");
        assert_eq!((rep.pending, rep.skipped_runs), (3, 1), "cycle {k}");
    }
    // Job 1's run is in the ledger; job 2's is not.
    let iv = s.db().latest_interval(JobId(1)).unwrap().unwrap();
    assert_eq!((iv.account.as_str(), iv.start), ("acct-a", T0 - 100));
    assert!(s.db().latest_interval(JobId(2)).unwrap().is_none());
    // Ordered and pushed: the budgeted teams first, the job without an
    // account after them.
    let order: Vec<u64> = s.queue().order.iter().map(|p| p.job.job.0).collect();
    assert_eq!(order.len(), 3, "{order:?}");
    assert_eq!(order[2], 4, "{order:?}");
    assert_eq!(slurm.factors().len(), 3);
    assert_eq!(queue_as(&r, None).await, order);
    let (st, v) = call(&r, "GET", "/healthz", None, None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["cycle"]["skipped_runs"], 1, "{v}");
    assert_eq!(v["cycle"]["cycles_ok"], 3, "{v}");
    assert_eq!(v["cycle"]["cycles_failed"], 0, "{v}");
    drop((s, r));
    let _ = std::fs::remove_dir_all(dir);
}

/// The host clock stepped 30 days ahead and back (a wrong NTP step): a run
/// last seen at the wrong time, gone from Slurm after the correction, is
/// closed at most at the time of the cycle that closes it. Before, it was
/// closed at the future time it was last seen: its team was charged 30
/// days of 4 GPUs.
#[tokio::test]
async fn a_run_that_vanishes_after_a_clock_step_back_is_never_charged_past_now() {
    let (dir, _path, s, clock, r) = on_a_file_with("clock-back", "");
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let slurm = Arc::new(FakeSlurm::new());
    slurm.put(SlurmJob {
        start: Some(T0 - 100),
        ..sjob(1, "acct-a", 4, 600, 0, T0 - 200)
    });
    let mut cycle = Cycle::new(s.clone(), slurm.clone(), slurm.clone());
    cycle.step().unwrap();
    clock.set(T0 + 30 * 86_400);
    cycle.step().unwrap();
    clock.set(T0 + 20);
    cycle.step().unwrap();
    // It ends at about T0 + 25 and Slurm forgets it.
    slurm.purge(JobId(1));
    clock.set(T0 + 30);
    assert_eq!(cycle.step().unwrap().closed, 1);
    let iv = s.db().latest_interval(JobId(1)).unwrap().unwrap();
    assert_eq!((iv.start, iv.end), (T0 - 100, Some(T0 + 30)));
    let usage = s.db().usage_between(T0 - 100, T0 + 40 * 86_400).unwrap();
    assert_eq!(usage["acct-a"].charged_gpu_s, 4.0 * 130.0);
    let (st, v) = call(
        &r,
        "GET",
        &format!("/api/v1/usage?from={}&to={}", T0 - 100, T0 + 3600),
        None,
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let a = (v["nodes"].as_array().unwrap().iter())
        .find(|n| n["node"] == "team-a")
        .unwrap()
        .clone();
    assert!(
        (a["charged_gpu_hours"].as_f64().unwrap() - 520.0 / 3600.0).abs() < 1e-9,
        "{a}"
    );
    drop((s, r));
    let _ = std::fs::remove_dir_all(dir);
}

/// A forward clock step past `retain_days` (366) prunes nothing: while the
/// clock reads more than a day past the service's last cycle (at start-up:
/// the newest cycle-history sample), pruning is held, said in `/healthz`
/// (`cycle.pruning_held`) and logged, at a start with a clock set wrong as
/// in a running service; pruning resumes when the clock is back. Before,
/// the step deleted the whole ledger, the actions and the cycle history.
#[tokio::test]
async fn a_clock_step_past_retention_prunes_nothing_until_the_clock_is_back() {
    let extra = "retain_days = 366\n";
    let (dir, path, s, _clock, r) = on_a_file_with("clock-prune", extra);
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // An ended run, and an action, of an hour ago.
    let ivs = json!({ "intervals": [
        { "job": 7, "account": "acct-a", "gpus": 2, "start": T0 - 3600, "end": T0 - 1800, "kind": "allocated" },
    ]});
    let (st, v) = call(&r, "POST", "/api/v1/ledger", Some("root"), j(ivs)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    s.db()
        .log_action(&compass_budget::db::ActionRow {
            job: Some(7),
            run_start: Some(T0 - 3600),
            ..compass_budget::db::ActionRow::on_node(
                T0 - 1800,
                "requeue",
                "n1",
                "unallocated",
                true,
                String::new(),
            )
        })
        .unwrap();
    let slurm = Arc::new(FakeSlurm::new());
    slurm.put(SlurmJob {
        start: Some(T0 - 100),
        ..sjob(1, "acct-a", 1, 600, 0, T0 - 200)
    });
    Cycle::new(s.clone(), slurm.clone(), slurm.clone())
        .step()
        .unwrap();
    let kept = |s: &AppState| {
        let db = s.db();
        (
            db.interval_count().unwrap(),
            db.actions(None, 10).unwrap().len(),
            db.history(T0 - 60, T0 + 60).unwrap().0.len(),
        )
    };
    assert_eq!(kept(&s), (2, 1, 1));
    let held = |v: &Value| v["cycle"]["pruning_held"].as_str().map(str::to_string);
    // The service restarts on a host whose clock is 400 days ahead.
    drop((s, r));
    let ahead = T0 + 400 * 86_400;
    let (s, clock) = state_on(&path, extra, ahead);
    let r = compass_budget::api::router(s.clone());
    let mut cycle = Cycle::new(s.clone(), slurm.clone(), slurm.clone());
    for k in 0..3 {
        clock.set(ahead + 3600 * k);
        cycle.step().unwrap();
    }
    assert_eq!(kept(&s), (2, 1, 1), "nothing pruned");
    let (_, v) = call(&r, "GET", "/healthz", None, None).await;
    let why = held(&v).unwrap_or_else(|| panic!("{v}"));
    assert!(why.contains("past the service's last cycle"), "{why}");
    // The clock is corrected: pruning resumes, from the right time
    // (nothing is old enough).
    clock.set(T0 + 20);
    cycle.step().unwrap();
    let (_, v) = call(&r, "GET", "/healthz", None, None).await;
    assert_eq!(held(&v), None, "{v}");
    assert_eq!(kept(&s), (2, 1, 1));
    // The same step while the service runs.
    clock.set(T0 + 20 + 400 * 86_400);
    cycle.step().unwrap();
    clock.set(T0 + 20 + 400 * 86_400 + 3600);
    cycle.step().unwrap();
    assert_eq!(kept(&s), (2, 1, 1), "nothing pruned");
    let (_, v) = call(&r, "GET", "/healthz", None, None).await;
    assert!(held(&v).is_some(), "{v}");
    clock.set(T0 + 40);
    cycle.step().unwrap();
    let (_, v) = call(&r, "GET", "/healthz", None, None).await;
    assert_eq!(held(&v), None, "{v}");
    assert_eq!(kept(&s), (2, 1, 1));
    drop((s, r));
    let _ = std::fs::remove_dir_all(dir);
}

/// Times with non-ASCII bytes (`+0é00`: slicing the offset by byte
/// panicked, a 500 even from `/api/v1/history`, which needs no login) and
/// years whose seconds overflow (a panic in a debug build) are a 400
/// naming the parameter.
#[tokio::test]
async fn times_with_non_ascii_bytes_or_huge_years_are_400() {
    let (_s, _c, r) = seeded().await;
    let huge = format!("{}-01-01T00:00:00Z", "1".repeat(33));
    let cases: Vec<(String, &str)> = vec![
        ("from=2026-01-01T00:00:00%2B0%C3%A900".into(), "from"),
        ("to=2026-01-01T00:00:00%2B%C3%A9:00".into(), "to"),
        ("from=2026-01-01T00:00:0%C3%A9Z".into(), "from"),
        ("from=%F0%9F%98%80-01-01T00:00:00Z".into(), "from"),
        (format!("from={huge}"), "from"),
        (format!("to={}", huge.replace('1', "9")), "to"),
    ];
    for path in ["/api/v1/history", "/api/v1/tree", "/api/v1/usage"] {
        for (q, field) in &cases {
            let (st, v) = call(&r, "GET", &format!("{path}?{q}"), None, None).await;
            assert_eq!(
                (st, v["field"].as_str()),
                (StatusCode::BAD_REQUEST, Some(*field)),
                "{path}?{q}: {v}"
            );
        }
    }
}

/// The 409 of `DELETE` for an account with pending jobs holds for every
/// edit that leaves the account mapped to no leaf: `PATCH` with
/// `account: ""` or another account, an import that drops or unmaps it,
/// dry runs included. Before, only `DELETE` checked. Moving the account
/// to another leaf in one import is fine, and so is unmapping it once no
/// job of it waits.
#[tokio::test]
async fn unmapping_an_account_with_pending_jobs_is_409_by_any_edit() {
    let (dir, _path, s, _clock, r) = on_a_file_with("unmap", "");
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(tree_doc())).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let slurm = Arc::new(FakeSlurm::new());
    slurm.put(sjob(1, "acct-b", 1, 600, 0, T0 - 50));
    let mut cycle = Cycle::new(s.clone(), slurm.clone(), slurm.clone());
    cycle.step().unwrap();
    let before = s.db().load_specs().unwrap();
    let n_audit = audit_len(&r).await;
    let nodes_without = |f: &dyn Fn(&mut Value) -> bool| {
        let mut doc = tree_doc();
        let nodes = doc["nodes"].as_array_mut().unwrap();
        nodes.retain_mut(|n| f(n));
        doc
    };
    let unmapped = nodes_without(&|n| {
        if n["name"] == "team-b" {
            n.as_object_mut().unwrap().remove("account");
        }
        true
    });
    let dropped = nodes_without(&|n| n["name"] != "team-b");
    let mut dropped_dry = dropped.clone();
    dropped_dry["dry_run"] = json!(true);
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "PATCH",
            "/api/v1/teams/team-b",
            json!({"account": "", "why": "x"}),
        ),
        (
            "PATCH",
            "/api/v1/teams/team-b",
            json!({"account": "acct-z", "why": "x"}),
        ),
        (
            "PATCH",
            "/api/v1/teams/team-b",
            json!({"account": "", "why": "x", "dry_run": true}),
        ),
        ("DELETE", "/api/v1/teams/team-b", json!({"why": "x"})),
        ("POST", "/api/v1/import", unmapped),
        ("POST", "/api/v1/import", dropped),
        ("POST", "/api/v1/import", dropped_dry),
    ];
    for (m, p, body) in &cases {
        let (st, v) = call(&r, m, p, Some("root"), j(body.clone())).await;
        assert_eq!(st, StatusCode::CONFLICT, "{m} {p} {body}: {v}");
        let e = v["error"].as_str().unwrap();
        assert!(
            e.contains("`acct-b`") && e.contains("1 pending jobs"),
            "{e}"
        );
    }
    assert_eq!(s.db().load_specs().unwrap(), before);
    assert_eq!(audit_len(&r).await, n_audit);
    // The account moved to another leaf in one edit stays mapped.
    let mut swap = tree_doc();
    for n in swap["nodes"].as_array_mut().unwrap() {
        if n["name"] == "team-a" {
            n["account"] = json!("acct-b");
        } else if n["name"] == "team-b" {
            n["account"] = json!("acct-a");
        }
    }
    let (st, v) = call(&r, "POST", "/api/v1/import", Some("root"), j(swap)).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    // Once no job of it waits, it may be unmapped.
    slurm.purge(JobId(1));
    cycle.step().unwrap();
    let (st, v) = call(
        &r,
        "PATCH",
        "/api/v1/teams/team-a",
        Some("root"),
        j(json!({"account": "", "why": "x"})),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    drop((s, r));
    let _ = std::fs::remove_dir_all(dir);
}

/// A body without `why` is malformed (400, as the API documents); an empty
/// or blank `why` breaks the rule that every edit has a reason (422).
#[tokio::test]
async fn an_edit_without_why_is_400_and_a_blank_why_422() {
    let (s, _c, r) = seeded().await;
    let before = s.db().load_specs().unwrap();
    for (body, want) in [
        (json!({"share": 0.1}), StatusCode::BAD_REQUEST),
        (
            json!({"share": 0.1, "why": " "}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (st, v) = call(
            &r,
            "PATCH",
            "/api/v1/teams/team-b",
            Some("root"),
            j(body.clone()),
        )
        .await;
        assert_eq!(st, want, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains("why"), "{v}");
    }
    assert_eq!(s.db().load_specs().unwrap(), before);
}
