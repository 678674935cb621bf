//! Reaching a DS database with sqlx, shared by the task store (this crate)
//! and DS's JDBC registry (`reaper-jdbc`), which may sit in the same
//! database: the dialect a URL names, the URL as it may be logged, connect
//! options with `password_file` applied, and the server-side bound of every
//! statement on a new session (SPEC §4.11).

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Executor;
use std::str::FromStr;
use std::time::Duration;

/// The database server's dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    MySql,
    Postgres,
}

impl DbKind {
    /// The dialect a URL names (`mysql://`, `mariadb://`, `postgres://`,
    /// `postgresql://`, any case), if any.
    pub fn of_url(url: &str) -> Option<DbKind> {
        let lower = url.trim().to_ascii_lowercase();
        if lower.starts_with("mysql://") || lower.starts_with("mariadb://") {
            Some(DbKind::MySql)
        } else if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Some(DbKind::Postgres)
        } else {
            None
        }
    }
}

pub use reaper_core::redact_url;

/// MySQL/MariaDB connect options from `url`; `password` (read from
/// `password_file`) overrides the URL's.
pub fn mysql_options(
    url: &str,
    password: Option<&str>,
) -> Result<MySqlConnectOptions, sqlx::Error> {
    let opts = MySqlConnectOptions::from_str(url.trim())?;
    Ok(match password {
        Some(pw) => opts.password(pw),
        None => opts,
    })
}

/// PostgreSQL connect options from `url`; `password` overrides the URL's.
pub fn pg_options(url: &str, password: Option<&str>) -> Result<PgConnectOptions, sqlx::Error> {
    let opts = PgConnectOptions::from_str(url.trim())?;
    Ok(match password {
        Some(pw) => opts.password(pw),
        None => opts,
    })
}

/// Bounds every statement of a MySQL/MariaDB session on the server; zero
/// leaves the session alone. MariaDB's `max_statement_time` (seconds) bounds
/// every statement; MySQL has no such variable, and its `max_execution_time`
/// (ms) bounds read-only SELECTs only.
pub async fn limit_mysql_statements(
    c: &mut MySqlConnection,
    timeout: Duration,
) -> Result<(), sqlx::Error> {
    if timeout.is_zero() {
        return Ok(());
    }
    let maria = format!(
        "SET SESSION max_statement_time = {:.3}",
        timeout.as_secs_f64()
    );
    if c.execute(maria.as_str()).await.is_err() {
        let my = format!("SET SESSION max_execution_time = {}", timeout.as_millis());
        c.execute(my.as_str()).await?;
    }
    Ok(())
}

/// Bounds every statement of a PostgreSQL session on the server (lock waits
/// included); zero leaves the session alone.
pub async fn limit_pg_statements(
    c: &mut PgConnection,
    timeout: Duration,
) -> Result<(), sqlx::Error> {
    if timeout.is_zero() {
        return Ok(());
    }
    let ms = timeout.as_millis().max(1);
    c.execute(format!("SET statement_timeout = {ms}").as_str())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(DbKind::of_url(" MySQL://h/db"), Some(DbKind::MySql));
        assert_eq!(DbKind::of_url("mariadb://h/db"), Some(DbKind::MySql));
        assert_eq!(DbKind::of_url("postgresql://h/db"), Some(DbKind::Postgres));
        assert_eq!(DbKind::of_url("postgres://h/db"), Some(DbKind::Postgres));
        assert_eq!(DbKind::of_url("sqlite://x"), None);
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact_url("mysql://ds:secret@h:3306/db"),
            "mysql://ds:***@h:3306/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact_url("postgres://u@h/db?password=pw&sslmode=off"),
            "postgres://u@h/db?password=***&sslmode=off"
        );
        // not a URL at all: nothing of it is shown
        assert_eq!(redact_url("not a url"), "***");
    }

    #[test]
    fn options_take_the_password_file() {
        let o = mysql_options(" mysql://ds:url-pw@h:3306/db ", Some("file-pw")).unwrap();
        assert_eq!(o.get_host(), "h");
        assert_eq!(o.get_database(), Some("db"));
        let p = pg_options("postgres://u@h:5433/db", None).unwrap();
        assert_eq!(p.get_port(), 5433);
        assert!(mysql_options("mysql://h:notaport/db", None).is_err());
    }
}
