//! The worker-host agents' reports (SPEC §12), kept in the view's `agents`
//! when the membership watches where they publish.

use super::{Changes, Membership, NodeEvent, Note};
use crate::Instant;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub(super) struct AgentConf {
    /// Relative to the root, no trailing slash (`/ds-reaper/agents`).
    pub(super) prefix: String,
    pub(super) stale_after: std::time::Duration,
}

impl Membership {
    /// Also keeps the agents publishing under `prefix` (relative to the
    /// root, e.g. `/ds-reaper/agents`) in the view's `agents`.
    pub fn with_agents(mut self, prefix: &str, stale_after: std::time::Duration) -> Self {
        let prefix = format!("/{}", prefix.trim_matches('/'));
        self.agents = Some(AgentConf {
            prefix,
            stale_after,
        });
        self
    }

    /// The agents' directory relative to the root, when agents are kept.
    pub fn agent_prefix(&self) -> Option<&str> {
        self.agents.as_ref().map(|a| a.prefix.as_str())
    }

    /// The worker an agent node's path stands for, if it is one.
    pub fn agent_worker(&self, path: &str) -> Option<String> {
        let conf = self.agents.as_ref()?;
        let rest = path.strip_prefix(conf.prefix.as_str())?.strip_prefix('/')?;
        (!rest.is_empty() && !rest.contains('/')).then(|| crate::host::normalize(rest).into_owned())
    }

    pub(super) fn agent_report(
        &mut self,
        worker: String,
        data: &[u8],
        now: Instant,
        gap: bool,
        changes: &mut Changes,
    ) {
        let Some(conf) = &self.agents else { return };
        let stale_after = conf.stale_after;
        let report = match crate::agent::AgentReport::parse(&worker, data) {
            Ok(r) => Some(r),
            Err(e) => {
                if self.warned.insert(format!("agent:{worker}")) {
                    changes.notes.push(Note::AgentUnreadable {
                        worker: worker.clone(),
                        error: e.why,
                    });
                }
                None
            }
        };
        let prev = self.view.agents.get(&worker).map(|a| &**a);
        let seen = crate::agent::AgentSeen::received(prev, report, now, gap, stale_after);
        self.view.agents.insert(worker, std::sync::Arc::new(seen));
    }

    /// An event on an agent's node.
    pub(super) fn agent_event(
        &mut self,
        worker: String,
        ev: NodeEvent,
        now: Instant,
        changes: &mut Changes,
    ) {
        match ev {
            NodeEvent::Deleted { .. } => {
                // Not fresh any more, but what it listed still holds.
                if let Some(a) = self.view.agents.get_mut(&worker) {
                    *a = std::sync::Arc::new(a.gone(now));
                }
            }
            NodeEvent::Present { data, .. } | NodeEvent::DataChanged { data, .. } => {
                self.agent_report(worker, &data, now, false, changes)
            }
        }
        changes.publish = true;
    }

    /// Agents whose node is gone keep their last listings for the hold
    /// (SPEC §12) until those are too old to matter.
    pub(super) fn keep_gone_agents(
        &mut self,
        old_agents: HashMap<String, Arc<crate::agent::AgentSeen>>,
        now: Instant,
    ) {
        for (worker, prev) in old_agents {
            if now - prev.received_at <= crate::agent::LISTED_KEEP {
                self.view
                    .agents
                    .insert(worker, std::sync::Arc::new(prev.gone(now)));
            }
        }
    }
}
