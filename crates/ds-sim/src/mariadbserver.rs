//! A private MariaDB server for the soak's database restarts (never the
//! shared one): its own loopback port, data directory and socket, started as
//! `deploy/dev/services.sh` starts the shared server, killed on drop.

use anyhow::{bail, Context};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(90);

pub struct PrivateMariaDb {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PrivateMariaDb {
    /// Initialises a data directory, starts the server on a free loopback
    /// port and creates the `ds`/`ds` user the simulator and ds-reaper use.
    pub async fn start() -> anyhow::Result<PrivateMariaDb> {
        let dir = tempfile::Builder::new().prefix("ds-sim-my-").tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let data = dir.path().join("data");
        let out = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--user=root", "--skip-test-db"])
            .arg("--auth-root-authentication-method=socket")
            .arg(format!("--datadir={}", data.display()))
            .stdin(Stdio::null())
            .output()
            .context("running mariadb-install-db")?;
        if !out.status.success() {
            bail!(
                "mariadb-install-db failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut db = PrivateMariaDb {
            port,
            dir,
            child: None,
        };
        db.start_again().await?;
        let sql = "CREATE USER IF NOT EXISTS 'ds'@'127.0.0.1' IDENTIFIED BY 'ds'; \
                   GRANT ALL ON *.* TO 'ds'@'127.0.0.1';";
        let st = Command::new("mariadb")
            .args(["--no-defaults", "-uroot"])
            .arg(format!("--socket={}", db.socket().display()))
            .args(["-e", sql])
            .status()
            .context("creating the ds user")?;
        if !st.success() {
            bail!("creating the ds user in the private MariaDB failed");
        }
        Ok(db)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://ds:ds@127.0.0.1:<port>` (no database).
    pub fn server_url(&self) -> String {
        format!("mysql://ds:ds@127.0.0.1:{}", self.port)
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("mysqld.sock")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("error.log")
    }

    fn ping(&self) -> bool {
        Command::new("mariadb-admin")
            .args(["--no-defaults", "-uroot", "--connect-timeout=1"])
            .arg(format!("--socket={}", self.socket().display()))
            .arg("ping")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// (Re)starts the server on the same port and data directory and waits
    /// until it answers.
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("private MariaDB on port {} is already running", self.port);
        }
        let d = self.dir.path();
        let child = Command::new("mariadbd")
            .args(["--no-defaults", "--user=root"])
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--pid-file={}", d.join("mysqld.pid").display()))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .arg(format!("--log-error={}", self.log_path().display()))
            .args([
                "--innodb-buffer-pool-size=32M",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci",
                "--max-connections=300",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting mariadbd")?;
        self.child = Some(child);
        let start = Instant::now();
        loop {
            if self.ping() {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    self.child = None;
                    bail!(
                        "private MariaDB exited with {st}; log: {}",
                        self.log_path().display()
                    );
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                bail!(
                    "private MariaDB not ready after {READY_TIMEOUT:?}; log: {}",
                    self.log_path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL, as a crash (InnoDB recovers committed work on the next start).
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
