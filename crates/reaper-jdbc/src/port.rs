//! The JDBC registry behind the engine's ports (`reaper_core::ports`).

use crate::{JdbcLeader, JdbcRegistry};
use reaper_core::ports::{BoxFuture, Leadership, RegistrySource, RegistryStats, ViewWatch};
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

impl RegistrySource for JdbcRegistry {
    fn kind(&self) -> &'static str {
        "jdbc"
    }

    fn view(&self) -> Arc<RegistryView> {
        JdbcRegistry::view(self)
    }

    fn watch(&self) -> Box<dyn ViewWatch> {
        let mut rx = self.subscribe();
        rx.mark_unchanged();
        Box::new(Watch(rx))
    }

    fn detected(&self) -> Detected {
        JdbcRegistry::detected(self)
    }

    /// A failed poll counts as an error, a good poll after failures as a
    /// reconnect; there are no sessions to expire.
    fn stats(&self) -> RegistryStats {
        let s = JdbcRegistry::stats(self);
        RegistryStats {
            session_expirations: 0,
            errors: s.failures,
            reconnects: s.recoveries,
        }
    }

    // No task queue: the default `delete_task_queue_entries` (nothing to remove).

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(JdbcRegistry::close(self))
    }
}

impl Leadership for JdbcLeader {
    fn is_leader(&self) -> bool {
        JdbcLeader::is_leader(self)
    }

    fn leader_id(&self) -> Option<String> {
        JdbcLeader::leader_id(self)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(JdbcLeader::close(self))
    }
}
