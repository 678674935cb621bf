//! Building the adapters from the settings, and the `run` daemon: sweeper
//! loop, HTTP server, systemd notifications and graceful shutdown.

use crate::config::RegistryKind;
use crate::config::{Settings, VersionSetting};
use crate::engine::{next_deadline, Engine, Ports, SharedEngine, Trigger};
use crate::metrics::Metrics;
use anyhow::Context;
use reaper_core::ports::{Leadership, RegistrySource, SystemClock};
use reaper_core::{RegistryView, ViewState};
use reaper_etcd::{EtcdLeader, EtcdRegistry, EtcdSettings};
use reaper_jdbc::{JdbcLeader, JdbcRegistry, JdbcSettings, LeaderOptions};
use reaper_sql::{Db, DbSettings, SqlStore};
use reaper_zk::{ZkLeader, ZkRegistry, ZkSettings};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The whole stop must fit in SPEC §7's 10 s.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(8);

pub fn zk_settings(s: &Settings) -> ZkSettings {
    ZkSettings {
        connect: s.zookeeper.connect.clone(),
        root: s.zookeeper.root.clone(),
        session_timeout: s.zookeeper.session_timeout,
        request_timeout: Duration::from_secs(10)
            .min(s.zookeeper.session_timeout.max(Duration::from_secs(2))),
        line: match s.dolphinscheduler.version {
            VersionSetting::Line(l) => Some(l),
            VersionSetting::Auto => None,
        },
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
    e.line = match s.dolphinscheduler.version {
        VersionSetting::Line(l) => Some(l),
        VersionSetting::Auto => None,
    };
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
    j.line = match s.dolphinscheduler.version {
        VersionSetting::Line(l) => Some(l),
        VersionSetting::Auto => None,
    };
    j.zone = s.dolphinscheduler.time_zone;
    j
}

/// The MySQL/MariaDB lock name: `GET_LOCK` is server-wide, so the database
/// is part of it (two DS databases on one server elect apart).
fn jdbc_lock_name(url: &str) -> String {
    let db = url
        .split('?')
        .next()
        .and_then(|u| u.rsplit('/').next())
        .unwrap_or_default();
    let clean: String = db
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "_.:-".contains(*c))
        .collect();
    let mut name = format!("ds-reaper-leader:{clean}");
    name.truncate(64);
    name
}

/// This replica's id in the election: host name and pid.
fn replica_id() -> String {
    format!(
        "{}:{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "ds-reaper".into()),
        std::process::id()
    )
}

/// A registry and, when elected, its leadership.
type RegistryPorts = (Arc<dyn RegistrySource>, Option<Arc<dyn Leadership>>);

/// The registry configured by `[registry] type` and, with `elect`, its
/// leader election.
fn registry(
    settings: &Settings,
    cancel: &CancellationToken,
    elect: bool,
) -> anyhow::Result<RegistryPorts> {
    let elect = elect && settings.leader.enabled;
    Ok(match settings.registry.kind {
        RegistryKind::Zookeeper => {
            let zk = zk_settings(settings);
            let registry = ZkRegistry::start(zk.clone(), cancel.child_token());
            let leader = elect.then(|| {
                Arc::new(ZkLeader::start(
                    zk,
                    settings.leader.path.clone(),
                    replica_id(),
                    cancel.child_token(),
                )) as Arc<dyn Leadership>
            });
            (Arc::new(registry), leader)
        }
        RegistryKind::Etcd => {
            let es = etcd_settings(settings);
            let registry = EtcdRegistry::start(es.clone(), cancel.child_token());
            let leader = elect.then(|| {
                Arc::new(EtcdLeader::start(
                    es,
                    settings.leader.path.clone(),
                    replica_id(),
                    cancel.child_token(),
                )) as Arc<dyn Leadership>
            });
            (Arc::new(registry), leader)
        }
        RegistryKind::Jdbc => {
            let js = jdbc_settings(settings);
            let registry =
                JdbcRegistry::start(js.clone(), cancel.child_token()).context("jdbc_registry")?;
            let leader = if elect {
                let mut opts = LeaderOptions::new(replica_id());
                opts.lock_name = jdbc_lock_name(&js.url);
                Some(Arc::new(
                    JdbcLeader::start(&js, opts, cancel.child_token())
                        .context("leader election")?,
                ) as Arc<dyn Leadership>)
            } else {
                None
            };
            (Arc::new(registry), leader)
        }
    })
}

/// Builds the engine on the real adapters; with `elect`, also joins the
/// leader election.
pub fn build(
    settings: Settings,
    cancel: &CancellationToken,
    elect: bool,
) -> anyhow::Result<SharedEngine> {
    let db = Db::connect_lazy(&db_settings(&settings)).context("database")?;
    let (registry, leader) = registry(&settings, cancel, elect)?;
    let ports = Ports {
        store: Arc::new(SqlStore::new(db)),
        registry,
        leader,
        clock: Arc::new(SystemClock),
    };
    Ok(Arc::new(Engine::new(settings, ports, Metrics::new())))
}

/// Membership and validity, ignoring heartbeat data: a change here is worth a sweep.
fn membership(v: &RegistryView) -> (bool, Vec<String>, Vec<String>) {
    let mut w: Vec<String> = v.workers.keys().cloned().collect();
    w.sort();
    let mut m: Vec<String> = v.masters.keys().cloned().collect();
    m.sort();
    (matches!(v.state, ViewState::Valid { .. }), w, m)
}

/// How far ahead an instant on the engine's clock lies, as a tokio instant.
fn to_tokio(engine: &Engine, at: reaper_core::Instant) -> tokio::time::Instant {
    let d = (at - engine.now()).to_std().unwrap_or(Duration::ZERO);
    tokio::time::Instant::now() + d
}

/// Bursts of membership changes (a whole rack leaving) within this window
/// make one sweep.
pub const COALESCE: Duration = Duration::from_millis(300);

/// The sweeper loop: a sweep every `sweep_interval`, at each grace or settle
/// deadline, and shortly after membership changes; systemd watchdog pings.
pub async fn sweeper(engine: SharedEngine, cancel: CancellationToken) {
    let mut views = engine.watch();
    let interval = engine
        .settings
        .reconcile
        .sweep_interval
        .max(Duration::from_millis(100));
    let mut next_tick = tokio::time::Instant::now() + interval;
    let mut last = membership(&engine.view());
    let mut lost_seen: std::collections::HashSet<String> =
        engine.view().lost_workers.keys().cloned().collect();
    let mut watchdog = tokio::time::interval(Duration::from_secs(5));
    let mut ready_sent = false;
    let mut pending_event: Option<tokio::time::Instant> = None;
    loop {
        let view = engine.view();
        let deadline = next_deadline(&view, &engine.settings, engine.now())
            .map(|d| to_tokio(&engine, d) + Duration::from_millis(20));
        let mut wake = next_tick;
        for d in [deadline, pending_event].into_iter().flatten() {
            wake = wake.min(d);
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep_until(wake) => {
                let trigger = if pending_event.is_some_and(|p| p <= tokio::time::Instant::now()) {
                    Trigger::Event
                } else {
                    Trigger::Tick
                };
                pending_event = None;
                if tokio::time::Instant::now() >= next_tick {
                    next_tick = tokio::time::Instant::now() + interval;
                }
                engine.sweep(trigger).await;
            }
            changed = views.changed() => {
                if !changed {
                    // the registry loop ended (shutdown): keep ticking until cancelled
                    views = engine.watch();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                let v = engine.view();
                // A host counts once per loss: re-listings after a reconnect
                // restamp absent hosts but do not lose them again.
                let now_lost: std::collections::HashSet<String> = v.lost_workers.keys().cloned().collect();
                let new = now_lost.difference(&lost_seen).count();
                engine.metrics.workers_lost_total.inc_by(new as u64);
                lost_seen = now_lost;
                let m = membership(&v);
                if m != last {
                    last = m;
                    pending_event.get_or_insert(tokio::time::Instant::now() + COALESCE);
                }
            }
            _ = watchdog.tick() => {
                // From the sweeper loop, so a hung loop stops the pings and
                // systemd restarts us.
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
                if !ready_sent && crate::http::not_ready(&engine).await.is_none() {
                    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
                    tracing::info!("ready: registry view valid and database answering");
                    ready_sent = true;
                }
            }
        }
    }
}

pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the daemon");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The daemon. Returns when stopped by a signal.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let cancel = CancellationToken::new();
    let listen = settings.http.listen;
    let registry = match settings.registry.kind {
        RegistryKind::Zookeeper => format!(
            "zookeeper {} root {}",
            settings.zookeeper.connect, settings.zookeeper.root
        ),
        RegistryKind::Etcd => format!(
            "etcd {} namespace {}",
            settings.etcd.endpoints.join(","),
            settings.etcd.namespace
        ),
        RegistryKind::Jdbc => "jdbc (DS's database registry)".to_string(),
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %registry,
        database = %settings.database.url,
        leader_election = settings.leader.enabled,
        "starting ds-reaper"
    );
    let engine = build(settings, &cancel, true)?;
    engine.close_dangling_intents();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(%listen, "HTTP listening");

    let http_cancel = cancel.clone();
    let app = crate::http::router(engine.clone());
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { http_cancel.cancelled().await })
            .await
    });
    let sweep = tokio::spawn(sweeper(engine.clone(), cancel.clone()));

    shutdown_signal().await;
    tracing::info!("stopping: finishing the current sweep");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    cancel.cancel();
    let drain = async {
        let _ = sweep.await;
        // Closing the sessions at once hands leadership to a standby now,
        // not after a session timeout.
        engine.close().await;
        let _ = server.await;
    };
    if tokio::time::timeout(SHUTDOWN_DEADLINE, drain)
        .await
        .is_err()
    {
        tracing::warn!("shutdown deadline passed; exiting anyway");
    }
    tracing::info!("stopped");
    Ok(())
}

/// The agent's settings from `[agent]`, `[zookeeper]` and `[dolphinscheduler]`.
pub fn agent_settings(s: &Settings) -> anyhow::Result<reaper_agent::AgentSettings> {
    use reaper_agent::{AgentRegistry, AgentSettings, Publisher};
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
        crate::config::AgentWorker::Auto => None,
        crate::config::AgentWorker::Named(n) => Some(n.clone()),
    };
    a.exec_base = s.agent.exec_base.clone();
    a.process_dir = s.agent.process_dir.clone();
    a.task_log_base = s.agent.task_log_base.clone();
    a.scan_interval = s.agent.scan_interval;
    a.path = s.agent.path.clone();
    a.listen = s.agent.listen;
    a.allow_kill = s.agent.allow_kill;
    a.kill_grace = s.agent.kill_grace;
    a.line = match s.dolphinscheduler.version {
        VersionSetting::Line(l) => Some(l),
        VersionSetting::Auto => None,
    };
    Ok(a)
}

/// `ds-reaper agent`: until SIGTERM/SIGINT.
pub async fn agent(settings: reaper_agent::AgentSettings) -> Result<(), reaper_agent::AgentError> {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("stopping the agent");
        stop.cancel();
    });
    reaper_agent::run(settings, cancel).await
}
