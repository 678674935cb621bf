//! One scan of the host's processes: each process whose working directory is
//! (or lies below) a DS execute path is mapped to its task instance (SPEC §12).
//!
//! Per process the scan reads the `cwd` link; only for the few that sit in an
//! execute path does it read `stat` (start time, zombie or not) and then the
//! link once more. A pid is a process only together with its start time: the
//! second read makes sure the start time and the directory belong to the same
//! process, even if the pid was freed and reused in between. A process that
//! vanished (ENOENT, ESRCH) or is a zombie is simply gone; one the agent may
//! not read (EACCES, EPERM, or any other error) is counted as unreadable, and
//! such a scan proves no absence — unless it cannot be a task's process at
//! all: a kernel thread, or the agent itself or one of its ancestors (the
//! init of a sandbox or container, which even root may be denied).

use crate::execpath::{ExecPaths, TaskRef};
use crate::proc::{has, ProcSource, CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE};
use reaper_core::agent::AgentTask;
use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

/// How many unreadable pids a scan keeps, for `/readyz` and the log.
pub const FIRST_UNREADABLE: usize = 5;

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
}

/// How reading one process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read<T> {
    Ok(T),
    Gone,
    Denied,
}

fn judge<T>(r: io::Result<T>) -> Read<T> {
    match r {
        Ok(v) => Read::Ok(v),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Read::Gone,
        // ESRCH: the process exited while its entry was being read
        Err(e) if e.raw_os_error() == Some(3) => Read::Gone,
        // EACCES, EPERM, and anything unexpected: the scan cannot tell
        Err(_) => Read::Denied,
    }
}

/// Scans a [`ProcSource`] for the task processes under one exec base.
pub struct Scanner {
    source: Box<dyn ProcSource>,
    paths: ExecPaths,
}

impl Scanner {
    pub fn new(source: Box<dyn ProcSource>, paths: ExecPaths) -> Scanner {
        Scanner { source, paths }
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
        let listed = self.source.pids();
        let boot = self.source.boot_time();
        let (mut pids, boot) = match (listed, boot) {
            (Ok(p), Ok(b)) => (p, b),
            (Err(e), _) | (_, Err(e)) => {
                scan.unreadable = 1;
                scan.denied = Some(format!("cannot read the process table: {e}"));
                scan.duration = clock.elapsed();
                return scan;
            }
        };
        // ascending, so the first unreadable pids named are the lowest
        pids.sort_unstable();
        let hz = self.source.clock_ticks().max(1);
        scan.processes = pids.len();
        let ancestors = self.ancestors();
        let mut tasks: BTreeMap<i64, (i64, Vec<i32>, u64)> = BTreeMap::new();
        for pid in pids {
            let found = match judge(self.source.cwd(pid)) {
                Read::Ok(cwd) => match self.paths.task_of(&cwd) {
                    Some(task) => self.confirm(pid, task),
                    None => Read::Gone,
                },
                other => other.map_none(),
            };
            match found {
                Read::Ok((task, ticks)) => {
                    let e = tasks.entry(task.task_id).or_insert((
                        task.workflow_instance_id,
                        Vec::new(),
                        ticks,
                    ));
                    e.0 = e.0.max(task.workflow_instance_id);
                    e.1.push(pid);
                    e.2 = e.2.min(ticks);
                    scan.task_processes += 1;
                }
                Read::Gone => {}
                Read::Denied if self.never_a_task(pid, &ancestors) => {}
                Read::Denied => {
                    scan.unreadable += 1;
                    if scan.unreadable_pids.len() < FIRST_UNREADABLE {
                        scan.unreadable_pids.push(pid);
                    }
                }
            }
        }
        scan.tasks = tasks
            .into_iter()
            .map(|(task_id, (wf, mut pids, ticks))| {
                pids.sort_unstable();
                AgentTask {
                    task_id,
                    workflow_instance_id: wf,
                    pids,
                    started_at: boot
                        .saturating_mul(1000)
                        .saturating_add((ticks.saturating_mul(1000) / hz) as i64),
                    processes: vec![],
                }
            })
            .collect();
        if let Some(why) = self.source.blind() {
            scan.unreadable += 1;
            scan.denied = Some(why);
        } else if scan.unreadable > 0 {
            scan.denied = Some(lacking(self.source.capabilities()));
        }
        scan.duration = clock.elapsed();
        scan
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

    /// A process whose directory maps to `task`: its start time, read
    /// between two reads of its directory that agree. A pid reused by another
    /// process in between shows another directory (or start time) and is
    /// judged again, a few times at most.
    fn confirm(&mut self, pid: i32, mut task: TaskRef) -> Read<(TaskRef, u64)> {
        for _ in 0..3 {
            let stat = match judge(self.source.stat(pid)) {
                Read::Ok(s) if s.ended() => return Read::Gone,
                Read::Ok(s) => s,
                other => return other.map_none(),
            };
            let again = match judge(self.source.cwd(pid)) {
                Read::Ok(cwd) => self.paths.task_of(&cwd),
                other => return other.map_none(),
            };
            match again {
                Some(t) if t == task => return Read::Ok((task, stat.start_ticks)),
                Some(t) => task = t,
                None => return Read::Gone,
            }
        }
        // a pid that keeps changing hands: nothing certain to say about it
        Read::Gone
    }
}

impl<T> Read<T> {
    /// A `Gone` or `Denied` of another payload type.
    fn map_none<U>(self) -> Read<U> {
        match self {
            Read::Ok(_) | Read::Gone => Read::Gone,
            Read::Denied => Read::Denied,
        }
    }
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
