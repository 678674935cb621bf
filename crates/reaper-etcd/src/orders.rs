//! Kill orders for ghost processes (SPEC §15) as keys
//! `<namespace>/ds-reaper/orders/<worker>/<task_id>` bound to no lease, so
//! that an order outlives the daemon that wrote it; removed by the daemon
//! once it has audited the agent's answer.

use crate::keys::{prefix_end, under};
use crate::shared::Inner;
use crate::{bounded, connect, EtcdError, EtcdRegistry};
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use reaper_core::order::{KillOrder, ORDERS_DIR};
use reaper_core::ports::{OrderDeletion, OrderNode};

/// A worker name that is one path segment: anything else could address a
/// key outside the worker's folder.
fn segment(worker: &str) -> Result<&str, EtcdError> {
    let w = worker.trim();
    if w.is_empty() || w == "." || w == ".." || w.contains('/') {
        return Err(EtcdError::Etcd(
            "order",
            format!("worker name {worker:?} is not one path segment"),
        ));
    }
    Ok(w)
}

impl Inner {
    fn orders_prefix(&self) -> String {
        format!("{}/", under(&self.settings.namespace, ORDERS_DIR))
    }

    /// The request client, connected on first use and after a failure.
    async fn request_client(&self) -> Result<etcd_client::Client, EtcdError> {
        let mut c = self.requests.lock().await;
        if let Some(client) = c.as_ref() {
            return Ok(client.clone());
        }
        let client = connect(&self.settings).await?;
        *c = Some(client.clone());
        Ok(client)
    }

    /// Counts a failed call and drops the client: the next call reconnects.
    async fn failed<T>(&self, r: Result<T, EtcdError>) -> Result<T, EtcdError> {
        if r.is_err() {
            Inner::count(&self.errors);
            self.requests.lock().await.take();
        }
        r
    }
}

impl EtcdRegistry {
    /// Writes the order key, replacing an older order for the same task.
    pub async fn put_order(&self, worker: &str, order: &KillOrder) -> Result<(), EtcdError> {
        let inner = self.inner();
        let key = format!(
            "{}{}/{}",
            inner.orders_prefix(),
            segment(worker)?,
            order.task_id
        );
        let r = async {
            let mut kv = inner.request_client().await?.kv_client();
            bounded(
                "writing an order",
                inner.settings.request_timeout,
                kv.put(key, order.to_json(), None),
            )
            .await
            .map(|_| ())
        }
        .await;
        inner.failed(r).await
    }

    /// Removes the order key if its `mod_revision` is still `version` (as
    /// read): one transaction, so a key rewritten since — a successor's
    /// order — stays.
    pub async fn delete_order(
        &self,
        worker: &str,
        task_id: i64,
        version: i64,
    ) -> Result<OrderDeletion, EtcdError> {
        let inner = self.inner();
        let key = format!("{}{}/{task_id}", inner.orders_prefix(), segment(worker)?);
        let r = async {
            let mut kv = inner.request_client().await?.kv_client();
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    version,
                )])
                .and_then([TxnOp::delete(key.as_str(), None)]);
            let t = inner.settings.request_timeout;
            let resp = bounded("removing an order", t, kv.txn(txn)).await?;
            if resp.succeeded() {
                return Ok(OrderDeletion::Deleted);
            }
            // An absent key compares as revision 0 too: tell the two apart.
            let count = GetOptions::new().with_count_only();
            let now = bounded("reading an order", t, kv.get(key.as_str(), Some(count))).await?;
            Ok(if now.count() == 0 {
                OrderDeletion::Absent
            } else {
                OrderDeletion::Changed
            })
        }
        .await;
        inner.failed(r).await
    }

    /// Every order key with its `mod_revision`; keys that are not orders are
    /// logged and skipped.
    pub async fn orders(&self) -> Result<Vec<OrderNode>, EtcdError> {
        let inner = self.inner();
        let prefix = inner.orders_prefix();
        let r = async {
            let mut kv = inner.request_client().await?.kv_client();
            let opts = GetOptions::new().with_range(prefix_end(prefix.as_bytes()));
            bounded(
                "reading the orders",
                inner.settings.request_timeout,
                kv.get(prefix.as_bytes(), Some(opts)),
            )
            .await
        }
        .await;
        let resp = inner.failed(r).await?;
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            let Some((worker, _task)) = key
                .strip_prefix(prefix.as_str())
                .and_then(|rel| rel.split_once('/'))
            else {
                continue;
            };
            match KillOrder::parse(kv.value()) {
                Ok(order) => out.push(OrderNode {
                    worker: worker.to_string(),
                    order,
                    version: kv.mod_revision(),
                }),
                Err(e) => {
                    tracing::warn!(key = %key, error = %e, "skipping an order key that is not a kill order");
                }
            }
        }
        Ok(out)
    }
}
