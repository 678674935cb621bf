//! The JDBC registry's test settings and databases (real MariaDB and
//! PostgreSQL, from `deploy/dev/services.sh start; source deploy/dev/env.sh`);
//! the helpers every crate's tests share are reaper-test-support's.
#![allow(dead_code, unused_imports)]

pub mod proxy;

use ds_sim::db::SimKind;
use ds_sim::jdbc::{JdbcSimOptions, SimRegistryDb};
use reaper_core::{DsLine, RegistryView};
use reaper_jdbc::{JdbcRegistry, JdbcSettings};
use std::sync::Arc;
use std::time::Duration;

pub use reaper_test_support::{wait_until, WAIT};

/// The tests' poll interval.
pub const POLL: Duration = Duration::from_millis(200);
/// The tests' 3.1/3.2 expiry window, and 3.3 session timeout.
pub const EXPIRE: Duration = Duration::from_millis(1500);
/// The simulated servers' term / client heartbeat refresh.
pub const REFRESH: Duration = Duration::from_millis(300);

/// The registries under test: 3.1.9's MySQL registry, 3.2.2's JDBC registry
/// on both databases, dev's JDBC registry (client heartbeats) on both.
pub const CASES: &[(SimKind, &str)] = &[
    (SimKind::MySql, "3.1.9"),
    (SimKind::MySql, "3.2.2"),
    (SimKind::Postgres, "3.2.2"),
    (SimKind::MySql, "dev"),
    (SimKind::Postgres, "dev"),
];

pub fn line_of(fixture: &str) -> DsLine {
    ds_sim::db::fixture_line(fixture)
}

pub use reaper_test_support::database as available;

/// A fresh database with the fixture's registry tables, or None when the
/// server is missing (outside CI).
pub async fn registry_db(kind: SimKind, fixture: &str) -> Option<SimRegistryDb> {
    if !available(kind).await {
        return None;
    }
    Some(
        SimRegistryDb::create(kind, fixture)
            .await
            .expect("registry database"),
    )
}

pub use reaper_test_support::utc;

pub fn settings(url: &str, line: Option<DsLine>) -> JdbcSettings {
    let mut s = JdbcSettings::new(url);
    s.poll_interval = POLL;
    s.expire_after = EXPIRE;
    s.statement_timeout = Duration::from_secs(5);
    s.line = line;
    s.zone = utc();
    s
}

/// DS's behaviour at test speed; rows of dead servers are left in place
/// (no live server purges them) unless a test asks for it.
pub fn sim_opts() -> JdbcSimOptions {
    JdbcSimOptions {
        term_refresh: REFRESH,
        expire_window: EXPIRE,
        heartbeat_refresh: REFRESH,
        session_timeout: EXPIRE,
        data_interval: Duration::from_millis(500),
        purge_dead: false,
        zone: utc(),
    }
}

/// Waits until `pred` holds for the registry's view; panics with the view after `WAIT`.
pub async fn wait_view(
    reg: &JdbcRegistry,
    what: &str,
    pred: impl Fn(&RegistryView) -> bool,
) -> Arc<RegistryView> {
    wait_view_for(reg, what, WAIT, pred).await
}

pub async fn wait_view_for(
    reg: &JdbcRegistry,
    what: &str,
    limit: Duration,
    pred: impl Fn(&RegistryView) -> bool,
) -> Arc<RegistryView> {
    reaper_test_support::wait_view(reg.subscribe(), what, limit, pred).await
}

/// Waits for the registry to finish `n` more polls.
pub async fn polls(reg: &JdbcRegistry, n: u64) {
    let target = reg.stats().polls + n;
    wait_until("registry polls", WAIT, || reg.stats().polls >= target).await;
}

/// `(before, after)` as chrono instants around now, for stamps.
pub fn now() -> reaper_core::Instant {
    chrono::Utc::now()
}

pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
