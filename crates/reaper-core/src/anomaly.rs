//! Stuck under a live owner (SPEC §16): findings that page someone and are
//! never acted on. The owning master is alive and holds the workflow in its
//! memory, so a database write would not reach it: whatever the policy says,
//! nothing here leads to a write.

use crate::agent::AgentSeen;
use crate::candidate::Candidate;
use crate::host;
use crate::line::DsLine;
use crate::view::{NodeKind, RegistryView};
use crate::workflow::WorkflowCandidate;
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// The workflow states whose stall is `workflow_stop_stuck`, not
/// `workflow_stalled`: READY_PAUSE, READY_STOP.
pub const STOP_STATES: [i32; 2] = [2, 4];

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

/// Judges the rows of a sweep. `candidates` are the sweep's task candidates
/// and `rows.others` the other non-finished rows of the same read (a row is
/// counted once even if both hold it); `workflows` the sweep's workflow
/// candidates. Nothing is judged against an invalid view: whether a master
/// is live cannot be told.
#[allow(clippy::too_many_arguments)]
pub fn plan_anomalies(
    view: &RegistryView,
    line: DsLine,
    candidates: &[Candidate],
    rows: &AnomalyRows,
    workflows: &[WorkflowCandidate],
    candidate_states: &[i32],
    now: Instant,
    settings: &AnomalySettings,
) -> AnomalyReport {
    let mut report = plan_task_anomalies(
        view,
        line,
        candidates,
        rows,
        candidate_states,
        now,
        settings,
    );
    report.anomalies.extend(plan_workflow_anomalies(
        view, line, workflows, now, settings,
    ));
    report
}

/// The sweep's candidates and the other live rows of its read, each row
/// once. The candidates are unique by id, so only `others` is checked
/// against them: by binary search when they come sorted by id (the SQL
/// store's order), else through a set of their ids.
fn union_by_id<'a>(candidates: &'a [Candidate], others: &'a [Candidate]) -> Vec<&'a Candidate> {
    let mut out: Vec<&Candidate> = Vec::with_capacity(candidates.len() + others.len());
    out.extend(candidates.iter());
    if others.is_empty() {
        return out;
    }
    let sorted = candidates.windows(2).all(|w| w[0].id < w[1].id);
    let set: Option<std::collections::HashSet<i64>> =
        (!sorted).then(|| candidates.iter().map(|c| c.id).collect());
    let mut extra = BTreeSet::new();
    for c in others {
        let known = match &set {
            Some(s) => s.contains(&c.id),
            None => candidates.binary_search_by_key(&c.id, |x| x.id).is_ok(),
        };
        if !known && extra.insert(c.id) {
            out.push(c);
        }
    }
    out
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
    let tasks = union_by_id(candidates, &rows.others);
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
    tasks: &[&Candidate],
    candidate_states: &[i32],
    now: Instant,
) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = queued_states(line)
        .into_iter()
        .chain(candidate_states.iter().copied())
        .filter_map(|s| line.state_name(s))
        .map(|n| (n.to_string(), 0))
        .collect();
    for c in tasks {
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

fn dispatch_stalled(
    view: &RegistryView,
    line: DsLine,
    tasks: &[&Candidate],
    now: Instant,
    settings: &AnomalySettings,
) -> Vec<Anomaly> {
    let queued = queued_states(line);
    let stall = delta(settings.dispatch_stall_after);
    let mut groups: BTreeMap<Option<&str>, Vec<&Candidate>> = BTreeMap::new();
    for c in tasks {
        if !queued.contains(&c.state) {
            continue;
        }
        // counted from submit_time only: a row without one has no queue age
        let Some(submit) = c.submit_time else {
            continue;
        };
        if now - submit < stall || live_owner(view, c.workflow_host.as_deref()).is_none() {
            continue;
        }
        groups.entry(c.worker_group.as_deref()).or_default().push(c);
    }
    groups
        .into_iter()
        .map(|(group, mut rows)| {
            rows.sort_by_key(|c| (c.submit_time, c.id));
            let oldest = rows[0];
            let mut ev = AnomalyEvidence {
                oldest_task_id: Some(oldest.id),
                oldest_workflow_instance_id: oldest.workflow_instance_id,
                ..AnomalyEvidence::default()
            };
            for c in &rows {
                let name = line
                    .state_name(c.state)
                    .map(str::to_string)
                    .unwrap_or_else(|| c.state.to_string());
                *ev.by_state.entry(name).or_default() += 1;
                if let (Some(h), Some(node)) = (
                    c.workflow_host.as_deref(),
                    live_owner(view, c.workflow_host.as_deref()),
                ) {
                    ev.master_status
                        .insert(h.trim().to_string(), node.status.clone());
                }
            }
            ev.busy_masters = ev
                .master_status
                .iter()
                .filter(|(_, s)| s.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("BUSY")))
                .map(|(h, _)| h.clone())
                .collect();
            ev.age_seconds = oldest.submit_time.map(|s| (now - s).num_seconds());
            Anomaly {
                kind: AnomalyKind::DispatchStalled,
                workflow_instance_id: None,
                task_ids: rows.iter().take(MAX_TASK_IDS).map(|c| c.id).collect(),
                count: rows.len() as i64,
                worker_group: group.map(str::to_string),
                since: oldest.submit_time,
                evidence: ev,
                owner_master: oldest.workflow_host.as_deref().map(str::to_string),
            }
        })
        .collect()
}

fn stop_stuck(
    view: &RegistryView,
    line: DsLine,
    workflows: &[WorkflowCandidate],
    now: Instant,
    settings: &AnomalySettings,
) -> Vec<Anomaly> {
    let stall = delta(settings.workflow_stall_after);
    workflows
        .iter()
        .filter(|wf| STOP_STATES.contains(&wf.state))
        .filter(|wf| live_owner(view, wf.host.as_deref()).is_some())
        .filter_map(|wf| {
            let progress = wf.last_progress()?;
            if now - progress < stall {
                return None;
            }
            let by_state = wf
                .tasks_by_state
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(code, n)| {
                    let name = line
                        .state_name(*code)
                        .map(str::to_string)
                        .unwrap_or_else(|| code.to_string());
                    (name, *n)
                })
                .collect();
            Some(Anomaly {
                kind: AnomalyKind::WorkflowStopStuck,
                workflow_instance_id: Some(wf.id),
                task_ids: Vec::new(),
                count: 1,
                worker_group: None,
                since: Some(progress),
                evidence: AnomalyEvidence {
                    by_state,
                    workflow_state: crate::workflow::workflow_state_name(wf.state)
                        .map(str::to_string),
                    last_progress_at: Some(progress),
                    age_seconds: Some((now - progress).num_seconds()),
                    ..AnomalyEvidence::default()
                },
                owner_master: wf.host.clone(),
            })
        })
        .collect()
}

fn serial_stuck(serial: &[SerialWait], now: Instant, settings: &AnomalySettings) -> Vec<Anomaly> {
    let stall = delta(settings.dispatch_stall_after);
    serial
        .iter()
        .filter(|s| s.running == 0)
        .filter_map(|s| {
            let since = s.waiting_since?;
            if now - since < stall {
                return None;
            }
            Some(Anomaly {
                kind: AnomalyKind::SerialWaitStuck,
                workflow_instance_id: Some(s.workflow_instance_id),
                task_ids: Vec::new(),
                count: 1,
                worker_group: None,
                since: Some(since),
                evidence: AnomalyEvidence {
                    serial_command_id: Some(s.serial_command_id),
                    definition_code: Some(s.definition_code),
                    running_instances: Some(s.running),
                    workflow_state: Some("SERIAL_WAIT".into()),
                    age_seconds: Some((now - since).num_seconds()),
                    ..AnomalyEvidence::default()
                },
                owner_master: s.workflow_host.clone(),
            })
        })
        .collect()
}

/// The task of the definition a row runs: `task_code` (2.0+), else — 1.x,
/// whose DAG keys its tasks by name within a definition — the name.
fn task_identity(line: DsLine, c: &Candidate) -> Option<String> {
    match c.task_code {
        Some(code) => Some(code.to_string()),
        None if line <= DsLine::V1_3 && !c.name.is_empty() => Some(c.name.clone()),
        None => None,
    }
}

/// [`task_identity`] without an allocation, for grouping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ident<'a> {
    Code(i64),
    Name(&'a str),
}

fn ident(line: DsLine, c: &Candidate) -> Option<(i64, Ident<'_>)> {
    let wf = c.workflow_instance_id?;
    let task = match c.task_code {
        Some(code) => Ident::Code(code),
        None if line <= DsLine::V1_3 && !c.name.is_empty() => Ident::Name(&c.name),
        None => return None,
    };
    Some((wf, task))
}

fn duplicate_rows(line: DsLine, tasks: &[&Candidate], now: Instant) -> Vec<Anomaly> {
    // Every live row goes through here each sweep and almost none has a
    // twin: group positions (4 bytes a row) sorted by identity, not a map
    // entry with an owned key and a vector per row (~14 MiB at 100,000
    // rows, at the sweep's peak). Only the groups of two or more get keys.
    let mut order: Vec<u32> = (0..tasks.len() as u32)
        .filter(|&i| ident(line, tasks[i as usize]).is_some())
        .collect();
    order.sort_unstable_by(|&a, &b| {
        ident(line, tasks[a as usize]).cmp(&ident(line, tasks[b as usize]))
    });
    let mut groups: BTreeMap<(i64, String), Vec<&Candidate>> = BTreeMap::new();
    for run in
        order.chunk_by(|&a, &b| ident(line, tasks[a as usize]) == ident(line, tasks[b as usize]))
    {
        if run.len() < 2 {
            continue;
        }
        let first = tasks[run[0] as usize];
        let (Some(wf), Some(task)) = (first.workflow_instance_id, task_identity(line, first))
        else {
            continue;
        };
        groups
            .entry((wf, task))
            .or_default()
            .extend(run.iter().map(|&i| tasks[i as usize]));
    }
    drop(order);
    groups
        .into_iter()
        .filter(|(_, rows)| rows.len() >= 2)
        .map(|((wf, task), mut rows)| {
            rows.sort_by_key(|c| (row_since(c), c.id));
            // the duplication began when the second live row appeared
            let since = rows.get(1).and_then(|c| row_since(c));
            let mut hosts: Vec<String> = rows
                .iter()
                .filter_map(|c| c.host.as_deref().map(str::to_string))
                .filter(|h| !host::is_empty(Some(h)))
                .collect();
            hosts.sort();
            hosts.dedup();
            let mut by_state = BTreeMap::new();
            for c in &rows {
                let name = line
                    .state_name(c.state)
                    .map(str::to_string)
                    .unwrap_or_else(|| c.state.to_string());
                *by_state.entry(name).or_default() += 1;
            }
            Anomaly {
                kind: AnomalyKind::DuplicateAttempt,
                workflow_instance_id: Some(wf),
                task_ids: rows.iter().take(MAX_TASK_IDS).map(|c| c.id).collect(),
                count: rows.len() as i64,
                worker_group: rows[0].worker_group.as_deref().map(str::to_string),
                since,
                evidence: AnomalyEvidence {
                    task: Some(task),
                    hosts,
                    by_state,
                    seen_in: Some("rows".into()),
                    age_seconds: since.map(|s| (now - s).num_seconds()),
                    ..AnomalyEvidence::default()
                },
                owner_master: rows[0].workflow_host.as_deref().map(str::to_string),
            }
        })
        .collect()
}

/// One task's processes listed by the fresh agents of two or more workers.
fn duplicate_listings(
    view: &RegistryView,
    tasks: &[&Candidate],
    now: Instant,
    settings: &AnomalySettings,
) -> Vec<Anomaly> {
    // Each fresh agent lists its worker's tasks each sweep (40,000 with
    // 2,000 agents x 20) and a task on two workers is rare: one flat list
    // sorted by task, no map entry nor worker name copied per listing.
    let mut listings: Vec<(i64, &str, &AgentSeen, i64)> = Vec::new();
    for (worker, a) in view
        .agents
        .iter()
        .filter(|(_, a)| a.fresh(now, settings.agent_stale_after))
    {
        let Some(report) = a.report.as_ref() else {
            continue;
        };
        listings.extend(
            report
                .tasks
                .iter()
                .map(|t| (t.task_id, worker.as_str(), &**a, t.workflow_instance_id)),
        );
    }
    listings.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut listed: Vec<(i64, i64, Vec<String>, Option<Instant>)> = Vec::new();
    for run in listings.chunk_by(|a, b| a.0 == b.0) {
        if run.len() < 2 {
            continue;
        }
        let mut at: Option<Instant> = None;
        for (id, _, a, _) in run {
            at = match (at, a.listed_in_streak(*id)) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
        }
        let workers = run.iter().map(|(_, w, _, _)| w.to_string()).collect();
        listed.push((run[0].0, run[0].3, workers, at));
    }
    drop(listings);
    if listed.is_empty() {
        return Vec::new();
    }
    let by_id: HashMap<i64, &Candidate> = tasks.iter().map(|c| (c.id, *c)).collect();
    listed
        .into_iter()
        .map(|(id, wf, mut workers, at)| {
            workers.sort();
            let row = by_id.get(&id);
            Anomaly {
                kind: AnomalyKind::DuplicateAttempt,
                workflow_instance_id: Some(wf),
                task_ids: vec![id],
                count: workers.len() as i64,
                worker_group: row.and_then(|c| c.worker_group.as_deref().map(str::to_string)),
                since: at,
                evidence: AnomalyEvidence {
                    task: Some(id.to_string()),
                    hosts: workers,
                    seen_in: Some("agents".into()),
                    ..AnomalyEvidence::default()
                },
                owner_master: row.and_then(|c| c.workflow_host.as_deref().map(str::to_string)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
