//! The reads of SPEC §16 (stuck under a live owner) on real MariaDB and
//! PostgreSQL with DS's real schemas: the candidate read's other live rows
//! (SUBMITTED, DELAY, ... with their task codes), full and incremental, and
//! 3.4's waiting serial commands with the running instances of their
//! definition — and no read of them writes anything.

mod sql_setup;

use ds_sim::db::{SimDb, SimKind, TaskSpec, WorkflowSpec};
use reaper_core::anomaly::queued_states;
use reaper_core::ports::{PortError, PortErrorKind, Scan, TaskStore};
use reaper_core::DsLine;
use reaper_sql::*;
use sql_setup::*;
use std::time::Duration;

fn task(wf: i64, state: i32) -> TaskSpec {
    TaskSpec::new(wf, state, Some("10.0.0.5:1234"))
}

/// Every task and workflow row, and the commands, as text: what "nothing
/// written" is compared on.
async fn snapshot(sim: &SimDb) -> Vec<String> {
    let mut out = Vec::new();
    for id in 1..=sim.max_task_id().await.unwrap() {
        out.push(format!("task {id}: {:?}", sim.task_state(id).await.ok()));
    }
    for id in 1..=12 {
        for col in ["state", "host"] {
            out.push(format!(
                "wf {id} {col}: {:?}",
                sim.workflow_col(id, col).await.ok().flatten()
            ));
        }
    }
    out.push(format!("commands: {:?}", sim.commands().await.unwrap()));
    out
}

async fn rows(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let store = SqlStore::new(connect(&sim, Duration::from_secs(30)));
    let states = line.default_live_states();
    let queued = queued_states(line);
    let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let mut want = Vec::new();
    for s in &queued {
        if !states.contains(s) {
            want.push(sim.insert_task(&task(wf, *s)).await.unwrap());
        }
    }
    let running = sim.insert_task(&task(wf, 1)).await.unwrap();
    // finished and flag = 0 rows are never read
    sim.insert_task(&task(wf, 7)).await.unwrap();
    let mut retried = task(wf, 0);
    retried.flag = 0;
    sim.insert_task(&retried).await.unwrap();
    // a second live attempt of the running task: same code (2.0+) / name (1.x)
    let mut twin = task(wf, 0);
    let first = store.task(line, running).await.unwrap().unwrap().task;
    twin.name = first.name.to_string();
    twin.task_code = first.task_code;
    let twin_id = sim.insert_task(&twin).await.unwrap();
    want.push(twin_id);
    want.sort();
    let before = snapshot(&sim).await;

    let cands = store.candidates(line, &states, Scan::Full).await.unwrap();
    assert_eq!(ids(&cands), vec![running], "{fixture}");
    let got = store.anomaly_rows(line).await.unwrap();
    assert_eq!(ids(&got.others), want, "{fixture}: full scan");
    let t = got.others.iter().find(|c| c.id == twin_id).unwrap();
    assert_eq!(t.workflow_instance_id, Some(wf));
    assert_eq!(t.workflow_host.as_deref(), Some("10.0.0.1:5678"));
    assert_eq!(t.worker_group.as_deref(), Some("default"));
    assert!(t.submit_time.is_some());
    if line >= DsLine::V2_0 {
        assert!(t.task_code.is_some(), "{fixture}: task_code read");
        assert_eq!(t.task_code, cands[0].task_code, "{fixture}");
    } else {
        assert_eq!(t.task_code, None, "{fixture}: 1.x has no task_code");
        assert_eq!(t.name, cands[0].name);
    }
    match line {
        DsLine::V3_3 if fixture == "3.4.0" => {
            assert_eq!(got.serial, Some(Vec::new()), "{fixture}")
        }
        _ => assert_eq!(got.serial, None, "{fixture}: no serial command table"),
    }
    // taken once: a second ask before another read has no rows to give
    assert!(store.anomaly_rows(line).await.unwrap().others.is_empty());
    assert_eq!(snapshot(&sim).await, before, "{fixture}: nothing written");

    // incremental: the old rows by id, a new one above the mark; a row that
    // finished is gone
    store
        .candidates(line, &states, Scan::Incremental)
        .await
        .unwrap();
    store.anomaly_rows(line).await.unwrap();
    let fresh = sim.insert_task(&task(wf, 0)).await.unwrap();
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7 WHERE id = {twin_id}"
    ))
    .await
    .unwrap();
    let before = snapshot(&sim).await;
    store
        .candidates(line, &states, Scan::Incremental)
        .await
        .unwrap();
    let got = store.anomaly_rows(line).await.unwrap();
    let mut want2: Vec<i64> = want.iter().copied().filter(|i| *i != twin_id).collect();
    want2.push(fresh);
    assert_eq!(ids(&got.others), want2, "{fixture}: incremental");
    // check's scan_once hands them over too
    store.scan_once(line, &states).await.unwrap();
    assert_eq!(ids(&store.anomaly_rows(line).await.unwrap().others), want2);

    assert_eq!(snapshot(&sim).await, before, "{fixture}: nothing written");
    sim.drop().await.unwrap();
}

/// 3.4's serial queue: a SERIAL_WAIT instance with a waiting serial command,
/// counted with the other non-terminal instances of its definition.
async fn serial(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let store = SqlStore::new(connect(&sim, Duration::from_secs(30)));
    let def = |code: i64, state: i32| WorkflowSpec {
        state,
        host: None,
        definition_code: code,
        ..WorkflowSpec::default()
    };
    let alone = sim.insert_workflow(&def(500, 14)).await.unwrap();
    let behind = sim.insert_workflow(&def(600, 14)).await.unwrap();
    let ahead = sim.insert_workflow(&def(600, 1)).await.unwrap();
    // finished instances of the definition do not hold the queue
    sim.insert_workflow(&def(500, 7)).await.unwrap();
    // a fired command is no wait; nor is a waiting one whose workflow left SERIAL_WAIT
    let fired = sim.insert_workflow(&def(700, 14)).await.unwrap();
    for (wf, code, state) in [
        (alone, 500, 0),
        (behind, 600, 0),
        (fired, 700, 1),
        (ahead, 600, 0),
    ] {
        sim.exec(&format!(
            "INSERT INTO t_ds_serial_command (workflow_definition_code, workflow_definition_version, \
             workflow_instance_id, state, command, create_time, update_time) \
             VALUES ({code}, 1, {wf}, {state}, '{{}}', '2025-03-04 04:00:00', '2025-03-04 04:00:00')"
        ))
        .await
        .unwrap();
    }
    let before = snapshot(&sim).await;
    let got = store.anomaly_rows(line).await.unwrap();
    let mut waits = got.serial.expect("3.4 has the serial command table");
    waits.sort_by_key(|w| w.workflow_instance_id);
    let seen: Vec<(i64, i64, i64)> = waits
        .iter()
        .map(|w| (w.workflow_instance_id, w.definition_code, w.running))
        .collect();
    assert_eq!(seen, vec![(alone, 500, 0), (behind, 600, 1)], "{fixture}");
    assert_eq!(
        waits[0].waiting_since,
        Some(
            chrono::NaiveDateTime::parse_from_str("2025-03-04 04:00:00", "%Y-%m-%d %H:%M:%S")
                .unwrap()
                .and_utc()
        )
    );
    assert_eq!(snapshot(&sim).await, before, "{fixture}: nothing written");
    sim.drop().await.unwrap();
}

/// A store that does not override the port's default answers an error, never
/// an empty answer that would read as "nothing stuck".
#[tokio::test]
async fn the_ports_default_is_an_error() {
    struct Bare;
    impl TaskStore for Bare {
        fn detect(&self) -> reaper_core::ports::BoxFuture<'_, Result<SchemaInfo, PortError>> {
            unimplemented!()
        }
        fn ping(&self) -> reaper_core::ports::BoxFuture<'_, Result<(), PortError>> {
            unimplemented!()
        }
        fn candidates<'a>(
            &'a self,
            _: DsLine,
            _: &'a [i32],
            _: Scan,
        ) -> reaper_core::ports::BoxFuture<'a, Result<Vec<reaper_core::Candidate>, PortError>>
        {
            unimplemented!()
        }
        fn scan_once<'a>(
            &'a self,
            _: DsLine,
            _: &'a [i32],
        ) -> reaper_core::ports::BoxFuture<'a, Result<Vec<reaper_core::Candidate>, PortError>>
        {
            unimplemented!()
        }
        fn task(
            &self,
            _: DsLine,
            _: i64,
        ) -> reaper_core::ports::BoxFuture<'_, Result<Option<TaskRow>, PortError>> {
            unimplemented!()
        }
        fn write_tasks<'a>(
            &'a self,
            _: DsLine,
            _: &'a [TaskWrite],
        ) -> reaper_core::ports::BoxFuture<'a, Result<Vec<WriteOutcome>, PortError>> {
            unimplemented!()
        }
        fn follow_up<'a>(
            &'a self,
            _: DsLine,
            _: &'a FollowUpRequest,
            _: reaper_core::ports::LiveMaster<'a>,
        ) -> reaper_core::ports::BoxFuture<'a, Result<FollowUpOutcome, PortError>> {
            unimplemented!()
        }
        fn rows_skipped(&self) -> Vec<(String, u64)> {
            Vec::new()
        }
    }
    assert!(matches!(
        Bare.anomaly_rows(DsLine::V3_3).await,
        Err(e) if e.kind() == PortErrorKind::Unsupported
    ));
}

macro_rules! tests {
    ($f:ident: $($name:ident: $kind:expr, $fx:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            $f($kind, $fx).await;
        }
    )*};
}

tests! { rows:
    anomaly_rows_mysql_1_3_9: SimKind::MySql, "1.3.9";
    anomaly_rows_pg_2_0_9: SimKind::Postgres, "2.0.9";
    anomaly_rows_mysql_3_2_2: SimKind::MySql, "3.2.2";
    anomaly_rows_pg_3_2_2: SimKind::Postgres, "3.2.2";
    anomaly_rows_mysql_3_3_2: SimKind::MySql, "3.3.2";
    anomaly_rows_pg_3_3_2: SimKind::Postgres, "3.3.2";
    anomaly_rows_mysql_3_4_0: SimKind::MySql, "3.4.0";
    anomaly_rows_pg_3_4_0: SimKind::Postgres, "3.4.0";
}

tests! { serial:
    serial_waits_mysql_3_4_0: SimKind::MySql, "3.4.0";
    serial_waits_pg_3_4_0: SimKind::Postgres, "3.4.0";
}
