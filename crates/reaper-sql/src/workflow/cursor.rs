//! What the incremental workflow sweep remembers between passes: the
//! workflow table's low-water mark and tracked ids (a [`SweepCursor`]), the
//! task table's top ids of the last sweeps, and a summary of each tracked
//! workflow's task rows, so that a sweep reads only the task rows that can
//! have changed — never the whole task table, whose workflow column has no
//! index on PostgreSQL.

use crate::cursor::SweepCursor;
use chrono::NaiveDateTime;
use reaper_core::candidate::Shared;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::IdSet;
use reaper_core::{DsLine, Zone};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Task tops kept: the bound of a sweep's task read is the oldest.
const TOPS: usize = 3;

/// A `flag = 1` task row the summary follows: in a non-finished state, or
/// in FAILURE or KILL (`stmt::followed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveTask {
    pub state: i32,
    /// Shared with every other live task on the same worker: a sweep holds
    /// one entry per live task (100,000 of them held a copy of their host
    /// each).
    pub host: Option<Shared>,
}

/// What the rules need from one workflow's task rows (SPEC §13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Its followed `flag = 1` task rows (non-finished, FAILURE, KILL),
    /// ascending by task id, each once. A sorted slice, not a map: built once from the sweep's
    /// rows (at 100,000 live tasks 24 bytes a task instead of a map's ~45).
    pub live: Box<[(i64, LiveTask)]>,
    /// The newest `end_time` of its task rows.
    pub last_end: Option<NaiveDateTime>,
}

/// One row of a task read for summaries: a live task on its own, or the
/// newest end of a workflow's other rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SumRow {
    pub wf: i64,
    pub item: Result<SumItem, SumError>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SumItem {
    /// `(task id, live task)` when the row is a live task.
    pub live: Option<(i64, LiveTask)>,
    pub end: Option<NaiveDateTime>,
}

/// A task read row that could not be decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SumError {
    pub task: Option<i64>,
    pub error: String,
}

/// The task rows of a sweep's reads, folded as they arrive: the live ones
/// in the order read, the newest end per workflow, the undecodable ones. A
/// sweep reads every live task it knew again, and each row held as a
/// [`SumRow`] until the summaries were built cost twice as much.
#[derive(Debug, Default)]
pub(crate) struct SumRows {
    /// `(workflow, task id, live task)`.
    live: Vec<(i64, i64, LiveTask)>,
    ends: HashMap<i64, NaiveDateTime>,
    bad: Vec<(i64, SumError)>,
}

impl SumRows {
    /// Room for `n` more live rows (a read by id knows how many to expect).
    pub(crate) fn reserve(&mut self, n: usize) {
        self.live.reserve_exact(n);
    }

    pub(crate) fn push(&mut self, row: SumRow) {
        match row.item {
            Ok(item) => {
                if let Some((id, t)) = item.live {
                    self.live.push((row.wf, id, t));
                }
                if let Some(end) = item.end {
                    let e = self.ends.entry(row.wf).or_insert(end);
                    *e = (*e).max(end);
                }
            }
            Err(e) => self.bad.push((row.wf, e)),
        }
    }

    /// `later`'s rows as read after these.
    pub(crate) fn append(&mut self, mut later: SumRows) {
        self.live.append(&mut later.live);
        for (wf, end) in later.ends {
            let e = self.ends.entry(wf).or_insert(end);
            *e = (*e).max(end);
        }
        self.bad.append(&mut later.bad);
    }
}

impl FromIterator<SumRow> for SumRows {
    fn from_iter<I: IntoIterator<Item = SumRow>>(rows: I) -> Self {
        let mut out = SumRows::default();
        for r in rows {
            out.push(r);
        }
        out
    }
}

/// What the incremental workflow sweep remembers between passes.
///
/// Workflow rows are read like task rows ([`SweepCursor`]): above the
/// low-water mark by primary-key range, below it by id while tracked (the
/// candidates, the other non-terminal rows, the undecodable ones).
///
/// Their task rows are summarised once (a full scan, or a workflow first
/// tracked below the mark) and then kept up to date from the task rows above
/// a bound — the task table's top id two sweeps before the last one — plus
/// the summaries' live tasks at or below it, read again by id: two disjoint
/// reads that need no workflow ids, so they run with the workflow reads. The bound is sound because a
/// workflow's task rows are inserted after the workflow row: a workflow
/// above the workflow mark (not committed when the top of the previous
/// sweep was read) was inserted after the sweep before it, given the same
/// one-sweep allowance for late commits the task cursor makes, and so were
/// its tasks. Until three sweeps have recorded the task top, the task reads
/// are unbounded.
#[derive(Debug, Clone, Default)]
pub struct WorkflowCursor {
    pub(crate) ids: SweepCursor,
    /// The task table's top id at the last sweeps, oldest first.
    task_tops: VecDeque<Option<i64>>,
    /// The newest task end of each summarised workflow.
    ends: HashMap<i64, Option<NaiveDateTime>>,
    /// The summaries' followed tasks (live, FAILURE, KILL), by id alone: a
    /// sweep reads each of them again (a FAILURE row DS retries or
    /// recovers goes to `flag = 0`), so their state and host are never used after the sweep that
    /// read them (8 bytes a task kept instead of 24).
    live: IdSet,
}

/// A workflow cursor's figures, for status and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkflowCursorStats {
    /// Candidate workflows known to the cursor.
    pub tracked: usize,
    /// Other non-terminal workflows tracked by id.
    pub pending: usize,
    /// Workflow rows that could not be decoded, read again by id.
    pub undecodable: usize,
    /// Workflow ids at or below this are only re-read when tracked.
    pub low_water: Option<i64>,
    /// Workflows whose task rows are summarised.
    pub summarised: usize,
    /// Followed task rows across the summaries — live, and `flag = 1` in
    /// FAILURE or KILL (read again by id when their workflow's task read
    /// does not return them).
    pub live_tasks: usize,
    /// Task rows above this id are what an incremental sweep reads; `None`
    /// while the task reads are unbounded.
    pub task_bound: Option<i64>,
}

impl WorkflowCursor {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn stats(&self) -> WorkflowCursorStats {
        WorkflowCursorStats {
            tracked: self.ids.tracked(),
            pending: self.ids.pending(),
            undecodable: self.ids.undecodable(),
            low_water: self.ids.low_water(),
            summarised: self.ends.len(),
            live_tasks: self.live.len(),
            task_bound: self.task_bound(),
        }
    }

    /// Task rows of tracked workflows above this id are the only ones an
    /// incremental sweep needs; `None` until three sweeps have recorded the
    /// task table's top.
    pub(crate) fn task_bound(&self) -> Option<i64> {
        (self.task_tops.len() >= TOPS)
            .then(|| self.task_tops.front().copied().flatten().unwrap_or(0))
    }

    /// Whether workflow `wf` has a summary.
    pub(crate) fn summarised(&self, wf: i64) -> bool {
        self.ends.contains_key(&wf)
    }

    /// The newest task end the summary of `wf` knows.
    pub(crate) fn last_end(&self, wf: i64) -> Option<NaiveDateTime> {
        self.ends.get(&wf).copied().flatten()
    }

    /// The live tasks the summaries know at or below task id `bound`,
    /// ascending: with the rows above the bound, what a sweep reads again.
    pub(crate) fn live_tasks_at_or_below(&self, bound: i64) -> Vec<i64> {
        self.live.iter().take_while(|&t| t <= bound).collect()
    }

    /// What a completed sweep learned.
    pub(crate) fn replace(
        &mut self,
        known: BTreeSet<i64>,
        pending: BTreeSet<i64>,
        undecodable: BTreeSet<i64>,
        wf_top: Option<i64>,
        task_top: Option<i64>,
        summaries: HashMap<i64, Summary>,
    ) {
        self.ids.replace(
            known.into_iter().collect(),
            pending.into_iter().collect(),
            undecodable.into_iter().collect(),
            wf_top,
        );
        self.task_tops.push_back(task_top);
        while self.task_tops.len() > TOPS {
            self.task_tops.pop_front();
        }
        self.live = summaries
            .values()
            .flat_map(|s| s.live.iter().map(|(id, _)| *id))
            .collect();
        self.ends = summaries
            .into_iter()
            .map(|(id, s)| (id, s.last_end))
            .collect();
    }
}

/// The workflow states a sweep tracks: the line's non-terminal ones and the
/// candidates' (`states`), ascending.
pub(crate) fn tracked_states(line: DsLine, states: &[i32]) -> Vec<i32> {
    let mut v: BTreeSet<i32> = line
        .workflow_non_terminal_states()
        .iter()
        .copied()
        .collect();
    v.extend(states.iter().copied());
    v.into_iter().collect()
}

/// The summaries of `tracked` workflows from the task rows read for them
/// (`rows`), starting from the newest end `cached` remembers: the live tasks
/// are exactly those the rows show live (a sweep reads again every live task
/// it knew), the newest end only moves forward. Workflows with a row that
/// cannot be decoded get no summary and are returned with the error.
pub(crate) fn summarise(
    tracked: &[i64],
    rows: SumRows,
    cached: Option<&WorkflowCursor>,
) -> (HashMap<i64, Summary>, Vec<(i64, String)>) {
    let mut out: HashMap<i64, Summary> = tracked
        .iter()
        .map(|&id| {
            let last_end = cached.and_then(|c| c.last_end(id));
            (
                id,
                Summary {
                    live: Box::default(),
                    last_end,
                },
            )
        })
        .collect();
    let SumRows {
        mut live,
        ends,
        bad: undecodable,
    } = rows;
    for (wf, end) in ends {
        if let Some(s) = out.get_mut(&wf) {
            s.last_end = s.last_end.max(Some(end));
        }
    }
    let mut bad: HashMap<i64, String> = HashMap::new();
    for (wf, e) in undecodable {
        if !out.contains_key(&wf) {
            continue;
        }
        bad.entry(wf).or_insert_with(|| match e.task {
            Some(t) => format!("its task row {t} cannot be decoded: {}", e.error),
            None => format!(
                "the newest end of its task rows cannot be decoded: {}",
                e.error
            ),
        });
    }
    for id in bad.keys() {
        out.remove(id);
    }
    live.retain(|(wf, _, _)| out.contains_key(wf));
    // stable: a task's rows stay in the order read; the last one is kept
    live.sort_by_key(|(wf, id, _)| (*wf, *id));
    live.dedup_by(|later, kept| {
        let same = (later.0, later.1) == (kept.0, kept.1);
        if same {
            std::mem::swap(later, kept);
        }
        same
    });
    let mut groups: Vec<(i64, usize)> = Vec::new();
    for (wf, _, _) in &live {
        match groups.last_mut() {
            Some((w, n)) if w == wf => *n += 1,
            _ => groups.push((*wf, 1)),
        }
    }
    let mut rows = live.into_iter();
    for (wf, n) in groups {
        let tasks: Box<[(i64, LiveTask)]> =
            rows.by_ref().take(n).map(|(_, id, t)| (id, t)).collect();
        if let Some(s) = out.get_mut(&wf) {
            s.live = tasks;
        }
    }
    let mut bad: Vec<(i64, String)> = bad.into_iter().collect();
    bad.sort();
    (out, bad)
}

/// A workflow row and its summary as the planner's candidate.
pub(crate) fn candidate(
    mut wf: WorkflowCandidate,
    s: &Summary,
    task_states: &[i32],
    zone: Zone,
) -> WorkflowCandidate {
    wf.tasks_by_state = BTreeMap::new();
    wf.ended_by_state = BTreeMap::new();
    let mut hosts = BTreeSet::new();
    for (_, t) in s.live.iter() {
        if DsLine::is_finished_task_state(t.state) {
            *wf.ended_by_state.entry(t.state).or_default() += 1;
            continue;
        }
        *wf.tasks_by_state.entry(t.state).or_default() += 1;
        if task_states.contains(&t.state) {
            if let Some(h) = t
                .host
                .as_deref()
                .filter(|h| !reaper_core::host::is_empty(Some(h)))
            {
                hosts.insert(h);
            }
        }
    }
    wf.live_task_hosts = hosts.into_iter().map(str::to_string).collect();
    wf.last_task_end = s.last_end.and_then(|n| zone.to_instant(n));
    wf
}

#[cfg(test)]
mod tests;
