//! The database side of ds-reaper: line detection from the schema, candidate
//! reads (a cheap incremental sweep and a keyset-paged full scan), conditional
//! task writes and the workflow follow-ups of SPEC §5, for MySQL/MariaDB and
//! PostgreSQL.
//!
//! Two typed sqlx pools are used rather than `sqlx::Any`, which neither
//! translates placeholders nor decodes DS's column types. All SQL text lives in
//! `mysql.rs` and `postgres.rs`; table and column identifiers come from
//! `schema`, chosen by line, never from input.

mod follow;
mod mysql;
mod postgres;
mod schema;

use reaper_core::{Action, Candidate, DsLine, FollowUp, Instant, Zone};
use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

pub use follow::{CommandRow, Val};

/// Rows per page of a keyset-paged read.
pub(crate) const PAGE: i64 = 5000;
/// Ids per `id IN (...)` statement.
pub(crate) const ID_BATCH: usize = 1000;
/// Ids per statement of a conditional write: larger than [`ID_BATCH`] because a
/// mass write is latency-bound by round trips (MySQL allows 65,535 placeholders).
pub(crate) const WRITE_BATCH: usize = 5000;

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("bad database URL: {0}")]
    BadUrl(String),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("the schema matches no DolphinScheduler line: {0}")]
    UnknownSchema(String),
    #[error("invalid request: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    MySql,
    Postgres,
}

#[derive(Clone)]
pub struct DbSettings {
    /// `mysql://…`, `postgres://…` or `postgresql://…`.
    pub url: String,
    /// Overrides the URL's password (`password_file`).
    pub password: Option<String>,
    pub max_connections: u32,
    pub statement_timeout: Duration,
    pub zone: Zone,
}

impl fmt::Debug for DbSettings {
    // the password must never reach a log line
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbSettings")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("max_connections", &self.max_connections)
            .field("statement_timeout", &self.statement_timeout)
            .field("zone", &self.zone)
            .finish()
    }
}

/// The URL with any password replaced by `***`, for logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((cred, host)) => {
            let user = cred.split(':').next().unwrap_or("");
            if cred.contains(':') {
                format!("{scheme}://{user}:***@{host}{tail}")
            } else {
                format!("{scheme}://{user}@{host}{tail}")
            }
        }
        None => url.to_string(),
    }
}

/// Lines consistent with the schema, plus the `t_ds_version` row (logged, never trusted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaInfo {
    pub lines: Vec<DsLine>,
    pub version_row: Option<String>,
}

/// One task row in any state, with its flag (for `reap`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    pub row: Candidate,
    pub flag: i32,
}

#[derive(Debug, Clone)]
pub struct TaskWrite {
    pub seen: Candidate,
    pub action: Action,
    pub now: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Applied,
    LostRace,
}

#[derive(Debug, Clone)]
pub struct FollowUpRequest {
    /// The task as seen before its write.
    pub task: Candidate,
    pub action: Action,
    pub follow_up: FollowUp,
    pub now: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowUpOutcome {
    Done {
        /// The workflow state written, if the state changed.
        workflow_state: Option<i32>,
        command_type: Option<i32>,
        command_id: Option<i64>,
    },
    Skipped(String),
}

/// What the incremental sweep remembers between passes.
///
/// `mark` lags one sweep behind the table's top id, so a row whose id was
/// allocated before a sweep but committed after it is still read by the next
/// one. Rows at or below the mark are re-read by id only while tracked:
/// `known` (live states) and `pending` (other non-finished states, which may
/// turn live later).
#[derive(Debug, Clone, Default)]
pub struct SweepCursor {
    mark: Option<i64>,
    top: Option<i64>,
    known: BTreeSet<i64>,
    pending: BTreeSet<i64>,
}

impl SweepCursor {
    pub fn new() -> Self {
        Self::default()
    }
    /// A cursor whose incremental sweeps start above `mark` (a restart, a benchmark).
    pub fn with_mark(mark: i64) -> Self {
        SweepCursor {
            mark: Some(mark),
            top: Some(mark),
            ..Self::default()
        }
    }
    /// Moves the low-water mark, keeping what the cursor tracks (a restart
    /// from a persisted mark, a benchmark of a given range).
    pub fn set_low_water(&mut self, mark: i64) {
        self.mark = Some(mark);
        self.top = Some(mark);
    }
    /// Ids at or below this are only re-read when tracked.
    pub fn low_water(&self) -> Option<i64> {
        self.mark
    }
    /// Live rows known to the cursor.
    pub fn tracked(&self) -> usize {
        self.known.len()
    }
    /// Non-finished, not (yet) live rows tracked by id.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn advance(&mut self, top_now: Option<i64>) {
        let prev = self.top.or(top_now);
        self.mark = match (self.mark, prev) {
            (Some(m), Some(p)) => Some(m.max(p)),
            (m, p) => m.or(p).or(Some(0)),
        };
        if top_now.is_some() {
            self.top = top_now;
        }
    }

    fn old_tracked(&self) -> Vec<i64> {
        let mark = self.mark.unwrap_or(0);
        self.known
            .iter()
            .chain(self.pending.iter())
            .copied()
            .filter(|&id| id <= mark)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

/// Sorts read rows into candidates, pending ids, or nothing (finished / flag 0).
fn classify(
    rows: Vec<TaskRow>,
    states: &[i32],
    out: &mut Vec<Candidate>,
    known: &mut BTreeSet<i64>,
    pending: &mut BTreeSet<i64>,
) {
    for r in rows {
        if r.flag != 1 || DsLine::is_finished_task_state(r.row.state) {
            continue;
        }
        if states.contains(&r.row.state) {
            known.insert(r.row.id);
            out.push(r.row);
        } else {
            pending.insert(r.row.id);
        }
    }
}

#[derive(Clone)]
enum Pool {
    My(sqlx::MySqlPool),
    Pg(sqlx::PgPool),
}

#[derive(Clone)]
pub struct Db {
    pool: Pool,
    zone: Zone,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db").field("kind", &self.kind()).finish()
    }
}

impl Db {
    /// Builds a lazy pool: a bad URL is an error, an unreachable server is not
    /// (it shows on use).
    pub fn connect_lazy(s: &DbSettings) -> Result<Db, SqlError> {
        let lower = s.url.trim().to_ascii_lowercase();
        let pool = if lower.starts_with("mysql://") || lower.starts_with("mariadb://") {
            Pool::My(mysql::connect_lazy(s)?)
        } else if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Pool::Pg(postgres::connect_lazy(s)?)
        } else {
            return Err(SqlError::BadUrl(format!(
                "{} (expected mysql://, postgres:// or postgresql://)",
                redact_url(&s.url)
            )));
        };
        Ok(Db { pool, zone: s.zone })
    }

    pub fn kind(&self) -> DbKind {
        match self.pool {
            Pool::My(_) => DbKind::MySql,
            Pool::Pg(_) => DbKind::Postgres,
        }
    }

    pub fn zone(&self) -> Zone {
        self.zone
    }

    pub async fn ping(&self) -> Result<(), SqlError> {
        match &self.pool {
            Pool::My(p) => mysql::ping(p).await,
            Pool::Pg(p) => postgres::ping(p).await,
        }
    }

    /// Line detection from the schema's structure; see [`detect_lines`].
    pub async fn detect(&self) -> Result<SchemaInfo, SqlError> {
        let (tables, task_cols, version_row) = match &self.pool {
            Pool::My(p) => mysql::schema_facts(p).await?,
            Pool::Pg(p) => postgres::schema_facts(p).await?,
        };
        let lines = detect_lines(&tables, &task_cols)?;
        Ok(SchemaInfo { lines, version_row })
    }

    async fn max_id(&self) -> Result<Option<i64>, SqlError> {
        match &self.pool {
            Pool::My(p) => mysql::max_id(p).await,
            Pool::Pg(p) => postgres::max_id(p).await,
        }
    }

    async fn page(&self, line: DsLine, sel: Select, after: i64) -> Result<Vec<TaskRow>, SqlError> {
        match &self.pool {
            Pool::My(p) => mysql::page(p, line, self.zone, sel, after).await,
            Pool::Pg(p) => postgres::page(p, line, self.zone, sel, after).await,
        }
    }

    async fn by_ids(&self, line: DsLine, ids: &[i64]) -> Result<Vec<TaskRow>, SqlError> {
        match &self.pool {
            Pool::My(p) => mysql::by_ids(p, line, self.zone, ids).await,
            Pool::Pg(p) => postgres::by_ids(p, line, self.zone, ids).await,
        }
    }

    /// Full scan, keyset-paged on id, of `flag = 1` rows in non-finished states
    /// joined with the owning workflow instance; those in `states` are the
    /// candidates. Resets the cursor's knowledge.
    pub async fn full_scan(
        &self,
        line: DsLine,
        states: &[i32],
        cursor: &mut SweepCursor,
    ) -> Result<Vec<Candidate>, SqlError> {
        if states.is_empty() {
            return Err(SqlError::Invalid("no states to scan".into()));
        }
        let top_now = self.max_id().await?;
        let mut out = Vec::new();
        let mut known = BTreeSet::new();
        let mut pending = BTreeSet::new();
        let mut after = 0i64;
        // Non-finished rows outside `states` (SUBMITTED, DELAY, …) are read too,
        // so that the cursor can follow them by id until they turn live: the
        // table scan costs the same, the extra rows are few.
        loop {
            let rows = self.page(line, Select::Unfinished, after).await?;
            let n = rows.len();
            if let Some(last) = rows.last() {
                after = last.row.id;
            }
            classify(rows, states, &mut out, &mut known, &mut pending);
            if (n as i64) < PAGE {
                break;
            }
        }
        cursor.known = known;
        cursor.pending = pending;
        cursor.advance(top_now);
        Ok(out)
    }

    /// Cheap sweep: rows above the cursor's low-water mark by primary-key range,
    /// plus the older rows the cursor already tracks (by id), so one old zombie
    /// never drags the mark back. A cursor that never swept does a full scan.
    pub async fn incremental(
        &self,
        line: DsLine,
        states: &[i32],
        cursor: &mut SweepCursor,
    ) -> Result<Vec<Candidate>, SqlError> {
        let Some(mark) = cursor.mark else {
            return self.full_scan(line, states, cursor).await;
        };
        if states.is_empty() {
            return Err(SqlError::Invalid("no states to scan".into()));
        }
        let old = cursor.old_tracked();
        // The top id, the range above the mark and the tracked rows below it
        // are independent reads: with a pool of several connections they
        // overlap, so the sweep costs about as much as its range scan alone.
        let range = async {
            let mut rows = Vec::new();
            let mut after = mark;
            loop {
                let page = self.page(line, Select::Unfinished, after).await?;
                let n = page.len();
                if let Some(last) = page.last() {
                    after = last.row.id;
                }
                rows.extend(page);
                if (n as i64) < PAGE {
                    break;
                }
            }
            Ok::<_, SqlError>(rows)
        };
        let tracked = async {
            let mut rows = Vec::new();
            for chunk in old.chunks(ID_BATCH) {
                rows.extend(self.by_ids(line, chunk).await?);
            }
            Ok::<_, SqlError>(rows)
        };
        let (top_now, range_rows, tracked_rows) = tokio::try_join!(self.max_id(), range, tracked)?;
        let mut out = Vec::new();
        let mut known = BTreeSet::new();
        let mut pending = BTreeSet::new();
        classify(range_rows, states, &mut out, &mut known, &mut pending);
        classify(tracked_rows, states, &mut out, &mut known, &mut pending);
        out.sort_by_key(|c| c.id);
        cursor.known = known;
        cursor.pending = pending;
        cursor.advance(top_now);
        Ok(out)
    }

    /// One task by id in any state, with its flag.
    pub async fn task(&self, line: DsLine, id: i64) -> Result<Option<TaskRow>, SqlError> {
        Ok(self.by_ids(line, &[id]).await?.into_iter().next())
    }

    /// Conditional batch writes (SPEC §4.2); one outcome per input, in order.
    pub async fn write_tasks(
        &self,
        line: DsLine,
        writes: &[TaskWrite],
    ) -> Result<Vec<WriteOutcome>, SqlError> {
        for w in writes {
            let code = w
                .action
                .target_state()
                .ok_or_else(|| SqlError::Invalid(format!("action {} writes nothing", w.action)))?;
            if !line.can_write(code) {
                return Err(SqlError::Invalid(format!(
                    "state {code} does not exist on line {line}"
                )));
            }
        }
        let mut outcomes = vec![WriteOutcome::LostRace; writes.len()];
        // A row seen finished or flag = 0 is never written (SPEC §4.8).
        let idx: Vec<usize> = (0..writes.len())
            .filter(|&i| !DsLine::is_finished_task_state(writes[i].seen.state))
            .collect();
        // One transaction for the whole batch: one commit (one log flush)
        // instead of one per chunk.
        let batch: Vec<&TaskWrite> = idx.iter().map(|&i| &writes[i]).collect();
        let applied = match &self.pool {
            Pool::My(p) => mysql::write_batch(p, line, self.zone, &batch).await?,
            Pool::Pg(p) => postgres::write_batch(p, line, self.zone, &batch).await?,
        };
        for (k, &i) in idx.iter().enumerate() {
            if applied[k] {
                outcomes[i] = WriteOutcome::Applied;
            }
        }
        Ok(outcomes)
    }

    /// The workflow follow-up after a successful task write (SPEC §5), one transaction.
    pub async fn follow_up(
        &self,
        line: DsLine,
        req: &FollowUpRequest,
    ) -> Result<FollowUpOutcome, SqlError> {
        if req.follow_up == FollowUp::None {
            return Ok(FollowUpOutcome::Skipped(
                "workflow follow-up is none".into(),
            ));
        }
        if !req.action.writes() {
            return Err(SqlError::Invalid(
                "a workflow follow-up needs a task write (fail, fault-tolerance or kill)".into(),
            ));
        }
        let Some(wf) = req.task.workflow_instance_id else {
            return Ok(FollowUpOutcome::Skipped(
                "the task has no workflow instance id".into(),
            ));
        };
        match &self.pool {
            Pool::My(p) => mysql::follow_up(p, line, self.zone, req, wf).await,
            Pool::Pg(p) => postgres::follow_up(p, line, self.zone, req, wf).await,
        }
    }
}

/// Which rows a page reads.
/// All pages read `flag = 1` rows in a non-finished state.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Select {
    /// `flag = 1 AND state NOT IN (finished)`.
    Unfinished,
}

/// The lines a schema is consistent with, from the tables and the columns of
/// `t_ds_task_instance` (lower-case names).
pub fn detect_lines(
    tables: &BTreeSet<String>,
    task_cols: &BTreeSet<String>,
) -> Result<Vec<DsLine>, SqlError> {
    let has = |c: &str| task_cols.contains(c);
    if !tables.contains("t_ds_task_instance") {
        return Err(SqlError::UnknownSchema(format!(
            "no t_ds_task_instance table ({} tables found)",
            tables.len()
        )));
    }
    let lines = if tables.contains("t_ds_workflow_instance") && has("workflow_instance_id") {
        vec![DsLine::V3_3]
    } else if !tables.contains("t_ds_process_instance") || !has("process_instance_id") {
        vec![]
    } else if has("project_code") {
        vec![DsLine::V3_2]
    } else if has("task_execute_type") {
        vec![DsLine::V3_1_0, DsLine::V3_1]
    } else if has("task_code") && has("task_group_id") {
        // 3.0.0's DDL added task_group_id; no 2.0.x release has it
        vec![DsLine::V3_0]
    } else if has("task_code") {
        vec![DsLine::V2_0]
    } else if has("worker_group_id") {
        vec![DsLine::V1_2]
    } else if has("worker_group") {
        vec![DsLine::V1_3]
    } else {
        vec![]
    };
    if lines.is_empty() {
        return Err(SqlError::UnknownSchema(format!(
            "t_ds_task_instance columns [{}], workflow table {}",
            task_cols.iter().cloned().collect::<Vec<_>>().join(", "),
            if tables.contains("t_ds_workflow_instance") {
                "t_ds_workflow_instance"
            } else if tables.contains("t_ds_process_instance") {
                "t_ds_process_instance"
            } else {
                "missing"
            }
        )));
    }
    Ok(lines)
}

/// 1.2's worker group: the `t_ds_worker_group` name, `default` for -1 (any
/// worker), else the id as text.
pub(crate) fn worker_group_from_id(id: Option<i64>, name: Option<String>) -> Option<String> {
    match (id, name) {
        (_, Some(n)) if !n.trim().is_empty() => Some(n),
        (Some(-1), _) => Some("default".to_string()),
        (Some(i), _) => Some(i.to_string()),
        (None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn detection_rules() {
        let t = set(&["t_ds_task_instance", "t_ds_process_instance"]);
        let l = |c: &[&str]| detect_lines(&t, &set(c)).unwrap();
        assert_eq!(
            l(&["process_instance_id", "worker_group_id"]),
            vec![DsLine::V1_2]
        );
        assert_eq!(
            l(&["process_instance_id", "worker_group"]),
            vec![DsLine::V1_3]
        );
        assert_eq!(
            l(&["process_instance_id", "worker_group", "task_code"]),
            vec![DsLine::V2_0]
        );
        assert_eq!(
            l(&["process_instance_id", "task_code", "task_group_id"]),
            vec![DsLine::V3_0]
        );
        assert_eq!(
            l(&[
                "process_instance_id",
                "task_code",
                "task_group_id",
                "task_execute_type"
            ]),
            vec![DsLine::V3_1_0, DsLine::V3_1]
        );
        assert_eq!(
            l(&["process_instance_id", "task_code", "project_code"]),
            vec![DsLine::V3_2]
        );
        let t33 = set(&["t_ds_task_instance", "t_ds_workflow_instance"]);
        assert_eq!(
            detect_lines(&t33, &set(&["workflow_instance_id"])).unwrap(),
            vec![DsLine::V3_3]
        );
        assert!(matches!(
            detect_lines(&set(&["t_ds_user"]), &set(&[])),
            Err(SqlError::UnknownSchema(_))
        ));
        assert!(matches!(
            detect_lines(&t, &set(&["id", "name"])),
            Err(SqlError::UnknownSchema(m)) if m.contains("id, name")
        ));
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact_url("mysql://ds:secret@h:3306/db"),
            "mysql://ds:***@h:3306/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        let s = DbSettings {
            url: "postgres://u:pw@h/db".into(),
            password: Some("pw2".into()),
            max_connections: 1,
            statement_timeout: Duration::from_secs(1),
            zone: Zone::Local,
        };
        let d = format!("{s:?}");
        assert!(!d.contains("pw"), "{d}");
    }

    #[test]
    fn bad_url_is_an_error() {
        let s = DbSettings {
            url: "sqlite://x".into(),
            password: None,
            max_connections: 1,
            statement_timeout: Duration::from_secs(1),
            zone: Zone::Local,
        };
        assert!(matches!(Db::connect_lazy(&s), Err(SqlError::BadUrl(_))));
    }

    #[test]
    fn cursor_lags_one_sweep() {
        let mut c = SweepCursor::new();
        c.advance(Some(100));
        assert_eq!(c.low_water(), Some(100));
        c.advance(Some(150));
        assert_eq!(c.low_water(), Some(100));
        c.advance(Some(170));
        assert_eq!(c.low_water(), Some(150));
        c.advance(None);
        assert_eq!(c.low_water(), Some(170));
    }

    #[test]
    fn worker_group_of_1_2() {
        assert_eq!(
            worker_group_from_id(Some(-1), None).as_deref(),
            Some("default")
        );
        assert_eq!(worker_group_from_id(Some(3), None).as_deref(), Some("3"));
        assert_eq!(
            worker_group_from_id(Some(3), Some("etl".into())).as_deref(),
            Some("etl")
        );
    }
}
