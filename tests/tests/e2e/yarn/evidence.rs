//! Which applications are a task's own, against the real MiniYARNCluster
//! (SPEC §17, issue 39 items 7-10): an application that started before the
//! task, one another task also names, and one another user runs are never
//! killed while the task's own is killed first; a YARN task on a host whose
//! agent reads no id source is held; an over row's application that still
//! runs is a ghost application, killed only with `kill_remote_apps` and not
//! for a finished row. Each kill's `done` comes after the RM's own
//! `finishedTime` of the application, its `intent` before.
//!
//! What stays at unit level: an RM answer naming another id than the one
//! asked is unknown (`yarn::tests::an_answer_about_another_id_a_huge_one_or_from_elsewhere_is_unknown`,
//! in reaper); a real RM always names the id asked, so no real run can show
//! the refusal.

use super::{MiniYarn, WORKER};
use ds_sim::db::{TaskSpec, WorkflowSpec};
use ds_sim::procs::{ExecBase, DEFINITION, DEFINITION_VERSION};
use reaper_e2e::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A 3.2+ task log below `base`, dated today (the agent tries the day the
/// task's oldest process started).
fn task_log(base: &Path, wf: i64, task: i64) -> anyhow::Result<PathBuf> {
    let log = base
        .join(chrono::Local::now().format("%Y%m%d").to_string())
        .join(DEFINITION.to_string())
        .join(DEFINITION_VERSION.to_string())
        .join(wf.to_string())
        .join(format!("{task}.log"));
    std::fs::create_dir_all(log.parent().unwrap_or(base))?;
    Ok(log)
}

async fn wait_running(yarn: &MiniYarn, apps: &[&String]) -> anyhow::Result<()> {
    wait_until("the applications run", || async {
        for app in apps {
            if yarn.state(app).await? != "RUNNING" {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
}

fn ms(r: &serde_json::Value) -> i64 {
    r["ts"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(i64::MIN, |t| t.timestamp_millis())
}

/// SPEC §17 (item 9): the kill of `app` was audited before the RM ended it
/// and counted `done` only after the RM shows it final: the intent's time
/// is no later than the RM's `finishedTime`, the done's no earlier, and the
/// done names the state read after the kill. Returns the done's position.
async fn assert_killed_then_done(
    yarn: &MiniYarn,
    records: &[serde_json::Value],
    app: &str,
) -> anyhow::Result<usize> {
    let is = |r: &serde_json::Value, e: &str| {
        r["event"] == e && r["kind"] == "remote_app" && r["app_id"] == app
    };
    let intent = records.iter().find(|r| is(r, "intent"));
    let done = records.iter().position(|r| is(r, "done"));
    let (Some(intent), Some(done)) = (intent, done) else {
        anyhow::bail!("no intent and done for {app}: {records:#?}");
    };
    let rm = yarn.app(app).await?;
    assert_eq!(rm["state"], "KILLED", "{rm}");
    let finished = rm["finishedTime"].as_i64().unwrap_or_default();
    eprintln!(
        "{app}: intent {} ms, RM finishedTime {finished} ms, done {} ms",
        ms(intent),
        ms(&records[done])
    );
    assert!(ms(intent) <= finished, "{intent} / {rm}");
    assert!(finished <= ms(&records[done]), "{} / {rm}", records[done]);
    assert_eq!(records[done]["detail"], "now KILLED");
    Ok(done)
}

fn foreign_ids(records: &[serde_json::Value], task: i64) -> BTreeSet<String> {
    records
        .iter()
        .find(|r| r["event"] == "intent" && r["kind"] == "task" && r["task_id"] == task)
        .map(|r| r["evidence"]["foreign_app_ids"].clone())
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

/// Items 7 and 9, and the tenant half of 7: task T1's log names its own
/// application, an upstream one started before T1 and one that another
/// user (`bi`) runs while T1's workflow runs as the RM's own user; T1 and T2
/// both name a fourth. With `kill_remote_apps` only T1's own is killed —
/// audited before, `done` after the RM shows it KILLED, before T1's write —
/// and the three others are shown as `foreign_app_ids` and still RUN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_tasks_own_application_is_killed_never_a_foreign_shared_or_other_users(
) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(mut yarn) = MiniYarn::start().await? else {
        return Ok(());
    };
    let db = sim_db(ds_sim::db::SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;

    // an upstream job's application, running before the task starts
    let upstream = yarn.submit("upstream").await?;
    wait_running(&yarn, &[&upstream]).await?;
    let up = yarn.app(&upstream).await?;
    let me = up["user"].as_str().unwrap_or_default().to_string();
    // the task starts 8 s after it (the daemon's clock_skew_tolerance is 5 s)
    let start_ms = up["startedTime"].as_i64().unwrap_or_default() + 8_000;
    let start = chrono::DateTime::from_timestamp_millis(start_ms)
        .unwrap_or_default()
        .naive_utc();
    wait_until("the task's start has passed", || async {
        Ok(chrono::Utc::now().timestamp_millis() > start_ms + 1_000)
    })
    .await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    // the workflow runs as the RM's own user (3.2's tenant_code)
    db.exec(&format!(
        "UPDATE t_ds_process_instance SET tenant_code = '{me}' WHERE id = {wf}"
    ))
    .await?;
    let mut spec = TaskSpec::new(wf, 1, Some(WORKER));
    spec.task_type = "SPARK".into();
    spec.submit_time = Some(start);
    spec.start_time = Some(start);
    let t1 = db.insert_task(&spec).await?;
    let t2 = db.insert_task(&spec).await?;
    let own = yarn.submit("own").await?;
    let other_user = yarn.submit_as("bi", "other-user").await?;
    let shared = yarn.submit("shared").await?;
    wait_running(&yarn, &[&upstream, &own, &other_user, &shared]).await?;
    assert_eq!(yarn.app(&other_user).await?["user"], "bi");
    assert_ne!(me, "bi");

    // T1's log: its submit line and the report lines of two other
    // applications it waits on; T1 and T2 both write `shared` to appInfo.log
    let exec = ExecBase::new()?;
    let logs = tempfile::tempdir()?;
    std::fs::write(
        task_log(logs.path(), wf, t1)?,
        format!(
            "INFO Client: Application report for {upstream} (state: RUNNING)\n\
             INFO Client: Submitted application {own}\n\
             INFO Client: Application report for {other_user} (state: RUNNING)\n"
        ),
    )?;
    let script = format!("echo {shared} >> appInfo.log\nsleep 86400");
    let mut p1 = exec.start_ds_command(line, wf, t1, &script)?;
    let mut p2 = exec.start_ds_command(line, wf, t2, &script)?;
    let agent_extra = format!("task_log_base = \"{}\"\n", logs.path().display());
    let mut agent = AgentProcess::start(&root, WORKER, exec.path(), &agent_extra).await?;
    let cfg = format!(
        "[policy]\nworker_lost = \"fail\"\nkill_remote_apps = true\n\n[yarn]\nresource_managers = [\"{}\"]\ntimeout = \"2s\"\n",
        yarn.url
    );
    let env = [("DS_REAPER__RECONCILE__AGENT_STALE_AFTER", "3s")];
    let mut d = Daemon::start_with_env(db.url(), &root, &cfg, &env).await?;
    d.wait_ready().await?;
    let ids_file = d.dir.path().join("remote-apps.jsonl");
    wait_until("the agent's ids are kept", || async {
        let text = std::fs::read_to_string(&ids_file).unwrap_or_default();
        Ok([&upstream, &own, &other_user, &shared]
            .iter()
            .all(|a| text.contains(*a)))
    })
    .await?;

    // the worker host dies with its agent and processes
    w1.crash().await;
    assert_eq!(agent.stop().await?, Some(0));
    p1.kill()?;
    p2.kill()?;
    wait_until("both tasks are failed", || async {
        Ok(db.task_state(t1).await?.state == 6 && db.task_state(t2).await?.state == 6)
    })
    .await?;
    // every intent has its outcome by now
    assert!(!d.audit_events("intent", None).is_empty());
    let records = d.audit();
    let t1_intent = records
        .iter()
        .position(|r| r["event"] == "intent" && r["kind"] == "task" && r["task_id"] == t1)
        .expect("T1's intent");
    let done = assert_killed_then_done(&yarn, &records, &own).await?;
    assert!(
        done < t1_intent,
        "the own application ends before T1's write"
    );
    for (app, why) in [
        (&upstream, "started before the task"),
        (&other_user, "another user's"),
        (&shared, "named by two tasks"),
    ] {
        assert_eq!(yarn.state(app).await?, "RUNNING", "{why}: never killed");
        assert!(
            !records.iter().any(|r| r["app_id"] == **app),
            "{why}: no kill audited"
        );
    }
    assert_eq!(
        foreign_ids(&records, t1),
        [&upstream, &other_user, &shared]
            .into_iter()
            .cloned()
            .collect::<BTreeSet<_>>()
    );
    assert_eq!(foreign_ids(&records, t2), BTreeSet::from([shared.clone()]));
    assert_eq!(
        d.metric("ds_reaper_remote_app_kills_total{result=\"killed\"}")
            .await?,
        Some(1.0)
    );
    eprintln!("RM states at the end: {own} KILLED, {upstream} {other_user} {shared} RUNNING (user {me} / bi)");
    d.terminate().await?;
    yarn.stop().await;
    cleanup(db, &root).await
}

/// Item 8: a SPARK task of 3.1 (no appInfo.log) on a host whose agent has
/// no `task_log_base` — its real application runs, and nothing can know its
/// id — is held `remote_app_ids_unknown`, nothing written; with
/// `[yarn] require_ids = false` it is acted on (and its application, whose
/// id nobody knows, goes on: the documented price of that setting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yarn_task_whose_host_reads_no_id_source_is_held_unless_ids_are_not_required(
) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(mut yarn) = MiniYarn::start().await? else {
        return Ok(());
    };
    let db = sim_db(ds_sim::db::SimKind::MySql, "3.1.9").await?;
    let line = db.line;
    let root = unique_root();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut spec = TaskSpec::new(wf, 1, Some(WORKER));
    spec.task_type = "SPARK".into();
    let task = db.insert_task(&spec).await?;
    let app = yarn.submit("unseen").await?;
    wait_running(&yarn, &[&app]).await?;

    let exec = ExecBase::new()?;
    let mut agent = AgentProcess::start(&root, WORKER, exec.path(), "").await?;
    let zk = zookeeper_client::Client::connect(&zk_connect()).await?;
    let node = format!("{root}/ds-reaper/agents/{WORKER}");
    wait_until("the agent says it reads no id source", || async {
        let Ok((data, _)) = zk.get_data(&node).await else {
            return Ok(false);
        };
        let r: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
        Ok(r["app_id_sources"] == serde_json::json!([]))
    })
    .await?;
    let cfg = |require: bool| {
        format!(
            "[policy]\nworker_lost = \"fail\"\nkill_remote_apps = true\n\n[yarn]\nresource_managers = [\"{}\"]\nrequire_ids = {require}\n",
            yarn.url
        )
    };
    let mut d = Daemon::start(db.url(), &root, &cfg(true)).await?;
    d.wait_ready().await?;
    w1.crash().await;
    wait_until("held as remote_app_ids_unknown", || async {
        let zs = d.json("/api/v1/zombies").await?;
        Ok(zs["zombies"].as_array().into_iter().flatten().any(|z| {
            z["task_id"] == task
                && z["reason"] == "worker_lost"
                && z["note"] == "remote_app_ids_unknown"
        }))
    })
    .await?;
    d.wait_sweeps(3).await?;
    assert_eq!(db.task_state(task).await?.state, 1, "held: nothing written");
    assert!(d.audit_events("intent", Some(task)).is_empty());
    assert_eq!(yarn.state(&app).await?, "RUNNING");
    d.terminate().await?;

    let mut d = Daemon::start(db.url(), &root, &cfg(false)).await?;
    d.wait_ready().await?;
    wait_until("require_ids = false: acted on", || async {
        Ok(db.task_state(task).await?.state == 6)
    })
    .await?;
    assert!(d.audit().iter().all(|r| r["kind"] != "remote_app"));
    assert_eq!(yarn.state(&app).await?, "RUNNING");
    eprintln!("RM state at the end: {app} RUNNING (its id was never known)");
    d.terminate().await?;
    assert_eq!(agent.stop().await?, Some(0));
    yarn.stop().await;
    cleanup(db, &root).await
}

/// Whether `/api/v1/ghosts` lists the failed-over and the finished row
/// (`rows`, in that order) with their running applications.
async fn ghosts_shown(d: &Daemon, rows: [(i64, &String); 2]) -> anyhow::Result<bool> {
    let g = d.json("/api/v1/ghosts").await?;
    let shown = |(task, app): (i64, &String), over: &str| {
        g["ghosts"].as_array().into_iter().flatten().any(|x| {
            x["task_id"] == task
                && x["evidence"]["over"] == over
                && x["remote_apps"]
                    == serde_json::json!([{"id": app, "state": "RUNNING", "final_status": "UNDEFINED"}])
        })
    };
    Ok(shown(rows[0], "need_fault_tolerance") && shown(rows[1], "terminal_state"))
}

/// One `remote-apps.jsonl` line: `app` learned for `task` on the worker.
fn kept(task: i64, app: &str) -> String {
    format!(
        "{{\"task_id\":{task},\"app_id\":\"{app}\",\"host\":\"{WORKER}\",\"learned_at\":\"{}\"}}\n",
        chrono::Utc::now().to_rfc3339()
    )
}

/// Item 10: two SPARK rows over long ago — one handed to fault tolerance
/// (DS's failover re-runs it without killing its application), one
/// SUCCESS — whose applications, known only from the state file (no agent
/// lists them), still RUN: both are listed as ghosts with their
/// applications; without `kill_remote_apps` nothing is killed; with it the
/// failed-over row's application is killed (intent before, done after the
/// RM's KILLED) and the finished row's is not; nothing of DS's is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_rows_running_application_is_a_ghost_killed_only_with_kill_remote_apps(
) -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let Some(mut yarn) = MiniYarn::start().await? else {
        return Ok(());
    };
    let db = sim_db(ds_sim::db::SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let (_m, _workers) =
        master_and_three_workers(&zk_connect(), &root, line, "10.0.0.1:5678", long_ago()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut spec = TaskSpec::new(wf, 8, Some(WORKER));
    spec.task_type = "SPARK".into();
    spec.end_time = spec.start_time.map(|t| t + chrono::TimeDelta::minutes(5));
    let failed_over = db.insert_task(&spec).await?;
    spec.state = 7;
    let finished = db.insert_task(&spec).await?;
    let a1 = yarn.submit("failed-over").await?;
    let a2 = yarn.submit("finished").await?;
    wait_running(&yarn, &[&a1, &a2]).await?;
    let ids = kept(failed_over, &a1) + &kept(finished, &a2);
    // every sweep a full one: ghost applications are read on full scans
    let env = [("DS_REAPER__RECONCILE__FULL_SCAN_INTERVAL", "1s")];
    let cfg = |kill: bool| {
        format!(
            "[policy]\nkill_remote_apps = {kill}\n\n[yarn]\nresource_managers = [\"{}\"]\ntimeout = \"2s\"\n",
            yarn.url
        )
    };
    let mut d = Daemon::start_with_env(db.url(), &root, &cfg(false), &env).await?;
    std::fs::write(d.dir.path().join("remote-apps.jsonl"), &ids)?;
    d.crash_and_restart(&env).await?;
    d.wait_ready().await?;
    wait_until("both are ghost applications", || {
        ghosts_shown(&d, [(failed_over, &a1), (finished, &a2)])
    })
    .await?;
    d.wait_sweeps(3).await?;
    assert_eq!(yarn.state(&a1).await?, "RUNNING", "kill_remote_apps off");
    assert!(d.audit().iter().all(|r| r["kind"] != "remote_app"));
    d.terminate().await?;

    let mut k = Daemon::start_with_env(db.url(), &root, &cfg(true), &env).await?;
    std::fs::write(k.dir.path().join("remote-apps.jsonl"), &ids)?;
    k.crash_and_restart(&env).await?;
    k.wait_ready().await?;
    wait_until("the failed-over row's application is killed", || async {
        Ok(yarn.state(&a1).await? == "KILLED")
    })
    .await?;
    k.wait_sweeps(3).await?;
    let records = k.audit();
    assert_killed_then_done(&yarn, &records, &a1).await?;
    assert_eq!(
        yarn.state(&a2).await?,
        "RUNNING",
        "a finished row's: reported"
    );
    assert!(!records.iter().any(|r| r["app_id"] == a2));
    assert_eq!(db.task_state(failed_over).await?.state, 8);
    assert_eq!(db.task_state(finished).await?.state, 7);
    eprintln!("RM states at the end: {a1} KILLED, {a2} RUNNING");
    k.terminate().await?;
    yarn.stop().await;
    cleanup(db, &root).await
}
