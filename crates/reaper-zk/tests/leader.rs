//! Leader election between two replicas on the shared ZooKeeper.

mod zk_setup;

use reaper_zk::ZkLeader;
use tokio_util::sync::CancellationToken;
use zk_setup::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_leader_and_takeover_after_close() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let a = ZkLeader::start(
        settings(&zk, &root, None),
        "/ds-reaper/leader".into(),
        "a".into(),
        CancellationToken::new(),
    );
    let b = ZkLeader::start(
        settings(&zk, &root, None),
        "/ds-reaper/leader".into(),
        "b".into(),
        CancellationToken::new(),
    );
    wait_until("one leader", || a.is_leader() || b.is_leader()).await;
    reaper_test_support::hold("both settle", std::time::Duration::from_secs(1)).await;
    // and exactly one leads
    assert!(
        a.is_leader() ^ b.is_leader(),
        "a={} b={}",
        a.is_leader(),
        b.is_leader()
    );
    let (leader, follower) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    let mut rx = follower.subscribe();
    leader.close().await;
    assert!(!leader.is_leader());
    // close() resigned at once: the leader's node is gone when it returns,
    // not after its session timeout
    let other = zookeeper_client::Client::connect(&zk).await.unwrap();
    let left = other
        .list_children(&format!("{root}/ds-reaper/leader"))
        .await
        .unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    tokio::time::timeout(WAIT, rx.wait_for(|v| *v))
        .await
        .expect("takeover")
        .unwrap();
    assert!(follower.is_leader());
    follower.close().await;
    assert!(!follower.is_leader());
    let _ = ds_sim::zk::delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_token_resigns_too() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let cancel = CancellationToken::new();
    let a = ZkLeader::start(
        settings(&zk, &root, None),
        "/ds-reaper/leader".into(),
        "a".into(),
        cancel.clone(),
    );
    let mut rx = a.subscribe();
    tokio::time::timeout(WAIT, rx.wait_for(|v| *v))
        .await
        .expect("leads alone")
        .unwrap();
    cancel.cancel();
    tokio::time::timeout(WAIT, rx.wait_for(|v| !*v))
        .await
        .expect("resigned")
        .unwrap();
    a.close().await;
    let _ = ds_sim::zk::delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}

/// SPEC §8: a standby answers a reap with the leader's id, so each replica
/// must know who leads — the id as registered, not the node name's form of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_knows_the_leaders_id() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let start = |id: &str| {
        ZkLeader::start(
            settings(&zk, &root, None),
            "/ds-reaper/leader".into(),
            id.into(),
            CancellationToken::new(),
        )
    };
    // characters the latch node's name replaces
    let (id_a, id_b) = (
        "reaper-a@10.0.0.1:9477 pid 11",
        "reaper-b@10.0.0.2:9477 pid 22",
    );
    let a = start(id_a);
    let b = start(id_b);
    wait_until("one leader", || a.is_leader() || b.is_leader()).await;
    let (leader, standby, leader_id, standby_id) = if a.is_leader() {
        (&a, &b, id_a, id_b)
    } else {
        (&b, &a, id_b, id_a)
    };
    wait_until("the standby knows the leader", || {
        standby.leader_id().as_deref() == Some(leader_id)
    })
    .await;
    assert!(!standby.is_leader());
    assert_eq!(leader.leader_id().as_deref(), Some(leader_id));

    // the standby takes over and names itself
    leader.close().await;
    assert_eq!(
        leader.leader_id(),
        None,
        "a closed election knows no leader"
    );
    wait_until("the standby leads", || standby.is_leader()).await;
    assert_eq!(standby.leader_id().as_deref(), Some(standby_id));

    // a third replica joining as standby learns it too
    let c = start("reaper-c");
    wait_until("the newcomer knows the leader", || {
        c.leader_id().as_deref() == Some(standby_id)
    })
    .await;
    assert!(!c.is_leader());
    standby.close().await;
    c.close().await;
    let _ = ds_sim::zk::delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}
