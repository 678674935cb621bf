//! Building the engine on the real adapters, and running it: the `run`
//! daemon (the sweeper of [`crate::engine::driver`], the HTTP server,
//! systemd notifications, graceful shutdown) and the `agent`.

use crate::config::adapters::{db_settings, etcd_settings, jdbc_settings, zk_settings};
use crate::config::{RegistryKind, Settings};
use crate::engine::driver::sweeper;
use crate::engine::{Engine, Ports, SharedEngine};
use crate::metrics::Metrics;
use anyhow::Context;
use reaper_core::ports::{Clock, Leadership, RegistrySource, SystemClock};
use reaper_etcd::{EtcdLeader, EtcdRegistry};
use reaper_jdbc::{JdbcLeader, JdbcRegistry, LeaderOptions};
use reaper_sql::{Db, SqlStore};
use reaper_zk::{ZkLeader, ZkRegistry};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The whole stop must fit in SPEC §7's 10 s.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(8);

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
    clock: Arc<dyn Clock>,
    cancel: &CancellationToken,
    elect: bool,
) -> anyhow::Result<RegistryPorts> {
    let elect = elect && settings.leader.enabled;
    Ok(match settings.registry.kind {
        RegistryKind::Zookeeper => {
            let zk = zk_settings(settings);
            let registry = ZkRegistry::start_with_clock(zk.clone(), clock, cancel.child_token());
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
            let registry = EtcdRegistry::start_with_clock(es.clone(), clock, cancel.child_token());
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
            let registry = JdbcRegistry::start_with_clock(js.clone(), clock, cancel.child_token())
                .context("jdbc_registry")?;
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
    // One clock for the engine and the registry it reads: losses and the
    // grace periods measured from them are on the same time line.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (registry, leader) = registry(&settings, clock.clone(), cancel, elect)?;
    let ports = Ports {
        store: Arc::new(SqlStore::new(db)),
        registry,
        leader,
        clock,
        rm: crate::yarn::resource_manager(&settings.yarn),
    };
    Ok(Arc::new(Engine::new(settings, ports, Metrics::new())))
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
    engine.close_dangling_intents().await;
    engine.own_remote_apps().await;
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
