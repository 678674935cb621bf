//! Table and column identifiers per DS line (reference §2). Every identifier
//! that reaches SQL comes from here, never from input.

use reaper_core::DsLine;

pub(crate) const TASK: &str = "t_ds_task_instance";
pub(crate) const COMMAND: &str = "t_ds_command";
pub(crate) const WORKER_GROUP: &str = "t_ds_worker_group";
pub(crate) const SCHEDULES: &str = "t_ds_schedules";

/// How a task row names its worker group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkerGroupCol {
    /// 1.2: `worker_group_id` int, resolved through `t_ds_worker_group`.
    Id,
    /// 1.3+: `worker_group` varchar.
    Name,
}

/// How a workflow instance and a command name the workflow definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DefCols {
    /// ≤ 1.3: `process_definition_id`.
    Id,
    /// ≥ 2.0: `<prefix>_definition_code`, `<prefix>_definition_version`.
    Code {
        code: &'static str,
        version: &'static str,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    pub wf_table: &'static str,
    /// FK column in t_ds_task_instance.
    pub fk: &'static str,
    pub wg: WorkerGroupCol,
    pub project_code: bool,
    pub def: DefCols,
    /// Priority column of the workflow instance / command (3.1+ copies it on failover).
    pub priority: &'static str,
    pub test_flag: bool,
    /// `t_ds_command` column holding the workflow instance id (2.0+), else the id
    /// travels in `command_param`.
    pub cmd_instance_col: Option<&'static str>,
    /// What DS writes into the workflow's `host` on master failover.
    pub null_host: &'static str,
}

pub(crate) fn names(line: DsLine) -> Names {
    let v33 = line == DsLine::V3_3;
    Names {
        wf_table: line.workflow_table(),
        fk: line.workflow_fk_column(),
        wg: if line == DsLine::V1_2 {
            WorkerGroupCol::Id
        } else {
            WorkerGroupCol::Name
        },
        project_code: line >= DsLine::V3_2,
        def: if line <= DsLine::V1_3 {
            DefCols::Id
        } else if v33 {
            DefCols::Code {
                code: "workflow_definition_code",
                version: "workflow_definition_version",
            }
        } else {
            DefCols::Code {
                code: "process_definition_code",
                version: "process_definition_version",
            }
        },
        priority: if v33 {
            "workflow_instance_priority"
        } else {
            "process_instance_priority"
        },
        test_flag: line >= DsLine::V3_2,
        cmd_instance_col: if line <= DsLine::V1_3 {
            None
        } else if v33 {
            Some("workflow_instance_id")
        } else {
            Some("process_instance_id")
        },
        // 1.2.1 ProcessDao.processNeedFailoverProcessInstances writes "null";
        // 1.3.9+ write Constants.NULL = "NULL".
        null_host: if line == DsLine::V1_2 { "null" } else { "NULL" },
    }
}

/// `state NOT IN (...)` list of finished task codes, as SQL literal text.
pub(crate) fn finished_list() -> String {
    int_list(reaper_core::line::FINISHED_TASK_CODES)
}

/// Integers rendered as a SQL list; integers cannot carry SQL.
pub(crate) fn int_list(v: &[i32]) -> String {
    v.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}
