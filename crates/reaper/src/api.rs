//! What the HTTP API reads from its callers — the reap request's path and
//! body, the audit listing's `limit` — as pure functions: they carry no
//! runtime, so the fuzz targets build them without the daemon's adapters
//! (`reaper` without its `daemon` feature).

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

/// The request of `POST /api/v1/tasks/{id}/reap` from its path segment and
/// body, or the message of a 400. Pure, so that it can be fuzzed: no input
/// panics, and an accepted request carries exactly what the body said.
pub fn parse_reap_request(id: &str, body: &[u8]) -> Result<ReapRequest, String> {
    let Ok(task_id) = id.trim().parse::<i64>() else {
        return Err(format!("task id {id:?} is not a number"));
    };
    let body: ReapBody = if body.iter().all(|b| b.is_ascii_whitespace()) {
        ReapBody::default()
    } else {
        serde_json::from_slice(body).map_err(|err| format!("invalid JSON body: {err}"))?
    };
    let action = match body.action.as_deref().map(str::parse::<Action>) {
        None => None,
        Some(Ok(Action::Report)) => {
            return Err("action must be fail, fault-tolerance or kill".into());
        }
        Some(Ok(a)) => Some(a),
        Some(Err(err)) => return Err(err.to_string()),
    };
    let workflow = match body.workflow.as_deref().map(str::parse::<FollowUp>) {
        None => None,
        Some(Ok(w)) => Some(w),
        Some(Err(err)) => return Err(err.to_string()),
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

/// `GET /api/v1/audit?limit=`: 100 when absent, at most [`AUDIT_LIMIT_MAX`],
/// or the message of a 400.
pub fn audit_limit(limit: Option<&str>) -> Result<usize, &'static str> {
    match limit.map(|s| s.trim().parse::<usize>()) {
        None => Ok(100),
        Some(Ok(n)) => Ok(n.min(AUDIT_LIMIT_MAX)),
        Some(Err(_)) => Err("limit must be a non-negative whole number"),
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
