//! The etcd registry adapter of ds-reaper (SPEC §14).
//!
//! DS 3.1+ can keep its registry in etcd: every server puts its node under
//! DS's namespace, applied as a raw key prefix (`dolphinscheduler` +
//! `/nodes/worker/10.0.0.5:1234`), bound to a lease it keeps alive (DS's
//! `registry.ttl`, 30 s), and re-puts it with fresh heartbeat data every
//! heartbeat interval. A server that dies stops keeping its lease alive and
//! etcd deletes its keys when the lease expires.
//!
//! [`EtcdRegistry`] keeps a [`RegistryView`] from those keys: a full range
//! read at one revision, then a watch from the next revision. The view is
//! valid only between a completed read and the next failure of the watch
//! stream (an error, its end, a cancellation, a compacted revision, or no
//! answer to a progress request within the request timeout); after any such
//! gap it is rebuilt from a fresh read, which restarts every absence clock
//! (SPEC §4.1). Losses are stamped on the daemon's clock when the delete
//! arrives. Worker-host agents (SPEC §12) are read from
//! `<namespace>/<agent.path>/` into [`RegistryView::agents`] by the same
//! membership machine, as the ZooKeeper adapter does.
//!
//! [`EtcdLeader`] elects one acting replica on `<namespace>/ds-reaper/leader`
//! with a key bound to the replica's own lease, ordered by create revision
//! (the protocol and key layout of etcd's own election), and drops leadership
//! as soon as a keep-alive of that lease fails. [`EtcdAgentKey`] is the
//! agent's side: its report under its own lease; [`EtcdAgentPublisher`]
//! wraps it as reaper-core's agent `Publisher` port.
//!
//! The membership rules, heartbeat parsing and layout detection are
//! reaper-core's [`reaper_core::registry`], shared with the ZooKeeper adapter.
//! Every etcd call is bounded by [`EtcdSettings::request_timeout`].
//!
//! # Layout
//! - [`registry`](EtcdRegistry): the handle the daemon holds.
//! - `session`: connecting, the outer loop of reads and watches, backoff.
//! - `watch`: one read-then-watch cycle driving the membership machine.
//! - `listing`: the paged range reads at one revision.
//! - `leader`: the election.
//! - `publisher`: the agent's key under its own lease; `agent`: the agent's
//!   publisher (the port `ds-reaper agent` runs).
//! - `keys`: where things are under the namespace.
//! - `port`: the engine's ports.
//! - `orders`: kill orders for ghost processes (SPEC §15), plain keys (no lease).

mod agent;
mod agent_orders;
mod keys;
mod leader;
mod lease;
mod listing;
mod orders;
mod port;
mod publisher;
mod registry;
mod session;
mod shared;
mod watch;

use reaper_core::{DsLine, Zone};
use std::future::Future;
use std::time::Duration;

pub use agent::EtcdAgentPublisher;
pub use agent_orders::EtcdOrderReader;
pub use leader::EtcdLeader;
pub use publisher::EtcdAgentKey;
pub use reaper_core::registry::Detected;
pub use reaper_core::RegistryView;
pub use registry::EtcdRegistry;
pub use shared::Hooks;

/// Where and how to read DS's etcd registry (SPEC §6 `[etcd]`).
#[derive(Clone)]
pub struct EtcdSettings {
    /// Client URLs, e.g. `["http://127.0.0.1:2379"]` (a bare `host:port` is
    /// taken as http; https needs TLS support this build does not have).
    pub endpoints: Vec<String>,
    /// DS's `registry.namespace`, a raw key prefix (no separator added):
    /// `dolphinscheduler` puts workers at `dolphinscheduler/nodes/worker/<addr>`.
    pub namespace: String,
    /// Empty: no authentication.
    pub user: String,
    /// The password (read from `[etcd] password_file`); never logged.
    pub password: Option<String>,
    /// TTL of the leases ds-reaper grants itself (leader, agents).
    pub lease_ttl: Duration,
    /// Every etcd call is bounded by this; a watch stream that does not
    /// answer a progress request within it counts as down.
    pub request_timeout: Duration,
    /// An explicit line fixes layout and format; `None` detects them.
    pub line: Option<DsLine>,
    /// Zone of the 1.x CSV date-times (never written to etcd by DS, kept
    /// for the shared heartbeat parser).
    pub zone: Zone,
    /// Where worker-host agents publish (SPEC §12), relative to the root
    /// (`ds-reaper/agents`: keys `<namespace>/ds-reaper/agents/<worker>`),
    /// and when an agent's report goes stale; None: agents are not read.
    pub agents: Option<(String, Duration)>,
}

impl EtcdSettings {
    /// Settings with the defaults of SPEC §6 for everything but the endpoints.
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdSettings {
            endpoints,
            namespace: "dolphinscheduler".to_string(),
            user: String::new(),
            password: None,
            lease_ttl: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            line: None,
            zone: Zone::Local,
            agents: None,
        }
    }

    /// The endpoints as one string, for messages.
    pub(crate) fn endpoints_text(&self) -> String {
        self.endpoints.join(",")
    }

    /// The lease TTL in whole seconds, at least 1 (etcd's unit).
    pub(crate) fn ttl_secs(&self) -> i64 {
        let s = self.lease_ttl.as_secs() + u64::from(self.lease_ttl.subsec_nanos() > 0);
        i64::try_from(s.max(1)).unwrap_or(i64::MAX)
    }
}

impl std::fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("namespace", &self.namespace)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("lease_ttl", &self.lease_ttl)
            .field("request_timeout", &self.request_timeout)
            .field("line", &self.line)
            .field("zone", &self.zone)
            .field("agents", &self.agents)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd {0} timed out after {1:?}")]
    Timeout(&'static str, Duration),
    #[error("etcd {0}: {1}")]
    Etcd(&'static str, String),
    /// The revision asked for is compacted: read everything afresh.
    #[error("etcd {0}: the revision asked for is compacted")]
    Compacted(&'static str),
    #[error("etcd watch: {0}")]
    Watch(String),
    /// The lease is gone (expired or revoked) or its keep-alive failed.
    #[error("etcd lease: {0}")]
    Lease(String),
}

/// Every EtcdError is the registry failing or out of reach: `Unavailable`,
/// with the error itself as the source.
impl From<EtcdError> for reaper_core::ports::PortError {
    fn from(e: EtcdError) -> Self {
        reaper_core::ports::PortError::unavailable(e)
    }
}

/// Bounds an etcd call: the client retries connecting behind a request.
pub(crate) async fn bounded<T>(
    what: &'static str,
    limit: Duration,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(from_client(what, e)),
        Err(_) => Err(EtcdError::Timeout(what, limit)),
    }
}

/// Tells a compacted revision from other failures.
pub(crate) fn from_client(what: &'static str, e: etcd_client::Error) -> EtcdError {
    let text = e.to_string();
    if text.contains("required revision has been compacted") {
        return EtcdError::Compacted(what);
    }
    EtcdError::Etcd(what, text)
}

/// HTTP/2 pings on an idle connection; etcd refuses pings more frequent than
/// its `--grpc-keepalive-min-time` (5 s by default).
const H2_KEEPALIVE: Duration = Duration::from_secs(10);

/// A client for `settings` (bounded; the channel itself reconnects lazily).
pub(crate) async fn connect(settings: &EtcdSettings) -> Result<etcd_client::Client, EtcdError> {
    let rt = settings.request_timeout;
    let mut opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(rt)
        .with_keep_alive(H2_KEEPALIVE, rt)
        .with_require_leader(true);
    if !settings.user.is_empty() {
        opts = opts
            .with_user(
                settings.user.clone(),
                settings.password.clone().unwrap_or_default(),
            )
            .with_auto_token_refresh(true);
    }
    bounded(
        "connect",
        rt,
        etcd_client::Client::connect(settings.endpoints.clone(), Some(opts)),
    )
    .await
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EtcdStats {
    /// Failed calls and watch streams.
    pub errors: u64,
    /// Fresh reads after a gap.
    pub reconnects: u64,
    /// Reads forced by a compacted revision.
    pub compactions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up_to_whole_seconds() {
        let mut s = EtcdSettings::new(vec!["http://127.0.0.1:2379".into()]);
        assert_eq!(s.ttl_secs(), 30);
        s.lease_ttl = Duration::from_millis(1500);
        assert_eq!(s.ttl_secs(), 2);
        s.lease_ttl = Duration::ZERO;
        assert_eq!(s.ttl_secs(), 1);
    }

    #[test]
    fn the_password_is_never_printed() {
        let mut s = EtcdSettings::new(vec!["x:1".into()]);
        s.password = Some("hunter2".into());
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
