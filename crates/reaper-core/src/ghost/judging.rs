//! One sweep's judging of the listed tasks, one by one.

use super::admit::Counts;
use super::evidence::{is_own, own_window, Seen};
use super::memory::counted;
use super::{other_host_counts, over, Ghost, GhostMemory, GhostPolicy, GhostRow, ListedRead, Over};
use crate::agent::{AgentProcess, AgentReport, AgentSeen, AgentTask};
use crate::plan::Disposition;
use crate::view::RegistryView;
use crate::{delta, Instant};
use std::collections::BTreeSet;

pub(super) struct Judging<'a> {
    view: &'a RegistryView,
    listed_read: &'a ListedRead<'a>,
    memory: &'a GhostMemory,
    now: Instant,
    policy: &'a GhostPolicy,
    /// The memory to keep for the next sweep.
    kept: GhostMemory,
    ghosts: Vec<Ghost>,
    /// Kills wanted this sweep (indices into `ghosts`), admitted after the
    /// counts below.
    wanted: Vec<usize>,
    /// Listings judged (a task two agents list counts twice).
    listed: usize,
    /// Listed tasks read without a row.
    no_row: BTreeSet<i64>,
}

impl<'a> Judging<'a> {
    pub(super) fn new(
        view: &'a RegistryView,
        listed_read: &'a ListedRead<'a>,
        memory: &'a GhostMemory,
        now: Instant,
        policy: &'a GhostPolicy,
    ) -> Self {
        Judging {
            view,
            listed_read,
            memory,
            now,
            policy,
            kept: GhostMemory::default(),
            ghosts: Vec::new(),
            wanted: Vec::new(),
            listed: 0,
            no_row: BTreeSet::new(),
        }
    }

    /// The ghosts, the kills wanted among them, the counts their admission
    /// needs, and the memory to keep.
    pub(super) fn finish(self) -> (Vec<Ghost>, Vec<usize>, Counts, GhostMemory) {
        let counts = Counts {
            listed: self.listed,
            no_row: self.no_row.len(),
        };
        (self.ghosts, self.wanted, counts, self.kept)
    }

    /// A report not judged now: which of its tasks' rows were read is kept.
    pub(super) fn keep_seen(&mut self, report: &AgentReport) {
        for t in &report.tasks {
            if self.memory.rows_seen.contains(&t.task_id) {
                self.kept.rows_seen.insert(t.task_id);
            }
        }
    }

    /// What the read says of one listed task, its memory of read rows
    /// kept: None when it is not judged now (not read, live, not over, or
    /// another host's without proof), else its row, how it is over, and
    /// whether this daemon read its row before (or now).
    fn read_over(
        &mut self,
        worker: &str,
        task: &AgentTask,
    ) -> Option<(Option<&'a GhostRow>, Over, Read)> {
        let ListedRead {
            read, rows, live, ..
        } = *self.listed_read;
        let id = task.task_id;
        let seen_before = self.memory.rows_seen.contains(&id);
        if !read.contains(&id) {
            // Listed since the read: judged next sweep, its clock kept.
            let key = (worker.to_string(), id);
            if let Some(t) = self.memory.tracks.get(&key) {
                self.kept.tracks.insert(key, t.clone());
            }
            if seen_before {
                self.kept.rows_seen.insert(id);
            }
            return None;
        }
        self.listed += 1;
        let row = rows.get(&id);
        let found = row.is_some() || live.contains(&id);
        if found || seen_before {
            self.kept.rows_seen.insert(id);
        }
        if !found {
            self.no_row.insert(id);
        }
        if live.contains(&id) {
            return None;
        }
        // most listed tasks run: decided without allocating
        let over = over(self.view, worker, row)?;
        if over == Over::OtherHost {
            let h = row.and_then(|r| r.task.host.as_deref()).unwrap_or_default();
            let stale = self.policy.agent_stale_after;
            if !other_host_counts(self.view, worker, task, h, self.now, stale) {
                return None;
            }
        }
        let read = match (found, seen_before) {
            (false, false) => Read::Never,
            (true, false) => Read::FirstNow,
            _ => Read::Before,
        };
        Some((row, over, read))
    }

    /// Judges one task `worker`'s agent lists: a ghost, or nothing.
    pub(super) fn task(
        &mut self,
        worker: &String,
        seen: &AgentSeen,
        jvm: Option<i64>,
        task: &AgentTask,
    ) {
        let Some((row, over, read)) = self.read_over(worker, task) else {
            return;
        };
        let (memory, now, policy) = (self.memory, self.now, self.policy);
        let key = (worker.clone(), task.task_id);
        // A clock begun while the row was never read says nothing of how
        // long the row itself has been over: it restarts once it is read.
        let old = memory.tracks.get(&key).filter(|_| read != Read::FirstNow);
        let track = counted(old, &seen.history, task.task_id, now);
        self.kept.tracks.insert(key.clone(), track.clone());
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
            never_seen: read == Read::Never,
        };
        let ordered = self.listed_read.outstanding.contains(&key)
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

/// Whether this daemon has read a listed task's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Never,
    /// Read now for the first time.
    FirstNow,
    /// Read by an earlier sweep.
    Before,
}
