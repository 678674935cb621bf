//! Simulated DS servers on DS's database registry (reference §3.5): rows,
//! terms and client heartbeats written as DS's own registry plugins write
//! them, per version. Verified against DS's source:
//!
//! - **3.1** (`dolphinscheduler-registry-mysql`, tag 3.1.9): `MysqlRegistry.put(key, value,
//!   true)` → `MysqlOperator.insertOrUpdateEphemeralData` (update `data`, `last_term` by
//!   id, or insert `type = 1`); `EphemeralDateManager`'s task, every
//!   `term-refresh-interval`, sets `last_term = now` on its rows and then
//!   `clearExpireEphemeralDate` deletes every ephemeral row with `last_term <
//!   now − interval × term-expire-times`. `RegistryClient.initNodes` puts the
//!   persistent `/nodes/master`, `/nodes/worker`. A clean stop: a master's
//!   `deregister` deletes its key; a worker deletes nothing
//!   (`EphemeralDateManager.close` clears its id set before iterating it), so its
//!   row lingers until some live server's clean-up.
//! - **3.2** (`dolphinscheduler-registry-jdbc`, tag 3.2.2): the same rules on
//!   `t_ds_jdbc_registry_data`; a clean stop deletes the server's rows by id
//!   (`EphemeralDateManager.close`), a master's key first (`deregister`).
//! - **3.3** (dev): a client row in `t_ds_jdbc_registry_client_heartbeat`
//!   (`JdbcRegistryServer.registerClient`, `connection_config`
//!   `{"sessionTimeout":ms}`), refreshed every `heartbeat-refresh-interval`
//!   by `refreshClientsHeartbeat` — which writes the previous refresh's time
//!   (it updates the DTO before setting its new time), as here; data rows
//!   carry the `client_id`, and every put or delete by key also appends to
//!   `t_ds_jdbc_registry_data_change_event`. Every live server purges dead
//!   clients (`now − last_heartbeat_time > sessionTimeout`) — their
//!   EPHEMERAL rows, locks and heartbeat row, without change events. A clean
//!   stop purges the server's own client (`deregisterClient`), a master's key
//!   deleted by key first.
//!
//! A crash is a server that stops refreshing: its rows stay as they were.
//! The tables come from `<schema dir>/jdbc-registry/<fixture>/` (3.3.2 and
//! 3.4.0 already carry dev's in their main schema), or — for a database
//! created from ds-sim's description — from that description
//! ([`crate::schema::registry_ddl`]).

use crate::db::{schema_dir, server_url, SchemaSource, SimDb, SimKind, SimPool};
use crate::schema::{self, Release};
use crate::zk::{encode_heartbeat_for, node_paths, sim_pid};
use anyhow::{bail, Context, Result};
use chrono::{NaiveDateTime, Utc};
use reaper_core::{DsLine, NodeKind, Zone};
use sqlx::{Executor, MySqlPool, PgPool, Row};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// The registry tables' shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tables {
    /// 3.1: `t_ds_mysql_registry_data` (MySQL only).
    MySql31,
    /// 3.2: `t_ds_jdbc_registry_data` with `last_term`.
    Term32,
    /// 3.3+: `t_ds_jdbc_registry_data` with `client_id`, and the client heartbeats.
    Client33,
}

impl Tables {
    pub fn for_line(line: DsLine) -> Option<Tables> {
        match line {
            DsLine::V3_1_0 | DsLine::V3_1 => Some(Tables::MySql31),
            DsLine::V3_2 => Some(Tables::Term32),
            DsLine::V3_3 => Some(Tables::Client33),
            _ => None,
        }
    }

    fn data(self) -> &'static str {
        match self {
            Tables::MySql31 => "t_ds_mysql_registry_data",
            _ => "t_ds_jdbc_registry_data",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Tables::MySql31 => "`key`",
            _ => "data_key",
        }
    }
}

/// The fixture directory under `jdbc-registry/` for a schema fixture.
pub fn registry_fixture(fixture: &str) -> &'static str {
    match fixture {
        "3.1.9" => "3.1.9",
        "3.2.2" => "3.2.2",
        _ => "dev",
    }
}

/// DS's registry plugin tables for `fixture` (`3.1.9`, `3.2.2`, `dev`).
pub fn registry_schema_file(kind: SimKind, fixture: &str) -> PathBuf {
    schema_dir()
        .join("jdbc-registry")
        .join(registry_fixture(fixture))
        .join(match kind {
            SimKind::MySql => "mysql.sql",
            SimKind::Postgres => "postgresql.sql",
        })
}

/// A value bound to a statement.
#[derive(Debug, Clone)]
enum V {
    I(i64),
    S(String),
    T(NaiveDateTime),
}

/// Where the registry tables are, and how to talk to them.
#[derive(Clone)]
pub struct RegistryDb {
    pub kind: SimKind,
    pub tables: Tables,
    pool: SimPool,
    zone: Zone,
}

impl RegistryDb {
    /// `?` placeholders become `$n` on PostgreSQL.
    fn sql(&self, sql: &str) -> String {
        match self.kind {
            SimKind::MySql => sql.to_string(),
            SimKind::Postgres => {
                let mut out = String::with_capacity(sql.len() + 8);
                let mut n = 0;
                for c in sql.chars() {
                    if c == '?' {
                        n += 1;
                        out.push_str(&format!("${n}"));
                    } else {
                        out.push(c);
                    }
                }
                out
            }
        }
    }

    async fn exec(&self, sql: &str, args: Vec<V>) -> Result<u64> {
        let sql = self.sql(sql);
        macro_rules! bind_all {
            ($q:expr) => {{
                let mut q = $q;
                for v in args {
                    q = match v {
                        V::I(x) => q.bind(x),
                        V::S(x) => q.bind(x),
                        V::T(x) => q.bind(x),
                    };
                }
                q
            }};
        }
        Ok(match &self.pool {
            SimPool::My(p) => bind_all!(sqlx::query(&sql))
                .execute(p)
                .await?
                .rows_affected(),
            SimPool::Pg(p) => bind_all!(sqlx::query(&sql))
                .execute(p)
                .await?
                .rows_affected(),
        })
    }

    /// Runs an `INSERT` of one row; the id it was given.
    async fn insert(&self, sql: &str, args: Vec<V>) -> Result<i64> {
        let sql = self.sql(sql);
        macro_rules! bind_all {
            ($q:expr) => {{
                let mut q = $q;
                for v in args {
                    q = match v {
                        V::I(x) => q.bind(x),
                        V::S(x) => q.bind(x),
                        V::T(x) => q.bind(x),
                    };
                }
                q
            }};
        }
        match &self.pool {
            SimPool::My(p) => Ok(bind_all!(sqlx::query(&sql))
                .execute(p)
                .await?
                .last_insert_id() as i64),
            SimPool::Pg(p) => {
                let sql = format!("{sql} RETURNING id");
                let r = bind_all!(sqlx::query(&sql)).fetch_one(p).await?;
                Ok(match r.try_get::<i64, _>(0) {
                    Ok(v) => v,
                    Err(_) => i64::from(r.try_get::<i32, _>(0)?),
                })
            }
        }
    }

    /// Rows of `(id, key, text…)` for a query whose first column is an integer
    /// and the rest text (NULL as empty).
    async fn rows(&self, sql: &str, args: Vec<V>, texts: usize) -> Result<Vec<(i64, Vec<String>)>> {
        let sql = self.sql(sql);
        macro_rules! run {
            ($p:expr) => {{
                let mut q = sqlx::query(&sql);
                for v in args {
                    q = match v {
                        V::I(x) => q.bind(x),
                        V::S(x) => q.bind(x),
                        V::T(x) => q.bind(x),
                    };
                }
                let rows = q.fetch_all($p).await?;
                let mut out = Vec::with_capacity(rows.len());
                for r in rows {
                    let id = match r.try_get::<i64, _>(0) {
                        Ok(v) => v,
                        Err(_) => i64::from(r.try_get::<i32, _>(0)?),
                    };
                    let mut t = Vec::with_capacity(texts);
                    for i in 1..=texts {
                        let s = match r.try_get::<Option<String>, _>(i) {
                            Ok(v) => v,
                            Err(_) => r
                                .try_get::<Option<Vec<u8>>, _>(i)?
                                .map(|b| String::from_utf8_lossy(&b).into_owned()),
                        };
                        t.push(s.unwrap_or_default());
                    }
                    out.push((id, t));
                }
                out
            }};
        }
        Ok(match &self.pool {
            SimPool::My(p) => run!(p),
            SimPool::Pg(p) => run!(p),
        })
    }

    fn now_naive(&self) -> NaiveDateTime {
        self.zone.to_naive(Utc::now())
    }

    /// DS's `JSONUtils` date form.
    fn json_time(&self, t: NaiveDateTime) -> String {
        t.format("%Y-%m-%d %H:%M:%S").to_string()
    }

    /// Every row of the data table: `(id, key, data, type)` (type as text).
    pub async fn data_rows(&self) -> Result<Vec<(i64, String, String, String)>> {
        let (k, d, t) = match self.tables {
            Tables::MySql31 => ("`key`", "`data`", "CAST(`type` AS CHAR)"),
            Tables::Term32 => ("data_key", "data_value", "CAST(data_type AS CHAR(8))"),
            Tables::Client33 => ("data_key", "data_value", "data_type"),
        };
        let sql = format!(
            "SELECT id, {k}, {d}, {t} FROM {} ORDER BY id",
            self.tables.data()
        );
        Ok(self
            .rows(&sql, vec![], 3)
            .await?
            .into_iter()
            .map(|(id, mut t)| {
                let ty = t.pop().unwrap_or_default();
                let data = t.pop().unwrap_or_default();
                let key = t.pop().unwrap_or_default();
                (id, key, data, ty.trim().to_string())
            })
            .collect())
    }

    /// Whether a row with this key exists.
    pub async fn has_key(&self, key: &str) -> Result<bool> {
        Ok(self.data_rows().await?.iter().any(|r| r.1 == key))
    }

    /// What any live DS server does on every refresh (3.1/3.2: delete
    /// ephemeral rows whose term is older than `window`; 3.3: purge clients
    /// whose heartbeat is older than their session timeout). Returns the
    /// number of data rows deleted.
    pub async fn purge_dead(&self, window: Duration) -> Result<u64> {
        match self.tables {
            Tables::MySql31 | Tables::Term32 => {
                let term = Utc::now().timestamp_millis() - window.as_millis() as i64;
                let ty = if self.tables == Tables::MySql31 {
                    "`type`"
                } else {
                    "data_type"
                };
                self.exec(
                    &format!(
                        "DELETE FROM {} WHERE last_term < ? AND {ty} = 1",
                        self.tables.data()
                    ),
                    vec![V::I(term)],
                )
                .await
            }
            Tables::Client33 => {
                let now = Utc::now().timestamp_millis();
                let clients = self
                    .rows(
                        "SELECT id, CAST(last_heartbeat_time AS CHAR(32)), connection_config \
                         FROM t_ds_jdbc_registry_client_heartbeat",
                        vec![],
                        2,
                    )
                    .await?;
                let dead: Vec<i64> = clients
                    .into_iter()
                    .filter(|(_, t)| {
                        let last: i64 = t[0].trim().parse().unwrap_or(0);
                        let timeout = serde_json::from_str::<serde_json::Value>(&t[1])
                            .ok()
                            .and_then(|v| v.get("sessionTimeout").and_then(|x| x.as_i64()))
                            .unwrap_or(60_000);
                        now - last > timeout
                    })
                    .map(|(id, _)| id)
                    .collect();
                self.purge_clients(&dead).await
            }
        }
    }

    /// 3.3's `doPurgeJdbcRegistryClientInDB`: EPHEMERAL rows, locks and
    /// heartbeat rows of the clients (no change events).
    async fn purge_clients(&self, ids: &[i64]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let list = ids
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let n = self
            .exec(
                &format!(
                    "DELETE FROM t_ds_jdbc_registry_data WHERE client_id IN ({list}) \
                     AND data_type = 'EPHEMERAL'"
                ),
                vec![],
            )
            .await?;
        self.exec(
            &format!("DELETE FROM t_ds_jdbc_registry_lock WHERE client_id IN ({list})"),
            vec![],
        )
        .await?;
        self.exec(
            &format!("DELETE FROM t_ds_jdbc_registry_client_heartbeat WHERE id IN ({list})"),
            vec![],
        )
        .await?;
        Ok(n)
    }

    /// 3.3: appends a change event as `JdbcRegistryDataManager` does.
    async fn event(&self, kind: &str, id: i64, key: &str, value: &str, client: i64) -> Result<()> {
        let now = self.now_naive();
        let json = serde_json::json!({
            "id": id,
            "dataKey": key,
            "dataValue": value,
            "dataType": "EPHEMERAL",
            "clientId": client,
            "createTime": self.json_time(now),
            "lastUpdateTime": self.json_time(now),
        });
        self.exec(
            "INSERT INTO t_ds_jdbc_registry_data_change_event (event_type, jdbc_registry_data, create_time) \
             VALUES (?, ?, ?)",
            vec![V::S(kind.into()), V::S(json.to_string()), V::T(now)],
        )
        .await?;
        Ok(())
    }

    /// `RegistryClient.remove(key)` as each version does it.
    pub async fn remove_key(&self, key: &str) -> Result<()> {
        match self.tables {
            // MysqlRegistry.delete: ephemeral, then persistent
            Tables::MySql31 => {
                for ty in [1, 2] {
                    self.exec(
                        "DELETE FROM t_ds_mysql_registry_data WHERE `key` = ? AND `type` = ?",
                        vec![V::S(key.into()), V::I(ty)],
                    )
                    .await?;
                }
            }
            Tables::Term32 => {
                self.exec(
                    "DELETE FROM t_ds_jdbc_registry_data WHERE data_key = ?",
                    vec![V::S(key.into())],
                )
                .await?;
            }
            Tables::Client33 => {
                let rows = self
                    .rows(
                        "SELECT id, data_value, CAST(client_id AS CHAR(32)) FROM t_ds_jdbc_registry_data \
                         WHERE data_key = ?",
                        vec![V::S(key.into())],
                        2,
                    )
                    .await?;
                let Some((id, t)) = rows.into_iter().next() else {
                    return Ok(());
                };
                self.exec(
                    "DELETE FROM t_ds_jdbc_registry_data WHERE data_key = ?",
                    vec![V::S(key.into())],
                )
                .await?;
                let client = t[1].trim().parse().unwrap_or(0);
                self.event("DELETE", id, key, &t[0], client).await?;
            }
        }
        Ok(())
    }

    /// `RegistryClient.persistEphemeral(key, value)`: the row's id.
    async fn put_ephemeral(&self, key: &str, value: &str, client: Option<i64>) -> Result<i64> {
        let now_ms = Utc::now().timestamp_millis();
        let now = self.now_naive();
        let k = self.tables.key();
        let found = self
            .rows(
                &format!("SELECT id FROM {} WHERE {k} = ?", self.tables.data()),
                vec![V::S(key.into())],
                0,
            )
            .await?;
        match (self.tables, found.first()) {
            (Tables::MySql31, Some((id, _))) => {
                self.exec(
                    "UPDATE t_ds_mysql_registry_data SET `data` = ?, last_term = ? WHERE id = ?",
                    vec![V::S(value.into()), V::I(now_ms), V::I(*id)],
                )
                .await?;
                Ok(*id)
            }
            (Tables::MySql31, None) => {
                self.insert(
                    "INSERT INTO t_ds_mysql_registry_data (`key`, `data`, `type`, last_term) \
                     VALUES (?, ?, 1, ?)",
                    vec![V::S(key.into()), V::S(value.into()), V::I(now_ms)],
                )
                .await
            }
            (Tables::Term32, Some((id, _))) => {
                self.exec(
                    "UPDATE t_ds_jdbc_registry_data SET data_value = ?, last_update_time = ?, \
                     last_term = ? WHERE id = ?",
                    vec![V::S(value.into()), V::T(now), V::I(now_ms), V::I(*id)],
                )
                .await?;
                Ok(*id)
            }
            (Tables::Term32, None) => {
                self.insert(
                    "INSERT INTO t_ds_jdbc_registry_data \
                     (data_key, data_value, data_type, last_term, last_update_time, create_time) \
                     VALUES (?, ?, 1, ?, ?, ?)",
                    vec![
                        V::S(key.into()),
                        V::S(value.into()),
                        V::I(now_ms),
                        V::T(now),
                        V::T(now),
                    ],
                )
                .await
            }
            (Tables::Client33, found) => {
                let client = client.context("3.3 rows need a client")?;
                match found {
                    Some((id, _)) => {
                        self.exec(
                            "UPDATE t_ds_jdbc_registry_data SET data_value = ?, last_update_time = ? \
                             WHERE id = ?",
                            vec![V::S(value.into()), V::T(now), V::I(*id)],
                        )
                        .await?;
                        self.event("UPDATE", *id, key, value, client).await?;
                        Ok(*id)
                    }
                    None => {
                        let id = self
                            .insert(
                                "INSERT INTO t_ds_jdbc_registry_data \
                                 (data_key, data_value, data_type, client_id, create_time, last_update_time) \
                                 VALUES (?, ?, 'EPHEMERAL', ?, ?, ?)",
                                vec![
                                    V::S(key.into()),
                                    V::S(value.into()),
                                    V::I(client),
                                    V::T(now),
                                    V::T(now),
                                ],
                            )
                            .await?;
                        self.event("ADD", id, key, value, client).await?;
                        Ok(id)
                    }
                }
            }
        }
    }

    /// 3.1's `initNodes`: the persistent parents.
    async fn init_nodes(&self) -> Result<()> {
        if self.tables != Tables::MySql31 {
            return Ok(());
        }
        let now_ms = Utc::now().timestamp_millis();
        for k in ["/nodes/master", "/nodes/worker"] {
            self.exec(
                "INSERT INTO t_ds_mysql_registry_data (`key`, `data`, `type`, last_term) \
                 VALUES (?, '', 2, ?) ON DUPLICATE KEY UPDATE `data` = '', last_term = ?",
                vec![V::S(k.into()), V::I(now_ms), V::I(now_ms)],
            )
            .await?;
        }
        Ok(())
    }

    /// 3.1/3.2's term refresh of `ids`.
    async fn refresh_terms(&self, ids: &[i64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let list = ids
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        self.exec(
            &format!(
                "UPDATE {} SET last_term = ? WHERE id IN ({list})",
                self.tables.data()
            ),
            vec![V::I(Utc::now().timestamp_millis())],
        )
        .await?;
        Ok(())
    }

    /// 3.3: a client's heartbeat row, as `registerClient` writes it.
    async fn register_client(&self, id: i64, name: &str, session_timeout: Duration) -> Result<()> {
        let cfg = serde_json::json!({ "sessionTimeout": session_timeout.as_millis() as i64 });
        self.exec(
            "INSERT INTO t_ds_jdbc_registry_client_heartbeat \
             (id, client_name, last_heartbeat_time, connection_config, create_time) VALUES (?, ?, ?, ?, ?)",
            vec![
                V::I(id),
                V::S(name.into()),
                V::I(Utc::now().timestamp_millis()),
                V::S(cfg.to_string()),
                V::T(self.now_naive()),
            ],
        )
        .await?;
        Ok(())
    }

    /// 3.3: sets the clients' `last_heartbeat_time` to `ms`.
    async fn beat(&self, ids: &[i64], ms: i64) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let list = ids
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        self.exec(
            &format!(
                "UPDATE t_ds_jdbc_registry_client_heartbeat SET last_heartbeat_time = ? WHERE id IN ({list})"
            ),
            vec![V::I(ms)],
        )
        .await?;
        Ok(())
    }

    /// 3.3: sets one client's heartbeat to `ms` (a test's stale client).
    pub async fn set_client_heartbeat(&self, client: i64, ms: i64) -> Result<()> {
        self.beat(&[client], ms).await
    }

    /// 3.1/3.2: sets the rows' `last_term` of `key` to `ms` (a test's stale row).
    pub async fn set_term(&self, key: &str, ms: i64) -> Result<()> {
        self.exec(
            &format!(
                "UPDATE {} SET last_term = ? WHERE {} = ?",
                self.tables.data(),
                self.tables.key()
            ),
            vec![V::I(ms), V::S(key.into())],
        )
        .await?;
        Ok(())
    }
}

/// A lock held the way DS's database registry holds one (3.1.9
/// `MysqlOperator.tryToAcquireLock`, 3.2.2 `JdbcOperator.tryToAcquireLock`):
/// one row per lock key (unique), `lock_owner` `ip_pid[_thread]`, `last_term`
/// the holder's clock, refreshed every term-refresh-interval by
/// `RegistryLockManager`'s task; release deletes the row by id. A waiter
/// writes nothing (it retries the insert), so a row is a holder.
pub struct SimJdbcLock {
    db: RegistryDb,
    id: i64,
    task: Option<JoinHandle<()>>,
}

impl SimJdbcLock {
    /// Inserts the lock row for `lock` (e.g. `/lock/master-failover/10.0.0.5:5678`)
    /// and refreshes its term every `refresh`; fails while another holds it.
    pub async fn hold(db: &SimRegistryDb, lock: &str, refresh: Duration) -> Result<SimJdbcLock> {
        let (table, key) = lock_table(db.tables())?;
        let owner = format!("10.0.0.99_{}", sim_pid());
        let db = db.db.clone();
        let id = db
            .insert(
                &format!("INSERT INTO {table} ({key}, lock_owner, last_term) VALUES (?, ?, ?)"),
                vec![
                    V::S(lock.to_string()),
                    V::S(owner),
                    V::I(Utc::now().timestamp_millis()),
                ],
            )
            .await
            .with_context(|| format!("inserting the lock row of {lock}"))?;
        let refresher = db.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(refresh.max(Duration::from_millis(50)));
            tick.tick().await;
            loop {
                tick.tick().await;
                let sql = format!("UPDATE {table} SET last_term = ? WHERE id = ?");
                let args = vec![V::I(Utc::now().timestamp_millis()), V::I(id)];
                if let Err(e) = refresher.exec(&sql, args).await {
                    tracing::debug!(error = %e, "sim lock term refresh failed");
                }
            }
        });
        Ok(SimJdbcLock {
            db,
            id,
            task: Some(task),
        })
    }

    /// Releases as DS does: deletes the row by id.
    pub async fn release(mut self) -> Result<()> {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        let (table, _) = lock_table(self.db.tables)?;
        self.db
            .exec(
                &format!("DELETE FROM {table} WHERE id = ?"),
                vec![V::I(self.id)],
            )
            .await?;
        Ok(())
    }

    /// The holder dies: its row stays, its term ages.
    pub fn crash(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for SimJdbcLock {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// The lock table and its key column; 3.3's lock rows carry no term and
/// need no guard (SPEC §13), so they are not simulated.
fn lock_table(t: Tables) -> Result<(&'static str, &'static str)> {
    match t {
        Tables::MySql31 => Ok(("t_ds_mysql_registry_lock", "`key`")),
        Tables::Term32 => Ok(("t_ds_jdbc_registry_lock", "lock_key")),
        Tables::Client33 => bail!("3.3's registry locks are not simulated"),
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh id for a 3.3 client (DS: `CodeGenerateUtils.genCode()`, a snowflake-like long).
fn client_code() -> i64 {
    Utc::now().timestamp_millis() * 1000 + i64::from(SEQ.fetch_add(1, Ordering::Relaxed) % 1000)
}

/// A database holding the registry tables: a fresh one of its own, or a [`SimDb`]'s.
pub struct SimRegistryDb {
    pub db: RegistryDb,
    pub fixture: String,
    url: String,
    /// The database was created here and is dropped by [`SimRegistryDb::drop`].
    own: Option<(String, String)>,
}

impl SimRegistryDb {
    /// A fresh database holding only the fixture's registry tables
    /// (`3.1.9` MySQL only, `3.2.2`, `dev`).
    pub async fn create(kind: SimKind, fixture: &str) -> Result<SimRegistryDb> {
        let file = registry_schema_file(kind, fixture);
        let ddl = std::fs::read_to_string(&file)
            .with_context(|| format!("reading registry schema {}", file.display()))?;
        let name = format!(
            "dsr_jdbc_{}_{}_{}_{}",
            registry_fixture(fixture).replace('.', ""),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            Utc::now().timestamp_micros() % 1_000_000_000
        );
        let server = server_url(kind);
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
                sqlx::raw_sql(&ddl)
                    .execute(&p)
                    .await
                    .with_context(|| format!("loading {}", file.display()))?;
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
                sqlx::raw_sql(&ddl)
                    .execute(&p)
                    .await
                    .with_context(|| format!("loading {}", file.display()))?;
                SimPool::Pg(p)
            }
        };
        Ok(SimRegistryDb {
            db: RegistryDb {
                kind,
                tables: tables_of(fixture)?,
                pool,
                zone: Zone::Local,
            },
            fixture: fixture.to_string(),
            url,
            own: Some((server, name)),
        })
    }

    /// The registry tables in a [`SimDb`]'s database. A database created
    /// from ds-sim's description gets the description's registry tables
    /// (from dev on its main tables already include them), so this needs
    /// nothing beyond the repository; one loaded from DS's schema files gets
    /// the registry plugin's file from `jdbc-registry/`, unless its schema
    /// already has them (dev, 3.3.2, 3.4.0).
    pub async fn attach(sim: &SimDb) -> Result<SimRegistryDb> {
        let tables = tables_of(&sim.fixture)?;
        if sim.source == SchemaSource::Described {
            let release = Release::from_fixture(&sim.fixture)
                .with_context(|| format!("ds-sim has no description of {}", sim.fixture))?;
            let main_has_them = schema::tables(release).any(|t| t.name == tables.data());
            if !main_has_them {
                let ddl = schema::registry_ddl(sim.kind, release);
                if ddl.is_empty() {
                    bail!(
                        "DS {} has no database registry on {:?}",
                        sim.fixture,
                        sim.kind
                    );
                }
                for stmt in &ddl {
                    sim.exec(stmt)
                        .await
                        .context("creating the described registry tables")?;
                }
            }
        } else if !sim.has_column("t_ds_jdbc_registry_client_heartbeat", "last_heartbeat_time")
            || tables != Tables::Client33
        {
            let file = registry_schema_file(sim.kind, &sim.fixture);
            let ddl = std::fs::read_to_string(&file)
                .with_context(|| format!("reading registry schema {}", file.display()))?;
            sim.exec(&ddl)
                .await
                .with_context(|| format!("loading {}", file.display()))?;
        }
        Ok(SimRegistryDb {
            db: RegistryDb {
                kind: sim.kind,
                tables,
                pool: sim.pool.clone(),
                zone: Zone::Local,
            },
            fixture: sim.fixture.clone(),
            url: sim.url().to_string(),
            own: None,
        })
    }

    /// The URL of the database (with the server URL's password).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn kind(&self) -> SimKind {
        self.db.kind
    }

    pub fn tables(&self) -> Tables {
        self.db.tables
    }

    /// Runs raw statements.
    pub async fn exec(&self, sql: &str) -> Result<u64> {
        Ok(match &self.db.pool {
            SimPool::My(p) => sqlx::raw_sql(sql).execute(p).await?.rows_affected(),
            SimPool::Pg(p) => sqlx::raw_sql(sql).execute(p).await?.rows_affected(),
        })
    }

    /// Drops the database if it was created here.
    pub async fn drop(self) -> Result<()> {
        let Some((server, name)) = self.own else {
            return Ok(());
        };
        match self.db.pool {
            SimPool::My(p) => {
                p.close().await;
                let admin = MySqlPool::connect(&server).await?;
                admin
                    .execute(format!("DROP DATABASE IF EXISTS `{name}`").as_str())
                    .await?;
                admin.close().await;
            }
            SimPool::Pg(p) => {
                p.close().await;
                let admin = PgPool::connect(&server).await?;
                admin
                    .execute(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)").as_str())
                    .await?;
                admin.close().await;
            }
        }
        Ok(())
    }
}

fn tables_of(fixture: &str) -> Result<Tables> {
    match crate::db::fixture_line(fixture) {
        l if l < DsLine::V3_1 => bail!("DS {fixture} has no database registry"),
        l => Tables::for_line(l).context("no registry tables"),
    }
}

fn with_db(server: &str, db: &str) -> String {
    let base = server.trim_end_matches('/');
    match base.split_once('?') {
        Some((b, q)) => format!("{}/{db}?{q}", b.trim_end_matches('/')),
        None => format!("{base}/{db}"),
    }
}

/// How a simulated server behaves; the defaults are DS's.
#[derive(Debug, Clone)]
pub struct JdbcSimOptions {
    /// 3.1/3.2 `registry.term-refresh-interval` (DS: 2 s).
    pub term_refresh: Duration,
    /// 3.1/3.2 term-refresh-interval × term-expire-times (DS: 6 s).
    pub expire_window: Duration,
    /// 3.3 `registry.heartbeat-refresh-interval` (DS: 3 s).
    pub heartbeat_refresh: Duration,
    /// 3.3 `registry.session-timeout`, written into `connection_config` (DS: 60 s).
    pub session_timeout: Duration,
    /// How often the server rewrites its heartbeat data (DS: 10 s).
    pub data_interval: Duration,
    /// Whether the server deletes dead peers' rows on each refresh, as DS's do.
    pub purge_dead: bool,
    pub zone: Zone,
}

impl Default for JdbcSimOptions {
    fn default() -> Self {
        JdbcSimOptions {
            term_refresh: Duration::from_secs(2),
            expire_window: Duration::from_secs(6),
            heartbeat_refresh: Duration::from_secs(3),
            session_timeout: Duration::from_secs(60),
            data_interval: Duration::from_secs(10),
            purge_dead: true,
            zone: Zone::Local,
        }
    }
}

struct HbState {
    startup: reaper_core::Instant,
    frozen: bool,
}

struct Server {
    db: RegistryDb,
    line: DsLine,
    kind: NodeKind,
    host: String,
    keys: Vec<String>,
    opts: JdbcSimOptions,
    hb: Mutex<HbState>,
    /// 3.1/3.2: the ids of this server's rows.
    ids: Mutex<Vec<i64>>,
    /// 3.3: this server's client id (0: none).
    client: AtomicI64,
}

impl Server {
    fn data(&self) -> Option<String> {
        let hb = self.hb.lock().unwrap_or_else(|e| e.into_inner());
        if hb.frozen {
            return None;
        }
        Some(encode_heartbeat_for(
            self.line,
            &self.host,
            hb.startup,
            Utc::now(),
            self.opts.zone,
        ))
    }

    fn client(&self) -> Option<i64> {
        match self.client.load(Ordering::Relaxed) {
            0 => None,
            c => Some(c),
        }
    }

    fn ids(&self) -> Vec<i64> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Registers as DS's `registry()` does: the key removed, then put.
    async fn go_live(&self) -> Result<()> {
        let db = &self.db;
        if self.opts.purge_dead {
            db.purge_dead(self.opts.expire_window).await?;
        }
        db.init_nodes().await?;
        if db.tables == Tables::Client33 {
            let id = client_code();
            let ip = self
                .host
                .rsplit_once(':')
                .map_or(self.host.as_str(), |(ip, _)| ip);
            db.register_client(
                id,
                &format!("{ip}_{}", sim_pid()),
                self.opts.session_timeout,
            )
            .await?;
            self.client.store(id, Ordering::Relaxed);
        }
        let data = self.data().unwrap_or_else(|| {
            encode_heartbeat_for(
                self.line,
                &self.host,
                Utc::now(),
                Utc::now(),
                self.opts.zone,
            )
        });
        let mut ids = Vec::new();
        for k in &self.keys {
            db.remove_key(k).await?;
            ids.push(db.put_ephemeral(k, &data, self.client()).await?);
        }
        *self.ids.lock().unwrap_or_else(|e| e.into_inner()) = ids;
        Ok(())
    }

    /// One refresh of the term or client heartbeat, and DS's clean-up.
    async fn refresh(&self, last_beat: &mut i64) -> Result<()> {
        match self.db.tables {
            Tables::MySql31 | Tables::Term32 => self.db.refresh_terms(&self.ids()).await?,
            Tables::Client33 => {
                // DS writes the previous refresh's time, then remembers the new one
                let now = Utc::now().timestamp_millis();
                if let Some(c) = self.client() {
                    self.db.beat(&[c], *last_beat).await?;
                }
                *last_beat = now;
            }
        }
        if self.opts.purge_dead {
            self.db.purge_dead(self.opts.expire_window).await?;
        }
        Ok(())
    }

    async fn write_data(&self) -> Result<()> {
        if let Some(data) = self.data() {
            for k in &self.keys {
                self.db.put_ephemeral(k, &data, self.client()).await?;
            }
        }
        Ok(())
    }

    async fn run(self: Arc<Self>) {
        let refresh = match self.db.tables {
            Tables::Client33 => self.opts.heartbeat_refresh,
            _ => self.opts.term_refresh,
        };
        let mut beat = tokio::time::interval(refresh);
        let mut data = tokio::time::interval(self.opts.data_interval);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        data.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        data.tick().await;
        let mut last_beat = Utc::now().timestamp_millis();
        loop {
            tokio::select! {
                _ = beat.tick() => {
                    if let Err(e) = self.refresh(&mut last_beat).await {
                        tracing::debug!(error = %e, host = %self.host, "sim registry refresh failed");
                    }
                }
                _ = data.tick() => {
                    if let Err(e) = self.write_data().await {
                        tracing::debug!(error = %e, host = %self.host, "sim heartbeat write failed");
                    }
                }
            }
        }
    }
}

/// A simulated DS worker or master on the database registry.
pub struct SimJdbcServer {
    server: Arc<Server>,
    task: Option<JoinHandle<()>>,
}

impl SimJdbcServer {
    /// Registers like DS's server of `line` (3.1+) and keeps its rows alive.
    pub async fn register(
        db: &SimRegistryDb,
        line: DsLine,
        kind: NodeKind,
        host: &str,
        startup_time: reaper_core::Instant,
        opts: JdbcSimOptions,
    ) -> Result<SimJdbcServer> {
        match Tables::for_line(line) {
            Some(t) if t == db.tables() => {}
            _ => bail!(
                "DS {line} does not use the {:?} registry tables",
                db.tables()
            ),
        }
        let server = Arc::new(Server {
            db: RegistryDb {
                zone: opts.zone,
                ..db.db.clone()
            },
            line,
            kind,
            host: host.to_string(),
            keys: node_paths(line, kind, host, &[]),
            opts,
            hb: Mutex::new(HbState {
                startup: startup_time,
                frozen: false,
            }),
            ids: Mutex::new(Vec::new()),
            client: AtomicI64::new(0),
        });
        let mut s = SimJdbcServer { server, task: None };
        s.go_live().await?;
        Ok(s)
    }

    async fn go_live(&mut self) -> Result<()> {
        self.server.go_live().await?;
        self.task = Some(tokio::spawn(self.server.clone().run()));
        Ok(())
    }

    /// The registry keys this server writes (e.g. `/nodes/worker/10.0.0.5:1234`).
    pub fn keys(&self) -> Vec<String> {
        self.server.keys.clone()
    }

    pub fn host(&self) -> &str {
        &self.server.host
    }

    /// 3.3: the server's client id.
    pub fn client_id(&self) -> Option<i64> {
        self.server.client()
    }

    /// `kill -9`: the server stops refreshing; its rows stay as they are.
    pub async fn crash(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }

    /// A clean stop, deleting what DS's own shutdown deletes on this line.
    pub async fn stop(&mut self) -> Result<()> {
        self.crash().await;
        let s = &self.server;
        let master = s.kind == NodeKind::Master;
        match s.db.tables {
            // deregister() deletes a master's key; a worker's close deletes
            // nothing (EphemeralDateManager.close empties its ids first)
            Tables::MySql31 => {
                if master {
                    for k in &s.keys {
                        s.db.remove_key(k).await?;
                    }
                }
            }
            Tables::Term32 => {
                if master {
                    for k in &s.keys {
                        s.db.remove_key(k).await?;
                    }
                }
                let ids = s.ids();
                if !ids.is_empty() {
                    let list = ids
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ");
                    s.db.exec(
                        &format!("DELETE FROM t_ds_jdbc_registry_data WHERE id IN ({list})"),
                        vec![],
                    )
                    .await?;
                }
            }
            Tables::Client33 => {
                if master {
                    for k in &s.keys {
                        s.db.remove_key(k).await?;
                    }
                }
                if let Some(c) = s.client() {
                    s.db.purge_clients(&[c]).await?;
                }
            }
        }
        Ok(())
    }

    /// A restarted server: a crash, then a new registration with a new startup time.
    pub async fn restart(&mut self, new_startup_time: reaper_core::Instant) -> Result<()> {
        self.crash().await;
        {
            let mut hb = self.server.hb.lock().unwrap_or_else(|e| e.into_inner());
            hb.startup = new_startup_time;
            hb.frozen = false;
        }
        self.go_live().await
    }

    /// Stops rewriting the heartbeat data (terms and client heartbeats go on).
    pub fn freeze_heartbeat(&self) {
        self.server
            .hb
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .frozen = true;
    }

    pub fn resume_heartbeat(&self) {
        self.server
            .hb
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .frozen = false;
    }

    /// Writes `data` into the row(s) now and freezes the heartbeat so it stays.
    pub async fn set_raw_data(&self, data: &str) -> Result<()> {
        self.freeze_heartbeat();
        for k in &self.server.keys {
            self.server
                .db
                .put_ephemeral(k, data, self.server.client())
                .await?;
        }
        Ok(())
    }
}

impl Drop for SimJdbcServer {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Many workers of one line, for load tests and benchmarks: one task
/// refreshing every live host's term (3.1/3.2) or client heartbeat (3.3,
/// with the current time rather than DS's one-refresh lag) each interval,
/// as that many servers would. Heartbeat data is written once.
pub struct SimJdbcFleet {
    db: RegistryDb,
    /// host → (row id, client id)
    hosts: Arc<Mutex<Vec<(String, i64, i64)>>>,
    task: Option<JoinHandle<()>>,
}

impl SimJdbcFleet {
    pub async fn register(
        db: &SimRegistryDb,
        line: DsLine,
        hosts: &[String],
        startup_time: reaper_core::Instant,
        opts: JdbcSimOptions,
    ) -> Result<SimJdbcFleet> {
        let tables = db.tables();
        if Tables::for_line(line) != Some(tables) {
            bail!("DS {line} does not use the {tables:?} registry tables");
        }
        let rdb = db.db.clone();
        let mut all = Vec::with_capacity(hosts.len());
        for h in hosts {
            let key = node_paths(line, NodeKind::Worker, h, &[])
                .into_iter()
                .next()
                .context("no key")?;
            let data = encode_heartbeat_for(line, h, startup_time, Utc::now(), opts.zone);
            let client = if tables == Tables::Client33 {
                let c = client_code();
                rdb.register_client(c, &format!("{h}_{}", sim_pid()), opts.session_timeout)
                    .await?;
                c
            } else {
                0
            };
            let id = rdb
                .put_ephemeral(&key, &data, (client != 0).then_some(client))
                .await?;
            all.push((h.clone(), id, client));
        }
        // Writing thousands of rows takes longer than a term lives: every
        // host refreshed once before anyone reads them.
        let ids: Vec<i64> = all.iter().map(|x| x.1).collect();
        let clients: Vec<i64> = all.iter().map(|x| x.2).collect();
        match tables {
            Tables::Client33 => rdb.beat(&clients, Utc::now().timestamp_millis()).await?,
            _ => rdb.refresh_terms(&ids).await?,
        }
        let hosts = Arc::new(Mutex::new(all));
        let task = {
            let (db, hosts) = (rdb.clone(), hosts.clone());
            let every = match tables {
                Tables::Client33 => opts.heartbeat_refresh,
                _ => opts.term_refresh,
            };
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    let live: Vec<(i64, i64)> = hosts
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .map(|(_, id, c)| (*id, *c))
                        .collect();
                    let r = match db.tables {
                        Tables::Client33 => {
                            let ids: Vec<i64> = live.iter().map(|x| x.1).collect();
                            db.beat(&ids, Utc::now().timestamp_millis()).await
                        }
                        _ => {
                            let ids: Vec<i64> = live.iter().map(|x| x.0).collect();
                            db.refresh_terms(&ids).await
                        }
                    };
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "sim fleet refresh failed");
                    }
                }
            })
        };
        Ok(SimJdbcFleet {
            db: rdb,
            hosts,
            task: Some(task),
        })
    }

    pub fn len(&self) -> usize {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A host's clean stop: its rows deleted now, as DS deletes them by key.
    /// Returns false for an unknown host.
    pub async fn remove_host(&self, host: &str) -> Result<bool> {
        let (id, client) = {
            let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
            match hosts.iter().position(|(h, _, _)| h == host) {
                Some(i) => {
                    let (_, id, c) = hosts.swap_remove(i);
                    (id, c)
                }
                None => return Ok(false),
            }
        };
        match self.db.tables {
            Tables::Client33 => {
                self.db.purge_clients(&[client]).await?;
            }
            t => {
                self.db
                    .exec(
                        &format!("DELETE FROM {} WHERE id = ?", t.data()),
                        vec![V::I(id)],
                    )
                    .await?;
            }
        }
        Ok(true)
    }

    /// Stops refreshing.
    pub async fn close(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for SimJdbcFleet {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
