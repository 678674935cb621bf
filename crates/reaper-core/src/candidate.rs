//! A live-state task row as the SQL adapter reads it.

use crate::Instant;
use serde::{Deserialize, Serialize};

/// One `t_ds_task_instance` row with `flag = 1` in a live state, joined with
/// what the planner needs from its workflow instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: i64,
    pub name: String,
    pub task_type: String,
    /// The raw state code as read (the write is conditional on it).
    pub state: i32,
    /// Raw host as read (conditional writes compare it with `<=>`).
    pub host: Option<String>,
    pub submit_time: Option<Instant>,
    pub start_time: Option<Instant>,
    pub worker_group: Option<String>,
    pub project_code: Option<i64>,
    pub workflow_instance_id: Option<i64>,
    /// `host` of the owning workflow instance: the master that owns it.
    pub workflow_host: Option<String>,
    pub workflow_state: Option<i32>,
    /// The row's `execute_path` where the line has the column (1.3, 2.0-3.1)
    /// and DS wrote one: a task whose path is not under the agent's
    /// `exec_base` is never judged by its process (SPEC §12).
    #[serde(default)]
    pub execute_path: Option<String>,
    /// For a SUB_PROCESS / SUB_WORKFLOW task: the state of its child workflow
    /// instance (the line's parent-child relation), when there is one. While
    /// it is non-terminal the task is never acted on (SPEC §3).
    #[serde(default)]
    pub child_workflow_state: Option<i32>,
    /// The task of the definition the row runs (2.0+ `task_code`): two live
    /// rows of one code in one workflow instance are a duplicate (SPEC §16).
    #[serde(default)]
    pub task_code: Option<i64>,
}

impl Candidate {
    /// A minimal row, convenient for tests and the simulator.
    pub fn new(id: i64, task_type: &str, state: i32, host: Option<&str>) -> Self {
        Candidate {
            id,
            name: format!("task-{id}"),
            task_type: task_type.to_string(),
            state,
            host: host.map(str::to_string),
            submit_time: None,
            start_time: None,
            worker_group: None,
            project_code: None,
            workflow_instance_id: None,
            workflow_host: None,
            workflow_state: None,
            execute_path: None,
            child_workflow_state: None,
            task_code: None,
        }
    }
}
