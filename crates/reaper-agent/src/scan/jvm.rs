//! Whether the agent sees its worker's JVM (SPEC §12): the heartbeat's
//! `processId` must be a live `java` process whose start time agrees with
//! the heartbeat's `startupTime` — a reused pid number is not the JVM.
//!
//! DS takes `startupTime` when its server class initialises (and again when
//! a worker recovers from the registry-loss `WAITING` state), which is never
//! before the JVM process started and may be long after it: a process that
//! started more than `clock_skew_tolerance` after `startupTime` is another
//! process on a reused pid; one that started before it agrees.

use super::{Proc, Scanner};
use std::collections::HashMap;
use std::ffi::OsStr;

/// What the registry says of the worker's JVM.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WorkerJvm {
    /// No heartbeat of the worker has been seen: blind.
    #[default]
    Unknown,
    /// The heartbeat's `processId` and `startupTime` (epoch ms), where it
    /// has one.
    Registered { pid: i64, startup_ms: Option<i64> },
    /// The worker's node is absent (for no longer than
    /// `reconcile.agent_stale_after`): the last JVM seen is checked.
    Absent,
    /// Blind for this reason (the node absent too long, a new choice of
    /// worker under way).
    Blind(String),
}

/// Why a scan does not see the worker's JVM: the scan proves nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JvmUnseen {
    #[error("the process table is unreadable")]
    TableUnreadable,
    #[error(
        "the worker's heartbeat has not been seen: the agent cannot check \
         that it sees the worker's JVM"
    )]
    NoHeartbeat,
    /// [`WorkerJvm::Blind`]'s reason.
    #[error("{0}")]
    Blind(String),
    #[error("the worker's node is absent and the agent has not seen its JVM")]
    AbsentNeverSeen,
    #[error(
        "the worker's JVM (processId {pid} of its heartbeat) is not a live process in the \
         agent's view (a sidecar without shareProcessNamespace, or a container without the \
         host's PID namespace?)"
    )]
    NotLive { pid: i64 },
    #[error(
        "the worker's JVM (processId {pid} of its heartbeat) is not a java process in the \
         agent's view: the pid belongs to another process (a stale identity, or another \
         PID namespace)"
    )]
    NotJava { pid: i64 },
    #[error(
        "the java process {pid} started at {started} ms, after the heartbeat's \
         startupTime {startup} ms (+ clock_skew_tolerance): a reused pid, not the \
         worker's JVM"
    )]
    StartedAfter {
        pid: i64,
        started: i64,
        startup: i64,
    },
    #[error(
        "the java process {pid} is not the one first seen with that pid (it \
         started at another time): a reused pid, not the worker's JVM"
    )]
    NotFirstSeen { pid: i64 },
    #[error("the worker's node is absent and the JVM last seen (pid {pid}) has ended")]
    Ended { pid: i64 },
}

/// How a candidate's start time is checked.
enum Check {
    /// Against the heartbeat's `startupTime`, or (None) against the start
    /// time first seen for the pid.
    Startup(Option<i64>),
    /// The very process (pid and start time) last seen as the JVM.
    Same(u64),
}

impl Scanner {
    /// The worker's JVM as (pid, start ticks), or why it is not in sight.
    pub(super) fn verify_jvm(
        &mut self,
        procs: &HashMap<i32, Proc>,
        ms: impl Fn(u64) -> i64,
    ) -> Result<(i32, u64), JvmUnseen> {
        let (pid, check) = match &self.worker {
            WorkerJvm::Unknown => return Err(JvmUnseen::NoHeartbeat),
            WorkerJvm::Blind(why) => return Err(JvmUnseen::Blind(why.clone())),
            WorkerJvm::Registered { pid, startup_ms } => (*pid, Check::Startup(*startup_ms)),
            WorkerJvm::Absent => match self.jvm {
                Some((p, t)) => (i64::from(p), Check::Same(t)),
                None => return Err(JvmUnseen::AbsentNeverSeen),
            },
        };
        let Some((pid32, p)) = i32::try_from(pid)
            .ok()
            .and_then(|p32| procs.get(&p32).map(|p| (p32, *p)))
        else {
            return Err(JvmUnseen::NotLive { pid });
        };
        if !self.is_java(pid32, &p) {
            return Err(JvmUnseen::NotJava { pid });
        }
        let started = ms(p.start_ticks);
        match check {
            Check::Startup(Some(startup)) => {
                let skew = i64::try_from(self.clock_skew.as_millis()).unwrap_or(i64::MAX);
                if started > startup.saturating_add(skew) {
                    return Err(JvmUnseen::StartedAfter {
                        pid,
                        started,
                        startup,
                    });
                }
            }
            Check::Startup(None) => match self.first_seen {
                Some((fp, ft)) if fp == pid32 && ft != p.start_ticks => {
                    return Err(JvmUnseen::NotFirstSeen { pid })
                }
                Some((fp, _)) if fp == pid32 => {}
                _ => self.first_seen = Some((pid32, p.start_ticks)),
            },
            Check::Same(ticks) if ticks != p.start_ticks => return Err(JvmUnseen::Ended { pid }),
            Check::Same(_) => {}
        }
        self.jvm = Some((pid32, p.start_ticks));
        Ok((pid32, p.start_ticks))
    }

    /// A JVM: its `comm` or its executable's file name is `java`.
    pub(super) fn is_java(&mut self, pid: i32, p: &Proc) -> bool {
        if p.java {
            return true;
        }
        if let Some(known) = self.exe_java.get(&(pid, p.start_ticks)) {
            return *known;
        }
        let java = self
            .reader
            .exe(pid)
            .is_some_and(|e| e.file_name() == Some(OsStr::new("java")));
        self.exe_java.insert((pid, p.start_ticks), java);
        java
    }
}
