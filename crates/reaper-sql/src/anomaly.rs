//! The reads of SPEC §16 (stuck under a live owner) beyond the candidate
//! read: 3.4's serial queue. The task rows behind `dispatch_stalled` and
//! `duplicate_attempt` cost no statement of their own: the candidate read
//! already returns every `flag = 1` non-finished row (to track those that
//! may turn live), so its incremental/full shape is theirs, and the grouping
//! by worker group and task code is done on them in the core — a `GROUP BY`
//! on `state` would scan the whole task table every sweep, which has no
//! index on it.

use crate::dialect::{Conn, Dialect};
use crate::schema::{names, DefCols, SERIAL_COMMAND};
use crate::sql::Sql;
use crate::{Db, SqlError, ID_BATCH};
use reaper_core::anomaly::{SerialWait, SERIAL_WAIT};
use reaper_core::{DsLine, Zone};
use std::collections::HashMap;

const SERIAL_COLS: &[&str] = &["id", "workflow_instance_id", "state", "create_time"];

impl Db {
    /// SERIAL_WAIT workflows with a waiting `t_ds_serial_command` row, each
    /// with the count of other non-terminal instances of its definition (one
    /// grouped statement per [`ID_BATCH`] definitions, never one per
    /// workflow). `None` where the schema has no serial command table
    /// (before 3.4) or its workflow table has no definition code.
    pub async fn serial_waits(&self, line: DsLine) -> Result<Option<Vec<SerialWait>>, SqlError> {
        let cat = self.catalog().await?;
        let DefCols::Code { code, .. } = names(line).def else {
            return Ok(None);
        };
        if !cat.tables.contains(SERIAL_COMMAND)
            || cat.require(SERIAL_COMMAND, SERIAL_COLS).is_err()
            || !cat.has(line.workflow_table(), code)
        {
            return Ok(None);
        }
        let zone = self.zone;
        let mut waits = with_conn!(self, "reading waiting serial commands", |c: D| {
            waiting::<D>(c, line, zone)
        })?;
        if waits.is_empty() {
            return Ok(Some(waits));
        }
        let mut codes: Vec<i64> = waits.iter().map(|w| w.definition_code).collect();
        codes.sort_unstable();
        codes.dedup();
        let mut running = HashMap::new();
        for chunk in codes.chunks(ID_BATCH) {
            running.extend(with_conn!(
                self,
                "counting running instances of serial definitions",
                |c: D| running_by_definition::<D>(c, line, code, chunk)
            )?);
        }
        for w in &mut waits {
            w.running = running.get(&w.definition_code).copied().unwrap_or(0);
        }
        Ok(Some(waits))
    }
}

/// The waiting serial commands of SERIAL_WAIT workflows, with the workflow's
/// definition code, host and start: the waiting rows of the (small) serial
/// table first, then their workflows by primary key — a join could make the
/// planner scan the workflow table for its state, which has no index. A row
/// that cannot be decoded is left out (it names no workflow we could report).
async fn waiting<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    zone: Zone,
) -> Result<Vec<SerialWait>, SqlError> {
    let DefCols::Code { code, .. } = names(line).def else {
        return Ok(Vec::new());
    };
    let q = Sql::<D>::new(format!(
        "SELECT s.id, s.workflow_instance_id, {created} FROM {SERIAL_COMMAND} s \
         WHERE s.state = 0 ORDER BY s.id",
        // a MySQL `timestamp`, which sqlx will not read as a naive datetime
        created = D::as_text("s.create_time"),
    ));
    let mut queued: Vec<(i64, i64, Option<chrono::NaiveDateTime>)> = Vec::new();
    for r in q.fetch_all(&mut *c).await? {
        match (D::int(&r, 0), D::int(&r, 1), D::text(&r, 2)) {
            (Ok(Some(id)), Ok(Some(wf)), Ok(created)) => {
                queued.push((id, wf, created.as_deref().and_then(parse_time)))
            }
            _ => tracing::warn!("a serial command row could not be decoded"),
        }
    }
    let t = |v: Option<chrono::NaiveDateTime>| v.and_then(|n| zone.to_instant(n));
    let mut out = Vec::new();
    for chunk in queued.chunks(ID_BATCH) {
        let mut q = Sql::<D>::new(format!(
            "SELECT w.id, w.{code}, w.host, w.start_time FROM {wf} w WHERE w.id IN (",
            wf = line.workflow_table()
        ));
        q.bind_list(chunk.iter().map(|(_, wf, _)| *wf))
            .push(&format!(") AND w.state = {SERIAL_WAIT}"));
        let mut waiting = HashMap::new();
        for r in q.fetch_all(&mut *c).await? {
            let decoded = (|| {
                Ok::<_, sqlx::Error>((
                    D::int(&r, 0)?,
                    D::int(&r, 1)?,
                    D::text(&r, 2)?,
                    t(D::time(&r, 3)?),
                ))
            })();
            match decoded {
                Ok((Some(id), Some(def), host, start)) => {
                    waiting.insert(id, (def, host, start));
                }
                Ok(_) => tracing::debug!("a SERIAL_WAIT workflow without id or definition"),
                Err(e) => tracing::warn!(error = %e, "a SERIAL_WAIT workflow could not be decoded"),
            }
        }
        for (id, wf, created) in chunk {
            if let Some((def, host, start)) = waiting.get(wf) {
                out.push(SerialWait {
                    workflow_instance_id: *wf,
                    serial_command_id: *id,
                    definition_code: *def,
                    workflow_host: host.clone(),
                    waiting_since: t(*created).or(*start),
                    running: 0,
                });
            }
        }
    }
    Ok(out)
}

/// A datetime as both servers print it (`2025-03-04 04:00:00[.ffffff]`).
fn parse_time(s: &str) -> Option<chrono::NaiveDateTime> {
    chrono::NaiveDateTime::parse_from_str(s.trim(), "%Y-%m-%d %H:%M:%S%.f").ok()
}

/// Non-terminal instances other than SERIAL_WAIT of each definition.
async fn running_by_definition<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    code: &str,
    codes: &[i64],
) -> Result<HashMap<i64, i64>, SqlError> {
    let states: Vec<i32> = line
        .workflow_non_terminal_states()
        .iter()
        .copied()
        .filter(|s| *s != SERIAL_WAIT)
        .collect();
    let mut q = Sql::<D>::new(format!(
        "SELECT w.{code}, COUNT(*) FROM {wf} w WHERE w.{code} IN (",
        wf = line.workflow_table()
    ));
    q.bind_list(codes.iter().copied()).push(&format!(
        ") AND w.state IN ({}) GROUP BY w.{code}",
        crate::schema::int_list(&states)
    ));
    let mut out = HashMap::new();
    for r in q.fetch_all(c).await? {
        if let (Some(def), Some(n)) = (D::int(&r, 0)?, D::int(&r, 1)?) {
            out.insert(def, n);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_servers_datetimes_parse() {
        for s in ["2025-03-04 04:00:00", "2025-03-04 04:00:00.123456"] {
            assert!(super::parse_time(s).is_some(), "{s}");
        }
        assert_eq!(super::parse_time("0000-00-00 00:00:00"), None);
    }
}
