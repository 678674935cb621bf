//! How to reach DS's JDBC registry, and how to read it (the URL's dialect
//! and redaction are reaper-sql's [`reaper_sql::connect`]).

use reaper_core::{DsLine, Zone};
pub use reaper_sql::connect::{redact_url, DbKind};
use std::fmt;
use std::time::Duration;

/// `[jdbc_registry]` (SPEC §6, §14) with what it borrows from `[database]`
/// and `[dolphinscheduler]`.
#[derive(Clone)]
pub struct JdbcSettings {
    /// `mysql://…`, `mariadb://…`, `postgres://…`: `[jdbc_registry] url`, or
    /// `[database] url` when that is empty.
    pub url: String,
    /// Overrides the URL's password (`[database] password_file`).
    pub password: Option<String>,
    /// `[jdbc_registry] poll_interval`: one statement per interval.
    pub poll_interval: Duration,
    /// `[jdbc_registry] expire_after`: on 3.1/3.2 a row whose `last_term` is
    /// older than this is dead (DS's term-refresh-interval × term-expire-times).
    pub expire_after: Duration,
    /// Every statement is bounded by this, on the server where it can be and
    /// always on the client (`[database] statement_timeout`; zero: 10 s).
    pub statement_timeout: Duration,
    /// An explicit line fixes the table flavour, the layout and the format;
    /// `None` detects them from the database and the keys.
    pub line: Option<DsLine>,
    /// Zone of DS's date-times (heartbeats of the lines read here carry
    /// epoch milliseconds, so it matters only for completeness).
    pub zone: Zone,
    /// SPEC §14 jdbc: after an outage of the registry's database longer than
    /// DS's session timeout, losses first seen within this long of its
    /// return are the outage's (`[reconcile] grace_period`).
    pub outage_grace: Duration,
    /// ... and hold the brake at most this long after the return
    /// (`[jdbc_registry] outage_hold`).
    pub outage_hold: Duration,
}

impl JdbcSettings {
    /// Settings with SPEC §6's defaults for everything but the URL.
    pub fn new(url: impl Into<String>) -> Self {
        JdbcSettings {
            url: url.into(),
            password: None,
            poll_interval: Duration::from_secs(1),
            expire_after: Duration::from_secs(6),
            statement_timeout: Duration::from_secs(10),
            line: None,
            zone: Zone::Local,
            outage_grace: Duration::from_secs(60),
            outage_hold: Duration::from_secs(30 * 60),
        }
    }

    pub fn kind(&self) -> Option<DbKind> {
        DbKind::of_url(&self.url)
    }

    /// The client-side bound of one statement.
    pub(crate) fn request_timeout(&self) -> Duration {
        if self.statement_timeout.is_zero() {
            Duration::from_secs(10)
        } else {
            self.statement_timeout
        }
    }

    /// The poll interval, never below 50 ms (a zero would spin).
    pub(crate) fn interval(&self) -> Duration {
        self.poll_interval.max(Duration::from_millis(50))
    }

    /// How long the view stays valid without a successful poll (SPEC §14).
    pub(crate) fn stale_after(&self) -> Duration {
        self.interval() * 3
    }
}

impl fmt::Debug for JdbcSettings {
    // the password must never reach a log line
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JdbcSettings")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("poll_interval", &self.poll_interval)
            .field("expire_after", &self.expire_after)
            .field("statement_timeout", &self.statement_timeout)
            .field("line", &self.line)
            .field("zone", &self.zone)
            .field("outage_grace", &self.outage_grace)
            .field("outage_hold", &self.outage_hold)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let mut s = JdbcSettings::new("postgres://u:pw1@h/db");
        s.password = Some("pw2".into());
        let d = format!("{s:?}");
        assert!(!d.contains("pw1") && !d.contains("pw2"), "{d}");
    }

    #[test]
    fn intervals() {
        let mut s = JdbcSettings::new("mysql://h/db");
        assert_eq!(s.stale_after(), Duration::from_secs(3));
        s.poll_interval = Duration::ZERO;
        assert_eq!(s.interval(), Duration::from_millis(50));
        s.statement_timeout = Duration::ZERO;
        assert_eq!(s.request_timeout(), Duration::from_secs(10));
    }
}
