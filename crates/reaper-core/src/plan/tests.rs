use super::*;
use crate::brake::BrakeState;
use crate::policy::Rule;
use crate::policy::UnseenAbsence;
use crate::policy::{Action, FollowUp};
use crate::reason::Reason;
use crate::view::NodeInfo;
use crate::ViewState;
use chrono::TimeZone;
use proptest::prelude::*;
use std::time::Duration;

fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

/// A view valid since t(0) with the given live workers (host, startup) and masters.
fn view(workers: &[(&str, i64)], masters: &[&str]) -> RegistryView {
    let mut v = RegistryView::invalid(t(0), "test");
    v.state = ViewState::Valid { since: t(0) };
    for (h, st) in workers {
        let mut n = NodeInfo::new(h, t(0));
        n.startup_time = Some(t(*st));
        // unknown report time: never stale, so only tests about staleness see it
        v.upsert(NodeKind::Worker, n);
    }
    for h in masters {
        v.upsert(NodeKind::Master, NodeInfo::new(h, t(0)));
    }
    v
}

fn task(id: i64, host: Option<&str>, submit: i64) -> Candidate {
    let mut c = Candidate::new(id, "SHELL", 1, host);
    c.submit_time = Some(t(submit));
    c.workflow_instance_id = Some(100 + id);
    c.workflow_host = Some("m1:5678".into());
    c
}

fn acting(line: DsLine) -> Policy {
    let mut p = Policy::defaults(line);
    p.worker_lost = Action::Fail;
    p.worker_restarted = Action::Fail;
    p.heartbeat_stale = Action::Fail;
    p.master_lost = Action::Fail;
    p.no_host = Action::Fail;
    p
}

/// Several live workers so the brake's "no worker" and lost-fraction rules stay clear.
const LIVE: &[(&str, i64)] = &[("w1:1234", -100), ("w2:1234", -100), ("w3:1234", -100)];

fn only(p: &Plan) -> &Zombie {
    assert_eq!(p.zombies.len(), 1, "{:#?}", p.zombies);
    &p.zombies[0]
}

#[test]
fn worker_lost_after_grace_measured_from_loss() {
    let mut v = view(LIVE, &["m1:5678"]);
    v.upsert(NodeKind::Worker, NodeInfo::new("w9:1234", t(0)));
    v.remove(NodeKind::Worker, "w9:1234", t(100));
    let p = acting(DsLine::V3_2);
    let c = [task(1, Some("w9:1234"), -50)];
    // 59 s after the loss: still inside the grace period
    let plan0 = plan(&v, &c, t(159), &p, &SafetyState::default());
    assert!(plan0.zombies.is_empty());
    let plan1 = plan(&v, &c, t(160), &p, &SafetyState::default());
    let z = only(&plan1);
    assert_eq!(z.reason, Reason::WorkerLost);
    assert_eq!(z.evidence.lost_at, Some(t(100)));
    assert_eq!(z.evidence.absent_for_seconds, Some(60));
    assert_eq!(z.disposition, Disposition::Act);
    assert_eq!(plan1.action_count(), 1);
}

/// Real DS 3.1.1 (tests/real-ds/scenarios.py sigstop): the master failed a
/// frozen worker over and at once dispatched the new attempt to the same,
/// still-cached host; the worker ran it when it thawed. Such a task gets the
/// full grace from its own submit time, not from the host's older loss.
#[test]
fn a_task_given_to_a_host_after_its_loss_gets_the_full_grace() {
    let mut v = view(LIVE, &["m1:5678"]);
    v.upsert(NodeKind::Worker, NodeInfo::new("w9:1234", t(0)));
    v.remove(NodeKind::Worker, "w9:1234", t(100));
    let p = acting(DsLine::V3_1);
    let c = [task(1, Some("w9:1234"), 101)];
    // 60 s after the loss, 59 s after the dispatch: inside the grace period
    assert!(plan(&v, &c, t(160), &p, &SafetyState::default())
        .zombies
        .is_empty());
    let pl = plan(&v, &c, t(161), &p, &SafetyState::default());
    let z = only(&pl);
    assert_eq!(z.reason, Reason::WorkerLost);
    // the evidence still says how long the host has been gone
    assert_eq!(z.evidence.lost_at, Some(t(100)));
    assert_eq!(z.evidence.absent_for_seconds, Some(61));
}

#[test]
fn never_seen_host_counts_from_view_validity() {
    let v = view(LIVE, &["m1:5678"]);
    let p = acting(DsLine::V3_2);
    let c = [task(1, Some("gone:1234"), -500)];
    assert!(plan(&v, &c, t(59), &p, &SafetyState::default())
        .zombies
        .is_empty());
    let pl = plan(&v, &c, t(60), &p, &SafetyState::default());
    let z = only(&pl);
    assert_eq!(z.reason, Reason::WorkerLost);
    assert_eq!(z.evidence.lost_at, None);
    assert_eq!(z.evidence.absent_for_seconds, Some(60));
}

#[test]
fn check_mode_treats_unseen_absence_as_unknown_and_lost() {
    let v = view(LIVE, &["m1:5678"]);
    let mut p = acting(DsLine::V3_2);
    p.unseen_absence = UnseenAbsence::Unknown;
    let pl = plan(
        &v,
        &[task(1, Some("gone:1234"), -500)],
        t(1),
        &p,
        &SafetyState::default(),
    );
    let z = only(&pl);
    assert_eq!(z.reason, Reason::WorkerLost);
    assert_eq!(z.evidence.absent_for_seconds, None);
}

#[test]
fn worker_restarted_uses_skew_tolerance() {
    let v = view(
        &[("w1:1234", 100), ("w2:1234", 0), ("w3:1234", 0)],
        &["m1:5678"],
    );
    let p = acting(DsLine::V3_1);
    // startup 100 vs submit 95 + 5 s skew: not later
    assert!(plan(
        &v,
        &[task(1, Some("w1:1234"), 95)],
        t(200),
        &p,
        &SafetyState::default()
    )
    .zombies
    .is_empty());
    let pl = plan(
        &v,
        &[task(1, Some("w1:1234"), 94)],
        t(200),
        &p,
        &SafetyState::default(),
    );
    let z = only(&pl);
    assert_eq!(z.reason, Reason::WorkerRestarted);
    assert_eq!(z.evidence.startup_time, Some(t(100)));
    assert_eq!(z.evidence.task_time, Some(t(94)));
}

#[test]
fn restart_falls_back_to_start_time_and_skips_without_times() {
    let v = view(&[("w1:1234", 100), ("w2:1234", 0), ("w3:1234", 0)], &[]);
    let p = acting(DsLine::V1_3);
    let mut c = task(1, Some("w1:1234"), 0);
    c.submit_time = None;
    c.start_time = Some(t(10));
    assert_eq!(
        only(&plan(&v, &[c.clone()], t(120), &p, &SafetyState::default())).reason,
        Reason::WorkerRestarted
    );
    c.start_time = None;
    assert!(plan(&v, &[c], t(120), &p, &SafetyState::default())
        .zombies
        .is_empty());
}

#[test]
fn heartbeat_stale_without_grace() {
    let mut v = view(LIVE, &[]);
    v.workers.get_mut("w1:1234").unwrap().report_time = Some(t(0));
    let p = acting(DsLine::V3_2);
    let c = [task(1, Some("w1:1234"), -50)];
    // stale_after = 120 s: at exactly 120 s it is not older yet
    assert!(plan(&v, &c, t(120), &p, &SafetyState::default())
        .zombies
        .is_empty());
    let pl = plan(&v, &c, t(121), &p, &SafetyState::default());
    let z = only(&pl);
    assert_eq!(z.reason, Reason::HeartbeatStale);
    assert_eq!(z.evidence.report_time, Some(t(0)));
}

/// Soak seed 2 (`ds-sim soak --duration 3m --seed 2`): a worker hung for
/// 25 s (heartbeat frozen, stale after 10 s) resumed and took a task at once;
/// the next sweep saw the 29 s old heartbeat and failed the task 0.09 s after
/// its submit, its process alive. A task submitted after the last heartbeat
/// is judged from its own submit time.
#[test]
fn soak_seed_2_a_task_taken_after_the_last_heartbeat_is_not_stale() {
    let mut v = view(LIVE, &[]);
    v.workers.get_mut("w1:1234").unwrap().report_time = Some(t(0));
    let p = acting(DsLine::V3_2);
    let c = [task(1, Some("w1:1234"), 29)];
    assert!(plan(&v, &c, t(29), &p, &SafetyState::default())
        .zombies
        .is_empty());
    // still hung 120 s after that task was taken: stale again
    assert!(plan(&v, &c, t(149), &p, &SafetyState::default())
        .zombies
        .is_empty());
    let pl = plan(&v, &c, t(150), &p, &SafetyState::default());
    assert_eq!(only(&pl).reason, Reason::HeartbeatStale);
    // a task submitted before the last heartbeat: counted from the heartbeat
    let old = [task(2, Some("w1:1234"), -50)];
    let pl = plan(&v, &old, t(121), &p, &SafetyState::default());
    assert_eq!(only(&pl).reason, Reason::HeartbeatStale);
}

/// After a gap in the daemon's sight of the registry, a heartbeat that went
/// stale during the gap is not judged until `heartbeat_stale_after` has
/// passed after the view became valid again (soak seed 2's ZooKeeper
/// restart: every worker's heartbeat looked stale on the first listing).
#[test]
fn a_heartbeat_gone_stale_during_a_registry_gap_waits_for_a_fresh_window() {
    let mut v = view(LIVE, &[]);
    v.state = ViewState::Valid { since: t(200) };
    v.workers.get_mut("w1:1234").unwrap().report_time = Some(t(0));
    let p = acting(DsLine::V3_2);
    let c = [task(1, Some("w1:1234"), -50)];
    assert!(plan(&v, &c, t(250), &p, &SafetyState::default())
        .zombies
        .is_empty());
    let pl = plan(&v, &c, t(321), &p, &SafetyState::default());
    assert_eq!(only(&pl).reason, Reason::HeartbeatStale);
}

#[test]
fn unknown_heartbeat_times_never_make_a_zombie() {
    let mut v = view(LIVE, &[]);
    let w = v.workers.get_mut("w1:1234").unwrap();
    w.startup_time = None;
    w.report_time = None;
    let p = acting(DsLine::V3_2);
    assert!(plan(
        &v,
        &[task(1, Some("w1:1234"), -9999)],
        t(10_000),
        &p,
        &SafetyState::default()
    )
    .zombies
    .is_empty());
}

#[test]
fn logic_tasks_are_judged_against_masters_only() {
    let mut v = view(LIVE, &["m1:5678"]);
    let p = acting(DsLine::V3_2);
    let mut c = task(1, Some("m1:5678"), -500);
    c.task_type = "DEPENDENT".into();
    // live master: untouched, although m1 is no worker
    assert!(plan(
        &v,
        std::slice::from_ref(&c),
        t(1000),
        &p,
        &SafetyState::default()
    )
    .zombies
    .is_empty());
    v.remove(NodeKind::Master, "m1:5678", t(500));
    assert!(plan(
        &v,
        std::slice::from_ref(&c),
        t(559),
        &p,
        &SafetyState::default()
    )
    .zombies
    .is_empty());
    let pl = plan(&v, &[c], t(560), &p, &SafetyState::default());
    let z = only(&pl);
    assert_eq!(z.reason, Reason::MasterLost);
    assert_eq!(z.evidence.lost_at, Some(t(500)));
}

#[test]
fn worker_task_on_a_live_master_host_is_left_alone() {
    let v = view(LIVE, &["m1:5678"]);
    let p = acting(DsLine::V3_2);
    assert!(plan(
        &v,
        &[task(1, Some("M1:5678 "), -500)],
        t(1000),
        &p,
        &SafetyState::default()
    )
    .zombies
    .is_empty());
}

#[test]
fn no_host_after_threshold_from_submit_or_start() {
    let v = view(LIVE, &[]);
    let p = acting(DsLine::V3_2);
    let c = task(1, None, 0);
    assert!(plan(
        &v,
        std::slice::from_ref(&c),
        t(599),
        &p,
        &SafetyState::default()
    )
    .zombies
    .is_empty());
    assert_eq!(
        only(&plan(
            &v,
            std::slice::from_ref(&c),
            t(600),
            &p,
            &SafetyState::default()
        ))
        .reason,
        Reason::NoHost
    );
    let mut c2 = task(2, Some("  "), 0);
    c2.submit_time = None;
    c2.start_time = Some(t(0));
    assert_eq!(
        only(&plan(
            &v,
            &[c2.clone()],
            t(600),
            &p,
            &SafetyState::default()
        ))
        .reason,
        Reason::NoHost
    );
    c2.start_time = None;
    assert!(plan(&v, &[c2], t(100_000), &p, &SafetyState::default())
        .zombies
        .is_empty());
}

#[test]
fn host_matching_normalises_case_and_whitespace() {
    let v = view(&[("Worker-A:1234", 0), ("w2:1234", 0), ("w3:1234", 0)], &[]);
    let p = acting(DsLine::V3_2);
    assert!(plan(
        &v,
        &[task(1, Some(" WORKER-a:1234 "), 10)],
        t(1000),
        &p,
        &SafetyState::default()
    )
    .zombies
    .iter()
    .all(|z| z.reason != Reason::WorkerLost));
}

#[test]
fn finished_rows_are_never_zombies() {
    let v = view(LIVE, &[]);
    let p = acting(DsLine::V3_2);
    for code in crate::line::FINISHED_TASK_CODES {
        let mut c = task(1, Some("gone:1"), -9999);
        c.state = *code;
        assert!(plan(&v, &[c], t(10_000), &p, &SafetyState::default())
            .zombies
            .is_empty());
    }
}

#[test]
fn invalid_view_judges_nothing_and_keeps_brake() {
    let v = RegistryView::invalid(t(0), "disconnected");
    let p = acting(DsLine::V3_2);
    let st = SafetyState {
        brake: BrakeState {
            engaged_since: Some(t(-10)),
            why: Some("x".into()),
            clear_since: None,
            ..Default::default()
        },
        ..SafetyState::default()
    };
    let pl = plan(&v, &[task(1, None, -9999)], t(100), &p, &st);
    assert_eq!(pl.view_invalid.as_deref(), Some("disconnected"));
    assert!(pl.zombies.is_empty());
    assert_eq!(pl.next.brake, st.brake);
}

#[test]
fn settling_blocks_actions_but_reports() {
    let v = view(LIVE, &[]);
    let mut p = acting(DsLine::V3_2);
    p.no_host_after = Duration::from_secs(1);
    let pl = plan(
        &v,
        &[task(1, None, -10)],
        t(29),
        &p,
        &SafetyState::default(),
    );
    assert_eq!(
        only(&pl).disposition,
        Disposition::Blocked(Blocked::Settling)
    );
    let pl = plan(
        &v,
        &[task(1, None, -10)],
        t(30),
        &p,
        &SafetyState::default(),
    );
    assert_eq!(only(&pl).disposition, Disposition::Act);
}

#[test]
fn report_policy_never_acts() {
    let v = view(LIVE, &[]);
    let p = Policy::defaults(DsLine::V3_2);
    let pl = plan(
        &v,
        &[task(1, None, -10_000)],
        t(1000),
        &p,
        &SafetyState::default(),
    );
    let z = only(&pl);
    assert_eq!(z.action, Action::Report);
    assert_eq!(z.disposition, Disposition::Report);
    assert_eq!(pl.action_count(), 0);
}

#[test]
fn hold_blocks_everything() {
    let v = view(LIVE, &[]);
    let p = acting(DsLine::V3_2);
    let st = SafetyState::default();
    let mut budget = crate::Budget::for_sweep(&st, &p, t(1000)).held(Some("not the leader".into()));
    let before = budget.clone();
    let pl = plan_within(
        &v,
        &[task(1, None, -10_000)],
        t(1000),
        &p,
        &st,
        &mut budget,
        &Default::default(),
    );
    assert_eq!(
        only(&pl).disposition,
        Disposition::Blocked(Blocked::Hold("not the leader".into()))
    );
    assert_eq!(budget, before, "nothing admitted under a hold");
}

#[test]
fn the_plan_wakes_at_the_next_grace_or_settle_deadline() {
    let mut v = view(LIVE, &[]);
    let p = acting(DsLine::V3_2);
    let grace = p.grace_period;
    let pl = plan(&v, &[], t(1), &p, &SafetyState::default());
    let settle_end = t(0) + crate::delta(p.startup_settle);
    assert_eq!(pl.wake, Some(settle_end.min(t(0) + crate::delta(grace))));
    v.remove(NodeKind::Worker, LIVE[0].0, t(5000));
    let pl = plan(&v, &[], t(5001), &p, &SafetyState::default());
    assert_eq!(pl.wake, Some(t(5000) + crate::delta(grace)));
    let pl = plan(
        &v,
        &[],
        t(5000) + crate::delta(grace),
        &p,
        &SafetyState::default(),
    );
    assert_eq!(pl.wake, None, "every deadline passed");
}

#[test]
fn sweep_cap_and_rate_limit() {
    let v = view(LIVE, &[]);
    let mut p = acting(DsLine::V3_2);
    p.brake.min_zombies = 1_000_000; // keep the zombie brake out of this test
    p.max_actions_per_sweep = 3;
    p.rate_per_minute = 5;
    let c: Vec<_> = (1..=10).map(|i| task(i, None, -10_000)).collect();
    let pl = plan(&v, &c, t(1000), &p, &SafetyState::default());
    let acted: Vec<i64> = pl.actions().map(|z| z.task.id).collect();
    assert_eq!(acted, vec![1, 2, 3]);
    assert!(pl.zombies[3..]
        .iter()
        .all(|z| z.disposition == Disposition::Blocked(Blocked::SweepCap)));
    // next sweep 1 s later: 2 tokens left (5 - 3) + 1/12 refill
    let pl2 = plan(&v, &c, t(1001), &p, &pl.next);
    assert_eq!(pl2.action_count(), 2);
    assert_eq!(
        pl2.zombies[2].disposition,
        Disposition::Blocked(Blocked::RateLimit)
    );
    // a minute later the bucket is full again, capped at 5
    let pl3 = plan(&v, &c, t(1200), &p, &pl2.next);
    assert_eq!(pl3.action_count(), 3);
    assert!(pl3.next.bucket.unwrap().tokens <= 5.0);
}

#[test]
fn brake_on_lost_workers_blocks_and_releases() {
    let mut v = view(&[("w1:1", 0), ("w2:1", 0), ("w3:1", 0), ("w4:1", 0)], &[]);
    let p = acting(DsLine::V3_2);
    v.remove(NodeKind::Worker, "w3:1", t(100));
    v.remove(NodeKind::Worker, "w4:1", t(100));
    let c = [task(1, Some("w3:1"), 0)];
    let pl = plan(&v, &c, t(200), &p, &SafetyState::default());
    assert!(pl.next.brake.engaged());
    assert!(matches!(
        only(&pl).disposition,
        Disposition::Blocked(Blocked::Brake(_))
    ));
    // the hosts come back: condition clears, but the brake holds for release_after
    v.upsert(NodeKind::Worker, NodeInfo::new("w3:1", t(250)));
    v.upsert(NodeKind::Worker, NodeInfo::new("w4:1", t(250)));
    let c = [task(2, None, -10_000)];
    let pl = plan(&v, &c, t(300), &p, &pl.next);
    assert!(pl.brake_condition.is_none());
    assert!(pl.next.brake.engaged());
    assert_eq!(pl.action_count(), 0);
    let pl = plan(&v, &c, t(599), &p, &pl.next);
    assert!(pl.next.brake.engaged());
    let pl = plan(&v, &c, t(600), &p, &pl.next);
    assert!(!pl.next.brake.engaged());
    assert_eq!(pl.action_count(), 1);
}

#[test]
fn brake_on_zombie_fraction() {
    let v = view(LIVE, &[]);
    let p = acting(DsLine::V3_2);
    let mut c: Vec<_> = (1..=10).map(|i| task(i, None, -10_000)).collect();
    let pl = plan(&v, &c, t(1000), &p, &SafetyState::default());
    assert!(pl.next.brake.engaged(), "10 of 10 candidates are zombies");
    assert_eq!(pl.action_count(), 0);
    // with 30 healthy candidates the fraction is 10/40 < 0.5
    c.extend((11..=40).map(|i| task(i, Some("w1:1234"), 0)));
    let pl = plan(&v, &c, t(1000), &p, &SafetyState::default());
    assert!(!pl.next.brake.engaged());
    assert_eq!(pl.action_count(), 10);
}

#[test]
fn report_only_zombies_do_not_count_for_the_zombie_brake() {
    let v = view(LIVE, &[]);
    let p = Policy::defaults(DsLine::V3_2);
    let c: Vec<_> = (1..=20).map(|i| task(i, None, -10_000)).collect();
    let pl = plan(&v, &c, t(1000), &p, &SafetyState::default());
    assert_eq!(pl.zombies.len(), 20);
    assert!(!pl.next.brake.engaged());
}

#[test]
fn rules_pick_action_and_workflow() {
    let v = view(LIVE, &["m1:5678"]);
    let mut p = Policy::defaults(DsLine::V3_2);
    p.rules = vec![
        Rule {
            worker_group: Some("streaming".into()),
            action: Some(Action::Report),
            ..Rule::default()
        },
        Rule {
            reason: Some(Reason::NoHost),
            action: Some(Action::Kill),
            workflow: Some(FollowUp::Fail),
            ..Rule::default()
        },
    ];
    let mut a = task(1, None, -10_000);
    a.worker_group = Some("streaming".into());
    let b = task(2, None, -10_000);
    let pl = plan(&v, &[a, b], t(1000), &p, &SafetyState::default());
    assert_eq!(pl.zombies[0].action, Action::Report);
    assert_eq!(pl.zombies[1].action, Action::Kill);
    assert_eq!(pl.zombies[1].workflow, FollowUp::Fail);
}

#[test]
fn recover_downgraded_when_owning_master_alive_on_every_line() {
    let v = view(LIVE, &["m1:5678"]);
    let mut p = acting(DsLine::V3_2);
    p.workflow = FollowUp::Recover;
    let pl = plan(
        &v,
        &[task(1, None, -10_000)],
        t(1000),
        &p,
        &SafetyState::default(),
    );
    let z = only(&pl);
    assert!(z.owner_master_alive);
    assert_eq!(z.owner_master.as_deref(), Some("m1:5678"));
    assert_eq!(z.workflow, FollowUp::None);
    assert!(z.note.as_deref().unwrap().contains("m1:5678"));
    // on 1.x too (SPEC §5, issue 10 item 10): a live 1.x master runs the
    // workflow in a thread of its own, a second command would run it twice
    for line in [DsLine::V1_2, DsLine::V1_3] {
        let mut p1 = p.clone();
        p1.line = line;
        let pl = plan(
            &v,
            &[task(1, None, -10_000)],
            t(1000),
            &p1,
            &SafetyState::default(),
        );
        let z = only(&pl);
        assert_eq!(z.workflow, FollowUp::None, "{line}");
        assert!(z.note.as_deref().unwrap().contains("m1:5678"), "{line}");
        assert_eq!(z.disposition, Disposition::Act, "the task write stays");
    }
    // owner 'NULL' (failed over): recover stays on 3.2
    let mut c = task(1, None, -10_000);
    c.workflow_host = Some("NULL".into());
    let pl = plan(&v, &[c], t(1000), &p, &SafetyState::default());
    let z = only(&pl);
    assert_eq!(z.owner_master, None);
    assert!(!z.owner_master_alive);
    assert_eq!(z.workflow, FollowUp::Recover);
}

#[test]
fn unseen_host_counts_from_the_later_of_view_validity_and_submit() {
    // Issue 10 item 1: a worker registered after the daemon's last look got a
    // task and vanished (or the view is older than the read): the task gets
    // the full grace from its own submit time, not from view validity.
    let v = view(LIVE, &["m1:5678"]);
    let p = acting(DsLine::V3_2);
    let c = [task(1, Some("new-worker:1234"), 1000)];
    // long after view validity (t(0)), but only 59 s after submit
    assert!(plan(&v, &c, t(1059), &p, &SafetyState::default())
        .zombies
        .is_empty());
    let pl = plan(&v, &c, t(1060), &p, &SafetyState::default());
    let z = only(&pl);
    assert_eq!(z.reason, Reason::WorkerLost);
    assert_eq!(z.evidence.absent_for_seconds, Some(60));
    // no submit time: the start time counts
    let mut c2 = task(2, Some("new-worker:1234"), 0);
    c2.submit_time = None;
    c2.start_time = Some(t(2000));
    assert!(
        plan(&v, &[c2.clone()], t(2059), &p, &SafetyState::default())
            .zombies
            .is_empty()
    );
    assert_eq!(
        only(&plan(&v, &[c2], t(2060), &p, &SafetyState::default())).reason,
        Reason::WorkerLost
    );
    // an unseen master of a logic task likewise
    let mut c3 = task(3, Some("new-master:5678"), 1000);
    c3.task_type = "DEPENDENT".into();
    assert!(
        plan(&v, &[c3.clone()], t(1059), &p, &SafetyState::default())
            .zombies
            .is_empty()
    );
    assert_eq!(
        only(&plan(&v, &[c3], t(1060), &p, &SafetyState::default())).reason,
        Reason::MasterLost
    );
}

#[test]
fn host_less_sub_process_is_judged_against_its_workflow_master() {
    // Issue 10 item 3: SUB_PROCESS runs with host NULL for its whole life on
    // 1.2, 1.3 and 2.0; it is never `no_host`.
    for line in [DsLine::V1_2, DsLine::V1_3, DsLine::V2_0] {
        let mut p = acting(line);
        p.no_host_after = Duration::from_secs(1);
        let mut v = view(LIVE, &["m1:5678"]);
        let mut c = task(1, None, 0);
        c.task_type = "SUB_PROCESS".into();
        c.workflow_host = Some("m1:5678".into());
        // its workflow's master lives: a healthy sub-workflow, however old
        assert!(
            plan(&v, &[c.clone()], t(100_000), &p, &SafetyState::default())
                .zombies
                .is_empty(),
            "{line}"
        );
        // that master goes: master_lost after grace, judged on the workflow host
        v.remove(NodeKind::Master, "m1:5678", t(100_000));
        assert!(
            plan(&v, &[c.clone()], t(100_059), &p, &SafetyState::default())
                .zombies
                .is_empty(),
            "{line}"
        );
        let pl = plan(&v, &[c.clone()], t(100_060), &p, &SafetyState::default());
        let z = only(&pl);
        assert_eq!(z.reason, Reason::MasterLost, "{line}");
        assert_eq!(z.evidence.lost_at, Some(t(100_000)), "{line}");
        // no workflow host either: DS's own master failover owns it
        c.workflow_host = Some("NULL".into());
        assert!(
            plan(&v, &[c], t(200_000), &p, &SafetyState::default())
                .zombies
                .is_empty(),
            "{line}"
        );
    }
}

#[test]
fn dependent_runs_on_a_worker_in_1_2() {
    // Issue 10 item 3: 1.2 DEPENDENT is a worker task: a live worker keeps it,
    // and a live master (which never ran it) does not make it master_lost.
    let mut v = view(LIVE, &["m1:5678"]);
    let p = acting(DsLine::V1_2);
    let mut c = task(1, Some("w1:1234"), 0);
    c.task_type = "DEPENDENT".into();
    assert!(plan(&v, &[c.clone()], t(1000), &p, &SafetyState::default())
        .zombies
        .is_empty());
    v.remove(NodeKind::Worker, "w1:1234", t(1000));
    let z = plan(&v, &[c.clone()], t(1060), &p, &SafetyState::default());
    assert_eq!(only(&z).reason, Reason::WorkerLost);
    // on 1.3 the same row is a logic task, judged against masters
    let mut p13 = p.clone();
    p13.line = DsLine::V1_3;
    c.host = Some("m1:5678".into());
    assert!(plan(&v, &[c], t(1060), &p13, &SafetyState::default())
        .zombies
        .is_empty());
}

#[test]
fn task_hosts_match_the_heartbeat_address() {
    // Issue 10 item 11: DS 3.3+ writes the heartbeat's host:port into
    // t_ds_task_instance.host; the node name differs with worker-address set.
    let mut v = view(LIVE, &["m1:5678"]);
    let mut n = NodeInfo::new("worker-a.example:1234", t(0)).with_address(Some("10.0.0.9:1234"));
    n.startup_time = Some(t(-100));
    v.upsert(NodeKind::Worker, n);
    let p = acting(DsLine::V3_3);
    let c = [task(1, Some("10.0.0.9:1234"), -50)];
    assert!(plan(&v, &c, t(10_000), &p, &SafetyState::default())
        .zombies
        .is_empty());
    // the node goes: rows naming its address see the loss and its time
    v.remove(NodeKind::Worker, "worker-a.example:1234", t(10_000));
    assert!(plan(&v, &c, t(10_059), &p, &SafetyState::default())
        .zombies
        .is_empty());
    let pl = plan(&v, &c, t(10_060), &p, &SafetyState::default());
    assert_eq!(only(&pl).evidence.lost_at, Some(t(10_000)));
    // a master's address is its identity for the owner rule too
    let mut v2 = view(LIVE, &[]);
    v2.upsert(
        NodeKind::Master,
        NodeInfo::new("master-a:5678", t(0)).with_address(Some("10.0.0.1:5678")),
    );
    let mut p2 = acting(DsLine::V3_3);
    p2.workflow = FollowUp::Recover;
    let mut c2 = task(2, Some("gone:1234"), -500);
    c2.workflow_host = Some("10.0.0.1:5678".into());
    let z = plan(&v2, &[c2], t(1000), &p2, &SafetyState::default());
    let z = only(&z);
    assert!(z.owner_master_alive);
    assert_eq!(z.workflow, FollowUp::None);
}

#[test]
fn owner_master_rule_matches() {
    let v = view(LIVE, &["m1:5678"]);
    let mut p = acting(DsLine::V3_2);
    p.rules = vec![Rule {
        owner_master: Some(crate::OwnerMaster::Alive),
        action: Some(Action::Report),
        ..Rule::default()
    }];
    let mut lost_owner = task(2, None, -10_000);
    lost_owner.workflow_host = Some("m9:5678".into());
    let pl = plan(
        &v,
        &[task(1, None, -10_000), lost_owner],
        t(1000),
        &p,
        &SafetyState::default(),
    );
    assert_eq!(pl.zombies[0].action, Action::Report);
    assert_eq!(pl.zombies[1].action, Action::Fail);
}

#[test]
fn no_workflow_id_means_no_follow_up() {
    let v = view(LIVE, &[]);
    let mut p = acting(DsLine::V3_2);
    p.workflow = FollowUp::Fail;
    let mut c = task(1, None, -10_000);
    c.workflow_instance_id = None;
    let pl = plan(&v, &[c], t(1000), &p, &SafetyState::default());
    assert_eq!(only(&pl).workflow, FollowUp::None);
    assert!(only(&pl).note.is_some());
}

// ------------------------------------------------------------------ properties

fn arb_view() -> impl Strategy<Value = RegistryView> {
    (
        any::<bool>(),
        prop::collection::vec((0u8..8, -500i64..500, -500i64..500), 0..8),
        prop::collection::vec((8u8..12, -500i64..500), 0..4),
        prop::collection::vec(0u8..3, 0..3),
    )
        .prop_map(|(valid, workers, lost, masters)| {
            let mut v = RegistryView::invalid(t(0), "arb");
            if valid {
                v.state = ViewState::Valid { since: t(0) };
            }
            for (h, st, rt) in workers {
                let mut n = NodeInfo::new(&format!("w{h}:1"), t(0));
                n.startup_time = Some(t(st));
                n.report_time = Some(t(rt));
                v.upsert(NodeKind::Worker, n);
            }
            for (h, at) in lost {
                v.lost_workers.insert(format!("w{h}:1"), t(at));
            }
            for h in masters {
                v.upsert(NodeKind::Master, NodeInfo::new(&format!("m{h}:5678"), t(0)));
            }
            v
        })
}

fn arb_candidates() -> impl Strategy<Value = Vec<Candidate>> {
    prop::collection::vec(
        (
            prop::option::of(0u8..12),
            any::<bool>(),
            prop::option::of(-1000i64..1000),
            prop::sample::select(vec![1, 17, 0, 6, 7]),
        ),
        0..40,
    )
    .prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (h, logic, submit, state))| {
                let host = h.map(|h| {
                    if logic {
                        format!("m{}:5678", h % 3)
                    } else {
                        format!("w{h}:1")
                    }
                });
                let mut c = Candidate::new(
                    i as i64 + 1,
                    if logic { "SWITCH" } else { "SHELL" },
                    state,
                    host.as_deref(),
                );
                c.submit_time = submit.map(t);
                c.workflow_instance_id = Some(1);
                c.workflow_host = Some("m0:5678".into());
                c
            })
            .collect()
    })
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    (0usize..10, 0u32..20, 0u64..200, any::<bool>()).prop_map(|(cap, rate, grace, report)| {
        let mut p = if report {
            Policy::defaults(DsLine::V3_2)
        } else {
            acting(DsLine::V3_2)
        };
        p.max_actions_per_sweep = cap;
        p.rate_per_minute = rate;
        p.grace_period = Duration::from_secs(grace);
        p.startup_settle = Duration::from_secs(0);
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_action_while_view_invalid(mut v in arb_view(), c in arb_candidates(), p in arb_policy(), now in 0i64..2000) {
        v.state = ViewState::Invalid { since: t(0), reason: "x".into() };
        let pl = plan(&v, &c, t(now), &p, &SafetyState::default());
        prop_assert_eq!(pl.action_count(), 0);
        prop_assert!(pl.zombies.is_empty());
    }

    #[test]
    fn healthy_worker_task_is_never_touched(v in arb_view(), c in arb_candidates(), p in arb_policy(), now in 0i64..2000) {
        let pl = plan(&v, &c, t(now), &p, &SafetyState::default());
        for z in &pl.zombies {
            if p.line.is_logic_task(&z.task.task_type) { continue; }
            if let Some(node) = z.task.host.as_deref().and_then(|h| v.live(NodeKind::Worker, h)) {
                let started_before = match (node.startup_time, z.task.submit_time) {
                    (Some(st), Some(sub)) => st <= sub,
                    _ => true,
                };
                let fresh = node.report_time.is_none_or(|rt| rt >= t(now) - delta(p.heartbeat_stale_after));
                prop_assert!(!(started_before && fresh), "healthy task judged a zombie: {:?}", z);
            }
        }
    }

    #[test]
    fn never_more_actions_than_the_caps(v in arb_view(), c in arb_candidates(), p in arb_policy(), now in 0i64..2000) {
        let pl = plan(&v, &c, t(now), &p, &SafetyState::default());
        prop_assert!(pl.action_count() <= p.max_actions_per_sweep);
        prop_assert!(pl.action_count() <= p.rate_per_minute as usize);
        // and a second sweep a second later cannot exceed what the bucket refilled
        let pl2 = plan(&v, &c, t(now + 1), &p, &pl.next);
        let refill = (p.rate_per_minute as f64 / 60.0).ceil() as usize;
        prop_assert!(pl.action_count() + pl2.action_count() <= p.rate_per_minute as usize + refill);
    }

    #[test]
    fn plan_is_deterministic(v in arb_view(), c in arb_candidates(), p in arb_policy(), now in 0i64..2000) {
        let a = plan(&v, &c, t(now), &p, &SafetyState::default());
        let b = plan(&v, &c, t(now), &p, &SafetyState::default());
        prop_assert_eq!(a, b);
    }

    #[test]
    fn finished_or_unwritable_never_acted_on(v in arb_view(), c in arb_candidates(), p in arb_policy(), now in 0i64..2000) {
        let pl = plan(&v, &c, t(now), &p, &SafetyState::default());
        for z in pl.actions() {
            prop_assert!(!DsLine::is_finished_task_state(z.task.state));
            prop_assert!(p.line.can_write(z.action.target_state().unwrap()));
        }
    }
}
