//! Server restarts and session expiry, against a private ZooKeeper per test
//! (never the shared one).

mod zk_setup;

use chrono::Utc;
use ds_sim::zk::SimServer;
use ds_sim::zkserver::PrivateZk;
use reaper_core::{DsLine, NodeKind, ViewState};
use reaper_zk::{ZkLeader, ZkRegistry};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zk_setup::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_invalidates_then_revalidates_with_the_same_hosts() {
    if !private_zk_available() {
        return;
    }
    let mut zk = PrivateZk::start().await.unwrap();
    let connect = zk.connect_string();
    let root = "/dolphinscheduler";
    let mut opts = sim_opts();
    opts.session_timeout = Duration::from_secs(30);
    let hosts = ["10.0.1.1:1234", "10.0.1.2:1234"];
    let mut sims = Vec::new();
    for h in hosts {
        sims.push(
            SimServer::register_with(
                &connect,
                root,
                (DsLine::V3_1, NodeKind::Worker),
                h,
                &[],
                Utc::now(),
                opts.clone(),
            )
            .await
            .unwrap(),
        );
    }
    let mut s = settings(&connect, root, None);
    s.session_timeout = Duration::from_secs(20);
    let reg = ZkRegistry::start(s, CancellationToken::new());
    let v1 = wait_view(&reg, "both workers", |v| {
        v.is_valid() && v.workers.len() == 2
    })
    .await;
    let since1 = v1.valid_since().unwrap();

    zk.stop().await.unwrap();
    wait_view(&reg, "invalid after the server stopped", |v| !v.is_valid()).await;
    zk.start_again().await.unwrap();
    let v2 = wait_view(&reg, "valid again", |v| v.is_valid()).await;
    assert!(v2.valid_since().unwrap() > since1);
    let mut got: Vec<String> = v2.workers.keys().cloned().collect();
    got.sort();
    let mut want: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
    assert!(v2.lost_workers.is_empty(), "{v2:#?}");
    assert!(reg.stats().reconnects >= 1, "{:?}", reg.stats());
    assert_eq!(reg.stats().session_expirations, 0);
    reg.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_session_invalidates_until_relisted() {
    if !private_zk_available() {
        return;
    }
    let zk = PrivateZk::start().await.unwrap();
    let connect = zk.connect_string();
    let root = "/dolphinscheduler";
    let mut opts = sim_opts();
    opts.session_timeout = Duration::from_secs(30);
    let h = "10.0.2.1:1234";
    let _sim = SimServer::register_with(
        &connect,
        root,
        (DsLine::V1_3, NodeKind::Worker),
        h,
        &["default"],
        Utc::now(),
        opts,
    )
    .await
    .unwrap();
    let (early, short) = ("10.0.2.2:1234", "10.0.2.3:1234");
    let mut early_sim = SimServer::register_with(
        &connect,
        root,
        (DsLine::V1_3, NodeKind::Worker),
        early,
        &["default"],
        Utc::now(),
        sim_opts(),
    )
    .await
    .unwrap();
    let mut short_opts = sim_opts();
    short_opts.session_timeout = Duration::from_secs(3);
    let _short_sim = SimServer::register_with(
        &connect,
        root,
        (DsLine::V1_3, NodeKind::Worker),
        short,
        &["default"],
        Utc::now(),
        short_opts,
    )
    .await
    .unwrap();
    let mut s = settings(&connect, root, None);
    s.session_timeout = Duration::from_secs(2);
    s.request_timeout = Duration::from_secs(2);
    let reg = ZkRegistry::start(s, CancellationToken::new());
    let v1 = wait_view(&reg, "workers", |v| v.is_valid() && v.workers.len() == 3).await;
    let since1 = v1.valid_since().unwrap();
    early_sim.crash().await;
    let v = wait_view(&reg, "early loss", |v| {
        v.lost_at(NodeKind::Worker, early).is_some()
    })
    .await;
    let early_lost = v.lost_at(NodeKind::Worker, early).unwrap();

    // Freeze the server for longer than the adapter's session timeout (but
    // shorter than the simulated worker's): only the adapter's session expires.
    zk.pause().unwrap();
    wait_view(&reg, "invalid while the server is frozen", |v| {
        !v.is_valid()
    })
    .await;
    reaper_test_support::hold(
        "the server stays frozen past the adapter's session timeout",
        Duration::from_secs(8),
    )
    .await;
    zk.resume().unwrap();
    let v2 = wait_view(&reg, "valid after a new session listed", |v| {
        v.is_valid() && v.valid_since().is_some_and(|s| s > since1)
    })
    .await;
    assert!(reg.stats().session_expirations >= 1, "{:?}", reg.stats());
    assert!(v2.live(NodeKind::Worker, h).is_some(), "{v2:#?}");
    let since2 = v2.valid_since().unwrap();
    // SPEC §4.1: after an expiry, absence clocks restart from the rebuild's listing
    let relost = v2
        .lost_at(NodeKind::Worker, early)
        .expect("earlier loss kept");
    assert!(
        relost > early_lost && relost >= since2,
        "{relost} vs {early_lost} / {since2}"
    );
    // the short-session worker expired with the pause: lost, never before the rebuild
    let v3 = wait_view(&reg, "short-session worker lost", |v| {
        v.lost_at(NodeKind::Worker, short).is_some()
    })
    .await;
    assert!(v3.lost_at(NodeKind::Worker, short).unwrap() >= since2);
    assert!(v3.live(NodeKind::Worker, h).is_some());
    reg.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_gone_around_a_server_restart_is_lost_after_it() {
    if !private_zk_available() {
        return;
    }
    let mut zk = PrivateZk::start().await.unwrap();
    let connect = zk.connect_string();
    let root = "/dolphinscheduler";
    let mut opts = sim_opts();
    opts.session_timeout = Duration::from_secs(30);
    let (stay, go) = ("10.0.3.1:1234", "10.0.3.2:1234");
    let _a = SimServer::register_with(
        &connect,
        root,
        (DsLine::V3_2, NodeKind::Worker),
        stay,
        &[],
        Utc::now(),
        opts.clone(),
    )
    .await
    .unwrap();
    let mut b = SimServer::register_with(
        &connect,
        root,
        (DsLine::V3_2, NodeKind::Worker),
        go,
        &[],
        Utc::now(),
        opts,
    )
    .await
    .unwrap();
    let mut s = settings(&connect, root, None);
    s.session_timeout = Duration::from_secs(20);
    let reg = ZkRegistry::start(s, CancellationToken::new());
    wait_view(&reg, "two workers", |v| {
        v.is_valid() && v.workers.len() == 2
    })
    .await;
    // The adapter is cut off (server down); right after the restart another
    // client deletes the worker's node, racing the adapter's reconnect.
    zk.stop().await.unwrap();
    wait_view(&reg, "invalid", |v| !v.is_valid()).await;
    zk.start_again().await.unwrap();
    let restarted = Utc::now();
    let other = zookeeper_client::Client::connect(&connect).await.unwrap();
    let path = b.paths()[0].clone();
    // delete before the adapter reconnects and re-lists (best effort race; the
    // assertion below holds whichever way it goes)
    let _ = other.delete(&path, None).await;
    b.crash().await;
    let v = wait_view(&reg, "valid with the worker lost", |v| {
        v.is_valid()
            && v.live(NodeKind::Worker, go).is_none()
            && v.live(NodeKind::Worker, stay).is_some()
    })
    .await;
    // Whether the adapter saw the deletion as an event or by re-listing, the
    // loss is stamped by its own clock when processed, never before.
    let lost = v.lost_at(NodeKind::Worker, go).expect("loss recorded");
    assert!(
        lost >= restarted && lost <= Utc::now(),
        "{lost} vs {restarted}"
    );
    assert!(matches!(v.state, ViewState::Valid { .. }));
    reg.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_crash_kill9_then_restart() {
    if !private_zk_available() {
        return;
    }
    let mut zk = PrivateZk::start().await.unwrap();
    let connect = zk.connect_string();
    let mut opts = sim_opts();
    opts.session_timeout = Duration::from_secs(30);
    let h = "10.0.4.1:1234";
    let _sim = SimServer::register_with(
        &connect,
        "/ds",
        (DsLine::V3_3, NodeKind::Worker),
        h,
        &[],
        Utc::now(),
        opts,
    )
    .await
    .unwrap();
    let mut s = settings(&connect, "/ds", Some(DsLine::V3_3));
    s.session_timeout = Duration::from_secs(20);
    let reg = ZkRegistry::start(s, CancellationToken::new());
    wait_view(&reg, "worker", |v| {
        v.is_valid() && v.live(NodeKind::Worker, h).is_some()
    })
    .await;
    zk.kill9().await.unwrap();
    wait_view(&reg, "invalid after kill -9", |v| !v.is_valid()).await;
    zk.start_again().await.unwrap();
    let v = wait_view(&reg, "valid again", |v| v.is_valid()).await;
    assert!(v.live(NodeKind::Worker, h).is_some(), "{v:#?}");
    reg.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_is_dropped_on_disconnect() {
    if !private_zk_available() {
        return;
    }
    let zk = PrivateZk::start().await.unwrap();
    let connect = zk.connect_string();
    let mut s = settings(&connect, "/dolphinscheduler", None);
    s.session_timeout = Duration::from_secs(10);
    s.request_timeout = Duration::from_secs(2);
    let a = ZkLeader::start(
        s.clone(),
        "/ds-reaper/leader".into(),
        "a".into(),
        CancellationToken::new(),
    );
    let b = ZkLeader::start(
        s,
        "/ds-reaper/leader".into(),
        "b".into(),
        CancellationToken::new(),
    );
    wait_until("a leader", || a.is_leader() || b.is_leader()).await;
    // A frozen server: the leader is cut off but its session has not expired
    // yet. It must stop acting now, not after the session timeout.
    zk.pause().unwrap();
    wait_until("no leader while disconnected", || {
        !a.is_leader() && !b.is_leader()
    })
    .await;
    // cut off, neither can tell who leads
    wait_until("no leader id while disconnected", || {
        a.leader_id().is_none() && b.leader_id().is_none()
    })
    .await;
    zk.resume().unwrap();
    wait_until("a leader again", || a.is_leader() || b.is_leader()).await;
    reaper_test_support::hold("only one leader, and it stays so", Duration::from_secs(1)).await;
    assert!(
        a.is_leader() ^ b.is_leader(),
        "a={} b={}",
        a.is_leader(),
        b.is_leader()
    );
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ends_the_session_at_once() {
    if !private_zk_available() {
        return;
    }
    let zk = PrivateZk::start().await.unwrap();
    let reg = ZkRegistry::start(
        settings(&zk.connect_string(), "/dolphinscheduler", None),
        CancellationToken::new(),
    );
    wait_view(&reg, "valid", |v| v.is_valid()).await;
    // mntr counts its own connection too
    let before = zk.alive_connections().await.unwrap();
    assert_eq!(before, 2);
    reg.close().await;
    // close() returns once the close request is sent; the server drops the
    // connection as it handles it (no expiry wait: that would take 10 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut now_alive = zk.alive_connections().await;
    while now_alive != Some(before - 1) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        now_alive = zk.alive_connections().await;
    }
    assert_eq!(now_alive, Some(before - 1));
    assert!(!reg.view().is_valid());
}

/// Waits until `reg` is valid again after `before` and returns its view.
async fn valid_after(
    reg: &ZkRegistry,
    what: &str,
    before: chrono::DateTime<Utc>,
) -> std::sync::Arc<reaper_core::RegistryView> {
    wait_view(reg, what, |v| v.valid_since().is_some_and(|s| s > before)).await
}

/// SPEC §4.1: after any gap in sight — a reconnect of the same session as much
/// as a new session — a loss seen before the gap counts from the listing that
/// ends it. Two registries see the same gaps: `same` has a session that
/// outlives them (it reconnects), `fresh` one that expires on the client side
/// while the server is down (it builds a new session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_before_any_gap_counts_from_the_listing_after_it() {
    if !private_zk_available() {
        return;
    }
    let mut zk = PrivateZk::start().await.unwrap();
    let connect = zk.connect_string();
    let root = "/dolphinscheduler";
    let mut opts = sim_opts();
    opts.session_timeout = Duration::from_secs(40);
    let (stay, go) = ("10.0.5.1:1234", "10.0.5.2:1234");
    let _stay = SimServer::register_with(
        &connect,
        root,
        (DsLine::V3_3, NodeKind::Worker),
        stay,
        &[],
        Utc::now(),
        opts.clone(),
    )
    .await
    .unwrap();
    let mut gone = SimServer::register_with(
        &connect,
        root,
        (DsLine::V3_3, NodeKind::Worker),
        go,
        &[],
        Utc::now(),
        opts,
    )
    .await
    .unwrap();
    let mut s = settings(&connect, root, None);
    s.session_timeout = Duration::from_secs(30);
    let same = ZkRegistry::start(s, CancellationToken::new());
    let mut s = settings(&connect, root, None);
    // the client gives up on a session after 7/5 of it without the server
    s.session_timeout = Duration::from_secs(2);
    s.request_timeout = Duration::from_secs(2);
    let fresh = ZkRegistry::start(s, CancellationToken::new());
    for reg in [&same, &fresh] {
        wait_view(reg, "both workers", |v| {
            v.is_valid() && v.workers.len() == 2
        })
        .await;
    }
    gone.crash().await;
    let mut lost_before = Vec::new();
    for reg in [&same, &fresh] {
        let v = wait_view(reg, "the loss", |v| {
            v.lost_at(NodeKind::Worker, go).is_some()
        })
        .await;
        lost_before.push(v.lost_at(NodeKind::Worker, go).unwrap());
    }

    for (gap, kill) in [("graceful stop", false), ("kill -9", true)] {
        let before = Utc::now();
        let (same0, fresh0) = (same.stats(), fresh.stats());
        if kill {
            zk.kill9().await.unwrap();
        } else {
            zk.stop().await.unwrap();
        }
        for reg in [&same, &fresh] {
            wait_view(reg, &format!("{gap}: invalid"), |v| !v.is_valid()).await;
        }
        // long enough for `fresh` to give its session up, far from `same`'s
        reaper_test_support::hold(
            "ZooKeeper stays down long enough for `fresh` to give its session up",
            Duration::from_secs(5),
        )
        .await;
        zk.start_again().await.unwrap();
        for (reg, lost) in [&same, &fresh].into_iter().zip(lost_before.iter_mut()) {
            let v = valid_after(reg, &format!("{gap}: valid again"), before).await;
            let since = v.valid_since().unwrap();
            assert!(v.live(NodeKind::Worker, stay).is_some(), "{gap}: {v:#?}");
            assert!(v.live(NodeKind::Worker, go).is_none(), "{gap}: {v:#?}");
            let relost = v
                .lost_at(NodeKind::Worker, go)
                .unwrap_or_else(|| panic!("{gap}: the loss is kept: {v:#?}"));
            assert!(
                relost >= since && relost > *lost,
                "{gap}: lost at {relost}, before the gap {lost}, valid since {since}; stats {:?}",
                reg.stats()
            );
            *lost = relost;
        }
        // the two kinds of gap really happened
        let (same1, fresh1) = (same.stats(), fresh.stats());
        assert_eq!(
            same1.session_expirations, same0.session_expirations,
            "{gap}: {same1:?}"
        );
        assert!(same1.reconnects > same0.reconnects, "{gap}: {same1:?}");
        assert!(
            fresh1.session_expirations > fresh0.session_expirations,
            "{gap}: {fresh1:?}"
        );
    }
    same.close().await;
    fresh.close().await;
}
