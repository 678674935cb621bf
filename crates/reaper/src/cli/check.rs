//! `check`: one sweep, no writes; exit 1 when it found anything.

use super::connect::{connect, progress};
use super::output::{print_ghosts, print_table, print_workflows};
use super::{Format, EXIT_FOUND, EXIT_OK, EXIT_UNREACHABLE};
use crate::config::Settings;
use crate::engine::{Checked, Engine, Error};
use crate::views::{GhostView, WorkflowView, ZombieView};
use reaper_core::anomaly::Anomaly;
use reaper_core::{DsLine, Instant};
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
    checked: Result<Checked, Error>,
}

async fn scan(engine: &Engine) -> Scanned {
    progress("scanning t_ds_task_instance");
    // the same read and plan as a sweep, nothing written or audited
    Scanned {
        checked: engine.check().await,
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
    fn new(scanned: Scanned) -> Result<Found, Error> {
        let c = scanned.checked?;
        let now = c.at;
        Ok(Found {
            line: c.line,
            candidates: c.candidates,
            now,
            zombies: c.zombies.iter().map(|z| ZombieView::new(z, now)).collect(),
            workflows: c.workflows.iter().map(WorkflowView::new).collect(),
            ghosts: c.ghosts.iter().map(GhostView::new).collect(),
            anomalies: c.anomalies,
            brake: Some(c.brake.clone()).filter(|b| b.engaged()),
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
