//! Ghost applications (SPEC §17): a task whose row is over and one of whose
//! own YARN applications the RM still shows live — DS 3.3.0–3.4.2's own
//! failover submits such a task again without killing the old application.
//! No agent need list the task any more: its ids come from the daemon's
//! state file. Listed with the ghosts; with `kill_remote_apps`, killed under
//! the same budget (hold, brake, settle, cap, bucket) as every effect.

use super::{GhostAction, GhostEvidence, GhostPolicy, GhostRow, Over};
use crate::budget::Budget;
use crate::line::{DsLine, NEED_FAULT_TOLERANCE};
use crate::plan::Disposition;
use crate::remote::{AppPhase, RemoteApp};
use crate::{delta, Instant};

/// A task no agent lists whose row was read over, with its own
/// applications as the RM answered.
pub struct OverTask<'a> {
    pub row: &'a GhostRow,
    /// The worker that reported the ids (the row's host when unknown).
    pub worker: &'a str,
    pub apps: Vec<RemoteApp>,
}

/// How the row says the task is over; None for a live row (never a ghost
/// application: its application is the task's work).
fn over(row: &GhostRow) -> Option<Over> {
    if DsLine::is_finished_task_state(row.task.state) {
        Some(Over::Terminal)
    } else if row.task.state == NEED_FAULT_TOLERANCE {
        Some(Over::NeedFaultTolerance)
    } else if row.flag == 0 {
        Some(Over::Superseded)
    } else {
        None
    }
}

/// The ghost applications among `tasks`: a row over for at least
/// `ghost_after` (from its end, else its newer attempt's submit time — a row
/// with neither is reported, never killed) with a live application of its
/// own. Kills are admitted through `budget` when `kill` (`kill_remote_apps`)
/// allows them; a finished row's application only when a rule names
/// `terminal_state`, as for processes.
pub fn plan_ghost_apps(
    tasks: &[OverTask<'_>],
    valid_since: Instant,
    now: Instant,
    policy: &GhostPolicy,
    kill: bool,
    budget: &mut Budget,
) -> Vec<super::Ghost> {
    let mut ghosts = Vec::new();
    for t in tasks {
        let Some(over) = over(t.row) else { continue };
        let live: Vec<RemoteApp> = t
            .apps
            .iter()
            .filter(|a| a.phase() == AppPhase::Live)
            .cloned()
            .collect();
        if live.is_empty() {
            continue;
        }
        let since = t
            .row
            .end_time
            .or_else(|| t.row.newer_attempt.as_ref().and_then(|n| n.submit_time));
        if since.is_some_and(|s| now - s < delta(policy.ghost_after)) {
            continue;
        }
        let mut g = ghost(t, over, since.unwrap_or(now), live, policy);
        let wants = kill && since.is_some() && g.action == GhostAction::Kill;
        g.disposition = if wants {
            budget.admit(valid_since, now)
        } else {
            Disposition::Report
        };
        if let Disposition::Blocked(b) = &g.disposition {
            g.note = Some(b.describe());
        }
        ghosts.push(g);
    }
    ghosts
}

fn ghost(
    t: &OverTask<'_>,
    over: Over,
    since: Instant,
    live: Vec<RemoteApp>,
    policy: &GhostPolicy,
) -> super::Ghost {
    let row = t.row;
    let state = policy.line.state_name(row.task.state).map(str::to_string);
    let host = row.task.host.as_deref().map(str::to_string);
    // the kind's own action (kill unless a finished row's), which
    // `kill_remote_apps` then allows or not
    let action = match policy.decide(over, Some(&row.task)) {
        GhostAction::Report if over == Over::Terminal => GhostAction::Report,
        _ => GhostAction::Kill,
    };
    super::Ghost {
        task_id: row.task.id,
        task_name: Some(row.task.name.to_string()),
        task_type: Some(row.task.task_type.to_string()),
        worker_group: row.task.worker_group.as_deref().map(str::to_string),
        workflow_instance_id: row.task.workflow_instance_id,
        worker: t.worker.to_string(),
        processes: Vec::new(),
        started_at: None,
        row_state: state.clone(),
        row_flag: Some(row.flag),
        row_host: host.clone(),
        newer_attempt: row.newer_attempt.clone(),
        evidence: GhostEvidence {
            over,
            row_state: state,
            row_flag: Some(row.flag),
            row_host: host,
            row_start_time: row.task.start_time,
            row_end_time: row.end_time,
            pids: Vec::new(),
            started_at: None,
            over_since: since,
            reports_since: 0,
            newer_attempt_id: row.newer_attempt.as_ref().map(|n| n.id),
            newer_attempt_host: row.newer_attempt.as_ref().and_then(|n| n.host.clone()),
            excluded_pids: Vec::new(),
        },
        action,
        note: Some(crate::remote::REMOTE_APP_RUNNING.to_string()),
        disposition: Disposition::Report,
        remote_apps: live,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidate::Candidate;

    fn t(s: i64) -> Instant {
        chrono::DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn row(state: i32, flag: i32, end: Option<Instant>) -> GhostRow {
        GhostRow {
            task: Candidate::new(7, "SPARK", state, Some("w1:1234")),
            flag,
            end_time: end,
            newer_attempt: None,
        }
    }

    fn app(state: &str) -> RemoteApp {
        RemoteApp {
            state: Some(state.into()),
            ..RemoteApp::unknown("application_1_7")
        }
    }

    fn plan(
        rows: &[(GhostRow, &str)],
        kill: bool,
        budget: &mut Budget,
    ) -> Vec<super::super::Ghost> {
        let tasks: Vec<OverTask<'_>> = rows
            .iter()
            .map(|(r, s)| OverTask {
                row: r,
                worker: "w1:1234",
                apps: vec![app(s)],
            })
            .collect();
        let policy = GhostPolicy::defaults(DsLine::V3_2);
        plan_ghost_apps(&tasks, t(0), t(1000), &policy, kill, budget)
    }

    fn budget() -> Budget {
        Budget::new(
            10,
            std::time::Duration::ZERO,
            Some(crate::TokenBucket::full(10, t(0))),
        )
    }

    #[test]
    fn a_superseded_rows_live_application_is_a_ghost_killed_only_with_kill_remote_apps() {
        // DS's failover re-ran the task: the old attempt's row is flag 0, its application runs on
        let over = row(8, 0, Some(t(0)));
        let g = plan(&[(over.clone(), "RUNNING")], true, &mut budget());
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].disposition, Disposition::Act);
        assert_eq!(g[0].evidence.over, Over::NeedFaultTolerance);
        assert!(g[0].processes.is_empty());
        assert_eq!(g[0].remote_apps, vec![app("RUNNING")]);
        let g = plan(&[(over, "RUNNING")], false, &mut budget());
        assert_eq!(g[0].disposition, Disposition::Report);
    }

    #[test]
    fn live_rows_final_applications_young_and_finished_rows_are_not_killed() {
        let mut b = budget();
        // a live row's application is the task's work
        assert!(plan(&[(row(1, 1, None), "RUNNING")], true, &mut b).is_empty());
        // over, but its application already ended
        assert!(plan(&[(row(6, 1, Some(t(0))), "FINISHED")], true, &mut b).is_empty());
        // over for less than ghost_after
        assert!(plan(&[(row(6, 0, Some(t(950))), "RUNNING")], true, &mut b).is_empty());
        // a finished row's application: reported unless a rule names terminal_state
        let g = plan(&[(row(7, 1, Some(t(0))), "RUNNING")], true, &mut b);
        assert_eq!(g[0].disposition, Disposition::Report);
        // a row with no time to count ghost_after from: reported, never killed
        let g = plan(&[(row(8, 1, None), "RUNNING")], true, &mut b);
        assert_eq!(g[0].disposition, Disposition::Report);
        assert_eq!(b.taken, 0);
    }

    #[test]
    fn the_budget_holds_them_as_every_effect() {
        let mut b = budget().held(Some("not the leader".into()));
        let g = plan(&[(row(1, 0, Some(t(0))), "RUNNING")], true, &mut b);
        assert!(matches!(g[0].disposition, Disposition::Blocked(_)));
    }
}
