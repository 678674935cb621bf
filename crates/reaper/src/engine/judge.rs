//! The sweep's `plan` step: pure judgement of what the read step read,
//! against a view taken after it (SPEC §4.1). The task plan, then the
//! workflow and ghost plans share one [`Budget`]; the live-owner findings
//! are judged alongside. The result is data: what the sweep publishes and
//! the effects it asks the executor for ([`Judgement::effects`]).

use super::effects::{Effect, Gate, Item, RemoteTarget};
use super::read::Read;
use super::remote::Answers;
use super::sweep::{Mode, Stop};
use super::{Engine, SweepState, SweepSummary};
use reaper_core::anomaly::{plan_task_anomalies, plan_workflow_anomalies, AnomalyReport};
use reaper_core::ghost::{Ghost, GhostMemory};
use reaper_core::remote::AppPhase;
use reaper_core::workflow::{plan_workflows, WorkflowFinding};
use reaper_core::{
    plan_within, Budget, Disposition, DsLine, IdSet, Instant, RegistryView, SafetyState,
    UnseenAbsence, ViewState, Zombie,
};
use std::sync::Arc;

/// The ghosts of a sweep and the ghost memory to keep.
type Ghosts = (Arc<Vec<Ghost>>, GhostMemory);

/// What one sweep (or `check`) judged.
pub(super) struct Judgement {
    pub line: DsLine,
    pub mode: Mode,
    pub view: Arc<RegistryView>,
    pub now: Instant,
    pub gate: Gate,
    pub full: bool,
    pub candidates: usize,
    /// The candidates' ids: what detection records and kept ids are bounded by.
    pub live: IdSet,
    pub zombies: Arc<Vec<Zombie>>,
    /// The task plan's memory for the next sweep, its bucket as the last
    /// planner left it.
    pub next: SafetyState,
    pub was_engaged: bool,
    /// When a later sweep could newly act on this view (the driver's deadline).
    pub wake: Option<Instant>,
    pub workflows: Arc<Vec<WorkflowFinding>>,
    /// The workflow candidates' ids; None when they were not read.
    pub workflow_ids: Option<IdSet>,
    /// The ghosts and the ghost memory to keep; None when the listed tasks
    /// could not be read (no ghost judged).
    pub ghosts: Option<Ghosts>,
    /// How many of `ghosts` were judged this sweep; the rest are the last
    /// full scan's ghost applications, shown but never acted on.
    pub fresh_ghosts: usize,
    /// The ghost applications judged this sweep; None when their rows were
    /// not read (an incremental sweep).
    pub ghost_apps: Option<Arc<Vec<Ghost>>>,
    /// The outstanding kill orders; None when they could not be read.
    pub orders: Option<Vec<reaper_core::ports::OrderNode>>,
    pub anomalies: AnomalyReport,
    pub remote: Answers,
}

impl Engine {
    /// `plan`: every planner on the view current now; nothing is written.
    pub(super) fn judge(
        &self,
        st: &SweepState,
        read: Read,
        mode: Mode,
        summary: &mut SweepSummary,
    ) -> Result<Judgement, Stop> {
        let view = self.registry.view();
        self.refresh_gauges(&view);
        let now = self.now();
        summary.at = now;
        let Some(valid_since) = view.valid_since() else {
            return Err(Stop::Skipped(invalid(&view)));
        };
        let line = read.line;
        let memory = match mode {
            Mode::Check => SafetyState::default(),
            Mode::Sweep => st.safety.clone(),
        };
        let (plan, mut budget, mut anomalies) = self.plan_tasks(&read, &memory, mode, &view, now);
        let Read {
            candidates,
            full,
            listed,
            workflows,
            remote,
            anomaly_rows,
            ..
        } = read;
        drop(anomaly_rows);
        let live: IdSet = candidates.iter().map(|c| c.id).collect();
        let candidate_count = candidates.len();
        // the task rows are done with before the workflow plan keeps its own
        drop(candidates);
        let (findings, workflow_ids) = self.plan_workflow_step(
            workflows,
            &view,
            now,
            line,
            mode,
            &mut budget,
            &mut anomalies,
        );
        let planned =
            self.plan_all_ghosts(st, listed, &remote, &view, now, line, mode, &mut budget);
        Ok(Judgement {
            line,
            mode,
            gate: Gate {
                valid_since,
                leader_only: true,
                judged_at: now,
                max_age: Some(self.settings.reconcile.sweep_interval),
            },
            now,
            full,
            candidates: candidate_count,
            live,
            was_engaged: memory.brake.engaged(),
            wake: plan.wake,
            next: SafetyState {
                bucket: budget.bucket,
                ..plan.next
            },
            zombies: Arc::new(plan.zombies),
            workflows: Arc::new(findings),
            workflow_ids,
            ghosts: planned.ghosts,
            fresh_ghosts: planned.fresh,
            ghost_apps: planned.apps,
            orders: planned.orders,
            anomalies,
            remote,
            view,
        })
    }

    /// The task plan, with the sweep's budget it opens: held as standby,
    /// while the line is in doubt, and always for `check` (which also counts
    /// an unseen loss as of unknown age and has no settle).
    fn plan_tasks(
        &self,
        read: &Read,
        memory: &SafetyState,
        mode: Mode,
        view: &RegistryView,
        now: Instant,
    ) -> (reaper_core::Plan, Budget, AnomalyReport) {
        let hold = match mode {
            Mode::Check => Some(
                read.line_hold
                    .clone()
                    .unwrap_or_else(|| "check never writes".into()),
            ),
            Mode::Sweep if !self.is_leader() => Some("not the leader".to_string()),
            Mode::Sweep => read.line_hold.clone(),
        };
        let mut policy = self.settings.policy(read.line);
        if mode == Mode::Check {
            policy.unseen_absence = UnseenAbsence::Unknown;
            policy.startup_settle = std::time::Duration::ZERO;
        }
        let mut budget = Budget::for_sweep(memory, &policy, now).held(hold);
        let plan = plan_within(
            view,
            &read.candidates,
            now,
            &policy,
            memory,
            &mut budget,
            &read.remote.evidence,
        );
        let anomalies = plan_task_anomalies(
            view,
            read.line,
            &read.candidates,
            &read.anomaly_rows,
            &read.states,
            now,
            &super::anomalies::settings_of(&self.settings),
        );
        (plan, budget, anomalies)
    }

    /// The workflow plan (within the budget the task plan left) and the
    /// workflow part of the live-owner findings.
    #[allow(clippy::too_many_arguments)]
    fn plan_workflow_step(
        &self,
        workflows: Option<Vec<reaper_core::workflow::WorkflowCandidate>>,
        view: &RegistryView,
        now: Instant,
        line: DsLine,
        mode: Mode,
        budget: &mut Budget,
        anomalies: &mut AnomalyReport,
    ) -> (Vec<WorkflowFinding>, Option<IdSet>) {
        let Some(wfs) = workflows else {
            return (Vec::new(), None);
        };
        let mut wp = self.settings.workflow_policy();
        if mode == Mode::Check {
            wp.unseen_absence = UnseenAbsence::Unknown;
        }
        let findings = plan_workflows(view, &wfs, now, line, &wp, budget);
        anomalies.anomalies.extend(plan_workflow_anomalies(
            view,
            line,
            &super::anomalies::stopping(&wfs),
            now,
            &super::anomalies::settings_of(&self.settings),
        ));
        (findings, Some(wfs.iter().map(|w| w.id).collect()))
    }
}

impl Engine {
    /// The listed tasks' ghosts, then the ghost applications of over rows no
    /// agent lists (SPEC §17), in the budget the earlier planners left.
    #[allow(clippy::too_many_arguments)]
    fn plan_all_ghosts(
        &self,
        st: &SweepState,
        listed: Option<super::ghosts::Listed>,
        remote: &super::remote::Answers,
        view: &RegistryView,
        now: Instant,
        line: DsLine,
        mode: Mode,
        budget: &mut Budget,
    ) -> PlannedGhosts {
        let kill = self.settings.policy.kill_remote_apps;
        let evidence = &remote.evidence;
        let (mut ghosts, memory, orders) = match listed {
            Some(listed) => {
                let (mut g, m) = self.plan_ghost_step(st, &listed, view, now, line, mode, budget);
                remote.on_ghosts(&mut g, evidence);
                (g, Some(m), listed.orders)
            }
            None => (Vec::new(), None, None),
        };
        let apps = match view.valid_since() {
            Some(valid_since) if remote.over_read => {
                let mut policy = self.settings.ghost_policy(line);
                if mode == Mode::Check {
                    policy.startup_settle = std::time::Duration::ZERO;
                }
                let tasks = remote.over_tasks(evidence);
                Some(Arc::new(reaper_core::ghost::plan_ghost_apps(
                    &tasks,
                    valid_since,
                    now,
                    &policy,
                    kill,
                    budget,
                )))
            }
            _ => None,
        };
        ghosts.extend(apps.iter().flat_map(|a| a.iter().cloned()));
        let fresh = ghosts.len();
        if apps.is_none() {
            // an incremental sweep: the last full scan's ghost applications
            // stand (without them /api/v1/ghosts, the gauge and the
            // `detected` records would flap at every full scan)
            ghosts.extend(st.ghost_apps.iter().cloned());
        }
        let ghosts = if memory.is_none() && ghosts.is_empty() {
            None
        } else {
            let memory = memory.unwrap_or_else(|| st.ghosts.memory.clone());
            Some((Arc::new(ghosts), memory))
        };
        PlannedGhosts {
            ghosts,
            fresh,
            apps,
            orders,
        }
    }
}

/// The ghost planners' result: the ghosts to show (the first `fresh` judged
/// this sweep), the ghost applications judged this sweep, the orders read.
struct PlannedGhosts {
    ghosts: Option<Ghosts>,
    fresh: usize,
    apps: Option<Arc<Vec<Ghost>>>,
    orders: Option<Vec<reaper_core::ports::OrderNode>>,
}

/// Why nothing is judged on an invalid view.
fn invalid(view: &RegistryView) -> Option<String> {
    match &view.state {
        ViewState::Invalid { reason, .. } => Some(format!("registry view invalid: {reason}")),
        ViewState::Valid { .. } => None,
    }
}

impl Judgement {
    /// The effects the plan asks for, in the order they are carried out:
    /// the live applications of the tasks about to be written (with
    /// `kill_remote_apps`), the task batch, the workflow recovers, the kill
    /// orders. `check` asks for none.
    pub fn effects(&self, kill_remote_apps: bool) -> Vec<Effect<'_>> {
        if self.mode == Mode::Check {
            return Vec::new();
        }
        let acting: Vec<&Zombie> = self
            .zombies
            .iter()
            .filter(|z| z.disposition == Disposition::Act)
            .collect();
        let mut effects = Vec::new();
        if kill_remote_apps {
            for z in &acting {
                let live = reaper_core::remote::live_ids(z);
                for app in z
                    .evidence
                    .remote_apps
                    .iter()
                    .filter(|a| live.contains(&a.id))
                {
                    effects.push(Effect::KillRemoteApp {
                        target: RemoteTarget::Zombie(z),
                        app,
                    });
                }
            }
        }
        if !acting.is_empty() {
            effects.push(Effect::TaskBatch(
                acting
                    .into_iter()
                    .map(|zombie| Item {
                        zombie,
                        forced: false,
                    })
                    .collect(),
            ));
        }
        for finding in self
            .workflows
            .iter()
            .filter(|f| f.disposition == Disposition::Act)
        {
            effects.push(Effect::Recover {
                finding,
                forced: false,
            });
        }
        for ghost in self
            .ghosts
            .iter()
            .flat_map(|(g, _)| g.iter().take(self.fresh_ghosts))
            .filter(|g| g.disposition == Disposition::Act)
        {
            // its live applications (SPEC §17), then its processes
            let apps = ghost
                .remote_apps
                .iter()
                .filter(|a| a.phase() == AppPhase::Live);
            for app in apps.filter(|_| kill_remote_apps) {
                effects.push(Effect::KillRemoteApp {
                    target: RemoteTarget::Ghost(ghost),
                    app,
                });
            }
            if !ghost.processes.is_empty() {
                effects.push(Effect::KillOrder {
                    ghost,
                    folder: super::ghosts::folder(&self.view, ghost),
                });
            }
        }
        effects
    }
}

/// What `check` found: one sweep's judgement, nothing carried out.
#[derive(Debug, Clone)]
pub struct Checked {
    pub line: DsLine,
    pub at: Instant,
    pub candidates: usize,
    pub zombies: Vec<Zombie>,
    pub workflows: Vec<WorkflowFinding>,
    pub ghosts: Vec<Ghost>,
    pub anomalies: Vec<reaper_core::anomaly::Anomaly>,
    /// The brake as the judgement left it.
    pub brake: reaper_core::BrakeState,
}

impl From<Judgement> for Checked {
    fn from(j: Judgement) -> Checked {
        Checked {
            line: j.line,
            at: j.now,
            candidates: j.candidates,
            zombies: j.zombies.to_vec(),
            workflows: j.workflows.to_vec(),
            ghosts: j.ghosts.map(|(g, _)| g.to_vec()).unwrap_or_default(),
            anomalies: j.anomalies.anomalies,
            brake: j.next.brake,
        }
    }
}
