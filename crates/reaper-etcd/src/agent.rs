//! The agent's publisher on DS's etcd registry (SPEC §12, §14):
//! reaper-core's [`Publisher`] port, which `ds-reaper agent` runs. The
//! agent's key is bound to a lease of its own ([`EtcdAgentKey`]), and the
//! registered workers for `agent.worker = "auto"` come from a read-only view
//! of the registry.

use crate::{EtcdAgentKey, EtcdOrderReader, EtcdRegistry, EtcdSettings};
use reaper_core::agent::AgentReport;
use reaper_core::ports::BoxFuture;
use reaper_core::publish::{OrderNode, PublishError, Publisher, RegisteredWorker};
use reaper_core::view::NodeInfo;
use reaper_core::DsLine;
use tokio_util::sync::CancellationToken;

/// A worker of the etcd view; the lines are the whole registry's (the view
/// keeps no format per node).
fn registered(n: &NodeInfo, lines: &[DsLine]) -> RegisteredWorker {
    RegisteredWorker {
        name: n.host.clone(),
        heartbeat_host: n
            .address
            .as_deref()
            .and_then(|a| a.rsplit_once(':').map(|(h, _)| h.to_string())),
        process_id: n.process_id,
        startup_time: n.startup_time,
        lines: lines.to_vec(),
    }
}

/// Publishes agent reports into etcd; see the module doc.
pub struct EtcdAgentPublisher {
    settings: EtcdSettings,
    path: String,
    registry: EtcdRegistry,
    /// The publisher of the worker the agent found, made on first publish.
    current: tokio::sync::Mutex<Option<(String, EtcdAgentKey)>>,
    /// The reader of the worker's kill orders, made on first use.
    orders: tokio::sync::Mutex<Option<(String, EtcdOrderReader)>>,
}

impl EtcdAgentPublisher {
    /// Starts the read-only view of the servers on `settings`' endpoints and
    /// namespace; `path` is `agent.path` (under the namespace).
    pub fn start(
        settings: EtcdSettings,
        path: &str,
        cancel: CancellationToken,
    ) -> EtcdAgentPublisher {
        let mut settings = settings;
        // The agent reads only the server nodes; it publishes its own key.
        settings.agents = None;
        EtcdAgentPublisher {
            registry: EtcdRegistry::start(settings.clone(), cancel),
            settings,
            path: path.to_string(),
            current: tokio::sync::Mutex::new(None),
            orders: tokio::sync::Mutex::new(None),
        }
    }
}

impl Publisher for EtcdAgentPublisher {
    fn publish<'a>(
        &'a self,
        worker: &'a str,
        report: &'a AgentReport,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            let mut cur = self.current.lock().await;
            if cur.as_ref().is_none_or(|(w, _)| w != worker) {
                if let Some((_, old)) = cur.take() {
                    old.close().await;
                }
                let p = EtcdAgentKey::new(self.settings.clone(), &self.path, worker);
                *cur = Some((worker.to_string(), p));
            }
            let (_, p) = cur.as_ref().expect("set above");
            p.publish(report)
                .await
                .map_err(|e| PublishError::Registry(e.into()))
        })
    }

    fn workers(&self) -> BoxFuture<'_, Result<Vec<RegisteredWorker>, PublishError>> {
        Box::pin(async move {
            let view = self.registry.view();
            if !view.is_valid() {
                return Err(PublishError::NotValidYet { registry: "etcd" });
            }
            let lines = self.registry.detected().lines;
            Ok(view
                .workers
                .values()
                .map(|n| registered(n, &lines))
                .collect())
        })
    }

    fn worker<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<RegisteredWorker>, PublishError>> {
        Box::pin(async move {
            let view = self.registry.view();
            if !view.is_valid() {
                return Err(PublishError::NotValidYet { registry: "etcd" });
            }
            let lines = self.registry.detected().lines;
            let name = reaper_core::host::normalize(name);
            Ok(view
                .workers
                .get(name.as_ref())
                .map(|n| registered(n, &lines)))
        })
    }

    fn orders<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Vec<OrderNode>, PublishError>> {
        Box::pin(async move {
            let mut cur = self.orders.lock().await;
            if cur.as_ref().is_none_or(|(w, _)| w != worker) {
                *cur = Some((
                    worker.to_string(),
                    EtcdOrderReader::new(self.settings.clone(), worker),
                ));
            }
            let Some((_, reader)) = cur.as_ref() else {
                return Ok(Vec::new());
            };
            let kvs = reader
                .list()
                .await
                .map_err(|e| PublishError::Registry(e.into()))?;
            Ok(kvs
                .into_iter()
                .map(|(name, data)| OrderNode { name, data })
                .collect())
        })
    }

    fn connected(&self) -> bool {
        self.registry.view().is_valid()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some((_, p)) = self.current.lock().await.take() {
                p.close().await;
            }
            self.registry.close().await;
        })
    }
}
