//! Reading one process: its `stat`, `cwd` and `cmdline`, and what they say
//! of a task. Runs on a reader thread ([`super::bounded`]).

use super::Proc;
use crate::execpath::{ExecPaths, TaskDir, TaskRef};
use crate::proc::{ProcSource, ProcStat};
use std::io;
use std::os::unix::ffi::OsStrExt;

/// How reading one process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read<T> {
    Ok(T),
    Gone,
    Denied,
    /// Its reads did not finish within `agent.scan_timeout`.
    Stuck,
}

fn judge<T>(r: io::Result<T>) -> Read<T> {
    match r {
        Ok(v) => Read::Ok(v),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Read::Gone,
        // ESRCH: the process exited while its entry was being read
        Err(e) if e.raw_os_error() == Some(3) => Read::Gone,
        // EACCES, EPERM, and anything unexpected: the scan cannot tell
        Err(_) => Read::Denied,
    }
}

/// Reads one process. Its evidence of a task is read between two reads of
/// `stat` that agree on the start time: a pid reused by another process in
/// between is read again, a few times at most. The execute paths it shows
/// are added to `dirs`.
pub(super) fn read_process(
    source: &mut dyn ProcSource,
    paths: &ExecPaths,
    pid: i32,
    dirs: &mut Vec<TaskDir>,
) -> Read<Proc> {
    let dir_of = |cwd: &std::path::Path, dirs: &mut Vec<TaskDir>| {
        let d = paths.task_dir(cwd)?;
        let t = d.task;
        dirs.push(d);
        Some(t)
    };
    for _ in 0..3 {
        dirs.clear();
        let stat = match judge(source.stat(pid)) {
            Read::Ok(s) if s.ended() || s.kernel_thread() => return Read::Gone,
            Read::Ok(s) => s,
            other => return other.map_none(),
        };
        let mut denied = false;
        let cwd = match judge(source.cwd(pid)) {
            Read::Ok(c) => dir_of(&c, dirs),
            Read::Denied => {
                denied = true;
                None
            }
            _ => return Read::Gone,
        };
        let command = match judge(source.cmdline(pid)) {
            Read::Ok(args) => args.split(|b| *b == 0).find_map(|a| {
                let t: TaskRef = paths.command_file(a)?;
                let file = std::path::Path::new(std::ffi::OsStr::from_bytes(a));
                if let Some(parent) = file.parent() {
                    dir_of(parent, dirs);
                }
                Some(t)
            }),
            Read::Denied => {
                denied = true;
                None
            }
            _ => return Read::Gone,
        };
        let p = proc_of(&stat, cwd, command, denied);
        if cwd.is_none() && command.is_none() {
            // nothing to confirm: the parent link is the stat's own
            return Read::Ok(p);
        }
        match judge(source.stat(pid)) {
            Read::Ok(s) if s.ended() => return Read::Gone,
            Read::Ok(s) if s.start_ticks == stat.start_ticks => return Read::Ok(p),
            Read::Ok(_) => continue,
            other => return other.map_none(),
        }
    }
    // a pid that keeps changing hands: nothing certain to say about it
    Read::Gone
}

fn proc_of(stat: &ProcStat, cwd: Option<TaskRef>, command: Option<TaskRef>, denied: bool) -> Proc {
    Proc {
        ppid: stat.ppid,
        start_ticks: stat.start_ticks,
        tty: stat.tty(),
        java: stat.java,
        command,
        cwd,
        denied,
    }
}

impl<T> Read<T> {
    /// A `Gone`, `Denied` or `Stuck` of another payload type.
    fn map_none<U>(self) -> Read<U> {
        match self {
            Read::Ok(_) | Read::Gone => Read::Gone,
            Read::Denied => Read::Denied,
            Read::Stuck => Read::Stuck,
        }
    }
}
