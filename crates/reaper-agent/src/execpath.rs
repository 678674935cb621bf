//! DS execute paths: which task instance a working directory, or a command
//! file on a command line, belongs to.
//!
//! Every command-type task process starts with its working directory set to
//! the task's execute path (reference §2.1), always in the process folder
//! `<exec_base>/exec/process/` (`exec_base` is DS's `data.basedir.path`; on
//! 1.2 the parent of `process.exec.basepath`, whose default ends in `/exec`;
//! `agent.process_dir` names the folder directly where it does not).
//! Below `process/` each line spells it its own way (DS `FileUtils`):
//!
//! | line | below `<exec_base>/exec/process/` |
//! |---|---|
//! | 1.2, 1.3 | `<projectId>/<processDefinitionId>/<processInstanceId>/<taskInstanceId>` |
//! | 2.0, 3.0, 3.1.0 | `<projectCode>/<definitionCode>_<version>/<processInstanceId>/<taskInstanceId>` |
//! | 3.1.1+, 3.2, 3.3 before DS #16836 | `<tenant>/<projectCode>/<definitionCode>_<version>/<workflowInstanceId>/<taskInstanceId>` |
//! | 3.3.x / 3.4.x (DS #16836, Nov 2024) | `<taskInstanceId>` |
//!
//! In the first three the last two segments are the workflow and the task
//! instance ids. DS #16836 ("remove projectcode, workflow instance/xx in task
//! instance working directory path", `FileUtils.getTaskInstanceWorkingDirectory(int)`)
//! leaves only the task instance id: there the workflow instance id is unknown
//! and reported as 0. A process whose working directory lies below an
//! execute path (a task's child that changed into a subdirectory) belongs to
//! the same task. The forms cannot be confused with one another, but a
//! 3.3 path with three numeric subdirectories reads like a 1.x path: the
//! agent reads paths as the lines its registry allows ([`ExecPaths::set_lines`]),
//! never by their shape alone.
//!
//! A script may `cd` anywhere, so a working directory is not enough: the
//! command file DS writes into the execute path and runs (`bash <path>/<appId>.sh`
//! and the like, see [`ExecPaths::command_file`]) names the task too.

use reaper_core::DsLine;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The task instance a working directory belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskRef {
    pub task_id: i64,
    /// 0 when the path does not carry it (3.3's `<taskInstanceId>` form).
    pub workflow_instance_id: i64,
}

/// One spelling of the execute path below `exec/process/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathForm {
    /// 1.2, 1.3: `<projectId>/<definitionId>/<wf>/<task>`.
    Ids,
    /// 2.0 – 3.1.0: `<projectCode>/<definitionCode>_<version>/<wf>/<task>`.
    Codes,
    /// 3.1.1 – 3.3: `<tenant>/<projectCode>/<definitionCode>_<version>/<wf>/<task>`.
    Tenant,
    /// 3.3 since DS #16836: `<task>`.
    TaskOnly,
}

impl PathForm {
    /// The forms a line may use, most specific first; all of them for `None`.
    pub fn for_line(line: Option<DsLine>) -> &'static [PathForm] {
        use PathForm::*;
        match line {
            None => &[Tenant, Codes, Ids, TaskOnly],
            Some(DsLine::V1_2 | DsLine::V1_3) => &[Ids],
            Some(DsLine::V2_0 | DsLine::V3_0 | DsLine::V3_1_0) => &[Codes],
            Some(DsLine::V3_1 | DsLine::V3_2) => &[Tenant],
            Some(DsLine::V3_3) => &[Tenant, TaskOnly],
        }
    }

    /// The task of `segs` (the segments below `process/`), if they have this form.
    fn parse(self, segs: &[&[u8]]) -> Option<TaskRef> {
        let task = |wf: &[u8], task: &[u8]| {
            Some(TaskRef {
                task_id: id(task)?,
                workflow_instance_id: id(wf)?,
            })
        };
        match (self, segs) {
            (PathForm::Ids, [p, d, wf, t, ..]) if number(p) && number(d) => task(wf, t),
            (PathForm::Codes, [p, cv, wf, t, ..]) if number(p) && code_version(cv) => task(wf, t),
            (PathForm::Tenant, [tenant, p, cv, wf, t, ..])
                if !tenant.is_empty() && number(p) && code_version(cv) =>
            {
                task(wf, t)
            }
            (PathForm::TaskOnly, [t, ..]) => Some(TaskRef {
                task_id: id(t)?,
                workflow_instance_id: 0,
            }),
            _ => None,
        }
    }
}

impl PathForm {
    /// How many segments below `process/` the execute path has.
    fn depth(self) -> usize {
        match self {
            PathForm::Ids | PathForm::Codes => 4,
            PathForm::Tenant => 5,
            PathForm::TaskOnly => 1,
        }
    }
}

/// A task's execute path as read from a working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskDir {
    pub task: TaskRef,
    /// The execute path itself (where `appInfo.log` is).
    pub dir: PathBuf,
    pub form: PathForm,
    /// `<definitionId>` (1.x) or `<definitionCode>_<version>` (2.0+); None
    /// where the path does not carry it (3.3's `<taskInstanceId>` form).
    pub definition: Option<String>,
}

fn number(s: &[u8]) -> bool {
    !s.is_empty() && s.len() <= 19 && s.iter().all(u8::is_ascii_digit)
}

/// A positive DS id.
fn id(s: &[u8]) -> Option<i64> {
    if !number(s) {
        return None;
    }
    std::str::from_utf8(s)
        .ok()?
        .parse::<i64>()
        .ok()
        .filter(|v| *v > 0)
}

fn code_version(s: &[u8]) -> bool {
    match s.iter().position(|b| *b == b'_') {
        Some(i) => number(&s[..i]) && number(&s[i + 1..]),
        None => false,
    }
}

/// How a line names the command file DS writes into the execute path and
/// runs (verified in DS's source per tag; taskAppId is set by the worker's
/// task runner: 1.2.1 `TaskScheduleThread`, 1.3.9 `TaskExecuteThread`
/// `<processDefineId>_<processInstanceId>_<taskInstanceId>`; 2.0.9
/// `TaskExecuteThread`, 3.1.9 `WorkerTaskExecuteRunnable`, 3.2.2 and dev
/// `WorkerTaskExecutor` `<workflowInstanceId>_<taskInstanceId>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommandFiles {
    /// 1.2, 1.3: `ShellCommandExecutor` `<appId>.command` (run as `sh <file>`,
    /// `sudo -u <tenant> sh <file>`), `PythonCommandExecutor`
    /// `py_<appId>.command`, the shell task's `<appId>_node.sh`, which the
    /// `.command` runs; appId has three parts.
    Legacy,
    /// 2.0 – 3.1: the same files, appId `<wf>_<task>`.
    Command,
    /// 3.2+: `BaseLinuxShellInterceptorBuilder` `<appId>.sh`, run as
    /// `bash <file>` or `sudo -u <tenant> -i <file>`.
    Shell,
}

impl CommandFiles {
    fn of(line: DsLine) -> CommandFiles {
        match line {
            DsLine::V1_2 | DsLine::V1_3 => CommandFiles::Legacy,
            DsLine::V2_0 | DsLine::V3_0 | DsLine::V3_1_0 | DsLine::V3_1 => CommandFiles::Command,
            DsLine::V3_2 | DsLine::V3_3 => CommandFiles::Shell,
        }
    }

    /// `(workflow instance, task instance)` of a command file's name.
    fn parse(self, name: &[u8]) -> Option<(i64, i64)> {
        let app_id = match self {
            CommandFiles::Legacy | CommandFiles::Command => {
                if let Some(stem) = name.strip_suffix(b".command") {
                    stem.strip_prefix(b"py_").unwrap_or(stem)
                } else {
                    name.strip_suffix(b"_node.sh")?
                }
            }
            CommandFiles::Shell => name.strip_suffix(b".sh")?,
        };
        let parts: Vec<&[u8]> = app_id.split(|b| *b == b'_').collect();
        match (self, parts.as_slice()) {
            (CommandFiles::Legacy, [def, wf, task]) => {
                id(def)?;
                Some((id(wf)?, id(task)?))
            }
            (CommandFiles::Command | CommandFiles::Shell, [wf, task]) => Some((id(wf)?, id(task)?)),
            _ => None,
        }
    }
}

/// Maps working directories and command lines to task instances for one
/// process folder.
#[derive(Debug, Clone)]
pub struct ExecPaths {
    /// The process folder as configured and, when it differs, with symbolic
    /// links resolved (the kernel shows the resolved path).
    roots: Vec<PathBuf>,
    /// `<exec_base>/exec/process`, or `agent.process_dir`.
    folder: PathBuf,
    forms: Vec<PathForm>,
    files: Vec<CommandFiles>,
}

impl ExecPaths {
    /// The process folder `<exec_base>/exec/process`, read as `line`'s (None:
    /// every line's until [`ExecPaths::set_lines`] narrows it).
    pub fn new(exec_base: &Path, line: Option<DsLine>) -> ExecPaths {
        ExecPaths::with_folder(exec_base.join("exec").join("process"), line)
    }

    /// The process folder named directly (`agent.process_dir`: 1.2's
    /// `process.exec.basepath` need not end in `exec`).
    pub fn with_folder(folder: PathBuf, line: Option<DsLine>) -> ExecPaths {
        let mut p = ExecPaths {
            roots: Vec::new(),
            folder,
            forms: Vec::new(),
            files: Vec::new(),
        };
        match line {
            Some(l) => p.set_lines(&[l]),
            None => p.set_lines(&[]),
        };
        p.refresh();
        p
    }

    /// Reads paths and command files as those of `lines` (the lines the
    /// registry's layout and heartbeat format allow); every line's when
    /// empty. True when that changes how anything reads.
    pub fn set_lines(&mut self, lines: &[DsLine]) -> bool {
        let before = (self.forms.clone(), self.files.clone());
        let lines: Vec<DsLine> = if lines.is_empty() {
            DsLine::ALL.to_vec()
        } else {
            lines.to_vec()
        };
        // most specific first, so that no shorter form shadows a longer one
        self.forms = PathForm::for_line(None)
            .iter()
            .copied()
            .filter(|f| {
                lines
                    .iter()
                    .any(|l| PathForm::for_line(Some(*l)).contains(f))
            })
            .collect();
        self.files.clear();
        for l in lines {
            let f = CommandFiles::of(l);
            if !self.files.contains(&f) {
                self.files.push(f);
            }
        }
        before != (self.forms.clone(), self.files.clone())
    }

    /// The path forms read now.
    pub fn forms(&self) -> &[PathForm] {
        &self.forms
    }

    /// The process folder as configured.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Whether the process folder exists (as a directory) now.
    pub fn folder_exists(&self) -> bool {
        self.roots.iter().any(|r| r.is_dir())
    }

    /// Resolves the folder's symbolic links again: it may not exist when
    /// the agent starts (the worker creates it), or be re-pointed later.
    pub fn refresh(&mut self) {
        self.roots.clear();
        self.roots.push(self.folder.clone());
        // the deepest part that exists, resolved, with the rest appended
        let mut rest = Vec::new();
        let mut cur = self.folder.as_path();
        loop {
            if let Ok(real) = std::fs::canonicalize(cur) {
                let r = rest.iter().rev().fold(real, |p: PathBuf, n| p.join(n));
                if !self.roots.contains(&r) {
                    self.roots.push(r);
                }
                break;
            }
            match (cur.parent(), cur.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    cur = parent;
                }
                _ => break,
            }
        }
    }

    /// The task whose execute path `cwd` is, or lies below; None for any
    /// other directory. A directory deleted while a process still sits in it
    /// reads `<path> (deleted)`: it still counts.
    pub fn task_of(&self, cwd: &Path) -> Option<TaskRef> {
        let bytes = cwd.as_os_str().as_bytes();
        let bytes = bytes.strip_suffix(b" (deleted)").unwrap_or(bytes);
        let cwd = Path::new(OsStr::from_bytes(bytes));
        let rest = self.roots.iter().find_map(|r| cwd.strip_prefix(r).ok())?;
        let segs: Vec<&[u8]> = rest
            .iter()
            .map(|s| s.as_bytes())
            .filter(|s| !s.is_empty() && *s != b".")
            .collect();
        self.forms.iter().find_map(|f| f.parse(&segs))
    }

    /// The execute path `cwd` is, or lies below, with its task and what the
    /// path says of the workflow definition (for the task's log, SPEC §17).
    pub fn task_dir(&self, cwd: &Path) -> Option<TaskDir> {
        let bytes = cwd.as_os_str().as_bytes();
        let bytes = bytes.strip_suffix(b" (deleted)").unwrap_or(bytes);
        let cwd = Path::new(OsStr::from_bytes(bytes));
        let (root, rest) = self
            .roots
            .iter()
            .find_map(|r| cwd.strip_prefix(r).ok().map(|rest| (r, rest)))?;
        let segs: Vec<&[u8]> = rest
            .iter()
            .map(|s| s.as_bytes())
            .filter(|s| !s.is_empty() && *s != b".")
            .collect();
        self.forms.iter().find_map(|f| {
            let task = f.parse(&segs)?;
            let depth = f.depth();
            let dir = segs[..depth]
                .iter()
                .fold(root.clone(), |p, s| p.join(OsStr::from_bytes(s)));
            let definition = match f {
                PathForm::Ids | PathForm::Codes => Some(segs[1]),
                PathForm::Tenant => Some(segs[2]),
                PathForm::TaskOnly => None,
            }
            .and_then(|s| std::str::from_utf8(s).ok())
            .map(str::to_string);
            Some(TaskDir {
                task,
                dir,
                form: *f,
                definition,
            })
        })
    }

    /// The task whose command file `arg` (one argument of a command line)
    /// is: the file's name is the line's command file of a task, and it lies
    /// in that same task's execute path. `sudo -i` hands its command to the
    /// login shell with every character but alphanumerics, `_`, `-` and `$`
    /// escaped by a backslash: those are undone first.
    pub fn command_file(&self, arg: &[u8]) -> Option<TaskRef> {
        if !arg.contains(&b'/') || arg.len() > 4096 {
            return None;
        }
        let unescaped;
        let arg = if arg.contains(&b'\\') {
            unescaped = unescape(arg);
            &unescaped[..]
        } else {
            arg
        };
        if arg.first() != Some(&b'/') {
            return None;
        }
        let path = Path::new(OsStr::from_bytes(arg));
        let name = path.file_name()?.as_bytes();
        let (wf, task) = self.files.iter().find_map(|f| f.parse(name))?;
        let dir = self.task_of(path.parent()?)?;
        if dir.task_id != task || (dir.workflow_instance_id != 0 && dir.workflow_instance_id != wf)
        {
            return None;
        }
        Some(TaskRef {
            task_id: task,
            workflow_instance_id: wf,
        })
    }
}

/// `\x` → `x`, as a shell reads an unquoted word.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut it = s.iter();
    while let Some(b) = it.next() {
        if *b == b'\\' {
            if let Some(n) = it.next() {
                out.push(*n);
            }
        } else {
            out.push(*b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(task_id: i64, workflow_instance_id: i64) -> Option<TaskRef> {
        Some(TaskRef {
            task_id,
            workflow_instance_id,
        })
    }

    fn auto() -> ExecPaths {
        ExecPaths::new(Path::new("/tmp/dolphinscheduler"), None)
    }

    #[test]
    fn every_lines_form() {
        let p = auto();
        let of = |s: &str| p.task_of(Path::new(s));
        // 1.2 (process.exec.basepath = /tmp/dolphinscheduler/exec) and 1.3
        assert_eq!(
            of("/tmp/dolphinscheduler/exec/process/2/10/229/496"),
            t(496, 229)
        );
        // 2.0.9, 3.0, 3.1.0
        assert_eq!(
            of("/tmp/dolphinscheduler/exec/process/4797859136768/4803964634368_2/2/4"),
            t(4, 2)
        );
        // 3.1.1+, 3.2.2, early 3.3
        assert_eq!(
            of("/tmp/dolphinscheduler/exec/process/default/4797859136768/4803964634368_12/1001/20002"),
            t(20002, 1001)
        );
        // a numeric tenant is still a tenant
        assert_eq!(
            of("/tmp/dolphinscheduler/exec/process/42/4797859136768/4803964634368_1/7/8"),
            t(8, 7)
        );
        // 3.3 since DS #16836
        assert_eq!(of("/tmp/dolphinscheduler/exec/process/77"), t(77, 0));
    }

    #[test]
    fn below_an_execute_path_counts_and_deleted_directories_too() {
        let p = auto();
        let of = |s: &str| p.task_of(Path::new(s));
        assert_eq!(
            of("/tmp/dolphinscheduler/exec/process/default/1/2_3/11/12/spark/conf"),
            t(12, 11)
        );
        assert_eq!(
            of("/tmp/dolphinscheduler/exec/process/1/2_3/11/12/x"),
            t(12, 11)
        );
        assert_eq!(
            of("/tmp/dolphinscheduler/exec/process/1/2/11/12/x/y"),
            t(12, 11)
        );
        assert_eq!(
            of("/tmp/dolphinscheduler/exec/process/default/1/2_3/11/12 (deleted)"),
            t(12, 11)
        );
        assert_eq!(of("/tmp/dolphinscheduler/exec/process/77/work"), t(77, 0));
    }

    #[test]
    fn other_directories_are_no_task() {
        let p = auto();
        for s in [
            "/",
            "/tmp",
            "/tmp/dolphinscheduler",
            "/tmp/dolphinscheduler/exec",
            "/tmp/dolphinscheduler/exec/process",
            "/tmp/dolphinscheduler2/exec/process/1/2/3/4",
            "/tmp/dolphinscheduler/exec/processes/1/2/3/4",
            "/tmp/dolphinscheduler/exec/process/default",
            "/tmp/dolphinscheduler/exec/process/default/1/2_3/11",
            "/tmp/dolphinscheduler/exec/process/0",
            "/tmp/dolphinscheduler/exec/process/-5",
            "/tmp/dolphinscheduler/exec/process/99999999999999999999",
            "/opt/dolphinscheduler/exec/process/1/2/3/4",
        ] {
            assert_eq!(p.task_of(Path::new(s)), None, "{s}");
        }
    }

    #[test]
    fn an_explicit_line_reads_only_its_forms() {
        let base = Path::new("/data/ds");
        let v13 = ExecPaths::new(base, Some(DsLine::V1_3));
        let v32 = ExecPaths::new(base, Some(DsLine::V3_2));
        let v33 = ExecPaths::new(base, Some(DsLine::V3_3));
        let ids = Path::new("/data/ds/exec/process/1/2/3/4");
        let tenant = Path::new("/data/ds/exec/process/t/1/2_3/4/5");
        let only = Path::new("/data/ds/exec/process/9");
        assert_eq!(v13.task_of(ids), t(4, 3));
        assert_eq!(v13.task_of(tenant), None);
        assert_eq!(v13.task_of(only), None);
        assert_eq!(v32.task_of(tenant), t(5, 4));
        assert_eq!(v32.task_of(ids), None);
        assert_eq!(v33.task_of(tenant), t(5, 4));
        assert_eq!(v33.task_of(only), t(9, 0));
        // on 3.3 a task's numeric subdirectories stay the task's
        assert_eq!(v33.task_of(ids), t(1, 0));
        // auto reads that one as a 1.x path: the documented ambiguity
        assert_eq!(ExecPaths::new(base, None).task_of(ids), t(4, 3));
    }

    #[test]
    fn a_symlinked_exec_base_matches_its_real_path() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let p = ExecPaths::new(&link, None);
        assert_eq!(p.task_of(&link.join("exec/process/1/2/3/4")), t(4, 3));
        let real = std::fs::canonicalize(&real).unwrap();
        assert_eq!(p.task_of(&real.join("exec/process/1/2/3/4")), t(4, 3));

        // a link created after the agent started is followed from the next refresh
        let late = dir.path().join("late");
        let mut p = ExecPaths::new(&late, None);
        assert_eq!(p.task_of(&real.join("exec/process/1/2/3/4")), None);
        std::os::unix::fs::symlink(&real, &late).unwrap();
        p.refresh();
        assert_eq!(p.task_of(&real.join("exec/process/1/2/3/4")), t(4, 3));
    }

    /// The line detected from the registry decides how a path reads: on
    /// 3.2/3.3 (flat layout, 3.2 JSON) a 3.3 task's dated subfolders are its
    /// own, not a 1.x path of task 15.
    #[test]
    fn detected_lines_decide_how_a_path_reads() {
        let base = Path::new("/data/ds");
        let dated = Path::new("/data/ds/exec/process/77/2024/06/15");
        let mut p = ExecPaths::new(base, None);
        p.set_lines(&[DsLine::V3_2, DsLine::V3_3]);
        assert_eq!(p.forms(), &[PathForm::Tenant, PathForm::TaskOnly]);
        assert_eq!(p.task_of(dated), t(77, 0));
        assert_eq!(
            p.task_of(Path::new("/data/ds/exec/process/t/1/2_3/4/5/x")),
            t(5, 4)
        );
        p.set_lines(&[DsLine::V1_3]);
        assert_eq!(p.task_of(dated), t(15, 6));
        p.set_lines(&[DsLine::V2_0, DsLine::V3_0, DsLine::V3_1_0]);
        assert_eq!(p.forms(), &[PathForm::Codes]);
        assert_eq!(p.task_of(dated), None);
        // nothing known: every form
        p.set_lines(&[]);
        assert_eq!(p.forms().len(), 4);
    }

    #[test]
    fn command_files_of_every_line() {
        let base = Path::new("/data/ds");
        let on = |l: DsLine| ExecPaths::new(base, Some(l));
        let cf = |p: &ExecPaths, s: &str| p.command_file(s.as_bytes());
        // 3.2: bash <path>/<wf>_<task>.sh, sudo -u <tenant> -i <file>
        let v32 = on(DsLine::V3_2);
        let dir32 = "/data/ds/exec/process/default/1/2_3/11/12";
        assert_eq!(cf(&v32, &format!("{dir32}/11_12.sh")), t(12, 11));
        assert_eq!(cf(&v32, &format!("{dir32}/11_12.command")), None);
        assert_eq!(
            cf(&v32, &format!("{dir32}/11_13.sh")),
            None,
            "another task's name"
        );
        assert_eq!(
            cf(&v32, &format!("{dir32}/10_12.sh")),
            None,
            "another workflow"
        );
        assert_eq!(cf(&v32, "11_12.sh"), None, "relative");
        assert_eq!(cf(&v32, "/tmp/11_12.sh"), None, "not in an execute path");
        // sudo -i escapes what the login shell reads
        let escaped = format!("{dir32}/11_12.sh")
            .replace('/', "\\/")
            .replace('.', "\\.");
        assert_eq!(cf(&v32, &escaped), t(12, 11));
        // 3.3: the path is <task>, the name brings the workflow
        let v33 = on(DsLine::V3_3);
        assert_eq!(cf(&v33, "/data/ds/exec/process/77/5_77.sh"), t(77, 5));
        assert_eq!(cf(&v33, "/data/ds/exec/process/77/5_78.sh"), None);
        // 2.0 - 3.1: <wf>_<task>.command and the shell task's _node.sh
        let v20 = on(DsLine::V2_0);
        let dir20 = "/data/ds/exec/process/1/2_3/21/22";
        assert_eq!(cf(&v20, &format!("{dir20}/21_22.command")), t(22, 21));
        assert_eq!(cf(&v20, &format!("{dir20}/21_22_node.sh")), t(22, 21));
        assert_eq!(cf(&v20, &format!("{dir20}/21_22.sh")), None);
        // 1.2/1.3: appId is <definition>_<wf>_<task>; Python's py_ prefix
        let v13 = on(DsLine::V1_3);
        let dir13 = "/data/ds/exec/process/1/2/31/32";
        assert_eq!(cf(&v13, &format!("{dir13}/2_31_32.command")), t(32, 31));
        assert_eq!(cf(&v13, &format!("{dir13}/2_31_32_node.sh")), t(32, 31));
        assert_eq!(cf(&v13, &format!("{dir13}/py_2_31_32.command")), t(32, 31));
        assert_eq!(cf(&v13, &format!("{dir13}/31_32.command")), None);
        // garbage never panics
        for junk in [
            "",
            "/",
            "//",
            "/data/ds/exec/process/1/2/31/32/",
            "\\",
            "/a\\",
        ] {
            assert_eq!(cf(&v13, junk), None, "{junk:?}");
        }
    }

    #[test]
    fn a_process_folder_named_directly() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("ds-exec-1.2/process");
        let p = ExecPaths::with_folder(folder.clone(), Some(DsLine::V1_2));
        assert!(!p.folder_exists());
        assert_eq!(p.task_of(&folder.join("1/2/3/4")), t(4, 3));
        assert_eq!(p.task_of(&dir.path().join("exec/process/1/2/3/4")), None);
        std::fs::create_dir_all(&folder).unwrap();
        assert!(p.folder_exists());
    }
}
