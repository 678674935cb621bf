//! What a kill order needs beyond a path (SPEC §12, §15), end to end: the
//! real `ds-reaper` daemon with `ghost_process = "kill"`, real `ds-reaper
//! agent` processes allowed to kill, real task processes. Each test has a
//! ghost that is killed in the same sweeps — so kills are on and carried out
//! — beside the processes that must live:
//! - two workers on one machine and one exec base: neither's task, nor an
//!   orphan of a third worker there, is another host's ghost;
//! - a listed task whose row this daemon never read is reported
//!   (`row_never_seen`), never killed; a row read, then deleted, is killed
//!   (`no_row`); many listed tasks without rows hold every kill
//!   (`database_mismatch`);
//! - a finished row's leftover is reported under `ghost_process = "kill"`,
//!   and killed only under a rule naming `terminal_state`;
//! - an agent that cannot see its worker's JVM (the heartbeat's pid is no
//!   `java`, or a `java` started after the heartbeat's `startupTime`) is
//!   blind, and nothing on its host is killed.

use ds_sim::db::{SimDb, SimKind, TaskSpec, WorkflowSpec};
use ds_sim::procs::{ExecBase, TaskProcess};
use reaper_e2e::kills::*;
use reaper_e2e::*;
use std::collections::BTreeSet;
use std::time::Duration;

const WORKER: &str = "10.0.0.11:1234";
/// Another machine's worker (the usual cluster's), without an agent.
const ELSEWHERE: &str = "10.0.0.12:1234";

/// RUNNING rows on `host` in one new workflow instance: (workflow, ids).
async fn running_rows(db: &SimDb, host: &str, n: usize) -> anyhow::Result<(i64, Vec<i64>)> {
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(db.insert_task(&TaskSpec::new(wf, 1, Some(host))).await?);
    }
    Ok((wf, ids))
}

/// Fails at once when `/api/v1/ghosts` lists any of `never` (or one of them
/// is no longer alive); else whether `done` holds.
async fn none_of(
    d: &Daemon,
    never: &[(i64, i32)],
    done: impl std::future::Future<Output = anyhow::Result<bool>>,
) -> anyhow::Result<bool> {
    let g = d.json("/api/v1/ghosts").await?;
    for (task, pid) in never {
        anyhow::ensure!(
            ghost_of(&g, *task).is_none(),
            "task {task} is a ghost: {g:#}"
        );
        anyhow::ensure!(alive(*pid), "task {task}'s process {pid} was killed");
    }
    done.await
}

/// Item 1. Two worker JVM stand-ins on one machine (10.0.0.21, ports 1234 and
/// 1235), both workers' task folders in one exec base, one agent per worker,
/// a RUNNING row on each; a third worker on the machine (1236, no agent) whose
/// RUNNING task's process is an orphan both agents list. Each agent lists its
/// own worker's task and the orphan, never the other's; none of the three is
/// a ghost or killed, sweep after sweep — while a task of the first JVM whose
/// row moved to another machine's worker is killed as `other_host` by the
/// same sweeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_one_host_never_kill_each_others_tasks() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _workers) = sc.cluster().await?;
    let (a, b, c) = ("10.0.0.21:1234", "10.0.0.21:1235", "10.0.0.21:1236");
    let (wf, on_a) = running_rows(db, a, 2).await?;
    let (task_a, moved) = (on_a[0], on_a[1]);
    let task_b = db.insert_task(&TaskSpec::new(wf, 1, Some(b))).await?;
    let task_c = db.insert_task(&TaskSpec::new(wf, 1, Some(c))).await?;
    let exec = ExecBase::new()?;
    let old = |_: i32| -> anyhow::Result<_> { Ok(long_ago()) };
    let tasks_a = [(wf, task_a), (wf, moved)];
    let jvm_a = JvmWorker::start(root, line, a, &exec, &tasks_a, old).await?;
    let jvm_b = JvmWorker::start(root, line, b, &exec, &[(wf, task_b)], old).await?;
    let _c = server(root, line, reaper_core::NodeKind::Worker, c, &[]).await?;
    let mut orphan = exec.start(line, wf, task_c)?;
    let (pid_a, pid_moved) = (jvm_a.task_pids(0).await?, jvm_a.task_pids(1).await?);
    let pid_b = jvm_b.task_pids(0).await?;
    let agent_a = sc.agent(a, exec.path(), AGENT_KILLS).await?;
    let agent_b = sc.agent(b, exec.path(), AGENT_KILLS).await?;
    let d = sc.daemon_with_env(KILL, GHOST_ENV).await?;
    d.wait_ready().await?;
    agent_lists(&d, a, 3).await?;
    agent_lists(&d, b, 2).await?;
    let client = zookeeper_client::Client::connect(&zk_connect()).await?;
    for (w, own, other) in [(a, task_a, task_b), (b, task_b, task_a)] {
        let node = format!("{root}/ds-reaper/agents/{w}");
        let (data, _) = client.get_data(&node).await?;
        let r = reaper_core::agent::AgentReport::parse(&node, &data)?;
        let lineage = |t: i64| r.tasks.iter().find(|x| x.task_id == t).map(|x| x.lineage);
        use reaper_core::agent::Lineage;
        assert_eq!(lineage(own), Some(Some(Lineage::Own)), "{r:#?}");
        assert_eq!(lineage(task_c), Some(Some(Lineage::Orphan)), "{r:#?}");
        assert_eq!(
            lineage(other),
            None,
            "{w} lists the other JVM's task: {r:#?}"
        );
    }
    d.wait_sweeps(2).await?;

    // the control: the first JVM's other task moves to another machine
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET host = '{ELSEWHERE}' WHERE id = {moved}"
    ))
    .await?;
    let never = [
        (task_a, pid_a[0]),
        (task_b, pid_b[0]),
        (task_c, orphan.pid()),
    ];
    wait_until("the moved task is killed, nothing else", || {
        none_of(&d, &never, async {
            Ok(pid_moved.iter().all(|p| !alive(*p)) && process_events(&d, "done") == [moved])
        })
    })
    .await?;
    let intent = d.audit_events("intent", Some(moved));
    assert_eq!(intent[0]["evidence"]["over"], "other_host", "{intent:#?}");
    // well past ghost_after, sweep after sweep: still none of them
    for _ in 0..4 {
        d.wait_sweeps(2).await?;
        assert!(none_of(&d, &never, async { Ok(true) }).await?);
    }
    assert_eq!(process_events(&d, "intent"), [moved], "{:#?}", d.audit());
    for w in [a, b, c] {
        assert!(
            order_nodes(&client, root, w).await?.is_empty(),
            "an order on {w}"
        );
    }
    for (task, host) in [(task_a, a), (task_b, b), (task_c, c)] {
        let row = db.task_state(task).await?;
        assert_eq!((row.state, row.host.as_deref()), (1, Some(host)));
    }
    assert!(orphan.is_running());
    drop(d);
    stop_agent(agent_a).await;
    stop_agent(agent_b).await;
    drop((jvm_a, jvm_b));
    sc.cleanup().await
}

/// Item 2 (a, b). A listed task whose id this daemon never read (no row from
/// the start) is reported with the note `row_never_seen`, as `no_row`, and
/// never killed; a row the daemon read, then deleted while its process runs,
/// is a `no_row` ghost and killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_never_read_is_reported_a_row_read_then_deleted_is_killed() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _workers) = sc.cluster().await?;
    let (wf, ids) = running_rows(db, WORKER, 2).await?;
    let (deleted, running) = (ids[0], ids[1]);
    // far past every id this database hands out in the test
    let unread = running + 100_000;
    let exec = ExecBase::new()?;
    let mut p_deleted = exec.start(line, wf, deleted)?;
    let mut p_running = exec.start(line, wf, running)?;
    let mut p_unread = exec.start(line, wf, unread)?;
    let agent = sc.agent(WORKER, exec.path(), AGENT_KILLS).await?;
    let d = sc.daemon_with_env(KILL, GHOST_ENV).await?;
    d.wait_ready().await?;
    agent_lists(&d, WORKER, 3).await?;
    // a sweep after the agent was fresh has read every listed id
    d.wait_sweeps(2).await?;
    db.exec(&format!(
        "DELETE FROM t_ds_task_instance WHERE id = {deleted}"
    ))
    .await?;

    let (pid_deleted, pid_unread) = (p_deleted.pid(), p_unread.pid());
    wait_until(
        "the deleted row's process killed, the unread one reported",
        || async {
            let g = d.json("/api/v1/ghosts").await?;
            anyhow::ensure!(alive(pid_unread), "the unread task's process was killed");
            Ok(!alive(pid_deleted)
                && process_events(&d, "done") == [deleted]
                && ghost_of(&g, unread).is_some())
        },
    )
    .await?;
    assert!(!p_deleted.is_running());
    let intent = d.audit_events("intent", Some(deleted));
    assert_eq!(intent[0]["evidence"]["over"], "no_row", "{intent:#?}");
    // well past ghost_after, sweep after sweep: reported, never ordered
    for _ in 0..3 {
        d.wait_sweeps(2).await?;
        let g = d.json("/api/v1/ghosts").await?;
        let u = ghost_of(&g, unread).expect("the unread task stays reported");
        assert_eq!(u["note"], "row_never_seen", "{u:#}");
        assert_eq!(u["evidence"]["over"], "no_row", "{u:#}");
        assert_eq!(u["action"], "report", "{u:#}");
        assert!(u["row_state"].is_null(), "{u:#}");
        assert_eq!(u["pids"], serde_json::json!([p_unread.pid()]));
        assert!(ghost_of(&g, running).is_none(), "{g:#}");
        assert!(p_unread.is_running() && p_running.is_running());
    }
    assert_eq!(process_events(&d, "intent"), [deleted], "{:#?}", d.audit());
    let client = zookeeper_client::Client::connect(&zk_connect()).await?;
    assert!(order_nodes(&client, root, WORKER).await?.is_empty());
    assert_eq!(db.task_state(running).await?.state, 1);
    drop(d);
    stop_agent(agent).await;
    p_unread.kill()?;
    sc.cleanup().await
}

/// Item 2 (c). `brake.min_zombies = 3` and three listed tasks without a row
/// this daemon ever read: every kill is held, noted `database_mismatch` —
/// a row read then deleted (`no_row`) and a row handed to fault tolerance
/// (`need_fault_tolerance`, flag 0) — while their processes live, sweep after
/// sweep. The three end (the database agrees with the cluster again) and the
/// held kills follow: the mismatch was all that held them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_listed_tasks_without_rows_hold_every_kill() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _workers) = sc.cluster().await?;
    let (wf, ids) = running_rows(db, WORKER, 2).await?;
    let (deleted, failed_over) = (ids[0], ids[1]);
    let unread: Vec<i64> = (1..=3).map(|i| failed_over + 100_000 + i).collect();
    let exec = ExecBase::new()?;
    let mut held: Vec<TaskProcess> = Vec::new();
    for id in [deleted, failed_over] {
        held.push(exec.start(line, wf, id)?);
    }
    let mut p_unread: Vec<TaskProcess> = Vec::new();
    for id in &unread {
        p_unread.push(exec.start(line, wf, *id)?);
    }
    let agent = sc.agent(WORKER, exec.path(), AGENT_KILLS).await?;
    let cfg = format!("{KILL}{TERMINAL}[brake]\nmin_zombies = 3\n");
    let d = sc.daemon_with_env(&cfg, GHOST_ENV).await?;
    d.wait_ready().await?;
    agent_lists(&d, WORKER, 5).await?;
    d.wait_sweeps(2).await?;
    db.exec(&format!(
        "DELETE FROM t_ds_task_instance WHERE id = {deleted}"
    ))
    .await?;
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 8, flag = 0 WHERE id = {failed_over}"
    ))
    .await?;

    let want: BTreeSet<i64> = [deleted, failed_over].into();
    let all: Vec<i32> = held.iter().chain(&p_unread).map(TaskProcess::pid).collect();
    wait_until("both kills held as database_mismatch", || async {
        for pid in &all {
            anyhow::ensure!(alive(*pid), "process {pid} was killed");
        }
        let g = ghosts(&d.json("/api/v1/ghosts").await?);
        let held: BTreeSet<i64> = g
            .iter()
            .filter(|x| x["action"] == "kill" && x["note"] == "database_mismatch")
            .filter_map(|x| x["task_id"].as_i64())
            .collect();
        Ok(held == want)
    })
    .await?;
    // Named hold: nothing happens while the rows disagree — several more
    // sweeps, and longer than the agent's scan interval and kill grace, so an
    // order written would have been carried out by now.
    d.wait_sweeps(4).await?;
    hold(
        "past the agent's scan interval and kill grace",
        Duration::from_secs(3),
    )
    .await;
    let g = d.json("/api/v1/ghosts").await?;
    for id in &want {
        let x = ghost_of(&g, *id).expect("still reported");
        assert_eq!(x["note"], "database_mismatch", "{x:#}");
    }
    for id in &unread {
        let x = ghost_of(&g, *id).expect("reported");
        assert_eq!(x["note"], "row_never_seen", "{x:#}");
    }
    assert_eq!(
        ghost_of(&g, failed_over).unwrap()["evidence"]["over"],
        "need_fault_tolerance"
    );
    assert!(process_events(&d, "intent").is_empty(), "{:#?}", d.audit());
    let client = zookeeper_client::Client::connect(&zk_connect()).await?;
    assert!(
        order_nodes(&client, root, WORKER).await?.is_empty(),
        "no order"
    );
    for p in held.iter_mut().chain(p_unread.iter_mut()) {
        assert!(p.is_running(), "pid {} was signalled", p.pid());
    }

    // the rowless processes end: the held kills go through
    for p in &mut p_unread {
        p.kill()?;
    }
    let pids: Vec<i32> = held.iter().map(TaskProcess::pid).collect();
    wait_until("the held ghosts' processes are gone", || async {
        Ok(pids.iter().all(|p| !alive(*p)))
    })
    .await?;
    let ordered: BTreeSet<i64> = process_events(&d, "intent").into_iter().collect();
    assert_eq!(ordered, want);
    drop(d);
    stop_agent(agent).await;
    sc.cleanup().await
}

/// Item 3. Under `ghost_process = "kill"` — and a rule that matches the row
/// (`task_type = "SHELL"`, `action = "kill"`) without naming its kind — a
/// SUCCESS row's leftover is reported (`terminal_state`, action `report`)
/// and lives, sweep after sweep, while a row handed to fault tolerance beside
/// it is killed. With a rule naming `over = ["terminal_state"]` the next
/// daemon kills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_rows_leftover_is_killed_only_under_a_rule_naming_it() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, line) = (&sc.db, sc.line());
    let (_m, _workers) = sc.cluster().await?;
    let (wf, ids) = running_rows(db, WORKER, 2).await?;
    let (finished, failed_over) = (ids[0], ids[1]);
    let exec = ExecBase::new()?;
    let mut p_finished = exec.start(line, wf, finished)?;
    let mut p_failed_over = exec.start(line, wf, failed_over)?;
    let agent = sc.agent(WORKER, exec.path(), AGENT_KILLS).await?;
    let shell_kill =
        "[[policy.rules]]\nreason = \"ghost_process\"\ntask_type = \"SHELL\"\naction = \"kill\"\n";
    let mut d = sc
        .daemon_with_env(&format!("{KILL}{shell_kill}"), GHOST_ENV)
        .await?;
    d.wait_ready().await?;
    agent_lists(&d, WORKER, 2).await?;
    d.wait_sweeps(2).await?;
    finish(db, &[finished]).await?;
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 8, flag = 0 WHERE id = {failed_over}"
    ))
    .await?;

    let (pid_failed_over, pid_finished) = (p_failed_over.pid(), p_finished.pid());
    wait_until(
        "the failed-over row's process killed, the finished one reported",
        || async {
            let g = d.json("/api/v1/ghosts").await?;
            anyhow::ensure!(
                alive(pid_finished),
                "the finished row's leftover was killed"
            );
            Ok(!alive(pid_failed_over)
                && process_events(&d, "done") == [failed_over]
                && ghost_of(&g, finished).is_some())
        },
    )
    .await?;
    assert!(!p_failed_over.is_running());
    for _ in 0..3 {
        d.wait_sweeps(2).await?;
        let g = d.json("/api/v1/ghosts").await?;
        let f = ghost_of(&g, finished).expect("the leftover stays reported");
        assert_eq!(f["evidence"]["over"], "terminal_state", "{f:#}");
        assert_eq!(f["row_state"], "SUCCESS", "{f:#}");
        assert_eq!(f["action"], "report", "{f:#}");
        assert!(p_finished.is_running(), "the leftover was killed");
    }
    assert_eq!(process_events(&d, "intent"), [failed_over]);
    assert!(
        process_events(&d, "detected").contains(&finished),
        "reported in the audit trail: {:#?}",
        d.audit()
    );
    assert_eq!(d.terminate().await?, Some(0));

    // a rule naming the kind
    let d = sc
        .daemon_with_env(&format!("{KILL}{TERMINAL}"), GHOST_ENV)
        .await?;
    d.wait_ready().await?;
    wait_until("the leftover is killed", || async {
        Ok(!alive(pid_finished) && process_events(&d, "done") == [finished])
    })
    .await?;
    let intent = d.audit_events("intent", Some(finished));
    assert_eq!(
        intent[0]["evidence"]["over"], "terminal_state",
        "{intent:#?}"
    );
    assert_eq!(
        db.task_state(finished).await?.state,
        7,
        "DS's row untouched"
    );
    drop(d);
    stop_agent(agent).await;
    sc.cleanup().await
}

/// Item 4. Three workers on three machines, each with an agent (a tight
/// `clock_skew_tolerance` of 5 s) and a SUCCESS row whose process still runs,
/// under a rule that kills finished rows' leftovers. The first's heartbeat
/// `processId` is a live `sleep`, not a `java`; the second's is a `java`
/// stand-in that started an hour after the heartbeat's `startupTime`; the
/// third's is a `java` stand-in with its own start time. The first two agents
/// list their task's process but are blind (reports, `/readyz`, the daemon's
/// view say so), and nothing on their hosts is killed; the third's leftover is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_see_its_workers_jvm_kills_nothing() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _workers) = sc.cluster().await?;
    let (not_java, late, seen) = ("10.0.0.31:1234", "10.0.0.32:1234", "10.0.0.33:1234");
    let (wf, ids) = running_rows(db, not_java, 1).await?;
    let t_not_java = ids[0];
    let t_late = db.insert_task(&TaskSpec::new(wf, 1, Some(late))).await?;
    let t_seen = db.insert_task(&TaskSpec::new(wf, 1, Some(seen))).await?;
    let (exec_n, exec_l, exec_s) = (ExecBase::new()?, ExecBase::new()?, ExecBase::new()?);

    // a live process that is no JVM, carried as the first worker's processId
    let mut sleeper = TaskProcess::spawn(std::path::Path::new("/tmp"), "sleep", &["86400"])?;
    let sleeper_pid = u32::try_from(sleeper.pid())?;
    let _n = ds_sim::zk::SimServer::register_as(
        &zk_connect(),
        root,
        (line, reaper_core::NodeKind::Worker),
        not_java,
        &[],
        process_started_at(sleeper.pid())?,
        ds_sim::zk::SimOptions::default(),
        sleeper_pid,
    )
    .await?;
    let mut p_not_java = exec_n.start(line, wf, t_not_java)?;
    let an_hour_before = |pid: i32| -> anyhow::Result<_> {
        Ok(process_started_at(pid)? - chrono::TimeDelta::hours(1))
    };
    // The late JVM's task process is not its child: an agent that cannot
    // verify its JVM takes every `java` for another worker's and lists no
    // process below one, so an orphan is what it still lists.
    let jvm_l = JvmWorker::start(root, line, late, &exec_l, &[], an_hour_before).await?;
    let mut p_late = exec_l.start(line, wf, t_late)?;
    let tasks_s = [(wf, t_seen)];
    let jvm_s = JvmWorker::start(root, line, seen, &exec_s, &tasks_s, process_started_at).await?;
    let pid_seen = jvm_s.task_pids(0).await?;

    let tight = [("DS_REAPER__RECONCILE__CLOCK_SKEW_TOLERANCE", "5s")];
    let mut agents = Vec::new();
    for (w, exec) in [(not_java, &exec_n), (late, &exec_l), (seen, &exec_s)] {
        agents.push(AgentProcess::start_with_env(root, w, exec.path(), AGENT_KILLS, &tight).await?);
    }
    let d = sc
        .daemon_with_env(&format!("{KILL}{TERMINAL}"), GHOST_ENV)
        .await?;
    d.wait_ready().await?;
    agent_lists(&d, seen, 1).await?;
    for w in [not_java, late] {
        wait_until(&format!("{w}'s agent reports its task"), || async {
            Ok(agent_view(&d, w).await?["tasks"] == 1)
        })
        .await?;
    }
    finish(db, &[t_not_java, t_late, t_seen]).await?;
    let never = [(t_not_java, p_not_java.pid()), (t_late, p_late.pid())];
    wait_until("the seen worker's leftover is killed, nothing else", || {
        none_of(&d, &never, async {
            Ok(pid_seen.iter().all(|p| !alive(*p)) && process_events(&d, "done") == [t_seen])
        })
    })
    .await?;
    for _ in 0..4 {
        d.wait_sweeps(2).await?;
        assert!(none_of(&d, &never, async { Ok(true) }).await?);
    }
    assert_eq!(process_events(&d, "intent"), [t_seen], "{:#?}", d.audit());
    // why: the two agents are blind, and say so
    let blind_for = [
        (not_java, "not a java process"),
        (late, "after the heartbeat's startupTime"),
    ];
    for ((w, why), agent) in blind_for.iter().zip(&agents) {
        wait_until(&format!("{w}'s agent is blind"), || async {
            let a = agent_view(&d, w).await?;
            Ok(a["fresh"] == false && a["blind"].as_str().is_some_and(|b| b.contains(why)))
        })
        .await?;
        let (code, body) = agent.get("/readyz").await?;
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("blind") && body.contains(why), "{body}");
    }
    let (code, body) = agents[2].get("/readyz").await?;
    assert_eq!(code, 200, "the seeing agent: {body}");
    let client = zookeeper_client::Client::connect(&zk_connect()).await?;
    for w in [not_java, late] {
        assert!(
            order_nodes(&client, root, w).await?.is_empty(),
            "an order on {w}"
        );
        assert_eq!(agent_view(&d, w).await?["fresh"], false);
    }
    assert!(p_not_java.is_running() && p_late.is_running() && sleeper.is_running());
    drop(d);
    for a in agents {
        stop_agent(a).await;
    }
    drop((jvm_l, jvm_s));
    sc.cleanup().await
}
