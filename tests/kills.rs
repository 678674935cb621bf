//! The set-up the ghost and kill-order tests share (SPEC §12, §15): the
//! daemon's kill policy and short timings, the agent allowed to kill, DS
//! finishing rows, what the audit trail, `/api/v1/ghosts` and the order
//! folder say, whether a process lives — and worker-JVM stand-ins registered
//! as workers, several on one machine.

use crate::{wait_until, zk_connect, AgentProcess, Daemon};
use anyhow::Context;
use ds_sim::db::SimDb;
use ds_sim::procs::{ExecBase, JvmStandIn};
use ds_sim::zk::{SimOptions, SimServer};
use reaper_core::{DsLine, NodeKind};
use std::path::PathBuf;

/// `ghost_process = "kill"`. A `terminal_state` ghost is still only reported
/// under it (SPEC §15) unless a rule names that kind ([`TERMINAL`]).
pub const KILL: &str = "[policy]\nghost_process = \"kill\"\n";
/// A rule that names `terminal_state`: finished rows' leftovers are killed
/// too. Rules are first-match, so a test's own rules go before it.
pub const TERMINAL: &str =
    "[[policy.rules]]\nreason = \"ghost_process\"\nover = [\"terminal_state\"]\n";
/// The daemon's ghost timings in these tests: a ghost is due 3 s after the
/// daemon first read its row over (and two fresh reports since).
pub const GHOST_ENV: &[(&str, &str)] = &[
    ("DS_REAPER__RECONCILE__GHOST_AFTER", "3s"),
    ("DS_REAPER__RECONCILE__AGENT_STALE_AFTER", "10s"),
];
/// The agent's `[agent]` keys that make it carry out kill orders.
pub const AGENT_KILLS: &str = "allow_kill = true\nkill_grace = \"1s\"\n";

/// Now as a DS datetime column (UTC, the test daemons' `time_zone`).
pub fn sql_now() -> String {
    chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

/// DS ends the rows: SUCCESS with an end time, nothing else changed.
pub async fn finish(db: &SimDb, ids: &[i64]) -> anyhow::Result<()> {
    let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = 7, end_time = '{}' WHERE id IN ({})",
        sql_now(),
        ids.join(", ")
    ))
    .await?;
    Ok(())
}

/// The daemon's process records (`kind = "process"`) of one event, by task id.
pub fn process_events(d: &Daemon, event: &str) -> Vec<i64> {
    d.audit()
        .iter()
        .filter(|r| r["kind"] == "process" && r["event"] == event)
        .filter_map(|r| r["task_id"].as_i64())
        .collect()
}

/// The `ghosts` of a `/api/v1/ghosts` (or `check`) document.
pub fn ghosts(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["ghosts"].as_array().cloned().unwrap_or_default()
}

/// The ghost of `task` in a `/api/v1/ghosts` document, if listed.
pub fn ghost_of(v: &serde_json::Value, task: i64) -> Option<serde_json::Value> {
    ghosts(v).into_iter().find(|g| g["task_id"] == task)
}

/// The order nodes under `worker`'s folder (none when it does not exist).
pub async fn order_nodes(
    client: &zookeeper_client::Client,
    root: &str,
    worker: &str,
) -> anyhow::Result<Vec<String>> {
    match client
        .list_children(&format!("{root}/ds-reaper/orders/{worker}"))
        .await
    {
        Ok(c) => Ok(c),
        Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Waits until `worker`'s agent lists `n` tasks and is fresh in the daemon's view.
pub async fn agent_lists(d: &Daemon, worker: &str, n: usize) -> anyhow::Result<()> {
    wait_until(
        &format!("{worker}'s agent is fresh and lists {n} tasks"),
        || async {
            let w = d.json("/api/v1/workers").await?;
            Ok(w["workers"].as_array().into_iter().flatten().any(|x| {
                x["host"] == worker && x["agent"]["fresh"] == true && x["agent"]["tasks"] == n
            }))
        },
    )
    .await
}

/// `worker`'s agent as the daemon's `/api/v1/workers` shows it (null when
/// the worker is not listed or has no agent).
pub async fn agent_view(d: &Daemon, worker: &str) -> anyhow::Result<serde_json::Value> {
    let w = d.json("/api/v1/workers").await?;
    Ok(w["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|x| x["host"] == worker)
        .map(|x| x["agent"].clone())
        .unwrap_or_default())
}

/// Whether `pid` is a live process (a zombie waiting for its parent is not).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // the state follows the command name's closing parenthesis
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace()
                .next()
                .map(|st| st != "Z" && st != "X")
        })
        .unwrap_or(false)
}

/// When process `pid` started, as the agent reads it: `/proc/<pid>/stat`'s
/// start ticks after `/proc/stat`'s boot time.
pub fn process_started_at(pid: i32) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks: u64 = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19)?.parse().ok())
        .with_context(|| format!("no start time in /proc/{pid}/stat"))?;
    let btime: i64 = std::fs::read_to_string("/proc/stat")?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
        .context("no btime in /proc/stat")?;
    let ms = btime * 1000 + (ticks as f64 * 1000.0 / ds_sim::procs::clk_tck()) as i64;
    chrono::DateTime::from_timestamp_millis(ms).context("a start time out of range")
}

pub async fn stop_agent(mut agent: AgentProcess) {
    let _ = agent.child.start_kill();
    let _ = agent.child.wait().await;
}

/// A DS worker JVM on this host: a `java` stand-in running one task process
/// per task (`sleep` in the task's execute path, a child of the JVM as DS
/// starts it), registered as worker `name` with a heartbeat whose
/// `processId` is the stand-in's pid.
pub struct JvmWorker {
    pub name: String,
    pub jvm: JvmStandIn,
    pub server: SimServer,
    /// The tasks' execute paths, in the order given.
    pub dirs: Vec<PathBuf>,
}

impl JvmWorker {
    /// Starts the stand-in with the tasks `(workflow_instance_id, task_id)`
    /// in `exec` and registers it; the heartbeat's `startupTime` is
    /// `startup(stand-in's pid)` (its heartbeat times in UTC).
    pub async fn start(
        root: &str,
        line: DsLine,
        name: &str,
        exec: &ExecBase,
        tasks: &[(i64, i64)],
        startup: impl FnOnce(i32) -> anyhow::Result<chrono::DateTime<chrono::Utc>>,
    ) -> anyhow::Result<JvmWorker> {
        let mut dirs = Vec::new();
        for (wf, task) in tasks {
            dirs.push(exec.execute_path(line, *wf, *task)?);
        }
        let refs: Vec<&std::path::Path> = dirs.iter().map(PathBuf::as_path).collect();
        let jvm = JvmStandIn::start(&refs)?;
        let pid = u32::try_from(jvm.pid())?;
        let server = SimServer::register_as(
            &zk_connect(),
            root,
            (line, NodeKind::Worker),
            name,
            &[],
            startup(jvm.pid())?,
            SimOptions {
                zone: "UTC".parse().map_err(|e| anyhow::anyhow!("{e:?}"))?,
                ..Default::default()
            },
            pid,
        )
        .await?;
        Ok(JvmWorker {
            name: name.to_string(),
            jvm,
            server,
            dirs,
        })
    }

    /// The pids of the JVM's task process for the `i`-th task, once started.
    pub async fn task_pids(&self, i: usize) -> anyhow::Result<Vec<i32>> {
        let dir = &self.dirs[i];
        let found = std::sync::Mutex::new(Vec::new());
        wait_until(
            &format!("{}'s task process in {}", self.name, dir.display()),
            || async {
                let pids = self.jvm.children_in(dir);
                let ok = !pids.is_empty();
                *found.lock().unwrap_or_else(|e| e.into_inner()) = pids;
                Ok(ok)
            },
        )
        .await?;
        Ok(found.into_inner().unwrap_or_else(|e| e.into_inner()))
    }
}
