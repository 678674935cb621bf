//! DS execute paths: which task instance a working directory belongs to.
//!
//! Every command-type task process runs with its working directory set to the
//! task's execute path (reference §2.1), always under
//! `<exec_base>/exec/process/` (`exec_base` is DS's `data.basedir.path`; on 1.2
//! the parent of `process.exec.basepath`, whose default ends in `/exec`).
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
//! 3.3 path with three numeric subdirectories reads like a 1.x path; an
//! explicit line removes every ambiguity.

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

/// Maps working directories to task instances for one `exec_base`.
#[derive(Debug, Clone)]
pub struct ExecPaths {
    /// `<exec_base>/exec/process` as configured and, when it differs, with
    /// symbolic links resolved (the kernel shows the resolved path).
    roots: Vec<PathBuf>,
    exec_base: PathBuf,
    forms: &'static [PathForm],
}

impl ExecPaths {
    pub fn new(exec_base: &Path, line: Option<DsLine>) -> ExecPaths {
        let mut p = ExecPaths {
            roots: Vec::new(),
            exec_base: exec_base.to_path_buf(),
            forms: PathForm::for_line(line),
        };
        p.refresh();
        p
    }

    /// Resolves the exec base's symbolic links again: it may not exist when
    /// the agent starts (the worker creates it), or be re-pointed later.
    pub fn refresh(&mut self) {
        self.roots.clear();
        self.roots.push(self.exec_base.join("exec").join("process"));
        if let Ok(real) = std::fs::canonicalize(&self.exec_base) {
            let r = real.join("exec").join("process");
            if !self.roots.contains(&r) {
                self.roots.push(r);
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
}
