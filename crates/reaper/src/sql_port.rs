//! The SQL adapter behind the store port, with the incremental cursor.

use reaper_core::ports::{
    BoxFuture, FollowUpOutcome, FollowUpRequest, LiveMaster, PortError, Scan, SchemaInfo, TaskRow,
    TaskStore, TaskWrite, WriteOutcome,
};
use reaper_core::{Candidate, DsLine};
use reaper_sql::{Db, SqlError, SweepCursor};

pub struct SqlStore {
    db: Db,
    cursor: tokio::sync::Mutex<SweepCursor>,
}

impl SqlStore {
    pub fn new(db: Db) -> SqlStore {
        SqlStore {
            db,
            cursor: tokio::sync::Mutex::new(SweepCursor::new()),
        }
    }
}

fn port(e: SqlError) -> PortError {
    match e {
        SqlError::Invalid(_) | SqlError::BadUrl(_) | SqlError::SchemaMismatch(_) => {
            PortError::Invalid(e.to_string())
        }
        other => PortError::Unavailable(other.to_string()),
    }
}

impl TaskStore for SqlStore {
    fn detect(&self) -> BoxFuture<'_, Result<SchemaInfo, PortError>> {
        Box::pin(async move { self.db.detect().await.map_err(port) })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), PortError>> {
        Box::pin(async move { self.db.ping().await.map_err(port) })
    }

    fn candidates<'a>(
        &'a self,
        line: DsLine,
        states: &'a [i32],
        scan: Scan,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, PortError>> {
        Box::pin(async move {
            let mut cursor = self.cursor.lock().await;
            match scan {
                Scan::Full => self.db.full_scan(line, states, &mut cursor).await,
                Scan::Incremental => self.db.incremental(line, states, &mut cursor).await,
            }
            .map_err(port)
        })
    }

    fn scan_once<'a>(
        &'a self,
        line: DsLine,
        states: &'a [i32],
    ) -> BoxFuture<'a, Result<Vec<Candidate>, PortError>> {
        Box::pin(async move {
            let mut cursor = SweepCursor::new();
            self.db
                .full_scan(line, states, &mut cursor)
                .await
                .map_err(port)
        })
    }

    fn task(&self, line: DsLine, id: i64) -> BoxFuture<'_, Result<Option<TaskRow>, PortError>> {
        Box::pin(async move { self.db.task(line, id).await.map_err(port) })
    }

    fn write_tasks<'a>(
        &'a self,
        line: DsLine,
        writes: &'a [TaskWrite],
    ) -> BoxFuture<'a, Result<Vec<WriteOutcome>, PortError>> {
        Box::pin(async move { self.db.write_tasks(line, writes).await.map_err(port) })
    }

    fn follow_up<'a>(
        &'a self,
        line: DsLine,
        req: &'a FollowUpRequest,
        live_master: LiveMaster<'a>,
    ) -> BoxFuture<'a, Result<FollowUpOutcome, PortError>> {
        Box::pin(async move {
            self.db
                .follow_up(line, req, live_master)
                .await
                .map_err(port)
        })
    }

    fn rows_skipped(&self) -> Vec<(String, u64)> {
        self.db.rows_skipped()
    }
}
