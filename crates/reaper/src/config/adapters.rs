//! The adapters' settings, from the validated [`Settings`]: the one place a
//! config section becomes what an adapter (or the agent) is built with.

use super::{AgentWorker, RegistryKind, Settings, VersionSetting};
use reaper_core::DsLine;
use reaper_etcd::EtcdSettings;
use reaper_jdbc::JdbcSettings;
use reaper_sql::DbSettings;
use reaper_zk::ZkSettings;
use std::time::Duration;

/// The line `dolphinscheduler.version` names; None for `auto`.
fn line(s: &Settings) -> Option<DsLine> {
    match s.dolphinscheduler.version {
        VersionSetting::Line(l) => Some(l),
        VersionSetting::Auto => None,
    }
}

pub fn zk_settings(s: &Settings) -> ZkSettings {
    ZkSettings {
        connect: s.zookeeper.connect.clone(),
        root: s.zookeeper.root.clone(),
        session_timeout: s.zookeeper.session_timeout,
        request_timeout: Duration::from_secs(10)
            .min(s.zookeeper.session_timeout.max(Duration::from_secs(2))),
        line: line(s),
        zone: s.dolphinscheduler.time_zone,
        agents: Some((s.agent.path.clone(), s.reconcile.agent_stale_after)),
    }
}

pub fn db_settings(s: &Settings) -> DbSettings {
    DbSettings {
        url: s.database.url.expose().to_string(),
        password: s
            .database
            .password_file
            .as_ref()
            .map(|f| f.secret().expose().to_string()),
        max_connections: s.database.max_connections,
        statement_timeout: s.database.statement_timeout,
        zone: s.dolphinscheduler.time_zone,
    }
}

pub fn etcd_settings(s: &Settings) -> EtcdSettings {
    let mut e = EtcdSettings::new(s.etcd.endpoints.clone());
    e.namespace = s.etcd.namespace.clone();
    e.user = s.etcd.user.clone();
    e.password = s
        .etcd
        .password_file
        .as_ref()
        .map(|f| f.secret().expose().to_string());
    e.lease_ttl = s.etcd.lease_ttl;
    e.request_timeout = Duration::from_secs(10).min(s.etcd.lease_ttl.max(Duration::from_secs(2)));
    e.line = line(s);
    e.zone = s.dolphinscheduler.time_zone;
    e.agents = Some((s.agent.path.clone(), s.reconcile.agent_stale_after));
    e
}

pub fn jdbc_settings(s: &Settings) -> JdbcSettings {
    // Empty: DS's registry lives in the [database] connection.
    let (url, password) = match &s.jdbc_registry.url {
        Some(u) if !u.expose().trim().is_empty() => (u.expose().to_string(), None),
        _ => (
            s.database.url.expose().to_string(),
            s.database
                .password_file
                .as_ref()
                .map(|f| f.secret().expose().to_string()),
        ),
    };
    let mut j = JdbcSettings::new(url);
    j.password = password;
    j.poll_interval = s.jdbc_registry.poll_interval;
    j.expire_after = s.jdbc_registry.expire_after;
    j.statement_timeout = s.database.statement_timeout;
    j.line = line(s);
    j.zone = s.dolphinscheduler.time_zone;
    j.outage_grace = s.reconcile.grace_period;
    j.outage_hold = s.jdbc_registry.outage_hold;
    j
}

/// The agent's settings from `[agent]`, `[zookeeper]` and `[dolphinscheduler]`.
pub fn agent_settings(s: &Settings) -> anyhow::Result<reaper_agent::AgentSettings> {
    use reaper_agent::{AgentRegistry, AgentSettings, Publisher};
    use std::sync::Arc;
    let registry = match s.registry.kind {
        RegistryKind::Zookeeper => {
            let mut t = ZkSettings::new(s.zookeeper.connect.clone(), s.zookeeper.root.clone());
            t.session_timeout = s.zookeeper.session_timeout;
            AgentRegistry::new(
                format!("ZooKeeper {}", t.connect),
                move |path, line, cancel| -> Arc<dyn Publisher> {
                    let t = ZkSettings { line, ..t.clone() };
                    Arc::new(reaper_zk::ZkAgentPublisher::start(t, path, cancel))
                },
            )
        }
        RegistryKind::Etcd => {
            let e = etcd_settings(s);
            AgentRegistry::new(
                format!("etcd {}", e.endpoints.join(",")),
                move |path, _, cancel| -> Arc<dyn Publisher> {
                    Arc::new(reaper_etcd::EtcdAgentPublisher::start(
                        e.clone(),
                        path,
                        cancel,
                    ))
                },
            )
        }
        RegistryKind::Jdbc => anyhow::bail!(
            "registry.type = \"jdbc\": agents publish through ZooKeeper or etcd only (SPEC §12)"
        ),
    };
    let mut a = AgentSettings::new(registry);
    a.worker = match &s.agent.worker {
        AgentWorker::Auto => None,
        AgentWorker::Named(n) => Some(n.clone()),
    };
    a.exec_base = s.agent.exec_base.clone();
    a.process_dir = s.agent.process_dir.clone();
    a.task_log_base = s.agent.task_log_base.clone();
    a.scan_interval = s.agent.scan_interval;
    a.scan_timeout = s.agent.scan_timeout;
    a.clock_skew_tolerance = s.reconcile.clock_skew_tolerance;
    a.stale_after = s.reconcile.agent_stale_after;
    a.path = s.agent.path.clone();
    a.listen = s.agent.listen;
    a.allow_kill = s.agent.allow_kill;
    a.kill_grace = s.agent.kill_grace;
    a.line = line(s);
    Ok(a)
}
