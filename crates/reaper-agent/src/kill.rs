//! Carrying out one kill order of the leading daemon (SPEC §15).
//!
//! The agent never kills on its own account. An order names the task and each
//! of its processes by pid and start time, as the daemon saw them in a report;
//! by the time it arrives any of them may have exited and its pid may belong
//! to someone else. So, at that moment and against a scan made just before:
//! every ordered pid that still exists must have the recorded start time,
//! still belong to the task by the scan's rules (command file, descent,
//! working directory), have no controlling terminal and not be the worker's
//! JVM — one that fails refuses the whole order and nothing is signalled.
//!
//! What is signalled is the ordered processes and their descendants among the
//! task's processes, children before parents — never a process outside that
//! tree, never one with a terminal, and never a root-owned `sudo` (DS 3.2+
//! runs the command file as `sudo -u <tenant> -i`): it ends by itself when
//! its child does. Each process is held by a pidfd opened before its start
//! time is checked the last time, so neither SIGTERM nor, after
//! `agent.kill_grace`, SIGKILL can reach a process that took a freed pid.
//! Then `/proc` says what is gone.

use crate::proc::{ProcFs, ProcSource, ProcStat};
use crate::scan::Scan;
use reaper_core::agent::AgentProcess;
use reaper_core::order::{KillOrder, OrderOutcome, OrderResult};
use rustix::process::Signal;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::time::{Duration, Instant};

mod signal;
use signal::{hold, root_sudo, signal, Target};

/// How far a start time may differ from the recorded one and still be the
/// same process. The agent turns start ticks into epoch ms through the boot
/// time of `/proc/stat`, which the kernel derives from the wall clock and
/// which moves by a second when the clock is adjusted; a pid reused by
/// another process starts long after the one the daemon judged (at least
/// `reconcile.ghost_after` later).
pub const START_TOLERANCE_MS: i64 = 2_000;

/// How often `/proc` is read while waiting for processes to end.
const POLL: Duration = Duration::from_millis(50);
/// How long processes get to disappear after SIGKILL (a process in
/// uninterruptible sleep ends only when its I/O does).
const KILL_SETTLE: Duration = Duration::from_secs(5);
/// Longest parent chain followed.
const MAX_DEPTH: usize = 512;

/// `agent.allow_kill` and `agent.kill_grace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillRules {
    pub allow: bool,
    pub grace: Duration,
}

/// The first step of an order: answered at once, or signals sent.
#[derive(Debug)]
pub enum Begun {
    Done(OrderOutcome),
    Signalled(Pending),
}

/// An order whose processes got SIGTERM; [`Pending::finish`] ends it.
#[derive(Debug)]
pub struct Pending {
    order_id: String,
    task_id: i64,
    targets: Vec<Target>,
    /// Signals that failed (EPERM: the agent lacks `CAP_KILL`).
    errors: Vec<String>,
    /// The pids that got SIGTERM.
    termed: Vec<i32>,
}

fn outcome(order_id: &str, result: OrderResult, detail: impl Into<String>) -> OrderOutcome {
    OrderOutcome {
        order_id: order_id.to_string(),
        result,
        detail: detail.into(),
    }
}

/// How a process looks now.
enum Now {
    Alive(ProcStat),
    Gone,
    Unreadable(io::Error),
}

fn now(proc: &mut ProcFs, pid: i32) -> Now {
    match proc.stat(pid) {
        Ok(s) if s.ended() => Now::Gone,
        Ok(s) => Now::Alive(s),
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(3) => Now::Gone,
        Err(e) => Now::Unreadable(e),
    }
}

/// Whether the process `pid` started at `ticks` still lives (a zombie has
/// ended); an unreadable one counts as alive.
fn alive(proc: &mut ProcFs, pid: i32, ticks: u64) -> bool {
    match now(proc, pid) {
        Now::Alive(s) => s.start_ticks == ticks,
        Now::Gone => false,
        Now::Unreadable(_) => true,
    }
}

/// Start ticks to epoch ms, through the boot time.
#[derive(Clone, Copy)]
struct Clock {
    boot: i64,
    hz: u64,
}

impl Clock {
    fn ms(self, ticks: u64) -> i64 {
        self.boot
            .saturating_mul(1000)
            .saturating_add((ticks.saturating_mul(1000) / self.hz) as i64)
    }
}

fn same_start(a: i64, b: i64) -> bool {
    (a - b).abs() <= START_TOLERANCE_MS
}

/// Checks the order against `scan` (made just before, by the agent's scanner)
/// and the processes as they are now, then sends SIGTERM to the tree.
/// `worker_pid` is the worker JVM's pid from its heartbeat.
pub fn begin(
    order: &KillOrder,
    scan: &Scan,
    worker_pid: Option<i64>,
    rules: KillRules,
    proc: &mut ProcFs,
) -> Begun {
    let id = order.order_id.as_str();
    let refuse = |why: String| Begun::Done(outcome(id, OrderResult::Refused, why));
    if !rules.allow {
        return refuse("agent.allow_kill is false: this agent kills nothing".into());
    }
    let clock = match proc.boot_time() {
        Ok(boot) => Clock {
            boot,
            hz: proc.clock_ticks().max(1),
        },
        Err(e) => return refuse(format!("cannot read the boot time: {e}")),
    };
    let members: HashMap<i32, &AgentProcess> = scan
        .tasks
        .iter()
        .filter(|t| t.task_id == order.task_id)
        .flat_map(|t| t.processes.iter())
        .map(|p| (p.pid, p))
        .collect();
    let roots = match ordered_now(order, &members, worker_pid, clock, proc) {
        Ok(r) => r,
        Err(why) => return refuse(why.to_string()),
    };
    let task = task_now(&roots, &members, worker_pid, clock, proc);
    let tree = tree_of(&task, &roots);
    if tree.is_empty() {
        return Begun::Done(outcome(
            id,
            OrderResult::Gone,
            format!(
                "none of the {} ordered process(es) of task {} was left",
                order.pids.len(),
                order.task_id
            ),
        ));
    }
    Begun::Signalled(terminate(order, tree, proc))
}

/// Why an ordered process refuses the whole order.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("pid {pid} is the worker's JVM")]
    WorkerJvm { pid: i32 },
    #[error("cannot read pid {pid}: {error}")]
    Unreadable { pid: i32, error: io::Error },
    #[error(
        "pid {pid} started at {started}, the order's at {ordered}: another process has the pid now"
    )]
    Reused {
        pid: i32,
        started: i64,
        ordered: i64,
    },
    #[error("pid {pid} has a controlling terminal")]
    Terminal { pid: i32 },
    #[error("pid {pid} does not belong to task {task} any more")]
    NotTheTask { pid: i32, task: i64 },
}

/// The ordered processes that still exist, each checked: every one passes
/// (same start time, no terminal, still the task's, not the worker's JVM)
/// or the reason the whole order is refused.
fn ordered_now(
    order: &KillOrder,
    members: &HashMap<i32, &AgentProcess>,
    worker_pid: Option<i64>,
    clock: Clock,
    proc: &mut ProcFs,
) -> Result<BTreeMap<i32, ProcStat>, Refusal> {
    let mut roots = BTreeMap::new();
    for p in &order.pids {
        if worker_pid == Some(i64::from(p.pid)) {
            return Err(Refusal::WorkerJvm { pid: p.pid });
        }
        let stat = match now(proc, p.pid) {
            Now::Gone => continue,
            Now::Unreadable(error) => return Err(Refusal::Unreadable { pid: p.pid, error }),
            Now::Alive(s) => s,
        };
        let started = clock.ms(stat.start_ticks);
        if !same_start(started, p.start_time) {
            return Err(Refusal::Reused {
                pid: p.pid,
                started,
                ordered: p.start_time,
            });
        }
        if stat.tty() {
            return Err(Refusal::Terminal { pid: p.pid });
        }
        match members.get(&p.pid) {
            Some(m) if same_start(m.started_at, started) => {}
            _ => {
                return Err(Refusal::NotTheTask {
                    pid: p.pid,
                    task: order.task_id,
                })
            }
        }
        roots.insert(p.pid, stat);
    }
    Ok(roots)
}

/// The task's processes as they are now: the ordered ones and those of the
/// scan that are still the same processes (never the worker's JVM, never
/// one with a terminal).
fn task_now(
    roots: &BTreeMap<i32, ProcStat>,
    members: &HashMap<i32, &AgentProcess>,
    worker_pid: Option<i64>,
    clock: Clock,
    proc: &mut ProcFs,
) -> HashMap<i32, ProcStat> {
    let mut task: HashMap<i32, ProcStat> = roots.iter().map(|(p, s)| (*p, *s)).collect();
    for (pid, m) in members {
        if task.contains_key(pid) || worker_pid == Some(i64::from(*pid)) {
            continue;
        }
        if let Now::Alive(s) = now(proc, *pid) {
            if same_start(clock.ms(s.start_ticks), m.started_at) && !s.tty() {
                task.insert(*pid, s);
            }
        }
    }
    task
}

/// The tree, children before parents: each process of `task` whose chain of
/// parents within the task reaches an ordered one (parents start no later
/// than their children). Its depth counts every parent within the task, so
/// that children go first even when parent and child are both ordered.
fn tree_of(
    task: &HashMap<i32, ProcStat>,
    roots: &BTreeMap<i32, ProcStat>,
) -> Vec<(usize, i32, ProcStat)> {
    let mut tree: Vec<(usize, i32, ProcStat)> = Vec::new();
    for (&pid, &s) in task {
        let mut depth = 0;
        let mut cur = (pid, s);
        let mut reaches = false;
        loop {
            reaches |= roots.contains_key(&cur.0);
            let Some(parent) = task
                .get(&cur.1.ppid)
                .filter(|p| cur.1.ppid != cur.0 && p.start_ticks <= cur.1.start_ticks)
            else {
                break;
            };
            depth += 1;
            if depth > MAX_DEPTH {
                // a loop in a racy read: no order to trust
                reaches &= roots.contains_key(&pid);
                break;
            }
            cur = (cur.1.ppid, *parent);
        }
        if reaches {
            tree.push((depth, pid, s));
        }
    }
    tree.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    tree
}

/// Holds each process of the tree (a root-owned `sudo` only waited for) and
/// sends SIGTERM, children first.
fn terminate(order: &KillOrder, tree: Vec<(usize, i32, ProcStat)>, proc: &mut ProcFs) -> Pending {
    let mut pending = Pending {
        order_id: order.order_id.clone(),
        task_id: order.task_id,
        targets: Vec::new(),
        errors: Vec::new(),
        termed: Vec::new(),
    };
    for (_, pid, s) in tree {
        let sudo = root_sudo(proc.root(), pid);
        let handle = if sudo {
            None
        } else {
            match hold(proc, pid, s.start_ticks) {
                Ok(Some(h)) => Some(h),
                // exited (or its pid changed hands) since
                Ok(None) => continue,
                Err(e) => {
                    pending.errors.push(format!("pid {pid}: {e}"));
                    None
                }
            }
        };
        pending.targets.push(Target {
            pid,
            ticks: s.start_ticks,
            handle,
        });
    }
    let mut termed = Vec::new();
    for t in &pending.targets {
        match signal(proc, t, Signal::TERM) {
            Ok(true) => termed.push(t.pid),
            Ok(false) => {}
            Err(e) => pending
                .errors
                .push(format!("SIGTERM to pid {}: {e}", t.pid)),
        }
    }
    tracing::warn!(
        order_id = %order.order_id,
        task_id = order.task_id,
        pids = ?termed,
        "kill order: SIGTERM sent to the task's process tree"
    );
    pending.termed = termed;
    pending
}

impl Pending {
    pub fn order_id(&self) -> &str {
        &self.order_id
    }

    /// Waits up to `grace` for the tree to end, sends SIGKILL to what is
    /// left, and reads `/proc` to see what is gone. Blocks (up to `grace`
    /// and a few seconds more).
    pub fn finish(mut self, grace: Duration, proc: &mut ProcFs) -> OrderOutcome {
        let total = self.targets.len();
        let left = |proc: &mut ProcFs, targets: &[Target]| -> Vec<i32> {
            targets
                .iter()
                .filter(|t| alive(proc, t.pid, t.ticks))
                .map(|t| t.pid)
                .collect()
        };
        wait(proc, &self.targets, grace);
        let mut killed = Vec::new();
        let survivors: Vec<i32> = left(proc, &self.targets);
        for t in self.targets.iter().filter(|t| survivors.contains(&t.pid)) {
            match signal(proc, t, Signal::KILL) {
                Ok(true) => killed.push(t.pid),
                Ok(false) => {}
                Err(e) => self.errors.push(format!("SIGKILL to pid {}: {e}", t.pid)),
            }
        }
        if !survivors.is_empty() {
            wait(proc, &self.targets, KILL_SETTLE);
        }
        let still = left(proc, &self.targets);
        let mut detail = format!(
            "task {}: {} process(es) in the tree; SIGTERM to pid(s) {:?}",
            self.task_id, total, self.termed
        );
        let sudo: Vec<i32> = self
            .targets
            .iter()
            .filter(|t| t.handle.is_none())
            .map(|t| t.pid)
            .collect();
        if !sudo.is_empty() {
            detail.push_str(&format!(
                "; not signalled (root-owned sudo, or no handle): pid(s) {sudo:?}"
            ));
        }
        if !killed.is_empty() {
            detail.push_str(&format!("; SIGKILL after {grace:?} to pid(s) {killed:?}"));
        }
        for e in &self.errors {
            detail.push_str("; ");
            detail.push_str(e);
        }
        let result = if still.is_empty() {
            OrderResult::Killed
        } else {
            detail.push_str(&format!("; still alive: pid(s) {still:?}"));
            OrderResult::Partial
        };
        tracing::warn!(
            order_id = %self.order_id,
            task_id = self.task_id,
            result = result.as_str(),
            detail = %detail,
            "kill order carried out"
        );
        outcome(&self.order_id, result, detail)
    }
}

/// Polls until no target lives or `limit` has passed.
fn wait(proc: &mut ProcFs, targets: &[Target], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if !targets.iter().any(|t| alive(proc, t.pid, t.ticks)) || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
    }
}

/// The whole order, blocking: [`begin`], then [`Pending::finish`].
pub fn carry_out(
    order: &KillOrder,
    scan: &Scan,
    worker_pid: Option<i64>,
    rules: KillRules,
    proc: &mut ProcFs,
) -> OrderOutcome {
    match begin(order, scan, worker_pid, rules, proc) {
        Begun::Done(o) => o,
        Begun::Signalled(p) => p.finish(rules.grace, proc),
    }
}
