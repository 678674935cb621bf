//! etcd restarted or unreachable (a private etcd of each test's own): the
//! view is invalid until a fresh read, which restarts every absence clock;
//! the leader steps down when its keep-alive fails.

mod etcd_setup;

use chrono::Utc;
use ds_sim::etcd::server::PrivateEtcd;
use ds_sim::etcd::EtcdSimServer;
use etcd_setup::*;
use reaper_core::agent::AgentReport;
use reaper_core::{DsLine, NodeKind};
use reaper_etcd::{EtcdAgentKey, EtcdLeader, EtcdRegistry};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const NS: &str = "dolphinscheduler";

async fn worker(eps: &[String], host: &str) -> EtcdSimServer {
    EtcdSimServer::register(
        eps,
        NS,
        (DsLine::V3_2, NodeKind::Worker),
        host,
        &[],
        Utc::now(),
        sim_opts(),
    )
    .await
    .unwrap()
}

fn report(worker: &str) -> AgentReport {
    AgentReport {
        tty_tasks: 0,
        app_id_sources: None,
        worker: worker.into(),
        agent_version: "test".into(),
        seq: 1,
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
async fn an_etcd_restart_invalidates_the_view_and_a_fresh_read_restarts_absence_clocks() {
    if !private_etcd_available() {
        return;
    }
    let mut etcd = PrivateEtcd::start().await.unwrap();
    let eps = etcd.endpoints();
    let (a, b) = ("10.0.7.1:1234", "10.0.7.2:1234");
    let mut wa = worker(&eps, a).await;
    let _wb = worker(&eps, b).await;
    let reg = EtcdRegistry::start(settings(&eps, NS), CancellationToken::new());
    let agent = EtcdAgentKey::new(settings(&eps, NS), AGENTS, b);
    agent.publish(&report(b)).await.unwrap();
    let v = wait_view(&reg, "two workers and an agent", |v| {
        v.is_valid() && v.workers.len() == 2 && v.agents.contains_key(b)
    })
    .await;
    let agent_since = v.agents[b].since;
    wa.crash().await;
    let v = wait_view(&reg, "a gone", |v| v.workers.len() == 1).await;
    let lost_before = v.lost_at(NodeKind::Worker, a).unwrap();

    etcd.stop().await.unwrap();
    wait_view(&reg, "invalid while etcd is down", |v| !v.is_valid()).await;
    reaper_test_support::hold("etcd still down", Duration::from_millis(500)).await;
    assert!(!reg.view().is_valid(), "stays invalid while etcd is down");
    let restarted = Utc::now();
    etcd.start_again().await.unwrap();
    let v = wait_view(&reg, "valid after a fresh read", |v| v.is_valid()).await;
    let valid_since = v.valid_since().unwrap();
    assert!(valid_since >= restarted);
    // the loss seen before the gap counts from the read that ended it
    let lost_after = v.lost_at(NodeKind::Worker, a).unwrap();
    assert!(lost_after > lost_before);
    assert_eq!(lost_after, valid_since);
    assert!(
        v.live(NodeKind::Worker, b).is_some(),
        "b's lease survived the restart"
    );
    assert!(
        v.agents
            .get(b)
            .is_some_and(|s| s.since >= restarted && s.since > agent_since),
        "the agent's since restarts after the gap: {:?}",
        v.agents.get(b)
    );
    assert!(reg.stats().reconnects >= 1);
    reg.close().await;
    agent.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_invalidates_the_view_until_a_fresh_read() {
    if !private_etcd_available() {
        return;
    }
    let etcd = PrivateEtcd::start().await.unwrap();
    let eps = etcd.endpoints();
    let (a, b) = ("10.0.8.1:1234", "10.0.8.2:1234");
    let mut wa = worker(&eps, a).await;
    let _wb = worker(&eps, b).await;
    let s = settings(&eps, NS);
    let rt = s.request_timeout;
    let reg = EtcdRegistry::start(s, CancellationToken::new());
    wait_view(&reg, "two workers", |v| {
        v.is_valid() && v.workers.len() == 2
    })
    .await;
    wa.crash().await;
    let v = wait_view(&reg, "a gone", |v| v.workers.len() == 1).await;
    let lost_before = v.lost_at(NodeKind::Worker, a).unwrap();

    // stopped, not dead: connections stay open, nothing answers
    etcd.pause().unwrap();
    let paused = tokio::time::Instant::now();
    wait_view_for(&reg, "invalid while etcd does not answer", rt * 6, |v| {
        !v.is_valid()
    })
    .await;
    let noticed = paused.elapsed();
    reaper_test_support::hold("etcd still paused", Duration::from_millis(500)).await;
    assert!(!reg.view().is_valid());
    let resumed = Utc::now();
    etcd.resume().unwrap();
    let v = wait_view(&reg, "valid again", |v| v.is_valid()).await;
    assert!(v.valid_since().unwrap() >= resumed);
    let lost_after = v.lost_at(NodeKind::Worker, a).unwrap();
    assert!(lost_after > lost_before, "absence clock restarted");
    assert!(v.live(NodeKind::Worker, b).is_some());
    eprintln!("a silent etcd was noticed after {noticed:?} (request timeout {rt:?})");
    reg.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_steps_down_when_its_keep_alive_fails_and_stands_again_after() {
    if !private_etcd_available() {
        return;
    }
    let etcd = PrivateEtcd::start().await.unwrap();
    let eps = etcd.endpoints();
    let s = settings(&eps, NS);
    let ttl = s.lease_ttl;
    let leader = EtcdLeader::start(
        s,
        "/ds-reaper/leader".into(),
        "only".into(),
        CancellationToken::new(),
    );
    wait_until("elected", WAIT, || leader.is_leader()).await;
    assert_eq!(leader.leader_id().as_deref(), Some("only"));
    etcd.pause().unwrap();
    let paused = tokio::time::Instant::now();
    // a keep-alive is due every ttl/3 and must be answered within the
    // request timeout (1 s): stepping down comes well before the TTL ends
    wait_until("stepped down", ttl, || !leader.is_leader()).await;
    let after = paused.elapsed();
    assert!(after < ttl, "stepped down after {after:?}");
    reaper_test_support::hold("etcd still paused", Duration::from_millis(300)).await;
    assert!(!leader.is_leader());
    etcd.resume().unwrap();
    wait_until("leader again", WAIT, || leader.is_leader()).await;
    leader.close().await;
    assert!(!leader.is_leader());
}
