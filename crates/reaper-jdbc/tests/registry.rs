//! The JDBC registry source against real MariaDB and PostgreSQL, with DS
//! servers simulated as DS writes them (ds-sim's `jdbc`): 3.1.9's MySQL
//! registry, 3.2.2's JDBC registry on both databases, dev's JDBC registry
//! with client heartbeats on both.

mod jdbc_setup;

use chrono::Utc;
use ds_sim::db::SimKind;
use ds_sim::jdbc::{SimJdbcServer, SimRegistryDb};
use jdbc_setup::proxy::{split_url, Proxy};
use jdbc_setup::*;
use reaper_core::ports::RegistrySource;
use reaper_core::{DsLine, NodeKind, RegistryView};
use reaper_jdbc::{Flavour, JdbcRegistry};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const W1: &str = "10.0.7.1:1234";
const W2: &str = "10.0.7.2:1234";
const M1: &str = "10.0.7.9:5678";

fn flavour_of(fixture: &str) -> Flavour {
    match fixture {
        "3.1.9" => Flavour::MySql31,
        "3.2.2" => Flavour::Term32,
        _ => Flavour::Client33,
    }
}

async fn server(db: &SimRegistryDb, kind: NodeKind, host: &str) -> SimJdbcServer {
    let line = line_of(&db.fixture);
    SimJdbcServer::register(db, line, kind, host, Utc::now(), sim_opts())
        .await
        .expect("sim server")
}

fn live(v: &RegistryView, h: &str) -> bool {
    v.live(NodeKind::Worker, h).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_worker_is_stamped_at_the_first_poll_that_misses_it() {
    for &(kind, fixture) in CASES {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let case = format!("{kind:?} {fixture}");
        let mut w1 = server(&db, NodeKind::Worker, W1).await;
        let _w2 = server(&db, NodeKind::Worker, W2).await;
        let _m = server(&db, NodeKind::Master, M1).await;
        let reg = JdbcRegistry::start(settings(db.url(), None), CancellationToken::new()).unwrap();
        let v = wait_view(&reg, "two workers and a master", |v| {
            v.is_valid() && live(v, W1) && live(v, W2) && v.live(NodeKind::Master, M1).is_some()
        })
        .await;
        assert!(
            v.agents.is_empty(),
            "{case}: no agents on the JDBC registry"
        );
        assert_eq!(reg.flavour(), Some(flavour_of(fixture)), "{case}");
        // the keys say flat and the heartbeat's format, the tables the line
        assert_eq!(reg.detected().lines, vec![line_of(fixture)], "{case}");
        assert_eq!(RegistrySource::kind(&reg), "jdbc");
        let w = v.live(NodeKind::Worker, W1).unwrap();
        assert!(
            w.startup_time.is_some() && w.report_time.is_some(),
            "{case}: {w:?}"
        );

        // W1 dies and its row goes, between two polls
        w1.crash().await;
        polls(&reg, 1).await;
        let before = reg.stats().polls;
        let deleted_at = Utc::now();
        db.db.remove_key(&w1.keys()[0]).await.unwrap();
        let v = wait_view(&reg, "W1 lost", |v| !live(v, W1)).await;
        let lost_at = v.lost_workers.get(W1).copied().expect("W1 in lost_workers");
        // the first poll after the delete saw it: never earlier, at most one interval later
        assert!(
            lost_at >= deleted_at,
            "{case}: lost {lost_at} before the delete {deleted_at}"
        );
        assert!(
            (lost_at - deleted_at).to_std().unwrap() <= POLL + Duration::from_millis(500),
            "{case}: lost {lost_at}, deleted {deleted_at}"
        );
        assert!(
            reg.stats().polls <= before + 2,
            "{case}: found by the first polls after it"
        );
        assert!(live(&v, W2), "{case}: W2 untouched");
        // later polls keep the first stamp
        polls(&reg, 3).await;
        assert_eq!(reg.view().lost_workers.get(W1), Some(&lost_at), "{case}");
        reg.close().await;
        assert!(!reg.view().is_valid(), "{case}: closed");
        db.drop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_term_or_heartbeat_is_stale_counts_as_gone_though_it_exists() {
    for &(kind, fixture) in CASES {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let case = format!("{kind:?} {fixture}");
        let mut w1 = server(&db, NodeKind::Worker, W1).await;
        let w2 = server(&db, NodeKind::Worker, W2).await;
        let reg = JdbcRegistry::start(settings(db.url(), None), CancellationToken::new()).unwrap();
        wait_view(&reg, "two workers", |v| {
            v.is_valid() && live(v, W1) && live(v, W2)
        })
        .await;

        // kill -9: W1 stops refreshing; no live DS server purges its row
        w1.crash().await;
        let crashed_at = Utc::now();
        let v = wait_view(&reg, "W1 dead by DS's rule", |v| !live(v, W1)).await;
        let lost_at = v.lost_workers[W1];
        assert!(
            db.db.has_key(&w1.keys()[0]).await.unwrap(),
            "{case}: the row is still there"
        );
        assert!(reg.stats().dead_rows >= 1, "{case}: {:?}", reg.stats());
        // not before its term/heartbeat could have expired (3.3 stores the
        // previous refresh's time: up to two refreshes old)
        let earliest = crashed_at + chrono::TimeDelta::from_std(EXPIRE - 2 * REFRESH).unwrap()
            - chrono::TimeDelta::milliseconds(50);
        assert!(
            lost_at >= earliest,
            "{case}: lost {lost_at}, crashed {crashed_at}"
        );
        assert!(live(&v, W2), "{case}: W2 keeps refreshing");

        // it comes back: a new registration, live again
        w1.restart(Utc::now()).await.unwrap();
        wait_view(&reg, "W1 back", |v| {
            live(v, W1) && !v.lost_workers.contains_key(W1)
        })
        .await;

        if fixture == "dev" {
            // DS left a row whose client's heartbeat row is gone (reference §8): dead
            let client = w2.client_id().expect("a 3.3 client");
            db.exec(&format!(
                "DELETE FROM t_ds_jdbc_registry_client_heartbeat WHERE id = {client}"
            ))
            .await
            .unwrap();
            wait_view(&reg, "W2 without a client", |v| !live(v, W2)).await;
            assert!(db.db.has_key(&w2.keys()[0]).await.unwrap());
        } else {
            // a term written by hand: fresh, then stale — dead at the next poll
            let mut w2 = w2;
            w2.crash().await;
            let key = w2.keys()[0].clone();
            db.db
                .set_term(&key, Utc::now().timestamp_millis())
                .await
                .unwrap();
            polls(&reg, 2).await;
            assert!(live(&reg.view(), W2), "{case}: a fresh term is live");
            let stale_at = Utc::now();
            db.db
                .set_term(&key, stale_at.timestamp_millis() - 60_000)
                .await
                .unwrap();
            let v = wait_view(&reg, "W2 stale", |v| !live(v, W2)).await;
            let lost = v.lost_workers[W2];
            assert!(lost >= stale_at, "{case}");
            assert!(
                (lost - stale_at).to_std().unwrap() <= POLL + Duration::from_millis(500),
                "{case}: judged at the first poll after it went stale"
            );
            assert!(db.db.has_key(&key).await.unwrap());
        }
        reg.close().await;
        db.drop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_flaps_between_two_polls_is_never_lost() {
    for &(kind, fixture) in CASES {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let case = format!("{kind:?} {fixture}");
        let startup = Utc::now() - chrono::TimeDelta::minutes(5);
        let line = line_of(fixture);
        let mut w1 = SimJdbcServer::register(&db, line, NodeKind::Worker, W1, startup, sim_opts())
            .await
            .unwrap();
        let mut s = settings(db.url(), None);
        s.poll_interval = Duration::from_millis(1500);
        let reg = JdbcRegistry::start(s, CancellationToken::new()).unwrap();
        wait_view(&reg, "W1", |v| v.is_valid() && live(v, W1)).await;
        let mut rx = reg.subscribe();
        rx.borrow_and_update();
        // right after a poll: gone (its row deleted) and back (a new row) within ms
        polls(&reg, 1).await;
        let polls_before = reg.stats().polls;
        w1.restart(startup).await.unwrap();
        assert_eq!(
            reg.stats().polls,
            polls_before,
            "{case}: the flap fell between two polls"
        );
        polls(&reg, 2).await;
        let mut views = vec![rx.borrow_and_update().clone()];
        while let Ok(Ok(())) = tokio::time::timeout(Duration::from_millis(1), rx.changed()).await {
            views.push(rx.borrow_and_update().clone());
        }
        for v in views.iter().chain([&reg.view()]) {
            assert!(live(v, W1), "{case}: W1 missing from a view");
            assert!(!v.lost_workers.contains_key(W1), "{case}: W1 lost");
        }
        reg.close().await;
        db.drop().await.unwrap();
    }
}

/// Database (`host:port`) of a test URL.
fn target(url: &str) -> String {
    split_url(url).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_poll_invalidates_the_view_until_a_good_poll() {
    for &(kind, fixture) in CASES {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let case = format!("{kind:?} {fixture}");
        let _w1 = server(&db, NodeKind::Worker, W1).await;
        let mut w2 = server(&db, NodeKind::Worker, W2).await;
        let proxy = Proxy::start(&target(db.url())).await;
        let reg = JdbcRegistry::start(
            settings(&proxy.url_for(db.url()), None),
            CancellationToken::new(),
        )
        .unwrap();
        wait_view(&reg, "valid", |v| {
            v.is_valid() && live(v, W1) && live(v, W2)
        })
        .await;

        // the database unreachable: the next poll fails
        proxy.stop();
        let stopped = std::time::Instant::now();
        let v = wait_view_for(&reg, "invalid", 3 * POLL + Duration::from_secs(2), |v| {
            !v.is_valid()
        })
        .await;
        let invalid_after = stopped.elapsed();
        let reaper_core::ViewState::Invalid { reason, .. } = &v.state else {
            unreachable!()
        };
        assert!(reason.contains("poll"), "{case}: {reason}");
        // meanwhile W2 goes for good
        w2.crash().await;
        db.db.remove_key(&w2.keys()[0]).await.unwrap();
        reaper_test_support::hold("three polls against the paused proxy", 3 * POLL).await;
        assert!(!reg.view().is_valid(), "{case}: still invalid");

        proxy.resume().await;
        let v = wait_view(&reg, "valid again", |v| v.is_valid()).await;
        let since = v.valid_since().unwrap();
        assert!(live(&v, W1), "{case}");
        // lost while unseen: stamped by the poll that ended the gap
        assert_eq!(v.lost_workers.get(W2), Some(&since), "{case}");
        let st = reg.stats();
        assert!(st.failures >= 1 && st.recoveries >= 1, "{case}: {st:?}");
        eprintln!(
            "{case}: proxy stopped -> view invalid in {}",
            ms(invalid_after)
        );
        reg.close().await;
        drop(proxy);
        db.drop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_that_hangs_invalidates_the_view_after_three_intervals() {
    for &(kind, fixture) in &[(SimKind::MySql, "3.2.2"), (SimKind::Postgres, "dev")] {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let case = format!("{kind:?} {fixture}");
        let _w1 = server(&db, NodeKind::Worker, W1).await;
        let proxy = Proxy::start(&target(db.url())).await;
        let mut s = settings(&proxy.url_for(db.url()), None);
        s.statement_timeout = Duration::from_secs(20);
        let reg = JdbcRegistry::start(s, CancellationToken::new()).unwrap();
        wait_view(&reg, "valid", |v| v.is_valid() && live(v, W1)).await;

        // a network that stopped answering: the poll in flight never returns
        proxy.pause();
        let paused = std::time::Instant::now();
        let v = wait_view_for(&reg, "invalid", Duration::from_secs(5), |v| !v.is_valid()).await;
        let took = paused.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "{case}: {took:?}, long before the 20 s limit"
        );
        assert!(took >= 2 * POLL, "{case}: {took:?}");
        let reaper_core::ViewState::Invalid { reason, .. } = &v.state else {
            unreachable!()
        };
        assert!(
            reason.contains("no successful registry poll"),
            "{case}: {reason}"
        );
        eprintln!("{case}: proxy paused -> view invalid in {}", ms(took));

        proxy.resume().await;
        wait_view(&reg, "valid again", |v| v.is_valid() && live(v, W1)).await;
        reg.close().await;
        drop(proxy);
        db.drop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_grant_fails_the_poll_and_a_new_grant_restores_it() {
    // PostgreSQL: the test user may grant (MariaDB's test user has no GRANT OPTION;
    // its failure path is the stopped proxy above)
    for fixture in ["3.2.2", "dev"] {
        let Some(db) = registry_db(SimKind::Postgres, fixture).await else {
            return;
        };
        let _w1 = server(&db, NodeKind::Worker, W1).await;
        let role = format!("dsr_reader_{}", std::process::id());
        let tables = match fixture {
            "dev" => "t_ds_jdbc_registry_data, t_ds_jdbc_registry_client_heartbeat",
            // 3.2's poll reads the master-failover lock rows too (SPEC §13)
            _ => "t_ds_jdbc_registry_data, t_ds_jdbc_registry_lock",
        };
        db.exec(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'pw'; \
             GRANT SELECT ON {tables} TO {role}"
        ))
        .await
        .unwrap();
        let (_, host, tail) = split_url(db.url());
        let url = format!("postgres://{role}:pw@{host}{tail}");
        let reg = JdbcRegistry::start(settings(&url, None), CancellationToken::new()).unwrap();
        wait_view(&reg, "valid", |v| v.is_valid() && live(v, W1)).await;

        db.exec(&format!("REVOKE SELECT ON {tables} FROM {role}"))
            .await
            .unwrap();
        let v = wait_view(&reg, "invalid", |v| !v.is_valid()).await;
        let reaper_core::ViewState::Invalid { reason, .. } = &v.state else {
            unreachable!()
        };
        assert!(
            reason.contains("permission denied") || reason.contains("no JDBC registry tables"),
            "{fixture}: {reason}"
        );
        db.exec(&format!("GRANT SELECT ON {tables} TO {role}"))
            .await
            .unwrap();
        wait_view(&reg, "valid again", |v| v.is_valid() && live(v, W1)).await;
        reg.close().await;
        db.exec(&format!(
            "REVOKE ALL ON {tables} FROM {role}; DROP ROLE {role}"
        ))
        .await
        .unwrap();
        db.drop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_line_fixes_the_tables_and_a_wrong_one_keeps_the_view_invalid() {
    let Some(db) = registry_db(SimKind::MySql, "dev").await else {
        return;
    };
    let _w1 = server(&db, NodeKind::Worker, W1).await;
    let reg = JdbcRegistry::start(
        settings(db.url(), Some(DsLine::V3_3)),
        CancellationToken::new(),
    )
    .unwrap();
    wait_view(&reg, "valid", |v| v.is_valid() && live(v, W1)).await;
    assert_eq!(reg.detected().lines, vec![DsLine::V3_3]);
    reg.close().await;

    // 3.2's tables have last_term; dev's have not: the poll fails, loudly
    let reg = JdbcRegistry::start(
        settings(db.url(), Some(DsLine::V3_2)),
        CancellationToken::new(),
    )
    .unwrap();
    polls(&reg, 3).await;
    let v = reg.view();
    let reaper_core::ViewState::Invalid { reason, .. } = &v.state else {
        panic!("valid on the wrong tables: {v:?}")
    };
    assert!(reason.contains("last_term"), "{reason}");
    reg.close().await;

    // and a line without a database registry is refused at start
    assert!(JdbcRegistry::start(
        settings(db.url(), Some(DsLine::V2_0)),
        CancellationToken::new()
    )
    .is_err());
    db.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_registry_tables_keeps_the_view_invalid() {
    let Some(db) = registry_db(SimKind::Postgres, "3.2.2").await else {
        return;
    };
    db.exec("DROP TABLE t_ds_jdbc_registry_data; DROP TABLE t_ds_jdbc_registry_lock")
        .await
        .unwrap();
    let reg = JdbcRegistry::start(settings(db.url(), None), CancellationToken::new()).unwrap();
    polls(&reg, 2).await;
    let v = reg.view();
    let reaper_core::ViewState::Invalid { reason, .. } = &v.state else {
        panic!("valid without tables")
    };
    assert!(reason.contains("no JDBC registry tables"), "{reason}");
    assert_eq!(reg.flavour(), None);
    reg.close().await;
    db.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ds_own_clean_stop_and_purge_as_the_simulator_writes_them() {
    // What DS deletes, per version: the simulator's fidelity, seen through the adapter.
    for &(kind, fixture) in CASES {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let case = format!("{kind:?} {fixture}");
        let mut w1 = server(&db, NodeKind::Worker, W1).await;
        let mut m1 = server(&db, NodeKind::Master, M1).await;
        let reg = JdbcRegistry::start(settings(db.url(), None), CancellationToken::new()).unwrap();
        wait_view(&reg, "W1 and M1", |v| {
            v.is_valid() && live(v, W1) && v.live(NodeKind::Master, M1).is_some()
        })
        .await;
        w1.stop().await.unwrap();
        m1.stop().await.unwrap();
        let w_key = &w1.keys()[0];
        let m_key = &m1.keys()[0];
        // a master always deletes its key; a 3.1.9 worker's clean stop deletes nothing
        assert!(!db.db.has_key(m_key).await.unwrap(), "{case}");
        assert_eq!(
            db.db.has_key(w_key).await.unwrap(),
            fixture == "3.1.9",
            "{case}"
        );
        wait_view(&reg, "both gone", |v| {
            !live(v, W1) && v.live(NodeKind::Master, M1).is_none()
        })
        .await;
        // a live DS server's clean-up removes what is left
        db.db.purge_dead(EXPIRE).await.unwrap();
        if fixture == "3.1.9" {
            assert!(!db.db.has_key(w_key).await.unwrap(), "{case}: purged");
        }
        reg.close().await;
        db.drop().await.unwrap();
    }
}
