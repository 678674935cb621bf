//! SPEC §13, a parent never ends before its child: the hold of a parent
//! whose child workflow runs is in the audit trail, not only in the API
//! (tests/real-ds `zombie-subprocess` reads it from there).

use super::*;
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::config::VersionSetting;
use crate::testkit::{MemRegistry, MemStore, Switch, TokioClock};
use chrono::TimeZone;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{Action, Candidate, FollowUp, NodeKind};
use std::time::Duration;

fn t0() -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_hold_of_a_parent_whose_child_runs_is_in_the_audit() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Settings::default();
    s.dolphinscheduler.version = VersionSetting::Line(DsLine::V3_1);
    s.audit.path = dir.path().join("audit.jsonl");
    s.policy.master_lost = Action::FaultTolerance;
    s.policy.workflow = FollowUp::Recover;
    s.policy.workflow_master_lost = crate::config::WorkflowAction::Recover;
    s.reconcile.grace_period = Duration::from_secs(15);
    s.reconcile.workflow_grace_period = Duration::from_secs(20);
    s.reconcile.startup_settle = Duration::ZERO;
    let store = MemStore::new(DsLine::V3_1);
    let reg = MemRegistry::new(t0(), &["w1:1234"], &["m1:5678"]);
    let ports = Ports {
        store: store.clone(),
        registry: reg.clone(),
        leader: Some(Switch::new(true, "other:1")),
        clock: TokioClock::new(t0()),
        rm: None,
    };
    let e: SharedEngine = Arc::new(Engine::new(s, ports, crate::metrics::Metrics::new()));
    // parent 7's SUB_PROCESS task 1 runs in m1; its child 8 is RUNNING
    let mut sub = Candidate::new(1, "SUB_PROCESS", 1, Some("m1:5678"));
    sub.submit_time = Some(t0() - chrono::TimeDelta::seconds(600));
    sub.workflow_instance_id = Some(7);
    sub.workflow_host = Some("m1:5678".into());
    sub.child_workflow_state = Some(1);
    store.insert(sub);
    let mut parent = WorkflowCandidate::new(7, 1, Some("m1:5678"));
    parent.start_time = Some(t0() - chrono::TimeDelta::seconds(600));
    parent.running_children.insert(8, 1);
    store.insert_workflow(parent);
    reg.update(|v| assert!(v.remove(NodeKind::Master, "m1:5678", t0())));
    tokio::time::advance(Duration::from_secs(30)).await;
    let summary = e.sweep(Trigger::Tick).await;
    assert_eq!(summary.actions, 0, "{summary:?}");
    assert_eq!(store.state(1), Some(1), "the SUB_PROCESS row is left live");
    let recs: Vec<Record> = e.audit.tail(crate::audit::TAIL).unwrap();
    let detected = |kind: RecordKind, id: i64| {
        recs.iter()
            .find(|r| {
                r.event == AuditEvent::Detected
                    && r.kind == Some(kind)
                    && match kind {
                        RecordKind::Workflow => r.workflow_instance_id == Some(id),
                        _ => r.task_id == Some(id),
                    }
            })
            .unwrap_or_else(|| panic!("no detected record for {kind:?} {id}: {recs:#?}"))
    };
    for r in [
        detected(RecordKind::Task, 1),
        detected(RecordKind::Workflow, 7),
    ] {
        assert!(
            r.detail
                .as_deref()
                .is_some_and(|d| d.contains(reaper_core::plan::CHILD_WORKFLOW_RUNNING)),
            "the hold is not in the record: {r:#?}"
        );
    }
    assert_eq!(
        detected(RecordKind::Workflow, 7).action.as_deref(),
        Some("report")
    );
}
