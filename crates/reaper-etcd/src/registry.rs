//! [`EtcdRegistry`], the handle the daemon holds: the latest view, change
//! notifications, what was detected, and counters. The loop behind it is in
//! [`crate::session`] (connecting, retrying) and [`crate::watch`] (one read
//! and the watch that follows it); the membership rules themselves are
//! reaper-core's [`Membership`].

use crate::keys::Keys;
use crate::shared::{lock, Hooks, Inner};
use crate::watch::Watcher;
use crate::{session, EtcdSettings, EtcdStats};
use reaper_core::ports::{Clock, SystemClock};
use reaper_core::registry::{Detected, LayoutMode, Membership};
use reaper_core::RegistryView;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A live view of DS's etcd registry. Cheap to clone.
#[derive(Clone)]
pub struct EtcdRegistry {
    inner: Arc<Inner>,
}

impl EtcdRegistry {
    /// Starts the background loop (on the current tokio runtime). Never
    /// fails: an unreachable etcd shows as an invalid view and is retried
    /// with capped exponential backoff.
    pub fn start(settings: EtcdSettings, cancel: CancellationToken) -> EtcdRegistry {
        Self::start_with_clock(settings, Arc::new(SystemClock), cancel)
    }

    /// [`EtcdRegistry::start`] stamping losses and validity on `clock`.
    pub fn start_with_clock(
        settings: EtcdSettings,
        clock: Arc<dyn Clock>,
        cancel: CancellationToken,
    ) -> EtcdRegistry {
        Self::start_inner(settings, clock, cancel, Hooks::default())
    }

    #[doc(hidden)]
    pub fn start_with_hooks(
        settings: EtcdSettings,
        cancel: CancellationToken,
        hooks: Hooks,
    ) -> EtcdRegistry {
        Self::start_inner(settings, Arc::new(SystemClock), cancel, hooks)
    }

    fn start_inner(
        settings: EtcdSettings,
        clock: Arc<dyn Clock>,
        cancel: CancellationToken,
        hooks: Hooks,
    ) -> EtcdRegistry {
        let mut membership = Membership::new(
            LayoutMode::for_line(settings.line),
            settings.zone,
            clock.now(),
            format!("connecting to etcd {}", settings.endpoints_text()),
        );
        if let Some((path, stale_after)) = &settings.agents {
            membership = membership.with_agents(path, *stale_after);
        }
        let (tx, rx) = watch::channel(Arc::new(membership.view().clone()));
        let detected = match settings.line {
            Some(l) => Detected::explicit(l),
            None => Detected::unknown(),
        };
        let inner = Arc::new(Inner {
            keys: Keys::new(&settings.namespace),
            settings,
            hooks,
            view_rx: rx,
            detected: Mutex::new(detected),
            errors: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            cancel: cancel.child_token(),
            task: tokio::sync::Mutex::new(None),
            requests: tokio::sync::Mutex::new(None),
            clock,
        });
        let watcher = Watcher::new(inner.clone(), tx, membership);
        let handle = tokio::spawn(session::run(watcher));
        if let Ok(mut t) = inner.task.try_lock() {
            *t = Some(handle);
        }
        EtcdRegistry { inner }
    }

    /// The latest snapshot.
    pub fn view(&self) -> Arc<RegistryView> {
        self.inner.view_rx.borrow().clone()
    }

    /// Notified on every change of the view.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RegistryView>> {
        self.inner.view_rx.clone()
    }

    /// What the registry looks like so far.
    pub fn detected(&self) -> Detected {
        lock(&self.inner.detected).clone()
    }

    pub fn stats(&self) -> EtcdStats {
        EtcdStats {
            errors: self.inner.errors.load(Ordering::Relaxed),
            reconnects: self.inner.reconnects.load(Ordering::Relaxed),
            compactions: self.inner.compactions.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// Stops the loop (the watch stream closes with it).
    pub async fn close(&self) {
        self.inner.cancel.cancel();
        let handle = self.inner.task.lock().await.take();
        if let Some(h) = handle {
            let _ = h.await;
        }
    }
}
