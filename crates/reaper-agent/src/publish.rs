//! Where the agent publishes: the port is reaper-core's
//! [`reaper_core::publish::Publisher`], so that ZooKeeper (reaper-zk's
//! `ZkAgentPublisher`) and etcd (reaper-etcd's `EtcdAgentPublisher`) plug into
//! the same runtime without this crate depending on either; the binary
//! chooses one through [`AgentRegistry`].

use reaper_core::DsLine;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use reaper_core::publish::{OrderNode, PublishError, Publisher, RegisteredWorker};

/// Starts the publisher of a registry: `path` is the validated `agent.path`,
/// `line` the configured line (None: auto), `cancel` ends its session.
pub type StartPublisher =
    dyn Fn(&str, Option<DsLine>, CancellationToken) -> Arc<dyn Publisher> + Send + Sync;

/// The registry the agent publishes into (SPEC §14: ZooKeeper or etcd; the
/// JDBC registry has no agents): its name for logs, and how to start its
/// publisher.
#[derive(Clone)]
pub struct AgentRegistry {
    name: String,
    start: Arc<StartPublisher>,
}

impl AgentRegistry {
    /// `name` says which registry and where, e.g. `ZooKeeper 10.0.0.1:2181`.
    pub fn new<F>(name: impl Into<String>, start: F) -> AgentRegistry
    where
        F: Fn(&str, Option<DsLine>, CancellationToken) -> Arc<dyn Publisher>
            + Send
            + Sync
            + 'static,
    {
        AgentRegistry {
            name: name.into(),
            start: Arc::new(start),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn start(
        &self,
        path: &str,
        line: Option<DsLine>,
        cancel: CancellationToken,
    ) -> Arc<dyn Publisher> {
        (self.start)(path, line, cancel)
    }
}

impl std::fmt::Debug for AgentRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AgentRegistry").field(&self.name).finish()
    }
}
