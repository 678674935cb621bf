//! Every PostgreSQL statement of the adapter.

use crate::follow::{decide, fit_command, live_owner, Facts, Val, WfRow, WfUpdate};
use crate::schema::{
    finished_list, learned_tables_list, names, Catalog, DefCols, WorkerGroupCol, COMMAND,
    SCHEDULES, TASK, WORKER_GROUP,
};
use crate::{
    worker_group_from_id, BadRow, DbSettings, FollowUpOutcome, FollowUpRequest, Page, Select,
    SqlError, TaskRow, TaskWrite, PAGE,
};
use chrono::{NaiveDate, NaiveDateTime, TimeDelta};
use reaper_core::{Action, Candidate, DsLine, FollowUp, Zone};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgRow, PgValueFormat};
use sqlx::{Connection, Executor, PgPool, Row, ValueRef};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) fn connect_lazy(s: &DbSettings, epoch: Arc<AtomicU64>) -> Result<PgPool, SqlError> {
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
            let epoch = epoch.clone();
            Box::pin(async move {
                epoch.fetch_add(1, Ordering::AcqRel);
                if timeout.is_zero() {
                    return Ok(());
                }
                // statement_timeout already covers lock waits; lock_timeout
                // names the cause (55P03) when a row lock is what blocks.
                let ms = timeout.as_millis().max(1);
                conn.execute(format!("SET statement_timeout = {ms}").as_str())
                    .await?;
                conn.execute(format!("SET lock_timeout = {ms}").as_str())
                    .await?;
                Ok(())
            })
        })
        .connect_lazy_with(opts);
    Ok(pool)
}

pub(crate) async fn ping(c: &mut PgConnection) -> Result<(), SqlError> {
    sqlx::query("SELECT 1").execute(c).await?;
    Ok(())
}

/// The tables, the columns of the tables the adapter uses, and the
/// `t_ds_version` row.
pub(crate) async fn schema_facts(
    c: &mut PgConnection,
) -> Result<(Catalog, Option<String>), SqlError> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT LOWER(table_name)::text FROM information_schema.tables WHERE table_schema = current_schema()",
    )
    .fetch_all(&mut *c)
    .await?;
    let sql = format!(
        "SELECT LOWER(table_name)::text, LOWER(column_name)::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND LOWER(table_name) IN ({})",
        learned_tables_list()
    );
    let cols: Vec<(String, String)> = sqlx::query_as(&sql).fetch_all(&mut *c).await?;
    let tables: BTreeSet<String> = tables.into_iter().collect();
    let version = if tables.contains("t_ds_version") {
        sqlx::query_scalar::<_, Option<String>>("SELECT version::text FROM t_ds_version LIMIT 1")
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

pub(crate) async fn max_id(c: &mut PgConnection) -> Result<Option<i64>, SqlError> {
    let sql = format!("SELECT MAX(id) FROM {TASK}");
    let v = sqlx::query_scalar::<_, Option<i32>>(&sql)
        .fetch_one(c)
        .await?;
    Ok(v.map(i64::from))
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

/// A `timestamp` column, decoded without sqlx's chrono decoder, which panics
/// on `infinity` and on values beyond chrono's range (it adds the raw
/// microseconds unchecked): such a value is a decode error, and the row is
/// skipped like any other undecodable row.
fn timestamp(r: &PgRow, i: usize) -> Result<Option<NaiveDateTime>, sqlx::Error> {
    let bad = |why: String| sqlx::Error::ColumnDecode {
        index: i.to_string(),
        source: why.into(),
    };
    let v = r.try_get_raw(i)?;
    if v.is_null() {
        return Ok(None);
    }
    match v.format() {
        PgValueFormat::Binary => {
            let b = v.as_bytes().map_err(|e| bad(e.to_string()))?;
            let raw: [u8; 8] = b
                .try_into()
                .map_err(|_| bad(format!("a timestamp of {} bytes", b.len())))?;
            let us = i64::from_be_bytes(raw);
            // PostgreSQL counts from 2000-01-01 00:00:00
            let epoch = NaiveDate::from_ymd_opt(2000, 1, 1)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .ok_or_else(|| bad("no epoch".into()))?;
            epoch
                .checked_add_signed(TimeDelta::microseconds(us))
                .map(Some)
                .ok_or_else(|| bad(format!("timestamp out of range ({us} µs from 2000-01-01)")))
        }
        PgValueFormat::Text => {
            let s = v.as_str().map_err(|e| bad(e.to_string()))?;
            NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
                .map(Some)
                .map_err(|e| bad(format!("{s:?}: {e}")))
        }
    }
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
        submit_time: t(timestamp(r, 5)?),
        start_time: t(timestamp(r, 6)?),
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

/// Decodes what it can; a row that fails is reported in `bad`, never dropped
/// silently (the caller logs, counts and keeps tracking it).
fn decode_page(line: DsLine, zone: Zone, rows: &[PgRow]) -> Result<Page, SqlError> {
    let mut page = Page {
        raw: rows.len(),
        ..Page::default()
    };
    for r in rows {
        let id = i64::from(r.try_get::<i32, _>(0)?);
        page.last_id = Some(id);
        match decode(line, zone, r) {
            Ok(t) => page.rows.push(t),
            Err(e) => page.bad.push(BadRow {
                id,
                may_be_live: Page::may_be_live(
                    r.try_get::<Option<i32>, _>(3).ok().flatten().map(i64::from),
                    r.try_get::<Option<i32>, _>(11)
                        .ok()
                        .flatten()
                        .map(i64::from),
                ),
                error: e.to_string(),
            }),
        }
    }
    Ok(page)
}

pub(crate) async fn page(
    c: &mut PgConnection,
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
        "{} WHERE t.id > $1 AND t.flag = 1 AND {filter} ORDER BY t.id LIMIT {PAGE}",
        select_from(line, cat)
    );
    let rows = sqlx::query(&sql).bind(after).fetch_all(c).await?;
    decode_page(line, zone, &rows)
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
    c: &mut PgConnection,
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

/// One `UPDATE … FROM UNNEST(…) RETURNING id` per action: each row's own
/// seen state, host and submit time are in the join, so the check and the
/// update are one statement and the returned ids say which rows were applied.
pub(crate) async fn write_batch(
    c: &mut PgConnection,
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
    let mut tx = c.begin().await?;
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

/// Locks the workflow row and decides on what it holds now (SPEC §4.9):
/// every update is conditional on the state and host read under the lock,
/// and one that matches nothing rolls the whole follow-up back.
pub(crate) async fn follow_up(
    c: &mut PgConnection,
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
    // NULL placeholders are typed so that every column decodes the same way
    // whether the schema has it or not
    let int_or_null = |c: &str| {
        if c == "NULL" {
            "NULL::int4".to_string()
        } else {
            c.to_string()
        }
    };
    let sql = format!(
        "SELECT state, executor_id, {def_sel}, {}, {}, {}, host FROM {wf_t} WHERE id = $1 FOR UPDATE",
        int_or_null(prio),
        int_or_null(tf),
        if cp == "NULL" { "NULL::text" } else { cp },
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
        host: r.try_get(8)?,
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
    // `fail` must not run while a command for the workflow is queued either
    // (SPEC §5): the master that takes the command would run a failed workflow.
    let queued = if let Some(col) = n.cmd_instance_col {
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
        ) if cat.has(SCHEDULES, "process_definition_code") && cat.has(SCHEDULES, "timezone_id") => {
            match wf.def_code {
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
        // the SET list binds first ($1..$k); the guard follows
        let (sets, k, from): (String, usize, i32) = match u {
            WfUpdate::Fail { from } => ("state = 6, end_time = $1".into(), 1, *from),
            WfUpdate::NullHost { from } => ("host = $1".into(), 1, *from),
            WfUpdate::Failover { from } => ("state = 18".into(), 0, *from),
            WfUpdate::Restart { from } => {
                let mut sets = vec!["state = 0".to_string()];
                let mut k = 0;
                if cat.has(wf_t, "run_times") {
                    sets.push("run_times = COALESCE(run_times, 0) + 1".into());
                }
                if cat.has(wf_t, "restart_time") {
                    k += 1;
                    sets.push(format!("restart_time = ${k}"));
                }
                sets.push("end_time = NULL".into());
                (sets.join(", "), k, *from)
            }
        };
        let sql = format!(
            "UPDATE {wf_t} SET {sets} WHERE id = ${} AND state = ${} AND host IS NOT DISTINCT FROM ${}",
            k + 1,
            k + 2,
            k + 3
        );
        let mut q = sqlx::query(&sql);
        match u {
            WfUpdate::Fail { .. } => q = q.bind(now),
            WfUpdate::NullHost { .. } => q = q.bind(n.null_host),
            WfUpdate::Failover { .. } => {}
            WfUpdate::Restart { .. } => {
                if k == 1 {
                    q = q.bind(now);
                }
            }
        }
        let res = q
            .bind(wf_id)
            .bind(from)
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
