//! The tests' one helper set, a dev-dependency of every crate's integration
//! tests and of the end-to-end tests:
//!
//! - [`skip`]: a missing service fails the test under `CI=true` and prints
//!   `SKIPPED: <why>` elsewhere; [`shared_zk`], [`shared_etcd`],
//!   [`database`], [`private_zk_available`], [`private_etcd_available`] probe
//!   the services of `deploy/dev/services.sh` with it.
//! - [`unique`], [`unique_root`]: names of a test's own, so that tests share
//!   one ZooKeeper, etcd or database server.
//! - [`wait_until`], [`wait_until_async`], [`wait_view`]: wait on a
//!   condition with a generous deadline and say what was awaited (and the
//!   last view) when it passes. A fixed wait belongs only in a named
//!   "nothing happens" hold ([`hold`]).
//! - [`utc`]: the zone every adapter's test settings use; [`median`]: the
//!   benchmarks' middle sample.

use ds_sim::db::{server_url, SimKind};
use reaper_core::RegistryView;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// UTC, the zone of every adapter's test settings and simulated servers.
pub fn utc() -> reaper_core::Zone {
    "UTC".parse().expect("UTC is a zone")
}

/// How long a test waits for a condition by default.
pub const WAIT: Duration = Duration::from_secs(30);

/// Whether the tests run under CI (`CI=true`), where nothing is skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// A service the test needs is missing: under `CI=true` the test fails
/// (panics with `why`); elsewhere `SKIPPED: <why>` goes to stderr, where
/// `cargo test` shows it, and the caller returns without asserting.
pub fn skip(why: &str) {
    if in_ci() {
        panic!("{why} and CI=true");
    }
    eprintln!("SKIPPED: {why}");
}

/// The shared test ZooKeeper (`DS_TEST_ZK`, from deploy/dev/env.sh), or
/// None (after [`skip`]) when it does not answer `ruok`.
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
    skip(&format!(
        "ZooKeeper at {addr} (DS_TEST_ZK) is unreachable; run deploy/dev/services.sh start"
    ));
    None
}

/// The shared test etcd (`ETCD_ENDPOINTS`, from deploy/dev/env.sh), or None
/// (after [`skip`]) when it does not answer.
pub async fn shared_etcd() -> Option<Vec<String>> {
    let var =
        std::env::var("ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2379".to_string());
    let eps = ds_sim::etcd::endpoints_from(&var);
    if ds_sim::etcd::healthy(&eps, Duration::from_secs(5)).await {
        return Some(eps);
    }
    skip(&format!(
        "etcd at {var} (ETCD_ENDPOINTS) does not answer; run deploy/dev/services.sh start"
    ));
    None
}

/// Whether the test database server of `kind` (`DS_TEST_MYSQL`,
/// `DS_TEST_POSTGRES`) accepts a connection; false after [`skip`].
pub async fn database(kind: SimKind) -> bool {
    let url = server_url(kind);
    let limit = Duration::from_secs(5);
    let ok = match kind {
        SimKind::MySql => tokio::time::timeout(limit, sqlx::MySqlPool::connect(&url))
            .await
            .is_ok_and(|r| r.is_ok()),
        SimKind::Postgres => tokio::time::timeout(limit, sqlx::PgPool::connect(&url))
            .await
            .is_ok_and(|r| r.is_ok()),
    };
    if !ok {
        let var = match kind {
            SimKind::MySql => "DS_TEST_MYSQL",
            SimKind::Postgres => "DS_TEST_POSTGRES",
        };
        skip(&format!(
            "{kind:?} ({var}) is unreachable; run deploy/dev/services.sh start"
        ));
    }
    ok
}

/// Whether a private ZooKeeper can be launched here (java and the jar);
/// false after [`skip`].
pub fn private_zk_available() -> bool {
    let ok = std::path::Path::new("/usr/share/java/zookeeper.jar").exists();
    if !ok {
        skip("/usr/share/java/zookeeper.jar is missing (apt-get install zookeeper)");
    }
    ok
}

/// Whether a private etcd can be launched here (the `etcd` binary); false
/// after [`skip`].
pub fn private_etcd_available() -> bool {
    let ok = ds_sim::etcd::server::available();
    if !ok {
        skip("the etcd binary is missing (deploy/dev/services.sh installs etcd-server)");
    }
    ok
}

static N: AtomicU64 = AtomicU64::new(0);

/// `<prefix>-<pid>-<nanos>-<n>`: unique across the processes and threads of
/// a test run.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A DS root of the test's own: `/<unique>/dolphinscheduler` (remove the
/// parent when done).
pub fn unique_root(prefix: &str) -> String {
    format!("/{}/dolphinscheduler", unique(prefix))
}

/// Polls `f` (every 20 ms) until it holds; panics naming `what` after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !f() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the async condition `f` (every 50 ms) until it holds; panics naming
/// `what` after `limit`.
pub async fn wait_until_async<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !f().await {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `pred` holds for a registry's view (`rx`: the registry's
/// `subscribe()`); panics with the last view after `limit`.
pub async fn wait_view(
    mut rx: watch::Receiver<Arc<RegistryView>>,
    what: &str,
    limit: Duration,
    pred: impl Fn(&RegistryView) -> bool,
) -> Arc<RegistryView> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let v = rx.borrow_and_update().clone();
        if pred(&v) {
            return v;
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("registry channel closed while waiting for {what}; view: {v:#?}"),
            Err(_) => panic!(
                "timed out after {limit:?} waiting for {what}; view: {:#?}",
                rx.borrow()
            ),
        }
    }
}

/// A named "nothing happens" hold: waits `d` so that a test can then assert
/// that something did not happen in that time (`_what` names it at the call
/// site). The only place a fixed wait belongs.
pub async fn hold(_what: &str, d: Duration) {
    tokio::time::sleep(d).await;
}

/// The benchmarks' median: the middle sample (the upper one of an even
/// count); None without samples.
pub fn median<T: Copy + PartialOrd>(samples: &[T]) -> Option<T> {
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_is_the_middle_sample() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4, 1, 3, 2]), Some(3));
        assert_eq!(median::<u32>(&[]), None);
    }

    #[test]
    fn unique_names_differ() {
        let (a, b) = (unique_root("t"), unique_root("t"));
        assert_ne!(a, b);
        assert!(
            a.starts_with("/t-") && a.ends_with("/dolphinscheduler"),
            "{a}"
        );
    }

    #[tokio::test]
    async fn waits_end_when_the_condition_holds() {
        let mut n = 0;
        wait_until("the third poll", WAIT, || {
            n += 1;
            n >= 3
        })
        .await;
        assert_eq!(n, 3);
        let now = chrono::Utc::now();
        let invalid = RegistryView::invalid(now, "not listed yet");
        let (tx, rx) = watch::channel(Arc::new(invalid.clone()));
        let waiter = tokio::spawn(wait_view(rx, "a valid view", WAIT, |v| v.is_valid()));
        let mut valid = invalid;
        valid.state = reaper_core::ViewState::Valid { since: now };
        tx.send_replace(Arc::new(valid));
        assert!(waiter.await.unwrap().is_valid());
    }
}
