//! `[yarn]`: the ResourceManagers asked about a task's remote applications
//! (SPEC §17).

use super::values;
use serde::{de, Deserialize, Deserializer, Serialize};
use std::time::Duration;

/// `[yarn]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Yarn {
    /// `http://host:port` of each RM (HA: all of them, any order); empty: off.
    #[serde(deserialize_with = "resource_managers")]
    pub resource_managers: Vec<String>,
    /// Simple auth's `user.name`; empty: none sent.
    pub user: String,
    /// Per request to an RM.
    #[serde(with = "timeout")]
    pub timeout: Duration,
    /// SPEC §17: one deadline for all RM reads of a sweep; None: a third of
    /// `reconcile.sweep_interval`.
    #[serde(with = "values::blank_period")]
    pub sweep_budget: Option<Duration>,
    /// SPEC §17: hold a YARN-type zombie whose host's agent reads no
    /// application-id source.
    pub require_ids: bool,
}

impl Default for Yarn {
    fn default() -> Self {
        Yarn {
            resource_managers: Vec::new(),
            user: String::new(),
            timeout: Duration::from_secs(5),
            sweep_budget: None,
            require_ids: true,
        }
    }
}

impl Yarn {
    pub fn enabled(&self) -> bool {
        !self.resource_managers.is_empty()
    }
}

/// Each an `http://host:port` base, trailing `/` removed. HTTPS is refused:
/// this build has no TLS client, and a silently failing RM would hold every
/// task with known applications.
fn resource_managers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let items = Vec::<String>::deserialize(d)?;
    let mut out = Vec::new();
    for raw in items {
        let e = raw.trim().trim_end_matches('/');
        let Some(hostport) = e.strip_prefix("http://") else {
            return Err(de::Error::custom(format!(
                "{raw:?} is not a ResourceManager address like \"http://rm1:8088\" (https is not supported)"
            )));
        };
        if hostport.is_empty() || hostport.contains(['/', ' ', '?', '#']) {
            return Err(de::Error::custom(format!(
                "{raw:?} is not a ResourceManager address like \"http://rm1:8088\""
            )));
        }
        if !out.iter().any(|o| o == e) {
            out.push(e.to_string());
        }
    }
    Ok(out)
}

/// At least 100 ms, at most a minute: a sweep waits on it.
mod timeout {
    use super::*;

    pub use values::duration::serialize;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = values::duration::deserialize(d)?;
        if v < Duration::from_millis(100) || v > Duration::from_secs(60) {
            return Err(de::Error::custom(format!(
                "{} must be between 100ms and 1m",
                humantime::format_duration(v)
            )));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{load_with, Settings};
    use std::io::Write;
    use std::time::Duration;

    fn load(text: &str) -> Result<Settings, String> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        load_with(f.path(), true, &[]).map_err(|e| e.to_string())
    }

    #[test]
    fn yarn_is_off_by_default_and_its_keys_are_read() {
        let d = Settings::default();
        assert!(!d.yarn.enabled());
        assert!(!d.policy.kill_remote_apps);
        assert_eq!(d.yarn.timeout, Duration::from_secs(5));
        let s = load(
            "[yarn]\nresource_managers = [\"http://rm1:8088/\", \"http://rm2:8088\", \"http://rm1:8088\"]\n\
             user = \"ds\"\ntimeout = \"2s\"\n[policy]\nkill_remote_apps = true\n",
        )
        .unwrap();
        assert_eq!(
            s.yarn.resource_managers,
            ["http://rm1:8088", "http://rm2:8088"]
        );
        assert_eq!(s.yarn.user, "ds");
        assert_eq!(s.yarn.timeout, Duration::from_secs(2));
        assert!(s.policy.kill_remote_apps);
    }

    #[test]
    fn bad_yarn_values_are_named() {
        for (text, key) in [
            (
                "[yarn]\nresource_managers = [\"rm1:8088\"]\n",
                "yarn.resource_managers",
            ),
            (
                "[yarn]\nresource_managers = [\"https://rm1:8090\"]\n",
                "https is not supported",
            ),
            (
                "[yarn]\nresource_managers = [\"http://rm1:8088/ws\"]\n",
                "yarn.resource_managers",
            ),
            ("[yarn]\ntimeout = \"10ms\"\n", "yarn.timeout"),
            ("[yarn]\ntimeout = \"5m\"\n", "yarn.timeout"),
            ("[yarn]\nkerberos = true\n", "yarn.kerberos"),
            (
                "[policy]\nkill_remote_apps = \"yes\"\n",
                "policy.kill_remote_apps",
            ),
        ] {
            let e = load(text).unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
