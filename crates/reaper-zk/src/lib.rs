//! reaper-zk
