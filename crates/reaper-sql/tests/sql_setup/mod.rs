//! The SQL adapter's test set-up: a fresh database per test (loaded with a
//! real DS schema by ds-sim), the adapter on it, fixed times; the helpers
//! every crate's tests share are reaper-test-support's.

#![allow(dead_code)]

use chrono::{NaiveDateTime, TimeZone, Utc};
use ds_sim::db::{SimDb, SimKind, TaskSpec, WorkflowSpec};
use reaper_core::{Action, Candidate, DsLine, FollowUp, Zone};
use reaper_sql::*;
use std::time::Duration;

/// A fresh database for `fixture`, or `None` (with a note) when the server is
/// not running — except under CI=true, where a missing server fails the test.
pub async fn setup(kind: SimKind, fixture: &str) -> Option<SimDb> {
    match SimDb::create(kind, fixture).await {
        Ok(db) => Some(db),
        Err(e) => {
            reaper_test_support::skip(&format!("database {kind:?} unavailable: {e:#}"));
            None
        }
    }
}

pub fn connect(sim: &SimDb, statement_timeout: Duration) -> Db {
    Db::connect_lazy(&DbSettings {
        url: sim.url().to_string(),
        password: None,
        max_connections: 2,
        statement_timeout,
        zone: "UTC".parse::<Zone>().unwrap(),
    })
    .unwrap()
}

pub fn now() -> reaper_core::Instant {
    Utc.with_ymd_and_hms(2025, 3, 4, 5, 6, 7).unwrap()
}

pub fn naive_now() -> NaiveDateTime {
    now().naive_utc()
}

pub fn ids(c: &[Candidate]) -> Vec<i64> {
    let mut v: Vec<i64> = c.iter().map(|c| c.id).collect();
    v.sort();
    v
}

/// No master is live: the owner of every workflow is gone.
pub fn no_live_master(_: &str) -> bool {
    false
}

/// A workflow (owned by `10.0.0.1:5678`) with one live task, read back as a candidate.
pub async fn one_task_workflow(
    sim: &SimDb,
    db: &Db,
    line: DsLine,
    extra_live: bool,
) -> (i64, Candidate) {
    let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let t = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    if extra_live {
        sim.insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.6:1234")))
            .await
            .unwrap();
    }
    let row = db.task(line, t).await.unwrap().unwrap().task;
    (wf, row)
}

/// The task write (which must apply), then nothing else.
pub async fn write(db: &Db, line: DsLine, task: &Candidate, action: Action) {
    let out = db
        .write_tasks(
            line,
            &[TaskWrite {
                seen: task.clone(),
                action,
                now: now(),
            }],
        )
        .await
        .unwrap();
    assert_eq!(out, vec![WriteOutcome::Applied]);
}

pub async fn follow(
    db: &Db,
    line: DsLine,
    task: &Candidate,
    action: Action,
    follow_up: FollowUp,
    live_master: &(dyn Fn(&str) -> bool + Send + Sync),
) -> FollowUpOutcome {
    db.follow_up(
        line,
        &FollowUpRequest {
            task: task.clone(),
            action,
            follow_up,
            now: now(),
        },
        live_master,
    )
    .await
    .unwrap()
}

/// The task write, then its follow-up with no live master.
pub async fn write_then_follow(
    db: &Db,
    line: DsLine,
    task: &Candidate,
    action: Action,
    follow_up: FollowUp,
) -> FollowUpOutcome {
    write(db, line, task, action).await;
    follow(db, line, task, action, follow_up, &no_live_master).await
}

/// Queues a command for workflow instance `wf` the way the line stores it.
pub async fn queue_command(sim: &SimDb, wf: i64, command_type: i32) {
    let line = sim.line;
    let sql = if line <= DsLine::V1_3 {
        format!(
            "INSERT INTO t_ds_command (command_type, process_definition_id, command_param) \
             VALUES ({command_type}, 9001, '{{\"ProcessInstanceId\":{wf}}}')"
        )
    } else if line == DsLine::V3_3 {
        format!(
            "INSERT INTO t_ds_command (command_type, workflow_definition_code, \
             workflow_definition_version, workflow_instance_id) VALUES ({command_type}, 9001, 3, {wf})"
        )
    } else {
        format!(
            "INSERT INTO t_ds_command (command_type, process_definition_code, \
             process_definition_version, process_instance_id) VALUES ({command_type}, 9001, 3, {wf})"
        )
    };
    sim.exec(&sql).await.unwrap();
}
