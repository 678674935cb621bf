//! The planner: `plan(view, candidates, now, policy, state) -> Plan`.
//!
//! Pure and deterministic: the same inputs give the same plan, including the
//! next brake and rate-limit state, which the caller stores only if it acts.

use crate::brake;
use crate::budget::Budget;
use crate::candidate::Candidate;
use crate::host;
use crate::line::DsLine;
use crate::policy::Policy;
use crate::remote::RemoteEvidence;
use crate::view::{NodeKind, RegistryView};
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};

pub use crate::verdict::{
    Blocked, Disposition, SafetyState, Zombie, CHILD_WORKFLOW_RUNNING, DS_FAILOVER_IN_PROGRESS,
    PROCESS_ALIVE,
};

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
