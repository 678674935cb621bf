//! The `ds-reaper` binary as a process of the simulation: started with a
//! config file, watched through its HTTP endpoints, stopped with SIGTERM.
//! The end-to-end tests, the demo and the benchmarks all drive it through
//! this one implementation.

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How often a wait looks again: short enough that a test does not idle, long
/// enough that polling the daemon's endpoints is no load on it.
const POLL_EVERY: Duration = Duration::from_millis(150);

/// A port nobody listens on right now (the kernel's choice), for a daemon's
/// or an agent's `listen`.
/// The start every ds-reaper config written by the simulator shares: the
/// line detected, times in UTC, the ZooKeeper registry at `zk` under `root`
/// with the given session timeout (e.g. "10s").
pub fn zk_header(zk: &str, root: &str, session_timeout: &str) -> String {
    format!(
        "[dolphinscheduler]\nversion = \"auto\"\ntime_zone = \"UTC\"\n\
         [zookeeper]\nconnect = \"{zk}\"\nroot = \"{root}\"\nsession_timeout = \"{session_timeout}\"\n"
    )
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Calls `f` until it yields a value, `timeout` at most.
pub async fn poll<F, Fut, T>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Calls `f` until it says yes, `timeout` at most.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    poll(what, timeout, || {
        let check = f();
        async move { Ok(check.await?.then_some(())) }
    })
    .await
}

/// The value of one series (its exact name with labels) in a Prometheus text
/// exposition.
pub fn metric_value(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// The records of an audit file (JSON lines); a line that does not parse
/// (one being appended) is left out.
pub fn read_audit(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// How to start one `ds-reaper` process.
pub struct Spawn<'a> {
    pub bin: &'a Path,
    pub config: &'a Path,
    /// `run` or `agent`.
    pub command: &'a str,
    /// Where its stdout and stderr go.
    pub log: &'a Path,
    /// The port of its `listen` address (for the HTTP helpers).
    pub port: u16,
    pub env: &'a [(&'a str, &'a str)],
    /// How long the `wait_*` helpers wait before failing.
    pub patience: Duration,
}

/// A running `ds-reaper run` or `ds-reaper agent`; killed when dropped.
pub struct ReaperProcess {
    pub child: tokio::process::Child,
    pub port: u16,
    pub log: PathBuf,
    pub patience: Duration,
    bin: PathBuf,
    config: PathBuf,
    command: String,
    client: reqwest::Client,
}

fn start(
    bin: &Path,
    config: &Path,
    command: &str,
    log: std::fs::File,
    env: &[(&str, &str)],
) -> Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("--config")
        .arg(config)
        .arg(command)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn()
        .with_context(|| format!("starting {} {command}", bin.display()))
}

impl ReaperProcess {
    pub fn spawn(s: Spawn<'_>) -> Result<ReaperProcess> {
        let log = std::fs::File::create(s.log)
            .with_context(|| format!("creating {}", s.log.display()))?;
        let child = start(s.bin, s.config, s.command, log, s.env)?;
        Ok(ReaperProcess {
            child,
            port: s.port,
            log: s.log.to_path_buf(),
            patience: s.patience,
            bin: s.bin.to_path_buf(),
            config: s.config.to_path_buf(),
            command: s.command.to_string(),
            client: reqwest::Client::new(),
        })
    }

    /// SIGKILL (a crash), then the same command again on the same config and
    /// port, its log appended to the old one; returns once it serves HTTP.
    pub async fn crash_and_restart(&mut self, env: &[(&str, &str)]) -> Result<()> {
        self.kill().await?;
        let log = std::fs::OpenOptions::new().append(true).open(&self.log)?;
        self.child = start(&self.bin, &self.config, &self.command, log, env)?;
        self.wait_http().await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of its log, for an error message.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// GET: (status, body).
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        let r = self.client.get(self.url(path)).send().await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    /// GET of a JSON endpoint; any status but 200 is an error.
    pub async fn json(&self, path: &str) -> Result<Value> {
        let (code, body) = self.get(path).await?;
        if code != 200 {
            bail!("GET {path}: {code} {body}");
        }
        Ok(serde_json::from_str(&body)?)
    }

    /// POST with an optional bearer token: (status, body).
    pub async fn post(&self, path: &str, token: Option<&str>, body: &str) -> Result<(u16, String)> {
        let mut rq = self.client.post(self.url(path)).body(body.to_string());
        if let Some(t) = token {
            rq = rq.bearer_auth(t);
        }
        let r = rq.send().await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    /// A series of its `/metrics`, if present.
    pub async fn metric(&self, series: &str) -> Result<Option<f64>> {
        let (_, text) = self.get("/metrics").await?;
        Ok(metric_value(&text, series))
    }

    /// A series' value, 0 when absent (a counter never incremented).
    pub async fn metric0(&self, series: &str) -> Result<f64> {
        Ok(self.metric(series).await?.unwrap_or(0.0))
    }

    /// Waits until `series` satisfies `pred`; its value then.
    pub async fn wait_metric(&self, series: &str, pred: impl Fn(f64) -> bool) -> Result<f64> {
        let r = poll(&format!("metric {series}"), self.patience, || async {
            Ok(self.metric(series).await?.filter(|v| pred(*v)))
        })
        .await;
        match r {
            Ok(v) => Ok(v),
            Err(e) => bail!(
                "{e} (last value {:?}); log:\n{}",
                self.metric(series).await.ok().flatten(),
                self.log_tail(60)
            ),
        }
    }

    /// Waits until `/healthz` answers (the process is up and serving).
    pub async fn wait_http(&self) -> Result<()> {
        let r = poll("/healthz", self.patience, || async {
            Ok(matches!(self.get("/healthz").await, Ok((200, _))).then_some(()))
        })
        .await;
        r.with_context(|| format!("ds-reaper did not answer; log:\n{}", self.log_tail(60)))
    }

    /// Waits until it is ready and a sweep has completed; its status then.
    pub async fn wait_ready(&self) -> Result<Value> {
        let r = poll(
            "ready (a valid registry view) and one sweep done",
            self.patience,
            || async {
                if let Ok((200, _)) = self.get("/readyz").await {
                    let s = self.json("/api/v1/status").await?;
                    if s["last_sweep"]["result"] == "ok" {
                        return Ok(Some(s));
                    }
                }
                Ok(None)
            },
        )
        .await;
        r.with_context(|| format!("ds-reaper never became ready; log:\n{}", self.log_tail(60)))
    }

    /// Waits until `n` more sweeps have succeeded.
    pub async fn wait_sweeps(&self, n: u32) -> Result<()> {
        let series = "ds_reaper_sweeps_total{result=\"ok\"}";
        let start = self.metric0(series).await?;
        self.wait_metric(series, |v| v >= start + f64::from(n))
            .await
            .map(|_| ())
    }

    /// SIGTERM, then its exit code (None when killed by a signal).
    pub async fn stop(&mut self) -> Result<Option<i32>> {
        if let Some(pid) = self.child.id() {
            std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()?;
        }
        let st = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .context("ds-reaper did not stop within 30 s of SIGTERM")??;
        Ok(st.code())
    }

    /// SIGKILL, as a crash; returns once it is gone.
    pub async fn kill(&mut self) -> Result<()> {
        // An already exited child refuses the signal; that is still "gone".
        let _ = self.child.start_kill();
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .context("ds-reaper did not die on SIGKILL")??;
        Ok(())
    }
}

/// The `ds-reaper` binary next to the running executable (both built by one
/// `cargo build`), unless a path is given.
pub fn binary_beside_me(given: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p);
    }
    let me = std::env::current_exe()?;
    let p = me
        .parent()
        .context("no directory for the running executable")?
        .join("ds-reaper");
    if !p.exists() {
        bail!(
            "{} not found: build it (cargo build --release -p reaper) or pass its path",
            p.display()
        );
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_found_by_its_exact_name() {
        let text = "# TYPE ds_reaper_leader gauge\nds_reaper_leader 1\n\
                    ds_reaper_sweeps_total{result=\"ok\"} 7\nds_reaper_sweeps_total{result=\"error\"} 2\n";
        assert_eq!(metric_value(text, "ds_reaper_leader"), Some(1.0));
        assert_eq!(
            metric_value(text, "ds_reaper_sweeps_total{result=\"error\"}"),
            Some(2.0)
        );
        assert_eq!(metric_value(text, "ds_reaper_sweeps_total"), None);
        assert_eq!(metric_value(text, "ds_reaper_lead"), None);
    }

    #[tokio::test]
    async fn poll_returns_the_first_value_and_times_out_with_its_subject() {
        let mut n = 0;
        let v = poll("three calls", Duration::from_secs(5), || {
            n += 1;
            let k = n;
            async move { Ok((k == 3).then_some(k)) }
        })
        .await
        .unwrap();
        assert_eq!(v, 3);
        let e = wait_until("never", Duration::from_millis(10), || async { Ok(false) })
            .await
            .unwrap_err();
        assert!(e.to_string().contains("waiting for: never"), "{e}");
    }

    #[test]
    fn unparsable_audit_lines_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        std::fs::write(&p, "{\"event\":\"intent\"}\n{\"event\":\"do").unwrap();
        let records = read_audit(&p);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0]["event"], "intent");
    }
}
