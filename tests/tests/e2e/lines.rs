//! Coverage across DS lines and databases (SPEC §2, §5): the 1.3 grouped
//! layout with its CSV heartbeat on MySQL, and 3.3 (pre-release, released
//! 3.3.2 and 3.4.0, on both databases) with the `recover` follow-up and its
//! downgrade when the owning master is alive.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::NodeKind;
use reaper_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_3_grouped_layout_mysql_fail_and_recover() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "1.3.9").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    // w1 in two groups: two nodes, one host.
    let mut w1 = server(
        &root,
        line,
        NodeKind::Worker,
        "10.0.0.11:1234",
        &["default", "gpu"],
    )
    .await?;
    let _w2 = server(
        &root,
        line,
        NodeKind::Worker,
        "10.0.0.12:1234",
        &["default"],
    )
    .await?;
    let _w3 = server(&root, line, NodeKind::Worker, "10.0.0.13:1234", &["gpu"]).await?;
    assert_eq!(
        w1.paths(),
        [
            format!("{root}/nodes/worker/default/10.0.0.11:1234"),
            format!("{root}/nodes/worker/gpu/10.0.0.11:1234")
        ]
    );
    // wf_a's master is gone (recover applies); wf_b's is the live one.
    let wf_a = db
        .insert_workflow(&WorkflowSpec {
            host: Some("10.0.0.9:5678".into()),
            ..WorkflowSpec::default()
        })
        .await?;
    let wf_b = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut spec = TaskSpec::new(wf_a, 1, Some("10.0.0.11:1234"));
    spec.worker_group = "gpu".into();
    let t1 = db.insert_task(&spec).await?;
    let t2 = db
        .insert_task(&TaskSpec::new(wf_b, 1, Some("10.0.0.12:1234")))
        .await?;
    let mut spec = TaskSpec::new(wf_b, 1, Some("10.0.0.13:1234"));
    spec.worker_group = "gpu".into();
    let t3 = db.insert_task(&spec).await?;

    let mut d = Daemon::start(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\nworker_restarted = \"fail\"\nheartbeat_stale = \"fail\"\nworkflow = \"recover\"\n",
    )
    .await?;
    d.wait_ready().await?;
    let status = d.json("/api/v1/status").await?;
    assert_eq!(status["ds_line"], "1.3", "{status:#}");
    // The 10-field CSV heartbeat parsed: startup times in UTC, one entry per host.
    let w = d.json("/api/v1/workers").await?;
    let workers = w["workers"].as_array().expect("workers");
    assert_eq!(workers.len(), 3, "{w:#}");
    for x in workers {
        let st = x["startup_time"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .unwrap_or_else(|| panic!("startup_time of {x:#}"));
        assert_eq!(st.timestamp(), long_ago().timestamp(), "{x:#}");
    }
    d.wait_sweeps(2).await?;
    for t in [t1, t2, t3] {
        assert_eq!(
            db.task_state(t).await?.state,
            1,
            "healthy cluster: untouched"
        );
    }
    assert!(db.commands().await?.is_empty());

    w1.crash().await;
    wait_until("task on the lost grouped worker failed", || async {
        Ok(db.task_state(t1).await?.state == 6)
    })
    .await?;
    assert!(db.task_state(t1).await?.end_time.is_some());
    assert_eq!(db.task_state(t2).await?.state, 1);
    assert_eq!(db.task_state(t3).await?.state, 1);
    let done = d.audit_events("done", Some(t1));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["ds_line"], "1.3");
    assert_eq!(done[0]["worker_group"], "gpu");
    assert_eq!(done[0]["from_state"], "RUNNING_EXECUTION");
    assert_eq!(done[0]["workflow"], "recover");

    // recover on 1.3.9: the workflow failed, then command 4 with the
    // instance id in command_param (reference §5.1).
    assert_eq!(db.workflow_col(wf_a, "state").await?.as_deref(), Some("6"));
    assert!(db.workflow_col(wf_a, "end_time").await?.is_some());
    let cmds = db.commands().await?;
    assert_eq!(cmds.len(), 1, "{cmds:#?}");
    let c = &cmds[0];
    assert_eq!(c["command_type"].as_deref(), Some("4"), "{c:#?}");
    assert_eq!(
        c["process_definition_id"].as_deref(),
        Some("9001"),
        "{c:#?}"
    );
    let param: serde_json::Value =
        serde_json::from_str(c["command_param"].as_deref().unwrap_or("null"))?;
    assert_eq!(param["ProcessInstanceId"], wf_a, "{c:#?}");
    assert_eq!(db.workflow_col(wf_b, "state").await?.as_deref(), Some("1"));

    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_3_postgres_recover_and_its_downgrade() -> anyhow::Result<()> {
    v3_3_recover_and_its_downgrade(SimKind::Postgres, "dev").await
}

/// The released 3.3.2 (no `test_flag`, no `is_cache`/`cache_key`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_3_2_mysql_recover_and_its_downgrade() -> anyhow::Result<()> {
    v3_3_recover_and_its_downgrade(SimKind::MySql, "3.3.2").await
}

/// The released 3.4.0 (as 3.3.2, plus `t_ds_serial_command`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_4_0_postgres_recover_and_its_downgrade() -> anyhow::Result<()> {
    v3_3_recover_and_its_downgrade(SimKind::Postgres, "3.4.0").await
}

async fn v3_3_recover_and_its_downgrade(kind: SimKind, fixture: &str) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(kind, fixture).await?;
    let line = db.line;
    let root = unique_root();
    // Only 10.0.0.2 is a live master; 10.0.0.1 is gone.
    let _m = server(&root, line, NodeKind::Master, "10.0.0.2:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    let gone_owner = db
        .insert_workflow(&WorkflowSpec {
            host: Some("10.0.0.1:5678".into()),
            ..WorkflowSpec::default()
        })
        .await?;
    let null_owner = db
        .insert_workflow(&WorkflowSpec {
            host: Some("NULL".into()),
            ..WorkflowSpec::default()
        })
        .await?;
    let live_owner = db
        .insert_workflow(&WorkflowSpec {
            host: Some("10.0.0.2:5678".into()),
            ..WorkflowSpec::default()
        })
        .await?;
    let lost_host = "10.0.0.66:1234";
    let t_gone = db
        .insert_task(&TaskSpec::new(gone_owner, 1, Some(lost_host)))
        .await?;
    let t_null = db
        .insert_task(&TaskSpec::new(null_owner, 1, Some(lost_host)))
        .await?;
    let t_live = db
        .insert_task(&TaskSpec::new(live_owner, 1, Some(lost_host)))
        .await?;
    let policy = "[policy]\nworker_lost = \"fail\"\nworkflow = \"recover\"\n";

    // check shows the follow-up policy would take, and why it is downgraded.
    let cfg = CliConfig::new(db.url(), &root, policy)?;
    let (code, out, err) = cfg.run(&["check", "--format", "json"], &[]).await?;
    assert_eq!(code, 1, "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(doc["ds_line"], "3.3");
    let zs = doc["zombies"].as_array().expect("zombies");
    assert_eq!(zs.len(), 3, "{doc:#}");
    let by_id = |id: i64| {
        zs.iter()
            .find(|z| z["task_id"] == id)
            .unwrap_or_else(|| panic!("zombie {id} in {doc:#}"))
    };
    for t in [t_gone, t_null] {
        let z = by_id(t);
        assert_eq!(z["action"], "fail", "{z:#}");
        assert_eq!(z["workflow"], "recover", "{z:#}");
        assert_eq!(z["owner_master_alive"], false, "{z:#}");
        assert!(z["note"].is_null(), "{z:#}");
    }
    let z = by_id(t_live);
    assert_eq!(z["action"], "fail", "{z:#}");
    assert_eq!(z["workflow"], "none", "downgraded: {z:#}");
    assert_eq!(z["owner_master"], "10.0.0.2:5678");
    assert_eq!(z["owner_master_alive"], true);
    assert!(
        z["note"].as_str().is_some_and(|n| n.contains("alive")),
        "the note says why: {z:#}"
    );

    let mut d = Daemon::start(db.url(), &root, policy).await?;
    d.wait_ready().await?;
    wait_until("all three zombies failed", || async {
        for t in [t_gone, t_null, t_live] {
            if db.task_state(t).await?.state != 6 {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    wait_until("two recover commands", || async {
        Ok(db.commands().await?.len() >= 2)
    })
    .await?;
    d.wait_sweeps(2).await?;

    // 3.3 recover (reference §5.4): workflow state 0, run_times + 1,
    // restart_time set, end_time NULL, then command 4 without a param.
    for wf in [gone_owner, null_owner] {
        assert_eq!(db.workflow_col(wf, "state").await?.as_deref(), Some("0"));
        assert_eq!(
            db.workflow_col(wf, "run_times").await?.as_deref(),
            Some("2")
        );
        assert!(db.workflow_col(wf, "restart_time").await?.is_some());
        assert!(db.workflow_col(wf, "end_time").await?.is_none());
    }
    let cmds = db.commands().await?;
    assert_eq!(
        cmds.len(),
        2,
        "one command per recovered workflow: {cmds:#?}"
    );
    let mut wf_ids: Vec<String> = Vec::new();
    for c in &cmds {
        assert_eq!(c["command_type"].as_deref(), Some("4"), "{c:#?}");
        assert_eq!(
            c["workflow_definition_code"].as_deref(),
            Some("9001"),
            "{c:#?}"
        );
        assert_eq!(
            c["workflow_definition_version"].as_deref(),
            Some("3"),
            "{c:#?}"
        );
        assert_eq!(c["executor_id"].as_deref(), Some("7"), "{c:#?}");
        assert!(c["command_param"].is_none(), "{c:#?}");
        wf_ids.push(c["workflow_instance_id"].clone().unwrap_or_default());
    }
    wf_ids.sort();
    let mut want = vec![gone_owner.to_string(), null_owner.to_string()];
    want.sort();
    assert_eq!(wf_ids, want);

    // The live owner's workflow: task failed, workflow untouched, no command.
    assert_eq!(
        db.workflow_col(live_owner, "state").await?.as_deref(),
        Some("1")
    );
    assert_eq!(
        db.workflow_col(live_owner, "run_times").await?.as_deref(),
        Some("1")
    );
    let done = d.audit_events("done", Some(t_live));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["workflow"], "none");
    assert!(
        done[0]["detail"]
            .as_str()
            .is_some_and(|s| s.contains("recover skipped")),
        "the audit says why: {:#}",
        done[0]
    );
    let done = d.audit_events("done", Some(t_gone));
    assert_eq!(done[0]["workflow"], "recover");
    assert_eq!(done[0]["ds_line"], "3.3");

    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}
