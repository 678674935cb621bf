//! The ZooKeeper registry adapter of ds-reaper.
//!
//! [`Registry`] keeps a [`RegistryView`] of the live DS workers and masters up to
//! date from a real ZooKeeper session, with the validity rule of SPEC §4.1: the
//! view is valid only after a full listing completed on the current connection.
//! [`LeaderElection`] elects one acting replica among ds-reaper instances.
//! [`heartbeat`] parses every DS heartbeat format.

pub use reaper_core::registry::heartbeat;
mod leader;
mod registry;

use reaper_core::{DsLine, HeartbeatFormat, RegistryLayout, Zone};
use std::future::Future;
use std::time::Duration;

pub use leader::LeaderElection;
pub use reaper_core::RegistryView;
pub use registry::Registry;

/// Where and how to read the registry.
#[derive(Debug, Clone)]
pub struct ZkSettings {
    /// Comma-separated ensemble, e.g. `"127.0.0.1:2181,host2:2181"`.
    pub connect: String,
    /// The DS root, a plain path prefix (not a chroot), e.g. `"/dolphinscheduler"`.
    pub root: String,
    pub session_timeout: Duration,
    /// Every ZooKeeper call is bounded by this.
    pub request_timeout: Duration,
    /// An explicit line fixes layout and format; `None` detects them.
    pub line: Option<DsLine>,
    /// Zone of the 1.x CSV date-times.
    pub zone: Zone,
}

impl ZkSettings {
    /// Settings with the defaults of SPEC §6 for everything but the ensemble and root.
    pub fn new(connect: impl Into<String>, root: impl Into<String>) -> Self {
        ZkSettings {
            connect: connect.into(),
            root: root.into(),
            session_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            line: None,
            zone: Zone::Local,
        }
    }

    /// The root without a trailing slash ("" for "/"), always absolute.
    pub(crate) fn root_prefix(&self) -> String {
        let t = self.root.trim().trim_end_matches('/');
        if t.is_empty() {
            String::new()
        } else if t.starts_with('/') {
            t.to_string()
        } else {
            format!("/{t}")
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZkError {
    #[error("ZooKeeper request timed out after {0:?}")]
    Timeout(Duration),
    #[error("ZooKeeper: {0}")]
    Zk(#[from] zookeeper_client::Error),
    #[error("not connected to ZooKeeper")]
    NotConnected,
}

/// Bounds a ZooKeeper call: the client queues requests while disconnected.
pub(crate) async fn bounded<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, zookeeper_client::Error>>,
) -> Result<T, ZkError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(ZkError::from),
        Err(_) => Err(ZkError::Timeout(limit)),
    }
}

/// What the registry looks like, as far as it has been seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub layout: Option<RegistryLayout>,
    pub format: Option<HeartbeatFormat>,
    /// Lines consistent with what was seen; all 8 when nothing was seen, empty
    /// when layout and format contradict each other.
    pub lines: Vec<DsLine>,
}

impl Detected {
    pub(crate) fn from_evidence(
        layout: Option<RegistryLayout>,
        format: Option<HeartbeatFormat>,
        only_2_0: bool,
    ) -> Self {
        let lines = DsLine::ALL
            .into_iter()
            .filter(|l| match layout {
                Some(x) => l.layout() == x,
                None => true,
            })
            .filter(|l| match format {
                Some(f) => l.heartbeat_format() == f,
                None => true,
            })
            // 14 CSV fields: only 2.0.6–2.0.9 wrote diskAvailable
            .filter(|l| !only_2_0 || *l == DsLine::V2_0)
            .collect();
        Detected {
            layout,
            format,
            lines,
        }
    }

    pub(crate) fn explicit(line: DsLine) -> Self {
        Detected {
            layout: Some(line.layout()),
            format: Some(line.heartbeat_format()),
            lines: vec![line],
        }
    }
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZkStats {
    pub session_expirations: u64,
    pub errors: u64,
    pub reconnects: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_narrows_lines() {
        assert_eq!(Detected::from_evidence(None, None, false).lines.len(), 8);
        let d = Detected::from_evidence(
            Some(RegistryLayout::Grouped),
            Some(HeartbeatFormat::CsvEpoch),
            false,
        );
        assert_eq!(d.lines, vec![DsLine::V2_0, DsLine::V3_0, DsLine::V3_1_0]);
        let d = Detected::from_evidence(
            Some(RegistryLayout::Grouped),
            Some(HeartbeatFormat::CsvEpoch),
            true,
        );
        assert_eq!(d.lines, vec![DsLine::V2_0]);
        let d = Detected::from_evidence(
            Some(RegistryLayout::Flat),
            Some(HeartbeatFormat::Json32),
            false,
        );
        assert_eq!(d.lines, vec![DsLine::V3_2, DsLine::V3_3]);
        // contradictory evidence: no line fits
        let d = Detected::from_evidence(
            Some(RegistryLayout::Legacy),
            Some(HeartbeatFormat::Json31),
            false,
        );
        assert!(d.lines.is_empty());
        assert_eq!(Detected::explicit(DsLine::V1_2).lines, vec![DsLine::V1_2]);
    }

    #[test]
    fn root_prefix_forms() {
        let r = |root: &str| ZkSettings::new("x", root).root_prefix();
        assert_eq!(r("/dolphinscheduler"), "/dolphinscheduler");
        assert_eq!(r("/dolphinscheduler/"), "/dolphinscheduler");
        assert_eq!(r("dolphinscheduler"), "/dolphinscheduler");
        assert_eq!(r("/"), "");
    }
}
