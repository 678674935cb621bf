//! The top of the page: the header, the verdict line, the summary cards and
//! the last hour's charts — what an operator reads first.

use super::format::{ago, esc, exact, opt, plural, reasons_line};
use super::lang::tr;
use super::{chart, tally, Page, REFRESH_SECONDS};
use crate::engine::SweepPoint;
use reaper_core::Instant;
use std::fmt::Write;

pub(super) fn header(h: &mut String, p: &Page) {
    let st = &p.status;
    let _ = write!(
        h,
        "<header><h1>ds-reaper <small>{} · DS {} · {} {}</small></h1>\
         <span class=\"muted\">{} <span title=\"{}\">{}</span> · {} {REFRESH_SECONDS} {}</span></header>",
        tr(if st.leader {
            if st.leader_election {
                "leader"
            } else {
                "leader (election off)"
            }
        } else {
            "standby (does not act)"
        }),
        opt(st.ds_line),
        tr("version"),
        esc(st.version),
        tr("updated"),
        esc(&exact(p.now)),
        p.now.format("%H:%M:%S UTC"),
        tr("refreshes every"),
        tr("s"),
    );
}

/// One line saying whether anything needs a person, and what.
pub(super) fn verdict(h: &mut String, p: &Page) {
    let st = &p.status;
    let mut bad = Vec::new();
    let mut warn = Vec::new();
    if st.brake.engaged {
        bad.push(format!(
            "{} ({}): {}",
            tr("safety brake engaged"),
            opt(st.brake.why.as_deref()),
            tr("no action is taken")
        ));
    }
    if !st.registry_view.valid {
        bad.push(format!(
            "{} ({}): {}",
            tr("registry view invalid"),
            opt(st.registry_view.reason.as_deref()),
            tr("no action is taken")
        ));
    }
    if st.database_error.is_some() {
        bad.push(tr("the database does not answer").into());
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
            "{} {}",
            plural(stale, "stale agent", "stale agents"),
            tr("beside a live worker")
        ));
    }
    if st.last_sweep.is_none() {
        warn.push(tr("no sweep yet").into());
    }
    let (class, text) = match (bad.is_empty(), warn.is_empty()) {
        (true, true) => (
            "ok",
            tr("All clear: no zombie tasks, no stuck workflows.").to_string(),
        ),
        (true, false) => ("warn", format!("{}: {}.", tr("Attention"), warn.join("; "))),
        _ => (
            "bad",
            format!(
                "{}: {}.",
                tr("Attention"),
                bad.into_iter().chain(warn).collect::<Vec<_>>().join("; ")
            ),
        ),
    };
    let _ = write!(h, "<div class=\"verdict {class}\">{}</div>", esc(&text));
}

fn card(h: &mut String, href: &str, key: &str, value: &str, detail: &str) {
    let _ = write!(
        h,
        "<a class=\"card\" href=\"{href}\"><div class=\"k\">{}</div><div class=\"v\">{value}</div>\
         <div class=\"d\">{detail}</div></a>",
        tr(key)
    );
}

pub(super) fn cards(h: &mut String, p: &Page) {
    h.push_str("<div class=\"cards\">");
    finding_cards(h, p);
    server_cards(h, p);
    registry_view_card(h, p);
    brake_card(h, p);
    last_sweep_card(h, p);
    h.push_str("</div>");
}

/// A count, green at zero and red above.
fn tinted_count(n: usize) -> String {
    format!(
        "<span class=\"{}\">{n}</span>",
        if n == 0 { "ok" } else { "bad" }
    )
}

/// The zombie tasks and the stuck workflows.
fn finding_cards(h: &mut String, p: &Page) {
    card(
        h,
        "#zombies",
        "Zombie tasks",
        &tinted_count(p.zombies_total),
        &if p.zombie_reasons.is_empty() {
            tr("none").into()
        } else {
            reasons_line(&p.zombie_reasons)
        },
    );
    let wf_reasons = tally(p.workflows.iter().map(|w| w.reason));
    card(
        h,
        "#workflows",
        "Stuck workflows",
        &tinted_count(p.workflows.len()),
        &if wf_reasons.is_empty() {
            tr("none").into()
        } else {
            reasons_line(&wf_reasons)
        },
    );
}

/// The live workers with their agents, and the live masters.
fn server_cards(h: &mut String, p: &Page) {
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
            "{}: {fresh} {} · {} · {none} {}",
            tr("agents"),
            tr("fresh"),
            if stale > 0 {
                format!("<span class=\"bad\">{stale} {}</span>", tr("stale"))
            } else {
                format!("0 {}", tr("stale"))
            },
            tr("none")
        ),
    );
    card(
        h,
        "#masters",
        "Live masters",
        &p.workers.masters.len().to_string(),
        &format!("{} {}", p.workers.lost.len(), tr("recently lost")),
    );
}

fn registry_view_card(h: &mut String, p: &Page) {
    let rv = &p.status.registry_view;
    card(
        h,
        "#workers",
        "Registry view",
        &if rv.valid {
            format!("<span class=\"ok\">{}</span>", tr("valid"))
        } else {
            format!("<span class=\"bad\">{}</span>", tr("invalid"))
        },
        &if rv.valid {
            format!(
                "{} · {} {}",
                esc(rv.registry),
                tr("since"),
                ago(Some(rv.since), p.now)
            )
        } else {
            format!(
                "{} · {} · {} {}",
                esc(rv.registry),
                opt(rv.reason.as_deref()),
                tr("since"),
                ago(Some(rv.since), p.now)
            )
        },
    );
}

fn brake_card(h: &mut String, p: &Page) {
    let brake = &p.status.brake;
    card(
        h,
        "#audit",
        "Brake",
        &if brake.engaged {
            format!("<span class=\"bad\">{}</span>", tr("ENGAGED"))
        } else {
            format!("<span class=\"ok\">{}</span>", tr("released"))
        },
        &if brake.engaged {
            format!(
                "{} · {}",
                ago(brake.since, p.now),
                opt(brake.why.as_deref())
            )
        } else {
            tr("actions allowed").into()
        },
    );
}

fn last_sweep_card(h: &mut String, p: &Page) {
    match &p.status.last_sweep {
        Some(s) => card(
            h,
            "#charts",
            "Last sweep",
            &ago(Some(s.at), p.now),
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
        None => card(h, "#charts", "Last sweep", "-", tr("no sweep yet")),
    }
}

pub(super) fn charts(h: &mut String, p: &Page) {
    let pts = |f: fn(&SweepPoint) -> f64| -> Vec<(Instant, f64)> {
        p.history.iter().map(|s| (s.at, f(s))).collect()
    };
    let window = crate::engine::HISTORY_WINDOW;
    let charts = [
        chart::Chart {
            title: tr("Zombies found"),
            series: vec![
                chart::Series {
                    label: tr("tasks"),
                    color: "#c62828",
                    points: pts(|s| s.zombies as f64),
                },
                chart::Series {
                    label: tr("workflows"),
                    color: "#ef6c00",
                    points: pts(|s| s.workflows as f64),
                },
            ],
            fmt: chart::count,
            now: p.now,
            window,
        },
        chart::Chart {
            title: tr("Actions taken"),
            series: vec![chart::Series {
                label: tr("actions"),
                color: "#6a1b9a",
                points: pts(|s| s.actions as f64),
            }],
            fmt: chart::count,
            now: p.now,
            window,
        },
        chart::Chart {
            title: tr("Sweep duration"),
            series: vec![chart::Series {
                label: tr("duration"),
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
