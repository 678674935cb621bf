//! One sweep, and one reap: reading candidates, planning, writing, auditing.
//! Shared by the daemon (`run`), `check`, `reap` and the HTTP API, so that they
//! all judge zombies the same way.

use crate::audit::{Audit, Record};
use crate::config::{Settings, VersionSetting};
use crate::metrics::Metrics;
use chrono::Utc;
use reaper_core::{
    plan, Action, Blocked, Candidate, Disposition, DsLine, FollowUp, Instant, NodeKind, Plan,
    Reason, RegistryView, SafetyState, UnseenAbsence, Zombie,
};
use reaper_sql::{
    Db, FollowUpOutcome, FollowUpRequest, SchemaInfo, SweepCursor, TaskWrite, WriteOutcome,
};
use reaper_zk::{Detected, LeaderElection, Registry};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Tick,
    Event,
    Requested,
}

/// The outcome of the latest sweep, for `/api/v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct SweepSummary {
    pub at: Instant,
    /// ok | error | skipped
    pub result: String,
    pub detail: Option<String>,
    pub kind: &'static str,
    pub candidates: usize,
    pub zombies: usize,
    pub actions: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Status {
    pub line: Option<DsLine>,
    /// Why the daemon holds (line disagreement, ...), if it does.
    pub line_hold: Option<String>,
    pub last_sweep: Option<SweepSummary>,
    /// The zombies of the last completed sweep, before its actions, and when
    /// it judged them. Kept typed and shared: JSON is built per request, so a
    /// huge zombie count does not cost its JSON size in resident memory.
    pub zombies: Arc<Vec<Zombie>>,
    pub zombies_at: Option<Instant>,
    pub brake: reaper_core::BrakeState,
    pub db_error: Option<String>,
}

struct SweepState {
    cursor: SweepCursor,
    safety: SafetyState,
    /// Zombies already reported as `detected`, by task id.
    seen: HashMap<i64, Reason>,
    last_full: Option<std::time::Instant>,
    schema: Option<SchemaInfo>,
    warned_states: Option<DsLine>,
    warned_line: Option<String>,
}

/// Why a reap was not done.
#[derive(Debug, thiserror::Error)]
pub enum ReapError {
    #[error("task {0} not found")]
    NotFound(i64),
    #[error("refused: {0}")]
    Refused(String),
    #[error("lost race: {0}")]
    LostRace(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A standby replica never writes; the leader's id when known.
    #[error("not the leader")]
    NotLeader(Option<String>),
}

#[derive(Debug, Clone, Default)]
pub struct ReapRequest {
    pub task_id: i64,
    pub action: Option<Action>,
    pub workflow: Option<FollowUp>,
    pub force: bool,
    pub actor: String,
}

pub struct Engine {
    pub settings: Settings,
    pub db: Db,
    pub registry: Registry,
    pub leader: Option<LeaderElection>,
    pub metrics: Metrics,
    pub audit: Audit,
    pub status: RwLock<Status>,
    state: tokio::sync::Mutex<SweepState>,
    started: Instant,
}

fn secs(t: chrono::TimeDelta) -> i64 {
    t.num_seconds()
}

/// The JSON shape of a zombie (SPEC §8), shared by the API and `check`.
pub fn zombie_json(z: &Zombie, now: Instant) -> Value {
    let note = z.note.clone().or_else(|| match &z.disposition {
        Disposition::Blocked(b) if !matches!(b, Blocked::Hold(_)) => Some(b.describe()),
        _ => None,
    });
    let t = &z.task;
    json!({
        "task_id": t.id,
        "task_name": t.name,
        "task_type": t.task_type,
        "workflow_instance_id": t.workflow_instance_id,
        "state": z.state_name,
        "host": t.host,
        "worker_group": t.worker_group,
        "submit_time": t.submit_time,
        "age_seconds": t.submit_time.or(t.start_time).map(|s| secs(now - s)),
        "reason": z.reason.as_str(),
        "evidence": z.evidence,
        "owner_master": z.owner_master,
        "owner_master_alive": z.owner_master_alive,
        "action": z.action.as_str(),
        "workflow": z.workflow.as_str(),
        "note": note,
        "disposition": match &z.disposition {
            Disposition::Act => "act".to_string(),
            Disposition::Report => "report".to_string(),
            Disposition::Blocked(b) => match b {
                Blocked::Settling => "blocked:settling".into(),
                Blocked::Hold(_) => "blocked:hold".into(),
                Blocked::Brake(_) => "blocked:brake".into(),
                Blocked::SweepCap => "blocked:sweep_cap".into(),
                Blocked::RateLimit => "blocked:rate_limit".into(),
                Blocked::Unwritable => "blocked:unwritable".into(),
            },
        },
    })
}

/// Chooses the line to work with, and a hold when the sources disagree.
pub fn resolve_line(
    setting: VersionSetting,
    schema: Option<&SchemaInfo>,
    detected: &Detected,
) -> (Option<DsLine>, Option<String>) {
    let names = |v: &[DsLine]| v.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(", ");
    match setting {
        VersionSetting::Line(l) => (Some(l), None),
        VersionSetting::Auto => {
            let Some(schema) = schema else {
                return (
                    None,
                    Some("the database schema has not been read yet".into()),
                );
            };
            let both: Vec<DsLine> = schema
                .lines
                .iter()
                .copied()
                .filter(|l| detected.lines.contains(l))
                .collect();
            // Lines left after intersecting differ only in ways that do not
            // change what we read or write (e.g. 2.0 vs 3.0): take the newest.
            match both.iter().max() {
                Some(l) => (Some(*l), None),
                None => (
                    schema.lines.iter().max().copied(),
                    Some(format!(
                        "DS line disagreement: the schema fits [{}] but the registry fits [{}]; \
                         acting is held until dolphinscheduler.version is set",
                        names(&schema.lines),
                        names(&detected.lines)
                    )),
                ),
            }
        }
    }
}

impl Engine {
    pub fn new(
        settings: Settings,
        db: Db,
        registry: Registry,
        leader: Option<LeaderElection>,
        metrics: Metrics,
    ) -> Engine {
        let audit = Audit::new(settings.audit_path.clone());
        Engine {
            settings,
            db,
            registry,
            leader,
            metrics,
            audit,
            status: RwLock::new(Status::default()),
            state: tokio::sync::Mutex::new(SweepState {
                cursor: SweepCursor::new(),
                safety: SafetyState::default(),
                seen: HashMap::new(),
                last_full: None,
                schema: None,
                warned_states: None,
                warned_line: None,
            }),
            started: Utc::now(),
        }
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn is_leader(&self) -> bool {
        self.leader.as_ref().is_none_or(|l| l.is_leader())
    }

    /// The current leader's id, when election is on and it is known.
    pub fn leader_id(&self) -> Option<String> {
        self.leader.as_ref().and_then(|l| l.leader_id())
    }

    fn ensure_leader(&self) -> Result<(), ReapError> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(ReapError::NotLeader(self.leader_id()))
        }
    }

    /// Whether a write decided on `gate` may still go ahead, or why not.
    fn gate_open(&self, gate: &Gate) -> Result<(), String> {
        match self.registry.view().valid_since() {
            Some(since) if since == gate.valid_since => {}
            Some(_) => return Err("the registry view was rebuilt since the judgement".into()),
            None => return Err("the registry view is no longer valid".into()),
        }
        if gate.leader_only && !self.is_leader() {
            return Err("no longer the leader".into());
        }
        Ok(())
    }

    fn status_write(&self) -> std::sync::RwLockWriteGuard<'_, Status> {
        self.status.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn status_read(&self) -> std::sync::RwLockReadGuard<'_, Status> {
        self.status.read().unwrap_or_else(|p| p.into_inner())
    }

    /// After a crash mid-write, intents may have no outcome. Records one for
    /// each ("error", interrupted) so the trail stays consistent; the rows
    /// themselves are judged afresh by the next sweep (a written row is no
    /// longer live, an unwritten one is still a zombie).
    pub fn close_dangling_intents(&self) -> usize {
        let records = match self.audit.tail(usize::MAX) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the audit trail");
                return 0;
            }
        };
        let mut open: BTreeMap<(i64, String), Record> = BTreeMap::new();
        for r in records {
            let Some(id) = r.task_id else { continue };
            let key = (id, r.actor.clone());
            match r.event.as_str() {
                "intent" => {
                    open.insert(key, r);
                }
                "done" | "lost_race" | "error" => {
                    open.remove(&key);
                }
                _ => {}
            }
        }
        let now = Utc::now();
        let closing: Vec<Record> = open
            .into_values()
            .map(|mut r| {
                r.event = "error".into();
                r.ts = now;
                r.detail = Some(
                    "interrupted: stopped before the outcome was recorded; the row is judged again by the next sweep"
                        .into(),
                );
                r
            })
            .collect();
        if !closing.is_empty() {
            tracing::warn!(
                count = closing.len(),
                "audit intents without outcome from a previous run closed as interrupted"
            );
            if let Err(e) = self.audit.append(&closing) {
                tracing::error!(error = %e, "cannot write the audit trail");
            }
        }
        closing.len()
    }

    /// Refreshes the gauges that mirror live state (called per sweep and per scrape).
    pub fn refresh_gauges(&self, view: &RegistryView) {
        let m = &self.metrics;
        m.live_workers.set(view.workers.len() as i64);
        m.live_masters.set(view.masters.len() as i64);
        m.registry_view_valid.set(view.is_valid() as i64);
        m.leader.set(self.is_leader() as i64);
        let st = self.registry.stats();
        Metrics::sync_counter(&m.zk_session_expirations_total, st.session_expirations);
        Metrics::sync_counter(&m.zk_errors_total, st.errors);
        m.brake_engaged
            .set(self.status_read().brake.engaged() as i64);
        for (table, n) in self.db.rows_skipped() {
            Metrics::sync_counter(&m.rows_skipped_total.with_label_values(&[&table]), n);
        }
    }

    fn db_failed(&self, e: &reaper_sql::SqlError) {
        self.metrics.db_errors_total.inc();
        self.status_write().db_error = Some(e.to_string());
    }

    /// Reads the schema once (again after a failure) and resolves the line.
    async fn line(&self, st: &mut SweepState) -> Result<(DsLine, Option<String>), String> {
        if st.schema.is_none() && self.settings.version == VersionSetting::Auto {
            match self.db.detect().await {
                Ok(info) => {
                    tracing::info!(lines = ?info.lines, version_row = ?info.version_row,
                        "database schema read (t_ds_version is logged, not trusted)");
                    st.schema = Some(info);
                }
                Err(e) => {
                    self.db_failed(&e);
                    return Err(format!("reading the schema: {e}"));
                }
            }
        }
        let detected = self.registry.detected();
        let (line, hold) = resolve_line(self.settings.version, st.schema.as_ref(), &detected);
        let line = line.ok_or_else(|| "the DS line is not known yet".to_string())?;
        if hold != st.warned_line {
            match &hold {
                Some(h) => tracing::warn!("{h}"),
                None => tracing::info!(line = %line, "DolphinScheduler line"),
            }
            st.warned_line = hold.clone();
        }
        if st.warned_states != Some(line) {
            let (_, unknown) = self.settings.live_states(line);
            if !unknown.is_empty() {
                tracing::warn!(line = %line, states = ?unknown, "reconcile.states names states this DS line does not have; ignored");
            }
            st.warned_states = Some(line);
            self.metrics.set_build_info(line.as_str());
        }
        let mut s = self.status_write();
        s.line = Some(line);
        s.line_hold = hold.clone();
        Ok((line, hold))
    }

    fn finish(&self, summary: SweepSummary, started: std::time::Instant) {
        let m = &self.metrics;
        m.sweeps_total
            .with_label_values(&[summary.result.as_str()])
            .inc();
        if summary.result != "skipped" {
            m.sweep_duration_seconds
                .observe(started.elapsed().as_secs_f64());
            m.last_sweep_timestamp_seconds
                .set(summary.at.timestamp_millis() as f64 / 1000.0);
        }
        self.status_write().last_sweep = Some(summary);
    }

    /// One pass: read, plan, and (as leader, unbraked) act.
    pub async fn sweep(&self, trigger: Trigger) -> SweepSummary {
        let mut st = self.state.lock().await;
        tracing::debug!(?trigger, "sweep starts");
        let started = std::time::Instant::now();
        let before = self.registry.view();
        self.refresh_gauges(&before);
        let mut summary = SweepSummary {
            at: Utc::now(),
            result: "skipped".into(),
            detail: None,
            kind: "incremental",
            candidates: 0,
            zombies: 0,
            actions: 0,
        };
        if let reaper_core::ViewState::Invalid { reason, .. } = &before.state {
            summary.detail = Some(format!("registry view invalid: {reason}"));
            self.finish(summary.clone(), started);
            return summary;
        }
        drop(before);
        let (line, line_hold) = match self.line(&mut st).await {
            Ok(x) => x,
            Err(e) => {
                summary.result = "error".into();
                summary.detail = Some(e);
                self.finish(summary.clone(), started);
                return summary;
            }
        };
        let (states, _) = self.settings.live_states(line);
        let full = st
            .last_full
            .is_none_or(|t| t.elapsed() >= self.settings.full_scan_interval);
        summary.kind = if full { "full" } else { "incremental" };
        let read = if full {
            self.db.full_scan(line, &states, &mut st.cursor).await
        } else {
            self.db.incremental(line, &states, &mut st.cursor).await
        };
        let candidates = match read {
            Ok(c) => {
                if full {
                    st.last_full = Some(std::time::Instant::now());
                }
                self.status_write().db_error = None;
                c
            }
            Err(e) => {
                self.db_failed(&e);
                tracing::warn!(error = %e, "sweep failed reading candidates");
                summary.result = "error".into();
                summary.detail = Some(e.to_string());
                self.finish(summary.clone(), started);
                return summary;
            }
        };

        // SPEC §4.1: judge against a view taken after the read. A worker that
        // registered during a long scan and got a task is then known, and a
        // host the view never saw counts from the task's own time anyway.
        let view = self.registry.view();
        self.refresh_gauges(&view);
        let now = Utc::now();
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

        self.record_detection(&mut st, &plan, &candidates, line, now);
        self.record_brake(was_engaged, &plan, line, now);

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

        let actions: Vec<&Zombie> = zombies
            .iter()
            .filter(|z| z.disposition == Disposition::Act)
            .collect();
        let gate = Gate {
            valid_since,
            leader_only: true,
        };
        let applied = self.execute(&actions, line, "daemon", gate).await;

        summary.result = "ok".into();
        summary.candidates = candidates.len();
        summary.zombies = zombies.len();
        summary.actions = applied;
        if let Some(b) = &plan.next.brake.why {
            if plan.next.brake.engaged() {
                summary.detail = Some(format!("brake engaged: {b}"));
            }
        }
        self.finish(summary.clone(), started);
        summary
    }

    fn base_record(
        &self,
        event: &str,
        actor: &str,
        z: &Zombie,
        line: DsLine,
        now: Instant,
    ) -> Record {
        let mut r = Record::event(event, actor, now);
        r.task_id = Some(z.task.id);
        r.workflow_instance_id = z.task.workflow_instance_id;
        r.task_name = Some(z.task.name.clone());
        r.host = z.task.host.clone();
        r.worker_group = z.task.worker_group.clone();
        r.reason = Some(z.reason.as_str().to_string());
        r.evidence = Some(z.evidence.clone());
        r.from_state = Some(z.state_name.clone());
        r.action = Some(z.action.as_str().to_string());
        r.workflow = Some(z.workflow.as_str().to_string());
        r.ds_line = Some(line.as_str().to_string());
        r
    }

    fn record_detection(
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
                records.push(self.base_record("detected", "daemon", z, line, now));
                // Bounded batches: a mass event must not build one huge buffer.
                if records.len() >= 1000 {
                    if let Err(e) = self.audit.append(&records) {
                        tracing::error!(error = %e, "cannot write the audit trail");
                    }
                    records.clear();
                }
            }
        }
        // Forget tasks that are no longer live rows, so the map stays bounded.
        if st.seen.len() > plan.zombies.len() {
            let live: std::collections::HashSet<i64> = candidates.iter().map(|c| c.id).collect();
            st.seen.retain(|id, _| live.contains(id));
        }
        if let Err(e) = self.audit.append(&records) {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }

    fn record_brake(&self, was_engaged: bool, plan: &Plan, line: DsLine, now: Instant) {
        let engaged = plan.next.brake.engaged();
        if engaged == was_engaged {
            return;
        }
        let mut r = Record::event("brake", "daemon", now);
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
        if let Err(e) = self.audit.append(&[r]) {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }

    /// Writes the given zombies (intent → write → outcome), then their follow-ups.
    /// Returns how many task writes were applied.
    async fn execute(&self, zombies: &[&Zombie], line: DsLine, actor: &str, gate: Gate) -> usize {
        if zombies.is_empty() {
            return 0;
        }
        if let Err(why) = self.gate_open(&gate) {
            tracing::warn!(%why, planned = zombies.len(), "nothing written in this sweep");
            return 0;
        }
        let now = Utc::now();
        let intents: Vec<Record> = zombies
            .iter()
            .map(|z| {
                let mut r = self.base_record("intent", actor, z, line, now);
                r.to_state = z
                    .action
                    .target_state()
                    .and_then(|c| line.state_name(c))
                    .map(str::to_string);
                r
            })
            .collect();
        // Safety rule 7: no audit, no write.
        if let Err(e) = self.audit.append(&intents) {
            tracing::error!(error = %e, "cannot write audit intents; not writing");
            for z in zombies {
                self.metrics
                    .actions_total
                    .with_label_values(&[z.action.as_str(), "error"])
                    .inc();
            }
            return 0;
        }
        let writes: Vec<TaskWrite> = zombies
            .iter()
            .map(|z| TaskWrite {
                seen: z.task.clone(),
                action: z.action,
                now,
            })
            .collect();
        let outcomes = self.db.write_tasks(line, &writes).await;
        let mut applied = 0;
        let mut records = Vec::new();
        match outcomes {
            Err(e) => {
                self.db_failed(&e);
                tracing::error!(error = %e, "task writes failed");
                for (z, intent) in zombies.iter().zip(intents) {
                    self.metrics
                        .actions_total
                        .with_label_values(&[z.action.as_str(), "error"])
                        .inc();
                    let mut r = intent;
                    r.event = "error".into();
                    r.ts = Utc::now();
                    r.detail = Some(e.to_string());
                    records.push(r);
                }
            }
            Ok(outcomes) => {
                for ((z, intent), outcome) in zombies.iter().zip(intents).zip(outcomes) {
                    let mut r = intent;
                    r.ts = Utc::now();
                    match outcome {
                        WriteOutcome::LostRace => {
                            self.metrics
                                .actions_total
                                .with_label_values(&[z.action.as_str(), "lost_race"])
                                .inc();
                            tracing::info!(
                                task_id = z.task.id,
                                "lost race: the row changed since it was read"
                            );
                            r.event = "lost_race".into();
                            r.detail =
                                Some("the row changed since it was read; not retried".into());
                        }
                        WriteOutcome::Applied => {
                            applied += 1;
                            self.metrics
                                .actions_total
                                .with_label_values(&[z.action.as_str(), "ok"])
                                .inc();
                            tracing::debug!(task_id = z.task.id, action = %z.action, reason = %z.reason, "zombie reaped");
                            r.event = "done".into();
                            r.detail = self.after_write(z, line, now, &gate).await;
                        }
                    }
                    records.push(r);
                }
            }
        }
        if let Err(e) = self.audit.append(&records) {
            tracing::error!(error = %e, "cannot write audit outcomes");
        }
        // One line per batch: the audit trail has every task.
        tracing::warn!(
            applied,
            attempted = zombies.len(),
            task_ids = ?zombies.iter().take(20).map(|z| z.task.id).collect::<Vec<_>>(),
            "zombies reaped"
        );
        applied
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
        let follows =
            (line == DsLine::V1_2 && z.action == Action::Fail) || z.workflow != FollowUp::None;
        if follows {
            // SPEC §4.1: checked again right before each follow-up.
            if let Err(why) = self.gate_open(gate) {
                notes.push(format!("follow-ups not done: {why}"));
                return Some(notes.join("; "));
            }
        }
        if line == DsLine::V1_2 && z.action == Action::Fail {
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
            let live_master = |h: &str| {
                let v = self.registry.view();
                !v.is_valid() || v.live(NodeKind::Master, h).is_some()
            };
            match self.db.follow_up(line, &req, &live_master).await {
                Ok(FollowUpOutcome::Done {
                    workflow_state,
                    command_type,
                    command_id,
                }) => notes.push(format!(
                    "workflow {}: state -> {}, command {} (id {})",
                    z.task.workflow_instance_id.unwrap_or_default(),
                    workflow_state
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "unchanged".into()),
                    command_type
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "none".into()),
                    command_id
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "-".into()),
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

    /// Judges candidates as `check` does: nothing is written, and a host whose
    /// loss was not seen counts as lost for an unknown time.
    pub async fn check(&self) -> Result<(DsLine, Plan), String> {
        let mut st = self.state.lock().await;
        if !self.registry.view().is_valid() {
            return Err("the registry view is not valid".into());
        }
        let (line, line_hold) = self.line(&mut st).await?;
        let (states, _) = self.settings.live_states(line);
        let mut cursor = SweepCursor::new();
        let candidates = self
            .db
            .full_scan(line, &states, &mut cursor)
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
        Ok((line, plan(&view, &candidates, Utc::now(), &policy, &safety)))
    }

    /// The safe form of the manual SQL for one task (`reap`, `POST .../reap`).
    pub async fn reap(&self, req: &ReapRequest) -> Result<Record, ReapError> {
        let prepared = self.prepare_reap(req).await?;
        self.commit_reap(prepared).await
    }

    /// Judges one task for `reap` without writing: refuses unless it is a
    /// zombie as `check` judges it (or `force`), and never a finished row.
    pub async fn prepare_reap(&self, req: &ReapRequest) -> Result<PreparedReap, ReapError> {
        // A standby never writes (SPEC §8), whatever is asked of it.
        self.ensure_leader()?;
        let mut st = self.state.lock().await;
        if let reaper_core::ViewState::Invalid { reason, .. } = &self.registry.view().state {
            return Err(ReapError::Refused(format!(
                "the registry view is not valid ({reason})"
            )));
        }
        let (line, line_hold) = self.line(&mut st).await.map_err(ReapError::Unavailable)?;
        drop(st);
        if let Some(h) = line_hold {
            return Err(ReapError::Refused(h));
        }
        let row = match self.db.task(line, req.task_id).await {
            Ok(Some(r)) => r,
            Ok(None) => return Err(ReapError::NotFound(req.task_id)),
            Err(e) => {
                self.db_failed(&e);
                return Err(ReapError::Unavailable(e.to_string()));
            }
        };
        // Judged against a view taken after the row was read (SPEC §4.1).
        let view = self.registry.view();
        let Some(valid_since) = view.valid_since() else {
            return Err(ReapError::Refused(
                "the registry view is not valid".to_string(),
            ));
        };
        // Safety rule 8 holds even with --force.
        if row.flag != 1 || DsLine::is_finished_task_state(row.row.state) {
            return Err(ReapError::Refused(format!(
                "task {} is not a current live row (state {}, flag {}); finished rows are never touched",
                req.task_id,
                line.state_name(row.row.state).unwrap_or("UNKNOWN"),
                row.flag
            )));
        }
        let action = req.action.unwrap_or(Action::Fail);
        let Some(target) = action.target_state() else {
            return Err(ReapError::Refused("report is not a write".into()));
        };
        if !line.can_write(target) {
            return Err(ReapError::Refused(format!(
                "{action} writes a state DS {line} does not have"
            )));
        }
        let workflow = req.workflow.unwrap_or(FollowUp::None);
        let mut policy = self.settings.policy(line);
        policy.unseen_absence = UnseenAbsence::Unknown;
        policy.startup_settle = std::time::Duration::ZERO;
        policy.rules.clear();
        for r in Reason::ALL {
            policy.set_default_action(r, action);
        }
        policy.workflow = workflow;
        let (states, _) = self.settings.live_states(line);
        let judged = if states.contains(&row.row.state) {
            plan(
                &view,
                std::slice::from_ref(&row.row),
                Utc::now(),
                &policy,
                &SafetyState::default(),
            )
            .zombies
            .into_iter()
            .next()
        } else {
            None
        };
        let (zombie, forced) = match judged {
            Some(z) => (z, false),
            None if req.force => (forced_zombie(&view, row.row.clone(), line, action, workflow), true),
            None => {
                return Err(ReapError::Refused(format!(
                    "task {} is not a zombie as check judges it (host {:?}, state {}); use force to override",
                    req.task_id,
                    row.row.host,
                    line.state_name(row.row.state).unwrap_or("UNKNOWN")
                )))
            }
        };
        Ok(PreparedReap {
            zombie,
            forced,
            line,
            actor: req.actor.clone(),
            valid_since,
        })
    }

    /// Writes a prepared reap: audit intent, conditional write, follow-up, outcome.
    pub async fn commit_reap(&self, p: PreparedReap) -> Result<Record, ReapError> {
        let PreparedReap {
            zombie,
            forced,
            line,
            actor,
            valid_since,
        } = p;
        let gate = Gate {
            valid_since,
            leader_only: true,
        };
        // The confirmation may have taken a while: check again before writing.
        self.ensure_leader()?;
        self.gate_open(&gate).map_err(ReapError::Refused)?;
        let action = zombie.action;
        let now = Utc::now();
        let mut intent = self.base_record("intent", &actor, &zombie, line, now);
        if forced {
            intent.reason = Some("forced".into());
        }
        intent.to_state = action
            .target_state()
            .and_then(|c| line.state_name(c))
            .map(str::to_string);
        self.audit
            .append(std::slice::from_ref(&intent))
            .map_err(|e| {
                ReapError::Unavailable(format!("cannot write the audit trail, not writing: {e}"))
            })?;
        let write = TaskWrite {
            seen: zombie.task.clone(),
            action,
            now,
        };
        let outcome = self.db.write_tasks(line, &[write]).await;
        let mut rec = intent;
        rec.ts = Utc::now();
        let result = match outcome {
            Ok(o) if o.first() == Some(&WriteOutcome::Applied) => {
                self.metrics
                    .actions_total
                    .with_label_values(&[action.as_str(), "ok"])
                    .inc();
                rec.event = "done".into();
                rec.detail = self.after_write(&zombie, line, now, &gate).await;
                Ok(rec.clone())
            }
            Ok(_) => {
                self.metrics
                    .actions_total
                    .with_label_values(&[action.as_str(), "lost_race"])
                    .inc();
                rec.event = "lost_race".into();
                rec.detail = Some("the row changed since it was read; not retried".into());
                Err(ReapError::LostRace(format!(
                    "task {} changed since it was read",
                    zombie.task.id
                )))
            }
            Err(e) => {
                self.db_failed(&e);
                self.metrics
                    .actions_total
                    .with_label_values(&[action.as_str(), "error"])
                    .inc();
                rec.event = "error".into();
                rec.detail = Some(e.to_string());
                Err(ReapError::Unavailable(e.to_string()))
            }
        };
        if let Err(e) = self.audit.append(std::slice::from_ref(&rec)) {
            tracing::error!(error = %e, "cannot write audit outcome");
        }
        result
    }
}

/// A judged reap, ready to write.
#[derive(Debug, Clone)]
pub struct PreparedReap {
    pub zombie: Zombie,
    /// Not a zombie, but `force` was given: the audit reason is `forced`.
    pub forced: bool,
    pub line: DsLine,
    pub actor: String,
    /// The view's validity epoch the judgement was made on.
    pub valid_since: Instant,
}

/// What a write decision was made on (SPEC §4.1): the registry view's
/// validity epoch, and leadership. Checked again right before each write
/// batch and each follow-up; once closed, nothing more is written.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    pub valid_since: Instant,
    pub leader_only: bool,
}

/// A `--force`d task that is no zombie; its audit records say reason `forced`.
fn forced_zombie(
    view: &RegistryView,
    task: Candidate,
    line: DsLine,
    action: Action,
    workflow: FollowUp,
) -> Zombie {
    let owner_master = task
        .workflow_host
        .as_deref()
        .filter(|h| !reaper_core::host::is_empty(Some(h)))
        .map(|h| reaper_core::host::normalize(h).into_owned());
    let owner_master_alive = owner_master
        .as_deref()
        .is_some_and(|h| view.live(NodeKind::Master, h).is_some());
    let (workflow, note) = if workflow == FollowUp::Recover && owner_master_alive {
        (
            FollowUp::None,
            format!(
                "forced: not a zombie as check judges it; {}",
                reaper_core::plan::recover_skipped_note(
                    line,
                    owner_master.as_deref().unwrap_or_default()
                )
            ),
        )
    } else {
        (
            workflow,
            "forced: not a zombie as check judges it".to_string(),
        )
    };
    Zombie {
        state_name: line.state_name(task.state).unwrap_or("UNKNOWN").to_string(),
        task,
        // The audit record says `forced`; the enum needs some value.
        reason: Reason::WorkerLost,
        evidence: Default::default(),
        owner_master,
        owner_master_alive,
        action,
        workflow,
        note: Some(note),
        disposition: Disposition::Act,
    }
}

/// The next instant at which a sweep could newly act: a loss leaving its grace
/// period, or the view leaving `startup_settle`.
pub fn next_deadline(view: &RegistryView, settings: &Settings, now: Instant) -> Option<Instant> {
    let grace = reaper_core::delta(settings.grace_period);
    let since = view.valid_since()?;
    let mut cands = vec![
        since + reaper_core::delta(settings.startup_settle),
        since + grace,
    ];
    cands.extend(view.lost_workers.values().map(|t| *t + grace));
    cands.extend(view.lost_masters.values().map(|t| *t + grace));
    cands.into_iter().filter(|t| *t > now).min()
}

/// `/api/v1/workers`.
pub fn workers_json(view: &RegistryView) -> Value {
    let node = |n: &reaper_core::NodeInfo| {
        json!({
            "host": n.host,
            "address": n.address.as_deref().unwrap_or(&n.host),
            "startup_time": n.startup_time,
            "report_time": n.report_time,
            "status": n.status,
            "groups": n.groups,
        })
    };
    let mut workers: Vec<_> = view.workers.values().collect();
    workers.sort_by(|a, b| a.host.cmp(&b.host));
    let mut masters: Vec<_> = view.masters.values().collect();
    masters.sort_by(|a, b| a.host.cmp(&b.host));
    let mut lost: Vec<(String, &str, Instant)> = view
        .lost_workers
        .iter()
        .map(|(h, t)| (h.clone(), "worker", *t))
        .chain(
            view.lost_masters
                .iter()
                .map(|(h, t)| (h.clone(), "master", *t)),
        )
        .collect();
    lost.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    json!({
        "workers": workers.into_iter().map(node).collect::<Vec<_>>(),
        "masters": masters.into_iter().map(node).collect::<Vec<_>>(),
        "lost": lost.into_iter().map(|(h, k, t)| json!({"host": h, "kind": k, "lost_at": t})).collect::<Vec<_>>(),
    })
}

pub type SharedEngine = Arc<Engine>;

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(dir: &std::path::Path) -> Engine {
        let cfg = dir.join("c.toml");
        std::fs::write(
            &cfg,
            format!(
                "[zookeeper]\nconnect = \"127.0.0.1:1\"\n[audit]\npath = \"{}\"\n",
                dir.join("audit.jsonl").display()
            ),
        )
        .unwrap();
        let s = crate::config::load_with(&cfg, true, &[]).unwrap();
        let db = Db::connect_lazy(&crate::app::db_settings(&s)).unwrap();
        let reg = Registry::start(
            crate::app::zk_settings(&s),
            tokio_util::sync::CancellationToken::new(),
        );
        Engine::new(s, db, reg, None, Metrics::new())
    }

    #[tokio::test]
    async fn dangling_intents_are_closed_once() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let now = Utc::now();
        let rec = |event: &str, id: i64| {
            let mut r = Record::event(event, "daemon", now);
            r.task_id = Some(id);
            r
        };
        e.audit
            .append(&[
                rec("intent", 1),
                rec("done", 1),
                rec("intent", 2),
                rec("intent", 3),
                rec("lost_race", 3),
            ])
            .unwrap();
        assert_eq!(e.close_dangling_intents(), 1);
        let last = e.audit.tail(1).unwrap().pop().unwrap();
        assert_eq!((last.task_id, last.event.as_str()), (Some(2), "error"));
        assert_eq!(e.close_dangling_intents(), 0, "closing is idempotent");
    }

    #[test]
    fn line_resolution() {
        let schema = SchemaInfo {
            lines: vec![DsLine::V3_1_0, DsLine::V3_1],
            version_row: None,
        };
        let detected = |lines: Vec<DsLine>| Detected {
            layout: None,
            format: None,
            lines,
        };
        // the registry narrows the schema's candidates
        assert_eq!(
            resolve_line(
                VersionSetting::Auto,
                Some(&schema),
                &detected(vec![DsLine::V3_1])
            ),
            (Some(DsLine::V3_1), None)
        );
        // nothing seen in the registry: the newest the schema allows
        assert_eq!(
            resolve_line(
                VersionSetting::Auto,
                Some(&schema),
                &detected(DsLine::ALL.to_vec())
            )
            .0,
            Some(DsLine::V3_1)
        );
        // disagreement holds
        let (l, hold) = resolve_line(
            VersionSetting::Auto,
            Some(&schema),
            &detected(vec![DsLine::V1_2]),
        );
        assert_eq!(l, Some(DsLine::V3_1));
        assert!(hold.unwrap().contains("disagreement"));
        // explicit wins
        assert_eq!(
            resolve_line(
                VersionSetting::Line(DsLine::V2_0),
                None,
                &detected(vec![DsLine::V1_2])
            ),
            (Some(DsLine::V2_0), None)
        );
        assert!(resolve_line(VersionSetting::Auto, None, &detected(vec![]))
            .1
            .is_some());
    }
}
