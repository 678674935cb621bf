//! Leader election on a database lock (MariaDB `GET_LOCK`, PostgreSQL
//! `pg_try_advisory_lock`), against the real servers.

mod jdbc_setup;

use ds_sim::db::SimKind;
use ds_sim::jdbc::SimRegistryDb;
use jdbc_setup::proxy::{split_url, Proxy};
use jdbc_setup::*;
use reaper_jdbc::{JdbcLeader, LeaderOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const KINDS: [SimKind; 2] = [SimKind::MySql, SimKind::Postgres];

/// A lock name / key of this test run: user-level locks are server-wide.
fn opts(id: &str, run: &str) -> LeaderOptions {
    let mut o = LeaderOptions::new(id);
    o.lock_name = format!("ds-reaper-test-{run}");
    o.pg_key = 0x6473_0000_0000 + i64::from(std::process::id());
    o.ping_interval = Duration::from_millis(300);
    o.ping_timeout = Duration::from_millis(700);
    o.retry_interval = Duration::from_millis(200);
    o.connect_timeout = Duration::from_secs(5);
    o
}

/// Samples both replicas every few ms and remembers whether both ever led at once.
struct Overlap {
    both: Arc<AtomicBool>,
    samples: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl Overlap {
    fn watch(a: Arc<JdbcLeader>, b: Arc<JdbcLeader>) -> Overlap {
        let both = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let (bo, sa, st) = (both.clone(), samples.clone(), stop.clone());
        tokio::spawn(async move {
            while !st.is_cancelled() {
                if a.is_leader() && b.is_leader() {
                    bo.store(true, Ordering::SeqCst);
                }
                sa.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Overlap {
            both,
            samples,
            stop,
        }
    }

    fn check(&self, what: &str) {
        assert!(self.samples.load(Ordering::Relaxed) > 10, "{what}: sampled");
        assert!(
            !self.both.load(Ordering::SeqCst),
            "{what}: two leaders at once"
        );
    }
}

impl Drop for Overlap {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn kill(db: &SimRegistryDb, session: i64) {
    match db.kind() {
        SimKind::MySql => db.exec(&format!("KILL {session}")).await.map(|_| ()),
        SimKind::Postgres => db
            .exec(&format!("SELECT pg_terminate_backend({session})"))
            .await
            .map(|_| ()),
    }
    .expect("killing the lock connection");
}

fn leading(a: &JdbcLeader, b: &JdbcLeader) -> usize {
    usize::from(a.is_leader()) + usize::from(b.is_leader())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_leads_and_the_other_takes_over_when_its_lock_connection_is_killed() {
    for kind in KINDS {
        let Some(db) = registry_db(kind, "3.2.2").await else {
            return;
        };
        let run = format!("{}-{:?}", std::process::id(), kind);
        let s = settings(db.url(), None);
        let a = Arc::new(
            JdbcLeader::start(&s, opts("replica-a", &run), CancellationToken::new()).unwrap(),
        );
        let b = Arc::new(
            JdbcLeader::start(&s, opts("replica-b", &run), CancellationToken::new()).unwrap(),
        );
        let overlap = Overlap::watch(a.clone(), b.clone());
        wait_until("a leader", WAIT, || leading(&a, &b) == 1).await;
        reaper_test_support::hold("one leader, and it stays that way", Duration::from_secs(2))
            .await;
        assert_eq!(leading(&a, &b), 1, "{kind:?}");
        let (leader, standby) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
        let leader_name = if a.is_leader() {
            "replica-a"
        } else {
            "replica-b"
        };
        let standby_name = if a.is_leader() {
            "replica-b"
        } else {
            "replica-a"
        };
        assert_eq!(leader.leader_id().as_deref(), Some(leader_name));
        // the standby reads who leads from the database (PROCESSLIST / pg_stat_activity)
        wait_until("the standby names the leader", WAIT, || {
            standby.leader_id().as_deref() == Some(leader_name)
        })
        .await;

        // the leader's lock connection is killed on the server
        let session = leader.session_id().expect("lock connection");
        let t0 = Instant::now();
        kill(&db, session).await;
        wait_until("the old leader resigns", Duration::from_secs(3), || {
            !leader.is_leader()
        })
        .await;
        let dropped = t0.elapsed();
        wait_until("the standby takes over", Duration::from_secs(10), || {
            standby.is_leader()
        })
        .await;
        let took_over = t0.elapsed();
        assert!(
            dropped < Duration::from_millis(500),
            "{kind:?}: resigned after {dropped:?}"
        );
        assert!(
            took_over >= standby_opts_delay(),
            "{kind:?}: led {took_over:?} after the kill, before the takeover delay"
        );
        assert_eq!(standby.leader_id().as_deref(), Some(standby_name));
        // the killed one reconnects as a standby and names the new leader
        wait_until("a new lock connection", WAIT, || {
            leader.session_id().is_some_and(|s| s != session)
        })
        .await;
        wait_until("the old leader names the new one", WAIT, || {
            leader.leader_id().as_deref() == Some(standby_name)
        })
        .await;
        reaper_test_support::hold("still one leader", Duration::from_secs(1)).await;
        assert_eq!(leading(&a, &b), 1, "{kind:?}");
        overlap.check(&format!("{kind:?}"));
        eprintln!(
            "{kind:?}: lock connection killed -> leader resigned in {}, standby led in {}",
            ms(dropped),
            ms(took_over)
        );
        a.close().await;
        b.close().await;
        db.drop().await.unwrap();
    }
}

fn standby_opts_delay() -> Duration {
    opts("x", "x").takeover_delay()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_leader_hands_over() {
    for kind in KINDS {
        let Some(db) = registry_db(kind, "dev").await else {
            return;
        };
        let run = format!("close-{}-{:?}", std::process::id(), kind);
        let s = settings(db.url(), None);
        let a = Arc::new(
            JdbcLeader::start(&s, opts("replica-a", &run), CancellationToken::new()).unwrap(),
        );
        wait_until("a leads", WAIT, || a.is_leader()).await;
        let b = Arc::new(
            JdbcLeader::start(&s, opts("replica-b", &run), CancellationToken::new()).unwrap(),
        );
        let overlap = Overlap::watch(a.clone(), b.clone());
        reaper_test_support::hold("b stays a standby", Duration::from_secs(1)).await;
        assert!(a.is_leader() && !b.is_leader(), "{kind:?}");
        let t0 = Instant::now();
        a.close().await;
        assert!(!a.is_leader());
        wait_until("b leads", Duration::from_secs(10), || b.is_leader()).await;
        overlap.check(&format!("{kind:?}"));
        eprintln!(
            "{kind:?}: leader closed -> standby led in {}",
            ms(t0.elapsed())
        );
        b.close().await;
        db.drop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_by_the_network_resigns_within_the_ping_timeout() {
    for kind in KINDS {
        let Some(db) = registry_db(kind, "3.2.2").await else {
            return;
        };
        let run = format!("cut-{}-{:?}", std::process::id(), kind);
        let proxy = Proxy::start(&split_url(db.url()).1).await;
        let a = Arc::new(
            JdbcLeader::start(
                &settings(&proxy.url_for(db.url()), None),
                opts("replica-a", &run),
                CancellationToken::new(),
            )
            .unwrap(),
        );
        wait_until("a leads", WAIT, || a.is_leader()).await;
        let b = Arc::new(
            JdbcLeader::start(
                &settings(db.url(), None),
                opts("replica-b", &run),
                CancellationToken::new(),
            )
            .unwrap(),
        );
        let overlap = Overlap::watch(a.clone(), b.clone());
        reaper_test_support::hold("b settles as a standby", Duration::from_millis(500)).await;
        // nothing answers any more; the server still holds a's session and lock
        proxy.pause();
        let t0 = Instant::now();
        let o = opts("x", "x");
        wait_until("a resigns", Duration::from_secs(5), || !a.is_leader()).await;
        let dropped = t0.elapsed();
        assert!(
            dropped <= o.ping_interval + o.ping_timeout + Duration::from_millis(500),
            "{kind:?}: {dropped:?}"
        );
        // the connection is torn down: the server ends a's session, b takes over
        proxy.stop();
        wait_until("b leads", Duration::from_secs(15), || b.is_leader()).await;
        overlap.check(&format!("{kind:?}"));
        eprintln!(
            "{kind:?}: network cut -> leader resigned in {}",
            ms(dropped)
        );
        a.close().await;
        b.close().await;
        drop(proxy);
        db.drop().await.unwrap();
    }
}
