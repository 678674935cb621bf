//! One candidate judged (SPEC §3, §12): its reason, the host's absence,
//! the process evidence of the agents, and what holds the action back.

use super::{
    owner_master, recover_skipped_note, Blocked, Disposition, Zombie, CHILD_WORKFLOW_RUNNING,
    DS_FAILOVER_IN_PROGRESS, PROCESS_ALIVE,
};
use crate::candidate::Candidate;
use crate::host;
use crate::line::DsLine;
use crate::policy::{FollowUp, Policy, RuleFacts, UnseenAbsence};
use crate::reason::{Evidence, Reason};
use crate::view::{NodeKind, RegistryView};
use crate::{delta, Instant};
use std::collections::BTreeMap;

/// What one judgement looks at, besides the candidate.
struct Look<'a> {
    view: &'a RegistryView,
    valid_since: Instant,
    now: Instant,
    policy: &'a Policy,
}

/// Decides whether one candidate is a zombie, and if so what to do with it.
pub(super) fn judge(
    view: &RegistryView,
    valid_since: Instant,
    c: &Candidate,
    now: Instant,
    policy: &Policy,
    missing: &mut BTreeMap<i64, Instant>,
) -> Option<Zombie> {
    // Safety rule 8: finished rows are never ours, whatever the query returned.
    if DsLine::is_finished_task_state(c.state) {
        return None;
    }
    let look = Look {
        view,
        valid_since,
        now,
        policy,
    };
    let mut evidence = Evidence {
        task_time: c.submit_time.or(c.start_time),
        ..Evidence::default()
    };
    let reason = reason(&look, c, missing, &mut evidence)?;
    if reason != Reason::ProcessGone {
        missing.remove(&c.id);
    }
    Some(zombie(&look, c, reason, evidence))
}

/// The one reason a candidate is a zombie (SPEC §3), or None.
fn reason(
    look: &Look<'_>,
    c: &Candidate,
    missing: &mut BTreeMap<i64, Instant>,
    evidence: &mut Evidence,
) -> Option<Reason> {
    let host = c.host.as_deref().filter(|h| !host::is_empty(Some(h)));
    if look.policy.line.is_logic_task(&c.task_type) {
        // Logic tasks run in the master: never judged against workers and
        // never `no_host`. A row without a host (SUB_PROCESS on 1.2-2.0 has
        // none for its whole life) belongs to the master running its
        // workflow; with no such host DS's own master failover owns it.
        let workflow_host = c
            .workflow_host
            .as_deref()
            .filter(|h| !host::is_empty(Some(h)));
        let master = host.or(workflow_host)?;
        if look.view.live(NodeKind::Master, master).is_some() {
            return None;
        }
        lost(look, NodeKind::Master, master, evidence).then_some(Reason::MasterLost)
    } else if let Some(raw) = host {
        on_worker(look, c, raw, missing, evidence)
    } else {
        let t = evidence.task_time?;
        (look.now - t >= delta(look.policy.no_host_after)).then_some(Reason::NoHost)
    }
}

/// A worker-type task with a host: its worker restarted, went stale or
/// lost the process, or is gone past the grace period.
fn on_worker(
    look: &Look<'_>,
    c: &Candidate,
    raw: &str,
    missing: &mut BTreeMap<i64, Instant>,
    evidence: &mut Evidence,
) -> Option<Reason> {
    let (view, now, policy) = (look.view, look.now, look.policy);
    if let Some(node) = view.live(NodeKind::Worker, raw) {
        evidence.startup_time = node.startup_time;
        evidence.report_time = node.report_time;
        let restarted = match (node.startup_time, evidence.task_time) {
            (Some(st), Some(tt)) => st > tt + delta(policy.clock_skew_tolerance),
            _ => false,
        };
        if restarted {
            Some(Reason::WorkerRestarted)
        } else if node.report_time.is_some_and(|rt| {
            // A task the worker took after its last heartbeat (a RUNNING or
            // DISPATCH row submitted later) is a later sign of life: the
            // heartbeat says nothing about it, so its age counts from the
            // later of the two. Found by the soak (seed 2): a worker that
            // resumes from a hang takes a task before its next heartbeat, and
            // the stale one failed the new, live task. Nor does a heartbeat
            // that went stale while the daemon could not see the registry
            // prove anything (as absence clocks, §4.1): in the soak a
            // ZooKeeper restart left 85 of 87 tasks "stale" on the first
            // listing after it (the brake held).
            let last_sign = evidence
                .task_time
                .map_or(rt, |tt| rt.max(tt))
                .max(look.valid_since);
            last_sign < now - delta(policy.heartbeat_stale_after)
        }) {
            Some(Reason::HeartbeatStale)
        } else if process_gone(view, raw, c, now, policy, missing, evidence) {
            Some(Reason::ProcessGone)
        } else {
            None
        }
    } else if view.live(NodeKind::Master, raw).is_some() {
        // A worker-type task whose host is a live master is not ours to
        // judge (reference §7: exclude registered masters).
        None
    } else {
        lost(look, NodeKind::Worker, raw, evidence).then_some(Reason::WorkerLost)
    }
}

/// Whether an absent host is gone past the grace period for this task; if
/// so, its loss goes into the evidence.
fn lost(look: &Look<'_>, kind: NodeKind, raw: &str, evidence: &mut Evidence) -> bool {
    let a = absence(
        look.view,
        kind,
        raw,
        look.valid_since,
        evidence.task_time,
        look.now,
        look.policy,
    );
    if a.within(delta(look.policy.grace_period)) {
        return false;
    }
    evidence.lost_at = a.lost_at;
    evidence.absent_for_seconds = a.absent.map(|a| a.num_seconds());
    true
}

/// The zombie for a reason: the policy's action and follow-up, and what
/// holds them back (SPEC §4, §5, §12).
fn zombie(look: &Look<'_>, c: &Candidate, reason: Reason, mut evidence: Evidence) -> Zombie {
    let (view, now, policy) = (look.view, look.now, look.policy);
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
    follow_up_holds(
        look,
        c,
        owner_master.as_deref(),
        owner_master_alive,
        &mut workflow,
        &mut note,
    );
    Zombie {
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
    }
}

/// The workflow follow-up dropped (with why in the note) when it cannot or
/// must not be written.
fn follow_up_holds(
    look: &Look<'_>,
    c: &Candidate,
    owner_master: Option<&str>,
    owner_master_alive: bool,
    workflow: &mut FollowUp,
    note: &mut Option<String>,
) {
    let (line, settle) = (look.policy.line, look.policy.startup_settle);
    if *workflow != FollowUp::None && c.workflow_instance_id.is_none() {
        *note = Some("the task row has no workflow instance id; no workflow follow-up".into());
        *workflow = FollowUp::None;
    }
    if *workflow == FollowUp::Recover && owner_master_alive {
        *note = Some(recover_skipped_note(line, owner_master.unwrap_or_default()));
        *workflow = FollowUp::None;
    }
    if *workflow == FollowUp::Recover
        && line.failover_writes_unconditionally()
        && owner_master.is_some_and(|m| look.view.ds_failover_in_progress(m, look.now, settle))
    {
        *note = Some(DS_FAILOVER_IN_PROGRESS.to_string());
        *workflow = FollowUp::None;
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
    missing: &mut BTreeMap<i64, Instant>,
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
