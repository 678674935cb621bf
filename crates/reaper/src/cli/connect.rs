//! What the commands that connect share: reaching the registry (ZooKeeper,
//! etcd or DS's JDBC registry) and the database before anything is read, and
//! progress on a terminal meanwhile.

use super::{EXIT_CONFIG, EXIT_UNREACHABLE};
use crate::app;
use crate::config::{RegistryKind, Settings};
use std::io::IsTerminal;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(super) fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("… {msg}");
    }
}

/// The registry in use and where it is, for messages: `ZooKeeper at <connect>`,
/// `etcd at <endpoints>`, `the JDBC registry at <url>` (the URL redacted).
fn registry(s: &Settings) -> String {
    match s.registry.kind {
        RegistryKind::Zookeeper => format!("ZooKeeper at {}", s.zookeeper.connect),
        RegistryKind::Etcd => format!("etcd at {}", s.etcd.endpoints.join(",")),
        RegistryKind::Jdbc => match &s.jdbc_registry.url {
            Some(url) => format!("the JDBC registry at {url}"),
            None => format!("the JDBC registry at {}", s.database.url),
        },
    }
}

/// Connects both sides and waits for a valid registry view (exit 3 on failure).
pub(super) async fn connect(
    s: &Settings,
    cancel: &CancellationToken,
) -> Result<crate::engine::SharedEngine, u8> {
    progress(&format!("connecting to {} and the database", registry(s)));
    let engine = app::build(s.clone(), cancel, false).map_err(|e| {
        eprintln!("ds-reaper: {e:#}");
        EXIT_CONFIG
    })?;
    let wait = s
        .zookeeper
        .session_timeout
        .clamp(Duration::from_secs(10), Duration::from_secs(30));
    let mut views = engine.watch();
    let valid = tokio::time::timeout(wait, async {
        loop {
            if engine.view().is_valid() {
                return;
            }
            if !views.changed().await {
                return;
            }
        }
    })
    .await;
    if valid.is_err() || !engine.view().is_valid() {
        let why = match &engine.view().state {
            reaper_core::ViewState::Invalid { reason, .. } => reason.clone(),
            _ => "closed".into(),
        };
        eprintln!("ds-reaper: cannot reach {}: {why}", registry(s));
        return Err(EXIT_UNREACHABLE);
    }
    match tokio::time::timeout(Duration::from_secs(15), engine.ping_store()).await {
        Ok(Ok(())) => Ok(engine),
        Ok(Err(e)) => {
            eprintln!(
                "ds-reaper: cannot reach the database {}: {e}",
                s.database.url
            );
            Err(EXIT_UNREACHABLE)
        }
        Err(_) => {
            eprintln!("ds-reaper: the database {} did not answer", s.database.url);
            Err(EXIT_UNREACHABLE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_registry_in_use() {
        let mut s = Settings::default();
        s.zookeeper.connect = "zk1:2181".into();
        assert_eq!(registry(&s), "ZooKeeper at zk1:2181");
        s.registry.kind = RegistryKind::Etcd;
        s.etcd.endpoints = vec!["http://e1:2379".into(), "http://e2:2379".into()];
        assert_eq!(registry(&s), "etcd at http://e1:2379,http://e2:2379");
        s.registry.kind = RegistryKind::Jdbc;
        s.database.url = "mysql://ds:secret@db:3306/ds".parse().unwrap();
        let jdbc = registry(&s);
        assert!(jdbc.starts_with("the JDBC registry at mysql://"), "{jdbc}");
        assert!(!jdbc.contains("secret"), "the password is redacted: {jdbc}");
    }
}
