//! The server nodes in sight, and each host's entry in the view derived
//! from its nodes.

use super::{Changes, ListedNode, Membership, NodeEvent, Note};
use crate::registry::heartbeat::{self, Heartbeat};
use crate::registry::layout::{classify, NodeClass, NodeKey};
use crate::{HeartbeatFormat, Instant, NodeInfo, NodeKind};
use std::collections::HashMap;

pub(super) struct Leaf {
    pub(super) key: NodeKey,
    pub(super) hb: Option<Heartbeat>,
    pub(super) format: Option<HeartbeatFormat>,
    /// 14 CSV fields: 2.0.6–2.0.9.
    pub(super) csv14: bool,
    pub(super) seen_at: Instant,
}

impl Membership {
    /// Adds a server node of a listing. Its host keeps the `seen_at` it had
    /// in `kept_seen` (None: a new session, where every node is seen anew).
    pub(super) fn list_server(
        &mut self,
        node: ListedNode,
        kept_seen: Option<&HashMap<(NodeKind, String), Instant>>,
        now: Instant,
        changes: &mut Changes,
    ) {
        let NodeClass::Server(key) = classify(self.mode, &node.path, Some(node.ephemeral)) else {
            return;
        };
        let seen = kept_seen
            .and_then(|old| old.get(&(key.kind, key.host.clone())).copied())
            .unwrap_or(now);
        let leaf = self.make_leaf(key, &node.data, seen, changes);
        self.by_host
            .entry((leaf.key.kind, leaf.key.host.clone()))
            .or_default()
            .insert(node.path.clone());
        changes.read.push(node.path.clone());
        self.leaves.insert(node.path, leaf);
    }

    /// An event on a server node; the hosts it touches go to `touched`.
    pub(super) fn server_event(
        &mut self,
        ev: NodeEvent,
        now: Instant,
        changes: &mut Changes,
        touched: &mut Vec<(NodeKind, String)>,
    ) {
        match ev {
            NodeEvent::Deleted { path } => touched.extend(self.drop_leaf(&path)),
            NodeEvent::Present {
                path,
                data,
                ephemeral,
            } => {
                let NodeClass::Server(key) = classify(self.mode, &path, Some(ephemeral)) else {
                    return;
                };
                let hk = (key.kind, key.host.clone());
                let leaf = self.present_leaf(&path, key, &data, now, changes, touched);
                self.leaves.insert(path.clone(), leaf);
                self.by_host
                    .entry(hk.clone())
                    .or_default()
                    .insert(path.clone());
                changes.read.push(path);
                touched.push(hk);
            }
            NodeEvent::DataChanged { path, data } => {
                if let Some(mut leaf) = self.leaves.remove(&path) {
                    self.read_into(&mut leaf, &data, changes);
                    touched.push((leaf.key.kind, leaf.key.host.clone()));
                    self.leaves.insert(path.clone(), leaf);
                    changes.read.push(path);
                }
            }
        }
    }

    /// The leaf of a node present at `path`, taken out of `leaves`: the
    /// known one with its data re-read, or a new one.
    fn present_leaf(
        &mut self,
        path: &str,
        key: NodeKey,
        data: &[u8],
        now: Instant,
        changes: &mut Changes,
        touched: &mut Vec<(NodeKind, String)>,
    ) -> Leaf {
        match self.leaves.remove(path) {
            Some(mut leaf) if leaf.key == key => {
                self.read_into(&mut leaf, data, changes);
                leaf
            }
            other => {
                // A path's key follows from the path, so a known
                // path never changes hands; were it to, the old
                // host must not keep it.
                if let Some(old) = other {
                    let ok = (old.key.kind, old.key.host);
                    if let Some(set) = self.by_host.get_mut(&ok) {
                        set.remove(path);
                    }
                    touched.push(ok);
                }
                self.make_leaf(key, data, now, changes)
            }
        }
    }

    fn drop_leaf(&mut self, path: &str) -> Option<(NodeKind, String)> {
        let leaf = self.leaves.remove(path)?;
        let key = (leaf.key.kind, leaf.key.host);
        if let Some(set) = self.by_host.get_mut(&key) {
            set.remove(path);
        }
        Some(key)
    }

    fn make_leaf(
        &mut self,
        key: NodeKey,
        data: &[u8],
        seen_at: Instant,
        changes: &mut Changes,
    ) -> Leaf {
        let mut leaf = Leaf {
            key,
            hb: None,
            format: None,
            csv14: false,
            seen_at,
        };
        self.read_into(&mut leaf, data, changes);
        leaf
    }

    fn read_into(&mut self, leaf: &mut Leaf, data: &[u8], changes: &mut Changes) {
        match heartbeat::parse(data, self.zone) {
            Ok((hb, f)) => {
                leaf.csv14 = f == HeartbeatFormat::CsvEpoch
                    && data.iter().filter(|b| **b == b',').count() == 13;
                leaf.hb = Some(hb);
                leaf.format = Some(f);
            }
            Err(error) => {
                leaf.hb = None;
                leaf.format = None;
                leaf.csv14 = false;
                if self.warned.insert(leaf.key.host.clone()) {
                    changes.notes.push(Note::Unreadable {
                        host: leaf.key.host.clone(),
                        error,
                    });
                }
            }
        }
    }

    /// Re-derives one host's entry in the view from its nodes.
    pub(super) fn refresh_host(
        &mut self,
        kind: NodeKind,
        host: &str,
        now: Instant,
        changes: &mut Changes,
    ) {
        let key = (kind, host.to_string());
        let paths = match self.by_host.get(&key) {
            Some(p) if !p.is_empty() => p,
            _ => {
                self.by_host.remove(&key);
                if self.view.remove(kind, host, now) {
                    changes.membership = true;
                    changes.notes.push(Note::Gone {
                        kind,
                        host: host.to_string(),
                    });
                }
                return;
            }
        };
        let leaves: Vec<&Leaf> = paths.iter().filter_map(|p| self.leaves.get(p)).collect();
        // The freshest heartbeat wins when a worker is registered in several groups.
        let best = leaves
            .iter()
            .filter_map(|l| l.hb.as_ref())
            .max_by_key(|hb| (hb.report_time, hb.startup_time));
        let mut groups: Vec<String> = leaves.iter().filter_map(|l| l.key.group.clone()).collect();
        groups.sort();
        groups.dedup();
        let seen_at = leaves.iter().map(|l| l.seen_at).min().unwrap_or(now);
        let existing = match kind {
            NodeKind::Worker => self.view.workers.get(host),
            NodeKind::Master => self.view.masters.get(host),
        };
        // 3.3+ task rows name the heartbeat's host:port, not the node. Data
        // that cannot be read (yet) says nothing about it: the live node keeps
        // the address it had, or its tasks would stop matching it.
        let address = match best {
            Some(hb) => hb.address.clone(),
            None => existing.and_then(|n| n.address.clone()),
        };
        let existed = existing.is_some();
        let mut info = NodeInfo::new(host, seen_at).with_address(address.as_deref());
        if let Some(hb) = best {
            info.startup_time = hb.startup_time;
            info.report_time = hb.report_time;
            info.status = hb.status.clone();
            info.process_id = hb.process_id;
        }
        info.groups = groups;
        if !existed {
            changes.membership = true;
            changes.notes.push(Note::Present {
                kind,
                host: host.to_string(),
            });
        }
        self.view.upsert(kind, info);
    }
}
