use super::*;
use crate::agent::{AgentReport, AgentSeen, AgentTask};
use crate::view::NodeInfo;
use crate::ViewState;
use chrono::TimeZone;

fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

const MIN: i64 = 60;

fn view() -> RegistryView {
    let mut v = RegistryView::invalid(t(0), "x");
    v.state = ViewState::Valid { since: t(0) };
    for w in ["w1:1234", "w2:1234"] {
        v.upsert(NodeKind::Worker, NodeInfo::new(w, t(0)));
    }
    v.upsert(NodeKind::Master, NodeInfo::new("m1:5678", t(0)));
    let mut busy = NodeInfo::new("m2:5678", t(0));
    busy.status = Some("BUSY".into());
    v.upsert(NodeKind::Master, busy);
    v
}

/// A flag = 1 row of workflow `wf` owned by `master`, submitted at `submit`.
fn row(id: i64, state: i32, wf: i64, master: &str, submit: i64) -> Candidate {
    let mut c = Candidate::new(id, "SHELL", state, None);
    c.workflow_instance_id = Some(wf);
    c.workflow_host = Some(master.into());
    c.worker_group = Some("default".into());
    c.submit_time = Some(t(submit));
    c.task_code = Some(1000 + id);
    c
}

fn settings() -> AnomalySettings {
    AnomalySettings::default()
}

fn run(
    v: &RegistryView,
    line: DsLine,
    cands: &[Candidate],
    rows: &AnomalyRows,
    wfs: &[WorkflowCandidate],
    now: i64,
) -> AnomalyReport {
    plan_anomalies(
        v,
        line,
        SweepRows {
            candidates: cands,
            rows,
            workflows: wfs,
            candidate_states: &line.default_live_states(),
        },
        t(now),
        &settings(),
    )
}

fn others(rows: Vec<Candidate>) -> AnomalyRows {
    AnomalyRows {
        others: rows,
        serial: None,
    }
}

fn of(r: &AnomalyReport, kind: AnomalyKind) -> Vec<&Anomaly> {
    r.anomalies.iter().filter(|a| a.kind == kind).collect()
}

#[test]
fn queued_states_are_those_the_line_has() {
    assert_eq!(queued_states(DsLine::V1_3), vec![0]);
    assert_eq!(queued_states(DsLine::V2_0), vec![0, 12]);
    assert_eq!(queued_states(DsLine::V3_2), vec![0, 17, 12]);
    assert_eq!(queued_states(DsLine::V3_3), vec![0, 17, 12]);
}

#[test]
fn dispatch_stalled_is_one_finding_per_worker_group_with_the_oldest_task() {
    let v = view();
    let mut rows = vec![
        row(1, 0, 10, "m1:5678", 0),
        row(2, 0, 11, "m1:5678", -600),
        row(3, 12, 12, "m2:5678", 100),
    ];
    let mut other = row(4, 0, 13, "m1:5678", -900);
    other.worker_group = Some("gpu".into());
    rows.push(other);
    // DISPATCH is a candidate state on 3.2: it arrives with the candidates
    let dispatch = row(5, 17, 14, "m1:5678", 50);
    let r = run(
        &v,
        DsLine::V3_2,
        &[dispatch],
        &others(rows),
        &[],
        31 * MIN + 100,
    );
    let found = of(&r, AnomalyKind::DispatchStalled);
    assert_eq!(found.len(), 2, "{found:#?}");
    let default = found
        .iter()
        .find(|a| a.worker_group.as_deref() == Some("default"))
        .unwrap();
    assert_eq!(default.count, 4);
    assert_eq!(default.task_ids, vec![2, 1, 5, 3], "oldest first");
    assert_eq!(default.since, Some(t(-600)));
    assert_eq!(default.evidence.oldest_task_id, Some(2));
    assert_eq!(default.evidence.oldest_workflow_instance_id, Some(11));
    assert_eq!(default.owner_master.as_deref(), Some("m1:5678"));
    assert_eq!(default.evidence.by_state["SUBMITTED_SUCCESS"], 2);
    assert_eq!(default.evidence.by_state["DISPATCH"], 1);
    assert_eq!(default.evidence.by_state["DELAY_EXECUTION"], 1);
    assert_eq!(default.evidence.busy_masters, vec!["m2:5678".to_string()]);
    assert_eq!(
        default.evidence.master_status.get("m1:5678"),
        Some(&None),
        "a master whose heartbeat carries no status"
    );
    let gpu = found
        .iter()
        .find(|a| a.worker_group.as_deref() == Some("gpu"))
        .unwrap();
    assert_eq!((gpu.count, gpu.task_ids.clone()), (1, vec![4]));
    assert!(gpu.evidence.busy_masters.is_empty());
}

#[test]
fn a_fresh_submitted_row_is_no_finding() {
    let v = view();
    let rows = others(vec![row(1, 0, 10, "m1:5678", 0)]);
    let r = run(&v, DsLine::V3_3, &[], &rows, &[], 30 * MIN - 1);
    assert!(r.anomalies.is_empty(), "{r:#?}");
    let r = run(&v, DsLine::V3_3, &[], &rows, &[], 30 * MIN);
    assert_eq!(of(&r, AnomalyKind::DispatchStalled).len(), 1);
}

#[test]
fn dispatch_stalled_needs_a_live_owning_master_and_a_submit_time() {
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(10));
    let mut no_submit = row(2, 0, 11, "m2:5678", 0);
    no_submit.submit_time = None;
    no_submit.start_time = Some(t(0));
    let rows = others(vec![
        row(1, 0, 10, "m1:5678", 0), // master lost: a zombie matter, not this
        row(3, 0, 12, "NULL", 0),    // DS's failover holds it
        no_submit,                   // counted from submit_time only
        row(4, 1, 13, "m2:5678", 0), // running: not queued
    ]);
    let r = run(&v, DsLine::V3_2, &[], &rows, &[], 10_000);
    assert!(of(&r, AnomalyKind::DispatchStalled).is_empty(), "{r:#?}");
}

#[test]
fn nothing_is_judged_against_an_invalid_view_but_ages_are_still_measured() {
    let v = RegistryView::invalid(t(0), "expired");
    let rows = others(vec![row(1, 0, 10, "m1:5678", 0)]);
    let r = run(&v, DsLine::V3_2, &[], &rows, &[], 10_000);
    assert!(r.anomalies.is_empty());
    assert_eq!(r.oldest_live_seconds["SUBMITTED_SUCCESS"], 10_000);
}

#[test]
fn oldest_live_seconds_lists_every_watched_state_of_the_line() {
    let v = view();
    let mut running = row(7, 1, 10, "m1:5678", -50);
    running.submit_time = None;
    running.start_time = Some(t(-50));
    let rows = others(vec![
        row(1, 0, 10, "m1:5678", 0),
        row(2, 0, 10, "m1:5678", -20),
    ]);
    let r = run(&v, DsLine::V3_2, &[running], &rows, &[], 100);
    let want: BTreeMap<String, i64> = [
        ("SUBMITTED_SUCCESS", 120),
        ("DISPATCH", 0),
        ("DELAY_EXECUTION", 0),
        ("RUNNING_EXECUTION", 150),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(r.oldest_live_seconds, want);
    // 1.3 has neither DISPATCH nor DELAY_EXECUTION
    let r = run(&v, DsLine::V1_3, &[], &AnomalyRows::default(), &[], 100);
    assert_eq!(
        r.oldest_live_seconds.keys().cloned().collect::<Vec<_>>(),
        vec![
            "RUNNING_EXECUTION".to_string(),
            "SUBMITTED_SUCCESS".to_string()
        ]
    );
}

fn stopping(id: i64, state: i32, host: &str, progress: i64) -> WorkflowCandidate {
    let mut w = WorkflowCandidate::new(id, state, Some(host));
    w.start_time = Some(t(progress - 1000));
    w.last_task_end = Some(t(progress));
    w.tasks_by_state.insert(1, 1);
    w
}

#[test]
fn workflow_stop_stuck_after_the_stall_since_last_progress_under_a_live_master() {
    let v = view();
    let wfs = [
        stopping(1, 4, "m1:5678", 0),
        stopping(2, 2, "m2:5678", 0),
        stopping(3, 1, "m1:5678", 0), // RUNNING: workflow_stalled's business
        stopping(4, 4, "gone:5678", 0),
        stopping(5, 4, "NULL", 0),
    ];
    let r = run(
        &v,
        DsLine::V3_3,
        &[],
        &AnomalyRows::default(),
        &wfs,
        30 * MIN - 1,
    );
    assert!(r.anomalies.is_empty());
    let r = run(
        &v,
        DsLine::V3_3,
        &[],
        &AnomalyRows::default(),
        &wfs,
        30 * MIN,
    );
    let found = of(&r, AnomalyKind::WorkflowStopStuck);
    let ids: Vec<_> = found.iter().map(|a| a.workflow_instance_id).collect();
    assert_eq!(ids, vec![Some(1), Some(2)]);
    assert_eq!(found[0].since, Some(t(0)));
    assert_eq!(
        found[0].evidence.workflow_state.as_deref(),
        Some("READY_STOP")
    );
    assert_eq!(
        found[1].evidence.workflow_state.as_deref(),
        Some("READY_PAUSE")
    );
    assert_eq!(found[0].evidence.by_state["RUNNING_EXECUTION"], 1);
    assert_eq!(found[0].owner_master.as_deref(), Some("m1:5678"));
}

fn serial(wf: i64, since: i64, running: i64) -> SerialWait {
    SerialWait {
        workflow_instance_id: wf,
        serial_command_id: wf + 100,
        definition_code: 77,
        workflow_host: None,
        waiting_since: Some(t(since)),
        running,
    }
}

#[test]
fn serial_wait_stuck_only_while_no_predecessor_runs_and_only_where_the_table_is() {
    let v = view();
    let rows = AnomalyRows {
        others: Vec::new(),
        serial: Some(vec![serial(1, 0, 0), serial(2, 0, 1), serial(3, 100, 0)]),
    };
    let r = run(&v, DsLine::V3_3, &[], &rows, &[], 30 * MIN + 50);
    let found = of(&r, AnomalyKind::SerialWaitStuck);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].workflow_instance_id, Some(1));
    assert_eq!(found[0].evidence.serial_command_id, Some(101));
    assert_eq!(found[0].evidence.running_instances, Some(0));
    assert_eq!(found[0].since, Some(t(0)));
    // no table (before 3.4): nothing to judge
    let none = AnomalyRows::default();
    assert!(run(&v, DsLine::V3_3, &[], &none, &[], 100_000)
        .anomalies
        .is_empty());
}

#[test]
fn two_live_rows_of_one_task_in_one_workflow_are_a_duplicate_attempt() {
    let v = view();
    let mut a = row(1, 1, 10, "m1:5678", 0);
    a.host = Some("w1:1234".into());
    let mut b = row(2, 17, 10, "m1:5678", 300);
    b.host = Some("w2:1234".into());
    b.task_code = a.task_code;
    // the same task code in another workflow instance is another run
    let mut c = row(3, 1, 11, "m1:5678", 0);
    c.task_code = a.task_code;
    let r = run(&v, DsLine::V3_2, &[a, c], &others(vec![b]), &[], 400);
    let found = of(&r, AnomalyKind::DuplicateAttempt);
    assert_eq!(found.len(), 1, "{found:#?}");
    let d = found[0];
    assert_eq!(d.workflow_instance_id, Some(10));
    assert_eq!(d.task_ids, vec![1, 2]);
    assert_eq!(d.count, 2);
    assert_eq!(d.since, Some(t(300)), "when the second attempt appeared");
    assert_eq!(d.evidence.hosts, vec!["w1:1234", "w2:1234"]);
    assert_eq!(d.evidence.task.as_deref(), Some("1001"));
    assert_eq!(d.evidence.seen_in.as_deref(), Some("rows"));
}

#[test]
fn a_row_read_twice_is_no_duplicate_and_distinct_tasks_are_none() {
    let v = view();
    let a = row(1, 1, 10, "m1:5678", 0);
    let b = row(2, 1, 10, "m1:5678", 0); // another task code
    let r = run(
        &v,
        DsLine::V3_2,
        &[a.clone(), b],
        &others(vec![a]),
        &[],
        400,
    );
    assert!(of(&r, AnomalyKind::DuplicateAttempt).is_empty(), "{r:#?}");
}

#[test]
fn on_1x_the_task_is_known_by_its_name() {
    let v = view();
    let mut a = row(1, 1, 10, "m1:5678", 0);
    let mut b = row(2, 0, 10, "m1:5678", 5);
    for c in [&mut a, &mut b] {
        c.task_code = None;
        c.name = "extract".into();
    }
    let r = run(
        &v,
        DsLine::V1_3,
        &[a.clone()],
        &others(vec![b.clone()]),
        &[],
        400,
    );
    assert_eq!(of(&r, AnomalyKind::DuplicateAttempt).len(), 1);
    // 2.0+ without a code is not guessed from names
    let r = run(&v, DsLine::V3_2, &[a], &others(vec![b]), &[], 400);
    assert!(of(&r, AnomalyKind::DuplicateAttempt).is_empty());
}

fn agent(worker: &str, tasks: &[(i64, i64)], at: i64) -> AgentSeen {
    let report = AgentReport {
        tty_tasks: 0,
        app_id_sources: None,
        worker: worker.into(),
        agent_version: "t".into(),
        seq: 1,
        scan_started_at: t(at).timestamp_millis(),
        scan_ms: 1,
        exec_base: "/tmp/ds".into(),
        unreadable: 0,
        blind: None,
        tasks: tasks
            .iter()
            .map(|(id, wf)| AgentTask {
                lineage: None,
                task_id: *id,
                workflow_instance_id: *wf,
                pids: vec![100],
                started_at: 0,
                processes: Vec::new(),
                app_ids: Vec::new(),
            })
            .collect(),
        orders: Vec::new(),
    };
    AgentSeen::received(None, Some(report), t(at), false, Duration::from_secs(35))
}

#[test]
fn one_task_listed_by_the_agents_of_two_workers_is_a_duplicate_attempt() {
    let mut v = view();
    v.agents.insert(
        "w1:1234".into(),
        agent("w1:1234", &[(5, 10), (6, 10)], 100).into(),
    );
    v.agents
        .insert("w2:1234".into(), agent("w2:1234", &[(5, 10)], 110).into());
    let r = run(
        &v,
        DsLine::V3_3,
        &[row(5, 1, 10, "m1:5678", 0)],
        &AnomalyRows::default(),
        &[],
        120,
    );
    let found = of(&r, AnomalyKind::DuplicateAttempt);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].task_ids, vec![5]);
    assert_eq!(found[0].count, 2);
    assert_eq!(found[0].evidence.hosts, vec!["w1:1234", "w2:1234"]);
    assert_eq!(found[0].evidence.seen_in.as_deref(), Some("agents"));
    assert_eq!(found[0].owner_master.as_deref(), Some("m1:5678"));
    // a stale agent's listing does not count
    let r = run(
        &v,
        DsLine::V3_3,
        &[],
        &AnomalyRows::default(),
        &[],
        100 + 36,
    );
    assert!(of(&r, AnomalyKind::DuplicateAttempt).is_empty());
}

#[test]
fn keys_tell_findings_apart_across_sweeps() {
    let v = view();
    let rows = others(vec![
        row(1, 0, 10, "m1:5678", 0),
        row(2, 0, 11, "m1:5678", 5),
    ]);
    let a = run(&v, DsLine::V3_2, &[], &rows, &[], 10_000);
    let b = run(&v, DsLine::V3_2, &[], &rows, &[], 20_000);
    assert_eq!(a.anomalies[0].key(), b.anomalies[0].key());
    assert_eq!(a.anomalies[0].key(), "dispatch_stalled:default");
}

#[test]
fn findings_serialise_with_the_spec_fields() {
    let v = view();
    let rows = others(vec![row(1, 0, 10, "m2:5678", 0)]);
    let r = run(&v, DsLine::V3_2, &[], &rows, &[], 10_000);
    let j = serde_json::to_value(&r.anomalies[0]).unwrap();
    for k in [
        "kind",
        "workflow_instance_id",
        "task_ids",
        "count",
        "worker_group",
        "since",
        "evidence",
        "owner_master",
    ] {
        assert!(j.get(k).is_some(), "{k} missing in {j}");
    }
    assert_eq!(j["kind"], "dispatch_stalled");
    assert_eq!(j["evidence"]["busy_masters"][0], "m2:5678");
    assert_eq!(j["evidence"]["master_status"]["m2:5678"], "BUSY");
}
