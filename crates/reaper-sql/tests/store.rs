//! The `TaskStore` port on real MariaDB and PostgreSQL, used the way the
//! engine uses it: through `Arc<dyn TaskStore>`, the store keeping the cursor.

mod sql_setup;

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::ports::{PortError, PortErrorKind, Scan, TaskStore};
use reaper_core::{Action, DsLine, FollowUp};
use reaper_sql::*;
use sql_setup::*;
use std::sync::Arc;
use std::time::Duration;

async fn port(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let sql = Arc::new(SqlStore::new(connect(&sim, Duration::from_secs(30))));
    let store: Arc<dyn TaskStore> = sql.clone();
    store.ping().await.unwrap();
    let info = store.detect().await.unwrap();
    assert!(info.lines.contains(&line), "{fixture}: {:?}", info.lines);

    let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let spec = |state, host: &str| TaskSpec::new(wf, state, Some(host));
    let a = sim.insert_task(&spec(1, "10.0.0.5:1234")).await.unwrap();
    let old = sim.insert_task(&spec(7, "10.0.0.5:1234")).await.unwrap();
    let pending = sim.insert_task(&TaskSpec::new(wf, 0, None)).await.unwrap();
    let states = [1];

    // the first incremental read of a fresh store is a full scan
    let c = store
        .candidates(line, &states, Scan::Incremental)
        .await
        .unwrap();
    assert_eq!(ids(&c), [a], "{fixture}");
    let stats = sql.cursor_stats().await;
    assert_eq!((stats.tracked, stats.pending), (1, 1), "{fixture}");
    let mark = stats.low_water.expect("a mark after the first sweep");

    // a new row above the mark: the next incremental read sees it
    let b = sim.insert_task(&spec(1, "10.0.0.6:1234")).await.unwrap();
    let c = store
        .candidates(line, &states, Scan::Incremental)
        .await
        .unwrap();
    assert_eq!(ids(&c), [a, b], "{fixture}");
    assert!(sql.cursor_stats().await.low_water >= Some(mark));

    // an untracked row below the mark turning live: only a full scan sees it
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 1 WHERE id = {old}"
    ))
    .await
    .unwrap();
    let c = store
        .candidates(line, &states, Scan::Incremental)
        .await
        .unwrap();
    assert_eq!(ids(&c), [a, b], "{fixture}");
    // `check`'s scan sees it and leaves the sweep's cursor alone
    let before = sql.cursor_stats().await;
    let once = store.scan_once(line, &states).await.unwrap();
    assert_eq!(ids(&once), [a, old, b], "{fixture}");
    assert_eq!(sql.cursor_stats().await, before);
    // the sweep's full scan sees it and tracks it from now on
    let full = store.candidates(line, &states, Scan::Full).await.unwrap();
    assert_eq!(ids(&full), [a, old, b], "{fixture}");
    assert_eq!(sql.cursor_stats().await.tracked, 3);
    let c = store
        .candidates(line, &states, Scan::Incremental)
        .await
        .unwrap();
    assert_eq!(ids(&c), [a, old, b], "{fixture}: tracked by id");

    // one task by id, any state
    let t = store.task(line, pending).await.unwrap().unwrap();
    assert_eq!((t.task.state, t.flag), (0, 1));
    assert!(store.task(line, 999_999_999).await.unwrap().is_none());

    // conditional writes: `a` changed host after the read
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET host = '10.0.0.99:1234' WHERE id = {a}"
    ))
    .await
    .unwrap();
    let seen = |id: i64| full.iter().find(|c| c.id == id).unwrap().clone();
    let w = |id, action| TaskWrite {
        seen: seen(id),
        action,
        now: now(),
    };
    let out = store
        .write_tasks(line, &[w(a, Action::Fail), w(b, Action::Kill)])
        .await
        .unwrap();
    assert_eq!(out, [WriteOutcome::LostRace, WriteOutcome::Applied]);
    assert_eq!(
        sim.task_state(a).await.unwrap().state,
        1,
        "lost race left alone"
    );
    assert_eq!(sim.task_state(b).await.unwrap().state, 9);

    // the follow-up, on a workflow of its own
    let (wf2, t) = one_task_workflow(&sim, sql.db(), line, false).await;
    let write = TaskWrite {
        seen: t.clone(),
        action: Action::Fail,
        now: now(),
    };
    let out = store.write_tasks(line, &[write]).await.unwrap();
    assert_eq!(out, [WriteOutcome::Applied]);
    let req = FollowUpRequest {
        task: t,
        action: Action::Fail,
        follow_up: FollowUp::Fail,
        now: now(),
    };
    let o = store.follow_up(line, &req, &no_live_master).await.unwrap();
    assert!(
        matches!(
            o,
            FollowUpOutcome::Done {
                workflow_state: Some(6),
                ..
            }
        ),
        "{fixture}: {o:?}"
    );
    assert_eq!(
        sim.workflow_col(wf2, "state").await.unwrap().as_deref(),
        Some("6")
    );
    assert!(store.rows_skipped().is_empty());

    // a request the store cannot serve is Invalid, with the adapter's message
    let e = store
        .candidates(line, &[], Scan::Incremental)
        .await
        .unwrap_err();
    assert_eq!(e, PortError::invalid("invalid request: no states to scan"));
    let e = store
        .write_tasks(line, &[w(b, Action::Report)])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), PortErrorKind::Invalid, "{e}");
    sim.drop().await.unwrap();
}

/// A task's state as another session sees it, uncommitted changes included
/// on MySQL (READ UNCOMMITTED), so that an UPDATE made but not yet committed
/// shows. PostgreSQL has no dirty reads; its check and update are one
/// statement anyway.
async fn uncommitted_state(sim: &ds_sim::db::SimDb, id: i64) -> Result<i32, String> {
    match &sim.pool {
        ds_sim::db::SimPool::My(p) => {
            let mut c = p.acquire().await.map_err(|e| e.to_string())?;
            sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
                .execute(&mut *c)
                .await
                .map_err(|e| e.to_string())?;
            let st: i32 = sqlx::query_scalar(&format!(
                "SELECT state FROM t_ds_task_instance WHERE id = {id}"
            ))
            .fetch_one(&mut *c)
            .await
            .map_err(|e| e.to_string())?;
            // the connection goes back to the pool: leave it as it was
            sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *c)
                .await
                .map_err(|e| e.to_string())?;
            Ok(st)
        }
        ds_sim::db::SimPool::Pg(_) => {
            Ok(sim.task_state(id).await.map_err(|e| e.to_string())?.state)
        }
    }
}

/// SPEC §4.7 through the port: no row changes before `before_write` (the
/// engine's intents on disk) completes, and none at all when it fails — the
/// locks of MySQL's locking read are then released, so the next write goes
/// through.
async fn write_waits_for_before_write(kind: SimKind) {
    let Some(sim) = setup(kind, "3.2.2").await else {
        return;
    };
    let line = sim.line;
    let store: Arc<dyn TaskStore> = Arc::new(SqlStore::new(connect(&sim, Duration::from_secs(30))));
    let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let spec = TaskSpec::new(wf, 1, Some("10.0.0.5:1234"));
    let x = sim.insert_task(&spec).await.unwrap();
    let y = sim.insert_task(&spec).await.unwrap();
    let full = store.candidates(line, &[1], Scan::Full).await.unwrap();
    let w = |id: i64| TaskWrite {
        seen: full.iter().find(|c| c.id == id).unwrap().clone(),
        action: Action::Fail,
        now: now(),
    };

    let state_when_ready = Arc::new(std::sync::Mutex::new(None));
    let seen = state_when_ready.clone();
    let sim_ref = &sim;
    let out = store
        .write_tasks_after(
            line,
            &[w(x)],
            Box::pin(async move {
                let st = uncommitted_state(sim_ref, x)
                    .await
                    .map_err(reaper_core::ports::GateRefused)?;
                *seen.lock().unwrap() = Some(st);
                Ok(())
            }),
        )
        .await
        .unwrap();
    assert_eq!(out, [WriteOutcome::Applied]);
    assert_eq!(
        *state_when_ready.lock().unwrap(),
        Some(1),
        "{kind:?}: the row changed before the intents were on disk"
    );
    assert_eq!(sim.task_state(x).await.unwrap().state, 6);

    let e = store
        .write_tasks_after(
            line,
            &[w(y)],
            Box::pin(async {
                Err(reaper_core::ports::GateRefused(
                    "the audit disk is full".to_string(),
                ))
            }),
        )
        .await
        .unwrap_err();
    assert!(
        // the engine's gate refused: its own kind, not a fault of the store
        e.kind() == PortErrorKind::Refused
            && e.to_string()
                .contains("not written: the audit disk is full"),
        "{kind:?}: {e}"
    );
    assert_eq!(sim.task_state(y).await.unwrap().state, 1, "{kind:?}");
    let out = store.write_tasks(line, &[w(y)]).await.unwrap();
    assert_eq!(out, [WriteOutcome::Applied], "{kind:?}: locks released");
    sim.drop().await.unwrap();
}

#[tokio::test]
async fn write_waits_for_before_write_mysql() {
    write_waits_for_before_write(SimKind::MySql).await;
}

#[tokio::test]
async fn write_waits_for_before_write_pg() {
    write_waits_for_before_write(SimKind::Postgres).await;
}

/// A server that accepts connections and says nothing: the store is
/// Unavailable, and a failed read leaves the cursor as it was.
async fn silent_server(scheme: &str) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            conns.push(s);
        }
    });
    let db = Db::connect_lazy(&DbSettings {
        url: format!("{scheme}://u:p@{addr}/db"),
        password: None,
        max_connections: 1,
        statement_timeout: Duration::from_millis(200),
        zone: reaper_core::Zone::Local,
    })
    .unwrap();
    let sql = Arc::new(SqlStore::with_cursor(db, SweepCursor::with_mark(42)));
    let store: Arc<dyn TaskStore> = sql.clone();
    let e = store.ping().await.unwrap_err();
    assert!(
        e.kind() == PortErrorKind::Unavailable
            && e.to_string()
                .starts_with("database call timed out (client side)"),
        "{e}"
    );
    let e = store
        .candidates(DsLine::V3_2, &[1], Scan::Incremental)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), PortErrorKind::Unavailable, "{e}");
    assert_eq!(sql.cursor_stats().await.low_water, Some(42));
    held.abort();
}

#[tokio::test]
async fn port_unavailable_on_a_silent_mysql_server() {
    silent_server("mysql").await;
}

#[tokio::test]
async fn port_unavailable_on_a_silent_postgres_server() {
    silent_server("postgres").await;
}

#[tokio::test]
async fn port_mysql_3_2_2() {
    port(SimKind::MySql, "3.2.2").await;
}

#[tokio::test]
async fn port_mysql_3_3_2() {
    port(SimKind::MySql, "3.3.2").await;
}

#[tokio::test]
async fn port_pg_3_2_2() {
    port(SimKind::Postgres, "3.2.2").await;
}

#[tokio::test]
async fn port_pg_3_3_2() {
    port(SimKind::Postgres, "3.3.2").await;
}
