use super::*;
use crate::plan::Blocked;
use crate::view::NodeInfo;
use crate::{TokenBucket, ViewState};
use chrono::TimeZone;

fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

fn view() -> RegistryView {
    let mut v = RegistryView::invalid(t(0), "x");
    v.state = ViewState::Valid { since: t(0) };
    for w in ["w1:1234", "w2:1234"] {
        v.upsert(NodeKind::Worker, NodeInfo::new(w, t(0)));
    }
    v.upsert(NodeKind::Master, NodeInfo::new("m1:5678", t(0)));
    v.upsert(NodeKind::Master, NodeInfo::new("m2:5678", t(0)));
    v
}

fn wf(id: i64, host: Option<&str>) -> WorkflowCandidate {
    let mut w = WorkflowCandidate::new(id, 1, host);
    w.start_time = Some(t(-10_000));
    w
}

fn recovering() -> WorkflowPolicy {
    WorkflowPolicy {
        master_lost: WorkflowAction::Recover,
        grace_period: Duration::from_secs(900),
        stall_after: Duration::from_secs(1800),
        ..WorkflowPolicy::default()
    }
}

fn budget(settle: Duration) -> Budget {
    Budget::new(50, settle, Some(TokenBucket::full(120, t(0))))
}

fn run(
    v: &RegistryView,
    w: &[WorkflowCandidate],
    now: i64,
    p: &WorkflowPolicy,
) -> Vec<WorkflowFinding> {
    plan_workflows(v, w, t(now), DsLine::V3_2, p, &mut budget(Duration::ZERO))
}

#[test]
fn master_lost_after_the_workflow_grace_from_the_loss() {
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(100));
    let w = [wf(1, Some("m1:5678"))];
    assert!(run(&v, &w, 999, &recovering()).is_empty());
    let f = run(&v, &w, 1000, &recovering());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].reason, WorkflowReason::WorkflowMasterLost);
    assert_eq!(f[0].action, WorkflowAction::Recover);
    assert_eq!(f[0].disposition, Disposition::Act);
    assert_eq!(f[0].evidence.lost_at, Some(t(100)));
    assert!(!f[0].owner_master_alive);
}

#[test]
fn a_never_seen_master_counts_from_the_later_of_validity_and_restart() {
    let v = view();
    let mut w = wf(1, Some("gone:5678"));
    w.restart_time = Some(t(500));
    assert!(run(&v, std::slice::from_ref(&w), 1399, &recovering()).is_empty());
    assert_eq!(run(&v, &[w], 1400, &recovering()).len(), 1);
}

#[test]
fn a_workflow_in_ds_failover_hands_or_under_a_live_master_is_never_master_lost() {
    let v = view();
    for host in [None, Some("NULL"), Some(""), Some("null")] {
        assert!(
            run(&v, &[wf(1, host)], 100_000, &recovering()).is_empty(),
            "{host:?}"
        );
    }
    let mut busy = wf(2, Some("m1:5678"));
    busy.tasks_by_state.insert(1, 1);
    assert!(run(&v, &[busy], 100_000, &recovering()).is_empty());
}

#[test]
fn stalled_only_with_no_live_task_and_old_progress_and_always_report() {
    let v = view();
    let mut w = wf(1, Some("m1:5678"));
    w.last_task_end = Some(t(0));
    let p = recovering();
    assert!(run(&v, std::slice::from_ref(&w), 1799, &p).is_empty());
    let f = run(&v, std::slice::from_ref(&w), 1800, &p);
    assert_eq!(f[0].reason, WorkflowReason::WorkflowStalled);
    assert_eq!(f[0].action, WorkflowAction::Report, "report-only");
    assert_eq!(f[0].disposition, Disposition::Report);
    assert_eq!(f[0].evidence.last_progress_at, Some(t(0)));
    // a rule asking to recover it changes nothing
    let mut p2 = recovering();
    p2.rules.push(WorkflowRule {
        reason: Some(WorkflowReason::WorkflowStalled),
        action: Some(WorkflowAction::Recover),
        ..WorkflowRule::default()
    });
    assert_eq!(
        run(&v, std::slice::from_ref(&w), 1800, &p2)[0].action,
        WorkflowAction::Report
    );
    // a task still in a non-terminal state: progressing as far as we know
    w.tasks_by_state.insert(8, 1);
    assert!(run(&v, &[w], 100_000, &p).is_empty());
}

#[test]
fn recover_is_downgraded_while_a_task_runs_on_a_live_worker() {
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(0));
    let mut w = wf(1, Some("m1:5678"));
    w.live_task_hosts = vec!["gone:1234".into(), "w2:1234".into()];
    let f = run(&v, std::slice::from_ref(&w), 5000, &recovering());
    assert_eq!(f[0].action, WorkflowAction::Report);
    assert!(f[0].note.as_deref().unwrap().contains("w2:1234"));
    w.live_task_hosts = vec!["gone:1234".into()];
    assert_eq!(
        run(&v, &[w], 5000, &recovering())[0].action,
        WorkflowAction::Recover
    );
}

#[test]
fn rules_and_the_shared_budget() {
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(0));
    let mut a = wf(1, Some("m1:5678"));
    a.project_code = Some(7);
    let b = wf(2, Some("m1:5678"));
    let mut p = recovering();
    p.rules.push(WorkflowRule {
        project_code: Some(7),
        action: Some(WorkflowAction::Report),
        ..WorkflowRule::default()
    });
    let f = run(&v, &[a, b.clone()], 5000, &p);
    assert_eq!(f[0].action, WorkflowAction::Report);
    assert_eq!(f[1].action, WorkflowAction::Recover);
    // the task plan used the sweep's budget: blocked
    let judge = |budget: &mut Budget| {
        plan_workflows(
            &v,
            std::slice::from_ref(&b),
            t(5000),
            DsLine::V3_2,
            &recovering(),
            budget,
        )[0]
        .disposition
        .clone()
    };
    let mut used = budget(Duration::ZERO);
    used.cap = 3;
    used.taken = 3;
    assert_eq!(judge(&mut used), Disposition::Blocked(Blocked::SweepCap));
    // an empty bucket, a hold, a brake, settling
    let mut empty = budget(Duration::ZERO);
    empty.bucket = Some(TokenBucket::full(0, t(0)));
    assert_eq!(judge(&mut empty), Disposition::Blocked(Blocked::RateLimit));
    let mut held = budget(Duration::ZERO).held(Some("not the leader".into()));
    assert!(matches!(
        judge(&mut held),
        Disposition::Blocked(Blocked::Hold(_))
    ));
    let mut braked = budget(Duration::ZERO);
    braked.set_brake(&crate::BrakeState {
        engaged_since: Some(t(0)),
        why: Some("lost".into()),
        clear_since: None,
        ..Default::default()
    });
    assert_eq!(
        judge(&mut braked),
        Disposition::Blocked(Blocked::Brake("lost".into()))
    );
    assert_eq!(
        judge(&mut budget(Duration::from_secs(9000))),
        Disposition::Blocked(Blocked::Settling)
    );
    let mut open = budget(Duration::ZERO);
    assert_eq!(judge(&mut open), Disposition::Act);
    assert_eq!(
        open.taken, 1,
        "the admitted write counts in the sweep's budget"
    );
    // an invalid view judges nothing
    let mut inv = v.clone();
    inv.state = ViewState::Invalid {
        since: t(0),
        reason: "x".into(),
    };
    assert!(run(&inv, &[b], 5000, &recovering()).is_empty());
}

#[test]
fn watched_state_names_map_to_non_terminal_codes_of_the_line() {
    assert_eq!(
        workflow_state_code(DsLine::V3_2, "RUNNING_EXECUTION"),
        Some(1)
    );
    assert_eq!(
        workflow_state_code(DsLine::V1_2, "running_exeution"),
        Some(1)
    );
    assert_eq!(workflow_state_code(DsLine::V3_3, "READY_STOP"), Some(4));
    assert_eq!(
        workflow_state_code(DsLine::V3_2, "SUCCESS"),
        None,
        "terminal"
    );
    assert_eq!(
        workflow_state_code(DsLine::V3_3, "DELAY_EXECUTION"),
        None,
        "removed in 3.3"
    );
    assert_eq!(workflow_state_code(DsLine::V3_2, "BOGUS"), None);
}

#[test]
fn check_counts_a_never_seen_master_as_lost_for_an_unknown_time() {
    let v = view();
    let mut p = recovering();
    p.unseen_absence = crate::UnseenAbsence::Unknown;
    let f = run(&v, &[wf(1, Some("gone:5678"))], 1, &p);
    assert_eq!(f[0].reason, WorkflowReason::WorkflowMasterLost);
    assert_eq!(f[0].evidence.absent_for_seconds, None);
}

fn run_on(
    v: &RegistryView,
    w: &[WorkflowCandidate],
    now: i64,
    line: DsLine,
    settle: Duration,
) -> Vec<WorkflowFinding> {
    plan_workflows(v, w, t(now), line, &recovering(), &mut budget(settle))
}

#[test]
fn recover_only_for_the_workflow_states_the_lines_own_failover_handles() {
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(0));
    let cases = [
        (DsLine::V1_3, 0, true),
        (DsLine::V1_3, 12, false),
        (DsLine::V2_0, 12, true),
        (DsLine::V3_0, 17, true),
        (DsLine::V3_1, 17, false),
        (DsLine::V3_2, 14, false),
        (DsLine::V3_2, 15, false),
        (DsLine::V3_2, 4, true),
        (DsLine::V3_3, 0, false),
        (DsLine::V3_3, 2, true),
    ];
    for (line, state, recovers) in cases {
        let mut w = wf(1, Some("m1:5678"));
        w.state = state;
        let f = run_on(&v, &[w], 1000, line, Duration::ZERO);
        assert_eq!(f.len(), 1, "{line} {state}");
        assert_eq!(f[0].reason, WorkflowReason::WorkflowMasterLost);
        if recovers {
            assert_eq!(f[0].action, WorkflowAction::Recover, "{line} {state}");
            assert_eq!(f[0].disposition, Disposition::Act);
            assert_eq!(f[0].note, None);
        } else {
            assert_eq!(f[0].action, WorkflowAction::Report, "{line} {state}");
            assert_eq!(f[0].disposition, Disposition::Report);
            let note = f[0].note.as_deref().unwrap_or_default();
            assert!(
                note.contains("not one DS's own master failover handles"),
                "{line} {state}: {note}"
            );
        }
    }
}

#[test]
fn no_recover_while_ds_fails_the_owning_master_over_on_1_3_to_3_2() {
    let settle = Duration::from_secs(30);
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(0));
    v.observe_failover_lock("m1:5678", 1, t(900));
    let w = [wf(1, Some("m1:5678"))];
    for line in [
        DsLine::V1_3,
        DsLine::V2_0,
        DsLine::V3_0,
        DsLine::V3_1,
        DsLine::V3_2,
    ] {
        let f = run_on(&v, &w, 1000, line, settle);
        assert_eq!(f[0].action, WorkflowAction::Report, "{line}");
        assert_eq!(f[0].disposition, Disposition::Report, "{line}");
        assert_eq!(
            f[0].note.as_deref(),
            Some("ds_failover_in_progress"),
            "{line}"
        );
    }
    // 3.3's own update is conditional: no guard needed
    let f = run_on(&v, &w, 1000, DsLine::V3_3, settle);
    assert_eq!(f[0].action, WorkflowAction::Recover);
    // another master's failover does not hold this one back
    let other = [wf(2, Some("m9:5678"))];
    let f = run_on(&v, &other, 1000, DsLine::V3_2, settle);
    assert_eq!(f[0].action, WorkflowAction::Recover);
    // released: held back for startup_settle more, then recovered
    v.observe_failover_lock("m1:5678", 0, t(1000));
    let f = run_on(&v, &w, 1029, DsLine::V3_2, settle);
    assert_eq!(f[0].note.as_deref(), Some("ds_failover_in_progress"));
    let f = run_on(&v, &w, 1030, DsLine::V3_2, settle);
    assert_eq!(f[0].action, WorkflowAction::Recover);
    assert_eq!(f[0].disposition, Disposition::Act);
}

#[test]
fn a_stopping_workflow_under_a_live_master_is_not_stalled_but_an_anomaly() {
    let v = view();
    let mut stopping = wf(1, Some("m1:5678"));
    stopping.state = 4;
    let mut pausing = wf(2, Some("m1:5678"));
    pausing.state = 2;
    let running = wf(3, Some("m1:5678"));
    let f = run(&v, &[stopping, pausing, running], 100_000, &recovering());
    let ids: Vec<i64> = f.iter().map(|f| f.workflow.id).collect();
    assert_eq!(ids, vec![3], "only RUNNING_EXECUTION is workflow_stalled");
    // under a lost master READY_STOP stays workflow_master_lost
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(0));
    let mut stopping = wf(1, Some("m1:5678"));
    stopping.state = 4;
    let f = run(&v, &[stopping], 100_000, &recovering());
    assert_eq!(f[0].reason, WorkflowReason::WorkflowMasterLost);
}

mod parent_and_resume;
