//! `ds-sim soak`: a simulated DS 3.2 cluster under a randomized mix of
//! faults drawn from a seed, with the real `ds-reaper` (two replicas, leader
//! election) and real `ds-reaper agent`s, judged by an oracle that knows the
//! truth: which task processes live, which tasks DS finished.
//!
//! The parts:
//! - a private ZooKeeper ([`PrivateZk`]) and a private MariaDB
//!   ([`PrivateMariaDb`]), so that both can be restarted; the shared services
//!   are never touched;
//! - each replica reaches ZooKeeper and the database through proxies of its
//!   own ([`Proxy`]): a registry partition cuts its ZooKeeper proxy, and the
//!   database proxy notes which MySQL connection ids are the replica's;
//! - database triggers record every change of a task or workflow row and
//!   every command insert, with the connection that made it, so that each
//!   change is attributed to DS (the simulator marks its own connections) or
//!   to a replica;
//! - the simulated DS dispatches workflows and tasks, finishes them, takes
//!   the commands ds-reaper queues and re-runs what was failed;
//! - the [`oracle`] judges the recorded history.

mod evidence;
mod norow;
pub mod oracle;
pub mod schedule;
mod shared;

use crate::db::{SchemaSource, SimDb, SimKind, TaskSpec, WorkflowSpec};
use crate::mariadbserver::PrivateMariaDb;
use crate::procs::{ExecBase, TaskProcess};
use crate::proxy::{ConnLog, Proxy};
use crate::reaper::{free_port, read_audit, ReaperProcess, Spawn};
use crate::zk::{ServerKind, SimOptions, SimServer};
use crate::zkserver::PrivateZk;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use oracle::{Death, ExternalDeath, History, RowFate, TaskTruth, Timing, Ts, Window};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use schedule::Fault;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::{Executor, Row};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Mutex as AsyncMutex;
use zookeeper_client as zk;

const RUNNING: i32 = 1;
const SUCCESS: i32 = 7;
const FIXTURE: &str = "3.2.2";

// The daemon's timings in the soak (seconds), and the oracle's margins.
const GRACE: f64 = 5.0;
const STALE: f64 = 20.0;
const PROCESS_GONE: f64 = 4.0;
const AGENT_STALE: f64 = 10.0;
const GHOST_AFTER: f64 = 5.0;
const SKEW: f64 = 5.0;
const MARGIN: f64 = 15.0;
const RECOVERY: f64 = 12.0;

/// Leadership as sampled: from each time on, this replica led (None: nobody).
type Leaders = Arc<Mutex<Vec<(Ts, Option<String>)>>>;

pub fn now_ts() -> Ts {
    Utc::now().timestamp_micros() as f64 / 1e6
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakOpts {
    pub duration: Duration,
    pub seed: u64,
    pub workers: usize,
    pub masters: usize,
    /// Workers (the first ones) that run a `ds-reaper agent`.
    pub agents: usize,
    /// Live tasks the simulated DS keeps per worker.
    pub tasks_per_worker: usize,
    /// Mean time between faults.
    pub fault_every: Duration,
    pub reaper: PathBuf,
    /// Where configs, logs and audit trails go (kept after the run).
    pub dir: PathBuf,
}

/// What came out.
pub struct SoakOutcome {
    pub history: History,
    pub verdict: oracle::Verdict,
    /// Faults the soak could not inject, with why.
    pub not_implemented: Vec<(String, String)>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WState {
    Up,
    /// The JVM lives but its session is gone (a flap or a network blip).
    Away,
    /// The JVM is gone.
    Down,
}

struct Server {
    host: String,
    sim: Arc<AsyncMutex<SimServer>>,
    /// Set by the task that re-registers it, once it has.
    registered: Arc<AtomicBool>,
    state: WState,
    hung: bool,
    startup: DateTime<Utc>,
    incarnation: u32,
    agent: Option<usize>,
    /// Under a fault of its own (not picked for another).
    busy: bool,
    /// The open "away" window (session gone, JVM alive), if any.
    away: Option<usize>,
    /// When its heartbeat last reached ZooKeeper.
    written: crate::zk::HeartbeatClock,
    /// The open "heartbeat_gap" window (no heartbeat written for a while), if any.
    gap: Option<usize>,
}

struct Agent {
    worker: usize,
    exec: ExecBase,
    proc: Arc<AsyncMutex<ReaperProcess>>,
    proxy: Proxy,
    busy: bool,
}

struct Replica {
    label: String,
    /// Its `/api/v1/ghosts` URL.
    http: String,
    proc: Arc<AsyncMutex<ReaperProcess>>,
    zk_proxy: Proxy,
    _db_proxy: Proxy,
    audit: PathBuf,
}

struct Task {
    worker: usize,
    /// The worker incarnation that runs it.
    incarnation: u32,
    proc: Option<TaskProcess>,
    /// Its process (real or, on a worker without agent, virtual) runs.
    alive: bool,
    ends_at: Instant,
    /// DS wrote its result (or gave up on it): nothing more to do but a ghost.
    over: bool,
    ghost_until: Option<Instant>,
}

struct Wf {
    master: usize,
    incarnation: u32,
    held: bool,
    tasks: Vec<i64>,
    done: bool,
}

enum Timer {
    WorkerBack { w: usize, new_jvm: bool },
    Unfreeze { w: usize },
    MasterBack { m: usize },
    AgentProxyUp { a: usize, w: usize },
    ZkStart { window: usize },
    DbStart { window: usize },
    ReplicaStart { r: usize, window: usize },
    ReplicaCont { r: usize, window: usize },
    PartitionEnd { r: usize, window: usize },
    DsFinish { task: i64 },
}

struct Sim {
    rng: StdRng,
    opts: SoakOpts,
    start: Ts,
    db: SimDb,
    ds: MySqlPool,
    zk: Arc<AsyncMutex<PrivateZk>>,
    mydb: Arc<AsyncMutex<PrivateMariaDb>>,
    workers: Vec<Server>,
    masters: Vec<Server>,
    agents: Vec<Agent>,
    replicas: Vec<Replica>,
    tasks: BTreeMap<i64, Task>,
    truth: BTreeMap<i64, TaskTruth>,
    wfs: BTreeMap<i64, Wf>,
    held: BTreeMap<i64, Vec<(Ts, Option<Ts>)>>,
    consumed: BTreeMap<i64, Vec<Ts>>,
    /// Commands seen queued: id -> (workflow, when DS takes it).
    pending_cmds: BTreeMap<i64, (i64, Instant)>,
    external: Vec<ExternalDeath>,
    blocked: Vec<Window>,
    faults: BTreeMap<String, u64>,
    timers: Vec<(Instant, Timer)>,
    infra_free_at: Instant,
    /// Windows whose end is fixed once a restart completes.
    open: Vec<(usize, Arc<AtomicBool>)>,
    leaders: Leaders,
    stopped: Vec<bool>,
    notes: Vec<String>,
    errors: u64,
    /// The private ZooKeeper, the DS root in it, and how simulated servers
    /// register (for the second worker of a shared host).
    zk_connect: String,
    root: String,
    sim_opts: SimOptions,
    /// The second worker on a shared host, while it is up.
    guest: Option<shared::Guest>,
    guest_runs: u32,
    /// Processes of another DS installation (rows ds-reaper never read).
    strays: Vec<norow::Stray>,
    stray_seq: i64,
    /// What the evidence sampler looks at.
    targets: evidence::Shared<evidence::Targets>,
}

fn secs(a: f64, b: f64, rng: &mut StdRng) -> Duration {
    Duration::from_secs_f64(rng.gen_range(a..b))
}

/// The trigger-based record of every row change and command insert.
const HISTORY_DDL: &[&str] = &[
    "CREATE TABLE soak_history (seq BIGINT AUTO_INCREMENT PRIMARY KEY, ts DECIMAL(20,6), \
     conn BIGINT, writer VARCHAR(16), tbl VARCHAR(16), row_id BIGINT, old_state INT, new_state INT, \
     old_flag INT, new_flag INT, old_host VARCHAR(255), new_host VARCHAR(255), cmd_type INT)",
    "CREATE TRIGGER soak_task AFTER UPDATE ON t_ds_task_instance FOR EACH ROW \
     INSERT INTO soak_history (ts, conn, writer, tbl, row_id, old_state, new_state, old_flag, new_flag, old_host, new_host) \
     VALUES (UNIX_TIMESTAMP(SYSDATE(6)), CONNECTION_ID(), @soak_writer, 'task', NEW.id, OLD.state, NEW.state, \
     OLD.flag, NEW.flag, OLD.host, NEW.host)",
    "CREATE TRIGGER soak_wf AFTER UPDATE ON t_ds_process_instance FOR EACH ROW \
     INSERT INTO soak_history (ts, conn, writer, tbl, row_id, old_state, new_state, old_flag, new_flag, old_host, new_host) \
     VALUES (UNIX_TIMESTAMP(SYSDATE(6)), CONNECTION_ID(), @soak_writer, 'workflow', NEW.id, OLD.state, NEW.state, \
     OLD.flag, NEW.flag, OLD.host, NEW.host)",
    "CREATE TRIGGER soak_cmd AFTER INSERT ON t_ds_command FOR EACH ROW \
     INSERT INTO soak_history (ts, conn, writer, tbl, row_id, cmd_type) \
     VALUES (UNIX_TIMESTAMP(SYSDATE(6)), CONNECTION_ID(), @soak_writer, 'command', NEW.process_instance_id, NEW.command_type)",
];

fn replica_config(zk: &str, root: &str, db: &str, port: u16, audit: &Path) -> String {
    format!(
        r#"{head}[database]
url = "{db}"
statement_timeout = "5s"
[reconcile]
sweep_interval = "1s"
full_scan_interval = "20s"
grace_period = "{GRACE}s"
startup_settle = "2s"
heartbeat_stale_after = "{STALE}s"
no_host_after = "1h"
clock_skew_tolerance = "{SKEW}s"
process_gone_after = "{PROCESS_GONE}s"
agent_stale_after = "{AGENT_STALE}s"
workflow_grace_period = "20s"
workflow_stall_after = "1h"
ghost_after = "{GHOST_AFTER}s"
[rate]
per_minute = 600
[brake]
release_after = "20s"
[policy]
worker_lost = "fail"
worker_restarted = "fault-tolerance"
heartbeat_stale = "fail"
process_gone = "fail"
workflow = "recover"
workflow_master_lost = "recover"
ghost_process = "kill"
# lingering_process leaves SUCCESS rows' processes: killed only under a rule
# naming terminal_state (SPEC §15)
[[policy.rules]]
reason = "ghost_process"
over = ["terminal_state"]
[leader]
enabled = true
[http]
listen = "127.0.0.1:{port}"
[audit]
path = "{audit}"
[log]
format = "json"
level = "info"
"#,
        head = crate::reaper::zk_header(zk, root, "6s"),
        audit = audit.display()
    )
}

fn agent_config(zk: &str, root: &str, worker: &str, exec: &Path, port: u16) -> String {
    format!(
        r#"{head}[agent]
worker = "{worker}"
exec_base = "{exec}"
scan_interval = "1s"
allow_kill = true
kill_grace = "2s"
listen = "127.0.0.1:{port}"
# The simulated heartbeats' startupTime lies before the java stand-in whose
# pid they carry was started (a real worker's JVM starts before it): the
# agent's start-time check of its JVM is widened past that (simulation only).
[reconcile]
clock_skew_tolerance = "10000days"
[log]
format = "json"
level = "info"
"#,
        head = crate::reaper::zk_header(zk, root, "4s"),
        exec = exec.display()
    )
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status();
}

/// Runs a soak.
pub async fn run(opts: SoakOpts) -> Result<SoakOutcome> {
    std::fs::create_dir_all(&opts.dir)?;
    let mut notes = Vec::new();
    let zk = PrivateZk::start().await.context("private ZooKeeper")?;
    let zk_connect = zk.connect_string();
    let mydb = PrivateMariaDb::start().await.context("private MariaDB")?;
    notes.push(format!(
        "private ZooKeeper {zk_connect}, private MariaDB 127.0.0.1:{} (log {})",
        mydb.port(),
        mydb.log_path().display()
    ));
    let db = SimDb::create_on(
        SimKind::MySql,
        FIXTURE,
        SchemaSource::Described,
        &mydb.server_url(),
    )
    .await?;
    for ddl in HISTORY_DDL {
        db.exec(ddl)
            .await
            .context("installing the history triggers")?;
    }
    let ds = MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(3))
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET @soak_writer = 'ds'").await?;
                Ok(())
            })
        })
        .connect(db.url())
        .await?;
    let root = format!("/soak-{}/dolphinscheduler", opts.seed);
    let started = Utc::now() - chrono::Duration::hours(1);
    let sim_opts = SimOptions {
        interval: Duration::from_secs(2),
        // Longer than any ZooKeeper outage of the soak: the simulated
        // servers' nodes go only when the soak says so.
        session_timeout: Duration::from_secs(40),
        ..SimOptions::default()
    };
    let mut masters = Vec::new();
    for i in 0..opts.masters {
        let host = format!("10.0.0.{}:5678", i + 1);
        let s = SimServer::register_with(
            &zk_connect,
            &root,
            (db.line, ServerKind::Master),
            &host,
            &[],
            started,
            sim_opts.clone(),
        )
        .await?;
        masters.push(server(host, s, started, None));
    }
    let mut workers = Vec::new();
    for i in 0..opts.workers {
        let host = format!("10.0.{}.{}:1234", 1 + i / 200, 1 + i % 200);
        let s = SimServer::register_with(
            &zk_connect,
            &root,
            (db.line, ServerKind::Worker),
            &host,
            &[],
            started,
            sim_opts.clone(),
        )
        .await?;
        let agent = (i < opts.agents).then_some(i);
        workers.push(server(host, s, started, agent));
    }
    let bin = opts.reaper.clone();
    let mut agents = Vec::new();
    for (i, w) in workers.iter().enumerate().take(opts.agents) {
        let exec = ExecBase::new()?;
        let proxy = Proxy::start(&zk_connect).await?;
        let port = free_port()?;
        let cfg = opts.dir.join(format!("agent-{i}.toml"));
        std::fs::write(
            &cfg,
            agent_config(&proxy.addr(), &root, &w.host, exec.path(), port),
        )?;
        let p = ReaperProcess::spawn(Spawn {
            bin: &bin,
            config: &cfg,
            command: "agent",
            log: &opts.dir.join(format!("agent-{i}.log")),
            port,
            env: &[],
            patience: Duration::from_secs(60),
        })?;
        p.wait_http().await?;
        agents.push(Agent {
            worker: i,
            exec,
            proc: Arc::new(AsyncMutex::new(p)),
            proxy,
            busy: false,
        });
    }
    let conns: ConnLog = Arc::new(Mutex::new(Vec::new()));
    let mut replicas = Vec::new();
    for label in ["a", "b"] {
        let zk_proxy = Proxy::start(&zk_connect).await?;
        let db_proxy = Proxy::start_with(
            &format!("127.0.0.1:{}", mydb.port()),
            Some((label.to_string(), conns.clone())),
        )
        .await?;
        let url = format!("mysql://ds:ds@127.0.0.1:{}/{}", db_proxy.port, db.name());
        let port = free_port()?;
        let audit = opts.dir.join(format!("audit-{label}.jsonl"));
        let cfg = opts.dir.join(format!("reaper-{label}.toml"));
        std::fs::write(
            &cfg,
            replica_config(&zk_proxy.addr(), &root, &url, port, &audit),
        )?;
        let host = format!("soak-{label}");
        let p = ReaperProcess::spawn(Spawn {
            bin: &bin,
            config: &cfg,
            command: "run",
            log: &opts.dir.join(format!("reaper-{label}.log")),
            port,
            env: &[("HOSTNAME", host.as_str())],
            patience: Duration::from_secs(60),
        })?;
        p.wait_http().await?;
        replicas.push(Replica {
            http: p.url("/api/v1/ghosts"),
            label: label.to_string(),
            proc: Arc::new(AsyncMutex::new(p)),
            zk_proxy,
            _db_proxy: db_proxy,
            audit,
        });
    }
    // Leadership as the election's nodes show it, sampled.
    let leaders: Leaders = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_leader(
        zk_connect.clone(),
        format!("{root}/ds-reaper/leader"),
        leaders.clone(),
        stop.clone(),
    ));
    {
        let r = replicas[0].proc.lock().await;
        r.wait_ready().await?;
    }
    let targets: evidence::Shared<evidence::Targets> = Arc::new(Mutex::new(evidence::Targets {
        ghosts_urls: replicas.iter().map(|r| r.http.clone()).collect(),
        pair: None,
    }));
    let seen: evidence::Shared<evidence::Seen> = Arc::default();
    let sampler = tokio::spawn(evidence::sample(
        zk_connect.clone(),
        format!("{root}/ds-reaper/agents"),
        targets.clone(),
        seen.clone(),
        stop.clone(),
    ));
    let mut sim = Sim {
        rng: StdRng::seed_from_u64(opts.seed),
        opts: opts.clone(),
        start: now_ts(),
        db,
        ds,
        zk: Arc::new(AsyncMutex::new(zk)),
        mydb: Arc::new(AsyncMutex::new(mydb)),
        workers,
        masters,
        agents,
        replicas,
        tasks: BTreeMap::new(),
        truth: BTreeMap::new(),
        wfs: BTreeMap::new(),
        held: BTreeMap::new(),
        consumed: BTreeMap::new(),
        pending_cmds: BTreeMap::new(),
        external: Vec::new(),
        blocked: Vec::new(),
        faults: BTreeMap::new(),
        timers: Vec::new(),
        infra_free_at: Instant::now() + Duration::from_secs(20),
        open: Vec::new(),
        leaders: leaders.clone(),
        stopped: vec![false, false],
        notes,
        errors: 0,
        zk_connect: zk_connect.clone(),
        root: root.clone(),
        sim_opts: sim_opts.clone(),
        guest: None,
        guest_runs: 0,
        strays: Vec::new(),
        stray_seq: 0,
        targets: targets.clone(),
    };
    let r = sim.main_loop().await;
    let end = now_ts();
    sim.close_open_aways(end);
    stop.store(true, Ordering::SeqCst);
    let _ = watcher.await;
    let _ = sampler.await;
    r?;
    sim.settle().await;
    let history = sim.history(end, &conns, &leaders).await?;
    let verdict = oracle::judge(&history);
    sim.shut_down().await;
    let not_implemented = vec![(
        "registry_partition (network namespace)".to_string(),
        "emulated: the replica's ZooKeeper connections pass through a proxy the soak cuts \
         (connections dropped, new ones refused), not a network namespace"
            .to_string(),
    )];
    let mut notes = std::mem::take(&mut sim.notes);
    notes.extend(evidence::describe(
        &seen.lock().unwrap_or_else(|e| e.into_inner()),
    ));
    if sim.errors > 0 {
        notes.push(format!(
            "{} simulated-DS database calls failed (during database restarts) and were retried",
            sim.errors
        ));
    }
    let db = sim.db;
    let _ = db.drop().await;
    Ok(SoakOutcome {
        history,
        verdict,
        not_implemented,
        notes,
    })
}

fn server(host: String, s: SimServer, startup: DateTime<Utc>, agent: Option<usize>) -> Server {
    Server {
        written: s.heartbeat_clock(),
        gap: None,
        host,
        sim: Arc::new(AsyncMutex::new(s)),
        registered: Arc::new(AtomicBool::new(true)),
        state: WState::Up,
        hung: false,
        startup,
        incarnation: 0,
        agent,
        busy: false,
        away: None,
    }
}

/// Samples which replica holds the lowest latch node every 100 ms.
async fn watch_leader(connect: String, dir: String, out: Leaders, stop: Arc<AtomicBool>) {
    let mut client: Option<zk::Client> = None;
    let mut last: Option<Option<String>> = None;
    while !stop.load(Ordering::SeqCst) {
        if client.is_none() {
            client = tokio::time::timeout(
                Duration::from_secs(3),
                zk::Client::connector()
                    .with_session_timeout(Duration::from_secs(10))
                    .connect(&connect),
            )
            .await
            .ok()
            .and_then(|r| r.ok());
        }
        if let Some(c) = &client {
            let r = tokio::time::timeout(Duration::from_secs(2), async {
                let names = match c.list_children(&dir).await {
                    Ok(n) => n,
                    Err(zk::Error::NoNode) => return Ok(None),
                    Err(e) => return Err(e),
                };
                let Some(min) = names
                    .iter()
                    .filter_map(|n| Some((n.rsplit('-').next()?.parse::<i64>().ok()?, n)))
                    .min()
                else {
                    return Ok(None);
                };
                let (data, _) = c.get_data(&format!("{dir}/{}", min.1)).await?;
                let id = String::from_utf8_lossy(&data).to_string();
                // "soak-<label>:<pid>"
                Ok(id
                    .strip_prefix("soak-")
                    .and_then(|r| r.split(':').next())
                    .map(str::to_string))
            })
            .await;
            match r {
                Ok(Ok(who)) => {
                    if last.as_ref() != Some(&who) {
                        out.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((now_ts(), who.clone()));
                        last = Some(who);
                    }
                }
                Ok(Err(zk::Error::SessionExpired | zk::Error::ConnectionLoss)) | Err(_) => {
                    client = None;
                }
                Ok(Err(_)) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Sim {
    fn count(&mut self, f: Fault) {
        *self.faults.entry(f.name().to_string()).or_default() += 1;
    }

    fn at(&mut self, d: Duration, t: Timer) {
        self.timers.push((Instant::now() + d, t));
    }

    fn window(&mut self, kind: &str, planned: Duration, worker: Option<String>) -> usize {
        let now = now_ts();
        self.blocked.push(Window {
            kind: kind.to_string(),
            from: now,
            to: now + planned.as_secs_f64(),
            worker,
        });
        self.blocked.len() - 1
    }

    /// A worker still away when the run ends was away until then at least:
    /// its window, opened with no length, would otherwise say it was never
    /// away, and a write the policy asks for (away past the grace) would be
    /// judged wrong (soak seed 7: a worker gone at +83.8 s and back in
    /// ZooKeeper at +90.1 s, written at +88.9 s, the run ending at +90 s).
    fn close_open_aways(&mut self, end: Ts) {
        for w in self.workers.iter().chain(self.masters.iter()) {
            if let Some(x) = w.away.and_then(|i| self.blocked.get_mut(i)) {
                x.to = x.to.max(end);
            }
        }
    }

    fn close_window(&mut self, i: usize) {
        if let Some(w) = self.blocked.get_mut(i) {
            w.to = w.to.max(now_ts());
        }
    }

    async fn main_loop(&mut self) -> Result<()> {
        let end = Instant::now() + self.opts.duration;
        let mut next_fault = Instant::now() + Duration::from_secs(5);
        let mut next_cmds = Instant::now();
        let mut next_wf = Instant::now();
        let mut last_print = Instant::now();
        while Instant::now() < end {
            self.run_timers().await;
            self.check_processes();
            self.ds_finish_due().await;
            self.guest_tick().await;
            self.stray_tick();
            if Instant::now() >= next_cmds {
                next_cmds = Instant::now() + Duration::from_millis(700);
                self.ds_commands().await;
            }
            if Instant::now() >= next_wf {
                next_wf = Instant::now() + Duration::from_secs(2);
                self.ds_workflows().await;
            }
            self.ds_dispatch().await;
            if Instant::now() >= next_fault {
                let mean = self.opts.fault_every.as_secs_f64();
                next_fault = Instant::now() + secs(mean * 0.3, mean * 1.7, &mut self.rng);
                let f = Fault::draw(&mut self.rng);
                if let Err(e) = self.inject(f).await {
                    self.notes.push(format!("injecting {}: {e:#}", f.name()));
                }
            }
            if last_print.elapsed() > Duration::from_secs(30) {
                last_print = Instant::now();
                let total: u64 = self.faults.values().sum();
                eprintln!(
                    "soak: +{:.0}s, {} faults, {} tasks created, {} live",
                    now_ts() - self.start,
                    total,
                    self.truth.len(),
                    self.tasks.values().filter(|t| !t.over).count()
                );
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        Ok(())
    }

    // ------------------------------------------------------------ timers

    async fn run_timers(&mut self) {
        let now = Instant::now();
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.timers)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        self.timers = rest;
        for (_, t) in due {
            self.fire(t).await;
        }
        let now = now_ts();
        for w in self.workers.iter_mut().chain(self.masters.iter_mut()) {
            if w.state != WState::Up && w.registered.load(Ordering::SeqCst) && w.busy {
                w.state = WState::Up;
                w.busy = false;
                if let Some(x) = w.away.take().and_then(|i| self.blocked.get_mut(i)) {
                    x.to = now;
                }
            }
        }
    }

    async fn fire(&mut self, t: Timer) {
        match t {
            Timer::WorkerBack { w, new_jvm } => {
                let s = &mut self.workers[w];
                if new_jvm {
                    s.startup = Utc::now();
                    s.incarnation += 1;
                    s.hung = false;
                }
                reregister(s);
            }
            Timer::Unfreeze { w } => {
                let s = &mut self.workers[w];
                s.hung = false;
                s.busy = false;
                let sim = s.sim.clone();
                tokio::spawn(async move { sim.lock().await.resume_heartbeat() });
            }
            Timer::MasterBack { m } => {
                let s = &mut self.masters[m];
                s.startup = Utc::now();
                s.incarnation += 1;
                reregister(s);
            }
            Timer::AgentProxyUp { a, w } => {
                self.agents[a].proxy.up();
                self.agents[a].busy = false;
                reregister(&mut self.workers[w]);
            }
            Timer::ZkStart { window } => {
                let zk = self.zk.clone();
                self.restart_then_close(window, async move {
                    let mut z = zk.lock().await;
                    while z.start_again().await.is_err() {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                });
            }
            Timer::DbStart { window } => {
                let db = self.mydb.clone();
                self.restart_then_close(window, async move {
                    let mut m = db.lock().await;
                    while m.start_again().await.is_err() {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                });
            }
            Timer::ReplicaStart { r, window } => {
                let p = self.replicas[r].proc.clone();
                let host = format!("soak-{}", self.replicas[r].label);
                self.restart_then_close(window, async move {
                    let mut p = p.lock().await;
                    let _ = p.crash_and_restart(&[("HOSTNAME", host.as_str())]).await;
                });
            }
            Timer::ReplicaCont { r, window } => {
                let p = self.replicas[r].proc.clone();
                let pid = p.lock().await.child.id();
                if let Some(pid) = pid {
                    signal(pid, "CONT");
                }
                self.close_window(window);
            }
            Timer::PartitionEnd { r, window } => {
                self.replicas[r].zk_proxy.up();
                self.close_window(window);
            }
            Timer::DsFinish { task } => {
                self.ds_finish(task, false).await;
            }
        }
    }

    /// Runs a restart off the event loop (it may take seconds); its fault
    /// window stays open until the restart is done.
    fn restart_then_close(
        &mut self,
        window: usize,
        restart: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        tokio::spawn(async move {
            restart.await;
            d.store(true, Ordering::SeqCst);
        });
        self.close_later(window, done);
    }

    /// Extends a window until `done` (checked by a timer-less poll).
    fn close_later(&mut self, window: usize, done: Arc<AtomicBool>) {
        // The window's end is fixed when the restart completes; until then
        // it stays open (see `settle_windows`).
        if let Some(w) = self.blocked.get_mut(window) {
            w.to = f64::INFINITY;
        }
        self.open.push((window, done));
    }
}

fn reregister(s: &mut Server) {
    let sim = s.sim.clone();
    let reg = s.registered.clone();
    let startup = s.startup;
    reg.store(false, Ordering::SeqCst);
    tokio::spawn(async move {
        loop {
            let r = sim.lock().await.restart(startup).await;
            if r.is_ok() {
                reg.store(true, Ordering::SeqCst);
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
}

fn crash(s: &mut Server, state: WState) {
    s.state = state;
    s.busy = true;
    s.registered.store(false, Ordering::SeqCst);
    let sim = s.sim.clone();
    tokio::spawn(async move { sim.lock().await.crash().await });
}

fn is_terminal(state: i32) -> bool {
    (5..=9).contains(&state)
}

impl Sim {
    fn pick<T: Copy>(&mut self, v: &[T]) -> Option<T> {
        (!v.is_empty()).then(|| v[self.rng.gen_range(0..v.len())])
    }

    /// Workers that are up, not hung and under no fault.
    fn quiet_workers(&self, with_agent: Option<bool>) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|&i| {
                let w = &self.workers[i];
                w.state == WState::Up
                    && !w.hung
                    && !w.busy
                    && with_agent.is_none_or(|a| a == w.agent.is_some())
            })
            .collect()
    }

    /// Live tasks (process running, row not over) on quiet workers with an agent.
    fn live_agent_tasks(&self) -> Vec<i64> {
        let quiet = self.quiet_workers(Some(true));
        self.tasks
            .iter()
            .filter(|(_, t)| {
                !t.over
                    && t.alive
                    && quiet.contains(&t.worker)
                    && t.incarnation == self.workers[t.worker].incarnation
            })
            .map(|(id, _)| *id)
            .collect()
    }

    fn leader_now(&self) -> Option<String> {
        self.leaders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .and_then(|(_, l)| l.clone())
    }

    /// Ends a task's process as the truth says it died.
    fn kill_task(&mut self, id: i64, why: Death) {
        let now = now_ts();
        if let Some(t) = self.tasks.get_mut(&id) {
            if !t.alive {
                return;
            }
            t.alive = false;
            if let Some(p) = t.proc.as_mut() {
                let _ = p.kill();
            }
            if let Some(tr) = self.truth.get_mut(&id) {
                if tr.dead.is_none() && tr.ds_finished.is_none() {
                    tr.dead = Some((now, why));
                }
            }
        }
    }

    /// The processes of a worker's live tasks die with it (`keep`: those
    /// with a real process survive, as DS ≥ 3.3 workers leave them).
    fn worker_tasks_die(&mut self, w: usize, why: Death, keep: bool) {
        let ids: Vec<i64> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.worker == w && t.alive && !t.over)
            .map(|(id, _)| *id)
            .collect();
        let now = now_ts();
        for id in ids {
            let real = self.tasks[&id].proc.is_some();
            if real && keep {
                continue;
            }
            if why == Death::WorkerRestart {
                if let Some(tr) = self.truth.get_mut(&id) {
                    tr.restart_near_submit = now - tr.submitted < SKEW + 1.0;
                }
            }
            self.kill_task(id, why);
        }
    }

    async fn inject(&mut self, f: Fault) -> Result<()> {
        if f.is_infrastructure() && Instant::now() < self.infra_free_at {
            return Ok(());
        }
        match f {
            Fault::WorkerCrash | Fault::WorkerRestart => {
                let Some(w) = self.pick(&self.quiet_workers(None)) else {
                    return Ok(());
                };
                let keep = self.workers[w].agent.is_some() && self.rng.gen_bool(0.5);
                crash(&mut self.workers[w], WState::Down);
                let (why, back) = if f == Fault::WorkerCrash {
                    (Death::WorkerCrash, secs(8.0, 40.0, &mut self.rng))
                } else {
                    (Death::WorkerRestart, Duration::from_millis(50))
                };
                self.worker_tasks_die(w, why, keep);
                self.at(back, Timer::WorkerBack { w, new_jvm: true });
            }
            Fault::WorkerFlap => {
                let Some(w) = self.pick(&self.quiet_workers(None)) else {
                    return Ok(());
                };
                crash(&mut self.workers[w], WState::Away);
                let host = self.workers[w].host.clone();
                self.workers[w].away = Some(self.window("away", Duration::ZERO, Some(host)));
                let back = secs(0.3, 1.5, &mut self.rng);
                self.at(back, Timer::WorkerBack { w, new_jvm: false });
            }
            Fault::HeartbeatFreeze => {
                let Some(w) = self.pick(&self.quiet_workers(None)) else {
                    return Ok(());
                };
                let long = self.rng.gen_bool(0.5);
                let d = if long {
                    secs(32.0, 40.0, &mut self.rng)
                } else {
                    secs(1.0, 4.0, &mut self.rng)
                };
                let s = &mut self.workers[w];
                s.busy = true;
                let sim = s.sim.clone();
                tokio::spawn(async move { sim.lock().await.freeze_heartbeat() });
                if long {
                    s.hung = true;
                    // A hung worker finishes nothing: its tasks without an
                    // agent are as good as dead; an agent still sees real ones.
                    self.worker_tasks_die(w, Death::WorkerHung, true);
                }
                self.at(d, Timer::Unfreeze { w });
            }
            Fault::TaskProcessDeath | Fault::DsFinishRace => {
                let Some(id) = self.pick(&self.live_agent_tasks()) else {
                    return Ok(());
                };
                if f == Fault::TaskProcessDeath {
                    self.kill_task(id, Death::ProcessDeath);
                } else {
                    self.kill_task(id, Death::DsRace);
                    let d = Duration::from_secs_f64(PROCESS_GONE) + secs(0.5, 3.0, &mut self.rng);
                    self.at(d, Timer::DsFinish { task: id });
                }
                if let Some(t) = self.tasks.get_mut(&id) {
                    t.over = true;
                }
            }
            Fault::LingeringProcess => {
                let Some(id) = self.pick(&self.live_agent_tasks()) else {
                    return Ok(());
                };
                if !self.ds_finish(id, true).await {
                    return Ok(());
                }
                if let Some(tr) = self.truth.get_mut(&id).filter(|t| t.ghost_from.is_some()) {
                    tr.fault = Some(f.name().to_string());
                }
            }
            Fault::MasterDeath => {
                let down = self
                    .masters
                    .iter()
                    .filter(|m| m.state != WState::Up)
                    .count();
                let up: Vec<usize> = (0..self.masters.len())
                    .filter(|&i| self.masters[i].state == WState::Up && !self.masters[i].busy)
                    .collect();
                if down > 0 || up.len() < 2 {
                    return Ok(());
                }
                let Some(m) = self.pick(&up) else {
                    return Ok(());
                };
                crash(&mut self.masters[m], WState::Down);
                let now = now_ts();
                for (id, wf) in self.wfs.iter_mut() {
                    if wf.master == m && wf.held {
                        wf.held = false;
                        if let Some(iv) = self.held.get_mut(id).and_then(|v| v.last_mut()) {
                            iv.1.get_or_insert(now);
                        }
                    }
                }
                let back = secs(15.0, 40.0, &mut self.rng);
                self.at(back, Timer::MasterBack { m });
            }
            Fault::AgentRestart => {
                let Some(a) = self.pick(&(0..self.agents.len()).collect::<Vec<_>>()) else {
                    return Ok(());
                };
                self.restart_agent(a);
            }
            Fault::SharedHost | Fault::MissingRow => {
                let label = if f == Fault::SharedHost {
                    self.start_guest().await?
                } else {
                    self.missing_row().await?
                };
                if let Some(k) = label {
                    *self.faults.entry(k).or_default() += 1;
                }
                return Ok(());
            }
            Fault::AgentSessionLoss => {
                let quiet = self.quiet_workers(Some(true));
                let cands: Vec<usize> = (0..self.agents.len())
                    .filter(|&a| !self.agents[a].busy && quiet.contains(&self.agents[a].worker))
                    .collect();
                let Some(a) = self.pick(&cands) else {
                    return Ok(());
                };
                let w = self.agents[a].worker;
                self.agents[a].busy = true;
                self.agents[a].proxy.down();
                crash(&mut self.workers[w], WState::Away);
                let d = secs(5.5, 7.0, &mut self.rng);
                let host = self.workers[w].host.clone();
                self.window("agent_session_loss", d, Some(host.clone()));
                self.workers[w].away = Some(self.window("away", Duration::ZERO, Some(host)));
                self.at(d, Timer::AgentProxyUp { a, w });
            }
            Fault::ZkRestart => {
                let d = secs(1.0, 4.0, &mut self.rng);
                let window = self.window("zk_restart", d, None);
                self.infra_free_at = Instant::now() + d + Duration::from_secs(15);
                let zk = self.zk.clone();
                let hard = self.rng.gen_bool(0.5);
                tokio::spawn(async move {
                    let mut z = zk.lock().await;
                    let _ = if hard {
                        z.kill9().await
                    } else {
                        z.stop().await
                    };
                });
                self.at(d, Timer::ZkStart { window });
            }
            Fault::DbRestart => {
                let d = secs(1.0, 4.0, &mut self.rng);
                let window = self.window("db_restart", d, None);
                let db = self.mydb.clone();
                tokio::spawn(async move {
                    let _ = db.lock().await.kill9().await;
                });
                self.at(d, Timer::DbStart { window });
                self.infra_free_at = Instant::now() + d + Duration::from_secs(15);
            }
            Fault::ReplicaKill9 | Fault::ReplicaSigstop | Fault::RegistryPartition => {
                let r = self.rng.gen_range(0..self.replicas.len());
                let leads = self.leader_now().as_deref() == Some(self.replicas[r].label.as_str());
                let role = if leads { "leader" } else { "standby" };
                let d = match f {
                    Fault::ReplicaKill9 => secs(1.0, 5.0, &mut self.rng),
                    _ => secs(2.0, 12.0, &mut self.rng),
                };
                // Only the leader's trouble keeps the daemon from acting.
                let kind = format!("{}({role})", f.name());
                let window = if leads {
                    self.window(&kind, d, None)
                } else {
                    usize::MAX
                };
                match f {
                    Fault::ReplicaKill9 => {
                        let p = self.replicas[r].proc.clone();
                        tokio::spawn(async move {
                            let _ = p.lock().await.kill().await;
                        });
                        self.at(d, Timer::ReplicaStart { r, window });
                    }
                    Fault::ReplicaSigstop => {
                        if let Some(pid) = self.replicas[r].proc.lock().await.child.id() {
                            signal(pid, "STOP");
                            self.stopped[r] = true;
                        }
                        self.at(d, Timer::ReplicaCont { r, window });
                    }
                    _ => {
                        self.replicas[r].zk_proxy.down();
                        self.at(d, Timer::PartitionEnd { r, window });
                    }
                }
                *self.faults.entry(kind).or_default() += 1;
                self.infra_free_at = Instant::now() + d + Duration::from_secs(15);
                return Ok(());
            }
        }
        self.count(f);
        Ok(())
    }

    /// `ds-reaper agent` `a` killed with -9 and started again.
    fn restart_agent(&mut self, a: usize) {
        let host = self.workers[self.agents[a].worker].host.clone();
        self.window("agent_restart", Duration::from_secs(4), Some(host));
        let p = self.agents[a].proc.clone();
        tokio::spawn(async move {
            let _ = p.lock().await.crash_and_restart(&[]).await;
        });
    }

    // ------------------------------------------------------------ the simulated DS

    /// Processes the simulator did not end that are gone: an agent killed them.
    fn check_processes(&mut self) {
        let now = now_ts();
        let mut gone = Vec::new();
        for (id, t) in self.tasks.iter_mut() {
            if t.alive {
                if let Some(p) = t.proc.as_mut() {
                    if !p.is_running() {
                        t.alive = false;
                        gone.push(*id);
                    }
                }
            }
        }
        for id in gone {
            self.external.push(ExternalDeath { task: id, ts: now });
            if let Some(tr) = self.truth.get_mut(&id) {
                if tr.dead.is_none() && tr.ds_finished.is_none() {
                    tr.dead = Some((now, Death::ProcessDeath));
                }
            }
        }
        // Heartbeats that did not reach ZooKeeper for a while (a frozen
        // one, or the simulator's own session catching up after a
        // ZooKeeper restart): what the daemon saw was really stale.
        let mut opened = Vec::new();
        for (i, w) in self.workers.iter_mut().enumerate() {
            let last = *w.written.lock().unwrap_or_else(|e| e.into_inner());
            let Some(last) = last else { continue };
            let last = last.timestamp_micros() as f64 / 1e6;
            let lagging = w.state == WState::Up && now - last > 4.0;
            match (w.gap, lagging) {
                (Some(g), true) => {
                    if let Some(x) = self.blocked.get_mut(g) {
                        x.to = now;
                    }
                }
                (Some(g), false) => {
                    w.gap = None;
                    if let Some(x) = self.blocked.get_mut(g) {
                        x.to = now.min(last.max(x.to));
                    }
                }
                (None, true) => opened.push((i, last)),
                (None, false) => {}
            }
        }
        for (i, last) in opened {
            let host = self.workers[i].host.clone();
            self.blocked.push(Window {
                kind: "heartbeat_gap".into(),
                from: last,
                to: now,
                worker: Some(host),
            });
            self.workers[i].gap = Some(self.blocked.len() - 1);
        }
        // windows whose restarts completed
        let open = std::mem::take(&mut self.open);
        for (w, done) in open {
            if done.load(Ordering::SeqCst) {
                if let Some(x) = self.blocked.get_mut(w) {
                    x.to = now;
                }
            } else {
                self.open.push((w, done));
            }
        }
    }

    async fn ds_finish_due(&mut self) {
        let now = Instant::now();
        let due: Vec<i64> = self
            .tasks
            .iter()
            .filter(|(_, t)| {
                (!t.over && t.ends_at <= now) || t.ghost_until.is_some_and(|g| g <= now)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(t) = self.tasks.get(&id) else {
                continue;
            };
            if t.over {
                // a ghost nobody killed: it ends by itself
                let t = self.tasks.get_mut(&id).expect("task");
                t.ghost_until = None;
                if t.alive {
                    t.alive = false;
                    if let Some(p) = t.proc.as_mut() {
                        let _ = p.kill();
                    }
                    if let Some(tr) = self.truth.get_mut(&id) {
                        tr.dead = Some((now_ts(), Death::EndedUnreported));
                    }
                }
                continue;
            }
            let w = &self.workers[t.worker];
            let jvm_gone = t.incarnation != w.incarnation || w.state == WState::Down || w.hung;
            if w.state == WState::Away && t.incarnation == w.incarnation {
                let t = self.tasks.get_mut(&id).expect("task");
                t.ends_at = now + Duration::from_secs(1);
                continue;
            }
            if jvm_gone || !t.alive {
                // Nobody is left to report it: it ends unreported.
                self.kill_task(id, Death::EndedUnreported);
                if let Some(t) = self.tasks.get_mut(&id) {
                    t.over = true;
                }
                continue;
            }
            self.ds_finish(id, false).await;
        }
    }

    /// DS's worker writes the task's result; then its process exits (unless
    /// `linger`). False when the database could not be reached.
    async fn ds_finish(&mut self, id: i64, linger: bool) -> bool {
        let r = sqlx::query(
            "UPDATE t_ds_task_instance SET state = ?, end_time = ? WHERE id = ? AND state = ?",
        )
        .bind(SUCCESS)
        .bind(Utc::now().naive_utc())
        .bind(id)
        .bind(RUNNING)
        .execute(&self.ds)
        .await;
        let now = now_ts();
        let n = match r {
            Ok(r) => r.rows_affected(),
            Err(_) => {
                self.errors += 1;
                if let Some(t) = self.tasks.get(&id) {
                    if t.over && !linger {
                        // a race's late result: try again shortly
                        self.at(Duration::from_millis(300), Timer::DsFinish { task: id });
                    }
                }
                return false;
            }
        };
        if n == 1 {
            if let Some(tr) = self.truth.get_mut(&id) {
                tr.ds_finished = Some(now);
                if linger {
                    tr.ghost_from = Some(now);
                }
            }
        }
        let Some(t) = self.tasks.get_mut(&id) else {
            return true;
        };
        t.over = true;
        if linger && n == 1 {
            t.ghost_until = Some(Instant::now() + Duration::from_secs(60));
        } else if t.alive {
            t.alive = false;
            if let Some(p) = t.proc.as_mut() {
                let _ = p.kill();
            }
        }
        true
    }

    async fn dispatch_task(&mut self, wf: i64, w: usize) -> Result<i64> {
        let now = Utc::now();
        let mut spec = TaskSpec::new(wf, RUNNING, Some(&self.workers[w].host));
        spec.submit_time = Some(now.naive_utc());
        spec.start_time = Some(now.naive_utc());
        let id = self.db.insert_task(&spec).await?;
        let worker = &self.workers[w];
        let proc = match worker.agent {
            Some(a) => Some(self.agents[a].exec.start(self.db.line, wf, id)?),
            None => None,
        };
        let life = secs(20.0, 120.0, &mut self.rng);
        self.tasks.insert(
            id,
            Task {
                worker: w,
                incarnation: worker.incarnation,
                proc,
                alive: true,
                ends_at: Instant::now() + life,
                over: false,
                ghost_until: None,
            },
        );
        self.truth.insert(
            id,
            TaskTruth {
                id,
                wf,
                host: worker.host.clone(),
                agent: worker.agent.is_some(),
                submitted: now.timestamp_micros() as f64 / 1e6,
                dead: None,
                ds_finished: None,
                superseded: None,
                ghost_from: None,
                restart_near_submit: false,
                row: RowFate::Kept,
                fault: None,
            },
        );
        if let Some(x) = self.wfs.get_mut(&wf) {
            x.tasks.push(id);
        }
        Ok(id)
    }

    fn hold(&mut self, wf: i64, m: usize) {
        let now = now_ts();
        let iv = self.held.entry(wf).or_default();
        if let Some(last) = iv.last_mut() {
            last.1.get_or_insert(now);
        }
        iv.push((now, None));
        let inc = self.masters[m].incarnation;
        if let Some(x) = self.wfs.get_mut(&wf) {
            x.master = m;
            x.incarnation = inc;
            x.held = true;
            x.done = false;
        }
    }

    fn release(&mut self, wf: i64) {
        let now = now_ts();
        if let Some(last) = self.held.get_mut(&wf).and_then(|v| v.last_mut()) {
            last.1.get_or_insert(now);
        }
        if let Some(x) = self.wfs.get_mut(&wf) {
            x.held = false;
        }
    }

    fn up_masters(&self) -> Vec<usize> {
        (0..self.masters.len())
            .filter(|&i| self.masters[i].state == WState::Up)
            .collect()
    }

    async fn ds_dispatch(&mut self) {
        let target = self.opts.workers * self.opts.tasks_per_worker;
        let live = self.tasks.values().filter(|t| !t.over).count();
        if live >= target {
            return;
        }
        for _ in 0..3 {
            let Some(m) = self.pick(&self.up_masters()) else {
                return;
            };
            let quiet = self.quiet_workers(None);
            if quiet.is_empty() {
                return;
            }
            let spec = WorkflowSpec {
                host: Some(self.masters[m].host.clone()),
                start_time: Utc::now().naive_utc(),
                ..WorkflowSpec::default()
            };
            let Ok(wf) = self.db.insert_workflow(&spec).await else {
                self.errors += 1;
                return;
            };
            self.wfs.insert(
                wf,
                Wf {
                    master: m,
                    incarnation: self.masters[m].incarnation,
                    held: false,
                    tasks: Vec::new(),
                    done: false,
                },
            );
            self.hold(wf, m);
            let n = self.rng.gen_range(1..=3);
            for _ in 0..n {
                let Some(w) = self.pick(&quiet) else { break };
                if self.dispatch_task(wf, w).await.is_err() {
                    self.errors += 1;
                }
            }
        }
    }

    /// A live master ends its workflows whose tasks are all over.
    async fn ds_workflows(&mut self) {
        let open: Vec<i64> = self
            .wfs
            .iter()
            .filter(|(_, w)| w.held && !w.done && !w.tasks.is_empty())
            .map(|(id, _)| *id)
            .collect();
        if open.is_empty() {
            return;
        }
        let list = open
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let sql = format!(
            "SELECT CAST(process_instance_id AS SIGNED), CAST(state AS SIGNED) FROM t_ds_task_instance \
             WHERE flag = 1 AND process_instance_id IN ({list})"
        );
        let Ok(rows) = sqlx::query(&sql).fetch_all(&self.ds).await else {
            self.errors += 1;
            return;
        };
        let mut states: BTreeMap<i64, Vec<i32>> = BTreeMap::new();
        for r in rows {
            let (wf, st): (i64, i64) = (r.get(0), r.get(1));
            states.entry(wf).or_default().push(st as i32);
        }
        for wf in open {
            let Some(st) = states.get(&wf) else { continue };
            if !st.iter().all(|s| is_terminal(*s)) {
                continue;
            }
            let end = if st.iter().all(|s| *s == SUCCESS) {
                SUCCESS
            } else {
                6
            };
            let r = sqlx::query(
                "UPDATE t_ds_process_instance SET state = ?, end_time = ? WHERE id = ?",
            )
            .bind(end)
            .bind(Utc::now().naive_utc())
            .bind(wf)
            .execute(&self.ds)
            .await;
            if r.is_err() {
                self.errors += 1;
                continue;
            }
            if let Some(x) = self.wfs.get_mut(&wf) {
                x.done = true;
            }
            self.release(wf);
        }
    }

    /// DS takes the commands ds-reaper queued: the workflow goes to a live
    /// master, its failed or fault-tolerance tasks get a new attempt.
    async fn ds_commands(&mut self) {
        let Ok(rows) = sqlx::query(
            "SELECT CAST(id AS SIGNED), CAST(process_instance_id AS SIGNED) FROM t_ds_command",
        )
        .fetch_all(&self.ds)
        .await
        else {
            self.errors += 1;
            return;
        };
        for r in rows {
            let (id, wf): (i64, i64) = (r.get(0), r.get(1));
            if !self.pending_cmds.contains_key(&id) {
                let d = secs(1.0, 3.0, &mut self.rng);
                self.pending_cmds.insert(id, (wf, Instant::now() + d));
            }
        }
        let due: Vec<(i64, i64)> = self
            .pending_cmds
            .iter()
            .filter(|(_, (_, at))| *at <= Instant::now())
            .map(|(id, (wf, _))| (*id, *wf))
            .collect();
        for (id, wf) in due {
            let Some(m) = self.pick(&self.up_masters()) else {
                return;
            };
            if sqlx::query("DELETE FROM t_ds_command WHERE id = ?")
                .bind(id)
                .execute(&self.ds)
                .await
                .is_err()
            {
                self.errors += 1;
                return;
            }
            self.pending_cmds.remove(&id);
            self.consumed.entry(wf).or_default().push(now_ts());
            if !self.wfs.contains_key(&wf) {
                continue;
            }
            let r = sqlx::query(
                "UPDATE t_ds_process_instance SET state = ?, host = ?, end_time = NULL WHERE id = ?",
            )
            .bind(RUNNING)
            .bind(self.masters[m].host.clone())
            .bind(wf)
            .execute(&self.ds)
            .await;
            if r.is_err() {
                self.errors += 1;
            }
            self.hold(wf, m);
            let failed = sqlx::query(
                "SELECT CAST(id AS SIGNED) FROM t_ds_task_instance \
                 WHERE process_instance_id = ? AND flag = 1 AND state IN (6, 8, 9)",
            )
            .bind(wf)
            .fetch_all(&self.ds)
            .await;
            let Ok(failed) = failed else {
                self.errors += 1;
                continue;
            };
            for row in failed {
                let tid: i64 = row.get(0);
                if sqlx::query("UPDATE t_ds_task_instance SET flag = 0 WHERE id = ?")
                    .bind(tid)
                    .execute(&self.ds)
                    .await
                    .is_err()
                {
                    self.errors += 1;
                    continue;
                }
                if let Some(tr) = self.truth.get_mut(&tid) {
                    tr.superseded = Some(now_ts());
                }
                if let Some(t) = self.tasks.get_mut(&tid) {
                    t.over = true;
                }
                let quiet = self.quiet_workers(None);
                if let Some(w) = self.pick(&quiet) {
                    if self.dispatch_task(wf, w).await.is_err() {
                        self.errors += 1;
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------ the end

    /// Ends every fault still in progress and waits for the restarts.
    async fn settle(&mut self) {
        let timers = std::mem::take(&mut self.timers);
        for (_, t) in timers {
            match t {
                Timer::ReplicaCont { .. }
                | Timer::PartitionEnd { .. }
                | Timer::ZkStart { .. }
                | Timer::DbStart { .. }
                | Timer::ReplicaStart { .. }
                | Timer::AgentProxyUp { .. } => self.fire(t).await,
                _ => {}
            }
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.open.is_empty() && Instant::now() < deadline {
            self.check_processes();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for r in &self.replicas {
            if let Some(pid) = r.proc.lock().await.child.id() {
                signal(pid, "CONT");
            }
        }
    }

    async fn history(&mut self, end: Ts, conns: &ConnLog, leaders: &Leaders) -> Result<History> {
        let pool = MySqlPool::connect(self.db.url()).await?;
        let rows = sqlx::query(
            "SELECT CAST(ts AS DOUBLE), CAST(conn AS SIGNED), writer, tbl, CAST(row_id AS SIGNED), \
             CAST(old_state AS SIGNED), CAST(new_state AS SIGNED), CAST(old_flag AS SIGNED), \
             CAST(new_flag AS SIGNED), old_host, new_host, CAST(cmd_type AS SIGNED) \
             FROM soak_history ORDER BY seq",
        )
        .fetch_all(&pool)
        .await?;
        pool.close().await;
        let conns = conns.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut h = History {
            seed: self.opts.seed,
            start: self.start,
            end,
            timing: Timing {
                grace: GRACE,
                heartbeat_stale: STALE,
                process_gone: PROCESS_GONE,
                ghost_after: GHOST_AFTER,
                clock_skew: SKEW,
                margin: MARGIN,
                recovery: RECOVERY,
                agent_stale: AGENT_STALE,
            },
            tasks: self.truth.values().cloned().collect(),
            rows: Vec::new(),
            commands: Vec::new(),
            consumed: self.consumed.clone(),
            held: self.held.clone(),
            leaders: leaders.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            external_deaths: self.external.clone(),
            blocked: self.blocked.clone(),
            faults: self.faults.clone(),
        };
        for r in rows {
            let ts: f64 = r.get(0);
            let conn: i64 = r.get(1);
            let writer: Option<String> = r.get(2);
            let writer = if writer.as_deref() == Some("ds") {
                oracle::Writer::Ds
            } else {
                conns
                    .iter()
                    .rfind(|c| i64::from(c.conn_id) == conn && c.at <= ts)
                    .map(|c| oracle::Writer::Replica(c.label.clone()))
                    .unwrap_or(oracle::Writer::Unknown(conn))
            };
            let tbl: String = r.get(3);
            let id: i64 = r.get(4);
            if tbl == "command" {
                h.commands.push(oracle::CommandInsert {
                    ts,
                    writer,
                    wf: id,
                    command_type: r.get::<Option<i64>, _>(11).unwrap_or(0) as i32,
                });
                continue;
            }
            let int = |i: usize| r.get::<Option<i64>, _>(i).unwrap_or(-1) as i32;
            h.rows.push(oracle::RowChange {
                ts,
                writer,
                table: tbl,
                id,
                old_state: int(5),
                new_state: int(6),
                old_flag: int(7),
                new_flag: int(8),
                old_host: r.get(9),
                new_host: r.get(10),
            });
        }
        // The brake keeps the leader from acting while engaged.
        for rep in &self.replicas {
            for rec in read_audit(&rep.audit) {
                if rec["event"] != "brake" {
                    continue;
                }
                let Some(ts) = rec["ts"]
                    .as_str()
                    .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                else {
                    continue;
                };
                let t = ts.timestamp_micros() as f64 / 1e6;
                h.blocked.push(Window {
                    kind: "brake".into(),
                    from: t,
                    to: t + 20.0,
                    worker: None,
                });
            }
        }
        Ok(h)
    }

    async fn shut_down(&mut self) {
        self.guest_shut_down().await;
        self.strays.clear();
        for r in &self.replicas {
            let _ = r.proc.lock().await.stop().await;
        }
        for a in &self.agents {
            let _ = a.proc.lock().await.stop().await;
        }
        self.tasks.clear();
        for s in self.workers.iter().chain(self.masters.iter()) {
            s.sim.lock().await.crash().await;
        }
    }
}

/// The report, as `ds-sim soak` prints it.
pub fn report(o: &SoakOutcome) -> String {
    use std::fmt::Write;
    let h = &o.history;
    let v = &o.verdict;
    let mut s = String::new();
    let _ = writeln!(s, "soak seed {}: {:.0} s", h.seed, h.end - h.start);
    let total: u64 = h.faults.values().sum();
    let _ = writeln!(s, "faults injected: {total}");
    let kills = |k: &str| v.kills_by_fault.get(k).copied().unwrap_or(0);
    for (k, n) in &h.faults {
        let _ = writeln!(s, "  {k:<28} {n:>5}   ds-reaper kills {}", kills(k));
    }
    for f in Fault::ALL {
        if !h.faults.keys().any(|k| k.starts_with(f.name())) {
            let _ = writeln!(s, "  {:<28} 0 (never drawn with a target)", f.name());
        }
    }
    for (k, why) in &o.not_implemented {
        let _ = writeln!(s, "  note: {k}: {why}");
    }
    let _ = writeln!(s, "tasks created: {}", h.tasks.len());
    let reaped: u64 = v.reaped.values().sum();
    let _ = writeln!(s, "zombies reaped within their bound: {reaped}");
    for (k, n) in &v.reaped {
        let _ = writeln!(s, "  {k:<28} {n}");
    }
    let _ = writeln!(
        s,
        "races DS won (ds-reaper's write lost, correctly): {}",
        v.ds_won
    );
    let _ = writeln!(s, "ghost processes killed: {}", v.ghosts_killed);
    let all_kills: u64 = v.kills_by_fault.values().sum();
    let _ = writeln!(
        s,
        "ds-reaper kills: {all_kills} (of tasks no fault made, e.g. rows ds-reaper failed: {})",
        kills("-")
    );
    let _ = writeln!(
        s,
        "ds-reaper row writes: {}, commands: {}",
        v.daemon_row_writes, v.commands
    );
    let _ = writeln!(s, "dead at the end, bound not yet passed: {}", v.pending);
    let unexplained = v
        .misses
        .iter()
        .chain(&v.ghost_misses)
        .filter(|m| m.explanation.is_none())
        .count();
    let _ = writeln!(
        s,
        "misses: {} ({} unexplained), ghost misses: {}",
        v.misses.len(),
        unexplained,
        v.ghost_misses.len()
    );
    for m in v.misses.iter().chain(&v.ghost_misses) {
        let _ = writeln!(
            s,
            "  task {} {} dead +{:.1}s, bound +{:.1}s, reaped {}: {}",
            m.task,
            m.death.name(),
            m.dead_at - h.start,
            m.deadline - h.start,
            m.reaped_at
                .map_or("never".into(), |r| format!("+{:.1}s", r - h.start)),
            m.explanation.as_deref().unwrap_or("UNEXPLAINED")
        );
    }
    let _ = writeln!(
        s,
        "writes to a live process that the policy asks for (worker away >= grace, or no heartbeat in ZooKeeper >= heartbeat_stale_after; not wrong): {}",
        v.policy_writes.len()
    );
    for w in &v.policy_writes {
        let _ = writeln!(s, "  {}", w.what);
    }
    let _ = writeln!(s, "wrong writes: {}", v.wrong.len());
    let _ = writeln!(
        s,
        "wrong kills: {} (of the wrong writes above)",
        v.wrong_kills
    );
    for w in &v.wrong {
        let _ = writeln!(s, "  WRONG: {}", w.what);
        for l in &w.history {
            let _ = writeln!(s, "     {l}");
        }
    }
    for n in &o.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let by_kind = |name: &str| -> (u64, u64) {
        let fired = h
            .faults
            .iter()
            .filter(|(k, _)| k.starts_with(name))
            .map(|(_, n)| *n)
            .sum();
        let killed = v
            .kills_by_fault
            .iter()
            .filter(|(k, _)| k.starts_with(name))
            .map(|(_, n)| *n)
            .sum();
        (fired, killed)
    };
    let (sh, shk) = by_kind(Fault::SharedHost.name());
    let (mr, mrk) = by_kind(Fault::MissingRow.name());
    let _ = writeln!(
        s,
        "summary seed {}: faults {total} (shared_host {sh}, kills {shk}; missing_row {mr}, kills {mrk}), \
         ds-reaper kills {all_kills}, wrong writes {}, wrong kills {}",
        h.seed,
        (v.wrong.len() as u64).saturating_sub(v.wrong_kills),
        v.wrong_kills
    );
    s
}
