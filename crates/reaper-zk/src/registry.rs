//! [`ZkRegistry`], the handle the daemon holds: the latest view, change
//! notifications, what was detected, counters, and the 1.2 task-queue
//! cleanup; and the loop behind it, one session after another (the pieces
//! are in [`crate::session`]), each served by the watch loop of
//! [`crate::watch`]. The membership rules themselves are reaper-core's
//! [`Membership`].
//!
//! The view is handed out lazily. 2,000 workers rewrite their heartbeat
//! every 10 s; copying the whole view for each batch of them cost more than
//! everything else the daemon does between sweeps. So the machine lives in
//! the state the handle shares with the watch loop (`shared`), and
//! [`ZkRegistry::view`] copies it only when it changed since the last copy:
//! a reader always gets every event applied so far, as before. Membership changes (servers come or go, losses, validity)
//! still wake [`ZkRegistry::changes`] at once; [`ZkRegistry::subscribe`] still
//! sees every change, at the old cost, while someone holds a receiver.

use crate::session::{backoff, close_client, connect, wait_to_retry, Outcome};
use crate::shared::{lock, Inner, Shared};
use crate::watch::Watcher;
use crate::{bounded, ZkError, ZkSettings, ZkStats};
use reaper_core::ports::{Clock, SystemClock};
use reaper_core::registry::{Detected, Gap, LayoutMode, Membership};
use reaper_core::RegistryView;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// A live view of the DS registry. Cheap to clone.
#[derive(Clone)]
pub struct ZkRegistry {
    inner: Arc<Inner>,
}

impl ZkRegistry {
    /// Starts the background watch loop. Never fails: an unreachable ensemble
    /// shows as an invalid view and is retried with capped exponential backoff.
    pub fn start(settings: ZkSettings, cancel: CancellationToken) -> ZkRegistry {
        ZkRegistry::start_with_clock(settings, Arc::new(SystemClock), cancel)
    }

    /// [`ZkRegistry::start`] stamping losses and validity on `clock`.
    pub fn start_with_clock(
        settings: ZkSettings,
        clock: Arc<dyn Clock>,
        cancel: CancellationToken,
    ) -> ZkRegistry {
        let now = clock.now();
        let mut membership = Membership::new(
            LayoutMode::for_line(settings.line),
            settings.zone,
            now,
            format!("connecting to {}", settings.connect),
        );
        if let Some((path, stale_after)) = &settings.agents {
            membership = membership.with_agents(path, *stale_after);
        }
        let mut shared = Shared::new(membership, settings.line.map(Detected::explicit));
        let all_tx = watch::Sender::new(shared.view());
        let inner = Arc::new(Inner {
            root: settings.root_prefix(),
            settings,
            shared: Mutex::new(shared),
            changes_tx: watch::Sender::new(()),
            all_tx,
            expirations: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            client: Mutex::new(None),
            cancel: cancel.child_token(),
            task: tokio::sync::Mutex::new(None),
            clock,
        });
        let watcher = Watcher::new(inner.clone());
        let handle = tokio::spawn(run(watcher));
        if let Ok(mut t) = inner.task.try_lock() {
            *t = Some(handle);
        }
        ZkRegistry { inner }
    }

    /// The latest snapshot, with every event applied so far (copied only
    /// when something changed since the last call).
    pub fn view(&self) -> Arc<RegistryView> {
        self.inner.view()
    }

    /// Notified on every change of the view, each with its snapshot. Costs a
    /// copy of the view per change while a receiver lives: for tests and
    /// tools; the daemon waits on [`ZkRegistry::changes`].
    pub fn subscribe(&self) -> watch::Receiver<Arc<RegistryView>> {
        // Subscribe first, then refresh: a change in between is not missed.
        let mut rx = self.inner.all_tx.subscribe();
        self.inner.all_tx.send_replace(self.inner.view());
        rx.mark_unchanged();
        rx
    }

    /// Notified when membership changes — a server comes or goes, a loss is
    /// stamped or forgotten, the view becomes valid or invalid — but not for
    /// heartbeat data alone, which [`ZkRegistry::view`] has at once anyway.
    pub fn changes(&self) -> watch::Receiver<()> {
        self.inner.changes_tx.subscribe()
    }

    /// What the registry looks like so far.
    pub fn detected(&self) -> Detected {
        lock(&self.inner.shared).detected()
    }

    pub fn stats(&self) -> ZkStats {
        ZkStats {
            session_expirations: self.inner.expirations.load(Ordering::Relaxed),
            errors: self.inner.errors.load(Ordering::Relaxed),
            reconnects: self.inner.reconnects.load(Ordering::Relaxed),
        }
    }

    /// 1.2.x only: deletes `<root>/tasks_queue/<procPrio>_<procInstId>_<taskPrio>_<taskInstId>_<ips>`
    /// entries of `task_id`; returns how many were deleted (0 if none or no queue).
    pub async fn delete_task_queue_entries(&self, task_id: i64) -> Result<usize, ZkError> {
        let client = lock(&self.inner.client)
            .clone()
            .ok_or(ZkError::NotConnected)?;
        let rt = self.inner.settings.request_timeout;
        let dir = format!("{}/tasks_queue", self.inner.root);
        let names = match bounded(rt, client.list_children(&dir)).await {
            Ok(n) => n,
            Err(ZkError::Zk(zk::Error::NoNode)) => return Ok(0),
            Err(e) => {
                self.inner.error();
                return Err(e);
            }
        };
        let mut deleted = 0;
        for name in names
            .iter()
            .filter(|n| queue_entry_task_id(n) == Some(task_id))
        {
            let path = format!("{dir}/{name}");
            match bounded(rt, client.delete(&path, None)).await {
                Ok(()) => {
                    tracing::info!(path = %path, task_id, "deleted 1.2 task queue entry");
                    deleted += 1;
                }
                Err(ZkError::Zk(zk::Error::NoNode)) => {}
                Err(e) => {
                    self.inner.error();
                    return Err(e);
                }
            }
        }
        Ok(deleted)
    }

    /// The current session's client and the request time limit, for one-off
    /// requests (kill orders); counts an error when there is no session.
    pub(crate) fn request_client(&self) -> Result<(zk::Client, std::time::Duration), ZkError> {
        let client = lock(&self.inner.client)
            .clone()
            .ok_or(ZkError::NotConnected)?;
        Ok((client, self.inner.settings.request_timeout))
    }

    pub(crate) fn root(&self) -> &str {
        &self.inner.root
    }

    pub(crate) fn count_error(&self) {
        self.inner.error();
    }

    /// Closes the session promptly and stops the loop.
    pub async fn close(&self) {
        self.inner.cancel.cancel();
        let handle = self.inner.task.lock().await.take();
        if let Some(h) = handle {
            let _ = h.await;
        }
        lock(&self.inner.client).take();
    }
}

/// The registry's loop: a session, served until it ends, then the next.
/// Every new session is a gap in sight ([`Gap::Session`]).
async fn run(mut w: Watcher) {
    let inner = w.inner.clone();
    let cancel = inner.cancel.clone();
    let mut backoff = backoff();
    loop {
        if cancel.is_cancelled() {
            break;
        }
        let addr = &inner.settings.connect;
        w.invalidate(Gap::Session, format!("connecting to {addr}"));
        let Some(client) = cancel.run_until_cancelled(connect(&inner.settings)).await else {
            break;
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                inner.error();
                tracing::warn!(error = %e, connect = %addr, "cannot connect to ZooKeeper");
                w.invalidate(Gap::Session, format!("connecting to {addr}: {e}"));
                if !wait_to_retry(&cancel, &mut backoff).await {
                    break;
                }
                continue;
            }
        };
        tracing::info!(session = ?client.session_id(), "ZooKeeper session established");
        *lock(&inner.client) = Some(client.clone());
        // Cancellation also interrupts a listing or read in flight, so
        // close() is prompt even against a slow ensemble.
        let outcome = cancel
            .run_until_cancelled(w.serve_session(&client, &mut backoff))
            .await
            .unwrap_or(Outcome::Cancelled);
        lock(&inner.client).take();
        match outcome {
            Outcome::Cancelled => {
                close_client(client).await;
                break;
            }
            Outcome::Expired => {
                inner.expirations.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("ZooKeeper session expired; building a new session");
                w.invalidate(Gap::Session, "ZooKeeper session expired");
                drop(client);
            }
            Outcome::Ended(reason) => {
                inner.error();
                w.invalidate(Gap::Session, reason);
                drop(client);
                if !wait_to_retry(&cancel, &mut backoff).await {
                    break;
                }
            }
        }
    }
    w.invalidate(Gap::Session, "registry closed");
}

/// The task instance id of a 1.2 `tasks_queue` entry name.
pub(crate) fn queue_entry_task_id(name: &str) -> Option<i64> {
    name.split('_').nth(3).and_then(|s| s.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_entry_names() {
        assert_eq!(queue_entry_task_id("2_17_1_345_-1"), Some(345));
        assert_eq!(
            queue_entry_task_id("2_17_1_345_167772165,167772166"),
            Some(345)
        );
        assert_eq!(queue_entry_task_id("garbage"), None);
    }
}
