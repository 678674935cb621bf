//! SPEC §13 on real MariaDB and PostgreSQL with DS's real schemas: a parent
//! never ends before its child (the candidate read carries the parent's
//! running children; `recover` and the task follow-up `recover` refuse
//! under the row lock while one runs), and a follow-up survives a change of
//! leader (the read carries the `flag = 1` tasks in FAILURE / KILL and
//! whether a command is queued).

mod sql_setup;

use ds_sim::db::{SimDb, SimKind, TaskSpec, WorkflowSpec};
use reaper_core::ports::WorkflowOutcome;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{Action, DsLine, FollowUp};
use reaper_sql::*;
use sql_setup::*;
use std::collections::BTreeMap;
use std::time::Duration;

const OWNER: &str = "10.0.0.1:5678";
const STATES: [i32; 3] = [1, 2, 4];
const TASK_STATES: [i32; 2] = [1, 17];

/// What a candidate shows of task writes: its live tasks, its `flag = 1`
/// FAILURE / KILL rows (by state) and whether a command is queued.
type Shown = (BTreeMap<i32, i64>, BTreeMap<i32, i64>, Option<bool>);

async fn set_wf_state(sim: &SimDb, wf: i64, state: i32) {
    let t = sim.line.workflow_table();
    sim.exec(&format!("UPDATE {t} SET state = {state} WHERE id = {wf}"))
        .await
        .unwrap();
}

async fn read(db: &Db, line: DsLine, wf: i64) -> WorkflowCandidate {
    db.workflow(line, wf, &TASK_STATES).await.unwrap().unwrap()
}

async fn full(db: &Db, line: DsLine) -> BTreeMap<i64, WorkflowCandidate> {
    let mut fresh = WorkflowCursor::new();
    let got = db
        .workflow_full_scan(line, &STATES, &TASK_STATES, &mut fresh)
        .await
        .unwrap();
    got.into_iter().map(|w| (w.id, w)).collect()
}

async fn sweep(
    db: &Db,
    line: DsLine,
    cur: &mut WorkflowCursor,
) -> BTreeMap<i64, WorkflowCandidate> {
    let got = db
        .workflow_incremental(line, &STATES, &TASK_STATES, cur)
        .await
        .unwrap();
    got.into_iter().map(|w| (w.id, w)).collect()
}

/// Nothing written on the parent: state, host and the task rows as they
/// were, and no command.
async fn parent_untouched(sim: &SimDb, wf: i64, tasks: &[(i64, i32)], what: &str) {
    let fx = &sim.fixture;
    assert_eq!(
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some("1"),
        "{fx}: {what}"
    );
    assert_eq!(
        sim.workflow_col(wf, "host").await.unwrap().as_deref(),
        Some(OWNER),
        "{fx}: {what}"
    );
    for (t, state) in tasks {
        assert_eq!(
            sim.task_state(*t).await.unwrap().state,
            *state,
            "{fx}: {what}: task {t}"
        );
    }
    assert!(
        sim.commands().await.unwrap().is_empty(),
        "{fx}: {what}: no command"
    );
}

fn refused_for_the_child(o: &WorkflowOutcome, child: i64) -> bool {
    matches!(o, WorkflowOutcome::Skipped(m)
        if m.starts_with("child_workflow_running") && m.contains(&format!("instance {child} ")))
}

/// A parent with a SUB_PROCESS task whose child runs (and an older child
/// that ended), and a SHELL task on a lost worker.
async fn parent_and_child(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    let parent = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let mut sub = TaskSpec::new(parent, 1, Some(OWNER));
    sub.task_type = "SUB_PROCESS".into();
    let sub = sim.insert_task(&sub).await.unwrap();
    let shell = sim
        .insert_task(&TaskSpec::new(parent, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let old = sim
        .insert_workflow(&WorkflowSpec {
            state: 7,
            ..WorkflowSpec::default()
        })
        .await
        .unwrap();
    let child = sim
        .insert_workflow(&WorkflowSpec {
            state: 7,
            ..WorkflowSpec::default()
        })
        .await
        .unwrap();
    sim.insert_task(&TaskSpec::new(child, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    sim.insert_relation(parent, sub, old).await.unwrap();
    sim.insert_relation(parent, sub, child).await.unwrap();

    // Read while every child is finished; DS then sets the child RUNNING
    // again (its recovery of the parent): the lock-time read refuses.
    let stale = read(&db, line, parent).await;
    assert!(stale.running_children.is_empty(), "{fixture}: {stale:?}");
    set_wf_state(&sim, child, 1).await;
    let o = db
        .recover_workflow(line, &stale, now(), &no_live_master)
        .await
        .unwrap();
    assert!(refused_for_the_child(&o, child), "{fixture}: {o:?}");
    parent_untouched(&sim, parent, &[(sub, 1), (shell, 1)], "lock-time child").await;

    // Every read carries it now: by id, full, incremental; the child has none.
    let seen = read(&db, line, parent).await;
    assert_eq!(
        seen.running_children,
        BTreeMap::from([(child, 1)]),
        "{fixture}"
    );
    let all = full(&db, line).await;
    assert_eq!(all[&parent].running_children, seen.running_children);
    assert!(all[&child].running_children.is_empty(), "{fixture}");
    let mut cur = WorkflowCursor::new();
    for _ in 0..4 {
        let inc = sweep(&db, line, &mut cur).await;
        assert_eq!(inc[&parent].running_children, seen.running_children);
    }
    let o = db
        .recover_workflow(line, &seen, now(), &no_live_master)
        .await
        .unwrap();
    assert!(refused_for_the_child(&o, child), "{fixture}: {o:?}");
    parent_untouched(&sim, parent, &[(sub, 1), (shell, 1)], "planned child").await;

    // The task follow-up `recover` of the SHELL task waits too (its write stands).
    let task = db.task(line, shell).await.unwrap().unwrap().task;
    for (action, state) in [(Action::FaultTolerance, 8), (Action::Fail, 6)] {
        let task = db.task(line, shell).await.unwrap().unwrap().task;
        let out = write_then_follow(&db, line, &task, action, FollowUp::Recover).await;
        assert!(
            matches!(&out, FollowUpOutcome::Skipped(m) if m.starts_with("child_workflow_running")),
            "{fixture} {action}: {out:?}"
        );
        parent_untouched(&sim, parent, &[(sub, 1), (shell, state)], "task follow-up").await;
        sim.exec(&format!(
            "UPDATE t_ds_task_instance SET state = 1, end_time = NULL WHERE id = {shell}"
        ))
        .await
        .unwrap();
    }
    // `fail` as the follow-up does not ask about children: other tasks hold it.
    let out = follow(
        &db,
        line,
        &task,
        Action::Fail,
        FollowUp::Fail,
        &no_live_master,
    )
    .await;
    assert!(
        matches!(&out, FollowUpOutcome::Skipped(m) if m.contains("other task")),
        "{fixture}: {out:?}"
    );

    // The child ended: the parent is recovered.
    set_wf_state(&sim, child, 7).await;
    let seen = read(&db, line, parent).await;
    assert!(seen.running_children.is_empty(), "{fixture}");
    let o = db
        .recover_workflow(line, &seen, now(), &no_live_master)
        .await
        .unwrap();
    assert!(
        matches!(o, WorkflowOutcome::Done { .. }),
        "{fixture}: {o:?}"
    );
    sim.drop().await.unwrap();
}

/// The rows a task action leaves: FAILURE / KILL (`flag = 1`) and
/// NEED_FAULT_TOLERANCE, and the queue, read incrementally as by a full scan.
async fn resume_reads(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    let mut cur = WorkflowCursor::new();
    let mut wfs = Vec::new();
    for _ in 0..3 {
        let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
        let t = sim
            .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
            .await
            .unwrap();
        wfs.push((wf, t));
    }
    // three sweeps: the task reads are bounded from then on
    for _ in 0..3 {
        let got = sweep(&db, line, &mut cur).await;
        for (wf, _) in &wfs {
            let w = &got[wf];
            assert_eq!(w.tasks_by_state, BTreeMap::from([(1, 1)]), "{fixture}");
            assert!(w.ended_by_state.is_empty(), "{fixture}");
            assert_eq!(
                w.command_queued, None,
                "{fixture}: nothing written, not asked"
            );
        }
    }
    assert!(cur.stats().task_bound.is_some(), "{fixture}");
    for ((_, t), action) in wfs
        .iter()
        .zip([Action::Fail, Action::Kill, Action::FaultTolerance])
    {
        let task = db.task(line, *t).await.unwrap().unwrap().task;
        write(&db, line, &task, action).await;
    }
    let expect = |queued: bool, failed_flag: bool| {
        let mut e: BTreeMap<i64, Shown> = BTreeMap::new();
        let failed = if failed_flag {
            BTreeMap::from([(6, 1)])
        } else {
            BTreeMap::new()
        };
        e.insert(wfs[0].0, (BTreeMap::new(), failed.clone(), Some(queued)));
        e.insert(
            wfs[1].0,
            (BTreeMap::new(), BTreeMap::from([(9, 1)]), Some(false)),
        );
        e.insert(
            wfs[2].0,
            (BTreeMap::from([(8, 1)]), BTreeMap::new(), Some(false)),
        );
        if !failed_flag {
            // DS retried the FAILURE row (flag 0): nothing shows a write
            e.get_mut(&wfs[0].0).unwrap().2 = None;
        }
        e
    };
    let summary = |got: &BTreeMap<i64, WorkflowCandidate>| {
        got.values()
            .map(|w| {
                (
                    w.id,
                    (
                        w.tasks_by_state.clone(),
                        w.ended_by_state.clone(),
                        w.command_queued,
                    ),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    let got = sweep(&db, line, &mut cur).await;
    assert_eq!(summary(&got), expect(false, true), "{fixture}: incremental");
    assert_eq!(
        summary(&full(&db, line).await),
        expect(false, true),
        "{fixture}: full"
    );
    queue_command(&sim, wfs[0].0, 4).await;
    let got = sweep(&db, line, &mut cur).await;
    assert_eq!(summary(&got), expect(true, true), "{fixture}: queued");
    assert_eq!(
        summary(&full(&db, line).await),
        expect(true, true),
        "{fixture}"
    );
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET flag = 0 WHERE id = {}",
        wfs[0].1
    ))
    .await
    .unwrap();
    let got = sweep(&db, line, &mut cur).await;
    assert_eq!(summary(&got), expect(true, false), "{fixture}: flag 0");
    assert_eq!(
        summary(&full(&db, line).await),
        expect(true, false),
        "{fixture}"
    );
    sim.drop().await.unwrap();
}

macro_rules! tests {
    ($f:ident: $($name:ident: $kind:expr, $fx:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            $f($kind, $fx).await;
        }
    )*};
}

tests! { parent_and_child:
    parent_waits_for_child_mysql_1_3_9: SimKind::MySql, "1.3.9";
    parent_waits_for_child_mysql_3_1_9: SimKind::MySql, "3.1.9";
    parent_waits_for_child_mysql_3_3_2: SimKind::MySql, "3.3.2";
    parent_waits_for_child_pg_3_1_9: SimKind::Postgres, "3.1.9";
    parent_waits_for_child_pg_3_2_2: SimKind::Postgres, "3.2.2";
    parent_waits_for_child_pg_3_3_2: SimKind::Postgres, "3.3.2";
}

tests! { resume_reads:
    resume_reads_mysql_1_3_9: SimKind::MySql, "1.3.9";
    resume_reads_mysql_3_1_9: SimKind::MySql, "3.1.9";
    resume_reads_mysql_3_3_2: SimKind::MySql, "3.3.2";
    resume_reads_pg_1_3_9: SimKind::Postgres, "1.3.9";
    resume_reads_pg_3_1_9: SimKind::Postgres, "3.1.9";
    resume_reads_pg_3_3_2: SimKind::Postgres, "3.3.2";
}
