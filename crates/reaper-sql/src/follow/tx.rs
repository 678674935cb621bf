//! The follow-up's transaction, for both dialects: lock and re-read the
//! workflow row, gather the facts, decide ([`super::decide`]), write. The
//! steps are shared with `recover` for `workflow_master_lost`
//! ([`recover_workflow`]), which writes the same master-failover rows.

use super::{
    decide, failover_state, fit_command, live_owner, master_failover, CommandRow, Decision, Facts,
    WfRow, WfUpdate,
};
use crate::dialect::{Conn, Dialect};
use crate::schema::{finished_list, names, Catalog, DefCols, COMMAND, SCHEDULES, TASK};
use crate::sql::{Arg, Sql};
use crate::workflow::param_names_instance;
use crate::{FollowUpOutcome, FollowUpRequest, SqlError};
use chrono::NaiveDateTime;
use reaper_core::ports::WorkflowOutcome;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{Action, DsLine, FollowUp, Instant, Zone};
use sqlx::Connection;

/// Locks the workflow row and decides on what it holds now (SPEC §4.9):
/// every update is conditional on the state and host read under the lock,
/// and one that matches nothing rolls the whole follow-up back.
pub(crate) async fn follow_up<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    req: &FollowUpRequest,
    wf_id: i64,
    live_master: &(dyn Fn(&str) -> bool + Send + Sync),
) -> Result<FollowUpOutcome, SqlError> {
    let now = zone.to_naive(req.now);
    let mut tx = c.begin().await?;
    let Some(wf) = lock_workflow::<D>(&mut *tx, line, cat, wf_id).await? else {
        return Ok(FollowUpOutcome::Skipped(format!(
            "workflow instance {wf_id} not found"
        )));
    };
    let recover = req.follow_up == FollowUp::Recover;
    // Only `fail` and recover after fail/kill wait for the other tasks; DS's
    // master failover (recover after fault-tolerance) has no such condition.
    let other_live =
        if req.follow_up == FollowUp::Fail || (recover && req.action != Action::FaultTolerance) {
            let n = names(line);
            let mut q = Sql::<D>::new(format!("SELECT COUNT(*) FROM {TASK} WHERE {} = ", n.fk));
            q.bind(wf_id)
                .push(" AND id <> ")
                .bind(req.task.id)
                .push(" AND flag = 1 AND state NOT IN (")
                .push(&finished_list())
                .push(")");
            count(q, &mut *tx).await?
        } else {
            0
        };
    // `fail` must not run while a command for the workflow is queued either
    // (SPEC §5): the master that takes the command would run a failed workflow.
    let facts = Facts {
        other_live,
        queued: queued::<D>(&mut *tx, line, wf_id).await?,
        schedule_tz: if recover {
            schedule_tz::<D>(&mut *tx, line, cat, &wf).await?
        } else {
            None
        },
        live_owner: if recover {
            live_owner(wf.host.as_deref(), live_master)
        } else {
            None
        },
        running_child: if recover {
            crate::workflow::running_child::<D>(&mut *tx, line, cat, wf_id).await?
        } else {
            None
        },
    };
    let d = match decide(line, req, wf_id, &wf, &facts, now) {
        Ok(d) => d,
        Err(skip) => return Ok(skip),
    };
    match apply::<D>(&mut *tx, line, cat, wf_id, &wf, d, now).await? {
        Applied::Done {
            workflow_state,
            command_type,
            command_id,
        } => {
            tx.commit().await?;
            Ok(FollowUpOutcome::Done {
                workflow_state,
                command_type,
                command_id,
            })
        }
        Applied::Unmatched(from) => {
            tx.rollback().await?;
            Ok(FollowUpOutcome::Skipped(format!(
                "lost race: workflow instance {wf_id} is no longer in state {from} with host {:?}; nothing written",
                wf.host
            )))
        }
    }
}

/// `recover` for `workflow_master_lost` (SPEC §13): DS's own master failover
/// of the workflow instance, in one transaction. The row is locked and read
/// again: a state or host other than `seen`'s is a lost race; a host that is
/// NULL, `'NULL'` or empty is already DS's; a live master (asked under the
/// lock) or a queued command means nothing is written; otherwise the line's
/// master-failover rows ([`master_failover`]), the update conditional on the
/// state and host seen.
pub(crate) async fn recover_workflow<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    seen: &WorkflowCandidate,
    now: Instant,
    live_master: &(dyn Fn(&str) -> bool + Send + Sync),
) -> Result<WorkflowOutcome, SqlError> {
    let wf_id = seen.id;
    let now = zone.to_naive(now);
    let mut tx = c.begin().await?;
    // Every early return below drops `tx`, which rolls it back: nothing was written.
    let Some(wf) = lock_workflow::<D>(&mut *tx, line, cat, wf_id).await? else {
        return Ok(WorkflowOutcome::LostRace(format!(
            "workflow instance {wf_id} no longer exists; nothing written"
        )));
    };
    if wf.state != Some(seen.state) || wf.host != seen.host {
        return Ok(WorkflowOutcome::LostRace(format!(
            "workflow instance {wf_id} changed since it was read (state {} -> {}, host {:?} -> {:?}); nothing written",
            seen.state,
            wf.state.map_or("NULL".to_string(), |s| s.to_string()),
            seen.host,
            wf.host
        )));
    }
    if reaper_core::host::is_empty(wf.host.as_deref()) {
        return Ok(WorkflowOutcome::Skipped(format!(
            "workflow instance {wf_id} has host {:?}: DS's own failover already holds it",
            wf.host
        )));
    }
    // A workflow in DS's own FAILOVER state (3.3) is DS's whoever its host
    // is: the owner is not asked about (master_failover says why not).
    let in_failover = wf.state.is_some() && failover_state(line) == wf.state;
    let facts = Facts {
        other_live: 0,
        queued: queued::<D>(&mut *tx, line, wf_id).await?,
        schedule_tz: schedule_tz::<D>(&mut *tx, line, cat, &wf).await?,
        live_owner: if in_failover {
            None
        } else {
            live_owner(wf.host.as_deref(), live_master)
        },
        running_child: crate::workflow::running_child::<D>(&mut *tx, line, cat, wf_id).await?,
    };
    let d = match master_failover(line, wf_id, &wf, &facts, now) {
        Ok(d) => d,
        Err(why) => return Ok(WorkflowOutcome::Skipped(why.to_string())),
    };
    match apply::<D>(&mut *tx, line, cat, wf_id, &wf, d, now).await? {
        Applied::Done {
            workflow_state,
            command_type,
            command_id,
        } => {
            tx.commit().await?;
            Ok(WorkflowOutcome::Done {
                workflow_state,
                command_type: command_type.unwrap_or(super::RECOVER_TOLERANCE_FAULT_PROCESS),
                command_id,
            })
        }
        Applied::Unmatched(from) => {
            tx.rollback().await?;
            Ok(WorkflowOutcome::LostRace(format!(
                "workflow instance {wf_id} is no longer in state {from} with host {:?}; nothing written",
                wf.host
            )))
        }
    }
}

/// `SELECT … FOR UPDATE` of the workflow row: what a decision and the
/// command need. `None` when the row is gone.
async fn lock_workflow<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    wf_id: i64,
) -> Result<Option<WfRow>, SqlError> {
    let n = names(line);
    let wf_t = n.wf_table;
    let def_sel = match n.def {
        DefCols::Id => "process_definition_id, NULL, NULL".to_string(),
        DefCols::Code { code, version } => format!("NULL, {code}, {version}"),
    };
    let prio = if line >= DsLine::V3_1_0 {
        cat.col_or_null(wf_t, n.priority)
    } else {
        "NULL"
    };
    let tf = cat.col_or_null(wf_t, "test_flag");
    let cp = cat.col_or_null(wf_t, "command_param");
    let sh = cat.col_or_null(wf_t, "state_history");
    let mut q = Sql::<D>::new(format!(
        "SELECT state, executor_id, {def_sel}, {prio}, {tf}, {cp}, host, {sh} FROM {wf_t} WHERE id = "
    ));
    q.bind(wf_id).push(" FOR UPDATE");
    let Some(r) = q.fetch_optional(c).await? else {
        return Ok(None);
    };
    Ok(Some(WfRow {
        state: D::int(&r, 0)?.map(|s| s as i32),
        executor_id: D::int(&r, 1)?,
        def_id: D::int(&r, 2)?,
        def_code: D::int(&r, 3)?,
        def_version: D::int(&r, 4)?,
        priority: D::int(&r, 5)?,
        test_flag: D::int(&r, 6)?,
        command_param: D::text(&r, 7)?,
        host: D::text(&r, 8)?,
        state_history: D::text(&r, 9)?,
    }))
}

/// Whether a command for the workflow instance is queued in `t_ds_command`
/// (2.0+ by its instance column, ≤ 1.3 by the `ProcessInstanceId` in the param).
async fn queued<D: Dialect>(c: &mut Conn<D>, line: DsLine, wf_id: i64) -> Result<bool, SqlError> {
    if let Some(col) = names(line).cmd_instance_col {
        let mut q = Sql::<D>::new(format!("SELECT COUNT(*) FROM {COMMAND} WHERE {col} = "));
        q.bind(wf_id);
        return Ok(count(q, c).await? > 0);
    }
    let q = Sql::<D>::new(format!(
        "SELECT command_param FROM {COMMAND} WHERE command_param LIKE '%ProcessInstanceId%'"
    ));
    for r in q.fetch_all(c).await? {
        if D::text(&r, 0)?.is_some_and(|p| param_names_instance(&p, wf_id)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `t_ds_schedules.timezone_id` of the workflow's definition, on the lines
/// whose commands carry it (3.0–3.2).
async fn schedule_tz<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    wf: &WfRow,
) -> Result<Option<String>, SqlError> {
    let n = names(line);
    match (n.def, line, wf.def_code) {
        (
            DefCols::Code { .. },
            DsLine::V3_0 | DsLine::V3_1_0 | DsLine::V3_1 | DsLine::V3_2,
            Some(code),
        ) if cat.has(SCHEDULES, "process_definition_code") && cat.has(SCHEDULES, "timezone_id") => {
            let mut q = Sql::<D>::new(format!(
                "SELECT timezone_id FROM {SCHEDULES} WHERE process_definition_code = "
            ));
            q.bind(code).push(" LIMIT 1");
            Ok(match q.fetch_optional(c).await? {
                Some(r) => D::text(&r, 0)?,
                None => None,
            })
        }
        _ => Ok(None),
    }
}

/// What [`apply`] wrote.
enum Applied {
    Done {
        workflow_state: Option<i32>,
        command_type: Option<i32>,
        command_id: Option<i64>,
    },
    /// The conditional workflow update matched no row (it was in this
    /// state): the caller rolls back.
    Unmatched(i32),
}

/// Writes a decision inside the caller's transaction: the workflow update,
/// conditional on the state and host `wf` holds, then the command.
async fn apply<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    wf_id: i64,
    wf: &WfRow,
    d: Decision,
    now: NaiveDateTime,
) -> Result<Applied, SqlError> {
    let mut workflow_state = None;
    if let Some(u) = &d.update {
        let (q, from) = workflow_update::<D>(line, cat, wf_id, wf, u, now);
        if q.execute(&mut *c).await? == 0 {
            return Ok(Applied::Unmatched(from));
        }
        workflow_state = u.new_state();
    }
    if d.tolerate_tasks {
        let n = tolerate_tasks::<D>(&mut *c, line, wf_id).await?;
        tracing::info!(
            workflow_instance_id = wf_id,
            tasks = n,
            "task rows set to NEED_FAULT_TOLERANCE as DS's master failover does"
        );
    }
    let mut command_type = None;
    let mut command_id = None;
    if let Some(cmd) = d.command {
        let (t, id) = insert_command::<D>(&mut *c, cat, cmd).await?;
        command_id = Some(id);
        command_type = t;
    }
    Ok(Applied::Done {
        workflow_state,
        command_type,
        command_id,
    })
}

/// The workflow update `u`, conditional on the state and host `wf` holds,
/// and the state it is conditional on.
fn workflow_update<D: Dialect>(
    line: DsLine,
    cat: &Catalog,
    wf_id: i64,
    wf: &WfRow,
    u: &WfUpdate,
    now: NaiveDateTime,
) -> (Sql<D>, i32) {
    let n = names(line);
    let mut q = Sql::<D>::new(format!("UPDATE {} SET ", n.wf_table));
    let from = match u {
        WfUpdate::Fail { from } => {
            q.push("state = 6, end_time = ").bind(now);
            *from
        }
        WfUpdate::NullHost { from } => {
            q.push("host = ").bind(n.null_host);
            *from
        }
        WfUpdate::Failover { from } => {
            q.push("state = 18");
            *from
        }
        WfUpdate::Restart { from } => {
            push_restart(&mut q, line, cat, wf_id, wf, now);
            *from
        }
    };
    q.push(" WHERE id = ")
        .bind(wf_id)
        .push(" AND state = ")
        .bind(from)
        .push(" AND host ")
        .push(D::NULL_SAFE_EQ)
        .push(" ")
        .bind(wf.host.clone());
    (q, from)
}

/// The assignments of 3.3's restart, for the columns the table has.
fn push_restart<D: Dialect>(
    q: &mut Sql<D>,
    line: DsLine,
    cat: &Catalog,
    wf_id: i64,
    wf: &WfRow,
    now: NaiveDateTime,
) {
    let wf_t = names(line).wf_table;
    q.push("state = 0");
    if cat.has(wf_t, "run_times") {
        q.push(", run_times = COALESCE(run_times, 0) + 1");
    }
    if cat.has(wf_t, "restart_time") {
        q.push(", restart_time = ").bind(now);
    }
    q.push(", end_time = NULL");
    if line == DsLine::V3_3 && cat.has(wf_t, "state_history") {
        match super::restart_state_history(wf.state_history.as_deref(), now) {
            Some(h) => {
                q.push(", state_history = ").bind(h.as_str());
            }
            None => tracing::warn!(
                workflow_instance_id = wf_id,
                "state_history is not a JSON list; left as it is"
            ),
        }
    }
}

/// Inserts the command, fitted to the connected table: its type and id.
async fn insert_command<D: Dialect>(
    c: &mut Conn<D>,
    cat: &Catalog,
    cmd: CommandRow,
) -> Result<(Option<i32>, i64), SqlError> {
    let cmd = fit_command(cmd, cat);
    let cols: Vec<&str> = cmd.cols.iter().map(|(c, _)| *c).collect();
    let mut q = Sql::<D>::new(format!(
        "INSERT INTO {COMMAND} ({}) VALUES (",
        cols.join(", ")
    ));
    q.bind_list(cmd.cols.iter().map(|(_, v)| Arg::from(v)))
        .push(")");
    let id = q.insert(c).await?;
    Ok((cmd.command_type(), id))
}

/// DS's master failover of the workflow's task rows on 2.0-3.1 (2.0.9
/// `MasterRegistryClient.failoverMaster`, 3.0.6/3.1.9
/// `MasterFailoverService.doFailoverMaster`): every valid (`flag = 1`)
/// unfinished row DS would pick ([`DsLine::master_failover_tolerates_task`])
/// to NEED_FAULT_TOLERANCE, `flag` and `end_time` left as they are. Without
/// it the master taking the command finds the task still "running" and never
/// dispatches it again. The rows are locked and read in the caller's
/// transaction; each update is conditional on the state and host read, so a
/// row that changed is left alone. The number of rows written.
async fn tolerate_tasks<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    wf_id: i64,
) -> Result<u64, SqlError> {
    let n = names(line);
    let mut q = Sql::<D>::new(format!(
        "SELECT id, state, host, submit_time FROM {TASK} WHERE {} = ",
        n.fk
    ));
    q.bind(wf_id)
        .push(" AND flag = 1 AND state NOT IN (")
        .push(&finished_list())
        .push(") FOR UPDATE");
    // (state, host) -> ids: one statement per distinct pair, not per row
    let mut groups: std::collections::BTreeMap<(i32, Option<String>), Vec<i64>> =
        std::collections::BTreeMap::new();
    for r in q.fetch_all(&mut *c).await? {
        let row = (|| -> Result<_, sqlx::Error> {
            Ok((
                D::int(&r, 0)?,
                D::int(&r, 1)?,
                D::text(&r, 2)?,
                D::time(&r, 3)?.is_some(),
            ))
        })();
        match row {
            Ok((Some(id), Some(state), host, submitted)) => {
                let state = state as i32;
                if line.master_failover_tolerates_task(state, host.as_deref(), submitted) {
                    groups.entry((state, host)).or_default().push(id);
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(workflow_instance_id = wf_id, error = %e,
                    "cannot decode a task row of the workflow; not writing it")
            }
        }
    }
    let mut written = 0;
    for ((state, host), ids) in groups {
        let mut q = Sql::<D>::new(format!(
            "UPDATE {TASK} SET state = {} WHERE ",
            reaper_core::line::NEED_FAULT_TOLERANCE
        ));
        D::in_set(&mut q, "id", &ids);
        q.push(" AND flag = 1 AND state = ")
            .bind(state)
            .push(" AND host ")
            .push(D::NULL_SAFE_EQ)
            .push(" ")
            .bind(host);
        q.one_off();
        written += q.execute(&mut *c).await?;
    }
    Ok(written)
}

/// A `SELECT COUNT(*)`.
async fn count<D: Dialect>(q: Sql<D>, c: &mut Conn<D>) -> Result<i64, SqlError> {
    let row = q.fetch_optional(c).await?;
    Ok(match row {
        Some(r) => D::int(&r, 0)?.unwrap_or(0),
        None => 0,
    })
}
