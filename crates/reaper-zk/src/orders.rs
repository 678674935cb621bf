//! Kill orders for ghost processes (SPEC §15): persistent nodes
//! `<root>/ds-reaper/orders/<worker>/<task_id>` holding the order's JSON,
//! written by the leading daemon, carried out by the worker's agent, removed
//! by the daemon once it has audited the agent's answer. Persistent, so that
//! an order outlives a daemon restart or a session loss of either side.

use crate::{bounded, ZkError, ZkRegistry};
use reaper_core::order::{KillOrder, ORDERS_DIR};
use reaper_core::ports::{OrderDeletion, OrderNode};
use zookeeper_client as zk;

/// A worker name that is one path segment: anything else could address a
/// node outside the worker's folder.
fn segment(worker: &str) -> Result<&str, ZkError> {
    let w = worker.trim();
    if w.is_empty() || w == "." || w == ".." || w.contains('/') {
        return Err(ZkError::Zk(zk::Error::BadArguments(
            &"a worker name must be one path segment",
        )));
    }
    Ok(w)
}

impl ZkRegistry {
    fn orders_dir(&self) -> String {
        format!("{}/{ORDERS_DIR}", self.root())
    }

    /// Writes the order node, replacing an older order for the same task.
    pub async fn put_order(&self, worker: &str, order: &KillOrder) -> Result<(), ZkError> {
        let (client, rt) = self.request_client()?;
        let dir = format!("{}/{}", self.orders_dir(), segment(worker)?);
        let path = format!("{dir}/{}", order.task_id);
        let data = order.to_json();
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let r = async {
            match bounded(rt, client.mkdir(&dir, &persistent)).await {
                Ok(()) | Err(ZkError::Zk(zk::Error::NodeExists)) => {}
                Err(e) => return Err(e),
            }
            match bounded(rt, client.create(&path, &data, &persistent)).await {
                Ok(_) => Ok(()),
                Err(ZkError::Zk(zk::Error::NodeExists)) => {
                    bounded(rt, client.set_data(&path, &data, None))
                        .await
                        .map(|_| ())
                }
                Err(e) => Err(e),
            }
        }
        .await;
        if r.is_err() {
            self.count_error();
        }
        r
    }

    /// Removes the order node if it is still at `version` (its `Stat.version`
    /// when read), and then the worker's folder once it holds no order. A
    /// node changed since is left for whoever wrote it: a deposed leader
    /// never removes its successor's order.
    pub async fn delete_order(
        &self,
        worker: &str,
        task_id: i64,
        version: i64,
    ) -> Result<OrderDeletion, ZkError> {
        let (client, rt) = self.request_client()?;
        let dir = format!("{}/{}", self.orders_dir(), segment(worker)?);
        let path = format!("{dir}/{task_id}");
        // A version ZooKeeper cannot hold matches no node.
        let Ok(version) = i32::try_from(version) else {
            return Ok(OrderDeletion::Changed);
        };
        let done = match bounded(rt, client.delete(&path, Some(version))).await {
            Ok(()) => OrderDeletion::Deleted,
            Err(ZkError::Zk(zk::Error::NoNode)) => OrderDeletion::Absent,
            Err(ZkError::Zk(zk::Error::BadVersion)) => return Ok(OrderDeletion::Changed),
            Err(e) => {
                self.count_error();
                return Err(e);
            }
        };
        // an order written meanwhile keeps the folder (NotEmpty)
        let _ = bounded(rt, client.delete(&dir, None)).await;
        Ok(done)
    }

    /// Every order node with its version; nodes whose data is not an
    /// order are logged and skipped.
    pub async fn orders(&self) -> Result<Vec<OrderNode>, ZkError> {
        let (client, rt) = self.request_client()?;
        let dir = self.orders_dir();
        let r = async {
            let workers = match bounded(rt, client.list_children(&dir)).await {
                Ok(w) => w,
                Err(ZkError::Zk(zk::Error::NoNode)) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            };
            let mut out = Vec::new();
            for worker in workers {
                let wdir = format!("{dir}/{worker}");
                let tasks = match bounded(rt, client.list_children(&wdir)).await {
                    Ok(t) => t,
                    Err(ZkError::Zk(zk::Error::NoNode)) => continue,
                    Err(e) => return Err(e),
                };
                for task in tasks {
                    let path = format!("{wdir}/{task}");
                    let (data, stat) = match bounded(rt, client.get_data(&path)).await {
                        Ok(d) => d,
                        Err(ZkError::Zk(zk::Error::NoNode)) => continue,
                        Err(e) => return Err(e),
                    };
                    match KillOrder::parse(&data) {
                        Ok(order) => out.push(OrderNode {
                            worker: worker.clone(),
                            order,
                            version: i64::from(stat.version),
                        }),
                        Err(e) => {
                            tracing::warn!(node = %path, error = %e, "skipping an order node that is not a kill order");
                        }
                    }
                }
            }
            Ok(out)
        }
        .await;
        if r.is_err() {
            self.count_error();
        }
        r
    }
}
