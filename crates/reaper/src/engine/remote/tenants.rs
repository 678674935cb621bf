//! The tenants of the tasks with known application ids (SPEC §17): an
//! application whose RM `user` is not its task's tenant is not the task's
//! own. One read of their workflow instances per sweep, and only when some
//! task has ids.

use super::{Answers, Engine};
use reaper_core::DsLine;
use std::collections::{BTreeMap, BTreeSet};

impl Answers {
    /// The task's tenant, where DS keeps one.
    pub(super) fn tenant(&self, task: i64) -> Option<&str> {
        let wf = self.workflows.get(&task)?;
        self.tenants.get(wf).map(String::as_str)
    }
}

impl Engine {
    /// The tenant of each workflow instance of `workflows` (task → workflow)
    /// where DS keeps one. A failed read leaves every tenant unknown: each
    /// application then counts as its task's own unless its start says
    /// otherwise, which holds rather than acts.
    pub(super) async fn read_tenants(
        &self,
        line: DsLine,
        workflows: &BTreeMap<i64, i64>,
    ) -> BTreeMap<i64, String> {
        let ids: Vec<i64> = workflows
            .values()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if ids.is_empty() {
            return BTreeMap::new();
        }
        match self.store.tenants(line, &ids).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the tenants of tasks with remote applications; none is foreign by its user");
                BTreeMap::new()
            }
        }
    }
}
