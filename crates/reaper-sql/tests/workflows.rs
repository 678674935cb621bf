//! Workflow instances that cannot progress (SPEC §13) on real MariaDB and
//! PostgreSQL with DS's real schemas: `recover` for `workflow_master_lost`
//! writes exactly DS's master-failover rows per line, under the guards of
//! SPEC §4 (a live master, DS's own hands, a queued command, races); the
//! candidate reads (incremental and full) and their task summaries.

mod sql_setup;

use chrono::NaiveDateTime;
use ds_sim::db::{CommandView, SimDb, SimKind, TaskSpec, WorkflowSpec};
use reaper_core::ports::{Scan, TaskStore, WorkflowOutcome};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::DsLine;
use reaper_sql::*;
use sql_setup::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const OWNER: &str = "10.0.0.1:5678";
const STATES: [i32; 3] = [1, 2, 4];
const TASK_STATES: [i32; 2] = [1, 17];

fn col<'a>(c: &'a CommandView, k: &str) -> Option<&'a str> {
    c.get(k).and_then(|v| v.as_deref())
}

fn at(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap()
}

fn instant(s: &str) -> reaper_core::Instant {
    at(s).and_utc()
}

/// A workflow owned by `OWNER` in `state` with one live task, read back by id.
async fn workflow_with_task(sim: &SimDb, db: &Db, state: i32) -> WorkflowCandidate {
    let wf = sim
        .insert_workflow(&WorkflowSpec {
            state,
            ..WorkflowSpec::default()
        })
        .await
        .unwrap();
    sim.insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    db.workflow(sim.line, wf, &TASK_STATES)
        .await
        .unwrap()
        .unwrap()
}

/// Nothing written: the workflow's state and host are as inserted, no command.
async fn untouched(sim: &SimDb, wf: i64, state: &str, host: Option<&str>, what: &str) {
    assert_eq!(
        sim.workflow_col(wf, "state").await.unwrap().as_deref(),
        Some(state),
        "{}: {what}",
        sim.fixture
    );
    assert_eq!(
        sim.workflow_col(wf, "host").await.unwrap().as_deref(),
        host,
        "{}: {what}",
        sim.fixture
    );
    assert!(
        sim.commands().await.unwrap().is_empty(),
        "{}: {what}: no command",
        sim.fixture
    );
}

fn skipped(o: &WorkflowOutcome, needle: &str) -> bool {
    matches!(o, WorkflowOutcome::Skipped(m) if m.contains(needle))
}

/// `workflow_master_lost` → `recover`: DS's own master-failover rows of the
/// line (reference §4, §5), and every guard of SPEC §13 / §4.
async fn recover(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let sql = Arc::new(SqlStore::new(connect(&sim, Duration::from_secs(30))));
    let store: Arc<dyn TaskStore> = sql.clone();
    let db = sql.db();
    let now_s = naive_now().format("%Y-%m-%d %H:%M:%S").to_string();

    // --- a workflow whose master is alive is never written
    let seen = workflow_with_task(&sim, db, 1).await;
    let asked = Mutex::new(Vec::<String>::new());
    let owner_live = |h: &str| {
        asked.lock().unwrap().push(h.to_string());
        h == OWNER
    };
    let o = store
        .recover_workflow(line, &seen, now(), &owner_live)
        .await
        .unwrap();
    assert!(
        skipped(&o, &format!("live master {OWNER}")),
        "{fixture}: {o:?}"
    );
    assert_eq!(
        *asked.lock().unwrap(),
        vec![OWNER.to_string()],
        "asked with the raw host"
    );
    untouched(&sim, seen.id, "1", Some(OWNER), "live master").await;

    // --- already in DS's hands: host 'NULL' (≤ 3.2's own failover), SQL NULL, empty
    let never = |h: &str| panic!("asked about {h}");
    for host in [Some("NULL"), None, Some("")] {
        let wf = sim
            .insert_workflow(&WorkflowSpec {
                host: host.map(str::to_string),
                ..WorkflowSpec::default()
            })
            .await
            .unwrap();
        let seen = db.workflow(line, wf, &TASK_STATES).await.unwrap().unwrap();
        assert_eq!(seen.host.as_deref(), host);
        let o = db
            .recover_workflow(line, &seen, now(), &never)
            .await
            .unwrap();
        assert!(
            skipped(&o, "DS's own failover"),
            "{fixture} {host:?}: {o:?}"
        );
        untouched(&sim, wf, "1", host, "host already DS's").await;
    }

    // --- a command for it is already queued (DS's own failover, or a user's recover)
    let seen = workflow_with_task(&sim, db, 1).await;
    queue_command(&sim, seen.id, 2).await;
    let o = db
        .recover_workflow(line, &seen, now(), &no_live_master)
        .await
        .unwrap();
    assert!(skipped(&o, "already queued"), "{fixture}: {o:?}");
    assert_eq!(
        sim.commands().await.unwrap().len(),
        1,
        "{fixture}: no second command"
    );
    assert_eq!(
        sim.workflow_col(seen.id, "host").await.unwrap().as_deref(),
        Some(OWNER)
    );
    assert_eq!(
        sim.workflow_col(seen.id, "state").await.unwrap().as_deref(),
        Some("1")
    );
    sim.exec("DELETE FROM t_ds_command").await.unwrap();

    // --- races: the row changed between the read and the write
    let table = line.workflow_table();
    // another master took it over (DS's own failover finished meanwhile)
    let seen = workflow_with_task(&sim, db, 1).await;
    sim.exec(&format!(
        "UPDATE {table} SET host = '10.0.0.2:5678' WHERE id = {}",
        seen.id
    ))
    .await
    .unwrap();
    let o = db
        .recover_workflow(line, &seen, now(), &never)
        .await
        .unwrap();
    assert!(
        matches!(o, WorkflowOutcome::LostRace(ref m) if m.contains("changed since it was read")),
        "{fixture}: {o:?}"
    );
    untouched(&sim, seen.id, "1", Some("10.0.0.2:5678"), "host changed").await;
    // its state changed (the user stopped it)
    let seen = workflow_with_task(&sim, db, 1).await;
    sim.exec(&format!(
        "UPDATE {table} SET state = 4 WHERE id = {}",
        seen.id
    ))
    .await
    .unwrap();
    let o = db
        .recover_workflow(line, &seen, now(), &never)
        .await
        .unwrap();
    assert!(
        matches!(o, WorkflowOutcome::LostRace(_)),
        "{fixture}: {o:?}"
    );
    untouched(&sim, seen.id, "4", Some(OWNER), "state changed").await;
    // it is gone
    let mut gone = seen.clone();
    gone.id = 999_999_999;
    let o = db
        .recover_workflow(line, &gone, now(), &never)
        .await
        .unwrap();
    assert!(
        matches!(o, WorkflowOutcome::LostRace(_)),
        "{fixture}: {o:?}"
    );

    // --- the owner is gone: DS's master-failover rows
    if line >= DsLine::V3_1 && line < DsLine::V3_3 {
        // the instance's StartParams travel in the param (3.1+), and the
        // schedule's time zone (3.0–3.2)
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
    let task = sim
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let seen = store
        .workflow(line, wf, &TASK_STATES)
        .await
        .unwrap()
        .unwrap();
    let asked = Mutex::new(Vec::<String>::new());
    let gone = |h: &str| {
        asked.lock().unwrap().push(h.to_string());
        false
    };
    let o = store
        .recover_workflow(line, &seen, now(), &gone)
        .await
        .unwrap();
    let WorkflowOutcome::Done {
        workflow_state,
        command_type: 2,
        command_id: Some(cmd_id),
    } = o
    else {
        panic!("{fixture}: {o:?}")
    };
    assert_eq!(*asked.lock().unwrap(), vec![OWNER.to_string()]);
    let cmds = sim.commands().await.unwrap();
    assert_eq!(cmds.len(), 1, "{fixture}");
    let c = &cmds[0];
    assert_eq!(col(c, "id"), Some(cmd_id.to_string().as_str()));
    assert_eq!(col(c, "command_type"), Some("2"));
    assert_eq!(col(c, "task_depend_type"), Some("2"));
    assert_eq!(col(c, "failure_strategy"), Some("1"));
    check_instance_and_def(c, line, wf);
    if line == DsLine::V3_3 {
        assert_eq!(workflow_state, Some(18));
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("18")
        );
        assert_eq!(
            sim.workflow_col(wf, "host").await.unwrap().as_deref(),
            Some(OWNER),
            "3.3 leaves the host"
        );
        assert_eq!(
            col(c, "command_param"),
            Some("{\"commandType\":\"RECOVER_TOLERANCE_FAULT\",\"subWorkflowInstance\":false,\"startNodes\":null,\"commandParams\":null,\"timeZone\":null,\"workflowExecutionStatus\":\"RUNNING_EXECUTION\"}")
        );
        assert_eq!(col(c, "executor_id"), Some("0"));
        assert_eq!(col(c, "start_time"), None);
        if fixture == "dev" {
            assert_eq!(col(c, "test_flag"), Some("0"));
        } else {
            assert!(!c.contains_key("test_flag"), "3.3.1+ has no test_flag");
        }
    } else {
        assert_eq!(workflow_state, None, "{fixture}: the state is kept");
        let want = if line == DsLine::V1_2 { "null" } else { "NULL" };
        assert_eq!(
            sim.workflow_col(wf, "host").await.unwrap().as_deref(),
            Some(want)
        );
        assert_eq!(
            sim.workflow_col(wf, "state").await.unwrap().as_deref(),
            Some("1")
        );
        assert_eq!(col(c, "executor_id"), Some("7"));
        assert!(col(c, "start_time").unwrap().starts_with(&now_s));
        assert!(col(c, "update_time").unwrap().starts_with(&now_s));
        let p: serde_json::Value = serde_json::from_str(col(c, "command_param").unwrap()).unwrap();
        if line >= DsLine::V3_1 {
            assert_eq!(
                p,
                serde_json::json!({"ProcessInstanceId": wf, "StartParams": "{\"k\":\"v\"}", "schedule_timezone": "Asia/Shanghai"}),
                "{fixture}"
            );
            assert_eq!(col(c, "process_instance_priority"), Some("1"));
        } else {
            assert_eq!(p, serde_json::json!({"ProcessInstanceId": wf}), "{fixture}");
        }
        if line == DsLine::V3_2 {
            assert_eq!(col(c, "test_flag"), Some("0"));
        }
        if line >= DsLine::V2_0 {
            assert_eq!(col(c, "dry_run"), Some("0"));
        }
    }
    // 2.0-3.1: DS's master failover writes NEED_FAULT_TOLERANCE into the
    // task rows itself (flag kept); elsewhere they are the taking master's
    let st = sim.task_state(task).await.unwrap();
    let want = if line.master_failover_tolerates_tasks() {
        8
    } else {
        1
    };
    assert_eq!((st.state, st.flag), (want, 1), "{fixture}");

    // the same workflow again (the next sweep): the command is queued now,
    // and on ≤ 3.2 the host is DS's 'NULL', on 3.3 the state is FAILOVER
    let again = db.workflow(line, wf, &TASK_STATES).await.unwrap().unwrap();
    let o = db
        .recover_workflow(line, &again, now(), &never)
        .await
        .unwrap();
    assert!(matches!(o, WorkflowOutcome::Skipped(_)), "{fixture}: {o:?}");
    assert_eq!(sim.commands().await.unwrap().len(), 1);

    // 3.3: the param names the state the workflow was in
    if line == DsLine::V3_3 {
        sim.exec("DELETE FROM t_ds_command").await.unwrap();
        let seen = workflow_with_task(&sim, db, 4).await;
        let o = db
            .recover_workflow(line, &seen, now(), &no_live_master)
            .await
            .unwrap();
        assert!(
            matches!(
                o,
                WorkflowOutcome::Done {
                    workflow_state: Some(18),
                    ..
                }
            ),
            "{fixture}: {o:?}"
        );
        let p = sim.commands().await.unwrap()[0]["command_param"]
            .clone()
            .unwrap();
        assert!(
            p.ends_with("\"workflowExecutionStatus\":\"READY_STOP\"}"),
            "{p}"
        );
    }
    sim.drop().await.unwrap();
}

fn check_instance_and_def(c: &CommandView, line: DsLine, wf: i64) {
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

/// The fields of candidates that the reads fill, by id.
fn by_id(c: &[WorkflowCandidate]) -> BTreeMap<i64, WorkflowCandidate> {
    c.iter().map(|w| (w.id, w.clone())).collect()
}

fn wf_ids(c: &[WorkflowCandidate]) -> Vec<i64> {
    c.iter().map(|w| w.id).collect()
}

/// A fresh full scan: what the incremental read must agree with.
async fn oracle(db: &Db, line: DsLine) -> Vec<WorkflowCandidate> {
    let mut fresh = WorkflowCursor::new();
    db.workflow_full_scan(line, &STATES, &TASK_STATES, &mut fresh)
        .await
        .unwrap()
}

/// Candidate reads: incremental vs full, and what each candidate says of its
/// tasks (SPEC §13).
async fn reads(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let sql = Arc::new(SqlStore::new(connect(&sim, Duration::from_secs(30))));
    let store: Arc<dyn TaskStore> = sql.clone();
    let db = sql.db();
    let has_restart = sim.has_column(line.workflow_table(), "restart_time");
    let has_project = sim.has_column(line.workflow_table(), "project_code");
    let task = |wf, state, host: &str, end: Option<&str>| {
        let mut t = TaskSpec::new(wf, state, Some(host));
        t.end_time = end.map(at);
        t
    };

    // a: running, with a live task, a submitted one, two finished and a flag-0 copy
    let a = sim
        .insert_workflow(&WorkflowSpec {
            restart_time: Some(at("2024-02-01 00:00:00")),
            ..WorkflowSpec::default()
        })
        .await
        .unwrap();
    let a1 = sim
        .insert_task(&task(a, 1, "10.0.0.5:1234", None))
        .await
        .unwrap();
    sim.insert_task(&task(a, 0, "10.0.0.6:1234", None))
        .await
        .unwrap();
    sim.insert_task(&task(a, 7, "10.0.0.5:1234", Some("2024-03-01 00:00:00")))
        .await
        .unwrap();
    sim.insert_task(&task(a, 6, "10.0.0.5:1234", Some("2024-03-02 00:00:00")))
        .await
        .unwrap();
    let mut copy = task(a, 8, "10.0.0.5:1234", Some("2024-03-03 00:00:00"));
    copy.flag = 0;
    sim.insert_task(&copy).await.unwrap();
    // b: running, no task yet
    let b = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    // c: finished; d: submitted (not a candidate, tracked); e: READY_STOP
    let c = sim
        .insert_workflow(&WorkflowSpec {
            state: 7,
            ..WorkflowSpec::default()
        })
        .await
        .unwrap();
    let d = sim
        .insert_workflow(&WorkflowSpec {
            state: 0,
            ..WorkflowSpec::default()
        })
        .await
        .unwrap();
    let d1 = sim
        .insert_task(&task(d, 0, "10.0.0.7:1234", None))
        .await
        .unwrap();
    let e = sim
        .insert_workflow(&WorkflowSpec {
            state: 4,
            host: Some("10.0.0.3:5678".into()),
            ..WorkflowSpec::default()
        })
        .await
        .unwrap();

    // the first incremental read of a fresh store is a full scan
    let got = store
        .workflow_candidates(line, &STATES, &TASK_STATES, Scan::Incremental)
        .await
        .unwrap();
    assert_eq!(wf_ids(&got), vec![a, b, e], "{fixture}");
    let m = by_id(&got);
    let wa = &m[&a];
    assert_eq!(wa.state, 1);
    assert_eq!(wa.host.as_deref(), Some(OWNER));
    assert_eq!(wa.name, "wf");
    assert_eq!(
        wa.start_time,
        chrono::DateTime::from_timestamp(1_700_000_000, 0)
    );
    assert_eq!(
        wa.restart_time,
        has_restart.then(|| instant("2024-02-01 00:00:00")),
        "{fixture}"
    );
    assert_eq!(wa.project_code, has_project.then_some(4242), "{fixture}");
    assert_eq!(wa.tasks_by_state, [(0, 1), (1, 1)].into(), "{fixture}");
    assert_eq!(wa.live_task_hosts, vec!["10.0.0.5:1234".to_string()]);
    assert_eq!(
        wa.last_task_end,
        Some(instant("2024-03-03 00:00:00")),
        "{fixture}: the newest end of any of its task rows"
    );
    let wb = &m[&b];
    assert!(wb.tasks_by_state.is_empty() && wb.live_task_hosts.is_empty());
    assert_eq!(wb.last_task_end, None);
    assert_eq!(m[&e].state, 4);
    let stats = sql.workflow_cursor_stats().await;
    assert_eq!((stats.tracked, stats.pending), (3, 1), "{fixture}");
    assert_eq!(stats.task_bound, None, "unbounded until three sweeps");

    // sweeps until the task reads are bounded
    for _ in 0..3 {
        let again = store
            .workflow_candidates(line, &STATES, &TASK_STATES, Scan::Incremental)
            .await
            .unwrap();
        assert_eq!(again, got, "{fixture}: stable");
    }
    let stats = sql.workflow_cursor_stats().await;
    assert!(stats.task_bound.is_some(), "{fixture}: {stats:?}");
    let mark = stats.low_water.unwrap();

    // changes: a's live task ends (the newest end now), a gets a new task in
    // DISPATCH on another worker, b gets a task, d starts running, a new
    // workflow f arrives with its tasks, e finishes
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7, end_time = '2024-04-01 00:00:00' WHERE id = {a1}"
    ))
    .await
    .unwrap();
    sim.insert_task(&task(a, 17, "10.0.0.8:1234", None))
        .await
        .unwrap();
    sim.insert_task(&task(b, 1, "10.0.0.9:1234", None))
        .await
        .unwrap();
    let table = line.workflow_table();
    sim.exec(&format!("UPDATE {table} SET state = 1 WHERE id = {d}"))
        .await
        .unwrap();
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 1 WHERE id = {d1}"
    ))
    .await
    .unwrap();
    let f = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    sim.insert_task(&task(f, 1, "10.0.0.5:1234", None))
        .await
        .unwrap();
    sim.insert_task(&task(f, 7, "10.0.0.5:1234", Some("2024-05-01 00:00:00")))
        .await
        .unwrap();
    sim.exec(&format!("UPDATE {table} SET state = 7 WHERE id = {e}"))
        .await
        .unwrap();
    // c (finished, untracked, below the mark) is restarted by hand: only a
    // full scan sees it
    assert!(c <= mark);
    sim.exec(&format!("UPDATE {table} SET state = 1 WHERE id = {c}"))
        .await
        .unwrap();

    let inc = store
        .workflow_candidates(line, &STATES, &TASK_STATES, Scan::Incremental)
        .await
        .unwrap();
    assert_eq!(wf_ids(&inc), vec![a, b, d, f], "{fixture}");
    let m = by_id(&inc);
    assert_eq!(m[&a].tasks_by_state, [(0, 1), (17, 1)].into(), "{fixture}");
    assert_eq!(m[&a].live_task_hosts, vec!["10.0.0.8:1234".to_string()]);
    assert_eq!(m[&a].last_task_end, Some(instant("2024-04-01 00:00:00")));
    assert_eq!(m[&b].tasks_by_state, [(1, 1)].into());
    assert_eq!(m[&d].live_task_hosts, vec!["10.0.0.7:1234".to_string()]);
    assert_eq!(m[&f].tasks_by_state, [(1, 1)].into());
    assert_eq!(m[&f].last_task_end, Some(instant("2024-05-01 00:00:00")));
    // what a full scan reads for the same workflows, field by field
    let full = by_id(&oracle(db, line).await);
    for w in &inc {
        assert_eq!(Some(w), full.get(&w.id), "{fixture}: incremental == full");
    }
    assert!(full.contains_key(&c), "{fixture}: the full scan sees c");
    // the sweep's own full scan tracks c from now on
    let full = store
        .workflow_candidates(line, &STATES, &TASK_STATES, Scan::Full)
        .await
        .unwrap();
    assert_eq!(wf_ids(&full), vec![a, b, c, d, f], "{fixture}");
    let inc = store
        .workflow_candidates(line, &STATES, &TASK_STATES, Scan::Incremental)
        .await
        .unwrap();
    assert_eq!(inc, full, "{fixture}");

    // one workflow by id, any state; none for an unknown id
    let one = store
        .workflow(line, e, &TASK_STATES)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((one.id, one.state), (e, 7));
    assert!(store
        .workflow(line, 999_999_999, &TASK_STATES)
        .await
        .unwrap()
        .is_none());
    sim.drop().await.unwrap();
}

/// SPEC §4.12 for workflow rows: an undecodable row is skipped, logged and
/// counted once, never ends a scan early, never moves the mark past rows
/// not yet read, and is read again by id until it decodes.
async fn undecodable(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let db = connect(&sim, Duration::from_secs(30));
    let table = line.workflow_table();
    let a = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let mut cur = WorkflowCursor::new();
    let got = db
        .workflow_full_scan(line, &STATES, &TASK_STATES, &mut cur)
        .await
        .unwrap();
    assert_eq!(wf_ids(&got), vec![a]);

    let bad = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let breaking = match kind {
        SimKind::MySql => format!(
            "SET SESSION sql_mode = ''; UPDATE {table} SET start_time = '2024-00-00 00:00:00' WHERE id = {bad}"
        ),
        SimKind::Postgres => format!("UPDATE {table} SET start_time = 'infinity' WHERE id = {bad}"),
    };
    sim.exec(&breaking).await.unwrap();
    // more than a page of tracked rows after it, then a candidate
    let (first, last) = sim.bulk_fill_workflows(5_100, 0, OWNER).await.unwrap();
    assert_eq!(last - first + 1, 5_100);
    let z = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    // a workflow whose task row cannot be decoded is skipped too
    let y = sim.insert_workflow(&WorkflowSpec::default()).await.unwrap();
    let yt = sim
        .insert_task(&TaskSpec::new(y, 7, Some("10.0.0.5:1234")))
        .await
        .unwrap();
    let breaking_task = match kind {
        SimKind::MySql => format!(
            "SET SESSION sql_mode = ''; UPDATE t_ds_task_instance SET end_time = '2024-00-00 00:00:00' WHERE id = {yt}"
        ),
        SimKind::Postgres => {
            format!("UPDATE t_ds_task_instance SET end_time = 'infinity' WHERE id = {yt}")
        }
    };
    sim.exec(&breaking_task).await.unwrap();

    let got = db
        .workflow_incremental(line, &STATES, &TASK_STATES, &mut cur)
        .await
        .unwrap();
    assert_eq!(
        wf_ids(&got),
        vec![a, z],
        "{fixture}: the rows after the bad one are read"
    );
    let st = cur.stats();
    assert_eq!(st.undecodable, 1, "{fixture}");
    assert_eq!(st.pending, 5_100, "{fixture}");
    assert_eq!(
        db.rows_skipped(),
        vec![(table.to_string(), 2)],
        "{fixture}: the bad row and the workflow with a bad task row"
    );
    let mut fresh = WorkflowCursor::new();
    let full = db
        .workflow_full_scan(line, &STATES, &TASK_STATES, &mut fresh)
        .await
        .unwrap();
    assert_eq!(wf_ids(&full), vec![a, z], "{fixture}: full scan too");

    // the mark moves past the bad row; it is still followed by id, counted once
    for _ in 0..3 {
        let got = db
            .workflow_incremental(line, &STATES, &TASK_STATES, &mut cur)
            .await
            .unwrap();
        assert_eq!(wf_ids(&got), vec![a, z]);
    }
    assert!(cur.stats().low_water.unwrap() > bad);
    assert_eq!(db.rows_skipped(), vec![(table.to_string(), 2)]);
    assert!(matches!(
        db.workflow(line, bad, &TASK_STATES).await,
        Err(SqlError::Undecodable { id, .. }) if id == bad
    ));
    assert!(matches!(
        db.workflow(line, y, &TASK_STATES).await,
        Err(SqlError::Undecodable { id, .. }) if id == y
    ));

    // repaired: the incremental sweep sees both, although below the mark
    sim.exec(&format!(
        "UPDATE {table} SET start_time = '2024-01-01 00:00:00' WHERE id = {bad}"
    ))
    .await
    .unwrap();
    sim.exec(&format!(
        "UPDATE t_ds_task_instance SET end_time = '2024-01-01 00:00:00' WHERE id = {yt}"
    ))
    .await
    .unwrap();
    let got = db
        .workflow_incremental(line, &STATES, &TASK_STATES, &mut cur)
        .await
        .unwrap();
    assert_eq!(wf_ids(&got), vec![a, bad, z, y], "{fixture}");
    assert_eq!(cur.stats().undecodable, 0);
    let wy = got.iter().find(|w| w.id == y).unwrap();
    assert_eq!(wy.last_task_end, Some(instant("2024-01-01 00:00:00")));
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

tests! { recover:
    recover_master_lost_mysql_1_2_1: SimKind::MySql, "1.2.1";
    recover_master_lost_mysql_1_3_9: SimKind::MySql, "1.3.9";
    recover_master_lost_mysql_2_0_9: SimKind::MySql, "2.0.9";
    recover_master_lost_mysql_3_1_9: SimKind::MySql, "3.1.9";
    recover_master_lost_mysql_3_2_2: SimKind::MySql, "3.2.2";
    recover_master_lost_mysql_dev: SimKind::MySql, "dev";
    recover_master_lost_mysql_3_3_2: SimKind::MySql, "3.3.2";
    recover_master_lost_mysql_3_4_0: SimKind::MySql, "3.4.0";
    recover_master_lost_pg_1_2_1: SimKind::Postgres, "1.2.1";
    recover_master_lost_pg_1_3_9: SimKind::Postgres, "1.3.9";
    recover_master_lost_pg_2_0_9: SimKind::Postgres, "2.0.9";
    recover_master_lost_pg_3_1_9: SimKind::Postgres, "3.1.9";
    recover_master_lost_pg_3_2_2: SimKind::Postgres, "3.2.2";
    recover_master_lost_pg_dev: SimKind::Postgres, "dev";
    recover_master_lost_pg_3_3_2: SimKind::Postgres, "3.3.2";
    recover_master_lost_pg_3_4_0: SimKind::Postgres, "3.4.0";
}

tests! { reads:
    workflow_reads_mysql_1_3_9: SimKind::MySql, "1.3.9";
    workflow_reads_mysql_2_0_9: SimKind::MySql, "2.0.9";
    workflow_reads_mysql_3_2_2: SimKind::MySql, "3.2.2";
    workflow_reads_mysql_dev: SimKind::MySql, "dev";
    workflow_reads_pg_1_3_9: SimKind::Postgres, "1.3.9";
    workflow_reads_pg_3_1_9: SimKind::Postgres, "3.1.9";
    workflow_reads_pg_3_2_2: SimKind::Postgres, "3.2.2";
    workflow_reads_pg_3_4_0: SimKind::Postgres, "3.4.0";
}

tests! { undecodable:
    undecodable_workflow_row_mysql_3_2_2: SimKind::MySql, "3.2.2";
    undecodable_workflow_row_mysql_3_3_2: SimKind::MySql, "3.3.2";
    undecodable_workflow_row_pg_3_2_2: SimKind::Postgres, "3.2.2";
    undecodable_workflow_row_pg_3_3_2: SimKind::Postgres, "3.3.2";
}
