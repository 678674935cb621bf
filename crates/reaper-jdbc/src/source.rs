//! The registry's database: a typed sqlx pool per dialect (not `Any`, which
//! neither decodes DS's column types nor matters here), the catalog probe that
//! finds the [`Flavour`], and the one statement a poll runs.
//!
//! The statements carry no placeholders (the key prefixes are literals), so
//! each is written once for both databases; only decoding differs: MySQL
//! tables with a binary collation report text as bytes, PostgreSQL's `serial`
//! is `int4`.

use crate::error::{bounded, JdbcError};
use crate::flavour::Flavour;
use crate::settings::JdbcSettings;
use reaper_sql::connect::{
    limit_mysql_statements, limit_pg_statements, mysql_options, pg_options, redact_url, DbKind,
};
use sqlx::mysql::{MySqlPoolOptions, MySqlRow};
use sqlx::postgres::{PgPoolOptions, PgRow};
use sqlx::Row;
use std::sync::Mutex;
use std::time::Duration;

pub use crate::flavour::RegistryRow;

#[derive(Clone)]
enum Pool {
    My(sqlx::MySqlPool),
    Pg(sqlx::PgPool),
}

/// The registry's database, read-only.
pub struct JdbcSource {
    pool: Pool,
    kind: DbKind,
    limit: Duration,
    /// Fixed by an explicit line, else learned from the catalog (and
    /// forgotten after a failed poll, so a schema change is picked up).
    flavour: Mutex<Option<Flavour>>,
    fixed: bool,
}

/// The registry tables' columns, from the catalog of the connected schema.
const PROBE: &str = "SELECT LOWER(CAST(table_name AS CHAR(128))), LOWER(CAST(column_name AS CHAR(128))) \
     FROM information_schema.columns WHERE table_schema = DATABASE() AND LOWER(table_name) IN \
     ('t_ds_mysql_registry_data', 't_ds_jdbc_registry_data', 't_ds_jdbc_registry_client_heartbeat')";
const PROBE_PG: &str = "SELECT LOWER(table_name::text), LOWER(column_name::text) \
     FROM information_schema.columns WHERE table_schema = ANY (current_schemas(false)) AND \
     LOWER(table_name::text) IN \
     ('t_ds_mysql_registry_data', 't_ds_jdbc_registry_data', 't_ds_jdbc_registry_client_heartbeat')";

/// The poll: every ephemeral row under `/nodes/master` and `/nodes/worker`,
/// with what DS's liveness rule needs, and on 3.1/3.2 the rows of the
/// master-failover locks (3.1.9 `MasterFailoverService`:
/// `/lock/failover/masters/<host>`; 3.2.2: `/lock/master-failover/<host>`)
/// in the same statement, so both are seen at one moment. Persistent rows
/// are never servers. 3.3's failover needs no guard and is not read.
fn poll_statement(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::MySql31 => {
            "SELECT `key`, `data`, last_term, 0 AS is_lock FROM t_ds_mysql_registry_data \
             WHERE `type` = 1 AND (`key` LIKE '/nodes/worker/%' OR `key` LIKE '/nodes/master/%') \
             UNION ALL SELECT `key`, '', last_term, 1 FROM t_ds_mysql_registry_lock \
             WHERE `key` LIKE '/lock/failover/masters/%'"
        }
        Flavour::Term32 => {
            "SELECT data_key, data_value, last_term, 0 AS is_lock FROM t_ds_jdbc_registry_data \
             WHERE data_type = 1 AND (data_key LIKE '/nodes/worker/%' OR data_key LIKE '/nodes/master/%') \
             UNION ALL SELECT lock_key, '', last_term, 1 FROM t_ds_jdbc_registry_lock \
             WHERE lock_key LIKE '/lock/master-failover/%'"
        }
        Flavour::Client33 => {
            "SELECT d.data_key, d.data_value, h.last_heartbeat_time, h.connection_config \
             FROM t_ds_jdbc_registry_data d \
             LEFT JOIN t_ds_jdbc_registry_client_heartbeat h ON h.id = d.client_id \
             WHERE d.data_type = 'EPHEMERAL' \
             AND (d.data_key LIKE '/nodes/worker/%' OR d.data_key LIKE '/nodes/master/%')"
        }
    }
}

impl JdbcSource {
    /// A lazy pool: a bad URL or a line without a database registry is an
    /// error, an unreachable server is not (it shows on use).
    pub fn connect_lazy(s: &JdbcSettings) -> Result<JdbcSource, JdbcError> {
        let fixed = match s.line {
            Some(line) => Some(
                Flavour::for_line(line)
                    .ok_or_else(|| JdbcError::NoRegistryForLine(line.to_string()))?,
            ),
            None => None,
        };
        let kind = s
            .kind()
            .ok_or_else(|| JdbcError::BadUrl(redact_url(&s.url)))?;
        let bad = |e: sqlx::Error| JdbcError::BadUrl(format!("{}: {e}", redact_url(&s.url)));
        let limit = s.request_timeout();
        // A refused connection is retried by sqlx until this deadline: keep
        // it short, so a poll against a database that is down fails quickly.
        let acquire = (s.interval() * 2).clamp(Duration::from_secs(1), limit);
        let server_limit = s.statement_timeout;
        let pool = match kind {
            DbKind::MySql => {
                let o = mysql_options(&s.url, s.password.as_deref()).map_err(bad)?;
                Pool::My(
                    MySqlPoolOptions::new()
                        .max_connections(2)
                        .acquire_timeout(acquire)
                        .test_before_acquire(false)
                        .after_connect(move |c, _| {
                            Box::pin(limit_mysql_statements(c, server_limit))
                        })
                        .connect_lazy_with(o),
                )
            }
            DbKind::Postgres => {
                let o = pg_options(&s.url, s.password.as_deref()).map_err(bad)?;
                Pool::Pg(
                    PgPoolOptions::new()
                        .max_connections(2)
                        .acquire_timeout(acquire)
                        .test_before_acquire(false)
                        .after_connect(move |c, _| Box::pin(limit_pg_statements(c, server_limit)))
                        .connect_lazy_with(o.application_name("ds-reaper registry")),
                )
            }
        };
        Ok(JdbcSource {
            pool,
            kind,
            limit,
            flavour: Mutex::new(fixed),
            fixed: fixed.is_some(),
        })
    }

    pub fn kind(&self) -> DbKind {
        self.kind
    }

    /// The flavour in use, if known (fixed, or learned by a poll).
    pub fn known_flavour(&self) -> Option<Flavour> {
        *lock(&self.flavour)
    }

    /// The flavour, probing the catalog when it is not known.
    pub async fn flavour(&self) -> Result<Flavour, JdbcError> {
        if let Some(f) = self.known_flavour() {
            return Ok(f);
        }
        let cols: Vec<(String, String)> =
            bounded("probing the registry tables", self.limit, async {
                match &self.pool {
                    Pool::My(p) => {
                        let rows = sqlx::query(PROBE)
                            .fetch_all(p)
                            .await
                            .map_err(JdbcError::db("probing the registry tables"))?;
                        pairs(&rows, my_text)
                    }
                    Pool::Pg(p) => {
                        let rows = sqlx::query(PROBE_PG)
                            .fetch_all(p)
                            .await
                            .map_err(JdbcError::db("probing the registry tables"))?;
                        pairs(&rows, pg_text)
                    }
                }
                .map_err(JdbcError::db("probing the registry tables"))
            })
            .await?;
        let f = Flavour::from_catalog(cols.iter().map(|(t, c)| (t.as_str(), c.as_str())))
            .ok_or(JdbcError::NoRegistryTables)?;
        *lock(&self.flavour) = Some(f);
        Ok(f)
    }

    /// Forgets a learned flavour (after a failed poll); a fixed one stays.
    pub fn forget_flavour(&self) {
        if !self.fixed {
            *lock(&self.flavour) = None;
        }
    }

    /// One poll: a single statement returning every server row.
    pub async fn read(&self) -> Result<(Flavour, Vec<RegistryRow>), JdbcError> {
        const WHAT: &str = "polling the registry";
        let flavour = self.flavour().await?;
        let sql = poll_statement(flavour);
        let limit = self.limit;
        let rows = match &self.pool {
            Pool::My(p) => {
                let mut c = bounded(WHAT, limit, async {
                    p.acquire().await.map_err(JdbcError::db(WHAT))
                })
                .await?;
                match tokio::time::timeout(limit, sqlx::query(sql).fetch_all(&mut *c)).await {
                    Ok(r) => decode(&r.map_err(JdbcError::db(WHAT))?, flavour, my_text, my_int),
                    Err(_) => {
                        // its statement may still run: never reuse it
                        c.close_on_drop();
                        return Err(JdbcError::Timeout { what: WHAT, limit });
                    }
                }
            }
            Pool::Pg(p) => {
                let mut c = bounded(WHAT, limit, async {
                    p.acquire().await.map_err(JdbcError::db(WHAT))
                })
                .await?;
                match tokio::time::timeout(limit, sqlx::query(sql).fetch_all(&mut *c)).await {
                    Ok(r) => decode(&r.map_err(JdbcError::db(WHAT))?, flavour, pg_text, pg_int),
                    Err(_) => {
                        c.close_on_drop();
                        return Err(JdbcError::Timeout { what: WHAT, limit });
                    }
                }
            }
        };
        Ok((
            flavour,
            rows.map_err(JdbcError::db("decoding registry rows"))?,
        ))
    }

    /// Closes the pool's connections.
    pub async fn close(&self) {
        match &self.pool {
            Pool::My(p) => p.close().await,
            Pool::Pg(p) => p.close().await,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // only plain assignments happen under it: a poisoned lock is consistent
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type TextFn<R> = fn(&R, usize) -> Result<Option<String>, sqlx::Error>;
type IntFn<R> = fn(&R, usize) -> Result<Option<i64>, sqlx::Error>;

fn pairs<R>(rows: &[R], text: TextFn<R>) -> Result<Vec<(String, String)>, sqlx::Error> {
    rows.iter()
        .map(|r| {
            Ok((
                text(r, 0)?.unwrap_or_default(),
                text(r, 1)?.unwrap_or_default(),
            ))
        })
        .collect()
}

fn decode<R>(
    rows: &[R],
    flavour: Flavour,
    text: TextFn<R>,
    int: IntFn<R>,
) -> Result<Vec<RegistryRow>, sqlx::Error> {
    rows.iter()
        .map(|r| {
            let (is_lock, config) = match flavour {
                Flavour::MySql31 | Flavour::Term32 => (int(r, 3)?, None),
                Flavour::Client33 => (None, text(r, 3)?),
            };
            Ok(RegistryRow::from_columns(
                flavour,
                text(r, 0)?,
                text(r, 1)?,
                int(r, 2)?,
                is_lock,
                config.as_deref(),
            ))
        })
        .collect()
}

/// A text column: tables with a binary collation report text as bytes.
fn my_text(r: &MySqlRow, i: usize) -> Result<Option<String>, sqlx::Error> {
    match r.try_get::<Option<String>, _>(i) {
        Ok(v) => Ok(v),
        Err(_) => Ok(r
            .try_get::<Option<Vec<u8>>, _>(i)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())),
    }
}

fn my_int(r: &MySqlRow, i: usize) -> Result<Option<i64>, sqlx::Error> {
    match r.try_get::<Option<i64>, _>(i) {
        Ok(v) => Ok(v),
        Err(_) => Ok(r.try_get::<Option<i32>, _>(i)?.map(i64::from)),
    }
}

fn pg_text(r: &PgRow, i: usize) -> Result<Option<String>, sqlx::Error> {
    r.try_get::<Option<String>, _>(i)
}

fn pg_int(r: &PgRow, i: usize) -> Result<Option<i64>, sqlx::Error> {
    match r.try_get::<Option<i64>, _>(i) {
        Ok(v) => Ok(v),
        Err(_) => Ok(r.try_get::<Option<i32>, _>(i)?.map(i64::from)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lazy_pools_refuse_bad_settings() {
        let mut s = JdbcSettings::new("sqlite://x");
        assert!(matches!(
            JdbcSource::connect_lazy(&s),
            Err(JdbcError::BadUrl(_))
        ));
        s.url = "mysql://ds:ds@127.0.0.1:1/ds".into();
        s.line = Some(reaper_core::DsLine::V2_0);
        assert!(matches!(
            JdbcSource::connect_lazy(&s),
            Err(JdbcError::NoRegistryForLine(_))
        ));
    }

    #[tokio::test]
    async fn an_explicit_line_fixes_the_flavour() {
        let mut s = JdbcSettings::new("postgres://u:p@127.0.0.1:1/ds");
        s.line = Some(reaper_core::DsLine::V3_3);
        let src = JdbcSource::connect_lazy(&s).unwrap();
        assert_eq!(src.known_flavour(), Some(Flavour::Client33));
        src.forget_flavour();
        assert_eq!(src.known_flavour(), Some(Flavour::Client33));
    }

    #[test]
    fn statements_name_each_flavours_table() {
        for f in [Flavour::MySql31, Flavour::Term32, Flavour::Client33] {
            assert!(poll_statement(f).contains(f.data_table()));
        }
        assert!(poll_statement(Flavour::MySql31).contains("t_ds_mysql_registry_lock"));
        assert!(poll_statement(Flavour::Term32).contains("t_ds_jdbc_registry_lock"));
        for f in [Flavour::MySql31, Flavour::Term32] {
            let layout = reaper_core::registry::FailoverLockLayout::for_lines(f.lines());
            for d in layout.dirs {
                assert!(
                    poll_statement(f).contains(&format!("LIKE '{}/%'", d.path)),
                    "{f:?}"
                );
            }
        }
    }
}
