//! Property-based fuzzing of untrusted inputs: budgets TOML import and the
//! JSON bodies and query strings of the API. Nothing may panic; bad input is
//! always a 4xx with a JSON error and changes nothing; good input a 2xx.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use compass_budget::auth::Authenticator;
use compass_budget::cli::{budgets_to_toml, parse_budgets_toml};
use compass_budget::config::Config;
use compass_budget::db::Db;
use compass_budget::state::{AppState, TestClock};
use compass_budget::{BudgetError, Result};
use compass_core::fairshare::{NodeSpec, OrgTree};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

struct NameAuth;

impl Authenticator for NameAuth {
    fn authenticate(&self, credential: &str, _payload: &[u8]) -> Result<String> {
        if credential.is_empty() {
            return Err(BudgetError::Unauthenticated("empty".into()));
        }
        Ok(credential.to_string())
    }
}

fn state() -> Arc<AppState> {
    let config = Config::parse(
        "db = \":memory:\"\nadmins = [\"root\"]\ncapacity_gpus = 16\n",
        "fuzz",
    )
    .unwrap();
    let state = AppState::new(
        config,
        Db::open_in_memory().unwrap(),
        Arc::new(NameAuth),
        Arc::new(TestClock::new(1_800_000_000)),
    );
    let base = vec![
        NodeSpec {
            name: "org".into(),
            parent: None,
            share: 1.0,
            managers: vec!["boss".into()],
            account: None,
        },
        NodeSpec {
            name: "a".into(),
            parent: Some("org".into()),
            share: 0.5,
            managers: vec![],
            account: Some("acct-a".into()),
        },
        NodeSpec {
            name: "b".into(),
            parent: Some("org".into()),
            share: 0.5,
            managers: vec![],
            account: Some("acct-b".into()),
        },
    ];
    state
        .db()
        .edit_tree("root", "import", "seed", 1, |_| Ok(base.clone()))
        .unwrap();
    state
}

fn call(
    router: &axum::Router,
    method: &str,
    path: &str,
    user: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("Authorization", format!("MUNGE {user}"))
            .body(Body::from(body))
            .unwrap();
        let resp = router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    })
}

/// Plausible-but-hostile JSON values.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        prop::num::f64::ANY
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop_oneof![
            Just("org".to_string()),
            Just("a".to_string()),
            Just("".to_string()),
            "\\PC{0,12}"
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_string()),
                    Just("parent".to_string()),
                    Just("share".to_string()),
                    Just("account".to_string()),
                    Just("managers".to_string()),
                    Just("why".to_string()),
                    Just("nodes".to_string()),
                    Just("dry_run".to_string()),
                    Just("intervals".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// ISO 8601-like times with hostile parts: years of any length (past
/// what i128 seconds hold), fields and offsets of arbitrary characters,
/// non-ASCII bytes among the digits of an offset (`+0é00`). Most fields
/// are valid, so that the parts after them are reached.
fn arb_time() -> impl Strategy<Value = String> {
    let any = || "\\PC{1,2}";
    let year = prop_oneof![3 => "[0-9]{4}", 3 => "[1-9][0-9]{4,44}", 1 => "\\PC{0,4}"];
    let month = prop_oneof![8 => "0[1-9]|1[0-2]", 1 => any()];
    let day = prop_oneof![8 => "0[1-9]|1[0-9]|2[0-8]", 1 => any()];
    let hour = prop_oneof![8 => "[01][0-9]|2[0-3]", 1 => any()];
    let sixty = || prop_oneof![8 => "[0-5][0-9]", 1 => any()];
    let zone = prop_oneof![
        Just("Z".to_string()),
        "[+-]([01][0-9]|2[0-3]):[0-5][0-9]",
        "[+-][0-9é]{2}[:é][0-9é]{1,2}",
        "[+-][0-9é:ü€😀]{2,5}",
        "\\PC{0,6}",
    ];
    (year, month, day, hour, sixty(), sixty(), zone)
        .prop_map(|(y, mo, d, h, mi, se, z)| format!("{y}-{mo}-{d}T{h}:{mi}:{se}{z}"))
}

/// Every byte of `s` percent-encoded: a query carries any UTF-8.
fn percent_encoded(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

const WRITES: &[(&str, &str)] = &[
    ("POST", "/api/v1/nodes"),
    ("PATCH", "/api/v1/nodes/a"),
    ("DELETE", "/api/v1/nodes/b"),
    ("POST", "/api/v1/import"),
    ("POST", "/api/v1/ledger"),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// Arbitrary text as a budgets file: an error or a tree, never a panic;
    /// whatever parses and validates survives an export/import round trip.
    #[test]
    fn toml_import_never_panics(text in "\\PC{0,200}") {
        if let Ok(doc) = parse_budgets_toml(&text) {
            if let Ok(tree) = OrgTree::build(&doc.nodes) {
                let again = parse_budgets_toml(&budgets_to_toml(&tree.to_specs()).unwrap()).unwrap();
                prop_assert_eq!(again.nodes, tree.to_specs());
            }
        }
    }

    /// Structured TOML trees with random shares, parents and accounts.
    #[test]
    fn toml_trees_validate_or_refuse(nodes in prop::collection::vec(
        ("[a-d]", prop::option::of("[a-d]"), -0.5f64..1.5, prop::option::of("[x-z]")), 0..8)) {
        let mut text = String::new();
        for (name, parent, share, account) in &nodes {
            text.push_str(&format!("[[node]]\nname = \"{name}\"\nshare = {share}\n"));
            if let Some(p) = parent { text.push_str(&format!("parent = \"{p}\"\n")); }
            if let Some(a) = account { text.push_str(&format!("account = \"{a}\"\n")); }
        }
        let doc = parse_budgets_toml(&text).unwrap();
        match OrgTree::build(&doc.nodes) {
            Ok(t) => {
                for n in t.nodes() {
                    prop_assert!((0.0..=1.0).contains(&n.abs_share));
                    let kids: f64 = n.children.iter().map(|c| t.node(*c).share).sum();
                    prop_assert!(kids <= 1.0 + 1e-9);
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// Random bytes and random JSON to every write endpoint, as an admin and
    /// as a nobody: never a 5xx; a refusal leaves the tree as it was.
    #[test]
    fn json_writes_never_panic_or_5xx(
        which in 0..WRITES.len(),
        admin in any::<bool>(),
        body in prop_oneof![arb_json().prop_map(|v| serde_json::to_vec(&v).unwrap()), prop::collection::vec(any::<u8>(), 0..64)],
    ) {
        let state = state();
        let router = compass_budget::api::router(state.clone());
        let before = state.db().load_specs().unwrap();
        let (m, p) = WRITES[which];
        let (st, v) = call(&router, m, p, if admin { "root" } else { "nobody" }, body);
        prop_assert!(!st.is_server_error(), "{m} {p} -> {st} {v}");
        if !st.is_success() {
            prop_assert!(st.is_client_error());
            prop_assert!(v["error"].is_string(), "{v}");
            prop_assert_eq!(state.db().load_specs().unwrap(), before);
        }
        if !admin {
            prop_assert!(!st.is_success() || p == "/api/v1/import", "nobody manages nothing: {m} {p} -> {st}");
        }
        // Whatever happened, the stored tree is still valid.
        let specs = state.db().load_specs().unwrap();
        prop_assert!(specs.is_empty() || OrgTree::build(&specs).is_ok());
    }

    /// Random whole trees imported by an admin: applied exactly when the core
    /// accepts them (accounts may move between nodes), refused with a 4xx
    /// otherwise; never a 5xx.
    #[test]
    fn imports_apply_iff_the_tree_is_valid(nodes in prop::collection::vec(
        ("[a-e]", prop::option::of("[a-e]|org"), 0.0f64..0.7, prop::option::of("acct-[a-c]")), 0..7)) {
        let state = state();
        let router = compass_budget::api::router(state.clone());
        let mut specs = vec![NodeSpec { name: "org".into(), parent: None, share: 1.0, managers: vec![], account: None }];
        for (name, parent, share, account) in nodes {
            specs.push(NodeSpec { name, parent: Some(parent.unwrap_or_else(|| "org".into())), share, managers: vec![], account });
        }
        let valid = OrgTree::build(&specs).is_ok();
        let body = serde_json::to_vec(&json!({ "nodes": specs, "why": "fuzz" })).unwrap();
        let (st, v) = call(&router, "POST", "/api/v1/import", "root", body);
        prop_assert!(!st.is_server_error(), "{st} {v}");
        prop_assert_eq!(st.is_success(), valid, "{} {}", st, v);
        if valid {
            let stored = OrgTree::build(&state.db().load_specs().unwrap()).unwrap();
            prop_assert_eq!(stored.to_specs(), OrgTree::build(&specs).unwrap().to_specs());
        }
    }

    /// Random query strings on the read endpoints.
    /// Query windows anywhere in i64, edges included (issue 11): 200 with
    /// the window asked for, or 400 naming the parameter; never a panic,
    /// a 5xx or an overflowed window.
    #[test]
    fn window_queries_are_200_or_400(
        from in prop_oneof![any::<i64>(), Just(i64::MIN), Just(i64::MAX), Just(0i64), 1_700_000_000i64..1_800_000_000],
        to in prop_oneof![any::<i64>(), Just(i64::MIN), Just(i64::MAX), Just(253_402_300_799i64), 1_700_000_000i64..1_900_000_000],
        window in prop_oneof![any::<i64>(), Just(i64::MIN), Just(i64::MAX), 1i64..10_000_000],
        shape in 0u8..4,
    ) {
        let state = state();
        let router = compass_budget::api::router(state);
        let q = match shape {
            0 => format!("from={from}&to={to}"),
            1 => format!("to={to}&window_s={window}"),
            2 => format!("from={from}"),
            _ => format!("window_s={window}"),
        };
        for p in ["/api/v1/tree", "/api/v1/usage"] {
            let (st, v) = call(&router, "GET", &format!("{p}?{q}"), "x", Vec::new());
            prop_assert!(st == StatusCode::OK || st == StatusCode::BAD_REQUEST, "{p}?{q} -> {st} {v}");
            if st == StatusCode::OK {
                let time = |k: &str| compass_budget::localtime::from_json(&v[k]).unwrap();
                let (f, t) = (time("from"), time("to"));
                prop_assert!(0 <= f && f < t && t <= 253_402_300_799, "{p}?{q}: {f}..{t}");
            } else {
                prop_assert!(v["field"].is_string(), "{p}?{q}: {v}");
            }
        }
    }

    /// Window times as ISO 8601 with any characters (issue: a multi-byte
    /// character in the offset panicked, a year of 33 digits overflowed in
    /// a debug build): 200, or 400 naming the parameter; never a panic or
    /// a 5xx, on every endpoint that reads a window.
    #[test]
    fn iso_times_of_any_characters_are_200_or_400(time in arb_time(), to in any::<bool>()) {
        let state = state();
        let router = compass_budget::api::router(state);
        let key = if to { "to" } else { "from" };
        let q = format!("{key}={}", percent_encoded(&time));
        for p in ["/api/v1/history", "/api/v1/tree", "/api/v1/usage"] {
            let (st, v) = call(&router, "GET", &format!("{p}?{q}"), "x", Vec::new());
            prop_assert!(st == StatusCode::OK || st == StatusCode::BAD_REQUEST, "{p}?{q} ({time:?}) -> {st} {v}");
            if st == StatusCode::BAD_REQUEST {
                prop_assert!(v["field"].is_string(), "{p}?{q}: {v}");
            }
        }
    }

    #[test]
    fn queries_never_panic(q in "[a-z_=&0-9%-]{0,40}") {
        let state = state();
        let router = compass_budget::api::router(state);
        for p in ["/api/v1/tree", "/api/v1/usage", "/api/v1/reports/owed", "/api/v1/audit"] {
            let (st, _) = call(&router, "GET", &format!("{p}?{q}"), "x", Vec::new());
            prop_assert!(!st.is_server_error(), "{p}?{q} -> {st}");
        }
    }
}
