//! Registry contents nobody here wrote, through the membership every registry
//! adapter drives: arbitrary paths and data as listings and events, gaps in
//! between. No input panics, and the view's invariants hold.
#![no_main]
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use reaper_core::registry::membership::{Gap, ListedNode, Listing, Membership, NodeEvent};
use reaper_core::registry::LayoutMode;
use reaper_core::{DsLine, Zone};

#[derive(Debug, Arbitrary)]
enum Op {
    List(Vec<(u8, String, Vec<u8>, bool)>),
    Present(u8, String, Vec<u8>, bool),
    Changed(u8, String, Vec<u8>),
    Deleted(u8, String),
    Gap(bool),
    Wait(u16),
}

const DIRS: [&str; 8] = [
    "/nodes/worker/",
    "/nodes/worker/default/",
    "/nodes/master/",
    "/workers/",
    "/masters/",
    "/ds-reaper/agents/",
    "/nodes/master-coordinator/",
    "",
];

fn path(dir: u8, name: &str) -> String {
    format!("{}{name}", DIRS[dir as usize % DIRS.len()])
}

#[derive(Debug, Arbitrary)]
struct Input {
    line: Option<u8>,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let zone: Zone = "UTC".parse().expect("UTC");
    let line = input.line.map(|i| DsLine::ALL[i as usize % DsLine::ALL.len()]);
    let t0 = chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("instant");
    let mut now = t0;
    let mut m = Membership::new(LayoutMode::for_line(line), zone, now, "connecting")
        .with_agents("ds-reaper/agents", std::time::Duration::from_secs(35));
    for op in input.ops.into_iter().take(64) {
        match op {
            Op::List(nodes) => {
                let nodes = nodes
                    .into_iter()
                    .take(32)
                    .map(|(d, n, data, ephemeral)| ListedNode {
                        path: path(d, &n),
                        data,
                        ephemeral,
                    })
                    .collect();
                m.apply_listing(Listing { nodes, legacy_dir: false }, now);
            }
            Op::Present(d, n, data, ephemeral) => {
                m.apply([NodeEvent::Present { path: path(d, &n), data, ephemeral }], now);
            }
            Op::Changed(d, n, data) => {
                m.apply([NodeEvent::DataChanged { path: path(d, &n), data }], now);
            }
            Op::Deleted(d, n) => {
                m.apply([NodeEvent::Deleted { path: path(d, &n) }], now);
            }
            Op::Gap(session) => {
                let gap = if session { Gap::Session } else { Gap::Connection };
                m.invalidate(gap, "gap", now);
            }
            Op::Wait(s) => now += chrono::TimeDelta::seconds(i64::from(s)),
        }
        let v = m.view();
        for (host, _) in v.workers.iter() {
            assert!(!v.lost_workers.contains_key(host), "live and lost: {host}");
        }
        for (host, _) in v.masters.iter() {
            assert!(!v.lost_masters.contains_key(host), "live and lost: {host}");
        }
        if let Some(since) = v.valid_since() {
            assert!(since >= t0 && since <= now);
        }
    }
});
