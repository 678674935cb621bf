//! A simulated DolphinScheduler cluster: real ZooKeeper sessions that register
//! workers and masters with the exact paths and heartbeat data of each DS line
//! ([`zk`]), and real DS schemas with workflows and tasks in a database ([`db`]).
//! Tests, the demo and the benchmarks all use this one implementation.

pub mod db;
pub mod zk;
pub mod zkserver;
