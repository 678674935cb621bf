//! SPEC §15 in the planner: which listed tasks are ghosts, when, which of
//! their processes count, and when a kill is ordered.

use super::*;
use crate::agent::{AgentProcess, AgentReport, AgentTask};
use crate::brake::BrakeState;
use crate::line::DsLine;
use crate::plan::{Blocked, Disposition};
use crate::rate::TokenBucket;
use crate::view::NodeInfo;
use crate::view::NodeKind;
use crate::ViewState;
use chrono::TimeZone;

fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

fn ms(s: i64) -> i64 {
    t(s).timestamp_millis()
}

const STALE: Duration = Duration::from_secs(35);
const W1: &str = "w1:1234";

fn policy() -> GhostPolicy {
    GhostPolicy {
        ghost_after: Duration::from_secs(60),
        startup_settle: Duration::ZERO,
        agent_stale_after: STALE,
        ..GhostPolicy::defaults(DsLine::V3_2)
    }
}

fn view() -> RegistryView {
    let mut v = RegistryView::invalid(t(0), "x");
    v.state = ViewState::Valid { since: t(0) };
    for w in [W1, "w2:1234"] {
        let mut n = NodeInfo::new(w, t(0));
        n.process_id = Some(4242);
        v.upsert(NodeKind::Worker, n);
    }
    v
}

fn proc_(pid: i32, started: i64, tty: bool) -> AgentProcess {
    AgentProcess {
        pid,
        started_at: ms(started),
        tty,
    }
}

/// The agent of w1 reports at `at` the tasks with their processes.
fn send(v: &mut RegistryView, at: i64, tasks: &[(i64, Vec<AgentProcess>)]) {
    let prev = v.agents.get(W1).cloned();
    let report = AgentReport {
        tty_tasks: 0,
        app_id_sources: None,
        worker: W1.into(),
        agent_version: "test".into(),
        seq: at as u64,
        scan_started_at: ms(at - 1),
        scan_ms: 5,
        exec_base: "/tmp/ds".into(),
        unreadable: 0,
        blind: None,
        tasks: tasks
            .iter()
            .map(|(id, procs)| AgentTask {
                lineage: None,
                app_ids: vec![],
                task_id: *id,
                workflow_instance_id: 9,
                pids: procs.iter().map(|p| p.pid).collect(),
                started_at: procs.iter().map(|p| p.started_at).min().unwrap_or(0),
                processes: procs.clone(),
            })
            .collect(),
        orders: Vec::new(),
    };
    let seen = AgentSeen::received(prev.as_deref(), Some(report), t(at), false, STALE);
    v.agents.insert(W1.into(), seen.into());
}

/// A row started at t(10) on w1, in `state`, ended at `end` when finished.
fn row(id: i64, state: i32, flag: i32, host: &str, end: Option<i64>) -> GhostRow {
    let mut c = Candidate::new(id, "SHELL", state, Some(host));
    c.submit_time = Some(t(9));
    c.start_time = Some(t(10));
    c.workflow_instance_id = Some(9);
    c.worker_group = Some("default".into());
    c.project_code = Some(7);
    GhostRow {
        task: c,
        flag,
        end_time: end.map(t),
        newer_attempt: None,
    }
}

/// `ghost_process = "kill"` with a rule naming `terminal_state`: these
/// tests' rows are finished ones, which are killed only so (SPEC §15).
fn kill_finished(p: &mut GhostPolicy) {
    p.action = GhostAction::Kill;
    p.rules = vec![GhostRule {
        over: Some(vec![Over::Terminal]),
        ..GhostRule::default()
    }];
}

/// Sweeps repeatedly, carrying memory and safety state like the engine.
struct Sweeper {
    memory: GhostMemory,
    budget: Budget,
    p: GhostPolicy,
    outstanding: BTreeSet<(String, i64)>,
}

impl Sweeper {
    fn new() -> Self {
        Sweeper {
            memory: GhostMemory::new(),
            budget: Budget::new(
                policy().max_actions_per_sweep,
                policy().startup_settle,
                Some(TokenBucket::full(120, t(0))),
            ),
            p: policy(),
            outstanding: BTreeSet::new(),
        }
    }

    fn at(&mut self, v: &RegistryView, rows: &[GhostRow], now: i64) -> Vec<Ghost> {
        let read = listed_ids(v, t(now), STALE);
        let rows: BTreeMap<i64, GhostRow> = rows
            .iter()
            .filter(|r| read.contains(&r.task.id))
            .map(|r| (r.task.id, r.clone()))
            .collect();
        let pl = plan_ghosts(
            v,
            &ListedRead {
                read: &read,
                rows: &rows,
                live: &IdSet::new(),
                outstanding: &self.outstanding,
            },
            &self.memory,
            t(now),
            &self.p,
            &mut self.budget,
        );
        self.memory = pl.memory;
        // a new sweep: the cap starts over, the bucket carries on
        self.budget.taken = 0;
        for g in pl
            .ghosts
            .iter()
            .filter(|g| g.disposition == Disposition::Act)
        {
            ordered(&mut self.memory, &g.worker, g.task_id, t(now));
        }
        pl.ghosts
    }
}

/// Reports every 10 s from `from` to `to`, a sweep after each; the ghosts of each sweep.
fn run(
    s: &mut Sweeper,
    v: &mut RegistryView,
    rows: &[GhostRow],
    tasks: &[(i64, Vec<AgentProcess>)],
    from: i64,
    to: i64,
) -> Vec<(i64, Vec<Ghost>)> {
    (from..=to)
        .step_by(10)
        .map(|at| {
            send(v, at, tasks);
            (at, s.at(v, rows, at + 1))
        })
        .collect()
}

#[test]
fn a_success_row_is_a_ghost_after_ghost_after_and_two_reports_not_before() {
    let mut v = view();
    let mut s = Sweeper::new();
    let tasks = [(1, vec![proc_(100, 11, false), proc_(101, 12, false)])];
    // live while RUNNING on w1
    let running = [row(1, 1, 1, W1, None)];
    for (at, g) in run(&mut s, &mut v, &running, &tasks, 20, 50) {
        assert!(
            g.is_empty(),
            "a running row's process is no ghost (at {at})"
        );
    }
    // SUCCESS written at t(55); first read over by the sweep at t(61)
    let done = [row(1, 7, 1, W1, Some(55))];
    let out = run(&mut s, &mut v, &done, &tasks, 60, 130);
    for (at, g) in &out {
        if *at + 1 < 61 + 60 {
            assert!(g.is_empty(), "within ghost_after (at {at})");
        }
    }
    let (at, g) = out.iter().find(|(_, g)| !g.is_empty()).unwrap();
    assert_eq!(
        *at + 1,
        121,
        "ghost_after after the first read that saw it over"
    );
    let g = &g[0];
    assert_eq!(g.worker, W1);
    assert_eq!(g.pids(), vec![100, 101]);
    assert_eq!(g.started_at, Some(t(11)));
    assert_eq!(g.row_state.as_deref(), Some("SUCCESS"));
    assert_eq!(g.row_flag, Some(1));
    assert_eq!(g.evidence.over, Over::Terminal);
    assert_eq!(g.evidence.over_since, t(61));
    assert!(g.evidence.reports_since >= 2);
    assert_eq!(g.action, GhostAction::Report);
    assert_eq!(g.disposition, Disposition::Report);
}

#[test]
fn two_fresh_reports_are_needed_whatever_the_time() {
    let mut v = view();
    let mut s = Sweeper::new();
    let tasks = [(1, vec![proc_(100, 11, false)])];
    let done = [row(1, 6, 1, W1, Some(15))];
    send(&mut v, 20, &tasks);
    assert!(s.at(&v, &done, 21).is_empty());
    // one report after the first sight only, long past ghost_after
    send(&mut v, 40, &tasks);
    assert!(s.at(&v, &done, 54).is_empty());
    // the agent then stops reporting: stale, nothing judged, and the clock
    // restarts with its next streak
    assert!(s.at(&v, &done, 200).is_empty());
    send(&mut v, 300, &tasks);
    assert!(s.at(&v, &done, 301).is_empty());
    send(&mut v, 310, &tasks);
    send(&mut v, 320, &tasks);
    assert!(
        s.at(&v, &done, 321).is_empty(),
        "ghost_after counts from 301"
    );
    for at in (330..=360).step_by(10) {
        send(&mut v, at, &tasks);
    }
    assert_eq!(s.at(&v, &done, 361).len(), 1);
}

#[test]
fn every_kind_of_over() {
    let tasks = |id: i64| vec![(id, vec![proc_(100 + id as i32, 11, false)])];
    let mut superseded = row(2, 8, 0, W1, None);
    superseded.newer_attempt = Some(NewerAttempt {
        id: 20,
        host: Some("w2:1234".into()),
        submit_time: Some(t(40)),
    });
    let cases: Vec<(i64, Option<GhostRow>, Over)> = vec![
        (1, Some(row(1, 9, 1, W1, Some(30))), Over::Terminal),
        (2, Some(superseded), Over::NeedFaultTolerance),
        (3, Some(row(3, 1, 0, W1, None)), Over::Superseded),
        (4, Some(row(4, 1, 1, "w2:1234", None)), Over::OtherHost),
        (5, None, Over::NoRow),
    ];
    for (id, r, kind) in cases {
        let mut v = view();
        let mut s = Sweeper::new();
        let rows: Vec<GhostRow> = r.into_iter().collect();
        let out = run(&mut s, &mut v, &rows, &tasks(id), 50, 130);
        let g = &out.last().unwrap().1;
        assert_eq!(g.len(), 1, "{kind:?}");
        assert_eq!(g[0].evidence.over, kind);
        if id == 2 {
            assert_eq!(g[0].newer_attempt.as_ref().unwrap().id, 20);
            assert_eq!(g[0].evidence.newer_attempt_host.as_deref(), Some("w2:1234"));
        }
        if id == 5 {
            assert_eq!(g[0].row_state, None);
            assert_eq!(
                g[0].workflow_instance_id,
                Some(9),
                "from the agent's listing"
            );
        }
    }
}

#[test]
fn live_rows_on_this_worker_are_never_ghosts() {
    let tasks = [(1, vec![proc_(100, 11, false)])];
    let live = [
        row(1, 1, 1, W1, None),
        row(1, 1, 1, " W1:1234 ", None),
        row(1, 17, 1, W1, None),
        // no host yet, or a host the view cannot place: not another host's
        row(1, 1, 1, "", None),
        row(1, 1, 1, "10.9.9.9:1234", None),
    ];
    for r in live {
        let mut v = view();
        let mut s = Sweeper::new();
        s.p.action = GhostAction::Kill;
        let out = run(&mut s, &mut v, std::slice::from_ref(&r), &tasks, 20, 300);
        assert!(out.iter().all(|(_, g)| g.is_empty()), "{:?}", r.task.host);
    }
    // the row names this worker by its heartbeat address (3.3)
    let mut v = view();
    let n = NodeInfo::new(W1, t(0)).with_address(Some("10.0.0.1:5678"));
    v.upsert(NodeKind::Worker, n);
    let mut s = Sweeper::new();
    let r = row(1, 1, 1, "10.0.0.1:5678", None);
    assert!(run(&mut s, &mut v, &[r], &tasks, 20, 300)
        .iter()
        .all(|(_, g)| g.is_empty()));
}

#[test]
fn only_the_tasks_own_processes_count() {
    let mut v = view();
    let mut s = Sweeper::new();
    let tasks = [(
        1,
        vec![
            proc_(100, 11, false),  // the task's
            proc_(200, 12, true),   // an operator's shell in the execute path
            proc_(300, 70, false),  // started after the row ended (55 + 5 s)
            proc_(400, 2, false),   // started before the row (10 - 5 s)
            proc_(4242, 11, false), // the worker JVM
        ],
    )];
    let done = [row(1, 7, 1, W1, Some(55))];
    let out = run(&mut s, &mut v, &done, &tasks, 60, 140);
    let g = &out.last().unwrap().1[0];
    assert_eq!(g.pids(), vec![100]);
    assert_eq!(g.evidence.excluded_pids, vec![200, 300, 400, 4242]);
    // with none of its own, the task is no ghost at all
    let mut v = view();
    let mut s = Sweeper::new();
    let foreign = [(1, vec![proc_(200, 12, true), proc_(300, 70, false)])];
    assert!(run(&mut s, &mut v, &done, &foreign, 60, 200)
        .iter()
        .all(|(_, g)| g.is_empty()));
}

#[test]
fn without_an_end_time_the_window_ends_at_the_newer_attempt_or_first_sight() {
    // flag 0 with a newer attempt submitted at t(40): a process from t(50) is not the old attempt's
    let mut old = row(1, 1, 0, W1, None);
    old.newer_attempt = Some(NewerAttempt {
        id: 2,
        host: Some(W1.into()),
        submit_time: Some(t(40)),
    });
    let tasks = [(1, vec![proc_(100, 11, false), proc_(101, 50, false)])];
    let mut v = view();
    let mut s = Sweeper::new();
    let out = run(&mut s, &mut v, &[old], &tasks, 60, 140);
    assert_eq!(out.last().unwrap().1[0].pids(), vec![100]);
    // a vanished row: processes started after the daemon first saw it gone do not count
    let tasks = [(5, vec![proc_(100, 11, false), proc_(101, 90, false)])];
    let mut v = view();
    let mut s = Sweeper::new();
    let out = run(&mut s, &mut v, &[], &tasks, 60, 140);
    assert_eq!(out.last().unwrap().1[0].pids(), vec![100]);
}

#[test]
fn a_row_that_turns_live_again_or_a_task_no_longer_listed_resets_the_clock() {
    let mut v = view();
    let mut s = Sweeper::new();
    let tasks = [(1, vec![proc_(100, 11, false)])];
    let done = [row(1, 8, 1, W1, None)];
    run(&mut s, &mut v, &done, &tasks, 20, 60);
    // DS re-submits it on the same worker: live again
    run(&mut s, &mut v, &[row(1, 1, 1, W1, None)], &tasks, 70, 70);
    assert!(s.memory.tracks.is_empty());
    let out = run(&mut s, &mut v, &done, &tasks, 80, 130);
    assert!(
        out.iter().all(|(_, g)| g.is_empty()),
        "clock restarted at 81"
    );
    // no longer listed: forgotten
    run(&mut s, &mut v, &done, &[], 140, 140);
    assert!(s.memory.tracks.is_empty());
}

#[test]
fn kill_orders_are_decided_under_the_brake_the_cap_and_the_rate_limit() {
    let tasks: Vec<(i64, Vec<AgentProcess>)> = (1..=5)
        .map(|id| (id, vec![proc_(100 + id as i32, 11, false)]))
        .collect();
    let rows: Vec<GhostRow> = (1..=5).map(|id| row(id, 7, 1, W1, Some(30))).collect();
    let last = |s: &mut Sweeper| {
        let mut v = view();
        // the first sweep that finds them (later ones see orders already issued)
        run(s, &mut v, &rows, &tasks, 40, 120)
            .into_iter()
            .find(|(_, g)| !g.is_empty())
            .unwrap()
            .1
    };
    let disp = |g: &[Ghost]| g.iter().map(|g| g.disposition.clone()).collect::<Vec<_>>();

    let mut s = Sweeper::new();
    kill_finished(&mut s.p);
    s.budget.cap = 2;
    let g = last(&mut s);
    assert_eq!(g.len(), 5);
    assert_eq!(
        g.iter()
            .filter(|g| g.disposition == Disposition::Act)
            .count(),
        2
    );
    assert!(disp(&g).contains(&Disposition::Blocked(Blocked::SweepCap)));

    let mut s = Sweeper::new();
    kill_finished(&mut s.p);
    s.budget.bucket = Some(TokenBucket {
        tokens: 1.0,
        updated: t(0),
    });
    // a bucket of 1 token per minute barely refills within the run
    let mut v = view();
    let mut g = Vec::new();
    for at in (40..=120).step_by(10) {
        send(&mut v, at, &tasks);
        s.budget.bucket = Some(TokenBucket {
            tokens: 1.0,
            updated: t(at + 1),
        });
        g = s.at(&v, &rows, at + 1);
    }
    assert_eq!(
        g.iter()
            .filter(|g| g.disposition == Disposition::Act)
            .count(),
        1
    );
    assert!(disp(&g).contains(&Disposition::Blocked(Blocked::RateLimit)));

    let mut s = Sweeper::new();
    kill_finished(&mut s.p);
    s.budget.set_brake(&BrakeState {
        engaged_since: Some(t(0)),
        why: Some("test".into()),
        clear_since: None,
        ..Default::default()
    });
    let g = last(&mut s);
    assert!(g
        .iter()
        .all(|g| matches!(g.disposition, Disposition::Blocked(Blocked::Brake(_)))));

    let mut s = Sweeper::new();
    kill_finished(&mut s.p);
    s.budget.hold = Some("not the leader".into());
    let g = last(&mut s);
    assert!(g
        .iter()
        .all(|g| g.disposition == Disposition::Blocked(Blocked::Hold("not the leader".into()))));
}

#[test]
fn an_order_is_issued_once_and_reissued_at_most_once_per_ghost_after() {
    let mut v = view();
    let mut s = Sweeper::new();
    kill_finished(&mut s.p);
    let tasks = [(1, vec![proc_(100, 11, false)])];
    let done = [row(1, 7, 1, W1, Some(30))];
    let out = run(&mut s, &mut v, &done, &tasks, 40, 200);
    let acts: Vec<i64> = out
        .iter()
        .filter(|(_, g)| g.iter().any(|g| g.disposition == Disposition::Act))
        .map(|(at, _)| at + 1)
        .collect();
    // first at 101 (over since 41); the order is lost (never outstanding,
    // never answered): re-issued 60 s later, not sooner
    assert_eq!(acts, vec![101, 161]);
    let waiting = &out.iter().find(|(at, _)| *at == 110).unwrap().1[0];
    assert_eq!(waiting.note.as_deref(), Some(KILL_ORDERED));
    // while the order node is outstanding, no new order whatever the time
    s.outstanding.insert((W1.to_string(), 1));
    let out = run(&mut s, &mut v, &done, &tasks, 210, 400);
    assert!(out
        .iter()
        .all(|(_, g)| g[0].disposition == Disposition::Report));
}

#[test]
fn rules_pick_the_action_by_task_type_group_and_project() {
    let mut p = policy();
    p.rules = vec![
        GhostRule {
            task_type: Some("python".into()),
            action: Some(GhostAction::Report),
            ..GhostRule::default()
        },
        GhostRule {
            worker_group: Some("Default".into()),
            project_code: Some(7),
            action: Some(GhostAction::Kill),
            ..GhostRule::default()
        },
    ];
    let r = row(1, 7, 1, W1, Some(30));
    assert_eq!(p.decide(Over::Superseded, Some(&r.task)), GhostAction::Kill);
    let mut py = r.task.clone();
    py.task_type = "PYTHON".into();
    assert_eq!(p.decide(Over::Superseded, Some(&py)), GhostAction::Report);
    let mut other = r.task.clone();
    other.project_code = Some(8);
    assert_eq!(
        p.decide(Over::Superseded, Some(&other)),
        GhostAction::Report
    );
    // a vanished row matches only rules that name none of its fields
    assert_eq!(p.decide(Over::Superseded, None), GhostAction::Report);
    assert!("kill".parse::<GhostAction>().is_ok());
    assert!("fail".parse::<GhostAction>().is_err());
}

#[test]
fn an_id_not_read_is_never_taken_for_a_vanished_row() {
    let mut v = view();
    let tasks = [(1, vec![proc_(100, 11, false)])];
    let mut memory = GhostMemory::new();
    let p = policy();
    for at in (20..=200).step_by(10) {
        send(&mut v, at, &tasks);
        let pl = plan_ghosts(
            &v,
            &ListedRead {
                read: &IdSet::new(),
                rows: &BTreeMap::new(),
                live: &IdSet::new(),
                outstanding: &BTreeSet::new(),
            },
            &memory,
            t(at + 1),
            &p,
            &mut Budget::new(p.max_actions_per_sweep, p.startup_settle, None),
        );
        assert!(pl.ghosts.is_empty());
        memory = pl.memory;
    }
}

#[test]
fn check_judges_in_one_look_from_the_rows_end() {
    let mut v = view();
    let tasks = [
        (1, vec![proc_(100, 11, false)]),
        (2, vec![proc_(200, 11, false)]),
    ];
    for at in (20..=120).step_by(10) {
        send(&mut v, at, &tasks);
    }
    let p = policy();
    let mut rows = BTreeMap::new();
    rows.insert(1, row(1, 7, 1, W1, Some(30)));
    // NEED_FAULT_TOLERANCE: no time to count from
    rows.insert(2, row(2, 8, 1, W1, None));
    let memory = check_memory(&v, &rows, t(121), &p);
    assert_eq!(memory.tracks.len(), 1);
    let read = IdSet::from([1, 2]);
    let pl = plan_ghosts(
        &v,
        &ListedRead {
            read: &read,
            rows: &rows,
            live: &IdSet::new(),
            outstanding: &BTreeSet::new(),
        },
        &memory,
        t(121),
        &p,
        &mut Budget::new(p.max_actions_per_sweep, p.startup_settle, None),
    );
    assert_eq!(pl.ghosts.len(), 1);
    assert_eq!(pl.ghosts[0].task_id, 1);
    assert_eq!(pl.ghosts[0].evidence.over_since, t(35));
    // within ghost_after of the end: none
    let memory = check_memory(&v, &rows, t(90), &p);
    let pl = plan_ghosts(
        &v,
        &ListedRead {
            read: &read,
            rows: &rows,
            live: &IdSet::new(),
            outstanding: &BTreeSet::new(),
        },
        &memory,
        t(90),
        &p,
        &mut Budget::new(p.max_actions_per_sweep, p.startup_settle, None),
    );
    assert!(pl.ghosts.is_empty());
}

/// So many kills at once that the daemon's reading is more likely wrong than
/// the cluster (the wrong or a restored database: every listed row "gone"
/// or over): none is ordered, as the brake holds zombies; fewer, or a small
/// share of what the agents list, are ordered as usual.
#[test]
fn a_mass_of_kills_against_what_the_agents_list_is_braked() {
    let kills = |listed: i64, over: i64| {
        let tasks: Vec<(i64, Vec<AgentProcess>)> = (1..=listed)
            .map(|id| (id, vec![proc_(100 + id as i32, 11, false)]))
            .collect();
        let rows: Vec<GhostRow> = (1..=listed)
            .map(|id| match id <= over {
                true => row(id, 7, 1, W1, Some(30)),
                false => row(id, 1, 1, W1, None),
            })
            .collect();
        let mut s = Sweeper::new();
        kill_finished(&mut s.p);
        s.p.brake_min = 3;
        s.p.brake_fraction = 0.5;
        let mut v = view();
        run(&mut s, &mut v, &rows, &tasks, 40, 120)
            .into_iter()
            .find(|(_, g)| !g.is_empty())
            .unwrap()
            .1
    };
    // 4 of 4 listed: at least brake_min and at least half
    let g = kills(4, 4);
    assert_eq!(g.len(), 4);
    for g in &g {
        assert!(
            matches!(&g.disposition, Disposition::Blocked(Blocked::Brake(w)) if w.contains("4 of 4 listed")),
            "{g:?}"
        );
        assert!(g
            .note
            .as_deref()
            .unwrap()
            .starts_with("brake engaged: 4 of 4"));
    }
    // 2 of 4: fewer than brake_min
    let g = kills(4, 2);
    assert_eq!(g.len(), 2);
    assert!(g.iter().all(|g| g.disposition == Disposition::Act));
    // 4 of 10: under half of what is listed
    let g = kills(10, 4);
    assert_eq!(g.len(), 4);
    assert!(g.iter().all(|g| g.disposition == Disposition::Act));
}
