//! The one place where a sweep — and `reap` — has effects on the world.
//!
//! A plan is data: the sweep turns it into a list of [`Effect`]s, and
//! [`Engine::execute`] carries them out in order, each behind the same gate
//! (SPEC §4.1: the view the judgement was made on is still valid, this
//! replica still leads, the judgement is not older than `sweep_interval`),
//! each with its intent on disk first ([`Engine::intend`], the only writer of
//! intent records), its port call, its outcome record and its counters. Once
//! the gate closes nothing more is carried out in that pass, and every effect
//! left is counted in `ds_reaper_effects_skipped_total{reason}`.
//!
//! A new kind of effect is a variant here and a module below, never a
//! pipeline of its own.

mod dangling;
mod order;
mod recover;
mod remote;
mod task;

pub use task::ActionResult;
pub(super) use task::{Item, NotWritten};

use super::reap::ReapError;
use super::Engine;
use crate::audit::{AuditError, AuditEvent, Record};
use reaper_core::ghost::Ghost;
use reaper_core::order::KillOrder;
use reaper_core::remote::RemoteApp;
use reaper_core::workflow::WorkflowFinding;
use reaper_core::{DsLine, Instant, Zombie};
use std::collections::BTreeSet;
use std::time::Duration;

/// What a judgement was made on (SPEC §4.1), checked again before each effect.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    /// The registry view's validity epoch.
    pub valid_since: Instant,
    pub leader_only: bool,
    /// When the plan the effects come from was made (the daemon's clock).
    pub judged_at: Instant,
    /// How old that plan may be when an effect is carried out; None for an
    /// operator's `reap`, which is judged again at its own moment.
    pub max_age: Option<Duration>,
}

/// Why the gate closed: nothing more is carried out in that pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateClosed {
    #[error(
        "the judgement is {age_ms} ms old, older than sweep_interval; judged again next sweep"
    )]
    StaleJudgement { age_ms: i64 },
    #[error("the registry view was rebuilt since the judgement")]
    ViewRebuilt,
    #[error("the registry view is no longer valid")]
    ViewInvalid,
    #[error("no longer the leader")]
    NotLeader,
}

impl GateClosed {
    /// Its label in `ds_reaper_effects_skipped_total`.
    pub fn label(&self) -> &'static str {
        match self {
            GateClosed::StaleJudgement { .. } => "stale_judgement",
            GateClosed::ViewRebuilt | GateClosed::ViewInvalid => "view_changed",
            GateClosed::NotLeader => "not_leader",
        }
    }
}

/// One effect of a plan on the world.
pub(super) enum Effect<'a> {
    /// Kill one live YARN application (SPEC §17, `kill_remote_apps`): a
    /// zombie's about to be written — ordered before the task batch, which
    /// then writes the zombie only once every such application is final —
    /// or a ghost's.
    KillRemoteApp {
        target: RemoteTarget<'a>,
        app: &'a RemoteApp,
    },
    /// One conditional batch of task writes and their follow-ups (§4.2, §5).
    TaskBatch(Vec<Item<'a>>),
    /// A workflow `recover` (§13).
    Recover {
        finding: &'a WorkflowFinding,
        forced: bool,
    },
    /// A kill order for a ghost's processes (§15).
    KillOrder { ghost: &'a Ghost, folder: String },
}

/// Whose application a kill ends.
#[derive(Clone, Copy)]
pub(super) enum RemoteTarget<'a> {
    Zombie(&'a Zombie),
    Ghost(&'a Ghost),
}

impl Effect<'_> {
    /// How many actions it stands for (a batch counts its items).
    fn weight(&self) -> usize {
        match self {
            Effect::TaskBatch(items) => items.len(),
            _ => 1,
        }
    }
}

/// What one effect came to, in the order of the effects.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Not carried out: the gate had closed.
    Skipped(GateClosed),
    /// A remote application kill; `final_now`: a read after it showed the
    /// application in a final state (only then is the kill `done`).
    RemoteApp {
        app_id: String,
        final_now: bool,
    },
    Tasks(Result<Vec<(ActionResult, Record)>, NotWritten>),
    Recovered(Box<Result<Record, ReapError>>),
    /// A kill order: `order` is None when it was not written; `tried`
    /// when its intent was on disk and the node was attempted.
    Ordered {
        worker: String,
        task_id: i64,
        folder: String,
        order: Option<KillOrder>,
        tried: bool,
    },
}

/// Who carries the effects out, on which line, behind which gate.
pub(super) struct Context<'c> {
    pub line: DsLine,
    pub actor: &'c str,
    pub gate: Gate,
}

impl Engine {
    /// Whether an effect decided on `gate` may still be carried out.
    pub(super) fn gate_open(&self, gate: &Gate) -> Result<(), GateClosed> {
        if let Some(max) = gate.max_age {
            let age = self.now() - gate.judged_at;
            if age > reaper_core::delta(max) {
                return Err(GateClosed::StaleJudgement {
                    age_ms: age.num_milliseconds(),
                });
            }
        }
        match self.registry.view().valid_since() {
            Some(since) if since == gate.valid_since => {}
            Some(_) => return Err(GateClosed::ViewRebuilt),
            None => return Err(GateClosed::ViewInvalid),
        }
        if gate.leader_only && !self.is_leader() {
            return Err(GateClosed::NotLeader);
        }
        Ok(())
    }

    /// Carries the effects out in order, each behind the gate; returns one
    /// outcome per effect.
    pub(super) async fn execute(&self, effects: Vec<Effect<'_>>, cx: &Context<'_>) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(effects.len());
        let mut closed: Option<GateClosed> = None;
        // applications a kill of this pass left final: their tasks may be written
        let mut final_apps: BTreeSet<String> = BTreeSet::new();
        for effect in effects {
            if closed.is_none() {
                if let Err(why) = self.gate_open(&cx.gate) {
                    tracing::warn!(%why, "the gate closed: no more effects in this pass");
                    closed = Some(why);
                }
            }
            if let Some(why) = &closed {
                self.metrics
                    .effects_skipped_total
                    .with_label_values(&[why.label()])
                    .inc_by(effect.weight() as u64);
                outcomes.push(Outcome::Skipped(why.clone()));
                continue;
            }
            let outcome = match effect {
                Effect::KillRemoteApp { target, app } => {
                    let o = self.kill_remote_app(target, app, cx).await;
                    if let Outcome::RemoteApp {
                        app_id,
                        final_now: true,
                    } = &o
                    {
                        final_apps.insert(app_id.clone());
                    }
                    o
                }
                Effect::TaskBatch(items) => {
                    let items = self.after_remote_kills(items, &final_apps);
                    Outcome::Tasks(self.task_batch(&items, cx).await)
                }
                Effect::Recover { finding, forced } => {
                    Outcome::Recovered(Box::new(self.recover(finding, cx, forced).await))
                }
                Effect::KillOrder { ghost, folder } => self.kill_order(ghost, folder, cx).await,
            };
            outcomes.push(outcome);
        }
        outcomes
    }

    /// The batch's items whose live applications (when the policy kills
    /// them) were all seen final after their kill: a task whose application
    /// may still run is never written (SPEC §17).
    fn after_remote_kills<'a>(
        &self,
        items: Vec<Item<'a>>,
        final_apps: &BTreeSet<String>,
    ) -> Vec<Item<'a>> {
        if !self.settings.policy.kill_remote_apps {
            return items;
        }
        items
            .into_iter()
            .filter(|it| {
                let live = reaper_core::remote::live_ids(it.zombie);
                let all_final = live.iter().all(|id| final_apps.contains(id));
                if !all_final {
                    tracing::info!(task_id = it.zombie.task.id, apps = ?live,
                        "held: a remote application may still run after its kill");
                }
                all_final
            })
            .collect()
    }

    /// Puts intent records on disk (fsynced) before the effect they announce:
    /// the one writer of intents (SPEC §4.7, §10).
    pub(super) async fn intend(&self, mut records: Vec<Record>) -> Result<Vec<Record>, AuditError> {
        for r in &mut records {
            r.event = AuditEvent::Intent;
        }
        self.audit.append_returning(records).await
    }
}
