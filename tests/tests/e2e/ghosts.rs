//! Processes that should not be running (SPEC §15), end to end: real task
//! processes, a real agent, the daemon, DS's database changed under them as
//! DS would. Ghosts of a SUCCESS row, a `flag = 0` row, a row re-dispatched
//! to another machine's worker and a vanished row are reported once `ghost_after` has
//! passed since the daemon first saw them over, never before; a row that
//! turns SUCCESS while its process exits, a shell with a controlling terminal
//! in a finished task's execute path, a process started after its row ended
//! a running task's process and a live row of a second worker on the same
//! machine are never ghosts. Nothing is written to DS.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::procs::{ExecBase, TaskProcess};
use reaper_e2e::kills::{sql_now, GHOST_ENV, KILL, TERMINAL};
use reaper_e2e::*;
use std::collections::BTreeSet;

const WORKER: &str = "10.0.0.11:1234";
const GHOST_AFTER_S: i64 = 3;
/// Another worker on WORKER's machine.
const BESIDE: &str = "10.0.0.11:1235";

fn ghost_ids(v: &serde_json::Value) -> BTreeSet<i64> {
    v["ghosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["task_id"].as_i64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghosts_are_the_over_rows_own_processes_after_ghost_after() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _workers) = sc.cluster().await?;
    // a second worker JVM on the agent's worker's machine (same address, another port)
    let _beside_worker = ds_sim::zk::SimServer::register_with(
        &zk_connect(),
        root,
        (line, reaper_core::NodeKind::Worker),
        BESIDE,
        &[],
        long_ago(),
        ds_sim::zk::SimOptions {
            zone: "UTC".parse().map_err(|e| anyhow::anyhow!("{e:?}"))?,
            ..Default::default()
        },
    )
    .await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let running = |name: &str| {
        let mut t = TaskSpec::new(wf, 1, Some(WORKER));
        t.name = name.into();
        t
    };
    // the superseded row and its newer attempt are one task: one task code
    // (ds-sim gives every other row a code of its own)
    const SUPERSEDED_CODE: i64 = 4242;
    let superseded_attempt = || {
        let mut t = running("superseded");
        t.task_code = Some(SUPERSEDED_CODE);
        t
    };
    let success = db.insert_task(&running("success")).await?;
    let superseded = db.insert_task(&superseded_attempt()).await?;
    let moved = db.insert_task(&running("moved")).await?;
    let vanished = db.insert_task(&running("vanished")).await?;
    let quick = db.insert_task(&running("quick")).await?;
    let shell = db.insert_task(&running("shell")).await?;
    let alive = db.insert_task(&running("alive")).await?;
    // live on the other worker of the same machine: its process is listed
    // here too (one exec_base), and is never this agent's ghost
    let mut on_beside = running("beside");
    on_beside.host = Some(BESIDE.into());
    let beside = db.insert_task(&on_beside).await?;
    // ended two minutes ago; its process is started below, after that
    let mut late = running("late");
    late.state = 7;
    late.end_time = Some((chrono::Utc::now() - chrono::TimeDelta::seconds(120)).naive_utc());
    let late = db.insert_task(&late).await?;

    let exec = ExecBase::new()?;
    let mut procs = Vec::new();
    for t in [success, superseded, moved, vanished, alive, beside] {
        procs.push(exec.start(line, wf, t)?);
    }
    let mut p_quick = exec.start(line, wf, quick)?;
    // an operator's shell in the shell task's execute path, with a terminal:
    // `script` gives it a pty and itself works from elsewhere
    let shell_dir = exec.execute_path(line, wf, shell)?;
    let mut p_tty = TaskProcess::spawn(
        std::path::Path::new("/tmp"),
        "script",
        &[
            "-qc",
            &format!(
                "cd '{}' && exec sh -c 'sleep 86400; :'",
                shell_dir.display()
            ),
            "/dev/null",
        ],
    )?;
    let late_proc = exec.start(line, wf, late)?;
    let mut agent = AgentProcess::start(root, WORKER, exec.path(), "").await?;
    let mut d = Daemon::start_with_env(db.url(), root, "", GHOST_ENV).await?;
    d.wait_ready().await?;
    wait_until(
        "the agent lists every task process and the shell",
        || async {
            let w = d.json("/api/v1/workers").await?;
            Ok(w["workers"].as_array().into_iter().flatten().any(|x| {
                x["host"] == WORKER && x["agent"]["fresh"] == true && x["agent"]["tasks"] == 9
            }))
        },
    )
    .await?;
    d.wait_sweeps(3).await?;
    let g = d.json("/api/v1/ghosts").await?;
    assert_eq!(
        ghost_ids(&g),
        BTreeSet::new(),
        "live rows and a process started after its row ended: {g:#}"
    );

    // DS moves on: every row but `alive` says its process should be over
    let changed_at = chrono::Utc::now();
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7, end_time = '{}' WHERE id IN ({success}, {quick}, {shell})",
        sql_now()
    ))
    .await?;
    p_quick.kill()?;
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 8, flag = 0 WHERE id = {superseded}"
    ))
    .await?;
    let mut newer = superseded_attempt();
    newer.host = Some("10.0.0.12:1234".into());
    newer.submit_time = Some(chrono::Utc::now().naive_utc());
    let newer = db.insert_task(&newer).await?;
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET host = '10.0.0.12:1234' WHERE id = {moved}"
    ))
    .await?;
    db.exec(&format!(
        "DELETE FROM t_ds_task_instance WHERE id = {vanished}"
    ))
    .await?;

    let want: BTreeSet<i64> = [success, superseded, moved, vanished].into();
    wait_until("the four ghosts are reported", || async {
        Ok(ghost_ids(&d.json("/api/v1/ghosts").await?) == want)
    })
    .await?;
    let g = d.json("/api/v1/ghosts").await?;
    let by_id = |id: i64| {
        g["ghosts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["task_id"] == id)
            .cloned()
            .unwrap()
    };
    let s = by_id(success);
    for field in [
        "task_id",
        "task_name",
        "workflow_instance_id",
        "worker",
        "pids",
        "started_at",
        "row_state",
        "row_flag",
        "row_host",
        "newer_attempt",
        "reason",
        "evidence",
        "action",
        "note",
        "remote_apps",
    ] {
        assert!(s.get(field).is_some(), "{field} missing: {s:#}");
    }
    assert_eq!(
        s.as_object().unwrap().len(),
        15,
        "exactly the SPEC's fields (§15, and §17's remote_apps): {s:#}"
    );
    assert_eq!(s["remote_apps"], serde_json::json!([]), "[yarn] is off");
    assert_eq!(s["reason"], "ghost_process");
    assert_eq!(s["worker"], WORKER);
    assert_eq!(s["row_state"], "SUCCESS");
    assert_eq!(s["action"], "report");
    assert_eq!(s["pids"], serde_json::json!([procs[0].pid()]));
    let f = by_id(superseded);
    assert_eq!(f["row_flag"], 0);
    assert_eq!(f["newer_attempt"]["id"], newer, "{f:#}");
    assert_eq!(f["newer_attempt"]["host"], "10.0.0.12:1234");
    assert_eq!(by_id(moved)["row_host"], "10.0.0.12:1234");
    assert_eq!(by_id(moved)["evidence"]["over"], "other_host");
    assert!(by_id(vanished)["row_state"].is_null());
    // read while it ran, then deleted: a no_row ghost, not row_never_seen
    assert_eq!(by_id(vanished)["evidence"]["over"], "no_row");
    assert!(by_id(vanished)["note"].is_null(), "{g:#}");

    // not before ghost_after: each was first seen over after the change,
    // and reported (detected) at least ghost_after after that
    let detected: Vec<serde_json::Value> = d
        .audit()
        .into_iter()
        .filter(|r| r["event"] == "detected" && r["kind"] == "process")
        .collect();
    assert_eq!(detected.len(), 4, "{detected:#?}");
    for r in &detected {
        let at = |v: &serde_json::Value| {
            chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
                .unwrap()
                .with_timezone(&chrono::Utc)
        };
        let over_since = at(&r["evidence"]["over_since"]);
        assert!(
            over_since >= changed_at - chrono::TimeDelta::seconds(1),
            "{r:#}"
        );
        assert!(
            at(&r["ts"]) - over_since >= chrono::TimeDelta::seconds(GHOST_AFTER_S),
            "reported before ghost_after: {r:#}"
        );
    }

    // the rest never, however long it goes on
    d.wait_sweeps(5).await?;
    let g = d.json("/api/v1/ghosts").await?;
    assert_eq!(ghost_ids(&g), want, "{g:#}");
    assert_eq!(d.metric("ds_reaper_ghosts").await?, Some(4.0));
    // a report, a page and a gauge: DS's rows are as the test left them
    assert_eq!(db.task_state(alive).await?.state, 1);
    assert_eq!(db.task_state(success).await?.state, 7);
    assert_eq!(db.task_state(moved).await?.state, 1);
    assert_eq!(db.task_state(beside).await?.state, 1);
    assert!(d.audit().iter().all(|r| r["event"] != "intent"));
    let page = reqwest::get(d.url("/")).await?.text().await?;
    assert!(page.contains("id=\"ghosts\""), "the status page's section");

    // `check` finds the SUCCESS row's ghost in one look (it has an end time) and exits 1
    let cli = CliConfig::new(db.url(), root, "")?;
    let (code, out, err) = cli
        .run(&["check", "--format", "json", "--observe", "4s"], GHOST_ENV)
        .await?;
    assert_eq!(code, 1, "{out}\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    assert!(ghost_ids(&doc).contains(&success), "{doc:#}");

    assert_eq!(d.terminate().await?, Some(0));
    agent.child.start_kill()?;
    let _ = agent.child.wait().await;
    p_tty.kill()?;
    drop((procs, late_proc));
    sc.cleanup().await
}

/// Pids whose working directory is `dir` or below (a zombie has none).
fn pids_in(dir: &std::path::Path) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c.starts_with(dir)) {
            out.insert(pid);
        }
    }
    out
}

/// With `[policy] ghost_process = "kill"` and an agent allowed to kill: the
/// leader orders the kill (intent first), the agent ends the whole tree — a
/// child that ignores SIGTERM by SIGKILL — and answers; the daemon audits
/// `done`, counts it and removes the order node. A running task's process
/// beside it is never signalled; DS's rows are never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_order_ends_the_ghosts_whole_tree() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _workers) = sc.cluster().await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let ghost = db.insert_task(&TaskSpec::new(wf, 1, Some(WORKER))).await?;
    let alive = db.insert_task(&TaskSpec::new(wf, 1, Some(WORKER))).await?;
    let exec = ExecBase::new()?;
    let dir = exec.execute_path(line, wf, ghost)?;
    // a task whose child ignores SIGTERM (and so does that child's own sleep)
    let mut tree = TaskProcess::spawn(
        &dir,
        "sh",
        &["-c", "(trap '' TERM; sleep 86400; :) & sleep 86400; :"],
    )?;
    let mut p_alive = exec.start(line, wf, alive)?;
    let mut agent = AgentProcess::start(
        root,
        WORKER,
        exec.path(),
        "allow_kill = true\nkill_grace = \"1s\"\n",
    )
    .await?;
    let mut d = Daemon::start_with_env(
        db.url(),
        root,
        // finished rows' leftovers too (SPEC §15: `terminal_state` is
        // killed only when a rule names it)
        &format!("{KILL}{TERMINAL}"),
        GHOST_ENV,
    )
    .await?;
    d.wait_ready().await?;
    wait_until(
        "the tree has started and the agent lists both tasks",
        || async {
            let w = d.json("/api/v1/workers").await?;
            Ok(pids_in(&dir).len() >= 4
                && w["workers"].as_array().into_iter().flatten().any(|x| {
                    x["host"] == WORKER && x["agent"]["fresh"] == true && x["agent"]["tasks"] == 2
                }))
        },
    )
    .await?;
    let before = pids_in(&dir);
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7, end_time = '{}' WHERE id = {ghost}",
        sql_now()
    ))
    .await?;

    wait_until("the ghost's whole tree is gone", || async {
        Ok(pids_in(&dir).is_empty())
    })
    .await?;
    assert!(!tree.is_running(), "the tree's root is gone too");
    wait_until("the agent's answer is audited", || async {
        Ok(d.audit()
            .iter()
            .any(|r| r["event"] == "done" && r["kind"] == "process" && r["task_id"] == ghost))
    })
    .await?;
    let records: Vec<serde_json::Value> = d
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "process" && r["task_id"] == ghost)
        .collect();
    let events: Vec<&str> = records.iter().filter_map(|r| r["event"].as_str()).collect();
    assert_eq!(events, ["detected", "intent", "done"], "{records:#?}");
    assert!(
        records[2]["detail"].as_str().unwrap().starts_with("killed"),
        "{:#}",
        records[2]
    );
    let pids = records[1]["evidence"]["pids"].clone();
    assert!(
        pids.as_array()
            .unwrap()
            .iter()
            .all(|p| before.contains(&(p.as_i64().unwrap() as i32))),
        "ordered only processes of the tree: {pids} of {before:?}"
    );
    d.wait_metric("ds_reaper_ghost_actions_total{result=\"killed\"}", |v| {
        v == 1.0
    })
    .await?;
    let client = zookeeper_client::Client::connect(&zk_connect()).await?;
    let node = format!("{root}/ds-reaper/orders/{WORKER}/{ghost}");
    wait_until("the order node is removed", || async {
        Ok(client.check_stat(&node).await?.is_none())
    })
    .await?;
    d.wait_sweeps(3).await?;
    assert!(ghost_ids(&d.json("/api/v1/ghosts").await?).is_empty());
    assert!(
        p_alive.is_running(),
        "the running task's process is never signalled"
    );
    assert_eq!(db.task_state(alive).await?.state, 1);
    assert_eq!(
        db.task_state(ghost).await?.state,
        7,
        "DS's row left as DS wrote it"
    );
    assert_eq!(d.terminate().await?, Some(0));
    agent.child.start_kill()?;
    let _ = agent.child.wait().await;
    sc.cleanup().await
}
