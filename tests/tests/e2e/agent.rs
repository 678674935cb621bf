//! The worker-host agent and the daemon together (SPEC §12), with real task
//! processes: a killed process on a live worker becomes `process_gone` and is
//! failed, nothing else changes; a worker whose registry node is gone while
//! its agent still lists the task's process is held (`process_alive`) and
//! acted on only once the process ends; tasks without a process of their own
//! and tasks on workers without an agent are never `process_gone`.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::procs::ExecBase;
use reaper_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_process_is_process_gone_and_a_live_one_holds_a_lost_worker() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, [mut w1, _w2, _w3]) = sc.cluster().await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let on = |host: &str, task_type: &str| {
        let mut t = TaskSpec::new(wf, 1, Some(host));
        t.task_type = task_type.into();
        t
    };
    let dies = db.insert_task(&on("10.0.0.11:1234", "SHELL")).await?;
    let runs = db.insert_task(&on("10.0.0.11:1234", "SHELL")).await?;
    let sql = db.insert_task(&on("10.0.0.11:1234", "SQL")).await?;
    let no_agent = db.insert_task(&on("10.0.0.12:1234", "SHELL")).await?;

    let exec = ExecBase::new()?;
    let mut p_dies = exec.start(line, wf, dies)?;
    let mut p_runs = exec.start(line, wf, runs)?;
    let mut agent = sc.agent("10.0.0.11:1234", exec.path(), "").await?;

    let policy = "[policy]\nworker_lost = \"fail\"\nprocess_gone = \"fail\"\n";
    let mut d = Daemon::start_with_env(
        db.url(),
        root,
        policy,
        &[
            ("DS_REAPER__RECONCILE__PROCESS_GONE_AFTER", "3s"),
            ("DS_REAPER__RECONCILE__AGENT_STALE_AFTER", "10s"),
        ],
    )
    .await?;
    d.wait_ready().await?;
    wait_until("the agent is fresh and lists both processes", || async {
        let w = d.json("/api/v1/workers").await?;
        Ok(w["workers"].as_array().into_iter().flatten().any(|x| {
            x["host"] == "10.0.0.11:1234" && x["agent"]["fresh"] == true && x["agent"]["tasks"] == 2
        }))
    })
    .await?;
    d.wait_sweeps(3).await?;
    for t in [dies, runs, sql, no_agent] {
        assert_eq!(
            db.task_state(t).await?.state,
            1,
            "healthy: task {t} untouched"
        );
    }

    // The process dies; the worker lives; the row stays RUNNING: process_gone.
    p_dies.kill()?;
    wait_until("the dead process's task failed", || async {
        Ok(db.task_state(dies).await?.state == 6)
    })
    .await?;
    let done = d.audit_events("done", Some(dies));
    assert_eq!(done.len(), 1, "{:#?}", d.audit());
    assert_eq!(done[0]["reason"], "process_gone");
    assert!(
        done[0]["evidence"]["process_missing_since"].is_string(),
        "{:#}",
        done[0]
    );
    d.wait_sweeps(2).await?;
    for t in [runs, sql, no_agent] {
        assert_eq!(
            db.task_state(t).await?.state,
            1,
            "only the dead one: task {t}"
        );
    }

    // The registry drops the worker while its task's process still runs.
    w1.crash().await;
    wait_until(
        "the SQL task (no process of its own) failed as worker_lost",
        || async { Ok(db.task_state(sql).await?.state == 6) },
    )
    .await?;
    d.wait_sweeps(3).await?;
    assert_eq!(
        db.task_state(runs).await?.state,
        1,
        "held while its process runs"
    );
    let zs = d.json("/api/v1/zombies").await?;
    let held = zs["zombies"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|z| z["task_id"] == runs)
        .cloned()
        .unwrap_or_else(|| panic!("the held task is reported: {zs:#}"));
    assert_eq!(held["reason"], "worker_lost", "{held:#}");
    assert_eq!(held["note"], "process_alive", "{held:#}");
    assert!(d.audit_events("intent", Some(runs)).is_empty());

    // The process ends: acted on.
    p_runs.kill()?;
    wait_until("the held task failed once its process ended", || async {
        Ok(db.task_state(runs).await?.state == 6)
    })
    .await?;
    assert_eq!(
        db.task_state(no_agent).await?.state,
        1,
        "no agent: never process_gone"
    );
    assert_eq!(d.terminate().await?, Some(0));
    agent.child.start_kill()?;
    let _ = agent.child.wait().await;
    sc.cleanup().await
}

/// The agent's view of one worker, from `/api/v1/workers`.
async fn agent_of(d: &Daemon, worker: &str) -> anyhow::Result<Option<serde_json::Value>> {
    let w = d.json("/api/v1/workers").await?;
    Ok(w["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|x| x["host"] == worker)
        .map(|x| x["agent"].clone()))
}

/// Waits until the worker's agent is fresh and lists `tasks` tasks; on a
/// timeout the error carries the agent as the daemon last saw it and the
/// tail of the agent's own log (a report that is never fresh says why:
/// unreadable processes, a blind scan, a publish that failed).
async fn wait_listing(
    d: &Daemon,
    agent: &AgentProcess,
    worker: &str,
    tasks: u64,
    what: &str,
) -> anyhow::Result<()> {
    let r = wait_until(what, || async {
        Ok(agent_of(d, worker)
            .await?
            .is_some_and(|a| a["fresh"] == true && a["tasks"] == tasks))
    })
    .await;
    if let Err(e) = r {
        let seen = agent_of(d, worker).await.ok().flatten();
        return Err(e.context(format!(
            "the daemon's view of the agent: {seen:#?}\nthe agent's log:\n{}",
            agent.log_tail(40)
        )));
    }
    Ok(())
}

/// Issue 18 items 1 and 2 (SPEC §12): DS writes RUNNING before the task's
/// process exists, so a task the agent has never listed is never
/// `process_gone`; and a shell task whose script `cd`s elsewhere stays the
/// task's by its command file and by descent, so it is not taken for dead
/// while it runs — and is `process_gone` once it really ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_then_gone_and_a_script_that_cds_away_stays_the_tasks() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _w) = sc.cluster().await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let shell = TaskSpec::new(wf, 1, Some("10.0.0.11:1234"));
    let preparing = db.insert_task(&shell).await?;
    let wanders = db.insert_task(&shell).await?;
    let exec = ExecBase::new()?;
    let elsewhere = tempfile::tempdir()?;
    let script = format!("cd {} && sleep 86400", elsewhere.path().display());
    let mut p_wanders = exec.start_ds_command(line, wf, wanders, &script)?;
    let mut agent = sc.agent("10.0.0.11:1234", exec.path(), "").await?;
    let policy = "[policy]\nprocess_gone = \"fail\"\n";
    let mut d = Daemon::start_with_env(
        db.url(),
        root,
        policy,
        &[
            ("DS_REAPER__RECONCILE__PROCESS_GONE_AFTER", "2s"),
            ("DS_REAPER__RECONCILE__AGENT_STALE_AFTER", "10s"),
        ],
    )
    .await?;
    d.wait_ready().await?;
    wait_listing(
        &d,
        &agent,
        "10.0.0.11:1234",
        1,
        "the agent is fresh and lists the wandering script",
    )
    .await?;
    // A named "nothing happens" hold: many times process_gone_after with a
    // fresh agent that lacks `preparing` (never listed) and lists `wanders`.
    d.wait_sweeps(8).await?;
    assert_eq!(
        db.task_state(preparing).await?.state,
        1,
        "never listed: untouched"
    );
    assert_eq!(
        db.task_state(wanders).await?.state,
        1,
        "its script runs elsewhere"
    );
    assert!(
        d.audit_events("intent", None).is_empty(),
        "{:#?}",
        d.audit()
    );

    // The preparing task's process appears, is listed, then dies: now gone.
    let mut p_prep = exec.start_ds_command(line, wf, preparing, "sleep 86400")?;
    wait_listing(&d, &agent, "10.0.0.11:1234", 2, "both tasks listed").await?;
    p_prep.kill()?;
    p_wanders.kill()?;
    wait_until("both tasks failed as process_gone", || async {
        Ok(db.task_state(preparing).await?.state == 6 && db.task_state(wanders).await?.state == 6)
    })
    .await?;
    for t in [preparing, wanders] {
        let done = d.audit_events("done", Some(t));
        assert_eq!(done.len(), 1, "{:#?}", d.audit());
        assert_eq!(done[0]["reason"], "process_gone");
        assert!(
            done[0]["evidence"]["process_seen_at"].is_string(),
            "{:#}",
            done[0]
        );
    }
    assert_eq!(d.terminate().await?, Some(0));
    agent.child.start_kill()?;
    let _ = agent.child.wait().await;
    sc.cleanup().await
}

/// Issue 18 item 4 (SPEC §12): the network blip that drops the worker can drop
/// its agent's session too. The hold rests on the agent's last listing, not
/// on the agent still being there: the task is held while that listing is
/// younger than `agent_stale_after`, and acted on only after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hold_outlives_the_agent_lost_with_its_worker() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, [mut w1, _w2, _w3]) = sc.cluster().await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let runs = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.11:1234")))
        .await?;
    let exec = ExecBase::new()?;
    let mut p_runs = exec.start_ds_command(line, wf, runs, "sleep 86400")?;
    let mut agent = sc.agent("10.0.0.11:1234", exec.path(), "").await?;
    let policy = "[policy]\nworker_lost = \"fail\"\n";
    let mut d = Daemon::start_with_env(
        db.url(),
        root,
        policy,
        &[("DS_REAPER__RECONCILE__AGENT_STALE_AFTER", "20s")],
    )
    .await?;
    d.wait_ready().await?;
    wait_listing(&d, &agent, "10.0.0.11:1234", 1, "the agent lists the task").await?;
    // Worker and agent go together; the process runs on.
    w1.crash().await;
    assert_eq!(agent.stop().await?, Some(0));
    wait_until("the task is reported, held as process_alive", || async {
        let zs = d.json("/api/v1/zombies").await?;
        Ok(zs["zombies"].as_array().into_iter().flatten().any(|z| {
            z["task_id"] == runs && z["reason"] == "worker_lost" && z["note"] == "process_alive"
        }))
    })
    .await?;
    d.wait_sweeps(3).await?;
    assert_eq!(
        db.task_state(runs).await?.state,
        1,
        "held after its agent went"
    );
    assert!(d.audit_events("intent", Some(runs)).is_empty());
    // Nothing lists it any more: once the last listing is older than
    // agent_stale_after, the lost worker's task is acted on.
    p_runs.kill()?;
    wait_until(
        "the task failed once its last listing was stale",
        || async { Ok(db.task_state(runs).await?.state == 6) },
    )
    .await?;
    let done = d.audit_events("done", Some(runs));
    assert_eq!(done[0]["reason"], "worker_lost", "{:#}", done[0]);
    assert_eq!(d.terminate().await?, Some(0));
    sc.cleanup().await
}
