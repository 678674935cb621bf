//! The ZooKeeper adapter's test settings; the helpers every crate's tests
//! share (services, roots, waits) are reaper-test-support's.
#![allow(dead_code, unused_imports)]

use reaper_core::{DsLine, RegistryView};
use reaper_zk::{ZkRegistry, ZkSettings};
use std::sync::Arc;
use std::time::Duration;

pub use reaper_test_support::{private_zk_available, shared_zk, WAIT};

/// A root of its own for each test: `/t-<unique>/dolphinscheduler`.
pub fn unique_root() -> String {
    reaper_test_support::unique_root("t")
}

pub fn settings(connect: &str, root: &str, line: Option<DsLine>) -> ZkSettings {
    ZkSettings {
        connect: connect.to_string(),
        root: root.to_string(),
        session_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(5),
        line,
        zone: utc(),
        agents: None,
    }
}

pub use reaper_test_support::utc;

pub fn sim_opts() -> ds_sim::zk::SimOptions {
    ds_sim::zk::SimOptions {
        interval: Duration::from_millis(500),
        zone: utc(),
        session_timeout: Duration::from_secs(10),
    }
}

/// Waits until `pred` holds for the registry's view; panics with the view after `WAIT`.
pub async fn wait_view(
    reg: &ZkRegistry,
    what: &str,
    pred: impl Fn(&RegistryView) -> bool,
) -> Arc<RegistryView> {
    wait_view_for(reg, what, WAIT, pred).await
}

pub async fn wait_view_for(
    reg: &ZkRegistry,
    what: &str,
    limit: Duration,
    pred: impl Fn(&RegistryView) -> bool,
) -> Arc<RegistryView> {
    reaper_test_support::wait_view(reg.subscribe(), what, limit, pred).await
}

/// Polls `f` until true; panics after `WAIT`.
pub async fn wait_until(what: &str, f: impl FnMut() -> bool) {
    reaper_test_support::wait_until(what, WAIT, f).await
}

/// A whole-second instant (1.x CSV heartbeats carry seconds only).
pub fn whole_seconds(t: reaper_core::Instant) -> reaper_core::Instant {
    chrono::DateTime::from_timestamp(t.timestamp(), 0).unwrap()
}
