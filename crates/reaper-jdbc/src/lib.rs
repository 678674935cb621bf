//! DolphinScheduler's JDBC registry as a ds-reaper registry source (SPEC §14).
//!
//! DS 3.1 can keep its registry in MySQL (`t_ds_mysql_registry_data`), 3.2+
//! in its own database over JDBC (`t_ds_jdbc_registry_*`; 3.3 adds the
//! client-heartbeat table). [`JdbcRegistry`] reads it — never writes — by
//! polling every `poll_interval` with one statement, judges each row by DS's
//! own liveness rule for that version ([`flavour`]), and keeps a
//! [`RegistryView`] through reaper-core's membership machine, as the
//! ZooKeeper adapter does. [`JdbcLeader`] elects one acting replica with a
//! session-level database lock on a dedicated connection, writing nothing.
//!
//! Agents (SPEC §12) publish through ZooKeeper or etcd only: with this
//! registry the view's `agents` stays empty.
//!
//! # Layout
//! - [`settings`](JdbcSettings): `[jdbc_registry]` and what it borrows.
//! - [`flavour`]: the three table shapes and DS's liveness rule for each (pure).
//! - `source`: the typed pools, the catalog probe and the poll statement.
//! - `shared`: what the handle and the loop share.
//! - `poll`: the loop that judges rows and drives the membership machine.
//! - `registry`: the handle the daemon holds ([`JdbcRegistry`]).
//! - `leader`: the election on `GET_LOCK` / `pg_try_advisory_lock` ([`JdbcLeader`]).
//! - `port`: both behind the engine's ports.

mod error;
pub mod flavour;
mod leader;
mod poll;
mod port;
mod registry;
mod settings;
mod shared;
mod source;

pub use error::JdbcError;
pub use flavour::Flavour;
pub use leader::{JdbcLeader, LeaderOptions, LEADER_KEY, LEADER_LOCK};
pub use reaper_core::registry::Detected;
pub use reaper_core::RegistryView;
pub use registry::{JdbcRegistry, JdbcStats};
pub use settings::{redact_url, DbKind, JdbcSettings};
pub use source::{JdbcSource, RegistryRow};
