//! Chaos suite: the daemon under ZooKeeper loss, its own session expiring, the
//! database going away, SIGKILL mid-batch, flapping workers and tasks finishing
//! while they are reaped. Every scenario checks the same invariants: no wrong
//! write (no live worker's task failed, no finished task touched), every real
//! zombie handled exactly once, every audit `intent` closed by an outcome (or,
//! after a SIGKILL, the row shows the write landed), and the daemon never exits.
//!
//! ZooKeeper kills use a private server (`PrivateZk`); the database outage is a
//! proxy in this process. The shared services are never disturbed.

use crate::common_chaos::*;
use anyhow::Result;
use ds_sim::db::{SimDb, SimKind, SimPool, TaskSpec, WorkflowSpec};
use ds_sim::zk::{SimFleet, SimOptions, SimServer};
use ds_sim::zkserver::PrivateZk;
use reaper_core::NodeKind;
use reaper_e2e::*;
use sqlx::Row;
use std::collections::BTreeMap;
use std::time::Duration;

const RUNNING: i32 = 1;
const FAILURE: i32 = 6;
const SUCCESS: i32 = 7;

fn started() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() - chrono::Duration::hours(1)
}

fn recent() -> chrono::NaiveDateTime {
    (chrono::Utc::now() - chrono::Duration::minutes(5)).naive_utc()
}

async fn task(db: &SimDb, wf: i64, host: &str) -> Result<i64> {
    let mut t = TaskSpec::new(wf, RUNNING, Some(host));
    t.submit_time = Some(recent());
    t.start_time = Some(recent());
    db.insert_task(&t).await
}

/// id -> state of every task row in `[a, b]`.
async fn states(db: &SimDb, a: i64, b: i64) -> Result<BTreeMap<i64, i32>> {
    let sql = format!(
        "SELECT CAST(id AS SIGNED), CAST(state AS SIGNED) FROM t_ds_task_instance \
         WHERE id BETWEEN {a} AND {b}"
    );
    let SimPool::My(p) = &db.pool else {
        anyhow::bail!("chaos suite runs on MariaDB");
    };
    let mut out = BTreeMap::new();
    for r in sqlx::query(&sql).fetch_all(p).await? {
        out.insert(r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)? as i32);
    }
    Ok(out)
}

/// The invariants every scenario ends with, for zombies `zombies` (must end
/// FAILURE, one `done` each) and rows `untouched` (must keep their state).
async fn assert_outcome(
    d: &mut Daemon,
    db: &SimDb,
    zombies: &[i64],
    untouched: &[(i64, i32)],
    crashes: usize,
) -> Result<()> {
    assert_alive(d).await?;
    for &(id, st) in untouched {
        assert_eq!(
            db.task_state(id).await?.state,
            st,
            "task {id} must be untouched; log:\n{}",
            d.log_text()
        );
    }
    for &id in zombies {
        assert_eq!(db.task_state(id).await?.state, FAILURE, "zombie {id}");
    }
    let audit = d.audit();
    let s = summarize_audit(&audit);
    for &id in zombies {
        let n = s.done.get(&id).copied().unwrap_or(0);
        // A SIGKILL after the batch's commit but before its outcomes leaves
        // the row FAILURE (checked above) and an intent the restarted daemon
        // closes as `error` (interrupted): handled once, not written again.
        let ok = n == 1 || (crashes > 0 && n == 0 && s.errors.contains(&id));
        assert!(ok, "zombie {id}: {n} done records; {s:?}");
    }
    for &(id, _) in untouched {
        assert!(
            !s.done.contains_key(&id),
            "untouched task {id} has a done record"
        );
    }
    assert!(
        s.orphan_intents.is_empty(),
        "intents without outcome: {:?}",
        s.orphan_intents
    );
    Ok(())
}

/// ZooKeeper killed with -9 and restarted: the daemon survives, acts on
/// nothing while its view is invalid, and reaps again once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_zookeeper_killed_and_restarted() -> Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let mut pzk = PrivateZk::start().await?;
    let zk = pzk.connect_string();
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let root = unique_root();
    // Sessions longer than the outage, so live servers stay live across it.
    let opts = SimOptions {
        session_timeout: Duration::from_secs(40),
        ..SimOptions::default()
    };
    let reg = |kind, host: &'static str| {
        SimServer::register_with(
            &zk,
            &root,
            (db.line, kind),
            host,
            &[],
            started(),
            opts.clone(),
        )
    };
    let _m = reg(NodeKind::Master, "10.0.0.1:5678").await?;
    let mut w1 = reg(NodeKind::Worker, "10.0.0.11:1234").await?;
    let _w2 = reg(NodeKind::Worker, "10.0.0.12:1234").await?;
    let mut w3 = reg(NodeKind::Worker, "10.0.0.13:1234").await?;
    let _w4 = reg(NodeKind::Worker, "10.0.0.14:1234").await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = task(&db, wf, "10.0.0.11:1234").await?;
    let t2 = task(&db, wf, "10.0.0.12:1234").await?;
    let t3 = task(&db, wf, "10.0.0.13:1234").await?;
    let t4 = task(&db, wf, "10.0.0.14:1234").await?;
    let env = [
        ("DS_REAPER__ZOOKEEPER__CONNECT", zk.as_str()),
        ("DS_REAPER__ZOOKEEPER__SESSION_TIMEOUT", "30s"),
    ];
    let extra = format!("[policy]\nworker_lost = \"fail\"\n{RELAXED}");
    let mut d = Daemon::start_with_env(db.url(), &root, &extra, &env).await?;
    d.wait_ready().await?;

    w1.crash().await;
    wait_until("t1 failed", || async {
        Ok(db.task_state(t1).await?.state == FAILURE)
    })
    .await?;

    pzk.kill9().await?;
    wait_until("view invalid after the ZooKeeper kill", || async {
        Ok(d.metric("ds_reaper_registry_view_valid").await? == Some(0.0))
    })
    .await?;
    assert_alive(&mut d).await?;
    hold(
        "the daemon outlives ZooKeeper's absence",
        Duration::from_secs(3),
    )
    .await;
    assert_alive(&mut d).await?;
    pzk.start_again().await?;
    wait_until("view valid again", || async {
        Ok(d.metric("ds_reaper_registry_view_valid").await? == Some(1.0))
    })
    .await?;
    // still reaping after the restart
    w3.crash().await;
    wait_until("t3 failed after the ZooKeeper restart", || async {
        Ok(db.task_state(t3).await?.state == FAILURE)
    })
    .await?;
    // a few more sweeps: nothing else may be written
    d.wait_sweeps(3).await?;
    assert_outcome(&mut d, &db, &[t1, t3], &[(t2, RUNNING), (t4, RUNNING)], 0).await?;
    assert_eq!(d.terminate().await?, Some(0));
    db.drop().await?;
    Ok(())
}

/// The daemon's own session expires (SIGSTOP longer than the session timeout):
/// it rebuilds its view, restarts absence clocks, and acts correctly after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_daemon_session_expired() -> Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let pzk = PrivateZk::start().await?;
    let zk = pzk.connect_string();
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let root = unique_root();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk, &root, db.line, "10.0.0.1:5678", started()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = task(&db, wf, "10.0.0.11:1234").await?;
    let t2 = task(&db, wf, "10.0.0.12:1234").await?;
    let t3 = task(&db, wf, "10.0.0.13:1234").await?;
    let env = [
        ("DS_REAPER__ZOOKEEPER__CONNECT", zk.as_str()),
        ("DS_REAPER__ZOOKEEPER__SESSION_TIMEOUT", "4s"),
    ];
    let extra = format!("[policy]\nworker_lost = \"fail\"\n{RELAXED}");
    let mut d = Daemon::start_with_env(db.url(), &root, &extra, &env).await?;
    d.wait_ready().await?;
    let pid = d.child.id().expect("daemon pid");

    kill(pid, "-STOP")?;
    // w1 dies while the daemon is frozen: its loss is seen only on the rebuild.
    w1.crash().await;
    hold(
        "the daemon stays frozen past its 4 s session timeout",
        Duration::from_secs(12),
    )
    .await;
    kill(pid, "-CONT")?;
    wait_until("session expiry counted", || async {
        Ok(d.metric("ds_reaper_zk_session_expirations_total")
            .await?
            .unwrap_or(0.0)
            >= 1.0)
    })
    .await?;
    wait_until("t1 failed after the rebuild", || async {
        Ok(db.task_state(t1).await?.state == FAILURE)
    })
    .await?;
    d.wait_sweeps(3).await?;
    assert_outcome(&mut d, &db, &[t1], &[(t2, RUNNING), (t3, RUNNING)], 0).await?;
    assert_eq!(d.terminate().await?, Some(0));
    db.drop().await?;
    Ok(())
}

/// The database unreachable for ~30 s (a proxy drops every connection), then
/// back: no exit, no write during the outage, the zombie reaped once after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_database_unavailable_then_back() -> Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let upstream = {
        let u = db.url();
        let rest = u.split_once("://").map(|x| x.1).unwrap_or(u);
        let hostport = rest.rsplit_once('@').map(|x| x.1).unwrap_or(rest);
        hostport
            .split('/')
            .next()
            .unwrap_or("127.0.0.1:3306")
            .to_string()
    };
    let proxy = Proxy::start(&upstream).await?;
    let url = via_proxy(db.url(), proxy.port);
    let root = unique_root();
    let zk = zk_connect();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk, &root, db.line, "10.0.0.1:5678", started()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t1 = task(&db, wf, "10.0.0.11:1234").await?;
    let t2 = task(&db, wf, "10.0.0.12:1234").await?;
    let t3 = task(&db, wf, "10.0.0.13:1234").await?;
    let extra = format!("[policy]\nworker_lost = \"fail\"\n{RELAXED}");
    let mut d = Daemon::start(&url, &root, &extra).await?;
    d.wait_ready().await?;

    proxy.down();
    w1.crash().await;
    wait_until("readyz reports the database", || async {
        Ok(d.get("/readyz").await?.0 == 503)
    })
    .await?;
    for _ in 0..6 {
        hold("the database stays unreachable", Duration::from_secs(5)).await;
        assert_alive(&mut d).await?;
        assert_eq!(
            db.task_state(t1).await?.state,
            RUNNING,
            "no write while down"
        );
    }
    assert!(d.metric("ds_reaper_db_errors_total").await?.unwrap_or(0.0) >= 1.0);
    proxy.up();
    wait_until("t1 failed after the database came back", || async {
        Ok(db.task_state(t1).await?.state == FAILURE)
    })
    .await?;
    d.wait_sweeps(3).await?;
    assert_outcome(&mut d, &db, &[t1], &[(t2, RUNNING), (t3, RUNNING)], 0).await?;
    assert_eq!(d.terminate().await?, Some(0));
    let _ = ds_sim::zk::delete_tree(&zk, &root).await;
    db.drop().await?;
    Ok(())
}

/// SIGKILL while a batch of 500 zombies is being reaped, then a restart on the
/// same audit file: every zombie handled exactly once in the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_daemon_killed_mid_batch() -> Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let root = unique_root();
    let zk = zk_connect();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk, &root, db.line, "10.0.0.1:5678", started()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let (a, b) = db.bulk_fill(wf, 500, RUNNING, "10.0.0.11:1234").await?;
    assert_eq!(b - a + 1, 500);
    let live1 = task(&db, wf, "10.0.0.12:1234").await?;
    let live2 = task(&db, wf, "10.0.0.13:1234").await?;
    let done_before = db
        .exec(&format!(
            "UPDATE t_ds_task_instance SET state = {SUCCESS} WHERE id = {a}"
        ))
        .await?;
    assert_eq!(done_before, 1);
    // the bulk rows carry an end_time; a finished one must stay as it is
    // the whole batch in one sweep, so the kill lands inside it
    let env = [("DS_REAPER__RECONCILE__MAX_ACTIONS_PER_SWEEP", "1000")];
    let extra = format!("[policy]\nworker_lost = \"fail\"\n{RELAXED}");
    let mut d = Daemon::start_with_env(db.url(), &root, &extra, &env).await?;
    d.wait_ready().await?;

    // A row lock held by "someone else" stalls the batch's transaction inside
    // its writes, so the SIGKILL lands mid-batch by construction.
    let SimPool::My(pool) = &db.pool else {
        anyhow::bail!("MariaDB expected")
    };
    let mut lock = pool.begin().await?;
    sqlx::query(&format!(
        "SELECT id FROM t_ds_task_instance WHERE id = {} FOR UPDATE",
        a + 250
    ))
    .execute(&mut *lock)
    .await?;
    w1.crash().await;
    wait_until("the batch's intents are on disk", || async {
        Ok(summarize_audit(&d.audit()).orphan_intents.len() >= 499)
    })
    .await?;
    hold(
        "the batch stays blocked on the locked row",
        Duration::from_millis(1500),
    )
    .await;
    let before = summarize_audit(&d.audit());
    assert!(
        before.done.is_empty(),
        "the batch finished despite the lock: {before:?}"
    );
    let pid = d.child.id().expect("pid");
    kill(pid, "-KILL")?;
    let _ = d.child.wait().await;
    lock.rollback().await?;
    let s = states(&db, a + 1, b).await?;
    let failed_at_kill = s.values().filter(|&&v| v == FAILURE).count();
    println!(
        "killed mid-batch: {} intents open, {failed_at_kill}/499 rows FAILURE right after",
        before.orphan_intents.len()
    );
    kill9_and_respawn(&mut d, &env).await?;
    d.wait_ready().await?;
    wait_until("every zombie failed after the restart", || async {
        Ok(states(&db, a + 1, b).await?.values().all(|&v| v == FAILURE))
    })
    .await?;
    d.wait_sweeps(3).await?;
    let zombies: Vec<i64> = (a + 1..=b).collect();
    assert_outcome(
        &mut d,
        &db,
        &zombies,
        &[(a, SUCCESS), (live1, RUNNING), (live2, RUNNING)],
        1,
    )
    .await?;
    assert_eq!(d.terminate().await?, Some(0));
    db.drop().await?;
    Ok(())
}

/// 100 workers flapping (gone for well under the grace period, then back):
/// nothing is written; then 3 go for good and only their tasks are failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_hundred_flapping_workers() -> Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let root = unique_root();
    let zk = zk_connect();
    let hosts: Vec<String> = (0..100)
        .map(|i| format!("10.1.{}.{}:1234", i / 250, i % 250 + 1))
        .collect();
    let _m = SimServer::register(
        &zk,
        &root,
        db.line,
        NodeKind::Master,
        "10.0.0.1:5678",
        &[],
        started(),
    )
    .await?;
    let fleet = SimFleet::register(
        &zk,
        &root,
        (db.line, NodeKind::Worker),
        &hosts,
        &[],
        started(),
        SimOptions::default(),
    )
    .await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut tasks = Vec::new();
    for h in &hosts {
        tasks.push((task(&db, wf, h).await?, h.clone()));
    }
    let env = [("DS_REAPER__RECONCILE__GRACE_PERIOD", "15s")];
    let extra = format!("[policy]\nworker_lost = \"fail\"\n{RELAXED}");
    let mut d = Daemon::start_with_env(db.url(), &root, &extra, &env).await?;
    d.wait_ready().await?;

    let mut rng = Rng::new(0x5eed_f1a9);
    for _round in 0..6 {
        // a random third of the fleet blinks out for ~0.3–1 s
        let mut gone = Vec::new();
        for h in &hosts {
            if rng.below(3) == 0 && fleet.remove_host(h).await? {
                gone.push(h.clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
        for h in &gone {
            fleet.add_host(h, NodeKind::Worker, &[]).await?;
        }
        hold(
            "the fleet settles after a blink",
            Duration::from_millis(500),
        )
        .await;
        assert_alive(&mut d).await?;
    }
    // well past the grace period after the last blink: nothing may be written
    hold(
        "no flapping worker's task is written past the 15 s grace",
        Duration::from_secs(17),
    )
    .await;
    d.wait_sweeps(2).await?;
    let s = states(&db, tasks[0].0, tasks[99].0).await?;
    assert!(
        s.values().all(|&v| v == RUNNING),
        "a flapping worker's task was written: {s:?}\n{}",
        d.log_text()
    );
    assert!(
        d.metric("ds_reaper_workers_lost_total")
            .await?
            .unwrap_or(0.0)
            >= 1.0
    );

    let dead: Vec<usize> = vec![7, 42, 93];
    for &i in &dead {
        assert!(fleet.remove_host(&tasks[i].1).await?);
    }
    let dead_ids: Vec<i64> = dead.iter().map(|&i| tasks[i].0).collect();
    wait_until("the 3 dead workers' tasks failed", || async {
        for id in &dead_ids {
            if db.task_state(*id).await?.state != FAILURE {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    let untouched: Vec<(i64, i32)> = tasks
        .iter()
        .enumerate()
        .filter(|(i, _)| !dead.contains(i))
        .map(|(_, (id, _))| (*id, RUNNING))
        .collect();
    assert_outcome(&mut d, &db, &dead_ids, &untouched, 0).await?;
    assert_eq!(d.terminate().await?, Some(0));
    fleet.close().await;
    let _ = ds_sim::zk::delete_tree(&zk, &root).await;
    db.drop().await?;
    Ok(())
}

/// Tasks finish (as DS would write them) at random while their zombies are
/// being reaped: a finished row is never touched, every other zombie failed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_tasks_finishing_while_reaped() -> Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let root = unique_root();
    let zk = zk_connect();
    let (_m, [mut w1, _w2, _w3]) =
        master_and_three_workers(&zk, &root, db.line, "10.0.0.1:5678", started()).await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let (a, b) = db.bulk_fill(wf, 300, RUNNING, "10.0.0.11:1234").await?;
    let (la, lb) = db.bulk_fill(wf, 100, RUNNING, "10.0.0.12:1234").await?;
    let env = [("DS_REAPER__RECONCILE__MAX_ACTIONS_PER_SWEEP", "25")];
    let extra = format!("[policy]\nworker_lost = \"fail\"\n{RELAXED}");
    let mut d = Daemon::start_with_env(db.url(), &root, &extra, &env).await?;
    d.wait_ready().await?;

    // First a race the daemon must lose, made certain with a row lock: the
    // batch reads row `a` live, blocks on our lock, and we finish the row
    // before releasing it.
    let SimPool::My(pool) = &db.pool else {
        anyhow::bail!("MariaDB expected")
    };
    let mut lock = pool.begin().await?;
    sqlx::query(&format!(
        "SELECT id FROM t_ds_task_instance WHERE id = {a} FOR UPDATE"
    ))
    .execute(&mut *lock)
    .await?;
    w1.crash().await;
    wait_until("intent for the locked row", || async {
        Ok(d.audit()
            .iter()
            .any(|r| r["event"] == "intent" && r["task_id"] == a))
    })
    .await?;
    hold(
        "the batch reaches the locked row",
        Duration::from_millis(300),
    )
    .await;
    sqlx::query(&format!(
        "UPDATE t_ds_task_instance SET state = {SUCCESS}, end_time = NOW() WHERE id = {a}"
    ))
    .execute(&mut *lock)
    .await?;
    lock.commit().await?;
    // DS finishing tasks: conditional, so we know exactly which ones we finished.
    let mut finished = std::collections::BTreeSet::new();
    finished.insert(a);
    let mut rng = Rng::new(0xf1_2157);
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let zombie = a + rng.below((b - a + 1) as u64) as i64;
        let live = la + rng.below((lb - la + 1) as u64) as i64;
        for id in [zombie, live] {
            let n = db
                .exec(&format!(
                    "UPDATE t_ds_task_instance SET state = {SUCCESS}, end_time = NOW() \
                     WHERE id = {id} AND state = {RUNNING}"
                ))
                .await?;
            if n == 1 {
                finished.insert(id);
            }
        }
        let s = states(&db, a, b).await?;
        if s.values().all(|&v| v != RUNNING) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "zombies not reaped in time"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.wait_sweeps(3).await?;
    let s = states(&db, a, b).await?;
    let ls = states(&db, la, lb).await?;
    let mut zombies = Vec::new();
    let mut untouched = Vec::new();
    for (&id, &st) in s.iter().chain(ls.iter()) {
        if finished.contains(&id) {
            untouched.push((id, SUCCESS));
        } else if id <= b {
            zombies.push(id);
        } else {
            untouched.push((id, RUNNING));
        }
        let _ = st;
    }
    let races = summarize_audit(&d.audit()).lost_race;
    assert!(
        races.contains(&a),
        "the locked row's write was a lost race: {races:?}"
    );
    let lost_races = races.len();
    println!(
        "{} zombies finished by 'DS' during reaping, {} failed by the daemon, {} lost races",
        finished.iter().filter(|&&i| i <= b).count(),
        zombies.len(),
        lost_races
    );
    assert!(!zombies.is_empty(), "some zombies reaped by the daemon");
    assert_outcome(&mut d, &db, &zombies, &untouched, 0).await?;
    assert_eq!(d.terminate().await?, Some(0));
    db.drop().await?;
    Ok(())
}
