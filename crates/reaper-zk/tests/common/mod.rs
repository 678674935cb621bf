//! Helpers shared by the integration tests (real ZooKeeper).
#![allow(dead_code)]

use reaper_core::{DsLine, RegistryView, Zone};
use reaper_zk::{ZkRegistry, ZkSettings};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(30);

/// The shared test ZooKeeper, or None (outside CI) when it is unreachable.
pub async fn shared_zk() -> Option<String> {
    let addr = std::env::var("DS_TEST_ZK").unwrap_or_else(|_| "127.0.0.1:2181".to_string());
    let port: u16 = addr
        .split(',')
        .next()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(2181);
    if ds_sim::zkserver::ruok(port).await {
        return Some(addr);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("ZooKeeper at {addr} (DS_TEST_ZK) is unreachable and CI=true");
    }
    eprintln!("SKIPPED: ZooKeeper at {addr} (DS_TEST_ZK) is unreachable; run deploy/dev/services.sh start");
    None
}

/// Whether a private ZooKeeper can be launched here (java + the jar).
pub fn private_zk_available() -> bool {
    let ok = std::path::Path::new("/usr/share/java/zookeeper.jar").exists();
    if !ok {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("/usr/share/java/zookeeper.jar missing and CI=true");
        }
        eprintln!("SKIPPED: /usr/share/java/zookeeper.jar missing");
    }
    ok
}

static N: AtomicU64 = AtomicU64::new(0);

/// A root of its own for each test: `/t-<unique>/dolphinscheduler`.
pub fn unique_root() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "/t-{}-{}-{}/dolphinscheduler",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::Relaxed)
    )
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

pub fn utc() -> Zone {
    "UTC".parse().unwrap()
}

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
    let mut rx = reg.subscribe();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let v = rx.borrow_and_update().clone();
        if pred(&v) {
            return v;
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("registry channel closed while waiting for {what}"),
            Err(_) => panic!(
                "timed out after {limit:?} waiting for {what}; view: {:#?}",
                reg.view()
            ),
        }
    }
}

/// Polls `f` until true; panics after `WAIT`.
pub async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {WAIT:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A whole-second instant (1.x CSV heartbeats carry seconds only).
pub fn whole_seconds(t: reaper_core::Instant) -> reaper_core::Instant {
    chrono::DateTime::from_timestamp(t.timestamp(), 0).unwrap()
}
