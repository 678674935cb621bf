//! Remote YARN applications before any action on a task (SPEC §17): learn
//! the ids the agents report (kept on disk), ask the RM about each of a
//! zombie's applications, kill live ones first when the policy says so, and
//! hold the task while any may run. The decision itself is the pure
//! `reaper_core::remote::decide`.

use super::{Engine, Gate};
use crate::audit::{AuditEvent, RecordKind};
use crate::yarn::Learned;
use reaper_core::remote::{apply, decide, is_app_id, AppPhase, RemoteApp, RemoteDecision};
use reaper_core::{Disposition, DsLine, RegistryView, Zombie};
use std::collections::{BTreeMap, BTreeSet};

/// The `state` labels of `ds_reaper_remote_apps`: the RM's states in lower
/// case, and `unknown` for an application the RM could not tell about.
pub const REMOTE_APP_STATES: [&str; 9] = [
    "new",
    "new_saving",
    "submitted",
    "accepted",
    "running",
    "finished",
    "failed",
    "killed",
    "unknown",
];

/// Applications asked about per sweep at most; the rest count as unknown
/// (their tasks hold) until a later sweep.
const MAX_ASKED: usize = 500;

impl Engine {
    /// Learns the agents' ids, then judges every zombie with known ids:
    /// its applications go into its evidence, and one about to be acted on
    /// is held (or its live applications killed first) per SPEC §17.
    pub(super) async fn judge_remote_apps(
        &self,
        zombies: &mut [Zombie],
        view: &RegistryView,
        line: DsLine,
        gate: Gate,
    ) {
        let (Some(rm), Some(known)) = (&self.rm, &self.known_apps) else {
            return;
        };
        let now = self.now();
        let mut reported: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
        let mut found = Vec::new();
        for (worker, seen) in &view.agents {
            let Some(r) = &seen.report else { continue };
            for t in &r.tasks {
                for id in t.app_ids.iter().filter(|id| is_app_id(id)) {
                    reported.entry(t.task_id).or_default().insert(id.clone());
                    found.push(Learned {
                        task_id: t.task_id,
                        app_id: id.clone(),
                        host: worker.clone(),
                        learned_at: now,
                    });
                }
            }
        }
        let new = known.unknown(found);
        if !new.is_empty() {
            let k = known.clone();
            let count = new.len();
            match tokio::task::spawn_blocking(move || k.learn(&new)).await {
                Ok(Ok(())) => tracing::info!(count, "remote application ids learned"),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, path = %known.path().display(), "cannot keep remote application ids")
                }
                Err(e) => tracing::error!(error = %e, "keeping remote application ids failed"),
            }
        }

        let kill_policy = self.settings.policy.kill_remote_apps;
        let mut asked = 0usize;
        let mut states: BTreeMap<&'static str, i64> =
            REMOTE_APP_STATES.iter().map(|s| (*s, 0)).collect();
        for z in zombies.iter_mut() {
            let mut ids = known.ids(z.task.id);
            ids.extend(reported.remove(&z.task.id).unwrap_or_default());
            if ids.is_empty() {
                continue;
            }
            let mut apps = Vec::with_capacity(ids.len());
            for id in ids {
                if asked >= MAX_ASKED {
                    apps.push(RemoteApp {
                        id,
                        state: None,
                        final_status: None,
                    });
                    continue;
                }
                asked += 1;
                let (app, why) = rm.app(&id).await;
                if let Some(why) = why {
                    tracing::warn!(task_id = z.task.id, app_id = %id, %why, "remote application state unknown");
                }
                apps.push(app);
            }
            let may_kill = kill_policy && z.disposition == Disposition::Act;
            let mut decision = decide(&apps, may_kill);
            if let RemoteDecision::Kill(live) = &decision {
                match self.gate_open(&gate) {
                    Ok(()) => {
                        for id in live {
                            self.kill_remote_app(z, id, &apps, line).await;
                        }
                        for a in apps.iter_mut().filter(|a| live.contains(&a.id)) {
                            *a = rm.app(&a.id).await.0;
                        }
                        decision = decide(&apps, false);
                    }
                    Err(why) => {
                        tracing::warn!(task_id = z.task.id, %why, "remote applications not killed")
                    }
                }
            }
            for a in &apps {
                *states.entry(label(a)).or_default() += 1;
            }
            if decision != RemoteDecision::Act && z.disposition == Disposition::Act {
                tracing::info!(task_id = z.task.id, apps = ?apps, ?decision, "held: a remote application may still run");
            }
            apply(z, apps, &decision);
        }
        for (s, n) in states {
            self.metrics.remote_apps.with_label_values(&[s]).set(n);
        }
    }

    /// Kills one application, audited as its own intent and outcome.
    async fn kill_remote_app(&self, z: &Zombie, id: &str, apps: &[RemoteApp], line: DsLine) {
        let rm = self.rm.as_ref().expect("checked by the caller");
        let mut r = self.base_record(AuditEvent::Intent, "daemon", z, line, self.now());
        r.kind = Some(RecordKind::RemoteApp);
        r.app_id = Some(id.to_string());
        r.action = Some("kill".into());
        r.from_state = apps
            .iter()
            .find(|a| a.id == id)
            .and_then(|a| a.state.clone());
        r.to_state = Some("KILLED".into());
        let intent = r.clone();
        if let Err(e) = self.audit.append_blocking(vec![intent]).await {
            tracing::error!(error = %e, app_id = id, "cannot audit the kill; not killing");
            self.metrics
                .remote_app_kills_total
                .with_label_values(&["error"])
                .inc();
            return;
        }
        let result = rm.kill(id).await;
        r.ts = self.now();
        match &result {
            Ok(()) => {
                r.event = AuditEvent::Done;
                tracing::warn!(
                    task_id = z.task.id,
                    app_id = id,
                    "remote application killed"
                );
            }
            Err(e) => {
                r.event = AuditEvent::Error;
                r.detail = Some(e.clone());
                tracing::error!(task_id = z.task.id, app_id = id, error = %e, "remote application kill failed");
            }
        }
        self.metrics
            .remote_app_kills_total
            .with_label_values(&[if result.is_ok() { "killed" } else { "error" }])
            .inc();
        if let Err(e) = self.audit.append_blocking(vec![r]).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }
}

fn label(a: &RemoteApp) -> &'static str {
    if a.phase() == AppPhase::Unknown {
        return "unknown";
    }
    let s = a.state.as_deref().unwrap_or_default().to_ascii_lowercase();
    REMOTE_APP_STATES
        .iter()
        .find(|l| **l == s)
        .copied()
        .unwrap_or("unknown")
}
