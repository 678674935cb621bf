//! The watch loop behind [`Registry`].
//!
//! One task owns the ZooKeeper session and the view. Per connection it arms
//! persistent recursive watches on the server directories (the client does not
//! restore them after a reconnect), then lists everything; only then is the
//! view valid. Node creations and deletions are applied at once; data changes
//! (one per node every ~10 s) are coalesced so that a node is read at most once
//! per [`DATA_COALESCE`].

use crate::heartbeat::{self, Heartbeat};
use crate::{bounded, Detected, ZkError, ZkSettings, ZkStats};
use chrono::Utc;
use reaper_core::{
    HeartbeatFormat, Instant, NodeInfo, NodeKind, RegistryLayout, RegistryView, ViewState,
};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// A node's data is re-read at most this often, however often it changes.
const DATA_COALESCE: Duration = Duration::from_secs(3);
const FLUSH_TICK: Duration = Duration::from_millis(500);
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Losses are kept at least this long so the planner can apply its grace period.
const LOST_KEEP_SECS: i64 = 3600;

/// A live view of the DS registry. Cheap to clone.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    settings: ZkSettings,
    root: String,
    view_rx: watch::Receiver<Arc<RegistryView>>,
    detected: Mutex<Detected>,
    expirations: AtomicU64,
    errors: AtomicU64,
    reconnects: AtomicU64,
    /// The current session's client, for one-off requests.
    client: Mutex<Option<zk::Client>>,
    cancel: CancellationToken,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave them inconsistent
    // (plain assignments), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    /// Starts the background watch loop. Never fails: an unreachable ensemble
    /// shows as an invalid view and is retried with capped exponential backoff.
    pub fn start(settings: ZkSettings, cancel: CancellationToken) -> Registry {
        let now = Utc::now();
        let initial = Arc::new(RegistryView::invalid(
            now,
            format!("connecting to {}", settings.connect),
        ));
        let (tx, rx) = watch::channel(initial.clone());
        let detected = match settings.line {
            Some(l) => Detected::explicit(l),
            None => Detected::from_evidence(None, None, false),
        };
        let inner = Arc::new(Inner {
            root: settings.root_prefix(),
            settings,
            view_rx: rx,
            detected: Mutex::new(detected),
            expirations: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            client: Mutex::new(None),
            cancel: cancel.child_token(),
            task: tokio::sync::Mutex::new(None),
        });
        let state = Loop {
            mode: match inner.settings.line {
                Some(l) => Mode::Fixed(l.layout()),
                None => Mode::Auto,
            },
            inner: inner.clone(),
            tx,
            view: (*initial).clone(),
            leaves: HashMap::new(),
            by_host: HashMap::new(),
            legacy_dir_seen: false,
            warned: HashSet::new(),
            dirty: HashSet::new(),
        };
        let handle = tokio::spawn(state.run());
        if let Ok(mut t) = inner.task.try_lock() {
            *t = Some(handle);
        }
        Registry { inner }
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
                self.inner.errors.fetch_add(1, Ordering::Relaxed);
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
                    self.inner.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(deleted)
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

/// The task instance id of a 1.2 `tasks_queue` entry name.
pub(crate) fn queue_entry_task_id(name: &str) -> Option<i64> {
    name.split('_').nth(3).and_then(|s| s.trim().parse().ok())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Auto,
    Fixed(RegistryLayout),
}

impl Mode {
    fn legacy_allowed(self) -> bool {
        matches!(self, Mode::Auto | Mode::Fixed(RegistryLayout::Legacy))
    }
    fn nodes_allowed(self) -> bool {
        !matches!(self, Mode::Fixed(RegistryLayout::Legacy))
    }
    fn watch_dirs(self) -> &'static [&'static str] {
        match self {
            Mode::Auto => &["/nodes", "/workers", "/masters"],
            Mode::Fixed(RegistryLayout::Legacy) => &["/workers", "/masters"],
            Mode::Fixed(_) => &["/nodes"],
        }
    }
}

/// What a path under the root stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Class {
    Leaf(LeafKey),
    /// A worker group directory (or, in auto mode, something that may be one).
    Group,
    Ignore,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct LeafKey {
    kind: NodeKind,
    host: String,
    group: Option<String>,
    layout: Option<RegistryLayout>,
}

/// `ephemeral`: whether the node is ephemeral, when known. In auto mode a
/// direct child of `/nodes/worker` is a worker (flat) if ephemeral, else a group.
///
/// Only `/nodes/master` and `/nodes/worker` (and 1.2's `/masters`, `/workers`)
/// hold servers. 3.3+ also keeps `/nodes/master-coordinator` (its data a
/// master's address), `/nodes/master-coordinator-lock`, the persistent
/// `/nodes/failover-finish-nodes/<host:port>-<startupTime>-<pid>` and the alert
/// server's nodes under `/nodes`: matching on the exact directory names keeps
/// them out of the view and out of layout detection.
fn classify(mode: Mode, rel: &str, ephemeral: Option<bool>) -> Class {
    let parts: Vec<&str> = rel.trim_start_matches('/').split('/').collect();
    let leaf = |kind, h: &str, group: Option<&str>, layout| {
        if h.trim().is_empty() {
            return Class::Ignore;
        }
        Class::Leaf(LeafKey {
            kind,
            host: reaper_core::host::from_node_path(h),
            group: group.map(str::to_string),
            layout,
        })
    };
    match parts.as_slice() {
        ["workers", h] if mode.legacy_allowed() => {
            leaf(NodeKind::Worker, h, None, Some(RegistryLayout::Legacy))
        }
        ["masters", h] if mode.legacy_allowed() => {
            leaf(NodeKind::Master, h, None, Some(RegistryLayout::Legacy))
        }
        ["nodes", "master", h] if mode.nodes_allowed() => leaf(NodeKind::Master, h, None, None),
        ["nodes", "worker", x] if mode.nodes_allowed() => match (mode, ephemeral) {
            (Mode::Fixed(RegistryLayout::Grouped), _) => Class::Group,
            (Mode::Fixed(_), _) | (Mode::Auto, Some(true)) => {
                leaf(NodeKind::Worker, x, None, Some(RegistryLayout::Flat))
            }
            (Mode::Auto, _) => Class::Group,
        },
        ["nodes", "worker", g, h]
            if mode.nodes_allowed() && mode != Mode::Fixed(RegistryLayout::Flat) =>
        {
            leaf(NodeKind::Worker, h, Some(g), Some(RegistryLayout::Grouped))
        }
        _ => Class::Ignore,
    }
}

struct Leaf {
    key: LeafKey,
    hb: Option<Heartbeat>,
    format: Option<HeartbeatFormat>,
    /// 14 CSV fields: 2.0.6–2.0.9.
    csv14: bool,
    seen_at: Instant,
    last_read: tokio::time::Instant,
}

enum Outcome {
    Cancelled,
    Expired,
    Ended(String),
}

struct Loop {
    mode: Mode,
    inner: Arc<Inner>,
    tx: watch::Sender<Arc<RegistryView>>,
    view: RegistryView,
    /// Server nodes by path relative to the root.
    leaves: HashMap<String, Leaf>,
    /// Leaf paths per host (a grouped worker has one per group).
    by_host: HashMap<(NodeKind, String), BTreeSet<String>>,
    legacy_dir_seen: bool,
    /// Hosts whose unreadable data was already logged.
    warned: HashSet<String>,
    /// Leaves whose data changed and has not been re-read yet.
    dirty: HashSet<String>,
}

type Listing = (Vec<(String, Vec<u8>, bool)>, bool);

impl Loop {
    fn full(&self, rel: &str) -> String {
        format!("{}{}", self.inner.root, rel)
    }

    fn rel<'a>(&self, full: &'a str) -> Option<&'a str> {
        full.strip_prefix(self.inner.root.as_str())
            .filter(|r| r.starts_with('/'))
    }

    fn error(&self) {
        self.inner.errors.fetch_add(1, Ordering::Relaxed);
    }

    fn publish(&mut self) {
        // Detection first: a subscriber woken by the view may ask for it.
        if self.inner.settings.line.is_none() {
            let d = self.detect();
            *lock(&self.inner.detected) = d;
        }
        self.tx.send_replace(Arc::new(self.view.clone()));
    }

    fn detect(&self) -> Detected {
        let mut layout = None;
        let (mut legacy, mut grouped, mut flat) = (false, false, false);
        let mut counts: Vec<(HeartbeatFormat, usize)> = Vec::new();
        let mut csv14 = false;
        for l in self.leaves.values() {
            match l.key.layout {
                Some(RegistryLayout::Legacy) => legacy = true,
                Some(RegistryLayout::Grouped) => grouped = true,
                Some(RegistryLayout::Flat) => flat = true,
                None => {}
            }
            if let Some(f) = l.format {
                match counts.iter_mut().find(|(x, _)| *x == f) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((f, 1)),
                }
            }
            csv14 |= l.csv14;
        }
        if legacy || (self.legacy_dir_seen && !grouped && !flat) {
            layout = Some(RegistryLayout::Legacy);
        } else if grouped {
            layout = Some(RegistryLayout::Grouped);
        } else if flat {
            layout = Some(RegistryLayout::Flat);
        }
        let format = counts.into_iter().max_by_key(|(_, n)| *n).map(|(f, _)| f);
        Detected::from_evidence(
            layout,
            format,
            csv14 && format == Some(HeartbeatFormat::CsvEpoch),
        )
    }

    fn invalidate(&mut self, reason: String) {
        let since = match &self.view.state {
            ViewState::Invalid { since, reason: r } if *r == reason => return,
            ViewState::Invalid { since, .. } => *since,
            ViewState::Valid { .. } => Utc::now(),
        };
        tracing::info!(%reason, "registry view invalid");
        self.view.state = ViewState::Invalid { since, reason };
        self.publish();
    }

    async fn run(mut self) {
        let mut backoff = MIN_BACKOFF;
        loop {
            if self.inner.cancel.is_cancelled() {
                break;
            }
            let connect = self.inner.settings.connect.clone();
            self.invalidate(format!("connecting to {connect}"));
            let st = self.inner.settings.session_timeout;
            let attempt = bounded(
                st + self.inner.settings.request_timeout,
                zk::Client::connector()
                    .with_session_timeout(st)
                    .with_fail_eagerly()
                    .connect(&connect),
            );
            let client = tokio::select! {
                _ = self.inner.cancel.cancelled() => break,
                r = attempt => r,
            };
            let client = match client {
                Ok(c) => c,
                Err(e) => {
                    self.error();
                    tracing::warn!(error = %e, connect = %connect, "cannot connect to ZooKeeper");
                    self.invalidate(format!("connecting to {connect}: {e}"));
                    if self.sleep(backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            tracing::info!(session = ?client.session_id(), "ZooKeeper session established");
            *lock(&self.inner.client) = Some(client.clone());
            // Cancellation also interrupts a listing or read in flight, so
            // close() is prompt even against a slow ensemble.
            let cancel = self.inner.cancel.clone();
            let outcome = tokio::select! {
                o = self.serve_session(&client, &mut backoff) => o,
                _ = cancel.cancelled() => Outcome::Cancelled,
            };
            lock(&self.inner.client).take();
            match outcome {
                Outcome::Cancelled => {
                    close_client(client).await;
                    break;
                }
                Outcome::Expired => {
                    self.inner.expirations.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("ZooKeeper session expired; building a new session");
                    self.invalidate("ZooKeeper session expired".to_string());
                    drop(client);
                }
                Outcome::Ended(reason) => {
                    self.error();
                    self.invalidate(reason);
                    drop(client);
                    if self.sleep(backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        self.invalidate("registry closed".to_string());
    }

    /// Sleeps unless cancelled first; true when cancelled.
    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.inner.cancel.cancelled() => true,
            _ = tokio::time::sleep(d) => false,
        }
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
        backoff: &mut Duration,
    ) -> Result<(), Outcome> {
        let d = *backoff;
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
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

    async fn serve_session(&mut self, client: &zk::Client, backoff: &mut Duration) -> Outcome {
        // Node `seen_at` is per session; absence clocks restart on every listing.
        let mut new_session = true;
        let mut states = client.state_watcher();
        let mut forwarders = Forwarders(Vec::new());
        let rt = self.inner.settings.request_timeout;
        let outcome = 'conn: loop {
            if let Err(o) = self.wait_connected(&mut states).await {
                break 'conn o;
            }
            // New watches first, then drop the old ones: dropping the last
            // watcher of a path would remove the server-side watch.
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut fresh = Vec::new();
            let mut failed = None;
            for dir in self.mode.watch_dirs() {
                let path = self.full(dir);
                match bounded(
                    rt,
                    client.watch(&path, zk::AddWatchMode::PersistentRecursive),
                )
                .await
                {
                    Ok(w) => fresh.push(forward(w, tx.clone())),
                    Err(e) => {
                        failed = Some(format!("watching {path}: {e}"));
                        break;
                    }
                }
            }
            drop(std::mem::replace(&mut forwarders, Forwarders(fresh)));
            if let Some(reason) = failed {
                self.error();
                tracing::warn!(%reason, "cannot arm registry watches");
                self.invalidate(reason);
                if let Err(o) = self.pause(&mut states, backoff).await {
                    break 'conn o;
                }
                continue 'conn;
            }
            match self.list_all(client).await {
                Ok(listing) => {
                    self.apply_listing(listing, new_session);
                    new_session = false;
                    *backoff = MIN_BACKOFF;
                }
                Err(e) => {
                    self.error();
                    tracing::warn!(error = %e, "listing the registry failed");
                    self.invalidate(format!("listing the registry: {e}"));
                    if let Err(o) = self.pause(&mut states, backoff).await {
                        break 'conn o;
                    }
                    continue 'conn;
                }
            }
            let mut tick = tokio::time::interval(FLUSH_TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = self.inner.cancel.cancelled() => break 'conn Outcome::Cancelled,
                    s = states.changed() => {
                        if let Some(o) = terminal(s) {
                            break 'conn o;
                        }
                        // Any change here is a connection loss: a quick
                        // Disconnected -> SyncConnected may reach us as the
                        // latter only, and the watches and events of that gap
                        // are lost all the same.
                        {
                            tracing::warn!(state = ?s, "ZooKeeper connection lost");
                            self.invalidate("disconnected from ZooKeeper".to_string());
                            if let Err(o) = self.wait_connected(&mut states).await {
                                break 'conn o;
                            }
                            self.inner.reconnects.fetch_add(1, Ordering::Relaxed);
                            tracing::info!("reconnected to ZooKeeper; re-arming watches and re-listing");
                            continue 'conn;
                        }
                    }
                    Some(ev) = rx.recv() => {
                        let mut batch = vec![ev];
                        while let Ok(e) = rx.try_recv() {
                            batch.push(e);
                        }
                        self.handle_batch(client, batch).await;
                    }
                    _ = tick.tick() => {
                        self.flush_dirty(client).await;
                        let before = self.view.lost_workers.len() + self.view.lost_masters.len();
                        self.view.prune_lost(Utc::now(), chrono::TimeDelta::seconds(LOST_KEEP_SECS));
                        if self.view.lost_workers.len() + self.view.lost_masters.len() != before {
                            self.publish();
                        }
                    }
                }
            }
        };
        drop(forwarders);
        outcome
    }

    /// Lists every server node with its data. Returns (path, data, ephemeral) and whether a 1.2 directory exists.
    async fn list_all(&self, client: &zk::Client) -> Result<Listing, ZkError> {
        let rt = self.inner.settings.request_timeout;
        let children = |rel: String| {
            let path = self.full(&rel);
            async move {
                match bounded(rt, client.get_children(&path)).await {
                    Ok((c, stat)) => Ok(Some((rel, c, stat))),
                    Err(ZkError::Zk(zk::Error::NoNode)) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        };
        let mut leaf_paths: Vec<(String, Option<bool>)> = Vec::new();
        let mut legacy_dir = false;
        let mut dirs = Vec::new();
        if self.mode.legacy_allowed() {
            dirs.push("/workers".to_string());
            dirs.push("/masters".to_string());
        }
        if self.mode.nodes_allowed() {
            dirs.push("/nodes/master".to_string());
        }
        for r in futures::future::join_all(dirs.into_iter().map(&children)).await {
            if let Some((rel, kids, _)) = r? {
                legacy_dir |= rel == "/workers" || rel == "/masters";
                leaf_paths.extend(kids.into_iter().map(|k| (format!("{rel}/{k}"), None)));
            }
        }
        if self.mode.nodes_allowed() {
            if let Some((_, kids, _)) = children("/nodes/worker".to_string()).await? {
                let subs = kids
                    .into_iter()
                    .map(|k| children(format!("/nodes/worker/{k}")));
                for r in futures::future::join_all(subs).await {
                    let Some((rel, grand, stat)) = r? else {
                        continue;
                    };
                    let ephemeral = stat.ephemeral_owner != 0;
                    match classify(self.mode, &rel, Some(ephemeral)) {
                        Class::Leaf(_) => leaf_paths.push((rel, Some(ephemeral))),
                        Class::Group => leaf_paths
                            .extend(grand.into_iter().map(|g| (format!("{rel}/{g}"), None))),
                        Class::Ignore => {}
                    }
                }
            }
        }
        let reads = leaf_paths.into_iter().map(|(rel, eph)| {
            let path = self.full(&rel);
            async move {
                match bounded(rt, client.get_data(&path)).await {
                    Ok((data, stat)) => {
                        Ok(Some((rel, data, eph.unwrap_or(stat.ephemeral_owner != 0))))
                    }
                    Err(ZkError::Zk(zk::Error::NoNode)) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        });
        let mut out = Vec::new();
        for r in futures::future::join_all(reads).await {
            if let Some(x) = r? {
                out.push(x);
            }
        }
        Ok((out, legacy_dir))
    }

    fn make_leaf(&mut self, key: LeafKey, data: &[u8], seen_at: Instant) -> Leaf {
        let mut leaf = Leaf {
            key,
            hb: None,
            format: None,
            csv14: false,
            seen_at,
            last_read: tokio::time::Instant::now(),
        };
        self.read_into(&mut leaf, data);
        leaf
    }

    fn read_into(&mut self, leaf: &mut Leaf, data: &[u8]) {
        leaf.last_read = tokio::time::Instant::now();
        match heartbeat::parse(data, self.inner.settings.zone) {
            Ok((hb, f)) => {
                leaf.csv14 = f == HeartbeatFormat::CsvEpoch
                    && data.iter().filter(|b| **b == b',').count() == 13;
                leaf.hb = Some(hb);
                leaf.format = Some(f);
            }
            Err(e) => {
                leaf.hb = None;
                leaf.format = None;
                leaf.csv14 = false;
                if self.warned.insert(leaf.key.host.clone()) {
                    tracing::warn!(host = %leaf.key.host, error = %e,
                        "registry node data unreadable; the node counts as present with unknown startup/report time");
                }
            }
        }
    }

    /// Makes the view valid from a full listing. Every listing ends a gap in
    /// sight (the first of a session, or the first after a reconnect or a failed
    /// attempt), so absence clocks restart here whatever the gap was.
    fn apply_listing(&mut self, (nodes, legacy_dir): Listing, new_session: bool) {
        let now = Utc::now();
        let old_seen: HashMap<(NodeKind, String), Instant> = self
            .view
            .workers
            .values()
            .map(|n| ((NodeKind::Worker, n.host.clone()), n.seen_at))
            .chain(
                self.view
                    .masters
                    .values()
                    .map(|n| ((NodeKind::Master, n.host.clone()), n.seen_at)),
            )
            .collect();
        self.leaves.clear();
        self.by_host.clear();
        self.dirty.clear();
        self.legacy_dir_seen = legacy_dir;
        for (rel, data, eph) in nodes {
            let Class::Leaf(key) = classify(self.mode, &rel, Some(eph)) else {
                continue;
            };
            let seen = if new_session {
                now
            } else {
                old_seen
                    .get(&(key.kind, key.host.clone()))
                    .copied()
                    .unwrap_or(now)
            };
            let leaf = self.make_leaf(key, &data, seen);
            self.by_host
                .entry((leaf.key.kind, leaf.key.host.clone()))
                .or_default()
                .insert(rel.clone());
            self.leaves.insert(rel, leaf);
        }
        // Hosts that went while the view was not watching are lost as of now.
        for (kind, host) in old_seen.keys() {
            if !self.by_host.contains_key(&(*kind, host.clone())) {
                self.view.remove(*kind, host, now);
            }
        }
        // SPEC §4.1: after any gap — a reconnect of the same session as much
        // as an expiry or a new session — a loss seen before it never shortens
        // a grace period after it: a host lost before the gap may have come
        // back and gone again unseen, so its recorded loss may be older than
        // its real one.
        self.view.restart_absence_clocks(now);
        let hosts: Vec<(NodeKind, String)> = self.by_host.keys().cloned().collect();
        for (kind, host) in hosts {
            self.refresh_host(kind, &host, now);
        }
        self.view.state = ViewState::Valid { since: now };
        tracing::info!(
            workers = self.view.workers.len(),
            masters = self.view.masters.len(),
            "registry listed; view valid"
        );
        self.publish();
    }

    /// Re-derives one host's entry in the view from its leaves.
    fn refresh_host(&mut self, kind: NodeKind, host: &str, now: Instant) {
        let key = (kind, host.to_string());
        let paths = match self.by_host.get(&key) {
            Some(p) if !p.is_empty() => p,
            _ => {
                self.by_host.remove(&key);
                if self.view.remove(kind, host, now) {
                    tracing::info!(?kind, host, "registry node gone");
                }
                return;
            }
        };
        let leaves: Vec<&Leaf> = paths.iter().filter_map(|p| self.leaves.get(p)).collect();
        // The freshest heartbeat wins when a worker is registered in several groups.
        let best = leaves
            .iter()
            .filter_map(|l| l.hb.as_ref())
            .max_by_key(|hb| (hb.report_time, hb.startup_time));
        let mut groups: Vec<String> = leaves.iter().filter_map(|l| l.key.group.clone()).collect();
        groups.sort();
        groups.dedup();
        let seen_at = leaves.iter().map(|l| l.seen_at).min().unwrap_or(now);
        let existing = match kind {
            NodeKind::Worker => self.view.workers.get(host),
            NodeKind::Master => self.view.masters.get(host),
        };
        // 3.3+ task rows name the heartbeat's host:port, not the node. Data
        // that cannot be read (yet) says nothing about it: the live node keeps
        // the address it had, or its tasks would stop matching it.
        let address = match best {
            Some(hb) => hb.address.clone(),
            None => existing.and_then(|n| n.address.clone()),
        };
        let existed = existing.is_some();
        let mut info = NodeInfo::new(host, seen_at).with_address(address.as_deref());
        if let Some(hb) = best {
            info.startup_time = hb.startup_time;
            info.report_time = hb.report_time;
            info.status = hb.status.clone();
        }
        info.groups = groups;
        if !existed {
            tracing::info!(?kind, host, "registry node present");
        }
        self.view.upsert(kind, info);
    }

    async fn handle_batch(&mut self, client: &zk::Client, batch: Vec<zk::WatchedEvent>) {
        // The last event per path decides; creations are read at once.
        let mut order: Vec<String> = Vec::new();
        let mut last: HashMap<String, zk::EventType> = HashMap::new();
        for ev in batch {
            let Some(rel) = self.rel(&ev.path).map(str::to_string) else {
                continue;
            };
            if classify(self.mode, &rel, None) == Class::Ignore
                && classify(self.mode, &rel, Some(true)) == Class::Ignore
            {
                continue;
            }
            let t = match ev.event_type {
                zk::EventType::NodeCreated => zk::EventType::NodeCreated,
                zk::EventType::NodeDeleted => zk::EventType::NodeDeleted,
                zk::EventType::NodeDataChanged => {
                    if last.get(&rel) == Some(&zk::EventType::NodeCreated) {
                        continue;
                    }
                    if self.leaves.contains_key(&rel) {
                        self.dirty.insert(rel);
                        continue;
                    }
                    // Data of a node not known yet: read it like a creation.
                    zk::EventType::NodeCreated
                }
                _ => continue,
            };
            if !last.contains_key(&rel) {
                order.push(rel.clone());
            }
            last.insert(rel, t);
        }
        if order.is_empty() {
            return;
        }
        let now = Utc::now();
        let mut touched: Vec<(NodeKind, String)> = Vec::new();
        let mut to_read: Vec<String> = Vec::new();
        for rel in order {
            match last.get(&rel) {
                Some(zk::EventType::NodeDeleted) => {
                    if let Some(key) = self.drop_leaf(&rel) {
                        touched.push(key);
                    }
                }
                Some(_) => to_read.push(rel),
                None => {}
            }
        }
        let rt = self.inner.settings.request_timeout;
        let reads = to_read.iter().map(|rel| {
            let path = self.full(rel);
            async move { bounded(rt, client.get_data(&path)).await }
        });
        let results = futures::future::join_all(reads).await;
        for (rel, r) in to_read.into_iter().zip(results) {
            match r {
                Ok((data, stat)) => {
                    let Class::Leaf(key) =
                        classify(self.mode, &rel, Some(stat.ephemeral_owner != 0))
                    else {
                        continue;
                    };
                    let hk = (key.kind, key.host.clone());
                    if let Some(mut leaf) = self.leaves.remove(&rel) {
                        if leaf.key == key {
                            self.read_into(&mut leaf, &data);
                            self.leaves.insert(rel.clone(), leaf);
                        } else {
                            let leaf = self.make_leaf(key, &data, now);
                            self.leaves.insert(rel.clone(), leaf);
                        }
                    } else {
                        let leaf = self.make_leaf(key, &data, now);
                        self.leaves.insert(rel.clone(), leaf);
                    }
                    self.dirty.remove(&rel);
                    self.by_host.entry(hk.clone()).or_default().insert(rel);
                    touched.push(hk);
                }
                Err(ZkError::Zk(zk::Error::NoNode)) => {
                    if let Some(key) = self.drop_leaf(&rel) {
                        touched.push(key);
                    }
                }
                Err(e) => {
                    // The session is in trouble; the state watcher will force a re-listing.
                    self.error();
                    tracing::warn!(path = %rel, error = %e, "reading a registry node failed");
                }
            }
        }
        if touched.is_empty() {
            return;
        }
        touched.sort();
        touched.dedup();
        for (kind, host) in touched {
            self.refresh_host(kind, &host, now);
        }
        self.publish();
    }

    fn drop_leaf(&mut self, rel: &str) -> Option<(NodeKind, String)> {
        self.dirty.remove(rel);
        let leaf = self.leaves.remove(rel)?;
        let key = (leaf.key.kind, leaf.key.host);
        if let Some(set) = self.by_host.get_mut(&key) {
            set.remove(rel);
        }
        Some(key)
    }

    async fn flush_dirty(&mut self, client: &zk::Client) {
        if self.dirty.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        let due: Vec<String> = self
            .dirty
            .iter()
            .filter(|p| due(self.leaves.get(*p), now))
            .cloned()
            .collect();
        if due.is_empty() {
            return;
        }
        for p in &due {
            self.dirty.remove(p);
        }
        let rt = self.inner.settings.request_timeout;
        let reads = due.iter().map(|rel| {
            let path = self.full(rel);
            async move { bounded(rt, client.get_data(&path)).await }
        });
        let results = futures::future::join_all(reads).await;
        let mut touched = Vec::new();
        for (rel, r) in due.into_iter().zip(results) {
            match r {
                Ok((data, _)) => {
                    if let Some(mut leaf) = self.leaves.remove(&rel) {
                        self.read_into(&mut leaf, &data);
                        touched.push((leaf.key.kind, leaf.key.host.clone()));
                        self.leaves.insert(rel, leaf);
                    }
                }
                // The deletion event follows and is handled on its own.
                Err(ZkError::Zk(zk::Error::NoNode)) => {}
                Err(e) => {
                    self.error();
                    tracing::warn!(path = %rel, error = %e, "re-reading a registry node failed");
                    self.dirty.insert(rel);
                }
            }
        }
        if touched.is_empty() {
            return;
        }
        touched.sort();
        touched.dedup();
        let t = Utc::now();
        for (kind, host) in touched {
            self.refresh_host(kind, &host, t);
        }
        self.publish();
    }
}

/// Whether a dirty leaf may be re-read now (at most once per [`DATA_COALESCE`]).
fn due(leaf: Option<&Leaf>, now: tokio::time::Instant) -> bool {
    leaf.is_some_and(|l| now.duration_since(l.last_read) >= DATA_COALESCE)
}

fn terminal(s: zk::SessionState) -> Option<Outcome> {
    match s {
        zk::SessionState::Expired => Some(Outcome::Expired),
        zk::SessionState::Closed => Some(Outcome::Ended("ZooKeeper session closed".to_string())),
        zk::SessionState::AuthFailed => Some(Outcome::Ended(
            "ZooKeeper authentication failed".to_string(),
        )),
        _ => None,
    }
}

/// Forwarding tasks of one connection, aborted when dropped (also when the
/// session future is dropped on cancellation).
struct Forwarders(Vec<JoinHandle<()>>);

impl Drop for Forwarders {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// Moves a persistent watcher's node events into the loop's channel.
fn forward(
    mut w: zk::PersistentWatcher,
    tx: mpsc::UnboundedSender<zk::WatchedEvent>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let ev = w.changed().await;
            if ev.event_type == zk::EventType::Session {
                // `changed` panics once a terminal state was delivered.
                if ev.session_state.is_terminated() {
                    break;
                }
                continue;
            }
            if tx.send(ev).is_err() {
                break;
            }
        }
    })
}

/// Closes a session at once (ephemeral nodes go now, not after the timeout).
pub(crate) async fn close_client(client: zk::Client) {
    let mut states = client.state_watcher();
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        while !states.peek_state().is_terminated() {
            states.changed().await;
        }
    })
    .await;
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

    #[test]
    fn non_server_nodes_of_3_3_are_ignored() {
        let modes = [
            Mode::Auto,
            Mode::Fixed(RegistryLayout::Flat),
            Mode::Fixed(RegistryLayout::Grouped),
            Mode::Fixed(RegistryLayout::Legacy),
        ];
        let paths = [
            "/nodes/master-coordinator",
            "/nodes/master-coordinator-lock",
            "/nodes/master-coordinator-lock/_c_0b6d7c1e-lock-0000000001",
            "/nodes/failover-finish-nodes",
            "/nodes/failover-finish-nodes/10.0.0.5:5678-1736490000000-12345",
            "/nodes/failover-finish-nodes/10.0.0.9:1234-1736490000000-23456",
            "/nodes/alert-server",
            "/nodes/alert-server/10.0.0.7:50052",
            "/nodes/alert-server-ha-leader",
            "/nodes",
            "/nodes/master",
            "/nodes/worker",
        ];
        for mode in modes {
            for path in paths {
                for eph in [None, Some(true), Some(false)] {
                    assert_eq!(
                        classify(mode, path, eph),
                        Class::Ignore,
                        "{mode:?} {path} ephemeral={eph:?}"
                    );
                }
            }
        }
        // the servers next to them still count
        assert!(matches!(
            classify(Mode::Auto, "/nodes/master/10.0.0.5:5678", Some(true)),
            Class::Leaf(LeafKey {
                kind: NodeKind::Master,
                ..
            })
        ));
        assert!(matches!(
            classify(
                Mode::Auto,
                "/nodes/worker/worker-a.example:1234",
                Some(true)
            ),
            Class::Leaf(LeafKey {
                kind: NodeKind::Worker,
                layout: Some(RegistryLayout::Flat),
                ..
            })
        ));
    }

    #[test]
    fn classification() {
        let auto = Mode::Auto;
        let w = |h: &str, g: Option<&str>, l| {
            Class::Leaf(LeafKey {
                kind: NodeKind::Worker,
                host: h.to_string(),
                group: g.map(str::to_string),
                layout: Some(l),
            })
        };
        assert_eq!(
            classify(auto, "/workers/10.0.0.5", None),
            w("10.0.0.5", None, RegistryLayout::Legacy)
        );
        assert_eq!(
            classify(auto, "/nodes/worker/default/10.0.0.5:1234", None),
            w("10.0.0.5:1234", Some("default"), RegistryLayout::Grouped)
        );
        assert_eq!(
            classify(auto, "/nodes/worker/10.0.0.5:1234", Some(true)),
            w("10.0.0.5:1234", None, RegistryLayout::Flat)
        );
        assert_eq!(
            classify(auto, "/nodes/worker/default", Some(false)),
            Class::Group
        );
        assert_eq!(classify(auto, "/lock/masters", None), Class::Ignore);
        let legacy = Mode::Fixed(RegistryLayout::Legacy);
        assert_eq!(
            classify(legacy, "/nodes/master/10.0.0.5:5678", None),
            Class::Ignore
        );
        let flat = Mode::Fixed(RegistryLayout::Flat);
        assert_eq!(classify(flat, "/nodes/worker/a/b", None), Class::Ignore);
        assert_eq!(
            classify(flat, "/nodes/worker/Host:1", None),
            w("host:1", None, RegistryLayout::Flat)
        );
        assert!(matches!(
            classify(
                Mode::Fixed(RegistryLayout::Grouped),
                "/nodes/master/10.0.0.5:5678",
                None
            ),
            Class::Leaf(LeafKey {
                kind: NodeKind::Master,
                ..
            })
        ));
    }
}
