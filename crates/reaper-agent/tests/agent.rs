//! The agent against a real ZooKeeper with real task processes (ds-sim's
//! `procs`: `sleep`s working in execute paths under a temporary exec base).
//! Each test uses a ZooKeeper root of its own. Services:
//! `bash deploy/dev/services.sh start; source deploy/dev/env.sh`; a missing
//! ZooKeeper skips these tests, except under CI=true where it fails them.

mod agent_setup;

use agent_setup::*;
use ds_sim::procs::ExecBase;
use reaper_agent::testing::{Denial, Denying};
use reaper_agent::{Agent, ProcFs, Publisher};
use reaper_core::{DsLine, NodeKind};
use reaper_zk::ZkAgentPublisher;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn pids_of(r: &reaper_core::agent::AgentReport, task: i64) -> Option<Vec<i32>> {
    r.tasks
        .iter()
        .find(|t| t.task_id == task)
        .map(|t| t.pids.clone())
}

/// `reaper_agent::run`, the call `ds-reaper agent` makes: before it has seen
/// its worker's heartbeat the agent is blind and reads every line's path
/// form (a child in a subdirectory included); once the worker registers it
/// sees, is ready, and a killed process is missing from the next report; the
/// endpoints answer, and a stop removes the node at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_publishes_real_task_processes_and_drops_a_killed_one() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let mut t12 = base.start(DsLine::V3_2, 11, 12).unwrap();
    let t22 = base.start_with_child(DsLine::V1_3, 21, 22, "work").unwrap();
    let t33 = base.start(DsLine::V3_3, 0, 33).unwrap();
    let t44 = base.start(DsLine::V2_0, 43, 44).unwrap();

    // a free port for agent.listen, as an operator would configure one
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut s = settings(&zk, &root, base.path(), Some("10.9.8.7:1234"));
    s.listen = format!("127.0.0.1:{port}").parse().unwrap();
    let http = format!("http://127.0.0.1:{port}");
    let cancel = CancellationToken::new();
    let agent = tokio::spawn(reaper_agent::run(s, cancel.clone()));

    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/10.9.8.7:1234");
    let (r, _) = wait_report(&c, &node, "all four tasks", |r| {
        [12, 22, 33, 44].iter().all(|t| r.lists(*t)) && pids_of(r, 22).is_some_and(|p| p.len() == 2)
    })
    .await;
    assert_eq!(r.worker, "10.9.8.7:1234");
    assert_eq!(r.agent_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(r.exec_base, base.path().display().to_string());
    assert_eq!(r.unreadable, 0);
    assert_eq!(r.tasks.len(), 4, "{r:#?}");
    let task = |id: i64| r.tasks.iter().find(|t| t.task_id == id).unwrap().clone();
    assert_eq!(task(12).workflow_instance_id, 11);
    assert_eq!(task(12).pids, vec![t12.pid()]);
    assert_eq!(task(22).workflow_instance_id, 21);
    assert!(task(22).pids.contains(&t22.pid()));
    assert_eq!(
        task(33).workflow_instance_id,
        0,
        "3.3's path carries no workflow id"
    );
    assert_eq!(task(44).pids, vec![t44.pid()]);
    for t in &r.tasks {
        let age = r.scan_started_at - t.started_at;
        assert!(
            (-1500..WAIT.as_millis() as i64).contains(&age),
            "{t:?} started {age} ms before the scan"
        );
    }
    assert!(r.scan_ms < 1000, "a scan took {} ms", r.scan_ms);

    // no worker heartbeat seen yet: blind, every line's paths read, listings published
    assert!(
        r.blind
            .as_deref()
            .is_some_and(|b| b.contains("heartbeat has not been seen")),
        "{r:#?}"
    );
    let (code, body) = get(&format!("{http}/healthz")).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = get(&format!("{http}/readyz")).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("blind"), "{body}");
    let (_, metrics) = get(&format!("{http}/metrics")).await;
    assert_eq!(
        sample(&metrics, "ds_reaper_agent_task_processes"),
        Some(5.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "ds_reaper_agent_registry_connected"),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, "ds_reaper_agent_unreadable_processes"),
        Some(0.0)
    );
    assert!(sample(&metrics, "ds_reaper_agent_scans_total").unwrap() >= 1.0);

    // the worker registers (3.2, its JVM's pid live): the agent sees, and
    // reads paths as 3.2/3.3 only
    let _worker = ds_sim::zk::SimServer::register(
        &zk,
        &root,
        DsLine::V3_2,
        NodeKind::Worker,
        "10.9.8.7:1234",
        &[],
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let (r, _) = wait_report(&c, &node, "a complete report", |r| r.complete()).await;
    assert!(r.lists(12) && r.lists(33), "{r:#?}");
    let (code, body) = get(&format!("{http}/readyz")).await;
    assert_eq!(code, 200, "{body}");
    // the status keeps a report once its publish returned, a moment after
    // the node changed: wait for that report (or a later one)
    wait_until("the status shows the published report", || async {
        let (_, body) = get(&format!("{http}/")).await;
        let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        status["report"]["seq"].as_u64() >= Some(r.seq)
    })
    .await;
    let (code, body) = get(&format!("{http}/")).await;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["worker"], "10.9.8.7:1234");
    assert_eq!(status["ready"], true);
    assert_eq!(status["report"]["blind"], serde_json::Value::Null, "{body}");

    // the process of task 12 dies: the next report lacks it, the others stay
    let seq = r.seq;
    t12.kill().unwrap();
    let (r2, _) = wait_report(&c, &node, "task 12 gone", |r| r.seq > seq && !r.lists(12)).await;
    assert!(r2.lists(33) && r2.complete(), "{r2:#?}");

    cancel.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), agent).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    assert!(
        report(&c, &node).await.is_none(),
        "the node goes with the agent's session"
    );
    drop((t22, t33, t44));
    cleanup(&zk, &root).await;
}

/// Denied processes (EACCES/EPERM, simulated: tests run as root) are
/// counted; the report says so, `/readyz` answers 503 naming the pids and
/// the capability, and readiness returns once every process reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_processes_are_reported_and_make_the_agent_not_ready() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let t = base.start(DsLine::V3_2, 1, 2).unwrap();
    let other = base.start(DsLine::V3_2, 1, 3).unwrap();
    let _worker = ds_sim::zk::SimServer::register(
        &zk,
        &root,
        DsLine::V3_2,
        NodeKind::Worker,
        "w1:1234",
        &[],
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let (source, deny) = Denying::new(ProcFs::new("/proc"));
    deny.lock().unwrap().insert(t.pid(), Denial::Eacces);
    deny.lock().unwrap().insert(other.pid(), Denial::Eperm);
    let (listener, http) = listener().await;
    let cancel = CancellationToken::new();
    let agent = Agent::new(settings(&zk, &root, base.path(), Some("w1:1234")))
        .with_source(Box::new(source));
    let task = tokio::spawn(agent.serve(listener, cancel.clone()));

    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/w1:1234");
    let (r, _) = wait_report(&c, &node, "a report", |_| true).await;
    assert_eq!(r.unreadable, 2, "{r:#?}");
    assert!(!r.lists(2) && !r.lists(3));
    let (code, body) = get(&format!("{http}/readyz")).await;
    assert_eq!(code, 503, "{body}");
    let (lo, hi) = (t.pid().min(other.pid()), t.pid().max(other.pid()));
    assert!(body.contains(&format!("first pids: {lo}, {hi}")), "{body}");
    assert!(body.contains("CAP_SYS_PTRACE"), "{body}");
    let (_, metrics) = get(&format!("{http}/metrics")).await;
    assert_eq!(
        sample(&metrics, "ds_reaper_agent_unreadable_processes"),
        Some(2.0)
    );

    deny.lock().unwrap().clear();
    let (r, _) = wait_report(&c, &node, "every process readable", |r| r.unreadable == 0).await;
    assert!(r.lists(2) && r.lists(3));
    wait_until("ready again", || async {
        get(&format!("{http}/readyz")).await.0 == 200
    })
    .await;

    cancel.cancel();
    task.await.unwrap().unwrap();
    cleanup(&zk, &root).await;
}

/// `agent.worker = "auto"`: no worker with this host's address → not ready,
/// no node; a worker registered as 127.0.0.1 (1.3's grouped layout: one node
/// per group, the same worker) is found, kept, and published for — also
/// after the worker leaves the registry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_finds_the_worker_by_address_and_keeps_publishing_while_it_is_absent() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let _t = base.start(DsLine::V1_3, 5, 6).unwrap();
    let (listener, http) = listener().await;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        Agent::new(settings(&zk, &root, base.path(), None)).serve(listener, cancel.clone()),
    );
    let c = client(&zk).await;
    // a worker that is some other host's
    let mut other = ds_sim::zk::SimServer::register(
        &zk,
        &root,
        DsLine::V1_3,
        NodeKind::Worker,
        "10.255.0.9:1234",
        &["default"],
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    wait_until("not ready for want of a worker", || async {
        let (code, body) = get(&format!("{http}/readyz")).await;
        code == 503 && body.contains("none of the 1 registered worker(s)")
    })
    .await;
    let agents = format!("{root}/ds-reaper/agents");
    assert!(c
        .list_children(&agents)
        .await
        .unwrap_or_default()
        .is_empty());

    let mut me = ds_sim::zk::SimServer::register(
        &zk,
        &root,
        DsLine::V1_3,
        NodeKind::Worker,
        "127.0.0.1:1234",
        &["default", "spark"],
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let node = format!("{agents}/127.0.0.1:1234");
    let (r, _) = wait_report(&c, &node, "the found worker's report", |r| r.lists(6)).await;
    assert_eq!(r.worker, "127.0.0.1:1234");
    wait_until("ready", || async {
        get(&format!("{http}/readyz")).await.0 == 200
    })
    .await;

    // the worker leaves the registry: the agent keeps its identity and publishes on
    me.crash().await;
    other.crash().await;
    let seq = r.seq;
    let (r, _) = wait_report(&c, &node, "reports after the worker left", |r| {
        r.seq >= seq + 3
    })
    .await;
    assert!(r.lists(6));
    assert_eq!(
        c.list_children(&agents).await.unwrap(),
        vec!["127.0.0.1:1234".to_string()]
    );

    cancel.cancel();
    task.await.unwrap().unwrap();
    cleanup(&zk, &root).await;
}

/// Two registered workers with this host's address: not ready, nothing
/// published, until only one is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_refuses_several_candidates() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let mut a = ds_sim::zk::SimServer::register(
        &zk,
        &root,
        DsLine::V3_2,
        NodeKind::Worker,
        "127.0.0.1:1234",
        &[],
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let _b = ds_sim::zk::SimServer::register(
        &zk,
        &root,
        DsLine::V3_2,
        NodeKind::Worker,
        "127.0.0.1:1235",
        &[],
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let (listener, http) = listener().await;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(
        Agent::new(settings(&zk, &root, base.path(), None)).serve(listener, cancel.clone()),
    );
    wait_until("not ready: several", || async {
        let (code, body) = get(&format!("{http}/readyz")).await;
        code == 503
            && body.contains("several registered workers")
            && body.contains("127.0.0.1:1235")
    })
    .await;
    let c = client(&zk).await;
    let agents = format!("{root}/ds-reaper/agents");
    assert!(c
        .list_children(&agents)
        .await
        .unwrap_or_default()
        .is_empty());
    a.crash().await;
    wait_report(
        &c,
        &format!("{agents}/127.0.0.1:1235"),
        "the one left",
        |_| true,
    )
    .await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    cleanup(&zk, &root).await;
}

/// After its session expires the agent builds a new one and creates its
/// node again (owned by the new session), and goes on publishing. The
/// expiry is a real one: the agent talks to ZooKeeper through a proxy that
/// is cut for longer than the session timeout, so the server expires the
/// session and the client learns it when it reconnects. (Attaching a second
/// client to the agent's session raced the agent's own reconnects and
/// failed on a loaded machine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_is_created_again_after_a_session_expiry() {
    let Some(zk) = shared_zk().await else { return };
    let upstream = zk.split(',').next().unwrap_or(&zk).to_string();
    let proxy = ds_sim::proxy::Proxy::start(&upstream).await.unwrap();
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let _t = base.start(DsLine::V3_2, 7, 8).unwrap();
    let s = settings(&proxy.addr(), &root, base.path(), Some("w1:1234"));
    let cancel = CancellationToken::new();
    let publisher = Arc::new(ZkAgentPublisher::start(
        target(&proxy.addr(), &root),
        &s.path,
        cancel.child_token(),
    ));
    let (listener, _) = listener().await;
    let task = tokio::spawn(
        Agent::new(s)
            .with_publisher(publisher.clone() as Arc<dyn Publisher>)
            .serve(listener, cancel.clone()),
    );
    let c = client(&zk).await;
    let node = publisher.node_path("w1:1234");
    let (_, stat) = wait_report(&c, &node, "the first report", |r| r.lists(8)).await;
    let session = publisher.session().expect("a session");
    assert_eq!(stat.ephemeral_owner, session.id().0);

    // the partition: the server expires the session and drops its node
    proxy.down();
    wait_until("the server expired the agent's session", || async {
        report(&c, &node).await.is_none()
    })
    .await;
    proxy.up();
    wait_until("the expiry noticed", || async {
        publisher.expirations() >= 1
    })
    .await;
    let (r, stat) = wait_report(&c, &node, "a report from the new session", |r| r.lists(8)).await;
    let now = publisher.session().expect("a new session");
    assert_ne!(now.id(), session.id());
    assert_eq!(stat.ephemeral_owner, now.id().0);
    let (r2, _) = wait_report(&c, &node, "later reports", |x| x.seq > r.seq + 2).await;
    assert!(r2.lists(8));

    cancel.cancel();
    task.await.unwrap().unwrap();
    assert!(report(&c, &node).await.is_none());
    cleanup(&zk, &root).await;
}

/// A registry that cannot be reached is no exit: the agent scans, counts
/// publish errors, answers /healthz, and /readyz says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_registry_is_retried_not_fatal() {
    let base = ExecBase::new().unwrap();
    let (listener, http) = listener().await;
    let cancel = CancellationToken::new();
    // nothing listens on port 1
    let s = settings(
        "127.0.0.1:1",
        "/dolphinscheduler",
        base.path(),
        Some("w1:1234"),
    );
    let task = tokio::spawn(Agent::new(s).serve(listener, cancel.clone()));
    wait_until("publish errors counted", || async {
        let (_, m) = get(&format!("{http}/metrics")).await;
        sample(&m, "ds_reaper_agent_publish_errors_total").unwrap_or(0.0) >= 2.0
    })
    .await;
    assert_eq!(get(&format!("{http}/healthz")).await.0, 200);
    let (code, body) = get(&format!("{http}/readyz")).await;
    assert_eq!(code, 503);
    assert!(body.contains("not connected to the registry"), "{body}");
    let (_, m) = get(&format!("{http}/metrics")).await;
    assert_eq!(sample(&m, "ds_reaper_agent_registry_connected"), Some(0.0));
    cancel.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
}
