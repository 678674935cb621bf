//! The agent's side (SPEC §12): its report under
//! `<namespace>/<agent.path>/<worker>`, bound to a lease of its own
//! (`lease_ttl`) that a background task keeps alive. The agent calls
//! [`EtcdAgentKey::publish`] after every scan; the rewrite is its
//! heartbeat. When the process dies the lease expires and the key goes;
//! [`EtcdAgentKey::close`] revokes it so the key goes at once.
//!
//! A lease that is lost (keep-alives unanswered, expired after a long
//! partition) or a put that fails is not retried in the background: the next
//! `publish` connects and grants a new lease, so the key reappears with the
//! next scan.

use crate::keys::agent_key;
use crate::lease::{revoke, KeptLease};
use crate::{bounded, connect, EtcdError, EtcdSettings};
use etcd_client::PutOptions;
use reaper_core::agent::AgentReport;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct EtcdAgentKey {
    settings: EtcdSettings,
    key: String,
    live: tokio::sync::Mutex<Option<Live>>,
    /// Whether a lease is held and kept alive right now.
    alive: Arc<AtomicBool>,
}

/// A client and the lease the key is bound to, kept alive by `task`.
struct Live {
    client: etcd_client::Client,
    lease: i64,
    lost: Arc<AtomicBool>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl EtcdAgentKey {
    /// A publisher for `worker` (the worker's registered node name, e.g.
    /// `10.0.1.11:1234`) under `agent_path` (SPEC §6 `[agent] path`,
    /// `ds-reaper/agents`): the key `<namespace>/<agent_path>/<worker>`. No
    /// I/O until the first [`publish`](Self::publish).
    pub fn new(settings: EtcdSettings, agent_path: &str, worker: &str) -> EtcdAgentKey {
        let key = agent_key(&settings.namespace, agent_path, worker);
        EtcdAgentKey {
            settings,
            key,
            live: tokio::sync::Mutex::new(None),
            alive: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The key the reports are put at.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the key's lease is held and kept alive.
    pub fn is_live(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Puts `report` (its JSON) at the key, bound to the lease; grants a new
    /// lease first when there is none or it was lost. Each call is bounded
    /// by the request timeout.
    pub async fn publish(&self, report: &AgentReport) -> Result<(), EtcdError> {
        let rt = self.settings.request_timeout;
        let mut live = self.live.lock().await;
        // A lost lease is replaced; the old one is revoked only after the
        // key moved to the new one, so a lease that was merely slow to
        // answer does not take the key with it.
        let mut old = None;
        if live
            .as_ref()
            .is_some_and(|l| l.lost.load(Ordering::Relaxed) || l.task.is_finished())
        {
            old = live.take();
            if let Some(o) = &old {
                o.stop.cancel();
            }
        }
        if live.is_none() {
            *live = Some(self.go_live().await?);
        }
        let Some(l) = live.as_ref() else {
            return Err(EtcdError::Lease("no lease".into()));
        };
        let mut kv = l.client.kv_client();
        let put = kv.put(
            self.key.as_str(),
            report.to_json(),
            Some(PutOptions::new().with_lease(l.lease)),
        );
        let r = bounded("agent report put", rt, put).await;
        if let Some(o) = old {
            revoke(&o.client, o.lease, rt).await;
        }
        match r {
            Ok(_) => Ok(()),
            Err(e) => {
                // Perhaps the lease is gone (etcd says "requested lease not
                // found"): start afresh next time.
                l.lost.store(true, Ordering::Relaxed);
                self.alive.store(false, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    async fn go_live(&self) -> Result<Live, EtcdError> {
        let s = &self.settings;
        let client = connect(s).await?;
        let mut lease = KeptLease::grant(&client, s.ttl_secs(), s.request_timeout).await?;
        let id = lease.id();
        let lost = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        self.alive.store(true, Ordering::Relaxed);
        let task = {
            let (lost, alive, stop, key) = (
                lost.clone(),
                self.alive.clone(),
                stop.clone(),
                self.key.clone(),
            );
            tokio::spawn(async move {
                let e = loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        r = lease.step() => if let Err(e) = r { break e },
                    }
                };
                tracing::warn!(error = %e, key = %key, "agent lease lost; the next report takes a new one");
                lost.store(true, Ordering::Relaxed);
                alive.store(false, Ordering::Relaxed);
            })
        };
        tracing::info!(key = %self.key, lease = format!("{id:x}"), "agent lease granted");
        Ok(Live {
            client,
            lease: id,
            lost,
            stop,
            task,
        })
    }

    /// Revokes the lease: the key goes at once. A later `publish` starts again.
    pub async fn close(&self) {
        let mut live = self.live.lock().await;
        if let Some(l) = live.take() {
            l.stop.cancel();
            let _ = l.task.await;
            revoke(&l.client, l.lease, self.settings.request_timeout).await;
        }
        self.alive.store(false, Ordering::Relaxed);
    }
}

impl Drop for EtcdAgentKey {
    fn drop(&mut self) {
        // Dropped without close: the lease is no longer kept alive and
        // expires after its TTL, as when the process dies.
        if let Ok(mut live) = self.live.try_lock() {
            if let Some(l) = live.take() {
                l.stop.cancel();
            }
        }
    }
}
