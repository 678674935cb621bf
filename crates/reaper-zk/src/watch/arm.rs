//! Arming the persistent recursive watches of one connection.

use super::Watcher;
use crate::{bounded, ZkError};
use reaper_core::registry::LayoutMode;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

/// What ends a connection's watches, to be armed and listed again.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Rewatch {
    #[error("watching {path}: {source}")]
    Arm {
        path: String,
        #[source]
        source: ZkError,
    },
    #[error("reading DS's failover locks: {0}")]
    Locks(#[source] ZkError),
}

impl Watcher {
    /// Arms a watch on every directory of the view and swaps the new
    /// forwarders in; an error names the directory that could not be watched.
    pub(super) async fn arm(
        &self,
        client: &zk::Client,
        forwarders: &mut Forwarders,
        tx: &mpsc::UnboundedSender<zk::WatchedEvent>,
        mode: LayoutMode,
        agents: Option<&str>,
    ) -> Result<(), Rewatch> {
        let rt = self.inner.settings.request_timeout;
        // New watches first, then drop the old ones: dropping the last
        // watcher of a path would remove the server-side watch.
        let mut fresh = Vec::new();
        let mut failed = None;
        let dirs = mode
            .server_dirs()
            .iter()
            .map(|d| d.to_string())
            .chain(agents.map(str::to_string))
            .chain(self.locks.dirs.iter().map(|d| d.path.to_string()));
        for dir in dirs {
            let path = self.full(&dir);
            match bounded(
                rt,
                client.watch(&path, zk::AddWatchMode::PersistentRecursive),
            )
            .await
            {
                Ok(w) => fresh.push(forward(w, tx.clone())),
                Err(source) => {
                    failed = Some(Rewatch::Arm { path, source });
                    break;
                }
            }
        }
        drop(std::mem::replace(forwarders, Forwarders(fresh)));
        match failed {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }
}

/// Forwarding tasks of one connection, aborted when dropped (also when the
/// session future is dropped on cancellation).
#[derive(Default)]
pub(super) struct Forwarders(Vec<JoinHandle<()>>);

impl Drop for Forwarders {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// Moves a persistent watcher's node events into the loop's channel.
fn forward(
    mut w: zk::PersistentWatcher,
    tx: mpsc::UnboundedSender<zk::WatchedEvent>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let ev = w.changed().await;
            if ev.event_type == zk::EventType::Session {
                // `changed` panics once a terminal state was delivered.
                if ev.session_state.is_terminated() {
                    break;
                }
                continue;
            }
            if tx.send(ev).is_err() {
                break;
            }
        }
    })
}
