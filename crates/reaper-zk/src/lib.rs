//! The ZooKeeper registry adapter of ds-reaper.
//!
//! [`ZkRegistry`] keeps a [`RegistryView`] of the live DS workers and masters up to
//! date from a real ZooKeeper session, with the validity rule of SPEC §4.1: the
//! view is valid only after a full listing completed on the current connection.
//! [`ZkLeader`] elects one acting replica among ds-reaper instances.
//!
//! What is not ZooKeeper's — heartbeat parsing, what a path stands for, layout
//! detection, the membership rules, the backoff — is reaper-core's
//! [`reaper_core::registry`], shared with the other registry adapters; the
//! moved items are re-exported here ([`heartbeat`], [`Detected`]).
//!
//! # Layout
//! - [`registry`](ZkRegistry): the handle the daemon holds, and the 1.2 task-queue cleanup.
//! - `session`: connecting, closing, the loop of one session after another.
//! - `watch`: one session's watches, listing, events, data coalescing.
//! - `listing`: the reads of a full listing.
//! - `leader`: leader election on a session of its own.
//! - `orders`: kill orders for ghost processes (SPEC §15), persistent nodes.
//! - `agent`: [`ZkAgentPublisher`], the worker-host agent's publisher (SPEC §12).

mod agent;
mod leader;
mod listing;
mod orders;
mod port;
mod registry;
mod session;
mod shared;
mod watch;

use reaper_core::DsLine;
use reaper_core::Zone;
use std::future::Future;
use std::time::Duration;

pub use agent::ZkAgentPublisher;
pub use leader::ZkLeader;
pub use reaper_core::registry::heartbeat;
pub use reaper_core::registry::Detected;
pub use reaper_core::RegistryView;
pub use registry::ZkRegistry;

/// Where and how to read the registry.
#[derive(Debug, Clone)]
pub struct ZkSettings {
    /// Comma-separated ensemble, e.g. `"127.0.0.1:2181,host2:2181"`.
    pub connect: String,
    /// The DS root, a plain path prefix (not a chroot), e.g. `"/dolphinscheduler"`.
    pub root: String,
    pub session_timeout: Duration,
    /// Every ZooKeeper call is bounded by this.
    pub request_timeout: Duration,
    /// An explicit line fixes layout and format; `None` detects them.
    pub line: Option<DsLine>,
    /// Zone of the 1.x CSV date-times.
    pub zone: Zone,
    /// Where worker-host agents publish (SPEC §12), relative to the root
    /// (`ds-reaper/agents`), and when an agent's report goes stale; None:
    /// agents are not read.
    pub agents: Option<(String, Duration)>,
}

impl ZkSettings {
    /// Settings with the defaults of SPEC §6 for everything but the ensemble and root.
    pub fn new(connect: impl Into<String>, root: impl Into<String>) -> Self {
        ZkSettings {
            connect: connect.into(),
            root: root.into(),
            session_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            line: None,
            zone: Zone::Local,
            agents: None,
        }
    }

    /// The root without a trailing slash ("" for "/"), always absolute.
    pub(crate) fn root_prefix(&self) -> String {
        let t = self.root.trim().trim_end_matches('/');
        if t.is_empty() {
            String::new()
        } else if t.starts_with('/') {
            t.to_string()
        } else {
            format!("/{t}")
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZkError {
    #[error("ZooKeeper request timed out after {0:?}")]
    Timeout(Duration),
    #[error("ZooKeeper: {0}")]
    Zk(#[from] zookeeper_client::Error),
    #[error("not connected to ZooKeeper")]
    NotConnected,
}

/// Every ZkError is the registry failing or out of reach: `Unavailable`,
/// with the error itself as the source.
impl From<ZkError> for reaper_core::ports::PortError {
    fn from(e: ZkError) -> Self {
        reaper_core::ports::PortError::unavailable(e)
    }
}

/// Bounds a ZooKeeper call: the client queues requests while disconnected.
pub(crate) async fn bounded<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, zookeeper_client::Error>>,
) -> Result<T, ZkError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(ZkError::from),
        Err(_) => Err(ZkError::Timeout(limit)),
    }
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZkStats {
    pub session_expirations: u64,
    pub errors: u64,
    pub reconnects: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_prefix_forms() {
        let r = |root: &str| ZkSettings::new("x", root).root_prefix();
        assert_eq!(r("/dolphinscheduler"), "/dolphinscheduler");
        assert_eq!(r("/dolphinscheduler/"), "/dolphinscheduler");
        assert_eq!(r("dolphinscheduler"), "/dolphinscheduler");
        assert_eq!(r("/"), "");
    }
}
