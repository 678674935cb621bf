//! Workflow instances that cannot progress (SPEC §13), the database side:
//! candidates read like task candidates (a cheap incremental sweep and full
//! scans), each with a summary of its task rows; one workflow by id; and
//! `recover`, DS's own master failover of one workflow instance.
//!
//! The summaries never cost a query per workflow: one grouped statement per
//! chunk of workflow ids ([`Dialect::in_set`]). A full scan summarises every
//! tracked workflow's task rows — on PostgreSQL, whose task table has no
//! index on its workflow column, that is one scan of the task table — and an
//! incremental sweep reads only the task rows above the cursor's task bound
//! plus the live ones it knew, by id ([`WorkflowCursor`]), at the same time
//! as the workflow rows.

mod cursor;
mod extra;
mod stmt;

pub use cursor::{WorkflowCursor, WorkflowCursorStats};
pub(crate) use extra::{param_names_instance, running_child};

use crate::dialect::Dialect;
use crate::read::BadRow;
use crate::schema::Catalog;
use crate::{Db, SqlError, PAGE};
use cursor::{candidate, summarise, tracked_states, SumRows, Summary};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::DsLine;
use std::collections::{BTreeSet, HashMap};
use stmt::{TaskSel, WfPage};

/// Workflow rows read by a sweep, sorted into what the cursor tracks.
#[derive(Default)]
struct Sorted {
    /// Candidates (state in `states`) and the other non-terminal rows.
    rows: Vec<WorkflowCandidate>,
    known: BTreeSet<i64>,
    pending: BTreeSet<i64>,
}

fn sort_rows(rows: Vec<WorkflowCandidate>, states: &[i32], tracked: &[i32], out: &mut Sorted) {
    for w in rows {
        if states.contains(&w.state) {
            out.known.insert(w.id);
        } else if tracked.contains(&w.state) {
            out.pending.insert(w.id);
        } else {
            continue;
        }
        out.rows.push(w);
    }
}

impl Db {
    /// Ids per statement of an id-set read on this database.
    fn set_chunk(&self) -> usize {
        match self.pool {
            crate::Pool::My(_) => <crate::dialect::MySql as Dialect>::SET_CHUNK,
            crate::Pool::Pg(_) => <crate::dialect::Postgres as Dialect>::SET_CHUNK,
        }
    }

    async fn wf_tops(&self, line: DsLine) -> Result<(Option<i64>, Option<i64>), SqlError> {
        with_conn!(self, "reading the top task and workflow ids", |c: D| {
            stmt::tops::<D>(c, line)
        })
    }

    async fn wf_page(
        &self,
        line: DsLine,
        cat: &Catalog,
        tracked: &[i32],
        after: i64,
    ) -> Result<WfPage, SqlError> {
        let zone = self.zone;
        let page = with_conn!(self, "reading a page of workflow rows", |c: D| {
            stmt::page::<D>(c, line, cat, zone, tracked, after)
        })?;
        self.note_skipped(line.workflow_table(), &page.bad);
        Ok(page)
    }

    async fn wf_by_ids(
        &self,
        line: DsLine,
        cat: &Catalog,
        tracked: &[i32],
        ids: &[i64],
    ) -> Result<(Vec<WorkflowCandidate>, BTreeSet<i64>), SqlError> {
        let zone = self.zone;
        let mut rows = Vec::new();
        let mut bad = BTreeSet::new();
        for chunk in ids.chunks(self.set_chunk()) {
            let page = with_conn!(self, "reading workflow rows by id", |c: D| {
                stmt::by_ids::<D>(c, line, cat, zone, tracked, chunk)
            })?;
            self.note_skipped(line.workflow_table(), &page.bad);
            rows.extend(page.rows);
            bad.extend(page.bad.iter().filter(|b| b.may_be_live).map(|b| b.id));
        }
        Ok((rows, bad))
    }

    /// Keyset-paged read of workflow rows in `tracked` states above `after`:
    /// every page counts the rows it returned, decodable or not, so one bad
    /// row neither ends the read early nor hides the rows after it.
    async fn wf_scan_above(
        &self,
        line: DsLine,
        cat: &Catalog,
        tracked: &[i32],
        mut after: i64,
    ) -> Result<(Vec<WorkflowCandidate>, BTreeSet<i64>), SqlError> {
        let mut rows = Vec::new();
        let mut bad = BTreeSet::new();
        loop {
            let page = self.wf_page(line, cat, tracked, after).await?;
            rows.extend(page.rows);
            bad.extend(page.bad.iter().filter(|b| b.may_be_live).map(|b| b.id));
            match page.last_id {
                Some(id) => after = id,
                None => break,
            }
            if (page.raw as i64) < PAGE {
                break;
            }
        }
        Ok((rows, bad))
    }

    /// The grouped task rows of workflows `wfs` (above task id `above`), in
    /// chunks of the dialect's set size.
    async fn summary_rows(
        &self,
        line: DsLine,
        wfs: &[i64],
        above: Option<i64>,
    ) -> Result<SumRows, SqlError> {
        let mut out = SumRows::default();
        for ids in wfs.chunks(self.set_chunk()) {
            out.append(with_conn!(
                self,
                "reading the task rows of workflows",
                |c: D| { stmt::summary_rows::<D>(c, line, ids, above) }
            )?);
        }
        Ok(out)
    }

    /// Task rows by id, one by one.
    async fn tasks_by_id(&self, line: DsLine, ids: &[i64]) -> Result<SumRows, SqlError> {
        let mut out = SumRows::default();
        // the live tasks a summary knew are mostly still live
        out.reserve(ids.len());
        for chunk in ids.chunks(self.set_chunk()) {
            let page = with_conn!(self, "reading live task rows of workflows by id", |c: D| {
                stmt::task_rows::<D>(c, line, TaskSel::Ids(chunk))
            })?;
            out.append(page.rows);
        }
        Ok(out)
    }

    /// Every task row above `after`, one by one, keyset-paged on id.
    async fn tasks_above(&self, line: DsLine, mut after: i64) -> Result<SumRows, SqlError> {
        let mut out = SumRows::default();
        loop {
            let page = with_conn!(self, "reading the newest task rows", |c: D| {
                stmt::task_rows::<D>(c, line, TaskSel::Above(after))
            })?;
            out.append(page.rows);
            match page.last_id {
                Some(id) if page.raw as i64 >= PAGE => after = id,
                _ => break,
            }
        }
        Ok(out)
    }

    /// Workflows whose task rows could not be summarised: skipped this
    /// sweep, logged and counted once (under the workflow table), still tracked.
    fn note_bad_summaries(&self, line: DsLine, bad: &[(i64, String)]) {
        let rows: Vec<BadRow> = bad
            .iter()
            .map(|(id, why)| BadRow {
                id: *id,
                may_be_live: true,
                error: why.clone(),
            })
            .collect();
        self.note_skipped(line.workflow_table(), &rows);
    }

    /// The candidates of a sweep from its sorted rows and their summaries.
    fn wf_candidates(
        sorted: Sorted,
        states: &[i32],
        task_states: &[i32],
        summaries: &HashMap<i64, Summary>,
        zone: reaper_core::Zone,
    ) -> Vec<WorkflowCandidate> {
        let mut out: Vec<WorkflowCandidate> = sorted
            .rows
            .into_iter()
            .filter(|w| states.contains(&w.state))
            .filter_map(|w| {
                let s = summaries.get(&w.id)?;
                Some(candidate(w, s, task_states, zone))
            })
            .collect();
        out.sort_by_key(|w| w.id);
        out.dedup_by_key(|w| w.id);
        out
    }

    /// Full scan of the line's workflow table, keyset-paged on id: rows in
    /// the line's non-terminal states or in `states` (the candidates), each
    /// candidate with a summary of its task rows (`task_states` name the live
    /// ones whose hosts it lists). Resets the cursor's knowledge.
    pub async fn workflow_full_scan(
        &self,
        line: DsLine,
        states: &[i32],
        task_states: &[i32],
        cursor: &mut WorkflowCursor,
    ) -> Result<Vec<WorkflowCandidate>, SqlError> {
        if states.is_empty() {
            return Err(SqlError::Invalid("no workflow states to scan".into()));
        }
        let cat = self.catalog().await?;
        cat.require_workflow_reads(line)?;
        let tracked = tracked_states(line, states);
        let (tops, (rows, bad)) = tokio::try_join!(
            self.wf_tops(line),
            self.wf_scan_above(line, &cat, &tracked, 0)
        )?;
        let mut sorted = Sorted::default();
        sort_rows(rows, states, &tracked, &mut sorted);
        let ids: Vec<i64> = sorted.rows.iter().map(|w| w.id).collect();
        let sums = self.summary_rows(line, &ids, None).await?;
        let (summaries, bad_sums) = summarise(&ids, sums, None);
        self.note_bad_summaries(line, &bad_sums);
        let (known, pending) = (
            std::mem::take(&mut sorted.known),
            std::mem::take(&mut sorted.pending),
        );
        let mut out = Self::wf_candidates(sorted, states, task_states, &summaries, self.zone);
        self.fill_workflow_extras(line, &cat, &mut out).await?;
        cursor.replace(known, pending, bad, tops.1, tops.0, summaries);
        Ok(out)
    }

    /// Cheap sweep: workflow rows above the cursor's low-water mark by
    /// primary-key range plus the older ones it tracks (by id); their task
    /// rows above the cursor's task bound plus the live tasks it knew (by
    /// id), and all the task rows of a workflow it tracks without a summary.
    /// A cursor that never swept does a full scan.
    pub async fn workflow_incremental(
        &self,
        line: DsLine,
        states: &[i32],
        task_states: &[i32],
        cursor: &mut WorkflowCursor,
    ) -> Result<Vec<WorkflowCandidate>, SqlError> {
        let Some(mark) = cursor.ids.low_water() else {
            return self
                .workflow_full_scan(line, states, task_states, cursor)
                .await;
        };
        if states.is_empty() {
            return Err(SqlError::Invalid("no workflow states to scan".into()));
        }
        let cat = self.catalog().await?;
        cat.require_workflow_reads(line)?;
        let tracked = tracked_states(line, states);
        let old: Vec<i64> = {
            // few: the workflow rows a sweep tracks, not their tasks
            let (known, rest) = cursor.ids.old_tracked();
            known.iter().copied().chain(rest).collect()
        };
        // With a task bound, the task rows that can have changed are those
        // above it (read one by one: a few sweep intervals' worth) and the
        // live ones at or below it the summaries know (by id). Neither needs
        // the workflow ids: all reads run at once.
        let bound = cursor.task_bound();
        let known_live = bound.map_or_else(Vec::new, |b| cursor.live_tasks_at_or_below(b));
        let recent = async {
            match bound {
                Some(b) => self.tasks_above(line, b).await,
                None => Ok(SumRows::default()),
            }
        };
        let (tops, (range_rows, mut bad), (old_rows, bad_old), mut rows, again) = tokio::try_join!(
            self.wf_tops(line),
            self.wf_scan_above(line, &cat, &tracked, mark),
            self.wf_by_ids(line, &cat, &tracked, &old),
            recent,
            self.tasks_by_id(line, &known_live)
        )?;
        bad.extend(bad_old);
        rows.append(again);
        let mut sorted = Sorted::default();
        sort_rows(range_rows, states, &tracked, &mut sorted);
        sort_rows(old_rows, states, &tracked, &mut sorted);
        let ids: Vec<i64> = sorted
            .known
            .iter()
            .chain(sorted.pending.iter())
            .copied()
            .collect();
        // All the task rows (grouped) of a workflow those reads cannot
        // complete: every one without a bound; with one, a workflow tracked
        // below the mark without a summary (its summary failed to decode).
        // A workflow above the mark was inserted after the bound, and so
        // were its task rows.
        let whole: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|&w| !(bound.is_some() && (w > mark || cursor.summarised(w))))
            .collect();
        rows.append(self.summary_rows(line, &whole, None).await?);
        let (summaries, bad_sums) = summarise(&ids, rows, Some(cursor));
        self.note_bad_summaries(line, &bad_sums);
        let (known, pending) = (
            std::mem::take(&mut sorted.known),
            std::mem::take(&mut sorted.pending),
        );
        let mut out = Self::wf_candidates(sorted, states, task_states, &summaries, self.zone);
        self.fill_workflow_extras(line, &cat, &mut out).await?;
        cursor.replace(known, pending, bad, tops.1, tops.0, summaries);
        Ok(out)
    }

    /// One workflow instance by id in any state, with the summary of all its
    /// task rows. A row that exists but cannot be decoded (or whose task
    /// rows cannot) is [`SqlError::Undecodable`], not "not found".
    pub async fn workflow(
        &self,
        line: DsLine,
        id: i64,
        task_states: &[i32],
    ) -> Result<Option<WorkflowCandidate>, SqlError> {
        let cat = self.catalog().await?;
        cat.require_workflow_reads(line)?;
        let table = line.workflow_table();
        let zone = self.zone;
        let page = with_conn!(self, "reading a workflow row", |c: D| {
            stmt::by_ids::<D>(c, line, &cat, zone, &[], &[id])
        })?;
        if let Some(b) = page.bad.into_iter().next() {
            self.note_skipped(table, std::slice::from_ref(&b));
            return Err(SqlError::Undecodable {
                table: table.to_string(),
                id: b.id,
                reason: b.error,
            });
        }
        let Some(wf) = page.rows.into_iter().next() else {
            return Ok(None);
        };
        let rows = self.summary_rows(line, &[id], None).await?;
        let (summaries, bad) = summarise(&[id], rows, None);
        if let Some((_, why)) = bad.into_iter().next() {
            return Err(SqlError::Undecodable {
                table: table.to_string(),
                id,
                reason: why,
            });
        }
        let s = summaries.get(&id).cloned().unwrap_or_default();
        let mut out = [candidate(wf, &s, task_states, zone)];
        self.fill_workflow_extras(line, &cat, &mut out).await?;
        let [wf] = out;
        Ok(Some(wf))
    }
}
