//! The rows of the tasks that agents list (SPEC §15), read by id in any state
//! for ghost detection: the candidate select of the line (same columns, same
//! decoding), each row's `end_time` and task identity, and for `flag = 0`
//! rows the `flag = 1` attempt of the same task in the same workflow
//! instance. Three statements per chunk of ids at most, never one per task; the
//! chunks are read concurrently, within the pool.

use crate::dialect::{Conn, Dialect};
use crate::schema::{names, Catalog, TASK};
use crate::sql::{Arg, Sql};
use crate::{Db, SqlError, ID_BATCH};
use reaper_core::ghost::{GhostRead, GhostRow, NewerAttempt};
use reaper_core::{DsLine, Instant, Zone};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Which task of a workflow instance a row is an attempt of: `task_code`
/// (2.0+), else the task's `name` (1.x, whose failover finds the attempt by
/// name within the instance).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum TaskKey {
    Code(i64),
    Name(String),
}

impl TaskKey {
    fn arg(&self) -> Arg {
        match self {
            TaskKey::Code(c) => Arg::I64(*c),
            TaskKey::Name(n) => Arg::Text(Some(n.clone())),
        }
    }
}

/// The identity column of a task on the connected schema.
fn key_column(cat: &Catalog) -> &'static str {
    if cat.has(TASK, "task_code") {
        "task_code"
    } else {
        "name"
    }
}

fn read_key<D: Dialect>(
    r: &crate::dialect::RowOf<D>,
    i: usize,
    col: &str,
) -> Result<Option<TaskKey>, sqlx::Error> {
    Ok(if col == "task_code" {
        D::int(r, i)?.map(TaskKey::Code)
    } else {
        D::text(r, i)?.map(TaskKey::Name)
    })
}

/// `end_time` and task identity of `ids`, by id.
async fn ends<D: Dialect>(
    c: &mut Conn<D>,
    cat: &Catalog,
    zone: Zone,
    ids: &[i64],
) -> Result<HashMap<i64, (Option<Instant>, Option<TaskKey>)>, SqlError> {
    let key = key_column(cat);
    let mut q = Sql::<D>::new(format!(
        "SELECT t.id, t.end_time, t.{key} FROM {TASK} t WHERE "
    ));
    D::in_set(&mut q, "t.id", ids);
    let mut out = HashMap::new();
    for r in q.fetch_all(c).await? {
        // what cannot be read here only loses evidence, never the row
        let Ok(Some(id)) = D::int(&r, 0) else {
            continue;
        };
        let end = D::time(&r, 1)
            .ok()
            .flatten()
            .and_then(|n| zone.to_instant(n));
        let k = read_key::<D>(&r, 2, key).ok().flatten();
        out.insert(id, (end, k));
    }
    Ok(out)
}

/// The newest `flag = 1` row of each (workflow instance, task) of `wanted`.
async fn newer<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    zone: Zone,
    wanted: &[(i64, TaskKey)],
) -> Result<HashMap<(i64, TaskKey), NewerAttempt>, SqlError> {
    let key = key_column(cat);
    let fk = names(line).fk;
    let wfs: Vec<i64> = wanted
        .iter()
        .map(|(w, _)| *w)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let keys: BTreeSet<&TaskKey> = wanted.iter().map(|(_, k)| k).collect();
    let mut q = Sql::<D>::new(format!(
        "SELECT t.id, t.host, t.submit_time, t.{fk}, t.{key} FROM {TASK} t WHERE t.flag = 1 AND "
    ));
    D::in_set(&mut q, &format!("t.{fk}"), &wfs);
    q.push(&format!(" AND t.{key} IN ("))
        .bind_list(keys.iter().map(|k| k.arg()))
        .push(") ORDER BY t.id")
        .one_off();
    let wanted: BTreeSet<&(i64, TaskKey)> = wanted.iter().collect();
    let mut out = HashMap::new();
    for r in q.fetch_all(c).await? {
        let (Ok(Some(id)), Ok(Some(wf)), Ok(Some(k))) =
            (D::int(&r, 0), D::int(&r, 3), read_key::<D>(&r, 4, key))
        else {
            continue;
        };
        let pair = (wf, k);
        if !wanted.contains(&pair) {
            continue;
        }
        // ordered by id: the newest attempt wins
        out.insert(
            pair,
            NewerAttempt {
                id,
                host: D::text(&r, 1).ok().flatten(),
                submit_time: D::time(&r, 2)
                    .ok()
                    .flatten()
                    .and_then(|n| zone.to_instant(n)),
            },
        );
    }
    Ok(out)
}

impl Db {
    /// The rows of `ids` in any state, for ghost detection (SPEC §15).
    pub async fn ghost_rows(&self, line: DsLine, ids: &[i64]) -> Result<GhostRead, SqlError> {
        let mut out = GhostRead::default();
        if ids.is_empty() {
            return Ok(out);
        }
        let cat = self.catalog().await?;
        cat.require_reads(line)?;
        cat.require(TASK, &["end_time"])?;
        let zone = self.zone();
        let mut superseded: Vec<(usize, (i64, TaskKey))> = Vec::new();
        // The chunks are read at once, each as two statements side by side:
        // the pool bounds how many run, and 2,000 listed rows that are over
        // (a worker restart's worth) cost one round trip, not one per chunk.
        let chunks = futures::future::try_join_all(ids.chunks(ID_BATCH).map(|chunk| async {
            tokio::try_join!(self.reread_tasks(line, &cat, chunk), async {
                with_conn!(self, "reading end times of listed tasks", |c: D| ends::<D>(
                    c, &cat, zone, chunk
                ))
            })
        }))
        .await?;
        for (page, extra) in chunks {
            out.undecodable.extend(page.bad.iter().map(|b| b.id));
            for t in page.rows {
                let (end_time, key) = extra.get(&t.task.id).cloned().unwrap_or((None, None));
                if t.flag == 0 {
                    if let (Some(wf), Some(k)) = (t.task.workflow_instance_id, key) {
                        superseded.push((out.rows.len(), (wf, k)));
                    }
                }
                out.rows.push(GhostRow {
                    task: t.task,
                    flag: t.flag,
                    end_time,
                    newer_attempt: None,
                });
            }
        }
        let mut found = HashMap::new();
        for chunk in superseded.chunks(ID_BATCH) {
            let wanted: Vec<(i64, TaskKey)> = chunk.iter().map(|(_, p)| p.clone()).collect();
            found.extend(with_conn!(
                self,
                "reading the newer attempts of superseded tasks",
                |c: D| newer::<D>(c, line, &cat, zone, &wanted)
            )?);
        }
        let by_pos: BTreeMap<usize, &(i64, TaskKey)> =
            superseded.iter().map(|(i, p)| (*i, p)).collect();
        for (i, pair) in by_pos {
            let own = out.rows[i].task.id;
            if let Some(n) = found.get(pair).filter(|n| n.id != own) {
                out.rows[i].newer_attempt = Some(n.clone());
            }
        }
        Ok(out)
    }
}
