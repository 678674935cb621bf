//! Configuration (SPEC §6): one TOML file merged with `DS_REAPER__SECTION__KEY`
//! environment overrides by the `config` crate, read into typed sections.
//!
//! Serde stops at the first bad value; the SPEC wants every problem at once,
//! each naming its key (and the variable, when the value came from the
//! environment). So the merged tree is first checked key by key — each value
//! alone is read into the settings, the rest left at their defaults — and only
//! a tree with no problem is read whole. The tree is read as JSON (serde's own
//! messages, e.g. every allowed value of an enum); a value from the
//! environment, always text, is first given the type of the key's default.
//!
//! # Layout
//! - [`sections`]: the typed sections, their defaults (the one place a key is written).
//! - [`choices`]: the values some keys choose from (line, registry, actions).
//! - [`values`]: how single values are read (durations, lists, paths, ranges).
//! - [`redact`]: secrets, and the redacted TOML of `config check`.
//! - `policy`: what the daemon derives from the settings (policy, live states).
//! - [`adapters`]: the adapters' and the agent's settings.
//! - here: loading, the environment, and the key-by-key check.

#[cfg(feature = "daemon")]
pub mod adapters;
pub mod choices;
mod policy;
pub mod redact;
pub mod sections;
pub mod values;
pub mod yarn;

pub use choices::*;
pub use redact::{Secret, SecretFile, SecretUrl};
pub use sections::*;
pub use values::{parse_duration, BadDuration};

use ::config::{Map, ValueKind};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub const DEFAULT_PATH: &str = "/etc/ds-reaper/config.toml";
const ENV_PREFIX: &str = "DS_REAPER__";
/// The one key holding a list of tables; checked entry by entry.
const RULES: (&str, &str) = ("policy", "rules");

/// All problems found, one line each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct ConfigErrors(pub Vec<String>);

/// Loads and validates the configuration from `path` and the process environment.
pub fn load(path: &Path, explicit: bool) -> Result<Settings, ConfigErrors> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    load_with(path, explicit, &vars)
}

/// As [`load`], with the environment given (tests). A missing file at the
/// default path (not `explicit`) means all defaults.
pub fn load_with(
    path: &Path,
    explicit: bool,
    vars: &[(String, String)],
) -> Result<Settings, ConfigErrors> {
    let schema = Schema::of_defaults();
    let mut problems = Vec::new();
    let env = env_keys(vars, &schema, &mut problems);
    let origin = |key: &str| match env.get(key) {
        Some(var) => format!("{var} ({key})"),
        None => key.to_string(),
    };

    let mut builder = ::config::Config::builder();
    if path.exists() || explicit {
        builder = builder.add_source(
            ::config::File::from(path)
                .format(::config::FileFormat::Toml)
                .required(true),
        );
    }
    let overrides: Map<String, String> = vars
        .iter()
        .filter(|(var, _)| env.values().any(|v| v == var))
        .cloned()
        .collect();
    builder = builder.add_source(
        ::config::Environment::with_prefix("DS_REAPER")
            .prefix_separator("__")
            .separator("__")
            .source(Some(overrides)),
    );
    let mut root = match builder.build() {
        Ok(c) => match to_json(&c.cache) {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        },
        Err(e) => {
            problems.push(format!("{}: {e}", path.display()));
            return Err(ConfigErrors(problems));
        }
    };
    type_text_values(&mut root, &schema);

    for (key, msg) in check_each_key(&mut root, &schema) {
        problems.push(format!("{}: {msg}", origin(&key)));
    }
    // With the bad values left out, the rest reads whole: check across keys too.
    let mut settings: Settings = match serde_json::from_value(Value::Object(root)) {
        Ok(s) => s,
        Err(e) => {
            problems.push(format!("{}: {e}", path.display()));
            return Err(ConfigErrors(problems));
        }
    };
    for (key, msg) in settings.cross_checks() {
        problems.push(format!("{}: {msg}", origin(&key)));
    }
    if !problems.is_empty() {
        return Err(ConfigErrors(problems));
    }
    settings.fill_copies();
    Ok(settings)
}

/// Every section and key, as the typed defaults serialise (an unset optional
/// key serialises as null, so it is there too).
struct Schema {
    sections: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    rule_keys: BTreeSet<String>,
}

impl Schema {
    fn of_defaults() -> Schema {
        fn table(v: impl serde::Serialize) -> serde_json::Map<String, serde_json::Value> {
            match serde_json::to_value(v) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => unreachable!("the settings serialise as a table"),
            }
        }
        let sections = table(Settings::default())
            .into_iter()
            .map(|(s, keys)| {
                let keys = match keys {
                    serde_json::Value::Object(m) => m.into_iter().collect(),
                    _ => BTreeMap::new(),
                };
                (s, keys)
            })
            .collect();
        let rule_keys = table(RuleEntry::default()).keys().cloned().collect();
        Schema {
            sections,
            rule_keys,
        }
    }

    fn has(&self, section: &str, key: &str) -> bool {
        self.sections
            .get(section)
            .is_some_and(|k| k.contains_key(key))
    }
}

impl Settings {
    /// Every key with its default as `config check` prints it (`""` when
    /// unset by default), from the typed defaults: what `config.example.toml`
    /// must document.
    pub fn documented_keys() -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for (section, keys) in Schema::of_defaults().sections {
            for (key, v) in keys {
                let text = match v {
                    serde_json::Value::Null => String::new(),
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                out.push((section.clone(), key, text));
            }
        }
        out
    }
}

/// The `DS_REAPER__` variables that name a key, as key → variable; any other
/// `DS_REAPER__` variable is a problem.
fn env_keys(
    vars: &[(String, String)],
    schema: &Schema,
    problems: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (var, _) in vars {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let parts: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        let key = parts.join(".");
        match parts.as_slice() {
            [s, k] if (s.as_str(), k.as_str()) == RULES => problems.push(format!(
                "{var}: policy.rules cannot be set from the environment; use the config file"
            )),
            [s, k] if schema.has(s, k) => {
                out.insert(key, var.clone());
            }
            _ => problems.push(format!(
                "{var}: unknown variable (no key {key:?}; expected DS_REAPER__<SECTION>__<KEY>)"
            )),
        }
    }
    out
}

/// The `config` crate's merged tree as JSON.
fn to_json(v: &::config::Value) -> Value {
    match &v.kind {
        ValueKind::Nil => Value::Null,
        ValueKind::Boolean(b) => Value::Bool(*b),
        ValueKind::I64(n) => (*n).into(),
        ValueKind::U64(n) => (*n).into(),
        // too large for any key: kept as text, refused by the key's type
        ValueKind::I128(n) => n.to_string().into(),
        ValueKind::U128(n) => n.to_string().into(),
        ValueKind::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        ValueKind::String(s) => s.clone().into(),
        ValueKind::Array(a) => a.iter().map(to_json).collect(),
        ValueKind::Table(t) => t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect(),
    }
}

/// Text where the key's default is a boolean or a number — every value from
/// the environment, and a quoted one in the file — becomes one when it reads
/// as one. (Text that does not stays text, and the key's type says what is
/// wrong with it.)
fn type_text_values(root: &mut serde_json::Map<String, Value>, schema: &Schema) {
    for (section, keys) in root.iter_mut() {
        let (Some(defaults), Value::Object(keys)) = (schema.sections.get(section), keys) else {
            continue;
        };
        for (key, value) in keys.iter_mut() {
            let (Some(default), Value::String(text)) = (defaults.get(key), &*value) else {
                continue;
            };
            let t = text.trim();
            let typed = match default {
                Value::Bool(_) => t.to_ascii_lowercase().parse::<bool>().ok().map(Value::Bool),
                Value::Number(_) => t.parse::<i64>().map(Value::from).ok().or_else(|| {
                    t.parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map(Value::Number)
                }),
                _ => None,
            };
            if let Some(v) = typed {
                *value = v;
            }
        }
    }
}

/// Reads each value of the merged tree on its own, so that every bad one is
/// found, and leaves the bad ones out, so that the rest can be read whole and
/// checked across keys too. Returns (key, problem) pairs, keys like
/// `reconcile.grace_period` or `policy.rules[0].action`.
fn check_each_key(
    root: &mut serde_json::Map<String, Value>,
    schema: &Schema,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    root.retain(|section, body| {
        let Some(known) = schema.sections.get(section) else {
            out.push((section.clone(), "unknown section".into()));
            return false;
        };
        let Value::Object(keys) = body else {
            out.push((section.clone(), "must be a table".into()));
            return false;
        };
        keys.retain(|key, value| {
            let problem = if !known.contains_key(key) {
                Some("unknown key".to_string())
            } else if (section.as_str(), key.as_str()) == RULES {
                return check_rules(value, schema, &mut out);
            } else {
                probe(section, key, value.clone())
                    .err()
                    .map(|e| e.to_string())
            };
            match problem {
                Some(p) => {
                    out.push((format!("{section}.{key}"), p));
                    false
                }
                None => true,
            }
        });
        true
    });
    out
}

/// `[[policy.rules]]`: each field of each entry on its own. A bad entry is
/// kept as an empty one, so that later problems keep their entry's number.
fn check_rules(rules: &mut Value, schema: &Schema, out: &mut Vec<(String, String)>) -> bool {
    let (section, key) = RULES;
    let Value::Array(entries) = rules else {
        return match probe(section, key, rules.clone()) {
            Ok(()) => true,
            Err(p) => {
                out.push((format!("{section}.{key}"), p.to_string()));
                false
            }
        };
    };
    for (i, entry) in entries.iter_mut().enumerate() {
        let base = format!("{section}.{key}[{i}]");
        let Value::Object(fields) = entry else {
            out.push((base, "expected a table".into()));
            *entry = Value::Object(serde_json::Map::new());
            continue;
        };
        fields.retain(|field, value| {
            let problem = if !schema.rule_keys.contains(field) {
                Some("unknown key".to_string())
            } else {
                probe(section, key, serde_json::json!([{ field: value }]))
                    .err()
                    .map(|e| e.to_string())
            };
            match problem {
                Some(p) => {
                    out.push((format!("{base}.{field}"), p));
                    false
                }
                None => true,
            }
        });
    }
    true
}

/// Reads `{section: {key: value}}` into the settings, everything else default.
fn probe(section: &str, key: &str, value: Value) -> Result<(), serde_json::Error> {
    serde_json::from_value::<Settings>(serde_json::json!({ section: { key: value } })).map(drop)
}

#[cfg(test)]
mod tests;
