//! The agent's publisher on ZooKeeper, in a session of its own (SPEC §12):
//! reaper-core's [`Publisher`] port, which `ds-reaper agent` runs.
//!
//! A background task keeps one session after another, like the registry and
//! the election: connect (bounded in time, jittered backoff between
//! failures), follow the session's state, and after an expiry or a close
//! build a new session. Each session creates the agent's ephemeral node again
//! the first time it publishes; a node left by an older session that the
//! server has not expired yet (an agent restarted within the session timeout)
//! is replaced, as DS's `persistEphemeral` replaces a server's.

use crate::session::{self, Outcome};
use crate::ZkSettings;
use reaper_core::agent::AgentReport;
use reaper_core::ports::BoxFuture;
use reaper_core::publish::{OrderNode, PublishError, Publisher, RegisteredWorker};
use reaper_core::registry::{classify, LayoutMode, NodeClass};
use reaper_core::NodeKind;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// The session in use and the agent nodes it has created.
struct Live {
    client: zk::Client,
    owned: BTreeSet<String>,
}

struct Shared {
    /// Only `connect`, `root`, the session and request timeouts are used.
    target: ZkSettings,
    root: String,
    /// `<root>/<agent.path>`.
    dir: String,
    mode: LayoutMode,
    live: Mutex<Option<Live>>,
    connected: AtomicBool,
    expirations: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // only plain assignments happen under these locks
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Publishes agent reports into ZooKeeper; see the module doc.
pub struct ZkAgentPublisher {
    shared: Arc<Shared>,
    cancel: CancellationToken,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

impl ZkAgentPublisher {
    /// Starts the session loop on `target`'s ensemble, root and timeouts.
    /// `path` is `agent.path` (under the root); `target.line`, when
    /// explicit, fixes the registry layout `workers` reads.
    pub fn start(target: ZkSettings, path: &str, cancel: CancellationToken) -> ZkAgentPublisher {
        let root = target.root_prefix();
        let line = target.line;
        let dir = format!("{root}/{}", path.trim_matches('/'));
        let shared = Arc::new(Shared {
            target,
            root,
            dir,
            mode: LayoutMode::for_line(line),
            live: Mutex::new(None),
            connected: AtomicBool::new(false),
            expirations: AtomicU64::new(0),
        });
        let cancel = cancel.child_token();
        let task = tokio::spawn(sessions(shared.clone(), cancel.clone()));
        ZkAgentPublisher {
            shared,
            cancel,
            task: tokio::sync::Mutex::new(Some(task)),
        }
    }

    /// The agent node's full path for `worker`.
    pub fn node_path(&self, worker: &str) -> String {
        format!("{}/{worker}", self.shared.dir)
    }

    /// Session expirations seen so far.
    pub fn expirations(&self) -> u64 {
        self.shared.expirations.load(Ordering::Relaxed)
    }

    /// The current session, for tests that expire it from outside (by
    /// connecting with it and closing that connection).
    pub fn session(&self) -> Option<zk::SessionInfo> {
        lock(&self.shared.live)
            .as_ref()
            .map(|l| l.client.session().clone())
    }

    fn client(&self) -> Result<zk::Client, PublishError> {
        if !self.shared.connected.load(Ordering::Relaxed) {
            return Err(PublishError::NotConnected {
                registry: format!("ZooKeeper {}", self.shared.target.connect),
            });
        }
        lock(&self.shared.live)
            .as_ref()
            .map(|l| l.client.clone())
            .ok_or(PublishError::NoSession {
                registry: "ZooKeeper",
            })
    }

    fn owned(&self, client: &zk::Client, path: &str) -> bool {
        lock(&self.shared.live)
            .as_ref()
            .is_some_and(|l| l.client.session_id() == client.session_id() && l.owned.contains(path))
    }

    fn set_owned(&self, client: &zk::Client, path: &str, owned: bool) {
        if let Some(l) = lock(&self.shared.live).as_mut() {
            if l.client.session_id() == client.session_id() {
                if owned {
                    l.owned.insert(path.to_string());
                } else {
                    l.owned.remove(path);
                }
            }
        }
    }

    async fn call<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, zk::Error> {
        match tokio::time::timeout(self.shared.target.request_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(zk::Error::Timeout),
        }
    }

    async fn publish_now(&self, worker: &str, data: &[u8]) -> Result<(), PublishError> {
        if worker.is_empty() || worker.contains('/') {
            return Err(PublishError::BadWorkerName(worker.to_string()));
        }
        let client = self.client()?;
        let path = self.node_path(worker);
        let err = |what: &str, e: zk::Error| PublishError::Request {
            what: format!("{what} {path}"),
            source: e.into(),
        };
        if self.owned(&client, &path) {
            match self.call(client.set_data(&path, data, None)).await {
                Ok(_) => return Ok(()),
                // deleted by someone, or the session that held it ended
                Err(zk::Error::NoNode) => self.set_owned(&client, &path, false),
                Err(e) => return Err(err("writing", e)),
            }
        }
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        match self.call(client.mkdir(&self.shared.dir, &persistent)).await {
            Ok(()) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(err("creating the parent of", e)),
        }
        for _ in 0..3 {
            match self.call(client.create(&path, data, &ephemeral)).await {
                Ok(_) => {
                    tracing::info!(node = %path, session = %client.session_id(), "agent node created");
                    self.set_owned(&client, &path, true);
                    return Ok(());
                }
                Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(err("creating", e)),
            }
            let stat = match self.call(client.check_stat(&path)).await {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => return Err(err("reading", e)),
            };
            if stat.ephemeral_owner == client.session_id().0 {
                self.set_owned(&client, &path, true);
                return self
                    .call(client.set_data(&path, data, None))
                    .await
                    .map(|_| ())
                    .map_err(|e| err("writing", e));
            }
            tracing::warn!(
                node = %path,
                owner = format!("{:#x}", stat.ephemeral_owner),
                "replacing an agent node of another session (an earlier run of this agent; if it \
                 keeps happening, two agents publish for the same worker)"
            );
            match self.call(client.delete(&path, Some(stat.version))).await {
                Ok(()) | Err(zk::Error::NoNode) | Err(zk::Error::BadVersion) => {}
                Err(e) => return Err(err("replacing", e)),
            }
        }
        Err(PublishError::ChangingHands { path })
    }

    async fn list_workers(&self) -> Result<Vec<RegisteredWorker>, PublishError> {
        let client = self.client()?;
        let root = &self.shared.root;
        let mode = self.shared.mode;
        let fail = |e: zk::Error| PublishError::Request {
            what: "listing the workers".into(),
            source: e.into(),
        };
        let mut nodes: Vec<String> = Vec::new();
        let mut dirs = Vec::new();
        if mode.legacy_allowed() {
            dirs.push("/workers".to_string());
        }
        if mode.nodes_allowed() {
            dirs.push("/nodes/worker".to_string());
        }
        for dir in dirs {
            let kids = match self
                .call(client.list_children(&format!("{root}{dir}")))
                .await
            {
                Ok(k) => k,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(fail(e)),
            };
            for k in kids {
                let rel = format!("{dir}/{k}");
                if dir == "/workers" {
                    nodes.push(rel);
                    continue;
                }
                // a flat layout's worker (ephemeral) or a grouped layout's group
                let (grand, stat) = match self
                    .call(client.get_children(&format!("{root}{rel}")))
                    .await
                {
                    Ok(r) => r,
                    Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(fail(e)),
                };
                match classify(mode, &rel, Some(stat.ephemeral_owner != 0)) {
                    NodeClass::Server(key) if key.kind == NodeKind::Worker => nodes.push(rel),
                    NodeClass::Group => {
                        nodes.extend(grand.into_iter().map(|g| format!("{rel}/{g}")))
                    }
                    _ => {}
                }
            }
        }
        let mut out: Vec<RegisteredWorker> = Vec::new();
        for rel in nodes {
            let name = rel.rsplit('/').next().unwrap_or_default().to_string();
            if name.is_empty() || out.iter().any(|w| w.name == name) {
                // a worker in several groups has one node per group
                continue;
            }
            let layout = match classify(mode, &rel, Some(true)) {
                NodeClass::Server(key) => key.layout,
                _ => None,
            };
            match self.call(client.get_data(&format!("{root}{rel}"))).await {
                Ok((data, _)) => out.push(RegisteredWorker::from_node(&name, layout, &data)),
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(out)
    }

    /// The nodes under `<root>/ds-reaper/orders/<worker>`; none while the
    /// folder does not exist. A node deleted between the listing and its
    /// read is left out.
    async fn list_orders(&self, worker: &str) -> Result<Vec<OrderNode>, PublishError> {
        if worker.is_empty() || worker.contains('/') {
            return Ok(Vec::new());
        }
        let client = self.client()?;
        let dir = format!(
            "{}/{}/{worker}",
            self.shared.root,
            reaper_core::order::ORDERS_DIR
        );
        let fail = |e: zk::Error| PublishError::Request {
            what: format!("listing the orders {dir}"),
            source: e.into(),
        };
        let names = match self.call(client.list_children(&dir)).await {
            Ok(n) => n,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(fail(e)),
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.call(client.get_data(&format!("{dir}/{name}"))).await {
                Ok((data, _)) => out.push(OrderNode { name, data }),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(out)
    }

    /// The one worker node `name`: `/workers/<name>` (1.2), the flat
    /// `/nodes/worker/<name>`, or under any group `/nodes/worker/<g>/<name>`.
    async fn one_worker(&self, name: &str) -> Result<Option<RegisteredWorker>, PublishError> {
        if name.is_empty() || name.contains('/') {
            return Ok(None);
        }
        let client = self.client()?;
        let root = &self.shared.root;
        let mode = self.shared.mode;
        let fail = |e: zk::Error| PublishError::Request {
            what: format!("reading the worker {name}"),
            source: e.into(),
        };
        let mut rels = Vec::new();
        if mode.legacy_allowed() {
            rels.push(format!("/workers/{name}"));
        }
        if mode.nodes_allowed() {
            rels.push(format!("/nodes/worker/{name}"));
        }
        for rel in rels {
            match self.call(client.get_data(&format!("{root}{rel}"))).await {
                Ok((data, stat)) => {
                    if let NodeClass::Server(key) =
                        classify(mode, &rel, Some(stat.ephemeral_owner != 0))
                    {
                        if key.kind == NodeKind::Worker {
                            return Ok(Some(RegisteredWorker::from_node(name, key.layout, &data)));
                        }
                    }
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(fail(e)),
            }
        }
        if !mode.nodes_allowed() {
            return Ok(None);
        }
        let groups = match self
            .call(client.list_children(&format!("{root}/nodes/worker")))
            .await
        {
            Ok(g) => g,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(fail(e)),
        };
        for g in groups {
            let rel = format!("/nodes/worker/{g}/{name}");
            let NodeClass::Server(key) = classify(mode, &rel, Some(true)) else {
                continue;
            };
            match self.call(client.get_data(&format!("{root}{rel}"))).await {
                Ok((data, _)) => {
                    return Ok(Some(RegisteredWorker::from_node(name, key.layout, &data)))
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(None)
    }
}

impl Publisher for ZkAgentPublisher {
    fn publish<'a>(
        &'a self,
        worker: &'a str,
        report: &'a AgentReport,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move { self.publish_now(worker, &report.to_json()).await })
    }

    fn workers(&self) -> BoxFuture<'_, Result<Vec<RegisteredWorker>, PublishError>> {
        Box::pin(self.list_workers())
    }

    fn worker<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<RegisteredWorker>, PublishError>> {
        Box::pin(self.one_worker(name))
    }

    fn orders<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Vec<OrderNode>, PublishError>> {
        Box::pin(self.list_orders(worker))
    }

    fn connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.cancel.cancel();
            if let Some(t) = self.task.lock().await.take() {
                let _ = t.await;
            }
        })
    }
}

/// One session after another until cancelled (connecting, backoff and
/// closing as the registry's own loop does, in [`session`]).
async fn sessions(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut backoff = session::backoff();
    let t = &shared.target;
    let mut failing = false;
    while !cancel.is_cancelled() {
        let Some(client) = cancel.run_until_cancelled(session::connect(t)).await else {
            break;
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                // One warning per outage, not one per retry.
                if !failing {
                    tracing::warn!(error = %e, connect = %t.connect, "agent cannot connect to ZooKeeper; retrying");
                }
                failing = true;
                if !session::wait_to_retry(&cancel, &mut backoff).await {
                    break;
                }
                continue;
            }
        };
        failing = false;
        backoff.reset();
        tracing::info!(session = %client.session_id(), connect = %t.connect, "agent ZooKeeper session established");
        let mut states = client.state_watcher();
        *lock(&shared.live) = Some(Live {
            client: client.clone(),
            owned: BTreeSet::new(),
        });
        shared.connected.store(true, Ordering::Relaxed);
        let ended = loop {
            tokio::select! {
                _ = cancel.cancelled() => break Outcome::Cancelled,
                s = states.changed() => {
                    if let Some(end) = session::terminal(s) {
                        break end;
                    }
                    match s {
                        zk::SessionState::SyncConnected => {
                            tracing::info!("agent ZooKeeper session reconnected");
                            shared.connected.store(true, Ordering::Relaxed);
                        }
                        zk::SessionState::Disconnected | zk::SessionState::ConnectedReadOnly => {
                            tracing::warn!(state = %s, "agent ZooKeeper session disconnected");
                            shared.connected.store(false, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                }
            }
        };
        shared.connected.store(false, Ordering::Relaxed);
        lock(&shared.live).take();
        match ended {
            Outcome::Cancelled => {
                session::close_client(client).await;
                break;
            }
            Outcome::Expired => {
                shared.expirations.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "agent ZooKeeper session expired; a new session creates the agent node again"
                );
                drop(client);
            }
            Outcome::Ended(why) => {
                tracing::warn!(reason = %why, "agent ZooKeeper session ended; building a new one");
                drop(client);
                if !session::wait_to_retry(&cancel, &mut backoff).await {
                    break;
                }
            }
        }
    }
    shared.connected.store(false, Ordering::Relaxed);
    lock(&shared.live).take();
}
