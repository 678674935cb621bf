//! The registry adapter against the shared ZooKeeper, one root per test.

mod zk_setup;

use chrono::{TimeDelta, Utc};
use ds_sim::zk::{add_task_queue_entry, delete_tree, task_queue_entries, SimServer};
use reaper_core::{DsLine, HeartbeatFormat, NodeKind, RegistryLayout};
use reaper_zk::ZkRegistry;
use tokio_util::sync::CancellationToken;
use zk_setup::*;

fn hosts(line: DsLine) -> (&'static str, &'static str) {
    if line == DsLine::V1_2 {
        ("10.0.0.5", "10.0.0.9")
    } else {
        ("10.0.0.5:1234", "10.0.0.9:5678")
    }
}

/// Registers, crashes and restarts servers of `line`, checking the view each time.
async fn exercise_line(zk: &str, line: DsLine, explicit: bool) {
    let root = unique_root();
    let (w, m) = hosts(line);
    let startup = whole_seconds(Utc::now() - TimeDelta::minutes(5));
    let mut worker = SimServer::register_with(
        zk,
        &root,
        (line, NodeKind::Worker),
        w,
        &["default"],
        startup,
        sim_opts(),
    )
    .await
    .unwrap();
    let master = SimServer::register_with(
        zk,
        &root,
        (line, NodeKind::Master),
        m,
        &[],
        startup,
        sim_opts(),
    )
    .await
    .unwrap();
    let reg = ZkRegistry::start(
        settings(zk, &root, explicit.then_some(line)),
        CancellationToken::new(),
    );
    let ctx = format!("line {line} (explicit: {explicit})");
    let v = wait_view(&reg, &format!("{ctx}: worker and master listed"), |v| {
        v.is_valid()
            && v.live(NodeKind::Worker, w).is_some()
            && v.live(NodeKind::Master, m).is_some()
    })
    .await;
    let wi = v.live(NodeKind::Worker, w).unwrap();
    assert_eq!(wi.startup_time, Some(startup), "{ctx}");
    let report = wi
        .report_time
        .unwrap_or_else(|| panic!("{ctx}: no report time"));
    assert!(report >= startup, "{ctx}");
    assert_eq!(
        v.live(NodeKind::Master, m).unwrap().startup_time,
        Some(startup),
        "{ctx}"
    );
    if line.layout() == RegistryLayout::Grouped {
        assert_eq!(wi.groups, vec!["default".to_string()], "{ctx}");
    }
    let d = reg.detected();
    assert!(d.lines.contains(&line), "{ctx}: detected {d:?}");
    assert_eq!(d.layout, Some(line.layout()), "{ctx}");
    assert_eq!(d.format, Some(line.heartbeat_format()), "{ctx}");

    // the worker dies: gone from the view, loss stamped by the daemon's clock
    let before = Utc::now();
    worker.crash().await;
    let v = wait_view(&reg, &format!("{ctx}: worker gone"), |v| {
        v.live(NodeKind::Worker, w).is_none()
    })
    .await;
    let lost = v
        .lost_at(NodeKind::Worker, w)
        .unwrap_or_else(|| panic!("{ctx}: no loss time"));
    assert!(lost >= before && lost <= Utc::now(), "{ctx}");
    assert!(v.is_valid(), "{ctx}");
    assert!(v.live(NodeKind::Master, m).is_some(), "{ctx}");

    // it comes back with a new startup time
    let startup2 = whole_seconds(Utc::now());
    worker.restart(startup2).await.unwrap();
    let v = wait_view(&reg, &format!("{ctx}: worker back with new startup"), |v| {
        v.live(NodeKind::Worker, w).and_then(|n| n.startup_time) == Some(startup2)
    })
    .await;
    assert_eq!(v.lost_at(NodeKind::Worker, w), None, "{ctx}");

    reg.close().await;
    drop(worker);
    drop(master);
    let _ = delete_tree(zk, root.trim_end_matches("/dolphinscheduler")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_auto_detected() {
    let Some(zk) = shared_zk().await else { return };
    for line in DsLine::ALL {
        exercise_line(&zk, line, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_explicit() {
    let Some(zk) = shared_zk().await else { return };
    for line in DsLine::ALL {
        exercise_line(&zk, line, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_worker_in_two_groups_is_one_host() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let h = "10.0.0.7:1234";
    let mut s = SimServer::register_with(
        &zk,
        &root,
        (DsLine::V2_0, NodeKind::Worker),
        h,
        &["default", "GPU"],
        Utc::now(),
        sim_opts(),
    )
    .await
    .unwrap();
    assert_eq!(s.paths().len(), 2);
    let reg = ZkRegistry::start(settings(&zk, &root, None), CancellationToken::new());
    let v = wait_view(&reg, "grouped worker", |v| {
        v.live(NodeKind::Worker, h).is_some()
    })
    .await;
    assert_eq!(v.workers.len(), 1);
    assert_eq!(
        v.live(NodeKind::Worker, h).unwrap().groups,
        vec!["default".to_string(), "gpu".to_string()]
    );
    assert_eq!(
        reg.detected().lines,
        vec![DsLine::V2_0],
        "14 CSV fields + grouped layout = 2.0 only"
    );
    s.crash().await;
    wait_view(&reg, "grouped worker gone", |v| {
        v.workers.is_empty() && v.lost_workers.contains_key(h)
    })
    .await;
    reg.close().await;
    let _ = delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_data_keeps_the_node_present() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let h = "10.0.0.8:1234";
    let s = SimServer::register_with(
        &zk,
        &root,
        (DsLine::V1_3, NodeKind::Worker),
        h,
        &[],
        Utc::now(),
        sim_opts(),
    )
    .await
    .unwrap();
    let reg = ZkRegistry::start(settings(&zk, &root, None), CancellationToken::new());
    wait_view(&reg, "worker with times", |v| {
        v.live(NodeKind::Worker, h)
            .is_some_and(|n| n.startup_time.is_some())
    })
    .await;
    // 1.3 registers with "" before its first heartbeat
    s.set_raw_data(b"").await.unwrap();
    wait_view(&reg, "empty data: present, times unknown", |v| {
        v.live(NodeKind::Worker, h)
            .is_some_and(|n| n.startup_time.is_none() && n.report_time.is_none())
    })
    .await;
    s.set_raw_data(b"\xff\x00garbage,,,").await.unwrap();
    s.set_raw_data(b"{\"startupTime\":\"soon\"").await.unwrap();
    reaper_test_support::hold(
        "unparsable data changes nothing",
        std::time::Duration::from_secs(4),
    )
    .await;
    let v = reg.view();
    assert!(v
        .live(NodeKind::Worker, h)
        .is_some_and(|n| n.startup_time.is_none()));
    assert!(v.is_valid());
    // and a readable heartbeat again
    s.resume_heartbeat();
    wait_view(&reg, "times back", |v| {
        v.live(NodeKind::Worker, h)
            .is_some_and(|n| n.report_time.is_some())
    })
    .await;
    reg.close().await;
    let _ = delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_time_follows_heartbeats() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let h = "10.0.0.6:1234";
    let _s = SimServer::register_with(
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
    let v = wait_view(&reg, "worker", |v| {
        v.live(NodeKind::Worker, h)
            .is_some_and(|n| n.report_time.is_some())
    })
    .await;
    let first = v.live(NodeKind::Worker, h).unwrap().report_time.unwrap();
    wait_view(&reg, "a later report time", |v| {
        v.live(NodeKind::Worker, h)
            .and_then(|n| n.report_time)
            .is_some_and(|t| t > first)
    })
    .await;
    assert_eq!(
        reg.view()
            .live(NodeKind::Worker, h)
            .unwrap()
            .status
            .as_deref(),
        Some("NORMAL")
    );
    reg.close().await;
    let _ = delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}

/// Heartbeats reach `view()` without a copy of the view per heartbeat and
/// without waking the engine; servers coming and going wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_data_reaches_the_view_without_waking_the_engine() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let h = "10.0.0.7:1234";
    let mut s = SimServer::register_with(
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
    let mut changes = reg.changes();
    let v = wait_view(&reg, "worker", |v| {
        v.live(NodeKind::Worker, h)
            .is_some_and(|n| n.report_time.is_some())
    })
    .await;
    let first = v.live(NodeKind::Worker, h).unwrap().report_time.unwrap();
    // The first listing's wake is sent just after its view becomes readable:
    // take it before watching for wakes that heartbeat data must not cause
    // (bounded: it may also have been sent before the receiver existed).
    if !changes.has_changed().unwrap() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), changes.changed()).await;
    }
    changes.mark_unchanged();
    // no subscriber: report times arrive through view() alone
    wait_until("a later report time in view()", || {
        reg.view()
            .live(NodeKind::Worker, h)
            .and_then(|n| n.report_time)
            .is_some_and(|t| t > first)
    })
    .await;
    // A gap in the session (a loaded machine can drop one) re-lists and
    // rightly wakes the engine; without one, heartbeat data alone must not.
    let st = reg.stats();
    let gap = reg.view().valid_since() != v.valid_since()
        || st.errors + st.reconnects + st.session_expirations > 0;
    assert!(
        gap || !changes.has_changed().unwrap(),
        "heartbeat data alone woke the engine"
    );
    s.crash().await;
    tokio::time::timeout(WAIT, changes.changed())
        .await
        .expect("a lost worker wakes the engine")
        .unwrap();
    wait_until("loss in view()", || reg.view().lost_workers.contains_key(h)).await;
    reg.close().await;
    let _ = delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_makes_the_view_invalid_and_a_closed_session_is_gone() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let reg = ZkRegistry::start(
        settings(&zk, &root, Some(DsLine::V3_2)),
        CancellationToken::new(),
    );
    wait_view(&reg, "valid empty view", |v| v.is_valid()).await;
    assert!(reg.view().workers.is_empty());
    reg.close().await;
    assert!(!reg.view().is_valid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_queue_entries_of_1_2_are_deleted() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    add_task_queue_entry(&zk, &root, 2, 17, 1, 345, "-1")
        .await
        .unwrap();
    add_task_queue_entry(&zk, &root, 2, 17, 1, 345, "167772165")
        .await
        .unwrap();
    add_task_queue_entry(&zk, &root, 2, 17, 1, 3456, "-1")
        .await
        .unwrap();
    let reg = ZkRegistry::start(
        settings(&zk, &root, Some(DsLine::V1_2)),
        CancellationToken::new(),
    );
    wait_view(&reg, "valid", |v| v.is_valid()).await;
    assert_eq!(reg.delete_task_queue_entries(345).await.unwrap(), 2);
    assert_eq!(
        task_queue_entries(&zk, &root).await.unwrap(),
        vec!["2_17_1_3456_-1".to_string()]
    );
    assert_eq!(reg.delete_task_queue_entries(345).await.unwrap(), 0);
    reg.close().await;

    let other = unique_root();
    let reg = ZkRegistry::start(
        settings(&zk, &other, Some(DsLine::V1_2)),
        CancellationToken::new(),
    );
    wait_view(&reg, "valid", |v| v.is_valid()).await;
    assert_eq!(
        reg.delete_task_queue_entries(1).await.unwrap(),
        0,
        "no queue at all"
    );
    reg.close().await;
    let _ = delete_tree(&zk, root.trim_end_matches("/dolphinscheduler")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_ensemble_is_an_invalid_view_with_the_error() {
    let reg = ZkRegistry::start(
        settings("127.0.0.1:1", "/dolphinscheduler", None),
        CancellationToken::new(),
    );
    wait_until("a connection error counted", || reg.stats().errors >= 1).await;
    let v = reg.view();
    match &v.state {
        reaper_core::ViewState::Invalid { reason, .. } => {
            assert!(reason.starts_with("connecting to 127.0.0.1:1"), "{reason}")
        }
        s => panic!("expected invalid, got {s:?}"),
    }
    assert_eq!(
        reg.delete_task_queue_entries(1).await,
        Err(reaper_zk::ZkError::NotConnected)
    );
    reg.close().await;
}

/// 3.3+: a worker registered under its `worker-address` (the node name) while
/// its heartbeat carries the `host:port` DS writes into task rows, next to the
/// non-server nodes 3.3 keeps under `/nodes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_address_of_3_3_and_its_non_server_nodes() {
    use zookeeper_client as zk;
    let Some(zk_addr) = shared_zk().await else {
        return;
    };
    for explicit in [false, true] {
        let root = unique_root();
        let client = zk::Client::connect(&zk_addr).await.unwrap();
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        for dir in [
            "/nodes/worker",
            "/nodes/master",
            "/nodes/failover-finish-nodes",
        ] {
            client
                .mkdir(&format!("{root}{dir}"), &persistent)
                .await
                .unwrap();
        }
        let now = Utc::now().timestamp_millis();
        let worker_hb = |report: i64| {
            format!(
                r#"{{"processId":23456,"startupTime":{now},"reportTime":{report},"cpuUsage":0.1,"memoryUsage":0.5,"diskUsage":0.3,"serverStatus":"NORMAL","host":"10.0.0.9","port":1234,"workerHostWeight":100,"threadPoolUsage":0.0,"workerGroup":"default"}}"#
            )
        };
        let worker = format!("{root}/nodes/worker/worker-a.example:1234");
        client
            .create(&worker, worker_hb(now).as_bytes(), &ephemeral)
            .await
            .unwrap();
        let master_hb = format!(
            r#"{{"processId":12345,"startupTime":{now},"reportTime":{now},"cpuUsage":0.1,"memoryUsage":0.5,"diskUsage":0.3,"serverStatus":"NORMAL","host":"10.0.0.5","port":5678,"isCoordinator":true}}"#
        );
        client
            .create(
                &format!("{root}/nodes/master/10.0.0.5:5678"),
                master_hb.as_bytes(),
                &ephemeral,
            )
            .await
            .unwrap();
        // the coordinator's data is a master's address; the failover marker
        // names a worker that is gone
        client
            .create(
                &format!("{root}/nodes/master-coordinator"),
                b"10.0.0.5:5678",
                &persistent,
            )
            .await
            .unwrap();
        client
            .create(
                &format!("{root}/nodes/failover-finish-nodes/10.0.0.8:1234-1736490000000-34567"),
                now.to_string().as_bytes(),
                &persistent,
            )
            .await
            .unwrap();

        let reg = ZkRegistry::start(
            settings(&zk_addr, &root, explicit.then_some(DsLine::V3_3)),
            CancellationToken::new(),
        );
        let ctx = format!("explicit: {explicit}");
        let check = |v: &reaper_core::RegistryView| {
            let mut workers: Vec<&String> = v.workers.keys().collect();
            workers.sort();
            assert_eq!(workers, vec!["worker-a.example:1234"], "{ctx}: {v:#?}");
            let mut masters: Vec<&String> = v.masters.keys().collect();
            masters.sort();
            assert_eq!(masters, vec!["10.0.0.5:5678"], "{ctx}: {v:#?}");
            let w = &v.workers["worker-a.example:1234"];
            assert_eq!(w.address.as_deref(), Some("10.0.0.9:1234"), "{ctx}");
            // a task row naming the heartbeat address finds the worker
            assert_eq!(
                v.live(NodeKind::Worker, "10.0.0.9:1234").map(|n| &n.host),
                Some(&w.host),
                "{ctx}"
            );
            // the master's heartbeat address is its node name: no alias needed
            assert_eq!(v.masters["10.0.0.5:5678"].address, None, "{ctx}");
            assert!(
                v.lost_workers.is_empty() && v.lost_masters.is_empty(),
                "{ctx}: {v:#?}"
            );
        };
        let v = wait_view(&reg, &format!("{ctx}: listed"), |v| {
            v.is_valid() && !v.workers.is_empty() && !v.masters.is_empty()
        })
        .await;
        check(&v);
        let d = reg.detected();
        assert_eq!(d.layout, Some(RegistryLayout::Flat), "{ctx}: {d:?}");
        assert_eq!(d.format, Some(HeartbeatFormat::Json32), "{ctx}: {d:?}");
        // (an explicit line fixes detection; auto detection sees 3.2/3.3 alone)
        let lines = if explicit {
            vec![DsLine::V3_3]
        } else {
            vec![DsLine::V3_2, DsLine::V3_3]
        };
        assert_eq!(d.lines, lines, "{ctx}: {d:?}");

        // The same nodes appearing and changing while watched: the coordinator
        // moves, another failover marker is written, then the worker's next
        // heartbeat. Events arrive in order, so once the heartbeat is in the
        // view the others were handled before it.
        client
            .set_data(
                &format!("{root}/nodes/master-coordinator"),
                b"10.0.0.6:5678",
                None,
            )
            .await
            .unwrap();
        client
            .create(
                &format!("{root}/nodes/failover-finish-nodes/10.0.0.5:5678-1736490000000-12345"),
                now.to_string().as_bytes(),
                &persistent,
            )
            .await
            .unwrap();
        client
            .create(
                &format!("{root}/nodes/master-coordinator-lock"),
                b"",
                &persistent,
            )
            .await
            .unwrap();
        client
            .set_data(&worker, worker_hb(now + 10_000).as_bytes(), None)
            .await
            .unwrap();
        let v = wait_view(&reg, &format!("{ctx}: the next heartbeat"), |v| {
            v.workers
                .get("worker-a.example:1234")
                .and_then(|n| n.report_time)
                .is_some_and(|t| t.timestamp_millis() == now + 10_000)
        })
        .await;
        check(&v);
        assert_eq!(reg.detected(), d, "{ctx}");

        // Unreadable data says nothing about the address: the live worker
        // keeps it, or its tasks would stop matching it.
        client
            .set_data(&worker, b"{\"startupTime\":", None)
            .await
            .unwrap();
        let v = wait_view(&reg, &format!("{ctx}: data unreadable"), |v| {
            v.workers
                .get("worker-a.example:1234")
                .is_some_and(|n| n.report_time.is_none())
        })
        .await;
        assert_eq!(
            v.live(NodeKind::Worker, "10.0.0.9:1234")
                .map(|n| n.host.as_str()),
            Some("worker-a.example:1234"),
            "{ctx}: {v:#?}"
        );

        reg.close().await;
        drop(client);
        let _ = delete_tree(&zk_addr, root.trim_end_matches("/dolphinscheduler")).await;
    }
}

/// SPEC §12: agents publish under `<root>/ds-reaper/agents/<worker>`; the
/// daemon keeps them in the view, stamped on its own clock, from the listing
/// and from the watch (the directory need not exist when the watch starts).
#[tokio::test]
async fn agents_are_read_into_the_view() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let mut s = settings(&zk, &root, Some(DsLine::V3_2));
    s.agents = Some((
        "ds-reaper/agents".into(),
        std::time::Duration::from_secs(35),
    ));
    let reg = ZkRegistry::start(s, CancellationToken::new());
    wait_view(&reg, "valid with no agents directory yet", |v| v.is_valid()).await;

    let client = zookeeper_client::Client::connect(&zk).await.unwrap();
    let report = |tasks: &[i64], seq: u64| {
        reaper_core::agent::AgentReport {
            tty_tasks: 0,
            app_id_sources: None,
            worker: "10.0.0.5:1234".into(),
            agent_version: "test".into(),
            seq,
            scan_started_at: Utc::now().timestamp_millis(),
            scan_ms: 2,
            exec_base: "/tmp/ds".into(),
            unreadable: 0,
            orders: Vec::new(),
            blind: None,
            tasks: tasks
                .iter()
                .map(|&task_id| reaper_core::agent::AgentTask {
                    lineage: None,
                    task_id,
                    workflow_instance_id: 1,
                    pids: vec![42],
                    started_at: 0,
                    processes: vec![],
                    app_ids: vec![],
                })
                .collect(),
        }
        .to_json()
    };
    let dir = format!("{root}/ds-reaper/agents");
    let mut path = String::new();
    for part in dir.trim_start_matches('/').split('/') {
        path.push('/');
        path.push_str(part);
        let _ = client
            .create(
                &path,
                b"",
                &zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all()),
            )
            .await;
    }
    let node = format!("{dir}/10.0.0.5:1234");
    client
        .create(
            &node,
            &report(&[7], 1),
            &zookeeper_client::CreateMode::Ephemeral
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let v = wait_view(&reg, "the agent appears", |v| {
        v.agents
            .get("10.0.0.5:1234")
            .is_some_and(|a| a.report.as_ref().is_some_and(|r| r.lists(7)))
    })
    .await;
    let first = v.agents["10.0.0.5:1234"].received_at;
    assert!(v.workers.is_empty(), "an agent is no worker: {v:?}");

    client.set_data(&node, &report(&[], 2), None).await.unwrap();
    let v = wait_view(&reg, "the rewrite arrives", |v| {
        v.agents["10.0.0.5:1234"]
            .report
            .as_ref()
            .is_some_and(|r| r.seq == 2)
    })
    .await;
    let a = &v.agents["10.0.0.5:1234"];
    assert!(a.received_at >= first);
    assert_eq!(a.since, first, "no gap: the streak goes on");
    assert!(
        a.listed_at.contains_key(&7),
        "evidence of the last listing kept"
    );

    // a second registry lists it from the start
    let mut s2 = settings(&zk, &root, Some(DsLine::V3_2));
    s2.agents = Some((
        "ds-reaper/agents".into(),
        std::time::Duration::from_secs(35),
    ));
    let reg2 = ZkRegistry::start(s2, CancellationToken::new());
    wait_view(&reg2, "listed", |v| {
        v.is_valid() && v.agents.contains_key("10.0.0.5:1234")
    })
    .await;

    client.delete(&node, None).await.unwrap();
    // gone, never fresh again, but kept: its last listing still holds (SPEC §12)
    let v = wait_view(&reg, "the agent's node is gone", |v| {
        v.agents
            .get("10.0.0.5:1234")
            .is_some_and(|a| a.gone_at.is_some())
    })
    .await;
    assert!(
        !v.agents["10.0.0.5:1234"].fresh(chrono::Utc::now(), std::time::Duration::from_secs(35))
    );
    reg.close().await;
    reg2.close().await;
    delete_tree(&zk, root.trim_end_matches("/dolphinscheduler"))
        .await
        .unwrap();
}
