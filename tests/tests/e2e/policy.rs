//! How the daemon judges and acts (SPEC §3–§5, §8–§10): the default report
//! policy, a flapping worker, a restarted worker, the brake, logic tasks.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::NodeKind;
use reaper_e2e::*;

const LOST: &str = "ds_reaper_zombies{reason=\"worker_lost\"}";
const LOST_TOTAL: &str = "ds_reaper_zombies_detected_total{reason=\"worker_lost\"}";

/// SPEC §5: `report` (the default) writes nothing but shows every zombie in
/// the gauge, the API and the audit trail, each detected once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_report_policy_writes_nothing_and_reports() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "3.1.9").await?;
    let line = db.line;
    let root = unique_root();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut spec = TaskSpec::new(wf, 1, Some("10.0.0.11:1234"));
    spec.name = "extract".into();
    spec.worker_group = "etl".into();
    let t1 = db.insert_task(&spec).await?;
    spec.name = "load".into();
    let t2 = db.insert_task(&spec).await?;
    let other = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;
    let before = [
        db.task_state(t1).await?,
        db.task_state(t2).await?,
        db.task_state(other).await?,
    ];

    let mut d = Daemon::start(db.url(), &root, "").await?;
    d.wait_ready().await?;
    assert_eq!(d.metric0(LOST).await?, 0.0, "no zombie while w1 lives");

    w1.crash().await;
    d.wait_metric(LOST, |v| v == 2.0).await?;

    let z = d.json("/api/v1/zombies").await?;
    let zs = z["zombies"].as_array().expect("zombies array");
    assert_eq!(zs.len(), 2, "{z:#}");
    let mut ids: Vec<i64> = zs.iter().filter_map(|z| z["task_id"].as_i64()).collect();
    ids.sort();
    assert_eq!(ids, [t1, t2]);
    for z in zs {
        for key in [
            "task_id",
            "task_name",
            "task_type",
            "workflow_instance_id",
            "state",
            "host",
            "worker_group",
            "submit_time",
            "reason",
            "evidence",
            "owner_master",
            "owner_master_alive",
            "action",
            "workflow",
            "note",
        ] {
            assert!(z.get(key).is_some(), "zombie lacks {key}: {z:#}");
        }
        assert_eq!(z["task_type"], "SHELL");
        assert_eq!(z["workflow_instance_id"], wf);
        assert_eq!(z["state"], "RUNNING_EXECUTION");
        assert_eq!(z["host"], "10.0.0.11:1234");
        assert_eq!(z["worker_group"], "etl");
        assert!(z["submit_time"].is_string(), "{z:#}");
        assert_eq!(z["reason"], "worker_lost");
        assert!(z["evidence"]["lost_at"].is_string(), "{z:#}");
        assert!(
            z["evidence"]["absent_for_seconds"]
                .as_i64()
                .is_some_and(|s| s >= 0),
            "{z:#}"
        );
        assert_eq!(z["owner_master"], "10.0.0.1:5678");
        assert_eq!(z["owner_master_alive"], true);
        assert_eq!(z["action"], "report");
        assert_eq!(z["workflow"], "none");
        assert!(z["note"].is_null(), "{z:#}");
    }
    let names: Vec<&str> = zs.iter().filter_map(|z| z["task_name"].as_str()).collect();
    assert!(
        names.contains(&"extract") && names.contains(&"load"),
        "{names:?}"
    );

    // Several more sweeps: still reported, never counted twice, never written.
    d.wait_sweeps(3).await?;
    assert_eq!(d.metric0(LOST).await?, 2.0);
    assert_eq!(d.metric0(LOST_TOTAL).await?, 2.0, "detected once per task");
    assert_eq!(
        d.metric0("ds_reaper_actions_total{action=\"fail\",result=\"ok\"}")
            .await?,
        0.0
    );
    let after = [
        db.task_state(t1).await?,
        db.task_state(t2).await?,
        db.task_state(other).await?,
    ];
    assert_eq!(before, after, "report writes nothing");
    for t in [t1, t2] {
        let detected = d.audit_events("detected", Some(t));
        assert_eq!(detected.len(), 1, "{:#?}", d.audit());
        assert_eq!(detected[0]["reason"], "worker_lost");
        assert_eq!(detected[0]["action"], "report");
        assert_eq!(detected[0]["actor"], "daemon");
    }
    assert!(d.audit_events("intent", None).is_empty());
    assert!(d.audit_events("done", None).is_empty());
    let status = d.json("/api/v1/status").await?;
    assert_eq!(status["ds_line"], "3.1");
    assert_eq!(status["last_sweep"]["zombies"], 2);
    assert_eq!(status["last_sweep"]["actions"], 0);
    let workers = d.json("/api/v1/workers").await?;
    assert!(
        workers["lost"]
            .as_array()
            .is_some_and(|l| l.iter().any(|w| w["host"] == "10.0.0.11:1234")),
        "{workers:#}"
    );

    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §3: a worker back inside the grace period (same startup time) was
/// never lost: nothing detected, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_flapping_inside_grace_is_not_a_zombie() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;

    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\nworker_restarted = \"fail\"\n",
        &[("DS_REAPER__RECONCILE__GRACE_PERIOD", "10s")],
    )
    .await?;
    d.wait_ready().await?;

    w1.crash().await;
    // Make sure the daemon saw the loss before the worker comes back.
    wait_until("daemon sees w1 lost", || async {
        let w = d.json("/api/v1/workers").await?;
        Ok(w["lost"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["host"] == "10.0.0.11:1234")))
    })
    .await?;
    w1.restart(long_ago()).await?;
    wait_until("daemon sees w1 back", || async {
        let w = d.json("/api/v1/workers").await?;
        Ok(w["workers"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["host"] == "10.0.0.11:1234")))
    })
    .await?;
    // Past the grace period the original loss would have ended in.
    hold(
        "nothing written for a worker back within the grace",
        std::time::Duration::from_secs(12),
    )
    .await;
    d.wait_sweeps(2).await?;

    assert_eq!(db.task_state(t1).await?.state, 1, "nothing written");
    assert_eq!(d.metric0(LOST_TOTAL).await?, 0.0);
    assert_eq!(
        d.metric0("ds_reaper_zombies_detected_total{reason=\"worker_restarted\"}")
            .await?,
        0.0
    );
    assert_eq!(d.metric0(LOST).await?, 0.0);
    assert!(
        d.audit_events("detected", None).is_empty(),
        "{:#?}",
        d.audit()
    );
    assert!(d.json("/api/v1/zombies").await?["zombies"]
        .as_array()
        .is_some_and(|z| z.is_empty()));

    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §3: a worker whose heartbeat `startupTime` is later than a task's
/// `submit_time` restarted: the JVM that held the task is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_worker_tasks_are_worker_restarted() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let t2 = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;

    // A long grace keeps the short absence during the restart from being a loss.
    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "[policy]\nworker_restarted = \"fail\"\n",
        &[("DS_REAPER__RECONCILE__GRACE_PERIOD", "60s")],
    )
    .await?;
    d.wait_ready().await?;
    assert_eq!(db.task_state(t1).await?.state, 1);

    let restarted_at = chrono::Utc::now();
    w1.restart(restarted_at).await?;
    wait_until("task on the restarted worker failed", || async {
        Ok(db.task_state(t1).await?.state == 6)
    })
    .await?;
    assert!(db.task_state(t1).await?.end_time.is_some());
    assert_eq!(db.task_state(t2).await?.state, 1, "other worker untouched");

    let detected = d.audit_events("detected", Some(t1));
    assert_eq!(detected.len(), 1, "{:#?}", d.audit());
    assert_eq!(detected[0]["reason"], "worker_restarted");
    let done = d.audit_events("done", Some(t1));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["reason"], "worker_restarted");
    assert_eq!(done[0]["to_state"], "FAILURE");
    let startup = done[0]["evidence"]["startup_time"]
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .expect("evidence.startup_time");
    assert_eq!(
        startup.timestamp(),
        restarted_at.timestamp(),
        "evidence carries the new startupTime"
    );
    d.wait_metric(
        "ds_reaper_zombies_detected_total{reason=\"worker_restarted\"}",
        |v| v == 1.0,
    )
    .await?;
    assert_eq!(d.metric0(LOST_TOTAL).await?, 0.0, "never judged lost");
    assert!(d.audit_events("detected", Some(t2)).is_empty());

    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §4.4: losing most workers at once engages the brake: nothing is
/// written, and the brake shows in metrics, status and the audit trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_most_workers_engages_the_brake() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.1.9").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let hosts = [
        "10.0.0.11:1234",
        "10.0.0.12:1234",
        "10.0.0.13:1234",
        "10.0.0.14:1234",
    ];
    let mut workers = Vec::new();
    for h in hosts {
        workers.push(server(&root, line, NodeKind::Worker, h, &[]).await?);
    }
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut tasks = Vec::new();
    for h in hosts {
        tasks.push(db.insert_task(&TaskSpec::new(wf, 1, Some(h))).await?);
    }

    // A grace longer than the three crashes take, so no loss ends before the
    // brake sees all three.
    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\n[brake]\nmax_lost_worker_fraction = 0.5\nrelease_after = \"5m\"\n",
        &[("DS_REAPER__RECONCILE__GRACE_PERIOD", "8s")],
    )
    .await?;
    d.wait_ready().await?;
    assert_eq!(d.metric0("ds_reaper_brake_engaged").await?, 0.0);

    for w in workers.iter_mut().take(3) {
        w.crash().await;
    }
    d.wait_metric("ds_reaper_brake_engaged", |v| v == 1.0)
        .await?;
    // Past the grace period: the three tasks are zombies, held by the brake.
    d.wait_metric(LOST, |v| v == 3.0).await?;
    d.wait_sweeps(3).await?;
    assert_eq!(d.metric0("ds_reaper_brake_engaged").await?, 1.0);
    for t in &tasks {
        assert_eq!(db.task_state(*t).await?.state, 1, "brake: nothing written");
    }
    assert_eq!(
        d.metric0("ds_reaper_actions_total{action=\"fail\",result=\"ok\"}")
            .await?,
        0.0
    );
    let status = d.json("/api/v1/status").await?;
    assert_eq!(status["brake"]["engaged"], true, "{status:#}");
    assert!(
        status["brake"]["why"]
            .as_str()
            .is_some_and(|w| !w.is_empty()),
        "{status:#}"
    );
    assert!(status["brake"]["since"].is_string(), "{status:#}");
    let brake = d.audit_events("brake", None);
    assert_eq!(brake.len(), 1, "{:#?}", d.audit());
    assert!(
        brake[0]["detail"]
            .as_str()
            .is_some_and(|s| s.contains("engaged")),
        "{brake:#?}"
    );
    assert!(d.audit_events("intent", None).is_empty());
    let z = d.json("/api/v1/zombies").await?;
    assert!(
        z["zombies"].as_array().is_some_and(|zs| zs
            .iter()
            .all(|z| z["action"] == "fail" && z["reason"] == "worker_lost")),
        "{z:#}"
    );

    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §3: a logic task runs in the master; its host being a live master is
/// fine even though no worker has that host. A logic task whose master is gone
/// is `master_lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logic_task_on_live_master_is_not_a_zombie() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut logic = Vec::new();
    for ty in ["DEPENDENT", "SUB_PROCESS", "SWITCH", "CONDITIONS"] {
        let mut spec = TaskSpec::new(wf, 1, Some("10.0.0.1:5678"));
        spec.task_type = ty.into();
        logic.push(db.insert_task(&spec).await?);
    }
    // Controls: a worker task on a host never seen, and a logic task whose
    // master is not live; both must be failed, proving the daemon acts.
    let lost_worker_task = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.99:1234")))
        .await?;
    let mut spec = TaskSpec::new(wf, 1, Some("10.0.0.2:5678"));
    spec.task_type = "DEPENDENT".into();
    let lost_master_task = db.insert_task(&spec).await?;

    let mut d = Daemon::start(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\nmaster_lost = \"fail\"\nworker_restarted = \"fail\"\nheartbeat_stale = \"fail\"\n",
    )
    .await?;
    d.wait_ready().await?;
    wait_until("control tasks failed", || async {
        Ok(db.task_state(lost_worker_task).await?.state == 6
            && db.task_state(lost_master_task).await?.state == 6)
    })
    .await?;
    d.wait_sweeps(3).await?;
    for t in &logic {
        assert_eq!(
            db.task_state(*t).await?.state,
            1,
            "logic task {t} on a live master untouched"
        );
        assert!(
            d.audit().iter().all(|r| r["task_id"] != *t),
            "no audit record for {t}"
        );
    }
    let done = d.audit_events("done", Some(lost_master_task));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["reason"], "master_lost");
    let done = d.audit_events("done", Some(lost_worker_task));
    assert_eq!(done[0]["reason"], "worker_lost");
    assert_eq!(d.metric0(LOST).await?, 0.0);
    assert_eq!(
        d.metric0("ds_reaper_zombies{reason=\"master_lost\"}")
            .await?,
        0.0
    );
    assert!(d.json("/api/v1/zombies").await?["zombies"]
        .as_array()
        .is_some_and(|z| z.is_empty()));

    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}
