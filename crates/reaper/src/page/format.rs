//! Small formatting helpers shared by the page's parts (and its charts):
//! escaping, ages with the exact time on hover, tags, and the one table
//! layout every section uses.

use super::lang::{current, tr, Lang};
use reaper_core::Instant;
use std::fmt::Write;

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(super) fn opt(s: Option<&str>) -> String {
    s.map_or_else(|| "-".to_string(), esc)
}

pub(super) fn exact(t: Instant) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// "12 s", "10 min", "3 h", "2 d".
pub(super) fn span(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs} {}", tr("s")),
        120..=7199 => format!("{} {}", secs / 60, tr("min")),
        7200..=172_799 => format!("{} {}", secs / 3600, tr("h")),
        _ => format!("{} {}", secs / 86_400, tr("d")),
    }
}

/// "12 s ago" (or "in 3 s"), with the exact instant as a tooltip.
pub(super) fn ago(t: Option<Instant>, now: Instant) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let secs = (now - t).num_seconds();
    let n = span(secs.unsigned_abs());
    let text = match (current(), secs < 0) {
        (Lang::En, true) => format!("in {n}"),
        (Lang::En, false) => format!("{n} ago"),
        (Lang::Zh, true) => format!("{n}{}", tr("in")),
        (Lang::Zh, false) => format!("{n}{}", tr("ago")),
    };
    format!("<span title=\"{}\">{text}</span>", esc(&exact(t)))
}

pub(super) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", tr(if n == 1 { one } else { many }))
}

pub(super) fn tag(class: &str, text: &str) -> String {
    format!("<span class=\"tag {class}\">{}</span>", esc(tr(text)))
}

/// "worker_lost 2 · process_gone 1"
pub(super) fn reasons_line(reasons: &[(&str, usize)]) -> String {
    reasons
        .iter()
        .map(|(r, n)| format!("{} {n}", esc(r)))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// A section: a heading with a count and a summary, then the table (in a
/// scrolling box when long) or "none".
pub(super) fn section(
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
        let _ = write!(h, "<p class=\"muted\">{}</p></section>", tr("none"));
        return;
    }
    h.push_str("<div class=\"scroll\"><table><thead><tr>");
    for c in header {
        let _ = write!(h, "<th>{}</th>", esc(tr(c)));
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
