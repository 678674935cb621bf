//! Stuck under a live owner (SPEC §16), report only: judged in the plan
//! step (the task part with the candidates and the rows beside them, the
//! workflow part with the workflow candidates) and published here. Nothing
//! here writes to DS's database, whatever the policy says: the findings go
//! to the status, the metrics and the audit trail (once, when first seen).

use super::{Engine, SweepState};
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::config::Settings;
use reaper_core::anomaly::{Anomaly, AnomalyKind, AnomalyReport, AnomalySettings, STOP_STATES};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{DsLine, Instant};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// The workflow candidates whose stall is an anomaly, not `workflow_stalled`.
pub(super) fn stopping(workflows: &[WorkflowCandidate]) -> Vec<WorkflowCandidate> {
    workflows
        .iter()
        .filter(|w| STOP_STATES.contains(&w.state))
        .cloned()
        .collect()
}

pub(super) fn settings_of(s: &Settings) -> AnomalySettings {
    AnomalySettings {
        dispatch_stall_after: s.reconcile.dispatch_stall_after,
        workflow_stall_after: s.reconcile.workflow_stall_after,
        agent_stale_after: s.reconcile.agent_stale_after,
    }
}

impl Engine {
    /// Publishes the sweep's findings: status, metrics, and one `detected`
    /// audit record (`kind = "anomaly"`) per finding first seen.
    pub(super) async fn publish_anomalies(
        &self,
        st: &mut SweepState,
        report: &AnomalyReport,
        line: DsLine,
        now: Instant,
    ) -> usize {
        let mut per_kind: BTreeMap<AnomalyKind, i64> =
            AnomalyKind::ALL.iter().map(|k| (*k, 0)).collect();
        for a in &report.anomalies {
            *per_kind.entry(a.kind).or_default() += 1;
        }
        for (k, n) in per_kind {
            self.metrics
                .anomalies
                .with_label_values(&[k.as_str()])
                .set(n);
        }
        // states of another line (after a re-detection) must not linger
        self.metrics.oldest_live_seconds.reset();
        for (state, age) in &report.oldest_live_seconds {
            self.metrics
                .oldest_live_seconds
                .with_label_values(&[state])
                .set(*age);
        }
        let mut records = Vec::new();
        let current: HashSet<String> = report.anomalies.iter().map(Anomaly::key).collect();
        for a in &report.anomalies {
            if st.anomalies_seen.insert(a.key()) {
                tracing::warn!(kind = %a.kind, workflow_instance_id = ?a.workflow_instance_id,
                    worker_group = ?a.worker_group, count = a.count, owner_master = ?a.owner_master,
                    "stuck under a live owner (report only)");
                records.push(record(a, line, now));
            }
        }
        // a finding that cleared and comes back is audited again
        st.anomalies_seen.retain(|k| current.contains(k));
        if let Err(e) = self.audit.append_blocking(records).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
        let n = report.anomalies.len();
        self.status_write().anomalies = Arc::new(report.anomalies.clone());
        n
    }
}

fn record(a: &Anomaly, line: DsLine, now: Instant) -> Record {
    let mut r = Record::event(AuditEvent::Detected, "daemon", now);
    r.kind = Some(RecordKind::Anomaly);
    // a finding is about a group of rows (their ids are in the evidence), not one task
    r.workflow_instance_id = a.workflow_instance_id;
    r.host = a.owner_master.clone();
    r.worker_group = a.worker_group.clone();
    r.reason = Some(a.kind.as_str().to_string());
    r.evidence = serde_json::to_value(a).ok();
    r.action = Some("report".into());
    r.ds_line = Some(line.as_str().to_string());
    r
}
