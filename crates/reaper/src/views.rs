//! What the API, `check` and the status page show (SPEC §8 shapes), as typed
//! serialisable views built once from the engine's state, so that the three
//! never disagree and a renamed field is a compile error, not a `-`.

use crate::engine::{Engine, SweepSummary};
use reaper_core::agent::AgentSeen;
use reaper_core::{
    Blocked, Disposition, Evidence, Instant, NodeInfo, RegistryView, ViewState, Zombie,
};
use serde::Serialize;

/// A zombie as `/api/v1/zombies` and `check --format json` show it.
#[derive(Debug, Clone, Serialize)]
pub struct ZombieView {
    pub task_id: i64,
    pub task_name: String,
    pub task_type: String,
    pub workflow_instance_id: Option<i64>,
    pub state: String,
    pub host: Option<String>,
    pub worker_group: Option<String>,
    pub submit_time: Option<Instant>,
    /// Seconds since submit (else start) when the sweep judged it.
    pub age_seconds: Option<i64>,
    pub reason: &'static str,
    pub evidence: Evidence,
    pub owner_master: Option<String>,
    pub owner_master_alive: bool,
    pub action: &'static str,
    pub workflow: &'static str,
    pub note: Option<String>,
    /// act | report | blocked:<why>
    pub disposition: String,
    /// The task's YARN applications (SPEC §17).
    pub remote_apps: Vec<reaper_core::remote::RemoteApp>,
}

impl ZombieView {
    /// `at` is when the sweep judged the zombie (ages are as of then).
    pub fn new(z: &Zombie, at: Instant) -> ZombieView {
        let note = z.note.clone().or_else(|| match &z.disposition {
            Disposition::Blocked(b) if !matches!(b, Blocked::Hold(_)) => Some(b.describe()),
            _ => None,
        });
        let t = &z.task;
        ZombieView {
            task_id: t.id,
            task_name: t.name.to_string(),
            task_type: t.task_type.to_string(),
            workflow_instance_id: t.workflow_instance_id,
            state: z.state_name.clone(),
            host: t.host.as_deref().map(str::to_string),
            worker_group: t.worker_group.as_deref().map(str::to_string),
            submit_time: t.submit_time,
            age_seconds: t
                .submit_time
                .or(t.start_time)
                .map(|s| (at - s).num_seconds()),
            reason: z.reason.as_str(),
            evidence: z.evidence.clone(),
            owner_master: z.owner_master.clone(),
            owner_master_alive: z.owner_master_alive,
            action: z.action.as_str(),
            workflow: z.workflow.as_str(),
            note,
            disposition: disposition(&z.disposition),
            remote_apps: z.evidence.remote_apps.clone(),
        }
    }
}

fn disposition(d: &Disposition) -> String {
    match d {
        Disposition::Act => "act".into(),
        Disposition::Report => "report".into(),
        Disposition::Blocked(b) => format!(
            "blocked:{}",
            match b {
                Blocked::Settling => "settling",
                Blocked::Hold(_) => "hold",
                Blocked::Brake(_) => "brake",
                Blocked::SweepCap => "sweep_cap",
                Blocked::RateLimit => "rate_limit",
                Blocked::Unwritable => "unwritable",
                Blocked::ProcessAlive => "process_alive",
                Blocked::ChildWorkflowRunning => "child_workflow_running",
                Blocked::RemoteAppRunning => "remote_app_running",
                Blocked::RemoteAppUnknown => "remote_app_unknown",
                Blocked::RemoteAppIdsUnknown => "remote_app_ids_unknown",
            }
        ),
    }
}

/// One live server node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    /// The registered node name.
    pub host: String,
    /// The heartbeat's `host:port` where it carries one, else the node name.
    pub address: String,
    pub startup_time: Option<Instant>,
    pub report_time: Option<Instant>,
    pub status: Option<String>,
    pub groups: Vec<String>,
    /// Workers only: the worker-host agent (SPEC §12), or null when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<Option<AgentView>>,
}

/// A worker's agent as the daemon sees it.
#[derive(Debug, Clone, Serialize)]
pub struct AgentView {
    pub fresh: bool,
    pub last_report_at: Instant,
    /// Task instances whose processes the latest report lists.
    pub tasks: usize,
    pub unreadable: u64,
    /// Why the agent cannot see what it must (SPEC §12), if it cannot.
    pub blind: Option<String>,
    /// When the agent's node went away (its last listings still hold).
    pub gone_at: Option<Instant>,
}

impl NodeView {
    fn new(n: &NodeInfo, agent: Option<Option<AgentView>>) -> Self {
        NodeView {
            host: n.host.clone(),
            address: n.address.clone().unwrap_or_else(|| n.host.clone()),
            startup_time: n.startup_time,
            report_time: n.report_time,
            status: n.status.clone(),
            groups: n.groups.clone(),
            agent,
        }
    }
}

impl AgentView {
    pub fn new(a: &AgentSeen, now: Instant, stale_after: std::time::Duration) -> AgentView {
        AgentView {
            fresh: a.fresh(now, stale_after),
            last_report_at: a.received_at,
            tasks: a.report.as_ref().map_or(0, |r| r.tasks.len()),
            unreadable: a.report.as_ref().map_or(0, |r| r.unreadable),
            blind: a.report.as_ref().and_then(|r| r.blind.clone()),
            gone_at: a.gone_at,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LostView {
    pub host: String,
    /// worker | master
    pub kind: &'static str,
    pub lost_at: Instant,
}

/// `/api/v1/workers`.
#[derive(Debug, Clone, Serialize)]
pub struct WorkersView {
    pub workers: Vec<NodeView>,
    pub masters: Vec<NodeView>,
    /// Recently lost, newest first.
    pub lost: Vec<LostView>,
}

impl WorkersView {
    /// `/api/v1/workers`: live and lost servers, workers with their agents.
    pub fn of(e: &Engine) -> WorkersView {
        WorkersView::new(&e.view(), e.now(), e.settings.reconcile.agent_stale_after)
    }

    /// `now` and `stale_after` judge the agents' freshness.
    pub fn new(view: &RegistryView, now: Instant, stale_after: std::time::Duration) -> WorkersView {
        let sorted = |m: &std::collections::HashMap<String, NodeInfo>, workers: bool| {
            let mut v: Vec<NodeView> = m
                .values()
                .map(|n| {
                    let agent = workers.then(|| {
                        view.agents
                            .get(&n.host)
                            .map(|a| AgentView::new(a, now, stale_after))
                    });
                    NodeView::new(n, agent)
                })
                .collect();
            v.sort_by(|a, b| a.host.cmp(&b.host));
            v
        };
        let mut lost: Vec<LostView> = view
            .lost_workers
            .iter()
            .map(|(h, t)| (h, "worker", t))
            .chain(view.lost_masters.iter().map(|(h, t)| (h, "master", t)))
            .map(|(h, kind, t)| LostView {
                host: h.clone(),
                kind,
                lost_at: *t,
            })
            .collect();
        lost.sort_by(|a, b| b.lost_at.cmp(&a.lost_at).then(a.host.cmp(&b.host)));
        WorkersView {
            workers: sorted(&view.workers, true),
            masters: sorted(&view.masters, false),
            lost,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RegistryViewState {
    pub valid: bool,
    pub since: Instant,
    pub reason: Option<String>,
    /// zookeeper | etcd | jdbc
    pub registry: &'static str,
    pub workers: usize,
    pub masters: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BrakeView {
    pub engaged: bool,
    pub since: Option<Instant>,
    pub why: Option<String>,
    /// The rule (`no_worker`, `lost_workers`, `zombies`, `registry_outage`).
    pub reason: Option<reaper_core::BrakeReason>,
    /// The servers to check (a registry outage's), `{"kind", "host"}`.
    pub servers: Vec<reaper_core::registry::OutageServer>,
}

/// `/api/v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct StatusView {
    pub version: &'static str,
    pub ds_line: Option<&'static str>,
    /// Why acting is held although the line is known (a disagreement).
    pub ds_line_hold: Option<String>,
    pub leader: bool,
    pub leader_election: bool,
    pub registry_view: RegistryViewState,
    pub brake: BrakeView,
    pub last_sweep: Option<SweepSummary>,
    pub database_error: Option<String>,
    pub started_at: Instant,
}

impl StatusView {
    pub fn new(e: &Engine) -> StatusView {
        let view = e.view();
        let st = e.status_read();
        let (valid, since, reason) = match &view.state {
            ViewState::Valid { since } => (true, *since, None),
            ViewState::Invalid { since, reason } => (false, *since, Some(reason.clone())),
        };
        StatusView {
            version: env!("CARGO_PKG_VERSION"),
            ds_line: st.line.map(|l| l.as_str()),
            ds_line_hold: st.line_hold.clone(),
            leader: e.is_leader(),
            leader_election: e.has_election(),
            registry_view: RegistryViewState {
                valid,
                since,
                reason,
                registry: e.registry_kind(),
                workers: view.workers.len(),
                masters: view.masters.len(),
            },
            brake: BrakeView {
                engaged: st.brake.engaged(),
                since: st.brake.engaged_since,
                why: st.brake.why.clone(),
                reason: st.brake.reason.filter(|_| st.brake.engaged()),
                servers: if st.brake.engaged() {
                    st.brake.servers.clone()
                } else {
                    Vec::new()
                },
            },
            last_sweep: st.last_sweep.clone(),
            database_error: st.db_error.clone(),
            started_at: e.started(),
        }
    }
}

/// A workflow finding as `/api/v1/workflows` and `check` show it (SPEC §8).
#[derive(Debug, Clone, Serialize)]
pub struct WorkflowView {
    pub workflow_instance_id: i64,
    pub name: String,
    pub state: String,
    pub host: Option<String>,
    pub owner_master_alive: bool,
    pub reason: &'static str,
    pub evidence: reaper_core::workflow::WorkflowEvidence,
    pub action: &'static str,
    pub note: Option<String>,
    /// act | report | blocked:<why>
    pub disposition: String,
}

impl WorkflowView {
    pub fn new(f: &reaper_core::workflow::WorkflowFinding) -> WorkflowView {
        let note = f.note.clone().or_else(|| match &f.disposition {
            Disposition::Blocked(b) if !matches!(b, Blocked::Hold(_)) => Some(b.describe()),
            _ => None,
        });
        WorkflowView {
            workflow_instance_id: f.workflow.id,
            name: f.workflow.name.clone(),
            state: f.state_name.clone(),
            host: f.workflow.host.clone(),
            owner_master_alive: f.owner_master_alive,
            reason: f.reason.as_str(),
            evidence: f.evidence.clone(),
            action: f.action.as_str(),
            note,
            disposition: disposition(&f.disposition),
        }
    }
}

pub use crate::engine::host_words;

/// A ghost process as `/api/v1/ghosts` and `check --format json` show it
/// (SPEC §15: exactly these fields).
#[derive(Debug, Clone, Serialize)]
pub struct GhostView {
    pub task_id: i64,
    pub task_name: Option<String>,
    pub workflow_instance_id: Option<i64>,
    pub worker: String,
    pub pids: Vec<i32>,
    pub started_at: Option<Instant>,
    pub row_state: Option<String>,
    pub row_flag: Option<i32>,
    pub row_host: Option<String>,
    pub newer_attempt: Option<NewerAttemptView>,
    pub reason: &'static str,
    pub evidence: reaper_core::ghost::GhostEvidence,
    pub action: &'static str,
    pub note: Option<String>,
    /// The task's YARN applications (SPEC §17), as the zombie view shows them.
    pub remote_apps: Vec<reaper_core::remote::RemoteApp>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NewerAttemptView {
    pub id: i64,
    pub host: Option<String>,
}

impl GhostView {
    pub fn new(g: &reaper_core::ghost::Ghost) -> GhostView {
        GhostView {
            task_id: g.task_id,
            task_name: g.task_name.clone(),
            workflow_instance_id: g.workflow_instance_id,
            worker: g.worker.clone(),
            pids: g.pids(),
            started_at: g.started_at,
            row_state: g.row_state.clone(),
            row_flag: g.row_flag,
            row_host: g.row_host.clone(),
            newer_attempt: g.newer_attempt.as_ref().map(|n| NewerAttemptView {
                id: n.id,
                host: n.host.clone(),
            }),
            reason: reaper_core::ghost::GHOST_PROCESS,
            evidence: g.evidence.clone(),
            action: g.action.as_str(),
            note: g.note.clone(),
            remote_apps: g.remote_apps.clone(),
        }
    }
}
