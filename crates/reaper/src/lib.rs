//! The `ds-reaper` daemon: wires the pure planner ([`reaper_core`]), the
//! ZooKeeper adapter ([`reaper_zk`]) and the SQL adapter ([`reaper_sql`]) into
//! the product of SPEC §6–§10.
//!
//! # Layout
//! - [`cli`]: commands and exit codes; [`config`]: the validated settings.
//! - [`app`]: building the engine on the adapters, `run`, shutdown.
//! - [`engine`]: one sweep, one reap, `check` — shared by all entry points.
//! - [`http`]: the API; [`page`]: the status page; [`views`]: the typed
//!   shapes both show; [`metrics`]; [`audit`]; [`telemetry`].
//! - `testkit`: in-memory ports for in-process engine tests (tests and the
//!   `testkit` feature only).

pub mod api;
#[cfg(feature = "daemon")]
pub mod app;
#[cfg(feature = "daemon")]
pub mod audit;
#[cfg(feature = "daemon")]
pub mod cli;
pub mod config;
#[cfg(feature = "daemon")]
pub mod engine;
#[cfg(feature = "daemon")]
pub mod http;
#[cfg(feature = "daemon")]
pub mod metrics;
#[cfg(feature = "daemon")]
pub mod page;
#[cfg(feature = "daemon")]
pub mod telemetry;
#[cfg(all(feature = "daemon", any(test, feature = "testkit")))]
#[doc(hidden)]
pub mod testkit;
#[cfg(feature = "daemon")]
pub mod views;
#[cfg(feature = "daemon")]
pub mod yarn;
