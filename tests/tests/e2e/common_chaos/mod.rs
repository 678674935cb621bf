//! Helpers of the chaos suite: a TCP proxy that can cut the database off, a
//! daemon respawn on the same config, and the invariants every scenario checks.

#![allow(dead_code)]

use anyhow::{bail, Result};
use reaper_e2e::Daemon;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Brake and rate relaxed so the scenarios exercise the failure under test,
/// not the brake (it has its own tests).
pub const RELAXED: &str = "[brake]\nmax_lost_worker_fraction = 0.99\nmin_zombies = 1000000\n\
                           [rate]\nper_minute = 1000000\n";

/// The simulation's loopback proxy: `down()` drops every open connection and
/// refuses new ones until `up()`, like a database that went away.
pub use ds_sim::proxy::Proxy;

/// The URL of `url`'s database through the proxy on `port` (host:port replaced).
pub fn via_proxy(url: &str, port: u16) -> String {
    // scheme://user:pass@host:port/db
    let (scheme, rest) = url.split_once("://").unwrap_or(("mysql", url));
    let (auth, tail) = rest.rsplit_once('@').unwrap_or(("", rest));
    let path = tail.find('/').map(|i| &tail[i..]).unwrap_or("");
    if auth.is_empty() {
        format!("{scheme}://127.0.0.1:{port}{path}")
    } else {
        format!("{scheme}://{auth}@127.0.0.1:{port}{path}")
    }
}

pub fn kill(pid: u32, sig: &str) -> Result<()> {
    let st = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    if !st.success() {
        bail!("kill {sig} {pid} failed");
    }
    Ok(())
}

/// Kills the daemon with SIGKILL and starts it again on the same config,
/// audit file and port (its log is appended to).
pub async fn kill9_and_respawn(d: &mut Daemon, env: &[(&str, &str)]) -> Result<()> {
    d.crash_and_restart(env).await
}

/// The daemon process is still running and answers /healthz.
pub async fn assert_alive(d: &mut Daemon) -> Result<()> {
    if let Some(st) = d.child.try_wait()? {
        bail!("ds-reaper exited ({st}); log:\n{}", d.log_text());
    }
    let (code, _) = d.get("/healthz").await?;
    if code != 200 {
        bail!("/healthz answered {code}");
    }
    Ok(())
}

/// What the audit trail says per task.
#[derive(Debug, Default)]
pub struct AuditSummary {
    /// task -> number of `done` records
    pub done: BTreeMap<i64, usize>,
    pub lost_race: BTreeSet<i64>,
    pub errors: BTreeSet<i64>,
    /// tasks with an `intent` that no outcome followed
    pub orphan_intents: BTreeSet<i64>,
    pub detected: BTreeMap<i64, usize>,
}

/// Checks that every `intent` is followed by an outcome for the same task
/// (`done`, `lost_race`, `error`); intents left open (by a crash) are listed.
pub fn summarize_audit(records: &[Value]) -> AuditSummary {
    let mut s = AuditSummary::default();
    let mut open: BTreeSet<i64> = BTreeSet::new();
    for r in records {
        let Some(id) = r["task_id"].as_i64() else {
            continue;
        };
        match r["event"].as_str().unwrap_or("") {
            "detected" => *s.detected.entry(id).or_default() += 1,
            // A second intent while one is open: the first never got its outcome.
            "intent" if !open.insert(id) => {
                s.orphan_intents.insert(id);
            }
            "done" => {
                open.remove(&id);
                *s.done.entry(id).or_default() += 1;
            }
            "lost_race" => {
                open.remove(&id);
                s.lost_race.insert(id);
            }
            "error" => {
                open.remove(&id);
                s.errors.insert(id);
            }
            _ => {}
        }
    }
    s.orphan_intents.extend(open);
    s
}

/// A small deterministic generator (no extra dependency for randomness).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
