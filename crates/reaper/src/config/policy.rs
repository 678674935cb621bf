//! What the rest of the daemon asks of the settings: the planner's policy and
//! the live states for a line, the checks that span several keys, and what
//! this build cannot do yet.

use super::choices::{ReasonName, RuleAction};
use super::sections::{RuleEntry, Settings};
use reaper_core::{BrakeConfig, DsLine, Rule};

impl Settings {
    /// The planner's policy for a line.
    pub fn policy(&self, line: DsLine) -> reaper_core::Policy {
        let p = &self.policy;
        let r = &self.reconcile;
        let b = &self.brake;
        reaper_core::Policy {
            line,
            worker_lost: p.worker_lost,
            worker_restarted: p.worker_restarted,
            heartbeat_stale: p.heartbeat_stale,
            master_lost: p.master_lost,
            no_host: p.no_host,
            process_gone: p.process_gone,
            workflow: p.workflow,
            rules: p.rules.iter().filter_map(RuleEntry::to_core).collect(),
            grace_period: r.grace_period,
            heartbeat_stale_after: r.heartbeat_stale_after,
            no_host_after: r.no_host_after,
            clock_skew_tolerance: r.clock_skew_tolerance,
            startup_settle: r.startup_settle,
            max_actions_per_sweep: r.max_actions_per_sweep,
            rate_per_minute: self.rate.per_minute,
            brake: BrakeConfig {
                window: b.window,
                max_lost_worker_fraction: b.max_lost_worker_fraction,
                max_zombie_fraction: b.max_zombie_fraction,
                min_zombies: b.min_zombies,
                release_after: b.release_after,
            },
            unseen_absence: reaper_core::UnseenAbsence::SinceViewValid,
            process_gone_after: r.process_gone_after,
            agent_stale_after: r.agent_stale_after,
            hold_while_process_alive: r.hold_while_process_alive,
            process_task_types: r.process_task_types.clone(),
        }
    }

    /// The workflow policy (SPEC §13): `[policy] workflow_master_lost`, the
    /// workflow rules, and the workflow timings.
    pub fn workflow_policy(&self) -> reaper_core::workflow::WorkflowPolicy {
        use reaper_core::workflow::{WorkflowAction as Core, WorkflowReason, WorkflowRule};
        let rules = self
            .policy
            .rules
            .iter()
            .filter_map(|r| {
                let reason = match r.reason? {
                    ReasonName::WorkflowMasterLost => WorkflowReason::WorkflowMasterLost,
                    ReasonName::WorkflowStalled => WorkflowReason::WorkflowStalled,
                    _ => return None,
                };
                let action = match r.action {
                    None => None,
                    Some(RuleAction::Recover) => Some(Core::Recover),
                    Some(RuleAction::Report) => Some(Core::Report),
                    Some(_) => return None,
                };
                Some(WorkflowRule {
                    reason: Some(reason),
                    project_code: r.project_code,
                    owner_master: r.owner_master,
                    action,
                })
            })
            .collect();
        reaper_core::workflow::WorkflowPolicy {
            master_lost: match self.policy.workflow_master_lost {
                super::choices::WorkflowAction::Report => Core::Report,
                super::choices::WorkflowAction::Recover => Core::Recover,
            },
            grace_period: self.reconcile.workflow_grace_period,
            stall_after: self.reconcile.workflow_stall_after,
            rules,
            unseen_absence: reaper_core::UnseenAbsence::SinceViewValid,
            // The task actions and rules do not depend on the line.
            resume: reaper_core::workflow::Resume {
                targets: reaper_core::workflow::resume_targets(&self.policy(DsLine::V3_2)),
                grace_period: self.reconcile.grace_period,
            },
        }
    }

    /// The ghost policy (SPEC §15): `[policy] ghost_process`, the rules
    /// naming `reason = "ghost_process"` (only those: a rule without a
    /// reason is about task rows), and the timings it shares.
    pub fn ghost_policy(&self, line: DsLine) -> reaper_core::ghost::GhostPolicy {
        use reaper_core::ghost::{GhostAction, GhostRule};
        let rules = self
            .policy
            .rules
            .iter()
            .filter(|r| r.reason == Some(ReasonName::GhostProcess))
            .map(|r| GhostRule {
                task_type: r.task_type.clone(),
                worker_group: r.worker_group.clone(),
                project_code: r.project_code,
                over: r.over.clone(),
                action: match r.action {
                    Some(RuleAction::Kill) => Some(GhostAction::Kill),
                    Some(_) => Some(GhostAction::Report),
                    None => None,
                },
            })
            .collect();
        let r = &self.reconcile;
        reaper_core::ghost::GhostPolicy {
            line,
            action: self.policy.ghost_process,
            rules,
            ghost_after: r.ghost_after,
            clock_skew_tolerance: r.clock_skew_tolerance,
            agent_stale_after: r.agent_stale_after,
            startup_settle: r.startup_settle,
            max_actions_per_sweep: r.max_actions_per_sweep,
            brake_min: self.brake.min_zombies,
            brake_fraction: self.brake.max_zombie_fraction,
        }
    }

    /// The workflow state codes to watch on a line (SPEC §13), and the names
    /// that are not non-terminal states of the line.
    pub fn workflow_states(&self, line: DsLine) -> (Vec<i32>, Vec<String>) {
        match &self.reconcile.workflow_states {
            None => (
                reaper_core::workflow::DEFAULT_WORKFLOW_STATES
                    .into_iter()
                    .filter(|c| line.workflow_non_terminal_states().contains(c))
                    .collect(),
                Vec::new(),
            ),
            Some(names) => {
                let mut codes = Vec::new();
                let mut unknown = Vec::new();
                for n in names {
                    match reaper_core::workflow::workflow_state_code(line, n) {
                        Some(c) if !codes.contains(&c) => codes.push(c),
                        Some(_) => {}
                        None => unknown.push(n.clone()),
                    }
                }
                (codes, unknown)
            }
        }
    }

    /// The state codes to read on a line, and the names it does not have
    /// (warned about once at start).
    pub fn live_states(&self, line: DsLine) -> (Vec<i32>, Vec<String>) {
        match &self.reconcile.states {
            None => (line.default_live_states(), Vec::new()),
            Some(names) => {
                let mut codes = Vec::new();
                let mut unknown = Vec::new();
                for n in names {
                    match line.state_code(n) {
                        Some(c) if !codes.contains(&c) => codes.push(c),
                        Some(_) => {}
                        None => unknown.push(n.clone()),
                    }
                }
                (codes, unknown)
            }
        }
    }

    /// A configured feature this build does not have yet, for the commands
    /// that would use it to refuse (`config check` accepts it: the key is
    /// valid). Every registry of SPEC §14 is supported.
    pub fn unsupported(&self) -> Option<String> {
        None
    }

    /// Problems that span keys, as (key, message).
    pub(super) fn cross_checks(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        // DS's worker writes the result just before its process exits: a
        // ghost needs a wait that covers that, never none at all.
        if self.reconcile.ghost_after < std::time::Duration::from_secs(1) {
            out.push((
                "reconcile.ghost_after".to_string(),
                format!(
                    "{} is too short (at least 1s; default 2m)",
                    humantime::format_duration(self.reconcile.ghost_after)
                ),
            ));
        }
        // DS's JDBC registry has no place for kill orders (SPEC §15): a kill
        // asked for there would never be carried out.
        let jdbc = self.registry.kind == super::choices::RegistryKind::Jdbc;
        let no_orders = "the jdbc registry carries no kill orders; ghosts can only be reported";
        if jdbc && self.policy.ghost_process == reaper_core::ghost::GhostAction::Kill {
            out.push(("policy.ghost_process".to_string(), no_orders.into()));
        }
        for (i, rule) in self.policy.rules.iter().enumerate() {
            let key = |k: &str| format!("policy.rules[{i}].{k}");
            if jdbc
                && rule.reason == Some(ReasonName::GhostProcess)
                && rule.action == Some(RuleAction::Kill)
            {
                out.push((key("action"), no_orders.into()));
            }
            if let Some(why) = rule.action_problem() {
                out.push((key("action"), why));
            }
            if rule.reason == Some(ReasonName::GhostProcess) {
                if rule.workflow.is_some() {
                    out.push((
                        key("workflow"),
                        "a follow-up applies to task actions; ghost_process has none".into(),
                    ));
                }
                if rule.owner_master.is_some() {
                    out.push((
                        key("owner_master"),
                        "ghost_process rules match on task_type, worker_group and project_code"
                            .into(),
                    ));
                }
            }
            if let Some(why) = rule.over_problem() {
                out.push((key("over"), why));
            }
            if rule.workflow.is_some() && rule.reason.is_some_and(ReasonName::is_workflow) {
                out.push((
                    key("workflow"),
                    "a follow-up applies to task actions; workflow findings have none".into(),
                ));
            }
        }
        out
    }
}

impl RuleEntry {
    /// The rule as the planner takes it; None for a rule that can only match
    /// findings the planner does not produce yet.
    pub fn to_core(&self) -> Option<Rule> {
        let reason = match self.reason {
            Some(r) => Some(r.core()?),
            None => None,
        };
        let action = match self.action {
            Some(a) => Some(a.task_action()?),
            None => None,
        };
        Some(Rule {
            reason,
            worker_group: self.worker_group.clone(),
            task_type: self.task_type.clone(),
            project_code: self.project_code,
            owner_master: self.owner_master,
            action,
            workflow: self.workflow,
        })
    }

    /// `over` names ghost kinds (SPEC §15): a rule for any other reason
    /// would never match what it names, and an empty list matches nothing.
    fn over_problem(&self) -> Option<String> {
        let over = self.over.as_ref()?;
        if self.reason != Some(ReasonName::GhostProcess) {
            return Some("over applies to reason = \"ghost_process\" rules only".into());
        }
        over.is_empty()
            .then(|| "an empty over matches no ghost; leave it out to match every kind".into())
    }

    /// Whether the action suits the reason (SPEC §13: `workflow_stalled` is
    /// report-only, `recover` is for `workflow_master_lost` only).
    fn action_problem(&self) -> Option<String> {
        let action = self.action?;
        match (self.reason, action) {
            (Some(ReasonName::WorkflowStalled), RuleAction::Report) => None,
            (Some(ReasonName::WorkflowStalled), _) => {
                Some("workflow_stalled is report-only; the action must be \"report\"".into())
            }
            (Some(ReasonName::WorkflowMasterLost), RuleAction::Report | RuleAction::Recover) => {
                None
            }
            (Some(ReasonName::GhostProcess), RuleAction::Report | RuleAction::Kill) => None,
            (Some(ReasonName::GhostProcess), _) => {
                Some("ghost_process takes \"report\" or \"kill\"".into())
            }
            (Some(ReasonName::WorkflowMasterLost), _) => {
                Some("workflow_master_lost takes \"report\" or \"recover\"".into())
            }
            (_, RuleAction::Recover) => Some(
                "\"recover\" applies to reason = \"workflow_master_lost\" only; \
                 tasks take report, fail, fault-tolerance or kill"
                    .into(),
            ),
            _ => None,
        }
    }
}
