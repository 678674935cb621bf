//! The engine's own rules, in-process: in-memory ports, tokio's paused time,
//! no services and no real sleeps.

use super::*;
use crate::audit::{AuditEvent, Record};
use crate::config::VersionSetting;
use crate::testkit::{MemRegistry, MemStore, StoreCall, Switch, TokioClock};
use chrono::TimeZone;
use reaper_core::ports::Scan;
use reaper_core::{Action, Candidate, FollowUp, NodeInfo, NodeKind, ViewState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod outage;

fn t0() -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap()
}

struct Rig {
    engine: SharedEngine,
    store: Arc<MemStore>,
    reg: Arc<MemRegistry>,
    leader: Arc<Switch>,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn audit(&self) -> Vec<Record> {
        self.engine.audit.tail(crate::audit::TAIL).unwrap()
    }

    fn events(&self, event: AuditEvent, task: i64) -> usize {
        self.audit()
            .iter()
            .filter(|r| r.event == event && r.task_id == Some(task))
            .count()
    }

    fn actions(&self, action: &str, result: &str) -> u64 {
        self.engine
            .metrics
            .actions_total
            .with_label_values(&[action, result])
            .get()
    }

    fn lose(&self, host: &str) {
        let now = self.engine.now();
        self.reg
            .update(|v| assert!(v.remove(NodeKind::Worker, host, now)));
    }
}

/// Three live workers and a master, valid since t0 (at the clock's start),
/// policy `fail` for lost workers, a 60 s grace and no startup settle.
fn rig(tune: impl FnOnce(&mut Settings)) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Settings::default();
    s.dolphinscheduler.version = VersionSetting::Line(DsLine::V3_2);
    s.audit.path = dir.path().join("audit.jsonl");
    s.policy.worker_lost = Action::Fail;
    s.reconcile.grace_period = Duration::from_secs(60);
    s.reconcile.startup_settle = Duration::ZERO;
    tune(&mut s);
    let store = MemStore::new(DsLine::V3_2);
    let reg = MemRegistry::new(t0(), &["w1:1234", "w2:1234", "w3:1234"], &["m1:5678"]);
    let leader = Switch::new(true, "other-replica:1");
    let ports = Ports {
        store: store.clone(),
        registry: reg.clone(),
        leader: Some(leader.clone()),
        clock: TokioClock::new(t0()),
        rm: crate::yarn::resource_manager(&s.yarn),
    };
    let engine = Arc::new(Engine::new(s, ports, crate::metrics::Metrics::new()));
    Rig {
        engine,
        store,
        reg,
        leader,
        _dir: dir,
    }
}

fn task(id: i64, host: &str) -> Candidate {
    let mut c = Candidate::new(id, "SHELL", 1, Some(host));
    c.submit_time = Some(t0() - chrono::TimeDelta::seconds(600));
    c.workflow_instance_id = Some(100 + id);
    c.workflow_host = Some("m1:5678".into());
    c
}

#[tokio::test(start_paused = true)]
async fn the_intent_is_on_disk_before_the_write() {
    let r = rig(|_| {});
    r.store.insert(task(1, "w1:1234"));
    r.store.insert(task(2, "w1:1234"));
    let path = r.engine.settings.audit.path.clone();
    let seen = Arc::new(AtomicBool::new(false));
    let seen2 = seen.clone();
    r.store.on_write(move |writes| {
        // What another process would read from the file at this moment.
        let on_disk = crate::audit::Audit::new(&path).tail(100).unwrap();
        for w in writes {
            assert!(
                on_disk
                    .iter()
                    .any(|rec| rec.event == AuditEvent::Intent && rec.task_id == Some(w.seen.id)),
                "no intent on disk for task {}",
                w.seen.id
            );
        }
        seen2.store(true, Ordering::SeqCst);
    });
    r.lose("w1:1234");
    tokio::time::advance(Duration::from_secs(60)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 2, "{s:?}");
    assert!(seen.load(Ordering::SeqCst), "the write was made");
    assert_eq!(r.store.state(1), Some(6));
    for id in [1, 2] {
        assert_eq!(r.events(AuditEvent::Intent, id), 1);
        assert_eq!(r.events(AuditEvent::Done, id), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn grace_is_measured_on_the_daemons_clock_from_the_loss() {
    let r = rig(|_| {});
    r.store.insert(task(1, "w1:1234"));
    tokio::time::advance(Duration::from_secs(10)).await;
    r.lose("w1:1234");
    tokio::time::advance(Duration::from_secs(59)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.zombies, s.actions), (0, 0), "inside grace: {s:?}");
    assert!(r.store.writes().is_empty());
    tokio::time::advance(Duration::from_secs(1)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.zombies, s.actions), (1, 1), "grace over: {s:?}");
    assert_eq!(r.store.writes(), vec![vec![1]]);
    assert_eq!(r.actions("fail", "ok"), 1);
}

#[tokio::test(start_paused = true)]
async fn startup_settle_holds_writes_but_reports() {
    let r = rig(|s| {
        s.reconcile.startup_settle = Duration::from_secs(30);
        s.reconcile.grace_period = Duration::from_secs(1);
    });
    // A host the daemon never saw: absent since the view became valid.
    r.store.insert(task(1, "gone:1234"));
    tokio::time::advance(Duration::from_secs(5)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.zombies, s.actions), (1, 0), "{s:?}");
    assert_eq!(
        r.events(AuditEvent::Detected, 1),
        1,
        "reported while settling"
    );
    assert!(r.store.writes().is_empty());
    tokio::time::advance(Duration::from_secs(25)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 1, "{s:?}");
    assert_eq!(r.events(AuditEvent::Detected, 1), 1, "detected once");
}

#[tokio::test(start_paused = true)]
async fn a_lost_race_is_counted_audited_and_not_retried() {
    let r = rig(|_| {});
    r.store.insert(task(1, "w1:1234"));
    r.store.insert(task(2, "w1:1234"));
    r.lose("w1:1234");
    tokio::time::advance(Duration::from_secs(60)).await;
    // DS finishes task 1 between our read and our write.
    r.store.lose_race(1);
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 1, "{s:?}");
    assert_eq!(r.actions("fail", "lost_race"), 1);
    assert_eq!(r.actions("fail", "ok"), 1);
    assert_eq!(r.events(AuditEvent::LostRace, 1), 1);
    assert_eq!(r.store.state(2), Some(6));
    r.store.set_state(1, 7);
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.zombies, s.actions), (0, 0), "{s:?}");
    assert_eq!(r.store.writes().len(), 1, "never written again");
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_is_an_error_outcome_for_each_task() {
    let r = rig(|_| {});
    r.store.insert(task(1, "w1:1234"));
    r.lose("w1:1234");
    tokio::time::advance(Duration::from_secs(60)).await;
    r.store.fail_writes(true);
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 0);
    assert_eq!(r.actions("fail", "error"), 1);
    assert_eq!(r.events(AuditEvent::Intent, 1), 1);
    assert_eq!(r.events(AuditEvent::Error, 1), 1);
    assert!(r.engine.status_read().db_error.is_some());
    // once the database is back, the next sweep writes it
    r.store.fail_writes(false);
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 1);
}

#[tokio::test(start_paused = true)]
async fn no_audit_no_write() {
    let r = rig(|s| {
        // a directory where the audit file should be: every append fails
        s.audit.path = std::env::temp_dir();
    });
    r.store.insert(task(1, "w1:1234"));
    r.lose("w1:1234");
    tokio::time::advance(Duration::from_secs(60)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 0, "{s:?}");
    assert_eq!(
        r.store.state(1),
        Some(1),
        "written without its intent on disk"
    );
    assert_eq!(r.actions("fail", "error"), 1);
    assert!(
        !r.store
            .calls()
            .iter()
            .any(|c| matches!(c, StoreCall::Write(_))),
        "the store was asked to write"
    );
}

#[tokio::test(start_paused = true)]
async fn the_view_is_taken_after_the_read() {
    // Issue 10 item 1: a worker registers while the candidates are read and
    // gets a task; the plan must see it live, not "never seen".
    let r = rig(|s| s.reconcile.grace_period = Duration::ZERO);
    tokio::time::advance(Duration::from_secs(600)).await;
    r.store.insert(task(1, "w-new:1234"));
    let reg = r.reg.clone();
    r.store.on_read(move |_| {
        reg.update(|v| v.upsert(NodeKind::Worker, NodeInfo::new("w-new:1234", t0())));
    });
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.zombies, s.actions), (0, 0), "{s:?}");
    assert_eq!(r.store.state(1), Some(1));
}

#[tokio::test(start_paused = true)]
async fn follow_ups_stop_when_the_view_changes_after_the_write() {
    let r = rig(|s| s.policy.workflow = FollowUp::Fail);
    r.store.insert(task(1, "w1:1234"));
    r.lose("w1:1234");
    tokio::time::advance(Duration::from_secs(60)).await;
    let reg = r.reg.clone();
    r.store.on_write(move |_| {
        reg.update(|v| {
            v.state = ViewState::Invalid {
                since: t0(),
                reason: "session expired (test)".into(),
            }
        })
    });
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 1);
    assert!(
        !r.store.calls().contains(&StoreCall::FollowUp(1)),
        "{:?}",
        r.store.calls()
    );
    let done = r
        .audit()
        .into_iter()
        .find(|x| x.event == AuditEvent::Done)
        .unwrap();
    assert!(
        done.detail
            .as_deref()
            .unwrap_or_default()
            .contains("follow-ups not done"),
        "{done:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn follow_ups_run_under_a_valid_view() {
    let r = rig(|s| s.policy.workflow = FollowUp::Fail);
    r.store.insert(task(1, "w1:1234"));
    r.lose("w1:1234");
    tokio::time::advance(Duration::from_secs(60)).await;
    r.engine.sweep(Trigger::Tick).await;
    assert_eq!(
        r.store.calls()[1..],
        [StoreCall::Write(vec![1]), StoreCall::FollowUp(1)]
    );
}

#[tokio::test(start_paused = true)]
async fn the_brake_is_audited_when_it_engages_and_releases() {
    let r = rig(|s| s.brake.release_after = Duration::from_secs(60));
    r.reg
        .update(|v| v.upsert(NodeKind::Worker, NodeInfo::new("w4:1234", t0())));
    r.store.insert(task(1, "w1:1234"));
    r.lose("w1:1234");
    r.lose("w2:1234");
    tokio::time::advance(Duration::from_secs(60)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.zombies, s.actions), (1, 0), "{s:?}");
    assert!(r.engine.status_read().brake.engaged());
    let brakes = |r: &Rig| -> Vec<String> {
        r.audit()
            .into_iter()
            .filter(|x| x.event == AuditEvent::Brake)
            .map(|x| x.detail.unwrap_or_default())
            .collect()
    };
    assert_eq!(brakes(&r).len(), 1);
    assert!(brakes(&r)[0].starts_with("engaged"), "{:?}", brakes(&r));
    assert!(r.store.writes().is_empty());
    // the workers come back; the brake holds until release_after
    let now = r.engine.now();
    r.reg.update(|v| {
        v.upsert(NodeKind::Worker, NodeInfo::new("w1:1234", now));
        v.upsert(NodeKind::Worker, NodeInfo::new("w2:1234", now));
    });
    r.engine.sweep(Trigger::Tick).await;
    assert!(r.engine.status_read().brake.engaged());
    tokio::time::advance(Duration::from_secs(60)).await;
    r.engine.sweep(Trigger::Tick).await;
    assert!(!r.engine.status_read().brake.engaged());
    assert_eq!(brakes(&r).len(), 2);
    assert_eq!(brakes(&r)[1], "released");
}

#[tokio::test(start_paused = true)]
async fn a_standby_detects_but_never_writes() {
    let r = rig(|_| {});
    r.leader.set(false);
    r.store.insert(task(1, "w1:1234"));
    r.lose("w1:1234");
    tokio::time::advance(Duration::from_secs(60)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.zombies, s.actions), (1, 0), "{s:?}");
    assert_eq!(r.events(AuditEvent::Detected, 1), 1);
    assert!(r.store.writes().is_empty());
    let req = ReapRequest {
        task_id: 1,
        force: true,
        actor: "api".into(),
        ..ReapRequest::default()
    };
    match r.engine.reap(&req).await {
        Err(ReapError::NotLeader(Some(id))) => assert_eq!(id, "other-replica:1"),
        other => panic!("{other:?}"),
    }
    assert!(r.store.writes().is_empty());
}

#[tokio::test(start_paused = true)]
async fn reap_uses_the_same_pipeline_and_refuses_a_healthy_task() {
    let r = rig(|_| {});
    r.store.insert(task(1, "w1:1234"));
    r.store.insert(task(2, "gone:1234"));
    let req = |id: i64, force: bool| ReapRequest {
        task_id: id,
        force,
        actor: "cli:test".into(),
        ..ReapRequest::default()
    };
    match r.engine.reap(&req(1, false)).await {
        Err(ReapError::Refused(why)) => assert!(why.contains("not a zombie"), "{why}"),
        other => panic!("{other:?}"),
    }
    let rec = r.engine.reap(&req(2, false)).await.unwrap();
    assert_eq!(rec.event, AuditEvent::Done);
    assert_eq!(r.store.state(2), Some(6));
    let rec = r.engine.reap(&req(1, true)).await.unwrap();
    assert_eq!(rec.reason.as_deref(), Some("forced"));
    assert!(matches!(
        r.engine.reap(&req(9, false)).await,
        Err(ReapError::NotFound(9))
    ));
    assert!(
        matches!(
            r.engine.reap(&req(1, true)).await,
            Err(ReapError::Refused(_))
        ),
        "a finished row is never touched, even forced"
    );
    assert_eq!(r.actions("fail", "ok"), 2);
}

#[tokio::test(start_paused = true)]
async fn the_first_sweep_is_a_full_scan_then_incremental_until_the_interval() {
    let r = rig(|s| s.reconcile.full_scan_interval = Duration::from_secs(600));
    r.engine.sweep(Trigger::Tick).await;
    tokio::time::advance(Duration::from_secs(30)).await;
    r.engine.sweep(Trigger::Tick).await;
    tokio::time::advance(Duration::from_secs(600)).await;
    r.engine.sweep(Trigger::Tick).await;
    let reads: Vec<StoreCall> = r
        .store
        .calls()
        .into_iter()
        .filter(|c| matches!(c, StoreCall::Read(_)))
        .collect();
    assert_eq!(
        reads,
        [
            StoreCall::Read(Scan::Full),
            StoreCall::Read(Scan::Incremental),
            StoreCall::Read(Scan::Full)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_membership_changes_makes_one_sweep() {
    let r = rig(|s| s.reconcile.sweep_interval = Duration::from_secs(3600));
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(crate::engine::driver::sweeper(
        r.engine.clone(),
        cancel.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let sweeps = |r: &Rig| {
        ["ok", "error", "skipped"]
            .iter()
            .map(|l| r.engine.metrics.sweeps_total.with_label_values(&[l]).get())
            .sum::<u64>()
    };
    assert_eq!(sweeps(&r), 0);
    // Ten workers join within 100 ms (a rack coming up).
    for i in 0..10 {
        let now = r.engine.now();
        r.reg.update(|v| {
            v.upsert(
                NodeKind::Worker,
                NodeInfo::new(&format!("rack-{i}:1234"), now),
            )
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(crate::engine::driver::COALESCE * 3).await;
    assert_eq!(sweeps(&r), 1, "one sweep for the burst");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_workflow_whose_master_is_lost_is_recovered_once_with_audit() {
    let r = rig(|s| {
        s.policy.workflow_master_lost = crate::config::WorkflowAction::Recover;
        s.reconcile.workflow_grace_period = Duration::from_secs(900);
    });
    let mut wf = reaper_core::workflow::WorkflowCandidate::new(7, 1, Some("m1:5678"));
    wf.start_time = Some(t0() - chrono::TimeDelta::seconds(3600));
    r.store.insert_workflow(wf);
    let mut healthy = reaper_core::workflow::WorkflowCandidate::new(8, 1, Some("m2:5678"));
    healthy.start_time = Some(t0());
    healthy.tasks_by_state.insert(1, 1);
    r.store.insert_workflow(healthy);
    r.reg.update(|v| {
        v.upsert(NodeKind::Master, NodeInfo::new("m2:5678", t0()));
    });
    let now = r.engine.now();
    r.reg
        .update(|v| assert!(v.remove(NodeKind::Master, "m1:5678", now)));
    tokio::time::advance(Duration::from_secs(899)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.workflows, 0, "inside the workflow grace: {s:?}");
    tokio::time::advance(Duration::from_secs(1)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.workflows, s.actions), (1, 1), "{s:?}");
    assert_eq!(
        r.store.workflow_row(7).unwrap().host.as_deref(),
        Some("NULL")
    );
    assert_eq!(
        r.store.workflow_row(8).unwrap().host.as_deref(),
        Some("m2:5678")
    );
    let recs: Vec<_> = r
        .audit()
        .into_iter()
        .filter(|x| x.workflow_instance_id == Some(7))
        .map(|x| (x.event, x.kind))
        .collect();
    let wk = Some(crate::audit::RecordKind::Workflow);
    assert_eq!(
        recs,
        [
            (AuditEvent::Detected, wk),
            (AuditEvent::Intent, wk),
            (AuditEvent::Done, wk)
        ]
    );
    assert_eq!(
        r.engine
            .metrics
            .workflow_actions_total
            .with_label_values(&["recover", "ok"])
            .get(),
        1
    );
    // DS's failover path owns it now ('NULL'): no second command
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.workflows, s.actions), (0, 0), "{s:?}");
    assert_eq!(
        r.store
            .calls()
            .iter()
            .filter(|c| matches!(c, StoreCall::Recover(_)))
            .count(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_standby_reports_workflows_but_never_recovers() {
    let r = rig(|s| {
        s.policy.workflow_master_lost = crate::config::WorkflowAction::Recover;
        s.reconcile.workflow_grace_period = Duration::from_secs(60);
    });
    r.leader.set(false);
    let mut wf = reaper_core::workflow::WorkflowCandidate::new(7, 1, Some("gone:5678"));
    wf.start_time = Some(t0());
    r.store.insert_workflow(wf);
    tokio::time::advance(Duration::from_secs(120)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!((s.workflows, s.actions), (1, 0), "{s:?}");
    assert!(r
        .store
        .calls()
        .iter()
        .all(|c| !matches!(c, StoreCall::Recover(_))));
    assert!(matches!(
        r.engine.reap_workflow(7, true, "api", |_, _| Ok(())).await,
        Err(ReapError::NotLeader(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_workflow_read_the_store_cannot_serve_is_a_fault_not_no_findings() {
    use reaper_core::ports::PortError;
    let r = rig(|s| s.reconcile.workflows = true);
    r.store.fail_workflow_reads(Some(PortError::invalid(
        "schema mismatch: t_ds_process_instance has no column(s) host",
    )));
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.result, SweepResult::Ok, "the task results stand");
    assert_eq!(
        r.engine.read_error().as_deref(),
        Some("workflow candidates: schema mismatch: t_ds_process_instance has no column(s) host")
    );
    assert_eq!(
        r.engine.metrics.db_errors_total.get(),
        0,
        "not a database outage"
    );
    let check = r.engine.check().await.map(|_| ()).unwrap_err();
    assert_eq!(
        check.port_kind(),
        Some(reaper_core::ports::PortErrorKind::Invalid)
    );
    assert!(check
        .to_string()
        .starts_with("reading workflow instances: schema mismatch"));
    // a store that does not read workflows at all is no fault of check's
    r.store
        .fail_workflow_reads(Some(PortError::unsupported("no workflows here")));
    assert!(r.engine.check().await.is_ok());
    // a good read clears the fault
    r.store.fail_workflow_reads(None);
    r.engine.sweep(Trigger::Tick).await;
    assert_eq!(r.engine.read_error(), None);
}
