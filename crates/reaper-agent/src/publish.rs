//! Where the agent publishes: a small port, so that ZooKeeper ([`crate::zk`])
//! and etcd (`reaper_etcd`'s agent publisher) plug into the same runtime.
//!
//! A publisher owns a registry session of its own (SPEC §12), keeps it alive
//! and re-establishes it after an expiry; `publish` writes the report as the
//! data of the agent's ephemeral node (key bound to the session or lease),
//! creating it again whenever the session that held it is gone.

use crate::host::RegisteredWorker;
use crate::orders::OrderNode;
use futures::future::BoxFuture;
use reaper_core::agent::AgentReport;

/// Why a publisher call failed; the runtime counts it and tries again after
/// the next scan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PublishError(pub String);

impl PublishError {
    pub fn new(msg: impl Into<String>) -> Self {
        PublishError(msg.into())
    }
}

/// The registry the agent publishes into.
pub trait Publisher: Send + Sync + 'static {
    /// Writes `report` (its JSON) as the data of the agent node
    /// `<root>/<agent.path>/<worker>`, creating the node (ephemeral to the
    /// publisher's session or lease) if needed.
    fn publish<'a>(
        &'a self,
        worker: &'a str,
        report: &'a AgentReport,
    ) -> BoxFuture<'a, Result<(), PublishError>>;

    /// The worker nodes registered now, for `agent.worker = "auto"`.
    fn workers(&self) -> BoxFuture<'_, Result<Vec<RegisteredWorker>, PublishError>>;

    /// The worker node `name` as registered now (its heartbeat's JVM pid and
    /// the lines it allows), or None while it is absent. Read after every
    /// scan: it should cost a read or two, not a listing of every worker.
    fn worker<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<RegisteredWorker>, PublishError>>;

    /// The nodes of the worker's order folder `<root>/ds-reaper/orders/<worker>`
    /// (SPEC §15), read in the publisher's own session; none while the folder
    /// does not exist. A publisher of a registry without orders has none.
    fn orders<'a>(
        &'a self,
        _worker: &'a str,
    ) -> BoxFuture<'a, Result<Vec<OrderNode>, PublishError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Whether the session is connected now.
    fn connected(&self) -> bool;

    /// Ends the session at once, so the agent's node goes now rather than
    /// after the session timeout.
    fn close(&self) -> BoxFuture<'_, ()>;
}
