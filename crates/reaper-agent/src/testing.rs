//! Test support, public so that integration tests, the benchmark and other
//! crates' tests can use it: a fake proc tree written into a directory, and a
//! [`ProcSource`] wrapper that denies chosen processes as the kernel does an
//! agent without `CAP_SYS_PTRACE` (tests run as root, whom permissions do not
//! stop).

use crate::proc::{ProcSource, ProcStat, CAP_SYS_PTRACE};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A proc tree in a directory: `<root>/stat` with `btime`, and per process
/// `<root>/<pid>/stat`, `<root>/<pid>/cmdline` and a `<root>/<pid>/cwd`
/// symbolic link.
#[derive(Debug, Clone)]
pub struct FakeProc {
    root: PathBuf,
}

/// The tick rate fake trees use.
pub const FAKE_HZ: u64 = 100;

impl FakeProc {
    /// Creates the tree at `root` (which must exist) with boot time `btime`.
    pub fn create(root: &Path, btime: i64) -> io::Result<FakeProc> {
        std::fs::write(
            root.join("stat"),
            format!("cpu  1 2 3 4\nintr 0\nctxt 1\nbtime {btime}\nprocesses 9\n"),
        )?;
        Ok(FakeProc {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Adds (or replaces) process `pid` in state `state` (`S`, `R`, `Z`, ...)
    /// started `start_ticks` clock ticks after boot, working in `cwd`, a
    /// child of pid 1 without a terminal or a command line.
    pub fn add(&self, pid: i32, cwd: &Path, state: char, start_ticks: u64) -> io::Result<()> {
        self.add_process(&FakeProcess {
            pid,
            ppid: 1,
            cwd,
            state,
            start_ticks,
            tty_nr: 0,
            args: &[],
        })
    }

    /// Adds (or replaces) a process with every detail.
    pub fn add_process(&self, p: &FakeProcess<'_>) -> io::Result<()> {
        let FakeProcess {
            pid,
            ppid,
            cwd,
            state,
            start_ticks,
            tty_nr,
            args,
        } = *p;
        let dir = self.root.join(pid.to_string());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("stat"),
            format!(
                "{pid} (sh -c (x)) {state} {ppid} {pid} {pid} {tty_nr} -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 {start_ticks} 4096 100 18446744073709551615 1 1 0 0 0 0 0\n"
            ),
        )?;
        let mut cmdline = Vec::new();
        for a in args {
            cmdline.extend_from_slice(a.as_bytes());
            cmdline.push(0);
        }
        std::fs::write(dir.join("cmdline"), cmdline)?;
        let link = dir.join("cwd");
        match std::fs::remove_file(&link) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::os::unix::fs::symlink(cwd, link)
    }

    /// A process whose main thread exited while thread `tid` still runs in
    /// `cwd`: the leader is a zombie without a cwd of its own.
    pub fn add_zombie_leader(
        &self,
        pid: i32,
        tid: i32,
        cwd: &Path,
        start_ticks: u64,
    ) -> io::Result<()> {
        self.add(pid, cwd, 'Z', start_ticks)?;
        let dir = self.root.join(pid.to_string());
        std::fs::remove_file(dir.join("cwd"))?;
        let stat = std::fs::read_to_string(dir.join("stat"))?;
        // field 20 (threads), after "… 20 0 " (priority, nice)
        std::fs::write(
            dir.join("stat"),
            stat.replacen(" 20 0 1 0 ", " 20 0 2 0 ", 1),
        )?;
        let task = dir.join("task").join(tid.to_string());
        std::fs::create_dir_all(&task)?;
        std::os::unix::fs::symlink(cwd, task.join("cwd"))
    }

    /// A process that ended and was reaped: its entry is gone.
    pub fn remove(&self, pid: i32) -> io::Result<()> {
        std::fs::remove_dir_all(self.root.join(pid.to_string()))
    }

    /// The agent's own status (its capabilities) at `<root>/self/status`.
    pub fn set_capabilities(&self, cap_eff: u64) -> io::Result<()> {
        let dir = self.root.join("self");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("status"),
            format!("Name:\tagent\nCapEff:\t{cap_eff:016x}\n"),
        )
    }

    /// A [`crate::proc::ProcFs`] reading this tree.
    pub fn source(&self) -> crate::proc::ProcFs {
        crate::proc::ProcFs::new(&self.root).with_clock_ticks(FAKE_HZ)
    }
}

/// One process of a fake tree, for [`FakeProc::add_process`].
#[derive(Debug, Clone, Copy)]
pub struct FakeProcess<'a> {
    pub pid: i32,
    pub ppid: i32,
    pub cwd: &'a Path,
    /// `S`, `R`, `Z`, ...
    pub state: char,
    /// Clock ticks after boot.
    pub start_ticks: u64,
    /// 0: no controlling terminal.
    pub tty_nr: i64,
    pub args: &'a [&'a str],
}

impl FakeProc {
    /// Renames process `pid` (its `comm`, field 2 of `stat`): `java` makes it
    /// a JVM in the agent's eyes.
    pub fn set_comm(&self, pid: i32, comm: &str) -> io::Result<()> {
        let path = self.root.join(pid.to_string()).join("stat");
        let stat = std::fs::read_to_string(&path)?;
        let (open, close) = match (stat.find('('), stat.rfind(')')) {
            (Some(o), Some(c)) if o < c => (o, c),
            _ => return Err(io::ErrorKind::InvalidData.into()),
        };
        std::fs::write(
            path,
            format!("{}({comm}){}", &stat[..open], &stat[close + 1..]),
        )
    }

    /// Sets the executable (`<pid>/exe`) of process `pid`.
    pub fn set_exe(&self, pid: i32, exe: &Path) -> io::Result<()> {
        let link = self.root.join(pid.to_string()).join("exe");
        match std::fs::remove_file(&link) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::os::unix::fs::symlink(exe, link)
    }
}

/// Which error a denied process answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// EACCES (13).
    Eacces,
    /// EPERM (1).
    Eperm,
}

impl Denial {
    fn error(self) -> io::Error {
        io::Error::from_raw_os_error(match self {
            Denial::Eacces => 13,
            Denial::Eperm => 1,
        })
    }
}

/// Which pids are denied; shared, so a test can change it while the agent runs.
pub type DenySet = Arc<Mutex<BTreeMap<i32, Denial>>>;

/// A source that answers EACCES/EPERM for the pids in its [`DenySet`] (their
/// `cwd` and `stat`) and reports capabilities without `CAP_SYS_PTRACE`,
/// as the kernel would to an agent lacking it.
pub struct Denying<S> {
    inner: S,
    deny: DenySet,
}

impl<S: ProcSource> Denying<S> {
    pub fn new(inner: S) -> (Denying<S>, DenySet) {
        let deny = DenySet::default();
        (
            Denying {
                inner,
                deny: deny.clone(),
            },
            deny,
        )
    }

    fn denied(&self, pid: i32) -> Option<io::Error> {
        let set = self.deny.lock().unwrap_or_else(|e| e.into_inner());
        set.get(&pid).map(|d| d.error())
    }
}

impl<S: ProcSource> ProcSource for Denying<S> {
    fn pids(&mut self) -> io::Result<Vec<i32>> {
        self.inner.pids()
    }

    fn cwd(&mut self, pid: i32) -> io::Result<PathBuf> {
        match self.denied(pid) {
            Some(e) => Err(e),
            None => self.inner.cwd(pid),
        }
    }

    fn stat(&mut self, pid: i32) -> io::Result<ProcStat> {
        match self.denied(pid) {
            Some(e) => Err(e),
            None => self.inner.stat(pid),
        }
    }

    fn cmdline(&mut self, pid: i32) -> io::Result<Vec<u8>> {
        match self.denied(pid) {
            Some(e) => Err(e),
            None => self.inner.cmdline(pid),
        }
    }

    fn exe(&mut self, pid: i32) -> io::Result<PathBuf> {
        match self.denied(pid) {
            Some(e) => Err(e),
            None => self.inner.exe(pid),
        }
    }

    fn fork(&self) -> Option<Box<dyn ProcSource>> {
        Some(Box::new(Denying {
            inner: self.inner.fork()?,
            deny: self.deny.clone(),
        }))
    }

    fn self_pid(&mut self) -> Option<i32> {
        self.inner.self_pid()
    }

    fn boot_time(&mut self) -> io::Result<i64> {
        self.inner.boot_time()
    }

    fn clock_ticks(&self) -> u64 {
        self.inner.clock_ticks()
    }

    fn capabilities(&mut self) -> Option<u64> {
        let any = !self
            .deny
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        let caps = self.inner.capabilities();
        if any {
            caps.map(|c| c & !(1u64 << CAP_SYS_PTRACE))
        } else {
            caps
        }
    }

    fn blind(&mut self) -> Option<String> {
        self.inner.blind()
    }
}
