//! The YARN application ids of the tasks the agent lists (SPEC §17).
//!
//! While a YARN task runs, DS keeps its application ids only on the worker
//! host (reference §9): in `<execute_path>/appInfo.log` (3.2+ with
//! `appId.collect = aop`, one id per line) and in the task's own log. The
//! agent reads both and publishes the ids in the task's report entry. From
//! the task log it takes only the ids on the lines a YARN client writes when
//! it submits the task's own application and reports on it ([`OWN_LINE`]),
//! never any `application_…` text: a script may print other jobs' ids
//! (`yarn application -list`, an upstream wait), and a kill of those would
//! end somebody else's work.
//!
//! Logs can be large: each file is read incrementally from where the last
//! scan stopped, at most [`CHUNK`] bytes per file per scan, and when more
//! than [`BACKLOG`] bytes are unread the middle is skipped and only the last
//! [`CHUNK`] is read (an id printed in a skipped stretch of a multi-GB log is
//! not seen; the submit output that carries it comes early in a task's log).
//! An id is taken only once something other than a digit follows it, or
//! when the file ended at the same place two scans in a row: a half-written
//! id would name an application that does not exist, and an unknown
//! application holds its task.
//!
//! Task log layouts below `agent.task_log_base` (DS's logback `log.base`,
//! `logs` relative to the worker's working directory by default), from DS's
//! `TaskLogDiscriminator` / `LogUtils` and the real 3.1.1 and 3.2.2 runs
//! (tests/real-ds/FINDINGS.md §4, §6b):
//!
//! | line | task log |
//! |---|---|
//! | 1.2, 1.3 | `<definitionId>/<wf>/<task>.log` |
//! | 2.0 | `<definitionCode>_<version>/<wf>/<task>.log` |
//! | 3.0, 3.1 | `<yyyyMMdd>/<definitionCode>_<version>-<wf>-<task>.log` |
//! | 3.2, 3.3, 3.4 | `<yyyyMMdd>/<definitionCode>/<version>/<wf>/<task>.log` |
//!
//! `<yyyyMMdd>` is the task's first submit day on the worker's clock: the
//! day the task's oldest process started and the two before it are tried.
//! Where the execute path does not carry the definition (3.3's
//! `<taskInstanceId>` form), those day folders are searched for
//! `<task>.log`, visiting at most [`WALK_LIMIT`] entries, at most once per
//! [`WALK_EVERY`] per task.

use crate::execpath::{PathForm, TaskDir};
use reaper_core::agent::AgentTask;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bytes read from one file per scan.
pub const CHUNK: u64 = 1 << 20;
/// Unread bytes beyond which the middle of a log is skipped.
pub const BACKLOG: u64 = 16 << 20;
/// Ids published per task at most (the report is a registry node).
pub const MAX_IDS: usize = 64;
/// Directory entries visited per search for a task log.
pub const WALK_LIMIT: usize = 20_000;
/// How often one task's log is searched for when no direct path exists.
pub const WALK_EVERY: Duration = Duration::from_secs(60);

const PREFIX: &[u8] = b"application_";

/// What a line of a task log must say for its id to be the task's own: the
/// YARN client's submit and report lines (Hadoop's `YarnClientImpl`, Spark's
/// `Client`, Flink's `YarnClusterDescriptor`) and the tracking URL MapReduce
/// and Hive print for the job they submitted.
pub const OWN_LINE: [&[u8]; 7] = [
    b"Submitted application ",
    b"Submitting application ",
    b"Application report for ",
    b"Tracking URL",
    b"tracking URL",
    b"The url to track the job",
    b"of application '",
];

/// The longest task-log line kept over from one read to the next; the
/// start of a longer one is dropped.
const MAX_LINE: usize = 16 << 10;

/// Whether a task-log line is one [`OWN_LINE`] names.
pub fn own_line(line: &[u8]) -> bool {
    OWN_LINE.iter().any(|m| find(line, m).is_some())
}
/// Longest id kept over from one read to the next.
const CARRY: usize = PREFIX.len() + 2 * 19 + 1;

/// Where one file has been read to.
#[derive(Debug, Default, Clone)]
struct Cursor {
    /// (device, inode) of the file read: another file starts over.
    file: Option<(u64, u64)>,
    offset: u64,
    /// The tail of the last read, so an id cut by a read boundary is found.
    carry: Vec<u8>,
    /// The file's end when the last read ended in a possible partial id.
    pending_eof: Option<u64>,
}

impl Cursor {
    /// Reads what is new in `path` (bounded) and adds the ids in it; with
    /// `lines`, only those on complete lines that [`own_line`] accepts.
    fn advance(&mut self, path: &Path, ids: &mut BTreeSet<String>, lines: bool) {
        let Some((mut f, meta)) = open_regular(path) else {
            return;
        };
        let key = (meta.dev(), meta.ino());
        let len = meta.len();
        if self.file != Some(key) || len < self.offset {
            // a new, rotated or truncated file
            *self = Cursor {
                file: Some(key),
                ..Cursor::default()
            };
        }
        if len == self.offset {
            if self.pending_eof == Some(len) {
                // nothing was written after it for a whole scan: complete
                if !lines || own_line(&self.carry) {
                    scan_ids(&self.carry, true, ids);
                }
                if lines {
                    self.carry.clear();
                }
                self.pending_eof = None;
            }
            return;
        }
        if len - self.offset > BACKLOG {
            self.offset = len - CHUNK;
            self.carry.clear();
        }
        let want = (len - self.offset).min(CHUNK);
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = std::mem::take(&mut self.carry);
        let carried = buf.len();
        if (&mut f).take(want).read_to_end(&mut buf).is_err() {
            self.carry = buf;
            self.carry.truncate(carried);
            return;
        }
        let read = (buf.len() - carried) as u64;
        self.offset += read;
        if lines {
            self.own_lines(buf, len, ids);
            return;
        }
        let partial = scan_ids(&buf, false, ids);
        self.pending_eof = (partial && self.offset == len).then_some(len);
        let keep = buf.len().min(CARRY);
        self.carry = buf.split_off(buf.len() - keep);
    }
}

impl Cursor {
    /// The complete lines of `buf` that name the task's own application;
    /// the incomplete last line is kept for the next read (or taken whole
    /// once the file ended there for a whole scan).
    fn own_lines(&mut self, mut buf: Vec<u8>, len: u64, ids: &mut BTreeSet<String>) {
        let end = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        for line in buf[..end].split(|b| *b == b'\n') {
            if own_line(line) {
                scan_ids(line, true, ids);
            }
        }
        let mut rest = buf.split_off(end);
        if rest.len() > MAX_LINE {
            rest.drain(..rest.len() - MAX_LINE);
        }
        self.pending_eof = (!rest.is_empty() && self.offset == len).then_some(len);
        self.carry = rest;
    }
}

/// Opens a task file to read only when it is a regular file (SPEC §12): a
/// FIFO named `appInfo.log` would block an open for reading (`O_NONBLOCK`),
/// and a symbolic link would be followed with the agent's capability to
/// read any file (`O_NOFOLLOW`); the type is checked on the open file.
fn open_regular(path: &Path) -> Option<(File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            i32::try_from((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOFOLLOW).bits())
                .ok()?,
        )
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    meta.is_file().then_some((f, meta))
}

/// Adds the ids in `buf` to `ids`; an id running to the end of `buf` is
/// taken only when `complete`. True when `buf` ends in a possible partial id.
pub fn scan_ids(buf: &[u8], complete: bool, ids: &mut BTreeSet<String>) -> bool {
    let mut partial = false;
    let mut i = 0;
    while let Some(p) = find(&buf[i..], PREFIX) {
        let start = i + p;
        let mut j = start + PREFIX.len();
        let (a, after_a) = digits(buf, j);
        j = after_a;
        let mut ok = a > 0 && a <= 19;
        let mut at_end = j == buf.len();
        if ok && !at_end {
            ok = buf[j] == b'_';
            j += 1;
            let (b, after_b) = digits(buf, j);
            ok &= b > 0 && b <= 19;
            at_end = after_b == buf.len();
            j = after_b;
        } else if ok {
            ok = false;
        }
        if at_end && !complete {
            partial = true;
        } else if ok && ids.len() < MAX_IDS {
            if let Ok(s) = std::str::from_utf8(&buf[start..j]) {
                ids.insert(s.to_string());
            }
        }
        i = start + PREFIX.len();
    }
    // the buffer may end inside the prefix itself
    if !partial {
        let tail = &buf[buf.len().saturating_sub(PREFIX.len() - 1)..];
        partial = (1..=tail.len()).any(|k| PREFIX.starts_with(&tail[tail.len() - k..]));
    }
    partial
}

fn digits(buf: &[u8], from: usize) -> (usize, usize) {
    let n = buf[from.min(buf.len())..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    (n, from + n)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What the agent knows of one listed task's applications.
#[derive(Debug, Default)]
struct Tracked {
    ids: BTreeSet<String>,
    app_info: Cursor,
    log: Option<(PathBuf, Cursor)>,
    next_walk: Option<Instant>,
}

/// The ids of every listed task, kept from scan to scan.
#[derive(Debug, Default)]
pub struct AppIds {
    task_log_base: Option<PathBuf>,
    tasks: BTreeMap<i64, Tracked>,
}

impl AppIds {
    /// `agent.task_log_base`: None reads only `appInfo.log`.
    pub fn new(task_log_base: Option<PathBuf>) -> AppIds {
        AppIds {
            task_log_base,
            tasks: BTreeMap::new(),
        }
    }

    /// Sets each task's `app_ids` from its files; forgets tasks no longer
    /// listed. A task whose execute path is not known keeps what was read.
    pub fn fill(&mut self, tasks: &mut [AgentTask], dirs: &BTreeMap<i64, TaskDir>) {
        self.tasks
            .retain(|id, _| tasks.iter().any(|t| t.task_id == *id));
        for task in tasks.iter_mut() {
            let tracked = self.tasks.entry(task.task_id).or_default();
            if let Some(dir) = dirs.get(&task.task_id) {
                tracked
                    .app_info
                    .advance(&dir.dir.join("appInfo.log"), &mut tracked.ids, false);
                if let Some(base) = &self.task_log_base {
                    if tracked.log.is_none() {
                        let now = Instant::now();
                        if let Some(p) = find_log(base, dir, task, now, &mut tracked.next_walk) {
                            tracked.log = Some((p, Cursor::default()));
                        }
                    }
                    if let Some((path, cursor)) = &mut tracked.log {
                        cursor.advance(path, &mut tracked.ids, true);
                    }
                }
            }
            task.app_ids = tracked.ids.iter().cloned().collect();
        }
    }
}

/// The day folders a task's log may be in: the day its oldest process
/// started and the two before (a retry keeps its first submit day).
fn days(started_at: i64) -> Vec<String> {
    let Some(t) = chrono::DateTime::from_timestamp_millis(started_at) else {
        return Vec::new();
    };
    let local = t.with_timezone(&chrono::Local).date_naive();
    (0..3)
        .filter_map(|d| local.checked_sub_days(chrono::Days::new(d)))
        .map(|d| d.format("%Y%m%d").to_string())
        .collect()
}

/// The task's log below `base`, if it exists.
fn find_log(
    base: &Path,
    dir: &TaskDir,
    task: &AgentTask,
    now: Instant,
    next_walk: &mut Option<Instant>,
) -> Option<PathBuf> {
    let (wf, id) = (dir.task.workflow_instance_id, dir.task.task_id);
    let file = format!("{id}.log");
    let mut candidates = Vec::new();
    if let (PathForm::Ids | PathForm::Codes, Some(def)) = (dir.form, &dir.definition) {
        // 1.x and 2.0: no day folder
        candidates.push(base.join(def).join(wf.to_string()).join(&file));
    }
    if let (PathForm::Codes | PathForm::Tenant, Some(def)) = (dir.form, &dir.definition) {
        if let Some((code, version)) = def.split_once('_') {
            for day in days(task.started_at) {
                let d = base.join(&day);
                candidates.push(d.join(format!("{def}-{wf}-{id}.log")));
                candidates.push(d.join(code).join(version).join(wf.to_string()).join(&file));
            }
        }
    }
    if let Some(p) = candidates.into_iter().find(|p| p.is_file()) {
        return Some(p);
    }
    if dir.definition.is_some() || next_walk.is_some_and(|t| now < t) {
        return None;
    }
    *next_walk = Some(now + WALK_EVERY);
    let mut budget = WALK_LIMIT;
    days(task.started_at)
        .into_iter()
        .find_map(|day| walk(&base.join(day), &file, 4, &mut budget))
}

/// A file named `name` at most `depth` levels below `dir`.
fn walk(dir: &Path, name: &str, depth: usize, budget: &mut usize) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut subdirs = Vec::new();
    for e in entries.flatten() {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_file() && e.file_name() == name {
            return Some(e.path());
        }
        if ft.is_dir() && depth > 1 {
            subdirs.push(e.path());
        }
    }
    subdirs
        .into_iter()
        .find_map(|d| walk(&d, name, depth - 1, budget))
}

#[cfg(test)]
mod tests;
