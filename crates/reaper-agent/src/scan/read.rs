//! Reading one process: its `stat`, `cwd` and `cmdline`, and what they say
//! of a task.

use super::{Proc, Scanner};
use crate::execpath::TaskRef;
use crate::proc::ProcStat;
use std::io;
use std::os::unix::ffi::OsStrExt;

/// How reading one process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read<T> {
    Ok(T),
    Gone,
    Denied,
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

impl Scanner {
    /// Reads one process. Its evidence of a task is read between two reads
    /// of `stat` that agree on the start time: a pid reused by another
    /// process in between is read again, a few times at most.
    pub(super) fn read(&mut self, pid: i32) -> Read<Proc> {
        for _ in 0..3 {
            let stat = match judge(self.source.stat(pid)) {
                Read::Ok(s) if s.ended() || s.kernel_thread() => return Read::Gone,
                Read::Ok(s) => s,
                other => return other.map_none(),
            };
            let mut denied = false;
            let cwd = match judge(self.source.cwd(pid)) {
                Read::Ok(c) => self.dir_of(&c),
                Read::Gone => return Read::Gone,
                Read::Denied => {
                    denied = true;
                    None
                }
            };
            let command = match judge(self.source.cmdline(pid)) {
                Read::Ok(args) => args.split(|b| *b == 0).find_map(|a| {
                    let t = self.paths.command_file(a)?;
                    let file = std::path::Path::new(std::ffi::OsStr::from_bytes(a));
                    if let Some(parent) = file.parent() {
                        self.dir_of(parent);
                    }
                    Some(t)
                }),
                Read::Gone => return Read::Gone,
                Read::Denied => {
                    denied = true;
                    None
                }
            };
            let p = proc_of(&stat, cwd, command, denied);
            if cwd.is_none() && command.is_none() {
                // nothing to confirm: the parent link is the stat's own
                return Read::Ok(p);
            }
            match judge(self.source.stat(pid)) {
                Read::Ok(s) if s.ended() => return Read::Gone,
                Read::Ok(s) if s.start_ticks == stat.start_ticks => return Read::Ok(p),
                Read::Ok(_) => continue,
                other => return other.map_none(),
            }
        }
        // a pid that keeps changing hands: nothing certain to say about it
        Read::Gone
    }

    /// The task of a working directory, noting its execute path.
    fn dir_of(&mut self, cwd: &std::path::Path) -> Option<TaskRef> {
        let d = self.paths.task_dir(cwd)?;
        let t = d.task;
        self.dirs.entry(t.task_id).or_insert(d);
        Some(t)
    }
}

fn proc_of(stat: &ProcStat, cwd: Option<TaskRef>, command: Option<TaskRef>, denied: bool) -> Proc {
    Proc {
        ppid: stat.ppid,
        start_ticks: stat.start_ticks,
        tty: stat.tty(),
        command,
        cwd,
        denied,
    }
}

impl<T> Read<T> {
    /// A `Gone` or `Denied` of another payload type.
    fn map_none<U>(self) -> Read<U> {
        match self {
            Read::Ok(_) | Read::Gone => Read::Gone,
            Read::Denied => Read::Denied,
        }
    }
}
