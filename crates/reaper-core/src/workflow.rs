//! Workflow instances that cannot progress (SPEC §13): `workflow_master_lost`
//! and `workflow_stalled`, judged like task zombies — against a valid view,
//! on the daemon's clock, under the same brake, caps and token bucket.

use crate::budget::Budget;
use crate::host;
use crate::line::DsLine;
use crate::plan::Disposition;
use crate::view::{NodeKind, RegistryView};
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// A row of the line's workflow instance table in a watched state, with what
/// the rules need from its task rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowCandidate {
    pub id: i64,
    pub name: String,
    /// The raw state code as read (the write is conditional on it).
    pub state: i32,
    /// Raw host as read: the owning master (conditional writes compare it).
    pub host: Option<String>,
    pub start_time: Option<Instant>,
    pub restart_time: Option<Instant>,
    pub project_code: Option<i64>,
    /// Its `flag = 1` task rows in a non-terminal state, by state code.
    pub tasks_by_state: BTreeMap<i32, i64>,
    /// Hosts of its `flag = 1` task rows in a live state (the task
    /// candidates' states), for the `recover` downgrade.
    pub live_task_hosts: Vec<String>,
    /// The newest `end_time` of its task rows.
    pub last_task_end: Option<Instant>,
    /// Its `flag = 1` task rows in FAILURE or KILL, by state code: with
    /// `tasks_by_state`, where a task action's write shows (SPEC §13).
    #[serde(default)]
    pub ended_by_state: BTreeMap<i32, i64>,
    /// Whether a command for it is queued in `t_ds_command`; None when the
    /// read did not ask (it asks only where a task shows a task action's
    /// target state).
    #[serde(default)]
    pub command_queued: Option<bool>,
    /// Its child workflow instances (the line's parent-child relation) in a
    /// non-terminal state, id to state.
    #[serde(default)]
    pub running_children: BTreeMap<i64, i32>,
}

impl WorkflowCandidate {
    pub fn new(id: i64, state: i32, host: Option<&str>) -> Self {
        WorkflowCandidate {
            id,
            name: format!("workflow-{id}"),
            state,
            host: host.map(str::to_string),
            start_time: None,
            restart_time: None,
            project_code: None,
            tasks_by_state: BTreeMap::new(),
            live_task_hosts: Vec::new(),
            last_task_end: None,
            ended_by_state: BTreeMap::new(),
            command_queued: None,
            running_children: BTreeMap::new(),
        }
    }

    /// Last progress (SPEC §13): the newest task end, else the restart, else the start.
    pub fn last_progress(&self) -> Option<Instant> {
        self.last_task_end.or(self.restart_time).or(self.start_time)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowReason {
    WorkflowMasterLost,
    WorkflowStalled,
}

impl WorkflowReason {
    pub const ALL: [WorkflowReason; 2] = [
        WorkflowReason::WorkflowMasterLost,
        WorkflowReason::WorkflowStalled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowReason::WorkflowMasterLost => "workflow_master_lost",
            WorkflowReason::WorkflowStalled => "workflow_stalled",
        }
    }
}

impl fmt::Display for WorkflowReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowAction {
    Report,
    /// DS's own master-failover rows for the line (SPEC §13).
    Recover,
}

impl WorkflowAction {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowAction::Report => "report",
            WorkflowAction::Recover => "recover",
        }
    }
}

impl fmt::Display for WorkflowAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `[[policy.rules]]` entry about a workflow reason: `project_code` and
/// `owner_master` match, the rest is for tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRule {
    pub reason: Option<WorkflowReason>,
    pub project_code: Option<i64>,
    pub owner_master: Option<crate::OwnerMaster>,
    pub action: Option<WorkflowAction>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowPolicy {
    pub master_lost: WorkflowAction,
    pub grace_period: Duration,
    pub stall_after: Duration,
    pub rules: Vec<WorkflowRule>,
    /// `check`: a master never seen counts as lost for an unknown time.
    pub unseen_absence: crate::UnseenAbsence,
    /// A task follow-up `recover` left undone (SPEC §13).
    pub resume: Resume,
}

impl Default for WorkflowPolicy {
    fn default() -> Self {
        WorkflowPolicy {
            master_lost: WorkflowAction::Report,
            grace_period: Duration::from_secs(15 * 60),
            stall_after: Duration::from_secs(30 * 60),
            rules: Vec::new(),
            unseen_absence: crate::UnseenAbsence::SinceViewValid,
            resume: Resume::default(),
        }
    }
}

impl WorkflowPolicy {
    fn decide(
        &self,
        reason: WorkflowReason,
        wf: &WorkflowCandidate,
        owner_alive: bool,
    ) -> WorkflowAction {
        let rule = self.rules.iter().find(|r| {
            r.reason.is_none_or(|x| x == reason)
                && r.project_code.is_none_or(|p| wf.project_code == Some(p))
                && r.owner_master
                    .is_none_or(|o| (o == crate::OwnerMaster::Alive) == owner_alive)
        });
        let action = rule.and_then(|r| r.action).unwrap_or(match reason {
            WorkflowReason::WorkflowMasterLost => self.master_lost,
            WorkflowReason::WorkflowStalled => WorkflowAction::Report,
        });
        // A stalled workflow's master holds it in memory: report only.
        if reason == WorkflowReason::WorkflowStalled {
            WorkflowAction::Report
        } else {
            action
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkflowEvidence {
    pub lost_at: Option<Instant>,
    pub absent_for_seconds: Option<i64>,
    pub last_progress_at: Option<Instant>,
    /// Non-terminal `flag = 1` task rows by state name.
    pub tasks_by_state: BTreeMap<String, i64>,
    /// Its `flag = 1` tasks in the target state of a task action followed
    /// by `recover`, when that made the workflow wait only `grace_period`
    /// (SPEC §13: a follow-up survives a change of leader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_tasks: Option<i64>,
}

/// A workflow instance found unable to progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowFinding {
    pub workflow: WorkflowCandidate,
    pub state_name: String,
    pub reason: WorkflowReason,
    pub evidence: WorkflowEvidence,
    pub owner_master_alive: bool,
    pub action: WorkflowAction,
    pub note: Option<String>,
    pub disposition: Disposition,
}

/// The workflow states whose stall is `workflow_stop_stuck`, not
/// `workflow_stalled`: READY_PAUSE, READY_STOP.
pub const STOP_STATES: [i32; 2] = [2, 4];

/// Workflow state names (the workflow enum; codes agree on every line,
/// reference §1).
pub fn workflow_state_name(code: i32) -> Option<&'static str> {
    Some(match code {
        0 => "SUBMITTED_SUCCESS",
        1 => "RUNNING_EXECUTION",
        2 => "READY_PAUSE",
        3 => "PAUSE",
        4 => "READY_STOP",
        5 => "STOP",
        6 => "FAILURE",
        7 => "SUCCESS",
        8 => "NEED_FAULT_TOLERANCE",
        9 => "KILL",
        10 => "WAITING_THREAD",
        11 => "WAITING_DEPEND",
        12 => "DELAY_EXECUTION",
        13 => "FORCED_SUCCESS",
        14 => "SERIAL_WAIT",
        15 => "READY_BLOCK",
        16 => "BLOCK",
        17 => "WAIT_TO_RUN",
        18 => "FAILOVER",
        _ => return None,
    })
}

/// The code of a workflow state name on a line, if the line's workflow
/// enum has it (the watched states must be non-terminal there).
pub fn workflow_state_code(line: DsLine, name: &str) -> Option<i32> {
    let n = name.trim();
    let code = (0..=18).find(|c| {
        workflow_state_name(*c).is_some_and(|x| x.eq_ignore_ascii_case(n))
            || (*c == 1 && n.eq_ignore_ascii_case("RUNNING_EXEUTION"))
    })?;
    line.workflow_non_terminal_states()
        .contains(&code)
        .then_some(code)
}

/// `reconcile.workflow_states` when unset.
pub const DEFAULT_WORKFLOW_STATES: [i32; 3] = [1, 2, 4];

/// Judges workflow candidates after the task plan of the same sweep, the
/// writes it wants admitted through that sweep's budget: one hold, brake,
/// settle, cap and bucket for task and workflow writes.
pub fn plan_workflows(
    view: &RegistryView,
    workflows: &[WorkflowCandidate],
    now: Instant,
    line: DsLine,
    policy: &WorkflowPolicy,
    budget: &mut Budget,
) -> Vec<WorkflowFinding> {
    let Some(valid_since) = view.valid_since() else {
        return Vec::new();
    };
    let mut findings = Vec::new();
    for wf in workflows {
        let Some(mut f) = judge(view, valid_since, wf, now, line, policy, budget.settle) else {
            continue;
        };
        if f.disposition == Disposition::Act {
            f.disposition = budget.admit(valid_since, now);
        }
        findings.push(f);
    }
    findings
}

fn judge(
    view: &RegistryView,
    valid_since: Instant,
    wf: &WorkflowCandidate,
    now: Instant,
    line: DsLine,
    policy: &WorkflowPolicy,
    settle: Duration,
) -> Option<WorkflowFinding> {
    // NULL / 'NULL' / empty: in DS's own failover hands, not judged.
    let master = wf.host.as_deref().filter(|h| !host::is_empty(Some(h)))?;
    let mut evidence = WorkflowEvidence {
        last_progress_at: wf.last_progress(),
        tasks_by_state: wf
            .tasks_by_state
            .iter()
            .map(|(code, n)| {
                let name = line
                    .state_name(*code)
                    .map(str::to_string)
                    .unwrap_or_else(|| code.to_string());
                (name, *n)
            })
            .collect(),
        ..WorkflowEvidence::default()
    };
    let alive = view.live(NodeKind::Master, master).is_some();
    let reason = if alive {
        stalled(wf, now, policy)?
    } else {
        master_lost(view, valid_since, wf, master, now, policy, &mut evidence)?
    };
    let (action, note) = holds::downgraded(
        view,
        wf,
        master,
        now,
        line,
        settle,
        policy.decide(reason, wf, alive),
    );
    Some(WorkflowFinding {
        state_name: workflow_state_name(wf.state)
            .unwrap_or("UNKNOWN")
            .to_string(),
        workflow: wf.clone(),
        reason,
        evidence,
        owner_master_alive: alive,
        action,
        note,
        disposition: if action == WorkflowAction::Recover {
            Disposition::Act
        } else {
            Disposition::Report
        },
    })
}

/// Under a live master: idle past `stall_after` since its last progress.
fn stalled(
    wf: &WorkflowCandidate,
    now: Instant,
    policy: &WorkflowPolicy,
) -> Option<WorkflowReason> {
    // READY_PAUSE / READY_STOP under a live master is workflow_stop_stuck (SPEC §16)
    if STOP_STATES.contains(&wf.state) {
        return None;
    }
    let idle = wf.tasks_by_state.values().all(|n| *n == 0);
    let progress = wf.last_progress()?;
    if !idle || now - progress < delta(policy.stall_after) {
        return None;
    }
    Some(WorkflowReason::WorkflowStalled)
}

/// Its master gone past the workflow grace period (a master never seen
/// counts from the later of the view's validity and the workflow's own time).
fn master_lost(
    view: &RegistryView,
    valid_since: Instant,
    wf: &WorkflowCandidate,
    master: &str,
    now: Instant,
    policy: &WorkflowPolicy,
    evidence: &mut WorkflowEvidence,
) -> Option<WorkflowReason> {
    let (lost_at, absent) = match view.lost_at(NodeKind::Master, master) {
        Some(at) => (Some(at), Some(now - at)),
        None => match policy.unseen_absence {
            crate::UnseenAbsence::SinceViewValid => {
                let own = wf.restart_time.or(wf.start_time);
                let from = own.map_or(valid_since, |t| t.max(valid_since));
                (None, Some(now - from))
            }
            crate::UnseenAbsence::Unknown => (None, None),
        },
    };
    let resumed = resume::written_tasks(wf, &policy.resume);
    let grace = match resumed {
        Some(_) => policy.resume.grace_period.min(policy.grace_period),
        None => policy.grace_period,
    };
    if absent.is_some_and(|a| a < delta(grace)) {
        return None;
    }
    evidence.resumed_tasks = resumed;
    evidence.lost_at = lost_at;
    evidence.absent_for_seconds = absent.map(|a| a.num_seconds());
    Some(WorkflowReason::WorkflowMasterLost)
}

mod holds;
mod resume;

pub use resume::{resume_targets, Resume};

#[cfg(test)]
mod tests;
