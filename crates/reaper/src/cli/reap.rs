//! `reap`: one task, or one workflow instance, after a confirmation.

use super::connect::connect;
use super::{EXIT_FOUND, EXIT_OK, EXIT_UNREACHABLE};
use crate::config::Settings;
use crate::engine::{ReapError, ReapRequest};
use std::io::{IsTerminal, Write};
use tokio_util::sync::CancellationToken;

/// Asks on the terminal, or refuses when there is none and no `--yes`.
fn confirm(what: &str, yes: bool) -> Result<(), ReapError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(ReapError::Refused(
            "no terminal to confirm on; pass --yes".into(),
        ));
    }
    eprint!("{what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err()
        || !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
    {
        return Err(ReapError::Refused("not confirmed".into()));
    }
    Ok(())
}

pub(super) async fn reap_workflow(
    s: Settings,
    id: i64,
    force: bool,
    yes: bool,
    actor: String,
) -> u8 {
    let cancel = CancellationToken::new();
    let engine = match connect(&s, &cancel).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    let result = engine
        .reap_workflow(id, force, &actor, |f, forced| {
            confirm(
                &format!(
                    "Recover workflow instance {} ({}, {} on {}) — {}",
                    f.workflow.id,
                    f.workflow.name,
                    f.state_name,
                    f.workflow.host.as_deref().unwrap_or("no host"),
                    if forced { "forced" } else { f.reason.as_str() }
                ),
                yes,
            )
        })
        .await;
    engine.close().await;
    cancel.cancel();
    reap_exit(result, &format!("workflow instance {id}"))
}

fn reap_exit(result: Result<crate::audit::Record, ReapError>, what: &str) -> u8 {
    match result {
        Ok(rec) => {
            println!(
                "reaped {what}: {} -> {}{}",
                rec.from_state.as_deref().unwrap_or("?"),
                rec.to_state.as_deref().unwrap_or("?"),
                rec.detail.map(|d| format!(" ({d})")).unwrap_or_default()
            );
            EXIT_OK
        }
        Err(ReapError::Unavailable(e)) => {
            eprintln!("ds-reaper: {e}");
            EXIT_UNREACHABLE
        }
        Err(e) => {
            eprintln!("ds-reaper: {e}");
            EXIT_FOUND
        }
    }
}

pub(super) async fn reap(s: Settings, req: ReapRequest, yes: bool) -> u8 {
    let cancel = CancellationToken::new();
    let engine = match connect(&s, &cancel).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    let result = async {
        let prepared = engine.prepare_reap(&req).await?;
        let z = &prepared.zombie;
        let summary = format!(
            "task {} ({}, {} on {}) — {}: {} then workflow {}",
            z.task.id,
            z.task.name,
            z.state_name,
            z.task.host.as_deref().unwrap_or("no host"),
            if prepared.forced {
                "forced".to_string()
            } else {
                z.reason.to_string()
            },
            z.action,
            z.workflow
        );
        confirm(&format!("Reap {summary}"), yes)?;
        engine.commit_reap(prepared).await
    }
    .await;
    engine.close().await;
    cancel.cancel();
    reap_exit(result, &format!("task {}", req.task_id))
}
