//! `agent.worker = "auto"`: which registered worker node is this host's
//! (SPEC §12). A node name is `<ip>` (1.2) or `<host>:<port>`; 3.2+
//! heartbeats also carry the worker's `host`. This host's addresses are read
//! from the proc filesystem (`net/fib_trie`'s local addresses and
//! `net/if_inet6`), its name from `sys/kernel/hostname`: no unsafe code.

pub use reaper_core::host::host_part;
pub use reaper_core::publish::RegisteredWorker;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

/// What this host is known as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostIdentity {
    pub addrs: BTreeSet<IpAddr>,
    pub hostname: Option<String>,
}

impl HostIdentity {
    /// Reads the addresses and host name of the network namespace and UTS
    /// namespace the proc filesystem at `proc_root` shows (a pod's own, in a
    /// sidecar).
    pub fn read(proc_root: &Path) -> HostIdentity {
        let mut addrs = BTreeSet::new();
        if let Ok(t) = std::fs::read_to_string(proc_root.join("net/fib_trie")) {
            addrs.extend(local_ipv4(&t));
        }
        if let Ok(t) = std::fs::read_to_string(proc_root.join("net/if_inet6")) {
            addrs.extend(ipv6(&t));
        }
        let hostname = std::fs::read_to_string(proc_root.join("sys/kernel/hostname"))
            .ok()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty());
        HostIdentity { addrs, hostname }
    }

    /// How well a registered host (ip or name, without port) matches this
    /// host: `Some(true)` by a routable address or the host name, `Some(false)`
    /// by a loopback address only, None not at all.
    fn matches(&self, host: &str) -> Option<bool> {
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.addrs.contains(&ip).then(|| !ip.is_loopback());
        }
        let host = host.to_ascii_lowercase();
        let name = self.hostname.as_deref()?;
        (host == name || host.starts_with(&format!("{name}."))).then_some(true)
    }
}

/// The outcome of looking for this host's worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    One(String),
    None,
    Several(Vec<String>),
}

/// Picks the one registered worker that is this host's. Matches by a
/// routable address or the host name win over matches by a loopback address
/// (a single-host cluster registers `127.0.0.1`; in a real cluster such a node
/// is every host's loopback and names no host).
pub fn pick(workers: &[RegisteredWorker], me: &HostIdentity) -> Pick {
    let mut strong = BTreeSet::new();
    let mut weak = BTreeSet::new();
    for w in workers {
        let by_name = me.matches(host_part(&w.name));
        let by_heartbeat = w
            .heartbeat_host
            .as_deref()
            .and_then(|h| me.matches(host_part(h)));
        match (by_name, by_heartbeat) {
            (Some(true), _) | (_, Some(true)) => strong.insert(w.name.clone()),
            (Some(false), _) | (_, Some(false)) => weak.insert(w.name.clone()),
            _ => false,
        };
    }
    let chosen = if strong.is_empty() { weak } else { strong };
    match chosen.len() {
        0 => Pick::None,
        1 => Pick::One(chosen.into_iter().next().unwrap_or_default()),
        _ => Pick::Several(chosen.into_iter().collect()),
    }
}

/// The local IPv4 addresses of a `/proc/net/fib_trie`: an address line
/// `|-- a.b.c.d` followed by `/32 host LOCAL`.
fn local_ipv4(text: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut last: Option<IpAddr> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = a.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(a) = last.take() {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
    }
    out
}

/// The addresses of a `/proc/net/if_inet6` (32 hex digits first on each line).
fn ipv6(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|h| u128::from_str_radix(h, 16).ok())
        .map(|v| IpAddr::V6(Ipv6Addr::from(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reaper_core::{DsLine, RegistryLayout};

    const FIB: &str = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 127.0.0.0/8 2 0 2\n        +-- 127.0.0.0/31 1 0 0\n           |-- 127.0.0.0\n              /8 host LOCAL\n           |-- 127.0.0.1\n              /32 host LOCAL\n        |-- 127.255.255.255\n           /32 link BROADCAST\n     +-- 10.0.1.0/24 2 0 2\n        |-- 10.0.1.0\n           /24 link UNICAST\n        |-- 10.0.1.11\n           /32 host LOCAL\nLocal:\n  +-- 0.0.0.0/0 3 0 5\n           |-- 127.0.0.1\n              /32 host LOCAL\n";

    fn me() -> HostIdentity {
        let mut addrs: BTreeSet<IpAddr> = local_ipv4(FIB).into_iter().collect();
        addrs.extend(ipv6(
            "00000000000000000000000000000001 01 80 10 80       lo\nfd000000000000000000000000000002 04 40 00 82     eth0\n",
        ));
        HostIdentity {
            addrs,
            hostname: Some("worker-1".into()),
        }
    }

    fn w(name: &str) -> RegisteredWorker {
        RegisteredWorker {
            name: name.into(),
            heartbeat_host: None,
            process_id: None,
            startup_time: None,
            lines: vec![],
        }
    }

    #[test]
    fn a_node_tells_its_jvm_and_lines() {
        let w = RegisteredWorker::from_node(
            "10.0.0.5:1234",
            Some(RegistryLayout::Flat),
            br#"{"processId":4242,"startupTime":1729245600000,"reportTime":1729249200000,"serverStatus":"NORMAL","host":"10.0.0.5","port":1234}"#,
        );
        assert_eq!(w.process_id, Some(4242));
        assert_eq!(w.heartbeat_host.as_deref(), Some("10.0.0.5"));
        assert_eq!(w.lines, vec![DsLine::V3_2, DsLine::V3_3]);
        let w = RegisteredWorker::from_node(
            "10.0.0.5:1234",
            Some(RegistryLayout::Grouped),
            b"0.15,0.62,120.0,1.2,12.5,32.0,0.3,1685440000000,1685440010000,0,4243,100,100,0",
        );
        assert_eq!((w.process_id, w.lines), (Some(4243), vec![DsLine::V2_0]));
        // 1.3 before its first heartbeat: no pid, the layout's lines
        let w = RegisteredWorker::from_node("10.0.0.5:1234", Some(RegistryLayout::Grouped), b"");
        assert_eq!(w.process_id, None);
        assert!(w.lines.contains(&DsLine::V1_3) && !w.lines.contains(&DsLine::V3_2));
    }

    #[test]
    fn reads_local_addresses() {
        let m = me();
        let v: Vec<String> = m.addrs.iter().map(|a| a.to_string()).collect();
        assert_eq!(v, ["10.0.1.11", "127.0.0.1", "::1", "fd00::2"]);
    }

    #[test]
    fn host_parts() {
        assert_eq!(host_part("10.0.0.5:1234"), "10.0.0.5");
        assert_eq!(host_part("10.0.0.5"), "10.0.0.5");
        assert_eq!(host_part("[fd00::2]:1234"), "[fd00::2]");
        assert_eq!(host_part("fd00::2"), "fd00::2");
        assert_eq!(host_part("worker-1.ds.svc:1234"), "worker-1.ds.svc");
    }

    #[test]
    fn picks_this_hosts_worker() {
        let m = me();
        let all = [w("10.0.1.12:1234"), w("10.0.1.11:1234"), w("10.0.1.13")];
        assert_eq!(pick(&all, &m), Pick::One("10.0.1.11:1234".into()));
        // 1.2 names a worker by its ip
        assert_eq!(
            pick(&[w("10.0.1.11"), w("10.0.1.12")], &m),
            Pick::One("10.0.1.11".into())
        );
        assert_eq!(
            pick(&[w("[fd00::2]:1234")], &m),
            Pick::One("[fd00::2]:1234".into())
        );
        // Kubernetes: the canonical host name
        assert_eq!(
            pick(
                &[w("worker-1.ds-worker-headless:1234"), w("worker-2.x:1234")],
                &m
            ),
            Pick::One("worker-1.ds-worker-headless:1234".into())
        );
        // by the heartbeat's host when the node name is something else
        let renamed = RegisteredWorker {
            heartbeat_host: Some("10.0.1.11".into()),
            ..w("ds-worker-a:1234")
        };
        assert_eq!(
            pick(&[renamed, w("10.0.1.12:1234")], &m),
            Pick::One("ds-worker-a:1234".into())
        );
    }

    #[test]
    fn none_or_several_is_no_identity() {
        let m = me();
        assert_eq!(pick(&[w("10.0.1.12:1234")], &m), Pick::None);
        assert_eq!(pick(&[], &m), Pick::None);
        assert_eq!(
            pick(&[w("10.0.1.11:1234"), w("10.0.1.11:1235")], &m),
            Pick::Several(vec!["10.0.1.11:1234".into(), "10.0.1.11:1235".into()])
        );
    }

    #[test]
    fn loopback_only_when_nothing_better() {
        let m = me();
        assert_eq!(
            pick(&[w("127.0.0.1:1234")], &m),
            Pick::One("127.0.0.1:1234".into())
        );
        assert_eq!(
            pick(&[w("127.0.0.1:1234"), w("10.0.1.11:1234")], &m),
            Pick::One("10.0.1.11:1234".into())
        );
    }

    #[test]
    fn reads_this_machine() {
        let me = HostIdentity::read(Path::new("/proc"));
        assert!(
            me.addrs.contains(&"127.0.0.1".parse::<IpAddr>().unwrap()),
            "{me:?}"
        );
    }
}
