//! SPEC §12 in the planner: `process_gone` and the hold while a fresh agent
//! still lists the task's process.

use super::*;
use crate::agent::{AgentReport, AgentSeen, AgentTask};
use crate::policy::{Action, FollowUp};
use crate::reason::Reason;
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
        tty_tasks: 0,
        app_id_sources: None,
        worker: "w1:1234".into(),
        agent_version: "test".into(),
        seq: 1,
        scan_started_at: t(scan_started).timestamp_millis(),
        scan_ms: 5,
        exec_base: "/tmp/ds".into(),
        unreadable,
        orders: Vec::new(),
        blind: None,
        tasks: tasks
            .iter()
            .map(|&id| AgentTask {
                lineage: None,
                task_id: id,
                workflow_instance_id: 9,
                pids: vec![100],
                started_at: t(0).timestamp_millis(),
                processes: vec![],
                app_ids: vec![],
            })
            .collect(),
    }
}

/// The agent of w1 sends a report at `at` (scan started 1 s before).
fn send(v: &mut RegistryView, at: i64, tasks: &[i64], unreadable: u64) {
    let prev = v.agents.get("w1:1234").map(|a| (**a).clone());
    let seen = AgentSeen::received(
        prev.as_ref(),
        Some(report(at - 1, tasks, unreadable)),
        t(at),
        false,
        STALE,
    );
    v.agents.insert("w1:1234".into(), seen.into());
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
    // a stale spell: the next report restarts the agent's freshness, and a
    // listing before it no longer counts (seen, then gone, in one streak)
    let mut v2 = view();
    let mut s2 = Sweeper::new();
    send(&mut v2, 20, &[1], 0);
    send(&mut v2, 30, &[], 0);
    s2.at(&v2, &c, 30);
    send(&mut v2, 80, &[], 0); // 50 s after the previous: stale in between
    for at in (90..=300).step_by(10) {
        send(&mut v2, at, &[], 0);
        assert!(
            s2.at(&v2, &c, at).zombies.is_empty(),
            "listed only before the streak that began at 80 (at {at})"
        );
    }
    send(&mut v2, 310, &[1], 0);
    for at in (320..=370).step_by(10) {
        send(&mut v2, at, &[], 0);
        assert!(s2.at(&v2, &c, at).zombies.is_empty(), "at {at}");
    }
    send(&mut v2, 380, &[], 0);
    // 380 - 320 = 60
    let pl = s2.at(&v2, &c, 380);
    assert_eq!(pl.zombies[0].reason, Reason::ProcessGone);
    assert_eq!(pl.zombies[0].evidence.process_missing_since, Some(t(320)));
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
    send(&mut v, 20, &[1, 4], 0);
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

/// The agent of w1 sends a report at `at`, as `send`, blind or not.
fn send_blind(v: &mut RegistryView, at: i64, tasks: &[i64], blind: Option<&str>) {
    let prev = v.agents.get("w1:1234").map(|a| (**a).clone());
    let mut r = report(at - 1, tasks, 0);
    r.blind = blind.map(str::to_string);
    let seen = AgentSeen::received(prev.as_ref(), Some(r), t(at), false, STALE);
    v.agents.insert("w1:1234".into(), seen.into());
}

#[test]
fn a_task_the_agent_never_listed_is_never_process_gone() {
    // DS writes RUNNING before the process exists: a task downloading a large
    // jar for minutes has no process yet, and a fresh agent lacks it.
    let mut v = view();
    let c = [shell(1, 10)];
    let mut s = Sweeper::new();
    for at in (20..=600).step_by(10) {
        send(&mut v, at, &[], 0);
        assert!(s.at(&v, &c, at).zombies.is_empty(), "at {at}");
    }
    assert!(s.state.missing_since.is_empty());
    // once listed, then gone, the clock runs from the first report after
    send(&mut v, 610, &[1], 0);
    for at in (620..=670).step_by(10) {
        send(&mut v, at, &[], 0);
        assert!(s.at(&v, &c, at).zombies.is_empty(), "at {at}");
    }
    send(&mut v, 680, &[], 0);
    let pl = s.at(&v, &c, 680);
    assert_eq!(pl.zombies[0].reason, Reason::ProcessGone);
    assert_eq!(pl.zombies[0].evidence.process_missing_since, Some(t(620)));
    assert_eq!(pl.zombies[0].evidence.process_seen_at, Some(t(610)));
}

#[test]
fn an_agent_restart_needs_a_new_listing_before_absence() {
    let mut v = view();
    let c = [shell(1, 10)];
    let mut s = Sweeper::new();
    send(&mut v, 20, &[1], 0);
    // the agent restarts: its node goes, a new one comes
    let gone = v.agents["w1:1234"].gone(t(25));
    v.agents.insert("w1:1234".into(), gone.into());
    for at in (30..=400).step_by(10) {
        send(&mut v, at, &[], 0);
        assert!(s.at(&v, &c, at).zombies.is_empty(), "at {at}");
    }
}

#[test]
fn yarn_task_types_on_1_2_and_1_3_are_not_judged_by_their_process() {
    for (line, judged) in [
        (DsLine::V1_2, false),
        (DsLine::V1_3, false),
        (DsLine::V3_2, true),
    ] {
        let mut v = view();
        let mut s = Sweeper::new();
        s.p.line = line;
        let mut c = shell(1, 10);
        c.task_type = "SPARK".into();
        let c = [c];
        send(&mut v, 20, &[1], 0);
        let mut found = false;
        for at in (30..=200).step_by(10) {
            send(&mut v, at, &[], 0);
            found |= !s.at(&v, &c, at).zombies.is_empty();
        }
        assert_eq!(found, judged, "{line}");
    }
}

#[test]
fn an_execute_path_outside_the_agents_exec_base_is_not_judged_by_its_process() {
    let run = |path: Option<&str>| {
        let mut v = view();
        let mut s = Sweeper::new();
        let mut c = shell(1, 10);
        c.execute_path = path.map(Box::from);
        let c = [c];
        send(&mut v, 20, &[1], 0);
        let mut found = false;
        for at in (30..=200).step_by(10) {
            send(&mut v, at, &[], 0);
            found |= !s.at(&v, &c, at).zombies.is_empty();
        }
        found
    };
    // the agent's exec_base is /tmp/ds
    assert!(run(None));
    assert!(run(Some("")));
    assert!(run(Some("/tmp/ds/exec/process/1/2/3/1")));
    assert!(!run(Some("/data/ds/exec/process/1/2/3/1")));
    assert!(!run(Some("/tmp/ds2/exec/process/1/2/3/1")));
}

#[test]
fn the_hold_rests_on_the_last_listing_whatever_came_after() {
    let c = [shell(1, 10)];
    let lost = || {
        let mut v = view();
        v.remove(NodeKind::Worker, "w1:1234", t(100));
        v
    };
    let held = |pl: &Plan| {
        pl.zombies[0].disposition == Disposition::Blocked(Blocked::ProcessAlive)
            && pl.action_count() == 0
    };
    // a listing in a report with an unreadable process still holds
    let mut v = lost();
    let mut s = Sweeper::new();
    send(&mut v, 170, &[1], 1);
    assert!(held(&s.at(&v, &c, 171)));
    // ... and so does one after which the agent saw only unreadable scans
    send(&mut v, 180, &[], 1);
    assert!(held(&s.at(&v, &c, 181)));
    // a blind report listing it holds; a blind report lacking it releases nothing
    let mut v = lost();
    let mut s = Sweeper::new();
    send_blind(&mut v, 170, &[1], Some("worker pid 77 not visible"));
    send_blind(&mut v, 180, &[], Some("worker pid 77 not visible"));
    assert!(held(&s.at(&v, &c, 181)));
    // the agent's node went away (its session lost in the same blip)
    let mut v = lost();
    let mut s = Sweeper::new();
    send(&mut v, 170, &[1], 0);
    let gone = v.agents["w1:1234"].gone(t(172));
    v.agents.insert("w1:1234".into(), gone.into());
    assert!(held(&s.at(&v, &c, 200)));
    assert!(
        held(&s.at(&v, &c, 205)),
        "35 s after the listing: still held"
    );
    let pl = s.at(&v, &c, 206);
    assert_eq!(
        pl.action_count(),
        1,
        "the listing is older than agent_stale_after"
    );
    assert_eq!(pl.zombies[0].note, None);
    // a complete report after the listing that lacks it releases at once
    let mut v = lost();
    let mut s = Sweeper::new();
    send(&mut v, 170, &[1], 1);
    send(&mut v, 175, &[], 0);
    assert_eq!(s.at(&v, &c, 176).action_count(), 1);
}

#[test]
fn a_sub_process_task_follows_its_child_workflow() {
    let mut p = policy();
    p.master_lost = Action::Fail;
    p.workflow = FollowUp::Recover;
    let mut v = view();
    v.remove(NodeKind::Master, "m1:5678", t(1));
    let mut c = Candidate::new(5, "SUB_PROCESS", 1, Some("m1:5678"));
    c.submit_time = Some(t(0));
    c.workflow_instance_id = Some(9);
    c.workflow_host = Some("m1:5678".into());
    for (child, acted) in [
        (Some(1), false),
        (Some(12), false),
        (Some(7), true),
        (None, true),
    ] {
        c.child_workflow_state = child;
        let pl = plan(&v, &[c.clone()], t(1000), &p, &SafetyState::default());
        let z = &pl.zombies[0];
        assert_eq!(z.reason, Reason::MasterLost);
        assert_eq!(pl.action_count() == 1, acted, "child state {child:?}");
        if !acted {
            assert_eq!(
                z.disposition,
                Disposition::Blocked(Blocked::ChildWorkflowRunning)
            );
            assert_eq!(z.note.as_deref(), Some(CHILD_WORKFLOW_RUNNING));
            assert_eq!(z.workflow, FollowUp::None);
        } else {
            assert_eq!(z.workflow, FollowUp::Recover);
        }
    }
    // SUB_WORKFLOW on 3.3 likewise
    p.line = DsLine::V3_3;
    c.task_type = "SUB_WORKFLOW".into();
    c.child_workflow_state = Some(1);
    let pl = plan(&v, &[c], t(1000), &p, &SafetyState::default());
    assert_eq!(pl.action_count(), 0);
}

#[test]
fn no_recover_while_ds_fails_the_owning_master_over() {
    let mut p = policy();
    p.workflow = FollowUp::Recover;
    p.startup_settle = Duration::from_secs(30);
    let mut v = view();
    v.state = ViewState::Valid { since: t(-1000) };
    v.remove(NodeKind::Worker, "w1:1234", t(100));
    v.remove(NodeKind::Master, "m1:5678", t(100));
    let c = [shell(1, 10)];
    let recover = |v: &RegistryView, p: &Policy, now: i64| {
        let pl = plan(v, &c, t(now), p, &SafetyState::default());
        (pl.zombies[0].workflow, pl.zombies[0].note.clone())
    };
    assert_eq!(recover(&v, &p, 500).0, FollowUp::Recover);
    v.observe_failover_lock("m1:5678", 1, t(400));
    assert_eq!(
        recover(&v, &p, 500),
        (FollowUp::None, Some(DS_FAILOVER_IN_PROGRESS.to_string()))
    );
    v.observe_failover_lock("m1:5678", 0, t(510));
    assert_eq!(
        recover(&v, &p, 539).0,
        FollowUp::None,
        "settling after release"
    );
    assert_eq!(recover(&v, &p, 540).0, FollowUp::Recover);
    // another master's failover is not this workflow's
    v.observe_failover_lock("m9:5678", 1, t(600));
    assert_eq!(recover(&v, &p, 600).0, FollowUp::Recover);
    // 1.3's one lock covers every master
    p.line = DsLine::V1_3;
    v.observe_failover_lock(crate::view::ANY_MASTER, 1, t(600));
    assert_eq!(recover(&v, &p, 600).0, FollowUp::None);
    // 3.3's own update is conditional: no guard
    p.line = DsLine::V3_3;
    v.observe_failover_lock("m1:5678", 1, t(600));
    assert_eq!(recover(&v, &p, 600).0, FollowUp::Recover);
}
