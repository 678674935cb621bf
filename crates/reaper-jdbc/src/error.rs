//! What can go wrong talking to the registry's database.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum JdbcError {
    /// The URL names no supported database or cannot be parsed (password redacted).
    #[error("bad JDBC registry URL {0}")]
    BadUrl(String),
    /// An option that can never work.
    #[error("{0}")]
    BadOption(String),
    /// The leader lock is no longer held by this replica's connection.
    #[error("the leader lock is no longer held by this connection")]
    LockLost,
    /// The configured line had no database registry.
    #[error("DolphinScheduler {0} has no JDBC registry (it exists from 3.1 on)")]
    NoRegistryForLine(String),
    /// None of DS's registry tables is in the connected schema.
    #[error(
        "no JDBC registry tables in the connected schema (looked for t_ds_jdbc_registry_data \
         with last_term or client_id, t_ds_jdbc_registry_client_heartbeat, t_ds_mysql_registry_data)"
    )]
    NoRegistryTables,
    /// A call did not finish in time (client side).
    #[error("{what} did not finish within {limit:?}")]
    Timeout { what: &'static str, limit: Duration },
    /// The database refused or failed the call.
    #[error("{what}: {source}")]
    Db {
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
}

impl JdbcError {
    pub(crate) fn db(what: &'static str) -> impl FnOnce(sqlx::Error) -> JdbcError {
        move |source| JdbcError::Db { what, source }
    }
}

/// Runs `fut` under the client-side `limit`.
pub(crate) async fn bounded<T>(
    what: &'static str,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, JdbcError>>,
) -> Result<T, JdbcError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(JdbcError::Timeout { what, limit }),
    }
}
