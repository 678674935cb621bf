//! A private ZooKeeper server for tests that stop, kill or pause it (never the
//! shared one): its own loopback port and data directory, the same command as
//! `deploy/dev/services.sh`, killed on drop.

use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const JAVA_CP: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";
const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct PrivateZk {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PrivateZk {
    /// Starts a server on a free loopback port and waits until it answers `ruok`.
    /// `tickTime` is 500 ms so sessions may be as short as 1 s (max 10 s).
    pub async fn start() -> anyhow::Result<PrivateZk> {
        let dir = tempfile::Builder::new().prefix("ds-sim-zk-").tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        std::fs::create_dir_all(dir.path().join("data"))?;
        let cfg = format!(
            "tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=60000\ndataDir={}\nclientPort={port}\n\
             clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=*\n",
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("zoo.cfg"), cfg)?;
        let mut zk = PrivateZk {
            port,
            dir,
            child: None,
        };
        zk.start_again().await?;
        Ok(zk)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// (Re)starts the server on the same port and data directory.
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("private ZooKeeper on port {} is already running", self.port);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("zookeeper.log"))?;
        let child = Command::new("java")
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-cp", JAVA_CP])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(self.dir.path().join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting java for a private ZooKeeper")?;
        self.child = Some(child);
        let start = Instant::now();
        loop {
            if ruok(self.port).await {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    self.child = None;
                    bail!(
                        "private ZooKeeper exited with {status}; log: {}",
                        self.log_path().display()
                    );
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                bail!(
                    "private ZooKeeper not ready after {READY_TIMEOUT:?}; log: {}",
                    self.log_path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("zookeeper.log")
    }

    /// Graceful stop (SIGTERM, then SIGKILL after 10 s).
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let Some(pid) = self.pid() else { return Ok(()) };
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
            None => bail!("private ZooKeeper is not running"),
        }
    }

    /// SIGCONT.
    pub fn resume(&self) -> anyhow::Result<()> {
        match self.pid() {
            Some(pid) => signal(pid, "CONT"),
            None => bail!("private ZooKeeper is not running"),
        }
    }
}

impl Drop for PrivateZk {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
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

/// ZooKeeper's four-letter `ruok` → `imok`.
pub async fn ruok(port: u16) -> bool {
    four_letter(port, "ruok").await.as_deref() == Some("imok")
}

/// Sends a four-letter command (`ruok`, `mntr`, `cons`, ...) and returns the reply.
pub async fn four_letter(port: u16, cmd: &str) -> Option<String> {
    let cmd = cmd.to_string();
    tokio::task::spawn_blocking(move || {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_millis(1000))).ok()?;
        s.write_all(cmd.as_bytes()).ok()?;
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf);
        Some(buf)
    })
    .await
    .ok()
    .flatten()
}

impl PrivateZk {
    /// `zk_num_alive_connections` from `mntr`.
    pub async fn alive_connections(&self) -> Option<u64> {
        let m = four_letter(self.port, "mntr").await?;
        m.lines()
            .find_map(|l| l.strip_prefix("zk_num_alive_connections"))
            .and_then(|v| v.trim().parse().ok())
    }
}
