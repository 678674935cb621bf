//! The sweep's audit records of what it judged: zombies when first seen
//! (`detected`) and the brake's changes.

use super::{Engine, SweepState};
use crate::audit::{AuditEvent, Record};
use reaper_core::{BrakeState, DsLine, IdSet, Instant, Zombie};

/// Detection records are appended in batches of at most this many, so a
/// mass event never builds one huge buffer.
const DETECTED_BATCH: usize = 1000;

impl Engine {
    pub(super) async fn record_detection(
        &self,
        st: &mut SweepState,
        zombies: &[Zombie],
        live: &IdSet,
        line: DsLine,
        now: Instant,
    ) {
        let mut records = Vec::new();
        for z in zombies {
            if st.seen.get(&z.task.id) != Some(&z.reason) {
                st.seen.insert(z.task.id, z.reason);
                self.metrics
                    .zombies_detected_total
                    .with_label_values(&[z.reason.as_str()])
                    .inc();
                tracing::warn!(task_id = z.task.id, reason = %z.reason, host = ?z.task.host,
                    action = %z.action, "zombie detected");
                records.push(self.base_record(AuditEvent::Detected, "daemon", z, line, now));
                if records.len() >= DETECTED_BATCH {
                    if let Err(e) = self
                        .audit
                        .append_blocking(std::mem::take(&mut records))
                        .await
                    {
                        tracing::error!(error = %e, "cannot write the audit trail");
                    }
                }
            }
        }
        // Forget tasks that are no longer live rows, so the map stays bounded.
        if st.seen.len() > zombies.len() {
            st.seen.retain(|id, _| live.contains(id));
        }
        if let Err(e) = self.audit.append_blocking(records).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }

    pub(super) async fn record_brake(
        &self,
        was_engaged: bool,
        brake: &BrakeState,
        line: DsLine,
        now: Instant,
    ) {
        let engaged = brake.engaged();
        if engaged == was_engaged {
            return;
        }
        let mut r = Record::event(AuditEvent::Brake, "daemon", now);
        r.ds_line = Some(line.as_str().to_string());
        let b = brake;
        r.detail = Some(if engaged {
            format!("engaged: {}", b.why.clone().unwrap_or_default())
        } else {
            "released".to_string()
        });
        r.reason = b.reason.map(|r| r.as_str().to_string());
        if !b.servers.is_empty() {
            r.evidence = Some(serde_json::json!({ "servers": b.servers }));
        }
        if engaged {
            tracing::error!(why = ?b.why, reason = ?b.reason, "brake engaged: no action until the condition clears");
        } else {
            tracing::info!("brake released");
        }
        if let Err(e) = self.audit.append_blocking(vec![r]).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }
}
