//! The adapter's errors, and how they cross the port.

use reaper_core::ports::{PortError, PortErrorKind};
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
    /// The engine's write gate refused (its intents are not on disk):
    /// rolled back, nothing changed.
    #[error(transparent)]
    Refused(reaper_core::ports::GateRefused),
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

    /// Whether retrying later may succeed: the database failed or could not
    /// be reached in time. Everything else is a request this database cannot
    /// serve as asked (a bad URL, an unknown schema, a missing column, a row
    /// that cannot be decoded, a bad argument).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, SqlError::Db(_) | SqlError::Timeout { .. })
    }
}

/// `Unavailable` for database and timeout errors, `Invalid` for the rest
/// (a schema mismatch is a fault to report, not an empty read); the
/// [`SqlError`] itself is the source.
impl From<SqlError> for PortError {
    fn from(e: SqlError) -> PortError {
        let kind = if e.is_unavailable() {
            PortErrorKind::Unavailable
        } else if matches!(e, SqlError::Refused(_)) {
            PortErrorKind::Refused
        } else {
            PortErrorKind::Invalid
        };
        PortError::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_errors_keep_the_message() {
        let e: PortError = SqlError::Timeout {
            side: TimeoutSide::Client,
            detail: "ping did not finish within 1s".into(),
        }
        .into();
        assert_eq!(
            e,
            PortError::unavailable(
                "database call timed out (client side): ping did not finish within 1s"
            )
        );
        assert!(e.inner().downcast_ref::<SqlError>().is_some());
        let e: PortError = SqlError::Db(sqlx::Error::PoolClosed).into();
        assert_eq!(e.kind(), PortErrorKind::Unavailable);
        assert!(e.to_string().starts_with("database error: "), "{e}");
        for (e, text) in [
            (
                SqlError::SchemaMismatch("t has no column(s) x".into()),
                "schema mismatch: t has no column(s) x",
            ),
            (
                SqlError::Invalid("no states to scan".into()),
                "invalid request: no states to scan",
            ),
            (
                SqlError::UnknownSchema("no t_ds_task_instance table".into()),
                "the schema matches no DolphinScheduler line: no t_ds_task_instance table",
            ),
            (SqlError::BadUrl("x".into()), "bad database URL: x"),
            (
                SqlError::Undecodable {
                    table: "t_ds_task_instance".into(),
                    id: 7,
                    reason: "bad date".into(),
                },
                "t_ds_task_instance row 7 cannot be decoded: bad date",
            ),
        ] {
            assert_eq!(PortError::from(e), PortError::invalid(text));
        }
    }
}
