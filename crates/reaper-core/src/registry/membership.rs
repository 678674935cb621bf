//! The membership state machine: the [`RegistryView`] kept from what a
//! registry adapter saw, with no I/O and the daemon's clock passed in as `now`.
//!
//! An adapter feeds it three kinds of events:
//! - a full listing of the server nodes ([`Membership::apply_listing`]),
//! - nodes present, changed or gone ([`Membership::apply`]),
//! - a gap in its sight of the registry ([`Membership::invalidate`]),
//!
//! and publishes [`Membership::view`] whenever [`Changes::publish`] says so.
//! The rules it keeps (SPEC §2, §3, §4.1):
//! - the view is valid from the listing that ends a gap, never before;
//! - a node's `seen_at` is per session: kept across a listing on the same
//!   session, the listing's time after a new one, the arrival time otherwise;
//! - a loss is stamped when the daemon learns of it: at the event's arrival,
//!   or, for a host that went while the daemon could not see, at the listing
//!   that ends the gap; and every absence clock restarts at that listing;
//! - on grouped layouts a worker is one host over all its groups, and the
//!   freshest heartbeat of its nodes is the one that counts;
//! - data that cannot be read (1.3's empty node before its first heartbeat,
//!   garbage) leaves the node present with unknown times, keeps the address
//!   it had, and is reported once per host.

mod agents;
mod nodes;
mod outage;

pub use outage::{OutageServer, RegistryOutage};

use super::heartbeat::HeartbeatError;
use super::layout::{Detected, LayoutEvidence, LayoutMode};
use crate::{Instant, NodeKind, RegistryView, ViewState, Zone};
use agents::AgentConf;
use nodes::Leaf;
use std::collections::{BTreeSet, HashMap, HashSet};

/// Losses are kept at least this long so the planner can apply its grace period.
pub const LOST_KEEP: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// One server node of a full listing, its path relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedNode {
    pub path: String,
    pub data: Vec<u8>,
    /// Ephemeral (ZooKeeper), bound to a lease (etcd), EPHEMERAL (JDBC).
    pub ephemeral: bool,
}

/// Everything under the server directories at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub nodes: Vec<ListedNode>,
    /// 1.2's `/workers` or `/masters` directory exists (perhaps empty).
    pub legacy_dir: bool,
}

/// A change to one node, paths relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// A node as read after its creation (or a change to a node not known
    /// yet): classified, then added, or its data re-read if already known.
    Present {
        path: String,
        data: Vec<u8>,
        ephemeral: bool,
    },
    /// New data of a node already known; ignored for an unknown path.
    DataChanged { path: String, data: Vec<u8> },
    /// The node is gone.
    Deleted { path: String },
}

/// Why the daemon stopped seeing the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// The connection dropped or a step on it failed; the session lives on,
    /// so nodes still there at the next listing keep their `seen_at`.
    Connection,
    /// The session ended, or a new one is being built: every node is seen
    /// anew at the next listing.
    Session,
}

/// Something an operator wants in the log; the adapter writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    Invalid {
        reason: String,
    },
    Listed {
        workers: usize,
        masters: usize,
        /// The listing ended a gap (and made the view valid).
        after_gap: bool,
    },
    Present {
        kind: NodeKind,
        host: String,
    },
    Gone {
        kind: NodeKind,
        host: String,
    },
    /// Once per host: its data could not be read.
    Unreadable {
        host: String,
        error: HeartbeatError,
    },
    /// Once per worker: its agent's report could not be read.
    AgentUnreadable {
        worker: String,
        error: String,
    },
}

/// What an event did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The view (or the detection) changed: publish it.
    pub publish: bool,
    /// Membership changed: a server came or went, losses were stamped or
    /// forgotten, or the view's validity changed — what a sweeper reacts to.
    /// False when only heartbeat data (report/startup times, status,
    /// address) or agent reports changed: those matter only to a sweep that
    /// reads the view, so an adapter may hand them out lazily instead of
    /// republishing the whole view for every heartbeat.
    pub membership: bool,
    /// Paths whose data was read into a node, for adapters that coalesce reads.
    pub read: Vec<String>,
    pub notes: Vec<Note>,
}

/// See the module documentation.
pub struct Membership {
    mode: LayoutMode,
    zone: Zone,
    view: RegistryView,
    /// Server nodes by path relative to the root.
    leaves: HashMap<String, Leaf>,
    /// Node paths per host (a grouped worker has one per group).
    by_host: HashMap<(NodeKind, String), BTreeSet<String>>,
    legacy_dir_seen: bool,
    /// Hosts whose unreadable data was already reported.
    warned: HashSet<String>,
    /// The sight of the registry was interrupted since the last listing.
    gap: bool,
    /// The next listing is the first of a session.
    new_session: bool,
    /// Where the worker-host agents publish (SPEC §12), if watched.
    agents: Option<AgentConf>,
}

impl Membership {
    /// An invalid view (`reason`, since `now`) waiting for its first listing.
    pub fn new(mode: LayoutMode, zone: Zone, now: Instant, reason: impl Into<String>) -> Self {
        Membership {
            mode,
            zone,
            view: RegistryView::invalid(now, reason),
            leaves: HashMap::new(),
            by_host: HashMap::new(),
            legacy_dir_seen: false,
            warned: HashSet::new(),
            gap: true,
            new_session: true,
            agents: None,
        }
    }

    pub fn mode(&self) -> LayoutMode {
        self.mode
    }

    pub fn view(&self) -> &RegistryView {
        &self.view
    }

    /// Whether a server node is known at `path`.
    pub fn contains(&self, path: &str) -> bool {
        self.leaves.contains_key(path)
    }

    /// What the nodes in sight say about the layout and format.
    pub fn detected(&self) -> Detected {
        let mut e = LayoutEvidence::default();
        e.legacy_dir(self.legacy_dir_seen);
        for l in self.leaves.values() {
            e.node(l.key.layout, l.format, l.csv14);
        }
        e.detected()
    }

    /// The daemon lost sight of the registry: the view is invalid until the
    /// next listing. Invalid since the first of consecutive invalidations;
    /// the same reason twice changes nothing.
    pub fn invalidate(&mut self, gap: Gap, reason: impl Into<String>, now: Instant) -> Changes {
        let reason = reason.into();
        self.gap = true;
        if gap == Gap::Session {
            self.new_session = true;
        }
        let since = match &self.view.state {
            ViewState::Invalid { reason: r, .. } if *r == reason => return Changes::default(),
            ViewState::Invalid { since, .. } => *since,
            ViewState::Valid { .. } => now,
        };
        self.view.state = ViewState::Invalid {
            since,
            reason: reason.clone(),
        };
        Changes {
            publish: true,
            membership: true,
            read: Vec::new(),
            notes: vec![Note::Invalid { reason }],
        }
    }

    /// Rebuilds every node from a full listing taken at `now`. A listing
    /// after a gap ends it: hosts gone meanwhile are lost as of `now`, every
    /// absence clock restarts at `now` (a host lost before the gap may have
    /// come back and gone again unseen), and the view is valid from `now`.
    /// A listing with no gap before it (a registry that is polled) only
    /// stamps the losses it finds.
    pub fn apply_listing(&mut self, listing: Listing, now: Instant) -> Changes {
        let after_gap = std::mem::take(&mut self.gap);
        let new_session = std::mem::take(&mut self.new_session);
        let mut changes = Changes::default();
        let old_seen = self.seen_by_host();
        self.leaves.clear();
        self.by_host.clear();
        self.legacy_dir_seen = listing.legacy_dir;
        let mut old_agents = std::mem::take(&mut self.view.agents);
        for node in listing.nodes {
            if let Some(worker) = self.agent_worker(&node.path) {
                if let Some(prev) = old_agents.remove(&worker) {
                    self.view.agents.insert(worker.clone(), prev);
                }
                self.agent_report(worker, &node.data, now, after_gap, &mut changes);
                continue;
            }
            let kept_seen = (!new_session).then_some(&old_seen);
            self.list_server(node, kept_seen, now, &mut changes);
        }
        self.keep_gone_agents(old_agents, now);
        // Hosts that went while the view was not watching are lost as of now.
        for (kind, host) in old_seen.keys() {
            if !self.by_host.contains_key(&(*kind, host.clone())) {
                self.view.remove(*kind, host, now);
            }
        }
        if after_gap {
            // SPEC §4.1: after any gap — a reconnect of the same session as
            // much as an expiry or a new session — a loss seen before it
            // never shortens a grace period after it.
            self.view.restart_absence_clocks(now);
        }
        let hosts: Vec<(NodeKind, String)> = self.by_host.keys().cloned().collect();
        for (kind, host) in hosts {
            self.refresh_host(kind, &host, now, &mut changes);
        }
        if after_gap || !self.view.is_valid() {
            self.view.state = ViewState::Valid { since: now };
        }
        changes.notes.push(Note::Listed {
            workers: self.view.workers.len(),
            masters: self.view.masters.len(),
            after_gap,
        });
        changes.publish = true;
        changes.membership = true;
        changes
    }

    /// Every host in the view with its `seen_at`.
    fn seen_by_host(&self) -> HashMap<(NodeKind, String), Instant> {
        self.view
            .workers
            .values()
            .map(|n| ((NodeKind::Worker, n.host.clone()), n.seen_at))
            .chain(
                self.view
                    .masters
                    .values()
                    .map(|n| ((NodeKind::Master, n.host.clone()), n.seen_at)),
            )
            .collect()
    }

    /// Applies node events that arrived together at `now`; each host they
    /// touch is re-derived once, after all of them.
    pub fn apply(&mut self, events: impl IntoIterator<Item = NodeEvent>, now: Instant) -> Changes {
        let mut changes = Changes::default();
        let mut touched: Vec<(NodeKind, String)> = Vec::new();
        for ev in events {
            let agent_path = match &ev {
                NodeEvent::Deleted { path }
                | NodeEvent::Present { path, .. }
                | NodeEvent::DataChanged { path, .. } => self.agent_worker(path),
            };
            if let Some(worker) = agent_path {
                self.agent_event(worker, ev, now, &mut changes);
                continue;
            }
            self.server_event(ev, now, &mut changes, &mut touched);
        }
        if touched.is_empty() {
            return changes;
        }
        touched.sort();
        touched.dedup();
        for (kind, host) in touched {
            self.refresh_host(kind, &host, now, &mut changes);
        }
        changes.publish = true;
        changes
    }

    /// Records a full reading of DS's master-failover locks at `now`: holders
    /// per master (a host, or [`crate::view::ANY_MASTER`]), every lock known
    /// before and missing here at none. An adapter reads them with the
    /// listing that ends a gap and again on every change it sees, so a lock
    /// taken or released while the daemon could not see is settled by that
    /// listing; the view is invalid meanwhile, which blocks every action.
    pub fn apply_failover_locks(
        &mut self,
        holders: &HashMap<String, usize>,
        now: Instant,
    ) -> Changes {
        let before = self.view.failover_locks.clone();
        let known: Vec<String> = before.keys().cloned().collect();
        for key in known {
            if !holders.contains_key(&key) {
                self.view.observe_failover_lock(&key, 0, now);
            }
        }
        for (key, n) in holders {
            self.view.observe_failover_lock(key, *n, now);
        }
        Changes {
            publish: self.view.failover_locks != before,
            ..Changes::default()
        }
    }

    /// Forgets losses older than [`LOST_KEEP`], so the view stays bounded.
    pub fn prune_lost(&mut self, now: Instant) -> Changes {
        let count = |v: &RegistryView| v.lost_workers.len() + v.lost_masters.len();
        let before = count(&self.view);
        self.view.prune_lost(now, LOST_KEEP);
        let pruned = count(&self.view) != before;
        // A lock released this long ago is past any settle period.
        let locks = self.view.failover_locks.len();
        self.view
            .failover_locks
            .retain(|_, l| l.holders > 0 || l.released_at.is_some_and(|r| now - r <= LOST_KEEP));
        Changes {
            publish: pruned || self.view.failover_locks.len() != locks,
            membership: pruned,
            ..Changes::default()
        }
    }
}

#[cfg(test)]
mod tests;
