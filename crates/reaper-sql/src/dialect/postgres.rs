//! PostgreSQL: what differs from MySQL/MariaDB, and nothing else.

use super::{not_ready, push_sets, write_groups, Dialect};
use crate::schema::TASK;
use crate::sql::{Arg, Placeholders, Sql};
use crate::{SqlError, TaskWrite};
use chrono::{NaiveDate, NaiveDateTime, TimeDelta};
use futures::TryStreamExt;
use reaper_core::Zone;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgRow, PgValueFormat};
use sqlx::{Arguments, Connection, Decode, Executor, Row, Type, ValueRef};
use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

pub(crate) struct Postgres;

fn arguments(args: Vec<Arg>) -> Result<PgArguments, sqlx::Error> {
    let mut a = PgArguments::default();
    for v in args {
        match v {
            Arg::I32(x) => a.add(x),
            Arg::I64(x) => a.add(x),
            Arg::Text(x) => a.add(x),
            Arg::Time(x) => a.add(x),
            Arg::I32s(x) => a.add(x),
            Arg::I64s(x) => a.add(x),
            Arg::Texts(x) => a.add(x),
            Arg::Times(x) => a.add(x),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(a)
}

impl Placeholders for Postgres {
    fn placeholder(n: usize, out: &mut String) {
        out.push('$');
        out.push_str(&n.to_string());
    }
}

impl Dialect for Postgres {
    type Db = sqlx::Postgres;

    const NULL_SAFE_EQ: &'static str = "IS NOT DISTINCT FROM";
    const CURRENT_SCHEMA: &'static str = "current_schema()";

    /// One array parameter holds any number of ids.
    const SET_CHUNK: usize = 100_000;

    /// `col = ANY($n::int4[])`, planned for the array bound (an unnamed
    /// statement is planned with its values, never generically): PostgreSQL
    /// hashes a constant array's values, so the scan the missing index forces
    /// checks each row once, and may run in parallel. An `int8[]` against an
    /// `int4` column is not hashed (a linear search per row, ~30x slower on
    /// 5M rows); ids beyond `int4` cannot be in the column and are left out.
    fn in_set(q: &mut Sql<Self>, col: &str, ids: &[i64]) {
        let ids: Vec<i32> = ids.iter().filter_map(|&i| i32::try_from(i).ok()).collect();
        q.push(col)
            .push(" = ANY(")
            .bind(Arg::I32s(ids))
            .push("::int4[])");
        q.one_off();
    }

    fn as_text(expr: &str) -> String {
        format!("{expr}::text")
    }

    fn options(url: &str, password: Option<&str>) -> Result<PgConnectOptions, sqlx::Error> {
        crate::connect::pg_options(url, password)
    }

    async fn limit_session(c: &mut PgConnection, timeout: Duration) -> Result<(), sqlx::Error> {
        // statement_timeout already covers lock waits; lock_timeout names the
        // cause (55P03) when a row lock is what blocks.
        crate::connect::limit_pg_statements(c, timeout).await?;
        let ms = timeout.as_millis().max(1);
        c.execute(format!("SET lock_timeout = {ms}").as_str())
            .await?;
        Ok(())
    }

    async fn fetch_all(c: &mut PgConnection, q: Sql<Self>) -> Result<Vec<PgRow>, sqlx::Error> {
        let (text, args, persistent) = q.into_parts();
        sqlx::query_with(&text, arguments(args)?)
            .persistent(persistent)
            .fetch_all(c)
            .await
    }

    async fn fetch_each<F>(c: &mut PgConnection, q: Sql<Self>, mut f: F) -> Result<(), SqlError>
    where
        F: FnMut(&PgRow) -> Result<(), SqlError> + Send,
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

    async fn execute(c: &mut PgConnection, q: Sql<Self>) -> Result<u64, sqlx::Error> {
        let (text, args, persistent) = q.into_parts();
        Ok(sqlx::query_with(&text, arguments(args)?)
            .persistent(persistent)
            .execute(c)
            .await?
            .rows_affected())
    }

    async fn insert(c: &mut PgConnection, mut q: Sql<Self>) -> Result<i64, sqlx::Error> {
        q.push(" RETURNING id");
        let row = Self::fetch_all(c, q)
            .await?
            .into_iter()
            .next()
            .ok_or(sqlx::Error::RowNotFound)?;
        Self::int(&row, 0)?.ok_or_else(|| decode_error(0, "the returned id is NULL".into()))
    }

    /// DS's ids and states are `int4`, its codes `int8`.
    fn int(r: &PgRow, i: usize) -> Result<Option<i64>, sqlx::Error> {
        let v = r.try_get_raw(i)?;
        if v.is_null() {
            return Ok(None);
        }
        let (int4, int2) = {
            let ty = v.type_info();
            (
                <i32 as Type<sqlx::Postgres>>::compatible(&ty),
                <i16 as Type<sqlx::Postgres>>::compatible(&ty),
            )
        };
        let decoded = if int4 {
            <i32 as Decode<sqlx::Postgres>>::decode(v).map(i64::from)
        } else if int2 {
            <i16 as Decode<sqlx::Postgres>>::decode(v).map(i64::from)
        } else {
            // int8, or a mismatch that try_get names
            return r.try_get(i);
        };
        decoded.map(Some).map_err(|e| sqlx::Error::ColumnDecode {
            index: i.to_string(),
            source: e,
        })
    }

    fn text(r: &PgRow, i: usize) -> Result<Option<String>, sqlx::Error> {
        r.try_get(i)
    }

    /// A `timestamp` column, decoded without sqlx's chrono decoder, which
    /// panics on `infinity` and on values beyond chrono's range (it adds the
    /// raw microseconds unchecked): such a value is a decode error, and the
    /// row is skipped like any other undecodable row.
    fn time(r: &PgRow, i: usize) -> Result<Option<NaiveDateTime>, sqlx::Error> {
        let bad = |why: String| decode_error(i, why);
        let v = r.try_get_raw(i)?;
        if v.is_null() {
            return Ok(None);
        }
        match v.format() {
            PgValueFormat::Binary => {
                let b = v.as_bytes().map_err(|e| bad(e.to_string()))?;
                let raw: [u8; 8] = b
                    .try_into()
                    .map_err(|_| bad(format!("a timestamp of {} bytes", b.len())))?;
                let us = i64::from_be_bytes(raw);
                // PostgreSQL counts from 2000-01-01 00:00:00
                let epoch = NaiveDate::from_ymd_opt(2000, 1, 1)
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
                    .ok_or_else(|| bad("no epoch".into()))?;
                epoch
                    .checked_add_signed(TimeDelta::microseconds(us))
                    .map(Some)
                    .ok_or_else(|| bad(format!("timestamp out of range ({us} µs from 2000-01-01)")))
            }
            PgValueFormat::Text => {
                let s = v.as_str().map_err(|e| bad(e.to_string()))?;
                NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
                    .map(Some)
                    .map_err(|e| bad(format!("{s:?}: {e}")))
            }
        }
    }

    /// One `UPDATE … FROM UNNEST(…) RETURNING id` per action: each row's own
    /// seen state, host and submit time are in the join, so the check and the
    /// update are one statement and the returned ids say which rows were applied.
    async fn write_batch(
        c: &mut PgConnection,
        zone: Zone,
        batch: &[&TaskWrite],
        ready: impl Future<Output = Result<(), reaper_core::ports::GateRefused>> + Send,
    ) -> Result<Vec<bool>, SqlError> {
        let mut applied = vec![false; batch.len()];
        if batch.is_empty() {
            ready.await.map_err(not_ready)?;
            return Ok(applied);
        }
        let all: Vec<usize> = (0..batch.len()).collect();
        let mut tx = c.begin().await?;
        // The check and the update are one statement here: nothing to do
        // before the caller's intents are on disk but the transaction.
        ready.await.map_err(not_ready)?;
        for ((action, now), idx) in write_groups(batch, &all) {
            let Some(code) = action.target_state() else {
                continue;
            };
            let seen = |k: &usize| &batch[*k].seen;
            let mut q = Sql::<Self>::new(format!("UPDATE {TASK} t SET "));
            push_sets(&mut q, action, code, zone.to_naive(now));
            q.push(" FROM UNNEST(")
                .bind(Arg::I64s(idx.iter().map(|k| seen(k).id).collect()))
                .push("::int8[], ")
                .bind(Arg::I32s(idx.iter().map(|k| seen(k).state).collect()))
                .push("::int4[], ")
                .bind(Arg::Texts(
                    idx.iter()
                        .map(|k| seen(k).host.as_deref().map(str::to_string))
                        .collect(),
                ))
                .push("::varchar[], ")
                .bind(Arg::Times(
                    idx.iter()
                        .map(|k| seen(k).submit_time.map(|t| zone.to_naive(t)))
                        .collect(),
                ))
                .push(
                    "::timestamp[]) AS v(id, st, host, sub) \
                     WHERE t.id = v.id AND t.state = v.st AND t.flag = 1 \
                     AND t.host IS NOT DISTINCT FROM v.host \
                     AND t.submit_time IS NOT DISTINCT FROM v.sub \
                     RETURNING t.id",
                );
            let mut done = HashSet::new();
            for r in q.fetch_all(&mut *tx).await? {
                if let Some(id) = Self::int(&r, 0)? {
                    done.insert(id);
                }
            }
            for &k in &idx {
                // a duplicate id in one batch is applied once
                if done.remove(&batch[k].seen.id) {
                    applied[k] = true;
                }
            }
        }
        tx.commit().await?;
        Ok(applied)
    }
}

fn decode_error(i: usize, why: String) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: i.to_string(),
        source: why.into(),
    }
}
