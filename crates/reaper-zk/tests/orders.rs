//! Kill orders (SPEC §15) as persistent nodes on the shared ZooKeeper, one
//! root per test: written where the agent looks, replaced, listed, removed.

mod zk_setup;

use ds_sim::zk::delete_tree;
use reaper_core::order::{KillOrder, OrderPid};
use reaper_core::ports::RegistrySource;
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
        .map(|(w, o)| (w, o.order_id))
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

    // removed; removing again is no error; an emptied worker folder goes too
    port.delete_order("10.0.0.5:1234", 42).await.unwrap();
    port.delete_order("10.0.0.5:1234", 42).await.unwrap();
    port.delete_order("10.0.0.5:1234", 43).await.unwrap();
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
        .map(|(_, o)| o.order_id)
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
