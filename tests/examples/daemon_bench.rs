//! Measurements of the `ds-reaper` binary against a simulated cluster; prints
//! figures, asserts nothing (scripts/bench/latency.sh, scripts/bench/idle.sh).
//!
//! `daemon_bench latency [TRIALS]`: from a worker's session close to its task
//! row failed, grace 5 s. `daemon_bench idle [SECONDS]`: RSS and CPU of an
//! idle daemon. The binary is `DS_REAPER_BIN` (the scripts pass a release build).

use anyhow::{bail, Context, Result};
use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use reaper_core::NodeKind;
use reaper_e2e::*;
use std::time::{Duration, Instant};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !services_up().await {
        bail!("services missing");
    }
    match args.first().map(String::as_str) {
        Some("latency") => latency(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20)).await,
        Some("idle") => idle(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60)).await,
        _ => bail!("usage: daemon_bench latency [TRIALS] | idle [SECONDS]"),
    }
}

fn kind() -> SimKind {
    match std::env::var("BENCH_DB").as_deref() {
        Ok("postgres") => SimKind::Postgres,
        _ => SimKind::MySql,
    }
}

async fn latency(trials: usize) -> Result<()> {
    let db = sim_db(kind(), "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    // Permanent workers, so the cluster never runs out of live workers.
    let mut keep = Vec::new();
    for i in 0..3 {
        keep.push(
            server(
                &root,
                line,
                NodeKind::Worker,
                &format!("10.0.0.{}:1234", 11 + i),
                &[],
            )
            .await?,
        );
    }
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    // Each trial loses one more worker: only the lost-fraction brake would
    // stop the later trials, and that is not what is measured here.
    let d = Daemon::start_with_env(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"fail\"\n[brake]\nmax_lost_worker_fraction = 1.0\nmin_zombies = 1000\n",
        &[("DS_REAPER__RECONCILE__GRACE_PERIOD", "5s")],
    )
    .await?;
    d.wait_ready().await?;
    let mut samples = Vec::new();
    for trial in 0..trials {
        let host = format!("10.1.{}.{}:1234", trial / 200, trial % 200 + 1);
        let mut w = server(&root, line, NodeKind::Worker, &host, &[]).await?;
        let task = db.insert_task(&TaskSpec::new(wf, 1, Some(&host))).await?;
        wait_until("daemon sees the new worker", || async {
            let v = d.json("/api/v1/workers").await?;
            Ok(v["workers"]
                .as_array()
                .is_some_and(|ws| ws.iter().any(|x| x["host"] == host.as_str())))
        })
        .await?;
        // Let the daemon see the task as a live candidate first.
        d.wait_sweeps(1).await?;
        let t0 = Instant::now();
        w.crash().await;
        loop {
            if db.task_state(task).await?.state == 6 {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("trial {trial}: task {task} not failed within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let dt = t0.elapsed();
        println!("trial {:>2}: {:.3} s", trial + 1, dt.as_secs_f64());
        samples.push(dt.as_secs_f64());
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    };
    println!(
        "latency (session close -> row FAILURE), grace 5 s, {n} trials: median {median:.3} s, min {:.3} s, max {:.3} s (target <= 6 s)",
        samples[0],
        samples[n - 1]
    );
    let mut d = d;
    d.terminate().await?;
    cleanup(db, &root).await
}

fn proc_field(pid: u32, file: &str, key: &str) -> Result<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .with_context(|| format!("{key} not in /proc/{pid}/{file}"))
}

/// utime + stime in clock ticks (fields 14 and 15 of /proc/<pid>/stat).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may contain spaces: fields start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("bad stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14 -> index 11.
    Ok(f.get(11).context("utime")?.parse::<u64>()? + f.get(12).context("stime")?.parse::<u64>()?)
}

fn clk_tck() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

async fn idle(seconds: u64) -> Result<()> {
    let db = sim_db(kind(), "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let mut workers = Vec::new();
    for i in 0..4 {
        workers.push(
            server(
                &root,
                line,
                NodeKind::Worker,
                &format!("10.0.0.{}:1234", 11 + i),
                &[],
            )
            .await?,
        );
    }
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    for i in 0..8 {
        db.insert_task(&TaskSpec::new(
            wf,
            1,
            Some(&format!("10.0.0.{}:1234", 11 + i % 4)),
        ))
        .await?;
    }
    let sweep = std::env::var("BENCH_SWEEP_INTERVAL").unwrap_or_else(|_| "1s".into());
    let d = Daemon::start_with_env(
        db.url(),
        &root,
        "",
        &[("DS_REAPER__RECONCILE__SWEEP_INTERVAL", sweep.as_str())],
    )
    .await?;
    d.wait_ready().await?;
    let pid = d.child.id().context("daemon pid")?;
    // Settle after start-up (full scan, connections) before measuring.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let tck = clk_tck();
    let c0 = cpu_ticks(pid)?;
    let t0 = Instant::now();
    let mut max_rss_kb = 0u64;
    let mut last_rss = String::new();
    while t0.elapsed() < Duration::from_secs(seconds) {
        last_rss = proc_field(pid, "status", "VmRSS:")?;
        let kb: u64 = last_rss
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        max_rss_kb = max_rss_kb.max(kb);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let c1 = cpu_ticks(pid)?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu_pct = (c1 - c0) as f64 / tck as f64 / wall * 100.0;
    let sweeps = d.metric0("ds_reaper_sweeps_total{result=\"ok\"}").await?;
    println!(
        "idle daemon (4 workers, 1 master, 8 live healthy tasks, sweep_interval {sweep}) over {wall:.1} s: \
         VmRSS {last_rss} (max {:.1} MB), VmHWM {}, CPU {cpu_pct:.3} % of one core ({} ticks at {tck}/s), {sweeps} sweeps so far",
        max_rss_kb as f64 / 1024.0,
        proc_field(pid, "status", "VmHWM:")?,
        c1 - c0
    );
    let mut d = d;
    d.terminate().await?;
    cleanup(db, &root).await
}
