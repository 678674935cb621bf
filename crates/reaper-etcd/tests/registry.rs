//! The etcd registry against a real etcd (the shared one; each test under a
//! namespace of its own): losses, flapping, heartbeats, compaction, agents.

mod etcd_setup;

use chrono::Utc;
use ds_sim::etcd::{EtcdSimOptions, EtcdSimServer};
use etcd_setup::*;
use reaper_core::agent::AgentReport;
use reaper_core::{DsLine, NodeKind, RegistryLayout};
use reaper_etcd::{EtcdAgentKey, EtcdRegistry, Hooks};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

async fn worker(eps: &[String], ns: &str, host: &str, opts: EtcdSimOptions) -> EtcdSimServer {
    EtcdSimServer::register(
        eps,
        ns,
        (DsLine::V3_2, NodeKind::Worker),
        host,
        &[],
        Utc::now(),
        opts,
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_loss_is_stamped_when_the_delete_arrives_and_its_entry_removed() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let mut w1 = worker(&eps, &ns, "10.0.1.1:1234", sim_opts()).await;
    let _w2 = worker(&eps, &ns, "10.0.1.2:1234", sim_opts()).await;
    let _m = EtcdSimServer::register(
        &eps,
        &ns,
        (DsLine::V3_2, NodeKind::Master),
        "10.0.1.9:5678",
        &[],
        Utc::now(),
        sim_opts(),
    )
    .await
    .unwrap();
    // keys that are not servers, or not under the namespace, are not read
    let mut c = ds_sim::etcd::connect(&eps).await.unwrap();
    c.put(
        format!("{ns}/nodes/failover-finish-nodes/10.0.1.7:1234-1-2"),
        "1",
        None,
    )
    .await
    .unwrap();
    c.put(
        format!("{root}other/nodes/worker/10.0.1.8:1234"),
        "{}",
        None,
    )
    .await
    .unwrap();
    let reg = EtcdRegistry::start(settings(&eps, &ns), CancellationToken::new());
    let v = wait_view(&reg, "both workers and the master", |v| {
        v.is_valid() && v.workers.len() == 2 && v.masters.len() == 1
    })
    .await;
    assert!(v.live(NodeKind::Worker, "10.0.1.1:1234").is_some());
    assert!(v.live(NodeKind::Worker, "10.0.1.8:1234").is_none());
    let d = reg.detected();
    assert_eq!(d.layout, Some(RegistryLayout::Flat));
    assert!(d.lines.contains(&DsLine::V3_2), "{d:?}");

    let before = Utc::now();
    w1.crash().await;
    let v = wait_view(&reg, "w1 gone", |v| {
        v.live(NodeKind::Worker, "10.0.1.1:1234").is_none()
    })
    .await;
    let after = Utc::now();
    let lost = v
        .lost_at(NodeKind::Worker, "10.0.1.1:1234")
        .expect("stamped");
    assert!(
        before <= lost && lost <= after,
        "{before} <= {lost} <= {after}"
    );
    assert!(v.is_valid());
    assert!(v.live(NodeKind::Worker, "10.0.1.2:1234").is_some());
    assert!(!v.workers.contains_key("10.0.1.1:1234"));
    reg.close().await;
    cleanup(&eps, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_goes_when_its_lease_expires() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let mut opts = sim_opts();
    opts.lease_ttl = Duration::from_secs(3);
    let mut w = worker(&eps, &ns, "10.0.2.1:1234", opts).await;
    let reg = EtcdRegistry::start(settings(&eps, &ns), CancellationToken::new());
    wait_view(&reg, "worker", |v| v.is_valid() && v.workers.len() == 1).await;
    let killed = Utc::now();
    w.kill().await;
    reaper_test_support::hold("the lease has not expired yet", Duration::from_millis(1000)).await;
    assert!(
        reg.view().live(NodeKind::Worker, "10.0.2.1:1234").is_some(),
        "a killed server's key lives until its lease expires"
    );
    let v = wait_view(&reg, "lease expired", |v| v.workers.is_empty()).await;
    let lost = v.lost_at(NodeKind::Worker, "10.0.2.1:1234").unwrap();
    assert!(
        lost - killed >= chrono::TimeDelta::seconds(2),
        "lost {lost}, killed {killed}"
    );
    reg.close().await;
    cleanup(&eps, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flapping_is_seen() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let h = "10.0.3.1:1234";
    let mut w = worker(&eps, &ns, h, sim_opts()).await;
    let reg = EtcdRegistry::start(settings(&eps, &ns), CancellationToken::new());
    wait_view(&reg, "worker", |v| v.is_valid() && v.workers.len() == 1).await;
    // every published view, in order: is the worker live?
    let mut rx = reg.subscribe();
    let seen = tokio::spawn(async move {
        let mut states = vec![true];
        while rx.changed().await.is_ok() {
            let v = rx.borrow_and_update().clone();
            let live = v.live(NodeKind::Worker, h).is_some();
            if states.last() != Some(&live) {
                states.push(live);
            }
        }
        states
    });
    let mut last_start = Utc::now();
    for _ in 0..3 {
        w.crash().await;
        wait_view(&reg, "gone", |v| v.live(NodeKind::Worker, h).is_none()).await;
        last_start = Utc::now() - chrono::TimeDelta::seconds(1);
        w.restart(last_start).await.unwrap();
        wait_view(&reg, "back", |v| v.live(NodeKind::Worker, h).is_some()).await;
    }
    let v = wait_view(&reg, "the last startup time", |v| {
        v.live(NodeKind::Worker, h)
            .and_then(|n| n.startup_time)
            .is_some_and(|t| t.timestamp_millis() == last_start.timestamp_millis())
    })
    .await;
    assert_eq!(v.lost_at(NodeKind::Worker, h), None, "back: not lost");
    reg.close().await;
    let states = seen.await.unwrap();
    // A watch receiver sees the latest view only: a slow subscriber on a
    // loaded machine may miss a loss and return published in between. It must
    // see at least one of each, alternating, and end on the worker's return.
    assert!(
        states.len() >= 3 && states.len() <= 7 && states.last() == Some(&true),
        "losses and returns were published: {states:?}"
    );
    cleanup(&eps, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_reach_the_view() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let h = "10.0.4.1:1234";
    let _w = worker(&eps, &ns, h, sim_opts()).await;
    let reg = EtcdRegistry::start(settings(&eps, &ns), CancellationToken::new());
    let v = wait_view(&reg, "worker", |v| v.is_valid() && v.workers.len() == 1).await;
    let first = v.workers[h].report_time.unwrap();
    wait_view(&reg, "a later reportTime", |v| {
        v.workers
            .get(h)
            .and_then(|n| n.report_time)
            .is_some_and(|t| t > first)
    })
    .await;
    reg.close().await;
    cleanup(&eps, &root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_between_the_read_and_the_watch_forces_a_fresh_read() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let _w = worker(&eps, &ns, "10.0.5.1:1234", sim_opts()).await;
    // After the first read: a write (the revision moves past the read's)
    // and a compaction up to it, before the watch from read + 1 is created.
    let done = Arc::new(AtomicBool::new(false));
    let hook = {
        let (eps, ns, done) = (eps.clone(), ns.clone(), done.clone());
        Arc::new(move |_rev: i64| {
            let (eps, ns, done) = (eps.clone(), ns.clone(), done.clone());
            Box::pin(async move {
                if done.swap(true, Ordering::SeqCst) {
                    return;
                }
                let mut c = ds_sim::etcd::connect(&eps).await.unwrap();
                c.put(format!("{ns}/nodes/worker/10.0.5.2:1234"), "x", None)
                    .await
                    .unwrap();
                c.delete(format!("{ns}/nodes/worker/10.0.5.2:1234"), None)
                    .await
                    .unwrap();
                ds_sim::etcd::compact_now(&eps).await.unwrap();
            }) as reaper_core::ports::BoxFuture<'static, ()>
        })
    };
    let hooks = Hooks {
        after_read: Some(hook),
    };
    let reg = EtcdRegistry::start_with_hooks(settings(&eps, &ns), CancellationToken::new(), hooks);
    wait_view(&reg, "valid after the forced re-read", |v| {
        v.is_valid() && v.workers.len() == 1
    })
    .await;
    wait_until("the compaction counted", WAIT, || {
        reg.stats().compactions >= 1
    })
    .await;
    // the watch of the fresh read works: a new worker is seen
    let _w3 = worker(&eps, &ns, "10.0.5.3:1234", sim_opts()).await;
    let v = wait_view(&reg, "a new worker", |v| v.workers.len() == 2).await;
    assert!(v.is_valid());
    assert!(done.load(Ordering::SeqCst));
    reg.close().await;
    cleanup(&eps, &root).await;
}

fn report(worker: &str, seq: u64) -> AgentReport {
    AgentReport {
        tty_tasks: 0,
        app_id_sources: None,
        worker: worker.into(),
        agent_version: "test".into(),
        seq,
        scan_started_at: Utc::now().timestamp_millis(),
        scan_ms: 2,
        exec_base: "/tmp/dolphinscheduler".into(),
        unreadable: 0,
        orders: Vec::new(),
        blind: None,
        tasks: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_keys_bound_to_their_own_lease_appear_in_the_view_and_vanish_with_it() {
    let Some(eps) = shared_etcd().await else {
        return;
    };
    let (root, ns) = unique_namespace();
    let h = "10.0.6.1:1234";
    let _w = worker(&eps, &ns, h, sim_opts()).await;
    let reg = EtcdRegistry::start(settings(&eps, &ns), CancellationToken::new());
    wait_view(&reg, "worker", |v| v.is_valid() && v.workers.len() == 1).await;

    let agent = EtcdAgentKey::new(settings(&eps, &ns), AGENTS, h);
    assert_eq!(agent.key(), format!("{ns}/ds-reaper/agents/{h}"));
    let t0 = Utc::now();
    agent.publish(&report(h, 1)).await.unwrap();
    assert!(agent.is_live());
    let v = wait_view(&reg, "the agent", |v| v.agents.contains_key(h)).await;
    let t1 = Utc::now();
    let a = &v.agents[h];
    assert_eq!(a.report.as_ref().map(|r| r.seq), Some(1));
    assert!(
        t0 <= a.received_at && a.received_at <= t1,
        "stamped on arrival"
    );
    let since = a.since;
    let leases = ds_sim::etcd::keys_with_leases(&eps, agent.key())
        .await
        .unwrap();
    assert!(
        leases.len() == 1 && leases[0].1 != 0,
        "bound to a lease: {leases:?}"
    );

    tokio::time::sleep(Duration::from_millis(200)).await;
    agent.publish(&report(h, 2)).await.unwrap();
    let v = wait_view(&reg, "the second report", |v| {
        v.agents
            .get(h)
            .and_then(|a| a.report.as_ref())
            .is_some_and(|r| r.seq == 2)
    })
    .await;
    assert!(v.agents[h].received_at > a.received_at);
    assert_eq!(v.agents[h].since, since, "no gap: since holds");

    // closed: the lease is revoked and the key goes at once
    agent.close().await;
    // gone, never fresh again, but kept for its last listing's hold (SPEC §12)
    wait_view_for(&reg, "agent gone on revoke", Duration::from_secs(2), |v| {
        v.agents.get(h).is_some_and(|a| a.gone_at.is_some())
    })
    .await;

    // a dead agent (nothing keeps its lease alive): gone after the lease's TTL
    let h2 = "10.0.6.2:1234";
    let dead = EtcdAgentKey::new(settings(&eps, &ns), AGENTS, h2);
    dead.publish(&report(h2, 1)).await.unwrap();
    wait_view(&reg, "second agent", |v| v.agents.contains_key(h2)).await;
    let dropped = Utc::now();
    drop(dead);
    let v = wait_view(&reg, "second agent gone with its lease", |v| {
        v.agents.get(h2).is_some_and(|a| a.gone_at.is_some())
    })
    .await;
    assert!(Utc::now() - dropped >= chrono::TimeDelta::seconds(1));
    assert!(v.is_valid());
    reg.close().await;
    cleanup(&eps, &root).await;
}
