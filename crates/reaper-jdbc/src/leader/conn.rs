//! The lock connection: where it goes, and the statements that take, check
//! and release the lock on either database.

use super::LeaderOptions;
use crate::error::JdbcError;
use crate::settings::JdbcSettings;
use reaper_sql::connect::{mysql_options, pg_options, redact_url, DbKind};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlRow};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::ConnectOptions;
use sqlx::{Connection, Executor, Row};
use std::time::Duration;

/// What a PostgreSQL lock connection calls itself; the id follows.
const APP_PREFIX: &str = "ds-reaper:";
/// What a MySQL ping carries in its comment; the hex-encoded id follows.
const MARK: &str = "ds-reaper leader id=";

/// Where the lock connection goes.
pub(super) enum Target {
    My(MySqlConnectOptions),
    Pg(PgConnectOptions),
}

impl Target {
    pub(super) fn new(s: &JdbcSettings, id: &str) -> Result<Target, JdbcError> {
        let bad = |e: sqlx::Error| JdbcError::BadUrl(format!("{}: {e}", redact_url(&s.url)));
        match s.kind() {
            Some(DbKind::MySql) => {
                let o = mysql_options(&s.url, s.password.as_deref()).map_err(bad)?;
                // The ping sleeps on purpose: not a slow statement to warn about.
                Ok(Target::My(o.log_slow_statements(
                    log::LevelFilter::Off,
                    std::time::Duration::from_secs(3600),
                )))
            }
            Some(DbKind::Postgres) => {
                let o = pg_options(&s.url, s.password.as_deref()).map_err(bad)?;
                Ok(Target::Pg(
                    o.application_name(&app_name(id)).log_slow_statements(
                        log::LevelFilter::Off,
                        std::time::Duration::from_secs(3600),
                    ),
                ))
            }
            None => Err(JdbcError::BadUrl(redact_url(&s.url))),
        }
    }

    /// Connects, lifts any statement limit (the ping sleeps on purpose) and
    /// reads the session's id.
    pub(super) async fn connect(&self) -> Result<(LockConn, i64), JdbcError> {
        const WHAT: &str = "leader election: connecting";
        match self {
            Target::My(o) => {
                let mut c = MySqlConnection::connect_with(o)
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                // MariaDB; MySQL has no such variable and bounds no SLEEP
                let _ = c.execute("SET SESSION max_statement_time = 0").await;
                let id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                    .fetch_one(&mut c)
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                Ok((LockConn::My(c), id))
            }
            Target::Pg(o) => {
                let mut c = PgConnection::connect_with(o)
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                c.execute("SET statement_timeout = 0")
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                let id: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                    .fetch_one(&mut c)
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                Ok((LockConn::Pg(c), i64::from(id)))
            }
        }
    }
}

/// `application_name` of a PostgreSQL lock connection (63 bytes at most).
fn app_name(id: &str) -> String {
    let mut s = format!("{APP_PREFIX}{id}");
    while s.len() > 63 {
        s.pop();
    }
    s
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The id in a MySQL ping's text (`PROCESSLIST.INFO`), if it is one.
fn id_from_info(info: &str) -> Option<String> {
    let rest = &info[info.find(MARK)? + MARK.len()..];
    let end = rest.find(|c: char| !c.is_ascii_hexdigit())?;
    unhex(&rest[..end]).filter(|s| !s.is_empty())
}

/// One lock connection.
pub(super) enum LockConn {
    My(MySqlConnection),
    Pg(PgConnection),
}

fn my_text(r: &MySqlRow, i: usize) -> Option<String> {
    match r.try_get::<Option<String>, _>(i) {
        Ok(v) => v,
        Err(_) => r
            .try_get::<Option<Vec<u8>>, _>(i)
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
    }
}

/// PostgreSQL shows a bigint advisory key as two oids.
fn halves(key: i64) -> (i64, i64) {
    ((key >> 32) & 0xffff_ffff, key & 0xffff_ffff)
}

impl LockConn {
    /// Tries the lock once: whether it is ours now, and, if not, who holds it.
    pub(super) async fn try_acquire(
        &mut self,
        o: &LeaderOptions,
    ) -> Result<(bool, Option<String>), JdbcError> {
        const WHAT: &str = "leader election: trying the lock";
        match self {
            LockConn::My(c) => {
                // text protocol: the values are checked literals
                let sql = format!(
                    "SELECT GET_LOCK('{n}', 0), \
                     (SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = IS_USED_LOCK('{n}'))",
                    n = o.lock_name
                );
                let row = c
                    .fetch_one(sqlx::raw_sql(&sql))
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                let got = row
                    .try_get::<Option<i64>, _>(0)
                    .map_err(JdbcError::db(WHAT))?;
                let who = my_text(&row, 1).as_deref().and_then(id_from_info);
                Ok((got == Some(1), who))
            }
            LockConn::Pg(c) => {
                let (hi, lo) = halves(o.pg_key);
                let row = sqlx::query(
                    "SELECT pg_try_advisory_lock($1), \
                     (SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                      WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid() \
                      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                      AND l.classid = $2::bigint::oid AND l.objid = $3::bigint::oid AND l.objsubid = 1 \
                      LIMIT 1)",
                )
                .bind(o.pg_key)
                .bind(hi)
                .bind(lo)
                .fetch_one(&mut *c)
                .await
                .map_err(JdbcError::db(WHAT))?;
                let got: bool = row.try_get(0).map_err(JdbcError::db(WHAT))?;
                let who = row
                    .try_get::<Option<String>, _>(1)
                    .ok()
                    .flatten()
                    .and_then(|a| a.strip_prefix(APP_PREFIX).map(str::to_string))
                    .filter(|s| !s.is_empty());
                Ok((got, who))
            }
        }
    }

    /// Checks the lock is still this session's, then sleeps `sleep` on the
    /// server: a failure of the connection meanwhile ends it at once.
    pub(super) async fn ping(
        &mut self,
        o: &LeaderOptions,
        sleep: Duration,
    ) -> Result<bool, JdbcError> {
        const WHAT: &str = "leader election: ping";
        match self {
            LockConn::My(c) => {
                let sql = format!(
                    "SELECT /* {MARK}{id} */ IS_USED_LOCK('{n}') = CONNECTION_ID(), SLEEP({s:.3})",
                    id = hex(&o.id),
                    n = o.lock_name,
                    s = sleep.as_secs_f64()
                );
                let row = c
                    .fetch_one(sqlx::raw_sql(&sql))
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                let held = row
                    .try_get::<Option<i64>, _>(0)
                    .map_err(JdbcError::db(WHAT))?;
                Ok(held == Some(1))
            }
            LockConn::Pg(c) => {
                let (hi, lo) = halves(o.pg_key);
                let held: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
                     AND pid = pg_backend_pid() AND classid = $1::bigint::oid \
                     AND objid = $2::bigint::oid AND objsubid = 1) FROM pg_sleep($3)",
                )
                .bind(hi)
                .bind(lo)
                .bind(sleep.as_secs_f64())
                .fetch_one(&mut *c)
                .await
                .map_err(JdbcError::db(WHAT))?;
                Ok(held)
            }
        }
    }

    /// Releases the lock and closes the connection, bounded by `connect_timeout`
    /// (closing alone would release it too).
    pub(super) async fn finish(self, o: &LeaderOptions) {
        if tokio::time::timeout(o.connect_timeout, self.release(o))
            .await
            .is_err()
        {
            tracing::warn!(
                "leader election: releasing the lock timed out; the connection is dropped"
            );
        }
    }

    async fn release(self, o: &LeaderOptions) {
        match self {
            LockConn::My(mut c) => {
                let sql = format!("SELECT RELEASE_LOCK('{}')", o.lock_name);
                let _ = c.execute(sqlx::raw_sql(&sql)).await;
                let _ = c.close().await;
            }
            LockConn::Pg(mut c) => {
                let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(o.pg_key)
                    .execute(&mut c)
                    .await;
                let _ = c.close().await;
            }
        }
    }
}

#[cfg(test)]
mod tests;
