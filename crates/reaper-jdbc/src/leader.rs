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

mod conn;

use crate::error::{bounded, JdbcError};
use crate::settings::JdbcSettings;
use conn::{LockConn, Target};
use reaper_core::registry::Backoff;
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
/// What every step on a lock connection needs.
struct Ctx<'a> {
    o: &'a LeaderOptions,
    seen: &'a Seen,
    cancel: &'a CancellationToken,
}

/// Where a step on a lock connection leads.
enum Step {
    /// The lock is this session's since then.
    Got(Tick),
    /// On with the connection.
    Go,
    /// A statement was cut short: the connection is not reused.
    CutShort,
    /// Cancelled: release the lock and close.
    Resign,
}

/// Serves one lock connection: Ok when cancelled, Err when it must be replaced.
async fn session(
    mut conn: LockConn,
    o: &LeaderOptions,
    seen: &Seen,
    cancel: &CancellationToken,
    backoff: &mut Backoff,
) -> Result<(), JdbcError> {
    let cx = Ctx { o, seen, cancel };
    let mut held_since: Option<Tick> = None;
    loop {
        let step = match held_since {
            None => try_lock(&mut conn, &cx, backoff).await?,
            Some(since) => hold(&mut conn, &cx, since).await?,
        };
        match step {
            Step::Got(since) => held_since = Some(since),
            Step::Go => {}
            Step::CutShort => {
                // closing the socket ends the session and any lock it got
                drop(conn);
                return Ok(());
            }
            Step::Resign => {
                conn.finish(o).await;
                return Ok(());
            }
        }
    }
}

/// A standby's try of the lock; when another holds it, waits `retry_interval`.
async fn try_lock(
    conn: &mut LockConn,
    cx: &Ctx<'_>,
    backoff: &mut Backoff,
) -> Result<Step, JdbcError> {
    let o = cx.o;
    let trying = bounded(
        "leader election: trying the lock",
        o.connect_timeout,
        conn.try_acquire(o),
    );
    let r = cx.cancel.run_until_cancelled(trying).await;
    let Some(r) = r else {
        return Ok(Step::CutShort);
    };
    let (got, who) = r?;
    backoff.reset();
    if got {
        tracing::info!(takeover_delay = ?o.takeover_delay(), "leader lock acquired");
        let since = Tick::now();
        *lock(&cx.seen.leader) = None;
        return Ok(Step::Got(since));
    }
    cx.seen.set(false);
    *lock(&cx.seen.leader) = who;
    if cx
        .cancel
        .run_until_cancelled(tokio::time::sleep(o.retry_interval))
        .await
        .is_none()
    {
        return Ok(Step::Resign);
    }
    Ok(Step::Go)
}

/// Holding the lock: a ping in flight, sleeping on the server. Leads once the
/// lock was held for the takeover delay; Err when the lock is lost.
async fn hold(conn: &mut LockConn, cx: &Ctx<'_>, held_since: Tick) -> Result<Step, JdbcError> {
    let (o, seen) = (cx.o, cx.seen);
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
            _ = cx.cancel.cancelled() => {
                // resign first, then let the ping end so the lock can be released
                seen.lost();
                let _ = ping.await;
                None
            }
        }
    };
    match outcome {
        None => Ok(Step::Resign),
        Some(Ok(true)) => {
            if held_since.elapsed() >= o.takeover_delay() && !*seen.tx.borrow() {
                *lock(&seen.leader) = Some(o.id.clone());
                seen.set(true);
            }
            Ok(Step::Go)
        }
        Some(Ok(false)) => {
            seen.lost();
            Err(JdbcError::LockLost)
        }
        Some(Err(e)) => {
            seen.lost();
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests;
