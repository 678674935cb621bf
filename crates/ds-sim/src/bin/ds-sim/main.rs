//! `ds-sim`: a simulated DolphinScheduler cluster on the command line.
//!
//! - `ds-sim demo` walks through the product's cases end to end against the
//!   real `ds-reaper` binary (a dead task process on a live worker, a worker
//!   crash, a lost master's workflow, a stalled workflow) on ZooKeeper, etcd
//!   or DS's JDBC registry, and exits non-zero when the expected reaping did
//!   not happen (see `demo.rs`).
//! - `ds-sim cluster` keeps a simulated cluster up for manual play until Ctrl-C.

use anyhow::Result;
use chrono::{Duration as TimeDelta, Utc};
use clap::{Args, Parser, Subcommand};
use ds_sim::db::{SchemaSource, SimDb, SimKind, TaskSpec, WorkflowSpec};
use ds_sim::zk::{delete_tree, ServerKind, SimServer};
use std::path::PathBuf;
use std::time::Duration;

mod bench;
mod demo;

#[derive(Parser)]
#[command(name = "ds-sim", about = "A simulated DolphinScheduler cluster")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// A dead task process, a worker crash and a lost master's workflow,
    /// end to end, explained step by step.
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
        /// The registry the simulated cluster and ds-reaper use (etcd:
        /// $ETCD_ENDPOINTS, default http://127.0.0.1:2379; jdbc: DS 3.2's JDBC
        /// registry tables in the demo's database).
        #[arg(long, value_enum, default_value_t = demo::RegistryArg::Zookeeper)]
        registry: demo::RegistryArg,
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
        /// The daemon's `reconcile.sweep_interval`.
        #[arg(long, default_value = "30s")]
        sweep_interval: String,
        /// The daemon's `reconcile.full_scan_interval` (SPEC default 10m; the
        /// window should hold at least one full scan after the first).
        #[arg(long, default_value = "10m")]
        full_scan_interval: String,
        /// How often each simulated server rewrites its heartbeat (DS: 10 s).
        #[arg(long, default_value_t = 10)]
        heartbeat_seconds: u64,
    },
    /// A randomized fault soak judged by an oracle (exit 1 on any wrong write).
    Soak(SoakArgs),
    /// Judges a soak's recorded history (its history.json) again, e.g. with a
    /// newer oracle; exit 1 on any wrong write.
    SoakJudge { history: PathBuf },
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Demo {
            reaper,
            hold_seconds,
            schema,
            registry,
        } => demo::demo(reaper, hold_seconds, schema.into(), registry).await,
        Cmd::BenchReap { reaper, zombies } => bench::reap(reaper, zombies).await,
        Cmd::BenchSteady {
            reaper,
            workers,
            rows,
            seconds,
            sweep_interval,
            full_scan_interval,
            heartbeat_seconds,
        } => {
            bench::steady(
                reaper,
                bench::SteadyOpts {
                    workers,
                    rows,
                    secs: seconds,
                    sweep_interval,
                    full_scan_interval,
                    heartbeat: Duration::from_secs(heartbeat_seconds.max(1)),
                },
            )
            .await
        }
        Cmd::Soak(args) => soak(args).await,
        Cmd::SoakJudge { history } => soak_judge(&history),
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

// ---------------------------------------------------------------- soak

/// `ds-sim soak`'s options.
#[derive(Args)]
struct SoakArgs {
    /// How long to inject faults (e.g. 3m, 30m).
    #[arg(long, default_value = "3m")]
    duration: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 50)]
    workers: usize,
    #[arg(long, default_value_t = 3)]
    masters: usize,
    /// Workers (the first ones) with a `ds-reaper agent` and real task processes.
    #[arg(long, default_value_t = 4)]
    agents: usize,
    #[arg(long, default_value_t = 2)]
    tasks_per_worker: usize,
    /// Mean time between faults, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    fault_every_ms: u64,
    #[arg(long)]
    reaper: Option<PathBuf>,
    /// Where configs, logs, audit trails and the history go
    /// (default /tmp/ds-soak-<seed>-<pid>).
    #[arg(long)]
    dir: Option<PathBuf>,
}

async fn soak(a: SoakArgs) -> Result<()> {
    let SoakArgs {
        duration,
        seed,
        workers,
        masters,
        agents,
        tasks_per_worker,
        fault_every_ms,
        reaper,
        dir,
    } = a;
    let duration = parse_duration(&duration)?;
    let dir =
        dir.unwrap_or_else(|| PathBuf::from(format!("/tmp/ds-soak-{seed}-{}", std::process::id())));
    let opts = ds_sim::soak::SoakOpts {
        duration,
        seed,
        workers: workers.max(1),
        masters: masters.max(1),
        agents: agents.min(workers),
        tasks_per_worker,
        fault_every: Duration::from_millis(fault_every_ms.max(50)),
        reaper: ds_sim::reaper::binary_beside_me(reaper)?,
        dir: dir.clone(),
    };
    println!(
        "ds-sim soak: seed {seed}, {duration:?}, {workers} workers ({} with an agent), {masters} masters, \
         two ds-reaper replicas; files in {}",
        opts.agents,
        dir.display()
    );
    let out = ds_sim::soak::run(opts).await?;
    let path = dir.join("history.json");
    std::fs::write(&path, serde_json::to_string(&out.history)?)?;
    print!("{}", ds_sim::soak::report(&out));
    println!("history: {}", path.display());
    if !out.verdict.wrong.is_empty() {
        anyhow::bail!("{} wrong write(s) (seed {seed})", out.verdict.wrong.len());
    }
    Ok(())
}

fn soak_judge(path: &std::path::Path) -> Result<()> {
    let text = std::fs::read_to_string(path)?;
    let history: ds_sim::soak::oracle::History = serde_json::from_str(&text)?;
    let verdict = ds_sim::soak::oracle::judge(&history);
    let out = ds_sim::soak::SoakOutcome {
        history,
        verdict,
        not_implemented: vec![],
        notes: vec![format!("judged again from {}", path.display())],
    };
    print!("{}", ds_sim::soak::report(&out));
    if !out.verdict.wrong.is_empty() {
        anyhow::bail!("{} wrong write(s)", out.verdict.wrong.len());
    }
    Ok(())
}

/// `90s`, `3m`, `1h`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("bad duration {s:?} (e.g. 90s, 3m, 1h)"))?;
    let k = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => anyhow::bail!("bad duration unit in {s:?} (s, m or h)"),
    };
    Ok(Duration::from_secs(n * k))
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

// ---------------------------------------------------------------- shared with the demo and the benchmarks

const STATE_RUNNING: i32 = 1;
