//! The follow-up decisions, without a database.

use super::*;
use chrono::{TimeZone, Utc};
use reaper_core::Candidate;

fn req(action: Action, follow_up: FollowUp) -> FollowUpRequest {
    let mut task = Candidate::new(1, "SHELL", 1, Some("10.0.0.5:1234"));
    task.workflow_instance_id = Some(10);
    FollowUpRequest {
        task,
        action,
        follow_up,
        now: Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap(),
    }
}

fn wf(state: i32, host: &str) -> WfRow {
    WfRow {
        state: Some(state),
        host: Some(host.into()),
        def_code: Some(9001),
        def_version: Some(1),
        def_id: Some(9001),
        executor_id: Some(7),
        ..WfRow::default()
    }
}

fn facts() -> Facts {
    Facts {
        other_live: 0,
        queued: false,
        live_owner: None,
        schedule_tz: None,
        running_child: None,
    }
}

fn skip_reason(r: Result<Decision, FollowUpOutcome>) -> String {
    match r {
        Err(FollowUpOutcome::Skipped(m)) => m,
        other => panic!("not skipped: {other:?}"),
    }
}

fn now() -> NaiveDateTime {
    NaiveDateTime::default()
}

#[test]
fn failover_state_is_ds_own_on_3_3() {
    for (a, f) in [
        (Action::Fail, FollowUp::Fail),
        (Action::Kill, FollowUp::Recover),
        (Action::FaultTolerance, FollowUp::Recover),
    ] {
        let r = decide(
            DsLine::V3_3,
            &req(a, f),
            10,
            &wf(18, "NULL"),
            &facts(),
            now(),
        );
        assert!(skip_reason(r).contains("failover state 18"));
    }
    // on older lines 18 is no workflow state DS fails over with
    let r = decide(
        DsLine::V3_2,
        &req(Action::Fail, FollowUp::Fail),
        10,
        &wf(1, "m:5678"),
        &facts(),
        now(),
    );
    assert!(r.is_ok());
}

#[test]
fn fail_waits_for_a_queued_command() {
    let f = Facts {
        queued: true,
        ..facts()
    };
    for line in [DsLine::V1_3, DsLine::V3_2, DsLine::V3_3] {
        let r = decide(
            line,
            &req(Action::Fail, FollowUp::Fail),
            10,
            &wf(1, "m:5678"),
            &f,
            now(),
        );
        assert!(skip_reason(r).contains("already queued"), "{line}");
    }
}

#[test]
fn recover_never_while_a_live_master_holds_it() {
    let f = Facts {
        live_owner: Some("m:5678".into()),
        ..facts()
    };
    for line in DsLine::ALL {
        for a in [Action::Fail, Action::FaultTolerance] {
            let r = decide(
                line,
                &req(a, FollowUp::Recover),
                10,
                &wf(1, "m:5678"),
                &f,
                now(),
            );
            assert!(skip_reason(r).contains("live master m:5678"), "{line} {a}");
        }
    }
    // `fail` does not depend on the owner
    let r = decide(
        DsLine::V1_3,
        &req(Action::Fail, FollowUp::Fail),
        10,
        &wf(1, "m:5678"),
        &f,
        now(),
    );
    assert!(r.is_ok());
}

#[test]
fn live_owner_asks_only_about_real_hosts() {
    let never = |h: &str| panic!("asked about {h}");
    for h in [None, Some(""), Some(" "), Some("NULL"), Some("null")] {
        assert_eq!(live_owner(h, &never), None);
    }
    assert_eq!(live_owner(Some("m:5678"), &|_| false), None);
    assert_eq!(
        live_owner(Some("m:5678"), &|h| h == "m:5678").as_deref(),
        Some("m:5678")
    );
}

#[test]
fn commands_fit_the_learned_columns() {
    let cmd = CommandRow {
        cols: vec![
            ("command_type", Val::I32(4)),
            ("test_flag", Val::I32(0)),
            ("workflow_instance_id", Val::I64(10)),
        ],
    };
    let cat = Catalog::new(
        ["t_ds_command".to_string()].into(),
        vec![
            ("t_ds_command".into(), "command_type".into()),
            ("t_ds_command".into(), "workflow_instance_id".into()),
        ],
    );
    let fitted = fit_command(cmd, &cat);
    let names: Vec<&str> = fitted.cols.iter().map(|(c, _)| *c).collect();
    assert_eq!(names, ["command_type", "workflow_instance_id"]);
}

#[test]
fn state_history_appends_one_state_desc_keeping_the_old_text() {
    let t = NaiveDateTime::parse_from_str("2025-03-04 05:06:07", "%Y-%m-%d %H:%M:%S").unwrap();
    let e = r#"{"time":"2025-03-04 05:06:07","state":"SUBMITTED_SUCCESS","desc":"START_FAILURE_TASK_PROCESS"}"#;
    assert_eq!(restart_state_history(None, t), Some(format!("[{e}]")));
    assert_eq!(restart_state_history(Some(" "), t), Some(format!("[{e}]")));
    assert_eq!(restart_state_history(Some("[]"), t), Some(format!("[{e}]")));
    let old = r#"[{"time":"2024-01-01 00:00:00","state":"RUNNING_EXECUTION","desc":"x"}]"#;
    assert_eq!(
        restart_state_history(Some(old), t),
        Some(format!("{},{e}]", &old[..old.len() - 1]))
    );
    assert_eq!(restart_state_history(Some("{\"a\":1}"), t), None);
    assert_eq!(restart_state_history(Some("[1,"), t), None);
}

#[test]
fn recover_never_while_a_child_workflow_runs_but_fail_does_not_ask() {
    let f = Facts {
        running_child: Some((11, 1)),
        ..facts()
    };
    for line in DsLine::ALL {
        for a in [Action::Fail, Action::Kill, Action::FaultTolerance] {
            let r = decide(
                line,
                &req(a, FollowUp::Recover),
                10,
                &wf(1, "m:5678"),
                &f,
                now(),
            );
            let why = skip_reason(r);
            assert!(
                why.starts_with("child_workflow_running"),
                "{line} {a}: {why}"
            );
            assert!(
                why.contains("child workflow instance 11"),
                "{line} {a}: {why}"
            );
        }
        // the workflow_master_lost recover, the same rows
        let why = master_failover(line, 10, &wf(1, "m:5678"), &f, now())
            .unwrap_err()
            .to_string();
        assert!(why.starts_with("child_workflow_running"), "{line}: {why}");
    }
    let r = decide(
        DsLine::V3_1,
        &req(Action::Fail, FollowUp::Fail),
        10,
        &wf(1, "m:5678"),
        &f,
        now(),
    );
    assert!(r.is_ok());
}
