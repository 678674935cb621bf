//! The etcd adapter's test settings; the helpers every crate's tests share
//! (services, roots, waits) are reaper-test-support's.
#![allow(dead_code, unused_imports)]

use ds_sim::etcd::EtcdSimOptions;
use reaper_core::RegistryView;
use reaper_etcd::{EtcdRegistry, EtcdSettings};
use std::sync::Arc;
use std::time::Duration;

pub use reaper_test_support::{private_etcd_available, shared_etcd, wait_until, WAIT};

pub const AGENTS: &str = "ds-reaper/agents";

/// A test's own root (`t-<unique>/`) and DS namespace under it
/// (`t-<unique>/dolphinscheduler`), so tests share one etcd.
pub fn unique_namespace() -> (String, String) {
    let root = format!("{}/", reaper_test_support::unique("t"));
    let ns = format!("{root}dolphinscheduler");
    (root, ns)
}

pub use reaper_test_support::utc;

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
    reaper_test_support::wait_view(reg.subscribe(), what, limit, pred).await
}

/// Deletes a test's keys.
pub async fn cleanup(endpoints: &[String], root: &str) {
    let _ = ds_sim::etcd::delete_prefix(endpoints, root).await;
}
