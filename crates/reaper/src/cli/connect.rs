//! What the commands that connect share: reaching ZooKeeper and the
//! database before anything is read, and progress on a terminal meanwhile.

use super::{EXIT_CONFIG, EXIT_UNREACHABLE};
use crate::app;
use crate::config::Settings;
use std::io::IsTerminal;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(super) fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("… {msg}");
    }
}

/// Connects both sides and waits for a valid registry view (exit 3 on failure).
pub(super) async fn connect(
    s: &Settings,
    cancel: &CancellationToken,
) -> Result<crate::engine::SharedEngine, u8> {
    progress(&format!(
        "connecting to ZooKeeper {} and the database",
        s.zookeeper.connect
    ));
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
        eprintln!(
            "ds-reaper: cannot reach ZooKeeper at {}: {why}",
            s.zookeeper.connect
        );
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
