//! What happens after a task write (SPEC §5): 1.2's task queue, the
//! fault-tolerance path with `recover`, and the workflow `fail` follow-up.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::zk::{add_task_queue_entry, task_queue_entries};
use reaper_core::NodeKind;
use reaper_e2e::*;

/// 1.2.x: `fail` also removes the task's `tasks_queue` entries, and only its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_2_fail_removes_the_task_queue_entries() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "1.2.1").await?;
    let line = db.line;
    let root = unique_root();
    let zk = zk_connect();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1", &[]).await?;
    let mut w1 = server(&root, line, NodeKind::Worker, "10.0.0.11", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12", &[]).await?;
    let _w3 = server(&root, line, NodeKind::Worker, "10.0.0.13", &[]).await?;
    assert_eq!(w1.paths(), [format!("{root}/workers/10.0.0.11")]);
    let wf = db
        .insert_workflow(&WorkflowSpec {
            host: Some("10.0.0.1".into()),
            ..WorkflowSpec::default()
        })
        .await?;
    let t1 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11")))
        .await?;
    let t2 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12")))
        .await?;
    let e1 = add_task_queue_entry(&zk, &root, 1, wf, 2, t1, "-1").await?;
    let e2 = add_task_queue_entry(&zk, &root, 1, wf, 2, t2, "-1").await?;
    let name = |p: &str| p.rsplit('/').next().unwrap_or_default().to_string();
    let mut before = task_queue_entries(&zk, &root).await?;
    before.sort();
    assert_eq!(before.len(), 2);

    let mut d = Daemon::start(db.url(), &root, "[policy]\nworker_lost = \"fail\"\n").await?;
    d.wait_ready().await?;
    assert_eq!(d.json("/api/v1/status").await?["ds_line"], "1.2");
    w1.crash().await;
    wait_until("task on the lost 1.2 worker failed", || async {
        Ok(db.task_state(t1).await?.state == 6)
    })
    .await?;
    wait_until("its queue entry removed", || async {
        Ok(!task_queue_entries(&zk, &root).await?.contains(&name(&e1)))
    })
    .await?;
    assert_eq!(
        task_queue_entries(&zk, &root).await?,
        [name(&e2)],
        "the other task's entry stays"
    );
    assert_eq!(db.task_state(t2).await?.state, 1);
    let done = d.audit_events("done", Some(t1));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["ds_line"], "1.2");
    assert!(
        done[0]["detail"]
            .as_str()
            .is_some_and(|s| s.contains("tasks_queue")),
        "{:#}",
        done[0]
    );
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// 2.0: `fault-tolerance` writes NEED_FAULT_TOLERANCE (8) and leaves flag and
/// end_time; `recover` then takes DS's master-failover path: workflow
/// `host = 'NULL'`, command 2 with the instance id (reference §5.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_0_fault_tolerance_with_recover() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "2.0.9").await?;
    let line = db.line;
    let root = unique_root();
    // The workflow's owner 10.0.0.1 is gone; another master lives.
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.2:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;

    let mut d = Daemon::start(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fault-tolerance\"\nworkflow = \"recover\"\n",
    )
    .await?;
    d.wait_ready().await?;
    w1.crash().await;
    wait_until("task marked for fault tolerance", || async {
        Ok(db.task_state(t1).await?.state == 8)
    })
    .await?;
    let s = db.task_state(t1).await?;
    assert_eq!(s.flag, 1, "flag left as it is");
    assert!(s.end_time.is_none(), "end_time left as it is");
    wait_until("failover command", || async {
        Ok(!db.commands().await?.is_empty())
    })
    .await?;
    assert_eq!(db.workflow_col(wf, "host").await?.as_deref(), Some("NULL"));
    assert_eq!(db.workflow_col(wf, "state").await?.as_deref(), Some("1"));
    let cmds = db.commands().await?;
    assert_eq!(cmds.len(), 1, "{cmds:#?}");
    let c = &cmds[0];
    assert_eq!(c["command_type"].as_deref(), Some("2"), "{c:#?}");
    assert_eq!(
        c["process_instance_id"].as_deref(),
        Some(wf.to_string().as_str())
    );
    assert_eq!(c["process_definition_code"].as_deref(), Some("9001"));
    assert_eq!(c["process_definition_version"].as_deref(), Some("3"));
    let param: serde_json::Value =
        serde_json::from_str(c["command_param"].as_deref().unwrap_or("null"))?;
    assert_eq!(param["ProcessInstanceId"], wf, "{c:#?}");
    let done = d.audit_events("done", Some(t1));
    assert_eq!(done[0]["to_state"], "NEED_FAULT_TOLERANCE");
    assert_eq!(done[0]["action"], "fault-tolerance");
    // No second command while one is queued.
    d.wait_sweeps(3).await?;
    assert_eq!(db.commands().await?.len(), 1);
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// `workflow = "fail"`: the workflow instance fails only when none of its
/// other current task rows is still live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_fail_only_when_no_other_task_lives() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let alone = db.insert_workflow(&WorkflowSpec::default()).await?;
    let busy = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t_alone = db
        .insert_task(&TaskSpec::new(alone, 1, Some("10.9.9.9:1234")))
        .await?;
    // An older finished attempt of the same task does not keep it alive.
    let mut old = TaskSpec::new(alone, 6, Some("10.0.0.11:1234"));
    old.flag = 0;
    db.insert_task(&old).await?;
    let t_busy = db
        .insert_task(&TaskSpec::new(busy, 1, Some("10.9.9.9:1234")))
        .await?;
    let t_sibling = db
        .insert_task(&TaskSpec::new(busy, 1, Some("10.0.0.11:1234")))
        .await?;

    let mut d = Daemon::start(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\nworkflow = \"fail\"\n",
    )
    .await?;
    d.wait_ready().await?;
    wait_until("both zombies failed", || async {
        Ok(db.task_state(t_alone).await?.state == 6 && db.task_state(t_busy).await?.state == 6)
    })
    .await?;
    wait_until("the lone workflow failed", || async {
        Ok(db.workflow_col(alone, "state").await?.as_deref() == Some("6"))
    })
    .await?;
    assert!(db.workflow_col(alone, "end_time").await?.is_some());
    d.wait_sweeps(2).await?;
    assert_eq!(
        db.workflow_col(busy, "state").await?.as_deref(),
        Some("1"),
        "a sibling task still runs"
    );
    assert_eq!(db.task_state(t_sibling).await?.state, 1);
    assert!(db.commands().await?.is_empty(), "fail inserts no command");
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}
