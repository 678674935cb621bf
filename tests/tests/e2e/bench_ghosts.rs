//! Benchmark (ignored; run by scripts/bench/all.sh): the daemon's extra cost
//! of ghost detection (SPEC §15). One daemon, 2,000 live workers and 40,000
//! task rows, 20 per worker (19 RUNNING, 1 SUCCESS); its incremental sweeps
//! are timed first without agents, then with 2,000 agents each listing its
//! worker's 20 tasks (the 2,000 SUCCESS ones are ghosts): while the agents
//! rewrite their reports every 5 s, and with the reports standing; then
//! without agents again. Target: the sweep with agents at most 1.3x the one
//! without (the mean of the windows before and after), each the median of a
//! window's sweeps (the daemon's debug line per sweep; the means of its
//! histogram are printed too). Also printed: the daemon's CPU per sweep (its
//! cost of reading the reports included) and the time per step. Prints its
//! figures; asserts nothing about time.

use ds_sim::db::{SimKind, WorkflowSpec};
use reaper_core::agent::{AgentProcess as Proc, AgentReport, AgentTask};
use reaper_core::NodeKind;
use reaper_e2e::*;
use std::time::Duration;
use zookeeper_client as zk;

const WORKERS: i64 = 2_000;
const PER_WORKER: i64 = 20;
const SWEEPS: u32 = 20;

fn worker(i: i64) -> String {
    format!("10.1.{}.{}:1234", i / 256, i % 256)
}

/// The sweeps the daemon logged after line `from` of its log (its debug line
/// per sweep, `steps_ms`): each sweep's time (the sum of its steps) and the
/// mean time of each step.
fn logged_sweeps(log: &str, from: usize) -> (Vec<f64>, String) {
    let mut sums: Vec<(String, f64, u32)> = Vec::new();
    let mut sweeps = Vec::new();
    for line in log.lines().skip(from) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(steps) = v["fields"]["steps_ms"].as_str().or(v["steps_ms"].as_str()) else {
            continue;
        };
        let mut total = 0.0;
        for lap in steps.split_whitespace() {
            let Some((step, ms)) = lap.split_once('=') else {
                continue;
            };
            let Ok(ms) = ms.parse::<f64>() else { continue };
            total += ms;
            match sums.iter_mut().find(|(s, ..)| s == step) {
                Some(e) => {
                    e.1 += ms;
                    e.2 += 1;
                }
                None => sums.push((step.to_string(), ms, 1)),
            }
        }
        sweeps.push(total);
    }
    let means = sums
        .iter()
        .map(|(s, sum, n)| format!("{s}={:.1}", sum / f64::from(*n)))
        .collect::<Vec<_>>()
        .join(" ");
    (sweeps, means)
}

/// CPU time the process has used, in ms.
fn cpu_ms(pid: u32) -> anyhow::Result<f64> {
    let (ticks, _, _) = ds_sim::procs::proc_sample(pid)?;
    Ok(ticks as f64 * 1000.0 / ds_sim::procs::clk_tck())
}

/// One measured window of the daemon's next `n` sweeps.
struct Window {
    /// Median sweep duration, ms (its debug line per sweep): one slow sweep
    /// (a MariaDB flush, a burst of the simulated fleet's heartbeats on the
    /// same two cores) moves a 15-sweep mean by tens of ms.
    median_ms: f64,
    /// Mean sweep duration, ms (its own histogram).
    sweep_ms: f64,
    /// The daemon's CPU time over the window per sweep, ms: the sweep's and
    /// everything else it does meanwhile (reading agents' reports).
    cpu_ms: f64,
    /// Mean time of each step.
    steps: String,
}

/// Runs `op` for every agent, with 200 requests in flight at a time.
async fn each_agent<F, Fut>(op: F) -> Result<(), zk::Error>
where
    F: Fn(i64) -> Fut,
    Fut: std::future::Future<Output = Result<(), zk::Error>>,
{
    let all: Vec<i64> = (0..WORKERS).collect();
    for chunk in all.chunks(200) {
        let futs: Vec<_> = chunk.iter().map(|&i| op(i)).collect();
        for f in futs {
            f.await?;
        }
    }
    Ok(())
}

/// Lets what the set-up just did on the daemon's two cores die down before a
/// window is timed: the 2,000 registrations and the table's updates before
/// the first, 2,000 report rewrites every 5 s (ZooKeeper's log, its JVM's
/// garbage) before the last. Timed right after, a window took 20-40 % more
/// at times, with or without agents.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(20)).await;
}

async fn measure(d: &Daemon, n: u32) -> anyhow::Result<Window> {
    let pid = d
        .child
        .id()
        .ok_or_else(|| anyhow::anyhow!("the daemon has exited"))?;
    let from = d.log_text().lines().count();
    let sum0 = d.metric0("ds_reaper_sweep_duration_seconds_sum").await?;
    let cnt0 = d.metric0("ds_reaper_sweep_duration_seconds_count").await?;
    let cpu0 = cpu_ms(pid)?;
    d.wait_sweeps(n).await?;
    let cpu1 = cpu_ms(pid)?;
    let sum1 = d.metric0("ds_reaper_sweep_duration_seconds_sum").await?;
    let cnt1 = d.metric0("ds_reaper_sweep_duration_seconds_count").await?;
    let sweeps = (cnt1 - cnt0).max(1.0);
    let (logged, steps) = logged_sweeps(&d.log_text(), from);
    anyhow::ensure!(
        !logged.is_empty(),
        "the daemon logged no sweep at debug (RUST_LOG=info,reaper::engine::sweep=debug)"
    );
    Ok(Window {
        median_ms: reaper_test_support::median(&logged).unwrap_or(f64::NAN),
        sweep_ms: (sum1 - sum0) * 1000.0 / sweeps,
        cpu_ms: (cpu1 - cpu0) / sweeps,
        steps,
    })
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
            // one debug line per sweep, with each step's time
            ("RUST_LOG", "info,reaper::engine::sweep=debug"),
        ],
    )
    .await?;
    d.wait_ready().await?;
    d.wait_metric("ds_reaper_live_workers", |v| v == WORKERS as f64)
        .await?;
    d.wait_sweeps(3).await?;
    settle().await;
    let without = measure(&d, SWEEPS).await?;

    // 2,000 agents, each listing its worker's 20 tasks (a process each)
    let client = zk::Client::connect(&zk_connect()).await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let dir = format!("{root}/ds-reaper/agents");
    client.mkdir(&dir, &persistent).await?;
    let started = chrono::DateTime::parse_from_rfc3339("2024-01-01T00:00:02Z")?.timestamp_millis();
    let first_id = first;
    let report = move |i: i64, seq: u64| AgentReport {
        tty_tasks: 0,
        app_id_sources: None,
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
                    lineage: None,
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
    each_agent(|i| {
        let path = format!("{dir}/{}", worker(i));
        let data = report(i, 1).to_json();
        let (client, ephemeral) = (&client, &ephemeral);
        async move { client.create(&path, &data, ephemeral).await.map(drop) }
    })
    .await?;
    // each agent rewrites its report every 5 s (its scan), as real ones do
    let rewrites = {
        let (client, dir) = (client.clone(), dir.clone());
        tokio::spawn(async move {
            for seq in 2.. {
                tokio::time::sleep(Duration::from_secs(5)).await;
                // a rewrite that fails is the next one's to do
                let _ = each_agent(|i| {
                    let path = format!("{dir}/{}", worker(i));
                    let data = report(i, seq).to_json();
                    let client = &client;
                    async move { client.set_data(&path, &data, None).await.map(drop) }
                })
                .await;
            }
        })
    };
    d.wait_metric("ds_reaper_agents{state=\"fresh\"}", |v| v == WORKERS as f64)
        .await?;
    d.wait_metric("ds_reaper_ghosts", |v| v == WORKERS as f64)
        .await?;
    d.wait_sweeps(2).await?;
    let busy = measure(&d, SWEEPS).await?;
    // The same sweeps with the reports standing still (they stay fresh:
    // agent_stale_after is 1h): the sweep's own cost, without the rewrites
    // that the simulated agents and ZooKeeper do on the daemon's two cores
    // (on a cluster they run on the workers' hosts and ZooKeeper's).
    rewrites.abort();
    settle().await;
    let with = measure(&d, SWEEPS).await?;
    // The agents go again, and the sweeps without them are timed once more:
    // the baseline is the mean of the windows before and after, so that a
    // machine that got slower or faster meanwhile moves both sides alike.
    each_agent(|i| {
        let path = format!("{dir}/{}", worker(i));
        let client = &client;
        async move { client.delete(&path, None).await }
    })
    .await?;
    d.wait_metric("ds_reaper_ghosts", |v| v == 0.0).await?;
    d.wait_sweeps(2).await?;
    settle().await;
    let again = measure(&d, SWEEPS).await?;
    let base = Window {
        median_ms: (without.median_ms + again.median_ms) / 2.0,
        sweep_ms: (without.sweep_ms + again.sweep_ms) / 2.0,
        cpu_ms: (without.cpu_ms + again.cpu_ms) / 2.0,
        steps: String::new(),
    };
    println!(
        "baseline: without agents {:.1} ms before them, {:.1} ms after them (medians of {SWEEPS} sweeps)",
        without.median_ms, again.median_ms
    );
    let ratio = with.median_ms / base.median_ms.max(0.001);
    let mean_ratio = with.sweep_ms / base.sweep_ms.max(0.001);
    let busy_ratio = busy.median_ms / base.median_ms.max(0.001);
    let cpu_ratio = busy.cpu_ms / base.cpu_ms.max(0.001);
    println!(
        "sweep over {} rows, {WORKERS} workers, median of {SWEEPS}: without agents {:.1} ms, with {WORKERS} agents x {PER_WORKER} listed tasks {:.1} ms (ratio {ratio:.2}, target <= 1.3)",
        WORKERS * PER_WORKER,
        base.median_ms,
        with.median_ms,
    );
    println!(
        "  means: without agents {:.1} ms, with agents {:.1} ms (ratio {mean_ratio:.2})",
        base.sweep_ms, with.sweep_ms
    );
    println!(
        "  while every agent rewrites its report each 5 s (agents and ZooKeeper on the same cores): median {:.1} ms (ratio {busy_ratio:.2})",
        busy.median_ms
    );
    println!(
        "  the daemon's CPU per sweep: without agents {:.1} ms, with agents rewriting {:.1} ms (ratio {cpu_ratio:.2}), with reports standing {:.1} ms",
        base.cpu_ms, busy.cpu_ms, with.cpu_ms
    );
    for (name, w) in [
        ("without agents", &without),
        ("without agents, after them", &again),
        ("agents rewriting", &busy),
        ("with agents", &with),
    ] {
        println!("  mean per step (ms), {name}: {}", w.steps);
    }
    println!("RESULT ghost_sweep_without_ms {:.1}", base.median_ms);
    println!("RESULT ghost_sweep_with_ms {:.1}", with.median_ms);
    println!("RESULT ghost_sweep_ratio {ratio:.2}");
    println!("RESULT ghost_sweep_mean_ratio {mean_ratio:.2}");
    println!("RESULT ghost_sweep_busy_ratio {busy_ratio:.2}");
    println!("RESULT ghost_sweep_cpu_ratio {cpu_ratio:.2}");
    assert!(
        d.audit().iter().all(|r| r["event"] != "intent"),
        "report policy: nothing ordered"
    );
    assert_eq!(d.terminate().await?, Some(0));
    drop(client);
    fleet.close().await;
    cleanup(db, &root).await
}
