//! Processes that should not be running (SPEC §15): a task process a fresh
//! agent still lists although DS's database says the task instance is over.
//!
//! Pure: the engine reads the listed tasks' rows by id, hands them here with
//! the view and the memory of earlier sweeps, and executes what comes back
//! (kill orders, under the same brake, caps and token bucket as every write).

mod evidence;
mod policy;

use evidence::{is_own, own_window, Seen};
pub use evidence::{Ghost, GhostEvidence};
pub use policy::{GhostAction, GhostPolicy, GhostRule};

use crate::agent::{AgentProcess, AgentSeen, AgentTask, ReportMark};
use crate::budget::Budget;
use crate::candidate::Candidate;
use crate::host;
use crate::ids::IdSet;
use crate::line::{DsLine, NEED_FAULT_TOLERANCE};
use crate::plan::{Blocked, Disposition};
use crate::view::{NodeKind, RegistryView};
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// The reason name of every ghost (and of the rules that match them).
pub const GHOST_PROCESS: &str = "ghost_process";

/// The note of a ghost whose kill order is outstanding (or was issued less
/// than `ghost_after` ago and is not answered yet).
pub const KILL_ORDERED: &str = "kill_ordered";

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

/// What the daemon remembers of one listed task between sweeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Track {
    /// When a sweep first read the row as over (the daemon's clock).
    pub over_since: Instant,
    /// Fresh reports that arrived after `over_since` and listed the task.
    pub reports: u32,
    /// Arrival of the latest report counted.
    pub counted_to: Instant,
    /// When the latest kill order for it was written.
    pub ordered_at: Option<Instant>,
}

/// The memory of every listed task, by (worker, task id).
pub type GhostMemory = BTreeMap<(String, i64), Track>;

/// Why a listed task's row says its process should not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// Whether the row (or its absence) says the task is over for `worker`'s
/// process, and how. A live row on this worker — or one with no host yet —
/// is not over: its process is the task itself.
pub fn over(view: &RegistryView, worker: &str, row: Option<&GhostRow>) -> Option<Over> {
    let Some(r) = row else {
        return Some(Over::NoRow);
    };
    over_fields(view, worker, r.task.state, r.flag, r.task.host.as_deref())
}

/// [`over`] of a row given by the fields it looks at: the sweep asks it of
/// every listed task among its candidates, without a copy of each.
pub fn over_fields(
    view: &RegistryView,
    worker: &str,
    state: i32,
    flag: i32,
    row_host: Option<&str>,
) -> Option<Over> {
    if DsLine::is_finished_task_state(state) {
        return Some(Over::Terminal);
    }
    if state == NEED_FAULT_TOLERANCE {
        return Some(Over::NeedFaultTolerance);
    }
    if flag == 0 {
        return Some(Over::Superseded);
    }
    // A live row is another host's only when its host is a worker the view
    // knows (live or lost) and not this one: a host the view cannot place —
    // an address whose alias was forgotten — might be this worker's own, and
    // a live task's process is never a ghost.
    let h = row_host.filter(|h| !host::is_empty(Some(h)))?;
    let me = host::normalize(worker);
    let named = view.resolve(NodeKind::Worker, h);
    if named == me {
        return None;
    }
    let own_address = view
        .workers
        .get(me.as_ref())
        .and_then(|n| n.address.as_deref());
    let known =
        view.live(NodeKind::Worker, h).is_some() || view.lost_at(NodeKind::Worker, h).is_some();
    if known && named != me && own_address != Some(host::normalize(h).as_ref()) {
        return Some(Over::OtherHost);
    }
    None
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
    let mut judging = Judging {
        view,
        listed_read,
        memory,
        now,
        policy,
        kept: GhostMemory::new(),
        ghosts: Vec::new(),
        wanted: Vec::new(),
        listed: 0,
    };
    let mut agents: Vec<(&String, &AgentSeen)> =
        view.agents.iter().map(|(w, a)| (w, &**a)).collect();
    agents.sort_by(|a, b| a.0.cmp(b.0));
    for (worker, seen) in agents {
        if !seen.fresh(now, policy.agent_stale_after) {
            // Not fresh: nothing is judged, and the clocks restart once it is.
            continue;
        }
        let Some(report) = seen.report.as_ref() else {
            continue;
        };
        let jvm = view.workers.get(worker).and_then(|n| n.process_id);
        for task in &report.tasks {
            judging.task(worker, seen, jvm, task);
        }
    }
    let Judging {
        mut ghosts,
        wanted,
        listed,
        kept,
        ..
    } = judging;
    admit_kills(
        &mut ghosts,
        &wanted,
        listed,
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

/// One sweep's judging of the listed tasks, one by one.
struct Judging<'a> {
    view: &'a RegistryView,
    listed_read: &'a ListedRead<'a>,
    memory: &'a GhostMemory,
    now: Instant,
    policy: &'a GhostPolicy,
    /// The memory to keep for the next sweep.
    kept: GhostMemory,
    ghosts: Vec<Ghost>,
    /// Kills wanted this sweep (indices into `ghosts`), admitted after the
    /// count below; and the listed tasks they are a part of.
    wanted: Vec<usize>,
    listed: usize,
}

impl Judging<'_> {
    /// Judges one task `worker`'s agent lists: a ghost, or nothing.
    fn task(&mut self, worker: &String, seen: &AgentSeen, jvm: Option<i64>, task: &AgentTask) {
        let ListedRead {
            read,
            rows,
            live,
            outstanding,
        } = *self.listed_read;
        let (memory, now, policy) = (self.memory, self.now, self.policy);
        if !read.contains(&task.task_id) {
            // Listed since the read: judged next sweep, its clock kept.
            let key = (worker.clone(), task.task_id);
            if let Some(t) = memory.get(&key) {
                self.kept.insert(key, t.clone());
            }
            return;
        }
        self.listed += 1;
        if live.contains(&task.task_id) {
            return;
        }
        let row = rows.get(&task.task_id);
        // most listed tasks run: decided without allocating
        let Some(over) = over(self.view, worker, row) else {
            return;
        };
        let key = (worker.clone(), task.task_id);
        let track = counted(memory.get(&key), &seen.history, task.task_id, now);
        self.kept.insert(key.clone(), track.clone());
        if now - track.over_since < delta(policy.ghost_after) || track.reports < 2 {
            return;
        }
        let window = own_window(row, track.over_since, policy.clock_skew_tolerance);
        let (own, excluded): (Vec<&AgentProcess>, Vec<&AgentProcess>) =
            task.processes.iter().partition(|p| is_own(p, window, jvm));
        if own.is_empty() {
            return;
        }
        let judged = Seen {
            worker,
            task,
            row,
            over,
            track: &track,
            own: &own,
            excluded: &excluded,
        };
        let ordered = outstanding.contains(&key)
            || track
                .ordered_at
                .is_some_and(|at| now - at < delta(policy.ghost_after));
        let ghost = judged.ghost(policy, ordered);
        if ghost.disposition == Disposition::Act {
            self.wanted.push(self.ghosts.len());
        }
        self.ghosts.push(ghost);
    }
}

/// A listed task's track, its reports counted on: each fresh report since
/// the last one counted that still lists the task is one more.
fn counted(
    old: Option<&Track>,
    history: &VecDeque<ReportMark>,
    task_id: i64,
    now: Instant,
) -> Track {
    let mut track = old.cloned().unwrap_or(Track {
        over_since: now,
        reports: 0,
        counted_to: now,
        ordered_at: None,
    });
    for mark in history {
        if mark.received_at > track.counted_to && mark.tasks.binary_search(&task_id).is_ok() {
            track.reports += 1;
            track.counted_to = mark.received_at;
        }
    }
    track
}

/// Admits the wanted kills through the budget, in order — unless so many of
/// the listed tasks would be killed at once that the daemon's reading is
/// more likely wrong than the cluster (pointed at the wrong or a restored
/// database, every listed row "gone"): then, as the brake does for zombies
/// (SPEC §4.4, the same `min_zombies` and `max_zombie_fraction`), none is.
fn admit_kills(
    ghosts: &mut [Ghost],
    wanted: &[usize],
    listed: usize,
    valid_since: Instant,
    now: Instant,
    policy: &GhostPolicy,
    budget: &mut Budget,
) {
    let n = wanted.len();
    let mass = n > 0
        && n >= policy.brake_min
        && (n as f64) >= policy.brake_fraction * (listed.max(1) as f64);
    for &i in wanted {
        let disposition = if let Some(b) = budget.blocked(valid_since, now) {
            // a hold, the brake, the settle: said as the budget says them
            Disposition::Blocked(b)
        } else if mass {
            Disposition::Blocked(Blocked::Brake(format!(
                "{n} of {listed} listed tasks would be killed at once \
                 (brake.min_zombies {}, brake.max_zombie_fraction {})",
                policy.brake_min, policy.brake_fraction
            )))
        } else {
            budget.admit(valid_since, now)
        };
        let g = &mut ghosts[i];
        // a hold (standby, check) is said once by the status, not per ghost
        if let Disposition::Blocked(b) = &disposition {
            if !matches!(b, Blocked::Hold(_)) {
                g.note = Some(b.describe());
            }
        }
        g.disposition = disposition;
    }
}

/// `check`'s memory, which has seen no earlier sweep: a task counts as over
/// from its row's end (else its newer attempt's submit time) plus the clock
/// skew tolerance, and the agent's kept reports since then are counted. A
/// row with neither time (NEED_FAULT_TOLERANCE, gone, another host) cannot
/// be judged in one look and is left to the daemon.
pub fn check_memory(
    view: &RegistryView,
    rows: &BTreeMap<i64, GhostRow>,
    now: Instant,
    policy: &GhostPolicy,
) -> GhostMemory {
    let mut memory = GhostMemory::new();
    for (worker, seen) in &view.agents {
        if !seen.fresh(now, policy.agent_stale_after) {
            continue;
        }
        for task in seen.report.iter().flat_map(|r| &r.tasks) {
            let Some(r) = rows.get(&task.task_id) else {
                continue;
            };
            if over(view, worker, Some(r)).is_none() {
                continue;
            }
            let since = r
                .end_time
                .or_else(|| r.newer_attempt.as_ref().and_then(|n| n.submit_time));
            if let Some(since) = since {
                let at = (since + delta(policy.clock_skew_tolerance)).min(now);
                memory.insert(
                    (worker.clone(), task.task_id),
                    Track {
                        over_since: at,
                        reports: 0,
                        counted_to: at,
                        ordered_at: None,
                    },
                );
            }
        }
    }
    memory
}

/// Marks an order as written at `at`, so that it is re-issued at most once
/// per `ghost_after` while no answer comes.
pub fn ordered(memory: &mut GhostMemory, worker: &str, task_id: i64, at: Instant) {
    if let Some(t) = memory.get_mut(&(worker.to_string(), task_id)) {
        t.ordered_at = Some(at);
    }
}

#[cfg(test)]
mod tests;
