//! The scanner on fake proc trees.

use super::*;
use crate::proc::{ProcFs, ProcStat};
use crate::testing::{Denial, Denying, FakeProc};
use reaper_core::DsLine;
use std::io;
use std::path::{Path, PathBuf};

const BTIME: i64 = 1_700_000_000;

struct Tree {
    _dir: tempfile::TempDir,
    fake: FakeProc,
    base: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        std::fs::create_dir(&proc_root).unwrap();
        let fake = FakeProc::create(&proc_root, BTIME).unwrap();
        fake.set_capabilities(u64::MAX >> 23).unwrap();
        let base = dir.path().join("ds");
        Tree {
            base,
            fake,
            _dir: dir,
        }
    }

    /// `<base>/exec/process/<rel>`, created.
    fn exec(&self, rel: &str) -> PathBuf {
        let p = self.base.join("exec/process").join(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn scanner(&self, line: Option<DsLine>) -> Scanner {
        Scanner::new(
            Box::new(self.fake.source()),
            ExecPaths::new(&self.base, line),
        )
    }
}

/// Epoch ms of a start `ticks` after the fake boot (100 ticks per second).
fn at(ticks: u64) -> i64 {
    BTIME * 1000 + (ticks * 10) as i64
}

fn task(task_id: i64, wf: i64, pids: &[i32], started_at: i64) -> AgentTask {
    AgentTask {
        lineage: None,
        task_id,
        workflow_instance_id: wf,
        pids: pids.to_vec(),
        started_at,
        processes: vec![],
        app_ids: vec![],
    }
}

/// The tasks without their per-process details, which [`task`] does not spell.
fn bare(tasks: &[AgentTask]) -> Vec<AgentTask> {
    tasks
        .iter()
        .map(|t| AgentTask {
            lineage: None,
            processes: vec![],
            ..t.clone()
        })
        .collect()
}

#[test]
fn execute_paths_of_every_line() {
    let t = Tree::new();
    let f = &t.fake;
    f.add(101, &t.exec("2/10/229/496"), 'S', 100).unwrap(); // 1.2, 1.3
    f.add(102, &t.exec("4797859136768/4803964634368_2/2/4"), 'S', 200)
        .unwrap(); // 2.0 - 3.1.0
    f.add(
        103,
        &t.exec("default/4797859136768/4803964634368_12/1001/20002"),
        'R',
        300,
    )
    .unwrap(); // 3.1.1 - 3.3
    f.add(104, &t.exec("30003"), 'D', 400).unwrap(); // 3.3 since DS #16836
                                                     // not task processes
    f.add(1, Path::new("/"), 'S', 1).unwrap();
    f.add(200, &t.base, 'S', 5).unwrap();
    f.add(201, &t.exec("default"), 'S', 5).unwrap();
    f.add(202, Path::new("/home/ds/exec/process/1/2/3/4"), 'S', 5)
        .unwrap();
    let scan = t.scanner(None).scan();
    assert_eq!(scan.processes, 8);
    assert_eq!(scan.unreadable, 0);
    assert_eq!(scan.denied, None);
    assert_eq!(scan.task_processes, 4);
    assert_eq!(
        bare(&scan.tasks),
        vec![
            task(4, 2, &[102], at(200)),
            task(496, 229, &[101], at(100)),
            task(20002, 1001, &[103], at(300)),
            task(30003, 0, &[104], at(400)),
        ]
    );
    assert!(scan.started_at > BTIME * 1000);

    // an explicit line reads only its own form
    let v13 = t.scanner(Some(DsLine::V1_3)).scan();
    assert_eq!(bare(&v13.tasks), vec![task(496, 229, &[101], at(100))]);
    let v32 = t.scanner(Some(DsLine::V3_2)).scan();
    assert_eq!(bare(&v32.tasks), vec![task(20002, 1001, &[103], at(300))]);
    let v20 = t.scanner(Some(DsLine::V2_0)).scan();
    assert_eq!(bare(&v20.tasks), vec![task(4, 2, &[102], at(200))]);
}

#[test]
fn nested_children_belong_to_their_task_which_started_with_the_oldest() {
    let t = Tree::new();
    let dir = t.exec("default/1/2_3/11/12");
    let sub = dir.join("spark");
    let deeper = sub.join("conf/x");
    std::fs::create_dir_all(&deeper).unwrap();
    t.fake.add(300, &dir, 'S', 500).unwrap();
    t.fake.add(301, &sub, 'S', 400).unwrap();
    t.fake.add(302, &deeper, 'R', 900).unwrap();
    t.fake
        .add(40, &t.exec("default/1/2_3/11/13"), 'S', 450)
        .unwrap();
    let scan = t.scanner(None).scan();
    assert_eq!(
        bare(&scan.tasks),
        vec![
            task(12, 11, &[300, 301, 302], at(400)),
            task(13, 11, &[40], at(450)),
        ]
    );
    assert_eq!(scan.task_processes, 4);
}

#[test]
fn a_deleted_execute_path_still_holds_its_process() {
    let t = Tree::new();
    let gone = t.base.join("exec/process/default/1/2_3/11/12 (deleted)");
    t.fake.add(300, &gone, 'S', 500).unwrap();
    let scan = t.scanner(None).scan();
    assert_eq!(bare(&scan.tasks), vec![task(12, 11, &[300], at(500))]);
}

#[test]
fn zombies_and_vanished_processes_are_simply_gone() {
    let t = Tree::new();
    let dir = t.exec("1/2/3/4");
    t.fake.add(10, &dir, 'Z', 100).unwrap(); // a zombie, not yet reaped
    t.fake.add(11, &dir, 'X', 100).unwrap(); // dead
    t.fake.add(12, &dir, 'S', 100).unwrap();
    std::fs::remove_file(t.fake.root().join("12/stat")).unwrap(); // vanished between reads
    t.fake.add(13, &dir, 'S', 100).unwrap();
    t.fake.remove(13).unwrap(); // reaped before the scan
    let scan = t.scanner(None).scan();
    assert_eq!(bare(&scan.tasks), vec![]);
    assert_eq!(scan.unreadable, 0);
    assert_eq!(scan.denied, None);

    t.fake.add(14, &dir, 'S', 700).unwrap();
    let scan = t.scanner(None).scan();
    assert_eq!(bare(&scan.tasks), vec![task(4, 3, &[14], at(700))]);
}

#[test]
fn a_process_whose_main_thread_exited_is_alive() {
    let t = Tree::new();
    let dir = t.exec("default/1/2_3/11/12");
    t.fake.add_zombie_leader(300, 301, &dir, 500).unwrap();
    t.fake.add(310, &dir, 'Z', 600).unwrap(); // a real zombie
    let scan = t.scanner(None).scan();
    assert_eq!(bare(&scan.tasks), vec![task(12, 11, &[300], at(500))]);
    assert_eq!(scan.unreadable, 0);
}

#[test]
fn denied_processes_are_unreadable_and_name_the_missing_capability() {
    let t = Tree::new();
    let dir = t.exec("1/2/3/4");
    for pid in 10..20 {
        t.fake.add(pid, &dir, 'S', 100).unwrap();
    }
    t.fake.add(5, Path::new("/"), 'S', 1).unwrap();
    let (src, deny) = Denying::new(t.fake.source());
    {
        let mut d = deny.lock().unwrap();
        for pid in [19, 17, 15, 13, 11, 5] {
            d.insert(pid, Denial::Eacces);
        }
        d.insert(12, Denial::Eperm);
    }
    let mut scanner = Scanner::new(Box::new(src), ExecPaths::new(&t.base, None));
    let scan = scanner.scan();
    assert_eq!(scan.unreadable, 7);
    assert_eq!(scan.unreadable_pids, vec![5, 11, 12, 13, 15]);
    assert_eq!(
        bare(&scan.tasks),
        vec![task(4, 3, &[10, 14, 16, 18], at(100))]
    );
    let why = scan.denied.unwrap();
    assert!(why.contains("lacks CAP_SYS_PTRACE"), "{why}");
    assert!(!why.contains("CAP_DAC_READ_SEARCH"), "{why}");

    deny.lock().unwrap().clear();
    let scan = scanner.scan();
    assert_eq!((scan.unreadable, scan.denied), (0, None));
    assert_eq!(scan.tasks[0].pids.len(), 10);
}

#[test]
fn the_missing_capability_is_named_from_the_agents_own() {
    assert!(lacking(Some(0)).contains("lacks CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH"));
    assert!(lacking(Some(1 << CAP_SYS_PTRACE)).contains("lacks CAP_DAC_READ_SEARCH"));
    assert!(lacking(Some(u64::MAX)).contains("security module"));
    assert!(lacking(None).contains("CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH"));
}

#[test]
fn a_pid_reused_between_scans_is_the_new_process() {
    let t = Tree::new();
    t.fake.add(300, &t.exec("1/2/3/42"), 'S', 1000).unwrap();
    let mut scanner = t.scanner(None);
    assert_eq!(
        bare(&scanner.scan().tasks),
        vec![task(42, 3, &[300], at(1000))]
    );
    // task 42's process ended; pid 300 now belongs to another task's process
    t.fake.add(300, &t.exec("1/2/3/43"), 'S', 5000).unwrap();
    assert_eq!(
        bare(&scanner.scan().tasks),
        vec![task(43, 3, &[300], at(5000))]
    );
    // ... and then to a process that is no task's
    t.fake.add(300, Path::new("/var/tmp"), 'S', 9000).unwrap();
    assert_eq!(bare(&scanner.scan().tasks), vec![]);
}

/// Reuses a pid while the scanner reads it: on the first `stat` of `pid`,
/// the process is replaced by one working in `then` since `ticks`.
struct ReuseDuringScan {
    inner: ProcFs,
    fake: FakeProc,
    pid: i32,
    then: PathBuf,
    ticks: u64,
    done: bool,
}

impl ProcSource for ReuseDuringScan {
    fn pids(&mut self) -> io::Result<Vec<i32>> {
        self.inner.pids()
    }
    fn cwd(&mut self, pid: i32) -> io::Result<PathBuf> {
        self.inner.cwd(pid)
    }
    fn stat(&mut self, pid: i32) -> io::Result<ProcStat> {
        if pid == self.pid && !self.done {
            self.done = true;
            self.fake.add(pid, &self.then, 'S', self.ticks)?;
        }
        self.inner.stat(pid)
    }
    fn self_pid(&mut self) -> Option<i32> {
        None
    }
    fn boot_time(&mut self) -> io::Result<i64> {
        self.inner.boot_time()
    }
    fn clock_ticks(&self) -> u64 {
        self.inner.clock_ticks()
    }
    fn capabilities(&mut self) -> Option<u64> {
        None
    }
    fn blind(&mut self) -> Option<String> {
        None
    }
}

#[test]
fn a_pid_reused_during_the_scan_is_not_the_old_tasks() {
    let t = Tree::new();
    let old = t.exec("1/2/3/42");
    // reused by a process that is no task's: task 42 is not seen
    t.fake.add(300, &old, 'S', 1000).unwrap();
    let src = ReuseDuringScan {
        inner: t.fake.source(),
        fake: t.fake.clone(),
        pid: 300,
        then: PathBuf::from("/var/tmp"),
        ticks: 9000,
        done: false,
    };
    let scan = Scanner::new(Box::new(src), ExecPaths::new(&t.base, None)).scan();
    assert_eq!(bare(&scan.tasks), vec![]);
    assert_eq!(scan.unreadable, 0);

    // reused by another task's process: that task, with the new start time
    t.fake.add(300, &old, 'S', 1000).unwrap();
    let src = ReuseDuringScan {
        inner: t.fake.source(),
        fake: t.fake.clone(),
        pid: 300,
        then: t.exec("1/2/3/43"),
        ticks: 9000,
        done: false,
    };
    let scan = Scanner::new(Box::new(src), ExecPaths::new(&t.base, None)).scan();
    assert_eq!(bare(&scan.tasks), vec![task(43, 3, &[300], at(9000))]);
}

#[test]
fn an_unlistable_process_table_proves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-proc");
    let mut s = Scanner::new(
        Box::new(ProcFs::new(&missing)),
        ExecPaths::new(dir.path(), None),
    );
    let scan = s.scan();
    assert_eq!(scan.unreadable, 1);
    assert!(scan
        .denied
        .unwrap()
        .contains("cannot read the process table"));
}

#[test]
fn hidden_processes_make_a_scan_prove_nothing() {
    let t = Tree::new();
    t.fake.add(10, &t.exec("1/2/3/4"), 'S', 100).unwrap();
    let root = std::fs::canonicalize(t.fake.root()).unwrap();
    std::fs::write(
        t.fake.root().join("self/mountinfo"),
        format!(
            "22 1 0:21 / {} rw,relatime - proc proc rw,hidepid=invisible\n",
            root.display()
        ),
    )
    .unwrap();
    t.fake.set_capabilities(1 << CAP_DAC_READ_SEARCH).unwrap();
    let scan = t.scanner(None).scan();
    assert_eq!(scan.unreadable, 1);
    assert!(scan.denied.unwrap().contains("hidepid=invisible"));
    assert_eq!(scan.tasks.len(), 1);

    t.fake
        .set_capabilities((1 << CAP_DAC_READ_SEARCH) | (1 << CAP_SYS_PTRACE))
        .unwrap();
    let scan = t.scanner(None).scan();
    assert_eq!((scan.unreadable, scan.denied), (0, None));
}

#[test]
fn the_real_proc_finds_a_real_task_process() {
    let dir = tempfile::tempdir().unwrap();
    let exec = dir.path().join("exec/process/default/1/2_3/11/12");
    std::fs::create_dir_all(&exec).unwrap();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .current_dir(&exec)
        .spawn()
        .unwrap();
    let mut s = Scanner::new(
        Box::new(ProcFs::new("/proc")),
        ExecPaths::new(dir.path(), None),
    );
    let scan = s.scan();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(scan.tasks.len(), 1, "{scan:?}");
    assert_eq!(scan.tasks[0].task_id, 12);
    assert_eq!(scan.tasks[0].pids, vec![child.id() as i32]);
    let age = scan.started_at - scan.tasks[0].started_at;
    assert!(
        (-1500..60_000).contains(&age),
        "started {age} ms before the scan"
    );
    assert!(scan.processes > 1);
}

#[test]
fn denied_kernel_threads_and_ancestors_cannot_be_tasks() {
    let t = Tree::new();
    // the agent (pid 50) was started by 40, itself by init (1)
    t.fake.add(1, Path::new("/"), 'S', 1).unwrap();
    t.fake.add(40, Path::new("/"), 'S', 2).unwrap();
    t.fake.add(50, Path::new("/"), 'S', 3).unwrap();
    t.fake.add(60, Path::new("/"), 'S', 3).unwrap();
    let set_ppid = |pid: i32, ppid: i32, flags: u64| {
        let f = t.fake.root().join(format!("{pid}/stat"));
        std::fs::write(
            f,
            format!("{pid} (x) S {ppid} 0 0 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n"),
        )
        .unwrap();
    };
    set_ppid(1, 0, 0);
    set_ppid(40, 1, 0);
    set_ppid(50, 40, 0);
    set_ppid(60, 2, 0x0020_0000); // a kernel thread
                                  // a source whose "self" is pid 50 and which denies every cwd
    struct Fixed(ProcFs);
    impl ProcSource for Fixed {
        fn pids(&mut self) -> io::Result<Vec<i32>> {
            self.0.pids()
        }
        fn cwd(&mut self, _: i32) -> io::Result<PathBuf> {
            Err(io::Error::from_raw_os_error(13))
        }
        fn stat(&mut self, pid: i32) -> io::Result<ProcStat> {
            self.0.stat(pid)
        }
        fn self_pid(&mut self) -> Option<i32> {
            Some(50)
        }
        fn boot_time(&mut self) -> io::Result<i64> {
            self.0.boot_time()
        }
        fn clock_ticks(&self) -> u64 {
            100
        }
        fn capabilities(&mut self) -> Option<u64> {
            Some(0)
        }
        fn blind(&mut self) -> Option<String> {
            None
        }
    }
    let mut s = Scanner::new(
        Box::new(Fixed(t.fake.source())),
        ExecPaths::new(&t.base, None),
    );
    assert_eq!((s.scan().unreadable, s.scan().denied), (0, None));
    // any other denied process counts
    t.fake.add(70, Path::new("/"), 'S', 3).unwrap();
    let scan = s.scan();
    assert_eq!((scan.unreadable, scan.unreadable_pids), (1, vec![70]));
}

/// A process of the fake tree with a parent, a command line and a terminal.
fn proc_(t: &Tree, pid: i32, ppid: i32, cwd: &Path, ticks: u64, tty: i64, args: &[&str]) {
    t.fake
        .add_process(&crate::testing::FakeProcess {
            pid,
            ppid,
            cwd,
            state: 'S',
            start_ticks: ticks,
            tty_nr: tty,
            args,
        })
        .unwrap();
}

/// DS 3.2 runs `bash <execute path>/<wf>_<task>.sh`; the script `cd`s to
/// /opt/job and starts `./run.sh`, which starts `sleep`: all three are the
/// task's, the worker JVM that started the script is not.
#[test]
fn a_script_that_cds_elsewhere_keeps_every_child() {
    let t = Tree::new();
    let dir = t.exec("default/1/2_3/11/12");
    let file = dir.join("11_12.sh");
    let file = file.to_str().unwrap();
    let job = Path::new("/opt/job");
    proc_(
        &t,
        400,
        1,
        Path::new("/opt/ds/worker"),
        10,
        0,
        &["java", "-cp", "x"],
    );
    t.fake.set_comm(400, "java").unwrap();
    proc_(&t, 500, 400, job, 100, 0, &["bash", file]);
    proc_(&t, 501, 500, job, 110, 0, &["/bin/sh", "./run.sh"]);
    proc_(
        &t,
        502,
        501,
        Path::new("/opt/job/out"),
        120,
        0,
        &["sleep", "100"],
    );
    // an unrelated process in /opt/job
    proc_(&t, 503, 1, job, 130, 0, &["sleep", "100"]);
    let mut s = t.scanner(Some(DsLine::V3_2));
    s.set_worker_pid(Some(400));
    let scan = s.scan();
    assert_eq!(
        bare(&scan.tasks),
        vec![task(12, 11, &[500, 501, 502], at(100))]
    );
    assert_eq!(
        scan.tasks[0].processes,
        vec![
            AgentProcess {
                pid: 500,
                started_at: at(100),
                tty: false
            },
            AgentProcess {
                pid: 501,
                started_at: at(110),
                tty: false
            },
            AgentProcess {
                pid: 502,
                started_at: at(120),
                tty: false
            },
        ]
    );
    assert_eq!(scan.blind, None);
    assert_eq!(scan.task_processes, 3);
}

/// `sudo -u <tenant> -i <file>`: sudo's login shell starts in the tenant's
/// home with the command escaped; every process below sudo is the task's.
#[test]
fn the_sudo_form_and_its_login_shell_are_the_tasks() {
    let t = Tree::new();
    let dir = t.exec("default/1/2_3/11/12");
    let file = dir.join("11_12.sh").to_str().unwrap().to_string();
    let escaped = file.replace('/', "\\/").replace('.', "\\.");
    let home = Path::new("/home/tenant");
    proc_(
        &t,
        600,
        1,
        &dir,
        100,
        0,
        &["sudo", "-u", "tenant", "-i", &file],
    );
    proc_(&t, 601, 600, home, 101, 0, &["-bash", "-c", &escaped]);
    proc_(&t, 602, 601, home, 102, 0, &["sleep", "100"]);
    let scan = t.scanner(Some(DsLine::V3_2)).scan();
    assert_eq!(
        bare(&scan.tasks),
        vec![task(12, 11, &[600, 601, 602], at(100))]
    );
}

/// 1.3: `sh <path>/<def>_<wf>_<task>.command` runs `<appId>_node.sh`, whose
/// script may `cd` anywhere.
#[test]
fn the_1_3_command_and_node_files() {
    let t = Tree::new();
    let dir = t.exec("1/2/31/32");
    let command = dir.join("2_31_32.command");
    let node = dir.join("2_31_32_node.sh");
    proc_(&t, 700, 1, &dir, 100, 0, &["sh", command.to_str().unwrap()]);
    proc_(
        &t,
        701,
        700,
        Path::new("/var"),
        101,
        0,
        &["/bin/bash", node.to_str().unwrap()],
    );
    // a node file run by someone else from elsewhere still names the task
    proc_(
        &t,
        702,
        1,
        Path::new("/root"),
        102,
        34816,
        &["bash", node.to_str().unwrap()],
    );
    let scan = t.scanner(Some(DsLine::V1_3)).scan();
    assert_eq!(
        bare(&scan.tasks),
        vec![task(32, 31, &[700, 701, 702], at(100))]
    );
    let tty: Vec<bool> = scan.tasks[0].processes.iter().map(|p| p.tty).collect();
    assert_eq!(tty, vec![false, false, true]);
}

/// A child whose script ended is reparented: it stays the task's by pid and
/// start time. A new process on the same pid does not inherit that.
#[test]
fn membership_is_kept_by_pid_and_start_time_not_by_pid() {
    let t = Tree::new();
    let dir = t.exec("default/1/2_3/11/12");
    let file = dir.join("11_12.sh");
    let job = Path::new("/opt/job");
    proc_(&t, 500, 1, job, 100, 0, &["bash", file.to_str().unwrap()]);
    proc_(&t, 501, 500, job, 110, 0, &["sleep", "100"]);
    let mut s = t.scanner(Some(DsLine::V3_2));
    assert_eq!(s.scan().tasks[0].pids, vec![500, 501]);
    // the script ends, its child is reparented to init
    t.fake.remove(500).unwrap();
    proc_(&t, 501, 1, job, 110, 0, &["sleep", "100"]);
    assert_eq!(s.scan().tasks[0].pids, vec![501]);
    assert_eq!(s.scan().tasks[0].pids, vec![501]);
    // 501 ends; a new process takes its pid
    proc_(&t, 501, 1, job, 900, 0, &["sleep", "100"]);
    assert_eq!(s.scan().tasks, vec![]);
}

/// A parent link counts only to a parent that started no later than the
/// child: pid 500 freed and reused by a newer process is not the parent.
#[test]
fn a_reused_parent_pid_passes_on_nothing() {
    let t = Tree::new();
    let dir = t.exec("default/1/2_3/11/12");
    let file = dir.join("11_12.sh");
    // the snapshot shows 501 with ppid 500, but 500 started after 501
    proc_(&t, 500, 1, &dir, 300, 0, &["bash", file.to_str().unwrap()]);
    proc_(&t, 501, 500, Path::new("/opt"), 200, 0, &["sleep", "100"]);
    let scan = t.scanner(Some(DsLine::V3_2)).scan();
    assert_eq!(bare(&scan.tasks), vec![task(12, 11, &[500], at(300))]);
}

/// The worker JVM is never a task's, even working in an execute path.
#[test]
fn the_worker_jvm_is_never_a_task_process() {
    let t = Tree::new();
    let dir = t.exec("default/1/2_3/11/12");
    proc_(&t, 400, 1, &dir, 10, 0, &["java"]);
    t.fake.set_comm(400, "java").unwrap();
    proc_(&t, 401, 400, &dir, 20, 0, &["sleep", "1"]);
    let mut s = t.scanner(Some(DsLine::V3_2));
    s.set_worker_pid(Some(400));
    let scan = s.scan();
    assert_eq!(bare(&scan.tasks), vec![task(12, 11, &[401], at(20))]);
    assert_eq!(scan.blind, None);
}

/// A missing process folder, an unknown worker JVM, or one not in sight
/// make the agent blind; seeing both makes it see.
#[test]
fn blind_without_the_process_folder_or_the_workers_jvm() {
    let t = Tree::new();
    proc_(&t, 400, 1, Path::new("/"), 10, 0, &["java"]);
    t.fake.set_comm(400, "java").unwrap();
    let mut s = t.scanner(None);
    let blind = s.scan().blind.unwrap();
    assert!(blind.contains("process folder"), "{blind}");
    assert!(blind.contains("agent.process_dir"), "{blind}");
    assert!(blind.contains("heartbeat has not been seen"), "{blind}");
    t.exec("");
    let blind = s.scan().blind.unwrap();
    assert!(!blind.contains("process folder"), "{blind}");
    s.set_worker_pid(Some(400));
    assert_eq!(s.scan().blind, None);
    // a pid no process has (a sidecar without a shared PID namespace)
    s.set_worker_pid(Some(999));
    let blind = s.scan().blind.unwrap();
    assert!(blind.contains("processId 999"), "{blind}");
    assert!(blind.contains("shareProcessNamespace"), "{blind}");
    // a JVM that ended (a zombie) is not live
    t.fake.add(999, Path::new("/"), 'Z', 10).unwrap();
    assert!(s.scan().blind.is_some());
    s.set_worker_pid(Some(i64::MAX));
    assert!(s.scan().blind.is_some());
}

/// On the lines a flat registry with 3.2 JSON allows (3.2, 3.3), a 3.3
/// task's dated subfolders are its own: task 77, not a 1.x task 15.
#[test]
fn the_registrys_lines_decide_how_a_path_reads() {
    let t = Tree::new();
    let dated = t.exec("77/2024/06/15");
    t.fake.add(800, &dated, 'S', 100).unwrap();
    let mut s = t.scanner(None);
    s.set_lines(&[DsLine::V3_2, DsLine::V3_3]);
    assert_eq!(bare(&s.scan().tasks), vec![task(77, 0, &[800], at(100))]);
    s.set_lines(&[DsLine::V1_3]);
    assert_eq!(bare(&s.scan().tasks), vec![task(15, 6, &[800], at(100))]);
}

/// A denied process that descends from a task's is placed by its parent
/// and does not make the scan prove nothing; one that is no task's does.
#[test]
fn a_denied_descendant_is_still_the_tasks() {
    let t = Tree::new();
    let dir = t.exec("default/1/2_3/11/12");
    let file = dir.join("11_12.sh");
    proc_(&t, 500, 1, &dir, 100, 0, &["bash", file.to_str().unwrap()]);
    proc_(&t, 501, 500, &dir, 110, 0, &["sleep", "1"]);
    proc_(&t, 502, 1, Path::new("/"), 110, 0, &["sleep", "1"]);
    struct CwdDenied(ProcFs, Vec<i32>);
    impl ProcSource for CwdDenied {
        fn pids(&mut self) -> io::Result<Vec<i32>> {
            self.0.pids()
        }
        fn cwd(&mut self, pid: i32) -> io::Result<PathBuf> {
            if self.1.contains(&pid) {
                return Err(io::Error::from_raw_os_error(13));
            }
            self.0.cwd(pid)
        }
        fn stat(&mut self, pid: i32) -> io::Result<ProcStat> {
            self.0.stat(pid)
        }
        fn cmdline(&mut self, pid: i32) -> io::Result<Vec<u8>> {
            if self.1.contains(&pid) {
                return Err(io::Error::from_raw_os_error(13));
            }
            self.0.cmdline(pid)
        }
        fn self_pid(&mut self) -> Option<i32> {
            None
        }
        fn boot_time(&mut self) -> io::Result<i64> {
            self.0.boot_time()
        }
        fn clock_ticks(&self) -> u64 {
            100
        }
        fn capabilities(&mut self) -> Option<u64> {
            Some(0)
        }
        fn blind(&mut self) -> Option<String> {
            None
        }
    }
    let src = CwdDenied(t.fake.source(), vec![501, 502]);
    let scan = Scanner::new(Box::new(src), ExecPaths::new(&t.base, Some(DsLine::V3_2))).scan();
    assert_eq!(bare(&scan.tasks), vec![task(12, 11, &[500, 501], at(100))]);
    assert_eq!((scan.unreadable, scan.unreadable_pids), (1, vec![502]));
}
