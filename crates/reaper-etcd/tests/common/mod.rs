//! Helpers shared by the integration tests (real etcd).
#![allow(dead_code)]

use ds_sim::etcd::EtcdSimOptions;
use reaper_core::{RegistryView, Zone};
use reaper_etcd::{EtcdRegistry, EtcdSettings};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(30);
pub const AGENTS: &str = "ds-reaper/agents";

/// The shared test etcd (`ETCD_ENDPOINTS`, from deploy/dev/env.sh), or None
/// outside CI when it does not answer; under CI=true a missing etcd fails.
pub async fn shared_etcd() -> Option<Vec<String>> {
    let var =
        std::env::var("ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2379".to_string());
    let eps = ds_sim::etcd::endpoints_from(&var);
    if ds_sim::etcd::healthy(&eps, Duration::from_secs(5)).await {
        return Some(eps);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("etcd at {var} (ETCD_ENDPOINTS) does not answer and CI=true");
    }
    eprintln!(
        "SKIPPED: etcd at {var} (ETCD_ENDPOINTS) does not answer; run deploy/dev/services.sh start"
    );
    None
}

/// Whether a private etcd can be launched here (the `etcd` binary).
pub fn private_etcd_available() -> bool {
    let ok = ds_sim::etcd::server::available();
    if !ok {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("the etcd binary is missing and CI=true (deploy/dev/services.sh installs etcd-server)");
        }
        eprintln!("SKIPPED: the etcd binary is missing (apt-get install etcd-server)");
    }
    ok
}

static N: AtomicU64 = AtomicU64::new(0);

/// A test's own root (`t-<unique>/`) and DS namespace under it
/// (`t-<unique>/dolphinscheduler`), so tests share one etcd.
pub fn unique_namespace() -> (String, String) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let root = format!(
        "t-{}-{}-{}/",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::Relaxed)
    );
    let ns = format!("{root}dolphinscheduler");
    (root, ns)
}

pub fn utc() -> Zone {
    "UTC".parse().unwrap()
}

/// Short timeouts so that failures are seen quickly.
pub fn settings(endpoints: &[String], namespace: &str) -> EtcdSettings {
    let mut s = EtcdSettings::new(endpoints.to_vec());
    s.namespace = namespace.to_string();
    s.lease_ttl = Duration::from_secs(3);
    s.request_timeout = Duration::from_secs(1);
    s.zone = utc();
    s.agents = Some((AGENTS.to_string(), Duration::from_secs(35)));
    s
}

pub fn sim_opts() -> EtcdSimOptions {
    EtcdSimOptions {
        interval: Duration::from_millis(500),
        lease_ttl: Duration::from_secs(10),
        zone: utc(),
    }
}

/// Waits until `pred` holds for the registry's view; panics with the view after `WAIT`.
pub async fn wait_view(
    reg: &EtcdRegistry,
    what: &str,
    pred: impl Fn(&RegistryView) -> bool,
) -> Arc<RegistryView> {
    wait_view_for(reg, what, WAIT, pred).await
}

pub async fn wait_view_for(
    reg: &EtcdRegistry,
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

/// Polls `f` until true; panics after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !f() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deletes a test's keys.
pub async fn cleanup(endpoints: &[String], root: &str) {
    let _ = ds_sim::etcd::delete_prefix(endpoints, root).await;
}
