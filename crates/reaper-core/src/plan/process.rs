//! SPEC §12 in the planner: `process_gone` and the hold while a fresh agent
//! still lists the task's process.

use super::*;
use crate::agent::{AgentReport, AgentSeen, AgentTask};
use crate::view::NodeInfo;
use crate::ViewState;
use chrono::TimeZone;
use std::time::Duration;

fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

const STALE: Duration = Duration::from_secs(35);

fn policy() -> Policy {
    let mut p = Policy::defaults(DsLine::V3_2);
    p.worker_lost = Action::Fail;
    p.worker_restarted = Action::Fail;
    p.heartbeat_stale = Action::Fail;
    p.process_gone = Action::Fail;
    p.startup_settle = Duration::ZERO;
    p.process_gone_after = Duration::from_secs(60);
    p.agent_stale_after = STALE;
    p
}

fn view() -> RegistryView {
    let mut v = RegistryView::invalid(t(0), "x");
    v.state = ViewState::Valid { since: t(0) };
    for w in ["w1:1234", "w2:1234", "w3:1234"] {
        let mut n = NodeInfo::new(w, t(0));
        n.startup_time = Some(t(-1000));
        v.upsert(NodeKind::Worker, n);
    }
    v.upsert(NodeKind::Master, NodeInfo::new("m1:5678", t(0)));
    v
}

fn report(scan_started: i64, tasks: &[i64], unreadable: u64) -> AgentReport {
    AgentReport {
        worker: "w1:1234".into(),
        agent_version: "test".into(),
        seq: 1,
        scan_started_at: t(scan_started).timestamp_millis(),
        scan_ms: 5,
        exec_base: "/tmp/ds".into(),
        unreadable,
        tasks: tasks
            .iter()
            .map(|&id| AgentTask {
                task_id: id,
                workflow_instance_id: 9,
                pids: vec![100],
                started_at: t(0).timestamp_millis(),
            })
            .collect(),
    }
}

/// The agent of w1 sends a report at `at` (scan started 1 s before).
fn send(v: &mut RegistryView, at: i64, tasks: &[i64], unreadable: u64) {
    let prev = v.agents.get("w1:1234").cloned();
    let seen = AgentSeen::received(
        prev.as_ref(),
        Some(report(at - 1, tasks, unreadable)),
        t(at),
        false,
        STALE,
    );
    v.agents.insert("w1:1234".into(), seen);
}

fn shell(id: i64, start: i64) -> Candidate {
    let mut c = Candidate::new(id, "SHELL", 1, Some("w1:1234"));
    c.submit_time = Some(t(start - 1));
    c.start_time = Some(t(start));
    c.workflow_instance_id = Some(9);
    c.workflow_host = Some("m1:5678".into());
    c
}

/// Plans repeatedly, carrying the state like the daemon does.
struct Sweeper {
    state: SafetyState,
    p: Policy,
}

impl Sweeper {
    fn new() -> Self {
        Sweeper {
            state: SafetyState::default(),
            p: policy(),
        }
    }
    fn at(&mut self, v: &RegistryView, c: &[Candidate], now: i64) -> Plan {
        let pl = plan(v, c, t(now), &self.p, &self.state);
        self.state = pl.next.clone();
        pl
    }
}

#[test]
fn a_process_missing_from_a_fresh_agent_for_the_threshold_is_gone() {
    let mut v = view();
    let c = [shell(1, 10)];
    let mut s = Sweeper::new();
    send(&mut v, 20, &[1], 0);
    assert!(s.at(&v, &c, 20).zombies.is_empty(), "listed: alive");
    // the process dies; reports lack it from t(30) on
    send(&mut v, 30, &[], 0);
    let pl = s.at(&v, &c, 31);
    assert!(pl.zombies.is_empty());
    for at in [40, 50, 60, 70, 80] {
        send(&mut v, at, &[], 0);
        assert!(s.at(&v, &c, at).zombies.is_empty(), "at {at}");
    }
    send(&mut v, 90, &[], 0);
    let pl = s.at(&v, &c, 90);
    let z = &pl.zombies[0];
    assert_eq!(z.reason, Reason::ProcessGone);
    assert_eq!(z.disposition, Disposition::Act);
    assert_eq!(z.evidence.process_missing_since, Some(t(30)));
    assert_eq!(z.evidence.process_seen_at, Some(t(20)));
}

#[test]
fn a_report_listing_the_task_again_or_a_gap_restarts_the_clock() {
    let mut v = view();
    let c = [shell(1, 10)];
    let mut s = Sweeper::new();
    send(&mut v, 30, &[], 0);
    s.at(&v, &c, 30);
    // listed again between two sweeps (a slow scan missed it once)
    send(&mut v, 40, &[1], 0);
    send(&mut v, 50, &[], 0);
    s.at(&v, &c, 50);
    for at in [60, 70, 80, 90, 100] {
        send(&mut v, at, &[], 0);
    }
    assert!(
        s.at(&v, &c, 109).zombies.is_empty(),
        "missing since 50 only, not 30"
    );
    let pl = s.at(&v, &c, 110);
    assert_eq!(pl.zombies[0].reason, Reason::ProcessGone);
    assert_eq!(pl.zombies[0].evidence.process_missing_since, Some(t(50)));
    // a stale spell: the next report restarts the agent's freshness
    let mut v2 = view();
    let mut s2 = Sweeper::new();
    send(&mut v2, 30, &[], 0);
    s2.at(&v2, &c, 30);
    send(&mut v2, 80, &[], 0); // 50 s after the previous: stale in between
    send(&mut v2, 95, &[], 0);
    assert!(
        s2.at(&v2, &c, 95).zombies.is_empty(),
        "clock restarted at 80"
    );
    for at in [105, 115, 125, 135] {
        send(&mut v2, at, &[], 0);
    }
    assert!(s2.at(&v2, &c, 139).zombies.is_empty());
    // 140 - 80 = 60
    let pl = s2.at(&v2, &c, 140);
    assert_eq!(pl.zombies[0].reason, Reason::ProcessGone);
    assert_eq!(pl.zombies[0].evidence.process_missing_since, Some(t(80)));
}

#[test]
fn no_absence_is_proven_by_a_stale_or_unreadable_agent_or_an_early_scan() {
    let c = [shell(1, 10)];
    // unreadable processes: never fresh
    let mut v = view();
    let mut s = Sweeper::new();
    for at in (30..=200).step_by(10) {
        send(&mut v, at, &[], 1);
        assert!(s.at(&v, &c, at).zombies.is_empty(), "unreadable at {at}");
    }
    // the agent stopped reporting: stale
    let mut v = view();
    let mut s = Sweeper::new();
    send(&mut v, 30, &[], 0);
    for at in [40, 60, 100, 200] {
        assert!(s.at(&v, &c, at).zombies.is_empty(), "stale at {at}");
    }
    // a task that started after the agent's scan (with skew) is never missing
    let late = [shell(2, 500)];
    let mut v = view();
    let mut s = Sweeper::new();
    for at in (400..=600).step_by(10) {
        send(&mut v, at, &[], 0);
        let pl = s.at(&v, &late, at + 1);
        // scans start at at-1; only scans after 505 count
        assert!(pl.zombies.is_empty() || at - 1 > 505, "at {at}");
    }
    // the agent's node is gone: nothing to go on
    let mut v = view();
    let mut s = Sweeper::new();
    send(&mut v, 30, &[], 0);
    s.at(&v, &c, 30);
    v.agents.clear();
    assert!(s.at(&v, &c, 200).zombies.is_empty());
}

#[test]
fn only_running_tasks_with_a_process_of_their_own_are_judged() {
    let mut v = view();
    let mut sql = shell(1, 10);
    sql.task_type = "SQL".into();
    let mut dep = shell(2, 10);
    dep.task_type = "DEPENDENT".into();
    dep.host = Some("m1:5678".into());
    let mut dispatched = shell(3, 10);
    dispatched.state = 17;
    let c = [sql, dep, dispatched];
    let mut s = Sweeper::new();
    for at in (30..=300).step_by(10) {
        send(&mut v, at, &[], 0);
        assert!(s.at(&v, &c, at).zombies.is_empty(), "at {at}");
    }
    // a configured list replaces the line's command types
    let mut v = view();
    let mut s = Sweeper::new();
    s.p.process_task_types = Some(vec!["sql".into()]);
    let c = [shell(1, 10), {
        let mut q = shell(4, 10);
        q.task_type = "SQL".into();
        q
    }];
    let mut last = None;
    for at in (30..=100).step_by(10) {
        send(&mut v, at, &[], 0);
        last = Some(s.at(&v, &c, at));
    }
    let ids: Vec<i64> = last.unwrap().zombies.iter().map(|z| z.task.id).collect();
    assert_eq!(ids, vec![4]);
}

#[test]
fn a_lost_worker_whose_agent_lists_the_process_is_held() {
    let mut v = view();
    let c = [shell(1, 10)];
    let mut s = Sweeper::new();
    v.remove(NodeKind::Worker, "w1:1234", t(100));
    send(&mut v, 170, &[1], 0);
    let pl = s.at(&v, &c, 170);
    let z = &pl.zombies[0];
    assert_eq!(z.reason, Reason::WorkerLost);
    assert_eq!(z.disposition, Disposition::Blocked(Blocked::ProcessAlive));
    assert_eq!(z.note.as_deref(), Some(PROCESS_ALIVE));
    assert_eq!(pl.action_count(), 0);
    // the process ends: acted on at once (the worker has long been lost)
    send(&mut v, 180, &[], 0);
    let pl = s.at(&v, &c, 180);
    assert_eq!(pl.zombies[0].reason, Reason::WorkerLost);
    assert_eq!(pl.action_count(), 1);
    // with the hold off, the listed process does not hold
    let mut s = Sweeper::new();
    s.p.hold_while_process_alive = false;
    send(&mut v, 190, &[1], 0);
    assert_eq!(s.at(&v, &c, 190).action_count(), 1);
    // a stale agent holds nothing
    let mut s = Sweeper::new();
    send(&mut v, 200, &[1], 0);
    assert_eq!(s.at(&v, &c, 300).action_count(), 1);
}
