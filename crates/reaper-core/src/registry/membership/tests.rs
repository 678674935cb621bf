use super::*;
use crate::{DsLine, NodeInfo, RegistryLayout};
use chrono::TimeZone;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

fn utc() -> Zone {
    "UTC".parse().unwrap()
}

fn auto() -> Membership {
    Membership::new(LayoutMode::Auto, utc(), t(0), "connecting")
}

/// A 3.2+ heartbeat: startup and report at t(startup), t(report), and its host:port.
fn json(startup: i64, report: i64, addr: Option<(&str, u16)>) -> Vec<u8> {
    let ms = |s: i64| t(s).timestamp_millis();
    let addr = addr
        .map(|(h, p)| format!(r#","host":"{h}","port":{p}"#))
        .unwrap_or_default();
    format!(
        r#"{{"startupTime":{},"reportTime":{},"serverStatus":"NORMAL"{addr}}}"#,
        ms(startup),
        ms(report)
    )
    .into_bytes()
}

/// A 2.0/3.0 heartbeat (13 CSV fields, epoch ms).
fn csv13(startup: i64, report: i64) -> Vec<u8> {
    let ms = |s: i64| t(s).timestamp_millis();
    format!(
        "0.1,0.6,1.2,12.5,32.0,0.3,{},{},0,123,100,100,0",
        ms(startup),
        ms(report)
    )
    .into_bytes()
}

fn node(path: &str, data: Vec<u8>) -> ListedNode {
    ListedNode {
        path: path.to_string(),
        data,
        ephemeral: true,
    }
}

fn listing(nodes: Vec<ListedNode>) -> Listing {
    Listing {
        nodes,
        legacy_dir: false,
    }
}

fn present(path: &str, data: Vec<u8>) -> NodeEvent {
    NodeEvent::Present {
        path: path.to_string(),
        data,
        ephemeral: true,
    }
}

fn deleted(path: &str) -> NodeEvent {
    NodeEvent::Deleted {
        path: path.to_string(),
    }
}

fn changed(path: &str, data: Vec<u8>) -> NodeEvent {
    NodeEvent::DataChanged {
        path: path.to_string(),
        data,
    }
}

fn worker<'a>(m: &'a Membership, h: &str) -> &'a NodeInfo {
    m.view()
        .live(NodeKind::Worker, h)
        .unwrap_or_else(|| panic!("{h} not live: {:#?}", m.view()))
}

const W1: &str = "/nodes/worker/10.0.0.1:1234";
const W2: &str = "/nodes/worker/10.0.0.2:1234";
const M1: &str = "/nodes/master/10.0.0.5:5678";

#[test]
fn a_listing_makes_the_view_valid_from_its_time() {
    let mut m = auto();
    assert!(!m.view().is_valid());
    let c = m.apply_listing(
        listing(vec![
            node(W1, json(1, 9, None)),
            node(M1, json(1, 9, None)),
            node("/nodes/alert-server/10.0.0.7:50052", json(1, 9, None)),
        ]),
        t(10),
    );
    assert!(c.publish);
    assert_eq!(m.view().valid_since(), Some(t(10)));
    assert_eq!(m.view().workers.len(), 1);
    assert_eq!(m.view().masters.len(), 1);
    let w = worker(&m, "10.0.0.1:1234");
    assert_eq!(
        (w.seen_at, w.startup_time, w.report_time),
        (t(10), Some(t(1)), Some(t(9)))
    );
    assert_eq!(w.status.as_deref(), Some("NORMAL"));
    assert!(c.notes.contains(&Note::Listed {
        workers: 1,
        masters: 1,
        after_gap: true
    }));
    assert!(c.notes.contains(&Note::Present {
        kind: NodeKind::Master,
        host: "10.0.0.5:5678".into()
    }));
    let mut read = c.read.clone();
    read.sort();
    assert_eq!(read, vec![M1.to_string(), W1.to_string()]);
    assert_eq!(m.detected().lines, vec![DsLine::V3_2, DsLine::V3_3]);
}

#[test]
fn a_loss_is_stamped_at_arrival_and_cleared_by_a_return() {
    let mut m = auto();
    m.apply_listing(listing(vec![node(W1, json(1, 9, None))]), t(10));
    let c = m.apply([deleted(W1)], t(20));
    assert!(c.publish);
    assert_eq!(
        c.notes,
        vec![Note::Gone {
            kind: NodeKind::Worker,
            host: "10.0.0.1:1234".into()
        }]
    );
    assert_eq!(
        m.view().lost_at(NodeKind::Worker, "10.0.0.1:1234"),
        Some(t(20))
    );
    assert!(m.view().live(NodeKind::Worker, "10.0.0.1:1234").is_none());
    // a deletion of something unknown changes nothing
    assert_eq!(m.apply([deleted(W1)], t(21)), Changes::default());
    // back: live again, seen at arrival, the loss gone
    m.apply([present(W1, json(25, 25, None))], t(26));
    assert_eq!(worker(&m, "10.0.0.1:1234").seen_at, t(26));
    assert_eq!(m.view().lost_at(NodeKind::Worker, "10.0.0.1:1234"), None);
    // the validity itself is untouched by events
    assert_eq!(m.view().valid_since(), Some(t(10)));
}

#[test]
fn invalidation_keeps_the_first_since_and_ignores_a_repeated_reason() {
    let mut m = auto();
    // the reason the view was created with: nothing to publish
    assert_eq!(
        m.invalidate(Gap::Session, "connecting", t(1)),
        Changes::default()
    );
    let c = m.invalidate(Gap::Session, "connecting: refused", t(2));
    assert!(c.publish);
    assert_eq!(
        m.view().state,
        ViewState::Invalid {
            since: t(0),
            reason: "connecting: refused".into()
        }
    );
    m.apply_listing(listing(vec![]), t(5));
    let c = m.invalidate(Gap::Connection, "disconnected", t(7));
    assert_eq!(
        c.notes,
        vec![Note::Invalid {
            reason: "disconnected".into()
        }]
    );
    assert_eq!(
        m.view().state,
        ViewState::Invalid {
            since: t(7),
            reason: "disconnected".into()
        }
    );
}

#[test]
fn a_gap_of_the_connection_keeps_seen_at_and_restarts_absence_clocks() {
    let mut m = auto();
    m.apply_listing(
        listing(vec![
            node(W1, json(1, 9, None)),
            node(W2, json(1, 9, None)),
            node(M1, json(1, 9, None)),
        ]),
        t(10),
    );
    m.apply([deleted(M1)], t(20)); // lost before the gap
    m.invalidate(Gap::Connection, "disconnected", t(30));
    assert!(!m.view().is_valid());
    // W2 went while the daemon could not see; a new worker came
    let w3 = "/nodes/worker/10.0.0.3:1234";
    m.apply_listing(
        listing(vec![
            node(W1, json(1, 40, None)),
            node(w3, json(35, 40, None)),
        ]),
        t(50),
    );
    let v = m.view();
    assert_eq!(v.valid_since(), Some(t(50)));
    // same session: W1 was seen at t(10) and still is
    assert_eq!(worker(&m, "10.0.0.1:1234").seen_at, t(10));
    assert_eq!(worker(&m, "10.0.0.3:1234").seen_at, t(50));
    assert_eq!(worker(&m, "10.0.0.1:1234").report_time, Some(t(40)));
    // gone during the gap: lost as of the listing; lost before it: restarted there
    assert_eq!(v.lost_at(NodeKind::Worker, "10.0.0.2:1234"), Some(t(50)));
    assert_eq!(v.lost_at(NodeKind::Master, "10.0.0.5:5678"), Some(t(50)));
}

#[test]
fn a_new_session_sees_every_node_anew() {
    let mut m = auto();
    m.apply_listing(listing(vec![node(W1, json(1, 9, None))]), t(10));
    m.invalidate(Gap::Session, "ZooKeeper session expired", t(20));
    // a failed step on the new session does not make it an old one
    m.invalidate(Gap::Connection, "listing the registry: timeout", t(21));
    m.apply_listing(listing(vec![node(W1, json(1, 29, None))]), t(30));
    assert_eq!(worker(&m, "10.0.0.1:1234").seen_at, t(30));
    assert_eq!(m.view().valid_since(), Some(t(30)));
    // a later gap of that session keeps it
    m.invalidate(Gap::Connection, "disconnected", t(40));
    m.apply_listing(listing(vec![node(W1, json(1, 49, None))]), t(50));
    assert_eq!(worker(&m, "10.0.0.1:1234").seen_at, t(30));
}

#[test]
fn a_polled_listing_without_a_gap_stamps_losses_and_keeps_validity() {
    // how a polling adapter (the JDBC registry) uses the machine
    let mut m = auto();
    m.apply_listing(
        listing(vec![node(W1, json(1, 9, None)), node(W2, json(1, 9, None))]),
        t(10),
    );
    m.apply_listing(listing(vec![node(W1, json(1, 19, None))]), t(20));
    m.apply_listing(listing(vec![node(W1, json(1, 29, None))]), t(30));
    let v = m.view();
    assert_eq!(v.valid_since(), Some(t(10)));
    assert_eq!(v.lost_at(NodeKind::Worker, "10.0.0.2:1234"), Some(t(20)));
    assert_eq!(worker(&m, "10.0.0.1:1234").seen_at, t(10));
    assert_eq!(worker(&m, "10.0.0.1:1234").report_time, Some(t(29)));
}

#[test]
fn a_grouped_worker_is_one_host_over_its_groups_with_the_freshest_heartbeat() {
    let mut m = auto();
    let a = "/nodes/worker/default/10.0.0.1:1234";
    let b = "/nodes/worker/gpu/10.0.0.1:1234";
    m.apply_listing(
        listing(vec![node(a, csv13(1, 50)), node(b, csv13(2, 40))]),
        t(60),
    );
    let w = worker(&m, "10.0.0.1:1234");
    assert_eq!(w.groups, vec!["default".to_string(), "gpu".to_string()]);
    assert_eq!((w.startup_time, w.report_time), (Some(t(1)), Some(t(50))));
    assert_eq!(m.view().workers.len(), 1);
    assert_eq!(
        m.detected().lines,
        vec![DsLine::V2_0, DsLine::V3_0, DsLine::V3_1_0]
    );
    // the other group's heartbeat becomes the freshest
    let c = m.apply([changed(b, csv13(2, 70))], t(71));
    assert_eq!(c.read, vec![b.to_string()]);
    assert_eq!(worker(&m, "10.0.0.1:1234").report_time, Some(t(70)));
    // one group goes: still live, one group left, no loss
    m.apply([deleted(a)], t(80));
    let w = worker(&m, "10.0.0.1:1234");
    assert_eq!(w.groups, vec!["gpu".to_string()]);
    assert_eq!(w.seen_at, t(60));
    assert_eq!(m.view().lost_at(NodeKind::Worker, "10.0.0.1:1234"), None);
    // the last one goes: lost
    m.apply([deleted(b)], t(90));
    assert_eq!(
        m.view().lost_at(NodeKind::Worker, "10.0.0.1:1234"),
        Some(t(90))
    );
    // detection is from the nodes in sight: nothing is left
    assert_eq!(m.detected(), Detected::unknown());
}

#[test]
fn events_of_one_batch_touch_each_host_once() {
    let mut m = auto();
    let a = "/nodes/worker/default/10.0.0.1:1234";
    let b = "/nodes/worker/gpu/10.0.0.1:1234";
    m.apply_listing(listing(vec![node(a, csv13(1, 5))]), t(10));
    // its node moves from one group to another in one batch: never lost
    let c = m.apply([deleted(a), present(b, csv13(1, 15))], t(20));
    assert!(c.notes.is_empty(), "{:?}", c.notes);
    assert_eq!(m.view().lost_at(NodeKind::Worker, "10.0.0.1:1234"), None);
    let w = worker(&m, "10.0.0.1:1234");
    assert_eq!(
        (w.seen_at, w.groups.clone()),
        (t(20), vec!["gpu".to_string()])
    );
}

#[test]
fn unreadable_data_keeps_the_node_present_and_its_address_and_is_reported_once() {
    let mut m = auto();
    let w = "/nodes/worker/worker-a.example:1234";
    m.apply_listing(
        listing(vec![node(w, json(1, 9, Some(("10.0.0.9", 1234))))]),
        t(10),
    );
    assert!(m.view().live(NodeKind::Worker, "10.0.0.9:1234").is_some());
    let c = m.apply([changed(w, b"garbage".to_vec())], t(20));
    assert!(matches!(
        c.notes.as_slice(),
        [Note::Unreadable { host, error: HeartbeatError::FieldCount(1) }] if host == "worker-a.example:1234"
    ));
    let n = worker(&m, "worker-a.example:1234");
    assert_eq!(
        (n.startup_time, n.report_time, n.status.clone()),
        (None, None, None)
    );
    // the task rows naming the heartbeat's address still match it
    assert_eq!(n.address.as_deref(), Some("10.0.0.9:1234"));
    assert!(m.view().live(NodeKind::Worker, "10.0.0.9:1234").is_some());
    // reported once per host
    let c = m.apply([changed(w, b"{}".to_vec())], t(30));
    assert!(c.notes.is_empty());
    // readable again
    m.apply([changed(w, json(1, 35, Some(("10.0.0.9", 1234))))], t(36));
    assert_eq!(worker(&m, "10.0.0.9:1234").report_time, Some(t(35)));
}

#[test]
fn a_1_3_node_with_empty_data_before_its_first_heartbeat_is_present() {
    let mut m = Membership::new(
        LayoutMode::for_line(Some(DsLine::V1_3)),
        utc(),
        t(0),
        "connecting",
    );
    let p = "/nodes/worker/default/10.0.0.1:1234";
    m.apply_listing(listing(vec![]), t(1));
    let c = m.apply([present(p, Vec::new())], t(2));
    assert!(matches!(
        c.notes.as_slice(),
        [
            Note::Unreadable {
                error: HeartbeatError::Empty,
                ..
            },
            Note::Present { .. }
        ]
    ));
    let w = worker(&m, "10.0.0.1:1234");
    assert_eq!((w.startup_time, w.seen_at), (None, t(2)));
    assert_eq!(w.groups, vec!["default".to_string()]);
    let hb = b"0.1,0.6,1.2,12.5,32.0,0.3,2023-11-14 22:13:20,2023-11-14 22:13:25,0,1";
    m.apply([changed(p, hb.to_vec())], t(10));
    let w = worker(&m, "10.0.0.1:1234");
    assert_eq!((w.startup_time, w.report_time), (Some(t(0)), Some(t(5))));
    assert_eq!(w.seen_at, t(2));
}

#[test]
fn changes_to_unknown_or_non_server_paths_do_nothing() {
    let mut m = auto();
    m.apply_listing(listing(vec![]), t(1));
    assert_eq!(
        m.apply([changed(W1, json(1, 2, None))], t(2)),
        Changes::default()
    );
    // a persistent direct child of /nodes/worker is a group directory
    let group = NodeEvent::Present {
        path: "/nodes/worker/default".into(),
        data: Vec::new(),
        ephemeral: false,
    };
    assert_eq!(m.apply([group], t(3)), Changes::default());
    let coord = present("/nodes/master-coordinator", b"10.0.0.5:5678".to_vec());
    assert_eq!(m.apply([coord], t(4)), Changes::default());
    assert!(m.view().workers.is_empty() && m.view().masters.is_empty());
    assert!(!m.contains(W1));
}

#[test]
fn an_explicit_layout_reads_only_its_own_paths() {
    let mut m = Membership::new(
        LayoutMode::Fixed(RegistryLayout::Legacy),
        utc(),
        t(0),
        "connecting",
    );
    m.apply_listing(
        Listing {
            nodes: vec![
                node(
                    "/workers/10.0.0.1",
                    b"10.0.0.1,1,0.1,0.1,0.1,2023-11-14 22:13:20,2023-11-14 22:13:21".to_vec(),
                ),
                node(M1, json(1, 2, None)),
            ],
            legacy_dir: true,
        },
        t(5),
    );
    assert_eq!(m.view().workers.len(), 1);
    assert!(m.view().masters.is_empty());
    assert_eq!(m.detected().lines, vec![DsLine::V1_2]);
    // an empty 1.2 registry is still a 1.2 registry
    let mut m = auto();
    m.apply_listing(
        Listing {
            nodes: vec![],
            legacy_dir: true,
        },
        t(5),
    );
    assert_eq!(m.detected().layout, Some(RegistryLayout::Legacy));
}

#[test]
fn pruning_publishes_only_when_a_loss_is_forgotten() {
    let mut m = auto();
    m.apply_listing(listing(vec![node(W1, json(1, 9, None))]), t(10));
    m.apply([deleted(W1)], t(20));
    assert!(!m.prune_lost(t(20) + LOST_KEEP).publish);
    assert!(m.prune_lost(t(21) + LOST_KEEP).publish);
    assert!(m.view().lost_workers.is_empty());
}

// === a property over random histories ===

const HOSTS: usize = 4;
const GROUPS: usize = 2;

#[derive(Debug, Clone)]
enum Op {
    /// Worker h registers in group g.
    Up(usize, usize),
    /// Worker h's node in group g goes.
    Down(usize, usize),
    /// A new heartbeat (or unreadable data) on h's node in g.
    Beat(usize, usize, bool),
    /// The daemon loses sight; true: the session ends.
    GapStart(bool),
    /// A full listing.
    List,
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..HOSTS, 0..GROUPS).prop_map(|(h, g)| Op::Up(h, g)),
        3 => (0..HOSTS, 0..GROUPS).prop_map(|(h, g)| Op::Down(h, g)),
        3 => (0..HOSTS, 0..GROUPS, any::<bool>()).prop_map(|(h, g, ok)| Op::Beat(h, g, ok)),
        1 => any::<bool>().prop_map(Op::GapStart),
        1 => Just(Op::List),
    ]
}

fn path(h: usize, g: usize) -> String {
    format!("/nodes/worker/g{g}/w{h}:1234")
}

fn host(h: usize) -> String {
    format!("w{h}:1234")
}

/// What the view must say, by the SPEC's rules.
#[derive(Default)]
struct Model {
    /// Registered nodes and their report time (None: unreadable data).
    truth: BTreeMap<(usize, usize), Option<i64>>,
    in_gap: bool,
    /// Hosts the daemon knows to be live, and when each loss was stamped.
    live: BTreeSet<usize>,
    lost: BTreeMap<usize, i64>,
    /// When the current session's first listing happened.
    session_listed: i64,
    new_session: bool,
}

impl Model {
    fn truth_live(&self) -> BTreeSet<usize> {
        self.truth.keys().map(|(h, _)| *h).collect()
    }
}

fn data(report: Option<i64>) -> Vec<u8> {
    match report {
        Some(r) => csv13(-100, r),
        None => Vec::new(),
    }
}

/// What a sweeper reacts to: validity, live servers and losses.
type MembershipOf = (
    Option<Instant>,
    BTreeSet<String>,
    BTreeSet<String>,
    BTreeMap<String, Instant>,
    BTreeMap<String, Instant>,
);

fn membership_of(v: &RegistryView) -> MembershipOf {
    (
        v.valid_since(),
        v.workers.keys().cloned().collect(),
        v.masters.keys().cloned().collect(),
        v.lost_workers
            .iter()
            .map(|(h, t)| (h.clone(), *t))
            .collect(),
        v.lost_masters
            .iter()
            .map(|(h, t)| (h.clone(), *t))
            .collect(),
    )
}

#[test]
fn heartbeat_data_alone_is_not_a_membership_change() {
    let mut m = auto();
    let c = m.apply_listing(
        listing(vec![node("/nodes/worker/10.0.0.1:1234", json(1, 2, None))]),
        t(3),
    );
    assert!(c.publish && c.membership);
    // a new report time, a new startup time (a restart DS sees in the data),
    // a new address: published, but no server came or went
    for data in [
        json(1, 12, None),
        json(20, 22, None),
        json(20, 32, Some(("10.9.9.9", 1234))),
    ] {
        let c = m.apply([changed("/nodes/worker/10.0.0.1:1234", data)], t(40));
        assert!(c.publish && !c.membership, "{c:?}");
    }
    assert_eq!(worker(&m, "10.0.0.1:1234").startup_time, Some(t(20)));
    // a server coming or going is
    let c = m.apply(
        [present("/nodes/worker/10.0.0.2:1234", json(1, 41, None))],
        t(41),
    );
    assert!(c.publish && c.membership);
    let c = m.apply([deleted("/nodes/worker/10.0.0.2:1234")], t(42));
    assert!(c.publish && c.membership);
    // and so is a gap
    let c = m.invalidate(Gap::Connection, "disconnected", t(43));
    assert!(c.publish && c.membership);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_view_follows_the_registry_by_the_rules(
        ops in proptest::collection::vec((arb_op(), 1i64..20), 1..80),
    ) {
        let mut m = auto();
        let mut x = Model { in_gap: true, new_session: true, ..Model::default() };
        let mut now = 0;
        for (op, dt) in ops {
            now += dt;
            let before = membership_of(m.view());
            let mut changes = Changes::default();
            match op {
                Op::Up(h, g) => {
                    if x.truth.contains_key(&(h, g)) {
                        continue;
                    }
                    x.truth.insert((h, g), Some(now));
                    if !x.in_gap {
                        changes = m.apply([present(&path(h, g), data(Some(now)))], t(now));
                        x.live.insert(h);
                        x.lost.remove(&h);
                    }
                }
                Op::Down(h, g) => {
                    if x.truth.remove(&(h, g)).is_none() {
                        continue;
                    }
                    if !x.in_gap {
                        changes = m.apply([deleted(&path(h, g))], t(now));
                        if !x.truth_live().contains(&h) {
                            x.live.remove(&h);
                            x.lost.insert(h, now);
                        }
                    }
                }
                Op::Beat(h, g, readable) => {
                    let Some(r) = x.truth.get_mut(&(h, g)) else { continue };
                    *r = readable.then_some(now);
                    if !x.in_gap {
                        changes = m.apply([changed(&path(h, g), data(*r))], t(now));
                    }
                }
                Op::GapStart(session) => {
                    changes = m.invalidate(
                        if session { Gap::Session } else { Gap::Connection },
                        format!("gap at {now}"),
                        t(now),
                    );
                    x.in_gap = true;
                    x.new_session |= session;
                }
                Op::List => {
                    let nodes = x.truth.iter()
                        .map(|((h, g), r)| node(&path(*h, *g), data(*r)))
                        .collect();
                    changes = m.apply_listing(listing(nodes), t(now));
                    let live = x.truth_live();
                    for h in x.live.difference(&live) {
                        x.lost.insert(*h, now);
                    }
                    for h in &live {
                        x.lost.remove(h);
                    }
                    if x.in_gap {
                        for at in x.lost.values_mut() {
                            *at = now;
                        }
                    }
                    if x.new_session {
                        x.session_listed = now;
                    }
                    x.live = live;
                    x.in_gap = false;
                    x.new_session = false;
                }
            }
            let v = m.view();
            // An adapter may hand out data-only changes lazily: whatever
            // changes validity, the live hosts or the losses says so.
            if membership_of(v) != before {
                prop_assert!(changes.membership, "membership changed unannounced: {:?}", changes);
            }
            if changes.membership || membership_of(v) != before {
                prop_assert!(changes.publish);
            }
            prop_assert_eq!(v.is_valid(), !x.in_gap);
            if x.in_gap {
                continue;
            }
            let live: BTreeSet<String> = v.workers.keys().cloned().collect();
            let want: BTreeSet<String> = x.live.iter().map(|h| host(*h)).collect();
            prop_assert_eq!(&live, &want);
            let lost: BTreeMap<String, Instant> = v.lost_workers.clone().into_iter().collect();
            let want: BTreeMap<String, Instant> =
                x.lost.iter().map(|(h, at)| (host(*h), t(*at))).collect();
            prop_assert_eq!(&lost, &want);
            for h in &x.live {
                let n = &v.workers[&host(*h)];
                let nodes: Vec<(usize, Option<i64>)> = x.truth.iter()
                    .filter(|((hh, _), _)| hh == h)
                    .map(|((_, g), r)| (*g, *r))
                    .collect();
                let groups: Vec<String> = nodes.iter().map(|(g, _)| format!("g{g}")).collect();
                prop_assert_eq!(&n.groups, &groups);
                // the freshest readable heartbeat wins
                let freshest = nodes.iter().filter_map(|(_, r)| *r).max().map(t);
                prop_assert_eq!(n.report_time, freshest);
                prop_assert!(n.seen_at >= t(x.session_listed) && n.seen_at <= t(now));
            }
        }
    }
}

fn agent_json(worker: &str, tasks: &[i64], unreadable: u64) -> Vec<u8> {
    crate::agent::AgentReport {
        tty_tasks: 0,
        app_id_sources: None,
        worker: worker.into(),
        agent_version: "test".into(),
        seq: 1,
        scan_started_at: t(0).timestamp_millis(),
        scan_ms: 3,
        exec_base: "/tmp/ds".into(),
        unreadable,
        orders: Vec::new(),
        blind: None,
        tasks: tasks
            .iter()
            .map(|&task_id| crate::agent::AgentTask {
                lineage: None,
                task_id,
                workflow_instance_id: 1,
                pids: vec![10],
                started_at: 0,
                processes: vec![],
                app_ids: vec![],
            })
            .collect(),
    }
    .to_json()
}

fn with_agents() -> Membership {
    Membership::new(LayoutMode::Auto, utc(), t(0), "connecting")
        .with_agents("ds-reaper/agents/", std::time::Duration::from_secs(35))
}

#[test]
fn agents_are_kept_from_listings_and_events_on_the_daemons_clock() {
    let mut m = with_agents();
    assert_eq!(m.agent_prefix(), Some("/ds-reaper/agents"));
    assert_eq!(
        m.agent_worker("/ds-reaper/agents/W1:1234").as_deref(),
        Some("w1:1234")
    );
    assert_eq!(m.agent_worker("/ds-reaper/agents"), None);
    assert_eq!(m.agent_worker("/nodes/worker/w1:1234"), None);
    m.apply_listing(
        listing(vec![
            node("/nodes/worker/w1:1234", json(0, 0, None)),
            node("/ds-reaper/agents/w1:1234", agent_json("w1:1234", &[7], 0)),
        ]),
        t(1),
    );
    let v = m.view();
    assert_eq!(v.workers.len(), 1, "an agent node is no server");
    let a = &v.agents["w1:1234"];
    assert_eq!((a.received_at, a.since), (t(1), t(1)));
    assert!(a.report.as_ref().unwrap().lists(7));
    // a rewrite is the agent's heartbeat
    let c = m.apply(
        [NodeEvent::DataChanged {
            path: "/ds-reaper/agents/w1:1234".into(),
            data: agent_json("w1:1234", &[], 0),
        }],
        t(11),
    );
    assert!(c.publish);
    let a = &m.view().agents["w1:1234"];
    assert_eq!((a.received_at, a.since), (t(11), t(1)));
    assert_eq!(a.listed_at.get(&7), Some(&t(1)));
    assert_eq!(a.history.len(), 2);
    // garbage: kept, not fresh, noted once
    let c = m.apply(
        [present("/ds-reaper/agents/w2:1234", b"{garbage".to_vec())],
        t(12),
    );
    assert!(matches!(&c.notes[..], [Note::AgentUnreadable { worker, .. }] if worker == "w2:1234"));
    assert!(m.view().agents["w2:1234"].report.is_none());
    // the node goes
    m.apply(
        [NodeEvent::Deleted {
            path: "/ds-reaper/agents/w2:1234".into(),
        }],
        t(13),
    );
    // kept for the hold of its last listings, never fresh again
    let gone = &m.view().agents["w2:1234"];
    assert_eq!(gone.gone_at, Some(t(13)));
    assert!(!gone.fresh(t(13), std::time::Duration::from_secs(60)));
}

#[test]
fn a_gap_restarts_an_agents_freshness() {
    let mut m = with_agents();
    let agent = || node("/ds-reaper/agents/w1:1234", agent_json("w1:1234", &[], 0));
    m.apply_listing(listing(vec![agent()]), t(1));
    m.apply(
        [NodeEvent::DataChanged {
            path: "/ds-reaper/agents/w1:1234".into(),
            data: agent_json("w1:1234", &[], 0),
        }],
        t(5),
    );
    assert_eq!(m.view().agents["w1:1234"].since, t(1));
    m.invalidate(Gap::Connection, "disconnected", t(6));
    m.apply_listing(listing(vec![agent()]), t(8));
    let a = &m.view().agents["w1:1234"];
    assert_eq!((a.since, a.received_at), (t(8), t(8)));
    assert_eq!(a.history.len(), 1, "history restarts with the streak");
    // gone during a gap: gone after the listing
    m.invalidate(Gap::Session, "expired", t(9));
    m.apply_listing(listing(vec![]), t(10));
    let a = &m.view().agents["w1:1234"];
    assert_eq!(a.gone_at, Some(t(10)));
    assert!(!a.fresh(t(10), std::time::Duration::from_secs(60)));
    // a gone agent's listings are forgotten once too old to matter
    m.prune_lost(t(10) + crate::agent::LISTED_KEEP + chrono::TimeDelta::seconds(1));
    assert!(m.view().agents.is_empty());
}

#[path = "agent_props.rs"]
mod agent_props;

#[test]
fn failover_locks_from_full_readings() {
    let mut m = auto();
    let settle = std::time::Duration::from_secs(30);
    let held = |pairs: &[(&str, usize)]| -> HashMap<String, usize> {
        pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    };
    let c = m.apply_failover_locks(&held(&[("10.0.0.5:5678", 2)]), t(10));
    assert!(c.publish);
    assert!(m
        .view()
        .ds_failover_in_progress("10.0.0.5:5678", t(11), settle));
    assert!(!m
        .view()
        .ds_failover_in_progress("10.0.0.9:5678", t(11), settle));
    // the same reading again changes nothing
    assert!(
        !m.apply_failover_locks(&held(&[("10.0.0.5:5678", 2)]), t(12))
            .publish
    );
    // gone from the reading: released now, settling for `settle`
    assert!(m.apply_failover_locks(&held(&[]), t(20)).publish);
    assert!(m
        .view()
        .ds_failover_in_progress("10.0.0.5:5678", t(49), settle));
    assert!(!m
        .view()
        .ds_failover_in_progress("10.0.0.5:5678", t(50), settle));
    // later readings keep the release time
    m.apply_failover_locks(&held(&[("10.0.0.5:5678", 0)]), t(30));
    assert_eq!(
        m.view().failover_locks["10.0.0.5:5678"].released_at,
        Some(t(20))
    );
    // 1.3's single lock covers every master
    m.apply_failover_locks(&held(&[(crate::view::ANY_MASTER, 1)]), t(60));
    assert!(m
        .view()
        .ds_failover_in_progress("10.0.0.9:5678", t(61), settle));
    // released locks are forgotten after LOST_KEEP
    m.apply_failover_locks(&held(&[]), t(70));
    assert!(
        m.prune_lost(t(70) + LOST_KEEP + chrono::TimeDelta::seconds(1))
            .publish
    );
    assert!(m.view().failover_locks.is_empty());
}
