//! The planner: `plan(view, candidates, now, policy, state) -> Plan`.
//!
//! Pure and deterministic: the same inputs give the same plan, including the
//! next brake and rate-limit state, which the caller stores only if it acts.

use crate::brake::{self, BrakeState};
use crate::budget::Budget;
use crate::candidate::Candidate;
use crate::host;
use crate::line::DsLine;
use crate::policy::{Action, FollowUp, Policy};
use crate::rate::TokenBucket;
use crate::reason::{Evidence, Reason};
use crate::remote::RemoteEvidence;
use crate::view::{NodeKind, RegistryView};
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};

/// What the plan remembers between sweeps. A hold is no memory: it is an
/// input of each sweep's [`Budget`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SafetyState {
    pub brake: BrakeState,
    /// None until the first plan: the bucket then starts full.
    pub bucket: Option<TokenBucket>,
    /// SPEC §12: per task, since when a fresh agent's reports lack its
    /// process (the daemon's clock).
    #[serde(default)]
    pub missing_since: std::collections::BTreeMap<i64, Instant>,
}

/// The note of a zombie whose process a fresh agent still lists.
pub const PROCESS_ALIVE: &str = "process_alive";

/// Why an action the policy asked for is not taken in this sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "blocked", content = "why")]
pub enum Blocked {
    /// Inside `startup_settle` after the view became valid.
    Settling,
    /// A hold set by the daemon (see [`Budget::hold`]).
    Hold(String),
    Brake(String),
    /// `max_actions_per_sweep` reached.
    SweepCap,
    /// The per-minute token bucket is empty.
    RateLimit,
    /// The action's state code does not exist on the line (never written).
    Unwritable,
    /// A fresh agent lists the task's process (SPEC §12): never acted on for
    /// a lost, restarted or stale worker while it runs.
    ProcessAlive,
    /// A SUB_PROCESS task whose child workflow instance is not finished
    /// (SPEC §3): the child is the task's process.
    ChildWorkflowRunning,
    /// One of the task's YARN applications may still run (SPEC §17).
    RemoteAppRunning,
    /// The ResourceManager could not say whether the task's applications
    /// run (SPEC §17).
    RemoteAppUnknown,
    /// A YARN task whose host's agent can read no application-id source
    /// (SPEC §17, `[yarn] require_ids`): its application may run unseen.
    RemoteAppIdsUnknown,
}

/// The note of a SUB_PROCESS task whose child workflow still runs.
pub const CHILD_WORKFLOW_RUNNING: &str = "child_workflow_running";

/// The note of a recover skipped while DS fails the owning master over.
pub const DS_FAILOVER_IN_PROGRESS: &str = "ds_failover_in_progress";

impl Blocked {
    pub fn describe(&self) -> String {
        match self {
            Blocked::Settling => "registry view is settling (startup_settle)".into(),
            Blocked::Hold(w) => format!("held: {w}"),
            Blocked::Brake(w) => format!("brake engaged: {w}"),
            Blocked::SweepCap => "max_actions_per_sweep reached".into(),
            Blocked::RateLimit => "rate limit (rate.per_minute) reached".into(),
            Blocked::Unwritable => "the action's state code does not exist on this DS line".into(),
            Blocked::ProcessAlive => PROCESS_ALIVE.into(),
            Blocked::ChildWorkflowRunning => CHILD_WORKFLOW_RUNNING.into(),
            Blocked::RemoteAppRunning => crate::remote::REMOTE_APP_RUNNING.into(),
            Blocked::RemoteAppUnknown => crate::remote::REMOTE_APP_UNKNOWN.into(),
            Blocked::RemoteAppIdsUnknown => crate::remote::REMOTE_APP_IDS_UNKNOWN.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Write now.
    Act,
    /// Policy says `report`: nothing to write.
    Report,
    /// Policy wants a write but a safety rule holds it back.
    Blocked(Blocked),
}

/// A candidate found to be a zombie, with everything `check` and the API show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Zombie {
    pub task: Candidate,
    /// Canonical name of the row's state on the line.
    pub state_name: String,
    pub reason: Reason,
    pub evidence: Evidence,
    /// The workflow's owning master (its `host`), None when `NULL`/empty.
    pub owner_master: Option<String>,
    pub owner_master_alive: bool,
    pub action: Action,
    pub workflow: FollowUp,
    /// Why the action or follow-up was downgraded, if it was.
    pub note: Option<String>,
    pub disposition: Disposition,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub at: Instant,
    /// Set when the view is invalid: no zombie is judged at all.
    pub view_invalid: Option<String>,
    pub candidates: usize,
    pub zombies: Vec<Zombie>,
    /// The brake condition seen in this sweep (None = clear).
    pub brake_condition: Option<String>,
    /// The state to keep for the next sweep.
    pub next: SafetyState,
    /// When a later sweep could newly act on this view (see [`wake`]).
    pub wake: Option<Instant>,
}

impl Plan {
    /// Zombies to write now, in candidate order.
    pub fn actions(&self) -> impl Iterator<Item = &Zombie> {
        self.zombies
            .iter()
            .filter(|z| z.disposition == Disposition::Act)
    }

    pub fn action_count(&self) -> usize {
        self.actions().count()
    }
}

/// Reconciles the registry view with the candidates, unheld, with the
/// budget the remembered state leaves (see [`plan_within`]).
pub fn plan(
    view: &RegistryView,
    candidates: &[Candidate],
    now: Instant,
    policy: &Policy,
    state: &SafetyState,
) -> Plan {
    let mut budget = Budget::for_sweep(state, policy, now);
    plan_within(
        view,
        candidates,
        now,
        policy,
        state,
        &mut budget,
        &RemoteEvidence::default(),
    )
}

/// Reconciles the registry view with the candidates; the writes it wants are
/// admitted through `budget` (which then has the brake this plan updated, for
/// the planners after it). `next.bucket` is the budget's bucket afterwards.
/// A task whose YARN application may still run (`remote`, SPEC §17) is held
/// before the budget admits anything.
pub fn plan_within(
    view: &RegistryView,
    candidates: &[Candidate],
    now: Instant,
    policy: &Policy,
    state: &SafetyState,
    budget: &mut Budget,
    remote: &RemoteEvidence,
) -> Plan {
    let Some(valid_since) = view.valid_since() else {
        let reason = match &view.state {
            crate::ViewState::Invalid { reason, .. } => reason.clone(),
            crate::ViewState::Valid { .. } => unreachable!("valid_since is None"),
        };
        // Safety rule 1: with no valid view nothing is judged, and the brake
        // keeps whatever it was (it cannot be evaluated either).
        return Plan {
            at: now,
            view_invalid: Some(reason),
            candidates: candidates.len(),
            zombies: Vec::new(),
            brake_condition: None,
            next: SafetyState {
                brake: state.brake.clone(),
                bucket: budget.bucket,
                missing_since: state.missing_since.clone(),
            },
            wake: None,
        };
    };

    let mut missing = state.missing_since.clone();
    let mut zombies: Vec<Zombie> = candidates
        .iter()
        .filter_map(|c| judge::judge(view, valid_since, c, now, policy, &mut missing))
        .collect();
    // Only rows still live are tracked, so the map stays bounded.
    if !missing.is_empty() {
        let live: std::collections::HashSet<i64> = candidates.iter().map(|c| c.id).collect();
        missing.retain(|id, _| live.contains(id));
    }

    let acting = zombies
        .iter()
        .filter(|z| z.disposition != Disposition::Report)
        .count();
    let condition = brake::evaluate(view, now, &policy.brake, acting, candidates.len());
    let brake_condition = condition.as_ref().map(|c| c.why.clone());
    let brake = state.brake.update(condition, now, &policy.brake);
    budget.set_brake(&brake);
    for z in zombies.iter_mut() {
        if !remote.judge(z) && z.disposition == Disposition::Act {
            z.disposition = budget.admit(valid_since, now);
        }
    }

    Plan {
        at: now,
        view_invalid: None,
        candidates: candidates.len(),
        zombies,
        brake_condition,
        next: SafetyState {
            brake,
            bucket: budget.bucket,
            missing_since: missing,
        },
        wake: wake(view, policy.grace_period, policy.startup_settle, now),
    }
}

/// The next instant after `now` at which a sweep of this view could newly
/// act: a lost host leaving its grace period (a host never seen counts from
/// the view becoming valid), or the view leaving `startup_settle`. None with
/// no valid view: its becoming valid is a change of its own.
pub fn wake(
    view: &RegistryView,
    grace: std::time::Duration,
    settle: std::time::Duration,
    now: Instant,
) -> Option<Instant> {
    let grace = delta(grace);
    let since = view.valid_since()?;
    [since + delta(settle), since + grace]
        .into_iter()
        .chain(view.lost_workers.values().map(|t| *t + grace))
        .chain(view.lost_masters.values().map(|t| *t + grace))
        .filter(|t| *t > now)
        .min()
}

/// The owning master of a task's workflow (its `host`, None when
/// `NULL`/empty) and whether it is live in the view: the one owner rule.
pub fn owner_master(view: &RegistryView, c: &Candidate) -> (Option<String>, bool) {
    let owner = c
        .workflow_host
        .as_deref()
        .filter(|h| !host::is_empty(Some(h)))
        .map(|h| host::normalize(h).into_owned());
    let alive = owner
        .as_deref()
        .is_some_and(|h| view.live(NodeKind::Master, h).is_some());
    (owner, alive)
}

/// Why `recover` is not taken while the owning master lives (SPEC §5): on
/// every line a second command would run the workflow twice.
pub fn recover_skipped_note(line: DsLine, master: &str) -> String {
    if line.master_rereads_db() {
        format!("owning master {master} is alive and runs the workflow in a thread of its own; recover skipped")
    } else {
        format!("owning master {master} is alive and holds the workflow in memory; recover skipped")
    }
}

mod judge;

#[cfg(test)]
mod gaps;
#[cfg(test)]
mod process;
#[cfg(test)]
mod tests;
