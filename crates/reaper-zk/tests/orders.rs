//! Kill orders (SPEC §15) as persistent nodes on the shared ZooKeeper, one
//! root per test: written where the agent looks, replaced, listed, removed.

mod zk_setup;

use ds_sim::zk::delete_tree;
use reaper_core::order::{KillOrder, OrderPid};
use reaper_core::ports::{OrderDeletion, RegistrySource};
use reaper_core::DsLine;
use reaper_zk::ZkRegistry;
use tokio_util::sync::CancellationToken;
use zk_setup::*;
use zookeeper_client as zk;

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
async fn orders_are_persistent_nodes_under_the_root() {
    let Some(zk_addr) = shared_zk().await else {
        return;
    };
    let root = unique_root();
    let reg = ZkRegistry::start(
        settings(&zk_addr, &root, Some(DsLine::V3_2)),
        CancellationToken::new(),
    );
    wait_view(&reg, "valid", |v| v.is_valid()).await;
    let port: &dyn RegistrySource = &reg;
    assert!(port.orders().await.unwrap().is_empty(), "no folder yet");

    port.put_order("10.0.0.5:1234", &order(42, "a"))
        .await
        .unwrap();
    port.put_order("10.0.0.5:1234", &order(43, "b"))
        .await
        .unwrap();
    port.put_order("10.0.0.6:1234", &order(42, "c"))
        .await
        .unwrap();
    // a second order for the same task replaces the first
    port.put_order("10.0.0.5:1234", &order(42, "a2"))
        .await
        .unwrap();

    // read with a client of our own: the node is where the agent looks, persistent, the SPEC's JSON
    let client = zk::Client::connect(&zk_addr).await.unwrap();
    let path = format!("{root}/ds-reaper/orders/10.0.0.5:1234/42");
    let (data, stat) = client.get_data(&path).await.unwrap();
    assert_eq!(stat.ephemeral_owner, 0, "persistent");
    let json: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(json["order_id"], "a2");
    assert_eq!(json["pids"][0]["pid"], 4321);
    assert_eq!(json["pids"][0]["start_time"], 1_700_000_000_000i64);
    assert_eq!(json["reason"], "ghost_process");

    // not one of ours: skipped, never an error
    client
        .create(
            &format!("{root}/ds-reaper/orders/10.0.0.6:1234/junk"),
            b"not json",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
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

    // a worker name that is not one path segment is refused
    assert!(port.put_order("../x", &order(1, "x")).await.is_err());
    assert!(port.put_order("", &order(1, "x")).await.is_err());

    // removed at the version read; removing again is no error; an emptied
    // worker folder goes too
    let v42 = version_of(port, "10.0.0.5:1234", 42).await;
    let v43 = version_of(port, "10.0.0.5:1234", 43).await;
    let del = |task, v| port.delete_order("10.0.0.5:1234", task, v);
    assert_eq!(del(42, v42).await.unwrap(), OrderDeletion::Deleted);
    assert_eq!(del(42, v42).await.unwrap(), OrderDeletion::Absent);
    assert_eq!(del(43, v43).await.unwrap(), OrderDeletion::Deleted);
    assert!(client
        .check_stat(&format!("{root}/ds-reaper/orders/10.0.0.5:1234"))
        .await
        .unwrap()
        .is_none());
    let left: Vec<String> = port
        .orders()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.order.order_id)
        .collect();
    assert_eq!(left, ["c"]);

    // orders outlive the daemon's session
    reg.close().await;
    let reg = ZkRegistry::start(
        settings(&zk_addr, &root, Some(DsLine::V3_2)),
        CancellationToken::new(),
    );
    wait_view(&reg, "valid", |v| v.is_valid()).await;
    assert_eq!(RegistrySource::orders(&reg).await.unwrap().len(), 1);
    reg.close().await;
    let _ = delete_tree(&zk_addr, root.trim_end_matches("/dolphinscheduler")).await;
}

/// The version `orders()` reads the order node of `task` at.
async fn version_of(port: &dyn RegistrySource, worker: &str, task: i64) -> i64 {
    let nodes = port.orders().await.unwrap();
    let n = nodes
        .iter()
        .find(|n| n.worker == worker && n.order.task_id == task);
    n.expect("order node").version
}

/// SPEC §15: a node is removed only at the version it was read at, so the
/// order a successor wrote over it after the read stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_replaced_after_it_was_read_is_not_deleted_by_the_old_version() {
    let Some(zk_addr) = shared_zk().await else {
        return;
    };
    let root = unique_root();
    let reg = ZkRegistry::start(
        settings(&zk_addr, &root, Some(DsLine::V3_2)),
        CancellationToken::new(),
    );
    wait_view(&reg, "valid", |v| v.is_valid()).await;
    let port: &dyn RegistrySource = &reg;
    const W: &str = "10.0.0.5:1234";
    port.put_order(W, &order(42, "old")).await.unwrap();
    let seen = version_of(port, W, 42).await;

    // another daemon (the successor) writes a newer order for the task
    let successor = ZkRegistry::start(
        settings(&zk_addr, &root, Some(DsLine::V3_2)),
        CancellationToken::new(),
    );
    wait_view(&successor, "valid", |v| v.is_valid()).await;
    successor.put_order(W, &order(42, "new")).await.unwrap();

    let answer = port.delete_order(W, 42, seen).await.unwrap();
    assert_eq!(answer, OrderDeletion::Changed);
    let left: Vec<String> = port
        .orders()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.order.order_id)
        .collect();
    assert_eq!(left, ["new"], "the successor's order stays");

    // at the version the successor's order is read at, it goes
    let now = version_of(port, W, 42).await;
    assert_ne!(now, seen);
    assert_eq!(
        port.delete_order(W, 42, now).await.unwrap(),
        OrderDeletion::Deleted
    );
    assert!(port.orders().await.unwrap().is_empty());
    successor.close().await;
    reg.close().await;
    let _ = delete_tree(&zk_addr, root.trim_end_matches("/dolphinscheduler")).await;
}
