//! The status page's section for SPEC §16: stuck under a live owner.

use super::format::{ago, esc, opt, reasons_line, section};
use super::lang::tr;
use super::{tally, Page};

pub(super) fn anomalies(h: &mut String, p: &Page) {
    let now = p.now;
    let kinds = tally(p.anomalies.iter().map(|a| a.kind.as_str()));
    section(
        h,
        "anomalies",
        &format!("{} ({})", tr("Stuck under a live owner"), p.anomalies.len()),
        &reasons_line(&kinds),
        &[
            "kind",
            "workflow",
            "worker group",
            "rows",
            "since",
            "owner master",
            "evidence",
        ],
        p.anomalies
            .iter()
            .map(|a| {
                let e = &a.evidence;
                let mut ev = Vec::new();
                if let Some(t) = e.oldest_task_id {
                    ev.push(format!("{} {t}", tr("oldest task")));
                }
                if !e.busy_masters.is_empty() {
                    ev.push(format!(
                        "{}: {}",
                        tr("busy masters"),
                        esc(&e.busy_masters.join(", "))
                    ));
                }
                if let Some(s) = &e.workflow_state {
                    ev.push(esc(s));
                }
                if !e.hosts.is_empty() {
                    ev.push(format!("{}: {}", tr("hosts"), esc(&e.hosts.join(", "))));
                }
                if !a.task_ids.is_empty() {
                    let ids: Vec<String> =
                        a.task_ids.iter().take(5).map(|i| i.to_string()).collect();
                    ev.push(format!("{}: {}", tr("tasks"), ids.join(", ")));
                }
                (
                    Some("warn"),
                    vec![
                        esc(a.kind.as_str()),
                        a.workflow_instance_id
                            .map(|i| i.to_string())
                            .unwrap_or_default(),
                        opt(a.worker_group.as_deref()),
                        a.count.to_string(),
                        ago(a.since, now),
                        opt(a.owner_master.as_deref()),
                        ev.join("; "),
                    ],
                )
            })
            .collect(),
    );
}
