//! The workflow `recover` effect (SPEC §13): intent on disk, one guarded
//! transaction (the row locked and re-read, conditional on the state and
//! host the decision was made on, the live master decided again), outcome.

use super::{ActionResult, Context};
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::engine::reap::ReapError;
use crate::engine::Engine;
use reaper_core::ports::WorkflowOutcome;
use reaper_core::workflow::{WorkflowAction, WorkflowFinding};
use reaper_core::{DsLine, Instant, NodeKind};

impl Engine {
    pub(in crate::engine) fn workflow_record(
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
        // why a recover is held (child_workflow_running, ...), as for tasks
        r.detail = f.note.clone();
        r
    }

    /// `recover` for one workflow finding: gate, intent, the guarded
    /// transaction, outcome. Returns the outcome record when written.
    pub(super) async fn recover(
        &self,
        f: &WorkflowFinding,
        cx: &Context<'_>,
        forced: bool,
    ) -> Result<Record, ReapError> {
        let (line, actor) = (cx.line, cx.actor);
        self.gate_open(&cx.gate)
            .map_err(|why| ReapError::Refused(why.to_string()))?;
        let now = self.now();
        // the event is set by `intend`
        let mut intent = self.workflow_record(AuditEvent::Detected, actor, f, line, now);
        intent.action = Some(WorkflowAction::Recover.as_str().to_string());
        if forced {
            intent.reason = Some("forced".into());
        }
        let count = |result: ActionResult| self.count_recovery(result);
        let intent = match self.intend(vec![intent]).await {
            Ok(mut written) => written.remove(0),
            Err(e) => {
                count(ActionResult::Error);
                return Err(ReapError::Unavailable(format!(
                    "cannot write the audit trail, not writing: {e}"
                )));
            }
        };
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
}
