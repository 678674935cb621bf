//! Conditional task writes (SPEC §4.2), the workflow follow-up (SPEC §5) and
//! `recover` for `workflow_master_lost` (SPEC §13): the checks both dialects
//! share. How a dialect makes the write conditional is its own
//! (`Dialect::write_batch`); the follow-up's and the recovery's transactions
//! are written once (`follow::tx`).

use crate::dialect::Dialect;
use crate::{Db, FollowUpOutcome, FollowUpRequest, SqlError, TaskWrite, WriteOutcome};
use reaper_core::ports::WorkflowOutcome;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{DsLine, FollowUp, Instant};
use std::collections::HashMap;

impl Db {
    /// Conditional batch writes (SPEC §4.2); one outcome per input, in order.
    pub async fn write_tasks(
        &self,
        line: DsLine,
        writes: &[TaskWrite],
    ) -> Result<Vec<WriteOutcome>, SqlError> {
        self.write_tasks_after(line, writes, async { Ok(()) }).await
    }

    /// [`Db::write_tasks`] that changes no row before `ready` completes with
    /// `Ok` (the caller's intents on disk) and none at all when it fails:
    /// the connection, the transaction and (MySQL) the locking read go ahead
    /// meanwhile, and the transaction is rolled back if `ready` fails.
    pub async fn write_tasks_after(
        &self,
        line: DsLine,
        writes: &[TaskWrite],
        ready: impl std::future::Future<Output = Result<(), reaper_core::ports::GateRefused>> + Send,
    ) -> Result<Vec<WriteOutcome>, SqlError> {
        for w in writes {
            let code = w
                .action
                .target_state()
                .ok_or_else(|| SqlError::Invalid(format!("action {} writes nothing", w.action)))?;
            if !line.can_write(code) {
                return Err(SqlError::Invalid(format!(
                    "state {code} does not exist on line {line}"
                )));
            }
        }
        let mut outcomes = vec![WriteOutcome::LostRace; writes.len()];
        // A row seen finished or flag = 0 is never written (SPEC §4.8).
        let idx: Vec<usize> = (0..writes.len())
            .filter(|&i| !DsLine::is_finished_task_state(writes[i].seen.state))
            .collect();
        // One transaction for the whole batch: one commit (one log flush)
        // instead of one per chunk.
        let batch: Vec<&TaskWrite> = idx.iter().map(|&i| &writes[i]).collect();
        let zone = self.zone;
        // The follow-up's tables are checked too: a schema the adapter does
        // not understand must stop it before the task write, not after it.
        let hang = &self.shared.hang_after_write_commit;
        let applied = with_conn!(self, "writing task rows", |c: D| async {
            self.catalog_on::<D>(c).await?.require_writes(line)?;
            let applied = D::write_batch(c, zone, &batch, ready).await?;
            if hang.load(std::sync::atomic::Ordering::Acquire) {
                std::future::pending::<()>().await;
            }
            Ok(applied)
        });
        let applied = match applied {
            Ok(a) => a,
            // The limit may have fired after the COMMIT reached the server:
            // what the rows show now says whether the write happened.
            Err(e @ SqlError::Timeout { .. }) => {
                return self.after_write_timeout(line, writes, &idx, e).await
            }
            Err(e) => return Err(e),
        };
        for (k, &i) in idx.iter().enumerate() {
            if applied[k] {
                outcomes[i] = WriteOutcome::Applied;
            }
        }
        Ok(outcomes)
    }

    /// The outcomes of a write whose call timed out, from the rows read
    /// again by id. The batch is one transaction, so it either committed or
    /// not: a row that shows the write's target state (flag 1, host as seen)
    /// was written, one that shows anything else lost a race. When no row
    /// shows the write and some row is still exactly as seen, the
    /// transaction did not commit: the timeout is the honest answer. A
    /// failed re-read also returns the timeout.
    async fn after_write_timeout(
        &self,
        line: DsLine,
        writes: &[TaskWrite],
        idx: &[usize],
        timeout: SqlError,
    ) -> Result<Vec<WriteOutcome>, SqlError> {
        let ids: Vec<i64> = idx.iter().map(|&i| writes[i].seen.id).collect();
        let mut now: HashMap<i64, crate::TaskRow> = HashMap::new();
        let reread = async {
            let cat = self.catalog().await?;
            for chunk in ids.chunks(crate::ID_BATCH) {
                let page = self.reread_tasks(line, &cat, chunk).await?;
                now.extend(page.rows.into_iter().map(|t| (t.task.id, t)));
            }
            Ok::<_, SqlError>(())
        };
        if let Err(e) = reread.await {
            tracing::warn!(error = %e, "cannot read task rows again after a write timed out");
            return Err(timeout);
        }
        let mut outcomes = vec![WriteOutcome::LostRace; writes.len()];
        let (mut written, mut unchanged) = (false, false);
        let mut taken = std::collections::HashSet::new();
        for &i in idx {
            let w = &writes[i];
            let Some(cur) = now.get(&w.seen.id) else {
                continue;
            };
            let same_host = cur.flag == 1 && cur.task.host == w.seen.host;
            if same_host && Some(cur.task.state) == w.action.target_state() {
                if taken.insert(w.seen.id) {
                    outcomes[i] = WriteOutcome::Applied;
                }
                written = true;
            } else if same_host
                && cur.task.state == w.seen.state
                && cur.task.submit_time == w.seen.submit_time
            {
                unchanged = true;
            }
        }
        if !written && unchanged {
            return Err(timeout);
        }
        tracing::warn!(error = %timeout,
            "a task write timed out; its outcome is what the rows show now");
        Ok(outcomes)
    }

    /// The workflow follow-up after a successful task write (SPEC §5), one
    /// transaction that locks and re-reads the workflow row (SPEC §4.9).
    ///
    /// `live_master` answers, from the caller's registry view at the moment it
    /// is asked, whether a raw workflow `host` is a live master: it is asked
    /// under the row lock, and `recover` runs only when the answer is no.
    pub async fn follow_up(
        &self,
        line: DsLine,
        req: &FollowUpRequest,
        live_master: &(dyn Fn(&str) -> bool + Send + Sync),
    ) -> Result<FollowUpOutcome, SqlError> {
        if req.follow_up == FollowUp::None {
            return Ok(FollowUpOutcome::Skipped(
                "workflow follow-up is none".into(),
            ));
        }
        if !req.action.writes() {
            return Err(SqlError::Invalid(
                "a workflow follow-up needs a task write (fail, fault-tolerance or kill)".into(),
            ));
        }
        let Some(wf) = req.task.workflow_instance_id else {
            return Ok(FollowUpOutcome::Skipped(
                "the task has no workflow instance id".into(),
            ));
        };
        let zone = self.zone;
        with_conn!(self, "the workflow follow-up", |c: D| async {
            let cat = self.catalog_on::<D>(c).await?;
            cat.require_writes(line)?;
            crate::follow::tx::follow_up::<D>(c, line, &cat, zone, req, wf, live_master).await
        })
    }

    /// `recover` for `workflow_master_lost` (SPEC §13): in one transaction,
    /// the workflow row is locked and read again; a state or host other than
    /// `seen`'s is a [`WorkflowOutcome::LostRace`]; a host that is NULL,
    /// `'NULL'` or empty (DS's own failover holds it), a live master by
    /// `live_master` (asked under the lock) or a queued command for it are
    /// [`WorkflowOutcome::Skipped`]; otherwise DS's own master-failover rows
    /// for the line — the same as `recover` after `fault-tolerance` — with
    /// the update conditional on the state and host seen.
    pub async fn recover_workflow(
        &self,
        line: DsLine,
        seen: &WorkflowCandidate,
        now: Instant,
        live_master: &(dyn Fn(&str) -> bool + Send + Sync),
    ) -> Result<WorkflowOutcome, SqlError> {
        let zone = self.zone;
        with_conn!(self, "recovering a workflow instance", |c: D| async {
            let cat = self.catalog_on::<D>(c).await?;
            cat.require_writes(line)?;
            crate::follow::tx::recover_workflow::<D>(c, line, &cat, zone, seen, now, live_master)
                .await
        })
    }
}
