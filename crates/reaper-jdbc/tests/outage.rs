//! DS #18274 against real MariaDB and PostgreSQL (SPEC §14 jdbc): after the
//! registry's database was unreachable for longer than DS's session timeout,
//! DS 3.3+ purges servers that are alive; a loss first seen right after the
//! return is the outage's and holds the brake until the server is seen again.

mod jdbc_setup;

use chrono::Utc;
use ds_sim::db::SimKind;
use ds_sim::jdbc::{SimJdbcServer, SimRegistryDb};
use jdbc_setup::proxy::{split_url, Proxy};
use jdbc_setup::*;
use reaper_core::registry::OutageServer;
use reaper_core::{NodeKind, RegistryView};
use reaper_jdbc::JdbcRegistry;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const W1: &str = "10.0.8.1:1234";
const W2: &str = "10.0.8.2:1234";
const M1: &str = "10.0.8.9:5678";

async fn server(db: &SimRegistryDb, kind: NodeKind, host: &str) -> SimJdbcServer {
    let line = line_of(&db.fixture);
    SimJdbcServer::register(db, line, kind, host, Utc::now(), sim_opts())
        .await
        .expect("sim server")
}

fn live(v: &RegistryView, h: &str) -> bool {
    v.live(NodeKind::Worker, h).is_some()
}

/// DS's purge of a server it takes for dead, as DS writes it on each line:
/// 3.3+ deletes the client and its rows; 3.2 the expired ephemeral row.
async fn purge(db: &SimRegistryDb, s: &mut SimJdbcServer) {
    s.crash().await;
    match s.client_id() {
        Some(c) => {
            // its heartbeat as old as the outage makes it, then DS's purge
            let old = Utc::now().timestamp_millis() - 60_000;
            db.db.set_client_heartbeat(c, old).await.unwrap();
            assert!(db.db.purge_dead(EXPIRE).await.unwrap() >= 1);
        }
        None => db.db.remove_key(&s.keys()[0]).await.unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_purged_while_the_registry_database_was_away_holds_the_brake_until_seen_again() {
    let cases = [
        (SimKind::MySql, "dev"),
        (SimKind::Postgres, "dev"),
        // 3.2 has no session timeout: no outage is noted there
        (SimKind::MySql, "3.2.2"),
    ];
    for (kind, fixture) in cases {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let case = format!("{kind:?} {fixture}");
        let _w1 = server(&db, NodeKind::Worker, W1).await;
        let mut w2 = server(&db, NodeKind::Worker, W2).await;
        let _m = server(&db, NodeKind::Master, M1).await;
        let proxy = Proxy::start(&split_url(db.url()).1).await;
        let mut s = settings(&proxy.url_for(db.url()), None);
        s.outage_grace = Duration::from_secs(60);
        s.outage_hold = Duration::from_secs(600);
        let reg = JdbcRegistry::start(s, CancellationToken::new()).unwrap();
        wait_view(&reg, "all live", |v| {
            v.is_valid() && live(v, W1) && live(v, W2) && v.live(NodeKind::Master, M1).is_some()
        })
        .await;

        // the registry's database away for longer than the session timeout
        // the servers wrote (EXPIRE); DS purges W2 although it runs
        proxy.stop();
        wait_view_for(&reg, "invalid", 3 * POLL + Duration::from_secs(2), |v| {
            !v.is_valid()
        })
        .await;
        purge(&db, &mut w2).await;
        reaper_test_support::hold(
            "an outage longer than the session timeout",
            EXPIRE + Duration::from_secs(1),
        )
        .await;
        proxy.resume().await;
        let v = wait_view(&reg, "valid again", |v| v.is_valid()).await;
        assert!(live(&v, W1) && !live(&v, W2), "{case}");
        if fixture == "3.2.2" {
            assert!(
                v.registry_outage.is_none(),
                "{case}: {:?}",
                v.registry_outage
            );
            reg.close().await;
            drop(proxy);
            db.drop().await.unwrap();
            continue;
        }
        let o = v.registry_outage.clone().expect("the outage is noted");
        let since = v.valid_since().unwrap();
        assert_eq!(o.returned_at, since, "{case}");
        assert!(
            o.returned_at - o.down_since > reaper_core::delta(EXPIRE),
            "{case}: {o:?}"
        );
        let w2_key = OutageServer {
            kind: NodeKind::Worker,
            host: W2.into(),
        };
        assert_eq!(o.servers.iter().collect::<Vec<_>>(), [&w2_key], "{case}");
        assert!(o.holds(Utc::now()), "{case}");

        // W2 is restarted (a new incarnation): nothing holds any more
        w2.restart(Utc::now()).await.unwrap();
        let v = wait_view(&reg, "W2 back", |v| live(v, W2)).await;
        let holds = v
            .registry_outage
            .as_ref()
            .is_some_and(|o| o.holds(Utc::now()));
        assert!(!holds, "{case}: {:?}", v.registry_outage);
        reg.close().await;
        drop(proxy);
        db.drop().await.unwrap();
    }
}
