//! How to reach the database.

use crate::connect::{redact_url, DbKind};
use reaper_core::Zone;
use std::fmt;
use std::time::Duration;

#[derive(Clone)]
pub struct DbSettings {
    /// `mysql://…`, `postgres://…` or `postgresql://…`.
    pub url: String,
    /// Overrides the URL's password (`password_file`).
    pub password: Option<String>,
    pub max_connections: u32,
    pub statement_timeout: Duration,
    pub zone: Zone,
}

impl DbSettings {
    /// The dialect the URL names, if any.
    pub fn kind(&self) -> Option<DbKind> {
        DbKind::of_url(&self.url)
    }
}

impl fmt::Debug for DbSettings {
    // the password must never reach a log line
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbSettings")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("max_connections", &self.max_connections)
            .field("statement_timeout", &self.statement_timeout)
            .field("zone", &self.zone)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        let s = DbSettings {
            url: "postgres://u:pw@h/db".into(),
            password: Some("pw2".into()),
            max_connections: 1,
            statement_timeout: Duration::from_secs(1),
            zone: Zone::Local,
        };
        let d = format!("{s:?}");
        assert!(!d.contains("pw"), "{d}");
    }
}
