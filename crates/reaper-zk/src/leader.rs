//! Leader election among ds-reaper replicas.
//!
//! Curator `LeaderLatch` style: each replica creates an ephemeral sequential
//! node `<root><path>/_c_<id>-latch-<seq>`; the lowest sequence leads.
//! Leadership is dropped as soon as the session is disconnected (not only when
//! it expires), because a disconnected replica cannot know whether its node
//! is still there, and two replicas must never act at once.

use crate::session::{self, close_client};
use crate::{bounded, ZkError, ZkSettings};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

pub struct ZkLeader {
    rx: watch::Receiver<bool>,
    /// The id of the replica holding the lowest latch node, as last observed.
    leader: Arc<Mutex<Option<String>>>,
    cancel: CancellationToken,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    _tx: Arc<watch::Sender<bool>>,
}

impl ZkLeader {
    /// Starts the election under `<root><path>` (e.g. path `"/ds-reaper/leader"`)
    /// on a session of its own; `id` is stored in the node, for operators and
    /// for [`ZkLeader::leader_id`] on the other replicas.
    pub fn start(
        settings: ZkSettings,
        path: String,
        id: String,
        cancel: CancellationToken,
    ) -> ZkLeader {
        let (tx, rx) = watch::channel(false);
        let tx = Arc::new(tx);
        let leader = Arc::new(Mutex::new(None));
        let cancel = cancel.child_token();
        let dir = format!("{}/{}", settings.root_prefix(), path.trim_matches('/'));
        let task = tokio::spawn(run(
            settings,
            dir,
            id,
            Seen {
                tx: tx.clone(),
                leader: leader.clone(),
            },
            cancel.clone(),
        ));
        ZkLeader {
            rx,
            leader,
            cancel,
            task: tokio::sync::Mutex::new(Some(task)),
            _tx: tx,
        }
    }

    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// The id the current leader registered with (this replica's own id while
    /// it leads); None while disconnected or before the first look. It is what
    /// the election last observed, so it can lag a change by one notification.
    pub fn leader_id(&self) -> Option<String> {
        lock(&self.leader).clone()
    }

    /// Resigns at once: the session is closed, so the node goes immediately.
    pub async fn close(&self) {
        self.cancel.cancel();
        if let Some(h) = self.task.lock().await.take() {
            let _ = h.await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only plain assignments happen under this lock, so a poisoned one is consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the election publishes: whether this replica leads, and who does.
struct Seen {
    tx: Arc<watch::Sender<bool>>,
    leader: Arc<Mutex<Option<String>>>,
}

impl Seen {
    fn unknown(&self) {
        set(&self.tx, false);
        *lock(&self.leader) = None;
    }
}

fn set(tx: &watch::Sender<bool>, v: bool) {
    tx.send_if_modified(|cur| {
        if *cur != v {
            if v {
                tracing::info!("became leader");
            } else {
                tracing::warn!("not leader any more");
            }
            *cur = v;
            true
        } else {
            false
        }
    });
}

fn sequence(name: &str) -> Option<i64> {
    let digits = name.rsplit('-').next()?;
    digits.parse().ok()
}

/// The (sanitized) id in a latch node's name, for when its data cannot be read.
fn id_from_name(name: &str) -> Option<String> {
    let rest = name.strip_prefix("_c_")?;
    let (id, _) = rest.rsplit_once("-latch-")?;
    (!id.is_empty()).then(|| id.to_string())
}

async fn run(settings: ZkSettings, dir: String, id: String, seen: Seen, cancel: CancellationToken) {
    // Never reset: a replica that keeps losing its session backs off to the cap.
    let mut backoff = session::backoff();
    while !cancel.is_cancelled() {
        let Some(client) = cancel
            .run_until_cancelled(session::connect(&settings))
            .await
        else {
            break;
        };
        match client {
            Ok(client) => {
                let r = cancel
                    .run_until_cancelled(session(&settings, &client, &dir, &id, &seen, &cancel))
                    .await
                    .unwrap_or(Ok(()));
                seen.unknown();
                close_client(client).await;
                match r {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "leader election session ended");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "leader election cannot connect to ZooKeeper"),
        }
        if !crate::session::wait_to_retry(&cancel, &mut backoff).await {
            break;
        }
    }
    seen.unknown();
}

/// One session: Ok when cancelled, Err when the session must be rebuilt.
async fn session(
    settings: &ZkSettings,
    client: &zk::Client,
    dir: &str,
    id: &str,
    seen: &Seen,
    cancel: &CancellationToken,
) -> Result<(), ZkError> {
    let rt = settings.request_timeout;
    let mut states = client.state_watcher();
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    bounded(rt, client.mkdir(dir, &persistent)).await?;
    let latch = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{dir}/_c_{}-latch-", sanitize(id));
    let (_, seq) = bounded(rt, client.create(&prefix, id.as_bytes(), &latch)).await?;
    let mine = seq.into_i64();
    loop {
        let (children, _, watcher) = bounded(rt, client.get_and_watch_children(dir)).await?;
        let latches: Vec<(i64, &String)> = children
            .iter()
            .filter_map(|c| sequence(c).map(|s| (s, c)))
            .collect();
        if !latches.iter().any(|(s, _)| *s == mine) {
            return Err(ZkError::NotConnected);
        }
        match latches.iter().min_by_key(|(s, _)| *s) {
            Some((s, _)) if *s == mine => {
                // Who leads is known before anyone is told that this replica does.
                *lock(&seen.leader) = Some(id.to_string());
                set(&seen.tx, true);
            }
            Some((_, name)) => {
                set(&seen.tx, false);
                let who = leader_of(rt, client, dir, name).await;
                *lock(&seen.leader) = who;
            }
            None => seen.unknown(),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = watcher.changed() => {}
            s = states.changed() => {
                match s {
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {}
                    zk::SessionState::Disconnected => {
                        seen.unknown();
                        loop {
                            tokio::select! {
                                _ = cancel.cancelled() => return Ok(()),
                                s = states.changed() => match s {
                                    zk::SessionState::SyncConnected => break,
                                    zk::SessionState::Disconnected | zk::SessionState::ConnectedReadOnly => {}
                                    _ => return Err(ZkError::Zk(zk::Error::SessionExpired)),
                                },
                            }
                        }
                    }
                    _ => return Err(ZkError::Zk(zk::Error::SessionExpired)),
                }
            }
        }
    }
}

/// The id stored in the leader's latch node (the name only sanitizes it).
async fn leader_of(rt: Duration, client: &zk::Client, dir: &str, name: &str) -> Option<String> {
    match bounded(rt, client.get_data(&format!("{dir}/{name}"))).await {
        Ok((data, _)) => match String::from_utf8(data) {
            Ok(s) if !s.trim().is_empty() => Some(s),
            _ => id_from_name(name),
        },
        // Gone already: the children watch fires and the next look finds the new leader.
        Err(ZkError::Zk(zk::Error::NoNode)) => None,
        Err(e) => {
            tracing::debug!(error = %e, node = name, "reading the leader's latch node failed");
            id_from_name(name)
        }
    }
}

fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
