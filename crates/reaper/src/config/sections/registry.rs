//! The registry sections (SPEC §14): which registry DS uses, and how each
//! kind is reached.

use super::secs;
use crate::config::choices::RegistryKind;
use crate::config::redact::{SecretFile, SecretUrl};
use crate::config::values;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[registry]` (SPEC §14).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistrySection {
    #[serde(rename = "type")]
    pub kind: RegistryKind,
}

/// `[zookeeper]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZooKeeper {
    /// Comma-separated ensemble.
    #[serde(deserialize_with = "values::non_empty")]
    pub connect: String,
    #[serde(deserialize_with = "values::registry_path")]
    pub root: String,
    #[serde(with = "values::duration")]
    pub session_timeout: Duration,
}

impl Default for ZooKeeper {
    fn default() -> Self {
        ZooKeeper {
            connect: "127.0.0.1:2181".into(),
            root: "/dolphinscheduler".into(),
            session_timeout: secs(30),
        }
    }
}

/// `[etcd]` (SPEC §14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Etcd {
    #[serde(deserialize_with = "values::endpoints")]
    pub endpoints: Vec<String>,
    /// DS's namespace, applied as a raw key prefix.
    pub namespace: String,
    pub user: String,
    #[serde(with = "values::blank")]
    pub password_file: Option<SecretFile>,
    #[serde(with = "values::period")]
    pub lease_ttl: Duration,
}

impl Default for Etcd {
    fn default() -> Self {
        Etcd {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            namespace: "dolphinscheduler".into(),
            user: String::new(),
            password_file: None,
            lease_ttl: secs(30),
        }
    }
}

/// `[jdbc_registry]` (SPEC §14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JdbcRegistry {
    /// Unset: the `[database]` connection.
    #[serde(with = "values::blank")]
    pub url: Option<SecretUrl>,
    #[serde(with = "values::period")]
    pub poll_interval: Duration,
    /// 3.1/3.2: DS's term-refresh-interval × term-expire-times.
    #[serde(with = "values::period")]
    pub expire_after: Duration,
    /// SPEC §14: how long losses first seen right after a registry-database
    /// outage hold the brake (`registry_outage`) at most.
    #[serde(with = "values::period")]
    pub outage_hold: Duration,
}

impl Default for JdbcRegistry {
    fn default() -> Self {
        JdbcRegistry {
            url: None,
            poll_interval: secs(1),
            expire_after: secs(6),
            outage_hold: secs(1800),
        }
    }
}
