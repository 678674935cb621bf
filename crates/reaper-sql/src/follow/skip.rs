//! Why a workflow write is not made, on the row as locked now: the follow-up
//! and `recover` answer it as their `Skipped` outcome.

use crate::schema::int_list;
use reaper_core::plan::CHILD_WORKFLOW_RUNNING;
use reaper_core::DsLine;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoWrite {
    #[error("workflow instance {wf_id} has no state")]
    NoState { wf_id: i64 },
    #[error("workflow instance {wf_id} is in DS's own failover state {state} (FAILOVER)")]
    InFailover { wf_id: i64, state: i32 },
    #[error("a command for workflow instance {wf_id} is already queued in t_ds_command")]
    Queued { wf_id: i64 },
    /// A parent never ends before its child (SPEC §13).
    #[error(
        "{CHILD_WORKFLOW_RUNNING}: child workflow instance {child} of workflow instance {wf_id} \
         is in state {state}; not recovered before its child ends"
    )]
    ChildRunning { wf_id: i64, child: i64, state: i32 },
    #[error(
        "workflow instance {wf_id} is held by live master {master}; recover runs only when no \
         live master holds it"
    )]
    LiveOwner { wf_id: i64, master: String },
    #[error("workflow instance {wf_id} has no definition code")]
    NoDefinitionCode { wf_id: i64 },
    #[error(
        "workflow instance {wf_id} is in state {state}; DS's own master failover on line {line} \
         handles only {}",
        int_list(handled)
    )]
    NotHandled {
        wf_id: i64,
        state: i32,
        line: DsLine,
        handled: &'static [i32],
    },
    /// 3.3 recovers a workflow in a non-terminal state or FAILURE only.
    #[error("workflow instance {wf_id} is in state {state}, not recoverable")]
    NotRecoverable { wf_id: i64, state: i32 },
    #[error("workflow instance {wf_id} is in terminal state {state}, not FAILURE")]
    NotFailure { wf_id: i64, state: i32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reasons_read_as_before() {
        let child = NoWrite::ChildRunning {
            wf_id: 10,
            child: 11,
            state: 1,
        };
        assert_eq!(
            child.to_string(),
            "child_workflow_running: child workflow instance 11 of workflow instance 10 is in \
             state 1; not recovered before its child ends"
        );
        let handled = NoWrite::NotHandled {
            wf_id: 10,
            state: 7,
            line: DsLine::V3_2,
            handled: &[1, 2, 4],
        };
        assert_eq!(
            handled.to_string(),
            "workflow instance 10 is in state 7; DS's own master failover on line 3.2 handles \
             only 1,2,4"
        );
    }
}
