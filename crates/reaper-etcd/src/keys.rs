//! Where things are in etcd. DS applies its namespace as a raw byte prefix
//! (jetcd's `.namespace(...)`, 3.2.2 `EtcdRegistry`): its paths all start
//! with `/`, so `dolphinscheduler` + `/nodes/worker/h:1` is the key
//! `dolphinscheduler/nodes/worker/h:1`. ds-reaper's own keys (leader,
//! agents) sit under `<namespace>/<path>` the same way.

/// The key prefix of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    namespace: String,
}

impl Keys {
    pub(crate) fn new(namespace: &str) -> Keys {
        Keys {
            namespace: namespace.to_string(),
        }
    }

    /// The range of a directory relative to the root (`/nodes`,
    /// `/ds-reaper/agents`): `<ns>/nodes/`.
    pub(crate) fn dir_prefix(&self, dir: &str) -> String {
        format!("{}{}/", self.namespace, dir.trim_end_matches('/'))
    }

    /// A key's path relative to the root (`/nodes/worker/h:1`), if it is
    /// under the namespace.
    pub(crate) fn rel<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.namespace.as_str())
            .filter(|r| r.starts_with('/'))
    }
}

/// `<namespace>/<path>` for a path of ds-reaper's own (`ds-reaper/leader`,
/// with or without slashes around it).
pub(crate) fn under(namespace: &str, path: &str) -> String {
    format!("{namespace}/{}", path.trim_matches('/'))
}

/// The agent key of `worker`: `<ns>/<agent path>/<worker>`.
pub(crate) fn agent_key(namespace: &str, agent_path: &str, worker: &str) -> String {
    format!("{}/{}", under(namespace, agent_path), worker.trim())
}

/// The end of the range holding every key that starts with `prefix`
/// (etcd's `GetPrefixRangeEnd`): the prefix with its last byte below 0xff
/// incremented and what follows dropped; `\0` (every key) if there is none.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_is_a_raw_prefix() {
        let k = Keys::new("dolphinscheduler");
        assert_eq!(k.dir_prefix("/nodes"), "dolphinscheduler/nodes/");
        assert_eq!(
            k.dir_prefix("/ds-reaper/agents"),
            "dolphinscheduler/ds-reaper/agents/"
        );
        assert_eq!(
            k.rel("dolphinscheduler/nodes/worker/10.0.0.5:1234"),
            Some("/nodes/worker/10.0.0.5:1234")
        );
        // another namespace sharing the first letters is not ours
        assert_eq!(k.rel("dolphinscheduler2/nodes/worker/h:1"), None);
        assert_eq!(k.rel("other/nodes/worker/h:1"), None);
        // a namespace given with a leading slash is kept as DS keeps it
        let k = Keys::new("/ds");
        assert_eq!(
            k.rel("/ds/nodes/master/h:5678"),
            Some("/nodes/master/h:5678")
        );
    }

    #[test]
    fn own_keys() {
        assert_eq!(
            agent_key("dolphinscheduler", "/ds-reaper/agents/", "h:1"),
            "dolphinscheduler/ds-reaper/agents/h:1"
        );
        assert_eq!(
            under("dolphinscheduler", "/ds-reaper/leader"),
            "dolphinscheduler/ds-reaper/leader"
        );
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
