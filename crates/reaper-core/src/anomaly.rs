//! Stuck under a live owner (SPEC §16): findings that page someone and are
//! never acted on. The owning master is alive and holds the workflow in its
//! memory, so a database write would not reach it: whatever the policy says,
//! nothing here leads to a write.

mod duplicate;
mod stalled;

use crate::candidate::Candidate;
use crate::host;
use crate::line::DsLine;
use crate::view::{NodeKind, RegistryView};
use crate::workflow::WorkflowCandidate;
use crate::Instant;
use duplicate::{duplicate_listings, duplicate_rows};
use serde::{Deserialize, Serialize};
use stalled::{dispatch_stalled, serial_stuck, stop_stuck};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    DispatchStalled,
    WorkflowStopStuck,
    SerialWaitStuck,
    DuplicateAttempt,
}

impl AnomalyKind {
    pub const ALL: [AnomalyKind; 4] = [
        AnomalyKind::DispatchStalled,
        AnomalyKind::WorkflowStopStuck,
        AnomalyKind::SerialWaitStuck,
        AnomalyKind::DuplicateAttempt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AnomalyKind::DispatchStalled => "dispatch_stalled",
            AnomalyKind::WorkflowStopStuck => "workflow_stop_stuck",
            AnomalyKind::SerialWaitStuck => "serial_wait_stuck",
            AnomalyKind::DuplicateAttempt => "duplicate_attempt",
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The task states whose rows wait for a dispatch (SPEC §16), as the line
/// spells them; those it lacks are left out.
pub const QUEUED_STATES: [&str; 3] = ["SUBMITTED_SUCCESS", "DISPATCH", "DELAY_EXECUTION"];

pub use crate::workflow::STOP_STATES;

/// The workflow state SERIAL_WAIT.
pub const SERIAL_WAIT: i32 = 14;

/// The queued task state codes of a line.
pub fn queued_states(line: DsLine) -> Vec<i32> {
    QUEUED_STATES
        .iter()
        .filter_map(|n| line.state_code(n))
        .collect()
}

/// A 3.4+ workflow in SERIAL_WAIT with a waiting `t_ds_serial_command` row,
/// and how many instances of its definition run meanwhile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SerialWait {
    pub workflow_instance_id: i64,
    pub serial_command_id: i64,
    pub definition_code: i64,
    /// The workflow's `host`, as read.
    pub workflow_host: Option<String>,
    /// The serial command's `create_time`, else the workflow's `start_time`.
    pub waiting_since: Option<Instant>,
    /// Other instances of the same definition in a non-terminal state other
    /// than SERIAL_WAIT: the predecessors the queue waits for.
    pub running: i64,
}

/// What the store reads for the anomalies beside the sweep's candidates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnomalyRows {
    /// The `flag = 1` non-finished task rows the sweep's own candidate read
    /// returned outside the candidate states (SUBMITTED_SUCCESS,
    /// DELAY_EXECUTION, ...): read anyway, so they cost no query of their own.
    pub others: Vec<Candidate>,
    /// SERIAL_WAIT workflows with a waiting serial command; `None` where the
    /// schema has no `t_ds_serial_command` (before 3.4).
    pub serial: Option<Vec<SerialWait>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnomalySettings {
    /// `reconcile.dispatch_stall_after`.
    pub dispatch_stall_after: Duration,
    /// `reconcile.workflow_stall_after`.
    pub workflow_stall_after: Duration,
    /// `reconcile.agent_stale_after`: only fresh agents' listings count.
    pub agent_stale_after: Duration,
}

impl Default for AnomalySettings {
    fn default() -> Self {
        AnomalySettings {
            dispatch_stall_after: Duration::from_secs(30 * 60),
            workflow_stall_after: Duration::from_secs(30 * 60),
            agent_stale_after: Duration::from_secs(35),
        }
    }
}

/// What a finding rests on; fields that do not apply to its kind are absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnomalyEvidence {
    /// dispatch_stalled: the oldest waiting task and its workflow instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_task_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_workflow_instance_id: Option<i64>,
    /// Rows by task (or workflow) state name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_state: BTreeMap<String, i64>,
    /// dispatch_stalled: each owning master's heartbeat `serverStatus`
    /// (`BUSY`: DS's load protection stops it dispatching), null when its
    /// heartbeat carries none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub master_status: BTreeMap<String, Option<String>>,
    /// The masters of `master_status` whose status is BUSY.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub busy_masters: Vec<String>,
    /// workflow_stop_stuck: the workflow state and its last progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_progress_at: Option<Instant>,
    /// serial_wait_stuck.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial_command_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definition_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_instances: Option<i64>,
    /// duplicate_attempt: the task (`task_code`, or the 1.x task name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// duplicate_attempt: the hosts of the rows, or the workers whose agents
    /// list the task.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// duplicate_attempt: `rows` (several live rows) or `agents` (one task's
    /// processes on several workers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seen_in: Option<String>,
    /// How old `since` is, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_seconds: Option<i64>,
}

/// One finding (SPEC §16).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    pub workflow_instance_id: Option<i64>,
    /// The rows behind it, oldest first (dispatch_stalled: at most
    /// [`MAX_TASK_IDS`]; `count` has them all).
    pub task_ids: Vec<i64>,
    pub count: i64,
    pub worker_group: Option<String>,
    /// Since when it has been so (the oldest row's submit time, the last
    /// progress, the serial wait's start, the second attempt's submit time).
    pub since: Option<Instant>,
    pub evidence: AnomalyEvidence,
    /// The owning master (raw host as read).
    pub owner_master: Option<String>,
}

/// A finding lists at most this many task ids (`count` has them all).
pub const MAX_TASK_IDS: usize = 100;

impl Anomaly {
    /// What identifies the same finding across sweeps (audit once when first seen).
    pub fn key(&self) -> String {
        match self.kind {
            AnomalyKind::DispatchStalled => format!(
                "{}:{}",
                self.kind,
                self.worker_group.as_deref().unwrap_or("")
            ),
            AnomalyKind::WorkflowStopStuck | AnomalyKind::SerialWaitStuck => {
                format!("{}:{}", self.kind, self.workflow_instance_id.unwrap_or(0))
            }
            AnomalyKind::DuplicateAttempt => format!(
                "{}:{}:{}:{}",
                self.kind,
                self.workflow_instance_id.unwrap_or(0),
                self.evidence.seen_in.as_deref().unwrap_or(""),
                self.evidence.task.as_deref().unwrap_or("")
            ),
        }
    }
}

/// The findings of a sweep, and the age of its oldest row per state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnomalyReport {
    pub anomalies: Vec<Anomaly>,
    /// `ds_reaper_oldest_live_seconds{state}`: every queued and candidate
    /// state of the line, 0 where no row is in it.
    pub oldest_live_seconds: BTreeMap<String, i64>,
}

/// What one sweep read, as [`plan_anomalies`] judges it.
#[derive(Debug, Clone, Copy)]
pub struct SweepRows<'a> {
    /// The sweep's task candidates.
    pub candidates: &'a [Candidate],
    /// The other non-finished rows of the same read (a row is counted once
    /// even if both hold it), and 3.4's serial queue.
    pub rows: &'a AnomalyRows,
    /// The sweep's workflow candidates.
    pub workflows: &'a [WorkflowCandidate],
    /// The states the candidates were read in.
    pub candidate_states: &'a [i32],
}

/// Judges the rows of a sweep. Nothing is judged against an invalid view:
/// whether a master is live cannot be told.
pub fn plan_anomalies(
    view: &RegistryView,
    line: DsLine,
    sweep: SweepRows<'_>,
    now: Instant,
    settings: &AnomalySettings,
) -> AnomalyReport {
    let mut report = plan_task_anomalies(
        view,
        line,
        sweep.candidates,
        sweep.rows,
        sweep.candidate_states,
        now,
        settings,
    );
    report.anomalies.extend(plan_workflow_anomalies(
        view,
        line,
        sweep.workflows,
        now,
        settings,
    ));
    report
}

/// The live rows a task anomaly judges: the candidates as read (not a
/// reference per row: at 100,000 live rows that was 0.8 MiB at the sweep's
/// peak) and the other live rows not among them.
pub(crate) struct Tasks<'a> {
    candidates: &'a [Candidate],
    extra: Vec<&'a Candidate>,
}

impl<'a> Tasks<'a> {
    /// `candidates` and the rows of `others` whose id is not among them, each
    /// once. The candidates are unique by id, so only `others` is checked
    /// against them: by binary search when they come sorted by id (the SQL
    /// store's order), else through a set of their ids.
    fn union(candidates: &'a [Candidate], others: &'a [Candidate]) -> Self {
        let mut extra = Vec::new();
        if !others.is_empty() {
            let sorted = candidates.windows(2).all(|w| w[0].id < w[1].id);
            let set: Option<std::collections::HashSet<i64>> =
                (!sorted).then(|| candidates.iter().map(|c| c.id).collect());
            let mut seen = BTreeSet::new();
            for c in others {
                let known = match &set {
                    Some(s) => s.contains(&c.id),
                    None => candidates.binary_search_by_key(&c.id, |x| x.id).is_ok(),
                };
                if !known && seen.insert(c.id) {
                    extra.push(c);
                }
            }
        }
        Tasks { candidates, extra }
    }

    pub(crate) fn len(&self) -> usize {
        self.candidates.len() + self.extra.len()
    }

    /// The row at position `i` (`i < len()`).
    pub(crate) fn get(&self, i: usize) -> &'a Candidate {
        match self.candidates.get(i) {
            Some(c) => c,
            None => self.extra[i - self.candidates.len()],
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &'a Candidate> + '_ {
        self.candidates.iter().chain(self.extra.iter().copied())
    }
}

/// The part of [`plan_anomalies`] that needs the task rows (and 3.4's
/// serial queue): a sweep lets its task rows go before it reads workflows.
pub fn plan_task_anomalies(
    view: &RegistryView,
    line: DsLine,
    candidates: &[Candidate],
    rows: &AnomalyRows,
    candidate_states: &[i32],
    now: Instant,
    settings: &AnomalySettings,
) -> AnomalyReport {
    let tasks = Tasks::union(candidates, &rows.others);
    let mut report = AnomalyReport {
        anomalies: Vec::new(),
        oldest_live_seconds: oldest_by_state(line, &tasks, candidate_states, now),
    };
    if !view.is_valid() {
        return report;
    }
    report
        .anomalies
        .extend(dispatch_stalled(view, line, &tasks, now, settings));
    if let Some(serial) = &rows.serial {
        report.anomalies.extend(serial_stuck(serial, now, settings));
    }
    report.anomalies.extend(duplicate_rows(line, &tasks, now));
    report
        .anomalies
        .extend(duplicate_listings(view, &tasks, now, settings));
    report
}

/// The part of [`plan_anomalies`] that needs the workflow candidates:
/// `workflow_stop_stuck`.
pub fn plan_workflow_anomalies(
    view: &RegistryView,
    line: DsLine,
    workflows: &[WorkflowCandidate],
    now: Instant,
    settings: &AnomalySettings,
) -> Vec<Anomaly> {
    if !view.is_valid() {
        return Vec::new();
    }
    stop_stuck(view, line, workflows, now, settings)
}

/// The row's age: from `submit_time`, else `start_time`.
fn row_since(c: &Candidate) -> Option<Instant> {
    c.submit_time.or(c.start_time)
}

fn oldest_by_state(
    line: DsLine,
    tasks: &Tasks,
    candidate_states: &[i32],
    now: Instant,
) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = queued_states(line)
        .into_iter()
        .chain(candidate_states.iter().copied())
        .filter_map(|s| line.state_name(s))
        .map(|n| (n.to_string(), 0))
        .collect();
    for c in tasks.iter() {
        let Some(name) = line.state_name(c.state) else {
            continue;
        };
        let Some(since) = row_since(c) else { continue };
        let age = (now - since).num_seconds().max(0);
        // once per row: no key allocated for the states already there
        let e = match out.get_mut(name) {
            Some(e) => e,
            None => out.entry(name.to_string()).or_default(),
        };
        *e = (*e).max(age);
    }
    out
}

/// The live master that owns a row's workflow, if its host names one.
fn live_owner<'a>(view: &'a RegistryView, host: Option<&str>) -> Option<&'a crate::NodeInfo> {
    let h = host.filter(|h| !host::is_empty(Some(h)))?;
    view.live(NodeKind::Master, h)
}

#[cfg(test)]
mod tests;
