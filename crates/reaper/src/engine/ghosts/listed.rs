//! The ghost step's read: the rows of the tasks the fresh agents list,
//! taken from the sweep's candidates where they are among them and read by
//! id otherwise, and the outstanding kill orders.

use super::GHOST_READ;
use crate::engine::Engine;
use reaper_core::ghost::{self, GhostRow};
use reaper_core::order::KillOrder;
use reaper_core::ports::PortErrorKind;
use reaper_core::{DsLine, Instant, RegistryView};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The listed tasks' rows, read in the sweep after the candidates.
pub(in crate::engine) struct Listed {
    pub(super) read: BTreeSet<i64>,
    pub(super) rows: BTreeMap<i64, GhostRow>,
    /// Listed tasks whose candidate row is live on the one worker that lists
    /// them: no ghost, and no row kept for them.
    pub(super) live: HashSet<i64>,
    /// The order nodes in the registry; None when they could not be read
    /// (no order is then written: one may be outstanding).
    pub(super) orders: Option<Vec<(String, KillOrder)>>,
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
        let ids: Vec<i64> = ghost::listed_ids(&view, self.now(), stale_after)
            .into_iter()
            .collect();
        let orders = self.read_orders(view.agents.is_empty()).await;
        if ids.is_empty() {
            drop(view);
            return Some(Listed {
                read: BTreeSet::new(),
                rows: BTreeMap::new(),
                live: HashSet::new(),
                orders,
            });
        }
        let (mut rows, live) = rows_among_candidates(&view, candidates, self.now(), stale_after);
        drop(view);
        let rest: Vec<i64> = ids
            .iter()
            .copied()
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
                let bad: BTreeSet<i64> = found.undecodable.into_iter().collect();
                rows.extend(found.rows.into_iter().map(|r| (r.task.id, r)));
                Some(Listed {
                    read: ids.into_iter().filter(|i| !bad.contains(i)).collect(),
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
    async fn read_orders(&self, no_agents: bool) -> Option<Vec<(String, KillOrder)>> {
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
) -> (BTreeMap<i64, GhostRow>, HashSet<i64>) {
    // The worker whose agent lists each task, and whether another lists it too.
    let mut lister: HashMap<i64, (&str, bool)> = HashMap::new();
    for (w, a) in view
        .agents
        .iter()
        .filter(|(_, a)| a.fresh(now, stale_after))
    {
        for t in a.report.iter().flat_map(|r| &r.tasks) {
            lister
                .entry(t.task_id)
                .and_modify(|(_, more)| *more = true)
                .or_insert((w.as_str(), false));
        }
    }
    let mut rows = BTreeMap::new();
    let mut live = HashSet::new();
    for c in candidates {
        let Some(&(worker, more)) = lister.get(&c.id) else {
            continue;
        };
        // what the judgement needs of a live row: its state and host
        let slim = GhostRow {
            task: reaper_core::Candidate {
                id: c.id,
                state: c.state,
                host: c.host.clone(),
                ..Default::default()
            },
            flag: 1,
            end_time: None,
            newer_attempt: None,
        };
        if !more && ghost::over(view, worker, Some(&slim)).is_none() {
            live.insert(c.id);
        } else {
            rows.insert(
                c.id,
                GhostRow {
                    task: c.clone(),
                    ..slim
                },
            );
        }
    }
    (rows, live)
}
