//! Coalescing of data changes: a node is re-read at most once per
//! [`DATA_COALESCE`].

use super::{lock, Watcher, DATA_COALESCE};
use crate::{bounded, ZkError};
use reaper_core::registry::NodeEvent;
use std::collections::{HashMap, HashSet};
use tokio::time::Instant as Tick;
use zookeeper_client as zk;

/// Nodes re-read per request. The coalesced re-reads go out as multi-reads
/// (ZooKeeper 3.6+, which the persistent watches already require): one
/// request per tick instead of one per node — at 2,000 workers beating every
/// 10 s that was 200 requests a second, each a wake-up of the client and of
/// this task. Server heartbeats are well under a KiB, so a reply of 200 stays
/// far below ZooKeeper's 1 MiB packet limit.
const MULTI_READ: usize = 200;

impl Watcher {
    /// Re-reads the dirty nodes that are due and applies their data.
    pub(super) async fn flush_dirty(&mut self, client: &zk::Client) {
        let due = {
            let shared = lock(&self.inner.shared);
            self.coalesce.take_due(|p| shared.membership.contains(p))
        };
        if due.is_empty() {
            return;
        }
        let mut events = Vec::new();
        for chunk in due.chunks(MULTI_READ) {
            match self.read_many(client, chunk).await {
                Ok(results) => {
                    for (rel, r) in chunk.iter().zip(results) {
                        match r {
                            zk::MultiReadResult::Data { data, .. } => {
                                events.push(NodeEvent::DataChanged {
                                    path: rel.clone(),
                                    data,
                                })
                            }
                            // The deletion event follows and is handled on its own.
                            zk::MultiReadResult::Error {
                                err: zk::Error::NoNode,
                            } => {}
                            other => {
                                self.inner.error();
                                tracing::warn!(path = %rel, result = ?other, "re-reading a registry node failed");
                                self.coalesce.dirty.insert(rel.clone());
                            }
                        }
                    }
                }
                Err(e) => {
                    self.inner.error();
                    tracing::warn!(nodes = chunk.len(), error = %e, "re-reading registry nodes failed");
                    self.coalesce.dirty.extend(chunk.iter().cloned());
                }
            }
        }
        let now = self.inner.now();
        let c = self.change(|m| m.apply(events, now));
        self.coalesce.read(&c.read);
    }

    /// The data of `rels` in one multi-read, a result per node in their
    /// order; a reply of another length is an error (nothing is applied).
    async fn read_many(
        &self,
        client: &zk::Client,
        rels: &[String],
    ) -> Result<Vec<zk::MultiReadResult>, ZkError> {
        let mut reader = client.new_multi_reader();
        for rel in rels {
            reader.add_get_data(&self.full(rel))?;
        }
        let results = bounded(self.inner.settings.request_timeout, reader.commit()).await?;
        if results.len() != rels.len() {
            return Err(ZkError::Zk(zk::Error::UnexpectedError(format!(
                "a multi-read of {} nodes answered {}",
                rels.len(),
                results.len()
            ))));
        }
        Ok(results)
    }
}

/// Data changes waiting to be re-read, and when each node was last read.
#[derive(Default)]
pub(super) struct Coalescer {
    /// Nodes whose data changed and has not been re-read yet.
    pub(super) dirty: HashSet<String>,
    pub(super) last_read: HashMap<String, Tick>,
}

impl Coalescer {
    /// A full listing read every node in `read` afresh.
    pub(super) fn listed(&mut self, read: &[String]) {
        self.dirty.clear();
        self.last_read.clear();
        self.read(read);
    }

    pub(super) fn read(&mut self, read: &[String]) {
        let now = Tick::now();
        for p in read {
            self.dirty.remove(p);
            self.last_read.insert(p.clone(), now);
        }
    }

    pub(super) fn forget(&mut self, path: &str) {
        self.dirty.remove(path);
        self.last_read.remove(path);
    }

    /// The dirty nodes still known whose last read is [`DATA_COALESCE`] old,
    /// taken out of the dirty set.
    pub(super) fn take_due(&mut self, known: impl Fn(&str) -> bool) -> Vec<String> {
        if self.dirty.is_empty() {
            return Vec::new();
        }
        let now = Tick::now();
        let due: Vec<String> = self
            .dirty
            .iter()
            .filter(|p| {
                known(p)
                    && self
                        .last_read
                        .get(*p)
                        .is_some_and(|t| now.duration_since(*t) >= DATA_COALESCE)
            })
            .cloned()
            .collect();
        for p in &due {
            self.dirty.remove(p);
        }
        due
    }
}
