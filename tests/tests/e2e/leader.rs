//! Two replicas on one cluster (SPEC §4.6): one leader acts, every zombie is
//! written exactly once, and leadership moves when the leader stops.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::NodeKind;
use reaper_e2e::*;

const LEADER: &str = "ds_reaper_leader";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader_each_zombie_written_once() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut lost_tasks = Vec::new();
    for _ in 0..3 {
        lost_tasks.push(
            db.insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
                .await?,
        );
    }
    let kept = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.12:1234")))
        .await?;
    // A zombie the policy only reports stays a zombie, so both replicas must
    // detect it whatever the timing (a written one may be gone before the
    // standby's next sweep).
    let mut streaming = TaskSpec::new(wf, 1, Some("10.0.0.11:1234"));
    streaming.task_type = "FLINK_STREAM".into();
    let stream = db.insert_task(&streaming).await?;

    // Two of three workers go in this test: keep the brake out of the way.
    let policy = "[policy]\nworker_lost = \"fail\"\n[[policy.rules]]\ntask_type = \"FLINK_STREAM\"\naction = \"report\"\n[brake]\nmax_lost_worker_fraction = 0.9\n";
    let a = Daemon::start(db.url(), &root, policy).await?;
    let b = Daemon::start(db.url(), &root, policy).await?;
    a.wait_ready().await?;
    b.wait_ready().await?;
    wait_until("exactly one leader", || async {
        let la = a.metric(LEADER).await?;
        let lb = b.metric(LEADER).await?;
        Ok(matches!(
            (la, lb),
            (Some(x), Some(y)) if x + y == 1.0 && (x == 0.0 || x == 1.0)
        ))
    })
    .await?;
    // Stable, not a moment's coincidence.
    a.wait_sweeps(2).await?;
    assert_eq!(a.metric0(LEADER).await? + b.metric0(LEADER).await?, 1.0);
    let a_leads = a.metric0(LEADER).await? == 1.0;
    let sa = a.json("/api/v1/status").await?;
    let sb = b.json("/api/v1/status").await?;
    assert_eq!(sa["leader"], a_leads, "{sa:#}");
    assert_eq!(sb["leader"], !a_leads, "{sb:#}");

    w1.crash().await;
    wait_until("all three zombies failed", || async {
        for t in &lost_tasks {
            if db.task_state(*t).await?.state != 6 {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    // Both replicas detect the zombie that stays; let the standby sweep a few times more too.
    let (leader, standby) = if a_leads { (&a, &b) } else { (&b, &a) };
    wait_until("both replicas detected the report-only zombie", || async {
        Ok(leader.audit_events("detected", Some(stream)).len() == 1
            && standby.audit_events("detected", Some(stream)).len() == 1)
    })
    .await?;
    a.wait_sweeps(2).await?;
    b.wait_sweeps(2).await?;
    for t in &lost_tasks {
        let done = a.audit_events("done", Some(*t)).len() + b.audit_events("done", Some(*t)).len();
        assert_eq!(done, 1, "task {t} written exactly once");
        assert_eq!(leader.audit_events("detected", Some(*t)).len(), 1);
        // The standby sees it only if its sweep ran before the leader's write.
        assert!(standby.audit_events("detected", Some(*t)).len() <= 1);
    }
    let total_done = a.audit_events("done", None).len() + b.audit_events("done", None).len();
    assert_eq!(total_done, lost_tasks.len());
    assert_eq!(leader.audit_events("done", None).len(), lost_tasks.len());
    assert_eq!(db.task_state(stream).await?.state, 1, "report never writes");
    assert!(standby.audit_events("intent", None).is_empty());
    assert_eq!(
        standby
            .metric0("ds_reaper_actions_total{action=\"fail\",result=\"ok\"}")
            .await?,
        0.0
    );
    assert!(
        standby
            .metric0("ds_reaper_zombies_detected_total{reason=\"worker_lost\"}")
            .await?
            >= 1.0,
        "the standby still detects"
    );
    assert_eq!(db.task_state(kept).await?.state, 1);

    // The leader stops: the standby takes over.
    let (mut leader, standby) = if a_leads { (a, b) } else { (b, a) };
    assert_eq!(leader.terminate().await?, Some(0));
    standby.wait_metric(LEADER, |v| v == 1.0).await?;
    assert_eq!(standby.json("/api/v1/status").await?["leader"], true);

    // And the new leader acts.
    let mut w2 = _w2;
    w2.crash().await;
    wait_until("the new leader fails the next zombie", || async {
        Ok(db.task_state(kept).await?.state == 6)
    })
    .await?;
    assert_eq!(standby.audit_events("done", Some(kept)).len(), 1);
    assert!(leader.audit_events("done", Some(kept)).is_empty());

    let mut standby = standby;
    assert_eq!(standby.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §8 (issue 10 item 9): a standby replica never writes, not even when
/// the API asks it to reap: 409 naming the leader, the row untouched, no intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_reap_on_a_standby_is_refused_and_names_the_leader() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    // A zombie on a host that never registered: any replica would judge it.
    let zombie = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.99:1234")))
        .await?;

    let tdir = tempfile::tempdir()?;
    let token = "tok-standby-81c2";
    let tfile = tdir.path().join("token");
    std::fs::write(&tfile, format!("{token}\n"))?;
    let tpath = tfile.display().to_string();
    let env = [("DS_REAPER__HTTP__TOKEN_FILE", tpath.as_str())];
    let a = Daemon::start_with_env(db.url(), &root, "", &env).await?;
    let b = Daemon::start_with_env(db.url(), &root, "", &env).await?;
    a.wait_ready().await?;
    b.wait_ready().await?;
    wait_until("exactly one leader", || async {
        Ok(a.metric0(LEADER).await? + b.metric0(LEADER).await? == 1.0)
    })
    .await?;
    let (leader, standby) = if a.metric0(LEADER).await? == 1.0 {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let leader_pid = leader.child.id().expect("leader runs");
    standby
        .wait_metric("ds_reaper_zombies{reason=\"worker_lost\"}", |v| v == 1.0)
        .await?;

    let path = format!("/api/v1/tasks/{zombie}/reap");
    let (code, body) = standby
        .post(&path, Some(token), r#"{"action":"fail","force":true}"#)
        .await?;
    assert_eq!(code, 409, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(doc["error"], "not the leader", "{doc:#}");
    let named = doc["leader"].as_str().unwrap_or_default();
    assert!(
        named.ends_with(&format!(":{leader_pid}")),
        "the leader's id names its process {leader_pid}: {doc:#}"
    );
    assert_eq!(db.task_state(zombie).await?.state, 1, "the standby wrote");
    assert!(standby.audit_events("intent", None).is_empty());

    // The leader does what the standby refused (its policy only reports).
    let (code, body) = leader
        .post(&path, Some(token), r#"{"action":"fail"}"#)
        .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(db.task_state(zombie).await?.state, 6);

    let (mut a, mut b) = (a, b);
    assert_eq!(a.terminate().await?, Some(0));
    assert_eq!(b.terminate().await?, Some(0));
    cleanup(db, &root).await
}
