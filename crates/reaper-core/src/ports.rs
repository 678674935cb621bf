//! The seam between the engine and its adapters: a task/workflow store (DS's
//! database) and a registry source (ZooKeeper today; etcd and DS's JDBC
//! registry are further implementations), plus leadership and a clock.
//!
//! The traits are object safe (`Arc<dyn TaskStore>`), their futures boxed and
//! `Send`, so the engine is written once against them and its rules — intent
//! before write, lost races, the brake, grace timing — are testable in-process
//! with in-memory implementations. No runtime is named here: an adapter may use
//! any, the engine uses tokio.

use crate::anomaly::AnomalyRows;
use crate::candidate::Candidate;
use crate::line::DsLine;
use crate::order::KillOrder;
use crate::policy::{Action, FollowUp};
use crate::registry::Detected;
use crate::view::RegistryView;
use crate::workflow::WorkflowCandidate;
use crate::Instant;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed `Send` future borrowing from its receiver.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What kind of failure a port call had: it decides exit codes, HTTP
/// statuses and whether the engine skips a capability or reports a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortErrorKind {
    /// The service cannot be reached or failed (retry later).
    Unavailable,
    /// The request cannot be served as asked (bad input, a schema mismatch,
    /// a row that cannot be decoded): a fault to report, not "nothing found".
    Invalid,
    /// This adapter does not do it at all (the trait's default).
    Unsupported,
    /// The engine's own gate refused before anything was written (the
    /// intents could not be put on disk): nothing changed anywhere.
    Refused,
}

/// Why a store or registry call failed: its kind and the adapter's own
/// error (shared, so the error stays cheap to clone). Shown as that error.
#[derive(Debug, Clone)]
pub struct PortError {
    kind: PortErrorKind,
    source: Arc<dyn std::error::Error + Send + Sync>,
}

/// The boxed error a [`PortError`] is made from: any error, or a message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl PortError {
    pub fn new(kind: PortErrorKind, source: impl Into<BoxError>) -> PortError {
        PortError {
            kind,
            source: Arc::from(source.into()),
        }
    }

    pub fn unavailable(source: impl Into<BoxError>) -> PortError {
        PortError::new(PortErrorKind::Unavailable, source)
    }

    pub fn invalid(source: impl Into<BoxError>) -> PortError {
        PortError::new(PortErrorKind::Invalid, source)
    }

    pub fn unsupported(source: impl Into<BoxError>) -> PortError {
        PortError::new(PortErrorKind::Unsupported, source)
    }

    pub fn refused(source: impl Into<BoxError>) -> PortError {
        PortError::new(PortErrorKind::Refused, source)
    }

    pub fn kind(&self) -> PortErrorKind {
        self.kind
    }

    /// The adapter's own error, for a caller that wants to look into it.
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }

    /// `unavailable` | `invalid` | `unsupported`, for logs and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self.kind {
            PortErrorKind::Unavailable => "unavailable",
            PortErrorKind::Invalid => "invalid",
            PortErrorKind::Unsupported => "unsupported",
            PortErrorKind::Refused => "refused",
        }
    }
}

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.source, f)
    }
}

/// Transparent: the adapter's error is shown, its cause is the next link.
impl std::error::Error for PortError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// Equal when of one kind with one message (errors compare by what they say).
impl PartialEq for PortError {
    fn eq(&self, other: &PortError) -> bool {
        self.kind == other.kind && self.source.to_string() == other.source.to_string()
    }
}

impl Eq for PortError {}

/// Lines consistent with the schema, plus the `t_ds_version` row (logged, never trusted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaInfo {
    pub lines: Vec<DsLine>,
    pub version_row: Option<String>,
}

/// One task row in any state, with its flag (for `reap`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    pub task: Candidate,
    pub flag: i32,
}

/// A conditional task write: applied only if the row is still as `seen`.
#[derive(Debug, Clone)]
pub struct TaskWrite {
    pub seen: Candidate,
    pub action: Action,
    pub now: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Applied,
    LostRace,
}

#[derive(Debug, Clone)]
pub struct FollowUpRequest {
    /// The task as seen before its write.
    pub task: Candidate,
    pub action: Action,
    pub follow_up: FollowUp,
    pub now: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowUpOutcome {
    Done {
        /// The workflow state written, if the state changed.
        workflow_state: Option<i32>,
        command_type: Option<i32>,
        command_id: Option<i64>,
    },
    Skipped(String),
}

/// Which candidate read a sweep does (SPEC §3): the cheap incremental one, or
/// a full scan of the table (at start and every `full_scan_interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    Incremental,
    Full,
}

/// Answers "is this raw host a live master right now", asked by a follow-up
/// while the workflow row is locked (SPEC §4.9). Must not block.
pub type LiveMaster<'a> = &'a (dyn Fn(&str) -> bool + Send + Sync);

/// DS's database as the engine sees it.
pub trait TaskStore: Send + Sync {
    /// Reads the schema: the lines it fits (and re-learns its columns).
    fn detect(&self) -> BoxFuture<'_, Result<SchemaInfo, PortError>>;
    fn ping(&self) -> BoxFuture<'_, Result<(), PortError>>;
    /// Candidates of a sweep; the store keeps the incremental cursor.
    fn candidates<'a>(
        &'a self,
        line: DsLine,
        states: &'a [i32],
        scan: Scan,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, PortError>>;
    /// A full scan that leaves the sweep's cursor alone (`check`).
    fn scan_once<'a>(
        &'a self,
        line: DsLine,
        states: &'a [i32],
    ) -> BoxFuture<'a, Result<Vec<Candidate>, PortError>>;
    /// One task by id in any state.
    fn task(&self, line: DsLine, id: i64) -> BoxFuture<'_, Result<Option<TaskRow>, PortError>>;
    /// Conditional writes (SPEC §4.2), one outcome per input, in order.
    fn write_tasks<'a>(
        &'a self,
        line: DsLine,
        writes: &'a [TaskWrite],
    ) -> BoxFuture<'a, Result<Vec<WriteOutcome>, PortError>>;
    /// [`TaskStore::write_tasks`] that writes no row before `before_write`
    /// has completed with `Ok` — the engine's intents on disk (SPEC §4.7) —
    /// and writes nothing at all when it fails. A store may do what comes
    /// before a write meanwhile (a connection, a transaction, a locking read),
    /// so the audit's fsync and the database's round trips overlap. The
    /// default waits for `before_write`, then writes.
    fn write_tasks_after<'a>(
        &'a self,
        line: DsLine,
        writes: &'a [TaskWrite],
        before_write: WriteGate<'a>,
    ) -> BoxFuture<'a, Result<Vec<WriteOutcome>, PortError>> {
        Box::pin(async move {
            before_write.await.map_err(PortError::refused)?;
            self.write_tasks(line, writes).await
        })
    }
    /// The workflow follow-up after an applied task write (SPEC §5).
    fn follow_up<'a>(
        &'a self,
        line: DsLine,
        req: &'a FollowUpRequest,
        live_master: LiveMaster<'a>,
    ) -> BoxFuture<'a, Result<FollowUpOutcome, PortError>>;
    /// Rows that could not be decoded so far, per table (cumulative).
    fn rows_skipped(&self) -> Vec<(String, u64)>;

    /// Workflow candidates (SPEC §13): rows of the line's workflow table in
    /// `states`, each with what the rules need from its task rows (`flag = 1`
    /// non-terminal tasks by state, hosts of those in `task_states`, newest
    /// task end), read like task candidates; the store keeps its own cursor.
    fn workflow_candidates<'a>(
        &'a self,
        _line: DsLine,
        _states: &'a [i32],
        _task_states: &'a [i32],
        _scan: Scan,
    ) -> BoxFuture<'a, Result<Vec<WorkflowCandidate>, PortError>> {
        Box::pin(async { Err(PortError::unsupported(NO_WORKFLOWS)) })
    }

    /// One workflow instance by id in any state, as a candidate.
    fn workflow<'a>(
        &'a self,
        _line: DsLine,
        _id: i64,
        _task_states: &'a [i32],
    ) -> BoxFuture<'a, Result<Option<WorkflowCandidate>, PortError>> {
        Box::pin(async { Err(PortError::unsupported(NO_WORKFLOWS)) })
    }

    /// The rows of the task ids fresh agents list (SPEC §15), in any state,
    /// each with its `end_time` and, for a `flag = 0` row, the newer attempt:
    /// batched, never one statement per task. A store that cannot answers an
    /// error, never an empty read (which would make every listed task gone).
    fn ghost_rows<'a>(
        &'a self,
        _line: DsLine,
        _ids: &'a [i64],
    ) -> BoxFuture<'a, Result<crate::ghost::GhostRead, PortError>> {
        Box::pin(async {
            Err(PortError::unsupported(
                "this store does not read listed tasks by id",
            ))
        })
    }

    /// The tenant code of each of `workflow_ids` where DS keeps one (SPEC
    /// §17: an application another user runs is not the task's own); a
    /// workflow whose tenant is unknown is absent. A store that cannot tell
    /// answers empty: an unknown tenant makes no application foreign.
    fn tenants<'a>(
        &'a self,
        _line: DsLine,
        _workflow_ids: &'a [i64],
    ) -> BoxFuture<'a, Result<std::collections::BTreeMap<i64, String>, PortError>> {
        Box::pin(async { Ok(std::collections::BTreeMap::new()) })
    }

    /// `recover` for `workflow_master_lost`: DS's own master-failover rows
    /// for the line, in one transaction, conditional on the state and host
    /// seen, never with a second queued command, and only while no live
    /// master holds the workflow (asked under the row lock).
    fn recover_workflow<'a>(
        &'a self,
        _line: DsLine,
        _seen: &'a WorkflowCandidate,
        _now: Instant,
        _live_master: LiveMaster<'a>,
    ) -> BoxFuture<'a, Result<WorkflowOutcome, PortError>> {
        Box::pin(async { Err(PortError::unsupported(NO_WORKFLOWS)) })
    }

    /// What SPEC §16 reads beside the candidates: the `flag = 1`
    /// non-finished rows outside the candidate states that the latest
    /// `candidates` / `scan_once` read returned (so call it once after one), and
    /// 3.4's waiting serial commands. A store that cannot answer says so
    /// (`Unsupported`, or `Invalid` for rows it cannot read), never with an
    /// empty answer that would read as "nothing stuck".
    fn anomaly_rows(&self, _line: DsLine) -> BoxFuture<'_, Result<AnomalyRows, PortError>> {
        Box::pin(async { Err(PortError::unsupported(NO_ANOMALIES)) })
    }
}

const NO_WORKFLOWS: &str = "this store does not read workflow instances";
const NO_ANOMALIES: &str = "this store does not read the rows of stuck-under-a-live-owner findings";

/// What `recover_workflow` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkflowOutcome {
    Done {
        /// The workflow state written, if the state changed (3.3: 18).
        workflow_state: Option<i32>,
        command_type: i32,
        command_id: Option<i64>,
    },
    /// The row changed since it was read (state or host), or is gone:
    /// nothing written.
    LostRace(String),
    /// Not written, and why (a live master holds it, a command is queued,
    /// its host is already NULL/`'NULL'`/empty or, on 3.3, it is in
    /// FAILOVER (18): DS's own failover holds it).
    Skipped(String),
}

/// Counters a registry adapter keeps (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistryStats {
    pub session_expirations: u64,
    pub errors: u64,
    pub reconnects: u64,
}

/// A stream of view changes: each call to `changed` resolves once the view
/// has changed since the previous call, or with false when the source ended.
/// A source may wake it only for membership changes (servers coming or
/// going, losses, validity: [`crate::registry::Changes::membership`]) and
/// leave heartbeat data to [`RegistrySource::view`], which always has it.
pub trait ViewWatch: Send {
    fn changed(&mut self) -> BoxFuture<'_, bool>;
}

/// The registry as the engine sees it.
pub trait RegistrySource: Send + Sync {
    /// `zookeeper`, `etcd` or `jdbc`, for status and metrics.
    fn kind(&self) -> &'static str;
    /// The latest view (cheap: shared).
    fn view(&self) -> Arc<RegistryView>;
    fn watch(&self) -> Box<dyn ViewWatch>;
    /// What the registry's layout and heartbeats say about the DS line.
    fn detected(&self) -> Detected;
    fn stats(&self) -> RegistryStats;
    /// 1.2's task queue: removes a task's entries after `fail` (SPEC §5);
    /// registries without one have nothing to remove.
    fn delete_task_queue_entries(&self, _task_id: i64) -> BoxFuture<'_, Result<usize, PortError>> {
        Box::pin(async { Ok(0) })
    }
    /// Writes (or replaces) the kill order node `<root>/ds-reaper/orders/<worker>/<task_id>`
    /// (SPEC §15) for that worker's agent. Registries that carry no orders
    /// answer `Unsupported`: a kill is then never ordered, the ghost only reported.
    fn put_order<'a>(
        &'a self,
        _worker: &'a str,
        _order: &'a KillOrder,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async {
            Err(PortError::unsupported(format!(
                "the {} registry carries no kill orders",
                self.kind()
            )))
        })
    }
    /// Removes an order node once its outcome is audited, only if it is
    /// still at `version`, the version [`RegistrySource::orders`] read it at
    /// (SPEC §15: a node replaced since — a successor's order — stays).
    fn delete_order<'a>(
        &'a self,
        _worker: &'a str,
        _task_id: i64,
        _version: i64,
    ) -> BoxFuture<'a, Result<OrderDeletion, PortError>> {
        Box::pin(async { Ok(OrderDeletion::Absent) })
    }
    /// Every outstanding order node with the version it was read at;
    /// unparsable nodes are skipped (and logged by the adapter).
    fn orders(&self) -> BoxFuture<'_, Result<Vec<OrderNode>, PortError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// Ends the session promptly.
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// The one call from a store back into the engine: a batch write waits on
/// it before its first change, and writes nothing when it fails (SPEC §4.7:
/// the intents are on disk before any row changes).
pub type WriteGate<'a> = BoxFuture<'a, Result<(), GateRefused>>;

/// Why the engine's [`WriteGate`] refused a write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not written: {0}")]
pub struct GateRefused(pub String);

/// One application as a ResourceManager answered about it, and why its
/// state is unknown when it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppAnswer {
    pub app: crate::remote::RemoteApp,
    /// Set when the RM could not tell (unreachable, 404, an answer that
    /// does not name the id asked): the application may still run.
    pub unknown_why: Option<String>,
}

/// The YARN ResourceManagers (SPEC §17): asked about a task's applications
/// before a sweep plans, and told to kill one only as an effect.
pub trait ResourceManager: Send + Sync {
    /// The application's state as the RM says it (`state: None` when unknown).
    fn app<'a>(&'a self, id: &'a str) -> BoxFuture<'a, AppAnswer>;
    /// Asks the RM to kill the application; `Ok` once the RM accepted it
    /// (the caller reads the application again to see it final).
    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), PortError>>;
}

/// A kill order node as read, with the version it was read at: ZooKeeper's
/// `Stat.version`, etcd's `mod_revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderNode {
    /// The worker folder the node sits in, as spelled there.
    pub worker: String,
    pub order: KillOrder,
    pub version: i64,
}

/// What a conditional delete of an order node did. Only `Deleted` removed
/// anything; the others are answers, not failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderDeletion {
    Deleted,
    /// No node there (removed already).
    Absent,
    /// The node changed since it was read (a newer order, perhaps a
    /// successor's): left in place.
    Changed,
}

/// Leader election among replicas (SPEC §4.6).
pub trait Leadership: Send + Sync {
    fn is_leader(&self) -> bool;
    /// The current leader's id, when known.
    fn leader_id(&self) -> Option<String>;
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// The daemon's clock: absence clocks, grace periods and audit times are
/// measured on it (tests drive it by hand).
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        chrono::Utc::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("schema mismatch: t has no column x")]
    struct Mismatch(#[source] std::fmt::Error);

    #[test]
    fn a_port_error_keeps_its_kind_its_source_and_its_message() {
        let e = PortError::invalid(Mismatch(std::fmt::Error));
        assert_eq!(e.kind(), PortErrorKind::Invalid);
        assert_eq!(e.metric_label(), "invalid");
        assert_eq!(e.to_string(), "schema mismatch: t has no column x");
        assert!(e.inner().downcast_ref::<Mismatch>().is_some());
        // transparent: the next link is the adapter error's own cause
        let next = std::error::Error::source(&e).map(|s| s.to_string());
        assert_eq!(next, Some(std::fmt::Error.to_string()));
        assert_eq!(PortError::unavailable("down").metric_label(), "unavailable");
        assert_ne!(PortError::unsupported("x"), PortError::invalid("x"));
        assert_eq!(PortError::invalid("x"), PortError::invalid("x".to_string()));
    }
}
