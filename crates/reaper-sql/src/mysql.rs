//! Every MySQL/MariaDB statement of the adapter.

use crate::follow::{decide, Facts, Val, WfRow, WfUpdate};
use crate::schema::{
    finished_list, names, DefCols, WorkerGroupCol, COMMAND, SCHEDULES, TASK, WORKER_GROUP,
};
use crate::{
    worker_group_from_id, DbSettings, FollowUpOutcome, FollowUpRequest, Select, SqlError, TaskRow,
    TaskWrite, PAGE, WRITE_BATCH,
};
use chrono::NaiveDateTime;
use reaper_core::{Action, Candidate, DsLine, FollowUp, Zone};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions, MySqlRow};
use sqlx::{Executor, MySqlPool, Row};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::str::FromStr;

pub(crate) fn connect_lazy(s: &DbSettings) -> Result<MySqlPool, SqlError> {
    let mut opts = MySqlConnectOptions::from_str(s.url.trim())
        .map_err(|e| SqlError::BadUrl(format!("{}: {e}", crate::redact_url(&s.url))))?;
    if let Some(pw) = &s.password {
        opts = opts.password(pw);
    }
    let timeout = s.statement_timeout;
    let pool = MySqlPoolOptions::new()
        .max_connections(s.max_connections.max(1))
        .acquire_timeout(timeout.max(std::time::Duration::from_secs(5)))
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                if timeout.is_zero() {
                    return Ok(());
                }
                // MariaDB takes seconds in max_statement_time, MySQL milliseconds
                // in max_execution_time; each rejects the other's variable.
                let maria = format!(
                    "SET SESSION max_statement_time = {:.3}",
                    timeout.as_secs_f64()
                );
                if conn.execute(maria.as_str()).await.is_err() {
                    let my = format!("SET SESSION max_execution_time = {}", timeout.as_millis());
                    conn.execute(my.as_str()).await?;
                }
                Ok(())
            })
        })
        .connect_lazy_with(opts);
    Ok(pool)
}

pub(crate) async fn ping(p: &MySqlPool) -> Result<(), SqlError> {
    sqlx::query("SELECT 1").execute(p).await?;
    Ok(())
}

pub(crate) async fn schema_facts(
    p: &MySqlPool,
) -> Result<(BTreeSet<String>, BTreeSet<String>, Option<String>), SqlError> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(LOWER(table_name) AS CHAR) FROM information_schema.tables WHERE table_schema = DATABASE()",
    )
    .fetch_all(p)
    .await?;
    let cols: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(LOWER(column_name) AS CHAR) FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND LOWER(table_name) = 't_ds_task_instance'",
    )
    .fetch_all(p)
    .await?;
    let tables: BTreeSet<String> = tables.into_iter().collect();
    let version = if tables.contains("t_ds_version") {
        sqlx::query_scalar::<_, Option<String>>(
            "SELECT CAST(version AS CHAR) FROM t_ds_version LIMIT 1",
        )
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

pub(crate) async fn max_id(p: &MySqlPool) -> Result<Option<i64>, SqlError> {
    let sql = format!("SELECT MAX(id) FROM {TASK}");
    Ok(sqlx::query_scalar::<_, Option<i64>>(&sql)
        .fetch_one(p)
        .await?)
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

/// A text column: tables with a `utf8_bin` collation (3.2+) report their
/// varchars as binary, which sqlx will not decode as `String`.
fn text(r: &MySqlRow, i: usize) -> Result<Option<String>, sqlx::Error> {
    match r.try_get::<Option<String>, _>(i) {
        Ok(v) => Ok(v),
        Err(_) => Ok(r
            .try_get::<Option<Vec<u8>>, _>(i)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())),
    }
}

fn decode(line: DsLine, zone: Zone, r: &MySqlRow) -> Result<TaskRow, sqlx::Error> {
    let t = |v: Option<NaiveDateTime>| v.and_then(|n| zone.to_instant(n));
    let worker_group = match names(line).wg {
        WorkerGroupCol::Id => worker_group_from_id(r.try_get(7)?, text(r, 8)?),
        WorkerGroupCol::Name => text(r, 7)?,
    };
    let state: Option<i64> = r.try_get(3)?;
    let row = Candidate {
        id: r.try_get(0)?,
        name: text(r, 1)?.unwrap_or_default(),
        task_type: text(r, 2)?.unwrap_or_default(),
        state: state.unwrap_or(-1) as i32,
        host: text(r, 4)?,
        submit_time: t(r.try_get(5)?),
        start_time: t(r.try_get(6)?),
        worker_group,
        project_code: r.try_get(9)?,
        workflow_instance_id: r.try_get(10)?,
        workflow_host: text(r, 12)?,
        workflow_state: r.try_get::<Option<i64>, _>(13)?.map(|s| s as i32),
    };
    let flag: Option<i64> = r.try_get(11)?;
    Ok(TaskRow {
        row,
        flag: flag.unwrap_or(0) as i32,
    })
}

fn decode_all(line: DsLine, zone: Zone, rows: &[MySqlRow]) -> Vec<TaskRow> {
    rows.iter()
        .filter_map(|r| match decode(line, zone, r) {
            Ok(t) => Some(t),
            Err(e) => {
                let id: Option<i64> = r.try_get(0).ok();
                tracing::warn!(task_id = ?id, error = %e, "skipping a task row that cannot be decoded");
                None
            }
        })
        .collect()
}

pub(crate) async fn page(
    p: &MySqlPool,
    line: DsLine,
    zone: Zone,
    sel: Select,
    after: i64,
) -> Result<Vec<TaskRow>, SqlError> {
    let filter = match sel {
        Select::Unfinished => format!("t.state NOT IN ({})", finished_list()),
    };
    let sql = format!(
        "{} WHERE t.id > ? AND t.flag = 1 AND {filter} ORDER BY t.id LIMIT {PAGE}",
        select_from(line)
    );
    let rows = sqlx::query(&sql).bind(after).fetch_all(p).await?;
    Ok(decode_all(line, zone, &rows))
}

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(",")
}

pub(crate) async fn by_ids(
    p: &MySqlPool,
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

/// Locks the rows, keeps those still exactly as seen, updates them by id:
/// MySQL has no `UPDATE … RETURNING`, and the lock makes the check and the
/// update one atomic step.
pub(crate) async fn write_batch(
    p: &MySqlPool,
    _line: DsLine,
    zone: Zone,
    batch: &[&TaskWrite],
) -> Result<Vec<bool>, SqlError> {
    let mut applied = vec![false; batch.len()];
    if batch.is_empty() {
        return Ok(applied);
    }
    let mut tx = p.begin().await?;
    let mut rows = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(WRITE_BATCH) {
        let sql = format!(
            "SELECT id, state, flag, host, submit_time FROM {TASK} WHERE id IN ({}) FOR UPDATE",
            placeholders(chunk.len())
        );
        // One-off statement text (its placeholder count varies): not worth
        // a prepared-statement cache entry per batch size.
        let mut q = sqlx::query(&sql).persistent(false);
        for w in chunk {
            q = q.bind(w.seen.id);
        }
        rows.extend(q.fetch_all(&mut *tx).await?);
    }
    type Cur = (
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<NaiveDateTime>,
    );
    let mut current: HashMap<i64, Cur> = HashMap::new();
    for r in &rows {
        let id: i64 = match r.try_get(0) {
            Ok(id) => id,
            Err(_) => continue,
        };
        let cur = (|| -> Result<Cur, sqlx::Error> {
            Ok((r.try_get(1)?, r.try_get(2)?, text(r, 3)?, r.try_get(4)?))
        })();
        match cur {
            Ok(c) => {
                current.insert(id, c);
            }
            Err(e) => {
                tracing::warn!(task_id = id, error = %e, "cannot decode a locked task row; not writing it")
            }
        }
    }
    let mut groups: HashMap<(Action, reaper_core::Instant), Vec<i64>> = HashMap::new();
    let mut taken = HashSet::new();
    for (k, w) in batch.iter().enumerate() {
        let Some((state, flag, host, submit)) = current.get(&w.seen.id) else {
            continue;
        };
        let seen_submit = w.seen.submit_time.map(|t| zone.to_naive(t));
        let same = *state == Some(w.seen.state as i64)
            && *flag == Some(1)
            && *host == w.seen.host
            && *submit == seen_submit;
        if same && taken.insert(w.seen.id) {
            applied[k] = true;
            groups.entry((w.action, w.now)).or_default().push(w.seen.id);
        }
    }
    for ((action, now), all_ids) in groups {
        let Some(code) = action.target_state() else {
            continue;
        };
        let sets = if action == Action::FaultTolerance {
            "state = ?"
        } else {
            "state = ?, end_time = ?"
        };
        for ids in all_ids.chunks(WRITE_BATCH) {
            let sql = format!(
                "UPDATE {TASK} SET {sets} WHERE id IN ({}) AND flag = 1",
                placeholders(ids.len())
            );
            let mut q = sqlx::query(&sql).persistent(false).bind(code);
            if action != Action::FaultTolerance {
                q = q.bind(zone.to_naive(now));
            }
            for id in ids {
                q = q.bind(id);
            }
            q.execute(&mut *tx).await?;
        }
    }
    tx.commit().await?;
    Ok(applied)
}

pub(crate) async fn follow_up(
    p: &MySqlPool,
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
        "SELECT state, executor_id, {def_sel}, {prio}, {tf}, command_param FROM {wf} WHERE id = ? FOR UPDATE",
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
    let wf = WfRow {
        state: r.try_get::<Option<i64>, _>(0)?.map(|s| s as i32),
        executor_id: r.try_get(1)?,
        def_id: r.try_get(2)?,
        def_code: r.try_get(3)?,
        def_version: r.try_get(4)?,
        priority: r.try_get(5)?,
        test_flag: r.try_get(6)?,
        command_param: text(&r, 7)?,
    };
    let sql = format!(
        "SELECT COUNT(*) FROM {TASK} WHERE {fk} = ? AND id <> ? AND flag = 1 AND state NOT IN ({})",
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
        let sql = format!("SELECT COUNT(*) FROM {COMMAND} WHERE {col} = ?");
        let c: i64 = sqlx::query_scalar(&sql)
            .bind(wf_id)
            .fetch_one(&mut *tx)
            .await?;
        c > 0
    } else {
        let sql = format!(
            "SELECT command_param FROM {COMMAND} WHERE command_param LIKE '%ProcessInstanceId%'"
        );
        let rows = sqlx::query(&sql).fetch_all(&mut *tx).await?;
        let params: Vec<Option<String>> =
            rows.iter().map(|r| text(r, 0)).collect::<Result<_, _>>()?;
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
                    "SELECT timezone_id FROM {SCHEDULES} WHERE process_definition_code = ? LIMIT 1"
                );
                match sqlx::query(&sql)
                    .bind(code)
                    .fetch_optional(&mut *tx)
                    .await?
                {
                    Some(r) => text(&r, 0)?,
                    None => None,
                }
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
                    "UPDATE {wf_t} SET state = 6, end_time = ? WHERE id = ? AND state = ?"
                ))
                .bind(now)
                .bind(wf_id)
                .bind(from)
                .execute(&mut *tx)
                .await?
            }
            WfUpdate::NullHost => {
                sqlx::query(&format!("UPDATE {wf_t} SET host = ? WHERE id = ?"))
                    .bind(n.null_host)
                    .bind(wf_id)
                    .execute(&mut *tx)
                    .await?
            }
            WfUpdate::Failover { from } => {
                sqlx::query(&format!(
                    "UPDATE {wf_t} SET state = 18 WHERE id = ? AND state = ?"
                ))
                .bind(wf_id)
                .bind(from)
                .execute(&mut *tx)
                .await?
            }
            WfUpdate::Restart { from } => {
                sqlx::query(&format!(
                    "UPDATE {wf_t} SET state = 0, run_times = COALESCE(run_times, 0) + 1, \
                     restart_time = ?, end_time = NULL WHERE id = ? AND state = ?"
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
            "INSERT INTO {COMMAND} ({}) VALUES ({})",
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
        let res = q.execute(&mut *tx).await?;
        command_id = Some(res.last_insert_id() as i64);
        command_type = cmd.command_type();
    }
    tx.commit().await?;
    Ok(FollowUpOutcome::Done {
        workflow_state,
        command_type,
        command_id,
    })
}
