//! Benchmarks that need the real daemon: reap throughput and steady-state
//! footprint. Each prints human lines and `RESULT <key> <value>` lines that
//! `scripts/bench/all.sh` collects into its table.

use super::zk_connect;
use anyhow::{bail, Context, Result};
use chrono::{Duration as TimeDelta, Utc};
use ds_sim::db::{SimDb, SimKind, SimPool, WorkflowSpec};
use ds_sim::reaper::{binary_beside_me, free_port, metric_value, poll, ReaperProcess, Spawn};
use ds_sim::zk::{delete_tree, ServerKind, SimFleet, SimOptions, SimServer};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Before the bulk rows' submit time (2024-01-01), so no row looks like it
/// outlived a worker restart.
fn servers_started() -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp(1_700_000_000, 0)
        .unwrap_or_else(|| Utc::now() - TimeDelta::days(400))
}

fn result(key: &str, value: f64) {
    println!("RESULT {key} {value:.3}");
}

fn config(zk: &str, root: &str, url: &str, port: u16, dir: &Path, extra: &str) -> String {
    format!(
        r#"{head}[database]
url = "{url}"
{extra}
[http]
listen = "127.0.0.1:{port}"
[audit]
path = "{audit}"
[log]
format = "json"
level = "warn"
"#,
        head = ds_sim::reaper::zk_header(zk, root, "30s"),
        audit = dir.join("audit.jsonl").display()
    )
}

/// Starts `ds-reaper run` with `cfg` in `dir` and waits (the start-up full
/// scan of a large table included) until it is ready and has swept once.
async fn spawn(bin: &Path, dir: &Path, cfg: &str, port: u16) -> Result<ReaperProcess> {
    let config = dir.join("config.toml");
    std::fs::write(&config, cfg)?;
    let rp = ReaperProcess::spawn(Spawn {
        bin,
        config: &config,
        command: "run",
        log: &dir.join("ds-reaper.log"),
        port,
        env: &[],
        patience: Duration::from_secs(180),
    })?;
    rp.wait_ready().await?;
    Ok(rp)
}

fn my(db: &SimDb) -> Result<&sqlx::MySqlPool> {
    match &db.pool {
        SimPool::My(p) => Ok(p),
        SimPool::Pg(_) => bail!("benchmarks run on MariaDB"),
    }
}

async fn count_state(db: &SimDb, a: i64, b: i64, state: i32) -> Result<i64> {
    let n: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM t_ds_task_instance WHERE id BETWEEN {a} AND {b} AND state = {state}"
    ))
    .fetch_one(my(db)?)
    .await?;
    Ok(n)
}

pub async fn reap(reaper: Option<PathBuf>, n: u64) -> Result<()> {
    let bin = binary_beside_me(reaper)?;
    let db = SimDb::create(SimKind::MySql, "3.2.2").await?;
    let zk = zk_connect();
    let root = format!("/ds-bench-reap-{}/dolphinscheduler", std::process::id());
    let dir = tempfile::tempdir()?;
    let r = reap_body(&bin, &db, &zk, &root, dir.path(), n).await;
    let _ = delete_tree(&zk, &root).await;
    db.drop().await?;
    r
}

/// Rounds of each side of the reap benchmark: the raw UPDATE and the daemon
/// are each measured this many times and each side's best counts, so that
/// neither figure is one noisy sample against the other's best.
const REAP_ROUNDS: usize = 5;

/// (first intent, first done, last done, done records) of the tasks `a..=b`
/// in an audit trail.
type Span = (
    Option<chrono::DateTime<chrono::FixedOffset>>,
    Option<chrono::DateTime<chrono::FixedOffset>>,
    Option<chrono::DateTime<chrono::FixedOffset>>,
    u64,
);

fn audit_span(audit: &str, a: i64, b: i64) -> Span {
    let (mut first, mut first_done, mut last, mut done) = (None, None, None, 0u64);
    for l in audit.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        if !v["task_id"].as_i64().is_some_and(|t| (a..=b).contains(&t)) {
            continue;
        }
        let ts = v["ts"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        match v["event"].as_str() {
            Some("intent") if first.is_none() => first = ts,
            Some("done") => {
                done += 1;
                first_done = first_done.or(ts);
                last = ts;
            }
            _ => {}
        }
    }
    (first, first_done, last, done)
}

fn ms(d: chrono::Duration) -> f64 {
    d.num_microseconds().unwrap_or(0) as f64 / 1e3
}

async fn reap_body(bin: &Path, db: &SimDb, zk: &str, root: &str, dir: &Path, n: u64) -> Result<()> {
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    // One set of n zombies-to-be per round, each on a worker of its own.
    let hosts = [
        "10.0.0.11:1234",
        "10.0.0.14:1234",
        "10.0.0.15:1234",
        "10.0.0.16:1234",
        "10.0.0.17:1234",
    ];
    let mut sets = Vec::new();
    for h in &hosts[..REAP_ROUNDS] {
        sets.push(db.bulk_fill(wf, n, 1, h).await?);
    }
    db.bulk_fill(wf, 10, 1, "10.0.0.12:1234").await?;
    // a realistic table: the zombies among finished history
    db.bulk_fill(wf, 100_000, 7, "10.0.0.12:1234").await?;

    // The raw figure: the operator's manual fix, one conditional UPDATE over
    // the zombies' id list.
    let (a, b) = sets[0];
    let ids = (a..=b).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let mut raws = Vec::new();
    for _ in 0..REAP_ROUNDS {
        let t = Instant::now();
        let done = sqlx::query(&format!(
            "UPDATE t_ds_task_instance SET state = 6, end_time = NOW() \
             WHERE id IN ({ids}) AND state = 1 AND flag = 1"
        ))
        .execute(my(db)?)
        .await?
        .rows_affected();
        raws.push(t.elapsed().as_secs_f64());
        if done != n {
            bail!("raw UPDATE touched {done} rows, expected {n}");
        }
        sqlx::query(&format!(
            "UPDATE t_ds_task_instance SET state = 1 WHERE id BETWEEN {a} AND {b}"
        ))
        .execute(my(db)?)
        .await?;
    }
    let raw = raws.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "raw batched UPDATE of {n} rows: {} ms, best {:.1} ms",
        raws.iter()
            .map(|r| format!("{:.1}", r * 1000.0))
            .collect::<Vec<_>>()
            .join(" / "),
        raw * 1000.0
    );

    let started = servers_started();
    let mut servers = Vec::new();
    for h in ["10.0.0.12:1234", "10.0.0.13:1234"]
        .iter()
        .chain(&hosts[..REAP_ROUNDS])
    {
        servers.push(
            SimServer::register(zk, root, db.line, ServerKind::Worker, h, &[], started).await?,
        );
    }
    servers.push(
        SimServer::register(
            zk,
            root,
            db.line,
            ServerKind::Master,
            "10.0.0.1:5678",
            &[],
            started,
        )
        .await?,
    );
    let port = free_port()?;
    let extra = format!(
        "[reconcile]\nsweep_interval = \"1s\"\nfull_scan_interval = \"1m\"\ngrace_period = \"2s\"\n\
         startup_settle = \"1s\"\nmax_actions_per_sweep = {n}\n\
         [rate]\nper_minute = 10000000\n\
         [brake]\nmax_lost_worker_fraction = 0.99\nmax_zombie_fraction = 1.0\nmin_zombies = 100000000\n\
         [policy]\nworker_lost = \"fail\"\n"
    );
    let mut rp = spawn(
        bin,
        dir,
        &config(zk, root, db.url(), port, dir, &extra),
        port,
    )
    .await?;
    // Each round loses one zombie worker; the daemon's own reaping time is
    // its first intent to its last outcome for that round's tasks.
    let mut rounds = Vec::new();
    let mut result_of_rounds = Ok(());
    for (r, &(a, b)) in sets.iter().enumerate() {
        let crash = Instant::now();
        servers[2 + r].crash().await;
        let polled = poll("every zombie failed", Duration::from_secs(600), || async {
            Ok((count_state(db, a, b, 6).await? == n as i64).then_some(()))
        })
        .await;
        if let Err(e) = polled {
            result_of_rounds = Err(e);
            break;
        }
        let total = crash.elapsed().as_secs_f64();
        // the outcome records follow the rows; wait until all are on file
        let audit_path = dir.join("audit.jsonl");
        let span = poll("every outcome audited", Duration::from_secs(30), || async {
            let span = audit_span(&std::fs::read_to_string(&audit_path)?, a, b);
            Ok((span.3 == n).then_some(span))
        })
        .await?;
        let (Some(f), Some(fd), Some(l), done) = span else {
            bail!("round {r}: no intent/done in the audit trail");
        };
        println!(
            "round {}: first intent → first done {:.1} ms (intents fsync + batched write), \
             first → last done {:.1} ms (per-task follow-ups); {done} done; crash → all FAILURE {total:.1} s \
             (grace 2 s + sweep)",
            r + 1,
            ms(fd - f),
            ms(l - f - (fd - f)),
        );
        rounds.push((ms(l - f) / 1e3, done, total));
    }
    let _ = rp.stop().await;
    for s in &mut servers {
        s.crash().await;
    }
    result_of_rounds.with_context(|| rp.log_tail(30))?;
    let (reaping, done, total) = rounds
        .iter()
        .copied()
        .min_by(|x, y| x.0.total_cmp(&y.0))
        .context("no round measured")?;
    println!(
        "daemon: best of {REAP_ROUNDS} rounds: reaping (first intent → last done) {:.1} ms = {:.0} tasks/s",
        reaping * 1000.0,
        done as f64 / reaping.max(1e-6)
    );
    println!(
        "ratio daemon / raw UPDATE (best against best): {:.1}×",
        reaping / raw
    );
    result("reap_raw_update_ms", raw * 1000.0);
    result("reap_daemon_s", reaping);
    result("reap_daemon_per_s", done as f64 / reaping.max(1e-6));
    result("reap_ratio", reaping / raw);
    result("reap_crash_to_all_s", total);
    Ok(())
}

/// What `bench-steady` runs.
pub struct SteadyOpts {
    pub workers: usize,
    pub rows: u64,
    /// Measuring window after the daemon is ready.
    pub secs: u64,
    /// `reconcile.sweep_interval` and `reconcile.full_scan_interval`, as the config spells them.
    pub sweep_interval: String,
    pub full_scan_interval: String,
    /// Each simulated server's heartbeat period.
    pub heartbeat: Duration,
}

pub async fn steady(reaper: Option<PathBuf>, o: SteadyOpts) -> Result<()> {
    let bin = binary_beside_me(reaper)?;
    let db = SimDb::create(SimKind::MySql, "3.2.2").await?;
    let zk = zk_connect();
    let root = format!("/ds-bench-steady-{}/dolphinscheduler", std::process::id());
    let dir = tempfile::tempdir()?;
    let r = steady_body(&bin, &db, &zk, &root, dir.path(), &o).await;
    let _ = delete_tree(&zk, &root).await;
    db.drop().await?;
    r
}

async fn steady_body(
    bin: &Path,
    db: &SimDb,
    zk: &str,
    root: &str,
    dir: &Path,
    o: &SteadyOpts,
) -> Result<()> {
    let (workers, rows, secs) = (o.workers, o.rows, o.secs);
    let host = |i: usize| format!("10.2.{}.{}:1234", i / 250, i % 250 + 1);
    let hosts: Vec<String> = (0..workers).map(host).collect();
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t = Instant::now();
    let (a, b) = db.bulk_fill(wf, rows, 1, "x").await?;
    // spread the live rows over every worker
    let w = workers.max(1);
    sqlx::query(&format!(
        "UPDATE t_ds_task_instance SET host = CONCAT('10.2.', FLOOR((id % {w}) / 250), '.', \
         (id % {w}) % 250 + 1, ':1234') WHERE id BETWEEN {a} AND {b}"
    ))
    .execute(my(db)?)
    .await?;
    println!(
        "{rows} live rows over {workers} workers in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let started = servers_started();
    let _m = SimServer::register(
        zk,
        root,
        db.line,
        ServerKind::Master,
        "10.0.0.1:5678",
        &[],
        started,
    )
    .await?;
    let fleet = SimFleet::register(
        zk,
        root,
        (db.line, ServerKind::Worker),
        &hosts,
        &[],
        started,
        SimOptions {
            interval: o.heartbeat,
            ..SimOptions::default()
        },
    )
    .await?;
    let port = free_port()?;
    let extra = format!(
        "[reconcile]\nsweep_interval = \"{}\"\nfull_scan_interval = \"{}\"\nstartup_settle = \"2s\"\n",
        o.sweep_interval, o.full_scan_interval
    );
    let settings = format!(
        "sweep_interval {}, full_scan_interval {}, heartbeat every {} s per worker",
        o.sweep_interval,
        o.full_scan_interval,
        o.heartbeat.as_secs()
    );
    let mut rp = spawn(
        bin,
        dir,
        &config(zk, root, db.url(), port, dir, &extra),
        port,
    )
    .await?;
    let pid = rp.child.id().context("daemon pid")?;
    let st = rp.json("/api/v1/status").await?;
    println!(
        "daemon ready: {} candidates, {} zombies in the first sweep; measuring {secs} s ({settings})",
        st["last_sweep"]["candidates"], st["last_sweep"]["zombies"]
    );
    let tck = ds_sim::procs::clk_tck();
    let (t0, _, _) = ds_sim::procs::proc_sample(pid)?;
    let start = Instant::now();
    let mut rss_max = 0u64;
    let mut rss_sum = 0u64;
    let mut k = 0u64;
    // Sweeps of the window by kind, from the status's last sweep (each sweep
    // is at least a second apart from the next of the same kind here).
    let mut last_at = st["last_sweep"]["at"].clone();
    let (mut incr, mut full) = (0u32, 0u32);
    while start.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (_, rss, _) = ds_sim::procs::proc_sample(pid)?;
        rss_max = rss_max.max(rss);
        rss_sum += rss;
        k += 1;
        if k.is_multiple_of(2) {
            if let Ok(s) = rp.json("/api/v1/status").await {
                let ls = &s["last_sweep"];
                if ls["at"] != last_at && ls["result"] == "ok" {
                    last_at = ls["at"].clone();
                    if ls["kind"] == "full" {
                        full += 1;
                    } else {
                        incr += 1;
                    }
                }
            }
        }
    }
    let (t1, rss_end, hwm) = ds_sim::procs::proc_sample(pid)?;
    let cpu = (t1 - t0) as f64 / tck / start.elapsed().as_secs_f64() * 100.0;
    let (_, metrics) = rp.get("/metrics").await?;
    let get = |name: &str| metric_value(&metrics, name);
    let sweeps = get("ds_reaper_sweep_duration_seconds_count").unwrap_or(0.0);
    let sweep_avg = get("ds_reaper_sweep_duration_seconds_sum").unwrap_or(0.0) / sweeps.max(1.0);
    let mib = |kb: u64| kb as f64 / 1024.0;
    println!(
        "steady over {:.0} s ({settings}): VmHWM {:.1} MiB (peak since start, start-up full scan included); \
         VmRSS in the window max {:.1} avg {:.1} end {:.1} MiB; CPU {cpu:.2}% of one core; \
         {} live workers seen; sweeps in the window: {incr} incremental, {full} full (seen by status polls); \
         {sweeps} sweeps since start, mean {:.0} ms",
        start.elapsed().as_secs_f64(),
        mib(hwm),
        mib(rss_max),
        rss_sum as f64 / k.max(1) as f64 / 1024.0,
        mib(rss_end),
        get("ds_reaper_live_workers").unwrap_or(0.0),
        sweep_avg * 1000.0
    );
    result("steady_rss_hwm_mib", mib(hwm));
    result("steady_rss_max_mib", mib(rss_max));
    result("steady_cpu_percent", cpu);
    result("steady_sweep_mean_ms", sweep_avg * 1000.0);
    result("steady_full_scans_in_window", full as f64);
    result("steady_incremental_sweeps_in_window", incr as f64);
    result(
        "steady_live_workers",
        get("ds_reaper_live_workers").unwrap_or(0.0),
    );
    let _ = rp.stop().await;
    fleet.close().await;
    Ok(())
}
