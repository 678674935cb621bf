//! Kill orders for ghosts (SPEC §15) under the daemon's safety rules (§4.4–4.6),
//! end to end: real task processes, a real agent with `allow_kill = true`, the
//! real `ds-reaper` binary with `ghost_process = "kill"`. A standby replica never
//! orders (and a new leader takes over without ordering twice); the brake holds
//! every kill (and the kills follow once it releases); the per-sweep cap and the
//! token bucket space the orders out, the rest following later.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::procs::{ExecBase, TaskProcess};
use reaper_e2e::kills::{
    self, alive, finish, ghosts, process_events, stop_agent, AGENT_KILLS, GHOST_ENV, KILL, TERMINAL,
};
use reaper_e2e::*;
use std::collections::BTreeSet;
use std::time::Duration;

const WORKER: &str = "10.0.0.11:1234";
const LEADER: &str = "ds_reaper_leader";
/// These tests finish their rows (SUCCESS), whose leftovers are killed only
/// under a rule naming `terminal_state` (SPEC §15): [`TERMINAL`] comes after
/// any rule a test adds (first match wins).
const ENV: &[(&str, &str)] = GHOST_ENV;

async fn order_nodes(client: &zookeeper_client::Client, root: &str) -> anyhow::Result<Vec<String>> {
    kills::order_nodes(client, root, WORKER).await
}

async fn agent_lists(d: &Daemon, n: usize) -> anyhow::Result<()> {
    kills::agent_lists(d, WORKER, n).await
}

/// Two replicas on one registry root, both with `ghost_process = "kill"`: only
/// the leader orders; the standby detects the ghosts (a report-only one stays
/// for both to see) and writes no intent, no order, no outcome; the ghost dies
/// once. The leader is killed: the new leader orders the next ghost, and never
/// the first one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_never_orders_and_a_new_leader_orders_once() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _workers) = sc.cluster().await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let first = db.insert_task(&TaskSpec::new(wf, 1, Some(WORKER))).await?;
    let second = db.insert_task(&TaskSpec::new(wf, 1, Some(WORKER))).await?;
    let mut py = TaskSpec::new(wf, 1, Some(WORKER));
    py.task_type = "PYTHON".into();
    let reported = db.insert_task(&py).await?;
    let exec = ExecBase::new()?;
    let mut p_first = exec.start(line, wf, first)?;
    let mut p_second = exec.start(line, wf, second)?;
    let mut p_reported = exec.start(line, wf, reported)?;
    let agent = AgentProcess::start(root, WORKER, exec.path(), AGENT_KILLS).await?;
    let cfg = format!(
        "{KILL}[[policy.rules]]\nreason = \"ghost_process\"\ntask_type = \"PYTHON\"\naction = \"report\"\n{TERMINAL}"
    );
    let a = Daemon::start_with_env(db.url(), root, &cfg, ENV).await?;
    let b = Daemon::start_with_env(db.url(), root, &cfg, ENV).await?;
    a.wait_ready().await?;
    b.wait_ready().await?;
    wait_until("exactly one leader", || async {
        Ok(a.metric0(LEADER).await? + b.metric0(LEADER).await? == 1.0)
    })
    .await?;
    a.wait_sweeps(2).await?;
    assert_eq!(
        a.metric0(LEADER).await? + b.metric0(LEADER).await?,
        1.0,
        "stable"
    );
    let a_leads = a.metric0(LEADER).await? == 1.0;
    let (mut leader, standby) = if a_leads { (a, b) } else { (b, a) };
    agent_lists(&standby, 3).await?;

    finish(db, &[first, reported]).await?;
    let pid_first = p_first.pid();
    wait_until("the first ghost's process is gone", || async {
        Ok(!alive(pid_first))
    })
    .await?;
    assert!(!p_first.is_running());
    wait_until(
        "the leader audits the answer; both replicas report the report-only ghost",
        || async {
            Ok(process_events(&leader, "done").contains(&first)
                && process_events(&leader, "detected").contains(&reported)
                && process_events(&standby, "detected").contains(&reported))
        },
    )
    .await?;
    let client = zookeeper_client::Client::connect(&zk_connect()).await?;
    wait_until("the order node is removed", || async {
        Ok(order_nodes(&client, root).await?.is_empty())
    })
    .await?;
    // the standby keeps sweeping, sees the same ghosts, and still orders nothing
    standby.wait_sweeps(3).await?;
    leader.wait_sweeps(2).await?;
    let g = standby.json("/api/v1/ghosts").await?;
    assert!(
        ghosts(&g).iter().any(|x| x["task_id"] == reported),
        "the standby reports: {g:#}"
    );
    for event in ["intent", "done", "error"] {
        assert!(
            process_events(&standby, event).is_empty(),
            "the standby wrote a `{event}` record: {:#?}",
            standby.audit()
        );
    }
    assert_eq!(process_events(&leader, "intent"), [first]);
    assert_eq!(process_events(&leader, "done"), [first]);
    assert_eq!(
        standby
            .metric0("ds_reaper_ghost_actions_total{result=\"killed\"}")
            .await?,
        0.0
    );
    assert_eq!(
        leader
            .metric0("ds_reaper_ghost_actions_total{result=\"killed\"}")
            .await?,
        1.0
    );
    assert_eq!(
        agent
            .metric0("ds_reaper_agent_kills_total{result=\"killed\"}")
            .await?,
        1.0,
        "the ghost was killed once"
    );
    assert!(p_second.is_running() && p_reported.is_running());

    // the leader dies (kill -9): the standby takes over and orders the next
    // ghost, never the first again
    leader.kill().await?;
    standby.wait_metric(LEADER, |v| v == 1.0).await?;
    let mut survivor = standby;
    finish(db, &[second]).await?;
    let pid_second = p_second.pid();
    wait_until("the second ghost's process is gone", || async {
        Ok(!alive(pid_second))
    })
    .await?;
    wait_until("the new leader audits the answer", || async {
        Ok(process_events(&survivor, "done").contains(&second))
    })
    .await?;
    wait_until("its order node is removed", || async {
        Ok(order_nodes(&client, root).await?.is_empty())
    })
    .await?;
    survivor.wait_sweeps(3).await?;
    assert_eq!(process_events(&survivor, "intent"), [second]);
    assert_eq!(process_events(&survivor, "done"), [second]);
    assert!(
        !process_events(&leader, "intent").contains(&second),
        "the dead leader never ordered it"
    );
    assert_eq!(
        agent
            .metric0("ds_reaper_agent_kills_total{result=\"killed\"}")
            .await?,
        2.0,
        "two ghosts, two kills"
    );
    assert!(
        p_reported.is_running(),
        "a report-only ghost is never signalled"
    );
    assert_eq!(db.task_state(reported).await?.state, 7);
    assert_eq!(survivor.terminate().await?, Some(0));
    stop_agent(agent).await;
    p_reported.kill()?;
    sc.cleanup().await
}

/// The brake engaged (two of three workers lost, SPEC §4.4) holds every kill
/// order: the ghosts are reported with the brake's note and every process
/// lives. The workers come back, the brake releases, and the kills follow —
/// the brake was all that held them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brake_holds_every_kill_order() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, [_w1, mut w2, mut w3]) = sc.cluster().await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(db.insert_task(&TaskSpec::new(wf, 1, Some(WORKER))).await?);
    }
    let exec = ExecBase::new()?;
    let mut procs: Vec<TaskProcess> = Vec::new();
    for id in &ids {
        procs.push(exec.start(line, wf, *id)?);
    }
    let agent = AgentProcess::start(root, WORKER, exec.path(), AGENT_KILLS).await?;
    let d = Daemon::start_with_env(
        db.url(),
        root,
        &format!("{KILL}{TERMINAL}[brake]\nrelease_after = \"2s\"\n"),
        ENV,
    )
    .await?;
    d.wait_ready().await?;
    agent_lists(&d, 3).await?;

    w2.crash().await;
    w3.crash().await;
    wait_until("the brake engages", || async {
        Ok(d.json("/api/v1/status").await?["brake"]["engaged"] == true)
    })
    .await?;
    finish(db, &ids).await?;
    let want: BTreeSet<i64> = ids.iter().copied().collect();
    wait_until("every ghost reported, held by the brake", || async {
        let g = ghosts(&d.json("/api/v1/ghosts").await?);
        let held: BTreeSet<i64> = g
            .iter()
            .filter(|x| {
                x["action"] == "kill" && x["note"].as_str().is_some_and(|n| n.contains("brake"))
            })
            .filter_map(|x| x["task_id"].as_i64())
            .collect();
        Ok(held == want)
    })
    .await?;
    // Named hold: nothing happens while the brake is engaged — several more
    // sweeps, and longer than the agent's scan interval and kill grace, so an
    // order written would have been carried out by now.
    d.wait_sweeps(4).await?;
    hold(
        "past the agent's scan interval and kill grace",
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(d.json("/api/v1/status").await?["brake"]["engaged"], true);
    let client = zookeeper_client::Client::connect(&zk_connect()).await?;
    assert!(order_nodes(&client, root).await?.is_empty(), "no order");
    assert!(process_events(&d, "intent").is_empty(), "{:#?}", d.audit());
    for p in &mut procs {
        assert!(p.is_running(), "pid {} was signalled", p.pid());
    }
    assert_eq!(d.metric("ds_reaper_ghosts").await?, Some(3.0));
    assert_eq!(d.metric0("ds_reaper_brake_engaged").await?, 1.0);
    assert_eq!(
        agent
            .metric0("ds_reaper_agent_kills_total{result=\"killed\"}")
            .await?,
        0.0
    );
    let detected: BTreeSet<i64> = process_events(&d, "detected").into_iter().collect();
    assert_eq!(detected, want, "the held ghosts are in the audit trail");
    assert!(
        d.audit().iter().any(|r| r["event"] == "brake"),
        "the brake is audited"
    );

    // the workers return: the brake releases and the held kills go through
    w2.restart(chrono::Utc::now()).await?;
    w3.restart(chrono::Utc::now()).await?;
    let pids: Vec<i32> = procs.iter().map(|p| p.pid()).collect();
    wait_until("every ghost's process is gone", || async {
        Ok(pids.iter().all(|p| !alive(*p)))
    })
    .await?;
    assert_eq!(d.json("/api/v1/status").await?["brake"]["engaged"], false);
    let ordered: BTreeSet<i64> = process_events(&d, "intent").into_iter().collect();
    assert_eq!(ordered, want);
    assert_eq!(
        d.audit_events("done", None)
            .iter()
            .filter(|r| r["kind"] == "process")
            .count(),
        3
    );
    drop(d);
    stop_agent(agent).await;
    sc.cleanup().await
}

/// `max_actions_per_sweep = 2` and `rate.per_minute = 3` (a bucket of three,
/// a token every 20 s) with five ghosts: at most two orders in any sweep,
/// never more orders than the bucket held (by the daemon's own intent
/// timestamps), the ones held noted `sweep cap` / `rate limit` while their
/// processes live, and every ghost ordered and killed in the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_cap_and_the_rate_limit_space_the_kill_orders() -> anyhow::Result<()> {
    let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
        return Ok(());
    };
    const CAP: usize = 2;
    const PER_MINUTE: i64 = 3;
    const N: usize = 5;
    let (db, root, line) = (&sc.db, sc.root.as_str(), sc.line());
    let (_m, _workers) = sc.cluster().await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut ids = Vec::new();
    for _ in 0..N {
        ids.push(db.insert_task(&TaskSpec::new(wf, 1, Some(WORKER))).await?);
    }
    let exec = ExecBase::new()?;
    let mut procs: Vec<TaskProcess> = Vec::new();
    for id in &ids {
        procs.push(exec.start(line, wf, *id)?);
    }
    let agent = AgentProcess::start(root, WORKER, exec.path(), AGENT_KILLS).await?;
    let mut env: Vec<(&str, &str)> = ENV.to_vec();
    let cap = CAP.to_string();
    env.push(("DS_REAPER__RECONCILE__MAX_ACTIONS_PER_SWEEP", &cap));
    let d = Daemon::start_with_env(
        db.url(),
        root,
        &format!("{KILL}{TERMINAL}[rate]\nper_minute = {PER_MINUTE}\n"),
        &env,
    )
    .await?;
    d.wait_ready().await?;
    agent_lists(&d, N).await?;
    finish(db, &ids).await?;

    // the rest wait: ghosts held by the bucket while their processes live
    let pids: Vec<i32> = procs.iter().map(|p| p.pid()).collect();
    wait_until("a ghost held by the rate limit", || async {
        Ok(ghosts(&d.json("/api/v1/ghosts").await?).iter().any(|g| {
            g["action"] == "kill" && g["note"].as_str().is_some_and(|n| n.contains("rate limit"))
        }))
    })
    .await?;
    let living = pids.iter().filter(|p| alive(**p)).count();
    assert!(
        living >= N - PER_MINUTE as usize,
        "only {living} alive while the bucket was empty"
    );
    // and later every one is ordered and killed (a token every 20 s: the
    // last about 40 s after the first three)
    ds_sim::reaper::wait_until(
        "every ghost's process is gone",
        Duration::from_secs(180),
        || async { Ok(pids.iter().all(|p| !alive(*p))) },
    )
    .await?;
    wait_until("every answer audited", || async {
        Ok(process_events(&d, "done").len() == N)
    })
    .await?;

    let at = |r: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(r["ts"].as_str().unwrap_or_default())
            .map(|t| t.with_timezone(&chrono::Utc))
    };
    let mut intents = Vec::new();
    for r in d
        .audit()
        .iter()
        .filter(|r| r["kind"] == "process" && r["event"] == "intent")
    {
        intents.push((at(r)?, r["task_id"].as_i64().unwrap_or(-1)));
    }
    intents.sort();
    let ordered: BTreeSet<i64> = intents.iter().map(|i| i.1).collect();
    assert_eq!(intents.len(), N, "each ghost ordered once: {intents:?}");
    assert_eq!(ordered, ids.iter().copied().collect());
    // one sweep's orders share its clock: never more than the cap in one
    for (i, x) in intents.iter().enumerate() {
        let same = intents.iter().filter(|y| y.0 == x.0).count();
        assert!(
            same <= CAP,
            "{same} orders in one sweep (#{i}): {intents:?}"
        );
    }
    // never more orders in a span than the bucket held plus its refill
    // (one sweep's slack for the bucket's own clock)
    let token = 60.0 / PER_MINUTE as f64;
    for i in 0..intents.len() {
        for j in i + 1..intents.len() {
            let span = (intents[j].0 - intents[i].0).num_milliseconds() as f64 / 1000.0 + 1.0;
            let allowed = PER_MINUTE as f64 + span / token;
            assert!(
                (j - i + 1) as f64 <= allowed,
                "{} orders in {span:.1} s: {intents:?}",
                j - i + 1
            );
        }
    }
    drop(d);
    stop_agent(agent).await;
    sc.cleanup().await
}
