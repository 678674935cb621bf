//! Configuration (SPEC §6): one TOML file merged with `DS_REAPER__SECTION__KEY`
//! environment overrides by the `config` crate, then validated here key by key
//! so that *every* problem is reported at once, each naming its key (and the
//! variable, when the value came from the environment).

use reaper_core::{Action, BrakeConfig, DsLine, FollowUp, OwnerMaster, Reason, Rule, Zone};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_PATH: &str = "/etc/ds-reaper/config.toml";
const ENV_PREFIX: &str = "DS_REAPER__";

/// A secret that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSetting {
    Auto,
    Line(DsLine),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Pretty,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub version: VersionSetting,
    pub time_zone: Zone,
    pub zk_connect: String,
    pub zk_root: String,
    pub zk_session_timeout: Duration,
    /// The database URL; it may carry a password, hence a secret.
    pub db_url: Secret,
    pub db_password: Option<Secret>,
    pub db_password_file: Option<PathBuf>,
    pub db_max_connections: u32,
    pub db_statement_timeout: Duration,
    pub sweep_interval: Duration,
    pub full_scan_interval: Duration,
    pub grace_period: Duration,
    pub heartbeat_stale_after: Duration,
    pub no_host_after: Duration,
    pub clock_skew_tolerance: Duration,
    pub startup_settle: Duration,
    /// `reconcile.states` as written (canonical names); None = the line's default.
    pub states: Option<Vec<String>>,
    pub max_actions_per_sweep: usize,
    pub rate_per_minute: u32,
    pub brake: BrakeConfig,
    pub policy_defaults: BTreeMap<Reason, Action>,
    pub policy_workflow: FollowUp,
    pub rules: Vec<Rule>,
    pub leader_enabled: bool,
    pub leader_path: String,
    pub http_listen: SocketAddr,
    pub http_token: Option<Secret>,
    pub http_token_file: Option<PathBuf>,
    pub audit_path: PathBuf,
    pub log_format: LogFormat,
    pub log_level: String,
}

/// All problems found, one line each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct ConfigErrors(pub Vec<String>);

/// Every key with its kind and default (the default as TOML text).
const KEYS: &[(&str, &str, &str)] = &[
    ("dolphinscheduler", "version", "auto"),
    ("dolphinscheduler", "time_zone", "local"),
    ("zookeeper", "connect", "127.0.0.1:2181"),
    ("zookeeper", "root", "/dolphinscheduler"),
    ("zookeeper", "session_timeout", "30s"),
    (
        "database",
        "url",
        "mysql://ds:ds@127.0.0.1:3306/dolphinscheduler",
    ),
    ("database", "password_file", ""),
    ("database", "max_connections", "4"),
    ("database", "statement_timeout", "10s"),
    ("reconcile", "sweep_interval", "30s"),
    ("reconcile", "full_scan_interval", "10m"),
    ("reconcile", "grace_period", "60s"),
    ("reconcile", "heartbeat_stale_after", "2m"),
    ("reconcile", "no_host_after", "10m"),
    ("reconcile", "clock_skew_tolerance", "5s"),
    ("reconcile", "startup_settle", "30s"),
    ("reconcile", "states", ""),
    ("reconcile", "max_actions_per_sweep", "50"),
    ("rate", "per_minute", "120"),
    ("brake", "window", "5m"),
    ("brake", "max_lost_worker_fraction", "0.5"),
    ("brake", "max_zombie_fraction", "0.5"),
    ("brake", "min_zombies", "10"),
    ("brake", "release_after", "5m"),
    ("policy", "worker_lost", "report"),
    ("policy", "worker_restarted", "report"),
    ("policy", "heartbeat_stale", "report"),
    ("policy", "master_lost", "report"),
    ("policy", "no_host", "report"),
    ("policy", "workflow", "none"),
    ("policy", "rules", ""),
    ("leader", "enabled", "true"),
    ("leader", "path", "/ds-reaper/leader"),
    ("http", "listen", "127.0.0.1:9477"),
    ("http", "token_file", ""),
    ("audit", "path", "/var/lib/ds-reaper/audit.jsonl"),
    ("log", "format", "json"),
    ("log", "level", "info"),
];

const RULE_KEYS: &[&str] = &[
    "reason",
    "worker_group",
    "task_type",
    "project_code",
    "owner_master",
    "action",
    "workflow",
];

/// Where a key's value came from, for error messages.
fn origin(key: &str, env: &BTreeMap<String, String>) -> String {
    match env.iter().find(|(_, k)| k.as_str() == key) {
        Some((var, _)) => format!("{var} ({key})"),
        None => key.to_string(),
    }
}

/// Collects the `DS_REAPER__*` variables as dotted keys; unknown ones are errors.
fn env_keys(vars: &[(String, String)], errors: &mut Vec<String>) -> BTreeMap<String, String> {
    let known: BTreeSet<String> = KEYS.iter().map(|(s, k, _)| format!("{s}.{k}")).collect();
    let mut out = BTreeMap::new();
    for (var, _) in vars {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let key = rest.to_ascii_lowercase().replace("__", ".");
        if key == "policy.rules" {
            errors.push(format!(
                "{var}: policy.rules cannot be set from the environment; use the config file"
            ));
        } else if known.contains(&key) {
            out.insert(var.clone(), key);
        } else {
            errors.push(format!(
                "{var}: unknown variable (no key {key:?}; expected DS_REAPER__<SECTION>__<KEY>)"
            ));
        }
    }
    out
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("invalid duration {s:?} ({e}); write e.g. \"30s\", \"5m\""))
}

fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Loads and validates the configuration from `path` and the process environment.
pub fn load(path: &Path, explicit: bool) -> Result<Settings, ConfigErrors> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    load_with(path, explicit, &vars)
}

/// As [`load`], with the environment given (tests).
pub fn load_with(
    path: &Path,
    explicit: bool,
    vars: &[(String, String)],
) -> Result<Settings, ConfigErrors> {
    let mut errors = Vec::new();
    let env = env_keys(vars, &mut errors);

    let mut builder = config::Config::builder();
    if path.exists() || explicit {
        builder = builder.add_source(
            config::File::from(path)
                .format(config::FileFormat::Toml)
                .required(true),
        );
    }
    let env_source: config::Map<String, String> = vars
        .iter()
        .filter(|(k, _)| env.contains_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    builder = builder.add_source(
        config::Environment::with_prefix("DS_REAPER")
            .prefix_separator("__")
            .separator("__")
            .source(Some(env_source)),
    );
    let tree: Value = match builder.build().and_then(|c| c.try_deserialize::<Value>()) {
        Ok(v) => v,
        Err(e) => {
            errors.push(format!("{}: {e}", path.display()));
            return Err(ConfigErrors(errors));
        }
    };
    let empty = serde_json::Map::new();
    let root = tree.as_object().unwrap_or(&empty);

    // unknown sections and keys
    let sections: BTreeSet<&str> = KEYS.iter().map(|(s, _, _)| *s).collect();
    for (section, body) in root {
        if !sections.contains(section.as_str()) {
            errors.push(format!("{section}: unknown section"));
            continue;
        }
        match body.as_object() {
            Some(obj) => {
                for key in obj.keys() {
                    if !KEYS.iter().any(|(s, k, _)| s == section && k == key) {
                        errors.push(format!("{section}.{key}: unknown key"));
                    }
                }
            }
            None => errors.push(format!("{section}: must be a table")),
        }
    }

    let mut b = Builder {
        errors: &mut errors,
        env: &env,
        root,
    };

    let version = b.parse("dolphinscheduler.version", |s| {
        if s.trim().eq_ignore_ascii_case("auto") {
            Ok(VersionSetting::Auto)
        } else {
            s.parse::<DsLine>()
                .map(VersionSetting::Line)
                .map_err(|e| e.to_string())
        }
    });
    let time_zone = b.parse("dolphinscheduler.time_zone", |s| {
        s.parse::<Zone>().map_err(|e| e.to_string())
    });
    let zk_connect = b.parse("zookeeper.connect", |s| {
        if s.trim().is_empty() {
            Err("must not be empty".into())
        } else {
            Ok(s.trim().to_string())
        }
    });
    let zk_root = b.parse("zookeeper.root", abs_path);
    let zk_session_timeout = b.dur("zookeeper.session_timeout");
    let db_url = b.parse("database.url", |s| {
        let scheme = s.split("://").next().unwrap_or("");
        if s.contains("://") && matches!(scheme, "mysql" | "mariadb" | "postgres" | "postgresql") {
            Ok(Secret::new(s.trim()))
        } else {
            Err("must be a mysql://, mariadb://, postgres:// or postgresql:// URL".into())
        }
    });
    let db_password_file = b.opt_path("database.password_file");
    let db_password = db_password_file
        .as_ref()
        .and_then(|p| b.read_secret("database.password_file", p));
    let db_max_connections = b.int("database.max_connections", 1, 1000) as u32;
    let db_statement_timeout = b.dur("database.statement_timeout");
    let sweep_interval = b.dur("reconcile.sweep_interval");
    let full_scan_interval = b.dur("reconcile.full_scan_interval");
    let grace_period = b.dur("reconcile.grace_period");
    let heartbeat_stale_after = b.dur("reconcile.heartbeat_stale_after");
    let no_host_after = b.dur("reconcile.no_host_after");
    let clock_skew_tolerance = b.dur("reconcile.clock_skew_tolerance");
    let startup_settle = b.dur("reconcile.startup_settle");
    let states = b.str_list("reconcile.states");
    let max_actions_per_sweep = b.int("reconcile.max_actions_per_sweep", 0, 1_000_000) as usize;
    let rate_per_minute = b.int("rate.per_minute", 0, 100_000_000) as u32;
    let brake = BrakeConfig {
        window: b.dur("brake.window"),
        max_lost_worker_fraction: b.fraction("brake.max_lost_worker_fraction"),
        max_zombie_fraction: b.fraction("brake.max_zombie_fraction"),
        min_zombies: b.int("brake.min_zombies", 0, 100_000_000) as usize,
        release_after: b.dur("brake.release_after"),
    };
    let mut policy_defaults = BTreeMap::new();
    for r in Reason::ALL {
        let key = format!("policy.{}", r.as_str());
        let a = b.parse(&key, |s| s.parse::<Action>().map_err(|e| e.to_string()));
        policy_defaults.insert(r, a.unwrap_or(Action::Report));
    }
    let policy_workflow = b.parse("policy.workflow", |s| {
        s.parse::<FollowUp>().map_err(|e| e.to_string())
    });
    let rules = b.rules();
    let leader_enabled = b.boolean("leader.enabled");
    let leader_path = b.parse("leader.path", abs_path);
    let http_listen = b.parse("http.listen", |s| {
        s.trim()
            .parse::<SocketAddr>()
            .map_err(|e| format!("{e}; write an address like \"127.0.0.1:9477\""))
    });
    let http_token_file = b.opt_path("http.token_file");
    let http_token = http_token_file
        .as_ref()
        .and_then(|p| b.read_secret("http.token_file", p));
    let audit_path = b.parse("audit.path", |s| {
        if s.trim().is_empty() {
            Err("must not be empty".into())
        } else {
            Ok(PathBuf::from(s.trim()))
        }
    });
    let log_format = b.parse("log.format", |s| match s.trim() {
        "json" => Ok(LogFormat::Json),
        "pretty" => Ok(LogFormat::Pretty),
        _ => Err(format!("{s:?} is not one of json, pretty")),
    });
    let log_level = b.parse("log.level", |s| {
        tracing_subscriber::EnvFilter::try_new(s.trim())
            .map(|_| s.trim().to_string())
            .map_err(|e| format!("invalid level/filter {s:?}: {e}"))
    });

    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    // Every Option below is Some when no error was recorded.
    let missing = || ConfigErrors(vec!["internal: a validated value is missing".into()]);
    Ok(Settings {
        version: version.ok_or_else(missing)?,
        time_zone: time_zone.ok_or_else(missing)?,
        zk_connect: zk_connect.ok_or_else(missing)?,
        zk_root: zk_root.ok_or_else(missing)?,
        zk_session_timeout,
        db_url: db_url.ok_or_else(missing)?,
        db_password,
        db_password_file,
        db_max_connections,
        db_statement_timeout,
        sweep_interval,
        full_scan_interval,
        grace_period,
        heartbeat_stale_after,
        no_host_after,
        clock_skew_tolerance,
        startup_settle,
        states,
        max_actions_per_sweep,
        rate_per_minute,
        brake,
        policy_defaults,
        policy_workflow: policy_workflow.ok_or_else(missing)?,
        rules,
        leader_enabled,
        leader_path: leader_path.ok_or_else(missing)?,
        http_listen: http_listen.ok_or_else(missing)?,
        http_token,
        http_token_file,
        audit_path: audit_path.ok_or_else(missing)?,
        log_format: log_format.ok_or_else(missing)?,
        log_level: log_level.ok_or_else(missing)?,
    })
}

fn abs_path(s: &str) -> Result<String, String> {
    let t = s.trim().trim_end_matches('/');
    if t.starts_with('/') && !t.contains("//") {
        Ok(t.to_string())
    } else {
        Err(format!(
            "{s:?} must be an absolute ZooKeeper path like \"/dolphinscheduler\""
        ))
    }
}

/// The default of a key, from [`KEYS`]: the one place defaults are written.
fn default_of(key: &str) -> &'static str {
    KEYS.iter()
        .find(|(s, k, _)| key.split_once('.') == Some((s, k)))
        .map(|(_, _, d)| *d)
        .unwrap_or("")
}

struct Builder<'a> {
    errors: &'a mut Vec<String>,
    env: &'a BTreeMap<String, String>,
    root: &'a serde_json::Map<String, Value>,
}

impl<'a> Builder<'a> {
    fn fail(&mut self, key: &str, msg: impl fmt::Display) {
        let o = origin(key, self.env);
        self.errors.push(format!("{o}: {msg}"));
    }

    fn text(&mut self, key: &str, v: Option<&Value>, default: &str) -> Option<String> {
        match v {
            None => Some(default.to_string()),
            Some(v) => match as_string(v) {
                Some(s) => Some(s),
                None => {
                    self.fail(key, "expected a string");
                    None
                }
            },
        }
    }

    /// The merged value of a top-level key (file, then environment).
    fn value(&self, key: &str) -> Option<&'a Value> {
        let (section, k) = key.split_once('.')?;
        self.root.get(section)?.as_object()?.get(k)
    }

    fn parse_value<T>(
        &mut self,
        key: &str,
        v: Option<&Value>,
        default: &str,
        f: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let s = self.text(key, v, default)?;
        match f(&s) {
            Ok(t) => Some(t),
            Err(e) => {
                self.fail(key, e);
                None
            }
        }
    }

    /// A top-level key, its default from [`KEYS`].
    fn parse<T>(&mut self, key: &str, f: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        let v = self.value(key);
        self.parse_value(key, v, default_of(key), f)
    }

    // The fallbacks below are never used: a value that fails records an
    // error, and no Settings are built when there is one.
    fn dur(&mut self, key: &str) -> Duration {
        self.parse(key, parse_duration).unwrap_or_default()
    }

    fn int(&mut self, key: &str, min: i64, max: i64) -> i64 {
        self.parse(key, |s| {
            s.trim()
                .parse::<i64>()
                .map_err(|_| format!("expected a whole number, got {s:?}"))
                .and_then(|n| {
                    if (min..=max).contains(&n) {
                        Ok(n)
                    } else {
                        Err(format!("{n} is out of range {min}..={max}"))
                    }
                })
        })
        .unwrap_or(min)
    }

    fn fraction(&mut self, key: &str) -> f64 {
        self.parse(key, |s| {
            s.trim()
                .parse::<f64>()
                .map_err(|_| format!("expected a number, got {s:?}"))
                .and_then(|n| {
                    if (0.0..=1.0).contains(&n) {
                        Ok(n)
                    } else {
                        Err(format!("{n} is not a fraction between 0 and 1"))
                    }
                })
        })
        .unwrap_or_default()
    }

    fn boolean(&mut self, key: &str) -> bool {
        self.parse(key, |s| match s.trim() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(format!("expected true or false, got {s:?}")),
        })
        .unwrap_or_default()
    }

    fn opt_path(&mut self, key: &str) -> Option<PathBuf> {
        let v = self.value(key);
        let s = self.text(key, v, "")?;
        let t = s.trim();
        (!t.is_empty()).then(|| PathBuf::from(t))
    }

    fn read_secret(&mut self, key: &str, p: &Path) -> Option<Secret> {
        match std::fs::read_to_string(p) {
            Ok(s) => {
                let s = s.trim_end_matches(['\n', '\r']).to_string();
                if s.is_empty() {
                    self.fail(key, format!("{} is empty", p.display()));
                    None
                } else {
                    Some(Secret::new(s))
                }
            }
            Err(e) => {
                self.fail(key, format!("cannot read {}: {e}", p.display()));
                None
            }
        }
    }

    fn str_list(&mut self, key: &str) -> Option<Vec<String>> {
        let items: Vec<String> = match self.value(key)? {
            Value::Array(a) => {
                let mut out = Vec::new();
                for x in a {
                    match x.as_str() {
                        Some(s) => out.push(s.trim().to_string()),
                        None => {
                            self.fail(key, "expected a list of state names");
                            return None;
                        }
                    }
                }
                out
            }
            // from the environment: comma-separated
            Value::String(s) => s
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect(),
            _ => {
                self.fail(key, "expected a list of state names");
                return None;
            }
        };
        if items.is_empty() {
            self.fail(
                key,
                "must name at least one state (leave it out for the default)",
            );
            return None;
        }
        let known: BTreeSet<&str> = DsLine::ALL
            .iter()
            .flat_map(|l| l.task_states().iter().flat_map(|d| [d.name, d.line_name]))
            .collect();
        for s in &items {
            if !known.iter().any(|k| k.eq_ignore_ascii_case(s)) {
                self.fail(
                    key,
                    format!("{s:?} is not a task state of any DolphinScheduler line"),
                );
            }
            if reaper_core::line::FINISHED_TASK_CODES
                .iter()
                .any(|c| DsLine::ALL.iter().any(|l| l.state_code(s) == Some(*c)))
            {
                self.fail(
                    key,
                    format!("{s:?} is a finished state; ds-reaper never touches finished rows"),
                );
            }
        }
        Some(items)
    }

    fn rules(&mut self) -> Vec<Rule> {
        let Some(v) = self.value("policy.rules") else {
            return Vec::new();
        };
        let Some(arr) = v.as_array() else {
            self.fail("policy.rules", "expected [[policy.rules]] tables");
            return Vec::new();
        };
        let mut rules = Vec::new();
        for (i, item) in arr.iter().enumerate() {
            let base = format!("policy.rules[{i}]");
            let Some(obj) = item.as_object() else {
                self.fail(&base, "expected a table");
                continue;
            };
            for k in obj.keys() {
                if !RULE_KEYS.contains(&k.as_str()) {
                    self.fail(&format!("{base}.{k}"), "unknown key");
                }
            }
            let mut rule = Rule::default();
            let field = |k: &str| obj.get(k);
            if let Some(v) = field("reason") {
                rule.reason = self.parse_value(&format!("{base}.reason"), Some(v), "", |s| {
                    s.parse::<Reason>().map_err(|e| e.to_string())
                });
            }
            if let Some(v) = field("worker_group") {
                rule.worker_group = self.text(&format!("{base}.worker_group"), Some(v), "");
            }
            if let Some(v) = field("task_type") {
                rule.task_type = self.text(&format!("{base}.task_type"), Some(v), "");
            }
            if let Some(v) = field("project_code") {
                rule.project_code =
                    self.parse_value(&format!("{base}.project_code"), Some(v), "", |s| {
                        s.trim()
                            .parse::<i64>()
                            .map_err(|_| format!("expected a number, got {s:?}"))
                    });
            }
            if let Some(v) = field("owner_master") {
                rule.owner_master =
                    self.parse_value(&format!("{base}.owner_master"), Some(v), "", |s| {
                        s.parse::<OwnerMaster>().map_err(|e| e.to_string())
                    });
            }
            if let Some(v) = field("action") {
                rule.action = self.parse_value(&format!("{base}.action"), Some(v), "", |s| {
                    s.parse::<Action>().map_err(|e| e.to_string())
                });
            }
            if let Some(v) = field("workflow") {
                rule.workflow = self.parse_value(&format!("{base}.workflow"), Some(v), "", |s| {
                    s.parse::<FollowUp>().map_err(|e| e.to_string())
                });
            }
            rules.push(rule);
        }
        rules
    }
}

pub use reaper_sql::redact_url;

impl Settings {
    /// The effective configuration as TOML, secrets redacted (`config check`).
    pub fn to_redacted_toml(&self) -> String {
        use toml::{Table, Value as T};
        let d = |d: Duration| T::String(humantime::format_duration(d).to_string());
        let s = |s: &str| T::String(s.to_string());
        let path = |p: &Option<PathBuf>| {
            T::String(
                p.as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            )
        };
        let mut root = Table::new();
        let mut sec = |name: &str, kv: Vec<(&str, T)>| {
            let t: Table = kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            root.insert(name.to_string(), T::Table(t));
        };
        sec(
            "dolphinscheduler",
            vec![
                (
                    "version",
                    s(&match self.version {
                        VersionSetting::Auto => "auto".to_string(),
                        VersionSetting::Line(l) => l.to_string(),
                    }),
                ),
                ("time_zone", s(&self.time_zone.to_string())),
            ],
        );
        sec(
            "zookeeper",
            vec![
                ("connect", s(&self.zk_connect)),
                ("root", s(&self.zk_root)),
                ("session_timeout", d(self.zk_session_timeout)),
            ],
        );
        sec(
            "database",
            vec![
                ("url", s(&redact_url(self.db_url.expose()))),
                ("password_file", path(&self.db_password_file)),
                (
                    "max_connections",
                    T::Integer(self.db_max_connections as i64),
                ),
                ("statement_timeout", d(self.db_statement_timeout)),
            ],
        );
        let mut rec = vec![
            ("sweep_interval", d(self.sweep_interval)),
            ("full_scan_interval", d(self.full_scan_interval)),
            ("grace_period", d(self.grace_period)),
            ("heartbeat_stale_after", d(self.heartbeat_stale_after)),
            ("no_host_after", d(self.no_host_after)),
            ("clock_skew_tolerance", d(self.clock_skew_tolerance)),
            ("startup_settle", d(self.startup_settle)),
            (
                "max_actions_per_sweep",
                T::Integer(self.max_actions_per_sweep as i64),
            ),
        ];
        if let Some(st) = &self.states {
            rec.push(("states", T::Array(st.iter().map(|x| s(x)).collect())));
        }
        sec("reconcile", rec);
        sec(
            "rate",
            vec![("per_minute", T::Integer(self.rate_per_minute as i64))],
        );
        sec(
            "brake",
            vec![
                ("window", d(self.brake.window)),
                (
                    "max_lost_worker_fraction",
                    T::Float(self.brake.max_lost_worker_fraction),
                ),
                (
                    "max_zombie_fraction",
                    T::Float(self.brake.max_zombie_fraction),
                ),
                ("min_zombies", T::Integer(self.brake.min_zombies as i64)),
                ("release_after", d(self.brake.release_after)),
            ],
        );
        let mut pol: Vec<(&str, T)> = Reason::ALL
            .iter()
            .map(|r| {
                (
                    r.as_str(),
                    s(self
                        .policy_defaults
                        .get(r)
                        .copied()
                        .unwrap_or(Action::Report)
                        .as_str()),
                )
            })
            .collect();
        pol.push(("workflow", s(self.policy_workflow.as_str())));
        if !self.rules.is_empty() {
            let rules = self
                .rules
                .iter()
                .map(|r| {
                    let mut t = Table::new();
                    if let Some(x) = r.reason {
                        t.insert("reason".into(), s(x.as_str()));
                    }
                    if let Some(x) = &r.worker_group {
                        t.insert("worker_group".into(), s(x));
                    }
                    if let Some(x) = &r.task_type {
                        t.insert("task_type".into(), s(x));
                    }
                    if let Some(x) = r.project_code {
                        t.insert("project_code".into(), T::Integer(x));
                    }
                    if let Some(x) = r.owner_master {
                        t.insert(
                            "owner_master".into(),
                            s(match x {
                                OwnerMaster::Alive => "alive",
                                OwnerMaster::Lost => "lost",
                            }),
                        );
                    }
                    if let Some(x) = r.action {
                        t.insert("action".into(), s(x.as_str()));
                    }
                    if let Some(x) = r.workflow {
                        t.insert("workflow".into(), s(x.as_str()));
                    }
                    T::Table(t)
                })
                .collect();
            pol.push(("rules", T::Array(rules)));
        }
        sec("policy", pol);
        sec(
            "leader",
            vec![
                ("enabled", T::Boolean(self.leader_enabled)),
                ("path", s(&self.leader_path)),
            ],
        );
        sec(
            "http",
            vec![
                ("listen", s(&self.http_listen.to_string())),
                ("token_file", path(&self.http_token_file)),
            ],
        );
        sec(
            "audit",
            vec![("path", s(&self.audit_path.display().to_string()))],
        );
        sec(
            "log",
            vec![
                (
                    "format",
                    s(match self.log_format {
                        LogFormat::Json => "json",
                        LogFormat::Pretty => "pretty",
                    }),
                ),
                ("level", s(&self.log_level)),
            ],
        );
        toml::to_string(&root)
            .unwrap_or_else(|e| format!("# cannot render the configuration: {e}\n"))
    }

    /// The planner's policy for a line.
    pub fn policy(&self, line: DsLine) -> reaper_core::Policy {
        let a = |r: Reason| {
            self.policy_defaults
                .get(&r)
                .copied()
                .unwrap_or(Action::Report)
        };
        reaper_core::Policy {
            line,
            worker_lost: a(Reason::WorkerLost),
            worker_restarted: a(Reason::WorkerRestarted),
            heartbeat_stale: a(Reason::HeartbeatStale),
            master_lost: a(Reason::MasterLost),
            no_host: a(Reason::NoHost),
            workflow: self.policy_workflow,
            rules: self.rules.clone(),
            grace_period: self.grace_period,
            heartbeat_stale_after: self.heartbeat_stale_after,
            no_host_after: self.no_host_after,
            clock_skew_tolerance: self.clock_skew_tolerance,
            startup_settle: self.startup_settle,
            max_actions_per_sweep: self.max_actions_per_sweep,
            rate_per_minute: self.rate_per_minute,
            brake: self.brake.clone(),
            unseen_absence: reaper_core::UnseenAbsence::SinceViewValid,
        }
    }

    /// The state codes to read on a line, and the names it does not have
    /// (warned about once at start).
    pub fn live_states(&self, line: DsLine) -> (Vec<i32>, Vec<String>) {
        match &self.states {
            None => (line.default_live_states(), Vec::new()),
            Some(names) => {
                let mut codes = Vec::new();
                let mut unknown = Vec::new();
                for n in names {
                    match line.state_code(n) {
                        Some(c) if !codes.contains(&c) => codes.push(c),
                        Some(_) => {}
                        None => unknown.push(n.clone()),
                    }
                }
                (codes, unknown)
            }
        }
    }

    /// Every key with its default, for the example-config test.
    pub fn documented_keys() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
        KEYS.iter().map(|(s, k, d)| (*s, *k, *d))
    }
}

#[cfg(test)]
mod tests;
