//! The page's tables: zombies, stuck workflows, workers with their agents
//! (and the masters' rows), and the latest audit records.

use super::format::{ago, esc, opt, plural, reasons_line, section, span, tag};
use super::lang::tr;
use super::{tally, Page};
use crate::views::{NodeView, ZombieView};
use reaper_core::Instant;

/// What the zombie's evidence says, in words.
fn zombie_evidence(z: &ZombieView, now: Instant) -> String {
    let e = &z.evidence;
    let mut v = Vec::new();
    if let Some(t) = e.lost_at {
        v.push(format!("{} {}", tr("host lost"), ago(Some(t), now)));
    } else if let Some(s) = e.absent_for_seconds {
        v.push(format!("{} {}", tr("host absent"), span(s.unsigned_abs())));
    }
    if let Some(t) = e.process_missing_since {
        v.push(format!(
            "{} {}",
            tr("process missing since"),
            ago(Some(t), now)
        ));
    }
    if let Some(t) = e.process_seen_at {
        v.push(format!("{} {}", tr("process last seen"), ago(Some(t), now)));
    }
    match z.reason {
        "worker_restarted" => v.push(format!(
            "{} {}",
            tr("worker started"),
            ago(e.startup_time, now)
        )),
        "heartbeat_stale" => v.push(format!("{} {}", tr("heartbeat"), ago(e.report_time, now))),
        _ => {}
    }
    if v.is_empty() {
        "-".into()
    } else {
        v.join("<br>")
    }
}

/// The action, and why it was not taken when something held it back
/// (`blocked:settling`, `blocked:brake`, ...).
fn action(action: &str, disposition: &str) -> String {
    match disposition {
        "act" | "report" => esc(action),
        d => format!("{} {}", esc(action), tag("warn", d)),
    }
}

pub(super) fn zombies(h: &mut String, p: &Page) {
    let now = p.now;
    let title = if p.zombies_total > p.zombies.len() {
        format!(
            "{} ({}, {} {} {})",
            tr("Zombie tasks"),
            p.zombies_total,
            tr("first"),
            p.zombies.len(),
            tr("shown")
        )
    } else {
        format!("{} ({})", tr("Zombie tasks"), p.zombies_total)
    };
    section(
        h,
        "zombies",
        &title,
        &reasons_line(&p.zombie_reasons),
        &[
            "task",
            "name",
            "type",
            "workflow",
            "host",
            "reason",
            "evidence",
            "submitted",
            "owner master",
            "action",
            "note",
        ],
        p.zombies
            .iter()
            .map(|z| {
                let follow = if z.workflow == "none" {
                    String::new()
                } else {
                    format!("<br>{}: {}", tr("workflow"), esc(z.workflow))
                };
                (
                    None,
                    vec![
                        z.task_id.to_string(),
                        esc(&z.task_name),
                        esc(&z.task_type),
                        z.workflow_instance_id
                            .map_or_else(|| "-".into(), |w| w.to_string()),
                        opt(z.host.as_deref()),
                        tag("bad", z.reason),
                        zombie_evidence(z, now),
                        ago(z.submit_time, now),
                        format!(
                            "{}{}",
                            opt(z.owner_master.as_deref()),
                            if z.owner_master.is_none() {
                                String::new()
                            } else if z.owner_master_alive {
                                format!(" <span class=\"ok\">{}</span>", tr("alive"))
                            } else {
                                format!(" <span class=\"bad\">{}</span>", tr("lost"))
                            }
                        ),
                        format!("{}{follow}", action(z.action, &z.disposition)),
                        opt(z.note.as_deref()),
                    ],
                )
            })
            .collect(),
    );
}

pub(super) fn workflows(h: &mut String, p: &Page) {
    let now = p.now;
    let reasons = tally(p.workflows.iter().map(|w| w.reason));
    section(
        h,
        "workflows",
        &format!("{} ({})", tr("Stuck workflows"), p.workflows.len()),
        &reasons_line(&reasons),
        &[
            "workflow", "name", "state", "master", "reason", "evidence", "action", "note",
        ],
        p.workflows
            .iter()
            .map(|w| {
                let e = &w.evidence;
                let mut ev = Vec::new();
                if let Some(t) = e.lost_at {
                    ev.push(format!("{} {}", tr("master lost"), ago(Some(t), now)));
                } else if let Some(s) = e.absent_for_seconds {
                    ev.push(format!(
                        "{} {}",
                        tr("master absent"),
                        span(s.unsigned_abs())
                    ));
                }
                if let Some(t) = e.last_progress_at {
                    ev.push(format!("{} {}", tr("last progress"), ago(Some(t), now)));
                }
                if e.tasks_by_state.is_empty() {
                    ev.push(tr("no unfinished task").into());
                } else {
                    ev.push(format!(
                        "{}: {}",
                        tr("tasks"),
                        e.tasks_by_state
                            .iter()
                            .map(|(s, n)| format!("{} {n}", esc(s)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                (
                    None,
                    vec![
                        w.workflow_instance_id.to_string(),
                        esc(&w.name),
                        esc(&w.state),
                        format!(
                            "{} {}",
                            opt(w.host.as_deref()),
                            if w.owner_master_alive {
                                format!("<span class=\"ok\">{}</span>", tr("alive"))
                            } else {
                                format!("<span class=\"bad\">{}</span>", tr("lost"))
                            }
                        ),
                        tag("bad", w.reason),
                        ev.join("<br>"),
                        action(w.action, &w.disposition),
                        opt(w.note.as_deref()),
                    ],
                )
            })
            .collect(),
    );
}

pub(super) fn node_rows(
    nodes: &[NodeView],
    now: Instant,
) -> Vec<(Option<&'static str>, Vec<String>)> {
    nodes
        .iter()
        .map(|n| {
            let mut class = None;
            let mut row = vec![
                esc(&n.host),
                esc(&n.address),
                ago(n.startup_time, now),
                ago(n.report_time, now),
                opt(n.status.as_deref()),
            ];
            if let Some(agent) = &n.agent {
                row.push(match agent {
                    None => format!("<span class=\"muted\">{}</span>", tr("no agent")),
                    Some(a) => {
                        if !a.fresh {
                            class = Some("warn");
                        }
                        format!(
                            "{} {} · {} {}{}",
                            if a.fresh {
                                tag("ok", "fresh")
                            } else {
                                tag("warn", "stale")
                            },
                            plural(a.tasks, "task process", "task processes"),
                            tr("report"),
                            ago(Some(a.last_report_at), now),
                            if a.unreadable > 0 {
                                format!(
                                    " · <span class=\"bad\">{} {}</span>",
                                    a.unreadable,
                                    tr("unreadable")
                                )
                            } else {
                                String::new()
                            },
                        ) + &a
                            .blind
                            .as_deref()
                            .map(|b| {
                                format!(" · <span class=\"bad\">{}: {}</span>", tr("blind"), esc(b))
                            })
                            .unwrap_or_default()
                    }
                });
            }
            (class, row)
        })
        .collect()
}

pub(super) fn workers(h: &mut String, p: &Page) {
    let ws = &p.workers.workers;
    let (fresh, stale) = ws.iter().fold((0, 0), |(f, s), w| match &w.agent {
        Some(Some(a)) if a.fresh => (f + 1, s),
        Some(Some(_)) => (f, s + 1),
        _ => (f, s),
    });
    section(
        h,
        "workers",
        &format!("{} ({})", tr("Workers"), ws.len()),
        &format!(
            "{}: {fresh} {}, {stale} {}, {} {}",
            tr("agents"),
            tr("fresh"),
            tr("stale"),
            ws.len() - fresh - stale,
            tr("none")
        ),
        &[
            "node",
            "address",
            "started",
            "last heartbeat",
            "status",
            "agent",
        ],
        node_rows(ws, p.now),
    );
}

pub(super) fn audit(h: &mut String, p: &Page) {
    let now = p.now;
    section(
        h,
        "audit",
        &format!("{} ({})", tr("Latest audit records"), p.recent.len()),
        tr("newest first"),
        &[
            "when", "event", "subject", "reason", "action", "state", "actor", "detail",
        ],
        p.recent
            .iter()
            .rev()
            .map(|r| {
                let subject = match (r.task_id, r.workflow_instance_id) {
                    (Some(t), _) => format!(
                        "task {t}{}",
                        r.task_name
                            .as_deref()
                            .map(|n| format!(" {}", esc(n)))
                            .unwrap_or_default()
                    ),
                    (None, Some(w)) => format!("workflow {w}"),
                    (None, None) => "-".into(),
                };
                let state = match (&r.from_state, &r.to_state) {
                    (Some(f), Some(t)) => format!("{} → {}", esc(f), esc(t)),
                    (Some(f), None) => esc(f),
                    _ => "-".into(),
                };
                let event = r.event.as_str();
                let class = match event {
                    "error" | "brake" => Some("bad"),
                    "lost_race" => Some("warn"),
                    _ => None,
                };
                (
                    class,
                    vec![
                        ago(Some(r.ts), now),
                        esc(event),
                        subject,
                        opt(r.reason.as_deref()),
                        opt(r.action.as_deref()),
                        state,
                        esc(&r.actor),
                        opt(r.detail.as_deref()),
                    ],
                )
            })
            .collect(),
    );
}
