//! Edge cases of judging (SPEC §2, §3, §6, §7): live states per line, a line
//! disagreement hold, an unparsable heartbeat, `run` with a bad config, `version`.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::{DsLine, NodeKind};
use reaper_e2e::*;

/// Unset `reconcile.states` is RUNNING_EXECUTION plus DISPATCH on 3.0+;
/// other live states (SUBMITTED_SUCCESS) are not candidates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_states_include_dispatch_only() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let dispatch = db
        .insert_task(&TaskSpec::new(wf, 17, Some("10.9.9.9:1234")))
        .await?;
    let submitted = db
        .insert_task(&TaskSpec::new(wf, 0, Some("10.9.9.9:1234")))
        .await?;
    let mut d = Daemon::start(db.url(), &root, "[policy]\nworker_lost = \"fail\"\n").await?;
    d.wait_ready().await?;
    wait_until("DISPATCH zombie failed", || async {
        Ok(db.task_state(dispatch).await?.state == 6)
    })
    .await?;
    d.wait_sweeps(2).await?;
    assert_eq!(db.task_state(submitted).await?.state, 0, "not a candidate");
    let done = d.audit_events("done", Some(dispatch));
    assert_eq!(done[0]["from_state"], "DISPATCH");
    assert!(d.audit().iter().all(|r| r["task_id"] != submitted));
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §2: when the schema and the registry disagree on the line, the
/// daemon says so and acts on nothing until the version is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn line_disagreement_holds_every_action() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    // A 3.2 schema, but servers registered the 1.3 way (grouped, CSV).
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let root = unique_root();
    let _m = server(&root, DsLine::V1_3, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, DsLine::V1_3, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
        .await?;
    let mut d = Daemon::start(db.url(), &root, "[policy]\nworker_lost = \"fail\"\n").await?;
    wait_until("the hold shows in the status", || async {
        let s = d.json("/api/v1/status").await?;
        Ok(s["ds_line_hold"].is_string())
    })
    .await?;
    d.wait_metric("ds_reaper_zombies{reason=\"worker_lost\"}", |v| v == 1.0)
        .await?;
    d.wait_sweeps(3).await?;
    assert_eq!(db.task_state(t).await?.state, 1, "held: nothing written");
    assert!(d.audit_events("intent", None).is_empty());
    let s = d.json("/api/v1/status").await?;
    let hold = s["ds_line_hold"].as_str().unwrap_or_default();
    assert!(hold.contains("disagree"), "{s:#}");
    let log = d.log_text();
    assert!(
        log.contains("disagree"),
        "the daemon says so in its log:\n{log}"
    );
    assert_eq!(d.terminate().await?, Some(0));

    // check says the same and never writes; reap refuses.
    let cfg = CliConfig::new(db.url(), &root, "")?;
    let (code, out, err) = cfg
        .run(&["reap", "--task-id", &t.to_string(), "--yes"], &[])
        .await?;
    assert_eq!(code, 1, "reap refuses under a hold: {out}{err}");
    assert_eq!(db.task_state(t).await?.state, 1);
    cleanup(db, &root).await
}

/// SPEC §2: a node whose data cannot be parsed counts as present (its tasks
/// are not lost) and never crashes the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_heartbeat_counts_as_present() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.1.9").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    w1.set_raw_data(b"{\"startupTime\": \"yesterday\", garbage")
        .await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let on_garbled = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let control = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
        .await?;
    let mut d = Daemon::start(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\nworker_restarted = \"fail\"\nheartbeat_stale = \"fail\"\n",
    )
    .await?;
    d.wait_ready().await?;
    wait_until("control zombie failed", || async {
        Ok(db.task_state(control).await?.state == 6)
    })
    .await?;
    d.wait_sweeps(2).await?;
    assert_eq!(db.task_state(on_garbled).await?.state, 1);
    let w = d.json("/api/v1/workers").await?;
    let garbled = w["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|x| x["host"] == "10.0.0.11:1234"))
        .cloned()
        .unwrap_or_else(|| panic!("w1 listed as live: {w:#}"));
    assert!(garbled["startup_time"].is_null(), "{garbled:#}");
    assert_eq!(d.metric0("ds_reaper_live_workers").await?, 2.0);
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §6/§7: `run` with a bad config exits 2 at once, naming the problem;
/// `version` lists the supported lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_bad_config_exits_2_and_version() -> anyhow::Result<()> {
    let cfg = CliConfig::new("mysql://ds:ds@127.0.0.1:3306/x", "/nowhere", "")?;
    let (code, out, err) = cfg
        .run(
            &["run"],
            &[("DS_REAPER__BRAKE__MAX_LOST_WORKER_FRACTION", "2.5")],
        )
        .await?;
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("DS_REAPER__BRAKE__MAX_LOST_WORKER_FRACTION"),
        "{err}"
    );
    let bad = CliConfig::new(
        "mysql://ds:ds@127.0.0.1:3306/x",
        "/nowhere",
        "[typo_section]\nx = 1\n",
    )?;
    let (code, _, err) = bad.run(&["run"], &[]).await?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("typo_section"), "{err}");
    let (code, out, _) = run_cli(&["version"], &[]).await?;
    assert_eq!(code, 0);
    for l in ["1.2", "1.3", "2.0", "3.1", "3.2", "3.3"] {
        assert!(out.contains(l), "version lists {l}: {out}");
    }
    Ok(())
}
