//! ds-sim's own description of the DS tables (`src/schema.rs`) against the
//! real DS schemas: for every fixture directory of `../shared/ds-schema`
//! (`$DS_SCHEMA_DIR`; `jdbc-registry` aside) on MariaDB and on PostgreSQL, the
//! real schema file is loaded into one fresh database and the description
//! into another, and their catalogs are compared table by table:
//!
//! - the same described tables exist (`t_ds_process_instance` up to 3.2,
//!   `t_ds_workflow_instance` from 3.3, `t_ds_serial_command` on 3.4.0, …);
//! - every column name the description knows for a table on any line, and
//!   every column ds-reaper or the simulator looks for ([`PROBED`]), is
//!   present in the description exactly where the real schema has it;
//! - every described column has a compatible type (int/integer/tinyint/
//!   smallint, bigint, varchar of the same length, text/longtext,
//!   datetime/timestamp), the same nullability, the same default and the same
//!   key (primary key, AUTO_INCREMENT / sequence);
//! - every real NOT NULL column without a default is described (a row the
//!   description accepts, the real schema accepts);
//! - reaper-sql's line detection gives the same answer on both, and the
//!   `t_ds_version` rows are equal;
//! - the simulator's helpers work on the described tables.
//!
//! The database registry's tables get the same comparison against the
//! registry plugin's own files (`jdbc-registry/<3.1.9|3.2.2|dev>/`), plus
//! their unique keys, and a simulated DS server registers on the described
//! ones (from dev on they are part of the main schema and compared there too).
//!
//! Every mismatch is reported, naming database, fixture, table and column.
//! A missing database server or schema directory fails the test under
//! CI=true and is reported as SKIP otherwise.

use ds_sim::db::{
    schema_dir, server_url, SchemaSource, SimDb, SimKind, SimPool, TaskSpec, WorkflowSpec,
};
use ds_sim::jdbc::{registry_schema_file, JdbcSimOptions, SimJdbcServer, SimRegistryDb};
use ds_sim::schema::{self, Release};
use std::collections::{BTreeMap, BTreeSet};

/// Columns that ds-reaper (reaper-sql: candidate reads, writes, follow-ups,
/// `Catalog::has`/`col_or_null`/`require`, `fit_command`, line detection) or
/// the simulator (`SimDb::has_column`, inserts) look for, by table. Listed
/// here independently of the description, so that a column the description
/// forgets is caught.
const PROBED: &[(&str, &[&str])] = &[
    (
        "t_ds_task_instance",
        &[
            "id",
            "name",
            "task_type",
            "state",
            "host",
            "submit_time",
            "start_time",
            "end_time",
            "flag",
            "worker_group",
            "worker_group_id",
            "process_instance_id",
            "workflow_instance_id",
            "process_definition_id",
            "project_code",
            "task_code",
            "task_definition_version",
            "task_group_id",
            "task_execute_type",
            "is_cache",
            "cache_key",
            "test_flag",
        ],
    ),
    ("t_ds_process_instance", WORKFLOW_PROBED),
    ("t_ds_workflow_instance", WORKFLOW_PROBED),
    (
        "t_ds_command",
        &[
            "id",
            "command_type",
            "process_definition_id",
            "process_definition_code",
            "process_definition_version",
            "process_instance_id",
            "workflow_definition_code",
            "workflow_definition_version",
            "workflow_instance_id",
            "command_param",
            "executor_id",
            "task_depend_type",
            "failure_strategy",
            "start_time",
            "update_time",
            "process_instance_priority",
            "workflow_instance_priority",
            "dry_run",
            "test_flag",
            "worker_group_id",
        ],
    ),
    (
        "t_ds_schedules",
        &[
            "process_definition_id",
            "process_definition_code",
            "workflow_definition_code",
            "timezone_id",
        ],
    ),
    ("t_ds_worker_group", &["id", "name"]),
    ("t_ds_version", &["version"]),
];

const WORKFLOW_PROBED: &[&str] = &[
    "id",
    "name",
    "state",
    "host",
    "start_time",
    "end_time",
    "executor_id",
    "run_times",
    "restart_time",
    "command_param",
    "flag",
    "process_definition_id",
    "process_definition_code",
    "process_definition_version",
    "workflow_definition_code",
    "workflow_definition_version",
    "process_instance_priority",
    "workflow_instance_priority",
    "tenant_id",
    "project_code",
    "test_flag",
];

/// One column as the catalog reports it, normalised.
#[derive(Debug, Clone, PartialEq)]
struct Col {
    /// int, bigint, varchar(n), text, timestamp, or the catalog's own name.
    ty: String,
    nullable: bool,
    /// Normalised literal; `None` for no default or DEFAULT NULL.
    default: Option<String>,
    /// Generated: AUTO_INCREMENT or a sequence default.
    generated: bool,
    primary_key: bool,
}

#[derive(Debug, Default)]
struct Catalog {
    tables: BTreeSet<String>,
    columns: BTreeMap<String, BTreeMap<String, Col>>,
    version_rows: Vec<String>,
    /// (table, column) of every unique index other than the primary key.
    unique: BTreeSet<(String, String)>,
}

impl Catalog {
    fn has(&self, table: &str, col: &str) -> bool {
        self.columns.get(table).is_some_and(|c| c.contains_key(col))
    }
}

fn norm_type(data_type: &str, len: Option<&str>) -> String {
    match data_type.to_ascii_lowercase().as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" => "int".into(),
        "bigint" => "bigint".into(),
        "varchar" | "character varying" => format!("varchar({})", len.unwrap_or("?")),
        "text" | "tinytext" | "mediumtext" | "longtext" => "text".into(),
        "datetime" | "timestamp" | "timestamp without time zone" => "timestamp".into(),
        other => other.to_string(),
    }
}

/// MariaDB reports `NULL`, `1`, `'default'`, `current_timestamp()`;
/// PostgreSQL `NULL::character varying`, `'-1'::integer`, `now()`,
/// `CURRENT_TIMESTAMP`, `nextval('…'::regclass)`.
fn norm_default(d: Option<&str>) -> (Option<String>, bool) {
    let Some(d) = d.map(str::trim) else {
        return (None, false);
    };
    let lower = d.to_ascii_lowercase();
    if lower.starts_with("nextval(") {
        return (None, true);
    }
    if lower == "null" || lower.starts_with("null::") {
        return (None, false);
    }
    if lower.starts_with("current_timestamp") || lower == "now()" {
        return (Some("now".into()), false);
    }
    let base = d.split("::").next().unwrap_or(d);
    let base = base
        .trim_matches(|c| c == '(' || c == ')')
        .trim_matches('\'');
    (Some(base.to_string()), false)
}

type Row = (
    String,
    String,
    String,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
);

/// Tables, columns, primary-key columns and `t_ds_version` rows, as read.
type RawCatalog = (Vec<String>, Vec<Row>, Vec<(String, String)>, Vec<String>);

async fn catalog(db: &SimDb) -> anyhow::Result<Catalog> {
    catalog_of(&db.pool).await
}

async fn catalog_of(pool: &SimPool) -> anyhow::Result<Catalog> {
    let mut cat = Catalog::default();
    let unique: Vec<(String, String)> = match pool {
        SimPool::My(p) => {
            sqlx::query_as(
                "SELECT CAST(LOWER(table_name) AS CHAR), CAST(LOWER(column_name) AS CHAR) \
                 FROM information_schema.statistics WHERE table_schema = DATABASE() \
                 AND non_unique = 0 AND index_name <> 'PRIMARY'",
            )
            .fetch_all(p)
            .await?
        }
        SimPool::Pg(p) => {
            sqlx::query_as(
                "SELECT LOWER(t.relname::text), LOWER(a.attname::text) FROM pg_index i \
                 JOIN pg_class t ON t.oid = i.indrelid \
                 JOIN pg_namespace n ON n.oid = t.relnamespace \
                 JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY (i.indkey) \
                 WHERE i.indisunique AND NOT i.indisprimary AND n.nspname = current_schema()",
            )
            .fetch_all(p)
            .await?
        }
    };
    cat.unique = unique.into_iter().collect();
    let (tables, cols, keys, versions): RawCatalog =
        match pool {
            SimPool::My(p) => (
                sqlx::query_scalar(
                    "SELECT CAST(LOWER(table_name) AS CHAR) FROM information_schema.tables \
                     WHERE table_schema = DATABASE()",
                )
                .fetch_all(p)
                .await?,
                sqlx::query_as(
                    "SELECT CAST(LOWER(table_name) AS CHAR), CAST(LOWER(column_name) AS CHAR), \
                     CAST(data_type AS CHAR), CAST(character_maximum_length AS CHAR), \
                     CAST(is_nullable AS CHAR), CAST(column_default AS CHAR), CAST(extra AS CHAR) \
                     FROM information_schema.columns WHERE table_schema = DATABASE()",
                )
                .fetch_all(p)
                .await?,
                sqlx::query_as(
                    "SELECT CAST(LOWER(k.table_name) AS CHAR), CAST(LOWER(k.column_name) AS CHAR) \
                     FROM information_schema.table_constraints c \
                     JOIN information_schema.key_column_usage k \
                       ON k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema \
                      AND k.table_name = c.table_name \
                     WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = DATABASE()",
                )
                .fetch_all(p)
                .await?,
                sqlx::query_scalar("SELECT CAST(version AS CHAR) FROM t_ds_version ORDER BY id")
                    .fetch_all(p)
                    .await
                    .unwrap_or_default(),
            ),
            SimPool::Pg(p) => (
                sqlx::query_scalar(
                    "SELECT LOWER(table_name)::text FROM information_schema.tables \
                     WHERE table_schema = current_schema()",
                )
                .fetch_all(p)
                .await?,
                sqlx::query_as(
                    "SELECT LOWER(table_name)::text, LOWER(column_name)::text, data_type::text, \
                     character_maximum_length::text, is_nullable::text, column_default::text, \
                     NULL::text FROM information_schema.columns WHERE table_schema = current_schema()",
                )
                .fetch_all(p)
                .await?,
                sqlx::query_as(
                    "SELECT LOWER(k.table_name)::text, LOWER(k.column_name)::text \
                     FROM information_schema.table_constraints c \
                     JOIN information_schema.key_column_usage k \
                       ON k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema \
                      AND k.table_name = c.table_name \
                     WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = current_schema()",
                )
                .fetch_all(p)
                .await?,
                sqlx::query_scalar("SELECT version::text FROM t_ds_version ORDER BY id")
                    .fetch_all(p)
                    .await
                    .unwrap_or_default(),
            ),
        };
    cat.tables = tables.into_iter().collect();
    let keys: BTreeSet<(String, String)> = keys.into_iter().collect();
    for (t, c, ty, len, nullable, default, extra) in cols {
        let (default, seq) = norm_default(default.as_deref());
        let auto = extra
            .as_deref()
            .is_some_and(|e| e.to_ascii_lowercase().contains("auto_increment"));
        let col = Col {
            ty: norm_type(&ty, len.as_deref()),
            nullable: nullable.eq_ignore_ascii_case("YES"),
            default,
            generated: seq || auto,
            primary_key: keys.contains(&(t.clone(), c.clone())),
        };
        cat.columns.entry(t).or_default().insert(c, col);
    }
    cat.version_rows = versions;
    Ok(cat)
}

/// Every difference between the real catalog and the described one that
/// matters, as one line each.
fn compare(at: &str, release: Release, real: &Catalog, desc: &Catalog) -> Vec<String> {
    let mut out = compare_tables(at, real, desc);
    let task = |c: &Catalog| {
        c.columns
            .get("t_ds_task_instance")
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let detect = |c: &Catalog| {
        format!(
            "{:?}",
            reaper_sql::detect_lines(&c.tables, &task(c)).map_err(|e| e.to_string())
        )
    };
    let (dr, dd) = (detect(real), detect(desc));
    if dr != dd {
        out.push(format!(
            "{at}: reaper-sql detects {dr} on the real schema, {dd} on the description"
        ));
    }
    let want = vec![release.version_row().to_string()];
    if real.version_rows != desc.version_rows || desc.version_rows != want {
        out.push(format!(
            "{at}: t_ds_version rows {:?} in the real schema, {:?} described (expected {want:?})",
            real.version_rows, desc.version_rows
        ));
    }
    out
}

/// The table-by-table part of [`compare`]: every described table (main and
/// registry) present in either catalog.
fn compare_tables(at: &str, real: &Catalog, desc: &Catalog) -> Vec<String> {
    compare_these(at, real, desc, schema::all_tables())
}

fn compare_these<'a>(
    at: &str,
    real: &Catalog,
    desc: &Catalog,
    tables: impl Iterator<Item = &'a schema::Table>,
) -> Vec<String> {
    let mut out = Vec::new();
    let probed = |t: &str| -> &[&str] {
        PROBED
            .iter()
            .find(|(n, _)| *n == t)
            .map(|(_, c)| *c)
            .unwrap_or(&[])
    };
    for table in tables {
        let t = table.name;
        match (real.tables.contains(t), desc.tables.contains(t)) {
            (true, true) => {}
            (false, false) => continue,
            (r, _) => {
                out.push(format!(
                    "{at}: table {t}: the real schema {} it, the description {}",
                    if r { "has" } else { "lacks" },
                    if r { "lacks" } else { "has" },
                ));
                continue;
            }
        }
        // presence of every column name the description knows for the
        // table on any line, and of every probed one
        let mut names: BTreeSet<&str> = table.columns.iter().map(|c| c.name).collect();
        names.extend(probed(t).iter().copied());
        for col in names {
            match (real.has(t, col), desc.has(t, col)) {
                (true, false) => out.push(format!(
                    "{at}: {t}.{col}: the real schema has it, the description lacks it"
                )),
                (false, true) => out.push(format!(
                    "{at}: {t}.{col}: the description has it, the real schema lacks it"
                )),
                _ => {}
            }
        }
        let real_cols = &real.columns[t];
        let desc_cols = &desc.columns[t];
        for (name, d) in desc_cols {
            let Some(r) = real_cols.get(name) else {
                continue; // reported above, or an unknown extra
            };
            if r.ty != d.ty {
                out.push(format!(
                    "{at}: {t}.{name}: type {} in the real schema, {} described",
                    r.ty, d.ty
                ));
            }
            if r.nullable != d.nullable {
                out.push(format!(
                    "{at}: {t}.{name}: {} in the real schema, {} described",
                    null_word(r.nullable),
                    null_word(d.nullable)
                ));
            }
            if r.default != d.default {
                out.push(format!(
                    "{at}: {t}.{name}: default {:?} in the real schema, {:?} described",
                    r.default, d.default
                ));
            }
            if r.generated != d.generated || r.primary_key != d.primary_key {
                out.push(format!(
                    "{at}: {t}.{name}: key (primary {}, generated {}) in the real schema, \
                     (primary {}, generated {}) described",
                    r.primary_key, r.generated, d.primary_key, d.generated
                ));
            }
        }
        for (name, r) in real_cols {
            if !r.nullable && r.default.is_none() && !r.generated && !desc_cols.contains_key(name) {
                out.push(format!(
                    "{at}: {t}.{name}: NOT NULL without a default in the real schema, not described"
                ));
            }
        }
        // a described unique key is one in both; the registry tables'
        // description names every unique key DS gives them
        let uniques = |c: &Catalog| -> BTreeSet<String> {
            c.unique
                .iter()
                .filter(|(tt, _)| tt == t)
                .map(|(_, col)| col.clone())
                .collect()
        };
        let (ru, du) = (uniques(real), uniques(desc));
        let registry = schema::REGISTRY_TABLES.iter().any(|r| r.name == t);
        let mut cols: BTreeSet<String> = table.unique.iter().map(|u| u.to_string()).collect();
        if registry {
            cols.extend(ru.iter().cloned());
        }
        for u in cols {
            match (ru.contains(&u), du.contains(&u)) {
                (true, true) => {}
                (r, d) => out.push(format!(
                    "{at}: {t}.{u}: unique key {} in the real schema, {} described",
                    if r { "present" } else { "absent" },
                    if d { "present" } else { "absent" },
                )),
            }
        }
    }
    out
}

fn null_word(nullable: bool) -> &'static str {
    if nullable {
        "nullable"
    } else {
        "NOT NULL"
    }
}

/// The simulator's helpers on the described tables: a workflow, tasks, a
/// bulk fill, and reading them back.
async fn helpers_work(db: &SimDb) -> anyhow::Result<()> {
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let t = db
        .insert_task(&TaskSpec::new(wf, 1, Some("10.0.0.5:1234")))
        .await?;
    let s = db.task_state(t).await?;
    anyhow::ensure!(s.state == 1 && s.flag == 1, "task read back as {s:?}");
    anyhow::ensure!(
        db.workflow_col(wf, "state").await?.as_deref() == Some("1"),
        "workflow state not read back"
    );
    let (a, b) = db.bulk_fill(wf, 10, 1, "10.0.0.6:1234").await?;
    anyhow::ensure!(b - a == 9, "bulk fill wrote ids {a}..{b}");
    anyhow::ensure!(
        db.commands().await?.is_empty(),
        "commands in a fresh database"
    );
    Ok(())
}

/// Whether `kind`'s server answers; `Err` carries the reason.
async fn server_up(kind: SimKind) -> Result<(), String> {
    let url = server_url(kind);
    match kind {
        SimKind::MySql => match sqlx::MySqlPool::connect(&url).await {
            Ok(p) => {
                p.close().await;
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        },
        SimKind::Postgres => match sqlx::PgPool::connect(&url).await {
            Ok(p) => {
                p.close().await;
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        },
    }
}

fn skip_or_fail(why: String) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why} (CI=true: a missing service or schema directory fails)");
    }
    eprintln!("SKIP: {why}");
}

/// The fixture directories of the schema directory, `jdbc-registry` aside.
fn fixture_dirs() -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(schema_dir())? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type()?.is_dir() && name != "jdbc-registry" {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

async fn check(kind: SimKind, fixture: String) -> Vec<String> {
    let at = format!(
        "[{} {fixture}]",
        match kind {
            SimKind::MySql => "mariadb",
            SimKind::Postgres => "postgres",
        }
    );
    let Some(release) = Release::from_fixture(&fixture) else {
        return vec![format!(
            "{at}: fixture directory {fixture} has no description in ds-sim (src/schema.rs)"
        )];
    };
    let mut out = Vec::new();
    let real = match SimDb::create_with(kind, &fixture, SchemaSource::Files).await {
        Ok(db) => db,
        Err(e) => return vec![format!("{at}: loading the real schema: {e:#}")],
    };
    let desc = match SimDb::create_with(kind, &fixture, SchemaSource::Described).await {
        Ok(db) => db,
        Err(e) => {
            let _ = real.drop().await;
            return vec![format!("{at}: creating the described tables: {e:#}")];
        }
    };
    match (catalog(&real).await, catalog(&desc).await) {
        (Ok(r), Ok(d)) => out.extend(compare(&at, release, &r, &d)),
        (r, d) => out.push(format!(
            "{at}: reading the catalogs: {:?} / {:?}",
            r.err(),
            d.err()
        )),
    }
    if let Err(e) = helpers_work(&desc).await {
        out.push(format!(
            "{at}: the simulator's helpers on the described tables: {e:#}"
        ));
    }
    if let Err(e) = real.drop().await {
        out.push(format!("{at}: dropping the real-schema database: {e:#}"));
    }
    if let Err(e) = desc.drop().await {
        out.push(format!("{at}: dropping the described database: {e:#}"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn description_agrees_with_real_schemas() {
    let fixtures = match fixture_dirs() {
        Ok(f) if !f.is_empty() => f,
        Ok(_) => return skip_or_fail(format!("no fixtures in {}", schema_dir().display())),
        Err(e) => {
            return skip_or_fail(format!(
                "schema directory {} unreadable: {e}",
                schema_dir().display()
            ))
        }
    };
    let mut kinds = Vec::new();
    for kind in [SimKind::MySql, SimKind::Postgres] {
        match server_up(kind).await {
            Ok(()) => kinds.push(kind),
            Err(e) => skip_or_fail(format!("database {kind:?} unavailable: {e}")),
        }
    }
    let mut set = tokio::task::JoinSet::new();
    for &kind in &kinds {
        for f in &fixtures {
            set.spawn(check(kind, f.clone()));
        }
    }
    let mut problems = Vec::new();
    while let Some(r) = set.join_next().await {
        problems.extend(r.expect("a fixture check panicked"));
    }
    problems.sort();
    assert!(
        problems.is_empty(),
        "ds-sim's description disagrees with the real DS schemas in {} place(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
    eprintln!(
        "checked {} fixture(s) ({}) on {} database(s)",
        fixtures.len(),
        fixtures.join(", "),
        kinds.len()
    );
}

/// The registry tables of one `jdbc-registry/` fixture on `kind`: DS's main
/// schema plus the plugin's file in one database, the description (through
/// [`SimRegistryDb::attach`]) in another; compared table by table, then a
/// simulated server registers on the described tables.
async fn check_registry(kind: SimKind, fixture: String) -> Vec<String> {
    let at = format!(
        "[{} jdbc-registry/{fixture}]",
        match kind {
            SimKind::MySql => "mariadb",
            SimKind::Postgres => "postgres",
        }
    );
    let Some(release) = Release::from_fixture(&fixture) else {
        return vec![format!("{at}: no description of {fixture} in ds-sim")];
    };
    let file = registry_schema_file(kind, &fixture);
    if !file.is_file() {
        // 3.1's MySQL registry has no PostgreSQL file: nor has the description
        return match schema::registry_tables(kind, release).next() {
            None => vec![],
            Some(t) => vec![format!(
                "{at}: {} described, but DS ships no {}",
                t.name,
                file.display()
            )],
        };
    }
    let mut out = Vec::new();
    let real = match SimDb::create_with(kind, &fixture, SchemaSource::Files).await {
        Ok(db) => db,
        Err(e) => return vec![format!("{at}: loading the real schema: {e:#}")],
    };
    let loaded = match std::fs::read_to_string(&file) {
        Ok(sql) => real.exec(&sql).await.map(|_| ()),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = loaded {
        out.push(format!("{at}: loading {}: {e:#}", file.display()));
    }
    let desc = match SimDb::create_with(kind, &fixture, SchemaSource::Described).await {
        Ok(db) => db,
        Err(e) => {
            let _ = real.drop().await;
            out.push(format!("{at}: creating the described tables: {e:#}"));
            return out;
        }
    };
    match SimRegistryDb::attach(&desc).await {
        Err(e) => out.push(format!("{at}: the described registry tables: {e:#}")),
        Ok(reg) => {
            match (catalog(&real).await, catalog(&desc).await) {
                (Ok(r), Ok(d)) => {
                    out.extend(compare_these(&at, &r, &d, schema::REGISTRY_TABLES.iter()))
                }
                (r, d) => out.push(format!(
                    "{at}: reading the catalogs: {:?} / {:?}",
                    r.err(),
                    d.err()
                )),
            }
            if let Err(e) = registry_helpers_work(&reg, desc.line).await {
                out.push(format!(
                    "{at}: a simulated server on the described registry tables: {e:#}"
                ));
            }
        }
    }
    for (what, db) in [("real", real), ("described", desc)] {
        if let Err(e) = db.drop().await {
            out.push(format!("{at}: dropping the {what} database: {e:#}"));
        }
    }
    out
}

async fn registry_helpers_work(
    reg: &SimRegistryDb,
    line: reaper_core::DsLine,
) -> anyhow::Result<()> {
    let mut s = SimJdbcServer::register(
        reg,
        line,
        reaper_core::NodeKind::Worker,
        "10.0.0.5:1234",
        chrono::Utc::now(),
        JdbcSimOptions::default(),
    )
    .await?;
    let key = s.keys().pop().unwrap_or_default();
    anyhow::ensure!(reg.db.has_key(&key).await?, "{key} not written");
    s.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn registry_description_agrees_with_the_registry_plugins_files() {
    let dir = schema_dir().join("jdbc-registry");
    let fixtures: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(rd) => {
            let mut f: Vec<String> = rd
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            f.sort();
            f
        }
        Err(e) => return skip_or_fail(format!("{} unreadable: {e}", dir.display())),
    };
    let mut kinds = Vec::new();
    for kind in [SimKind::MySql, SimKind::Postgres] {
        match server_up(kind).await {
            Ok(()) => kinds.push(kind),
            Err(e) => skip_or_fail(format!("database {kind:?} unavailable: {e}")),
        }
    }
    let mut set = tokio::task::JoinSet::new();
    for &kind in &kinds {
        for f in &fixtures {
            set.spawn(check_registry(kind, f.clone()));
        }
    }
    let mut problems = Vec::new();
    while let Some(r) = set.join_next().await {
        problems.extend(r.expect("a registry check panicked"));
    }
    problems.sort();
    assert!(
        problems.is_empty(),
        "ds-sim's registry description disagrees with DS's registry files in {} place(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
    eprintln!(
        "checked the registry tables of {} ({} database(s))",
        fixtures.join(", "),
        kinds.len()
    );
}
