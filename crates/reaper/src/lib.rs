//! The `ds-reaper` daemon: wires the pure planner ([`reaper_core`]), the
//! ZooKeeper adapter ([`reaper_zk`]) and the SQL adapter ([`reaper_sql`]) into
//! the product of SPEC §6–§10.
//!
//! # Layout
//! - [`cli`]: commands and exit codes; [`config`]: the validated settings.
//! - [`app`]: building the adapters, the `run` loop, shutdown.
//! - [`engine`]: one sweep, one reap, `check` — shared by all entry points.
//! - [`http`]: the API; [`page`]: the status page; [`views`]: the typed
//!   shapes both show; [`metrics`]; [`audit`]; [`telemetry`].
//! - [`testkit`]: in-memory ports for in-process engine tests.

pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod page;
pub mod telemetry;
#[doc(hidden)]
pub mod testkit;
pub mod views;
pub mod yarn;
