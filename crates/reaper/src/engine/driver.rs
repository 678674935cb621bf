//! When sweeps run: every `sweep_interval`, at the next instant the planner
//! says a sweep could newly act (a loss leaving its grace period, the view
//! leaving `startup_settle`), and shortly after membership changes; plus the
//! systemd watchdog and readiness notifications, from this loop so that a
//! hung loop stops them.

use super::{Engine, SharedEngine, Trigger};
use reaper_core::{Instant, RegistryView, ViewState};
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant as TokioInstant;
use tokio_util::sync::CancellationToken;

/// Bursts of membership changes (a whole rack leaving) within this window
/// make one sweep.
pub const COALESCE: Duration = Duration::from_millis(300);

/// A deadline's sweep runs this long after it, so that it is past.
const PAST_DEADLINE: Duration = Duration::from_millis(20);

impl Engine {
    /// When a sweep could newly act: the last plan's wake-up, or — when the
    /// view changed since — what the planner says of the current view,
    /// whichever comes first (a loss between sweeps moves it earlier).
    pub fn wake(&self) -> Option<Instant> {
        let r = &self.settings.reconcile;
        let now = self.now();
        let planned = self.status_read().wake.filter(|t| *t > now);
        let current = reaper_core::plan::wake(&self.view(), r.grace_period, r.startup_settle, now);
        planned.into_iter().chain(current).min()
    }
}

/// Membership and validity, ignoring heartbeat data: a change here is worth a sweep.
fn membership(v: &RegistryView) -> (bool, Vec<String>, Vec<String>) {
    let mut w: Vec<String> = v.workers.keys().cloned().collect();
    w.sort();
    let mut m: Vec<String> = v.masters.keys().cloned().collect();
    m.sort();
    (matches!(v.state, ViewState::Valid { .. }), w, m)
}

/// How far ahead an instant on the engine's clock lies, as a tokio instant.
fn to_tokio(engine: &Engine, at: Instant) -> TokioInstant {
    let d = (at - engine.now()).to_std().unwrap_or(Duration::ZERO);
    TokioInstant::now() + d
}

/// What the loop keeps between wake-ups.
struct Driver {
    engine: SharedEngine,
    interval: Duration,
    next_tick: TokioInstant,
    membership: (bool, Vec<String>, Vec<String>),
    lost_seen: HashSet<String>,
    pending_event: Option<TokioInstant>,
    ready_sent: bool,
}

impl Driver {
    fn new(engine: SharedEngine) -> Driver {
        let interval = engine
            .settings
            .reconcile
            .sweep_interval
            .max(Duration::from_millis(100));
        let view = engine.view();
        Driver {
            interval,
            next_tick: TokioInstant::now() + interval,
            membership: membership(&view),
            lost_seen: view.lost_workers.keys().cloned().collect(),
            pending_event: None,
            ready_sent: false,
            engine,
        }
    }

    /// The next tick, deadline or coalesced event, whichever comes first.
    fn wake_at(&self) -> TokioInstant {
        let deadline = self
            .engine
            .wake()
            .map(|d| to_tokio(&self.engine, d) + PAST_DEADLINE);
        [deadline, self.pending_event]
            .into_iter()
            .flatten()
            .fold(self.next_tick, TokioInstant::min)
    }

    async fn woken(&mut self) {
        let now = TokioInstant::now();
        let trigger = match self.pending_event.is_some_and(|p| p <= now) {
            true => Trigger::Event,
            false => Trigger::Tick,
        };
        self.pending_event = None;
        if now >= self.next_tick {
            self.next_tick = now + self.interval;
        }
        self.engine.sweep(trigger).await;
    }

    /// A view change: counts new losses, and a membership change asks for a
    /// sweep after [`COALESCE`].
    fn view_changed(&mut self) {
        let v = self.engine.view();
        // A host counts once per loss: re-listings after a reconnect
        // restamp absent hosts but do not lose them again.
        let now_lost: HashSet<String> = v.lost_workers.keys().cloned().collect();
        let new = now_lost.difference(&self.lost_seen).count();
        self.engine.metrics.workers_lost_total.inc_by(new as u64);
        self.lost_seen = now_lost;
        let m = membership(&v);
        if m != self.membership {
            self.membership = m;
            self.pending_event
                .get_or_insert(TokioInstant::now() + COALESCE);
        }
    }

    async fn watchdog(&mut self) {
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
        if !self.ready_sent && self.engine.not_ready().await.is_none() {
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
            tracing::info!("ready: registry view valid and database answering");
            self.ready_sent = true;
        }
    }
}

/// The sweeper loop, until `cancel`.
pub async fn sweeper(engine: SharedEngine, cancel: CancellationToken) {
    let mut views = engine.watch();
    let mut watchdog = tokio::time::interval(Duration::from_secs(5));
    let mut d = Driver::new(engine);
    loop {
        let wake = d.wake_at();
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep_until(wake) => d.woken().await,
            changed = views.changed() => {
                if !changed {
                    // the registry loop ended (shutdown): keep ticking until cancelled
                    views = d.engine.watch();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                d.view_changed();
            }
            _ = watchdog.tick() => d.watchdog().await,
        }
    }
}
