//! Two DS workers on one host (SPEC §12 `lineage`): DS's `data.basedir.path`
//! defaults to `/tmp/dolphinscheduler` for every worker, so both workers'
//! task folders lie in one exec base and each agent sees the other's task
//! processes. Each agent must list only its own worker's: a task of the
//! other's would be taken for a ghost of this worker (`other_host`) and
//! killed while it runs.

use ds_sim::procs::ExecBase;
use reaper_core::agent::{AgentReport, Lineage};
use reaper_core::DsLine;
use reaper_e2e::kills::JvmWorker;
use reaper_e2e::*;

/// Two worker-JVM stand-ins (processes named `java`), each registered as a
/// worker whose heartbeat `processId` is its pid and each running one task
/// process in the shared exec base; two `ds-reaper agent` processes, one per
/// worker. Each agent's reports list its own worker's task as `own` — with
/// exactly that JVM's child — and never the other's, report after report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_one_host_each_agent_lists_only_its_own() -> anyhow::Result<()> {
    if !services_up().await {
        return Ok(());
    }
    let (zk, root, line) = (zk_connect(), unique_root(), DsLine::V3_2);
    let exec = ExecBase::new()?;
    let workers = ["10.0.0.21:1234", "10.0.0.22:1234"];
    let tasks = [101, 202];
    let mut jvms = Vec::new();
    for (w, (wf, task)) in workers.iter().zip([(11, tasks[0]), (12, tasks[1])]) {
        let now = |_| Ok(chrono::Utc::now());
        jvms.push(JvmWorker::start(&root, line, w, &exec, &[(wf, task)], now).await?);
    }
    let mut agents = Vec::new();
    for w in workers {
        agents.push(AgentProcess::start(&root, w, exec.path(), "").await?);
    }
    let c = zookeeper_client::Client::connector().connect(&zk).await?;
    for (i, w) in workers.iter().enumerate() {
        let node = format!("{root}/ds-reaper/agents/{w}");
        let (own, other) = (tasks[i], tasks[1 - i]);
        let children = jvms[i].task_pids(0).await?;
        assert_eq!(children.len(), 1, "the stand-in's task process");
        let first_seq = std::sync::Mutex::new(None);
        wait_until(&format!("{w}'s agent: three complete reports"), || {
            let (c, node) = (&c, &node);
            let first_seq = &first_seq;
            let children = &children;
            async move {
                let Ok((data, _)) = c.get_data(node).await else {
                    return Ok(false);
                };
                let r = AgentReport::parse(node, &data)?;
                anyhow::ensure!(
                    !r.lists(other),
                    "{w} listed the other worker's task: {r:#?}"
                );
                if !r.complete() || !r.lists(own) {
                    return Ok(false);
                }
                let t = r.tasks.iter().find(|t| t.task_id == own).unwrap();
                anyhow::ensure!(t.lineage == Some(Lineage::Own), "{t:?}");
                anyhow::ensure!(&t.pids == children, "{t:?} vs {children:?}");
                anyhow::ensure!(r.tasks.len() == 1, "{r:#?}");
                let first = *first_seq
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(r.seq);
                Ok(r.seq >= first + 2)
            }
        })
        .await?;
    }
    for mut a in agents {
        a.child.start_kill()?;
        let _ = a.child.wait().await;
    }
    drop(jvms);
    let top = root.trim_end_matches("/dolphinscheduler");
    let _ = ds_sim::zk::delete_tree(&zk, top).await;
    Ok(())
}
