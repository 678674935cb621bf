//! [`JdbcRegistry`], the handle the daemon holds: the latest view, change
//! notifications, what was detected, counters. The loop behind it is
//! [`crate::poll`]; the membership rules are reaper-core's [`Membership`].

use crate::flavour::Flavour;
use crate::poll::Poller;
use crate::shared::{lock, Inner, Stats};
use crate::source::JdbcSource;
use crate::{JdbcError, JdbcSettings};
use reaper_core::ports::{Clock, SystemClock};
use reaper_core::registry::{Detected, LayoutMode, Membership};
use reaper_core::RegistryView;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A live view of DS's JDBC registry. Cheap to clone.
#[derive(Clone)]
pub struct JdbcRegistry {
    inner: Arc<Inner>,
}

/// Counters for metrics and status (cumulative, except where noted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JdbcStats {
    pub polls: u64,
    /// Polls that failed (each invalidated the view).
    pub failures: u64,
    /// Good polls right after failed ones.
    pub recoveries: u64,
    /// Rows present at the last poll whose server is dead by DS's rule.
    pub dead_rows: u64,
    /// How long the last poll took (statement and decoding).
    pub last_poll: Duration,
}

impl JdbcRegistry {
    /// Starts polling (needs a tokio runtime). Fails only on settings that
    /// can never work — a URL of no supported database, a line without a
    /// database registry; an unreachable database or missing tables show as
    /// an invalid view, retried every poll.
    pub fn start(
        settings: JdbcSettings,
        cancel: CancellationToken,
    ) -> Result<JdbcRegistry, JdbcError> {
        JdbcRegistry::start_with_clock(settings, Arc::new(SystemClock), cancel)
    }

    /// [`JdbcRegistry::start`] judging rows and stamping losses on `clock`.
    pub fn start_with_clock(
        settings: JdbcSettings,
        clock: Arc<dyn Clock>,
        cancel: CancellationToken,
    ) -> Result<JdbcRegistry, JdbcError> {
        let source = Arc::new(JdbcSource::connect_lazy(&settings)?);
        let membership = Membership::new(
            LayoutMode::for_line(settings.line),
            settings.zone,
            clock.now(),
            "registry not polled yet",
        );
        let (tx, rx) = watch::channel(Arc::new(membership.view().clone()));
        let detected = match settings.line {
            Some(l) => Detected::explicit(l),
            None => Detected::unknown(),
        };
        let inner = Arc::new(Inner {
            flavour: Mutex::new(source.known_flavour()),
            source,
            settings,
            view_rx: rx,
            detected: Mutex::new(detected),
            stats: Stats::default(),
            cancel: cancel.child_token(),
            task: tokio::sync::Mutex::new(None),
            clock,
        });
        let handle = tokio::spawn(Poller::new(inner.clone(), tx, membership).run());
        if let Ok(mut t) = inner.task.try_lock() {
            *t = Some(handle);
        }
        Ok(JdbcRegistry { inner })
    }

    /// The latest snapshot.
    pub fn view(&self) -> Arc<RegistryView> {
        self.inner.view_rx.borrow().clone()
    }

    /// Notified on every change of the view (not on every poll).
    pub fn subscribe(&self) -> watch::Receiver<Arc<RegistryView>> {
        self.inner.view_rx.clone()
    }

    /// What the keys and the tables say about the DS line so far.
    pub fn detected(&self) -> Detected {
        lock(&self.inner.detected).clone()
    }

    /// The registry tables in use, once known.
    pub fn flavour(&self) -> Option<Flavour> {
        *lock(&self.inner.flavour)
    }

    pub fn stats(&self) -> JdbcStats {
        let s = &self.inner.stats;
        JdbcStats {
            polls: s.polls.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            recoveries: s.recoveries.load(Ordering::Relaxed),
            dead_rows: s.dead_rows.load(Ordering::Relaxed),
            last_poll: Duration::from_micros(s.last_poll_us.load(Ordering::Relaxed)),
        }
    }

    /// Stops polling (the view turns invalid) and closes the connections.
    pub async fn close(&self) {
        self.inner.cancel.cancel();
        let handle = self.inner.task.lock().await.take();
        if let Some(h) = handle {
            let _ = h.await;
        }
        // the loop is gone, so no connection is out; bounded all the same
        let _ = tokio::time::timeout(Duration::from_secs(3), self.inner.source.close()).await;
    }
}
