//! A test cluster for the ghost planner: workers (two may share a machine),
//! their agents' reports, DS's task rows as they change, and sweeps that
//! read and judge them as the engine does, memory carried between them.

use super::*;
use crate::agent::{AgentProcess, AgentReport, AgentTask, Lineage};
use crate::line::DsLine;
use crate::plan::Disposition;
use crate::rate::TokenBucket;
use crate::view::{NodeInfo, NodeKind};
use crate::ViewState;
use chrono::TimeZone;

pub(super) fn t(s: i64) -> Instant {
    chrono::Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

pub(super) const STALE: Duration = Duration::from_secs(35);

/// A row started at t(10) on `host`, in `state`, ended at `end` when finished.
pub(super) fn row(id: i64, state: i32, flag: i32, host: &str, end: Option<i64>) -> GhostRow {
    let mut c = Candidate::new(id, "SHELL", state, Some(host));
    c.submit_time = Some(t(9));
    c.start_time = Some(t(10));
    c.workflow_instance_id = Some(9);
    c.worker_group = Some("default".into());
    c.project_code = Some(7);
    GhostRow {
        task: c,
        flag,
        end_time: end.map(t),
        newer_attempt: None,
    }
}

pub(super) struct Sim {
    pub(super) v: RegistryView,
    pub(super) p: GhostPolicy,
    pub(super) memory: GhostMemory,
    pub(super) budget: Budget,
    /// DS's task table now.
    pub(super) db: BTreeMap<i64, GhostRow>,
    seq: u64,
}

impl Sim {
    /// Live workers `(node name, heartbeat address)`, no agent yet.
    pub(super) fn new(workers: &[(&str, Option<&str>)]) -> Sim {
        let mut v = RegistryView::invalid(t(0), "x");
        v.state = ViewState::Valid { since: t(0) };
        for (w, addr) in workers {
            let mut n = NodeInfo::new(w, t(0)).with_address(*addr);
            n.process_id = Some(4242);
            v.upsert(NodeKind::Worker, n);
        }
        let p = GhostPolicy {
            ghost_after: Duration::from_secs(20),
            startup_settle: Duration::ZERO,
            agent_stale_after: STALE,
            ..GhostPolicy::defaults(DsLine::V3_2)
        };
        Sim {
            v,
            budget: Budget::new(50, Duration::ZERO, Some(TokenBucket::full(10_000, t(0)))),
            p,
            memory: GhostMemory::new(),
            db: BTreeMap::new(),
            seq: 0,
        }
    }

    /// `worker`'s agent reports at `at` the tasks with their lineage, each
    /// with one process started at t(11).
    pub(super) fn report(&mut self, worker: &str, at: i64, tasks: &[(i64, Option<Lineage>)]) {
        self.seq += 1;
        let started = t(11).timestamp_millis();
        let report = AgentReport {
            tty_tasks: 0,
            app_id_sources: None,
            worker: worker.into(),
            agent_version: "test".into(),
            seq: self.seq,
            scan_started_at: t(at).timestamp_millis() - 1,
            scan_ms: 1,
            exec_base: "/tmp/ds".into(),
            unreadable: 0,
            blind: None,
            tasks: tasks
                .iter()
                .map(|&(id, lineage)| AgentTask {
                    lineage,
                    app_ids: vec![],
                    task_id: id,
                    workflow_instance_id: 9,
                    pids: vec![100 + id as i32],
                    started_at: started,
                    processes: vec![AgentProcess {
                        pid: 100 + id as i32,
                        started_at: started,
                        tty: false,
                    }],
                })
                .collect(),
            orders: Vec::new(),
        };
        let prev = self.v.agents.get(worker).cloned();
        let seen = AgentSeen::received(prev.as_deref(), Some(report), t(at), false, STALE);
        self.v.agents.insert(worker.into(), seen.into());
    }

    /// One sweep at `now`: the listed ids read by id from `db`, a row live
    /// on the one worker listing it kept as its id only (as the engine's
    /// candidates are); judged, and the orders of the kills admitted noted.
    pub(super) fn sweep(&mut self, now: i64) -> Vec<Ghost> {
        let read = listed_ids(&self.v, t(now), STALE);
        let mut listers: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
        for (w, a) in &self.v.agents {
            if a.fresh(t(now), STALE) {
                for task in a.report.iter().flat_map(|r| &r.tasks) {
                    listers.entry(task.task_id).or_default().push(w);
                }
            }
        }
        let mut rows = BTreeMap::new();
        let mut live = Vec::new();
        for id in read.iter() {
            let Some(r) = self.db.get(&id) else { continue };
            let only = listers.get(&id).filter(|l| l.len() == 1).map(|l| l[0]);
            let host = r.task.host.as_deref();
            match only {
                Some(w) if over_fields(&self.v, w, r.task.state, r.flag, host).is_none() => {
                    live.push(id)
                }
                _ => {
                    rows.insert(id, r.clone());
                }
            }
        }
        let plan = plan_ghosts(
            &self.v,
            &ListedRead {
                read: &read,
                rows: &rows,
                live: &IdSet::from(live),
                outstanding: &BTreeSet::new(),
            },
            &self.memory,
            t(now),
            &self.p,
            &mut self.budget,
        );
        self.memory = plan.memory;
        self.budget.taken = 0;
        for g in plan
            .ghosts
            .iter()
            .filter(|g| g.disposition == Disposition::Act)
        {
            ordered(&mut self.memory, &g.worker, g.task_id, t(now));
        }
        plan.ghosts
    }
}
