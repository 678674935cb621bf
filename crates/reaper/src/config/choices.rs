//! The values some keys choose from: DS line, registry, log format, the
//! workflow actions, and the reasons and actions a `[[policy.rules]]` entry
//! can name. Each reads and prints as the word the SPEC uses.

use reaper_core::line::UnknownLine;
use reaper_core::{Action, DsLine, Reason};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// `dolphinscheduler.version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VersionSetting {
    #[default]
    Auto,
    Line(DsLine),
}

impl FromStr for VersionSetting {
    type Err = UnknownLine;
    fn from_str(s: &str) -> Result<Self, UnknownLine> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(VersionSetting::Auto);
        }
        s.parse::<DsLine>().map(VersionSetting::Line)
    }
}

impl fmt::Display for VersionSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionSetting::Auto => f.write_str("auto"),
            VersionSetting::Line(l) => write!(f, "{l}"),
        }
    }
}

/// `registry.type`. Only ZooKeeper is built so far: the others are accepted
/// here (they are SPEC keys) and refused by the commands that would use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegistryKind {
    #[default]
    Zookeeper,
    Etcd,
    Jdbc,
}

impl RegistryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RegistryKind::Zookeeper => "zookeeper",
            RegistryKind::Etcd => "etcd",
            RegistryKind::Jdbc => "jdbc",
        }
    }
}

/// `agent.worker`: the worker's registered node name, or found by address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentWorker {
    Auto,
    Named(String),
}

/// An empty `agent.worker`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be \"auto\" or the worker's registered node name")]
pub struct NoWorkerName;

impl FromStr for AgentWorker {
    type Err = NoWorkerName;
    fn from_str(s: &str) -> Result<Self, NoWorkerName> {
        match s.trim() {
            "" => Err(NoWorkerName),
            t if t.eq_ignore_ascii_case("auto") => Ok(AgentWorker::Auto),
            t => Ok(AgentWorker::Named(t.to_string())),
        }
    }
}

impl fmt::Display for AgentWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentWorker::Auto => f.write_str("auto"),
            AgentWorker::Named(n) => f.write_str(n),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Json,
    Pretty,
}

/// `policy.workflow_master_lost` (SPEC §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkflowAction {
    #[default]
    Report,
    Recover,
}

/// `policy.workflow_stalled`: a stalled workflow's master holds it in memory
/// and would not see a write, so report is the only action (SPEC §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StalledAction {
    #[default]
    Report,
}

/// A reason a rule can name: reaper-core's task reasons, and those of the
/// agent (SPEC §12) and of workflow findings (SPEC §13), which the planner
/// does not produce yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonName {
    WorkerLost,
    WorkerRestarted,
    HeartbeatStale,
    MasterLost,
    NoHost,
    ProcessGone,
    WorkflowMasterLost,
    WorkflowStalled,
    /// SPEC §15: a process that should not be running.
    GhostProcess,
}

/// A rule's `action`: a task action, or `recover` for `workflow_master_lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleAction {
    Report,
    Fail,
    FaultTolerance,
    Kill,
    Recover,
}

impl ReasonName {
    /// The planner's reason, for those it judges today.
    pub fn core(self) -> Option<Reason> {
        match self {
            ReasonName::WorkerLost => Some(Reason::WorkerLost),
            ReasonName::WorkerRestarted => Some(Reason::WorkerRestarted),
            ReasonName::HeartbeatStale => Some(Reason::HeartbeatStale),
            ReasonName::MasterLost => Some(Reason::MasterLost),
            ReasonName::NoHost => Some(Reason::NoHost),
            ReasonName::ProcessGone => Some(Reason::ProcessGone),
            ReasonName::WorkflowMasterLost
            | ReasonName::WorkflowStalled
            | ReasonName::GhostProcess => None,
        }
    }

    /// A finding about a workflow instance (SPEC §13), not a task.
    pub fn is_workflow(self) -> bool {
        matches!(
            self,
            ReasonName::WorkflowMasterLost | ReasonName::WorkflowStalled
        )
    }
}

impl RuleAction {
    /// The task action; None for `recover`, which only workflows take.
    pub fn task_action(self) -> Option<Action> {
        match self {
            RuleAction::Report => Some(Action::Report),
            RuleAction::Fail => Some(Action::Fail),
            RuleAction::FaultTolerance => Some(Action::FaultTolerance),
            RuleAction::Kill => Some(Action::Kill),
            RuleAction::Recover => None,
        }
    }
}
