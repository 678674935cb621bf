//! The sweep's `read` step: everything a judgement needs, read before the
//! plan (SPEC §4.1) — the line, the task candidates, the rows of the tasks
//! the agents list and the outstanding kill orders, the workflow candidates,
//! the rows beside the candidates that live-owner findings look at, and the
//! ResourceManager's answers. Nothing slow runs after it and before the
//! effects.

use super::ghosts::Listed;
use super::remote::Answers;
use super::sweep::{Mode, Stop};
use super::{Engine, SweepState, SweepSummary};
use reaper_core::anomaly::AnomalyRows;
use reaper_core::ports::{PortErrorKind, Scan};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{Candidate, DsLine, ViewState};

/// The workflow step's read, as `/readyz` names it when it fails.
const WORKFLOW_READ: &str = "workflow candidates";

/// The anomaly read, as `/readyz` names it when it fails.
const ANOMALY_READ: &str = "rows of live-owner findings";

/// A failed workflow read, told once the candidates are read.
enum Deferred {
    /// The database failed: recorded for `/readyz` and counted.
    Db(reaper_core::ports::PortError),
    /// `check` cannot judge without the workflows: its error.
    Check(reaper_core::ports::PortError),
}

/// What one sweep read.
pub(super) struct Read {
    pub line: DsLine,
    /// Why the DS line holds writes, if it does.
    pub line_hold: Option<String>,
    pub states: Vec<i32>,
    pub full: bool,
    pub candidates: Vec<Candidate>,
    pub listed: Option<Listed>,
    /// None when the store could not read them (the task results stand).
    pub workflows: Option<Vec<WorkflowCandidate>>,
    pub anomaly_rows: AnomalyRows,
    pub remote: Answers,
}

impl Engine {
    /// `read`: skipped while the view is not valid; a failed candidate read
    /// fails the sweep, a failed side read only leaves its part out.
    pub(super) async fn read(
        &self,
        st: &mut SweepState,
        mode: Mode,
        summary: &mut SweepSummary,
    ) -> Result<Read, Stop> {
        let before = self.registry.view();
        self.refresh_gauges(&before);
        if let ViewState::Invalid { reason, .. } = &before.state {
            return Err(Stop::Skipped(Some(format!(
                "registry view invalid: {reason}"
            ))));
        }
        drop(before);
        let (line, line_hold) = self.line(st).await.map_err(Stop::Error)?;
        let (states, _) = self.settings.live_states(line);
        let full = mode == Mode::Check
            || st.last_full.is_none_or(|t| {
                (self.now() - t) >= reaper_core::delta(self.settings.reconcile.full_scan_interval)
            });
        summary.kind = if full { "full" } else { "incremental" };
        // The workflow read first: its summary holds a row per live task
        // until it is folded into one per workflow, and read after the
        // candidates it stood beside them all (a full scan of 100,000 live
        // rows peaked ~7 MiB higher; scripts/bench/all.sh, steady row).
        let (workflows, deferred) = self.read_workflows(line, full, mode).await;
        let candidates = self.read_candidates(line, &states, mode, full).await?;
        if full && mode == Mode::Sweep {
            st.last_full = Some(self.now());
        }
        self.status_write().db_error = None;
        // what the workflow read met, told after the candidate read as when
        // it came second: a failed candidate read is the sweep's error
        match deferred {
            Some(Deferred::Db(e)) => self.db_failed(&e),
            Some(Deferred::Check(e)) => {
                return Err(Stop::Error(super::Error::port(
                    "reading workflow instances",
                )(e)))
            }
            None => {}
        }
        let listed = self.read_listed(line, &candidates).await;
        let anomaly_rows = self.anomaly_rows(line, mode).await?;
        let view = self.registry.view();
        let remote = self
            .read_remote_apps(&candidates, &view, true, line, full)
            .await;
        Ok(Read {
            line,
            line_hold,
            states,
            full,
            candidates,
            listed,
            workflows,
            anomaly_rows,
            remote,
        })
    }

    async fn read_candidates(
        &self,
        line: DsLine,
        states: &[i32],
        mode: Mode,
        full: bool,
    ) -> Result<Vec<Candidate>, Stop> {
        let read = match mode {
            // a full scan that leaves the sweep's cursor alone
            Mode::Check => self.store.scan_once(line, states).await,
            Mode::Sweep => {
                let scan = if full { Scan::Full } else { Scan::Incremental };
                self.store.candidates(line, states, scan).await
            }
        };
        read.map_err(|e| {
            self.db_failed(&e);
            tracing::warn!(error = %e, "sweep failed reading candidates");
            Stop::Error(super::Error::port("reading candidates")(e))
        })
    }

    /// The sweep's workflow candidates; None when the store cannot read them
    /// (the task results stand), with what is to be told of the failure once
    /// the candidates are read: the database's (recorded after the candidate
    /// read has cleared the last one), or `check`'s, which fails on a read it
    /// cannot serve.
    async fn read_workflows(
        &self,
        line: DsLine,
        full: bool,
        mode: Mode,
    ) -> (Option<Vec<WorkflowCandidate>>, Option<Deferred>) {
        if !self.settings.reconcile.workflows {
            return (None, None);
        }
        let (states, _) = self.settings.workflow_states(line);
        let (task_states, _) = self.settings.live_states(line);
        let scan = if full { Scan::Full } else { Scan::Incremental };
        match self
            .store
            .workflow_candidates(line, &states, &task_states, scan)
            .await
        {
            Ok(w) => {
                self.read_ok(WORKFLOW_READ);
                (Some(w), None)
            }
            Err(e) if e.kind() == PortErrorKind::Unsupported => (None, None),
            Err(e) if mode == Mode::Check => (None, Some(Deferred::Check(e))),
            Err(e) if e.kind() != PortErrorKind::Unavailable => {
                self.read_fault(WORKFLOW_READ, &e);
                (None, None)
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading workflow candidates failed; task results stand");
                (None, Some(Deferred::Db(e)))
            }
        }
    }

    /// The rows beside the candidates; a store that cannot read them, or a
    /// failed read, leaves the candidates alone to judge (logged, counted).
    async fn anomaly_rows(&self, line: DsLine, mode: Mode) -> Result<AnomalyRows, Stop> {
        match self.store.anomaly_rows(line).await {
            Ok(r) => {
                self.read_ok(ANOMALY_READ);
                Ok(r)
            }
            Err(e) if e.kind() == PortErrorKind::Unsupported => Ok(AnomalyRows::default()),
            Err(e) if mode == Mode::Check => Err(Stop::Error(super::Error::port(
                "reading the rows of live-owner findings",
            )(e))),
            Err(e) if e.kind() != PortErrorKind::Unavailable => {
                self.read_fault(ANOMALY_READ, &e);
                Ok(AnomalyRows::default())
            }
            Err(e) => {
                self.db_failed(&e);
                tracing::warn!(error = %e, "reading the rows of live-owner findings failed; candidates alone judged");
                Ok(AnomalyRows::default())
            }
        }
    }
}
