//! Remote YARN applications before any action on a task (SPEC §17): learn
//! the ids the agents report (kept on disk), ask the RM about each of a
//! zombie's applications, kill live ones first when the policy says so, and
//! hold the task while any may run. The decision itself is the pure
//! `reaper_core::remote::decide`.

use super::{Engine, Gate};
use crate::audit::{AuditEvent, RecordKind};
use crate::yarn::{KnownApps, Learned};
use reaper_core::ghost::Ghost;
use reaper_core::remote::{apply, decide, is_app_id, AppPhase, RemoteApp, RemoteDecision};
use reaper_core::{Disposition, DsLine, RegistryView, Zombie};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

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

/// The RM's answers of one sweep, by application id: a task that is both a
/// zombie and a ghost is asked about once, and the gauge counts each
/// application once.
#[derive(Default)]
pub(super) struct Answers {
    apps: BTreeMap<String, RemoteApp>,
    /// Requests made (at most [`MAX_ASKED`]).
    asked: usize,
}

/// The ids the agents report now, by task (every report the view keeps, as
/// the zombies' judgement reads them).
fn reported_ids(view: &RegistryView) -> BTreeMap<i64, BTreeSet<String>> {
    let mut reported: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for seen in view.agents.values() {
        let Some(r) = &seen.report else { continue };
        for t in &r.tasks {
            for id in t.app_ids.iter().filter(|id| is_app_id(id)) {
                reported.entry(t.task_id).or_default().insert(id.clone());
            }
        }
    }
    reported
}

impl Engine {
    /// Learns the agents' ids, then judges every zombie with known ids:
    /// its applications go into its evidence, and one about to be acted on
    /// is held (or its live applications killed first) per SPEC §17.
    /// Returns the RM's answers, for the ghosts of the same sweep.
    pub(super) async fn judge_remote_apps(
        &self,
        zombies: &mut [Zombie],
        view: &RegistryView,
        line: DsLine,
        gate: Gate,
    ) -> Answers {
        let mut answers = Answers::default();
        let (Some(rm), Some(known)) = (&self.rm, &self.known_apps) else {
            return answers;
        };
        self.learn_app_ids(known, view).await;
        let mut reported = reported_ids(view);

        let kill_policy = self.settings.policy.kill_remote_apps;
        for z in zombies.iter_mut() {
            let mut ids = known.ids(z.task.id);
            ids.extend(reported.remove(&z.task.id).unwrap_or_default());
            if ids.is_empty() {
                continue;
            }
            let mut apps = ask(rm, z.task.id, ids, &mut answers).await;
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
                            answers.apps.insert(a.id.clone(), a.clone());
                        }
                        decision = decide(&apps, false);
                    }
                    Err(why) => {
                        tracing::warn!(task_id = z.task.id, %why, "remote applications not killed")
                    }
                }
            }
            if decision != RemoteDecision::Act && z.disposition == Disposition::Act {
                tracing::info!(task_id = z.task.id, apps = ?apps, ?decision, "held: a remote application may still run");
            }
            apply(z, apps, &decision);
        }
        answers
    }

    /// Keeps every application id the agents report (SPEC §17: an id is
    /// remembered past its task's process, so a zombie's applications are
    /// known after its worker is gone).
    async fn learn_app_ids(&self, known: &Arc<KnownApps>, view: &RegistryView) {
        let now = self.now();
        let mut found = Vec::new();
        for (worker, seen) in &view.agents {
            let Some(r) = &seen.report else { continue };
            for t in &r.tasks {
                for id in t.app_ids.iter().filter(|id| is_app_id(id)) {
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
        if new.is_empty() {
            return;
        }
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

    /// Makes this engine (the daemon's) the one that compacts
    /// `remote-apps.jsonl`, and compacts it now.
    pub async fn own_remote_apps(&self) {
        let Some(known) = self.known_apps.clone() else {
            return;
        };
        let path = known.path().display().to_string();
        match tokio::task::spawn_blocking(move || known.own()).await {
            Ok(Ok(())) => tracing::debug!(%path, "remote applications file compacted"),
            // the file stays as it was: appends go on, nothing is lost
            Ok(Err(e)) => {
                tracing::warn!(%path, error = %e, "cannot compact the remote applications file")
            }
            Err(e) => tracing::warn!(error = %e, "compacting the remote applications file failed"),
        }
    }

    /// After a full scan: forgets the ids of tasks long over (see
    /// `KnownApps::forget_over`); `candidates` are the scan's live rows.
    pub(super) async fn forget_remote_apps(
        &self,
        candidates: &[reaper_core::Candidate],
        view: &RegistryView,
        now: reaper_core::Instant,
    ) {
        let Some(known) = self.known_apps.clone() else {
            return;
        };
        let mut live: BTreeSet<i64> = candidates.iter().map(|c| c.id).collect();
        live.extend(
            view.agents
                .values()
                .filter_map(|a| a.report.as_ref())
                .flat_map(|r| r.tasks.iter().map(|t| t.task_id)),
        );
        match tokio::task::spawn_blocking(move || known.forget_over(&live, now)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(
                forgotten = n,
                "remote application ids of tasks long over forgotten"
            ),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot compact the remote applications file"),
            Err(e) => tracing::warn!(error = %e, "compacting the remote applications file failed"),
        }
    }

    /// Shows each ghost's applications as the zombie view shows a zombie's
    /// (SPEC §17): the ids kept for its task and those the agents report
    /// now, with the RM's answers. A ghost's action is the agent's kill of
    /// local processes, so nothing here holds or kills it.
    pub(super) async fn ghost_remote_apps(
        &self,
        ghosts: &mut [Ghost],
        view: &RegistryView,
        answers: &mut Answers,
    ) {
        let (Some(rm), Some(known)) = (&self.rm, &self.known_apps) else {
            return;
        };
        let mut reported = reported_ids(view);
        for g in ghosts.iter_mut() {
            let mut ids = known.ids(g.task_id);
            ids.extend(reported.remove(&g.task_id).unwrap_or_default());
            if ids.is_empty() {
                continue;
            }
            g.remote_apps = ask(rm, g.task_id, ids, answers).await;
        }
    }

    /// `ds_reaper_remote_apps{state}` from one sweep's answers (zombies and
    /// ghosts); unchanged when `[yarn]` is off.
    pub(super) fn remote_gauge(&self, answers: &Answers) {
        if self.rm.is_none() {
            return;
        }
        let mut states: BTreeMap<&'static str, i64> =
            REMOTE_APP_STATES.iter().map(|s| (*s, 0)).collect();
        for a in answers.apps.values() {
            *states.entry(label(a)).or_default() += 1;
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

/// Each of `ids` as the RM answers, reusing this sweep's answers; past
/// [`MAX_ASKED`] requests an application counts as unknown.
async fn ask(
    rm: &crate::yarn::Rm,
    task_id: i64,
    ids: BTreeSet<String>,
    answers: &mut Answers,
) -> Vec<RemoteApp> {
    let mut apps = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(a) = answers.apps.get(&id) {
            apps.push(a.clone());
            continue;
        }
        let app = if answers.asked >= MAX_ASKED {
            RemoteApp {
                id,
                state: None,
                final_status: None,
            }
        } else {
            answers.asked += 1;
            let (app, why) = rm.app(&id).await;
            if let Some(why) = why {
                tracing::warn!(task_id, app_id = %app.id, %why, "remote application state unknown");
            }
            app
        };
        answers.apps.insert(app.id.clone(), app.clone());
        apps.push(app);
    }
    apps
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
