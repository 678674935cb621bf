//! `check`: one sweep, no writes; exit 1 when it found anything.

use super::connect::{connect, progress};
use super::output::{print_ghosts, print_table, print_workflows};
use super::{Format, EXIT_FOUND, EXIT_OK, EXIT_UNREACHABLE};
use crate::config::Settings;
use crate::engine::{Engine, Error};
use crate::views::{GhostView, WorkflowView, ZombieView};
use reaper_core::anomaly::Anomaly;
use reaper_core::ghost::Ghost;
use reaper_core::workflow::WorkflowFinding;
use reaper_core::{DsLine, Instant, Plan};
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
    let scanned = scan(&engine).await;
    engine.close().await;
    cancel.cancel();
    let found = match Found::new(scanned) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("ds-reaper: {e}");
            return EXIT_UNREACHABLE;
        }
    };
    match format {
        Format::Json => found.print_json(&s),
        Format::Table => found.print_tables(&s),
    }
    if found.is_empty() {
        EXIT_OK
    } else {
        EXIT_FOUND
    }
}

/// What the engine answered, read before it is closed.
struct Scanned {
    tasks: Result<(DsLine, Plan, Vec<WorkflowFinding>), Error>,
    ghosts: Result<Vec<Ghost>, Error>,
    anomalies: Result<Vec<Anomaly>, Error>,
}

async fn scan(engine: &Engine) -> Scanned {
    progress("scanning t_ds_task_instance");
    let tasks = engine.check().await;
    let ghosts = match &tasks {
        Ok((line, _, _)) => engine.check_ghosts(*line).await,
        Err(_) => Ok(Vec::new()),
    };
    // SPEC §16 after the task, workflow and ghost findings; never written, never audited
    let anomalies = match &tasks {
        Ok(_) => engine.check_anomalies().await,
        Err(_) => Ok(Vec::new()),
    };
    Scanned {
        tasks,
        ghosts,
        anomalies,
    }
}

/// Everything the check found, as printed.
struct Found {
    line: DsLine,
    candidates: usize,
    now: Instant,
    zombies: Vec<ZombieView>,
    workflows: Vec<WorkflowView>,
    ghosts: Vec<GhostView>,
    anomalies: Vec<Anomaly>,
    /// The brake condition this judgement saw (a `run` would hold every action).
    brake: Option<reaper_core::BrakeState>,
}

impl Found {
    /// The first error of the task scan, the ghosts and the anomalies, in
    /// that order, stops the check.
    fn new(scanned: Scanned) -> Result<Found, Error> {
        let (line, plan, findings) = scanned.tasks?;
        let ghosts = scanned.ghosts?.iter().map(GhostView::new).collect();
        let anomalies = scanned.anomalies?;
        let now = plan.at;
        Ok(Found {
            line,
            candidates: plan.candidates,
            now,
            zombies: plan
                .zombies
                .iter()
                .map(|z| ZombieView::new(z, now))
                .collect(),
            workflows: findings.iter().map(WorkflowView::new).collect(),
            ghosts,
            anomalies,
            brake: Some(plan.next.brake.clone()).filter(|b| b.engaged()),
        })
    }

    fn is_empty(&self) -> bool {
        self.zombies.is_empty()
            && self.workflows.is_empty()
            && self.ghosts.is_empty()
            && self.anomalies.is_empty()
    }

    fn print_json(&self, s: &Settings) {
        let doc = json!({
            "ds_line": self.line.as_str(),
            "registry": s.registry.kind.as_str(),
            "candidates": self.candidates,
            "zombies": self.zombies,
            "workflows": self.workflows,
            "ghosts": self.ghosts,
            "anomalies": self.anomalies,
            "brake": self.brake.as_ref().map(|b| json!({
                "reason": b.reason,
                "why": b.why,
                "servers": b.servers,
            })),
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    }

    fn print_tables(&self, s: &Settings) {
        println!("registry: {}", s.registry.kind.as_str());
        if let Some(why) = self.brake.as_ref().and_then(|b| b.why.as_deref()) {
            println!("brake engaged: {why}");
        }
        print_table(self.line, self.candidates, &self.zombies);
        print_workflows(&self.workflows);
        print_ghosts(&self.ghosts);
        super::anomalies::print_anomalies(&self.anomalies, self.now);
    }
}
