//! Prometheus metrics (SPEC §9): one struct of handles registered on a registry
//! passed in, no globals.

use prometheus::{
    Encoder, Gauge, Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
    TextEncoder,
};
use reaper_core::Reason;

/// The `state` labels of `ds_reaper_remote_apps`: the RM's states in lower
/// case, and `unknown` for an application the RM could not tell about.
pub const REMOTE_APP_STATES: [&str; 9] = [
    "new",
    "new_saving",
    "submitted",
    "accepted",
    "running",
    "finished",
    "failed",
    "killed",
    "unknown",
];

/// `ds_reaper_effects_skipped_total{reason}`: why the executor's gate closed (SPEC §4.1).
pub const SKIP_REASONS: [&str; 3] = ["stale_judgement", "view_changed", "not_leader"];

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
    /// SPEC §14 jdbc: 1 while a registry-database outage holds the brake,
    /// its one label naming the servers to check (`servers=""` and 0
    /// otherwise, so the family is always exposed for the alert).
    pub registry_outage: IntGaugeVec,
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
    /// SPEC §4.1: effects the executor's gate did not carry out.
    pub effects_skipped_total: IntCounterVec,
}

mod families;
use families::*;

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new_custom(Some("ds_reaper".into()), None).unwrap_or_default();
        let (zombies, zombies_detected_total, actions_total, candidates) = task_metrics(&r);
        let (live_workers, live_masters, workers_lost_total) = server_metrics(&r);
        let (sweeps_total, sweep_duration_seconds, last_sweep_timestamp_seconds) =
            sweep_metrics(&r);
        let health = health_metrics(&r);
        let (build_info, rows_skipped_total, agents) = input_metrics(&r);
        let (workflow_zombies, workflow_actions_total) = workflow_metrics(&r);
        let (ghosts, remote_apps, remote_app_kills_total, ghost_actions_total) = ghost_metrics(&r);
        let (anomalies, oldest_live_seconds) = anomaly_metrics(&r);
        let effects_skipped_total = reg(
            &r,
            counter_vec(
                "effects_skipped_total",
                "Effects not carried out because the gate closed before them",
                &["reason"],
            ),
        );
        let m = Metrics {
            zombies,
            zombies_detected_total,
            actions_total,
            candidates,
            live_workers,
            live_masters,
            workers_lost_total,
            sweeps_total,
            sweep_duration_seconds,
            last_sweep_timestamp_seconds,
            registry_view_valid: health.registry_view_valid,
            zk_session_expirations_total: health.zk_session_expirations_total,
            leader: health.leader,
            brake_engaged: health.brake_engaged,
            registry_outage: health.registry_outage,
            db_errors_total: health.db_errors_total,
            zk_errors_total: health.zk_errors_total,
            build_info,
            rows_skipped_total,
            agents,
            workflow_zombies,
            workflow_actions_total,
            ghosts,
            remote_apps,
            remote_app_kills_total,
            ghost_actions_total,
            anomalies,
            oldest_live_seconds,
            effects_skipped_total,
            registry: r,
        };
        for reason in SKIP_REASONS {
            m.effects_skipped_total
                .with_label_values(&[reason])
                .inc_by(0);
        }
        m.zero_anomalies();
        // Pre-create the label sets so dashboards and alerts see zeros, not gaps.
        m.zero_tasks();
        m.zero_workflows_and_ghosts();
        m.set_build_info("unknown");
        m.set_registry_outage(&[]);
        m
    }

    /// SPEC §14 jdbc: the servers a registry outage holds the brake for,
    /// e.g. `worker 10.0.0.5:1234`; none: the one series at 0.
    pub fn set_registry_outage(&self, servers: &[String]) {
        self.registry_outage.reset();
        self.registry_outage
            .with_label_values(&[&servers.join(", ")])
            .set(i64::from(!servers.is_empty()));
    }

    fn zero_anomalies(&self) {
        for kind in reaper_core::anomaly::AnomalyKind::ALL {
            self.anomalies.with_label_values(&[kind.as_str()]).set(0);
        }
        // until the first sweep says which states the line has
        for state in reaper_core::anomaly::QUEUED_STATES
            .iter()
            .chain(&["RUNNING_EXECUTION"])
        {
            self.oldest_live_seconds.with_label_values(&[state]).set(0);
        }
    }

    fn zero_tasks(&self) {
        for reason in Reason::ALL {
            self.zombies.with_label_values(&[reason.as_str()]).set(0);
            self.zombies_detected_total
                .with_label_values(&[reason.as_str()]);
        }
        for result in ["ok", "error", "skipped"] {
            self.sweeps_total.with_label_values(&[result]);
        }
        for action in ["fail", "fault-tolerance", "kill"] {
            for result in ["ok", "lost_race", "error"] {
                self.actions_total.with_label_values(&[action, result]);
            }
        }
        self.rows_skipped_total
            .with_label_values(&["t_ds_task_instance"]);
    }

    fn zero_workflows_and_ghosts(&self) {
        for reason in reaper_core::workflow::WorkflowReason::ALL {
            self.workflow_zombies
                .with_label_values(&[reason.as_str()])
                .set(0);
        }
        for result in ["ok", "lost_race", "error"] {
            self.workflow_actions_total
                .with_label_values(&["recover", result]);
        }
        for state in ["fresh", "stale"] {
            self.agents.with_label_values(&[state]).set(0);
        }
        for result in ["killed", "gone", "refused", "partial", "error"] {
            self.ghost_actions_total.with_label_values(&[result]);
        }
        for state in REMOTE_APP_STATES {
            self.remote_apps.with_label_values(&[state]).set(0);
        }
        for result in ["killed", "error"] {
            self.remote_app_kills_total.with_label_values(&[result]);
        }
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
