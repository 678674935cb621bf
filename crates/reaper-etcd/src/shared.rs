//! What the [`EtcdRegistry`](crate::EtcdRegistry) handle and the loop
//! behind it (the session, the watch, kill orders) share: settings, the
//! latest view, counters, the test hooks. Every side builds on it; it knows
//! none of them.

use crate::keys::Keys;
use crate::EtcdSettings;
use reaper_core::ports::{BoxFuture, Clock};
use reaper_core::registry::Detected;
use reaper_core::RegistryView;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Called with the revision of each full read, before its watch is created.
pub type AfterRead = Arc<dyn Fn(i64) -> BoxFuture<'static, ()> + Send + Sync>;

/// Test hooks: points in the loop a test may stop at to make something
/// happen there (a compaction between the read and the watch). The daemon
/// passes none.
#[doc(hidden)]
#[derive(Clone, Default)]
pub struct Hooks {
    pub after_read: Option<AfterRead>,
}

/// What the handle and the loop share.
pub(crate) struct Inner {
    pub(crate) settings: EtcdSettings,
    pub(crate) keys: Keys,
    pub(crate) hooks: Hooks,
    pub(crate) view_rx: watch::Receiver<Arc<RegistryView>>,
    pub(crate) detected: Mutex<Detected>,
    pub(crate) errors: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) cancel: CancellationToken,
    pub(crate) task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    /// A client for one-off requests (kill orders), connected on first use.
    pub(crate) requests: tokio::sync::Mutex<Option<etcd_client::Client>>,
    /// The daemon's clock: losses and validity are stamped on it.
    pub(crate) clock: Arc<dyn Clock>,
}

impl Inner {
    pub(crate) fn now(&self) -> reaper_core::Instant {
        self.clock.now()
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only plain assignments happen under these locks, so a poisoned one is
    // still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
