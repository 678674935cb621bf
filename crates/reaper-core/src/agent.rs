//! What the worker-host agent publishes (SPEC §12) and how the daemon reads
//! it: one report per scan, the rewrite of its registry node being the
//! agent's heartbeat.

use crate::Instant;
use serde::{Deserialize, Serialize};

/// One task instance whose process the agent saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTask {
    pub task_id: i64,
    pub workflow_instance_id: i64,
    pub pids: Vec<i32>,
    /// Epoch ms of the task's oldest process.
    pub started_at: i64,
}

/// The data of `<root>/<agent.path>/<worker>`, rewritten after every scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The worker's registered node name (1.2: the ip).
    pub worker: String,
    pub agent_version: String,
    /// Increases with every scan of one agent process.
    pub seq: u64,
    /// Epoch ms when the scan started.
    pub scan_started_at: i64,
    pub scan_ms: u64,
    pub exec_base: String,
    /// Processes the agent was denied: such a scan proves no absence.
    pub unreadable: u64,
    pub tasks: Vec<AgentTask>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("agent report of {node}: {why}")]
pub struct BadReport {
    pub node: String,
    pub why: String,
}

impl AgentReport {
    /// Parses a node's data; unknown fields are ignored.
    pub fn parse(node: &str, data: &[u8]) -> Result<AgentReport, BadReport> {
        serde_json::from_slice(data).map_err(|e| BadReport {
            node: node.to_string(),
            why: e.to_string(),
        })
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// When the scan started, as an instant (None for an absurd value).
    pub fn scan_started(&self) -> Option<Instant> {
        chrono::DateTime::from_timestamp_millis(self.scan_started_at)
    }

    pub fn lists(&self, task_id: i64) -> bool {
        self.tasks.iter().any(|t| t.task_id == task_id)
    }
}

/// What the daemon knows of one worker's agent, stamped on its own clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSeen {
    /// The latest report; None when the node's data could not be parsed.
    pub report: Option<AgentReport>,
    /// When the daemon received the latest change of the node.
    pub received_at: Instant,
    /// Since when the daemon has seen this agent without a gap (a new
    /// session, a reconnect or the node's absence restarts it).
    pub since: Instant,
}

impl AgentSeen {
    /// Fresh (SPEC §12): the node exists, its last change arrived within
    /// `stale_after`, and that report read every process.
    pub fn fresh(&self, now: Instant, stale_after: std::time::Duration) -> bool {
        self.report.as_ref().is_some_and(|r| r.unreadable == 0)
            && now - self.received_at <= crate::delta(stale_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_shape_and_ignores_unknown_fields() {
        let data = br#"{"worker":"10.0.1.11:1234","agent_version":"0.1.0","seq":7,
            "scan_started_at":1700000000000,"scan_ms":12,"exec_base":"/tmp/dolphinscheduler",
            "unreadable":0,"tasks":[{"task_id":42,"workflow_instance_id":9,"pids":[100,101],
            "started_at":1699999990000}],"future_field":true}"#;
        let r = AgentReport::parse("10.0.1.11:1234", data).unwrap();
        assert_eq!(r.seq, 7);
        assert!(r.lists(42));
        assert!(!r.lists(43));
        assert_eq!(r.scan_started().unwrap().timestamp(), 1_700_000_000);
        assert_eq!(AgentReport::parse("x", &r.to_json()).unwrap(), r);
    }

    #[test]
    fn a_bad_report_is_an_error_naming_the_node() {
        let e = AgentReport::parse("w1", b"{not json").unwrap_err();
        assert_eq!(e.node, "w1");
    }

    #[test]
    fn freshness() {
        let t = |s: i64| chrono::DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap();
        let report = AgentReport {
            worker: "w".into(),
            agent_version: "x".into(),
            seq: 1,
            scan_started_at: 0,
            scan_ms: 1,
            exec_base: "/x".into(),
            unreadable: 0,
            tasks: vec![],
        };
        let seen = AgentSeen {
            report: Some(report.clone()),
            received_at: t(0),
            since: t(0),
        };
        let stale = std::time::Duration::from_secs(35);
        assert!(seen.fresh(t(35), stale));
        assert!(!seen.fresh(t(36), stale));
        let denied = AgentSeen {
            report: Some(AgentReport {
                unreadable: 1,
                ..report
            }),
            ..seen.clone()
        };
        assert!(!denied.fresh(t(1), stale));
        let unparsable = AgentSeen {
            report: None,
            ..seen
        };
        assert!(!unparsable.fresh(t(1), stale));
    }
}
