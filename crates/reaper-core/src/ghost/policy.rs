//! `[policy] ghost_process` and its rules: what to do with a ghost.

use super::Over;
use crate::candidate::Candidate;
use crate::line::DsLine;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// `[policy] ghost_process` and a rule's action for `ghost_process`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GhostAction {
    #[default]
    Report,
    Kill,
}

impl GhostAction {
    pub fn as_str(self) -> &'static str {
        match self {
            GhostAction::Report => "report",
            GhostAction::Kill => "kill",
        }
    }
}

impl fmt::Display for GhostAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for GhostAction {
    type Err = crate::policy::BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "report" => Ok(GhostAction::Report),
            "kill" => Ok(GhostAction::Kill),
            _ => Err(crate::policy::BadValue {
                what: "ghost_process",
                got: s.to_string(),
                expected: "report, kill",
            }),
        }
    }
}

/// A `[[policy.rules]]` entry with `reason = "ghost_process"` (or none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GhostRule {
    pub task_type: Option<String>,
    pub worker_group: Option<String>,
    pub project_code: Option<i64>,
    /// The ghost kinds the rule matches; None: every kind.
    #[serde(default)]
    pub over: Option<Vec<Over>>,
    /// None: the `[policy]` default.
    pub action: Option<GhostAction>,
}

impl GhostRule {
    fn names(&self, over: Over) -> bool {
        self.over.as_ref().is_some_and(|o| o.contains(&over))
    }

    fn matches(&self, over: Over, row: Option<&Candidate>) -> bool {
        if self.over.is_some() && !self.names(over) {
            return false;
        }
        if let Some(t) = &self.task_type {
            if !row.is_some_and(|r| r.task_type.trim().eq_ignore_ascii_case(t.trim())) {
                return false;
            }
        }
        if let Some(g) = &self.worker_group {
            let wg = row.and_then(|r| r.worker_group.as_deref());
            if !wg.is_some_and(|wg| wg.trim().eq_ignore_ascii_case(g.trim())) {
                return false;
            }
        }
        if let Some(p) = self.project_code {
            if row.and_then(|r| r.project_code) != Some(p) {
                return false;
            }
        }
        true
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GhostPolicy {
    pub line: DsLine,
    pub action: GhostAction,
    /// First match wins.
    pub rules: Vec<GhostRule>,
    pub ghost_after: Duration,
    pub clock_skew_tolerance: Duration,
    pub agent_stale_after: Duration,
    pub startup_settle: Duration,
    pub max_actions_per_sweep: usize,
    /// `brake.min_zombies` and `brake.max_zombie_fraction`, applied to the
    /// kills one sweep would order against the tasks the fresh agents list.
    pub brake_min: usize,
    pub brake_fraction: f64,
}

impl GhostPolicy {
    pub fn defaults(line: DsLine) -> Self {
        GhostPolicy {
            line,
            action: GhostAction::Report,
            rules: Vec::new(),
            ghost_after: Duration::from_secs(120),
            clock_skew_tolerance: Duration::from_secs(5),
            agent_stale_after: Duration::from_secs(35),
            startup_settle: Duration::from_secs(30),
            max_actions_per_sweep: 50,
            brake_min: 10,
            brake_fraction: 0.5,
        }
    }

    /// The action for a ghost of kind `over` (SPEC §15): the first matching
    /// rule's, else the `[policy]` default — except that a `terminal_state`
    /// ghost (what a finished script left running, often on purpose) is
    /// killed only when the rule that matched it names that kind.
    pub(super) fn decide(&self, over: Over, row: Option<&Candidate>) -> GhostAction {
        let rule = self.rules.iter().find(|r| r.matches(over, row));
        let action = rule.and_then(|r| r.action).unwrap_or(self.action);
        if over == Over::Terminal && !rule.is_some_and(|r| r.names(over)) {
            return GhostAction::Report;
        }
        action
    }
}
