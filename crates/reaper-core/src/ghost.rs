//! Processes that should not be running (SPEC §15): a task process a fresh
//! agent still lists although DS's database says the task instance is over.
//!
//! Pure: the engine reads the listed tasks' rows by id, hands them here with
//! the view and the memory of earlier sweeps, and executes what comes back
//! (kill orders, under the same brake, caps and token bucket as every write).

mod admit;
mod apps;
mod evidence;
mod judging;
mod memory;
mod over;
mod policy;

pub use apps::{plan_ghost_apps, OverTask};
pub use evidence::{Ghost, GhostEvidence};
use judging::Judging;
pub use memory::{check_memory, ordered, GhostMemory, Track};
pub use over::{other_host_counts, over, over_fields, same_machine};
pub use policy::{GhostAction, GhostPolicy, GhostRule};

use crate::agent::AgentSeen;
use crate::budget::Budget;
use crate::candidate::Candidate;
use crate::ids::IdSet;
use crate::view::RegistryView;
use crate::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The reason name of every ghost (and of the rules that match them).
pub const GHOST_PROCESS: &str = "ghost_process";

/// The note of a ghost whose kill order is outstanding (or was issued less
/// than `ghost_after` ago and is not answered yet).
pub const KILL_ORDERED: &str = "kill_ordered";

/// The note of a listed task without a row that this daemon never read
/// (SPEC §15): a lagging replica, a restored backup or another DS's
/// database proves nothing of it. Reported, never killed.
pub const ROW_NEVER_SEEN: &str = "row_never_seen";

/// The note of a kill held because `brake.min_zombies` or more listed tasks
/// have no row at once (SPEC §15): the database, not the cluster, is wrong.
pub const DATABASE_MISMATCH: &str = "database_mismatch";

/// A listed task's row as read by id, in any state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GhostRow {
    pub task: Candidate,
    pub flag: i32,
    pub end_time: Option<Instant>,
    /// For a `flag = 0` row: the `flag = 1` attempt of the same task in the
    /// same workflow instance, when there is one.
    pub newer_attempt: Option<NewerAttempt>,
}

/// What a batched read of listed task ids found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GhostRead {
    pub rows: Vec<GhostRow>,
    /// Ids whose row exists but cannot be decoded: never taken for gone.
    pub undecodable: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewerAttempt {
    pub id: i64,
    pub host: Option<String>,
    pub submit_time: Option<Instant>,
}

/// Why a listed task's row says its process should not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Over {
    /// A terminal state of the line.
    #[serde(rename = "terminal_state")]
    Terminal,
    NeedFaultTolerance,
    /// `flag = 0`: a newer attempt exists.
    #[serde(rename = "flag_0")]
    Superseded,
    /// The row names another host.
    OtherHost,
    /// No row at all.
    NoRow,
}

impl Over {
    pub fn as_str(self) -> &'static str {
        match self {
            Over::Terminal => "terminal_state",
            Over::NeedFaultTolerance => "need_fault_tolerance",
            Over::Superseded => "flag_0",
            Over::OtherHost => "other_host",
            Over::NoRow => "no_row",
        }
    }
}

/// One listed task to judge: the worker whose agent lists it and its row
/// as read after the listing arrived (None: no row).
pub struct Listed<'a> {
    pub worker: &'a str,
    pub task_id: i64,
    pub row: Option<&'a GhostRow>,
}

/// The tasks fresh agents list now, by worker: what the sweep reads by id.
pub fn listed_ids(view: &RegistryView, now: Instant, stale_after: Duration) -> IdSet {
    view.agents
        .values()
        .filter(|a| a.fresh(now, stale_after))
        .filter_map(|a| a.report.as_ref())
        .flat_map(|r| r.tasks.iter().map(|t| t.task_id))
        .collect()
}

/// What [`plan_ghosts`] returns.
pub struct GhostPlan {
    pub ghosts: Vec<Ghost>,
    pub memory: GhostMemory,
}

/// What a sweep read of the listed tasks.
pub struct ListedRead<'a> {
    /// Every id asked: an id not asked is never taken for a vanished row.
    pub read: &'a IdSet,
    /// The rows the read found.
    pub rows: &'a BTreeMap<i64, GhostRow>,
    /// Ids read whose row is live on the one worker that lists them, kept
    /// without the row: no ghost.
    pub live: &'a IdSet,
    /// The order nodes in the registry, by (worker, task id).
    pub outstanding: &'a BTreeSet<(String, i64)>,
}

/// Judges every task a fresh agent lists whose id was read. Orders are
/// admitted through the sweep's budget, after the task and workflow writes.
pub fn plan_ghosts(
    view: &RegistryView,
    listed_read: &ListedRead<'_>,
    memory: &GhostMemory,
    now: Instant,
    policy: &GhostPolicy,
    budget: &mut Budget,
) -> GhostPlan {
    let Some(valid_since) = view.valid_since() else {
        return GhostPlan {
            ghosts: Vec::new(),
            memory: memory.clone(),
        };
    };
    let mut judging = Judging::new(view, listed_read, memory, now, policy);
    let mut agents: Vec<(&String, &AgentSeen)> =
        view.agents.iter().map(|(w, a)| (w, &**a)).collect();
    agents.sort_by(|a, b| a.0.cmp(b.0));
    for (worker, seen) in agents {
        let Some(report) = seen.report.as_ref() else {
            continue;
        };
        if !seen.fresh(now, policy.agent_stale_after) {
            // Not fresh: nothing is judged, and the clocks restart once it
            // is; which rows were read is kept while it lists the task.
            judging.keep_seen(report);
            continue;
        }
        let jvm = view.workers.get(worker).and_then(|n| n.process_id);
        for task in &report.tasks {
            judging.task(worker, seen, jvm, task);
        }
    }
    let (mut ghosts, wanted, counts, kept) = judging.finish();
    admit::admit_kills(
        &mut ghosts,
        &wanted,
        &counts,
        valid_since,
        now,
        policy,
        budget,
    );
    GhostPlan {
        ghosts,
        memory: kept,
    }
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod safety_tests;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
