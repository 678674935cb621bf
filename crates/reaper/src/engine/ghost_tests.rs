//! Ghost processes in the engine (SPEC §15), in-process: in-memory ports,
//! tokio's paused time. Who may order a kill, under which limits, how an
//! answer is audited, and that DS's database is never written for a ghost.

use super::*;
use crate::audit::{AuditEvent, Record, RecordKind};
use crate::config::VersionSetting;
use crate::testkit::{MemRegistry, MemStore, StoreCall, Switch, TokioClock};
use chrono::TimeZone;
use reaper_core::agent::{AgentProcess, AgentReport, AgentSeen, AgentTask};
use reaper_core::ghost::GhostAction;
use reaper_core::order::{OrderOutcome, OrderResult};
use reaper_core::{Candidate, NodeKind};
use std::time::Duration;

mod orders;

const W1: &str = "w1:1234";
const STALE: Duration = Duration::from_secs(35);

fn t0() -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap()
}

struct Rig {
    engine: SharedEngine,
    store: Arc<MemStore>,
    reg: Arc<MemRegistry>,
    leader: Arc<Switch>,
    seq: u64,
    /// How the agent spells its worker in its report (default: as the view keys it).
    spelling: String,
    /// The YARN application ids the agent reports for every task.
    app_ids: Vec<String>,
    _dir: tempfile::TempDir,
}

fn rig(tune: impl FnOnce(&mut Settings)) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Settings::default();
    s.dolphinscheduler.version = VersionSetting::Line(DsLine::V3_2);
    s.audit.path = dir.path().join("audit.jsonl");
    s.reconcile.startup_settle = Duration::ZERO;
    s.reconcile.ghost_after = Duration::from_secs(60);
    s.reconcile.agent_stale_after = STALE;
    tune(&mut s);
    let store = MemStore::new(DsLine::V3_2);
    let reg = MemRegistry::new(t0(), &[W1, "w2:1234", "w3:1234"], &["m1:5678"]);
    let leader = Switch::new(true, "me");
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
        seq: 0,
        spelling: W1.to_string(),
        app_ids: Vec::new(),
        _dir: dir,
    }
}

/// `ghost_process = "kill"` and a rule naming `terminal_state`: these
/// tests finish their rows, whose processes are killed only so (SPEC §15).
fn kill_finished(s: &mut Settings) {
    s.policy.ghost_process = GhostAction::Kill;
    s.policy.rules.push(crate::config::RuleEntry {
        reason: Some(crate::config::ReasonName::GhostProcess),
        over: Some(vec![reaper_core::ghost::Over::Terminal]),
        ..Default::default()
    });
}

/// A SHELL task on w1 submitted 10 min before t0, live.
fn task(id: i64) -> Candidate {
    let mut c = Candidate::new(id, "SHELL", 1, Some(W1));
    c.submit_time = Some(t0() - chrono::TimeDelta::seconds(600));
    c.start_time = Some(t0() - chrono::TimeDelta::seconds(599));
    c.workflow_instance_id = Some(100 + id);
    c.workflow_host = Some("m1:5678".into());
    c
}

impl Rig {
    fn audit(&self) -> Vec<Record> {
        self.engine.audit.tail(crate::audit::TAIL).unwrap()
    }

    fn process_events(&self, event: AuditEvent) -> Vec<Record> {
        self.audit()
            .into_iter()
            .filter(|r| r.event == event && r.kind == Some(RecordKind::Process))
            .collect()
    }

    /// w1's agent reports `tasks` (each with one process started 9 min
    /// before t0) and `answers` now.
    fn report(&mut self, tasks: &[i64], answers: Vec<OrderOutcome>) {
        self.seq += 1;
        let now = self.engine.now();
        let started = (t0() - chrono::TimeDelta::seconds(540)).timestamp_millis();
        let report = AgentReport {
            tty_tasks: 0,
            app_id_sources: None,
            worker: self.spelling.clone(),
            agent_version: "test".into(),
            seq: self.seq,
            scan_started_at: now.timestamp_millis(),
            scan_ms: 1,
            exec_base: "/tmp/ds".into(),
            unreadable: 0,
            blind: None,
            tasks: tasks
                .iter()
                .map(|&id| AgentTask {
                    lineage: None,
                    app_ids: self.app_ids.clone(),
                    task_id: id,
                    workflow_instance_id: 100 + id,
                    pids: vec![1000 + id as i32],
                    started_at: started,
                    processes: vec![AgentProcess {
                        pid: 1000 + id as i32,
                        started_at: started,
                        tty: false,
                    }],
                })
                .collect(),
            orders: answers,
        };
        self.reg.update(|v| {
            let prev = v.agents.get(W1).cloned();
            let seen = AgentSeen::received(prev.as_deref(), Some(report), now, false, STALE);
            v.agents.insert(W1.into(), seen.into());
        });
    }

    /// Reports and sweeps every 10 s for `secs`.
    async fn run(&mut self, tasks: &[i64], secs: u64) {
        for _ in 0..secs / 10 {
            tokio::time::sleep(Duration::from_secs(10)).await;
            self.report(tasks, Vec::new());
            self.engine.sweep(Trigger::Tick).await;
        }
    }

    fn ghosts(&self) -> Arc<Vec<reaper_core::ghost::Ghost>> {
        self.engine.status_read().ghosts.clone()
    }

    fn no_db_write(&self) {
        assert!(self.store.writes().is_empty(), "{:?}", self.store.calls());
    }
}

#[tokio::test(start_paused = true)]
async fn a_finished_tasks_process_is_a_ghost_after_ghost_after_and_only_reported() {
    let mut r = rig(|_| {});
    r.store.insert(task(1));
    r.run(&[1], 30).await;
    assert!(r.ghosts().is_empty(), "live row: its process is the task");
    assert!(
        !r.store
            .calls()
            .iter()
            .any(|c| matches!(c, StoreCall::GhostRead(_))),
        "a listed task among the sweep's candidates costs no read of its own"
    );
    r.store.finish(1, 7, r.engine.now());
    r.run(&[1], 50).await;
    assert!(r.ghosts().is_empty(), "within ghost_after");
    r.run(&[1], 20).await;
    let g = r.ghosts();
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].task_id, g[0].worker.as_str()), (1, W1));
    assert_eq!(g[0].pids(), vec![1001]);
    assert_eq!(g[0].row_state.as_deref(), Some("SUCCESS"));
    assert_eq!(r.engine.metrics.ghosts.get(), 1);
    let detected = r.process_events(AuditEvent::Detected);
    assert_eq!(detected.len(), 1);
    assert_eq!(detected[0].reason.as_deref(), Some("ghost_process"));
    assert!(
        r.reg.order_nodes().is_empty(),
        "policy report orders nothing"
    );
    // the listed ids were read in batches with the sweep; DS was never written
    assert!(r
        .store
        .calls()
        .iter()
        .any(|c| matches!(c, StoreCall::GhostRead(ids) if ids == &vec![1])));
    r.no_db_write();
    // the process goes away: so does the ghost
    r.run(&[], 10).await;
    assert!(r.ghosts().is_empty());
    assert_eq!(r.engine.metrics.ghosts.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_kill_is_ordered_audited_and_its_answer_closes_it() {
    let mut r = rig(kill_finished);
    r.store.insert(task(1));
    r.store.finish(1, 6, t0());
    r.run(&[1], 80).await;
    let nodes = r.reg.order_nodes();
    let order = nodes
        .get(&(W1.to_string(), 1))
        .expect("the leader ordered the kill")
        .clone();
    assert_eq!(order.pids.len(), 1);
    assert_eq!(order.pids[0].pid, 1001);
    assert_eq!(order.reason, "ghost_process");
    let intents = r.process_events(AuditEvent::Intent);
    assert_eq!(intents.len(), 1, "one order while it is outstanding");
    assert_eq!(intents[0].action.as_deref(), Some("kill"));
    // outstanding: no second order, whatever the time
    r.run(&[1], 120).await;
    assert_eq!(r.process_events(AuditEvent::Intent).len(), 1);
    assert_eq!(r.ghosts()[0].note.as_deref(), Some("kill_ordered"));
    // the agent answers (in every report while the node exists)
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        r.report(
            &[],
            vec![OrderOutcome {
                order_id: order.order_id.clone(),
                result: OrderResult::Killed,
                detail: String::new(),
            }],
        );
        r.engine.sweep(Trigger::Tick).await;
    }
    let done = r.process_events(AuditEvent::Done);
    assert_eq!(done.len(), 1, "audited once");
    assert_eq!(done[0].task_id, Some(1));
    assert!(r.reg.order_nodes().is_empty(), "the order node is removed");
    let killed = r
        .engine
        .metrics
        .ghost_actions_total
        .with_label_values(&["killed"])
        .get();
    assert_eq!(killed, 1);
    assert!(r.ghosts().is_empty());
    r.no_db_write();
}

#[tokio::test(start_paused = true)]
async fn a_refused_order_is_an_error_with_the_agents_detail_and_is_reissued_later() {
    let mut r = rig(kill_finished);
    r.store.insert(task(1));
    r.store.finish(1, 7, t0());
    r.run(&[1], 80).await;
    let order = r.reg.order_nodes()[&(W1.to_string(), 1)].clone();
    tokio::time::sleep(Duration::from_secs(10)).await;
    r.report(
        &[1],
        vec![OrderOutcome {
            order_id: order.order_id.clone(),
            result: OrderResult::Refused,
            detail: "allow_kill is false".into(),
        }],
    );
    r.engine.sweep(Trigger::Tick).await;
    let errors = r.process_events(AuditEvent::Error);
    assert_eq!(errors.len(), 1);
    assert!(errors[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("refused: allow_kill is false"));
    assert!(r.reg.order_nodes().is_empty());
    // still a ghost: ordered again, but not before ghost_after since the first
    r.run(&[1], 30).await;
    assert_eq!(r.process_events(AuditEvent::Intent).len(), 1);
    r.run(&[1], 40).await;
    assert_eq!(r.process_events(AuditEvent::Intent).len(), 2);
    let again = r.reg.order_nodes()[&(W1.to_string(), 1)].clone();
    assert_ne!(again.order_id, order.order_id);
}

#[tokio::test(start_paused = true)]
async fn a_standby_never_orders() {
    let mut r = rig(kill_finished);
    r.leader.set(false);
    r.store.insert(task(1));
    r.store.finish(1, 7, t0());
    r.run(&[1], 200).await;
    assert_eq!(r.ghosts().len(), 1, "a standby still detects");
    assert!(r.reg.order_nodes().is_empty());
    assert!(r.process_events(AuditEvent::Intent).is_empty());
    // leadership arrives: the order follows
    r.leader.set(true);
    r.run(&[1], 10).await;
    assert_eq!(r.reg.order_nodes().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_brake_holds_kill_orders() {
    let mut r = rig(kill_finished);
    r.store.insert(task(1));
    r.store.finish(1, 7, t0());
    let now = r.engine.now();
    r.reg.update(|v| {
        v.remove(NodeKind::Worker, "w2:1234", now);
        v.remove(NodeKind::Worker, "w3:1234", now);
    });
    r.run(&[1], 200).await;
    assert!(r.engine.status_read().brake.engaged());
    assert_eq!(r.ghosts().len(), 1);
    assert!(r.reg.order_nodes().is_empty());
    assert!(r.ghosts()[0].note.as_deref().unwrap().contains("brake"));
}

#[tokio::test(start_paused = true)]
async fn the_rate_limit_and_the_sweep_cap_hold_kill_orders() {
    let mut r = rig(|s| {
        kill_finished(s);
        s.rate.per_minute = 2;
        s.reconcile.max_actions_per_sweep = 1;
    });
    let ids: Vec<i64> = (1..=4).collect();
    for &id in &ids {
        r.store.insert(task(id));
        r.store.finish(id, 7, t0());
    }
    // the first sweep past ghost_after: the cap allows one
    r.run(&ids, 70).await;
    assert_eq!(r.reg.order_nodes().len(), 1);
    // then one token per 30 s (2 per minute): never more orders than tokens
    let mut rate_limited = false;
    for k in 1..=9u64 {
        r.run(&ids, 10).await;
        let n = r.reg.order_nodes().len() as u64;
        // 2 tokens at the start, 1 per 30 s since
        assert!(n <= 2 + (10 * k) / 30, "{n} orders after {k} more sweeps");
        rate_limited |= r
            .ghosts()
            .iter()
            .any(|g| g.note.as_deref().is_some_and(|n| n.contains("rate limit")));
    }
    assert!(rate_limited, "some sweep found the bucket empty");
    assert_eq!(
        r.reg.order_nodes().len(),
        4,
        "every ghost ordered in the end"
    );
}

#[tokio::test(start_paused = true)]
async fn a_running_tasks_process_is_never_ordered_killed() {
    let mut r = rig(|s| s.policy.ghost_process = GhostAction::Kill);
    r.store.insert(task(1));
    let mut other = task(2);
    // another live row on a host the view cannot place: not judged either
    other.host = Some("10.9.9.9:1234".into());
    r.store.insert(other);
    r.run(&[1, 2], 300).await;
    assert!(r.ghosts().is_empty());
    assert!(r.reg.order_nodes().is_empty());
    assert!(r.process_events(AuditEvent::Intent).is_empty());
}

#[tokio::test(start_paused = true)]
async fn superseded_and_vanished_rows_are_ghosts_too() {
    let mut r = rig(|_| {});
    r.store.insert(task(1));
    r.store.set_flag(1, 0);
    // task 2 has no row at all
    r.run(&[1, 2], 90).await;
    let mut ids: Vec<i64> = r.ghosts().iter().map(|g| g.task_id).collect();
    ids.sort();
    assert_eq!(ids, [1, 2]);
    r.no_db_write();
}

#[tokio::test(start_paused = true)]
async fn the_order_goes_to_the_folder_the_agent_reads() {
    let mut r = rig(kill_finished);
    // the worker registered as "W1:1234": the view keys it in lower case
    r.spelling = "W1:1234".into();
    r.store.insert(task(1));
    r.store.finish(1, 7, t0());
    r.run(&[1], 80).await;
    let nodes = r.reg.order_nodes();
    assert!(nodes.contains_key(&("W1:1234".to_string(), 1)), "{nodes:?}");
    let order = nodes[&("W1:1234".to_string(), 1)].clone();
    // outstanding under that spelling: not ordered again
    r.run(&[1], 120).await;
    assert_eq!(r.process_events(AuditEvent::Intent).len(), 1);
    tokio::time::sleep(Duration::from_secs(10)).await;
    r.report(
        &[],
        vec![OrderOutcome {
            order_id: order.order_id,
            result: OrderResult::Gone,
            detail: String::new(),
        }],
    );
    r.engine.sweep(Trigger::Tick).await;
    assert_eq!(r.process_events(AuditEvent::Done).len(), 1);
    assert!(r.reg.order_nodes().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_row_running_on_another_worker_is_a_ghost_here_with_its_whole_row() {
    let mut r = rig(|_| {});
    let mut moved = task(1);
    moved.host = Some("w2:1234".into());
    moved.worker_group = Some("etl".into());
    r.store.insert(moved);
    r.run(&[1], 90).await;
    let g = r.ghosts();
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].evidence.over, reaper_core::ghost::Over::OtherHost);
    assert_eq!(g[0].row_host.as_deref(), Some("w2:1234"));
    // taken from the sweep's candidates in full: rules and views need it
    assert_eq!(g[0].task_type.as_deref(), Some("SHELL"));
    assert_eq!(g[0].worker_group.as_deref(), Some("etl"));
    assert!(
        !r.store
            .calls()
            .iter()
            .any(|c| matches!(c, StoreCall::GhostRead(_))),
        "a candidate is not read again"
    );
    r.no_db_write();
}

/// A ResourceManager's REST API answering `GET /ws/v1/cluster/apps/<id>`
/// for the applications given (404 for any other), on a thread of its own.
fn stub_rm(apps: &[(&str, &str)]) -> String {
    use axum::extract::Path as UrlPath;
    use axum::response::IntoResponse;
    let apps: std::collections::HashMap<String, String> = apps
        .iter()
        .map(|(i, s)| (i.to_string(), s.to_string()))
        .collect();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new().route(
                "/ws/v1/cluster/apps/{id}",
                axum::routing::get(move |UrlPath(id): UrlPath<String>| {
                    let state = apps.get(&id).cloned();
                    async move {
                        match state {
                            Some(s) => axum::Json(serde_json::json!(
                                {"app": {"id": id, "state": s, "finalStatus": "UNDEFINED"}}
                            ))
                            .into_response(),
                            None => axum::http::StatusCode::NOT_FOUND.into_response(),
                        }
                    }
                }),
            );
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    addr
}

/// Sweeps (reporting `tasks` before each) until a ghost shows, in real
/// time: the RM is asked over HTTP, which paused time would time out.
async fn until_ghost(r: &mut Rig, tasks: &[i64]) -> Arc<Vec<reaper_core::ghost::Ghost>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        r.report(tasks, Vec::new());
        r.engine.sweep(Trigger::Tick).await;
        let g = r.ghosts();
        if !g.is_empty() {
            return g;
        }
        assert!(std::time::Instant::now() < deadline, "no ghost");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ghosts_view_carries_its_remote_apps_as_the_zombies_does() {
    let rm = stub_rm(&[("application_7_1", "RUNNING")]);
    let mut r = rig(|s| {
        s.reconcile.ghost_after = Duration::ZERO;
        s.yarn.resource_managers = vec![rm];
        // learned by an earlier run, and no longer known to the RM (404)
        let kept = crate::yarn::KnownApps::beside(&s.audit.path);
        std::fs::write(
            kept,
            "{\"task_id\":1,\"app_id\":\"application_7_2\",\"host\":\"w1:1234\",\"learned_at\":\"2023-11-14T22:00:00Z\"}\n",
        )
        .unwrap();
    });
    r.app_ids = vec!["application_7_1".into()];
    r.store.insert(task(1));
    r.store.finish(1, 7, t0());
    let g = until_ghost(&mut r, &[1]).await;
    assert_eq!(g.len(), 1);
    let view = serde_json::to_value(crate::views::GhostView::new(&g[0])).unwrap();
    assert_eq!(
        view["remote_apps"],
        serde_json::json!([
            {"id": "application_7_1", "state": "RUNNING", "final_status": "UNDEFINED"},
            {"id": "application_7_2", "state": null, "final_status": null},
        ]),
        "the reported id with the RM's state, the kept one unknown (404)"
    );
    let gauge = |s: &str| r.engine.metrics.remote_apps.with_label_values(&[s]).get();
    assert_eq!((gauge("running"), gauge("unknown")), (1, 1));
    // shown, never acted on: the policy is report and DS is not written
    assert_eq!(g[0].disposition, reaper_core::Disposition::Report);
    r.no_db_write();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_yarn_a_ghosts_view_has_no_remote_apps_as_the_zombies_has_none() {
    let mut r = rig(|s| s.reconcile.ghost_after = Duration::ZERO);
    r.app_ids = vec!["application_7_1".into()];
    r.store.insert(task(1));
    r.store.finish(1, 7, t0());
    let g = until_ghost(&mut r, &[1]).await;
    let view = serde_json::to_value(crate::views::GhostView::new(&g[0])).unwrap();
    assert_eq!(view["remote_apps"], serde_json::json!([]));
}

/// The JSON `/api/v1/ghosts` and `check --format json` show for a ghost.
fn view_json(g: &reaper_core::ghost::Ghost) -> serde_json::Value {
    serde_json::to_value(crate::views::GhostView::new(g)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_row_never_read_is_row_never_seen_in_the_status_the_audit_and_check() {
    let mut r = rig(|s| s.policy.ghost_process = GhostAction::Kill);
    // task 5 has no row this daemon ever read (a lagging replica, say)
    r.run(&[5], 120).await;
    let g = r.ghosts();
    assert_eq!(g.len(), 1);
    let v = view_json(&g[0]);
    assert_eq!(v["note"], "row_never_seen");
    assert_eq!(v["action"], "report");
    assert_eq!(v["evidence"]["over"], "no_row");
    assert!(r.reg.order_nodes().is_empty(), "never killed");
    let detected = r.process_events(AuditEvent::Detected);
    assert_eq!(detected.len(), 1);
    assert_eq!(detected[0].detail.as_deref(), Some("row_never_seen"));
    assert_eq!(detected[0].evidence.as_ref().unwrap()["over"], "no_row");
    // `check` never read it either: the same, in one look
    let checked = r.engine.check().await.unwrap().ghosts;
    assert_eq!(checked.len(), 1);
    let v = view_json(&checked[0]);
    assert_eq!(
        (v["task_id"].as_i64(), v["note"].as_str()),
        (Some(5), Some("row_never_seen"))
    );
    r.no_db_write();
}

#[tokio::test(start_paused = true)]
async fn rows_missing_at_once_hold_every_kill_as_a_database_mismatch() {
    let mut r = rig(|s| {
        kill_finished(s);
        s.brake.min_zombies = 2;
    });
    r.store.insert(task(1));
    r.store.finish(1, 7, t0());
    // 7 and 8: listed, no row
    r.run(&[1, 7, 8], 120).await;
    let g = r.ghosts();
    let one = g.iter().find(|g| g.task_id == 1).unwrap();
    let v = view_json(one);
    assert_eq!(v["note"], "database_mismatch", "{v:#}");
    assert_eq!(v["evidence"]["over"], "terminal_state");
    assert!(r.reg.order_nodes().is_empty());
    assert!(r.process_events(AuditEvent::Intent).is_empty());
    let detected = r.process_events(AuditEvent::Detected);
    let d1 = detected.iter().find(|d| d.task_id == Some(1)).unwrap();
    assert_eq!(d1.detail.as_deref(), Some("database_mismatch"));
    let checked = r.engine.check().await.unwrap().ghosts;
    let c1 = checked.iter().find(|g| g.task_id == 1).unwrap();
    assert_eq!(view_json(c1)["note"], "database_mismatch");
    // the rows arrive: the kill follows
    r.store.insert(task(7));
    r.store.insert(task(8));
    r.run(&[1, 7, 8], 10).await;
    assert_eq!(r.reg.order_nodes().len(), 1);
    r.no_db_write();
}

#[tokio::test(start_paused = true)]
async fn a_live_row_of_another_worker_on_the_same_machine_is_no_ghost() {
    let mut r = rig(|s| s.policy.ghost_process = GhostAction::Kill);
    // a second worker JVM on w1's machine
    let now = r.engine.now();
    r.reg.update(|v| {
        v.upsert(NodeKind::Worker, reaper_core::NodeInfo::new("w1:1235", now));
    });
    let mut beside = task(1);
    beside.host = Some("w1:1235".into());
    r.store.insert(beside);
    r.run(&[1], 300).await;
    assert!(r.ghosts().is_empty(), "{:?}", r.ghosts());
    assert!(r.reg.order_nodes().is_empty());
    r.no_db_write();
}
