//! SPEC §13: a parent never ends before its child; a follow-up survives a
//! change of leader.

use super::*;
use crate::policy::{Action, FollowUp, Policy, Rule};
use crate::reason::Reason;

fn lost_at_100() -> RegistryView {
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(100));
    v
}

#[test]
fn recover_waits_while_a_child_workflow_runs_and_the_child_is_judged_on_its_own() {
    let v = lost_at_100();
    let mut parent = wf(1, Some("m1:5678"));
    parent.running_children.insert(2, 1);
    let child = wf(2, Some("m1:5678"));
    let f = run(&v, &[parent.clone(), child], 1000, &recovering());
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].reason, WorkflowReason::WorkflowMasterLost);
    assert_eq!(f[0].action, WorkflowAction::Report);
    assert_eq!(f[0].disposition, Disposition::Report);
    assert_eq!(f[0].note.as_deref(), Some("child_workflow_running"));
    assert_eq!(f[1].workflow.id, 2);
    assert_eq!(f[1].action, WorkflowAction::Recover, "the child on its own");
    assert_eq!(f[1].disposition, Disposition::Act);
    // the child ended: the parent is recovered
    parent.running_children.clear();
    let f = run(&v, &[parent], 1000, &recovering());
    assert_eq!(f[0].action, WorkflowAction::Recover);
    assert_eq!(f[0].note, None);
}

fn resuming(targets: &[i32]) -> WorkflowPolicy {
    WorkflowPolicy {
        resume: Resume {
            targets: targets.iter().copied().collect(),
            grace_period: Duration::from_secs(60),
        },
        ..recovering()
    }
}

/// A workflow whose lost master's tasks show `state` and no command queued.
fn written(state: i32) -> WorkflowCandidate {
    let mut w = wf(1, Some("m1:5678"));
    if DsLine::is_finished_task_state(state) {
        w.ended_by_state.insert(state, 1);
    } else {
        w.tasks_by_state.insert(state, 1);
    }
    w.command_queued = Some(false);
    w
}

#[test]
fn a_follow_up_left_undone_is_recovered_after_the_task_grace_period() {
    let v = lost_at_100();
    for (target, p) in [
        (8, resuming(&[8])),
        (6, resuming(&[6])),
        (9, resuming(&[6, 9])),
    ] {
        let w = [written(target)];
        assert!(run(&v, &w, 159, &p).is_empty(), "{target}");
        let f = run(&v, &w, 160, &p);
        assert_eq!(f.len(), 1, "{target}");
        assert_eq!(f[0].reason, WorkflowReason::WorkflowMasterLost);
        assert_eq!(f[0].action, WorkflowAction::Recover);
        assert_eq!(f[0].disposition, Disposition::Act);
        assert_eq!(f[0].evidence.resumed_tasks, Some(1));
    }
}

#[test]
fn otherwise_the_workflow_grace_period_stands() {
    let v = lost_at_100();
    let waits = |w: WorkflowCandidate, p: &WorkflowPolicy, why: &str| {
        let w = [w];
        assert!(run(&v, &w, 160, p).is_empty(), "{why}");
        let f = run(&v, &w, 1000, p);
        assert_eq!(f.len(), 1, "{why}");
        assert_eq!(f[0].evidence.resumed_tasks, None, "{why}");
    };
    waits(
        written(8),
        &recovering(),
        "no task action is followed by recover",
    );
    waits(
        written(6),
        &resuming(&[8]),
        "FAILURE is not what the policy writes",
    );
    let mut queued = written(8);
    queued.command_queued = Some(true);
    waits(queued, &resuming(&[8]), "a command is queued");
    let mut unread = written(8);
    unread.command_queued = None;
    waits(unread, &resuming(&[8]), "the queue was not read");
    let mut running = written(8);
    running.tasks_by_state.insert(1, 1);
    waits(
        running,
        &resuming(&[8]),
        "a task still runs: the task rules' own",
    );
    let mut submitted = written(6);
    submitted.tasks_by_state.insert(0, 1);
    waits(submitted, &resuming(&[6]), "a task waits to be dispatched");
    let mut none = wf(1, Some("m1:5678"));
    none.command_queued = Some(false);
    waits(none, &resuming(&[6, 8, 9]), "no task was written");
}

#[test]
fn a_resumed_recover_still_waits_for_a_running_child() {
    let v = lost_at_100();
    let mut w = written(8);
    w.running_children.insert(2, 1);
    let f = run(&v, &[w], 160, &resuming(&[8]));
    assert_eq!(f[0].action, WorkflowAction::Report);
    assert_eq!(f[0].note.as_deref(), Some("child_workflow_running"));
}

#[test]
fn the_targets_are_the_task_actions_followed_by_recover() {
    let mut p = Policy::defaults(DsLine::V3_1);
    assert!(resume_targets(&p).is_empty(), "report everything");
    p.master_lost = Action::FaultTolerance;
    assert!(resume_targets(&p).is_empty(), "follow-up none");
    p.workflow = FollowUp::Recover;
    assert_eq!(resume_targets(&p), [8].into());
    p.workflow = FollowUp::None;
    p.rules.push(Rule {
        task_type: Some("SHELL".into()),
        action: Some(Action::Kill),
        workflow: Some(FollowUp::Recover),
        ..Rule::default()
    });
    p.rules.push(Rule {
        reason: Some(Reason::WorkerLost),
        workflow: Some(FollowUp::Recover),
        ..Rule::default()
    });
    assert_eq!(resume_targets(&p), [9].into(), "worker_lost reports");
    p.worker_lost = Action::Fail;
    assert_eq!(resume_targets(&p), [6, 9].into());
    // a rule without reason or action takes any reason's default
    p.rules.push(Rule {
        project_code: Some(1),
        workflow: Some(FollowUp::Recover),
        ..Rule::default()
    });
    assert_eq!(resume_targets(&p), [6, 8, 9].into());
}
