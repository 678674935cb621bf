//! Remote YARN applications (SPEC §17), the daemon's side: the
//! ResourceManager's REST API, and the ids learned per task instance, kept in
//! `<audit dir>/remote-apps.jsonl` so that they outlive the worker host, the
//! agent and the daemon.
//!
//! The RM client asks each configured RM in turn (HA: one is active); a
//! standby answers 307 with the active's address, followed by hand so that a
//! `PUT` stays a `PUT` with its body. Simple auth only (`?user.name=`);
//! Kerberos/SPNEGO is not supported.

use crate::config::yarn::Yarn;
use reaper_core::remote::{is_app_id, RemoteApp};
use reaper_core::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Redirects followed per request (a standby to the active, at most twice).
const MAX_HOPS: usize = 3;

/// A client of the configured ResourceManagers.
pub struct Rm {
    client: reqwest::Client,
    bases: Vec<String>,
    user: String,
    timeout: Duration,
    /// The RM that answered last: asked first next time.
    preferred: AtomicUsize,
}

/// What one request came back with.
struct Answer {
    status: u16,
    body: serde_json::Value,
}

impl Rm {
    /// None when `[yarn]` names no RM (off).
    pub fn new(cfg: &Yarn) -> Option<Rm> {
        if !cfg.enabled() {
            return None;
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .build()
            .ok()?;
        Some(Rm {
            client,
            bases: cfg.resource_managers.clone(),
            user: cfg.user.clone(),
            timeout: cfg.timeout,
            preferred: AtomicUsize::new(0),
        })
    }

    fn with_user(&self, url: &str) -> String {
        if self.user.is_empty() || url.contains("user.name=") {
            return url.to_string();
        }
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}user.name={}", encode(&self.user))
    }

    /// Sends `method path [body]` to the RMs in turn until one answers
    /// (anything but a connection failure, a timeout or a 5xx), following
    /// redirects by hand.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, String> {
        let n = self.bases.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut why = Vec::new();
        for k in 0..n {
            let i = (first + k) % n;
            let base = &self.bases[i];
            let mut url = self.with_user(&format!("{base}{path}"));
            let mut hops = 0;
            loop {
                let mut req = self
                    .client
                    .request(method.clone(), &url)
                    .header("Accept", "application/json");
                if let Some(b) = body {
                    req = req.json(b);
                }
                let resp = match req.send().await {
                    Ok(r) => r,
                    Err(e) => {
                        why.push(format!("{url}: {e}"));
                        break;
                    }
                };
                let status = resp.status().as_u16();
                if matches!(status, 301 | 302 | 303 | 307 | 308) {
                    let loc = resp
                        .headers()
                        .get("Location")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    match loc {
                        Some(l) if hops < MAX_HOPS => {
                            hops += 1;
                            url = self.with_user(&absolute(&url, &l));
                            continue;
                        }
                        _ => {
                            why.push(format!("{url}: {status} without a usable Location"));
                            break;
                        }
                    }
                }
                if status >= 500 {
                    why.push(format!("{url}: HTTP {status}"));
                    break;
                }
                let text = resp.text().await.unwrap_or_default();
                let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
                self.preferred.store(i, Ordering::Relaxed);
                return Ok(Answer { status, body });
            }
        }
        Err(why.join("; "))
    }

    /// The application's state as the RM says it; `state: None` when it
    /// cannot be known (no RM answered, 404: an id the RM does not know or
    /// no longer keeps is unknown, never finished).
    pub async fn app(&self, id: &str) -> (RemoteApp, Option<String>) {
        let mut app = RemoteApp {
            id: id.to_string(),
            state: None,
            final_status: None,
        };
        if !is_app_id(id) {
            return (app, Some("not an application id".into()));
        }
        let why = match self
            .call(
                reqwest::Method::GET,
                &format!("/ws/v1/cluster/apps/{id}"),
                None,
            )
            .await
        {
            Ok(a) if a.status == 200 => {
                let s = a.body["app"]["state"].as_str().map(str::to_string);
                app.final_status = a.body["app"]["finalStatus"].as_str().map(str::to_string);
                if s.is_none() {
                    Some("the RM's answer has no app.state".to_string())
                } else {
                    app.state = s;
                    None
                }
            }
            Ok(a) if a.status == 404 => Some("the RM does not know it (404)".to_string()),
            Ok(a) => Some(format!("the RM answered HTTP {}", a.status)),
            Err(e) => Some(format!("no ResourceManager answered: {e}")),
        };
        (app, why)
    }

    /// Asks the RM to kill the application and waits (202 → the same
    /// request again) until it answers 200, within ten request timeouts.
    pub async fn kill(&self, id: &str) -> Result<(), String> {
        if !is_app_id(id) {
            return Err("not an application id".into());
        }
        let path = format!("/ws/v1/cluster/apps/{id}/state");
        let body = serde_json::json!({ "state": "KILLED" });
        let deadline = tokio::time::Instant::now() + self.timeout * 10;
        let mut pause = Duration::from_millis(200);
        loop {
            let a = self
                .call(reqwest::Method::PUT, &path, Some(&body))
                .await
                .map_err(|e| format!("no ResourceManager answered: {e}"))?;
            match a.status {
                200 => return Ok(()),
                202 => {}
                403 => {
                    return Err(
                        "the RM refused (403): the user (yarn.user) may not kill it".to_string()
                    )
                }
                s => return Err(format!("the RM answered HTTP {s}: {}", a.body)),
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err("the kill was accepted (202) but had not completed in time".into());
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

/// `loc` (a Location header) against the URL it answered.
fn absolute(url: &str, loc: &str) -> String {
    if loc.starts_with("http://") || loc.starts_with("https://") {
        return loc.to_string();
    }
    let origin_end = url
        .find("://")
        .map(|i| i + 3)
        .and_then(|s| url[s..].find('/').map(|j| s + j))
        .unwrap_or(url.len());
    format!("{}/{}", &url[..origin_end], loc.trim_start_matches('/'))
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One learned id: a line appended to `remote-apps.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    pub task_id: i64,
    pub app_id: String,
    /// The worker whose agent reported it.
    pub host: String,
    pub learned_at: Instant,
}

/// A line of `remote-apps.jsonl` as read: an appended [`Learned`] (one id),
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
struct Entry {
    ids: BTreeSet<String>,
    /// The worker whose agent reported the newest id.
    host: String,
    /// When its newest id was learned.
    learned_at: Instant,
}

impl Entry {
    fn add(&mut self, ids: impl IntoIterator<Item = String>, host: &str, at: Instant) {
        self.ids.extend(ids);
        if at >= self.learned_at {
            self.learned_at = at;
            if !host.is_empty() {
                self.host = host.to_string();
            }
        }
    }
}

/// A task's ids are forgotten (compaction drops them) only when both hold:
/// its newest id was learned this long ago ...
pub const FORGET_LEARNED_AGO: Duration = Duration::from_secs(7 * 24 * 3600);
/// ... and its row has been missing from every full scan's live rows, and
/// from every agent's listing, for this long while this daemon ran.
pub const FORGET_ABSENT_FOR: Duration = Duration::from_secs(24 * 3600);
/// The file is rewritten once it has this many lines more than twice its tasks.
const GROWTH_SLACK: usize = 1_000;

type Tasks = BTreeMap<i64, Entry>;

/// What the file (and a compaction's leftover temp file) hold.
struct Read {
    tasks: Tasks,
    lines: usize,
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
fn read_all(path: &Path, now: Instant) -> std::io::Result<Read> {
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
fn write_atomically(path: &Path, tasks: &Tasks) -> std::io::Result<()> {
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

    /// Reads what earlier runs learned (see [`read_into`]). A file that
    /// cannot be read is logged, and the daemon goes on with what the agents
    /// report. Nothing is written here: see [`KnownApps::own`].
    pub fn load(path: PathBuf) -> KnownApps {
        let now = chrono::Utc::now();
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
    pub fn own(&self) -> std::io::Result<()> {
        self.st().owner = true;
        self.compact(&BTreeSet::new(), chrono::Utc::now())
            .map(|_| ())
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
            if let Err(e) = self.compact(&BTreeSet::new(), chrono::Utc::now()) {
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

/// Appends `buf` to `path` with fsync, on a fresh line after a torn one.
fn append(path: &Path, buf: &[u8]) -> std::io::Result<()> {
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

#[cfg(test)]
mod tests;
