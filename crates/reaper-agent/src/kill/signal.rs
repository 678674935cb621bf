//! The signals of a kill order: each process held by a pidfd (or, on a
//! kernel without them, by pid and start time) so that no signal reaches a
//! process that took a freed pid; a root-owned `sudo` is never signalled.

use super::alive;
use crate::proc::ProcFs;
use rustix::io::Errno;
use rustix::process::{pidfd_open, pidfd_send_signal, PidfdFlags, Signal};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// One process of the tree, held for its signals.
#[derive(Debug)]
pub(super) struct Target {
    pub pid: i32,
    pub ticks: u64,
    /// None: not signalled (a root-owned `sudo`), only waited for.
    pub handle: Option<Handle>,
}

#[derive(Debug)]
pub(super) enum Handle {
    /// The process itself, whatever becomes of its pid.
    Fd(OwnedFd),
    /// A kernel without pidfds (before 5.3): the pid, checked against the
    /// start time right before each signal.
    Pid,
}

/// A process owned by root whose command is `sudo`: DS's `sudo -u <tenant>
/// -i <command file>`, which the agent does not signal (its child's end
/// ends it). Unreadable: not sudo, so it is signalled as any other.
pub(super) fn root_sudo(root: &Path, pid: i32) -> bool {
    let dir = root.join(pid.to_string());
    let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
    if comm.trim_end() != "sudo" {
        return false;
    }
    // sudo is set-uid root: its effective uid is root whatever the caller's
    std::fs::read_to_string(dir.join("status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().take(2).any(|id| id == "0"))
        })
        .unwrap_or(false)
}

/// Opens a handle on `pid` and checks, after opening it, that it is the
/// process started at `ticks`; None when it is not (any more).
pub(super) fn hold(proc: &mut ProcFs, pid: i32, ticks: u64) -> io::Result<Option<Handle>> {
    let Some(raw) = rustix::process::Pid::from_raw(pid) else {
        return Ok(None);
    };
    let handle = match pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => Handle::Fd(fd),
        Err(Errno::SRCH) => return Ok(None),
        // no pidfds here (an old kernel, or a seccomp filter that forbids them)
        Err(Errno::NOSYS) | Err(Errno::PERM) => Handle::Pid,
        Err(e) => return Err(e.into()),
    };
    Ok(alive(proc, pid, ticks).then_some(handle))
}

/// Sends `sig` to one target; Ok(false) when it had gone already (or is a
/// `sudo` that is never signalled).
pub(super) fn signal(proc: &mut ProcFs, t: &Target, sig: Signal) -> io::Result<bool> {
    let r = match &t.handle {
        None => return Ok(false),
        Some(Handle::Fd(fd)) => pidfd_send_signal(fd, sig),
        Some(Handle::Pid) => {
            if !alive(proc, t.pid, t.ticks) {
                return Ok(false);
            }
            match rustix::process::Pid::from_raw(t.pid) {
                Some(p) => rustix::process::kill_process(p, sig),
                None => return Ok(false),
            }
        }
    };
    match r {
        Ok(()) => Ok(true),
        Err(Errno::SRCH) => Ok(false),
        Err(Errno::PERM) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not permitted (the agent needs CAP_KILL to signal another user's process)",
        )),
        Err(e) => Err(e.into()),
    }
}
