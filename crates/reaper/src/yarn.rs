//! Remote YARN applications (SPEC §17), the daemon's side: the
//! ResourceManager's REST API, and the ids learned per task instance, kept in
//! `<audit dir>/remote-apps.jsonl` so that they outlive the worker host, the
//! agent and the daemon.
//!
//! The RM client asks each configured RM in turn (HA: one is active); a
//! standby answers 307 with the active's address, followed by hand so that a
//! `PUT` stays a `PUT` with its body. Simple auth only (`?user.name=`);
//! Kerberos/SPNEGO is not supported.
//!
//! Here: the RM client (`rm`), and the learned ids (`known`) with their file
//! (`file`).

mod file;
mod known;
mod rm;

pub use known::{KnownApps, Learned, FORGET_ABSENT_FOR, FORGET_LEARNED_AGO};
pub use rm::{Rm, RmError};

/// The configured ResourceManagers as the engine's port; None with `[yarn]` off.
pub fn resource_manager(
    cfg: &crate::config::yarn::Yarn,
) -> Option<std::sync::Arc<dyn reaper_core::ports::ResourceManager>> {
    Rm::new(cfg).map(|rm| std::sync::Arc::new(rm) as _)
}

#[cfg(test)]
mod tests;
