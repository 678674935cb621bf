//! Kill orders through the registry (SPEC §15), against the shared ZooKeeper
//! and etcd and real processes: an order node written by hand, as the leading
//! daemon writes it, under `<root>/ds-reaper/orders/<worker>/<task_id>`; the
//! agent carries it out once and answers it in its published report while
//! the node exists. A missing service skips, except under CI=true.

mod agent_setup;

use agent_setup::*;
use ds_sim::etcd::{EtcdSimOptions, EtcdSimServer};
use ds_sim::procs::ExecBase;
use ds_sim::zk::SimServer;
use reaper_agent::{Agent, AgentSettings};
use reaper_core::agent::AgentReport;
use reaper_core::order::{KillOrder, OrderPid, OrderResult};
use reaper_core::{DsLine, NodeKind};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// A task whose script starts a child that ignores SIGTERM and a plain sleep:
/// bash, the child bash, its sleep, the sleep.
const STUBBORN: &str = "bash -c 'trap \"\" TERM; sleep 86400; true' &\nsleep 86400 &\nwait";

fn order_from(r: &AgentReport, task: i64, id: &str) -> KillOrder {
    let t = r.tasks.iter().find(|t| t.task_id == task).unwrap();
    KillOrder {
        task_id: task,
        pids: t
            .processes
            .iter()
            .map(|p| OrderPid {
                pid: p.pid,
                start_time: p.started_at,
            })
            .collect(),
        reason: "ghost_process".into(),
        issued_at: chrono::Utc::now().timestamp_millis(),
        order_id: id.into(),
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|st| st != "Z")
        })
        .unwrap_or(false)
}

fn outcome_of(r: &AgentReport, id: &str) -> Option<OrderResult> {
    r.orders.iter().find(|o| o.order_id == id).map(|o| o.result)
}

/// The report lists `n` processes of `task`, `sleeps` of them running
/// `sleep` (the script's short-lived subshells have come and gone).
fn task_listed(r: &AgentReport, task: i64, n: usize, sleeps: usize) -> bool {
    r.blind.is_none()
        && r.tasks.iter().any(|t| {
            t.task_id == task
                && t.processes.len() == n
                && t.processes
                    .iter()
                    .filter(|p| comm(p.pid) == "sleep")
                    .count()
                    == sleeps
        })
}

/// The sample of `ds_reaper_agent_kills_total{result="<result>"}`.
fn kills(metrics: &str, result: &str) -> Option<f64> {
    let name = format!("ds_reaper_agent_kills_total{{result=\"{result}\"}}");
    sample(metrics, &name)
}

async fn zk_put(c: &zk::Client, path: &str, data: &[u8]) {
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let parent = path.rsplit_once('/').unwrap().0;
    match c.mkdir(parent, &persistent).await {
        Ok(()) | Err(zk::Error::NodeExists) => {}
        Err(e) => panic!("mkdir {parent}: {e}"),
    }
    c.create(path, data, &persistent).await.unwrap();
}

async fn etcd_report(c: &mut etcd_client::Client, key: &str) -> Option<AgentReport> {
    let resp = c.get(key, None).await.ok()?;
    let kv = resp.kvs().first()?;
    AgentReport::parse(key, kv.value()).ok()
}

fn spawn_agent(
    s: AgentSettings,
    listener: tokio::net::TcpListener,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let task = tokio::spawn(async move {
        Agent::new(s).serve(listener, c).await.unwrap();
    });
    (cancel, task)
}

/// ZooKeeper: the whole tree dies (the child ignoring SIGTERM by SIGKILL),
/// the report carries `killed` while the node exists and not after; a
/// malformed order with an order_id is refused, one without is skipped; each
/// is counted in `ds_reaper_agent_kills_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_order_kills_the_tree_and_is_answered_while_its_node_exists() {
    let Some(zkc) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let mut p = base
        .start_ds_command(DsLine::V3_2, 11, 12, STUBBORN)
        .unwrap();
    let worker = "10.7.0.1:1234";
    let _w = SimServer::register(
        &zkc,
        &root,
        DsLine::V3_2,
        NodeKind::Worker,
        worker,
        &["default"],
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let (listener, http) = listener().await;
    let mut s = settings(&zkc, &root, base.path(), Some(worker));
    s.allow_kill = true;
    s.kill_grace = Duration::from_millis(500);
    let (cancel, task) = spawn_agent(s, listener);
    let c = client(&zkc).await;
    let node = format!("{root}/ds-reaper/agents/{worker}");
    let (r, _) = wait_report(&c, &node, "the task's 4 processes", |r| {
        task_listed(r, 12, 4, 2)
    })
    .await;
    let order = order_from(&r, 12, "zk-1");
    let orders = format!("{root}/ds-reaper/orders/{worker}");
    zk_put(&c, &format!("{orders}/12"), &order.to_json()).await;
    zk_put(
        &c,
        &format!("{orders}/99"),
        br#"{"order_id":"zk-bad","task_id":"x"}"#,
    )
    .await;
    zk_put(&c, &format!("{orders}/98"), b"\x00garbage").await;
    let (r, _) = wait_report(&c, &node, "the order answered", |r| {
        outcome_of(r, "zk-1").is_some() && outcome_of(r, "zk-bad").is_some()
    })
    .await;
    assert_eq!(outcome_of(&r, "zk-1"), Some(OrderResult::Killed), "{r:#?}");
    assert_eq!(
        outcome_of(&r, "zk-bad"),
        Some(OrderResult::Refused),
        "{r:#?}"
    );
    assert_eq!(r.orders.len(), 2, "the garbage node is skipped: {r:#?}");
    for o in &order.pids {
        assert!(!alive(o.pid), "pid {} survived", o.pid);
    }
    assert!(!p.is_running());
    // answered again in later reports while the node exists
    let seq = r.seq;
    let (r, _) = wait_report(&c, &node, "a later report", |r| r.seq > seq + 1).await;
    assert_eq!(outcome_of(&r, "zk-1"), Some(OrderResult::Killed), "{r:#?}");
    assert!(r.tasks.iter().all(|t| t.task_id != 12), "{r:#?}");
    let m = get(&format!("{http}/metrics")).await.1;
    assert_eq!(kills(&m, "killed"), Some(1.0), "{m}");
    assert_eq!(kills(&m, "refused"), Some(1.0), "{m}");
    // the daemon deletes the node: the answer goes from the report
    c.delete(&format!("{orders}/12"), None).await.unwrap();
    wait_report(&c, &node, "the answer gone with its node", |r| {
        outcome_of(r, "zk-1").is_none() && outcome_of(r, "zk-bad").is_some()
    })
    .await;
    let m = get(&format!("{http}/metrics")).await.1;
    assert_eq!(kills(&m, "killed"), Some(1.0), "carried out once: {m}");
    cancel.cancel();
    task.await.unwrap();
    cleanup(&zkc, &root).await;
}

/// ZooKeeper, `agent.allow_kill = false`: the order is answered `refused`
/// and every process lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_allow_kill_refuses_and_signals_nothing() {
    let Some(zkc) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let mut p = base
        .start_ds_command(DsLine::V3_2, 21, 22, "sleep 86400 &\nwait")
        .unwrap();
    let worker = "10.7.0.2:1234";
    let _w = SimServer::register(
        &zkc,
        &root,
        DsLine::V3_2,
        NodeKind::Worker,
        worker,
        &["default"],
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let (listener, http) = listener().await;
    let s = settings(&zkc, &root, base.path(), Some(worker));
    assert!(!s.allow_kill);
    let (cancel, task) = spawn_agent(s, listener);
    let c = client(&zkc).await;
    let node = format!("{root}/ds-reaper/agents/{worker}");
    let (r, _) = wait_report(&c, &node, "the task's 2 processes", |r| {
        task_listed(r, 22, 2, 1)
    })
    .await;
    let order = order_from(&r, 22, "zk-2");
    zk_put(
        &c,
        &format!("{root}/ds-reaper/orders/{worker}/22"),
        &order.to_json(),
    )
    .await;
    let (r, _) = wait_report(&c, &node, "the order refused", |r| {
        outcome_of(r, "zk-2").is_some()
    })
    .await;
    assert_eq!(outcome_of(&r, "zk-2"), Some(OrderResult::Refused), "{r:#?}");
    let detail = &r.orders[0].detail;
    assert!(detail.contains("allow_kill"), "{detail}");
    // the next reports still list every process of the task
    let seq = r.seq;
    let (r, _) = wait_report(&c, &node, "a later report", |r| r.seq > seq + 1).await;
    assert!(task_listed(&r, 22, 2, 1), "{r:#?}");
    for o in &order.pids {
        assert!(alive(o.pid), "pid {} was signalled", o.pid);
    }
    assert!(p.is_running());
    let m = get(&format!("{http}/metrics")).await.1;
    assert_eq!(kills(&m, "refused"), Some(1.0), "{m}");
    cancel.cancel();
    task.await.unwrap();
    cleanup(&zkc, &root).await;
}

/// etcd: the order key under `<namespace>/ds-reaper/orders/<worker>/` is
/// carried out and answered in the report key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_order_kills_the_tree_and_is_answered() {
    let var =
        std::env::var("ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2379".to_string());
    let eps = ds_sim::etcd::endpoints_from(&var);
    if !ds_sim::etcd::healthy(&eps, Duration::from_secs(5)).await {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "etcd at {var} does not answer and CI=true"
        );
        eprintln!("SKIPPED: etcd at {var} does not answer");
        return;
    }
    let top = unique_root().replace("/dolphinscheduler", "");
    let ns = format!("{}/dolphinscheduler", top.trim_start_matches('/'));
    let base = ExecBase::new().unwrap();
    let mut p = base
        .start_ds_command(DsLine::V3_2, 31, 32, STUBBORN)
        .unwrap();
    let worker = "10.7.0.3:1234";
    let _w = EtcdSimServer::register(
        &eps,
        &ns,
        (DsLine::V3_2, NodeKind::Worker),
        worker,
        &[],
        chrono::Utc::now(),
        EtcdSimOptions::default(),
    )
    .await
    .unwrap();
    let mut es = reaper_etcd::EtcdSettings::new(eps.clone());
    es.namespace = ns.clone();
    es.lease_ttl = Duration::from_secs(5);
    es.request_timeout = Duration::from_secs(3);
    let (listener, http) = listener().await;
    let mut s = AgentSettings {
        worker: Some(worker.into()),
        exec_base: base.path().to_path_buf(),
        scan_interval: Duration::from_millis(200),
        listen: "127.0.0.1:0".parse().unwrap(),
        allow_kill: true,
        kill_grace: Duration::from_millis(500),
        ..AgentSettings::new(etcd_registry(es))
    };
    s.line = Some(DsLine::V3_2);
    let (cancel, task) = spawn_agent(s, listener);
    let mut c = ds_sim::etcd::connect(&eps).await.unwrap();
    let key = format!("{ns}/ds-reaper/agents/{worker}");
    let deadline = tokio::time::Instant::now() + WAIT;
    let r = loop {
        if let Some(r) = etcd_report(&mut c, &key).await {
            if task_listed(&r, 32, 4, 2) {
                break r;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no report listing task 32"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let order = order_from(&r, 32, "etcd-1");
    c.put(
        format!("{ns}/ds-reaper/orders/{worker}/32"),
        order.to_json(),
        None,
    )
    .await
    .unwrap();
    let r = loop {
        if let Some(r) = etcd_report(&mut c, &key).await {
            if outcome_of(&r, "etcd-1").is_some() {
                break r;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the etcd order was never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        outcome_of(&r, "etcd-1"),
        Some(OrderResult::Killed),
        "{r:#?}"
    );
    for o in &order.pids {
        assert!(!alive(o.pid), "pid {} survived", o.pid);
    }
    assert!(!p.is_running());
    let m = get(&format!("{http}/metrics")).await.1;
    assert_eq!(kills(&m, "killed"), Some(1.0), "{m}");
    cancel.cancel();
    task.await.unwrap();
    let _ = ds_sim::etcd::delete_prefix(&eps, top.trim_start_matches('/')).await;
}
