//! The watch loop of one ZooKeeper session, driving reaper-core's
//! [`Membership`].
//!
//! Per connection it arms persistent recursive watches on the server
//! directories (zookeeper-client does not restore them after a reconnect),
//! then lists everything; only then is the view valid. Any change of the
//! session state is a gap: the watches are re-armed and everything re-listed.
//! Node creations and deletions are applied at once; data changes (one per
//! node every ~10 s) are coalesced so that a node is read at most once per
//! [`DATA_COALESCE`]. The machine is shared with the [`ZkRegistry`] handle,
//! which copies the view out of it when asked; membership changes also wake
//! the engine at once.
//!
//! DS's master-failover locks (SPEC §13) are watched the same way, one
//! recursive watch per lock directory of the line; the locks are read with
//! every listing and read again on any event under them (they change only
//! when a failover pass starts or ends). A lock read that fails is a gap:
//! what ds-reaper does not know about DS's failover it must not act on.
//!
//! [`ZkRegistry`]: crate::ZkRegistry

mod arm;
mod coalesce;

use crate::listing::{list_all, list_locks};
use crate::session::{terminal, Outcome};
use crate::shared::{lock, Inner, Shared};
use crate::{bounded, ZkError};
use arm::{Forwarders, Rewatch};
use coalesce::Coalescer;
use reaper_core::registry::{
    may_concern_servers, Backoff, Changes, FailoverLockLayout, Gap, LayoutMode, Membership,
    NodeEvent, Note,
};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use zookeeper_client as zk;

/// A node's data is re-read at most this often, however often it changes.
const DATA_COALESCE: Duration = Duration::from_secs(3);
const FLUSH_TICK: Duration = Duration::from_millis(500);
/// How long the event channel rests after a batch (see `follow`).
const EVENT_BATCH: Duration = Duration::from_millis(100);

/// The registry's state across sessions: the shared membership machine and
/// the data reads waiting to be coalesced.
pub(crate) struct Watcher {
    pub(crate) inner: Arc<Inner>,
    coalesce: Coalescer,
    /// Where the line's master-failover locks are.
    locks: FailoverLockLayout,
}

impl Watcher {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let locks = FailoverLockLayout::for_line(inner.settings.line);
        Watcher {
            inner,
            coalesce: Coalescer::default(),
            locks,
        }
    }

    /// Whether a path relative to the root lies under a failover lock directory.
    fn under_locks(&self, rel: &str) -> bool {
        self.locks.dirs.iter().any(|d| {
            rel.strip_prefix(d.path)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }

    /// Reads the locks afresh and records them.
    async fn reread_locks(&mut self, client: &zk::Client) -> Result<(), Rewatch> {
        let rt = self.inner.settings.request_timeout;
        let held = list_locks(client, &self.inner.root, &self.locks, rt)
            .await
            .map_err(Rewatch::Locks)?;
        let now = self.inner.now();
        self.change(|m| m.apply_failover_locks(&held, now));
        Ok(())
    }

    /// Runs `f` on the membership machine (never across an await).
    fn machine<R>(&self, f: impl FnOnce(&mut Membership) -> R) -> R {
        f(&mut lock(&self.inner.shared).membership)
    }

    /// Applies a change to the machine and settles what it did.
    fn change(&mut self, f: impl FnOnce(&mut Membership) -> Changes) -> Changes {
        let mut shared = lock(&self.inner.shared);
        let c = f(&mut shared.membership);
        publish(&self.inner, &mut shared, &c);
        drop(shared);
        log(&c.notes);
        c
    }

    fn full(&self, rel: &str) -> String {
        format!("{}{}", self.inner.root, rel)
    }

    fn rel<'a>(&self, full: &'a str) -> Option<&'a str> {
        full.strip_prefix(self.inner.root.as_str())
            .filter(|r| r.starts_with('/'))
    }

    pub(crate) fn invalidate(&mut self, gap: Gap, reason: impl Into<String>) {
        let reason = reason.into();
        let now = self.inner.now();
        self.change(|m| m.invalidate(gap, reason, now));
    }

    /// Waits until the session is connected again, or ends.
    async fn wait_connected(&mut self, states: &mut zk::StateWatcher) -> Result<(), Outcome> {
        loop {
            match states.peek_state() {
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    return Ok(())
                }
                s => {
                    if let Some(o) = terminal(s) {
                        return Err(o);
                    }
                }
            }
            tokio::select! {
                _ = self.inner.cancel.cancelled() => return Err(Outcome::Cancelled),
                _ = states.changed() => {}
            }
        }
    }

    /// After a failed step on a live session: waits for the backoff or a state change.
    async fn pause(
        &mut self,
        states: &mut zk::StateWatcher,
        backoff: &mut Backoff,
    ) -> Result<(), Outcome> {
        let d = backoff.next_delay();
        tokio::select! {
            _ = self.inner.cancel.cancelled() => return Err(Outcome::Cancelled),
            _ = tokio::time::sleep(d) => {}
            _ = states.changed() => {}
        }
        if let Some(o) = terminal(states.peek_state()) {
            return Err(o);
        }
        Ok(())
    }

    /// Serves one session until it ends (or is cancelled).
    pub(crate) async fn serve_session(
        &mut self,
        client: &zk::Client,
        backoff: &mut Backoff,
    ) -> Outcome {
        let mut states = client.state_watcher();
        let mut forwarders = Forwarders::default();
        let outcome = loop {
            let pass = self.connection(client, &mut states, &mut forwarders, backoff);
            if let Err(o) = pass.await {
                break o;
            }
        };
        drop(forwarders);
        outcome
    }

    /// One pass over a connection: waits for it, arms the watches, lists
    /// everything and follows the events until a gap. `Ok` is to start over;
    /// `Err` is how the session ended.
    async fn connection(
        &mut self,
        client: &zk::Client,
        states: &mut zk::StateWatcher,
        forwarders: &mut Forwarders,
        backoff: &mut Backoff,
    ) -> Result<(), Outcome> {
        self.wait_connected(states).await?;
        // Lives as long as the pass, so the channel stays open.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (mode, agents) = self.machine(|m| (m.mode(), m.agent_prefix().map(str::to_string)));
        let armed = self.arm(client, forwarders, &tx, mode, agents.as_deref());
        if let Err(reason) = armed.await {
            self.inner.error();
            tracing::warn!(%reason, "cannot arm registry watches");
            self.invalidate(Gap::Connection, reason.to_string());
            return self.pause(states, backoff).await;
        }
        if let Err(e) = self.list(client, mode, agents.as_deref()).await {
            self.inner.error();
            tracing::warn!(error = %e, "listing the registry failed");
            self.invalidate(Gap::Connection, format!("listing the registry: {e}"));
            return self.pause(states, backoff).await;
        }
        backoff.reset();
        self.follow(client, states, &mut rx, backoff).await
    }

    /// Lists everything and the locks, and applies both.
    async fn list(
        &mut self,
        client: &zk::Client,
        mode: LayoutMode,
        agents: Option<&str>,
    ) -> Result<(), ZkError> {
        let rt = self.inner.settings.request_timeout;
        let listing = list_all(client, &self.inner.root, mode, agents, rt).await?;
        let held = list_locks(client, &self.inner.root, &self.locks, rt).await?;
        // One step: no reader sees the view valid before the locks are in it.
        let now = self.inner.now();
        let c = self.change(|m| {
            let mut c = m.apply_listing(listing, now);
            c.publish |= m.apply_failover_locks(&held, now).publish;
            c
        });
        self.coalesce.listed(&c.read);
        Ok(())
    }

    /// Follows a listed connection's events until a gap: `Ok` is to arm and
    /// list again, `Err` is how the session ended.
    async fn follow(
        &mut self,
        client: &zk::Client,
        states: &mut zk::StateWatcher,
        rx: &mut mpsc::UnboundedReceiver<zk::WatchedEvent>,
        backoff: &mut Backoff,
    ) -> Result<(), Outcome> {
        let mut tick = tokio::time::interval(FLUSH_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // After a batch the channel rests for EVENT_BATCH: 2,000 workers
        // beating every 10 s are 200 events a second, and taking each as it
        // comes was a wake-up of this task per event (at steady state, a
        // large share of the daemon's CPU went to context switches). Creations
        // and removals wait at most that long more.
        let mut resting: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = self.inner.cancel.cancelled() => return Err(Outcome::Cancelled),
                s = states.changed() => return self.reconnect(s, states).await,
                _ = tokio::time::sleep_until(resting.unwrap_or_else(tokio::time::Instant::now)), if resting.is_some() => {
                    resting = None;
                }
                Some(ev) = rx.recv(), if resting.is_none() => {
                    let mut batch = vec![ev];
                    while let Ok(e) = rx.try_recv() {
                        batch.push(e);
                    }
                    if let Err(reason) = self.handle_batch(client, batch).await {
                        self.inner.error();
                        tracing::warn!(%reason, "re-listing the registry");
                        self.invalidate(Gap::Connection, reason.to_string());
                        return self.pause(states, backoff).await;
                    }
                    resting = Some(tokio::time::Instant::now() + EVENT_BATCH);
                }
                _ = tick.tick() => {
                    self.flush_dirty(client).await;
                    let now = self.inner.now();
                    self.change(|m| m.prune_lost(now));
                }
            }
        }
    }

    /// After a state change of a listed connection: `Ok` once connected again.
    async fn reconnect(
        &mut self,
        s: zk::SessionState,
        states: &mut zk::StateWatcher,
    ) -> Result<(), Outcome> {
        if let Some(o) = terminal(s) {
            return Err(o);
        }
        // Any change here is a connection loss: a quick
        // Disconnected -> SyncConnected may reach us as the
        // latter only, and the watches and events of that gap
        // are lost all the same.
        tracing::warn!(state = ?s, "ZooKeeper connection lost");
        self.invalidate(Gap::Connection, "disconnected from ZooKeeper");
        self.wait_connected(states).await?;
        self.inner.reconnects.fetch_add(1, Ordering::Relaxed);
        tracing::info!("reconnected to ZooKeeper; re-arming watches and re-listing");
        Ok(())
    }

    /// Applies a batch of events; an error is a failed lock read (the
    /// caller ends the connection's watches and lists everything again).
    async fn handle_batch(
        &mut self,
        client: &zk::Client,
        batch: Vec<zk::WatchedEvent>,
    ) -> Result<(), Rewatch> {
        let Sorted {
            order,
            last,
            locks_changed,
        } = self.sort(batch);
        if locks_changed {
            self.reread_locks(client).await?;
        }
        if order.is_empty() {
            return Ok(());
        }
        let now = self.inner.now();
        let mut events: Vec<NodeEvent> = Vec::new();
        let mut to_read: Vec<String> = Vec::new();
        for rel in order {
            match last.get(&rel) {
                Some(zk::EventType::NodeDeleted) => events.push(NodeEvent::Deleted { path: rel }),
                Some(_) => to_read.push(rel),
                None => {}
            }
        }
        self.read_new(client, to_read, &mut events).await;
        for ev in &events {
            if let NodeEvent::Deleted { path } = ev {
                self.coalesce.forget(path);
            }
        }
        let c = self.change(|m| m.apply(events, now));
        self.coalesce.read(&c.read);
        Ok(())
    }

    /// Sorts a batch under the machine's lock. The last event per path
    /// decides; creations are read at once.
    fn sort(&mut self, batch: Vec<zk::WatchedEvent>) -> Sorted {
        let inner = self.inner.clone();
        let shared = lock(&inner.shared);
        let machine = &shared.membership;
        let mode = machine.mode();
        let mut s = Sorted::default();
        for ev in batch {
            let Some(rel) = self.rel(&ev.path).map(str::to_string) else {
                continue;
            };
            if self.under_locks(&rel) {
                s.locks_changed = true;
                continue;
            }
            let agent = machine.agent_worker(&rel).is_some();
            if !agent && !may_concern_servers(mode, &rel) {
                continue;
            }
            let t = match ev.event_type {
                zk::EventType::NodeCreated => zk::EventType::NodeCreated,
                zk::EventType::NodeDeleted => zk::EventType::NodeDeleted,
                zk::EventType::NodeDataChanged => {
                    if s.last.get(&rel) == Some(&zk::EventType::NodeCreated) {
                        continue;
                    }
                    // An agent's rewrite is its heartbeat: read it at once.
                    if !agent && machine.contains(&rel) {
                        self.coalesce.dirty.insert(rel);
                        continue;
                    }
                    // Data of a node not known yet: read it like a creation.
                    zk::EventType::NodeCreated
                }
                _ => continue,
            };
            if !s.last.contains_key(&rel) {
                s.order.push(rel.clone());
            }
            s.last.insert(rel, t);
        }
        s
    }

    /// Reads the nodes created (or first seen) into `events`; one gone
    /// meanwhile counts as deleted.
    async fn read_new(
        &self,
        client: &zk::Client,
        to_read: Vec<String>,
        events: &mut Vec<NodeEvent>,
    ) {
        let rt = self.inner.settings.request_timeout;
        let reads = to_read.iter().map(|rel| {
            let path = self.full(rel);
            async move { bounded(rt, client.get_data(&path)).await }
        });
        let results = futures::future::join_all(reads).await;
        for (rel, r) in to_read.into_iter().zip(results) {
            match r {
                Ok((data, stat)) => events.push(NodeEvent::Present {
                    path: rel,
                    data,
                    ephemeral: stat.ephemeral_owner != 0,
                }),
                Err(ZkError::Zk(zk::Error::NoNode)) => {
                    events.push(NodeEvent::Deleted { path: rel })
                }
                Err(e) => {
                    // The session is in trouble; the state watcher will force a re-listing.
                    self.inner.error();
                    tracing::warn!(path = %rel, error = %e, "reading a registry node failed");
                }
            }
        }
    }
}

/// What a batch of events asks for.
#[derive(Default)]
struct Sorted {
    /// Paths in the order of their first event.
    order: Vec<String>,
    /// The last event that counts per path.
    last: HashMap<String, zk::EventType>,
    /// Whether anything under the failover locks changed.
    locks_changed: bool,
}

/// Hands out what a change did: later readers of the view get a new copy;
/// a membership change wakes the engine; receivers of
/// [`crate::ZkRegistry::subscribe`], while there are any, get every change
/// with its view.
fn publish(inner: &Inner, shared: &mut Shared, c: &Changes) {
    if !c.publish {
        return;
    }
    shared.changed();
    if inner.all_tx.receiver_count() > 0 {
        inner.all_tx.send_replace(shared.view());
    }
    if c.membership {
        inner.changes_tx.send_replace(());
    }
}

/// Writes what the membership machine noted, as the adapter always logged it.
fn log(notes: &[Note]) {
    for n in notes {
        match n {
            Note::Invalid { reason } => tracing::info!(%reason, "registry view invalid"),
            Note::Listed {
                workers, masters, ..
            } => tracing::info!(workers, masters, "registry listed; view valid"),
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

#[cfg(test)]
mod tests;
