//! The demo's ghost step (SPEC §15): a worker restarted as DS 3.3.0+ restarts
//! it leaves its task's processes running (DS PR #16790), DS's failover runs
//! the task again elsewhere, and ds-reaper finds the old process — a ghost —
//! and, with `ghost_process = "kill"`, has the worker's agent end it.

use super::{agent_toml, audit, explain, heading, print_audit, spawn, state_name, Running};
use super::{Registry, M1, RUNNING, W2};
use anyhow::{bail, Context, Result};
use chrono::{Duration as TimeDelta, Utc};
use ds_sim::db::{SimDb, TaskSpec, WorkflowSpec};
use ds_sim::procs::ExecBase;
use ds_sim::reaper::{free_port, poll};
use ds_sim::zk::ServerKind;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// The restarted worker: its own host, with an agent allowed to kill.
pub(super) const W5: &str = "10.0.1.15:1234";
const NEED_FAULT_TOLERANCE: i32 = 8;
const TASK: &str = "etl_hourly";
/// The task code both attempts share (DS's clone keeps it).
const TASK_CODE: i64 = 77_000_001;

/// What the step saw, for the checks at the end.
pub(super) struct SeenGhost {
    pub old: i64,
    pub newer: i64,
    pub pids: Vec<i32>,
}

/// Whether `pid` is a live process (a zombie waiting for its parent is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace()
                .next()
                .map(|st| st != "Z" && st != "X")
        })
        .unwrap_or(false)
}

/// Pids whose working directory is `dir` or below.
fn pids_in(dir: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c.starts_with(dir)) && alive(pid)
        {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Step `n`: the ghost of a restarted worker's task, found and killed.
pub(super) async fn ghost_step(
    n: u32,
    db: &SimDb,
    reg: &Registry,
    run: &mut Running,
    dir: &Path,
    bin: &Path,
) -> Result<SeenGhost> {
    heading(
        n,
        "a worker restarted on DS 3.3 leaves its task running: a ghost, killed",
    );
    explain(
        "From DS 3.3.0 on a stopping worker no longer kills its task processes (DS PR #16790):\n\
         a restart, an upgrade or a registry-loss self-stop leaves them running while the master\n\
         fails the task over and DS runs it again on another worker — two copies of one job\n\
         writing the same output (DS #17162, #14906, #16442). No DS tool finds the old one.\n\
         ds-reaper does: the worker's agent lists the process, the daemon reads its row by id,\n\
         and the row says the task is over. Policy `ghost_process = \"kill\"` orders the agent\n\
         (`allow_kill = true`) to end it. (This cluster's tables are 3.2.2's; the rows below are\n\
         written as 3.3's worker failover writes them.)",
    );
    let line = db.line;
    // the worker and its task, started a few minutes ago
    let server = reg
        .register(
            line,
            ServerKind::Worker,
            W5,
            Utc::now() - TimeDelta::hours(1),
        )
        .await?;
    run.servers.push(server);
    let wf = db
        .insert_workflow(&WorkflowSpec {
            host: Some(M1.into()),
            start_time: (Utc::now() - TimeDelta::minutes(3)).naive_utc(),
            ..WorkflowSpec::default()
        })
        .await?;
    let started = (Utc::now() - TimeDelta::minutes(2)).naive_utc();
    let mut t = TaskSpec::new(wf, RUNNING, Some(W5));
    t.name = TASK.into();
    t.task_code = Some(TASK_CODE);
    t.submit_time = Some(started);
    t.start_time = Some(started);
    let old = db.insert_task(&t).await?;
    let exec = ExecBase::new()?;
    // as DS's worker runs a shell task: `bash <execute path>/<wf>_<task>.sh`,
    // the user's script a child of it
    let p = exec
        .start_ds_command(line, wf, old, "sleep 86400")
        .context("starting the task's process")?;
    let task_dir = p.dir().to_path_buf();
    run.procs.push(p);
    let agent_port = free_port()?;
    let agent_cfg = agent_toml(
        reg,
        W5,
        exec.path(),
        agent_port,
        "allow_kill = true\nkill_grace = \"2s\"",
    );
    let agent_cfg_path = dir.join("agent-w5.toml");
    std::fs::write(&agent_cfg_path, &agent_cfg)?;
    let log = dir.join("ds-reaper-agent-w5.log");
    run.ghost_agent = Some(spawn(bin, &agent_cfg_path, "agent", &log, agent_port)?);
    run.ghost_exec = Some(exec);
    explain(&format!(
        "worker {W5} registers; workflow {wf} (owner {M1}), task {old} ({TASK}, SHELL) RUNNING on {W5}"
    ));
    explain(&format!(
        "{} --config {} agent   (worker {W5}, allow_kill = true, kill_grace = \"2s\"; log: {})",
        bin.display(),
        agent_cfg_path.display(),
        log.display()
    ));
    let rp = run.reaper.as_ref().context("reaper")?;
    let agent = run.ghost_agent.as_ref().context("agent")?;
    poll(
        "the agent fresh in the daemon's view, listing the task",
        Duration::from_secs(30),
        || async {
            let w = rp.json("/api/v1/workers").await?;
            Ok(w["workers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| x["host"] == W5 && x["agent"]["fresh"] == true && x["agent"]["tasks"] == 1)
                .then_some(()))
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
    let tree = pids_in(&task_dir);
    explain("its processes, as DS's worker starts a shell task (bash runs the command file, the\nuser's script is its child):");
    for pid in &tree {
        explain(&format!("  pid {pid:>7}  {}", cmdline(*pid)));
    }

    // the restart: the worker's session goes, DS fails the task over, the
    // worker comes back — and the process never stopped
    let restart_at = Instant::now();
    let i = run
        .servers
        .iter()
        .position(|s| s.host() == W5)
        .context("worker W5")?;
    run.servers[i].crash().await;
    db.exec(&format!(
        "UPDATE t_ds_task_instance SET state = {NEED_FAULT_TOLERANCE}, flag = 0 WHERE id = {old}"
    ))
    .await?;
    let mut clone = TaskSpec::new(wf, RUNNING, Some(W2));
    clone.name = TASK.into();
    clone.task_code = Some(TASK_CODE);
    clone.submit_time = Some(Utc::now().naive_utc());
    clone.start_time = clone.submit_time;
    let newer = db.insert_task(&clone).await?;
    run.servers[i] = reg
        .register(line, ServerKind::Worker, W5, Utc::now())
        .await?;
    explain(&format!(
        "worker {W5} restarts (its session closes, it registers again with a new start time).\n\
         DS's failover: task {old} → NEED_FAULT_TOLERANCE, flag 0; its clone, task {newer}, is\n\
         dispatched to {W2} and runs there. The old process still runs on {W5}:"
    ));
    let still: Vec<i32> = tree.iter().copied().filter(|p| alive(*p)).collect();
    explain(&format!(
        "  pids {still:?} alive after the restart   (ghost_after is {}: DS's worker writes the\n  \
         result just before its process exits, so a row over for a moment is not yet a ghost)",
        super::GHOST_AFTER
    ));

    // found: GET /api/v1/ghosts, with the order node caught while it exists
    let zk = zookeeper_client::Client::connect(&reg.zk)
        .await
        .context("connecting to ZooKeeper to show the order node")?;
    let node = format!("{}/ds-reaper/orders/{W5}/{old}", reg.root);
    let mut order_seen: Option<String> = None;
    let mut ghost_seen: Option<Value> = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if ghost_seen.is_none() {
            let g = rp.json("/api/v1/ghosts").await?;
            ghost_seen = g["ghosts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| x["task_id"] == old)
                .cloned();
        }
        if order_seen.is_none() {
            if let Ok((data, _)) = zk.get_data(&node).await {
                order_seen = Some(String::from_utf8_lossy(&data).into_owned());
            }
        }
        let answered = audit(rp).await?.iter().any(|r| {
            r["kind"] == "process"
                && r["task_id"] == old
                && r["event"] != "detected"
                && r["event"] != "intent"
        });
        if (ghost_seen.is_some() && order_seen.is_some()) || answered {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "no ghost found for task {old} within 60 s after the restart\nds-reaper log:\n{}\nagent log:\n{}",
                rp.log_tail(30),
                agent.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    explain("GET /api/v1/ghosts:");
    match &ghost_seen {
        Some(g) => explain(&format!(
            "  task {} ({}) on {}: pids {} started {}\n  \
             row: state {}, flag {}, host {}; newer attempt {} on {}\n  \
             reason {}, over: {} → action {}{}",
            g["task_id"],
            g["task_name"].as_str().unwrap_or("?"),
            g["worker"].as_str().unwrap_or("?"),
            g["pids"],
            g["started_at"].as_str().unwrap_or("?"),
            g["row_state"].as_str().unwrap_or("?"),
            g["row_flag"],
            g["row_host"].as_str().unwrap_or("?"),
            g["newer_attempt"]["id"],
            g["newer_attempt"]["host"].as_str().unwrap_or("?"),
            g["reason"].as_str().unwrap_or("?"),
            g["evidence"]["over"].as_str().unwrap_or("?"),
            g["action"].as_str().unwrap_or("?"),
            g["note"]
                .as_str()
                .map(|n| format!(" (note: {n})"))
                .unwrap_or_default()
        )),
        None => explain("  (killed before a poll caught it listed; the audit trail below has it)"),
    }
    explain(&format!("the kill order, node {node}:"));
    match &order_seen {
        Some(o) => explain(&format!("  {o}")),
        None => {
            explain("  (already carried out and removed; its intent is in the audit trail below)")
        }
    }

    // the agent's answer, audited; the process gone
    poll(
        "the agent's answer audited",
        Duration::from_secs(60),
        || async {
            let records = audit(rp).await?;
            let mine = || {
                records
                    .iter()
                    .filter(|r| r["kind"] == "process" && r["task_id"] == old)
            };
            // a refused or partial kill is an error record: no use waiting on
            if let Some(e) = mine().find(|r| r["event"] == "error") {
                bail!("the kill order failed: {}", e["detail"]);
            }
            Ok(mine().any(|r| r["event"] == "done").then_some(()))
        },
    )
    .await
    .with_context(|| {
        format!(
            "ds-reaper log:\n{}\nagent log:\n{}",
            rp.log_tail(30),
            agent.log_tail(30)
        )
    })?;
    explain(&format!(
        "audit records (kind process), {:.1} s after the restart:",
        restart_at.elapsed().as_secs_f64()
    ));
    for r in audit(rp)
        .await?
        .iter()
        .filter(|r| r["kind"] == "process" && r["task_id"] == old)
    {
        print_audit(r);
    }
    let (_, metrics) = agent.get("/metrics").await?;
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("ds_reaper_agent_kills_total{"))
    {
        explain(&format!("agent /metrics: {l}"));
    }
    let left: Vec<i32> = tree.iter().copied().filter(|p| alive(*p)).collect();
    for pid in &tree {
        explain(&format!(
            "  pid {pid:>7}: {}",
            if alive(*pid) {
                "STILL RUNNING"
            } else {
                "gone (/proc)"
            }
        ));
    }
    if !left.is_empty() {
        bail!("the ghost's processes {left:?} still run after the agent's answer");
    }
    poll(
        "the order node removed",
        Duration::from_secs(30),
        || async { Ok(zk.check_stat(&node).await?.is_none().then_some(())) },
    )
    .await?;
    explain("the order node is removed; nothing of DS's database was written for the ghost:");
    for (id, what) in [(old, "the old attempt"), (newer, "the clone")] {
        let s = db.task_state(id).await?;
        explain(&format!(
            "  task {id} ({what}): {} ({})",
            s.state,
            state_name(s.state)
        ));
    }
    Ok(SeenGhost {
        old,
        newer,
        pids: tree,
    })
}

/// The step's checks at the end; one line per deviation.
pub(super) async fn ghost_checks(
    db: &SimDb,
    records: &[Value],
    seen: &SeenGhost,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let old = db.task_state(seen.old).await?.state;
    if old != NEED_FAULT_TOLERANCE {
        problems.push(format!(
            "the ghost's row {} is {old}, expected NEED_FAULT_TOLERANCE (never written)",
            seen.old
        ));
    }
    let newer = db.task_state(seen.newer).await?.state;
    if newer != RUNNING {
        problems.push(format!(
            "the clone {} is {newer}, expected RUNNING (never written)",
            seen.newer
        ));
    }
    let mine = |e: &str| {
        records
            .iter()
            .filter(|r| r["kind"] == "process" && r["event"] == e && r["task_id"] == seen.old)
            .count()
    };
    let killed = records.iter().any(|r| {
        r["kind"] == "process"
            && r["event"] == "done"
            && r["task_id"] == seen.old
            && r["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("killed"))
    });
    if mine("intent") != 1 || mine("done") != 1 || !killed {
        problems.push(format!(
            "ghost {}: {} kill order(s), {} answer(s), killed: {killed}; expected one order answered `killed`",
            seen.old,
            mine("intent"),
            mine("done")
        ));
    }
    let others = records
        .iter()
        .filter(|r| r["kind"] == "process" && r["event"] == "intent" && r["task_id"] != seen.old)
        .count();
    if others > 0 {
        problems.push(format!("{others} kill order(s) for other tasks"));
    }
    let left: Vec<i32> = seen.pids.iter().copied().filter(|p| alive(*p)).collect();
    if seen.pids.is_empty() || !left.is_empty() {
        problems.push(format!(
            "the ghost's processes {:?}: {left:?} still run",
            seen.pids
        ));
    }
    Ok(problems)
}
