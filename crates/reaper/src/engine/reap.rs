//! The safe form of the manual SQL for one task (`reap`, `POST .../reap`):
//! judged as `check` judges, written through the same act pipeline.

use super::effects::{Context, Effect, Gate, Item, NotWritten, Outcome, RemoteTarget};
use super::{ActionResult, Engine};
use crate::audit::Record;
use reaper_core::plan::{owner_master, recover_skipped_note};
use reaper_core::ports::TaskRow;
use reaper_core::{
    plan, Action, Candidate, Disposition, DsLine, FollowUp, Instant, Policy, Reason, RegistryView,
    SafetyState, UnseenAbsence, Zombie,
};

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

/// The engine could not judge (the line, a read): retry later.
impl From<super::Error> for ReapError {
    fn from(e: super::Error) -> ReapError {
        ReapError::Unavailable(e.to_string())
    }
}

pub use crate::api::ReapRequest;

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

impl Engine {
    pub(super) fn ensure_leader(&self) -> Result<(), ReapError> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(ReapError::NotLeader(self.leader_id()))
        }
    }

    pub async fn reap(&self, req: &ReapRequest) -> Result<Record, ReapError> {
        let prepared = self.prepare_reap(req).await?;
        self.commit_reap(prepared).await
    }

    /// Judges one task without writing: refuses unless it is a zombie as
    /// `check` judges it (or `force`), and never a finished row.
    pub async fn prepare_reap(&self, req: &ReapRequest) -> Result<PreparedReap, ReapError> {
        // A standby never writes (SPEC §8), whatever is asked of it.
        self.ensure_leader()?;
        let mut st = self.state.lock().await;
        if let reaper_core::ViewState::Invalid { reason, .. } = &self.registry.view().state {
            return Err(ReapError::Refused(format!(
                "the registry view is not valid ({reason})"
            )));
        }
        let (line, line_hold) = self.line(&mut st).await?;
        drop(st);
        if let Some(h) = line_hold {
            return Err(ReapError::Refused(h));
        }
        let row = self.live_row(line, req.task_id).await?;
        // Judged against a view taken after the row was read (SPEC §4.1).
        let view = self.registry.view();
        let Some(valid_since) = view.valid_since() else {
            return Err(ReapError::Refused(
                "the registry view is not valid".to_string(),
            ));
        };
        let action = writable_action(req, line)?;
        let workflow = req.workflow.unwrap_or(FollowUp::None);
        let policy = self.reap_policy(line, action, workflow);
        let (states, _) = self.settings.live_states(line);
        let judged = if states.contains(&row.task.state) {
            plan(
                &view,
                std::slice::from_ref(&row.task),
                self.now(),
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
            None if req.force => (
                forced_zombie(&view, row.task.clone(), line, action, workflow),
                true,
            ),
            None => {
                return Err(ReapError::Refused(format!(
                    "task {} is not a zombie as check judges it (host {}, state {}); use force to override",
                    req.task_id,
                    super::host_words(row.task.host.as_deref()),
                    line.state_name(row.task.state).unwrap_or("UNKNOWN")
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

    /// The task's row, refused unless it is a current live row: safety rule
    /// 8 (a finished row is never touched) holds even with `force`.
    async fn live_row(&self, line: DsLine, task_id: i64) -> Result<TaskRow, ReapError> {
        let row = match self.store.task(line, task_id).await {
            Ok(Some(r)) => r,
            Ok(None) => return Err(ReapError::NotFound(task_id)),
            Err(e) => {
                self.db_failed(&e);
                return Err(ReapError::Unavailable(e.to_string()));
            }
        };
        if row.flag != 1 || DsLine::is_finished_task_state(row.task.state) {
            return Err(ReapError::Refused(format!(
                "task {task_id} is not a current live row (state {}, flag {}); finished rows are never touched",
                line.state_name(row.task.state).unwrap_or("UNKNOWN"),
                row.flag
            )));
        }
        Ok(row)
    }

    /// The policy an asked-for reap is judged by: every reason takes the
    /// asked action, no rule applies, an unseen absence proves nothing and
    /// there is no start-up settle (the operator asks about one row, now).
    fn reap_policy(&self, line: DsLine, action: Action, workflow: FollowUp) -> Policy {
        let mut policy = self.settings.policy(line);
        policy.unseen_absence = UnseenAbsence::Unknown;
        policy.startup_settle = std::time::Duration::ZERO;
        policy.rules.clear();
        for r in Reason::ALL {
            policy.set_default_action(r, action);
        }
        policy.workflow = workflow;
        policy
    }

    /// Writes a prepared reap through the executor: with `kill_remote_apps`
    /// the task's live applications are killed first, and its write waits
    /// for every one to be final.
    pub async fn commit_reap(&self, p: PreparedReap) -> Result<Record, ReapError> {
        // The confirmation may have taken a while: checked again before writing.
        self.ensure_leader()?;
        let mut zombie = self.remote_hold(&p).await?;
        zombie.disposition = reaper_core::Disposition::Act;
        let cx = Context {
            line: p.line,
            actor: &p.actor,
            gate: Gate {
                valid_since: p.valid_since,
                leader_only: true,
                judged_at: self.now(),
                max_age: None,
            },
        };
        let mut effects = Vec::new();
        if self.settings.policy.kill_remote_apps {
            let live = reaper_core::remote::live_ids(&zombie);
            for app in zombie
                .evidence
                .remote_apps
                .iter()
                .filter(|a| live.contains(&a.id))
            {
                effects.push(Effect::KillRemoteApp {
                    target: RemoteTarget::Zombie(&zombie),
                    app,
                });
            }
        }
        effects.push(Effect::TaskBatch(vec![Item {
            zombie: &zombie,
            forced: p.forced,
        }]));
        let done = match self.execute(effects, &cx).await.pop() {
            Some(Outcome::Tasks(Ok(done))) => done,
            Some(Outcome::Tasks(Err(NotWritten::Gate(why)))) | Some(Outcome::Skipped(why)) => {
                return Err(ReapError::Refused(why.to_string()))
            }
            Some(Outcome::Tasks(Err(e @ NotWritten::Audit(_)))) => {
                return Err(ReapError::Unavailable(e.to_string()))
            }
            _ => Vec::new(),
        };
        let Some((result, rec)) = done.into_iter().next() else {
            return Err(ReapError::Refused(format!(
                "task {}: a remote application may still run after its kill",
                p.zombie.task.id
            )));
        };
        match result {
            ActionResult::Ok => Ok(rec),
            ActionResult::LostRace => Err(ReapError::LostRace(format!(
                "task {} changed since it was read",
                p.zombie.task.id
            ))),
            ActionResult::Error => Err(ReapError::Unavailable(
                rec.detail.unwrap_or_else(|| "the write failed".into()),
            )),
        }
    }

    /// SPEC §17: not even a forced reap re-runs a task whose YARN
    /// application may still run. The RM is asked now (the confirmation may
    /// have taken a while); refused unless every application is final or,
    /// with `kill_remote_apps`, live and about to be killed.
    async fn remote_hold(&self, p: &PreparedReap) -> Result<Zombie, ReapError> {
        let mut zombie = p.zombie.clone();
        zombie.disposition = reaper_core::Disposition::Act;
        let answers = self
            .read_remote_apps(
                std::slice::from_ref(&zombie.task),
                &self.view(),
                false,
                p.line,
                false,
            )
            .await;
        answers.evidence.judge(&mut zombie);
        if let reaper_core::Disposition::Blocked(b) = &zombie.disposition {
            let ids: Vec<&str> = zombie
                .evidence
                .remote_apps
                .iter()
                .map(|a| a.id.as_str())
                .collect();
            return Err(ReapError::Refused(format!(
                "{}: {}",
                b.describe(),
                ids.join(", ")
            )));
        }
        Ok(zombie)
    }
}

/// A `--force`d task that is no zombie; its audit records say reason `forced`.
fn forced_zombie(
    view: &RegistryView,
    task: Candidate,
    line: DsLine,
    action: Action,
    workflow: FollowUp,
) -> Zombie {
    let (owner, owner_alive) = owner_master(view, &task);
    let mut note = "forced: not a zombie as check judges it".to_string();
    let workflow = if workflow == FollowUp::Recover && owner_alive {
        note.push_str("; ");
        note.push_str(&recover_skipped_note(
            line,
            owner.as_deref().unwrap_or_default(),
        ));
        FollowUp::None
    } else {
        workflow
    };
    Zombie {
        state_name: line.state_name(task.state).unwrap_or("UNKNOWN").to_string(),
        task,
        // The audit record says `forced`; the enum needs some value.
        reason: Reason::WorkerLost,
        evidence: Default::default(),
        owner_master: owner,
        owner_master_alive: owner_alive,
        action,
        workflow,
        note: Some(note),
        disposition: Disposition::Act,
    }
}

/// The asked action (`fail` unless named), refused when it writes nothing or
/// writes a state the DS line does not have.
fn writable_action(req: &ReapRequest, line: DsLine) -> Result<Action, ReapError> {
    let action = req.action.unwrap_or(Action::Fail);
    let Some(target) = action.target_state() else {
        return Err(ReapError::Refused("report is not a write".into()));
    };
    if !line.can_write(target) {
        return Err(ReapError::Refused(format!(
            "{action} writes a state DS {line} does not have"
        )));
    }
    Ok(action)
}
