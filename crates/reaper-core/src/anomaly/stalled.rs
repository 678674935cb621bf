//! Work that does not move under a live owner: `dispatch_stalled`,
//! `workflow_stop_stuck`, `serial_wait_stuck`.

use super::{
    live_owner, queued_states, Anomaly, AnomalyEvidence, AnomalyKind, AnomalySettings, SerialWait,
    Tasks, MAX_TASK_IDS, STOP_STATES,
};
use crate::candidate::Candidate;
use crate::line::DsLine;
use crate::view::RegistryView;
use crate::workflow::WorkflowCandidate;
use crate::{delta, Instant};
use std::collections::BTreeMap;

pub(super) fn dispatch_stalled(
    view: &RegistryView,
    line: DsLine,
    tasks: &Tasks,
    now: Instant,
    settings: &AnomalySettings,
) -> Vec<Anomaly> {
    let queued = queued_states(line);
    let stall = delta(settings.dispatch_stall_after);
    let mut groups: BTreeMap<Option<&str>, Vec<&Candidate>> = BTreeMap::new();
    for c in tasks.iter() {
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

pub(super) fn stop_stuck(
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

pub(super) fn serial_stuck(
    serial: &[SerialWait],
    now: Instant,
    settings: &AnomalySettings,
) -> Vec<Anomaly> {
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
