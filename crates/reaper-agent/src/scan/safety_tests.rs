//! The scan's evidence (SPEC §12): lineage, the worker's JVM by pid and
//! start time, terminals, and reads bounded in time.

use super::*;
use crate::proc::{ProcFs, ProcStat};
use crate::testing::{FakeProc, FakeProcess};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

const BTIME: i64 = 1_700_000_000;

fn at(ticks: u64) -> i64 {
    BTIME * 1000 + (ticks * 10) as i64
}

struct Tree {
    _dir: tempfile::TempDir,
    fake: FakeProc,
    base: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proc");
        std::fs::create_dir(&root).unwrap();
        let fake = FakeProc::create(&root, BTIME).unwrap();
        fake.set_capabilities(u64::MAX >> 23).unwrap();
        let base = dir.path().join("ds");
        std::fs::create_dir_all(base.join("exec/process")).unwrap();
        Tree {
            base,
            fake,
            _dir: dir,
        }
    }

    /// A 3.3 execute path `<process>/<task>`.
    fn exec(&self, task: i64) -> PathBuf {
        let p = self.base.join("exec/process").join(task.to_string());
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn add(&self, pid: i32, ppid: i32, cwd: &Path, ticks: u64, tty: i64) {
        self.fake
            .add_process(&FakeProcess {
                pid,
                ppid,
                cwd,
                state: 'S',
                start_ticks: ticks,
                tty_nr: tty,
                args: &["x"],
            })
            .unwrap();
    }

    fn java(&self, pid: i32, ticks: u64) {
        self.add(pid, 1, Path::new("/opt/ds"), ticks, 0);
        self.fake.set_comm(pid, "java").unwrap();
    }

    fn scanner(&self) -> Scanner {
        Scanner::new(
            Box::new(self.fake.source()),
            ExecPaths::new(&self.base, Some(DsLine::V3_3)),
        )
    }
}

fn registered(pid: i64, startup_ms: Option<i64>) -> WorkerJvm {
    WorkerJvm::Registered { pid, startup_ms }
}

fn lineage(scan: &Scan) -> Vec<(i64, Option<Lineage>)> {
    scan.tasks.iter().map(|t| (t.task_id, t.lineage)).collect()
}

/// Two workers share a host and its exec_base: each agent lists its own
/// worker's task (directly or through sudo), an orphan's, and never the
/// other JVM's — not even after that JVM ended and its task went to init.
/// Its own task stays `own` after its JVM ended.
#[test]
fn a_task_below_another_jvm_is_never_listed_and_own_is_remembered() {
    let t = Tree::new();
    t.java(400, 10);
    t.java(450, 11);
    t.add(500, 400, &t.exec(1), 100, 0); // own, directly
    t.add(510, 400, Path::new("/"), 100, 0); // sudo
    t.add(511, 510, &t.exec(2), 101, 0); // own, through sudo
    t.add(520, 450, &t.exec(3), 100, 0); // the other worker's
    t.add(521, 520, Path::new("/tmp"), 101, 0); // its child
    t.add(530, 1, &t.exec(4), 100, 0); // an orphan
    let mut s = t.scanner();
    s.set_worker(registered(400, Some(at(10))));
    let scan = s.scan();
    assert_eq!(scan.blind, None);
    let own = Some(Lineage::Own);
    let orphan = Some(Lineage::Orphan);
    assert_eq!(lineage(&scan), [(1, own), (2, own), (4, orphan)]);
    assert_eq!(scan.task_processes, 3);

    // both JVMs end (3.3+ leaves the tasks to init)
    t.fake.remove(400).unwrap();
    t.fake.remove(450).unwrap();
    t.add(500, 1, &t.exec(1), 100, 0);
    t.add(520, 1, &t.exec(3), 100, 0);
    let scan = s.scan();
    assert!(scan.blind.is_some());
    assert_eq!(lineage(&scan), [(1, own), (2, own), (4, orphan)]);
    // a new process on the other task's pid is not remembered as its
    t.add(520, 1, &t.exec(3), 900, 0);
    assert_eq!(
        lineage(&s.scan()),
        [(1, own), (2, own), (3, orphan), (4, orphan)]
    );
}

/// Blind before the worker's JVM is verified (no heartbeat read yet, as
/// after an agent restart while the worker's node is absent): a task below
/// a JVM is not listed then, but that is no lasting verdict — once the JVM
/// is verified as the worker's, its task is `own` (SPEC §12: own when the
/// tree descends from its worker's JVM), while another JVM's stays unlisted.
#[test]
fn a_task_seen_below_a_jvm_while_blind_is_own_once_the_jvm_is_verified() {
    let t = Tree::new();
    t.java(400, 10);
    t.java(450, 11);
    t.add(500, 400, &t.exec(1), 100, 0);
    t.add(520, 450, &t.exec(3), 100, 0);
    let mut s = t.scanner();
    let scan = s.scan();
    assert!(scan.blind.is_some(), "no heartbeat seen yet");
    assert_eq!(lineage(&scan), []);
    s.set_worker(registered(400, Some(at(10))));
    let scan = s.scan();
    assert_eq!(scan.blind, None);
    assert_eq!(lineage(&scan), [(1, Some(Lineage::Own))]);
}

/// A task's own java process (a Spark client) does not end its lineage;
/// an executable named `java` makes a JVM whatever its `comm`.
#[test]
fn the_tasks_own_java_is_no_other_worker_and_exe_names_a_jvm() {
    let t = Tree::new();
    t.java(400, 10);
    t.add(500, 400, &t.exec(1), 100, 0);
    t.add(501, 500, &t.exec(1), 101, 0);
    t.fake.set_comm(501, "java").unwrap();
    t.add(502, 501, Path::new("/"), 102, 0);
    t.add(460, 1, Path::new("/opt/other"), 11, 0);
    t.fake
        .set_exe(460, Path::new("/usr/lib/jvm/bin/java"))
        .unwrap();
    t.add(520, 460, &t.exec(3), 100, 0);
    let mut s = t.scanner();
    s.set_worker(registered(400, None));
    let scan = s.scan();
    assert_eq!(lineage(&scan), [(1, Some(Lineage::Own))]);
    assert_eq!(scan.tasks[0].pids, [500, 501, 502]);
}

/// The heartbeat's pid must be a live java process that started no later
/// than `startupTime` + the tolerance: a reused pid number is not the JVM.
#[test]
fn the_workers_jvm_is_checked_by_name_and_start_time() {
    let t = Tree::new();
    t.java(400, 1000); // started at at(1000)
    let mut s = t.scanner().with_clock_skew(Duration::from_secs(5));
    // DS records startupTime after the JVM started
    s.set_worker(registered(400, Some(at(1000) + 30_000)));
    assert_eq!(s.scan().blind, None);
    s.set_worker(registered(400, Some(at(1000) - 4_000)));
    assert_eq!(s.scan().blind, None, "within the tolerance");
    s.set_worker(registered(400, Some(at(1000) - 6_000)));
    let b = s.scan().blind.unwrap();
    assert!(b.contains("reused pid"), "{b}");
    // a live process that is no JVM
    t.add(401, 1, Path::new("/"), 10, 0);
    s.set_worker(registered(401, Some(at(1000))));
    let b = s.scan().blind.unwrap();
    assert!(b.contains("not a java process"), "{b}");
    // its executable's name is java: a JVM
    t.fake
        .set_exe(401, Path::new("/usr/lib/jvm/jdk/bin/java"))
        .unwrap();
    assert_eq!(s.scan().blind, None);
}

/// Without `startupTime` the start time first seen for the pid is kept: a
/// later process on that pid is another process. While the node is absent
/// the very JVM last seen is checked; blind when told so.
#[test]
fn without_startup_time_the_first_start_is_kept_and_absence_checks_the_last_jvm() {
    let t = Tree::new();
    t.java(400, 1000);
    let mut s = t.scanner();
    s.set_worker(registered(400, None));
    assert_eq!(s.scan().blind, None);
    s.set_worker(WorkerJvm::Absent);
    assert_eq!(s.scan().blind, None);
    assert_eq!(s.worker_jvm(), Some((400, 1000)));
    t.java(400, 2000); // the pid reused by another java
    let b = s.scan().blind.unwrap();
    assert!(b.contains("absent"), "{b}");
    s.set_worker(registered(400, None));
    let b = s.scan().blind.unwrap();
    assert!(b.contains("reused pid"), "{b}");
    s.set_worker(WorkerJvm::Blind("the node is gone too long".into()));
    assert_eq!(s.scan().blind.as_deref(), Some("the node is gone too long"));
    // an agent that never saw a heartbeat, even with a JVM absent
    let mut fresh = t.scanner();
    fresh.set_worker(WorkerJvm::Absent);
    assert!(fresh.scan().blind.unwrap().contains("has not seen its JVM"));
}

/// sudo's `use_pty`: a task all of whose processes have a terminal counts.
#[test]
fn tasks_whose_every_process_has_a_terminal_are_counted() {
    let t = Tree::new();
    t.java(400, 10);
    t.add(500, 400, &t.exec(1), 100, 34816);
    t.add(501, 500, &t.exec(1), 101, 34816);
    t.add(510, 400, &t.exec(2), 100, 34816);
    t.add(511, 510, &t.exec(2), 101, 0);
    t.add(520, 400, &t.exec(3), 100, 0);
    let mut s = t.scanner();
    s.set_worker(registered(400, None));
    let scan = s.scan();
    assert_eq!(scan.tasks.len(), 3);
    assert_eq!(scan.tty_tasks, 1);
}

/// A gate the hanging reads wait on; opened at the end of a test.
#[derive(Default)]
struct Gate(Mutex<bool>, Condvar);

impl Gate {
    fn wait(&self) {
        let mut open = self.0.lock().unwrap();
        while !*open {
            open = self.1.wait(open).unwrap();
        }
    }
    fn open(&self) {
        *self.0.lock().unwrap() = true;
        self.1.notify_all();
    }
}

/// The read seam's test double: `cmdline` of the `hang` pids blocks (as
/// one behind a dead NFS mount does) until the gate opens.
struct Hanging {
    inner: ProcFs,
    hang: Vec<i32>,
    gate: Arc<Gate>,
    forks: Arc<AtomicUsize>,
}

impl ProcSource for Hanging {
    fn pids(&mut self) -> io::Result<Vec<i32>> {
        self.inner.pids()
    }
    fn cwd(&mut self, pid: i32) -> io::Result<PathBuf> {
        self.inner.cwd(pid)
    }
    fn stat(&mut self, pid: i32) -> io::Result<ProcStat> {
        self.inner.stat(pid)
    }
    fn cmdline(&mut self, pid: i32) -> io::Result<Vec<u8>> {
        if self.hang.contains(&pid) {
            self.gate.wait();
        }
        self.inner.cmdline(pid)
    }
    fn fork(&self) -> Option<Box<dyn ProcSource>> {
        self.forks.fetch_add(1, Ordering::SeqCst);
        Some(Box::new(Hanging {
            inner: ProcFs::new(self.inner.root()).with_clock_ticks(100),
            hang: self.hang.clone(),
            gate: self.gate.clone(),
            forks: self.forks.clone(),
        }))
    }
    fn self_pid(&mut self) -> Option<i32> {
        None
    }
    fn boot_time(&mut self) -> io::Result<i64> {
        self.inner.boot_time()
    }
    fn clock_ticks(&self) -> u64 {
        100
    }
    fn capabilities(&mut self) -> Option<u64> {
        self.inner.capabilities()
    }
    fn blind(&mut self) -> Option<String> {
        None
    }
}

fn hanging_scanner(t: &Tree, hang: &[i32]) -> (Scanner, Arc<Gate>, Arc<AtomicUsize>) {
    for pid in hang {
        t.add(*pid, 1, Path::new("/"), 100, 0);
    }
    let gate = Arc::new(Gate::default());
    let forks = Arc::new(AtomicUsize::new(0));
    let src = Hanging {
        inner: t.fake.source(),
        hang: hang.to_vec(),
        gate: gate.clone(),
        forks: forks.clone(),
    };
    let mut s = Scanner::new(Box::new(src), ExecPaths::new(&t.base, Some(DsLine::V3_3)))
        .with_read_timeout(Duration::from_millis(50));
    s.set_worker(registered(400, None));
    (s, gate, forks)
}

/// A process whose reads hang counts as unreadable and the scan goes on;
/// it is not read again while its read is stuck (no new thread per scan),
/// and its reader is released once the read returns.
#[test]
fn a_hung_read_is_unreadable_and_the_scan_goes_on() {
    let t = Tree::new();
    t.java(400, 10);
    t.add(500, 400, &t.exec(1), 100, 0);
    let hang: Vec<i32> = (600..600 + bounded::MAX_STUCK as i32 - 1).collect();
    let (mut s, gate, forks) = hanging_scanner(&t, &hang);
    let scan = s.scan();
    assert_eq!(lineage(&scan), [(1, Some(Lineage::Own))]);
    assert_eq!(scan.unreadable, hang.len() as u64, "{scan:#?}");
    assert_eq!(scan.unreadable_pids, hang);
    assert!(scan
        .denied
        .as_deref()
        .unwrap()
        .contains("agent.scan_timeout"));
    assert_eq!(s.stuck_readers(), hang.len());
    // the last stuck reader is replaced once, then used scan after scan
    s.scan();
    let started = forks.load(Ordering::SeqCst);
    for _ in 0..3 {
        let again = s.scan();
        assert_eq!(again.unreadable, hang.len() as u64);
        assert_eq!(lineage(&again), [(1, Some(Lineage::Own))]);
    }
    assert_eq!(forks.load(Ordering::SeqCst), started, "no reader per scan");
    gate.open();
    wait_recovered(&mut s);
}

/// More hung reads than [`bounded::MAX_STUCK`]: no more threads than that
/// are ever stuck; every read beyond counts as unreadable until one returns.
#[test]
fn stuck_readers_are_bounded() {
    let t = Tree::new();
    t.java(400, 10);
    t.add(500, 400, &t.exec(1), 100, 0);
    let hang: Vec<i32> = (600..600 + bounded::MAX_STUCK as i32 + 2).collect();
    let (mut s, gate, forks) = hanging_scanner(&t, &hang);
    for _ in 0..4 {
        let scan = s.scan();
        assert!(scan.unreadable >= hang.len() as u64, "{scan:#?}");
        assert_eq!(s.stuck_readers(), bounded::MAX_STUCK);
    }
    // one fork tells whether the source forks; one per reader thread
    assert_eq!(forks.load(Ordering::SeqCst), 1 + bounded::MAX_STUCK);
    gate.open();
    wait_recovered(&mut s);
}

fn wait_recovered(s: &mut Scanner) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let scan = s.scan();
        if scan.unreadable == 0 {
            assert_eq!(s.stuck_readers(), 0);
            assert_eq!(lineage(&scan), [(1, Some(Lineage::Own))]);
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{scan:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
