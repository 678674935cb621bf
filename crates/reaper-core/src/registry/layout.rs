//! Where DS servers sit in the registry (SPEC §2, reference §3), what a path
//! under the DS root stands for, and which lines what was seen is consistent
//! with. The paths are the same in every registry DS ships: ZooKeeper nodes,
//! etcd keys under the namespace and JDBC registry rows all spell
//! `/nodes/worker/<addr>` and so on, so this is shared by every adapter.

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
}
