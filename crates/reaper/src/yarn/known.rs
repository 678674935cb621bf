//! The ids learned per task instance: kept in memory, appended to the file
//! as learned, and compacted by the daemon.

use super::file::{append, read_all, write_atomically, Entry, Read, Tasks};
use reaper_core::ports::Clock;
use reaper_core::remote::is_app_id;
use reaper_core::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// One learned id: a line appended to `remote-apps.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    pub task_id: i64,
    pub app_id: String,
    /// The worker whose agent reported it.
    pub host: String,
    pub learned_at: Instant,
}

/// A task's ids are forgotten (compaction drops them) only when both hold:
/// its newest id was learned this long ago ...
pub const FORGET_LEARNED_AGO: Duration = Duration::from_secs(7 * 24 * 3600);
/// ... and its row has been missing from every full scan's live rows, and
/// from every agent's listing, for this long while this daemon ran.
pub const FORGET_ABSENT_FOR: Duration = Duration::from_secs(24 * 3600);
/// The file is rewritten once it has this many lines more than twice its tasks.
const GROWTH_SLACK: usize = 1_000;

/// The ids learned per task instance, on disk and in memory.
pub struct KnownApps {
    path: PathBuf,
    state: Mutex<State>,
    /// Held across every write of the file, so that an append never goes
    /// to a file a compaction is replacing.
    io: Mutex<()>,
}

struct State {
    tasks: Tasks,
    /// Lines in the file now (what a compaction would shrink).
    lines: usize,
    /// Whether this process compacts the file: the daemon does, one-shot
    /// commands (`check`, `reap`) only read and append.
    owner: bool,
    /// Since when each known task's row has been missing from the full
    /// scans' live rows and the agents' listings.
    absent_since: BTreeMap<i64, Instant>,
}

impl KnownApps {
    /// `<dir of audit_path>/remote-apps.jsonl`.
    pub fn beside(audit_path: &Path) -> PathBuf {
        audit_path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join("remote-apps.jsonl")
    }

    /// Reads what earlier runs learned (see `file::read_into`). A file that
    /// cannot be read is logged, and the daemon goes on with what the agents
    /// report. Nothing is written here: see [`KnownApps::own`].
    pub fn load(path: PathBuf) -> KnownApps {
        KnownApps::load_at(path, reaper_core::ports::SystemClock.now())
    }

    /// [`KnownApps::load`] on the daemon's clock (`now`: what the read
    /// stamps a line without its own time with).
    pub fn load_at(path: PathBuf, now: Instant) -> KnownApps {
        let read = read_all(&path, now).unwrap_or_else(|e| {
            tracing::error!(path = %path.display(), error = %e, "cannot read the remote applications file");
            Read {
                tasks: Tasks::new(),
                lines: 0,
            }
        });
        KnownApps {
            path,
            state: Mutex::new(State {
                tasks: read.tasks,
                lines: read.lines,
                owner: false,
                absent_since: BTreeMap::new(),
            }),
            io: Mutex::new(()),
        }
    }

    /// Makes this process the one that compacts the file (the daemon), and
    /// compacts it now: one line per task, its ids deduplicated, torn and
    /// malformed lines gone. Blocking.
    pub fn own(&self, now: Instant) -> std::io::Result<()> {
        self.st().owner = true;
        self.compact(&BTreeSet::new(), now).map(|_| ())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn io_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.io.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn ids(&self, task_id: i64) -> BTreeSet<String> {
        self.st()
            .tasks
            .get(&task_id)
            .map(|e| e.ids.clone())
            .unwrap_or_default()
    }

    /// Every task's known ids (a snapshot: the sweep intersects it with its
    /// candidates, where a lookup per live row would take the lock 100,000 times).
    pub fn all(&self) -> BTreeMap<i64, BTreeSet<String>> {
        self.st()
            .tasks
            .iter()
            .map(|(t, e)| (*t, e.ids.clone()))
            .collect()
    }

    /// The number of task instances with known ids.
    pub fn tasks(&self) -> usize {
        self.st().tasks.len()
    }

    /// Which of `found` are new.
    pub fn unknown(&self, found: Vec<Learned>) -> Vec<Learned> {
        let st = self.st();
        let mut seen = BTreeSet::new();
        found
            .into_iter()
            .filter(|l| {
                is_app_id(&l.app_id)
                    && !st
                        .tasks
                        .get(&l.task_id)
                        .is_some_and(|e| e.ids.contains(&l.app_id))
                    && seen.insert((l.task_id, l.app_id.clone()))
            })
            .collect()
    }

    /// Appends and fsyncs `new`, then remembers them; the owner then
    /// compacts the file once it has grown past its bound. Blocking. On
    /// failure nothing is remembered: the agents' next reports bring them
    /// again.
    pub fn learn(&self, new: &[Learned]) -> std::io::Result<()> {
        if new.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for l in new {
            serde_json::to_writer(&mut buf, l).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        {
            let _io = self.io_lock();
            append(&self.path, &buf)?;
            let mut st = self.st();
            st.lines += new.len();
            for l in new {
                st.tasks
                    .entry(l.task_id)
                    .or_insert_with(|| Entry {
                        ids: BTreeSet::new(),
                        host: l.host.clone(),
                        learned_at: l.learned_at,
                    })
                    .add([l.app_id.clone()], &l.host, l.learned_at);
            }
        }
        let grown = {
            let st = self.st();
            st.owner && st.lines > 2 * st.tasks.len() + GROWTH_SLACK
        };
        if grown {
            // the newest learned time is the daemon's clock at learning
            let now = new.iter().map(|l| l.learned_at).max();
            let now = now.unwrap_or_else(|| reaper_core::ports::SystemClock.now());
            if let Err(e) = self.compact(&BTreeSet::new(), now) {
                // the appended lines are on disk: only the size is at stake
                tracing::warn!(path = %self.path.display(), error = %e, "cannot compact the remote applications file");
            }
        }
        Ok(())
    }

    /// After a full scan (the owner only): `live` are the task ids among its
    /// live rows and the agents' listings. A task missing from them for
    /// [`FORGET_ABSENT_FOR`] whose newest id is older than
    /// [`FORGET_LEARNED_AGO`] is forgotten, and the file compacted without
    /// it. Returns how many were forgotten. Blocking.
    pub fn forget_over(&self, live: &BTreeSet<i64>, now: Instant) -> std::io::Result<usize> {
        let over = {
            let mut st = self.st();
            if !st.owner {
                return Ok(0);
            }
            let State {
                tasks,
                absent_since,
                ..
            } = &mut *st;
            absent_since.retain(|t, _| tasks.contains_key(t) && !live.contains(t));
            for t in tasks.keys().filter(|t| !live.contains(t)) {
                absent_since.entry(*t).or_insert(now);
            }
            over(tasks, absent_since, now)
        };
        if over.is_empty() {
            return Ok(0);
        }
        self.compact(&over, now)
    }

    /// Rewrites the file atomically with what it holds now (read again:
    /// another process may have appended) and this process knows, less
    /// the tasks in `drop` that are still over once read again. Returns how
    /// many were dropped.
    fn compact(&self, drop: &BTreeSet<i64>, now: Instant) -> std::io::Result<usize> {
        let _io = self.io_lock();
        let mut merged = read_all(&self.path, now)?.tasks;
        let mut st = self.st();
        for (t, e) in &st.tasks {
            let m = merged.entry(*t).or_insert_with(|| e.clone());
            m.add(e.ids.iter().cloned(), &e.host, e.learned_at);
        }
        let dropped: BTreeSet<i64> = over(&merged, &st.absent_since, now)
            .intersection(drop)
            .copied()
            .collect();
        merged.retain(|t, _| !dropped.contains(t));
        write_atomically(&self.path, &merged)?;
        st.lines = merged.len();
        st.tasks = merged;
        st.absent_since.retain(|t, _| !dropped.contains(t));
        if !dropped.is_empty() {
            tracing::info!(path = %self.path.display(), forgotten = dropped.len(), kept = st.tasks.len(), "remote applications file compacted");
        }
        Ok(dropped.len())
    }
}

/// The tasks that may be forgotten (see [`KnownApps::forget_over`]).
fn over(tasks: &Tasks, absent_since: &BTreeMap<i64, Instant>, now: Instant) -> BTreeSet<i64> {
    let ago = |d: Duration| chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX);
    tasks
        .iter()
        .filter(|(t, e)| {
            now - e.learned_at >= ago(FORGET_LEARNED_AGO)
                && absent_since
                    .get(t)
                    .is_some_and(|s| now - *s >= ago(FORGET_ABSENT_FOR))
        })
        .map(|(t, _)| *t)
        .collect()
}
