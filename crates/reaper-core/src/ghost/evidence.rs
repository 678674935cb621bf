//! What a ghost is made of: the task's own processes among those listed
//! under it, and the evidence reported with it.

use super::{
    GhostAction, GhostPolicy, GhostRow, NewerAttempt, Over, Track, KILL_ORDERED, ROW_NEVER_SEEN,
};
use crate::agent::{AgentProcess, AgentTask};
use crate::order::OrderPid;
use crate::plan::Disposition;
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GhostEvidence {
    /// Which rule of SPEC §15 the row broke.
    pub over: Over,
    pub row_state: Option<String>,
    pub row_flag: Option<i32>,
    pub row_host: Option<String>,
    pub row_start_time: Option<Instant>,
    pub row_end_time: Option<Instant>,
    pub pids: Vec<i32>,
    pub started_at: Option<Instant>,
    /// When the daemon first read the row as over.
    pub over_since: Instant,
    /// Fresh reports since then that still listed the task.
    pub reports_since: u32,
    pub newer_attempt_id: Option<i64>,
    pub newer_attempt_host: Option<String>,
    /// Processes listed under the task that are not its own (a controlling
    /// terminal, started outside the task's life, the worker JVM).
    pub excluded_pids: Vec<i32>,
}

/// One ghost: a listed task over for `ghost_after` with processes of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ghost {
    pub task_id: i64,
    pub task_name: Option<String>,
    pub task_type: Option<String>,
    pub worker_group: Option<String>,
    pub workflow_instance_id: Option<i64>,
    /// The agent's worker (its registered node name).
    pub worker: String,
    /// The task's own processes, as the order names them.
    pub processes: Vec<OrderPid>,
    pub started_at: Option<Instant>,
    pub row_state: Option<String>,
    pub row_flag: Option<i32>,
    pub row_host: Option<String>,
    pub newer_attempt: Option<NewerAttempt>,
    pub evidence: GhostEvidence,
    pub action: GhostAction,
    pub note: Option<String>,
    pub disposition: Disposition,
    /// The task's YARN applications with the RM's answers (SPEC §17),
    /// filled in by the daemon: the plan knows nothing of the RM.
    #[serde(default)]
    pub remote_apps: Vec<crate::remote::RemoteApp>,
}

impl Ghost {
    pub fn pids(&self) -> Vec<i32> {
        self.processes.iter().map(|p| p.pid).collect()
    }
}

/// One listed task judged a ghost: what [`plan_ghosts`](super::plan_ghosts) saw of it.
pub(super) struct Seen<'a> {
    pub(super) worker: &'a String,
    pub(super) task: &'a AgentTask,
    pub(super) row: Option<&'a GhostRow>,
    pub(super) over: Over,
    pub(super) track: &'a Track,
    pub(super) own: &'a [&'a AgentProcess],
    pub(super) excluded: &'a [&'a AgentProcess],
    /// `no_row` for a row this daemon never read: no proof (SPEC §15).
    pub(super) never_seen: bool,
}

impl Seen<'_> {
    /// The ghost, with its evidence and the policy's action; a kill while
    /// an order is outstanding (`ordered`) waits for its answer, reported;
    /// a row this daemon never read is reported whatever the policy.
    pub(super) fn ghost(&self, policy: &GhostPolicy, ordered: bool) -> Ghost {
        let (row, own) = (self.row, self.own);
        let started_at = own
            .iter()
            .map(|p| p.started_at)
            .min()
            .and_then(chrono::DateTime::from_timestamp_millis);
        let processes: Vec<OrderPid> = own
            .iter()
            .map(|p| OrderPid {
                pid: p.pid,
                start_time: p.started_at,
            })
            .collect();
        let cand = row.map(|r| &r.task);
        let row_state = row.map(|r| {
            policy
                .line
                .state_name(r.task.state)
                .map(str::to_string)
                .unwrap_or_else(|| format!("code {}", r.task.state))
        });
        let newer = row.and_then(|r| r.newer_attempt.clone());
        let evidence = GhostEvidence {
            over: self.over,
            row_state: row_state.clone(),
            row_flag: row.map(|r| r.flag),
            row_host: cand.and_then(|c| c.host.as_deref().map(str::to_string)),
            row_start_time: cand.and_then(|c| c.start_time),
            row_end_time: row.and_then(|r| r.end_time),
            pids: processes.iter().map(|p| p.pid).collect(),
            started_at,
            over_since: self.track.over_since,
            reports_since: self.track.reports,
            newer_attempt_id: newer.as_ref().map(|n| n.id),
            newer_attempt_host: newer.as_ref().and_then(|n| n.host.clone()),
            excluded_pids: self.excluded.iter().map(|p| p.pid).collect(),
        };
        let action = match self.never_seen {
            true => GhostAction::Report,
            false => policy.decide(self.over, cand),
        };
        let (disposition, note) = match action {
            GhostAction::Report if self.never_seen => {
                (Disposition::Report, Some(ROW_NEVER_SEEN.to_string()))
            }
            GhostAction::Report => (Disposition::Report, None),
            GhostAction::Kill if ordered => (Disposition::Report, Some(KILL_ORDERED.to_string())),
            GhostAction::Kill => (Disposition::Act, None),
        };
        Ghost {
            task_id: self.task.task_id,
            task_name: cand.map(|c| c.name.to_string()),
            task_type: cand.map(|c| c.task_type.to_string()),
            worker_group: cand.and_then(|c| c.worker_group.as_deref().map(str::to_string)),
            workflow_instance_id: cand
                .and_then(|c| c.workflow_instance_id)
                .or(Some(self.task.workflow_instance_id)),
            worker: self.worker.clone(),
            processes,
            started_at,
            row_state,
            row_flag: row.map(|r| r.flag),
            row_host: cand.and_then(|c| c.host.as_deref().map(str::to_string)),
            newer_attempt: newer,
            evidence,
            action,
            note,
            disposition,
            remote_apps: Vec::new(),
        }
    }
}

/// The start-time window of the task's own processes (epoch ms, inclusive):
/// from the row's start (else submit) time, to its end — for a row without
/// one, the newer attempt's submit time, else when the daemon first saw the
/// row over — each widened by the clock skew tolerance.
pub(super) fn own_window(
    row: Option<&GhostRow>,
    over_since: Instant,
    skew: Duration,
) -> (Option<i64>, i64) {
    let skew = delta(skew);
    let from = row
        .and_then(|r| r.task.start_time.or(r.task.submit_time))
        .map(|t| (t - skew).timestamp_millis());
    let to = row
        .and_then(|r| {
            r.end_time
                .or_else(|| r.newer_attempt.as_ref().and_then(|n| n.submit_time))
        })
        .unwrap_or(over_since);
    (from, (to + skew).timestamp_millis())
}

pub(super) fn is_own(p: &AgentProcess, (from, to): (Option<i64>, i64), jvm: Option<i64>) -> bool {
    !p.tty
        && jvm != Some(i64::from(p.pid))
        && from.is_none_or(|f| p.started_at >= f)
        && p.started_at <= to
}
