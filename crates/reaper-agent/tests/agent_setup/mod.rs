//! The agent's test settings and registries (a real ZooKeeper or etcd, real
//! processes); the helpers every crate's tests share are
//! reaper-test-support's.
#![allow(dead_code, unused_imports)]

use reaper_agent::{AgentRegistry, AgentSettings, Publisher};
use reaper_core::agent::AgentReport;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

pub use reaper_test_support::{shared_zk, WAIT};

/// A root of its own for each test: `/t-agent-<unique>/dolphinscheduler`.
pub fn unique_root() -> String {
    reaper_test_support::unique_root("t-agent")
}

pub fn target(zk: &str, root: &str) -> reaper_zk::ZkSettings {
    reaper_zk::ZkSettings {
        session_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(5),
        ..reaper_zk::ZkSettings::new(zk, root)
    }
}

/// The agent's ZooKeeper registry, as `ds-reaper agent` builds it.
pub fn zk_registry(target: reaper_zk::ZkSettings) -> AgentRegistry {
    AgentRegistry::new(
        format!("ZooKeeper {}", target.connect),
        move |path, line, cancel| -> Arc<dyn Publisher> {
            let t = reaper_zk::ZkSettings {
                line,
                ..target.clone()
            };
            Arc::new(reaper_zk::ZkAgentPublisher::start(t, path, cancel))
        },
    )
}

/// The agent's etcd registry, as `ds-reaper agent` builds it.
pub fn etcd_registry(settings: reaper_etcd::EtcdSettings) -> AgentRegistry {
    AgentRegistry::new(
        format!("etcd {}", settings.endpoints.join(",")),
        move |path, _, cancel| -> Arc<dyn Publisher> {
            Arc::new(reaper_etcd::EtcdAgentPublisher::start(
                settings.clone(),
                path,
                cancel,
            ))
        },
    )
}

/// Settings for a test: a fast scan, the real /proc, an ephemeral port.
pub fn settings(zk: &str, root: &str, exec_base: &Path, worker: Option<&str>) -> AgentSettings {
    AgentSettings {
        worker: worker.map(str::to_string),
        exec_base: exec_base.to_path_buf(),
        scan_interval: Duration::from_millis(200),
        listen: "127.0.0.1:0".parse().unwrap(),
        ..AgentSettings::new(zk_registry(target(zk, root)))
    }
}

/// A listener on an ephemeral port, and its address for HTTP calls.
pub async fn listener() -> (tokio::net::TcpListener, String) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", l.local_addr().unwrap());
    (l, addr)
}

pub async fn client(zk: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(zk)
        .await
        .expect("a ZooKeeper session for the test")
}

/// The agent node's report, or None while the node does not exist.
pub async fn report(c: &zk::Client, path: &str) -> Option<(AgentReport, zk::Stat)> {
    match c.get_data(path).await {
        Ok((data, stat)) => Some((
            AgentReport::parse(path, &data).expect("a valid report"),
            stat,
        )),
        Err(zk::Error::NoNode) => None,
        Err(e) => panic!("reading {path}: {e}"),
    }
}

/// Polls the node until `pred` holds for its report; panics after `WAIT`.
pub async fn wait_report(
    c: &zk::Client,
    path: &str,
    what: &str,
    pred: impl Fn(&AgentReport) -> bool,
) -> (AgentReport, zk::Stat) {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = None;
    loop {
        if let Some((r, stat)) = report(c, path).await {
            if pred(&r) {
                return (r, stat);
            }
            last = Some(r);
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {WAIT:?} waiting for {what}; last report of {path}: {last:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until `f` holds; panics after `WAIT`.
pub async fn wait_until<F, Fut>(what: &str, f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    reaper_test_support::wait_until_async(what, WAIT, f).await
}

/// GET `url`: the status and the body.
pub async fn get(url: &str) -> (u16, String) {
    let r = reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// The value of an unlabelled sample in a Prometheus exposition.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Removes a test's tree from the shared ZooKeeper.
pub async fn cleanup(zk: &str, root: &str) {
    let top = root.trim_end_matches("/dolphinscheduler");
    let _ = ds_sim::zk::delete_tree(zk, top).await;
}

/// The command name of `pid`, or "" once it is gone.
pub fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_string()
}
