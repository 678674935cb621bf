//! The follow-up's transaction, for both dialects: lock and re-read the
//! workflow row, gather the facts, decide ([`super::decide`]), write.

use super::{decide, fit_command, live_owner, param_names_instance, Facts, WfRow, WfUpdate};
use crate::dialect::{Conn, Dialect};
use crate::schema::{finished_list, names, Catalog, DefCols, COMMAND, SCHEDULES, TASK};
use crate::sql::{Arg, Sql};
use crate::{FollowUpOutcome, FollowUpRequest, SqlError};
use reaper_core::{DsLine, FollowUp, Zone};
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
    let n = names(line);
    let wf_t = n.wf_table;
    let now = zone.to_naive(req.now);
    let mut tx = c.begin().await?;
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
    let mut q = Sql::<D>::new(format!(
        "SELECT state, executor_id, {def_sel}, {prio}, {tf}, {cp}, host FROM {wf_t} WHERE id = "
    ));
    q.bind(wf_id).push(" FOR UPDATE");
    let Some(r) = q.fetch_optional(&mut *tx).await? else {
        return Ok(FollowUpOutcome::Skipped(format!(
            "workflow instance {wf_id} not found"
        )));
    };
    let wf = WfRow {
        state: D::int(&r, 0)?.map(|s| s as i32),
        executor_id: D::int(&r, 1)?,
        def_id: D::int(&r, 2)?,
        def_code: D::int(&r, 3)?,
        def_version: D::int(&r, 4)?,
        priority: D::int(&r, 5)?,
        test_flag: D::int(&r, 6)?,
        command_param: D::text(&r, 7)?,
        host: D::text(&r, 8)?,
    };

    let mut q = Sql::<D>::new(format!("SELECT COUNT(*) FROM {TASK} WHERE {} = ", n.fk));
    q.bind(wf_id)
        .push(" AND id <> ")
        .bind(req.task.id)
        .push(" AND flag = 1 AND state NOT IN (")
        .push(&finished_list())
        .push(")");
    let other_live = count(q, &mut *tx).await?;
    let recover = req.follow_up == FollowUp::Recover;
    // `fail` must not run while a command for the workflow is queued either
    // (SPEC §5): the master that takes the command would run a failed workflow.
    let queued = if let Some(col) = n.cmd_instance_col {
        let mut q = Sql::<D>::new(format!("SELECT COUNT(*) FROM {COMMAND} WHERE {col} = "));
        q.bind(wf_id);
        count(q, &mut *tx).await? > 0
    } else {
        let q = Sql::<D>::new(format!(
            "SELECT command_param FROM {COMMAND} WHERE command_param LIKE '%ProcessInstanceId%'"
        ));
        let mut queued = false;
        for r in q.fetch_all(&mut *tx).await? {
            if D::text(&r, 0)?.is_some_and(|p| param_names_instance(&p, wf_id)) {
                queued = true;
            }
        }
        queued
    };
    let schedule_tz = match (recover, n.def, line, wf.def_code) {
        (
            true,
            DefCols::Code { .. },
            DsLine::V3_0 | DsLine::V3_1_0 | DsLine::V3_1 | DsLine::V3_2,
            Some(code),
        ) if cat.has(SCHEDULES, "process_definition_code") && cat.has(SCHEDULES, "timezone_id") => {
            let mut q = Sql::<D>::new(format!(
                "SELECT timezone_id FROM {SCHEDULES} WHERE process_definition_code = "
            ));
            q.bind(code).push(" LIMIT 1");
            match q.fetch_optional(&mut *tx).await? {
                Some(r) => D::text(&r, 0)?,
                None => None,
            }
        }
        _ => None,
    };
    let facts = Facts {
        other_live,
        queued,
        schedule_tz,
        live_owner: if recover {
            live_owner(wf.host.as_deref(), live_master)
        } else {
            None
        },
    };
    let d = match decide(line, req, wf_id, &wf, &facts, now) {
        Ok(d) => d,
        Err(skip) => return Ok(skip),
    };

    let mut workflow_state = None;
    if let Some(u) = &d.update {
        let mut q = Sql::<D>::new(format!("UPDATE {wf_t} SET "));
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
                q.push("state = 0");
                if cat.has(wf_t, "run_times") {
                    q.push(", run_times = COALESCE(run_times, 0) + 1");
                }
                if cat.has(wf_t, "restart_time") {
                    q.push(", restart_time = ").bind(now);
                }
                q.push(", end_time = NULL");
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
        if q.execute(&mut *tx).await? == 0 {
            tx.rollback().await?;
            return Ok(FollowUpOutcome::Skipped(format!(
                "lost race: workflow instance {wf_id} is no longer in state {from} with host {:?}; nothing written",
                wf.host
            )));
        }
        workflow_state = u.new_state();
    }
    let mut command_type = None;
    let mut command_id = None;
    if let Some(cmd) = d.command {
        let cmd = fit_command(cmd, cat);
        let cols: Vec<&str> = cmd.cols.iter().map(|(c, _)| *c).collect();
        let mut q = Sql::<D>::new(format!(
            "INSERT INTO {COMMAND} ({}) VALUES (",
            cols.join(", ")
        ));
        q.bind_list(cmd.cols.iter().map(|(_, v)| Arg::from(v)))
            .push(")");
        command_id = Some(q.insert(&mut *tx).await?);
        command_type = cmd.command_type();
    }
    tx.commit().await?;
    Ok(FollowUpOutcome::Done {
        workflow_state,
        command_type,
        command_id,
    })
}

/// A `SELECT COUNT(*)`.
async fn count<D: Dialect>(q: Sql<D>, c: &mut Conn<D>) -> Result<i64, SqlError> {
    let row = q.fetch_optional(c).await?;
    Ok(match row {
        Some(r) => D::int(&r, 0)?.unwrap_or(0),
        None => 0,
    })
}
