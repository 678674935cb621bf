//! What the incremental workflow sweep remembers between passes: the
//! workflow table's low-water mark and tracked ids (a [`SweepCursor`]), the
//! task table's top ids of the last sweeps, and a summary of each tracked
//! workflow's task rows, so that a sweep reads only the task rows that can
//! have changed — never the whole task table, whose workflow column has no
//! index on PostgreSQL.

use crate::cursor::SweepCursor;
use chrono::NaiveDateTime;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{DsLine, Zone};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Task tops kept: the bound of a sweep's task read is the oldest.
const TOPS: usize = 3;

/// A `flag = 1` task row in a non-finished state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveTask {
    pub state: i32,
    pub host: Option<String>,
}

/// What the rules need from one workflow's task rows (SPEC §13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Its `flag = 1` task rows in a non-finished state, by task id.
    pub live: BTreeMap<i64, LiveTask>,
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
    summaries: HashMap<i64, Summary>,
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
    /// Live task rows across the summaries (read again by id when their
    /// workflow's task read does not return them).
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
            summarised: self.summaries.len(),
            live_tasks: self.summaries.values().map(|s| s.live.len()).sum(),
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

    pub(crate) fn summary(&self, wf: i64) -> Option<&Summary> {
        self.summaries.get(&wf)
    }

    /// The live tasks the summaries know at or below task id `bound`,
    /// ascending: with the rows above the bound, what a sweep reads again.
    pub(crate) fn live_tasks_at_or_below(&self, bound: i64) -> Vec<i64> {
        let mut v: Vec<i64> = self
            .summaries
            .values()
            .flat_map(|s| s.live.keys().copied())
            .filter(|&t| t <= bound)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
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
        self.ids.replace(known, pending, undecodable, wf_top);
        self.task_tops.push_back(task_top);
        while self.task_tops.len() > TOPS {
            self.task_tops.pop_front();
        }
        self.summaries = summaries;
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
    rows: Vec<SumRow>,
    cached: Option<&WorkflowCursor>,
) -> (HashMap<i64, Summary>, Vec<(i64, String)>) {
    let mut out: HashMap<i64, Summary> = tracked
        .iter()
        .map(|&id| {
            let last_end = cached.and_then(|c| c.summary(id)).and_then(|s| s.last_end);
            (
                id,
                Summary {
                    live: BTreeMap::new(),
                    last_end,
                },
            )
        })
        .collect();
    let mut bad: HashMap<i64, String> = HashMap::new();
    // Each workflow's live tasks are gathered first and its map built once
    // from them: a map filled one insert at a time, in ascending ids as the
    // rows mostly come, leaves its nodes about half full, and the summaries
    // are kept between sweeps (at 100,000 live tasks ~8 MiB instead of ~4.5).
    // As with one insert per row, the last row read of a task counts.
    let mut live: HashMap<i64, Vec<(i64, LiveTask)>> = HashMap::new();
    for r in rows {
        let Some(s) = out.get_mut(&r.wf) else {
            continue;
        };
        match r.item {
            Ok(item) => {
                if let Some(t) = item.live {
                    live.entry(r.wf).or_default().push(t);
                }
                if item.end > s.last_end {
                    s.last_end = item.end;
                }
            }
            Err(e) => {
                let what = match e.task {
                    Some(t) => format!("its task row {t} cannot be decoded: {}", e.error),
                    None => format!(
                        "the newest end of its task rows cannot be decoded: {}",
                        e.error
                    ),
                };
                bad.entry(r.wf).or_insert(what);
            }
        }
    }
    for id in bad.keys() {
        out.remove(id);
    }
    for (wf, mut tasks) in live {
        if let Some(s) = out.get_mut(&wf) {
            // stable: a task's rows stay in the order read; the last one is kept
            tasks.sort_by_key(|(id, _)| *id);
            tasks.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(later, kept);
                }
                same
            });
            s.live = tasks.into_iter().collect();
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
    let mut hosts = BTreeSet::new();
    for t in s.live.values() {
        *wf.tasks_by_state.entry(t.state).or_default() += 1;
        if task_states.contains(&t.state) {
            if let Some(h) = t
                .host
                .as_deref()
                .filter(|h| !reaper_core::host::is_empty(Some(h)))
            {
                hosts.insert(h.to_string());
            }
        }
    }
    wf.live_task_hosts = hosts.into_iter().collect();
    wf.last_task_end = s.last_end.and_then(|n| zone.to_instant(n));
    wf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Option<NaiveDateTime> {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").ok()
    }

    fn live(wf: i64, id: i64, state: i32, host: &str, end: Option<NaiveDateTime>) -> SumRow {
        SumRow {
            wf,
            item: Ok(SumItem {
                live: Some((
                    id,
                    LiveTask {
                        state,
                        host: Some(host.into()),
                    },
                )),
                end,
            }),
        }
    }

    fn ended(wf: i64, end: Option<NaiveDateTime>) -> SumRow {
        SumRow {
            wf,
            item: Ok(SumItem { live: None, end }),
        }
    }

    #[test]
    fn the_task_bound_waits_for_three_tops() {
        let mut c = WorkflowCursor::new();
        for (k, top) in [Some(100), Some(150), None, Some(170)]
            .into_iter()
            .enumerate()
        {
            assert_eq!(c.task_bound().is_some(), k >= 3, "sweep {k}");
            c.replace(
                BTreeSet::new(),
                BTreeSet::new(),
                BTreeSet::new(),
                Some(10),
                top,
                HashMap::new(),
            );
        }
        // tops 150, None (an empty table), 170: the oldest bounds the read
        assert_eq!(c.task_bound(), Some(150));
        c.replace(
            BTreeSet::new(),
            BTreeSet::new(),
            BTreeSet::new(),
            Some(10),
            Some(180),
            HashMap::new(),
        );
        assert_eq!(c.task_bound(), Some(0), "an empty table bounds nothing out");
    }

    #[test]
    fn summaries_keep_the_newest_end_and_only_the_live_rows_read() {
        let mut c = WorkflowCursor::new();
        let (s, bad) = summarise(
            &[1, 2],
            vec![
                live(1, 10, 1, "w1:1234", None),
                live(1, 11, 17, "w2:1234", None),
                ended(1, t("2024-01-01 00:00:05")),
                ended(2, t("2024-01-01 00:00:09")),
                // a row of a workflow not tracked
                ended(3, t("2030-01-01 00:00:00")),
            ],
            None,
        );
        assert!(bad.is_empty());
        assert_eq!(s[&1].live.len(), 2);
        assert_eq!(s[&1].last_end, t("2024-01-01 00:00:05"));
        assert!(!s.contains_key(&3));
        c.replace(
            [1, 2].into(),
            BTreeSet::new(),
            BTreeSet::new(),
            Some(5),
            Some(20),
            s,
        );
        // next sweep, bound 10: task 10 is read again by id, 11 with the rows above
        assert_eq!(c.live_tasks_at_or_below(10), vec![10]);
        assert_eq!(c.live_tasks_at_or_below(11), vec![10, 11]);
        // task 11 ended earlier than the workflow's newest end; workflow 2's
        // rows above the bound are older than what the cursor knows
        let (s, bad) = summarise(
            &[1, 2],
            vec![
                live(1, 10, 1, "w1:1234", None),
                ended(1, t("2024-01-01 00:00:01")),
                ended(2, t("2023-01-01 00:00:00")),
            ],
            Some(&c),
        );
        assert!(bad.is_empty());
        assert_eq!(s[&1].live.keys().copied().collect::<Vec<_>>(), vec![10]);
        assert_eq!(
            s[&1].last_end,
            t("2024-01-01 00:00:05"),
            "only moves forward"
        );
        assert_eq!(s[&2].last_end, t("2024-01-01 00:00:09"));
    }

    #[test]
    fn live_tasks_in_any_order_and_repeated_keep_the_last_row_read() {
        // the reads of a sweep run at once: a workflow's rows come in any
        // order, and a task read twice (with its workflow's rows and by id)
        // is what its last row says
        let (s, bad) = summarise(
            &[1],
            vec![
                live(1, 30, 1, "w3:1234", None),
                live(1, 10, 0, "w1:1234", None),
                live(1, 20, 1, "w2:1234", None),
                live(1, 10, 1, "w9:1234", None),
            ],
            None,
        );
        assert!(bad.is_empty());
        let live: Vec<(i64, i32, &str)> = s[&1]
            .live
            .iter()
            .map(|(id, t)| (*id, t.state, t.host.as_deref().unwrap_or_default()))
            .collect();
        assert_eq!(
            live,
            vec![(10, 1, "w9:1234"), (20, 1, "w2:1234"), (30, 1, "w3:1234")]
        );
    }

    #[test]
    fn an_undecodable_row_leaves_its_workflow_without_summary() {
        let (s, bad) = summarise(
            &[1, 2],
            vec![
                live(1, 10, 1, "w1:1234", None),
                SumRow {
                    wf: 1,
                    item: Err(SumError {
                        task: None,
                        error: "bad date".into(),
                    }),
                },
                ended(2, None),
            ],
            None,
        );
        assert!(!s.contains_key(&1));
        assert!(s.contains_key(&2));
        assert_eq!(bad.len(), 1);
        assert!(bad[0].1.contains("bad date"), "{bad:?}");
    }

    #[test]
    fn candidates_count_states_and_keep_live_hosts_of_task_states() {
        let s = Summary {
            live: [
                (
                    10,
                    LiveTask {
                        state: 1,
                        host: Some("w1:1234".into()),
                    },
                ),
                (
                    11,
                    LiveTask {
                        state: 1,
                        host: Some("w1:1234".into()),
                    },
                ),
                (
                    12,
                    LiveTask {
                        state: 0,
                        host: Some("w2:1234".into()),
                    },
                ),
                (
                    13,
                    LiveTask {
                        state: 17,
                        host: Some("NULL".into()),
                    },
                ),
            ]
            .into(),
            last_end: t("2024-01-01 00:00:05"),
        };
        let c = candidate(
            WorkflowCandidate::new(7, 1, Some("m:5678")),
            &s,
            &[1, 17],
            "UTC".parse::<Zone>().unwrap(),
        );
        assert_eq!(c.tasks_by_state, [(0, 1), (1, 2), (17, 1)].into());
        assert_eq!(c.live_task_hosts, vec!["w1:1234".to_string()]);
        assert_eq!(
            c.last_task_end.map(|t| t.to_rfc3339()),
            Some("2024-01-01T00:00:05+00:00".into())
        );
    }

    #[test]
    fn tracked_states_add_the_candidates_to_the_non_terminal_ones() {
        assert_eq!(
            tracked_states(DsLine::V3_3, &[1, 2, 4]),
            vec![0, 1, 2, 4, 14, 17, 18]
        );
        assert_eq!(
            tracked_states(DsLine::V1_3, &[1, 3]),
            vec![0, 1, 2, 3, 4, 10, 11]
        );
    }
}
