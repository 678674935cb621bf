//! A simulated DolphinScheduler cluster: real ZooKeeper sessions that register
//! workers and masters with the exact paths and heartbeat data of each DS line
//! ([`zk`]), and DS schemas with workflows and tasks in a database ([`db`]):
//! the real schema files of `../shared/ds-schema`, or ds-sim's own
//! description of the tables it and ds-reaper use ([`schema`]).
//! The `ds-reaper` binary runs as a process of the simulation ([`reaper`]).
//! Tests, the demo and the benchmarks all use this one implementation.

pub mod db;
pub mod etcd;
pub mod jdbc;
pub mod mariadbserver;
pub mod procs;
pub mod proxy;
pub mod reaper;
pub mod schema;
pub mod soak;
pub mod zk;
pub mod zkserver;
