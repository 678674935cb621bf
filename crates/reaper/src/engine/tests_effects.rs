//! The executor and the read-before-plan rule (SPEC §4.1, §17), in-process:
//! an RM double that never answers, a kill that outlives the judgement,
//! `check` against a sweep, dangling intents against the rows.

use super::*;
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::config::VersionSetting;
use crate::testkit::{MemRegistry, MemRm, MemStore, Switch, TokioClock};
use crate::yarn::{KnownApps, Learned};
use chrono::TimeZone;
use reaper_core::{Action, Blocked, Candidate, Disposition, NodeKind};
use std::time::Duration;

fn t0() -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap()
}

struct Rig {
    engine: SharedEngine,
    store: Arc<MemStore>,
    reg: Arc<MemRegistry>,
    rm: Arc<MemRm>,
    _dir: tempfile::TempDir,
}

/// Workers w1, w2, a master; `fail` for lost workers; task 1 a SPARK task
/// whose application `application_1_1` is known (learned earlier), task 2 a
/// SHELL task; both on w1.
fn rig(apps: &[(&str, &str)], tune: impl FnOnce(&mut Settings)) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Settings::default();
    s.dolphinscheduler.version = VersionSetting::Line(DsLine::V3_2);
    s.audit.path = dir.path().join("audit.jsonl");
    s.policy.worker_lost = Action::Fail;
    s.reconcile.startup_settle = Duration::ZERO;
    s.yarn.resource_managers = vec!["http://rm.invalid:8088".into()];
    tune(&mut s);
    KnownApps::load(KnownApps::beside(&s.audit.path))
        .learn(&[Learned {
            task_id: 1,
            app_id: "application_1_1".into(),
            host: "w1:1234".into(),
            learned_at: t0(),
        }])
        .unwrap();
    let store = MemStore::new(DsLine::V3_2);
    let reg = MemRegistry::new(t0(), &["w1:1234", "w2:1234"], &["m1:5678"]);
    let rm = MemRm::new(apps);
    let ports = Ports {
        store: store.clone(),
        registry: reg.clone(),
        leader: Some(Switch::new(true, "me")),
        clock: TokioClock::new(t0()),
        rm: Some(rm.clone()),
    };
    let engine = Arc::new(Engine::new(s, ports, crate::metrics::Metrics::new()));
    store.insert(task(1, "SPARK"));
    store.insert(task(2, "SHELL"));
    Rig {
        engine,
        store,
        reg,
        rm,
        _dir: dir,
    }
}

fn task(id: i64, task_type: &str) -> Candidate {
    let mut c = Candidate::new(id, task_type, 1, Some("w1:1234"));
    c.submit_time = Some(t0() - chrono::TimeDelta::seconds(600));
    c.start_time = c.submit_time;
    c.workflow_instance_id = Some(100 + id);
    c.workflow_host = Some("m1:5678".into());
    c
}

impl Rig {
    /// w1 lost, and its grace over.
    async fn lose_w1(&self) {
        let now = self.engine.now();
        self.reg
            .update(|v| assert!(v.remove(NodeKind::Worker, "w1:1234", now)));
        tokio::time::advance(Duration::from_secs(61)).await;
    }

    fn audit(&self) -> Vec<Record> {
        self.engine.audit.tail(crate::audit::TAIL).unwrap()
    }

    fn skipped(&self, reason: &str) -> u64 {
        self.engine
            .metrics
            .effects_skipped_total
            .with_label_values(&[reason])
            .get()
    }

    /// An agent on `worker` that lists nothing and reads no id source.
    fn agent_on(&self, worker: &str) {
        let report = reaper_core::agent::AgentReport {
            worker: worker.into(),
            agent_version: "test".into(),
            seq: 1,
            scan_started_at: t0().timestamp_millis(),
            scan_ms: 1,
            exec_base: "/tmp/ds".into(),
            unreadable: 0,
            blind: None,
            tty_tasks: 0,
            app_id_sources: Some(vec![]),
            tasks: vec![],
            orders: vec![],
        };
        let seen = reaper_core::agent::AgentSeen::received(
            None,
            Some(report),
            t0(),
            false,
            Duration::from_secs(35),
        );
        self.reg.update(|v| {
            v.agents.insert(worker.into(), seen.into());
        });
    }

    fn zombie(&self, id: i64) -> Zombie {
        let s = self.engine.status_read();
        s.zombies.iter().find(|z| z.task.id == id).unwrap().clone()
    }
}

#[tokio::test(start_paused = true)]
async fn an_rm_that_never_answers_holds_only_its_task_and_the_sweep_ends_within_its_budget() {
    let r = rig(&[("application_1_1", "RUNNING")], |_| {});
    r.rm.go_silent();
    r.lose_w1().await;
    let started = tokio::time::Instant::now();
    let s = r.engine.sweep(Trigger::Tick).await;
    let took = started.elapsed();
    // the RM's budget is a third of the 30 s sweep interval
    assert!(took >= Duration::from_secs(10), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!((s.zombies, s.actions), (2, 1), "{s:?}");
    assert_eq!(r.rm.asked(), vec!["application_1_1".to_string()]);
    let held = r.zombie(1);
    assert_eq!(
        held.disposition,
        Disposition::Blocked(Blocked::RemoteAppUnknown)
    );
    assert_eq!(held.note.as_deref(), Some("remote_app_unknown"));
    assert_eq!(r.store.state(1), Some(1), "held: never written");
    assert_eq!(r.store.state(2), Some(6), "the other zombie is written");
    assert!(r.rm.killed().is_empty());
}

#[tokio::test(start_paused = true)]
async fn effects_on_a_judgement_older_than_sweep_interval_are_skipped_and_counted() {
    let r = rig(&[("application_1_1", "RUNNING")], |s| {
        s.policy.kill_remote_apps = true;
    });
    // the kill outlives the judgement: the task batch after it is skipped
    r.rm.kill_takes(Duration::from_secs(45));
    r.lose_w1().await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 0, "{s:?}");
    assert_eq!(r.rm.killed(), vec!["application_1_1".to_string()]);
    assert_eq!(r.skipped("stale_judgement"), 2, "both task writes skipped");
    assert_eq!((r.store.state(1), r.store.state(2)), (Some(1), Some(1)));
    let kill = r
        .audit()
        .into_iter()
        .filter(|a| a.kind == Some(RecordKind::RemoteApp))
        .map(|a| a.event)
        .collect::<Vec<_>>();
    assert_eq!(kill, vec![AuditEvent::Intent, AuditEvent::Done]);
    // the next sweep judges again: the application is final, both are written
    r.rm.kill_takes(Duration::ZERO);
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 2, "{s:?}");
    assert_eq!((r.store.state(1), r.store.state(2)), (Some(6), Some(6)));
    assert_eq!(
        r.rm.killed().len(),
        1,
        "a final application is not killed again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_live_application_is_killed_before_its_tasks_write_in_the_same_pass() {
    let r = rig(&[("application_1_1", "RUNNING")], |s| {
        s.policy.kill_remote_apps = true;
    });
    r.lose_w1().await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 2, "{s:?}");
    assert_eq!(r.rm.killed(), vec!["application_1_1".to_string()]);
    // the kill's outcome is on file before the task's intent
    let audit = r.audit();
    let done = audit
        .iter()
        .position(|a| a.kind == Some(RecordKind::RemoteApp) && a.event == AuditEvent::Done)
        .unwrap();
    let intent = audit
        .iter()
        .position(|a| {
            a.kind == Some(RecordKind::Task)
                && a.event == AuditEvent::Intent
                && a.task_id == Some(1)
        })
        .unwrap();
    assert!(done < intent, "{audit:#?}");
    assert_eq!(r.skipped("stale_judgement"), 0);
}

/// SPEC §17: a kill is `done` only when a read after it shows the
/// application final. An RM that accepts the kill while the application
/// keeps running gets an `error`, and the task stays unwritten.
#[tokio::test(start_paused = true)]
async fn a_kill_the_rm_accepts_but_that_does_not_take_is_an_error_and_holds_its_task() {
    let r = rig(&[("application_1_1", "RUNNING")], |s| {
        s.policy.kill_remote_apps = true;
    });
    r.rm.ignore_kills();
    r.lose_w1().await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(r.rm.killed(), vec!["application_1_1".to_string()]);
    let kill = r
        .audit()
        .into_iter()
        .filter(|a| a.kind == Some(RecordKind::RemoteApp))
        .collect::<Vec<_>>();
    assert_eq!(
        kill.iter().map(|a| a.event).collect::<Vec<_>>(),
        vec![AuditEvent::Intent, AuditEvent::Error]
    );
    let detail = kill[1].detail.clone().unwrap_or_default();
    assert!(
        detail.contains("accepted the kill") && detail.contains("RUNNING"),
        "{detail}"
    );
    assert_eq!(
        r.store.state(1),
        Some(1),
        "its application runs: not written"
    );
    assert_eq!(r.store.state(2), Some(6), "the other zombie is written");
    assert_eq!(s.actions, 1, "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn check_finds_what_one_sweep_judges_and_writes_nothing() {
    let r = rig(&[("application_1_1", "FINISHED")], |s| {
        s.policy.worker_lost = Action::Report;
    });
    let mut wf = reaper_core::workflow::WorkflowCandidate::new(7, 1, Some("m9:5678"));
    wf.start_time = Some(t0() - chrono::TimeDelta::hours(2));
    r.store.insert_workflow(wf);
    r.lose_w1().await;
    tokio::time::advance(Duration::from_secs(900)).await;
    let checked = r.engine.check().await.unwrap();
    assert!(r.audit().is_empty(), "check audits nothing");
    r.engine.sweep(Trigger::Tick).await;
    let status = r.engine.status_read();
    let key = |z: &Zombie| {
        (
            z.task.id,
            z.reason,
            z.action,
            z.evidence.remote_apps.clone(),
        )
    };
    assert_eq!(
        checked.zombies.iter().map(key).collect::<Vec<_>>(),
        status.zombies.iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(checked.zombies.len(), 2);
    let wkey = |f: &reaper_core::workflow::WorkflowFinding| (f.workflow.id, f.reason, f.action);
    assert_eq!(
        checked.workflows.iter().map(wkey).collect::<Vec<_>>(),
        status.workflows.iter().map(wkey).collect::<Vec<_>>()
    );
    assert_eq!(checked.workflows.len(), 1);
    let akey = |a: &reaper_core::anomaly::Anomaly| a.key();
    assert_eq!(
        checked.anomalies.iter().map(akey).collect::<Vec<_>>(),
        status.anomalies.iter().map(akey).collect::<Vec<_>>()
    );
    assert_eq!(r.store.state(1), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_dangling_intent_is_resolved_from_the_row_it_was_about() {
    let r = rig(&[], |_| {});
    // a previous run died between its intents and their outcomes: task 1's
    // write was committed, task 2's was not
    let z = |id: i64| {
        let mut rec = Record::event(AuditEvent::Intent, "daemon", t0());
        rec.kind = Some(RecordKind::Task);
        rec.task_id = Some(id);
        rec.from_state = Some("RUNNING_EXECUTION".into());
        rec.to_state = Some("FAILURE".into());
        rec.ds_line = Some("3.2".into());
        rec
    };
    r.engine.audit.append(&[z(1), z(2)]).unwrap();
    r.store.set_state(1, 6);
    assert_eq!(r.engine.close_dangling_intents().await, 2);
    let outcome = |id: i64| {
        r.audit()
            .into_iter()
            .rfind(|a| a.task_id == Some(id))
            .unwrap()
    };
    assert_eq!(outcome(1).event, AuditEvent::Done, "{:?}", outcome(1));
    assert_eq!(outcome(2).event, AuditEvent::LostRace, "{:?}", outcome(2));
    assert!(outcome(2).detail.unwrap().contains("not written"));
    // nothing left dangling
    assert_eq!(r.engine.close_dangling_intents().await, 0);
}

#[tokio::test(start_paused = true)]
async fn an_application_that_started_before_the_task_is_foreign_never_killed_nor_holding() {
    let r = rig(&[("application_1_1", "RUNNING")], |s| {
        s.policy.kill_remote_apps = true;
    });
    // an upstream job's application, printed in the task's log
    let before = (t0() - chrono::TimeDelta::hours(2)).timestamp_millis();
    r.rm.started("application_1_1", before);
    r.lose_w1().await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.actions, 2, "{s:?}");
    assert!(
        r.rm.killed().is_empty(),
        "a foreign application is never killed"
    );
    let z = r.zombie(1);
    assert_eq!(
        z.evidence.foreign_app_ids,
        vec!["application_1_1".to_string()]
    );
    assert!(z.evidence.remote_apps.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_yarn_task_whose_agent_reads_no_id_source_is_held_unless_ids_are_not_required() {
    for require in [true, false] {
        let r = rig(&[], |s| s.yarn.require_ids = require);
        // task 3: a SPARK task with no id learned, on a worker whose agent
        // says it can read no application-id source
        let mut t = task(3, "SPARK");
        t.host = Some("w2:1234".into());
        r.store.insert(t);
        r.agent_on("w2:1234");
        let now = r.engine.now();
        r.reg
            .update(|v| assert!(v.remove(NodeKind::Worker, "w2:1234", now)));
        tokio::time::advance(Duration::from_secs(61)).await;
        r.engine.sweep(Trigger::Tick).await;
        let z = r.zombie(3);
        if require {
            assert_eq!(
                z.disposition,
                Disposition::Blocked(Blocked::RemoteAppIdsUnknown)
            );
            assert_eq!(z.note.as_deref(), Some("remote_app_ids_unknown"));
            assert_eq!(r.store.state(3), Some(1));
        } else {
            assert_eq!(r.store.state(3), Some(6), "require_ids = false: acted on");
        }
    }
}

/// SPEC §17, ghost applications: DS's own failover re-ran the task (its old
/// row handed to fault tolerance) without killing its application; no agent
/// lists the task any more, its id comes from the state file.
#[tokio::test(start_paused = true)]
async fn an_over_rows_live_application_is_a_ghost_and_killed_only_with_kill_remote_apps() {
    for kill in [false, true] {
        let r = rig(&[("application_1_1", "RUNNING")], |s| {
            s.policy.kill_remote_apps = kill;
        });
        r.rm.started("application_1_1", t0().timestamp_millis());
        r.store.finish(1, 8, t0() - chrono::TimeDelta::seconds(300));
        r.engine.sweep(Trigger::Tick).await;
        let ghosts = r.engine.status_read().ghosts.clone();
        let g = ghosts
            .iter()
            .find(|g| g.task_id == 1)
            .expect("a ghost application");
        assert!(g.processes.is_empty());
        assert_eq!(g.remote_apps.len(), 1);
        assert_eq!(
            g.evidence.over,
            reaper_core::ghost::Over::NeedFaultTolerance
        );
        let kills: Vec<AuditEvent> = r
            .audit()
            .into_iter()
            .filter(|a| a.kind == Some(RecordKind::RemoteApp))
            .map(|a| a.event)
            .collect();
        if kill {
            assert_eq!(g.disposition, Disposition::Act);
            assert_eq!(r.rm.killed(), vec!["application_1_1".to_string()]);
            assert_eq!(kills, vec![AuditEvent::Intent, AuditEvent::Done]);
        } else {
            assert_eq!(g.disposition, Disposition::Report);
            assert!(r.rm.killed().is_empty());
            assert!(kills.is_empty());
        }
        assert_eq!(
            r.store.state(1),
            Some(8),
            "nothing of DS's is written for it"
        );
    }
}

/// Ghost applications are judged on full scans only (their rows are read
/// by id then). The incremental sweeps between keep showing them, with no
/// new `detected` record, and never act on them: a kill that did not take
/// is tried again at the next full scan, not at every sweep.
#[tokio::test(start_paused = true)]
async fn a_ghost_application_stands_between_full_scans_and_is_acted_on_only_at_one() {
    let r = rig(&[("application_1_1", "RUNNING")], |s| {
        s.policy.kill_remote_apps = true;
        s.reconcile.full_scan_interval = Duration::from_secs(600);
    });
    // an agent lists tasks (none): the ghost list is judged every sweep
    r.agent_on("w2:1234");
    r.rm.started("application_1_1", t0().timestamp_millis());
    r.rm.ignore_kills();
    r.store.finish(1, 8, t0() - chrono::TimeDelta::seconds(300));
    let shown = |r: &Rig| {
        r.engine
            .status_read()
            .ghosts
            .iter()
            .filter(|g| g.task_id == 1)
            .count()
    };
    let detected = |r: &Rig| {
        r.audit()
            .iter()
            .filter(|a| a.event == AuditEvent::Detected && a.task_id == Some(1))
            .count()
    };
    r.engine.sweep(Trigger::Tick).await;
    assert_eq!((shown(&r), detected(&r)), (1, 1));
    assert_eq!(r.rm.killed().len(), 1);
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(30)).await;
        let s = r.engine.sweep(Trigger::Tick).await;
        assert_eq!(s.kind, "incremental", "{s:?}");
        assert_eq!(shown(&r), 1, "still shown between full scans");
    }
    assert_eq!(detected(&r), 1, "detected once, not at every full scan");
    assert_eq!(r.rm.killed().len(), 1, "never acted on between full scans");
    tokio::time::advance(Duration::from_secs(600)).await;
    let s = r.engine.sweep(Trigger::Tick).await;
    assert_eq!(s.kind, "full", "{s:?}");
    assert_eq!((shown(&r), detected(&r)), (1, 1));
    assert_eq!(r.rm.killed().len(), 2, "tried again at the full scan");
}

/// SPEC §17, "its `user` is the row's tenant where both are known": the
/// task's workflow runs as `etl` (read once per sweep, for the workflows of
/// tasks with ids only); an application the RM says `bi` runs is foreign,
/// never killed nor holding, one `etl` runs is the task's own and killed.
#[tokio::test(start_paused = true)]
async fn an_application_another_user_runs_is_foreign_where_the_tenant_is_known() {
    for (user, own) in [("bi", false), ("ETL", true)] {
        let r = rig(&[("application_1_1", "RUNNING")], |s| {
            s.policy.kill_remote_apps = true;
        });
        r.rm.started("application_1_1", t0().timestamp_millis());
        r.rm.user("application_1_1", user);
        r.store.set_tenant(101, "etl");
        r.lose_w1().await;
        let s = r.engine.sweep(Trigger::Tick).await;
        assert_eq!(s.actions, 2, "{user}: {s:?}");
        // task 1 (workflow 101) has ids, task 2 (102) none
        assert_eq!(r.store.tenant_reads(), vec![vec![101]]);
        let z = r.zombie(1);
        if own {
            assert_eq!(r.rm.killed(), vec!["application_1_1".to_string()]);
            assert!(z.evidence.foreign_app_ids.is_empty());
        } else {
            assert!(r.rm.killed().is_empty(), "another user's: never killed");
            assert_eq!(
                z.evidence.foreign_app_ids,
                vec!["application_1_1".to_string()]
            );
            assert!(z.evidence.remote_apps.is_empty());
        }
    }
}
