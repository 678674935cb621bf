//! How single values are read and written: the serde helpers the typed
//! sections name in `#[serde(with = ..)]` / `#[serde(deserialize_with = ..)]`.
//!
//! Each helper validates one value and says what is wrong with it; the loader
//! puts the key (or the `DS_REAPER__` variable) in front. Values from the
//! environment arrive as strings, so every helper also accepts the text form
//! (`"60"`, `"0.5"`, `"A, B"` for a list).

use reaper_core::DsLine;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serializer};
use std::fmt::{self, Display};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// A value that is not a humantime duration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid duration {text:?} ({why}); write e.g. \"30s\", \"5m\"")]
pub struct BadDuration {
    text: String,
    why: humantime::DurationError,
}

/// Parses a humantime duration (`"30s"`, `"5m"`, `"1h 30m"`).
pub fn parse_duration(s: &str) -> Result<Duration, BadDuration> {
    humantime::parse_duration(s.trim()).map_err(|why| BadDuration {
        text: s.to_string(),
        why,
    })
}

/// Durations as humantime strings.
pub mod duration {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"30s\" or \"5m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse_duration(v).map_err(E::custom)
            }
        }
        d.deserialize_str(Text)
    }
}

/// Durations that must be at least a second (poll and scan periods, leases).
pub mod period {
    use super::*;

    pub use super::duration::serialize;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = duration::deserialize(d)?;
        if v < Duration::from_secs(1) {
            return Err(de::Error::custom(format!(
                "{} is too short; the least is 1s",
                humantime::format_duration(v)
            )));
        }
        Ok(v)
    }
}

/// A period (at least a second) or `""` for unset (`scan_timeout = ""`).
pub mod blank_period {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => duration::serialize(d, s),
            None => s.serialize_str(""),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim().is_empty() {
            return Ok(None);
        }
        let v = parse_duration(&s).map_err(de::Error::custom)?;
        if v < Duration::from_secs(1) {
            return Err(de::Error::custom(format!(
                "{} is too short; the least is 1s",
                humantime::format_duration(v)
            )));
        }
        Ok(Some(v))
    }
}

/// Types with `FromStr` and `Display` (zones, versions, addresses), as text.
pub mod text {
    use super::*;

    pub fn serialize<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// `Option<T>` written as a string where `""` means unset (`password_file = ""`).
pub mod blank {
    use super::*;

    pub fn serialize<T: Display, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_str(""),
        }
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let s = String::deserialize(d)?;
        if s.trim().is_empty() {
            return Ok(None);
        }
        s.parse().map(Some).map_err(de::Error::custom)
    }
}

/// A whole number in `MIN..=MAX`, as a number or as its text.
pub fn range<'de, D, T, const MIN: i64, const MAX: i64>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    struct Whole;
    impl Visitor<'_> for Whole {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::custom(format!("{v} is too large")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
            v.trim()
                .parse()
                .map_err(|_| E::custom(format!("expected a whole number, got {v:?}")))
        }
    }
    let n = d.deserialize_any(Whole)?;
    if !(MIN..=MAX).contains(&n) {
        return Err(de::Error::custom(format!(
            "{n} is out of range {MIN}..={MAX}"
        )));
    }
    T::try_from(n).map_err(|_| de::Error::custom(format!("{n} is out of range")))
}

/// A fraction between 0 and 1.
pub fn fraction<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct Number;
    impl Visitor<'_> for Number {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
            v.trim()
                .parse()
                .map_err(|_| E::custom(format!("expected a number, got {v:?}")))
        }
    }
    let n = d.deserialize_any(Number)?;
    if (0.0..=1.0).contains(&n) {
        Ok(n)
    } else {
        Err(de::Error::custom(format!(
            "{n} is not a fraction between 0 and 1"
        )))
    }
}

/// A list of names: a TOML array, or (from the environment) comma-separated.
/// Empty entries are dropped; an empty list is an error.
fn names<'de, D: Deserializer<'de>>(d: D, what: &str) -> Result<Vec<String>, D::Error> {
    struct Names;
    impl<'de> Visitor<'de> for Names {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of strings, or one comma-separated string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.split(',').map(str::to_string).collect())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<String>()? {
                out.push(s);
            }
            Ok(out)
        }
    }
    let items: Vec<String> = d
        .deserialize_any(Names)?
        .into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        return Err(de::Error::custom(format!(
            "must name at least one {what} (leave the key out for the default)"
        )));
    }
    Ok(items)
}

/// Task state names as ds-reaper spells them (any line's), never a finished one.
pub fn task_states<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let items = names(d, "state")?;
    let mut problems = Vec::new();
    for s in &items {
        let codes: Vec<i32> = DsLine::ALL.iter().filter_map(|l| l.state_code(s)).collect();
        if codes.is_empty() {
            problems.push(format!(
                "{s:?} is not a task state of any DolphinScheduler line"
            ));
        } else if codes.iter().any(|c| DsLine::is_finished_task_state(*c)) {
            problems.push(format!(
                "{s:?} is a finished state; ds-reaper never touches finished rows"
            ));
        }
    }
    if problems.is_empty() {
        Ok(Some(items))
    } else {
        Err(de::Error::custom(problems.join("; ")))
    }
}

/// Workflow-instance states that are not terminal on some line (SPEC §13).
/// The reaper-core line tables describe task states only; these are
/// `ExecutionStatus` (≤ 3.0) and `WorkflowExecutionStatus` (3.1+) names.
const WORKFLOW_LIVE_STATES: &[&str] = &[
    "SUBMITTED_SUCCESS",
    "RUNNING_EXECUTION",
    "READY_PAUSE",
    "READY_STOP",
    "WAITING_THREAD",
    "WAITING_DEPEND",
    "DELAY_EXECUTION",
    "SERIAL_WAIT",
    "READY_BLOCK",
    "DISPATCH",
    "WAIT_TO_RUN",
    "FAILOVER",
];

/// Workflow states of `reconcile.workflow_states`: only non-terminal ones.
pub fn workflow_states<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let items = names(d, "state")?;
    let problems: Vec<String> = items
        .iter()
        .filter(|s| {
            !WORKFLOW_LIVE_STATES
                .iter()
                .any(|k| k.eq_ignore_ascii_case(s))
        })
        .map(|s| format!("{s:?} is not a non-terminal workflow state"))
        .collect();
    if problems.is_empty() {
        Ok(Some(items))
    } else {
        Err(de::Error::custom(format!(
            "{} (expected some of {})",
            problems.join("; "),
            WORKFLOW_LIVE_STATES.join(", ")
        )))
    }
}

/// Task type names (`SHELL`, `PYTHON`, ...), as DS writes `task_type`.
pub fn task_types<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    names(d, "task type").map(Some)
}

/// etcd endpoints: `http(s)://host:port`, or `host:port`.
pub fn endpoints<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let items = names(d, "endpoint")?;
    for e in &items {
        let hostport = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"))
            .unwrap_or(e);
        if hostport.is_empty() || hostport.contains(['/', ' ']) || !hostport.contains(':') {
            return Err(de::Error::custom(format!(
                "{e:?} is not an endpoint like \"http://127.0.0.1:2379\""
            )));
        }
    }
    Ok(items)
}

/// A non-empty string, trimmed.
pub fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    let t = s.trim();
    if t.is_empty() {
        Err(de::Error::custom("must not be empty"))
    } else {
        Ok(t.to_string())
    }
}

/// An absolute registry path like `/dolphinscheduler`, without a trailing `/`.
pub fn registry_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    let t = s.trim().trim_end_matches('/');
    if t.starts_with('/') && !t.contains("//") {
        Ok(t.to_string())
    } else {
        Err(de::Error::custom(format!(
            "{s:?} must be an absolute registry path like \"/dolphinscheduler\""
        )))
    }
}

/// A path under the registry root like `ds-reaper/agents` (no leading `/`).
pub fn relative_registry_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    let t = s.trim().trim_matches('/');
    if t.is_empty() || t.contains("//") {
        Err(de::Error::custom(format!(
            "{s:?} must be a path under the registry root like \"ds-reaper/agents\""
        )))
    } else {
        Ok(t.to_string())
    }
}

/// A non-empty file-system path.
pub fn path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    non_empty(d).map(PathBuf::from)
}

/// An absolute file-system path.
pub fn absolute_path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    let p = path(d)?;
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(de::Error::custom(format!(
            "{:?} must be an absolute path",
            p.display().to_string()
        )))
    }
}

/// An absolute path, or `""` for none.
pub mod blank_absolute_path {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(p) => s.serialize_str(&p.to_string_lossy()),
            None => s.serialize_str(""),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        let s = String::deserialize(d)?;
        let t = s.trim();
        if t.is_empty() {
            return Ok(None);
        }
        let p = PathBuf::from(t);
        if p.is_absolute() {
            Ok(Some(p))
        } else {
            Err(de::Error::custom(format!("{t:?} must be an absolute path")))
        }
    }
}

/// A socket address like `127.0.0.1:9477`.
pub fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<std::net::SocketAddr, D::Error> {
    let s = String::deserialize(d)?;
    s.trim().parse().map_err(|e| {
        de::Error::custom(format!(
            "{s:?}: {e}; write an address like \"127.0.0.1:9477\""
        ))
    })
}

/// A tracing level or filter (`info`, `reaper=debug,info`).
pub fn log_level<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    let t = s.trim();
    tracing_subscriber::EnvFilter::try_new(t)
        .map(|_| t.to_string())
        .map_err(|e| de::Error::custom(format!("invalid level/filter {s:?}: {e}")))
}
