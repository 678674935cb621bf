//! The agent's loop: every `scan_interval` one scan (on the blocking pool),
//! then — once the agent knows which worker it stands for — the report
//! published as its node's data. Publishing does not depend on the worker
//! being registered: the agent keeps publishing while its worker is absent,
//! which is when its reports matter most (SPEC §12). It never touches the
//! database; it signals processes only to carry out the kill orders it lists
//! after each scan ([`crate::orders`]).

use crate::execpath::ExecPaths;
use crate::host::{pick, HostIdentity, Pick};
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
    /// The lines the worker's node allows, when seen.
    worker_lines: Option<Vec<reaper_core::DsLine>>,
}

pub(crate) struct Shared {
    pub(crate) metrics: Metrics,
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
        format!(
            "worker {}, {tasks} task(s) seen",
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
            .with_task_log_base(settings.task_log_base.clone());
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
            metrics,
            orders,
            publisher: publisher.clone(),
            status: Mutex::new(Status {
                worker: settings.worker.clone(),
                ..Status::default()
            }),
        });
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
            Ok(Err(e)) => Err(AgentError::Internal(format!("the HTTP task: {e}"))),
            Err(_) => {
                tracing::warn!("agent shutdown deadline passed; exiting anyway");
                Ok(())
            }
        };
        tracing::info!("agent stopped");
        result.and(served)
    }
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
    // The session is usually up within milliseconds: give it a moment before
    // the first report rather than count a publish error at every start.
    let settle = tokio::time::Instant::now() + interval.min(STARTUP_WAIT);
    while !shared.publisher.connected() && tokio::time::Instant::now() < settle {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    let mut next = tokio::time::Instant::now();
    let mut ready_sent = false;
    let exec_base = settings.exec_base.display().to_string();
    loop {
        let now = tokio::time::Instant::now();
        let wake = match watchdog {
            Some(w) => next.min(now + w),
            None => next,
        };
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep_until(wake) => {}
        }
        if watchdog.is_some() {
            // from this loop, so a wedged loop stops the pings
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
        }
        if tokio::time::Instant::now() < next {
            continue;
        }
        next += interval;
        if next < tokio::time::Instant::now() {
            next = tokio::time::Instant::now() + interval;
        }

        let Some(mut s) = scanner.take() else {
            return Err(AgentError::Internal("the scanner is gone".into()));
        };
        let worker = identity(settings, shared).await;
        let mut kill_orders = Vec::new();
        if let Some(w) = &worker {
            follow_worker(settings, shared, w).await;
            kill_orders = list_orders(shared, w).await;
        }
        let worker_pid = lock(&shared.status).worker_pid;
        {
            let st = lock(&shared.status);
            s.set_worker_pid(st.worker_pid);
            if settings.line.is_none() {
                if let Some(lines) = &st.worker_lines {
                    s.set_lines(lines);
                }
            }
        }
        let (orders, rt) = (shared.orders.clone(), tokio::runtime::Handle::current());
        let (s, scan) = tokio::task::spawn_blocking(move || {
            let scan = s.scan();
            if !kill_orders.is_empty() {
                // checked against this scan, at once
                orders.carry_out(kill_orders, &scan, worker_pid, &rt);
            }
            (s, scan)
        })
        .await
        .map_err(|e| AgentError::Internal(format!("the scan failed: {e}")))?;
        scanner = Some(s);
        seq += 1;
        observe(shared, &scan);

        let report = AgentReport {
            worker: worker.clone().unwrap_or_default(),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            seq,
            scan_started_at: scan.started_at,
            scan_ms: scan.duration.as_millis().try_into().unwrap_or(u64::MAX),
            exec_base: exec_base.clone(),
            unreadable: scan.unreadable,
            orders: shared.orders.outcomes(),
            blind: scan.blind.clone(),
            tasks: scan.tasks.clone(),
        };
        lock(&shared.status).last_scan = Some(scan);
        if let Some(worker) = worker {
            publish(shared, &worker, report).await;
        }
        shared.refresh_gauges();
        if !ready_sent {
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
            ready_sent = true;
        }
    }
}

fn observe(shared: &Shared, scan: &Scan) {
    let m = &shared.metrics;
    m.scans_total.inc();
    m.scan_duration_seconds.observe(scan.duration.as_secs_f64());
    m.task_processes
        .set(scan.task_processes.try_into().unwrap_or(i64::MAX));
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

/// The new kill orders in the worker's order folder; none when it cannot be
/// read now (the last listing stands: outcomes are still answered).
async fn list_orders(shared: &Shared, worker: &str) -> Vec<reaper_core::order::KillOrder> {
    if !shared.publisher.connected() {
        return Vec::new();
    }
    match shared.publisher.orders(worker).await {
        Ok(nodes) => shared.orders.listed(&nodes),
        Err(e) => {
            tracing::debug!(error = %e, worker, "cannot list the kill orders; trying again after the next scan");
            Vec::new()
        }
    }
}

/// Reads the worker's node: the JVM pid its heartbeat carries and the lines
/// its layout and format allow. An absent node or a failed read keeps what
/// was seen last.
async fn follow_worker(settings: &AgentSettings, shared: &Shared, worker: &str) {
    if !shared.publisher.connected() {
        return;
    }
    let node = match shared.publisher.worker(worker).await {
        Ok(Some(n)) => n,
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(error = %e, worker, "cannot read the worker's node; keeping what was seen");
            return;
        }
    };
    let mut st = lock(&shared.status);
    if let Some(pid) = node.process_id {
        if st.worker_pid != Some(pid) {
            tracing::info!(worker, pid, "the worker's JVM, from its heartbeat");
        }
        st.worker_pid = Some(pid);
    }
    if settings.line.is_none() && st.worker_lines.as_ref() != Some(&node.lines) {
        let names: Vec<&str> = node.lines.iter().map(|l| l.as_str()).collect();
        tracing::info!(worker, lines = ?names, "reading execute paths as the lines the worker's node allows");
        st.worker_lines = Some(node.lines);
    }
}

/// The worker this agent stands for: configured, or found among the
/// registered workers by this host's addresses and kept once found.
async fn identity(settings: &AgentSettings, shared: &Shared) -> Option<String> {
    if let Some(w) = lock(&shared.status).worker.clone() {
        return Some(w);
    }
    let problem = if !shared.publisher.connected() {
        "agent.worker = \"auto\": waiting for the registry to find this host's worker".to_string()
    } else {
        match shared.publisher.workers().await {
            Err(e) => format!("agent.worker = \"auto\": {e}"),
            Ok(workers) => {
                let me = HostIdentity::read(&settings.proc_root);
                match pick(&workers, &me) {
                    Pick::One(w) => {
                        tracing::info!(worker = %w, "found this host's worker; publishing as it from now on");
                        let mut st = lock(&shared.status);
                        st.worker = Some(w.clone());
                        st.worker_problem = None;
                        return Some(w);
                    }
                    Pick::None => format!(
                        "agent.worker = \"auto\": none of the {} registered worker(s) has one of this host's addresses {:?}{}; set agent.worker",
                        workers.len(),
                        me.addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                        me.hostname.map(|h| format!(" or its name {h}")).unwrap_or_default(),
                    ),
                    Pick::Several(ws) => format!(
                        "agent.worker = \"auto\": several registered workers are this host's ({}); set agent.worker",
                        ws.join(", ")
                    ),
                }
            }
        }
    };
    let mut st = lock(&shared.status);
    if st.worker_problem.as_deref() != Some(problem.as_str()) {
        tracing::warn!(problem = %problem, "this host's worker is not known yet; retrying after each scan");
        st.worker_problem = Some(problem);
    }
    None
}

async fn publish(shared: &Shared, worker: &str, report: AgentReport) {
    let result = if shared.publisher.connected() {
        shared.publisher.publish(worker, &report).await
    } else {
        Err(crate::publish::PublishError::new(
            "not connected to the registry",
        ))
    };
    let mut st = lock(&shared.status);
    match result {
        Ok(()) => {
            if let Some(e) = st.publish_error.take() {
                tracing::info!(previous_error = %e, "publishing again");
            }
            st.last_report = Some(report);
        }
        Err(e) => {
            shared.metrics.publish_errors_total.inc();
            if st.publish_error.is_none() {
                tracing::warn!(error = %e, worker, "cannot publish the agent report; retrying after each scan");
            }
            st.publish_error = Some(e.to_string());
        }
    }
}
