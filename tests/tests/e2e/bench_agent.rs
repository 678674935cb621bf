//! Benchmark (ignored; run by scripts/bench/all.sh): from a task process's
//! exit on a live worker to its row's FAILURE, through a real agent and the
//! daemon, with `process_gone_after = 5s`, a 1 s scan and a 1 s sweep. The
//! target is at most 5 s + one scan + one sweep. Prints its figures; asserts
//! nothing about time.

use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::procs::ExecBase;
use reaper_core::NodeKind;
use reaper_e2e::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: scripts/bench/all.sh"]
async fn bench_process_exit_to_failure() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let _m = server(&root, line, NodeKind::Master, "10.0.0.1:5678", &[]).await?;
    let _w1 = server(&root, line, NodeKind::Worker, "10.0.0.11:1234", &[]).await?;
    let _w2 = server(&root, line, NodeKind::Worker, "10.0.0.12:1234", &[]).await?;
    let exec = ExecBase::new()?;
    let mut agent = AgentProcess::start(&root, "10.0.0.11:1234", exec.path(), "").await?;
    let mut d = Daemon::start_with_env(
        db.url(),
        &root,
        "[policy]\nprocess_gone = \"fail\"\n",
        &[("DS_REAPER__RECONCILE__PROCESS_GONE_AFTER", "5s")],
    )
    .await?;
    d.wait_ready().await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let mut secs = Vec::new();
    for _ in 0..5 {
        // As DS does: the row turns RUNNING with its start time, then the
        // process starts; old enough to be past clock_skew_tolerance (5 s)
        // when it dies, as a real task that ran for a while would be.
        let mut spec = TaskSpec::new(wf, 1, Some("10.0.0.11:1234"));
        spec.start_time = Some(chrono::Utc::now().naive_utc());
        let task = db.insert_task(&spec).await?;
        let mut p = exec.start(line, wf, task)?;
        tokio::time::sleep(std::time::Duration::from_secs(6)).await;
        wait_until("the agent lists the new process", || async {
            let w = d.json("/api/v1/workers").await?;
            Ok(w["workers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| x["host"] == "10.0.0.11:1234" && x["agent"]["tasks"].as_u64() == Some(1)))
        })
        .await?;
        let t0 = std::time::Instant::now();
        p.kill()?;
        wait_until("the row is FAILURE", || async {
            Ok(db.task_state(task).await?.state == 6)
        })
        .await?;
        secs.push(t0.elapsed().as_secs_f64());
    }
    secs.sort_by(|a, b| a.total_cmp(b));
    println!("process exit -> FAILURE (s): {secs:?}");
    println!("RESULT agent_detect_median_s {:.2}", secs[secs.len() / 2]);
    println!("RESULT agent_detect_max_s {:.2}", secs[secs.len() - 1]);
    assert_eq!(d.terminate().await?, Some(0));
    agent.child.start_kill()?;
    let _ = agent.child.wait().await;
    cleanup(db, &root).await
}
