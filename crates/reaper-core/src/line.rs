//! DolphinScheduler lines (SPEC §2) and what differs between them: state codes,
//! registry layout, heartbeat format, table and column names.
//!
//! Facts come from `shared/reference/dolphinscheduler.md` §1–§3.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A supported DS line. The order is chronological, so `line >= DsLine::V2_0`
/// reads as "2.0 or later".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DsLine {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
    #[serde(rename = "2.0")]
    V2_0,
    #[serde(rename = "3.0")]
    V3_0,
    /// 3.1.0 only: grouped layout and CSV heartbeat, but the 3.1 task enum.
    #[serde(rename = "3.1.0")]
    V3_1_0,
    /// 3.1.1 and later 3.1 releases: flat layout, JSON heartbeat.
    #[serde(rename = "3.1")]
    V3_1,
    #[serde(rename = "3.2")]
    V3_2,
    #[serde(rename = "3.3")]
    V3_3,
}

/// How worker and master nodes are laid out under the registry root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistryLayout {
    /// 1.2.x: `/workers/<ip>`, `/masters/<ip>`.
    Legacy,
    /// 1.3 – 3.1.0: `/nodes/worker/<group>/<ip:port>`, `/nodes/master/<ip:port>`.
    Grouped,
    /// 3.1.1+: `/nodes/worker/<ip:port>`, `/nodes/master/<ip:port>`.
    Flat,
}

impl RegistryLayout {
    pub fn worker_dir(self) -> &'static str {
        match self {
            RegistryLayout::Legacy => "/workers",
            RegistryLayout::Grouped | RegistryLayout::Flat => "/nodes/worker",
        }
    }
    pub fn master_dir(self) -> &'static str {
        match self {
            RegistryLayout::Legacy => "/masters",
            RegistryLayout::Grouped | RegistryLayout::Flat => "/nodes/master",
        }
    }
}

/// The data format of a server node in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeartbeatFormat {
    /// 1.2.x: 7 CSV fields, local date-time strings.
    Csv7,
    /// 1.3.x: 10 CSV fields, local date-time strings.
    Csv10,
    /// 2.0.x / 3.0.x / 3.1.0: 13 or 14 CSV fields, epoch milliseconds.
    CsvEpoch,
    /// 3.1.1+: JSON, `serverStatus` an int.
    Json31,
    /// 3.2+: JSON, `serverStatus` a name.
    Json32,
}

/// A task state as DS spells it on one line, with the canonical name we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateDef {
    pub code: i32,
    /// The modern spelling, accepted in `reconcile.states` on every line.
    pub name: &'static str,
    /// How the line's own enum spells it (1.x has typos we must accept).
    pub line_name: &'static str,
}

const fn s(code: i32, name: &'static str) -> StateDef {
    StateDef {
        code,
        name,
        line_name: name,
    }
}
const fn sl(code: i32, name: &'static str, line_name: &'static str) -> StateDef {
    StateDef {
        code,
        name,
        line_name,
    }
}

/// 1.2.0, 1.2.1 and 1.3.0 spell code 1 `RUNNING_EXEUTION`; 1.3.9 fixed it,
/// but the "1.3" line covers both, so both spellings are accepted everywhere.
const STATES_1X: &[StateDef] = &[
    s(0, "SUBMITTED_SUCCESS"),
    sl(1, "RUNNING_EXECUTION", "RUNNING_EXEUTION"),
    s(2, "READY_PAUSE"),
    s(3, "PAUSE"),
    s(4, "READY_STOP"),
    s(5, "STOP"),
    s(6, "FAILURE"),
    s(7, "SUCCESS"),
    s(8, "NEED_FAULT_TOLERANCE"),
    s(9, "KILL"),
    sl(10, "WAITING_THREAD", "WAITTING_THREAD"),
    sl(11, "WAITING_DEPEND", "WAITTING_DEPEND"),
];

const STATES_20: &[StateDef] = &[
    s(0, "SUBMITTED_SUCCESS"),
    s(1, "RUNNING_EXECUTION"),
    s(2, "READY_PAUSE"),
    s(3, "PAUSE"),
    s(4, "READY_STOP"),
    s(5, "STOP"),
    s(6, "FAILURE"),
    s(7, "SUCCESS"),
    s(8, "NEED_FAULT_TOLERANCE"),
    s(9, "KILL"),
    s(10, "WAITING_THREAD"),
    s(11, "WAITING_DEPEND"),
    s(12, "DELAY_EXECUTION"),
    s(13, "FORCED_SUCCESS"),
];

const STATES_30: &[StateDef] = &[
    s(0, "SUBMITTED_SUCCESS"),
    s(1, "RUNNING_EXECUTION"),
    s(2, "READY_PAUSE"),
    s(3, "PAUSE"),
    s(4, "READY_STOP"),
    s(5, "STOP"),
    s(6, "FAILURE"),
    s(7, "SUCCESS"),
    s(8, "NEED_FAULT_TOLERANCE"),
    s(9, "KILL"),
    s(10, "WAITING_THREAD"),
    s(11, "WAITING_DEPEND"),
    s(12, "DELAY_EXECUTION"),
    s(13, "FORCED_SUCCESS"),
    s(14, "SERIAL_WAIT"),
    s(15, "READY_BLOCK"),
    s(16, "BLOCK"),
    s(17, "DISPATCH"),
];

/// `TaskExecutionStatus` of 3.1.0 (no STOP yet).
const STATES_310: &[StateDef] = &[
    s(0, "SUBMITTED_SUCCESS"),
    s(1, "RUNNING_EXECUTION"),
    s(3, "PAUSE"),
    s(6, "FAILURE"),
    s(7, "SUCCESS"),
    s(8, "NEED_FAULT_TOLERANCE"),
    s(9, "KILL"),
    s(12, "DELAY_EXECUTION"),
    s(13, "FORCED_SUCCESS"),
    s(17, "DISPATCH"),
];

/// `TaskExecutionStatus` of 3.1.9 and 3.2.x (STOP added by #14016).
const STATES_31: &[StateDef] = &[
    s(0, "SUBMITTED_SUCCESS"),
    s(1, "RUNNING_EXECUTION"),
    s(3, "PAUSE"),
    s(5, "STOP"),
    s(6, "FAILURE"),
    s(7, "SUCCESS"),
    s(8, "NEED_FAULT_TOLERANCE"),
    s(9, "KILL"),
    s(12, "DELAY_EXECUTION"),
    s(13, "FORCED_SUCCESS"),
    s(17, "DISPATCH"),
];

/// dev / 3.3: STOP removed again by DSIP-61.
const STATES_33: &[StateDef] = STATES_310;

/// Codes of finished task states on every line: PAUSE, STOP, FAILURE, SUCCESS,
/// KILL, FORCED_SUCCESS. NEED_FAULT_TOLERANCE is deliberately *not* finished:
/// DS still owns such a row (it re-submits it), so a workflow with one is not
/// "done" for the `workflow = fail` follow-up.
pub const FINISHED_TASK_CODES: &[i32] = &[3, 5, 6, 7, 9, 13];

pub const FAILURE: i32 = 6;
pub const NEED_FAULT_TOLERANCE: i32 = 8;
pub const KILL: i32 = 9;

/// Task types that run inside the master; their `host` is a master address.
pub const LOGIC_TASK_TYPES: &[&str] = &[
    "CONDITIONS",
    "DEPENDENT",
    "SUB_PROCESS",
    "SUB_WORKFLOW",
    "SWITCH",
    "DYNAMIC",
    "BLOCKING",
];

/// Task types DS runs as a process of their own on the worker, started
/// with the execute path as working directory (reference §2.1). SQL,
/// PROCEDURE, HTTP and the logic tasks run inside the worker or master JVM.
pub const COMMAND_TASK_TYPES: &[&str] = &[
    "SHELL",
    "PYTHON",
    "SPARK",
    "FLINK",
    "FLINK_STREAM",
    "MR",
    "DATAX",
    "SQOOP",
    "HIVECLI",
    "JAVA",
    "SEATUNNEL",
    "PYTORCH",
    "MLFLOW",
    "JUPYTER",
    "DVC",
    "OPENMLDB",
    "CHUNJUN",
    "LINKIS",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown DolphinScheduler line {0:?} (expected one of 1.2, 1.3, 2.0, 3.0, 3.1.0, 3.1, 3.2, 3.3)")]
pub struct UnknownLine(pub String);

impl DsLine {
    pub const ALL: [DsLine; 8] = [
        DsLine::V1_2,
        DsLine::V1_3,
        DsLine::V2_0,
        DsLine::V3_0,
        DsLine::V3_1_0,
        DsLine::V3_1,
        DsLine::V3_2,
        DsLine::V3_3,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DsLine::V1_2 => "1.2",
            DsLine::V1_3 => "1.3",
            DsLine::V2_0 => "2.0",
            DsLine::V3_0 => "3.0",
            DsLine::V3_1_0 => "3.1.0",
            DsLine::V3_1 => "3.1",
            DsLine::V3_2 => "3.2",
            DsLine::V3_3 => "3.3",
        }
    }

    /// The releases a line stands for, for `ds-reaper version`.
    pub fn releases(self) -> &'static str {
        match self {
            DsLine::V1_2 => "1.2.x",
            DsLine::V1_3 => "1.3.x",
            DsLine::V2_0 => "2.0.x",
            DsLine::V3_0 => "3.0.x",
            DsLine::V3_1_0 => "3.1.0",
            DsLine::V3_1 => "3.1.1 - 3.1.x",
            DsLine::V3_2 => "3.2.x",
            DsLine::V3_3 => "3.3 (dev)",
        }
    }

    pub fn layout(self) -> RegistryLayout {
        match self {
            DsLine::V1_2 => RegistryLayout::Legacy,
            DsLine::V1_3 | DsLine::V2_0 | DsLine::V3_0 | DsLine::V3_1_0 => RegistryLayout::Grouped,
            DsLine::V3_1 | DsLine::V3_2 | DsLine::V3_3 => RegistryLayout::Flat,
        }
    }

    pub fn heartbeat_format(self) -> HeartbeatFormat {
        match self {
            DsLine::V1_2 => HeartbeatFormat::Csv7,
            DsLine::V1_3 => HeartbeatFormat::Csv10,
            DsLine::V2_0 | DsLine::V3_0 | DsLine::V3_1_0 => HeartbeatFormat::CsvEpoch,
            DsLine::V3_1 => HeartbeatFormat::Json31,
            DsLine::V3_2 | DsLine::V3_3 => HeartbeatFormat::Json32,
        }
    }

    /// The task state enum of the line.
    pub fn task_states(self) -> &'static [StateDef] {
        match self {
            DsLine::V1_2 | DsLine::V1_3 => STATES_1X,
            DsLine::V2_0 => STATES_20,
            DsLine::V3_0 => STATES_30,
            DsLine::V3_1_0 => STATES_310,
            DsLine::V3_1 | DsLine::V3_2 => STATES_31,
            DsLine::V3_3 => STATES_33,
        }
    }

    /// Maps a canonical (or the line's own) state name to the line's code.
    pub fn state_code(self, name: &str) -> Option<i32> {
        let name = name.trim();
        self.task_states()
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name) || d.line_name.eq_ignore_ascii_case(name))
            .map(|d| d.code)
    }

    /// The canonical name of a code on this line, if the line has it.
    pub fn state_name(self, code: i32) -> Option<&'static str> {
        self.task_states()
            .iter()
            .find(|d| d.code == code)
            .map(|d| d.name)
    }

    /// Safety rule 3: only codes of the line's own enum may be written.
    pub fn can_write(self, code: i32) -> bool {
        self.state_name(code).is_some()
    }

    /// `reconcile.states` when unset: RUNNING_EXECUTION, plus DISPATCH where the line has it.
    pub fn default_live_states(self) -> Vec<i32> {
        let mut v = vec![1];
        if self.state_code("DISPATCH").is_some() {
            v.push(17);
        }
        v
    }

    pub fn is_finished_task_state(code: i32) -> bool {
        FINISHED_TASK_CODES.contains(&code)
    }

    /// Workflow states DS treats as not terminal on this line (codes).
    pub fn workflow_non_terminal_states(self) -> &'static [i32] {
        match self {
            DsLine::V1_2 | DsLine::V1_3 => &[0, 1, 2, 4, 10, 11],
            DsLine::V2_0 => &[0, 1, 2, 4, 10, 11, 12],
            DsLine::V3_0 => &[0, 1, 2, 4, 10, 11, 12, 14, 15, 16, 17],
            DsLine::V3_1_0 | DsLine::V3_1 => &[0, 1, 2, 4, 12, 14, 15],
            DsLine::V3_2 => &[0, 1, 2, 4, 12, 14, 15, 17],
            // 18 FAILOVER: a workflow being failed over is DS's, not finished
            DsLine::V3_3 => &[0, 1, 2, 4, 14, 17, 18],
        }
    }

    /// Whether a workflow state is terminal on this line: not one of
    /// [`DsLine::workflow_non_terminal_states`]. A child workflow in a
    /// non-terminal state is its SUB_PROCESS task's process (SPEC §3).
    pub fn is_workflow_terminal(self, code: i32) -> bool {
        !self.workflow_non_terminal_states().contains(&code)
    }

    /// The workflow states the line's own master failover picks up (SPEC
    /// §13): 1.2.1 `ProcessDao` / 1.3.9 `ProcessService.stateArray`, 2.0.9
    /// `stateArray`, 3.0.6 `ExecutionStatus.NEED_FAILOVER_STATES`, 3.1.x/3.2.2
    /// `WorkflowExecutionStatus.NEED_FAILOVER_STATES`, dev `FailoverCoordinator`.
    /// `recover` writes DS's failover rows, so it is only for these: a
    /// workflow in another state (SERIAL_WAIT, READY_BLOCK, ...) is one DS's
    /// own failover would leave alone, and the master taking the command
    /// would not expect it.
    pub fn master_failover_workflow_states(self) -> &'static [i32] {
        match self {
            DsLine::V1_2 | DsLine::V1_3 => &[0, 1, 2, 4],
            DsLine::V2_0 | DsLine::V3_1_0 | DsLine::V3_1 | DsLine::V3_2 => &[0, 1, 12, 2, 4],
            DsLine::V3_0 => &[0, 17, 1, 12, 2, 4],
            DsLine::V3_3 => &[1, 2, 4],
        }
    }

    /// 2.0-3.1: DS's master failover also writes NEED_FAULT_TOLERANCE into
    /// the workflow's unfinished valid task rows (2.0.9
    /// `MasterRegistryClient.failoverMaster`, 3.0.6/3.1.9
    /// `MasterFailoverService.doFailoverMaster`); 1.3's leaves the tasks to
    /// the master that takes the command, 3.2's and 3.3's touch no task row.
    pub fn master_failover_tolerates_tasks(self) -> bool {
        matches!(
            self,
            DsLine::V2_0 | DsLine::V3_0 | DsLine::V3_1_0 | DsLine::V3_1
        )
    }

    /// Whether DS's master failover of this line sets a `flag = 1` task row
    /// in `state` with `host` and a `submit_time` (or none) to
    /// NEED_FAULT_TOLERANCE. DS skips the rows its enum calls finished
    /// (2.0.9 `typeIsFinished`, 3.0.6 also BLOCK; 3.1.9 `isFinished`, where
    /// NEED_FAULT_TOLERANCE is a failure); a row ds-reaper counts as finished
    /// is never touched whatever DS would do (SPEC §4.8). 2.0.9 also skips a
    /// row without a host (NULL or DS's `'NULL'`) or without a `submit_time`
    /// (`checkTaskInstanceNeedFailover`); 3.0/3.1 have no such condition.
    pub fn master_failover_tolerates_task(
        self,
        state: i32,
        host: Option<&str>,
        has_submit_time: bool,
    ) -> bool {
        if !self.master_failover_tolerates_tasks()
            || DsLine::is_finished_task_state(state)
            || state == NEED_FAULT_TOLERANCE
            || (self == DsLine::V3_0 && state == 16)
        {
            return false;
        }
        if self == DsLine::V2_0 {
            return host.is_some_and(|h| h != "NULL") && has_submit_time;
        }
        true
    }

    /// 3.3 renamed the process tables and columns to workflow.
    pub fn workflow_table(self) -> &'static str {
        if self == DsLine::V3_3 {
            "t_ds_workflow_instance"
        } else {
            "t_ds_process_instance"
        }
    }

    pub fn workflow_fk_column(self) -> &'static str {
        if self == DsLine::V3_3 {
            "workflow_instance_id"
        } else {
            "process_instance_id"
        }
    }

    /// On 1.x the master re-reads task rows from the database every second,
    /// so a direct write is noticed; 2.0+ masters keep workflows in memory.
    pub fn master_rereads_db(self) -> bool {
        self <= DsLine::V1_3
    }

    /// Task types that run inside the master on this line (SPEC §3 "Logic
    /// tasks per line"): 1.2 runs only SUB_PROCESS in the master — its
    /// DEPENDENT goes through the task queue to a worker, which sets the host.
    pub fn is_logic_task(self, task_type: &str) -> bool {
        let t = task_type.trim();
        if self == DsLine::V1_2 {
            return t.eq_ignore_ascii_case("SUB_PROCESS");
        }
        LOGIC_TASK_TYPES.iter().any(|l| l.eq_ignore_ascii_case(t))
    }

    /// A task whose work is a child workflow instance (SPEC §3).
    pub fn is_sub_process_task(self, task_type: &str) -> bool {
        let t = task_type.trim();
        t.eq_ignore_ascii_case("SUB_PROCESS") || t.eq_ignore_ascii_case("SUB_WORKFLOW")
    }

    /// 1.3-3.2: DS's master failover reads the dead master's workflows once
    /// and later writes each one unconditionally (SPEC §13); 3.3's update is
    /// conditional, and 1.2's failover is not guarded by ds-reaper.
    pub fn failover_writes_unconditionally(self) -> bool {
        !matches!(self, DsLine::V1_2 | DsLine::V3_3)
    }
}

impl fmt::Display for DsLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DsLine {
    type Err = UnknownLine;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        DsLine::ALL
            .into_iter()
            .find(|l| l.as_str() == t)
            .ok_or_else(|| UnknownLine(s.to_string()))
    }
}

#[cfg(test)]
mod tests;
