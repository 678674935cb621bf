//! The soak's oracle: the simulator's ground truth and every recorded change
//! in, wrong writes and misses out. Pure (no I/O), so that a seed's recorded
//! history can be replayed as a regression test.
//!
//! Times are seconds since the epoch (one clock: the simulator, the database
//! server and ds-reaper run on one host).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub type Ts = f64;

/// How much the simulator's sampling of leadership may lag (it polls the
/// election's nodes): a write within this of an observed leadership counts
/// as the leader's.
pub const LEADER_SLACK: f64 = 0.5;

/// The window kind of a burst of listed tasks without a row: ds-reaper
/// holds every kill meanwhile (SPEC §15 `database_mismatch`).
pub const DATABASE_MISMATCH: &str = "database_mismatch";

/// Who changed a row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Writer {
    /// The simulated DolphinScheduler.
    Ds,
    /// A ds-reaper replica (its label, e.g. `a`).
    Replica(String),
    /// A connection the simulator cannot attribute (counted as ds-reaper's).
    Unknown(i64),
}

/// Why a task's process is dead (the simulator's truth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Death {
    /// Its worker crashed (the process died with it).
    WorkerCrash,
    /// Its worker restarted (a new JVM; the old one's processes are gone).
    WorkerRestart,
    /// Its worker hung (heartbeat frozen beyond `heartbeat_stale_after`):
    /// nothing of it can finish.
    WorkerHung,
    /// The process died on a live worker (OOM killer, `kill -9`).
    ProcessDeath,
    /// The process ended while its worker was down, so nobody reported it.
    EndedUnreported,
    /// The process died and DS's own late result races ds-reaper's write.
    DsRace,
}

impl Death {
    /// How long after the death ds-reaper may take, at most, to reap the
    /// task without faults in the way: the rule's own wait plus a margin
    /// for sweeps, scans and a loaded machine.
    pub fn bound(self, t: &Timing) -> f64 {
        let wait = match self {
            Death::WorkerCrash => t.grace,
            Death::WorkerRestart => 0.0,
            Death::WorkerHung => t.heartbeat_stale,
            Death::ProcessDeath | Death::DsRace => t.process_gone,
            Death::EndedUnreported => t.grace.max(t.process_gone),
        };
        wait + t.margin
    }

    pub fn name(self) -> &'static str {
        match self {
            Death::WorkerCrash => "worker_crash",
            Death::WorkerRestart => "worker_restart",
            Death::WorkerHung => "worker_hung",
            Death::ProcessDeath => "process_death",
            Death::EndedUnreported => "ended_unreported",
            Death::DsRace => "ds_race",
        }
    }
}

/// The daemon's timings the bounds are made of (seconds).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timing {
    pub grace: f64,
    pub heartbeat_stale: f64,
    pub process_gone: f64,
    pub ghost_after: f64,
    pub clock_skew: f64,
    pub margin: f64,
    /// How long after a blocking fault ends ds-reaper may still be catching
    /// up (view rebuilt, `startup_settle`, absence clocks restarted).
    pub recovery: f64,
    /// `reconcile.agent_stale_after`: how long an agent's listing holds a task.
    #[serde(default)]
    pub agent_stale: f64,
}

/// One task instance row the simulator created, and what happened to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskTruth {
    pub id: i64,
    pub wf: i64,
    pub host: String,
    /// Whether its worker runs a `ds-reaper agent` (a real process) or not.
    pub agent: bool,
    pub submitted: Ts,
    /// When and why its process died (None: it lived until DS finished it).
    pub dead: Option<(Ts, Death)>,
    /// When DS wrote its result (a write that changed the row).
    pub ds_finished: Option<Ts>,
    /// When DS superseded the row with a newer attempt (`flag = 0`).
    pub superseded: Option<Ts>,
    /// DS finished it but left its process running (a ghost) from then.
    pub ghost_from: Option<Ts>,
    /// The worker restarted within `clock_skew_tolerance` of its submit time
    /// (SPEC §3 then cannot tell the restart from the dispatch).
    pub restart_near_submit: bool,
    /// What became of its row in ds-reaper's database.
    #[serde(default)]
    pub row: RowFate,
    /// The fault that made this task (or its row's fate), e.g.
    /// `shared_host(drain)`: ds-reaper's kills are counted by it.
    #[serde(default)]
    pub fault: Option<String>,
}

/// What became of a task's row in ds-reaper's database (SPEC §15 `no_row`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub enum RowFate {
    /// It is there (DS's own changes aside).
    #[default]
    Kept,
    /// There never was one: a process another DS installation started (its
    /// row in another database), or one under a task id without a row.
    /// ds-reaper never read it (`row_never_seen`): it must never kill it.
    Never,
    /// Deleted at this time (a user deleted the workflow instance) while
    /// its process ran on: a kill after that is right.
    Deleted(Ts),
}

/// A row change recorded by the database's triggers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RowChange {
    pub ts: Ts,
    pub writer: Writer,
    /// `task` or `workflow`.
    pub table: String,
    pub id: i64,
    pub old_state: i32,
    pub new_state: i32,
    pub old_flag: i32,
    pub new_flag: i32,
    pub old_host: Option<String>,
    pub new_host: Option<String>,
}

/// A `t_ds_command` insert recorded by the triggers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommandInsert {
    pub ts: Ts,
    pub writer: Writer,
    pub wf: i64,
    pub command_type: i32,
}

/// A task process that died while the simulator had not ended it (killed by
/// an agent on the daemon's order).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExternalDeath {
    pub task: i64,
    pub ts: Ts,
}

/// A stretch of time in which a fault kept ds-reaper from acting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    pub kind: String,
    pub from: Ts,
    pub to: Ts,
    /// Only tasks of this worker (None: everyone).
    pub worker: Option<String>,
}

/// Everything the run recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct History {
    pub seed: u64,
    pub start: Ts,
    pub end: Ts,
    pub timing: Timing,
    pub tasks: Vec<TaskTruth>,
    pub rows: Vec<RowChange>,
    pub commands: Vec<CommandInsert>,
    /// workflow -> when DS took each of its commands off the queue.
    pub consumed: BTreeMap<i64, Vec<Ts>>,
    /// workflow -> intervals in which a live master (one incarnation) held it.
    pub held: BTreeMap<i64, Vec<(Ts, Option<Ts>)>>,
    /// Observed leadership: from `ts` on, this replica led (None: nobody).
    pub leaders: Vec<(Ts, Option<String>)>,
    pub external_deaths: Vec<ExternalDeath>,
    pub blocked: Vec<Window>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WrongWrite {
    pub ts: Ts,
    pub what: String,
    /// The row's story: truth and every recorded change, in time order.
    pub history: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Miss {
    pub task: i64,
    pub death: Death,
    pub dead_at: Ts,
    pub deadline: Ts,
    pub reaped_at: Option<Ts>,
    /// Why it was not reaped in time (None: unexplained).
    pub explanation: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Verdict {
    pub wrong: Vec<WrongWrite>,
    /// Writes to a live process that the policy asks for and SPEC allows:
    /// its worker had been absent from the registry for the grace period
    /// (and, with an agent, for longer than the agent's listing holds it) —
    /// the simulator meant a shorter absence, the loaded machine made it
    /// longer. Listed, not counted as wrong.
    pub policy_writes: Vec<WrongWrite>,
    pub misses: Vec<Miss>,
    /// Dead tasks reaped within their bound, by death.
    pub reaped: BTreeMap<String, u64>,
    /// Dead tasks DS finished itself first (a race ds-reaper lost, correctly).
    pub ds_won: u64,
    /// Dead tasks whose bound had not passed when the run ended.
    pub pending: u64,
    pub ghosts_killed: u64,
    /// Every process ds-reaper's agents killed, by the fault that made its
    /// task (`TaskTruth::fault`; `-` for none).
    pub kills_by_fault: BTreeMap<String, u64>,
    /// Of `wrong`: kills of a process whose task row was live (the worst
    /// bug beside a wrong write).
    pub wrong_kills: u64,
    pub ghost_misses: Vec<Miss>,
    pub commands: u64,
    pub daemon_row_writes: u64,
}

fn fmt_ts(t: Ts, start: Ts) -> String {
    format!("+{:.2}s", t - start)
}

/// The replica leading at `ts` by the observations (the last one at or
/// before it).
fn leader_at(leaders: &[(Ts, Option<String>)], ts: Ts) -> Option<&str> {
    leaders
        .iter()
        .take_while(|(t, _)| *t <= ts)
        .last()
        .and_then(|(_, l)| l.as_deref())
}

/// Whether `replica` was observed leading at some moment within
/// [`LEADER_SLACK`] of `ts`.
fn led_near(leaders: &[(Ts, Option<String>)], replica: &str, ts: Ts) -> bool {
    if leader_at(leaders, ts - LEADER_SLACK) == Some(replica) {
        return true;
    }
    leaders
        .iter()
        .filter(|(t, _)| *t > ts - LEADER_SLACK && *t <= ts + LEADER_SLACK)
        .any(|(_, l)| l.as_deref() == Some(replica))
}

fn held_at(held: &BTreeMap<i64, Vec<(Ts, Option<Ts>)>>, wf: i64, ts: Ts) -> bool {
    held.get(&wf)
        .is_some_and(|iv| iv.iter().any(|(a, b)| *a <= ts && b.is_none_or(|b| ts < b)))
}

impl History {
    fn task_story(&self, t: &TaskTruth) -> Vec<String> {
        let s = self.start;
        let mut out = vec![format!(
            "task {} (workflow {}) on {}{} submitted {}",
            t.id,
            t.wf,
            t.host,
            if t.agent { " (agent)" } else { "" },
            fmt_ts(t.submitted, s)
        )];
        if let Some((d, why)) = t.dead {
            out.push(format!("{} process dead ({})", fmt_ts(d, s), why.name()));
        }
        if let Some(f) = t.ds_finished {
            out.push(format!("{} DS wrote its result", fmt_ts(f, s)));
        }
        if let Some(g) = t.ghost_from {
            out.push(format!(
                "{} DS left its process running (ghost)",
                fmt_ts(g, s)
            ));
        }
        if let Some(x) = t.superseded {
            out.push(format!("{} DS superseded it (flag 0)", fmt_ts(x, s)));
        }
        match t.row {
            RowFate::Kept => {}
            RowFate::Never => out.push("its row was never in ds-reaper's database".into()),
            RowFate::Deleted(d) => out.push(format!("{} its row was deleted", fmt_ts(d, s))),
        }
        if let Some(f) = &t.fault {
            out.push(format!("made by the fault {f}"));
        }
        for r in self
            .rows
            .iter()
            .filter(|r| r.table == "task" && r.id == t.id)
        {
            out.push(format!(
                "{} {:?}: state {}->{} flag {}->{} host {:?}->{:?}",
                fmt_ts(r.ts, s),
                r.writer,
                r.old_state,
                r.new_state,
                r.old_flag,
                r.new_flag,
                r.old_host,
                r.new_host
            ));
        }
        for e in self.external_deaths.iter().filter(|e| e.task == t.id) {
            out.push(format!(
                "{} process killed (not by the simulator)",
                fmt_ts(e.ts, s)
            ));
        }
        out
    }

    fn wf_story(&self, wf: i64) -> Vec<String> {
        let s = self.start;
        let mut out = vec![format!("workflow {wf}")];
        for (a, b) in self.held.get(&wf).into_iter().flatten() {
            out.push(format!(
                "held by a live master {} .. {}",
                fmt_ts(*a, s),
                b.map_or("end".into(), |b| fmt_ts(b, s))
            ));
        }
        for r in self
            .rows
            .iter()
            .filter(|r| r.table == "workflow" && r.id == wf)
        {
            out.push(format!(
                "{} {:?}: state {}->{} host {:?}->{:?}",
                fmt_ts(r.ts, s),
                r.writer,
                r.old_state,
                r.new_state,
                r.old_host,
                r.new_host
            ));
        }
        for c in self.commands.iter().filter(|c| c.wf == wf) {
            out.push(format!(
                "{} {:?}: command {}",
                fmt_ts(c.ts, s),
                c.writer,
                c.command_type
            ));
        }
        for t in self.consumed.get(&wf).into_iter().flatten() {
            out.push(format!("{} DS took a command", fmt_ts(*t, s)));
        }
        out
    }

    /// The "away" window (worker's session gone, JVM alive) that makes a
    /// write at `ts` to task `t`'s live process one the policy asks for: the
    /// worker absent since at least the grace period before the write, still
    /// absent shortly before it, and, with an agent, its last listing (no
    /// later than the blip's start) older than `agent_stale_after` minus a
    /// scan and the report's way — or no listing at all: the task began less
    /// than a scan before the blip (SPEC §12's hold needs one listing; soak
    /// seed 103: a task started 0.1 s before its worker and agent dropped).
    fn absent_long(&self, t: &TaskTruth, ts: Ts) -> Option<&Window> {
        self.blocked.iter().find(|w| {
            w.kind == "away"
                && w.worker.as_deref() == Some(t.host.as_str())
                && w.from + self.timing.grace <= ts
                && w.to - w.from >= self.timing.grace
                && w.to >= ts - 3.0
                && (!t.agent || {
                    let cut = self.agent_cut_since(&t.host, w.from);
                    ts - cut >= self.timing.agent_stale - 2.0 || t.submitted >= cut - 1.0
                })
        })
    }

    /// When the agent of `worker` was last able to report before `from`:
    /// the start of the chain of its blips and restarts that ends in the one
    /// starting at `from` (one following another within 3 s: the agent had no
    /// time to reconnect and list in between; soak seed 107).
    fn agent_cut_since(&self, worker: &str, from: Ts) -> Ts {
        let mut start = from;
        loop {
            let earlier = self
                .blocked
                .iter()
                .filter(|w| {
                    matches!(
                        w.kind.as_str(),
                        "away" | "agent_session_loss" | "agent_restart"
                    ) && w.worker.as_deref() == Some(worker)
                        && w.from < start
                        && w.to >= start - 3.0
                })
                .map(|w| w.from)
                .fold(f64::INFINITY, f64::min);
            if earlier.is_finite() {
                start = earlier;
            } else {
                return start;
            }
        }
    }

    /// The "heartbeat_gap" window (no heartbeat reached ZooKeeper) that
    /// makes a write at `ts` to a live process on a worker without an agent
    /// one the policy asks for: the heartbeat really stopped at least
    /// `heartbeat_stale_after` before the write and had not resumed shortly
    /// before it. (With an agent, its listing holds the task: still wrong.)
    fn stale_long(&self, t: &TaskTruth, ts: Ts) -> Option<&Window> {
        if t.agent {
            return None;
        }
        self.blocked.iter().find(|w| {
            w.kind == "heartbeat_gap"
                && w.worker.as_deref() == Some(t.host.as_str())
                && w.from + self.timing.heartbeat_stale <= ts
                && w.to >= ts - 3.0
        })
    }

    /// The faults that explain ds-reaper not acting on `worker`'s task
    /// between `from` and `to`.
    fn explain(&self, worker: &str, from: Ts, to: Ts, ghost: bool) -> Option<String> {
        let r = self.timing.recovery;
        let hits: BTreeSet<&str> = self
            .blocked
            .iter()
            // a heartbeat gap is what makes a hung worker's tasks zombies,
            // never a reason not to reap them
            .filter(|w| w.kind != "heartbeat_gap")
            // a database that looks like another holds kills, not writes
            .filter(|w| ghost || w.kind != DATABASE_MISMATCH)
            .filter(|w| w.worker.as_deref().is_none_or(|x| x == worker))
            .filter(|w| w.from <= to && w.to + r >= from)
            .map(|w| w.kind.as_str())
            .collect();
        (!hits.is_empty()).then(|| hits.into_iter().collect::<Vec<_>>().join(", "))
    }
}

fn is_daemon(w: &Writer) -> bool {
    !matches!(w, Writer::Ds)
}

/// Judges a history.
pub fn judge(h: &History) -> Verdict {
    let mut v = Verdict::default();
    let tasks: BTreeMap<i64, &TaskTruth> = h.tasks.iter().map(|t| (t.id, t)).collect();
    let s = h.start;

    // Every row change by ds-reaper.
    for r in h.rows.iter().filter(|r| is_daemon(&r.writer)) {
        v.daemon_row_writes += 1;
        let mut wrong = Vec::new();
        if let Writer::Replica(x) = &r.writer {
            if !led_near(&h.leaders, x, r.ts) {
                wrong.push(format!(
                    "replica {x} wrote while {:?} led",
                    leader_at(&h.leaders, r.ts)
                ));
            }
        }
        let story = if r.table == "task" {
            match tasks.get(&r.id) {
                None => {
                    wrong.push("a task row the simulator never created".into());
                    vec![]
                }
                Some(t) => {
                    if t.dead.is_none_or(|(d, _)| r.ts < d) {
                        if let Some(w) = h.absent_long(t, r.ts).or_else(|| h.stale_long(t, r.ts)) {
                            v.policy_writes.push(WrongWrite {
                                ts: r.ts,
                                what: format!(
                                    "{:?} wrote task {} at {}: its worker was {} from {} to {}",
                                    r.writer,
                                    r.id,
                                    fmt_ts(r.ts, s),
                                    if w.kind == "away" {
                                        "away"
                                    } else {
                                        "without a heartbeat in ZooKeeper"
                                    },
                                    fmt_ts(w.from, s),
                                    fmt_ts(w.to, s)
                                ),
                                history: h.task_story(t),
                            });
                            continue;
                        }
                        wrong.push("its process was alive".into());
                    }
                    if t.ds_finished.is_some_and(|f| f <= r.ts) {
                        wrong.push("DS had finished it".into());
                    }
                    if t.superseded.is_some_and(|x| x <= r.ts) {
                        wrong.push("DS had superseded it".into());
                    }
                    h.task_story(t)
                }
            }
        } else {
            if held_at(&h.held, r.id, r.ts) {
                wrong.push("a live master held the workflow".into());
            }
            h.wf_story(r.id)
        };
        if !wrong.is_empty() {
            v.wrong.push(WrongWrite {
                ts: r.ts,
                what: format!(
                    "{:?} wrote {} {} at {}: {}",
                    r.writer,
                    r.table,
                    r.id,
                    fmt_ts(r.ts, s),
                    wrong.join("; ")
                ),
                history: story,
            });
        }
    }

    // Commands: one per workflow at a time, never for a held workflow.
    for (i, c) in h.commands.iter().enumerate() {
        v.commands += 1;
        let mut wrong = Vec::new();
        if let Writer::Replica(x) = &c.writer {
            if !led_near(&h.leaders, x, c.ts) {
                wrong.push(format!("replica {x} inserted it while not leading"));
            }
        }
        if held_at(&h.held, c.wf, c.ts) {
            wrong.push("a live master held the workflow".into());
        }
        let queued_before = h.commands[..i]
            .iter()
            .filter(|p| p.wf == c.wf && p.ts <= c.ts)
            .count();
        let taken_before = h
            .consumed
            .get(&c.wf)
            .map_or(0, |v| v.iter().filter(|t| **t <= c.ts).count());
        if queued_before > taken_before {
            wrong.push("a second command while one was queued".into());
        }
        if !wrong.is_empty() {
            v.wrong.push(WrongWrite {
                ts: c.ts,
                what: format!(
                    "{:?} inserted command {} for workflow {} at {}: {}",
                    c.writer,
                    c.command_type,
                    c.wf,
                    fmt_ts(c.ts, s),
                    wrong.join("; ")
                ),
                history: h.wf_story(c.wf),
            });
        }
    }

    // Processes killed on ds-reaper's order: only a task whose row was over
    // (or deleted after ds-reaper read it), never one whose row it never read.
    for e in &h.external_deaths {
        let Some(t) = tasks.get(&e.task) else {
            continue;
        };
        let by = t.fault.clone().unwrap_or_else(|| "-".into());
        *v.kills_by_fault.entry(by).or_default() += 1;
        if t.row == RowFate::Never {
            v.wrong_kills += 1;
            v.wrong.push(WrongWrite {
                ts: e.ts,
                what: format!(
                    "task {}'s process was killed at {} although ds-reaper's database never \
                     had its row (row_never_seen: never killed)",
                    t.id,
                    fmt_ts(e.ts, s)
                ),
                history: h.task_story(t),
            });
            continue;
        }
        let deleted = matches!(t.row, RowFate::Deleted(d) if d <= e.ts);
        let over = deleted
            || t.ds_finished.is_some_and(|f| f <= e.ts)
            || t.superseded.is_some_and(|x| x <= e.ts)
            || h.rows
                .iter()
                .any(|r| r.table == "task" && r.id == t.id && is_daemon(&r.writer) && r.ts <= e.ts);
        if !over {
            v.wrong_kills += 1;
            v.wrong.push(WrongWrite {
                ts: e.ts,
                what: format!(
                    "task {}'s process was killed at {} while its row was live",
                    t.id,
                    fmt_ts(e.ts, s)
                ),
                history: h.task_story(t),
            });
        } else if t.ghost_from.is_some() {
            v.ghosts_killed += 1;
        }
    }

    // Misses: a dead task must be reaped within its bound.
    for t in &h.tasks {
        if t.row == RowFate::Never {
            // nothing of ds-reaper's to reap or kill
            continue;
        }
        if let Some(g) = t.ghost_from {
            let deadline = g + h.timing.ghost_after + h.timing.margin;
            let killed = h
                .external_deaths
                .iter()
                .find(|e| e.task == t.id)
                .map(|e| e.ts);
            let ended_by_sim = t.dead.map(|(d, _)| d).filter(|d| *d >= g);
            let late = match (killed, ended_by_sim) {
                (Some(k), _) => k > deadline,
                (None, Some(e)) => e > deadline,
                (None, None) => deadline < h.end,
            };
            if late {
                v.ghost_misses.push(Miss {
                    task: t.id,
                    death: Death::EndedUnreported,
                    dead_at: g,
                    deadline,
                    reaped_at: killed,
                    explanation: h
                        .explain(&t.host, g, deadline, true)
                        .map(|k| format!("blocked by {k}")),
                });
            }
            continue;
        }
        let Some((dead, why)) = t.dead else { continue };
        if t.ds_finished.is_some() {
            v.ds_won += 1;
            continue;
        }
        let deadline = dead + why.bound(&h.timing);
        let reaped = h
            .rows
            .iter()
            .filter(|r| r.table == "task" && r.id == t.id && is_daemon(&r.writer))
            .map(|r| r.ts)
            .find(|ts| *ts >= dead);
        match reaped {
            Some(r) if r <= deadline => {
                *v.reaped.entry(why.name().into()).or_default() += 1;
                continue;
            }
            None if deadline >= h.end => {
                v.pending += 1;
                continue;
            }
            _ => {}
        }
        if t.superseded.is_some_and(|x| x <= deadline) {
            continue;
        }
        let mut explanation = h
            .explain(&t.host, dead, deadline, false)
            .map(|k| format!("blocked by {k}"));
        if explanation.is_none()
            && t.agent
            && matches!(why, Death::ProcessDeath | Death::DsRace)
            && dead - t.submitted < 1.5
        {
            explanation = Some(
                "its process died before the agent's first scan could list it \
                 (SPEC §12: a task never listed is never process_gone)"
                    .into(),
            );
        }
        if explanation.is_none() && why == Death::WorkerRestart && t.restart_near_submit {
            explanation = Some(
                "the worker restarted within clock_skew_tolerance of the task's submit time \
                 (SPEC §3: not a worker_restarted)"
                    .into(),
            );
        }
        v.misses.push(Miss {
            task: t.id,
            death: why,
            dead_at: dead,
            deadline,
            reaped_at: reaped,
            explanation,
        });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            grace: 5.0,
            heartbeat_stale: 10.0,
            process_gone: 4.0,
            ghost_after: 5.0,
            clock_skew: 5.0,
            margin: 15.0,
            recovery: 10.0,
            agent_stale: 10.0,
        }
    }

    fn task(id: i64) -> TaskTruth {
        TaskTruth {
            id,
            wf: 100 + id,
            host: "w1".into(),
            agent: false,
            submitted: 1.0,
            dead: None,
            ds_finished: None,
            superseded: None,
            ghost_from: None,
            restart_near_submit: false,
            row: RowFate::Kept,
            fault: None,
        }
    }

    fn history(tasks: Vec<TaskTruth>) -> History {
        History {
            seed: 1,
            start: 0.0,
            end: 1000.0,
            timing: timing(),
            tasks,
            rows: vec![],
            commands: vec![],
            consumed: BTreeMap::new(),
            held: BTreeMap::new(),
            leaders: vec![(0.0, Some("a".into()))],
            external_deaths: vec![],
            blocked: vec![],
            faults: BTreeMap::new(),
        }
    }

    fn write(id: i64, ts: Ts, who: &str) -> RowChange {
        RowChange {
            ts,
            writer: Writer::Replica(who.into()),
            table: "task".into(),
            id,
            old_state: 1,
            new_state: 6,
            old_flag: 1,
            new_flag: 1,
            old_host: Some("w1".into()),
            new_host: Some("w1".into()),
        }
    }

    #[test]
    fn a_reap_after_the_death_within_the_bound_is_right() {
        let mut t = task(1);
        t.dead = Some((10.0, Death::WorkerCrash));
        let mut h = history(vec![t]);
        h.rows.push(write(1, 16.0, "a"));
        let v = judge(&h);
        assert!(v.wrong.is_empty(), "{:?}", v.wrong);
        assert!(v.misses.is_empty());
        assert_eq!(v.reaped["worker_crash"], 1);
    }

    #[test]
    fn a_write_to_a_live_process_or_a_finished_task_is_wrong() {
        let mut live = task(1);
        live.dead = Some((50.0, Death::WorkerCrash));
        let mut done = task(2);
        done.dead = Some((10.0, Death::DsRace));
        done.ds_finished = Some(12.0);
        let mut h = history(vec![live, done]);
        h.rows.push(write(1, 20.0, "a"));
        h.rows.push(write(2, 13.0, "a"));
        let v = judge(&h);
        assert_eq!(v.wrong.len(), 2, "{:?}", v.wrong);
        assert!(v.wrong[0].what.contains("process was alive"));
        assert!(v.wrong[1].what.contains("DS had finished"));
        assert!(v.wrong[1]
            .history
            .iter()
            .any(|l| l.contains("DS wrote its result")));
    }

    #[test]
    fn a_write_after_a_worker_was_away_longer_than_the_grace_is_the_policys() {
        let live = task(1);
        let mut h = history(vec![live]);
        h.blocked.push(Window {
            kind: "away".into(),
            from: 10.0,
            to: 16.5,
            worker: Some("w1".into()),
        });
        h.rows.push(write(1, 16.0, "a"));
        let v = judge(&h);
        assert!(v.wrong.is_empty(), "{:?}", v.wrong);
        assert_eq!(v.policy_writes.len(), 1);
        // away shorter than the grace: wrong
        h.blocked[0].to = 13.0;
        assert_eq!(judge(&h).wrong.len(), 1);
        // with an agent, the listing still held it
        h.blocked[0].to = 16.5;
        h.tasks[0].agent = true;
        assert_eq!(judge(&h).wrong.len(), 1);
        // unless the task began too late for any listing (soak seed 103)
        h.tasks[0].submitted = 9.9;
        let v = judge(&h);
        assert!(v.wrong.is_empty(), "{:?}", v.wrong);
        assert_eq!(v.policy_writes.len(), 1);
        // or a blip just before this one left the agent no time to list it
        // again, so the last listing is older than agent_stale_after (seed 107)
        h.tasks[0].submitted = 1.0;
        h.blocked.push(Window {
            kind: "agent_session_loss".into(),
            from: 3.0,
            to: 9.7,
            worker: Some("w1".into()),
        });
        let v = judge(&h);
        assert!(v.wrong.is_empty(), "{:?}", v.wrong);
        assert_eq!(v.policy_writes.len(), 1);
    }

    #[test]
    fn a_write_after_a_heartbeat_really_stopped_is_the_policys_without_an_agent() {
        let mut h = history(vec![task(1)]);
        h.blocked.push(Window {
            kind: "heartbeat_gap".into(),
            from: 100.0,
            to: 125.0,
            worker: Some("w1".into()),
        });
        h.rows.push(write(1, 112.0, "a"));
        let v = judge(&h);
        assert!(v.wrong.is_empty(), "{:?}", v.wrong);
        assert_eq!(v.policy_writes.len(), 1);
        // a gap shorter than heartbeat_stale_after before the write: wrong
        h.rows[0].ts = 108.0;
        assert_eq!(judge(&h).wrong.len(), 1);
        // an agent's listing holds the task whatever the heartbeat: wrong
        h.rows[0].ts = 112.0;
        h.tasks[0].agent = true;
        assert_eq!(judge(&h).wrong.len(), 1);
    }

    #[test]
    fn a_write_by_a_replica_that_did_not_lead_is_wrong() {
        let mut t = task(1);
        t.dead = Some((10.0, Death::WorkerCrash));
        let mut h = history(vec![t]);
        h.leaders = vec![(0.0, Some("a".into())), (5.0, Some("b".into()))];
        h.rows.push(write(1, 12.0, "a"));
        let v = judge(&h);
        assert_eq!(v.wrong.len(), 1);
        assert!(
            v.wrong[0].what.contains("while Some(\"b\") led"),
            "{:?}",
            v.wrong
        );
        // within the sampling slack of a hand-over it is the leader's
        h.leaders = vec![(0.0, Some("b".into())), (12.3, Some("a".into()))];
        assert!(judge(&h).wrong.is_empty());
    }

    #[test]
    fn a_second_command_or_one_for_a_held_workflow_is_wrong() {
        let mut h = history(vec![]);
        let cmd = |ts| CommandInsert {
            ts,
            writer: Writer::Replica("a".into()),
            wf: 7,
            command_type: 4,
        };
        h.commands = vec![cmd(10.0), cmd(11.0)];
        let v = judge(&h);
        assert_eq!(v.wrong.len(), 1);
        assert!(v.wrong[0].what.contains("second command"));
        h.consumed.insert(7, vec![10.5]);
        assert!(judge(&h).wrong.is_empty());
        h.held.insert(7, vec![(0.0, Some(9.0)), (10.8, None)]);
        let v = judge(&h);
        assert_eq!(v.wrong.len(), 1);
        assert!(v.wrong[0].what.contains("live master held"));
    }

    #[test]
    fn a_kill_of_a_live_tasks_process_is_wrong_and_of_a_ghost_right() {
        let mut ghost = task(1);
        ghost.ds_finished = Some(10.0);
        ghost.ghost_from = Some(10.0);
        let live = task(2);
        let mut h = history(vec![ghost, live]);
        h.external_deaths = vec![
            ExternalDeath { task: 1, ts: 17.0 },
            ExternalDeath { task: 2, ts: 17.0 },
        ];
        let v = judge(&h);
        assert_eq!(v.wrong.len(), 1);
        assert!(v.wrong[0].what.contains("task 2"));
        assert_eq!(v.wrong_kills, 1);
        assert_eq!(v.ghosts_killed, 1);
        assert!(v.ghost_misses.is_empty());
    }

    #[test]
    fn misses_are_explained_by_faults_on_their_window_or_not() {
        let mut a = task(1);
        a.dead = Some((100.0, Death::WorkerCrash));
        let mut b = task(2);
        b.dead = Some((300.0, Death::ProcessDeath));
        let mut c = task(3);
        c.dead = Some((995.0, Death::WorkerCrash));
        let mut h = history(vec![a, b, c]);
        h.blocked.push(Window {
            kind: "zk_restart".into(),
            from: 90.0,
            to: 104.0,
            worker: None,
        });
        h.rows.push(write(1, 150.0, "a"));
        let v = judge(&h);
        assert_eq!(v.misses.len(), 2, "{:?}", v.misses);
        assert_eq!(
            v.misses[0].explanation.as_deref(),
            Some("blocked by zk_restart")
        );
        assert_eq!(v.misses[0].reaped_at, Some(150.0));
        assert_eq!(v.misses[1].task, 2);
        assert_eq!(v.misses[1].explanation, None);
        // an agent's task whose process died before any scan (soak seed 30)
        let mut h2 = h.clone();
        h2.tasks[1].agent = true;
        h2.tasks[1].submitted = 299.5;
        let v2 = judge(&h2);
        assert!(v2.misses[1]
            .explanation
            .as_deref()
            .is_some_and(|e| e.contains("first scan")));
        assert_eq!(v.pending, 1);
    }

    #[test]
    fn a_history_round_trips_through_json() {
        let mut t = task(1);
        t.dead = Some((10.0, Death::WorkerHung));
        let h = history(vec![t]);
        let back: History = serde_json::from_str(&serde_json::to_string(&h).unwrap()).unwrap();
        assert_eq!(back.tasks[0].dead, Some((10.0, Death::WorkerHung)));
    }

    #[test]
    fn a_kill_of_a_process_whose_row_was_never_read_is_wrong() {
        let mut foreign = task(1);
        foreign.row = RowFate::Never;
        foreign.fault = Some("missing_row(foreign)".into());
        let mut h = history(vec![foreign]);
        h.external_deaths = vec![ExternalDeath { task: 1, ts: 30.0 }];
        let v = judge(&h);
        assert_eq!(v.wrong_kills, 1, "{:?}", v.wrong);
        assert!(v.wrong[0].what.contains("row_never_seen"));
        assert_eq!(v.kills_by_fault["missing_row(foreign)"], 1);
        // and it is no zombie to be missed when it ends by itself
        h.external_deaths.clear();
        h.tasks[0].dead = Some((40.0, Death::EndedUnreported));
        let v = judge(&h);
        assert!(v.wrong.is_empty() && v.misses.is_empty(), "{:?}", v.misses);
    }

    #[test]
    fn a_kill_after_the_row_was_deleted_is_right_and_before_it_wrong() {
        let mut gone = task(1);
        gone.row = RowFate::Deleted(20.0);
        gone.ghost_from = Some(20.0);
        let mut h = history(vec![gone]);
        h.external_deaths = vec![ExternalDeath { task: 1, ts: 28.0 }];
        let v = judge(&h);
        assert!(v.wrong.is_empty(), "{:?}", v.wrong);
        assert_eq!(v.ghosts_killed, 1);
        assert_eq!(v.kills_by_fault["-"], 1);
        h.external_deaths[0].ts = 19.0;
        let v = judge(&h);
        assert_eq!(v.wrong_kills, 1);
    }

    #[test]
    fn a_database_mismatch_explains_a_ghost_miss_but_not_a_zombie_miss() {
        let mut ghost = task(1);
        ghost.ds_finished = Some(100.0);
        ghost.ghost_from = Some(100.0);
        let mut zombie = task(2);
        zombie.dead = Some((100.0, Death::ProcessDeath));
        let mut h = history(vec![ghost, zombie]);
        h.blocked.push(Window {
            kind: DATABASE_MISMATCH.into(),
            from: 95.0,
            to: 130.0,
            worker: None,
        });
        let v = judge(&h);
        assert_eq!(
            v.ghost_misses[0].explanation.as_deref(),
            Some("blocked by database_mismatch")
        );
        assert_eq!(v.misses[0].explanation, None);
    }
}
