//! The domain of ds-reaper and its pure planner.
//!
//! A *candidate* is a `t_ds_task_instance` row in a live state (`flag = 1`). A
//! *zombie* is a candidate whose holder is gone by one of the rules of SPEC §3.
//! [`plan`] reconciles the registry view with the candidates and decides, by
//! policy and within the safety rules of SPEC §4, what to do with each zombie.
//! Nothing here performs I/O: the ZooKeeper and SQL adapters feed it and
//! execute its decisions, so every rule is testable with plain values.
//!
//! # Layout
//! - [`anomaly`]: stuck under a live owner, report only (SPEC §16).
//! - [`agent`]: what the worker-host agent publishes and how the daemon reads it.
//! - [`order`]: kill orders for ghost processes and the agent's answers.
//! - [`ghost`]: processes that should not be running (SPEC §15): detection and kill decisions.
//! - [`line`]: DolphinScheduler lines, their state codes, tables and layouts.
//! - [`host`]: host normalisation and matching.
//! - [`ids`]: sets of ids as sorted slices.
//! - [`view`]: the registry view (live workers/masters, losses, validity).
//! - [`candidate`]: a live-state task row as read from the database.
//! - [`reason`]: why a candidate is a zombie, with evidence.
//! - [`policy`]: actions, workflow follow-ups, rules.
//! - [`brake`], [`rate`]: the brake and the token bucket.
//! - [`plan`]: the planner itself.
//! - [`ports`]: the traits the engine's adapters implement (store, registry, leadership, clock).
//! - [`workflow`]: workflow instances that cannot progress (SPEC §13).
//! - [`registry`]: what every registry adapter shares: heartbeats, layout, the membership machine.

pub mod agent;
pub mod anomaly;
pub mod brake;
pub mod budget;
pub mod candidate;
pub mod ghost;
pub mod host;
pub mod ids;
pub mod line;
pub mod order;
pub mod plan;
pub mod policy;
pub mod ports;
pub mod publish;
pub mod rate;
pub mod reason;
pub mod redact;
pub mod registry;
pub mod remote;
pub mod remote_app;
pub mod verdict;
pub mod view;
pub mod workflow;
pub mod zone;

/// An instant on the daemon's clock or converted from DS's own times, always UTC.
pub type Instant = chrono::DateTime<chrono::Utc>;

pub use brake::{BrakeConfig, BrakeReason, BrakeState};
pub use budget::Budget;
pub use candidate::Candidate;
pub use ids::IdSet;
pub use line::{DsLine, HeartbeatFormat, RegistryLayout};
pub use plan::{plan, plan_within, Blocked, Disposition, Plan, SafetyState, Zombie};
pub use policy::{Action, FollowUp, OwnerMaster, Policy, Rule, UnseenAbsence};
pub use rate::TokenBucket;
pub use reason::{Evidence, Reason};
pub use redact::redact_url;
pub use view::{NodeInfo, NodeKind, RegistryView, ViewState};
pub use zone::Zone;

/// Converts a std duration into a chrono one, saturating instead of failing,
/// so that absurd configured values cannot panic the planner.
pub fn delta(d: std::time::Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}
