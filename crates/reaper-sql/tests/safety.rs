//! The adapter's safety rules (SPEC §4.9–4.12, §5) on real MariaDB and
//! PostgreSQL: the workflow owner re-checked under the row lock, `fail` kept
//! off DS's failover state and queued commands, columns learned from the
//! catalog, undecodable rows, statement time limits.

mod sql_setup;

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::{Action, DsLine, FollowUp};
use reaper_sql::*;
use sql_setup::*;
use std::time::Duration;

const OWNER: &str = "10.0.0.1:5678";
const TAKER: &str = "10.0.0.2:5678";

fn skipped_with(o: &FollowUpOutcome, needle: &str) -> bool {
    matches!(o, FollowUpOutcome::Skipped(m) if m.contains(needle))
}

/// SPEC §4.9 / §5 `recover` (items 4 and 10): whether a live master holds the
/// workflow is decided under the row lock, from the caller's current view.
async fn owner_recheck(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    for action in [Action::Fail, Action::FaultTolerance] {
        // DS's own failover hands the workflow to a live master between the
        // task write and the follow-up: the follow-up must see the new owner.
        let (wf, t) = one_task_workflow(&sim, &db, line, false).await;
        assert_eq!(t.workflow_host.as_deref(), Some(OWNER));
        write(&db, line, &t, action).await;
        sim.exec(&format!(
            "UPDATE {} SET host = '{TAKER}' WHERE id = {wf}",
            line.workflow_table()
        ))
        .await
        .unwrap();
        let taker_live = |h: &str| h == TAKER;
        let o = follow(&db, line, &t, action, FollowUp::Recover, &taker_live).await;
        assert!(
            skipped_with(&o, &format!("live master {TAKER}")),
            "{fixture} {action}: {o:?}"
        );
        assert_eq!(
            sim.workflow_col(wf, "host").await.unwrap().as_deref(),
            Some(TAKER),
            "{fixture}: the new owner's host is left alone"
        );
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("1"),
            "{fixture}: the workflow is not written"
        );
        assert!(
            sim.commands().await.unwrap().is_empty(),
            "{fixture}: no command queued"
        );

        // The owner never left and is live now (on 1.x it runs the workflow
        // in a thread of its own; a second command would duplicate the run).
        let (wf, t) = one_task_workflow(&sim, &db, line, false).await;
        write(&db, line, &t, action).await;
        let owner_live = |h: &str| h == OWNER;
        let o = follow(&db, line, &t, action, FollowUp::Recover, &owner_live).await;
        assert!(
            skipped_with(&o, &format!("live master {OWNER}")),
            "{fixture} {action}: {o:?}"
        );
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("1")
        );
        assert!(sim.commands().await.unwrap().is_empty(), "{fixture}");
    }

    // The same workflow with its owner gone is recovered: the closure is what
    // decides, asked with the raw host.
    let (_, t) = one_task_workflow(&sim, &db, line, false).await;
    write(&db, line, &t, Action::FaultTolerance).await;
    let asked = std::sync::Mutex::new(Vec::<String>::new());
    let record = |h: &str| {
        asked.lock().unwrap().push(h.to_string());
        false
    };
    let o = follow(
        &db,
        line,
        &t,
        Action::FaultTolerance,
        FollowUp::Recover,
        &record,
    )
    .await;
    assert!(
        matches!(
            o,
            FollowUpOutcome::Done {
                command_type: Some(2),
                ..
            }
        ),
        "{fixture}: {o:?}"
    );
    assert_eq!(*asked.lock().unwrap(), vec![OWNER.to_string()]);
    assert_eq!(sim.commands().await.unwrap().len(), 1);

    // A workflow already in DS's failover hands (host 'NULL') is not a live
    // master's: the closure is not even asked.
    if line < DsLine::V3_3 {
        let wf = sim
            .insert_workflow(&WorkflowSpec {
                host: Some("NULL".into()),
                ..WorkflowSpec::default()
            })
            .await
            .unwrap();
        let tid = sim
            .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
            .await
            .unwrap();
        let t = db.task(line, tid).await.unwrap().unwrap().task;
        write(&db, line, &t, Action::Fail).await;
        let never = |h: &str| panic!("asked about {h}");
        let o = follow(&db, line, &t, Action::Fail, FollowUp::Recover, &never).await;
        assert!(
            matches!(
                o,
                FollowUpOutcome::Done {
                    command_type: Some(4),
                    ..
                }
            ),
            "{fixture}: {o:?}"
        );
    }
    sim.drop().await.unwrap();
}

/// SPEC §5 `fail` (item 5): never over DS's own FAILOVER (18), never while a
/// command for the workflow is queued.
async fn fail_guards(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));

    if line == DsLine::V3_3 {
        let wf = sim
            .insert_workflow(&WorkflowSpec {
                state: 18,
                ..WorkflowSpec::default()
            })
            .await
            .unwrap();
        let tid = sim
            .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
            .await
            .unwrap();
        let t = db.task(line, tid).await.unwrap().unwrap().task;
        let o = write_then_follow(&db, line, &t, Action::Fail, FollowUp::Fail).await;
        assert!(skipped_with(&o, "failover state 18"), "{fixture}: {o:?}");
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("18"),
            "{fixture}: DS's FAILOVER is left to DS"
        );
        assert_eq!(sim.workflow_col(wf, "end_time").await.unwrap(), None);
    }

    // a command queued for the workflow (DS's own failover, or a user's
    // recover) — a master will run it, so the workflow must not be failed
    let (wf, t) = one_task_workflow(&sim, &db, line, false).await;
    queue_command(&sim, wf, 2).await;
    let o = write_then_follow(&db, line, &t, Action::Fail, FollowUp::Fail).await;
    assert!(skipped_with(&o, "already queued"), "{fixture}: {o:?}");
    assert_eq!(
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some("1"),
        "{fixture}"
    );
    assert_eq!(sim.workflow_col(wf, "end_time").await.unwrap(), None);
    assert_eq!(sim.commands().await.unwrap().len(), 1);

    // a command for another workflow is no reason to hold back
    let (wf, t) = one_task_workflow(&sim, &db, line, false).await;
    let o = write_then_follow(&db, line, &t, Action::Fail, FollowUp::Fail).await;
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
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some("6")
    );
    sim.drop().await.unwrap();
}

/// SPEC §4.10 (item 6): columns come from the catalog, re-learned on
/// detection; a schema missing what the follow-up needs stops the task write
/// itself, before anything is written.
async fn learned_columns(kind: SimKind) {
    let Some(sim) = setup(kind, "dev").await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    assert_eq!(db.detect().await.unwrap().lines, vec![DsLine::V3_3]);
    let (wf, t) = one_task_workflow(&sim, &db, line, false).await;
    let (_, t2) = one_task_workflow(&sim, &db, line, false).await;
    // the dev (3.3.0) schema upgraded in place to 3.3.1 (PR #17282), as DS's
    // upgrade script does it, while the daemon runs
    for t in [
        "t_ds_command",
        "t_ds_workflow_instance",
        "t_ds_task_instance",
    ] {
        sim.exec(&format!("ALTER TABLE {t} DROP COLUMN test_flag"))
            .await
            .unwrap();
    }
    assert_eq!(db.detect().await.unwrap().lines, vec![DsLine::V3_3]);
    let o = write_then_follow(&db, line, &t, Action::Fail, FollowUp::Recover).await;
    assert!(
        matches!(
            o,
            FollowUpOutcome::Done {
                command_type: Some(4),
                ..
            }
        ),
        "{o:?}"
    );
    let cmds = sim.commands().await.unwrap();
    assert_eq!(cmds.len(), 1);
    assert!(!cmds[0].contains_key("test_flag"));
    assert_eq!(
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some("0")
    );

    // a column every follow-up needs is gone: nothing is written at all
    sim.exec("ALTER TABLE t_ds_workflow_instance DROP COLUMN executor_id")
        .await
        .unwrap();
    db.detect().await.unwrap();
    let t = t2;
    let e = db
        .write_tasks(
            line,
            &[TaskWrite {
                seen: t.clone(),
                action: Action::Fail,
                now: now(),
            }],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, SqlError::SchemaMismatch(ref m) if m.contains("executor_id")),
        "{e}"
    );
    assert_eq!(sim.task_state(t.id).await.unwrap().state, 1, "not written");
    let e = db
        .follow_up(
            line,
            &FollowUpRequest {
                task: t.clone(),
                action: Action::Fail,
                follow_up: FollowUp::Fail,
                now: now(),
            },
            &no_live_master,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, SqlError::SchemaMismatch(_)), "{e}");
    sim.drop().await.unwrap();
}

/// SPEC §4.10: after a reconnect the columns are learned again, without a new
/// detection — on the very connection the follow-up then runs on.
async fn relearned_after_reconnect(kind: SimKind) {
    let Some(sim) = setup(kind, "dev").await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    assert_eq!(db.detect().await.unwrap().lines, vec![DsLine::V3_3]);
    let (wf, t) = one_task_workflow(&sim, &db, line, false).await;
    write(&db, line, &t, Action::Fail).await;
    for t in [
        "t_ds_command",
        "t_ds_workflow_instance",
        "t_ds_task_instance",
    ] {
        sim.exec(&format!("ALTER TABLE {t} DROP COLUMN test_flag"))
            .await
            .unwrap();
    }
    // the server drops every other session (a restart, a failover to an
    // upgraded replica): the adapter's pooled connections are dead
    kill_other_sessions(&sim).await;
    let o = follow(
        &db,
        line,
        &t,
        Action::Fail,
        FollowUp::Recover,
        &no_live_master,
    )
    .await;
    assert!(
        matches!(
            o,
            FollowUpOutcome::Done {
                command_type: Some(4),
                ..
            }
        ),
        "{o:?}"
    );
    assert!(!sim.commands().await.unwrap()[0].contains_key("test_flag"));
    assert_eq!(
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some("0")
    );
    sim.drop().await.unwrap();
}

async fn kill_other_sessions(sim: &ds_sim::db::SimDb) {
    match &sim.pool {
        ds_sim::db::SimPool::My(p) => {
            let mut c = p.acquire().await.unwrap();
            let ids: Vec<i64> = sqlx::query_scalar(
                "SELECT CAST(id AS SIGNED) FROM information_schema.processlist \
                 WHERE db = DATABASE() AND id <> CONNECTION_ID()",
            )
            .fetch_all(&mut *c)
            .await
            .unwrap();
            assert!(!ids.is_empty());
            for id in ids {
                // a session may end by itself meanwhile
                let _ = sqlx::query(&format!("KILL {id}")).execute(&mut *c).await;
            }
        }
        ds_sim::db::SimPool::Pg(p) => {
            let n: Vec<bool> = sqlx::query_scalar(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            .fetch_all(p)
            .await
            .unwrap();
            assert!(!n.is_empty());
        }
    }
}

/// SPEC §4.12 (item 7): a row that cannot be decoded is skipped, counted once,
/// never ends a scan early, and is read again after the low-water mark has
/// passed it.
async fn undecodable_row(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    let states = [1];
    let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let a = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let mut cur = SweepCursor::new();
    assert_eq!(
        ids(&db.full_scan(line, &states, &mut cur).await.unwrap()),
        [a]
    );

    // A live row with a time the decoder rejects — DS never writes one, a
    // hand edit can: on MariaDB a zero month and day in a real year (a lax
    // sql_mode accepts it; only the all-zero date reads as NULL), on
    // PostgreSQL 'infinity' (beyond chrono's range).
    let bad = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let breaking = match kind {
        SimKind::MySql => format!(
            "SET SESSION sql_mode = ''; \
             UPDATE t_ds_task_instance SET submit_time = '2024-00-00 00:00:00' WHERE id = {bad}"
        ),
        SimKind::Postgres => {
            format!("UPDATE t_ds_task_instance SET submit_time = 'infinity' WHERE id = {bad}")
        }
    };
    sim.exec(&breaking).await.unwrap();
    // More than a page of unfinished rows after it, then a live one: a page
    // ended by the rows decoded instead of the rows read would stop before it.
    sim.bulk_fill(wf, 5_100, 0, "10.0.0.5:1234").await.unwrap();
    let c = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.6:1234")))
        .await
        .unwrap();

    let inc = db.incremental(line, &states, &mut cur).await.unwrap();
    assert_eq!(
        ids(&inc),
        [a, c],
        "{fixture}: the rows after the bad one are read"
    );
    assert_eq!(cur.undecodable(), 1);
    assert_eq!(
        db.rows_skipped(),
        vec![("t_ds_task_instance".to_string(), 1)]
    );
    let mut fresh = SweepCursor::new();
    let full = db.full_scan(line, &states, &mut fresh).await.unwrap();
    assert_eq!(ids(&full), [a, c], "{fixture}: full scan too");
    assert_eq!(fresh.undecodable(), 1);

    // the mark moves past the bad row; it is still followed by id
    for _ in 0..2 {
        let inc = db.incremental(line, &states, &mut cur).await.unwrap();
        assert_eq!(ids(&inc), [a, c]);
    }
    assert!(cur.low_water().unwrap() > bad);
    assert_eq!(
        db.rows_skipped(),
        vec![("t_ds_task_instance".to_string(), 1)],
        "counted once, however often it is read"
    );
    assert!(matches!(
        db.task(line, bad).await,
        Err(SqlError::Undecodable { id, .. }) if id == bad
    ));

    // repaired: the incremental sweep sees it, although it is below the mark
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET submit_time = '2024-01-01 00:00:00' WHERE id = {bad}"
    ))
    .await
    .unwrap();
    let inc = db.incremental(line, &states, &mut cur).await.unwrap();
    assert_eq!(ids(&inc), [a, bad, c], "{fixture}");
    assert_eq!(cur.undecodable(), 0);

    // broken and finished: no longer followed
    sim.exec(&breaking).await.unwrap();
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7 WHERE id = {bad}"
    ))
    .await
    .unwrap();
    let inc = db.incremental(line, &states, &mut cur).await.unwrap();
    assert_eq!(ids(&inc), [a, c]);
    assert_eq!(cur.undecodable(), 0);
    sim.drop().await.unwrap();
}

/// SPEC §4.11 (item 8): writes and locking reads are time-limited too; a
/// write blocked by another transaction's row lock comes back as a timeout,
/// and the adapter is usable afterwards.
async fn blocked_write_times_out(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(1));
    let (wf, t) = one_task_workflow(&sim, &db, line, false).await;
    let lock_task = format!(
        "SELECT id FROM t_ds_task_instance WHERE id = {} FOR UPDATE",
        t.id
    );
    let lock_wf = format!(
        "SELECT id FROM {} WHERE id = {wf} FOR UPDATE",
        line.workflow_table()
    );
    let task_write = [TaskWrite {
        seen: t.clone(),
        action: Action::Fail,
        now: now(),
    }];

    // another session holds the task row
    let holder = Holder::lock(&sim, &lock_task).await;
    let e = db.write_tasks(line, &task_write).await.unwrap_err();
    assert!(matches!(e, SqlError::Timeout { .. }), "{fixture}: {e}");
    holder.release().await;
    assert_eq!(sim.task_state(t.id).await.unwrap().state, 1);

    // the write goes through once the lock is gone
    assert_eq!(
        db.write_tasks(line, &task_write).await.unwrap(),
        vec![WriteOutcome::Applied]
    );

    // the follow-up's locking read of the workflow row
    let holder = Holder::lock(&sim, &lock_wf).await;
    let e = db
        .follow_up(
            line,
            &FollowUpRequest {
                task: t.clone(),
                action: Action::Fail,
                follow_up: FollowUp::Fail,
                now: now(),
            },
            &no_live_master,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, SqlError::Timeout { .. }), "{fixture}: {e}");
    holder.release().await;
    let o = follow(&db, line, &t, Action::Fail, FollowUp::Fail, &no_live_master).await;
    assert!(
        matches!(
            o,
            FollowUpOutcome::Done {
                workflow_state: Some(6),
                ..
            }
        ),
        "{o:?}"
    );
    sim.drop().await.unwrap();
}

/// A transaction of another session holding row locks.
enum Holder {
    My(sqlx::Transaction<'static, sqlx::MySql>),
    Pg(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl Holder {
    async fn lock(sim: &ds_sim::db::SimDb, sql: &str) -> Holder {
        match &sim.pool {
            ds_sim::db::SimPool::My(p) => {
                let mut tx = p.begin().await.unwrap();
                sqlx::query(sql).fetch_all(&mut *tx).await.unwrap();
                Holder::My(tx)
            }
            ds_sim::db::SimPool::Pg(p) => {
                let mut tx = p.begin().await.unwrap();
                sqlx::query(sql).fetch_all(&mut *tx).await.unwrap();
                Holder::Pg(tx)
            }
        }
    }
    async fn release(self) {
        match self {
            Holder::My(tx) => tx.rollback().await.unwrap(),
            Holder::Pg(tx) => tx.rollback().await.unwrap(),
        }
    }
}

/// SPEC §4.11, client side: a server that accepts the connection and then
/// says nothing (a hung proxy, a frozen host) still gives a typed timeout.
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
    let e = db.ping().await.unwrap_err();
    assert!(
        matches!(
            e,
            SqlError::Timeout {
                side: TimeoutSide::Client,
                ..
            }
        ),
        "{e}"
    );
    let t = reaper_core::Candidate::new(1, "SHELL", 1, Some("10.0.0.5:1234"));
    let e = db
        .write_tasks(
            DsLine::V3_2,
            &[TaskWrite {
                seen: t,
                action: Action::Fail,
                now: now(),
            }],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, SqlError::Timeout { .. }), "{e}");
    held.abort();
}

#[tokio::test]
async fn client_side_limit_on_a_silent_mysql_server() {
    silent_server("mysql").await;
}

#[tokio::test]
async fn client_side_limit_on_a_silent_postgres_server() {
    silent_server("postgres").await;
}

macro_rules! tests {
    ($f:ident: $($name:ident: $kind:expr, $fx:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            $f($kind, $fx).await;
        }
    )*};
}

tests! { owner_recheck:
    recover_rechecks_owner_mysql_1_2_1: SimKind::MySql, "1.2.1";
    recover_rechecks_owner_mysql_1_3_9: SimKind::MySql, "1.3.9";
    recover_rechecks_owner_mysql_2_0_9: SimKind::MySql, "2.0.9";
    recover_rechecks_owner_mysql_3_2_2: SimKind::MySql, "3.2.2";
    recover_rechecks_owner_mysql_dev: SimKind::MySql, "dev";
    recover_rechecks_owner_mysql_3_3_2: SimKind::MySql, "3.3.2";
    recover_rechecks_owner_pg_1_2_1: SimKind::Postgres, "1.2.1";
    recover_rechecks_owner_pg_1_3_9: SimKind::Postgres, "1.3.9";
    recover_rechecks_owner_pg_2_0_9: SimKind::Postgres, "2.0.9";
    recover_rechecks_owner_pg_3_2_2: SimKind::Postgres, "3.2.2";
    recover_rechecks_owner_pg_dev: SimKind::Postgres, "dev";
    recover_rechecks_owner_pg_3_3_2: SimKind::Postgres, "3.3.2";
}

tests! { fail_guards:
    fail_guards_mysql_dev: SimKind::MySql, "dev";
    fail_guards_mysql_3_3_2: SimKind::MySql, "3.3.2";
    fail_guards_mysql_1_3_9: SimKind::MySql, "1.3.9";
    fail_guards_mysql_3_2_2: SimKind::MySql, "3.2.2";
    fail_guards_pg_dev: SimKind::Postgres, "dev";
    fail_guards_pg_3_3_2: SimKind::Postgres, "3.3.2";
    fail_guards_pg_1_3_9: SimKind::Postgres, "1.3.9";
    fail_guards_pg_3_2_2: SimKind::Postgres, "3.2.2";
}

tests! { undecodable_row:
    undecodable_row_mysql_3_2_2: SimKind::MySql, "3.2.2";
    undecodable_row_mysql_3_3_2: SimKind::MySql, "3.3.2";
    undecodable_row_pg_3_2_2: SimKind::Postgres, "3.2.2";
    undecodable_row_pg_3_3_2: SimKind::Postgres, "3.3.2";
}

/// MariaDB under a lax `sql_mode` holds the all-zero date, which every read
/// gives as NULL; the write's locking read (plain text, no parameters) must
/// agree, or such a zombie would lose every race and never be written.
#[tokio::test]
async fn zero_submit_time_is_written_mysql() {
    let Some(sim) = setup(SimKind::MySql, "3.2.2").await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let zero = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let plain = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    sim.exec(&format!(
        "SET SESSION sql_mode = ''; \
         UPDATE t_ds_task_instance SET submit_time = '0000-00-00 00:00:00' WHERE id = {zero}"
    ))
    .await
    .unwrap();
    let seen = db.task(line, zero).await.unwrap().unwrap().task;
    assert_eq!(seen.submit_time, None, "the all-zero date reads as NULL");
    let other = db.task(line, plain).await.unwrap().unwrap().task;
    let writes: Vec<TaskWrite> = [seen, other]
        .into_iter()
        .map(|t| TaskWrite {
            seen: t,
            action: Action::Fail,
            now: now(),
        })
        .collect();
    assert_eq!(
        db.write_tasks(line, &writes).await.unwrap(),
        vec![WriteOutcome::Applied, WriteOutcome::Applied]
    );
    assert_eq!(sim.task_state(zero).await.unwrap().state, 6);
    assert_eq!(sim.task_state(plain).await.unwrap().state, 6);
    // an id-set read (plain text as well) agrees
    let g = db.ghost_rows(line, &[zero, plain]).await.unwrap();
    assert!(g.undecodable.is_empty(), "{:?}", g.undecodable);
    assert_eq!(g.rows.len(), 2);
    let z = g.rows.iter().find(|r| r.task.id == zero).unwrap();
    assert_eq!(z.task.submit_time, None);
    assert!(z.end_time.is_some(), "the write's end time reads back");
    sim.drop().await.unwrap();
}

tests! { blocked_write_times_out:
    blocked_write_times_out_mysql_3_2_2: SimKind::MySql, "3.2.2";
    blocked_write_times_out_mysql_3_3_2: SimKind::MySql, "3.3.2";
    blocked_write_times_out_pg_3_2_2: SimKind::Postgres, "3.2.2";
    blocked_write_times_out_pg_3_3_2: SimKind::Postgres, "3.3.2";
}

#[tokio::test]
async fn columns_learned_from_the_catalog_mysql() {
    learned_columns(SimKind::MySql).await;
}

#[tokio::test]
async fn columns_learned_from_the_catalog_pg() {
    learned_columns(SimKind::Postgres).await;
}

#[tokio::test]
async fn columns_relearned_after_a_reconnect_mysql() {
    relearned_after_reconnect(SimKind::MySql).await;
}

#[tokio::test]
async fn columns_relearned_after_a_reconnect_pg() {
    relearned_after_reconnect(SimKind::Postgres).await;
}
