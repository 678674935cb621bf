//! The adapter's errors.

use std::fmt;
use std::time::Duration;

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
    pub(crate) fn client_timeout(what: &str, limit: Duration) -> SqlError {
        SqlError::Timeout {
            side: TimeoutSide::Client,
            detail: format!("{what} did not finish within {limit:?}"),
        }
    }
}
