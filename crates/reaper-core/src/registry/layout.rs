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
mod tests {
    use super::*;

    const MODES: [LayoutMode; 4] = [
        LayoutMode::Auto,
        LayoutMode::Fixed(RegistryLayout::Flat),
        LayoutMode::Fixed(RegistryLayout::Grouped),
        LayoutMode::Fixed(RegistryLayout::Legacy),
    ];

    #[test]
    fn detection_narrows_lines() {
        assert_eq!(Detected::unknown().lines.len(), 8);
        let d = Detected::from_evidence(
            Some(RegistryLayout::Grouped),
            Some(HeartbeatFormat::CsvEpoch),
            false,
        );
        assert_eq!(d.lines, vec![DsLine::V2_0, DsLine::V3_0, DsLine::V3_1_0]);
        let d = Detected::from_evidence(
            Some(RegistryLayout::Grouped),
            Some(HeartbeatFormat::CsvEpoch),
            true,
        );
        assert_eq!(d.lines, vec![DsLine::V2_0]);
        let d = Detected::from_evidence(
            Some(RegistryLayout::Flat),
            Some(HeartbeatFormat::Json32),
            false,
        );
        assert_eq!(d.lines, vec![DsLine::V3_2, DsLine::V3_3]);
        // contradictory evidence: no line fits
        let d = Detected::from_evidence(
            Some(RegistryLayout::Legacy),
            Some(HeartbeatFormat::Json31),
            false,
        );
        assert!(d.lines.is_empty());
        assert_eq!(Detected::explicit(DsLine::V1_2).lines, vec![DsLine::V1_2]);
    }

    #[test]
    fn evidence() {
        let mut e = LayoutEvidence::default();
        assert_eq!(e.detected(), Detected::unknown());
        // an empty 1.2 directory proves 1.2 while nothing else is there
        e.legacy_dir(true);
        assert_eq!(e.detected().lines, vec![DsLine::V1_2]);
        e.node(Some(RegistryLayout::Grouped), None, false);
        assert_eq!(e.detected().layout, Some(RegistryLayout::Grouped));
        // the format most nodes carry; 14 CSV fields narrow to 2.0
        e.node(None, Some(HeartbeatFormat::CsvEpoch), true);
        e.node(None, Some(HeartbeatFormat::CsvEpoch), false);
        e.node(None, Some(HeartbeatFormat::Csv10), false);
        assert_eq!(e.detected().format, Some(HeartbeatFormat::CsvEpoch));
        assert_eq!(e.detected().lines, vec![DsLine::V2_0]);
        // a 1.2 node wins over everything
        e.node(Some(RegistryLayout::Legacy), None, false);
        assert_eq!(e.detected().layout, Some(RegistryLayout::Legacy));
    }

    #[test]
    fn modes() {
        assert_eq!(LayoutMode::for_line(None), LayoutMode::Auto);
        assert_eq!(
            LayoutMode::for_line(Some(DsLine::V1_3)),
            LayoutMode::Fixed(RegistryLayout::Grouped)
        );
        assert_eq!(
            LayoutMode::Fixed(RegistryLayout::Legacy).server_dirs(),
            &["/workers", "/masters"]
        );
        assert!(!LayoutMode::Fixed(RegistryLayout::Flat).legacy_allowed());
        assert!(!LayoutMode::Fixed(RegistryLayout::Legacy).nodes_allowed());
    }

    #[test]
    fn non_server_nodes_of_3_3_are_ignored() {
        let paths = [
            "/nodes/master-coordinator",
            "/nodes/master-coordinator-lock",
            "/nodes/master-coordinator-lock/_c_0b6d7c1e-lock-0000000001",
            "/nodes/failover-finish-nodes",
            "/nodes/failover-finish-nodes/10.0.0.5:5678-1736490000000-12345",
            "/nodes/failover-finish-nodes/10.0.0.9:1234-1736490000000-23456",
            "/nodes/alert-server",
            "/nodes/alert-server/10.0.0.7:50052",
            "/nodes/alert-server-ha-leader",
            "/nodes",
            "/nodes/master",
            "/nodes/worker",
        ];
        for mode in MODES {
            for path in paths {
                for eph in [None, Some(true), Some(false)] {
                    assert_eq!(
                        classify(mode, path, eph),
                        NodeClass::Ignore,
                        "{mode:?} {path} ephemeral={eph:?}"
                    );
                }
                assert!(!may_concern_servers(mode, path), "{mode:?} {path}");
            }
        }
        // the servers next to them still count
        assert!(matches!(
            classify(LayoutMode::Auto, "/nodes/master/10.0.0.5:5678", Some(true)),
            NodeClass::Server(NodeKey {
                kind: NodeKind::Master,
                ..
            })
        ));
        assert!(matches!(
            classify(
                LayoutMode::Auto,
                "/nodes/worker/worker-a.example:1234",
                Some(true)
            ),
            NodeClass::Server(NodeKey {
                kind: NodeKind::Worker,
                layout: Some(RegistryLayout::Flat),
                ..
            })
        ));
    }

    #[test]
    fn classification() {
        let auto = LayoutMode::Auto;
        let w = |h: &str, g: Option<&str>, l| {
            NodeClass::Server(NodeKey {
                kind: NodeKind::Worker,
                host: h.to_string(),
                group: g.map(str::to_string),
                layout: Some(l),
            })
        };
        assert_eq!(
            classify(auto, "/workers/10.0.0.5", None),
            w("10.0.0.5", None, RegistryLayout::Legacy)
        );
        assert_eq!(
            classify(auto, "/nodes/worker/default/10.0.0.5:1234", None),
            w("10.0.0.5:1234", Some("default"), RegistryLayout::Grouped)
        );
        assert_eq!(
            classify(auto, "/nodes/worker/10.0.0.5:1234", Some(true)),
            w("10.0.0.5:1234", None, RegistryLayout::Flat)
        );
        assert_eq!(
            classify(auto, "/nodes/worker/default", Some(false)),
            NodeClass::Group
        );
        assert!(may_concern_servers(auto, "/nodes/worker/default"));
        assert_eq!(classify(auto, "/lock/masters", None), NodeClass::Ignore);
        assert_eq!(classify(auto, "/workers/ ", None), NodeClass::Ignore);
        let legacy = LayoutMode::Fixed(RegistryLayout::Legacy);
        assert_eq!(
            classify(legacy, "/nodes/master/10.0.0.5:5678", None),
            NodeClass::Ignore
        );
        let flat = LayoutMode::Fixed(RegistryLayout::Flat);
        assert_eq!(classify(flat, "/nodes/worker/a/b", None), NodeClass::Ignore);
        assert_eq!(
            classify(flat, "/nodes/worker/Host:1", None),
            w("host:1", None, RegistryLayout::Flat)
        );
        let grouped = LayoutMode::Fixed(RegistryLayout::Grouped);
        assert_eq!(
            classify(grouped, "/nodes/worker/default", Some(true)),
            NodeClass::Group
        );
        assert!(matches!(
            classify(grouped, "/nodes/master/10.0.0.5:5678", None),
            NodeClass::Server(NodeKey {
                kind: NodeKind::Master,
                ..
            })
        ));
    }
    #[test]
    fn failover_lock_paths_per_line() {
        let dirs = |l| {
            failover_lock_paths(l)
                .dirs
                .iter()
                .map(|d| (d.path, d.global, d.per_host))
                .collect::<Vec<_>>()
        };
        let m = "/lock/failover/masters";
        assert_eq!(dirs(DsLine::V1_2), vec![(m, true, false)]);
        assert_eq!(dirs(DsLine::V1_3), vec![(m, true, false)]);
        assert_eq!(dirs(DsLine::V2_0), vec![(m, true, true)]);
        for l in [DsLine::V3_0, DsLine::V3_1_0, DsLine::V3_1] {
            assert_eq!(dirs(l), vec![(m, false, true)], "{l}");
        }
        assert_eq!(
            dirs(DsLine::V3_2),
            vec![("/lock/master-failover", false, true)]
        );
        assert!(failover_lock_paths(DsLine::V3_3).is_empty());
        let all = FailoverLockLayout::for_line(None);
        assert_eq!(
            all.dirs
                .iter()
                .map(|d| (d.path, d.global, d.per_host))
                .collect::<Vec<_>>(),
            vec![(m, true, true), ("/lock/master-failover", false, true)]
        );
        assert_eq!(
            FailoverLockLayout::for_line(Some(DsLine::V3_2)),
            failover_lock_paths(DsLine::V3_2)
        );
    }

    #[test]
    fn failover_lock_of_a_path() {
        let l13 = failover_lock_paths(DsLine::V1_3);
        assert_eq!(
            l13.lock_of("/lock/failover/masters").as_deref(),
            Some(ANY_MASTER)
        );
        assert_eq!(l13.lock_of("/lock/failover/masters/10.0.0.5:5678"), None);
        let l31 = failover_lock_paths(DsLine::V3_1);
        assert_eq!(l31.lock_of("/lock/failover/masters"), None);
        assert_eq!(
            l31.lock_of("/lock/failover/masters/10.0.0.5:5678")
                .as_deref(),
            Some("10.0.0.5:5678")
        );
        assert_eq!(l31.lock_of("/lock/master-failover/10.0.0.5:5678"), None);
        assert_eq!(l31.lock_of("/lock/failover/masters/a/b"), None);
        assert_eq!(l31.lock_of("/lock/failover/masters/ "), None);
        assert_eq!(l31.lock_of("/lock/failover/mastersX"), None);
        assert_eq!(l31.lock_of("/lock/failover/workers/10.0.0.5:1234"), None);
        let l32 = failover_lock_paths(DsLine::V3_2);
        assert_eq!(
            l32.lock_of("/lock/master-failover/ 10.0.0.5:5678")
                .as_deref(),
            Some("10.0.0.5:5678")
        );
        // 3.3's global lock under the same directory names no host
        assert_eq!(
            l32.lock_of(
                "/lock/master-failover/_c_1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901-lock-0000000003"
            ),
            None
        );
        assert!(failover_lock_paths(DsLine::V3_3)
            .lock_of("/lock/master-failover")
            .is_none());
        // holders: Curator's nodes and etcd's lease keys one level down
        let l20 = failover_lock_paths(DsLine::V2_0);
        assert_eq!(
            l20.holder_of("/lock/failover/masters/_c_ab-lock-0000000000")
                .as_deref(),
            Some(ANY_MASTER)
        );
        assert_eq!(
            l20.holder_of("/lock/failover/masters/10.0.0.5:5678/_c_ab-lock-0000000000")
                .as_deref(),
            Some("10.0.0.5:5678")
        );
        assert_eq!(
            l32.holder_of("/lock/master-failover/10.0.0.5:5678/694d7f3a2b1c0e05")
                .as_deref(),
            Some("10.0.0.5:5678")
        );
        assert_eq!(l32.holder_of("/lock/master-failover/10.0.0.5:5678/"), None);
        assert_eq!(l32.holder_of("garbage"), None);
        assert_eq!(l32.holder_of(""), None);
    }

    #[test]
    fn curator_lock_nodes() {
        assert!(is_lock_node(
            "_c_1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901-lock-0000000000"
        ));
        assert!(is_lock_node("lock-0000000007"));
        for name in [
            "10.0.0.5:5678",
            "lock-",
            "lock-12a",
            "x-lock-0000000001",
            "_c_abc-lock-",
            "",
            "master-lock-host:1",
        ] {
            assert!(!is_lock_node(name), "{name}");
        }
    }
}
