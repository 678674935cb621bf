//! Prometheus metrics (SPEC §9): one struct of handles registered on a registry
//! passed in, no globals.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use reaper_core::Reason;

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub zombies: IntGaugeVec,
    pub zombies_detected_total: IntCounterVec,
    pub actions_total: IntCounterVec,
    pub candidates: IntGauge,
    pub live_workers: IntGauge,
    pub live_masters: IntGauge,
    pub workers_lost_total: IntCounter,
    pub sweeps_total: IntCounterVec,
    pub sweep_duration_seconds: Histogram,
    pub last_sweep_timestamp_seconds: Gauge,
    pub registry_view_valid: IntGauge,
    pub zk_session_expirations_total: IntCounter,
    pub leader: IntGauge,
    pub brake_engaged: IntGauge,
    pub db_errors_total: IntCounter,
    pub zk_errors_total: IntCounter,
    pub build_info: IntGaugeVec,
    pub rows_skipped_total: IntCounterVec,
    pub agents: IntGaugeVec,
    pub workflow_zombies: IntGaugeVec,
    pub workflow_actions_total: IntCounterVec,
    /// SPEC §15.
    pub ghosts: IntGauge,
    pub ghost_actions_total: IntCounterVec,
    /// SPEC §16: live-owner findings of the last sweep, by kind.
    pub anomalies: IntGaugeVec,
    /// SPEC §16: age of the oldest candidate row, by state name.
    pub oldest_live_seconds: IntGaugeVec,
    /// SPEC §17.
    pub remote_apps: IntGaugeVec,
    pub remote_app_kills_total: IntCounterVec,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
    // Registration fails only for duplicate names, which is a programming error
    // caught by the tests; the metric still works unregistered.
    if let Err(e) = r.register(Box::new(m.clone())) {
        tracing::error!(error = %e, "metric registration failed");
    }
    m
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new_custom(Some("ds_reaper".into()), None).unwrap_or_default();
        let gauge =
            |name: &str, help: &str| IntGauge::new(name, help).expect("static metric definition");
        let counter =
            |name: &str, help: &str| IntCounter::new(name, help).expect("static metric definition");
        let m = Metrics {
            zombies: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "zombies",
                        "Zombies found by the last sweep (before its actions)",
                    ),
                    &["reason"],
                )
                .expect("static metric definition"),
            ),
            zombies_detected_total: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("zombies_detected_total", "Distinct zombies first seen"),
                    &["reason"],
                )
                .expect("static metric definition"),
            ),
            actions_total: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("actions_total", "Writes done"),
                    &["action", "result"],
                )
                .expect("static metric definition"),
            ),
            candidates: reg(
                &r,
                gauge("candidates", "Live-state rows seen by the last sweep"),
            ),
            live_workers: reg(&r, gauge("live_workers", "Workers live in the registry")),
            live_masters: reg(&r, gauge("live_masters", "Masters live in the registry")),
            workers_lost_total: reg(
                &r,
                counter("workers_lost_total", "Workers seen leaving the registry"),
            ),
            sweeps_total: reg(
                &r,
                IntCounterVec::new(Opts::new("sweeps_total", "Sweeps by result"), &["result"])
                    .expect("static metric definition"),
            ),
            sweep_duration_seconds: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new("sweep_duration_seconds", "Duration of a sweep").buckets(
                        vec![
                            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                        ],
                    ),
                )
                .expect("static metric definition"),
            ),
            last_sweep_timestamp_seconds: reg(
                &r,
                Gauge::new(
                    "last_sweep_timestamp_seconds",
                    "Unix time of the last completed sweep",
                )
                .expect("static metric definition"),
            ),
            registry_view_valid: reg(
                &r,
                gauge("registry_view_valid", "1 when the registry view is valid"),
            ),
            zk_session_expirations_total: reg(
                &r,
                counter(
                    "zk_session_expirations_total",
                    "ZooKeeper session expirations",
                ),
            ),
            leader: reg(
                &r,
                gauge(
                    "leader",
                    "1 when this replica is the leader (1 when election is off)",
                ),
            ),
            brake_engaged: reg(&r, gauge("brake_engaged", "1 while the brake is engaged")),
            db_errors_total: reg(&r, counter("db_errors_total", "Database errors")),
            zk_errors_total: reg(&r, counter("zk_errors_total", "ZooKeeper errors")),
            build_info: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new("build_info", "Build information"),
                    &["version", "ds_line"],
                )
                .expect("static metric definition"),
            ),
            rows_skipped_total: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("rows_skipped_total", "Rows that could not be decoded"),
                    &["table"],
                )
                .expect("static metric definition"),
            ),
            agents: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new("agents", "Worker-host agents known to the daemon"),
                    &["state"],
                )
                .expect("static metric definition"),
            ),
            workflow_zombies: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new("workflow_zombies", "Workflow findings of the last sweep"),
                    &["reason"],
                )
                .expect("static metric definition"),
            ),
            workflow_actions_total: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("workflow_actions_total", "Workflow writes done"),
                    &["action", "result"],
                )
                .expect("static metric definition"),
            ),
            ghosts: reg(
                &r,
                gauge("ghosts", "Ghost processes found by the last sweep"),
            ),
            remote_apps: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "remote_apps",
                        "YARN applications of the last sweep's zombies, by the RM's state",
                    ),
                    &["state"],
                )
                .expect("static metric definition"),
            ),
            remote_app_kills_total: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "remote_app_kills_total",
                        "YARN application kills asked of the RM",
                    ),
                    &["result"],
                )
                .expect("static metric definition"),
            ),
            ghost_actions_total: reg(
                &r,
                IntCounterVec::new(
                    Opts::new("ghost_actions_total", "Kill orders' outcomes"),
                    &["result"],
                )
                .expect("static metric definition"),
            ),
            anomalies: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "anomalies",
                        "Stuck-under-a-live-owner findings of the last sweep",
                    ),
                    &["kind"],
                )
                .expect("static metric definition"),
            ),
            oldest_live_seconds: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "oldest_live_seconds",
                        "Age of the oldest flag = 1 row per live or queued task state",
                    ),
                    &["state"],
                )
                .expect("static metric definition"),
            ),
            registry: r,
        };
        for kind in reaper_core::anomaly::AnomalyKind::ALL {
            m.anomalies.with_label_values(&[kind.as_str()]).set(0);
        }
        // until the first sweep says which states the line has
        for state in reaper_core::anomaly::QUEUED_STATES
            .iter()
            .chain(&["RUNNING_EXECUTION"])
        {
            m.oldest_live_seconds.with_label_values(&[state]).set(0);
        }
        // Pre-create the label sets so dashboards and alerts see zeros, not gaps.
        for reason in Reason::ALL {
            m.zombies.with_label_values(&[reason.as_str()]).set(0);
            m.zombies_detected_total
                .with_label_values(&[reason.as_str()]);
        }
        for result in ["ok", "error", "skipped"] {
            m.sweeps_total.with_label_values(&[result]);
        }
        for action in ["fail", "fault-tolerance", "kill"] {
            for result in ["ok", "lost_race", "error"] {
                m.actions_total.with_label_values(&[action, result]);
            }
        }
        m.rows_skipped_total
            .with_label_values(&["t_ds_task_instance"]);
        for reason in reaper_core::workflow::WorkflowReason::ALL {
            m.workflow_zombies
                .with_label_values(&[reason.as_str()])
                .set(0);
        }
        for result in ["ok", "lost_race", "error"] {
            m.workflow_actions_total
                .with_label_values(&["recover", result]);
        }
        for state in ["fresh", "stale"] {
            m.agents.with_label_values(&[state]).set(0);
        }
        for result in ["killed", "gone", "refused", "partial", "error"] {
            m.ghost_actions_total.with_label_values(&[result]);
        }
        for state in crate::engine::REMOTE_APP_STATES {
            m.remote_apps.with_label_values(&[state]).set(0);
        }
        for result in ["killed", "error"] {
            m.remote_app_kills_total.with_label_values(&[result]);
        }
        m.set_build_info("unknown");
        m
    }

    pub fn set_build_info(&self, line: &str) {
        self.build_info.reset();
        self.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), line])
            .set(1);
    }

    /// Raises a counter to an absolute value read from an adapter's own counter.
    pub fn sync_counter(c: &IntCounter, total: u64) {
        let cur = c.get();
        if total > cur {
            c.inc_by(total - cur);
        }
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let enc = TextEncoder::new();
        if let Err(e) = enc.encode(&self.registry.gather(), &mut buf) {
            return format!("# encoding failed: {e}\n");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_metric_is_exposed() {
        let m = Metrics::new();
        m.sweep_duration_seconds.observe(0.1);
        let text = m.render();
        for name in [
            "ds_reaper_zombies{reason=\"worker_lost\"} 0",
            "ds_reaper_zombies_detected_total{reason=\"no_host\"} 0",
            "ds_reaper_actions_total{action=\"fail\",result=\"lost_race\"} 0",
            "ds_reaper_candidates 0",
            "ds_reaper_live_workers 0",
            "ds_reaper_live_masters 0",
            "ds_reaper_workers_lost_total 0",
            "ds_reaper_sweeps_total{result=\"skipped\"} 0",
            "ds_reaper_sweep_duration_seconds_bucket",
            "ds_reaper_last_sweep_timestamp_seconds 0",
            "ds_reaper_registry_view_valid 0",
            "ds_reaper_zk_session_expirations_total 0",
            "ds_reaper_leader 0",
            "ds_reaper_brake_engaged 0",
            "ds_reaper_db_errors_total 0",
            "ds_reaper_zk_errors_total 0",
            "ds_reaper_build_info{ds_line=\"unknown\",version=",
            "ds_reaper_rows_skipped_total{table=\"t_ds_task_instance\"} 0",
            "ds_reaper_agents{state=\"fresh\"} 0",
            "ds_reaper_workflow_zombies{reason=\"workflow_stalled\"} 0",
            "ds_reaper_workflow_actions_total{action=\"recover\",result=\"ok\"} 0",
            "ds_reaper_zombies{reason=\"process_gone\"} 0",
            "ds_reaper_ghosts 0",
            "ds_reaper_ghost_actions_total{result=\"refused\"} 0",
            "ds_reaper_anomalies{kind=\"dispatch_stalled\"} 0",
            "ds_reaper_anomalies{kind=\"duplicate_attempt\"} 0",
            "ds_reaper_oldest_live_seconds{state=\"SUBMITTED_SUCCESS\"} 0",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }

    #[test]
    fn sync_counter_only_moves_forward() {
        let m = Metrics::new();
        Metrics::sync_counter(&m.zk_errors_total, 5);
        Metrics::sync_counter(&m.zk_errors_total, 3);
        assert_eq!(m.zk_errors_total.get(), 5);
    }
}
