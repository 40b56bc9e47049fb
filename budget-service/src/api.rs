//! The REST API (axum): tree and budgets, usage and ratios over any window,
//! the queue with reasons, reports, audit, ledger ingest, OpenAPI, metrics,
//! health. Every write is authenticated (see [`crate::auth`]) and authorised;
//! every refusal is a 4xx JSON body `{"error": ..., "field": ...}` and changes
//! nothing.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, OriginalUri, Path, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use compass_core::duration;
use compass_core::fairshare::{self, Interval, NodeSpec, OrgTree, Placed, TreeChange};
use compass_core::model::JobId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::auth::{request_payload, Policy, SCHEME};
use crate::error::BudgetError;
use crate::localtime;
use crate::privacy::{PrivateData, UsageScope, Viewer};
use crate::state::AppState;

/// The OpenAPI document served at `/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// An error as the API returns it.
pub struct ApiError(pub BudgetError);

impl From<BudgetError> for ApiError {
    fn from(e: BudgetError) -> Self {
        ApiError(e)
    }
}
impl From<compass_core::CoreError> for ApiError {
    fn from(e: compass_core::CoreError) -> Self {
        ApiError(e.into())
    }
}

impl ApiError {
    fn status_and_field(&self) -> (StatusCode, Option<String>) {
        use compass_core::CoreError;
        match &self.0 {
            BudgetError::Field { field, .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, Some(field.clone()))
            }
            BudgetError::Core(CoreError::Budget { field, .. }) => {
                (StatusCode::UNPROCESSABLE_ENTITY, Some(field.clone()))
            }
            BudgetError::Core(CoreError::UnknownAccount(_)) => {
                (StatusCode::UNPROCESSABLE_ENTITY, Some("account".into()))
            }
            BudgetError::Core(_) => (StatusCode::UNPROCESSABLE_ENTITY, None),
            BudgetError::Malformed { field, .. } => (StatusCode::BAD_REQUEST, field.clone()),
            BudgetError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, Some("body".into())),
            BudgetError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, None),
            BudgetError::Forbidden { .. } => (StatusCode::FORBIDDEN, None),
            BudgetError::NotFound(_) => (StatusCode::NOT_FOUND, None),
            BudgetError::Conflict(_) | BudgetError::InvalidStoredTree(_) => {
                (StatusCode::CONFLICT, None)
            }
            BudgetError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, None),
            BudgetError::Db(e) if crate::db::storage_failed(e) => {
                (StatusCode::SERVICE_UNAVAILABLE, None)
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, None),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, field) = self.status_and_field();
        if status.is_server_error() {
            tracing::error!(error = %self.0, "request failed");
        }
        (
            status,
            Json(json!({ "error": self.0.to_string(), "field": field })),
        )
            .into_response()
    }
}

type ApiResult<T> = std::result::Result<T, ApiError>;

/// Keys whose numbers are times (Unix seconds inside the service).
pub const TIME_KEYS: &[&str] = &[
    "at",
    "from",
    "to",
    "start",
    "end",
    "since",
    "submit",
    "run_start",
    "last_ok",
    "now",
];

/// The API's time convention (OpenAPI `info.version` 2): every time in a
/// response is an ISO 8601 local date-time with its offset
/// (`2026-12-01T03:10:00+00:00`, [`localtime::iso`]); durations stay
/// numbers of seconds in keys ending in `_s`. Rewrites the numbers under
/// [`TIME_KEYS`] at any depth; `null` stays `null`.
pub fn iso_times(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match x.as_i64() {
                    Some(t) if TIME_KEYS.contains(&k.as_str()) => {
                        *x = Value::String(localtime::iso(t))
                    }
                    _ => iso_times(x),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(iso_times),
        _ => {}
    }
}

/// A JSON response body in the API's conventions ([`iso_times`]).
pub fn api_json<T: Serialize>(body: T) -> Json<serde_json::Value> {
    let mut v = serde_json::to_value(body).unwrap_or_else(|e| json!({ "error": e.to_string() }));
    iso_times(&mut v);
    Json(v)
}

/// Builds the router.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .route("/", get(crate::dashboard::page))
        .route("/dashboard.js", get(crate::dashboard::script))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/api/v1/tree", get(get_tree))
        .route("/api/v1/usage", get(get_usage))
        // Teams and groups of the budget tree. `/api/v1/nodes` is the same
        // resource under its first name (kept so older clients work): "node"
        // means a host to every Slurm user.
        .route("/api/v1/teams", post(create_node))
        .route(
            "/api/v1/teams/{name}",
            get(get_node).patch(patch_node).delete(delete_node),
        )
        .route("/api/v1/nodes", post(create_node))
        .route(
            "/api/v1/nodes/{name}",
            get(get_node).patch(patch_node).delete(delete_node),
        )
        .route("/api/v1/export", get(export))
        .route("/api/v1/import", post(import))
        .route("/api/v1/queue", get(get_queue))
        .route("/api/v1/queue/{job}", get(get_why))
        .route("/api/v1/jobs", get(get_user_jobs))
        .route("/api/v1/reports/owed", get(owed))
        .route("/api/v1/audit", get(audit))
        .route("/api/v1/ledger", post(ingest))
        .route("/api/v1/actions", get(get_actions))
        .route("/api/v1/history", get(get_history))
        .route("/api/v1/hosts", get(get_hosts))
        .route("/api/v1/hosts/{node}/fault", post(host_fault))
        .route("/api/v1/hosts/{node}/repaired", post(host_repaired))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            request_timeout,
        ))
        .with_state(state)
}

/// Every request answers within `request_timeout_s`: past it, 503. The
/// handlers do their blocking work off the runtime ([`blocking`]), so the
/// runtime's threads stay free to time requests out and to serve the rest.
async fn request_timeout(
    State(state): State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let limit = state.config.request_timeout();
    let what = format!("{} {}", req.method(), req.uri().path());
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            tracing::warn!(request = %what, timeout_s = limit.as_secs_f64(), "request timed out");
            ApiError(timed_out(&what, limit)).into_response()
        }
    }
}

/// Runs `f` (MUNGE decoding, `getpwuid_r`, SQLite, Slurm actions) on tokio's
/// blocking pool, never on the runtime's two worker threads, and bounds the
/// wait by `request_timeout_s`. At most [`crate::state::BLOCKING_SLOTS`]
/// requests run blocking work at once; past that, 503 at once.
pub async fn blocking<T, F>(state: &Arc<AppState>, f: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&AppState) -> Result<T, BudgetError> + Send + 'static,
{
    let permit = state
        .blocking_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            BudgetError::Unavailable(format!(
                "{} requests are already waiting on munged, SQLite or slurmctld; retry later",
                crate::state::BLOCKING_SLOTS
            ))
        })?;
    let st = state.clone();
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        st.db().check_file()?;
        f(&st)
    });
    let limit = state.config.request_timeout();
    match tokio::time::timeout(limit, task).await {
        Ok(Ok(r)) => r.map_err(ApiError),
        Ok(Err(e)) => Err(BudgetError::Http(format!("request task failed: {e}")).into()),
        Err(_) => Err(timed_out("the request", limit).into()),
    }
}

/// The 503 of a request that ran past `request_timeout_s`.
fn timed_out(what: &str, limit: std::time::Duration) -> BudgetError {
    BudgetError::Unavailable(format!(
        "{what} did not finish within {} s (request_timeout_s); a dependency \
         (munged, SQLite, slurmctld) is slow or stuck. A write may still complete: \
         read back before retrying",
        limit.as_secs_f64()
    ))
}

/// A write request as received: authenticated and parsed later, off the
/// runtime (`Write::authenticate` inside [`blocking`]).
pub struct Write {
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
}

impl axum::extract::FromRequest<Arc<AppState>> for Write {
    type Rejection = ApiError;

    async fn from_request(
        req: axum::extract::Request,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        use axum::extract::FromRequestParts;
        let (mut parts, body) = req.into_parts();
        let uri = OriginalUri::from_request_parts(&mut parts, state)
            .await
            .unwrap_or_else(|e| match e {});
        let (method, headers) = (parts.method.clone(), parts.headers.clone());
        let req = axum::extract::Request::from_parts(parts, body);
        let body =
            <Bytes as axum::extract::FromRequest<Arc<AppState>>>::from_request(req, state).await;
        Ok(Write {
            method,
            uri,
            headers,
            body,
        })
    }
}

impl Write {
    /// Authenticates (MUNGE, blocking) and parses the body: `(user, body)`.
    fn authenticate<T: DeserializeOwned>(
        self,
        state: &AppState,
    ) -> Result<(String, T), BudgetError> {
        authenticate(state, &self.method, &self.uri, &self.headers, self.body)
    }
}

/// Parses a JSON body, naming the offending field on error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BudgetError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        BudgetError::Malformed {
            field: (path != ".").then_some(path),
            why: e.inner().to_string(),
        }
    })
}

/// Authenticates a write and parses its body: `(user, body)`.
fn authenticate<T: DeserializeOwned>(
    state: &AppState,
    method: &Method,
    uri: &OriginalUri,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(String, T), BudgetError> {
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            BudgetError::TooLarge {
                limit: state.config.max_body_bytes,
            }
        } else {
            BudgetError::Malformed {
                field: Some("body".into()),
                why: r.body_text(),
            }
        }
    })?;
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| BudgetError::Unauthenticated(format!("writes need an `Authorization: {SCHEME} <credential>` header (use the `compass budget` CLI)")))?;
    let cred = credential(auth)?;
    let pq = uri.0.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let user = state
        .auth
        .authenticate(cred, &request_payload(method.as_str(), pq, &body))?;
    let parsed = parse_json(&body)?;
    Ok((user, parsed))
}

/// The credential of an `Authorization: MUNGE <credential>` header value.
fn credential(auth: &str) -> Result<&str, BudgetError> {
    auth.strip_prefix(SCHEME)
        .and_then(|c| c.strip_prefix(' '))
        .ok_or_else(|| {
            BudgetError::Unauthenticated(format!(
                "unsupported authorization scheme; expected `{SCHEME}`"
            ))
        })
}

/// A read request's identity, resolved off the runtime ([`viewer_of`]):
/// a MUNGE credential bound to the request (as for writes, with an empty
/// body), else a trusted reverse proxy's identity header, else anonymous.
pub struct Reader {
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    peer: Option<std::net::SocketAddr>,
}

impl axum::extract::FromRequestParts<Arc<AppState>> for Reader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let uri = (parts.extensions.get::<OriginalUri>().cloned())
            .unwrap_or_else(|| OriginalUri(parts.uri.clone()));
        let peer = (parts.extensions)
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0);
        Ok(Reader {
            method: parts.method.clone(),
            uri,
            headers: parts.headers.clone(),
            peer,
        })
    }
}

impl Reader {
    /// Who reads (blocking: a credential is decoded through munged).
    fn viewer(&self, state: &AppState) -> Result<Viewer, BudgetError> {
        let policy = state.read_policy();
        let user = match self.headers.get(header::AUTHORIZATION) {
            Some(v) => {
                let auth = v.to_str().map_err(|_| {
                    BudgetError::Unauthenticated("the Authorization header is not text".into())
                })?;
                let pq = (self.uri.0.path_and_query()).map_or("/", |p| p.as_str());
                let payload = request_payload(self.method.as_str(), pq, b"");
                Some(state.auth.authenticate(credential(auth)?, &payload)?)
            }
            None => crate::privacy::proxy_user(&state.config, self.peer, &self.headers),
        };
        let all = (user.as_deref()).is_some_and(|u| policy.sees_all(&state.config, u));
        Ok(Viewer {
            user,
            all,
            private: policy.private,
        })
    }
}

/// The viewer of a read: everyone sees everything while nothing is private
/// (no MUNGE round trip); else `Reader::viewer` off the runtime.
pub async fn viewer_of(state: &Arc<AppState>, reader: Reader) -> ApiResult<Viewer> {
    if state.read_policy().private == PrivateData::default() {
        return Ok(Viewer::everything());
    }
    blocking(state, move |st| reader.viewer(st)).await
}

/// The owner of a pending (last order) or running (last snapshot) job, or
/// of an ended one (the ledger's `user`, schema 5; `None` for runs recorded
/// before it, which only admins and operators see).
pub fn job_owner(state: &AppState, q: &crate::state::QueueView, job: u64) -> Option<String> {
    (q.users.get(&JobId(job)).cloned())
        .or_else(|| state.running_job(job).map(|j| j.user))
        .or_else(|| state.db().job_user(JobId(job)).ok().flatten())
}

/// The actions `viewer` may see: with `PrivateData=jobs`, those whose
/// victim or requester was theirs when the action was taken (its recorded
/// owners, schema 8: slurmctld reuses job ids, and a reused id's new owner
/// saw the old job's actions; issue #11), and those on no job (node
/// drains). An action logged before schema 8 has no owners recorded: the
/// job id's owner today decides, as before.
pub fn visible_actions(
    state: &AppState,
    viewer: &Viewer,
    rows: Vec<crate::db::ActionRow>,
) -> Vec<crate::db::ActionRow> {
    if viewer.sees_job(None) {
        return rows;
    }
    let q = state.queue();
    let sees = |j: Option<u64>, owner: &Option<String>| match (j, owner) {
        (None, _) => false,
        (Some(_), Some(owner)) => viewer.sees_job(Some(owner)),
        (Some(j), None) => viewer.sees_job(job_owner(state, &q, j).as_deref()),
    };
    rows.into_iter()
        .filter(|a| {
            (a.job.is_none() && a.cause_job.is_none())
                || sees(a.job, &a.user)
                || sees(a.cause_job, &a.cause_user)
        })
        .collect()
}

/// Whose per-team usage `viewer` may see: all teams' unless
/// `PrivateData=usage` applies to them; then the teams they manage and the
/// teams of the accounts they have jobs under (pending, running, or ended
/// in the ledger), none for an anonymous reader ([`UsageScope::of_user`]).
pub fn usage_scope(state: &AppState, viewer: &Viewer) -> Result<UsageScope, BudgetError> {
    if viewer.all || !viewer.private.usage {
        return Ok(UsageScope::All);
    }
    let Some(user) = viewer.user.as_deref() else {
        return Ok(UsageScope::Teams(Default::default()));
    };
    let Some(tree) = state.db().load_tree()? else {
        return Ok(UsageScope::Teams(Default::default()));
    };
    let mut accounts: BTreeSet<String> = (state.db().accounts_of_user(user)?).into_iter().collect();
    let q = state.queue();
    for p in &q.order {
        if q.users.get(&p.job.job).is_some_and(|u| u == user) {
            accounts.insert(p.job.account.to_ascii_lowercase());
        }
    }
    let seen = state.seen.lock().unwrap_or_else(|e| e.into_inner());
    for j in seen.running.values().filter(|j| j.user == user) {
        accounts.insert(j.account.to_ascii_lowercase());
    }
    drop(seen);
    Ok(UsageScope::of_user(&tree, user, &accounts))
}

/// A tree node's usage hidden (`PrivateData=usage`): its GPU-hours and
/// ratio are null, `usage_hidden` true.
pub fn hide_usage(scope: &UsageScope, nodes: Vec<crate::state::NodeView>) -> serde_json::Value {
    (nodes.into_iter())
        .map(|n| {
            let hidden = !scope.sees(&n.name);
            let mut v = serde_json::to_value(n).unwrap_or_default();
            if hidden {
                for k in ["charged_gpu_hours", "free_gpu_hours", "ratio"] {
                    v[k] = serde_json::Value::Null;
                }
                v["usage_hidden"] = json!(true);
            }
            v
        })
        .collect()
}

fn policy(state: &AppState) -> Policy<'_> {
    Policy {
        admins: &state.config.admins,
    }
}

/// The stored tree for the policy checks of an edit. When it fails
/// validation (a hand-edited database, or a rule added by an upgrade),
/// admins may still replace or edit it: they need no tree for their checks,
/// and the result must validate. Others are refused with how to repair it.
fn stored_tree(
    pol: &Policy<'_>,
    user: &str,
    specs: &[NodeSpec],
) -> Result<Option<OrgTree>, BudgetError> {
    match tree_of(specs) {
        Ok(t) => Ok(t),
        Err(e) if pol.is_admin(user) => {
            tracing::warn!(error = %e, user, "admin edit of an invalid stored tree");
            Ok(None)
        }
        Err(e) => Err(BudgetError::InvalidStoredTree(e.to_string())),
    }
}

fn tree_of(specs: &[NodeSpec]) -> Result<Option<OrgTree>, BudgetError> {
    if specs.is_empty() {
        Ok(None)
    } else {
        Ok(Some(OrgTree::build(specs)?))
    }
}

/// A whole-number query parameter; anything else is a 400 naming it.
fn query_i64(q: &HashMap<String, String>, key: &str) -> Result<Option<i64>, BudgetError> {
    match q.get(key) {
        None => Ok(None),
        Some(v) => v
            .parse::<i64>()
            .map(Some)
            .map_err(|_| BudgetError::Malformed {
                field: Some(key.to_string()),
                why: format!("`{v}` is not a whole number"),
            }),
    }
}

/// Latest time a query window may name: 9999-12-31T23:59:59Z.
pub const MAX_QUERY_TIME: i64 = 253_402_300_799;

fn bad_query(key: &str, why: String) -> BudgetError {
    BudgetError::Malformed {
        field: Some(key.to_string()),
        why,
    }
}

/// `from`/`to` (Unix seconds or ISO 8601 with offset, 0 to
/// [`MAX_QUERY_TIME`]) or `window_s`
/// ending now; default: the configured window ending now. Out-of-range
/// values are a 400 naming the parameter, never an overflow.
fn window(state: &AppState, q: &HashMap<String, String>) -> Result<(i64, i64), BudgetError> {
    // Unix seconds or an ISO 8601 date-time with offset (a `+` of the
    // offset arrives as a space when the client did not escape it).
    let time = |key: &str| -> Result<Option<i64>, BudgetError> {
        let t = match q.get(key) {
            None => None,
            Some(v) => Some(
                (v.parse::<i64>().ok())
                    .or_else(|| localtime::parse_iso(&v.replace(' ', "+")))
                    .ok_or_else(|| {
                        bad_query(
                            key,
                            format!(
                                "`{v}` is neither Unix seconds nor an ISO 8601 date-time with offset \
                                 (2026-12-01T03:10:00+00:00)"
                            ),
                        )
                    })?,
            ),
        };
        match t {
            Some(t) if !(0..=MAX_QUERY_TIME).contains(&t) => Err(bad_query(
                key,
                format!("{t} is outside 0..={MAX_QUERY_TIME} (Unix seconds, 1970 to 9999)"),
            )),
            t => Ok(t),
        }
    };
    let now = state.now();
    let to = time("to")?.unwrap_or(now);
    let from = match (time("from")?, query_i64(q, "window_s")?) {
        (Some(f), None) => f,
        (None, Some(w)) if w > 0 => to.checked_sub(w).filter(|f| *f >= 0).ok_or_else(|| {
            bad_query(
                "window_s",
                format!("{w} s before `to` ({to}) is before 1970"),
            )
        })?,
        (None, Some(_)) => return Err(bad_query("window_s", "must be positive".into())),
        // The default window, cut at 1970 (as `from` may not be earlier).
        (None, None) => to.saturating_sub(state.config.window_s).max(0),
        (Some(_), Some(_)) => {
            return Err(bad_query(
                "window_s",
                "give either `from` or `window_s`, not both".into(),
            ))
        }
    };
    if from >= to {
        return Err(bad_query(
            "from",
            format!("must be before `to` ({from} >= {to})"),
        ));
    }
    Ok((from, to))
}

/// A node name for `/hosts/{node}/fault|repaired`: one Slurm node, never a
/// host list or range (`n[1-64]`, `n1,n2`), which Slurm would expand.
fn check_node_name(node: &str) -> Result<(), BudgetError> {
    let ok = !node.is_empty()
        && node.len() <= 64
        && node
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(BudgetError::field(
            "node",
            format!(
                "`{node}` is not a single node name (letters, digits, `-`, `_`, `.`); \
                 host lists and ranges such as `n[1-64]` or `n1,n2` are refused: name one node per command"
            ),
        ))
    }
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    // Cheap: the schema version read (a full integrity check is O(size)),
    // off the runtime and bounded, outside the request slots: a stuck
    // SQLite makes this 503 `db-stalled`, never a hang.
    let st = state.clone();
    let check = tokio::task::spawn_blocking(move || {
        let db = st.db();
        db.check_file()?;
        // A write refused by the file system (read-only, full, immutable)
        // shows here too, not only at the next edit.
        db.write_check()
    });
    let limit = state.config.request_timeout().min(HEALTH_DB_WAIT);
    let (db_ok, status, db_error) = match tokio::time::timeout(limit, check).await {
        Ok(Ok(Ok(()))) => (true, "ok", None),
        Ok(Ok(Err(e))) => (false, "db-error", Some(e.to_string())),
        Ok(Err(e)) => (false, "db-error", Some(e.to_string())),
        Err(_) => (false, "db-stalled", None),
    };
    let st = state.status().clone();
    let code = if db_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        api_json(json!({ "status": status, "db_ok": db_ok, "db_error": db_error, "cycle": st })),
    )
        .into_response()
}

/// Longest wait of `/healthz` for the database.
const HEALTH_DB_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let out = crate::metrics::encode(state)?;
        Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], out).into_response())
    })
    .await
}

async fn get_tree(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult<Response> {
    let viewer = viewer_of(&state, reader).await?;
    blocking(&state, move |state| {
        let (from, to) = window(state, &q)?;
        let nodes = hide_usage(&usage_scope(state, &viewer)?, state.tree_view(from, to)?);
        Ok(api_json(
            json!({ "from": from, "to": to, "window_s": to - from, "capacity_gpus": state.capacity(),
                    "gpu_weights": state.config.gpu_weights, "nodes": nodes }),
        )
        .into_response())
    })
    .await
}

async fn get_usage(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult<Response> {
    let viewer = viewer_of(&state, reader).await?;
    blocking(&state, move |state| {
    let (from, to) = window(state, &q)?;
    let scope = usage_scope(state, &viewer)?;
    let Some((tree, usage, stats)) = state.stats(from, to)? else {
        return Ok(api_json(json!({ "from": from, "to": to, "nodes": [] })).into_response());
    };
    let nodes: Vec<usize> = match q.get("account").or(q.get("team")).or(q.get("node")) {
        Some(a) if q.contains_key("account") => {
            vec![tree.leaf_for_account(&a.to_ascii_lowercase())?]
        }
        Some(n) => vec![tree
            .find(n)
            .ok_or_else(|| BudgetError::field("node", format!("unknown team `{n}`")))?],
        None => tree.subtree(tree.root()),
    };
    // PrivateData=usage: only the teams the reader may see; a team asked
    // for by name that they may not see is refused.
    if let [ix] = nodes[..] {
        if (q.contains_key("account") || q.contains_key("team") || q.contains_key("node"))
            && !scope.sees(&tree.node(ix).name)
        {
            return Err(BudgetError::Forbidden {
                what: format!("user `{}` reading the usage of `{}`", viewer.name(), tree.node(ix).name),
                why: "PrivateData=usage: usage is shown to admins, operators, the team's managers and users of its account".into(),
            });
        }
    }
    let rows: Vec<_> = nodes
        .into_iter()
        .filter(|ix| scope.sees(&tree.node(*ix).name))
        .map(|ix| {
            let s = &stats[ix];
            json!({
                "node": tree.node(ix).name,
                "charged_gpu_hours": s.usage.charged_gpu_s / 3600.0,
                "free_gpu_hours": s.usage.free_gpu_s / 3600.0,
                "budget_gpu_hours": s.budget_gpu_s / 3600.0,
                "ratio": s.ratio.is_finite().then_some(s.ratio),
            })
        })
        .collect();
    let unb = fairshare::unbudgeted_usage(&tree, &usage);
    let unbudgeted = (scope == UsageScope::All).then(|| {
        json!({ "charged_gpu_hours": unb.charged_gpu_s / 3600.0, "free_gpu_hours": unb.free_gpu_s / 3600.0 })
    });
    Ok(api_json(json!({ "from": from, "to": to, "nodes": rows, "unbudgeted": unbudgeted }))
    .into_response())
    })
    .await
}

async fn get_node(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    reader: Reader,
) -> ApiResult<Response> {
    let viewer = viewer_of(&state, reader).await?;
    blocking(&state, move |state| {
        let now = state.now();
        let nodes = state.tree_view(now - state.config.window_s, now)?;
        let n = nodes
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| BudgetError::NotFound(format!("team `{name}`")))?;
        let n = hide_usage(&usage_scope(state, &viewer)?, vec![n]);
        Ok(api_json(&n[0]).into_response())
    })
    .await
}

/// Body of `POST /api/v1/nodes`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    parent: Option<String>,
    share: f64,
    #[serde(default)]
    account: Option<String>,
    #[serde(default)]
    managers: Vec<String>,
    why: String,
    /// Check and show the changes; write nothing.
    #[serde(default)]
    dry_run: bool,
}

fn changes_json(changes: &[TreeChange]) -> serde_json::Value {
    json!({ "changes": changes, "summary": changes.iter().map(|c| c.to_string()).collect::<Vec<_>>() })
}

/// The answer to an edit: the changes, and whether they were applied.
fn edit_json(changes: &[TreeChange], dry_run: bool) -> serde_json::Value {
    let mut v = changes_json(changes);
    v["applied"] = json!(!dry_run);
    v
}

async fn create_node(State(state): State<Arc<AppState>>, w: Write) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let (user, b): (String, CreateBody) = w.authenticate(state)?;
        let now = state.now();
        let pol = policy(state);
        let changes =
            state
                .db()
                .edit_tree_or_dry_run(&user, "create", &b.why, now, b.dry_run, |old| {
                    let tree = stored_tree(&pol, &user, old)?;
                    if old.iter().any(|s| s.name == b.name) {
                        return Err(BudgetError::Conflict(format!(
                            "team `{}` already exists",
                            b.name
                        )));
                    }
                    pol.check_place_under(&user, tree.as_ref(), b.parent.as_deref())?;
                    let mut v = old.to_vec();
                    v.push(NodeSpec {
                        name: b.name.clone(),
                        parent: b.parent.clone(),
                        share: b.share,
                        managers: b.managers.clone(),
                        account: b.account.clone(),
                    });
                    Ok(v)
                })?;
        let status = if b.dry_run {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        Ok((status, api_json(edit_json(&changes, b.dry_run))).into_response())
    })
    .await
}

/// Body of `PATCH /api/v1/nodes/{name}`: only the given fields change.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchBody {
    #[serde(default)]
    share: Option<f64>,
    #[serde(default)]
    parent: Option<String>,
    /// `""` removes the account.
    #[serde(default)]
    account: Option<String>,
    #[serde(default)]
    managers: Option<Vec<String>>,
    why: String,
    #[serde(default)]
    dry_run: bool,
}

async fn patch_node(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    w: Write,
) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let (user, b): (String, PatchBody) = w.authenticate(state)?;
        let now = state.now();
        let pol = policy(state);
        let pending = state.queue();
        let changes =
            state
                .db()
                .edit_tree_or_dry_run(&user, "update", &b.why, now, b.dry_run, |old| {
                    let tree = stored_tree(&pol, &user, old)?;
                    pol.check_edit(&user, tree.as_ref(), &name)?;
                    let mut v = old.to_vec();
                    let s = v
                        .iter_mut()
                        .find(|s| s.name == name)
                        .ok_or_else(|| BudgetError::NotFound(format!("team `{name}`")))?;
                    if let Some(sh) = b.share {
                        s.share = sh;
                    }
                    if let Some(p) = &b.parent {
                        if s.parent.as_deref() != Some(p.as_str()) {
                            pol.check_place_under(&user, tree.as_ref(), Some(p))?;
                            s.parent = Some(p.clone());
                        }
                    }
                    if let Some(a) = &b.account {
                        s.account = (!a.is_empty()).then(|| a.clone());
                    }
                    if let Some(m) = &b.managers {
                        s.managers = m.clone();
                    }
                    refuse_unmapping_pending(old, &v, &pending)?;
                    Ok(v)
                })?;
        Ok(api_json(edit_json(&changes, b.dry_run)).into_response())
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteBody {
    why: String,
    #[serde(default)]
    dry_run: bool,
}

async fn delete_node(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    w: Write,
) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let (user, b): (String, DeleteBody) = w.authenticate(state)?;
        let now = state.now();
        let pol = policy(state);
        let pending = state.queue();
        let changes =
            state
                .db()
                .edit_tree_or_dry_run(&user, "delete", &b.why, now, b.dry_run, |old| {
                    let tree = stored_tree(&pol, &user, old)?;
                    pol.check_edit(&user, tree.as_ref(), &name)?;
                    let kids: Vec<&str> = old
                        .iter()
                        .filter(|s| s.parent.as_deref() == Some(name.as_str()))
                        .map(|s| s.name.as_str())
                        .collect();
                    if !kids.is_empty() {
                        return Err(BudgetError::Conflict(format!(
                            "team `{name}` has children ({}); move or remove them first",
                            kids.join(", ")
                        )));
                    }
                    let new: Vec<NodeSpec> =
                        old.iter().filter(|s| s.name != name).cloned().collect();
                    refuse_unmapping_pending(old, &new, &pending)?;
                    Ok(new)
                })?;
        Ok(api_json(edit_json(&changes, b.dry_run)).into_response())
    })
    .await
}

/// Refuses (409) a tree edit that leaves an account with pending jobs (in
/// `pending`, the last computed order) mapped to no leaf: a leaf removed,
/// its account removed or replaced (`PATCH` with `account`), or an import
/// that drops or unmaps it. Its waiting jobs would fall out of their
/// team's budget. An account moved to another leaf in the same edit is
/// still mapped.
fn refuse_unmapping_pending(
    old: &[NodeSpec],
    new: &[NodeSpec],
    pending: &crate::state::QueueView,
) -> Result<(), BudgetError> {
    let kept: BTreeSet<String> = (new.iter())
        .filter_map(|s| s.account.as_deref())
        .map(str::to_ascii_lowercase)
        .collect();
    for s in old {
        let Some(acct) = s.account.as_deref().map(str::to_ascii_lowercase) else {
            continue;
        };
        if kept.contains(&acct) {
            continue;
        }
        let n = (pending.order.iter())
            .filter(|p| p.job.account.eq_ignore_ascii_case(&acct))
            .count();
        if n > 0 {
            return Err(BudgetError::Conflict(format!(
                "account `{acct}` of team `{}` has {n} pending jobs; map the account to another leaf first",
                s.name
            )));
        }
    }
    Ok(())
}

/// The whole tree as node specs (for TOML export).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TreeDoc {
    pub nodes: Vec<NodeSpec>,
}

async fn export(State(state): State<Arc<AppState>>) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let specs = match state.db().load_tree()? {
            Some(t) => t.to_specs(),
            None => Vec::new(),
        };
        Ok(api_json(TreeDoc { nodes: specs }).into_response())
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportBody {
    nodes: Vec<NodeSpec>,
    why: String,
    #[serde(default)]
    dry_run: bool,
}

async fn import(State(state): State<Arc<AppState>>, w: Write) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let (user, mut b): (String, ImportBody) = w.authenticate(state)?;
        crate::db::lowercase_accounts(&mut b.nodes);
        let pol = policy(state);
        if b.nodes.is_empty() {
            return Err(BudgetError::field(
                "nodes",
                "an import needs at least the root node",
            ));
        }
        OrgTree::build(&b.nodes)?;
        let pending = state.queue();
        if b.dry_run {
            let old = state.db().load_specs()?;
            let changes = fairshare::diff(&old, &b.nodes);
            pol.check_import(&user, stored_tree(&pol, &user, &old)?.as_ref(), &changes)?;
            refuse_unmapping_pending(&old, &b.nodes, &pending)?;
            let mut v = changes_json(&changes);
            v["applied"] = json!(false);
            return Ok(api_json(v).into_response());
        }
        let now = state.now();
        let changes = state.db().edit_tree(&user, "import", &b.why, now, |old| {
            let changes = fairshare::diff(old, &b.nodes);
            pol.check_import(&user, stored_tree(&pol, &user, old)?.as_ref(), &changes)?;
            refuse_unmapping_pending(old, &b.nodes, &pending)?;
            Ok(b.nodes.clone())
        })?;
        let mut v = changes_json(&changes);
        v["applied"] = json!(true);
        Ok(api_json(v).into_response())
    })
    .await
}

/// One queue row as the API shows it.
#[derive(Serialize)]
pub struct QueueRow {
    pub rank: usize,
    pub job: JobId,
    pub account: String,
    /// The job's owner (empty: the source does not say).
    pub user: String,
    pub team: Option<String>,
    pub kind: fairshare::Kind,
    pub gpus: u32,
    /// Mean `[gpu_weights]` weight of its GPUs: one hour of it costs
    /// `gpus x weight` weighted GPU-hours.
    pub weight: f64,
    pub priority: i64,
    /// The sort metric: the team's fair-share ratio (`None`: no budget).
    pub team_ratio: Option<f64>,
    pub site_factor: u32,
    pub why: String,
}

fn queue_row(p: &Placed, q: &crate::state::QueueView) -> QueueRow {
    let len = q.order.len();
    let weight = q.weights.get(&p.job.job).copied().unwrap_or(1.0);
    let mut why = fairshare::explain(p, len);
    if q.weighted || weight != 1.0 {
        why.push_str(&weight_text(p.job.gpus, weight, "If it runs, its"));
    }
    QueueRow {
        rank: p.rank,
        job: p.job.job,
        account: p.job.account.clone(),
        user: q.users.get(&p.job.job).cloned().unwrap_or_default(),
        team: p.team.clone(),
        kind: p.kind,
        gpus: p.job.gpus,
        weight,
        priority: p.job.priority,
        team_ratio: p.path.last().map(|l| l.ratio).filter(|r| r.is_finite()),
        site_factor: q.factors.get(&p.job.job).copied().unwrap_or(0),
        why,
    }
}

/// The `[gpu_weights]` line of `compass why`.
fn weight_text(gpus: u32, weight: f64, lead: &str) -> String {
    format!(
        "{lead} GPUs are charged at weight {weight:.2} each ([gpu_weights]): one hour costs its budget {:.2} weighted GPU-hours.\n",
        f64::from(gpus) * weight
    )
}

/// Default page size of `GET /api/v1/queue`.
pub const QUEUE_PAGE_DEFAULT: usize = 100;
/// Largest page `GET /api/v1/queue` returns, whatever `limit` asks for.
pub const QUEUE_PAGE_MAX: usize = 1000;

/// A page of the queue: `offset` and `limit` from the query, checked.
fn queue_page(params: &HashMap<String, String>) -> Result<(usize, usize), BudgetError> {
    let limit = match query_i64(params, "limit")? {
        None => QUEUE_PAGE_DEFAULT,
        Some(n) if (1..=QUEUE_PAGE_MAX as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(BudgetError::field(
                "limit",
                format!("{n} is outside 1..={QUEUE_PAGE_MAX} (the largest page)"),
            ))
        }
    };
    let offset = match query_i64(params, "offset")? {
        None => 0,
        Some(n) if n >= 0 => n as usize,
        Some(_) => return Err(BudgetError::field("offset", "must not be negative")),
    };
    Ok((offset, limit))
}

/// `GET /api/v1/queue[?limit=N][&offset=M]`: one page of the order, rows
/// `offset..offset+limit` (default the first [`QUEUE_PAGE_DEFAULT`], at
/// most [`QUEUE_PAGE_MAX`]), with `total` and `next_offset` (null on the
/// last page). The default page is serialized once per cycle and then
/// served from memory.
async fn get_queue(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult<Response> {
    let (offset, limit) = queue_page(&params)?;
    let viewer = viewer_of(&state, reader).await?;
    let q = state.queue();
    // PrivateData=jobs: only the viewer's own jobs (ranks stay global).
    let visible: Vec<&Placed> = if viewer.sees_job(None) {
        q.order.iter().collect()
    } else {
        (q.order.iter())
            .filter(|p| viewer.sees_job(q.users.get(&p.job.job).map(String::as_str)))
            .collect()
    };
    let page = |offset: usize, limit: usize| -> Result<axum::body::Bytes, BudgetError> {
        let total = visible.len();
        let rows: Vec<QueueRow> = (visible.iter().skip(offset).take(limit))
            .map(|p| queue_row(p, &q))
            .collect();
        let next = offset.saturating_add(limit);
        let body = json!({
            "at": q.at, "total": total, "offset": offset, "limit": limit,
            "next_offset": (next < total).then_some(next), "jobs": rows,
        });
        let mut body = body;
        iso_times(&mut body);
        serde_json::to_vec(&body)
            .map(Into::into)
            .map_err(|e| BudgetError::Http(e.to_string()))
    };
    let body = if (offset, limit) == (0, QUEUE_PAGE_DEFAULT) && viewer.sees_job(None) {
        q.json
            .get_or_init(|| page(0, QUEUE_PAGE_DEFAULT).unwrap_or_default())
            .clone()
    } else {
        page(offset, limit)?
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// At most this many ended runs in `GET /api/v1/jobs`.
const USER_ENDED_MAX: usize = 100;

/// `GET /api/v1/jobs?user=NAME`: a user's pending jobs (their queue rows,
/// why each waits), running jobs (protected until when, or why they may
/// be preempted) and runs that ended within the usage window (newest first,
/// at most [`USER_ENDED_MAX`]): what `compass why --me` prints. With `PrivateData=jobs`
/// only the user themselves, admins and operators may ask.
async fn get_user_jobs(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult<Response> {
    let viewer = viewer_of(&state, reader).await?;
    blocking(&state, move |state| {
        let user = (params.get("user").map(|u| u.trim()))
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                BudgetError::field("user", "give the user whose jobs to show (`?user=NAME`)")
            })?
            .to_string();
        if !viewer.sees_job(Some(&user)) {
            return Err(BudgetError::Forbidden {
                what: format!("user `{}` reading the jobs of `{user}`", viewer.name()),
                why: "PrivateData=jobs: users see only their own jobs".into(),
            });
        }
        let q = state.queue();
        let pending: Vec<QueueRow> = (q.order.iter())
            .filter(|p| q.users.get(&p.job.job) == Some(&user))
            .map(|p| queue_row(p, &q))
            .collect();
        let mut running: Vec<crate::slurm::SlurmJob> = (state
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .running
            .values())
        .filter(|j| j.user == user)
        .cloned()
        .collect();
        running.sort_by_key(|j| j.job);
        let mut run_rows = Vec::new();
        for j in &running {
            let actions = rows_of_job(state.db().actions(Some(j.job.0), 50)?, j.job.0, Some(j.submit));
            run_rows.push(json!({
                "job": j.job, "account": j.account, "gpus": j.gpus, "start": j.start,
                "min_runtime_s": j.min_runtime_s,
                "enforcement": enforcement_text(state, j.job.0, &actions),
            }));
        }
        // Runs that ended within the usage window, from the ledger.
        let since = state.now() - state.config.window_s;
        let ended: Vec<_> = (state.db().ended_runs_of(&user, since, USER_ENDED_MAX)?)
            .into_iter()
            .map(|iv| {
                json!({
                    "job": iv.job, "account": iv.account, "gpus": iv.gpus, "start": iv.start,
                    "end": iv.end, "kind": iv.kind, "weight": iv.weight,
                })
            })
            .collect();
        Ok(api_json(
            json!({ "at": q.at, "user": user, "pending": pending, "running": run_rows, "ended": ended }),
        )
        .into_response())
    })
    .await
}

async fn get_why(
    State(state): State<Arc<AppState>>,
    Path(job): Path<String>,
    reader: Reader,
) -> ApiResult<Response> {
    let viewer = viewer_of(&state, reader).await?;
    blocking(&state, move |state| {
    let id: u64 = job
        .parse()
        .map_err(|_| BudgetError::field("job", format!("`{job}` is not a job id")))?;
    let q = state.queue();
    if !viewer.sees_job(job_owner(state, &q, id).as_deref()) {
        return Err(BudgetError::Forbidden {
            what: format!("user `{}` reading job {id}", viewer.name()),
            why: "PrivateData=jobs: only its owner, admins and operators may see it".into(),
        });
    }
    let pending = q.order.iter().find(|p| p.job.job == JobId(id));
    let submit = pending
        .map(|p| p.job.submit)
        .or_else(|| state.running_job(id).map(|j| j.submit));
    let rows = state.db().actions(Some(id), 50)?;
    let rows = match submit {
        Some(_) => rows_of_job(rows, id, submit),
        None => rows_of_ended_job(rows, id, &state.db().runs_of(JobId(id))?),
    };
    // The rows `GET /api/v1/actions` would show this reader (issue #11's
    // owners recorded with each action): a reused id's earlier owner's
    // rows are not theirs.
    let actions = visible_actions(state, &viewer, rows);
    let enforcement = enforcement_text(state, id, &actions);
    if let Some(p) = pending {
        return Ok(api_json(
            json!({ "at": q.at, "state": "pending", "placed": p, "row": queue_row(p, &q),
                    "actions": actions, "enforcement": enforcement }),
        )
        .into_response());
    }
    // Not pending: say what the ledger knows about its latest run.
    match state.db().latest_interval(JobId(id))? {
        Some(iv) => {
            let kind = match iv.kind {
                fairshare::Kind::Allocated => "allocated time, charged to the budget of",
                fairshare::Kind::Unallocated => "unallocated (free) time, under",
            };
            let text = match iv.end {
                None => format!(
                    "Job {id} is not pending: it has been running since {} on {} GPUs, using {kind} account {}.\n",
                    localtime::text(iv.start), iv.gpus, iv.account
                ),
                Some(end) => format!(
                    "Job {id} is not pending: its last run went from {} to {} on {} GPUs, using {kind} account {}.\n",
                    localtime::text(iv.start), localtime::text(end), iv.gpus, iv.account
                ),
            };
            let mut text = text;
            if !state.config.gpu_weights.is_empty() || iv.weight != 1.0 {
                text.push_str(&weight_text(iv.gpus, iv.weight, "Its"));
            }
            let st = if iv.end.is_none() { "running" } else { "ended" };
            Ok(api_json(
                json!({ "at": q.at, "state": st, "interval": iv, "row": { "why": text },
                            "actions": actions, "enforcement": enforcement }),
            )
            .into_response())
        }
        None if !actions.is_empty() => Ok(api_json(json!({
            "at": q.at, "state": "unknown",
            "row": { "why": format!("Job {id} is neither pending nor in the ledger.\n") },
            "actions": actions, "enforcement": enforcement
        }))
        .into_response()),
        None => Err(BudgetError::NotFound(format!(
            "job {id} is neither pending in the last computed order (at {}) nor in the ledger",
            localtime::text(q.at)
        ))),
    }
    })
    .await
}

/// What enforcement did to a job, and whether it is protected now.
/// The actions that concern job `id` as it is now, `submit` its submit time
/// when it is pending or running (`None`: every row of the id). slurmctld
/// reuses job ids after a cold start, so a row made for an earlier job of
/// the id is left out (issue #11: `compass why` told a new job it had been
/// requeued). A row where it was the victim applies when the submit time
/// recorded is this job's ([`crate::enforce::same_job`]: also after our own
/// requeue); one where it needed the room, when it was submitted by then.
fn rows_of_job(
    rows: Vec<crate::db::ActionRow>,
    id: u64,
    submit: Option<i64>,
) -> Vec<crate::db::ActionRow> {
    let Some(submit) = submit else {
        return rows;
    };
    rows.into_iter()
        .filter(|a| {
            if a.job == Some(id) {
                a.submit
                    .is_none_or(|s| crate::enforce::same_job(s, a.at, submit))
            } else {
                submit <= a.at
            }
        })
        .collect()
}

/// The actions that concern job `id` now that it is neither pending nor
/// running, `runs` its id's runs in the ledger (oldest first, with their
/// users). The latest run and the runs just before it of the same user
/// are this job's; a run of another user is an earlier job of the id
/// (slurmctld reuses ids after a cold start). A row where it was the
/// victim applies when it ended one of this job's runs (`run_start`); one
/// where it needed the room, when it was taken after the earlier job's
/// last run ended and no later than this job's latest start. Without runs
/// in the ledger, every row (the id's owner is then unknown: only admins
/// and operators see them).
fn rows_of_ended_job(
    rows: Vec<crate::db::ActionRow>,
    id: u64,
    runs: &[(Interval, Option<String>)],
) -> Vec<crate::db::ActionRow> {
    let Some((latest, user)) = runs.last() else {
        return rows;
    };
    let mine = runs.iter().rev().take_while(|(_, u)| u == user).count();
    let starts: BTreeSet<i64> = runs[runs.len() - mine..]
        .iter()
        .map(|(iv, _)| iv.start)
        .collect();
    let after = runs[..runs.len() - mine]
        .iter()
        .map(|(iv, _)| iv.end.unwrap_or(iv.start))
        .max()
        .unwrap_or(i64::MIN);
    rows.into_iter()
        .filter(|a| {
            if a.job == Some(id) {
                a.run_start.is_some_and(|s| starts.contains(&s))
            } else {
                after <= a.at && a.at <= latest.start
            }
        })
        .collect()
}

fn enforcement_text(state: &AppState, id: u64, actions: &[crate::db::ActionRow]) -> String {
    let mut out = String::new();
    if let Some(j) = state.running_job(id) {
        let cap = state.config.protection.min_runtime_cap_s;
        // Enforcement treats accounts outside the tree as unallocated
        // (`SlurmJob::kind_in`, the classification it uses).
        let tree = state.db().load_tree().ok().flatten();
        let allocated = j.kind_in(tree.as_ref()) == fairshare::Kind::Allocated;
        match j.start {
            Some(_) if j.min_runtime_s > 0 && !allocated => {
                let _ = writeln!(
                    out,
                    "Running time of account {}, which has no budget in the tree: unallocated (never protected, \
                     whatever its --min-runtime); an allocated job that needs its GPUs may preempt it.",
                    j.account
                );
            }
            Some(start) if j.min_runtime_s > 0 => {
                let until = start + (j.min_runtime_s as f64).min(cap) as i64;
                if state.now() < until {
                    let _ = writeln!(
                        out,
                        "Running allocated time: protected from preemption until {} (min runtime {}{}).",
                        localtime::text(until),
                        duration::format(j.min_runtime_s),
                        if (j.min_runtime_s as f64) > cap { format!(", capped at {}", duration::format(cap.round() as u64)) } else { String::new() }
                    );
                } else {
                    let _ = writeln!(
                        out,
                        "Running allocated time: its protection ended at {}; it keeps running while its team \
                         is within its allocation or no more under-served job needs its GPUs.",
                        localtime::text(until)
                    );
                }
            }
            Some(_) => {
                let _ = writeln!(
                    out,
                    "Running unallocated time (min runtime 0): never protected; an allocated job that needs its GPUs may preempt it."
                );
            }
            None => {}
        }
    }
    for a in actions.iter().rev() {
        let what = match (a.job, a.cause_job) {
            (Some(j), _) if j == id => format!(
                "{} this job ({}){}",
                a.action,
                a.rule.as_deref().unwrap_or("-"),
                a.cause_job
                    .map(|c| format!(" for job {c}"))
                    .unwrap_or_default()
            ),
            (Some(j), Some(_)) => format!(
                "{} job {j} ({}) to make room for this job",
                a.action,
                a.rule.as_deref().unwrap_or("-")
            ),
            _ => a.action.clone(),
        };
        let _ = writeln!(
            out,
            "At {}: {what}{}; lost {:.0} GPU-s. {}",
            localtime::text(a.at),
            if a.ok { "" } else { " (FAILED)" },
            a.lost_gpu_s,
            a.detail
        );
    }
    out
}

/// `GET /api/v1/actions[?job=J][&limit=N]`: enforcement actions, newest first.
async fn get_actions(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult<Response> {
    let viewer = viewer_of(&state, reader).await?;
    blocking(&state, move |state| {
        let limit = query_i64(&q, "limit")?.unwrap_or(100);
        if !(1..=10_000).contains(&limit) {
            return Err(BudgetError::field("limit", "must be between 1 and 10000"));
        }
        let job = query_i64(&q, "job")?;
        if job.is_some_and(|j| j < 0) {
            return Err(BudgetError::field("job", "must not be negative"));
        }
        let rows = state.db().actions(job.map(|j| j as u64), limit as usize)?;
        let rows = visible_actions(state, &viewer, rows);
        Ok(api_json(json!({ "rows": rows })).into_response())
    })
    .await
}

/// `GET /api/v1/history?from=&to=`: the cycle history (occupancy,
/// pending jobs, waits, N*SIF) over the window, at most
/// [`crate::db::HISTORY_MAX_POINTS`] points. Cluster-wide figures, no
/// per-user data: readable by everyone.
async fn get_history(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let (from, to) = window(state, &q)?;
        let (points, bucket_s) = state.db().history(from, to)?;
        Ok(
            api_json(json!({ "from": from, "to": to, "bucket_s": bucket_s, "points": points }))
                .into_response(),
        )
    })
    .await
}

/// `GET /api/v1/hosts`: Slurm nodes of the last cycle and faulty records.
async fn get_hosts(State(state): State<Arc<AppState>>) -> ApiResult<Response> {
    blocking(&state, move |state| {
    let faulty = state.db().faulty()?;
    let nodes: Vec<_> = state
        .nodes()
        .into_iter()
        .map(|n| {
            let f = faulty.iter().find(|f| f.node == n.name);
            json!({ "name": n.name, "gpus": n.gpus, "state": n.state, "reason": n.reason, "faulty": f })
        })
        .collect();
    Ok(api_json(json!({ "nodes": nodes, "faulty": faulty })).into_response())
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultBody {
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RepairedBody {}

fn require_admin(state: &AppState, user: &str, what: &str) -> Result<(), BudgetError> {
    if policy(state).is_admin(user) {
        Ok(())
    } else {
        Err(BudgetError::Forbidden {
            what: format!("user `{user}` {what}"),
            why: "only admins may mark nodes faulty or repaired".into(),
        })
    }
}

/// Admin-only: mark a node faulty (DRAIN in Slurm at once).
async fn host_fault(
    State(state): State<Arc<AppState>>,
    Path(node): Path<String>,
    w: Write,
) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let (user, b): (String, FaultBody) = w.authenticate(state)?;
        require_admin(state, &user, &format!("marking node `{node}` faulty"))?;
        check_node_name(&node)?;
        if state.actions().is_some() && state.nodes().is_empty() {
            // Unknown node list: a name Slurm would reject (or expand) must
            // not reach slurm_update_node.
            return Err(BudgetError::Unavailable(format!(
                "cannot check `{node}` yet: no cycle has read Slurm's node list since start-up \
                 (see /healthz `cycle.last_ok`); retry after the first cycle"
            )));
        }
        let change = crate::enforce::mark_faulty(state, &node, &b.reason, &user)?;
        Ok(api_json(change).into_response())
    })
    .await
}

/// Admin-only: a repaired node returns to service (RESUME in Slurm).
async fn host_repaired(
    State(state): State<Arc<AppState>>,
    Path(node): Path<String>,
    w: Write,
) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let (user, _b): (String, RepairedBody) = w.authenticate(state)?;
        require_admin(state, &user, &format!("marking node `{node}` repaired"))?;
        check_node_name(&node)?;
        let change = crate::enforce::mark_repaired(state, &node, &user)?;
        Ok(api_json(change).into_response())
    })
    .await
}

async fn owed(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult<Response> {
    let viewer = viewer_of(&state, reader).await?;
    blocking(&state, move |state| {
        let days = query_i64(&q, "days")?.unwrap_or(30);
        if !(1..=366).contains(&days) {
            return Err(BudgetError::field("days", "must be between 1 and 366"));
        }
        let to = state.now();
        let from = to - days * 86400;
        let mut rows = state.owed_report(from, to)?;
        // PrivateData=usage: the teams the reader may see.
        let scope = usage_scope(state, &viewer)?;
        rows.retain(|r| scope.sees(&r.team));
        let owed: f64 = rows.iter().map(|r| r.owed_gpu_hours).sum();
        let capped: f64 = rows
            .iter()
            .map(|r| r.delivered_fraction * r.owed_gpu_hours)
            .sum();
        Ok(api_json(json!({
            "from": from, "to": to, "teams": rows,
            "overall_delivered_fraction": if owed > 0.0 { capped / owed } else { 1.0 }
        }))
        .into_response())
    })
    .await
}

async fn audit(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
    reader: Reader,
) -> ApiResult<Response> {
    let viewer = viewer_of(&state, reader).await?;
    blocking(&state, move |state| {
        let limit = query_i64(&q, "limit")?.unwrap_or(100);
        if !(1..=10_000).contains(&limit) {
            return Err(BudgetError::field("limit", "must be between 1 and 10000"));
        }
        let mut rows = state.db().audit(limit as usize)?;
        if viewer.private.accounts && !viewer.all {
            // PrivateData=accounts: managers see the edits of the teams
            // they manage (or manage above); others see none.
            let tree = state.db().load_tree().ok().flatten();
            rows.retain(|r| match (&viewer.user, &tree) {
                (Some(u), Some(t)) => t.find(&r.node).is_some_and(|ix| t.manages(u, ix)),
                _ => false,
            });
        }
        Ok(api_json(json!({ "rows": rows })).into_response())
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LedgerBody {
    intervals: Vec<Interval>,
}

/// The largest GPU weight a ledger interval may carry (`[gpu_weights]`
/// weighs types around 1).
pub const MAX_LEDGER_WEIGHT: f64 = 1000.0;

/// Admin-only: merge run intervals into the ledger (backfill from
/// accounting, or a Slurm-less deployment). Idempotent.
async fn ingest(State(state): State<Arc<AppState>>, w: Write) -> ApiResult<Response> {
    blocking(&state, move |state| {
        let (user, mut b): (String, LedgerBody) = w.authenticate(state)?;
        if !policy(state).is_admin(&user) {
            return Err(BudgetError::Forbidden {
                what: format!("user `{user}` writing the ledger"),
                why: "only admins may ingest run intervals".into(),
            });
        }
        for (i, iv) in b.intervals.iter_mut().enumerate() {
            // accounts are lower case, as Slurm stores them (see Db::edit_tree)
            iv.account.make_ascii_lowercase();
            fairshare::tree::check_name(&iv.account, "account", &iv.account).map_err(|e| {
                BudgetError::field(&format!("intervals[{i}].account"), e.to_string())
            })?;
            iv.validate()
                .map_err(|e| BudgetError::field(&format!("intervals[{i}]"), e.to_string()))?;
            // Times a query can name, and weights whose sums stay finite
            // (issue #11: `start: i64::MIN` and `weight: 1e308` were stored,
            // and reads showed `null` GPU-hours).
            for (what, t) in [("start", Some(iv.start)), ("end", iv.end)] {
                if t.is_some_and(|t| !(0..=MAX_QUERY_TIME).contains(&t)) {
                    return Err(BudgetError::field(
                        &format!("intervals[{i}].{what}"),
                        format!("must be within 0..={MAX_QUERY_TIME} (Unix seconds, 1970 to 9999)"),
                    ));
                }
            }
            if iv.weight > MAX_LEDGER_WEIGHT {
                return Err(BudgetError::field(
                    &format!("intervals[{i}].weight"),
                    format!("must be at most {MAX_LEDGER_WEIGHT}"),
                ));
            }
        }
        let now = state.now();
        let rep = state.db().ingest(&b.intervals, now)?;
        Ok(api_json(rep).into_response())
    })
    .await
}
