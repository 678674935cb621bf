//! Host normalisation (SPEC §3): case and surrounding whitespace do not matter,
//! and a registry node is compared by the last segment of its path.

use std::borrow::Cow;
use std::net::IpAddr;

/// Normalises a host as written in `t_ds_task_instance.host` or a node name.
/// Borrows when the input is already normal (the common case on the hot path).
pub fn normalize(host: &str) -> Cow<'_, str> {
    let t = host.trim();
    if t.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(t.to_ascii_lowercase())
    } else {
        Cow::Borrowed(t)
    }
}

/// The host a registry node stands for: the normalised last path segment.
pub fn from_node_path(path: &str) -> String {
    let last = path.rsplit('/').next().unwrap_or(path);
    normalize(last).into_owned()
}

/// True for a NULL-ish host: DS writes `NULL`/`null` strings into workflow
/// hosts on failover, and an empty task host means "never dispatched".
pub fn is_empty(host: Option<&str>) -> bool {
    match host {
        None => true,
        Some(h) => {
            let t = h.trim();
            t.is_empty() || t.eq_ignore_ascii_case("null")
        }
    }
}

/// The host part of a node name: `10.0.0.5:1234` → `10.0.0.5`, `10.0.0.5`
/// → itself, `[fe80::1]:1234` → `fe80::1`, a bare IPv6 address → itself.
pub fn host_part(name: &str) -> &str {
    let name = name.trim();
    if name.parse::<IpAddr>().is_ok() {
        return name;
    }
    match name.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_case_and_whitespace() {
        assert_eq!(normalize(" 10.0.0.5:1234 "), "10.0.0.5:1234");
        assert_eq!(normalize("Worker-1.DS.svc:1234"), "worker-1.ds.svc:1234");
        assert!(matches!(normalize("10.0.0.5:1234"), Cow::Borrowed(_)));
    }

    #[test]
    fn node_paths() {
        assert_eq!(
            from_node_path("/dolphinscheduler/nodes/worker/default/10.0.0.5:1234"),
            "10.0.0.5:1234"
        );
        assert_eq!(
            from_node_path("/dolphinscheduler/workers/10.0.0.5"),
            "10.0.0.5"
        );
        assert_eq!(from_node_path("Host-A"), "host-a");
    }

    #[test]
    fn empty_hosts() {
        assert!(is_empty(None));
        assert!(is_empty(Some("")));
        assert!(is_empty(Some("  ")));
        assert!(is_empty(Some("NULL")));
        assert!(!is_empty(Some("10.0.0.5:1234")));
    }
}
