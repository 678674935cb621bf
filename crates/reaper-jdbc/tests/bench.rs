//! Figures, not assertions of speed (ignored by default):
//! `cargo test --release -p reaper-jdbc --test bench -- --ignored --nocapture --test-threads 1`
//!
//! - node removal → view update, at SPEC §6's default `poll_interval` (1 s):
//!   bounded by the poll interval plus one poll;
//! - the cost of one poll with 2,000 workers: the statement and decoding,
//!   then judging the rows and the membership machine's full listing.

mod jdbc_setup;

use chrono::Utc;
use ds_sim::jdbc::{SimJdbcFleet, SimJdbcServer};
use jdbc_setup::*;
use reaper_core::registry::{LayoutMode, ListedNode, Listing, Membership};
use reaper_core::NodeKind;
use reaper_jdbc::{JdbcRegistry, JdbcSource};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn stats(mut v: Vec<Duration>) -> String {
    v.sort();
    let n = v.len();
    format!(
        "median {} (min {}, p95 {}, max {}, n={n})",
        ms(v[n / 2]),
        ms(v[0]),
        ms(v[(n * 95 / 100).min(n - 1)]),
        ms(v[n - 1])
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn node_removal_to_view_update() {
    const H: &str = "10.0.9.1:1234";
    let interval = Duration::from_secs(1);
    for &(kind, fixture) in CASES {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let line = line_of(fixture);
        let mut sim =
            SimJdbcServer::register(&db, line, NodeKind::Worker, H, Utc::now(), sim_opts())
                .await
                .unwrap();
        let mut s = settings(db.url(), None);
        s.poll_interval = interval;
        let reg = JdbcRegistry::start(s, CancellationToken::new()).unwrap();
        wait_view(&reg, "worker", |v| {
            v.is_valid() && v.live(NodeKind::Worker, H).is_some()
        })
        .await;
        let mut samples = Vec::new();
        for i in 0..20u32 {
            // removals at every phase of the poll cycle
            tokio::time::sleep(interval * (i * 7 % 20) / 20).await;
            sim.crash().await;
            let mut rx = reg.subscribe();
            rx.borrow_and_update();
            let t0 = Instant::now();
            db.db.remove_key(&sim.keys()[0]).await.unwrap();
            tokio::time::timeout(WAIT, rx.wait_for(|v| v.live(NodeKind::Worker, H).is_none()))
                .await
                .unwrap()
                .unwrap();
            samples.push(t0.elapsed());
            sim.restart(Utc::now()).await.unwrap();
            wait_view(&reg, "worker back", |v| {
                v.live(NodeKind::Worker, H).is_some()
            })
            .await;
        }
        let max = *samples.iter().max().unwrap();
        println!(
            "{kind:?} {fixture}: row deleted -> view update at poll_interval {interval:?}: {}",
            stats(samples)
        );
        assert!(
            max <= interval + Duration::from_millis(500),
            "bounded by the poll interval"
        );
        reg.close().await;
        db.drop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn one_poll_with_2000_workers() {
    const N: usize = 2000;
    for &(kind, fixture) in CASES {
        let Some(db) = registry_db(kind, fixture).await else {
            return;
        };
        let line = line_of(fixture);
        let hosts: Vec<String> = (0..N)
            .map(|i| format!("10.{}.{}.{}:1234", 1 + i / 65536, (i / 256) % 256, i % 256))
            .collect();
        let t = Instant::now();
        let fleet = SimJdbcFleet::register(&db, line, &hosts, Utc::now(), sim_opts())
            .await
            .unwrap();
        let setup = t.elapsed();
        let s = settings(db.url(), None);
        let source = JdbcSource::connect_lazy(&s).unwrap();
        source.read().await.unwrap();
        let (mut read, mut judge, mut apply) = (Vec::new(), Vec::new(), Vec::new());
        let mut m = Membership::new(LayoutMode::Auto, utc(), Utc::now(), "bench");
        for _ in 0..20 {
            let t = Instant::now();
            let (_, rows) = source.read().await.unwrap();
            read.push(t.elapsed());
            assert_eq!(rows.len(), N);
            let t = Instant::now();
            let now_ms = Utc::now().timestamp_millis();
            let nodes: Vec<ListedNode> = rows
                .into_iter()
                .filter(|r| r.term.judge(now_ms, s.expire_after).is_ok())
                .map(|r| ListedNode {
                    path: r.key,
                    data: r.data.into_bytes(),
                    ephemeral: true,
                })
                .collect();
            judge.push(t.elapsed());
            assert_eq!(nodes.len(), N, "every worker live");
            let t = Instant::now();
            m.apply_listing(
                Listing {
                    nodes,
                    legacy_dir: false,
                },
                Utc::now(),
            );
            apply.push(t.elapsed());
            assert_eq!(m.view().workers.len(), N);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!(
            "{kind:?} {fixture}, {N} workers (fleet written in {}):",
            ms(setup)
        );
        println!("  statement + decoding: {}", stats(read));
        println!("  judging the rows:     {}", stats(judge));
        println!("  membership listing:   {}", stats(apply));
        // and the adapter itself keeps up at the default interval
        let reg = JdbcRegistry::start(s, CancellationToken::new()).unwrap();
        wait_view(&reg, "2000 workers", |v| {
            v.is_valid() && v.workers.len() == N
        })
        .await;
        polls(&reg, 3).await;
        println!("  the registry's last poll: {}", ms(reg.stats().last_poll));
        reg.close().await;
        source.close().await;
        fleet.close().await;
        db.drop().await.unwrap();
    }
}
