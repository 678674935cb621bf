//! The human status page at `/` (SPEC §8): what an operator opens when an
//! alert fires. Server-rendered from the same typed views as the API, no
//! JavaScript, no external assets: a verdict line, summary cards, the last
//! hour of sweeps as small inline SVG charts, then zombies, workflows, ghosts,
//! workers with their agents, masters, losses and the latest audit records.
//! Ages read "12 s ago" with the exact time on hover; it refreshes itself.

mod chart;
mod format;
mod ghosts;
pub mod lang;
mod style;
mod summary;
mod tables;
#[cfg(test)]
mod tests;

use crate::audit::Record;
use crate::engine::SweepPoint;
use crate::views::{GhostView, StatusView, WorkersView, WorkflowView, ZombieView};
use format::{ago, esc, section};
use reaper_core::Instant;
use std::fmt::Write;
use style::STYLE;
use summary::{cards, charts, header, verdict};
use tables::{audit, node_rows, workers, workflows, zombies};

/// How often the page reloads itself.
pub const REFRESH_SECONDS: u32 = 10;

pub struct Page {
    /// The language of the page's own words (`Accept-Language`).
    pub lang: lang::Lang,
    pub status: StatusView,
    pub workers: WorkersView,
    /// The first zombies of the last sweep, and how many there were in all.
    pub zombies: Vec<ZombieView>,
    pub zombies_total: usize,
    /// All the last sweep's zombies by reason (see [`tally`]).
    pub zombie_reasons: Vec<(&'static str, usize)>,
    pub workflows: Vec<WorkflowView>,
    /// Processes that should not be running (SPEC §15).
    pub ghosts: Vec<GhostView>,
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

pub fn render(p: &Page) -> String {
    lang::with_lang(p.lang, || render_in_lang(p))
}

fn render_in_lang(p: &Page) -> String {
    use lang::tr;
    let now = p.now;
    let st = &p.status;
    let mut h = format!(
        "<!doctype html><html lang=\"{}\"><head><meta charset=\"utf-8\"><title>ds-reaper</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\"><style>{STYLE}</style></head><body><main>",
        p.lang.html_tag()
    );
    header(&mut h, p);
    verdict(&mut h, p);
    cards(&mut h, p);
    charts(&mut h, p);
    if let Some(hold) = &st.ds_line_hold {
        let _ = write!(h, "<p class=\"bad\">{}</p>", esc(hold));
    }
    if let Some(db) = &st.database_error {
        let _ = write!(h, "<p class=\"bad\">{}: {}</p>", tr("database"), esc(db));
    }
    zombies(&mut h, p);
    workflows(&mut h, p);
    ghosts::ghosts(&mut h, p);
    workers(&mut h, p);
    h.push_str("<div class=\"two\">");
    section(
        &mut h,
        "masters",
        &format!("{} ({})", tr("Masters"), p.workers.masters.len()),
        "",
        &["node", "address", "started", "last heartbeat", "status"],
        node_rows(&p.workers.masters, now),
    );
    section(
        &mut h,
        "lost",
        &format!("{} ({})", tr("Recently lost"), p.workers.lost.len()),
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
         <a href=\"/api/v1/ghosts\">ghosts</a> · \
         <a href=\"/api/v1/workers\">workers</a> · <a href=\"/api/v1/audit\">audit</a> · \
         <a href=\"/metrics\">metrics</a></footer></main></body></html>",
    );
    h
}
