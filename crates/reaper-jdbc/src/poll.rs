//! The poll loop, driving reaper-core's [`Membership`].
//!
//! Every `poll_interval` one statement reads the server rows; each row is
//! judged by DS's rule for the flavour ([`crate::flavour`]) on the daemon's
//! clock at the moment the statement was sent, and the live ones make a full
//! [`Listing`]. A listing with no gap before it only stamps the losses it
//! finds, at the poll's completion: a node is lost at the first poll that
//! sees it dead or gone. The view is invalid after a failed poll, and when no
//! poll has succeeded within 3 × `poll_interval` (a poll still in flight
//! counts as none); the next good poll ends the gap and restarts every
//! absence clock (SPEC §4.1).
//!
//! On 3.1/3.2 the same statement reads DS's master-failover lock rows
//! (SPEC §13): a row whose term is fresh by the same rule is a holder — a
//! dead holder's row stays behind until some DS server starts, and no pass
//! runs under it meanwhile.

use crate::flavour::{clock_skew, judge_rows, Dead, Flavour, Term, DEFAULT_SESSION_TIMEOUT};
use crate::shared::{lock, Inner};
use crate::source::{JdbcSource, RegistryRow};
use crate::JdbcError;
use reaper_core::registry::{
    failover_lock_paths, Changes, Detected, FailoverLockLayout, Gap, Listing, Membership, Note,
};
use reaper_core::{Instant, RegistryView};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant as Tick;

/// Losses older than an hour are forgotten; checked this often.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// A DS server's clock this far from the daemon's (either way) is worth a
/// warning: DS judges terms on its servers' clocks, ds-reaper on its own.
const SKEW_WARN: Duration = Duration::from_secs(2);

type Poll =
    Pin<Box<dyn Future<Output = (Instant, Result<(Flavour, Vec<RegistryRow>), JdbcError>)> + Send>>;

pub(crate) struct Poller {
    inner: Arc<Inner>,
    tx: watch::Sender<Arc<RegistryView>>,
    membership: Membership,
    /// What was last sent, so an unchanged view is not sent again.
    published: Arc<RegistryView>,
    /// Keys whose row is present but dead, already logged.
    dead_logged: HashSet<String>,
    /// Whether a clock ahead, and one behind, was already reported.
    skew_warned: (bool, bool),
    /// Each row's term at the previous poll, and when that poll was sent
    /// (epoch ms): what proves a clock behind.
    terms: HashMap<String, i64>,
    prev_sent: Option<i64>,
    /// The last poll failed (for the log and the recovery count).
    failing: bool,
    /// When the last good poll was sent: an outage is measured from it.
    last_ok_sent: Option<Instant>,
    /// The largest `sessionTimeout` of the client heartbeats the last good
    /// poll that had any read (3.3+): DS's purge threshold.
    session_timeout: Option<Duration>,
}

impl Poller {
    pub(crate) fn new(
        inner: Arc<Inner>,
        tx: watch::Sender<Arc<RegistryView>>,
        membership: Membership,
    ) -> Self {
        let published = Arc::new(membership.view().clone());
        Poller {
            inner,
            tx,
            membership,
            published,
            dead_logged: HashSet::new(),
            skew_warned: (false, false),
            terms: HashMap::new(),
            prev_sent: None,
            failing: false,
            last_ok_sent: None,
            session_timeout: None,
        }
    }

    fn start_poll(&self) -> Poll {
        let source: Arc<JdbcSource> = self.inner.source.clone();
        let clock = self.inner.clock.clone();
        Box::pin(async move {
            let sent = clock.now();
            (sent, source.read().await)
        })
    }

    pub(crate) async fn run(mut self) {
        let cancel = self.inner.cancel.clone();
        let interval = self.inner.settings.interval();
        let stale_after = self.inner.settings.stale_after();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut in_flight: Option<Poll> = None;
        // Before the first success the view is invalid anyway.
        let mut last_ok: Option<Tick> = None;
        let mut next_prune = Tick::now() + PRUNE_EVERY;
        loop {
            let stale_at = last_ok.map(|t| t + stale_after);
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick(), if in_flight.is_none() => in_flight = Some(self.start_poll()),
                (sent, r) = async { in_flight.as_mut().expect("guarded").await }, if in_flight.is_some() => {
                    in_flight = None;
                    let took = (self.inner.now() - sent).to_std().unwrap_or_default();
                    self.inner.record_poll(took);
                    match r {
                        Ok((flavour, rows)) => {
                            self.polled(flavour, rows, sent);
                            last_ok = Some(Tick::now());
                        }
                        Err(e) => self.failed(e),
                    }
                    if Tick::now() >= next_prune {
                        next_prune = Tick::now() + PRUNE_EVERY;
                        let now = self.inner.now();
                        let c = self.membership.prune_lost(now);
                        self.settle(c);
                    }
                }
                _ = sleep_until(stale_at), if stale_at.is_some() && self.membership.view().is_valid() => {
                    tracing::warn!(limit = ?stale_after, "no successful registry poll within 3 × poll_interval");
                    self.invalidate(format!("no successful registry poll within {stale_after:?}"));
                }
            }
        }
        self.invalidate("registry closed".to_string());
    }

    fn invalidate(&mut self, reason: String) {
        let now = self.inner.now();
        let c = self.membership.invalidate(Gap::Connection, reason, now);
        self.settle(c);
    }

    fn failed(&mut self, e: JdbcError) {
        self.inner.stats.failures.fetch_add(1, Ordering::Relaxed);
        if !self.failing {
            tracing::warn!(error = %e, "registry poll failed");
        } else {
            tracing::debug!(error = %e, "registry poll failed again");
        }
        self.failing = true;
        // The tables may have changed under us: look again next time.
        self.inner.source.forget_flavour();
        self.invalidate(format!("registry poll failed: {e}"));
    }

    fn polled(&mut self, flavour: Flavour, rows: Vec<RegistryRow>, sent: Instant) {
        if self.failing {
            self.failing = false;
            self.inner.stats.recoveries.fetch_add(1, Ordering::Relaxed);
            tracing::info!("registry poll succeeded again");
        }
        *lock(&self.inner.flavour) = Some(flavour);
        let locks = match self.inner.settings.line {
            Some(line) => failover_lock_paths(line),
            None => FailoverLockLayout::for_lines(flavour.lines()),
        };
        let now = self.inner.now();
        self.note_outage(flavour, &rows, sent, now);
        let (listing, held) = self.judge(rows, sent, &locks);
        // One step: the view is never valid without the locks of its poll.
        let mut c = self.membership.apply_listing(listing, now);
        c.publish |= self.membership.apply_failover_locks(&held, now).publish;
        let o = self.membership.track_outage(now);
        c.publish |= o.publish;
        c.membership |= o.membership;
        self.settle(c);
    }

    /// SPEC §14 jdbc (DS #18274): a good poll after none succeeded for
    /// longer than DS's session timeout — the largest seen before, or DS's
    /// default — marks the registry database's return; DS 3.3+ may purge
    /// servers that are alive then. Call before the poll's listing.
    fn note_outage(&mut self, flavour: Flavour, rows: &[RegistryRow], sent: Instant, now: Instant) {
        let prev = self.last_ok_sent.replace(sent);
        if flavour != Flavour::Client33 {
            return;
        }
        let limit = self.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT);
        if let Some(prev) = prev.filter(|p| sent - *p > reaper_core::delta(limit)) {
            let s = &self.inner.settings;
            tracing::warn!(down_since = %prev, session_timeout = ?limit, hold = ?s.outage_hold,
                "the registry database was unreachable for longer than DS's session timeout: \
                 DS may purge live servers now (DS #18274); servers lost in the next \
                 grace period hold the brake until seen again");
            self.membership
                .outage_returned(prev, now, s.outage_grace, s.outage_hold);
        }
        let seen = rows
            .iter()
            .filter_map(|r| match &r.term {
                Term::Client(Some(b)) => b.session_timeout,
                _ => None,
            })
            .max();
        if seen.is_some() {
            self.session_timeout = seen;
        }
    }

    /// Warns once per direction when a row proves a DS clock away from ours.
    fn check_skew(&mut self, terms: &HashMap<String, i64>, sent_ms: i64) {
        let warn = i64::try_from(SKEW_WARN.as_millis()).unwrap_or(i64::MAX);
        for (key, term) in terms {
            let prev = self
                .prev_sent
                .and_then(|s| self.terms.get(key).map(|t| (*t, s)));
            let Some(skew) = clock_skew(prev, *term, sent_ms) else {
                continue;
            };
            let by = Duration::from_millis(skew.unsigned_abs());
            if skew > warn && !self.skew_warned.0 {
                self.skew_warned.0 = true;
                tracing::warn!(key = %key, ahead = ?by,
                    "a registry row's term lies ahead of this host's clock: \
                     liveness is judged on the daemon's clock, keep the clocks in sync");
            } else if skew < -warn && !self.skew_warned.1 {
                self.skew_warned.1 = true;
                tracing::warn!(key = %key, behind = ?by,
                    "a registry row's term was written behind this host's clock: \
                     liveness is judged on the daemon's clock, keep the clocks in sync");
            }
        }
    }

    /// DS's rule per row at `sent`: the live server rows make the listing,
    /// the fresh lock rows the holders per master.
    fn judge(
        &mut self,
        rows: Vec<RegistryRow>,
        sent: Instant,
        locks: &FailoverLockLayout,
    ) -> (Listing, HashMap<String, usize>) {
        let now_ms = sent.timestamp_millis();
        let expire_after = self.inner.settings.expire_after;
        let terms: HashMap<String, i64> = rows
            .iter()
            .filter_map(|r| Some((r.key.clone(), r.term.millis()?)))
            .collect();
        self.check_skew(&terms, now_ms);
        self.terms = terms;
        self.prev_sent = Some(now_ms);
        let judged = judge_rows(rows, now_ms, expire_after, locks);
        let mut dead_now: HashSet<String> = HashSet::new();
        for (key, why) in judged.dead {
            if !self.dead_logged.contains(&key) {
                tracing::info!(key = %key, why = dead_reason(why),
                    "registry row present, but its server is dead by DS's rule");
            }
            dead_now.insert(key);
        }
        self.inner
            .stats
            .dead_rows
            .store(dead_now.len() as u64, Ordering::Relaxed);
        self.dead_logged = dead_now;
        (judged.listing, judged.held)
    }

    /// Logs what the machine noted; sends the view when it changed.
    fn settle(&mut self, changes: Changes) {
        log(&changes.notes);
        if !changes.publish {
            return;
        }
        // Detection first: a subscriber woken by the view may ask for it.
        if self.inner.settings.line.is_none() {
            let flavour = *lock(&self.inner.flavour);
            *lock(&self.inner.detected) = narrow(self.membership.detected(), flavour);
        }
        let view = self.membership.view();
        if *view != *self.published {
            self.published = Arc::new(view.clone());
            self.tx.send_replace(self.published.clone());
        }
    }
}

/// What the keys say, narrowed to the lines of the registry's tables.
pub(crate) fn narrow(d: Detected, flavour: Option<Flavour>) -> Detected {
    match flavour {
        None => d,
        Some(f) => Detected {
            lines: d
                .lines
                .into_iter()
                .filter(|l| f.lines().contains(l))
                .collect(),
            ..d
        },
    }
}

fn dead_reason(d: Dead) -> &'static str {
    match d {
        Dead::TermExpired => "last_term older than expire_after",
        Dead::HeartbeatExpired => "client heartbeat older than its sessionTimeout",
        Dead::NoClient => "its client has no heartbeat row",
    }
}

async fn sleep_until(at: Option<Tick>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn log(notes: &[Note]) {
    for n in notes {
        match n {
            Note::Invalid { reason } => tracing::info!(%reason, "registry view invalid"),
            Note::Listed {
                workers,
                masters,
                after_gap: true,
            } => tracing::info!(workers, masters, "registry polled; view valid"),
            Note::Present { kind, host } => {
                tracing::info!(?kind, host = host.as_str(), "registry node live")
            }
            Note::Gone { kind, host } => {
                tracing::info!(?kind, host = host.as_str(), "registry node gone or dead")
            }
            Note::Unreadable { host, error } => tracing::warn!(host = %host, error = %error,
                "registry node data unreadable; the node counts as live with unknown startup/report time"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reaper_core::{DsLine, HeartbeatFormat, RegistryLayout};

    #[test]
    fn the_tables_narrow_what_the_keys_say() {
        let keys = Detected::from_evidence(
            Some(RegistryLayout::Flat),
            Some(HeartbeatFormat::Json32),
            false,
        );
        assert_eq!(keys.lines, vec![DsLine::V3_2, DsLine::V3_3]);
        assert_eq!(
            narrow(keys.clone(), Some(Flavour::Client33)).lines,
            vec![DsLine::V3_3]
        );
        assert_eq!(
            narrow(keys.clone(), Some(Flavour::Term32)).lines,
            vec![DsLine::V3_2]
        );
        assert!(narrow(keys.clone(), Some(Flavour::MySql31))
            .lines
            .is_empty());
        assert_eq!(narrow(keys.clone(), None), keys);
        // nothing listed yet: the tables alone decide
        assert_eq!(
            narrow(Detected::unknown(), Some(Flavour::MySql31)).lines,
            vec![DsLine::V3_1_0, DsLine::V3_1]
        );
    }
}
