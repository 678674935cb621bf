//! The remote application kill effect (SPEC §17): intent on disk, the RM
//! asked to kill, then the application read again — the kill is `done` only
//! when that read shows it in a final state.

use super::{Context, Outcome, RemoteTarget};
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::engine::Engine;
use reaper_core::remote::{AppPhase, RemoteApp};

impl Engine {
    pub(super) async fn kill_remote_app(
        &self,
        target: RemoteTarget<'_>,
        app: &RemoteApp,
        cx: &Context<'_>,
    ) -> Outcome {
        let id = app.id.as_str();
        let mut outcome = Outcome::RemoteApp {
            app_id: id.to_string(),
            final_now: false,
        };
        let Some(rm) = self.rm.as_ref() else {
            return outcome;
        };
        let count = |result: &str| {
            self.metrics
                .remote_app_kills_total
                .with_label_values(&[result])
                .inc()
        };
        // the event is set by `intend`
        let mut r = self.remote_record(target, cx);
        let task_id = r.task_id.unwrap_or_default();
        r.kind = Some(RecordKind::RemoteApp);
        r.app_id = Some(id.to_string());
        r.action = Some("kill".into());
        r.from_state = app.state.clone();
        r.to_state = Some("KILLED".into());
        let mut r = match self.intend(vec![r]).await {
            Ok(mut written) => written.remove(0),
            Err(e) => {
                tracing::error!(error = %e, app_id = id, "cannot audit the kill; not killing");
                count("error");
                return outcome;
            }
        };
        let killed = rm.kill(id).await;
        let after = rm.app(id).await;
        let final_now = after.app.phase() == AppPhase::Final;
        r.ts = self.now();
        match (&killed, final_now) {
            (_, true) => {
                r.event = AuditEvent::Done;
                r.detail = after.app.state.clone().map(|s| format!("now {s}"));
                tracing::warn!(task_id, app_id = id, "remote application killed");
            }
            (Ok(()), false) => {
                r.event = AuditEvent::Error;
                r.detail = Some(format!(
                    "the RM accepted the kill but the application reads {}",
                    after.app.state.as_deref().unwrap_or("unknown")
                ));
            }
            (Err(e), false) => {
                r.event = AuditEvent::Error;
                r.detail = Some(e.to_string());
                tracing::error!(task_id, app_id = id, error = %e, "remote application kill failed");
            }
        }
        count(if final_now { "killed" } else { "error" });
        if let Err(e) = self.audit.append_blocking(vec![r]).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
        if let Outcome::RemoteApp { final_now: f, .. } = &mut outcome {
            *f = final_now;
        }
        outcome
    }

    /// The audit record a kill starts from: its zombie's or its ghost's.
    fn remote_record(&self, target: RemoteTarget<'_>, cx: &Context<'_>) -> Record {
        let now = self.now();
        match target {
            RemoteTarget::Zombie(z) => {
                self.base_record(AuditEvent::Detected, cx.actor, z, cx.line, now)
            }
            RemoteTarget::Ghost(g) => self.ghost_record(AuditEvent::Detected, g, cx.line, now),
        }
    }
}
