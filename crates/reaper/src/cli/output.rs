//! `check`'s table output: the zombies as aligned columns, then the
//! workflow findings as lines.

use crate::views::{WorkflowView, ZombieView};
use reaper_core::DsLine;
use std::time::Duration;

pub(super) fn print_table(line: DsLine, candidates: usize, zombies: &[ZombieView]) {
    let opt = |v: Option<&str>| v.unwrap_or("-").to_string();
    let age = |v: Option<i64>| match v {
        Some(s) => humantime::format_duration(Duration::from_secs(s.max(0) as u64)).to_string(),
        None => "-".into(),
    };
    let header = [
        "TASK",
        "NAME",
        "TYPE",
        "HOST",
        "GROUP",
        "REASON",
        "AGE",
        "OWNER MASTER",
        "ALIVE",
        "ACTION",
        "WORKFLOW",
        "NOTE",
    ];
    let rows: Vec<Vec<String>> = zombies
        .iter()
        .map(|z| {
            vec![
                z.task_id.to_string(),
                z.task_name.clone(),
                z.task_type.clone(),
                opt(z.host.as_deref()),
                opt(z.worker_group.as_deref()),
                z.reason.to_string(),
                age(z.age_seconds),
                opt(z.owner_master.as_deref()),
                z.owner_master_alive.to_string(),
                z.action.to_string(),
                z.workflow.to_string(),
                opt(z.note.as_deref()),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count().min(60));
        }
    }
    let line_of = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| {
                let c: String = c.chars().take(60).collect();
                format!("{c:<w$}")
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    println!(
        "DS line {line}: {candidates} live-state rows, {} zombies",
        zombies.len()
    );
    if rows.is_empty() {
        return;
    }
    println!(
        "{}",
        line_of(header.iter().map(|s| s.to_string()).collect())
    );
    for r in rows {
        println!("{}", line_of(r));
    }
}

/// The workflow findings after the task zombies.
pub(super) fn print_workflows(workflows: &[WorkflowView]) {
    if workflows.is_empty() {
        return;
    }
    println!("\n{} workflow findings", workflows.len());
    for w in workflows {
        println!(
            "  workflow {} ({}, {}) on {}{}: {} -> {}{}",
            w.workflow_instance_id,
            w.name,
            w.state,
            w.host.as_deref().unwrap_or("-"),
            if w.owner_master_alive {
                " (alive)"
            } else {
                " (lost)"
            },
            w.reason,
            w.action,
            w.note
                .as_deref()
                .map(|n| format!(" — {n}"))
                .unwrap_or_default()
        );
    }
}

/// `check`'s ghost section (SPEC §15), after the workflow findings.
pub(super) fn print_ghosts(ghosts: &[crate::views::GhostView]) {
    if ghosts.is_empty() {
        return;
    }
    println!("\n{} ghost processes", ghosts.len());
    for g in ghosts {
        let pids: Vec<String> = g.pids.iter().map(i32::to_string).collect();
        let row = match &g.row_state {
            Some(s) => format!(
                "row {s}, flag {}, host {}",
                g.row_flag.map_or("-".into(), |f| f.to_string()),
                g.row_host.as_deref().unwrap_or("-")
            ),
            None => "no row".to_string(),
        };
        let newer = g
            .newer_attempt
            .as_ref()
            .map(|n| {
                format!(
                    "; newer attempt {} on {}",
                    n.id,
                    n.host.as_deref().unwrap_or("-")
                )
            })
            .unwrap_or_default();
        println!(
            "  task {} on {}: pids {} ({row}{newer}): {} ({}) -> {}{}",
            g.task_id,
            g.worker,
            pids.join(","),
            g.reason,
            g.evidence.over.as_str(),
            g.action,
            g.note
                .as_deref()
                .map(|n| format!(" — {n}"))
                .unwrap_or_default()
        );
    }
}
