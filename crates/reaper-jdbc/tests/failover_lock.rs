//! DS's master-failover locks (SPEC §13) as the JDBC registry source reads
//! them: 3.1.9's `t_ds_mysql_registry_lock` and 3.2.2's
//! `t_ds_jdbc_registry_lock` rows, held by a simulated DS failover (term
//! refreshed), released (row deleted), or left behind by a dead holder.

mod jdbc_setup;

use chrono::TimeDelta;
use ds_sim::db::SimKind;
use ds_sim::jdbc::SimJdbcLock;
use ds_sim::zk::failover_lock_path;
use jdbc_setup::*;
use reaper_jdbc::JdbcRegistry;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SETTLE: Duration = Duration::from_secs(30);
const MASTER: &str = "10.0.7.9:5678";
const OTHER: &str = "10.0.7.8:5678";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc_failover_lock_held_then_settling_then_clear() {
    for (kind, fixture) in [
        (SimKind::MySql, "3.1.9"),
        (SimKind::MySql, "3.2.2"),
        (SimKind::Postgres, "3.2.2"),
    ] {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let line = line_of(fixture);
        for explicit in [true, false] {
            let case = format!("{kind:?} {fixture} (explicit: {explicit})");
            let reg = JdbcRegistry::start(
                settings(db.url(), explicit.then_some(line)),
                CancellationToken::new(),
            )
            .unwrap();
            wait_view(&reg, &format!("{case}: valid"), |v| v.is_valid()).await;
            let lock = failover_lock_path(line, MASTER).unwrap();
            let held = SimJdbcLock::hold(&db, &lock, REFRESH).await.unwrap();
            let v = wait_view(&reg, &format!("{case}: lock held"), |v| {
                v.failover_locks.get(MASTER).is_some_and(|l| l.holders == 1)
            })
            .await;
            let t = now();
            assert!(v.ds_failover_in_progress(MASTER, t, SETTLE), "{case}");
            assert!(!v.ds_failover_in_progress(OTHER, t, SETTLE), "{case}");
            // a holder that keeps its term fresh stays a holder past the expiry window
            let seen = reg.stats().polls;
            wait_until("polls past the expiry window", WAIT, || {
                now() - t > TimeDelta::from_std(EXPIRE * 2).unwrap() && reg.stats().polls > seen + 2
            })
            .await;
            assert_eq!(reg.view().failover_locks[MASTER].holders, 1, "{case}");

            held.release().await.unwrap();
            let v = wait_view(&reg, &format!("{case}: lock released"), |v| {
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
                "{case}: still settling"
            );
            assert!(
                !v.ds_failover_in_progress(MASTER, released + settle, SETTLE),
                "{case}: settled"
            );

            // a holder that died leaves its row; once its term is stale no
            // pass runs under it
            let dead = SimJdbcLock::hold(&db, &lock, REFRESH).await.unwrap();
            wait_view(&reg, &format!("{case}: held again"), |v| {
                v.failover_locks[MASTER].holders == 1
            })
            .await;
            dead.crash();
            wait_view(&reg, &format!("{case}: dead holder's row stale"), |v| {
                v.failover_locks[MASTER].holders == 0
            })
            .await;
            db.exec(match fixture {
                "3.1.9" => "DELETE FROM t_ds_mysql_registry_lock",
                _ => "DELETE FROM t_ds_jdbc_registry_lock",
            })
            .await
            .unwrap();
            reg.close().await;
        }
        db.drop().await.unwrap();
    }
}
