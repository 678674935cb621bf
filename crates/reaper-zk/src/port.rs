//! The ZooKeeper adapter behind the engine's ports (`reaper_core::ports`).

use crate::{ZkLeader, ZkRegistry};
use reaper_core::order::KillOrder;
use reaper_core::ports::{
    BoxFuture, Leadership, OrderDeletion, OrderNode, PortError, RegistrySource, RegistryStats,
    ViewWatch,
};
use reaper_core::registry::Detected;
use reaper_core::RegistryView;
use std::sync::Arc;
use tokio::sync::watch;

/// Membership changes only: heartbeat data alone does not wake the engine
/// (its sweeps read [`ZkRegistry::view`], which has it at once).
struct Watch(watch::Receiver<()>);

impl ViewWatch for Watch {
    fn changed(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.0.changed().await.is_ok() })
    }
}

impl RegistrySource for ZkRegistry {
    fn kind(&self) -> &'static str {
        "zookeeper"
    }

    fn view(&self) -> Arc<RegistryView> {
        ZkRegistry::view(self)
    }

    fn watch(&self) -> Box<dyn ViewWatch> {
        let mut rx = self.changes();
        rx.mark_unchanged();
        Box::new(Watch(rx))
    }

    fn detected(&self) -> Detected {
        ZkRegistry::detected(self)
    }

    fn stats(&self) -> RegistryStats {
        let s = ZkRegistry::stats(self);
        RegistryStats {
            session_expirations: s.session_expirations,
            errors: s.errors,
            reconnects: s.reconnects,
        }
    }

    fn delete_task_queue_entries(&self, task_id: i64) -> BoxFuture<'_, Result<usize, PortError>> {
        Box::pin(async move {
            ZkRegistry::delete_task_queue_entries(self, task_id)
                .await
                .map_err(PortError::from)
        })
    }

    fn put_order<'a>(
        &'a self,
        worker: &'a str,
        order: &'a KillOrder,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            ZkRegistry::put_order(self, worker, order)
                .await
                .map_err(PortError::from)
        })
    }

    fn delete_order<'a>(
        &'a self,
        worker: &'a str,
        task_id: i64,
        version: i64,
    ) -> BoxFuture<'a, Result<OrderDeletion, PortError>> {
        Box::pin(async move {
            ZkRegistry::delete_order(self, worker, task_id, version)
                .await
                .map_err(PortError::from)
        })
    }

    fn orders(&self) -> BoxFuture<'_, Result<Vec<OrderNode>, PortError>> {
        Box::pin(async move { ZkRegistry::orders(self).await.map_err(PortError::from) })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(ZkRegistry::close(self))
    }
}

impl Leadership for ZkLeader {
    fn is_leader(&self) -> bool {
        ZkLeader::is_leader(self)
    }

    fn leader_id(&self) -> Option<String> {
        ZkLeader::leader_id(self)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(ZkLeader::close(self))
    }
}
