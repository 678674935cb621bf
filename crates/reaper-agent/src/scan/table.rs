//! Reading the process table of one scan, finding the worker's JVM in it,
//! and counting what could not be read.

use super::read::Read;
use super::{JvmUnseen, Scan, Scanner, Table, FIRST_UNREADABLE};
use std::collections::HashMap;

impl Scanner {
    /// Reads every listed process, each read bounded.
    pub(super) fn read_table(&mut self, pids: &[i32]) -> Table {
        let mut table = Table {
            procs: HashMap::with_capacity(pids.len()),
            denied: Vec::new(),
            stuck: Vec::new(),
            jvm: None,
        };
        for (pid, read, dirs) in self.reader.processes(pids, &self.paths) {
            match read {
                Read::Ok(p) => {
                    table.procs.insert(pid, p);
                    for d in dirs {
                        self.dirs.entry(d.task.task_id).or_insert(d);
                    }
                }
                Read::Gone => {}
                Read::Denied => table.denied.push(pid),
                Read::Stuck => table.stuck.push(pid),
            }
        }
        table
    }

    /// Finds the worker's JVM in `table` and takes it out (it is no task's
    /// process, and its children are placed by their own evidence).
    pub(super) fn place_jvm(
        &mut self,
        table: &mut Table,
        ms: impl Fn(u64) -> i64,
    ) -> Result<(), JvmUnseen> {
        let seen = self.verify_jvm(&table.procs, ms).map(|_| ());
        // blind or not, the JVM last verified still parents its tasks
        table.jvm = self
            .jvm
            .filter(|(pid, t)| table.procs.get(pid).is_some_and(|p| p.start_ticks == *t));
        if let Some((pid, _)) = table.jvm {
            table.procs.remove(&pid);
        }
        seen
    }

    /// Counts the denied processes that could be a task's.
    pub(super) fn count_unreadable(
        &mut self,
        mut denied: Vec<i32>,
        ancestors: &[i32],
        scan: &mut Scan,
    ) {
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

    /// The agent and its ancestors (pid 1 included), which no DS task can be:
    /// a sandbox's or container's init may be unreadable even to root, and
    /// must not make every scan prove nothing.
    pub(super) fn ancestors(&mut self) -> Vec<i32> {
        let mut out = Vec::new();
        let Some(mut pid) = self.reader.source.self_pid() else {
            return out;
        };
        for _ in 0..64 {
            out.push(pid);
            match self.reader.source.stat(pid) {
                Ok(s) if s.ppid > 0 && !out.contains(&s.ppid) => pid = s.ppid,
                _ => break,
            }
        }
        out
    }

    /// A denied process that cannot be a task's: one of the agent's
    /// ancestors, or a kernel thread (its `stat` is world-readable).
    pub(super) fn never_a_task(&mut self, pid: i32, ancestors: &[i32]) -> bool {
        ancestors.contains(&pid)
            || matches!(self.reader.source.stat(pid), Ok(s) if s.kernel_thread())
    }
}
