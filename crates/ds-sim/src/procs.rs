//! Real task processes for a simulated worker (SPEC §12): processes started
//! the way DS's worker starts a command-type task — with the task's execute
//! path as their working directory, under a temporary exec base (DS's
//! `data.basedir.path`) — and ended at will, so that the agent and the
//! daemon's `process_gone` can be tested against the real `/proc`.
//!
//! Each task process leads a process group of its own; ending it kills the
//! whole group (children included) and reaps the leader, so no process
//! outlives the test that started it.

use reaper_core::DsLine;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The project, definition and tenant the simulated paths use.
pub const PROJECT: i64 = 4_797_859_136_768;
pub const DEFINITION: i64 = 4_803_964_634_368;
pub const DEFINITION_VERSION: i32 = 1;
pub const TENANT: &str = "default";

/// A task's execute path under `exec_base` as `line`'s worker spells it
/// (reference §2.1; 3.3: the `exec/process/<taskInstanceId>` form of the
/// released 3.3.x/3.4.x).
pub fn execute_path(
    exec_base: &Path,
    line: DsLine,
    workflow_instance_id: i64,
    task_id: i64,
) -> PathBuf {
    let process = exec_base.join("exec").join("process");
    let (wf, task) = (workflow_instance_id.to_string(), task_id.to_string());
    let code_version = format!("{DEFINITION}_{DEFINITION_VERSION}");
    match line {
        // 1.2/1.3 use small integer ids where later lines use codes
        DsLine::V1_2 | DsLine::V1_3 => process.join("1").join("2").join(wf).join(task),
        DsLine::V2_0 | DsLine::V3_0 | DsLine::V3_1_0 => process
            .join(PROJECT.to_string())
            .join(code_version)
            .join(wf)
            .join(task),
        DsLine::V3_1 | DsLine::V3_2 => process
            .join(TENANT)
            .join(PROJECT.to_string())
            .join(code_version)
            .join(wf)
            .join(task),
        DsLine::V3_3 => process.join(task),
    }
}

/// A temporary exec base, removed when dropped.
pub struct ExecBase {
    dir: tempfile::TempDir,
}

impl ExecBase {
    pub fn new() -> io::Result<ExecBase> {
        Ok(ExecBase {
            dir: tempfile::Builder::new().prefix("ds-sim-exec-").tempdir()?,
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The task's execute path, created.
    pub fn execute_path(
        &self,
        line: DsLine,
        workflow_instance_id: i64,
        task_id: i64,
    ) -> io::Result<PathBuf> {
        let p = execute_path(self.path(), line, workflow_instance_id, task_id);
        std::fs::create_dir_all(&p)?;
        Ok(p)
    }

    /// A task process: `sleep` in the task's execute path, running until ended.
    pub fn start(
        &self,
        line: DsLine,
        workflow_instance_id: i64,
        task_id: i64,
    ) -> io::Result<TaskProcess> {
        let dir = self.execute_path(line, workflow_instance_id, task_id)?;
        TaskProcess::spawn(&dir, "sleep", &["86400"])
    }

    /// A task process that ends by itself after `d`.
    pub fn start_for(
        &self,
        line: DsLine,
        workflow_instance_id: i64,
        task_id: i64,
        d: Duration,
    ) -> io::Result<TaskProcess> {
        let dir = self.execute_path(line, workflow_instance_id, task_id)?;
        let secs = format!("{:.3}", d.as_secs_f64());
        TaskProcess::spawn(&dir, "sleep", &[&secs])
    }

    /// A task process with a child working in a subdirectory `sub` of the
    /// execute path (as a Spark or DataX launcher's children may): a shell in
    /// the execute path whose background child `cd`s into `sub`.
    pub fn start_with_child(
        &self,
        line: DsLine,
        workflow_instance_id: i64,
        task_id: i64,
        sub: &str,
    ) -> io::Result<TaskProcess> {
        let dir = self.execute_path(line, workflow_instance_id, task_id)?;
        std::fs::create_dir_all(dir.join(sub))?;
        let script = "cd \"$1\" && exec sleep 86400 & exec sleep 86400";
        TaskProcess::spawn(&dir, "sh", &["-c", script, "sh", sub])
    }

    /// A task process started as DS's worker starts a shell task: the user's
    /// `script` in the task's command file below the execute path (3.2+
    /// `<wf>_<task>.sh`, 1.3-3.1 `<wf>_<task>.command`), run as
    /// `bash <file>` from the execute path. Only this first process is sure to
    /// work there: the script may `cd` anywhere (reference §9).
    pub fn start_ds_command(
        &self,
        line: DsLine,
        workflow_instance_id: i64,
        task_id: i64,
        script: &str,
    ) -> io::Result<TaskProcess> {
        let dir = self.execute_path(line, workflow_instance_id, task_id)?;
        let file = dir.join(command_file_name(line, workflow_instance_id, task_id));
        let body = format!("#!/bin/bash\nBASEDIR=$(cd `dirname $0`; pwd)\ncd $BASEDIR\n{script}\n");
        std::fs::write(&file, body)?;
        let file = file.to_string_lossy().into_owned();
        TaskProcess::spawn(&dir, "bash", &[&file])
    }
}

/// The command file DS writes for a shell task: `<taskAppId>.sh` on 3.2+,
/// `<taskAppId>.command` before; taskAppId is `<wf>_<task>` from 2.0 on and
/// `<definitionId>_<wf>_<task>` on 1.2/1.3 (the definition id of
/// [`execute_path`]'s 1.x form is 2).
pub fn command_file_name(line: DsLine, workflow_instance_id: i64, task_id: i64) -> String {
    match line {
        DsLine::V3_2 | DsLine::V3_3 => format!("{workflow_instance_id}_{task_id}.sh"),
        DsLine::V1_2 | DsLine::V1_3 => format!("2_{workflow_instance_id}_{task_id}.command"),
        _ => format!("{workflow_instance_id}_{task_id}.command"),
    }
}

/// One running task process (and its process group).
pub struct TaskProcess {
    child: Child,
    dir: PathBuf,
    ended: bool,
}

impl TaskProcess {
    /// Starts `program args` in `dir`, leading a new process group.
    pub fn spawn(dir: &Path, program: &str, args: &[&str]) -> io::Result<TaskProcess> {
        // A program written just now (a copied binary, a script) can be held
        // open for writing by a child that another thread forked before its
        // exec closed the descriptor: exec then fails with ETXTBSY for a
        // moment. Retrying is the usual cure; nothing else is wrong.
        let mut tries = 0;
        let child = loop {
            let spawned = Command::new(program)
                .args(args)
                .current_dir(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn();
            match spawned {
                Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        Ok(TaskProcess {
            child,
            dir: dir.to_path_buf(),
            ended: false,
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The working directory it was started in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the leader still runs.
    pub fn is_running(&mut self) -> bool {
        !self.ended && matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process group with SIGKILL — the task process dies, as when
    /// the OOM killer or an operator's `kill -9` ends it — and reaps the
    /// leader, so it is gone from the process table, not a zombie.
    pub fn kill(&mut self) -> io::Result<()> {
        if self.ended {
            return Ok(());
        }
        self.ended = true;
        let group = format!("-{}", self.child.id());
        // kill(1) signals the whole group; std's Child::kill only the leader
        let status = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            let _ = self.child.kill();
        }
        self.child.wait().map(|_| ())
    }
}

impl Drop for TaskProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// (utime + stime in clock ticks, VmRSS in kB, VmHWM in kB) of a process,
/// for the benchmarks.
pub fn proc_sample(pid: u32) -> io::Result<(u64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // fields after the parenthesised command name
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((ticks, kb("VmRSS:"), kb("VmHWM:")))
}

/// Clock ticks a second (`getconf CLK_TCK`; 100 when it cannot be asked).
pub fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The pid of a stand-in for a worker JVM on this host, started once per
/// test process ([`JvmStandIn`]). The simulated heartbeats carry it as
/// `processId`, because an agent sees its worker only as a live `java`
/// process (SPEC §12). Where it cannot be started, the test process's pid.
pub fn jvm_stand_in_pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(|| {
        JvmStandIn::start(&[])
            .map(|j| {
                let pid = j.pid();
                // lives as long as the test process (it ends within a second
                // of it): never dropped
                std::mem::forget(j);
                pid as u32
            })
            .unwrap_or_else(|_| std::process::id())
    })
}

/// A process named `java` standing in for a worker JVM: a copy of
/// `/bin/sh` run as `<temp>/java` (so its `comm` is `java`, as a real JVM's
/// is), leading a process group of its own, with one task process per
/// `task_dirs` entry as its child (`sleep` working in that directory, as a
/// worker JVM starts its task processes). It ends when the test process
/// ends; on drop its whole group is killed.
pub struct JvmStandIn {
    process: TaskProcess,
    _dir: tempfile::TempDir,
}

impl JvmStandIn {
    pub fn start(task_dirs: &[&Path]) -> io::Result<JvmStandIn> {
        let dir = tempfile::Builder::new().prefix("ds-sim-jvm-").tempdir()?;
        let java = dir.path().join("java");
        std::fs::copy("/bin/sh", &java)?;
        let script = "for d in \"$@\"; do (cd \"$d\" && exec sleep 86400) & done; \
                      while kill -0 $PPID 2>/dev/null; do sleep 1; done";
        let mut args: Vec<String> = vec!["-c".into(), script.into(), "java".into()];
        args.extend(task_dirs.iter().map(|d| d.to_string_lossy().into_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let program = java.to_string_lossy().into_owned();
        let process = TaskProcess::spawn(dir.path(), &program, &args)?;
        Ok(JvmStandIn { process, _dir: dir })
    }

    pub fn pid(&self) -> i32 {
        self.process.pid()
    }

    /// The stand-in's children working in `dir` (its task processes), once
    /// they are there.
    pub fn children_in(&self, dir: &Path) -> Vec<i32> {
        let me = self.pid();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
                ppid == Some(me)
                    && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir)
            })
            .collect()
    }
}

/// A worker-JVM stand-in that starts task processes when asked, as a worker
/// JVM does over its life (the soak's second worker on a shared host): a
/// process named `java` (a copy of `/bin/sh`), leading a process group of
/// its own, that reads one directory a line from its stdin and starts a
/// child there (`sleep` with that working directory). It ends with its
/// stdin (the simulator); [`JvmWorker::kill`] or drop kills its whole group.
pub struct JvmWorker {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    ended: bool,
    _dir: tempfile::TempDir,
}

impl JvmWorker {
    pub fn start() -> io::Result<JvmWorker> {
        let dir = tempfile::Builder::new().prefix("ds-sim-jvm-").tempdir()?;
        let java = dir.path().join("java");
        std::fs::copy("/bin/sh", &java)?;
        // `$!` is the subshell's pid, which `exec` keeps for the task process
        let script = "while read -r d; do (cd \"$d\" && exec sleep 86400) & echo $!; done";
        let mut tries = 0;
        let mut child = loop {
            let spawned = Command::new(&java)
                .args(["-c", script])
                .current_dir(dir.path())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn();
            match spawned {
                // see TaskProcess::spawn
                Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        Ok(JvmWorker {
            child,
            stdin,
            stdout: std::io::BufReader::new(stdout),
            ended: false,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Starts a task process (a child of the stand-in) working in `dir`.
    pub fn run_in(&mut self, dir: &Path) -> io::Result<ChildProcess> {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "{}", dir.display())?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let pid: i32 = line
            .trim()
            .parse()
            .map_err(|_| io::Error::other(format!("the stand-in said {line:?}")))?;
        let start_ticks = start_ticks(pid)
            .ok_or_else(|| io::Error::other(format!("task process {pid} gone at once")))?;
        Ok(ChildProcess { pid, start_ticks })
    }

    /// Kills the stand-in and every task process it started (its group).
    pub fn kill(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for JvmWorker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A task process another process started (a [`JvmWorker`]'s child),
/// known by pid and start time, so that a reused pid is never taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildProcess {
    pub pid: i32,
    pub start_ticks: u64,
}

impl ChildProcess {
    /// Whether it still runs (a zombie does not).
    pub fn is_running(&self) -> bool {
        start_ticks(self.pid) == Some(self.start_ticks)
    }

    /// SIGKILL, if it is still the same process.
    pub fn kill(&self) {
        if self.is_running() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A live (not zombie) process's start time in clock ticks after boot.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    if matches!(f.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    // field 22 of stat; the first after the name is field 3
    f.get(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cwd_of(pid: i32) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
    }

    /// The pids whose parent is `pid`.
    fn children(pid: i32) -> Vec<i32> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return vec![];
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .ok()
                    .and_then(|s| {
                        let rest = &s[s.rfind(')')? + 1..];
                        rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                    })
                    == Some(pid)
            })
            .collect()
    }

    #[test]
    fn every_lines_execute_path() {
        let b = Path::new("/tmp/ds");
        let p = |l| execute_path(b, l, 11, 12).display().to_string();
        assert_eq!(p(DsLine::V1_3), "/tmp/ds/exec/process/1/2/11/12");
        assert_eq!(
            p(DsLine::V2_0),
            "/tmp/ds/exec/process/4797859136768/4803964634368_1/11/12"
        );
        assert_eq!(
            p(DsLine::V3_2),
            "/tmp/ds/exec/process/default/4797859136768/4803964634368_1/11/12"
        );
        assert_eq!(p(DsLine::V3_3), "/tmp/ds/exec/process/12");
    }

    #[test]
    fn a_task_process_runs_in_its_execute_path_until_killed() {
        let base = ExecBase::new().unwrap();
        let mut t = base.start(DsLine::V3_2, 11, 12).unwrap();
        let dir = std::fs::canonicalize(base.execute_path(DsLine::V3_2, 11, 12).unwrap()).unwrap();
        assert_eq!(cwd_of(t.pid()), Some(dir));
        assert!(t.is_running());
        let pid = t.pid();
        t.kill().unwrap();
        assert!(!t.is_running());
        assert_eq!(cwd_of(pid), None, "reaped, not a zombie");
    }

    #[test]
    fn a_child_in_a_subdirectory_dies_with_its_task() {
        let base = ExecBase::new().unwrap();
        let mut t = base.start_with_child(DsLine::V1_3, 5, 6, "sub").unwrap();
        let dir = std::fs::canonicalize(t.dir()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let kids = loop {
            let k: Vec<i32> = children(t.pid())
                .into_iter()
                .filter(|k| cwd_of(*k) == Some(dir.join("sub")))
                .collect();
            if !k.is_empty() || std::time::Instant::now() > deadline {
                break k;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(kids.len(), 1, "one child in sub/");
        assert_eq!(cwd_of(t.pid()), Some(dir));
        t.kill().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // the orphaned child is killed too (it may linger as a zombie until its new parent reaps it)
        while std::time::Instant::now() < deadline && cwd_of(kids[0]).is_some() {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(cwd_of(kids[0]), None);
    }

    #[test]
    fn a_timed_task_ends_by_itself() {
        let base = ExecBase::new().unwrap();
        let mut t = base
            .start_for(DsLine::V2_0, 1, 2, Duration::from_millis(100))
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while t.is_running() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!t.is_running());
    }

    #[test]
    fn a_jvm_worker_starts_task_processes_as_its_children_when_asked() {
        let base = ExecBase::new().unwrap();
        let dir = base.execute_path(DsLine::V3_2, 3, 4).unwrap();
        let mut jvm = JvmWorker::start().unwrap();
        let t = jvm.run_in(&dir).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while cwd_of(t.pid) != Some(dir.clone()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(cwd_of(t.pid), Some(dir));
        assert!(children(jvm.pid()).contains(&t.pid));
        assert!(t.is_running());
        t.kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while t.is_running() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!t.is_running(), "killed (a zombie counts as gone)");
        let other = jvm
            .run_in(&base.execute_path(DsLine::V3_2, 3, 5).unwrap())
            .unwrap();
        jvm.kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while other.is_running() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!other.is_running(), "dies with the stand-in");
    }
}
