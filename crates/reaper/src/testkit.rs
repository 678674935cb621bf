//! In-memory ports for in-process engine tests: a store of task rows with
//! DS's conditional-write semantics, a registry whose view the test sets, a
//! leadership switch, and a clock that follows tokio's (paused) time.
//!
//! Fakes live here only: adapters are tested against real services.

use reaper_core::ports::{
    BoxFuture, Clock, FollowUpOutcome, FollowUpRequest, Leadership, LiveMaster, OrderDeletion,
    OrderNode, PortError, RegistrySource, RegistryStats, Scan, SchemaInfo, TaskRow, TaskStore,
    TaskWrite, ViewWatch, WorkflowOutcome, WriteOutcome,
};
use reaper_core::registry::Detected;
use reaper_core::workflow::WorkflowCandidate;
use reaper_core::{
    Candidate, DsLine, FollowUp, Instant, NodeInfo, NodeKind, RegistryView, ViewState,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

type Hook<T> = Box<dyn Fn(&T) + Send + Sync>;

/// What the store was asked to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreCall {
    Read(Scan),
    Write(Vec<i64>),
    FollowUp(i64),
    Recover(i64),
    /// A batched read of listed task ids (SPEC §15).
    GhostRead(Vec<i64>),
}

/// Task rows in memory, written the way the SQL adapter writes them.
pub struct MemStore {
    line: DsLine,
    rows: Mutex<BTreeMap<i64, TaskRow>>,
    calls: Mutex<Vec<StoreCall>>,
    lose: Mutex<BTreeSet<i64>>,
    fail_writes: AtomicBool,
    on_read: Mutex<Option<Hook<()>>>,
    on_write: Mutex<Option<Hook<[TaskWrite]>>>,
    workflows: Mutex<BTreeMap<i64, WorkflowCandidate>>,
    /// What workflow reads answer instead of the rows, while set.
    workflow_fault: Mutex<Option<PortError>>,
    ends: Mutex<BTreeMap<i64, Instant>>,
    /// Workflows a follow-up or recover queued a command for.
    queued: Mutex<BTreeSet<i64>>,
    /// Workflow instances' tenants, and each tenant read's ids.
    tenants: Mutex<BTreeMap<i64, String>>,
    tenant_reads: Mutex<Vec<Vec<i64>>>,
}

impl MemStore {
    pub fn new(line: DsLine) -> Arc<MemStore> {
        Arc::new(MemStore {
            line,
            rows: Mutex::new(BTreeMap::new()),
            calls: Mutex::new(Vec::new()),
            lose: Mutex::new(BTreeSet::new()),
            fail_writes: AtomicBool::new(false),
            on_read: Mutex::new(None),
            on_write: Mutex::new(None),
            workflows: Mutex::new(BTreeMap::new()),
            workflow_fault: Mutex::new(None),
            ends: Mutex::new(BTreeMap::new()),
            queued: Mutex::new(BTreeSet::new()),
            tenants: Mutex::new(BTreeMap::new()),
            tenant_reads: Mutex::new(Vec::new()),
        })
    }

    /// DS finishing a task: its state and `end_time`.
    pub fn finish(&self, id: i64, state: i32, end: Instant) {
        self.set_state(id, state);
        lock(&self.ends).insert(id, end);
    }

    /// A newer attempt replaced the row (DS's failover): `flag = 0`.
    pub fn set_flag(&self, id: i64, flag: i32) {
        if let Some(r) = lock(&self.rows).get_mut(&id) {
            r.flag = flag;
        }
    }

    pub fn insert_workflow(&self, w: WorkflowCandidate) {
        lock(&self.workflows).insert(w.id, w);
    }

    pub fn workflow_row(&self, id: i64) -> Option<WorkflowCandidate> {
        lock(&self.workflows).get(&id).cloned()
    }

    pub fn insert(&self, c: Candidate) {
        lock(&self.rows).insert(c.id, TaskRow { task: c, flag: 1 });
    }

    pub fn state(&self, id: i64) -> Option<i32> {
        lock(&self.rows).get(&id).map(|r| r.task.state)
    }

    /// Changes a row behind the engine's back (DS finishing the task).
    pub fn set_state(&self, id: i64, state: i32) {
        if let Some(r) = lock(&self.rows).get_mut(&id) {
            r.task.state = state;
        }
    }

    /// The workflow instance `wf` runs as `tenant` (SPEC §17).
    pub fn set_tenant(&self, wf: i64, tenant: &str) {
        lock(&self.tenants).insert(wf, tenant.to_string());
    }

    /// The workflow ids of each tenant read so far.
    pub fn tenant_reads(&self) -> Vec<Vec<i64>> {
        lock(&self.tenant_reads).clone()
    }

    pub fn calls(&self) -> Vec<StoreCall> {
        lock(&self.calls).clone()
    }

    pub fn writes(&self) -> Vec<Vec<i64>> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                StoreCall::Write(ids) => Some(ids),
                _ => None,
            })
            .collect()
    }

    /// The next write of this row loses its race (the row changed under it).
    pub fn lose_race(&self, id: i64) {
        lock(&self.lose).insert(id);
    }

    /// Workflow reads fail with `e` (None: they read again).
    pub fn fail_workflow_reads(&self, e: Option<PortError>) {
        *lock(&self.workflow_fault) = e;
    }

    pub fn fail_writes(&self, on: bool) {
        self.fail_writes.store(on, Ordering::SeqCst);
    }

    /// Runs after the candidates are read, before they are returned.
    pub fn on_read(&self, f: impl Fn(&()) + Send + Sync + 'static) {
        *lock(&self.on_read) = Some(Box::new(f));
    }

    /// Runs when a write batch arrives, before it is applied.
    pub fn on_write(&self, f: impl Fn(&[TaskWrite]) + Send + Sync + 'static) {
        *lock(&self.on_write) = Some(Box::new(f));
    }

    fn live(&self, states: &[i32]) -> Vec<Candidate> {
        lock(&self.rows)
            .values()
            .filter(|r| r.flag == 1 && states.contains(&r.task.state))
            .map(|r| r.task.clone())
            .collect()
    }
}

impl TaskStore for MemStore {
    fn detect(&self) -> BoxFuture<'_, Result<SchemaInfo, PortError>> {
        Box::pin(async move {
            Ok(SchemaInfo {
                lines: vec![self.line],
                version_row: None,
            })
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), PortError>> {
        Box::pin(async { Ok(()) })
    }

    fn candidates<'a>(
        &'a self,
        _line: DsLine,
        states: &'a [i32],
        scan: Scan,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, PortError>> {
        Box::pin(async move {
            lock(&self.calls).push(StoreCall::Read(scan));
            let rows = self.live(states);
            if let Some(h) = lock(&self.on_read).as_ref() {
                h(&());
            }
            Ok(rows)
        })
    }

    fn scan_once<'a>(
        &'a self,
        _line: DsLine,
        states: &'a [i32],
    ) -> BoxFuture<'a, Result<Vec<Candidate>, PortError>> {
        Box::pin(async move { Ok(self.live(states)) })
    }

    /// Every unfinished `flag = 1` row (the judge counts a candidate once).
    fn anomaly_rows(
        &self,
        _line: DsLine,
    ) -> BoxFuture<'_, Result<reaper_core::anomaly::AnomalyRows, PortError>> {
        Box::pin(async move {
            let others = lock(&self.rows)
                .values()
                .filter(|r| r.flag == 1 && !DsLine::is_finished_task_state(r.task.state))
                .map(|r| r.task.clone())
                .collect();
            Ok(reaper_core::anomaly::AnomalyRows {
                others,
                serial: None,
            })
        })
    }

    fn task(&self, _line: DsLine, id: i64) -> BoxFuture<'_, Result<Option<TaskRow>, PortError>> {
        Box::pin(async move { Ok(lock(&self.rows).get(&id).cloned()) })
    }

    fn write_tasks<'a>(
        &'a self,
        _line: DsLine,
        writes: &'a [TaskWrite],
    ) -> BoxFuture<'a, Result<Vec<WriteOutcome>, PortError>> {
        Box::pin(async move {
            lock(&self.calls).push(StoreCall::Write(writes.iter().map(|w| w.seen.id).collect()));
            if let Some(h) = lock(&self.on_write).as_ref() {
                h(writes);
            }
            if self.fail_writes.load(Ordering::SeqCst) {
                return Err(PortError::unavailable("database down (test)"));
            }
            let mut rows = lock(&self.rows);
            let mut lose = lock(&self.lose);
            Ok(writes
                .iter()
                .map(|w| {
                    let unchanged = rows.get(&w.seen.id).is_some_and(|r| {
                        r.flag == 1
                            && r.task.state == w.seen.state
                            && r.task.host == w.seen.host
                            && r.task.submit_time == w.seen.submit_time
                    });
                    if !unchanged || lose.remove(&w.seen.id) {
                        return WriteOutcome::LostRace;
                    }
                    let target = w.action.target_state().unwrap_or(w.seen.state);
                    if let Some(r) = rows.get_mut(&w.seen.id) {
                        r.task.state = target;
                    }
                    WriteOutcome::Applied
                })
                .collect())
        })
    }

    /// Like the SQL store: a database that is down fails before the intents
    /// are asked for; otherwise nothing is written before they are on disk.
    fn write_tasks_after<'a>(
        &'a self,
        line: DsLine,
        writes: &'a [TaskWrite],
        before_write: reaper_core::ports::WriteGate<'a>,
    ) -> BoxFuture<'a, Result<Vec<WriteOutcome>, PortError>> {
        Box::pin(async move {
            if self.fail_writes.load(Ordering::SeqCst) {
                lock(&self.calls)
                    .push(StoreCall::Write(writes.iter().map(|w| w.seen.id).collect()));
                return Err(PortError::unavailable("database down (test)"));
            }
            before_write.await.map_err(PortError::refused)?;
            self.write_tasks(line, writes).await
        })
    }

    fn follow_up<'a>(
        &'a self,
        _line: DsLine,
        req: &'a FollowUpRequest,
        live_master: LiveMaster<'a>,
    ) -> BoxFuture<'a, Result<FollowUpOutcome, PortError>> {
        Box::pin(async move {
            lock(&self.calls).push(StoreCall::FollowUp(req.task.id));
            if let Some(h) = req.task.workflow_host.as_deref() {
                if live_master(h) {
                    return Ok(FollowUpOutcome::Skipped(format!(
                        "owning master {h} is alive"
                    )));
                }
            }
            if let (FollowUp::Recover, Some(w)) = (req.follow_up, req.task.workflow_instance_id) {
                lock(&self.queued).insert(w);
            }
            Ok(FollowUpOutcome::Done {
                workflow_state: Some(6),
                command_type: None,
                command_id: None,
            })
        })
    }

    fn rows_skipped(&self) -> Vec<(String, u64)> {
        Vec::new()
    }

    fn ghost_rows<'a>(
        &'a self,
        _line: DsLine,
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<reaper_core::ghost::GhostRead, PortError>> {
        Box::pin(async move {
            lock(&self.calls).push(StoreCall::GhostRead(ids.to_vec()));
            let rows = lock(&self.rows);
            let ends = lock(&self.ends);
            Ok(reaper_core::ghost::GhostRead {
                rows: ids
                    .iter()
                    .filter_map(|id| rows.get(id))
                    .map(|r| reaper_core::ghost::GhostRow {
                        task: r.task.clone(),
                        flag: r.flag,
                        end_time: ends.get(&r.task.id).copied(),
                        newer_attempt: None,
                    })
                    .collect(),
                undecodable: Vec::new(),
            })
        })
    }

    fn tenants<'a>(
        &'a self,
        _line: DsLine,
        workflow_ids: &'a [i64],
    ) -> BoxFuture<'a, Result<BTreeMap<i64, String>, PortError>> {
        Box::pin(async move {
            lock(&self.tenant_reads).push(workflow_ids.to_vec());
            let t = lock(&self.tenants);
            Ok(workflow_ids
                .iter()
                .filter_map(|w| Some((*w, t.get(w)?.clone())))
                .collect())
        })
    }

    fn workflow_candidates<'a>(
        &'a self,
        _line: DsLine,
        states: &'a [i32],
        _task_states: &'a [i32],
        _scan: Scan,
    ) -> BoxFuture<'a, Result<Vec<WorkflowCandidate>, PortError>> {
        Box::pin(async move {
            if let Some(e) = lock(&self.workflow_fault).clone() {
                return Err(e);
            }
            let wfs: Vec<WorkflowCandidate> = lock(&self.workflows)
                .values()
                .filter(|w| states.contains(&w.state))
                .cloned()
                .collect();
            Ok(wfs.into_iter().map(|w| self.derived(w)).collect())
        })
    }

    fn workflow<'a>(
        &'a self,
        _line: DsLine,
        id: i64,
        _task_states: &'a [i32],
    ) -> BoxFuture<'a, Result<Option<WorkflowCandidate>, PortError>> {
        Box::pin(async move {
            let w = lock(&self.workflows).get(&id).cloned();
            Ok(w.map(|w| self.derived(w)))
        })
    }

    /// As DS's master failover on ≤ 3.2: `host = 'NULL'` where unchanged.
    fn recover_workflow<'a>(
        &'a self,
        _line: DsLine,
        seen: &'a WorkflowCandidate,
        _now: Instant,
        live_master: LiveMaster<'a>,
    ) -> BoxFuture<'a, Result<WorkflowOutcome, PortError>> {
        Box::pin(async move {
            lock(&self.calls).push(StoreCall::Recover(seen.id));
            let mut wfs = lock(&self.workflows);
            let Some(w) = wfs.get_mut(&seen.id) else {
                return Ok(WorkflowOutcome::LostRace("gone".into()));
            };
            if w.state != seen.state || w.host != seen.host {
                return Ok(WorkflowOutcome::LostRace("changed".into()));
            }
            if let Some(h) = w.host.as_deref() {
                if live_master(h) {
                    return Ok(WorkflowOutcome::Skipped(format!(
                        "owning master {h} is alive"
                    )));
                }
            }
            w.host = Some("NULL".into());
            lock(&self.queued).insert(seen.id);
            Ok(WorkflowOutcome::Done {
                workflow_state: None,
                command_type: 2,
                command_id: Some(1),
            })
        })
    }
}

mod workflows;

/// Order nodes by (worker, task id), each with its version.
type OrderNodes = BTreeMap<(String, i64), (reaper_core::order::KillOrder, i64)>;
type OnDelete = Box<dyn Fn(&MemRegistry) + Send + Sync>;

/// A registry whose view the test sets.
pub struct MemRegistry {
    tx: watch::Sender<Arc<RegistryView>>,
    closed: AtomicBool,
    /// Order nodes with their versions, and the last version given out
    /// (one counter, as etcd's revisions: a rewritten node never gets a
    /// version it had before).
    orders: Mutex<(OrderNodes, i64)>,
    /// Called by each `delete_order` before it looks at the node: a test
    /// makes something happen at that moment (a lost leadership, a newer order).
    on_delete_order: Mutex<Option<OnDelete>>,
}

struct MemWatch(watch::Receiver<Arc<RegistryView>>);

impl ViewWatch for MemWatch {
    fn changed(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.0.changed().await.is_ok() })
    }
}

impl MemRegistry {
    /// A view valid since `since` with the given live workers and masters.
    pub fn new(since: Instant, workers: &[&str], masters: &[&str]) -> Arc<MemRegistry> {
        let mut v = RegistryView::invalid(since, "starting");
        v.state = ViewState::Valid { since };
        for w in workers {
            v.upsert(NodeKind::Worker, NodeInfo::new(w, since));
        }
        for m in masters {
            v.upsert(NodeKind::Master, NodeInfo::new(m, since));
        }
        let (tx, _) = watch::channel(Arc::new(v));
        Arc::new(MemRegistry {
            tx,
            closed: AtomicBool::new(false),
            orders: Mutex::new((BTreeMap::new(), 0)),
            on_delete_order: Mutex::new(None),
        })
    }

    /// Changes the view as an adapter would, and tells the watchers.
    pub fn update(&self, f: impl FnOnce(&mut RegistryView)) {
        self.tx.send_modify(|v| f(Arc::make_mut(v)));
    }

    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// The kill order nodes, by (worker, task id).
    pub fn order_nodes(&self) -> BTreeMap<(String, i64), reaper_core::order::KillOrder> {
        lock(&self.orders)
            .0
            .iter()
            .map(|(k, (o, _))| (k.clone(), o.clone()))
            .collect()
    }

    /// Writes (or replaces) an order node as another daemon would.
    pub fn write_order(&self, worker: &str, order: &reaper_core::order::KillOrder) {
        let mut g = lock(&self.orders);
        g.1 += 1;
        let version = g.1;
        g.0.insert(
            (worker.to_string(), order.task_id),
            (order.clone(), version),
        );
    }

    /// Sets what each `delete_order` does first.
    pub fn on_delete_order(&self, f: impl Fn(&MemRegistry) + Send + Sync + 'static) {
        *lock(&self.on_delete_order) = Some(Box::new(f));
    }
}

impl RegistrySource for MemRegistry {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn view(&self) -> Arc<RegistryView> {
        self.tx.borrow().clone()
    }

    fn watch(&self) -> Box<dyn ViewWatch> {
        Box::new(MemWatch(self.tx.subscribe()))
    }

    fn detected(&self) -> Detected {
        Detected {
            layout: None,
            format: None,
            lines: DsLine::ALL.to_vec(),
        }
    }

    fn stats(&self) -> RegistryStats {
        RegistryStats::default()
    }

    fn put_order<'a>(
        &'a self,
        worker: &'a str,
        order: &'a reaper_core::order::KillOrder,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            self.write_order(worker, order);
            Ok(())
        })
    }

    fn delete_order<'a>(
        &'a self,
        worker: &'a str,
        task_id: i64,
        version: i64,
    ) -> BoxFuture<'a, Result<OrderDeletion, PortError>> {
        Box::pin(async move {
            if let Some(f) = lock(&self.on_delete_order).as_ref() {
                f(self);
            }
            let mut g = lock(&self.orders);
            let key = (worker.to_string(), task_id);
            Ok(match g.0.get(&key) {
                None => OrderDeletion::Absent,
                Some((_, v)) if *v != version => OrderDeletion::Changed,
                Some(_) => {
                    g.0.remove(&key);
                    OrderDeletion::Deleted
                }
            })
        })
    }

    fn orders(&self) -> BoxFuture<'_, Result<Vec<OrderNode>, PortError>> {
        Box::pin(async move {
            Ok(lock(&self.orders)
                .0
                .iter()
                .map(|((w, _), (o, v))| OrderNode {
                    worker: w.clone(),
                    order: o.clone(),
                    version: *v,
                })
                .collect())
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.closed.store(true, Ordering::SeqCst) })
    }
}

/// Leadership the test switches.
pub struct Switch {
    leader: AtomicBool,
    id: String,
}

impl Switch {
    pub fn new(leader: bool, id: &str) -> Arc<Switch> {
        Arc::new(Switch {
            leader: AtomicBool::new(leader),
            id: id.to_string(),
        })
    }

    pub fn set(&self, leader: bool) {
        self.leader.store(leader, Ordering::SeqCst);
    }
}

impl Leadership for Switch {
    fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }

    fn leader_id(&self) -> Option<String> {
        Some(self.id.clone())
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The daemon's clock on tokio's time: under `start_paused` it moves only
/// when every task waits, so grace periods pass in no real time.
pub struct TokioClock {
    base: Instant,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn new(base: Instant) -> Arc<TokioClock> {
        Arc::new(TokioClock {
            base,
            start: tokio::time::Instant::now(),
        })
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        let elapsed = tokio::time::Instant::now() - self.start;
        self.base + reaper_core::delta(elapsed)
    }
}

/// An in-memory ResourceManager: each application's state by id; one that
/// never answers (its calls wait forever, as an RM behind a dead network
/// does); a kill that takes a while before the application reads KILLED.
#[derive(Default)]
pub struct MemRm {
    apps: Mutex<BTreeMap<String, String>>,
    started: Mutex<BTreeMap<String, i64>>,
    users: Mutex<BTreeMap<String, String>>,
    silent: AtomicBool,
    kill_takes: Mutex<std::time::Duration>,
    kill_ignored: AtomicBool,
    asked: Mutex<Vec<String>>,
    killed: Mutex<Vec<String>>,
}

impl MemRm {
    pub fn new(apps: &[(&str, &str)]) -> Arc<MemRm> {
        let rm = MemRm::default();
        *lock(&rm.apps) = apps
            .iter()
            .map(|(id, s)| (id.to_string(), s.to_string()))
            .collect();
        Arc::new(rm)
    }

    /// The RM says the application started at `ms` (epoch ms).
    pub fn started(&self, id: &str, ms: i64) {
        lock(&self.started).insert(id.to_string(), ms);
    }

    /// The RM says `user` runs the application.
    pub fn user(&self, id: &str, user: &str) {
        lock(&self.users).insert(id.to_string(), user.to_string());
    }

    /// From now on every call waits forever.
    pub fn go_silent(&self) {
        self.silent.store(true, Ordering::SeqCst);
    }

    /// A kill completes (the application then reads KILLED) after `d`.
    pub fn kill_takes(&self, d: std::time::Duration) {
        *lock(&self.kill_takes) = d;
    }

    /// From now on a kill is accepted (200) but the application keeps the
    /// state it had, as an RM whose kill did not take does.
    pub fn ignore_kills(&self) {
        self.kill_ignored.store(true, Ordering::SeqCst);
    }

    pub fn asked(&self) -> Vec<String> {
        lock(&self.asked).clone()
    }

    pub fn killed(&self) -> Vec<String> {
        lock(&self.killed).clone()
    }

    async fn hang_if_silent(&self) {
        if self.silent.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

impl reaper_core::ports::ResourceManager for MemRm {
    fn app<'a>(&'a self, id: &'a str) -> BoxFuture<'a, reaper_core::ports::AppAnswer> {
        Box::pin(async move {
            lock(&self.asked).push(id.to_string());
            self.hang_if_silent().await;
            let state = lock(&self.apps).get(id).cloned();
            let unknown_why = state
                .is_none()
                .then(|| "the RM does not know it (404)".into());
            reaper_core::ports::AppAnswer {
                app: reaper_core::remote::RemoteApp {
                    state,
                    started_time: lock(&self.started).get(id).copied(),
                    user: lock(&self.users).get(id).cloned(),
                    ..reaper_core::remote::RemoteApp::unknown(id)
                },
                unknown_why,
            }
        })
    }

    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            self.hang_if_silent().await;
            let takes = *lock(&self.kill_takes);
            tokio::time::sleep(takes).await;
            lock(&self.killed).push(id.to_string());
            if !self.kill_ignored.load(Ordering::SeqCst) {
                lock(&self.apps).insert(id.to_string(), "KILLED".into());
            }
            Ok(())
        })
    }
}
