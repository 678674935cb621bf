//! SPEC §15 "Safety IV": what a path alone does not prove (two workers on
//! one machine), what a row never read does not prove (a lagging replica,
//! another DS's database), and what a finished row's leftovers are worth.

use super::sim::{row, Sim};
use super::*;
use crate::agent::Lineage;
use crate::plan::{Blocked, Disposition};
use crate::view::NodeKind;
use std::collections::BTreeMap;

const A: &str = "10.0.0.1:1234";
const B: &str = "10.0.0.1:1235";
const C: &str = "10.0.0.2:1234";

fn two_on_one_machine() -> Sim {
    Sim::new(&[
        (A, Some("10.0.0.1:5678")),
        (B, Some("10.0.0.1:5679")),
        (C, None),
    ])
}

/// Reports every 10 s from `from` to `to` (A lists `a`, C lists `c`), a
/// sweep after each: A's ghosts of every sweep, by task id.
fn run(
    s: &mut Sim,
    a: &[(i64, Option<Lineage>)],
    c: &[(i64, Option<Lineage>)],
    from: i64,
    to: i64,
) -> BTreeMap<i64, Vec<Ghost>> {
    let mut out: BTreeMap<i64, Vec<Ghost>> = BTreeMap::new();
    for at in (from..=to).step_by(10) {
        s.report(A, at, a);
        if !c.is_empty() {
            s.report(C, at, c);
        }
        for g in s.sweep(at + 1).into_iter().filter(|g| g.worker == A) {
            out.entry(g.task_id).or_default().push(g);
        }
    }
    out
}

fn acted(gs: &[Ghost]) -> bool {
    gs.iter().any(|g| g.disposition == Disposition::Act)
}

#[test]
fn a_live_row_of_a_worker_on_the_same_machine_is_no_ghost_unless_the_tree_is_own() {
    let mut s = two_on_one_machine();
    s.p.action = GhostAction::Kill;
    for (id, host) in [(1, B), (2, "10.0.0.1:5679"), (3, B), (4, C), (5, C)] {
        s.db.insert(id, row(id, 1, 1, host, None));
    }
    let a = [
        (1, None),                  // B's, by its node name: an older agent says nothing
        (2, Some(Lineage::Orphan)), // B's, by its heartbeat address (3.3)
        (3, Some(Lineage::Own)),    // under A's own JVM: A's stale attempt
        (4, None),                  // another machine, no agent there
        (5, None),                  // another machine whose own agent lists it
    ];
    let out = run(&mut s, &a, &[(5, None)], 20, 120);
    assert_eq!(
        out.keys().copied().collect::<Vec<_>>(),
        vec![3, 4],
        "{out:?}"
    );
    for id in [3, 4] {
        assert!(acted(&out[&id]), "{id}");
        assert!(out[&id].iter().all(|g| g.evidence.over == Over::OtherHost));
    }
    // B goes: its rows' processes beside it are no longer protected by a
    // live worker there (DS fails them over and runs them again)
    s.v.remove(NodeKind::Worker, B, t_(121));
    let out = run(&mut s, &a, &[(5, None)], 130, 200);
    assert!(out.contains_key(&1) && out.contains_key(&2), "{out:?}");
    assert!(!out.contains_key(&5));
}

fn t_(s: i64) -> Instant {
    super::sim::t(s)
}

#[test]
fn a_row_never_read_is_reported_never_killed_and_one_seen_then_gone_is_killed() {
    let mut s = two_on_one_machine();
    s.p.action = GhostAction::Kill;
    // 6 runs on A and is read so; 5 has no row this daemon ever read
    s.db.insert(6, row(6, 1, 1, A, None));
    let a = [(5, None), (6, None)];
    let out = run(&mut s, &a, &[], 20, 40);
    assert!(!out.contains_key(&6) && !acted(&out[&5]), "{out:?}");
    assert!(s.memory.rows_seen.contains(&6) && !s.memory.rows_seen.contains(&5));
    s.db.remove(&6);
    let out = run(&mut s, &a, &[], 50, 150);
    let never = &out[&5];
    assert!(never.iter().all(|g| g.evidence.over == Over::NoRow
        && g.disposition == Disposition::Report
        && g.action == GhostAction::Report
        && g.note.as_deref() == Some(ROW_NEVER_SEEN)));
    let gone = &out[&6];
    assert!(gone.iter().all(|g| g.evidence.over == Over::NoRow));
    assert!(acted(gone), "seen, then gone: {gone:?}");
    assert_ne!(gone[0].note.as_deref(), Some(ROW_NEVER_SEEN));

    // the row shows up at last (a replica caught up), already superseded:
    // its clock starts at that first read, not at the first sight without it
    s.db.insert(5, row(5, 1, 0, A, None));
    let out = run(&mut s, &a, &[], 160, 170);
    assert!(!out.get(&5).is_some_and(|g| acted(g)), "{out:?}");
    let out = run(&mut s, &a, &[], 180, 200);
    assert!(acted(&out[&5]));
    assert_eq!(out[&5][0].evidence.over_since, t_(161));

    // what was read is remembered while listed, no longer
    run(&mut s, &[(6, None)], &[], 210, 210);
    assert!(!s.memory.rows_seen.contains(&5));
}

#[test]
fn many_listed_tasks_without_a_row_hold_every_kill_as_a_database_mismatch() {
    let mut s = two_on_one_machine();
    s.p.action = GhostAction::Kill;
    s.p.brake_min = 3;
    // 4 is superseded (a kill is wanted); 1-3 have no row this daemon read
    s.db.insert(4, row(4, 1, 0, A, None));
    let a: Vec<(i64, Option<Lineage>)> = (1..=4).map(|id| (id, None)).collect();
    let out = run(&mut s, &a, &[], 20, 100);
    let held = &out[&4];
    assert!(!acted(held));
    let last = held.last().unwrap();
    assert_eq!(last.note.as_deref(), Some(DATABASE_MISMATCH));
    assert!(
        matches!(&last.disposition, Disposition::Blocked(Blocked::Brake(w))
            if w.starts_with("database_mismatch: 3 of 4 listed tasks have no row")),
        "{last:?}"
    );
    for id in 1..=3 {
        assert_eq!(out[&id][0].note.as_deref(), Some(ROW_NEVER_SEEN));
    }
    // the rows arrive (running on A): the database agrees again
    for id in 1..=3 {
        s.db.insert(id, row(id, 1, 1, A, None));
    }
    let out = run(&mut s, &a, &[], 110, 110);
    assert!(acted(&out[&4]), "{out:?}");
    assert_eq!(out.len(), 1);
}

/// Kill policy (or a rule) against each kind, from a row read on A.
fn kinds(tune: impl FnOnce(&mut GhostPolicy)) -> BTreeMap<Over, bool> {
    let mut s = two_on_one_machine();
    tune(&mut s.p);
    for r in [
        row(1, 7, 1, A, Some(15)),
        row(2, 8, 1, A, None),
        row(3, 1, 0, A, None),
    ] {
        s.db.insert(r.task.id, r);
    }
    s.db.insert(4, row(4, 1, 1, A, None));
    let a: Vec<(i64, Option<Lineage>)> = (1..=4).map(|id| (id, None)).collect();
    run(&mut s, &a, &[], 20, 20);
    s.db.remove(&4);
    run(&mut s, &a, &[], 30, 100)
        .values()
        .map(|g| (g[0].evidence.over, acted(g)))
        .collect()
}

#[test]
fn a_finished_rows_leftovers_are_killed_only_when_a_rule_names_terminal_state() {
    let all = |v: bool| {
        [
            (Over::Terminal, v),
            (Over::NeedFaultTolerance, true),
            (Over::Superseded, true),
            (Over::NoRow, true),
        ]
    };
    let got = kinds(|p| p.action = GhostAction::Kill);
    assert_eq!(got, BTreeMap::from(all(false)));
    // a rule naming it (no action of its own: the [policy] default, kill)
    let got = kinds(|p| {
        p.action = GhostAction::Kill;
        p.rules = vec![GhostRule {
            over: Some(vec![Over::Terminal]),
            ..GhostRule::default()
        }];
    });
    assert_eq!(got, BTreeMap::from(all(true)));
    // rules matching kinds: report flag 0, kill terminal_state under a
    // report default; a kind no rule names takes the default
    let got = kinds(|p| {
        p.rules = vec![
            GhostRule {
                over: Some(vec![Over::Superseded]),
                action: Some(GhostAction::Report),
                ..GhostRule::default()
            },
            GhostRule {
                over: Some(vec![Over::Terminal, Over::NoRow]),
                action: Some(GhostAction::Kill),
                ..GhostRule::default()
            },
        ];
    });
    let want = [
        (Over::Terminal, true),
        (Over::NeedFaultTolerance, false),
        (Over::Superseded, false),
        (Over::NoRow, true),
    ];
    assert_eq!(got, BTreeMap::from(want));
    // a rule without over that says kill does not reach terminal_state (nor
    // a vanished row, which has no task type to match)
    let got = kinds(|p| {
        p.rules = vec![GhostRule {
            task_type: Some("SHELL".into()),
            action: Some(GhostAction::Kill),
            ..GhostRule::default()
        }];
    });
    let want = [
        (Over::Terminal, false),
        (Over::NeedFaultTolerance, true),
        (Over::Superseded, true),
        (Over::NoRow, false),
    ];
    assert_eq!(got, BTreeMap::from(want));
}
