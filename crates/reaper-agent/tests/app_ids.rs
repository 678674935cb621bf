//! YARN application ids (SPEC §17) from a real task process's files: the
//! agent against a real ZooKeeper, a DS-style shell task that writes its
//! `appInfo.log` while it runs, and the task's log under
//! `agent.task_log_base`. A missing ZooKeeper skips, except under CI=true.

mod agent_setup;

use agent_setup::*;
use ds_sim::procs::{ExecBase, DEFINITION, DEFINITION_VERSION};
use reaper_core::DsLine;
use std::io::Write;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn ids_of(r: &reaper_core::agent::AgentReport, task: i64) -> Vec<String> {
    r.tasks
        .iter()
        .find(|t| t.task_id == task)
        .map(|t| t.app_ids.clone())
        .unwrap_or_default()
}

/// The ids a running task writes into `appInfo.log` and its 3.2 task log
/// are published in its entry, each once, as they appear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_from_app_info_log_and_the_task_log_are_published() {
    let Some(zk) = shared_zk().await else { return };
    let root = unique_root();
    let base = ExecBase::new().unwrap();
    let logs = tempfile::tempdir().unwrap();
    // the task writes its first id itself, as DS's aop collector does, after
    // a pause, then waits to be told to go on
    let gate = base.path().join("go");
    let script = format!(
        "sleep 0.5\necho application_1700000000000_0001 >> appInfo.log\n\
         while [ ! -e {gate} ]; do sleep 0.1; done\n\
         echo application_1700000000000_0001 >> appInfo.log\nexec sleep 86400",
        gate = gate.display()
    );
    let mut task = base
        .start_ds_command(DsLine::V3_2, 61, 62, &script)
        .unwrap();

    let mut s = settings(&zk, &root, base.path(), Some("10.9.8.6:1234"));
    s.task_log_base = Some(logs.path().to_path_buf());
    let cancel = CancellationToken::new();
    let agent = tokio::spawn(reaper_agent::run(s, cancel.clone()));
    let c = client(&zk).await;
    let node = format!("{root}/ds-reaper/agents/10.9.8.6:1234");

    let (r, _) = wait_report(&c, &node, "the id from appInfo.log", |r| {
        !ids_of(r, 62).is_empty()
    })
    .await;
    assert_eq!(ids_of(&r, 62), ["application_1700000000000_0001"]);

    // the task's log, where DS 3.2 writes it (its first submit day)
    let day = chrono::Local::now().format("%Y%m%d").to_string();
    let log = logs
        .path()
        .join(day)
        .join(DEFINITION.to_string())
        .join(DEFINITION_VERSION.to_string())
        .join("61")
        .join("62.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let mut f = std::fs::File::create(&log).unwrap();
    writeln!(
        f,
        "[INFO] 2026-12-02 03:00:00.000 - Submitted application application_1700000000000_0002"
    )
    .unwrap();
    std::fs::write(&gate, b"").unwrap();
    let (r, _) = wait_report(&c, &node, "the id from the task log", |r| {
        ids_of(r, 62).len() == 2
    })
    .await;
    assert_eq!(
        ids_of(&r, 62),
        [
            "application_1700000000000_0001",
            "application_1700000000000_0002"
        ]
    );
    // the id written twice is published once, and stays
    let seq = r.seq;
    let (r, _) = wait_report(&c, &node, "a later report", |r| r.seq > seq + 2).await;
    assert_eq!(ids_of(&r, 62).len(), 2, "{r:#?}");

    cancel.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), agent).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    task.kill().unwrap();
    cleanup(&zk, &root).await;
}
