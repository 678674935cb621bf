//! What the [`ZkRegistry`](crate::ZkRegistry) handle and its loops (the
//! sessions, the watch of each) share: the settings, the membership machine
//! with the copies made of it, counters, the current client. Every side
//! builds on it; it knows none of them.

use crate::ZkSettings;
use reaper_core::ports::Clock;
use reaper_core::registry::{Detected, Membership};
use reaper_core::RegistryView;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// What the handle and the loop share.
pub(crate) struct Inner {
    pub(crate) settings: ZkSettings,
    /// The root without a trailing slash ("" for "/").
    pub(crate) root: String,
    /// The membership machine and its latest copies.
    pub(crate) shared: Mutex<Shared>,
    /// Woken on membership changes (the engine's port).
    pub(crate) changes_tx: watch::Sender<()>,
    /// Every change with its view, for [`ZkRegistry::subscribe`]; fed only
    /// while it has receivers.
    pub(crate) all_tx: watch::Sender<Arc<RegistryView>>,
    pub(crate) expirations: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    /// The current session's client, for one-off requests.
    pub(crate) client: Mutex<Option<zk::Client>>,
    pub(crate) cancel: CancellationToken,
    pub(crate) task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    /// The daemon's clock: losses and validity are stamped on it.
    pub(crate) clock: Arc<dyn Clock>,
}

impl Inner {
    pub(crate) fn now(&self) -> reaper_core::Instant {
        self.clock.now()
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The current view: the last copy, or a new one when the machine
    /// changed since.
    pub(crate) fn view(&self) -> Arc<RegistryView> {
        lock(&self.shared).view()
    }
}

/// The membership machine with the copies made of it, each dropped when the
/// machine changes.
pub(crate) struct Shared {
    pub(crate) membership: Membership,
    view: Option<Arc<RegistryView>>,
    /// Only kept when the line is detected (an explicit line fixes it).
    detected: Option<Detected>,
    explicit: Option<Detected>,
}

impl Shared {
    pub(crate) fn new(membership: Membership, explicit: Option<Detected>) -> Self {
        Shared {
            membership,
            view: None,
            detected: None,
            explicit,
        }
    }

    /// The machine changed: later readers get a new copy.
    pub(crate) fn changed(&mut self) {
        self.view = None;
        self.detected = None;
    }

    pub(crate) fn view(&mut self) -> Arc<RegistryView> {
        self.view
            .get_or_insert_with(|| Arc::new(self.membership.view().clone()))
            .clone()
    }

    pub(crate) fn detected(&mut self) -> Detected {
        if let Some(d) = &self.explicit {
            return d.clone();
        }
        self.detected
            .get_or_insert_with(|| self.membership.detected())
            .clone()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave them inconsistent
    // (plain assignments), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
