//! The agent's HTTP endpoints on `agent.listen` (SPEC §12): `/healthz`,
//! `/readyz`, `/metrics`, and `/` with what the agent last published.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;

/// What the endpoints show. The agent's runtime implements it, so the
/// endpoints need nothing of the loop behind them.
pub(crate) trait Endpoints: Send + Sync + 'static {
    /// Why the agent is not ready, or None.
    fn not_ready(&self) -> Option<String>;
    /// One line on what the agent stands for, for `/readyz`.
    fn summary(&self) -> String;
    /// The Prometheus exposition, gauges refreshed first.
    fn metrics_text(&self) -> String;
    /// What `/` answers.
    fn status_json(&self) -> serde_json::Value;
}

type Shared = Arc<dyn Endpoints>;

pub(crate) fn router(shared: Shared) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

async fn readyz(State(s): State<Shared>) -> Response {
    match s.not_ready() {
        None => (StatusCode::OK, format!("ready: {}\n", s.summary())).into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(s): State<Shared>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics_text(),
    )
        .into_response()
}

async fn index(State(s): State<Shared>) -> Response {
    Json(s.status_json()).into_response()
}
