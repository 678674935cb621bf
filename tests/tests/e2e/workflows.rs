//! Workflow instances that cannot progress (SPEC §13), end to end on the
//! real schemas, each line on each database: a workflow whose master is lost
//! is handed back with exactly DS's master-failover rows for the line; one
//! whose master lives, one already in DS's hands ('NULL') and one with a
//! task live on a live worker are never written; a stalled one is reported
//! and never written.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::NodeKind;
use reaper_e2e::*;

const POLICY: &str = "[policy]\nworkflow_master_lost = \"recover\"\n";
const ENV: &[(&str, &str)] = &[
    ("DS_REAPER__RECONCILE__WORKFLOW_GRACE_PERIOD", "2s"),
    ("DS_REAPER__RECONCILE__WORKFLOW_STALL_AFTER", "2s"),
];

fn wf(host: Option<&str>) -> WorkflowSpec {
    WorkflowSpec {
        host: host.map(str::to_string),
        ..WorkflowSpec::default()
    }
}

async fn recover_per_line(kind: SimKind, fixture: &str) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(kind, fixture).await?;
    let root = unique_root();
    let result = check_line(&db, &root, fixture).await;
    cleanup(db, &root).await?;
    result
}

async fn check_line(db: &ds_sim::db::SimDb, root: &str, fixture: &str) -> anyhow::Result<()> {
    let line = db.line;
    let root = root.to_string();
    let groups: &[&str] = if line.layout() == reaper_core::RegistryLayout::Grouped {
        &["default"]
    } else {
        &[]
    };
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", groups).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", groups).await?;
    // master gone, nothing of it running: recover
    let lost = db.insert_workflow(&wf(Some("10.0.0.9:5678"))).await?;
    // master alive and a task running: nothing
    let alive = db.insert_workflow(&wf(Some("10.0.0.1:5678"))).await?;
    db.insert_task(&TaskSpec::new(alive, 1, Some("10.0.0.11:1234")))
        .await?;
    // already in DS's failover hands
    let ds_hands = db.insert_workflow(&wf(Some("NULL"))).await?;
    // master gone, but a task of it still runs on a live worker: downgraded
    let busy = db.insert_workflow(&wf(Some("10.0.0.8:5678"))).await?;
    db.insert_task(&TaskSpec::new(busy, 1, Some("10.0.0.12:1234")))
        .await?;
    // master alive, no live task, no progress for long: stalled, report only
    let stalled = db.insert_workflow(&wf(Some("10.0.0.1:5678"))).await?;

    let mut d = Daemon::start_with_env(db.url(), &root, POLICY, ENV).await?;
    d.wait_ready().await?;
    wait_until(
        &format!("{fixture}: the lost master's workflow recovered"),
        || async { Ok(!d.audit_events("done", None).is_empty()) },
    )
    .await?;
    d.wait_sweeps(2).await?;

    let cmds = db.commands().await?;
    assert_eq!(cmds.len(), 1, "{fixture}: one command: {cmds:#?}");
    let c = &cmds[0];
    assert_eq!(c["command_type"].as_deref(), Some("2"), "{c:#?}");
    let names_lost = |c: &ds_sim::db::CommandView| {
        ["process_instance_id", "workflow_instance_id"]
            .iter()
            .any(|k| c.get(*k).and_then(|v| v.as_deref()) == Some(&lost.to_string()))
            || c.get("command_param")
                .and_then(|v| v.as_deref())
                .is_some_and(|p| p.contains(&format!("\"ProcessInstanceId\":{lost}")))
    };
    assert!(
        names_lost(c),
        "{fixture}: the command is for workflow {lost}: {c:#?}"
    );
    let state = |id: i64| async move { db.workflow_col(id, "state").await };
    let host = |id: i64| async move { db.workflow_col(id, "host").await };
    if line == reaper_core::DsLine::V3_3 {
        // 3.3: state FAILOVER (18), command 2 with its JSON param
        assert_eq!(state(lost).await?.as_deref(), Some("18"), "{fixture}");
        let param = c["command_param"].clone().unwrap_or_default();
        assert!(param.contains("RECOVER_TOLERANCE_FAULT"), "{param}");
        assert!(
            param.contains("\"workflowExecutionStatus\":\"RUNNING_EXECUTION\""),
            "{param}"
        );
    } else {
        // ≤ 3.2: host 'NULL', state kept, command 2
        assert_eq!(host(lost).await?.as_deref(), Some("NULL"), "{fixture}");
        assert_eq!(state(lost).await?.as_deref(), Some("1"), "{fixture}");
    }
    for (id, want_host) in [
        (alive, "10.0.0.1:5678"),
        (ds_hands, "NULL"),
        (busy, "10.0.0.8:5678"),
        (stalled, "10.0.0.1:5678"),
    ] {
        assert_eq!(
            host(id).await?.as_deref(),
            Some(want_host),
            "{fixture}: {id}"
        );
        assert_eq!(state(id).await?.as_deref(), Some("1"), "{fixture}: {id}");
    }
    // what the API shows
    let doc = d.json("/api/v1/workflows").await?;
    let found = doc["workflows"].as_array().cloned().unwrap_or_default();
    let by_id = |id: i64| {
        found
            .iter()
            .find(|w| w["workflow_instance_id"] == id)
            .cloned()
    };
    let b = by_id(busy).unwrap_or_else(|| panic!("{fixture}: busy workflow listed: {doc:#}"));
    assert_eq!(b["reason"], "workflow_master_lost");
    assert_eq!(b["action"], "report", "downgraded: {b:#}");
    assert!(
        b["note"]
            .as_str()
            .is_some_and(|n| n.contains("10.0.0.12:1234")),
        "{b:#}"
    );
    let s = by_id(stalled).unwrap_or_else(|| panic!("{fixture}: stalled listed: {doc:#}"));
    assert_eq!(s["reason"], "workflow_stalled");
    assert_eq!(s["action"], "report");
    assert!(
        by_id(alive).is_none() && by_id(ds_hands).is_none(),
        "{doc:#}"
    );
    let done = d.audit_events("done", None);
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["kind"], "workflow");
    assert_eq!(done[0]["workflow_instance_id"], lost);
    assert!(
        d.metric0("ds_reaper_workflow_actions_total{action=\"recover\",result=\"ok\"}")
            .await?
            == 1.0
    );
    assert_eq!(d.terminate().await?, Some(0));
    Ok(())
}

macro_rules! per_line {
    ($($name:ident: $kind:expr, $fixture:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() -> anyhow::Result<()> {
            recover_per_line($kind, $fixture).await
        }
    )*};
}

per_line! {
    mysql_1_3_9: SimKind::MySql, "1.3.9";
    pg_1_3_9: SimKind::Postgres, "1.3.9";
    mysql_2_0_9: SimKind::MySql, "2.0.9";
    pg_2_0_9: SimKind::Postgres, "2.0.9";
    mysql_3_1_9: SimKind::MySql, "3.1.9";
    pg_3_1_9: SimKind::Postgres, "3.1.9";
    mysql_3_2_2: SimKind::MySql, "3.2.2";
    pg_3_2_2: SimKind::Postgres, "3.2.2";
    mysql_dev: SimKind::MySql, "dev";
    pg_dev: SimKind::Postgres, "dev";
}
