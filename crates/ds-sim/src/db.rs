//! DS schemas and rows in a real database: a fresh, uniquely named database per
//! [`SimDb`], loaded with the real DS schema of a fixture (or created from
//! ds-sim's own description of it, [`crate::schema`]), plus helpers to
//! write workflows and tasks the way DS lays them out on each line. Columns
//! that releases of one line add or drop (`test_flag`, `project_code`, …) are
//! written only where the loaded schema has them, as its catalog says.

use crate::schema::{self, Release};
use anyhow::{bail, Context, Result};
use chrono::NaiveDateTime;
use reaper_core::DsLine;
use sqlx::{Executor, MySqlPool, PgPool, Row};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimKind {
    MySql,
    Postgres,
}

/// Schema fixtures and the line each stands for.
pub const FIXTURES: &[&str] = &[
    "1.2.1", "1.3.9", "2.0.9", "3.1.9", "3.2.2", "dev", "3.3.2", "3.4.0",
];

pub fn fixture_line(fixture: &str) -> DsLine {
    match fixture {
        "1.2.1" => DsLine::V1_2,
        "1.3.9" => DsLine::V1_3,
        "2.0.9" => DsLine::V2_0,
        "3.1.9" => DsLine::V3_1,
        "3.2.2" => DsLine::V3_2,
        _ => DsLine::V3_3,
    }
}

pub fn schema_dir() -> PathBuf {
    std::env::var_os("DS_SCHEMA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/shared/ds-schema"))
}

/// The fixture's real DS schema file for `kind`.
pub fn schema_file(kind: SimKind, fixture: &str) -> PathBuf {
    schema_dir().join(fixture).join(match kind {
        SimKind::MySql => "mysql.sql",
        SimKind::Postgres => "postgresql.sql",
    })
}

/// Where [`SimDb::create_with`] takes a fixture's tables from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaSource {
    /// The real DS schema file under [`schema_dir`] (`../shared/ds-schema`,
    /// or `$DS_SCHEMA_DIR`): every table, index and row DS creates.
    Files,
    /// ds-sim's own description ([`crate::schema`]): the tables and columns
    /// ds-reaper and the simulator use, from the repository alone.
    Described,
    /// The file when it exists, else the description.
    Auto,
}

pub fn server_url(kind: SimKind) -> String {
    match kind {
        SimKind::MySql => {
            std::env::var("DS_TEST_MYSQL").unwrap_or_else(|_| "mysql://ds:ds@127.0.0.1:3306".into())
        }
        SimKind::Postgres => std::env::var("DS_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1:5432".into()),
    }
}

fn with_db(server: &str, db: &str) -> String {
    let base = server.trim_end_matches('/');
    // keep any query string after the database name
    match base.split_once('?') {
        Some((b, q)) => format!("{}/{db}?{q}", b.trim_end_matches('/')),
        None => format!("{base}/{db}"),
    }
}

#[derive(Clone)]
pub enum SimPool {
    My(MySqlPool),
    Pg(PgPool),
}

/// A workflow instance to insert.
#[derive(Debug, Clone)]
pub struct WorkflowSpec {
    pub state: i32,
    /// The owning master (`ip:port`).
    pub host: Option<String>,
    pub executor_id: i32,
    pub definition_code: i64,
    pub definition_version: i32,
    pub priority: Option<i32>,
    pub command_param: Option<String>,
    pub start_time: NaiveDateTime,
    /// Written where the schema has the column (2.0+).
    pub restart_time: Option<NaiveDateTime>,
}

impl Default for WorkflowSpec {
    fn default() -> Self {
        WorkflowSpec {
            state: 1,
            host: Some("10.0.0.1:5678".into()),
            executor_id: 7,
            definition_code: 9_001,
            definition_version: 3,
            priority: Some(1),
            command_param: None,
            start_time: chrono::DateTime::from_timestamp(1_700_000_000, 0)
                .map(|t| t.naive_utc())
                .unwrap_or_default(),
            restart_time: None,
        }
    }
}

/// A task instance to insert.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    pub workflow_instance_id: i64,
    pub name: String,
    pub task_type: String,
    pub state: i32,
    pub host: Option<String>,
    pub submit_time: Option<NaiveDateTime>,
    pub start_time: Option<NaiveDateTime>,
    pub worker_group: String,
    pub flag: i32,
    pub project_code: i64,
    pub end_time: Option<NaiveDateTime>,
    /// 2.0+ `task_code`; `None`: a code of its own. Two live rows of one code
    /// in one workflow instance are a duplicate attempt (SPEC §16), so tests
    /// that want one say so.
    pub task_code: Option<i64>,
}

/// Task codes (and 1.x task names) handed out to rows that name none, so that
/// distinct tasks never look like attempts of one task.
static NEXT_TASK_CODE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1_000_000);

fn next_task_codes(n: u64) -> i64 {
    NEXT_TASK_CODE.fetch_add(n as i64, std::sync::atomic::Ordering::Relaxed)
}

impl TaskSpec {
    pub fn new(workflow_instance_id: i64, state: i32, host: Option<&str>) -> Self {
        let t = chrono::DateTime::from_timestamp(1_700_000_100, 0)
            .map(|t| t.naive_utc())
            .unwrap_or_default();
        TaskSpec {
            workflow_instance_id,
            // 1.x knows a definition's task by its name: one of its own
            name: format!("task-{}", next_task_codes(1)),
            task_type: "SHELL".into(),
            state,
            host: host.map(str::to_string),
            submit_time: Some(t),
            start_time: Some(t),
            worker_group: "default".into(),
            flag: 1,
            project_code: 4_242,
            end_time: None,
            task_code: None,
        }
    }
}

/// A task row as the tests check it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskState {
    pub state: i32,
    pub end_time: Option<NaiveDateTime>,
    pub flag: i32,
    pub host: Option<String>,
}

/// One `t_ds_command` row, every column rendered as text (NULL → None).
pub type CommandView = std::collections::BTreeMap<String, Option<String>>;

static SEQ: AtomicU32 = AtomicU32::new(0);

pub struct SimDb {
    pub kind: SimKind,
    pub fixture: String,
    pub line: DsLine,
    /// Where the tables came from: [`SchemaSource::Files`] or [`SchemaSource::Described`].
    pub source: SchemaSource,
    name: String,
    server: String,
    url: String,
    pub pool: SimPool,
    /// Columns of the tables the helpers write, from the catalog.
    columns: BTreeMap<String, BTreeSet<String>>,
}

impl SimDb {
    /// Creates a fresh database on the local server and loads the fixture's
    /// real DS schema from [`schema_dir`] (what the tests use).
    pub async fn create(kind: SimKind, fixture: &str) -> Result<SimDb> {
        SimDb::create_with(kind, fixture, SchemaSource::Files).await
    }

    /// Creates a fresh database with the fixture's tables taken from `source`.
    pub async fn create_with(kind: SimKind, fixture: &str, source: SchemaSource) -> Result<SimDb> {
        SimDb::create_on(kind, fixture, source, &server_url(kind)).await
    }

    /// As [`SimDb::create_with`], on the server at `server` (a URL without a
    /// database, e.g. a private server's).
    pub async fn create_on(
        kind: SimKind,
        fixture: &str,
        source: SchemaSource,
        server: &str,
    ) -> Result<SimDb> {
        let file = schema_file(kind, fixture);
        let source = match source {
            SchemaSource::Auto if file.is_file() => SchemaSource::Files,
            SchemaSource::Auto => SchemaSource::Described,
            s => s,
        };
        let statements = match source {
            SchemaSource::Described => {
                let release = Release::from_fixture(fixture).with_context(|| {
                    format!(
                        "ds-sim has no description of fixture {fixture} (described: {})",
                        Release::ALL.map(Release::fixture).join(", ")
                    )
                })?;
                schema::ddl(kind, release)
            }
            _ => vec![std::fs::read_to_string(&file)
                .with_context(|| format!("reading schema {}", file.display()))?],
        };
        let what = match source {
            SchemaSource::Described => format!("ds-sim's description of {fixture}"),
            _ => file.display().to_string(),
        };
        let name = format!(
            "dsr_{}_{}_{}_{}",
            fixture.replace('.', ""),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            chrono::Utc::now().timestamp_micros() % 1_000_000_000
        );
        let server = server.to_string();
        let url = with_db(&server, &name);
        let pool = match kind {
            SimKind::MySql => {
                let admin = MySqlPool::connect(&server)
                    .await
                    .context("connecting to MySQL")?;
                admin
                    .execute(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4").as_str())
                    .await?;
                admin.close().await;
                let p = sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(4)
                    .connect(&url)
                    .await?;
                for sql in &statements {
                    sqlx::raw_sql(sql)
                        .execute(&p)
                        .await
                        .with_context(|| format!("loading {what}"))?;
                }
                SimPool::My(p)
            }
            SimKind::Postgres => {
                let admin = PgPool::connect(&server)
                    .await
                    .context("connecting to PostgreSQL")?;
                admin
                    .execute(format!("CREATE DATABASE \"{name}\"").as_str())
                    .await?;
                admin.close().await;
                let p = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(4)
                    .connect(&url)
                    .await?;
                for sql in &statements {
                    sqlx::raw_sql(sql)
                        .execute(&p)
                        .await
                        .with_context(|| format!("loading {what}"))?;
                }
                SimPool::Pg(p)
            }
        };
        let columns = learn_columns(&pool).await?;
        Ok(SimDb {
            kind,
            fixture: fixture.to_string(),
            line: fixture_line(fixture),
            source,
            name,
            server,
            url,
            pool,
            columns,
        })
    }

    /// Whether the loaded schema's `table` has `col` (lower-case names).
    pub fn has_column(&self, table: &str, col: &str) -> bool {
        self.columns.get(table).is_some_and(|c| c.contains(col))
    }

    /// The URL of this database (with the password of the server URL).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database.
    pub async fn drop(self) -> Result<()> {
        match self.pool {
            SimPool::My(p) => {
                p.close().await;
                let admin = MySqlPool::connect(&self.server).await?;
                admin
                    .execute(format!("DROP DATABASE IF EXISTS `{}`", self.name).as_str())
                    .await?;
                admin.close().await;
            }
            SimPool::Pg(p) => {
                p.close().await;
                let admin = PgPool::connect(&self.server).await?;
                admin
                    .execute(
                        format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name).as_str(),
                    )
                    .await?;
                admin.close().await;
            }
        }
        Ok(())
    }

    /// Runs one or more raw statements.
    pub async fn exec(&self, sql: &str) -> Result<u64> {
        Ok(match &self.pool {
            SimPool::My(p) => sqlx::raw_sql(sql).execute(p).await?.rows_affected(),
            SimPool::Pg(p) => sqlx::raw_sql(sql).execute(p).await?.rows_affected(),
        })
    }

    /// `$1`-style or `?`-style placeholders for this server.
    fn ph(&self, n: usize) -> String {
        match self.kind {
            SimKind::MySql => vec!["?"; n].join(", "),
            SimKind::Postgres => (1..=n)
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    async fn insert(&self, table: &str, cols: Vec<(&str, V)>) -> Result<i64> {
        let names: Vec<&str> = cols.iter().map(|(c, _)| *c).collect();
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES ({})",
            names.join(", "),
            self.ph(names.len())
        );
        macro_rules! bind_all {
            ($q:expr) => {{
                let mut q = $q;
                for (_, v) in &cols {
                    q = match v {
                        V::I(x) => q.bind(*x),
                        V::L(x) => q.bind(*x),
                        V::S(x) => q.bind(x.clone()),
                        V::T(x) => q.bind(*x),
                    };
                }
                q
            }};
        }
        match &self.pool {
            SimPool::My(p) => {
                let r = bind_all!(sqlx::query(&sql)).execute(p).await?;
                Ok(r.last_insert_id() as i64)
            }
            SimPool::Pg(p) => {
                let sql = format!("{sql} RETURNING id");
                let r = bind_all!(sqlx::query(&sql)).fetch_one(p).await?;
                Ok(i64::from(r.try_get::<i32, _>(0)?))
            }
        }
    }

    /// Inserts a workflow instance with the columns its line requires.
    pub async fn insert_workflow(&self, w: &WorkflowSpec) -> Result<i64> {
        let line = self.line;
        let mut c: Vec<(&str, V)> = vec![
            ("name", V::S(Some("wf".into()))),
            ("state", V::I(Some(w.state))),
            ("host", V::S(w.host.clone())),
            ("executor_id", V::I(Some(w.executor_id))),
            ("run_times", V::I(Some(1))),
            ("start_time", V::T(Some(w.start_time))),
            ("command_param", V::S(w.command_param.clone())),
            ("flag", V::I(Some(1))),
        ];
        if line <= DsLine::V1_3 {
            c.push((
                "process_definition_id",
                V::I(Some(w.definition_code as i32)),
            ));
        } else if line == DsLine::V3_3 {
            c.push(("workflow_definition_code", V::L(Some(w.definition_code))));
            c.push((
                "workflow_definition_version",
                V::I(Some(w.definition_version)),
            ));
        } else {
            c.push(("process_definition_code", V::L(Some(w.definition_code))));
            c.push((
                "process_definition_version",
                V::I(Some(w.definition_version)),
            ));
        }
        let table = line.workflow_table();
        if self.has_column(table, "tenant_id") {
            c.push(("tenant_id", V::I(Some(1))));
        }
        if self.has_column(table, "project_code") {
            c.push(("project_code", V::L(Some(4_242))));
        }
        if self.has_column(table, "restart_time") {
            c.push(("restart_time", V::T(w.restart_time)));
        }
        // 3.2.x and 3.3.0 write it; 3.3.1 dropped the column
        if self.has_column(table, "test_flag") {
            c.push(("test_flag", V::I(Some(0))));
        }
        let prio = if line == DsLine::V3_3 {
            "workflow_instance_priority"
        } else {
            "process_instance_priority"
        };
        c.push((prio, V::I(w.priority)));
        self.insert(table, c).await
    }

    /// Inserts a task instance with the columns its line requires.
    pub async fn insert_task(&self, t: &TaskSpec) -> Result<i64> {
        let line = self.line;
        let mut c: Vec<(&str, V)> = vec![
            ("name", V::S(Some(t.name.clone()))),
            ("task_type", V::S(Some(t.task_type.clone()))),
            (
                line.workflow_fk_column(),
                V::I(Some(t.workflow_instance_id as i32)),
            ),
            ("state", V::I(Some(t.state))),
            ("submit_time", V::T(t.submit_time)),
            ("start_time", V::T(t.start_time)),
            ("host", V::S(t.host.clone())),
            ("flag", V::I(Some(t.flag))),
            ("end_time", V::T(t.end_time)),
        ];
        if line == DsLine::V1_2 {
            let id = if t.worker_group == "default" {
                -1
            } else {
                t.worker_group.parse().unwrap_or(-1)
            };
            c.push(("worker_group_id", V::I(Some(id))));
        } else {
            c.push(("worker_group", V::S(Some(t.worker_group.clone()))));
        }
        if line >= DsLine::V2_0 {
            let code = t.task_code.unwrap_or_else(|| next_task_codes(1));
            c.push(("task_code", V::L(Some(code))));
            c.push(("task_definition_version", V::I(Some(1))));
        }
        if self.has_column(TASK, "project_code") {
            c.push(("project_code", V::L(Some(t.project_code))));
        }
        self.insert(TASK, c).await
    }

    /// Records that task `parent_task` of workflow `parent_wf` runs the
    /// child workflow instance `child` (a SUB_PROCESS / SUB_WORKFLOW task),
    /// in the line's relation table as DS's `createSubWorkProcess` does.
    pub async fn insert_relation(
        &self,
        parent_wf: i64,
        parent_task: i64,
        child: i64,
    ) -> Result<i64> {
        let (table, pw, ch) = if self.line == DsLine::V3_3 {
            (
                "t_ds_relation_workflow_instance",
                "parent_workflow_instance_id",
                "workflow_instance_id",
            )
        } else {
            (
                "t_ds_relation_process_instance",
                "parent_process_instance_id",
                "process_instance_id",
            )
        };
        self.insert(
            table,
            vec![
                (pw, V::I(Some(parent_wf as i32))),
                ("parent_task_instance_id", V::I(Some(parent_task as i32))),
                (ch, V::I(Some(child as i32))),
            ],
        )
        .await
    }

    /// A task's state, end_time, flag and host.
    pub async fn task_state(&self, id: i64) -> Result<TaskState> {
        let host = match self.kind {
            SimKind::MySql => "CAST(host AS CHAR)",
            SimKind::Postgres => "host",
        };
        let sql =
            format!("SELECT state, end_time, flag, {host} FROM t_ds_task_instance WHERE id = {id}");
        match &self.pool {
            SimPool::My(p) => {
                let r = sqlx::query(&sql).fetch_one(p).await?;
                Ok(TaskState {
                    state: r.try_get::<i64, _>(0)? as i32,
                    end_time: r.try_get(1)?,
                    flag: r.try_get::<i64, _>(2)? as i32,
                    host: r.try_get(3)?,
                })
            }
            SimPool::Pg(p) => {
                let r = sqlx::query(&sql).fetch_one(p).await?;
                Ok(TaskState {
                    state: r.try_get(0)?,
                    end_time: r.try_get(1)?,
                    flag: r.try_get(2)?,
                    host: r.try_get(3)?,
                })
            }
        }
    }

    /// One text column of the workflow instance (`state`, `host`, `run_times`, …).
    pub async fn workflow_col(&self, id: i64, col: &str) -> Result<Option<String>> {
        if !col.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("bad column {col}");
        }
        let sql = match self.kind {
            SimKind::MySql => format!(
                "SELECT CAST({col} AS CHAR) FROM {} WHERE id = {id}",
                self.line.workflow_table()
            ),
            SimKind::Postgres => format!(
                "SELECT CAST({col} AS TEXT) FROM {} WHERE id = {id}",
                self.line.workflow_table()
            ),
        };
        Ok(match &self.pool {
            SimPool::My(p) => sqlx::query_scalar(&sql).fetch_one(p).await?,
            SimPool::Pg(p) => sqlx::query_scalar(&sql).fetch_one(p).await?,
        })
    }

    /// Every `t_ds_command` row, in id order, columns as text.
    pub async fn commands(&self) -> Result<Vec<CommandView>> {
        let cols: Vec<String> = match &self.pool {
            SimPool::My(p) => sqlx::query_scalar(
                "SELECT CAST(column_name AS CHAR) FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name = 't_ds_command' ORDER BY ordinal_position",
            )
            .fetch_all(p)
            .await?,
            SimPool::Pg(p) => sqlx::query_scalar(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = 't_ds_command' ORDER BY ordinal_position",
            )
            .fetch_all(p)
            .await?,
        };
        let cast = |c: &String| match self.kind {
            SimKind::MySql => format!("CAST({c} AS CHAR)"),
            SimKind::Postgres => format!("CAST({c} AS TEXT)"),
        };
        let sql = format!(
            "SELECT {} FROM t_ds_command ORDER BY id",
            cols.iter().map(cast).collect::<Vec<_>>().join(", ")
        );
        let mut out = Vec::new();
        match &self.pool {
            SimPool::My(p) => {
                for r in sqlx::query(&sql).fetch_all(p).await? {
                    let mut m = CommandView::new();
                    for (i, c) in cols.iter().enumerate() {
                        m.insert(c.clone(), r.try_get::<Option<String>, _>(i)?);
                    }
                    out.push(m);
                }
            }
            SimPool::Pg(p) => {
                for r in sqlx::query(&sql).fetch_all(p).await? {
                    let mut m = CommandView::new();
                    for (i, c) in cols.iter().enumerate() {
                        m.insert(c.clone(), r.try_get::<Option<String>, _>(i)?);
                    }
                    out.push(m);
                }
            }
        }
        Ok(out)
    }

    /// Bulk-fills `n` task rows of workflow `wf` in `state` with `host`, fast
    /// (one `INSERT … SELECT` over a generated series). Returns (first id, last id).
    pub async fn bulk_fill(&self, wf: i64, n: u64, state: i32, host: &str) -> Result<(i64, i64)> {
        let chunk = 500_000u64;
        let base = next_task_codes(n);
        let parts = (0..n.div_ceil(chunk)).map(|k| {
            let rows = (n - k * chunk).min(chunk);
            (
                format!("{wf}, {}", base + (k * chunk) as i64),
                self.series(rows),
            )
        });
        self.bulk_tasks(state, host, parts.collect()).await
    }

    /// Bulk-fills `per_workflow` task rows in `state` with `host` for each
    /// workflow instance with an id in `workflows` (inclusive), in id order,
    /// tasks after their workflow as DS inserts them. Returns (first id, last id).
    pub async fn bulk_fill_spread(
        &self,
        workflows: (i64, i64),
        per_workflow: u64,
        state: i32,
        host: &str,
    ) -> Result<(i64, i64)> {
        let table = self.line.workflow_table();
        let series = self.series(per_workflow.max(1));
        let step = 100_000i64;
        let mut parts = Vec::new();
        let mut a = workflows.0;
        while a <= workflows.1 {
            let b = (a + step - 1).min(workflows.1);
            parts.push((
                format!("w.id, {}", next_task_codes(per_workflow.max(1))),
                format!(
                    "{table} w CROSS JOIN {series} WHERE w.id BETWEEN {a} AND {b} ORDER BY w.id, s.seq"
                ),
            ));
            a = b + 1;
        }
        self.bulk_tasks(state, host, parts).await
    }

    /// Task rows from `INSERT … SELECT` statements, one per part: the
    /// workflow id as an SQL expression, then the part's first task code
    /// (each row's code is that plus `s.seq`: distinct tasks, as DS's bulk
    /// of distinct definitions' tasks would be), and the `FROM` clause it reads.
    async fn bulk_tasks(
        &self,
        state: i32,
        host: &str,
        parts: Vec<(String, String)>,
    ) -> Result<(i64, i64)> {
        let line = self.line;
        let (wg_col, wg_val) = if line == DsLine::V1_2 {
            ("worker_group_id", "-1".to_string())
        } else {
            ("worker_group", "'default'".to_string())
        };
        let mut cols = vec![
            "name".to_string(),
            "task_type".into(),
            line.workflow_fk_column().into(),
            "state".into(),
            "submit_time".into(),
            "start_time".into(),
            "end_time".into(),
            "host".into(),
            "flag".into(),
            wg_col.into(),
        ];
        let host = host.replace('\'', "");
        let ts = "'2024-01-01 00:00:00'";
        let mut vals = vec![
            String::new(), // the name, per part
            "'SHELL'".into(),
            String::new(), // the workflow id, per part
            state.to_string(),
            ts.into(),
            ts.into(),
            ts.into(),
            format!("'{host}'"),
            "1".into(),
            wg_val,
        ];
        if line >= DsLine::V2_0 {
            cols.push("task_code".into());
            vals.push(String::new()); // the code, per part
            cols.push("task_definition_version".into());
            vals.push("1".into());
        }
        if self.has_column(TASK, "project_code") {
            cols.push("project_code".into());
            vals.push("4242".into());
        }
        let before = self.max_task_id().await?;
        let code_at = cols.iter().position(|c| c == "task_code");
        for (fk_and_code, from) in parts {
            let (fk, code) = fk_and_code
                .split_once(", ")
                .map(|(f, c)| (f.to_string(), c.to_string()))
                .unwrap_or((fk_and_code.clone(), "0".into()));
            vals[2] = fk;
            vals[0] = format!("CONCAT('bulk-', {code} + s.seq)");
            if let Some(i) = code_at {
                vals[i] = format!("{code} + s.seq");
            }
            let sql = format!(
                "INSERT INTO t_ds_task_instance ({}) SELECT {} FROM {from}",
                cols.join(", "),
                vals.join(", "),
            );
            self.exec(&sql).await?;
        }
        self.inserted(TASK, before).await
    }

    /// A row source of `1..=k` as column `s.seq`.
    fn series(&self, k: u64) -> String {
        match self.kind {
            SimKind::MySql => format!("seq_1_to_{k} s"),
            SimKind::Postgres => format!("generate_series(1, {k}) AS s(seq)"),
        }
    }

    /// Bulk-fills `n` workflow instances in `state` owned by `host` (one
    /// `INSERT … SELECT` per 500,000 rows), with the columns its line
    /// requires and the defaults of [`WorkflowSpec`]. Returns (first id, last id).
    pub async fn bulk_fill_workflows(&self, n: u64, state: i32, host: &str) -> Result<(i64, i64)> {
        let line = self.line;
        let table = line.workflow_table();
        let w = WorkflowSpec::default();
        let host = host.replace('\'', "");
        let start = w.start_time.format("'%Y-%m-%d %H:%M:%S'").to_string();
        let mut c: Vec<(&str, String)> = vec![
            ("name", "'wf'".into()),
            ("state", state.to_string()),
            ("host", format!("'{host}'")),
            ("executor_id", w.executor_id.to_string()),
            ("run_times", "1".into()),
            ("start_time", start),
            ("flag", "1".into()),
        ];
        if line <= DsLine::V1_3 {
            c.push(("process_definition_id", w.definition_code.to_string()));
        } else if line == DsLine::V3_3 {
            c.push(("workflow_definition_code", w.definition_code.to_string()));
            c.push((
                "workflow_definition_version",
                w.definition_version.to_string(),
            ));
        } else {
            c.push(("process_definition_code", w.definition_code.to_string()));
            c.push((
                "process_definition_version",
                w.definition_version.to_string(),
            ));
        }
        for (col, v) in [
            ("tenant_id", "1"),
            ("project_code", "4242"),
            ("test_flag", "0"),
        ] {
            if self.has_column(table, col) {
                c.push((col, v.into()));
            }
        }
        let before = self.max_id(table).await?;
        let chunk = 500_000u64;
        let mut done = 0;
        while done < n {
            let k = (n - done).min(chunk);
            let sql = format!(
                "INSERT INTO {table} ({}) SELECT {} FROM {}",
                c.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "),
                c.iter()
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.series(k)
            );
            self.exec(&sql).await?;
            done += k;
        }
        self.inserted(table, before).await
    }

    /// The first and last ids above `before`: what an `INSERT … SELECT`
    /// was given (MariaDB leaves gaps in the ids of bulk inserts).
    async fn inserted(&self, table: &str, before: i64) -> Result<(i64, i64)> {
        let sql = format!(
            "SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM {table} WHERE id > {before}"
        );
        Ok(match &self.pool {
            SimPool::My(p) => sqlx::query_as::<_, (i64, i64)>(&sql).fetch_one(p).await?,
            SimPool::Pg(p) => {
                let (a, b) = sqlx::query_as::<_, (i32, i32)>(&sql).fetch_one(p).await?;
                (i64::from(a), i64::from(b))
            }
        })
    }

    async fn max_id(&self, table: &str) -> Result<i64> {
        let sql = format!("SELECT COALESCE(MAX(id), 0) FROM {table}");
        Ok(match &self.pool {
            SimPool::My(p) => sqlx::query_scalar::<_, i64>(&sql).fetch_one(p).await?,
            SimPool::Pg(p) => i64::from(sqlx::query_scalar::<_, i32>(&sql).fetch_one(p).await?),
        })
    }

    pub async fn max_task_id(&self) -> Result<i64> {
        let sql = "SELECT COALESCE(MAX(id), 0) FROM t_ds_task_instance";
        Ok(match &self.pool {
            SimPool::My(p) => sqlx::query_scalar::<_, i64>(sql).fetch_one(p).await?,
            SimPool::Pg(p) => i64::from(sqlx::query_scalar::<_, i32>(sql).fetch_one(p).await?),
        })
    }
}

const TASK: &str = "t_ds_task_instance";

/// Columns of the task, workflow and command tables, from the catalog.
async fn learn_columns(pool: &SimPool) -> Result<BTreeMap<String, BTreeSet<String>>> {
    const TABLES: &str =
        "'t_ds_task_instance', 't_ds_process_instance', 't_ds_workflow_instance', 't_ds_command'";
    let rows: Vec<(String, String)> = match pool {
        SimPool::My(p) => {
            sqlx::query_as(&format!(
                "SELECT CAST(LOWER(table_name) AS CHAR), CAST(LOWER(column_name) AS CHAR) \
                 FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND LOWER(table_name) IN ({TABLES})"
            ))
            .fetch_all(p)
            .await?
        }
        SimPool::Pg(p) => {
            sqlx::query_as(&format!(
                "SELECT LOWER(table_name)::text, LOWER(column_name)::text \
                 FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND LOWER(table_name) IN ({TABLES})"
            ))
            .fetch_all(p)
            .await?
        }
    };
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (t, c) in rows {
        out.entry(t).or_default().insert(c);
    }
    Ok(out)
}

enum V {
    I(Option<i32>),
    L(Option<i64>),
    S(Option<String>),
    T(Option<NaiveDateTime>),
}
