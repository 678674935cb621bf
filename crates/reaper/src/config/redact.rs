//! Secrets never print (SPEC §6): not in `Debug`, not in `config check`, not
//! in an error message. The database password may sit in `database.url` (or
//! `jdbc_registry.url`) or in a `password_file`; the HTTP token and the etcd
//! password come from files. Each has a type here whose `Debug`, `Display`
//! and `Serialize` redact it, so printing the settings — which is all
//! `config check` does — cannot reveal one.

use super::Settings;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A secret value: `Debug` and `Serialize` print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret itself, for the one place that needs it (a connection, a comparison).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("***")
    }
}

/// A database URL, which may carry a password: it prints with the password
/// (in the authority or a `password=` parameter) as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(Secret);

impl SecretUrl {
    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    /// The URL with its password replaced by `***`.
    pub fn redacted(&self) -> String {
        redact_url(self.expose())
    }
}

/// A database URL of no supported scheme. The message never repeats the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be a mysql://, mariadb://, postgres:// or postgresql:// URL")]
pub struct NotADatabaseUrl;

impl FromStr for SecretUrl {
    type Err = NotADatabaseUrl;
    /// Only the scheme is checked; the message never repeats the URL.
    fn from_str(s: &str) -> Result<Self, NotADatabaseUrl> {
        let t = s.trim();
        match t.split_once("://") {
            Some(("mysql" | "mariadb" | "postgres" | "postgresql", rest)) if !rest.is_empty() => {
                Ok(SecretUrl(Secret::new(t)))
            }
            _ => Err(NotADatabaseUrl),
        }
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

pub use reaper_core::redact_url;

/// A `*_file` key (`database.password_file`, `http.token_file`, ...): the path
/// as written, and the secret read from it when the configuration is loaded —
/// so an unreadable or empty file is a configuration error naming the key.
/// It prints as its path.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretFile {
    path: PathBuf,
    secret: Secret,
}

impl SecretFile {
    /// Reads the secret: the file's content without its trailing newline.
    pub fn read(path: &Path) -> Result<Self, BadSecretFile> {
        let text = std::fs::read_to_string(path).map_err(|why| BadSecretFile::Unreadable {
            path: path.to_path_buf(),
            why,
        })?;
        let s = text.trim_end_matches(['\n', '\r']);
        if s.is_empty() {
            return Err(BadSecretFile::Empty(path.to_path_buf()));
        }
        Ok(SecretFile {
            path: path.to_path_buf(),
            secret: Secret::new(s),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn secret(&self) -> &Secret {
        &self.secret
    }
}

/// Why a `*_file` key's secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BadSecretFile {
    #[error("cannot read {}: {why}", .path.display())]
    Unreadable { path: PathBuf, why: std::io::Error },
    #[error("{} is empty", .0.display())]
    Empty(PathBuf),
}

impl FromStr for SecretFile {
    type Err = BadSecretFile;
    /// Parsing a path reads the file (see the type's doc).
    fn from_str(s: &str) -> Result<Self, BadSecretFile> {
        SecretFile::read(Path::new(s.trim()))
    }
}

impl fmt::Display for SecretFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())
    }
}

impl fmt::Debug for SecretFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretFile")
            .field("path", &self.path)
            .field("secret", &self.secret)
            .finish()
    }
}

impl Settings {
    /// The effective configuration as TOML, secrets redacted (`config check`):
    /// the typed settings serialised, so every key is there with its value.
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string(self)
            .unwrap_or_else(|e| format!("# cannot render the configuration: {e}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_redaction_is_conservative() {
        for (url, want) in [
            ("mysql://u:p@h:3306/db", "mysql://u:***@h:3306/db"),
            ("mysql://u:p/a@ss@h/db", "mysql://u:***@h/db"),
            (
                "postgres://h/db?user=u&password=p&x=1",
                "postgres://h/db?user=u&password=***&x=1",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
        ] {
            assert_eq!(redact_url(url), want);
        }
    }
}
