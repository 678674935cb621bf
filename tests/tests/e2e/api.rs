//! The POST endpoints (SPEC §8) and a stop in the middle of work (SPEC §7).

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::NodeKind;
use reaper_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_endpoints_auth_and_reap() -> anyhow::Result<()> {
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
    // Report policy: the zombie stays for the API to reap.
    let zombie = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.9.9.9:1234")))
        .await?;
    let live = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let finished = db
        .insert_task(&TaskSpec::new(wf, 7, Some("10.9.9.9:1234")))
        .await?;

    // No token configured: every POST is forbidden.
    let mut open = Daemon::start(db.url(), &root, "").await?;
    open.wait_ready().await?;
    let (code, body) = open.post("/api/v1/sweep", None, "").await?;
    assert_eq!(code, 403, "{body}");
    let (code, body) = open
        .post(
            &format!("/api/v1/tasks/{zombie}/reap"),
            Some("anything"),
            "{}",
        )
        .await?;
    assert_eq!(code, 403, "{body}");
    assert_eq!(open.terminate().await?, Some(0));
    assert_eq!(db.task_state(zombie).await?.state, 1);

    // A token configured.
    let tdir = tempfile::tempdir()?;
    let token = "tok-e2e-5f1c9a";
    let tfile = tdir.path().join("token");
    std::fs::write(&tfile, format!("{token}\n"))?;
    let tpath = tfile.display().to_string();
    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "",
        &[("DS_REAPER__HTTP__TOKEN_FILE", &tpath)],
    )
    .await?;
    d.wait_ready().await?;
    d.wait_metric("ds_reaper_zombies{reason=\"worker_lost\"}", |v| v == 1.0)
        .await?;

    let (code, body) = d.post("/api/v1/sweep", None, "").await?;
    assert_eq!(code, 401, "no token: {body}");
    let (code, body) = d.post("/api/v1/sweep", Some("wrong"), "").await?;
    assert_eq!(code, 401, "wrong token: {body}");
    let reap_path = |t: i64| format!("/api/v1/tasks/{t}/reap");
    let (code, body) = d.post(&reap_path(zombie), None, "{}").await?;
    assert_eq!(code, 401, "{body}");
    let (code, body) = d.post(&reap_path(zombie), Some("wrong"), "{}").await?;
    assert_eq!(code, 401, "{body}");
    assert_eq!(db.task_state(zombie).await?.state, 1);

    let sweeps = d.metric0("ds_reaper_sweeps_total{result=\"ok\"}").await?;
    let (code, body) = d.post("/api/v1/sweep", Some(token), "").await?;
    assert_eq!(code, 200, "{body}");
    let s: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(s["result"], "ok", "{s:#}");
    assert_eq!(s["zombies"], 1, "{s:#}");
    assert!(d.metric0("ds_reaper_sweeps_total{result=\"ok\"}").await? > sweeps);

    // Malformed bodies: 400, nothing written.
    for bad in [
        "{not json",
        "{\"action\":\"explode\"}",
        "{\"bogus\":1}",
        "[1,2]",
    ] {
        let (code, body) = d.post(&reap_path(zombie), Some(token), bad).await?;
        assert_eq!(code, 400, "body {bad:?}: {body}");
    }
    let (code, body) = d.post("/api/v1/tasks/abc/reap", Some(token), "{}").await?;
    assert_eq!(code, 400, "{body}");
    assert_eq!(db.task_state(zombie).await?.state, 1);

    // Not a zombie, a finished row: 409 with an error; unknown id: 404.
    for t in [live, finished] {
        let (code, body) = d.post(&reap_path(t), Some(token), "{}").await?;
        assert_eq!(code, 409, "task {t}: {body}");
        let e: serde_json::Value = serde_json::from_str(&body)?;
        assert!(e["error"].is_string(), "{e:#}");
    }
    assert_eq!(db.task_state(live).await?.state, 1);
    assert_eq!(db.task_state(finished).await?.state, 7);
    let (code, body) = d.post(&reap_path(987_654_321), Some(token), "{}").await?;
    assert_eq!(code, 404, "{body}");

    // The zombie: 200 with the audit record; the row is failed.
    let (code, body) = d
        .post(&reap_path(zombie), Some(token), "{\"action\":\"fail\"}")
        .await?;
    assert_eq!(code, 200, "{body}");
    let rec: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(rec["event"], "done", "{rec:#}");
    assert_eq!(rec["actor"], "api");
    assert_eq!(rec["task_id"], zombie);
    assert_eq!(rec["to_state"], "FAILURE");
    let s = db.task_state(zombie).await?;
    assert_eq!(s.state, 6);
    assert!(s.end_time.is_some());
    let api_done: Vec<_> = d
        .audit_events("done", Some(zombie))
        .into_iter()
        .filter(|r| r["actor"] == "api")
        .collect();
    assert_eq!(api_done.len(), 1, "{:#?}", d.audit());
    let a = d.json("/api/v1/audit?limit=5").await?;
    assert!(
        a["records"].as_array().is_some_and(|r| r
            .iter()
            .any(|r| r["actor"] == "api" && r["event"] == "done")),
        "{a:#}"
    );
    // limit=N answers the latest N records.
    let a = d.json("/api/v1/audit?limit=1").await?;
    let recs = a["records"].as_array().expect("records");
    assert_eq!(recs.len(), 1, "{a:#}");
    assert_eq!(recs[0]["event"], "done", "{a:#}");
    assert_eq!(recs[0]["actor"], "api", "{a:#}");
    let (code, body) = d.get("/api/v1/audit?limit=lots").await?;
    assert_eq!(code, 400, "{body}");
    // Reaped once: a second try is refused (the row is finished now).
    let (code, body) = d.post(&reap_path(zombie), Some(token), "").await?;
    assert_eq!(code, 409, "{body}");

    assert_eq!(d.terminate().await?, Some(0));
    cleanup(db, &root).await
}

/// SPEC §7: SIGTERM stops the daemon cleanly (exit 0), also while it is
/// busy with a sweep over many rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_sweep_exits_zero() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::Postgres, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    // Enough live rows that a full scan takes a while.
    db.bulk_fill(wf, 200_000, 1, "10.0.0.11:1234").await?;
    let tdir = tempfile::tempdir()?;
    let tfile = tdir.path().join("token");
    std::fs::write(&tfile, "t0k")?;
    let tpath = tfile.display().to_string();
    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "",
        &[("DS_REAPER__HTTP__TOKEN_FILE", &tpath)],
    )
    .await?;
    d.wait_ready().await?;
    // Time one requested sweep over the 200k live rows, then signal a
    // third of the way into the next one so the signal lands mid-sweep.
    let t0 = std::time::Instant::now();
    let (code, body) = d.post("/api/v1/sweep", Some("t0k"), "").await?;
    assert_eq!(code, 200, "{body}");
    let one = t0.elapsed();
    eprintln!("one requested sweep over 200k live rows took {one:?}");
    let client_port = d.port;
    let sweeping = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{client_port}/api/v1/sweep"))
            .bearer_auth("t0k")
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    hold("the requested sweep is under way", one / 3).await;
    let t1 = std::time::Instant::now();
    assert_eq!(d.terminate().await?, Some(0), "SIGTERM mid-sweep → exit 0");
    eprintln!("stopped {:?} after SIGTERM", t1.elapsed());
    let _ = sweeping.await;
    let log = d.log_text();
    assert!(log.contains("stopped"), "{log}");
    cleanup(db, &root).await
}
