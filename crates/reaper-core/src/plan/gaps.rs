//! Property: over random histories of registry events — registrations,
//! losses, re-registrations, gaps in the daemon's sight — and task rows
//! appearing with their submit times, the planner never acts on a task before
//! its host has been absent, by the daemon's clock and after the last gap, for
//! `grace_period`; and never acts for `worker_lost` on a task whose host is
//! live in the view it judged against.
//!
//! The view is maintained the way the registry adapters maintain it (SPEC
//! §4.1): events reach the daemon a little late (up to `LAG`, in order) and
//! are stamped when they arrive; a gap makes the view invalid; the listing
//! that ends it removes hosts that went meanwhile (as of the listing), adds
//! those that came, restarts every absence clock and makes the view valid
//! from that instant. The lag is what makes a task on a worker the view has
//! not seen yet possible: DS dispatched it to a worker that registered after
//! the daemon's last look.

use super::*;
use crate::policy::Action;
use crate::reason::Reason;
use crate::view::NodeInfo;
use crate::ViewState;
use chrono::TimeZone;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

const HOSTS: usize = 5;
const GRACE: i64 = 60;
/// The longest a registry event takes to reach the daemon.
const LAG: i64 = 5;

#[derive(Debug, Clone)]
enum Ev {
    /// Worker h registers (a re-registration after a loss included).
    Up(usize),
    /// Worker h's node goes.
    Down(usize),
    /// The daemon loses sight of the registry.
    GapStart,
    /// A full listing ends the gap.
    GapEnd,
    /// Registry events in flight reach the daemon.
    Deliver,
    /// A task row dispatched to worker h appears, submitted `ago` s before now.
    Task { host: usize, ago: i64 },
    /// A sweep: candidates read, then a view taken, then a plan.
    Sweep,
}

fn arb_ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        3 => (0..HOSTS).prop_map(Ev::Up),
        3 => (0..HOSTS).prop_map(Ev::Down),
        1 => Just(Ev::GapStart),
        1 => Just(Ev::GapEnd),
        3 => Just(Ev::Deliver),
        3 => ((0..HOSTS), 0i64..120).prop_map(|(host, ago)| Ev::Task { host, ago }),
        4 => Just(Ev::Sweep),
    ]
}

fn name(h: usize) -> String {
    format!("w{h}:1234")
}

/// What really happened, by the clock of the events.
#[derive(Default)]
struct Truth {
    live: BTreeSet<usize>,
    /// Start of the daemon's last gap's end (the listing that ended it).
    last_gap_end: i64,
    in_gap: bool,
    /// Events on their way to the daemon: (when they happened, host, up).
    in_flight: Vec<(i64, usize, bool)>,
}

impl Truth {
    /// Delivers the events in flight (all, or those older than `LAG`), in
    /// order, stamped with the daemon's clock.
    fn deliver(&mut self, view: &mut RegistryView, now: i64, all: bool) {
        let due = self
            .in_flight
            .iter()
            .take_while(|(at, _, _)| all || now - at >= LAG)
            .count();
        for (_, h, up) in self.in_flight.drain(..due) {
            if up {
                view.upsert(NodeKind::Worker, NodeInfo::new(&name(h), t(now)));
            } else {
                view.remove(NodeKind::Worker, &name(h), t(now));
            }
        }
    }
}

fn policy() -> Policy {
    let mut p = Policy::defaults(DsLine::V3_2);
    p.worker_lost = Action::Fail;
    p.worker_restarted = Action::Fail;
    p.heartbeat_stale = Action::Fail;
    p.master_lost = Action::Fail;
    p.no_host = Action::Fail;
    p.grace_period = Duration::from_secs(GRACE as u64);
    p.startup_settle = Duration::ZERO;
    p.max_actions_per_sweep = 10_000;
    p.rate_per_minute = 1_000_000;
    // The brake is tested elsewhere; here it would only hide actions.
    p.brake.max_lost_worker_fraction = 2.0;
    p.brake.max_zombie_fraction = 2.0;
    p.brake.min_zombies = usize::MAX;
    p
}

/// The daemon's side of a history: its view, the rows it reads, and what it
/// carries from sweep to sweep.
struct Replay {
    p: Policy,
    now: i64,
    truth: Truth,
    view: RegistryView,
    rows: Vec<Candidate>,
    safety: SafetyState,
    /// When the view last had each host live (the daemon's clock).
    seen_live: BTreeMap<usize, i64>,
}

impl Replay {
    fn new() -> Self {
        // A keep-alive master and worker so "no worker live" stays clear.
        let mut view = RegistryView::invalid(t(0), "starting");
        view.state = ViewState::Valid { since: t(0) };
        view.upsert(NodeKind::Master, NodeInfo::new("m:5678", t(0)));
        view.upsert(NodeKind::Worker, NodeInfo::new("keep:1234", t(0)));
        Replay {
            p: policy(),
            now: 0,
            truth: Truth::default(),
            view,
            rows: Vec::new(),
            safety: SafetyState::default(),
            seen_live: BTreeMap::new(),
        }
    }

    fn note_seen_live(&mut self) {
        for h in 0..HOSTS {
            if self.view.is_valid() && self.view.live(NodeKind::Worker, &name(h)).is_some() {
                self.seen_live.insert(h, self.now);
            }
        }
    }

    /// Moves the clock on by `dt`. Events never take longer than LAG: those
    /// due on the way are delivered when they fall due.
    fn advance(&mut self, dt: i64) {
        let target = self.now + dt;
        while let Some(&(at, _, _)) = self.truth.in_flight.first() {
            if at + LAG > target {
                break;
            }
            self.now = self.now.max(at + LAG);
            self.note_seen_live();
            self.truth.deliver(&mut self.view, self.now, false);
        }
        self.now = target;
        self.note_seen_live();
    }

    fn step(&mut self, ev: &Ev) -> Result<(), TestCaseError> {
        let (truth, view, now) = (&mut self.truth, &mut self.view, self.now);
        match *ev {
            Ev::Up(h) => {
                if truth.live.insert(h) && !truth.in_gap {
                    truth.in_flight.push((now, h, true));
                }
            }
            Ev::Down(h) => {
                if truth.live.remove(&h) && !truth.in_gap {
                    truth.in_flight.push((now, h, false));
                }
            }
            Ev::Deliver => {
                if !truth.in_gap {
                    truth.deliver(view, now, true);
                }
            }
            Ev::GapStart => {
                truth.in_gap = true;
                // what was in flight is lost with the connection
                truth.in_flight.clear();
                view.state = ViewState::Invalid {
                    since: t(now),
                    reason: "gap".into(),
                };
            }
            Ev::GapEnd => self.end_gap(),
            Ev::Task { host, ago } => self.task(host, ago),
            Ev::Sweep => self.sweep()?,
        }
        Ok(())
    }

    fn end_gap(&mut self) {
        let (truth, view, now) = (&mut self.truth, &mut self.view, self.now);
        if truth.in_gap {
            truth.in_gap = false;
            truth.last_gap_end = now;
            for h in 0..HOSTS {
                if truth.live.contains(&h) {
                    view.upsert(NodeKind::Worker, NodeInfo::new(&name(h), t(now)));
                } else {
                    view.remove(NodeKind::Worker, &name(h), t(now));
                }
            }
            view.restart_absence_clocks(t(now));
            view.state = ViewState::Valid { since: t(now) };
        }
    }

    fn task(&mut self, host: usize, ago: i64) {
        // DS dispatches only to a worker that is live when it does.
        if self.truth.live.contains(&host) {
            let rows = &mut self.rows;
            let mut c = Candidate::new(rows.len() as i64 + 1, "SHELL", 1, Some(&name(host)));
            c.submit_time = Some(t(self.now - ago.min(self.now)));
            c.workflow_instance_id = Some(1);
            c.workflow_host = Some("m:5678".into());
            rows.push(c);
        }
    }

    fn sweep(&mut self) -> Result<(), TestCaseError> {
        let pl = plan(&self.view, &self.rows, t(self.now), &self.p, &self.safety);
        self.safety = pl.next.clone();
        for z in pl.actions() {
            self.check_action(z)?;
        }
        // A written row is no longer live.
        let acted: BTreeSet<i64> = pl.actions().map(|z| z.task.id).collect();
        self.rows.retain(|c| !acted.contains(&c.id));
        Ok(())
    }

    fn check_action(&self, z: &Zombie) -> Result<(), TestCaseError> {
        let (view, truth, now) = (&self.view, &self.truth, self.now);
        let h: usize = z.task.host.as_deref().unwrap()[1..2].parse().unwrap();
        prop_assert!(view.is_valid());
        if z.reason == Reason::WorkerLost {
            prop_assert!(
                view.live(NodeKind::Worker, &name(h)).is_none(),
                "worker_lost on a host live in the view: {:?}",
                z
            );
        }
        // Absent by the daemon's clock and after the last gap:
        // from when the view last had the host live, never
        // before the listing that ended the last gap, and for
        // a host the view has not had live since then, never
        // before the task's own submit time.
        let seen = self.seen_live.get(&h).copied();
        let mut absent_since = seen.unwrap_or(0).max(truth.last_gap_end);
        if seen.is_none_or(|s| s < truth.last_gap_end) {
            let submit = z.task.submit_time.unwrap().timestamp() - 1_700_000_000;
            absent_since = absent_since.max(submit);
        }
        prop_assert!(
            now - absent_since >= GRACE,
            "acted at {} on task {} of {} absent (after the last gap) only since {}: {:?}",
            now,
            z.task.id,
            name(h),
            absent_since,
            z
        );
        Ok(())
    }
}

/// Plays a history, checking every plan on the way.
fn replay(steps: &[(i64, Ev)]) -> Result<(), TestCaseError> {
    let mut r = Replay::new();
    for &(dt, ref ev) in steps {
        r.advance(dt);
        r.step(ev)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn never_acts_before_grace_after_the_last_gap(
        steps in proptest::collection::vec((prop_oneof![4 => 0i64..20, 1 => 0i64..120], arb_ev()), 1..80),
    ) {
        replay(&steps)?;
    }
}

#[test]
fn a_task_on_a_worker_the_view_has_not_seen_yet_gets_the_full_grace() {
    // The worker registers at 100 and DS dispatches to it at once; the
    // registry event reaches the daemon a few seconds later.
    let steps = [
        (100, Ev::Up(1)),
        (1, Ev::Task { host: 1, ago: 0 }),
        (1, Ev::Sweep),
        (1, Ev::Down(1)),
        (1, Ev::Sweep),
        (30, Ev::Sweep),
        (40, Ev::Sweep),
    ];
    replay(&steps).unwrap();
}
