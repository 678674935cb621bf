//! Kill orders in the agent's registry session (SPEC §15): after every
//! scan the agent lists its own order folder `<root>/ds-reaper/orders/<worker>`,
//! carries each new order out once ([`crate::kill`]), and answers it in every
//! report while the order's node exists — a daemon that missed one report
//! still sees the outcome — and never again once the node is gone. A
//! re-issued order has a new `order_id` and is carried out anew.
//!
//! Order data is outside input: an order that cannot be read but names an
//! `order_id` is answered `refused` with the reason; one without a readable
//! `order_id` cannot be answered at all and is logged (once) and skipped.

use crate::kill::{self, Begun, KillRules};
use crate::metrics::Metrics;
use crate::proc::ProcFs;
use crate::scan::Scan;
use reaper_core::order::{KillOrder, OrderOutcome, OrderResult};
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// `CAP_KILL` (linux/capability.h).
const CAP_KILL: u32 = 5;

/// How many answered orders whose node has gone are remembered, so that a
/// listing that still shows a node being deleted never runs it twice.
const RETIRED_KEPT: usize = 4096;

pub use reaper_core::publish::OrderNode;

/// What the agent knows of its orders; pure bookkeeping, no I/O.
#[derive(Debug, Default)]
pub struct OrderBook {
    /// Outcomes by order_id, answered while the order is listed.
    answered: BTreeMap<String, OrderOutcome>,
    /// Orders being carried out now.
    running: BTreeSet<String>,
    /// The order_ids of the last listing.
    listed: BTreeSet<String>,
    /// Answered orders whose node has gone, oldest first.
    retired: VecDeque<String>,
    retired_set: HashSet<String>,
    /// Unanswerable nodes already logged (name and data).
    skipped: HashSet<(String, Vec<u8>)>,
}

impl OrderBook {
    pub fn new() -> OrderBook {
        OrderBook::default()
    }

    /// Takes a listing of the folder: returns the orders to carry out now
    /// (each once), and answers at once those that cannot be carried out.
    pub fn listed(&mut self, nodes: &[OrderNode]) -> (Vec<KillOrder>, Vec<OrderOutcome>) {
        let mut run = Vec::new();
        let mut refused = Vec::new();
        let mut listed = BTreeSet::new();
        let mut skipped = HashSet::new();
        for node in nodes {
            let (id, order) = match read(node) {
                Ok(o) => (o.order_id.clone(), Ok(o)),
                Err(Unreadable::Answerable(id, why)) => (id, Err(why)),
                Err(Unreadable::Anonymous(why)) => {
                    let key = (node.name.clone(), node.data.clone());
                    if !self.skipped.contains(&key) {
                        tracing::warn!(node = %node.name, why = %why, "an order node without a readable order_id: skipped");
                    }
                    skipped.insert(key);
                    continue;
                }
            };
            if !listed.insert(id.clone()) {
                continue;
            }
            if self.answered.contains_key(&id)
                || self.running.contains(&id)
                || self.retired_set.contains(&id)
            {
                continue;
            }
            match order {
                Ok(o) => {
                    self.running.insert(id);
                    run.push(o);
                }
                Err(why) => {
                    tracing::warn!(node = %node.name, order_id = %id, why = %why, "a malformed kill order: refused");
                    let o = OrderOutcome {
                        order_id: id.clone(),
                        result: OrderResult::Refused,
                        detail: why,
                    };
                    self.answered.insert(id, o.clone());
                    refused.push(o);
                }
            }
        }
        self.skipped = skipped;
        let gone: Vec<String> = self
            .answered
            .keys()
            .filter(|id| !listed.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.answered.remove(&id);
            self.retire(id);
        }
        self.listed = listed;
        (run, refused)
    }

    fn retire(&mut self, id: String) {
        if self.retired_set.insert(id.clone()) {
            self.retired.push_back(id);
        }
        while self.retired.len() > RETIRED_KEPT {
            if let Some(old) = self.retired.pop_front() {
                self.retired_set.remove(&old);
            }
        }
    }

    /// Records the outcome of an order carried out.
    pub fn answer(&mut self, outcome: OrderOutcome) {
        self.running.remove(&outcome.order_id);
        if self.listed.contains(&outcome.order_id) {
            self.answered.insert(outcome.order_id.clone(), outcome);
        } else {
            // its node went while it ran: nobody waits for the answer
            self.retire(outcome.order_id);
        }
    }

    /// The outcomes for the next report: every answered order still listed.
    pub fn outcomes(&self) -> Vec<OrderOutcome> {
        self.answered
            .values()
            .filter(|o| self.listed.contains(&o.order_id))
            .cloned()
            .collect()
    }
}

enum Unreadable {
    /// Not an order, but its `order_id` can be read: answered `refused`.
    Answerable(String, String),
    /// Not even an `order_id`.
    Anonymous(String),
}

fn read(node: &OrderNode) -> Result<KillOrder, Unreadable> {
    let order = match KillOrder::parse(&node.data) {
        Ok(o) => o,
        Err(e) => {
            let id = serde_json::from_slice::<serde_json::Value>(&node.data)
                .ok()
                .and_then(|v| v.get("order_id")?.as_str().map(str::to_string))
                .filter(|id| !id.trim().is_empty());
            return Err(match id {
                Some(id) => Unreadable::Answerable(id, format!("malformed order: {e}")),
                None => Unreadable::Anonymous(format!("not an order: {e}")),
            });
        }
    };
    if order.order_id.trim().is_empty() {
        return Err(Unreadable::Anonymous("an empty order_id".into()));
    }
    if node.name.parse::<i64>().ok() != Some(order.task_id) {
        return Err(Unreadable::Answerable(
            order.order_id,
            format!(
                "the order node {:?} holds an order for task {}",
                node.name, order.task_id
            ),
        ));
    }
    if let Some(bad) = order.pids.iter().find(|p| p.pid <= 0) {
        return Err(Unreadable::Answerable(
            order.order_id,
            format!("pid {} is no process", bad.pid),
        ));
    }
    if order.pids.is_empty() {
        return Err(Unreadable::Answerable(
            order.order_id,
            "the order names no process".into(),
        ));
    }
    Ok(order)
}

/// The agent's orders: the book, the rules and where `/proc` is.
pub(crate) struct Orders {
    book: Mutex<OrderBook>,
    rules: KillRules,
    proc_root: PathBuf,
    metrics: Metrics,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Orders {
    pub(crate) fn new(rules: KillRules, proc_root: PathBuf, metrics: Metrics) -> Orders {
        Orders {
            book: Mutex::new(OrderBook::new()),
            rules,
            proc_root,
            metrics,
        }
    }

    /// Takes a listing; returns the orders to carry out after the next scan.
    pub(crate) fn listed(&self, nodes: &[OrderNode]) -> Vec<KillOrder> {
        let (run, refused) = lock(&self.book).listed(nodes);
        for o in &refused {
            self.count(o);
        }
        run
    }

    fn count(&self, o: &OrderOutcome) {
        self.metrics
            .kills_total
            .with_label_values(&[o.result.as_str()])
            .inc();
    }

    fn answer(&self, o: OrderOutcome) {
        self.count(&o);
        lock(&self.book).answer(o);
    }

    /// Carries out `orders` against `scan` (just made): the checks and
    /// SIGTERM here, on the caller's (blocking) thread; the grace and the
    /// SIGKILL on a blocking thread of their own, so scans go on meanwhile.
    pub(crate) fn carry_out(
        self: &Arc<Self>,
        orders: Vec<KillOrder>,
        scan: &Scan,
        worker_pid: Option<i64>,
        rt: &tokio::runtime::Handle,
    ) {
        for order in orders {
            let mut proc = ProcFs::new(&self.proc_root);
            match kill::begin(&order, scan, worker_pid, self.rules, &mut proc) {
                Begun::Done(o) => {
                    tracing::info!(order_id = %o.order_id, task_id = order.task_id, result = o.result.as_str(), detail = %o.detail, "kill order answered");
                    self.answer(o);
                }
                Begun::Signalled(pending) => {
                    let me = self.clone();
                    let grace = self.rules.grace;
                    rt.spawn_blocking(move || {
                        let o = pending.finish(grace, &mut proc);
                        me.answer(o);
                    });
                }
            }
        }
    }

    /// Says at start what the agent will do with orders; warns when kills
    /// are allowed but the agent lacks `CAP_KILL` (another user's process
    /// could then not be signalled: `partial`).
    pub(crate) fn log_start(&self) {
        if !self.rules.allow {
            tracing::info!("agent.allow_kill is false: kill orders are answered refused");
            return;
        }
        let caps = crate::proc::ProcSource::capabilities(&mut ProcFs::new(&self.proc_root));
        if caps.is_some_and(|c| !crate::proc::has(c, CAP_KILL)) {
            tracing::warn!(
                "agent.allow_kill is true but the agent lacks CAP_KILL: task processes of other users \
                 cannot be signalled (run deploy/systemd/ds-reaper-agent-kill.service or agent-sidecar-kill.yaml)"
            );
        } else {
            tracing::info!(kill_grace = ?self.rules.grace, "agent.allow_kill is true: kill orders of the leading daemon are carried out");
        }
    }

    pub(crate) fn outcomes(&self) -> Vec<OrderOutcome> {
        lock(&self.book).outcomes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reaper_core::order::OrderPid;

    fn node(task: &str, id: &str) -> OrderNode {
        let o = KillOrder {
            task_id: task.parse().unwrap_or(7),
            pids: vec![OrderPid {
                pid: 5,
                start_time: 1,
            }],
            reason: "ghost_process".into(),
            issued_at: 2,
            order_id: id.into(),
        };
        OrderNode {
            name: task.into(),
            data: o.to_json(),
        }
    }

    fn done(id: &str) -> OrderOutcome {
        OrderOutcome {
            order_id: id.into(),
            result: OrderResult::Killed,
            detail: String::new(),
        }
    }

    #[test]
    fn each_order_is_carried_out_once_and_answered_while_its_node_exists() {
        let mut b = OrderBook::new();
        let (run, refused) = b.listed(&[node("7", "a")]);
        assert_eq!(run.len(), 1);
        assert!(refused.is_empty());
        // still running: not again, no answer yet
        assert!(b.listed(&[node("7", "a")]).0.is_empty());
        assert!(b.outcomes().is_empty());
        b.answer(done("a"));
        assert_eq!(b.outcomes(), vec![done("a")]);
        // answered in every report while listed, never run again
        for _ in 0..3 {
            assert!(b.listed(&[node("7", "a")]).0.is_empty());
            assert_eq!(b.outcomes(), vec![done("a")]);
        }
        // the node goes: no more answer; a late listing showing it again
        // does not run it twice
        b.listed(&[]);
        assert!(b.outcomes().is_empty());
        assert!(b.listed(&[node("7", "a")]).0.is_empty());
        // a re-issued order (new id) runs
        let (run, _) = b.listed(&[node("7", "b")]);
        assert_eq!(run[0].order_id, "b");
    }

    #[test]
    fn an_answer_for_an_order_whose_node_went_meanwhile_is_not_reported() {
        let mut b = OrderBook::new();
        assert_eq!(b.listed(&[node("7", "a")]).0.len(), 1);
        b.listed(&[]);
        b.answer(done("a"));
        assert!(b.outcomes().is_empty());
        assert!(b.listed(&[node("7", "a")]).0.is_empty());
    }

    /// Arbitrary bytes, and valid orders with bytes flipped or cut, as order
    /// data and node names: the book answers or skips, never panics, and
    /// every order it runs is one it could read.
    #[test]
    fn arbitrary_order_data_never_panics() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let valid = node("7", "v").data;
        let mut b = OrderBook::new();
        for i in 0..20_000u32 {
            let mut data = if i % 2 == 0 {
                valid.clone()
            } else {
                (0..(next() % 64)).map(|_| next() as u8).collect()
            };
            for _ in 0..(next() % 4) {
                if data.is_empty() {
                    break;
                }
                let at = (next() as usize) % data.len();
                match next() % 3 {
                    0 => data[at] = next() as u8,
                    1 => data.truncate(at),
                    _ => {
                        let punct = b"{}[],:\"0-";
                        data.insert(at, punct[(next() as usize) % punct.len()])
                    }
                }
            }
            let name = match next() % 3 {
                0 => "7".to_string(),
                1 => (next() % 100).to_string(),
                _ => String::from_utf8_lossy(&[next() as u8, next() as u8]).into_owned(),
            };
            let (run, refused) = b.listed(&[OrderNode { name, data }]);
            for o in &run {
                assert!(!o.order_id.trim().is_empty() && !o.pids.is_empty());
                assert!(o.pids.iter().all(|p| p.pid > 0));
                b.answer(done(&o.order_id));
            }
            assert!(refused.iter().all(|o| o.result == OrderResult::Refused));
        }
    }

    #[test]
    fn malformed_orders_are_refused_or_skipped_never_a_panic() {
        let mut b = OrderBook::new();
        let bad = [
            OrderNode {
                name: "7".into(),
                data: br#"{"order_id":"x1","task_id":"seven"}"#.to_vec(),
            },
            node("8", "x2"), // the node says 8, the data 8: fine
            OrderNode {
                name: "9".into(),
                data: node("10", "x3").data, // data for task 10 under node 9
            },
            OrderNode {
                name: "11".into(),
                data: br#"{"task_id":11,"pids":[],"reason":"r","issued_at":1,"order_id":"x4"}"#
                    .to_vec(),
            },
            OrderNode {
                name: "12".into(),
                data: b"\xff\x00 not json".to_vec(),
            },
            OrderNode {
                name: "14".into(),
                data: br#"{"task_id":14,"pids":[{"pid":-1,"start_time":1}],"reason":"r","issued_at":1,"order_id":"x5"}"#
                    .to_vec(),
            },
            OrderNode {
                name: "13".into(),
                data: br#"{"order_id":""}"#.to_vec(),
            },
        ];
        let (run, refused) = b.listed(&bad);
        assert_eq!(
            run.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(),
            ["x2"]
        );
        let ids: Vec<&str> = refused.iter().map(|o| o.order_id.as_str()).collect();
        assert_eq!(ids, ["x1", "x3", "x4", "x5"]);
        assert!(refused.iter().all(|o| o.result == OrderResult::Refused));
        assert!(refused[0].detail.contains("malformed order"), "{refused:?}");
        assert!(refused[1].detail.contains("task 10"), "{refused:?}");
        assert!(refused[2].detail.contains("no process"), "{refused:?}");
        assert!(refused[3].detail.contains("pid -1"), "{refused:?}");
        // the refusals are in the reports; nothing runs twice
        assert_eq!(b.outcomes().len(), 4);
        let (run, refused) = b.listed(&bad);
        assert!(run.is_empty() && refused.is_empty());
    }
}
