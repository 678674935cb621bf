//! `remote-apps.jsonl` on disk: its lines, reading it whole, appending to it
//! and rewriting it atomically. Blocking.

use reaper_core::remote::is_app_id;
use reaper_core::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// A line of `remote-apps.jsonl` as read: an appended [`Learned`](super::Learned) (one id),
/// or a compacted task (all its ids, learned last at `learned_at`).
#[derive(Debug, Deserialize)]
struct Line {
    task_id: i64,
    #[serde(default)]
    app_id: Option<String>,
    #[serde(default)]
    app_ids: Vec<String>,
    #[serde(default)]
    host: String,
    #[serde(default)]
    learned_at: Option<Instant>,
}

/// A compacted task: one line with all its ids.
#[derive(Debug, Serialize)]
struct TaskLine<'a> {
    task_id: i64,
    app_ids: &'a BTreeSet<String>,
    host: &'a str,
    learned_at: Instant,
}

/// What is known of one task instance's applications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) ids: BTreeSet<String>,
    /// The worker whose agent reported the newest id.
    pub(super) host: String,
    /// When its newest id was learned.
    pub(super) learned_at: Instant,
}

impl Entry {
    pub(super) fn add(&mut self, ids: impl IntoIterator<Item = String>, host: &str, at: Instant) {
        self.ids.extend(ids);
        if at >= self.learned_at {
            self.learned_at = at;
            if !host.is_empty() {
                self.host = host.to_string();
            }
        }
    }
}

pub(super) type Tasks = BTreeMap<i64, Entry>;

/// What the file (and a compaction's leftover temp file) hold.
pub(super) struct Read {
    pub(super) tasks: Tasks,
    pub(super) lines: usize,
}

/// Reads `path`, merging into `into`. A line that is not a learned id or a
/// compacted task (torn by a crash, edited by hand) is skipped and logged;
/// an id that is not one is dropped. Missing: nothing. Blocking.
fn read_into(path: &Path, into: &mut Tasks, now: Instant) -> std::io::Result<usize> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut skipped = 0usize;
    let mut lines = 0usize;
    for (n, line) in std::io::BufReader::new(f).split(b'\n').enumerate() {
        let line = line?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        lines += 1;
        let parsed = serde_json::from_slice::<Line>(&line).ok();
        let ids: Option<Vec<String>> = parsed.as_ref().map(|l| {
            l.app_id
                .iter()
                .chain(&l.app_ids)
                .filter(|id| is_app_id(id))
                .cloned()
                .collect()
        });
        match (parsed, ids) {
            (Some(l), Some(ids)) if !ids.is_empty() => {
                // a line without its time counts as new: kept the longest
                let at = l.learned_at.unwrap_or(now);
                into.entry(l.task_id)
                    .or_insert_with(|| Entry {
                        ids: BTreeSet::new(),
                        host: l.host.clone(),
                        learned_at: at,
                    })
                    .add(ids, &l.host, at);
            }
            _ => {
                skipped += 1;
                if skipped <= 5 {
                    tracing::warn!(path = %path.display(), line = n + 1, "skipping a malformed line of the remote applications file");
                }
            }
        }
    }
    if skipped > 5 {
        tracing::warn!(path = %path.display(), skipped, "malformed lines skipped in the remote applications file");
    }
    Ok(lines)
}

/// The file and a leftover temp file of a compaction that did not finish
/// (its content is also in the file, but reading it too costs nothing).
pub(super) fn read_all(path: &Path, now: Instant) -> std::io::Result<Read> {
    let mut tasks = Tasks::new();
    let lines = read_into(path, &mut tasks, now)?;
    let tmp = temp_path(path);
    if let Err(e) = read_into(&tmp, &mut tasks, now) {
        tracing::warn!(path = %tmp.display(), error = %e, "cannot read a leftover temp file of the remote applications");
    }
    Ok(Read { tasks, lines })
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes `tasks` to `path` atomically: a temp file beside it, fsynced,
/// renamed over it, and the directory fsynced. A crash at any point leaves
/// the old file or the new one, each complete. Blocking.
pub(super) fn write_atomically(path: &Path, tasks: &Tasks) -> std::io::Result<()> {
    let mut buf = Vec::new();
    for (task_id, e) in tasks {
        let line = TaskLine {
            task_id: *task_id,
            app_ids: &e.ids,
            host: &e.host,
            learned_at: e.learned_at,
        };
        serde_json::to_writer(&mut buf, &line).map_err(std::io::Error::other)?;
        buf.push(b'\n');
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = temp_path(path);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&buf)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Appends `buf` to `path` with fsync, on a fresh line after a torn one.
pub(super) fn append(path: &Path, buf: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)?;
    let len = f.metadata()?.len();
    let mut prefix: &[u8] = b"";
    if len > 0 {
        use std::io::{Read, Seek, SeekFrom};
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            prefix = b"\n";
        }
    }
    let mut all = Vec::with_capacity(prefix.len() + buf.len());
    all.extend_from_slice(prefix);
    all.extend_from_slice(buf);
    f.write_all(&all)?;
    f.sync_data()?;
    // Another process (the daemon) may have compacted the file, renaming a
    // new one over the one written: then append to that one too.
    use std::os::unix::fs::MetadataExt;
    let written = f.metadata()?;
    match std::fs::metadata(path) {
        Ok(now) if (now.dev(), now.ino()) != (written.dev(), written.ino()) => {
            let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
            f.write_all(b"\n")?;
            f.write_all(buf)?;
            f.sync_data()
        }
        _ => Ok(()),
    }
}
