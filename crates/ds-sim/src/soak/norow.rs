//! The missing-row fault (SPEC §15 `no_row`, `row_never_seen`,
//! `database_mismatch`): task processes an agent lists whose rows ds-reaper
//! never read — another DS installation's on the same host and exec base,
//! its rows in another database (task ids this database never had) — alone
//! or in a burst that makes ds-reaper's database look like the wrong one;
//! or a live task's row deleted under its running process (a user deleting
//! the workflow instance), after ds-reaper read it.

use super::oracle::{ExternalDeath, RowFate, TaskTruth, Window, DATABASE_MISMATCH};
use super::{now_ts, secs, Sim, RECOVERY};
use crate::procs::TaskProcess;
use anyhow::Result;
use rand::Rng;
use std::time::{Duration, Instant};

/// Task ids (and workflow ids) of the other installation: far above any this
/// database hands out in a soak.
const OTHER_INSTALLATION: i64 = 900_000_000;

/// A process of the other installation.
pub(super) struct Stray {
    id: i64,
    proc: TaskProcess,
    until: Instant,
    alive: bool,
}

impl Sim {
    /// Injects one missing-row fault: its key, or None without a target.
    pub(super) async fn missing_row(&mut self) -> Result<Option<String>> {
        let x = self.rng.gen_range(0..100);
        if x < 45 {
            let n = self.rng.gen_range(1..=2);
            self.strays("missing_row(foreign)", n, None)
        } else if x < 55 {
            // brake.min_zombies (10) or more at once: every kill is held
            let n = self.rng.gen_range(11..=13);
            self.strays("missing_row(burst)", n, Some(DATABASE_MISMATCH))
        } else {
            self.delete_row().await
        }
    }

    /// Starts `n` processes of the other installation under random agents'
    /// exec bases; `window`: the kind of the window they open, if any.
    fn strays(&mut self, label: &str, n: usize, window: Option<&str>) -> Result<Option<String>> {
        if self.agents.is_empty() {
            return Ok(None);
        }
        let life = secs(20.0, 60.0, &mut self.rng);
        let now = now_ts();
        for _ in 0..n {
            let a = self.rng.gen_range(0..self.agents.len());
            self.stray_seq += 1;
            let (id, wf) = (
                OTHER_INSTALLATION + self.stray_seq,
                OTHER_INSTALLATION + self.stray_seq,
            );
            let proc = self.agents[a].exec.start(self.db.line, wf, id)?;
            let host = self.workers[self.agents[a].worker].host.clone();
            self.truth.insert(
                id,
                TaskTruth {
                    id,
                    wf,
                    host,
                    agent: true,
                    submitted: now,
                    dead: None,
                    ds_finished: None,
                    superseded: None,
                    ghost_from: None,
                    restart_near_submit: false,
                    row: RowFate::Never,
                    fault: Some(label.to_string()),
                },
            );
            self.strays.push(Stray {
                id,
                proc,
                until: Instant::now() + life,
                alive: true,
            });
        }
        if let Some(kind) = window {
            self.blocked.push(Window {
                kind: kind.to_string(),
                from: now,
                to: now + life.as_secs_f64() + RECOVERY,
                worker: None,
            });
        }
        Ok(Some(label.to_string()))
    }

    /// Deletes the row of a live task with an agent that ds-reaper has had
    /// time to read (its process runs on).
    async fn delete_row(&mut self) -> Result<Option<String>> {
        let now = now_ts();
        let read: Vec<i64> = self
            .live_agent_tasks()
            .into_iter()
            .filter(|id| self.truth.get(id).is_some_and(|t| t.submitted < now - 8.0))
            .collect();
        let Some(id) = self.pick(&read) else {
            return Ok(None);
        };
        let r = sqlx::query("DELETE FROM t_ds_task_instance WHERE id = ?")
            .bind(id)
            .execute(&self.ds)
            .await;
        if r.is_err() {
            self.errors += 1;
            return Ok(None);
        }
        let label = "missing_row(deleted)".to_string();
        let now = now_ts();
        if let Some(tr) = self.truth.get_mut(&id) {
            tr.row = RowFate::Deleted(now);
            tr.ghost_from = Some(now);
            tr.fault = Some(label.clone());
        }
        if let Some(t) = self.tasks.get_mut(&id) {
            // nothing of DS's will end it: a ghost until it ends by itself
            t.over = true;
            t.ghost_until = Some(Instant::now() + Duration::from_secs(60));
        }
        Ok(Some(label))
    }

    /// The other installation's processes: killed by someone, or ending.
    pub(super) fn stray_tick(&mut self) {
        let (now, ts) = (Instant::now(), now_ts());
        for s in self.strays.iter_mut().filter(|s| s.alive) {
            if !s.proc.is_running() {
                s.alive = false;
                self.external.push(ExternalDeath { task: s.id, ts });
            } else if s.until <= now {
                s.alive = false;
                let _ = s.proc.kill();
            }
        }
        self.strays.retain(|s| s.alive);
    }
}
