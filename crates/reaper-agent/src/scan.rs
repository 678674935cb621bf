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

mod read;

use crate::appids::AppIds;
use crate::execpath::{ExecPaths, TaskDir, TaskRef};
use crate::proc::{has, ProcSource, CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE};
use read::Read;
use reaper_core::agent::{AgentProcess, AgentTask};
use reaper_core::DsLine;
use std::collections::{BTreeMap, HashMap};
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
}

/// One live process as read.
#[derive(Debug, Clone, Copy)]
struct Proc {
    ppid: i32,
    start_ticks: u64,
    tty: bool,
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
    /// The worker's JVM is in sight.
    worker_seen: bool,
}

/// Scans a [`ProcSource`] for the task processes in one process folder.
pub struct Scanner {
    source: Box<dyn ProcSource>,
    paths: ExecPaths,
    /// The worker JVM's pid from its heartbeat: the last one seen; None
    /// while no heartbeat has been seen.
    worker_pid: Option<i64>,
    /// The last scan's members, by pid and start time.
    known: HashMap<(i32, u64), TaskRef>,
    /// Execute paths seen in this scan, by task id.
    dirs: BTreeMap<i64, TaskDir>,
    /// The tasks' YARN application ids (SPEC §17).
    apps: AppIds,
}

impl Scanner {
    pub fn new(source: Box<dyn ProcSource>, paths: ExecPaths) -> Scanner {
        Scanner {
            source,
            paths,
            worker_pid: None,
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

    /// The worker JVM's pid, from the latest heartbeat that carried one.
    pub fn set_worker_pid(&mut self, pid: Option<i64>) {
        self.worker_pid = pid;
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
        let started_at = chrono::Utc::now().timestamp_millis();
        let mut scan = Scan {
            started_at,
            ..Scan::default()
        };
        self.paths.refresh();
        self.dirs.clear();
        let listed = self.source.pids();
        let boot = self.source.boot_time();
        let (mut pids, boot) = match (listed, boot) {
            (Ok(p), Ok(b)) => (p, b),
            (Err(e), _) | (_, Err(e)) => {
                scan.unreadable = 1;
                scan.denied = Some(format!("cannot read the process table: {e}"));
                scan.blind = self.blindness(false);
                scan.duration = clock.elapsed();
                return scan;
            }
        };
        // ascending, so the first unreadable pids named are the lowest
        pids.sort_unstable();
        let hz = self.source.clock_ticks().max(1);
        scan.processes = pids.len();
        let ancestors = self.ancestors();
        let mut table = self.read_table(&pids);
        let mut member: HashMap<i32, Option<TaskRef>> = HashMap::with_capacity(table.procs.len());
        for &pid in &pids {
            if table.procs.contains_key(&pid) {
                self.resolve(pid, &table.procs, &mut member);
            }
        }
        let ms = |ticks: u64| {
            boot.saturating_mul(1000)
                .saturating_add((ticks.saturating_mul(1000) / hz) as i64)
        };
        let tasks = self.group(&pids, &mut table, &member, ms, &mut scan);
        self.count_unreadable(table.denied, &ancestors, &mut scan);
        scan.tasks = agent_tasks(tasks);
        scan.dirs = std::mem::take(&mut self.dirs);
        scan.dirs
            .retain(|id, _| scan.tasks.iter().any(|t| t.task_id == *id));
        self.apps.fill(&mut scan.tasks, &scan.dirs);
        if let Some(why) = self.source.blind() {
            scan.unreadable += 1;
            scan.denied = Some(why);
        } else if scan.unreadable > 0 {
            scan.denied = Some(lacking(self.source.capabilities()));
        }
        scan.blind = self.blindness(table.worker_seen);
        scan.duration = clock.elapsed();
        scan
    }

    /// Reads every listed process but the worker's JVM.
    fn read_table(&mut self, pids: &[i32]) -> Table {
        let worker = self.worker_pid.and_then(|p| i32::try_from(p).ok());
        let mut table = Table {
            procs: HashMap::with_capacity(pids.len()),
            denied: Vec::new(),
            worker_seen: false,
        };
        for &pid in pids {
            let read = self.read(pid);
            if Some(pid) == worker {
                // the JVM is no task's, and its children are placed by their own evidence
                table.worker_seen |= !matches!(read, Read::Gone);
                continue;
            }
            match read {
                Read::Ok(p) => {
                    table.procs.insert(pid, p);
                }
                Read::Gone => {}
                Read::Denied => table.denied.push(pid),
            }
        }
        table
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
        for &pid in pids {
            let Some(p) = table.procs.get(&pid) else {
                continue;
            };
            match member.get(&pid).copied().flatten() {
                Some(task) => {
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
        tasks
    }

    /// Counts the denied processes that could be a task's.
    fn count_unreadable(&mut self, mut denied: Vec<i32>, ancestors: &[i32], scan: &mut Scan) {
        denied.sort_unstable();
        for pid in denied {
            if self.never_a_task(pid, ancestors) {
                continue;
            }
            scan.unreadable += 1;
            if scan.unreadable_pids.len() < FIRST_UNREADABLE {
                scan.unreadable_pids.push(pid);
            }
        }
    }

    /// Why the scan proves nothing: the process folder is missing, or the
    /// worker's JVM is not in sight (or no heartbeat said which it is).
    fn blindness(&self, worker_seen: bool) -> Option<String> {
        let mut why = Vec::new();
        if !self.paths.folder_exists() {
            why.push(format!(
                "the process folder {} does not exist (agent.exec_base must be DS's data.basedir.path; \
                 where the folder is elsewhere, as 1.2's process.exec.basepath may put it, set agent.process_dir)",
                self.paths.folder().display()
            ));
        }
        match self.worker_pid {
            None => why.push(
                "the worker's heartbeat has not been seen: the agent cannot check that it sees the worker's JVM"
                    .to_string(),
            ),
            Some(pid) if !worker_seen => why.push(format!(
                "the worker's JVM (processId {pid} of its heartbeat) is not a live process in the agent's view \
                 (a sidecar without shareProcessNamespace, or a container without the host's PID namespace?)"
            )),
            Some(_) => {}
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

    /// The agent and its ancestors (pid 1 included), which no DS task can be:
    /// a sandbox's or container's init may be unreadable even to root, and
    /// must not make every scan prove nothing.
    fn ancestors(&mut self) -> Vec<i32> {
        let mut out = Vec::new();
        let Some(mut pid) = self.source.self_pid() else {
            return out;
        };
        for _ in 0..64 {
            out.push(pid);
            match self.source.stat(pid) {
                Ok(s) if s.ppid > 0 && !out.contains(&s.ppid) => pid = s.ppid,
                _ => break,
            }
        }
        out
    }

    /// A denied process that cannot be a task's: one of the agent's
    /// ancestors, or a kernel thread (its `stat` is world-readable).
    fn never_a_task(&mut self, pid: i32, ancestors: &[i32]) -> bool {
        ancestors.contains(&pid) || matches!(self.source.stat(pid), Ok(s) if s.kernel_thread())
    }
}

/// The tasks as listed: each one's processes in ascending pid order.
fn agent_tasks(tasks: BTreeMap<i64, (i64, Vec<AgentProcess>)>) -> Vec<AgentTask> {
    tasks
        .into_iter()
        .map(|(task_id, (wf, mut processes))| {
            processes.sort_by_key(|p| p.pid);
            AgentTask {
                lineage: None,
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
