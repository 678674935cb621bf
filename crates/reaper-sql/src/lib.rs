//! The database side of ds-reaper: line detection from the schema, candidate
//! reads (a cheap incremental sweep and a keyset-paged full scan), conditional
//! task writes and the workflow follow-ups of SPEC §5, for MySQL/MariaDB and
//! PostgreSQL; [`SqlStore`] serves them to the engine as its
//! [`TaskStore`](reaper_core::ports::TaskStore).
//!
//! Two typed sqlx pools are used rather than `sqlx::Any`, which neither
//! translates placeholders nor decodes DS's column types. Every statement is
//! written once (`stmt`, `write`, `follow::tx`) with a small builder that binds
//! values and renders the dialect's placeholders (`sql`); what really differs
//! between the two databases is in `dialect`. Table and column identifiers
//! come from `schema`: structural names by line, and the columns that releases
//! of a line add or drop from the catalog of the connected database (SPEC
//! §4.10), never from input.
//!
//! Every database call runs under a time limit (SPEC §4.11): the server's own
//! (set on each new connection) and, on top, a client-side one around each
//! statement or transaction, so a call returns [`SqlError::Timeout`] instead
//! of hanging whatever the server does.

/// Runs `$body` (a future using `$c: &mut <Connection>`) on a connection of
/// `$pool` under the client-side limit. A connection whose call timed out is
/// closed rather than reused: its statement may still be running.
macro_rules! limited {
    ($db:expr, $what:expr, $pool:expr, |$c:ident| $body:expr) => {{
        let db: &$crate::Db = $db;
        let mut conn = db.acquire($pool, $what).await?;
        let limit = db.limit;
        let fut = async {
            let $c = &mut *conn;
            $body.await
        };
        match limit {
            None => fut.await,
            Some(l) => match tokio::time::timeout(l, fut).await {
                Ok(r) => r,
                Err(_) => {
                    conn.close_on_drop();
                    Err($crate::SqlError::client_timeout($what, l))
                }
            },
        }
    }};
}

/// Runs `$body` on a connection of the database's pool under the client-side
/// limit, with `$D` naming the pool's [`dialect::Dialect`] inside it.
macro_rules! with_conn {
    ($db:expr, $what:expr, |$c:ident : $D:ident| $body:expr) => {{
        let db: &$crate::Db = $db;
        match &db.pool {
            $crate::Pool::My(p) => {
                type $D = $crate::dialect::MySql;
                limited!(db, $what, p, |$c| $body)
            }
            $crate::Pool::Pg(p) => {
                type $D = $crate::dialect::Postgres;
                limited!(db, $what, p, |$c| $body)
            }
        }
    }};
}

mod anomaly;
pub mod connect;
mod cursor;
mod detect;
mod dialect;
mod error;
mod follow;
mod ghost;
mod read;
mod schema;
mod settings;
mod sql;
mod stmt;
mod store;
mod tenant;
mod workflow;
mod write;

use dialect::{Conn, Dialect};
use read::BadRow;
use schema::Catalog;
use sqlx::pool::PoolConnection;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use connect::{redact_url, DbKind};
pub use cursor::{CursorStats, SweepCursor};
pub use detect::detect_lines;
pub use error::{SqlError, TimeoutSide};
pub use follow::{CommandRow, Val};
pub use settings::DbSettings;
pub use store::SqlStore;
pub use workflow::{WorkflowCursor, WorkflowCursorStats};
// The domain types at the seam live in the core, with the port they serve.
pub use reaper_core::ports::{
    FollowUpOutcome, FollowUpRequest, SchemaInfo, TaskRow, TaskWrite, WorkflowOutcome, WriteOutcome,
};

/// Rows per page of a keyset-paged read.
pub(crate) const PAGE: i64 = 5000;
/// Ids per `id IN (...)` statement.
pub(crate) const ID_BATCH: usize = 1000;
/// Ids per statement of a conditional write: larger than [`ID_BATCH`] because a
/// mass write is latency-bound by round trips (MySQL allows 65,535 placeholders).
pub(crate) const WRITE_BATCH: usize = 5000;
/// Added to `statement_timeout` for the client-side limit, so that the
/// server's own limit, which leaves the connection usable, normally fires
/// first.
const CLIENT_MARGIN: Duration = Duration::from_secs(1);

/// Undecodable rows seen, each logged and counted once.
#[derive(Debug, Default)]
struct Skipped {
    seen: HashSet<(&'static str, i64)>,
    counts: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Bumped by every new server connection (the pools' `after_connect`):
    /// a catalog learned at an older value is learned again before use, so
    /// the columns are re-read after every reconnect.
    epoch: Arc<AtomicU64>,
    catalog: RwLock<Option<Arc<Catalog>>>,
    skipped: Mutex<Skipped>,
    /// Fault injection for tests: a task write's call hangs after its
    /// COMMIT, so that the client-side limit fires on a committed write.
    hang_after_write_commit: std::sync::atomic::AtomicBool,
}

#[derive(Clone)]
enum Pool {
    My(sqlx::MySqlPool),
    Pg(sqlx::PgPool),
}

#[derive(Clone)]
pub struct Db {
    pool: Pool,
    zone: reaper_core::Zone,
    /// Client-side limit of one statement or transaction; `None` when
    /// `statement_timeout` is zero (no limit).
    limit: Option<Duration>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db").field("kind", &self.kind()).finish()
    }
}

impl Db {
    /// Builds a lazy pool: a bad URL is an error, an unreachable server is not
    /// (it shows on use).
    pub fn connect_lazy(s: &DbSettings) -> Result<Db, SqlError> {
        let shared = Arc::new(Shared::default());
        let epoch = shared.epoch.clone();
        let pool = match s.kind() {
            Some(DbKind::MySql) => Pool::My(dialect::connect_lazy::<dialect::MySql>(s, epoch)?),
            Some(DbKind::Postgres) => {
                Pool::Pg(dialect::connect_lazy::<dialect::Postgres>(s, epoch)?)
            }
            None => {
                return Err(SqlError::BadUrl(format!(
                    "{} (expected mysql://, postgres:// or postgresql://)",
                    redact_url(&s.url)
                )))
            }
        };
        let limit = (!s.statement_timeout.is_zero()).then(|| s.statement_timeout + CLIENT_MARGIN);
        Ok(Db {
            pool,
            zone: s.zone,
            limit,
            shared,
        })
    }

    /// Fault injection for tests only: while on, every task write hangs
    /// after its transaction committed, until the client-side limit fires.
    #[doc(hidden)]
    pub fn test_hang_after_write_commit(&self, on: bool) {
        self.shared
            .hang_after_write_commit
            .store(on, Ordering::Release);
    }

    pub fn kind(&self) -> DbKind {
        match self.pool {
            Pool::My(_) => DbKind::MySql,
            Pool::Pg(_) => DbKind::Postgres,
        }
    }

    pub fn zone(&self) -> reaper_core::Zone {
        self.zone
    }

    async fn acquire<D: sqlx::Database>(
        &self,
        p: &sqlx::Pool<D>,
        what: &str,
    ) -> Result<PoolConnection<D>, SqlError> {
        match self.limit {
            None => Ok(p.acquire().await?),
            Some(l) => match tokio::time::timeout(l, p.acquire()).await {
                Ok(r) => Ok(r?),
                Err(_) => Err(SqlError::client_timeout(
                    &format!("getting a connection for {what}"),
                    l,
                )),
            },
        }
    }

    pub async fn ping(&self) -> Result<(), SqlError> {
        with_conn!(self, "ping", |c: D| stmt::ping::<D>(c))
    }

    /// Reads the catalog and keeps it, stamped with the connection generation
    /// it was read on.
    async fn learn(&self) -> Result<(Arc<Catalog>, Option<String>), SqlError> {
        let epoch = &self.shared.epoch;
        // The generation is read on the connection that reads the catalog,
        // after that connection's own bump: a connection opened meanwhile
        // leaves the result stale, and it is read once more.
        let (cat, version, at) = with_conn!(self, "reading the schema catalog", |c: D| async {
            let at = epoch.load(Ordering::Acquire);
            let (cat, v) = stmt::schema_facts::<D>(c).await?;
            Ok::<_, SqlError>((cat, v, at))
        })?;
        Ok((self.store_catalog(cat, at), version))
    }

    fn store_catalog(&self, mut cat: Catalog, epoch: u64) -> Arc<Catalog> {
        cat.epoch = epoch;
        let cat = Arc::new(cat);
        *self
            .shared
            .catalog
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(cat.clone());
        cat
    }

    /// The learned catalog, unless a connection was opened since it was
    /// learned (a reconnect may reach an upgraded or a different server).
    fn cached_catalog(&self) -> Option<Arc<Catalog>> {
        let now = self.shared.epoch.load(Ordering::Acquire);
        self.shared
            .catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|c| c.epoch == now)
    }

    /// The catalog, learned again first when it is missing or stale. An
    /// unlearnable catalog is an error before any statement that needs it.
    async fn catalog(&self) -> Result<Arc<Catalog>, SqlError> {
        match self.cached_catalog() {
            Some(c) => Ok(c),
            None => Ok(self.learn().await?.0),
        }
    }

    /// The catalog for a statement about to run on connection `c`: the cached
    /// one if no connection was opened since it was learned, else learned
    /// again on `c` itself. Checked after `c` was acquired, so a write never
    /// runs on a reconnected session with columns learned before the reconnect.
    async fn catalog_on<D: Dialect>(&self, c: &mut Conn<D>) -> Result<Arc<Catalog>, SqlError> {
        match self.cached_catalog() {
            Some(cat) => Ok(cat),
            None => {
                let at = self.shared.epoch.load(Ordering::Acquire);
                let (cat, _) = stmt::schema_facts::<D>(c).await?;
                Ok(self.store_catalog(cat, at))
            }
        }
    }

    /// Undecodable rows skipped so far, per table (`ds_reaper_rows_skipped_total{table}`):
    /// each distinct row counts once, however often it is read again.
    pub fn rows_skipped(&self) -> Vec<(String, u64)> {
        let s = self
            .shared
            .skipped
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        s.counts.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    /// Logs and counts the rows of `bad` not seen before.
    fn note_skipped(&self, table: &'static str, bad: &[BadRow]) {
        if bad.is_empty() {
            return;
        }
        let mut s = self
            .shared
            .skipped
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for b in bad {
            if s.seen.insert((table, b.id)) {
                *s.counts.entry(table).or_default() += 1;
                tracing::warn!(table, id = b.id, error = %b.error,
                    "skipping a row that cannot be decoded (logged once per row)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_url_is_an_error() {
        let s = DbSettings {
            url: "sqlite://x".into(),
            password: None,
            max_connections: 1,
            statement_timeout: Duration::from_secs(1),
            zone: reaper_core::Zone::Local,
        };
        assert!(matches!(Db::connect_lazy(&s), Err(SqlError::BadUrl(_))));
    }
}
