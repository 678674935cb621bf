//! The engine: one sweep and one effects executor, written once against
//! the ports (`reaper_core::ports`), shared by the daemon (`run`), `check`,
//! `reap` and the HTTP API so that they all judge and write the same way.
//!
//! - [`sweep`]: one sweep in five steps — [`read`] → plan ([`judge`]) →
//!   publish → execute ([`effects`]) → finish; `check` is the same sweep
//!   with nothing published or executed. [`records`]: what it audits of
//!   what it judged.
//! - [`driver`]: when sweeps run (the interval, the plan's wake-up, membership changes).
//! - [`effects`]: the one executor — gate, intent, port call, outcome.
//! - [`reap`]: the manual form for one task, through the same executor.
//! - [`line`]: which DS line to work with.
//! - [`ghosts`], [`workflows`], [`anomalies`], [`remote`]: each finding's own read and publish parts.

mod anomalies;
pub mod driver;
mod effects;
mod error;
mod fault;
#[cfg(test)]
mod ghost_tests;
mod ghosts;
mod judge;
mod line;
mod read;
mod reap;
mod records;
mod remote;
mod sweep;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_anomalies;
#[cfg(test)]
mod tests_effects;
#[cfg(test)]
mod tests_holds;
#[cfg(test)]
mod tests_resume;
mod workflows;

pub use effects::{ActionResult, Gate, GateClosed};
pub use error::Error;
pub use judge::Checked;
pub use line::resolve_line;
pub use reap::{PreparedReap, ReapError, ReapRequest};

use crate::audit::Audit;
use crate::config::Settings;
use crate::metrics::Metrics;
use reaper_core::ports::{
    Clock, Leadership, RegistrySource, ResourceManager, TaskStore, ViewWatch,
};
use reaper_core::registry::Detected;
use reaper_core::{DsLine, Instant, Reason, RegistryView, SafetyState, Zombie};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Tick,
    Event,
    Requested,
}

/// How a sweep ended (the `result` label of `sweeps_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepResult {
    Ok,
    Error,
    Skipped,
}

impl SweepResult {
    pub fn as_str(self) -> &'static str {
        match self {
            SweepResult::Ok => "ok",
            SweepResult::Error => "error",
            SweepResult::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for SweepResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of the latest sweep, for `/api/v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct SweepSummary {
    pub at: Instant,
    pub result: SweepResult,
    pub detail: Option<String>,
    /// incremental | full
    pub kind: &'static str,
    pub candidates: usize,
    pub zombies: usize,
    pub actions: usize,
    /// Workflow findings (SPEC §13).
    pub workflows: usize,
}

impl SweepSummary {
    /// A sweep that has judged nothing yet.
    fn skipped(at: Instant) -> SweepSummary {
        SweepSummary {
            at,
            result: SweepResult::Skipped,
            detail: None,
            kind: "incremental",
            candidates: 0,
            zombies: 0,
            actions: 0,
            workflows: 0,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Status {
    pub line: Option<DsLine>,
    /// Why the daemon holds (line disagreement, ...), if it does.
    pub line_hold: Option<String>,
    pub last_sweep: Option<SweepSummary>,
    /// The zombies of the last completed sweep, before its actions. Kept
    /// typed and shared: views are built per request, so a huge zombie count
    /// does not cost its JSON size in resident memory.
    pub zombies: Arc<Vec<Zombie>>,
    pub zombies_at: Option<Instant>,
    pub brake: reaper_core::BrakeState,
    pub db_error: Option<String>,
    /// Reads of the last sweeps that the store could not serve as asked (a
    /// schema mismatch, undecodable rows), by what was read: a fault that
    /// `/readyz` shows, not "nothing found". Cleared by a good read.
    pub read_errors: std::collections::BTreeMap<&'static str, String>,
    /// The workflow findings of the last sweep (SPEC §13).
    pub workflows: Arc<Vec<reaper_core::workflow::WorkflowFinding>>,
    /// The ghost processes of the last sweep (SPEC §15).
    pub ghosts: Arc<Vec<reaper_core::ghost::Ghost>>,
    /// Stuck under a live owner, of the last sweep (SPEC §16).
    pub anomalies: Arc<Vec<reaper_core::anomaly::Anomaly>>,
    /// One point per completed sweep of the last hour, oldest first, for
    /// the status page's charts.
    pub history: std::collections::VecDeque<SweepPoint>,
    /// When the last plan said a later sweep could newly act (the driver's deadline).
    pub wake: Option<Instant>,
}

/// What the status page charts of one sweep.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SweepPoint {
    pub at: Instant,
    pub zombies: usize,
    pub workflows: usize,
    pub actions: usize,
    pub duration_ms: u64,
}

/// The charts' window, and a bound on its points whatever the sweep interval.
pub const HISTORY_WINDOW: chrono::TimeDelta = chrono::TimeDelta::hours(1);
pub const HISTORY_POINTS: usize = 3600;

/// What the sweeps remember between passes.
#[derive(Default)]
struct SweepState {
    safety: SafetyState,
    /// Zombies already reported as `detected`, by task id.
    seen: HashMap<i64, Reason>,
    /// Workflow findings already reported, by workflow instance id.
    workflows_seen: HashMap<i64, reaper_core::workflow::WorkflowReason>,
    /// Anomalies already audited, by [`reaper_core::anomaly::Anomaly::key`].
    anomalies_seen: std::collections::HashSet<String>,
    last_full: Option<Instant>,
    schema: Option<reaper_core::ports::SchemaInfo>,
    warned_states: Option<DsLine>,
    warned_line: Option<String>,
    ghosts: ghosts::GhostState,
    /// The ghost applications the last full scan judged: shown (never acted
    /// on) by the incremental sweeps that do not read their rows.
    ghost_apps: Arc<Vec<reaper_core::ghost::Ghost>>,
}

/// The adapters an engine runs on.
pub struct Ports {
    pub store: Arc<dyn TaskStore>,
    pub registry: Arc<dyn RegistrySource>,
    pub leader: Option<Arc<dyn Leadership>>,
    pub clock: Arc<dyn Clock>,
    /// SPEC §17: the ResourceManagers; None with `[yarn]` off.
    pub rm: Option<Arc<dyn ResourceManager>>,
}

pub struct Engine {
    pub settings: Settings,
    store: Arc<dyn TaskStore>,
    registry: Arc<dyn RegistrySource>,
    leader: Option<Arc<dyn Leadership>>,
    clock: Arc<dyn Clock>,
    pub metrics: Metrics,
    pub audit: Arc<Audit>,
    status: RwLock<Status>,
    state: tokio::sync::Mutex<SweepState>,
    started: Instant,
    /// SPEC §17: the RMs and the ids learned; None with `[yarn]` off.
    rm: Option<Arc<dyn ResourceManager>>,
    known_apps: Option<Arc<crate::yarn::KnownApps>>,
    /// Application ids the RM said are final (see `remote::remember_final`).
    final_apps: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

pub type SharedEngine = Arc<Engine>;

impl Engine {
    pub fn new(settings: Settings, ports: Ports, metrics: Metrics) -> Engine {
        let audit = Arc::new(Audit::new(settings.audit.path.clone()));
        let started = ports.clock.now();
        let rm = ports.rm;
        let known_apps = rm.as_ref().map(|_| {
            Arc::new(crate::yarn::KnownApps::load_at(
                crate::yarn::KnownApps::beside(&settings.audit.path),
                started,
            ))
        });
        Engine {
            settings,
            store: ports.store,
            registry: ports.registry,
            leader: ports.leader,
            clock: ports.clock,
            metrics,
            audit,
            status: RwLock::new(Status::default()),
            state: tokio::sync::Mutex::new(SweepState::default()),
            started,
            rm,
            known_apps,
            final_apps: Default::default(),
        }
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The latest registry view.
    pub fn view(&self) -> Arc<RegistryView> {
        self.registry.view()
    }

    pub fn watch(&self) -> Box<dyn ViewWatch> {
        self.registry.watch()
    }

    pub fn detected(&self) -> Detected {
        self.registry.detected()
    }

    /// zookeeper | etcd | jdbc
    pub fn registry_kind(&self) -> &'static str {
        self.registry.kind()
    }

    /// Why the daemon is not ready, or None when it is.
    pub async fn not_ready(&self) -> Option<String> {
        let e = self;
        let view = e.view();
        if let reaper_core::ViewState::Invalid { reason, .. } = &view.state {
            return Some(format!(
                "registry view invalid ({}): {reason}",
                e.registry_kind()
            ));
        }
        match tokio::time::timeout(std::time::Duration::from_secs(3), e.ping_store()).await {
            Ok(Ok(())) => None,
            Ok(Err(err)) => Some(format!("database: {err}")),
            Err(_) => Some("database: no answer within 3s".into()),
        }
    }

    pub async fn ping_store(&self) -> Result<(), reaper_core::ports::PortError> {
        self.store.ping().await
    }

    /// Ends the registry session and resigns leadership at once, so that a
    /// standby takes over now, not after a session timeout.
    pub async fn close(&self) {
        if let Some(l) = &self.leader {
            l.close().await;
        }
        self.registry.close().await;
    }

    pub fn has_election(&self) -> bool {
        self.leader.is_some()
    }

    pub fn is_leader(&self) -> bool {
        self.leader.as_ref().is_none_or(|l| l.is_leader())
    }

    /// The current leader's id, when election is on and it is known.
    pub fn leader_id(&self) -> Option<String> {
        self.leader.as_ref().and_then(|l| l.leader_id())
    }

    fn status_write(&self) -> std::sync::RwLockWriteGuard<'_, Status> {
        self.status.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn status_read(&self) -> std::sync::RwLockReadGuard<'_, Status> {
        self.status.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Refreshes the gauges that mirror live state (called per sweep and per scrape).
    pub fn refresh_gauges(&self, view: &RegistryView) {
        let m = &self.metrics;
        m.live_workers.set(view.workers.len() as i64);
        m.live_masters.set(view.masters.len() as i64);
        m.registry_view_valid.set(view.is_valid() as i64);
        m.leader.set(self.is_leader() as i64);
        let st = self.registry.stats();
        Metrics::sync_counter(&m.zk_session_expirations_total, st.session_expirations);
        Metrics::sync_counter(&m.zk_errors_total, st.errors);
        m.brake_engaged
            .set(self.status_read().brake.engaged() as i64);
        let now = self.now();
        // SPEC §14 jdbc: the servers to check, while the outage holds
        let outage: Vec<String> = view
            .registry_outage
            .iter()
            .filter(|o| o.holds(now))
            .flat_map(|o| &o.servers)
            .map(|s| match s.kind {
                reaper_core::NodeKind::Worker => format!("worker {}", s.host),
                reaper_core::NodeKind::Master => format!("master {}", s.host),
            })
            .collect();
        m.set_registry_outage(&outage);
        let stale_after = self.settings.reconcile.agent_stale_after;
        let fresh = view
            .agents
            .values()
            .filter(|a| a.fresh(now, stale_after))
            .count();
        m.agents.with_label_values(&["fresh"]).set(fresh as i64);
        m.agents
            .with_label_values(&["stale"])
            .set((view.agents.len() - fresh) as i64);
        for (table, n) in self.store.rows_skipped() {
            Metrics::sync_counter(&m.rows_skipped_total.with_label_values(&[&table]), n);
        }
    }

    fn db_failed(&self, e: &reaper_core::ports::PortError) {
        self.metrics.db_errors_total.inc();
        self.status_write().db_error = Some(e.to_string());
    }

    /// A read of a sweep step failed, and not for want of the database
    /// (the caller counts that): a store without the capability is skipped
    /// quietly; a read it cannot serve as asked (a schema mismatch) is
    /// logged and kept for `/readyz`, not taken for "nothing found".
    fn read_fault(&self, what: &'static str, e: &reaper_core::ports::PortError) {
        if e.kind() == reaper_core::ports::PortErrorKind::Unsupported {
            tracing::debug!(error = %e, "{what}: not read by this store");
        } else {
            tracing::warn!(error = %e, kind = e.metric_label(), "{what} cannot be read; left out of this sweep");
            self.status_write().read_errors.insert(what, e.to_string());
        }
    }

    /// A read of a sweep step succeeded: a fault it had is over.
    fn read_ok(&self, what: &'static str) {
        let cleared = self.status_read().read_errors.contains_key(what);
        if cleared {
            self.status_write().read_errors.remove(what);
        }
    }

    /// The first read fault `/readyz` shows, if any.
    pub fn read_error(&self) -> Option<String> {
        let s = self.status_read();
        let (what, e) = s.read_errors.iter().next()?;
        Some(format!("{what}: {e}"))
    }
}

/// A row's host in a message a person reads: the host, or that it has none.
pub fn host_words(host: Option<&str>) -> String {
    match host.map(str::trim) {
        Some(h) if !h.is_empty() && !h.eq_ignore_ascii_case("null") => h.to_string(),
        _ => "none".to_string(),
    }
}

/// A mutex's guard, whether or not a holder panicked (the data is plain).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
