//! Leader election among ds-reaper replicas without writing anything of DS's
//! (SPEC §4.6, §14): a session-level lock held on one dedicated connection —
//! MySQL/MariaDB `GET_LOCK(name, 0)`, PostgreSQL `pg_try_advisory_lock(key)` —
//! which the server releases the moment that session ends.
//!
//! - A standby retries the lock every `retry_interval` on its connection.
//! - The holder keeps a ping in flight on the lock connection: a statement
//!   that checks the lock is still its own and then sleeps `ping_interval`
//!   on the server (`SLEEP` / `pg_sleep`). A `KILL` or `pg_terminate_backend`
//!   of that connection, or the server going away, fails the ping at once;
//!   a ping that has not answered `ping_timeout` after its sleep — a network
//!   that stopped answering — counts as failed too. Either way leadership
//!   is dropped first, then the connection is closed and a new one tries
//!   again.
//! - Having got the lock, a replica leads only after `ping_interval +
//!   ping_timeout` (the takeover delay): by then a previous holder whose
//!   session the server ended has noticed it by its own ping and stopped, so
//!   two replicas never lead at once (the rule holds as long as replicas use
//!   the same timings and no process stalls longer than that).
//! - Who leads: the holder knows itself. A PostgreSQL standby reads the
//!   holder's `application_name` (`ds-reaper:<id>`) through `pg_locks` and
//!   `pg_stat_activity`; a MySQL/MariaDB standby reads the holder's
//!   connection id from `IS_USED_LOCK` and, from `PROCESSLIST.INFO`, the ping
//!   in flight there, which carries the holder's id in a comment. Either may
//!   be None for a moment (between pings), or for good when the database
//!   user cannot see other sessions (MySQL's `PROCESS` privilege; replicas
//!   normally share one user and see each other).
//!
//! The lock lives in the database session, so the connection must reach the
//! server itself: through a pooler in transaction mode (PgBouncer, ProxySQL)
//! session locks do not hold.

use crate::error::{bounded, JdbcError};
use crate::settings::JdbcSettings;
use reaper_core::registry::Backoff;
use reaper_sql::connect::{mysql_options, pg_options, redact_url, DbKind};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlRow};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::ConnectOptions;
use sqlx::{Connection, Executor, Row};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant as Tick;
use tokio_util::sync::CancellationToken;

/// The PostgreSQL advisory lock key: "dsreaper" in ASCII. Advisory locks are
/// per database, so replicas of different DS databases never meet.
pub const LEADER_KEY: i64 = 0x6473_7265_6170_6572;
/// The MySQL/MariaDB lock name. User-level locks are server-wide: ds-reaper
/// deployments for two DS databases on one server need different names.
pub const LEADER_LOCK: &str = "ds-reaper-leader";
/// What a PostgreSQL lock connection calls itself; the id follows.
const APP_PREFIX: &str = "ds-reaper:";
/// What a MySQL ping carries in its comment; the hex-encoded id follows.
const MARK: &str = "ds-reaper leader id=";

/// How the election behaves.
#[derive(Debug, Clone)]
pub struct LeaderOptions {
    /// This replica's id, for operators and for the standbys' `leader_id`.
    pub id: String,
    /// MySQL/MariaDB `GET_LOCK` name: letters, digits and `_.:/-`, at most 64.
    pub lock_name: String,
    /// PostgreSQL `pg_try_advisory_lock` key.
    pub pg_key: i64,
    /// How long each ping sleeps on the server: the ping's period.
    pub ping_interval: Duration,
    /// How long past its sleep a ping may take before it counts as failed.
    pub ping_timeout: Duration,
    /// How often a standby tries the lock.
    pub retry_interval: Duration,
    /// Bound of connecting and of every statement but the ping.
    pub connect_timeout: Duration,
}

impl LeaderOptions {
    pub fn new(id: impl Into<String>) -> Self {
        LeaderOptions {
            id: id.into(),
            lock_name: LEADER_LOCK.to_string(),
            pg_key: LEADER_KEY,
            ping_interval: Duration::from_secs(1),
            ping_timeout: Duration::from_secs(2),
            retry_interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// How long a replica holds the lock before it leads.
    pub fn takeover_delay(&self) -> Duration {
        self.ping_interval + self.ping_timeout
    }

    fn check(&self) -> Result<(), JdbcError> {
        let ok = |c: char| c.is_ascii_alphanumeric() || "_.:/-".contains(c);
        if self.lock_name.is_empty() || self.lock_name.len() > 64 || !self.lock_name.chars().all(ok)
        {
            return Err(JdbcError::BadOption(format!(
                "leader lock name {:?}: letters, digits and _.:/- only, 1 to 64 characters",
                self.lock_name
            )));
        }
        Ok(())
    }
}

/// Leadership among replicas, held on a database lock.
pub struct JdbcLeader {
    rx: watch::Receiver<bool>,
    seen: Arc<Seen>,
    cancel: CancellationToken,
    task: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

/// What the election publishes.
struct Seen {
    tx: watch::Sender<bool>,
    leader: Mutex<Option<String>>,
    /// The lock connection's server-side id (0: none).
    session: AtomicI64,
}

impl Seen {
    fn set(&self, v: bool) {
        self.tx.send_if_modified(|cur| {
            if *cur == v {
                return false;
            }
            if v {
                tracing::info!("became leader");
            } else {
                tracing::warn!("not leader any more");
            }
            *cur = v;
            true
        });
    }

    /// Not leading, leader unknown.
    fn lost(&self) {
        self.set(false);
        *lock(&self.leader) = None;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // only plain assignments happen under it: a poisoned lock is consistent
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl JdbcLeader {
    /// Starts the election on a connection of its own to the registry's
    /// database (needs a tokio runtime). Fails only on settings that can
    /// never work.
    pub fn start(
        settings: &JdbcSettings,
        opts: LeaderOptions,
        cancel: CancellationToken,
    ) -> Result<JdbcLeader, JdbcError> {
        opts.check()?;
        let target = Target::new(settings, &opts.id)?;
        let (tx, rx) = watch::channel(false);
        let seen = Arc::new(Seen {
            tx,
            leader: Mutex::new(None),
            session: AtomicI64::new(0),
        });
        let cancel = cancel.child_token();
        let task = tokio::spawn(run(target, opts, seen.clone(), cancel.clone()));
        Ok(JdbcLeader {
            rx,
            seen,
            cancel,
            task: tokio::sync::Mutex::new(Some(task)),
        })
    }

    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// This replica's id while it leads; on a standby the leader's id as far
    /// as the database shows it (see the module documentation), else None.
    pub fn leader_id(&self) -> Option<String> {
        lock(&self.seen.leader).clone()
    }

    /// The server-side id of the lock connection (MySQL `CONNECTION_ID()`,
    /// PostgreSQL `pg_backend_pid()`), while connected.
    pub fn session_id(&self) -> Option<i64> {
        match self.seen.session.load(Ordering::Relaxed) {
            0 => None,
            id => Some(id),
        }
    }

    /// Resigns: leadership is dropped at once, then the lock released and
    /// its connection closed (bounded by one ping).
    pub async fn close(&self) {
        self.seen.lost();
        self.cancel.cancel();
        if let Some(h) = self.task.lock().await.take() {
            let _ = h.await;
        }
    }
}

/// Where the lock connection goes.
enum Target {
    My(MySqlConnectOptions),
    Pg(PgConnectOptions),
}

impl Target {
    fn new(s: &JdbcSettings, id: &str) -> Result<Target, JdbcError> {
        let bad = |e: sqlx::Error| JdbcError::BadUrl(format!("{}: {e}", redact_url(&s.url)));
        match s.kind() {
            Some(DbKind::MySql) => {
                let o = mysql_options(&s.url, s.password.as_deref()).map_err(bad)?;
                // The ping sleeps on purpose: not a slow statement to warn about.
                Ok(Target::My(o.log_slow_statements(
                    log::LevelFilter::Off,
                    std::time::Duration::from_secs(3600),
                )))
            }
            Some(DbKind::Postgres) => {
                let o = pg_options(&s.url, s.password.as_deref()).map_err(bad)?;
                Ok(Target::Pg(
                    o.application_name(&app_name(id)).log_slow_statements(
                        log::LevelFilter::Off,
                        std::time::Duration::from_secs(3600),
                    ),
                ))
            }
            None => Err(JdbcError::BadUrl(redact_url(&s.url))),
        }
    }

    /// Connects, lifts any statement limit (the ping sleeps on purpose) and
    /// reads the session's id.
    async fn connect(&self) -> Result<(LockConn, i64), JdbcError> {
        const WHAT: &str = "leader election: connecting";
        match self {
            Target::My(o) => {
                let mut c = MySqlConnection::connect_with(o)
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                // MariaDB; MySQL has no such variable and bounds no SLEEP
                let _ = c.execute("SET SESSION max_statement_time = 0").await;
                let id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                    .fetch_one(&mut c)
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                Ok((LockConn::My(c), id))
            }
            Target::Pg(o) => {
                let mut c = PgConnection::connect_with(o)
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                c.execute("SET statement_timeout = 0")
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                let id: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                    .fetch_one(&mut c)
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                Ok((LockConn::Pg(c), i64::from(id)))
            }
        }
    }
}

/// `application_name` of a PostgreSQL lock connection (63 bytes at most).
fn app_name(id: &str) -> String {
    let mut s = format!("{APP_PREFIX}{id}");
    while s.len() > 63 {
        s.pop();
    }
    s
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The id in a MySQL ping's text (`PROCESSLIST.INFO`), if it is one.
fn id_from_info(info: &str) -> Option<String> {
    let rest = &info[info.find(MARK)? + MARK.len()..];
    let end = rest.find(|c: char| !c.is_ascii_hexdigit())?;
    unhex(&rest[..end]).filter(|s| !s.is_empty())
}

/// One lock connection.
enum LockConn {
    My(MySqlConnection),
    Pg(PgConnection),
}

fn my_text(r: &MySqlRow, i: usize) -> Option<String> {
    match r.try_get::<Option<String>, _>(i) {
        Ok(v) => v,
        Err(_) => r
            .try_get::<Option<Vec<u8>>, _>(i)
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
    }
}

/// PostgreSQL shows a bigint advisory key as two oids.
fn halves(key: i64) -> (i64, i64) {
    ((key >> 32) & 0xffff_ffff, key & 0xffff_ffff)
}

impl LockConn {
    /// Tries the lock once: whether it is ours now, and, if not, who holds it.
    async fn try_acquire(
        &mut self,
        o: &LeaderOptions,
    ) -> Result<(bool, Option<String>), JdbcError> {
        const WHAT: &str = "leader election: trying the lock";
        match self {
            LockConn::My(c) => {
                // text protocol: the values are checked literals
                let sql = format!(
                    "SELECT GET_LOCK('{n}', 0), \
                     (SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = IS_USED_LOCK('{n}'))",
                    n = o.lock_name
                );
                let row = c
                    .fetch_one(sqlx::raw_sql(&sql))
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                let got = row
                    .try_get::<Option<i64>, _>(0)
                    .map_err(JdbcError::db(WHAT))?;
                let who = my_text(&row, 1).as_deref().and_then(id_from_info);
                Ok((got == Some(1), who))
            }
            LockConn::Pg(c) => {
                let (hi, lo) = halves(o.pg_key);
                let row = sqlx::query(
                    "SELECT pg_try_advisory_lock($1), \
                     (SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                      WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid() \
                      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                      AND l.classid = $2::bigint::oid AND l.objid = $3::bigint::oid AND l.objsubid = 1 \
                      LIMIT 1)",
                )
                .bind(o.pg_key)
                .bind(hi)
                .bind(lo)
                .fetch_one(&mut *c)
                .await
                .map_err(JdbcError::db(WHAT))?;
                let got: bool = row.try_get(0).map_err(JdbcError::db(WHAT))?;
                let who = row
                    .try_get::<Option<String>, _>(1)
                    .ok()
                    .flatten()
                    .and_then(|a| a.strip_prefix(APP_PREFIX).map(str::to_string))
                    .filter(|s| !s.is_empty());
                Ok((got, who))
            }
        }
    }

    /// Checks the lock is still this session's, then sleeps `sleep` on the
    /// server: a failure of the connection meanwhile ends it at once.
    async fn ping(&mut self, o: &LeaderOptions, sleep: Duration) -> Result<bool, JdbcError> {
        const WHAT: &str = "leader election: ping";
        match self {
            LockConn::My(c) => {
                let sql = format!(
                    "SELECT /* {MARK}{id} */ IS_USED_LOCK('{n}') = CONNECTION_ID(), SLEEP({s:.3})",
                    id = hex(&o.id),
                    n = o.lock_name,
                    s = sleep.as_secs_f64()
                );
                let row = c
                    .fetch_one(sqlx::raw_sql(&sql))
                    .await
                    .map_err(JdbcError::db(WHAT))?;
                let held = row
                    .try_get::<Option<i64>, _>(0)
                    .map_err(JdbcError::db(WHAT))?;
                Ok(held == Some(1))
            }
            LockConn::Pg(c) => {
                let (hi, lo) = halves(o.pg_key);
                let held: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
                     AND pid = pg_backend_pid() AND classid = $1::bigint::oid \
                     AND objid = $2::bigint::oid AND objsubid = 1) FROM pg_sleep($3)",
                )
                .bind(hi)
                .bind(lo)
                .bind(sleep.as_secs_f64())
                .fetch_one(&mut *c)
                .await
                .map_err(JdbcError::db(WHAT))?;
                Ok(held)
            }
        }
    }

    /// Releases the lock and closes the connection, bounded by `connect_timeout`
    /// (closing alone would release it too).
    async fn finish(self, o: &LeaderOptions) {
        if tokio::time::timeout(o.connect_timeout, self.release(o))
            .await
            .is_err()
        {
            tracing::warn!(
                "leader election: releasing the lock timed out; the connection is dropped"
            );
        }
    }

    async fn release(self, o: &LeaderOptions) {
        match self {
            LockConn::My(mut c) => {
                let sql = format!("SELECT RELEASE_LOCK('{}')", o.lock_name);
                let _ = c.execute(sqlx::raw_sql(&sql)).await;
                let _ = c.close().await;
            }
            LockConn::Pg(mut c) => {
                let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(o.pg_key)
                    .execute(&mut c)
                    .await;
                let _ = c.close().await;
            }
        }
    }
}

fn backoff() -> Backoff {
    let seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Backoff::new(Duration::from_millis(200), Duration::from_secs(10), seed)
}

async fn run(target: Target, o: LeaderOptions, seen: Arc<Seen>, cancel: CancellationToken) {
    // Never reset by a mere connect: a connection that keeps failing backs off to the cap.
    let mut backoff = backoff();
    while !cancel.is_cancelled() {
        let connecting = bounded(
            "leader election: connecting",
            o.connect_timeout,
            target.connect(),
        );
        let Some(connected) = cancel.run_until_cancelled(connecting).await else {
            break;
        };
        match connected {
            Ok((conn, sid)) => {
                seen.session.store(sid, Ordering::Relaxed);
                let r = session(conn, &o, &seen, &cancel, &mut backoff).await;
                seen.lost();
                seen.session.store(0, Ordering::Relaxed);
                match r {
                    Ok(()) => break,
                    Err(e) => tracing::warn!(error = %e, "leader election connection ended"),
                }
            }
            Err(e) => {
                seen.lost();
                tracing::warn!(error = %e, "leader election cannot connect");
            }
        }
        if cancel
            .run_until_cancelled(tokio::time::sleep(backoff.next_delay()))
            .await
            .is_none()
        {
            break;
        }
    }
    seen.lost();
}

/// Serves one lock connection: Ok when cancelled, Err when it must be replaced.
async fn session(
    mut conn: LockConn,
    o: &LeaderOptions,
    seen: &Seen,
    cancel: &CancellationToken,
    backoff: &mut Backoff,
) -> Result<(), JdbcError> {
    let mut held_since: Option<Tick> = None;
    loop {
        if held_since.is_none() {
            let trying = bounded(
                "leader election: trying the lock",
                o.connect_timeout,
                conn.try_acquire(o),
            );
            let r = cancel.run_until_cancelled(trying).await;
            let Some(r) = r else {
                // a statement was cut short: the connection is not reused; closing
                // the socket ends the session and any lock it got
                drop(conn);
                return Ok(());
            };
            let (got, who) = r?;
            backoff.reset();
            if got {
                tracing::info!(takeover_delay = ?o.takeover_delay(), "leader lock acquired");
                held_since = Some(Tick::now());
                *lock(&seen.leader) = None;
            } else {
                seen.set(false);
                *lock(&seen.leader) = who;
                if cancel
                    .run_until_cancelled(tokio::time::sleep(o.retry_interval))
                    .await
                    .is_none()
                {
                    conn.finish(o).await;
                    return Ok(());
                }
                continue;
            }
        }
        // Holding the lock: a ping in flight, sleeping on the server.
        let limit = o.ping_interval + o.ping_timeout;
        let outcome = {
            let ping = bounded(
                "leader election: ping",
                limit,
                conn.ping(o, o.ping_interval),
            );
            tokio::pin!(ping);
            tokio::select! {
                r = &mut ping => Some(r),
                _ = cancel.cancelled() => {
                    // resign first, then let the ping end so the lock can be released
                    seen.lost();
                    let _ = ping.await;
                    None
                }
            }
        };
        match outcome {
            None => {
                conn.finish(o).await;
                return Ok(());
            }
            Some(Ok(true)) => {
                let due = held_since.is_some_and(|t| t.elapsed() >= o.takeover_delay());
                if due && !*seen.tx.borrow() {
                    *lock(&seen.leader) = Some(o.id.clone());
                    seen.set(true);
                }
            }
            Some(Ok(false)) => {
                seen.lost();
                return Err(JdbcError::LockLost);
            }
            Some(Err(e)) => {
                seen.lost();
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_travel_through_the_ping_text() {
        let info = format!(
            "SELECT /* {MARK}{} */ IS_USED_LOCK('x') = CONNECTION_ID(), SLEEP(1.000)",
            hex("host-a:1234 */ DROP")
        );
        assert_eq!(id_from_info(&info).as_deref(), Some("host-a:1234 */ DROP"));
        assert_eq!(id_from_info("SELECT GET_LOCK('ds-reaper-leader', 0)"), None);
        assert_eq!(id_from_info(&format!("/* {MARK}zz */")), None);
    }

    #[test]
    fn application_names_fit() {
        assert_eq!(app_name("r1"), "ds-reaper:r1");
        let long = "x".repeat(100);
        assert_eq!(app_name(&long).len(), 63);
        assert_eq!(app_name("é".repeat(40).as_str()).len(), 62);
    }

    #[test]
    fn key_halves_are_what_pg_locks_shows() {
        assert_eq!(halves(LEADER_KEY), (0x6473_7265, 0x6170_6572));
        assert_eq!(halves(-1), (0xffff_ffff, 0xffff_ffff));
    }

    #[test]
    fn options() {
        let mut o = LeaderOptions::new("r1");
        assert_eq!(o.takeover_delay(), Duration::from_secs(3));
        assert!(o.check().is_ok());
        o.lock_name = "x'; DROP".into();
        assert!(o.check().is_err());
        o.lock_name = "a".repeat(65);
        assert!(o.check().is_err());
    }
}
