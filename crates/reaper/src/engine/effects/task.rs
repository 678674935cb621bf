//! The task batch effect, for the daemon and for `reap` alike: intents on
//! disk first (SPEC §4.7) → one conditional batch write (§4.2) → outcomes,
//! then each applied write's follow-ups under the gate (§4.1).

use super::{Context, Engine, Gate, GateClosed};
use crate::audit::{AuditError, AuditEvent, Record, RecordKind};
use reaper_core::ports::{
    FollowUpOutcome, FollowUpRequest, GateRefused, PortError, TaskWrite, WriteOutcome,
};
use reaper_core::{Action, DsLine, FollowUp, Instant, NodeKind, Zombie};

/// The intents back from the audit, or why they could not be written.
type Appended = Result<Vec<Record>, AuditError>;

/// The `result` label of `actions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionResult {
    Ok,
    LostRace,
    Error,
}

impl ActionResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionResult::Ok => "ok",
            ActionResult::LostRace => "lost_race",
            ActionResult::Error => "error",
        }
    }

    fn event(self) -> AuditEvent {
        match self {
            ActionResult::Ok => AuditEvent::Done,
            ActionResult::LostRace => AuditEvent::LostRace,
            ActionResult::Error => AuditEvent::Error,
        }
    }
}

/// One write to make: a judged zombie, or a forced task (`reap --force`,
/// audited with reason `forced`).
pub(in crate::engine) struct Item<'a> {
    pub zombie: &'a Zombie,
    pub forced: bool,
}

/// Why nothing at all was written.
#[derive(Debug, thiserror::Error)]
pub(in crate::engine) enum NotWritten {
    /// The view changed or leadership was lost since the judgement.
    #[error(transparent)]
    Gate(#[from] GateClosed),
    /// The intents could not be audited: no audit, no write.
    #[error("cannot write the audit trail, not writing: {0}")]
    Audit(#[source] AuditError),
}

const LOST_RACE: &str = "the row changed since it was read; not retried";

impl Engine {
    pub(in crate::engine) fn base_record(
        &self,
        event: AuditEvent,
        actor: &str,
        z: &Zombie,
        line: DsLine,
        now: Instant,
    ) -> Record {
        let mut r = Record::event(event, actor, now);
        r.kind = Some(RecordKind::Task);
        r.task_id = Some(z.task.id);
        r.workflow_instance_id = z.task.workflow_instance_id;
        r.task_name = Some(z.task.name.to_string());
        r.host = z.task.host.as_deref().map(str::to_string);
        r.worker_group = z.task.worker_group.as_deref().map(str::to_string);
        r.reason = Some(z.reason.as_str().to_string());
        r.evidence = serde_json::to_value(&z.evidence).ok();
        r.from_state = Some(z.state_name.clone());
        r.action = Some(z.action.as_str().to_string());
        r.workflow = Some(z.workflow.as_str().to_string());
        r.ds_line = Some(line.as_str().to_string());
        // why the action or follow-up is held (child_workflow_running, ...):
        // the trail says it, not only the API (SPEC §5, §13)
        r.detail = z.note.clone();
        r
    }

    fn count(&self, action: Action, result: ActionResult) {
        self.metrics
            .actions_total
            .with_label_values(&[action.as_str(), result.as_str()])
            .inc();
    }

    /// Writes the items (intent → write → outcome) and their follow-ups.
    /// Returns each item's result with its outcome record, in order.
    pub(super) async fn task_batch(
        &self,
        items: &[Item<'_>],
        cx: &Context<'_>,
    ) -> Result<Vec<(ActionResult, Record)>, NotWritten> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let (line, actor, gate) = (cx.line, cx.actor, cx.gate);
        self.gate_open(&gate)?;
        let now = self.now();
        let (outcomes, appended) = self.write_behind_audit(items, line, actor, now).await;
        let intents = match appended {
            Ok(intents) => intents,
            Err(e) => {
                tracing::error!(error = %e, "cannot write audit intents; not writing");
                for it in items {
                    self.count(it.zombie.action, ActionResult::Error);
                }
                return Err(NotWritten::Audit(e));
            }
        };
        let done = match outcomes {
            Err(e) => self.batch_failed(items, intents, &e),
            Ok(outcomes) => {
                self.outcomes(items, intents, outcomes, line, now, &gate)
                    .await
            }
        };
        let records: Vec<Record> = done.iter().map(|(_, r)| r.clone()).collect();
        if let Err(e) = self.audit.append_blocking(records).await {
            tracing::error!(error = %e, "cannot write audit outcomes");
        }
        // One line per batch: the audit trail has every task.
        tracing::warn!(
            applied = done.iter().filter(|(r, _)| *r == ActionResult::Ok).count(),
            attempted = items.len(),
            task_ids = ?items.iter().take(20).map(|it| it.zombie.task.id).collect::<Vec<_>>(),
            "zombies reaped"
        );
        Ok(done)
    }

    /// The batch's intent records, one per item.
    fn intents(&self, items: &[Item<'_>], line: DsLine, actor: &str, now: Instant) -> Vec<Record> {
        items
            .iter()
            .map(|it| {
                // the event is set by `intend`
                let mut r = self.base_record(AuditEvent::Detected, actor, it.zombie, line, now);
                if it.forced {
                    r.reason = Some("forced".into());
                }
                r.to_state = it
                    .zombie
                    .action
                    .target_state()
                    .and_then(|c| line.state_name(c))
                    .map(str::to_string);
                r
            })
            .collect()
    }

    /// The batch's conditional write, committed only once its intents are
    /// on disk (SPEC §4.7); returns the store's outcomes and the appended
    /// intents.
    async fn write_behind_audit(
        &self,
        items: &[Item<'_>],
        line: DsLine,
        actor: &str,
        now: Instant,
    ) -> (Result<Vec<WriteOutcome>, PortError>, Appended) {
        let writes: Vec<TaskWrite> = items
            .iter()
            .map(|it| TaskWrite {
                seen: it.zombie.task.clone(),
                action: it.zombie.action,
                now,
            })
            .collect();
        // The store starts first, on a task of its own: what comes before its
        // first change (a connection, a transaction, MySQL's locking read)
        // overlaps building the intents and their fsync. It waits for them
        // through `before_write` and changes no row before they are on disk.
        // Dropping the handle (the sweep cancelled) aborts it, rolling back.
        let (tx, rx) = tokio::sync::oneshot::channel::<Result<(), GateRefused>>();
        let before_write = Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                Err(GateRefused(
                    "the audit append ended without a result".to_string(),
                ))
            })
        });
        let store = self.store.clone();
        let writing = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            store.write_tasks_after(line, &writes, before_write).await
        }));
        // A task spawned here waits in this worker's slot for the next
        // yield, which building the intents would put off by milliseconds:
        // yield once so that the store sends its first statement now.
        tokio::task::yield_now().await;
        let intents = self.intents(items, line, actor, now);
        let appended = self.intend(intents).await;
        let _ = tx.send(
            appended
                .as_ref()
                .map(|_| ())
                .map_err(|e| GateRefused(e.to_string())),
        );
        // Whatever the store did, the intents ended on file (or failed to)
        // before any outcome is recorded.
        let outcomes = match writing.await {
            Ok(r) => r,
            Err(e) => Err(PortError::unavailable(format!(
                "the task write failed: {e}"
            ))),
        };
        (outcomes, appended)
    }

    /// Every item of a batch whose write failed as a whole: an error each.
    fn batch_failed(
        &self,
        items: &[Item<'_>],
        intents: Vec<Record>,
        e: &PortError,
    ) -> Vec<(ActionResult, Record)> {
        self.db_failed(e);
        tracing::error!(error = %e, "task writes failed");
        items
            .iter()
            .zip(intents)
            .map(|(it, mut r)| {
                self.count(it.zombie.action, ActionResult::Error);
                r.event = AuditEvent::Error;
                r.ts = self.now();
                r.detail = Some(e.to_string());
                (ActionResult::Error, r)
            })
            .collect()
    }

    /// Each item's outcome record; an applied write's follow-ups first.
    async fn outcomes(
        &self,
        items: &[Item<'_>],
        intents: Vec<Record>,
        outcomes: Vec<WriteOutcome>,
        line: DsLine,
        now: Instant,
        gate: &Gate,
    ) -> Vec<(ActionResult, Record)> {
        let mut done = Vec::with_capacity(items.len());
        for ((it, mut r), outcome) in items.iter().zip(intents).zip(outcomes) {
            let z = it.zombie;
            let result = match outcome {
                WriteOutcome::LostRace => {
                    tracing::info!(task_id = z.task.id, "lost race: {LOST_RACE}");
                    r.detail = Some(LOST_RACE.into());
                    ActionResult::LostRace
                }
                WriteOutcome::Applied => {
                    tracing::debug!(task_id = z.task.id, action = %z.action, reason = %z.reason, "zombie reaped");
                    r.detail = self.after_write(z, line, now, gate).await;
                    ActionResult::Ok
                }
            };
            self.count(z.action, result);
            r.event = result.event();
            r.ts = self.now();
            done.push((result, r));
        }
        done
    }

    /// Follow-ups after an applied write: the workflow, and 1.2's task queue.
    async fn after_write(
        &self,
        z: &Zombie,
        line: DsLine,
        now: Instant,
        gate: &Gate,
    ) -> Option<String> {
        let mut notes = Vec::new();
        if let Some(n) = &z.note {
            notes.push(n.clone());
        }
        let queue = line == DsLine::V1_2 && z.action == Action::Fail;
        if z.workflow != FollowUp::None {
            // test-only (tests/real-ds leader-handover); inert unless armed
            crate::engine::fault::pause_after(crate::engine::fault::FaultPoint::TaskWrite).await;
        }
        if queue || z.workflow != FollowUp::None {
            // SPEC §4.1: checked again right before each follow-up.
            if let Err(why) = self.gate_open(gate) {
                self.metrics
                    .effects_skipped_total
                    .with_label_values(&[why.label()])
                    .inc();
                notes.push(format!("follow-ups not done: {why}"));
                return Some(notes.join("; "));
            }
        }
        if queue {
            match self.registry.delete_task_queue_entries(z.task.id).await {
                Ok(n) => notes.push(format!("removed {n} tasks_queue entries")),
                Err(e) => {
                    self.metrics.zk_errors_total.inc();
                    notes.push(format!("tasks_queue cleanup failed: {e}"));
                }
            }
        }
        if z.workflow != FollowUp::None {
            let req = FollowUpRequest {
                task: z.task.clone(),
                action: z.action,
                follow_up: z.workflow,
                now,
            };
            // Whether a live master holds the workflow is decided again under
            // the row lock, from the view current at that moment (SPEC §4.9).
            // An invalid view cannot vouch for any master's absence.
            let registry = self.registry.clone();
            let live_master = move |h: &str| {
                let v = registry.view();
                !v.is_valid() || v.live(NodeKind::Master, h).is_some()
            };
            match self.store.follow_up(line, &req, &live_master).await {
                Ok(FollowUpOutcome::Done {
                    workflow_state,
                    command_type,
                    command_id,
                }) => notes.push(format!(
                    "workflow {}: state -> {}, command {} (id {})",
                    z.task.workflow_instance_id.unwrap_or_default(),
                    workflow_state.map_or_else(|| "unchanged".into(), |s| s.to_string()),
                    command_type.map_or_else(|| "none".into(), |s| s.to_string()),
                    command_id.map_or_else(|| "-".into(), |s| s.to_string()),
                )),
                Ok(FollowUpOutcome::Skipped(why)) => {
                    notes.push(format!("workflow follow-up skipped: {why}"))
                }
                Err(e) => {
                    self.db_failed(&e);
                    notes.push(format!("workflow follow-up failed: {e}"));
                }
            }
        }
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}
