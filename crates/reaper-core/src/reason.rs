//! Why a candidate is a zombie (SPEC §3) and the evidence behind it.

use crate::Instant;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    WorkerLost,
    WorkerRestarted,
    HeartbeatStale,
    MasterLost,
    NoHost,
    /// The task's process is gone from its live worker (SPEC §12).
    ProcessGone,
}

impl Reason {
    pub const ALL: [Reason; 6] = [
        Reason::WorkerLost,
        Reason::WorkerRestarted,
        Reason::HeartbeatStale,
        Reason::MasterLost,
        Reason::NoHost,
        Reason::ProcessGone,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::WorkerLost => "worker_lost",
            Reason::WorkerRestarted => "worker_restarted",
            Reason::HeartbeatStale => "heartbeat_stale",
            Reason::MasterLost => "master_lost",
            Reason::NoHost => "no_host",
            Reason::ProcessGone => "process_gone",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reason {0:?} (expected worker_lost, worker_restarted, heartbeat_stale, master_lost, no_host or process_gone)")]
pub struct UnknownReason(pub String);

impl FromStr for Reason {
    type Err = UnknownReason;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == s.trim())
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

/// What the planner saw that made it decide. Fields that do not apply are None
/// (serialised as null), so every zombie has the same JSON shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// When the daemon saw the host go; None if it never saw it live.
    pub lost_at: Option<Instant>,
    /// How long the host has been absent; None when unknown (`check` without
    /// having seen the loss).
    pub absent_for_seconds: Option<i64>,
    /// Heartbeat startup time of the live host.
    pub startup_time: Option<Instant>,
    /// Heartbeat report time of the live host.
    pub report_time: Option<Instant>,
    /// The task time the rule compared with (submit or start time).
    pub task_time: Option<Instant>,
    /// The latest agent report listing the task's process (SPEC §12).
    pub process_seen_at: Option<Instant>,
    /// Since when a fresh agent's reports have lacked the task's process.
    pub process_missing_since: Option<Instant>,
    /// The task's known YARN applications with the RM's answers (SPEC §17).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote_apps: Vec<crate::remote_app::RemoteApp>,
    /// Ids found for the task that are not its own (SPEC §17: started before
    /// it, another user's, or another task's too): shown, never killed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign_app_ids: Vec<String>,
}
