//! Remote YARN applications (SPEC §17), the read side: the ids the agents
//! report are learned (kept on disk), and — before the sweep plans — the
//! ResourceManager is asked about every application of the candidates and
//! the listed tasks with known ids, concurrently and within one deadline per
//! sweep. An id not answered in time is unknown: its task is held. The
//! planner then uses the answers as evidence (`RemoteEvidence`); the kills
//! are effects (`effects::remote`).

use super::Engine;
use crate::yarn::{KnownApps, Learned};
use futures::StreamExt;
use reaper_core::ghost::Ghost;
use reaper_core::ports::ResourceManager;
use reaper_core::remote::{
    is_app_id, is_foreign, is_yarn_task, AppPhase, RemoteApp, RemoteEvidence,
};
use reaper_core::{Candidate, RegistryView};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::REMOTE_APP_STATES;

mod tenants;

/// Applications asked about per sweep at most; the rest count as unknown
/// (their tasks hold) until a later sweep.
const MAX_ASKED: usize = 500;

/// Final application ids remembered at most (then forgotten at once: they
/// are asked about again, once each).
const FINAL_KEPT: usize = 100_000;

/// Requests to the RMs in flight at once.
const CONCURRENCY: usize = 16;

/// The RM's answers of one sweep: by task, the ids it knows; by id, the
/// answer (each application asked once, whether a zombie's or a ghost's).
#[derive(Debug, Default)]
pub(super) struct Answers {
    pub by_task: BTreeMap<i64, BTreeSet<String>>,
    pub apps: BTreeMap<String, RemoteApp>,
    /// Each live row's `start_time`: whether an application is its own.
    starts: BTreeMap<i64, Option<reaper_core::Instant>>,
    /// Each such row's workflow instance, and the tenants read for them.
    workflows: BTreeMap<i64, i64>,
    tenants: BTreeMap<i64, String>,
    /// YARN tasks whose host's agent reads no application-id source.
    ids_unknown: BTreeSet<i64>,
    skew: Duration,
    /// Rows read over of tasks no agent lists whose applications may still
    /// run (SPEC §17, ghost applications), with the host that reported them.
    pub over: Vec<(reaper_core::ghost::GhostRow, String)>,
    /// Whether those rows were read this sweep (full scans only): when not,
    /// the last full scan's ghost applications stand.
    pub over_read: bool,
    /// What the planners judge by, made once when the answers are in.
    pub evidence: RemoteEvidence,
}

impl Answers {
    /// A task's applications with their answers.
    pub fn of(&self, task_id: i64) -> Vec<RemoteApp> {
        self.by_task
            .get(&task_id)
            .into_iter()
            .flatten()
            .map(|id| {
                self.apps
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| RemoteApp::unknown(id.clone()))
            })
            .collect()
    }

    /// The evidence the task planner holds tasks by: each task's own
    /// applications (SPEC §17), the others as foreign ids.
    fn build_evidence(&self, kill: bool) -> RemoteEvidence {
        let mut owners: BTreeMap<&str, usize> = BTreeMap::new();
        for id in self.by_task.values().flatten() {
            *owners.entry(id.as_str()).or_default() += 1;
        }
        let mut ev = RemoteEvidence {
            kill,
            ids_unknown: self.ids_unknown.clone(),
            ..RemoteEvidence::default()
        };
        for task in self.by_task.keys() {
            let start = self.starts.get(task).copied().flatten();
            let tenant = self.tenant(*task);
            let (own, foreign): (Vec<RemoteApp>, Vec<RemoteApp>) =
                self.of(*task).into_iter().partition(|a| {
                    let shared = owners.get(a.id.as_str()).is_some_and(|n| *n > 1);
                    !is_foreign(a, start, tenant, self.skew, shared)
                });
            if !foreign.is_empty() {
                ev.foreign
                    .insert(*task, foreign.into_iter().map(|a| a.id).collect());
            }
            if !own.is_empty() {
                ev.apps.insert(*task, own);
            }
        }
        ev
    }

    /// Shows each ghost's own applications as the zombie view shows a
    /// zombie's (`evidence`: this sweep's split into own and foreign).
    pub fn on_ghosts(&self, ghosts: &mut [Ghost], evidence: &RemoteEvidence) {
        for g in ghosts {
            if let Some(apps) = evidence.apps.get(&g.task_id) {
                g.remote_apps = apps.clone();
            }
        }
    }

    /// The ghost applications' inputs: each over row with its own apps.
    pub fn over_tasks<'a>(
        &'a self,
        evidence: &RemoteEvidence,
    ) -> Vec<reaper_core::ghost::OverTask<'a>> {
        self.over
            .iter()
            .filter_map(|(row, worker)| {
                Some(reaper_core::ghost::OverTask {
                    row,
                    worker: worker.as_str(),
                    apps: evidence.apps.get(&row.task.id)?.clone(),
                })
            })
            .collect()
    }
}

/// Every id once, those of tasks whose host is not a live worker first: the
/// likely zombies are asked about before the cap of [`MAX_ASKED`] is reached.
fn asking_order(
    by_task: &BTreeMap<i64, BTreeSet<String>>,
    candidates: &[Candidate],
    view: &RegistryView,
) -> Vec<String> {
    let lost: BTreeSet<i64> = candidates
        .iter()
        .filter(|c| {
            c.host
                .as_deref()
                .is_none_or(|h| view.live(reaper_core::NodeKind::Worker, h).is_none())
        })
        .map(|c| c.id)
        .collect();
    let mut seen = BTreeSet::new();
    let (first, rest): (Vec<_>, Vec<_>) = by_task.iter().partition(|(t, _)| lost.contains(t));
    first
        .into_iter()
        .chain(rest)
        .flat_map(|(_, ids)| ids.iter())
        .filter(|id| seen.insert(*id))
        .cloned()
        .collect()
}

/// SPEC §17: the YARN tasks with no known id whose host's agent says it can
/// read no application-id source — their application may run unseen.
fn ids_unknown(
    candidates: &[Candidate],
    by_task: &BTreeMap<i64, BTreeSet<String>>,
    view: &RegistryView,
) -> BTreeSet<i64> {
    candidates
        .iter()
        .filter(|c| is_yarn_task(&c.task_type) && !by_task.contains_key(&c.id))
        .filter(|c| {
            let Some(h) = c.host.as_deref() else {
                return false;
            };
            let host = view.resolve(reaper_core::NodeKind::Worker, h);
            view.agents
                .get(host.as_ref())
                .and_then(|a| a.report.as_ref())
                .and_then(|r| r.app_id_sources.as_ref())
                .is_some_and(|s| s.is_empty())
        })
        .map(|c| c.id)
        .collect()
}

/// The ids the agents report now, by task.
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
    /// The read step's remote part: learns the agents' ids, then asks the
    /// RM about every known application of `candidates` and of the tasks the
    /// agents list, within the sweep's RM budget. Empty with `[yarn]` off.
    pub(super) async fn read_remote_apps(
        &self,
        candidates: &[Candidate],
        view: &RegistryView,
        with_listed: bool,
        line: reaper_core::DsLine,
        read_over: bool,
    ) -> Answers {
        let mut answers = Answers::default();
        let (Some(rm), Some(known)) = (&self.rm, &self.known_apps) else {
            return answers;
        };
        self.learn_app_ids(known, view).await;
        let reported = reported_ids(view);
        let kept = known.all();
        let live: BTreeSet<i64> = candidates.iter().map(|c| c.id).collect();
        let listed: BTreeSet<i64> = view
            .agents
            .values()
            .filter(|_| with_listed)
            .filter_map(|a| a.report.as_ref())
            .flat_map(|r| r.tasks.iter().map(|t| t.task_id))
            .collect();
        let mut unlisted = BTreeMap::new();
        for (task, ids) in kept.into_iter().chain(reported) {
            // a kept id matters for a live row or a listed task (a ghost)
            if live.contains(&task) || listed.contains(&task) {
                answers.by_task.entry(task).or_default().extend(ids);
            } else {
                unlisted.insert(task, ids);
            }
        }
        if read_over {
            answers.over_read = true;
            self.read_over(line, unlisted, &mut answers).await;
        }
        answers.apps = self
            .ask(rm.clone(), asking_order(&answers.by_task, candidates, view))
            .await;
        answers.skew = self.settings.reconcile.clock_skew_tolerance;
        self.remember_final(&answers);
        for c in candidates
            .iter()
            .filter(|c| answers.by_task.contains_key(&c.id))
        {
            answers.starts.insert(c.id, c.start_time);
            if let Some(wf) = c.workflow_instance_id {
                answers.workflows.insert(c.id, wf);
            }
        }
        answers.tenants = self.read_tenants(line, &answers.workflows).await;
        if self.settings.yarn.require_ids {
            answers.ids_unknown = ids_unknown(candidates, &answers.by_task, view);
        }
        answers.evidence = answers.build_evidence(self.settings.policy.kill_remote_apps);
        answers
    }

    /// The rows of tasks with kept ids that no agent lists and that are not
    /// live, where one of their applications is not yet known final: those
    /// read over are the ghost applications' candidates. Read on full scans
    /// only (their rows are read by id, and an application that outlives its
    /// task outlives `full_scan_interval` too).
    async fn read_over(
        &self,
        line: reaper_core::DsLine,
        unlisted: BTreeMap<i64, BTreeSet<String>>,
        answers: &mut Answers,
    ) {
        let known_final = crate::engine::lock(&self.final_apps).clone();
        let ids: Vec<i64> = unlisted
            .iter()
            .filter(|(_, apps)| apps.iter().any(|a| !known_final.contains(a)))
            .map(|(t, _)| *t)
            .take(MAX_ASKED)
            .collect();
        if ids.is_empty() {
            return;
        }
        let rows = match self.store.ghost_rows(line, &ids).await {
            Ok(r) => r.rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the rows of tasks with kept application ids; no ghost application judged");
                return;
            }
        };
        for row in rows {
            let host = row.task.host.as_deref().unwrap_or_default().to_string();
            if let Some(apps) = unlisted.get(&row.task.id) {
                answers.by_task.insert(row.task.id, apps.clone());
                answers.starts.insert(row.task.id, row.task.start_time);
                if let Some(wf) = row.task.workflow_instance_id {
                    answers.workflows.insert(row.task.id, wf);
                }
                answers.over.push((row, host));
            }
        }
    }

    /// Applications the RM said are final are never asked about again as
    /// ghost applications: a final application stays final.
    fn remember_final(&self, answers: &Answers) {
        let mut f = crate::engine::lock(&self.final_apps);
        for a in answers
            .apps
            .values()
            .filter(|a| a.phase() == AppPhase::Final)
        {
            f.insert(a.id.clone());
        }
        if f.len() > FINAL_KEPT {
            f.clear();
        }
    }

    /// Each id as the RM answers within the sweep's budget; past
    /// [`MAX_ASKED`], or not answered in time, an application is unknown.
    async fn ask(
        &self,
        rm: Arc<dyn ResourceManager>,
        ids: Vec<String>,
    ) -> BTreeMap<String, RemoteApp> {
        let mut apps: BTreeMap<String, RemoteApp> = ids
            .iter()
            .map(|id| (id.clone(), RemoteApp::unknown(id.clone())))
            .collect();
        let budget = self.rm_budget();
        let deadline = tokio::time::Instant::now() + budget;
        let asked: Vec<String> = ids.into_iter().take(MAX_ASKED).collect();
        let mut answers = futures::stream::iter(asked)
            .map(|id| {
                let rm = rm.clone();
                async move { rm.app(&id).await }
            })
            .buffer_unordered(CONCURRENCY);
        loop {
            match tokio::time::timeout_at(deadline, answers.next()).await {
                Ok(Some(a)) => {
                    if let Some(why) = &a.unknown_why {
                        tracing::warn!(app_id = %a.app.id, %why, "remote application state unknown");
                    }
                    apps.insert(a.app.id.clone(), a.app);
                }
                Ok(None) => break,
                Err(_) => {
                    let waiting = apps.values().filter(|a| a.state.is_none()).count();
                    tracing::warn!(budget = ?budget, waiting,
                        "the ResourceManagers did not answer within the sweep's budget; those applications are unknown");
                    break;
                }
            }
        }
        apps
    }

    /// `[yarn] sweep_budget`, else a third of the sweep interval.
    fn rm_budget(&self) -> Duration {
        self.settings
            .yarn
            .sweep_budget
            .unwrap_or(self.settings.reconcile.sweep_interval / 3)
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
        let now = self.now();
        match tokio::task::spawn_blocking(move || known.own(now)).await {
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
        live: BTreeSet<i64>,
        view: &RegistryView,
        now: reaper_core::Instant,
    ) {
        let Some(known) = self.known_apps.clone() else {
            return;
        };
        let mut live = live;
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
