//! What holds a workflow `recover` back: the finding stays, the action
//! becomes `report` with a note saying why (SPEC §13).

use super::{workflow_state_name, WorkflowAction, WorkflowCandidate};
use crate::line::DsLine;
use crate::view::{NodeKind, RegistryView};
use crate::Instant;
use std::time::Duration;

/// `recover` downgraded to `report` (and why) where writing DS's failover
/// rows would not be safe.
pub(super) fn downgraded(
    view: &RegistryView,
    wf: &WorkflowCandidate,
    master: &str,
    now: Instant,
    line: DsLine,
    settle: Duration,
    action: WorkflowAction,
) -> (WorkflowAction, Option<String>) {
    if action != WorkflowAction::Recover {
        return (action, None);
    }
    let report = |note: String| (WorkflowAction::Report, Some(note));
    if !line.master_failover_workflow_states().contains(&wf.state) {
        // recover writes DS's failover rows: for a state DS's failover
        // never picks up, the master taking the command would get a
        // workflow it does not expect.
        return report(format!(
            "workflow state {} ({}) is not one DS's own master failover handles on line {line}; recover downgraded to report",
            wf.state,
            workflow_state_name(wf.state).unwrap_or("UNKNOWN")
        ));
    }
    // A parent never ends before its child (SPEC §13): on the real DS 3.1.1
    // the master taking the recover ended the parent SUCCESS ~30 s before
    // its still-running child. The child is judged on its own.
    if !wf.running_children.is_empty() {
        return report(crate::plan::CHILD_WORKFLOW_RUNNING.to_string());
    }
    // 1.3-3.2: DS's pass writes the workflows it read unconditionally; a
    // write of ours in between means two commands (SPEC §13).
    if line.failover_writes_unconditionally() && view.ds_failover_in_progress(master, now, settle) {
        return report(crate::plan::DS_FAILOVER_IN_PROGRESS.to_string());
    }
    // DS's failover would stop or re-mark tasks it reaches by RPC; we do not.
    if let Some(h) = wf
        .live_task_hosts
        .iter()
        .find(|h| view.live(NodeKind::Worker, h).is_some())
    {
        return report(format!(
            "a task of the workflow is live on the live worker {h}; recover downgraded to report"
        ));
    }
    (action, None)
}
