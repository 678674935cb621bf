//! Workflow instances that cannot progress (SPEC §13): read after the task
//! candidates of a sweep, judged with the same view, brake, caps and bucket,
//! and — for `workflow_master_lost` under `recover` — written through the
//! same audit discipline: intent on disk, one guarded transaction, outcome.

use super::act::ActionResult;
use super::reap::ReapError;
use super::sweep::Judged;
use super::{Engine, Gate, SweepState};
use crate::audit::{AuditEvent, Record, RecordKind};
use reaper_core::ports::{PortErrorKind, Scan, WorkflowOutcome};
use reaper_core::workflow::{
    plan_workflows, WorkflowAction, WorkflowCandidate, WorkflowFinding, WorkflowReason,
};
use reaper_core::{Budget, Disposition, DsLine, Instant, NodeKind};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The workflow step's read, as `/readyz` names it when it fails.
const WORKFLOW_READ: &str = "workflow candidates";

/// What the workflow part of a sweep did.
#[derive(Default)]
pub(super) struct WorkflowSweep {
    pub findings: usize,
    pub actions: usize,
    /// The candidates in READY_PAUSE / READY_STOP, for SPEC §16.
    pub stopping: Vec<WorkflowCandidate>,
}

impl Engine {
    fn workflow_record(
        &self,
        event: AuditEvent,
        actor: &str,
        f: &WorkflowFinding,
        line: DsLine,
        now: Instant,
    ) -> Record {
        let mut r = Record::event(event, actor, now);
        r.kind = Some(RecordKind::Workflow);
        r.workflow_instance_id = Some(f.workflow.id);
        r.task_name = Some(f.workflow.name.clone());
        r.host = f.workflow.host.clone();
        r.reason = Some(f.reason.as_str().to_string());
        r.evidence = serde_json::to_value(&f.evidence).ok();
        r.from_state = Some(f.state_name.clone());
        r.action = Some(f.action.as_str().to_string());
        r.ds_line = Some(line.as_str().to_string());
        r
    }

    /// The sweep's `workflows` step: reads, judges (within the sweep's
    /// budget, after the task plan), records and (as leader, unbraked)
    /// recovers workflow instances.
    pub(super) async fn sweep_workflows(
        &self,
        st: &mut SweepState,
        line: DsLine,
        full: bool,
        judged: &mut Judged,
    ) -> WorkflowSweep {
        if !self.settings.reconcile.workflows {
            return WorkflowSweep::default();
        }
        let Some(workflows) = self.read_workflows(line, full).await else {
            return WorkflowSweep::default();
        };
        let policy = self.settings.workflow_policy();
        let (view, now) = (&judged.view, judged.now);
        let findings = plan_workflows(view, &workflows, now, line, &policy, &mut judged.budget);
        self.record_workflow_detection(st, &findings, &workflows, line, now)
            .await;
        let findings = Arc::new(findings);
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
        let mut actions = 0;
        for f in findings
            .iter()
            .filter(|f| f.disposition == Disposition::Act)
        {
            match self.recover(f, line, "daemon", judged.gate, false).await {
                Ok(_) => actions += 1,
                Err(ReapError::Refused(why)) => {
                    tracing::warn!(%why, "workflow recovery not written in this sweep");
                    break;
                }
                Err(_) => {}
            }
        }
        WorkflowSweep {
            findings: findings.len(),
            actions,
            stopping: super::anomalies::stopping(&workflows),
        }
    }

    /// The sweep's workflow candidates; None when the store cannot read them
    /// (the task results stand).
    async fn read_workflows(&self, line: DsLine, full: bool) -> Option<Vec<WorkflowCandidate>> {
        let (states, _) = self.settings.workflow_states(line);
        let (task_states, _) = self.settings.live_states(line);
        let scan = if full { Scan::Full } else { Scan::Incremental };
        match self
            .store
            .workflow_candidates(line, &states, &task_states, scan)
            .await
        {
            Ok(w) => {
                self.read_ok(WORKFLOW_READ);
                Some(w)
            }
            Err(e) if e.kind() != PortErrorKind::Unavailable => {
                self.read_fault(WORKFLOW_READ, &e);
                None
            }
            Err(e) => {
                self.db_failed(&e);
                tracing::warn!(error = %e, "reading workflow candidates failed; task results stand");
                None
            }
        }
    }

    async fn record_workflow_detection(
        &self,
        st: &mut SweepState,
        findings: &[WorkflowFinding],
        workflows: &[WorkflowCandidate],
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
            let live: std::collections::HashSet<i64> = workflows.iter().map(|w| w.id).collect();
            st.workflows_seen.retain(|id, _| live.contains(id));
        }
        if let Err(e) = self.audit.append_blocking(records).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }

    /// `recover` for one workflow finding: gate, intent, the guarded
    /// transaction, outcome. Returns the outcome record when written.
    pub(super) async fn recover(
        &self,
        f: &WorkflowFinding,
        line: DsLine,
        actor: &str,
        gate: Gate,
        forced: bool,
    ) -> Result<Record, ReapError> {
        self.gate_open(&gate).map_err(ReapError::Refused)?;
        let now = self.now();
        let mut intent = self.workflow_record(AuditEvent::Intent, actor, f, line, now);
        intent.action = Some(WorkflowAction::Recover.as_str().to_string());
        if forced {
            intent.reason = Some("forced".into());
        }
        let count = |result: ActionResult| self.count_recovery(result);
        if let Err(e) = self.audit.append_blocking(vec![intent.clone()]).await {
            count(ActionResult::Error);
            return Err(ReapError::Unavailable(format!(
                "cannot write the audit trail, not writing: {e}"
            )));
        }
        let registry = self.registry.clone();
        let live_master = move |h: &str| {
            let v = registry.view();
            !v.is_valid() || v.live(NodeKind::Master, h).is_some()
        };
        let outcome = self
            .store
            .recover_workflow(line, &f.workflow, now, &live_master)
            .await;
        let mut rec = intent;
        rec.ts = self.now();
        let result = self.recovered(&mut rec, outcome);
        if let Err(e) = self.audit.append_blocking(vec![rec]).await {
            tracing::error!(error = %e, "cannot write audit outcome");
        }
        result
    }

    fn count_recovery(&self, result: ActionResult) {
        self.metrics
            .workflow_actions_total
            .with_label_values(&["recover", result.as_str()])
            .inc();
    }

    /// The outcome record (`rec`, the intent's copy) and the result of one
    /// recovery write, counted in `workflow_actions_total`.
    fn recovered(
        &self,
        rec: &mut Record,
        outcome: Result<WorkflowOutcome, reaper_core::ports::PortError>,
    ) -> Result<Record, ReapError> {
        let count = |result: ActionResult| self.count_recovery(result);
        match outcome {
            Ok(WorkflowOutcome::Done {
                workflow_state,
                command_type,
                command_id,
            }) => {
                count(ActionResult::Ok);
                rec.event = AuditEvent::Done;
                rec.to_state = workflow_state
                    .and_then(reaper_core::workflow::workflow_state_name)
                    .map(str::to_string);
                rec.detail = Some(format!(
                    "command {command_type} (id {})",
                    command_id.map_or_else(|| "-".into(), |i| i.to_string())
                ));
                Ok(rec.clone())
            }
            Ok(WorkflowOutcome::LostRace(why)) => {
                count(ActionResult::LostRace);
                rec.event = AuditEvent::LostRace;
                rec.detail = Some(why.clone());
                Err(ReapError::LostRace(why))
            }
            Ok(WorkflowOutcome::Skipped(why)) => {
                // DS took the workflow (or its master came back) between our
                // read and the lock: a race lost to DS, nothing written.
                count(ActionResult::LostRace);
                rec.event = AuditEvent::LostRace;
                rec.detail = Some(format!("not written: {why}"));
                Err(ReapError::LostRace(why))
            }
            Err(e) => {
                self.db_failed(&e);
                count(ActionResult::Error);
                rec.event = AuditEvent::Error;
                rec.detail = Some(e.to_string());
                Err(ReapError::Unavailable(e.to_string()))
            }
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
        let gate = Gate {
            valid_since,
            leader_only: true,
        };
        self.recover(&finding, line, actor, gate, forced).await
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
            crate::views::host_words(wf.host.as_deref())
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
