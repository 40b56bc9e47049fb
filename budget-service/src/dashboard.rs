//! The dashboard: one HTML page with inline SVG charts, no build step.
//! The page embeds the current data (so it renders without a round trip)
//! and refreshes from the API every 30 s: the tree with allocation against
//! 7-day usage per team, the queue with its sort metric, and owed versus
//! delivered GPU-hours per team over 30 days, and the latest enforcement
//! actions (preemptions, drains) with their cause and rule, and each
//! team's charged usage per day over the last week against its budget, and
//! the cycle history of the last week (occupancy, pending jobs and the
//! longest wait, the select plugin's N*SIF, from `GET /api/v1/history`). Every URL the
//! page uses is relative, so it works behind a proxy under a path prefix.

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;
use std::sync::Arc;

use crate::state::AppState;

const PAGE: &str = include_str!("dashboard.html");
const SCRIPT: &str = include_str!("dashboard.js");

/// Queue rows embedded in the page: its first page. Further pages come
/// from `GET /api/v1/queue?limit=&offset=` (the page's `queue_page_size`
/// query parameter, default this, chooses the size).
pub const QUEUE_PAGE: usize = 50;

/// The data the page renders (same shapes as the API responses).
/// Days of the usage-over-time chart.
pub const USAGE_DAYS: i64 = 7;

/// Charged usage and budget per team (nodes with an account) for each of
/// the last [`USAGE_DAYS`] days ending `now`, oldest first, in the shape of
/// `GET /api/v1/usage?from=&to=` (which the page's refresh asks for).
fn usage_days(
    state: &AppState,
    now: i64,
    scope: &crate::privacy::UsageScope,
) -> Vec<serde_json::Value> {
    (0..USAGE_DAYS)
        .rev()
        .map(|k| {
            let (from, to) = (now - (k + 1) * 86400, now - k * 86400);
            let nodes: Vec<_> = match state.stats(from, to) {
                Ok(Some((tree, _usage, stats))) => (tree.subtree(tree.root()).into_iter())
                    .filter(|ix| {
                        tree.node(*ix).account.is_some() && scope.sees(&tree.node(*ix).name)
                    })
                    .map(|ix| {
                        json!({
                            "node": tree.node(ix).name,
                            "charged_gpu_hours": stats[ix].usage.charged_gpu_s / 3600.0,
                            "budget_gpu_hours": stats[ix].budget_gpu_s / 3600.0,
                        })
                    })
                    .collect(),
                _ => Vec::new(),
            };
            json!({ "from": from, "to": to, "nodes": nodes })
        })
        .collect()
}

/// With `PrivateData=jobs`, only the queue rows and actions `viewer` may
/// see ([`crate::privacy`]).
pub fn data(state: &AppState, viewer: &crate::privacy::Viewer) -> serde_json::Value {
    let now = state.now();
    let week = state.config.window_s;
    // PrivateData=usage: other teams' usage hidden (as the API does).
    let scope = crate::api::usage_scope(state, viewer)
        .unwrap_or(crate::privacy::UsageScope::Teams(Default::default()));
    let tree = crate::api::hide_usage(&scope, state.tree_view(now - week, now).unwrap_or_default());
    let q = state.queue();
    let rows: Vec<_> = q
        .order
        .iter()
        .filter(|p| viewer.sees_job(q.users.get(&p.job.job).map(String::as_str)))
        .take(QUEUE_PAGE)
        .map(|p| {
            json!({
                "rank": p.rank, "job": p.job.job, "account": p.job.account, "team": p.team,
                "user": q.users.get(&p.job.job).cloned().unwrap_or_default(),
                "kind": p.kind, "gpus": p.job.gpus, "priority": p.job.priority,
                "weight": q.weights.get(&p.job.job).copied().unwrap_or(1.0),
                "team_ratio": p.path.last().map(|l| l.ratio).filter(|r| r.is_finite()),
            })
        })
        .collect();
    let mut owed = state.owed_report(now - 30 * 86400, now).unwrap_or_default();
    owed.retain(|r| scope.sees(&r.team));
    let actions = state.db().actions(None, 20).unwrap_or_default();
    let actions = crate::api::visible_actions(state, viewer, actions);
    let queue_total = if viewer.sees_job(None) {
        q.order.len()
    } else {
        (q.order.iter())
            .filter(|p| viewer.sees_job(q.users.get(&p.job.job).map(String::as_str)))
            .count()
    };
    let usage_days = usage_days(state, now, &scope);
    // The cycle history over the same days (cluster-wide: everyone sees it).
    let (history_from, history_to) = (now - USAGE_DAYS * 86400, now + 1);
    let history = state
        .db()
        .history(history_from, history_to)
        .map(|(points, bucket_s)| json!({ "from": history_from, "to": history_to, "bucket_s": bucket_s, "points": points }))
        .unwrap_or_else(|e| json!({ "from": history_from, "to": history_to, "points": [], "error": e.to_string() }));
    let mut v = json!({
        "now": now, "window_s": week, "capacity_gpus": state.capacity(),
        "gpu_weights": state.config.gpu_weights,
        "tree": tree, "queue": rows, "queue_total": queue_total, "owed": owed, "actions": actions,
        "usage_days": usage_days, "history": history,
    });
    // Times as the API gives them (ISO 8601 local with offset).
    crate::api::iso_times(&mut v);
    v
}

pub async fn page(State(state): State<Arc<AppState>>, reader: crate::api::Reader) -> Response {
    let viewer = match crate::api::viewer_of(&state, reader).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    // SQLite reads: off the runtime, bounded (see `api::blocking`).
    match crate::api::blocking(&state, move |state| Ok(data(state, &viewer))).await {
        Ok(data) => {
            let data = data.to_string().replace("</", "<\\/");
            Html(PAGE.replace("__DATA__", &data)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

pub async fn script() -> Response {
    ([(header::CONTENT_TYPE, "application/javascript")], SCRIPT).into_response()
}
