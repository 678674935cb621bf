//! Stuck under a live owner (SPEC §16): the sweep's report-only step. The
//! task part is judged while the sweep still holds its candidates (with the
//! other live rows the same read returned, and 3.4's serial queue); the
//! workflow part after the workflow step, from its candidates. Nothing here
//! writes to DS's database, whatever the policy says: the findings go to the
//! status, the metrics and the audit trail (once, when first seen).

use super::{Engine, Error, SweepState};
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::config::Settings;
use reaper_core::anomaly::{
    plan_task_anomalies, plan_workflow_anomalies, Anomaly, AnomalyKind, AnomalyReport, AnomalyRows,
    AnomalySettings, STOP_STATES,
};
use reaper_core::ports::{PortErrorKind, Scan};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{Candidate, DsLine, Instant, RegistryView};
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

/// The anomaly step's read, as `/readyz` names it when it fails.
const ANOMALY_READ: &str = "rows of live-owner findings";

fn settings_of(s: &Settings) -> AnomalySettings {
    AnomalySettings {
        dispatch_stall_after: s.reconcile.dispatch_stall_after,
        workflow_stall_after: s.reconcile.workflow_stall_after,
        agent_stale_after: s.reconcile.agent_stale_after,
    }
}

impl Engine {
    /// The rows beside the candidates; a store that cannot read them, or a
    /// failed read, leaves the candidates alone to judge (logged, counted).
    async fn anomaly_rows(&self, line: DsLine) -> AnomalyRows {
        match self.store.anomaly_rows(line).await {
            Ok(r) => {
                self.read_ok(ANOMALY_READ);
                r
            }
            Err(e) if e.kind() != PortErrorKind::Unavailable => {
                self.read_fault(ANOMALY_READ, &e);
                AnomalyRows::default()
            }
            Err(e) => {
                self.db_failed(&e);
                tracing::warn!(error = %e, "reading the rows of live-owner findings failed; candidates alone judged");
                AnomalyRows::default()
            }
        }
    }

    /// The task part, right after the candidate read it belongs to.
    pub(super) async fn task_anomalies(
        &self,
        line: DsLine,
        candidates: &[Candidate],
        states: &[i32],
        view: &RegistryView,
        now: Instant,
    ) -> AnomalyReport {
        let rows = self.anomaly_rows(line).await;
        plan_task_anomalies(
            view,
            line,
            candidates,
            &rows,
            states,
            now,
            &settings_of(&self.settings),
        )
    }

    /// Adds the workflow part, then publishes: status, metrics, and one
    /// `detected` audit record (`kind = "anomaly"`) per finding first seen.
    pub(super) async fn publish_anomalies(
        &self,
        st: &mut SweepState,
        mut report: AnomalyReport,
        stopping: &[WorkflowCandidate],
        view: &RegistryView,
        line: DsLine,
        now: Instant,
    ) -> usize {
        report.anomalies.extend(plan_workflow_anomalies(
            view,
            line,
            stopping,
            now,
            &settings_of(&self.settings),
        ));
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
        self.status_write().anomalies = Arc::new(report.anomalies);
        n
    }

    /// `check`'s anomalies: one full read of its own, nothing written, nothing audited.
    pub async fn check_anomalies(&self) -> Result<Vec<Anomaly>, Error> {
        let line = {
            let mut st = self.state.lock().await;
            self.line(&mut st).await?.0
        };
        let view = self.registry.view();
        if !view.is_valid() {
            return Err(Error::ViewInvalid);
        }
        let (states, _) = self.settings.live_states(line);
        let candidates = self
            .store
            .scan_once(line, &states)
            .await
            .map_err(Error::port("reading candidates"))?;
        let rows = match self.store.anomaly_rows(line).await {
            Ok(r) => r,
            Err(e) if e.kind() == PortErrorKind::Unsupported => AnomalyRows::default(),
            Err(e) => return Err(Error::port("reading the rows of live-owner findings")(e)),
        };
        let now = self.now();
        let settings = settings_of(&self.settings);
        let mut report =
            plan_task_anomalies(&view, line, &candidates, &rows, &states, now, &settings);
        drop(candidates);
        if self.settings.reconcile.workflows {
            let (wf_states, _) = self.settings.workflow_states(line);
            let wfs = match self
                .store
                .workflow_candidates(line, &wf_states, &states, Scan::Full)
                .await
            {
                Ok(w) => w,
                Err(e) if e.kind() == PortErrorKind::Unsupported => Vec::new(),
                Err(e) => return Err(Error::port("reading workflow instances")(e)),
            };
            report.anomalies.extend(plan_workflow_anomalies(
                &view,
                line,
                &stopping(&wfs),
                now,
                &settings,
            ));
        }
        Ok(report.anomalies)
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
