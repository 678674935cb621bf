//! `check`'s table of SPEC §16 findings (stuck under a live owner), after
//! the workflow findings.

use reaper_core::anomaly::Anomaly;
use reaper_core::Instant;

pub(super) fn print_anomalies(anomalies: &[Anomaly], now: Instant) {
    if anomalies.is_empty() {
        return;
    }
    println!(
        "\n{} stuck under a live owner (report only; nothing is ever written for these)",
        anomalies.len()
    );
    for a in anomalies {
        let age = a
            .since
            .map(|s| {
                humantime::format_duration(std::time::Duration::from_secs(
                    (now - s).num_seconds().max(0) as u64,
                ))
                .to_string()
            })
            .unwrap_or_else(|| "?".into());
        let mut what = Vec::new();
        if let Some(w) = a.workflow_instance_id {
            what.push(format!("workflow {w}"));
        }
        if let Some(g) = &a.worker_group {
            what.push(format!("group {g}"));
        }
        if !a.task_ids.is_empty() {
            let ids: Vec<String> = a.task_ids.iter().take(10).map(|i| i.to_string()).collect();
            what.push(format!("tasks {}", ids.join(",")));
        }
        let mut ev = Vec::new();
        if !a.evidence.busy_masters.is_empty() {
            ev.push(format!(
                "BUSY masters {}",
                a.evidence.busy_masters.join(",")
            ));
        }
        if !a.evidence.hosts.is_empty() {
            ev.push(format!("on {}", a.evidence.hosts.join(",")));
        }
        if let Some(s) = &a.evidence.workflow_state {
            ev.push(s.clone());
        }
        println!(
            "  {} ({} rows) {} for {age}, owner {}{}",
            a.kind,
            a.count,
            what.join(" "),
            a.owner_master.as_deref().unwrap_or("-"),
            if ev.is_empty() {
                String::new()
            } else {
                format!(" — {}", ev.join("; "))
            }
        );
    }
}
