//! One sweep: read candidates, take the view, plan, record, act.

use super::act::Item;
use super::{Engine, Gate, SweepResult, SweepState, SweepSummary, Trigger};
use crate::audit::{AuditEvent, Record};
use reaper_core::ports::Scan;
use reaper_core::workflow::WorkflowFinding;
use reaper_core::{plan, Candidate, DsLine, Instant, Plan, Reason, SafetyState, UnseenAbsence};
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument;

/// Detection records are appended in batches of at most this many, so a
/// mass event never builds one huge buffer.
const DETECTED_BATCH: usize = 1000;

impl Engine {
    fn finish(&self, summary: SweepSummary, started: std::time::Instant) {
        let m = &self.metrics;
        m.sweeps_total
            .with_label_values(&[summary.result.as_str()])
            .inc();
        let mut st = self.status_write();
        if summary.result != SweepResult::Skipped {
            let took = started.elapsed();
            m.sweep_duration_seconds.observe(took.as_secs_f64());
            m.last_sweep_timestamp_seconds
                .set(summary.at.timestamp_millis() as f64 / 1000.0);
            if summary.result == SweepResult::Ok {
                let h = &mut st.history;
                while h.len() >= super::HISTORY_POINTS
                    || h.front()
                        .is_some_and(|p| summary.at - p.at > super::HISTORY_WINDOW)
                {
                    h.pop_front();
                }
                h.push_back(super::SweepPoint {
                    at: summary.at,
                    zombies: summary.zombies,
                    workflows: summary.workflows,
                    actions: summary.actions,
                    duration_ms: took.as_millis() as u64,
                });
            }
        }
        st.last_sweep = Some(summary);
    }

    /// One pass: read, plan, and (as leader, unbraked) act. Passes run one
    /// at a time; a pass asked for while one runs waits for it.
    pub async fn sweep(&self, trigger: Trigger) -> SweepSummary {
        let span = tracing::info_span!("sweep", ?trigger);
        self.sweep_in_span().instrument(span).await
    }

    async fn sweep_in_span(&self) -> SweepSummary {
        let mut st = self.state.lock().await;
        let started = std::time::Instant::now();
        let mut summary = SweepSummary {
            at: self.now(),
            result: SweepResult::Skipped,
            detail: None,
            kind: "incremental",
            candidates: 0,
            zombies: 0,
            actions: 0,
            workflows: 0,
        };
        let before = self.registry.view();
        self.refresh_gauges(&before);
        if let reaper_core::ViewState::Invalid { reason, .. } = &before.state {
            summary.detail = Some(format!("registry view invalid: {reason}"));
            self.finish(summary.clone(), started);
            return summary;
        }
        drop(before);
        let (line, line_hold) = match self.line(&mut st).await {
            Ok(x) => x,
            Err(e) => {
                summary.result = SweepResult::Error;
                summary.detail = Some(e);
                self.finish(summary.clone(), started);
                return summary;
            }
        };
        let (states, _) = self.settings.live_states(line);
        let full = st.last_full.is_none_or(|t| {
            (self.now() - t) >= reaper_core::delta(self.settings.reconcile.full_scan_interval)
        });
        summary.kind = if full { "full" } else { "incremental" };
        let scan = if full { Scan::Full } else { Scan::Incremental };
        let candidates = match self.store.candidates(line, &states, scan).await {
            Ok(c) => {
                if full {
                    st.last_full = Some(self.now());
                }
                self.status_write().db_error = None;
                c
            }
            Err(e) => {
                self.db_failed(&e);
                tracing::warn!(error = %e, "sweep failed reading candidates");
                summary.result = SweepResult::Error;
                summary.detail = Some(e.to_string());
                self.finish(summary.clone(), started);
                return summary;
            }
        };

        let listed = self.read_listed(line, &candidates).await;

        // SPEC §4.1: judge against a view taken after the read. A worker that
        // registered during a long scan and got a task is then known, and a
        // host the view never saw counts from the task's own time anyway.
        let view = self.registry.view();
        self.refresh_gauges(&view);
        let now = self.now();
        summary.at = now;
        let Some(valid_since) = view.valid_since() else {
            if let reaper_core::ViewState::Invalid { reason, .. } = &view.state {
                summary.detail = Some(format!("registry view invalid: {reason}"));
            }
            self.finish(summary.clone(), started);
            return summary;
        };
        let hold = if !self.is_leader() {
            Some("not the leader".to_string())
        } else {
            line_hold
        };
        let policy = self.settings.policy(line);
        let safety_hold = hold.clone();
        let safety = SafetyState {
            hold,
            ..st.safety.clone()
        };
        let mut plan = plan(&view, &candidates, now, &policy, &safety);
        let was_engaged = st.safety.brake.engaged();
        st.safety = SafetyState {
            hold: None,
            ..plan.next.clone()
        };

        self.record_detection(&mut st, &plan, &candidates, line, now)
            .await;
        self.record_brake(was_engaged, &plan, line, now).await;

        // SPEC §17: a task whose YARN application may still run is held.
        let remote_gate = Gate {
            valid_since,
            leader_only: true,
        };
        let mut remote = self
            .judge_remote_apps(&mut plan.zombies, &view, line, remote_gate)
            .await;
        if full {
            self.forget_remote_apps(&candidates, &view, now).await;
        }
        let zombies = Arc::new(std::mem::take(&mut plan.zombies));
        let mut per_reason: BTreeMap<Reason, i64> = Reason::ALL.iter().map(|r| (*r, 0)).collect();
        for z in zombies.iter() {
            *per_reason.entry(z.reason).or_default() += 1;
        }
        for (r, n) in per_reason {
            self.metrics.zombies.with_label_values(&[r.as_str()]).set(n);
        }
        self.metrics.candidates.set(candidates.len() as i64);
        self.metrics
            .brake_engaged
            .set(plan.next.brake.engaged() as i64);
        {
            let mut s = self.status_write();
            s.zombies = zombies.clone();
            s.zombies_at = Some(now);
            s.brake = plan.next.brake.clone();
        }

        let items: Vec<Item<'_>> = zombies
            .iter()
            .filter(|z| z.disposition == reaper_core::Disposition::Act)
            .map(|zombie| Item {
                zombie,
                forced: false,
            })
            .collect();
        let gate = Gate {
            valid_since,
            leader_only: true,
        };
        let applied = match self.act(&items, line, "daemon", gate).await {
            Ok(done) => done
                .iter()
                .filter(|(r, _)| *r == super::ActionResult::Ok)
                .count(),
            Err(super::act::NotWritten::Gate(why) | super::act::NotWritten::Audit(why)) => {
                tracing::warn!(%why, planned = items.len(), "nothing written in this sweep");
                0
            }
        };

        // The task rows are done with: let them go before the workflow
        // sweep reads its own, so the two never add up (at 100,000 live rows
        // each is tens of MiB).
        let candidate_count = candidates.len();
        let anomalies = self
            .task_anomalies(line, &candidates, &states, &view, now)
            .await;
        drop(candidates);

        // Workflows after tasks: one view, one budget (SPEC §13).
        let wf = self
            .sweep_workflows(
                &mut st,
                line,
                full,
                &view,
                now,
                gate,
                SafetyState {
                    hold: safety_hold.clone(),
                    ..plan.next.clone()
                },
                plan.action_count(),
            )
            .await;
        let ghost_safety = SafetyState {
            hold: safety_hold,
            ..wf.next
        };
        let after_ghosts = self
            .sweep_ghosts(
                &mut st,
                line,
                listed,
                &view,
                now,
                gate,
                ghost_safety,
                plan.action_count() + wf.actions,
                &mut remote,
            )
            .await;
        self.remote_gauge(&remote);
        st.safety = SafetyState {
            hold: None,
            ..after_ghosts
        };
        self.publish_anomalies(&mut st, anomalies, &wf.stopping, &view, line, now)
            .await;

        summary.result = SweepResult::Ok;
        summary.candidates = candidate_count;
        summary.zombies = zombies.len();
        summary.actions = applied + wf.actions;
        summary.workflows = wf.findings;
        if let Some(b) = &plan.next.brake.why {
            if plan.next.brake.engaged() {
                summary.detail = Some(format!("brake engaged: {b}"));
            }
        }
        tracing::debug!(result = %summary.result, kind = summary.kind, candidates = summary.candidates,
            zombies = summary.zombies, actions = summary.actions, "sweep done");
        self.finish(summary.clone(), started);
        summary
    }

    async fn record_detection(
        &self,
        st: &mut SweepState,
        plan: &Plan,
        candidates: &[Candidate],
        line: DsLine,
        now: Instant,
    ) {
        let mut records = Vec::new();
        for z in &plan.zombies {
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
        if st.seen.len() > plan.zombies.len() {
            let live: std::collections::HashSet<i64> = candidates.iter().map(|c| c.id).collect();
            st.seen.retain(|id, _| live.contains(id));
        }
        if let Err(e) = self.audit.append_blocking(records).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }

    async fn record_brake(&self, was_engaged: bool, plan: &Plan, line: DsLine, now: Instant) {
        let engaged = plan.next.brake.engaged();
        if engaged == was_engaged {
            return;
        }
        let mut r = Record::event(AuditEvent::Brake, "daemon", now);
        r.ds_line = Some(line.as_str().to_string());
        r.detail = Some(if engaged {
            format!(
                "engaged: {}",
                plan.next.brake.why.clone().unwrap_or_default()
            )
        } else {
            "released".to_string()
        });
        if engaged {
            tracing::error!(why = ?plan.next.brake.why, "brake engaged: no action until the condition clears");
        } else {
            tracing::info!("brake released");
        }
        if let Err(e) = self.audit.append_blocking(vec![r]).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }

    /// Judges candidates as `check` does: nothing is written, and a host whose
    /// loss was not seen counts as lost for an unknown time. Workflow
    /// findings follow the task zombies (SPEC §13).
    pub async fn check(&self) -> Result<(DsLine, Plan, Vec<WorkflowFinding>), String> {
        let mut st = self.state.lock().await;
        if !self.registry.view().is_valid() {
            return Err("the registry view is not valid".into());
        }
        let (line, line_hold) = self.line(&mut st).await?;
        let (states, _) = self.settings.live_states(line);
        let candidates = self
            .store
            .scan_once(line, &states)
            .await
            .map_err(|e| format!("reading candidates: {e}"))?;
        let view = self.registry.view();
        if !view.is_valid() {
            return Err("the registry view is not valid".into());
        }
        let mut policy = self.settings.policy(line);
        policy.unseen_absence = UnseenAbsence::Unknown;
        policy.startup_settle = std::time::Duration::ZERO;
        let safety = SafetyState {
            hold: Some(line_hold.unwrap_or_else(|| "check never writes".into())),
            ..SafetyState::default()
        };
        let now = self.now();
        let mut plan = plan(&view, &candidates, now, &policy, &safety);
        // SPEC §17: the applications' states in the findings; nothing is
        // killed, since the hold above blocks every zombie.
        if let Some(valid_since) = view.valid_since() {
            let gate = Gate {
                valid_since,
                leader_only: false,
            };
            let _ = self
                .judge_remote_apps(&mut plan.zombies, &view, line, gate)
                .await;
        }
        let workflows = if self.settings.reconcile.workflows {
            let (wf_states, _) = self.settings.workflow_states(line);
            let wfs = match self
                .store
                .workflow_candidates(line, &wf_states, &states, Scan::Full)
                .await
            {
                Ok(w) => w,
                // The store cannot read them: no findings, not a failure.
                Err(reaper_core::ports::PortError::Invalid(_)) => Vec::new(),
                Err(e) => return Err(format!("reading workflow instances: {e}")),
            };
            let mut wp = self.settings.workflow_policy();
            wp.unseen_absence = UnseenAbsence::Unknown;
            reaper_core::workflow::plan_workflows(
                &view,
                &wfs,
                now,
                line,
                &wp,
                std::time::Duration::ZERO,
                policy.max_actions_per_sweep,
                0,
                &plan.next,
            )
            .0
        } else {
            Vec::new()
        };
        Ok((line, plan, workflows))
    }
}
