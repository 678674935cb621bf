//! The agent's side of kill orders on etcd (SPEC §15): the keys under
//! `<namespace>/ds-reaper/orders/<worker>/`, read with one range read after
//! every scan. The agent only reads them; the leading daemon writes and
//! deletes them.

use crate::keys::{prefix_end, under};
use crate::{bounded, connect, EtcdError, EtcdSettings};
use etcd_client::GetOptions;
use reaper_core::order::ORDERS_DIR;

/// Reads the orders of one worker.
pub struct EtcdOrderReader {
    settings: EtcdSettings,
    /// `<ns>/ds-reaper/orders/<worker>/`.
    prefix: String,
    client: tokio::sync::Mutex<Option<etcd_client::Client>>,
}

impl EtcdOrderReader {
    /// No I/O until the first [`list`](Self::list).
    pub fn new(settings: EtcdSettings, worker: &str) -> EtcdOrderReader {
        let prefix = format!(
            "{}/{}/",
            under(&settings.namespace, ORDERS_DIR),
            worker.trim()
        );
        EtcdOrderReader {
            settings,
            prefix,
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// The key prefix of this worker's orders.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every order key of the worker: its last segment (the task id as the
    /// daemon wrote it) and its value. A key with deeper segments is no order
    /// of this layout and is left out.
    pub async fn list(&self) -> Result<Vec<(String, Vec<u8>)>, EtcdError> {
        let rt = self.settings.request_timeout;
        let mut guard = self.client.lock().await;
        if guard.is_none() {
            *guard = Some(connect(&self.settings).await?);
        }
        let Some(client) = guard.as_ref() else {
            return Err(EtcdError::Etcd("order read", "no client".into()));
        };
        let mut kv = client.kv_client();
        let opts = GetOptions::new().with_range(prefix_end(self.prefix.as_bytes()));
        let resp = match bounded("order read", rt, kv.get(self.prefix.as_str(), Some(opts))).await {
            Ok(r) => r,
            Err(e) => {
                // connect afresh next time
                guard.take();
                return Err(e);
            }
        };
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let name = kv.key().strip_prefix(self.prefix.as_bytes())?;
                let name = std::str::from_utf8(name).ok()?;
                (!name.is_empty() && !name.contains('/'))
                    .then(|| (name.to_string(), kv.value().to_vec()))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_the_daemons_order_folder_of_the_worker() {
        let r = EtcdOrderReader::new(
            EtcdSettings::new(vec!["http://127.0.0.1:2379".into()]),
            " 10.0.0.1:1234 ",
        );
        assert_eq!(
            r.prefix(),
            "dolphinscheduler/ds-reaper/orders/10.0.0.1:1234/"
        );
        assert_eq!(
            format!("{}42", r.prefix()),
            format!(
                "dolphinscheduler/{}",
                reaper_core::order::order_path("10.0.0.1:1234", 42)
            )
        );
    }
}
