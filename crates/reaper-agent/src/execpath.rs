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
mod tests;
