//! Harness for the end-to-end tests: a simulated DS cluster (real ZooKeeper
//! sessions, a real DS schema in a real database) and the `ds-reaper` binary
//! started as a process with a config file.

use anyhow::{bail, Context, Result};
use ds_sim::db::{SimDb, SimKind};
use ds_sim::reaper::{read_audit, ReaperProcess, Spawn};
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

pub use ds_sim;

pub mod kills;
/// The helper set every crate's tests share: a missing service fails under
/// `CI=true` and is `SKIPPED: …` elsewhere; named "nothing happens" holds.
pub use reaper_test_support::{hold, private_etcd_available, shared_etcd, skip};

/// How long a test waits for a condition before failing (generous: no timing assertions).
pub const WAIT: Duration = Duration::from_secs(60);

pub fn zk_connect() -> String {
    std::env::var("DS_TEST_ZK").unwrap_or_else(|_| "127.0.0.1:2181".into())
}

/// Fails in CI, skips (returning false) elsewhere, when a service is missing.
pub async fn services_up() -> bool {
    let zk = zk_connect();
    let port = zk
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(2181);
    let zk_ok = ds_sim::zkserver::ruok(port).await;
    let my_ok = tokio::net::TcpStream::connect("127.0.0.1:3306")
        .await
        .is_ok();
    let pg_ok = tokio::net::TcpStream::connect("127.0.0.1:5432")
        .await
        .is_ok();
    if zk_ok && my_ok && pg_ok {
        return true;
    }
    skip(&format!(
        "services missing: zookeeper={zk_ok} mariadb={my_ok} postgres={pg_ok}; run deploy/dev/services.sh start"
    ));
    false
}

/// A ZooKeeper root of the test's own: `/e2e-<unique>/dolphinscheduler`.
pub fn unique_root() -> String {
    reaper_test_support::unique_root("e2e")
}

/// The `ds-reaper` binary: `DS_REAPER_BIN`, or the workspace's debug build
/// (built on first use when missing).
pub fn binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("DS_REAPER_BIN") {
        return Ok(PathBuf::from(p));
    }
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            let bin = target.join("debug").join("ds-reaper");
            let status = std::process::Command::new(env!("CARGO"))
                .args(["build", "-q", "-p", "reaper", "--bin", "ds-reaper"])
                .current_dir(&root)
                .status()
                .map_err(|e| format!("cargo build: {e}"))?;
            if !status.success() || !bin.exists() {
                return Err(format!(
                    "building ds-reaper failed ({status}); expected {}",
                    bin.display()
                ));
            }
            Ok(bin)
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

pub fn free_port() -> u16 {
    ds_sim::reaper::free_port().unwrap_or(19477)
}

/// A running `ds-reaper run` process with its own directory (config, log,
/// audit trail); its HTTP and metric helpers are ds-sim's [`ReaperProcess`].
pub struct Daemon {
    process: ReaperProcess,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl Deref for Daemon {
    type Target = ReaperProcess;
    fn deref(&self) -> &ReaperProcess {
        &self.process
    }
}

impl DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut ReaperProcess {
        &mut self.process
    }
}

/// The config of a test daemon: short timings, its own root, audit and port.
pub fn config_toml(db_url: &str, root: &str, port: u16, audit: &str, extra: &str) -> String {
    format!(
        r#"
{head}[database]
url = "{db_url}"
[reconcile]
sweep_interval = "1s"
full_scan_interval = "30s"
grace_period = "2s"
startup_settle = "1s"
heartbeat_stale_after = "1h"
no_host_after = "1h"
[http]
listen = "127.0.0.1:{port}"
[audit]
path = "{audit}"
[log]
format = "json"
level = "info"
{extra}
"#,
        head = ds_sim::reaper::zk_header(&zk_connect(), root, "10s"),
    )
}

impl Daemon {
    /// Starts `ds-reaper run`; `extra` is appended to the generated config
    /// (later keys of a section must go in their own `[section]` table, so
    /// pass whole sections the base config does not have, e.g. `[policy]`).
    pub async fn start(db_url: &str, root: &str, extra: &str) -> Result<Daemon> {
        Self::start_with_env(db_url, root, extra, &[]).await
    }

    pub async fn start_with_env(
        db_url: &str,
        root: &str,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Result<Daemon> {
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let audit = dir.path().join("audit.jsonl");
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            config_toml(db_url, root, port, &audit.display().to_string(), extra),
        )?;
        let process = ReaperProcess::spawn(Spawn {
            bin: &binary()?,
            config: &config,
            command: "run",
            log: &dir.path().join("daemon.log"),
            port,
            env,
            patience: WAIT,
        })?;
        let d = Daemon {
            process,
            dir,
            config,
        };
        d.wait_http().await?;
        Ok(d)
    }

    pub fn audit(&self) -> Vec<serde_json::Value> {
        read_audit(&self.dir.path().join("audit.jsonl"))
    }

    /// SIGTERM, then the exit code.
    pub async fn terminate(&mut self) -> Result<Option<i32>> {
        self.process.stop().await
    }
}

/// Waits (up to [`WAIT`]) for an async condition.
pub async fn wait_until<F, Fut>(what: &str, f: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    ds_sim::reaper::wait_until(what, WAIT, f).await
}

/// A database of a DS line with its schema loaded.
pub async fn sim_db(kind: SimKind, fixture: &str) -> Result<SimDb> {
    SimDb::create(kind, fixture).await
}

/// Runs a `ds-reaper` command to completion: (exit code, stdout, stderr).
pub async fn run_cli(args: &[&str], env: &[(&str, &str)]) -> Result<(i32, String, String)> {
    let mut cmd = tokio::process::Command::new(binary()?);
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .context("ds-reaper command did not finish within 120 s")??;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// A startup time well before every simulated task's `submit_time`.
pub fn long_ago() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_700_000_000 - 3600, 0).unwrap_or_default()
}

/// A simulated server of `line` under `root`, heartbeat times in UTC (the
/// test daemons' `time_zone`), started long before any task.
pub async fn server(
    root: &str,
    line: reaper_core::DsLine,
    kind: reaper_core::NodeKind,
    host: &str,
    groups: &[&str],
) -> Result<ds_sim::zk::SimServer> {
    let opts = ds_sim::zk::SimOptions {
        zone: "UTC".parse().map_err(|e| anyhow::anyhow!("{e:?}"))?,
        ..Default::default()
    };
    ds_sim::zk::SimServer::register_with(
        &zk_connect(),
        root,
        (line, kind),
        host,
        groups,
        long_ago(),
        opts,
    )
    .await
}

/// The usual cluster: a master at `master` and three workers
/// 10.0.0.11-13:1234 (default group) under `root` on ZooKeeper `zk`, started
/// at `started`, heartbeat times in UTC (the test daemons' `time_zone`).
pub async fn master_and_three_workers(
    zk: &str,
    root: &str,
    line: reaper_core::DsLine,
    master: &str,
    started: chrono::DateTime<chrono::Utc>,
) -> Result<(ds_sim::zk::SimServer, [ds_sim::zk::SimServer; 3])> {
    let opts = ds_sim::zk::SimOptions {
        zone: "UTC".parse().map_err(|e| anyhow::anyhow!("{e:?}"))?,
        ..Default::default()
    };
    use reaper_core::NodeKind::{Master, Worker};
    let mut servers = Vec::new();
    for (kind, host) in [
        (Master, master),
        (Worker, "10.0.0.11:1234"),
        (Worker, "10.0.0.12:1234"),
        (Worker, "10.0.0.13:1234"),
    ] {
        servers.push(
            ds_sim::zk::SimServer::register_with(
                zk,
                root,
                (line, kind),
                host,
                &[],
                started,
                opts.clone(),
            )
            .await?,
        );
    }
    let [m, w1, w2, w3]: [ds_sim::zk::SimServer; 4] = servers
        .try_into()
        .map_err(|_| anyhow::anyhow!("four servers expected"))?;
    Ok((m, [w1, w2, w3]))
}

/// Removes a test's ZooKeeper tree (the parent of its `.../dolphinscheduler`
/// root) and its database.
pub async fn cleanup(db: SimDb, root: &str) -> Result<()> {
    let top = root
        .trim_end_matches('/')
        .rsplit_once('/')
        .map(|(p, _)| p)
        .filter(|p| !p.is_empty())
        .unwrap_or(root);
    ds_sim::zk::delete_tree(&zk_connect(), top).await?;
    db.drop().await
}

/// A config file for CLI commands (`check`, `reap`, `config check`), with its
/// own audit file, in a temporary directory.
pub struct CliConfig {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl CliConfig {
    pub fn new(db_url: &str, root: &str, extra: &str) -> Result<CliConfig> {
        let dir = tempfile::tempdir()?;
        let audit = dir.path().join("audit.jsonl");
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            config_toml(
                db_url,
                root,
                free_port(),
                &audit.display().to_string(),
                extra,
            ),
        )?;
        Ok(CliConfig { dir, path })
    }

    pub fn path_str(&self) -> String {
        self.path.display().to_string()
    }

    /// Runs `ds-reaper --config <this> <args...>`.
    pub async fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Result<(i32, String, String)> {
        let p = self.path_str();
        let mut all = vec!["--config", p.as_str()];
        all.extend_from_slice(args);
        run_cli(&all, env).await
    }

    pub fn audit(&self) -> Vec<serde_json::Value> {
        read_audit(&self.dir.path().join("audit.jsonl"))
    }
}

impl Daemon {
    /// The audit records of one event kind (and task, when given). A write's
    /// outcome is appended after the row (and its follow-ups) are written, so
    /// a test that saw the row change first waits here, up to 10 s, until
    /// every intent on file has its outcome.
    pub fn audit_events(&self, event: &str, task: Option<i64>) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let records = self.audit();
            let count = |e: &str| records.iter().filter(|r| r["event"] == e).count();
            let outcomes = count("done") + count("lost_race") + count("error");
            if count("intent") <= outcomes || Instant::now() >= deadline {
                return records
                    .into_iter()
                    .filter(|r| r["event"] == event && task.is_none_or(|t| r["task_id"] == t))
                    .collect();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `ds-reaper agent` as a process of its own: worker `worker`, exec base
/// `exec_base`, a scan every second; `extra` is appended to its config
/// (e.g. a `[registry]` and `[etcd]` section).
pub struct AgentProcess {
    process: ReaperProcess,
    pub dir: tempfile::TempDir,
}

impl Deref for AgentProcess {
    type Target = ReaperProcess;
    fn deref(&self) -> &ReaperProcess {
        &self.process
    }
}

impl DerefMut for AgentProcess {
    fn deref_mut(&mut self) -> &mut ReaperProcess {
        &mut self.process
    }
}

impl AgentProcess {
    pub async fn start(
        root: &str,
        worker: &str,
        exec_base: &std::path::Path,
        extra: &str,
    ) -> Result<AgentProcess> {
        // The simulated heartbeats keep the fixtures' startupTime (2023,
        // before every task row), while the `java` stand-in whose pid they
        // carry starts with the test: a real worker's JVM starts before its
        // startupTime. The agent's start-time check of its JVM is tested in
        // reaper-agent and by the scenarios whose heartbeats carry the
        // stand-ins' own times (`start_with_env`); here it is widened past them.
        let wide = [("DS_REAPER__RECONCILE__CLOCK_SKEW_TOLERANCE", "10000days")];
        Self::start_with_env(root, worker, exec_base, extra, &wide).await
    }

    /// [`AgentProcess::start`] with the environment `env` instead of the
    /// widened clock skew tolerance.
    pub async fn start_with_env(
        root: &str,
        worker: &str,
        exec_base: &std::path::Path,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Result<AgentProcess> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("agent.toml");
        let port = free_port();
        let agent = format!(
            "[agent]\nworker = \"{worker}\"\nexec_base = \"{}\"\nscan_interval = \"1s\"\nlisten = \"127.0.0.1:{port}\"\n{extra}",
            exec_base.display(),
        );
        let audit = dir.path().join("unused-audit.jsonl");
        std::fs::write(
            &config,
            config_toml(
                "mysql://unused@127.0.0.1/unused",
                root,
                free_port(),
                &audit.display().to_string(),
                &agent,
            ),
        )?;
        let process = ReaperProcess::spawn(Spawn {
            bin: &binary()?,
            config: &config,
            command: "agent",
            log: &dir.path().join("agent.log"),
            port,
            env,
            patience: WAIT,
        })?;
        Ok(AgentProcess { process, dir })
    }
}

/// Two replicas on one registry (SPEC §4.6, §14): exactly one leads; the
/// first worker's loss is written once, by the leader; the leader is killed
/// (kill -9) and the survivor takes over and writes the second loss.
/// `crash_first` / `crash_second` make the workers holding `first` and
/// `second` go; `cfg` is both replicas' extra config.
pub async fn two_replicas_kill_takeover<F1, F2, Fut1, Fut2>(
    db: &SimDb,
    root: &str,
    cfg: &str,
    (first, second): (i64, i64),
    crash_first: F1,
    crash_second: F2,
) -> Result<()>
where
    F1: FnOnce() -> Fut1,
    F2: FnOnce() -> Fut2,
    Fut1: std::future::Future<Output = ()>,
    Fut2: std::future::Future<Output = ()>,
{
    const LEADER: &str = "ds_reaper_leader";
    let a = Daemon::start(db.url(), root, cfg).await?;
    let b = Daemon::start(db.url(), root, cfg).await?;
    a.wait_ready().await?;
    b.wait_ready().await?;
    wait_until("exactly one leader", || async {
        Ok(a.metric0(LEADER).await? + b.metric0(LEADER).await? == 1.0)
    })
    .await?;
    let a_leads = a.metric0(LEADER).await? == 1.0;
    crash_first().await;
    wait_until("the first zombie failed", || async {
        Ok(db.task_state(first).await?.state == 6)
    })
    .await?;
    a.wait_sweeps(2).await?;
    b.wait_sweeps(2).await?;
    let done =
        a.audit_events("done", Some(first)).len() + b.audit_events("done", Some(first)).len();
    if done != 1 {
        bail!("task {first} written {done} times, not once");
    }
    let (mut leader, mut survivor) = if a_leads { (a, b) } else { (b, a) };
    if leader.audit_events("done", Some(first)).len() != 1 {
        bail!("the standby wrote task {first}");
    }
    leader.child.start_kill()?;
    let _ = leader.child.wait().await;
    survivor.wait_metric(LEADER, |v| v == 1.0).await?;
    crash_second().await;
    wait_until("the survivor fails the next zombie", || async {
        Ok(db.task_state(second).await?.state == 6)
    })
    .await?;
    if survivor.audit_events("done", Some(second)).len() != 1 {
        bail!("the survivor did not write task {second} once");
    }
    if survivor.terminate().await? != Some(0) {
        bail!("the survivor did not stop cleanly");
    }
    Ok(())
}

/// The usual set-up of a test on ZooKeeper: the services checked, a database
/// of its own with a DS schema, a ZooKeeper root of its own; the cluster,
/// daemon and agent started on them; both removed by [`Scenario::cleanup`].
///
/// ```ignore
/// let Some(sc) = Scenario::start(SimKind::MySql, "3.2.2").await? else {
///     return Ok(()); // skipped outside CI
/// };
/// let (_m, [w1, _w2, _w3]) = sc.cluster().await?;
/// let d = sc.daemon("[policy]\nworker_lost = \"fail\"\n").await?;
/// // …
/// sc.cleanup().await
/// ```
pub struct Scenario {
    pub db: SimDb,
    pub root: String,
}

impl Scenario {
    /// None (after `SKIPPED: …`) when a service is missing outside CI; under
    /// `CI=true` a missing service fails the test.
    pub async fn start(kind: SimKind, fixture: &str) -> Result<Option<Scenario>> {
        if !services_up().await {
            return Ok(None);
        }
        Ok(Some(Scenario {
            db: sim_db(kind, fixture).await?,
            root: unique_root(),
        }))
    }

    /// The DS line of the database's schema.
    pub fn line(&self) -> reaper_core::DsLine {
        self.db.line
    }

    /// A master at 10.0.0.1:5678 and workers 10.0.0.11-13:1234 of the
    /// schema's line, started long before any task.
    pub async fn cluster(&self) -> Result<(ds_sim::zk::SimServer, [ds_sim::zk::SimServer; 3])> {
        master_and_three_workers(
            &zk_connect(),
            &self.root,
            self.line(),
            "10.0.0.1:5678",
            long_ago(),
        )
        .await
    }

    /// `ds-reaper run` on the scenario's database and root.
    pub async fn daemon(&self, extra: &str) -> Result<Daemon> {
        Daemon::start(self.db.url(), &self.root, extra).await
    }

    pub async fn daemon_with_env(&self, extra: &str, env: &[(&str, &str)]) -> Result<Daemon> {
        Daemon::start_with_env(self.db.url(), &self.root, extra, env).await
    }

    /// `ds-reaper agent` for `worker` on the scenario's root.
    pub async fn agent(
        &self,
        worker: &str,
        exec_base: &std::path::Path,
        extra: &str,
    ) -> Result<AgentProcess> {
        AgentProcess::start(&self.root, worker, exec_base, extra).await
    }

    /// Removes the ZooKeeper tree and the database.
    pub async fn cleanup(self) -> Result<()> {
        cleanup(self.db, &self.root).await
    }
}
