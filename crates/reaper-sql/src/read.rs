//! Candidate reads (SPEC §3): the keyset-paged full scan, the incremental
//! sweep above the cursor's low-water mark plus the rows it tracks, and one
//! task by id. Undecodable rows are skipped, counted once and kept tracked
//! (SPEC §4.12).

use crate::cursor::SweepCursor;
use crate::schema::{Catalog, TASK};
use crate::{stmt, Db, SqlError, TaskRow, ID_BATCH, PAGE};
use reaper_core::IdSet;
use reaper_core::{Candidate, DsLine};
use std::sync::Mutex;

/// Which rows a page reads.
/// All pages read `flag = 1` rows in a non-finished state.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Select {
    /// `flag = 1 AND state NOT IN (finished)`.
    Unfinished,
}

/// A row a read returned but could not decode.
#[derive(Debug, Clone)]
pub(crate) struct BadRow {
    pub id: i64,
    /// Its `state` and `flag` alone do not rule it out as a candidate (they
    /// decode and say finished or flag 0 otherwise): it stays tracked.
    pub may_be_live: bool,
    pub error: String,
}

/// One statement's worth of task rows.
#[derive(Debug, Default)]
pub(crate) struct Page {
    pub rows: Vec<TaskRow>,
    /// Rows returned, decodable or not: a page is short only by this count.
    pub raw: usize,
    /// Id of the last row returned, decodable or not: where the next page starts.
    pub last_id: Option<i64>,
    pub bad: Vec<BadRow>,
}

impl Page {
    /// Whether `state`/`flag` (each possibly undecodable) leave a row possibly live.
    pub(crate) fn may_be_live(state: Option<i64>, flag: Option<i64>) -> bool {
        match (state, flag) {
            (Some(s), Some(f)) => f == 1 && !DsLine::is_finished_task_state(s as i32),
            _ => true,
        }
    }
}

/// What a read sorts its rows into, page by page: the whole table's rows are
/// never held twice (as read rows and again as candidates) — at 100,000 live
/// rows that second copy was the daemon's largest allocation.
///
/// The candidates are kept one vector per page and joined once, at their
/// exact count, when the read is done ([`Sorted::candidates`]): one growing
/// vector was copied whole each time it doubled, and a read that found more
/// rows than expected (the start-up full scan, which expects none; a burst
/// of new rows) held the old and the new copy at once — at 100,000 rows
/// ~16 MiB on top of the ~20 MiB the candidates themselves take.
#[derive(Debug, Default)]
pub(crate) struct Sorted {
    pages: Vec<Vec<Candidate>>,
    /// IdSet as read, sorted and made distinct once, by the cursor ([`IdSet`]).
    /// (The live ones are the candidates' own: [`known_ids`] takes them
    /// once the pages are joined, at their exact count, instead of a vector
    /// that doubled while the pages were all held.)
    pub pending: Vec<i64>,
    /// Undecodable rows that may still be live (SPEC §4.12).
    pub bad: Vec<i64>,
    /// `flag = 1` non-finished rows outside `states` (SPEC §16).
    pub others: Vec<Candidate>,
}

impl Sorted {
    fn page(&mut self, page: Page, states: &[i32]) {
        let mut out = Vec::with_capacity(page.rows.len());
        // Each row moved once, straight where it belongs: a full scan's page
        // is 5,000 rows, and sorting it through intermediate vectors held
        // it twice at the sweep's peak.
        for r in page.rows {
            if r.flag != 1 || DsLine::is_finished_task_state(r.task.state) {
                continue;
            }
            if states.contains(&r.task.state) {
                out.push(r.task);
            } else {
                // followed by id until it turns live; judged for SPEC §16
                self.pending.push(r.task.id);
                self.others.push(r.task);
            }
        }
        if !out.is_empty() {
            self.pages.push(out);
        }
        self.bad
            .extend(page.bad.iter().filter(|b| b.may_be_live).map(|b| b.id));
    }

    /// The candidates of every page, in the order read, in one vector of
    /// their exact count. Each page is freed as soon as it is moved, so the
    /// rows are never held twice.
    pub(crate) fn candidates(&mut self) -> Vec<Candidate> {
        let pages = std::mem::take(&mut self.pages);
        let mut out = Vec::with_capacity(pages.iter().map(Vec::len).sum());
        for p in pages {
            out.extend(p);
        }
        out
    }
}

/// The ids of the candidates read: the cursor's `known`.
fn known_ids(candidates: &[Candidate]) -> IdSet {
    IdSet::from(candidates.iter().map(|c| c.id).collect::<Vec<i64>>())
}

/// A [`Sorted`] filled by reads that run concurrently in one task; the lock
/// is only held while a decoded page is sorted in, never across an await.
struct Shared<'a>(&'a Mutex<Sorted>);

impl Shared<'_> {
    fn page(&self, page: Page, states: &[i32]) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .page(page, states);
    }
}

impl Db {
    async fn max_id(&self) -> Result<Option<i64>, SqlError> {
        with_conn!(self, "reading the top task id", |c: D| stmt::max_id::<D>(c))
    }

    async fn page(
        &self,
        line: DsLine,
        cat: &Catalog,
        sel: Select,
        after: i64,
    ) -> Result<Page, SqlError> {
        let zone = self.zone;
        let page = with_conn!(self, "reading a page of task rows", |c: D| stmt::page::<D>(
            c, line, cat, zone, sel, after
        ))?;
        self.note_skipped(TASK, &page.bad);
        Ok(page)
    }

    /// [`Db::by_ids`] for the crate's other modules.
    pub(crate) async fn reread_tasks(
        &self,
        line: DsLine,
        cat: &Catalog,
        ids: &[i64],
    ) -> Result<Page, SqlError> {
        self.by_ids(line, cat, ids).await
    }

    async fn by_ids(&self, line: DsLine, cat: &Catalog, ids: &[i64]) -> Result<Page, SqlError> {
        let zone = self.zone;
        let page = with_conn!(self, "reading task rows by id", |c: D| stmt::by_ids::<D>(
            c, line, cat, zone, ids
        ))?;
        self.note_skipped(TASK, &page.bad);
        Ok(page)
    }

    /// Fills `child_workflow_state` of the SUB_PROCESS / SUB_WORKFLOW rows
    /// of `rows` (SPEC §3) by a second read of those rows' ids only: the
    /// common sweep, which has none or few of them, pays nothing for it.
    async fn fill_children(
        &self,
        line: DsLine,
        cat: &Catalog,
        rows: &mut [Candidate],
    ) -> Result<(), SqlError> {
        let subs: Vec<(i64, Option<i64>)> = rows
            .iter()
            .filter(|c| line.is_sub_process_task(&c.task_type))
            .map(|c| (c.id, c.workflow_instance_id))
            .collect();
        if subs.is_empty() {
            return Ok(());
        }
        let mut states = std::collections::HashMap::new();
        for chunk in subs.chunks(ID_BATCH) {
            states.extend(with_conn!(
                self,
                "reading the child workflows of SUB_PROCESS tasks",
                |c: D| stmt::child_states::<D>(c, line, cat, chunk)
            )?);
        }
        for c in rows.iter_mut() {
            if let Some(s) = states.get(&c.id) {
                c.child_workflow_state = Some(*s);
            }
        }
        Ok(())
    }

    /// Keyset-paged read of `Select::Unfinished` rows above `after`, each
    /// page sorted into `into` as it arrives: every page counts the rows it
    /// returned, decodable or not, so one bad row neither ends the read early
    /// nor hides the rows after it.
    async fn scan_above(
        &self,
        line: DsLine,
        cat: &Catalog,
        mut after: i64,
        states: &[i32],
        into: Shared<'_>,
    ) -> Result<(), SqlError> {
        loop {
            let page = self.page(line, cat, Select::Unfinished, after).await?;
            let (last_id, raw) = (page.last_id, page.raw);
            into.page(page, states);
            match last_id {
                Some(id) => after = id,
                None => break,
            }
            if (raw as i64) < PAGE {
                break;
            }
        }
        Ok(())
    }

    /// Full scan, keyset-paged on id, of `flag = 1` rows in non-finished states
    /// joined with the owning workflow instance; those in `states` are the
    /// candidates. Resets the cursor's knowledge.
    pub async fn full_scan(
        &self,
        line: DsLine,
        states: &[i32],
        cursor: &mut SweepCursor,
    ) -> Result<Vec<Candidate>, SqlError> {
        if states.is_empty() {
            return Err(SqlError::Invalid("no states to scan".into()));
        }
        let cat = self.catalog().await?;
        cat.require_reads(line)?;
        let top_now = self.max_id().await?;
        // Non-finished rows outside `states` (SUBMITTED, DELAY, …) are read too,
        // so that the cursor can follow them by id until they turn live: the
        // table scan costs the same, the extra rows are few.
        let sorted = Mutex::new(Sorted::default());
        self.scan_above(line, &cat, 0, states, Shared(&sorted))
            .await?;
        let mut s = sorted.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut out = s.candidates();
        self.fill_children(line, &cat, &mut out).await?;
        cursor.replace(
            known_ids(&out),
            IdSet::from(s.pending),
            IdSet::from(s.bad),
            top_now,
        );
        cursor.set_others(s.others);
        Ok(out)
    }

    /// Cheap sweep: rows above the cursor's low-water mark by primary-key range,
    /// plus the older rows the cursor already tracks (by id), so one old zombie
    /// never drags the mark back. A cursor that never swept does a full scan.
    pub async fn incremental(
        &self,
        line: DsLine,
        states: &[i32],
        cursor: &mut SweepCursor,
    ) -> Result<Vec<Candidate>, SqlError> {
        let Some(mark) = cursor.low_water() else {
            return self.full_scan(line, states, cursor).await;
        };
        if states.is_empty() {
            return Err(SqlError::Invalid("no states to scan".into()));
        }
        let cat = self.catalog().await?;
        cat.require_reads(line)?;
        let (old_known, old_rest) = cursor.old_tracked();
        // The top id, the range above the mark and the tracked rows below it
        // are independent reads: with a pool of several connections they
        // overlap, so the sweep costs about as much as its range scan alone.
        // Both sort their pages into one set as they arrive.
        let sorted = Mutex::new(Sorted::default());
        let range = self.scan_above(line, &cat, mark, states, Shared(&sorted));
        let tracked = async {
            for chunk in old_known.chunks(ID_BATCH).chain(old_rest.chunks(ID_BATCH)) {
                let page = self.by_ids(line, &cat, chunk).await?;
                Shared(&sorted).page(page, states);
            }
            Ok::<_, SqlError>(())
        };
        let (top_now, (), ()) = tokio::try_join!(self.max_id(), range, tracked)?;
        drop(old_rest);
        let mut s = sorted.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut out = s.candidates();
        // ids are unique: unstable sorts the same, without a buffer of half the rows
        out.sort_unstable_by_key(|c| c.id);
        self.fill_children(line, &cat, &mut out).await?;
        cursor.replace(
            known_ids(&out),
            IdSet::from(s.pending),
            IdSet::from(s.bad),
            top_now,
        );
        cursor.set_others(s.others);
        Ok(out)
    }

    /// One task by id in any state, with its flag. A row that exists but
    /// cannot be decoded is [`SqlError::Undecodable`], not "not found".
    pub async fn task(&self, line: DsLine, id: i64) -> Result<Option<TaskRow>, SqlError> {
        let cat = self.catalog().await?;
        cat.require_reads(line)?;
        let page = self.by_ids(line, &cat, &[id]).await?;
        if let Some(b) = page.bad.into_iter().next() {
            return Err(SqlError::Undecodable {
                table: TASK.to_string(),
                id: b.id,
                reason: b.error,
            });
        }
        let Some(mut t) = page.rows.into_iter().next() else {
            return Ok(None);
        };
        self.fill_children(line, &cat, std::slice::from_mut(&mut t.task))
            .await?;
        Ok(Some(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(ids: std::ops::Range<i64>, state: i32) -> Page {
        let rows: Vec<TaskRow> = ids
            .map(|id| TaskRow {
                task: Candidate::new(id, "SHELL", state, Some("w1:1234")),
                flag: 1,
            })
            .collect();
        Page {
            raw: rows.len(),
            last_id: rows.last().map(|r| r.task.id),
            rows,
            bad: Vec::new(),
        }
    }

    #[test]
    fn pages_are_joined_in_read_order_at_their_exact_count() {
        let mut s = Sorted::default();
        // more rows than any first guess: the start-up full scan knows none
        for k in 0..7 {
            s.page(page(k * 1000..(k + 1) * 1000, 1), &[1]);
        }
        // a page of rows outside `states` adds no candidates, only pending ids
        s.page(page(7000..7010, 0), &[1]);
        let out = s.candidates();
        assert_eq!(out.len(), 7000);
        assert_eq!(
            out.capacity(),
            out.len(),
            "one allocation of the exact size"
        );
        assert!(out.iter().map(|c| c.id).eq(0..7000), "in the order read");
        assert_eq!(known_ids(&out).len(), 7000);
        assert_eq!(s.pending.len(), 10);
        assert!(s.pages.is_empty(), "the pages are gone once joined");
    }
}
