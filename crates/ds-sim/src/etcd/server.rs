//! A private etcd for tests that stop, kill or pause it (never the shared
//! one): one member on free loopback ports with its own data directory, the
//! same command as `deploy/dev/services.sh`, killed on drop. The data
//! directory survives restarts, so revisions and leases do too.

use anyhow::{bail, Context};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct PrivateEtcd {
    port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Whether the `etcd` binary is on the PATH.
pub fn available() -> bool {
    Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl PrivateEtcd {
    /// Starts a member on free loopback ports and waits until it is healthy.
    pub async fn start() -> anyhow::Result<PrivateEtcd> {
        let dir = tempfile::Builder::new().prefix("ds-sim-etcd-").tempdir()?;
        let (port, peer_port) = loop {
            let (a, b) = (free_port()?, free_port()?);
            if a != b {
                break (a, b);
            }
        };
        let mut e = PrivateEtcd {
            port,
            peer_port,
            dir,
            child: None,
        };
        e.start_again().await?;
        Ok(e)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// (Re)starts the member on the same ports and data directory.
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("private etcd on port {} is already running", self.port);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "private"])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("private={peer}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting etcd for a private server")?;
        self.child = Some(child);
        let start = Instant::now();
        loop {
            if self.healthy().await {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    self.child = None;
                    bail!(
                        "private etcd exited with {status}; log: {}",
                        self.log_path().display()
                    );
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                bail!(
                    "private etcd not ready after {READY_TIMEOUT:?}; log: {}",
                    self.log_path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Answers a status request within a second.
    pub async fn healthy(&self) -> bool {
        super::healthy(&self.endpoints(), Duration::from_secs(1)).await
    }

    /// Graceful stop (SIGTERM, then SIGKILL after 10 s).
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        signal(pid, "TERM")?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Some(c) = self.child.as_mut() {
                if c.try_wait()?.is_some() {
                    self.child = None;
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.kill9().await
    }

    /// SIGKILL, as a crash.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// SIGSTOP: the server stops answering but keeps its connections open.
    pub fn pause(&self) -> anyhow::Result<()> {
        match self.pid() {
            Some(pid) => signal(pid, "STOP"),
            None => bail!("private etcd is not running"),
        }
    }

    /// SIGCONT.
    pub fn resume(&self) -> anyhow::Result<()> {
        match self.pid() {
            Some(pid) => signal(pid, "CONT"),
            None => bail!("private etcd is not running"),
        }
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // a paused process must be continued to die of SIGKILL promptly
            let _ = signal(c.id(), "CONT");
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?;
    if !st.success() {
        bail!("kill -{sig} {pid} failed: {st}");
    }
    Ok(())
}
