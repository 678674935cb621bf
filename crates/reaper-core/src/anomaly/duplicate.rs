//! `duplicate_attempt`: one task of a workflow instance with two live rows,
//! or with processes on two workers.

use super::{
    row_since, Anomaly, AnomalyEvidence, AnomalyKind, AnomalySettings, Tasks, MAX_TASK_IDS,
};
use crate::agent::AgentSeen;
use crate::candidate::Candidate;
use crate::host;
use crate::line::DsLine;
use crate::view::RegistryView;
use crate::Instant;
use std::collections::{BTreeMap, HashMap};

/// The task of the definition a row runs: `task_code` (2.0+), else — 1.x,
/// whose DAG keys its tasks by name within a definition — the name.
fn task_identity(line: DsLine, c: &Candidate) -> Option<String> {
    match c.task_code {
        Some(code) => Some(code.to_string()),
        None if line <= DsLine::V1_3 && !c.name.is_empty() => Some(c.name.to_string()),
        None => None,
    }
}

/// [`task_identity`] without an allocation, for grouping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ident<'a> {
    Code(i64),
    Name(&'a str),
}

fn ident(line: DsLine, c: &Candidate) -> Option<(i64, Ident<'_>)> {
    let wf = c.workflow_instance_id?;
    let task = match c.task_code {
        Some(code) => Ident::Code(code),
        None if line <= DsLine::V1_3 && !c.name.is_empty() => Ident::Name(&c.name),
        None => return None,
    };
    Some((wf, task))
}

pub(super) fn duplicate_rows(line: DsLine, tasks: &Tasks, now: Instant) -> Vec<Anomaly> {
    // Every live row goes through here each sweep and almost none has a
    // twin: group positions (4 bytes a row) sorted by identity, not a map
    // entry with an owned key and a vector per row (~14 MiB at 100,000
    // rows, at the sweep's peak). Only the groups of two or more get keys.
    let mut order: Vec<u32> = (0..tasks.len() as u32)
        .filter(|&i| ident(line, tasks.get(i as usize)).is_some())
        .collect();
    order.sort_unstable_by(|&a, &b| {
        ident(line, tasks.get(a as usize)).cmp(&ident(line, tasks.get(b as usize)))
    });
    let mut groups: BTreeMap<(i64, String), Vec<&Candidate>> = BTreeMap::new();
    for run in order
        .chunk_by(|&a, &b| ident(line, tasks.get(a as usize)) == ident(line, tasks.get(b as usize)))
    {
        if run.len() < 2 {
            continue;
        }
        let first = tasks.get(run[0] as usize);
        let (Some(wf), Some(task)) = (first.workflow_instance_id, task_identity(line, first))
        else {
            continue;
        };
        groups
            .entry((wf, task))
            .or_default()
            .extend(run.iter().map(|&i| tasks.get(i as usize)));
    }
    drop(order);
    groups
        .into_iter()
        .filter(|(_, rows)| rows.len() >= 2)
        .map(|((wf, task), mut rows)| {
            rows.sort_by_key(|c| (row_since(c), c.id));
            // the duplication began when the second live row appeared
            let since = rows.get(1).and_then(|c| row_since(c));
            let mut hosts: Vec<String> = rows
                .iter()
                .filter_map(|c| c.host.as_deref().map(str::to_string))
                .filter(|h| !host::is_empty(Some(h)))
                .collect();
            hosts.sort();
            hosts.dedup();
            let mut by_state = BTreeMap::new();
            for c in &rows {
                let name = line
                    .state_name(c.state)
                    .map(str::to_string)
                    .unwrap_or_else(|| c.state.to_string());
                *by_state.entry(name).or_default() += 1;
            }
            Anomaly {
                kind: AnomalyKind::DuplicateAttempt,
                workflow_instance_id: Some(wf),
                task_ids: rows.iter().take(MAX_TASK_IDS).map(|c| c.id).collect(),
                count: rows.len() as i64,
                worker_group: rows[0].worker_group.as_deref().map(str::to_string),
                since,
                evidence: AnomalyEvidence {
                    task: Some(task),
                    hosts,
                    by_state,
                    seen_in: Some("rows".into()),
                    age_seconds: since.map(|s| (now - s).num_seconds()),
                    ..AnomalyEvidence::default()
                },
                owner_master: rows[0].workflow_host.as_deref().map(str::to_string),
            }
        })
        .collect()
}

/// One task's processes listed by the fresh agents of two or more workers.
pub(super) fn duplicate_listings(
    view: &RegistryView,
    tasks: &Tasks,
    now: Instant,
    settings: &AnomalySettings,
) -> Vec<Anomaly> {
    // Each fresh agent lists its worker's tasks each sweep (40,000 with
    // 2,000 agents x 20) and a task on two workers is rare: one flat list
    // sorted by task, no map entry nor worker name copied per listing.
    let mut listings: Vec<(i64, &str, &AgentSeen, i64)> = Vec::new();
    for (worker, a) in view
        .agents
        .iter()
        .filter(|(_, a)| a.fresh(now, settings.agent_stale_after))
    {
        let Some(report) = a.report.as_ref() else {
            continue;
        };
        listings.extend(
            report
                .tasks
                .iter()
                .map(|t| (t.task_id, worker.as_str(), &**a, t.workflow_instance_id)),
        );
    }
    listings.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut listed: Vec<(i64, i64, Vec<String>, Option<Instant>)> = Vec::new();
    for run in listings.chunk_by(|a, b| a.0 == b.0) {
        if run.len() < 2 {
            continue;
        }
        let mut at: Option<Instant> = None;
        for (id, _, a, _) in run {
            at = match (at, a.listed_in_streak(*id)) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
        }
        let workers = run.iter().map(|(_, w, _, _)| w.to_string()).collect();
        listed.push((run[0].0, run[0].3, workers, at));
    }
    drop(listings);
    if listed.is_empty() {
        return Vec::new();
    }
    let by_id: HashMap<i64, &Candidate> = tasks.iter().map(|c| (c.id, c)).collect();
    listed
        .into_iter()
        .map(|(id, wf, mut workers, at)| {
            workers.sort();
            let row = by_id.get(&id);
            Anomaly {
                kind: AnomalyKind::DuplicateAttempt,
                workflow_instance_id: Some(wf),
                task_ids: vec![id],
                count: workers.len() as i64,
                worker_group: row.and_then(|c| c.worker_group.as_deref().map(str::to_string)),
                since: at,
                evidence: AnomalyEvidence {
                    task: Some(id.to_string()),
                    hosts: workers,
                    seen_in: Some("agents".into()),
                    ..AnomalyEvidence::default()
                },
                owner_master: row.and_then(|c| c.workflow_host.as_deref().map(str::to_string)),
            }
        })
        .collect()
}
