//! What a workflow candidate carries besides its row and its task summary
//! (SPEC §13), read fresh every sweep because neither changes the parent's
//! rows: its child workflow instances that are not finished (a parent is
//! never recovered before its child), and, where its tasks show a task
//! action's target state, whether a command for it is queued (a follow-up
//! left undone by a leader that died).
//!
//! The same child read runs again under the workflow row's lock in the
//! follow-up's transaction ([`running_children`]).

use crate::dialect::{Conn, Dialect};
use crate::schema::{int_list, names, relation, Catalog, COMMAND};
use crate::sql::Sql;
use crate::{Db, SqlError};
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::DsLine;
use std::collections::{BTreeMap, BTreeSet};

/// The non-terminal child workflow instances of the parents `wfs`, by
/// parent: child id to state, from the line's parent-child relation table
/// (one statement for the set; the parent leads the relation's index on
/// 3.1+). Empty when the schema has no relation table.
pub(crate) async fn running_children<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    wfs: &[i64],
) -> Result<BTreeMap<i64, BTreeMap<i64, i32>>, SqlError> {
    let rel = relation(line);
    let mut out: BTreeMap<i64, BTreeMap<i64, i32>> = BTreeMap::new();
    if wfs.is_empty() || cat.require(rel.table, &[rel.parent_wf, rel.child]).is_err() {
        return Ok(out);
    }
    let mut q = Sql::<D>::new(format!(
        "SELECT r.{pw}, r.{ch}, c.state FROM {rt} r JOIN {wf} c ON c.id = r.{ch} WHERE ",
        pw = rel.parent_wf,
        ch = rel.child,
        rt = rel.table,
        wf = names(line).wf_table,
    ));
    D::in_set(&mut q, &format!("r.{}", rel.parent_wf), wfs);
    q.push(&format!(
        " AND c.state IN ({})",
        int_list(line.workflow_non_terminal_states())
    ));
    for r in q.fetch_all(c).await? {
        let Ok(Some(parent)) = D::int(&r, 0) else {
            continue;
        };
        // The join and the state filter said "not finished": a child id or
        // state that does not decode still holds its parent.
        let child = D::int(&r, 1).ok().flatten().unwrap_or(0);
        let state = D::int(&r, 2).ok().flatten().map_or(-1, |s| s as i32);
        out.entry(parent).or_default().insert(child, state);
    }
    Ok(out)
}

/// A child workflow instance of `wf_id` that is not finished, read in the
/// follow-up's transaction after the parent's row lock.
pub(crate) async fn running_child<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    cat: &Catalog,
    wf_id: i64,
) -> Result<Option<(i64, i32)>, SqlError> {
    let mut all = running_children::<D>(c, line, cat, &[wf_id]).await?;
    Ok(all.remove(&wf_id).and_then(|m| m.into_iter().next()))
}

/// Which of the workflow instances `wfs` have a command queued in
/// `t_ds_command` (2.0+ by its instance column, ≤ 1.3 by the
/// `ProcessInstanceId` in the param).
async fn queued_among<D: Dialect>(
    c: &mut Conn<D>,
    line: DsLine,
    wfs: &[i64],
) -> Result<BTreeSet<i64>, SqlError> {
    let mut out = BTreeSet::new();
    if wfs.is_empty() {
        return Ok(out);
    }
    if let Some(col) = names(line).cmd_instance_col {
        let mut q = Sql::<D>::new(format!("SELECT DISTINCT {col} FROM {COMMAND} WHERE "));
        D::in_set(&mut q, col, wfs);
        for r in q.fetch_all(c).await? {
            out.extend(D::int(&r, 0)?);
        }
        return Ok(out);
    }
    let q = Sql::<D>::new(format!(
        "SELECT command_param FROM {COMMAND} WHERE command_param LIKE '%ProcessInstanceId%'"
    ));
    for r in q.fetch_all(c).await? {
        if let Some(p) = D::text(&r, 0)? {
            out.extend(wfs.iter().copied().filter(|w| param_names_instance(&p, *w)));
        }
    }
    Ok(out)
}

/// A candidate the planner can judge: its host names a master.
fn judgeable(w: &WorkflowCandidate) -> bool {
    !reaper_core::host::is_empty(w.host.as_deref())
}

/// A candidate whose tasks show a state a task action writes (FAILURE,
/// NEED_FAULT_TOLERANCE, KILL): the only ones whose queue the planner asks.
fn shows_a_write(w: &WorkflowCandidate) -> bool {
    !w.ended_by_state.is_empty()
        || w.tasks_by_state
            .contains_key(&reaper_core::line::NEED_FAULT_TOLERANCE)
}

impl Db {
    /// Fills `running_children` of every judgeable candidate and
    /// `command_queued` of those whose tasks show a task action's write.
    pub(super) async fn fill_workflow_extras(
        &self,
        line: DsLine,
        cat: &Catalog,
        out: &mut [WorkflowCandidate],
    ) -> Result<(), SqlError> {
        let parents: Vec<i64> = out.iter().filter(|w| judgeable(w)).map(|w| w.id).collect();
        let asked: BTreeSet<i64> = out
            .iter()
            .filter(|w| judgeable(w) && shows_a_write(w))
            .map(|w| w.id)
            .collect();
        let asked_ids: Vec<i64> = asked.iter().copied().collect();
        let mut children = BTreeMap::new();
        for chunk in parents.chunks(self.set_chunk()) {
            children.append(&mut with_conn!(
                self,
                "reading the child workflows of workflows",
                |c: D| running_children::<D>(c, line, cat, chunk)
            )?);
        }
        let mut queued = BTreeSet::new();
        for chunk in asked_ids.chunks(self.set_chunk()) {
            queued.append(&mut with_conn!(
                self,
                "reading the commands queued for workflows",
                |c: D| queued_among::<D>(c, line, chunk)
            )?);
        }
        for w in out.iter_mut() {
            w.running_children = children.remove(&w.id).unwrap_or_default();
            w.command_queued = asked.contains(&w.id).then(|| queued.contains(&w.id));
        }
        Ok(())
    }
}

/// Whether a 1.x `command_param` names this workflow instance.
pub(crate) fn param_names_instance(param: &str, wf_id: i64) -> bool {
    serde_json::from_str::<serde_json::Value>(param)
        .ok()
        .and_then(|v| v.get("ProcessInstanceId").cloned())
        .is_some_and(|v| v.as_i64() == Some(wf_id) || v.as_str() == Some(&wf_id.to_string()))
}
