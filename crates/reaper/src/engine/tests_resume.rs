//! SPEC §13, a follow-up survives a change of leader: a leader that dies
//! between its task write and its workflow follow-up leaves the recover to
//! the next leader after `grace_period`, not `workflow_grace_period`.

use super::*;
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::config::VersionSetting;
use crate::testkit::{MemRegistry, MemStore, StoreCall, Switch, TokioClock};
use chrono::TimeZone;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{Action, Candidate, FollowUp, NodeKind};
use std::time::Duration;

fn t0() -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap()
}

/// One replica: fault-tolerance for lost workers followed by `recover`,
/// `workflow_master_lost` = recover, a 60 s grace and a 900 s workflow grace.
fn replica(
    store: &Arc<MemStore>,
    reg: &Arc<MemRegistry>,
    leader: &Arc<Switch>,
    dir: &std::path::Path,
) -> SharedEngine {
    let mut s = Settings::default();
    s.dolphinscheduler.version = VersionSetting::Line(DsLine::V3_2);
    s.audit.path = dir.join("audit.jsonl");
    s.policy.worker_lost = Action::FaultTolerance;
    s.policy.workflow = FollowUp::Recover;
    s.policy.workflow_master_lost = crate::config::WorkflowAction::Recover;
    s.reconcile.grace_period = Duration::from_secs(60);
    s.reconcile.workflow_grace_period = Duration::from_secs(900);
    s.reconcile.startup_settle = Duration::ZERO;
    let ports = Ports {
        store: store.clone(),
        registry: reg.clone(),
        leader: Some(leader.clone()),
        clock: TokioClock::new(t0()),
        rm: None,
    };
    Arc::new(Engine::new(s, ports, crate::metrics::Metrics::new()))
}

fn workflow_events(e: &SharedEngine, wf: i64) -> Vec<AuditEvent> {
    let recs: Vec<Record> = e.audit.tail(crate::audit::TAIL).unwrap();
    recs.into_iter()
        .filter(|r| r.kind == Some(RecordKind::Workflow) && r.workflow_instance_id == Some(wf))
        .map(|r| r.event)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_next_leader_recovers_a_workflow_whose_follow_up_was_left_undone() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = MemStore::new(DsLine::V3_2);
    let reg = MemRegistry::new(t0(), &["w1:1234", "w2:1234"], &["m1:5678", "m2:5678"]);
    let (lead_a, lead_b) = (Switch::new(true, "b:1"), Switch::new(false, "a:1"));
    let a = replica(&store, &reg, &lead_a, dir_a.path());
    let b = replica(&store, &reg, &lead_b, dir_b.path());
    let mut task = Candidate::new(1, "SHELL", 1, Some("w1:1234"));
    task.submit_time = Some(t0() - chrono::TimeDelta::seconds(600));
    task.workflow_instance_id = Some(7);
    task.workflow_host = Some("m1:5678".into());
    store.insert(task);
    for id in [7, 8] {
        // 8 has no task row written: it waits the workflow grace
        let mut wf = WorkflowCandidate::new(id, 1, Some("m1:5678"));
        wf.start_time = Some(t0() - chrono::TimeDelta::seconds(3600));
        store.insert_workflow(wf);
    }
    // The master and the worker running the task die together.
    reg.update(|v| {
        assert!(v.remove(NodeKind::Master, "m1:5678", t0()));
        assert!(v.remove(NodeKind::Worker, "w1:1234", t0()));
    });
    tokio::time::advance(Duration::from_secs(60)).await;
    // A writes the task and loses the lead before its workflow step.
    let (la, lb) = (lead_a.clone(), lead_b.clone());
    store.on_write(move |_| {
        la.set(false);
        lb.set(true);
    });
    let s = a.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 1, "{s:?}");
    assert_eq!(store.state(1), Some(8), "NEED_FAULT_TOLERANCE written");
    let calls = store.calls();
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, StoreCall::FollowUp(_) | StoreCall::Recover(_))),
        "the old leader wrote no workflow step: {calls:?}"
    );
    assert_eq!(
        store.workflow_row(7).unwrap().host.as_deref(),
        Some("m1:5678")
    );

    // B, the next leader, 60 s after the loss: workflow 7 shows the write.
    let s = b.sweep(Trigger::Tick).await;
    assert_eq!((s.workflows, s.actions), (1, 1), "{s:?}");
    assert_eq!(store.workflow_row(7).unwrap().host.as_deref(), Some("NULL"));
    assert_eq!(
        store.workflow_row(8).unwrap().host.as_deref(),
        Some("m1:5678")
    );
    assert_eq!(
        workflow_events(&b, 7),
        [AuditEvent::Detected, AuditEvent::Intent, AuditEvent::Done]
    );
    let f = b.status_read().workflows.clone();
    assert_eq!(f[0].evidence.resumed_tasks, Some(1), "{f:#?}");
    assert!(!workflow_events(&a, 7).contains(&AuditEvent::Done));
    // Recovered once: its host is DS's failover mark now.
    let s = b.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 0, "{s:?}");
    // Workflow 8 still waits for the workflow grace period.
    tokio::time::advance(Duration::from_secs(839)).await;
    let s = b.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 0, "{s:?}");
    tokio::time::advance(Duration::from_secs(1)).await;
    let s = b.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 1, "{s:?}");
    assert_eq!(store.workflow_row(8).unwrap().host.as_deref(), Some("NULL"));
}
