//! Leader election among ds-reaper replicas.
//!
//! Curator `LeaderLatch` style: each replica creates an ephemeral sequential
//! node `<root><path>/_c_<id>-latch-<seq>`; the lowest sequence leads.
//! Leadership is dropped as soon as the session is disconnected (not only when
//! it expires), because a disconnected replica cannot know whether its node
//! is still there, and two replicas must never act at once.

use crate::registry::close_client;
use crate::{bounded, ZkError, ZkSettings};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

const MAX_BACKOFF: Duration = Duration::from_secs(10);

pub struct LeaderElection {
    rx: watch::Receiver<bool>,
    cancel: CancellationToken,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    _tx: Arc<watch::Sender<bool>>,
}

impl LeaderElection {
    /// Starts the election under `<root><path>` (e.g. path `"/ds-reaper/leader"`)
    /// on a session of its own; `id` is stored in the node for operators.
    pub fn start(
        settings: ZkSettings,
        path: String,
        id: String,
        cancel: CancellationToken,
    ) -> LeaderElection {
        let (tx, rx) = watch::channel(false);
        let tx = Arc::new(tx);
        let cancel = cancel.child_token();
        let dir = format!("{}/{}", settings.root_prefix(), path.trim_matches('/'));
        let task = tokio::spawn(run(settings, dir, id, tx.clone(), cancel.clone()));
        LeaderElection {
            rx,
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

    /// Resigns at once: the session is closed, so the node goes immediately.
    pub async fn close(&self) {
        self.cancel.cancel();
        if let Some(h) = self.task.lock().await.take() {
            let _ = h.await;
        }
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

async fn run(
    settings: ZkSettings,
    dir: String,
    id: String,
    tx: Arc<watch::Sender<bool>>,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_millis(200);
    while !cancel.is_cancelled() {
        let st = settings.session_timeout;
        let connect = zk::Client::connector()
            .with_session_timeout(st)
            .with_fail_eagerly()
            .connect(&settings.connect);
        let client = tokio::select! {
            _ = cancel.cancelled() => break,
            r = bounded(st + settings.request_timeout, connect) => r,
        };
        match client {
            Ok(client) => {
                let r = tokio::select! {
                    r = session(&settings, &client, &dir, &id, &tx, &cancel) => r,
                    _ = cancel.cancelled() => Ok(()),
                };
                set(&tx, false);
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
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    set(&tx, false);
}

/// One session: Ok when cancelled, Err when the session must be rebuilt.
async fn session(
    settings: &ZkSettings,
    client: &zk::Client,
    dir: &str,
    id: &str,
    tx: &watch::Sender<bool>,
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
        let seqs: Vec<i64> = children.iter().filter_map(|c| sequence(c)).collect();
        if !seqs.contains(&mine) {
            return Err(ZkError::NotConnected);
        }
        let lowest = seqs.iter().copied().min();
        set(tx, lowest == Some(mine));
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = watcher.changed() => {}
            s = states.changed() => {
                match s {
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {}
                    zk::SessionState::Disconnected => {
                        set(tx, false);
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
