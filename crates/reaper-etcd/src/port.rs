//! The etcd adapter behind the engine's ports (`reaper_core::ports`).

use crate::{EtcdLeader, EtcdRegistry};
use reaper_core::order::KillOrder;
use reaper_core::ports::{
    BoxFuture, Leadership, OrderDeletion, OrderNode, PortError, RegistrySource, RegistryStats,
    ViewWatch,
};
use reaper_core::registry::Detected;
use reaper_core::RegistryView;
use std::sync::Arc;
use tokio::sync::watch;

struct Watch(watch::Receiver<Arc<RegistryView>>);

impl ViewWatch for Watch {
    fn changed(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.0.changed().await.is_ok() })
    }
}

impl RegistrySource for EtcdRegistry {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    fn view(&self) -> Arc<RegistryView> {
        EtcdRegistry::view(self)
    }

    fn watch(&self) -> Box<dyn ViewWatch> {
        let mut rx = self.subscribe();
        rx.mark_unchanged();
        Box::new(Watch(rx))
    }

    fn detected(&self) -> Detected {
        EtcdRegistry::detected(self)
    }

    /// etcd has no reader sessions: `session_expirations` stays 0; forced
    /// re-reads after a compaction count as reconnects.
    fn stats(&self) -> RegistryStats {
        let s = EtcdRegistry::stats(self);
        RegistryStats {
            session_expirations: 0,
            errors: s.errors,
            reconnects: s.reconnects,
        }
    }

    fn put_order<'a>(
        &'a self,
        worker: &'a str,
        order: &'a KillOrder,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            EtcdRegistry::put_order(self, worker, order)
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
            EtcdRegistry::delete_order(self, worker, task_id, version)
                .await
                .map_err(PortError::from)
        })
    }

    fn orders(&self) -> BoxFuture<'_, Result<Vec<OrderNode>, PortError>> {
        Box::pin(async move { EtcdRegistry::orders(self).await.map_err(PortError::from) })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(EtcdRegistry::close(self))
    }
}

impl Leadership for EtcdLeader {
    fn is_leader(&self) -> bool {
        EtcdLeader::is_leader(self)
    }

    fn leader_id(&self) -> Option<String> {
        EtcdLeader::leader_id(self)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(EtcdLeader::close(self))
    }
}
