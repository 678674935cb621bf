//! Latency figures on a real etcd (ignored: timings belong in benchmarks,
//! not assertions).
//! `cargo test --release -p reaper-etcd --test bench_latency -- --ignored --nocapture`

mod etcd_setup;

use chrono::Utc;
use ds_sim::etcd::EtcdSimServer;
use etcd_setup::*;
use reaper_core::{DsLine, NodeKind};
use reaper_etcd::EtcdRegistry;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn median(v: Vec<Duration>) -> Duration {
    reaper_test_support::median(&v).unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// A worker's node removed (its lease revoked by another client: the
/// delete etcd emits when a lease ends) → the daemon's view without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn removal_to_view_update() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let h = "10.0.9.1:1234";
    let mut sim = EtcdSimServer::register(
        &eps,
        &ns,
        (DsLine::V3_2, NodeKind::Worker),
        h,
        &[],
        Utc::now(),
        sim_opts(),
    )
    .await
    .unwrap();
    let reg = EtcdRegistry::start(settings(&eps, &ns), CancellationToken::new());
    wait_view(&reg, "worker", |v| {
        v.is_valid() && v.live(NodeKind::Worker, h).is_some()
    })
    .await;
    let mut other = ds_sim::etcd::connect(&eps).await.unwrap();
    let mut samples = Vec::new();
    for _ in 0..20 {
        let lease = sim.lease_ids()[0];
        let mut rx = reg.subscribe();
        rx.borrow_and_update();
        let t0 = Instant::now();
        other.lease_revoke(lease).await.unwrap();
        tokio::time::timeout(WAIT, rx.wait_for(|v| v.live(NodeKind::Worker, h).is_none()))
            .await
            .unwrap()
            .unwrap();
        samples.push(t0.elapsed());
        sim.restart(Utc::now()).await.unwrap();
        wait_view(&reg, "worker back", |v| {
            v.live(NodeKind::Worker, h).is_some()
        })
        .await;
    }
    println!(
        "etcd node removal -> view update: median {} (min {}, max {}, n=20)",
        ms(median(samples.clone())),
        ms(*samples.iter().min().unwrap()),
        ms(*samples.iter().max().unwrap())
    );
    println!(
        "RESULT etcd_removal_to_view_median_ms {:.1}",
        median(samples).as_secs_f64() * 1000.0
    );
    reg.close().await;
    cleanup(&eps, &root).await;
}
