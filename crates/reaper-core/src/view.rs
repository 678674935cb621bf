//! The registry view: what the ZooKeeper adapter saw, with the daemon's own
//! timestamps for losses and the validity rule of SPEC §4.1.

use crate::host;
use crate::Instant;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
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
    /// The heartbeat's normalised `host:port`, where it carries one (3.2+).
    /// DS 3.3+ writes this, not the node name, into `t_ds_task_instance.host`,
    /// and the two differ when `worker-address` is set.
    #[serde(default)]
    pub address: Option<String>,
    /// The heartbeat's `processId` (the server JVM's pid on its host).
    #[serde(default)]
    pub process_id: Option<i64>,
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
            address: None,
            process_id: None,
            seen_at,
        }
    }

    /// Sets the heartbeat address (normalised); an address equal to the node
    /// name adds nothing.
    pub fn with_address(mut self, address: Option<&str>) -> Self {
        self.address = address
            .map(|a| host::normalize(a).into_owned())
            .filter(|a| !a.is_empty() && *a != self.host);
        self
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

/// One kind's live nodes, losses and address aliases.
type Maps<'a> = (
    &'a HashMap<String, NodeInfo>,
    &'a HashMap<String, Instant>,
    &'a HashMap<String, String>,
);
type MapsMut<'a> = (
    &'a mut HashMap<String, NodeInfo>,
    &'a mut HashMap<String, Instant>,
    &'a mut HashMap<String, String>,
);

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
    /// Heartbeat addresses that differ from their node's name, to that name,
    /// for live and lost nodes alike (a task row names whichever DS wrote).
    #[serde(default)]
    pub worker_aliases: HashMap<String, String>,
    #[serde(default)]
    pub master_aliases: HashMap<String, String>,
    /// Worker-host agents (SPEC §12) by the worker's normalised node name.
    /// Shared, not copied, by each copy of the view: the registry hands out
    /// a copy after every change, and with every agent rewriting its report
    /// every few seconds a sweep took several copies of 2,000 full reports.
    #[serde(default)]
    pub agents: HashMap<String, std::sync::Arc<crate::agent::AgentSeen>>,
    /// DS's own master-failover locks (SPEC §13), read never taken, by the
    /// normalised host of the master being failed over; [`ANY_MASTER`] for
    /// 1.3's single lock, which covers every master.
    #[serde(default)]
    pub failover_locks: HashMap<String, FailoverLock>,
    /// A registry-database outage long enough for DS to have purged live
    /// servers (SPEC §14 jdbc, DS #18274), while it holds the brake.
    #[serde(default)]
    pub registry_outage: Option<RegistryOutage>,
}

/// The key of a failover lock that names no master (1.3's
/// `<root>/lock/failover/masters`): while held, any master may be in failover.
pub const ANY_MASTER: &str = "*";

/// One DS failover lock as the registry shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverLock {
    /// Holders and waiters (Curator's lock children, etcd's lock keys, the
    /// JDBC registry's lock rows): any at all means a failover pass may run.
    pub holders: usize,
    /// When the daemon saw the holders drop to none (its own clock).
    pub released_at: Option<Instant>,
}

impl FailoverLock {
    /// The lock's state seen at `now` with `holders`, after `prev`.
    pub fn observed(prev: Option<FailoverLock>, holders: usize, now: Instant) -> FailoverLock {
        let released_at = if holders > 0 {
            None
        } else {
            match prev {
                Some(p) if p.holders == 0 => p.released_at,
                Some(_) => Some(now),
                None => None,
            }
        };
        FailoverLock {
            holders,
            released_at,
        }
    }
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
            worker_aliases: HashMap::new(),
            master_aliases: HashMap::new(),
            agents: HashMap::new(),
            failover_locks: HashMap::new(),
            registry_outage: None,
        }
    }

    /// SPEC §13: DS is failing over `master` right now (its lock, or 1.3's
    /// global one, has holders) or released the lock less than `settle` ago.
    /// A lock the daemon saw released only as gone (no entry) is not held.
    pub fn ds_failover_in_progress(
        &self,
        master: &str,
        now: Instant,
        settle: std::time::Duration,
    ) -> bool {
        let h = host::normalize(master);
        [h.as_ref(), ANY_MASTER]
            .iter()
            .filter_map(|k| self.failover_locks.get(*k))
            .any(|l| {
                l.holders > 0
                    || l.released_at
                        .is_some_and(|r| now - r < crate::delta(settle))
            })
    }

    /// Records what a listing of one failover lock showed.
    pub fn observe_failover_lock(&mut self, master: &str, holders: usize, now: Instant) {
        let key = if master == ANY_MASTER {
            ANY_MASTER.to_string()
        } else {
            host::normalize(master).into_owned()
        };
        let prev = self.failover_locks.get(&key).copied();
        if prev.is_none() && holders == 0 {
            return;
        }
        self.failover_locks
            .insert(key, FailoverLock::observed(prev, holders, now));
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

    fn maps(&self, kind: NodeKind) -> Maps<'_> {
        match kind {
            NodeKind::Worker => (&self.workers, &self.lost_workers, &self.worker_aliases),
            NodeKind::Master => (&self.masters, &self.lost_masters, &self.master_aliases),
        }
    }

    /// The node name a (raw) host stands for: itself when a node of that name
    /// is live or lost, else the node whose heartbeat address it is.
    pub fn resolve<'a>(&'a self, kind: NodeKind, raw_host: &'a str) -> Cow<'a, str> {
        let h = host::normalize(raw_host);
        let (live, lost, aliases) = self.maps(kind);
        if live.contains_key(h.as_ref()) || lost.contains_key(h.as_ref()) {
            return h;
        }
        match aliases.get(h.as_ref()) {
            Some(name) => Cow::Borrowed(name.as_str()),
            None => h,
        }
    }

    /// The live node for a (raw) host: its node name or its heartbeat address.
    pub fn live(&self, kind: NodeKind, raw_host: &str) -> Option<&NodeInfo> {
        let h = self.resolve(kind, raw_host);
        self.maps(kind).0.get(h.as_ref())
    }

    /// When the daemon saw a (raw) host go, if it did.
    pub fn lost_at(&self, kind: NodeKind, raw_host: &str) -> Option<Instant> {
        let h = self.resolve(kind, raw_host);
        self.maps(kind).1.get(h.as_ref()).copied()
    }

    fn maps_mut(&mut self, kind: NodeKind) -> MapsMut<'_> {
        match kind {
            NodeKind::Worker => (
                &mut self.workers,
                &mut self.lost_workers,
                &mut self.worker_aliases,
            ),
            NodeKind::Master => (
                &mut self.masters,
                &mut self.lost_masters,
                &mut self.master_aliases,
            ),
        }
    }

    /// Records a node as live (adds or replaces it) and clears its loss.
    pub fn upsert(&mut self, kind: NodeKind, node: NodeInfo) {
        let (live, lost, aliases) = self.maps_mut(kind);
        lost.remove(&node.host);
        // An address moves with its node: drop the node's old alias.
        if let Some(old) = live.get(&node.host).and_then(|n| n.address.clone()) {
            if node.address.as_deref() != Some(old.as_str()) {
                aliases.remove(&old);
            }
        }
        if let Some(a) = &node.address {
            aliases.insert(a.clone(), node.host.clone());
        }
        live.insert(node.host.clone(), node);
    }

    /// Records a node as gone at `at`; no-op for a host that was not live.
    /// Its address alias stays, so rows naming the address see the loss.
    pub fn remove(&mut self, kind: NodeKind, raw_host: &str, at: Instant) -> bool {
        let h = host::normalize(raw_host).into_owned();
        let (live, lost, _) = self.maps_mut(kind);
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
        for kind in [NodeKind::Worker, NodeKind::Master] {
            let (live, lost, aliases) = self.maps_mut(kind);
            lost.retain(|_, t| *t >= cutoff);
            aliases.retain(|_, name| live.contains_key(name) || lost.contains_key(name));
        }
        // A gone agent's listings stop mattering once they are this old.
        self.agents
            .retain(|_, a| a.gone_at.is_none() || now - a.received_at <= crate::agent::LISTED_KEEP);
    }

    /// Restarts every absence clock at `at` (SPEC §4.1: after a gap in sight,
    /// a loss seen before the gap never shortens a grace period after it).
    pub fn restart_absence_clocks(&mut self, at: Instant) {
        for t in self
            .lost_workers
            .values_mut()
            .chain(self.lost_masters.values_mut())
        {
            if *t < at {
                *t = at;
            }
        }
    }
}

/// A server lost with the outage.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OutageServer {
    pub kind: NodeKind,
    /// Normalised host, as the view keys it.
    pub host: String,
}

/// An outage of the registry's database and the servers lost with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryOutage {
    /// The last good poll before the outage (the daemon's clock).
    pub down_since: Instant,
    /// The good poll that ended it.
    pub returned_at: Instant,
    /// Losses first seen up to here are the outage's (`returned_at` + grace).
    pub counts_until: Instant,
    /// The brake holds at most until here (`returned_at` + `outage_hold`).
    pub hold_until: Instant,
    /// The outage's losses not seen live since.
    pub servers: std::collections::BTreeSet<OutageServer>,
    /// Servers already lost before the return: their losses were first
    /// seen before it, though their absence clocks restart with it; one
    /// seen live again and then lost in the window counts.
    #[serde(default)]
    pub lost_before: std::collections::BTreeSet<OutageServer>,
}

impl RegistryOutage {
    /// Whether it holds the brake at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        !self.servers.is_empty() && now < self.hold_until
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

    #[test]
    fn a_task_may_name_the_heartbeat_address() {
        let mut v = RegistryView::invalid(t(0), "x");
        let node =
            NodeInfo::new("worker-a.example:1234", t(0)).with_address(Some(" 10.0.0.9:1234 "));
        v.upsert(NodeKind::Worker, node);
        assert!(v.live(NodeKind::Worker, "10.0.0.9:1234").is_some());
        assert!(v.live(NodeKind::Worker, "WORKER-A.example:1234").is_some());
        assert!(v.live(NodeKind::Master, "10.0.0.9:1234").is_none());
        assert!(v.remove(NodeKind::Worker, "worker-a.example:1234", t(5)));
        assert!(v.live(NodeKind::Worker, "10.0.0.9:1234").is_none());
        assert_eq!(v.lost_at(NodeKind::Worker, "10.0.0.9:1234"), Some(t(5)));
        // the same address on a new node name moves the alias
        v.upsert(
            NodeKind::Worker,
            NodeInfo::new("worker-b:1234", t(6)).with_address(Some("10.0.0.9:1234")),
        );
        assert_eq!(
            v.live(NodeKind::Worker, "10.0.0.9:1234")
                .map(|n| n.host.as_str()),
            Some("worker-b:1234")
        );
        v.prune_lost(t(100), chrono::TimeDelta::seconds(10));
        assert!(v.live(NodeKind::Worker, "10.0.0.9:1234").is_some());
    }

    #[test]
    fn an_address_equal_to_the_name_adds_no_alias() {
        let n = NodeInfo::new("10.0.0.1:1234", t(0)).with_address(Some("10.0.0.1:1234"));
        assert_eq!(n.address, None);
    }

    #[test]
    fn ds_failover_lock_held_then_settling_then_clear() {
        let settle = std::time::Duration::from_secs(30);
        let mut v = RegistryView::invalid(t(0), "x");
        assert!(!v.ds_failover_in_progress("10.0.0.5:5678", t(0), settle));
        v.observe_failover_lock("10.0.0.5:5678", 0, t(0));
        assert!(
            v.failover_locks.is_empty(),
            "an unheld lock never seen held is not tracked"
        );
        v.observe_failover_lock(" 10.0.0.5:5678", 1, t(1));
        assert!(v.ds_failover_in_progress("10.0.0.5:5678", t(2), settle));
        assert!(!v.ds_failover_in_progress("10.0.0.6:5678", t(2), settle));
        v.observe_failover_lock("10.0.0.5:5678", 0, t(10));
        assert!(v.ds_failover_in_progress("10.0.0.5:5678", t(39), settle));
        v.observe_failover_lock("10.0.0.5:5678", 0, t(20));
        assert_eq!(v.failover_locks["10.0.0.5:5678"].released_at, Some(t(10)));
        assert!(!v.ds_failover_in_progress("10.0.0.5:5678", t(40), settle));
        // 1.3's single lock covers every master
        v.observe_failover_lock(ANY_MASTER, 2, t(50));
        assert!(v.ds_failover_in_progress("10.0.0.6:5678", t(50), settle));
    }

    #[test]
    fn clocks_restart_after_a_gap() {
        let mut v = RegistryView::invalid(t(0), "x");
        v.lost_workers.insert("a".into(), t(1));
        v.lost_masters.insert("m".into(), t(50));
        v.restart_absence_clocks(t(20));
        assert_eq!(v.lost_workers["a"], t(20));
        assert_eq!(v.lost_masters["m"], t(50));
    }
}
