//! Workflow instances that cannot progress (SPEC §13): read in the read
//! step, judged after the task plan with the same view, brake, caps and
//! bucket (`judge`), published here, and recovered through the executor's
//! `Recover` effect — for the daemon and for `reap --workflow-instance`.

use super::effects::{Context, Effect, Gate, Outcome};
use super::reap::ReapError;
use super::{Engine, SweepState};
use crate::audit::{AuditEvent, Record};
use reaper_core::workflow::{
    plan_workflows, WorkflowAction, WorkflowCandidate, WorkflowFinding, WorkflowReason,
};
use reaper_core::{Budget, Disposition, DsLine, IdSet, Instant};
use std::collections::BTreeMap;
use std::sync::Arc;

impl Engine {
    /// The publish step's workflow part: the gauges, the status, and each
    /// finding audited once when first seen.
    pub(super) async fn publish_workflows(
        &self,
        st: &mut SweepState,
        findings: &Arc<Vec<WorkflowFinding>>,
        read: Option<&IdSet>,
        line: DsLine,
        now: Instant,
    ) {
        // not read this sweep (off, or a failed read): the last findings stand
        let Some(ids) = read else {
            return;
        };
        let mut per_reason: BTreeMap<WorkflowReason, i64> =
            WorkflowReason::ALL.iter().map(|r| (*r, 0)).collect();
        for f in findings.iter() {
            *per_reason.entry(f.reason).or_default() += 1;
        }
        for (r, n) in per_reason {
            self.metrics
                .workflow_zombies
                .with_label_values(&[r.as_str()])
                .set(n);
        }
        self.status_write().workflows = findings.clone();
        self.record_workflow_detection(st, findings, ids, line, now)
            .await;
    }

    async fn record_workflow_detection(
        &self,
        st: &mut SweepState,
        findings: &[WorkflowFinding],
        read: &IdSet,
        line: DsLine,
        now: Instant,
    ) {
        let mut records = Vec::new();
        for f in findings {
            if st.workflows_seen.get(&f.workflow.id) != Some(&f.reason) {
                st.workflows_seen.insert(f.workflow.id, f.reason);
                tracing::warn!(workflow_instance_id = f.workflow.id, reason = %f.reason,
                    host = ?f.workflow.host, action = %f.action, "workflow finding");
                records.push(self.workflow_record(AuditEvent::Detected, "daemon", f, line, now));
            }
        }
        if st.workflows_seen.len() > findings.len() {
            st.workflows_seen.retain(|id, _| read.contains(id));
        }
        if let Err(e) = self.audit.append_blocking(records).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }

    /// `reap --workflow-instance N`: refuses unless the workflow is a
    /// `workflow_master_lost` finding as `check` judges it (or `force`).
    /// `confirm` sees the judged finding before anything is written.
    pub async fn reap_workflow(
        &self,
        id: i64,
        force: bool,
        actor: &str,
        confirm: impl FnOnce(&WorkflowFinding, bool) -> Result<(), ReapError>,
    ) -> Result<Record, ReapError> {
        self.ensure_leader()?;
        let mut st = self.state.lock().await;
        let (line, hold) = self.line(&mut st).await?;
        drop(st);
        if let Some(h) = hold {
            return Err(ReapError::Refused(h));
        }
        let (task_states, _) = self.settings.live_states(line);
        let wf = match self.store.workflow(line, id, &task_states).await {
            Ok(Some(w)) => w,
            Ok(None) => return Err(ReapError::NotFound(id)),
            Err(e) => {
                self.db_failed(&e);
                return Err(ReapError::Unavailable(e.to_string()));
            }
        };
        let view = self.registry.view();
        let Some(valid_since) = view.valid_since() else {
            return Err(ReapError::Refused("the registry view is not valid".into()));
        };
        if !line.workflow_non_terminal_states().contains(&wf.state) {
            return Err(ReapError::Refused(format!(
                "workflow instance {id} is in a terminal state; finished rows are never touched"
            )));
        }
        let mut policy = self.settings.workflow_policy();
        policy.master_lost = WorkflowAction::Recover;
        policy.rules.clear();
        policy.unseen_absence = reaper_core::UnseenAbsence::Unknown;
        let now = self.now();
        let bucket = reaper_core::TokenBucket::full(1, now);
        let mut budget = Budget::new(1, std::time::Duration::ZERO, Some(bucket));
        let findings = plan_workflows(
            &view,
            std::slice::from_ref(&wf),
            now,
            line,
            &policy,
            &mut budget,
        );
        let judged = findings
            .into_iter()
            .find(|f| f.reason == WorkflowReason::WorkflowMasterLost);
        let (finding, forced) = chosen(judged, wf, force)?;
        confirm(&finding, forced)?;
        self.ensure_leader()?;
        let cx = Context {
            line,
            actor,
            gate: Gate {
                valid_since,
                leader_only: true,
                judged_at: self.now(),
                max_age: None,
            },
        };
        let effect = Effect::Recover {
            finding: &finding,
            forced,
        };
        match self.execute(vec![effect], &cx).await.pop() {
            Some(Outcome::Recovered(r)) => *r,
            Some(Outcome::Skipped(why)) => Err(ReapError::Refused(why.to_string())),
            _ => Err(ReapError::Unavailable("nothing was attempted".into())),
        }
    }
}

/// The finding `reap --workflow-instance` writes, and whether it is forced:
/// the judged `workflow_master_lost` with `recover`, else (with `force`) one
/// made for the row as it is; refused otherwise, saying why.
fn chosen(
    judged: Option<WorkflowFinding>,
    wf: WorkflowCandidate,
    force: bool,
) -> Result<(WorkflowFinding, bool), ReapError> {
    match judged {
        Some(f) if f.action == WorkflowAction::Recover => Ok((f, false)),
        Some(f) if !force => Err(ReapError::Refused(
            f.note
                .unwrap_or_else(|| "recover does not apply".to_string()),
        )),
        None if !force => Err(ReapError::Refused(format!(
            "workflow instance {} is not workflow_master_lost as check judges it (host {}); use force to override",
            wf.id,
            super::host_words(wf.host.as_deref())
        ))),
        _ => Ok((
            WorkflowFinding {
                state_name: reaper_core::workflow::workflow_state_name(wf.state)
                    .unwrap_or("UNKNOWN")
                    .to_string(),
                workflow: wf,
                reason: WorkflowReason::WorkflowMasterLost,
                evidence: Default::default(),
                owner_master_alive: false,
                action: WorkflowAction::Recover,
                note: Some("forced".into()),
                disposition: Disposition::Act,
            },
            true,
        )),
    }
}
