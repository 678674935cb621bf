//! What the HTTP API reads from its callers — the reap request's path and
//! body, the audit listing's `limit` — as pure functions: they carry no
//! runtime, so the fuzz targets build them without the daemon's adapters
//! (`reaper` without its `daemon` feature).

use reaper_core::policy::BadValue;
use reaper_core::{Action, FollowUp};
use serde::Deserialize;

/// A request to reap one task instance (CLI `reap`, `POST .../reap`).
#[derive(Debug, Clone, Default)]
pub struct ReapRequest {
    pub task_id: i64,
    pub action: Option<Action>,
    pub workflow: Option<FollowUp>,
    pub force: bool,
    pub actor: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReapBody {
    action: Option<String>,
    workflow: Option<String>,
    force: Option<bool>,
}

/// Why a reap request is refused with a 400 (its message is the answer).
#[derive(Debug, thiserror::Error)]
pub enum BadReapRequest {
    #[error("task id {0:?} is not a number")]
    TaskId(String),
    #[error("invalid JSON body: {0}")]
    Body(serde_json::Error),
    #[error("action must be fail, fault-tolerance or kill")]
    Report,
    /// An action or follow-up that is no such word.
    #[error(transparent)]
    Value(#[from] BadValue),
}

/// The request of `POST /api/v1/tasks/{id}/reap` from its path segment and
/// body, or the message of a 400. Pure, so that it can be fuzzed: no input
/// panics, and an accepted request carries exactly what the body said.
pub fn parse_reap_request(id: &str, body: &[u8]) -> Result<ReapRequest, BadReapRequest> {
    let Ok(task_id) = id.trim().parse::<i64>() else {
        return Err(BadReapRequest::TaskId(id.to_string()));
    };
    let body: ReapBody = if body.iter().all(|b| b.is_ascii_whitespace()) {
        ReapBody::default()
    } else {
        serde_json::from_slice(body).map_err(BadReapRequest::Body)?
    };
    let action = match body.action.as_deref().map(str::parse::<Action>) {
        None => None,
        Some(Ok(Action::Report)) => return Err(BadReapRequest::Report),
        Some(Ok(a)) => Some(a),
        Some(Err(err)) => return Err(err.into()),
    };
    let workflow = match body.workflow.as_deref().map(str::parse::<FollowUp>) {
        None => None,
        Some(Ok(w)) => Some(w),
        Some(Err(err)) => return Err(err.into()),
    };
    Ok(ReapRequest {
        task_id,
        action,
        workflow,
        force: body.force.unwrap_or(false),
        actor: "api".into(),
    })
}

/// The most records one `GET /api/v1/audit` returns.
pub const AUDIT_LIMIT_MAX: usize = 10_000;

/// A `limit` that is no count (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limit must be a non-negative whole number")]
pub struct BadLimit;

/// `GET /api/v1/audit?limit=`: 100 when absent, at most [`AUDIT_LIMIT_MAX`],
/// or the message of a 400.
pub fn audit_limit(limit: Option<&str>) -> Result<usize, BadLimit> {
    match limit.map(|s| s.trim().parse::<usize>()) {
        None => Ok(100),
        Some(Ok(n)) => Ok(n.min(AUDIT_LIMIT_MAX)),
        Some(Err(_)) => Err(BadLimit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_limit_defaults_caps_and_refuses() {
        assert_eq!(audit_limit(None), Ok(100));
        assert_eq!(audit_limit(Some(" 5 ")), Ok(5));
        assert_eq!(audit_limit(Some("99999999999")), Ok(AUDIT_LIMIT_MAX));
        assert!(audit_limit(Some("-1")).is_err());
        assert!(audit_limit(Some("")).is_err());
    }

    #[test]
    fn reap_request_reads_the_path_and_body() {
        let r = parse_reap_request(" 42 ", br#"{"action":"kill","force":true}"#).expect("valid");
        assert_eq!(
            (r.task_id, r.action, r.force),
            (42, Some(Action::Kill), true)
        );
        assert!(parse_reap_request("42", br#"{"action":"report"}"#).is_err());
        assert!(parse_reap_request("x", b"").is_err());
        assert!(parse_reap_request("1", br#"{"other":1}"#).is_err());
    }
}
