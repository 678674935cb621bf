//! Where DS servers sit in the registry (SPEC §2, reference §3), what a path
//! under the DS root stands for, and which lines what was seen is consistent
//! with. The paths are the same in every registry DS ships: ZooKeeper nodes,
//! etcd keys under the namespace and JDBC registry rows all spell
//! `/nodes/worker/<addr>` and so on, so this is shared by every adapter.

use crate::view::ANY_MASTER;
use crate::{host, DsLine, HeartbeatFormat, NodeKind, RegistryLayout};

/// Which layouts an adapter reads: every one (auto-detection), or only the
/// layout of an explicitly configured line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutMode {
    Auto,
    Fixed(RegistryLayout),
}

impl LayoutMode {
    /// An explicit line fixes the layout; `None` detects it.
    pub fn for_line(line: Option<DsLine>) -> Self {
        match line {
            Some(l) => LayoutMode::Fixed(l.layout()),
            None => LayoutMode::Auto,
        }
    }

    /// Whether 1.2's `/workers` and `/masters` are read.
    pub fn legacy_allowed(self) -> bool {
        matches!(
            self,
            LayoutMode::Auto | LayoutMode::Fixed(RegistryLayout::Legacy)
        )
    }

    /// Whether `/nodes/master` and `/nodes/worker` are read.
    pub fn nodes_allowed(self) -> bool {
        !matches!(self, LayoutMode::Fixed(RegistryLayout::Legacy))
    }

    /// The directories (relative to the root) under which every server node
    /// of the mode sits: what an adapter watches.
    pub fn server_dirs(self) -> &'static [&'static str] {
        match self {
            LayoutMode::Auto => &["/nodes", "/workers", "/masters"],
            LayoutMode::Fixed(RegistryLayout::Legacy) => &["/workers", "/masters"],
            LayoutMode::Fixed(_) => &["/nodes"],
        }
    }
}

/// What a path under the root stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeClass {
    /// A server's node.
    Server(NodeKey),
    /// A worker group directory (or, in auto mode, something that may be one).
    Group,
    Ignore,
}

/// Who a server node stands for, as far as its path tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeKey {
    pub kind: NodeKind,
    /// Normalised last path segment.
    pub host: String,
    /// The worker group directory on grouped layouts.
    pub group: Option<String>,
    /// The layout the path proves; None for `/nodes/master/*`, which the
    /// grouped and flat layouts share.
    pub layout: Option<RegistryLayout>,
}

/// Classifies a path relative to the root (`/nodes/worker/...`).
///
/// `ephemeral`: whether the node is ephemeral (ZooKeeper), bound to a lease
/// (etcd) or of type EPHEMERAL (JDBC registry), when known. In auto mode a
/// direct child of `/nodes/worker` is a worker (flat) if ephemeral, else a group.
///
/// Only `/nodes/master` and `/nodes/worker` (and 1.2's `/masters`, `/workers`)
/// hold servers. 3.3+ also keeps `/nodes/master-coordinator` (its data a
/// master's address), `/nodes/master-coordinator-lock`, the persistent
/// `/nodes/failover-finish-nodes/<host:port>-<startupTime>-<pid>` and the alert
/// server's nodes under `/nodes`: matching on the exact directory names keeps
/// them out of the view and out of layout detection.
pub fn classify(mode: LayoutMode, rel: &str, ephemeral: Option<bool>) -> NodeClass {
    let parts: Vec<&str> = rel.trim_start_matches('/').split('/').collect();
    let server = |kind, h: &str, group: Option<&str>, layout| {
        if h.trim().is_empty() {
            return NodeClass::Ignore;
        }
        NodeClass::Server(NodeKey {
            kind,
            host: host::from_node_path(h),
            group: group.map(str::to_string),
            layout,
        })
    };
    match parts.as_slice() {
        ["workers", h] if mode.legacy_allowed() => {
            server(NodeKind::Worker, h, None, Some(RegistryLayout::Legacy))
        }
        ["masters", h] if mode.legacy_allowed() => {
            server(NodeKind::Master, h, None, Some(RegistryLayout::Legacy))
        }
        ["nodes", "master", h] if mode.nodes_allowed() => server(NodeKind::Master, h, None, None),
        ["nodes", "worker", x] if mode.nodes_allowed() => match (mode, ephemeral) {
            (LayoutMode::Fixed(RegistryLayout::Grouped), _) => NodeClass::Group,
            (LayoutMode::Fixed(_), _) | (LayoutMode::Auto, Some(true)) => {
                server(NodeKind::Worker, x, None, Some(RegistryLayout::Flat))
            }
            (LayoutMode::Auto, _) => NodeClass::Group,
        },
        ["nodes", "worker", g, h]
            if mode.nodes_allowed() && mode != LayoutMode::Fixed(RegistryLayout::Flat) =>
        {
            server(NodeKind::Worker, h, Some(g), Some(RegistryLayout::Grouped))
        }
        _ => NodeClass::Ignore,
    }
}

/// Whether an event on `rel` can concern a server or a group directory,
/// whatever the node's ephemerality turns out to be: events on other paths
/// need not even be read.
pub fn may_concern_servers(mode: LayoutMode, rel: &str) -> bool {
    classify(mode, rel, None) != NodeClass::Ignore
        || classify(mode, rel, Some(true)) != NodeClass::Ignore
}

/// What the registry looks like, as far as it has been seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub layout: Option<RegistryLayout>,
    pub format: Option<HeartbeatFormat>,
    /// Lines consistent with what was seen; all 8 when nothing was seen, empty
    /// when layout and format contradict each other.
    pub lines: Vec<DsLine>,
}

impl Detected {
    /// The lines a layout and a heartbeat format allow; `only_2_0` when a
    /// 14-field CSV heartbeat was seen (only 2.0.6–2.0.9 wrote diskAvailable).
    pub fn from_evidence(
        layout: Option<RegistryLayout>,
        format: Option<HeartbeatFormat>,
        only_2_0: bool,
    ) -> Self {
        let lines = DsLine::ALL
            .into_iter()
            .filter(|l| match layout {
                Some(x) => l.layout() == x,
                None => true,
            })
            .filter(|l| match format {
                Some(f) => l.heartbeat_format() == f,
                None => true,
            })
            .filter(|l| !only_2_0 || *l == DsLine::V2_0)
            .collect();
        Detected {
            layout,
            format,
            lines,
        }
    }

    /// What an explicitly configured line stands for.
    pub fn explicit(line: DsLine) -> Self {
        Detected {
            layout: Some(line.layout()),
            format: Some(line.heartbeat_format()),
            lines: vec![line],
        }
    }

    /// Nothing seen: every line.
    pub fn unknown() -> Self {
        Detected::from_evidence(None, None, false)
    }
}

/// Evidence of the layout and heartbeat format, gathered over the server
/// nodes in sight.
#[derive(Debug, Clone, Default)]
pub struct LayoutEvidence {
    legacy: bool,
    grouped: bool,
    flat: bool,
    /// A 1.2 `/workers` or `/masters` directory exists (perhaps empty).
    legacy_dir: bool,
    /// How many nodes carry each format, in order of first sight.
    formats: Vec<(HeartbeatFormat, usize)>,
    /// A 14-field CSV heartbeat was seen.
    csv14: bool,
}

impl LayoutEvidence {
    pub fn legacy_dir(&mut self, exists: bool) {
        self.legacy_dir |= exists;
    }

    /// One server node: the layout its path proves, its heartbeat's format
    /// (None when unreadable), and whether that was 14-field CSV.
    pub fn node(
        &mut self,
        layout: Option<RegistryLayout>,
        format: Option<HeartbeatFormat>,
        csv14: bool,
    ) {
        match layout {
            Some(RegistryLayout::Legacy) => self.legacy = true,
            Some(RegistryLayout::Grouped) => self.grouped = true,
            Some(RegistryLayout::Flat) => self.flat = true,
            None => {}
        }
        if let Some(f) = format {
            match self.formats.iter_mut().find(|(x, _)| *x == f) {
                Some((_, n)) => *n += 1,
                None => self.formats.push((f, 1)),
            }
        }
        self.csv14 |= csv14;
    }

    /// The layout proven by any node (1.2's directories alone prove 1.2 when
    /// nothing else is there), and the format most nodes carry.
    pub fn detected(&self) -> Detected {
        let layout = if self.legacy || (self.legacy_dir && !self.grouped && !self.flat) {
            Some(RegistryLayout::Legacy)
        } else if self.grouped {
            Some(RegistryLayout::Grouped)
        } else if self.flat {
            Some(RegistryLayout::Flat)
        } else {
            None
        };
        let format = self.formats.iter().max_by_key(|(_, n)| *n).map(|(f, _)| *f);
        Detected::from_evidence(
            layout,
            format,
            self.csv14 && format == Some(HeartbeatFormat::CsvEpoch),
        )
    }
}

/// One directory under which DS takes its master-failover lock (SPEC §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverLockDir {
    /// Relative to the root, e.g. `/lock/failover/masters`.
    pub path: &'static str,
    /// The directory itself is a lock covering every master (1.2, 1.3,
    /// 2.0.0–2.0.1): its holders count for [`ANY_MASTER`].
    pub global: bool,
    /// Each child `<path>/<host>` is the lock of the master at `<host>`
    /// (2.0.2–3.2).
    pub per_host: bool,
}

/// Where a line's master-failover locks are; empty where none matters.
///
/// Verified against DS's source per tag: 1.2.1 and 1.3.0–1.3.9
/// `ZKMasterClient.removeZKNodePath` locks `getMasterFailoverLockPath()` =
/// `<root>/lock/failover/masters`, one lock for every master (the start-up
/// pass fails over all masters under it too); 2.0.0 `RegistryClient` and 2.0.1
/// `MasterRegistryClient.getFailoverLockPath` still lock that one path, 2.0.2–2.0.9
/// lock `/lock/failover/masters/<host>`; 3.0.0–3.1.9
/// `MasterFailoverService.failoverMaster` likewise; 3.2.0–3.2.2 lock
/// `RegistryNodeType.MASTER_FAILOVER_LOCK` + `/<host>` = `/lock/master-failover/<host>`.
/// 3.3+'s update is conditional (SPEC §13), so its single
/// `/lock/master-failover` is not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailoverLockLayout {
    pub dirs: Vec<FailoverLockDir>,
}

const FAILOVER_MASTERS: &str = "/lock/failover/masters";
const MASTER_FAILOVER: &str = "/lock/master-failover";

/// The master-failover locks of `line` (see [`FailoverLockLayout`]).
pub fn failover_lock_paths(line: DsLine) -> FailoverLockLayout {
    let dir = |path, global, per_host| FailoverLockDir {
        path,
        global,
        per_host,
    };
    let dirs = match line {
        DsLine::V1_2 | DsLine::V1_3 => vec![dir(FAILOVER_MASTERS, true, false)],
        // One "2.0" line covers 2.0.0–2.0.1's single lock and 2.0.2+'s per host.
        DsLine::V2_0 => vec![dir(FAILOVER_MASTERS, true, true)],
        DsLine::V3_0 | DsLine::V3_1_0 | DsLine::V3_1 => vec![dir(FAILOVER_MASTERS, false, true)],
        DsLine::V3_2 => vec![dir(MASTER_FAILOVER, false, true)],
        DsLine::V3_3 => Vec::new(),
    };
    FailoverLockLayout { dirs }
}

impl FailoverLockLayout {
    /// Every lock any of `lines` may take, merged per directory: what an
    /// adapter reads when the line is detected rather than configured. The
    /// lines' locks never collide: a child of a per-host directory named like
    /// a lock node (3.3's own `/lock/master-failover` holders) is no host.
    pub fn for_lines(lines: &[DsLine]) -> Self {
        let mut out = FailoverLockLayout::default();
        for d in lines.iter().flat_map(|l| failover_lock_paths(*l).dirs) {
            match out.dirs.iter_mut().find(|x| x.path == d.path) {
                Some(x) => {
                    x.global |= d.global;
                    x.per_host |= d.per_host;
                }
                None => out.dirs.push(d),
            }
        }
        out
    }

    /// The locks of an explicit line, or of every line when it is detected.
    pub fn for_line(line: Option<DsLine>) -> Self {
        match line {
            Some(l) => failover_lock_paths(l),
            None => FailoverLockLayout::for_lines(&DsLine::ALL),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// Which master a lock path (relative to the root) is the failover lock
    /// of: a host, [`ANY_MASTER`] for a global lock, None for anything else.
    /// A JDBC registry lock row's key is such a path.
    pub fn lock_of(&self, rel: &str) -> Option<String> {
        let rel = rel.trim_end_matches('/');
        self.dirs.iter().find_map(|d| {
            let rest = rel.strip_prefix(d.path)?;
            if rest.is_empty() {
                return d.global.then(|| ANY_MASTER.to_string());
            }
            let host = rest.strip_prefix('/')?;
            (d.per_host && !host.trim().is_empty() && !host.contains('/') && !is_lock_node(host))
                .then(|| host::normalize(host).into_owned())
        })
    }

    /// Which master a holder entry counts for: an entry is one segment under
    /// its lock path (Curator's lock node, etcd's `<lock>/<lease hex>` key).
    pub fn holder_of(&self, rel: &str) -> Option<String> {
        let (lock, entry) = rel.rsplit_once('/')?;
        if entry.trim().is_empty() {
            return None;
        }
        self.lock_of(lock)
    }
}

/// Whether a ZooKeeper node name is one of Curator's lock nodes: a holder or
/// waiter of an `InterProcessMutex` (`_c_<uuid>-lock-<seq>`, or `lock-<seq>`
/// without protection), never a host directory.
pub fn is_lock_node(name: &str) -> bool {
    let Some(i) = name.rfind("lock-") else {
        return false;
    };
    let seq = &name[i + "lock-".len()..];
    let head = &name[..i];
    !seq.is_empty()
        && seq.bytes().all(|b| b.is_ascii_digit())
        && (head.is_empty() || (head.starts_with("_c_") && head.ends_with('-')))
}

#[cfg(test)]
mod tests;
