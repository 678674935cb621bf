//! One YARN application of a task as the ResourceManager answered (SPEC
//! §17): evidence a zombie carries, and what the remote-application rules
//! judge.

use serde::{Deserialize, Serialize};

/// One application of a task as the RM last answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteApp {
    pub id: String,
    /// The RM's `state`; None when unknown (the RM could not be reached,
    /// answered 404, or was not asked).
    pub state: Option<String>,
    #[serde(default)]
    pub final_status: Option<String>,
    /// The RM's `startedTime` (epoch ms), when it said: whether the
    /// application can be the task's own (SPEC §17). Judged on, not shown:
    /// the views keep SPEC §17's `{"id", "state", "final_status"}`.
    #[serde(default, skip_serializing)]
    pub started_time: Option<i64>,
    /// The RM's `user`, when it said.
    #[serde(default, skip_serializing)]
    pub user: Option<String>,
}

impl RemoteApp {
    /// An application nothing is known of yet.
    pub fn unknown(id: impl Into<String>) -> RemoteApp {
        RemoteApp {
            id: id.into(),
            state: None,
            final_status: None,
            started_time: None,
            user: None,
        }
    }
}

/// Where an application is, as far as acting on its task goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppPhase {
    /// NEW, NEW_SAVING, SUBMITTED, ACCEPTED, RUNNING: it may still do work.
    Live,
    /// FINISHED, FAILED, KILLED.
    Final,
    /// No answer, or a state this build does not know: it may run.
    Unknown,
}

impl RemoteApp {
    pub fn phase(&self) -> AppPhase {
        match self.state.as_deref().map(str::trim) {
            Some("NEW" | "NEW_SAVING" | "SUBMITTED" | "ACCEPTED" | "RUNNING") => AppPhase::Live,
            Some("FINISHED" | "FAILED" | "KILLED") => AppPhase::Final,
            _ => AppPhase::Unknown,
        }
    }
}
