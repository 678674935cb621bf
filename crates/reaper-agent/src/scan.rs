//! One scan of the host's processes: which belong to which task instance
//! (SPEC §12), and whether the agent sees what it must to prove anything.
//!
//! A process belongs to a task when its command line names the task's
//! command file, when it descends (by parent pid) from a process of the task,
//! or when its working directory is, or lies below, the task's execute path
//! — in that order, so a child that `cd`s into some other task's folder stays
//! its own task's. A script may `cd` anywhere and its children inherit that:
//! only the descent keeps them. A process is a pid together with its start
//! time: membership is remembered from one scan to the next by both (a child
//! whose script ended is reparented and would lose its descent), and a parent
//! link counts only to a parent that started no later than its child (a pid
//! freed and reused by a newer process is someone else).
//!
//! Per process the scan reads `stat`, `cwd` and `cmdline`; for one that
//! shows a task it reads `stat` once more, so that start time and evidence
//! belong to the same process. A process that vanished (ENOENT, ESRCH) or is
//! a zombie is simply gone; one the agent may not read (EACCES, EPERM, or any
//! other error) and cannot place in a task otherwise is counted as
//! unreadable, and such a scan proves no absence — unless it cannot be a
//! task's process at all: a kernel thread, or the agent itself or one of its
//! ancestors (the init of a sandbox or container, which even root may be
//! denied). The worker's JVM (its heartbeat's `processId`) is never a task's
//! process; not seeing it makes the agent blind.

pub mod bounded;
mod jvm;
mod lineage;
mod read;
mod table;

use crate::appids::AppIds;
use crate::execpath::{ExecPaths, TaskDir, TaskRef};
use crate::proc::{has, ProcSource, CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE};
use bounded::Reader;
pub use jvm::{JvmUnseen, WorkerJvm};
use lineage::{Origin, Origins};
use reaper_core::agent::{AgentProcess, AgentTask, Lineage};
use reaper_core::DsLine;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// How many unreadable pids a scan keeps, for `/readyz` and the log.
pub const FIRST_UNREADABLE: usize = 5;

/// Longest parent chain followed; deeper is a loop in a racy snapshot.
const MAX_DEPTH: usize = 512;

/// What one scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Epoch ms when the scan started.
    pub started_at: i64,
    pub duration: Duration,
    /// Processes listed.
    pub processes: usize,
    /// The tasks seen, by task id, each with its pids in ascending order.
    pub tasks: Vec<AgentTask>,
    /// Processes mapped to a task.
    pub task_processes: usize,
    /// Processes the agent was denied (plus 1 when it could not list at all,
    /// or may not even see every process).
    pub unreadable: u64,
    /// The first few denied pids.
    pub unreadable_pids: Vec<i32>,
    /// Why the scan is incomplete, naming what the agent lacks; None when
    /// every process was read.
    pub denied: Option<String>,
    /// Why the agent cannot see what it must (the process folder, the
    /// worker's JVM): such a scan proves nothing (SPEC §12).
    pub blind: Option<String>,
    /// Each listed task's execute path, where a process showed it.
    pub dirs: BTreeMap<i64, TaskDir>,
    /// Listed tasks all of whose processes have a controlling terminal
    /// (SPEC §12: sudo's `use_pty`).
    pub tty_tasks: u64,
}

/// One live process as read.
#[derive(Debug, Clone, Copy)]
struct Proc {
    ppid: i32,
    start_ticks: u64,
    tty: bool,
    /// Its `comm` is `java`.
    java: bool,
    /// The task its command line names.
    command: Option<TaskRef>,
    /// The task its working directory says.
    cwd: Option<TaskRef>,
    /// Its `cwd` or `cmdline` was denied.
    denied: bool,
}

/// The live processes of one scan as read.
struct Table {
    procs: HashMap<i32, Proc>,
    /// Processes whose reading was denied.
    denied: Vec<i32>,
    /// Processes whose reads did not finish in time.
    stuck: Vec<i32>,
    /// The worker's JVM (pid, start ticks): the one verified now, else the
    /// one last verified if it still runs. Never a task's process.
    jvm: Option<(i32, u64)>,
}

/// Scans a [`ProcSource`] for the task processes in one process folder.
pub struct Scanner {
    reader: Reader,
    paths: ExecPaths,
    /// What the registry says of the worker's JVM.
    worker: WorkerJvm,
    /// `reconcile.clock_skew_tolerance`.
    clock_skew: Duration,
    /// The process last verified as the worker's JVM (pid, start ticks).
    jvm: Option<(i32, u64)>,
    /// Heartbeats without `startupTime`: the start first seen for the pid.
    first_seen: Option<(i32, u64)>,
    /// Processes seen under the worker's JVM, and under another JVM.
    own: HashSet<(i32, u64)>,
    foreign: HashSet<(i32, u64)>,
    /// Whether a process's executable is `java`, once read.
    exe_java: HashMap<(i32, u64), bool>,
    /// This scan's tasks with a process of the worker's.
    lineage: HashSet<i64>,
    /// The last scan's members, by pid and start time.
    known: HashMap<(i32, u64), TaskRef>,
    /// Execute paths seen in this scan, by task id.
    dirs: BTreeMap<i64, TaskDir>,
    /// The tasks' YARN application ids (SPEC §17).
    apps: AppIds,
    /// What stamps a scan's start (the wall clock but in tests).
    clock: std::sync::Arc<dyn reaper_core::ports::Clock>,
}

impl Scanner {
    pub fn new(source: Box<dyn ProcSource>, paths: ExecPaths) -> Scanner {
        Scanner {
            reader: Reader::new(source),
            paths,
            worker: WorkerJvm::Unknown,
            clock_skew: Duration::from_secs(5),
            clock: std::sync::Arc::new(reaper_core::ports::SystemClock),
            jvm: None,
            first_seen: None,
            own: HashSet::new(),
            foreign: HashSet::new(),
            exe_java: HashMap::new(),
            lineage: HashSet::new(),
            known: HashMap::new(),
            dirs: BTreeMap::new(),
            apps: AppIds::default(),
        }
    }

    /// `agent.task_log_base`: also read application ids from task logs.
    pub fn with_task_log_base(mut self, base: Option<std::path::PathBuf>) -> Scanner {
        self.apps = AppIds::new(base);
        self
    }

    /// The worker JVM's pid, from the latest heartbeat that carried one,
    /// for a heartbeat without `startupTime`; None: no heartbeat seen.
    pub fn set_worker_pid(&mut self, pid: Option<i64>) {
        self.worker = match pid {
            Some(pid) => WorkerJvm::Registered {
                pid,
                startup_ms: None,
            },
            None => WorkerJvm::Unknown,
        };
    }

    /// What the registry says of the worker's JVM now.
    pub fn set_worker(&mut self, worker: WorkerJvm) {
        self.worker = worker;
    }

    /// `reconcile.clock_skew_tolerance`: how much later than the heartbeat's
    /// `startupTime` the JVM may seem to have started.
    /// Stamps scans on `clock` instead of the wall clock.
    pub fn with_clock(mut self, clock: std::sync::Arc<dyn reaper_core::ports::Clock>) -> Scanner {
        self.clock = clock;
        self
    }

    pub fn with_clock_skew(mut self, skew: Duration) -> Scanner {
        self.clock_skew = skew;
        self
    }

    /// `agent.scan_timeout`: how long one process's reads may take.
    pub fn with_read_timeout(mut self, timeout: Duration) -> Scanner {
        self.reader.set_timeout(timeout);
        self
    }

    /// Reader threads stuck in a read now (at most [`bounded::MAX_STUCK`]).
    pub fn stuck_readers(&self) -> usize {
        self.reader.stuck()
    }

    /// Another worker is this agent's now (`auto` chose again): what was
    /// seen of the old one's JVM and lineage is no evidence any more.
    pub fn forget_worker(&mut self) {
        self.worker = WorkerJvm::Unknown;
        self.jvm = None;
        self.first_seen = None;
        self.own.clear();
        self.foreign.clear();
    }

    /// The worker's JVM as last verified: (pid, start ticks).
    pub fn worker_jvm(&self) -> Option<(i32, u64)> {
        self.jvm
    }

    /// Reads execute paths and command files as those of `lines` (what the
    /// registry allows; all lines when empty).
    pub fn set_lines(&mut self, lines: &[DsLine]) {
        if self.paths.set_lines(lines) {
            // what was read under another line's rules is not evidence
            self.known.clear();
        }
    }

    pub fn paths(&self) -> &ExecPaths {
        &self.paths
    }

    /// Scans once; never fails: what it could not read, it counts.
    pub fn scan(&mut self) -> Scan {
        let clock = std::time::Instant::now();
        let started_at = self.clock.now().timestamp_millis();
        let mut scan = Scan {
            started_at,
            ..Scan::default()
        };
        self.paths.refresh();
        self.dirs.clear();
        self.reader.recover();
        // an exec keeps pid and start time: names are read anew every scan
        self.exe_java.clear();
        let listed = self.reader.source.pids();
        let boot = self.reader.source.boot_time();
        let (mut pids, boot) = match (listed, boot) {
            (Ok(p), Ok(b)) => (p, b),
            (Err(e), _) | (_, Err(e)) => {
                scan.unreadable = 1;
                scan.denied = Some(format!("cannot read the process table: {e}"));
                scan.blind = self.blindness(Err(JvmUnseen::TableUnreadable));
                scan.duration = clock.elapsed();
                return scan;
            }
        };
        // ascending, so the first unreadable pids named are the lowest
        pids.sort_unstable();
        let hz = self.reader.source.clock_ticks().max(1);
        scan.processes = pids.len();
        let ancestors = self.ancestors();
        let ms = |ticks: u64| {
            boot.saturating_mul(1000)
                .saturating_add((ticks.saturating_mul(1000) / hz) as i64)
        };
        let mut table = self.read_table(&pids);
        let seen = self.place_jvm(&mut table, ms);
        let mut member: HashMap<i32, Option<TaskRef>> = HashMap::with_capacity(table.procs.len());
        for &pid in &pids {
            if table.procs.contains_key(&pid) {
                self.resolve(pid, &table.procs, &mut member);
            }
        }
        let tasks = self.group(&pids, &mut table, &member, ms, &mut scan);
        let stuck = std::mem::take(&mut table.stuck);
        self.count_unreadable(std::mem::take(&mut table.denied), &ancestors, &mut scan);
        scan.unreadable += stuck.len() as u64;
        for pid in &stuck {
            if scan.unreadable_pids.len() < FIRST_UNREADABLE {
                scan.unreadable_pids.push(*pid);
            }
        }
        scan.tasks = agent_tasks(tasks, &self.lineage);
        scan.tty_tasks = scan
            .tasks
            .iter()
            .filter(|t| !t.processes.is_empty() && t.processes.iter().all(|p| p.tty))
            .count() as u64;
        scan.dirs = std::mem::take(&mut self.dirs);
        scan.dirs
            .retain(|id, _| scan.tasks.iter().any(|t| t.task_id == *id));
        self.apps.fill(&mut scan.tasks, &scan.dirs);
        if let Some(why) = self.reader.source.blind() {
            scan.unreadable += 1;
            scan.denied = Some(why);
        } else if !stuck.is_empty() {
            scan.denied = Some(format!(
                "the reads of {} process(es) did not finish within agent.scan_timeout \
                 (a hung /proc read: a dead NFS or FUSE mount?)",
                stuck.len()
            ));
        } else if scan.unreadable > 0 {
            scan.denied = Some(lacking(self.reader.source.capabilities()));
        }
        scan.blind = self.blindness(seen);
        scan.duration = clock.elapsed();
        scan
    }

    /// Groups the placed processes by task, and remembers them for the next
    /// scan; a process placed nowhere whose evidence was denied is denied.
    fn group(
        &mut self,
        pids: &[i32],
        table: &mut Table,
        member: &HashMap<i32, Option<TaskRef>>,
        ms: impl Fn(u64) -> i64,
        scan: &mut Scan,
    ) -> BTreeMap<i64, (i64, Vec<AgentProcess>)> {
        let mut tasks: BTreeMap<i64, (i64, Vec<AgentProcess>)> = BTreeMap::new();
        let mut known = HashMap::new();
        let mut memo = Origins::new();
        self.lineage.clear();
        for &pid in pids {
            let Some(p) = table.procs.get(&pid).copied() else {
                continue;
            };
            match member.get(&pid).copied().flatten() {
                Some(task) => {
                    let origin = self.origin(pid, table, member, &mut memo);
                    if origin == Origin::Foreign {
                        // another worker's: never listed
                        continue;
                    }
                    if origin == Origin::Own {
                        self.lineage.insert(task.task_id);
                    }
                    known.insert((pid, p.start_ticks), task);
                    let e = tasks
                        .entry(task.task_id)
                        .or_insert((task.workflow_instance_id, Vec::new()));
                    e.0 = e.0.max(task.workflow_instance_id);
                    e.1.push(AgentProcess {
                        pid,
                        started_at: ms(p.start_ticks),
                        tty: p.tty,
                    });
                    scan.task_processes += 1;
                }
                None if p.denied => table.denied.push(pid),
                None => {}
            }
        }
        self.known = known;
        self.remember(table, &memo);
        tasks
    }

    /// Why the scan proves nothing: the process folder is missing, or the
    /// worker's JVM is not in sight (or no heartbeat said which it is).
    fn blindness(&self, worker_seen: Result<(), JvmUnseen>) -> Option<String> {
        let mut why = Vec::new();
        if !self.paths.folder_exists() {
            why.push(format!(
                "the process folder {} does not exist (agent.exec_base must be DS's data.basedir.path; \
                 where the folder is elsewhere, as 1.2's process.exec.basepath may put it, set agent.process_dir)",
                self.paths.folder().display()
            ));
        }
        if let Err(e) = worker_seen {
            why.push(e.to_string());
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// The task of `pid`: its command line's, else the one it was last scan
    /// (same pid and start time), else its parent's, else its directory's.
    fn resolve(
        &self,
        pid: i32,
        table: &HashMap<i32, Proc>,
        member: &mut HashMap<i32, Option<TaskRef>>,
    ) -> Option<TaskRef> {
        // up the parent chain to a process already placed, one with evidence
        // of its own, or one without a (valid) parent
        let mut chain: Vec<i32> = Vec::new();
        let mut cur = pid;
        let mut base: Option<TaskRef> = None;
        loop {
            if let Some(t) = member.get(&cur) {
                base = *t;
                break;
            }
            let Some(p) = table.get(&cur) else { break };
            chain.push(cur);
            if let Some(t) = p
                .command
                .or_else(|| self.known.get(&(cur, p.start_ticks)).copied())
            {
                member.insert(cur, Some(t));
                chain.pop();
                base = Some(t);
                break;
            }
            let parent = table
                .get(&p.ppid)
                .filter(|pp| p.ppid != cur && pp.start_ticks <= p.start_ticks);
            if parent.is_none() || chain.len() >= MAX_DEPTH || chain.contains(&p.ppid) {
                break;
            }
            cur = p.ppid;
        }
        for &c in chain.iter().rev() {
            let own = table.get(&c).and_then(|p| p.cwd);
            let t = base.or(own);
            member.insert(c, t);
            base = t;
        }
        member.get(&pid).copied().flatten()
    }
}

/// The tasks as listed: each one's processes in ascending pid order, `own`
/// when any of them is.
fn agent_tasks(
    tasks: BTreeMap<i64, (i64, Vec<AgentProcess>)>,
    own: &HashSet<i64>,
) -> Vec<AgentTask> {
    tasks
        .into_iter()
        .map(|(task_id, (wf, mut processes))| {
            processes.sort_by_key(|p| p.pid);
            AgentTask {
                lineage: Some(if own.contains(&task_id) {
                    Lineage::Own
                } else {
                    Lineage::Orphan
                }),
                task_id,
                workflow_instance_id: wf,
                pids: processes.iter().map(|p| p.pid).collect(),
                started_at: processes.iter().map(|p| p.started_at).min().unwrap_or(0),
                processes,
                app_ids: Vec::new(),
            }
        })
        .collect()
}

/// Names what the agent lacks to read every process (SPEC §12).
pub fn lacking(caps: Option<u64>) -> String {
    let needed = [
        (CAP_SYS_PTRACE, "CAP_SYS_PTRACE"),
        (CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
    ];
    match caps {
        None => "the agent needs CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH to read other users' processes (its own capabilities are unknown)".to_string(),
        Some(c) => {
            let missing: Vec<&str> = needed
                .iter()
                .filter(|(n, _)| !has(c, *n))
                .map(|(_, name)| *name)
                .collect();
            if missing.is_empty() {
                "the agent has CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, yet was denied: a security module (AppArmor, SELinux) or another user namespace forbids it".to_string()
            } else {
                format!(
                    "the agent lacks {} (needed to read other users' /proc/<pid>/cwd)",
                    missing.join(" and ")
                )
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod safety_tests;
