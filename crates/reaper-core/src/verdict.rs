//! What the planners decide about a zombie: the [`Zombie`] with its
//! [`Disposition`], why an action is [`Blocked`], the notes a held action
//! shows, and the state kept between sweeps. Plain data: the planner, the
//! budget and the remote-application rules all build on it.

use crate::brake::BrakeState;
use crate::candidate::Candidate;
use crate::policy::{Action, FollowUp};
use crate::rate::TokenBucket;
use crate::reason::{Evidence, Reason};
use crate::Instant;
use serde::{Deserialize, Serialize};

/// The note of a task held while one of its applications runs.
pub const REMOTE_APP_RUNNING: &str = "remote_app_running";
/// The note of a task held because the RM could not say.
pub const REMOTE_APP_UNKNOWN: &str = "remote_app_unknown";
/// The note of a YARN task held because its host's agent reads no id source.
pub const REMOTE_APP_IDS_UNKNOWN: &str = "remote_app_ids_unknown";

/// What the plan remembers between sweeps. A hold is no memory: it is an
/// input of each sweep's budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SafetyState {
    pub brake: BrakeState,
    /// None until the first plan: the bucket then starts full.
    pub bucket: Option<TokenBucket>,
    /// SPEC §12: per task, since when a fresh agent's reports lack its
    /// process (the daemon's clock).
    #[serde(default)]
    pub missing_since: std::collections::BTreeMap<i64, Instant>,
}

/// The note of a zombie whose process a fresh agent still lists.
pub const PROCESS_ALIVE: &str = "process_alive";

/// Why an action the policy asked for is not taken in this sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "blocked", content = "why")]
pub enum Blocked {
    /// Inside `startup_settle` after the view became valid.
    Settling,
    /// A hold set by the daemon (see `Budget::hold`).
    Hold(String),
    Brake(String),
    /// `max_actions_per_sweep` reached.
    SweepCap,
    /// The per-minute token bucket is empty.
    RateLimit,
    /// The action's state code does not exist on the line (never written).
    Unwritable,
    /// A fresh agent lists the task's process (SPEC §12): never acted on for
    /// a lost, restarted or stale worker while it runs.
    ProcessAlive,
    /// A SUB_PROCESS task whose child workflow instance is not finished
    /// (SPEC §3): the child is the task's process.
    ChildWorkflowRunning,
    /// One of the task's YARN applications may still run (SPEC §17).
    RemoteAppRunning,
    /// The ResourceManager could not say whether the task's applications
    /// run (SPEC §17).
    RemoteAppUnknown,
    /// A YARN task whose host's agent can read no application-id source
    /// (SPEC §17, `[yarn] require_ids`): its application may run unseen.
    RemoteAppIdsUnknown,
}

/// The note of a SUB_PROCESS task whose child workflow still runs.
pub const CHILD_WORKFLOW_RUNNING: &str = "child_workflow_running";

/// The note of a recover skipped while DS fails the owning master over.
pub const DS_FAILOVER_IN_PROGRESS: &str = "ds_failover_in_progress";

impl Blocked {
    pub fn describe(&self) -> String {
        match self {
            Blocked::Settling => "registry view is settling (startup_settle)".into(),
            Blocked::Hold(w) => format!("held: {w}"),
            Blocked::Brake(w) => format!("brake engaged: {w}"),
            Blocked::SweepCap => "max_actions_per_sweep reached".into(),
            Blocked::RateLimit => "rate limit (rate.per_minute) reached".into(),
            Blocked::Unwritable => "the action's state code does not exist on this DS line".into(),
            Blocked::ProcessAlive => PROCESS_ALIVE.into(),
            Blocked::ChildWorkflowRunning => CHILD_WORKFLOW_RUNNING.into(),
            Blocked::RemoteAppRunning => REMOTE_APP_RUNNING.into(),
            Blocked::RemoteAppUnknown => REMOTE_APP_UNKNOWN.into(),
            Blocked::RemoteAppIdsUnknown => REMOTE_APP_IDS_UNKNOWN.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Write now.
    Act,
    /// Policy says `report`: nothing to write.
    Report,
    /// Policy wants a write but a safety rule holds it back.
    Blocked(Blocked),
}

/// A candidate found to be a zombie, with everything `check` and the API show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Zombie {
    pub task: Candidate,
    /// Canonical name of the row's state on the line.
    pub state_name: String,
    pub reason: Reason,
    pub evidence: Evidence,
    /// The workflow's owning master (its `host`), None when `NULL`/empty.
    pub owner_master: Option<String>,
    pub owner_master_alive: bool,
    pub action: Action,
    pub workflow: FollowUp,
    /// Why the action or follow-up was downgraded, if it was.
    pub note: Option<String>,
    pub disposition: Disposition,
}
