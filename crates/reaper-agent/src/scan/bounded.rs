//! Every read of a process is bounded (SPEC §12): `/proc/<pid>/cmdline`
//! behind a dead NFS or FUSE mount blocks in the kernel (the classic `ps`
//! hang) and no flag makes it return. The reads run on a reader thread with
//! a source of its own ([`ProcSource::fork`]); the scanner waits for each
//! process at most `agent.scan_timeout`, and a process whose reads do not
//! finish in time counts as unreadable. The thread stuck in it is set
//! aside (the read may return one day) and a new one takes over, at most
//! [`MAX_STUCK`] set aside at once: beyond that every further read counts
//! as unreadable, so a hang never costs more than a few threads. While a
//! process's read is stuck it is not read again.

use super::read::{read_process, Read};
use super::Proc;
use crate::execpath::{ExecPaths, TaskDir};
use crate::proc::ProcSource;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

/// Reader threads stuck in a read, at most.
pub const MAX_STUCK: usize = 4;

/// One process as read: its pid, the outcome, the execute paths it showed.
pub(super) type ProcRead = (i32, Read<Proc>, Vec<TaskDir>);

enum Job {
    Table {
        pids: Vec<i32>,
        paths: Arc<ExecPaths>,
        out: Sender<ProcRead>,
    },
    Exe {
        pid: i32,
        out: Sender<std::io::Result<PathBuf>>,
    },
}

/// A reader thread: jobs in, and how many it has finished.
struct Worker {
    tx: Sender<Job>,
    sent: u64,
    done: Arc<AtomicU64>,
}

impl Worker {
    fn spawn(mut source: Box<dyn ProcSource>) -> Option<Worker> {
        let (tx, rx) = channel::<Job>();
        let done = Arc::new(AtomicU64::new(0));
        let finished = done.clone();
        std::thread::Builder::new()
            .name("agent-reader".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    run(&mut *source, job);
                    finished.fetch_add(1, Ordering::Release);
                }
            })
            .ok()?;
        Some(Worker { tx, sent: 0, done })
    }

    fn send(&mut self, job: Job) -> bool {
        self.sent += 1;
        self.tx.send(job).is_ok()
    }

    /// Every job sent has finished: the stuck read returned.
    fn idle(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.sent
    }
}

fn run(source: &mut dyn ProcSource, job: Job) {
    match job {
        Job::Table { pids, paths, out } => {
            for pid in pids {
                let mut dirs = Vec::new();
                let r = read_process(source, &paths, pid, &mut dirs);
                if out.send((pid, r, dirs)).is_err() {
                    // the scanner gave up on this job
                    return;
                }
            }
        }
        Job::Exe { pid, out } => {
            let _ = out.send(source.exe(pid));
        }
    }
}

/// The scanner's reads of processes.
pub struct Reader {
    /// The scanner's own source: listing, boot time, capabilities, and
    /// every read when it cannot fork.
    pub(super) source: Box<dyn ProcSource>,
    timeout: Duration,
    /// The source forks: reads run on reader threads.
    forks: bool,
    current: Option<Worker>,
    /// Threads stuck in a read, each with the pid it was reading.
    stuck: Vec<(Worker, Option<i32>)>,
}

impl Reader {
    pub(super) fn new(source: Box<dyn ProcSource>) -> Reader {
        Reader {
            forks: source.fork().is_some(),
            source,
            timeout: Duration::from_secs(10),
            current: None,
            stuck: Vec::new(),
        }
    }

    /// `agent.scan_timeout`: how long one process's reads may take.
    pub(super) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout.max(Duration::from_millis(1));
    }

    /// Threads stuck in a read now.
    pub fn stuck(&self) -> usize {
        self.stuck.len()
    }

    /// Forgets the threads whose stuck read has returned.
    pub(super) fn recover(&mut self) {
        self.stuck.retain(|(w, _)| !w.idle());
    }

    /// The reader thread, started when needed; None when [`MAX_STUCK`]
    /// threads are stuck or the source cannot fork.
    fn worker(&mut self) -> Option<&mut Worker> {
        if self.current.is_none() && self.stuck.len() < MAX_STUCK {
            self.current = self.source.fork().and_then(Worker::spawn);
        }
        self.current.as_mut()
    }

    fn strand(&mut self, pid: Option<i32>) {
        if let Some(w) = self.current.take() {
            tracing::warn!(pid, "a read of a process did not finish within agent.scan_timeout; counting it unreadable");
            self.stuck.push((w, pid));
        }
    }

    /// Reads every process of `pids`, in order; a process whose read is
    /// (still) stuck is `Read::Stuck`.
    pub(super) fn processes(&mut self, pids: &[i32], paths: &ExecPaths) -> Vec<ProcRead> {
        let mut out = Vec::with_capacity(pids.len());
        if !self.forks {
            for &pid in pids {
                let mut dirs = Vec::new();
                let r = read_process(&mut *self.source, paths, pid, &mut dirs);
                out.push((pid, r, dirs));
            }
            return out;
        }
        let stuck: Vec<i32> = self.stuck.iter().filter_map(|(_, p)| *p).collect();
        let mut rest: Vec<i32> = Vec::with_capacity(pids.len());
        for &pid in pids {
            if stuck.contains(&pid) {
                out.push((pid, Read::Stuck, Vec::new()));
            } else {
                rest.push(pid);
            }
        }
        let paths = Arc::new(paths.clone());
        let timeout = self.timeout;
        let mut from = 0;
        while from < rest.len() {
            let (tx, rx) = channel();
            let job = Job::Table {
                pids: rest[from..].to_vec(),
                paths: paths.clone(),
                out: tx,
            };
            let Some(w) = self.worker() else { break };
            if !w.send(job) {
                self.current = None;
                continue;
            }
            from = self.collect(&rx, &rest, from, timeout, &mut out);
        }
        out.extend(rest[from..].iter().map(|p| (*p, Read::Stuck, Vec::new())));
        out
    }

    /// Takes the results of one job, from `rest[from]` on, until it ends or
    /// a read times out; returns where to go on from.
    fn collect(
        &mut self,
        rx: &Receiver<ProcRead>,
        rest: &[i32],
        mut from: usize,
        timeout: Duration,
        out: &mut Vec<ProcRead>,
    ) -> usize {
        while from < rest.len() {
            match rx.recv_timeout(timeout) {
                Ok(r) => {
                    out.push(r);
                    from += 1;
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.strand(Some(rest[from]));
                    out.push((rest[from], Read::Stuck, Vec::new()));
                    return from + 1;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // the thread is gone (a panic in a read): another takes
                    // the rest, and this process counts as unreadable
                    self.current = None;
                    out.push((rest[from], Read::Stuck, Vec::new()));
                    return from + 1;
                }
            }
        }
        from
    }

    /// `/proc/<pid>/exe`, bounded like every read; None when unreadable.
    pub(super) fn exe(&mut self, pid: i32) -> Option<PathBuf> {
        if !self.forks {
            return self.source.exe(pid).ok();
        }
        let timeout = self.timeout;
        let (tx, rx) = channel();
        let w = self.worker()?;
        if !w.send(Job::Exe { pid, out: tx }) {
            self.current = None;
            return None;
        }
        match rx.recv_timeout(timeout) {
            Ok(r) => r.ok(),
            Err(RecvTimeoutError::Timeout) => {
                self.strand(Some(pid));
                None
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.current = None;
                None
            }
        }
    }
}
