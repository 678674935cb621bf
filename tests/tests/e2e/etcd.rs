//! The daemon on DS's etcd registry (SPEC §14): a worker's loss is found
//! and its tasks failed after grace; flapping within grace writes nothing;
//! an etcd that stops answering invalidates the view and nothing is written
//! until it is valid again; two replicas elect one leader, each zombie is
//! written once, and the survivor takes over when the leader is killed.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::etcd::{EtcdSimOptions, EtcdSimServer};
use reaper_core::{DsLine, NodeKind};
use reaper_e2e::*;
use std::time::Duration;

fn namespace() -> String {
    let root = unique_root();
    // `/t-…/dolphinscheduler` → `t-…/dolphinscheduler`: a raw key prefix of its own
    root.trim_start_matches('/').to_string()
}

fn etcd_config(endpoints: &[String], ns: &str, policy: &str) -> String {
    let eps = endpoints
        .iter()
        .map(|e| format!("{e:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[registry]\ntype = \"etcd\"\n[etcd]\nendpoints = [{eps}]\nnamespace = \"{ns}\"\nlease_ttl = \"3s\"\n{policy}"
    )
}

async fn etcd_server(
    endpoints: &[String],
    ns: &str,
    kind: NodeKind,
    host: &str,
) -> anyhow::Result<EtcdSimServer> {
    etcd_server_ttl(endpoints, ns, kind, host, Duration::from_secs(3)).await
}

async fn etcd_server_ttl(
    endpoints: &[String],
    ns: &str,
    kind: NodeKind,
    host: &str,
    lease_ttl: Duration,
) -> anyhow::Result<EtcdSimServer> {
    let opts = EtcdSimOptions {
        interval: Duration::from_millis(500),
        lease_ttl,
        zone: "UTC".parse().map_err(|e| anyhow::anyhow!("{e:?}"))?,
    };
    EtcdSimServer::register(
        endpoints,
        ns,
        (DsLine::V3_2, kind),
        host,
        &[],
        long_ago(),
        opts,
    )
    .await
}

const FAIL: &str = "[policy]\nworker_lost = \"fail\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_lost_workers_tasks_are_failed_after_grace_and_flapping_writes_nothing(
) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(eps) = shared_etcd().await else {
        return Ok(());
    };
    let db = sim_db(SimKind::Postgres, "3.2.2").await?;
    let ns = namespace();
    let _m = etcd_server(&eps, &ns, NodeKind::Master, "10.0.0.1:5678").await?;
    let mut w1 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.11:1234").await?;
    let mut w2 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.12:1234").await?;
    let _w3 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.13:1234").await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let lost = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let flapping = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;
    let kept = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.13:1234")))
        .await?;
    let mut d = Daemon::start_with_env(
        db.url(),
        "/unused",
        &etcd_config(&eps, &ns, FAIL),
        &[("DS_REAPER__RECONCILE__GRACE_PERIOD", "8s")],
    )
    .await?;
    d.wait_ready().await?;
    let status = d.json("/api/v1/status").await?;
    assert_eq!(status["registry_view"]["registry"], "etcd", "{status:#}");
    assert_eq!(status["ds_line"], "3.2", "{status:#}");
    d.wait_metric("ds_reaper_live_workers", |v| v == 3.0)
        .await?;
    d.wait_sweeps(2).await?;

    // w2 flaps: gone and back well inside the grace period
    w2.crash().await;
    d.wait_metric("ds_reaper_live_workers", |v| v == 2.0)
        .await?;
    w2.restart(long_ago()).await?;
    d.wait_metric("ds_reaper_live_workers", |v| v == 3.0)
        .await?;

    // w1 is lost for good
    w1.crash().await;
    wait_until("the lost worker's task failed", || async {
        Ok(db.task_state(lost).await?.state == 6)
    })
    .await?;
    let done = d.audit_events("done", Some(lost));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["reason"], "worker_lost");
    hold(
        "well past w2's grace as measured from its brief loss: never written",
        Duration::from_secs(9),
    )
    .await;
    d.wait_sweeps(2).await?;
    assert_eq!(db.task_state(flapping).await?.state, 1, "flapping wrote");
    assert!(d.audit_events("intent", Some(flapping)).is_empty());
    assert_eq!(db.task_state(kept).await?.state, 1);
    assert_eq!(d.terminate().await?, Some(0));
    ds_sim::etcd::delete_prefix(&eps, &ns).await?;
    db.drop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_unanswering_invalidates_the_view_and_nothing_is_written_meanwhile(
) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    if !private_etcd_available() {
        return Ok(());
    }
    let mut private = ds_sim::etcd::server::PrivateEtcd::start().await?;
    let eps = private.endpoints();
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let ns = namespace();
    // DS's servers outlive the pause (their leases are longer than it), so
    // what the daemon sees afterwards is the same cluster.
    let ttl = Duration::from_secs(60);
    let _m = etcd_server_ttl(&eps, &ns, NodeKind::Master, "10.0.0.1:5678", ttl).await?;
    let _w1 = etcd_server_ttl(&eps, &ns, NodeKind::Worker, "10.0.0.11:1234", ttl).await?;
    let _w2 = etcd_server_ttl(&eps, &ns, NodeKind::Worker, "10.0.0.12:1234", ttl).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    // A zombie on a host that never registered: the daemon would fail it
    // once the view has been valid for grace.
    let zombie = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.99:1234")))
        .await?;
    let mut d = Daemon::start_with_env(
        db.url(),
        "/unused",
        &etcd_config(&eps, &ns, FAIL),
        &[("DS_REAPER__RECONCILE__GRACE_PERIOD", "6s")],
    )
    .await?;
    d.wait_ready().await?;
    // etcd stops answering before the grace is over
    private.pause()?;
    d.wait_metric("ds_reaper_registry_view_valid", |v| v == 0.0)
        .await?;
    let (code, body) = d.get("/readyz").await?;
    assert_eq!(code, 503, "{body}");
    hold(
        "past the grace while etcd does not answer: nothing written",
        Duration::from_secs(8),
    )
    .await;
    assert!(
        d.audit_events("intent", None).is_empty(),
        "wrote on an invalid view"
    );
    assert_eq!(db.task_state(zombie).await?.state, 1);
    // back: valid again after a fresh read, then the zombie after grace
    private.resume()?;
    d.wait_metric("ds_reaper_registry_view_valid", |v| v == 1.0)
        .await?;
    wait_until("the zombie failed once the view is valid again", || async {
        Ok(db.task_state(zombie).await?.state == 6)
    })
    .await?;
    assert_eq!(d.terminate().await?, Some(0));
    private.stop().await?;
    db.drop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_two_replicas_one_leader_and_the_survivor_takes_over_a_kill_9() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(eps) = shared_etcd().await else {
        return Ok(());
    };
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let ns = namespace();
    let _m = etcd_server(&eps, &ns, NodeKind::Master, "10.0.0.1:5678").await?;
    let mut w1 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.11:1234").await?;
    let mut w2 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.12:1234").await?;
    let _w3 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.13:1234").await?;
    let _w4 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.14:1234").await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let first = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let second = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;
    // two of four workers go in this test: keep the brake out of the way
    let cfg = etcd_config(
        &eps,
        &ns,
        &format!("{FAIL}[brake]\nmax_lost_worker_fraction = 0.9\n"),
    );
    two_replicas_kill_takeover(
        &db,
        "/unused",
        &cfg,
        (first, second),
        || async move { w1.crash().await },
        || async move { w2.crash().await },
    )
    .await?;
    ds_sim::etcd::delete_prefix(&eps, &ns).await?;
    db.drop().await
}

/// SPEC §12 on etcd: the agent's key is bound to a lease of its own and the
/// daemon on the etcd registry sees the agent fresh beside its worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_an_agent_publishes_and_the_daemon_sees_it() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(eps) = shared_etcd().await else {
        return Ok(());
    };
    let db = sim_db(SimKind::Postgres, "3.2.2").await?;
    let ns = namespace();
    let _m = etcd_server(&eps, &ns, NodeKind::Master, "10.0.0.1:5678").await?;
    let _w1 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.11:1234").await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let task = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let exec = ds_sim::procs::ExecBase::new()?;
    let mut p = exec.start(DsLine::V3_2, wf, task)?;
    let registry = etcd_config(&eps, &ns, "");
    let mut agent =
        AgentProcess::start("/unused", "10.0.0.11:1234", exec.path(), &registry).await?;
    let mut d = Daemon::start(db.url(), "/unused", &registry).await?;
    d.wait_ready().await?;
    wait_until(
        "the daemon sees the agent fresh, listing the task",
        || async {
            let w = d.json("/api/v1/workers").await?;
            Ok(w["workers"].as_array().into_iter().flatten().any(|x| {
                x["host"] == "10.0.0.11:1234"
                    && x["agent"]["fresh"] == true
                    && x["agent"]["tasks"] == 1
            }))
        },
    )
    .await?;
    p.kill()?;
    wait_until("the next report lacks the task", || async {
        let w = d.json("/api/v1/workers").await?;
        Ok(w["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|x| x["host"] == "10.0.0.11:1234" && x["agent"]["tasks"] == 0))
    })
    .await?;
    agent.child.start_kill()?;
    let _ = agent.child.wait().await;
    assert_eq!(d.terminate().await?, Some(0));
    ds_sim::etcd::delete_prefix(&eps, &ns).await?;
    db.drop().await
}

/// SPEC §15 on etcd (and PostgreSQL): a ghost's kill order is a key under
/// the namespace; the agent carries it out and answers, the daemon audits
/// `done` and removes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_kill_order_ends_a_ghost() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(eps) = shared_etcd().await else {
        return Ok(());
    };
    let db = sim_db(SimKind::Postgres, "3.2.2").await?;
    let ns = namespace();
    let _m = etcd_server(&eps, &ns, NodeKind::Master, "10.0.0.1:5678").await?;
    let _w1 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.11:1234").await?;
    let _w2 = etcd_server(&eps, &ns, NodeKind::Worker, "10.0.0.12:1234").await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let task = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let exec = ds_sim::procs::ExecBase::new()?;
    let mut p = exec.start(DsLine::V3_2, wf, task)?;
    let registry = etcd_config(&eps, &ns, "");
    let mut agent = AgentProcess::start(
        "/unused",
        "10.0.0.11:1234",
        exec.path(),
        &format!("allow_kill = true\nkill_grace = \"1s\"\n{registry}"),
    )
    .await?;
    let mut d = Daemon::start_with_env(
        db.url(),
        "/unused",
        &etcd_config(
            &eps,
            &ns,
            "[policy]\nghost_process = \"kill\"\n[[policy.rules]]\nreason = \"ghost_process\"\nover = [\"terminal_state\"]\n",
        ),
        &[("DS_REAPER__RECONCILE__GHOST_AFTER", "3s")],
    )
    .await?;
    d.wait_ready().await?;
    wait_until("the agent lists the task", || async {
        let w = d.json("/api/v1/workers").await?;
        Ok(w["workers"].as_array().into_iter().flatten().any(|x| {
            x["host"] == "10.0.0.11:1234" && x["agent"]["fresh"] == true && x["agent"]["tasks"] == 1
        }))
    })
    .await?;
    let end = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S");
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7, end_time = '{end}' WHERE id = {task}"
    ))
    .await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while p.is_running() {
        assert!(
            std::time::Instant::now() < deadline,
            "the ghost's process was not killed: {}",
            d.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_until("the answer is audited done", || async {
        Ok(d.audit()
            .iter()
            .any(|r| r["event"] == "done" && r["kind"] == "process" && r["task_id"] == task))
    })
    .await?;
    let orders = format!("{ns}/ds-reaper/orders/");
    wait_until("the order key is removed", || async {
        Ok(ds_sim::etcd::keys_with_leases(&eps, &orders)
            .await?
            .is_empty())
    })
    .await?;
    let intent = d
        .audit()
        .into_iter()
        .find(|r| r["event"] == "intent" && r["kind"] == "process")
        .expect("the intent before the order");
    assert_eq!(intent["task_id"], task);
    assert_eq!(db.task_state(task).await?.state, 7);
    agent.child.start_kill()?;
    let _ = agent.child.wait().await;
    assert_eq!(d.terminate().await?, Some(0));
    ds_sim::etcd::delete_prefix(&eps, &ns).await?;
    db.drop().await
}
