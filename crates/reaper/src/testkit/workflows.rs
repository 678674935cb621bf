//! Workflow rows as the SQL store reads them (SPEC §13).

use super::{lock, MemStore};
use reaper_core::line::{FAILURE, KILL, NEED_FAULT_TOLERANCE};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::DsLine;

impl MemStore {
    /// A workflow with task rows of its own here gets what the SQL read
    /// makes of them: its live `flag = 1` rows by state, its `flag = 1`
    /// FAILURE / KILL rows and, where one shows a task action's write,
    /// whether a command is queued. One without stays as the test set it.
    pub(super) fn derived(&self, mut w: WorkflowCandidate) -> WorkflowCandidate {
        let rows = lock(&self.rows);
        let mine: Vec<i32> = rows
            .values()
            .filter(|r| r.flag == 1 && r.task.workflow_instance_id == Some(w.id))
            .map(|r| r.task.state)
            .collect();
        if mine.is_empty() {
            return w;
        }
        w.tasks_by_state.clear();
        w.ended_by_state.clear();
        for s in mine {
            if s == FAILURE || s == KILL {
                *w.ended_by_state.entry(s).or_default() += 1;
            } else if !DsLine::is_finished_task_state(s) {
                *w.tasks_by_state.entry(s).or_default() += 1;
            }
        }
        let wrote =
            !w.ended_by_state.is_empty() || w.tasks_by_state.contains_key(&NEED_FAULT_TOLERANCE);
        w.command_queued = wrote.then(|| lock(&self.queued).contains(&w.id));
        w
    }
}
