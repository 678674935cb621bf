//! What the [`JdbcRegistry`](crate::JdbcRegistry) handle and its poll loop
//! share: the settings, the source, the latest view and the counters. Both
//! sides build on it; it knows neither.

use crate::flavour::Flavour;
use crate::source::JdbcSource;
use crate::JdbcSettings;
use reaper_core::ports::Clock;
use reaper_core::registry::Detected;
use reaper_core::RegistryView;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) polls: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) recoveries: AtomicU64,
    pub(crate) dead_rows: AtomicU64,
    pub(crate) last_poll_us: AtomicU64,
}

/// What the handle and the loop share.
pub(crate) struct Inner {
    pub(crate) settings: JdbcSettings,
    pub(crate) source: Arc<JdbcSource>,
    pub(crate) view_rx: watch::Receiver<Arc<RegistryView>>,
    pub(crate) detected: Mutex<Detected>,
    /// The flavour of the last good poll.
    pub(crate) flavour: Mutex<Option<Flavour>>,
    pub(crate) stats: Stats,
    pub(crate) cancel: CancellationToken,
    pub(crate) task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    /// The daemon's clock: rows are judged, losses stamped on it.
    pub(crate) clock: Arc<dyn Clock>,
}

impl Inner {
    pub(crate) fn now(&self) -> reaper_core::Instant {
        self.clock.now()
    }

    pub(crate) fn record_poll(&self, took: Duration) {
        self.stats.polls.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.stats.last_poll_us.store(us, Ordering::Relaxed);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only plain assignments happen under these locks, so a poisoned one is consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
