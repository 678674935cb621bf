//! `check`: one sweep, no writes; exit 1 when it found anything.

use super::connect::{connect, progress};
use super::output::{print_ghosts, print_table, print_workflows};
use super::{Format, EXIT_FOUND, EXIT_OK, EXIT_UNREACHABLE};
use crate::config::Settings;
use crate::views::{GhostView, WorkflowView, ZombieView};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(super) async fn check(s: Settings, format: Format, observe: Duration) -> u8 {
    let cancel = CancellationToken::new();
    let engine = match connect(&s, &cancel).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    if !observe.is_zero() {
        progress(&format!(
            "observing the registry for {}",
            humantime::format_duration(observe)
        ));
        tokio::time::sleep(observe).await;
        if !engine.view().is_valid() {
            eprintln!("ds-reaper: the registry view became invalid while observing");
            return EXIT_UNREACHABLE;
        }
    }
    progress("scanning t_ds_task_instance");
    let result = engine.check().await;
    let ghosts = match &result {
        Ok((line, _, _)) => engine.check_ghosts(*line).await,
        Err(_) => Ok(Vec::new()),
    };
    engine.close().await;
    cancel.cancel();
    let (line, plan, findings) = match result {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ds-reaper: {e}");
            return EXIT_UNREACHABLE;
        }
    };
    let ghosts: Vec<GhostView> = match ghosts {
        Ok(g) => g.iter().map(GhostView::new).collect(),
        Err(e) => {
            eprintln!("ds-reaper: {e}");
            return EXIT_UNREACHABLE;
        }
    };
    let now = plan.at;
    let zombies: Vec<ZombieView> = plan
        .zombies
        .iter()
        .map(|z| ZombieView::new(z, now))
        .collect();
    let workflows: Vec<WorkflowView> = findings.iter().map(WorkflowView::new).collect();
    match format {
        Format::Json => {
            let doc = json!({
                "ds_line": line.as_str(),
                "registry": s.registry.kind.as_str(),
                "candidates": plan.candidates,
                "zombies": zombies,
                "workflows": workflows,
                "ghosts": ghosts,
            });
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        Format::Table => {
            println!("registry: {}", s.registry.kind.as_str());
            print_table(line, plan.candidates, &zombies);
            print_workflows(&workflows);
            print_ghosts(&ghosts);
        }
    }
    if zombies.is_empty() && workflows.is_empty() && ghosts.is_empty() {
        EXIT_OK
    } else {
        EXIT_FOUND
    }
}
