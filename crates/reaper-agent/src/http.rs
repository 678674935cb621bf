//! The agent's HTTP endpoints on `agent.listen` (SPEC §12): `/healthz`,
//! `/readyz`, `/metrics`, and `/` with what the agent last published.

use crate::runtime::Shared;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    match s.not_ready() {
        None => (StatusCode::OK, format!("ready: {}\n", s.summary())).into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    s.refresh_gauges();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.render(),
    )
        .into_response()
}

async fn index(State(s): State<Arc<Shared>>) -> Response {
    Json(s.status_json()).into_response()
}
