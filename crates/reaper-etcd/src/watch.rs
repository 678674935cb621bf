//! One read-and-watch cycle, driving reaper-core's [`Membership`].
//!
//! A full read of the server directories and the agents at one revision R,
//! then one watch stream with a watch per prefix from R + 1: nothing that
//! happened after the read is missed, and only then is the view valid. The
//! cycle ends — and the view is invalid until the next cycle's read — when
//! the stream fails or ends, when etcd cancels a watch, or when a progress
//! request gets no answer within the request timeout (a server that stopped
//! answering leaves the stream silent, not broken). A watch cancelled
//! because its revision was compacted is followed at once by a fresh read.
//!
//! Deletions and new nodes are applied as they arrive. Heartbeat puts of
//! known nodes (every worker, every ~10 s) carry their data, so nothing is
//! re-read: the newest data per node is kept and applied every
//! [`FLUSH_TICK`], which bounds how often the view is republished.
//!
//! DS's master-failover locks (SPEC §13) are read and watched with the
//! rest: etcd's lock API keeps one key `<lock>/<lease hex>` per holder or
//! waiter, so the keys under the line's lock directories are the holders,
//! known at the read's revision and followed from it like every other key.

mod stream;

pub(crate) use stream::{open_watches, Progress};

use crate::listing::{read_all, Kv, Snapshot};
use crate::shared::{lock, Inner};
use crate::EtcdError;
use etcd_client::{EventType, KvClient, WatchClient, WatchResponse, WatchStream};
use reaper_core::registry::{
    may_concern_servers, Backoff, Changes, FailoverLockLayout, Gap, ListedNode, Listing,
};
use reaper_core::registry::{Membership, NodeEvent, Note};
use reaper_core::RegistryView;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use stream::cancel_reason;
use tokio::sync::watch;

/// Coalesced heartbeat data is applied this often.
pub(crate) const FLUSH_TICK: Duration = Duration::from_millis(500);

/// Fresh reads forced by compaction in a row before the cycle gives up and
/// backs off (a compaction racing every read means something is wrong).
const MAX_COMPACTED_READS: u32 = 5;

/// How a cycle ended.
pub(crate) enum Outcome {
    Cancelled,
    /// The view is invalid for `reason`; `listed`: the cycle's read had
    /// completed (the client itself works).
    Ended {
        reason: String,
        listed: bool,
    },
}

/// Why a step of a cycle stopped.
enum Stop {
    /// A compaction got in the way: everything is read again.
    ReadAgain,
    /// The cycle is over.
    End(Outcome),
}

/// What a cycle keeps across its reads.
struct Cycle {
    rt: Duration,
    prefixes: Vec<String>,
    kv: KvClient,
    wc: WatchClient,
    /// Fresh reads forced by compaction in a row.
    compacted_reads: u32,
    /// Whether a read completed (the client itself works).
    listed: bool,
}

impl Cycle {
    /// Whether one more compaction may force a fresh read; counts it.
    fn read_again(&mut self) -> bool {
        if self.compacted_reads < MAX_COMPACTED_READS {
            self.compacted_reads += 1;
            return true;
        }
        false
    }
}

/// The registry's state across cycles: the membership machine and what it
/// publishes to.
pub(crate) struct Watcher {
    pub(crate) inner: Arc<Inner>,
    tx: watch::Sender<Arc<RegistryView>>,
    membership: Membership,
    /// Newest data of known nodes not applied yet, by path.
    pending: HashMap<String, Vec<u8>>,
    /// Where the line's master-failover locks are.
    locks: FailoverLockLayout,
    /// The failover locks' holder keys (relative to the root), each to the
    /// master its lock is for.
    lock_holders: HashMap<String, String>,
}

impl Watcher {
    pub(crate) fn new(
        inner: Arc<Inner>,
        tx: watch::Sender<Arc<RegistryView>>,
        membership: Membership,
    ) -> Self {
        let locks = FailoverLockLayout::for_line(inner.settings.line);
        Watcher {
            inner,
            tx,
            membership,
            pending: HashMap::new(),
            locks,
            lock_holders: HashMap::new(),
        }
    }

    /// Holders per master, from the holder keys known now.
    fn lock_counts(&self) -> HashMap<String, usize> {
        let mut held: HashMap<String, usize> = HashMap::new();
        for m in self.lock_holders.values() {
            *held.entry(m.clone()).or_default() += 1;
        }
        held
    }

    /// The ranges read and watched: the server directories of the layout
    /// mode, the agents' when they are read, and the failover locks'.
    fn prefixes(&self) -> Vec<String> {
        let keys = &self.inner.keys;
        self.membership
            .mode()
            .server_dirs()
            .iter()
            .copied()
            .chain(self.membership.agent_prefix())
            .chain(self.locks.dirs.iter().map(|d| d.path))
            .map(|d| keys.dir_prefix(d))
            .collect()
    }

    /// Logs what the machine noted and publishes when it says so.
    fn settle(&mut self, changes: Changes) {
        log(&changes.notes);
        if changes.publish {
            // Detection first: a subscriber woken by the view may ask for it.
            if self.inner.settings.line.is_none() {
                *lock(&self.inner.detected) = self.membership.detected();
            }
            self.tx
                .send_replace(Arc::new(self.membership.view().clone()));
        }
    }

    /// The daemon lost sight of the registry: invalid until the next read.
    pub(crate) fn invalidate(&mut self, reason: String) {
        self.pending.clear();
        let now = self.inner.now();
        let c = self.membership.invalidate(Gap::Connection, reason, now);
        self.settle(c);
    }

    /// One cycle on `client`: read, watch, apply events until the stream
    /// fails (or the loop is cancelled).
    pub(crate) async fn serve(
        &mut self,
        client: &etcd_client::Client,
        backoff: &mut Backoff,
    ) -> Outcome {
        let mut cycle = Cycle {
            rt: self.inner.settings.request_timeout,
            prefixes: self.prefixes(),
            kv: client.kv_client(),
            wc: client.watch_client(),
            compacted_reads: 0,
            listed: false,
        };
        loop {
            let stop = match self.read_and_watch(&mut cycle).await {
                Ok(stream) => {
                    backoff.reset();
                    self.follow(stream, &mut cycle).await
                }
                Err(stop) => stop,
            };
            if let Stop::End(outcome) = stop {
                return outcome;
            }
        }
    }

    /// Reads everything, opens the watches from the read's revision and
    /// applies what both brought: the view is valid from now.
    async fn read_and_watch(&mut self, cycle: &mut Cycle) -> Result<WatchStream, Stop> {
        let rt = cycle.rt;
        let snap = match read_all(&mut cycle.kv, &cycle.prefixes, rt).await {
            Ok(s) => s,
            Err(EtcdError::Compacted(_)) if cycle.read_again() => {
                self.compacted("the read's revision was compacted while paging");
                return Err(Stop::ReadAgain);
            }
            Err(e) => {
                return Err(Stop::End(Outcome::Ended {
                    reason: format!("reading the registry: {e}"),
                    listed: cycle.listed,
                }))
            }
        };
        if let Some(hook) = &self.inner.hooks.after_read {
            hook(snap.revision).await;
        }
        let start = snap.revision + 1;
        let (stream, early) = match open_watches(&mut cycle.wc, &cycle.prefixes, start, rt).await {
            Ok(s) => s,
            Err(EtcdError::Compacted(_)) if cycle.read_again() => {
                self.compacted("revision compacted before the watch was created");
                return Err(Stop::ReadAgain);
            }
            Err(e) => {
                return Err(Stop::End(Outcome::Ended {
                    reason: format!("watching the registry: {e}"),
                    listed: true,
                }))
            }
        };
        cycle.listed = true;
        self.apply_snapshot(snap);
        for resp in early {
            self.handle(&resp);
        }
        Ok(stream)
    }

    /// Applies the stream's events until it fails, goes silent or is
    /// cancelled.
    async fn follow(&mut self, stream: WatchStream, cycle: &mut Cycle) -> Stop {
        let (mut sender, mut stream) = stream.split();
        let listed = cycle.listed;
        let mut flush = tokio::time::interval(FLUSH_TICK);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut progress = Progress::new(cycle.rt);
        loop {
            tokio::select! {
                _ = self.inner.cancel.cancelled() => return Stop::End(Outcome::Cancelled),
                m = stream.message() => match m {
                    Ok(Some(resp)) => {
                        progress.heard();
                        if resp.canceled() {
                            return self.watch_cancelled(&resp, cycle);
                        }
                        cycle.compacted_reads = 0;
                        self.handle(&resp);
                    }
                    Ok(None) => {
                        return Stop::End(Outcome::Ended {
                            reason: "the etcd watch stream ended".into(),
                            listed,
                        })
                    }
                    Err(e) => {
                        return Stop::End(Outcome::Ended {
                            reason: format!("the etcd watch stream failed: {e}"),
                            listed,
                        })
                    }
                },
                r = progress.check(&mut sender) => {
                    if let Err(down) = r {
                        let reason = down.to_string();
                        return Stop::End(Outcome::Ended { reason, listed });
                    }
                }
                _ = flush.tick() => self.flush(),
            }
        }
    }

    /// etcd cancelled the watch: a compaction means reading afresh; anything
    /// else ends the cycle.
    fn watch_cancelled(&mut self, resp: &WatchResponse, cycle: &mut Cycle) -> Stop {
        if resp.compact_revision() > 0 && cycle.read_again() {
            self.compacted(&format!(
                "etcd cancelled the watch: revision compacted (now {})",
                resp.compact_revision()
            ));
            return Stop::ReadAgain;
        }
        Stop::End(Outcome::Ended {
            reason: format!("etcd cancelled the registry watch: {}", cancel_reason(resp)),
            listed: cycle.listed,
        })
    }

    fn compacted(&mut self, what: &str) {
        Inner::count(&self.inner.compactions);
        tracing::warn!("{what}; reading the registry afresh");
        self.invalidate(format!("{what}; reading afresh"));
    }

    /// Rebuilds everything from a full read: the view is valid from now.
    fn apply_snapshot(&mut self, snap: Snapshot) {
        let now = self.inner.now();
        self.pending.clear();
        let inner = self.inner.clone();
        self.lock_holders.clear();
        let mut nodes = Vec::new();
        for kv in snap.ranges.into_iter().flatten() {
            let Some(path) = inner.keys.rel(&kv.key) else {
                continue;
            };
            if let Some(master) = self.locks.holder_of(path) {
                self.lock_holders.insert(path.to_string(), master);
                continue;
            }
            nodes.push(ListedNode {
                path: path.to_string(),
                ephemeral: kv.lease != 0,
                data: kv.value,
            });
        }
        let listing = Listing {
            nodes,
            legacy_dir: false,
        };
        // One step: the view is never valid without the locks of its revision.
        let mut c = self.membership.apply_listing(listing, now);
        let held = self.lock_counts();
        c.publish |= self.membership.apply_failover_locks(&held, now).publish;
        if c.notes.iter().any(|n| {
            matches!(
                n,
                Note::Listed {
                    after_gap: true,
                    ..
                }
            )
        }) {
            Inner::count(&inner.reconnects);
        }
        self.settle(c);
        tracing::debug!(revision = snap.revision, "etcd registry read");
    }

    /// Applies one watch response's events, all stamped with their arrival.
    fn handle(&mut self, resp: &WatchResponse) {
        if resp.events().is_empty() {
            return;
        }
        let now = self.inner.now();
        let inner = self.inner.clone();
        let mode = self.membership.mode();
        let mut events = Vec::new();
        let mut in_batch: HashSet<String> = HashSet::new();
        let mut locks_changed = false;
        for ev in resp.events() {
            let Some(kv) = ev.kv().and_then(Kv::from_client) else {
                continue;
            };
            let Some(rel) = inner.keys.rel(&kv.key) else {
                continue;
            };
            if let Some(master) = self.locks.holder_of(rel) {
                locks_changed = true;
                if matches!(ev.event_type(), EventType::Put) {
                    self.lock_holders.insert(rel.to_string(), master);
                } else {
                    self.lock_holders.remove(rel);
                }
                continue;
            }
            let agent = self.membership.agent_worker(rel).is_some();
            if !agent && !may_concern_servers(mode, rel) {
                continue;
            }
            let rel = rel.to_string();
            let put = matches!(ev.event_type(), EventType::Put);
            // A heartbeat of a known server: kept for the next flush. An
            // agent's put is its heartbeat and is applied at once.
            if put && !agent && self.membership.contains(&rel) && !in_batch.contains(&rel) {
                self.pending.insert(rel, kv.value);
                continue;
            }
            self.pending.remove(&rel);
            in_batch.insert(rel.clone());
            events.push(if put {
                NodeEvent::Present {
                    path: rel,
                    ephemeral: kv.lease != 0,
                    data: kv.value,
                }
            } else {
                NodeEvent::Deleted { path: rel }
            });
        }
        if locks_changed {
            let held = self.lock_counts();
            let c = self.membership.apply_failover_locks(&held, now);
            self.settle(c);
        }
        if !events.is_empty() {
            let c = self.membership.apply(events, now);
            self.settle(c);
        }
    }

    /// Applies the coalesced heartbeat data; forgets old losses.
    fn flush(&mut self) {
        let now = self.inner.now();
        let mut c = Changes::default();
        if !self.pending.is_empty() {
            let events = self
                .pending
                .drain()
                .map(|(path, data)| NodeEvent::DataChanged { path, data });
            c = self.membership.apply(events, now);
        }
        let pruned = self.membership.prune_lost(now);
        c.publish |= pruned.publish;
        self.settle(c);
    }
}

/// Writes what the membership machine noted.
fn log(notes: &[Note]) {
    for n in notes {
        match n {
            Note::Invalid { reason } => tracing::info!(%reason, "registry view invalid"),
            Note::Listed {
                workers, masters, ..
            } => tracing::info!(workers, masters, "etcd registry read; view valid"),
            Note::Present { kind, host } => {
                tracing::info!(?kind, host = host.as_str(), "registry node present")
            }
            Note::Gone { kind, host } => {
                tracing::info!(?kind, host = host.as_str(), "registry node gone")
            }
            Note::Unreadable { host, error } => tracing::warn!(host = %host, error = %error,
                "registry node data unreadable; the node counts as present with unknown startup/report time"),
            Note::AgentUnreadable { worker, error } => {
                tracing::warn!(worker = %worker, error = %error,
                "agent report unreadable; the agent counts as not fresh")
            }
        }
    }
}
