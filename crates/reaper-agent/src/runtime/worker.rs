//! What the agent reads and writes in the registry for its worker: who the
//! worker is, its heartbeat, its kill orders, and the report published as
//! its agent node's data.

use super::{lock, Shared, Status};
use crate::host::{pick, HostIdentity, Pick};
use crate::scan::WorkerJvm;
use crate::AgentSettings;
use reaper_core::agent::AgentReport;
use reaper_core::DsLine;
use std::time::Duration;

/// Where the agent reads YARN application ids (SPEC §17).
#[derive(Debug, Clone, Copy)]
pub(super) struct Sources {
    /// `dolphinscheduler.version`; None: auto.
    pub(super) line: Option<DsLine>,
    /// `agent.task_log_base` is set.
    pub(super) task_log: bool,
}

impl Sources {
    /// `appinfo` where every line the agent may be reading writes
    /// `<execute_path>/appInfo.log` (3.2+), `task_log` where the task log
    /// is read. Unknown lines claim no `appInfo.log`: a task whose ids may
    /// be unknown is held, never acted on.
    pub(super) fn of(&self, lines: &[DsLine]) -> Vec<String> {
        let mut out = Vec::new();
        if !lines.is_empty() && lines.iter().all(|l| *l >= DsLine::V3_2) {
            out.push("appinfo".to_string());
        }
        if self.task_log {
            out.push("task_log".to_string());
        }
        out
    }
}

/// The lines the agent reads: the configured one, else those the worker's
/// node allows (none known yet: empty).
pub(super) fn lines_of(line: Option<DsLine>, worker_lines: Option<&[DsLine]>) -> Vec<DsLine> {
    match line {
        Some(l) => vec![l],
        None => worker_lines.unwrap_or(&[]).to_vec(),
    }
}

/// What the scanner should check as the worker's JVM now (SPEC §12).
pub(super) fn expected_jvm(st: &Status, stale_after: Duration, worker: Option<&str>) -> WorkerJvm {
    if let Some(a) = &st.ambiguous {
        return WorkerJvm::Blind(a.clone());
    }
    let Some(pid) = st.worker_pid else {
        return WorkerJvm::Unknown;
    };
    match st.absent_since {
        None => WorkerJvm::Registered {
            pid,
            startup_ms: st.worker_startup,
        },
        Some(t) if t.elapsed() > stale_after => WorkerJvm::Blind(format!(
            "the worker's node {} has been absent from the registry for {} s, longer than \
             reconcile.agent_stale_after",
            worker.unwrap_or("?"),
            t.elapsed().as_secs()
        )),
        Some(_) => WorkerJvm::Absent,
    }
}

/// The new kill orders in the worker's order folder; none when it cannot be
/// read now (the last listing stands: outcomes are still answered).
pub(super) async fn list_orders(
    shared: &Shared,
    worker: &str,
) -> Vec<reaper_core::order::KillOrder> {
    if !shared.publisher.connected() {
        return Vec::new();
    }
    match shared.publisher.orders(worker).await {
        Ok(nodes) => shared.orders.listed(&nodes),
        Err(e) => {
            tracing::debug!(error = %e, worker, "cannot list the kill orders; trying again after the next scan");
            Vec::new()
        }
    }
}

/// Reads the worker's node: the JVM pid its heartbeat carries and the lines
/// its layout and format allow. An absent node or a failed read keeps what
/// was seen last.
pub(super) async fn follow_worker(settings: &AgentSettings, shared: &Shared, worker: &str) {
    if !shared.publisher.connected() {
        return;
    }
    let node = match shared.publisher.worker(worker).await {
        Ok(Some(n)) => n,
        Ok(None) => {
            let mut st = lock(&shared.status);
            if st.absent_since.is_none() {
                tracing::warn!(
                    worker,
                    "the worker's node is absent: checking the JVM last seen"
                );
                st.absent_since = Some(tokio::time::Instant::now());
            }
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, worker, "cannot read the worker's node; keeping what was seen");
            return;
        }
    };
    let mut st = lock(&shared.status);
    st.absent_since = None;
    if let Some(pid) = node.process_id {
        if st.worker_pid != Some(pid) {
            tracing::info!(worker, pid, "the worker's JVM, from its heartbeat");
        }
        st.worker_pid = Some(pid);
        st.worker_startup = node.startup_time.map(|t| t.timestamp_millis());
    }
    if settings.line.is_none() && st.worker_lines.as_ref() != Some(&node.lines) {
        let names: Vec<&str> = node.lines.iter().map(|l| l.as_str()).collect();
        tracing::info!(worker, lines = ?names, "reading execute paths as the lines the worker's node allows");
        st.worker_lines = Some(node.lines);
    }
}

/// The worker this agent stands for: configured, or found among the
/// registered workers by this host's addresses. `auto` looks again at every
/// call: several workers with this host's addresses make the agent not
/// ready (and blind), and once the bound node is gone another node of this
/// host is bound instead (blind until its JVM is seen).
pub(super) async fn identity(settings: &AgentSettings, shared: &Shared) -> Option<String> {
    if settings.worker.is_some() {
        return lock(&shared.status).worker.clone();
    }
    let bound = lock(&shared.status).worker.clone();
    if !shared.publisher.connected() {
        if bound.is_none() {
            note_problem(
                shared,
                "agent.worker = \"auto\": waiting for the registry to find this host's worker"
                    .into(),
            );
        }
        return bound;
    }
    let workers = match shared.publisher.workers().await {
        Ok(w) => w,
        Err(e) => {
            if bound.is_none() {
                note_problem(shared, format!("agent.worker = \"auto\": {e}"));
            }
            return bound;
        }
    };
    let me = HostIdentity::read(&settings.proc_root);
    let picked = pick(&workers, &me);
    let mut st = lock(&shared.status);
    st.ambiguous = match &picked {
        Pick::Several(ws) => Some(format!(
            "agent.worker = \"auto\": several registered workers are this host's ({}); set agent.worker",
            ws.join(", ")
        )),
        _ => None,
    };
    let bound_gone = bound
        .as_ref()
        .is_some_and(|b| !workers.iter().any(|w| &w.name == b));
    match picked {
        Pick::One(w) if bound.as_ref() != Some(&w) && (bound.is_none() || bound_gone) => {
            tracing::info!(worker = %w, previous = ?bound, "found this host's worker; publishing as it from now on");
            if bound.is_some() {
                rebind(&mut st);
            }
            st.worker = Some(w.clone());
            st.worker_problem = None;
            Some(w)
        }
        Pick::None if bound.is_none() => {
            drop(st);
            note_problem(shared, format!(
                "agent.worker = \"auto\": none of the {} registered worker(s) has one of this host's addresses {:?}{}; set agent.worker",
                workers.len(),
                me.addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                me.hostname.map(|h| format!(" or its name {h}")).unwrap_or_default(),
            ));
            None
        }
        Pick::Several(_) if bound.is_none() => {
            let a = st.ambiguous.clone().unwrap_or_default();
            drop(st);
            note_problem(shared, a);
            None
        }
        _ => bound,
    }
}

/// Another worker is bound: nothing seen of the old one is evidence.
fn rebind(st: &mut Status) {
    st.rebound = true;
    st.worker_pid = None;
    st.worker_startup = None;
    st.absent_since = None;
    st.worker_lines = None;
}

fn note_problem(shared: &Shared, problem: String) {
    let mut st = lock(&shared.status);
    if st.worker_problem.as_deref() != Some(problem.as_str()) {
        tracing::warn!(problem = %problem, "this host's worker is not known yet; retrying after each scan");
        st.worker_problem = Some(problem);
    }
}

pub(super) async fn publish(shared: &Shared, worker: &str, report: AgentReport) {
    let result = if shared.publisher.connected() {
        shared.publisher.publish(worker, &report).await
    } else {
        Err(crate::publish::PublishError::NotConnected {
            registry: "the registry".into(),
        })
    };
    let mut st = lock(&shared.status);
    match result {
        Ok(()) => {
            if let Some(e) = st.publish_error.take() {
                tracing::info!(previous_error = %e, "publishing again");
            }
            st.last_report = Some(report);
        }
        Err(e) => {
            shared.metrics.publish_errors_total.inc();
            if st.publish_error.is_none() {
                tracing::warn!(error = %e, worker, "cannot publish the agent report; retrying after each scan");
            }
            st.publish_error = Some(e.to_string());
        }
    }
}
