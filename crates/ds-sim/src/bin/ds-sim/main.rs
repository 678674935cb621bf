//! `ds-sim`: a simulated DolphinScheduler cluster on the command line.
//!
//! - `ds-sim demo` walks through one worker crash end to end against the real
//!   `ds-reaper` binary and exits non-zero when the expected reaping did not happen.
//! - `ds-sim cluster` keeps a simulated cluster up for manual play until Ctrl-C.

use anyhow::{bail, Context, Result};
use chrono::{Duration as TimeDelta, Utc};
use clap::{Parser, Subcommand};
use ds_sim::db::{SchemaSource, SimDb, SimKind, TaskSpec, WorkflowSpec};
use ds_sim::zk::{delete_tree, ServerKind, SimServer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

mod bench;

#[derive(Parser)]
#[command(name = "ds-sim", about = "A simulated DolphinScheduler cluster")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One worker crash, end to end, explained step by step.
    Demo {
        /// The ds-reaper binary (default: next to this one).
        #[arg(long)]
        reaper: Option<PathBuf>,
        /// Keep everything up this long after the reaping, to browse the status page.
        #[arg(long, default_value = "0")]
        hold_seconds: u64,
        /// Where the DS tables come from: ds-sim's own description of them
        /// (the default: needs nothing beyond the repository), the real DS
        /// schema file under $DS_SCHEMA_DIR, or the file when present.
        #[arg(long, value_enum, default_value_t = SchemaArg::Described)]
        schema: SchemaArg,
    },
    /// Reap throughput: N zombies reaped by the daemon vs one raw batched UPDATE.
    BenchReap {
        #[arg(long)]
        reaper: Option<PathBuf>,
        #[arg(long, default_value_t = 2000)]
        zombies: u64,
    },
    /// Steady-state RSS/CPU of the daemon with many workers and live rows.
    BenchSteady {
        #[arg(long)]
        reaper: Option<PathBuf>,
        #[arg(long, default_value_t = 2000)]
        workers: usize,
        #[arg(long, default_value_t = 100_000)]
        rows: u64,
        /// Measuring window after the daemon is ready.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// A simulated cluster (database + registry) kept up until Ctrl-C.
    Cluster {
        /// Schema fixture: 1.2.1, 1.3.9, 2.0.9, 3.1.9, 3.2.2, dev, 3.3.2, 3.4.0.
        #[arg(long, default_value = "3.2.2")]
        fixture: String,
        /// Where the DS tables come from: the real DS schema file under
        /// $DS_SCHEMA_DIR when it exists, else ds-sim's own description (auto).
        #[arg(long, value_enum, default_value_t = SchemaArg::Auto)]
        schema: SchemaArg,
        /// Use PostgreSQL instead of MariaDB.
        #[arg(long)]
        postgres: bool,
        #[arg(long, default_value_t = 3)]
        workers: usize,
        /// RUNNING tasks spread over the workers.
        #[arg(long, default_value_t = 12)]
        tasks: usize,
        /// ZooKeeper root (default: a fresh one).
        #[arg(long)]
        root: Option<String>,
    },
}

/// `--schema`: where the DS tables come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SchemaArg {
    /// ds-sim's own description of the tables ds-reaper and the simulator use.
    Described,
    /// The real DS schema file under $DS_SCHEMA_DIR.
    Files,
    /// The file when it exists, else the description.
    Auto,
}

impl From<SchemaArg> for SchemaSource {
    fn from(a: SchemaArg) -> SchemaSource {
        match a {
            SchemaArg::Described => SchemaSource::Described,
            SchemaArg::Files => SchemaSource::Files,
            SchemaArg::Auto => SchemaSource::Auto,
        }
    }
}

/// Where a database's tables came from, in words.
fn schema_origin(db: &SimDb) -> String {
    let kind = match db.kind {
        SimKind::MySql => "mysql.sql",
        SimKind::Postgres => "postgresql.sql",
    };
    match db.source {
        SchemaSource::Described => format!(
            "tables from ds-sim's own description of DS {} (crates/ds-sim/src/schema.rs)",
            db.fixture
        ),
        _ => format!("schema from $DS_SCHEMA_DIR/{}/{kind}", db.fixture),
    }
}

fn zk_connect() -> String {
    std::env::var("DS_TEST_ZK").unwrap_or_else(|_| "127.0.0.1:2181".into())
}

fn heading(n: u32, title: &str) {
    println!();
    println!("== Step {n}: {title}");
    println!("{}", "-".repeat(title.len() + 12));
}

fn explain(text: &str) {
    for l in text.lines() {
        println!("   {l}");
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Demo {
            reaper,
            hold_seconds,
            schema,
        } => demo(reaper, hold_seconds, schema.into()).await,
        Cmd::BenchReap { reaper, zombies } => bench::reap(reaper, zombies).await,
        Cmd::BenchSteady {
            reaper,
            workers,
            rows,
            seconds,
        } => bench::steady(reaper, workers, rows, seconds).await,
        Cmd::Cluster {
            fixture,
            schema,
            postgres,
            workers,
            tasks,
            root,
        } => cluster(&fixture, schema.into(), postgres, workers, tasks, root).await,
    };
    if let Err(e) = r {
        eprintln!("\nds-sim: FAILED: {e:#}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------- cluster

async fn cluster(
    fixture: &str,
    schema: SchemaSource,
    postgres: bool,
    workers: usize,
    tasks: usize,
    root: Option<String>,
) -> Result<()> {
    let kind = if postgres {
        SimKind::Postgres
    } else {
        SimKind::MySql
    };
    let db = SimDb::create_with(kind, fixture, schema).await?;
    let root = root.unwrap_or_else(|| format!("/ds-sim-{}/dolphinscheduler", std::process::id()));
    let zk = zk_connect();
    let started = Utc::now() - TimeDelta::hours(1);
    let mut servers = vec![
        SimServer::register(
            &zk,
            &root,
            db.line,
            ServerKind::Master,
            "10.0.0.1:5678",
            &[],
            started,
        )
        .await?,
    ];
    let mut hosts = Vec::new();
    for i in 0..workers {
        let h = format!("10.0.1.{}:1234", i + 1);
        servers.push(
            SimServer::register(&zk, &root, db.line, ServerKind::Worker, &h, &[], started).await?,
        );
        hosts.push(h);
    }
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let submit = (Utc::now() - TimeDelta::minutes(5)).naive_utc();
    for i in 0..tasks {
        let mut t = TaskSpec::new(
            wf,
            STATE_RUNNING,
            hosts.get(i % hosts.len().max(1)).map(|s| &**s),
        );
        t.name = format!("task_{i}");
        t.submit_time = Some(submit);
        t.start_time = Some(submit);
        db.insert_task(&t).await?;
    }
    println!("simulated DS {fixture} cluster is up (Ctrl-C to stop and clean up)");
    println!("  database url : {}", db.url());
    println!("  schema       : {}", schema_origin(&db));
    println!("  zookeeper    : {zk}");
    println!("  root         : {root}");
    println!("  master       : 10.0.0.1:5678");
    println!("  workers      : {}", hosts.join(", "));
    println!("  workflow {wf} with {tasks} RUNNING tasks");
    println!(
        "point ds-reaper at it: DS_REAPER__DATABASE__URL='{}' DS_REAPER__ZOOKEEPER__ROOT='{root}'",
        db.url()
    );
    println!("commands on stdin: crash <host> | restart <host> | freeze <host> | list | quit");
    // A plain thread reads stdin: the workspace's tokio has no io-std feature.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    loop {
        let line = tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            l = rx.recv() => match l {
                Some(l) => l,
                None => {
                    // stdin closed (e.g. run in the background): wait for Ctrl-C
                    tokio::signal::ctrl_c().await?;
                    break;
                }
            },
        };
        let mut it = line.split_whitespace();
        let (cmd, host) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
        let target = servers.iter_mut().find(|s| s.host() == host);
        match (cmd, target) {
            ("quit" | "exit", _) => break,
            ("list", _) => {
                for s in &servers {
                    let state = if s.client().is_some() {
                        "live"
                    } else {
                        "crashed"
                    };
                    println!("  {} {state}", s.host());
                }
            }
            ("crash", Some(s)) => {
                s.crash().await;
                println!("  {host} crashed (session closed)");
            }
            ("restart", Some(s)) => {
                s.restart(Utc::now()).await?;
                println!("  {host} restarted with a new startup time");
            }
            ("freeze", Some(s)) => {
                s.freeze_heartbeat();
                println!("  {host}: heartbeat frozen (session stays)");
            }
            ("", _) => {}
            (_, None) if !host.is_empty() => println!("  unknown host {host}"),
            _ => {
                println!("  commands: crash <host> | restart <host> | freeze <host> | list | quit")
            }
        }
    }
    println!("stopping");
    for s in &mut servers {
        s.crash().await;
    }
    let _ = delete_tree(&zk, &root).await;
    db.drop().await?;
    Ok(())
}

// ---------------------------------------------------------------- demo

const STATE_RUNNING: i32 = 1;
const STATE_FAILURE: i32 = 6;
const STATE_SUCCESS: i32 = 7;

fn state_name(code: i32) -> &'static str {
    match code {
        0 => "SUBMITTED_SUCCESS",
        1 => "RUNNING_EXECUTION",
        5 => "STOP",
        6 => "FAILURE",
        7 => "SUCCESS",
        8 => "NEED_FAULT_TOLERANCE",
        9 => "KILL",
        17 => "DISPATCH",
        _ => "?",
    }
}

struct DemoTask {
    id: i64,
    wf: &'static str,
    name: &'static str,
    host: &'static str,
    state: i32,
}

struct Reaper {
    child: tokio::process::Child,
    port: u16,
    log: PathBuf,
    client: reqwest::Client,
}

impl Reaper {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn json(&self, path: &str) -> Result<Value> {
        let r = self.client.get(self.url(path)).send().await?;
        let code = r.status();
        let body = r.text().await?;
        if !code.is_success() {
            bail!("GET {path}: {code} {body}");
        }
        Ok(serde_json::from_str(&body)?)
    }

    async fn text(&self, path: &str) -> Result<(u16, String)> {
        let r = self.client.get(self.url(path)).send().await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    async fn stop(&mut self) -> Result<Option<i32>> {
        if let Some(pid) = self.child.id() {
            std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()?;
        }
        let st = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .context("ds-reaper did not stop within 30 s of SIGTERM")??;
        Ok(st.code())
    }
}

async fn poll<F, Fut, T>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn reaper_binary(arg: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = arg {
        return Ok(p);
    }
    let me = std::env::current_exe()?;
    let p = me
        .parent()
        .context("no directory for the ds-sim binary")?
        .join("ds-reaper");
    if !p.exists() {
        bail!(
            "{} not found: build it (cargo build --release -p reaper) or pass --reaper",
            p.display()
        );
    }
    Ok(p)
}

async fn demo(reaper: Option<PathBuf>, hold: u64, schema: SchemaSource) -> Result<()> {
    let bin = reaper_binary(reaper)?;
    let t0 = Instant::now();
    println!("ds-reaper demo: a worker of a DolphinScheduler 3.2 cluster crashes");
    println!("=================================================================");
    explain(
        "A simulated DS 3.2.2 cluster (real ZooKeeper sessions, DS 3.2.2's tables in\n\
         MariaDB) loses one worker together with the master that owned its workflows.\n\
         ds-reaper finds the orphaned RUNNING tasks, fails them, and hands the workflow\n\
         back to DS's 'recover from failed node' path.",
    );

    heading(1, "a fresh database with DS 3.2.2's tables");
    let db = SimDb::create_with(SimKind::MySql, "3.2.2", schema)
        .await
        .context("creating the demo database (is MariaDB up? bash deploy/dev/services.sh start)")?;
    explain(&format!(
        "database `{}` on MariaDB, {}",
        db.name(),
        schema_origin(&db)
    ));
    let zk = zk_connect();
    let root = format!(
        "/ds-demo-{}-{}/dolphinscheduler",
        std::process::id(),
        Utc::now().timestamp()
    );
    let dir = tempfile::Builder::new()
        .prefix("ds-reaper-demo-")
        .tempdir()?;
    let mut servers: Vec<SimServer> = Vec::new();
    let mut reaper_proc: Option<Reaper> = None;
    let r = demo_body(
        &db,
        &zk,
        &root,
        dir.path(),
        &bin,
        &mut servers,
        &mut reaper_proc,
        hold,
    )
    .await;

    heading(9, "clean up");
    if let Some(mut rp) = reaper_proc.take() {
        match rp.stop().await {
            Ok(code) => explain(&format!("ds-reaper stopped on SIGTERM, exit code {code:?}")),
            Err(e) => explain(&format!("ds-reaper did not stop cleanly: {e:#}")),
        }
    }
    for s in &mut servers {
        s.crash().await;
    }
    let _ = delete_tree(&zk, &root).await;
    explain(&format!(
        "simulated servers stopped, ZooKeeper root {root} deleted"
    ));
    let name = db.name().to_string();
    db.drop().await?;
    explain(&format!(
        "database `{name}` dropped (ZooKeeper/MariaDB keep running)"
    ));
    match r {
        Ok(()) => {
            println!();
            println!(
                "RESULT: OK — the lost worker's zombies were reaped exactly as expected ({:.0} s)",
                t0.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[allow(clippy::too_many_arguments)]
async fn demo_body(
    db: &SimDb,
    zk: &str,
    root: &str,
    dir: &Path,
    bin: &Path,
    servers: &mut Vec<SimServer>,
    reaper_slot: &mut Option<Reaper>,
    hold: u64,
) -> Result<()> {
    heading(
        2,
        "a simulated cluster: 2 masters, 3 workers, 12 RUNNING tasks",
    );
    let line = db.line;
    let started = Utc::now() - TimeDelta::hours(2);
    let (m1, m2) = ("10.0.0.1:5678", "10.0.0.2:5678");
    let (w1, w2, w3) = ("10.0.1.11:1234", "10.0.1.12:1234", "10.0.1.13:1234");
    for (kind, host) in [
        (ServerKind::Master, m1),
        (ServerKind::Master, m2),
        (ServerKind::Worker, w1),
        (ServerKind::Worker, w2),
        (ServerKind::Worker, w3),
    ] {
        servers.push(SimServer::register(zk, root, line, kind, host, &[], started).await?);
    }
    explain(&format!(
        "ZooKeeper {zk}, root {root}\n\
         masters {m1}, {m2}; workers {w1}, {w2}, {w3} (heartbeat every second)"
    ));

    // Workflows: A and B owned by m2 (which will die with w1), C by m1 (stays up).
    let submit = (Utc::now() - TimeDelta::minutes(10)).naive_utc();
    let mut wfs: BTreeMap<&'static str, i64> = BTreeMap::new();
    for (name, owner) in [("A", m2), ("B", m2), ("C", m1), ("D", m1), ("E", m1)] {
        let id = db
            .insert_workflow(&WorkflowSpec {
                host: Some(owner.into()),
                start_time: submit,
                ..WorkflowSpec::default()
            })
            .await?;
        wfs.insert(name, id);
    }
    let plan: &[(&str, &str, &str, i32)] = &[
        ("A", "extract_orders", w1, STATE_RUNNING),
        ("A", "extract_customers", w1, STATE_RUNNING),
        ("A", "check_source", w2, STATE_SUCCESS),
        ("B", "load_dwd_orders", w1, STATE_RUNNING),
        ("B", "load_dwd_items", w2, STATE_RUNNING),
        ("C", "train_model", w1, STATE_RUNNING),
        ("C", "export_features", w3, STATE_RUNNING),
        ("D", "spark_daily", w2, STATE_RUNNING),
        ("D", "hive_partition", w2, STATE_RUNNING),
        ("D", "report_mail", w3, STATE_RUNNING),
        ("E", "sync_mysql", w2, STATE_RUNNING),
        ("E", "sync_pg", w3, STATE_RUNNING),
        ("E", "sync_es", w3, STATE_RUNNING),
    ];
    let mut tasks = Vec::new();
    for &(wf, name, host, state) in plan {
        let mut t = TaskSpec::new(wfs[wf], state, Some(host));
        t.name = name.into();
        t.submit_time = Some(submit);
        t.start_time = Some(submit);
        let id = db.insert_task(&t).await?;
        tasks.push(DemoTask {
            id,
            wf,
            name,
            host,
            state,
        });
    }
    explain(&format!(
        "workflow instances: A={} B={} (owned by master {m2}), C={} D={} E={} (owned by {m1})",
        wfs["A"], wfs["B"], wfs["C"], wfs["D"], wfs["E"]
    ));
    print_tasks(db, &tasks).await?;

    heading(3, "start ds-reaper with a demo config");
    let port = free_port()?;
    let token = "demo-token-not-secret";
    std::fs::write(dir.join("token"), format!("{token}\n"))?;
    let cfg = format!(
        r#"[dolphinscheduler]
version = "auto"
time_zone = "UTC"
[zookeeper]
connect = "{zk}"
root = "{root}"
session_timeout = "10s"
[database]
url = "{url}"
[reconcile]
sweep_interval = "1s"
full_scan_interval = "30s"
grace_period = "5s"
startup_settle = "2s"
[policy]
worker_lost = "fail"
workflow = "recover"
[http]
listen = "127.0.0.1:{port}"
token_file = "{token_file}"
[audit]
path = "{audit}"
[log]
format = "pretty"
level = "info"
"#,
        url = db.url(),
        token_file = dir.join("token").display(),
        audit = dir.join("audit.jsonl").display(),
    );
    let cfg_path = dir.join("config.toml");
    std::fs::write(&cfg_path, &cfg)?;
    for l in cfg.lines().filter(|l| {
        l.starts_with("grace_period")
            || l.starts_with("startup_settle")
            || l.starts_with("worker_lost")
            || l.starts_with("workflow")
            || l.starts_with("sweep_interval")
    }) {
        explain(&format!("  {l}"));
    }
    let log = dir.join("ds-reaper.log");
    let logf = std::fs::File::create(&log)?;
    let child = tokio::process::Command::new(bin)
        .arg("--config")
        .arg(&cfg_path)
        .arg("run")
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    *reaper_slot = Some(Reaper {
        child,
        port,
        log: log.clone(),
        client: reqwest::Client::new(),
    });
    let rp = reaper_slot.as_ref().context("reaper")?;
    explain(&format!(
        "{} --config {} run   (log: {})",
        bin.display(),
        cfg_path.display(),
        log.display()
    ));
    let r = poll(
        "ds-reaper ready (valid registry view, one sweep done)",
        Duration::from_secs(60),
        || async {
            if let Ok((200, _)) = rp.text("/readyz").await {
                let s = rp.json("/api/v1/status").await?;
                if s["last_sweep"]["result"] == "ok" {
                    return Ok(Some(s));
                }
            }
            Ok(None)
        },
    )
    .await;
    let status = match r {
        Ok(s) => s,
        Err(e) => bail!("{e:#}\nds-reaper log:\n{}", rp.log_tail()),
    };
    explain(&format!(
        "ready: DS line {}, leader {}, registry view valid, last sweep: {} candidates, {} zombies",
        status["ds_line"],
        status["leader"],
        status["last_sweep"]["candidates"],
        status["last_sweep"]["zombies"]
    ));
    let workers = rp.json("/api/v1/workers").await?;
    explain(&format!(
        "live workers: {}   live masters: {}",
        hosts_of(&workers["workers"]),
        hosts_of(&workers["masters"])
    ));
    explain(&format!("status page: {}", rp.url("/")));

    heading(
        4,
        format!("worker {w1} crashes, and master {m2} with it").as_str(),
    );
    explain(
        "The two ZooKeeper sessions close: their ephemeral nodes disappear at once.\n\
         DS 3.x would fail the worker's tasks over only from the owning master's memory —\n\
         and that master is gone too, so the 4 RUNNING tasks on the worker stay RUNNING forever.",
    );
    let crash_at = Instant::now();
    for s in servers.iter_mut() {
        if s.host() == w1 || s.host() == m2 {
            s.crash().await;
        }
    }
    let lost = poll(
        "ds-reaper sees the loss",
        Duration::from_secs(30),
        || async {
            let w = rp.json("/api/v1/workers").await?;
            let lost = w["lost"].as_array().cloned().unwrap_or_default();
            Ok((lost.len() >= 2).then_some(lost))
        },
    )
    .await?;
    for l in &lost {
        explain(&format!(
            "seen lost: {} {} at {}   (+{:.1} s)",
            l["kind"].as_str().unwrap_or("?"),
            l["host"].as_str().unwrap_or("?"),
            l["lost_at"].as_str().unwrap_or("?"),
            crash_at.elapsed().as_secs_f64()
        ));
    }
    explain("grace_period is 5 s: a worker that comes back quickly is not a zombie-maker.");

    heading(5, "zombies found (GET /api/v1/zombies)");
    let expected: Vec<i64> = tasks
        .iter()
        .filter(|t| t.host == w1 && t.state == STATE_RUNNING)
        .map(|t| t.id)
        .collect();
    // The list is the last sweep's, before its actions: the sweep that finds
    // them also fails them, so fall back to the audit trail if we blink.
    let zombies = poll("zombies reported", Duration::from_secs(60), || async {
        let z = rp.json("/api/v1/zombies").await?;
        let list = z["zombies"].as_array().cloned().unwrap_or_default();
        if !list.is_empty() {
            return Ok(Some(list));
        }
        let done = expected_done(db, &expected).await?;
        if done {
            let a = rp.json("/api/v1/audit?limit=200").await?;
            let det: Vec<Value> = a["records"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|r| r["event"] == "detected")
                .collect();
            return Ok(Some(det));
        }
        Ok(None)
    })
    .await?;
    explain(&format!(
        "after {:.1} s: {} zombie(s)",
        crash_at.elapsed().as_secs_f64(),
        zombies.len()
    ));
    for z in &zombies {
        explain(&format!(
            "task {:>3} {:<18} host {:<15} reason {:<12} absent {}s  → action {}, workflow {}{}",
            z["task_id"],
            z["task_name"].as_str().unwrap_or("?"),
            z["host"].as_str().unwrap_or("?"),
            z["reason"].as_str().unwrap_or("?"),
            z["evidence"]["absent_for_seconds"],
            z["action"].as_str().unwrap_or("?"),
            z["workflow"].as_str().unwrap_or("?"),
            z["note"]
                .as_str()
                .map(|n| format!("\n         note: {n}"))
                .unwrap_or_default()
        ));
    }

    heading(6, "the writes: task rows after, and the audit trail");
    poll(
        "every zombie task FAILURE",
        Duration::from_secs(60),
        || async { Ok(expected_done(db, &expected).await?.then_some(())) },
    )
    .await
    .with_context(|| format!("ds-reaper log:\n{}", rp.log_tail()))?;
    explain(&format!(
        "every zombie is FAILURE {:.1} s after the crash",
        crash_at.elapsed().as_secs_f64()
    ));
    print_tasks(db, &tasks).await?;
    let audit = rp.json("/api/v1/audit?limit=200").await?;
    let records = audit["records"].as_array().cloned().unwrap_or_default();
    explain("audit records (intent is fsynced before the write, the outcome after):");
    for r in &records {
        explain(&format!(
            "  {} {:<9} task {:>3} {} → {} ({}; workflow {}){}",
            r["ts"]
                .as_str()
                .map(|s| &s[11..s.len().min(23)])
                .unwrap_or("?"),
            r["event"].as_str().unwrap_or("?"),
            r["task_id"],
            r["from_state"].as_str().unwrap_or("-"),
            r["to_state"].as_str().unwrap_or("-"),
            r["reason"].as_str().unwrap_or("-"),
            r["workflow"].as_str().unwrap_or("-"),
            r["detail"]
                .as_str()
                .map(|d| format!("\n        {d}"))
                .unwrap_or_default()
        ));
    }

    heading(7, "workflow follow-up: recovery commands (t_ds_command)");
    explain(
        "workflow = \"recover\": the workflow is failed and a START_FAILURE_TASK_PROCESS (4)\n\
         command is queued, as DS's \"recover from failed node\" does — only when the owning\n\
         master is gone and no other task of that workflow is still running.",
    );
    for (name, id) in &wfs {
        let st: i32 = db
            .workflow_col(*id, "state")
            .await?
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1);
        explain(&format!(
            "workflow {name} (id {id}, owner {}): state {} ({})",
            db.workflow_col(*id, "host").await?.unwrap_or_default(),
            st,
            state_name(st)
        ));
    }
    // The command is inserted right after the task write in the same action;
    // give it a moment rather than racing it.
    let cmds = poll(
        "recovery command for workflow A",
        Duration::from_secs(30),
        || async {
            let c = db.commands().await?;
            let wanted = wfs["A"].to_string();
            Ok(c.iter()
                .any(|r| {
                    r.get("process_instance_id").cloned().flatten().as_deref() == Some(&wanted)
                })
                .then_some(c))
        },
    )
    .await;
    let cmds = match cmds {
        Ok(c) => c,
        Err(e) => {
            let c = db.commands().await?;
            print_commands(&c);
            bail!("{e:#}\nds-reaper log:\n{}", rp.log_tail());
        }
    };
    print_commands(&cmds);
    explain(&format!(
        "B: task failed, but another task of B still runs on {w2}: no workflow write (DS would\n\
         only fail it once every task is terminal).\n\
         C: its owning master {m1} is alive and holds C in memory: `recover` is downgraded to\n\
         `none` (see the note above), the master's own failover handles the workflow."
    ));

    heading(8, "metrics (GET /metrics) and the status page");
    let (_, metrics) = rp.text("/metrics").await?;
    for l in metrics.lines().filter(|l| {
        !l.starts_with('#')
            && [
                "ds_reaper_zombies",
                "ds_reaper_zombies_detected_total",
                "ds_reaper_actions_total",
                "ds_reaper_candidates",
                "ds_reaper_live_workers",
                "ds_reaper_live_masters",
                "ds_reaper_workers_lost_total",
                "ds_reaper_brake_engaged",
                "ds_reaper_registry_view_valid",
                "ds_reaper_leader",
            ]
            .iter()
            .any(|m| l.starts_with(&format!("{m}{{")) || l.starts_with(&format!("{m} ")))
    }) {
        explain(l);
    }
    explain(&format!("status page:  {}", rp.url("/")));
    explain(&format!("API:          {}", rp.url("/api/v1/status")));

    // What must hold: every zombie failed, every other row untouched, and the
    // recovery command queued for A (and only for A).
    let mut problems = Vec::new();
    for t in &tasks {
        let now = db.task_state(t.id).await?.state;
        let want = if expected.contains(&t.id) {
            STATE_FAILURE
        } else {
            t.state
        };
        if now != want {
            problems.push(format!(
                "task {} ({}) is {} ({}), expected {}",
                t.id,
                t.name,
                now,
                state_name(now),
                state_name(want)
            ));
        }
    }
    let for_wf = |name: &str| {
        let id = wfs[name].to_string();
        cmds.iter()
            .filter(|r| r.get("process_instance_id").cloned().flatten().as_deref() == Some(&id))
            .count()
    };
    if for_wf("A") != 1 {
        problems.push(format!(
            "{} recovery commands for workflow A, expected 1",
            for_wf("A")
        ));
    }
    for other in ["B", "C", "D", "E"] {
        if for_wf(other) != 0 {
            problems.push(format!("unexpected command for workflow {other}"));
        }
    }
    let m = rp.json("/api/v1/status").await?;
    if m["brake"]["engaged"] == true {
        problems.push("the brake is engaged".into());
    }
    if hold > 0 {
        println!();
        println!(
            "holding for {hold} s: browse {} (Ctrl-C aborts)",
            rp.url("/")
        );
        tokio::time::sleep(Duration::from_secs(hold)).await;
    }
    if !problems.is_empty() {
        bail!(
            "the expected reaping did not happen:\n  {}\nds-reaper log:\n{}",
            problems.join("\n  "),
            rp.log_tail()
        );
    }
    Ok(())
}

fn hosts_of(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["host"].as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

async fn expected_done(db: &SimDb, ids: &[i64]) -> Result<bool> {
    for id in ids {
        if db.task_state(*id).await?.state != STATE_FAILURE {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn print_tasks(db: &SimDb, tasks: &[DemoTask]) -> Result<()> {
    println!(
        "   {:>4}  {:<3} {:<18} {:<15} {:<18} end_time",
        "id", "wf", "task", "host", "state"
    );
    for t in tasks {
        let s = db.task_state(t.id).await?;
        let changed = if s.state != t.state {
            "  ← changed"
        } else {
            ""
        };
        println!(
            "   {:>4}  {:<3} {:<18} {:<15} {:<18} {}{changed}",
            t.id,
            t.wf,
            t.name,
            t.host,
            state_name(s.state),
            s.end_time
                .map(|e| e.format("%H:%M:%S").to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
    Ok(())
}

fn print_commands(cmds: &[ds_sim::db::CommandView]) {
    if cmds.is_empty() {
        explain("t_ds_command: (empty)");
    }
    for c in cmds {
        let g = |k: &str| c.get(k).cloned().flatten().unwrap_or_else(|| "NULL".into());
        explain(&format!(
            "t_ds_command id {}: command_type {} process_instance_id {} process_definition_code {} command_param {}",
            g("id"),
            g("command_type"),
            g("process_instance_id"),
            g("process_definition_code"),
            g("command_param")
        ));
    }
}
