//! The metric families, registered in groups: `Metrics::new` takes each
//! group's handles in the order they were always registered in.

use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

pub(super) fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
    // Registration fails only for duplicate names, which is a programming error
    // caught by the tests; the metric still works unregistered.
    if let Err(e) = r.register(Box::new(m.clone())) {
        tracing::error!(error = %e, "metric registration failed");
    }
    m
}

pub(super) fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect("static metric definition")
}

pub(super) fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).expect("static metric definition")
}

pub(super) fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric definition")
}

pub(super) fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("static metric definition")
}

// The families are registered in groups, the groups in `Metrics::new`'s
// order and each group's families in the order it returns them, which keeps
// the order they were always registered in.

/// What the last sweep found among the task rows, and the writes done.
pub(super) fn task_metrics(r: &Registry) -> (IntGaugeVec, IntCounterVec, IntCounterVec, IntGauge) {
    (
        reg(
            r,
            gauge_vec(
                "zombies",
                "Zombies found by the last sweep (before its actions)",
                &["reason"],
            ),
        ),
        reg(
            r,
            counter_vec(
                "zombies_detected_total",
                "Distinct zombies first seen",
                &["reason"],
            ),
        ),
        reg(
            r,
            counter_vec("actions_total", "Writes done", &["action", "result"]),
        ),
        reg(
            r,
            gauge("candidates", "Live-state rows seen by the last sweep"),
        ),
    )
}

/// The servers live in the registry.
pub(super) fn server_metrics(r: &Registry) -> (IntGauge, IntGauge, IntCounter) {
    (
        reg(r, gauge("live_workers", "Workers live in the registry")),
        reg(r, gauge("live_masters", "Masters live in the registry")),
        reg(
            r,
            counter("workers_lost_total", "Workers seen leaving the registry"),
        ),
    )
}

/// The sweeps themselves.
pub(super) fn sweep_metrics(r: &Registry) -> (IntCounterVec, Histogram, Gauge) {
    (
        reg(
            r,
            counter_vec("sweeps_total", "Sweeps by result", &["result"]),
        ),
        reg(
            r,
            Histogram::with_opts(
                HistogramOpts::new("sweep_duration_seconds", "Duration of a sweep").buckets(vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ]),
            )
            .expect("static metric definition"),
        ),
        reg(
            r,
            Gauge::new(
                "last_sweep_timestamp_seconds",
                "Unix time of the last completed sweep",
            )
            .expect("static metric definition"),
        ),
    )
}

/// Why the daemon may not act: the registry view, the leadership, the
/// brake, and the errors of both sides.
pub(super) struct Health {
    pub(super) registry_view_valid: IntGauge,
    pub(super) zk_session_expirations_total: IntCounter,
    pub(super) leader: IntGauge,
    pub(super) brake_engaged: IntGauge,
    pub(super) registry_outage: IntGaugeVec,
    pub(super) db_errors_total: IntCounter,
    pub(super) zk_errors_total: IntCounter,
}

pub(super) fn health_metrics(r: &Registry) -> Health {
    Health {
        registry_view_valid: reg(
            r,
            gauge("registry_view_valid", "1 when the registry view is valid"),
        ),
        zk_session_expirations_total: reg(
            r,
            counter(
                "zk_session_expirations_total",
                "ZooKeeper session expirations",
            ),
        ),
        leader: reg(
            r,
            gauge(
                "leader",
                "1 when this replica is the leader (1 when election is off)",
            ),
        ),
        brake_engaged: reg(r, gauge("brake_engaged", "1 while the brake is engaged")),
        registry_outage: reg(
            r,
            gauge_vec(
                "registry_outage",
                "1 while servers lost right after a registry-database outage (named in servers) \
                 hold the brake (registry_outage) until seen again or outage_hold passes",
                &["servers"],
            ),
        ),
        db_errors_total: reg(r, counter("db_errors_total", "Database errors")),
        zk_errors_total: reg(r, counter("zk_errors_total", "ZooKeeper errors")),
    }
}

/// The build, the rows that could not be read, and the agents.
pub(super) fn input_metrics(r: &Registry) -> (IntGaugeVec, IntCounterVec, IntGaugeVec) {
    (
        reg(
            r,
            gauge_vec("build_info", "Build information", &["version", "ds_line"]),
        ),
        reg(
            r,
            counter_vec(
                "rows_skipped_total",
                "Rows that could not be decoded",
                &["table"],
            ),
        ),
        reg(
            r,
            gauge_vec(
                "agents",
                "Worker-host agents known to the daemon",
                &["state"],
            ),
        ),
    )
}

/// SPEC §13.
pub(super) fn workflow_metrics(r: &Registry) -> (IntGaugeVec, IntCounterVec) {
    (
        reg(
            r,
            gauge_vec(
                "workflow_zombies",
                "Workflow findings of the last sweep",
                &["reason"],
            ),
        ),
        reg(
            r,
            counter_vec(
                "workflow_actions_total",
                "Workflow writes done",
                &["action", "result"],
            ),
        ),
    )
}

/// SPEC §15 and §17: ghost processes and remote applications, registered
/// interleaved as they always were.
pub(super) fn ghost_metrics(r: &Registry) -> (IntGauge, IntGaugeVec, IntCounterVec, IntCounterVec) {
    (
        reg(
            r,
            gauge("ghosts", "Ghost processes found by the last sweep"),
        ),
        reg(
            r,
            gauge_vec(
                "remote_apps",
                "YARN applications of the last sweep's zombies, by the RM's state",
                &["state"],
            ),
        ),
        reg(
            r,
            counter_vec(
                "remote_app_kills_total",
                "YARN application kills asked of the RM",
                &["result"],
            ),
        ),
        reg(
            r,
            counter_vec("ghost_actions_total", "Kill orders' outcomes", &["result"]),
        ),
    )
}

/// SPEC §16.
pub(super) fn anomaly_metrics(r: &Registry) -> (IntGaugeVec, IntGaugeVec) {
    (
        reg(
            r,
            gauge_vec(
                "anomalies",
                "Stuck-under-a-live-owner findings of the last sweep",
                &["kind"],
            ),
        ),
        reg(
            r,
            gauge_vec(
                "oldest_live_seconds",
                "Age of the oldest flag = 1 row per live or queued task state",
                &["state"],
            ),
        ),
    )
}
