//! Reading the process table: the [`ProcSource`] the scanner asks, and
//! [`ProcFs`], which answers from a proc filesystem at any root (`/proc`, or
//! a fake tree in tests).
//!
//! Only files the kernel lets any process read are used, except a process's
//! `cwd` link: reading another user's needs `CAP_SYS_PTRACE` (the kernel's
//! `ptrace_may_access` in read mode); SPEC §11 grants the agent that and
//! `CAP_DAC_READ_SEARCH`, nothing more.

use rustix::fs::{Mode, OFlags, RawDir};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// How much of a command line is read.
const CMDLINE_MAX: usize = 64 * 1024;

/// Capability numbers (linux/capability.h).
pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_SYS_PTRACE: u32 = 19;

/// What the scanner reads of one process from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: u8,
    /// Field 4: the parent's pid.
    pub ppid: i32,
    /// Field 7: the controlling terminal's device number; 0 for none.
    pub tty_nr: i64,
    /// Field 9: the kernel's `PF_*` flags.
    pub flags: u64,
    /// Field 20: the number of threads.
    pub threads: u64,
    /// Field 22: start time in clock ticks after boot.
    pub start_ticks: u64,
    /// Field 2, the command name (`comm`), is `java`: a JVM (SPEC §12).
    pub java: bool,
}

/// `PF_KTHREAD` (linux/sched.h): a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

impl ProcStat {
    /// A zombie or dead process: it has ended, only its entry remains. (A
    /// zombie main thread with other threads still running is a live
    /// process.)
    pub fn ended(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x') && self.threads <= 1
    }

    /// Whether it has a controlling terminal (an operator's shell has one).
    pub fn tty(&self) -> bool {
        self.tty_nr != 0
    }

    /// A kernel thread: never a task process.
    pub fn kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may itself hold spaces and parentheses, so fields are counted from
/// the last `)`.
pub fn parse_stat(data: &[u8]) -> Option<ProcStat> {
    let close = data.iter().rposition(|b| *b == b')')?;
    let open = data.iter().position(|b| *b == b'(')?;
    let java = open < close && &data[open + 1..close] == b"java";
    let mut fields = data[close + 1..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let num = |f: &[u8]| std::str::from_utf8(f).ok()?.parse::<i64>().ok();
    let state = *fields.next()?.first()?;
    // after the state (field 3) come fields 4 (ppid), 7 (tty_nr), 9 (flags), 22 (starttime)
    let ppid = i32::try_from(num(fields.next()?)?).ok()?;
    let tty_nr = num(fields.nth(7 - 5)?)?;
    let flags = u64::try_from(num(fields.nth(9 - 8)?)?).ok()?;
    let threads = u64::try_from(num(fields.nth(20 - 10)?)?).ok()?;
    let start_ticks = u64::try_from(num(fields.nth(22 - 21)?)?).ok()?;
    Some(ProcStat {
        state,
        ppid,
        tty_nr,
        flags,
        threads,
        start_ticks,
        java,
    })
}

/// Where the scanner reads processes from. Errors carry the OS error kind the
/// scanner judges by: `NotFound` (or ESRCH) is a process gone, `PermissionDenied`
/// (EACCES, EPERM) a process it may not read.
pub trait ProcSource: Send {
    /// The ids of the processes (not threads) there are now, in any order.
    fn pids(&mut self) -> io::Result<Vec<i32>>;
    /// The target of `/proc/<pid>/cwd`.
    fn cwd(&mut self, pid: i32) -> io::Result<PathBuf>;
    fn stat(&mut self, pid: i32) -> io::Result<ProcStat>;
    /// `/proc/<pid>/cmdline`: the arguments, each ended by a NUL (a
    /// kernel thread's and a zombie's are empty). Sources that know no
    /// command lines answer empty ones.
    fn cmdline(&mut self, _pid: i32) -> io::Result<Vec<u8>> {
        Ok(Vec::new())
    }
    /// The target of `/proc/<pid>/exe`: the executable's path (a JVM's
    /// file name is `java` even where its `comm` is not). Sources that know
    /// no executables answer `Unsupported`.
    fn exe(&mut self, _pid: i32) -> io::Result<PathBuf> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Another source on the same process table, for a reader thread of its
    /// own: a read that never returns then strands only that copy (SPEC §12:
    /// every read of the scan is bounded). None: this source's reads run on
    /// the scanner's thread, unbounded.
    fn fork(&self) -> Option<Box<dyn ProcSource>> {
        None
    }
    /// The agent's own pid as this proc filesystem shows it (`self`), when known.
    fn self_pid(&mut self) -> Option<i32>;
    /// `btime` of `/proc/stat`: the boot time, in seconds since the epoch.
    fn boot_time(&mut self) -> io::Result<i64>;
    /// Clock ticks per second, the unit of [`ProcStat::start_ticks`].
    fn clock_ticks(&self) -> u64;
    /// The agent's own effective capability set (`CapEff`), when known.
    fn capabilities(&mut self) -> Option<u64>;
    /// Why some processes may be invisible rather than unreadable: the proc
    /// filesystem is mounted `hidepid=invisible` (or `ptraceable`) and the
    /// agent lacks `CAP_SYS_PTRACE`. Such a scan proves no absence.
    fn blind(&mut self) -> Option<String>;
}

/// A boxed source is a source: [`ProcSource::fork`]'s copies are boxed.
impl ProcSource for Box<dyn ProcSource> {
    fn pids(&mut self) -> io::Result<Vec<i32>> {
        (**self).pids()
    }
    fn cwd(&mut self, pid: i32) -> io::Result<PathBuf> {
        (**self).cwd(pid)
    }
    fn stat(&mut self, pid: i32) -> io::Result<ProcStat> {
        (**self).stat(pid)
    }
    fn cmdline(&mut self, pid: i32) -> io::Result<Vec<u8>> {
        (**self).cmdline(pid)
    }
    fn exe(&mut self, pid: i32) -> io::Result<PathBuf> {
        (**self).exe(pid)
    }
    fn fork(&self) -> Option<Box<dyn ProcSource>> {
        (**self).fork()
    }
    fn self_pid(&mut self) -> Option<i32> {
        (**self).self_pid()
    }
    fn boot_time(&mut self) -> io::Result<i64> {
        (**self).boot_time()
    }
    fn clock_ticks(&self) -> u64 {
        (**self).clock_ticks()
    }
    fn capabilities(&mut self) -> Option<u64> {
        (**self).capabilities()
    }
    fn blind(&mut self) -> Option<String> {
        (**self).blind()
    }
}

/// The proc filesystem mounted at `root`. Paths are resolved relative to
/// a descriptor of the root (`readlinkat`, `openat`) into buffers kept from
/// one call to the next, so a scan costs the kernel's work and little more.
pub struct ProcFs {
    root: PathBuf,
    dir: Option<OwnedFd>,
    ticks: u64,
    /// `<pid>/<file>`, rebuilt for every call.
    path: String,
    link: Vec<u8>,
    listing: Vec<u8>,
}

impl std::fmt::Debug for ProcFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcFs")
            .field("root", &self.root)
            .field("ticks", &self.ticks)
            .finish()
    }
}

impl ProcFs {
    pub fn new(root: impl Into<PathBuf>) -> ProcFs {
        ProcFs {
            root: root.into(),
            dir: None,
            ticks: clock_ticks_per_second(),
            path: String::with_capacity(32),
            link: vec![0; 4096],
            listing: Vec::with_capacity(64 * 1024),
        }
    }

    /// The same tree with another tick rate (fake trees in tests).
    pub fn with_clock_ticks(mut self, ticks: u64) -> ProcFs {
        self.ticks = ticks.max(1);
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Opens the root once; an error is returned (and retried next call).
    fn open_root(&mut self) -> io::Result<()> {
        if self.dir.is_none() {
            let fd = rustix::fs::open(
                &self.root,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            self.dir = Some(fd);
        }
        Ok(())
    }

    /// The target of the link at `self.path`.
    fn read_link(&mut self) -> io::Result<PathBuf> {
        let Some(root) = self.dir.as_ref() else {
            return Err(io::ErrorKind::NotFound.into());
        };
        let n = rustix::fs::readlinkat_raw(root, self.path.as_str(), &mut self.link[..])?;
        if n < self.link.len() {
            return Ok(PathBuf::from(OsStr::from_bytes(&self.link[..n])));
        }
        // longer than the buffer: read it whole
        let full = rustix::fs::readlinkat(root, self.path.as_str(), Vec::new())?;
        Ok(PathBuf::from(OsString::from_vec(full.into_bytes())))
    }

    /// The cwd of another thread of `pid` (`<pid>/task/<tid>/cwd`), if any.
    fn thread_cwd(&mut self, pid: i32) -> Option<PathBuf> {
        let tids: Vec<i32> = std::fs::read_dir(self.root.join(pid.to_string()).join("task"))
            .ok()?
            .filter_map(|e| parse_pid(e.ok()?.file_name().as_bytes()))
            .filter(|t| *t != pid)
            .collect();
        tids.into_iter().find_map(|tid| {
            use std::fmt::Write;
            self.path.clear();
            let _ = write!(self.path, "{pid}/task/{tid}/cwd");
            self.read_link().ok()
        })
    }

    fn set_path(&mut self, pid: i32, file: &str) {
        use std::fmt::Write;
        self.path.clear();
        let _ = write!(self.path, "{pid}/{file}");
    }
}

/// `sysconf(_SC_CLK_TCK)`, read from the auxiliary vector by rustix (no
/// unsafe code here); Linux reports 100 on every common architecture.
pub fn clock_ticks_per_second() -> u64 {
    match rustix::param::clock_ticks_per_second() {
        0 => 100,
        t => t,
    }
}

impl ProcSource for ProcFs {
    fn pids(&mut self) -> io::Result<Vec<i32>> {
        self.open_root()?;
        let Some(root) = self.dir.as_ref() else {
            return Err(io::ErrorKind::NotFound.into());
        };
        // a descriptor of its own: a listing reads from the descriptor's offset
        let fd = rustix::fs::openat(
            root,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut pids = Vec::with_capacity(1024);
        let mut entries = RawDir::new(&fd, self.listing.spare_capacity_mut());
        while let Some(entry) = entries.next() {
            let entry = entry?;
            if let Some(pid) = parse_pid(entry.file_name().to_bytes()) {
                pids.push(pid);
            }
        }
        Ok(pids)
    }

    fn cwd(&mut self, pid: i32) -> io::Result<PathBuf> {
        self.open_root()?;
        self.set_path(pid, "cwd");
        match self.read_link() {
            // A process whose main thread exited while others run has a
            // zombie leader without a cwd: read a live thread's instead.
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.thread_cwd(pid).ok_or(e),
            r => r,
        }
    }

    fn stat(&mut self, pid: i32) -> io::Result<ProcStat> {
        self.open_root()?;
        self.set_path(pid, "stat");
        let Some(root) = self.dir.as_ref() else {
            return Err(io::ErrorKind::NotFound.into());
        };
        let fd = rustix::fs::openat(
            root,
            self.path.as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // One line of a few hundred bytes, produced whole by the first read:
        // a read that ends the line ends the file, and the read that would
        // confirm it (a syscall per process, a few milliseconds a scan of
        // thousands under gVisor) is skipped.
        let mut buf = [0u8; 2048];
        let mut len = 0;
        while len < buf.len() {
            let n = rustix::io::read(&fd, &mut buf[len..])?;
            if n == 0 {
                break;
            }
            len += n;
            if buf[len - 1] == b'\n' {
                break;
            }
        }
        parse_stat(&buf[..len]).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unparsable /proc/{pid}/stat"),
            )
        })
    }

    fn cmdline(&mut self, pid: i32) -> io::Result<Vec<u8>> {
        self.open_root()?;
        self.set_path(pid, "cmdline");
        let Some(root) = self.dir.as_ref() else {
            return Err(io::ErrorKind::NotFound.into());
        };
        let fd = rustix::fs::openat(
            root,
            self.path.as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // DS's command file is among the first arguments; a JVM's classpath
        // may run to megabytes, which no command file lies beyond
        let mut out = Vec::with_capacity(256);
        let mut buf = [0u8; 4096];
        while out.len() < CMDLINE_MAX {
            let n = rustix::io::read(&fd, &mut buf)?;
            out.extend_from_slice(&buf[..n]);
            // the kernel fills a read as far as the arguments go: a short
            // one is their end, without a read of nothing to confirm it
            if n < buf.len() {
                break;
            }
        }
        out.truncate(CMDLINE_MAX);
        Ok(out)
    }

    fn exe(&mut self, pid: i32) -> io::Result<PathBuf> {
        self.open_root()?;
        self.set_path(pid, "exe");
        self.read_link()
    }

    fn fork(&self) -> Option<Box<dyn ProcSource>> {
        Some(Box::new(
            ProcFs::new(&self.root).with_clock_ticks(self.ticks),
        ))
    }

    fn self_pid(&mut self) -> Option<i32> {
        std::fs::read_link(self.root.join("self"))
            .ok()?
            .to_str()?
            .parse()
            .ok()
    }

    fn boot_time(&mut self) -> io::Result<i64> {
        let text = std::fs::read_to_string(self.root.join("stat"))?;
        text.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no btime in /proc/stat"))
    }

    fn clock_ticks(&self) -> u64 {
        self.ticks
    }

    fn capabilities(&mut self) -> Option<u64> {
        let text = std::fs::read_to_string(self.root.join("self/status")).ok()?;
        parse_cap_eff(&text)
    }

    fn blind(&mut self) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join("self/mountinfo")).ok()?;
        let root = std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        let mode = hidepid(&text, &root)?;
        let caps = self.capabilities();
        if caps.is_some_and(|c| has(c, CAP_SYS_PTRACE)) {
            return None;
        }
        Some(format!(
            "{} is mounted with hidepid={mode}: other users' processes are invisible without CAP_SYS_PTRACE",
            root.display()
        ))
    }
}

/// A process directory's name: a positive decimal pid.
fn parse_pid(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 10 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(name)
        .ok()?
        .parse()
        .ok()
        .filter(|p| *p > 0)
}

/// `CapEff` of a `/proc/<pid>/status`.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

pub fn has(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// The hiding `hidepid` mode of the proc mount at `root` in a mountinfo
/// text (`invisible`/2 or `ptraceable`/4); None when it hides nothing.
/// (`noaccess`/1 leaves the entries visible: reading them fails, which the
/// scanner counts as unreadable.)
pub fn hidepid(mountinfo: &str, root: &Path) -> Option<String> {
    let root = root.to_str()?;
    let mut found = None;
    for line in mountinfo.lines() {
        // <id> <parent> <maj:min> <root> <mount point> <options> [optional...] - <fstype> <source> <super options>
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4);
        let mut r = right.split(' ');
        let (fstype, _source, options) = (r.next(), r.next(), r.next().unwrap_or(""));
        if fstype != Some("proc") || mount_point != Some(root) {
            continue;
        }
        // the last mount on a point is the visible one
        found = options
            .split(',')
            .find_map(|o| o.strip_prefix("hidepid="))
            .filter(|m| matches!(*m, "2" | "invisible" | "4" | "ptraceable"))
            .map(str::to_string);
    }
    found
}

#[cfg(test)]
mod tests;
