//! Every MySQL/MariaDB statement of the adapter.

use crate::follow::{decide, fit_command, live_owner, Facts, Val, WfRow, WfUpdate};
use crate::schema::{
    finished_list, learned_tables_list, names, Catalog, DefCols, WorkerGroupCol, COMMAND,
    SCHEDULES, TASK, WORKER_GROUP,
};
use crate::{
    worker_group_from_id, BadRow, DbSettings, FollowUpOutcome, FollowUpRequest, Page, Select,
    SqlError, TaskRow, TaskWrite, PAGE, WRITE_BATCH,
};
use chrono::NaiveDateTime;
use reaper_core::{Action, Candidate, DsLine, FollowUp, Zone};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPoolOptions, MySqlRow};
use sqlx::{Connection, Executor, MySqlPool, Row};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) fn connect_lazy(s: &DbSettings, epoch: Arc<AtomicU64>) -> Result<MySqlPool, SqlError> {
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
            let epoch = epoch.clone();
            Box::pin(async move {
                epoch.fetch_add(1, Ordering::AcqRel);
                if timeout.is_zero() {
                    return Ok(());
                }
                // MariaDB's max_statement_time (seconds) bounds every
                // statement, writes and lock waits included. MySQL has no such
                // variable: its max_execution_time (ms) bounds read-only
                // SELECTs only, so writes and locking reads rely on the lock
                // wait timeouts below (and on the client-side limit).
                let maria = format!(
                    "SET SESSION max_statement_time = {:.3}",
                    timeout.as_secs_f64()
                );
                if conn.execute(maria.as_str()).await.is_err() {
                    let my = format!("SET SESSION max_execution_time = {}", timeout.as_millis());
                    conn.execute(my.as_str()).await?;
                }
                // whole seconds only, at least 1
                let secs = timeout.as_secs_f64().ceil().max(1.0) as u64;
                let locks = format!(
                    "SET SESSION innodb_lock_wait_timeout = {secs}, lock_wait_timeout = {secs}"
                );
                conn.execute(locks.as_str()).await?;
                Ok(())
            })
        })
        .connect_lazy_with(opts);
    Ok(pool)
}

pub(crate) async fn ping(c: &mut MySqlConnection) -> Result<(), SqlError> {
    sqlx::query("SELECT 1").execute(c).await?;
    Ok(())
}

/// The tables, the columns of the tables the adapter uses, and the
/// `t_ds_version` row.
pub(crate) async fn schema_facts(
    c: &mut MySqlConnection,
) -> Result<(Catalog, Option<String>), SqlError> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(LOWER(table_name) AS CHAR) FROM information_schema.tables WHERE table_schema = DATABASE()",
    )
    .fetch_all(&mut *c)
    .await?;
    let sql = format!(
        "SELECT CAST(LOWER(table_name) AS CHAR), CAST(LOWER(column_name) AS CHAR) \
         FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND LOWER(table_name) IN ({})",
        learned_tables_list()
    );
    let cols: Vec<(String, String)> = sqlx::query_as(&sql).fetch_all(&mut *c).await?;
    let tables: BTreeSet<String> = tables.into_iter().collect();
    let version = if tables.contains("t_ds_version") {
        sqlx::query_scalar::<_, Option<String>>(
            "SELECT CAST(version AS CHAR) FROM t_ds_version LIMIT 1",
        )
        .fetch_optional(&mut *c)
        .await
        .ok()
        .flatten()
        .flatten()
    } else {
        None
    };
    Ok((Catalog::new(tables, cols), version))
}

pub(crate) async fn max_id(c: &mut MySqlConnection) -> Result<Option<i64>, SqlError> {
    let sql = format!("SELECT MAX(id) FROM {TASK}");
    Ok(sqlx::query_scalar::<_, Option<i64>>(&sql)
        .fetch_one(c)
        .await?)
}

/// The candidate select list and joins of a line.
fn select_from(line: DsLine, cat: &Catalog) -> String {
    let n = names(line);
    let (wg, wg_name, wg_join) = match n.wg {
        WorkerGroupCol::Id => (
            "t.worker_group_id",
            "g.name",
            format!(" LEFT JOIN {WORKER_GROUP} g ON g.id = t.worker_group_id"),
        ),
        WorkerGroupCol::Name => ("t.worker_group", "NULL", String::new()),
    };
    let pc = if cat.has(TASK, "project_code") {
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

/// Decodes what it can; a row that fails is reported in `bad`, never dropped
/// silently (the caller logs, counts and keeps tracking it).
fn decode_page(line: DsLine, zone: Zone, rows: &[MySqlRow]) -> Result<Page, SqlError> {
    let mut page = Page {
        raw: rows.len(),
        ..Page::default()
    };
    for r in rows {
        let id: i64 = r.try_get(0)?;
        page.last_id = Some(id);
        match decode(line, zone, r) {
            Ok(t) => page.rows.push(t),
            Err(e) => page.bad.push(BadRow {
                id,
                may_be_live: Page::may_be_live(
                    r.try_get::<Option<i64>, _>(3).ok().flatten(),
                    r.try_get::<Option<i64>, _>(11).ok().flatten(),
                ),
                error: e.to_string(),
            }),
        }
    }
    Ok(page)
}

pub(crate) async fn page(
    c: &mut MySqlConnection,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    sel: Select,
    after: i64,
) -> Result<Page, SqlError> {
    let filter = match sel {
        Select::Unfinished => format!("t.state NOT IN ({})", finished_list()),
    };
    let sql = format!(
        "{} WHERE t.id > ? AND t.flag = 1 AND {filter} ORDER BY t.id LIMIT {PAGE}",
        select_from(line, cat)
    );
    let rows = sqlx::query(&sql).bind(after).fetch_all(c).await?;
    decode_page(line, zone, &rows)
}

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(",")
}

pub(crate) async fn by_ids(
    c: &mut MySqlConnection,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    ids: &[i64],
) -> Result<Page, SqlError> {
    if ids.is_empty() {
        return Ok(Page::default());
    }
    let sql = format!(
        "{} WHERE t.id IN ({}) ORDER BY t.id",
        select_from(line, cat),
        placeholders(ids.len())
    );
    let mut q = sqlx::query(&sql);
    for id in ids {
        q = q.bind(id);
    }
    let rows = q.fetch_all(c).await?;
    decode_page(line, zone, &rows)
}

/// Locks the rows, keeps those still exactly as seen, updates them by id:
/// MySQL has no `UPDATE … RETURNING`, and the lock makes the check and the
/// update one atomic step.
pub(crate) async fn write_batch(
    c: &mut MySqlConnection,
    _line: DsLine,
    zone: Zone,
    batch: &[&TaskWrite],
) -> Result<Vec<bool>, SqlError> {
    let mut applied = vec![false; batch.len()];
    if batch.is_empty() {
        return Ok(applied);
    }
    let mut tx = c.begin().await?;
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

/// Locks the workflow row and decides on what it holds now (SPEC §4.9):
/// every update is conditional on the state and host read under the lock,
/// and one that matches nothing rolls the whole follow-up back.
pub(crate) async fn follow_up(
    c: &mut MySqlConnection,
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
    let sql = format!(
        "SELECT state, executor_id, {def_sel}, {prio}, {tf}, {cp}, host FROM {wf_t} WHERE id = ? FOR UPDATE"
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
        host: text(&r, 8)?,
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
    // `fail` must not run while a command for the workflow is queued either
    // (SPEC §5): the master that takes the command would run a failed workflow.
    let queued = if let Some(col) = n.cmd_instance_col {
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
        ) if cat.has(SCHEDULES, "process_definition_code") && cat.has(SCHEDULES, "timezone_id") => {
            match wf.def_code {
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
        let guard = "id = ? AND state = ? AND host <=> ?";
        let (sql, from) = match u {
            WfUpdate::Fail { from } => (
                format!("UPDATE {wf_t} SET state = 6, end_time = ? WHERE {guard}"),
                from,
            ),
            WfUpdate::NullHost { from } => {
                (format!("UPDATE {wf_t} SET host = ? WHERE {guard}"), from)
            }
            WfUpdate::Failover { from } => {
                (format!("UPDATE {wf_t} SET state = 18 WHERE {guard}"), from)
            }
            WfUpdate::Restart { from } => {
                let mut sets = vec!["state = 0"];
                if cat.has(wf_t, "run_times") {
                    sets.push("run_times = COALESCE(run_times, 0) + 1");
                }
                if cat.has(wf_t, "restart_time") {
                    sets.push("restart_time = ?");
                }
                sets.push("end_time = NULL");
                (
                    format!("UPDATE {wf_t} SET {} WHERE {guard}", sets.join(", ")),
                    from,
                )
            }
        };
        let mut q = sqlx::query(&sql);
        match u {
            WfUpdate::Fail { .. } => q = q.bind(now),
            WfUpdate::NullHost { .. } => q = q.bind(n.null_host),
            WfUpdate::Failover { .. } => {}
            WfUpdate::Restart { .. } => {
                if cat.has(wf_t, "restart_time") {
                    q = q.bind(now);
                }
            }
        }
        let res = q
            .bind(wf_id)
            .bind(*from)
            .bind(wf.host.clone())
            .execute(&mut *tx)
            .await?;
        if res.rows_affected() == 0 {
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
