//! The workflow reads' statements, written once for both dialects: the two
//! tables' top ids, pages and rows by id of the workflow table, and the task
//! rows a summary needs, grouped so that a workflow's finished tasks come
//! back as one row.

use super::cursor::{LiveTask, SumError, SumItem, SumRow, SumRows};
use crate::dialect::{Conn, Dialect, RowOf};
use crate::read::BadRow;
use crate::schema::{int_list, names, Catalog, TASK};
use crate::sql::Sql;
use crate::{SqlError, PAGE};
use reaper_core::candidate::shared;
use reaper_core::line::{FAILURE, FINISHED_TASK_CODES, KILL};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{DsLine, Zone};

/// The finished task states a task action writes.
pub(crate) const ENDED_BY_ACTION: [i32; 2] = [FAILURE, KILL];

/// One statement's worth of workflow rows.
#[derive(Debug, Default)]
pub(crate) struct WfPage {
    pub rows: Vec<WorkflowCandidate>,
    /// Rows returned, decodable or not: a page is short only by this count.
    pub raw: usize,
    /// Id of the last row returned, decodable or not: where the next page starts.
    pub last_id: Option<i64>,
    pub bad: Vec<BadRow>,
}

/// The task table's and the workflow table's top ids, read in one statement
/// (one snapshot).
pub(crate) async fn tops<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
) -> Result<(Option<i64>, Option<i64>), SqlError> {
    let q = Sql::<D>::new(format!(
        "SELECT (SELECT MAX(id) FROM {TASK}), (SELECT MAX(id) FROM {})",
        line.workflow_table()
    ));
    match q.fetch_optional(c).await? {
        Some(r) => Ok((D::int(&r, 0)?, D::int(&r, 1)?)),
        None => Ok((None, None)),
    }
}

/// The workflow select list: the columns some releases of a line lack are
/// read as NULL (SPEC §4.10).
fn select(line: DsLine, cat: &Catalog) -> String {
    let wf = line.workflow_table();
    let col = |c: &str| {
        if cat.has(wf, c) {
            format!("w.{c}")
        } else {
            "NULL".to_string()
        }
    };
    format!(
        "SELECT w.id, w.name, w.state, w.host, w.start_time, {}, {} FROM {wf} w",
        col("restart_time"),
        col("project_code"),
    )
}

fn decode<D: Dialect>(zone: Zone, r: &RowOf<D>) -> Result<WorkflowCandidate, sqlx::Error> {
    let t = |v: Option<chrono::NaiveDateTime>| v.and_then(|n| zone.to_instant(n));
    let id = id::<D>(r)?;
    let state = D::int(r, 2)?.ok_or_else(|| sqlx::Error::ColumnDecode {
        index: "2".into(),
        source: "state is NULL".into(),
    })?;
    let mut wf = WorkflowCandidate::new(id, state as i32, None);
    wf.name = D::text(r, 1)?.unwrap_or_default();
    wf.host = D::text(r, 3)?;
    wf.start_time = t(D::time(r, 4)?);
    wf.restart_time = t(D::time(r, 5)?);
    wf.project_code = D::int(r, 6)?;
    Ok(wf)
}

fn id<D: Dialect>(r: &RowOf<D>) -> Result<i64, sqlx::Error> {
    D::int(r, 0)?.ok_or_else(|| sqlx::Error::ColumnDecode {
        index: "0".into(),
        source: "id is NULL".into(),
    })
}

/// Decodes what it can; a row that fails is reported in `bad` (possibly
/// live unless its state decodes to one outside `tracked`).
fn decode_page<D: Dialect>(
    zone: Zone,
    tracked: &[i32],
    rows: &[RowOf<D>],
) -> Result<WfPage, SqlError> {
    let mut page = WfPage {
        raw: rows.len(),
        ..WfPage::default()
    };
    for r in rows {
        let id = id::<D>(r)?;
        page.last_id = Some(id);
        match decode::<D>(zone, r) {
            Ok(w) => page.rows.push(w),
            Err(e) => page.bad.push(BadRow {
                id,
                may_be_live: match D::int(r, 2) {
                    Ok(Some(s)) => tracked.contains(&(s as i32)),
                    _ => true,
                },
                error: e.to_string(),
            }),
        }
    }
    Ok(page)
}

/// Up to [`PAGE`] workflow rows in `tracked` states above `after`, by id.
pub(crate) async fn page<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    tracked: &[i32],
    after: i64,
) -> Result<WfPage, SqlError> {
    let rows = page_sql::<D>(line, cat, tracked, after)
        .fetch_all(c)
        .await?;
    decode_page::<D>(zone, tracked, &rows)
}

fn page_sql<D: Dialect>(line: DsLine, cat: &Catalog, tracked: &[i32], after: i64) -> Sql<D> {
    let mut q = Sql::<D>::new(select(line, cat));
    q.push(" WHERE w.id > ")
        .bind(after)
        .push(" AND w.state IN (")
        .push(&int_list(tracked))
        .push(&format!(") ORDER BY w.id LIMIT {PAGE}"));
    q
}

/// Workflow rows by id, in any state.
pub(crate) async fn by_ids<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    tracked: &[i32],
    ids: &[i64],
) -> Result<WfPage, SqlError> {
    if ids.is_empty() {
        return Ok(WfPage::default());
    }
    let mut q = Sql::<D>::new(select(line, cat));
    q.push(" WHERE ");
    D::in_set(&mut q, "w.id", ids);
    q.push(" ORDER BY w.id");
    let rows = q.fetch_all(c).await?;
    decode_page::<D>(zone, tracked, &rows)
}

/// `CASE …`: the task's id when it is a row the summary follows one by one
/// ([`followed`]).
fn live_id() -> String {
    format!(
        "CASE WHEN t.flag = 1 AND t.state NOT IN ({}) THEN t.id END",
        int_list(&unfollowed())
    )
}

/// The finished task states whose `flag = 1` rows a summary does not
/// follow: all but FAILURE and KILL, which a task action writes (SPEC §13:
/// the rows show that a follow-up was left undone).
fn unfollowed() -> Vec<i32> {
    FINISHED_TASK_CODES
        .iter()
        .copied()
        .filter(|s| !ENDED_BY_ACTION.contains(s))
        .collect()
}

/// A `flag = 1` task row a summary follows one by one: live (not finished),
/// or ended in FAILURE or KILL.
pub(crate) fn followed(state: i32) -> bool {
    !DsLine::is_finished_task_state(state) || ENDED_BY_ACTION.contains(&state)
}

/// The task rows of workflows `wfs` (above task id `above`, when given),
/// grouped: each followed row ([`followed`]) on its own (id, state, host),
/// the others as one row per workflow holding their newest `end_time`.
pub(crate) async fn summary_rows<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    wfs: &[i64],
    above: Option<i64>,
) -> Result<SumRows, SqlError> {
    if wfs.is_empty() {
        return Ok(SumRows::default());
    }
    // Decoded as the rows arrive: a full scan groups every live task row on
    // its own, and holding them all as raw rows first was the daemon's
    // largest allocation (heaptrack: ~22 MB of 50 at 100,000 live rows).
    let mut out = SumRows::default();
    summary_sql::<D>(line, wfs, above)
        .fetch_each(c, |r| {
            let Some(wf) = D::int(r, 0)? else {
                return Ok(());
            };
            let task = D::int(r, 1).ok().flatten();
            let item = (|| -> Result<SumItem, sqlx::Error> {
                let live = match D::int(r, 1)? {
                    Some(id) => Some((
                        id,
                        LiveTask {
                            state: D::int(r, 2)?.unwrap_or(-1) as i32,
                            host: D::text(r, 3)?.as_deref().map(shared),
                        },
                    )),
                    None => None,
                };
                Ok(SumItem {
                    live,
                    end: D::time(r, 4)?,
                })
            })();
            out.push(SumRow {
                wf,
                item: item.map_err(|e| SumError {
                    task,
                    error: e.to_string(),
                }),
            });
            Ok(())
        })
        .await?;
    Ok(out)
}

fn summary_sql<D: Dialect>(line: DsLine, wfs: &[i64], above: Option<i64>) -> Sql<D> {
    let fk = names(line).fk;
    let live = live_id();
    let mut q = Sql::<D>::new(format!(
        "SELECT t.{fk}, {live}, MAX(t.state), MAX(t.host), MAX(t.end_time) FROM {TASK} t WHERE "
    ));
    if let Some(a) = above {
        q.push("t.id > ").bind(a).push(" AND ");
    }
    D::in_set(&mut q, &format!("t.{fk}"), wfs);
    q.push(&format!(" GROUP BY t.{fk}, {live}"));
    q
}

/// Which task rows [`task_rows`] reads, one by one.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TaskSel<'a> {
    /// These ids: the live tasks a summary knew, read again.
    Ids(&'a [i64]),
    /// Up to [`PAGE`] rows above this id, by id: what was inserted since the
    /// cursor's task bound.
    Above(i64),
}

/// Task rows read one by one, as summary rows of their workflow.
#[derive(Debug, Default)]
pub(crate) struct TaskRows {
    pub rows: SumRows,
    /// Rows returned, decodable or not: a page is short only by this count.
    pub raw: usize,
    /// Id of the last row returned: where the next page starts.
    pub last_id: Option<i64>,
}

/// Task rows one by one (`sel`), each a summary row of its workflow:
/// followed ([`followed`]) or not, with its `end_time`.
pub(crate) async fn task_rows<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    sel: TaskSel<'_>,
) -> Result<TaskRows, SqlError> {
    let fk = names(line).fk;
    let mut q = Sql::<D>::new(format!(
        "SELECT t.{fk}, t.id, t.state, t.flag, t.host, t.end_time FROM {TASK} t WHERE "
    ));
    match sel {
        TaskSel::Ids([]) => return Ok(TaskRows::default()),
        TaskSel::Ids(ids) => D::in_set(&mut q, "t.id", ids),
        TaskSel::Above(after) => {
            q.push("t.id > ")
                .bind(after)
                .push(&format!(" ORDER BY t.id LIMIT {PAGE}"));
        }
    }
    let mut out = TaskRows::default();
    q.fetch_each(c, |r| {
        out.raw += 1;
        let task = D::int(r, 1)?;
        if task.is_some() {
            out.last_id = task;
        }
        let Some(wf) = D::int(r, 0)? else {
            return Ok(());
        };
        let item = (|| -> Result<SumItem, sqlx::Error> {
            let state = D::int(r, 2)?.unwrap_or(-1) as i32;
            let flag = D::int(r, 3)?;
            let live = match task {
                Some(id) if flag == Some(1) && followed(state) => Some((
                    id,
                    LiveTask {
                        state,
                        host: D::text(r, 4)?.as_deref().map(shared),
                    },
                )),
                _ => None,
            };
            Ok(SumItem {
                live,
                end: D::time(r, 5)?,
            })
        })();
        out.rows.push(SumRow {
            wf,
            item: item.map_err(|e| SumError {
                task,
                error: e.to_string(),
            }),
        });
        Ok(())
    })
    .await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{MySql, Postgres};

    fn cat(cols: &[&str]) -> Catalog {
        Catalog::new(
            ["t_ds_workflow_instance".to_string()].into(),
            cols.iter()
                .map(|c| ("t_ds_workflow_instance".to_string(), c.to_string()))
                .collect(),
        )
    }

    #[test]
    fn the_page_reads_the_columns_the_release_has() {
        let select = "SELECT w.id, w.name, w.state, w.host, w.start_time, w.restart_time, \
            w.project_code FROM t_ds_workflow_instance w";
        let tail = "AND w.state IN (0,1,2,4,14,17,18) ORDER BY w.id LIMIT 5000";
        let c = cat(&["restart_time", "project_code"]);
        let tracked = [0, 1, 2, 4, 14, 17, 18];
        assert_eq!(
            page_sql::<MySql>(DsLine::V3_3, &c, &tracked, 7).text(),
            format!("{select} WHERE w.id > ? {tail}")
        );
        assert_eq!(
            page_sql::<Postgres>(DsLine::V3_3, &c, &tracked, 7).text(),
            format!("{select} WHERE w.id > $1 {tail}")
        );
        // 1.3.9 has neither restart_time nor project_code
        assert!(page_sql::<MySql>(DsLine::V3_3, &cat(&[]), &tracked, 7)
            .text()
            .starts_with("SELECT w.id, w.name, w.state, w.host, w.start_time, NULL, NULL FROM"));
    }

    #[test]
    fn the_summary_is_one_grouped_statement() {
        let live = "CASE WHEN t.flag = 1 AND t.state NOT IN (3,5,7,13) THEN t.id END";
        let head = format!(
            "SELECT t.process_instance_id, {live}, MAX(t.state), MAX(t.host), MAX(t.end_time) \
             FROM t_ds_task_instance t WHERE "
        );
        let group = format!(" GROUP BY t.process_instance_id, {live}");
        assert_eq!(
            summary_sql::<MySql>(DsLine::V3_2, &[4, 5], Some(100)).text(),
            format!("{head}t.id > ? AND t.process_instance_id IN (4,5){group}")
        );
        assert_eq!(
            summary_sql::<Postgres>(DsLine::V3_2, &[4, 5], None).text(),
            format!("{head}t.process_instance_id = ANY($1::int4[]){group}")
        );
    }
}
