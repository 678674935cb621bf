//! A lease of ds-reaper's own (the leader's, an agent's), kept alive on one
//! keep-alive stream: a keep-alive every third of the granted TTL, each
//! answered within the request timeout or the lease counts as lost. While
//! kept, [`KeptLease::valid_until`] is a moment before which etcd cannot
//! have expired it: the send time of the last answered keep-alive plus the
//! TTL, less a margin.

use crate::{bounded, EtcdError};
use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use std::time::{Duration, Instant as StdInstant};
use tokio::time::Instant as Tick;

pub(crate) struct KeptLease {
    id: i64,
    ttl: Duration,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
    /// Keep-alives are sent this often...
    every: Duration,
    /// ... and must be answered within this.
    answer_within: Duration,
    next_send: Tick,
    /// The keep-alive in flight, sent at.
    sent: Option<Tick>,
    valid_until: StdInstant,
}

/// What is taken off the TTL for [`KeptLease::valid_until`]: etcd's clock
/// and ours may run at slightly different rates.
fn margin(ttl: Duration) -> Duration {
    ttl / 10
}

impl KeptLease {
    /// Grants a lease of `ttl_secs` (etcd may grant more: its minimum TTL)
    /// and opens its keep-alive stream, each bounded by `rt`.
    pub(crate) async fn grant(
        client: &etcd_client::Client,
        ttl_secs: i64,
        rt: Duration,
    ) -> Result<KeptLease, EtcdError> {
        let mut leases = client.lease_client();
        let asked = StdInstant::now();
        let granted = bounded("lease grant", rt, leases.grant(ttl_secs, None)).await?;
        if !granted.error().is_empty() {
            return Err(EtcdError::Lease(granted.error().to_string()));
        }
        let id = granted.id();
        let ttl = Duration::from_secs(u64::try_from(granted.ttl().max(1)).unwrap_or(1));
        let (keeper, stream) = match bounded("lease keep-alive", rt, leases.keep_alive(id)).await {
            Ok(k) => k,
            Err(e) => {
                let _ = bounded("lease revoke", rt, leases.revoke(id)).await;
                return Err(e);
            }
        };
        let every = (ttl / 3).max(Duration::from_millis(100));
        Ok(KeptLease {
            id,
            ttl,
            keeper,
            stream,
            every,
            answer_within: rt.min(every),
            next_send: Tick::now() + every,
            sent: None,
            valid_until: asked + ttl - margin(ttl),
        })
    }

    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// Before this moment etcd cannot have expired the lease.
    pub(crate) fn valid_until(&self) -> StdInstant {
        self.valid_until
    }

    /// Waits for the next thing to do and does it: sends a keep-alive when
    /// due, or takes its answer. An error means the lease is lost or can no
    /// longer be kept: expired or revoked, stream broken, answer late.
    /// Cancel-safe: dropping it loses nothing.
    pub(crate) async fn step(&mut self) -> Result<(), EtcdError> {
        let deadline = match self.sent {
            Some(at) => at + self.answer_within,
            None => self.next_send,
        };
        tokio::select! {
            m = self.stream.message() => match m {
                Ok(Some(r)) if r.ttl() > 0 => {
                    if let Some(at) = self.sent.take() {
                        self.valid_until = at.into_std() + self.ttl - margin(self.ttl);
                        self.next_send = at + self.every;
                    }
                    Ok(())
                }
                Ok(Some(_)) => Err(EtcdError::Lease(format!(
                    "lease {:x} expired or was revoked",
                    self.id
                ))),
                Ok(None) => Err(EtcdError::Lease("the keep-alive stream ended".into())),
                Err(e) => Err(EtcdError::Lease(format!("the keep-alive stream failed: {e}"))),
            },
            _ = tokio::time::sleep_until(deadline) => {
                if self.sent.is_some() {
                    return Err(EtcdError::Lease(format!(
                        "keep-alive of lease {:x} not answered within {:?}",
                        self.id, self.answer_within
                    )));
                }
                let now = Tick::now();
                match tokio::time::timeout(self.answer_within, self.keeper.keep_alive()).await {
                    Ok(Ok(())) => {
                        self.sent = Some(now);
                        Ok(())
                    }
                    Ok(Err(e)) => Err(EtcdError::Lease(format!("sending a keep-alive: {e}"))),
                    Err(_) => Err(EtcdError::Lease("sending a keep-alive timed out".into())),
                }
            }
        }
    }
}

/// Revokes a lease (its keys go at once); bounded, best effort.
pub(crate) async fn revoke(client: &etcd_client::Client, id: i64, rt: Duration) {
    let mut leases = client.lease_client();
    if let Err(e) = bounded("lease revoke", rt, leases.revoke(id)).await {
        tracing::debug!(error = %e, lease = format!("{id:x}"), "revoking a lease failed; it expires by itself");
    }
}
