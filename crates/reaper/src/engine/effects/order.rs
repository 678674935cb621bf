//! The kill order effect (SPEC §15): the intent on disk first, then the
//! order node the ghost's agent carries out. Its answer comes with a later
//! report of the agent and is audited then (`ghosts::answers`).

use super::{Context, Outcome};
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::engine::Engine;
use reaper_core::ghost::{self, Ghost};
use reaper_core::order::KillOrder;
use reaper_core::{DsLine, Instant};

impl Engine {
    pub(in crate::engine) fn ghost_record(
        &self,
        event: AuditEvent,
        g: &Ghost,
        line: DsLine,
        now: Instant,
    ) -> Record {
        let mut r = Record::event(event, "daemon", now);
        r.kind = Some(RecordKind::Process);
        r.task_id = Some(g.task_id);
        r.workflow_instance_id = g.workflow_instance_id;
        r.task_name = g.task_name.clone();
        r.host = Some(g.worker.clone());
        r.worker_group = g.worker_group.clone();
        r.reason = Some(ghost::GHOST_PROCESS.to_string());
        r.evidence = serde_json::to_value(&g.evidence).ok();
        r.from_state = g.row_state.clone();
        r.action = Some(g.action.as_str().to_string());
        r.ds_line = Some(line.as_str().to_string());
        // row_never_seen, database_mismatch, kill_ordered: why it is not killed
        r.detail = g.note.clone();
        r
    }

    /// One kill order for `g`, in the agent's folder `folder`.
    pub(super) async fn kill_order(&self, g: &Ghost, folder: String, cx: &Context<'_>) -> Outcome {
        let now = self.now();
        let order = KillOrder {
            task_id: g.task_id,
            pids: g.processes.clone(),
            reason: ghost::GHOST_PROCESS.to_string(),
            issued_at: now.timestamp_millis(),
            order_id: order_id(&g.worker, g.task_id, now),
        };
        let mut outcome = Outcome::Ordered {
            worker: g.worker.clone(),
            task_id: g.task_id,
            folder: folder.clone(),
            order: None,
            tried: false,
        };
        // the event is set by `intend`
        let mut intent = self.ghost_record(AuditEvent::Detected, g, cx.line, now);
        intent.detail = Some(format!("kill order {}", order.order_id));
        if let Err(e) = self.intend(vec![intent]).await {
            tracing::error!(error = %e, task_id = g.task_id, "intent not audited: no kill order");
            return outcome;
        }
        if let Outcome::Ordered { tried, .. } = &mut outcome {
            *tried = true;
        }
        match self.registry.put_order(&folder, &order).await {
            Ok(()) => {
                tracing::warn!(task_id = g.task_id, worker = %g.worker, order_id = %order.order_id,
                    pids = ?g.pids(), "kill order written");
                if let Outcome::Ordered { order: o, .. } = &mut outcome {
                    *o = Some(order);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, task_id = g.task_id, "kill order not written");
                self.metrics
                    .ghost_actions_total
                    .with_label_values(&["error"])
                    .inc();
                let mut r = self.ghost_record(AuditEvent::Error, g, cx.line, self.now());
                r.detail = Some(format!("kill order not written: {e}"));
                if let Err(e) = self.audit.append_blocking(vec![r]).await {
                    tracing::error!(error = %e, "cannot write the audit trail");
                }
            }
        }
        outcome
    }
}

/// Unique per issue: worker, task and the daemon's clock, plus a process-wide
/// counter so two issues in one millisecond differ.
fn order_id(worker: &str, task_id: i64, now: Instant) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{}-{task_id}-{}-{n}",
        worker.replace(['/', ' '], "_"),
        now.timestamp_millis()
    )
}
