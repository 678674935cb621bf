//! Policy (SPEC §5): the action per reason, the workflow follow-up, and the
//! `[[policy.rules]]` that override them (first match wins).

use crate::brake::BrakeConfig;
use crate::line::DsLine;
use crate::reason::Reason;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Report,
    Fail,
    FaultTolerance,
    Kill,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Report => "report",
            Action::Fail => "fail",
            Action::FaultTolerance => "fault-tolerance",
            Action::Kill => "kill",
        }
    }

    /// The task state code the action writes; None for `report`.
    pub fn target_state(self) -> Option<i32> {
        match self {
            Action::Report => None,
            Action::Fail => Some(crate::line::FAILURE),
            Action::FaultTolerance => Some(crate::line::NEED_FAULT_TOLERANCE),
            Action::Kill => Some(crate::line::KILL),
        }
    }

    pub fn writes(self) -> bool {
        self != Action::Report
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {got:?} is not one of {expected}")]
pub struct BadValue {
    pub what: &'static str,
    pub got: String,
    pub expected: &'static str,
}

impl FromStr for Action {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "report" => Ok(Action::Report),
            "fail" => Ok(Action::Fail),
            "fault-tolerance" => Ok(Action::FaultTolerance),
            "kill" => Ok(Action::Kill),
            _ => Err(BadValue {
                what: "action",
                got: s.to_string(),
                expected: "report, fail, fault-tolerance, kill",
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FollowUp {
    None,
    Fail,
    Recover,
}

impl FollowUp {
    pub fn as_str(self) -> &'static str {
        match self {
            FollowUp::None => "none",
            FollowUp::Fail => "fail",
            FollowUp::Recover => "recover",
        }
    }
}

impl fmt::Display for FollowUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FollowUp {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "none" => Ok(FollowUp::None),
            "fail" => Ok(FollowUp::Fail),
            "recover" => Ok(FollowUp::Recover),
            _ => Err(BadValue {
                what: "workflow",
                got: s.to_string(),
                expected: "none, fail, recover",
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerMaster {
    Alive,
    Lost,
}

impl FromStr for OwnerMaster {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "alive" => Ok(OwnerMaster::Alive),
            "lost" => Ok(OwnerMaster::Lost),
            _ => Err(BadValue {
                what: "owner_master",
                got: s.to_string(),
                expected: "alive, lost",
            }),
        }
    }
}

/// One `[[policy.rules]]` entry; a field left out matches anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub reason: Option<Reason>,
    pub worker_group: Option<String>,
    pub task_type: Option<String>,
    pub project_code: Option<i64>,
    pub owner_master: Option<OwnerMaster>,
    pub action: Option<Action>,
    pub workflow: Option<FollowUp>,
}

/// How to treat a task host that is absent and was never seen live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnseenAbsence {
    /// The daemon: absent since the view became valid (grace applies).
    SinceViewValid,
    /// `check`: lost for an unknown time; counts as lost at once.
    Unknown,
}

/// Everything the planner needs besides the view and the rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub line: DsLine,
    pub worker_lost: Action,
    pub worker_restarted: Action,
    pub heartbeat_stale: Action,
    pub master_lost: Action,
    pub no_host: Action,
    pub process_gone: Action,
    pub workflow: FollowUp,
    pub rules: Vec<Rule>,
    pub grace_period: Duration,
    pub heartbeat_stale_after: Duration,
    pub no_host_after: Duration,
    pub clock_skew_tolerance: Duration,
    pub startup_settle: Duration,
    pub max_actions_per_sweep: usize,
    pub rate_per_minute: u32,
    pub brake: BrakeConfig,
    pub unseen_absence: UnseenAbsence,
    /// SPEC §12: how long a fresh agent must lack a task's process.
    pub process_gone_after: Duration,
    /// An agent whose last report is older is not fresh.
    pub agent_stale_after: Duration,
    /// Never act for a lost, restarted or stale worker while a fresh agent
    /// lists the task's process.
    pub hold_while_process_alive: bool,
    /// Task types with a process of their own (upper case); None: the
    /// line's command-type tasks.
    pub process_task_types: Option<Vec<String>>,
}

impl Policy {
    /// The SPEC §6 defaults for a line: report everything.
    pub fn defaults(line: DsLine) -> Self {
        Policy {
            line,
            worker_lost: Action::Report,
            worker_restarted: Action::Report,
            heartbeat_stale: Action::Report,
            master_lost: Action::Report,
            no_host: Action::Report,
            process_gone: Action::Report,
            workflow: FollowUp::None,
            rules: Vec::new(),
            grace_period: Duration::from_secs(60),
            heartbeat_stale_after: Duration::from_secs(120),
            no_host_after: Duration::from_secs(600),
            clock_skew_tolerance: Duration::from_secs(5),
            startup_settle: Duration::from_secs(30),
            max_actions_per_sweep: 50,
            rate_per_minute: 120,
            brake: BrakeConfig::default(),
            unseen_absence: UnseenAbsence::SinceViewValid,
            process_gone_after: Duration::from_secs(60),
            agent_stale_after: Duration::from_secs(35),
            hold_while_process_alive: true,
            process_task_types: None,
        }
    }

    pub fn default_action(&self, reason: Reason) -> Action {
        match reason {
            Reason::WorkerLost => self.worker_lost,
            Reason::WorkerRestarted => self.worker_restarted,
            Reason::HeartbeatStale => self.heartbeat_stale,
            Reason::MasterLost => self.master_lost,
            Reason::NoHost => self.no_host,
            Reason::ProcessGone => self.process_gone,
        }
    }

    /// Whether a task type runs a process of its own on the worker host.
    pub fn has_process(&self, task_type: &str) -> bool {
        let t = task_type.trim();
        // 1.2/1.3 workers poll YARN after the submitting process exits: the
        // task stays RUNNING with no process while its application runs.
        if matches!(self.line, crate::DsLine::V1_2 | crate::DsLine::V1_3)
            && ["SPARK", "FLINK", "MR"]
                .iter()
                .any(|y| y.eq_ignore_ascii_case(t))
        {
            return false;
        }
        match &self.process_task_types {
            Some(list) => list.iter().any(|x| x.trim().eq_ignore_ascii_case(t)),
            None => crate::line::COMMAND_TASK_TYPES
                .iter()
                .any(|x| x.eq_ignore_ascii_case(t)),
        }
    }

    pub fn set_default_action(&mut self, reason: Reason, action: Action) {
        match reason {
            Reason::WorkerLost => self.worker_lost = action,
            Reason::WorkerRestarted => self.worker_restarted = action,
            Reason::HeartbeatStale => self.heartbeat_stale = action,
            Reason::MasterLost => self.master_lost = action,
            Reason::NoHost => self.no_host = action,
            Reason::ProcessGone => self.process_gone = action,
        }
    }

    /// The action and follow-up for a zombie: the first matching rule, with
    /// the `[policy]` defaults for whatever the rule leaves out.
    pub fn decide(&self, facts: &RuleFacts<'_>) -> (Action, FollowUp) {
        let rule = self.rules.iter().find(|r| r.matches(facts));
        let action = rule
            .and_then(|r| r.action)
            .unwrap_or_else(|| self.default_action(facts.reason));
        let workflow = rule.and_then(|r| r.workflow).unwrap_or(self.workflow);
        (action, workflow)
    }
}

/// What a rule can match on.
#[derive(Debug, Clone, Copy)]
pub struct RuleFacts<'a> {
    pub reason: Reason,
    pub worker_group: Option<&'a str>,
    pub task_type: &'a str,
    pub project_code: Option<i64>,
    pub owner_master_alive: bool,
}

impl Rule {
    pub fn matches(&self, f: &RuleFacts<'_>) -> bool {
        if self.reason.is_some_and(|r| r != f.reason) {
            return false;
        }
        if let Some(g) = &self.worker_group {
            // DS lower-cases group node names; compare the same way.
            match f.worker_group {
                Some(wg) if wg.trim().eq_ignore_ascii_case(g.trim()) => {}
                _ => return false,
            }
        }
        if let Some(t) = &self.task_type {
            if !t.trim().eq_ignore_ascii_case(f.task_type.trim()) {
                return false;
            }
        }
        if let Some(p) = self.project_code {
            if f.project_code != Some(p) {
                return false;
            }
        }
        if let Some(o) = self.owner_master {
            let alive = o == OwnerMaster::Alive;
            if alive != f.owner_master_alive {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(reason: Reason) -> RuleFacts<'static> {
        RuleFacts {
            reason,
            worker_group: Some("default"),
            task_type: "SHELL",
            project_code: Some(7),
            owner_master_alive: false,
        }
    }

    #[test]
    fn defaults_report_everything() {
        let p = Policy::defaults(DsLine::V3_2);
        for r in Reason::ALL {
            assert_eq!(p.decide(&facts(r)), (Action::Report, FollowUp::None));
        }
    }

    #[test]
    fn first_matching_rule_wins_and_fills_from_defaults() {
        let mut p = Policy::defaults(DsLine::V3_2);
        p.worker_lost = Action::Fail;
        p.workflow = FollowUp::Fail;
        p.rules = vec![
            Rule {
                worker_group: Some("streaming".into()),
                action: Some(Action::Report),
                ..Rule::default()
            },
            Rule {
                reason: Some(Reason::WorkerLost),
                task_type: Some("shell".into()),
                workflow: Some(FollowUp::Recover),
                ..Rule::default()
            },
            Rule {
                reason: Some(Reason::WorkerLost),
                action: Some(Action::Kill),
                workflow: Some(FollowUp::None),
                ..Rule::default()
            },
        ];
        // second rule: action from [policy] (fail), workflow from the rule
        assert_eq!(
            p.decide(&facts(Reason::WorkerLost)),
            (Action::Fail, FollowUp::Recover)
        );
        // first rule shadows the others
        let mut f = facts(Reason::WorkerLost);
        f.worker_group = Some("Streaming");
        assert_eq!(p.decide(&f), (Action::Report, FollowUp::Fail));
        // third rule for another task type
        let mut f = facts(Reason::WorkerLost);
        f.task_type = "SPARK";
        assert_eq!(p.decide(&f), (Action::Kill, FollowUp::None));
        // no rule for this reason: defaults
        assert_eq!(
            p.decide(&facts(Reason::NoHost)),
            (Action::Report, FollowUp::Fail)
        );
    }

    #[test]
    fn rule_fields_match_exactly() {
        let r = Rule {
            project_code: Some(7),
            owner_master: Some(OwnerMaster::Lost),
            ..Rule::default()
        };
        assert!(r.matches(&facts(Reason::NoHost)));
        let mut f = facts(Reason::NoHost);
        f.owner_master_alive = true;
        assert!(!r.matches(&f));
        let mut f = facts(Reason::NoHost);
        f.project_code = None;
        assert!(!r.matches(&f));
        let g = Rule {
            worker_group: Some("gpu".into()),
            ..Rule::default()
        };
        let mut f = facts(Reason::NoHost);
        f.worker_group = None;
        assert!(!g.matches(&f));
    }

    #[test]
    fn parse_names() {
        assert_eq!(
            "fault-tolerance".parse::<Action>().unwrap(),
            Action::FaultTolerance
        );
        assert!("fault_tolerance".parse::<Action>().is_err());
        assert_eq!("recover".parse::<FollowUp>().unwrap(), FollowUp::Recover);
        assert_eq!("lost".parse::<OwnerMaster>().unwrap(), OwnerMaster::Lost);
        assert_eq!(Action::Kill.target_state(), Some(9));
        assert_eq!(Action::Report.target_state(), None);
    }
}
