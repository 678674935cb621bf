//! The ghost step's read: the rows of the tasks the fresh agents list,
//! taken from the sweep's candidates where they are among them and read by
//! id otherwise, and the outstanding kill orders.

use super::GHOST_READ;
use crate::engine::Engine;
use reaper_core::ghost::{self, GhostRow};
use reaper_core::ports::{OrderNode, PortErrorKind};
use reaper_core::IdSet;
use reaper_core::{DsLine, Instant, RegistryView};
use std::collections::BTreeMap;

/// The listed tasks' rows, read in the sweep after the candidates.
pub(in crate::engine) struct Listed {
    pub(super) read: IdSet,
    pub(super) rows: BTreeMap<i64, GhostRow>,
    /// Listed tasks whose candidate row is live on the one worker that lists
    /// them: no ghost, and no row kept for them.
    pub(super) live: IdSet,
    /// The order nodes in the registry, each with the version it was read
    /// at; None when they could not be read (no order is then written: one
    /// may be outstanding).
    pub(in crate::engine) orders: Option<Vec<OrderNode>>,
}

impl Engine {
    /// Reads the rows of every task a fresh agent lists now (SPEC §15: the
    /// row is read after the listing arrived), and the outstanding orders.
    /// None when the store cannot read them: no ghost is judged then.
    ///
    /// A listed task among this sweep's `candidates` (a `flag = 1` row in a
    /// live state, read moments ago) is taken from them: most listed tasks
    /// are running ones, so only the others cost a read.
    pub(in crate::engine) async fn read_listed(
        &self,
        line: DsLine,
        candidates: &[reaper_core::Candidate],
    ) -> Option<Listed> {
        let view = self.registry.view();
        let stale_after = self.settings.reconcile.agent_stale_after;
        // one instant for both looks at the agents' freshness
        let now = self.now();
        let ids = ghost::listed_ids(&view, now, stale_after);
        let orders = self.read_orders(view.agents.is_empty()).await;
        if ids.is_empty() {
            drop(view);
            return Some(Listed {
                read: IdSet::new(),
                rows: BTreeMap::new(),
                live: IdSet::new(),
                orders,
            });
        }
        let (mut rows, live) = rows_among_candidates(&view, candidates, now, stale_after);
        drop(view);
        let rest: Vec<i64> = ids
            .iter()
            .filter(|i| !rows.contains_key(i) && !live.contains(i))
            .collect();
        let found = if rest.is_empty() {
            Ok(reaper_core::ghost::GhostRead::default())
        } else {
            self.store.ghost_rows(line, &rest).await
        };
        match found {
            Ok(found) => {
                self.read_ok(GHOST_READ);
                let bad = IdSet::from(found.undecodable);
                rows.extend(found.rows.into_iter().map(|r| (r.task.id, r)));
                let mut read = ids;
                if !bad.is_empty() {
                    read.retain(|i| !bad.contains(i));
                }
                Some(Listed {
                    read,
                    rows,
                    live,
                    orders,
                })
            }
            Err(e) if e.kind() != PortErrorKind::Unavailable => {
                self.read_fault(GHOST_READ, &e);
                None
            }
            Err(e) => {
                self.db_failed(&e);
                tracing::warn!(error = %e, "cannot read the listed tasks; no ghost is judged in this sweep");
                None
            }
        }
    }

    /// The kill orders in the registry; None when they cannot be read.
    async fn read_orders(&self, no_agents: bool) -> Option<Vec<OrderNode>> {
        // Without agents there are neither ghosts nor answers: no registry
        // call at all for clusters that run none.
        if no_agents {
            return Some(Vec::new());
        }
        match self.registry.orders().await {
            Ok(o) => Some(o),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the kill orders; none is written in this sweep");
                None
            }
        }
    }
}

/// The listed tasks found among the sweep's candidates (live `flag = 1` rows
/// read moments ago): most listed tasks are running ones, so only the others
/// cost a read. A task live on the one worker whose agent lists it is no
/// ghost: only its id is kept (`live`), not a copy of its row held through
/// the sweep (40,000 listed tasks would be tens of MiB). The others' rows
/// are kept whole, for the judgement and its evidence.
fn rows_among_candidates(
    view: &RegistryView,
    candidates: &[reaper_core::Candidate],
    now: Instant,
    stale_after: std::time::Duration,
) -> (BTreeMap<i64, GhostRow>, IdSet) {
    // Which fresh agent lists each task, sorted by task id once: each
    // candidate is then found by a walk or a binary search, where a hash map
    // took a hash of each of 40,000 listings and candidates.
    let workers: Vec<&str> = view
        .agents
        .iter()
        .filter(|(_, a)| a.fresh(now, stale_after))
        .map(|(w, _)| w.as_str())
        .collect();
    let mut lister: Vec<(i64, usize)> = Vec::new();
    for (i, w) in workers.iter().enumerate() {
        let tasks = view.agents[*w].report.iter().flat_map(|r| &r.tasks);
        lister.extend(tasks.map(|t| (t.task_id, i)));
    }
    lister.sort_unstable();
    let mut rows = BTreeMap::new();
    let mut live = Vec::new();
    // The sweep's candidates come sorted by id: then one walk along both
    // lists, else a binary search per candidate.
    let sorted = candidates.is_sorted_by_key(|c| c.id);
    let mut at = 0;
    for c in candidates {
        if sorted {
            while lister.get(at).is_some_and(|(id, _)| *id < c.id) {
                at += 1;
            }
        } else {
            at = lister.partition_point(|(id, _)| *id < c.id);
        }
        let Some(&(_, i)) = lister.get(at).filter(|(id, _)| *id == c.id) else {
            continue;
        };
        // listed by a second agent too: judged with its row
        let more = lister.get(at + 1).is_some_and(|(id, _)| *id == c.id);
        let over = ghost::over_fields(view, workers[i], c.state, 1, c.host.as_deref());
        if !more && over.is_none() {
            live.push(c.id);
        } else {
            rows.insert(
                c.id,
                GhostRow {
                    task: c.clone(),
                    flag: 1,
                    end_time: None,
                    newer_attempt: None,
                },
            );
        }
    }
    (rows, IdSet::from(live))
}

#[cfg(test)]
mod tests {
    use super::rows_among_candidates;
    use chrono::TimeZone;
    use reaper_core::agent::{AgentReport, AgentSeen, AgentTask};
    use reaper_core::{Candidate, NodeInfo, NodeKind, RegistryView, ViewState};
    use std::time::Duration;

    const STALE: Duration = Duration::from_secs(35);

    fn now() -> reaper_core::Instant {
        chrono::Utc.timestamp_opt(1_700_000_000, 0).unwrap()
    }

    fn report(worker: &str, tasks: &[i64]) -> AgentReport {
        AgentReport {
            tty_tasks: 0,
            app_id_sources: None,
            worker: worker.into(),
            agent_version: "test".into(),
            seq: 1,
            scan_started_at: now().timestamp_millis(),
            scan_ms: 1,
            exec_base: "/tmp/ds".into(),
            unreadable: 0,
            blind: None,
            tasks: tasks
                .iter()
                .map(|&id| AgentTask {
                    lineage: None,
                    app_ids: vec![],
                    task_id: id,
                    workflow_instance_id: 9,
                    pids: vec![100],
                    started_at: 0,
                    processes: vec![],
                })
                .collect(),
            orders: Vec::new(),
        }
    }

    /// w1's agent lists 1, 2, 3 and 5; w2's lists 3 and 4; w3's is stale.
    fn view() -> RegistryView {
        let mut v = RegistryView::invalid(now(), "x");
        v.state = ViewState::Valid { since: now() };
        for w in ["w1:1234", "w2:1234", "w3:1234"] {
            v.upsert(NodeKind::Worker, NodeInfo::new(w, now()));
        }
        for (w, tasks, at) in [
            ("w1:1234", &[5, 1, 2, 3][..], now()),
            ("w2:1234", &[3, 4][..], now()),
            ("w3:1234", &[6][..], now() - chrono::TimeDelta::seconds(60)),
        ] {
            let seen = AgentSeen::received(None, Some(report(w, tasks)), at, false, STALE);
            v.agents.insert(w.into(), seen.into());
        }
        v
    }

    #[test]
    fn live_on_their_one_lister_are_ids_only_the_others_keep_their_rows() {
        let v = view();
        let mut candidates = vec![
            // live on w1, which lists it: no ghost
            Candidate::new(1, "SHELL", 1, Some("w1:1234")),
            // w1 lists it, the row says w2: judged with its row
            Candidate::new(2, "SHELL", 1, Some("w2:1234")),
            // listed by w1 and w2: judged with its row
            Candidate::new(3, "SHELL", 1, Some("w1:1234")),
            // listed by w2 only, live there
            Candidate::new(4, "SHELL", 1, Some("w2:1234")),
            // listed by the stale agent only: not the ghost step's
            Candidate::new(6, "SHELL", 1, Some("w3:1234")),
            // listed by nobody
            Candidate::new(7, "SHELL", 1, Some("w1:1234")),
        ];
        let (rows, live) = rows_among_candidates(&v, &candidates, now(), STALE);
        assert_eq!(live.as_slice(), &[1, 4]);
        assert_eq!(rows.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(rows[&2].task.host.as_deref(), Some("w2:1234"));

        // the same in any order (a walk for sorted candidates, a search otherwise)
        candidates.reverse();
        let (rows2, live2) = rows_among_candidates(&v, &candidates, now(), STALE);
        assert_eq!(live2, live);
        assert_eq!(rows2, rows);
    }
}
