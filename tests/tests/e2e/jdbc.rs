//! The daemon on DS's JDBC registry (SPEC §14): a worker's loss is found and
//! its tasks failed after grace — 3.1.9's MySQL registry, 3.2.2's JDBC
//! registry on both databases, dev's with its client heartbeats — and two
//! replicas elect one leader by a session lock, each zombie written once,
//! the survivor taking over when the leader is killed.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::jdbc::{JdbcSimOptions, SimJdbcServer, SimRegistryDb};
use reaper_core::NodeKind;
use reaper_e2e::*;
use std::time::Duration;

fn opts() -> JdbcSimOptions {
    JdbcSimOptions {
        // dev: a dead client is dead after this (DS: 60 s)
        session_timeout: Duration::from_secs(10),
        zone: "UTC".parse().expect("UTC"),
        ..JdbcSimOptions::default()
    }
}

async fn jdbc_server(
    reg: &SimRegistryDb,
    line: reaper_core::DsLine,
    kind: NodeKind,
    host: &str,
) -> anyhow::Result<SimJdbcServer> {
    SimJdbcServer::register(reg, line, kind, host, long_ago(), opts()).await
}

const CONFIG: &str = "[registry]\ntype = \"jdbc\"\n[jdbc_registry]\npoll_interval = \"1s\"\n[policy]\nworker_lost = \"fail\"\n";

async fn loss_is_failed_after_grace(kind: SimKind, fixture: &str) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(kind, fixture).await?;
    let line = db.line;
    let reg = SimRegistryDb::attach(&db).await?;
    let _m = jdbc_server(&reg, line, NodeKind::Master, "10.0.0.1:5678").await?;
    let mut w1 = jdbc_server(&reg, line, NodeKind::Worker, "10.0.0.11:1234").await?;
    let _w2 = jdbc_server(&reg, line, NodeKind::Worker, "10.0.0.12:1234").await?;
    let _w3 = jdbc_server(&reg, line, NodeKind::Worker, "10.0.0.13:1234").await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let lost = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let kept = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;
    let mut d = Daemon::start(db.url(), "/unused", CONFIG).await?;
    d.wait_ready().await?;
    let status = d.json("/api/v1/status").await?;
    assert_eq!(status["registry_view"]["registry"], "jdbc", "{status:#}");
    d.wait_metric("ds_reaper_live_workers", |v| v == 3.0)
        .await?;
    d.wait_sweeps(2).await?;
    assert_eq!(db.task_state(lost).await?.state, 1, "healthy: untouched");
    // The worker dies without a word: its row stays until DS's rule says dead.
    w1.crash().await;
    wait_until(
        &format!("{fixture}: the lost worker's task failed"),
        || async { Ok(db.task_state(lost).await?.state == 6) },
    )
    .await?;
    let done = d.audit_events("done", Some(lost));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["reason"], "worker_lost");
    assert_eq!(db.task_state(kept).await?.state, 1);
    assert_eq!(d.terminate().await?, Some(0));
    db.drop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc_3_1_9_mysql_registry() -> anyhow::Result<()> {
    loss_is_failed_after_grace(SimKind::MySql, "3.1.9").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc_3_2_2_on_mariadb() -> anyhow::Result<()> {
    loss_is_failed_after_grace(SimKind::MySql, "3.2.2").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc_3_2_2_on_postgres() -> anyhow::Result<()> {
    loss_is_failed_after_grace(SimKind::Postgres, "3.2.2").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc_dev_with_client_heartbeats() -> anyhow::Result<()> {
    loss_is_failed_after_grace(SimKind::Postgres, "dev").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc_two_replicas_one_leader_and_a_kill_9_takeover() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let reg = SimRegistryDb::attach(&db).await?;
    let _m = jdbc_server(&reg, line, NodeKind::Master, "10.0.0.1:5678").await?;
    let mut w1 = jdbc_server(&reg, line, NodeKind::Worker, "10.0.0.11:1234").await?;
    let mut w2 = jdbc_server(&reg, line, NodeKind::Worker, "10.0.0.12:1234").await?;
    let _w3 = jdbc_server(&reg, line, NodeKind::Worker, "10.0.0.13:1234").await?;
    let _w4 = jdbc_server(&reg, line, NodeKind::Worker, "10.0.0.14:1234").await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let first = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let second = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;
    let cfg = format!("{CONFIG}[brake]\nmax_lost_worker_fraction = 0.9\n");
    two_replicas_kill_takeover(
        &db,
        "/unused",
        &cfg,
        (first, second),
        || async move { w1.crash().await },
        || async move { w2.crash().await },
    )
    .await?;
    db.drop().await
}
