//! HTTP (SPEC §8): metrics, probes, the JSON API and a small status page.

use crate::engine::{workers_json, zombie_json, ReapError, ReapRequest, SharedEngine, Trigger};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use reaper_core::{Action, FollowUp};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

pub fn router(engine: SharedEngine) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/status", get(status))
        .route("/api/v1/workers", get(workers))
        .route("/api/v1/zombies", get(zombies))
        .route("/api/v1/audit", get(audit))
        .route("/api/v1/sweep", post(sweep))
        .route("/api/v1/tasks/{id}/reap", post(reap))
        .with_state(engine)
}

fn error(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(json!({ "error": msg.into() }))).into_response()
}

/// POSTs need the configured bearer token: none configured → 403, wrong → 401.
#[allow(clippy::result_large_err)] // the error is the response itself, built once
fn authorize(engine: &SharedEngine, headers: &HeaderMap) -> Result<(), Response> {
    let Some(token) = engine.settings.http_token.as_ref() else {
        return Err(error(
            StatusCode::FORBIDDEN,
            "POST endpoints are disabled: no http.token_file is configured",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.expose().as_bytes()) => Ok(()),
        _ => Err(error(
            StatusCode::UNAUTHORIZED,
            "missing or invalid bearer token",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn metrics(State(e): State<SharedEngine>) -> Response {
    e.refresh_gauges(&e.registry.view());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        e.metrics.render(),
    )
        .into_response()
}

/// Why the daemon is not ready, or None when it is.
pub async fn not_ready(e: &SharedEngine) -> Option<String> {
    let view = e.registry.view();
    if let reaper_core::ViewState::Invalid { reason, .. } = &view.state {
        return Some(format!("registry view invalid: {reason}"));
    }
    match tokio::time::timeout(Duration::from_secs(3), e.db.ping()).await {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some(format!("database: {err}")),
        Err(_) => Some("database: no answer within 3s".into()),
    }
}

async fn readyz(State(e): State<SharedEngine>) -> Response {
    match not_ready(&e).await {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

pub fn status_json(e: &SharedEngine) -> serde_json::Value {
    let view = e.registry.view();
    let st = e.status_read();
    let (valid, since, reason) = match &view.state {
        reaper_core::ViewState::Valid { since } => (true, Some(*since), None),
        reaper_core::ViewState::Invalid { since, reason } => {
            (false, Some(*since), Some(reason.clone()))
        }
    };
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "ds_line": st.line.map(|l| l.as_str()),
        "ds_line_hold": st.line_hold,
        "leader": e.is_leader(),
        "leader_election": e.leader.is_some(),
        "registry_view": { "valid": valid, "since": since, "reason": reason,
                           "workers": view.workers.len(), "masters": view.masters.len() },
        "brake": { "engaged": st.brake.engaged(), "since": st.brake.engaged_since, "why": st.brake.why },
        "last_sweep": st.last_sweep.as_ref().map(|s| json!({
            "at": s.at, "result": s.result, "detail": s.detail, "kind": s.kind,
            "candidates": s.candidates, "zombies": s.zombies, "actions": s.actions,
        })),
        "database_error": st.db_error,
        "started_at": e.started(),
    })
}

async fn status(State(e): State<SharedEngine>) -> Response {
    Json(status_json(&e)).into_response()
}

async fn workers(State(e): State<SharedEngine>) -> Response {
    Json(workers_json(&e.registry.view())).into_response()
}

fn zombies_json(e: &SharedEngine, limit: usize) -> Vec<serde_json::Value> {
    let (zombies, at) = {
        let st = e.status_read();
        (st.zombies.clone(), st.zombies_at)
    };
    let at = at.unwrap_or_else(chrono::Utc::now);
    zombies
        .iter()
        .take(limit)
        .map(|z| zombie_json(z, at))
        .collect()
}

async fn zombies(State(e): State<SharedEngine>) -> Response {
    Json(json!({ "zombies": zombies_json(&e, usize::MAX) })).into_response()
}

#[derive(Deserialize)]
struct AuditQuery {
    limit: Option<String>,
}

async fn audit(State(e): State<SharedEngine>, Query(q): Query<AuditQuery>) -> Response {
    let limit = match q.limit.as_deref().map(|s| s.trim().parse::<usize>()) {
        None => 100,
        Some(Ok(n)) => n.min(10_000),
        Some(Err(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "limit must be a non-negative whole number",
            )
        }
    };
    let engine = e.clone();
    match tokio::task::spawn_blocking(move || engine.audit.tail(limit)).await {
        Ok(Ok(records)) => Json(json!({ "records": records })).into_response(),
        Ok(Err(err)) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

async fn sweep(State(e): State<SharedEngine>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&e, &headers) {
        return r;
    }
    let s = e.sweep(Trigger::Requested).await;
    Json(json!({
        "at": s.at, "result": s.result, "detail": s.detail, "kind": s.kind,
        "candidates": s.candidates, "zombies": s.zombies, "actions": s.actions,
    }))
    .into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReapBody {
    action: Option<String>,
    workflow: Option<String>,
    force: Option<bool>,
}

async fn reap(
    State(e): State<SharedEngine>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(r) = authorize(&e, &headers) {
        return r;
    }
    let Ok(task_id) = id.trim().parse::<i64>() else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("task id {id:?} is not a number"),
        );
    };
    let body: ReapBody = if body.iter().all(|b| b.is_ascii_whitespace()) {
        ReapBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(err) => return error(StatusCode::BAD_REQUEST, format!("invalid JSON body: {err}")),
        }
    };
    let action = match body.action.as_deref().map(str::parse::<Action>) {
        None => None,
        Some(Ok(Action::Report)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "action must be fail, fault-tolerance or kill",
            )
        }
        Some(Ok(a)) => Some(a),
        Some(Err(err)) => return error(StatusCode::BAD_REQUEST, err.to_string()),
    };
    let workflow = match body.workflow.as_deref().map(str::parse::<FollowUp>) {
        None => None,
        Some(Ok(w)) => Some(w),
        Some(Err(err)) => return error(StatusCode::BAD_REQUEST, err.to_string()),
    };
    let req = ReapRequest {
        task_id,
        action,
        workflow,
        force: body.force.unwrap_or(false),
        actor: "api".into(),
    };
    match e.reap(&req).await {
        Ok(rec) => Json(rec).into_response(),
        Err(ReapError::NotFound(_)) => {
            error(StatusCode::NOT_FOUND, format!("task {task_id} not found"))
        }
        Err(err @ (ReapError::Refused(_) | ReapError::LostRace(_))) => {
            error(StatusCode::CONFLICT, err.to_string())
        }
        Err(err @ ReapError::Unavailable(_)) => {
            error(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
        }
        Err(ReapError::NotLeader(leader)) => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({"error": "not the leader", "leader": leader})),
        )
            .into_response(),
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn index(State(e): State<SharedEngine>) -> Html<String> {
    let status = status_json(&e);
    let view = e.registry.view();
    let workers = workers_json(&view);
    let total = e.status_read().zombies.len();
    let zombies = zombies_json(&e, 500);
    let engine = e.clone();
    let recent = tokio::task::spawn_blocking(move || engine.audit.tail(20))
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let s = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_string(),
        serde_json::Value::String(x) => esc(x),
        other => esc(&other.to_string()),
    };
    let mut h = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>ds-reaper</title>\
         <meta http-equiv=\"refresh\" content=\"10\"><style>body{font-family:sans-serif;margin:2em}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\
         .bad{color:#b00}.ok{color:#070}</style></head><body><h1>ds-reaper</h1>",
    );
    let valid = status["registry_view"]["valid"].as_bool().unwrap_or(false);
    let engaged = status["brake"]["engaged"].as_bool().unwrap_or(false);
    h.push_str(&format!(
        "<p>version {} · DS line {} · leader {} · registry view <b class=\"{}\">{}</b> · brake <b class=\"{}\">{}</b></p>",
        s(&status["version"]),
        s(&status["ds_line"]),
        s(&status["leader"]),
        if valid { "ok" } else { "bad" },
        if valid { "valid".to_string() } else { format!("invalid ({})", s(&status["registry_view"]["reason"])) },
        if engaged { "bad" } else { "ok" },
        if engaged { format!("ENGAGED ({})", s(&status["brake"]["why"])) } else { "released".to_string() },
    ));
    h.push_str(&format!(
        "<p>last sweep: {} {} — {} candidates, {} zombies, {} actions</p>",
        s(&status["last_sweep"]["at"]),
        s(&status["last_sweep"]["result"]),
        s(&status["last_sweep"]["candidates"]),
        s(&status["last_sweep"]["zombies"]),
        s(&status["last_sweep"]["actions"]),
    ));
    h.push_str(&format!("<h2>Zombies ({})</h2><table><tr><th>task</th><th>name</th><th>host</th><th>reason</th><th>action</th><th>workflow</th><th>note</th></tr>", total));
    for z in zombies.iter() {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&z["task_id"]),
            s(&z["task_name"]),
            s(&z["host"]),
            s(&z["reason"]),
            s(&z["action"]),
            s(&z["workflow"]),
            s(&z["note"])
        ));
    }
    h.push_str("</table><h2>Workers</h2><table><tr><th>host</th><th>startup</th><th>report</th><th>status</th></tr>");
    for w in workers["workers"].as_array().into_iter().flatten() {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&w["host"]),
            s(&w["startup_time"]),
            s(&w["report_time"]),
            s(&w["status"])
        ));
    }
    h.push_str(
        "</table><h2>Masters</h2><table><tr><th>host</th><th>startup</th><th>report</th></tr>",
    );
    for w in workers["masters"].as_array().into_iter().flatten() {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&w["host"]),
            s(&w["startup_time"]),
            s(&w["report_time"])
        ));
    }
    h.push_str(
        "</table><h2>Recently lost</h2><table><tr><th>host</th><th>kind</th><th>lost at</th></tr>",
    );
    for w in workers["lost"].as_array().into_iter().flatten() {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&w["host"]),
            s(&w["kind"]),
            s(&w["lost_at"])
        ));
    }
    h.push_str("</table><h2>Last actions</h2><table><tr><th>time</th><th>event</th><th>task</th><th>reason</th><th>action</th><th>actor</th><th>detail</th></tr>");
    for r in recent.iter().rev() {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.ts.to_rfc3339()),
            esc(&r.event),
            r.task_id.map(|i| i.to_string()).unwrap_or_default(),
            esc(r.reason.as_deref().unwrap_or("")),
            esc(r.action.as_deref().unwrap_or("")),
            esc(&r.actor),
            esc(r.detail.as_deref().unwrap_or(""))
        ));
    }
    h.push_str("</table><p><a href=\"/metrics\">metrics</a> · <a href=\"/api/v1/status\">status</a> · <a href=\"/api/v1/zombies\">zombies</a> · <a href=\"/api/v1/workers\">workers</a> · <a href=\"/api/v1/audit\">audit</a></p></body></html>");
    Html(h)
}
