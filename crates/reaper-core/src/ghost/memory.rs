//! What the daemon remembers of the listed tasks between sweeps: since when
//! each has been over and on how many reports, and whose rows it has read.

use super::{over, GhostPolicy, GhostRow};
use crate::agent::ReportMark;
use crate::view::RegistryView;
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What the daemon remembers of one listed task between sweeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Track {
    /// When a sweep first read the row as over (the daemon's clock).
    pub over_since: Instant,
    /// Fresh reports that arrived after `over_since` and listed the task.
    pub reports: u32,
    /// Arrival of the latest report counted.
    pub counted_to: Instant,
    /// When the latest kill order for it was written.
    pub ordered_at: Option<Instant>,
}

/// The memory of every listed task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GhostMemory {
    /// The tasks read as over, by (worker, task id).
    pub tracks: BTreeMap<(String, i64), Track>,
    /// Listed tasks whose row a read of this daemon found (SPEC §15: a
    /// vanished row is `no_row` only when it was seen, then gone). Kept while
    /// an agent lists the task, so bounded by the listed tasks.
    pub rows_seen: BTreeSet<i64>,
}

impl GhostMemory {
    pub fn new() -> Self {
        GhostMemory::default()
    }
}

/// A listed task's track, its reports counted on: each fresh report since
/// the last one counted that still lists the task is one more.
pub(super) fn counted(
    old: Option<&Track>,
    history: &VecDeque<ReportMark>,
    task_id: i64,
    now: Instant,
) -> Track {
    let mut track = old.cloned().unwrap_or(Track {
        over_since: now,
        reports: 0,
        counted_to: now,
        ordered_at: None,
    });
    for mark in history {
        if mark.received_at > track.counted_to && mark.tasks.binary_search(&task_id).is_ok() {
            track.reports += 1;
            track.counted_to = mark.received_at;
        }
    }
    track
}

/// `check`'s memory, which has seen no earlier sweep: a task counts as over
/// from its row's end (else its newer attempt's submit time) plus the clock
/// skew tolerance, and the agent's kept reports since then are counted. A
/// row with neither time (NEED_FAULT_TOLERANCE, another host) cannot be
/// judged in one look and is left to the daemon. A listed task without a
/// row counts from its oldest process's start: `check` never read its row
/// before, so it is only ever reported (`row_never_seen`).
pub fn check_memory(
    view: &RegistryView,
    rows: &BTreeMap<i64, GhostRow>,
    now: Instant,
    policy: &GhostPolicy,
) -> GhostMemory {
    let mut memory = GhostMemory {
        rows_seen: rows.keys().copied().collect(),
        ..GhostMemory::default()
    };
    for (worker, seen) in &view.agents {
        if !seen.fresh(now, policy.agent_stale_after) {
            continue;
        }
        for task in seen.report.iter().flat_map(|r| &r.tasks) {
            let since = match rows.get(&task.task_id) {
                None => chrono::DateTime::from_timestamp_millis(task.started_at),
                Some(r) if over(view, worker, Some(r)).is_some() => r
                    .end_time
                    .or_else(|| r.newer_attempt.as_ref().and_then(|n| n.submit_time))
                    .map(|t| t + delta(policy.clock_skew_tolerance)),
                Some(_) => None,
            };
            if let Some(since) = since {
                let at = since.min(now);
                memory.tracks.insert(
                    (worker.clone(), task.task_id),
                    Track {
                        over_since: at,
                        reports: 0,
                        counted_to: at,
                        ordered_at: None,
                    },
                );
            }
        }
    }
    memory
}

/// Marks an order as written at `at`, so that it is re-issued at most once
/// per `ghost_after` while no answer comes.
pub fn ordered(memory: &mut GhostMemory, worker: &str, task_id: i64, at: Instant) {
    if let Some(t) = memory.tracks.get_mut(&(worker.to_string(), task_id)) {
        t.ordered_at = Some(at);
    }
}
