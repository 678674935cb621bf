//! The workflow follow-ups of SPEC §5, decided from the locked workflow row.
//! What is written mirrors DS's own code for the same path (reference §5):
//! - recover after fault-tolerance, ≤ 3.2: `ProcessService.processNeedFailoverProcessInstances`
//!   (1.2.1 `ProcessDao`, 1.3.9, 2.0.9, 3.1.9 `ProcessServiceImpl`, 3.2.2), built with
//!   `new Command()` whose constructor sets `task_depend_type = TASK_POST (2)`,
//!   `failure_strategy = CONTINUE (1)`, `start_time = update_time = now`;
//!   primitive `int` fields (`dry_run`, `test_flag`, 1.2's `worker_group_id`) are
//!   always inserted, null fields are left to the column default (MyBatis-Plus).
//! - recover after fail/kill, ≤ 3.1: API `ExecutorService.insertCommand`
//!   (`new Command()` as above, `executor_id` = the user: here the instance's executor);
//!   3.2.2 `FailureRecoveryExecuteFunction` (a Lombok builder: no `start_time`);
//!   3.0.6–3.2.2 `createCommand` add `schedule_timezone` when the definition is scheduled
//!   (2.0.9's does not); 3.1.0+ failover copies the priority and `StartParams`.
//! - 3.3: `WorkflowFailover.failoverWorkflow` and `WorkflowInstanceRecoverFailureTaskTrigger`.
//!
//! Columns that only some releases of a line have (`test_flag`, the priority)
//! are built here as DS's code of the line writes them and then fitted to the
//! learned catalog ([`fit_command`]): a release without the column does not
//! write it either.

mod json;
mod skip;
pub(crate) mod tx;

use crate::schema::{names, Catalog, DefCols, WorkerGroupCol, COMMAND};
use crate::sql::Arg;
use crate::{FollowUpOutcome, FollowUpRequest};
use chrono::NaiveDateTime;
pub(crate) use json::restart_state_history;
use json::{recover_param, wf_status_name_33, with_tz};
use reaper_core::{Action, DsLine, FollowUp};
pub(crate) use skip::NoWrite;

/// `CommandType` codes.
pub const RECOVER_TOLERANCE_FAULT_PROCESS: i32 = 2;
pub const START_FAILURE_TASK_PROCESS: i32 = 4;
const TASK_POST: i32 = 2;
const CONTINUE: i32 = 1;

/// A value for a command column.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    I32(i32),
    I64(i64),
    Text(String),
    Time(NaiveDateTime),
}

impl From<&Val> for Arg {
    fn from(v: &Val) -> Arg {
        match v {
            Val::I32(x) => Arg::I32(*x),
            Val::I64(x) => Arg::I64(*x),
            Val::Text(x) => Arg::Text(Some(x.clone())),
            Val::Time(x) => Arg::Time(*x),
        }
    }
}

/// The columns of one `t_ds_command` insert (identifiers are constants).
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRow {
    pub cols: Vec<(&'static str, Val)>,
}

impl CommandRow {
    pub fn command_type(&self) -> Option<i32> {
        self.cols.iter().find_map(|(c, v)| match (c, v) {
            (&"command_type", Val::I32(t)) => Some(*t),
            _ => None,
        })
    }
}

/// The locked workflow instance row.
#[derive(Debug, Clone, Default)]
pub(crate) struct WfRow {
    pub state: Option<i32>,
    /// The owning master as stored (`'NULL'` while DS fails it over).
    pub host: Option<String>,
    pub executor_id: Option<i64>,
    /// `process_definition_id` (≤ 1.3).
    pub def_id: Option<i64>,
    pub def_code: Option<i64>,
    pub def_version: Option<i64>,
    pub priority: Option<i64>,
    pub test_flag: Option<i64>,
    pub command_param: Option<String>,
    /// 3.3's `state_history` (JSON), where the table has it.
    pub state_history: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WfUpdate {
    /// `state = 6, end_time = now` where `state = from`.
    Fail { from: i32 },
    /// `host = '<null_host>'` where `state = from`.
    NullHost { from: i32 },
    /// 3.3: `state = 18` where `state = from`.
    Failover { from: i32 },
    /// 3.3: `state = 0, run_times + 1, restart_time = now, end_time = NULL` where `state = from`.
    Restart { from: i32 },
}

impl WfUpdate {
    pub fn new_state(&self) -> Option<i32> {
        match self {
            WfUpdate::Fail { .. } => Some(6),
            WfUpdate::NullHost { .. } => None,
            WfUpdate::Failover { .. } => Some(18),
            WfUpdate::Restart { .. } => Some(0),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub update: Option<WfUpdate>,
    pub command: Option<CommandRow>,
    /// 2.0-3.1 master failover: the workflow's unfinished valid task rows
    /// to NEED_FAULT_TOLERANCE as DS's failover writes them
    /// ([`DsLine::master_failover_tolerates_task`]).
    pub tolerate_tasks: bool,
}

/// What the follow-up needs to know besides the workflow row.
pub(crate) struct Facts {
    /// Other `flag = 1` tasks of the workflow in a non-finished state.
    pub other_live: i64,
    /// A command for this workflow instance is already queued.
    pub queued: bool,
    /// The workflow's host, when it is a live master by the caller's current
    /// view, asked under the row lock.
    pub live_owner: Option<String>,
    /// `t_ds_schedules.timezone_id` of the definition, if scheduled (3.1/3.2).
    pub schedule_tz: Option<String>,
    /// A child workflow instance of it that is not finished (id, state),
    /// read under the row lock for `recover`.
    pub running_child: Option<(i64, i32)>,
}

/// What every workflow write checks first, on the row locked now: it has a
/// state, DS is not failing it over itself, no command for it is queued and,
/// for `recover`, no live master holds it. The state, or why not.
fn guards(
    line: DsLine,
    wf_id: i64,
    wf: &WfRow,
    facts: &Facts,
    recover: bool,
) -> Result<i32, NoWrite> {
    let Some(state) = wf.state else {
        return Err(NoWrite::NoState { wf_id });
    };
    // DsLine lists FAILOVER among the non-terminal states (the workflow is
    // not finished), but a workflow in it is in DS's own hands: neither fail
    // nor recover may write over it (SPEC §5).
    if failover_state(line) == Some(state) {
        return Err(NoWrite::InFailover { wf_id, state });
    }
    if facts.queued {
        return Err(NoWrite::Queued { wf_id });
    }
    if recover {
        // A parent never ends before its child (SPEC §13): DS's recovery
        // of the parent would end it (3.1.1: SUCCESS ~30 s early) or run
        // the child twice.
        if let Some((child, s)) = facts.running_child {
            return Err(NoWrite::ChildRunning {
                wf_id,
                child,
                state: s,
            });
        }
        if let Some(m) = &facts.live_owner {
            return Err(NoWrite::LiveOwner {
                wf_id,
                master: m.clone(),
            });
        }
    }
    Ok(state)
}

/// The command's type, definition and instance columns.
fn command_head(
    line: DsLine,
    wf_id: i64,
    wf: &WfRow,
    type_code: i32,
) -> Result<Vec<(&'static str, Val)>, NoWrite> {
    let n = names(line);
    let mut cols: Vec<(&'static str, Val)> = vec![("command_type", Val::I32(type_code))];
    match n.def {
        DefCols::Id => cols.push(("process_definition_id", Val::I64(wf.def_id.unwrap_or(0)))),
        DefCols::Code { code, version } => {
            let Some(c) = wf.def_code else {
                return Err(NoWrite::NoDefinitionCode { wf_id });
            };
            cols.push((code, Val::I64(c)));
            cols.push((version, Val::I64(wf.def_version.unwrap_or(0))));
        }
    }
    if let Some(col) = n.cmd_instance_col {
        cols.push((col, Val::I64(wf_id)));
    }
    Ok(cols)
}

/// The rest of a ≤ 3.2 command as `new Command()` (or 3.2's builder, without
/// `start_time`) and the line's primitive fields leave it.
fn command_tail(
    cols: &mut Vec<(&'static str, Val)>,
    line: DsLine,
    wf: &WfRow,
    start_time: bool,
    priority: bool,
    now: NaiveDateTime,
) {
    let n = names(line);
    cols.push(("executor_id", Val::I32(wf.executor_id.unwrap_or(0) as i32)));
    cols.push(("task_depend_type", Val::I32(TASK_POST)));
    cols.push(("failure_strategy", Val::I32(CONTINUE)));
    if start_time {
        cols.push(("start_time", Val::Time(now)));
    }
    cols.push(("update_time", Val::Time(now)));
    if priority {
        cols.push((n.priority, Val::I32(wf.priority.unwrap_or(2) as i32)));
    }
    if line >= DsLine::V2_0 {
        cols.push(("dry_run", Val::I32(0)));
    }
    if line >= DsLine::V3_2 {
        // 3.2.x always writes it; 3.3.1+ has no such column (fit_command)
        cols.push(("test_flag", Val::I32(wf.test_flag.unwrap_or(0) as i32)));
    }
    if n.wg == WorkerGroupCol::Id {
        // 1.2.1 Command.workerGroupId is a primitive int: always inserted, 0
        cols.push(("worker_group_id", Val::I32(0)));
    }
}

/// DS's own master failover of one workflow instance (reference §4, §5): on
/// ≤ 3.2 `host = 'NULL'` (1.2: `'null'`) and a RECOVER_TOLERANCE_FAULT_PROCESS
/// command with the line's param (`ProcessInstanceId`, on 3.1+ the
/// instance's `StartParams`, on 3.0–3.2 the schedule's time zone); on 3.3
/// `state = 18` and command 2 with `WorkflowFailoverCommandParam`'s JSON.
/// Used by `recover` after `fault-tolerance` (SPEC §5) and by `recover` for
/// `workflow_master_lost` (SPEC §13). `Err` says why nothing is written.
pub(crate) fn master_failover(
    line: DsLine,
    wf_id: i64,
    wf: &WfRow,
    facts: &Facts,
    now: NaiveDateTime,
) -> Result<Decision, NoWrite> {
    let state = guards(line, wf_id, wf, facts, true)?;
    // what DS's own failover of the line picks up (3.3 FailoverCoordinator:
    // 1, 2, 4), re-checked on the row as locked now
    let handled = line.master_failover_workflow_states();
    if !handled.contains(&state) {
        return Err(NoWrite::NotHandled {
            wf_id,
            state,
            line,
            handled,
        });
    }
    let mut cols = command_head(line, wf_id, wf, RECOVER_TOLERANCE_FAULT_PROCESS)?;
    if line == DsLine::V3_3 {
        let status = wf_status_name_33(state).unwrap_or("RUNNING_EXECUTION");
        let param = format!(
            "{{\"commandType\":\"RECOVER_TOLERANCE_FAULT\",\"subWorkflowInstance\":false,\"startNodes\":null,\"commandParams\":null,\"timeZone\":null,\"workflowExecutionStatus\":\"{status}\"}}"
        );
        cols.push(("command_param", Val::Text(param)));
        // the builder leaves the primitive executorId at 0
        cols.push(("executor_id", Val::I32(0)));
        cols.push(("task_depend_type", Val::I32(TASK_POST)));
        cols.push(("failure_strategy", Val::I32(CONTINUE)));
        cols.push(("update_time", Val::Time(now)));
        cols.push(("dry_run", Val::I32(0)));
        cols.push(("test_flag", Val::I32(0)));
        return Ok(Decision {
            update: Some(WfUpdate::Failover { from: state }),
            command: Some(CommandRow { cols }),
            tolerate_tasks: false,
        });
    }
    let param = recover_param(wf_id, wf, line >= DsLine::V3_1_0);
    let param = if line >= DsLine::V3_0 {
        with_tz(param, &facts.schedule_tz)
    } else {
        param
    };
    cols.push((
        "command_param",
        Val::Text(serde_json::Value::Object(param).to_string()),
    ));
    command_tail(&mut cols, line, wf, true, line >= DsLine::V3_1_0, now);
    Ok(Decision {
        update: Some(WfUpdate::NullHost { from: state }),
        command: Some(CommandRow { cols }),
        tolerate_tasks: line.master_failover_tolerates_tasks(),
    })
}

pub(crate) fn decide(
    line: DsLine,
    req: &FollowUpRequest,
    wf_id: i64,
    wf: &WfRow,
    facts: &Facts,
    now: NaiveDateTime,
) -> Result<Decision, FollowUpOutcome> {
    let recover = req.follow_up == FollowUp::Recover;
    let after_ft = req.action == Action::FaultTolerance;
    if recover && after_ft {
        return master_failover(line, wf_id, wf, facts, now)
            .map_err(|why| FollowUpOutcome::Skipped(why.to_string()));
    }
    let skip = |why: String| Err(FollowUpOutcome::Skipped(why));
    let state = match guards(line, wf_id, wf, facts, recover) {
        Ok(s) => s,
        Err(why) => return skip(why.to_string()),
    };
    let non_terminal = line.workflow_non_terminal_states().contains(&state);
    if facts.other_live > 0 {
        return skip(format!(
            "workflow instance {wf_id} has {} other task(s) not finished",
            facts.other_live
        ));
    }

    if req.follow_up == FollowUp::Fail {
        if !non_terminal {
            return skip(format!(
                "workflow instance {wf_id} is in terminal state {state}"
            ));
        }
        return Ok(Decision {
            update: Some(WfUpdate::Fail { from: state }),
            command: None,
            tolerate_tasks: false,
        });
    }
    recover_failed(line, wf_id, wf, facts, state, now)
        .map_err(|why| FollowUpOutcome::Skipped(why.to_string()))
}

/// `recover` after fail or kill: the "recover from failed node" path, for a
/// workflow in `state` that passed the guards. `Err` says why nothing is
/// written.
fn recover_failed(
    line: DsLine,
    wf_id: i64,
    wf: &WfRow,
    facts: &Facts,
    state: i32,
    now: NaiveDateTime,
) -> Result<Decision, NoWrite> {
    let mut cols = command_head(line, wf_id, wf, START_FAILURE_TASK_PROCESS)?;
    let non_terminal = line.workflow_non_terminal_states().contains(&state);
    if !(non_terminal || state == 6) {
        return Err(if line == DsLine::V3_3 {
            NoWrite::NotRecoverable { wf_id, state }
        } else {
            NoWrite::NotFailure { wf_id, state }
        });
    }
    if line == DsLine::V3_3 {
        cols.push(("executor_id", Val::I32(wf.executor_id.unwrap_or(0) as i32)));
        cols.push(("task_depend_type", Val::I32(TASK_POST)));
        cols.push(("failure_strategy", Val::I32(CONTINUE)));
        cols.push(("start_time", Val::Time(now)));
        cols.push(("update_time", Val::Time(now)));
        cols.push(("dry_run", Val::I32(0)));
        cols.push(("test_flag", Val::I32(0)));
        return Ok(Decision {
            update: Some(WfUpdate::Restart { from: state }),
            command: Some(CommandRow { cols }),
            tolerate_tasks: false,
        });
    }
    // "recover from failed node" needs the workflow in FAILURE; fail it first
    if let Some(param) = failed_node_param(line, wf_id, wf, facts) {
        cols.push(("command_param", Val::Text(param)));
    }
    // 3.2.2's FailureRecoveryExecuteFunction is a builder: no start_time
    command_tail(&mut cols, line, wf, line != DsLine::V3_2, false, now);
    Ok(Decision {
        // already FAILURE: nothing to write on the workflow
        update: (state != 6).then_some(WfUpdate::Fail { from: state }),
        command: Some(CommandRow { cols }),
        tolerate_tasks: false,
    })
}

/// The `command_param` of a ≤ 3.2 "recover from failed node" command: 3.2
/// writes one only for a scheduled definition (its time zone).
fn failed_node_param(line: DsLine, wf_id: i64, wf: &WfRow, facts: &Facts) -> Option<String> {
    if line == DsLine::V3_2 {
        let tz = facts.schedule_tz.as_ref()?;
        let m = with_tz(serde_json::Map::new(), &Some(tz.clone()));
        return Some(serde_json::Value::Object(m).to_string());
    }
    let param = recover_param(wf_id, wf, false);
    let param = if line >= DsLine::V3_0 {
        with_tz(param, &facts.schedule_tz)
    } else {
        param
    };
    Some(serde_json::Value::Object(param).to_string())
}

/// DS's own workflow failover state, on the lines that have one.
pub(crate) fn failover_state(line: DsLine) -> Option<i32> {
    (line == DsLine::V3_3).then_some(18)
}

/// The host, when it names a master that is live by `live_master`.
pub(crate) fn live_owner(
    host: Option<&str>,
    live_master: &(dyn Fn(&str) -> bool + Send + Sync),
) -> Option<String> {
    let h = host?;
    if reaper_core::host::is_empty(Some(h)) {
        return None;
    }
    live_master(h).then(|| h.to_string())
}

/// Drops the columns the connected `t_ds_command` does not have: DS releases
/// without a column do not write it (3.3.1 dropped `test_flag`). The columns
/// a command cannot do without were checked by `Catalog::require_writes`.
pub(crate) fn fit_command(cmd: CommandRow, cat: &Catalog) -> CommandRow {
    CommandRow {
        cols: cmd
            .cols
            .into_iter()
            .filter(|(c, _)| cat.has(COMMAND, c))
            .collect(),
    }
}

#[cfg(test)]
mod tests;
