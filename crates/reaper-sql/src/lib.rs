//! The database side of ds-reaper: line detection from the schema, candidate
//! reads (a cheap incremental sweep and a keyset-paged full scan), conditional
//! task writes and the workflow follow-ups of SPEC §5, for MySQL/MariaDB and
//! PostgreSQL.
//!
//! Two typed sqlx pools are used rather than `sqlx::Any`, which neither
//! translates placeholders nor decodes DS's column types. All SQL text lives in
//! `mysql.rs` and `postgres.rs`; table and column identifiers come from
//! `schema`: structural names by line, and the columns that releases of a
//! line add or drop from the catalog of the connected database (SPEC §4.10),
//! never from input.
//!
//! Every database call runs under a time limit (SPEC §4.11): the server's own
//! (set on each new connection) and, on top, a client-side one around each
//! statement or transaction, so a call returns [`SqlError::Timeout`] instead
//! of hanging whatever the server does.

mod follow;
mod mysql;
mod postgres;
mod schema;

use reaper_core::{Candidate, DsLine, FollowUp, Zone};
use schema::{Catalog, TASK};
use sqlx::pool::PoolConnection;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use follow::{CommandRow, Val};
// The domain types at the seam live in the core, with the port they serve.
pub use reaper_core::ports::{
    FollowUpOutcome, FollowUpRequest, SchemaInfo, TaskRow, TaskWrite, WriteOutcome,
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

/// Which side of the connection stopped a call that ran too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutSide {
    /// The server's statement or lock-wait timeout.
    Server,
    /// The adapter's own limit (or no free connection in time).
    Client,
}

impl fmt::Display for TimeoutSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutSide::Server => "server",
            TimeoutSide::Client => "client",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("bad database URL: {0}")]
    BadUrl(String),
    #[error("database error: {0}")]
    Db(#[source] sqlx::Error),
    #[error("the schema matches no DolphinScheduler line: {0}")]
    UnknownSchema(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A statement, lock wait or transaction ran past `database.statement_timeout`.
    #[error("database call timed out ({side} side): {detail}")]
    Timeout { side: TimeoutSide, detail: String },
    /// The connected schema lacks a column the operation needs; nothing was written.
    #[error("schema mismatch: {0}")]
    SchemaMismatch(String),
    /// A row asked for by id cannot be decoded.
    #[error("{table} row {id} cannot be decoded: {reason}")]
    Undecodable {
        table: String,
        id: i64,
        reason: String,
    },
}

impl From<sqlx::Error> for SqlError {
    fn from(e: sqlx::Error) -> Self {
        if matches!(e, sqlx::Error::PoolTimedOut) {
            return SqlError::Timeout {
                side: TimeoutSide::Client,
                detail: "no database connection became free in time".into(),
            };
        }
        if is_server_timeout(&e) {
            return SqlError::Timeout {
                side: TimeoutSide::Server,
                detail: e.to_string(),
            };
        }
        SqlError::Db(e)
    }
}

/// The servers' own "took too long" errors: MySQL/MariaDB lock wait timeout
/// (1205), MariaDB `max_statement_time` (1969), MySQL `max_execution_time`
/// (3024); PostgreSQL `statement_timeout` (57014) and `lock_timeout` (55P03).
fn is_server_timeout(e: &sqlx::Error) -> bool {
    let Some(d) = e.as_database_error() else {
        return false;
    };
    if let Some(m) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(m.number(), 1205 | 1969 | 3024);
    }
    if d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some()
    {
        return matches!(d.code().as_deref(), Some("57014" | "55P03"));
    }
    false
}

impl SqlError {
    fn client_timeout(what: &str, limit: Duration) -> SqlError {
        SqlError::Timeout {
            side: TimeoutSide::Client,
            detail: format!("{what} did not finish within {limit:?}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    MySql,
    Postgres,
}

#[derive(Clone)]
pub struct DbSettings {
    /// `mysql://…`, `postgres://…` or `postgresql://…`.
    pub url: String,
    /// Overrides the URL's password (`password_file`).
    pub password: Option<String>,
    pub max_connections: u32,
    pub statement_timeout: Duration,
    pub zone: Zone,
}

impl fmt::Debug for DbSettings {
    // the password must never reach a log line
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbSettings")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("max_connections", &self.max_connections)
            .field("statement_timeout", &self.statement_timeout)
            .field("zone", &self.zone)
            .finish()
    }
}

/// The URL with any password replaced by `***`, for logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((cred, host)) => {
            let user = cred.split(':').next().unwrap_or("");
            if cred.contains(':') {
                format!("{scheme}://{user}:***@{host}{tail}")
            } else {
                format!("{scheme}://{user}@{host}{tail}")
            }
        }
        None => url.to_string(),
    }
}

/// What the incremental sweep remembers between passes.
///
/// `mark` lags one sweep behind the table's top id, so a row whose id was
/// allocated before a sweep but committed after it is still read by the next
/// one. Rows at or below the mark are re-read by id only while tracked:
/// `known` (live states), `pending` (other non-finished states, which may
/// turn live later) and `undecodable` (rows that could not be decoded and may
/// still be live: the mark moves past them, so they are re-read by id until
/// they decode, finish or go away — SPEC §4.12).
#[derive(Debug, Clone, Default)]
pub struct SweepCursor {
    mark: Option<i64>,
    top: Option<i64>,
    known: BTreeSet<i64>,
    pending: BTreeSet<i64>,
    undecodable: BTreeSet<i64>,
}

impl SweepCursor {
    pub fn new() -> Self {
        Self::default()
    }
    /// A cursor whose incremental sweeps start above `mark` (a restart, a benchmark).
    pub fn with_mark(mark: i64) -> Self {
        SweepCursor {
            mark: Some(mark),
            top: Some(mark),
            ..Self::default()
        }
    }
    /// Moves the low-water mark, keeping what the cursor tracks (a restart
    /// from a persisted mark, a benchmark of a given range).
    pub fn set_low_water(&mut self, mark: i64) {
        self.mark = Some(mark);
        self.top = Some(mark);
    }
    /// Ids at or below this are only re-read when tracked.
    pub fn low_water(&self) -> Option<i64> {
        self.mark
    }
    /// Live rows known to the cursor.
    pub fn tracked(&self) -> usize {
        self.known.len()
    }
    /// Non-finished, not (yet) live rows tracked by id.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
    /// Rows that could not be decoded, re-read by id on every incremental sweep.
    pub fn undecodable(&self) -> usize {
        self.undecodable.len()
    }

    fn advance(&mut self, top_now: Option<i64>) {
        let prev = self.top.or(top_now);
        self.mark = match (self.mark, prev) {
            (Some(m), Some(p)) => Some(m.max(p)),
            (m, p) => m.or(p).or(Some(0)),
        };
        if top_now.is_some() {
            self.top = top_now;
        }
    }

    fn old_tracked(&self) -> Vec<i64> {
        let mark = self.mark.unwrap_or(0);
        self.known
            .iter()
            .chain(self.pending.iter())
            .chain(self.undecodable.iter())
            .copied()
            .filter(|&id| id <= mark)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

/// Sorts read rows into candidates, pending ids, or nothing (finished / flag 0).
fn classify(
    rows: Vec<TaskRow>,
    states: &[i32],
    out: &mut Vec<Candidate>,
    known: &mut BTreeSet<i64>,
    pending: &mut BTreeSet<i64>,
) {
    for r in rows {
        if r.flag != 1 || DsLine::is_finished_task_state(r.row.state) {
            continue;
        }
        if states.contains(&r.row.state) {
            known.insert(r.row.id);
            out.push(r.row);
        } else {
            pending.insert(r.row.id);
        }
    }
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
}

#[derive(Clone)]
enum Pool {
    My(sqlx::MySqlPool),
    Pg(sqlx::PgPool),
}

#[derive(Clone)]
pub struct Db {
    pool: Pool,
    zone: Zone,
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

/// Runs `$body` (a future using `$c: &mut <Connection>`) on a connection of
/// `$pool` under the client-side limit. A connection whose call timed out is
/// closed rather than reused: its statement may still be running.
macro_rules! limited {
    ($db:expr, $what:expr, $pool:expr, |$c:ident| $body:expr) => {{
        let db: &Db = $db;
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
                    Err(SqlError::client_timeout($what, l))
                }
            },
        }
    }};
}

/// The catalog for a statement about to run on connection `$c`: the cached
/// one if no connection was opened since it was learned, else learned again
/// on `$c` itself. Checked after `$c` was acquired, so a write never runs on a
/// reconnected session with columns learned before the reconnect.
macro_rules! catalog_on {
    ($db:expr, $c:expr, $dialect:ident) => {{
        let db: &Db = $db;
        match db.cached_catalog() {
            Some(cat) => cat,
            None => {
                let at = db.shared.epoch.load(Ordering::Acquire);
                let (cat, _) = $dialect::schema_facts(&mut *$c).await?;
                db.store_catalog(cat, at)
            }
        }
    }};
}

impl Db {
    /// Builds a lazy pool: a bad URL is an error, an unreachable server is not
    /// (it shows on use).
    pub fn connect_lazy(s: &DbSettings) -> Result<Db, SqlError> {
        let lower = s.url.trim().to_ascii_lowercase();
        let shared = Arc::new(Shared::default());
        let epoch = shared.epoch.clone();
        let pool = if lower.starts_with("mysql://") || lower.starts_with("mariadb://") {
            Pool::My(mysql::connect_lazy(s, epoch)?)
        } else if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Pool::Pg(postgres::connect_lazy(s, epoch)?)
        } else {
            return Err(SqlError::BadUrl(format!(
                "{} (expected mysql://, postgres:// or postgresql://)",
                redact_url(&s.url)
            )));
        };
        let limit = (!s.statement_timeout.is_zero()).then(|| s.statement_timeout + CLIENT_MARGIN);
        Ok(Db {
            pool,
            zone: s.zone,
            limit,
            shared,
        })
    }

    pub fn kind(&self) -> DbKind {
        match self.pool {
            Pool::My(_) => DbKind::MySql,
            Pool::Pg(_) => DbKind::Postgres,
        }
    }

    pub fn zone(&self) -> Zone {
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
        match &self.pool {
            Pool::My(p) => limited!(self, "ping", p, |c| mysql::ping(c)),
            Pool::Pg(p) => limited!(self, "ping", p, |c| postgres::ping(c)),
        }
    }

    /// Line detection from the schema's structure; see [`detect_lines`].
    /// Also (re-)learns the columns every later read and write uses.
    pub async fn detect(&self) -> Result<SchemaInfo, SqlError> {
        let (cat, version_row) = self.learn().await?;
        let lines = detect_lines(&cat.tables, &cat.task_columns())?;
        Ok(SchemaInfo { lines, version_row })
    }

    /// Reads the catalog and keeps it, stamped with the connection generation
    /// it was read on.
    async fn learn(&self) -> Result<(Arc<Catalog>, Option<String>), SqlError> {
        let epoch = &self.shared.epoch;
        // The generation is read on the connection that reads the catalog,
        // after that connection's own bump: a connection opened meanwhile
        // leaves the result stale, and it is read once more.
        let (cat, version, at) = match &self.pool {
            Pool::My(p) => limited!(self, "reading the schema catalog", p, |c| async {
                let at = epoch.load(Ordering::Acquire);
                let (cat, v) = mysql::schema_facts(c).await?;
                Ok::<_, SqlError>((cat, v, at))
            }),
            Pool::Pg(p) => limited!(self, "reading the schema catalog", p, |c| async {
                let at = epoch.load(Ordering::Acquire);
                let (cat, v) = postgres::schema_facts(c).await?;
                Ok::<_, SqlError>((cat, v, at))
            }),
        }?;
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

    async fn max_id(&self) -> Result<Option<i64>, SqlError> {
        match &self.pool {
            Pool::My(p) => limited!(self, "reading the top task id", p, |c| mysql::max_id(c)),
            Pool::Pg(p) => limited!(self, "reading the top task id", p, |c| postgres::max_id(c)),
        }
    }

    async fn page(
        &self,
        line: DsLine,
        cat: &Catalog,
        sel: Select,
        after: i64,
    ) -> Result<Page, SqlError> {
        let zone = self.zone;
        let page = match &self.pool {
            Pool::My(p) => limited!(self, "reading a page of task rows", p, |c| mysql::page(
                c, line, cat, zone, sel, after
            )),
            Pool::Pg(p) => limited!(self, "reading a page of task rows", p, |c| postgres::page(
                c, line, cat, zone, sel, after
            )),
        }?;
        self.note_skipped(TASK, &page.bad);
        Ok(page)
    }

    async fn by_ids(&self, line: DsLine, cat: &Catalog, ids: &[i64]) -> Result<Page, SqlError> {
        let zone = self.zone;
        let page = match &self.pool {
            Pool::My(p) => limited!(self, "reading task rows by id", p, |c| mysql::by_ids(
                c, line, cat, zone, ids
            )),
            Pool::Pg(p) => limited!(self, "reading task rows by id", p, |c| postgres::by_ids(
                c, line, cat, zone, ids
            )),
        }?;
        self.note_skipped(TASK, &page.bad);
        Ok(page)
    }

    /// Keyset-paged read of `Select::Unfinished` rows above `after`: every
    /// page counts the rows it returned, decodable or not, so one bad row
    /// neither ends the read early nor hides the rows after it.
    async fn scan_above(
        &self,
        line: DsLine,
        cat: &Catalog,
        mut after: i64,
    ) -> Result<(Vec<TaskRow>, BTreeSet<i64>), SqlError> {
        let mut rows = Vec::new();
        let mut bad = BTreeSet::new();
        loop {
            let page = self.page(line, cat, Select::Unfinished, after).await?;
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
        let mut out = Vec::new();
        let mut known = BTreeSet::new();
        let mut pending = BTreeSet::new();
        // Non-finished rows outside `states` (SUBMITTED, DELAY, …) are read too,
        // so that the cursor can follow them by id until they turn live: the
        // table scan costs the same, the extra rows are few.
        let (rows, bad) = self.scan_above(line, &cat, 0).await?;
        classify(rows, states, &mut out, &mut known, &mut pending);
        cursor.known = known;
        cursor.pending = pending;
        cursor.undecodable = bad;
        cursor.advance(top_now);
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
        let Some(mark) = cursor.mark else {
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
        let range = self.scan_above(line, &cat, mark);
        let tracked = async {
            let mut rows = Vec::new();
            let mut bad = BTreeSet::new();
            for chunk in old.chunks(ID_BATCH) {
                let page = self.by_ids(line, &cat, chunk).await?;
                rows.extend(page.rows);
                bad.extend(page.bad.iter().filter(|b| b.may_be_live).map(|b| b.id));
            }
            Ok::<_, SqlError>((rows, bad))
        };
        let (top_now, (range_rows, mut bad), (tracked_rows, bad_old)) =
            tokio::try_join!(self.max_id(), range, tracked)?;
        bad.extend(bad_old);
        let mut out = Vec::new();
        let mut known = BTreeSet::new();
        let mut pending = BTreeSet::new();
        classify(range_rows, states, &mut out, &mut known, &mut pending);
        classify(tracked_rows, states, &mut out, &mut known, &mut pending);
        out.sort_by_key(|c| c.id);
        cursor.known = known;
        cursor.pending = pending;
        cursor.undecodable = bad;
        cursor.advance(top_now);
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
        Ok(page.rows.into_iter().next())
    }

    /// Conditional batch writes (SPEC §4.2); one outcome per input, in order.
    pub async fn write_tasks(
        &self,
        line: DsLine,
        writes: &[TaskWrite],
    ) -> Result<Vec<WriteOutcome>, SqlError> {
        for w in writes {
            let code = w
                .action
                .target_state()
                .ok_or_else(|| SqlError::Invalid(format!("action {} writes nothing", w.action)))?;
            if !line.can_write(code) {
                return Err(SqlError::Invalid(format!(
                    "state {code} does not exist on line {line}"
                )));
            }
        }
        let mut outcomes = vec![WriteOutcome::LostRace; writes.len()];
        // A row seen finished or flag = 0 is never written (SPEC §4.8).
        let idx: Vec<usize> = (0..writes.len())
            .filter(|&i| !DsLine::is_finished_task_state(writes[i].seen.state))
            .collect();
        // One transaction for the whole batch: one commit (one log flush)
        // instead of one per chunk.
        let batch: Vec<&TaskWrite> = idx.iter().map(|&i| &writes[i]).collect();
        let zone = self.zone;
        // The follow-up's tables are checked too: a schema the adapter does
        // not understand must stop it before the task write, not after it.
        let applied = match &self.pool {
            Pool::My(p) => limited!(self, "writing task rows", p, |c| async {
                catalog_on!(self, c, mysql).require_writes(line)?;
                mysql::write_batch(c, line, zone, &batch).await
            }),
            Pool::Pg(p) => limited!(self, "writing task rows", p, |c| async {
                catalog_on!(self, c, postgres).require_writes(line)?;
                postgres::write_batch(c, line, zone, &batch).await
            }),
        }?;
        for (k, &i) in idx.iter().enumerate() {
            if applied[k] {
                outcomes[i] = WriteOutcome::Applied;
            }
        }
        Ok(outcomes)
    }

    /// The workflow follow-up after a successful task write (SPEC §5), one
    /// transaction that locks and re-reads the workflow row (SPEC §4.9).
    ///
    /// `live_master` answers, from the caller's registry view at the moment it
    /// is asked, whether a raw workflow `host` is a live master: it is asked
    /// under the row lock, and `recover` runs only when the answer is no.
    pub async fn follow_up(
        &self,
        line: DsLine,
        req: &FollowUpRequest,
        live_master: &(dyn Fn(&str) -> bool + Send + Sync),
    ) -> Result<FollowUpOutcome, SqlError> {
        if req.follow_up == FollowUp::None {
            return Ok(FollowUpOutcome::Skipped(
                "workflow follow-up is none".into(),
            ));
        }
        if !req.action.writes() {
            return Err(SqlError::Invalid(
                "a workflow follow-up needs a task write (fail, fault-tolerance or kill)".into(),
            ));
        }
        let Some(wf) = req.task.workflow_instance_id else {
            return Ok(FollowUpOutcome::Skipped(
                "the task has no workflow instance id".into(),
            ));
        };
        let zone = self.zone;
        match &self.pool {
            Pool::My(p) => limited!(self, "the workflow follow-up", p, |c| async {
                let cat = catalog_on!(self, c, mysql);
                cat.require_writes(line)?;
                mysql::follow_up(c, line, &cat, zone, req, wf, live_master).await
            }),
            Pool::Pg(p) => limited!(self, "the workflow follow-up", p, |c| async {
                let cat = catalog_on!(self, c, postgres);
                cat.require_writes(line)?;
                postgres::follow_up(c, line, &cat, zone, req, wf, live_master).await
            }),
        }
    }
}

/// Which rows a page reads.
/// All pages read `flag = 1` rows in a non-finished state.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Select {
    /// `flag = 1 AND state NOT IN (finished)`.
    Unfinished,
}

/// The lines a schema is consistent with, from the tables and the columns of
/// `t_ds_task_instance` (lower-case names).
pub fn detect_lines(
    tables: &BTreeSet<String>,
    task_cols: &BTreeSet<String>,
) -> Result<Vec<DsLine>, SqlError> {
    let has = |c: &str| task_cols.contains(c);
    if !tables.contains("t_ds_task_instance") {
        return Err(SqlError::UnknownSchema(format!(
            "no t_ds_task_instance table ({} tables found)",
            tables.len()
        )));
    }
    let lines = if tables.contains("t_ds_workflow_instance") && has("workflow_instance_id") {
        vec![DsLine::V3_3]
    } else if !tables.contains("t_ds_process_instance") || !has("process_instance_id") {
        vec![]
    } else if has("project_code") {
        vec![DsLine::V3_2]
    } else if has("task_execute_type") {
        vec![DsLine::V3_1_0, DsLine::V3_1]
    } else if has("task_code") && has("task_group_id") {
        // 3.0.0's DDL added task_group_id; no 2.0.x release has it
        vec![DsLine::V3_0]
    } else if has("task_code") {
        vec![DsLine::V2_0]
    } else if has("worker_group_id") {
        vec![DsLine::V1_2]
    } else if has("worker_group") {
        vec![DsLine::V1_3]
    } else {
        vec![]
    };
    if lines.is_empty() {
        return Err(SqlError::UnknownSchema(format!(
            "t_ds_task_instance columns [{}], workflow table {}",
            task_cols.iter().cloned().collect::<Vec<_>>().join(", "),
            if tables.contains("t_ds_workflow_instance") {
                "t_ds_workflow_instance"
            } else if tables.contains("t_ds_process_instance") {
                "t_ds_process_instance"
            } else {
                "missing"
            }
        )));
    }
    Ok(lines)
}

/// 1.2's worker group: the `t_ds_worker_group` name, `default` for -1 (any
/// worker), else the id as text.
pub(crate) fn worker_group_from_id(id: Option<i64>, name: Option<String>) -> Option<String> {
    match (id, name) {
        (_, Some(n)) if !n.trim().is_empty() => Some(n),
        (Some(-1), _) => Some("default".to_string()),
        (Some(i), _) => Some(i.to_string()),
        (None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn detection_rules() {
        let t = set(&["t_ds_task_instance", "t_ds_process_instance"]);
        let l = |c: &[&str]| detect_lines(&t, &set(c)).unwrap();
        assert_eq!(
            l(&["process_instance_id", "worker_group_id"]),
            vec![DsLine::V1_2]
        );
        assert_eq!(
            l(&["process_instance_id", "worker_group"]),
            vec![DsLine::V1_3]
        );
        assert_eq!(
            l(&["process_instance_id", "worker_group", "task_code"]),
            vec![DsLine::V2_0]
        );
        assert_eq!(
            l(&["process_instance_id", "task_code", "task_group_id"]),
            vec![DsLine::V3_0]
        );
        assert_eq!(
            l(&[
                "process_instance_id",
                "task_code",
                "task_group_id",
                "task_execute_type"
            ]),
            vec![DsLine::V3_1_0, DsLine::V3_1]
        );
        assert_eq!(
            l(&["process_instance_id", "task_code", "project_code"]),
            vec![DsLine::V3_2]
        );
        let t33 = set(&["t_ds_task_instance", "t_ds_workflow_instance"]);
        assert_eq!(
            detect_lines(&t33, &set(&["workflow_instance_id"])).unwrap(),
            vec![DsLine::V3_3]
        );
        assert!(matches!(
            detect_lines(&set(&["t_ds_user"]), &set(&[])),
            Err(SqlError::UnknownSchema(_))
        ));
        assert!(matches!(
            detect_lines(&t, &set(&["id", "name"])),
            Err(SqlError::UnknownSchema(m)) if m.contains("id, name")
        ));
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact_url("mysql://ds:secret@h:3306/db"),
            "mysql://ds:***@h:3306/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        let s = DbSettings {
            url: "postgres://u:pw@h/db".into(),
            password: Some("pw2".into()),
            max_connections: 1,
            statement_timeout: Duration::from_secs(1),
            zone: Zone::Local,
        };
        let d = format!("{s:?}");
        assert!(!d.contains("pw"), "{d}");
    }

    #[test]
    fn bad_url_is_an_error() {
        let s = DbSettings {
            url: "sqlite://x".into(),
            password: None,
            max_connections: 1,
            statement_timeout: Duration::from_secs(1),
            zone: Zone::Local,
        };
        assert!(matches!(Db::connect_lazy(&s), Err(SqlError::BadUrl(_))));
    }

    #[test]
    fn cursor_lags_one_sweep() {
        let mut c = SweepCursor::new();
        c.advance(Some(100));
        assert_eq!(c.low_water(), Some(100));
        c.advance(Some(150));
        assert_eq!(c.low_water(), Some(100));
        c.advance(Some(170));
        assert_eq!(c.low_water(), Some(150));
        c.advance(None);
        assert_eq!(c.low_water(), Some(170));
    }

    #[test]
    fn worker_group_of_1_2() {
        assert_eq!(
            worker_group_from_id(Some(-1), None).as_deref(),
            Some("default")
        );
        assert_eq!(worker_group_from_id(Some(3), None).as_deref(), Some("3"));
        assert_eq!(
            worker_group_from_id(Some(3), Some("etl".into())).as_deref(),
            Some("etl")
        );
    }
}
