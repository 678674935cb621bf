//! Every PostgreSQL statement of the adapter.

use crate::follow::{decide, Facts, Val, WfRow, WfUpdate};
use crate::schema::{
    finished_list, names, DefCols, WorkerGroupCol, COMMAND, SCHEDULES, TASK, WORKER_GROUP,
};
use crate::{
    worker_group_from_id, DbSettings, FollowUpOutcome, FollowUpRequest, Select, SqlError, TaskRow,
    TaskWrite, PAGE,
};
use chrono::NaiveDateTime;
use reaper_core::{Action, Candidate, DsLine, FollowUp, Zone};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{Executor, PgPool, Row};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::str::FromStr;

pub(crate) fn connect_lazy(s: &DbSettings) -> Result<PgPool, SqlError> {
    let mut opts = PgConnectOptions::from_str(s.url.trim())
        .map_err(|e| SqlError::BadUrl(format!("{}: {e}", crate::redact_url(&s.url))))?;
    if let Some(pw) = &s.password {
        opts = opts.password(pw);
    }
    let timeout = s.statement_timeout;
    let pool = PgPoolOptions::new()
        .max_connections(s.max_connections.max(1))
        .acquire_timeout(timeout.max(std::time::Duration::from_secs(5)))
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                if timeout.is_zero() {
                    return Ok(());
                }
                let sql = format!("SET statement_timeout = {}", timeout.as_millis());
                conn.execute(sql.as_str()).await?;
                Ok(())
            })
        })
        .connect_lazy_with(opts);
    Ok(pool)
}

pub(crate) async fn ping(p: &PgPool) -> Result<(), SqlError> {
    sqlx::query("SELECT 1").execute(p).await?;
    Ok(())
}

pub(crate) async fn schema_facts(
    p: &PgPool,
) -> Result<(BTreeSet<String>, BTreeSet<String>, Option<String>), SqlError> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT LOWER(table_name)::text FROM information_schema.tables WHERE table_schema = current_schema()",
    )
    .fetch_all(p)
    .await?;
    let cols: Vec<String> = sqlx::query_scalar(
        "SELECT LOWER(column_name)::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND LOWER(table_name) = 't_ds_task_instance'",
    )
    .fetch_all(p)
    .await?;
    let tables: BTreeSet<String> = tables.into_iter().collect();
    let version = if tables.contains("t_ds_version") {
        sqlx::query_scalar::<_, Option<String>>("SELECT version::text FROM t_ds_version LIMIT 1")
            .fetch_optional(p)
            .await
            .ok()
            .flatten()
            .flatten()
    } else {
        None
    };
    Ok((tables, cols.into_iter().collect(), version))
}

pub(crate) async fn max_id(p: &PgPool) -> Result<Option<i64>, SqlError> {
    let sql = format!("SELECT MAX(id) FROM {TASK}");
    let v = sqlx::query_scalar::<_, Option<i32>>(&sql)
        .fetch_one(p)
        .await?;
    Ok(v.map(i64::from))
}

/// The candidate select list and joins of a line.
fn select_from(line: DsLine) -> String {
    let n = names(line);
    let (wg, wg_name, wg_join) = match n.wg {
        WorkerGroupCol::Id => (
            "t.worker_group_id",
            "g.name",
            format!(" LEFT JOIN {WORKER_GROUP} g ON g.id = t.worker_group_id"),
        ),
        WorkerGroupCol::Name => ("t.worker_group", "NULL", String::new()),
    };
    let pc = if n.project_code {
        "t.project_code"
    } else {
        "NULL"
    };
    format!(
        "SELECT t.id, t.name, t.task_type, t.state, t.host, t.submit_time, t.start_time, \
         {wg}, {wg_name}, {pc}, t.{fk}, t.flag, w.host, w.state \
         FROM {TASK} t LEFT JOIN {wf} w ON w.id = t.{fk}{wg_join}",
        fk = n.fk,
        wf = n.wf_table
    )
}

fn decode(line: DsLine, zone: Zone, r: &PgRow) -> Result<TaskRow, sqlx::Error> {
    let t = |v: Option<NaiveDateTime>| v.and_then(|n| zone.to_instant(n));
    let worker_group = match names(line).wg {
        WorkerGroupCol::Id => worker_group_from_id(
            r.try_get::<Option<i32>, _>(7)?.map(i64::from),
            r.try_get(8)?,
        ),
        WorkerGroupCol::Name => r.try_get(7)?,
    };
    let state: Option<i32> = r.try_get(3)?;
    let row = Candidate {
        id: i64::from(r.try_get::<i32, _>(0)?),
        name: r.try_get::<Option<String>, _>(1)?.unwrap_or_default(),
        task_type: r.try_get::<Option<String>, _>(2)?.unwrap_or_default(),
        state: state.unwrap_or(-1),
        host: r.try_get(4)?,
        submit_time: t(r.try_get(5)?),
        start_time: t(r.try_get(6)?),
        worker_group,
        project_code: r.try_get(9)?,
        workflow_instance_id: r.try_get::<Option<i32>, _>(10)?.map(i64::from),
        workflow_host: r.try_get(12)?,
        workflow_state: r.try_get(13)?,
    };
    let flag: Option<i32> = r.try_get(11)?;
    Ok(TaskRow {
        row,
        flag: flag.unwrap_or(0),
    })
}

fn decode_all(line: DsLine, zone: Zone, rows: &[PgRow]) -> Vec<TaskRow> {
    rows.iter()
        .filter_map(|r| match decode(line, zone, r) {
            Ok(t) => Some(t),
            Err(e) => {
                let id: Option<i32> = r.try_get(0).ok();
                tracing::warn!(task_id = ?id, error = %e, "skipping a task row that cannot be decoded");
                None
            }
        })
        .collect()
}

pub(crate) async fn page(
    p: &PgPool,
    line: DsLine,
    zone: Zone,
    sel: Select,
    after: i64,
) -> Result<Vec<TaskRow>, SqlError> {
    let filter = match sel {
        Select::Unfinished => format!("t.state NOT IN ({})", finished_list()),
    };
    let sql = format!(
        "{} WHERE t.id > $1 AND t.flag = 1 AND {filter} ORDER BY t.id LIMIT {PAGE}",
        select_from(line)
    );
    let rows = sqlx::query(&sql).bind(after).fetch_all(p).await?;
    Ok(decode_all(line, zone, &rows))
}

/// `$from, …, $(from + n - 1)`.
fn placeholders_from(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn placeholders(n: usize) -> String {
    placeholders_from(1, n)
}

pub(crate) async fn by_ids(
    p: &PgPool,
    line: DsLine,
    zone: Zone,
    ids: &[i64],
) -> Result<Vec<TaskRow>, SqlError> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let sql = format!(
        "{} WHERE t.id IN ({}) ORDER BY t.id",
        select_from(line),
        placeholders(ids.len())
    );
    let mut q = sqlx::query(&sql);
    for id in ids {
        q = q.bind(id);
    }
    let rows = q.fetch_all(p).await?;
    Ok(decode_all(line, zone, &rows))
}

/// One `UPDATE … FROM UNNEST(…) RETURNING id` per action: each row's own
/// seen state, host and submit time are in the join, so the check and the
/// update are one statement and the returned ids say which rows were applied.
pub(crate) async fn write_batch(
    p: &PgPool,
    _line: DsLine,
    zone: Zone,
    batch: &[&TaskWrite],
) -> Result<Vec<bool>, SqlError> {
    let mut applied = vec![false; batch.len()];
    if batch.is_empty() {
        return Ok(applied);
    }
    let mut groups: HashMap<(Action, reaper_core::Instant), Vec<usize>> = HashMap::new();
    for (k, w) in batch.iter().enumerate() {
        groups.entry((w.action, w.now)).or_default().push(k);
    }
    let mut tx = p.begin().await?;
    for ((action, now), idx) in groups {
        let now = zone.to_naive(now);
        let Some(code) = action.target_state() else {
            continue;
        };
        let ids: Vec<i64> = idx.iter().map(|&k| batch[k].seen.id).collect();
        let states: Vec<i32> = idx.iter().map(|&k| batch[k].seen.state).collect();
        let hosts: Vec<Option<String>> = idx.iter().map(|&k| batch[k].seen.host.clone()).collect();
        let submits: Vec<Option<NaiveDateTime>> = idx
            .iter()
            .map(|&k| batch[k].seen.submit_time.map(|t| zone.to_naive(t)))
            .collect();
        let (sets, first) = if action == Action::FaultTolerance {
            ("state = $1", 2)
        } else {
            ("state = $1, end_time = $2", 3)
        };
        let sql = format!(
            "UPDATE {TASK} t SET {sets} \
             FROM UNNEST(${a}::int8[], ${b}::int4[], ${c}::varchar[], ${d}::timestamp[]) AS v(id, st, host, sub) \
             WHERE t.id = v.id AND t.state = v.st AND t.flag = 1 \
             AND t.host IS NOT DISTINCT FROM v.host AND t.submit_time IS NOT DISTINCT FROM v.sub \
             RETURNING t.id",
            a = first,
            b = first + 1,
            c = first + 2,
            d = first + 3
        );
        let mut q = sqlx::query_scalar::<_, i32>(&sql).bind(code);
        if action != Action::FaultTolerance {
            q = q.bind(now);
        }
        let done: Vec<i32> = q
            .bind(ids)
            .bind(states)
            .bind(hosts)
            .bind(submits)
            .fetch_all(&mut *tx)
            .await?;
        let mut done: HashSet<i64> = done.into_iter().map(i64::from).collect();
        for &k in &idx {
            // a duplicate id in one batch is applied once
            if done.remove(&batch[k].seen.id) {
                applied[k] = true;
            }
        }
    }
    tx.commit().await?;
    Ok(applied)
}

pub(crate) async fn follow_up(
    p: &PgPool,
    line: DsLine,
    zone: Zone,
    req: &FollowUpRequest,
    wf_id: i64,
) -> Result<FollowUpOutcome, SqlError> {
    let n = names(line);
    let now = zone.to_naive(req.now);
    let mut tx = p.begin().await?;
    let (def1, def2) = match n.def {
        DefCols::Id => ("process_definition_id", "NULL"),
        DefCols::Code { code, version } => (code, version),
    };
    let def_sel = match n.def {
        DefCols::Id => format!("{def1}, NULL, NULL"),
        DefCols::Code { .. } => format!("NULL, {def1}, {def2}"),
    };
    let prio = if line >= DsLine::V3_1_0 {
        n.priority
    } else {
        "NULL"
    };
    let tf = if n.test_flag { "test_flag" } else { "NULL" };
    let sql = format!(
        "SELECT state, executor_id, {def_sel}, {prio}, {tf}, command_param FROM {wf} WHERE id = $1 FOR UPDATE",
        wf = n.wf_table
    );
    let Some(r) = sqlx::query(&sql)
        .bind(wf_id)
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(FollowUpOutcome::Skipped(format!(
            "workflow instance {wf_id} not found"
        )));
    };
    let int = |i: usize| -> Result<Option<i64>, sqlx::Error> {
        Ok(r.try_get::<Option<i32>, _>(i)?.map(i64::from))
    };
    let wf = WfRow {
        state: r.try_get(0)?,
        executor_id: int(1)?,
        def_id: int(2)?,
        def_code: r.try_get(3)?,
        def_version: int(4)?,
        priority: int(5)?,
        test_flag: int(6)?,
        command_param: r.try_get(7)?,
    };
    let sql = format!(
        "SELECT COUNT(*) FROM {TASK} WHERE {fk} = $1 AND id <> $2 AND flag = 1 AND state NOT IN ({})",
        finished_list(),
        fk = n.fk
    );
    let other_live: i64 = sqlx::query_scalar(&sql)
        .bind(wf_id)
        .bind(req.task.id)
        .fetch_one(&mut *tx)
        .await?;
    let recover = req.follow_up == FollowUp::Recover;
    let queued = if !recover {
        false
    } else if let Some(col) = n.cmd_instance_col {
        let sql = format!("SELECT COUNT(*) FROM {COMMAND} WHERE {col} = $1");
        let c: i64 = sqlx::query_scalar(&sql)
            .bind(wf_id)
            .fetch_one(&mut *tx)
            .await?;
        c > 0
    } else {
        let sql = format!(
            "SELECT command_param FROM {COMMAND} WHERE command_param LIKE '%ProcessInstanceId%'"
        );
        let params: Vec<Option<String>> = sqlx::query_scalar(&sql).fetch_all(&mut *tx).await?;
        params
            .iter()
            .flatten()
            .any(|p| crate::follow::param_names_instance(p, wf_id))
    };
    let schedule_tz = match (recover, n.def, line) {
        (
            true,
            DefCols::Code { .. },
            DsLine::V3_0 | DsLine::V3_1_0 | DsLine::V3_1 | DsLine::V3_2,
        ) => match wf.def_code {
            Some(code) => {
                let sql = format!(
                        "SELECT timezone_id FROM {SCHEDULES} WHERE process_definition_code = $1 LIMIT 1"
                    );
                sqlx::query_scalar::<_, Option<String>>(&sql)
                    .bind(code)
                    .fetch_optional(&mut *tx)
                    .await?
                    .flatten()
            }
            None => None,
        },
        _ => None,
    };
    let facts = Facts {
        other_live,
        queued,
        schedule_tz,
    };
    let d = match decide(line, req, wf_id, &wf, &facts, now) {
        Ok(d) => d,
        Err(skip) => return Ok(skip),
    };
    let mut workflow_state = None;
    if let Some(u) = &d.update {
        let wf_t = n.wf_table;
        let res = match u {
            WfUpdate::Fail { from } => {
                sqlx::query(&format!(
                    "UPDATE {wf_t} SET state = 6, end_time = $1 WHERE id = $2 AND state = $3"
                ))
                .bind(now)
                .bind(wf_id)
                .bind(from)
                .execute(&mut *tx)
                .await?
            }
            WfUpdate::NullHost => {
                sqlx::query(&format!("UPDATE {wf_t} SET host = $1 WHERE id = $2"))
                    .bind(n.null_host)
                    .bind(wf_id)
                    .execute(&mut *tx)
                    .await?
            }
            WfUpdate::Failover { from } => {
                sqlx::query(&format!(
                    "UPDATE {wf_t} SET state = 18 WHERE id = $1 AND state = $2"
                ))
                .bind(wf_id)
                .bind(from)
                .execute(&mut *tx)
                .await?
            }
            WfUpdate::Restart { from } => {
                sqlx::query(&format!(
                    "UPDATE {wf_t} SET state = 0, run_times = COALESCE(run_times, 0) + 1, \
                     restart_time = $1, end_time = NULL WHERE id = $2 AND state = $3"
                ))
                .bind(now)
                .bind(wf_id)
                .bind(from)
                .execute(&mut *tx)
                .await?
            }
        };
        if res.rows_affected() == 0 {
            return Ok(FollowUpOutcome::Skipped(format!(
                "workflow instance {wf_id} changed while being updated"
            )));
        }
        workflow_state = u.new_state();
    }
    let mut command_type = None;
    let mut command_id = None;
    if let Some(cmd) = &d.command {
        let cols: Vec<&str> = cmd.cols.iter().map(|(c, _)| *c).collect();
        let sql = format!(
            "INSERT INTO {COMMAND} ({}) VALUES ({}) RETURNING id",
            cols.join(", "),
            placeholders(cols.len())
        );
        let mut q = sqlx::query(&sql);
        for (_, v) in &cmd.cols {
            q = match v {
                Val::I32(x) => q.bind(*x),
                Val::I64(x) => q.bind(*x),
                Val::Text(x) => q.bind(x.clone()),
                Val::Time(x) => q.bind(*x),
            };
        }
        let id: i32 = q.fetch_one(&mut *tx).await?.try_get(0)?;
        command_id = Some(i64::from(id));
        command_type = cmd.command_type();
    }
    tx.commit().await?;
    Ok(FollowUpOutcome::Done {
        workflow_state,
        command_type,
        command_id,
    })
}
