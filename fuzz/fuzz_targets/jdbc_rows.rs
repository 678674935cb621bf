//! Rows of DS's database registry as the poll reads them — 3.1
//! `t_ds_mysql_registry_data`, 3.2 `t_ds_jdbc_registry_data` with
//! `last_term`, 3.3 with client heartbeats, and the failover-lock rows —
//! judged by DS's rule and fed to the membership. The input: a flavour byte,
//! then rows as `mysql -B` prints them (key, data, term, and `is_lock` or
//! `connection_config`, tab-separated, `NULL`), polls separated by a line
//! `--- <ms later>`. No column values panic; every row is listed live, dead,
//! or a lock row; a listed row is live by the rule; the membership never
//! has a host live and lost at once.
#![no_main]
// flavour.rs is pure (std, serde_json and reaper-core): compiled in here, so
// that the fuzz build does not pull in sqlx.
#[allow(dead_code)]
#[path = "../../crates/reaper-jdbc/src/flavour.rs"]
mod flavour;

use flavour::{judge_rows, Flavour, RegistryRow};
use libfuzzer_sys::fuzz_target;
use reaper_core::registry::{FailoverLockLayout, LayoutMode, Membership};
use reaper_core::Zone;
use std::time::Duration;

const T0_MS: i64 = 1_700_000_000_000;
/// DS's default term-refresh-interval (2 s) × term-expire-times (3).
const EXPIRE_AFTER: Duration = Duration::from_secs(6);

fn column(s: Option<&str>) -> Option<String> {
    s.filter(|v| *v != "NULL").map(str::to_string)
}

fn int(s: Option<&str>) -> Option<i64> {
    s.and_then(|v| v.trim().parse().ok())
}

fuzz_target!(|data: &[u8]| {
    let Some((sel, text)) = data.split_first() else {
        return;
    };
    let flavour = [Flavour::MySql31, Flavour::Term32, Flavour::Client33][*sel as usize % 3];
    let text = String::from_utf8_lossy(text);
    let lines = flavour.lines();
    let locks = FailoverLockLayout::for_lines(lines);
    let zone: Zone = "UTC".parse().expect("UTC");
    let t0 = chrono::DateTime::from_timestamp_millis(T0_MS).expect("instant");
    let mut m = Membership::new(LayoutMode::for_line(Some(lines[0])), zone, t0, "connecting");
    let mut now_ms = T0_MS;
    for (i, poll) in text.split("--- ").take(16).enumerate() {
        let mut rows_text = poll.lines();
        if i > 0 {
            let after = rows_text.next().and_then(|l| l.trim().parse::<u32>().ok());
            now_ms += i64::from(after.unwrap_or(0));
        }
        let rows: Vec<RegistryRow> = rows_text
            .take(64)
            .map(|l| {
                let mut c = l.split('\t');
                let (key, data, term, fourth) = (c.next(), c.next(), c.next(), c.next());
                RegistryRow::from_columns(
                    flavour,
                    column(key),
                    column(data),
                    int(term),
                    int(fourth),
                    column(fourth).as_deref(),
                )
            })
            .collect();
        let n_locks = rows.iter().filter(|r| r.lock).count();
        assert!(
            n_locks == 0 || flavour != Flavour::Client33,
            "3.3 has no lock rows here"
        );
        let judged = judge_rows(rows.clone(), now_ms, EXPIRE_AFTER, &locks);
        assert_eq!(
            judged.listing.nodes.len() + judged.dead.len() + n_locks,
            rows.len()
        );
        for node in &judged.listing.nodes {
            assert!(node.ephemeral);
            assert!(
                rows.iter().any(|r| !r.lock
                    && r.key == node.path
                    && r.data.as_bytes() == node.data
                    && r.term.judge(now_ms, EXPIRE_AFTER).is_ok()),
                "listed, but not a live row: {}",
                node.path
            );
        }
        for (key, _) in &judged.dead {
            assert!(rows
                .iter()
                .any(|r| !r.lock && &r.key == key && r.term.judge(now_ms, EXPIRE_AFTER).is_err()));
        }
        assert!(judged.held.values().sum::<usize>() <= n_locks);

        let now = chrono::DateTime::from_timestamp_millis(now_ms).expect("instant");
        m.apply_listing(judged.listing, now);
        m.apply_failover_locks(&judged.held, now);
        let v = m.view();
        for (host, _) in v.workers.iter() {
            assert!(!v.lost_workers.contains_key(host), "live and lost: {host}");
        }
        for (host, _) in v.masters.iter() {
            assert!(!v.lost_masters.contains_key(host), "live and lost: {host}");
        }
    }
});
