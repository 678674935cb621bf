//! Application ids from files on disk.

use super::*;
use crate::execpath::{ExecPaths, TaskRef};
use reaper_core::DsLine;
use std::io::Write;

fn ids(buf: &[u8], complete: bool) -> (Vec<String>, bool) {
    let mut set = BTreeSet::new();
    let partial = scan_ids(buf, complete, &mut set);
    (set.into_iter().collect(), partial)
}

#[test]
fn ids_are_found_in_yarn_client_output() {
    let out = b"INFO Client: Submitted application application_1700000000000_0001\n\
                tracking URL: http://rm:8088/proxy/application_1700000000000_0001/\n\
                other job application_1700000000000_12 done.";
    let (found, partial) = ids(out, false);
    assert_eq!(
        found,
        [
            "application_1700000000000_0001",
            "application_1700000000000_12"
        ]
    );
    assert!(!partial);
}

#[test]
fn an_id_cut_by_the_end_of_what_was_read_is_not_taken() {
    for cut in [
        &b"x application_17000_00"[..],
        b"x application_17000_",
        b"x application_17000",
        b"x application_",
        b"x applic",
    ] {
        let (found, partial) = ids(cut, false);
        assert!(found.is_empty(), "{cut:?}: {found:?}");
        assert!(partial, "{cut:?}");
    }
    // once the file stayed so for a whole scan, the whole id counts
    assert_eq!(
        ids(b"application_17000_00", true).0,
        ["application_17000_00"]
    );
    assert!(ids(b"application_17000_", true).0.is_empty());
}

#[test]
fn text_that_only_looks_like_an_id_is_not_one() {
    let (found, _) = ids(
        b"application__1 application_x_2 application_1_ application_1x\n",
        false,
    );
    assert!(found.is_empty(), "{found:?}");
    let long = format!("application_{}_1\n", "9".repeat(20));
    assert!(ids(long.as_bytes(), false).0.is_empty());
}

fn append(path: &Path, s: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(s.as_bytes()).unwrap();
}

#[test]
fn a_file_is_read_on_from_where_it_was_left_and_ids_cut_between_reads_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("appInfo.log");
    let mut c = Cursor::default();
    let mut set = BTreeSet::new();
    append(&p, "application_1700000000000_0001\napplication_17000000");
    c.advance(&p, &mut set, false);
    assert_eq!(set.len(), 1);
    append(&p, "00000_0002\n");
    c.advance(&p, &mut set, false);
    assert!(set.contains("application_1700000000000_0002"), "{set:?}");
    assert_eq!(set.len(), 2);
    // an id without a newline at the end of the file: taken after a quiet scan
    append(&p, "application_1700000000000_0003");
    c.advance(&p, &mut set, false);
    assert_eq!(set.len(), 2);
    c.advance(&p, &mut set, false);
    assert!(set.contains("application_1700000000000_0003"), "{set:?}");
}

#[test]
fn a_truncated_or_replaced_file_is_read_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.log");
    let mut c = Cursor::default();
    let mut set = BTreeSet::new();
    append(&p, &"x".repeat(1000));
    c.advance(&p, &mut set, false);
    std::fs::write(&p, "application_1_2\n").unwrap();
    c.advance(&p, &mut set, false);
    assert!(set.contains("application_1_2"), "{set:?}");
}

#[test]
fn a_huge_log_is_read_in_bounded_chunks_and_its_middle_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.log");
    {
        let f = File::create(&p).unwrap();
        // sparse: 40 MiB of zeros, an id in the middle and one at the end
        f.set_len(40 << 20).unwrap();
    }
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_at(b"application_5_5\n", 20 << 20).unwrap();
        f.write_at(b"application_7_7\n", (40 << 20) - 100).unwrap();
    }
    let mut c = Cursor::default();
    let mut set = BTreeSet::new();
    c.advance(&p, &mut set, false);
    // more than BACKLOG unread: only the last CHUNK was read
    assert_eq!(c.offset, 40 << 20);
    assert_eq!(set.iter().collect::<Vec<_>>(), ["application_7_7"]);

    // a log growing by less than BACKLOG is read on, a CHUNK per scan
    let q = dir.path().join("grow.log");
    File::create(&q).unwrap().set_len(3 * CHUNK).unwrap();
    let mut c = Cursor::default();
    c.advance(&q, &mut set, false);
    assert_eq!(c.offset, CHUNK);
    c.advance(&q, &mut set, false);
    assert_eq!(c.offset, 2 * CHUNK);
}

#[test]
fn at_most_max_ids_are_kept() {
    let text: String = (0..200).map(|i| format!("application_1_{i}\n")).collect();
    assert_eq!(ids(text.as_bytes(), false).0.len(), MAX_IDS);
}

/// A 3.2 execute path with its appInfo.log, a task log per layout.
struct Host {
    _dir: tempfile::TempDir,
    paths: ExecPaths,
    logs: PathBuf,
    exec: PathBuf,
}

impl Host {
    fn new(line: DsLine, rel: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("ds");
        let exec = base.join("exec/process").join(rel);
        std::fs::create_dir_all(&exec).unwrap();
        let logs = dir.path().join("logs");
        Host {
            paths: ExecPaths::new(&base, Some(line)),
            logs,
            exec,
            _dir: dir,
        }
    }

    fn dirs(&self) -> BTreeMap<i64, TaskDir> {
        let d = self.paths.task_dir(&self.exec.join("sub")).unwrap();
        BTreeMap::from([(d.task.task_id, d)])
    }

    fn log(&self, rel: &str, text: &str) {
        let p = self.logs.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        append(&p, text);
    }
}

fn listed(task_id: i64, wf: i64, started_at: i64) -> Vec<AgentTask> {
    vec![AgentTask {
        lineage: None,
        task_id,
        workflow_instance_id: wf,
        pids: vec![1],
        started_at,
        processes: vec![],
        app_ids: vec![],
    }]
}

fn day(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .with_timezone(&chrono::Local)
        .format("%Y%m%d")
        .to_string()
}

#[test]
fn the_execute_path_is_read_with_what_it_says_of_the_definition() {
    let h = Host::new(DsLine::V3_2, "tenant/100/200_3/41/42");
    let d = &h.dirs()[&42];
    assert_eq!(
        d.task,
        TaskRef {
            task_id: 42,
            workflow_instance_id: 41
        }
    );
    assert_eq!(d.dir, h.exec);
    assert_eq!(d.definition.as_deref(), Some("200_3"));
}

#[test]
fn ids_come_from_app_info_log_and_the_3_2_task_log() {
    let h = Host::new(DsLine::V3_2, "tenant/100/200_3/41/42");
    let now = chrono::Utc::now().timestamp_millis();
    append(
        &h.exec.join("appInfo.log"),
        "application_1700000000000_0001\n",
    );
    h.log(
        &format!("{}/200/3/41/42.log", day(now)),
        "[INFO] Submitted application application_1700000000000_0002\n",
    );
    let mut tasks = listed(42, 41, now);
    let mut apps = AppIds::new(None);
    apps.fill(&mut tasks, &h.dirs());
    assert_eq!(tasks[0].app_ids, ["application_1700000000000_0001"]);

    let mut apps = AppIds::new(Some(h.logs.clone()));
    apps.fill(&mut tasks, &h.dirs());
    assert_eq!(
        tasks[0].app_ids,
        [
            "application_1700000000000_0001",
            "application_1700000000000_0002"
        ]
    );
    // later lines are read on the next scan; a task no longer listed is forgotten
    h.log(
        &format!("{}/200/3/41/42.log", day(now)),
        "Application report for application_1700000000000_0003 (state: RUNNING)\n",
    );
    apps.fill(&mut tasks, &h.dirs());
    assert_eq!(tasks[0].app_ids.len(), 3);
    apps.fill(&mut [], &BTreeMap::new());
    assert!(apps.tasks.is_empty());
}

#[test]
fn the_3_1_task_log_of_yesterday_is_found() {
    let h = Host::new(DsLine::V3_1, "tenant/100/200_3/41/42");
    let now = chrono::Utc::now().timestamp_millis();
    let yesterday = now - 86_400_000;
    h.log(
        &format!("{}/200_3-41-42.log", day(yesterday)),
        "Application report for application_1700000000000_0009 (state: RUNNING)\n",
    );
    let mut tasks = listed(42, 41, now);
    AppIds::new(Some(h.logs.clone())).fill(&mut tasks, &h.dirs());
    assert_eq!(tasks[0].app_ids, ["application_1700000000000_0009"]);
}

#[test]
fn the_1_3_and_2_0_task_logs_are_found() {
    let h = Host::new(DsLine::V1_3, "7/8/41/42");
    h.log("8/41/42.log", "Submitted application application_1_13\n");
    let mut tasks = listed(42, 41, 0);
    AppIds::new(Some(h.logs.clone())).fill(&mut tasks, &h.dirs());
    assert_eq!(tasks[0].app_ids, ["application_1_13"]);

    let h = Host::new(DsLine::V2_0, "100/200_3/41/42");
    h.log(
        "200_3/41/42.log",
        "Submitted application application_1_20\n",
    );
    let mut tasks = listed(42, 41, 0);
    AppIds::new(Some(h.logs.clone())).fill(&mut tasks, &h.dirs());
    assert_eq!(tasks[0].app_ids, ["application_1_20"]);
}

#[test]
fn a_3_3_task_only_path_has_its_log_searched_for() {
    let h = Host::new(DsLine::V3_3, "42");
    let now = chrono::Utc::now().timestamp_millis();
    h.log(
        &format!("{}/200/3/41/42.log", day(now)),
        "Application report for application_1_33 (state: RUNNING)\n",
    );
    // another task's log of the same day is not it
    h.log(
        &format!("{}/200/3/41/421.log", day(now)),
        "Application report for application_1_99 (state: RUNNING)\n",
    );
    let mut tasks = listed(42, 0, now);
    let mut apps = AppIds::new(Some(h.logs.clone()));
    apps.fill(&mut tasks, &h.dirs());
    assert_eq!(tasks[0].app_ids, ["application_1_33"]);
}

#[test]
fn a_task_without_files_has_no_ids_and_an_unknown_path_keeps_what_was_read() {
    let h = Host::new(DsLine::V3_2, "tenant/100/200_3/41/42");
    let mut tasks = listed(42, 41, 0);
    let mut apps = AppIds::new(Some(h.logs.clone()));
    apps.fill(&mut tasks, &h.dirs());
    assert!(tasks[0].app_ids.is_empty());
    append(&h.exec.join("appInfo.log"), "application_3_4\n");
    apps.fill(&mut tasks, &h.dirs());
    // this scan placed the task by descent only: no path, same ids
    apps.fill(&mut tasks, &BTreeMap::new());
    assert_eq!(tasks[0].app_ids, ["application_3_4"]);
}

/// A FIFO named `appInfo.log` is never opened for a blocking read, and a
/// symbolic link (to a file the agent could read with its capabilities) is
/// never followed: neither gives ids, and the scan does not hang.
#[test]
fn a_fifo_or_a_symlink_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("appInfo.log");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut c = Cursor::default();
    let mut set = BTreeSet::new();
    c.advance(&fifo, &mut set, false);
    assert!(set.is_empty());
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "application_1700000000000_0009\n").unwrap();
    let link = dir.path().join("link.log");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    c.advance(&link, &mut set, false);
    assert!(set.is_empty(), "{set:?}");
    c.advance(&secret, &mut set, false);
    assert_eq!(set.len(), 1, "a regular file is read");
}

/// SPEC §17: from the task log only the ids of the lines a YARN client
/// writes for the task's own application; a listing of other jobs, or an
/// upstream wait printing its id, is never taken.
#[test]
fn only_the_yarn_clients_own_lines_name_the_tasks_applications() {
    let h = Host::new(DsLine::V3_2, "tenant/100/200_3/41/42");
    let now = chrono::Utc::now().timestamp_millis();
    let log = format!("{}/200/3/41/42.log", day(now));
    h.log(
        &log,
        "Total number of applications (application-types: [] and states: [RUNNING]):2\n\
         application_1700000000000_0100\tetl-daily\tSPARK\tetl\tdefault\tRUNNING\n\
         waiting for upstream application_1700000000000_0101 to finish\n\
         INFO Client: Submitted application application_1700000000000_0007\n\
         INFO mapreduce.Job: The url to track the job: http://rm:8088/proxy/application_1700000000000_0008/\n",
    );
    let mut tasks = listed(42, 41, now);
    AppIds::new(Some(h.logs.clone())).fill(&mut tasks, &h.dirs());
    assert_eq!(
        tasks[0].app_ids,
        [
            "application_1700000000000_0007",
            "application_1700000000000_0008"
        ]
    );
    // a line cut by the end of what was written is taken once it is whole
    h.log(
        &log,
        "INFO Client: Application report for application_1700000000000_0009 (state: ACC",
    );
    let mut apps = AppIds::new(Some(h.logs.clone()));
    apps.fill(&mut tasks, &h.dirs());
    assert_eq!(tasks[0].app_ids.len(), 2);
    h.log(&log, "EPTED)\n");
    apps.fill(&mut tasks, &h.dirs());
    assert_eq!(tasks[0].app_ids.len(), 3);
}
