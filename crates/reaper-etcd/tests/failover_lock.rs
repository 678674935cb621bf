//! DS's master-failover locks (SPEC §13) as the etcd adapter reads them:
//! held by a simulated DS failover through etcd's lock API, released by
//! revoking its lease, then settling. One namespace per test.

mod etcd_setup;

use chrono::{TimeDelta, Utc};
use ds_sim::etcd::EtcdSimLock;
use ds_sim::zk::failover_lock_path;
use etcd_setup::*;
use reaper_core::DsLine;
use reaper_etcd::EtcdRegistry;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SETTLE: Duration = Duration::from_secs(30);
const MASTER: &str = "10.0.0.5:5678";
const OTHER: &str = "10.0.0.9:5678";

#[tokio::test]
async fn etcd_failover_lock_held_then_settling_then_clear() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    // etcd is a registry of 3.1 and 3.2 among the lines that need the guard
    for (line, explicit) in [
        (DsLine::V3_1, true),
        (DsLine::V3_1, false),
        (DsLine::V3_2, true),
        (DsLine::V3_2, false),
    ] {
        let (root, ns) = unique_namespace();
        let ctx = format!("line {line} (explicit: {explicit})");
        let mut s = settings(&eps, &ns);
        s.line = explicit.then_some(line);
        let reg = EtcdRegistry::start(s, CancellationToken::new());
        wait_view(&reg, &format!("{ctx}: valid"), |v| v.is_valid()).await;
        let lock = failover_lock_path(line, MASTER).unwrap();
        let held = EtcdSimLock::hold(&eps, &ns, &lock, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(
            held.key().starts_with(&format!("{ns}{lock}/")),
            "{}",
            held.key()
        );
        let v = wait_view(&reg, &format!("{ctx}: lock held"), |v| {
            v.failover_locks.get(MASTER).is_some_and(|l| l.holders == 1)
        })
        .await;
        let now = Utc::now();
        assert!(v.ds_failover_in_progress(MASTER, now, SETTLE), "{ctx}");
        assert!(!v.ds_failover_in_progress(OTHER, now, SETTLE), "{ctx}");

        // a second registry started now lists the lock at its read's revision
        let mut s = settings(&eps, &ns);
        s.line = explicit.then_some(line);
        let late = EtcdRegistry::start(s, CancellationToken::new());
        let v = wait_view(&late, &format!("{ctx}: late reader valid"), |v| {
            v.is_valid()
        })
        .await;
        assert!(
            v.ds_failover_in_progress(MASTER, Utc::now(), SETTLE),
            "{ctx}"
        );
        late.close().await;

        held.release().await.unwrap();
        let v = wait_view(&reg, &format!("{ctx}: lock released"), |v| {
            v.failover_locks
                .get(MASTER)
                .is_some_and(|l| l.holders == 0 && l.released_at.is_some())
        })
        .await;
        let released = v.failover_locks[MASTER].released_at.unwrap();
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
        cleanup(&eps, &root).await;
    }
}
