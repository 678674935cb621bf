//! The human status page at `/` (SPEC §8): what an operator opens when an
//! alert fires. Server-rendered from the same typed views as the API, no
//! JavaScript, no external assets: a verdict line, summary cards, the last
//! hour of sweeps as small inline SVG charts, then zombies, workflows,
//! workers with their agents, masters, losses and the latest audit records.
//! Ages read "12 s ago" with the exact time on hover; it refreshes itself.

mod chart;

use crate::audit::Record;
use crate::engine::SweepPoint;
use crate::views::{NodeView, StatusView, WorkersView, WorkflowView, ZombieView};
use reaper_core::Instant;
use std::fmt::Write;

/// How often the page reloads itself.
pub const REFRESH_SECONDS: u32 = 10;

pub struct Page {
    pub status: StatusView,
    pub workers: WorkersView,
    /// The first zombies of the last sweep, and how many there were in all.
    pub zombies: Vec<ZombieView>,
    pub zombies_total: usize,
    /// All the last sweep's zombies by reason (see [`tally`]).
    pub zombie_reasons: Vec<(&'static str, usize)>,
    pub workflows: Vec<WorkflowView>,
    /// The latest audit records, oldest first.
    pub recent: Vec<Record>,
    /// One point per completed sweep of the last hour, oldest first.
    pub history: Vec<SweepPoint>,
    pub now: Instant,
}

/// Counts by name, largest first (then by name).
pub fn tally<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<(&'a str, usize)> {
    let mut m = std::collections::BTreeMap::new();
    for n in names {
        *m.entry(n).or_insert(0) += 1;
    }
    let mut v: Vec<_> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v
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

fn exact(t: Instant) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// "12 s", "10 min", "3 h", "2 d".
fn span(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs / 60),
        7200..=172_799 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// "12 s ago" (or "in 3 s"), with the exact instant as a tooltip.
fn ago(t: Option<Instant>, now: Instant) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let secs = (now - t).num_seconds();
    let n = span(secs.unsigned_abs());
    let text = if secs < 0 {
        format!("in {n}")
    } else {
        format!("{n} ago")
    };
    format!("<span title=\"{}\">{text}</span>", esc(&exact(t)))
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn tag(class: &str, text: &str) -> String {
    format!("<span class=\"tag {class}\">{}</span>", esc(text))
}

/// "worker_lost 2 · process_gone 1"
fn reasons_line(reasons: &[(&str, usize)]) -> String {
    reasons
        .iter()
        .map(|(r, n)| format!("{} {n}", esc(r)))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// A section: a heading with a count and a summary, then the table (in a
/// scrolling box when long) or "none".
fn section(
    h: &mut String,
    id: &str,
    title: &str,
    summary: &str,
    header: &[&str],
    rows: Vec<(Option<&str>, Vec<String>)>,
) {
    let _ = write!(
        h,
        "<section id=\"{id}\"><h2>{}{}</h2>",
        esc(title),
        if summary.is_empty() {
            String::new()
        } else {
            format!(" <small>{summary}</small>")
        }
    );
    if rows.is_empty() {
        h.push_str("<p class=\"muted\">none</p></section>");
        return;
    }
    h.push_str("<div class=\"scroll\"><table><thead><tr>");
    for c in header {
        let _ = write!(h, "<th>{}</th>", esc(c));
    }
    h.push_str("</tr></thead><tbody>");
    for (class, r) in rows {
        match class {
            Some(c) => {
                let _ = write!(h, "<tr class=\"{c}\">");
            }
            None => h.push_str("<tr>"),
        }
        for c in r {
            let _ = write!(h, "<td>{c}</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table></div></section>");
}

const STYLE: &str = "\
*{box-sizing:border-box}\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d2329;background:#f6f7f9}\
main{max-width:1320px;margin:0 auto;padding:12px 20px 24px}\
header{display:flex;justify-content:space-between;align-items:baseline;flex-wrap:wrap;gap:4px 16px}\
h1{font-size:22px;margin:0}h1 small,h2 small{font-weight:normal;color:#59636e;font-size:13px}\
h2{font-size:16px;margin:18px 0 6px}\
.verdict{margin:10px 0;padding:8px 12px;border-radius:6px;font-weight:600}\
.verdict.ok{background:#e3f4e6;color:#14532d}.verdict.bad{background:#fde7e7;color:#8a1010}\
.verdict.warn{background:#fff3d6;color:#6b4700}\
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px}\
.card{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:6px 10px;color:inherit;text-decoration:none}\
.card .k{color:#59636e;font-size:12px;text-transform:uppercase;letter-spacing:.04em}\
.card .v{font-size:22px;font-weight:600}.card .d{font-size:12px;color:#59636e}\
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:8px;margin-top:8px}\
.charts figure{margin:0;background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:4px}\
svg.chart{width:100%;height:auto;display:block;font-size:11px}\
svg .ct{font-weight:600;font-size:12px;fill:#1d2329}svg .last{fill:#1d2329}svg .lv{font-weight:600}\
svg .yl,svg .xl{fill:#59636e}svg .axis{stroke:#8c959f}svg .grid{stroke:#d8dde3;stroke-dasharray:3 3}\
svg .line{stroke-width:1.5}svg .nodata{fill:#f1f3f5}svg .empty{fill:#8c959f;font-style:italic}\
.scroll{max-height:360px;overflow:auto;border:1px solid #d8dde3;border-radius:6px;background:#fff}\
table{border-collapse:collapse;width:100%}\
th{position:sticky;top:0;background:#eef1f4;font-weight:600;font-size:12px;color:#3b444d}\
td,th{border-bottom:1px solid #e4e8ec;padding:4px 8px;text-align:left;vertical-align:top}\
td span[title]{white-space:nowrap;border-bottom:1px dotted #8c959f;cursor:help}\
tr.warn td{background:#fff8e6}tr.bad td{background:#fdf0f0}\
.tag{display:inline-block;padding:0 6px;border-radius:9px;font-size:12px;background:#eef1f4;white-space:nowrap}\
.tag.bad{background:#fbd5d5;color:#8a1010}.tag.ok{background:#d3f0da;color:#14532d}\
.tag.warn{background:#ffe8ad;color:#6b4700}\
.bad{color:#b00}.ok{color:#14732d}.muted{color:#6e7781}\
.two{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:0 16px}\
footer{margin-top:16px;font-size:13px}";

pub fn render(p: &Page) -> String {
    let now = p.now;
    let st = &p.status;
    let mut h = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ds-reaper</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\"><style>{STYLE}</style></head><body><main>"
    );
    header(&mut h, p);
    verdict(&mut h, p);
    cards(&mut h, p);
    charts(&mut h, p);
    if let Some(hold) = &st.ds_line_hold {
        let _ = write!(h, "<p class=\"bad\">{}</p>", esc(hold));
    }
    if let Some(db) = &st.database_error {
        let _ = write!(h, "<p class=\"bad\">database: {}</p>", esc(db));
    }
    zombies(&mut h, p);
    workflows(&mut h, p);
    workers(&mut h, p);
    h.push_str("<div class=\"two\">");
    section(
        &mut h,
        "masters",
        &format!("Masters ({})", p.workers.masters.len()),
        "",
        &["node", "address", "started", "last heartbeat", "status"],
        node_rows(&p.workers.masters, now),
    );
    section(
        &mut h,
        "lost",
        &format!("Recently lost ({})", p.workers.lost.len()),
        "",
        &["host", "kind", "lost"],
        p.workers
            .lost
            .iter()
            .map(|l| {
                (
                    None,
                    vec![esc(&l.host), esc(l.kind), ago(Some(l.lost_at), now)],
                )
            })
            .collect(),
    );
    h.push_str("</div>");
    audit(&mut h, p);
    h.push_str(
        "<footer class=\"muted\">JSON: <a href=\"/api/v1/status\">status</a> · \
         <a href=\"/api/v1/zombies\">zombies</a> · <a href=\"/api/v1/workflows\">workflows</a> · \
         <a href=\"/api/v1/workers\">workers</a> · <a href=\"/api/v1/audit\">audit</a> · \
         <a href=\"/metrics\">metrics</a></footer></main></body></html>",
    );
    h
}

fn header(h: &mut String, p: &Page) {
    let st = &p.status;
    let _ = write!(
        h,
        "<header><h1>ds-reaper <small>{} · DS {} · version {}</small></h1>\
         <span class=\"muted\">updated <span title=\"{}\">{}</span> · refreshes every {REFRESH_SECONDS} s</span></header>",
        if st.leader {
            if st.leader_election {
                "leader"
            } else {
                "leader (election off)"
            }
        } else {
            "standby (does not act)"
        },
        opt(st.ds_line),
        esc(st.version),
        esc(&exact(p.now)),
        p.now.format("%H:%M:%S UTC"),
    );
}

/// One line saying whether anything needs a person, and what.
fn verdict(h: &mut String, p: &Page) {
    let st = &p.status;
    let mut bad = Vec::new();
    let mut warn = Vec::new();
    if st.brake.engaged {
        bad.push(format!(
            "safety brake engaged ({}): no action is taken",
            opt(st.brake.why.as_deref())
        ));
    }
    if !st.registry_view.valid {
        bad.push(format!(
            "registry view invalid ({}): no action is taken",
            opt(st.registry_view.reason.as_deref())
        ));
    }
    if st.database_error.is_some() {
        bad.push("the database does not answer".into());
    }
    if p.zombies_total > 0 {
        bad.push(plural(p.zombies_total, "zombie task", "zombie tasks"));
    }
    if !p.workflows.is_empty() {
        bad.push(plural(
            p.workflows.len(),
            "workflow that cannot progress",
            "workflows that cannot progress",
        ));
    }
    let stale = p
        .workers
        .workers
        .iter()
        .filter(|w| matches!(&w.agent, Some(Some(a)) if !a.fresh))
        .count();
    if stale > 0 {
        warn.push(format!(
            "{} beside a live worker",
            plural(stale, "stale agent", "stale agents")
        ));
    }
    if st.last_sweep.is_none() {
        warn.push("no sweep yet".into());
    }
    let (class, text) = match (bad.is_empty(), warn.is_empty()) {
        (true, true) => (
            "ok",
            "All clear: no zombie tasks, no stuck workflows.".to_string(),
        ),
        (true, false) => ("warn", format!("Attention: {}.", warn.join("; "))),
        _ => (
            "bad",
            format!(
                "Attention: {}.",
                bad.into_iter().chain(warn).collect::<Vec<_>>().join("; ")
            ),
        ),
    };
    let _ = write!(h, "<div class=\"verdict {class}\">{}</div>", esc(&text));
}

fn card(h: &mut String, href: &str, key: &str, value: &str, detail: &str) {
    let _ = write!(
        h,
        "<a class=\"card\" href=\"{href}\"><div class=\"k\">{key}</div><div class=\"v\">{value}</div>\
         <div class=\"d\">{detail}</div></a>"
    );
}

fn cards(h: &mut String, p: &Page) {
    let st = &p.status;
    let now = p.now;
    h.push_str("<div class=\"cards\">");
    let num = |n: usize| {
        format!(
            "<span class=\"{}\">{n}</span>",
            if n == 0 { "ok" } else { "bad" }
        )
    };
    card(
        h,
        "#zombies",
        "Zombie tasks",
        &num(p.zombies_total),
        &if p.zombie_reasons.is_empty() {
            "none".into()
        } else {
            reasons_line(&p.zombie_reasons)
        },
    );
    let wf_reasons = tally(p.workflows.iter().map(|w| w.reason));
    card(
        h,
        "#workflows",
        "Stuck workflows",
        &num(p.workflows.len()),
        &if wf_reasons.is_empty() {
            "none".into()
        } else {
            reasons_line(&wf_reasons)
        },
    );
    let (mut fresh, mut stale, mut none) = (0, 0, 0);
    for w in &p.workers.workers {
        match &w.agent {
            Some(Some(a)) if a.fresh => fresh += 1,
            Some(Some(_)) => stale += 1,
            _ => none += 1,
        }
    }
    card(
        h,
        "#workers",
        "Live workers",
        &p.workers.workers.len().to_string(),
        &format!(
            "agents: {fresh} fresh · {} · {none} none",
            if stale > 0 {
                format!("<span class=\"bad\">{stale} stale</span>")
            } else {
                "0 stale".into()
            }
        ),
    );
    card(
        h,
        "#masters",
        "Live masters",
        &p.workers.masters.len().to_string(),
        &format!("{} recently lost", p.workers.lost.len()),
    );
    let rv = &st.registry_view;
    card(
        h,
        "#workers",
        "Registry view",
        &if rv.valid {
            "<span class=\"ok\">valid</span>".to_string()
        } else {
            "<span class=\"bad\">invalid</span>".to_string()
        },
        &if rv.valid {
            format!("{} · since {}", esc(rv.registry), ago(Some(rv.since), now))
        } else {
            format!(
                "{} · {} · since {}",
                esc(rv.registry),
                opt(rv.reason.as_deref()),
                ago(Some(rv.since), now)
            )
        },
    );
    card(
        h,
        "#audit",
        "Brake",
        &if st.brake.engaged {
            "<span class=\"bad\">ENGAGED</span>".to_string()
        } else {
            "<span class=\"ok\">released</span>".to_string()
        },
        &if st.brake.engaged {
            format!(
                "{} · {}",
                ago(st.brake.since, now),
                opt(st.brake.why.as_deref())
            )
        } else {
            "actions allowed".into()
        },
    );
    match &st.last_sweep {
        Some(s) => card(
            h,
            "#charts",
            "Last sweep",
            &ago(Some(s.at), now),
            &format!(
                "<span class=\"{}\">{}</span> · {} · {} · {}{}",
                if s.result.as_str() == "ok" {
                    "ok"
                } else {
                    "bad"
                },
                esc(s.result.as_str()),
                esc(s.kind),
                plural(s.candidates, "candidate", "candidates"),
                plural(s.actions, "action", "actions"),
                s.detail
                    .as_deref()
                    .map(|d| format!(" — {}", esc(d)))
                    .unwrap_or_default()
            ),
        ),
        None => card(h, "#charts", "Last sweep", "-", "no sweep yet"),
    }
    h.push_str("</div>");
}

fn charts(h: &mut String, p: &Page) {
    let pts = |f: fn(&SweepPoint) -> f64| -> Vec<(Instant, f64)> {
        p.history.iter().map(|s| (s.at, f(s))).collect()
    };
    let window = crate::engine::HISTORY_WINDOW;
    let charts = [
        chart::Chart {
            title: "Zombies found",
            series: vec![
                chart::Series {
                    label: "tasks",
                    color: "#c62828",
                    points: pts(|s| s.zombies as f64),
                },
                chart::Series {
                    label: "workflows",
                    color: "#ef6c00",
                    points: pts(|s| s.workflows as f64),
                },
            ],
            fmt: chart::count,
            now: p.now,
            window,
        },
        chart::Chart {
            title: "Actions taken",
            series: vec![chart::Series {
                label: "actions",
                color: "#6a1b9a",
                points: pts(|s| s.actions as f64),
            }],
            fmt: chart::count,
            now: p.now,
            window,
        },
        chart::Chart {
            title: "Sweep duration",
            series: vec![chart::Series {
                label: "duration",
                color: "#1565c0",
                points: pts(|s| s.duration_ms as f64),
            }],
            fmt: chart::millis,
            now: p.now,
            window,
        },
    ];
    h.push_str("<section id=\"charts\" class=\"charts\">");
    for c in &charts {
        let _ = write!(h, "<figure>{}</figure>", c.render());
    }
    h.push_str("</section>");
}

/// What the zombie's evidence says, in words.
fn zombie_evidence(z: &ZombieView, now: Instant) -> String {
    let e = &z.evidence;
    let mut v = Vec::new();
    if let Some(t) = e.lost_at {
        v.push(format!("host lost {}", ago(Some(t), now)));
    } else if let Some(s) = e.absent_for_seconds {
        v.push(format!("host absent {}", span(s.unsigned_abs())));
    }
    if let Some(t) = e.process_missing_since {
        v.push(format!("process missing since {}", ago(Some(t), now)));
    }
    if let Some(t) = e.process_seen_at {
        v.push(format!("process last seen {}", ago(Some(t), now)));
    }
    match z.reason {
        "worker_restarted" => v.push(format!("worker started {}", ago(e.startup_time, now))),
        "heartbeat_stale" => v.push(format!("heartbeat {}", ago(e.report_time, now))),
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

fn zombies(h: &mut String, p: &Page) {
    let now = p.now;
    let title = if p.zombies_total > p.zombies.len() {
        format!(
            "Zombie tasks ({}, first {} shown)",
            p.zombies_total,
            p.zombies.len()
        )
    } else {
        format!("Zombie tasks ({})", p.zombies_total)
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
                    format!("<br>workflow: {}", esc(z.workflow))
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
                                ""
                            } else if z.owner_master_alive {
                                " <span class=\"ok\">alive</span>"
                            } else {
                                " <span class=\"bad\">lost</span>"
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

fn workflows(h: &mut String, p: &Page) {
    let now = p.now;
    let reasons = tally(p.workflows.iter().map(|w| w.reason));
    section(
        h,
        "workflows",
        &format!("Stuck workflows ({})", p.workflows.len()),
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
                    ev.push(format!("master lost {}", ago(Some(t), now)));
                } else if let Some(s) = e.absent_for_seconds {
                    ev.push(format!("master absent {}", span(s.unsigned_abs())));
                }
                if let Some(t) = e.last_progress_at {
                    ev.push(format!("last progress {}", ago(Some(t), now)));
                }
                if e.tasks_by_state.is_empty() {
                    ev.push("no unfinished task".into());
                } else {
                    ev.push(format!(
                        "tasks: {}",
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
                                "<span class=\"ok\">alive</span>"
                            } else {
                                "<span class=\"bad\">lost</span>"
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

fn node_rows(nodes: &[NodeView], now: Instant) -> Vec<(Option<&'static str>, Vec<String>)> {
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
                    None => "<span class=\"muted\">no agent</span>".to_string(),
                    Some(a) => {
                        if !a.fresh {
                            class = Some("warn");
                        }
                        format!(
                            "{} {} · report {}{}",
                            if a.fresh {
                                tag("ok", "fresh")
                            } else {
                                tag("warn", "stale")
                            },
                            plural(a.tasks, "task process", "task processes"),
                            ago(Some(a.last_report_at), now),
                            if a.unreadable > 0 {
                                format!(" · <span class=\"bad\">{} unreadable</span>", a.unreadable)
                            } else {
                                String::new()
                            },
                        )
                    }
                });
            }
            (class, row)
        })
        .collect()
}

fn workers(h: &mut String, p: &Page) {
    let ws = &p.workers.workers;
    let (fresh, stale) = ws.iter().fold((0, 0), |(f, s), w| match &w.agent {
        Some(Some(a)) if a.fresh => (f + 1, s),
        Some(Some(_)) => (f, s + 1),
        _ => (f, s),
    });
    section(
        h,
        "workers",
        &format!("Workers ({})", ws.len()),
        &format!(
            "agents: {fresh} fresh, {stale} stale, {} none",
            ws.len() - fresh - stale
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

fn audit(h: &mut String, p: &Page) {
    let now = p.now;
    section(
        h,
        "audit",
        &format!("Latest audit records ({})", p.recent.len()),
        "newest first",
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

    #[test]
    fn reasons_are_counted_largest_first() {
        assert_eq!(
            tally(["worker_lost", "process_gone", "worker_lost", "no_host"]),
            vec![("worker_lost", 2), ("no_host", 1), ("process_gone", 1)]
        );
        assert!(tally(Vec::<&str>::new()).is_empty());
    }

    fn quiet_page(now: Instant) -> Page {
        use crate::views::{BrakeView, RegistryViewState};
        Page {
            status: StatusView {
                version: "0.0.0-test",
                ds_line: Some("3.2"),
                ds_line_hold: None,
                leader: true,
                leader_election: true,
                registry_view: RegistryViewState {
                    valid: true,
                    since: now - chrono::TimeDelta::seconds(90),
                    reason: None,
                    registry: "zookeeper",
                    workers: 1,
                    masters: 0,
                },
                brake: BrakeView {
                    engaged: false,
                    since: None,
                    why: None,
                },
                last_sweep: Some(crate::engine::SweepSummary {
                    at: now - chrono::TimeDelta::seconds(3),
                    result: crate::engine::SweepResult::Ok,
                    detail: None,
                    kind: "incremental",
                    candidates: 12,
                    zombies: 0,
                    actions: 0,
                    workflows: 0,
                }),
                database_error: None,
                started_at: now,
            },
            workers: WorkersView {
                workers: vec![NodeView {
                    host: "10.0.0.11:1234".into(),
                    address: "10.0.0.11:1234".into(),
                    startup_time: Some(now - chrono::TimeDelta::hours(3)),
                    report_time: Some(now - chrono::TimeDelta::seconds(4)),
                    status: Some("NORMAL".into()),
                    groups: vec![],
                    agent: Some(None),
                }],
                masters: vec![],
                lost: vec![],
            },
            zombies: vec![],
            zombies_total: 0,
            zombie_reasons: vec![],
            workflows: vec![],
            recent: vec![],
            history: vec![],
            now,
        }
    }

    #[test]
    fn a_quiet_cluster_reads_all_clear_and_the_charts_say_there_is_no_data() {
        let now = chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let mut p = quiet_page(now);
        let h = render(&p);
        assert!(
            h.contains("All clear: no zombie tasks, no stuck workflows."),
            "{h}"
        );
        assert!(
            h.contains("<meta http-equiv=\"refresh\" content=\"10\">"),
            "{h}"
        );
        assert!(!h.contains("<script") && !h.contains("src="), "{h}");
        assert_eq!(h.matches("<svg").count(), 3, "{h}");
        assert_eq!(h.matches("no sweep in the last 60 min").count(), 3, "{h}");
        assert!(
            h.contains("<h2>Zombie tasks (0)</h2><p class=\"muted\">none</p>"),
            "{h}"
        );
        assert!(
            h.contains("<h2>Stuck workflows (0)</h2><p class=\"muted\">none</p>"),
            "{h}"
        );
        assert!(h.contains("no agent"), "{h}");
        // Sweeps, then an agent gone stale beside its worker: a warning.
        p.history = (0..5)
            .map(|i| SweepPoint {
                at: now - chrono::TimeDelta::seconds(60 * (5 - i)),
                zombies: 0,
                workflows: 0,
                actions: 0,
                duration_ms: 40 + i as u64,
            })
            .collect();
        p.workers.workers[0].agent = Some(Some(crate::views::AgentView {
            fresh: false,
            last_report_at: now - chrono::TimeDelta::seconds(50),
            tasks: 0,
            unreadable: 2,
        }));
        let h = render(&p);
        assert!(
            h.contains(
                "<div class=\"verdict warn\">Attention: 1 stale agent beside a live worker.</div>"
            ),
            "{h}"
        );
        assert!(!h.contains("no sweep in the last"), "{h}");
        assert_eq!(h.matches("<polyline").count(), 4, "{h}");
        assert!(h.contains("<tr class=\"warn\">"), "{h}");
        assert!(h.contains("2 unreadable"), "{h}");
        assert!(h.contains("last <tspan class=\"lv\">44 ms</tspan>"), "{h}");
    }
}
