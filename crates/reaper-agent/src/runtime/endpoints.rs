//! The runtime behind the agent's HTTP endpoints.

use super::Shared;
use crate::http::Endpoints;

impl Endpoints for Shared {
    fn not_ready(&self) -> Option<String> {
        Shared::not_ready(self)
    }

    fn summary(&self) -> String {
        Shared::summary(self)
    }

    fn metrics_text(&self) -> String {
        self.refresh_gauges();
        self.metrics.render()
    }

    fn status_json(&self) -> serde_json::Value {
        Shared::status_json(self)
    }
}
