//! Whose process tree a task is (SPEC §12 `lineage`). Several workers may
//! share a host and its `exec_base` (DS's `data.basedir.path` defaults to
//! `/tmp/dolphinscheduler` for every worker): each agent must list only its
//! own worker's tasks. A process is its worker's (`own`) when its ancestry
//! reaches the worker's JVM — directly or through `sudo` and the task's own
//! processes — or reached it when the agent first saw it (remembered by pid
//! and start time: a 3.3+ worker that stops leaves its tasks to init). It is
//! another JVM's when the nearest JVM above it that is no task's process is
//! not the worker's: such a process is never listed, now or after that JVM
//! ends. Otherwise its ancestry ends at pid 1, a subreaper or a parent
//! outside the agent's PID namespace: an `orphan`.

use super::{Proc, Scanner, Table, MAX_DEPTH};
use crate::execpath::TaskRef;
use std::collections::HashMap;

/// Where a process comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Own,
    /// Below a live JVM that is not the worker's.
    Foreign,
    Orphan,
}

/// Per-scan memo of origins, by pid.
pub(super) type Origins = HashMap<i32, Origin>;

impl Scanner {
    /// The origin of task process `pid`.
    pub(super) fn origin(
        &mut self,
        pid: i32,
        table: &Table,
        member: &HashMap<i32, Option<TaskRef>>,
        memo: &mut Origins,
    ) -> Origin {
        let mut chain = Vec::new();
        let mut cur = pid;
        let found = loop {
            if let Some(o) = memo.get(&cur) {
                break *o;
            }
            let Some(p) = table.procs.get(&cur) else {
                break Origin::Orphan;
            };
            if let Some(o) = self.remembered(cur, p) {
                break o;
            }
            chain.push(cur);
            if chain.len() > MAX_DEPTH {
                break Origin::Orphan;
            }
            if let Some((jvm, ticks)) = table.jvm {
                if p.ppid == jvm && ticks <= p.start_ticks {
                    break Origin::Own;
                }
            }
            let parent = table
                .procs
                .get(&p.ppid)
                .filter(|pp| p.ppid != cur && pp.start_ticks <= p.start_ticks)
                .copied();
            let Some(pp) = parent else {
                // pid 1, a subreaper's child, ppid 0, a parent newer than it
                break Origin::Orphan;
            };
            let a_task = member.get(&p.ppid).copied().flatten().is_some();
            if !a_task && self.is_java(p.ppid, &pp) {
                break Origin::Foreign;
            }
            cur = p.ppid;
        };
        for c in chain {
            memo.insert(c, found);
        }
        found
    }

    /// What the agent remembers of process `pid`: seen under its worker's
    /// JVM, or under another.
    fn remembered(&self, pid: i32, p: &Proc) -> Option<Origin> {
        let key = (pid, p.start_ticks);
        if self.own.contains(&key) {
            Some(Origin::Own)
        } else if self.foreign.contains(&key) {
            Some(Origin::Foreign)
        } else {
            None
        }
    }

    /// Remembers the origins of this scan's task processes, and forgets
    /// processes that have ended. Without the worker's JVM in sight every
    /// JVM counts as another's for the scan, but that is not remembered:
    /// the worker's own JVM may be among them, and its tasks are `own` once
    /// it is verified.
    pub(super) fn remember(&mut self, table: &Table, memo: &Origins) {
        let live = |k: &(i32, u64)| table.procs.get(&k.0).is_some_and(|p| p.start_ticks == k.1);
        self.own.retain(live);
        self.foreign.retain(live);
        let jvm_known = table.jvm.is_some();
        for (pid, o) in memo {
            let Some(p) = table.procs.get(pid) else {
                continue;
            };
            match o {
                Origin::Own => self.own.insert((*pid, p.start_ticks)),
                Origin::Foreign if jvm_known => self.foreign.insert((*pid, p.start_ticks)),
                Origin::Foreign | Origin::Orphan => false,
            };
        }
    }
}
