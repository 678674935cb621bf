//! How to reach the database.

use reaper_core::Zone;
use std::fmt;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    MySql,
    Postgres,
}

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
        let lower = self.url.trim().to_ascii_lowercase();
        if lower.starts_with("mysql://") || lower.starts_with("mariadb://") {
            Some(DbKind::MySql)
        } else if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Some(DbKind::Postgres)
        } else {
            None
        }
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

/// The URL with any password replaced by `***`, for logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((cred, host)) => {
            let user = cred.split(':').next().unwrap_or("");
            if cred.contains(':') {
                format!("{scheme}://{user}:***@{host}{tail}")
            } else {
                format!("{scheme}://{user}@{host}{tail}")
            }
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(
            redact_url("mysql://ds:secret@h:3306/db"),
            "mysql://ds:***@h:3306/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
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
