//! The registry view: what the ZooKeeper adapter saw, with the daemon's own
//! timestamps for losses and the validity rule of SPEC §4.1.

use crate::host;
use crate::Instant;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    Worker,
    Master,
}

/// A live server node, merged over its groups on grouped layouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Normalised host (`ip` on 1.2, `ip:port` later).
    pub host: String,
    /// Heartbeat `startupTime`; None when the data could not be parsed (yet).
    pub startup_time: Option<Instant>,
    /// Heartbeat `reportTime`; None when unknown.
    pub report_time: Option<Instant>,
    /// Heartbeat `serverStatus` as text, when known.
    pub status: Option<String>,
    /// Worker groups the node is registered under (grouped layouts only).
    #[serde(default)]
    pub groups: Vec<String>,
    /// When the daemon first saw the node in this session.
    pub seen_at: Instant,
}

impl NodeInfo {
    pub fn new(host: &str, seen_at: Instant) -> Self {
        NodeInfo {
            host: host::normalize(host).into_owned(),
            startup_time: None,
            report_time: None,
            status: None,
            groups: Vec::new(),
            seen_at,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ViewState {
    /// A full listing completed after the latest (re)connect at `since`.
    Valid { since: Instant },
    /// Not usable: disconnected, expired, or not listed yet.
    Invalid { since: Instant, reason: String },
}

/// Everything the planner needs to know about the registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryView {
    pub state: ViewState,
    /// Live workers by normalised host.
    pub workers: HashMap<String, NodeInfo>,
    /// Live masters by normalised host.
    pub masters: HashMap<String, NodeInfo>,
    /// Workers seen live and then gone, by host: when the daemon saw them go.
    /// An entry is removed when the host comes back.
    pub lost_workers: HashMap<String, Instant>,
    /// Masters seen live and then gone.
    pub lost_masters: HashMap<String, Instant>,
}

impl RegistryView {
    pub fn invalid(since: Instant, reason: impl Into<String>) -> Self {
        RegistryView {
            state: ViewState::Invalid {
                since,
                reason: reason.into(),
            },
            workers: HashMap::new(),
            masters: HashMap::new(),
            lost_workers: HashMap::new(),
            lost_masters: HashMap::new(),
        }
    }

    pub fn valid_since(&self) -> Option<Instant> {
        match self.state {
            ViewState::Valid { since } => Some(since),
            ViewState::Invalid { .. } => None,
        }
    }

    pub fn is_valid(&self) -> bool {
        self.valid_since().is_some()
    }

    fn maps(&self, kind: NodeKind) -> (&HashMap<String, NodeInfo>, &HashMap<String, Instant>) {
        match kind {
            NodeKind::Worker => (&self.workers, &self.lost_workers),
            NodeKind::Master => (&self.masters, &self.lost_masters),
        }
    }

    /// The live node for a (raw) host.
    pub fn live(&self, kind: NodeKind, raw_host: &str) -> Option<&NodeInfo> {
        let h = host::normalize(raw_host);
        self.maps(kind).0.get(h.as_ref())
    }

    /// When the daemon saw a (raw) host go, if it did.
    pub fn lost_at(&self, kind: NodeKind, raw_host: &str) -> Option<Instant> {
        let h = host::normalize(raw_host);
        self.maps(kind).1.get(h.as_ref()).copied()
    }

    /// Records a node as live (adds or replaces it) and clears its loss.
    pub fn upsert(&mut self, kind: NodeKind, node: NodeInfo) {
        let (live, lost) = match kind {
            NodeKind::Worker => (&mut self.workers, &mut self.lost_workers),
            NodeKind::Master => (&mut self.masters, &mut self.lost_masters),
        };
        lost.remove(&node.host);
        live.insert(node.host.clone(), node);
    }

    /// Records a node as gone at `at`; no-op for a host that was not live.
    pub fn remove(&mut self, kind: NodeKind, raw_host: &str, at: Instant) -> bool {
        let h = host::normalize(raw_host).into_owned();
        let (live, lost) = match kind {
            NodeKind::Worker => (&mut self.workers, &mut self.lost_workers),
            NodeKind::Master => (&mut self.masters, &mut self.lost_masters),
        };
        if live.remove(&h).is_some() {
            lost.insert(h, at);
            true
        } else {
            false
        }
    }

    /// Forgets losses older than `keep` before `now`, so the map stays bounded.
    pub fn prune_lost(&mut self, now: Instant, keep: chrono::TimeDelta) {
        let cutoff = now - keep;
        self.lost_workers.retain(|_, t| *t >= cutoff);
        self.lost_masters.retain(|_, t| *t >= cutoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> Instant {
        chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn upsert_remove_and_come_back() {
        let mut v = RegistryView::invalid(t(0), "starting");
        v.upsert(NodeKind::Worker, NodeInfo::new("10.0.0.1:1234", t(0)));
        assert!(v.live(NodeKind::Worker, " 10.0.0.1:1234").is_some());
        assert!(v.remove(NodeKind::Worker, "10.0.0.1:1234", t(5)));
        assert!(!v.remove(NodeKind::Worker, "10.0.0.1:1234", t(6)));
        assert_eq!(v.lost_at(NodeKind::Worker, "10.0.0.1:1234"), Some(t(5)));
        v.upsert(NodeKind::Worker, NodeInfo::new("10.0.0.1:1234", t(7)));
        assert_eq!(v.lost_at(NodeKind::Worker, "10.0.0.1:1234"), None);
    }

    #[test]
    fn prune_keeps_recent_losses() {
        let mut v = RegistryView::invalid(t(0), "x");
        v.lost_workers.insert("a".into(), t(0));
        v.lost_workers.insert("b".into(), t(100));
        v.prune_lost(t(200), chrono::TimeDelta::seconds(150));
        assert!(!v.lost_workers.contains_key("a"));
        assert!(v.lost_workers.contains_key("b"));
    }
}
