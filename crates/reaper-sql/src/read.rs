//! Candidate reads (SPEC §3): the keyset-paged full scan, the incremental
//! sweep above the cursor's low-water mark plus the rows it tracks, and one
//! task by id. Undecodable rows are skipped, counted once and kept tracked
//! (SPEC §4.12).

use crate::cursor::{classify, SweepCursor};
use crate::schema::{Catalog, TASK};
use crate::{stmt, Db, SqlError, TaskRow, ID_BATCH, PAGE};
use reaper_core::{Candidate, DsLine};
use std::collections::BTreeSet;
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
#[derive(Debug, Default)]
pub(crate) struct Sorted {
    pub out: Vec<Candidate>,
    pub known: BTreeSet<i64>,
    pub pending: BTreeSet<i64>,
    /// Undecodable rows that may still be live (SPEC §4.12).
    pub bad: BTreeSet<i64>,
}

impl Sorted {
    /// Room for about `rows` candidates, so the vector is not regrown (and
    /// copied) while the read fills it.
    pub(crate) fn with_capacity(rows: usize) -> Self {
        Sorted {
            out: Vec::with_capacity(rows),
            ..Sorted::default()
        }
    }

    fn page(&mut self, page: Page, states: &[i32]) {
        classify(
            page.rows,
            states,
            &mut self.out,
            &mut self.known,
            &mut self.pending,
        );
        self.bad
            .extend(page.bad.iter().filter(|b| b.may_be_live).map(|b| b.id));
    }
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

    async fn by_ids(&self, line: DsLine, cat: &Catalog, ids: &[i64]) -> Result<Page, SqlError> {
        let zone = self.zone;
        let page = with_conn!(self, "reading task rows by id", |c: D| stmt::by_ids::<D>(
            c, line, cat, zone, ids
        ))?;
        self.note_skipped(TASK, &page.bad);
        Ok(page)
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
        let sorted = Mutex::new(Sorted::with_capacity(cursor.tracked() + PAGE as usize));
        self.scan_above(line, &cat, 0, states, Shared(&sorted))
            .await?;
        let s = sorted.into_inner().unwrap_or_else(|e| e.into_inner());
        cursor.replace(s.known, s.pending, s.bad, top_now);
        Ok(s.out)
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
        let old = cursor.old_tracked();
        // The top id, the range above the mark and the tracked rows below it
        // are independent reads: with a pool of several connections they
        // overlap, so the sweep costs about as much as its range scan alone.
        // Both sort their pages into one set as they arrive.
        let sorted = Mutex::new(Sorted::with_capacity(old.len() + PAGE as usize));
        let range = self.scan_above(line, &cat, mark, states, Shared(&sorted));
        let tracked = async {
            for chunk in old.chunks(ID_BATCH) {
                let page = self.by_ids(line, &cat, chunk).await?;
                Shared(&sorted).page(page, states);
            }
            Ok::<_, SqlError>(())
        };
        let (top_now, (), ()) = tokio::try_join!(self.max_id(), range, tracked)?;
        drop(old);
        let mut s = sorted.into_inner().unwrap_or_else(|e| e.into_inner());
        // ids are unique: unstable sorts the same, without a buffer of half the rows
        s.out.sort_unstable_by_key(|c| c.id);
        cursor.replace(s.known, s.pending, s.bad, top_now);
        Ok(s.out)
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
        Ok(page.rows.into_iter().next())
    }
}
