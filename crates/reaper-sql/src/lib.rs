//! reaper-sql
