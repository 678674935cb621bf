//! The agent's metrics (SPEC §9), prefixed `ds_reaper_agent_`: one struct of
//! handles on a registry of its own, no globals.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub scans_total: IntCounter,
    pub scan_duration_seconds: Histogram,
    pub task_processes: IntGauge,
    /// Listed tasks all of whose processes have a controlling terminal.
    pub tty_tasks: IntGauge,
    pub unreadable_processes: IntGauge,
    pub publish_errors_total: IntCounter,
    pub registry_connected: IntGauge,
    pub build_info: IntGaugeVec,
    /// Kill orders answered, by `result` (SPEC §15).
    pub kills_total: IntCounterVec,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
    // fails only for a duplicate name, which the tests would catch
    if let Err(e) = r.register(Box::new(m.clone())) {
        tracing::error!(error = %e, "metric registration failed");
    }
    m
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new_custom(Some("ds_reaper_agent".into()), None).unwrap_or_default();
        let gauge = |n: &str, h: &str| IntGauge::new(n, h).expect("static metric definition");
        let counter = |n: &str, h: &str| IntCounter::new(n, h).expect("static metric definition");
        let m = Metrics {
            scans_total: reg(&r, counter("scans_total", "Scans of the host's processes")),
            scan_duration_seconds: reg(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new("scan_duration_seconds", "Duration of one scan").buckets(
                        vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0],
                    ),
                )
                .expect("static metric definition"),
            ),
            task_processes: reg(
                &r,
                gauge(
                    "task_processes",
                    "Processes of DS task instances seen by the last scan",
                ),
            ),
            tty_tasks: reg(
                &r,
                gauge(
                    "tty_tasks",
                    "Tasks of the last scan all of whose processes have a controlling terminal (sudo's use_pty hides them from ghost detection)",
                ),
            ),
            unreadable_processes: reg(
                &r,
                gauge(
                    "unreadable_processes",
                    "Processes the last scan was denied (such a scan proves no absence)",
                ),
            ),
            publish_errors_total: reg(
                &r,
                counter(
                    "publish_errors_total",
                    "Reports that could not be published to the registry",
                ),
            ),
            registry_connected: reg(
                &r,
                gauge(
                    "registry_connected",
                    "1 while the agent's registry session is connected",
                ),
            ),
            build_info: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new("build_info", "Always 1; the agent's version"),
                    &["version"],
                )
                .expect("static metric definition"),
            ),
            kills_total: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "kills_total",
                        "Kill orders answered: killed, gone, refused or partial",
                    ),
                    &["result"],
                )
                .expect("static metric definition"),
            ),
            registry: r,
        };
        for result in ["killed", "gone", "refused", "partial"] {
            m.kills_total.with_label_values(&[result]);
        }
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        m
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_family_is_exposed() {
        let m = Metrics::new();
        m.scans_total.inc();
        m.scan_duration_seconds.observe(0.004);
        let text = m.render();
        for name in [
            "ds_reaper_agent_scans_total",
            "ds_reaper_agent_scan_duration_seconds",
            "ds_reaper_agent_task_processes",
            "ds_reaper_agent_tty_tasks",
            "ds_reaper_agent_unreadable_processes",
            "ds_reaper_agent_publish_errors_total",
            "ds_reaper_agent_registry_connected",
            "ds_reaper_agent_build_info",
            "ds_reaper_agent_kills_total",
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing:\n{text}"
            );
        }
        assert!(text.contains("ds_reaper_agent_build_info{version=\""));
        assert!(text.contains("ds_reaper_agent_kills_total{result=\"refused\"} 0"));
    }

    /// `promtool check metrics` (SPEC §9); promtool comes with the services
    /// (deploy/dev/services.sh), so under CI=true its absence is a failure.
    #[test]
    fn promtool_accepts_the_exposition() {
        let m = Metrics::new();
        m.scans_total.inc();
        m.scan_duration_seconds.observe(0.004);
        m.registry_connected.set(1);
        let text = m.render();
        let child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "promtool not runnable ({e}) and CI=true"
                );
                eprintln!("SKIPPED: promtool not runnable: {e}");
                return;
            }
        };
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool: {said}\n{text}"
        );
    }
}
