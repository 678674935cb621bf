//! The ResourceManagers' REST client: each configured RM asked in turn,
//! redirects followed by hand.

use crate::config::yarn::Yarn;
use reaper_core::remote::{is_app_id, RemoteApp};
use std::sync::atomic::{AtomicUsize, Ordering};
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
pub(super) fn absolute(url: &str, loc: &str) -> String {
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
