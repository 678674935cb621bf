//! `check`: one judgement as a sweep would make it, nothing written.

use super::{Engine, Error, Gate};
use reaper_core::ports::{PortErrorKind, Scan};
use reaper_core::workflow::WorkflowFinding;
use reaper_core::{plan_within, Budget, DsLine, Plan, SafetyState, UnseenAbsence};

impl Engine {
    /// Judges candidates as `check` does: nothing is written, and a host whose
    /// loss was not seen counts as lost for an unknown time. Workflow
    /// findings follow the task zombies (SPEC §13).
    pub async fn check(&self) -> Result<(DsLine, Plan, Vec<WorkflowFinding>), Error> {
        let mut st = self.state.lock().await;
        if !self.registry.view().is_valid() {
            return Err(Error::ViewInvalid);
        }
        let (line, line_hold) = self.line(&mut st).await?;
        let (states, _) = self.settings.live_states(line);
        let candidates = self
            .store
            .scan_once(line, &states)
            .await
            .map_err(Error::port("reading candidates"))?;
        let view = self.registry.view();
        if !view.is_valid() {
            return Err(Error::ViewInvalid);
        }
        let mut policy = self.settings.policy(line);
        policy.unseen_absence = UnseenAbsence::Unknown;
        policy.startup_settle = std::time::Duration::ZERO;
        let now = self.now();
        let memory = SafetyState::default();
        let hold = line_hold.unwrap_or_else(|| "check never writes".into());
        let mut budget = Budget::for_sweep(&memory, &policy, now).held(Some(hold));
        let mut plan = plan_within(&view, &candidates, now, &policy, &memory, &mut budget);
        // SPEC §17: the applications' states in the findings; nothing is
        // killed, since the hold above blocks every zombie.
        if let Some(valid_since) = view.valid_since() {
            let gate = Gate {
                valid_since,
                leader_only: false,
            };
            self.judge_remote_apps(&mut plan.zombies, &view, line, gate)
                .await;
        }
        let workflows = if self.settings.reconcile.workflows {
            let (wf_states, _) = self.settings.workflow_states(line);
            let wfs = match self
                .store
                .workflow_candidates(line, &wf_states, &states, Scan::Full)
                .await
            {
                Ok(w) => w,
                // A store that does not read them: no findings, not a
                // failure (a schema mismatch is one).
                Err(e) if e.kind() == PortErrorKind::Unsupported => Vec::new(),
                Err(e) => return Err(Error::port("reading workflow instances")(e)),
            };
            let mut wp = self.settings.workflow_policy();
            wp.unseen_absence = UnseenAbsence::Unknown;
            reaper_core::workflow::plan_workflows(&view, &wfs, now, line, &wp, &mut budget)
        } else {
            Vec::new()
        };
        Ok((line, plan, workflows))
    }
}
