//! Leader election among ds-reaper replicas on etcd (SPEC §4.6, §14).
//!
//! The protocol and key layout of etcd's own election (`concurrency.Election`,
//! which the v3election service and `etcdctl elect` use): each replica puts
//! `<name>/<its lease id in hex>` bound to a lease of its own (`lease_ttl`),
//! its value the replica's id; the key with the lowest create revision leads.
//! `etcdctl elect -l <name>` shows the leader.
//!
//! A replica reads the candidates at a revision, watches them from the next,
//! and keeps its lease alive. It stops leading at once — before anything else
//! — when a keep-alive fails or goes unanswered, when its key is gone, or when
//! it loses sight of the candidates (watch failed or silent); then it revokes
//! its lease (its key goes, the next candidate leads) and stands again after a
//! backoff, at the end of the queue. And whatever its loop does, `is_leader`
//! is false once the last answered keep-alive's TTL may have run out.

use crate::keys::under;
use crate::lease::{revoke, KeptLease};
use crate::listing::{read_all, Kv};
use crate::session::backoff;
use crate::shared::lock;
use crate::watch::{open_watches, Progress};
use crate::{bounded, connect, EtcdError, EtcdSettings};
use etcd_client::{Compare, CompareOp, EventType, PutOptions, Txn, TxnOp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant as StdInstant;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct EtcdLeader {
    rx: watch::Receiver<bool>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

impl EtcdLeader {
    /// Starts the election on `<namespace>/<path>` (path e.g.
    /// `"/ds-reaper/leader"`, SPEC §6 `[leader] path`) with a lease of
    /// `settings.lease_ttl`; `id` is the key's value, shown by
    /// [`EtcdLeader::leader_id`] on every replica.
    pub fn start(
        settings: EtcdSettings,
        path: String,
        id: String,
        cancel: CancellationToken,
    ) -> EtcdLeader {
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            tx,
            leader: Mutex::new(None),
            valid_until: Mutex::new(None),
        });
        let cancel = cancel.child_token();
        let name = under(&settings.namespace, &path);
        let task = tokio::spawn(run(settings, name, id, shared.clone(), cancel.clone()));
        EtcdLeader {
            rx,
            shared,
            cancel,
            task: tokio::sync::Mutex::new(Some(task)),
        }
    }

    /// True while this replica leads and its lease cannot have expired.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow() && lock(&self.shared.valid_until).is_some_and(|t| StdInstant::now() < t)
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// The id the current leader stood with (this replica's own while it
    /// leads); None while this replica cannot see the candidates or nobody
    /// stands. It is what the election last observed.
    pub fn leader_id(&self) -> Option<String> {
        lock(&self.shared.leader).clone()
    }

    /// Resigns at once: the lease is revoked, so the key goes now and the
    /// next candidate leads without waiting for the TTL.
    pub async fn close(&self) {
        self.cancel.cancel();
        if let Some(h) = self.task.lock().await.take() {
            let _ = h.await;
        }
    }
}

/// What the election publishes.
struct Shared {
    tx: watch::Sender<bool>,
    leader: Mutex<Option<String>>,
    valid_until: Mutex<Option<StdInstant>>,
}

impl Shared {
    fn set(&self, v: bool) {
        self.tx.send_if_modified(|cur| {
            if *cur == v {
                return false;
            }
            if v {
                tracing::info!("became leader");
            } else {
                tracing::warn!("not leader any more");
            }
            *cur = v;
            true
        });
    }

    /// Not leading, leader unknown.
    fn unknown(&self) {
        self.set(false);
        *lock(&self.valid_until) = None;
        *lock(&self.leader) = None;
    }
}

async fn run(
    settings: EtcdSettings,
    name: String,
    id: String,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let mut backoff = backoff();
    while !cancel.is_cancelled() {
        let started = StdInstant::now();
        // Not raced with the cancellation: a term that was cancelled still
        // revokes its lease (resigns) before it returns.
        let r = term(&settings, &name, &id, &shared, &cancel).await;
        shared.unknown();
        match r {
            Ok(()) => break,
            Err(e) => tracing::warn!(error = %e, election = %name, "leader election interrupted"),
        }
        if started.elapsed() > settings.lease_ttl {
            backoff.reset();
        }
        if cancel
            .run_until_cancelled(tokio::time::sleep(backoff.next_delay()))
            .await
            .is_none()
        {
            break;
        }
    }
    shared.unknown();
}

/// One candidacy: a client, a lease, a key. Ok when cancelled (resigned).
async fn term(
    settings: &EtcdSettings,
    name: &str,
    id: &str,
    shared: &Shared,
    cancel: &CancellationToken,
) -> Result<(), EtcdError> {
    let rt = settings.request_timeout;
    let setup = async {
        let client = connect(settings).await?;
        let lease = KeptLease::grant(&client, settings.ttl_secs(), rt).await?;
        Ok::<_, EtcdError>((client, lease))
    };
    // No key is bound to a lease yet: one granted as this is cancelled
    // expires by itself.
    let Some(setup) = cancel.run_until_cancelled(setup).await else {
        return Ok(());
    };
    let (client, lease) = setup?;
    let lease_id = lease.id();
    let r = stand(&client, lease, name, id, shared, cancel, rt).await;
    // Not leading any more before the key goes, so two never lead at once.
    shared.unknown();
    revoke(&client, lease_id, rt).await;
    r
}

async fn stand(
    client: &etcd_client::Client,
    mut lease: KeptLease,
    name: &str,
    id: &str,
    shared: &Shared,
    cancel: &CancellationToken,
    rt: std::time::Duration,
) -> Result<(), EtcdError> {
    let prefix = format!("{name}/");
    let mine = format!("{prefix}{:x}", lease.id());
    let mut kv = client.kv_client();
    // Put the key unless it exists (as etcd's election does on a retry).
    let txn = Txn::new()
        .when([Compare::create_revision(mine.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            mine.clone(),
            id,
            Some(PutOptions::new().with_lease(lease.id())),
        )])
        .or_else([TxnOp::get(mine.clone(), None)]);
    bounded("election put", rt, kv.txn(txn)).await?;
    let snap = read_all(&mut kv, std::slice::from_ref(&prefix), rt).await?;
    let mut wc = client.watch_client();
    let (stream, early) = open_watches(
        &mut wc,
        std::slice::from_ref(&prefix),
        snap.revision + 1,
        rt,
    )
    .await?;
    let (mut sender, mut stream) = stream.split();
    let mut cands = Candidates::default();
    for kv in snap.ranges.into_iter().flatten() {
        cands.put(kv);
    }
    for resp in &early {
        cands.apply(resp);
    }
    cands.decide(&mine, id, shared, &lease)?;
    let mut progress = Progress::new(rt);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            r = lease.step() => {
                r?;
                if *shared.tx.borrow() {
                    *lock(&shared.valid_until) = Some(lease.valid_until());
                }
            }
            m = stream.message() => match m {
                Ok(Some(resp)) => {
                    progress.heard();
                    if resp.canceled() {
                        return Err(EtcdError::Watch(format!(
                            "etcd cancelled the election watch: {}",
                            resp.cancel_reason()
                        )));
                    }
                    cands.apply(&resp);
                    cands.decide(&mine, id, shared, &lease)?;
                }
                Ok(None) => return Err(EtcdError::Watch("the election watch ended".into())),
                Err(e) => return Err(EtcdError::Watch(format!("the election watch failed: {e}"))),
            },
            r = progress.check(&mut sender) => r.map_err(|e| EtcdError::Watch(e.to_string()))?,
        }
    }
}

/// The candidates' keys: create revision and value.
#[derive(Default)]
struct Candidates(HashMap<String, (i64, String)>);

impl Candidates {
    fn put(&mut self, kv: Kv) {
        let value = String::from_utf8_lossy(&kv.value).into_owned();
        self.0.insert(kv.key, (kv.create_revision, value));
    }

    fn apply(&mut self, resp: &etcd_client::WatchResponse) {
        for ev in resp.events() {
            let Some(kv) = ev.kv().and_then(Kv::from_client) else {
                continue;
            };
            match ev.event_type() {
                EventType::Put => self.put(kv),
                EventType::Delete => {
                    self.0.remove(&kv.key);
                }
            }
        }
    }

    /// The leader's key and value: the lowest create revision.
    fn leader(&self) -> Option<(&str, &str)> {
        self.0
            .iter()
            .min_by(|a, b| (a.1 .0, a.0).cmp(&(b.1 .0, b.0)))
            .map(|(k, (_, v))| (k.as_str(), v.as_str()))
    }

    /// Publishes who leads; an error when this replica's key is gone.
    fn decide(
        &self,
        mine: &str,
        id: &str,
        shared: &Shared,
        lease: &KeptLease,
    ) -> Result<(), EtcdError> {
        if !self.0.contains_key(mine) {
            return Err(EtcdError::Lease(format!("the election key {mine} is gone")));
        }
        match self.leader() {
            Some((k, _)) if k == mine => {
                // The deadline and who leads are set before anyone is told.
                *lock(&shared.valid_until) = Some(lease.valid_until());
                *lock(&shared.leader) = Some(id.to_string());
                shared.set(true);
            }
            Some((_, v)) => {
                shared.set(false);
                *lock(&shared.valid_until) = None;
                *lock(&shared.leader) = Some(v.to_string());
            }
            None => shared.unknown(),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, create: i64, value: &str) -> Kv {
        Kv {
            key: key.into(),
            value: value.as_bytes().to_vec(),
            lease: 1,
            create_revision: create,
            mod_revision: create,
        }
    }

    #[test]
    fn the_lowest_create_revision_leads() {
        let mut c = Candidates::default();
        c.put(kv("e/2", 9, "b"));
        c.put(kv("e/1", 7, "a"));
        c.put(kv("e/3", 12, "c"));
        assert_eq!(c.leader(), Some(("e/1", "a")));
        c.0.remove("e/1");
        assert_eq!(c.leader(), Some(("e/2", "b")));
        // a re-put keeps the create revision
        c.put(kv("e/2", 9, "b2"));
        assert_eq!(c.leader(), Some(("e/2", "b2")));
    }
}
