//! The three shapes DS's database registry has had, and DS's own rule for
//! whether a row stands for a live server in each (SPEC §14, reference §3.5).
//! Pure: the rules are tested here with plain values.
//!
//! - **3.1** `t_ds_mysql_registry_data` (MySQL only) and **3.2**
//!   `t_ds_jdbc_registry_data`: an ephemeral row (`type`/`data_type` 1) is
//!   kept alive by its server refreshing `last_term` (epoch ms, the server's
//!   clock) every `registry.term-refresh-interval` (2 s); every live server
//!   deletes ephemeral rows whose `last_term` is older than
//!   term-refresh-interval × term-expire-times (6 s). DS's readers take a
//!   row's presence as life; ds-reaper also requires the term to be fresh, so
//!   a crashed server's row counts as gone when no live server is left to
//!   delete it.
//! - **3.3+** (dev) `t_ds_jdbc_registry_data` with `client_id` and
//!   `t_ds_jdbc_registry_client_heartbeat`: rows carry no term; a server's
//!   client refreshes `last_heartbeat_time` every
//!   `registry.heartbeat-refresh-interval` (3 s), and a client is dead when
//!   `now − last_heartbeat_time > sessionTimeout` (its `connection_config`,
//!   60 s by default), whereupon live servers purge its ephemeral rows. DS has
//!   left dead servers' rows behind (reference §8), so here a row is live
//!   only while its client's heartbeat is fresh, and a row whose client has
//!   no heartbeat row is dead.

use reaper_core::registry::{FailoverLockLayout, ListedNode, Listing};
use reaper_core::DsLine;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// DS's default `sessionTimeout` (dev `JdbcRegistryClientHeartbeatDTO.ClientConfig`),
/// used when a client's `connection_config` cannot be read.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(60);

/// Which registry tables a database holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// 3.1's MySQL registry: `t_ds_mysql_registry_data` with `last_term`.
    MySql31,
    /// 3.2's JDBC registry: `t_ds_jdbc_registry_data` with `last_term`.
    Term32,
    /// 3.3+'s JDBC registry: `t_ds_jdbc_registry_data` with `client_id`, and
    /// `t_ds_jdbc_registry_client_heartbeat`.
    Client33,
}

impl Flavour {
    /// The flavour DS uses on an explicitly configured line; None for lines
    /// that had no database registry (before 3.1).
    pub fn for_line(line: DsLine) -> Option<Flavour> {
        match line {
            DsLine::V3_1_0 | DsLine::V3_1 => Some(Flavour::MySql31),
            DsLine::V3_2 => Some(Flavour::Term32),
            DsLine::V3_3 => Some(Flavour::Client33),
            _ => None,
        }
    }

    /// The lines that use this flavour.
    pub fn lines(self) -> &'static [DsLine] {
        match self {
            Flavour::MySql31 => &[DsLine::V3_1_0, DsLine::V3_1],
            Flavour::Term32 => &[DsLine::V3_2],
            Flavour::Client33 => &[DsLine::V3_3],
        }
    }

    /// The table whose rows are the registry's nodes.
    pub fn data_table(self) -> &'static str {
        match self {
            Flavour::MySql31 => "t_ds_mysql_registry_data",
            Flavour::Term32 | Flavour::Client33 => "t_ds_jdbc_registry_data",
        }
    }

    /// Picks the flavour from the catalog: `(table, column)` pairs of the
    /// registry tables in the connected schema (lower case). The newest shape
    /// wins (a 3.1 → 3.2 upgrade may leave 3.1's table behind).
    pub fn from_catalog<'a>(cols: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Flavour> {
        let (mut jdbc_client, mut jdbc_term, mut heartbeat, mut mysql_term) =
            (false, false, false, false);
        for (t, c) in cols {
            match (t, c) {
                ("t_ds_jdbc_registry_data", "client_id") => jdbc_client = true,
                ("t_ds_jdbc_registry_data", "last_term") => jdbc_term = true,
                ("t_ds_jdbc_registry_client_heartbeat", "last_heartbeat_time") => heartbeat = true,
                ("t_ds_mysql_registry_data", "last_term") => mysql_term = true,
                _ => {}
            }
        }
        if jdbc_client && heartbeat {
            Some(Flavour::Client33)
        } else if jdbc_term {
            Some(Flavour::Term32)
        } else if mysql_term {
            Some(Flavour::MySql31)
        } else {
            None
        }
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavour::MySql31 => "3.1 MySQL registry (t_ds_mysql_registry_data)",
            Flavour::Term32 => "3.2 JDBC registry (t_ds_jdbc_registry_data, last_term)",
            Flavour::Client33 => {
                "3.3 JDBC registry (t_ds_jdbc_registry_data, t_ds_jdbc_registry_client_heartbeat)"
            }
        })
    }
}

/// What a row says about its server's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// 3.1/3.2: the row's `last_term`, epoch ms.
    LastTerm(i64),
    /// 3.3+: the row's client's heartbeat, if the client has a heartbeat row.
    Client(Option<ClientBeat>),
}

/// One `t_ds_jdbc_registry_client_heartbeat` row, as far as liveness goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientBeat {
    /// `last_heartbeat_time`, epoch ms.
    pub last_heartbeat_ms: i64,
    /// `connection_config`'s `sessionTimeout`; None when it cannot be read.
    pub session_timeout: Option<Duration>,
}

impl ClientBeat {
    /// Reads `connection_config` (`{"sessionTimeout":60000}`).
    pub fn parse_session_timeout(config: &str) -> Option<Duration> {
        let v: serde_json::Value = serde_json::from_str(config).ok()?;
        let ms = v.get("sessionTimeout")?.as_i64()?;
        (ms > 0).then(|| Duration::from_millis(ms as u64))
    }
}

/// Why a row does not stand for a live server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dead {
    /// 3.1/3.2: `last_term` older than `expire_after`.
    TermExpired,
    /// 3.3+: the client's heartbeat is older than its session timeout.
    HeartbeatExpired,
    /// 3.3+: the client has no heartbeat row (purged, or deregistered).
    NoClient,
}

impl Term {
    /// DS's rule for the row at `now_ms` (the daemon's clock, epoch ms).
    /// `expire_after` applies to 3.1/3.2 rows only.
    pub fn judge(&self, now_ms: i64, expire_after: Duration) -> Result<(), Dead> {
        match self {
            // DS deletes `last_term < now − window`: alive while now − last_term ≤ window.
            Term::LastTerm(t) => {
                if now_ms.saturating_sub(*t) <= millis(expire_after) {
                    Ok(())
                } else {
                    Err(Dead::TermExpired)
                }
            }
            Term::Client(None) => Err(Dead::NoClient),
            // DS's `isDead()`: now − lastHeartbeatTime > sessionTimeout.
            Term::Client(Some(beat)) => {
                let timeout = beat.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT);
                if now_ms.saturating_sub(beat.last_heartbeat_ms) <= millis(timeout) {
                    Ok(())
                } else {
                    Err(Dead::HeartbeatExpired)
                }
            }
        }
    }
}

/// How far a DS server's clock lies from the daemon's, as far as its rows
/// prove it: positive ahead, negative behind, None when nothing is proven.
///
/// A term ahead of the poll's send time `sent_ms` is ahead by at least the
/// difference. Behind needs two polls: a term that moved since the previous
/// poll (`prev`: that poll's term and send time) was written after that poll
/// read it, so a new term dated before the previous send is behind by at
/// least the difference. A row that stopped moving (a dead server) proves
/// nothing, so an old term alone never warns.
pub fn clock_skew(prev: Option<(i64, i64)>, term_ms: i64, sent_ms: i64) -> Option<i64> {
    if term_ms > sent_ms {
        return Some(term_ms - sent_ms);
    }
    let (prev_term, prev_sent) = prev?;
    (term_ms > prev_term && term_ms < prev_sent).then(|| term_ms - prev_sent)
}

impl Term {
    /// The time that moves while the row's server lives (epoch ms).
    pub fn millis(&self) -> Option<i64> {
        match self {
            Term::LastTerm(t) => Some(*t),
            Term::Client(Some(b)) => Some(b.last_heartbeat_ms),
            Term::Client(None) => None,
        }
    }
}

/// One registry row of a server node, or of a master-failover lock, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryRow {
    /// `key` / `data_key`: the bare path, e.g. `/nodes/worker/10.0.0.5:1234`;
    /// a lock row's `key` / `lock_key`, e.g. `/lock/master-failover/10.0.0.5:5678`.
    pub key: String,
    /// `data` / `data_value`: the server's heartbeat (empty for a lock).
    pub data: String,
    /// What says whether the server (the lock's holder) lives.
    pub term: Term,
    /// A row of the lock table (3.1/3.2): its holder runs a failover pass
    /// while the term is fresh (SPEC §13).
    pub lock: bool,
}

impl RegistryRow {
    /// A row of the poll statement from its columns as the database gave
    /// them: key, data, the term (`last_term`, or 3.3's client
    /// `last_heartbeat_time`: NULL when the client has no heartbeat row), and
    /// the fourth column — `is_lock` on 3.1/3.2, the client's
    /// `connection_config` on 3.3. Any values make a row; NULL text is empty.
    pub fn from_columns(
        flavour: Flavour,
        key: Option<String>,
        data: Option<String>,
        term: Option<i64>,
        is_lock: Option<i64>,
        connection_config: Option<&str>,
    ) -> RegistryRow {
        let (term, lock) = match flavour {
            // NOT NULL in every schema; a NULL would be a dead row
            Flavour::MySql31 | Flavour::Term32 => {
                (Term::LastTerm(term.unwrap_or(0)), is_lock == Some(1))
            }
            Flavour::Client33 => (
                Term::Client(term.map(|ms| ClientBeat {
                    last_heartbeat_ms: ms,
                    session_timeout: connection_config.and_then(ClientBeat::parse_session_timeout),
                })),
                false,
            ),
        };
        RegistryRow {
            key: key.unwrap_or_default(),
            data: data.unwrap_or_default(),
            term,
            lock,
        }
    }
}

/// One poll's rows judged by DS's rule at one moment.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Judged {
    /// The live server rows: the membership's listing.
    pub listing: Listing,
    /// Per master (host), how many fresh failover-lock rows it holds; a
    /// master with only stale lock rows is there with 0.
    pub held: HashMap<String, usize>,
    /// The server rows present but dead, with why.
    pub dead: Vec<(String, Dead)>,
}

/// DS's rule per row at `now_ms` (the daemon's clock when the poll was
/// sent): the live server rows make the listing, the fresh lock rows the
/// holders per master; lock rows outside `locks` are ignored. Pure: the
/// poll loop adds only its logging and skew checks.
pub fn judge_rows(
    rows: Vec<RegistryRow>,
    now_ms: i64,
    expire_after: Duration,
    locks: &FailoverLockLayout,
) -> Judged {
    let mut out = Judged::default();
    for row in rows {
        if row.lock {
            if let Some(master) = locks.lock_of(&row.key) {
                let n = out.held.entry(master).or_default();
                if row.term.judge(now_ms, expire_after).is_ok() {
                    *n += 1;
                }
            }
            continue;
        }
        match row.term.judge(now_ms, expire_after) {
            Ok(()) => out.listing.nodes.push(ListedNode {
                path: row.key,
                data: row.data.into_bytes(),
                ephemeral: true,
            }),
            Err(why) => out.dead.push((row.key, why)),
        }
    }
    out
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S6: Duration = Duration::from_secs(6);

    #[test]
    fn flavour_from_catalog_prefers_the_newest_shape() {
        let f = |cols: &[(&str, &str)]| Flavour::from_catalog(cols.iter().copied());
        assert_eq!(f(&[]), None);
        assert_eq!(
            f(&[("t_ds_mysql_registry_data", "last_term")]),
            Some(Flavour::MySql31)
        );
        let both = [
            ("t_ds_mysql_registry_data", "last_term"),
            ("t_ds_jdbc_registry_data", "last_term"),
        ];
        assert_eq!(f(&both), Some(Flavour::Term32));
        let dev = [
            ("t_ds_jdbc_registry_data", "client_id"),
            ("t_ds_jdbc_registry_client_heartbeat", "last_heartbeat_time"),
        ];
        assert_eq!(f(&dev), Some(Flavour::Client33));
        // client_id without the heartbeat table is no registry ds-reaper can judge
        assert_eq!(f(&dev[..1]), None);
    }

    #[test]
    fn lines_and_flavours_agree() {
        for line in DsLine::ALL {
            if let Some(fl) = Flavour::for_line(line) {
                assert!(fl.lines().contains(&line), "{line:?}");
            } else {
                assert!(line < DsLine::V3_1_0, "{line:?}");
            }
        }
    }

    #[test]
    fn term_rule_is_dss_delete_rule() {
        let now = 1_700_000_010_000;
        let t = |ms| Term::LastTerm(ms).judge(now, S6);
        assert_eq!(t(now), Ok(()));
        assert_eq!(t(now - 6_000), Ok(()), "DS deletes last_term < now - 6 s");
        assert_eq!(t(now - 6_001), Err(Dead::TermExpired));
        // a term from the future (a DS host's clock ahead) is live
        assert_eq!(t(now + 3_000), Ok(()));
    }

    #[test]
    fn clock_skew_is_seen_both_ways() {
        let sent = 1_700_000_010_000;
        // ahead: a term from the future
        assert_eq!(clock_skew(None, sent + 3_000, sent), Some(3_000));
        // behind: a term written after the previous poll, dated before it
        let prev = Some((sent - 20_000, sent - 1_000));
        assert_eq!(clock_skew(prev, sent - 5_000, sent), Some(-4_000));
        // a term written after the previous poll and dated after it proves nothing
        assert_eq!(clock_skew(prev, sent - 500, sent), None);
        // a term that did not move (a dead server) proves nothing, however old
        assert_eq!(
            clock_skew(Some((sent - 60_000, sent - 1_000)), sent - 60_000, sent),
            None
        );
        // a single poll of an old term proves nothing either
        assert_eq!(clock_skew(None, sent - 60_000, sent), None);
        assert_eq!(Term::Client(None).millis(), None);
        assert_eq!(Term::LastTerm(5).millis(), Some(5));
    }

    #[test]
    fn client_rule_is_dss_is_dead() {
        let now = 1_700_000_100_000;
        let beat = |age_ms: i64, cfg: &str| {
            Term::Client(Some(ClientBeat {
                last_heartbeat_ms: now - age_ms,
                session_timeout: ClientBeat::parse_session_timeout(cfg),
            }))
            .judge(now, S6)
        };
        assert_eq!(beat(5_000, r#"{"sessionTimeout":5000}"#), Ok(()));
        assert_eq!(
            beat(5_001, r#"{"sessionTimeout":5000}"#),
            Err(Dead::HeartbeatExpired)
        );
        // expire_after plays no part on 3.3
        assert_eq!(beat(30_000, r#"{"sessionTimeout":60000}"#), Ok(()));
        // an unreadable config falls back to DS's default of 60 s
        assert_eq!(beat(59_000, "garbage"), Ok(()));
        assert_eq!(beat(61_000, "{}"), Err(Dead::HeartbeatExpired));
        assert_eq!(Term::Client(None).judge(now, S6), Err(Dead::NoClient));
    }

    #[test]
    fn session_timeout_parsing() {
        let p = ClientBeat::parse_session_timeout;
        assert_eq!(
            p(r#"{"sessionTimeout":60000}"#),
            Some(Duration::from_secs(60))
        );
        assert_eq!(p(r#"{"sessionTimeout":-1}"#), None);
        assert_eq!(p(r#"{"other":1}"#), None);
        assert_eq!(p(""), None);
    }

    #[test]
    fn columns_make_rows_of_each_flavour() {
        let t = Some(1_000);
        let r = RegistryRow::from_columns(Flavour::MySql31, None, None, None, Some(1), None);
        assert_eq!(
            (r.key.as_str(), r.term, r.lock),
            ("", Term::LastTerm(0), true)
        );
        let r =
            RegistryRow::from_columns(Flavour::Term32, Some("/k".into()), None, t, Some(7), None);
        assert!(!r.lock);
        // 3.3: no lock rows, and no heartbeat row is a dead client
        let r = RegistryRow::from_columns(Flavour::Client33, None, None, None, Some(1), None);
        assert_eq!((r.term, r.lock), (Term::Client(None), false));
        let cfg = Some(r#"{"sessionTimeout":5000}"#);
        let r = RegistryRow::from_columns(Flavour::Client33, None, None, t, None, cfg);
        let beat = ClientBeat {
            last_heartbeat_ms: 1_000,
            session_timeout: Some(Duration::from_secs(5)),
        };
        assert_eq!(r.term, Term::Client(Some(beat)));
    }

    #[test]
    fn judged_rows_split_into_live_dead_and_held_locks() {
        let row = |key: &str, term: i64, lock: bool| RegistryRow {
            key: key.into(),
            data: "hb".into(),
            term: Term::LastTerm(term),
            lock,
        };
        let locks = reaper_core::registry::failover_lock_paths(DsLine::V3_2);
        let rows = vec![
            row("/nodes/worker/w1:1234", 10_000, false),
            row("/nodes/worker/w2:1234", 1_000, false),
            row("/lock/master-failover/m1:5678", 9_000, true),
            row("/lock/master-failover/m2:5678", 1_000, true),
            row("/lock/elsewhere", 10_000, true),
        ];
        let j = judge_rows(rows, 10_000, S6, &locks);
        let listed: Vec<&str> = j.listing.nodes.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(listed, ["/nodes/worker/w1:1234"]);
        assert_eq!(
            j.dead,
            [("/nodes/worker/w2:1234".to_string(), Dead::TermExpired)]
        );
        assert_eq!(j.held.get("m1:5678"), Some(&1));
        assert_eq!(j.held.get("m2:5678"), Some(&0));
        assert_eq!(j.held.len(), 2);
    }
}
