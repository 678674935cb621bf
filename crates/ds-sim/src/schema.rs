//! ds-sim's own description of the DolphinScheduler tables and columns that
//! ds-reaper and the simulator use, per DS line (schema fixture), so that the
//! demo and `ds-sim cluster` run from the repository alone.
//!
//! Written here, as data, from the facts of the DS reference
//! (`dolphinscheduler.md` §2 and §8: tables and key columns per line, types,
//! the columns releases add or drop), never copied from DS's SQL files. The
//! CREATE TABLE statements are generated from it per dialect (MySQL/MariaDB,
//! PostgreSQL) by [`ddl`].
//!
//! What is described, per table:
//! - every column ds-reaper reads, compares, writes or probes in the catalog,
//!   and every column the simulator writes or reads;
//! - every column line detection looks at (`task_code`, `task_group_id`,
//!   `task_execute_type`, `project_code`, `worker_group[_id]`, the workflow
//!   foreign key) and the columns whose presence tells releases of one line
//!   apart (`test_flag`, `is_cache`, `cache_key`);
//! - every NOT NULL column without a default, so that a row the description
//!   accepts is one the real schema accepts;
//! - the key: `id`, AUTO_INCREMENT on MySQL, a `<table>_id_sequence` on
//!   PostgreSQL.
//!
//! Other columns, indexes and the tables nothing here touches are left out:
//! the benchmarks, which depend on DS's indexes, load the real schema files.
//!
//! The database registry's tables (reference §3.5) are described too
//! ([`REGISTRY_TABLES`], [`registry_ddl`]): 3.1's MySQL registry (MySQL
//! only) and 3.2's JDBC registry ship as the registry plugin's own SQL file,
//! outside DS's main schema; from dev (3.3) on, DS's main schema carries the
//! JDBC registry's tables, so [`tables`] and [`ddl`] include them there. Their
//! unique key columns are described, since the registry writes rely on them.
//!
//! `tests/schema_agreement.rs` checks, table by table and line by line on
//! both databases, that this description agrees with the real schemas (the
//! registry tables against the plugin's files as well).

use crate::db::SimKind;

/// The schema fixtures, in release order (`dev` is the pre-3.3.0 `dev` branch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Release {
    V1_2_1,
    V1_3_9,
    V2_0_9,
    V3_1_9,
    V3_2_2,
    Dev,
    V3_3_2,
    V3_4_0,
}

impl Release {
    pub const ALL: [Release; 8] = [
        Release::V1_2_1,
        Release::V1_3_9,
        Release::V2_0_9,
        Release::V3_1_9,
        Release::V3_2_2,
        Release::Dev,
        Release::V3_3_2,
        Release::V3_4_0,
    ];

    /// The fixture directory name.
    pub fn fixture(self) -> &'static str {
        match self {
            Release::V1_2_1 => "1.2.1",
            Release::V1_3_9 => "1.3.9",
            Release::V2_0_9 => "2.0.9",
            Release::V3_1_9 => "3.1.9",
            Release::V3_2_2 => "3.2.2",
            Release::Dev => "dev",
            Release::V3_3_2 => "3.3.2",
            Release::V3_4_0 => "3.4.0",
        }
    }

    pub fn from_fixture(fixture: &str) -> Option<Release> {
        Release::ALL.into_iter().find(|r| r.fixture() == fixture)
    }

    /// The `t_ds_version` row a fresh install of the fixture holds (§8: fresh
    /// installs of 3.2.2 and 3.3.x/3.4.x write `3.3.0`; the 3.3.2 and 3.4.0
    /// fixtures are upgraded installs; 1.2.1 writes `1.2.0`).
    pub fn version_row(self) -> &'static str {
        match self {
            Release::V1_2_1 => "1.2.0",
            Release::V1_3_9 => "1.3.9",
            Release::V2_0_9 => "2.0.9",
            Release::V3_1_9 => "3.1.9",
            Release::V3_2_2 | Release::Dev => "3.3.0",
            Release::V3_3_2 => "3.3.2",
            Release::V3_4_0 => "3.4.0",
        }
    }
}

/// Whether an exclusive end release lies after `r` (none: still there).
fn until_after(until: Option<Release>, r: Release) -> bool {
    match until {
        None => true,
        Some(u) => r < u,
    }
}

/// A column type, rendered per dialect by [`Ty::sql`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// The `int` key: AUTO_INCREMENT on MySQL, `DEFAULT nextval('<table>_id_sequence')` on PostgreSQL.
    Serial,
    /// The same with a `bigint` key.
    BigSerial,
    Int,
    BigInt,
    /// A state, flag or enum code: `tinyint` on MySQL, `int` on PostgreSQL.
    Code,
    Varchar(u16),
    /// `varchar` without a length (DS's PostgreSQL files); a column of this
    /// type names its MySQL type with `on_mysql`.
    VarcharAny,
    /// `text` (DS uses `longtext` for some on MySQL; the same to every reader here).
    Text,
    /// `datetime` on MySQL, `timestamp` (without time zone) on PostgreSQL.
    Timestamp,
}

impl Ty {
    fn sql(self, kind: SimKind) -> String {
        match (self, kind) {
            (Ty::Serial | Ty::Int, _) => "int".into(),
            (Ty::BigSerial | Ty::BigInt, _) => "bigint".into(),
            (Ty::Code, SimKind::MySql) => "tinyint".into(),
            (Ty::Code, SimKind::Postgres) => "int".into(),
            (Ty::Varchar(n), _) => format!("varchar({n})"),
            (Ty::VarcharAny, SimKind::Postgres) => "varchar".into(),
            // never described without `on_mysql`; a bounded stand-in
            (Ty::VarcharAny, SimKind::MySql) => "varchar(255)".into(),
            (Ty::Text, _) => "text".into(),
            (Ty::Timestamp, SimKind::MySql) => "datetime".into(),
            (Ty::Timestamp, SimKind::Postgres) => "timestamp".into(),
        }
    }

    pub fn is_serial(self) -> bool {
        matches!(self, Ty::Serial | Ty::BigSerial)
    }
}

/// Where a column is NOT NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotNull {
    No,
    Yes,
    /// DS's MySQL file declares it NOT NULL, its PostgreSQL file does not.
    MySqlOnly,
}

/// A column default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    Int(i64),
    /// The current time.
    Now,
}

impl DefaultValue {
    fn sql(self) -> String {
        match self {
            DefaultValue::Int(i) => i.to_string(),
            DefaultValue::Now => "CURRENT_TIMESTAMP".into(),
        }
    }
}

/// One column, from release `since` (inclusive) to `until` (exclusive).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub ty: Ty,
    /// The type on MySQL, where DS's two files disagree.
    pub mysql_ty: Option<Ty>,
    pub not_null: NotNull,
    pub default: Option<DefaultValue>,
    /// The default exists on MySQL only (DS's PostgreSQL file has none).
    pub default_mysql_only: bool,
    pub since: Release,
    pub until: Option<Release>,
    /// The primary key without a generated value (DS assigns it).
    pub primary: bool,
}

const fn c(name: &'static str, ty: Ty) -> Column {
    Column {
        name,
        ty,
        mysql_ty: None,
        not_null: NotNull::No,
        default: None,
        default_mysql_only: false,
        since: Release::V1_2_1,
        until: None,
        primary: false,
    }
}

impl Column {
    const fn since(self, r: Release) -> Column {
        Column { since: r, ..self }
    }
    const fn until(self, r: Release) -> Column {
        Column {
            until: Some(r),
            ..self
        }
    }
    const fn not_null(self) -> Column {
        Column {
            not_null: NotNull::Yes,
            ..self
        }
    }
    const fn not_null_on_mysql(self) -> Column {
        Column {
            not_null: NotNull::MySqlOnly,
            ..self
        }
    }
    const fn default_int(self, i: i64) -> Column {
        Column {
            default: Some(DefaultValue::Int(i)),
            ..self
        }
    }
    const fn default_now(self) -> Column {
        Column {
            default: Some(DefaultValue::Now),
            ..self
        }
    }
    const fn default_int_on_mysql(self, i: i64) -> Column {
        Column {
            default: Some(DefaultValue::Int(i)),
            default_mysql_only: true,
            ..self
        }
    }
    const fn on_mysql(self, ty: Ty) -> Column {
        Column {
            mysql_ty: Some(ty),
            ..self
        }
    }
    const fn primary_key(self) -> Column {
        Column {
            primary: true,
            not_null: NotNull::Yes,
            ..self
        }
    }

    /// Whether it is the table's primary key (generated or not).
    pub fn is_key(&self) -> bool {
        self.ty.is_serial() || self.primary
    }

    pub fn exists_in(&self, r: Release) -> bool {
        self.since <= r && until_after(self.until, r)
    }

    pub fn ty_on(&self, kind: SimKind) -> Ty {
        match kind {
            SimKind::MySql => self.mysql_ty.unwrap_or(self.ty),
            SimKind::Postgres => self.ty,
        }
    }

    pub fn not_null_on(&self, kind: SimKind) -> bool {
        self.is_key()
            || match self.not_null {
                NotNull::No => false,
                NotNull::Yes => true,
                NotNull::MySqlOnly => kind == SimKind::MySql,
            }
    }

    pub fn default_on(&self, kind: SimKind) -> Option<DefaultValue> {
        if self.default_mysql_only && kind != SimKind::MySql {
            None
        } else {
            self.default
        }
    }
}

/// One table, from release `since` (inclusive) to `until` (exclusive).
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    pub since: Release,
    pub until: Option<Release>,
    pub columns: &'static [Column],
    /// The column with a unique key of its own (the registry's keys).
    pub unique: Option<&'static str>,
    /// A table of one database only (3.1's MySQL registry).
    pub only_on: Option<SimKind>,
    /// From which release DS's main schema file carries it: `V1_2_1` for
    /// the main tables; a registry table before this release exists only in
    /// the registry plugin's own file.
    pub main_since: Option<Release>,
}

impl Table {
    pub fn exists_in(&self, r: Release) -> bool {
        self.since <= r && until_after(self.until, r)
    }

    /// Whether it exists on release `r` of database `kind`.
    pub fn exists_on(&self, kind: SimKind, r: Release) -> bool {
        self.exists_in(r) && self.only_on.is_none_or(|k| k == kind)
    }

    /// Whether DS's main schema file of release `r` creates it.
    pub fn in_main_schema(&self, r: Release) -> bool {
        self.exists_in(r) && self.main_since.is_some_and(|m| m <= r)
    }

    /// The table's columns on release `r`.
    pub fn columns_in(&self, r: Release) -> impl Iterator<Item = &'static Column> + '_ {
        self.columns.iter().filter(move |c| c.exists_in(r))
    }
}

use Release::*;
use Ty::*;

/// `t_ds_task_instance` (§2.1; §8 for 3.3.x/3.4.x).
const TASK_INSTANCE: &[Column] = &[
    c("id", Serial),
    c("name", Varchar(255)),
    c("task_type", Varchar(64)).until(V2_0_9),
    // 2.0+: varchar(50) NOT NULL in the MySQL file, nullable in the PostgreSQL one
    c("task_type", Varchar(50))
        .since(V2_0_9)
        .not_null_on_mysql(),
    // 2.0+: tasks come from versioned definitions
    c("task_code", BigInt).since(V2_0_9).not_null(),
    c("task_definition_version", Int)
        .since(V2_0_9)
        .until(V3_2_2)
        .default_int_on_mysql(0),
    c("task_definition_version", Int)
        .since(V3_2_2)
        .not_null()
        .default_int(1),
    // ≤ 1.3: the definition is referenced by id
    c("process_definition_id", Int).until(V2_0_9),
    // the workflow foreign key, renamed with the table in 3.3 (dev)
    c("process_instance_id", Int).until(Dev),
    c("workflow_instance_id", Int).since(Dev),
    c("project_code", BigInt).since(V3_2_2),
    c("state", Code),
    c("submit_time", Timestamp),
    c("start_time", Timestamp),
    c("end_time", Timestamp),
    // 1.2: the worker's IP only; 1.3+: ip:port
    c("host", Varchar(45)).until(V1_3_9),
    c("host", Varchar(135)).since(V1_3_9),
    // 0 not available, 1 available (the current attempt)
    c("flag", Code).default_int(1),
    // 1.2: worker group by id (-1 = any worker), resolved through t_ds_worker_group
    c("worker_group_id", Int).until(V1_3_9).default_int(-1),
    c("worker_group", Varchar(64)).since(V1_3_9).until(V3_2_2),
    c("worker_group", Varchar(255)).since(V3_2_2),
    // 3.0/3.1 additions that line detection reads
    c("task_execute_type", Int).since(V3_1_9).default_int(0),
    c("task_group_id", Int).since(V3_1_9),
    // 3.2.x and the pre-release dev only: 3.3.0 final drops the cache columns,
    // 3.3.1 drops test_flag
    c("is_cache", Code)
        .since(V3_2_2)
        .until(V3_3_2)
        .default_int(0),
    c("cache_key", Varchar(200)).since(V3_2_2).until(V3_3_2),
    c("test_flag", Code).since(V3_2_2).until(V3_3_2),
];

/// `t_ds_process_instance` (§2.2), up to 3.2.
const PROCESS_INSTANCE: &[Column] = &[
    c("id", Serial),
    c("name", Varchar(255)),
    c("process_definition_id", Int).until(V2_0_9),
    c("process_definition_code", BigInt)
        .since(V2_0_9)
        .not_null_on_mysql(),
    c("process_definition_version", Int)
        .since(V2_0_9)
        .until(V3_2_2)
        .default_int_on_mysql(0),
    c("process_definition_version", Int)
        .since(V3_2_2)
        .not_null()
        .default_int(1),
    c("project_code", BigInt).since(V3_2_2),
    c("state", Code),
    c("start_time", Timestamp),
    c("end_time", Timestamp),
    c("run_times", Int),
    // the owning master; 'NULL' after DS's own master failover
    c("host", Varchar(45)).until(V1_3_9),
    c("host", Varchar(135)).since(V1_3_9),
    c("command_param", Text),
    c("flag", Code).default_int(1),
    c("executor_id", Int).not_null(),
    c("process_instance_priority", Int).until(V3_1_9),
    c("process_instance_priority", Int)
        .since(V3_1_9)
        .default_int(2),
    c("restart_time", Timestamp).since(V2_0_9),
    // 3.2 replaces tenant_id with tenant_code
    c("tenant_id", Int).until(V3_2_2).not_null().default_int(-1),
    c("test_flag", Code).since(V3_2_2),
];

/// `t_ds_workflow_instance` (§2.2 dev, §8), 3.3 on.
const WORKFLOW_INSTANCE: &[Column] = &[
    c("id", Serial),
    c("name", Varchar(255)),
    c("workflow_definition_code", BigInt).not_null_on_mysql(),
    c("workflow_definition_version", Int)
        .not_null()
        .default_int(1),
    c("project_code", BigInt),
    c("state", Code),
    c("start_time", Timestamp),
    c("end_time", Timestamp),
    c("run_times", Int),
    c("host", Varchar(135)),
    c("command_param", Text),
    c("flag", Code).default_int(1),
    c("executor_id", Int).not_null(),
    c("workflow_instance_priority", Int).default_int(2),
    c("restart_time", Timestamp),
    // dropped by 3.3.1
    c("test_flag", Code).until(V3_3_2),
];

/// `t_ds_command` (§2.3, §5).
const COMMAND: &[Column] = &[
    c("id", Serial),
    c("command_type", Code),
    // ≤ 1.3: no instance column, the instance id travels in command_param
    c("process_definition_id", Int).until(V2_0_9),
    c("process_definition_code", BigInt)
        .since(V2_0_9)
        .until(Dev)
        .not_null(),
    c("process_definition_version", Int)
        .since(V2_0_9)
        .until(Dev)
        .default_int(0),
    c("process_instance_id", Int)
        .since(V2_0_9)
        .until(Dev)
        .default_int(0),
    c("workflow_definition_code", BigInt).since(Dev).not_null(),
    c("workflow_definition_version", Int)
        .since(Dev)
        .default_int(0),
    c("workflow_instance_id", Int).since(Dev).default_int(0),
    c("command_param", Text),
    c("task_depend_type", Code),
    c("failure_strategy", Code).default_int(0),
    c("start_time", Timestamp),
    c("executor_id", Int),
    c("update_time", Timestamp),
    c("process_instance_priority", Int).until(V3_1_9),
    c("process_instance_priority", Int)
        .since(V3_1_9)
        .until(Dev)
        .default_int(2),
    c("workflow_instance_priority", Int)
        .since(Dev)
        .default_int(2),
    // 1.2's Command.workerGroupId
    c("worker_group_id", Int).until(V1_3_9).default_int(-1),
    c("dry_run", Code).since(V2_0_9).default_int(0),
    c("test_flag", Code).since(V3_2_2).until(V3_3_2),
];

/// `t_ds_schedules`: ds-reaper reads a scheduled definition's `timezone_id`
/// for the recovery command of 3.0–3.2.
const SCHEDULES: &[Column] = &[
    c("id", Serial),
    c("process_definition_id", Int).until(V2_0_9).not_null(),
    c("process_definition_code", BigInt)
        .since(V2_0_9)
        .until(Dev)
        .not_null(),
    c("workflow_definition_code", BigInt).since(Dev).not_null(),
    c("start_time", Timestamp).not_null(),
    c("end_time", Timestamp).not_null(),
    c("timezone_id", Varchar(40)).since(V2_0_9),
    c("crontab", Varchar(256)).until(V1_3_9).not_null(),
    c("crontab", Varchar(255)).since(V1_3_9).not_null(),
    c("failure_strategy", Code).not_null(),
    c("user_id", Int).not_null(),
    c("release_state", Code).not_null(),
    c("warning_type", Code).not_null(),
    c("create_time", Timestamp).not_null(),
    c("update_time", Timestamp).not_null(),
];

/// `t_ds_worker_group`: 1.2 resolves a task's `worker_group_id` to its name.
const WORKER_GROUP: &[Column] = &[
    c("id", BigSerial),
    c("name", Varchar(256)).until(V1_3_9),
    c("name", Varchar(255)).since(V1_3_9).not_null(),
];

/// `t_ds_version`: read and logged, never trusted (§8).
const VERSION: &[Column] = &[
    c("id", Serial),
    c("version", Varchar(200)).until(V3_2_2).not_null(),
    c("version", Varchar(63)).since(V3_2_2).not_null(),
];

/// `t_ds_serial_command`, new in 3.4.0: its presence tells 3.4 from 3.3 (§8).
const SERIAL_COMMAND: &[Column] = &[
    c("id", Serial),
    // int in DS's MySQL file, bigint in its PostgreSQL file
    c("workflow_definition_code", BigInt)
        .on_mysql(Int)
        .not_null(),
    c("workflow_definition_version", Int).not_null(),
    c("workflow_instance_id", BigInt).not_null(),
    c("state", Code).not_null().default_int(0),
    c("command", Text),
    c("create_time", Timestamp).not_null().default_now(),
    c("update_time", Timestamp).not_null().default_now(),
];

const fn t(name: &'static str, columns: &'static [Column]) -> Table {
    Table {
        name,
        since: V1_2_1,
        until: None,
        columns,
        unique: None,
        only_on: None,
        main_since: Some(V1_2_1),
    }
}

// ------------------------------------------------------------ registry tables
//
// Reference §3.5: 3.1's MySQL registry plugin (`t_ds_mysql_registry_*`, a
// MySQL file only), 3.2's JDBC registry plugin (`t_ds_jdbc_registry_*` with
// terms), and from dev (3.3) on the JDBC registry with client ids, client
// heartbeats and change events, also part of DS's main schema. Every column
// is NOT NULL; the times default to the current time; keys are bigint
// AUTO_INCREMENT on MySQL, `serial` (3.2) or `bigserial` (dev) on
// PostgreSQL, whose files give the text columns no length.

/// `t_ds_mysql_registry_data` (3.1): `type` 1 ephemeral, 2 persistent;
/// ephemeral rows live while `last_term` (epoch ms) is refreshed.
const MYSQL_REGISTRY_DATA: &[Column] = &[
    c("id", BigSerial),
    c("key", Varchar(256)).not_null(),
    c("data", Text).not_null(),
    c("type", Code).not_null(),
    c("last_term", BigInt).not_null(),
    c("last_update_time", Timestamp).not_null().default_now(),
    c("create_time", Timestamp).not_null().default_now(),
];

/// `t_ds_mysql_registry_lock` (3.1): `lock_owner` is `ip_processId`.
const MYSQL_REGISTRY_LOCK: &[Column] = &[
    c("id", BigSerial),
    c("key", Varchar(256)).not_null(),
    c("lock_owner", Varchar(256)).not_null(),
    c("last_term", BigInt).not_null(),
    c("last_update_time", Timestamp).not_null().default_now(),
    c("create_time", Timestamp).not_null().default_now(),
];

/// `t_ds_jdbc_registry_data` (3.2 on): 3.2 keeps rows alive by `last_term`
/// with a numeric `data_type`; dev names the type (`EPHEMERAL`,
/// `PERSISTENT`) and ties each row to a client (`client_id`).
const JDBC_REGISTRY_DATA: &[Column] = &[
    c("id", Serial).on_mysql(BigSerial).until(Dev),
    c("id", BigSerial).since(Dev),
    c("data_key", VarcharAny).on_mysql(Varchar(256)).not_null(),
    c("data_value", Text).not_null(),
    c("data_type", Code).until(Dev).not_null(),
    c("data_type", VarcharAny)
        .on_mysql(Varchar(64))
        .since(Dev)
        .not_null(),
    c("last_term", BigInt).until(Dev).not_null(),
    c("client_id", BigInt).since(Dev).not_null(),
    c("last_update_time", Timestamp).not_null().default_now(),
    c("create_time", Timestamp).not_null().default_now(),
];

/// `t_ds_jdbc_registry_lock` (3.2 on); dev drops the term and update time
/// for the owning client.
const JDBC_REGISTRY_LOCK: &[Column] = &[
    c("id", Serial).on_mysql(BigSerial).until(Dev),
    c("id", BigSerial).since(Dev),
    c("lock_key", VarcharAny).on_mysql(Varchar(256)).not_null(),
    c("lock_owner", VarcharAny)
        .on_mysql(Varchar(256))
        .not_null(),
    c("last_term", BigInt).until(Dev).not_null(),
    c("client_id", BigInt).since(Dev).not_null(),
    c("last_update_time", Timestamp)
        .until(Dev)
        .not_null()
        .default_now(),
    c("create_time", Timestamp).not_null().default_now(),
];

/// `t_ds_jdbc_registry_client_heartbeat` (dev on): one row per client, its
/// id the client id DS generates; a client is dead when `now_ms −
/// last_heartbeat_time` exceeds `connection_config`'s `sessionTimeout`.
const JDBC_REGISTRY_CLIENT_HEARTBEAT: &[Column] = &[
    c("id", BigInt).primary_key(),
    c("client_name", VarcharAny)
        .on_mysql(Varchar(256))
        .not_null(),
    c("last_heartbeat_time", BigInt).not_null(),
    c("connection_config", Text).not_null(),
    c("create_time", Timestamp).not_null().default_now(),
];

/// `t_ds_jdbc_registry_data_change_event` (dev on): ADD, UPDATE, DELETE of a
/// data row, the row as JSON.
const JDBC_REGISTRY_DATA_CHANGE_EVENT: &[Column] = &[
    c("id", BigSerial),
    c("event_type", VarcharAny).on_mysql(Varchar(64)).not_null(),
    c("jdbc_registry_data", Text).not_null(),
    c("create_time", Timestamp).not_null().default_now(),
];

const fn registry_table(
    name: &'static str,
    columns: &'static [Column],
    since: Release,
    until: Option<Release>,
    unique: Option<&'static str>,
) -> Table {
    Table {
        name,
        since,
        until,
        columns,
        unique,
        only_on: None,
        // DS's main schema carries the JDBC registry from dev on
        main_since: Some(Dev),
    }
}

/// The database registry's tables, on every release that has one.
pub const REGISTRY_TABLES: &[Table] = &[
    Table {
        only_on: Some(SimKind::MySql),
        main_since: None,
        ..registry_table(
            "t_ds_mysql_registry_data",
            MYSQL_REGISTRY_DATA,
            V3_1_9,
            Some(V3_2_2),
            Some("key"),
        )
    },
    Table {
        only_on: Some(SimKind::MySql),
        main_since: None,
        ..registry_table(
            "t_ds_mysql_registry_lock",
            MYSQL_REGISTRY_LOCK,
            V3_1_9,
            Some(V3_2_2),
            Some("key"),
        )
    },
    registry_table(
        "t_ds_jdbc_registry_data",
        JDBC_REGISTRY_DATA,
        V3_2_2,
        None,
        Some("data_key"),
    ),
    registry_table(
        "t_ds_jdbc_registry_lock",
        JDBC_REGISTRY_LOCK,
        V3_2_2,
        None,
        Some("lock_key"),
    ),
    registry_table(
        "t_ds_jdbc_registry_client_heartbeat",
        JDBC_REGISTRY_CLIENT_HEARTBEAT,
        Dev,
        None,
        None,
    ),
    registry_table(
        "t_ds_jdbc_registry_data_change_event",
        JDBC_REGISTRY_DATA_CHANGE_EVENT,
        Dev,
        None,
        None,
    ),
];

/// The registry tables of release `r` on `kind` (the plugin's own file; from
/// dev on the same tables as in the main schema). Empty where the line has
/// no database registry on that database.
pub fn registry_tables(kind: SimKind, r: Release) -> impl Iterator<Item = &'static Table> {
    REGISTRY_TABLES.iter().filter(move |t| t.exists_on(kind, r))
}

/// The statements that create the registry tables of release `r` on `kind`.
pub fn registry_ddl(kind: SimKind, r: Release) -> Vec<String> {
    let mut out = Vec::new();
    for t in registry_tables(kind, r) {
        create_table(&mut out, kind, r, t);
    }
    out
}

/// Every described table, on every release.
pub const TABLES: &[Table] = &[
    t("t_ds_task_instance", TASK_INSTANCE),
    Table {
        until: Some(Dev),
        ..t("t_ds_process_instance", PROCESS_INSTANCE)
    },
    Table {
        since: Dev,
        ..t("t_ds_workflow_instance", WORKFLOW_INSTANCE)
    },
    t("t_ds_command", COMMAND),
    t("t_ds_schedules", SCHEDULES),
    t("t_ds_worker_group", WORKER_GROUP),
    t("t_ds_version", VERSION),
    Table {
        since: V3_4_0,
        ..t("t_ds_serial_command", SERIAL_COMMAND)
    },
];

/// The described tables of DS's main schema on release `r` (from dev on,
/// the JDBC registry's too).
pub fn tables(r: Release) -> impl Iterator<Item = &'static Table> {
    TABLES
        .iter()
        .chain(REGISTRY_TABLES)
        .filter(move |t| t.in_main_schema(r))
}

/// Every described table, main and registry.
pub fn all_tables() -> impl Iterator<Item = &'static Table> {
    TABLES.iter().chain(REGISTRY_TABLES)
}

/// A column name as `kind` needs it written (MySQL reserves `key`).
fn ident(kind: SimKind, name: &str) -> String {
    match kind {
        SimKind::MySql if name.eq_ignore_ascii_case("key") => format!("`{name}`"),
        _ => name.to_string(),
    }
}

/// The statements that create the described tables of release `r` on `kind`
/// and write its `t_ds_version` row, in order.
pub fn ddl(kind: SimKind, r: Release) -> Vec<String> {
    let mut out = Vec::new();
    for t in tables(r).filter(|t| t.only_on.is_none_or(|k| k == kind)) {
        create_table(&mut out, kind, r, t);
    }
    out.push(format!(
        "INSERT INTO t_ds_version (version) VALUES ('{}')",
        r.version_row()
    ));
    out
}

/// `CREATE TABLE` for `t` on release `r` (after its sequence on PostgreSQL).
fn create_table(out: &mut Vec<String>, kind: SimKind, r: Release, t: &Table) {
    let mut defs = Vec::new();
    for col in t.columns_in(r) {
        let ty = col.ty_on(kind);
        let mut d = format!("{} {}", ident(kind, col.name), ty.sql(kind));
        if col.not_null_on(kind) {
            d.push_str(" NOT NULL");
        }
        if ty.is_serial() {
            match kind {
                SimKind::MySql => d.push_str(" AUTO_INCREMENT"),
                SimKind::Postgres => {
                    let seq = format!("{}_{}_sequence", t.name, col.name);
                    out.push(format!("CREATE SEQUENCE {seq}"));
                    d.push_str(&format!(" DEFAULT nextval('{seq}')"));
                }
            }
        } else if let Some(v) = col.default_on(kind) {
            d.push_str(&format!(" DEFAULT {}", v.sql()));
        }
        defs.push(d);
    }
    if let Some(k) = t.columns_in(r).find(|c| c.is_key()) {
        defs.push(format!("PRIMARY KEY ({})", ident(kind, k.name)));
    }
    if let Some(u) = t.unique {
        defs.push(format!("UNIQUE ({})", ident(kind, u)));
    }
    out.push(format!(
        "CREATE TABLE {} (\n  {}\n)",
        t.name,
        defs.join(",\n  ")
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn no_column_twice_on_a_release() {
        for r in Release::ALL {
            let registry = [SimKind::MySql, SimKind::Postgres]
                .into_iter()
                .flat_map(|k| registry_tables(k, r));
            for t in tables(r).chain(registry) {
                let mut seen = BTreeSet::new();
                for c in t.columns_in(r) {
                    assert!(
                        seen.insert(c.name),
                        "{} {}.{} twice",
                        r.fixture(),
                        t.name,
                        c.name
                    );
                }
                assert_eq!(
                    t.columns_in(r).filter(|c| c.is_key()).count(),
                    1,
                    "{} {}: one key",
                    r.fixture(),
                    t.name
                );
            }
        }
    }

    #[test]
    fn line_markers() {
        let has = |r: Release, table: &str, col: &str| {
            tables(r)
                .find(|t| t.name == table)
                .is_some_and(|t| t.columns_in(r).any(|c| c.name == col))
        };
        let task = "t_ds_task_instance";
        assert!(has(V1_2_1, task, "worker_group_id") && !has(V1_3_9, task, "worker_group_id"));
        assert!(!has(V1_3_9, task, "task_code") && has(V2_0_9, task, "task_code"));
        assert!(has(V3_1_9, task, "task_execute_type") && !has(V2_0_9, task, "task_group_id"));
        assert!(has(V3_2_2, task, "project_code") && !has(V3_1_9, task, "project_code"));
        assert!(has(Dev, task, "is_cache") && !has(V3_3_2, task, "is_cache"));
        assert!(has(Dev, task, "test_flag") && !has(V3_3_2, task, "test_flag"));
        assert!(has(V3_2_2, task, "process_instance_id") && has(Dev, task, "workflow_instance_id"));
        assert!(tables(V3_4_0).any(|t| t.name == "t_ds_serial_command"));
        assert!(!tables(V3_3_2).any(|t| t.name == "t_ds_serial_command"));
        assert!(!tables(Dev).any(|t| t.name == "t_ds_process_instance"));
    }

    #[test]
    fn ddl_per_dialect() {
        let my = ddl(SimKind::MySql, V3_2_2).join(";\n");
        assert!(my.contains("id int NOT NULL AUTO_INCREMENT"));
        assert!(my.contains("state tinyint"));
        assert!(my.contains("submit_time datetime"));
        assert!(my.contains("task_type varchar(50) NOT NULL"));
        assert!(my.ends_with("INSERT INTO t_ds_version (version) VALUES ('3.3.0')"));
        let pg = ddl(SimKind::Postgres, V3_2_2).join(";\n");
        assert!(pg.contains("CREATE SEQUENCE t_ds_task_instance_id_sequence"));
        assert!(pg.contains("id int NOT NULL DEFAULT nextval('t_ds_task_instance_id_sequence')"));
        assert!(pg.contains("task_type varchar(50),"));
        assert!(pg.contains("state int"));
        assert!(pg.contains("submit_time timestamp"));
    }

    #[test]
    fn registry_tables_per_line_and_dialect() {
        let names = |k, r| registry_tables(k, r).map(|t| t.name).collect::<Vec<_>>();
        assert!(names(SimKind::MySql, V3_1_9).contains(&"t_ds_mysql_registry_data"));
        assert!(
            names(SimKind::Postgres, V3_1_9).is_empty(),
            "3.1's registry is MySQL only"
        );
        assert_eq!(
            names(SimKind::Postgres, V3_2_2),
            ["t_ds_jdbc_registry_data", "t_ds_jdbc_registry_lock"]
        );
        assert_eq!(names(SimKind::MySql, Dev).len(), 4);
        assert!(names(SimKind::MySql, V2_0_9).is_empty());
        // in DS's main schema from dev on only
        assert!(!tables(V3_2_2).any(|t| t.name == "t_ds_jdbc_registry_data"));
        assert!(tables(Dev).any(|t| t.name == "t_ds_jdbc_registry_client_heartbeat"));
        assert!(tables(V3_4_0).any(|t| t.name == "t_ds_jdbc_registry_data"));

        let my = registry_ddl(SimKind::MySql, V3_1_9).join(";\n");
        assert!(my.contains("`key` varchar(256) NOT NULL"), "{my}");
        assert!(my.contains("UNIQUE (`key`)"), "{my}");
        assert!(my.contains("id bigint NOT NULL AUTO_INCREMENT"), "{my}");
        let pg = registry_ddl(SimKind::Postgres, V3_2_2).join(";\n");
        assert!(pg.contains("data_key varchar NOT NULL"), "{pg}");
        assert!(pg.contains("data_type int NOT NULL"), "{pg}");
        assert!(pg.contains("id int NOT NULL DEFAULT nextval("), "{pg}");
        assert!(pg.contains("UNIQUE (data_key)"), "{pg}");
        let dev = registry_ddl(SimKind::Postgres, Dev).join(";\n");
        assert!(
            dev.contains("id bigint NOT NULL,\n  client_name varchar NOT NULL"),
            "{dev}"
        );
        assert!(dev.contains("PRIMARY KEY (id)"), "{dev}");
        assert!(!dev.contains("last_term"), "{dev}");
    }
}
