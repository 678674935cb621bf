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
