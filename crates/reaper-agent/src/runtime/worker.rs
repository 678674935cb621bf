//! What the agent reads and writes in the registry for its worker: who the
//! worker is, its heartbeat, its kill orders, and the report published as
//! its agent node's data.

use super::{lock, Shared};
use crate::host::{pick, HostIdentity, Pick};
use crate::AgentSettings;
use reaper_core::agent::AgentReport;

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
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(error = %e, worker, "cannot read the worker's node; keeping what was seen");
            return;
        }
    };
    let mut st = lock(&shared.status);
    if let Some(pid) = node.process_id {
        if st.worker_pid != Some(pid) {
            tracing::info!(worker, pid, "the worker's JVM, from its heartbeat");
        }
        st.worker_pid = Some(pid);
    }
    if settings.line.is_none() && st.worker_lines.as_ref() != Some(&node.lines) {
        let names: Vec<&str> = node.lines.iter().map(|l| l.as_str()).collect();
        tracing::info!(worker, lines = ?names, "reading execute paths as the lines the worker's node allows");
        st.worker_lines = Some(node.lines);
    }
}

/// The worker this agent stands for: configured, or found among the
/// registered workers by this host's addresses and kept once found.
pub(super) async fn identity(settings: &AgentSettings, shared: &Shared) -> Option<String> {
    if let Some(w) = lock(&shared.status).worker.clone() {
        return Some(w);
    }
    let problem = if !shared.publisher.connected() {
        "agent.worker = \"auto\": waiting for the registry to find this host's worker".to_string()
    } else {
        match shared.publisher.workers().await {
            Err(e) => format!("agent.worker = \"auto\": {e}"),
            Ok(workers) => {
                let me = HostIdentity::read(&settings.proc_root);
                match pick(&workers, &me) {
                    Pick::One(w) => {
                        tracing::info!(worker = %w, "found this host's worker; publishing as it from now on");
                        let mut st = lock(&shared.status);
                        st.worker = Some(w.clone());
                        st.worker_problem = None;
                        return Some(w);
                    }
                    Pick::None => format!(
                        "agent.worker = \"auto\": none of the {} registered worker(s) has one of this host's addresses {:?}{}; set agent.worker",
                        workers.len(),
                        me.addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                        me.hostname.map(|h| format!(" or its name {h}")).unwrap_or_default(),
                    ),
                    Pick::Several(ws) => format!(
                        "agent.worker = \"auto\": several registered workers are this host's ({}); set agent.worker",
                        ws.join(", ")
                    ),
                }
            }
        }
    };
    let mut st = lock(&shared.status);
    if st.worker_problem.as_deref() != Some(problem.as_str()) {
        tracing::warn!(problem = %problem, "this host's worker is not known yet; retrying after each scan");
        st.worker_problem = Some(problem);
    }
    None
}

pub(super) async fn publish(shared: &Shared, worker: &str, report: AgentReport) {
    let result = if shared.publisher.connected() {
        shared.publisher.publish(worker, &report).await
    } else {
        Err(crate::publish::PublishError::new(
            "not connected to the registry",
        ))
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
