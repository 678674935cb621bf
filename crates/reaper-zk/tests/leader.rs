//! Leader election between two replicas on the shared ZooKeeper.

mod common;

use common::*;
use reaper_zk::LeaderElection;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_leader_and_takeover_after_close() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let a = LeaderElection::start(
        settings(&zk, &root, None),
        "/ds-reaper/leader".into(),
        "a".into(),
        CancellationToken::new(),
    );
    let b = LeaderElection::start(
        settings(&zk, &root, None),
        "/ds-reaper/leader".into(),
        "b".into(),
        CancellationToken::new(),
    );
    wait_until("one leader", || a.is_leader() || b.is_leader()).await;
    // let both settle, then exactly one leads
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
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
    let a = LeaderElection::start(
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
