//! The `ds-reaper` binary against a simulated cluster (SPEC §3–§8).

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::zk::SimServer;
use reaper_core::NodeKind;
use reaper_e2e::*;

fn long_ago() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_700_000_000 - 3600, 0).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_worker_tasks_are_failed_and_others_untouched() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let zk = zk_connect();
    let _m = SimServer::register(
        &zk,
        &root,
        line,
        NodeKind::Master,
        "10.0.0.1:5678",
        &[],
        long_ago(),
    )
    .await?;
    let mut w1 = SimServer::register(
        &zk,
        &root,
        line,
        NodeKind::Worker,
        "10.0.0.11:1234",
        &[],
        long_ago(),
    )
    .await?;
    let _w2 = SimServer::register(
        &zk,
        &root,
        line,
        NodeKind::Worker,
        "10.0.0.12:1234",
        &[],
        long_ago(),
    )
    .await?;
    let _w3 = SimServer::register(
        &zk,
        &root,
        line,
        NodeKind::Worker,
        "10.0.0.13:1234",
        &[],
        long_ago(),
    )
    .await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let t2 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;
    let t3 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.13:1234")))
        .await?;

    let d = Daemon::start(db.url(), &root, "[policy]\nworker_lost = \"fail\"\n").await?;
    d.wait_ready().await?;
    assert_eq!(
        db.task_state(t1).await?.state,
        1,
        "nothing is written while w1 lives"
    );

    w1.crash().await;
    wait_until("task on the lost worker failed", || async {
        Ok(db.task_state(t1).await?.state == 6)
    })
    .await?;
    let s1 = db.task_state(t1).await?;
    assert!(s1.end_time.is_some(), "fail writes end_time");
    assert_eq!(db.task_state(t2).await?.state, 1);
    assert_eq!(db.task_state(t3).await?.state, 1);
    d.wait_metric(
        "ds_reaper_actions_total{action=\"fail\",result=\"ok\"}",
        |v| v == 1.0,
    )
    .await?;
    let audit = d.audit();
    let events: Vec<_> = audit
        .iter()
        .filter(|r| r["task_id"] == t1)
        .map(|r| r["event"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(events, ["detected", "intent", "done"], "{audit:#?}");
    let done = audit.iter().find(|r| r["event"] == "done").unwrap();
    assert_eq!(done["reason"], "worker_lost");
    assert_eq!(done["from_state"], "RUNNING_EXECUTION");
    assert_eq!(done["to_state"], "FAILURE");
    assert_eq!(done["actor"], "daemon");
    assert_eq!(done["ds_line"], "3.2");
    assert!(done["evidence"]["lost_at"].is_string());

    let mut d = d;
    assert_eq!(d.terminate().await?, Some(0), "SIGTERM → exit 0");
    db.drop().await?;
    Ok(())
}
