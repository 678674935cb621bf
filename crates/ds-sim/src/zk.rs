//! Simulated DS servers in ZooKeeper.
