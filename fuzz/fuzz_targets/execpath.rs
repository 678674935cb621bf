//! The agent's execute paths (every line's layout) and command files. The
//! input: a line selector byte, then lines of text, each read as a working
//! directory and as a command-line argument. No input panics; a directory
//! that names a task still does with a subdirectory below it and when the
//! kernel shows it deleted; the line's command file in it names the same
//! task, also as `sudo -i` escapes it. The same bytes also make a path in
//! the line's own layout from ids, which must read back as those ids.
#![no_main]
// execpath.rs is pure (std and reaper-core): compiled in here, so that the
// fuzz build does not pull in the agent's runtime (axum, etcd, ZooKeeper).
#[allow(dead_code)]
#[path = "../../crates/reaper-agent/src/execpath.rs"]
mod execpath;

use execpath::{ExecPaths, PathForm, TaskRef};
use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use reaper_core::DsLine;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// DS's default `data.basedir.path`.
const BASE: &str = "/tmp/dolphinscheduler";

/// `sudo -i`'s escaping of its command for the login shell.
fn sudo_escape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() * 2);
    for b in s {
        if !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'$')) {
            out.push(b'\\');
        }
        out.push(*b);
    }
    out
}

/// The line's command file of `(wf, task)`, one of its kinds.
fn command_file_name(line: DsLine, kind: u8, def: i64, wf: i64, task: i64) -> String {
    match line {
        DsLine::V1_2 | DsLine::V1_3 => match kind % 3 {
            0 => format!("{def}_{wf}_{task}.command"),
            1 => format!("py_{def}_{wf}_{task}.command"),
            _ => format!("{def}_{wf}_{task}_node.sh"),
        },
        DsLine::V2_0 | DsLine::V3_0 | DsLine::V3_1_0 | DsLine::V3_1 => match kind % 3 {
            0 => format!("{wf}_{task}.command"),
            1 => format!("py_{wf}_{task}.command"),
            _ => format!("{wf}_{task}_node.sh"),
        },
        DsLine::V3_2 | DsLine::V3_3 => format!("{wf}_{task}.sh"),
    }
}

/// What must hold of an execute path `exec` that reads as `t`.
fn check_exec_path(paths: &ExecPaths, line: Option<DsLine>, exec: &Path, t: TaskRef, kind: u8) {
    assert!(t.task_id > 0 && t.workflow_instance_id >= 0, "{t:?}");
    // a child that changed into a subdirectory (one that cannot read as an id)
    assert_eq!(paths.task_of(&exec.join("dsub").join("x")), Some(t));
    let mut deleted = exec.as_os_str().to_os_string();
    deleted.push(" (deleted)");
    assert_eq!(paths.task_of(Path::new(&deleted)), Some(t));
    let Some(line) = line else { return };
    let wf = if t.workflow_instance_id == 0 {
        7
    } else {
        t.workflow_instance_id
    };
    let file = exec.join(command_file_name(line, kind, 3, wf, t.task_id));
    let file = file.as_os_str().as_bytes();
    if file.len() > 2000 || !file.starts_with(b"/") || file.contains(&b'\\') {
        return;
    }
    let want = TaskRef {
        task_id: t.task_id,
        workflow_instance_id: wf,
    };
    assert_eq!(
        paths.command_file(file),
        Some(want),
        "{}",
        String::from_utf8_lossy(file)
    );
    assert_eq!(paths.command_file(&sudo_escape(file)), Some(want));
}

fuzz_target!(|data: &[u8]| {
    let Some((sel, text)) = data.split_first() else {
        return;
    };
    let line = (*sel < 0xf0).then(|| DsLine::ALL[*sel as usize % DsLine::ALL.len()]);
    let paths = ExecPaths::new(Path::new(BASE), line);
    let folder = paths.folder().to_path_buf();

    for l in text.split(|b| *b == b'\n').take(16) {
        for cwd in [
            PathBuf::from(OsStr::from_bytes(l)),
            folder.join(OsStr::from_bytes(l)),
        ] {
            // the kernel's mark of a deleted directory ends the path
            let deleted = cwd.as_os_str().as_bytes().ends_with(b" (deleted)");
            if let Some(t) = paths.task_of(&cwd).filter(|_| !deleted) {
                check_exec_path(&paths, line, &cwd, t, *sel);
            }
        }
        if let Some(t) = paths.command_file(l) {
            assert!(t.task_id > 0 && t.workflow_instance_id > 0, "{t:?}");
        }
    }

    // round trip: a path of the line's own layout names its task
    let Some(line) = line else { return };
    let mut u = Unstructured::new(text);
    let Ok((ids, version, tenant)) = <([u64; 4], u16, String)>::arbitrary(&mut u) else {
        return;
    };
    let [project, definition, wf, task] = ids.map(|v| (v % (i64::MAX as u64)) as i64 + 1);
    let forms = PathForm::for_line(Some(line));
    let form = forms[*sel as usize % forms.len()];
    // a Linux user name: no slash, no backslash, short
    let tenant: String = (tenant.chars())
        .filter(|c| !matches!(c, '/' | '\\' | '\0'))
        .take(32)
        .collect();
    if form == PathForm::Tenant && (tenant.is_empty() || tenant == "." || tenant == "..") {
        return;
    }
    let rel = match form {
        PathForm::Ids => format!("{project}/{definition}/{wf}/{task}"),
        PathForm::Codes => format!("{project}/{definition}_{version}/{wf}/{task}"),
        PathForm::Tenant => format!("{tenant}/{project}/{definition}_{version}/{wf}/{task}"),
        PathForm::TaskOnly => format!("{task}"),
    };
    let exec = folder.join(rel);
    let want = TaskRef {
        task_id: task,
        workflow_instance_id: if form == PathForm::TaskOnly { 0 } else { wf },
    };
    assert_eq!(paths.task_of(&exec), Some(want), "{}", exec.display());
    check_exec_path(&paths, Some(line), &exec, want, *sel);
});
