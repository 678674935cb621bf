//! Every schema fixture on real MariaDB and PostgreSQL: detection, candidate
//! reads (incremental and full), conditional writes and follow-ups.

mod sql_setup;

use chrono::{TimeZone, Utc};
use ds_sim::db::{fixture_line, SimDb, SimKind, TaskSpec, WorkflowSpec};
use reaper_core::{Action, DsLine, FollowUp};
use reaper_sql::*;
use sql_setup::*;
use std::time::Duration;

async fn run(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = fixture_line(fixture);
    let db = connect(&sim, Duration::from_secs(30));
    db.ping().await.unwrap();

    // detection
    let info = db.detect().await.unwrap();
    assert!(info.lines.contains(&line), "{fixture}: {:?}", info.lines);
    let expect: Vec<DsLine> = match fixture {
        "3.1.9" => vec![DsLine::V3_1_0, DsLine::V3_1],
        _ => vec![line],
    };
    assert_eq!(info.lines, expect, "{fixture}");

    // rows
    let wf = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let straggler = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    sim.bulk_fill(wf, 200, 7, "10.0.0.5:1234").await.unwrap();
    let finished = sim
        .insert_task(&TaskSpec::new(wf, 7, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let live_a = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.6:1234")))
        .await
        .unwrap();
    let pending = sim.insert_task(&TaskSpec::new(wf, 0, None)).await.unwrap();
    let mut z = TaskSpec::new(wf, 1, Some("10.0.0.5:1234"));
    z.flag = 0;
    let flag0 = sim.insert_task(&z).await.unwrap();
    sim.bulk_fill(wf, 50, 7, "10.0.0.5:1234").await.unwrap();

    let states = [1];
    let mut cur = SweepCursor::new();
    let full = db.full_scan(line, &states, &mut cur).await.unwrap();
    assert_eq!(ids(&full), vec![straggler, live_a], "{fixture}");
    assert!(!ids(&full).contains(&flag0) && !ids(&full).contains(&finished));
    let s = full.iter().find(|c| c.id == straggler).unwrap();
    assert_eq!(s.host.as_deref(), Some("10.0.0.5:1234"));
    assert_eq!(s.workflow_instance_id, Some(wf));
    assert_eq!(s.workflow_host.as_deref(), Some("10.0.0.1:5678"));
    assert_eq!(s.workflow_state, Some(1));
    assert_eq!(s.worker_group.as_deref(), Some("default"));
    assert_eq!(&*s.task_type, "SHELL");
    assert_eq!(
        s.submit_time,
        Some(Utc.timestamp_opt(1_700_000_100, 0).unwrap())
    );
    if line >= DsLine::V3_2 {
        assert_eq!(s.project_code, Some(4242));
    } else {
        assert_eq!(s.project_code, None);
    }
    let mark0 = cur.low_water().unwrap();
    assert_eq!(cur.tracked(), 2);
    assert_eq!(cur.pending(), 1);

    // a gap: an id allocated now, committed after the next sweep
    let gap = sim.insert_task(&TaskSpec::new(wf, 7, None)).await.unwrap();
    sim.exec(&format!("DELETE FROM t_ds_task_instance WHERE id = {gap}"))
        .await
        .unwrap();
    let live_b = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.7:1234")))
        .await
        .unwrap();
    let inc = db.incremental(line, &states, &mut cur).await.unwrap();
    assert_eq!(ids(&inc), vec![straggler, live_a, live_b], "{fixture}");
    assert!(cur.low_water().unwrap() >= mark0);

    // the late commit below the newest id, and the pending row turning live
    let fk = line.workflow_fk_column();
    let mut extra = String::new();
    if line >= DsLine::V2_0 {
        extra.push_str(", task_code, task_definition_version");
    }
    let mut extra_v = String::new();
    if line >= DsLine::V2_0 {
        extra_v.push_str(", 77, 1");
    }
    if line >= DsLine::V3_2 {
        extra.push_str(", project_code");
        extra_v.push_str(", 4242");
    }
    sim.exec(&format!(
        "INSERT INTO t_ds_task_instance (id, name, task_type, {fk}, state, host, flag{extra}) \
         VALUES ({gap}, 'late', 'SHELL', {wf}, 1, '10.0.0.8:1234', 1{extra_v})"
    ))
    .await
    .unwrap();
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 1, host = '10.0.0.9:1234' WHERE id = {pending}"
    ))
    .await
    .unwrap();
    // an old untracked row below the mark turning live: only a full scan sees it
    let old = straggler + 10;
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 1 WHERE id = {old}"
    ))
    .await
    .unwrap();
    let inc2 = db.incremental(line, &states, &mut cur).await.unwrap();
    assert_eq!(
        ids(&inc2),
        vec![straggler, live_a, pending, gap, live_b],
        "{fixture}: the late row and the pending row are seen"
    );
    let inc3 = db.incremental(line, &states, &mut cur).await.unwrap();
    assert_eq!(ids(&inc3), ids(&inc2), "{fixture}: stable");
    assert!(
        cur.low_water().unwrap() >= gap,
        "the mark moved up past the late row"
    );
    let full2 = db.full_scan(line, &states, &mut cur).await.unwrap();
    assert_eq!(
        ids(&full2),
        vec![straggler, old, live_a, pending, gap, live_b],
        "{fixture}"
    );

    // task(): any state, with flag
    let t = db.task(line, flag0).await.unwrap().unwrap();
    assert_eq!((t.flag, t.task.state), (0, 1));
    assert!(db.task(line, 999_999_999).await.unwrap().is_none());

    // writes
    let by_id = |id: i64| full2.iter().find(|c| c.id == id).unwrap().clone();
    let seen_a = by_id(live_a);
    // live_a changes host between read and write -> lost race
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET host = '10.0.0.99:1234' WHERE id = {live_a}"
    ))
    .await
    .unwrap();
    // a row that finished after being read
    let seen_old = by_id(old);
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7 WHERE id = {old}"
    ))
    .await
    .unwrap();
    let mut fin = by_id(straggler);
    fin.id = finished;
    fin.state = 7;
    let w = |seen: reaper_core::Candidate, action| TaskWrite {
        seen,
        action,
        now: now(),
    };
    let out = db
        .write_tasks(
            line,
            &[
                w(by_id(straggler), Action::Fail),
                w(seen_a.clone(), Action::Fail),
                w(by_id(live_b), Action::FaultTolerance),
                w(by_id(gap), Action::Kill),
                w(seen_old, Action::Kill),
                w(fin, Action::Fail),
            ],
        )
        .await
        .unwrap();
    use WriteOutcome::*;
    assert_eq!(
        out,
        vec![Applied, LostRace, Applied, Applied, LostRace, LostRace],
        "{fixture}"
    );
    let st = sim.task_state(straggler).await.unwrap();
    assert_eq!((st.state, st.end_time, st.flag), (6, Some(naive_now()), 1));
    let st = sim.task_state(live_a).await.unwrap();
    assert_eq!((st.state, st.end_time), (1, None), "lost race left alone");
    let st = sim.task_state(live_b).await.unwrap();
    assert_eq!(
        (st.state, st.end_time, st.flag),
        (8, None, 1),
        "fault tolerance: state only"
    );
    let st = sim.task_state(gap).await.unwrap();
    assert_eq!((st.state, st.end_time), (9, Some(naive_now())));
    let st = sim.task_state(old).await.unwrap();
    assert_eq!(st.state, 7);
    let st = sim.task_state(finished).await.unwrap();
    assert_eq!((st.state, st.end_time), (7, None), "finished row untouched");
    // a state code the line does not have is refused
    assert!(db
        .write_tasks(line, &[w(by_id(pending), Action::Report)])
        .await
        .is_err());

    follow_ups(&sim, &db, line, fixture).await;
    sim.drop().await.unwrap();
}

fn col<'a>(c: &'a ds_sim::db::CommandView, k: &str) -> Option<&'a str> {
    c.get(k).and_then(|v| v.as_deref())
}

async fn follow_ups(sim: &SimDb, db: &Db, line: DsLine, fixture: &str) {
    let now_s = naive_now().format("%Y-%m-%d %H:%M:%S").to_string();
    // fail: workflow to FAILURE with end_time
    let (wf, t) = one_task_workflow(sim, db, line, false).await;
    let o = write_then_follow(db, line, &t, Action::Fail, FollowUp::Fail).await;
    assert!(
        matches!(
            o,
            FollowUpOutcome::Done {
                workflow_state: Some(6),
                command_type: None,
                ..
            }
        ),
        "{fixture}: {o:?}"
    );
    assert_eq!(
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some("6")
    );
    assert!(sim
        .workflow_col(wf, "end_time")
        .await
        .unwrap()
        .unwrap()
        .starts_with(&now_s));

    // fail skipped while another task of the workflow is live
    let (wf, t) = one_task_workflow(sim, db, line, true).await;
    let o = write_then_follow(db, line, &t, Action::Kill, FollowUp::Fail).await;
    assert!(
        matches!(o, FollowUpOutcome::Skipped(ref m) if m.contains("other task")),
        "{o:?}"
    );
    assert_eq!(
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some("1")
    );

    // recover after fail
    let (wf, t) = one_task_workflow(sim, db, line, false).await;
    let o = write_then_follow(db, line, &t, Action::Fail, FollowUp::Recover).await;
    let FollowUpOutcome::Done {
        command_type: Some(4),
        command_id: Some(_),
        workflow_state,
        ..
    } = o
    else {
        panic!("{fixture}: {o:?}")
    };
    let cmds = sim.commands().await.unwrap();
    assert_eq!(cmds.len(), 1, "{fixture}");
    let c = &cmds[0];
    assert_eq!(col(c, "command_type"), Some("4"));
    assert_eq!(col(c, "executor_id"), Some("7"));
    assert_eq!(col(c, "task_depend_type"), Some("2"));
    assert_eq!(col(c, "failure_strategy"), Some("1"));
    check_instance_and_def(c, line, wf);
    if line == DsLine::V3_3 {
        assert_eq!(workflow_state, Some(0));
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("0")
        );
        assert_eq!(
            sim.workflow_col(wf, "run_times").await.unwrap().as_deref(),
            Some("2")
        );
        assert_eq!(sim.workflow_col(wf, "end_time").await.unwrap(), None);
        assert!(sim
            .workflow_col(wf, "restart_time")
            .await
            .unwrap()
            .unwrap()
            .starts_with(&now_s));
        assert_eq!(col(c, "command_param"), None);
        assert!(col(c, "start_time").unwrap().starts_with(&now_s));
        check_test_flag(sim, c, fixture);
    } else {
        assert_eq!(workflow_state, Some(6));
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("6")
        );
        if line == DsLine::V3_2 {
            assert_eq!(col(c, "command_param"), None, "3.2: no param");
            assert_eq!(col(c, "start_time"), None, "3.2 builder: no start_time");
            assert_eq!(col(c, "test_flag"), Some("0"));
        } else {
            let p: serde_json::Value =
                serde_json::from_str(col(c, "command_param").unwrap()).unwrap();
            assert_eq!(p, serde_json::json!({"ProcessInstanceId": wf}));
            assert!(col(c, "start_time").unwrap().starts_with(&now_s));
        }
    }
    // a second recover for the same workflow: already queued
    let t2 = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let row2 = db.task(line, t2).await.unwrap().unwrap().task;
    let o = write_then_follow(db, line, &row2, Action::Fail, FollowUp::Recover).await;
    assert!(
        matches!(o, FollowUpOutcome::Skipped(ref m) if m.contains("already queued")),
        "{o:?}"
    );
    assert_eq!(sim.commands().await.unwrap().len(), 1);

    // recover after fault-tolerance; the instance carries StartParams and the
    // definition is scheduled (createCommand adds schedule_timezone on 3.0–3.2)
    if matches!(line, DsLine::V2_0 | DsLine::V3_1 | DsLine::V3_2) {
        sim.exec(
            "INSERT INTO t_ds_schedules (process_definition_code, start_time, end_time, timezone_id, \
             crontab, failure_strategy, user_id, release_state, warning_type, create_time, update_time) \
             VALUES (9001, '2024-01-01 00:00:00', '2030-01-01 00:00:00', 'Asia/Shanghai', \
             '0 0 * * * ? *', 1, 1, 1, 0, '2024-01-01 00:00:00', '2024-01-01 00:00:00')",
        )
        .await
        .unwrap();
    }
    let wf = sim
        .insert_workflow(&WorkflowSpec {
            command_param: Some(r#"{"StartParams":"{\"k\":\"v\"}"}"#.into()),
            ..WorkflowSpec::default()
        })
        .await
        .unwrap();
    let tid = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let t = db.task(line, tid).await.unwrap().unwrap().task;
    let o = write_then_follow(db, line, &t, Action::FaultTolerance, FollowUp::Recover).await;
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
    let cmds = sim.commands().await.unwrap();
    assert_eq!(cmds.len(), 2);
    let c = &cmds[1];
    assert_eq!(col(c, "command_type"), Some("2"));
    assert_eq!(col(c, "task_depend_type"), Some("2"));
    assert_eq!(col(c, "failure_strategy"), Some("1"));
    check_instance_and_def(c, line, wf);
    if line == DsLine::V3_3 {
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("18")
        );
        assert_eq!(
            col(c, "command_param"),
            Some("{\"commandType\":\"RECOVER_TOLERANCE_FAULT\",\"subWorkflowInstance\":false,\"startNodes\":null,\"commandParams\":null,\"timeZone\":null,\"workflowExecutionStatus\":\"RUNNING_EXECUTION\"}")
        );
        assert_eq!(col(c, "executor_id"), Some("0"));
        assert_eq!(col(c, "start_time"), None);
        check_test_flag(sim, c, fixture);
    } else {
        let host = sim.workflow_col(wf, "host").await.unwrap();
        let want = if line == DsLine::V1_2 { "null" } else { "NULL" };
        assert_eq!(host.as_deref(), Some(want));
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("1")
        );
        assert_eq!(col(c, "executor_id"), Some("7"));
        let p: serde_json::Value = serde_json::from_str(col(c, "command_param").unwrap()).unwrap();
        if line >= DsLine::V3_1 {
            assert_eq!(
                p,
                serde_json::json!({"ProcessInstanceId": wf, "StartParams": "{\"k\":\"v\"}", "schedule_timezone": "Asia/Shanghai"}),
                "{fixture}"
            );
        } else {
            assert_eq!(p, serde_json::json!({"ProcessInstanceId": wf}), "{fixture}");
        }
        assert!(col(c, "start_time").unwrap().starts_with(&now_s));
        if line >= DsLine::V3_1 {
            assert_eq!(col(c, "process_instance_priority"), Some("1"));
        }
        if line == DsLine::V1_2 {
            assert_eq!(col(c, "worker_group_id"), Some("0"));
        }
    }
    let st = sim.task_state(t.id).await.unwrap();
    assert_eq!((st.state, st.flag), (8, 1));
}

/// 3.3.0 (the dev fixture) writes `test_flag = 0`; 3.3.1+ has no such column.
fn check_test_flag(sim: &SimDb, c: &ds_sim::db::CommandView, fixture: &str) {
    if fixture == "dev" {
        assert_eq!(col(c, "test_flag"), Some("0"), "{fixture}");
    } else {
        assert!(!sim.has_column("t_ds_command", "test_flag"), "{fixture}");
        assert!(!c.contains_key("test_flag"), "{fixture}");
    }
}

fn check_instance_and_def(c: &ds_sim::db::CommandView, line: DsLine, wf: i64) {
    let wf_s = wf.to_string();
    match line {
        DsLine::V1_2 | DsLine::V1_3 => {
            assert_eq!(col(c, "process_definition_id"), Some("9001"));
            assert!(!c.contains_key("process_instance_id"));
        }
        DsLine::V3_3 => {
            assert_eq!(col(c, "workflow_instance_id"), Some(wf_s.as_str()));
            assert_eq!(col(c, "workflow_definition_code"), Some("9001"));
            assert_eq!(col(c, "workflow_definition_version"), Some("3"));
        }
        _ => {
            assert_eq!(col(c, "process_instance_id"), Some(wf_s.as_str()));
            assert_eq!(col(c, "process_definition_code"), Some("9001"));
            assert_eq!(col(c, "process_definition_version"), Some("3"));
        }
    }
}

macro_rules! fixture_tests {
    ($($name:ident: $kind:expr, $fx:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            run($kind, $fx).await;
        }
    )*};
}

fixture_tests! {
    mysql_1_2_1: SimKind::MySql, "1.2.1";
    mysql_1_3_9: SimKind::MySql, "1.3.9";
    mysql_2_0_9: SimKind::MySql, "2.0.9";
    mysql_3_1_9: SimKind::MySql, "3.1.9";
    mysql_3_2_2: SimKind::MySql, "3.2.2";
    mysql_dev: SimKind::MySql, "dev";
    mysql_3_3_2: SimKind::MySql, "3.3.2";
    mysql_3_4_0: SimKind::MySql, "3.4.0";
    pg_1_2_1: SimKind::Postgres, "1.2.1";
    pg_1_3_9: SimKind::Postgres, "1.3.9";
    pg_2_0_9: SimKind::Postgres, "2.0.9";
    pg_3_1_9: SimKind::Postgres, "3.1.9";
    pg_3_2_2: SimKind::Postgres, "3.2.2";
    pg_dev: SimKind::Postgres, "dev";
    pg_3_3_2: SimKind::Postgres, "3.3.2";
    pg_3_4_0: SimKind::Postgres, "3.4.0";
}
