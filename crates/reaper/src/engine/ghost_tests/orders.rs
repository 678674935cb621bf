//! Removing answered order nodes (SPEC §15): only while leading, asked again
//! before each removal, and only at the version read with the answer.

use super::*;
use reaper_core::order::KillOrder;
use std::sync::atomic::{AtomicBool, Ordering};

/// Tasks 1 and 2 finished on w1, their processes still listed: both ordered
/// killed. Returns the two orders.
async fn two_orders(r: &mut Rig) -> (KillOrder, KillOrder) {
    for id in [1, 2] {
        r.store.insert(task(id));
        r.store.finish(id, 7, t0());
    }
    r.run(&[1, 2], 80).await;
    let nodes = r.reg.order_nodes();
    let get = |id: i64| nodes[&(W1.to_string(), id)].clone();
    (get(1), get(2))
}

fn killed(o: &KillOrder) -> OrderOutcome {
    OrderOutcome {
        order_id: o.order_id.clone(),
        result: OrderResult::Killed,
        detail: String::new(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_deposed_between_two_removals_removes_no_more_order_nodes() {
    let mut r = rig(kill_finished);
    let (o1, o2) = two_orders(&mut r).await;
    // the first removal is the last act of this daemon as leader
    let leader = r.leader.clone();
    r.reg.on_delete_order(move |_| leader.set(false));
    tokio::time::sleep(Duration::from_secs(10)).await;
    r.report(&[], vec![killed(&o1), killed(&o2)]);
    r.engine.sweep(Trigger::Tick).await;

    let left = r.reg.order_nodes();
    assert!(
        !left.contains_key(&(W1.to_string(), 1)),
        "removed as leader"
    );
    assert_eq!(
        left.get(&(W1.to_string(), 2)),
        Some(&o2),
        "no longer the leader: the node is left to the successor"
    );
}

#[tokio::test(start_paused = true)]
async fn an_order_node_rewritten_after_it_was_read_is_not_removed() {
    let mut r = rig(kill_finished);
    let (o1, _) = two_orders(&mut r).await;
    // between the engine's read and its removal, a successor re-issues task 1
    let newer = KillOrder {
        order_id: "successor-1".into(),
        ..o1.clone()
    };
    let once = AtomicBool::new(false);
    let write = newer.clone();
    r.reg.on_delete_order(move |reg| {
        if !once.swap(true, Ordering::SeqCst) {
            reg.write_order(W1, &write);
        }
    });
    tokio::time::sleep(Duration::from_secs(10)).await;
    r.report(&[2], vec![killed(&o1)]);
    r.engine.sweep(Trigger::Tick).await;

    assert_eq!(r.process_events(AuditEvent::Done).len(), 1, "audited");
    assert_eq!(
        r.reg.order_nodes().get(&(W1.to_string(), 1)),
        Some(&newer),
        "the successor's order stays"
    );
}
