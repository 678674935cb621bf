//! `ds-sim demo`: a simulated DS 3.2.2 cluster against the real `ds-reaper`
//! binary, step by step, on the registry of the caller's choice (ZooKeeper,
//! etcd or DS's JDBC registry):
//!
//! 1. the product's headline case (ZooKeeper only: the agent publishes
//!    through ZooKeeper in this build) — a task's process dies on a live
//!    worker while its row stays RUNNING; `ds-reaper agent` sees the process
//!    gone and the daemon fails the task as `process_gone`;
//! 2. (ZooKeeper only, like 1) a worker restarted as DS 3.3.0+ restarts it
//!    leaves its task's processes running while DS runs the task again on
//!    another worker; the daemon finds the ghost (SPEC §15) and, with
//!    `ghost_process = "kill"`, a second agent allowed to kill ends it;
//! 3. a worker crashes together with the masters that owned its workflows;
//!    the daemon fails the orphaned tasks and queues DS's "recover from
//!    failed node" command;
//! 4. a master dies holding a workflow instance: the daemon hands it back
//!    with DS's own master-failover rows; a stalled workflow is reported.
//!
//! Every expectation is checked at the end; any deviation (a zombie not
//! reaped, a healthy row written, a workflow written that should not be, a
//! ghost not killed) makes the demo exit non-zero.

use super::{explain, heading, schema_origin, zk_connect};
use anyhow::{bail, Context, Result};
use chrono::{Duration as TimeDelta, Utc};
use ds_sim::db::{SchemaSource, SimDb, SimKind, TaskSpec, WorkflowSpec};
use ds_sim::etcd::{EtcdSimOptions, EtcdSimServer};
use ds_sim::jdbc::{JdbcSimOptions, SimJdbcServer, SimRegistryDb};
use ds_sim::procs::{ExecBase, TaskProcess};
use ds_sim::reaper::{binary_beside_me, free_port, poll, ReaperProcess, Spawn};
use ds_sim::zk::{delete_tree, ServerKind, SimServer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "demo_ghost.rs"]
mod ghost;

const RUNNING: i32 = 1;
const FAILURE: i32 = 6;
const SUCCESS: i32 = 7;

/// Command types of `t_ds_command` the demo expects.
const RECOVER_TOLERANCE_FAULT_PROCESS: &str = "2";
const START_FAILURE_TASK_PROCESS: &str = "4";

/// The daemon's timings in the demo (printed with the config).
const GRACE: &str = "5s";
const WORKFLOW_GRACE: &str = "8s";
const PROCESS_GONE_AFTER: &str = "3s";
const GHOST_AFTER: &str = "5s";
const STALL_AFTER: &str = "5m";
/// DS 3.2's JDBC registry: term refresh and expiry (DS: 2 s × 3 = 6 s).
const JDBC_TERM_REFRESH: Duration = Duration::from_secs(1);
const JDBC_EXPIRE: &str = "3s";

/// `--registry`: which of DS's registries the simulated cluster uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RegistryArg {
    Zookeeper,
    Etcd,
    Jdbc,
}

impl RegistryArg {
    fn name(self) -> &'static str {
        match self {
            RegistryArg::Zookeeper => "zookeeper",
            RegistryArg::Etcd => "etcd",
            RegistryArg::Jdbc => "jdbc",
        }
    }
}

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

// ---------------------------------------------------------------- registries

/// One simulated DS server on whichever registry the demo runs.
enum Server {
    Zk(SimServer),
    Etcd(Box<EtcdSimServer>),
    Jdbc(SimJdbcServer),
}

impl Server {
    fn host(&self) -> &str {
        match self {
            Server::Zk(s) => s.host(),
            Server::Etcd(s) => s.host(),
            Server::Jdbc(s) => s.host(),
        }
    }

    /// The process dies: ZooKeeper's session closes and etcd's leases are
    /// revoked (the nodes go at once); on the JDBC registry the server just
    /// stops refreshing its rows, which DS's rule then counts as dead.
    async fn crash(&mut self) {
        match self {
            Server::Zk(s) => s.crash().await,
            Server::Etcd(s) => s.crash().await,
            Server::Jdbc(s) => s.crash().await,
        }
    }
}

/// Where the simulated servers register and what the daemon is told.
struct Registry {
    kind: RegistryArg,
    /// ZooKeeper connect string and root (also the agent's, on ZooKeeper).
    zk: String,
    root: String,
    etcd: Vec<String>,
    /// The run's own etcd namespace (a raw key prefix).
    namespace: String,
    jdbc: Option<SimRegistryDb>,
    zone: reaper_core::Zone,
}

impl Registry {
    async fn new(kind: RegistryArg) -> Result<Registry> {
        let tag = format!("ds-demo-{}-{}", std::process::id(), Utc::now().timestamp());
        let etcd = ds_sim::etcd::endpoints_from(
            &std::env::var("ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2379".into()),
        );
        if kind == RegistryArg::Etcd && !ds_sim::etcd::healthy(&etcd, Duration::from_secs(5)).await
        {
            bail!(
                "etcd does not answer at {} (ETCD_ENDPOINTS); start it: bash deploy/dev/services.sh start",
                etcd.join(",")
            );
        }
        Ok(Registry {
            kind,
            zk: zk_connect(),
            root: format!("/{tag}/dolphinscheduler"),
            etcd,
            namespace: format!("{tag}/dolphinscheduler"),
            jdbc: None,
            zone: "UTC"
                .parse()
                .map_err(|e| anyhow::anyhow!("zone UTC: {e:?}"))?,
        })
    }

    fn describe(&self) -> String {
        match self.kind {
            RegistryArg::Zookeeper => format!("ZooKeeper {}, root {}", self.zk, self.root),
            RegistryArg::Etcd => format!(
                "etcd {}, namespace {} (DS's key paths behind it)",
                self.etcd.join(","),
                self.namespace
            ),
            RegistryArg::Jdbc => format!(
                "DS's JDBC registry in the demo database (t_ds_jdbc_registry_data; term refresh {} s, \
                 expiry {JDBC_EXPIRE})",
                JDBC_TERM_REFRESH.as_secs()
            ),
        }
    }

    async fn register(
        &self,
        line: reaper_core::DsLine,
        kind: ServerKind,
        host: &str,
        started: chrono::DateTime<Utc>,
    ) -> Result<Server> {
        Ok(match self.kind {
            RegistryArg::Zookeeper => Server::Zk(
                SimServer::register(&self.zk, &self.root, line, kind, host, &[], started).await?,
            ),
            RegistryArg::Etcd => Server::Etcd(Box::new(
                EtcdSimServer::register(
                    &self.etcd,
                    &self.namespace,
                    (line, kind),
                    host,
                    &[],
                    started,
                    EtcdSimOptions {
                        interval: Duration::from_secs(1),
                        lease_ttl: Duration::from_secs(10),
                        zone: self.zone,
                    },
                )
                .await?,
            )),
            RegistryArg::Jdbc => Server::Jdbc(
                SimJdbcServer::register(
                    self.jdbc.as_ref().context("the JDBC registry tables")?,
                    line,
                    kind,
                    host,
                    started,
                    JdbcSimOptions {
                        term_refresh: JDBC_TERM_REFRESH,
                        expire_window: Duration::from_secs(3),
                        data_interval: Duration::from_secs(2),
                        zone: self.zone,
                        ..JdbcSimOptions::default()
                    },
                )
                .await?,
            ),
        })
    }

    /// The daemon's registry sections.
    fn config(&self) -> String {
        match self.kind {
            RegistryArg::Zookeeper => format!(
                "[zookeeper]\nconnect = \"{}\"\nroot = \"{}\"\nsession_timeout = \"10s\"\n",
                self.zk, self.root
            ),
            RegistryArg::Etcd => {
                let eps = self
                    .etcd
                    .iter()
                    .map(|e| format!("{e:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!(
                    "[registry]\ntype = \"etcd\"\n[etcd]\nendpoints = [{eps}]\nnamespace = \"{}\"\nlease_ttl = \"5s\"\n",
                    self.namespace
                )
            }
            RegistryArg::Jdbc => format!(
                "[registry]\ntype = \"jdbc\"\n[jdbc_registry]\npoll_interval = \"1s\"\nexpire_after = \"{JDBC_EXPIRE}\"\n"
            ),
        }
    }

    /// How a crash shows in this registry.
    fn crash_words(&self) -> &'static str {
        match self.kind {
            RegistryArg::Zookeeper => {
                "Their ZooKeeper sessions close: the ephemeral nodes disappear at once."
            }
            RegistryArg::Etcd => "Their etcd leases are revoked: the keys disappear at once.",
            RegistryArg::Jdbc => {
                "They stop refreshing last_term: by DS's rule their rows are dead once the term is\n\
                 older than the expiry window (3 s here, DS: 6 s), and a live server deletes them."
            }
        }
    }

    /// Removes what the run left in the registry (the database goes with it for JDBC).
    async fn clean_up(&self) -> String {
        match self.kind {
            RegistryArg::Zookeeper => {
                let _ = delete_tree(&self.zk, &self.root).await;
                format!("ZooKeeper root {} deleted", self.root)
            }
            RegistryArg::Etcd => {
                match ds_sim::etcd::delete_prefix(&self.etcd, &self.namespace).await {
                    Ok(n) => format!("{n} etcd key(s) under {} deleted", self.namespace),
                    Err(e) => format!("deleting etcd keys under {} failed: {e:#}", self.namespace),
                }
            }
            RegistryArg::Jdbc => "the JDBC registry's rows go with the database".into(),
        }
    }
}

// ---------------------------------------------------------------- the run

struct DemoTask {
    id: i64,
    wf: &'static str,
    name: &'static str,
    ty: &'static str,
    host: &'static str,
    state: i32,
}

/// What the run set up, for the checks at the end.
struct Plan {
    tasks: Vec<DemoTask>,
    wfs: BTreeMap<&'static str, i64>,
    /// Tasks that must end FAILURE: the lost worker's, and the dead process's.
    expected_failed: Vec<i64>,
}

/// Everything the run started, stopped in the clean-up whatever happened.
#[derive(Default)]
struct Running {
    servers: Vec<Server>,
    reaper: Option<ReaperProcess>,
    agent: Option<ReaperProcess>,
    procs: Vec<TaskProcess>,
    exec: Option<ExecBase>,
    /// The ghost step's agent (allowed to kill) and its exec base.
    ghost_agent: Option<ReaperProcess>,
    ghost_exec: Option<ExecBase>,
}

pub async fn demo(
    reaper: Option<PathBuf>,
    hold: u64,
    schema: SchemaSource,
    registry: RegistryArg,
) -> Result<()> {
    let bin = binary_beside_me(reaper)?;
    let t0 = Instant::now();
    let title = format!(
        "ds-reaper demo: zombies in a DolphinScheduler 3.2 cluster (registry: {})",
        registry.name()
    );
    println!("{title}");
    println!("{}", "=".repeat(title.chars().count()));
    explain(concat!(
        "A simulated DS 3.2.2 cluster (real registry sessions, DS 3.2.2's tables in MariaDB)\n",
        "and the real ds-reaper binary:\n",
        "- a task's process dies while its worker lives and the row still says RUNNING\n",
        "  (the product's headline case: `ds-reaper agent` on the worker host sees it);\n",
        "- a worker restarted as DS 3.3 restarts it leaves its task running while DS runs the\n",
        "  task again elsewhere: ds-reaper finds the ghost process and has the agent kill it;\n",
        "- a worker crashes with the masters that owned its workflows: ds-reaper fails the\n",
        "  orphaned RUNNING tasks and hands the workflow to DS's 'recover from failed node';\n",
        "- a master dies holding a workflow instance: ds-reaper hands it back as DS's own\n",
        "  master failover would; a stalled workflow is reported, never written.",
    ));

    heading(1, "a fresh database with DS 3.2.2's tables");
    let mut reg = Registry::new(registry).await?;
    let db = SimDb::create_with(SimKind::MySql, "3.2.2", schema)
        .await
        .context("creating the demo database (is MariaDB up? bash deploy/dev/services.sh start)")?;
    explain(&format!(
        "database `{}` on MariaDB, {}",
        db.name(),
        schema_origin(&db)
    ));
    if registry == RegistryArg::Jdbc {
        match SimRegistryDb::attach(&db).await {
            Ok(r) => {
                explain(&format!(
                    "and DS 3.2's JDBC registry tables (t_ds_jdbc_registry_data, t_ds_jdbc_registry_lock), {}",
                    if db.source == SchemaSource::Described {
                        "from the same description"
                    } else {
                        "from $DS_SCHEMA_DIR/jdbc-registry/3.2.2"
                    }
                ));
                reg.jdbc = Some(r);
            }
            Err(e) => {
                let _ = db.drop().await;
                return Err(e.context("creating the JDBC registry tables"));
            }
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("ds-reaper-demo-")
        .tempdir()?;
    let mut run = Running::default();
    let r = demo_body(&db, &reg, dir.path(), &bin, &mut run, hold).await;

    heading(12, "clean up");
    if let Some(mut a) = run.ghost_agent.take() {
        match a.stop().await {
            Ok(code) => explain(&format!(
                "ds-reaper agent of {} stopped on SIGTERM, exit code {code:?}",
                ghost::W5
            )),
            Err(e) => explain(&format!("ds-reaper agent did not stop cleanly: {e:#}")),
        }
    }
    if let Some(mut a) = run.agent.take() {
        match a.stop().await {
            Ok(code) => explain(&format!(
                "ds-reaper agent stopped on SIGTERM, exit code {code:?}"
            )),
            Err(e) => explain(&format!("ds-reaper agent did not stop cleanly: {e:#}")),
        }
    }
    if let Some(mut rp) = run.reaper.take() {
        match rp.stop().await {
            Ok(code) => explain(&format!("ds-reaper stopped on SIGTERM, exit code {code:?}")),
            Err(e) => explain(&format!("ds-reaper did not stop cleanly: {e:#}")),
        }
    }
    let n = run.procs.len();
    for p in &mut run.procs {
        let _ = p.kill();
    }
    drop(run.ghost_exec.take());
    if let Some(exec) = run.exec.take() {
        explain(&format!(
            "{n} task process(es) ended, exec base {} removed",
            exec.path().display()
        ));
    }
    for s in &mut run.servers {
        s.crash().await;
    }
    explain(&format!(
        "simulated servers stopped, {}",
        reg.clean_up().await
    ));
    let name = db.name().to_string();
    db.drop().await?;
    explain(&format!(
        "database `{name}` dropped (the local services keep running)"
    ));
    match r {
        Ok(headline) => {
            println!();
            println!(
                "RESULT: OK — on {}: {}the lost worker's zombies failed, the lost master's workflow \
                 handed back, the stalled one reported, nothing else written ({:.0} s)",
                registry.name(),
                if headline {
                    "the dead process's task failed, the restarted worker's ghost killed, "
                } else {
                    ""
                },
                t0.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The steps; returns whether the headline step ran.
async fn demo_body(
    db: &SimDb,
    reg: &Registry,
    dir: &Path,
    bin: &Path,
    run: &mut Running,
    hold: u64,
) -> Result<bool> {
    let with_agent = reg.kind == RegistryArg::Zookeeper;
    let plan = set_up_cluster(db, reg, run, with_agent).await?;
    let (w1, w4) = (W1, W4);

    // ------------------------------------------------------------ step 3
    heading(
        3,
        "start ds-reaper (and, on ZooKeeper, ds-reaper agent on the worker host)",
    );
    let port = free_port()?;
    let token = "demo-token-not-secret";
    std::fs::write(dir.join("token"), format!("{token}\n"))?;
    let cfg = format!(
        r#"[dolphinscheduler]
version = "auto"
time_zone = "UTC"
{registry}[database]
url = "{url}"
[reconcile]
sweep_interval = "1s"
full_scan_interval = "30s"
grace_period = "{GRACE}"
startup_settle = "2s"
process_gone_after = "{PROCESS_GONE_AFTER}"
ghost_after = "{GHOST_AFTER}"
agent_stale_after = "10s"
workflow_grace_period = "{WORKFLOW_GRACE}"
workflow_stall_after = "{STALL_AFTER}"
[policy]
worker_lost = "fail"
process_gone = "fail"
workflow = "recover"
workflow_master_lost = "recover"
{ghost_policy}[http]
listen = "127.0.0.1:{port}"
token_file = "{token_file}"
[audit]
path = "{audit}"
[log]
format = "pretty"
level = "info"
"#,
        registry = reg.config(),
        // the ghost step runs where the agents do; the JDBC registry carries
        // no kill orders (`kill` is a config error there)
        ghost_policy = if with_agent {
            "ghost_process = \"kill\"\n"
        } else {
            ""
        },
        url = db.url(),
        token_file = dir.join("token").display(),
        audit = dir.join("audit.jsonl").display(),
    );
    let cfg_path = dir.join("config.toml");
    std::fs::write(&cfg_path, &cfg)?;
    for l in cfg.lines().filter(|l| {
        [
            "type",
            "grace_period",
            "startup_settle",
            "process_gone_after",
            "ghost_after",
            "ghost_process",
            "workflow_grace_period",
            "workflow_stall_after",
            "worker_lost",
            "process_gone ",
            "workflow ",
            "workflow_master_lost",
            "sweep_interval",
            "poll_interval",
            "expire_after",
        ]
        .iter()
        .any(|k| l.starts_with(k))
    }) {
        explain(&format!("  {l}"));
    }
    if with_agent {
        let exec = run.exec.as_ref().context("exec base")?;
        let agent_port = free_port()?;
        let agent_cfg = agent_toml(reg, w4, exec.path(), agent_port, "");
        let agent_cfg_path = dir.join("agent.toml");
        std::fs::write(&agent_cfg_path, &agent_cfg)?;
        let log = dir.join("ds-reaper-agent.log");
        run.agent = Some(spawn(bin, &agent_cfg_path, "agent", &log, agent_port)?);
        explain(&format!(
            "{} --config {} agent   (worker {w4}, exec base {}, a scan every second; log: {})",
            bin.display(),
            agent_cfg_path.display(),
            exec.path().display(),
            log.display()
        ));
    }
    let log = dir.join("ds-reaper.log");
    run.reaper = Some(spawn(bin, &cfg_path, "run", &log, port)?);
    explain(&format!(
        "{} --config {} run   (log: {})",
        bin.display(),
        cfg_path.display(),
        log.display()
    ));
    let status = ready(run.reaper.as_mut().context("reaper")?).await?;
    let rp = run.reaper.as_ref().context("reaper")?;
    explain(&format!(
        "ready: DS line {}, registry {}, leader {}, view valid, last sweep: {} candidates, {} zombies",
        status["ds_line"],
        status["registry_view"]["registry"],
        status["leader"],
        status["last_sweep"]["candidates"],
        status["last_sweep"]["zombies"]
    ));
    if status["registry_view"]["registry"] != reg.kind.name() {
        bail!(
            "ds-reaper reads the {} registry, the demo runs on {}",
            status["registry_view"]["registry"],
            reg.kind.name()
        );
    }
    let workers = rp.json("/api/v1/workers").await?;
    explain(&format!(
        "live workers: {}   live masters: {}",
        hosts_of(&workers["workers"]),
        hosts_of(&workers["masters"])
    ));
    explain(&format!("status page: {}", rp.url("/")));

    // ------------------------------------------------------------ step 4
    let headline = if with_agent {
        headline_step(db, run, &plan).await?;
        true
    } else {
        heading(
            4,
            "the headline case: a task's process dies on a live worker — skipped",
        );
        explain(&format!(
            "skipped on {}: `ds-reaper agent` publishes through ZooKeeper in this build.\n\
             Run `bash scripts/demo.sh` (ZooKeeper) to see it. Worker {w4}'s tasks have no\n\
             agent here, so they are never judged by their process (checked at the end).",
            reg.kind.name()
        ));
        false
    };
    // ------------------------------------------------------------ step 5
    let ghost = if with_agent {
        Some(ghost::ghost_step(5, db, reg, run, dir, bin).await?)
    } else {
        heading(
            5,
            "a worker restarted on DS 3.3 leaves its task running: a ghost — skipped",
        );
        explain(&format!(
            "skipped on {}: `ds-reaper agent` publishes through ZooKeeper in this build.",
            reg.kind.name()
        ));
        None
    };
    let rp = run.reaper.as_ref().context("reaper")?;

    // ------------------------------------------------------------ step 6
    heading(
        6,
        format!("worker {w1} crashes, and masters {M2} and {M3} with it").as_str(),
    );
    explain(&format!(
        "{}\n\
         DS 3.x would fail the worker's tasks over only from the owning master's memory —\n\
         and {M2}, which owns workflows A and B, is gone too: the 4 RUNNING tasks on {w1}\n\
         stay RUNNING forever. {M3} owned workflow F (step 10).",
        reg.crash_words()
    ));
    let crash_at = Instant::now();
    for s in run.servers.iter_mut() {
        if [w1, M2, M3].contains(&s.host()) {
            s.crash().await;
        }
    }
    let lost = poll(
        "ds-reaper sees the loss",
        Duration::from_secs(30),
        || async {
            let w = rp.json("/api/v1/workers").await?;
            let lost = w["lost"].as_array().cloned().unwrap_or_default();
            Ok((lost.len() >= 3).then_some(lost))
        },
    )
    .await
    .with_context(|| format!("ds-reaper log:\n{}", rp.log_tail(30)))?;
    for l in &lost {
        explain(&format!(
            "seen lost: {} {} at {}   (+{:.1} s)",
            l["kind"].as_str().unwrap_or("?"),
            l["host"].as_str().unwrap_or("?"),
            l["lost_at"].as_str().unwrap_or("?"),
            crash_at.elapsed().as_secs_f64()
        ));
    }
    explain(&format!(
        "grace_period is {GRACE}: a worker that comes back quickly is not a zombie-maker."
    ));

    // ------------------------------------------------------------ step 7
    heading(7, "zombies found (GET /api/v1/zombies)");
    let lost_worker: Vec<i64> = plan
        .tasks
        .iter()
        .filter(|t| t.host == w1 && t.state == RUNNING)
        .map(|t| t.id)
        .collect();
    // The list is the last sweep's, before its actions: the sweep that finds
    // them also fails them, so fall back to the audit trail if we blink.
    let zombies = poll("zombies reported", Duration::from_secs(60), || async {
        let z = rp.json("/api/v1/zombies").await?;
        let list: Vec<Value> = z["zombies"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|z| {
                z["task_id"]
                    .as_i64()
                    .is_some_and(|id| lost_worker.contains(&id))
            })
            .collect();
        if !list.is_empty() {
            return Ok(Some(list));
        }
        if all_failed(db, &lost_worker).await? {
            let det: Vec<Value> = audit(rp)
                .await?
                .into_iter()
                .filter(|r| {
                    r["event"] == "detected"
                        && r["task_id"]
                            .as_i64()
                            .is_some_and(|id| lost_worker.contains(&id))
                })
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

    // ------------------------------------------------------------ step 8
    heading(8, "the writes: task rows after, and the audit trail");
    poll(
        "every zombie task FAILURE",
        Duration::from_secs(60),
        || async { Ok(all_failed(db, &lost_worker).await?.then_some(())) },
    )
    .await
    .with_context(|| format!("ds-reaper log:\n{}", rp.log_tail(30)))?;
    explain(&format!(
        "every zombie is FAILURE {:.1} s after the crash",
        crash_at.elapsed().as_secs_f64()
    ));
    print_tasks(db, &plan.tasks).await?;
    explain("audit records (intent is fsynced before the write, the outcome after):");
    for r in audit(rp).await?.iter().filter(|r| {
        r["kind"] == "task"
            && r["task_id"]
                .as_i64()
                .is_some_and(|id| lost_worker.contains(&id))
    }) {
        print_audit(r);
    }

    // ------------------------------------------------------------ step 9
    heading(9, "workflow follow-up: recovery commands (t_ds_command)");
    explain(
        "workflow = \"recover\": the workflow is failed and a START_FAILURE_TASK_PROCESS (4)\n\
         command is queued, as DS's \"recover from failed node\" does — only when the owning\n\
         master is gone and no other task of that workflow is still running.",
    );
    for name in ["A", "B", "C", "D", "E"] {
        let id = plan.wfs[name];
        let st = wf_state(db, id).await?;
        explain(&format!(
            "workflow {name} (id {id}, owner {}): state {} ({})",
            db.workflow_col(id, "host").await?.unwrap_or_default(),
            st,
            state_name(st)
        ));
    }
    // The command is inserted right after the task write in the same action;
    // give it a moment rather than racing it.
    let wf_a = plan.wfs["A"];
    let cmds = poll(
        "recovery command for workflow A",
        Duration::from_secs(30),
        || async {
            let c = db.commands().await?;
            Ok((!commands_for(&c, wf_a).is_empty()).then_some(c))
        },
    )
    .await;
    let cmds = match cmds {
        Ok(c) => c,
        Err(e) => {
            print_commands(&db.commands().await?);
            bail!("{e:#}\nds-reaper log:\n{}", rp.log_tail(30));
        }
    };
    print_commands(&commands_for(&cmds, wf_a));
    explain(&format!(
        "B: task failed, but another task of B still runs on {W2}: no workflow write (DS would\n\
         only fail it once every task is terminal).\n\
         C: its owning master {M1} is alive and holds C in memory: `recover` is downgraded to\n\
         `none` (see the note above), the master's own failover handles the workflow."
    ));

    // ------------------------------------------------------------ step 10
    let seen = workflow_step(db, rp, &plan, crash_at).await?;

    // ------------------------------------------------------------ step 11
    heading(11, "metrics (GET /metrics) and the status page");
    let (_, metrics) = rp.get("/metrics").await?;
    for l in metrics.lines().filter(|l| {
        !l.starts_with('#')
            && !l.contains("result=\"error\"")
            && !l.contains("result=\"lost_race\"")
            && [
                "ds_reaper_zombies",
                "ds_reaper_zombies_detected_total",
                "ds_reaper_actions_total",
                "ds_reaper_workflow_zombies",
                "ds_reaper_workflow_actions_total",
                "ds_reaper_agents",
                "ds_reaper_ghosts",
                "ds_reaper_ghost_actions_total",
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

    let mut problems = final_checks(db, rp, &plan, &seen, headline).await?;
    if let Some(g) = &ghost {
        problems.extend(ghost::ghost_checks(db, &audit(rp).await?, g).await?);
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
            rp.log_tail(30)
        );
    }
    Ok(headline)
}

const M1: &str = "10.0.0.1:5678";
const M2: &str = "10.0.0.2:5678";
const M3: &str = "10.0.0.3:5678";
const W1: &str = "10.0.1.11:1234";
const W2: &str = "10.0.1.12:1234";
const W3: &str = "10.0.1.13:1234";
const W4: &str = "10.0.1.14:1234";

/// The task whose process the headline step kills, the one whose process
/// keeps running, and the SQL task (no process of its own), all on W4.
const DIES: &str = "ingest_clicks";
const LIVES: &str = "ingest_views";
const SQL_TASK: &str = "count_rows";

/// Step 2: servers, workflows, tasks, and (with the agent) real task processes.
async fn set_up_cluster(
    db: &SimDb,
    reg: &Registry,
    run: &mut Running,
    with_agent: bool,
) -> Result<Plan> {
    heading(
        2,
        "a simulated cluster: 3 masters, 4 workers, 8 workflows, 18 tasks",
    );
    let line = db.line;
    let started = Utc::now() - TimeDelta::hours(2);
    for (kind, host) in [
        (ServerKind::Master, M1),
        (ServerKind::Master, M2),
        (ServerKind::Master, M3),
        (ServerKind::Worker, W1),
        (ServerKind::Worker, W2),
        (ServerKind::Worker, W3),
        (ServerKind::Worker, W4),
    ] {
        run.servers
            .push(reg.register(line, kind, host, started).await?);
    }
    explain(&format!(
        "{}\nmasters {M1}, {M2}, {M3}; workers {W1}, {W2}, {W3}, {W4} (heartbeat every second)",
        reg.describe()
    ));

    let now = Utc::now();
    let submit = (now - TimeDelta::minutes(10)).naive_utc();
    let mut wfs: BTreeMap<&'static str, i64> = BTreeMap::new();
    // A and B owned by M2 (dies with W1), F by M3 (dies too), the rest by M1 (stays up).
    // S: M1 holds it, but nothing of it has run for 45 minutes.
    for (name, owner, start) in [
        ("A", M2, submit),
        ("B", M2, submit),
        ("C", M1, submit),
        ("D", M1, submit),
        ("E", M1, submit),
        ("F", M3, submit),
        ("G", M1, submit),
        ("S", M1, (now - TimeDelta::minutes(50)).naive_utc()),
    ] {
        let id = db
            .insert_workflow(&WorkflowSpec {
                host: Some(owner.into()),
                start_time: start,
                ..WorkflowSpec::default()
            })
            .await?;
        wfs.insert(name, id);
    }
    let ended = |mins| Some((now - TimeDelta::minutes(mins)).naive_utc());
    #[allow(clippy::type_complexity)]
    let plan: &[(&str, &str, &str, &str, i32, Option<chrono::NaiveDateTime>)] = &[
        ("A", "extract_orders", "SHELL", W1, RUNNING, None),
        ("A", "extract_customers", "SHELL", W1, RUNNING, None),
        ("A", "check_source", "SHELL", W2, SUCCESS, ended(8)),
        ("B", "load_dwd_orders", "SHELL", W1, RUNNING, None),
        ("B", "load_dwd_items", "SHELL", W2, RUNNING, None),
        ("C", "train_model", "PYTHON", W1, RUNNING, None),
        ("C", "export_features", "SHELL", W3, RUNNING, None),
        ("D", "spark_daily", "SPARK", W2, RUNNING, None),
        ("D", "hive_partition", "SHELL", W2, RUNNING, None),
        ("D", "report_mail", "SHELL", W3, RUNNING, None),
        ("E", "sync_mysql", "DATAX", W2, RUNNING, None),
        ("E", "sync_pg", "DATAX", W3, RUNNING, None),
        ("E", "sync_es", "DATAX", W3, RUNNING, None),
        ("F", "publish_report", "SHELL", W2, SUCCESS, ended(1)),
        ("G", DIES, "SHELL", W4, RUNNING, None),
        ("G", LIVES, "SHELL", W4, RUNNING, None),
        ("G", SQL_TASK, "SQL", W4, RUNNING, None),
        ("S", "vacuum_tables", "SHELL", W3, SUCCESS, ended(45)),
    ];
    let mut tasks = Vec::new();
    for &(wf, name, ty, host, state, end) in plan {
        let mut t = TaskSpec::new(wfs[wf], state, Some(host));
        t.name = name.into();
        t.task_type = ty.into();
        t.submit_time = Some(submit);
        t.start_time = Some(submit);
        if wf == "S" {
            t.submit_time = ended(48);
            t.start_time = ended(48);
        }
        t.end_time = end;
        let id = db.insert_task(&t).await?;
        tasks.push(DemoTask {
            id,
            wf,
            name,
            ty,
            host,
            state,
        });
    }
    explain(&format!(
        "workflow instances: A={} B={} (owned by master {M2}), F={} (owned by {M3}),\n\
         C={} D={} E={} G={} S={} (owned by {M1}; S's last task ended 45 min ago)",
        wfs["A"], wfs["B"], wfs["F"], wfs["C"], wfs["D"], wfs["E"], wfs["G"], wfs["S"]
    ));
    print_tasks(db, &tasks).await?;
    let mut expected_failed: Vec<i64> = tasks
        .iter()
        .filter(|t| t.host == W1 && t.state == RUNNING)
        .map(|t| t.id)
        .collect();
    if with_agent {
        let exec = ExecBase::new()?;
        for t in tasks.iter().filter(|t| t.name == DIES || t.name == LIVES) {
            let p = exec
                .start(line, wfs[t.wf], t.id)
                .with_context(|| format!("starting task {}'s process", t.id))?;
            explain(&format!(
                "task {} ({}) runs as pid {}: `sleep` in its execute path {}",
                t.id,
                t.name,
                p.pid(),
                p.dir().display()
            ));
            run.procs.push(p);
        }
        explain(&format!(
            "task {} ({SQL_TASK}, SQL) has no process of its own: DS runs it inside the worker JVM",
            task_id(&tasks, SQL_TASK)?
        ));
        run.exec = Some(exec);
        expected_failed.push(task_id(&tasks, DIES)?);
    }
    Ok(Plan {
        tasks,
        wfs,
        expected_failed,
    })
}

fn task_id(tasks: &[DemoTask], name: &str) -> Result<i64> {
    tasks
        .iter()
        .find(|t| t.name == name)
        .map(|t| t.id)
        .with_context(|| format!("no task {name}"))
}

/// Step 4: the headline case, on ZooKeeper with the agent.
async fn headline_step(db: &SimDb, run: &mut Running, plan: &Plan) -> Result<()> {
    heading(
        4,
        "the headline case: a task's process dies, its worker lives, the row says RUNNING",
    );
    explain(
        "The DB update of the final state was lost (DS issues #2836, #3616, #5576, #16015):\n\
         the UI shows RUNNING forever; the worker is alive, its heartbeat fresh — nothing in\n\
         the registry says anything is wrong. Only the worker host can see that the process\n\
         is gone: `ds-reaper agent` scans /proc and publishes which task processes run.",
    );
    let (dies, lives, sql) = (
        task_id(&plan.tasks, DIES)?,
        task_id(&plan.tasks, LIVES)?,
        task_id(&plan.tasks, SQL_TASK)?,
    );
    if let Some(a) = run.agent.as_mut() {
        if let Some(st) = a.child.try_wait()? {
            bail!(
                "ds-reaper agent exited ({st}); its log:\n{}",
                a.log_tail(30)
            );
        }
    }
    let rp = run.reaper.as_ref().context("reaper")?;
    let agent = run.agent.as_ref().context("agent")?;
    let ready = poll(
        "the agent ready and fresh in the daemon's view, listing both task processes",
        Duration::from_secs(30),
        || async {
            let Ok((200, _)) = agent.get("/readyz").await else {
                return Ok(None);
            };
            let w = rp.json("/api/v1/workers").await?;
            Ok(w["workers"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| {
                    x["host"] == W4 && x["agent"]["fresh"] == true && x["agent"]["tasks"] == 2
                })
                .cloned())
        },
    )
    .await
    .with_context(|| {
        format!(
            "agent log:\n{}\nds-reaper log:\n{}",
            agent.log_tail(30),
            rp.log_tail(30)
        )
    })?;
    explain(&format!(
        "GET /api/v1/workers: {W4} agent fresh, last report {}, {} task process(es), {} unreadable",
        ready["agent"]["last_report_at"].as_str().unwrap_or("?"),
        ready["agent"]["tasks"],
        ready["agent"]["unreadable"]
    ));
    let p = run
        .procs
        .iter_mut()
        .find(|p| p.dir().ends_with(dies.to_string()))
        .context("the process of the task that dies")?;
    let pid = p.pid();
    let killed_at = Instant::now();
    p.kill()?;
    explain(&format!(
        "kill -9 {pid} (task {dies}, {DIES}): the process is gone; worker {W4} stays registered\n\
         and heartbeating, and the row stays RUNNING_EXECUTION — nothing else tells DS.\n\
         process_gone_after is {PROCESS_GONE_AFTER}: the task must be missing from the agent's reports that long."
    ));
    let rp = run.reaper.as_ref().context("reaper")?;
    poll(
        "the dead process's task FAILURE",
        Duration::from_secs(60),
        || async { Ok((db.task_state(dies).await?.state == FAILURE).then_some(())) },
    )
    .await
    .with_context(|| format!("ds-reaper log:\n{}", rp.log_tail(30)))?;
    explain(&format!(
        "task {dies} is FAILURE {:.1} s after its process died",
        killed_at.elapsed().as_secs_f64()
    ));
    let records = audit(rp).await?;
    let mine: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "task" && r["task_id"] == dies)
        .collect();
    for r in &mine {
        print_audit(r);
    }
    if let Some(done) = mine.iter().find(|r| r["event"] == "done") {
        explain(&format!(
            "evidence: process last seen {}, missing since {} (agent reports, stamped on the daemon's clock)",
            done["evidence"]["process_seen_at"].as_str().unwrap_or("-"),
            done["evidence"]["process_missing_since"]
                .as_str()
                .unwrap_or("-")
        ));
    }
    let g: Vec<DemoTask> = plan
        .tasks
        .iter()
        .filter(|t| t.wf == "G")
        .map(|t| DemoTask { ..*t })
        .collect();
    print_tasks(db, &g).await?;
    explain(&format!(
        "task {lives} ({LIVES}): its process still runs — untouched. Task {sql} ({SQL_TASK}, SQL):\n\
         no process of its own, never judged by one. Workflow G: its master {M1} is alive and\n\
         holds it, so no workflow write (the master sees the failed task itself)."
    ));
    Ok(())
}

/// What step 10 saw in `/api/v1/workflows`.
struct SeenWorkflows {
    stalled: Option<Value>,
    downgraded: Option<Value>,
}

/// Step 10: the lost master's workflow handed back, a stalled one reported.
async fn workflow_step(
    db: &SimDb,
    rp: &ReaperProcess,
    plan: &Plan,
    crash_at: Instant,
) -> Result<SeenWorkflows> {
    heading(10, "workflows that cannot progress (GET /api/v1/workflows)");
    let (f, b, s) = (plan.wfs["F"], plan.wfs["B"], plan.wfs["S"]);
    explain(&format!(
        "F (id {f}): its master {M3} died in step 6; its last task had finished, the master was\n\
         about to go on. DS 2.0–3.2 fail a dead master's workflows over on a 10-minute timer;\n\
         ds-reaper waits workflow_grace_period ({WORKFLOW_GRACE} here, default 15 m, so DS goes first), then\n\
         `workflow_master_lost = \"recover\"` writes exactly DS's own master-failover rows:\n\
         host = 'NULL' and a RECOVER_TOLERANCE_FAULT_PROCESS (2) command, in one transaction.\n\
         S (id {s}): its master {M1} is alive, no task of it runs, its last progress is 45 min\n\
         old (> workflow_stall_after {STALL_AFTER}): `workflow_stalled`, report only — its master holds\n\
         it in memory and would not see a database write; the alert is the product."
    ));
    let state = poll(
        "workflow F handed back, B and S listed",
        Duration::from_secs(60),
        || async {
            let host = db.workflow_col(f, "host").await?;
            let cmds = db.commands().await?;
            let doc = rp.json("/api/v1/workflows").await?;
            let list = doc["workflows"].as_array().cloned().unwrap_or_default();
            let by_id = |id: i64| {
                list.iter()
                    .find(|w| w["workflow_instance_id"] == id)
                    .cloned()
            };
            let done = host.as_deref() == Some("NULL")
                && !commands_for(&cmds, f).is_empty()
                && by_id(b).is_some()
                && by_id(s).is_some();
            Ok(done.then_some((list.clone(), by_id(b), by_id(s))))
        },
    )
    .await;
    let (list, downgraded, stalled) = match state {
        Ok(x) => x,
        Err(e) => {
            let doc = rp.json("/api/v1/workflows").await.unwrap_or_default();
            bail!(
                "{e:#}\nGET /api/v1/workflows: {doc:#}\nds-reaper log:\n{}",
                rp.log_tail(30)
            );
        }
    };
    explain(&format!(
        "F handed back {:.1} s after its master died",
        crash_at.elapsed().as_secs_f64()
    ));
    explain("GET /api/v1/workflows (the last sweep's findings):");
    for w in &list {
        let ev = &w["evidence"];
        let detail = match w["reason"].as_str() {
            Some("workflow_stalled") => format!(
                "last progress {}",
                ev["last_progress_at"].as_str().unwrap_or("-")
            ),
            _ => format!("master absent {}s", ev["absent_for_seconds"]),
        };
        explain(&format!(
            "  workflow {:>3} host {:<14} {:<21} {:<24} → action {}{}",
            w["workflow_instance_id"],
            w["host"].as_str().unwrap_or("-"),
            w["reason"].as_str().unwrap_or("?"),
            detail,
            w["action"].as_str().unwrap_or("?"),
            w["note"]
                .as_str()
                .map(|n| format!("\n        note: {n}"))
                .unwrap_or_default()
        ));
    }
    explain(&format!(
        "B (id {b}): its master {M2} is lost too, but its task load_dwd_items still runs on the\n\
         live worker {W2}: `recover` is downgraded to `report` — DS's failover would also reach\n\
         that task through its RPC, ds-reaper does not."
    ));
    explain("audit records of the workflow write:");
    for r in audit(rp)
        .await?
        .iter()
        .filter(|r| r["kind"] == "workflow" && r["workflow_instance_id"] == f)
    {
        print_audit(r);
    }
    for name in ["B", "F", "S"] {
        let id = plan.wfs[name];
        let st = wf_state(db, id).await?;
        explain(&format!(
            "workflow {name} (id {id}): host {}, state {} ({})",
            db.workflow_col(id, "host").await?.unwrap_or_default(),
            st,
            state_name(st)
        ));
    }
    print_commands(&commands_for(&db.commands().await?, f));
    Ok(SeenWorkflows {
        stalled,
        downgraded,
    })
}

/// What must hold at the end; one line per deviation.
async fn final_checks(
    db: &SimDb,
    rp: &ReaperProcess,
    plan: &Plan,
    seen: &SeenWorkflows,
    headline: bool,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    // tasks: the expected ones failed, every other row untouched
    for t in &plan.tasks {
        let now = db.task_state(t.id).await?.state;
        let want = if plan.expected_failed.contains(&t.id) {
            FAILURE
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
    // workflows: A failed (task follow-up), F handed back, the rest untouched
    for (name, id) in &plan.wfs {
        let host = db.workflow_col(*id, "host").await?.unwrap_or_default();
        let st = wf_state(db, *id).await?;
        let (want_host, want_state) = match *name {
            "A" => (M2, FAILURE),
            "B" => (M2, RUNNING),
            "F" => ("NULL", RUNNING),
            _ => (M1, RUNNING),
        };
        if host != want_host || st != want_state {
            problems.push(format!(
                "workflow {name} (id {id}) has host {host} state {st} ({}), expected host {want_host} state {}",
                state_name(st),
                state_name(want_state)
            ));
        }
    }
    // commands: one START_FAILURE_TASK_PROCESS for A, one
    // RECOVER_TOLERANCE_FAULT_PROCESS for F, nothing else
    let cmds = db.commands().await?;
    for (name, id) in &plan.wfs {
        let types: Vec<String> = commands_for(&cmds, *id)
            .iter()
            .map(|c| c.get("command_type").cloned().flatten().unwrap_or_default())
            .collect();
        let want: Vec<&str> = match *name {
            "A" => vec![START_FAILURE_TASK_PROCESS],
            "F" => vec![RECOVER_TOLERANCE_FAULT_PROCESS],
            _ => vec![],
        };
        if types != want {
            problems.push(format!(
                "workflow {name} (id {id}): command types {types:?} in t_ds_command, expected {want:?}"
            ));
        }
    }
    if cmds.len() != 2 {
        problems.push(format!("{} rows in t_ds_command, expected 2", cmds.len()));
    }
    // the audit trail: writes only where expected, each once
    let records = audit(rp).await?;
    let mut task_writes: BTreeMap<i64, usize> = BTreeMap::new();
    for r in records.iter().filter(|r| r["event"] == "done") {
        match r["kind"].as_str() {
            Some("task") => {
                let id = r["task_id"].as_i64().unwrap_or(-1);
                *task_writes.entry(id).or_default() += 1;
                let want = if plan.tasks.iter().any(|t| t.id == id && t.host == W1) {
                    "worker_lost"
                } else {
                    "process_gone"
                };
                if r["reason"] != want {
                    problems.push(format!(
                        "task {id} written for {}, expected {want}",
                        r["reason"]
                    ));
                }
            }
            Some("workflow") if r["workflow_instance_id"] != plan.wfs["F"] => {
                problems.push(format!(
                    "workflow {} written ({}), only F was to be",
                    r["workflow_instance_id"], r["reason"]
                ));
            }
            _ => {}
        }
    }
    let mut expected = plan.expected_failed.clone();
    expected.sort_unstable();
    let written: Vec<i64> = task_writes.keys().copied().collect();
    if written != expected || task_writes.values().any(|n| *n != 1) {
        problems.push(format!(
            "task writes in the audit trail {task_writes:?}, expected one each for {expected:?}"
        ));
    }
    if headline
        && !records
            .iter()
            .any(|r| r["event"] == "done" && r["reason"] == "process_gone")
    {
        problems.push("no process_gone write".into());
    }
    // what step 10 saw
    match &seen.stalled {
        Some(s) if s["reason"] == "workflow_stalled" && s["action"] == "report" => {}
        other => problems.push(format!(
            "workflow S not reported as workflow_stalled/report: {other:?}"
        )),
    }
    match &seen.downgraded {
        Some(b) if b["reason"] == "workflow_master_lost" && b["action"] == "report" => {}
        other => problems.push(format!(
            "workflow B not reported as workflow_master_lost downgraded to report: {other:?}"
        )),
    }
    let m = rp.json("/api/v1/status").await?;
    if m["brake"]["engaged"] == true {
        problems.push("the brake is engaged".into());
    }
    Ok(problems)
}

// ---------------------------------------------------------------- helpers

/// An agent's configuration for `worker` on the demo's registry (a scan every
/// second); `extra` goes into its `[agent]` table.
fn agent_toml(reg: &Registry, worker: &str, exec: &Path, port: u16, extra: &str) -> String {
    format!(
        r#"{head}[agent]
worker = "{worker}"
exec_base = "{exec}"
scan_interval = "1s"
listen = "127.0.0.1:{port}"
{extra}
# The simulated heartbeats' startupTime lies before the java stand-in whose
# pid they carry was started (a real worker's JVM starts before it): the
# agent's start-time check of its JVM is widened past that (simulation only).
[reconcile]
clock_skew_tolerance = "10000days"
[log]
format = "pretty"
level = "info"
"#,
        head = ds_sim::reaper::zk_header(&reg.zk, &reg.root, "10s"),
        exec = exec.display(),
    )
}

/// Waits until the daemon is ready (a valid registry view, one sweep done);
/// fails at once, with its log, if it exits.
async fn ready(rp: &mut ReaperProcess) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = rp.child.try_wait()? {
            bail!(
                "ds-reaper exited ({st}) before it was ready; its log:\n{}",
                rp.log_tail(30)
            );
        }
        if let Ok((200, _)) = rp.get("/readyz").await {
            let s = rp.json("/api/v1/status").await?;
            if s["last_sweep"]["result"] == "ok" {
                return Ok(s);
            }
        }
        if Instant::now() > deadline {
            bail!(
                "ds-reaper not ready (valid registry view, one sweep done) within 60 s; its log:\n{}",
                rp.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// `ds-reaper --config <cfg> <cmd>` in the background, its output in `log`.
fn spawn(bin: &Path, cfg: &Path, cmd: &str, log: &Path, port: u16) -> Result<ReaperProcess> {
    ReaperProcess::spawn(Spawn {
        bin,
        config: cfg,
        command: cmd,
        log,
        port,
        env: &[],
        patience: Duration::from_secs(60),
    })
}

async fn audit(rp: &ReaperProcess) -> Result<Vec<Value>> {
    let a = rp.json("/api/v1/audit?limit=1000").await?;
    Ok(a["records"].as_array().cloned().unwrap_or_default())
}

fn print_audit(r: &Value) {
    let subject = match r["kind"].as_str() {
        Some("workflow") => format!("workflow {}", r["workflow_instance_id"]),
        _ => format!("task {:>3}", r["task_id"]),
    };
    let to = match (r["to_state"].as_str(), r["action"].as_str()) {
        (Some(s), _) => s.to_string(),
        (None, Some(a)) if r["event"] != "detected" => a.to_string(),
        _ => "-".into(),
    };
    explain(&format!(
        "  {} {:<9} {subject} {} → {to} ({}{}){}",
        r["ts"]
            .as_str()
            .map(|s| &s[11..s.len().min(23)])
            .unwrap_or("?"),
        r["event"].as_str().unwrap_or("?"),
        r["from_state"].as_str().unwrap_or("-"),
        r["reason"].as_str().unwrap_or("-"),
        r["workflow"]
            .as_str()
            .map(|w| format!("; workflow {w}"))
            .unwrap_or_default(),
        r["detail"]
            .as_str()
            .map(|d| format!("\n        {d}"))
            .unwrap_or_default()
    ));
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

async fn wf_state(db: &SimDb, id: i64) -> Result<i32> {
    Ok(db
        .workflow_col(id, "state")
        .await?
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1))
}

async fn all_failed(db: &SimDb, ids: &[i64]) -> Result<bool> {
    for id in ids {
        if db.task_state(*id).await?.state != FAILURE {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The commands for workflow instance `id` (3.2: `process_instance_id`).
fn commands_for(cmds: &[ds_sim::db::CommandView], id: i64) -> Vec<ds_sim::db::CommandView> {
    let id = id.to_string();
    cmds.iter()
        .filter(|r| r.get("process_instance_id").cloned().flatten().as_deref() == Some(&id))
        .cloned()
        .collect()
}

async fn print_tasks(db: &SimDb, tasks: &[DemoTask]) -> Result<()> {
    println!(
        "   {:>4}  {:<3} {:<18} {:<7} {:<15} {:<18} end_time",
        "id", "wf", "task", "type", "host", "state"
    );
    for t in tasks {
        let s = db.task_state(t.id).await?;
        let changed = if s.state != t.state {
            "  ← changed"
        } else {
            ""
        };
        println!(
            "   {:>4}  {:<3} {:<18} {:<7} {:<15} {:<18} {}{changed}",
            t.id,
            t.wf,
            t.name,
            t.ty,
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
