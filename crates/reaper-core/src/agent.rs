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
    /// Each of the task's processes (SPEC §12); older agents send none.
    #[serde(default)]
    pub processes: Vec<AgentProcess>,
    /// The task's YARN application ids found on the worker host (SPEC §17);
    /// older agents send none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub app_ids: Vec<String>,
    /// Whose process tree this is (SPEC §12): descended from the agent's
    /// worker JVM, or an orphan. Older agents send none, which never counts
    /// as `own`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<Lineage>,
}

/// Where a listed task's process tree comes from (SPEC §12). Several
/// workers may share a host and its `exec_base`: only `Own` says the tree
/// is this agent's worker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lineage {
    /// Descends from this agent's worker JVM (directly or through `sudo`),
    /// or did when the agent first saw it.
    Own,
    /// Its ancestry ends at pid 1, a subreaper or outside the agent's PID
    /// namespace, and the agent never saw it under a JVM.
    Orphan,
}

impl Lineage {
    pub fn as_str(self) -> &'static str {
        match self {
            Lineage::Own => "own",
            Lineage::Orphan => "orphan",
        }
    }
}

/// One process of a task as the agent saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentProcess {
    pub pid: i32,
    /// Epoch ms when the process started.
    pub started_at: i64,
    /// Whether it has a controlling terminal (an operator's shell has one).
    #[serde(default)]
    pub tty: bool,
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
    /// Set while the agent cannot see what it must (SPEC §12: the process
    /// folder is missing, the worker's JVM is not visible): it proves nothing.
    #[serde(default)]
    pub blind: Option<String>,
    /// Listed tasks all of whose processes have a controlling terminal
    /// (SPEC §12: sudo's `use_pty`); such tasks are never ghosts.
    #[serde(default)]
    pub tty_tasks: u64,
    /// The YARN application-id sources the agent can read for its line
    /// (SPEC §17: `appinfo`, `task_log`); None from older agents, which
    /// did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id_sources: Option<Vec<String>>,
    pub tasks: Vec<AgentTask>,
    /// What the agent did with the daemon's kill orders since its previous
    /// report (SPEC §15); older agents send none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orders: Vec<crate::order::OrderOutcome>,
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

    /// A report that can prove absence: every process read, not blind.
    pub fn complete(&self) -> bool {
        self.unreadable == 0 && self.blind.is_none()
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
    /// When a report listing each task last arrived (evidence
    /// `process_seen_at`; a later listing also resets a missing clock).
    #[serde(default)]
    pub listed_at: std::collections::BTreeMap<i64, Instant>,
    /// The latest fresh reports of the current streak, oldest first (at
    /// most [`HISTORY`]): when each arrived, when its scan began, what it
    /// listed. The planner finds in it the first report that lacked a task.
    #[serde(default)]
    pub history: std::collections::VecDeque<ReportMark>,
    /// When the daemon last received a complete report (every process read,
    /// not blind): the latest proof of absence for what it does not list.
    #[serde(default)]
    pub complete_at: Option<Instant>,
    /// When the agent's node went away; None while it exists. A gone agent is
    /// never fresh, but its last listings still hold (SPEC §12: an agent
    /// restart, or its session lost in the blip that dropped the worker).
    #[serde(default)]
    pub gone_at: Option<Instant>,
}

/// One fresh report, as the planner needs it later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportMark {
    pub received_at: Instant,
    /// Epoch ms.
    pub scan_started_at: i64,
    /// Task ids listed, sorted.
    pub tasks: Vec<i64>,
}

/// Reports kept per agent: enough to cover the time between two sweeps; a
/// missing clock, once started, is kept by the planner.
pub const HISTORY: usize = 16;

/// How long `listed_at` remembers a task no report lists any more.
pub const LISTED_KEEP: chrono::TimeDelta = chrono::TimeDelta::hours(1);

impl AgentSeen {
    /// A report arrived at `now`. `since` carries over only from a previous
    /// report that was fresh and arrived within `stale_after`, with no gap
    /// (`gap`) in the daemon's sight of the registry in between: any gap in
    /// the agent's freshness restarts the missing clocks (SPEC §12).
    pub fn received(
        prev: Option<&AgentSeen>,
        report: Option<AgentReport>,
        now: Instant,
        gap: bool,
        stale_after: std::time::Duration,
    ) -> AgentSeen {
        let mut listed_at = prev.map(|p| p.listed_at.clone()).unwrap_or_default();
        listed_at.retain(|_, t| now - *t <= LISTED_KEEP);
        if let Some(r) = &report {
            for t in &r.tasks {
                listed_at.insert(t.task_id, now);
            }
        }
        let (since, mut history) = match prev {
            Some(p) if !gap && p.fresh(now, stale_after) => (p.since, p.history.clone()),
            _ => (now, std::collections::VecDeque::new()),
        };
        let complete = report.as_ref().is_some_and(AgentReport::complete);
        let complete_at = if complete {
            Some(now)
        } else {
            prev.and_then(|p| p.complete_at)
        };
        if let Some(r) = report.as_ref().filter(|r| r.complete()) {
            let mut tasks: Vec<i64> = r.tasks.iter().map(|t| t.task_id).collect();
            tasks.sort_unstable();
            tasks.dedup();
            if history.len() == HISTORY {
                history.pop_front();
            }
            history.push_back(ReportMark {
                received_at: now,
                scan_started_at: r.scan_started_at,
                tasks,
            });
        }
        AgentSeen {
            report,
            received_at: now,
            since,
            listed_at,
            history,
            complete_at,
            gone_at: None,
        }
    }

    /// The agent's node went away at `now`: kept for its listings' hold.
    pub fn gone(&self, now: Instant) -> AgentSeen {
        AgentSeen {
            gone_at: Some(self.gone_at.unwrap_or(now)),
            ..self.clone()
        }
    }

    /// SPEC §12, seen then gone: when a report of the current freshness
    /// streak last listed the task, if one did. A listing before the streak
    /// began (an agent restart, a stale spell, a gap) does not count.
    pub fn listed_in_streak(&self, task_id: i64) -> Option<Instant> {
        self.listed_at
            .get(&task_id)
            .copied()
            .filter(|l| *l >= self.since)
    }

    /// SPEC §12, the hold: a report listed the task within `stale_after`
    /// (by arrival) and no complete report arrived after that listing —
    /// positive evidence, whatever the listing report's `unreadable` or
    /// `blind`, and also after the agent's node went away.
    pub fn holds(&self, task_id: i64, now: Instant, stale_after: std::time::Duration) -> bool {
        let Some(listed) = self.listed_at.get(&task_id).copied() else {
            return false;
        };
        now - listed <= crate::delta(stale_after) && self.complete_at.is_none_or(|c| c <= listed)
    }
}

impl AgentSeen {
    /// Fresh (SPEC §12): the node exists, its last change arrived within
    /// `stale_after`, and that report read every process.
    pub fn fresh(&self, now: Instant, stale_after: std::time::Duration) -> bool {
        self.gone_at.is_none()
            && self.report.as_ref().is_some_and(AgentReport::complete)
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
            tty_tasks: 0,
            app_id_sources: None,
            worker: "w".into(),
            agent_version: "x".into(),
            seq: 1,
            scan_started_at: 0,
            scan_ms: 1,
            exec_base: "/x".into(),
            unreadable: 0,
            orders: Vec::new(),
            blind: None,
            tasks: vec![],
        };
        let stale = std::time::Duration::from_secs(35);
        let seen = AgentSeen::received(None, Some(report.clone()), t(0), false, stale);
        assert!(seen.fresh(t(35), stale));
        // a report within the window keeps `since`; after a stale spell or a gap it restarts
        let next = AgentSeen::received(Some(&seen), Some(report.clone()), t(30), false, stale);
        assert_eq!((next.since, next.received_at), (t(0), t(30)));
        let late = AgentSeen::received(Some(&next), Some(report.clone()), t(70), false, stale);
        assert_eq!(late.since, t(70));
        let gap = AgentSeen::received(Some(&next), Some(report.clone()), t(40), true, stale);
        assert_eq!(gap.since, t(40));
        assert!(!seen.fresh(t(36), stale));
        let denied = AgentSeen {
            report: Some(AgentReport {
                tty_tasks: 0,
                app_id_sources: None,
                unreadable: 1,
                orders: Vec::new(),
                blind: None,
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
