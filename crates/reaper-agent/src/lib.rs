//! The worker-host agent of ds-reaper (`ds-reaper agent`, SPEC §12).
//!
//! Whether a task's process still exists can only be seen on the worker
//! host. Every `scan_interval` the agent reads every process; DS starts each
//! command-type task process in the task's execute path, running the task's
//! command file there, so a process working in (or below)
//! `<exec_base>/exec/process/…`, one running that command file, and every
//! descendant of such a process is that task's ([`execpath`], [`scan`]). It
//! is blind — proves nothing — while the process folder is missing or the
//! worker's JVM is not in its sight. It publishes what it saw as the data of an
//! ephemeral node `<root>/<agent.path>/<worker>` in a registry session of its
//! own, rewritten after every scan (the rewrite is its heartbeat), and serves
//! `/healthz`, `/readyz` and `/metrics`. It never touches the database, and
//! signals a process only on a kill order of the leading daemon, with
//! `agent.allow_kill = true`, after checking the process again ([`kill`],
//! [`orders`]).
//!
//! The whole runtime is here, so the binary's `agent` command is one call:
//! [`run`] with [`AgentSettings`] built from the configuration.
//!
//! # Layout
//! - [`execpath`]: DS execute paths per line → task instance.
//! - [`proc`]: reading `/proc` (or a fake tree): the [`ProcSource`] port and [`ProcFs`].
//! - [`scan`]: one scan → tasks, pids, start times, unreadable processes.
//! - [`host`]: `agent.worker = "auto"`: this host's addresses and its worker node.
//! - [`publish`]: the [`Publisher`] port (reaper-core's) every registry
//!   implements — reaper-zk's and reaper-etcd's agent publishers, each in a
//!   session of its own — and the [`AgentRegistry`] the binary picks.
//! - [`orders`]: kill orders read from the registry, each carried out once and
//!   answered; [`kill`]: carrying one out (re-check, SIGTERM, SIGKILL).
//! - `runtime`: the scan loop and shutdown; `http`: the endpoints; [`metrics`].
//! - [`testing`]: a fake proc tree and a denying source, for tests and benchmarks.

pub mod appids;
pub mod execpath;
pub mod host;
mod http;
pub mod kill;
pub mod metrics;
pub mod orders;
pub mod proc;
pub mod publish;
mod runtime;
pub mod scan;
pub mod testing;

pub use execpath::{ExecPaths, TaskRef};
pub use proc::{ProcFs, ProcSource};
pub use publish::{AgentRegistry, PublishError, Publisher, StartPublisher};
pub use runtime::Agent;
pub use scan::{Scan, Scanner};

use reaper_core::DsLine;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use reaper_core::order::{DEFAULT_KILL_GRACE, MAX_KILL_GRACE};

/// Everything the agent needs (SPEC §6 `[agent]`, plus the registry it
/// publishes into).
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// `agent.worker`: the worker's registered node name; None for `"auto"`.
    pub worker: Option<String>,
    /// `agent.exec_base`: DS's `data.basedir.path` (1.2: the parent of
    /// `process.exec.basepath`), as the worker's processes see it.
    pub exec_base: PathBuf,
    /// `agent.process_dir`: the folder holding the per-project task folders,
    /// where it is not `<exec_base>/exec/process` (1.2's
    /// `process.exec.basepath` need not end in `exec`); None: derived.
    pub process_dir: Option<PathBuf>,
    /// `agent.task_log_base`: the worker's task log folder, where YARN
    /// application ids are also read (SPEC §17); None: only `appInfo.log`.
    pub task_log_base: Option<PathBuf>,
    /// `agent.scan_interval` (at least 100 ms is used).
    pub scan_interval: Duration,
    /// `agent.scan_timeout`: how long one process's reads may take; None:
    /// the scan interval.
    pub scan_timeout: Option<Duration>,
    /// `reconcile.clock_skew_tolerance`: the worker JVM's start time against
    /// its heartbeat's `startupTime`.
    pub clock_skew_tolerance: Duration,
    /// `reconcile.agent_stale_after`: how long the worker's node may be
    /// absent before the agent is blind.
    pub stale_after: Duration,
    /// `agent.path`: under the registry root, e.g. `ds-reaper/agents`.
    pub path: String,
    /// `agent.listen`.
    pub listen: SocketAddr,
    /// `dolphinscheduler.version`: an explicit line reads only its execute
    /// path form and registry layout; None (auto) reads every one.
    pub line: Option<DsLine>,
    /// Where the proc filesystem is (default `/proc`); also the source of
    /// this host's addresses and name for `worker = "auto"`.
    pub proc_root: PathBuf,
    /// `agent.allow_kill`: carry out the leading daemon's kill orders
    /// (SPEC §15); false answers every order `refused`.
    pub allow_kill: bool,
    /// `agent.kill_grace`: SIGTERM to SIGKILL.
    pub kill_grace: Duration,
    pub registry: AgentRegistry,
}

impl AgentSettings {
    /// SPEC §6 defaults for every `[agent]` key.
    pub fn new(registry: AgentRegistry) -> AgentSettings {
        AgentSettings {
            worker: None,
            exec_base: PathBuf::from("/tmp/dolphinscheduler"),
            process_dir: None,
            task_log_base: None,
            scan_interval: Duration::from_secs(10),
            scan_timeout: None,
            clock_skew_tolerance: Duration::from_secs(5),
            stale_after: Duration::from_secs(35),
            path: "ds-reaper/agents".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 9478)),
            line: None,
            proc_root: PathBuf::from("/proc"),
            allow_kill: false,
            kill_grace: DEFAULT_KILL_GRACE,
            registry,
        }
    }

    /// The settings with `path` trimmed, or what is wrong with them.
    fn validated(mut self) -> Result<AgentSettings, AgentError> {
        let mut bad = Vec::new();
        if !self.exec_base.is_absolute() {
            bad.push(format!(
                "agent.exec_base {:?} must be an absolute path",
                self.exec_base
            ));
        }
        if let Some(d) = &self.process_dir {
            if !d.is_absolute() {
                bad.push(format!("agent.process_dir {d:?} must be an absolute path"));
            }
        }
        if let Some(d) = &self.task_log_base {
            if !d.is_absolute() {
                bad.push(format!(
                    "agent.task_log_base {d:?} must be an absolute path"
                ));
            }
        }
        if self.scan_interval.is_zero() {
            bad.push("agent.scan_interval must be positive".to_string());
        }
        if self.scan_timeout.is_some_and(|t| t.is_zero()) {
            bad.push("agent.scan_timeout must be positive".to_string());
        }
        if self.kill_grace.is_zero() || self.kill_grace > MAX_KILL_GRACE {
            bad.push(format!(
                "agent.kill_grace {:?} must be positive and at most {:?}",
                self.kill_grace, MAX_KILL_GRACE
            ));
        }
        self.path = self.path.trim().trim_matches('/').to_string();
        if self.path.is_empty() {
            bad.push("agent.path must name a path under the registry root".to_string());
        }
        if let Some(w) = &self.worker {
            let w = w.trim();
            if w.is_empty() || w.contains('/') {
                bad.push(format!("agent.worker {w:?} is not a worker node name"));
            }
            self.worker = Some(w.to_string());
        }
        if bad.is_empty() {
            Ok(self)
        } else {
            Err(AgentError::Settings(bad.join("; ")))
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A bad value: the command's exit code 2.
    #[error("invalid agent settings: {0}")]
    Settings(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the agent's HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
    #[error("agent: the HTTP task: {0}")]
    HttpTask(#[source] tokio::task::JoinError),
    #[error("agent: the scanner is gone")]
    ScannerGone,
    #[error("agent: the scan failed: {0}")]
    Scan(#[source] tokio::task::JoinError),
}

impl AgentError {
    /// The `ds-reaper agent` exit code for this error (SPEC §7: 2 bad config).
    pub fn exit_code(&self) -> u8 {
        match self {
            AgentError::Settings(_) => 2,
            _ => 1,
        }
    }
}

/// `ds-reaper agent`: runs the agent until `cancel`, then closes its registry
/// session (its node goes at once) and returns `Ok(())` — within SPEC §7's
/// 10 s. A registry that cannot be reached is not an error: the agent keeps
/// scanning, retries with capped backoff, and `/readyz` says why. Sends
/// systemd `READY=1` after the first scan and `WATCHDOG=1` from the scan loop
/// when `WatchdogSec=` is set.
pub async fn run(settings: AgentSettings, cancel: CancellationToken) -> Result<(), AgentError> {
    let settings = settings.validated()?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|source| AgentError::Listen {
            addr: settings.listen,
            source,
        })?;
    Agent::new(settings).serve(listener, cancel).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let s = AgentSettings::new(AgentRegistry::new(
            "none",
            |_, _, _| -> std::sync::Arc<dyn Publisher> {
                unreachable!("validation starts no publisher")
            },
        ));
        assert_eq!(s.clone().validated().unwrap().path, "ds-reaper/agents");
        let bad = AgentSettings {
            exec_base: "relative".into(),
            process_dir: Some("rel/process".into()),
            task_log_base: Some("logs".into()),
            scan_interval: Duration::ZERO,
            path: "/".into(),
            worker: Some("a/b".into()),
            kill_grace: Duration::ZERO,
            ..s.clone()
        };
        let e = bad.validated().unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let msg = e.to_string();
        for part in [
            "exec_base",
            "process_dir",
            "agent.task_log_base",
            "scan_interval",
            "agent.path",
            "agent.worker",
            "agent.kill_grace",
        ] {
            assert!(msg.contains(part), "{msg}");
        }
        assert!(!s.allow_kill, "kills are off unless asked for");
        let long = AgentSettings {
            kill_grace: MAX_KILL_GRACE + Duration::from_secs(1),
            ..s
        };
        assert!(long
            .validated()
            .unwrap_err()
            .to_string()
            .contains("kill_grace"));
    }
}
