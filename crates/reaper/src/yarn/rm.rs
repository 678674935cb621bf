//! The ResourceManagers' REST client: each configured RM asked in turn,
//! redirects followed by hand.

use crate::config::yarn::Yarn;
use reaper_core::ports::{AppAnswer, BoxFuture, PortError, ResourceManager};
use reaper_core::remote::{is_app_id, RemoteApp};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Redirects followed per request (a standby to the active, at most twice).
const MAX_HOPS: usize = 3;

/// The most of an RM's answer that is read (SPEC §17): a larger body is no
/// answer, whatever it says.
const MAX_BODY: usize = 1 << 20;

/// Why an RM call came back with no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum RmError {
    /// Every configured RM tried: why each gave no answer (`url: why`).
    #[error("{}", .0.join("; "))]
    NoAnswer(Vec<String>),
    #[error("not an application id")]
    NotAnAppId,
    #[error("no ResourceManager answered: {0}")]
    Unreached(Box<RmError>),
    #[error("the RM refused (403): the user (yarn.user) may not kill it")]
    Forbidden,
    #[error("the RM answered HTTP {status}: {body}")]
    Status {
        status: u16,
        body: serde_json::Value,
    },
    #[error("the kill was accepted (202) but had not completed in time")]
    KillPending,
    #[error("an answer over {MAX_BODY} bytes")]
    TooLarge,
    #[error("the answer broke off: {0}")]
    BrokeOff(reqwest::Error),
    #[error("an answer that is not JSON: {0}")]
    NotJson(serde_json::Error),
}

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
    ) -> Result<Answer, RmError> {
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
                            let next = absolute(&url, &l);
                            // only to an RM of the configuration: a redirect
                            // elsewhere could make anything "the RM's answer"
                            if !self.bases.iter().any(|b| same_origin(b, &next)) {
                                why.push(format!(
                                    "{url}: redirect to {next}, not a configured ResourceManager"
                                ));
                                break;
                            }
                            hops += 1;
                            url = self.with_user(&next);
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
                let body = match read_body(resp).await {
                    Ok(b) => b,
                    // only a 200's body is believed; other answers are judged by their status
                    Err(e) if status == 200 => {
                        why.push(format!("{url}: {e}"));
                        break;
                    }
                    Err(_) => serde_json::Value::Null,
                };
                self.preferred.store(i, Ordering::Relaxed);
                return Ok(Answer { status, body });
            }
        }
        Err(RmError::NoAnswer(why))
    }

    /// The application's state as the RM says it; `state: None` when it
    /// cannot be known (no RM answered, 404: an id the RM does not know or
    /// no longer keeps is unknown, never finished).
    pub async fn app(&self, id: &str) -> (RemoteApp, Option<String>) {
        let mut app = RemoteApp::unknown(id);
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
                let answered = &a.body["app"];
                let s = answered["state"].as_str().map(str::to_string);
                if answered["id"].as_str() != Some(id) {
                    // believed only when it names the id asked (SPEC §17)
                    Some(format!(
                        "the RM's answer names {:?}, not the application asked",
                        answered["id"].as_str().unwrap_or("no id")
                    ))
                } else if s.is_none() {
                    Some("the RM's answer has no app.state".to_string())
                } else {
                    app.state = s;
                    app.final_status = answered["finalStatus"].as_str().map(str::to_string);
                    app.started_time = answered["startedTime"].as_i64().filter(|t| *t > 0);
                    app.user = answered["user"].as_str().map(str::to_string);
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
    pub async fn kill(&self, id: &str) -> Result<(), RmError> {
        if !is_app_id(id) {
            return Err(RmError::NotAnAppId);
        }
        let path = format!("/ws/v1/cluster/apps/{id}/state");
        let body = serde_json::json!({ "state": "KILLED" });
        let deadline = tokio::time::Instant::now() + self.timeout * 10;
        let mut pause = Duration::from_millis(200);
        loop {
            let a = self
                .call(reqwest::Method::PUT, &path, Some(&body))
                .await
                .map_err(|e| RmError::Unreached(Box::new(e)))?;
            match a.status {
                200 => return Ok(()),
                202 => {}
                403 => return Err(RmError::Forbidden),
                status => {
                    return Err(RmError::Status {
                        status,
                        body: a.body,
                    })
                }
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(RmError::KillPending);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

impl ResourceManager for Rm {
    fn app<'a>(&'a self, id: &'a str) -> BoxFuture<'a, AppAnswer> {
        Box::pin(async move {
            let (app, unknown_why) = Rm::app(self, id).await;
            AppAnswer { app, unknown_why }
        })
    }

    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move { Rm::kill(self, id).await.map_err(PortError::unavailable) })
    }
}

/// An answer's body as JSON, read only up to [`MAX_BODY`]: a larger or
/// non-JSON body is no answer.
async fn read_body(mut resp: reqwest::Response) -> Result<serde_json::Value, RmError> {
    if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
        return Err(RmError::TooLarge);
    }
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(RmError::BrokeOff)? {
        if buf.len() + chunk.len() > MAX_BODY {
            return Err(RmError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    if buf.iter().all(u8::is_ascii_whitespace) {
        // a 202 or a 404 may come with no body at all
        return Ok(serde_json::Value::Null);
    }
    serde_json::from_slice(&buf).map_err(RmError::NotJson)
}

/// Whether `url` is on the origin (scheme, host, port) of the RM `base`.
fn same_origin(base: &str, url: &str) -> bool {
    let origin = |u: &str| {
        let rest = u.split_once("://").map(|(_, r)| r).unwrap_or(u);
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        host.to_ascii_lowercase()
    };
    url.starts_with("http://") && origin(base) == origin(url)
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
