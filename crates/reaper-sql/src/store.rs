//! The engine's [`TaskStore`] port on DS's database: a [`Db`] plus the
//! incremental sweeps' cursors (tasks, workflows), which the store keeps.

use crate::cursor::{CursorStats, SweepCursor};
use crate::workflow::{WorkflowCursor, WorkflowCursorStats};
use crate::Db;
use reaper_core::anomaly::AnomalyRows;
use reaper_core::ports::{
    BoxFuture, FollowUpOutcome, FollowUpRequest, LiveMaster, PortError, Scan, SchemaInfo, TaskRow,
    TaskStore, TaskWrite, WorkflowOutcome, WriteOutcome,
};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{Candidate, DsLine, Instant};
use tokio::sync::Mutex;

/// DS's database as the engine's [`TaskStore`].
///
/// `candidates(…, Scan::Incremental)` is [`Db::incremental`] and
/// `candidates(…, Scan::Full)` is [`Db::full_scan`], both on the store's own
/// cursor, which is held for the whole read: sweeps never interleave on it,
/// and a read that fails leaves it as it was. `scan_once` is a full scan on a
/// fresh cursor (`check`), leaving the sweep's alone.
///
/// `workflow_candidates` works the same way on a cursor of its own
/// ([`WorkflowCursor`]): [`Db::workflow_incremental`] or
/// [`Db::workflow_full_scan`].
#[derive(Debug)]
pub struct SqlStore {
    db: Db,
    cursor: Mutex<SweepCursor>,
    wf_cursor: Mutex<WorkflowCursor>,
    /// The latest candidate read's other live rows (SPEC §16).
    others: std::sync::Mutex<Vec<Candidate>>,
}

impl SqlStore {
    pub fn new(db: Db) -> Self {
        Self::with_cursor(db, SweepCursor::new())
    }

    /// A store whose sweeps continue from `cursor` (a restart from a
    /// persisted mark, a benchmark of a given range).
    pub fn with_cursor(db: Db, cursor: SweepCursor) -> Self {
        SqlStore {
            db,
            cursor: Mutex::new(cursor),
            wf_cursor: Mutex::new(WorkflowCursor::new()),
            others: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The adapter itself, for what the port does not cover (`ds-sim`,
    /// benchmarks, the schema's zone).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The sweep cursor's figures (waits for a sweep in progress).
    pub async fn cursor_stats(&self) -> CursorStats {
        self.cursor.lock().await.stats()
    }

    /// A copy of the sweep cursor (waits for a sweep in progress).
    pub async fn cursor(&self) -> SweepCursor {
        self.cursor.lock().await.clone()
    }

    /// Replaces the sweep cursor, returning the previous one.
    pub async fn set_cursor(&self, cursor: SweepCursor) -> SweepCursor {
        std::mem::replace(&mut *self.cursor.lock().await, cursor)
    }

    /// The workflow sweep cursor's figures (waits for a sweep in progress).
    pub async fn workflow_cursor_stats(&self) -> WorkflowCursorStats {
        self.wf_cursor.lock().await.stats()
    }

    /// A copy of the workflow sweep cursor (waits for a sweep in progress).
    pub async fn workflow_cursor(&self) -> WorkflowCursor {
        self.wf_cursor.lock().await.clone()
    }

    /// Replaces the workflow sweep cursor, returning the previous one.
    pub async fn set_workflow_cursor(&self, cursor: WorkflowCursor) -> WorkflowCursor {
        std::mem::replace(&mut *self.wf_cursor.lock().await, cursor)
    }
}

impl SqlStore {
    fn keep_others(&self, others: Vec<Candidate>) {
        *self.others.lock().unwrap_or_else(|e| e.into_inner()) = others;
    }
}

impl TaskStore for SqlStore {
    fn detect(&self) -> BoxFuture<'_, Result<SchemaInfo, PortError>> {
        Box::pin(async move { Ok(self.db.detect().await?) })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), PortError>> {
        Box::pin(async move { Ok(self.db.ping().await?) })
    }

    fn candidates<'a>(
        &'a self,
        line: DsLine,
        states: &'a [i32],
        scan: Scan,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, PortError>> {
        Box::pin(async move {
            let mut cursor = self.cursor.lock().await;
            let found = match scan {
                Scan::Incremental => self.db.incremental(line, states, &mut cursor).await?,
                Scan::Full => self.db.full_scan(line, states, &mut cursor).await?,
            };
            self.keep_others(cursor.take_others());
            Ok(found)
        })
    }

    fn scan_once<'a>(
        &'a self,
        line: DsLine,
        states: &'a [i32],
    ) -> BoxFuture<'a, Result<Vec<Candidate>, PortError>> {
        Box::pin(async move {
            let mut fresh = SweepCursor::new();
            let found = self.db.full_scan(line, states, &mut fresh).await?;
            self.keep_others(fresh.take_others());
            Ok(found)
        })
    }

    fn task(&self, line: DsLine, id: i64) -> BoxFuture<'_, Result<Option<TaskRow>, PortError>> {
        Box::pin(async move { Ok(self.db.task(line, id).await?) })
    }

    fn write_tasks<'a>(
        &'a self,
        line: DsLine,
        writes: &'a [TaskWrite],
    ) -> BoxFuture<'a, Result<Vec<WriteOutcome>, PortError>> {
        Box::pin(async move { Ok(self.db.write_tasks(line, writes).await?) })
    }

    fn write_tasks_after<'a>(
        &'a self,
        line: DsLine,
        writes: &'a [TaskWrite],
        before_write: reaper_core::ports::WriteGate<'a>,
    ) -> BoxFuture<'a, Result<Vec<WriteOutcome>, PortError>> {
        Box::pin(async move {
            Ok(self
                .db
                .write_tasks_after(line, writes, before_write)
                .await?)
        })
    }

    fn follow_up<'a>(
        &'a self,
        line: DsLine,
        req: &'a FollowUpRequest,
        live_master: LiveMaster<'a>,
    ) -> BoxFuture<'a, Result<FollowUpOutcome, PortError>> {
        Box::pin(async move { Ok(self.db.follow_up(line, req, live_master).await?) })
    }

    fn rows_skipped(&self) -> Vec<(String, u64)> {
        self.db.rows_skipped()
    }

    fn workflow_candidates<'a>(
        &'a self,
        line: DsLine,
        states: &'a [i32],
        task_states: &'a [i32],
        scan: Scan,
    ) -> BoxFuture<'a, Result<Vec<WorkflowCandidate>, PortError>> {
        Box::pin(async move {
            // a read that fails leaves the cursor as it was
            let mut cursor = self.wf_cursor.lock().await;
            let found = match scan {
                Scan::Incremental => {
                    self.db
                        .workflow_incremental(line, states, task_states, &mut cursor)
                        .await?
                }
                Scan::Full => {
                    self.db
                        .workflow_full_scan(line, states, task_states, &mut cursor)
                        .await?
                }
            };
            Ok(found)
        })
    }

    fn workflow<'a>(
        &'a self,
        line: DsLine,
        id: i64,
        task_states: &'a [i32],
    ) -> BoxFuture<'a, Result<Option<WorkflowCandidate>, PortError>> {
        Box::pin(async move { Ok(self.db.workflow(line, id, task_states).await?) })
    }

    fn ghost_rows<'a>(
        &'a self,
        line: DsLine,
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<reaper_core::ghost::GhostRead, PortError>> {
        Box::pin(async move { Ok(self.db.ghost_rows(line, ids).await?) })
    }

    fn tenants<'a>(
        &'a self,
        line: DsLine,
        workflow_ids: &'a [i64],
    ) -> BoxFuture<'a, Result<std::collections::BTreeMap<i64, String>, PortError>> {
        Box::pin(async move { Ok(self.db.tenants(line, workflow_ids).await?) })
    }

    fn anomaly_rows(&self, line: DsLine) -> BoxFuture<'_, Result<AnomalyRows, PortError>> {
        Box::pin(async move {
            let serial = self.db.serial_waits(line).await?;
            // moved out, not copied: a starved queue can hold many rows
            let others =
                std::mem::take(&mut *self.others.lock().unwrap_or_else(|e| e.into_inner()));
            Ok(AnomalyRows { others, serial })
        })
    }

    fn recover_workflow<'a>(
        &'a self,
        line: DsLine,
        seen: &'a WorkflowCandidate,
        now: Instant,
        live_master: LiveMaster<'a>,
    ) -> BoxFuture<'a, Result<WorkflowOutcome, PortError>> {
        Box::pin(async move {
            Ok(self
                .db
                .recover_workflow(line, seen, now, live_master)
                .await?)
        })
    }
}
