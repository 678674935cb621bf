//! DS's master-failover locks (SPEC §13) as the ZooKeeper adapter reads
//! them: held by a simulated DS failover (Curator's lock node), released,
//! then settling. One root per test on the shared ZooKeeper.

mod zk_setup;

use chrono::{TimeDelta, Utc};
use ds_sim::zk::{delete_tree, failover_lock_path, SimZkLock, FAILOVER_MASTERS_LOCK};
use reaper_core::view::ANY_MASTER;
use reaper_core::DsLine;
use reaper_zk::ZkRegistry;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zk_setup::*;

const SETTLE: Duration = Duration::from_secs(30);
const MASTER: &str = "10.0.0.5:5678";
const OTHER: &str = "10.0.0.9:5678";

/// Holds `lock`, checks who the view says is in DS's failover, releases it
/// and checks the settle period against the release the view recorded.
async fn held_then_released(zk: &str, line: Option<DsLine>, lock: &str, key: &str, other: bool) {
    let root = unique_root();
    let ctx = format!("line {line:?}, lock {lock}");
    let reg = ZkRegistry::start(settings(zk, &root, line), CancellationToken::new());
    wait_view(&reg, &format!("{ctx}: valid"), |v| v.is_valid()).await;
    assert!(!reg
        .view()
        .ds_failover_in_progress(MASTER, Utc::now(), SETTLE));

    let held = SimZkLock::hold(zk, &root, lock).await.unwrap();
    let v = wait_view(&reg, &format!("{ctx}: lock held"), |v| {
        v.failover_locks.get(key).is_some_and(|l| l.holders == 1)
    })
    .await;
    let now = Utc::now();
    assert!(v.ds_failover_in_progress(MASTER, now, SETTLE), "{ctx}");
    assert_eq!(
        v.ds_failover_in_progress(OTHER, now, SETTLE),
        other,
        "{ctx}"
    );

    held.release().await.unwrap();
    let v = wait_view(&reg, &format!("{ctx}: lock released"), |v| {
        v.failover_locks
            .get(key)
            .is_some_and(|l| l.holders == 0 && l.released_at.is_some())
    })
    .await;
    let released = v.failover_locks[key].released_at.unwrap();
    let settle = TimeDelta::from_std(SETTLE).unwrap();
    assert!(
        v.ds_failover_in_progress(
            MASTER,
            released + settle - TimeDelta::milliseconds(1),
            SETTLE
        ),
        "{ctx}: still settling"
    );
    assert!(
        !v.ds_failover_in_progress(MASTER, released + settle, SETTLE),
        "{ctx}: settled"
    );
    reg.close().await;
    let _ = delete_tree(zk, &root).await;
}

#[tokio::test]
async fn zk_failover_lock_held_then_settling_then_clear() {
    let Some(zk) = shared_zk().await else { return };
    for line in [DsLine::V2_0, DsLine::V3_0, DsLine::V3_1, DsLine::V3_2] {
        let lock = failover_lock_path(line, MASTER).unwrap();
        for explicit in [true, false] {
            held_then_released(&zk, explicit.then_some(line), &lock, MASTER, false).await;
        }
    }
    // 1.3 (and 2.0.0–2.0.1): one lock for every master
    for line in [Some(DsLine::V1_3), Some(DsLine::V2_0), None] {
        held_then_released(&zk, line, FAILOVER_MASTERS_LOCK, ANY_MASTER, true).await;
    }
}

#[tokio::test]
async fn zk_failover_lock_of_3_3_and_of_another_line_are_not_read() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    // detected line: 3.3's single lock under the 3.2 directory names no master
    let reg = ZkRegistry::start(settings(&zk, &root, None), CancellationToken::new());
    wait_view(&reg, "valid", |v| v.is_valid()).await;
    let l33 = SimZkLock::hold(&zk, &root, "/lock/master-failover")
        .await
        .unwrap();
    // a 3.2 lock taken afterwards is read together with everything else there
    let l32 = SimZkLock::hold(
        &zk,
        &root,
        &failover_lock_path(DsLine::V3_2, MASTER).unwrap(),
    )
    .await
    .unwrap();
    let v = wait_view(&reg, "3.2 lock held", |v| {
        v.failover_locks.contains_key(MASTER)
    })
    .await;
    assert_eq!(v.failover_locks.len(), 1, "{:?}", v.failover_locks);
    reg.close().await;

    // an explicit 3.1 does not read 3.2's directory; 3.3 reads none
    for line in [DsLine::V3_1, DsLine::V3_3] {
        let reg = ZkRegistry::start(settings(&zk, &root, Some(line)), CancellationToken::new());
        wait_view(&reg, "valid", |v| v.is_valid()).await;
        assert!(reg.view().failover_locks.is_empty(), "{line}");
        assert!(!reg
            .view()
            .ds_failover_in_progress(MASTER, Utc::now(), SETTLE));
        reg.close().await;
    }
    // an explicit 3.2 reads it from the first listing on
    let reg = ZkRegistry::start(
        settings(&zk, &root, Some(DsLine::V3_2)),
        CancellationToken::new(),
    );
    let v = wait_view(&reg, "valid", |v| v.is_valid()).await;
    assert!(v.ds_failover_in_progress(MASTER, Utc::now(), SETTLE));
    reg.close().await;
    l32.release().await.unwrap();
    l33.release().await.unwrap();
    let _ = delete_tree(&zk, &root).await;
}
