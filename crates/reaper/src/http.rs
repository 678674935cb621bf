//! HTTP (SPEC §8): metrics, probes, the JSON API and a small status page.

pub use crate::api::parse_reap_request;
use crate::engine::{Error as EngineError, ReapError, SharedEngine, Trigger};
use crate::views::{StatusView, WorkflowView, ZombieView};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

pub fn router(engine: SharedEngine) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/status", get(status))
        .route("/api/v1/workers", get(workers))
        .route("/api/v1/zombies", get(zombies))
        .route("/api/v1/workflows", get(workflows))
        .route("/api/v1/ghosts", get(ghosts))
        .route("/api/v1/anomalies", get(anomalies))
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
    let Some(token) = engine.settings.http.token_file.as_ref().map(|f| f.secret()) else {
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
    e.refresh_gauges(&e.view());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        e.metrics.render(),
    )
        .into_response()
}

async fn readyz(State(e): State<SharedEngine>) -> Response {
    // A read the store cannot serve as asked (a schema mismatch) is shown
    // here too: the database answers, but not what a sweep asks of it.
    let read_fault = || e.read_error().map(|why| format!("database: {why}"));
    match e.not_ready().await.or_else(read_fault) {
        None => (
            StatusCode::OK,
            format!("ready (registry: {})\n", e.registry_kind()),
        )
            .into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn status(State(e): State<SharedEngine>) -> Response {
    Json(StatusView::new(&e)).into_response()
}

async fn workers(State(e): State<SharedEngine>) -> Response {
    Json(crate::views::WorkersView::of(&e)).into_response()
}

/// The last sweep's zombies (at most `limit`) and how many there were.
fn zombie_views(e: &SharedEngine, limit: usize) -> (Vec<ZombieView>, usize) {
    let (zombies, at) = {
        let st = e.status_read();
        (st.zombies.clone(), st.zombies_at)
    };
    let at = at.unwrap_or_else(|| e.now());
    let views = zombies
        .iter()
        .take(limit)
        .map(|z| ZombieView::new(z, at))
        .collect();
    (views, zombies.len())
}

async fn zombies(State(e): State<SharedEngine>) -> Response {
    Json(json!({ "zombies": zombie_views(&e, usize::MAX).0 })).into_response()
}

fn workflow_views(e: &SharedEngine) -> Vec<WorkflowView> {
    let findings = e.status_read().workflows.clone();
    findings.iter().map(WorkflowView::new).collect()
}

async fn workflows(State(e): State<SharedEngine>) -> Response {
    Json(json!({ "workflows": workflow_views(&e) })).into_response()
}

fn ghost_views(e: &SharedEngine) -> Vec<crate::views::GhostView> {
    let ghosts = e.status_read().ghosts.clone();
    ghosts.iter().map(crate::views::GhostView::new).collect()
}

async fn ghosts(State(e): State<SharedEngine>) -> Response {
    Json(json!({ "ghosts": ghost_views(&e) })).into_response()
}

/// SPEC §16: the findings as the core shapes them (the SPEC's fields).
async fn anomalies(State(e): State<SharedEngine>) -> Response {
    let found = e.status_read().anomalies.clone();
    Json(json!({ "anomalies": *found })).into_response()
}

#[derive(Deserialize)]
struct AuditQuery {
    limit: Option<String>,
}

async fn audit(State(e): State<SharedEngine>, Query(q): Query<AuditQuery>) -> Response {
    let limit = match crate::api::audit_limit(q.limit.as_deref()) {
        Ok(n) => n,
        Err(msg) => return error(StatusCode::BAD_REQUEST, msg.to_string()),
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
    Json(e.sweep(Trigger::Requested).await).into_response()
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
    let req = match parse_reap_request(&id, &body) {
        Ok(r) => r,
        Err(msg) => return error(StatusCode::BAD_REQUEST, msg.to_string()),
    };
    match e.reap(&req).await {
        Ok(rec) => Json(rec).into_response(),
        Err(err) => err.into_response(),
    }
}

/// SPEC §8's statuses for a reap that was not done.
impl IntoResponse for ReapError {
    fn into_response(self) -> Response {
        match self {
            ReapError::NotFound(_) => error(StatusCode::NOT_FOUND, self.to_string()),
            ReapError::Refused(_) | ReapError::LostRace(_) => {
                error(StatusCode::CONFLICT, self.to_string())
            }
            ReapError::Unavailable(_) => error(StatusCode::SERVICE_UNAVAILABLE, self.to_string()),
            ReapError::NotLeader(leader) => (
                StatusCode::CONFLICT,
                Json(serde_json::json!({"error": "not the leader", "leader": leader})),
            )
                .into_response(),
        }
    }
}

/// The engine could not judge: the registry or the database is not there
/// (503), or the store cannot serve what was asked (500), or does not do it
/// at all (501).
impl IntoResponse for EngineError {
    fn into_response(self) -> Response {
        use reaper_core::ports::PortErrorKind as Kind;
        let code = match self.port_kind() {
            None | Some(Kind::Unavailable) => StatusCode::SERVICE_UNAVAILABLE,
            Some(Kind::Invalid) => StatusCode::INTERNAL_SERVER_ERROR,
            Some(Kind::Unsupported) => StatusCode::NOT_IMPLEMENTED,
            Some(Kind::Refused) => StatusCode::CONFLICT,
        };
        error(code, self.to_string())
    }
}

async fn index(State(e): State<SharedEngine>, headers: HeaderMap) -> Html<String> {
    let lang = crate::page::lang::Lang::from_accept_language(
        headers
            .get(axum::http::header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok()),
    );
    let (zombies, total) = zombie_views(&e, 500);
    let engine = e.clone();
    let recent = tokio::task::spawn_blocking(move || engine.audit.tail(20))
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let (zombie_reasons, history) = {
        let st = e.status_read();
        (
            crate::page::tally(st.zombies.iter().map(|z| z.reason.as_str())),
            st.history.iter().copied().collect(),
        )
    };
    Html(crate::page::render(&crate::page::Page {
        lang,
        status: StatusView::new(&e),
        workers: crate::views::WorkersView::of(&e),
        zombies,
        zombies_total: total,
        zombie_reasons,
        workflows: workflow_views(&e),
        ghosts: ghost_views(&e),
        anomalies: e.status_read().anomalies.to_vec(),
        recent,
        history,
        now: e.now(),
    }))
}
