//! The property of SPEC §15's kills, over random clusters and histories:
//! no kill is ever admitted for a task whose row is live on a live worker
//! whose process it may be, nor for a row this daemon never read.
//!
//! The oracle knows the machines from the generator (never from the view's
//! names), and the reports and rows as the test sent them.

use super::sim::{row, t, Sim, STALE};
use super::*;
use crate::agent::Lineage;
use crate::plan::Disposition;
use crate::view::NodeKind;
use proptest::prelude::*;

const TASKS: i64 = 6;
const SWEEPS: usize = 12;

/// A task row's state at one sweep; hosts are indices into the workers,
/// one past them a host the view cannot place.
#[derive(Debug, Clone, Copy)]
enum RowAt {
    Absent,
    /// Live on a host, written as its node name or its heartbeat address.
    Live(usize, bool),
    Terminal,
    NeedFaultTolerance,
    /// Superseded by an attempt on another host.
    Redispatched(usize),
}

fn row_at() -> impl Strategy<Value = RowAt> {
    prop_oneof![
        2 => Just(RowAt::Absent),
        4 => (0..5usize, any::<bool>()).prop_map(|(h, a)| RowAt::Live(h, a)),
        1 => Just(RowAt::Terminal),
        1 => Just(RowAt::NeedFaultTolerance),
        1 => (0..5usize).prop_map(RowAt::Redispatched),
    ]
}

fn kind() -> impl Strategy<Value = Over> {
    prop_oneof![
        Just(Over::Terminal),
        Just(Over::NeedFaultTolerance),
        Just(Over::Superseded),
        Just(Over::OtherHost),
        Just(Over::NoRow),
    ]
}

fn rule() -> impl Strategy<Value = GhostRule> {
    let over = proptest::option::of(proptest::collection::vec(kind(), 1..3));
    let action = proptest::option::of(any::<bool>());
    (over, action).prop_map(|(over, action)| GhostRule {
        over,
        action: action.map(|k| match k {
            true => GhostAction::Kill,
            false => GhostAction::Report,
        }),
        ..GhostRule::default()
    })
}

fn lineage() -> impl Strategy<Value = Option<Lineage>> {
    prop_oneof![
        Just(None),
        Just(Some(Lineage::Own)),
        Just(Some(Lineage::Orphan))
    ]
}

#[derive(Debug, Clone)]
struct Case {
    /// Per machine: whether it runs a second worker (another port).
    two: [bool; 2],
    /// Per worker slot (machine * 2 + port): has an agent, lost at a sweep.
    agent: [bool; 4],
    lost_at: [Option<usize>; 4],
    /// Per worker slot and task: the lineage its agent reports.
    lineage: Vec<Vec<Option<Lineage>>>,
    /// Per task: its row's history, as (state, sweeps it lasts).
    rows: Vec<Vec<(RowAt, usize)>>,
    /// Per sweep and worker slot: whether it reports, and which tasks it lists.
    reports: Vec<Vec<(bool, Vec<bool>)>>,
    kill: bool,
    rules: Vec<GhostRule>,
    brake_min: usize,
}

fn case() -> impl Strategy<Value = Case> {
    let history = proptest::collection::vec((row_at(), 1..5usize), 1..5);
    let report = (
        proptest::bool::weighted(0.85),
        proptest::collection::vec(proptest::bool::weighted(0.8), TASKS as usize),
    );
    (
        any::<[bool; 2]>(),
        any::<[bool; 4]>(),
        proptest::array::uniform4(proptest::option::weighted(0.2, 0..SWEEPS)),
        proptest::collection::vec(proptest::collection::vec(lineage(), TASKS as usize), 4),
        proptest::collection::vec(history, TASKS as usize),
        proptest::collection::vec(proptest::collection::vec(report, 4), SWEEPS),
        any::<bool>(),
        proptest::collection::vec(rule(), 0..3),
        1..12usize,
    )
        .prop_map(
            |(two, agent, lost_at, lineage, rows, reports, kill, rules, brake_min)| Case {
                two,
                agent,
                lost_at,
                lineage,
                rows,
                reports,
                kill,
                rules,
                brake_min,
            },
        )
}

/// The cluster's workers: (slot, node name, heartbeat address, machine).
fn workers(c: &Case) -> Vec<Worker> {
    let mut out = Vec::new();
    for m in 0..2 {
        for port in 0..(1 + usize::from(c.two[m])) {
            out.push((
                m * 2 + port,
                format!("10.0.{m}.7:{}", 1234 + port),
                format!("10.0.{m}.7:{}", 5678 + port),
                m,
            ));
        }
    }
    out
}

impl Case {
    fn row(&self, task: usize, sweep: usize) -> RowAt {
        let mut left = sweep;
        for &(state, len) in &self.rows[task] {
            if left < len {
                return state;
            }
            left -= len;
        }
        self.rows[task].last().map_or(RowAt::Absent, |r| r.0)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_kill_of_a_live_rows_process_nor_of_a_row_never_read(c in case()) {
        run(&c)?;
    }
}

type Worker = (usize, String, String, usize);

/// A host for index h: a worker (by name or address), else one unknown.
fn host(ws: &[Worker], h: usize, by_address: bool) -> String {
    match ws.get(h) {
        Some(w) if by_address => w.2.clone(),
        Some(w) => w.1.clone(),
        None => "10.9.9.9:1234".to_string(),
    }
}

/// The task's row at sweep `k` (time `at`), as DS's table holds it.
fn row_of(c: &Case, ws: &[Worker], task: usize, k: usize, at: i64) -> Option<GhostRow> {
    let id = task as i64 + 1;
    let first = host(ws, 0, false);
    match c.row(task, k) {
        RowAt::Absent => None,
        RowAt::Live(h, a) => Some(row(id, 1, 1, &host(ws, h, a), None)),
        RowAt::Terminal => Some(row(id, 7, 1, &first, Some(15))),
        RowAt::NeedFaultTolerance => Some(row(id, 8, 1, &first, None)),
        RowAt::Redispatched(h) => {
            let mut r = row(id, 1, 0, &first, None);
            r.newer_attempt = Some(NewerAttempt {
                id: id + 100,
                host: Some(host(ws, h, false)),
                submit_time: Some(t(at - 5)),
            });
            Some(r)
        }
    }
}

fn run(c: &Case) -> Result<(), TestCaseError> {
    let ws = workers(c);
    let spec: Vec<(&str, Option<&str>)> = ws
        .iter()
        .map(|w| (w.1.as_str(), Some(w.2.as_str())))
        .collect();
    let mut s = Sim::new(&spec);
    s.p.action = match c.kill {
        true => GhostAction::Kill,
        false => GhostAction::Report,
    };
    s.p.rules = c.rules.clone();
    s.p.brake_min = c.brake_min;
    let mut ever_read: BTreeSet<i64> = BTreeSet::new();
    // per worker: when its agent last reported, and what it listed
    let mut last: BTreeMap<usize, (i64, Vec<i64>)> = BTreeMap::new();
    for k in 0..SWEEPS {
        let at = 20 + 10 * k as i64;
        for w in &ws {
            if c.lost_at[w.0] == Some(k) {
                s.v.remove(NodeKind::Worker, &w.1, t(at));
            }
        }
        for task in 0..TASKS as usize {
            let id = task as i64 + 1;
            match row_of(c, &ws, task, k, at) {
                Some(r) => s.db.insert(id, r),
                None => s.db.remove(&id),
            };
        }
        for w in &ws {
            let (reports, listed) = &c.reports[k][w.0];
            if !c.agent[w.0] || !reports {
                continue;
            }
            let tasks: Vec<(i64, Option<Lineage>)> = (0..TASKS as usize)
                .filter(|&i| listed[i])
                .map(|i| (i as i64 + 1, c.lineage[w.0][i]))
                .collect();
            s.report(&w.1, at, &tasks);
            last.insert(w.0, (at, tasks.iter().map(|x| x.0).collect()));
        }
        let now = at + 1;
        let read = listed_ids(&s.v, t(now), STALE);
        for g in s.sweep(now) {
            if g.disposition == Disposition::Act {
                may_kill(c, &ws, &s, &last, &ever_read, &g, now)?;
            }
        }
        ever_read.extend(read.iter().filter(|id| s.db.contains_key(id)));
    }
    Ok(())
}

/// The property for one admitted kill: the row was read before if it is
/// gone now; if it is live on a live worker, the process is provably not
/// that worker's (another machine, or the agent's own tree) and that
/// worker's own agent does not list it.
fn may_kill(
    c: &Case,
    ws: &[Worker],
    s: &Sim,
    last: &BTreeMap<usize, (i64, Vec<i64>)>,
    ever_read: &BTreeSet<i64>,
    g: &Ghost,
    now: i64,
) -> Result<(), TestCaseError> {
    let id = g.task_id;
    let me = ws
        .iter()
        .find(|w| w.1 == g.worker)
        .expect("a worker's agent");
    let Some(r) = s.db.get(&id) else {
        prop_assert!(
            ever_read.contains(&id),
            "killed task {id}: its row was never read"
        );
        return Ok(());
    };
    let live_row = r.flag == 1
        && !crate::line::DsLine::is_finished_task_state(r.task.state)
        && r.task.state != crate::line::NEED_FAULT_TOLERANCE;
    let row_host = r.task.host.as_deref().unwrap_or_default();
    let Some(h) = ws.iter().find(|w| w.1 == row_host || w.2 == row_host) else {
        return Ok(());
    };
    let h_live = s.v.workers.contains_key(&h.1);
    let h_lists = c.agent[h.0]
        && last
            .get(&h.0)
            .is_some_and(|(when, ids)| now - when <= STALE.as_secs() as i64 && ids.contains(&id));
    let lineage = c.lineage[me.0][id as usize - 1];
    let maybe_its = h.0 == me.0 || (h.3 == me.3 && lineage != Some(Lineage::Own)) || h_lists;
    prop_assert!(
        !(live_row && h_live && maybe_its),
        "killed task {id} on {}: its row is live on {} (lineage {lineage:?})",
        g.worker,
        h.1
    );
    Ok(())
}
