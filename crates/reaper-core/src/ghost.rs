//! Processes that should not be running (SPEC §15): a task process a fresh
//! agent still lists although DS's database says the task instance is over.
//!
//! Pure: the engine reads the listed tasks' rows by id, hands them here with
//! the view and the memory of earlier sweeps, and executes what comes back
//! (kill orders, under the same brake, caps and token bucket as every write).

use crate::agent::{AgentProcess, AgentSeen, AgentTask, ReportMark};
use crate::budget::Budget;
use crate::candidate::Candidate;
use crate::host;
use crate::line::{DsLine, NEED_FAULT_TOLERANCE};
use crate::order::OrderPid;
use crate::plan::{Blocked, Disposition};
use crate::view::{NodeKind, RegistryView};
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::fmt;
use std::str::FromStr;
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
    /// None: the `[policy]` default.
    pub action: Option<GhostAction>,
}

impl GhostRule {
    fn matches(&self, row: Option<&Candidate>) -> bool {
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

    fn decide(&self, row: Option<&Candidate>) -> GhostAction {
        self.rules
            .iter()
            .find(|r| r.matches(row))
            .and_then(|r| r.action)
            .unwrap_or(self.action)
    }
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
    Terminal,
    NeedFaultTolerance,
    /// `flag = 0`: a newer attempt exists.
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
    if DsLine::is_finished_task_state(r.task.state) {
        return Some(Over::Terminal);
    }
    if r.task.state == NEED_FAULT_TOLERANCE {
        return Some(Over::NeedFaultTolerance);
    }
    if r.flag == 0 {
        return Some(Over::Superseded);
    }
    // A live row is another host's only when its host is a worker the view
    // knows (live or lost) and not this one: a host the view cannot place —
    // an address whose alias was forgotten — might be this worker's own, and
    // a live task's process is never a ghost.
    let h = r
        .task
        .host
        .as_deref()
        .filter(|h| !host::is_empty(Some(h)))?;
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GhostEvidence {
    /// Which rule of SPEC §15 the row broke.
    pub over: Over,
    pub row_state: Option<String>,
    pub row_flag: Option<i32>,
    pub row_host: Option<String>,
    pub row_start_time: Option<Instant>,
    pub row_end_time: Option<Instant>,
    pub pids: Vec<i32>,
    pub started_at: Option<Instant>,
    /// When the daemon first read the row as over.
    pub over_since: Instant,
    /// Fresh reports since then that still listed the task.
    pub reports_since: u32,
    pub newer_attempt_id: Option<i64>,
    pub newer_attempt_host: Option<String>,
    /// Processes listed under the task that are not its own (a controlling
    /// terminal, started outside the task's life, the worker JVM).
    pub excluded_pids: Vec<i32>,
}

/// One ghost: a listed task over for `ghost_after` with processes of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ghost {
    pub task_id: i64,
    pub task_name: Option<String>,
    pub task_type: Option<String>,
    pub worker_group: Option<String>,
    pub workflow_instance_id: Option<i64>,
    /// The agent's worker (its registered node name).
    pub worker: String,
    /// The task's own processes, as the order names them.
    pub processes: Vec<OrderPid>,
    pub started_at: Option<Instant>,
    pub row_state: Option<String>,
    pub row_flag: Option<i32>,
    pub row_host: Option<String>,
    pub newer_attempt: Option<NewerAttempt>,
    pub evidence: GhostEvidence,
    pub action: GhostAction,
    pub note: Option<String>,
    pub disposition: Disposition,
    /// The task's YARN applications with the RM's answers (SPEC §17),
    /// filled in by the daemon: the plan knows nothing of the RM.
    #[serde(default)]
    pub remote_apps: Vec<crate::remote::RemoteApp>,
}

impl Ghost {
    pub fn pids(&self) -> Vec<i32> {
        self.processes.iter().map(|p| p.pid).collect()
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
pub fn listed_ids(view: &RegistryView, now: Instant, stale_after: Duration) -> BTreeSet<i64> {
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
    pub read: &'a BTreeSet<i64>,
    /// The rows the read found.
    pub rows: &'a BTreeMap<i64, GhostRow>,
    /// Ids read whose row is live on the one worker that lists them, kept
    /// without the row: no ghost.
    pub live: &'a HashSet<i64>,
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
    let ListedRead {
        read,
        rows,
        live,
        outstanding,
    } = *listed_read;
    let mut kept = GhostMemory::new();
    let Some(valid_since) = view.valid_since() else {
        return GhostPlan {
            ghosts: Vec::new(),
            memory: memory.clone(),
        };
    };
    let mut ghosts = Vec::new();
    // Kills wanted this sweep (indices into `ghosts`), admitted after the
    // count below; and the listed tasks they are a part of.
    let mut wanted = Vec::new();
    let mut listed = 0usize;
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
            if !read.contains(&task.task_id) {
                // Listed since the read: judged next sweep, its clock kept.
                let key = (worker.clone(), task.task_id);
                if let Some(t) = memory.get(&key) {
                    kept.insert(key, t.clone());
                }
                continue;
            }
            listed += 1;
            if live.contains(&task.task_id) {
                continue;
            }
            let row = rows.get(&task.task_id);
            // most listed tasks run: decided without allocating
            let Some(over) = over(view, worker, row) else {
                continue;
            };
            let key = (worker.clone(), task.task_id);
            let track = counted(memory.get(&key), &seen.history, task.task_id, now);
            kept.insert(key.clone(), track.clone());
            if now - track.over_since < delta(policy.ghost_after) || track.reports < 2 {
                continue;
            }
            let window = own_window(row, track.over_since, policy.clock_skew_tolerance);
            let (own, excluded): (Vec<&AgentProcess>, Vec<&AgentProcess>) =
                task.processes.iter().partition(|p| is_own(p, window, jvm));
            if own.is_empty() {
                continue;
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
                wanted.push(ghosts.len());
            }
            ghosts.push(ghost);
        }
    }
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

/// One listed task judged a ghost: what [`plan_ghosts`] saw of it.
struct Seen<'a> {
    worker: &'a String,
    task: &'a AgentTask,
    row: Option<&'a GhostRow>,
    over: Over,
    track: &'a Track,
    own: &'a [&'a AgentProcess],
    excluded: &'a [&'a AgentProcess],
}

impl Seen<'_> {
    /// The ghost, with its evidence and the policy's action; a kill while
    /// an order is outstanding (`ordered`) waits for its answer, reported.
    fn ghost(&self, policy: &GhostPolicy, ordered: bool) -> Ghost {
        let (row, own) = (self.row, self.own);
        let started_at = own
            .iter()
            .map(|p| p.started_at)
            .min()
            .and_then(chrono::DateTime::from_timestamp_millis);
        let processes: Vec<OrderPid> = own
            .iter()
            .map(|p| OrderPid {
                pid: p.pid,
                start_time: p.started_at,
            })
            .collect();
        let cand = row.map(|r| &r.task);
        let row_state = row.map(|r| {
            policy
                .line
                .state_name(r.task.state)
                .map(str::to_string)
                .unwrap_or_else(|| format!("code {}", r.task.state))
        });
        let newer = row.and_then(|r| r.newer_attempt.clone());
        let evidence = GhostEvidence {
            over: self.over,
            row_state: row_state.clone(),
            row_flag: row.map(|r| r.flag),
            row_host: cand.and_then(|c| c.host.as_deref().map(str::to_string)),
            row_start_time: cand.and_then(|c| c.start_time),
            row_end_time: row.and_then(|r| r.end_time),
            pids: processes.iter().map(|p| p.pid).collect(),
            started_at,
            over_since: self.track.over_since,
            reports_since: self.track.reports,
            newer_attempt_id: newer.as_ref().map(|n| n.id),
            newer_attempt_host: newer.as_ref().and_then(|n| n.host.clone()),
            excluded_pids: self.excluded.iter().map(|p| p.pid).collect(),
        };
        let action = policy.decide(cand);
        let (disposition, note) = match action {
            GhostAction::Report => (Disposition::Report, None),
            GhostAction::Kill if ordered => (Disposition::Report, Some(KILL_ORDERED.to_string())),
            GhostAction::Kill => (Disposition::Act, None),
        };
        Ghost {
            task_id: self.task.task_id,
            task_name: cand.map(|c| c.name.clone()),
            task_type: cand.map(|c| c.task_type.to_string()),
            worker_group: cand.and_then(|c| c.worker_group.as_deref().map(str::to_string)),
            workflow_instance_id: cand
                .and_then(|c| c.workflow_instance_id)
                .or(Some(self.task.workflow_instance_id)),
            worker: self.worker.clone(),
            processes,
            started_at,
            row_state,
            row_flag: row.map(|r| r.flag),
            row_host: cand.and_then(|c| c.host.as_deref().map(str::to_string)),
            newer_attempt: newer,
            evidence,
            action,
            note,
            disposition,
            remote_apps: Vec::new(),
        }
    }
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

/// The start-time window of the task's own processes (epoch ms, inclusive):
/// from the row's start (else submit) time, to its end — for a row without
/// one, the newer attempt's submit time, else when the daemon first saw the
/// row over — each widened by the clock skew tolerance.
fn own_window(row: Option<&GhostRow>, over_since: Instant, skew: Duration) -> (Option<i64>, i64) {
    let skew = delta(skew);
    let from = row
        .and_then(|r| r.task.start_time.or(r.task.submit_time))
        .map(|t| (t - skew).timestamp_millis());
    let to = row
        .and_then(|r| {
            r.end_time
                .or_else(|| r.newer_attempt.as_ref().and_then(|n| n.submit_time))
        })
        .unwrap_or(over_since);
    (from, (to + skew).timestamp_millis())
}

fn is_own(p: &AgentProcess, (from, to): (Option<i64>, i64), jvm: Option<i64>) -> bool {
    !p.tty
        && jvm != Some(i64::from(p.pid))
        && from.is_none_or(|f| p.started_at >= f)
        && p.started_at <= to
}

#[cfg(test)]
mod tests;
