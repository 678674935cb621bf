//! The agent's loop: every `scan_interval` one scan (on the blocking pool),
//! then — once the agent knows which worker it stands for — the report
//! published as its node's data. Publishing does not depend on the worker
//! being registered: the agent keeps publishing while its worker is absent,
//! which is when its reports matter most (SPEC §12). It never touches the
//! database; it signals processes only to carry out the kill orders it lists
//! after each scan ([`crate::orders`]).

mod endpoints;
mod worker;

use crate::execpath::ExecPaths;
use crate::metrics::Metrics;
use crate::orders::Orders;
use crate::proc::{ProcFs, ProcSource};
use crate::publish::Publisher;
use crate::scan::{Scan, Scanner};
use crate::{AgentError, AgentSettings};
use reaper_core::agent::AgentReport;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use worker::{follow_worker, identity, list_orders, publish};

/// The whole stop fits SPEC §7's 10 s.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(8);
/// How long the first scan waits for the registry session at most.
const STARTUP_WAIT: Duration = Duration::from_secs(3);
/// No scan more often than this, whatever is configured.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// What `/readyz`, `/` and the log know of the agent.
#[derive(Debug, Default)]
struct Status {
    /// The worker node name the agent publishes for, once known.
    worker: Option<String>,
    /// Why it is not known yet.
    worker_problem: Option<String>,
    last_scan: Option<Scan>,
    /// The last report written, or None.
    last_report: Option<AgentReport>,
    /// Why the last publish failed; None after a success.
    publish_error: Option<String>,
    /// The worker JVM's pid from the last heartbeat that carried one: kept
    /// while the worker's node is absent (SPEC §12).
    worker_pid: Option<i64>,
    /// That heartbeat's `startupTime` (epoch ms), where it had one.
    worker_startup: Option<i64>,
    /// Since when the worker's node has been absent; None while present.
    absent_since: Option<tokio::time::Instant>,
    /// `auto` chose another worker: the scanner forgets the old JVM.
    rebound: bool,
    /// `auto` found several workers with this host's addresses.
    ambiguous: Option<String>,
    /// The lines the worker's node allows, when seen.
    worker_lines: Option<Vec<reaper_core::DsLine>>,
    /// When the last scan completed.
    scanned_at: Option<tokio::time::Instant>,
}

pub(crate) struct Shared {
    pub(crate) metrics: Metrics,
    /// 3 × `agent.scan_interval`: an older last scan makes the agent not ready.
    scan_stale_after: Duration,
    /// Where the agent can read YARN application ids for its line (§17).
    sources: worker::Sources,
    publisher: Arc<dyn Publisher>,
    status: Mutex<Status>,
    orders: Arc<Orders>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn refresh_gauges(&self) {
        self.metrics
            .registry_connected
            .set(i64::from(self.publisher.connected()));
    }

    /// Why the agent is not ready, or None (SPEC §12: a scan with unreadable
    /// processes names the first pids and the capability the agent lacks).
    pub(crate) fn not_ready(&self) -> Option<String> {
        let st = lock(&self.status);
        let mut why = Vec::new();
        if let (Some(at), Some(_)) = (st.scanned_at, &st.last_scan) {
            let age = tokio::time::Instant::now().saturating_duration_since(at);
            if age > self.scan_stale_after {
                why.push(format!(
                    "the last completed scan is {} s old (more than 3 × agent.scan_interval): \
                     a scan is stuck, its reports have stopped",
                    age.as_secs()
                ));
            }
        }
        if let Some(a) = &st.ambiguous {
            why.push(a.clone());
        }
        match &st.last_scan {
            None => why.push("no scan has completed yet".to_string()),
            Some(s) if s.unreadable > 0 => {
                let pids: Vec<String> = s.unreadable_pids.iter().map(i32::to_string).collect();
                let first = if pids.is_empty() {
                    String::new()
                } else {
                    format!(" (first pids: {})", pids.join(", "))
                };
                why.push(format!(
                    "{} process(es) unreadable{first}: {}",
                    s.unreadable,
                    s.denied.as_deref().unwrap_or("denied")
                ));
            }
            Some(_) => {}
        }
        if let Some(b) = st.last_scan.as_ref().and_then(|s| s.blind.as_ref()) {
            why.push(format!("blind: {b}"));
        }
        if st.worker.is_none() {
            why.push(
                st.worker_problem
                    .clone()
                    .unwrap_or_else(|| "this host's worker is not known yet".into()),
            );
        }
        if !self.publisher.connected() {
            why.push("not connected to the registry".into());
        } else if let Some(e) = &st.publish_error {
            why.push(format!("publishing failed: {e}"));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    pub(crate) fn summary(&self) -> String {
        let st = lock(&self.status);
        let tasks = st.last_scan.as_ref().map_or(0, |s| s.tasks.len());
        let lines = worker::lines_of(self.sources.line, st.worker_lines.as_deref());
        let ids = match self.sources.of(&lines) {
            s if s.is_empty() => "; no YARN application-id source for this line \
                 (no appInfo.log before 3.2 or with appId.collect = log, and no agent.task_log_base): \
                 its YARN tasks' applications are unknown"
                .to_string(),
            s => format!("; application ids from {}", s.join(", ")),
        };
        format!(
            "worker {}, {tasks} task(s) seen{ids}",
            st.worker.as_deref().unwrap_or("?")
        )
    }

    pub(crate) fn status_json(&self) -> serde_json::Value {
        let ready = self.not_ready();
        let st = lock(&self.status);
        json!({
            "worker": st.worker,
            "ready": ready.is_none(),
            "not_ready": ready,
            "registry_connected": self.publisher.connected(),
            "report": st.last_report,
        })
    }
}

/// The agent with its parts; [`crate::run`] builds it from the settings.
/// Tests and other registries plug in their own [`Publisher`] or
/// [`ProcSource`].
pub struct Agent {
    settings: AgentSettings,
    publisher: Option<Arc<dyn Publisher>>,
    source: Option<Box<dyn ProcSource>>,
}

impl Agent {
    pub fn new(settings: AgentSettings) -> Agent {
        Agent {
            settings,
            publisher: None,
            source: None,
        }
    }

    /// Publishes through `p` instead of the registry of the settings.
    pub fn with_publisher(mut self, p: Arc<dyn Publisher>) -> Agent {
        self.publisher = Some(p);
        self
    }

    /// Reads processes from `s` instead of `settings.proc_root`.
    pub fn with_source(mut self, s: Box<dyn ProcSource>) -> Agent {
        self.source = Some(s);
        self
    }

    /// Runs until `cancel`, serving HTTP on `listener`; closes the registry
    /// session (the agent's node goes at once) before returning.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        cancel: CancellationToken,
    ) -> Result<(), AgentError> {
        let settings = self.settings.validated()?;
        let publisher: Arc<dyn Publisher> = match self.publisher {
            Some(p) => p,
            None => settings
                .registry
                .start(&settings.path, settings.line, cancel.child_token()),
        };
        let source = self
            .source
            .unwrap_or_else(|| Box::new(ProcFs::new(&settings.proc_root)));
        let folder = settings
            .process_dir
            .clone()
            .unwrap_or_else(|| settings.exec_base.join("exec").join("process"));
        let scanner = Scanner::new(source, ExecPaths::with_folder(folder, settings.line))
            .with_task_log_base(settings.task_log_base.clone())
            .with_clock_skew(settings.clock_skew_tolerance)
            .with_read_timeout(settings.scan_timeout.unwrap_or(settings.scan_interval));
        let metrics = Metrics::new();
        let orders = Arc::new(Orders::new(
            crate::kill::KillRules {
                allow: settings.allow_kill,
                grace: settings.kill_grace,
            },
            settings.proc_root.clone(),
            metrics.clone(),
        ));
        let shared = Arc::new(Shared {
            scan_stale_after: settings.scan_interval.max(MIN_INTERVAL) * 3,
            sources: worker::Sources {
                line: settings.line,
                task_log: settings.task_log_base.is_some(),
            },
            metrics,
            orders,
            publisher: publisher.clone(),
            status: Mutex::new(Status {
                worker: settings.worker.clone(),
                ..Status::default()
            }),
        });
        log_start(&settings, &listener);
        shared.orders.log_start();
        let http_cancel = cancel.clone();
        let app = crate::http::router(shared.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { http_cancel.cancelled().await })
                .await
        });
        let result = scan_loop(&settings, scanner, &shared, &cancel).await;
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
        cancel.cancel();
        let drain = async {
            publisher.close().await;
            server.await
        };
        let served = match tokio::time::timeout(SHUTDOWN_DEADLINE, drain).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(AgentError::Http(e)),
            Ok(Err(e)) => Err(AgentError::HttpTask(e)),
            Err(_) => {
                tracing::warn!("agent shutdown deadline passed; exiting anyway");
                Ok(())
            }
        };
        tracing::info!("agent stopped");
        result.and(served)
    }
}

fn log_start(settings: &AgentSettings, listener: &tokio::net::TcpListener) {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        exec_base = %settings.exec_base.display(),
        worker = settings.worker.as_deref().unwrap_or("auto"),
        registry = settings.registry.name(),
        scan_interval = ?settings.scan_interval,
        allow_kill = settings.allow_kill,
        listen = ?listener.local_addr().ok(),
        "starting the ds-reaper agent"
    );
}

/// The systemd watchdog period to ping at, if one is set.
fn watchdog_period() -> Option<Duration> {
    let mut usec = 0u64;
    sd_notify::watchdog_enabled(false, &mut usec)
        .then(|| Duration::from_micros(usec / 2).max(Duration::from_millis(500)))
}

async fn scan_loop(
    settings: &AgentSettings,
    scanner: Scanner,
    shared: &Arc<Shared>,
    cancel: &CancellationToken,
) -> Result<(), AgentError> {
    let interval = settings.scan_interval.max(MIN_INTERVAL);
    let watchdog = watchdog_period();
    let mut scanner = Some(scanner);
    let mut seq: u64 = 0;
    if !wait_for_session(shared, interval, cancel).await {
        return Ok(());
    }
    let mut ticker = Ticker {
        next: tokio::time::Instant::now(),
        interval,
        watchdog,
    };
    let mut ready_sent = false;
    let exec_base = settings.exec_base.display().to_string();
    loop {
        if !ticker.tick(cancel).await {
            return Ok(());
        }
        let Some(s) = scanner.take() else {
            return Err(AgentError::ScannerGone);
        };
        let worker = identity(settings, shared).await;
        let (s, scan) = scan_once(settings, shared, s, worker.as_deref()).await?;
        scanner = Some(s);
        seq += 1;
        observe(shared, &scan);
        report(shared, worker, seq, &exec_base, scan).await;
        if !ready_sent {
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
            ready_sent = true;
        }
    }
}

/// The session is usually up within milliseconds: give it a moment before
/// the first report rather than count a publish error at every start.
/// False when cancelled meanwhile.
async fn wait_for_session(shared: &Shared, interval: Duration, cancel: &CancellationToken) -> bool {
    let settle = tokio::time::Instant::now() + interval.min(STARTUP_WAIT);
    while !shared.publisher.connected() && tokio::time::Instant::now() < settle {
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    true
}

/// When the next scan is due, with the watchdog pinged meanwhile.
struct Ticker {
    next: tokio::time::Instant,
    interval: Duration,
    watchdog: Option<Duration>,
}

impl Ticker {
    /// Waits until the next scan is due; false when cancelled first.
    async fn tick(&mut self, cancel: &CancellationToken) -> bool {
        loop {
            let now = tokio::time::Instant::now();
            let wake = match self.watchdog {
                Some(w) => self.next.min(now + w),
                None => self.next,
            };
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep_until(wake) => {}
            }
            if self.watchdog.is_some() {
                // from the scan loop, so a wedged loop stops the pings
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
            }
            if tokio::time::Instant::now() < self.next {
                continue;
            }
            self.next += self.interval;
            if self.next < tokio::time::Instant::now() {
                self.next = tokio::time::Instant::now() + self.interval;
            }
            return true;
        }
    }
}

/// One scan on the blocking pool, with the worker's kill orders carried out
/// against it at once; the scanner comes back with it.
async fn scan_once(
    settings: &AgentSettings,
    shared: &Shared,
    mut s: Scanner,
    worker: Option<&str>,
) -> Result<(Scanner, Scan), AgentError> {
    let mut kill_orders = Vec::new();
    if let Some(w) = worker {
        follow_worker(settings, shared, w).await;
        kill_orders = list_orders(shared, w).await;
    }
    let worker_pid = lock(&shared.status).worker_pid;
    {
        let mut st = lock(&shared.status);
        if std::mem::take(&mut st.rebound) {
            s.forget_worker();
        }
        s.set_worker(worker::expected_jvm(&st, settings.stale_after, worker));
        if settings.line.is_none() {
            if let Some(lines) = &st.worker_lines {
                s.set_lines(lines);
            }
        }
    }
    let (orders, rt) = (shared.orders.clone(), tokio::runtime::Handle::current());
    tokio::task::spawn_blocking(move || {
        let scan = s.scan();
        if !kill_orders.is_empty() {
            // checked against this scan, at once
            orders.carry_out(kill_orders, &scan, worker_pid, &rt);
        }
        (s, scan)
    })
    .await
    .map_err(AgentError::Scan)
}

/// Keeps the scan for the status and publishes its report, once the agent
/// knows its worker.
async fn report(shared: &Shared, worker: Option<String>, seq: u64, exec_base: &str, scan: Scan) {
    let lines = {
        let st = lock(&shared.status);
        worker::lines_of(shared.sources.line, st.worker_lines.as_deref())
    };
    let report = AgentReport {
        tty_tasks: scan.tty_tasks,
        app_id_sources: Some(shared.sources.of(&lines)),
        worker: worker.clone().unwrap_or_default(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        seq,
        scan_started_at: scan.started_at,
        scan_ms: scan.duration.as_millis().try_into().unwrap_or(u64::MAX),
        exec_base: exec_base.to_string(),
        unreadable: scan.unreadable,
        orders: shared.orders.outcomes(),
        blind: scan.blind.clone(),
        tasks: scan.tasks.clone(),
    };
    {
        let mut st = lock(&shared.status);
        st.last_scan = Some(scan);
        st.scanned_at = Some(tokio::time::Instant::now());
    }
    if let Some(worker) = worker {
        publish(shared, &worker, report).await;
    }
    shared.refresh_gauges();
}

fn observe(shared: &Shared, scan: &Scan) {
    let m = &shared.metrics;
    m.scans_total.inc();
    m.scan_duration_seconds.observe(scan.duration.as_secs_f64());
    m.task_processes
        .set(scan.task_processes.try_into().unwrap_or(i64::MAX));
    m.tty_tasks
        .set(scan.tty_tasks.try_into().unwrap_or(i64::MAX));
    m.unreadable_processes
        .set(scan.unreadable.try_into().unwrap_or(i64::MAX));
    let before = lock(&shared.status)
        .last_scan
        .as_ref()
        .map_or(0, |s| s.unreadable);
    if scan.unreadable > 0 && before == 0 {
        tracing::warn!(
            unreadable = scan.unreadable,
            first_pids = ?scan.unreadable_pids,
            why = scan.denied.as_deref().unwrap_or(""),
            "some processes could not be read: the reports prove no absence"
        );
    } else if scan.unreadable == 0 && before > 0 {
        tracing::info!("every process is readable again");
    }
    let was = lock(&shared.status)
        .last_scan
        .as_ref()
        .and_then(|s| s.blind.clone());
    if scan.blind != was {
        match &scan.blind {
            Some(why) => {
                tracing::warn!(why = %why, "the agent is blind: its reports prove nothing")
            }
            None => tracing::info!("the agent sees the process folder and the worker's JVM again"),
        }
    }
}
