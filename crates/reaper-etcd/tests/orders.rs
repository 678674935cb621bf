//! Kill orders (SPEC §15) as keys on the shared etcd, one namespace per
//! test: written where the agent looks, bound to no lease, replaced, listed,
//! removed.

mod etcd_setup;

use etcd_setup::*;
use reaper_core::order::{KillOrder, OrderPid};
use reaper_core::ports::{OrderDeletion, RegistrySource};
use reaper_etcd::EtcdRegistry;
use tokio_util::sync::CancellationToken;

fn order(task_id: i64, id: &str) -> KillOrder {
    KillOrder {
        task_id,
        pids: vec![OrderPid {
            pid: 4321,
            start_time: 1_700_000_000_000,
        }],
        reason: "ghost_process".into(),
        issued_at: 1_700_000_100_000,
        order_id: id.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_are_plain_keys_under_the_namespace() {
    let Some(endpoints) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let reg = EtcdRegistry::start(settings(&endpoints, &ns), CancellationToken::new());
    let port: &dyn RegistrySource = &reg;
    assert!(port.orders().await.unwrap().is_empty());

    port.put_order("10.0.0.5:1234", &order(42, "a"))
        .await
        .unwrap();
    port.put_order("10.0.0.5:1234", &order(43, "b"))
        .await
        .unwrap();
    port.put_order("10.0.0.6:1234", &order(42, "c"))
        .await
        .unwrap();
    port.put_order("10.0.0.5:1234", &order(42, "a2"))
        .await
        .unwrap();

    // read with a client of our own: the key is where the agent looks, with no lease
    let mut client = etcd_client::Client::connect(endpoints.clone(), None)
        .await
        .unwrap();
    let key = format!("{ns}/ds-reaper/orders/10.0.0.5:1234/42");
    let resp = client.get(key.as_str(), None).await.unwrap();
    let kv = &resp.kvs()[0];
    assert_eq!(kv.lease(), 0, "bound to no lease");
    assert_eq!(KillOrder::parse(kv.value()).unwrap(), order(42, "a2"));
    // another namespace sharing the first letters is not ours
    client
        .put(
            format!("{ns}x/ds-reaper/orders/w/1"),
            order(1, "z").to_json(),
            None,
        )
        .await
        .unwrap();
    client
        .put(
            format!("{ns}/ds-reaper/orders/10.0.0.6:1234/junk"),
            "not json",
            None,
        )
        .await
        .unwrap();

    let mut all: Vec<(String, String)> = port
        .orders()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.worker, n.order.order_id))
        .collect();
    all.sort();
    assert_eq!(
        all,
        [
            ("10.0.0.5:1234".to_string(), "a2".to_string()),
            ("10.0.0.5:1234".into(), "b".into()),
            ("10.0.0.6:1234".into(), "c".into()),
        ]
    );
    assert!(port.put_order("a/b", &order(1, "x")).await.is_err());

    let v42 = version_of(port, "10.0.0.5:1234", 42).await;
    let del = || port.delete_order("10.0.0.5:1234", 42, v42);
    assert_eq!(del().await.unwrap(), OrderDeletion::Deleted);
    assert_eq!(del().await.unwrap(), OrderDeletion::Absent);
    let left: Vec<String> = port
        .orders()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.order.order_id)
        .collect();
    assert_eq!(left.len(), 2);
    assert!(!left.contains(&"a2".to_string()));
    reg.close().await;
    cleanup(&endpoints, &root).await;
    cleanup(&endpoints, &format!("{ns}x")).await;
}

/// The version (`mod_revision`) `orders()` reads the order key of `task` at.
async fn version_of(port: &dyn RegistrySource, worker: &str, task: i64) -> i64 {
    let nodes = port.orders().await.unwrap();
    let n = nodes
        .iter()
        .find(|n| n.worker == worker && n.order.task_id == task);
    n.expect("order key").version
}

/// SPEC §15: a key is removed only at the `mod_revision` it was read at, so
/// the order a successor wrote over it after the read stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_replaced_after_it_was_read_is_not_deleted_by_the_old_version() {
    let Some(endpoints) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let reg = EtcdRegistry::start(settings(&endpoints, &ns), CancellationToken::new());
    let port: &dyn RegistrySource = &reg;
    const W: &str = "10.0.0.5:1234";
    port.put_order(W, &order(42, "old")).await.unwrap();
    let seen = version_of(port, W, 42).await;

    // another daemon (the successor) writes a newer order for the task
    let successor = EtcdRegistry::start(settings(&endpoints, &ns), CancellationToken::new());
    successor.put_order(W, &order(42, "new")).await.unwrap();

    assert_eq!(
        port.delete_order(W, 42, seen).await.unwrap(),
        OrderDeletion::Changed
    );
    let left: Vec<String> = port
        .orders()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.order.order_id)
        .collect();
    assert_eq!(left, ["new"], "the successor's order stays");

    let now = version_of(port, W, 42).await;
    assert!(now > seen, "{now} > {seen}");
    assert_eq!(
        port.delete_order(W, 42, now).await.unwrap(),
        OrderDeletion::Deleted
    );
    assert!(port.orders().await.unwrap().is_empty());
    successor.close().await;
    reg.close().await;
    cleanup(&endpoints, &root).await;
}
