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
