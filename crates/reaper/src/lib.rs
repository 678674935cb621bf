//! The `ds-reaper` daemon: wires the pure planner ([`reaper_core`]), the
//! ZooKeeper adapter ([`reaper_zk`]) and the SQL adapter ([`reaper_sql`]) into
//! the product of SPEC §6–§10.
//!
//! # Layout
//! - [`cli`]: commands and exit codes; [`config`]: the validated settings.
//! - [`app`]: building the adapters, the `run` loop, shutdown.
//! - [`engine`]: one sweep, one reap, `check` — shared by all entry points.
//! - [`http`]: the API and status page; [`metrics`]; [`audit`]; [`telemetry`].

pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod telemetry;
