//! Intents a previous run left without an outcome (it died between them):
//! each is resolved from the row as the database shows it now (SPEC §10) —
//! `done` when the row shows the intended write, `lost_race` when it shows
//! another or none, `error` (`interrupted`) only when it cannot be read.

use super::Engine;
use crate::audit::{AuditEvent, Record, RecordKind, TAIL};
use reaper_core::DsLine;
use std::collections::BTreeMap;

/// What the database shows of one dangling intent.
enum Resolution {
    Applied(String),
    NotApplied(String),
    Unreadable(String),
}

impl Engine {
    /// Closes every intent of the trail's tail that has no outcome, by the
    /// row it was about. Returns how many it closed.
    pub async fn close_dangling_intents(&self) -> usize {
        let open = match self.audit.tail(TAIL) {
            Ok(records) => dangling(records),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the audit trail");
                return 0;
            }
        };
        if open.is_empty() {
            return 0;
        }
        let mut closing = Vec::with_capacity(open.len());
        for mut r in open {
            let (event, detail) = match self.resolve(&r).await {
                Resolution::Applied(d) => (AuditEvent::Done, d),
                Resolution::NotApplied(d) => (AuditEvent::LostRace, d),
                Resolution::Unreadable(d) => (AuditEvent::Error, d),
            };
            r.event = event;
            r.ts = self.now();
            r.detail = Some(format!(
                "interrupted: stopped before the outcome was recorded; {detail}"
            ));
            closing.push(r);
        }
        tracing::warn!(
            count = closing.len(),
            "audit intents without outcome from a previous run resolved from the database"
        );
        let n = closing.len();
        if let Err(e) = self.audit.append_blocking(closing).await {
            tracing::error!(error = %e, "cannot write the audit trail");
        }
        n
    }

    async fn resolve(&self, r: &Record) -> Resolution {
        let line = r.ds_line.as_deref().and_then(|l| l.parse::<DsLine>().ok());
        match (r.kind, line) {
            (Some(RecordKind::Task), Some(line)) => self.resolve_task(r, line).await,
            (Some(RecordKind::Workflow), Some(line)) => self.resolve_workflow(r, line).await,
            _ => Resolution::Unreadable("what it wrote cannot be read back".into()),
        }
    }

    async fn resolve_task(&self, r: &Record, line: DsLine) -> Resolution {
        let Some(id) = r.task_id else {
            return Resolution::Unreadable("the intent names no task".into());
        };
        let row = match self.store.task(line, id).await {
            Ok(Some(row)) => row,
            Ok(None) => return Resolution::NotApplied(format!("task {id} has no row now")),
            Err(e) => return Resolution::Unreadable(format!("task {id} cannot be read: {e}")),
        };
        let shows = line.state_name(row.task.state).unwrap_or("UNKNOWN");
        let intended = r.to_state.as_deref().and_then(|s| line.state_code(s));
        if intended == Some(row.task.state) {
            Resolution::Applied(format!("the row shows the write applied ({shows})"))
        } else if r.from_state.as_deref() == Some(shows) {
            Resolution::NotApplied(format!("the row is as it was seen ({shows}): not written"))
        } else {
            Resolution::NotApplied(format!("the row shows another change ({shows})"))
        }
    }

    /// A recover writes the workflow's host (≤ 3.2: `'NULL'`) or its state
    /// (3.3: FAILOVER), so a row no longer as the intent saw it was written
    /// — by this recover or by DS, which the queued command tells apart no
    /// better; it is taken as applied only when it shows what recover writes.
    async fn resolve_workflow(&self, r: &Record, line: DsLine) -> Resolution {
        let Some(id) = r.workflow_instance_id else {
            return Resolution::Unreadable("the intent names no workflow instance".into());
        };
        let (task_states, _) = self.settings.live_states(line);
        let wf = match self.store.workflow(line, id, &task_states).await {
            Ok(Some(w)) => w,
            Ok(None) => {
                return Resolution::NotApplied(format!("workflow instance {id} has no row now"))
            }
            Err(e) => {
                return Resolution::Unreadable(format!(
                    "workflow instance {id} cannot be read: {e}"
                ))
            }
        };
        let shows = reaper_core::workflow::workflow_state_name(wf.state).unwrap_or("UNKNOWN");
        let host_null = wf
            .host
            .as_deref()
            .is_none_or(|h| reaper_core::host::is_empty(Some(h)));
        // 3.3+ writes FAILOVER (18), earlier lines the host 'NULL'
        let recovered = if line >= DsLine::V3_3 {
            wf.state == 18
        } else {
            host_null && r.host.as_deref().is_some_and(|h| !h.trim().is_empty())
        };
        if recovered {
            Resolution::Applied(format!(
                "the row shows the recover applied ({shows}, host {})",
                wf.host.as_deref().unwrap_or("NULL")
            ))
        } else if r.from_state.as_deref() == Some(shows) {
            Resolution::NotApplied(format!("the row is as it was seen ({shows}): not written"))
        } else {
            Resolution::NotApplied(format!("the row shows another change ({shows})"))
        }
    }
}

/// The intents of `records` with no outcome after them, per (kind, id,
/// actor). A kill order's outcome is the agent's answer, which may come
/// after a restart (the order node persists): never dangling.
fn dangling(records: Vec<Record>) -> Vec<Record> {
    let mut open: BTreeMap<(bool, i64, String), Record> = BTreeMap::new();
    for r in records {
        if matches!(r.kind, Some(RecordKind::Process)) {
            continue;
        }
        let workflow = r.kind == Some(RecordKind::Workflow);
        let id = if workflow {
            r.workflow_instance_id
        } else {
            r.task_id
        };
        let Some(id) = id else { continue };
        let key = (workflow, id, r.actor.clone());
        if r.event == AuditEvent::Intent {
            open.insert(key, r);
        } else if r.event.is_outcome() {
            open.remove(&key);
        }
    }
    open.into_values().collect()
}
