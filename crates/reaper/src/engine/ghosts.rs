//! Processes that should not be running (SPEC §15), the engine's part: the
//! listed task ids read by id in the sweep that reads the candidates, judged
//! by reaper-core's `plan_ghosts` against the sweep's view, published, and —
//! as leader, unbraked, within the sweep's budget — ended by kill orders the
//! agents carry out: intent on disk, the order node, and the outcome audited
//! when the agent's report answers, then the node removed. Nothing of DS's
//! database is ever written for a ghost.

use super::effects::Outcome;
use super::sweep::Mode;
use super::{Engine, SweepState};
use crate::audit::{AuditError, AuditEvent, Record, RecordKind};
use reaper_core::ghost::{self, Ghost, GhostMemory, ListedRead};
use reaper_core::order::{KillOrder, OrderOutcome};
use reaper_core::ports::{OrderDeletion, OrderNode};
use reaper_core::{Budget, DsLine, Instant, RegistryView};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

mod listed;
pub(super) use listed::Listed;

/// Answers already audited are remembered this long, so that a report read
/// twice is audited once.
const ANSWERED_KEEP: usize = 10_000;

/// The ghost step's read, as `/readyz` names it when it fails.
const GHOST_READ: &str = "rows of the listed tasks";

/// What the ghost part of the sweeps remembers.
#[derive(Default)]
pub(super) struct GhostState {
    pub(super) memory: GhostMemory,
    /// Ghosts already audited as `detected`, by (worker, task id).
    seen: HashSet<(String, i64)>,
    /// Orders this daemon wrote and not yet saw answered, by order id.
    issued: HashMap<String, (String, KillOrder)>,
    /// Order ids whose answer is audited, oldest first.
    answered: std::collections::VecDeque<String>,
}

impl Engine {
    async fn audit(&self, records: Vec<Record>) -> Result<(), AuditError> {
        self.audit.append_blocking(records).await
    }

    /// The plan step's ghost part: judges the listed tasks within the
    /// sweep's budget, after the task and workflow plans. `check` counts
    /// from the rows' end times and the agents' kept reports (it has seen
    /// no earlier sweep); an order that may be outstanding unseen holds
    /// every kill of this step.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_ghost_step(
        &self,
        st: &SweepState,
        listed: &Listed,
        view: &RegistryView,
        now: Instant,
        line: DsLine,
        mode: Mode,
        budget: &mut Budget,
    ) -> (Vec<Ghost>, GhostMemory) {
        let outstanding = outstanding(listed);
        let mut policy = self.settings.ghost_policy(line);
        let memory = match mode {
            Mode::Sweep => st.ghosts.memory.clone(),
            Mode::Check => {
                policy.startup_settle = std::time::Duration::ZERO;
                ghost::check_memory(view, &listed.rows, now, &policy)
            }
        };
        let hold = budget.hold.clone();
        if listed.orders.is_none() && hold.is_none() {
            budget.hold = Some("the kill orders in the registry cannot be read".into());
        }
        let plan = ghost::plan_ghosts(
            view,
            &ListedRead {
                read: &listed.read,
                rows: &listed.rows,
                live: &listed.live,
                outstanding: &outstanding,
            },
            &memory,
            now,
            &policy,
            budget,
        );
        budget.hold = hold;
        (plan.ghosts, plan.memory)
    }

    /// The publish step's ghost part: new ghosts audited, the gauge and the
    /// status; as leader, the agents' answers to earlier orders.
    pub(super) async fn publish_ghosts(
        &self,
        st: &mut SweepState,
        ghosts: &Arc<Vec<Ghost>>,
        orders: Option<&[OrderNode]>,
        view: &RegistryView,
        line: DsLine,
        now: Instant,
    ) {
        self.record_ghosts(st, ghosts, line, now).await;
        self.metrics.ghosts.set(ghosts.len() as i64);
        self.status_write().ghosts = ghosts.clone();
        if self.is_leader() {
            if let Some(orders) = orders {
                self.answers(st, view, orders, line, now).await;
            }
        }
    }

    /// What the executor's kill orders left to remember: an order written
    /// (or whose node could not be written) is re-issued at most once per
    /// `ghost_after`; one whose intent could not be audited, next sweep.
    pub(super) fn remember_order(&self, st: &mut SweepState, outcome: &Outcome, now: Instant) {
        let Outcome::Ordered {
            worker,
            task_id,
            folder,
            order,
            tried,
        } = outcome
        else {
            return;
        };
        if *tried {
            ghost::ordered(&mut st.ghosts.memory, worker, *task_id, now);
        }
        if let Some(order) = order {
            st.ghosts
                .issued
                .insert(order.order_id.clone(), (folder.clone(), order.clone()));
        }
    }

    /// Audits new ghosts once (`detected`, kind `process`); forgets those
    /// gone, so the set stays bounded.
    async fn record_ghosts(
        &self,
        st: &mut SweepState,
        ghosts: &[Ghost],
        line: DsLine,
        now: Instant,
    ) {
        let current: HashSet<(String, i64)> = ghosts
            .iter()
            .map(|g| (g.worker.clone(), g.task_id))
            .collect();
        let mut records = Vec::new();
        for g in ghosts {
            if st.ghosts.seen.insert((g.worker.clone(), g.task_id)) {
                tracing::warn!(task_id = g.task_id, worker = %g.worker, pids = ?g.pids(),
                    row_state = ?g.row_state, action = %g.action, "ghost process detected");
                records.push(self.ghost_record(AuditEvent::Detected, g, line, now));
            }
        }
        st.ghosts.seen.retain(|k| current.contains(k));
        if let Err(e) = self.audit(records).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
    }

    /// The agents' answers to orders: each audited once (killed, gone →
    /// done; refused, partial → error with the agent's detail), counted,
    /// and its order node removed.
    async fn answers(
        &self,
        st: &mut SweepState,
        view: &RegistryView,
        outstanding: &[OrderNode],
        line: DsLine,
        now: Instant,
    ) {
        let by_id: HashMap<&str, &OrderNode> = outstanding
            .iter()
            .map(|o| (o.order.order_id.as_str(), o))
            .collect();
        // The agent answers only while an order's node exists: an order of
        // this run whose node is gone will never be answered.
        st.ghosts
            .issued
            .retain(|id, _| by_id.contains_key(id.as_str()));
        let mut agents: Vec<(&String, Vec<&OrderOutcome>)> = view
            .agents
            .iter()
            .filter_map(|(w, a)| Some((w, a.report.as_ref()?.orders.iter().collect())))
            .collect();
        agents.sort_by(|a, b| a.0.cmp(b.0));
        for (worker, outcomes) in agents {
            for o in outcomes {
                // an order of ours: this run's, or one still in the registry
                let known = st.ghosts.issued.get(&o.order_id).cloned().or_else(|| {
                    let n = by_id.get(o.order_id.as_str())?;
                    Some((n.worker.clone(), n.order.clone()))
                });
                let Some((order_worker, order)) = known else {
                    continue;
                };
                if reaper_core::host::normalize(&order_worker)
                    != reaper_core::host::normalize(worker)
                {
                    continue;
                }
                if !st.ghosts.answered.contains(&o.order_id) {
                    if let Err(e) = self.answered(o, &order_worker, &order, line, now).await {
                        // not marked answered: audited (and removed) next sweep
                        tracing::error!(error = %e, "cannot write the audit trail");
                        continue;
                    }
                    st.ghosts.issued.remove(&o.order_id);
                    if st.ghosts.answered.len() >= ANSWERED_KEEP {
                        st.ghosts.answered.pop_front();
                    }
                    st.ghosts.answered.push_back(o.order_id.clone());
                }
                // The agent answers while the node exists: remove it, at the
                // version read with this answer, so a node holding a newer
                // order for the task by now stays.
                if let Some(node) = by_id.get(o.order_id.as_str()) {
                    if !self.remove_order(node).await {
                        return;
                    }
                }
            }
        }
    }

    /// Removes an answered order's node at the version it was read at,
    /// asking first whether this daemon still leads (SPEC §15: a deposed
    /// leader never removes its successor's order). False when it no longer
    /// leads: nothing more is removed in this sweep.
    async fn remove_order(&self, node: &OrderNode) -> bool {
        if !self.is_leader() {
            tracing::info!(task_id = node.order.task_id, order_id = %node.order.order_id,
                "no longer the leader; the order node is left to the leader");
            return false;
        }
        let task_id = node.order.task_id;
        match self
            .registry
            .delete_order(&node.worker, task_id, node.version)
            .await
        {
            Ok(OrderDeletion::Deleted | OrderDeletion::Absent) => {}
            Ok(OrderDeletion::Changed) => {
                tracing::debug!(task_id, order_id = %node.order.order_id,
                    "order node changed since it was read; left in place");
            }
            Err(e) => {
                tracing::warn!(error = %e, task_id,
                    "order node not removed; retried while the agent still answers it");
            }
        }
        true
    }

    /// Audits and counts one answer.
    async fn answered(
        &self,
        o: &OrderOutcome,
        worker: &str,
        order: &KillOrder,
        line: DsLine,
        now: Instant,
    ) -> Result<(), AuditError> {
        self.metrics
            .ghost_actions_total
            .with_label_values(&[o.result.as_str()])
            .inc();
        let event = if o.result.is_done() {
            AuditEvent::Done
        } else {
            AuditEvent::Error
        };
        let mut r = Record::event(event, "daemon", now);
        r.kind = Some(RecordKind::Process);
        r.task_id = Some(order.task_id);
        r.host = Some(worker.to_string());
        r.reason = Some(order.reason.clone());
        r.action = Some("kill".into());
        r.ds_line = Some(line.as_str().to_string());
        r.evidence = Some(serde_json::json!({ "pids": order.pids, "order_id": order.order_id }));
        r.detail = Some(if o.detail.is_empty() {
            o.result.as_str().to_string()
        } else {
            format!("{}: {}", o.result.as_str(), o.detail)
        });
        tracing::warn!(task_id = order.task_id, worker = %worker, order_id = %o.order_id,
            result = o.result.as_str(), detail = %o.detail, "kill order answered");
        self.audit(vec![r]).await
    }
}

/// The folder of the ghost's agent: the agent reads the one named as it
/// spells its worker, while the view keys agents by the normalised name.
pub(super) fn folder(view: &RegistryView, g: &Ghost) -> String {
    view.agents
        .get(&g.worker)
        .and_then(|a| a.report.as_ref())
        .map(|r| r.worker.trim().to_string())
        .filter(|w| reaper_core::host::normalize(w) == g.worker.as_str())
        .unwrap_or_else(|| g.worker.clone())
}

/// The outstanding orders by (normalised worker, task id), as the plan keys ghosts.
fn outstanding(listed: &Listed) -> BTreeSet<(String, i64)> {
    listed
        .orders
        .iter()
        .flatten()
        .map(|n| {
            (
                reaper_core::host::normalize(&n.worker).into_owned(),
                n.order.task_id,
            )
        })
        .collect()
}
