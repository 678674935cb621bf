//! Issue 18 on real MariaDB and PostgreSQL with DS's real schemas: what the
//! adapter reads of a task that DS keeps elsewhere (the execute path, the
//! child workflow of a SUB_PROCESS task, SPEC §3), what DS's master failover
//! writes that `recover` must write too (SPEC §13), and the write path's
//! behaviour under timeouts and slow intents (SPEC §4.7, §4.11).

mod sql_setup;

use ds_sim::db::{SimDb, SimKind, TaskSpec, WorkflowSpec};
use reaper_core::ports::WorkflowOutcome;
use reaper_core::{Action, Candidate, DsLine, FollowUp};
use reaper_sql::*;
use sql_setup::*;
use std::collections::BTreeMap;
use std::time::Duration;

const STATES: [i32; 1] = [1];
const TASK_STATES: [i32; 2] = [1, 17];

fn sub_type(line: DsLine) -> &'static str {
    if line == DsLine::V3_3 {
        "SUB_WORKFLOW"
    } else {
        "SUB_PROCESS"
    }
}

async fn workflow(sim: &SimDb, state: i32) -> i64 {
    sim.insert_workflow(&WorkflowSpec {
        state,
        ..WorkflowSpec::default()
    })
    .await
    .unwrap()
}

async fn task(sim: &SimDb, wf: i64, task_type: &str, state: i32, host: Option<&str>) -> i64 {
    let mut t = TaskSpec::new(wf, state, host);
    t.task_type = task_type.into();
    sim.insert_task(&t).await.unwrap()
}

fn by_id(c: Vec<Candidate>) -> BTreeMap<i64, Candidate> {
    c.into_iter().map(|c| (c.id, c)).collect()
}

/// Item 5: `execute_path` is read where the schema has it, and a
/// SUB_PROCESS / SUB_WORKFLOW candidate carries its child workflow's state
/// (from the relation table) in every read: full scan, incremental, by id.
async fn children_and_paths(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    let sub = sub_type(line);
    let parent = workflow(&sim, 1).await;
    // a child still running
    let running = task(&sim, parent, sub, 1, None).await;
    let c1 = workflow(&sim, 1).await;
    sim.insert_relation(parent, running, c1).await.unwrap();
    // two runs of the task: an older failed child, a newer successful one
    let done = task(&sim, parent, sub, 1, None).await;
    let c2 = workflow(&sim, 6).await;
    let c3 = workflow(&sim, 7).await;
    sim.insert_relation(parent, done, c2).await.unwrap();
    sim.insert_relation(parent, done, c3).await.unwrap();
    // a running child counts whatever came after it
    let mixed = task(&sim, parent, sub, 1, None).await;
    let c4 = workflow(&sim, 1).await;
    let c5 = workflow(&sim, 6).await;
    sim.insert_relation(parent, mixed, c4).await.unwrap();
    sim.insert_relation(parent, mixed, c5).await.unwrap();
    // no child yet
    let lone = task(&sim, parent, sub, 1, None).await;
    // a shell task with its execute path; a stray relation row naming it is
    // not a child (only SUB_PROCESS tasks have one)
    let shell = task(&sim, parent, "SHELL", 1, Some("10.0.0.5:1234")).await;
    let path = format!("/tmp/dolphinscheduler/exec/process/1/2/{parent}/{shell}");
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET execute_path = '{path}' WHERE id = {shell}"
    ))
    .await
    .unwrap();
    sim.insert_relation(parent, shell, c1).await.unwrap();

    let check = |got: &BTreeMap<i64, Candidate>, what: &str| {
        let child = |id: i64| got[&id].child_workflow_state;
        assert_eq!(child(running), Some(1), "{fixture} {what}: running child");
        assert_eq!(child(done), Some(7), "{fixture} {what}: newest child");
        assert_eq!(
            child(mixed),
            Some(1),
            "{fixture} {what}: a running child wins"
        );
        assert_eq!(child(lone), None, "{fixture} {what}: no child");
        assert_eq!(child(shell), None, "{fixture} {what}: not a SUB_PROCESS");
        assert_eq!(got[&shell].execute_path.as_deref(), Some(path.as_str()));
        assert_eq!(got[&running].execute_path, None);
    };
    let mut cursor = SweepCursor::new();
    let full = by_id(db.full_scan(line, &STATES, &mut cursor).await.unwrap());
    check(&full, "full scan");
    // the tracked rows below the mark and a new one above it
    let late = task(&sim, parent, sub, 1, None).await;
    let c6 = workflow(&sim, 0).await;
    sim.insert_relation(parent, late, c6).await.unwrap();
    sim.exec(&format!(
        "UPDATE {} SET state = 7 WHERE id = {c1}",
        line.workflow_table()
    ))
    .await
    .unwrap();
    let inc = by_id(db.incremental(line, &STATES, &mut cursor).await.unwrap());
    assert_eq!(inc[&late].child_workflow_state, Some(0), "{fixture}");
    assert_eq!(
        inc[&running].child_workflow_state,
        Some(7),
        "{fixture}: the child finished"
    );
    assert_eq!(inc[&mixed].child_workflow_state, Some(1), "{fixture}");
    assert_eq!(inc[&shell].execute_path.as_deref(), Some(path.as_str()));
    let one = db.task(line, mixed).await.unwrap().unwrap().task;
    assert_eq!(one.child_workflow_state, Some(1), "{fixture}: by id");
    sim.drop().await.unwrap();
}

/// A workflow owned by a dead master with task rows in every situation DS's
/// master failover tells apart; the ids by name.
async fn failover_tasks(sim: &SimDb) -> (i64, BTreeMap<&'static str, i64>) {
    let wf = workflow(sim, 1).await;
    let w = Some("10.0.0.5:1234");
    let mut t = BTreeMap::new();
    t.insert("running", task(sim, wf, "SHELL", 1, w).await);
    t.insert("submitted_no_host", task(sim, wf, "SHELL", 0, None).await);
    t.insert(
        "host_null_text",
        task(sim, wf, "SHELL", 1, Some("NULL")).await,
    );
    t.insert("success", task(sim, wf, "SHELL", 7, w).await);
    t.insert("tolerant", task(sim, wf, "SHELL", 8, w).await);
    let mut old = TaskSpec::new(wf, 1, w);
    old.flag = 0;
    t.insert("flag0", sim.insert_task(&old).await.unwrap());
    let mut unsubmitted = TaskSpec::new(wf, 1, w);
    unsubmitted.submit_time = None;
    t.insert(
        "no_submit_time",
        sim.insert_task(&unsubmitted).await.unwrap(),
    );
    if sim.line >= DsLine::V2_0 {
        t.insert("delayed", task(sim, wf, "SHELL", 12, w).await);
    }
    // another workflow's task is never touched
    let other = workflow(sim, 1).await;
    t.insert("other_workflow", task(sim, other, "SHELL", 1, w).await);
    (wf, t)
}

/// What DS's master failover of the line leaves in each task row: 2.0.9
/// skips rows without a host or submit time; 3.0/3.1 set every unfinished
/// valid row; 1.3, 3.2 and 3.3 touch no task row.
fn failover_expect(line: DsLine, name: &str, before: i32) -> i32 {
    let tolerant = match name {
        "success" | "tolerant" | "flag0" | "other_workflow" => false,
        "running" | "delayed" => true,
        "submitted_no_host" | "host_null_text" | "no_submit_time" => line != DsLine::V2_0,
        _ => unreachable!("{name}"),
    };
    if tolerant && line.master_failover_tolerates_tasks() {
        8
    } else {
        before
    }
}

/// `written`: the task ds-reaper's own write set to NEED_FAULT_TOLERANCE.
async fn check_failover_tasks(
    sim: &SimDb,
    tasks: &BTreeMap<&'static str, i64>,
    written: Option<i64>,
    what: &str,
) {
    for (name, id) in tasks {
        if Some(*id) == written {
            assert_eq!(sim.task_state(*id).await.unwrap().state, 8);
            continue;
        }
        let before = match *name {
            "submitted_no_host" => 0,
            "success" => 7,
            "tolerant" => 8,
            "delayed" => 12,
            _ => 1,
        };
        let st = sim.task_state(*id).await.unwrap();
        assert_eq!(
            st.state,
            failover_expect(sim.line, name, before),
            "{} {what}: task {name}",
            sim.fixture
        );
        assert_eq!(st.end_time, None, "{} {what}: {name}", sim.fixture);
    }
}

/// Item 7a: `recover` for `workflow_master_lost` writes DS's failover of the
/// task rows too, in the same transaction, on 2.0–3.1 only.
async fn recover_tolerates_tasks(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    let (wf, tasks) = failover_tasks(&sim).await;
    let seen = db.workflow(line, wf, &TASK_STATES).await.unwrap().unwrap();
    let o = db
        .recover_workflow(line, &seen, now(), &no_live_master)
        .await
        .unwrap();
    assert!(
        matches!(o, WorkflowOutcome::Done { .. }),
        "{fixture}: {o:?}"
    );
    check_failover_tasks(&sim, &tasks, None, "workflow recover").await;
    // flag is DS's to change (the tolerant copy), never ours
    for id in tasks.values() {
        let st = sim.task_state(*id).await.unwrap();
        assert_eq!(st.flag, i32::from(*id != tasks["flag0"]), "{fixture}");
    }

    // the task follow-up's recover after fault-tolerance is the same path
    let (wf2, tasks2) = failover_tasks(&sim).await;
    let t = db
        .task(line, tasks2["running"])
        .await
        .unwrap()
        .unwrap()
        .task;
    assert_eq!(t.workflow_instance_id, Some(wf2));
    let o = write_then_follow(&db, line, &t, Action::FaultTolerance, FollowUp::Recover).await;
    assert!(
        matches!(o, FollowUpOutcome::Done { .. }),
        "{fixture}: {o:?}"
    );
    check_failover_tasks(&sim, &tasks2, Some(t.id), "task follow-up").await;
    sim.drop().await.unwrap();
}

/// Item 7b, under the lock: a workflow whose state DS's own failover does not
/// handle on the line is not recovered, whatever the planner decided.
async fn recover_only_failover_states(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    // non-terminal on the line, but never DS's failover's
    let state = match line {
        DsLine::V1_2 | DsLine::V1_3 | DsLine::V2_0 => 10,
        DsLine::V3_3 => 0,
        _ => 14,
    };
    let wf = workflow(&sim, state).await;
    let t = task(&sim, wf, "SHELL", 1, Some("10.0.0.5:1234")).await;
    let seen = db.workflow(line, wf, &TASK_STATES).await.unwrap().unwrap();
    let o = db
        .recover_workflow(line, &seen, now(), &no_live_master)
        .await
        .unwrap();
    assert!(
        matches!(o, WorkflowOutcome::Skipped(ref m) if m.contains("handles only")),
        "{fixture}: {o:?}"
    );
    assert_eq!(
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some(state.to_string().as_str())
    );
    assert_eq!(
        sim.workflow_col(wf, "host").await.unwrap().as_deref(),
        Some("10.0.0.1:5678")
    );
    assert!(sim.commands().await.unwrap().is_empty(), "{fixture}");
    assert_eq!(sim.task_state(t).await.unwrap().state, 1);
    sim.drop().await.unwrap();
}

/// Item (f): 3.3's recover after `fail` appends to `state_history` as DS's
/// `WorkflowInstanceRecoverFailureTaskTrigger` (`setStateWithDesc`) does.
async fn state_history(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    assert_eq!(line, DsLine::V3_3);
    let table = line.workflow_table();
    if !sim.has_column(table, "state_history") {
        eprintln!("SKIP: {fixture} has no state_history");
        sim.drop().await.unwrap();
        return;
    }
    let db = connect(&sim, Duration::from_secs(30));
    let entry = r#"{"time":"2025-03-04 05:06:07","state":"SUBMITTED_SUCCESS","desc":"START_FAILURE_TASK_PROCESS"}"#;
    let old =
        r#"[{"time":"2024-01-01 00:00:00","state":"RUNNING_EXECUTION","desc":"init running"}]"#;
    for (before, after) in [
        (None, format!("[{entry}]")),
        (
            Some(old),
            format!("{},{entry}]", old.strip_suffix(']').unwrap()),
        ),
        // not a list: DS's trigger would fail; the history is left alone
        (Some("garbage"), "garbage".to_string()),
    ] {
        let (wf, t) = one_task_workflow(&sim, &db, line, false).await;
        if let Some(b) = before {
            sim.exec(&format!(
                "UPDATE {table} SET state_history = '{b}' WHERE id = {wf}"
            ))
            .await
            .unwrap();
        }
        let o = write_then_follow(&db, line, &t, Action::Fail, FollowUp::Recover).await;
        assert!(
            matches!(
                o,
                FollowUpOutcome::Done {
                    workflow_state: Some(0),
                    ..
                }
            ),
            "{fixture}: {o:?}"
        );
        assert_eq!(
            sim.workflow_col(wf, "state_history")
                .await
                .unwrap()
                .as_deref(),
            Some(after.as_str()),
            "{fixture} {before:?}"
        );
        sim.exec("DELETE FROM t_ds_command").await.unwrap();
    }
    sim.drop().await.unwrap();
}

/// Item (d): a client-side timeout that fires after the COMMIT reports
/// what the rows show — written, or a lost race — not an error; a timeout
/// before anything was written stays an error.
async fn timeout_after_commit(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(1));
    let (_, a) = one_task_workflow(&sim, &db, line, false).await;
    let (_, b) = one_task_workflow(&sim, &db, line, false).await;
    // b changes under us: DS finished it before our write
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7 WHERE id = {}",
        b.id
    ))
    .await
    .unwrap();
    let writes = [a.clone(), b.clone()].map(|seen| TaskWrite {
        seen,
        action: Action::Fail,
        now: now(),
    });
    db.test_hang_after_write_commit(true);
    let out = db.write_tasks(line, &writes).await;
    db.test_hang_after_write_commit(false);
    assert_eq!(
        out.unwrap(),
        vec![WriteOutcome::Applied, WriteOutcome::LostRace],
        "{fixture}"
    );
    assert_eq!(sim.task_state(a.id).await.unwrap().state, 6);
    assert_eq!(sim.task_state(b.id).await.unwrap().state, 7);

    // nothing written before the limit fired (the row is locked by another
    // session): the rows are as seen, and the answer is the timeout
    let (_, c) = one_task_workflow(&sim, &db, line, false).await;
    let holder = lock_rows(
        &sim,
        &format!(
            "SELECT id FROM t_ds_task_instance WHERE id = {} FOR UPDATE",
            c.id
        ),
    )
    .await;
    let e = db
        .write_tasks(
            line,
            &[TaskWrite {
                seen: c.clone(),
                action: Action::Fail,
                now: now(),
            }],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, SqlError::Timeout { .. }), "{fixture}: {e}");
    holder.release().await;
    assert_eq!(sim.task_state(c.id).await.unwrap().state, 1);
    sim.drop().await.unwrap();
}

/// Item (e): a write waiting for its intents' fsync does not hold DS's row
/// locks all the while: `ready` below completes only once another session
/// can lock the task row, which on MySQL's locking write needs the write to
/// let go of it; the write then locks the row again and goes through.
async fn slow_intents_release_locks(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(10));
    let (_, t) = one_task_workflow(&sim, &db, line, false).await;
    let probe = format!(
        "SELECT id FROM t_ds_task_instance WHERE id = {} FOR UPDATE NOWAIT",
        t.id
    );
    let ready = async {
        // waits on the condition, not on a time: DS can lock the row
        loop {
            if let Some(h) = try_lock_rows(&sim, &probe).await {
                h.release().await;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let out = db
        .write_tasks_after(
            line,
            &[TaskWrite {
                seen: t.clone(),
                action: Action::Kill,
                now: now(),
            }],
            ready,
        )
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Applied], "{fixture}");
    assert_eq!(sim.task_state(t.id).await.unwrap().state, 9);

    // a row that changed while the locks were let go is a lost race
    let (_, u) = one_task_workflow(&sim, &db, line, false).await;
    let probe = format!(
        "SELECT id FROM t_ds_task_instance WHERE id = {} FOR UPDATE NOWAIT",
        u.id
    );
    let finish = format!(
        "UPDATE t_ds_task_instance SET state = 7 WHERE id = {}",
        u.id
    );
    let ready = async {
        loop {
            if let Some(h) = try_lock_rows(&sim, &probe).await {
                h.release().await;
                sim.exec(&finish)
                    .await
                    .map_err(|e| reaper_core::ports::GateRefused(e.to_string()))?;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let out = db
        .write_tasks_after(
            line,
            &[TaskWrite {
                seen: u.clone(),
                action: Action::Kill,
                now: now(),
            }],
            ready,
        )
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::LostRace], "{fixture}");
    assert_eq!(sim.task_state(u.id).await.unwrap().state, 7);
    sim.drop().await.unwrap();
}

/// A transaction of another session holding row locks.
enum Holder {
    My(sqlx::Transaction<'static, sqlx::MySql>),
    Pg(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl Holder {
    async fn release(self) {
        match self {
            Holder::My(tx) => tx.rollback().await.unwrap(),
            Holder::Pg(tx) => tx.rollback().await.unwrap(),
        }
    }
}

async fn lock_rows(sim: &SimDb, sql: &str) -> Holder {
    try_lock_rows(sim, sql).await.expect("rows locked")
}

/// The rows of `sql` locked in a new transaction, or `None` when another
/// session holds them (`NOWAIT`).
async fn try_lock_rows(sim: &SimDb, sql: &str) -> Option<Holder> {
    match &sim.pool {
        ds_sim::db::SimPool::My(p) => {
            let mut tx = p.begin().await.unwrap();
            sqlx::query(sql).fetch_all(&mut *tx).await.ok()?;
            Some(Holder::My(tx))
        }
        ds_sim::db::SimPool::Pg(p) => {
            let mut tx = p.begin().await.unwrap();
            sqlx::query(sql).fetch_all(&mut *tx).await.ok()?;
            Some(Holder::Pg(tx))
        }
    }
}

macro_rules! tests {
    ($f:ident: $($name:ident: $kind:expr, $fx:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            $f($kind, $fx).await;
        }
    )*};
}

tests! { children_and_paths:
    sub_process_child_and_execute_path_mysql_1_3_9: SimKind::MySql, "1.3.9";
    sub_process_child_and_execute_path_mysql_2_0_9: SimKind::MySql, "2.0.9";
    sub_process_child_and_execute_path_mysql_3_2_2: SimKind::MySql, "3.2.2";
    sub_process_child_and_execute_path_mysql_3_3_2: SimKind::MySql, "3.3.2";
    sub_process_child_and_execute_path_pg_1_3_9: SimKind::Postgres, "1.3.9";
    sub_process_child_and_execute_path_pg_3_1_9: SimKind::Postgres, "3.1.9";
    sub_process_child_and_execute_path_pg_3_2_2: SimKind::Postgres, "3.2.2";
    sub_process_child_and_execute_path_pg_dev: SimKind::Postgres, "dev";
}

tests! { recover_tolerates_tasks:
    recover_sets_tasks_tolerant_as_ds_mysql_1_3_9: SimKind::MySql, "1.3.9";
    recover_sets_tasks_tolerant_as_ds_mysql_2_0_9: SimKind::MySql, "2.0.9";
    recover_sets_tasks_tolerant_as_ds_mysql_3_1_9: SimKind::MySql, "3.1.9";
    recover_sets_tasks_tolerant_as_ds_mysql_3_2_2: SimKind::MySql, "3.2.2";
    recover_sets_tasks_tolerant_as_ds_pg_2_0_9: SimKind::Postgres, "2.0.9";
    recover_sets_tasks_tolerant_as_ds_pg_3_1_9: SimKind::Postgres, "3.1.9";
    recover_sets_tasks_tolerant_as_ds_pg_3_2_2: SimKind::Postgres, "3.2.2";
}

tests! { recover_only_failover_states:
    recover_only_ds_failover_states_mysql_1_3_9: SimKind::MySql, "1.3.9";
    recover_only_ds_failover_states_mysql_3_2_2: SimKind::MySql, "3.2.2";
    recover_only_ds_failover_states_mysql_3_3_2: SimKind::MySql, "3.3.2";
    recover_only_ds_failover_states_pg_2_0_9: SimKind::Postgres, "2.0.9";
    recover_only_ds_failover_states_pg_3_1_9: SimKind::Postgres, "3.1.9";
    recover_only_ds_failover_states_pg_dev: SimKind::Postgres, "dev";
}

tests! { state_history:
    recover_appends_state_history_mysql_3_3_2: SimKind::MySql, "3.3.2";
    recover_appends_state_history_mysql_dev: SimKind::MySql, "dev";
    recover_appends_state_history_pg_3_3_2: SimKind::Postgres, "3.3.2";
    recover_appends_state_history_pg_3_4_0: SimKind::Postgres, "3.4.0";
}

tests! { timeout_after_commit:
    write_timeout_after_commit_mysql_3_2_2: SimKind::MySql, "3.2.2";
    write_timeout_after_commit_mysql_3_3_2: SimKind::MySql, "3.3.2";
    write_timeout_after_commit_pg_3_2_2: SimKind::Postgres, "3.2.2";
    write_timeout_after_commit_pg_1_3_9: SimKind::Postgres, "1.3.9";
}

tests! { slow_intents_release_locks:
    slow_intents_release_row_locks_mysql_3_2_2: SimKind::MySql, "3.2.2";
    slow_intents_release_row_locks_mysql_1_3_9: SimKind::MySql, "1.3.9";
    slow_intents_release_row_locks_pg_3_2_2: SimKind::Postgres, "3.2.2";
}
