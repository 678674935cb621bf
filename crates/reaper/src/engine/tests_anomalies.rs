//! SPEC §16 in-process: findings reach the status, the metrics and the audit
//! trail (once), and nothing is written whatever the policy says.

use super::*;
use crate::audit::{AuditEvent, RecordKind};
use crate::config::VersionSetting;
use crate::testkit::{MemRegistry, MemStore, StoreCall, Switch, TokioClock};
use chrono::TimeZone;
use reaper_core::anomaly::AnomalyKind;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{Action, Candidate, FollowUp};
use std::time::Duration;

fn t0() -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap()
}

/// Every policy set to act.
fn engine(store: Arc<MemStore>, dir: &std::path::Path) -> SharedEngine {
    let mut s = Settings::default();
    s.dolphinscheduler.version = VersionSetting::Line(DsLine::V3_2);
    s.audit.path = dir.join("audit.jsonl");
    s.policy.worker_lost = Action::Fail;
    s.policy.worker_restarted = Action::Fail;
    s.policy.heartbeat_stale = Action::Fail;
    s.policy.master_lost = Action::Fail;
    s.policy.no_host = Action::Fail;
    s.policy.workflow = FollowUp::Recover;
    s.reconcile.startup_settle = Duration::ZERO;
    let reg = MemRegistry::new(t0(), &["w1:1234", "w2:1234"], &["m1:5678"]);
    let ports = Ports {
        store,
        registry: reg,
        leader: Some(Switch::new(true, "x")),
        clock: TokioClock::new(t0()),
        rm: crate::yarn::resource_manager(&s.yarn),
    };
    Arc::new(Engine::new(s, ports, crate::metrics::Metrics::new()))
}

fn row(id: i64, state: i32, host: Option<&str>, submitted_ago: i64) -> Candidate {
    let mut c = Candidate::new(id, "SHELL", state, host);
    c.submit_time = Some(t0() - chrono::TimeDelta::seconds(submitted_ago));
    c.workflow_instance_id = Some(100);
    c.workflow_host = Some("m1:5678".into());
    c.worker_group = Some("default".into());
    c.task_code = Some(id);
    c
}

#[tokio::test(start_paused = true)]
async fn findings_are_published_audited_once_and_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new(DsLine::V3_2);
    // queued for 31 minutes under the live m1
    store.insert(row(1, 0, None, 31 * 60));
    // a fresh SUBMITTED row is no finding
    store.insert(row(2, 0, None, 60));
    // two live attempts of one task in workflow 100
    let a = row(3, 1, Some("w1:1234"), 600);
    let mut b = row(4, 1, Some("w2:1234"), 300);
    b.task_code = Some(3);
    store.insert(a);
    store.insert(b);
    let mut stopping = WorkflowCandidate::new(200, 4, Some("m1:5678"));
    stopping.start_time = Some(t0() - chrono::TimeDelta::hours(2));
    store.insert_workflow(stopping);
    let e = engine(store.clone(), dir.path());

    let s = e.sweep(Trigger::Tick).await;
    assert_eq!(s.result, SweepResult::Ok, "{s:?}");
    let found = e.status_read().anomalies.clone();
    let kinds: Vec<AnomalyKind> = found.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AnomalyKind::DispatchStalled,
            AnomalyKind::DuplicateAttempt,
            AnomalyKind::WorkflowStopStuck
        ],
        "{found:#?}"
    );
    assert_eq!(found[0].task_ids, vec![1]);
    assert_eq!(found[1].task_ids, vec![3, 4]);
    assert_eq!(found[2].workflow_instance_id, Some(200));
    assert!(
        e.status_read().workflows.is_empty(),
        "READY_STOP under a live master is not workflow_stalled"
    );
    let m = &e.metrics;
    for (k, n) in [
        ("dispatch_stalled", 1),
        ("duplicate_attempt", 1),
        ("workflow_stop_stuck", 1),
        ("serial_wait_stuck", 0),
    ] {
        assert_eq!(m.anomalies.with_label_values(&[k]).get(), n, "{k}");
    }
    assert_eq!(
        m.oldest_live_seconds
            .with_label_values(&["SUBMITTED_SUCCESS"])
            .get(),
        31 * 60
    );
    assert_eq!(
        m.oldest_live_seconds
            .with_label_values(&["RUNNING_EXECUTION"])
            .get(),
        600
    );

    // more sweeps: still reported, audited once
    tokio::time::advance(Duration::from_secs(30)).await;
    e.sweep(Trigger::Tick).await;
    let records: Vec<_> = e
        .audit
        .tail(crate::audit::TAIL)
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == Some(RecordKind::Anomaly))
        .collect();
    assert_eq!(records.len(), 3, "{records:#?}");
    assert!(records.iter().all(|r| r.event == AuditEvent::Detected));
    let reasons: Vec<_> = records.iter().filter_map(|r| r.reason.clone()).collect();
    assert_eq!(
        reasons,
        vec![
            "dispatch_stalled",
            "duplicate_attempt",
            "workflow_stop_stuck"
        ]
    );
    assert_eq!(records[0].worker_group.as_deref(), Some("default"));
    // with every policy set to act: no write, no follow-up, no recover
    assert!(
        store
            .calls()
            .iter()
            .all(|c| matches!(c, StoreCall::Read(_))),
        "{:?}",
        store.calls()
    );
    for (id, state) in [(1, 0), (2, 0), (3, 1), (4, 1)] {
        assert_eq!(store.state(id), Some(state), "task {id} unchanged");
    }
    assert_eq!(store.workflow_row(200).map(|w| w.state), Some(4));

    // cleared, then back: audited again
    store.set_state(4, 7);
    tokio::time::advance(Duration::from_secs(30)).await;
    e.sweep(Trigger::Tick).await;
    assert_eq!(
        e.metrics
            .anomalies
            .with_label_values(&["duplicate_attempt"])
            .get(),
        0
    );
    store.set_state(4, 1);
    tokio::time::advance(Duration::from_secs(30)).await;
    e.sweep(Trigger::Tick).await;
    let dup = e
        .audit
        .tail(crate::audit::TAIL)
        .unwrap()
        .into_iter()
        .filter(|r| r.reason.as_deref() == Some("duplicate_attempt"))
        .count();
    assert_eq!(dup, 2);
}

#[tokio::test(start_paused = true)]
async fn check_lists_anomalies_without_writing_or_auditing() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new(DsLine::V3_2);
    store.insert(row(1, 0, None, 31 * 60));
    let e = engine(store.clone(), dir.path());
    let found = e.check().await.unwrap().anomalies;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].kind, AnomalyKind::DispatchStalled);
    assert!(e.audit.tail(10).unwrap().is_empty());
    assert_eq!(store.state(1), Some(0));
}
