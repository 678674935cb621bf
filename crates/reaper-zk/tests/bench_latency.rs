//! Latency figures (ignored: timings belong in benchmarks, not assertions).
//! `cargo test -p reaper-zk --test bench_latency -- --ignored --nocapture`

mod zk_setup;

use chrono::Utc;
use ds_sim::zk::SimServer;
use ds_sim::zkserver::PrivateZk;
use reaper_core::{DsLine, NodeKind};
use reaper_zk::ZkRegistry;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zk_setup::*;

fn median(v: Vec<Duration>) -> Duration {
    reaper_test_support::median(&v).unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn deletion_to_view_update() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let h = "10.0.9.1:1234";
    let mut sim = SimServer::register_with(
        &zk,
        &root,
        (DsLine::V3_2, NodeKind::Worker),
        h,
        &[],
        Utc::now(),
        sim_opts(),
    )
    .await
    .unwrap();
    let reg = ZkRegistry::start(settings(&zk, &root, None), CancellationToken::new());
    wait_view(&reg, "worker", |v| {
        v.is_valid() && v.live(NodeKind::Worker, h).is_some()
    })
    .await;
    let other = zookeeper_client::Client::connect(&zk).await.unwrap();
    let mut samples = Vec::new();
    for _ in 0..20 {
        let path = sim.paths()[0].clone();
        let mut rx = reg.subscribe();
        rx.borrow_and_update();
        let t0 = Instant::now();
        other.delete(&path, None).await.unwrap();
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
        "deletion -> view update: median {} (min {}, max {}, n=20)",
        ms(median(samples.clone())),
        ms(*samples.iter().min().unwrap()),
        ms(*samples.iter().max().unwrap())
    );
    reg.close().await;
    let _ = ds_sim::zk::delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn server_restart_to_valid_view() {
    if !private_zk_available() {
        return;
    }
    let mut zk = PrivateZk::start().await.unwrap();
    let connect = zk.connect_string();
    let mut opts = sim_opts();
    opts.session_timeout = Duration::from_secs(30);
    let _sim = SimServer::register_with(
        &connect,
        "/dolphinscheduler",
        (DsLine::V3_2, NodeKind::Worker),
        "10.0.9.2:1234",
        &[],
        Utc::now(),
        opts,
    )
    .await
    .unwrap();
    let mut s = settings(&connect, "/dolphinscheduler", None);
    s.session_timeout = Duration::from_secs(20);
    let reg = ZkRegistry::start(s, CancellationToken::new());
    wait_view(&reg, "valid", |v| v.is_valid() && v.workers.len() == 1).await;
    let (mut from_ready, mut from_start) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        zk.stop().await.unwrap();
        wait_view(&reg, "invalid", |v| !v.is_valid()).await;
        let t_start = Instant::now();
        zk.start_again().await.unwrap();
        let t_ready = Instant::now();
        wait_view(&reg, "valid again", |v| {
            v.is_valid() && v.workers.len() == 1
        })
        .await;
        from_ready.push(t_ready.elapsed());
        from_start.push(t_start.elapsed());
    }
    println!(
        "server restart -> valid view: median {} after the server answered ruok ({} after launching it), n=5, samples {:?}",
        ms(median(from_ready.clone())),
        ms(median(from_start)),
        from_ready.iter().map(|d| ms(*d)).collect::<Vec<_>>()
    );
    reg.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn large_cluster_2000_workers() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let n = 2000;
    let hosts: Vec<String> = (0..n)
        .map(|i| format!("10.1.{}.{}:1234", i / 250, i % 250))
        .collect();
    let mut opts = sim_opts();
    opts.interval = Duration::from_secs(10);
    let t = Instant::now();
    let fleet = ds_sim::zk::SimFleet::register(
        &zk,
        &root,
        (DsLine::V3_2, NodeKind::Worker),
        &hosts,
        &[],
        Utc::now(),
        opts,
    )
    .await
    .unwrap();
    println!(
        "registered {n} workers on one session in {}",
        ms(t.elapsed())
    );
    let t = Instant::now();
    let reg = ZkRegistry::start(settings(&zk, &root, None), CancellationToken::new());
    wait_view(&reg, "all workers listed", |v| {
        v.is_valid() && v.workers.len() == n
    })
    .await;
    println!("connect + full listing of {n} workers: {}", ms(t.elapsed()));

    // heartbeats of 2000 workers stream in (200 writes/s); count view publications
    let mut rx = reg.subscribe();
    let counting = Instant::now();
    let counter = tokio::spawn(async move {
        let mut k = 0u64;
        while rx.changed().await.is_ok() {
            k += 1;
        }
        k
    });
    let mut samples = Vec::new();
    for h in hosts.iter().take(20) {
        let mut rx = reg.subscribe();
        rx.borrow_and_update();
        let t0 = Instant::now();
        assert!(fleet.remove_host(h).await.unwrap());
        tokio::time::timeout(WAIT, rx.wait_for(|v| v.live(NodeKind::Worker, h).is_none()))
            .await
            .unwrap()
            .unwrap();
        samples.push(t0.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "deletion -> view update under heartbeat load of {n} workers: median {} (max {}, n=20)",
        ms(median(samples.clone())),
        ms(*samples.iter().max().unwrap())
    );
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let v = reg.view();
    let fresh = v
        .workers
        .values()
        .filter(|w| {
            w.report_time
                .is_some_and(|r| Utc::now() - r < chrono::TimeDelta::seconds(15))
        })
        .count();
    println!(
        "after {:.0} s more: {} live workers, {} with a reportTime younger than 15 s, stats {:?}",
        t.elapsed().as_secs_f64(),
        v.workers.len(),
        fresh,
        reg.stats()
    );
    reg.close().await;
    let published = counter.await.unwrap();
    println!(
        "view publications over {:.0} s of heartbeats (incl. the 20 deletions): {published}",
        counting.elapsed().as_secs_f64()
    );
    fleet.close().await;
    let _ = ds_sim::zk::delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}
