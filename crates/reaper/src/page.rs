//! The human status page at `/` (SPEC §8): what an operator opens when an
//! alert fires. Server-rendered from the same typed views as the API, no
//! JavaScript, no external assets; ages read "12 s ago" with the exact time
//! on hover.

use crate::audit::Record;
use crate::views::{StatusView, WorkersView, ZombieView};
use reaper_core::Instant;
use std::fmt::Write;

pub struct Page {
    pub status: StatusView,
    pub workers: WorkersView,
    /// The first zombies of the last sweep, and how many there were in all.
    pub zombies: Vec<ZombieView>,
    pub zombies_total: usize,
    pub workflows: Vec<crate::views::WorkflowView>,
    /// The latest audit records, oldest first.
    pub recent: Vec<Record>,
    pub now: Instant,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn opt(s: Option<&str>) -> String {
    s.map_or_else(|| "-".to_string(), esc)
}

/// "12 s ago" (or "in 3 s"), with the exact instant as a tooltip.
fn ago(t: Option<Instant>, now: Instant) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let secs = (now - t).num_seconds();
    let (n, future) = (secs.unsigned_abs(), secs < 0);
    let span = match n {
        0..=119 => format!("{n} s"),
        120..=7199 => format!("{} min", n / 60),
        7200..=172_799 => format!("{} h", n / 3600),
        _ => format!("{} d", n / 86_400),
    };
    let text = if future {
        format!("in {span}")
    } else {
        format!("{span} ago")
    };
    format!(
        "<span title=\"{}\">{text}</span>",
        esc(&t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
    )
}

fn table(h: &mut String, title: &str, header: &[&str], rows: Vec<Vec<String>>) {
    let _ = write!(h, "<h2>{}</h2>", esc(title));
    if rows.is_empty() {
        h.push_str("<p class=\"muted\">none</p>");
        return;
    }
    h.push_str("<table><tr>");
    for c in header {
        let _ = write!(h, "<th>{}</th>", esc(c));
    }
    h.push_str("</tr>");
    for r in rows {
        h.push_str("<tr>");
        for c in r {
            let _ = write!(h, "<td>{c}</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
}

pub fn render(p: &Page) -> String {
    let now = p.now;
    let st = &p.status;
    let mut h = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ds-reaper</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"10\"><style>\
         body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}\
         table{border-collapse:collapse;width:100%;margin-bottom:1em}\
         td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;font-size:14px}\
         th{background:#f4f4f4}.bad{color:#b00;font-weight:bold}.ok{color:#070}.muted{color:#888}\
         .cards{display:flex;gap:1em;flex-wrap:wrap}.card{border:1px solid #ddd;border-radius:6px;padding:.6em 1em}\
         </style></head><body><h1>ds-reaper</h1>",
    );
    let rv = &st.registry_view;
    let view = if rv.valid {
        "<span class=\"ok\">valid</span>".to_string()
    } else {
        format!(
            "<span class=\"bad\">invalid</span> ({})",
            opt(rv.reason.as_deref())
        )
    };
    let brake = if st.brake.engaged {
        format!(
            "<span class=\"bad\">ENGAGED</span> {} ({})",
            ago(st.brake.since, now),
            opt(st.brake.why.as_deref())
        )
    } else {
        "<span class=\"ok\">released</span>".to_string()
    };
    let zombies = if p.zombies_total == 0 {
        "<span class=\"ok\">0</span>".to_string()
    } else {
        format!("<span class=\"bad\">{}</span>", p.zombies_total)
    };
    let _ = write!(
        h,
        "<div class=\"cards\"><div class=\"card\">zombies<br>{zombies}</div>\
         <div class=\"card\">registry ({})<br>{view} · {} workers · {} masters</div>\
         <div class=\"card\">brake<br>{brake}</div>\
         <div class=\"card\">DS line {} · {}<br>version {}</div></div>",
        esc(rv.registry),
        rv.workers,
        rv.masters,
        opt(st.ds_line),
        if st.leader { "leader" } else { "standby" },
        esc(st.version),
    );
    if let Some(hold) = &st.ds_line_hold {
        let _ = write!(h, "<p class=\"bad\">{}</p>", esc(hold));
    }
    if let Some(db) = &st.database_error {
        let _ = write!(h, "<p class=\"bad\">database: {}</p>", esc(db));
    }
    match &st.last_sweep {
        Some(s) => {
            let _ = write!(
                h,
                "<p>last sweep {} ({}, {}): {} candidates, {} zombies, {} actions{}</p>",
                ago(Some(s.at), now),
                esc(s.kind),
                esc(s.result.as_str()),
                s.candidates,
                s.zombies,
                s.actions,
                s.detail
                    .as_deref()
                    .map(|d| format!(" — {}", esc(d)))
                    .unwrap_or_default()
            );
        }
        None => h.push_str("<p class=\"muted\">no sweep yet</p>"),
    }

    let title = if p.zombies_total > p.zombies.len() {
        format!(
            "Zombies ({}, first {} shown)",
            p.zombies_total,
            p.zombies.len()
        )
    } else {
        format!("Zombies ({})", p.zombies_total)
    };
    table(
        &mut h,
        &title,
        &[
            "task",
            "name",
            "type",
            "host",
            "reason",
            "age",
            "owner master",
            "action",
            "workflow",
            "note",
        ],
        p.zombies
            .iter()
            .map(|z| {
                vec![
                    z.task_id.to_string(),
                    esc(&z.task_name),
                    esc(&z.task_type),
                    opt(z.host.as_deref()),
                    esc(z.reason),
                    ago(z.submit_time, now),
                    format!(
                        "{}{}",
                        opt(z.owner_master.as_deref()),
                        if z.owner_master_alive { " (alive)" } else { "" }
                    ),
                    esc(z.action),
                    esc(z.workflow),
                    opt(z.note.as_deref()),
                ]
            })
            .collect(),
    );
    table(
        &mut h,
        &format!("Workflows ({})", p.workflows.len()),
        &[
            "workflow",
            "name",
            "state",
            "master",
            "reason",
            "last progress",
            "action",
            "note",
        ],
        p.workflows
            .iter()
            .map(|w| {
                vec![
                    w.workflow_instance_id.to_string(),
                    esc(&w.name),
                    esc(&w.state),
                    format!(
                        "{}{}",
                        opt(w.host.as_deref()),
                        if w.owner_master_alive {
                            " (alive)"
                        } else {
                            " (lost)"
                        }
                    ),
                    esc(w.reason),
                    ago(w.evidence.last_progress_at, now),
                    esc(w.action),
                    opt(w.note.as_deref()),
                ]
            })
            .collect(),
    );
    let node_rows = |nodes: &[crate::views::NodeView]| {
        nodes
            .iter()
            .map(|n| {
                let mut row = vec![
                    esc(&n.host),
                    esc(&n.address),
                    ago(n.startup_time, now),
                    ago(n.report_time, now),
                    opt(n.status.as_deref()),
                ];
                if let Some(agent) = &n.agent {
                    row.push(match agent {
                        None => "<span class=\"muted\">none</span>".to_string(),
                        Some(a) => format!(
                            "<span class=\"{}\">{}</span> · {} tasks{} · report {}",
                            if a.fresh { "ok" } else { "bad" },
                            if a.fresh { "fresh" } else { "stale" },
                            a.tasks,
                            if a.unreadable > 0 {
                                format!(" · {} unreadable", a.unreadable)
                            } else {
                                String::new()
                            },
                            ago(Some(a.last_report_at), now)
                        ),
                    });
                }
                row
            })
            .collect::<Vec<_>>()
    };
    let header = ["node", "address", "started", "last heartbeat", "status"];
    let mut worker_header = header.to_vec();
    worker_header.push("agent");
    table(
        &mut h,
        "Workers",
        &worker_header,
        node_rows(&p.workers.workers),
    );
    table(&mut h, "Masters", &header, node_rows(&p.workers.masters));
    table(
        &mut h,
        "Recently lost",
        &["host", "kind", "lost"],
        p.workers
            .lost
            .iter()
            .map(|l| vec![esc(&l.host), esc(l.kind), ago(Some(l.lost_at), now)])
            .collect(),
    );
    table(
        &mut h,
        "Last actions",
        &[
            "when", "event", "task", "reason", "action", "actor", "detail",
        ],
        p.recent
            .iter()
            .rev()
            .map(|r| {
                vec![
                    ago(Some(r.ts), now),
                    esc(r.event.as_str()),
                    r.task_id.map(|i| i.to_string()).unwrap_or_default(),
                    opt(r.reason.as_deref()),
                    opt(r.action.as_deref()),
                    esc(&r.actor),
                    opt(r.detail.as_deref()),
                ]
            })
            .collect(),
    );
    h.push_str(
        "<p class=\"muted\"><a href=\"/metrics\">metrics</a> · <a href=\"/api/v1/status\">status</a> · \
         <a href=\"/api/v1/zombies\">zombies</a> · <a href=\"/api/v1/workers\">workers</a> · \
         <a href=\"/api/v1/audit\">audit</a></p></body></html>",
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn ages_read_like_a_person_would_say_them() {
        let now = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let t = |s: i64| Some(now - chrono::TimeDelta::seconds(s));
        assert!(ago(t(12), now).contains(">12 s ago<"));
        assert!(ago(t(600), now).contains(">10 min ago<"));
        assert!(ago(t(3 * 3600), now).contains(">3 h ago<"));
        assert!(ago(t(-5), now).contains(">in 5 s<"));
        assert!(ago(t(12), now).contains("title=\"2023-11-14T22:13:08Z\""));
        assert_eq!(ago(None, now), "-");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&"), "&lt;a href=&quot;x&quot;&gt;&amp;");
    }
}
