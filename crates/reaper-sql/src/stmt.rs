//! The read statements, written once for both dialects: the catalog, the top
//! id, pages of candidates and rows by id, and how a task row is decoded from
//! the dialect's column accessors.

use crate::dialect::{Conn, Dialect, RowOf};
use crate::read::{BadRow, Page, Select};
use crate::schema::{
    finished_list, learned_tables_list, names, relation, worker_group_from_id, Catalog,
    WorkerGroupCol, TASK, WORKER_GROUP,
};
use crate::sql::Sql;
use crate::{SqlError, TaskRow, PAGE};
use reaper_core::candidate::shared;
use reaper_core::{Candidate, DsLine, Zone};
use std::collections::{BTreeSet, HashMap};

pub(crate) async fn ping<D: Dialect>(c: &mut Conn<D>) -> Result<(), SqlError> {
    Sql::<D>::new("SELECT 1").execute(c).await?;
    Ok(())
}

/// The tables, the columns of the tables the adapter uses, and the
/// `t_ds_version` row.
pub(crate) async fn schema_facts<D: Dialect>(
    c: &mut Conn<D>,
) -> Result<(Catalog, Option<String>), SqlError> {
    let q = Sql::<D>::new(format!(
        "SELECT {} FROM information_schema.tables WHERE table_schema = {}",
        D::as_text("LOWER(table_name)"),
        D::CURRENT_SCHEMA
    ));
    let mut tables = BTreeSet::new();
    for r in q.fetch_all(c).await? {
        tables.insert(D::text(&r, 0)?.unwrap_or_default());
    }
    let q = Sql::<D>::new(format!(
        "SELECT {}, {} FROM information_schema.columns \
         WHERE table_schema = {} AND LOWER(table_name) IN ({})",
        D::as_text("LOWER(table_name)"),
        D::as_text("LOWER(column_name)"),
        D::CURRENT_SCHEMA,
        learned_tables_list()
    ));
    let mut cols = Vec::new();
    for r in q.fetch_all(c).await? {
        cols.push((
            D::text(&r, 0)?.unwrap_or_default(),
            D::text(&r, 1)?.unwrap_or_default(),
        ));
    }
    // logged, never trusted: a row that cannot be read is no row
    let version = if tables.contains("t_ds_version") {
        let q = Sql::<D>::new(format!(
            "SELECT {} FROM t_ds_version LIMIT 1",
            D::as_text("version")
        ));
        match q.fetch_optional(c).await {
            Ok(Some(r)) => D::text(&r, 0).ok().flatten(),
            _ => None,
        }
    } else {
        None
    };
    Ok((Catalog::new(tables, cols), version))
}

pub(crate) async fn max_id<D: Dialect>(c: &mut Conn<D>) -> Result<Option<i64>, SqlError> {
    let q = Sql::<D>::new(format!("SELECT MAX(id) FROM {TASK}"));
    match q.fetch_optional(c).await? {
        Some(r) => Ok(D::int(&r, 0)?),
        None => Ok(None),
    }
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
    let ep = if cat.has(TASK, "execute_path") {
        "t.execute_path"
    } else {
        "NULL"
    };
    // 2.0+: the definition's task, for duplicate attempts (SPEC §16)
    let tc = if cat.has(TASK, "task_code") {
        "t.task_code"
    } else {
        "NULL"
    };
    format!(
        "SELECT t.id, t.name, t.task_type, t.state, t.host, t.submit_time, t.start_time, \
         {wg}, {wg_name}, {pc}, t.{fk}, t.flag, w.host, w.state, {ep}, {tc} \
         FROM {TASK} t LEFT JOIN {wf} w ON w.id = t.{fk}{wg_join}",
        fk = n.fk,
        wf = n.wf_table
    )
}

fn decode<D: Dialect>(line: DsLine, zone: Zone, r: &RowOf<D>) -> Result<TaskRow, sqlx::Error> {
    let t = |v: Option<chrono::NaiveDateTime>| v.and_then(|n| zone.to_instant(n));
    let worker_group = match names(line).wg {
        WorkerGroupCol::Id => worker_group_from_id(D::int(r, 7)?, D::text(r, 8)?),
        WorkerGroupCol::Name => D::text(r, 7)?,
    };
    let row = Candidate {
        id: id::<D>(r)?,
        name: D::text(r, 1)?.unwrap_or_default().into_boxed_str(),
        task_type: shared(D::text(r, 2)?.as_deref().unwrap_or_default()),
        state: D::int(r, 3)?.unwrap_or(-1) as i32,
        host: D::text(r, 4)?.as_deref().map(shared),
        submit_time: t(D::time(r, 5)?),
        start_time: t(D::time(r, 6)?),
        worker_group: worker_group.as_deref().map(shared),
        project_code: D::int(r, 9)?,
        workflow_instance_id: D::int(r, 10)?,
        workflow_host: D::text(r, 12)?.as_deref().map(shared),
        workflow_state: D::int(r, 13)?.map(|s| s as i32),
        execute_path: D::text(r, 14)?.map(String::into_boxed_str),
        // filled by a second read, for SUB_PROCESS rows only (child_states)
        child_workflow_state: None,
        task_code: D::int(r, 15)?,
    };
    let flag = D::int(r, 11)?;
    Ok(TaskRow {
        task: row,
        flag: flag.unwrap_or(0) as i32,
    })
}

/// The primary key in column 0.
fn id<D: Dialect>(r: &RowOf<D>) -> Result<i64, sqlx::Error> {
    D::int(r, 0)?.ok_or_else(|| sqlx::Error::ColumnDecode {
        index: "0".into(),
        source: "id is NULL".into(),
    })
}

/// Runs a read of task rows and decodes what it can as the rows arrive; a row
/// that fails is reported in `bad`, never dropped silently (the caller logs,
/// counts and keeps tracking it).
async fn read_page<D: Dialect>(
    c: &mut Conn<D>,
    q: Sql<D>,
    line: DsLine,
    zone: Zone,
    expected: usize,
) -> Result<Page, SqlError> {
    // Sized up front when the caller knows the count: a vector that doubles
    // copies itself and keeps unused room, at the sweep's peak.
    let mut page = Page {
        rows: Vec::with_capacity(expected),
        ..Page::default()
    };
    q.fetch_each(c, |r| {
        page.raw += 1;
        let id = id::<D>(r)?;
        page.last_id = Some(id);
        match decode::<D>(line, zone, r) {
            Ok(t) => page.rows.push(t),
            Err(e) => page.bad.push(BadRow {
                id,
                may_be_live: Page::may_be_live(
                    D::int(r, 3).ok().flatten(),
                    D::int(r, 11).ok().flatten(),
                ),
                error: e.to_string(),
            }),
        }
        Ok(())
    })
    .await?;
    Ok(page)
}

/// Up to [`PAGE`] rows above `after`, by id.
pub(crate) async fn page<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    sel: Select,
    after: i64,
) -> Result<Page, SqlError> {
    // a page's size is unknown (the incremental range is mostly a few rows)
    read_page::<D>(c, page_sql::<D>(line, cat, sel, after), line, zone, 0).await
}

fn page_sql<D: Dialect>(line: DsLine, cat: &Catalog, sel: Select, after: i64) -> Sql<D> {
    let mut q = Sql::<D>::new(select_from(line, cat));
    q.push(" WHERE t.id > ").bind(after);
    match sel {
        Select::Unfinished => {
            q.push(" AND t.flag = 1 AND t.state NOT IN (")
                .push(&finished_list())
                .push(")");
        }
    }
    q.push(&format!(" ORDER BY t.id LIMIT {PAGE}"));
    q
}

pub(crate) async fn by_ids<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    ids: &[i64],
) -> Result<Page, SqlError> {
    if ids.is_empty() {
        return Ok(Page::default());
    }
    let mut q = Sql::<D>::new(select_from(line, cat));
    q.push(" WHERE t.id IN (")
        .bind_list(ids.iter())
        .push(") ORDER BY t.id");
    // the tracked rows are mostly still there
    read_page::<D>(c, q, line, zone, ids.len()).await
}

/// The state of the child workflow instance of each SUB_PROCESS task of
/// `tasks` (task id, its workflow instance id), by task id, from the line's
/// relation table: one statement for the whole set, never one per task.
/// A task with several relation rows (DS inserts one per run of the parent
/// task) gets a non-terminal child's state if any child is non-terminal,
/// else the newest child's. Empty when the schema has no relation table.
pub(crate) async fn child_states<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    tasks: &[(i64, Option<i64>)],
) -> Result<HashMap<i64, i32>, SqlError> {
    let rel = relation(line);
    let mut out = HashMap::new();
    if tasks.is_empty()
        || cat
            .require(rel.table, &[rel.parent_task, rel.child])
            .is_err()
    {
        return Ok(out);
    }
    let wf = names(line).wf_table;
    let mut q = Sql::<D>::new(format!(
        "SELECT r.{pt}, c.state FROM {rt} r JOIN {wf} c ON c.id = r.{ch} WHERE ",
        pt = rel.parent_task,
        rt = rel.table,
        ch = rel.child
    ));
    // the parent workflow leads the (parent workflow, parent task) index of
    // 3.1+: filtering on it too lets the read use that index
    let wfs: Option<BTreeSet<i64>> = tasks.iter().map(|(_, w)| *w).collect();
    if let Some(wfs) = wfs.filter(|_| cat.has(rel.table, rel.parent_wf)) {
        let wfs: Vec<i64> = wfs.into_iter().collect();
        D::in_set(&mut q, &format!("r.{}", rel.parent_wf), &wfs);
        q.push(" AND ");
    }
    let ids: Vec<i64> = tasks.iter().map(|(t, _)| *t).collect();
    D::in_set(&mut q, &format!("r.{}", rel.parent_task), &ids);
    q.push(" ORDER BY r.id");
    for r in q.fetch_all(c).await? {
        // a relation row that cannot be read says nothing of its task
        let (Ok(Some(task)), Ok(Some(state))) = (D::int(&r, 0), D::int(&r, 1)) else {
            continue;
        };
        let state = state as i32;
        out.entry(task)
            .and_modify(|s: &mut i32| {
                if line.is_workflow_terminal(*s) {
                    *s = state;
                }
            })
            .or_insert(state);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{MySql, Postgres};

    #[test]
    fn one_page_statement_for_both_dialects() {
        let cat = Catalog::new(
            [TASK.to_string()].into(),
            vec![(TASK.into(), "project_code".into())],
        );
        let select = "SELECT t.id, t.name, t.task_type, t.state, t.host, t.submit_time, \
            t.start_time, t.worker_group, NULL, t.project_code, t.process_instance_id, t.flag, \
            w.host, w.state, NULL, NULL FROM t_ds_task_instance t \
            LEFT JOIN t_ds_process_instance w ON w.id = t.process_instance_id";
        let tail = "AND t.flag = 1 AND t.state NOT IN (3,5,6,7,9,13) ORDER BY t.id LIMIT 5000";
        assert_eq!(
            page_sql::<MySql>(DsLine::V3_2, &cat, Select::Unfinished, 7).text(),
            format!("{select} WHERE t.id > ? {tail}")
        );
        assert_eq!(
            page_sql::<Postgres>(DsLine::V3_2, &cat, Select::Unfinished, 7).text(),
            format!("{select} WHERE t.id > $1 {tail}")
        );
    }
}
