//! The shipped alert rules against a real Prometheus server: a worker dies,
//! `DsReaperZombiesPresent` fires; the zombie is reaped through the API, the
//! alert resolves. Rules come from `deploy/prometheus/render-alerts.sh` with a
//! short `for:` so the test does not wait the production 10 minutes.

use anyhow::{bail, Context, Result};
use ds_sim::db::{SimKind, TaskSpec, WorkflowSpec};
use ds_sim::reaper::poll;
use ds_sim::zk::SimServer;
use reaper_core::NodeKind;
use reaper_e2e::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const ALERT: &str = "DsReaperZombiesPresent";
/// Prometheus needs a few scrapes and evaluations on a loaded machine.
const ALERT_WAIT: Duration = Duration::from_secs(180);

/// A Prometheus server of the test's own, killed on drop.
struct Prometheus {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
    log: PathBuf,
}

impl Prometheus {
    fn start(target_port: u16, for_duration: &str) -> Result<Prometheus> {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = tempfile::Builder::new().prefix("dsr-prom-").tempdir()?;
        let rules = dir.path().join("alerts.yml");
        let out = std::process::Command::new("bash")
            .arg(repo.join("deploy/prometheus/render-alerts.sh"))
            .arg(for_duration)
            .output()
            .context("running render-alerts.sh")?;
        if !out.status.success() {
            bail!(
                "render-alerts.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::write(&rules, &out.stdout)?;
        let cfg = dir.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: ds-reaper\n    scrape_interval: 1s\n    \
                 static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n",
                rules = rules.display()
            ),
        )?;
        let port = free_port();
        let log = dir.path().join("prometheus.log");
        let logf = std::fs::File::create(&log)?;
        let child = std::process::Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .spawn()
            .context("starting prometheus")?;
        Ok(Prometheus {
            child,
            port,
            _dir: dir,
            log,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The state of `name` in `/api/v1/alerts` (`pending`, `firing`), None when inactive.
    async fn alert_state(&self, name: &str) -> Result<Option<String>> {
        let v: serde_json::Value = reqwest::get(self.url("/api/v1/alerts"))
            .await?
            .json()
            .await?;
        Ok(v["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == name)
            .filter_map(|a| a["state"].as_str().map(str::to_string))
            .max_by_key(|s| s == "firing"))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus_installed() -> bool {
    if Path::new(PROMETHEUS).exists() {
        return true;
    }
    let msg = format!("{PROMETHEUS} missing (apt-get install prometheus)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg} (CI=true)");
    }
    eprintln!("SKIPPED: {msg}");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombies_alert_fires_in_prometheus_and_resolves_after_reaping() -> Result<()> {
    if !services_up().await || !prometheus_installed() {
        return Ok(());
    }
    let db = sim_db(SimKind::MySql, "3.2.2").await?;
    let line = db.line;
    let root = unique_root();
    let zk = zk_connect();
    let started = chrono::Utc::now() - chrono::Duration::hours(1);
    let _m = SimServer::register(
        &zk,
        &root,
        line,
        NodeKind::Master,
        "10.0.0.1:5678",
        &[],
        started,
    )
    .await?;
    let mut w1 = SimServer::register(
        &zk,
        &root,
        line,
        NodeKind::Worker,
        "10.0.0.11:1234",
        &[],
        started,
    )
    .await?;
    let _w2 = SimServer::register(
        &zk,
        &root,
        line,
        NodeKind::Worker,
        "10.0.0.12:1234",
        &[],
        started,
    )
    .await?;
    let wf = db.insert_workflow(&WorkflowSpec::default()).await?;
    let submit = (chrono::Utc::now() - chrono::Duration::minutes(5)).naive_utc();
    let mut spec = TaskSpec::new(wf, 1, Some("10.0.0.11:1234"));
    spec.submit_time = Some(submit);
    spec.start_time = Some(submit);
    let t1 = db.insert_task(&spec).await?;
    spec.host = Some("10.0.0.12:1234".into());
    let t2 = db.insert_task(&spec).await?;

    let tok_dir = tempfile::tempdir()?;
    let token = "prometheus-test-token";
    let tok_file = tok_dir.path().join("token");
    std::fs::write(&tok_file, token)?;
    let tok_path = tok_file.display().to_string();
    // report-only: the alert must fire because nothing reaps the zombie by itself
    let d = Daemon::start_with_env(
        db.url(),
        &root,
        "[policy]\nworker_lost = \"report\"\n",
        &[("DS_REAPER__HTTP__TOKEN_FILE", tok_path.as_str())],
    )
    .await?;
    d.wait_ready().await?;

    let prom = Prometheus::start(d.port, "2s")?;
    poll("prometheus ready", Duration::from_secs(60), || async {
        Ok(match reqwest::get(prom.url("/-/ready")).await {
            Ok(r) if r.status().is_success() => Some(()),
            _ => None,
        })
    })
    .await
    .with_context(|| prom.log_text())?;
    // The target must be scraped healthily before the death, so the firing
    // time measured below is the alert's, not the first scrape's.
    poll("ds-reaper target up", Duration::from_secs(60), || async {
        let v: serde_json::Value = reqwest::get(prom.url("/api/v1/query?query=up"))
            .await?
            .json()
            .await?;
        Ok((v["data"]["result"][0]["value"][1] == "1").then_some(()))
    })
    .await
    .with_context(|| prom.log_text())?;
    assert_eq!(
        prom.alert_state(ALERT).await?,
        None,
        "no zombie yet, no alert"
    );

    let died = Instant::now();
    w1.crash().await;
    poll("DsReaperZombiesPresent firing", ALERT_WAIT, || async {
        Ok((prom.alert_state(ALERT).await?.as_deref() == Some("firing")).then_some(()))
    })
    .await
    .with_context(|| format!("daemon log:\n{}", d.log_text()))?;
    let fired_after = died.elapsed();
    println!(
        "TIMING: worker death → {ALERT} firing in Prometheus: {:.1} s \
         (grace 2 s, sweep 1 s, scrape/eval 1 s, rendered for: 2s)",
        fired_after.as_secs_f64()
    );
    assert_eq!(db.task_state(t1).await?.state, 1, "report-only: no write");

    let (code, body) = d
        .post(
            &format!("/api/v1/tasks/{t1}/reap"),
            Some(token),
            r#"{"action":"fail"}"#,
        )
        .await?;
    assert_eq!(code, 200, "reap answered {code}: {body}");
    let rec: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(rec["task_id"], t1, "{rec}");
    assert_eq!(rec["actor"], "api", "{rec}");
    assert_eq!(db.task_state(t1).await?.state, 6);
    assert_eq!(
        db.task_state(t2).await?.state,
        1,
        "live worker's task untouched"
    );

    let reaped = Instant::now();
    poll("DsReaperZombiesPresent resolved", ALERT_WAIT, || async {
        Ok((prom.alert_state(ALERT).await?.is_none()).then_some(()))
    })
    .await
    .with_context(|| format!("daemon log:\n{}", d.log_text()))?;
    println!(
        "TIMING: reap → {ALERT} inactive: {:.1} s",
        reaped.elapsed().as_secs_f64()
    );

    drop(prom);
    let mut d = d;
    assert_eq!(d.terminate().await?, Some(0));
    let _ = ds_sim::zk::delete_tree(&zk, &root).await;
    db.drop().await?;
    Ok(())
}
