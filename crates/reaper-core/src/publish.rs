//! The agent's port to the registry it publishes into (SPEC §12): the
//! ZooKeeper form lives in reaper-zk, the etcd form in reaper-etcd, and the
//! agent's runtime is written once against [`Publisher`].
//!
//! A publisher owns a registry session of its own, keeps it alive and
//! re-establishes it after an expiry; `publish` writes the report as the data
//! of the agent's ephemeral node (key bound to the session or lease),
//! creating it again whenever the session that held it is gone.

use crate::agent::AgentReport;
use crate::host::host_part;
use crate::ports::{BoxError, BoxFuture};
use crate::registry::{heartbeat, Detected};
use crate::{DsLine, HeartbeatFormat, RegistryLayout, Zone};

/// Why a publisher call failed; the agent counts it and tries again after
/// the next scan.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// `registry` names it and where, e.g. `ZooKeeper 10.0.0.1:2181`.
    #[error("not connected to {registry}")]
    NotConnected { registry: String },
    #[error("no {registry} session")]
    NoSession { registry: &'static str },
    #[error("the {registry} registry view is not valid yet")]
    NotValidYet { registry: &'static str },
    #[error("bad worker node name {0:?}")]
    BadWorkerName(String),
    #[error("{path} keeps changing hands")]
    ChangingHands { path: String },
    /// A registry request failed: `what` it was doing (and on which node).
    #[error("{what}: {source}")]
    Request {
        what: String,
        #[source]
        source: BoxError,
    },
    /// The registry adapter's own error, as it says it.
    #[error("{0}")]
    Registry(#[source] BoxError),
}

/// A worker node as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredWorker {
    /// The node's name (its last path segment), e.g. `10.0.1.11:1234`.
    pub name: String,
    /// The `host` of its heartbeat (3.2+), when it has one.
    pub heartbeat_host: Option<String>,
    /// The heartbeat's `processId`: the worker JVM's pid on this host.
    pub process_id: Option<i64>,
    /// The heartbeat's `startupTime`: the agent checks the JVM's start time
    /// against it (SPEC §12). None where the heartbeat has none.
    pub startup_time: Option<crate::Instant>,
    /// The DS lines the node's layout and heartbeat format allow (empty:
    /// none, they contradict each other).
    pub lines: Vec<DsLine>,
}

impl RegisteredWorker {
    /// A worker node named `name` in `layout` with heartbeat `data`.
    pub fn from_node(name: &str, layout: Option<RegistryLayout>, data: &[u8]) -> RegisteredWorker {
        let parsed = heartbeat::parse(data, Zone::Local).ok();
        let format = parsed.as_ref().map(|(_, f)| *f);
        // only 2.0.6-2.0.9 wrote 14 CSV fields
        let csv14 = format == Some(HeartbeatFormat::CsvEpoch)
            && data.iter().filter(|b| **b == b',').count() == 13;
        let hb = parsed.map(|(hb, _)| hb);
        RegisteredWorker {
            name: name.to_string(),
            heartbeat_host: hb
                .as_ref()
                .and_then(|h| h.address.as_deref())
                .map(|a| host_part(a).to_string()),
            process_id: hb.as_ref().and_then(|h| h.process_id),
            startup_time: hb.and_then(|h| h.startup_time),
            lines: Detected::from_evidence(layout, format, csv14).lines,
        }
    }
}

/// One node of the agent's order folder: its name (the task id, as the
/// daemon wrote it) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderNode {
    pub name: String,
    pub data: Vec<u8>,
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
