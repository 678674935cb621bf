//! The planner: `plan(view, candidates, now, policy, state) -> Plan`.
//!
//! Pure and deterministic: the same inputs give the same plan, including the
//! next brake and rate-limit state, which the caller stores only if it acts.

use crate::brake::{self, BrakeState};
use crate::candidate::Candidate;
use crate::host;
use crate::line::DsLine;
use crate::policy::{Action, FollowUp, Policy, RuleFacts, UnseenAbsence};
use crate::rate::TokenBucket;
use crate::reason::{Evidence, Reason};
use crate::view::{NodeKind, RegistryView};
use crate::{delta, Instant};
use serde::{Deserialize, Serialize};

/// What the plan remembers between sweeps, plus holds set by the daemon.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SafetyState {
    pub brake: BrakeState,
    /// None until the first plan: the bucket then starts full.
    pub bucket: Option<TokenBucket>,
    /// When set, nothing is written and this says why (not the leader, the
    /// detected DS line disagrees with itself, ...).
    pub hold: Option<String>,
    /// SPEC §12: per task, since when a fresh agent's reports lack its
    /// process (the daemon's clock).
    #[serde(default)]
    pub missing_since: std::collections::BTreeMap<i64, Instant>,
}

/// The note of a zombie whose process a fresh agent still lists.
pub const PROCESS_ALIVE: &str = "process_alive";

/// Why an action the policy asked for is not taken in this sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "blocked", content = "why")]
pub enum Blocked {
    /// Inside `startup_settle` after the view became valid.
    Settling,
    /// A hold set by the daemon (see [`SafetyState::hold`]).
    Hold(String),
    Brake(String),
    /// `max_actions_per_sweep` reached.
    SweepCap,
    /// The per-minute token bucket is empty.
    RateLimit,
    /// The action's state code does not exist on the line (never written).
    Unwritable,
    /// A fresh agent lists the task's process (SPEC §12): never acted on for
    /// a lost, restarted or stale worker while it runs.
    ProcessAlive,
    /// A SUB_PROCESS task whose child workflow instance is not finished
    /// (SPEC §3): the child is the task's process.
    ChildWorkflowRunning,
    /// One of the task's YARN applications may still run (SPEC §17).
    RemoteAppRunning,
    /// The ResourceManager could not say whether the task's applications
    /// run (SPEC §17).
    RemoteAppUnknown,
}

/// The note of a SUB_PROCESS task whose child workflow still runs.
pub const CHILD_WORKFLOW_RUNNING: &str = "child_workflow_running";

/// The note of a recover skipped while DS fails the owning master over.
pub const DS_FAILOVER_IN_PROGRESS: &str = "ds_failover_in_progress";

impl Blocked {
    pub fn describe(&self) -> String {
        match self {
            Blocked::Settling => "registry view is settling (startup_settle)".into(),
            Blocked::Hold(w) => format!("held: {w}"),
            Blocked::Brake(w) => format!("brake engaged: {w}"),
            Blocked::SweepCap => "max_actions_per_sweep reached".into(),
            Blocked::RateLimit => "rate limit (rate.per_minute) reached".into(),
            Blocked::Unwritable => "the action's state code does not exist on this DS line".into(),
            Blocked::ProcessAlive => PROCESS_ALIVE.into(),
            Blocked::ChildWorkflowRunning => CHILD_WORKFLOW_RUNNING.into(),
            Blocked::RemoteAppRunning => crate::remote::REMOTE_APP_RUNNING.into(),
            Blocked::RemoteAppUnknown => crate::remote::REMOTE_APP_UNKNOWN.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Write now.
    Act,
    /// Policy says `report`: nothing to write.
    Report,
    /// Policy wants a write but a safety rule holds it back.
    Blocked(Blocked),
}

/// A candidate found to be a zombie, with everything `check` and the API show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Zombie {
    pub task: Candidate,
    /// Canonical name of the row's state on the line.
    pub state_name: String,
    pub reason: Reason,
    pub evidence: Evidence,
    /// The workflow's owning master (its `host`), None when `NULL`/empty.
    pub owner_master: Option<String>,
    pub owner_master_alive: bool,
    pub action: Action,
    pub workflow: FollowUp,
    /// Why the action or follow-up was downgraded, if it was.
    pub note: Option<String>,
    pub disposition: Disposition,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub at: Instant,
    /// Set when the view is invalid: no zombie is judged at all.
    pub view_invalid: Option<String>,
    pub candidates: usize,
    pub zombies: Vec<Zombie>,
    /// The brake condition seen in this sweep (None = clear).
    pub brake_condition: Option<String>,
    /// The state to keep for the next sweep.
    pub next: SafetyState,
}

impl Plan {
    /// Zombies to write now, in candidate order.
    pub fn actions(&self) -> impl Iterator<Item = &Zombie> {
        self.zombies
            .iter()
            .filter(|z| z.disposition == Disposition::Act)
    }

    pub fn action_count(&self) -> usize {
        self.actions().count()
    }
}

/// Reconciles the registry view with the candidates.
pub fn plan(
    view: &RegistryView,
    candidates: &[Candidate],
    now: Instant,
    policy: &Policy,
    state: &SafetyState,
) -> Plan {
    let bucket = state
        .bucket
        .map(|b| b.refilled(policy.rate_per_minute, now))
        .unwrap_or_else(|| TokenBucket::full(policy.rate_per_minute, now));

    let Some(valid_since) = view.valid_since() else {
        let reason = match &view.state {
            crate::ViewState::Invalid { reason, .. } => reason.clone(),
            crate::ViewState::Valid { .. } => unreachable!("valid_since is None"),
        };
        // Safety rule 1: with no valid view nothing is judged, and the brake
        // keeps whatever it was (it cannot be evaluated either).
        return Plan {
            at: now,
            view_invalid: Some(reason),
            candidates: candidates.len(),
            zombies: Vec::new(),
            brake_condition: None,
            next: SafetyState {
                brake: state.brake.clone(),
                bucket: Some(bucket),
                hold: state.hold.clone(),
                missing_since: state.missing_since.clone(),
            },
        };
    };

    let mut missing = state.missing_since.clone();
    let mut zombies: Vec<Zombie> = candidates
        .iter()
        .filter_map(|c| judge(view, valid_since, c, now, policy, &mut missing))
        .collect();
    // Only rows still live are tracked, so the map stays bounded.
    if !missing.is_empty() {
        let live: std::collections::HashSet<i64> = candidates.iter().map(|c| c.id).collect();
        missing.retain(|id, _| live.contains(id));
    }

    let acting = zombies
        .iter()
        .filter(|z| z.disposition != Disposition::Report)
        .count();
    let condition = brake::condition(view, now, &policy.brake, acting, candidates.len());
    let brake = state.brake.update(condition.clone(), now, &policy.brake);

    let global: Option<Blocked> = if let Some(h) = &state.hold {
        Some(Blocked::Hold(h.clone()))
    } else if brake.engaged() {
        Some(Blocked::Brake(
            brake.why.clone().unwrap_or_else(|| "engaged".into()),
        ))
    } else if now - valid_since < delta(policy.startup_settle) {
        Some(Blocked::Settling)
    } else {
        None
    };

    let mut bucket = bucket;
    let mut taken = 0usize;
    for z in zombies.iter_mut() {
        if z.disposition != Disposition::Act {
            continue;
        }
        z.disposition = if let Some(g) = &global {
            Disposition::Blocked(g.clone())
        } else if taken >= policy.max_actions_per_sweep {
            Disposition::Blocked(Blocked::SweepCap)
        } else if !bucket.try_take() {
            Disposition::Blocked(Blocked::RateLimit)
        } else {
            taken += 1;
            Disposition::Act
        };
    }

    Plan {
        at: now,
        view_invalid: None,
        candidates: candidates.len(),
        zombies,
        brake_condition: condition,
        next: SafetyState {
            brake,
            bucket: Some(bucket),
            hold: state.hold.clone(),
            missing_since: missing,
        },
    }
}

/// How long a host has been absent, by the daemon's clock, and how long of
/// that counts against the grace period. A host the daemon never saw counts
/// from the later of the view becoming valid and the task's own time: a task
/// dispatched to a worker that registered (and maybe left) after the daemon's
/// last look gets the full grace period (SPEC §3). A task given to a host
/// after the daemon saw it go gets the full grace from its own time too: a
/// live master dispatched it from a stale worker list after DS's failover of
/// that host had run, and a frozen worker (real DS 3.1.1, SIGSTOP past its
/// session; tests/real-ds/FINDINGS.md §8) picks such a task up when it thaws.
fn absence(
    view: &RegistryView,
    kind: NodeKind,
    raw_host: &str,
    valid_since: Instant,
    task_time: Option<Instant>,
    now: Instant,
    policy: &Policy,
) -> Absence {
    match view.lost_at(kind, raw_host) {
        Some(at) => Absence {
            lost_at: Some(at),
            absent: Some(now - at),
            counted: Some(now - task_time.map_or(at, |t| t.max(at))),
        },
        None => match policy.unseen_absence {
            UnseenAbsence::SinceViewValid => {
                let from = task_time.map_or(valid_since, |t| t.max(valid_since));
                Absence {
                    lost_at: None,
                    absent: Some(now - from),
                    counted: Some(now - from),
                }
            }
            UnseenAbsence::Unknown => Absence {
                lost_at: None,
                absent: None,
                counted: None,
            },
        },
    }
}

/// A host's absence as [`absence`] measures it.
struct Absence {
    /// When the daemon saw the host go.
    lost_at: Option<Instant>,
    /// How long it has been absent (evidence); None: for an unknown time.
    absent: Option<chrono::TimeDelta>,
    /// How much of that counts against the grace period for this task.
    counted: Option<chrono::TimeDelta>,
}

impl Absence {
    /// Within the grace period: not (yet) a zombie.
    fn within(&self, grace: chrono::TimeDelta) -> bool {
        self.counted.is_some_and(|a| a < grace)
    }
}

/// Decides whether one candidate is a zombie, and if so what to do with it.
fn judge(
    view: &RegistryView,
    valid_since: Instant,
    c: &Candidate,
    now: Instant,
    policy: &Policy,
    missing: &mut std::collections::BTreeMap<i64, Instant>,
) -> Option<Zombie> {
    // Safety rule 8: finished rows are never ours, whatever the query returned.
    if DsLine::is_finished_task_state(c.state) {
        return None;
    }
    let grace = delta(policy.grace_period);
    let task_time = c.submit_time.or(c.start_time);
    let mut evidence = Evidence {
        task_time,
        ..Evidence::default()
    };
    let host = c.host.as_deref().filter(|h| !host::is_empty(Some(h)));

    let reason = if policy.line.is_logic_task(&c.task_type) {
        // Logic tasks run in the master: never judged against workers and
        // never `no_host`. A row without a host (SUB_PROCESS on 1.2-2.0 has
        // none for its whole life) belongs to the master running its
        // workflow; with no such host DS's own master failover owns it.
        let workflow_host = c
            .workflow_host
            .as_deref()
            .filter(|h| !host::is_empty(Some(h)));
        let master = host.or(workflow_host)?;
        if view.live(NodeKind::Master, master).is_some() {
            return None;
        }
        let a = absence(
            view,
            NodeKind::Master,
            master,
            valid_since,
            task_time,
            now,
            policy,
        );
        if a.within(grace) {
            return None;
        }
        evidence.lost_at = a.lost_at;
        evidence.absent_for_seconds = a.absent.map(|a| a.num_seconds());
        Reason::MasterLost
    } else if let Some(raw) = host {
        if let Some(node) = view.live(NodeKind::Worker, raw) {
            evidence.startup_time = node.startup_time;
            evidence.report_time = node.report_time;
            let restarted = match (node.startup_time, task_time) {
                (Some(st), Some(tt)) => st > tt + delta(policy.clock_skew_tolerance),
                _ => false,
            };
            if restarted {
                Reason::WorkerRestarted
            } else if node
                .report_time
                .is_some_and(|rt| rt < now - delta(policy.heartbeat_stale_after))
            {
                Reason::HeartbeatStale
            } else if process_gone(view, raw, c, now, policy, missing, &mut evidence) {
                Reason::ProcessGone
            } else {
                return None;
            }
        } else if view.live(NodeKind::Master, raw).is_some() {
            // A worker-type task whose host is a live master is not ours to
            // judge (reference §7: exclude registered masters).
            return None;
        } else {
            let a = absence(
                view,
                NodeKind::Worker,
                raw,
                valid_since,
                task_time,
                now,
                policy,
            );
            if a.within(grace) {
                return None;
            }
            evidence.lost_at = a.lost_at;
            evidence.absent_for_seconds = a.absent.map(|a| a.num_seconds());
            Reason::WorkerLost
        }
    } else {
        let t = task_time?;
        if now - t < delta(policy.no_host_after) {
            return None;
        }
        Reason::NoHost
    };

    if reason != Reason::ProcessGone {
        missing.remove(&c.id);
    }
    let agent = c.host.as_deref().and_then(|h| agent_of(view, h));
    if let Some(a) = agent {
        evidence.process_seen_at = a.listed_at.get(&c.id).copied();
    }
    // SPEC §12: a recent listing is positive evidence that the process runs,
    // whatever became of the agent or its worker since.
    let process_alive = policy.hold_while_process_alive
        && matches!(
            reason,
            Reason::WorkerLost | Reason::WorkerRestarted | Reason::HeartbeatStale
        )
        && agent.is_some_and(|a| a.holds(c.id, now, policy.agent_stale_after));
    let child_running = policy.line.is_sub_process_task(&c.task_type)
        && c.child_workflow_state
            .is_some_and(|s| policy.line.workflow_non_terminal_states().contains(&s));

    let (owner_master, owner_master_alive) = owner_master(view, c);

    let facts = RuleFacts {
        reason,
        worker_group: c.worker_group.as_deref(),
        task_type: &c.task_type,
        project_code: c.project_code,
        owner_master_alive,
    };
    let (action, mut workflow) = policy.decide(&facts);
    let mut note = None;

    let disposition = match action.target_state() {
        None => {
            workflow = FollowUp::None;
            Disposition::Report
        }
        Some(code) if !policy.line.can_write(code) => Disposition::Blocked(Blocked::Unwritable),
        Some(_) if child_running => Disposition::Blocked(Blocked::ChildWorkflowRunning),
        Some(_) if process_alive => Disposition::Blocked(Blocked::ProcessAlive),
        Some(_) => Disposition::Act,
    };
    if process_alive {
        note = Some(PROCESS_ALIVE.to_string());
    }
    if child_running {
        // DS's recovery would set the running child back to RUNNING and
        // queue it again: no follow-up either.
        note = Some(CHILD_WORKFLOW_RUNNING.to_string());
        workflow = FollowUp::None;
    }

    if workflow != FollowUp::None && c.workflow_instance_id.is_none() {
        note = Some("the task row has no workflow instance id; no workflow follow-up".into());
        workflow = FollowUp::None;
    }
    if workflow == FollowUp::Recover && owner_master_alive {
        note = Some(recover_skipped_note(
            policy.line,
            owner_master.as_deref().unwrap_or_default(),
        ));
        workflow = FollowUp::None;
    }
    if workflow == FollowUp::Recover
        && policy.line.failover_writes_unconditionally()
        && owner_master
            .as_deref()
            .is_some_and(|m| view.ds_failover_in_progress(m, now, policy.startup_settle))
    {
        note = Some(DS_FAILOVER_IN_PROGRESS.to_string());
        workflow = FollowUp::None;
    }

    Some(Zombie {
        state_name: policy
            .line
            .state_name(c.state)
            .unwrap_or("UNKNOWN")
            .to_string(),
        task: c.clone(),
        reason,
        evidence,
        owner_master,
        owner_master_alive,
        action,
        workflow,
        note,
        disposition,
    })
}

/// The agent of the worker a (raw) task host names, live or lost.
fn agent_of<'a>(view: &'a RegistryView, raw_host: &str) -> Option<&'a crate::agent::AgentSeen> {
    let name = view.resolve(NodeKind::Worker, raw_host);
    view.agents.get(name.as_ref()).map(|a| &**a)
}

/// SPEC §12 `process_gone` for a task on a live worker: seen, then gone. A
/// RUNNING task with a process of its own, which a report of its worker's
/// fresh agent listed in the current freshness streak, and which every
/// complete report since has lacked for `process_gone_after`. DS writes
/// RUNNING before the process exists (the worker acks, then queues the task,
/// creates the tenant, downloads resources), so a task never listed is never
/// missing. The clock starts at the arrival of the first complete report after
/// the last listing; it is kept in `missing` across sweeps and restarts when a
/// report lists the task again or the agent's freshness has a gap.
fn process_gone(
    view: &RegistryView,
    raw_host: &str,
    c: &Candidate,
    now: Instant,
    policy: &Policy,
    missing: &mut std::collections::BTreeMap<i64, Instant>,
    evidence: &mut Evidence,
) -> bool {
    let running = policy.line.state_code("RUNNING_EXECUTION") == Some(c.state);
    let agent = agent_of(view, raw_host).filter(|a| a.fresh(now, policy.agent_stale_after));
    let judged = |a: &crate::agent::AgentSeen| {
        running
            && policy.has_process(&c.task_type)
            && a.report
                .as_ref()
                .is_some_and(|r| under_exec_base(c.execute_path.as_deref(), &r.exec_base))
    };
    let Some(agent) = agent.filter(|a| judged(a)) else {
        missing.remove(&c.id);
        return false;
    };
    let listed = match agent.listed_in_streak(c.id) {
        Some(l) if !agent.report.as_ref().is_some_and(|r| r.lists(c.id)) => l,
        _ => {
            missing.remove(&c.id);
            return false;
        }
    };
    // The first complete report after the listing; the history may have
    // rolled past it, and the latest complete report is then a later (safe)
    // start.
    let first = agent
        .history
        .iter()
        .map(|m| m.received_at)
        .find(|at| *at > listed)
        .or(agent.complete_at.filter(|at| *at > listed));
    let kept = missing.get(&c.id).copied().filter(|m| *m > listed);
    let since = match (kept, first) {
        (Some(k), Some(f)) => k.min(f),
        (k, f) => match k.or(f) {
            Some(x) => x,
            None => {
                missing.remove(&c.id);
                return false;
            }
        },
    };
    missing.insert(c.id, since);
    evidence.process_missing_since = Some(since);
    now - since >= delta(policy.process_gone_after)
}

/// SPEC §12: a row's `execute_path` outside the agent's `exec_base` is never
/// judged by its process (the agent does not look there). No path: judged.
fn under_exec_base(execute_path: Option<&str>, exec_base: &str) -> bool {
    let Some(path) = execute_path.map(str::trim).filter(|p| !p.is_empty()) else {
        return true;
    };
    let base = exec_base.trim().trim_end_matches('/');
    if base.is_empty() {
        return false;
    }
    path == base
        || path
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The owning master of a task's workflow (its `host`, None when
/// `NULL`/empty) and whether it is live in the view: the one owner rule.
pub fn owner_master(view: &RegistryView, c: &Candidate) -> (Option<String>, bool) {
    let owner = c
        .workflow_host
        .as_deref()
        .filter(|h| !host::is_empty(Some(h)))
        .map(|h| host::normalize(h).into_owned());
    let alive = owner
        .as_deref()
        .is_some_and(|h| view.live(NodeKind::Master, h).is_some());
    (owner, alive)
}

/// Why `recover` is not taken while the owning master lives (SPEC §5): on
/// every line a second command would run the workflow twice.
pub fn recover_skipped_note(line: DsLine, master: &str) -> String {
    if line.master_rereads_db() {
        format!("owning master {master} is alive and runs the workflow in a thread of its own; recover skipped")
    } else {
        format!("owning master {master} is alive and holds the workflow in memory; recover skipped")
    }
}

#[cfg(test)]
mod gaps;
#[cfg(test)]
mod process;
#[cfg(test)]
mod tests;
