//! The page's ghost section (SPEC §15): processes that should not be
//! running, with what the row says and what is done about them.

use super::format::{ago, esc, opt, section, tag};
use super::lang::tr;
use super::Page;

pub(super) fn ghosts(h: &mut String, p: &Page) {
    let now = p.now;
    section(
        h,
        "ghosts",
        &format!("{} ({})", tr("Ghost processes"), p.ghosts.len()),
        "",
        &[
            "task",
            "worker",
            "pids",
            "started",
            "row",
            "newer attempt",
            "action",
            "note",
        ],
        p.ghosts
            .iter()
            .map(|g| {
                let row = match &g.row_state {
                    Some(s) => format!(
                        "{} flag {} {}",
                        esc(s),
                        g.row_flag.map_or("-".into(), |f| f.to_string()),
                        opt(g.row_host.as_deref())
                    ),
                    None => tr("no row").to_string(),
                };
                let pids: Vec<String> = g.pids.iter().map(i32::to_string).collect();
                (
                    Some("bad"),
                    vec![
                        format!(
                            "{} {}<br>{} {}",
                            g.task_id,
                            opt(g.task_name.as_deref()),
                            tag("bad", g.reason),
                            esc(g.evidence.over.as_str())
                        ),
                        esc(&g.worker),
                        pids.join(" "),
                        ago(g.started_at, now),
                        row,
                        g.newer_attempt.as_ref().map_or("-".into(), |n| {
                            format!("{} {}", n.id, opt(n.host.as_deref()))
                        }),
                        esc(g.action),
                        opt(g.note.as_deref()),
                    ],
                )
            })
            .collect(),
    );
}
