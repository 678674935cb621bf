//! Table and column identifiers (reference §2). Every identifier that reaches
//! SQL comes from here, never from input: the structural names (tables, the
//! workflow foreign key, definition columns) by line, and the columns that
//! releases of one line add or drop (`test_flag`, `project_code`, `run_times`,
//! …) from the [`Catalog`] learned from the connected database (SPEC §4.10).

use crate::SqlError;
use reaper_core::DsLine;
use std::collections::{BTreeMap, BTreeSet};

pub(crate) const TASK: &str = "t_ds_task_instance";
pub(crate) const COMMAND: &str = "t_ds_command";
pub(crate) const WORKER_GROUP: &str = "t_ds_worker_group";
pub(crate) const SCHEDULES: &str = "t_ds_schedules";
/// Tenants by id (1.x–3.1 workflow instances name theirs by `tenant_id`).
pub(crate) const TENANT: &str = "t_ds_tenant";

/// 3.4's queue of serial workflows (`state` 0 waiting, 1 fired).
pub(crate) const SERIAL_COMMAND: &str = "t_ds_serial_command";

/// The tables whose columns the adapter learns.
pub(crate) const LEARNED_TABLES: &[&str] = &[
    TASK,
    "t_ds_process_instance",
    "t_ds_workflow_instance",
    COMMAND,
    SCHEDULES,
    "t_ds_relation_process_instance",
    "t_ds_relation_workflow_instance",
    SERIAL_COMMAND,
    TENANT,
];

/// The line's parent-child relation of workflow instances: which child
/// workflow instance a SUB_PROCESS / SUB_WORKFLOW task runs (SPEC §3).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Relation {
    pub table: &'static str,
    /// The parent workflow instance: the leading column of the index that
    /// 3.1+ has on (parent workflow, parent task).
    pub parent_wf: &'static str,
    pub parent_task: &'static str,
    /// The child workflow instance.
    pub child: &'static str,
}

/// 3.3 renamed `t_ds_relation_process_instance` and its `process` columns.
pub(crate) fn relation(line: DsLine) -> Relation {
    if line == DsLine::V3_3 {
        Relation {
            table: "t_ds_relation_workflow_instance",
            parent_wf: "parent_workflow_instance_id",
            parent_task: "parent_task_instance_id",
            child: "workflow_instance_id",
        }
    } else {
        Relation {
            table: "t_ds_relation_process_instance",
            parent_wf: "parent_process_instance_id",
            parent_task: "parent_task_instance_id",
            child: "process_instance_id",
        }
    }
}

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
    pub def: DefCols,
    /// Priority column of the workflow instance / command (3.1+ copies it on failover).
    pub priority: &'static str,
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

/// The tables and columns of the connected database, as its catalog reports
/// them (lower-case names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Catalog {
    pub tables: BTreeSet<String>,
    pub columns: BTreeMap<String, BTreeSet<String>>,
    /// The connection generation this was learned at (see `Db::catalog`).
    pub epoch: u64,
}

impl Catalog {
    pub fn new(tables: BTreeSet<String>, cols: Vec<(String, String)>) -> Catalog {
        let mut columns: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (t, c) in cols {
            columns.entry(t).or_default().insert(c);
        }
        Catalog {
            tables,
            columns,
            epoch: 0,
        }
    }

    pub fn has(&self, table: &str, col: &str) -> bool {
        self.columns.get(table).is_some_and(|c| c.contains(col))
    }

    pub fn task_columns(&self) -> BTreeSet<String> {
        self.columns.get(TASK).cloned().unwrap_or_default()
    }

    /// `col` when the table has it, else SQL `NULL`: for columns that only
    /// some releases of a line have.
    pub fn col_or_null<'a>(&self, table: &str, col: &'a str) -> &'a str {
        if self.has(table, col) {
            col
        } else {
            "NULL"
        }
    }

    /// Errors naming every column of `cols` the table lacks.
    pub fn require(&self, table: &str, cols: &[&str]) -> Result<(), SqlError> {
        let missing: Vec<&str> = cols
            .iter()
            .copied()
            .filter(|c| !self.has(table, c))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(SqlError::SchemaMismatch(format!(
                "{table} has no column(s) {} in the connected database",
                missing.join(", ")
            )))
        }
    }

    /// What candidate reads select (SPEC §3), for `line`.
    pub fn require_reads(&self, line: DsLine) -> Result<(), SqlError> {
        let n = names(line);
        let wg = match n.wg {
            WorkerGroupCol::Id => "worker_group_id",
            WorkerGroupCol::Name => "worker_group",
        };
        self.require(
            TASK,
            &[
                "id",
                "name",
                "task_type",
                "state",
                "host",
                "submit_time",
                "start_time",
                "flag",
                wg,
                n.fk,
            ],
        )?;
        self.require(n.wf_table, &["id", "host", "state"])
    }

    /// What workflow candidate reads select (SPEC §13), for `line`.
    pub fn require_workflow_reads(&self, line: DsLine) -> Result<(), SqlError> {
        let n = names(line);
        self.require(n.wf_table, &["id", "name", "state", "host", "start_time"])?;
        self.require(TASK, &["id", "state", "flag", "host", "end_time", n.fk])
    }

    /// Everything a task write and a workflow follow-up compare or write
    /// unconditionally, for `line`: checked before the first write, so that a
    /// schema the adapter does not understand stops it before the task write
    /// rather than between the task write and its follow-up.
    pub fn require_writes(&self, line: DsLine) -> Result<(), SqlError> {
        let n = names(line);
        self.require_reads(line)?;
        self.require(TASK, &["end_time"])?;
        let mut wf = vec!["id", "state", "host", "end_time", "executor_id"];
        let mut cmd = vec!["id", "command_type"];
        match n.def {
            DefCols::Id => {
                wf.push("process_definition_id");
                cmd.push("process_definition_id");
            }
            DefCols::Code { code, version } => {
                wf.extend([code, version]);
                cmd.extend([code, version]);
            }
        }
        match n.cmd_instance_col {
            Some(c) => cmd.push(c),
            // ≤ 1.3: the instance id travels in the param
            None => cmd.push("command_param"),
        }
        self.require(n.wf_table, &wf)?;
        self.require(COMMAND, &cmd)
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

/// The catalog query's table list, as SQL literal text (constants only).
pub(crate) fn learned_tables_list() -> String {
    LEARNED_TABLES
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(",")
}

/// 1.2's worker group: the `t_ds_worker_group` name, `default` for -1 (any
/// worker), else the id as text.
pub(crate) fn worker_group_from_id(id: Option<i64>, name: Option<String>) -> Option<String> {
    match (id, name) {
        (_, Some(n)) if !n.trim().is_empty() => Some(n),
        (Some(-1), _) => Some("default".to_string()),
        (Some(i), _) => Some(i.to_string()),
        (None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_group_of_1_2() {
        assert_eq!(
            worker_group_from_id(Some(-1), None).as_deref(),
            Some("default")
        );
        assert_eq!(worker_group_from_id(Some(3), None).as_deref(), Some("3"));
        assert_eq!(
            worker_group_from_id(Some(3), Some("etl".into())).as_deref(),
            Some("etl")
        );
    }
}
