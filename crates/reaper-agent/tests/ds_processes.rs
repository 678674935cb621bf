//! The agent against real processes started the way DS's worker starts a
//! task (SPEC §12, issue 18 items 2 and 3): a command file in the execute
//! path run by `bash`, `sh` or `sudo -i`, whose script `cd`s elsewhere and
//! starts children; execute paths read as the registry's line; and a blind
//! agent (no process folder, no worker JVM in sight) that proves nothing.
//! Needs the shared ZooKeeper (`bash deploy/dev/services.sh start; source
//! deploy/dev/env.sh`); a missing ZooKeeper skips, except under CI=true.

mod agent_setup;

use agent_setup::*;
use ds_sim::procs::{ExecBase, TaskProcess};
use ds_sim::zk::SimServer;
use reaper_agent::Agent;
use reaper_core::agent::AgentReport;
use reaper_core::{DsLine, NodeKind, Zone};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// The pids of the process group `leader` leads (every task process of a
/// [`TaskProcess`] is in it), from /proc.
fn group_of(leader: i32) -> BTreeSet<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 1..];
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    // a zombie is no live process
                    (f.first() != Some(&"Z")).then(|| f.get(2)?.parse::<i32>().ok())?
                })
                == Some(leader)
        })
        .collect()
}

/// Waits until the group of `leader` has settled: `n` live processes, of
/// which `sleeps` are the scripts' `sleep` leaves. The count alone is not
/// enough: a script's `$(...)` subshell or `dirname` is a short-lived
/// member that can make up the count before the leaves exist (CI saw it).
async fn wait_group(leader: i32, n: usize, sleeps: usize) -> BTreeSet<i32> {
    let mut g = BTreeSet::new();
    wait_until(
        &format!("{n} processes, {sleeps} of them sleeps, in the group of {leader}"),
        || {
            g = group_of(leader);
            let leaves = g.iter().filter(|p| comm(**p) == "sleep").count();
            let ok = g.len() == n && leaves == sleeps;
            async move { ok }
        },
    )
    .await;
    g
}

fn pids_of(r: &AgentReport, task: i64) -> BTreeSet<i32> {
    r.tasks
        .iter()
        .filter(|t| t.task_id == task)
        .flat_map(|t| t.pids.iter().copied())
        .collect()
}

/// A simulated worker of `line` whose heartbeat carries this test's own
/// (live) pid, as a real worker JVM's is live on its host.
async fn worker(zk: &str, root: &str, line: DsLine, name: &str) -> SimServer {
    SimServer::register(
        zk,
        root,
        line,
        NodeKind::Worker,
        name,
        &["default"],
        chrono::Utc::now(),
    )
    .await
    .unwrap()
}

/// Runs an agent for `name` on `exec_base` until the returned token is cancelled.
async fn agent(
    zk: &str,
    root: &str,
    exec_base: &Path,
    name: &str,
    process_dir: Option<PathBuf>,
) -> (CancellationToken, tokio::task::JoinHandle<()>, String) {
    let (listener, http) = listener().await;
    let cancel = CancellationToken::new();
    let mut s = settings(zk, root, exec_base, Some(name));
    s.process_dir = process_dir;
    let c = cancel.clone();
    let task = tokio::spawn(async move {
        Agent::new(s).serve(listener, c).await.unwrap();
    });
    (cancel, task, http)
}

/// 3.2: `bash <execute path>/11_12.sh`, whose script `cd`s to another
/// folder and starts children: every process stays listed, with its start
/// time and no terminal; the report is complete (not blind). Today's agent
/// (working directory only) lists none of them once the script has `cd`ed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ds_shell_script_that_cds_elsewhere_stays_listed_with_every_child() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let script = format!(
        "cd {} || exit 1\nsh -c 'sleep 86400; true' &\nsleep 86400 &\nwait",
        elsewhere.path().display()
    );
    let p = base
        .start_ds_command(DsLine::V3_2, 11, 12, &script)
        .unwrap();
    // bash, its sh and two sleeps
    let group = wait_group(p.pid(), 4, 2).await;
    let _w = worker(&zk, &root, DsLine::V3_2, "10.1.2.3:1234").await;
    let (cancel, task, http) = agent(&zk, &root, base.path(), "10.1.2.3:1234", None).await;
    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/10.1.2.3:1234");
    let (r, _) = wait_report(&c, &node, "every process of task 12", |r| {
        pids_of(r, 12) == group && r.blind.is_none()
    })
    .await;
    assert_eq!(r.unreadable, 0, "{r:#?}");
    assert!(r.complete());
    let t = r.tasks.iter().find(|t| t.task_id == 12).unwrap();
    assert_eq!(t.workflow_instance_id, 11);
    assert_eq!(t.processes.len(), 4);
    for pr in &t.processes {
        assert!(!pr.tty, "{pr:?}");
        let age = r.scan_started_at - pr.started_at;
        assert!((-1500..WAIT.as_millis() as i64).contains(&age), "{pr:?}");
    }
    assert_eq!(
        t.started_at,
        t.processes.iter().map(|p| p.started_at).min().unwrap()
    );
    // the worker JVM (this test process) is never a task's
    assert!(!r
        .tasks
        .iter()
        .any(|t| t.pids.contains(&(std::process::id() as i32))));
    assert_eq!(get(&format!("{http}/readyz")).await.0, 200);
    cancel.cancel();
    task.await.unwrap();
    drop(p);
    cleanup(&zk, &root).await;
}

/// 1.3: `sh <path>/<def>_<wf>_<task>.command` runs `<appId>_node.sh`, whose
/// script `cd`s away and starts a child (DS 1.3.9 `ShellCommandExecutor`,
/// `ShellTask`, taskAppId `<processDefineId>_<processInstanceId>_<taskInstanceId>`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_1_3_command_and_node_files_keep_a_wandering_script_listed() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let dir = base.execute_path(DsLine::V1_3, 31, 32).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let node = dir.join("2_31_32_node.sh");
    std::fs::write(
        &node,
        format!(
            "#!/bin/sh\ncd {} || exit 1\nsleep 86400 &\nwait\n",
            elsewhere.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
    let command = dir.join("2_31_32.command");
    std::fs::write(
        &command,
        format!(
            "#!/bin/sh\nBASEDIR=$(cd `dirname $0`; pwd)\ncd $BASEDIR\n{}\n",
            node.display()
        ),
    )
    .unwrap();
    let p = TaskProcess::spawn(&dir, "sh", &[command.to_str().unwrap()]).unwrap();
    // sh <.command>, the node script, its sleep
    let group = wait_group(p.pid(), 3, 1).await;
    let _w = worker(&zk, &root, DsLine::V1_3, "10.1.2.4:1234").await;
    let (cancel, task, _) = agent(&zk, &root, base.path(), "10.1.2.4:1234", None).await;
    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/10.1.2.4:1234");
    let (r, _) = wait_report(&c, &node, "every process of task 32", |r| {
        pids_of(r, 32) == group && r.blind.is_none()
    })
    .await;
    assert_eq!(r.tasks.len(), 1, "{r:#?}");
    assert_eq!(r.tasks[0].workflow_instance_id, 31);
    cancel.cancel();
    task.await.unwrap();
    drop(p);
    cleanup(&zk, &root).await;
}

/// The tenant user of the sudo test, created when missing; None when this
/// machine cannot (not root, no sudo, no useradd).
fn tenant() -> Option<&'static str> {
    const USER: &str = "ds-reaper-tenant";
    let ok = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok("sudo", &["-V"]) {
        return None;
    }
    if !ok("id", &["-u", USER]) && !ok("useradd", &["-m", "-s", "/bin/bash", USER]) {
        return None;
    }
    Some(USER)
}

/// `sudo -u <tenant> -i <path>/<wf>_<task>.sh` (3.2 with sudo.enable): sudo
/// stays in the execute path, its login shell starts in the tenant's home
/// with the command escaped, the script `cd`s away: all of them are listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sudo_form_is_the_tasks_to_the_last_child() {
    let Some(zk) = shared_zk().await else { return };
    let Some(user) = tenant() else {
        eprintln!("SKIPPED: no sudo, or no tenant user can be created (needs root)");
        return;
    };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let dir = base.execute_path(DsLine::V3_2, 41, 42).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    // the tenant must reach the script and the folder it moves to
    let mut p = dir.clone();
    while p.starts_with(base.path()) {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.pop();
    }
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = dir.join("41_42.sh");
    std::fs::write(
        &file,
        format!(
            "#!/bin/bash\ncd {} || exit 1\nsleep 86400 &\nwait\n",
            elsewhere.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = TaskProcess::spawn(&dir, "sudo", &["-u", user, "-i", file.to_str().unwrap()]).unwrap();
    // sudo, (sudo's session child on newer sudo), the login shell / script, sleep
    let mut group = BTreeSet::new();
    wait_until("the tenant's sleep", || {
        group = group_of(t.pid());
        let has_sleep = group.iter().any(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
        });
        async move { has_sleep }
    })
    .await;
    let _w = worker(&zk, &root, DsLine::V3_2, "10.1.2.5:1234").await;
    let (cancel, task, _) = agent(&zk, &root, base.path(), "10.1.2.5:1234", None).await;
    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/10.1.2.5:1234");
    let (r, _) = wait_report(&c, &node, "every process of task 42", |r| {
        pids_of(r, 42) == group_of(t.pid()) && r.blind.is_none()
    })
    .await;
    assert!(pids_of(&r, 42).len() >= 3, "{r:#?}");
    assert_eq!(r.tasks[0].workflow_instance_id, 41);
    cancel.cancel();
    task.await.unwrap();
    drop(t);
    cleanup(&zk, &root).await;
}

/// On a 3.3 registry (flat layout, 3.2+ JSON) the execute path is
/// `exec/process/<taskInstanceId>`: a task working in its own dated
/// subfolders `77/2024/06/15` is task 77 — today's agent reads it as a 1.x
/// path of task 15.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_3_task_in_dated_subfolders_is_read_as_its_own_task() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let dated = base.path().join("exec/process/77/2024/06/15");
    std::fs::create_dir_all(&dated).unwrap();
    let p = TaskProcess::spawn(&dated, "sleep", &["86400"]).unwrap();
    let _w = worker(&zk, &root, DsLine::V3_3, "10.1.2.6:1234").await;
    let (cancel, task, _) = agent(&zk, &root, base.path(), "10.1.2.6:1234", None).await;
    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/10.1.2.6:1234");
    let (r, _) = wait_report(&c, &node, "a complete report", |r| r.blind.is_none()).await;
    assert_eq!(r.tasks.len(), 1, "{r:#?}");
    assert_eq!(r.tasks[0].task_id, 77, "{r:#?}");
    assert_eq!(r.tasks[0].pids, vec![p.pid()]);
    cancel.cancel();
    task.await.unwrap();
    drop(p);
    cleanup(&zk, &root).await;
}

/// A wrong exec_base (no process folder): blind, `/readyz` 503 with the
/// reason, until the folder exists. On 1.2 `agent.process_dir` names a
/// folder that does not end in `exec/process`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_process_folder_makes_the_agent_blind_and_not_ready() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let _w = worker(&zk, &root, DsLine::V3_2, "10.1.2.7:1234").await;
    let (cancel, task, http) = agent(&zk, &root, base.path(), "10.1.2.7:1234", None).await;
    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/10.1.2.7:1234");
    let (r, _) = wait_report(&c, &node, "a blind report", |r| r.blind.is_some()).await;
    let why = r.blind.clone().unwrap();
    assert!(why.contains("process folder"), "{why}");
    assert!(!r.complete());
    let (code, body) = get(&format!("{http}/readyz")).await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("blind") && body.contains("process folder"),
        "{body}"
    );
    std::fs::create_dir_all(base.path().join("exec/process")).unwrap();
    wait_report(&c, &node, "sight again", |r| r.blind.is_none()).await;
    wait_until("ready", || async {
        get(&format!("{http}/readyz")).await.0 == 200
    })
    .await;
    cancel.cancel();
    task.await.unwrap();

    // 1.2 with process.exec.basepath = <dir>/ds-exec: the folder is <dir>/ds-exec/process
    let ds12 = tempfile::tempdir().unwrap();
    let folder = ds12.path().join("ds-exec/process");
    let dir = folder.join("1/2/51/52");
    std::fs::create_dir_all(&dir).unwrap();
    let p = TaskProcess::spawn(&dir, "sleep", &["86400"]).unwrap();
    let _w12 = worker(&zk, &root, DsLine::V1_2, "10.1.2.8").await;
    let (cancel, task, _) = agent(&zk, &root, ds12.path(), "10.1.2.8", Some(folder)).await;
    let node = format!("{root}/ds-reaper/agents/10.1.2.8");
    let (r, _) = wait_report(&c, &node, "1.2's task 52", |r| r.lists(52)).await;
    assert_eq!(r.blind, None, "{r:#?}");
    assert_eq!(r.tasks[0].pids, vec![p.pid()]);
    cancel.cancel();
    task.await.unwrap();
    drop(p);
    cleanup(&zk, &root).await;
}

/// The worker's heartbeat names a JVM pid that is no live process in the
/// agent's view (a sidecar without a shared PID namespace): blind. Before
/// any heartbeat is seen: blind. A live pid: sight; and while the worker's
/// node is gone the last pid seen is what counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_jvm_not_in_sight_makes_the_agent_blind() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let _t = base.start(DsLine::V3_2, 61, 62).unwrap();
    let (cancel, task, http) = agent(&zk, &root, base.path(), "10.1.2.9:1234", None).await;
    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/10.1.2.9:1234");
    let (r, _) = wait_report(&c, &node, "a report", |_| true).await;
    let why = r.blind.clone().expect("never seen its worker: blind");
    assert!(why.contains("heartbeat has not been seen"), "{why}");
    assert!(r.lists(62), "positive evidence is still published: {r:#?}");

    let mut w = worker(&zk, &root, DsLine::V3_2, "10.1.2.9:1234").await;
    wait_report(&c, &node, "sight", |r| r.blind.is_none()).await;
    // a pid above any pid_max: no process has it
    let now = chrono::Utc::now();
    let dead = ds_sim::zk::encode_heartbeat_with_pid(
        DsLine::V3_2,
        "10.1.2.9:1234",
        now,
        now,
        Zone::Local,
        1 << 30,
    );
    w.set_raw_data(dead.as_bytes()).await.unwrap();
    let (r, _) = wait_report(&c, &node, "blind for the dead pid", |r| r.blind.is_some()).await;
    let why = r.blind.unwrap();
    assert!(why.contains(&format!("processId {}", 1 << 30)), "{why}");
    let (code, body) = get(&format!("{http}/readyz")).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("worker's JVM"), "{body}");

    // a live pid again, then the node goes: the last pid seen still counts
    w.resume_heartbeat();
    w.heartbeat_now().await.unwrap();
    let (r, _) = wait_report(&c, &node, "sight again", |r| r.blind.is_none()).await;
    w.crash().await;
    let seq = r.seq;
    let (r, _) = wait_report(&c, &node, "reports with the worker gone", |r| {
        r.seq >= seq + 3
    })
    .await;
    assert_eq!(r.blind, None, "{r:#?}");
    cancel.cancel();
    task.await.unwrap();
    cleanup(&zk, &root).await;
}
