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

/// One learned id: a line of `remote-apps.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    pub task_id: i64,
    pub app_id: String,
    /// The worker whose agent reported it.
    pub host: String,
    pub learned_at: Instant,
}

/// The ids learned per task instance, on disk and in memory.
pub struct KnownApps {
    path: PathBuf,
    by_task: Mutex<BTreeMap<i64, BTreeSet<String>>>,
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

    /// Reads what earlier runs learned. A line that is not a learned id
    /// (torn by a crash, edited by hand) is skipped and logged; a file that
    /// cannot be read is logged, and the daemon goes on with what the agents
    /// report.
    pub fn load(path: PathBuf) -> KnownApps {
        let mut by_task: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
        match std::fs::File::open(&path) {
            Ok(f) => {
                let mut skipped = 0usize;
                for (n, line) in std::io::BufReader::new(f).split(b'\n').enumerate() {
                    let line = match line {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(path = %path.display(), error = %e, "cannot read the remote applications file further");
                            break;
                        }
                    };
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    match serde_json::from_slice::<Learned>(&line) {
                        Ok(l) if is_app_id(&l.app_id) => {
                            by_task.entry(l.task_id).or_default().insert(l.app_id);
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
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "cannot read the remote applications file");
            }
        }
        KnownApps {
            path,
            by_task: Mutex::new(by_task),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, BTreeSet<String>>> {
        self.by_task.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn ids(&self, task_id: i64) -> BTreeSet<String> {
        self.map().get(&task_id).cloned().unwrap_or_default()
    }

    /// Which of `found` are new.
    pub fn unknown(&self, found: Vec<Learned>) -> Vec<Learned> {
        let m = self.map();
        let mut seen = BTreeSet::new();
        found
            .into_iter()
            .filter(|l| {
                is_app_id(&l.app_id)
                    && !m.get(&l.task_id).is_some_and(|s| s.contains(&l.app_id))
                    && seen.insert((l.task_id, l.app_id.clone()))
            })
            .collect()
    }

    /// Appends and fsyncs `new`, then remembers them. Blocking. On failure
    /// nothing is remembered: the agents' next reports bring them again.
    pub fn learn(&self, new: &[Learned]) -> std::io::Result<()> {
        if new.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for l in new {
            serde_json::to_writer(&mut buf, l).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path)?;
        // a torn last line from a crash: start ours on a fresh one
        let len = f.metadata()?.len();
        if len > 0 {
            use std::io::{Read, Seek, SeekFrom};
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(len - 1))?;
            f.read_exact(&mut last)?;
            if last[0] != b'\n' {
                buf.insert(0, b'\n');
            }
        }
        f.write_all(&buf)?;
        f.sync_data()?;
        let mut m = self.map();
        for l in new {
            m.entry(l.task_id).or_default().insert(l.app_id.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
