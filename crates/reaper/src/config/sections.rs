//! The configuration as typed sections, one struct per `[section]` of SPEC §6.
//!
//! This module (with `registry`, the SPEC §14 sections) is the one place a key
//! is written: its field (name, type, how its value is read) and, in the
//! section's `Default`, its default. The loader, the `DS_REAPER__` overrides,
//! the error messages, `config check` and the example-config test all follow
//! from these types. Adding a key is a field here plus its documented line in
//! `config.example.toml`.

use super::choices::{
    AgentWorker, LogFormat, ReasonName, RuleAction, StalledAction, VersionSetting, WorkflowAction,
};
use super::redact::{Secret, SecretFile, SecretUrl};
use super::values;
use reaper_core::{Action, FollowUp, OwnerMaster, Zone};
pub use registry::{Etcd, JdbcRegistry, RegistrySection, ZooKeeper};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod registry;

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("a valid default address")
}

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub dolphinscheduler: DolphinScheduler,
    pub registry: RegistrySection,
    pub zookeeper: ZooKeeper,
    pub etcd: Etcd,
    pub jdbc_registry: JdbcRegistry,
    pub database: Database,
    pub reconcile: Reconcile,
    pub rate: Rate,
    pub brake: Brake,
    pub policy: PolicySection,
    pub leader: Leader,
    pub http: Http,
    pub agent: Agent,
    pub audit: Audit,
    pub log: Log,
    pub yarn: super::yarn::Yarn,

    /// Read-only copies of a few keys for callers still written against the
    /// flat settings of before (engine.rs, http.rs); filled by the loader and
    /// by `Default`. Read the sections in new code: these go once those
    /// callers do. Not part of the file.
    #[serde(skip)]
    pub version: VersionSetting,
    #[serde(skip)]
    pub grace_period: Duration,
    #[serde(skip)]
    pub full_scan_interval: Duration,
    #[serde(skip)]
    pub startup_settle: Duration,
    #[serde(skip)]
    pub audit_path: PathBuf,
    #[serde(skip)]
    pub http_token: Option<Secret>,
}

impl Default for Settings {
    fn default() -> Self {
        let mut s = Settings {
            dolphinscheduler: Default::default(),
            registry: Default::default(),
            zookeeper: Default::default(),
            etcd: Default::default(),
            jdbc_registry: Default::default(),
            database: Default::default(),
            reconcile: Default::default(),
            rate: Default::default(),
            brake: Default::default(),
            policy: Default::default(),
            leader: Default::default(),
            http: Default::default(),
            agent: Default::default(),
            audit: Default::default(),
            log: Default::default(),
            yarn: Default::default(),
            version: VersionSetting::Auto,
            grace_period: Duration::ZERO,
            full_scan_interval: Duration::ZERO,
            startup_settle: Duration::ZERO,
            audit_path: PathBuf::new(),
            http_token: None,
        };
        s.fill_copies();
        s
    }
}

impl Settings {
    /// Refreshes the read-only copies from the sections.
    pub(super) fn fill_copies(&mut self) {
        self.version = self.dolphinscheduler.version;
        self.grace_period = self.reconcile.grace_period;
        self.full_scan_interval = self.reconcile.full_scan_interval;
        self.startup_settle = self.reconcile.startup_settle;
        self.audit_path = self.audit.path.clone();
        self.http_token = self.http.token_file.as_ref().map(|f| f.secret().clone());
    }
}

/// `[dolphinscheduler]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DolphinScheduler {
    /// `auto`, or a line (SPEC §2).
    #[serde(with = "values::text")]
    pub version: VersionSetting,
    /// The zone of DS datetime columns: an IANA name or `local`.
    #[serde(with = "values::text")]
    pub time_zone: Zone,
}

impl Default for DolphinScheduler {
    fn default() -> Self {
        DolphinScheduler {
            version: VersionSetting::Auto,
            time_zone: Zone::Local,
        }
    }
}

/// `[database]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Database {
    pub url: SecretUrl,
    /// Its content overrides the URL's password.
    #[serde(with = "values::blank")]
    pub password_file: Option<SecretFile>,
    #[serde(deserialize_with = "values::range::<_, _, 1, 1000>")]
    pub max_connections: u32,
    #[serde(with = "values::duration")]
    pub statement_timeout: Duration,
}

impl Default for Database {
    fn default() -> Self {
        Database {
            url: "mysql://ds:ds@127.0.0.1:3306/dolphinscheduler"
                .parse()
                .expect("a valid default URL"),
            password_file: None,
            max_connections: 4,
            statement_timeout: secs(10),
        }
    }
}

/// `[reconcile]` (SPEC §3, §12, §13).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Reconcile {
    #[serde(with = "values::duration")]
    pub sweep_interval: Duration,
    #[serde(with = "values::duration")]
    pub full_scan_interval: Duration,
    #[serde(with = "values::duration")]
    pub grace_period: Duration,
    #[serde(with = "values::duration")]
    pub heartbeat_stale_after: Duration,
    #[serde(with = "values::duration")]
    pub no_host_after: Duration,
    #[serde(with = "values::duration")]
    pub clock_skew_tolerance: Duration,
    #[serde(with = "values::duration")]
    pub startup_settle: Duration,
    /// Canonical task state names; unset: the line's default.
    #[serde(deserialize_with = "values::task_states")]
    pub states: Option<Vec<String>>,
    #[serde(deserialize_with = "values::range::<_, _, 0, 1_000_000>")]
    pub max_actions_per_sweep: usize,
    #[serde(with = "values::duration")]
    pub process_gone_after: Duration,
    #[serde(with = "values::duration")]
    pub agent_stale_after: Duration,
    pub hold_while_process_alive: bool,
    /// Unset: the line's command-type tasks.
    #[serde(deserialize_with = "values::task_types")]
    pub process_task_types: Option<Vec<String>>,
    pub workflows: bool,
    /// Unset: RUNNING_EXECUTION, READY_PAUSE, READY_STOP.
    #[serde(deserialize_with = "values::workflow_states")]
    pub workflow_states: Option<Vec<String>>,
    #[serde(with = "values::duration")]
    pub workflow_grace_period: Duration,
    #[serde(with = "values::duration")]
    pub workflow_stall_after: Duration,
    /// SPEC §15: how long a listed task's row must say it is over.
    #[serde(with = "values::duration")]
    pub ghost_after: Duration,
    /// SPEC §16: queued task rows (SUBMITTED, DISPATCH, DELAY) older than this
    /// under a live master are `dispatch_stalled`; also the serial wait's bound.
    #[serde(with = "values::period")]
    pub dispatch_stall_after: Duration,
    /// SPEC §16 `logic_task_overdue`: how long past its own timeout (or, with
    /// none, at all) a logic task may stay live under a live master.
    #[serde(with = "values::period")]
    pub logic_task_stall_after: Duration,
}

impl Default for Reconcile {
    fn default() -> Self {
        Reconcile {
            sweep_interval: secs(30),
            full_scan_interval: secs(600),
            grace_period: secs(60),
            heartbeat_stale_after: secs(120),
            no_host_after: secs(600),
            clock_skew_tolerance: secs(5),
            startup_settle: secs(30),
            states: None,
            max_actions_per_sweep: 50,
            process_gone_after: secs(60),
            agent_stale_after: secs(35),
            hold_while_process_alive: true,
            process_task_types: None,
            workflows: true,
            workflow_states: None,
            workflow_grace_period: secs(900),
            workflow_stall_after: secs(1800),
            ghost_after: secs(120),
            dispatch_stall_after: secs(1800),
            logic_task_stall_after: secs(24 * 3600),
        }
    }
}

/// `[rate]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rate {
    #[serde(deserialize_with = "values::range::<_, _, 0, 100_000_000>")]
    pub per_minute: u32,
}

impl Default for Rate {
    fn default() -> Self {
        Rate { per_minute: 120 }
    }
}

/// `[brake]` (SPEC §4.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Brake {
    #[serde(with = "values::duration")]
    pub window: Duration,
    #[serde(deserialize_with = "values::fraction")]
    pub max_lost_worker_fraction: f64,
    #[serde(deserialize_with = "values::fraction")]
    pub max_zombie_fraction: f64,
    #[serde(deserialize_with = "values::range::<_, _, 0, 100_000_000>")]
    pub min_zombies: usize,
    #[serde(with = "values::duration")]
    pub release_after: Duration,
}

impl Default for Brake {
    fn default() -> Self {
        Brake {
            window: secs(300),
            max_lost_worker_fraction: 0.5,
            max_zombie_fraction: 0.5,
            min_zombies: 10,
            release_after: secs(300),
        }
    }
}

/// `[policy]` (SPEC §5, §13): the action per reason, and the rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicySection {
    pub worker_lost: Action,
    pub worker_restarted: Action,
    pub heartbeat_stale: Action,
    pub master_lost: Action,
    pub no_host: Action,
    pub process_gone: Action,
    pub workflow: FollowUp,
    pub workflow_master_lost: WorkflowAction,
    pub workflow_stalled: StalledAction,
    /// SPEC §15: report | kill.
    pub ghost_process: reaper_core::ghost::GhostAction,
    /// SPEC §17: kill a task's live YARN applications before acting on it.
    pub kill_remote_apps: bool,
    pub rules: Vec<RuleEntry>,
}

impl Default for PolicySection {
    fn default() -> Self {
        PolicySection {
            worker_lost: Action::Report,
            worker_restarted: Action::Report,
            heartbeat_stale: Action::Report,
            master_lost: Action::Report,
            no_host: Action::Report,
            process_gone: Action::Report,
            workflow: FollowUp::None,
            workflow_master_lost: WorkflowAction::Report,
            workflow_stalled: StalledAction::Report,
            ghost_process: reaper_core::ghost::GhostAction::Report,
            kill_remote_apps: false,
            rules: Vec::new(),
        }
    }
}

/// One `[[policy.rules]]` entry; a field left out matches anything (or, for
/// `action` and `workflow`, takes the `[policy]` default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuleEntry {
    pub reason: Option<ReasonName>,
    pub worker_group: Option<String>,
    pub task_type: Option<String>,
    pub project_code: Option<i64>,
    pub owner_master: Option<OwnerMaster>,
    /// `ghost_process` rules only (SPEC §15): the ghost kinds the rule matches.
    pub over: Option<Vec<reaper_core::ghost::Over>>,
    pub action: Option<RuleAction>,
    pub workflow: Option<FollowUp>,
}

/// `[leader]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Leader {
    pub enabled: bool,
    /// Under the registry root.
    #[serde(deserialize_with = "values::registry_path")]
    pub path: String,
}

impl Default for Leader {
    fn default() -> Self {
        Leader {
            enabled: true,
            path: "/ds-reaper/leader".into(),
        }
    }
}

/// `[http]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http {
    #[serde(deserialize_with = "values::socket_addr")]
    pub listen: SocketAddr,
    /// The bearer token for POST endpoints; unset: they answer 403.
    #[serde(with = "values::blank")]
    pub token_file: Option<SecretFile>,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            listen: addr("127.0.0.1:9477"),
            token_file: None,
        }
    }
}

/// `[agent]`: `ds-reaper agent` only (SPEC §12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Agent {
    #[serde(with = "values::text")]
    pub worker: AgentWorker,
    /// DS's `data.basedir.path`.
    #[serde(deserialize_with = "values::absolute_path")]
    pub exec_base: PathBuf,
    /// The folder holding the per-project task folders, where it is not
    /// `<exec_base>/exec/process` (1.2's `process.exec.basepath` need not end
    /// in `exec`); empty: derived from `exec_base`.
    #[serde(with = "values::blank_absolute_path")]
    pub process_dir: Option<PathBuf>,
    /// The worker's task log folder (DS's logback `log.base`, as an absolute
    /// path): also read YARN application ids from task logs (SPEC §17);
    /// empty: only from `appInfo.log`.
    #[serde(with = "values::blank_absolute_path")]
    pub task_log_base: Option<PathBuf>,
    #[serde(with = "values::period")]
    pub scan_interval: Duration,
    /// SPEC §12: the deadline for one scan's reads; None: `scan_interval`.
    #[serde(with = "values::blank_period")]
    pub scan_timeout: Option<Duration>,
    /// Under the registry root.
    #[serde(deserialize_with = "values::relative_registry_path")]
    pub path: String,
    #[serde(deserialize_with = "values::socket_addr")]
    pub listen: SocketAddr,
    /// Carry out the leading daemon's kill orders (SPEC §15); needs CAP_KILL.
    pub allow_kill: bool,
    /// SIGTERM to SIGKILL.
    #[serde(with = "kill_grace")]
    pub kill_grace: Duration,
}

/// `agent.kill_grace`: at least 1s, at most what the agent allows (an order is
/// answered within the grace and a few seconds more).
mod kill_grace {
    use super::values;
    use serde::{de, Deserializer};
    use std::time::Duration;

    pub use values::duration::serialize;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = values::period::deserialize(d)?;
        if v > reaper_core::order::MAX_KILL_GRACE {
            return Err(de::Error::custom(format!(
                "{} is too long; the most is {}",
                humantime::format_duration(v),
                humantime::format_duration(reaper_core::order::MAX_KILL_GRACE)
            )));
        }
        Ok(v)
    }
}

impl Default for Agent {
    fn default() -> Self {
        Agent {
            worker: AgentWorker::Auto,
            exec_base: "/tmp/dolphinscheduler".into(),
            process_dir: None,
            task_log_base: None,
            scan_interval: secs(10),
            scan_timeout: None,
            path: "ds-reaper/agents".into(),
            listen: addr("127.0.0.1:9478"),
            allow_kill: false,
            kill_grace: reaper_core::order::DEFAULT_KILL_GRACE,
        }
    }
}

/// `[audit]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Audit {
    #[serde(deserialize_with = "values::path")]
    pub path: PathBuf,
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            path: "/var/lib/ds-reaper/audit.jsonl".into(),
        }
    }
}

/// `[log]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Log {
    pub format: LogFormat,
    /// A level or a tracing filter; `RUST_LOG` overrides it.
    #[serde(deserialize_with = "values::log_level")]
    pub level: String,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            format: LogFormat::Json,
            level: "info".into(),
        }
    }
}
