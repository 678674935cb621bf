//! What every registry adapter shares, whichever registry DS uses
//! (ZooKeeper, etcd, DS's JDBC registry; SPEC §14): all of it pure.
//!
//! - [`heartbeat`]: the data DS servers write into their node, every format.
//! - [`layout`]: what a path under the DS root stands for, and which DS lines
//!   the registry's look is consistent with ([`Detected`]).
//! - [`membership`]: the state machine that keeps the [`RegistryView`] from
//!   listings, node events and gaps, fed with the daemon's `now`.
//! - [`backoff`]: capped exponential backoff with jitter for retry loops.
//!
//! An adapter does the I/O (sessions, watches, polls), turns what it reads
//! into [`membership::Listing`]s and [`membership::NodeEvent`]s, and publishes
//! the view whenever [`membership::Changes::publish`] says so.
//!
//! [`RegistryView`]: crate::RegistryView

pub mod backoff;
pub mod heartbeat;
pub mod layout;
pub mod membership;

pub use backoff::Backoff;
pub use heartbeat::{Heartbeat, HeartbeatError};
pub use layout::{
    classify, failover_lock_paths, is_lock_node, may_concern_servers, Detected, FailoverLockDir,
    FailoverLockLayout, LayoutEvidence, LayoutMode, NodeClass, NodeKey,
};
pub use membership::{
    Changes, Gap, ListedNode, Listing, Membership, NodeEvent, Note, OutageServer, RegistryOutage,
};
