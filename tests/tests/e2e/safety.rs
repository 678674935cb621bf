//! More reasons and safety rules (SPEC §3, §4, §9): a stale heartbeat, a row
//! without host, the rate limit, a ZooKeeper outage, and a metrics exposition
//! clean under promtool.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::zk::{SimOptions, SimServer};
use ds_sim::zkserver::PrivateZk;
use reaper_core::NodeKind;
use reaper_e2e::*;
use std::time::Duration;

/// SPEC §3 `heartbeat_stale`: a live node whose `reportTime` stopped moving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_heartbeat_is_heartbeat_stale() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "2.0.9").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let t2 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;
    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "[policy]\nheartbeat_stale = \"fail\"\n",
        &[("DS_REAPER__RECONCILE__HEARTBEAT_STALE_AFTER", "4s")],
    )
    .await?;
    d.wait_ready().await?;
    d.wait_sweeps(2).await?;
    assert_eq!(
        db.task_state(t1).await?.state,
        1,
        "fresh heartbeat: untouched"
    );

    w1.freeze_heartbeat();
    wait_until("task on the hung worker failed", || async {
        Ok(db.task_state(t1).await?.state == 6)
    })
    .await?;
    assert_eq!(db.task_state(t2).await?.state, 1);
    let done = d.audit_events("done", Some(t1));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["reason"], "heartbeat_stale");
    assert!(
        done[0]["evidence"]["report_time"].is_string(),
        "{:#}",
        done[0]
    );
    assert_eq!(done[0]["ds_line"], "2.0");
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §3 `no_host`: a row without host for longer than `no_host_after`;
/// one with no submit/start time is never judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_without_host_is_no_host() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "3.1.9").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let old = db.insert_task(&TaskSpec::new(wf, 1, None)).await?;
    let empty = db.insert_task(&TaskSpec::new(wf, 1, Some("  "))).await?;
    let mut recent = TaskSpec::new(wf, 1, None);
    recent.submit_time = Some(chrono::Utc::now().naive_utc());
    recent.start_time = None;
    let recent = db.insert_task(&recent).await?;
    let mut timeless = TaskSpec::new(wf, 1, None);
    timeless.submit_time = None;
    timeless.start_time = None;
    let timeless = db.insert_task(&timeless).await?;

    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "",
        &[("DS_REAPER__RECONCILE__NO_HOST_AFTER", "10m")],
    )
    .await?;
    d.wait_ready().await?;
    d.wait_metric("ds_reaper_zombies{reason=\"no_host\"}", |v| v == 2.0)
        .await?;
    d.wait_sweeps(2).await?;
    assert_eq!(
        d.metric0("ds_reaper_zombies{reason=\"no_host\"}").await?,
        2.0
    );
    let z = d.json("/api/v1/zombies").await?;
    let mut ids: Vec<i64> = z["zombies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|z| z["task_id"].as_i64())
        .collect();
    ids.sort();
    assert_eq!(ids, [old, empty], "{z:#}");
    for t in [old, empty, recent, timeless] {
        assert_eq!(db.task_state(t).await?.state, 1, "report writes nothing");
    }
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §4.5: `rate.per_minute` is a token bucket holding at most that many
/// tokens: with 2 per minute, only 2 of 4 zombies are written at once, the
/// rest are shown as rate-limited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_caps_writes() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(
            db.insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
                .await?,
        );
    }
    let mut d = Daemon::start(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\n[rate]\nper_minute = 2\n",
    )
    .await?;
    d.wait_ready().await?;
    d.wait_metric(
        "ds_reaper_actions_total{action=\"fail\",result=\"ok\"}",
        |v| v >= 2.0,
    )
    .await?;
    // A few sweeps later (far less than the 30 s a new token takes).
    d.wait_sweeps(3).await?;
    let mut failed = 0;
    for t in &tasks {
        if db.task_state(*t).await?.state == 6 {
            failed += 1;
        }
    }
    assert_eq!(failed, 2, "two tokens, two writes");
    let z = d.json("/api/v1/zombies").await?;
    let zs = z["zombies"].as_array().expect("zombies");
    assert_eq!(zs.len(), 2, "{z:#}");
    assert!(
        zs.iter().all(|z| z["disposition"] == "blocked:rate_limit"),
        "{z:#}"
    );
    assert_eq!(d.audit_events("done", None).len(), 2);
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §4.1: no action without a valid registry view. While ZooKeeper is
/// down the view is invalid, /readyz says so, and nothing is written even
/// though the lost worker's grace period passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_outage_invalidates_the_view_and_blocks_writes() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let mut zk = PrivateZk::start().await?;
    let connect = zk.connect_string();
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let opts = || SimOptions {
        zone: "UTC".parse().expect("UTC is a zone"),
        session_timeout: Duration::from_secs(4),
        ..Default::default()
    };
    let reg = |host: &'static str, kind| {
        let connect = connect.clone();
        let root = root.clone();
        async move {
            SimServer::register_with(&connect, &root, (line, kind), host, &[], long_ago(), opts())
                .await
        }
    };
    let _m = reg("10.0.0.1:5678", NodeKind::Master).await?;
    let _w1 = reg("10.0.0.11:1234", NodeKind::Worker).await?;
    let _w2 = reg("10.0.0.12:1234", NodeKind::Worker).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\n",
        &[("DS_REAPER__ZOOKEEPER__CONNECT", connect.as_str())],
    )
    .await?;
    d.wait_ready().await?;
    assert_eq!(d.metric0("ds_reaper_registry_view_valid").await?, 1.0);

    zk.stop().await?;
    wait_until("view invalid and not ready", || async {
        let (code, body) = d.get("/readyz").await?;
        Ok(code == 503 && body.contains("registry"))
    })
    .await?;
    assert_eq!(d.metric0("ds_reaper_registry_view_valid").await?, 0.0);
    let st = d.json("/api/v1/status").await?;
    assert_eq!(st["registry_view"]["valid"], false, "{st:#}");
    assert!(st["registry_view"]["reason"].is_string(), "{st:#}");
    // Well past the grace period and the sim sessions' timeout: still nothing.
    hold(
        "no write without a view, past the grace and the sessions' timeout",
        Duration::from_secs(6),
    )
    .await;
    assert_eq!(db.task_state(t1).await?.state, 1, "no write without a view");
    assert!(d.audit_events("intent", None).is_empty());
    assert_eq!(
        d.metric0("ds_reaper_actions_total{action=\"fail\",result=\"ok\"}")
            .await?,
        0.0
    );
    let (code, _) = d.get("/healthz").await?;
    assert_eq!(code, 200, "alive while not ready");

    zk.start_again().await?;
    d.wait_metric("ds_reaper_registry_view_valid", |v| v == 1.0)
        .await?;
    wait_until("ready again", || async {
        Ok(d.get("/readyz").await?.0 == 200)
    })
    .await?;
    assert_eq!(d.terminate().await?, Some(0));
    cleanup_db_only(db).await
}

async fn cleanup_db_only(db: ds_sim::db::SimDb) -> anyhow::Result<()> {
    db.drop().await
}

/// SPEC §9: the exposition is clean under `promtool check metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Ok(promtool) = which("promtool") else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("promtool missing (CI=true)");
        }
        eprintln!("SKIPPED: promtool not installed");
        return Ok(());
    };
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    db.insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
        .await?;
    let mut d = Daemon::start(db.url(), &root, "[policy]\nworker_lost = \"fail\"\n").await?;
    d.wait_ready().await?;
    d.wait_metric(
        "ds_reaper_actions_total{action=\"fail\",result=\"ok\"}",
        |v| v == 1.0,
    )
    .await?;
    let (_, text) = d.get("/metrics").await?;
    for name in [
        "ds_reaper_zombies",
        "ds_reaper_zombies_detected_total",
        "ds_reaper_actions_total",
        "ds_reaper_candidates",
        "ds_reaper_live_workers",
        "ds_reaper_live_masters",
        "ds_reaper_workers_lost_total",
        "ds_reaper_sweeps_total",
        "ds_reaper_sweep_duration_seconds",
        "ds_reaper_last_sweep_timestamp_seconds",
        "ds_reaper_registry_view_valid",
        "ds_reaper_zk_session_expirations_total",
        "ds_reaper_leader",
        "ds_reaper_brake_engaged",
        "ds_reaper_db_errors_total",
        "ds_reaper_zk_errors_total",
        "ds_reaper_build_info",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "metric {name} missing:\n{text}"
        );
    }
    assert!(
        text.contains("ds_reaper_build_info{") && text.contains("ds_line=\"3.2\""),
        "{text}"
    );
    assert_eq!(d.metric0("ds_reaper_live_workers").await?, 1.0);
    assert_eq!(d.metric0("ds_reaper_live_masters").await?, 1.0);
    assert_eq!(d.metric0("ds_reaper_leader").await?, 1.0);
    let mut child = tokio::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(text.as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

fn which(name: &str) -> anyhow::Result<std::path::PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow::anyhow!("{name} not found"))
}
