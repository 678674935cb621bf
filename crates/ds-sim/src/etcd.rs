//! Simulated DS servers on etcd (reference §3.5): keys under DS's namespace
//! applied as a raw prefix (`dolphinscheduler/nodes/worker/<addr>`), each
//! bound to a lease of its own kept alive, and re-put with fresh heartbeat
//! data every `interval` — what DS 3.2+'s `EtcdRegistry` does (one
//! keep-alive lease per ephemeral key, `EtcdKeepAliveLeaseManager`).
//!
//! [`EtcdSimServer::crash`] revokes the leases (the keys go at once, like
//! ZooKeeper's closed session); [`EtcdSimServer::kill`] just stops refreshing
//! (a `kill -9`: the keys go when the leases expire, after their TTL).
//! [`server::PrivateEtcd`] is an etcd of a test's own, to stop, pause or
//! restart.

pub mod server;

use crate::zk::{encode_heartbeat_for, node_paths};
use anyhow::Context;
use chrono::Utc;
use etcd_client::{
    Client, CompactionOptions, DeleteOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions,
};
use reaper_core::{DsLine, Instant, NodeKind, Zone};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How a simulated server behaves.
#[derive(Debug, Clone)]
pub struct EtcdSimOptions {
    /// How often the heartbeat is re-put (DS: `max-heartbeat-interval`, 10 s).
    pub interval: Duration,
    /// TTL of each key's lease (DS: `registry.ttl`, 30 s).
    pub lease_ttl: Duration,
    /// Zone of the 1.x CSV date-times.
    pub zone: Zone,
}

impl Default for EtcdSimOptions {
    fn default() -> Self {
        EtcdSimOptions {
            interval: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(10),
            zone: Zone::Local,
        }
    }
}

async fn call<T>(
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(r) => Ok(r?),
        Err(_) => anyhow::bail!("etcd call timed out after {CALL_TIMEOUT:?}"),
    }
}

/// A client for `endpoints` (bounded).
pub async fn connect(endpoints: &[String]) -> anyhow::Result<Client> {
    let opts = etcd_client::ConnectOptions::new().with_connect_timeout(CALL_TIMEOUT);
    call(Client::connect(endpoints, Some(opts)))
        .await
        .with_context(|| format!("connecting to etcd {}", endpoints.join(",")))
}

/// Whether etcd answers at `endpoints` within `limit`.
pub async fn healthy(endpoints: &[String], limit: Duration) -> bool {
    let probe = async {
        let opts = etcd_client::ConnectOptions::new().with_connect_timeout(limit);
        let mut c = Client::connect(endpoints, Some(opts)).await?;
        c.status().await
    };
    matches!(tokio::time::timeout(limit, probe).await, Ok(Ok(_)))
}

/// `ETCD_ENDPOINTS` split on commas.
pub fn endpoints_from(var: &str) -> Vec<String> {
    var.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The keys a server of `line` puts: DS's registry paths behind the namespace.
pub fn node_keys(
    namespace: &str,
    line: DsLine,
    kind: NodeKind,
    host: &str,
    groups: &[&str],
) -> Vec<String> {
    node_paths(line, kind, host, groups)
        .into_iter()
        .map(|p| format!("{namespace}{p}"))
        .collect()
}

struct HbState {
    startup: Instant,
    frozen: bool,
}

struct Shared {
    endpoints: Vec<String>,
    line: DsLine,
    host: String,
    keys: Vec<String>,
    opts: EtcdSimOptions,
    hb: Mutex<HbState>,
}

impl Shared {
    fn hb(&self) -> std::sync::MutexGuard<'_, HbState> {
        self.hb.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn data(&self) -> Option<String> {
        let hb = self.hb();
        if hb.frozen {
            return None;
        }
        Some(encode_heartbeat_for(
            self.line,
            &self.host,
            hb.startup,
            Utc::now(),
            self.opts.zone,
        ))
    }

    fn ttl_secs(&self) -> i64 {
        i64::try_from(self.opts.lease_ttl.as_secs().max(1)).unwrap_or(i64::MAX)
    }
}

/// One live incarnation: a client, a lease per key, the refreshing task.
struct Live {
    client: Client,
    leases: Vec<i64>,
    task: JoinHandle<()>,
}

/// A simulated DS worker or master on etcd.
pub struct EtcdSimServer {
    shared: Arc<Shared>,
    live: Option<Live>,
}

impl EtcdSimServer {
    /// Puts the server's key(s) with the line's heartbeat, each bound to a
    /// lease of its own, and starts refreshing heartbeat and leases.
    pub async fn register(
        endpoints: &[String],
        namespace: &str,
        (line, kind): (DsLine, NodeKind),
        host: &str,
        groups: &[&str],
        startup_time: Instant,
        opts: EtcdSimOptions,
    ) -> anyhow::Result<EtcdSimServer> {
        let shared = Arc::new(Shared {
            endpoints: endpoints.to_vec(),
            line,
            host: host.to_string(),
            keys: node_keys(namespace, line, kind, host, groups),
            opts,
            hb: Mutex::new(HbState {
                startup: startup_time,
                frozen: false,
            }),
        });
        let mut s = EtcdSimServer { shared, live: None };
        s.go_live().await?;
        Ok(s)
    }

    async fn go_live(&mut self) -> anyhow::Result<()> {
        let sh = self.shared.clone();
        let client = connect(&sh.endpoints).await?;
        let data = sh.data().unwrap_or_else(|| {
            encode_heartbeat_for(sh.line, &sh.host, Utc::now(), Utc::now(), sh.opts.zone)
        });
        let mut leases = Vec::new();
        let mut lc = client.lease_client();
        let mut kv = client.kv_client();
        for key in &sh.keys {
            let lease = call(lc.grant(sh.ttl_secs(), None)).await?.id();
            call(kv.put(
                key.as_str(),
                data.as_str(),
                Some(PutOptions::new().with_lease(lease)),
            ))
            .await
            .with_context(|| format!("putting {key}"))?;
            leases.push(lease);
        }
        let task = {
            let (sh, leases) = (sh.clone(), leases.clone());
            tokio::spawn(async move {
                // One keep-alive stream per lease, reopened after a failure
                // (an etcd restart breaks them; its leases live on).
                let mut keepers: Vec<Option<(LeaseKeeper, LeaseKeepAliveStream)>> =
                    leases.iter().map(|_| None).collect();
                let mut hb = tokio::time::interval(sh.opts.interval);
                hb.tick().await;
                let period = (sh.opts.lease_ttl / 3).max(Duration::from_millis(200));
                let mut ka = tokio::time::interval(period);
                loop {
                    tokio::select! {
                        _ = hb.tick() => {
                            let Some(data) = sh.data() else { continue };
                            for (key, lease) in sh.keys.iter().zip(&leases) {
                                let put = kv.put(key.as_str(), data.as_str(), Some(PutOptions::new().with_lease(*lease)));
                                if let Err(e) = call(put).await {
                                    tracing::debug!(error = %e, key = %key, "sim heartbeat put failed");
                                }
                            }
                        }
                        _ = ka.tick() => {
                            for (slot, lease) in keepers.iter_mut().zip(&leases) {
                                if slot.is_none() {
                                    *slot = call(lc.keep_alive(*lease)).await.ok();
                                    continue;
                                }
                                let ok = match slot.as_mut() {
                                    Some((keeper, stream)) => {
                                        keeper.keep_alive().await.is_ok()
                                            && matches!(
                                                tokio::time::timeout(period, stream.message()).await,
                                                Ok(Ok(Some(_)))
                                            )
                                    }
                                    None => false,
                                };
                                if !ok {
                                    tracing::debug!(lease, "sim lease keep-alive failed");
                                    *slot = None;
                                }
                            }
                        }
                    }
                }
            })
        };
        self.live = Some(Live {
            client,
            leases,
            task,
        });
        Ok(())
    }

    /// The full keys this server puts.
    pub fn keys(&self) -> Vec<String> {
        self.shared.keys.clone()
    }

    pub fn host(&self) -> &str {
        &self.shared.host
    }

    /// The current leases (none while crashed or killed).
    pub fn lease_ids(&self) -> Vec<i64> {
        self.live
            .as_ref()
            .map(|l| l.leases.clone())
            .unwrap_or_default()
    }

    /// A dying server whose leases are revoked: its keys go at once.
    pub async fn crash(&mut self) {
        if let Some(l) = self.live.take() {
            l.task.abort();
            let _ = l.task.await;
            let mut lc = l.client.lease_client();
            for id in l.leases {
                if let Err(e) = call(lc.revoke(id)).await {
                    tracing::debug!(error = %e, "sim lease revoke failed");
                }
            }
        }
    }

    /// A killed server (`kill -9`): nothing refreshes its leases any more, so
    /// its keys go when they expire, `lease_ttl` later.
    pub async fn kill(&mut self) {
        if let Some(l) = self.live.take() {
            l.task.abort();
            let _ = l.task.await;
        }
    }

    /// New leases and keys with a new startup time (a restarted server).
    pub async fn restart(&mut self, new_startup_time: Instant) -> anyhow::Result<()> {
        self.crash().await;
        {
            let mut hb = self.shared.hb();
            hb.startup = new_startup_time;
            hb.frozen = false;
        }
        self.go_live().await
    }

    /// Stops re-putting the heartbeat (a hung server whose leases live on).
    pub fn freeze_heartbeat(&self) {
        self.shared.hb().frozen = true;
    }

    pub fn resume_heartbeat(&self) {
        self.shared.hb().frozen = false;
    }

    /// Puts `data` now and freezes the heartbeat so it stays.
    pub async fn set_raw_data(&self, data: &[u8]) -> anyhow::Result<()> {
        self.freeze_heartbeat();
        self.put_all(data).await
    }

    /// Puts a fresh heartbeat now (unless frozen).
    pub async fn heartbeat_now(&self) -> anyhow::Result<()> {
        match self.shared.data() {
            Some(d) => self.put_all(d.as_bytes()).await,
            None => Ok(()),
        }
    }

    async fn put_all(&self, data: &[u8]) -> anyhow::Result<()> {
        let l = self.live.as_ref().context("server is not running")?;
        let mut kv = l.client.kv_client();
        for (key, lease) in self.shared.keys.iter().zip(&l.leases) {
            call(kv.put(
                key.as_str(),
                data,
                Some(PutOptions::new().with_lease(*lease)),
            ))
            .await?;
        }
        Ok(())
    }
}

impl Drop for EtcdSimServer {
    fn drop(&mut self) {
        if let Some(l) = self.live.take() {
            l.task.abort();
        }
    }
}

/// A lock held the way DS's etcd registry holds one (3.1.9/3.2.2
/// `EtcdRegistry.acquireLock`): a lease of its own and etcd's lock API on
/// the lock path behind the namespace (jetcd prefixes lock names with it),
/// which puts `<namespace><lock>/<lease hex>`; DS releases by revoking the lease.
pub struct EtcdSimLock {
    client: Client,
    lease: i64,
    key: String,
    released: bool,
}

impl EtcdSimLock {
    /// Acquires the lock at `lock` (a registry path, e.g.
    /// `/lock/master-failover/10.0.0.5:5678`); waits while another holds it.
    pub async fn hold(
        endpoints: &[String],
        namespace: &str,
        lock: &str,
        ttl: Duration,
    ) -> anyhow::Result<EtcdSimLock> {
        let client = connect(endpoints).await?;
        let ttl = i64::try_from(ttl.as_secs().max(2)).unwrap_or(60);
        let lease = call(client.lease_client().grant(ttl, None)).await?.id();
        let name = format!("{namespace}{}", lock.trim_end_matches('/'));
        let resp = call(client.lock_client().lock(
            name.as_str(),
            Some(etcd_client::LockOptions::new().with_lease(lease)),
        ))
        .await
        .with_context(|| format!("locking {name}"))?;
        let key = String::from_utf8_lossy(resp.key()).into_owned();
        Ok(EtcdSimLock {
            client,
            lease,
            key,
            released: false,
        })
    }

    /// The lock's key (`<namespace><lock>/<lease hex>`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Releases as DS does: revokes the lease, which deletes the key.
    pub async fn release(mut self) -> anyhow::Result<()> {
        self.released = true;
        call(self.client.lease_client().revoke(self.lease)).await?;
        Ok(())
    }
}

impl Drop for EtcdSimLock {
    fn drop(&mut self) {
        if !self.released {
            let mut lc = self.client.lease_client();
            let lease = self.lease;
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                h.spawn(async move {
                    let _ = lc.revoke(lease).await;
                });
            }
        }
    }
}

/// Deletes every key under `prefix` (a test's namespace), so tests leave the
/// shared server clean. Refuses an empty prefix.
pub async fn delete_prefix(endpoints: &[String], prefix: &str) -> anyhow::Result<i64> {
    if prefix.is_empty() {
        anyhow::bail!("refusing to delete every key");
    }
    let mut c = connect(endpoints).await?;
    let r = call(c.delete(prefix, Some(DeleteOptions::new().with_prefix()))).await?;
    Ok(r.deleted())
}

/// Compacts the key-value history up to the current revision; returns it.
pub async fn compact_now(endpoints: &[String]) -> anyhow::Result<i64> {
    let mut c = connect(endpoints).await?;
    let rev = call(c.get("\0", Some(GetOptions::new().with_count_only())))
        .await?
        .header()
        .map(|h| h.revision())
        .context("no revision in reply")?;
    call(c.compact(rev, Some(CompactionOptions::new().with_physical()))).await?;
    Ok(rev)
}

/// Revokes a lease: every key bound to it goes at once.
pub async fn revoke_lease(endpoints: &[String], id: i64) -> anyhow::Result<()> {
    let mut c = connect(endpoints).await?;
    call(c.lease_revoke(id)).await?;
    Ok(())
}

/// The keys under `prefix` with the lease each is bound to (0: none), in key order.
pub async fn keys_with_leases(
    endpoints: &[String],
    prefix: &str,
) -> anyhow::Result<Vec<(String, i64)>> {
    let mut c = connect(endpoints).await?;
    let r = call(c.get(prefix, Some(GetOptions::new().with_prefix()))).await?;
    Ok(r.kvs()
        .iter()
        .map(|kv| (String::from_utf8_lossy(kv.key()).into_owned(), kv.lease()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_ds_paths_behind_the_raw_namespace() {
        assert_eq!(
            node_keys(
                "dolphinscheduler",
                DsLine::V3_2,
                NodeKind::Worker,
                "10.0.0.5:1234",
                &[]
            ),
            vec!["dolphinscheduler/nodes/worker/10.0.0.5:1234"]
        );
        assert_eq!(
            node_keys("ds", DsLine::V3_1, NodeKind::Master, "h:5678", &[]),
            vec!["ds/nodes/master/h:5678"]
        );
        assert_eq!(
            endpoints_from(" http://a:1, b:2 ,"),
            vec!["http://a:1".to_string(), "b:2".to_string()]
        );
    }
}
