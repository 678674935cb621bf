//! Benchmark (ignored; run by scripts/bench/all.sh): the daemon's extra cost
//! of ghost detection (SPEC §15). One daemon, 2,000 live workers and 40,000
//! task rows, 20 per worker (19 RUNNING, 1 SUCCESS); its incremental sweeps
//! are timed first without agents, then with 2,000 agents each listing its
//! worker's 20 tasks (the 2,000 SUCCESS ones are ghosts). Target: at most
//! 1.3x. Prints its figures; asserts nothing about time.

use ds_sim::db::{SimKind, WorkflowSpec};
use reaper_core::agent::{AgentProcess as Proc, AgentReport, AgentTask};
use reaper_core::NodeKind;
use reaper_e2e::*;
use std::time::Duration;
use zookeeper_client as zk;

const WORKERS: i64 = 2_000;
const PER_WORKER: i64 = 20;
const SWEEPS: u32 = 15;

fn worker(i: i64) -> String {
    format!("10.1.{}.{}:1234", i / 256, i % 256)
}

/// Mean duration of the daemon's next `n` sweeps, in ms (its own histogram).
async fn mean_sweep_ms(d: &Daemon, n: u32) -> anyhow::Result<f64> {
    let sum0 = d.metric0("ds_reaper_sweep_duration_seconds_sum").await?;
    let cnt0 = d.metric0("ds_reaper_sweep_duration_seconds_count").await?;
    d.wait_sweeps(n).await?;
    let sum1 = d.metric0("ds_reaper_sweep_duration_seconds_sum").await?;
    let cnt1 = d.metric0("ds_reaper_sweep_duration_seconds_count").await?;
    Ok((sum1 - sum0) * 1000.0 / (cnt1 - cnt0).max(1.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: scripts/bench/all.sh"]
async fn bench_ghost_sweep() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let hosts: Vec<String> = (0..WORKERS).map(worker).collect();
    let opts = ds_sim::zk::SimOptions {
        zone: "UTC".parse().map_err(|e| anyhow::anyhow!("{e:?}"))?,
        interval: Duration::from_secs(10),
        ..Default::default()
    };
    let fleet = ds_sim::zk::SimFleet::register(
        &zk_connect(),
        &root,
        (line, NodeKind::Worker),
        &hosts,
        &[],
        long_ago(),
        opts,
    )
    .await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let (first, last) = db
        .bulk_fill(wf, (WORKERS * PER_WORKER) as u64, 1, "x")
        .await?;
    // 20 consecutive rows per worker (bulk rows start and end 2024-01-01
    // 00:00:00); the first of each finished
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET host = CONCAT('10.1.', ((id - {first}) DIV {PER_WORKER}) DIV 256, \
         '.', ((id - {first}) DIV {PER_WORKER}) % 256, ':1234') WHERE id BETWEEN {first} AND {last}"
    ))
    .await?;
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7, end_time = start_time \
         WHERE id BETWEEN {first} AND {last} AND (id - {first}) % {PER_WORKER} = 0"
    ))
    .await?;

    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "",
        &[
            ("DS_REAPER__RECONCILE__FULL_SCAN_INTERVAL", "1h"),
            ("DS_REAPER__RECONCILE__AGENT_STALE_AFTER", "1h"),
            ("DS_REAPER__RECONCILE__GHOST_AFTER", "1s"),
            ("DS_REAPER__RECONCILE__GRACE_PERIOD", "1h"),
        ],
    )
    .await?;
    d.wait_ready().await?;
    d.wait_metric("ds_reaper_live_workers", |v| v == WORKERS as f64)
        .await?;
    d.wait_sweeps(3).await?;
    let without = mean_sweep_ms(&d, SWEEPS).await?;

    // 2,000 agents, each listing its worker's 20 tasks (a process each)
    let client = zk::Client::connect(&zk_connect()).await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let dir = format!("{root}/ds-reaper/agents");
    client.mkdir(&dir, &persistent).await?;
    let started = chrono::DateTime::parse_from_rfc3339("2024-01-01T00:00:02Z")?.timestamp_millis();
    let first_id = first;
    let report = move |i: i64, seq: u64| AgentReport {
        worker: worker(i),
        agent_version: "bench".into(),
        seq,
        scan_started_at: chrono::Utc::now().timestamp_millis(),
        scan_ms: 1,
        exec_base: "/tmp/ds".into(),
        unreadable: 0,
        blind: None,
        tasks: (0..PER_WORKER)
            .map(|k| {
                let id = first_id + i * PER_WORKER + k;
                let pid = (100_000 + i * PER_WORKER + k) as i32;
                AgentTask {
                    app_ids: vec![],
                    task_id: id,
                    workflow_instance_id: wf,
                    pids: vec![pid],
                    started_at: started,
                    processes: vec![Proc {
                        pid,
                        started_at: started,
                        tty: false,
                    }],
                }
            })
            .collect(),
        orders: Vec::new(),
    };
    let all: Vec<i64> = (0..WORKERS).collect();
    for chunk in all.chunks(200) {
        let futs: Vec<_> = chunk
            .iter()
            .map(|&i| {
                let path = format!("{dir}/{}", worker(i));
                let data = report(i, 1).to_json();
                let (client, ephemeral) = (&client, &ephemeral);
                async move { client.create(&path, &data, ephemeral).await }
            })
            .collect();
        for f in futs {
            f.await?;
        }
    }
    // each agent rewrites its report every 5 s (its scan), as real ones do
    let rewrites = {
        let (client, dir) = (client.clone(), dir.clone());
        tokio::spawn(async move {
            for seq in 2.. {
                tokio::time::sleep(Duration::from_secs(5)).await;
                for chunk in all.chunks(200) {
                    let futs: Vec<_> = chunk
                        .iter()
                        .map(|&i| {
                            let path = format!("{dir}/{}", worker(i));
                            let data = report(i, seq).to_json();
                            let client = &client;
                            async move { client.set_data(&path, &data, None).await }
                        })
                        .collect();
                    for f in futs {
                        let _ = f.await;
                    }
                }
            }
        })
    };
    d.wait_metric("ds_reaper_agents{state=\"fresh\"}", |v| v == WORKERS as f64)
        .await?;
    d.wait_metric("ds_reaper_ghosts", |v| v == WORKERS as f64)
        .await?;
    d.wait_sweeps(2).await?;
    let with = mean_sweep_ms(&d, SWEEPS).await?;
    let ratio = with / without.max(0.001);
    println!(
        "sweep over {} rows, {WORKERS} workers: without agents {without:.1} ms, with {WORKERS} agents x {PER_WORKER} listed tasks {with:.1} ms (ratio {ratio:.2}, target <= 1.3)",
        WORKERS * PER_WORKER
    );
    println!("RESULT ghost_sweep_without_ms {without:.1}");
    println!("RESULT ghost_sweep_with_ms {with:.1}");
    println!("RESULT ghost_sweep_ratio {ratio:.2}");
    assert!(
        d.audit().iter().all(|r| r["event"] != "intent"),
        "report policy: nothing ordered"
    );
    assert_eq!(d.terminate().await?, Some(0));
    rewrites.abort();
    drop(client);
    fleet.close().await;
    cleanup(db, &root).await
}
