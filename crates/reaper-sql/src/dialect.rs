//! What really differs between MySQL/MariaDB and PostgreSQL. Everything else
//! — the statements of the reads, the follow-up's transaction, the catalog
//! queries — is written once (`stmt`, `follow::tx`, `write`) against this trait:
//! - placeholders (`?` / `$n`) and NULL-safe equality (`<=>` / `IS NOT DISTINCT FROM`);
//! - a cast to text and the current schema, for the catalog queries;
//! - the session's time limits, set on every new connection;
//! - decoding (MariaDB's binary-collated text and zero dates; PostgreSQL's
//!   `int4`/`int8` and `infinity`);
//! - the conditional task write: PostgreSQL checks and updates in one
//!   `UPDATE … FROM UNNEST … RETURNING`, MySQL has no `RETURNING` and locks,
//!   compares and updates by id;
//! - the id of an inserted command: `RETURNING id` / `LAST_INSERT_ID()`;
//! - a filter on a set of ids (`in_set`): one array parameter on PostgreSQL,
//!   where the task table's workflow column has no index (one hashed scan),
//!   a list of placeholders on MySQL, where it has one.
//!
//! Row locks are not among them: `SELECT … FOR UPDATE` reads the same on both.

mod mysql;
mod postgres;

pub(crate) use mysql::MySql;
pub(crate) use postgres::Postgres;

use crate::sql::{Placeholders, Sql};
use crate::{DbSettings, SqlError, TaskWrite};
use chrono::NaiveDateTime;
use reaper_core::{Action, Instant, Zone};
use sqlx::pool::PoolOptions;
use sqlx::Database;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A connection of dialect `D`.
pub(crate) type Conn<D> = <<D as Dialect>::Db as Database>::Connection;
/// A row of dialect `D`.
pub(crate) type RowOf<D> = <<D as Dialect>::Db as Database>::Row;
type Options<D> = <Conn<D> as sqlx::Connection>::Options;

pub(crate) trait Dialect: Placeholders + Sized + Send + Sync + 'static {
    type Db: Database;

    /// `a <=> b`: equal, or both NULL.
    const NULL_SAFE_EQ: &'static str;
    /// The schema the connection works in, as an SQL expression.
    const CURRENT_SCHEMA: &'static str;

    /// Ids per statement of an [`in_set`](Dialect::in_set) filter.
    const SET_CHUNK: usize;

    /// `col` (an `int` column) is one of `ids`, as a `WHERE` condition,
    /// planned for these values: for reads by primary key and by the task
    /// table's workflow column, which has an index on MySQL and none on
    /// PostgreSQL.
    fn in_set(q: &mut Sql<Self>, col: &str, ids: &[i64]);
    /// `expr` as text (catalog names may come back as binary strings).
    fn as_text(expr: &str) -> String;

    /// Connect options from the URL, with the password override.
    fn options(url: &str, password: Option<&str>) -> Result<Options<Self>, sqlx::Error>;
    /// Sets the server-side time limits of a new session (SPEC §4.11).
    fn limit_session(
        c: &mut Conn<Self>,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    fn fetch_all(
        c: &mut Conn<Self>,
        q: Sql<Self>,
    ) -> impl Future<Output = Result<Vec<RowOf<Self>>, sqlx::Error>> + Send;
    /// Hands the rows to `f` one by one as they arrive, so that decoding
    /// overlaps the transfer of the rest (pages of candidates); stops at the
    /// first error of `f`.
    fn fetch_each<F>(
        c: &mut Conn<Self>,
        q: Sql<Self>,
        f: F,
    ) -> impl Future<Output = Result<(), SqlError>> + Send
    where
        F: FnMut(&RowOf<Self>) -> Result<(), SqlError> + Send;
    /// The number of rows affected.
    fn execute(
        c: &mut Conn<Self>,
        q: Sql<Self>,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
    /// Runs a one-row `INSERT`; the id it was given.
    fn insert(
        c: &mut Conn<Self>,
        q: Sql<Self>,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send;

    /// An integer column (any width), NULL as `None`.
    fn int(r: &RowOf<Self>, i: usize) -> Result<Option<i64>, sqlx::Error>;
    /// A text column, NULL as `None`.
    fn text(r: &RowOf<Self>, i: usize) -> Result<Option<String>, sqlx::Error>;
    /// A `datetime`/`timestamp` column, NULL as `None`; a value chrono cannot
    /// hold is an error, never a panic.
    fn time(r: &RowOf<Self>, i: usize) -> Result<Option<chrono::NaiveDateTime>, sqlx::Error>;

    /// Conditional task writes (SPEC §4.2) in one transaction: for each input,
    /// whether it was applied (a duplicate id is applied once). No row is
    /// changed before `ready` completes with `Ok`; when it fails the
    /// transaction is rolled back and its message returned.
    fn write_batch(
        c: &mut Conn<Self>,
        zone: Zone,
        batch: &[&TaskWrite],
        ready: impl Future<Output = Result<(), reaper_core::ports::GateRefused>> + Send,
    ) -> impl Future<Output = Result<Vec<bool>, SqlError>> + Send;
}

/// Running a statement on a connection of its dialect.
impl<D: Dialect> Sql<D> {
    pub async fn fetch_all(self, c: &mut Conn<D>) -> Result<Vec<RowOf<D>>, sqlx::Error> {
        D::fetch_all(c, self).await
    }

    pub async fn fetch_optional(self, c: &mut Conn<D>) -> Result<Option<RowOf<D>>, sqlx::Error> {
        Ok(D::fetch_all(c, self).await?.into_iter().next())
    }

    /// Hands the rows to `f` as they arrive (see [`Dialect::fetch_each`]).
    pub async fn fetch_each<F>(self, c: &mut Conn<D>, f: F) -> Result<(), SqlError>
    where
        F: FnMut(&RowOf<D>) -> Result<(), SqlError> + Send,
    {
        D::fetch_each(c, self, f).await
    }

    /// Runs the statement; the number of rows it affected.
    pub async fn execute(self, c: &mut Conn<D>) -> Result<u64, sqlx::Error> {
        D::execute(c, self).await
    }

    /// Runs an `INSERT` of one row; the id it was given.
    pub async fn insert(self, c: &mut Conn<D>) -> Result<i64, sqlx::Error> {
        D::insert(c, self).await
    }
}

/// A lazy pool: every new connection bumps `epoch` (the catalog is learned
/// again after a reconnect) and gets the session time limits.
pub(crate) fn connect_lazy<D: Dialect>(
    s: &DbSettings,
    epoch: Arc<AtomicU64>,
) -> Result<sqlx::Pool<D::Db>, SqlError> {
    let opts = D::options(s.url.trim(), s.password.as_deref())
        .map_err(|e| SqlError::BadUrl(format!("{}: {e}", crate::redact_url(&s.url))))?;
    let timeout = s.statement_timeout;
    let pool = PoolOptions::<D::Db>::new()
        .max_connections(s.max_connections.max(1))
        .acquire_timeout(timeout.max(Duration::from_secs(5)))
        .after_connect(move |conn, _meta| {
            let epoch = epoch.clone();
            Box::pin(async move {
                epoch.fetch_add(1, Ordering::AcqRel);
                if timeout.is_zero() {
                    return Ok(());
                }
                D::limit_session(conn, timeout).await
            })
        })
        .connect_lazy_with(opts);
    Ok(pool)
}

/// The `end_time` a task write sets beside its target state: none for
/// fault-tolerance, which leaves it to DS's recovery.
pub(crate) fn end_time_of(action: Action, now: NaiveDateTime) -> Option<NaiveDateTime> {
    (action != Action::FaultTolerance).then_some(now)
}

/// The `SET` list of a task write, its values bound.
pub(crate) fn push_sets<D: Dialect>(q: &mut Sql<D>, action: Action, code: i32, now: NaiveDateTime) {
    q.push("state = ").bind(code);
    if let Some(end) = end_time_of(action, now) {
        q.push(", end_time = ").bind(end);
    }
}

/// The writes at positions `idx` of `batch`, grouped by what they write (one
/// statement per group), in batch order within a group.
pub(crate) fn write_groups(
    batch: &[&TaskWrite],
    idx: &[usize],
) -> HashMap<(Action, Instant), Vec<usize>> {
    let mut groups: HashMap<(Action, Instant), Vec<usize>> = HashMap::new();
    for &k in idx {
        let w = batch[k];
        groups.entry((w.action, w.now)).or_default().push(k);
    }
    groups
}

/// A write's `ready` failed: nothing was changed.
pub(crate) fn not_ready(why: reaper_core::ports::GateRefused) -> SqlError {
    SqlError::Refused(why)
}
