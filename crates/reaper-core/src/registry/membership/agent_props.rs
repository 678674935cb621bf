//! Random agent report histories through the membership and the planner
//! (SPEC §12): listings, unreadable and blind scans, node deletions, agent
//! restarts and gaps in the daemon's sight of the registry, checked against an
//! oracle that keeps the reports as they arrived.

use super::*;
use crate::plan::{plan, Blocked, Disposition, SafetyState};
use crate::policy::{Action, Policy};
use crate::reason::Reason;
use crate::Candidate;

const STALE: i64 = 35;
const GONE_AFTER: i64 = 60;
/// w1 stays live (its task may be `process_gone`); w2 is lost at t(1) (its
/// task is `worker_lost`, held while its agent's listing is young).
const WORKERS: [&str; 2] = ["w1:1234", "w2:1234"];

#[derive(Debug, Clone)]
enum Op {
    /// Agent k reports: lists its task, unreadable processes, blind.
    Report(usize, bool, bool, bool),
    /// Agent k's node goes (a crash, its session lost).
    Delete(usize),
    /// The daemon loses sight of the registry and lists it again.
    Gap(bool),
    /// Time passes (seconds).
    Wait(i64),
    Sweep,
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, any::<bool>(), prop::bool::weighted(0.15), prop::bool::weighted(0.1))
            .prop_map(|(k, l, u, b)| Op::Report(k, l, u, b)),
        1 => (0..2usize).prop_map(Op::Delete),
        1 => any::<bool>().prop_map(Op::Gap),
        6 => prop_oneof![4 => 0i64..15, 1 => 15i64..70].prop_map(Op::Wait),
        4 => Just(Op::Sweep),
    ]
}

/// One report as the daemon received it.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    at: i64,
    lists: bool,
    complete: bool,
}

#[derive(Debug, Default, Clone)]
struct AgentTruth {
    arrivals: Vec<Arrival>,
    /// The data of the node while it exists.
    node: Option<Vec<u8>>,
    /// The current freshness streak's start, kept by the oracle's own rule.
    since: Option<i64>,
    /// Something broke the streak since the latest arrival (a deletion, a gap).
    broken: bool,
}

impl AgentTruth {
    fn arrive(&mut self, a: Arrival) {
        let carries = match (self.arrivals.last(), self.since) {
            (Some(p), Some(_)) => !self.broken && p.complete && a.at - p.at <= STALE,
            _ => false,
        };
        if !carries {
            self.since = Some(a.at);
        }
        self.broken = false;
        self.arrivals.push(a);
    }
    fn last_listing(&self) -> Option<Arrival> {
        self.arrivals.iter().rev().find(|a| a.lists).copied()
    }
}

fn report_json(worker: &str, task: i64, lists: bool, unreadable: bool, blind: bool) -> Vec<u8> {
    crate::agent::AgentReport {
        tty_tasks: 0,
        app_id_sources: None,
        worker: worker.into(),
        agent_version: "prop".into(),
        seq: 1,
        scan_started_at: t(0).timestamp_millis(),
        scan_ms: 3,
        exec_base: "/tmp/ds".into(),
        unreadable: unreadable as u64,
        orders: Vec::new(),
        blind: blind.then(|| "worker pid not visible".to_string()),
        tasks: if lists {
            vec![crate::agent::AgentTask {
                lineage: None,
                task_id: task,
                workflow_instance_id: 1,
                pids: vec![10],
                started_at: 0,
                processes: vec![],
                app_ids: vec![],
            }]
        } else {
            vec![]
        },
    }
    .to_json()
}

fn agent_path(k: usize) -> String {
    format!("/ds-reaper/agents/{}", WORKERS[k])
}

fn server_nodes() -> Vec<ListedNode> {
    vec![
        node("/nodes/worker/w1:1234", json(-100, 0, None)),
        node("/nodes/master/m1:5678", json(-100, 0, None)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn agent_histories_never_prove_absence_unseen_and_never_release_a_young_listing(
        ops in proptest::collection::vec(arb_op(), 1..90)
    ) {
        let mut policy = Policy::defaults(DsLine::V3_2);
        policy.worker_lost = Action::Fail;
        policy.process_gone = Action::Fail;
        policy.startup_settle = std::time::Duration::ZERO;
        policy.heartbeat_stale_after = std::time::Duration::from_secs(1_000_000);
        policy.process_gone_after = std::time::Duration::from_secs(GONE_AFTER as u64);
        policy.agent_stale_after = std::time::Duration::from_secs(STALE as u64);
        policy.max_actions_per_sweep = 10;
        policy.brake.max_lost_worker_fraction = 1.1;
        policy.brake.min_zombies = 1_000;
        let mut m = Membership::new(LayoutMode::Auto, utc(), t(0), "connecting")
            .with_agents("ds-reaper/agents/", std::time::Duration::from_secs(STALE as u64));
        let mut nodes = server_nodes();
        nodes.push(node("/nodes/worker/w2:1234", json(-100, 0, None)));
        m.apply_listing(listing(nodes), t(0));
        m.apply([deleted("/nodes/worker/w2:1234")], t(1));
        let cands: Vec<Candidate> = (0..2)
            .map(|k| {
                let mut c = Candidate::new(k as i64 + 1, "SHELL", 1, Some(WORKERS[k]));
                c.submit_time = Some(t(0));
                c.start_time = Some(t(0));
                c.workflow_instance_id = Some(1);
                c.workflow_host = Some("m1:5678".into());
                c
            })
            .collect();
        let mut truth = [AgentTruth::default(), AgentTruth::default()];
        let mut state = SafetyState::default();
        let mut now = 1i64;
        for op in ops {
            match op {
                Op::Wait(s) => now += s,
                Op::Report(k, lists, unreadable, blind) => {
                    let data = report_json(WORKERS[k], k as i64 + 1, lists, unreadable, blind);
                    let ev = if truth[k].node.is_some() {
                        changed(&agent_path(k), data.clone())
                    } else {
                        present(&agent_path(k), data.clone())
                    };
                    m.apply([ev], t(now));
                    truth[k].node = Some(data);
                    truth[k].arrive(Arrival { at: now, lists, complete: !unreadable && !blind });
                }
                Op::Delete(k) => {
                    if truth[k].node.take().is_some() {
                        m.apply([deleted(&agent_path(k))], t(now));
                        truth[k].broken = true;
                    }
                }
                Op::Gap(session) => {
                    let gap = if session { Gap::Session } else { Gap::Connection };
                    m.invalidate(gap, "gap", t(now));
                    now += 1;
                    let mut nodes = server_nodes();
                    for (k, a) in truth.iter_mut().enumerate() {
                        a.broken = true;
                        if let Some(data) = a.node.clone() {
                            nodes.push(node(&agent_path(k), data));
                            let last = *a.arrivals.last().expect("a node has a report");
                            a.arrive(Arrival { at: now, ..last });
                        }
                    }
                    m.apply_listing(listing(nodes), t(now));
                }
                Op::Sweep => {
                    let pl = plan(m.view(), &cands, t(now), &policy, &state);
                    state = pl.next.clone();
                    for z in &pl.zombies {
                        let a = &truth[(z.task.id - 1) as usize];
                        if z.reason == Reason::ProcessGone {
                            // seen, then gone: a listing in the current streak,
                            // then only complete reports lacking it, for long enough
                            let since = a.since.expect("a report arrived");
                            let listing = a.last_listing();
                            prop_assert!(
                                listing.is_some_and(|l| l.at >= since),
                                "process_gone for a task never listed in the streak since {since}: {:?}", a.arrivals
                            );
                            let l = listing.unwrap();
                            let first_after = a.arrivals.iter().find(|x| x.at > l.at)
                                .expect("a report after the listing");
                            prop_assert!(now - first_after.at >= GONE_AFTER,
                                "gone too early at {now}: {:?}", a.arrivals);
                            prop_assert!(a.node.is_some() && a.arrivals.last().is_some_and(|x| x.complete && !x.lists));
                        }
                        if z.reason == Reason::WorkerLost {
                            let young = a.last_listing().filter(|l| now - l.at <= STALE);
                            let released = young.is_some_and(|l| {
                                a.arrivals.iter().any(|x| x.at > l.at && x.complete)
                            });
                            if young.is_some() && !released {
                                prop_assert_eq!(
                                    &z.disposition,
                                    &Disposition::Blocked(Blocked::ProcessAlive),
                                    "a listing at {:?} is {}s old and nothing complete came after", young, now
                                );
                            } else {
                                prop_assert_ne!(
                                    &z.disposition,
                                    &Disposition::Blocked(Blocked::ProcessAlive),
                                    "held with no young listing: {:?}", a.arrivals
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
