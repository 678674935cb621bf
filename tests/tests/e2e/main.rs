//! The end-to-end suite: the `ds-reaper` binary (and its agent) against real
//! ZooKeeper, etcd, MariaDB and PostgreSQL, one module per subject. One test
//! binary, so that its tests — mostly waiting on processes and services —
//! run concurrently (`--test-threads`); the harness is `reaper_e2e` (lib.rs).

mod agent;
mod anomalies;
mod api;
mod bench_agent;
mod bench_ghosts;
mod chaos;
mod cli;
mod common_chaos;
mod daemon;
mod etcd;
mod followups;
mod ghost_kills;
mod ghosts;
mod jdbc;
mod judging;
mod kill_evidence;
mod leader;
mod lineage;
mod lines;
mod page;
mod policy;
mod prometheus;
mod safety;
mod secrets;
mod workflows;
mod yarn;
