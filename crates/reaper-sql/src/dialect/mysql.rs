//! MySQL/MariaDB: what differs from PostgreSQL, and nothing else.

use super::{end_time_of, not_ready, write_groups, Dialect, RowOf};
use crate::schema::TASK;
use crate::sql::{Arg, Placeholders, Sql};
use crate::{SqlError, TaskWrite, WRITE_BATCH};
use chrono::NaiveDateTime;
use futures::TryStreamExt;
use reaper_core::{Action, Zone};
use sqlx::mysql::{MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlRow};
use sqlx::{Arguments, Connection, Executor, Row, Type, ValueRef};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

pub(crate) struct MySql;

fn arguments(args: Vec<Arg>) -> Result<MySqlArguments, sqlx::Error> {
    let mut a = MySqlArguments::default();
    for v in args {
        match v {
            Arg::I32(x) => a.add(x),
            Arg::I64(x) => a.add(x),
            Arg::Text(x) => a.add(x),
            Arg::Time(x) => a.add(x),
            Arg::I32s(_) | Arg::I64s(_) | Arg::Texts(_) | Arg::Times(_) => {
                return Err(sqlx::Error::Encode("MySQL has no array parameters".into()))
            }
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(a)
}

/// A text column: tables with a `utf8_bin` collation (3.2+) report their
/// varchars as binary, which sqlx will not decode as `String`.
fn text(r: &MySqlRow, i: usize) -> Result<Option<String>, sqlx::Error> {
    let v = r.try_get_raw(i)?;
    if v.is_null() {
        return Ok(None);
    }
    // asked first, so that the common binary case builds no error to discard
    if <String as Type<sqlx::MySql>>::compatible(&v.type_info()) {
        if let Ok(s) = r.try_get::<String, _>(i) {
            return Ok(Some(s));
        }
    }
    Ok(r.try_get::<Option<Vec<u8>>, _>(i)?
        .map(|b| String::from_utf8_lossy(&b).into_owned()))
}

impl Placeholders for MySql {
    fn placeholder(_n: usize, out: &mut String) {
        out.push('?');
    }
}

impl Dialect for MySql {
    type Db = sqlx::MySql;

    const NULL_SAFE_EQ: &'static str = "<=>";
    const CURRENT_SCHEMA: &'static str = "DATABASE()";

    const SET_CHUNK: usize = crate::ID_BATCH;

    /// A list of literals (the column's index serves each value): a
    /// thousand placeholders cost the server more to execute than the same
    /// numbers in the text, and a statement with no other value runs on the
    /// text protocol, without a prepare round trip.
    fn in_set(q: &mut Sql<Self>, col: &str, ids: &[i64]) {
        if ids.is_empty() {
            q.push("1 = 0");
            return;
        }
        q.push(col)
            .push(" IN (")
            .push_ints(ids.iter().copied())
            .push(")");
        // its text varies with the set
        q.one_off();
    }

    fn as_text(expr: &str) -> String {
        format!("CAST({expr} AS CHAR)")
    }

    fn options(url: &str, password: Option<&str>) -> Result<MySqlConnectOptions, sqlx::Error> {
        crate::connect::mysql_options(url, password)
    }

    async fn limit_session(c: &mut MySqlConnection, timeout: Duration) -> Result<(), sqlx::Error> {
        // On MySQL the statement limit bounds read-only SELECTs only, so
        // writes and locking reads rely on the lock wait timeouts below (and
        // on the client-side limit).
        crate::connect::limit_mysql_statements(c, timeout).await?;
        // whole seconds only, at least 1
        let secs = timeout.as_secs_f64().ceil().max(1.0) as u64;
        let locks =
            format!("SET SESSION innodb_lock_wait_timeout = {secs}, lock_wait_timeout = {secs}");
        c.execute(locks.as_str()).await?;
        Ok(())
    }

    async fn fetch_all(
        c: &mut MySqlConnection,
        q: Sql<Self>,
    ) -> Result<Vec<MySqlRow>, sqlx::Error> {
        let (text, args, persistent) = q.into_parts();
        if args.is_empty() && !persistent {
            return c.fetch_all(text.as_str()).await;
        }
        sqlx::query_with(&text, arguments(args)?)
            .persistent(persistent)
            .fetch_all(c)
            .await
    }

    async fn fetch_each<F>(c: &mut MySqlConnection, q: Sql<Self>, mut f: F) -> Result<(), SqlError>
    where
        F: FnMut(&MySqlRow) -> Result<(), SqlError> + Send,
    {
        let (text, args, persistent) = q.into_parts();
        let mut rows = sqlx::query_with(&text, arguments(args)?)
            .persistent(persistent)
            .fetch(c);
        while let Some(r) = rows.try_next().await? {
            f(&r)?;
        }
        Ok(())
    }

    async fn execute(c: &mut MySqlConnection, q: Sql<Self>) -> Result<u64, sqlx::Error> {
        let (text, args, persistent) = q.into_parts();
        if args.is_empty() && !persistent {
            return Ok(c.execute(text.as_str()).await?.rows_affected());
        }
        Ok(sqlx::query_with(&text, arguments(args)?)
            .persistent(persistent)
            .execute(c)
            .await?
            .rows_affected())
    }

    /// No `RETURNING`: the connection's `LAST_INSERT_ID()`.
    async fn insert(c: &mut MySqlConnection, q: Sql<Self>) -> Result<i64, sqlx::Error> {
        let (text, args, persistent) = q.into_parts();
        let res = sqlx::query_with(&text, arguments(args)?)
            .persistent(persistent)
            .execute(c)
            .await?;
        Ok(res.last_insert_id() as i64)
    }

    fn int(r: &MySqlRow, i: usize) -> Result<Option<i64>, sqlx::Error> {
        r.try_get(i)
    }

    fn text(r: &MySqlRow, i: usize) -> Result<Option<String>, sqlx::Error> {
        text(r, i)
    }

    /// sqlx rejects a date chrono cannot hold (MariaDB's zero month or day
    /// under a lax `sql_mode`); the all-zero date reads as NULL.
    fn time(r: &MySqlRow, i: usize) -> Result<Option<NaiveDateTime>, sqlx::Error> {
        time_or_zero(r, i)
    }

    /// Locks the rows, keeps those still exactly as seen, updates them by id:
    /// MySQL has no `UPDATE … RETURNING`, and the lock makes the check and the
    /// update one atomic step.
    async fn write_batch(
        c: &mut MySqlConnection,
        zone: Zone,
        batch: &[&TaskWrite],
        ready: impl Future<Output = Result<(), reaper_core::ports::GateRefused>> + Send,
    ) -> Result<Vec<bool>, SqlError> {
        let mut applied = vec![false; batch.len()];
        if batch.is_empty() {
            ready.await.map_err(not_ready)?;
            return Ok(applied);
        }
        let mut ready = std::pin::pin!(ready);
        let mut tx = c.begin().await?;
        let mut rows = lock_rows(&mut tx, batch).await?;
        // The rows are locked, nothing is changed yet: the caller's intents
        // must be on disk before the first UPDATE. On failure the dropped
        // transaction rolls back and releases the locks. DS's own writes to
        // these rows wait on the locks meanwhile, so they are held only for
        // READY_WHILE_LOCKED: an fsync that takes longer lets them go, is
        // waited for, and the rows are locked (and compared) again.
        match tokio::time::timeout(READY_WHILE_LOCKED, ready.as_mut()).await {
            Ok(r) => r.map_err(not_ready)?,
            Err(_) => {
                tx.rollback().await?;
                ready.as_mut().await.map_err(not_ready)?;
                tx = c.begin().await?;
                rows = lock_rows(&mut tx, batch).await?;
            }
        }
        let current = locked_rows(&rows);
        let mut taken = HashSet::new();
        let mut ok = Vec::new();
        for (k, w) in batch.iter().enumerate() {
            let Some(cur) = current.get(&w.seen.id) else {
                continue;
            };
            let seen_submit = w.seen.submit_time.map(|t| zone.to_naive(t));
            let same = cur.state == Some(i64::from(w.seen.state))
                && cur.flag == Some(1)
                && cur.host.as_deref() == w.seen.host.as_deref()
                && cur.submit == seen_submit;
            if same && taken.insert(w.seen.id) {
                applied[k] = true;
                ok.push(k);
            }
        }
        for ((action, now), idx) in write_groups(batch, &ok) {
            let Some(code) = action.target_state() else {
                continue;
            };
            let ids: Vec<i64> = idx.iter().map(|&k| batch[k].seen.id).collect();
            for ids in ids.chunks(WRITE_BATCH) {
                let mut q = Sql::<Self>::new(format!("UPDATE {TASK} SET "));
                push_literal_sets(&mut q, action, code, zone.to_naive(now));
                q.push(" WHERE id IN (")
                    .push_ints(ids.iter().copied())
                    .push(") AND flag = 1");
                q.one_off();
                q.execute(&mut *tx).await?;
            }
        }
        tx.commit().await?;
        Ok(applied)
    }
}

/// How long a write holds its row locks waiting for the caller's `ready`
/// (the intents' fsync, normally a few milliseconds) before it lets them go.
const READY_WHILE_LOCKED: Duration = Duration::from_millis(200);

/// [`push_sets`](super::push_sets) with its two values as literals (a state code, and a time
/// formatted here), so that the batch's `UPDATE` has no parameter at all.
fn push_literal_sets(q: &mut Sql<MySql>, action: Action, code: i32, now: NaiveDateTime) {
    q.push(&format!("state = {code}"));
    if let Some(end) = end_time_of(action, now) {
        q.push(&format!(
            ", end_time = '{}'",
            end.format("%Y-%m-%d %H:%M:%S%.6f")
        ));
    }
}

/// `SELECT … FOR UPDATE` of the batch's rows, in chunks.
async fn lock_rows(
    c: &mut MySqlConnection,
    batch: &[&TaskWrite],
) -> Result<Vec<MySqlRow>, SqlError> {
    let mut rows = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(WRITE_BATCH) {
        let mut q = Sql::<MySql>::new(format!(
            "SELECT id, state, flag, host, submit_time FROM {TASK} WHERE id IN ("
        ));
        q.push_ints(chunk.iter().map(|w| w.seen.id))
            .push(") FOR UPDATE");
        // its placeholder count varies with the batch
        q.one_off();
        rows.extend(q.fetch_all(&mut *c).await?);
    }
    Ok(rows)
}

/// A task row as locked by the write.
struct Locked {
    state: Option<i64>,
    flag: Option<i64>,
    host: Option<String>,
    submit: Option<NaiveDateTime>,
}

/// A time, from either protocol: a statement without parameters comes back
/// as text, where the all-zero date (NULL on the binary protocol) is a
/// string chrono rejects; it reads as NULL on both, so that a row compares
/// equal however it was read.
fn time_or_zero(r: &MySqlRow, i: usize) -> Result<Option<NaiveDateTime>, sqlx::Error> {
    match r.try_get::<Option<NaiveDateTime>, _>(i) {
        Ok(t) => Ok(t),
        // the text as sent, whatever its column type
        Err(e) => match r.try_get_unchecked::<Option<String>, _>(i) {
            Ok(Some(s)) if s.starts_with("0000-00-00") => Ok(None),
            _ => Err(e),
        },
    }
}

fn locked_rows(rows: &[RowOf<MySql>]) -> HashMap<i64, Locked> {
    let mut current = HashMap::new();
    for r in rows {
        let Ok(id) = r.try_get::<i64, _>(0) else {
            continue;
        };
        let cur = (|| -> Result<Locked, sqlx::Error> {
            Ok(Locked {
                state: r.try_get(1)?,
                flag: r.try_get(2)?,
                host: text(r, 3)?,
                submit: time_or_zero(r, 4)?,
            })
        })();
        match cur {
            Ok(c) => {
                current.insert(id, c);
            }
            Err(e) => {
                tracing::warn!(task_id = id, error = %e, "cannot decode a locked task row; not writing it")
            }
        }
    }
    current
}
