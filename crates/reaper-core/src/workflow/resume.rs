//! A follow-up survives a change of leader (SPEC §13). A leader that wrote
//! a workflow's tasks and died before its workflow step leaves rows that
//! say so: every unfinished task in the target state of a task action
//! followed by `recover`, and no command queued. The next leader recovers
//! such a workflow after the task `grace_period` — the wait the follow-up
//! itself had — instead of `workflow_grace_period`.

use super::WorkflowCandidate;
use crate::policy::{FollowUp, Policy};
use crate::reason::Reason;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// What makes a workflow wait only the task grace period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The task states written by the task policy's actions that come with
    /// the follow-up `recover` ([`resume_targets`]); empty: never.
    pub targets: BTreeSet<i32>,
    /// The task `grace_period`.
    pub grace_period: Duration,
}

/// The target states of the task policy's actions followed by `recover`:
/// the `[policy]` default of every reason, and every rule with what it
/// leaves out taken from those defaults (a rule without a reason can take
/// any reason's default action).
pub fn resume_targets(policy: &Policy) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    let mut add = |action: crate::Action, follow_up: FollowUp| {
        if follow_up == FollowUp::Recover {
            out.extend(action.target_state());
        }
    };
    for reason in Reason::ALL {
        add(policy.default_action(reason), policy.workflow);
    }
    for rule in &policy.rules {
        let follow_up = rule.workflow.unwrap_or(policy.workflow);
        match (rule.action, rule.reason) {
            (Some(a), _) => add(a, follow_up),
            (None, Some(r)) => add(policy.default_action(r), follow_up),
            (None, None) => Reason::ALL
                .iter()
                .for_each(|r| add(policy.default_action(*r), follow_up)),
        }
    }
    out
}

/// Its `flag = 1` tasks in a target state, when its rows show a follow-up
/// left undone: at least one such task, every non-terminal `flag = 1` task
/// in a target state (none still running or waiting: those are the task
/// rules' to judge), and no command queued (read, not assumed).
pub(super) fn written_tasks(wf: &WorkflowCandidate, resume: &Resume) -> Option<i64> {
    if resume.targets.is_empty() || wf.command_queued != Some(false) {
        return None;
    }
    if wf
        .tasks_by_state
        .iter()
        .any(|(s, n)| *n > 0 && !resume.targets.contains(s))
    {
        return None;
    }
    let n: i64 = wf
        .tasks_by_state
        .iter()
        .chain(wf.ended_by_state.iter())
        .filter(|(s, _)| resume.targets.contains(s))
        .map(|(_, n)| *n)
        .sum();
    (n > 0).then_some(n)
}
